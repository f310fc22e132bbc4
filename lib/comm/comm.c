/* comm.c: the functions every implementation shares: argument checks,
 * counting, requests, deadlines and the wait loop. */
#include "comm/comm.h"
#include "comm/comm_priv.h"
#include "core/crc32c.h"

#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t dtype_sizes[COMM_DTYPE_COUNT] = {4, 8, 2, 4, 8, 1};
static const char *const dtype_names[COMM_DTYPE_COUNT] = {"float32", "float64", "bfloat16",
							 "int32", "int64", "uint8"};
static const char *const op_names[COMM_OP_COUNT] = {
	"all_gather", "reduce_scatter", "all_reduce", "broadcast", "send",
	"recv", "all_to_all", "all_to_allv", "barrier",
};

size_t comm_dtype_size(comm_dtype t)
{
	return (unsigned)t < COMM_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

const char *comm_dtype_name(comm_dtype t)
{
	return (unsigned)t < COMM_DTYPE_COUNT ? dtype_names[t] : "?";
}

const char *comm_op_name(comm_op op)
{
	return (unsigned)op < COMM_OP_COUNT ? op_names[op] : "?";
}

uint64_t comm_bytes_sent(const comm *c)
{
	uint64_t s = 0;
	for (int i = 0; i < COMM_OP_COUNT; i++)
		s += c->stats.bytes_sent[i];
	return s;
}

const char *comm_failure(const comm *c)
{
	return comm_rt_failure(c->rt);
}

/* "comm 'tp' (rank 1 of 2, world rank 5): " in front of e's message. */
static int fail_here(comm *c, titan_err *e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail_here(comm *c, titan_err *e, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return err_set(e, "rank %d: comm '%s' (rank %d of %d): %s", c->world_rank, c->name, c->rank,
		       c->size, msg);
}

/* Every entry point: refuse to start work once the process has failed, so
 * that a rank stops at the first operation after a peer died. */
static int check_alive(comm *c, const char *what, titan_err *e)
{
	const char *f = comm_rt_failure(c->rt);
	if (f != NULL)
		return fail_here(c, e, "%s not started: %s", what, f);
	return 0;
}

static int check_dtype(comm *c, comm_op op, comm_dtype t, titan_err *e)
{
	if ((unsigned)t >= COMM_DTYPE_COUNT)
		return fail_here(c, e, "%s: unknown element type %d", comm_op_name(op), (int)t);
	return 0;
}

static int check_reduce(comm *c, comm_op op, comm_dtype t, comm_redop rop, titan_err *e)
{
	if (check_dtype(c, op, t, e) != 0)
		return -1;
	if ((unsigned)rop >= COMM_REDOP_COUNT)
		return fail_here(c, e, "%s: unknown reduction %d", comm_op_name(op), (int)rop);
	if (t == COMM_U8)
		return fail_here(c, e, "%s: uint8 elements cannot be reduced", comm_op_name(op));
	return 0;
}

static int check_rank(comm *c, comm_op op, const char *what, int r, titan_err *e)
{
	if (r < 0 || r >= c->size)
		return fail_here(c, e, "%s: %s %d is not a rank of this communicator", comm_op_name(op),
				 what, r);
	return 0;
}

static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
	const char *pa = a, *pb = b;
	return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

/* The deadline counts from now.  A blocking call reads the clock first in
 * its wait, after its first polls (a few microseconds): most calls of a few
 * KiB finish before, and never pay for the clock (30 ns a read, a few per
 * cent of such a call). */
static void start_clock(comm_req *r)
{
	r->started = comm_now();
	r->deadline = r->started + comm_rt_timeout(r->c->rt);
}

double comm_req_deadline(comm_req *r)
{
	if (r->blocking && r->started == 0)
		start_clock(r);
	return r->deadline;
}

/* A request: a blocking call's in its caller's frame (held, waited at once:
 * no allocation in the path of the small collectives, whose calls take a
 * microsecond), a started operation's on the heap, freed by its wait. */
static int new_req(comm *c, comm_op op, size_t bytes, comm_req *held, comm_req **out,
		   titan_err *e)
{
	comm_req *r = held;
	if (r != NULL)
		memset(r, 0, sizeof *r);
	else if ((r = calloc(1, sizeof *r)) == NULL)
		return fail_here(c, e, "%s: out of memory", comm_op_name(op));
	r->c = c;
	r->op = op;
	r->seq = ++c->seq;
	r->bytes = bytes;
	r->blocking = held != NULL;
	if (!r->blocking) /* a blocking call's clock starts in its wait */
		start_clock(r);
	*out = r;
	return 0;
}

static void free_req(comm_req *r)
{
	if (!r->blocking)
		free(r);
}

/* The implementation's start failed: r was never handed out. */
static int drop_req(comm_req *r)
{
	free_req(r);
	return -1;
}

/* A started operation nobody waits for yet is the watchdog's to move
 * (comm_priv.h); a blocking call's is not: its caller waits at once, and
 * telling the watchdog would wake it (a futex call, and a thread that takes
 * a core from the ranks spinning in their waits) for every call. */
static void unattended(comm_req *r, int delta)
{
	if (!r->blocking)
		comm_rt_unattended(r->c->rt, delta);
}

/* Started: count it (sent: the bytes this rank sends, see comm.h). */
static int started(comm_req *r, uint64_t sent, comm_req **out)
{
	r->c->stats.calls[r->op]++;
	r->c->stats.bytes_sent[r->op] += sent;
	unattended(r, 1);
	*out = r;
	return 0;
}

static int all_gather_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			    comm_req *held, comm_req **out, titan_err *e)
{
	comm_op op = COMM_OP_ALL_GATHER;
	if (check_alive(c, comm_op_name(op), e) || check_dtype(c, op, t, e))
		return -1;
	size_t b = count * comm_dtype_size(t);
	int in_place = send == (const char *)recv + (size_t)c->rank * b;
	if (!in_place && overlap(send, b, recv, b * (size_t)c->size))
		return fail_here(c, e, "all_gather: send overlaps recv other than in place");
	comm_req *r;
	if (new_req(c, op, b, held, &r, e) != 0)
		return -1;
	if (c->ops->all_gather(c, send, recv, count, t, r, e) != 0)
		return drop_req(r);
	return started(r, (uint64_t)(c->size - 1) * b, out);
}

static int reduce_scatter_start(comm *c, const void *send, void *recv, size_t count,
				comm_dtype t, comm_redop rop, comm_req *held, comm_req **out,
				titan_err *e)
{
	comm_op op = COMM_OP_REDUCE_SCATTER;
	if (check_alive(c, comm_op_name(op), e) || check_reduce(c, op, t, rop, e))
		return -1;
	size_t b = count * comm_dtype_size(t);
	if (overlap(send, b * (size_t)c->size, recv, b))
		return fail_here(c, e, "reduce_scatter: send and recv overlap");
	comm_req *r;
	if (new_req(c, op, b, held, &r, e) != 0)
		return -1;
	if (c->ops->reduce_scatter(c, send, recv, count, t, rop, r, e) != 0)
		return drop_req(r);
	return started(r, (uint64_t)(c->size - 1) * b, out);
}

static int all_reduce_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			    comm_redop rop, comm_req *held, comm_req **out, titan_err *e)
{
	comm_op op = COMM_OP_ALL_REDUCE;
	if (check_alive(c, comm_op_name(op), e) || check_reduce(c, op, t, rop, e))
		return -1;
	size_t b = count * comm_dtype_size(t);
	if (send != recv && overlap(send, b, recv, b))
		return fail_here(c, e, "all_reduce: send and recv overlap without being equal");
	comm_req *r;
	uint64_t n = (uint64_t)c->size;
	if (new_req(c, op, b, held, &r, e) != 0)
		return -1;
	if (c->ops->all_reduce(c, send, recv, count, t, rop, r, e) != 0)
		return drop_req(r);
	return started(r, 2 * (n - 1) * (uint64_t)b / n, out);
}

