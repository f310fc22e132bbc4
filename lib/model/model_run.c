/* The Llama 3 forward and its hand-written backward over the backend ops, with
 * activation checkpointing.  A layer (torchtitan's TransformerBlock):
 *   xm = x + wo(attention(rope(wq(n1)), rope(wk(n1)), wv(n1))),  n1 = attention_norm(x)
 *   out = xm + w2(silu(w1(n2)) * w3(n2)),                        n2 = ffn_norm(xm)
 * The output projection and the cross-entropy run over chunks of tokens, so the
 * logits of the whole micro-batch never exist at once. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"
#include "model/model_priv.h"

/* Floats of activation i for n tokens. */
static size_t act_size(const model *m, int i, size_t n)
{
	size_t d = (size_t)m->args.dim, hq = (size_t)m->args.n_heads * m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim, f = (size_t)m->ffn;
	switch (i) {
	case ACT_XN1: case ACT_XM: case ACT_XN2: return n * d;
	case ACT_RSTD1: case ACT_RSTD2: return n;
	case ACT_Q: case ACT_ATT: return n * hq;
	case ACT_K: case ACT_V: return n * hk;
	case ACT_LSE: return n * (size_t)m->args.n_heads;
	default: return n * f; /* ACT_A, ACT_G, ACT_H */
	}
}

/* Which activations layer l keeps until its backward. */
static unsigned layer_keep(const model *m, int l)
{
	switch (m->ac) {
	case MODEL_AC_NONE: return ACT_ALL;
	case MODEL_AC_FULL: return 0;
	case MODEL_AC_SELECTIVE: return (l + 1) % m->ac_every == 0 ? 0 : ACT_ALL;
	case MODEL_AC_OP: return ACT_OP_KEEP;
	}
	return ACT_ALL;
}

static int logits_chunk(const model *m, size_t n)
{
	size_t c = ((size_t)1 << 24) / (size_t)m->args.vocab_size; /* 64 MiB of logits */
	c = c < 256 ? 256 : c;
	return (int)(c < n ? c : n);
}

/* The floats layout_acts hands out: kept activations of every layer, one scratch
 * set, the residual stream, the final norm, the logits chunk, backward scratch. */
static void layout_sizes(const model *m, size_t n, size_t *kept, size_t *scratch,
			 size_t *rest, size_t *grad)
{
	size_t d = (size_t)m->args.dim, hq = (size_t)m->args.n_heads * m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim, f = (size_t)m->ffn;
	*kept = *scratch = 0;
	unsigned need_scratch = 0;
	for (int l = 0; l < m->args.n_layers; l++) {
		unsigned k = layer_keep(m, l);
		need_scratch |= ~k & ACT_ALL;
		for (int i = 0; i < ACT_COUNT; i++)
			if (k & (1u << i))
				*kept += act_size(m, i, n);
	}
	for (int i = 0; i < ACT_COUNT; i++)
		if (need_scratch & (1u << i))
			*scratch += act_size(m, i, n);
	*rest = (size_t)(m->args.n_layers + 1) * n * d + n * d + n +
		(size_t)logits_chunk(m, n) * (size_t)m->args.vocab_size;
	*grad = 3 * n * d + 2 * n * hq + 2 * n * hk + 3 * n * f;
}

size_t model_activation_bytes(const model *m, int b, int t)
{
	size_t kept, scratch, rest, grad;
	layout_sizes(m, (size_t)b * t, &kept, &scratch, &rest, &grad);
	return (kept + scratch + rest + grad) * sizeof(float);
}

void model_release_acts(model *m)
{
	backend *be = m->be;
	be->ops->free(be, m->rope_cs);
	be->ops->free(be, m->ids);
	be->ops->free(be, m->labels);
	be->ops->free(be, m->resid);
	be->ops->free(be, m->act_mem);
	be->ops->free(be, m->scratch);
	be->ops->free(be, m->grad_mem);
	free(m->acts);
	m->rope_cs = m->resid = m->act_mem = m->scratch = m->grad_mem = NULL;
	m->ids = m->labels = NULL;
	m->acts = NULL;
	m->b = m->t = 0;
}

