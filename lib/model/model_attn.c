/* The attention piece: grouped-query attention with RoPE (torchtitan's
 * Attention in models/llama3, qwen3, llama4 and gpt_oss):
 *   q = rope(qn(wq n1 + bq)), k = rope(kn(wk n1 + bk)), v = wv n1 + bv,
 *   out = wo(attention(q, k, v)) + bo
 * with causal softmax(q k^T / sqrt(hd)) per query head, query head j reading
 * kv head j / (h / hkv).  Each part is the flavor's option, set per layer by
 * model_attn_kind:
 *   qn, kn   Qwen3's QK-norm, an RMSNorm over each head's hd features with one
 *            weight shared by the heads, before RoPE; or Llama 4's (HF's
 *            use_qk_norm) weightless RMS division after RoPE, RoPE layers only
 *   rope     interleaved pairs or halves (rope_style); Llama 4's NoPE layers
 *            skip it (and may scale q by the position's temperature instead)
 *   biases   GPT-OSS's bq bk bv bo
 *   mask     causal, with GPT-OSS's sliding window on its even layers or
 *            Llama 4's chunks on its RoPE layers
 *   sinks    GPT-OSS's learned per-head sink logits in the softmax.
 * Multi-head latent attention (DeepSeek V3) is model_mla.c's piece. */
#include "model/model_priv.h"

layer_kind model_attn_kind(const llama_args *a, int l)
{
	layer_kind k = {.attn = a->mla.kv_lora_rank > 0 ? ATTN_MLA : ATTN_GQA, .rope = 1};
	/* torchtitan's llama4 TransformerBlock: layer_id % every_n_layers_nope == 0
	 * is NoPE, the others attend in fixed blocks */
	if (a->nope_every > 0 && l % a->nope_every == 0)
		k.rope = 0;
	else if (a->nope_every > 0)
		k.chunk = a->attn_chunk;
	/* gpt_oss TransformerBlock: use_sliding_attention = layer_id % 2 == 0 */
	if (a->sliding_window > 0 && l % 2 == 0)
		k.window = a->sliding_window;
	k.qk_l2 = a->qk_l2_norm && k.rope;
	k.temperature = a->attn_temp_floor > 0 && !k.rope;
	return k;
}

int model_attn_layout(model *m, int l, int *cap, titan_err *e)
{
	if (m->kind[l].attn == ATTN_MLA)
		return model_mla_layout(m, l, cap, e);
	const llama_args *a = &m->args;
	int64_t d = a->dim, hd = m->head_dim, hq = (int64_t)a->n_heads * hd,
		hk = (int64_t)a->n_kv_heads * hd;
	/* GPT-OSS's Attention.init_weights draws every tensor, wq wk wv and the
	 * biases included, with the layer's init_std */
	int in_init = a->attn_bias ? INIT_DEPTH : INIT_INPUT;
	if (model_add_layer_tensor(m, cap, l, "attention.wq.weight", W_WQ, in_init,
				   MODEL_TP_COLWISE, 2, hq, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wk.weight", W_WK, in_init,
				   MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wv.weight", W_WV, in_init,
				   MODEL_TP_COLWISE, 2, hk, d, 0, e) ||
	    model_add_layer_tensor(m, cap, l, "attention.wo.weight", W_WO, INIT_DEPTH,
				   MODEL_TP_ROWWISE, 2, d, hq, 0, e))
		return -1;
	/* LoRAConverter's adapters of wo (nn.Linear(hq, rank), nn.Linear(rank, dim)) */
	if (a->lora_rank > 0 &&
	    (model_add_layer_tensor(m, cap, l, "attention.wo.lora_a.weight", W_LORA_A, INIT_LINEAR,
				    MODEL_TP_REPLICATE, 2, a->lora_rank, hq, 0, e) ||
	     model_add_layer_tensor(m, cap, l, "attention.wo.lora_b.weight", W_LORA_B, INIT_ZEROS,
				    MODEL_TP_REPLICATE, 2, d, a->lora_rank, 0, e)))
		return -1;
	if (a->attn_bias &&
	    (model_add_layer_tensor(m, cap, l, "attention.wq.bias", W_BQ, INIT_DEPTH,
				    MODEL_TP_COLWISE, 1, hq, 0, 0, e) ||
	     model_add_layer_tensor(m, cap, l, "attention.wk.bias", W_BK, INIT_DEPTH,
				    MODEL_TP_COLWISE, 1, hk, 0, 0, e) ||
	     model_add_layer_tensor(m, cap, l, "attention.wv.bias", W_BV, INIT_DEPTH,
				    MODEL_TP_COLWISE, 1, hk, 0, 0, e) ||
	     model_add_layer_tensor(m, cap, l, "attention.wo.bias", W_BO, INIT_DEPTH,
				    MODEL_TP_REPLICATE, 1, d, 0, 0, e)))
		return -1;
	if (a->attn_sinks && model_add_layer_tensor(m, cap, l, "attention.sinks", W_SINKS,
						    INIT_DEPTH, MODEL_TP_COLWISE, 1, a->n_heads,
						    0, 0, e))
		return -1;
	if (!a->qk_norm)
		return 0;
	return model_add_layer_tensor(m, cap, l, "attention.q_norm.weight", W_Q_NORM, INIT_ONES,
				      MODEL_TP_REPLICATE, 1, hd, 0, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "attention.k_norm.weight", W_K_NORM, INIT_ONES,
				      MODEL_TP_REPLICATE, 1, hd, 0, 0, e)
		       ? -1 : 0;
}

