/* The attention piece: grouped-query attention with RoPE (torchtitan's
 * Attention in models/llama3):
 *   q = rope(wq n1), k = rope(wk n1), v = wv n1,  out = wo(attention(q, k, v))
 * with causal softmax(q k^T / sqrt(hd)) per query head, query head j reading
 * kv head j / (h / hkv). */
#include "model/model_priv.h"

int model_attn_layout(model *m, int l, int *cap, titan_err *e)
{
	int64_t d = m->args.dim, hq = (int64_t)m->args.n_heads * m->head_dim,
		hk = (int64_t)m->args.n_kv_heads * m->head_dim;
	return model_add_layer_tensor(m, cap, l, "attention.wq.weight", W_WQ, INIT_INPUT,
				      MODEL_TP_COLWISE, 2, hq, d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.wk.weight", W_WK, INIT_INPUT,
				      MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.wv.weight", W_WV, INIT_INPUT,
				      MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.wo.weight", W_WO, INIT_DEPTH,
				      MODEL_TP_ROWWISE, 2, d, hq, 0, e)
		       ? -1 : 0;
}

size_t model_attn_act_bytes(const model *m, int l, int i, size_t n)
{
	(void)l;
	size_t a = be_dtype_size(m->prec.act), hq = (size_t)m->args.n_heads * m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim;
	switch (i) {
	case ACT_Q: case ACT_ATT: return n * hq * a;
	case ACT_K: case ACT_V: return n * hk * a;
	case ACT_LSE: return n * (size_t)m->args.n_heads * sizeof(float);
	default: return 0;
	}
}

/* Whether q, k, v run as one product (MODEL_FUSE_BLOCKS): wq, wk, wv lie
 * after each other in the bound parameters (the layout's order), and in the
 * gradients for a backward, so [wq; wk; wv] is one weight. */
static int qkv_fused(const piece_ctx *c, int grads)
{
	const model *m = c->m;
	size_t hq = (size_t)m->args.n_heads * m->head_dim, d = (size_t)m->args.dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim;
	const void *const *w = (const void *const *)c->w->p, *const *g = (const void *const *)c->g->p;
	if (!(m->fuse & MODEL_FUSE_BLOCKS) || !m->qkv || m->tp.size > 1)
		return 0;
	if (w[W_WK] != elt(w[W_WQ], m->prec.param, hq * d) ||
	    w[W_WV] != elt(w[W_WK], m->prec.param, hk * d))
		return 0;
	return !grads || (g[W_WQ] && g[W_WK] == elt(g[W_WQ], m->prec.grad, hq * d) &&
			  g[W_WV] == elt(g[W_WK], m->prec.grad, hk * d));
}

static be_attn shape_of(const piece_ctx *c)
{
	const model *m = c->m;
	be_dtype t = m->prec.act;
	return (be_attn){.b = c->b, .tq = c->t, .tk = c->t, .h = m->args.n_heads,
			 .hkv = m->args.n_kv_heads, .hd = m->head_dim, .hdv = m->head_dim,
			 .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t};
}

void model_attn_fwd(const piece_ctx *c, void *xm)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t n = c->n, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads;
	const layer_w *w = c->w;
	void *xn = piece_act(c, ACT_XN1), *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K);
	void *v = piece_act(c, ACT_V), *att = piece_act(c, ACT_ATT);
	if (qkv_fused(c, 0)) { /* one product, split and rotated in one pass */
		model_linear(m, m->qkv, xn, w->p[W_WQ], n, d, (h + 2 * hkv) * hd, 0);
		be->ops->rope_qkv(be, q, k, v, m->qkv, at, m->rope_cs, c->b, c->t, h, hkv, hd,
				  BE_ROPE_INTERLEAVED);
	} else {
		model_linear(m, q, xn, w->p[W_WQ], n, d, h * hd, 0);
		model_linear(m, k, xn, w->p[W_WK], n, d, hkv * hd, 0);
		model_linear(m, v, xn, w->p[W_WV], n, d, hkv * hd, 0);
		be->ops->rope(be, q, at, m->rope_cs, c->b, c->t, h, hd, BE_ROPE_INTERLEAVED, 0);
		be->ops->rope(be, k, at, m->rope_cs, c->b, c->t, hkv, hd, BE_ROPE_INTERLEAVED, 0);
	}
	be_attn sh = shape_of(c);
	if (m->attn.fwd)
		m->attn.fwd(m->attn.ctx, att, piece_act(c, ACT_LSE), q, k, v, &sh);
	else
		be->ops->attention_fwd(be, att, piece_act(c, ACT_LSE), q, k, v, &sh);
	model_resid_add_linear(m, xm, att, w->p[W_WO], n, h * hd, d);
}

int model_attn_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t n = c->n, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads;
	const layer_w *w = c->w;
	model_linear_dx(m, m->d_att, dy, w->p[W_WO], n, h * hd, d, 0);
	if (model_weight_grad(c, W_WO, dy, ACT_ATT, h * hd, d, e))
		return -1;
	be_attn sh = shape_of(c);
	if (m->attn.bwd)
		m->attn.bwd(m->attn.ctx, m->d_q, m->d_k, m->d_v, m->d_att, piece_act(c, ACT_Q),
			    piece_act(c, ACT_K), piece_act(c, ACT_V), piece_act(c, ACT_ATT),
			    piece_act(c, ACT_LSE), &sh);
	else
		be->ops->attention_bwd(be, m->d_q, m->d_k, m->d_v, m->d_att, piece_act(c, ACT_Q),
				       piece_act(c, ACT_K), piece_act(c, ACT_V),
				       piece_act(c, ACT_ATT), piece_act(c, ACT_LSE), &sh);
	if (qkv_fused(c, 1)) { /* rotated back and packed: one product each way */
		int64_t hqkv = (h + 2 * hkv) * hd;
		be->ops->rope_qkv_bwd(be, m->qkv, m->d_q, m->d_k, m->d_v, at, m->rope_cs, c->b, c->t,
				      h, hkv, hd, BE_ROPE_INTERLEAVED);
		model_linear_dx(m, m->d_xn, m->qkv, w->p[W_WQ], n, d, hqkv, 0);
		return model_weight_grad(c, W_WQ, m->qkv, ACT_XN1, d, hqkv, e);
	}
	be->ops->rope(be, m->d_q, at, m->rope_cs, c->b, c->t, h, hd, BE_ROPE_INTERLEAVED, 1);
	be->ops->rope(be, m->d_k, at, m->rope_cs, c->b, c->t, hkv, hd, BE_ROPE_INTERLEAVED, 1);
	model_linear_dx(m, m->d_xn, m->d_q, w->p[W_WQ], n, d, h * hd, 0);
	model_linear_dx(m, m->d_xn, m->d_k, w->p[W_WK], n, d, hkv * hd, 1);
	model_linear_dx(m, m->d_xn, m->d_v, w->p[W_WV], n, d, hkv * hd, 1);
	return model_weight_grad(c, W_WQ, m->d_q, ACT_XN1, d, h * hd, e) ||
	       model_weight_grad(c, W_WK, m->d_k, ACT_XN1, d, hkv * hd, e) ||
	       model_weight_grad(c, W_WV, m->d_v, ACT_XN1, d, hkv * hd, e)
		       ? -1 : 0;
}
