/* mpi.c: the MPI implementation of comm.h, on host buffers, and the start of
 * the job (MPI_Init_thread, the node's ranks, the watchdog).
 *
 * Every operation is nonblocking, so that the wait loop can enforce a
 * deadline: a started one is MPI's nonblocking form (MPI-3), which the
 * watchdog moves in the background; the collectives of a blocking call are
 * rounds of point-to-point messages that the wait loop moves (mpi_rounds.h:
 * MPI's nonblocking collectives cost up to several times its blocking ones).
 * Errors come back as values (MPI_ERRORS_RETURN), never as MPI's default
 * abort from inside the library. */
#include "comm/comm.h"
#include "comm/comm_priv.h"
#include "comm/mpi_rounds.h"
#include "core/bf16.h"

#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct mpi_comm mpi_comm;

typedef struct mpi_req {
	struct mpi_req *next;   /* the abandoned list */
	mpi_comm *home;         /* a blocking call's: whose spare it becomes when done */
	MPI_Request one, *reqs; /* reqs points at one or at an array */
	int n;
	rounds *rounds;         /* a blocking call's collective, instead of reqs */
	rounds *kept;           /* an earlier one's, finished, for the next to reuse */
	int *counts;            /* all-to-all-v: MPI reads them until completion */
	float *f32;             /* bfloat16 reductions: float32 send/recv scratch */
	float *f32_out;         /* where the float32 result is (inside f32) */
	uint16_t *bf16_out;     /* the caller's buffer it is rounded into */
	size_t out_count;
} mpi_req;

/* The process's MPI state: there is one world per process. */
static struct {
	int we_initialised;
	MPI_Comm local;    /* ranks of this node */
	MPI_Comm progress; /* a private MPI_COMM_SELF for the watchdog's MPI_Iprobe */
	int local_rank, local_size;
	mpi_req *abandoned; /* freed after MPI_Finalize */
	/* The node's reporter (comm_claim_report): 0, or the world rank + 1 of
	 * the rank that claimed it, in memory the node's ranks share. */
	MPI_Win report_win;
	atomic_int *reporter;
} g = {0, MPI_COMM_NULL, MPI_COMM_NULL, 0, 1, NULL, MPI_WIN_NULL, NULL};

/* A communicator's impl.  Its spare is the request of its last blocking
 * call, finished, kept with its rounds and their scratch for the next one:
 * a call of a few KiB then allocates nothing (2 ranks, 4 KiB: the three
 * allocations and frees of a call took about a tenth of its microsecond). */
struct mpi_comm {
	MPI_Comm h;
	_Atomic(mpi_req *) spare;
};

static const comm_ops mpi_ops;

static MPI_Comm handle(const comm *c)
{
	return ((const mpi_comm *)c->impl)->h;
}

int comm_is_mpi(const comm *c)
{
	return c->ops == &mpi_ops;
}

int comm_mpi_world_ranks(const comm *c, int *out)
{
	if (!comm_is_mpi(c))
		return -1;
	MPI_Group mine, world;
	int rc = MPI_Comm_group(handle(c), &mine);
	if (rc != MPI_SUCCESS)
		return -1;
	if ((rc = MPI_Comm_group(MPI_COMM_WORLD, &world)) != MPI_SUCCESS) {
		MPI_Group_free(&mine);
		return -1;
	}
	int *in = malloc((size_t)c->size * sizeof *in);
	if (in != NULL) {
		for (int i = 0; i < c->size; i++)
			in[i] = i;
		rc = MPI_Group_translate_ranks(mine, c->size, in, world, out);
		free(in);
	}
	MPI_Group_free(&mine);
	MPI_Group_free(&world);
	return in != NULL && rc == MPI_SUCCESS ? 0 : -1;
}

/* One int the node's ranks share, so that a failure is reported by the
 * first rank to see it and not again by every rank it brings down. */
