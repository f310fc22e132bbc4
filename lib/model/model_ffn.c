/* The dense feed-forward piece (torchtitan's FeedForward): SwiGLU,
 *   out = w2(silu(w1 n2) * w3 n2). */
#include "model/model_priv.h"

int model_ffn_layout(model *m, int l, int *cap, titan_err *e)
{
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
	(void)l;
	if (i == ACT_A || i == ACT_G || i == ACT_H)
		return n * (size_t)m->ffn * be_dtype_size(m->prec.act);
	return 0;
}

void model_ffn_fwd(const piece_ctx *c, void *y)
{
	model *m = c->m;
	int64_t n = c->n, d = m->args.dim, ff = m->ffn;
	void *xn = piece_act(c, ACT_XN2), *h = piece_act(c, ACT_H);
	model_linear(m, piece_act(c, ACT_A), xn, c->w->p[W_W1], n, d, ff, 0);
	model_linear(m, piece_act(c, ACT_G), xn, c->w->p[W_W3], n, d, ff, 0);
	model_ffn_recompute_op(c);
	if (y)
		model_resid_add_linear(m, y, h, c->w->p[W_W2], n, ff, d);
}

/* What op-level checkpointing recomputes: the gate. */
void model_ffn_recompute_op(const piece_ctx *c)
{
	model *m = c->m;
	m->be->ops->swiglu_fwd(m->be, piece_act(c, ACT_H), piece_act(c, ACT_A),
			       piece_act(c, ACT_G), m->prec.act, c->n * m->ffn);
}

int model_ffn_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	int64_t n = c->n, d = m->args.dim, ff = m->ffn;
	const layer_w *w = c->w;
	model_linear_dx(m, m->d_h, dy, w->p[W_W2], n, ff, d, 0);
	if (model_weight_grad(c, W_W2, dy, ACT_H, ff, d, e))
		return -1;
	m->be->ops->swiglu_bwd(m->be, m->d_a, m->d_g, m->d_h, piece_act(c, ACT_A),
			       piece_act(c, ACT_G), m->prec.act, n * ff);
	model_linear_dx(m, m->d_xn, m->d_a, w->p[W_W1], n, d, ff, 0);
	model_linear_dx(m, m->d_xn, m->d_g, w->p[W_W3], n, d, ff, 1);
	return model_weight_grad(c, W_W1, m->d_a, ACT_XN2, d, ff, e) ||
	       model_weight_grad(c, W_W3, m->d_g, ACT_XN2, d, ff, e)
		       ? -1 : 0;
}
