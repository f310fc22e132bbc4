/* comm_priv.h: what the comm implementations share (private to lib/comm).
 *
 * The runtime is the process's side of the job: the timeout in force, the
 * first failure seen, the list of communicators, and the watchdog thread that
 * checks the ranks of this node are alive, lets implementations look at their
 * in-flight device work (ops->watch) and drives MPI's progress while
 * nonblocking operations are in flight and nobody waits for them (Open MPI
 * moves data only inside MPI calls). */
#ifndef TITAN_COMM_PRIV_H
#define TITAN_COMM_PRIV_H

#include <sys/types.h>

#include "comm/comm.h"

/* A rank of this node whose process the watchdog can see. */
typedef struct comm_peer {
	int rank;
	pid_t pid;
} comm_peer;

comm_runtime *comm_rt_create(int world_rank, int world_size, double timeout_s, titan_err *e);
/* Stop the watchdog and free the runtime (the communicators are freed first). */
void comm_rt_free(comm_runtime *rt);
/* Start the watchdog: peers are the ranks of this node to watch (copied);
 * progress, when not NULL, is called every few microseconds while
 * unattended operations are in flight. */
int comm_rt_start(comm_runtime *rt, const comm_peer *peers, int npeers, const char *host,
		  void (*progress)(void), titan_err *e);

void comm_rt_add(comm_runtime *rt, comm *c);
/* Free every communicator of the runtime, newest first (children before the
 * communicators they were split from), world too. */
void comm_rt_free_comms(comm_runtime *rt, comm *world);
void comm_rt_remove(comm_runtime *rt, comm *c);
double comm_rt_timeout(comm_runtime *rt);
void comm_rt_set_timeout(comm_runtime *rt, double timeout_s);
/* Record a failure (the first one is kept); returns -1. */
int comm_rt_fail(comm_runtime *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *comm_rt_failure(comm_runtime *rt);
/* The ranks of this node, among the world ranks members (NULL: all), whose
 * process is stopped (SIGSTOP, a debugger): "rank 1 (pid 42 on HOST), ..."
 * into buf; returns how many. */
int comm_rt_stopped_peers(comm_runtime *rt, const int *members, int nmembers, char *buf,
			  size_t len);
/* A nonblocking operation starts (+1) or finishes or is waited for (-1). */
void comm_rt_unattended(comm_runtime *rt, int delta);

/* Seconds on a monotonic clock. */
double comm_now(void);
/* r's deadline.  A blocking call's clock starts in its wait (comm.c); an
 * implementation that needs the deadline before (NCCL's enqueue, its
 * watchdog's record of the operation) starts it here. */
double comm_req_deadline(comm_req *r);

/* The MPI implementation's world communicator, for the NCCL bootstrap. */
int comm_is_mpi(const comm *c);
/* The world of one process without MPI (solo.c), and whether c is one of
 * its communicators. */
int comm_solo_init(double timeout_s, comm **world, titan_err *e);
int comm_is_solo(const comm *c);
/* The world rank of each rank of c (c->size entries); -1 when c is not MPI's. */
int comm_mpi_world_ranks(const comm *c, int *out);

#endif
