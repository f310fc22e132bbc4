/* devcomm.c: see devcomm.h. */
#include "devcomm.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct piece {
	const char *p;
	size_t n;
} piece;

struct devcomm_tracker {
	backend *be;
	const backend_ops *orig;
	backend_ops ops; /* orig with alloc and free recording */
	piece *live;
	size_t n, cap;
};

/* One tracked backend at a time: the ops table's functions find it here. */
static devcomm_tracker *tracked;

static void *track_alloc(backend *be, size_t bytes, titan_err *e)
{
	devcomm_tracker *t = tracked;
	void *q = t->orig->alloc(be, bytes, e);
	if (q == NULL)
		return NULL;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		piece *np = realloc(t->live, cap * sizeof *np);
		if (np == NULL) {
			t->orig->free(be, q);
			err_set(e, "devcomm: out of memory");
			return NULL;
		}
		t->live = np, t->cap = cap;
	}
	t->live[t->n++] = (piece){q, bytes};
	return q;
}

static void track_free(backend *be, void *q)
{
	devcomm_tracker *t = tracked;
	for (size_t i = 0; i < t->n; i++)
		if (t->live[i].p == q) {
			t->live[i] = t->live[--t->n];
			break;
		}
	t->orig->free(be, q);
}

devcomm_tracker *devcomm_track(backend *be)
{
	if (tracked != NULL)
		return NULL;
	devcomm_tracker *t = calloc(1, sizeof *t);
	if (t == NULL)
		return NULL;
	t->be = be;
	t->orig = be->ops;
	t->ops = *be->ops;
	t->ops.alloc = track_alloc;
	t->ops.free = track_free;
	be->ops = &t->ops;
	tracked = t;
	return t;
}

void devcomm_untrack(devcomm_tracker *t)
{
	if (t == NULL)
		return;
	t->be->ops = t->orig;
	tracked = NULL;
	free(t->live);
	free(t);
}

int devcomm_owns(const devcomm_tracker *t, const void *p, size_t bytes)
{
	const char *c = p;
	for (size_t i = 0; i < t->n; i++)
		if (c >= t->live[i].p && bytes <= t->live[i].n &&
		    (size_t)(c - t->live[i].p) <= t->live[i].n - bytes)
			return 1;
	return 0;
}

typedef struct dev {
	comm *host;
	const devcomm_tracker *t;
} dev;

static comm *host_of(comm *c)
{
	return ((dev *)c->impl)->host;
}

/* A buffer of the operation outside the backend's memory fails it. */
static int owns(comm *c, const void *p, size_t count, comm_dtype ty, const char *what,
		titan_err *e)
{
	size_t b = count * comm_dtype_size(ty);
	if (b == 0 || devcomm_owns(((dev *)c->impl)->t, p, b))
		return 0;
	return err_set(e, "device comm '%s': %s %p (%zu bytes) is not the backend's memory",
		       c->name, what, p, b);
}

static int dev_all_gather(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_req *r, titan_err *e)
{
	if (owns(c, send, count, t, "all_gather's send", e) ||
	    owns(c, recv, count * (size_t)c->size, t, "all_gather's recv", e))
		return -1;
	return host_of(c)->ops->all_gather(host_of(c), send, recv, count, t, r, e);
}

static int dev_reduce_scatter(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			      comm_redop op, comm_req *r, titan_err *e)
{
	if (owns(c, send, count * (size_t)c->size, t, "reduce_scatter's send", e) ||
	    owns(c, recv, count, t, "reduce_scatter's recv", e))
		return -1;
	return host_of(c)->ops->reduce_scatter(host_of(c), send, recv, count, t, op, r, e);
}

static int dev_all_reduce(comm *c, const void *send, void *recv, size_t count, comm_dtype t,
			  comm_redop op, comm_req *r, titan_err *e)
{
	if (owns(c, send, count, t, "all_reduce's send", e) ||
	    owns(c, recv, count, t, "all_reduce's recv", e))
		return -1;
	return host_of(c)->ops->all_reduce(host_of(c), send, recv, count, t, op, r, e);
}

static int dev_broadcast(comm *c, void *buf, size_t count, comm_dtype t, int root, comm_req *r,
			 titan_err *e)
{
	if (owns(c, buf, count, t, "broadcast's buffer", e))
		return -1;
	return host_of(c)->ops->broadcast(host_of(c), buf, count, t, root, r, e);
}

static int dev_p2p(comm *c, const comm_p2p *ops, int n, comm_req *r, titan_err *e)
{
	for (int i = 0; i < n; i++)
		if (owns(c, ops[i].buf, ops[i].count, ops[i].dtype,
			 ops[i].is_send ? "a send's buffer" : "a receive's buffer", e))
			return -1;
	return host_of(c)->ops->p2p(host_of(c), ops, n, r, e);
}

static int dev_all_to_allv(comm *c, const void *send, const size_t *sc, const size_t *sd,
			   void *recv, const size_t *rc, const size_t *rd, comm_dtype t, comm_req *r,
			   titan_err *e)
{
	size_t es = comm_dtype_size(t);
	for (int j = 0; j < c->size; j++)
		if (owns(c, (const char *)send + sd[j] * es, sc[j], t, "all_to_allv's send", e) ||
		    owns(c, (char *)recv + rd[j] * es, rc[j], t, "all_to_allv's recv", e))
			return -1;
	return host_of(c)->ops->all_to_allv(host_of(c), send, sc, sd, recv, rc, rd, t, r, e);
}

static int dev_barrier(comm *c, comm_req *r, titan_err *e)
{
	return host_of(c)->ops->barrier(host_of(c), r, e);
}

static int dev_test(comm *c, comm_req *r, int *done, titan_err *e)
{
	return host_of(c)->ops->test(host_of(c), r, done, e);
}

static void dev_abandon(comm *c, comm_req *r)
{
	if (host_of(c)->ops->abandon != NULL)
		host_of(c)->ops->abandon(host_of(c), r);
}

static int dev_split(comm *c, int color, int key, comm *out, titan_err *e)
{
	(void)color, (void)key, (void)out;
	return err_set(e, "device comm '%s': split the host twin instead", c->name);
}

static void dev_free(comm *c)
{
	free(c->impl);
}

static const comm_ops dev_ops = {
	.name = "devcomm",
	.split = dev_split,
	.all_gather = dev_all_gather,
	.reduce_scatter = dev_reduce_scatter,
	.all_reduce = dev_all_reduce,
	.broadcast = dev_broadcast,
	.p2p = dev_p2p,
	.all_to_allv = dev_all_to_allv,
	.barrier = dev_barrier,
	.test = dev_test,
	.abandon = dev_abandon,
	.free = dev_free,
};

int devcomm_make(void *ctx, comm *host, const char *name, comm **out, titan_err *e)
{
	comm *c = calloc(1, sizeof *c);
	dev *d = calloc(1, sizeof *d);
	if (c == NULL || d == NULL) {
		free(c);
		free(d);
		return err_set(e, "devcomm: out of memory");
	}
	*d = (dev){host, ctx};
	*c = (comm){.ops = &dev_ops, .rt = host->rt, .rank = host->rank, .size = host->size,
		    .world_rank = host->world_rank, .impl = d};
	snprintf(c->name, sizeof c->name, "%s (device)", name);
	*out = c;
	return 0;
}