static int start_reporter(void)
{
	atomic_int *base = NULL;
	MPI_Aint size = g.local_rank == 0 ? (MPI_Aint)sizeof *base : 0;
	if (MPI_Win_allocate_shared(size, (int)sizeof *base, MPI_INFO_NULL, g.local, &base,
				    &g.report_win) != MPI_SUCCESS)
		return -1;
	int disp;
	if (MPI_Win_shared_query(g.report_win, 0, &size, &disp, &g.reporter) != MPI_SUCCESS ||
	    g.reporter == NULL)
		return -1;
	if (g.local_rank == 0)
		atomic_store(g.reporter, 0);
	return MPI_Barrier(g.local) == MPI_SUCCESS ? 0 : -1;
}

int comm_claim_report(comm *world)
{
	if (g.reporter == NULL || world->size == 1)
		return 1;
	int none = 0;
	return atomic_compare_exchange_strong(g.reporter, &none, world->rank + 1) ||
	       atomic_load(g.reporter) == world->rank + 1;
}

int comm_mpi_fail(int rc, titan_err *e, const char *what)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS)
		snprintf(s, sizeof s, "MPI error %d", rc);
	return err_set(e, "%s: %s", what, s);
}

static MPI_Datatype mpi_type(comm_dtype t)
{
	switch (t) {
	case COMM_F32: return MPI_FLOAT;
	case COMM_F64: return MPI_DOUBLE;
	case COMM_BF16: return MPI_UINT16_T; /* moved as bits; reduced through float32 */
	case COMM_I32: return MPI_INT32_T;
	case COMM_I64: return MPI_INT64_T;
	default: return MPI_UINT8_T;
	}
}

static MPI_Op mpi_op(comm_redop op)
{
	return op == COMM_MAX ? MPI_MAX : op == COMM_MIN ? MPI_MIN : MPI_SUM;
}

static int fits_int(size_t count, const char *op, titan_err *e)
{
	if (count > INT_MAX)
		return err_set(e, "%s: %zu elements exceed MPI's limit of %d per call", op, count,
			       INT_MAX);
	return 0;
}

/* r's request: a blocking call takes its communicator's spare when there is
 * one (its rounds kept for reuse, and its all-to-all-v counts, n of them
 * for the same communicator). */
static mpi_req *req_new(comm *c, comm_req *r, titan_err *e)
{
	mpi_comm *m = c->impl;
	mpi_req *q = r->blocking ? atomic_exchange(&m->spare, NULL) : NULL;
	if (q != NULL) {
		rounds *kept = q->kept;
		int *counts = q->counts;
		memset(q, 0, sizeof *q);
		q->kept = kept;
		q->counts = counts;
	} else if ((q = calloc(1, sizeof *q)) == NULL) {
		err_set(e, "out of memory");
		return NULL;
	}
	q->home = r->blocking ? m : NULL;
	q->reqs = &q->one;
	q->n = 1;
	r->impl = q;
	return q;
}

/* What one call alone uses: a batch's array of requests, a bfloat16
 * reduction's float32 copy. */
static void free_call_parts(mpi_req *q)
{
	if (q->reqs != &q->one)
		free(q->reqs);
	q->reqs = &q->one;
	free(q->f32);
	q->f32 = NULL;
}

static void req_free(mpi_req *q)
{
	free_call_parts(q);
	free(q->counts);
	rounds_free(q->rounds);
	rounds_free(q->kept);
	free(q);
}

/* The rounds of a blocking call's collective: those its request kept. */
static rounds **take_rounds(mpi_req *q)
{
	q->rounds = q->kept;
	q->kept = NULL;
	return &q->rounds;
}

/* q has finished: a blocking call's becomes its communicator's spare, if it
 * has none, with its rounds kept; anything else is freed. */
static void req_done(mpi_req *q)
{
	if (q->home != NULL) {
		free_call_parts(q);
		if (q->rounds != NULL) { /* then kept is NULL: take_rounds took it */
			q->kept = q->rounds;
			q->rounds = NULL;
		}
		mpi_req *none = NULL;
		if (atomic_compare_exchange_strong(&q->home->spare, &none, q))
			return;
	}
	req_free(q);
}

static int req_fail(comm_req *r, int rc, titan_err *e, const char *what)
{
	req_free(r->impl);
	r->impl = NULL;
	return comm_mpi_fail(rc, e, what);
}