/* Whether layer l normalises q and k per head (Qwen3's before RoPE, Llama 4's
 * after). */
static int head_norms(const model *m, int l)
{
	return m->args.qk_norm || m->kind[l].qk_l2;
}

size_t model_attn_act_bytes(const model *m, int l, int i, size_t n)
{
	if (m->kind[l].attn == ATTN_MLA)
		return model_mla_act_bytes(m, l, i, n);
	size_t a = be_dtype_size(m->prec.act), h = (size_t)m->args.n_heads;
	size_t hkv = (size_t)m->args.n_kv_heads, hd = (size_t)m->head_dim;
	int qkn = head_norms(m, l);
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

be_attn model_attn_shape(const piece_ctx *c, int64_t h, int64_t hkv, int64_t hd, int64_t hdv)
{
	const model *m = c->m;
	const layer_kind *k = &m->kind[c->l];
	be_dtype t = m->prec.act;
	const model_mb *mb = c->mb;
	return (be_attn){.b = c->b, .tq = c->t, .tk = c->t, .h = h, .hkv = hkv, .hd = hd,
			 .hdv = hdv, .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t,
			 .window = k->window, .chunk = k->chunk,
			 .doc = mb->docs ? mb->doc : NULL, .doc_t = mb->docs ? mb->doc_t : 0,
			 .doc_host = mb->docs ? mb->doc_host : NULL};
}

void model_rope(const piece_ctx *c, void *x, int64_t heads, int64_t hd, int inverse)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int style = m->args.rope_style;
	if (!c->mb->docs) {
		be->ops->rope(be, x, at, m->rope_cs, c->b, c->t, heads, hd, style, inverse);
		return;
	}
	size_t row = (size_t)(c->t * heads * hd), rd = (size_t)(c->t * m->rope_dim);
	for (int64_t r = 0; r < c->b; r++)
		be->ops->rope(be, elt(x, at, (size_t)r * row), at, c->mb->doc_cs + (size_t)r * rd,
			      1, c->t, heads, hd, style, inverse);
}

/* The fused product's split and rotation (or its backward), row by row over
 * the documents' tables. */
