/* The feed-forward piece: the dense SwiGLU (torchtitan's FeedForward),
 *   out = w2(silu(w1 n2) * w3 n2),
 * or, in a mixture-of-experts layer, model_moe.c's experts (whose shared
 * experts are this same SwiGLU). */
#include "model/model_priv.h"

static const int dense_w[3] = {W_W1, W_W2, W_W3};

int model_ffn_layout(model *m, int l, int *cap, titan_err *e)
{
	if (m->kind[l].ffn == FFN_MOE)
		return model_moe_layout(m, l, cap, e);
	int64_t d = m->args.dim, f = m->ffn;
	return model_add_layer_tensor(m, cap, l, "feed_forward.w1.weight", W_W1, INIT_INPUT,
				      MODEL_TP_COLWISE, 2, f, d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "feed_forward.w2.weight", W_W2, INIT_DEPTH,
				      MODEL_TP_ROWWISE, 2, d, f, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "feed_forward.w3.weight", W_W3, INIT_DEPTH,
				      MODEL_TP_COLWISE, 2, f, d, 0, e)
		       ? -1 : 0;
}

size_t model_ffn_act_bytes(const model *m, int l, int i, size_t n)
{
	int moe = m->kind[l].ffn == FFN_MOE;
	size_t ff = moe ? (size_t)m->moe_sh : (size_t)m->ffn;
	if (i == ACT_A || i == ACT_G || i == ACT_H)
		return n * ff * be_dtype_size(m->prec.act);
	return moe ? model_moe_act_bytes(m, l, i, n) : 0;
}

void model_swiglu_fwd(const piece_ctx *c, const int *w, int64_t ff)
{
	model *m = c->m;
	int64_t n = c->n, d = m->args.dim;
	void *xn = piece_act(c, ACT_XN2);
	model_linear(m, piece_act(c, ACT_A), xn, c->w->p[w[0]], n, d, ff, 0);
	model_linear(m, piece_act(c, ACT_G), xn, c->w->p[w[2]], n, d, ff, 0);
	m->be->ops->swiglu_fwd(m->be, piece_act(c, ACT_H), piece_act(c, ACT_A),
			       piece_act(c, ACT_G), m->prec.act, n * ff);
}

int model_swiglu_bwd(const piece_ctx *c, const int *w, int64_t ff, const void *dy,
		     float beta_dx, titan_err *e)
{
	model *m = c->m;
	int64_t n = c->n, d = m->args.dim;
	const layer_w *lw = c->w;
	model_linear_dx(m, m->d_h, dy, lw->p[w[1]], n, ff, d, 0);
	if (model_weight_grad(c, w[1], dy, ACT_H, ff, d, e))
		return -1;
	m->be->ops->swiglu_bwd(m->be, m->d_a, m->d_g, m->d_h, piece_act(c, ACT_A),
			       piece_act(c, ACT_G), m->prec.act, n * ff);
	model_linear_dx(m, m->d_xn, m->d_a, lw->p[w[0]], n, d, ff, beta_dx);
	model_linear_dx(m, m->d_xn, m->d_g, lw->p[w[2]], n, d, ff, 1);
	return model_weight_grad(c, w[0], m->d_a, ACT_XN2, d, ff, e) ||
	       model_weight_grad(c, w[2], m->d_g, ACT_XN2, d, ff, e)
		       ? -1 : 0;
}

void model_ffn_fwd(const piece_ctx *c, void *y)
{
	model *m = c->m;
	if (m->kind[c->l].ffn == FFN_MOE) {
		model_moe_fwd(c, y);
		return;
	}
	model_swiglu_fwd(c, dense_w, m->ffn);
	if (y)
		model_resid_add_linear(m, y, piece_act(c, ACT_H), c->w->p[W_W2], c->n, m->ffn,
				       m->args.dim);
}

/* What op-level checkpointing recomputes: the gates. */
void model_ffn_recompute_op(const piece_ctx *c)
{
	model *m = c->m;
	if (m->kind[c->l].ffn == FFN_MOE) {
		model_moe_recompute_op(c);
		return;
	}
	m->be->ops->swiglu_fwd(m->be, piece_act(c, ACT_H), piece_act(c, ACT_A),
			       piece_act(c, ACT_G), m->prec.act, c->n * m->ffn);
}

int model_ffn_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	if (c->m->kind[c->l].ffn == FFN_MOE)
		return model_moe_bwd(c, dy, e);
	return model_swiglu_bwd(c, dense_w, c->m->ffn, dy, 0, e);
}