/* A blocking call's rounds started (rc 0) or not; rounds that failed with
 * messages in flight are kept to the end, as an abandoned request is. */
static int rounds_started(comm_req *r, int rc)
{
	mpi_req *q = r->impl;
	if (rc == 0)
		return 0;
	if (q->rounds != NULL) {
		q->next = g.abandoned;
		g.abandoned = q;
	} else {
		req_free(q);
	}
	r->impl = NULL;
	return -1;
}

/* Whether a collective runs as rounds of messages (mpi_rounds.h): when its
 * caller waits for it at once, and its whole buffer (total elements) has an
 * int count. */
static int use_rounds(const comm *c, const comm_req *r, size_t total)
{
	return r->blocking && c->size > 1 && total <= INT_MAX;
}

/* bfloat16 in float32: n elements of src widened into a new scratch of cap. */
static float *widen(const void *src, size_t n, size_t cap)
{
	float *f = malloc((cap > 0 ? cap : 1) * sizeof *f);
	if (f == NULL)
		return NULL;
	const uint16_t *b = src;
	for (size_t i = 0; i < n; i++)
		f[i] = bf16_to_f32(b[i]);
	return f;
}

static int mpi_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req *r, titan_err *e)
{
	if (fits_int(count, "all_gather", e))
		return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	if (use_rounds(c, r, count * (size_t)c->size))
		return rounds_started(r, rounds_all_gather(handle(c), send, recv, count, mpi_type(t),
							   take_rounds(q), e));
	size_t b = count * comm_dtype_size(t);
	const void *s = send == (char *)recv + (size_t)c->rank * b ? MPI_IN_PLACE : send;
	int rc = MPI_Iallgather(s, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
				handle(c), q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Iallgather");
}

static int mpi_reduce_scatter(comm *c, const void *send, void *recv, size_t count,
			      comm_dtype t, comm_redop op, comm_req *r, titan_err *e)
{
	if (fits_int(count, "reduce_scatter", e))
		return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	if (t == COMM_BF16) {
		size_t n = count * (size_t)c->size;
		if ((q->f32 = widen(send, n, n + count)) == NULL) {
			req_free(q);
			return err_set(e, "reduce_scatter: out of memory");
		}
		q->f32_out = q->f32 + n;
		q->bf16_out = recv;
		q->out_count = count;
		send = q->f32;
		recv = q->f32_out;
		t = COMM_F32;
	}
	if (use_rounds(c, r, count * (size_t)c->size))
		return rounds_started(r, rounds_reduce_scatter(handle(c), send, recv, count,
							       mpi_type(t), mpi_op(op), take_rounds(q), e));
	int rc = MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(t), mpi_op(op),
					   handle(c), q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Ireduce_scatter_block");
}

static int mpi_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_redop op, comm_req *r, titan_err *e)
{
	if (fits_int(count, "all_reduce", e))
		return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	if (t == COMM_BF16) {
		if ((q->f32 = widen(send, count, count)) == NULL) {
			req_free(q);
			return err_set(e, "all_reduce: out of memory");
		}
		q->f32_out = q->f32;
		q->bf16_out = recv;
		q->out_count = count;
		send = recv = q->f32;
		t = COMM_F32;
	}
	if (use_rounds(c, r, count))
		return rounds_started(r, rounds_all_reduce(handle(c), send, recv, count, mpi_type(t),
							   mpi_op(op), take_rounds(q), e));
	const void *s = send == recv ? MPI_IN_PLACE : send;
	int rc = MPI_Iallreduce(s, recv, (int)count, mpi_type(t), mpi_op(op), handle(c), q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Iallreduce");
}

static int mpi_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, comm_req *r,
			 titan_err *e)
{
	if (fits_int(count, "broadcast", e))
		return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	int rc = MPI_Ibcast(buf, (int)count, mpi_type(t), root, handle(c), q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Ibcast");
}

static int mpi_p2p(comm *c, const comm_p2p *ops, int n, comm_req *r, titan_err *e)
{
	enum { TAG = 0x7174 };
	for (int i = 0; i < n; i++)
		if (fits_int(ops[i].count, ops[i].is_send ? "send" : "recv", e))
			return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	if (n > 1 && (q->reqs = calloc((size_t)n, sizeof *q->reqs)) == NULL) {
		q->reqs = &q->one;
		req_free(q);
		return err_set(e, "p2p: out of memory");
	}
	q->n = n;
	for (int i = 0; i < n; i++) {
		int rc = ops[i].is_send
			? MPI_Isend(ops[i].buf, (int)ops[i].count, mpi_type(ops[i].dtype), ops[i].peer,
				    TAG, handle(c), &q->reqs[i])
			: MPI_Irecv(ops[i].buf, (int)ops[i].count, mpi_type(ops[i].dtype), ops[i].peer,
				    TAG, handle(c), &q->reqs[i]);
		if (rc != MPI_SUCCESS)
			return req_fail(r, rc, e, ops[i].is_send ? "MPI_Isend" : "MPI_Irecv");
	}
	return 0;
}

static int mpi_all_to_allv(comm *c, const void *send, const size_t *scounts,
			   const size_t *sdispls, void *recv, const size_t *rcounts,
			   const size_t *rdispls, comm_dtype t, comm_req *r, titan_err *e)
{
	int n = c->size;
	for (int j = 0; j < n; j++)
		if (fits_int(scounts[j] + sdispls[j], "all_to_allv", e) ||
		    fits_int(rcounts[j] + rdispls[j], "all_to_allv", e))
			return -1;
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	if (q->counts == NULL && (q->counts = malloc(4 * (size_t)n * sizeof *q->counts)) == NULL) {
		req_free(q);
		return err_set(e, "all_to_allv: out of memory");
	}
	int *sc = q->counts, *sd = sc + n, *rc_ = sd + n, *rd = rc_ + n;
	for (int j = 0; j < n; j++) {
		sc[j] = (int)scounts[j];
		sd[j] = (int)sdispls[j];
		rc_[j] = (int)rcounts[j];
		rd[j] = (int)rdispls[j];
	}
	if (use_rounds(c, r, 0)) /* counts and displacements checked above */
		return rounds_started(r, rounds_all_to_allv(handle(c), send, sc, sd, recv, rc_, rd,
							    mpi_type(t), take_rounds(q), e));
	int rc = MPI_Ialltoallv(send, sc, sd, mpi_type(t), recv, rc_, rd, mpi_type(t), handle(c),
				q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Ialltoallv");
}

static int mpi_barrier(comm *c, comm_req *r, titan_err *e)
{
	mpi_req *q = req_new(c, r, e);
	if (q == NULL)
		return -1;
	int rc = MPI_Ibarrier(handle(c), q->reqs);
	return rc == MPI_SUCCESS ? 0 : req_fail(r, rc, e, "MPI_Ibarrier");
}

static int mpi_test(comm *c, comm_req *r, int *done, titan_err *e)
{
	(void)c;
	mpi_req *q = r->impl;
	int flag = 0;
	if (q->rounds != NULL) {
		if (rounds_test(q->rounds, &flag, e) != 0)
			return -1; /* q stays: MPI may still write its buffers */
	} else {
		int rc = MPI_Testall(q->n, q->reqs, &flag, MPI_STATUSES_IGNORE);
		if (rc != MPI_SUCCESS)
			return comm_mpi_fail(rc, e, "MPI_Testall"); /* q stays, as above */
	}
	if (!flag) {
		*done = 0;
		return 0;
	}
	for (size_t i = 0; i < q->out_count; i++)
		q->bf16_out[i] = bf16_from_f32(q->f32_out[i]);
	req_done(q);
	r->impl = NULL;
	*done = 1;
	return 0;
}

static void mpi_abandon(comm *c, comm_req *r)
{
	(void)c;
	mpi_req *q = r->impl;
	q->next = g.abandoned;
	g.abandoned = q;
	r->impl = NULL;
}

static int mpi_split(comm *c, int color, int key, comm *out, titan_err *e)
{
	mpi_comm *m = calloc(1, sizeof *m);
	if (m == NULL)
		return err_set(e, "out of memory");
	int rc = MPI_Comm_split(handle(c), color, key, &m->h);
	if (rc != MPI_SUCCESS) {
		free(m);
		return comm_mpi_fail(rc, e, "MPI_Comm_split");
	}
	MPI_Comm_rank(m->h, &out->rank);
	MPI_Comm_size(m->h, &out->size);
	out->ops = &mpi_ops;
	out->impl = m;
	return 0;
}

static void mpi_free(comm *c)
{
	mpi_comm *m = c->impl;
	mpi_req *spare = atomic_exchange(&m->spare, NULL);
	if (spare != NULL)
		req_free(spare);
	MPI_Comm_free(&m->h);
	free(m);
}

static const comm_ops mpi_ops = {
	.name = "mpi",
	.split = mpi_split,
	.all_gather = mpi_all_gather,
	.reduce_scatter = mpi_reduce_scatter,
	.all_reduce = mpi_all_reduce,
	.broadcast = mpi_broadcast,
	.p2p = mpi_p2p,
	.all_to_allv = mpi_all_to_allv,
	.barrier = mpi_barrier,
	.test = mpi_test,
	.abandon = mpi_abandon,
	.free = mpi_free,
};

static void mpi_progress(void)
{
	int flag;
	MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g.progress, &flag, MPI_STATUS_IGNORE);
}

/* The variables a launcher sets to its number of processes; then
 * TITAN_COMM, which env_starts_mpi also looks for. */
static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE",
					    "SLURM_STEP_NUM_TASKS", "WORLD_SIZE", "TITAN_COMM"};
