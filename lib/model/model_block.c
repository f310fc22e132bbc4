/* The Llama 3 transformer block (torchtitan's TransformerBlock) and its
 * hand-written backward over the backend ops, with activation checkpointing and
 * the split of the backward into input gradients (B) and weight gradients (W):
 *   xm = x + wo(attention(rope(wq(n1)), rope(wk(n1)), wv(n1))),  n1 = attention_norm(x)
 *   y  = xm + w2(silu(w1(n2)) * w3(n2)),                         n2 = ffn_norm(xm)
 * x, xm and y are of the residual type; the norms' outputs, the linears' inputs
 * and outputs and attention of the activation type (model_prec). */
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

/* Activation i of layer l: kept in the micro-batch, or the shared recompute set. */
static void *act(const model *m, const layer_act *a, int i)
{
	return a->kept[i] ? a->kept[i] : m->recomp[i];
}

/* y (n, out) += x @ w^T with y of the residual type.  torch adds the branch's
 * output in the activation type to the stream, so a narrower activation type
 * rounds the product first. */
static void resid_add_linear(model *m, void *y, const void *x, const void *w, int64_t n,
			     int64_t in, int64_t out)
{
	if (m->prec.act == m->prec.resid) {
		model_linear(m, y, x, w, n, in, out, 1);
		return;
	}
	model_linear(m, m->d_xn, x, w, n, in, out, 0);
	m->be->ops->axpy(m->be, y, m->prec.resid, 1, m->d_xn, m->prec.act, n * out);
}

static be_attn attn_shape(const model *m, const model_mb *mb)
{
	be_dtype t = m->prec.act;
	return (be_attn){.b = mb->b, .tq = mb->t, .tk = mb->t, .h = m->args.n_heads,
			 .hkv = m->args.n_kv_heads, .hd = m->head_dim, .hdv = m->head_dim,
			 .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t};
}

/* The attention half: norm, projections, rope, attention, xm. */
static void attn_fwd(model *m, const model_mb *mb, const layer_act *a, const layer_w *w,
		     const void *x)
{
	backend *be = m->be;
	be_dtype at = m->prec.act, rt = m->prec.resid, pt = m->prec.param;
	int64_t b = mb->b, t = mb->t, n = b * t, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads;
	void *xn = act(m, a, ACT_XN1), *q = act(m, a, ACT_Q), *k = act(m, a, ACT_K);
	void *v = act(m, a, ACT_V), *att = act(m, a, ACT_ATT), *xm = act(m, a, ACT_XM);
	be->ops->rmsnorm_fwd(be, xn, at, act(m, a, ACT_RSTD1), x, rt, w->attn_norm, pt, n, d,
			     (float)m->args.norm_eps);
	model_linear(m, q, xn, w->wq, n, d, h * hd, 0);
	model_linear(m, k, xn, w->wk, n, d, hkv * hd, 0);
	model_linear(m, v, xn, w->wv, n, d, hkv * hd, 0);
	be->ops->rope(be, q, at, m->rope_cs, b, t, h, hd, BE_ROPE_INTERLEAVED, 0);
	be->ops->rope(be, k, at, m->rope_cs, b, t, hkv, hd, BE_ROPE_INTERLEAVED, 0);
	be_attn sh = attn_shape(m, mb);
	be->ops->attention_fwd(be, att, act(m, a, ACT_LSE), q, k, v, &sh);
	be->ops->copy(be, xm, x, (size_t)(n * d) * be_dtype_size(rt), BACKEND_D2D);
	resid_add_linear(m, xm, att, w->wo, n, h * hd, d);
}

/* The feed-forward half up to w2's input. */
static void ffn_fwd(model *m, const model_mb *mb, const layer_act *a, const layer_w *w)
{
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ff = m->ffn;
	void *xn = act(m, a, ACT_XN2);
	be->ops->rmsnorm_fwd(be, xn, at, act(m, a, ACT_RSTD2), act(m, a, ACT_XM), m->prec.resid,
			     w->ffn_norm, m->prec.param, n, d, (float)m->args.norm_eps);
	model_linear(m, act(m, a, ACT_A), xn, w->w1, n, d, ff, 0);
	model_linear(m, act(m, a, ACT_G), xn, w->w3, n, d, ff, 0);
	be->ops->swiglu_fwd(be, act(m, a, ACT_H), act(m, a, ACT_A), act(m, a, ACT_G), at, n * ff);
}

