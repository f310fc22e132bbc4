/* solo.c: the world of one process that no launcher started, without MPI.
 *
 * MPI_Init alone costs a single process about 0.2 s (Open MPI reads the
 * machine's topology, loads its components and maps shared memory), more
 * than the rest of titan-train's start-up together, to set up collectives
 * over one rank.  Over one rank every collective is the identity: gathers,
 * reductions (a sum or max of one value is that value, bfloat16 included)
 * and all-to-all copy their input, a broadcast or a barrier does nothing.
 * Sends to itself are queued and matched with receives in the order both
 * were posted, as MPI matches messages of one source and tag.
 *
 * TITAN_COMM=mpi makes comm_init start MPI even alone (the tests of MPI's
 * world of one). */
#include "comm/comm.h"
#include "comm/comm_priv.h"
#include "core/move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A send waiting for its receive (a copy of the data, as a buffered send),
 * or a receive waiting for its send. */
typedef struct solo_msg {
	struct solo_msg *next;
	void *buf;
	size_t bytes;
	struct solo_req *owner; /* a receive's request */
} solo_msg;

typedef struct solo_queue {
	solo_msg *head, **tail;
} solo_queue;

/* A communicator's messages in flight. */
typedef struct solo_state {
	solo_queue sends, recvs;
} solo_state;

/* A request with receives not yet matched; NULL r->impl: done. */
typedef struct solo_req {
	int pending;
	size_t truncated_send, truncated_recv; /* the first receive too small */
} solo_req;

static const comm_ops solo_ops;
static void solo_abandon(comm *c, comm_req *r);

int comm_is_solo(const comm *c)
{
	return c->ops == &solo_ops;
}

static void queue_init(solo_queue *q)
{
	q->head = NULL;
	q->tail = &q->head;
}

static void queue_push(solo_queue *q, solo_msg *m)
{
	m->next = NULL;
	*q->tail = m;
	q->tail = &m->next;
}

static solo_msg *queue_pop(solo_queue *q)
{
	solo_msg *m = q->head;
	if (m != NULL && (q->head = m->next) == NULL)
		q->tail = &q->head;
	return m;
}

static solo_state *state_new(void)
{
	solo_state *s = malloc(sizeof *s);
	if (s != NULL) {
		queue_init(&s->sends);
		queue_init(&s->recvs);
	}
	return s;
}

static void copy_in(void *to, const void *from, size_t bytes)
{
	if (to != from && bytes > 0)
		move_bytes(to, from, bytes);
}

static int solo_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			   comm_req *r, titan_err *e)
{
	(void)c, (void)r, (void)e;
	copy_in(recv, send, count * comm_dtype_size(t));
	return 0;
}

static int solo_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
		       comm_redop op, comm_req *r, titan_err *e)
{
	(void)op;
	return solo_all_gather(c, send, recv, count, t, r, e);
}

static int solo_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, comm_req *r,
			  titan_err *e)
{
	(void)c, (void)buf, (void)count, (void)t, (void)root, (void)r, (void)e;
	return 0;
}

/* A receive meets a send: the data lands, the receive's request is one
 * closer to done.  A message longer than the receive is MPI's truncation
 * error, reported by the request's test. */
static void deliver(solo_msg *recv, const void *data, size_t bytes)
{
	solo_req *q = recv->owner;
	if (bytes > recv->bytes) {
		if (q->truncated_send == 0) {
			q->truncated_send = bytes;
			q->truncated_recv = recv->bytes;
		}
		bytes = recv->bytes;
	}
	copy_in(recv->buf, data, bytes);
	q->pending--;
}

static int post_send(solo_state *s, const comm_p2p *op)
{
	size_t bytes = op->count * comm_dtype_size(op->dtype);
	solo_msg *waiting = queue_pop(&s->recvs);
	if (waiting != NULL) {
		deliver(waiting, op->buf, bytes);
		free(waiting);
		return 0;
	}
	solo_msg *m = malloc(sizeof *m);
	void *copy = malloc(bytes > 0 ? bytes : 1);
	if (m == NULL || copy == NULL) {
		free(m);
		free(copy);
		return -1;
	}
	memcpy(copy, op->buf, bytes);
	*m = (solo_msg){.buf = copy, .bytes = bytes};
	queue_push(&s->sends, m);
	return 0;
}

static int post_recv(solo_state *s, const comm_p2p *op, solo_req *q)
{
	solo_msg *m = malloc(sizeof *m);
	if (m == NULL)
		return -1;
	*m = (solo_msg){.buf = op->buf, .bytes = op->count * comm_dtype_size(op->dtype), .owner = q};
	q->pending++;
	solo_msg *sent = queue_pop(&s->sends);
	if (sent == NULL) {
		queue_push(&s->recvs, m);
		return 0;
	}
	deliver(m, sent->buf, sent->bytes);
	free(sent->buf);
	free(sent);
	free(m);
	return 0;
}