#define N_LAUNCHER_VARS (sizeof launcher_vars / sizeof launcher_vars[0] - 1)

/* Whether a launcher started this process as one rank of several. */
static int launcher_size(void)
{
	int n = 0;
	for (size_t i = 0; i < N_LAUNCHER_VARS; i++) {
		const char *v = getenv(launcher_vars[i]);
		if (v != NULL && atoi(v) > n)
			n = atoi(v);
	}
	return n;
}

/* The ranks of this node that this process can see, for the watchdog. */
static int node_peers(int rank, comm_peer **out, int *nout, titan_err *e)
{
	int ids[2] = {rank, (int)getpid()};
	int *all = malloc(2 * (size_t)g.local_size * sizeof *all);
	*out = malloc((size_t)g.local_size * sizeof **out);
	if (all == NULL || *out == NULL) {
		free(all);
		free(*out);
		return err_set(e, "out of memory");
	}
	int rc = MPI_Allgather(ids, 2, MPI_INT, all, 2, MPI_INT, g.local);
	if (rc != MPI_SUCCESS) {
		free(all);
		free(*out);
		return comm_mpi_fail(rc, e, "MPI_Allgather (node ranks)");
	}
	int n = 0;
	for (int i = 0; i < g.local_size; i++) {
		pid_t pid = (pid_t)all[2 * i + 1];
		/* Another pid namespace (a container per rank) shows other processes:
		 * watch only those seen now. */
		if (all[2 * i] != rank && kill(pid, 0) == 0)
			(*out)[n++] = (comm_peer){all[2 * i], pid};
	}
	free(all);
	*nout = n;
	return 0;
}

