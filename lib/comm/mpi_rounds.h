/* mpi_rounds.h: collectives as rounds of MPI point-to-point messages, for
 * the blocking calls of the MPI implementation (private to lib/comm).
 *
 * Why: the blocking calls need a deadline, so they cannot be MPI's blocking
 * collectives (a peer that never comes leaves MPI_Allreduce waiting for
 * ever); MPI's nonblocking collectives (Open MPI's libnbc) have one but cost
 * 1.2 to 8 times the blocking ones (Open MPI 4.1, 2 ranks, 4 KiB to 256 KiB:
 * an MPI_Iallreduce of 4 KiB 4.5 us against 0.7 us).  Rounds of
 * MPI_Isend/MPI_Irecv, each reduced with MPI_Reduce_local, are as fast as
 * the blocking collectives (they run the same algorithms) and are finished
 * by the wait loop, deadline and all.  They move only while their caller
 * tests them, which a blocking call does at once: the nonblocking starts
 * keep MPI's collectives, which the watchdog's progress moves in the
 * background.
 *
 * Algorithms (n ranks, B bytes in all): a power of two uses recursive
 * doubling (all-gather; all-reduce of 4 or more ranks up to 32 KiB) and
 * recursive halving (reduce-scatter; all-reduce above: halving then
 * doubling, Rabenseifner's), log2 n rounds each; other sizes use the ring,
 * n - 1 rounds.  All-to-all(v) is one round of every send and receive. */
#ifndef TITAN_COMM_MPI_ROUNDS_H
#define TITAN_COMM_MPI_ROUNDS_H

#include <mpi.h>
#include <stddef.h>

#include "core/err.h"

typedef struct rounds rounds;

/* Each start takes in *io the rounds of a collective of the same
 * communicator that has finished, to reuse with their scratch (or NULL),
 * and leaves there the new collective's rounds: NULL when it failed with
 * no message in flight, else the caller's to test, then to pass on to the
 * next start or to rounds_free. */

/* recv (n * count) = every rank's send (count); send may be recv + rank * count. */
int rounds_all_gather(MPI_Comm h, const void *send, void *recv, size_t count, MPI_Datatype t,
		      rounds **io, titan_err *e);
/* recv (count) = op over ranks of send[rank * count ..]. */
int rounds_reduce_scatter(MPI_Comm h, const void *send, void *recv, size_t count,
			  MPI_Datatype t, MPI_Op op, rounds **io, titan_err *e);
/* recv (count) = op over ranks of send (count); send may equal recv. */
int rounds_all_reduce(MPI_Comm h, const void *send, void *recv, size_t count, MPI_Datatype t,
		      MPI_Op op, rounds **io, titan_err *e);
/* MPI_Alltoallv's arguments (int counts and displacements, copied). */
int rounds_all_to_allv(MPI_Comm h, const void *send, const int *scounts, const int *sdispls,
		       void *recv, const int *rcounts, const int *rdispls, MPI_Datatype t,
		       rounds **io, titan_err *e);

/* Move the collective on: *done = 1 once its result is in place (its
 * scratch is kept up to 1 MiB).  On an error the rounds stay as they are
 * (MPI may still write their buffers). */
int rounds_test(rounds *s, int *done, titan_err *e);
/* -1 with "what: MPI's message for rc" in e (mpi.c's, shared). */
int comm_mpi_fail(int rc, titan_err *e, const char *what);
void rounds_free(rounds *s);

#endif
