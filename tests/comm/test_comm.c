/* Tests of lib/comm's MPI implementation at any world size: run alone it is a
 * world of one; tests/comm/mpi.sh runs it under mpirun with 2, 3 and 4 ranks.
 *
 * Every rank fills its buffers from a seeded generator of its rank, so each
 * rank can compute what every collective must return from the generator
 * alone, in float64 (the reference).  Values are small integers, so float32
 * and float64 sums are exact in any reduction order; bfloat16 sums are
 * checked against the exact sum rounded once, by a rounding written here
 * independently of the library's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/bf16.h"

static comm *world;
static const uint64_t seed = 20261203;

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Element i of rank r's buffer in test t: an integer in [-100, 100]
 * (in [0, 200] for uint8). */
static int64_t val(int r, int t, size_t i)
{
	return (int64_t)(mix(seed ^ mix(((uint64_t)r << 40) ^ ((uint64_t)t << 32) ^ i)) % 201) - 100;
}

/* The nearest bfloat16 of x by comparing the two neighbours (ties: even). */
static double nearest_bf16(double x)
{
	if (x == 0)
		return x;
	int ex;
	frexp(x, &ex);              /* |x| in [2^(ex-1), 2^ex) */
	double ulp = ldexp(1, ex - 8); /* 8 significant bits */
	double lo = floor(x / ulp) * ulp, hi = lo + ulp;
	double dl = x - lo, dh = hi - x;
	if (dl < dh)
		return lo;
	if (dh < dl)
		return hi;
	return fmod(fabs(lo / ulp), 2) == 0 ? lo : hi;
}

static void put(void *buf, comm_dtype t, size_t i, double v)
{
	switch (t) {
	case COMM_F32: ((float *)buf)[i] = (float)v; break;
	case COMM_F64: ((double *)buf)[i] = v; break;
	case COMM_BF16: ((uint16_t *)buf)[i] = bf16_from_f32((float)v); break;
	case COMM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case COMM_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
	default: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	}
}

static double get(const void *buf, comm_dtype t, size_t i)
{
	switch (t) {
	case COMM_F32: return ((const float *)buf)[i];
	case COMM_F64: return ((const double *)buf)[i];
	case COMM_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
	case COMM_I32: return ((const int32_t *)buf)[i];
	case COMM_I64: return (double)((const int64_t *)buf)[i];
	default: return ((const uint8_t *)buf)[i];
	}
}

static double gen(comm_dtype t, int r, int test, size_t i)
{
	int64_t v = val(r, test, i);
	return t == COMM_U8 ? (double)(v + 100) : (double)v;
}

static void fill(void *buf, comm_dtype t, size_t n, int r, int test)
{
	for (size_t i = 0; i < n; i++)
		put(buf, t, i, gen(t, r, test, i));
}

static void *poisoned(size_t bytes)
{
	void *p = malloc(bytes > 0 ? bytes : 1);
	assert_non_null(p);
	memset(p, 0xa5, bytes);
	return p;
}

static void ok(int rc, const titan_err *e)
{
	if (rc != 0)
		fail_msg("%s", e->msg);
}

static uint64_t sent(comm *c, comm_op op)
{
	return comm_get_stats(c)->bytes_sent[op];
}

static const comm_dtype all_types[] = {COMM_F32, COMM_F64, COMM_BF16, COMM_I32, COMM_I64, COMM_U8};
static const size_t counts[] = {0, 1, 7, 4099, 70001};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static void all_gather_concatenates_in_rank_order(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 1;
	print_message("seed %llu, %d ranks\n", (unsigned long long)seed, n);
	for (size_t k = 0; k < N_OF(all_types); k++)
		for (size_t ci = 0; ci < N_OF(counts); ci++) {
			comm_dtype t = all_types[k];
			size_t c = counts[ci], es = comm_dtype_size(t);
			void *send = poisoned(c * es), *recv = poisoned(c * es * (size_t)n);
			fill(send, t, c, me, test);
			titan_err e;
			uint64_t before = sent(world, COMM_OP_ALL_GATHER);
			ok(comm_all_gather(world, send, recv, c, t, &e), &e);
			for (int r = 0; r < n; r++)
				for (size_t i = 0; i < c; i++)
					if (get(recv, t, (size_t)r * c + i) != gen(t, r, test, i))
						fail_msg("%s count %zu: rank %d element %zu = %g, want %g",
							 comm_dtype_name(t), c, r, i, get(recv, t, (size_t)r * c + i),
							 gen(t, r, test, i));
			assert_int_equal(sent(world, COMM_OP_ALL_GATHER) - before, (uint64_t)(n - 1) * c * es);
			/* In place: our part already sits at recv + me * count. */
			memset(recv, 0xa5, c * es * (size_t)n);
			memcpy((char *)recv + (size_t)me * c * es, send, c * es);
			ok(comm_all_gather(world, (char *)recv + (size_t)me * c * es, recv, c, t, &e), &e);
			for (int r = 0; r < n; r++)
				for (size_t i = 0; i < c; i++)
					assert_true(get(recv, t, (size_t)r * c + i) == gen(t, r, test, i));
			free(send);
			free(recv);
		}
}