static int start_world(comm *w, titan_err *e)
{
	mpi_comm *m = calloc(1, sizeof *m);
	if (m == NULL)
		return err_set(e, "out of memory");
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->h);
	if (rc != MPI_SUCCESS) {
		free(m);
		return comm_mpi_fail(rc, e, "MPI_Comm_dup");
	}
	w->ops = &mpi_ops;
	w->impl = m;
	MPI_Comm_rank(m->h, &w->rank);
	MPI_Comm_size(m->h, &w->size);
	w->world_rank = w->rank;
	snprintf(w->name, sizeof w->name, "world");
	if ((rc = MPI_Comm_split_type(m->h, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &g.local)) !=
		    MPI_SUCCESS ||
	    (rc = MPI_Comm_dup(MPI_COMM_SELF, &g.progress)) != MPI_SUCCESS)
		return comm_mpi_fail(rc, e, "MPI communicators of the node");
	MPI_Comm_rank(g.local, &g.local_rank);
	MPI_Comm_size(g.local, &g.local_size);
	if (start_reporter() != 0) /* then every rank reports: noisier, no worse */
		g.reporter = NULL;
	return 0;
}

/* TITAN_COMM=mpi: MPI's own world of one for a process no launcher started
 * (the tests of MPI alone); unset or empty, such a process runs without MPI.
 * 1, 0, or -1 with e for another value. */