static int broadcast_start(comm *c, void *buf, size_t count, comm_dtype t, int root,
			   comm_req *held, comm_req **out, titan_err *e)
{
	comm_op op = COMM_OP_BROADCAST;
	if (check_alive(c, comm_op_name(op), e) || check_dtype(c, op, t, e) ||
	    check_rank(c, op, "root", root, e))
		return -1;
	size_t b = count * comm_dtype_size(t);
	int last = (root + c->size - 1) % c->size; /* the ring's end forwards nothing */
	comm_req *r;
	if (new_req(c, op, b, held, &r, e) != 0)
		return -1;
	if (c->ops->broadcast(c, buf, count, t, root, r, e) != 0)
		return drop_req(r);
	return started(r, c->size > 1 && c->rank != last ? b : 0, out);
}

static int p2p_start(comm *c, const comm_p2p *ops, int n, comm_req *held, comm_req **out,
		     titan_err *e)
{
	uint64_t sent = 0, bytes = 0;
	int sends = 0;
	if (check_alive(c, "send/recv", e))
		return -1;
	for (int i = 0; i < n; i++) {
		comm_op op = ops[i].is_send ? COMM_OP_SEND : COMM_OP_RECV;
		if (check_dtype(c, op, ops[i].dtype, e) || check_rank(c, op, "peer", ops[i].peer, e))
			return -1;
		size_t b = ops[i].count * comm_dtype_size(ops[i].dtype);
		bytes += b;
		if (ops[i].is_send) {
			sent += b;
			sends++;
		}
	}
	comm_req *r;
	if (new_req(c, sends > 0 ? COMM_OP_SEND : COMM_OP_RECV, bytes, held, &r, e) != 0)
		return -1;
	if (c->ops->p2p(c, ops, n, r, e) != 0)
		return drop_req(r);
	/* A batch counts each of its sends and receives. */
	c->stats.calls[COMM_OP_SEND] += (uint64_t)sends;
	c->stats.calls[COMM_OP_RECV] += (uint64_t)(n - sends);
	c->stats.bytes_sent[COMM_OP_SEND] += sent;
	unattended(r, 1);
	*out = r;
	return 0;
}

