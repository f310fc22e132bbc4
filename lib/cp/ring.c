/* Ring attention over the cp group: the blocks of keys and values reach every
 * rank by one all-gather (context_parallel_rotate_method allgather) or by
 * passing them round the ring, each rank sending to the next while it
 * computes on the block it holds (alltoall).  The backward gathers or passes
 * them again; the float32 gradients of keys and values go back to their
 * owner by a reduce-scatter, or travel round the ring with their block,
 * collecting every rank's share, and arrive home after cp hops. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cp/cp.h"

struct cp_attn {
	backend *be;
	comm *c;
	cp_layout l;
	cp_rotate how;
	int rank;
	be_attn shape;     /* the shape the buffers are for */
	cp_ring *ring;
	size_t nk, nv;     /* elements of one rank's k and v */
	size_t es;         /* bytes of an element of k and v */
	void *kv_all;      /* allgather: (cp, k + v); ring: two (k + v) buffers */
	float *dkv_all;    /* allgather: (cp, k + v) float32; ring: two (k + v) float32 */
	float *dkv_own;    /* (k + v) float32 */
};

static void release(cp_attn *a)
{
	cp_ring_free(a->ring);
	a->ring = NULL;
	void *d[] = {a->kv_all, a->dkv_all, a->dkv_own};
	for (size_t i = 0; i < 3; i++)
		if (d[i])
			a->be->ops->free(a->be, d[i]);
	a->kv_all = NULL;
	a->dkv_all = a->dkv_own = NULL;
}

/* The bytes of kv_all, dkv_all and dkv_own for a shape: every rank's keys and
 * values (allgather) or two blocks (the ring), their float32 gradients alike,
 * and this rank's float32 sums. */
static void attn_sizes(const cp_layout *l, cp_rotate how, const be_attn *s, size_t sz[3])
{
	size_t kv = (size_t)s->b * (size_t)s->tk * (size_t)s->hkv * (size_t)(s->hd + s->hdv);
	size_t copies = how == CP_ROTATE_ALLGATHER ? (size_t)l->cp : 2;
	sz[0] = copies * kv * be_dtype_size(s->qkv);
	sz[1] = copies * kv * sizeof(float);
	sz[2] = kv * sizeof(float);
}

size_t cp_attn_bytes(const cp_layout *l, cp_rotate how, const be_attn *shape)
{
	size_t sz[3];
	attn_sizes(l, how, shape, sz);
	return sz[0] + sz[1] + sz[2] + cp_ring_bytes(l, shape);
}

void cp_attn_sent(const cp_layout *l, cp_rotate how, const be_attn *s, uint64_t *fwd,
		  uint64_t *bwd)
{
	uint64_t kv = (uint64_t)s->b * (uint64_t)s->tk * (uint64_t)s->hkv * (uint64_t)(s->hd + s->hdv);
	uint64_t n = (uint64_t)l->cp, hops = how == CP_ROTATE_ALLGATHER ? n - 1 : n;
	*fwd = (n - 1) * kv * be_dtype_size(s->qkv);
	*bwd = *fwd + hops * kv * sizeof(float);
}

/* Buffers for the shape, made again when it changes (not with the call's
 * documents, which the ring takes each time from their host copy: no copy
 * back, no wait for the backend). */
static int prepare(cp_attn *a, const be_attn *call, titan_err *e)
{
	be_attn shape = *call;
	shape.doc = shape.doc_host = NULL;
	shape.doc_t = 0;
	const be_attn *s = &shape;
	if (a->ring && memcmp(&a->shape, s, sizeof *s) == 0)
		return cp_ring_set_docs(a->ring, call->doc, call->doc_host, call->doc_t, e);
	release(a);
	if (!(a->ring = cp_ring_create(a->be, &a->l, a->rank, s, e)))
		return -1;
	a->shape = *s;
	a->nk = (size_t)cp_ring_k_numel(a->ring);
	a->nv = (size_t)cp_ring_v_numel(a->ring);
	a->es = be_dtype_size(s->qkv);
	size_t sz[3];
	attn_sizes(&a->l, a->how, s, sz);
	if (!(a->kv_all = a->be->ops->alloc(a->be, sz[0], e)) ||
	    !(a->dkv_all = a->be->ops->alloc(a->be, sz[1], e)) ||
	    !(a->dkv_own = a->be->ops->alloc(a->be, sz[2], e))) {
		release(a);
		return err_prefix(e, "ring attention buffers");
	}
	return cp_ring_set_docs(a->ring, call->doc, call->doc_host, call->doc_t, e);
}

