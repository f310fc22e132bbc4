/* The attention piece: grouped-query attention with RoPE (torchtitan's
 * Attention in models/llama3 and models/qwen3):
 *   q = rope(qn(wq n1)), k = rope(kn(wk n1)), v = wv n1,  out = wo(attention(q, k, v))
 * with causal softmax(q k^T / sqrt(hd)) per query head, query head j reading
 * kv head j / (h / hkv).  qn and kn are Qwen3's QK-norm, an RMSNorm over each
 * head's hd features with one weight shared by the heads (absent without
 * qk_norm); RoPE rotates interleaved pairs or halves (rope_style). */
#include "model/model_priv.h"

int model_attn_layout(model *m, int l, int *cap, titan_err *e)
{
	int64_t d = m->args.dim, hd = m->head_dim, hq = (int64_t)m->args.n_heads * hd,
		hk = (int64_t)m->args.n_kv_heads * hd;
	if (model_add_layer_tensor(m, cap, l, "attention.wq.weight", W_WQ, INIT_INPUT,
				   MODEL_TP_COLWISE, 2, hq, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wk.weight", W_WK, INIT_INPUT,
				   MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wv.weight", W_WV, INIT_INPUT,
				   MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wo.weight", W_WO, INIT_DEPTH,
				   MODEL_TP_ROWWISE, 2, d, hq, 0, e))
		return -1;
	if (!m->args.qk_norm)
		return 0;
	return model_add_layer_tensor(m, cap, l, "attention.q_norm.weight", W_Q_NORM, INIT_ONES,
				      MODEL_TP_REPLICATE, 1, hd, 0, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.k_norm.weight", W_K_NORM, INIT_ONES,
				      MODEL_TP_REPLICATE, 1, hd, 0, 0, e)
		       ? -1 : 0;
}

size_t model_attn_act_bytes(const model *m, int l, int i, size_t n)
{
	(void)l;
	size_t a = be_dtype_size(m->prec.act), h = (size_t)m->args.n_heads;
	size_t hkv = (size_t)m->args.n_kv_heads, hd = (size_t)m->head_dim;
	int qkn = m->args.qk_norm;
	switch (i) {
	case ACT_Q: case ACT_ATT: return n * h * hd * a;
	case ACT_K: case ACT_V: return n * hkv * hd * a;
	case ACT_LSE: return n * h * sizeof(float);
	case ACT_QR: return qkn ? n * h * hd * a : 0;
	case ACT_KR: return qkn ? n * hkv * hd * a : 0;
	case ACT_QRSTD: return qkn ? n * h * sizeof(float) : 0;
	case ACT_KRSTD: return qkn ? n * hkv * sizeof(float) : 0;
	default: return 0;
	}
}

/* The dimensions every function here reads. */
typedef struct attn_dims {
	int64_t n, d, hd, h, hkv;
} attn_dims;

static attn_dims dims_of(const piece_ctx *c)
{
	const model *m = c->m;
	return (attn_dims){c->n, m->args.dim, m->head_dim, m->args.n_heads, m->args.n_kv_heads};
}

static be_attn shape_of(const piece_ctx *c)
{
	const model *m = c->m;
	be_dtype t = m->prec.act;
	return (be_attn){.b = c->b, .tq = c->t, .tk = c->t, .h = m->args.n_heads,
			 .hkv = m->args.n_kv_heads, .hd = m->head_dim, .hdv = m->head_dim,
			 .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t};
}

/* QK-norm: y (rows, hd) = rmsnorm(x) * w, rows = tokens * heads. */
static void head_norm_fwd(const piece_ctx *c, void *y, int rstd, const void *x, int slot,
			  int64_t rows)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	m->be->ops->rmsnorm_fwd(m->be, y, at, piece_act(c, rstd), x, at, c->w->p[slot],
				m->prec.param, rows, m->head_dim, (float)m->args.norm_eps);
}