static int upload_rope(model *m, int t, titan_err *e)
{
	size_t n = (size_t)t * (size_t)m->head_dim;
	double *cs = malloc(n * sizeof(double)); /* (t, hd/2, 2) */
	float *csf = malloc(n * sizeof(float));
	if (!cs || !csf) {
		free(cs);
		free(csf);
		return err_set(e, "model: out of memory");
	}
	cpu_rope_table_f64(cs, t, m->head_dim, 0, m->args.rope_theta,
			   m->args.rope_scale_factor);
	for (size_t i = 0; i < n; i++)
		csf[i] = (float)cs[i];
	m->be->ops->copy(m->be, m->rope_cs, csf, n * sizeof(float), BACKEND_H2D);
	free(cs);
	free(csf);
	return 0;
}

int model_prepare(model *m, int b, int t, titan_err *e)
{
	if (m->acts && m->b == b && m->t == t)
		return 0;
	model_release_acts(m);
	backend *be = m->be;
	size_t n = (size_t)b * t, d = (size_t)m->args.dim;
	size_t hq = (size_t)m->args.n_heads * m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim, f = (size_t)m->ffn;
	size_t kept, scratch, rest, grad;
	layout_sizes(m, n, &kept, &scratch, &rest, &grad);
	m->acts = calloc((size_t)m->args.n_layers, sizeof *m->acts);
	m->rope_cs = backend_alloc_floats(be, (size_t)t * m->head_dim, e);
	m->ids = m->rope_cs ? be->ops->alloc(be, n * sizeof(int32_t), e) : NULL;
	m->labels = m->ids ? be->ops->alloc(be, n * sizeof(int32_t), e) : NULL;
	m->resid = m->labels ? backend_alloc_floats(be, rest, e) : NULL;
	m->act_mem = m->resid && kept ? backend_alloc_floats(be, kept, e) : NULL;
	m->scratch = m->resid && scratch ? backend_alloc_floats(be, scratch, e) : NULL;
	m->grad_mem = m->resid ? backend_alloc_floats(be, grad, e) : NULL;
	if (!m->acts || !m->grad_mem || (kept && !m->act_mem) || (scratch && !m->scratch)) {
		if (!m->acts)
			err_set(e, "model: out of memory");
		err_prefix(e, "activations for batch %d x seq %d", b, t);
		model_release_acts(m);
		return -1;
	}
	m->b = b;
	m->t = t;
	/* The scratch holds one copy of each activation some layer recomputes. */
	float *sp[ACT_COUNT] = {0}, *s = m->scratch, *k = m->act_mem;
	for (int i = 0; i < ACT_COUNT; i++) {
		int used = 0;
		for (int l = 0; l < m->args.n_layers; l++)
			used |= !(layer_keep(m, l) & (1u << i));
		sp[i] = used ? s : NULL;
		if (used)
			s += act_size(m, i, n);
	}
	for (int l = 0; l < m->args.n_layers; l++) {
		layer_act *a = &m->acts[l];
		a->keep = layer_keep(m, l);
		for (int i = 0; i < ACT_COUNT; i++) {
			if (a->keep & (1u << i)) {
				a->f[i] = k;
				k += act_size(m, i, n);
			} else {
				a->f[i] = sp[i];
			}
		}
	}
	float *r = m->resid + (size_t)(m->args.n_layers + 1) * n * d;
	m->xf = r;
	m->rstdf = r + n * d;
	m->logits = m->rstdf + n;
	m->chunk = logits_chunk(m, n);
	float *g = m->grad_mem;
	m->d_x = g; g += n * d;
	m->d_tmp = g; g += n * d;
	m->d_xn = g; g += n * d;
	m->d_q = g; g += n * hq;
	m->d_att = g; g += n * hq;
	m->d_k = g; g += n * hk;
	m->d_v = g; g += n * hk;
	m->d_h = g; g += n * f;
	m->d_a = g; g += n * f;
	m->d_g = g;
	return upload_rope(m, t, e);
}

static float *resid(model *m, int l)
{
	return m->resid + (size_t)l * m->b * m->t * m->args.dim;
}

/* y (n, out) = x (n, in) @ w^T, w (out, in) as nn.Linear; beta 1 adds into y. */
static void linear(model *m, float *y, const float *x, const float *w, int64_t n,
		   int64_t in, int64_t out, float beta)
{
	m->be->ops->matmul(m->be, 0, 1, n, out, in, 1, x, in, w, in, BE_F32, beta, y, out, BE_F32);
}

