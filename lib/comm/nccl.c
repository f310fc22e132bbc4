/* nccl.c: the NCCL implementation of comm.h, on device buffers.
 *
 * Each communicator has its own stream.  An operation is queued on it after
 * an event recorded on the backend's compute stream (so it reads what the
 * kernels before it wrote), and comm_wait queues the reverse dependency, the
 * compute stream waiting for the operation's end event: neither blocks the
 * host, so the GPU computes while NCCL moves data.  The events still in
 * flight are the watchdog's: past its deadline an operation aborts the
 * communicator (ncclCommAbort ends its kernels) and the failure is reported
 * by the next operation, as torch's NCCL watchdog does.
 *
 * Communicators are nonblocking (config.blocking = 0) so that creation and
 * splits are polled under the timeout instead of hanging on a missing rank.
 * Built without CUDA, comm_nccl_create says so. */
#include "comm/comm.h"
#include "comm/comm_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if TITAN_CUDA

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

typedef struct inflight {
	cudaEvent_t done;
	double started, deadline;
	comm_op op;
	uint64_t seq;
	struct inflight *next;
} inflight;

typedef struct nccl_comm {
	ncclComm_t nc;
	int device;
	cudaStream_t compute; /* the backend's; NULL: the default stream */
	cudaStream_t stream;  /* this communicator's */
	cudaEvent_t ready;
	pthread_mutex_t mu;   /* the in-flight list, shared with the watchdog */
	inflight *inflight;
	float *one;           /* a device float: the barrier's all-reduce */
	atomic_int aborted;   /* set by the watchdog, read by the caller's thread */
} nccl_comm;

static const comm_ops nccl_ops;

static nccl_comm *nc_of(comm *c)
{
	return c->impl;
}

static int cuda_fail(cudaError_t rc, titan_err *e, const char *what)
{
	return err_set(e, "%s: %s", what, cudaGetErrorString(rc));
}

static int nccl_fail(ncclComm_t nc, ncclResult_t rc, titan_err *e, const char *what)
{
	const char *last = nc != NULL ? ncclGetLastError(nc) : NULL;
	return err_set(e, "%s: %s%s%s", what, ncclGetErrorString(rc),
		       last != NULL && *last ? ": " : "", last != NULL ? last : "");
}

static ncclDataType_t nccl_type(comm_dtype t)
{
	switch (t) {
	case COMM_F32: return ncclFloat32;
	case COMM_F64: return ncclFloat64;
	case COMM_BF16: return ncclBfloat16;
	case COMM_I32: return ncclInt32;
	case COMM_I64: return ncclInt64;
	default: return ncclUint8;
	}
}

static ncclRedOp_t nccl_op(comm_redop op)
{
	return op == COMM_MAX ? ncclMax : op == COMM_MIN ? ncclMin : ncclSum;
}

/* A nonblocking communicator answers ncclInProgress while it connects: poll
 * its state until it is ready, an error, or the deadline. */
static int settle(ncclComm_t nc, ncclResult_t rc, double deadline, titan_err *e, const char *what)
{
	while (rc == ncclInProgress) {
		if (comm_now() > deadline) {
			ncclCommAbort(nc);
			return err_set(e, "%s: not ready before the timeout", what);
		}
		sched_yield();
		if (ncclCommGetAsyncError(nc, &rc) != ncclSuccess)
			break;
	}
	return rc == ncclSuccess ? 0 : nccl_fail(nc, rc, e, what);
}

static void set_config(ncclConfig_t *cfg)
{
	ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
	*cfg = init;
	cfg->blocking = 0;
}

