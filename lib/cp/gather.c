/* Attention over all-gathered keys and values (cp.h's cp_gather): torchtitan
 * 0.3.0's context parallelism for Flux, whose attention has no mask.  Each
 * sample's keys and values are gathered from every cp rank into one
 * sequence of cp T tokens, rank after rank, and the backend's op runs this
 * rank's queries over all of them; the order of the keys does not change a
 * softmax without a mask.  The backward gathers them again (one set of
 * buffers serves every layer) and reduce-scatters their gradients, summed,
 * back to each owner: the backward of an all-gather. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cp/cp.h"

struct cp_gather {
	backend *be;
	comm *c;
	int cp;
	be_attn shape; /* the local call the buffers are for */
	size_t row_k, row_v;  /* elements of one sample's keys, values on one rank */
	void *k, *v;   /* (b, cp T, hkv, hd|hdv): every rank's, sample by sample */
	void *dk, *dv; /* their gradients, in the shape's grad type */
};

static void release(cp_gather *g)
{
	void *d[] = {g->k, g->v, g->dk, g->dv};
	for (size_t i = 0; i < 4; i++)
		if (d[i])
			g->be->ops->free(g->be, d[i]);
	g->k = g->v = g->dk = g->dv = NULL;
}

static int check_call(const be_attn *s, titan_err *e)
{
	if (s->tq != s->tk || s->causal || s->doc || s->window || s->chunk || s->sinks)
		return err_set(e, "gathered attention: a call with tq %lld, tk %lld, causal %d or a "
			       "mask (documents, window, chunk, sinks): it computes an unmasked "
			       "attention over every rank's keys", (long long)s->tq,
			       (long long)s->tk, s->causal);
	return 0;
}

static int prepare(cp_gather *g, const be_attn *s, titan_err *e)
{
	if (check_call(s, e) != 0)
		return -1;
	if (g->k && memcmp(&g->shape, s, sizeof *s) == 0)
		return 0;
	release(g);
	g->shape = *s;
	g->row_k = (size_t)s->tk * (size_t)s->hkv * (size_t)s->hd;
	g->row_v = (size_t)s->tk * (size_t)s->hkv * (size_t)s->hdv;
	size_t all = (size_t)g->cp * (size_t)s->b, es = be_dtype_size(s->qkv),
	       gs = be_dtype_size(s->grad);
	if (!(g->k = g->be->ops->alloc(g->be, all * g->row_k * es, e)) ||
	    !(g->v = g->be->ops->alloc(g->be, all * g->row_v * es, e)) ||
	    !(g->dk = g->be->ops->alloc(g->be, all * g->row_k * gs, e)) ||
	    !(g->dv = g->be->ops->alloc(g->be, all * g->row_v * gs, e))) {
		release(g);
		return err_prefix(e, "gathered attention buffers");
	}
	return 0;
}

cp_gather *cp_gather_create(backend *be, struct comm *cp, titan_err *e)
{
	cp_gather *g = calloc(1, sizeof *g);
	if (g == NULL) {
		err_set(e, "gathered attention: out of memory");
		return NULL;
	}
	*g = (cp_gather){.be = be, .c = cp, .cp = comm_size(cp)};
	return g;
}

void cp_gather_free(cp_gather *g)
{
	if (g == NULL)
		return;
	release(g);
	free(g);
}

static comm_dtype comm_type(be_dtype t)
{
	return t == BE_BF16 ? COMM_BF16 : COMM_F32;
}

/* The shape of the call over the gathered keys. */
static be_attn gathered(const cp_gather *g)
{
	be_attn full = g->shape;
	full.tk = g->shape.tk * g->cp;
	return full;
}

/* Every rank's k and v into g's, each sample's cp blocks side by side. */
static int gather_kv(cp_gather *g, const void *k, const void *v, titan_err *e)
{
	size_t es = be_dtype_size(g->shape.qkv);
	comm_dtype t = comm_type(g->shape.qkv);
	if (g->be->ops->sync(g->be, e) != 0)
		return -1;
	for (int64_t i = 0; i < g->shape.b; i++) {
		size_t ik = (size_t)i * g->row_k, iv = (size_t)i * g->row_v;
		if (comm_all_gather(g->c, (const char *)k + ik * es,
				    (char *)g->k + ik * (size_t)g->cp * es, g->row_k, t, e) != 0 ||
		    comm_all_gather(g->c, (const char *)v + iv * es,
				    (char *)g->v + iv * (size_t)g->cp * es, g->row_v, t, e) != 0)
			return -1;
	}
	return 0;
}

static int fwd(cp_gather *g, void *out, float *lse, const void *q, const void *k, const void *v,
	       const be_attn *s, titan_err *e)
{
	if (prepare(g, s, e) != 0 || gather_kv(g, k, v, e) != 0)
		return -1;
	be_attn full = gathered(g);
	g->be->ops->attention_fwd(g->be, out, lse, q, g->k, g->v, &full);
	return 0;
}

static int bwd(cp_gather *g, void *dq, void *dk, void *dv, const void *dout, const void *q,
	       const void *k, const void *v, const void *out, const float *lse, const be_attn *s,
	       titan_err *e)
{
	if (prepare(g, s, e) != 0 || gather_kv(g, k, v, e) != 0)
		return -1;
	be_attn full = gathered(g);
	g->be->ops->attention_bwd(g->be, dq, g->dk, g->dv, dout, q, g->k, g->v, out, lse, &full);
	size_t gs = be_dtype_size(s->grad);
	comm_dtype t = comm_type(s->grad);
	if (g->be->ops->sync(g->be, e) != 0)
		return -1;
	for (int64_t i = 0; i < s->b; i++) {
		size_t ik = (size_t)i * g->row_k, iv = (size_t)i * g->row_v;
		if (comm_reduce_scatter(g->c, (char *)g->dk + ik * (size_t)g->cp * gs,
					(char *)dk + ik * gs, g->row_k, t, COMM_SUM, e) != 0 ||
		    comm_reduce_scatter(g->c, (char *)g->dv + iv * (size_t)g->cp * gs,
					(char *)dv + iv * gs, g->row_v, t, COMM_SUM, e) != 0)
			return -1;
	}
	return 0;
}

static void hook_fwd(void *ctx, void *out, float *lse, const void *q, const void *k,
		     const void *v, const be_attn *s)
{
	cp_gather *g = ctx;
	titan_err e = {0};
	if (fwd(g, out, lse, q, k, v, s, &e) != 0)
		backend_fault(g->be, "%s", e.msg);
}

static void hook_bwd(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
		     const void *k, const void *v, const void *out, const float *lse,
		     const be_attn *s)
{
	cp_gather *g = ctx;
	titan_err e = {0};
	if (bwd(g, dq, dk, dv, dout, q, k, v, out, lse, s, &e) != 0)
		backend_fault(g->be, "%s", e.msg);
}

void cp_gather_hook(cp_gather *g, be_attn_hook *out)
{
	*out = (be_attn_hook){.ctx = g, .fwd = hook_fwd, .bwd = hook_bwd};
}