static double reduce_ref(comm_redop op, comm_dtype t, int n, int test, size_t i)
{
	double acc = gen(t, 0, test, i);
	for (int r = 1; r < n; r++) {
		double v = gen(t, r, test, i);
		acc = op == COMM_SUM ? acc + v : op == COMM_MAX ? fmax(acc, v) : fmin(acc, v);
	}
	return t == COMM_BF16 ? nearest_bf16(acc) : acc;
}

static const comm_dtype reduce_types[] = {COMM_F32, COMM_F64, COMM_BF16, COMM_I32, COMM_I64};
static const comm_redop ops[] = {COMM_SUM, COMM_MAX, COMM_MIN};

static void reduce_scatter_reduces_each_ranks_block(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 2;
	for (size_t k = 0; k < N_OF(reduce_types); k++)
		for (size_t o = 0; o < N_OF(ops); o++)
			for (size_t ci = 0; ci < N_OF(counts); ci++) {
				comm_dtype t = reduce_types[k];
				size_t c = counts[ci], es = comm_dtype_size(t);
				void *send = poisoned(c * es * (size_t)n), *recv = poisoned(c * es);
				fill(send, t, c * (size_t)n, me, test);
				titan_err e;
				uint64_t before = sent(world, COMM_OP_REDUCE_SCATTER);
				ok(comm_reduce_scatter(world, send, recv, c, t, ops[o], &e), &e);
				for (size_t i = 0; i < c; i++) {
					double want = reduce_ref(ops[o], t, n, test, (size_t)me * c + i);
					if (get(recv, t, i) != want)
						fail_msg("%s op %d count %zu: element %zu = %.17g, want %.17g",
							 comm_dtype_name(t), (int)ops[o], c, i, get(recv, t, i), want);
				}
				assert_int_equal(sent(world, COMM_OP_REDUCE_SCATTER) - before,
						 (uint64_t)(n - 1) * c * es);
				free(send);
				free(recv);
			}
}

static void all_reduce_matches_the_float64_reference(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 3;
	for (size_t k = 0; k < N_OF(reduce_types); k++)
		for (size_t o = 0; o < N_OF(ops); o++)
			for (size_t ci = 0; ci < N_OF(counts); ci++) {
				comm_dtype t = reduce_types[k];
				size_t c = counts[ci], es = comm_dtype_size(t);
				void *send = poisoned(c * es), *recv = poisoned(c * es);
				fill(send, t, c, me, test);
				titan_err e;
				uint64_t before = sent(world, COMM_OP_ALL_REDUCE);
				ok(comm_all_reduce(world, send, recv, c, t, ops[o], &e), &e);
				/* In place as well: the result replaces send. */
				ok(comm_all_reduce(world, send, send, c, t, ops[o], &e), &e);
				for (size_t i = 0; i < c; i++) {
					double want = reduce_ref(ops[o], t, n, test, i);
					if (get(recv, t, i) != want || get(send, t, i) != want)
						fail_msg("%s op %d count %zu: element %zu = %.17g / %.17g in place, "
							 "want %.17g", comm_dtype_name(t), (int)ops[o], c, i,
							 get(recv, t, i), get(send, t, i), want);
				}
				uint64_t b = c * es, nn = (uint64_t)n;
				assert_int_equal(sent(world, COMM_OP_ALL_REDUCE) - before, 2 * (2 * (nn - 1) * b / nn));
				free(send);
				free(recv);
			}
}

static void broadcast_copies_the_roots_buffer(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 4;
	size_t c = 4099;
	for (int root = 0; root < n; root++) {
		double *buf = poisoned(c * sizeof *buf);
		if (me == root)
			fill(buf, COMM_F64, c, root, test);
		titan_err e;
		uint64_t before = sent(world, COMM_OP_BROADCAST);
		ok(comm_broadcast(world, buf, c, COMM_F64, root, &e), &e);
		for (size_t i = 0; i < c; i++)
			assert_true(buf[i] == gen(COMM_F64, root, test, i));
		int last = (root + n - 1) % n;
		assert_int_equal(sent(world, COMM_OP_BROADCAST) - before,
				 n > 1 && me != last ? c * sizeof *buf : 0);
		free(buf);
	}
}

/* A ring: each rank sends to the next and receives from the previous, in one
 * batch, then the same with blocking calls ordered so that none waits on
 * another (even ranks send first). */