static void rope_qkv(const piece_ctx *c, int bwd)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads, hd = m->head_dim;
	int64_t rows = c->mb->docs ? c->b : 1, t = c->t, b = c->mb->docs ? 1 : c->b;
	const float *cs = c->mb->docs ? c->mb->doc_cs : m->rope_cs;
	size_t nq = (size_t)(t * h * hd), nk = (size_t)(t * hkv * hd), nqkv = nq + 2 * nk;
	for (int64_t r = 0; r < rows; r++) {
		void *q = elt(bwd ? m->d_q : piece_act(c, ACT_Q), at, (size_t)r * nq);
		void *k = elt(bwd ? m->d_k : piece_act(c, ACT_K), at, (size_t)r * nk);
		void *v = elt(bwd ? m->d_v : piece_act(c, ACT_V), at, (size_t)r * nk);
		void *qkv = elt(m->qkv, at, (size_t)r * nqkv);
		const float *csr = cs + (size_t)(r * t * m->rope_dim);
		if (bwd)
			be->ops->rope_qkv_bwd(be, qkv, q, k, v, at, csr, b, t, h, hkv, hd,
					      m->args.rope_style);
		else
			be->ops->rope_qkv(be, q, k, v, qkv, at, csr, b, t, h, hkv, hd,
					  m->args.rope_style);
	}
}

/* The attention takes float32 sinks (be_attn): bf16 parameters are widened
 * into m->sinks32 first, and for bf16 gradients the backward accumulates
 * into its second half, which sinks_grad_done then adds to the gradient. */
static be_attn shape_of(const piece_ctx *c, int bwd)
{
	model *m = c->m;
	attn_dims s = dims_of(c);
	be_attn a = model_attn_shape(c, s.h, s.hkv, s.hd, s.hd);
	a.sinks = c->w->p[W_SINKS];
	a.dsinks = bwd ? c->g->p[W_SINKS] : NULL;
	if (!a.sinks || !m->sinks32)
		return a;
	if (m->prec.param != BE_F32) {
		m->be->ops->convert(m->be, m->sinks32, BE_F32, a.sinks, m->prec.param, s.h);
		a.sinks = m->sinks32;
	}
	if (a.dsinks && m->prec.grad != BE_F32) {
		m->be->ops->zero(m->be, m->sinks32 + s.h, (size_t)s.h * sizeof(float));
		a.dsinks = m->sinks32 + s.h;
	}
	return a;
}

static void sinks_grad_done(const piece_ctx *c, const be_attn *a)
{
	model *m = c->m;
	if (a->dsinks && a->dsinks != c->g->p[W_SINKS])
		m->be->ops->axpy(m->be, c->g->p[W_SINKS], m->prec.grad, 1, a->dsinks, BE_F32,
				 m->args.n_heads);
}

/* A per-head norm: y (rows, hd) = rmsnorm(x) * w, rows = tokens * heads;
 * Llama 4's has no weight (m->ones). */
static void head_norm_fwd(const piece_ctx *c, void *y, int rstd, const void *x, int slot,
			  int64_t rows)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	const void *w = m->args.qk_norm ? c->w->p[slot] : m->ones;
	m->be->ops->rmsnorm_fwd(m->be, y, at, piece_act(c, rstd), x, at, w, m->prec.param, rows,
				m->head_dim, (float)m->args.norm_eps);
}

/* dx (rows, hd) of a per-head norm from dy; its weight's gradient accumulated
 * (Llama 4's into m->junk_dw, discarded). */
static void head_norm_bwd(const piece_ctx *c, void *dx, const void *dy, int xi, int rstd,
			  int slot, int64_t rows)
{
	model *m = c->m;
	be_dtype at = m->prec.act;
	int weighted = m->args.qk_norm;
	m->be->ops->rmsnorm_bwd(m->be, dx, at, weighted ? c->g->p[slot] : m->junk_dw,
				m->prec.grad, dy, at, piece_act(c, xi), at,
				weighted ? c->w->p[slot] : m->ones, m->prec.param,
				piece_act(c, rstd), rows, m->head_dim);
}

/* y (n, out) = x @ w^T (+ the slot's bias). */
static void linear_bias(const piece_ctx *c, void *y, const void *x, int wslot, int bslot,
			int64_t in, int64_t out)
{
	model *m = c->m;
	model_linear(m, y, x, c->w->p[wslot], c->n, in, out, 0);
	if (c->w->p[bslot])
		m->be->ops->bias_add(m->be, y, m->prec.act, c->w->p[bslot], m->prec.param, c->n, out,
				     1, NULL);
}

static void bias_grad(const piece_ctx *c, int bslot, const void *dy, int64_t out)
{
	model *m = c->m;
	if (c->g->p[bslot])
		m->be->ops->bias_grad(m->be, c->g->p[bslot], m->prec.grad, dy, m->prec.act, c->n, out,
				      1, NULL);
}

