/* The multi-head latent attention piece (DeepSeek V2/V3; torchtitan's
 * models/deepseek_v3 Attention), h heads, per head qk_nope + qk_rope = hd
 * query/key dims and v value dims:
 *   q          = wq n1, or wq_b(q_norm(wq_a n1))               (n, h, hd)
 *   q_nope, q_pe = split(q); q = [q_nope, rope(q_pe)]
 *   [kv, k_pe] = wkv_a n1                                       (n, kv_lora + rope)
 *   [k_nope, v] = split(wkv_b(kv_norm(kv)))                     (n, h, nope + v)
 *   k          = [k_nope, rope(k_pe) shared by every head]      (n, h, hd)
 *   out        = wo(attention(q, k, v))  with softmax scale hd^-1/2, times
 *                mscale^2 (mscale = 0.1 mla.mscale ln(factor) + 1) when the
 *                flavor's YaRN applies.
 * The splits and concatenations are the backend's heads_split / heads_cat
 * (the shared k_pe's gradient sums over the heads). */
#include <math.h>

#include "model/model_priv.h"

/* The dimensions every function here reads. */
typedef struct mla_dims {
	int64_t n, d, h, nope, rope, hd, vd, qr, kvr;
} mla_dims;

static mla_dims dims_of(const model *m, int64_t n)
{
	const mla_args *ml = &m->args.mla;
	return (mla_dims){n, m->args.dim, m->args.n_heads, ml->qk_nope_head_dim,
			  ml->qk_rope_head_dim, ml->qk_nope_head_dim + ml->qk_rope_head_dim,
			  ml->v_head_dim, ml->q_lora_rank, ml->kv_lora_rank};
}

int model_mla_layout(model *m, int l, int *cap, titan_err *e)
{
	mla_dims s = dims_of(m, 0);
	if (s.qr == 0) {
		if (model_add_layer_tensor(m, cap, l, "attention.wq.weight", W_WQ, INIT_INPUT,
					   MODEL_TP_COLWISE, 2, s.h * s.hd, s.d, 0, e))
			return -1;
	} else if (model_add_layer_tensor(m, cap, l, "attention.wq_a.weight", W_WQ_A, INIT_INPUT,
					  MODEL_TP_REPLICATE, 2, s.qr, s.d, 0, e) ||
		   model_add_layer_tensor(m, cap, l, "attention.q_norm.weight", W_QA_NORM,
					  INIT_ONES, MODEL_TP_REPLICATE, 1, s.qr, 0, 0, e) ||
		   model_add_layer_tensor(m, cap, l, "attention.wq_b.weight", W_WQ_B, INIT_INPUT,
					  MODEL_TP_COLWISE, 2, s.h * s.hd, s.qr, 0, e)) {
		return -1;
	}
	return model_add_layer_tensor(m, cap, l, "attention.wkv_a.weight", W_WKV_A, INIT_INPUT,
				      MODEL_TP_REPLICATE, 2, s.kvr + s.rope, s.d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.kv_norm.weight", W_KV_NORM, INIT_ONES,
				      MODEL_TP_REPLICATE, 1, s.kvr, 0, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.wkv_b.weight", W_WKV_B, INIT_INPUT,
				      MODEL_TP_COLWISE, 2, s.h * (s.nope + s.vd), s.kvr, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.wo.weight", W_WO, INIT_DEPTH,
				      MODEL_TP_ROWWISE, 2, s.d, s.h * s.vd, 0, e)
		       ? -1 : 0;
}

size_t model_mla_act_bytes(const model *m, int l, int i, size_t n)
{
	(void)l;
	mla_dims s = dims_of(m, (int64_t)n);
	size_t a = be_dtype_size(m->prec.act), qa = s.qr > 0;
	switch (i) {
	case ACT_Q: case ACT_K: return n * (size_t)(s.h * s.hd) * a;
	case ACT_V: case ACT_ATT: return n * (size_t)(s.h * s.vd) * a;
	case ACT_LSE: return n * (size_t)s.h * sizeof(float);
	case ACT_QA: case ACT_QAN: return qa * n * (size_t)s.qr * a;
	case ACT_QA_RSTD: return qa * n * sizeof(float);
	case ACT_KVA: case ACT_KVN: return n * (size_t)s.kvr * a;
	case ACT_KV_RSTD: return n * sizeof(float);
	default: return 0;
	}
}