int comm_p2p_start(comm *c, const comm_p2p *ops, int n, comm_req **out, titan_err *e)
{
	return p2p_start(c, ops, n, NULL, out, e);
}

int comm_send_start(comm *c, const void *buf, size_t count, comm_dtype t, int peer,
		    comm_req **r, titan_err *e)
{
	comm_p2p p = {1, peer, (void *)buf, count, t};
	return p2p_start(c, &p, 1, NULL, r, e);
}

int comm_recv_start(comm *c, void *buf, size_t count, comm_dtype t, int peer, comm_req **r,
		    titan_err *e)
{
	comm_p2p p = {0, peer, buf, count, t};
	return p2p_start(c, &p, 1, NULL, r, e);
}

/* The v form carries both: all-to-all is counted as itself. */
static int all_to_allv_start(comm *c, comm_op op, const void *send, const size_t *scounts,
			     const size_t *sdispls, void *recv, const size_t *rcounts,
			     const size_t *rdispls, comm_dtype t, comm_req *held, comm_req **out,
			     titan_err *e)
{
	if (check_alive(c, comm_op_name(op), e) || check_dtype(c, op, t, e))
		return -1;
	size_t es = comm_dtype_size(t), stot = 0, rtot = 0, sent = 0;
	for (int j = 0; j < c->size; j++) {
		if (scounts[j] + sdispls[j] > stot)
			stot = scounts[j] + sdispls[j];
		if (rcounts[j] + rdispls[j] > rtot)
			rtot = rcounts[j] + rdispls[j];
		if (j != c->rank)
			sent += scounts[j] * es;
	}
	if (overlap(send, stot * es, recv, rtot * es))
		return fail_here(c, e, "%s: send and recv overlap", comm_op_name(op));
	comm_req *r;
	if (new_req(c, op, stot * es, held, &r, e) != 0)
		return -1;
	if (c->ops->all_to_allv(c, send, scounts, sdispls, recv, rcounts, rdispls, t, r, e) != 0)
		return drop_req(r);
	return started(r, sent, out);
}

int comm_all_to_allv_start(comm *c, const void *send, const size_t *send_counts,
			   const size_t *send_displs, void *recv, const size_t *recv_counts,
			   const size_t *recv_displs, comm_dtype t, comm_req **r, titan_err *e)
{
	return all_to_allv_start(c, COMM_OP_ALL_TO_ALLV, send, send_counts, send_displs, recv,
				 recv_counts, recv_displs, t, NULL, r, e);
}

static int all_to_all_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			    comm_req *held, comm_req **r, titan_err *e)
{
	size_t n = (size_t)c->size;
	size_t *v = malloc(2 * n * sizeof *v);
	if (v == NULL)
		return fail_here(c, e, "all_to_all: out of memory");
	for (size_t j = 0; j < n; j++) {
		v[j] = count;
		v[n + j] = j * count;
	}
	int rc = all_to_allv_start(c, COMM_OP_ALL_TO_ALL, send, v, v + n, recv, v, v + n, t,
				   held, r, e);
	free(v);
	return rc;
}

