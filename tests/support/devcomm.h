/* devcomm.h: a device-shaped communicator for tests without a GPU.
 *
 * NCCL takes the backend's memory only; a plan that hands it a host variable
 * (a token count on the stack, a loss sum) fails on a GPU and nowhere else.
 * devcomm_make (a mesh_comm_maker: mesh_use_device_comms) makes, over each
 * dimension's MPI communicator, a communicator that forwards every operation
 * to it but first checks that each buffer the operation reads or writes lies
 * inside one live allocation of the tracked backend (devcomm_track), and
 * refuses the operation, naming the buffer, when it does not.  So on the CPU
 * a plan shows that its tensors go to the device communicators and its host
 * scalars to the host twins (mesh_host_comm), as under NCCL. */
#ifndef TITAN_TEST_DEVCOMM_H
#define TITAN_TEST_DEVCOMM_H

#include <stddef.h>

#include "backend/backend.h"
#include "comm/comm.h"

typedef struct devcomm_tracker devcomm_tracker;

/* Record be's allocations from now on (call before anything is allocated on
 * it; one backend at a time); devcomm_untrack before the backend is freed.
 * NULL when another backend is tracked or out of memory. */
devcomm_tracker *devcomm_track(backend *be);
void devcomm_untrack(devcomm_tracker *t);
/* Whether [p, p + bytes) lies inside one live allocation. */
int devcomm_owns(const devcomm_tracker *t, const void *p, size_t bytes);

/* A mesh_comm_maker: ctx is the tracker. */
int devcomm_make(void *ctx, comm *host, const char *name, comm **out, titan_err *e);

#endif