/* dx (n, in) (+)= dy (n, out) @ w;  dw (out, in) += dy^T @ x. */
static void linear_bwd(model *m, float *dx, float *dw, const float *dy, const float *x,
		       const float *w, int64_t n, int64_t in, int64_t out, float beta_dx)
{
	backend *be = m->be;
	be->ops->matmul(be, 0, 0, n, in, out, 1, dy, out, w, in, BE_F32, beta_dx, dx, in, BE_F32);
	be->ops->matmul(be, 1, 0, out, in, n, 1, dy, out, x, in, BE_F32, 1, dw, in, BE_F32);
}

/* The attention half of layer l: norm, projections, rope, attention, xm. */
static void attn_fwd(model *m, int l, const float *x)
{
	backend *be = m->be;
	const layer_w *w = &m->lw[l];
	float **f = m->acts[l].f;
	int64_t b = m->b, t = m->t, n = b * t, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads;
	be->ops->rmsnorm_fwd(be, f[ACT_XN1], BE_F32, f[ACT_RSTD1], x, BE_F32, w->attn_norm, BE_F32, n, d,
			     (float)m->args.norm_eps);
	linear(m, f[ACT_Q], f[ACT_XN1], w->wq, n, d, h * hd, 0);
	linear(m, f[ACT_K], f[ACT_XN1], w->wk, n, d, hkv * hd, 0);
	linear(m, f[ACT_V], f[ACT_XN1], w->wv, n, d, hkv * hd, 0);
	be->ops->rope(be, f[ACT_Q], BE_F32, m->rope_cs, b, t, h, hd, BE_ROPE_INTERLEAVED, 0);
	be->ops->rope(be, f[ACT_K], BE_F32, m->rope_cs, b, t, hkv, hd, BE_ROPE_INTERLEAVED, 0);
	be_attn at = {.b = b, .tq = t, .tk = t, .h = h, .hkv = hkv, .hd = hd, .hdv = hd,
		      .causal = 1};
	be->ops->attention_fwd(be, f[ACT_ATT], f[ACT_LSE], f[ACT_Q], f[ACT_K], f[ACT_V], &at);
	be->ops->copy(be, f[ACT_XM], x, (size_t)(n * d) * sizeof(float), BACKEND_D2D);
	linear(m, f[ACT_XM], f[ACT_ATT], w->wo, n, h * hd, d, 1);
}

/* The feed-forward half up to w2's input. */
static void ffn_fwd(model *m, int l)
{
	backend *be = m->be;
	const layer_w *w = &m->lw[l];
	float **f = m->acts[l].f;
	int64_t n = (int64_t)m->b * m->t, d = m->args.dim, ff = m->ffn;
	be->ops->rmsnorm_fwd(be, f[ACT_XN2], BE_F32, f[ACT_RSTD2], f[ACT_XM], BE_F32, w->ffn_norm, BE_F32, n, d,
			     (float)m->args.norm_eps);
	linear(m, f[ACT_A], f[ACT_XN2], w->w1, n, d, ff, 0);
	linear(m, f[ACT_G], f[ACT_XN2], w->w3, n, d, ff, 0);
	be->ops->swiglu_fwd(be, f[ACT_H], f[ACT_A], f[ACT_G], BE_F32, n * ff);
}

static void layer_fwd(model *m, int l)
{
	int64_t n = (int64_t)m->b * m->t, d = m->args.dim;
	float *out = resid(m, l + 1);
	attn_fwd(m, l, resid(m, l));
	ffn_fwd(m, l);
	float **f = m->acts[l].f;
	m->be->ops->copy(m->be, out, f[ACT_XM], (size_t)(n * d) * sizeof(float), BACKEND_D2D);
	linear(m, out, f[ACT_H], m->lw[l].w2, n, m->ffn, d, 1);
}

/* Before layer l's backward: recompute what it did not keep. */
static void layer_recompute(model *m, int l)
{
	layer_act *a = &m->acts[l];
	if (a->keep == ACT_ALL)
		return;
	backend *be = m->be;
	const layer_w *w = &m->lw[l];
	float **f = a->f;
	int64_t n = (int64_t)m->b * m->t, d = m->args.dim, ff = m->ffn;
	float eps = (float)m->args.norm_eps;
	if (a->keep == ACT_OP_KEEP) {
		be->ops->rmsnorm_fwd(be, f[ACT_XN1], BE_F32, f[ACT_RSTD1], resid(m, l), BE_F32,
				     w->attn_norm, BE_F32, n, d, eps);
		be->ops->rmsnorm_fwd(be, f[ACT_XN2], BE_F32, f[ACT_RSTD2], f[ACT_XM], BE_F32, w->ffn_norm, BE_F32, n,
				     d, eps);
		be->ops->swiglu_fwd(be, f[ACT_H], f[ACT_A], f[ACT_G], BE_F32, n * ff);
		return;
	}
	attn_fwd(m, l, resid(m, l));
	ffn_fwd(m, l);
}