/* torchtitan's softmax_scale: qk_head_dim^-0.5, times mscale^2 when YaRN is on. */
static float softmax_scale(const model *m)
{
	double scale = 1.0 / sqrt((double)m->head_dim);
	rope_scaling rs = flavor_rope_scaling(&m->args);
	if (rs.kind == ROPE_SCALE_YARN) {
		double ms = 0.1 * m->args.mla.mscale * log(rs.factor) + 1.0;
		scale *= ms * ms;
	}
	return (float)scale;
}

static be_attn shape_of(const piece_ctx *c, const mla_dims *s)
{
	be_attn a = model_attn_shape(c, s->h, s->h, s->hd, s->vd);
	a.scale = softmax_scale(c->m);
	return a;
}

static void rope(const piece_ctx *c, void *x, int64_t heads, int inverse)
{
	model_rope(c, x, heads, c->m->args.mla.qk_rope_head_dim, inverse);
}

static void norm_fwd(const piece_ctx *c, int y, int rstd, int x, int slot, int64_t d)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	m->be->ops->rmsnorm_fwd(m->be, piece_act(c, y), at, piece_act(c, rstd), piece_act(c, x),
				at, c->w->p[slot], m->prec.param, c->n, d,
				(float)(m->args.mla.norm_eps > 0 ? m->args.mla.norm_eps
								 : m->args.norm_eps));
}

static void norm_bwd(const piece_ctx *c, void *dx, const void *dy, int x, int rstd, int slot,
		     int64_t d)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	m->be->ops->rmsnorm_bwd(m->be, dx, at, c->g->p[slot], m->prec.grad, dy, at,
				piece_act(c, x), at, c->w->p[slot], m->prec.param,
				piece_act(c, rstd), c->n, d);
}

void model_mla_fwd(const piece_ctx *c, void *xm)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	mla_dims s = dims_of(m, c->n);
	const layer_w *w = c->w;
	void *xn = piece_act(c, ACT_XN1), *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K);
	void *v = piece_act(c, ACT_V), *att = piece_act(c, ACT_ATT);
	/* q: wq's output into d_q, split, its rope part rotated, joined into Q */
	if (s.qr == 0) {
		model_linear(m, m->d_q, xn, w->p[W_WQ], s.n, s.d, s.h * s.hd, 0);
	} else {
		model_linear(m, piece_act(c, ACT_QA), xn, w->p[W_WQ_A], s.n, s.d, s.qr, 0);
		norm_fwd(c, ACT_QAN, ACT_QA_RSTD, ACT_QA, W_QA_NORM, s.qr);
		model_linear(m, m->d_q, piece_act(c, ACT_QAN), w->p[W_WQ_B], s.n, s.qr, s.h * s.hd,
			     0);
	}
	be->ops->heads_split(be, m->d_att, m->d_pe, m->d_q, at, s.n, s.h, s.nope, s.rope, s.h);
	rope(c, m->d_pe, s.h, 0);
	be->ops->heads_cat(be, q, m->d_att, m->d_pe, at, s.n, s.h, s.nope, s.rope, s.h);
	/* k and v: the latent and the shared rope key, the latent normed and
	 * expanded into k_nope and v */
	model_linear(m, m->d_lat[0], xn, w->p[W_WKV_A], s.n, s.d, s.kvr + s.rope, 0);
	be->ops->heads_split(be, piece_act(c, ACT_KVA), m->d_kpe, m->d_lat[0], at, s.n, 1, s.kvr,
			     s.rope, 1);
	rope(c, m->d_kpe, 1, 0);
	norm_fwd(c, ACT_KVN, ACT_KV_RSTD, ACT_KVA, W_KV_NORM, s.kvr);
	model_linear(m, m->d_kvb, piece_act(c, ACT_KVN), w->p[W_WKV_B], s.n, s.kvr,
		     s.h * (s.nope + s.vd), 0);
	be->ops->heads_split(be, m->d_att, v, m->d_kvb, at, s.n, s.h, s.nope, s.vd, s.h);
	be->ops->heads_cat(be, k, m->d_att, m->d_kpe, at, s.n, s.h, s.nope, s.rope, 1);
	be_attn sh = shape_of(c, &s);
	model_attention_fwd(c, &sh);
	model_resid_add_linear(m, xm, att, w->p[W_WO], s.n, s.h * s.vd, s.d);
}