/* Fill out's device state: stream, events, the barrier's float. */
static int open_streams(comm *out, ncclComm_t nc, int device, cudaStream_t compute, titan_err *e)
{
	nccl_comm *n = calloc(1, sizeof *n);
	if (n == NULL)
		return err_set(e, "out of memory");
	n->nc = nc;
	n->device = device;
	n->compute = compute;
	pthread_mutex_init(&n->mu, NULL);
	cudaError_t rc;
	/* The barrier's float is zeroed on the communicator's own stream, ahead
	 * of every operation: an all-reduce of cudaMalloc's leftovers is a read
	 * of uninitialised memory (compute-sanitizer's initcheck) and may sum
	 * NaNs and infinities. */
	if ((rc = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (rc = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) != cudaSuccess ||
	    (rc = cudaMalloc((void **)&n->one, sizeof(float))) != cudaSuccess ||
	    (rc = cudaMemsetAsync(n->one, 0, sizeof(float), n->stream)) != cudaSuccess) {
		if (n->one != NULL)
			cudaFree(n->one);
		if (n->ready != NULL)
			cudaEventDestroy(n->ready);
		if (n->stream != NULL)
			cudaStreamDestroy(n->stream);
		pthread_mutex_destroy(&n->mu);
		free(n);
		return cuda_fail(rc, e, "NCCL communicator streams");
	}
	out->ops = &nccl_ops;
	out->impl = n;
	return 0;
}

/* Order the operation after the compute stream's work so far. */
static int begin(comm *c, titan_err *e)
{
	nccl_comm *n = nc_of(c);
	cudaError_t rc;
	if (atomic_load(&n->aborted))
		return err_set(e, "the NCCL communicator was aborted after a failure");
	if ((rc = cudaSetDevice(n->device)) != cudaSuccess ||
	    (rc = cudaEventRecord(n->ready, n->compute)) != cudaSuccess ||
	    (rc = cudaStreamWaitEvent(n->stream, n->ready, 0)) != cudaSuccess)
		return cuda_fail(rc, e, "ordering after the compute stream");
	return 0;
}

/* The NCCL call(s) were queued (rc their result): record the end event. */
static int end(comm *c, comm_req *r, ncclResult_t rc, titan_err *e, const char *what)
{
	nccl_comm *n = nc_of(c);
	if (settle(n->nc, rc, comm_req_deadline(r), e, what) != 0)
		return -1;
	cudaEvent_t done;
	cudaError_t cr;
	if ((cr = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) != cudaSuccess)
		return cuda_fail(cr, e, what);
	if ((cr = cudaEventRecord(done, n->stream)) != cudaSuccess) {
		cudaEventDestroy(done);
		return cuda_fail(cr, e, what);
	}
	r->impl = done;
	return 0;
}

static int nccl_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			   comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	return end(c, r, ncclAllGather(send, recv, count, nccl_type(t), nc_of(c)->nc, nc_of(c)->stream),
		   e, "ncclAllGather");
}

static int nccl_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			       comm_redop op, comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	return end(c, r, ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), nc_of(c)->nc,
					   nc_of(c)->stream), e, "ncclReduceScatter");
}

static int nccl_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			   comm_redop op, comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	return end(c, r, ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), nc_of(c)->nc,
				       nc_of(c)->stream), e, "ncclAllReduce");
}

static int nccl_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, comm_req *r,
			  titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	return end(c, r, ncclBroadcast(buf, buf, count, nccl_type(t), root, nc_of(c)->nc,
				       nc_of(c)->stream), e, "ncclBroadcast");
}

/* Sends and receives of one group progress together (no pair deadlocks). */
static int nccl_p2p(comm *c, const comm_p2p *ops, int n, comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	nccl_comm *nc = nc_of(c);
	ncclResult_t rc = ncclGroupStart();
	for (int i = 0; i < n && rc == ncclSuccess; i++)
		rc = ops[i].is_send
			? ncclSend(ops[i].buf, ops[i].count, nccl_type(ops[i].dtype), ops[i].peer, nc->nc,
				   nc->stream)
			: ncclRecv(ops[i].buf, ops[i].count, nccl_type(ops[i].dtype), ops[i].peer, nc->nc,
				   nc->stream);
	ncclResult_t rc2 = ncclGroupEnd();
	return end(c, r, rc != ncclSuccess ? rc : rc2, e, "ncclSend/ncclRecv");
}

static int nccl_all_to_allv(comm *c, const void *send, const size_t *scounts,
			    const size_t *sdispls, void *recv, const size_t *rcounts,
			    const size_t *rdispls, comm_dtype t, comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	nccl_comm *nc = nc_of(c);
	size_t es = comm_dtype_size(t);
	ncclResult_t rc = ncclGroupStart();
	for (int j = 0; j < c->size && rc == ncclSuccess; j++) {
		if (scounts[j] > 0)
			rc = ncclSend((const char *)send + sdispls[j] * es, scounts[j], nccl_type(t), j,
				      nc->nc, nc->stream);
		if (rc == ncclSuccess && rcounts[j] > 0)
			rc = ncclRecv((char *)recv + rdispls[j] * es, rcounts[j], nccl_type(t), j, nc->nc,
				      nc->stream);
	}
	ncclResult_t rc2 = ncclGroupEnd();
	return end(c, r, rc != ncclSuccess ? rc : rc2, e, "all_to_allv (ncclSend/ncclRecv)");
}

/* A barrier blocks the host: an all-reduce of one float, waited for by test. */
static int nccl_barrier(comm *c, comm_req *r, titan_err *e)
{
	if (begin(c, e) != 0)
		return -1;
	nccl_comm *n = nc_of(c);
	return end(c, r, ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->nc, n->stream), e,
		   "ncclAllReduce (barrier)");
}

