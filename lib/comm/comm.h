/* comm.h: collectives between the processes (ranks) of a job, each on a
 * communicator: a group of ranks, the whole world or one dimension of the
 * device mesh (mesh.h).
 *
 * One interface, two implementations behind an ops table (like backend.h's):
 * - MPI, on host buffers, for the CPU backend; it is also what starts the job,
 *   tells each process its rank and bootstraps NCCL;
 * - NCCL, on device buffers, for the CUDA backend: its operations run on a
 *   stream of their own, ordered after the work already queued on the
 *   backend's compute stream, so communication overlaps compute.
 * A world of one process is an ordinary communicator of size 1.
 *
 * Every operation exists in a blocking form, comm_X(), and a nonblocking one,
 * comm_X_start(), that returns a request to finish with comm_wait().  Ranks
 * must start the operations of one communicator in the same order (as MPI and
 * NCCL require); requests may be waited for in any order.  After comm_wait a
 * result may be used: at once on the host (MPI), by work queued after the
 * call on the compute stream (NCCL; comm_sync blocks the host until then).
 *
 * Failures end in an error, never in a hang: each operation has a deadline
 * (the timeout in force when it started, comm_set_timeout), and a watchdog
 * thread notices a rank of the same node that has died.  The first failure is
 * kept by the process (comm_failure) and every later operation reports it; the
 * program then prints it and calls comm_abort, which ends every rank.
 *
 * Counting: each communicator counts, per operation kind, the calls and the
 * bytes this rank sends under the bandwidth-optimal ring algorithm, the
 * figure the plans' formulas in titan-train(1) are written in.  With n ranks
 * and B the bytes of the buffer named:
 *   all-gather       (n-1) * B          B: this rank's send buffer
 *   reduce-scatter   (n-1) * B          B: this rank's receive buffer
 *   all-reduce       2 (n-1) B / n      (rounded down to a whole byte)
 *   broadcast        B on every rank but the last of the ring (root - 1 mod n)
 *   send             B; recv: 0
 *   all-to-all(v)    the bytes addressed to the other ranks
 *   barrier          0
 * Sizes are logical: an element counts its type's size, though the MPI side
 * reduces bfloat16 in float32 and so moves twice that on the wire. */
#ifndef TITAN_COMM_H
#define TITAN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum comm_dtype {
	COMM_F32,
	COMM_F64,
	COMM_BF16, /* reductions in float32, rounded to nearest even once at the end (MPI) */
	COMM_I32,
	COMM_I64,
	COMM_U8,
	COMM_DTYPE_COUNT
} comm_dtype;

typedef enum comm_redop { COMM_SUM, COMM_MAX, COMM_MIN, COMM_REDOP_COUNT } comm_redop;

typedef enum comm_op {
	COMM_OP_ALL_GATHER,
	COMM_OP_REDUCE_SCATTER,
	COMM_OP_ALL_REDUCE,
	COMM_OP_BROADCAST,
	COMM_OP_SEND,
	COMM_OP_RECV,
	COMM_OP_ALL_TO_ALL,
	COMM_OP_ALL_TO_ALLV,
	COMM_OP_BARRIER,
	COMM_OP_COUNT
} comm_op;

typedef struct comm_stats {
	uint64_t calls[COMM_OP_COUNT];
	uint64_t bytes_sent[COMM_OP_COUNT];
} comm_stats;

typedef struct comm comm;
typedef struct comm_req comm_req;
typedef struct comm_runtime comm_runtime; /* the process's: timeout, watchdog, failure */

/* One send or receive of a batch (comm_p2p_start), as torch's P2POp. */
typedef struct comm_p2p {
	int is_send;
	int peer;   /* rank in the communicator */
	void *buf;  /* read when sending, written when receiving */
	size_t count;
	comm_dtype dtype;
} comm_p2p;

/* The ops table an implementation fills.  Callers use the comm_* functions
 * below, which check arguments, count bytes and enforce deadlines.  Each
 * start function begins the operation and fills r->impl; test says whether it
 * has finished (and completes it: bfloat16 conversion, stream ordering). */