/* LoRA's wo (lora.py's LoRALinear.forward): out = wo(att) + scale *
 * lora_b(lora_a(att)), scale = alpha / rank, added into the stream as one
 * branch (x + out).  The scale multiplies lora_a's output, which gives
 * scale * lora_b(h) up to rounding (exactly for a power of two). */
static void lora_wo_fwd(const piece_ctx *c, void *xm, const void *att)
{
	model *m = c->m;
	attn_dims s = dims_of(c);
	int64_t r = m->args.lora_rank;
	be_dtype at = m->prec.act;
	float scale = (float)(m->args.lora_alpha / (double)r);
	void *h = m->lora[0], *out = m->d_xn; /* d_xn is the forward's scratch, as for
						 model_resid_add_linear */
	model_linear(m, out, att, c->w->p[W_WO], s.n, s.h * s.hd, s.d, 0);
	model_linear(m, h, att, c->w->p[W_LORA_A], s.n, s.h * s.hd, r, 0);
	m->be->ops->scale(m->be, h, at, scale, s.n * r);
	model_linear(m, out, h, c->w->p[W_LORA_B], s.n, r, s.d, 1);
	if (!m->resid_defer) /* else the block adds d_xn with the next norm */
		m->be->ops->axpy(m->be, xm, m->prec.resid, 1, out, at, s.n * s.d);
}

/* Its backward from dy (the branch's output gradient): with g = scale * dy,
 * d lora_b += g^T h, dh = g lora_b, d lora_a += dh^T att, d_att += dh lora_a
 * (h = lora_a(att) recomputed; scale folded into h and dh as forward). */
static void lora_wo_bwd(const piece_ctx *c, const void *dy)
{
	model *m = c->m;
	attn_dims s = dims_of(c);
	int64_t r = m->args.lora_rank, hq = s.h * s.hd;
	be_dtype at = m->prec.act;
	float scale = (float)(m->args.lora_alpha / (double)r);
	const void *att = piece_act(c, ACT_ATT);
	void *h = m->lora[0], *dh = m->lora[1];
	model_linear(m, h, att, c->w->p[W_LORA_A], s.n, hq, r, 0);
	m->be->ops->scale(m->be, h, at, scale, s.n * r);
	model_linear_dw(m, c->g->p[W_LORA_B], dy, h, s.n, r, s.d);
	model_linear_dx(m, dh, dy, c->w->p[W_LORA_B], s.n, r, s.d, 0);
	m->be->ops->scale(m->be, dh, at, scale, s.n * r);
	model_linear_dw(m, c->g->p[W_LORA_A], dh, att, s.n, hq, r);
	model_linear_dx(m, m->d_att, dh, c->w->p[W_LORA_A], s.n, hq, r, 1);
}

/* Whether q, k, v run as one product (MODEL_FUSE_BLOCKS): a plain attention
 * (RoPE, no head norms, no biases) whose wq, wk, wv lie after each other in the
 * bound parameters (the layout's order), and in the gradients for a backward,
 * so [wq; wk; wv] is one weight.  Not under tensor parallelism. */
static int qkv_fused(const piece_ctx *c, int grads)
{
	const model *m = c->m;
	const layer_kind *kd = &m->kind[c->l];
	size_t hq = (size_t)m->args.n_heads * m->head_dim, d = (size_t)m->args.dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim;
	const void *const *w = (const void *const *)c->w->p, *const *g = (const void *const *)c->g->p;
	if (!(m->fuse & MODEL_FUSE_BLOCKS) || !m->qkv || m->tp.size > 1 || !kd->rope ||
	    m->args.qk_norm || kd->qk_l2 || w[W_BQ] || w[W_BK] || w[W_BV])
		return 0;
	if (w[W_WK] != elt(w[W_WQ], m->prec.param, hq * d) ||
	    w[W_WV] != elt(w[W_WK], m->prec.param, hk * d))
		return 0;
	return !grads || (g[W_WQ] && g[W_WK] == elt(g[W_WQ], m->prec.grad, hq * d) &&
			  g[W_WV] == elt(g[W_WK], m->prec.grad, hk * d));
}