static int async_error(nccl_comm *n, titan_err *e)
{
	ncclResult_t ae;
	if (ncclCommGetAsyncError(n->nc, &ae) != ncclSuccess)
		return err_set(e, "ncclCommGetAsyncError failed");
	if (ae != ncclSuccess && ae != ncclInProgress)
		return nccl_fail(n->nc, ae, e, "NCCL");
	return 0;
}

static int nccl_test(comm *c, comm_req *r, int *done, titan_err *e)
{
	nccl_comm *n = nc_of(c);
	cudaEvent_t ev = r->impl;
	if (async_error(n, e) != 0)
		return -1;
	if (r->op == COMM_OP_BARRIER) {
		cudaError_t q = cudaEventQuery(ev);
		if (q == cudaErrorNotReady) {
			*done = 0;
			return 0;
		}
		cudaEventDestroy(ev);
		r->impl = NULL;
		if (q != cudaSuccess)
			return cuda_fail(q, e, "barrier");
		*done = 1;
		return 0;
	}
	cudaError_t rc = cudaStreamWaitEvent(n->compute, ev, 0);
	if (rc != cudaSuccess)
		return cuda_fail(rc, e, "ordering the compute stream after the operation");
	inflight *f = malloc(sizeof *f);
	if (f == NULL)
		return err_set(e, "out of memory");
	double deadline = comm_req_deadline(r); /* first: it may set r->started */
	*f = (inflight){ev, r->started, deadline, r->op, r->seq, NULL};
	pthread_mutex_lock(&n->mu);
	f->next = n->inflight;
	n->inflight = f;
	pthread_mutex_unlock(&n->mu);
	r->impl = NULL;
	*done = 1;
	return 0;
}

/* The watchdog: retire finished operations, abort on one past its deadline. */
static int nccl_watch(comm *c, double now, titan_err *e)
{
	nccl_comm *n = nc_of(c);
	if (atomic_load(&n->aborted))
		return 0;
	int rc = 0;
	cudaSetDevice(n->device);
	pthread_mutex_lock(&n->mu);
	for (inflight **p = &n->inflight; *p != NULL;) {
		inflight *f = *p;
		cudaError_t q = cudaEventQuery(f->done);
		if (q == cudaSuccess) {
			*p = f->next;
			cudaEventDestroy(f->done);
			free(f);
			continue;
		}
		if (q != cudaErrorNotReady) {
			rc = cuda_fail(q, e, comm_op_name(f->op));
			break;
		}
		if (now > f->deadline) {
			rc = err_set(e, "rank %d: comm '%s': %s #%llu timed out after %g s on the GPU: "
				     "a peer rank is hung, dead or far behind", c->world_rank, c->name,
				     comm_op_name(f->op), (unsigned long long)f->seq,
				     f->deadline - f->started);
			break;
		}
		p = &f->next;
	}
	pthread_mutex_unlock(&n->mu);
	if (rc == 0)
		rc = async_error(n, e);
	if (rc != 0 && !atomic_exchange(&n->aborted, 1))
		ncclCommAbort(n->nc);
	return rc;
}

static int nccl_sync(comm *c, titan_err *e)
{
	nccl_comm *n = nc_of(c);
	double deadline = comm_now() + comm_rt_timeout(c->rt);
	cudaSetDevice(n->device);
	for (;;) {
		cudaError_t q = cudaStreamQuery(n->stream);
		if (q == cudaSuccess)
			return 0;
		if (q != cudaErrorNotReady)
			return cuda_fail(q, e, "comm stream");
		const char *f = comm_rt_failure(c->rt);
		if (f != NULL)
			return err_set(e, "%s", f);
		if (async_error(n, e) != 0)
			return -1;
		if (comm_now() > deadline)
			return err_set(e, "rank %d: comm '%s': sync timed out", c->world_rank, c->name);
		sched_yield();
	}
}

static int nccl_split(comm *c, int color, int key, comm *out, titan_err *e)
{
	nccl_comm *n = nc_of(c);
	ncclConfig_t cfg;
	set_config(&cfg);
	ncclComm_t child = NULL;
	double deadline = comm_now() + comm_rt_timeout(c->rt);
	cudaSetDevice(n->device);
	ncclResult_t rc = ncclCommSplit(n->nc, color, key, &child, &cfg);
	if (rc != ncclSuccess && rc != ncclInProgress)
		return nccl_fail(n->nc, rc, e, "ncclCommSplit");
	if (child == NULL)
		return err_set(e, "ncclCommSplit: no communicator for color %d", color);
	if (settle(child, ncclInProgress, deadline, e, "ncclCommSplit") != 0)
		return -1;
	if (ncclCommCount(child, &out->size) != ncclSuccess ||
	    ncclCommUserRank(child, &out->rank) != ncclSuccess) {
		ncclCommAbort(child);
		return err_set(e, "ncclCommSplit: cannot read the new communicator's rank");
	}
	if (open_streams(out, child, n->device, n->compute, e) != 0) {
		ncclCommDestroy(child);
		return -1;
	}
	return 0;
}