static int barrier_start(comm *c, comm_req *held, comm_req **out, titan_err *e)
{
	if (check_alive(c, comm_op_name(COMM_OP_BARRIER), e))
		return -1;
	comm_req *r;
	if (new_req(c, COMM_OP_BARRIER, 0, held, &r, e) != 0)
		return -1;
	if (c->ops->barrier(c, r, e) != 0)
		return drop_req(r);
	return started(r, 0, out);
}

/* Which rank an operation of c that timed out waits for: a rank of c this
 * node sees stopped (SIGSTOP, a debugger), else the other rank of a pair
 * (it alone can hold the operation up); else no rank can be named without
 * hearing from them, which the hung one cannot do. */
static void hung_peer(comm *c, char *buf, size_t n)
{
	int *members = malloc((size_t)c->size * sizeof *members), other = -1;
	if (members != NULL && comm_mpi_world_ranks(c, members) != 0) {
		free(members);
		members = NULL;
	}
	char stopped[300];
	int ns = comm_rt_stopped_peers(c->rt, members, members != NULL ? c->size : 0, stopped,
				       sizeof stopped);
	if (members != NULL && c->size == 2)
		other = members[members[0] == c->world_rank ? 1 : 0];
	free(members);
	if (ns > 0)
		snprintf(buf, n, "%s %s stopped (SIGSTOP or a debugger); the others wait for it",
			 stopped, ns > 1 ? "are" : "is");
	else if (other >= 0)
		snprintf(buf, n, "rank %d, the other rank of '%s', did not take part (hung, dead or "
			 "far behind)", other, c->name);
	else
		snprintf(buf, n, "a peer rank is hung, dead or far behind");
}

/* Poll until done: spin first (a collective of a few KiB takes microseconds),
 * then yield the core (ranks may outnumber cores), then sleep a little. */
int comm_wait(comm_req *r, titan_err *e)
{
	comm *c = r->c;
	int done = 0, rc = 0;
	unattended(r, -1);
	for (long polls = 0;; polls++) {
		if (c->ops->test(c, r, &done, e) != 0) {
			comm_rt_fail(c->rt, "rank %d: comm '%s': %s #%llu: %s", c->world_rank, c->name,
				     comm_op_name(r->op), (unsigned long long)r->seq, e->msg);
			rc = err_set(e, "%s", comm_rt_failure(c->rt));
			break;
		}
		if (done)
			break;
		if ((polls & 63) != 63)
			continue;
		const char *f = comm_rt_failure(c->rt);
		comm_req_deadline(r);
		double now = comm_now();
		if (f != NULL) {
			rc = fail_here(c, e, "%s #%llu (%zu bytes) abandoned: %s", comm_op_name(r->op),
				       (unsigned long long)r->seq, r->bytes, f);
			break;
		}
		if (now > r->deadline) {
			char who[400];
			hung_peer(c, who, sizeof who);
			comm_rt_fail(c->rt, "rank %d: comm '%s': %s #%llu (%zu bytes) timed out after "
				     "%g s: %s", c->world_rank, c->name, comm_op_name(r->op),
				     (unsigned long long)r->seq, r->bytes, r->deadline - r->started, who);
			rc = err_set(e, "%s", comm_rt_failure(c->rt));
			break;
		}
		if (now - r->started < 1e-4) {
			continue;
		} else if (now - r->started < 1e-2) {
			sched_yield();
		} else {
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
	}
	if (rc != 0 && r->impl != NULL && c->ops->abandon != NULL)
		c->ops->abandon(c, r);
	free_req(r);
	return rc;
}

int comm_sync(comm *c, titan_err *e)
{
	return c->ops->sync != NULL ? c->ops->sync(c, e) : 0;
}

int comm_all_gather_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req **r, titan_err *e)
{
	return all_gather_start(c, send, recv, count, t, NULL, r, e);
}

int comm_reduce_scatter_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			      comm_redop op, comm_req **r, titan_err *e)
{
	return reduce_scatter_start(c, send, recv, count, t, op, NULL, r, e);
}

int comm_all_reduce_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_redop op, comm_req **r, titan_err *e)
{
	return all_reduce_start(c, send, recv, count, t, op, NULL, r, e);
}

int comm_broadcast_start(comm *c, void *buf, size_t count, comm_dtype t, int root,
			 comm_req **r, titan_err *e)
{
	return broadcast_start(c, buf, count, t, root, NULL, r, e);
}