/* RoPE (or its inverse) on q and k, or the temperature on q of a NoPE layer. */
static void rotate(const piece_ctx *c, void *q, void *k, int inverse)
{
	model *m = c->m;
	backend *be = m->be;
	const layer_kind *kd = &m->kind[c->l];
	attn_dims s = dims_of(c);
	int style = m->args.rope_style;
	if (kd->rope) {
		model_rope(c, q, s.h, s.hd, inverse);
		model_rope(c, k, s.hkv, s.hd, inverse);
	} else if (kd->temperature) {
		/* a (scale, 0) rotation either way: the backward scales dq alike */
		be->ops->rope(be, q, m->prec.act, m->temp_cs, c->b, c->t, s.h, s.hd, style, 0);
	}
}

void model_attention_fwd(const piece_ctx *c, const be_attn *sh)
{
	model *m = c->m;
	void *att = piece_act(c, ACT_ATT), *lse = piece_act(c, ACT_LSE);
	const void *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K), *v = piece_act(c, ACT_V);
	if (m->attn.fwd)
		m->attn.fwd(m->attn.ctx, att, lse, q, k, v, sh);
	else
		m->be->ops->attention_fwd(m->be, att, lse, q, k, v, sh);
}

void model_attention_bwd(const piece_ctx *c, const be_attn *sh)
{
	model *m = c->m;
	const void *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K), *v = piece_act(c, ACT_V);
	const void *att = piece_act(c, ACT_ATT);
	const float *lse = piece_act(c, ACT_LSE);
	if (m->attn.bwd)
		m->attn.bwd(m->attn.ctx, m->d_q, m->d_k, m->d_v, m->d_att, q, k, v, att, lse, sh);
	else
		m->be->ops->attention_bwd(m->be, m->d_q, m->d_k, m->d_v, m->d_att, q, k, v, att,
					  lse, sh);
}

void model_attn_fwd(const piece_ctx *c, void *xm)
{
	model *m = c->m;
	if (m->kind[c->l].attn == ATTN_MLA) {
		model_mla_fwd(c, xm);
		return;
	}
	backend *be = m->be;
	attn_dims s = dims_of(c);
	const layer_w *w = c->w;
	int before = m->args.qk_norm, after = m->kind[c->l].qk_l2;
	void *xn = piece_act(c, ACT_XN1), *q = piece_act(c, ACT_Q), *k = piece_act(c, ACT_K);
	void *v = piece_act(c, ACT_V), *att = piece_act(c, ACT_ATT);
	if (qkv_fused(c, 0)) { /* one product, split and rotated in one pass */
		model_linear(m, m->qkv, xn, w->p[W_WQ], s.n, s.d, (s.h + 2 * s.hkv) * s.hd, 0);
		rope_qkv(c, 0);
	} else {
		/* with a head norm, wq's and wk's outputs (QR, KR) are its inputs */
		void *qr = before || after ? piece_act(c, ACT_QR) : q;
		void *kr = before || after ? piece_act(c, ACT_KR) : k;
		linear_bias(c, qr, xn, W_WQ, W_BQ, s.d, s.h * s.hd);
		linear_bias(c, kr, xn, W_WK, W_BK, s.d, s.hkv * s.hd);
		linear_bias(c, v, xn, W_WV, W_BV, s.d, s.hkv * s.hd);
		if (before) {
			head_norm_fwd(c, q, ACT_QRSTD, qr, W_Q_NORM, s.n * s.h);
			head_norm_fwd(c, k, ACT_KRSTD, kr, W_K_NORM, s.n * s.hkv);
			rotate(c, q, k, 0);
		} else if (after) {
			rotate(c, qr, kr, 0);
			head_norm_fwd(c, q, ACT_QRSTD, qr, W_Q_NORM, s.n * s.h);
			head_norm_fwd(c, k, ACT_KRSTD, kr, W_K_NORM, s.n * s.hkv);
		} else {
			rotate(c, q, k, 0);
		}
	}
	be_attn sh = shape_of(c, 0);
	model_attention_fwd(c, &sh);
	if (w->p[W_LORA_A])
		lora_wo_fwd(c, xm, att);
	else
		model_resid_add_linear(m, xm, att, w->p[W_WO], s.n, s.h * s.hd, s.d);
	if (w->p[W_BO]) /* onto the rank's rows of the stream (whole sums under TP) */
		be->ops->bias_add(be, xm, m->prec.resid, w->p[W_BO], m->prec.param, c->ns, s.d, 1,
				  NULL);
}

