/* The NCCL implementation against its MPI twin: every collective on the same
 * data, on device buffers through NCCL and on host buffers through MPI, at a
 * world size of one, results and byte counts equal bit for bit.  Runs where a
 * CUDA device is present (scripts/gpu/comm_check.sh runs it on a GPU
 * machine) and is counted as skipped, saying why, everywhere else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/bf16.h"
#include "gpu/gpu.h"

#if TITAN_CUDA
#include <cuda_runtime.h>
#endif

static comm *world, *nccl;
static titan_err nccl_err; /* why comm_nccl_create failed */

/* Without a device: skip.  With one, a missing NCCL communicator fails. */
static void need_nccl(void)
{
	if (gpu_count() == 0) {
		print_message("# SKIP NCCL test: %s\n", gpu_why_none());
		skip();
	}
	if (nccl == NULL)
		fail_msg("a GPU is present but comm_nccl_create failed: %s", nccl_err.msg);
}

#if TITAN_CUDA

static const unsigned seed = 4242;

static void *dev(size_t bytes)
{
	void *p = NULL;
	assert_int_equal(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess);
	assert_int_equal(cudaMemset(p, 0xa5, bytes > 0 ? bytes : 1), cudaSuccess); /* poison */
	return p;
}

static void to_dev(void *d, const void *h, size_t bytes)
{
	assert_int_equal(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

/* Wait for the communicator, then read back over the compute stream (the
 * default one here), which comm_wait ordered after the operation. */
static void from_dev(void *h, const void *d, size_t bytes)
{
	titan_err e;
	if (comm_sync(nccl, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

static void fill(void *buf, size_t bytes)
{
	uint8_t *b = buf;
	for (size_t i = 0; i < bytes; i++)
		b[i] = (uint8_t)(rand() >> 7);
}

/* Random bit patterns are NaNs and infinities too: keep the floats finite
 * small integers, which MPI and NCCL reduce alike. */
static void fill_values(void *buf, comm_dtype t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = rand() % 201 - 100;
		switch (t) {
		case COMM_F32: ((float *)buf)[i] = (float)v; break;
		case COMM_F64: ((double *)buf)[i] = v; break;
		case COMM_BF16: ((uint16_t *)buf)[i] = bf16_from_f32((float)v); break;
		case COMM_I32: ((int32_t *)buf)[i] = v; break;
		case COMM_I64: ((int64_t *)buf)[i] = v; break;
		default: ((uint8_t *)buf)[i] = (uint8_t)(v + 100); break;
		}
	}
}

enum { AG, RS, AR_SUM, AR_MAX, BC, A2A, A2AV, P2P, NOPS };
static const char *const names[NOPS] = {"all_gather", "reduce_scatter", "all_reduce sum",
					"all_reduce max", "broadcast", "all_to_all",
					"all_to_allv", "send+recv"};

/* Run op on c with buffers send/recv of count elements. */
static int run(comm *c, int op, void *send, void *recv, size_t count, comm_dtype t, titan_err *e)
{
	size_t zero = 0, cnt = count;
	comm_p2p pair[2] = {{1, 0, send, count, t}, {0, 0, recv, count, t}};
	comm_req *r;
	switch (op) {
	case AG: return comm_all_gather(c, send, recv, count, t, e);
	case RS: return comm_reduce_scatter(c, send, recv, count, t, COMM_SUM, e);
	case AR_SUM: return comm_all_reduce(c, send, recv, count, t, COMM_SUM, e);
	case AR_MAX: return comm_all_reduce(c, send, recv, count, t, COMM_MAX, e);
	case BC: return comm_broadcast(c, send, count, t, 0, e);
	case A2A: return comm_all_to_all(c, send, recv, count, t, e);
	case A2AV: return comm_all_to_allv(c, send, &cnt, &zero, recv, &cnt, &zero, t, e);
	default:
		if (comm_p2p_start(c, pair, 2, &r, e) != 0)
			return -1;
		return comm_wait(r, e);
	}
}

static void every_collective_matches_its_mpi_twin(void **state)
{
	(void)state;
	need_nccl();
	const comm_dtype types[] = {COMM_F32, COMM_F64, COMM_BF16, COMM_I32, COMM_I64, COMM_U8};
	const size_t counts[] = {1, 1000, 1 << 20};
	srand(seed);
	print_message("seed %u\n", seed);
	for (int op = 0; op < NOPS; op++)
		for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
			for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
				comm_dtype t = types[k];
				if ((op == RS || op == AR_SUM || op == AR_MAX) && t == COMM_U8)
					continue;
				size_t n = counts[ci], bytes = n * comm_dtype_size(t);
				uint8_t *hs = malloc(bytes), *hr = malloc(bytes), *back = malloc(bytes);
				assert_non_null(hs);
				assert_non_null(hr);
				assert_non_null(back);
				fill_values(hs, t, n);
				fill(hr, bytes);
				void *ds = dev(bytes), *dr = dev(bytes);
				to_dev(ds, hs, bytes);
				to_dev(dr, hr, bytes);
				titan_err e;
				if (run(world, op, hs, hr, n, t, &e) != 0 || run(nccl, op, ds, dr, n, t, &e) != 0)
					fail_msg("%s %s: %s", names[op], comm_dtype_name(t), e.msg);
				const void *want = op == BC ? (const void *)hs : hr;
				from_dev(back, op == BC ? ds : dr, bytes);
				if (memcmp(back, want, bytes) != 0)
					fail_msg("%s %s x %zu: NCCL and MPI differ", names[op], comm_dtype_name(t), n);
				cudaFree(ds);
				cudaFree(dr);
				free(hs);
				free(hr);
				free(back);
			}
	/* The same operations counted the same on both. */
	const comm_stats *a = comm_get_stats(world), *b = comm_get_stats(nccl);
	for (int op = 0; op < COMM_OP_COUNT; op++) {
		assert_int_equal(a->calls[op], b->calls[op]);
		assert_int_equal(a->bytes_sent[op], b->bytes_sent[op]);
	}
}

/* Work queued on the compute stream before an operation is what it reads. */
static void operations_follow_the_compute_stream(void **state)
{
	(void)state;
	need_nccl();
	size_t n = 1 << 22;
	float *d = dev(n * sizeof *d), *out = dev(n * sizeof *out), *h = malloc(n * sizeof *h);
	assert_non_null(h);
	assert_int_equal(cudaMemsetAsync(d, 0, n * sizeof *d, 0), cudaSuccess);
	titan_err e;
	if (comm_all_reduce(nccl, d, out, n, COMM_F32, COMM_SUM, &e) != 0)
		fail_msg("%s", e.msg);
	from_dev(h, out, n * sizeof *h);
	for (size_t i = 0; i < n; i++)
		assert_true(h[i] == 0.0f);
	if (comm_barrier(nccl, &e) != 0)
		fail_msg("%s", e.msg);
	cudaFree(d);
	cudaFree(out);
	free(h);
}

static void a_split_of_the_nccl_communicator_works(void **state)
{
	(void)state;
	need_nccl();
	comm *half;
	titan_err e;
	if (comm_split(nccl, 0, 0, "half", &half, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(comm_size(half), 1);
	double x = 3.5, *d = dev(sizeof x), y = 0;
	to_dev(d, &x, sizeof x);
	if (comm_all_reduce(half, d, d, 1, COMM_F64, COMM_SUM, &e) != 0 || comm_sync(half, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(cudaMemcpy(&y, d, sizeof y, cudaMemcpyDeviceToHost), cudaSuccess);
	assert_true(y == 3.5);
	cudaFree(d);
	comm_free(half);
}

#else /* no CUDA: only the skips */

static void every_collective_matches_its_mpi_twin(void **state)
{
	(void)state;
	need_nccl();
}

static void operations_follow_the_compute_stream(void **state)
{
	(void)state;
	need_nccl();
}

static void a_split_of_the_nccl_communicator_works(void **state)
{
	(void)state;
	need_nccl();
}

#endif

static void without_cuda_the_nccl_path_says_so(void **state)
{
	(void)state;
	if (comm_have_nccl())
		skip();
	comm *c = NULL;
	titan_err e;
	assert_int_equal(comm_nccl_create(world, 0, NULL, "x", &c, &e), -1);
	assert_string_equal(e.msg, "NCCL: built without CUDA (CUDA=0)");
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 120, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	if (gpu_count() > 0 && comm_nccl_create(world, 0, NULL, "nccl", &nccl, &nccl_err) != 0)
		nccl = NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_collective_matches_its_mpi_twin),
		cmocka_unit_test(operations_follow_the_compute_stream),
		cmocka_unit_test(a_split_of_the_nccl_communicator_works),
		cmocka_unit_test(without_cuda_the_nccl_path_says_so),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