/* dout (n, dim): gradient of the layer's output; on return m->d_x holds the
 * gradient of its input (dout may be m->d_x). */
static void layer_bwd(model *m, int l, float *dout)
{
	backend *be = m->be;
	const layer_w *w = &m->lw[l];
	layer_w *g = &m->lg[l];
	float **f = m->acts[l].f;
	int64_t b = m->b, t = m->t, n = b * t, d = m->args.dim, hd = m->head_dim;
	int64_t h = m->args.n_heads, hkv = m->args.n_kv_heads, ff = m->ffn;
	size_t nd = (size_t)(n * d) * sizeof(float);

	/* Feed-forward branch; the residual passes dout through to dxm. */
	linear_bwd(m, m->d_h, g->w2, dout, f[ACT_H], w->w2, n, ff, d, 0);
	be->ops->swiglu_bwd(be, m->d_a, m->d_g, m->d_h, f[ACT_A], f[ACT_G], BE_F32, n * ff);
	linear_bwd(m, m->d_xn, g->w1, m->d_a, f[ACT_XN2], w->w1, n, d, ff, 0);
	linear_bwd(m, m->d_xn, g->w3, m->d_g, f[ACT_XN2], w->w3, n, d, ff, 1);
	be->ops->rmsnorm_bwd(be, m->d_tmp, BE_F32, g->ffn_norm, BE_F32, m->d_xn, BE_F32,
			     f[ACT_XM], BE_F32, w->ffn_norm, BE_F32, f[ACT_RSTD2], n, d);
	if (dout != m->d_x)
		be->ops->copy(be, m->d_x, dout, nd, BACKEND_D2D);
	be->ops->axpy(be, m->d_x, BE_F32, 1, m->d_tmp, BE_F32, n * d); /* d_x = dxm */

	/* Attention branch. */
	linear_bwd(m, m->d_att, g->wo, m->d_x, f[ACT_ATT], w->wo, n, h * hd, d, 0);
	be_attn at = {.b = b, .tq = t, .tk = t, .h = h, .hkv = hkv, .hd = hd, .hdv = hd,
		      .causal = 1};
	be->ops->attention_bwd(be, m->d_q, m->d_k, m->d_v, m->d_att, f[ACT_Q], f[ACT_K],
			       f[ACT_V], f[ACT_ATT], f[ACT_LSE], &at);
	be->ops->rope(be, m->d_q, BE_F32, m->rope_cs, b, t, h, hd, BE_ROPE_INTERLEAVED, 1);
	be->ops->rope(be, m->d_k, BE_F32, m->rope_cs, b, t, hkv, hd, BE_ROPE_INTERLEAVED, 1);
	linear_bwd(m, m->d_xn, g->wq, m->d_q, f[ACT_XN1], w->wq, n, d, h * hd, 0);
	linear_bwd(m, m->d_xn, g->wk, m->d_k, f[ACT_XN1], w->wk, n, d, hkv * hd, 1);
	linear_bwd(m, m->d_xn, g->wv, m->d_v, f[ACT_XN1], w->wv, n, d, hkv * hd, 1);
	be->ops->rmsnorm_bwd(be, m->d_tmp, BE_F32, g->attn_norm, BE_F32, m->d_xn, BE_F32,
			     resid(m, l), BE_F32, w->attn_norm, BE_F32, f[ACT_RSTD1], n, d);
	be->ops->axpy(be, m->d_x, BE_F32, 1, m->d_tmp, BE_F32, n * d);
}

static int check_batch(const model *m, const int32_t *inputs, const int32_t *labels,
		       int b, int t, titan_err *e)
{
	if (b <= 0 || t <= 0)
		return err_set(e, "model: batch %d x seq %d, expected positive sizes", b, t);
	int64_t n = (int64_t)b * t, v = m->args.vocab_size;
	for (int64_t i = 0; i < n; i++) {
		if (inputs[i] < 0 || inputs[i] >= v)
			return err_set(e, "model: input token %d at %lld outside the vocabulary "
				       "(%lld)", inputs[i], (long long)i, (long long)v);
		if (labels && labels[i] != MODEL_IGNORE_INDEX && (labels[i] < 0 || labels[i] >= v))
			return err_set(e, "model: label %d at %lld outside the vocabulary (%lld) "
				       "and not %d", labels[i], (long long)i, (long long)v,
				       MODEL_IGNORE_INDEX);
	}
	return 0;
}