static void send_and_recv_pass_a_ring(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 5;
	int next = (me + 1) % n, prev = (me + n - 1) % n;
	size_t c = 70001;
	float *out = poisoned(c * sizeof *out), *in = poisoned(c * sizeof *in);
	fill(out, COMM_F32, c, me, test);
	titan_err e;
	comm_p2p batch[2] = {{1, next, out, c, COMM_F32}, {0, prev, in, c, COMM_F32}};
	comm_req *r;
	uint64_t before = sent(world, COMM_OP_SEND);
	ok(comm_p2p_start(world, batch, 2, &r, &e), &e);
	ok(comm_wait(r, &e), &e);
	for (size_t i = 0; i < c; i++)
		assert_true(in[i] == gen(COMM_F32, prev, test, i));
	assert_int_equal(sent(world, COMM_OP_SEND) - before, c * sizeof(float));
	assert_int_equal(comm_get_stats(world)->bytes_sent[COMM_OP_RECV], 0);
	if (n > 1) {
		memset(in, 0, c * sizeof *in);
		if (me % 2 == 0) {
			ok(comm_send(world, out, c, COMM_F32, next, &e), &e);
			ok(comm_recv(world, in, c, COMM_F32, prev, &e), &e);
		} else {
			ok(comm_recv(world, in, c, COMM_F32, prev, &e), &e);
			ok(comm_send(world, out, c, COMM_F32, next, &e), &e);
		}
		for (size_t i = 0; i < c; i++)
			assert_true(in[i] == gen(COMM_F32, prev, test, i));
	}
	free(out);
	free(in);
}

static void all_to_all_transposes_the_blocks(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 6;
	size_t c = 1001;
	int32_t *send = poisoned(c * (size_t)n * 4), *recv = poisoned(c * (size_t)n * 4);
	fill(send, COMM_I32, c * (size_t)n, me, test);
	titan_err e;
	uint64_t before = sent(world, COMM_OP_ALL_TO_ALL);
	ok(comm_all_to_all(world, send, recv, c, COMM_I32, &e), &e);
	for (int j = 0; j < n; j++)
		for (size_t i = 0; i < c; i++)
			assert_true(recv[(size_t)j * c + i] == gen(COMM_I32, j, test, (size_t)me * c + i));
	assert_int_equal(sent(world, COMM_OP_ALL_TO_ALL) - before, (uint64_t)(n - 1) * c * 4);
	free(send);
	free(recv);
}

/* Rank i sends count(i, j) = (3i + j) % 4 * 5 elements to rank j (zero
 * sometimes), packed in j order; they land packed in i order. */
static size_t vcount(int i, int j)
{
	return (size_t)((3 * i + j) % 4) * 5;
}

static void all_to_allv_delivers_uneven_blocks(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 7;
	size_t *sc = calloc(4 * (size_t)n, sizeof *sc), *sd = sc + n, *rc = sd + n, *rd = rc + n;
	assert_non_null(sc);
	size_t stot = 0, rtot = 0, away = 0;
	for (int j = 0; j < n; j++) {
		sc[j] = vcount(me, j);
		sd[j] = stot;
		stot += sc[j];
		rc[j] = vcount(j, me);
		rd[j] = rtot;
		rtot += rc[j];
		if (j != me)
			away += sc[j];
	}
	double *send = poisoned(stot * 8), *recv = poisoned(rtot * 8);
	fill(send, COMM_F64, stot, me, test);
	titan_err e;
	uint64_t before = sent(world, COMM_OP_ALL_TO_ALLV);
	ok(comm_all_to_allv(world, send, sc, sd, recv, rc, rd, COMM_F64, &e), &e);
	for (int j = 0; j < n; j++) {
		size_t off = 0; /* where rank j packed our block */
		for (int k = 0; k < me; k++)
			off += vcount(j, k);
		for (size_t i = 0; i < rc[j]; i++)
			assert_true(recv[rd[j] + i] == gen(COMM_F64, j, test, off + i));
	}
	assert_int_equal(sent(world, COMM_OP_ALL_TO_ALLV) - before, away * 8);
	free(send);
	free(recv);
	free(sc);
}

/* Bytes of uneven lengths, 0 among them: every rank's, packed in rank order. */
static void all_gather_bytes_packs_uneven_lengths(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 8;
	size_t mine = (size_t)(me % 3) * 700; /* rank 0 (and 3) sends nothing */
	uint8_t *send = poisoned(mine + 1), *all;
	fill(send, COMM_U8, mine, me, test);
	size_t n_all, want = 0;
	titan_err e;
	ok(comm_all_gather_bytes(world, send, mine, &all, &n_all, &e), &e);
	for (int r = 0; r < n; r++) {
		size_t len = (size_t)(r % 3) * 700;
		for (size_t i = 0; i < len; i++)
			if (all[want + i] != gen(COMM_U8, r, test, i))
				fail_msg("rank %d byte %zu = %u, want %g", r, i, all[want + i],
					 gen(COMM_U8, r, test, i));
		want += len;
	}
	assert_int_equal(n_all, want);
	free(all);
	free(send);
}