/* The in-flight list is the watchdog's too: it is detached under the mutex
 * nccl_watch holds, so that a pass still walking it finishes before its
 * events are destroyed.  (The runtime also takes c off its list first, under
 * its own lock; this keeps nccl.c safe without relying on that.) */
static void nccl_free(comm *c)
{
	nccl_comm *n = nc_of(c);
	cudaSetDevice(n->device);
	if (!atomic_load(&n->aborted)) {
		cudaStreamSynchronize(n->stream);
		ncclResult_t rc = ncclCommFinalize(n->nc);
		titan_err e;
		if (settle(n->nc, rc, comm_now() + 10, &e, "ncclCommFinalize") == 0)
			ncclCommDestroy(n->nc);
	}
	pthread_mutex_lock(&n->mu);
	inflight *list = n->inflight;
	n->inflight = NULL;
	pthread_mutex_unlock(&n->mu);
	for (inflight *f = list, *next; f != NULL; f = next) {
		next = f->next;
		cudaEventDestroy(f->done);
		free(f);
	}
	cudaFree(n->one);
	cudaEventDestroy(n->ready);
	cudaStreamDestroy(n->stream);
	pthread_mutex_destroy(&n->mu);
	free(n);
}

static const comm_ops nccl_ops = {
	.name = "nccl",
	.split = nccl_split,
	.all_gather = nccl_all_gather,
	.reduce_scatter = nccl_reduce_scatter,
	.all_reduce = nccl_all_reduce,
	.broadcast = nccl_broadcast,
	.p2p = nccl_p2p,
	.all_to_allv = nccl_all_to_allv,
	.barrier = nccl_barrier,
	.test = nccl_test,
	.sync = nccl_sync,
	.watch = nccl_watch,
	.free = nccl_free,
};

int comm_have_nccl(void)
{
	return 1;
}

int comm_nccl_create(comm *boot, int device, void *stream, const char *name, comm **out,
		     titan_err *e)
{
	if (!comm_is_mpi(boot) && !comm_is_solo(boot))
		return err_set(e, "comm_nccl_create: comm '%s' is not a host communicator", boot->name);
	struct {
		ncclUniqueId id;
		int32_t ok;
	} boot_msg;
	memset(&boot_msg, 0, sizeof boot_msg);
	cudaError_t cr = cudaSetDevice(device);
	/* Rank 0 takes part in the broadcast even when it failed, so that the
	 * others hear of it instead of waiting out the timeout. */
	if (boot->rank == 0)
		boot_msg.ok = cr == cudaSuccess && ncclGetUniqueId(&boot_msg.id) == ncclSuccess;
	if (comm_broadcast(boot, &boot_msg, sizeof boot_msg, COMM_U8, 0, e) != 0)
		return -1;
	if (cr != cudaSuccess)
		return cuda_fail(cr, e, "cudaSetDevice");
	if (!boot_msg.ok)
		return err_set(e, "rank 0 could not create NCCL's unique id");
	comm *c = calloc(1, sizeof *c);
	if (c == NULL)
		return err_set(e, "out of memory");
	ncclConfig_t cfg;
	set_config(&cfg);
	ncclComm_t nc = NULL;
	double deadline = comm_now() + comm_rt_timeout(boot->rt);
	ncclResult_t rc = ncclCommInitRankConfig(&nc, boot->size, boot_msg.id, boot->rank, &cfg);
	if (settle(nc, rc, deadline, e, "ncclCommInitRankConfig") != 0 ||
	    open_streams(c, nc, device, (cudaStream_t)stream, e) != 0) {
		if (nc != NULL)
			ncclCommAbort(nc);
		free(c);
		return -1;
	}
	c->rt = boot->rt;
	c->rank = boot->rank;
	c->size = boot->size;
	c->world_rank = boot->world_rank;
	snprintf(c->name, sizeof c->name, "%s", name);
	comm_rt_add(c->rt, c);
	*out = c;
	return 0;
}

#else /* no CUDA in this build */

int comm_have_nccl(void)
{
	return 0;
}

int comm_nccl_create(comm *boot, int device, void *stream, const char *name, comm **out,
		     titan_err *e)
{
	(void)boot;
	(void)device;
	(void)stream;
	(void)name;
	(void)out;
	return err_set(e, "NCCL: built without CUDA (CUDA=0)");
}

#endif