void model_block_fwd(model *m, model_mb *mb, int l, const void *x, void *y)
{
	const layer_act *a = &mb->acts[l + 1 - mb->u0];
	const layer_w *w = &m->lw[l];
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim;
	attn_fwd(m, mb, a, w, x);
	ffn_fwd(m, mb, a, w);
	m->be->ops->copy(m->be, y, act(m, a, ACT_XM), (size_t)(n * d) * be_dtype_size(m->prec.resid),
			 BACKEND_D2D);
	resid_add_linear(m, y, act(m, a, ACT_H), w->w2, n, m->ffn, d);
}

/* Before layer l's backward: recompute what it did not keep. */
static void recompute(model *m, const model_mb *mb, const layer_act *a, const layer_w *w,
		      const void *x)
{
	if (a->keep == ACT_ALL)
		return;
	backend *be = m->be;
	be_dtype at = m->prec.act, rt = m->prec.resid, pt = m->prec.param;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ff = m->ffn;
	float eps = (float)m->args.norm_eps;
	if (a->keep == ACT_OP_KEEP) {
		be->ops->rmsnorm_fwd(be, act(m, a, ACT_XN1), at, act(m, a, ACT_RSTD1), x, rt,
				     w->attn_norm, pt, n, d, eps);
		be->ops->rmsnorm_fwd(be, act(m, a, ACT_XN2), at, act(m, a, ACT_RSTD2),
				     act(m, a, ACT_XM), rt, w->ffn_norm, pt, n, d, eps);
		be->ops->swiglu_fwd(be, act(m, a, ACT_H), act(m, a, ACT_A), act(m, a, ACT_G), at,
				    n * ff);
		return;
	}
	attn_fwd(m, mb, a, w, x);
	ffn_fwd(m, mb, a, w);
}

/* The linears' weight gradients, by LIN_* in layer_w's order. */
static void *lin_grad(const layer_w *g, int lin)
{
	void *p[LIN_COUNT] = {g->wq, g->wk, g->wv, g->wo, g->w1, g->w3, g->w2};
	return p[lin];
}

/* dW += dy^T x now, or (defer) keep what it needs for model_block_wgrad: a copy
 * of dy always (it is scratch the next layer reuses), of x when x was recomputed
 * into the shared set (one copy per activation, shared by its linears). */
static int weight_grad(model *m, const layer_w *g, layer_act *a, int defer, int lin,
		       const void *dy, int xi, int64_t n, int64_t in, int64_t out, titan_err *e)
{
	const void *x = act(m, a, xi);
	if (!defer) {
		model_linear_dw(m, lin_grad(g, lin), dy, x, n, in, out);
		return 0;
	}
	backend *be = m->be;
	size_t es = be_dtype_size(m->prec.act);
	if (!a->kept[xi] && !a->saved[xi]) {
		if (!(a->saved[xi] = be->ops->alloc(be, (size_t)(n * in) * es, e)))
			return err_prefix(e, "deferred weight gradient");
		be->ops->copy(be, a->saved[xi], x, (size_t)(n * in) * es, BACKEND_D2D);
	}
	wgrad_job *j = &a->jobs[a->n_jobs];
	if (!(j->dy = be->ops->alloc(be, (size_t)(n * out) * es, e)))
		return err_prefix(e, "deferred weight gradient");
	be->ops->copy(be, j->dy, dy, (size_t)(n * out) * es, BACKEND_D2D);
	j->lin = lin;
	j->x = a->kept[xi] ? a->kept[xi] : a->saved[xi];
	j->in = in;
	j->out = out;
	a->n_jobs++;
	return 0;
}

void model_block_drop_jobs(model *m, layer_act *a)
{
	for (int i = 0; i < a->n_jobs; i++)
		m->be->ops->free(m->be, a->jobs[i].dy);
	for (int i = 0; i < ACT_COUNT; i++) {
		m->be->ops->free(m->be, a->saved[i]);
		a->saved[i] = NULL;
	}
	a->n_jobs = 0;
}

/* The gradient of the stream, d_x (residual type), as the activation type the
 * linears' backward reads: d_ya, or d_x itself when the types agree. */
static void *stream_grad_as_act(model *m, int64_t nd)
{
	if (m->prec.act == m->prec.resid)
		return m->d_x;
	m->be->ops->convert(m->be, m->d_ya, m->prec.act, m->d_x, m->prec.resid, nd);
	return m->d_ya;
}

