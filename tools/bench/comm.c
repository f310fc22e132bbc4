/* titan-bench comm: the comm layer's collectives (lib/comm: all-gather,
 * reduce-scatter, all-reduce over every rank, float32) against the same
 * collectives called on the MPI library directly, in the same run, by
 * message size.  Run under mpirun with two ranks or more; rank 0 reports.
 *
 * Every rank runs the same number of calls: one call is timed first and the
 * slowest rank's time decides the repetitions; each measurement is the
 * slowest rank's time of those calls between barriers, the best of three.
 * Bandwidths are nccl-tests': algbw = size / time, busbw = algbw x (n-1)/n
 * (x 2(n-1)/n for all-reduce), size the whole buffer. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "comm/comm.h"

enum { AG, RS, AR, OPS };
static const char *const OP_NAME[OPS] = {"all_gather", "reduce_scatter", "all_reduce"};

typedef struct comm_run {
	comm *c;   /* NULL: the MPI library directly */
	int op, n;
	float *send, *recv;
	size_t count; /* floats in the whole buffer */
	titan_err *e;
	int failed;
} comm_run;

static void call(comm_run *r)
{
	size_t part = r->count / (size_t)r->n;
	int rc;
	if (r->c == NULL) {
		MPI_Comm w = MPI_COMM_WORLD;
		rc = r->op == AG   ? MPI_Allgather(r->send, (int)part, MPI_FLOAT, r->recv, (int)part,
						   MPI_FLOAT, w)
		     : r->op == RS ? MPI_Reduce_scatter_block(r->send, r->recv, (int)part, MPI_FLOAT,
							      MPI_SUM, w)
				   : MPI_Allreduce(r->send, r->recv, (int)r->count, MPI_FLOAT, MPI_SUM, w);
		if (rc != MPI_SUCCESS && !r->failed)
			r->failed = err_set(r->e, "MPI %s failed (%d)", OP_NAME[r->op], rc);
		return;
	}
	rc = r->op == AG   ? comm_all_gather(r->c, r->send, r->recv, part, COMM_F32, r->e)
	     : r->op == RS ? comm_reduce_scatter(r->c, r->send, r->recv, part, COMM_F32, COMM_SUM,
						 r->e)
			   : comm_all_reduce(r->c, r->send, r->recv, r->count, COMM_F32, COMM_SUM,
					     r->e);
	if (rc && !r->failed)
		r->failed = -1;
}

/* The slowest rank's seconds for reps calls. */
static double timed(comm_run *r, int reps)
{
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = bench_now();
	for (int i = 0; i < reps; i++)
		call(r);
	double t = bench_now() - t0, worst;
	MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return worst;
}

/* Seconds per call: repetitions for at least min_s, the best of 3. */
static double per_call(comm_run *r, double min_s)
{
	double one = timed(r, 1); /* also the warm-up */
	int reps = one > 0 ? (int)(min_s / 3 / one) + 1 : 1;
	reps = reps > 100000 ? 100000 : reps;
	double best = 0;
	for (int k = 0; k < 3; k++) {
		double t = timed(r, reps) / reps;
		best = k == 0 || t < best ? t : best;
	}
	return best;
}

static double busbw(int op, size_t bytes, double s, int n)
{
	double alg = (double)bytes / s / 1e9;
	return op == AR ? alg * 2.0 * (n - 1) / n : alg * (double)(n - 1) / n;
}

static int measure(comm *world, const bench_args *a, report *rep, titan_err *e)
{
	int n = comm_size(world);
	size_t max = (size_t)a->size, lo = 4096 * (size_t)n;
	float *send = malloc(max), *recv = malloc(max);
	if (!send || !recv) {
		free(send);
		free(recv);
		return err_set(e, "comm: out of memory for %zu-byte buffers", max);
	}
	for (size_t i = 0; i < max / sizeof(float); i++)
		send[i] = (float)(i % 1000) * 1e-3f;
	int rc = 0;
	for (size_t bytes = lo; bytes <= max && rc == 0; bytes *= 4)
		for (int op = 0; op < OPS && rc == 0; op++) {
			/* the whole buffer: n parts of equal size */
			size_t count = bytes / sizeof(float) / (size_t)n * (size_t)n;
			comm_run t = {world, op, n, send, recv, count, e, 0};
			comm_run m = {NULL, op, n, send, recv, count, e, 0};
			double st = per_call(&t, a->seconds), sm = per_call(&m, a->seconds);
			if (t.failed || m.failed) {
				rc = -1;
				break;
			}
			size_t b = count * sizeof(float);
			json_t *row = report_row(rep);
			rset(row, "op", json_string(OP_NAME[op]));
			rset(row, "bytes", json_integer((json_int_t)b));
			rset(row, "titan_us", json_real(st * 1e6));
			rset(row, "titan_busbw", json_real(busbw(op, b, st, n)));
			rset(row, "mpi_us", json_real(sm * 1e6));
			rset(row, "mpi_busbw", json_real(busbw(op, b, sm, n)));
			rset(row, "ratio", json_real(sm / st));
		}
	free(send);
	free(recv);
	return rc;
}

int bench_comm(const bench_args *a, titan_err *e)
{
	comm *world;
	if (comm_init(NULL, NULL, 120, &world, e))
		return -1;
	int rank = comm_rank(world), n = comm_size(world), rc = 0;
	report rep;
	if (report_init(&rep, "comm", a, e)) {
		comm_finalize(world);
		return -1;
	}
	if (n < 2)
		report_unavailable(&rep, "collectives", "one rank: run titan-bench comm under mpirun "
				   "-np N (N >= 2)");
	else
		rc = measure(world, a, &rep, e);
	if (strcmp(a->device, "cuda") != 0)
		report_unavailable(&rep, "nccl", "--device cpu: the MPI implementation is measured; "
				   "NCCL's needs --device cuda");
	else
		report_unavailable(&rep, "nccl", bench_cuda_unavailable());
	report_note(&rep, "%d ranks, float32 buffers in host memory, size = the whole buffer; "
		    "busbw as nccl-tests (algbw (n-1)/n, all-reduce 2(n-1)/n); ratio = MPI's "
		    "time / titan's (below 1: the comm layer costs more); slowest rank, best of 3 "
		    "runs of at least %.2f s", n, a->seconds);
	static const report_col cols[] = {
		{"op", "op", NULL},          {"bytes", "bytes", NULL},
		{"titan_us", "titan us", "%.1f"}, {"titan_busbw", "titan GB/s", "%.3f"},
		{"mpi_us", "MPI us", "%.1f"},     {"mpi_busbw", "MPI GB/s", "%.3f"},
		{"ratio", "ratio", "%.2f"},
	};
	if (rc == 0 && rank == 0)
		rc = report_emit(&rep, cols, sizeof cols / sizeof cols[0], a->json, e);
	report_free(&rep);
	if (rc == 0)
		comm_finalize(world);
	else
		comm_abort(world, 1);
	return rc;
}