cp_attn *cp_attn_create(backend *be, comm *cp, const cp_layout *l, cp_rotate how, titan_err *e)
{
	if (comm_size(cp) != l->cp) {
		err_set(e, "ring attention: a cp group of %d ranks for a layout of %d", comm_size(cp),
			l->cp);
		return NULL;
	}
	cp_attn *a = calloc(1, sizeof *a);
	if (a == NULL) {
		err_set(e, "ring attention: out of memory");
		return NULL;
	}
	*a = (cp_attn){.be = be, .c = cp, .l = *l, .how = how, .rank = comm_rank(cp)};
	return a;
}

void cp_attn_free(cp_attn *a)
{
	if (a == NULL)
		return;
	release(a);
	free(a);
}

/* Block i of the (cp, k + v) buffer: its k and its v. */
static char *kv_at(const cp_attn *a, void *all, int i)
{
	return (char *)all + (size_t)i * (a->nk + a->nv) * a->es;
}

static float *dkv_at(const cp_attn *a, float *all, int i)
{
	return all + (size_t)i * (a->nk + a->nv);
}

/* This rank's k and v, side by side in block i of buf. */
static void pack(cp_attn *a, void *buf, int i, const void *k, const void *v)
{
	char *p = kv_at(a, buf, i);
	a->be->ops->copy(a->be, p, k, a->nk * a->es, BACKEND_D2D);
	a->be->ops->copy(a->be, p + a->nk * a->es, v, a->nv * a->es, BACKEND_D2D);
}

/* Send block `out` of buf to the next rank and receive the previous rank's
 * into block `in` (one batch, as NCCL wants). */
static int pass(cp_attn *a, void *send, void *recv, size_t bytes, comm_req **r, titan_err *e)
{
	int n = a->l.cp;
	comm_p2p ops[2] = {
		{.is_send = 1, .peer = (a->rank + 1) % n, .buf = send, .count = bytes, .dtype = COMM_U8},
		{.is_send = 0, .peer = (a->rank + n - 1) % n, .buf = recv, .count = bytes,
		 .dtype = COMM_U8}};
	return comm_p2p_start(a->c, ops, 2, r, e);
}

static int fwd(cp_attn *a, void *out, float *lse, const void *q, const void *k, const void *v,
	       const be_attn *s, titan_err *e)
{
	int n = a->l.cp, r = a->rank;
	if (prepare(a, s, e) || a->be->ops->sync(a->be, e))
		return -1;
	size_t kvb = (a->nk + a->nv) * a->es;
	cp_ring_fwd_begin(a->ring, q);
	comm_req *req = NULL;
	if (a->how == CP_ROTATE_ALLGATHER) {
		/* gather everyone's while computing on our own */
		pack(a, a->kv_all, r, k, v);
		if (a->be->ops->sync(a->be, e) ||
		    comm_all_gather_start(a->c, kv_at(a, a->kv_all, r), a->kv_all, kvb, COMM_U8, &req, e) ||
		    cp_ring_fwd_block(a->ring, r, k, v, e) || comm_wait(req, e))
			return -1;
		for (int i = 1; i < n; i++) {
			int j = (r - i + n) % n;
			char *p = kv_at(a, a->kv_all, j);
			if (cp_ring_fwd_block(a->ring, j, p, p + a->nk * a->es, e))
				return -1;
		}
		return cp_ring_fwd_end(a->ring, out, lse, e);
	}
	/* the ring: hold block i (owner r - i), pass it on while computing on it */
	pack(a, a->kv_all, 0, k, v);
	if (a->be->ops->sync(a->be, e))
		return -1;
	for (int i = 0; i < n; i++) {
		char *cur = kv_at(a, a->kv_all, i % 2), *next = kv_at(a, a->kv_all, (i + 1) % 2);
		if (i + 1 < n && pass(a, cur, next, kvb, &req, e))
			return -1;
		if (cp_ring_fwd_block(a->ring, (r - i + n) % n, cur, cur + a->nk * a->es, e) ||
		    (i + 1 < n && comm_wait(req, e)))
			return -1;
	}
	return cp_ring_fwd_end(a->ring, out, lse, e);
}