int comm_all_to_all_start(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req **r, titan_err *e)
{
	return all_to_all_start(c, send, recv, count, t, NULL, r, e);
}

/* The blocking calls: started as blocking (the implementation may then use
 * a faster form that moves only while waited for, mpi_rounds.h) and waited. */
int comm_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    titan_err *e)
{
	comm_req held, *r;
	if (all_gather_start(c, send, recv, count, t, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			comm_redop op, titan_err *e)
{
	comm_req held, *r;
	if (reduce_scatter_start(c, send, recv, count, t, op, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    comm_redop op, titan_err *e)
{
	comm_req held, *r;
	if (all_reduce_start(c, send, recv, count, t, op, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, titan_err *e)
{
	comm_req held, *r;
	if (broadcast_start(c, buf, count, t, root, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_send(comm *c, const void *buf, size_t count, comm_dtype t, int peer, titan_err *e)
{
	comm_p2p p = {1, peer, (void *)buf, count, t};
	comm_req held, *r;
	if (p2p_start(c, &p, 1, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_recv(comm *c, void *buf, size_t count, comm_dtype t, int peer, titan_err *e)
{
	comm_p2p p = {0, peer, buf, count, t};
	comm_req held, *r;
	if (p2p_start(c, &p, 1, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_all_to_all(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		    titan_err *e)
{
	comm_req held, *r;
	if (all_to_all_start(c, send, recv, count, t, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_all_to_allv(comm *c, const void *send, const size_t *send_counts,
		     const size_t *send_displs, void *recv, const size_t *recv_counts,
		     const size_t *recv_displs, comm_dtype t, titan_err *e)
{
	comm_req held, *r;
	if (all_to_allv_start(c, COMM_OP_ALL_TO_ALLV, send, send_counts, send_displs, recv,
			      recv_counts, recv_displs, t, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_barrier(comm *c, titan_err *e)
{
	comm_req held, *r;
	if (barrier_start(c, &held, &r, e) != 0)
		return -1;
	return comm_wait(r, e);
}

int comm_split(comm *c, int color, int key, const char *name, comm **out, titan_err *e)
{
	if (check_alive(c, "split", e))
		return -1;
	/* MPI_Comm_split blocks without a deadline: a barrier first, which has
	 * one, so that a rank that never arrives ends the split in a timeout. */
	if (comm_is_mpi(c) && c->size > 1 && comm_barrier(c, e) != 0)
		return -1;
	comm *n = calloc(1, sizeof *n);
	if (n == NULL)
		return fail_here(c, e, "split: out of memory");
	n->rt = c->rt;
	n->world_rank = c->world_rank;
	snprintf(n->name, sizeof n->name, "%s", name);
	if (c->ops->split(c, color, key, n, e) != 0) {
		free(n);
		return -1;
	}
	comm_rt_add(c->rt, n);
	*out = n;
	return 0;
}

void comm_free(comm *c)
{
	if (c == NULL)
		return;
	comm_rt_remove(c->rt, c);
	c->ops->free(c);
	free(c);
}

int comm_set_timeout(comm *world, double timeout_s, titan_err *e)
{
	if (!(timeout_s > 0))
		return fail_here(world, e, "timeout %g s: must be positive", timeout_s);
	if (comm_barrier(world, e) != 0)
		return -1;
	comm_rt_set_timeout(world->rt, timeout_s);
	return 0;
}

/* An agreement text longer than this is no configuration: refused before
 * every rank allocates it on another rank's word. */
#define AGREE_MAX_BYTES ((size_t)64 << 20)

/* The bytes of rank root broadcast to every rank (len known from the gather). */
static int bcast_bytes(comm *c, const void *mine, size_t len, int root, char **out, titan_err *e)
{
	char *p = malloc(len + 1);
	if (p == NULL)
		return fail_here(c, e, "agreement: out of memory for %zu bytes", len);
	if (c->rank == root)
		memcpy(p, mine, len);
	if (len > 0 && comm_broadcast(c, p, len, COMM_U8, root, e) != 0) {
		free(p);
		return -1;
	}
	p[len] = '\0';
	*out = p;
	return 0;
}

int comm_agree_bytes(comm *c, const void *buf, size_t n, int *other, char **a, size_t *na,
		     char **b, size_t *nb, titan_err *e)
{
	*other = -1;
	*a = *b = NULL;
	*na = *nb = 0;
	if (n > AGREE_MAX_BYTES)
		return fail_here(c, e, "agreement: %zu bytes, more than %zu", n, AGREE_MAX_BYTES);
	int64_t mine[2] = {(int64_t)crc32c(0, buf, n), (int64_t)n};
	int64_t *all = malloc(2 * (size_t)c->size * sizeof *all);
	if (all == NULL)
		return fail_here(c, e, "agreement: out of memory");
	if (comm_all_gather(c, mine, all, 2, COMM_I64, e) != 0) {
		free(all);
		return -1;
	}
	int r = 1;
	while (r < c->size && all[2 * r] == all[0] && all[2 * r + 1] == all[1])
		r++;
	size_t len0 = (size_t)all[1], lenr = r < c->size ? (size_t)all[2 * r + 1] : 0;
	free(all);
	if (r == c->size)
		return 0;
	if (len0 > AGREE_MAX_BYTES || lenr > AGREE_MAX_BYTES)
		return fail_here(c, e, "agreement: rank %d holds %zu bytes, rank 0 %zu", r, lenr, len0);
	if (bcast_bytes(c, buf, len0, 0, a, e) != 0)
		return -1;
	if (bcast_bytes(c, buf, lenr, r, b, e) != 0) {
		free(*a);
		*a = NULL;
		return -1;
	}
	*na = len0;
	*nb = lenr;
	*other = r;
	return 0;
}

int comm_agree_status(comm *c, int failed, int *first, int *nfailed, titan_err *e)
{
	int32_t mine = failed != 0, *all = malloc((size_t)c->size * sizeof *all);
	if (all == NULL)
		return fail_here(c, e, "status agreement: out of memory");
	if (comm_all_gather(c, &mine, all, 1, COMM_I32, e) != 0) {
		free(all);
		return -1;
	}
	*first = -1;
	*nfailed = 0;
	for (int r = 0; r < c->size; r++)
		if (all[r]) {
			if (*first < 0)
				*first = r;
			++*nfailed;
		}
	free(all);
	return 0;
}

/* A rank's share of comm_all_gather_bytes over this is no metadata: refused
 * before every rank allocates size times it on one rank's word. */
#define GATHER_MAX_BYTES ((size_t)256 << 20)

int comm_all_gather_bytes(comm *c, const void *send, size_t n, uint8_t **all, size_t *n_all,
			  titan_err *e)
{
	*all = NULL;
	*n_all = 0;
	size_t size = (size_t)c->size;
	int64_t mine = (int64_t)n, *len = malloc(size * sizeof *len);
	if (len == NULL)
		return fail_here(c, e, "gather: out of memory");
	if (comm_all_gather(c, &mine, len, 1, COMM_I64, e) != 0) {
		free(len);
		return -1;
	}
	size_t most = 0, total = 0;
	for (size_t r = 0; r < size; r++) {
		if (len[r] < 0 || (size_t)len[r] > GATHER_MAX_BYTES) {
			int64_t bad = len[r];
			free(len);
			return fail_here(c, e, "gather: rank %zu sends %lld bytes, more than %zu", r,
					 (long long)bad, GATHER_MAX_BYTES);
		}
		most = (size_t)len[r] > most ? (size_t)len[r] : most;
		total += (size_t)len[r];
	}
	/* every rank's bytes padded to the longest, then packed in rank order */
	uint8_t *pad = calloc(most ? most : 1, 1), *got = malloc(size * most + 1);
	uint8_t *out = malloc(total + 1);
	/* every rank learns of one that has no room, rather than waiting for it
	 * in the gather until the deadline */
	int32_t short_of = !pad || !got || !out, any = 0;
	int rc = comm_all_reduce(c, &short_of, &any, 1, COMM_I32, COMM_MAX, e);
	if (rc == 0 && any)
		rc = fail_here(c, e, "gather of %zu bytes: %s out of memory", total,
			       short_of ? "this rank is" : "another rank is");
	if (rc == 0 && most > 0) {
		if (n > 0)
			memcpy(pad, send, n);
		rc = comm_all_gather(c, pad, got, most, COMM_U8, e);
	}
	for (size_t r = 0, at = 0; rc == 0 && r < size; at += (size_t)len[r], r++)
		if (len[r] > 0)
			memcpy(out + at, got + r * most, (size_t)len[r]);
	free(pad);
	free(got);
	free(len);
	if (rc != 0) {
		free(out);
		return -1;
	}
	*all = out;
	*n_all = total;
	return 0;
}