static int want_mpi_alone_or_bad(titan_err *e)
{
	const char *v = getenv("TITAN_COMM");
	if (v == NULL || *v == 0)
		return 0;
	if (strcmp(v, "mpi") == 0)
		return 1;
	return err_set(e, "TITAN_COMM=%s: the one value it takes is mpi", v);
}

/* Open MPI keeps what MPI_Init allocates (much of it in components it
 * dlopens and closes) until exit.  LeakSanitizer, in the builds that have it,
 * is told so here, where MPI is used: the allocations under Open MPI's
 * libraries are not titan's leaks.  Open MPI's libraries and components have
 * no frame pointers, so a process that starts MPI (a launcher's rank, or
 * TITAN_COMM=mpi) takes the slow unwinder, which walks the DWARF tables at
 * every allocation (test_tok under ASan spent most of its time there when
 * every process did), and only 8 frames deep: enough to reach the library
 * under a component, and a third less time for a rank under ASan than the 30
 * frames of the default (an ASan report there shows 8 frames of where the
 * memory was allocated and freed). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libhwloc.so\n"
	       "leak:libevent\nleak:libpmix.so\n";
}

/* Whether this process will start MPI (a launcher's variable, or
 * TITAN_COMM), asked by the sanitizer as it starts: before its shadow memory,
 * its interceptors of open and read, and the C library's environ exist, so
 * nothing here is instrumented and the environment is read from
 * /proc/self/environ with bare system calls.  When it cannot tell: yes. */
__attribute__((no_sanitize_address)) static int env_starts_mpi(void)
{
	static char buf[1 << 18];
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	size_t n = 0;
	long got;
	while (n < sizeof buf && (got = syscall(SYS_read, fd, buf + n, sizeof buf - n)) > 0)
		n += (size_t)got;
	syscall(SYS_close, fd);
	if (n == sizeof buf)
		return 1;
	for (size_t at = 0; at < n;) {
		for (size_t k = 0; k < N_LAUNCHER_VARS + 1; k++) { /* TITAN_COMM too */
			const char *name = launcher_vars[k];
			size_t j = 0;
			while (name[j] && at + j < n && buf[at + j] == name[j])
				j++;
			if (!name[j] && at + j < n && buf[at + j] == '=')
				return 1;
		}
		while (at < n && buf[at])
			at++;
		at++;
	}
	return 0;
}

/* In the sanitizer builds no shared object is unloaded: a component Open MPI
 * closed would leave its allocations' frames in no module, which neither a
 * suppression nor a reader can place, and its globals, which still point at
 * them, unscanned. */
#if defined(__SANITIZE_ADDRESS__)
int dlclose(void *handle);
int dlclose(void *handle)
{
	(void)handle;
	return 0;
}
#endif

const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
	if (!env_starts_mpi())
		return "print_suppressions=0";
	return "fast_unwind_on_malloc=0:malloc_context_size=8:print_suppressions=0";
}

/* A job whose ranks are all on this node (Open MPI's launcher says so)
 * takes Open MPI's ob1 over shared memory, unless the user chose a pml.
 * Open MPI tries UCX first, for the networks such a job never uses: where
 * UCX finds none it is refused after 0.2 s of every rank's MPI_Init, and ob1
 * runs anyway (mpirun -np 4 of a program that starts MPI and meets at a
 * barrier, 2-core AVX2 Zen without a network: 0.50 s, 0.29 s with ob1).  A
 * job across nodes keeps Open MPI's choice. */
static void one_node_pml(void)
{
	const char *size = getenv("OMPI_COMM_WORLD_SIZE");
	const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (size != NULL && local != NULL && strcmp(size, local) == 0)
		setenv("OMPI_MCA_pml", "ob1", 0);
}