static int solo_p2p(comm *c, const comm_p2p *ops, int n, comm_req *r, titan_err *e)
{
	solo_state *s = c->impl;
	solo_req *q = calloc(1, sizeof *q);
	if (q == NULL)
		return err_set(e, "p2p: out of memory");
	r->impl = q;
	for (int i = 0; i < n; i++)
		if ((ops[i].is_send ? post_send(s, &ops[i]) : post_recv(s, &ops[i], q)) != 0) {
			solo_abandon(c, r); /* never handed out: its receives leave the queue */
			return err_set(e, "p2p: out of memory");
		}
	return 0;
}

static int solo_all_to_allv(comm *c, const void *send, const size_t *scounts,
			    const size_t *sdispls, void *recv, const size_t *rcounts,
			    const size_t *rdispls, comm_dtype t, comm_req *r, titan_err *e)
{
	(void)c, (void)r;
	if (scounts[0] > rcounts[0])
		return err_set(e, "all_to_allv: %zu elements sent to a receive of %zu", scounts[0],
			       rcounts[0]);
	size_t es = comm_dtype_size(t);
	copy_in((char *)recv + rdispls[0] * es, (const char *)send + sdispls[0] * es,
		scounts[0] * es);
	return 0;
}

static int solo_barrier(comm *c, comm_req *r, titan_err *e)
{
	(void)c, (void)r, (void)e;
	return 0;
}

static int solo_test(comm *c, comm_req *r, int *done, titan_err *e)
{
	(void)c;
	solo_req *q = r->impl;
	*done = q == NULL || q->pending == 0;
	if (q == NULL || !*done)
		return 0;
	r->impl = NULL;
	size_t sent = q->truncated_send, room = q->truncated_recv;
	free(q);
	if (sent > 0)
		return err_set(e, "a message of %zu bytes sent to a receive of %zu", sent, room);
	return 0;
}

/* Given up: its receives leave the queue, which would write into them. */
static void solo_abandon(comm *c, comm_req *r)
{
	solo_state *s = c->impl;
	solo_msg *keep = NULL, **kt = &keep, *m;
	while ((m = queue_pop(&s->recvs)) != NULL) {
		if (m->owner == r->impl) {
			free(m);
			continue;
		}
		*kt = m;
		kt = &m->next;
	}
	*kt = NULL;
	for (m = keep; m != NULL; m = keep) {
		keep = m->next;
		queue_push(&s->recvs, m);
	}
	free(r->impl);
	r->impl = NULL;
}

static int solo_split(comm *c, int color, int key, comm *out, titan_err *e)
{
	(void)c, (void)color, (void)key;
	if ((out->impl = state_new()) == NULL)
		return err_set(e, "split: out of memory");
	out->ops = &solo_ops;
	out->rank = 0;
	out->size = 1;
	return 0;
}

/* Sends never received are dropped with their copies; a receive still
 * queued belongs to a request its owner abandoned or never waited for. */
static void solo_free(comm *c)
{
	solo_state *s = c->impl;
	solo_msg *m;
	while ((m = queue_pop(&s->sends)) != NULL) {
		free(m->buf);
		free(m);
	}
	while ((m = queue_pop(&s->recvs)) != NULL)
		free(m);
	free(s);
}

static const comm_ops solo_ops = {
	.name = "solo",
	.split = solo_split,
	.all_gather = solo_all_gather,
	.reduce_scatter = solo_reduce,
	.all_reduce = solo_reduce,
	.broadcast = solo_broadcast,
	.p2p = solo_p2p,
	.all_to_allv = solo_all_to_allv,
	.barrier = solo_barrier,
	.test = solo_test,
	.abandon = solo_abandon,
	.free = solo_free,
};

int comm_solo_init(double timeout_s, comm **world, titan_err *e)
{
	comm *w = calloc(1, sizeof *w);
	if (w == NULL)
		return err_set(e, "out of memory");
	if (solo_split(NULL, 0, 0, w, e) != 0) {
		free(w);
		return -1;
	}
	snprintf(w->name, sizeof w->name, "world");
	char host[256] = "";
	if (gethostname(host, sizeof host - 1) != 0)
		snprintf(host, sizeof host, "this host");
	if ((w->rt = comm_rt_create(0, 1, timeout_s, e)) == NULL ||
	    comm_rt_start(w->rt, NULL, 0, host, NULL, e) != 0) {
		if (w->rt != NULL)
			comm_rt_free(w->rt);
		solo_free(w);
		free(w);
		return -1;
	}
	comm_rt_add(w->rt, w);
	*world = w;
	return 0;
}
