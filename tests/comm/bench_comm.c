/* Collective bandwidth by message size, for scripts/bench/comm.sh:
 *
 *   mpirun -np N bench_comm titan|mpi [MAX_BYTES]
 *
 * "titan" goes through lib/comm (comm_init, comm_all_gather, ...: the layer's
 * own cost: its thread level, watchdog, requests and polling wait); "mpi" is
 * the plain MPI program doing the same (MPI_Init, the blocking collectives).
 * The timing is shared: a barrier, then enough repetitions for 0.2 s, the
 * slowest rank's time, the best of 3.  Rank 0 prints, per operation and size
 * (the whole buffer, nccl-tests' "size"), seconds per call and the bus
 * bandwidth in GB/s (nccl-tests' busbw: algbw x (n-1)/n, x 2(n-1)/n for
 * all-reduce), a line each: "OP BYTES SECONDS BUSBW". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

enum { AG, RS, AR, OPS };
static const char *const op_names[OPS] = {"all_gather", "reduce_scatter", "all_reduce"};

static comm *world; /* NULL in the plain MPI mode */

/* One call of op on `bytes` of float32 in total (the gathered buffer, the
 * scattered input, the reduced buffer). */
static int call(int op, float *send, float *recv, size_t bytes, int n)
{
	size_t total = bytes / sizeof(float), part = total / (size_t)n;
	titan_err e;
	int rc;
	if (world != NULL) {
		rc = op == AG ? comm_all_gather(world, send, recv, part, COMM_F32, &e)
		   : op == RS ? comm_reduce_scatter(world, send, recv, part, COMM_F32, COMM_SUM, &e)
			      : comm_all_reduce(world, send, recv, total, COMM_F32, COMM_SUM, &e);
		if (rc != 0)
			fprintf(stderr, "bench_comm: %s\n", e.msg);
		return rc;
	}
	rc = op == AG ? MPI_Allgather(send, (int)part, MPI_FLOAT, recv, (int)part, MPI_FLOAT,
				      MPI_COMM_WORLD)
	   : op == RS ? MPI_Reduce_scatter_block(send, recv, (int)part, MPI_FLOAT, MPI_SUM,
						 MPI_COMM_WORLD)
		      : MPI_Allreduce(send, recv, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	return rc == MPI_SUCCESS ? 0 : -1;
}

/* Seconds per call: the slowest rank's, best of 3 rounds of `reps` calls. */
static double timed(int op, float *send, float *recv, size_t bytes, int n, int reps)
{
	double best = 1e30;
	for (int round = 0; round < 3; round++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < reps; i++)
			if (call(op, send, recv, bytes, n) != 0)
				return -1;
		double mine = (MPI_Wtime() - t0) / reps, slowest;
		MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (slowest < best)
			best = slowest;
	}
	return best;
}

int main(int argc, char **argv)
{
	if (argc < 2 || (strcmp(argv[1], "titan") != 0 && strcmp(argv[1], "mpi") != 0)) {
		fprintf(stderr, "usage: bench_comm titan|mpi [MAX_BYTES]\n");
		return 2;
	}
	size_t max = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)64 << 20;
	if (strcmp(argv[1], "titan") == 0) {
		titan_err e;
		if (comm_init(&argc, &argv, 300, &world, &e) != 0) {
			fprintf(stderr, "bench_comm: %s\n", e.msg);
			return 1;
		}
	} else {
		MPI_Init(&argc, &argv);
	}
	int n, rank;
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	float *send = malloc(max), *recv = malloc(max);
	int rc = send == NULL || recv == NULL;
	if (!rc) {
		memset(send, 0, max);
		memset(recv, 0, max);
	}
	for (size_t bytes = 4096; !rc && bytes <= max; bytes *= 8) {
		size_t b = bytes / (sizeof(float) * (size_t)n) * sizeof(float) * (size_t)n;
		for (int op = 0; op < OPS && !rc; op++) {
			/* Repetitions for about 0.2 s, from one warm-up call's time. */
			double one = timed(op, send, recv, b, n, 1);
			int reps = one > 0 ? (int)(0.2 / one) + 1 : 1;
			double t = timed(op, send, recv, b, n, reps > 2000 ? 2000 : reps);
			if (t < 0) {
				rc = 1;
				break;
			}
			double factor = op == AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
			if (rank == 0)
				printf("%s %zu %.9f %.4f\n", op_names[op], b, t, (double)b / t / 1e9 * factor);
		}
	}
	free(send);
	free(recv);
	if (world != NULL)
		comm_finalize(world);
	else
		MPI_Finalize();
	return rc;
}