void model_attn_fwd(const piece_ctx *c, void *xm)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	attn_dims s = dims_of(c);
	const layer_w *w = c->w;
	int qkn = m->args.qk_norm, style = m->args.rope_style;
	void *xn = piece_act(c, ACT_XN1), *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K);
	void *v = piece_act(c, ACT_V), *att = piece_act(c, ACT_ATT);
	void *qr = qkn ? piece_act(c, ACT_QR) : q, *kr = qkn ? piece_act(c, ACT_KR) : k;
	model_linear(m, qr, xn, w->p[W_WQ], s.n, s.d, s.h * s.hd, 0);
	model_linear(m, kr, xn, w->p[W_WK], s.n, s.d, s.hkv * s.hd, 0);
	model_linear(m, v, xn, w->p[W_WV], s.n, s.d, s.hkv * s.hd, 0);
	if (qkn) {
		head_norm_fwd(c, q, ACT_QRSTD, qr, W_Q_NORM, s.n * s.h);
		head_norm_fwd(c, k, ACT_KRSTD, kr, W_K_NORM, s.n * s.hkv);
	}
	be->ops->rope(be, q, at, m->rope_cs, c->b, c->t, s.h, s.hd, style, 0);
	be->ops->rope(be, k, at, m->rope_cs, c->b, c->t, s.hkv, s.hd, style, 0);
	be_attn sh = shape_of(c);
	be->ops->attention_fwd(be, att, piece_act(c, ACT_LSE), q, k, v, &sh);
	model_resid_add_linear(m, xm, att, w->p[W_WO], s.n, s.h * s.hd, s.d);
}

/* dx (rows, hd) of QK-norm from dy; its weight's gradient accumulated. */
static void head_norm_bwd(const piece_ctx *c, void *dx, const void *dy, int xi, int rstd,
			  int slot, int64_t rows)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	m->be->ops->rmsnorm_bwd(m->be, dx, at, c->g->p[slot], m->prec.grad, dy, at,
				piece_act(c, xi), at, c->w->p[slot], m->prec.param,
				piece_act(c, rstd), rows, m->head_dim);
}

int model_attn_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	attn_dims s = dims_of(c);
	const layer_w *w = c->w;
	int style = m->args.rope_style;
	model_linear_dx(m, m->d_att, dy, w->p[W_WO], s.n, s.h * s.hd, s.d, 0);
	if (model_weight_grad(c, W_WO, dy, ACT_ATT, s.h * s.hd, s.d, e))
		return -1;
	be_attn sh = shape_of(c);
	be->ops->attention_bwd(be, m->d_q, m->d_k, m->d_v, m->d_att, piece_act(c, ACT_Q),
			       piece_act(c, ACT_K), piece_act(c, ACT_V), piece_act(c, ACT_ATT),
			       piece_act(c, ACT_LSE), &sh);
	be->ops->rope(be, m->d_q, at, m->rope_cs, c->b, c->t, s.h, s.hd, style, 1);
	be->ops->rope(be, m->d_k, at, m->rope_cs, c->b, c->t, s.hkv, s.hd, style, 1);
	/* the gradients of wq's and wk's outputs, and the activations they read */
	void *dq = m->d_q, *dk = m->d_k;
	if (m->args.qk_norm) {
		dq = m->d_att; /* read by attention_bwd, free now */
		dk = m->d_kr;
		head_norm_bwd(c, dq, m->d_q, ACT_QR, ACT_QRSTD, W_Q_NORM, s.n * s.h);
		head_norm_bwd(c, dk, m->d_k, ACT_KR, ACT_KRSTD, W_K_NORM, s.n * s.hkv);
	}
	model_linear_dx(m, m->d_xn, dq, w->p[W_WQ], s.n, s.d, s.h * s.hd, 0);
	model_linear_dx(m, m->d_xn, dk, w->p[W_WK], s.n, s.d, s.hkv * s.hd, 1);
	model_linear_dx(m, m->d_xn, m->d_v, w->p[W_WV], s.n, s.d, s.hkv * s.hd, 1);
	return model_weight_grad(c, W_WQ, dq, ACT_XN1, s.d, s.h * s.hd, e) ||
	       model_weight_grad(c, W_WK, dk, ACT_XN1, s.d, s.hkv * s.hd, e) ||
	       model_weight_grad(c, W_WV, m->d_v, ACT_XN1, s.d, s.hkv * s.hd, e)
		       ? -1 : 0;
}