int model_attn_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	if (m->kind[c->l].attn == ATTN_MLA)
		return model_mla_bwd(c, dy, e);
	attn_dims s = dims_of(c);
	const layer_w *w = c->w;
	int before = m->args.qk_norm, after = m->kind[c->l].qk_l2;
	model_linear_dx(m, m->d_att, dy, w->p[W_WO], s.n, s.h * s.hd, s.d, 0);
	if (w->p[W_LORA_A])
		lora_wo_bwd(c, dy); /* wo itself is frozen: no gradient */
	else if (model_weight_grad(c, W_WO, dy, ACT_ATT, s.h * s.hd, s.d, e))
		return -1;
	if (c->g->p[W_BO]) /* the rank's rows: under TP a partial sum, all-reduced as a norm's */
		m->be->ops->bias_grad(m->be, c->g->p[W_BO], m->prec.grad,
				      elt(dy, m->prec.act, (size_t)(m->tp.rank * c->ns * s.d)),
				      m->prec.act, c->ns, s.d, 1, NULL);
	be_attn sh = shape_of(c, 1);
	model_attention_bwd(c, &sh);
	sinks_grad_done(c, &sh);
	if (qkv_fused(c, 1)) { /* rotated back and packed: one product each way */
		int64_t hqkv = (s.h + 2 * s.hkv) * s.hd;
		rope_qkv(c, 1);
		model_linear_dx(m, m->d_xn, m->qkv, w->p[W_WQ], s.n, s.d, hqkv, 0);
		return model_weight_grad(c, W_WQ, m->qkv, ACT_XN1, s.d, hqkv, e);
	}
	/* the gradients of wq's and wk's outputs, and the activations they read */
	void *dq = m->d_q, *dk = m->d_k;
	if (before || after) {
		dq = m->d_att; /* read by attention_bwd, free now */
		dk = m->d_kr;
	}
	if (before) {
		rotate(c, m->d_q, m->d_k, 1);
		head_norm_bwd(c, dq, m->d_q, ACT_QR, ACT_QRSTD, W_Q_NORM, s.n * s.h);
		head_norm_bwd(c, dk, m->d_k, ACT_KR, ACT_KRSTD, W_K_NORM, s.n * s.hkv);
	} else if (after) {
		head_norm_bwd(c, dq, m->d_q, ACT_QR, ACT_QRSTD, W_Q_NORM, s.n * s.h);
		head_norm_bwd(c, dk, m->d_k, ACT_KR, ACT_KRSTD, W_K_NORM, s.n * s.hkv);
		rotate(c, dq, dk, 1);
	} else {
		rotate(c, dq, dk, 1);
	}
	bias_grad(c, W_BQ, dq, s.h * s.hd);
	bias_grad(c, W_BK, dk, s.hkv * s.hd);
	bias_grad(c, W_BV, m->d_v, s.hkv * s.hd);
	model_linear_dx(m, m->d_xn, dq, w->p[W_WQ], s.n, s.d, s.h * s.hd, 0);
	model_linear_dx(m, m->d_xn, dk, w->p[W_WK], s.n, s.d, s.hkv * s.hd, 1);
	model_linear_dx(m, m->d_xn, m->d_v, w->p[W_WV], s.n, s.d, s.hkv * s.hd, 1);
	return model_weight_grad(c, W_WQ, dq, ACT_XN1, s.d, s.h * s.hd, e) ||
	       model_weight_grad(c, W_WK, dk, ACT_XN1, s.d, s.hkv * s.hd, e) ||
	       model_weight_grad(c, W_WV, m->d_v, ACT_XN1, s.d, s.hkv * s.hd, e)
		       ? -1 : 0;
}