/* The k and v path backward from dk (n, h, hd) in d_k and dv in d_v: into
 * d_xn (written). */
static int kv_bwd(const piece_ctx *c, const mla_dims *s, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	be->ops->heads_split(be, m->d_att, m->d_kpe, m->d_k, at, s->n, s->h, s->nope, s->rope, 1);
	rope(c, m->d_kpe, 1, 1);
	be->ops->heads_cat(be, m->d_kvb, m->d_att, m->d_v, at, s->n, s->h, s->nope, s->vd, s->h);
	int64_t kvb = s->h * (s->nope + s->vd);
	model_linear_dx(m, m->d_lat[1], m->d_kvb, c->w->p[W_WKV_B], s->n, s->kvr, kvb, 0);
	if (model_weight_grad(c, W_WKV_B, m->d_kvb, ACT_KVN, s->kvr, kvb, e))
		return -1;
	norm_bwd(c, m->d_lat[2], m->d_lat[1], ACT_KVA, ACT_KV_RSTD, W_KV_NORM, s->kvr);
	be->ops->heads_cat(be, m->d_lat[0], m->d_lat[2], m->d_kpe, at, s->n, 1, s->kvr, s->rope,
			   1);
	model_linear_dx(m, m->d_xn, m->d_lat[0], c->w->p[W_WKV_A], s->n, s->d, s->kvr + s->rope, 0);
	return model_weight_grad(c, W_WKV_A, m->d_lat[0], ACT_XN1, s->d, s->kvr + s->rope, e);
}

/* The q path backward from dq (n, h, hd) in d_q: added into d_xn. */
static int q_bwd(const piece_ctx *c, const mla_dims *s, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	const layer_w *w = c->w;
	be->ops->heads_split(be, m->d_att, m->d_pe, m->d_q, at, s->n, s->h, s->nope, s->rope, s->h);
	rope(c, m->d_pe, s->h, 1);
	void *dq = m->d_k; /* the gradient of wq's (wq_b's) output; d_k is free */
	be->ops->heads_cat(be, dq, m->d_att, m->d_pe, at, s->n, s->h, s->nope, s->rope, s->h);
	int64_t hq = s->h * s->hd;
	if (s->qr == 0) {
		model_linear_dx(m, m->d_xn, dq, w->p[W_WQ], s->n, s->d, hq, 1);
		return model_weight_grad(c, W_WQ, dq, ACT_XN1, s->d, hq, e);
	}
	model_linear_dx(m, m->d_qa[0], dq, w->p[W_WQ_B], s->n, s->qr, hq, 0);
	if (model_weight_grad(c, W_WQ_B, dq, ACT_QAN, s->qr, hq, e))
		return -1;
	norm_bwd(c, m->d_qa[1], m->d_qa[0], ACT_QA, ACT_QA_RSTD, W_QA_NORM, s->qr);
	model_linear_dx(m, m->d_xn, m->d_qa[1], w->p[W_WQ_A], s->n, s->d, s->qr, 1);
	return model_weight_grad(c, W_WQ_A, m->d_qa[1], ACT_XN1, s->d, s->qr, e);
}

int model_mla_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	mla_dims s = dims_of(m, c->n);
	model_linear_dx(m, m->d_att, dy, c->w->p[W_WO], s.n, s.h * s.vd, s.d, 0);
	if (model_weight_grad(c, W_WO, dy, ACT_ATT, s.h * s.vd, s.d, e))
		return -1;
	be_attn sh = shape_of(c, &s);
	model_attention_bwd(c, &sh);
	return kv_bwd(c, &s, e) || q_bwd(c, &s, e) ? -1 : 0;
}