/* Started operations finish in any order of waiting. */
static void started_operations_finish_in_any_order(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world), test = 8;
	size_t c = 65536;
	float *a = poisoned(c * 4), *ag = poisoned(c * 4 * (size_t)n);
	float *b = poisoned(c * 4 * (size_t)n), *rs = poisoned(c * 4);
	fill(a, COMM_F32, c, me, test);
	fill(b, COMM_F32, c * (size_t)n, me, test + 1);
	titan_err e;
	comm_req *r1, *r2;
	ok(comm_all_gather_start(world, a, ag, c, COMM_F32, &r1, &e), &e);
	ok(comm_reduce_scatter_start(world, b, rs, c, COMM_F32, COMM_SUM, &r2, &e), &e);
	ok(comm_wait(r2, &e), &e);
	ok(comm_wait(r1, &e), &e);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < c; i++)
			assert_true(ag[(size_t)r * c + i] == gen(COMM_F32, r, test, i));
	for (size_t i = 0; i < c; i++)
		assert_true(rs[i] == reduce_ref(COMM_SUM, COMM_F32, n, test + 1, (size_t)me * c + i));
	ok(comm_sync(world, &e), &e);
	free(a);
	free(ag);
	free(b);
	free(rs);
}

/* Split into odd and even ranks, ordered backwards by key. */
static void split_makes_groups_ordered_by_key(void **state)
{
	(void)state;
	int n = comm_size(world), me = comm_rank(world);
	comm *half;
	titan_err e;
	ok(comm_split(world, me % 2, -me, "half", &half, &e), &e);
	int members = (n - me % 2 + 1) / 2;
	assert_int_equal(comm_size(half), members);
	int32_t mine = me, *all = poisoned((size_t)members * 4);
	ok(comm_all_gather(half, &mine, all, 1, COMM_I32, &e), &e);
	for (int i = 0; i < members; i++) /* descending: key -rank */
		assert_int_equal(all[i], (members - 1 - i) * 2 + me % 2);
	assert_int_equal(all[comm_rank(half)], me);
	assert_int_equal(comm_get_stats(half)->calls[COMM_OP_ALL_GATHER], 1);
	comm_free(half);
	free(all);
	ok(comm_barrier(world, &e), &e);
}

static void bad_arguments_are_refused_with_a_message(void **state)
{
	(void)state;
	int n = comm_size(world);
	titan_err e;
	float x[8] = {0};
	assert_int_equal(comm_broadcast(world, x, 1, COMM_F32, n, &e), -1);
	assert_non_null(strstr(e.msg, "root"));
	assert_non_null(strstr(e.msg, "comm 'world'"));
	assert_int_equal(comm_send(world, x, 1, COMM_F32, -1, &e), -1);
	assert_non_null(strstr(e.msg, "peer -1"));
	assert_int_equal(comm_all_reduce(world, x, x, 1, (comm_dtype)99, COMM_SUM, &e), -1);
	assert_non_null(strstr(e.msg, "element type"));
	assert_int_equal(comm_all_reduce(world, x, x, 1, COMM_U8, COMM_SUM, &e), -1);
	assert_non_null(strstr(e.msg, "uint8"));
	assert_int_equal(comm_all_reduce(world, x, x + 1, 2, COMM_F32, COMM_SUM, &e), -1);
	assert_non_null(strstr(e.msg, "overlap"));
	assert_null(comm_failure(world)); /* refused before starting: nothing failed */
	assert_int_equal(comm_set_timeout(world, 0, &e), -1);
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 60, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(all_gather_concatenates_in_rank_order),
		cmocka_unit_test(reduce_scatter_reduces_each_ranks_block),
		cmocka_unit_test(all_reduce_matches_the_float64_reference),
		cmocka_unit_test(broadcast_copies_the_roots_buffer),
		cmocka_unit_test(send_and_recv_pass_a_ring),
		cmocka_unit_test(all_to_all_transposes_the_blocks),
		cmocka_unit_test(all_to_allv_delivers_uneven_blocks),
		cmocka_unit_test(all_gather_bytes_packs_uneven_lengths),
		cmocka_unit_test(started_operations_finish_in_any_order),
		cmocka_unit_test(split_makes_groups_ordered_by_key),
		cmocka_unit_test(bad_arguments_are_refused_with_a_message),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