/* dk, dv (the shape's grad type) from this rank's float32 sums. */
static void own_grads(cp_attn *a, void *dk, void *dv, const float *dkv)
{
	be_dtype g = a->shape.grad;
	a->be->ops->convert(a->be, dk, g, dkv, BE_F32, (int64_t)a->nk);
	a->be->ops->convert(a->be, dv, g, dkv + a->nk, BE_F32, (int64_t)a->nv);
}

static int bwd(cp_attn *a, void *dq, void *dk, void *dv, const void *dout, const void *q,
	       const void *k, const void *v, const void *out, const float *lse, const be_attn *s,
	       titan_err *e)
{
	int n = a->l.cp, r = a->rank;
	if (prepare(a, s, e))
		return -1;
	size_t kv = a->nk + a->nv, kvb = kv * a->es;
	cp_ring_bwd_begin(a->ring, dout, q, out, lse);
	comm_req *req = NULL;
	if (a->how == CP_ROTATE_ALLGATHER) {
		pack(a, a->kv_all, r, k, v);
		a->be->ops->zero(a->be, a->dkv_all, (size_t)n * kv * sizeof(float));
		if (a->be->ops->sync(a->be, e) ||
		    comm_all_gather(a->c, kv_at(a, a->kv_all, r), a->kv_all, kvb, COMM_U8, e))
			return -1;
		for (int i = 0; i < n; i++) {
			int j = (r - i + n) % n;
			char *p = kv_at(a, a->kv_all, j);
			float *d = dkv_at(a, a->dkv_all, j);
			if (cp_ring_bwd_block(a->ring, j, p, p + a->nk * a->es, d, d + a->nk, e))
				return -1;
		}
		/* every rank's share of each owner's gradients, summed at the owner */
		if (cp_ring_bwd_end(a->ring, dq, e) ||
		    comm_reduce_scatter(a->c, a->dkv_all, a->dkv_own, kv, COMM_F32, COMM_SUM, e))
			return -1;
		own_grads(a, dk, dv, a->dkv_own);
		return a->be->ops->sync(a->be, e);
	}
	/* the ring: block i and its gradient sums travel together; keys and
	 * values for the next step are fetched while this one computes */
	pack(a, a->kv_all, 0, k, v);
	a->be->ops->zero(a->be, a->dkv_all, kv * sizeof(float));
	if (a->be->ops->sync(a->be, e))
		return -1;
	for (int i = 0; i < n; i++) {
		char *cur = kv_at(a, a->kv_all, i % 2), *next = kv_at(a, a->kv_all, (i + 1) % 2);
		float *d = dkv_at(a, a->dkv_all, i % 2), *dnext = dkv_at(a, a->dkv_all, (i + 1) % 2);
		if (i + 1 < n && pass(a, cur, next, kvb, &req, e))
			return -1;
		if (cp_ring_bwd_block(a->ring, (r - i + n) % n, cur, cur + a->nk * a->es, d,
				      d + a->nk, e) ||
		    (i + 1 < n && comm_wait(req, e)))
			return -1;
		/* after the last block the sums go to their owner, the next rank */
		if (pass(a, d, i + 1 < n ? dnext : a->dkv_own, kv * sizeof(float), &req, e) ||
		    comm_wait(req, e))
			return -1;
	}
	if (cp_ring_bwd_end(a->ring, dq, e))
		return -1;
	own_grads(a, dk, dv, a->dkv_own);
	return a->be->ops->sync(a->be, e);
}

static void hook_fwd(void *ctx, void *out, float *lse, const void *q, const void *k,
		     const void *v, const be_attn *s)
{
	cp_attn *a = ctx;
	titan_err e = {0};
	if (fwd(a, out, lse, q, k, v, s, &e))
		backend_fault(a->be, "ring attention: %s", e.msg);
}

static void hook_bwd(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
		     const void *k, const void *v, const void *out, const float *lse,
		     const be_attn *s)
{
	cp_attn *a = ctx;
	titan_err e = {0};
	if (bwd(a, dq, dk, dv, dout, q, k, v, out, lse, s, &e))
		backend_fault(a->be, "ring attention: %s", e.msg);
}

void cp_attn_hook(cp_attn *a, be_attn_hook *out)
{
	*out = (be_attn_hook){.ctx = a, .fwd = hook_fwd, .bwd = hook_bwd};
}
