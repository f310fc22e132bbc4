/* Collective bandwidth by message size, for scripts/bench/comm.sh and
 * scripts/gpu/comm_check.sh:
 *
 *   mpirun -np N bench_comm titan|mpi|both|nccl [MAX_BYTES]
 *
 * "titan" goes through lib/comm's MPI implementation (comm_init,
 * comm_all_gather, ...: the layer's own cost: its thread level, watchdog,
 * requests and polling wait); "mpi" is the plain MPI program doing the same
 * (MPI_Init, the blocking collectives; all-to-all-v with an equal part for
 * each rank); "both" runs the two in one titan process, their rounds in
 * turn, MPI's on MPI_COMM_WORLD: the layer's calls against MPI's under the
 * same thread level, and under the same drift of a shared machine's speed,
 * which separate programs see at different times; "nccl" is lib/comm's NCCL
 * implementation on device buffers, each rank on its local rank's GPU.
 * The timing is shared: a barrier, then enough repetitions for 0.2 s (on a
 * GPU, until the stream has finished them), the slowest rank's time, the best
 * of 3.  Rank 0 prints, per operation and size (the whole buffer, nccl-tests'
 * "size"), seconds per call, the algorithm bandwidth (size / time) and the
 * bus bandwidth in GB/s (nccl-tests' busbw: algbw x (n-1)/n, x 2(n-1)/n for
 * all-reduce; 0 for one rank, which moves nothing between ranks), a line
 * each: "OP BYTES SECONDS ALGBW BUSBW"; "both" prints two such lines,
 * "titan" and "mpi" in front of each, best of 5 rounds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#if TITAN_CUDA
#include <cuda_runtime.h>
#endif

enum { AG, RS, AR, A2AV, OPS };
static const char *const op_names[OPS] = {"all_gather", "reduce_scatter", "all_reduce",
					  "all_to_allv"};

static comm *world; /* NULL in the plain MPI mode */
static comm *c;     /* what is measured: world, or the NCCL communicator */
static int plain;   /* "both": this round calls MPI's collectives, not c's */

/* All-to-all-v's counts and displacements (elements; an equal part to and
 * from each rank, as MoE's token exchange when balanced), in both forms. */
static size_t *zcounts, *zdispls;
static int *icounts, *idispls;

static void set_parts(size_t part, int n)
{
	for (int j = 0; j < n; j++) {
		zcounts[j] = part;
		zdispls[j] = (size_t)j * part;
		icounts[j] = (int)part;
		idispls[j] = (int)((size_t)j * part);
	}
}

static int call_titan(int op, float *send, float *recv, size_t total, size_t part)
{
	titan_err e;
	int rc = op == AG ? comm_all_gather(c, send, recv, part, COMM_F32, &e)
	       : op == RS ? comm_reduce_scatter(c, send, recv, part, COMM_F32, COMM_SUM, &e)
	       : op == AR ? comm_all_reduce(c, send, recv, total, COMM_F32, COMM_SUM, &e)
			  : comm_all_to_allv(c, send, zcounts, zdispls, recv, zcounts, zdispls,
					     COMM_F32, &e);
	if (rc != 0)
		fprintf(stderr, "bench_comm: %s\n", e.msg);
	return rc;
}

/* One call of op on `bytes` of float32 in total (the gathered buffer, the
 * scattered input, the reduced buffer, all-to-all-v's send buffer). */