int model_block_bwd(model *m, model_mb *mb, int l, const void *x, int defer, titan_err *e)
{
	backend *be = m->be;
	layer_act *a = &mb->acts[l + 1 - mb->u0];
	const layer_w *w = &m->lw[l];
	const layer_w *g = &m->lg[l];
	be_dtype at = m->prec.act, rt = m->prec.resid, pt = m->prec.param, gt = m->prec.grad;
	int64_t b = mb->b, t = mb->t, n = b * t, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads, ff = m->ffn;
	recompute(m, mb, a, w, x);

	/* Feed-forward branch; the residual passes d_x through to dxm. */
	void *dy = stream_grad_as_act(m, n * d);
	model_linear_dx(m, m->d_h, dy, w->w2, n, ff, d, 0);
	if (weight_grad(m, g, a, defer, LIN_W2, dy, ACT_H, n, ff, d, e))
		return -1;
	be->ops->swiglu_bwd(be, m->d_a, m->d_g, m->d_h, act(m, a, ACT_A), act(m, a, ACT_G), at,
			    n * ff);
	model_linear_dx(m, m->d_xn, m->d_a, w->w1, n, d, ff, 0);
	model_linear_dx(m, m->d_xn, m->d_g, w->w3, n, d, ff, 1);
	if (weight_grad(m, g, a, defer, LIN_W1, m->d_a, ACT_XN2, n, d, ff, e) ||
	    weight_grad(m, g, a, defer, LIN_W3, m->d_g, ACT_XN2, n, d, ff, e))
		return -1;
	be->ops->rmsnorm_bwd(be, m->d_tmp, rt, g->ffn_norm, gt, m->d_xn, at, act(m, a, ACT_XM), rt,
			     w->ffn_norm, pt, act(m, a, ACT_RSTD2), n, d);
	be->ops->axpy(be, m->d_x, rt, 1, m->d_tmp, rt, n * d); /* d_x = dxm */

	/* Attention branch. */
	dy = stream_grad_as_act(m, n * d);
	model_linear_dx(m, m->d_att, dy, w->wo, n, h * hd, d, 0);
	if (weight_grad(m, g, a, defer, LIN_WO, dy, ACT_ATT, n, h * hd, d, e))
		return -1;
	be_attn sh = attn_shape(m, mb);
	be->ops->attention_bwd(be, m->d_q, m->d_k, m->d_v, m->d_att, act(m, a, ACT_Q),
			       act(m, a, ACT_K), act(m, a, ACT_V), act(m, a, ACT_ATT),
			       act(m, a, ACT_LSE), &sh);
	be->ops->rope(be, m->d_q, at, m->rope_cs, b, t, h, hd, BE_ROPE_INTERLEAVED, 1);
	be->ops->rope(be, m->d_k, at, m->rope_cs, b, t, hkv, hd, BE_ROPE_INTERLEAVED, 1);
	model_linear_dx(m, m->d_xn, m->d_q, w->wq, n, d, h * hd, 0);
	model_linear_dx(m, m->d_xn, m->d_k, w->wk, n, d, hkv * hd, 1);
	model_linear_dx(m, m->d_xn, m->d_v, w->wv, n, d, hkv * hd, 1);
	if (weight_grad(m, g, a, defer, LIN_WQ, m->d_q, ACT_XN1, n, d, h * hd, e) ||
	    weight_grad(m, g, a, defer, LIN_WK, m->d_k, ACT_XN1, n, d, hkv * hd, e) ||
	    weight_grad(m, g, a, defer, LIN_WV, m->d_v, ACT_XN1, n, d, hkv * hd, e))
		return -1;
	be->ops->rmsnorm_bwd(be, m->d_tmp, rt, g->attn_norm, gt, m->d_xn, at, x, rt, w->attn_norm,
			     pt, act(m, a, ACT_RSTD1), n, d);
	be->ops->axpy(be, m->d_x, rt, 1, m->d_tmp, rt, n * d);
	return 0;
}

int model_block_wgrad(model *m, model_mb *mb, int l, titan_err *e)
{
	(void)e;
	layer_act *a = &mb->acts[l + 1 - mb->u0];
	int64_t n = (int64_t)mb->b * mb->t;
	for (int i = 0; i < a->n_jobs; i++) {
		const wgrad_job *j = &a->jobs[i];
		model_linear_dw(m, lin_grad(&m->lg[l], j->lin), j->dy, j->x, n, j->in, j->out);
	}
	model_block_drop_jobs(m, a);
	return 0;
}