typedef struct comm_ops {
	const char *name; /* "mpi", "nccl" */
	int (*split)(comm *c, int color, int key, comm *out, titan_err *e);
	int (*all_gather)(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req *r, titan_err *e);
	int (*reduce_scatter)(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			      comm_redop op, comm_req *r, titan_err *e);
	int (*all_reduce)(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_redop op, comm_req *r, titan_err *e);
	int (*broadcast)(comm *c, void *buf, size_t count, comm_dtype t, int root, comm_req *r,
			 titan_err *e);
	int (*p2p)(comm *c, const comm_p2p *ops, int n, comm_req *r, titan_err *e);
	/* all-to-all is the v form with equal counts. */
	int (*all_to_allv)(comm *c, const void *send, const size_t *send_counts,
			   const size_t *send_displs, void *recv, const size_t *recv_counts,
			   const size_t *recv_displs, comm_dtype t, comm_req *r, titan_err *e);
	int (*barrier)(comm *c, comm_req *r, titan_err *e);
	int (*test)(comm *c, comm_req *r, int *done, titan_err *e);
	/* A request given up after a failure: the library may still write its
	 * buffers, so the implementation keeps them until the end. */
	void (*abandon)(comm *c, comm_req *r);
	/* Block the host until the operations waited for have completed (NCCL). */
	int (*sync)(comm *c, titan_err *e);
	/* Called by the watchdog thread every few milliseconds: report a failure
	 * the implementation sees (a device op past its deadline) by returning -1. */
	int (*watch)(comm *c, double now, titan_err *e);
	void (*free)(comm *c);
} comm_ops;

struct comm {
	const comm_ops *ops;
	comm_runtime *rt;
	int rank, size;
	int world_rank;    /* this process's rank in the world, for messages */
	char name[32];     /* "world", "tp", "fsdp", ... */
	comm_stats stats;
	uint64_t seq;      /* operations started, for messages */
	comm *next;        /* the runtime's list of communicators */
	void *impl;
};

struct comm_req {
	comm *c;
	comm_op op;
	uint64_t seq;
	size_t bytes;      /* payload, for messages */
	double started, deadline; /* 0 until a blocking call's wait reads the clock */
	int blocking;      /* a blocking call's: in its caller's frame, waited at once */
	void *impl;
};

/* Start MPI (joining the launcher's job: mpirun, srun; alone, a world of one)
 * with the thread support the watchdog needs, and return the world's
 * communicator.  timeout_s bounds every operation (comm.init_timeout_seconds
 * until comm_set_timeout changes it).  Call once, before other threads run. */
int comm_init(int *argc, char ***argv, double timeout_s, comm **world, titan_err *e);
/* Free every communicator and leave MPI (after a success). */
void comm_finalize(comm *world);
/* End the whole job with status: every rank is killed (MPI_Abort).  For
 * main() after a failure, when other ranks may be waiting on this one. */
_Noreturn void comm_abort(comm *world, int status);

/* Whether this rank is to print the job's failure: the first rank of its
 * node to ask is, the others (failing at the same moment, or because the
 * first ended the job) stay quiet, so that a failure is said once.  For
 * main(), just before it prints and calls comm_abort.  1 on a world of one. */
int comm_claim_report(comm *world);

/* The rank among the processes of this node, and their number. */
int comm_local_rank(const comm *world);
int comm_local_size(const comm *world);

/* A communicator of the ranks of c that pass the same color, ordered by key
 * (then rank), as MPI_Comm_split; collective over c, under the deadline (a
 * barrier first: MPI_Comm_split has none).  name is for messages.
 * Freed by comm_free or comm_finalize. */
int comm_split(comm *c, int color, int key, const char *name, comm **out, titan_err *e);
/* A NCCL communicator over the ranks of boot (an MPI communicator), on CUDA
 * device `device`, ordered after `stream` (a cudaStream_t, NULL for the
 * default stream); NCCL's unique id is broadcast over boot.  Fails with a
 * message where the build has no CUDA or there is no device. */
int comm_nccl_create(comm *boot, int device, void *stream, const char *name, comm **out,
		     titan_err *e);
/* Whether this build has NCCL (CUDA=1). */
int comm_have_nccl(void);
void comm_free(comm *c);

/* Apply timeout_s to every operation started from now on, on every
 * communicator of the process, after a barrier on world (so that no rank
 * enforces the shorter timeout while another is still in a slow phase). */
int comm_set_timeout(comm *world, double timeout_s, titan_err *e);

/* The first failure the process saw (a timeout, a dead rank, an MPI or NCCL
 * error), or NULL. */
const char *comm_failure(const comm *c);

/* recv (size * count) = the send buffers (count each) of every rank, in rank
 * order.  send may be recv + rank * count (in place). */
int comm_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    titan_err *e);
int comm_all_gather_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req **r, titan_err *e);
/* recv (count) = op over ranks of send[rank * count .. (rank + 1) * count);
 * send has size * count elements and does not overlap recv. */
int comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			comm_redop op, titan_err *e);
int comm_reduce_scatter_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			      comm_redop op, comm_req **r, titan_err *e);
/* recv (count) = op over ranks of send (count); send may equal recv. */
int comm_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    comm_redop op, titan_err *e);
int comm_all_reduce_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_redop op, comm_req **r, titan_err *e);
/* buf (count) on every rank = buf on root. */
int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, titan_err *e);
int comm_broadcast_start(comm *c, void *buf, size_t count, comm_dtype t, int root,
			 comm_req **r, titan_err *e);
/* Point to point.  Messages between two ranks arrive in the order sent.  A
 * rank that sends to and receives from a peer puts both in one batch
 * (comm_p2p_start, as torch's batch_isend_irecv): on a device stream a lone
 * send would wait for the peer's receive queued behind its own send. */
int comm_send(comm *c, const void *buf, size_t count, comm_dtype t, int peer, titan_err *e);
int comm_recv(comm *c, void *buf, size_t count, comm_dtype t, int peer, titan_err *e);
int comm_send_start(comm *c, const void *buf, size_t count, comm_dtype t, int peer,
		    comm_req **r, titan_err *e);
int comm_recv_start(comm *c, void *buf, size_t count, comm_dtype t, int peer, comm_req **r,
		    titan_err *e);
int comm_p2p_start(comm *c, const comm_p2p *ops, int n, comm_req **r, titan_err *e);
/* recv[j * count ..] = rank j's send[rank * count ..]: count elements to and
 * from each rank; send and recv (size * count) do not overlap. */
int comm_all_to_all(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    titan_err *e);
int comm_all_to_all_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req **r, titan_err *e);
/* The same with per-rank counts and displacements (elements): send_counts[j]
 * elements from send + send_displs[j] go to rank j, which receives them at
 * recv + recv_displs[rank] (recv_counts[rank] == our send_counts[j]). */
int comm_all_to_allv(comm *c, const void *send, const size_t *send_counts,
		     const size_t *send_displs, void *recv, const size_t *recv_counts,
		     const size_t *recv_displs, comm_dtype t, titan_err *e);
int comm_all_to_allv_start(comm *c, const void *send, const size_t *send_counts,
			   const size_t *send_displs, void *recv, const size_t *recv_counts,
			   const size_t *recv_displs, comm_dtype t, comm_req **r, titan_err *e);
int comm_barrier(comm *c, titan_err *e);

/* Start-up agreement, collective over c and under the deadline like every
 * operation (so that a rank that never arrives ends it with a timeout, not
 * a hang).
 *
 * comm_agree_bytes: whether every rank holds the same n bytes at buf (a
 * CRC-32C and the length of each rank gathered).  When some do not, *other is
 * the lowest rank whose bytes differ from rank 0's and *a, *b (malloc'd, the
 * caller frees both) are rank 0's bytes and that rank's, on every rank, so
 * that each can say the same thing; else *other is -1 and *a, *b NULL.
 *
 * comm_agree_status: failed is whether this rank failed (0 or 1); *first is
 * the lowest rank that failed (-1: none) and *nfailed how many did, the same
 * on every rank, so that all can stop together without another collective. */
int comm_agree_bytes(comm *c, const void *buf, size_t n, int *other, char **a, size_t *na,
		     char **b, size_t *nb, titan_err *e);
int comm_agree_status(comm *c, int failed, int *first, int *nfailed, titan_err *e);

/* *all (malloc'd, *n_all bytes, the caller frees) = every rank's n bytes at
 * send, in rank order; the ranks' n may differ.  Collective over c. */
int comm_all_gather_bytes(comm *c, const void *send, size_t n, uint8_t **all, size_t *n_all,
			  titan_err *e);

/* Finish a request and free it (also when it fails). */
int comm_wait(comm_req *r, titan_err *e);
/* Block the host until what was waited for on c has completed (NCCL). */
int comm_sync(comm *c, titan_err *e);

static inline int comm_rank(const comm *c) { return c->rank; }
static inline int comm_size(const comm *c) { return c->size; }
static inline const comm_stats *comm_get_stats(const comm *c) { return &c->stats; }
static inline void comm_reset_stats(comm *c) { c->stats = (comm_stats){{0}, {0}}; }
/* Total bytes sent by this rank on c, all operations. */
uint64_t comm_bytes_sent(const comm *c);

size_t comm_dtype_size(comm_dtype t);
const char *comm_dtype_name(comm_dtype t);
const char *comm_op_name(comm_op op);

#endif