int comm_init(int *argc, char ***argv, double timeout_s, comm **world, titan_err *e)
{
	int inited = 0, provided = 0, rc;
	MPI_Initialized(&inited);
	int launched = launcher_size(), mpi_alone = want_mpi_alone_or_bad(e);
	if (mpi_alone < 0)
		return -1;
	if (!inited && launched == 0 && !mpi_alone)
		return comm_solo_init(timeout_s, world, e);
	if (!inited) {
		/* Alone, Open MPI would start a daemon to be able to spawn processes
		 * later; titan never spawns. */
		if (launched == 0)
			setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
		one_node_pml();
		if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS)
			return comm_mpi_fail(rc, e, "MPI_Init_thread");
		g.we_initialised = 1;
	} else {
		MPI_Query_thread(&provided);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	comm *w = calloc(1, sizeof *w);
	if (w == NULL)
		return err_set(e, "out of memory");
	if (start_world(w, e) != 0) {
		free(w);
		return -1;
	}
	if (launched > 1 && w->size == 1) {
		err_set(e, "the launcher started %d processes but MPI sees each alone: start them "
			"with mpirun, or srun --mpi=pmix (torchrun is not an MPI launcher)", launched);
		comm_finalize(w);
		return -1;
	}
	char host[MPI_MAX_PROCESSOR_NAME] = "";
	int hlen = 0;
	MPI_Get_processor_name(host, &hlen);
	comm_peer *peers = NULL;
	int npeers = 0;
	if ((w->rt = comm_rt_create(w->rank, w->size, timeout_s, e)) == NULL ||
	    node_peers(w->rank, &peers, &npeers, e) != 0) {
		comm_finalize(w);
		return -1;
	}
	/* Driving progress from a second thread needs MPI_THREAD_MULTIPLE; without
	 * it, started operations move only while someone waits. */
	rc = comm_rt_start(w->rt, peers, npeers, host,
			   provided >= MPI_THREAD_MULTIPLE ? mpi_progress : NULL, e);
	free(peers);
	if (rc != 0) {
		comm_finalize(w);
		return -1;
	}
	comm_rt_add(w->rt, w);
	*world = w;
	return 0;
}

int comm_local_rank(const comm *world)
{
	(void)world;
	return g.local_rank;
}

int comm_local_size(const comm *world)
{
	(void)world;
	return g.local_size;
}

void comm_finalize(comm *world)
{
	if (world == NULL)
		return;
	comm_runtime *rt = world->rt;
	if (rt != NULL) {
		comm_rt_free_comms(rt, world);
		comm_rt_free(rt);
	} else {
		mpi_free(world);
		free(world);
	}
	if (g.report_win != MPI_WIN_NULL)
		MPI_Win_free(&g.report_win);
	g.reporter = NULL;
	if (g.local != MPI_COMM_NULL)
		MPI_Comm_free(&g.local);
	if (g.progress != MPI_COMM_NULL)
		MPI_Comm_free(&g.progress);
	int fin = 0, inited = 0;
	MPI_Initialized(&inited);
	if (!inited)
		return; /* the world of one without MPI (solo.c) */
	MPI_Finalized(&fin);
	if (g.we_initialised && !fin)
		MPI_Finalize();
	while (g.abandoned != NULL) {
		mpi_req *q = g.abandoned;
		g.abandoned = q->next;
		req_free(q);
	}
}

_Noreturn void comm_abort(comm *world, int status)
{
	fflush(stdout);
	fflush(stderr);
	/* Open MPI forwards a rank's output through its node's daemon, on
	 * another path than the abort, which can overtake it and tear the job
	 * down first: a moment for the reason just printed to get out. */
	if (world != NULL && world->size > 1)
		nanosleep(&(struct timespec){0, 200000000L}, NULL);
	int inited = 0;
	MPI_Initialized(&inited);
	if (!inited)
		_exit(status != 0 ? status : 1);
	MPI_Abort(MPI_COMM_WORLD, status != 0 ? status : 1);
	_exit(status != 0 ? status : 1);
}