static int forward_layers(model *m, const int32_t *inputs, const int32_t *labels, int b,
			  int t, titan_err *e)
{
	if (check_batch(m, inputs, labels, b, t, e) || model_prepare(m, b, t, e))
		return -1;
	backend *be = m->be;
	int64_t n = (int64_t)b * t, d = m->args.dim;
	be->ops->copy(be, m->ids, inputs, (size_t)n * sizeof(int32_t), BACKEND_H2D);
	if (labels)
		be->ops->copy(be, m->labels, labels, (size_t)n * sizeof(int32_t), BACKEND_H2D);
	be->ops->embedding_fwd(be, resid(m, 0), BE_F32, m->tok, BE_F32, m->ids, n, d, 0,
			       m->args.vocab_size);
	for (int l = 0; l < m->args.n_layers; l++)
		layer_fwd(m, l);
	be->ops->rmsnorm_fwd(be, m->xf, BE_F32, m->rstdf, resid(m, m->args.n_layers), BE_F32,
			     m->norm, BE_F32, n, d, (float)m->args.norm_eps);
	return 0;
}

/* Output projection and loss over chunks of tokens: logits (copied to the host
 * when logits_host is not NULL), the loss when there are labels, and with
 * backward set the logits' gradient in place, then the rows of d xf (in
 * m->d_tmp) and the output weight's gradient. */
static void output_chunks(model *m, float *logits_host, int has_labels, int backward,
			  float grad_scale, double *loss, int64_t *valid)
{
	backend *be = m->be;
	int64_t n = (int64_t)m->b * m->t, d = m->args.dim, v = m->args.vocab_size;
	for (int64_t r0 = 0; r0 < n; r0 += m->chunk) {
		int64_t c = n - r0 < m->chunk ? n - r0 : m->chunk;
		linear(m, m->logits, m->xf + r0 * d, m->out, c, d, v, 0);
		if (logits_host)
			be->ops->copy(be, logits_host + r0 * v, m->logits,
				      (size_t)(c * v) * sizeof(float), BACKEND_D2H);
		if (has_labels)
			be->ops->cross_entropy(be, m->logits, BE_F32, m->labels + r0, c, v,
					       MODEL_IGNORE_INDEX, backward ? grad_scale : 0,
					       loss, valid);
		if (backward)
			linear_bwd(m, m->d_tmp + r0 * d, m->out_g, m->logits, m->xf + r0 * d,
				   m->out, c, d, v, 0);
	}
}

int model_forward(model *m, const int32_t *inputs, const int32_t *labels, int b, int t,
		  float *logits, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	if (forward_layers(m, inputs, labels, b, t, e))
		return -1;
	double loss = 0;
	int64_t valid = 0;
	output_chunks(m, logits, labels != NULL, 0, 0, &loss, &valid);
	if (loss_sum)
		*loss_sum = loss;
	if (n_valid)
		*n_valid = valid;
	return m->be->ops->sync(m->be, e);
}

int model_forward_backward(model *m, const int32_t *inputs, const int32_t *labels, int b,
			   int t, float grad_scale, double *loss_sum, int64_t *n_valid,
			   titan_err *e)
{
	if (!labels)
		return err_set(e, "model: forward_backward needs labels");
	if (forward_layers(m, inputs, labels, b, t, e))
		return -1;
	backend *be = m->be;
	int64_t n = (int64_t)b * t, d = m->args.dim;
	double loss = 0;
	int64_t valid = 0;
	output_chunks(m, NULL, 1, 1, grad_scale, &loss, &valid);
	int nl = m->args.n_layers;
	be->ops->rmsnorm_bwd(be, m->d_x, BE_F32, m->norm_g, BE_F32, m->d_tmp, BE_F32, resid(m, nl),
			     BE_F32, m->norm, BE_F32, m->rstdf, n, d);
	for (int l = nl - 1; l >= 0; l--) {
		layer_recompute(m, l);
		layer_bwd(m, l, m->d_x);
	}
	be->ops->embedding_bwd(be, m->tok_g, BE_F32, m->d_x, BE_F32, m->ids, n, d, 0,
			       m->args.vocab_size);
	*loss_sum = loss;
	*n_valid = valid;
	return be->ops->sync(be, e);
}