static int call(int op, float *send, float *recv, size_t bytes, int n)
{
	size_t total = bytes / sizeof(float), part = total / (size_t)n;
	if (op == A2AV)
		set_parts(part, n);
	if (c != NULL && !plain)
		return call_titan(op, send, recv, total, part);
	int rc = op == AG ? MPI_Allgather(send, (int)part, MPI_FLOAT, recv, (int)part, MPI_FLOAT,
					  MPI_COMM_WORLD)
	       : op == RS ? MPI_Reduce_scatter_block(send, recv, (int)part, MPI_FLOAT, MPI_SUM,
						     MPI_COMM_WORLD)
	       : op == AR ? MPI_Allreduce(send, recv, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
			  : MPI_Alltoallv(send, icounts, idispls, MPI_FLOAT, recv, icounts, idispls,
					  MPI_FLOAT, MPI_COMM_WORLD);
	return rc == MPI_SUCCESS ? 0 : -1;
}

/* Seconds per call: the slowest rank's, best of `rounds` rounds of `reps` calls. */
static double timed(int op, float *send, float *recv, size_t bytes, int n, int reps, int rounds)
{
	double best = 1e30;
	for (int round = 0; round < rounds; round++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		titan_err e;
		for (int i = 0; i < reps; i++)
			if (call(op, send, recv, bytes, n) != 0)
				return -1;
		if (c != NULL && !plain && comm_sync(c, &e) != 0) {
			fprintf(stderr, "bench_comm: %s\n", e.msg);
			return -1;
		}
		double mine = (MPI_Wtime() - t0) / reps, slowest;
		MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (slowest < best)
			best = slowest;
	}
	return best;
}

/* "OP BYTES SECONDS ALGBW BUSBW", after `who` when not empty. */
static void report(const char *who, int op, size_t b, double t, int n)
{
	/* all-to-all-v: nccl-tests' alltoall factor, (n-1)/n */
	double factor = op == AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
	double algbw = (double)b / t / 1e9;
	printf("%s%s%s %zu %.9f %.4f %.4f\n", who, *who ? " " : "", op_names[op], b, t, algbw,
	       algbw * factor);
}

/* Times op on b bytes and prints it (rank 0); with both, the layer's rounds
 * and MPI's in turn, 5 each. */
static int measure(int op, float *send, float *recv, size_t b, int n, int rank, int both)
{
	/* Repetitions for about 0.2 s, from one warm-up call's time (at most
	 * 100,000: a call of a few KiB takes about a microsecond; the 2,000 of
	 * before made such a round last 2-3 ms, less than a scheduler's tick,
	 * and its best of 3 a matter of luck on a shared machine). */
	double one = timed(op, send, recv, b, n, 1, 3);
	int reps = one > 0 ? (int)(0.2 / one) + 1 : 1;
	reps = reps > 100000 ? 100000 : reps;
	if (!both) {
		double t = timed(op, send, recv, b, n, reps, 3);
		if (t >= 0 && rank == 0)
			report("", op, b, t, n);
		return t < 0;
	}
	double best[2] = {1e30, 1e30};
	for (int round = 0; round < 10; round++) {
		plain = round % 2;
		double t = timed(op, send, recv, b, n, reps, 1);
		if (t < 0)
			return 1;
		if (t < best[plain])
			best[plain] = t;
	}
	plain = 0;
	if (rank == 0) {
		report("titan", op, b, best[0], n);
		report("mpi", op, b, best[1], n);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (strcmp(mode, "titan") != 0 && strcmp(mode, "mpi") != 0 && strcmp(mode, "both") != 0 &&
	    strcmp(mode, "nccl") != 0) {
		fprintf(stderr, "usage: bench_comm titan|mpi|both|nccl [MAX_BYTES]\n");
		return 2;
	}
	size_t max = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)64 << 20;
	titan_err e;
	if (strcmp(mode, "mpi") == 0) {
		MPI_Init(&argc, &argv);
	} else if (comm_init(&argc, &argv, 300, &world, &e) != 0) {
		fprintf(stderr, "bench_comm: %s\n", e.msg);
		return 1;
	}
	c = world;
	int n, rank, rc = 0;
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	float *send = NULL, *recv = NULL;
	zcounts = malloc(2 * (size_t)n * sizeof *zcounts);
	icounts = malloc(2 * (size_t)n * sizeof *icounts);
	if (zcounts == NULL || icounts == NULL) {
		fprintf(stderr, "bench_comm: out of memory\n");
		return 1;
	}
	zdispls = zcounts + n;
	idispls = icounts + n;
	if (strcmp(mode, "nccl") == 0) {
#if TITAN_CUDA
		int ngpu = 0;
		cudaGetDeviceCount(&ngpu);
		int dev = ngpu > 0 ? comm_local_rank(world) % ngpu : 0;
		if (comm_nccl_create(world, dev, NULL, "nccl", &c, &e) != 0 ||
		    cudaMalloc((void **)&send, max) != cudaSuccess ||
		    cudaMalloc((void **)&recv, max) != cudaSuccess ||
		    cudaMemset(send, 0, max) != cudaSuccess || cudaMemset(recv, 0, max) != cudaSuccess) {
			fprintf(stderr, "bench_comm: NCCL on device %d: %s\n", dev, e.msg);
			rc = 1;
		}
#else
		fprintf(stderr, "bench_comm: nccl: built without CUDA (CUDA=0)\n");
		rc = 1;
#endif
	} else {
		send = malloc(max);
		recv = malloc(max);
		rc = send == NULL || recv == NULL;
		if (!rc) {
			memset(send, 0, max);
			memset(recv, 0, max);
		}
	}
	for (size_t bytes = 4096; !rc && bytes <= max; bytes *= 8) {
		size_t b = bytes / (sizeof(float) * (size_t)n) * sizeof(float) * (size_t)n;
		for (int op = 0; op < OPS && !rc; op++)
			rc = measure(op, send, recv, b, n, rank, strcmp(mode, "both") == 0);
	}
	if (c != world) {
#if TITAN_CUDA
		cudaFree(send);
		cudaFree(recv);
#endif
	} else {
		free(send);
		free(recv);
	}
	free(zcounts);
	free(icounts);
	if (world != NULL)
		comm_finalize(world);
	else
		MPI_Finalize();
	return rc;
}
