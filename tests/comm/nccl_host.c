/* nccl_host.c: lib/comm/nccl.c against a fake NCCL (here) and the fake CUDA
 * runtime (tests/gpu/fake_cuda.h), on the host: the barrier all-reduces a
 * float it initialised, and nccl_free takes the in-flight list from under the
 * mutex the watchdog walks it with.  Prints TAP lines;
 * tests/comm/nccl_host.sh builds it with -Wl,--wrap=pthread_mutex_lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/comm.h"
#include "comm/comm_priv.h"
#include "fake_cuda.h"

/* --- the mutexes nccl.c locks, seen through --wrap --- */

int __real_pthread_mutex_lock(pthread_mutex_t *m);
static enum { IDLE, WATCHING, FREEING } phase;
static pthread_mutex_t *watch_mutex; /* the one nccl_watch holds over the list */
static int free_took_it;

int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
	if (phase == WATCHING && watch_mutex == NULL)
		watch_mutex = m;
	if (phase == FREEING && m == watch_mutex)
		free_took_it = 1;
	return __real_pthread_mutex_lock(m);
}

/* --- what nccl.c needs of the rest of lib/comm --- */

double comm_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double comm_rt_timeout(comm_runtime *rt)
{
	(void)rt;
	return 10;
}

/* As comm.c's: a blocking call's clock starts when first asked for. */
double comm_req_deadline(comm_req *r)
{
	if (r->blocking && r->started == 0) {
		r->started = comm_now();
		r->deadline = r->started + comm_rt_timeout(NULL);
	}
	return r->deadline;
}

const char *comm_rt_failure(comm_runtime *rt)
{
	(void)rt;
	return NULL;
}

void comm_rt_add(comm_runtime *rt, comm *c)
{
	(void)rt, (void)c;
}

int comm_is_mpi(const comm *c)
{
	(void)c;
	return 1;
}

int comm_is_solo(const comm *c)
{
	(void)c;
	return 0;
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, titan_err *e)
{
	(void)c, (void)buf, (void)count, (void)t, (void)root, (void)e;
	return 0;
}

size_t comm_dtype_size(comm_dtype t)
{
	return t == COMM_F64 || t == COMM_I64 ? 8 : t == COMM_BF16 ? 2 : t == COMM_U8 ? 1 : 4;
}

const char *comm_op_name(comm_op op)
{
	(void)op;
	return "op";
}

/* --- a fake NCCL: every call succeeds at once --- */

struct ncclComm {
	int unused;
};
static struct ncclComm the_comm;

const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return "";
}

const char *ncclGetErrorString(ncclResult_t result)
{
	return result == ncclSuccess ? "no error" : "fake NCCL error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
				    ncclConfig_t *config)
{
	(void)nranks, (void)id, (void)rank, (void)config;
	*comm = &the_comm;
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
	(void)comm;
	*async = ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	(void)comm;
	return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	(void)comm;
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	(void)comm;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)op, (void)comm, (void)stream;
	size_t bytes = count * (t == ncclFloat64 || t == ncclInt64 ? 8 : t == ncclBfloat16 ? 2
				: t == ncclUint8 ? 1 : 4);
	fake_check_written(send, bytes, "ncclAllReduce");
	if (recv != send)
		memmove(recv, send, bytes);
	return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)send, (void)recv, (void)count, (void)t, (void)comm, (void)stream;
	return ncclInvalidUsage;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	(void)send, (void)recv, (void)count, (void)t, (void)op, (void)comm, (void)stream;
	return ncclInvalidUsage;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t stream)
{
	(void)send, (void)recv, (void)count, (void)t, (void)root, (void)comm, (void)stream;
	return ncclInvalidUsage;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
		      cudaStream_t stream)
{
	(void)buf, (void)count, (void)t, (void)peer, (void)comm, (void)stream;
	return ncclInvalidUsage;
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
		      cudaStream_t stream)
{
	(void)buf, (void)count, (void)t, (void)peer, (void)comm, (void)stream;
	return ncclInvalidUsage;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out,
			   ncclConfig_t *config)
{
	(void)comm, (void)color, (void)key, (void)out, (void)config;
	return ncclInvalidUsage;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	(void)comm;
	*count = 1;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	(void)comm;
	*rank = 0;
	return ncclSuccess;
}

/* --- the checks --- */

static int n, failed;

static void ok(int cond, const char *name, const char *why)
{
	n++;
	if (cond) {
		printf("ok %d %s\n", n, name);
	} else {
		failed = 1;
		printf("not ok %d %s: %s\n", n, name, why);
	}
}

int main(void)
{
	comm boot = {.rank = 0, .size = 1};
	comm *c = NULL;
	titan_err e;
	if (comm_nccl_create(&boot, 0, NULL, "nccl", &c, &e) != 0) {
		printf("not ok 1 comm_nccl_create: %s\n", e.msg);
		return 1;
	}

	comm_req r = {.c = c, .op = COMM_OP_BARRIER, .deadline = comm_now() + 10};
	int before = fake_breaches(), done = 0;
	int rc = c->ops->barrier(c, &r, &e);
	for (int i = 0; rc == 0 && !done && i < 100; i++)
		rc = c->ops->test(c, &r, &done, &e);
	ok(rc == 0 && done && fake_breaches() == before,
	   "the barrier all-reduces a float it initialised",
	   fake_breaches() != before ? fake_last_breach() : e.msg);

	/* an all-reduce waited for, its end event still in flight: the watchdog's */
	static float x[16];
	r = (comm_req){.c = c, .op = COMM_OP_ALL_REDUCE, .deadline = comm_now() + 10};
	rc = c->ops->all_reduce(c, x, x, 16, COMM_F32, COMM_SUM, &r, &e);
	if (rc == 0)
		rc = c->ops->test(c, &r, &done, &e);
	phase = WATCHING;
	if (rc == 0)
		rc = c->ops->watch(c, comm_now(), &e);
	phase = IDLE;
	ok(rc == 0 && watch_mutex != NULL, "the watchdog walks the in-flight list under a mutex",
	   rc != 0 ? e.msg : "nccl_watch locked no mutex");

	/* a blocking call's request, whose clock comm.c starts in its wait: what
	 * nccl.c gives the watchdog is a deadline ahead, not the unset 0 */
	r = (comm_req){.c = c, .op = COMM_OP_ALL_REDUCE, .blocking = 1};
	rc = c->ops->all_reduce(c, x, x, 16, COMM_F32, COMM_SUM, &r, &e);
	if (rc == 0)
		rc = c->ops->test(c, &r, &done, &e);
	if (rc == 0)
		rc = c->ops->watch(c, comm_now(), &e);
	ok(rc == 0, "a blocking call's operation in flight is not timed out at once", e.msg);

	phase = FREEING;
	c->ops->free(c);
	phase = IDLE;
	free(c);
	ok(free_took_it, "nccl_free takes the in-flight list under the watchdog's mutex",
	   "nccl_free walked the list without it");
	printf("1..%d\n", n);
	return failed;
}
