/* The mixture-of-experts feed-forward (torchtitan's models/moe MoE, v0.2.2):
 *   router:  scores = softmax|sigmoid(gate n2); each token picks top_k experts
 *            by scores + expert_bias (the bias steers the choice only), weights
 *            w = its chosen scores, normalised (route_norm) and scaled;
 *   experts: the token-expert assignments sorted by expert (rows), each
 *            expert a SwiGLU over its rows, all of them in grouped matmuls;
 *   out:     sum_j w_j * expert_j(n2) (or the experts' inputs weighted, with
 *            score_before_experts), plus the shared experts' SwiGLU of n2.
 * GPT-OSS's experts (swiglu_limit set) are instead mlp2(clamped_swiglu(mlp1 x +
 * b1)) + b2, mlp1's rows holding each hidden unit's gate and up side by side,
 * and its router's linear has a bias (gate_bias).
 * Experts past their capacity (capacity_factor) drop the later rows: their
 * output is zero.  Each training forward counts the tokens per expert for the
 * load balancing of model_moe_balance. */
#include <math.h>

#include "model/model_priv.h"

static const int shared_w[3] = {W_SW1, W_SW2, W_SW3};

/* GPT-OSS's clamped SwiGLU: alpha fixed by the model, the limit the flavor's. */
#define GPT_OSS_ALPHA 1.702f

static int gpt_oss(const model *m)
{
	return m->args.moe.swiglu_limit > 0;
}

/* GptOssGroupedExperts' tensors: every one drawn with the layer's init_std. */
static int gpt_oss_layout(model *m, int l, int *cap, titan_err *e)
{
	int64_t d = m->args.dim, ex = m->el, in = m->args.moe.inter_dim;
	return model_add_layer_tensor(m, cap, l, "moe.experts.mlp1_weight", W_EW1, INIT_DEPTH,
				      MODEL_TP_COLWISE, 3, ex, 2 * in, d, e) ||
	       model_add_layer_tensor(m, cap, l, "moe.experts.mlp1_bias", W_EB1, INIT_DEPTH,
				      MODEL_TP_COLWISE, 2, ex, 2 * in, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "moe.experts.mlp2_weight", W_EW2, INIT_DEPTH,
				      MODEL_TP_ROWWISE, 3, ex, d, in, e) ||
	       model_add_layer_tensor(m, cap, l, "moe.experts.mlp2_bias", W_EB2, INIT_DEPTH,
				      MODEL_TP_REPLICATE, 2, ex, d, 0, e)
		       ? -1 : 0;
}

int model_moe_layout(model *m, int l, int *cap, titan_err *e)
{
	const moe_args *mo = &m->args.moe;
	int64_t d = m->args.dim, ex = mo->experts, in = mo->inter_dim, el = m->el;
	int64_t sh = m->moe_sh;
	if (gpt_oss(m) ? gpt_oss_layout(m, l, cap, e)
		       : model_add_layer_tensor(m, cap, l, "moe.experts.w1", W_EW1, INIT_INPUT,
						MODEL_TP_COLWISE, 3, el, in, d, e) ||
			 model_add_layer_tensor(m, cap, l, "moe.experts.w2", W_EW2, INIT_DEPTH,
						MODEL_TP_ROWWISE, 3, el, d, in, e) ||
			 model_add_layer_tensor(m, cap, l, "moe.experts.w3", W_EW3, INIT_DEPTH,
						MODEL_TP_COLWISE, 3, el, in, d, e))
		return -1;
	if (model_add_layer_tensor(m, cap, l, "moe.router.gate.weight", W_GATE, INIT_DEPTH,
				   MODEL_TP_REPLICATE, 2, ex, d, 0, e) ||
	    (mo->gate_bias && model_add_layer_tensor(m, cap, l, "moe.router.gate.bias", W_GATE_B,
						     INIT_FANIN, MODEL_TP_REPLICATE, 1, ex, 0, 0,
						     e)))
		return -1;
	if (!sh)
		return 0;
	return model_add_layer_tensor(m, cap, l, "moe.shared_experts.w1.weight", W_SW1,
				      INIT_INPUT, MODEL_TP_COLWISE, 2, sh, d, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "moe.shared_experts.w2.weight", W_SW2,
				      INIT_DEPTH, MODEL_TP_ROWWISE, 2, d, sh, 0, e) ||
	       model_add_layer_tensor(m, cap, l, "moe.shared_experts.w3.weight", W_SW3,
				      INIT_DEPTH, MODEL_TP_COLWISE, 2, sh, d, 0, e)
		       ? -1 : 0;
}

size_t model_moe_act_bytes(const model *m, int l, int i, size_t n)
{
	(void)l;
	const moe_args *mo = &m->args.moe;
	size_t a = be_dtype_size(m->prec.act), k = (size_t)mo->top_k, rows = n * k;
	size_t d = (size_t)m->args.dim, in = (size_t)mo->inter_dim;
	if (m->ep.size > 1 && (i == ACT_EA || i == ACT_EG || i == ACT_EH))
		return 0; /* expert parallelism: the received rows have their own (model_ep.c) */
	switch (i) {
	case ACT_SCORES: return n * (size_t)mo->experts * sizeof(float);
	case ACT_IDX: case ACT_PERM: case ACT_POS: return rows * sizeof(int32_t);
	case ACT_RW: return rows * sizeof(float);
	case ACT_OFFS: return ((size_t)mo->experts + 1) * sizeof(int32_t);
	case ACT_XR: case ACT_EY: return rows * d * a;
	case ACT_EA: return rows * in * a * (gpt_oss(m) ? 2 : 1); /* GPT-OSS: mlp1's output */
	case ACT_EG: return gpt_oss(m) ? 0 : rows * in * a;
	case ACT_EH: return rows * in * a;
	default: return 0;
	}
}

be_moe model_moe_shape(const model *m, int64_t n)
{
	const moe_args *mo = &m->args.moe;
	int64_t cap = 0;
	if (mo->capacity_factor > 0)
		cap = (int64_t)ceil(mo->capacity_factor * (double)n * mo->top_k / mo->experts);
	return (be_moe){.n = n, .e = mo->experts, .k = mo->top_k, .score = mo->score,
			.route_norm = mo->route_norm, .route_scale = (float)mo->route_scale,
			.groups = mo->groups, .limited = mo->limited,
			.force_balance = mo->force_balance, .capacity = cap};
}

/* The experts' SwiGLU gate over every row. */
static void experts_gate(const piece_ctx *c, const moe_rows *v)
{
	model *m = c->m;
	int64_t in = m->args.moe.inter_dim;
	if (gpt_oss(m))
		m->be->ops->swiglu_clamp_fwd(m->be, v->eh, v->ea, m->prec.act, v->rows, in,
					     GPT_OSS_ALPHA, (float)m->args.moe.swiglu_limit);
	else
		m->be->ops->swiglu_fwd(m->be, v->eh, v->ea, v->eg, m->prec.act, v->rows * in);
}

/* y (rows, w) += the bias in slot, group by group (the experts' rows). */
static void expert_bias_add(const piece_ctx *c, const moe_rows *v, void *y, int slot, int64_t w)
{
	model *m = c->m;
	m->be->ops->bias_add(m->be, y, m->prec.act, c->w->p[slot], m->prec.param, v->rows, w,
			     v->groups, v->offs);
}

static void expert_bias_grad(const piece_ctx *c, const moe_rows *v, const void *dy, int slot,
			     int64_t w)
{
	model *m = c->m;
	m->be->ops->bias_grad(m->be, c->g->p[slot], m->prec.grad, dy, m->prec.act, v->rows, w,
			      v->groups, v->offs);
}

/* The grouped product of mode with the experts' weight in slot: under
 * autocast its bf16 copy (torchtitan's _grouped_mm takes w.bfloat16()); a
 * copy that cannot be had is a fault for the next sync. */
static void experts_mm(const piece_ctx *c, const moe_rows *v, int mode, int slot, int64_t nn,
		       int64_t kk, const void *a, float beta, void *out)
{
	model *m = c->m;
	const void *w = model_linear_weight(m, c->w->p[slot]);
	be_dtype at = m->prec.act;
	if (w)
		model_grouped_mm(m, c->l, mode, v->groups, v->offs, v->rows, nn, kk, a, w, beta,
				 out, at);
}

void model_moe_experts_fwd(const piece_ctx *c, const moe_rows *v)
{
	model *m = c->m;
	int64_t d = m->args.dim, in = m->args.moe.inter_dim;
	int64_t w1 = gpt_oss(m) ? 2 * in : in; /* GPT-OSS's mlp1 holds gate and up */
	experts_mm(c, v, BE_GMM_FWD, W_EW1, w1, d, v->xr, 0, v->ea);
	if (gpt_oss(m))
		expert_bias_add(c, v, v->ea, W_EB1, w1);
	else
		experts_mm(c, v, BE_GMM_FWD, W_EW3, in, d, v->xr, 0, v->eg);
	experts_gate(c, v);
	experts_mm(c, v, BE_GMM_FWD, W_EW2, d, in, v->eh, 0, v->ey);
	if (gpt_oss(m) && (!model_experts_tp(m) || m->tp.rank == 0)) /* once, to partial sums */
		expert_bias_add(c, v, v->ey, W_EB2, d);
}

/* The layer's own rows: its activations and the model's scratch. */
static moe_rows layer_rows(const piece_ctx *c)
{
	model *m = c->m;
	return (moe_rows){.rows = c->n * m->args.moe.top_k, .groups = m->args.moe.experts,
			  .offs = piece_act(c, ACT_OFFS), .xr = piece_act(c, ACT_XR),
			  .ea = piece_act(c, ACT_EA), .eg = piece_act(c, ACT_EG),
			  .eh = piece_act(c, ACT_EH), .ey = piece_act(c, ACT_EY),
			  .d_rows = m->d_rows, .d_eh = m->d_eh, .d_ea = m->d_ea, .d_eg = m->d_eg};
}

/* The tokens a rank sends through the experts: all n, or under expert
 * parallelism with TP its 1/tp share of the gathered sequence, rows r0 to
 * r0 + r.n (torchtitan's ReordererSequenceParallel: the router runs on every
 * token alike, the sort, dispatch and combine on the share; the output, a
 * partial sum over tp, is reduce-scattered as under TP alone). */
typedef struct moe_share {
	int64_t r0;
	be_moe r;
} moe_share;

static moe_share token_share(const model *m, int64_t n)
{
	int split = m->ep.size > 1 && m->tp.size > 1;
	int64_t nl = split ? model_seq(m, n) : n;
	return (moe_share){split ? nl * m->tp.rank : 0, model_moe_shape(m, nl)};
}

static void gather_rows(const piece_ctx *c, const moe_share *s)
{
	model *m = c->m;
	const float *w = m->args.moe.score_before_experts ? piece_act(c, ACT_RW) : NULL;
	m->be->ops->moe_gather(m->be, piece_act(c, ACT_XR),
			       elt(piece_act(c, ACT_XN2), m->prec.act, (size_t)(s->r0 * m->args.dim)),
			       m->prec.act, piece_act(c, ACT_PERM), piece_act(c, ACT_OFFS),
			       w ? w + s->r0 * s->r.k : NULL, &s->r, m->args.dim);
}

/* Router, sort, experts up to their output rows (EY); y != NULL (the
 * forward, not a recomputation) also counts the tokens and adds the layer's
 * output into y. */
void model_moe_fwd(const piece_ctx *c, void *y)
{
	model *m = c->m;
	backend *be = m->be;
	const moe_args *mo = &m->args.moe;
	be_dtype at = m->prec.act;
	int64_t n = c->n, d = m->args.dim, ex = mo->experts;
	int64_t li = m->moe_index[c->l];
	be_moe r = model_moe_shape(m, n);
	void *xn = piece_act(c, ACT_XN2);
	int32_t *offs = piece_act(c, ACT_OFFS);
	model_linear(m, m->rlogits, xn, c->w->p[W_GATE], n, d, ex, 0);
	if (c->w->p[W_GATE_B])
		be->ops->bias_add(be, m->rlogits, at, c->w->p[W_GATE_B], m->prec.param, n, ex, 1,
				  NULL);
	const float *bias = mo->load_balance_coeff > 0 ? m->moe_bias + li * ex : NULL;
	be->ops->moe_route(be, piece_act(c, ACT_SCORES), piece_act(c, ACT_IDX),
			   piece_act(c, ACT_RW), m->rlogits, at, bias, &r);
	float *counts = y && c->mb->train ? m->moe_counts + li * ex : NULL;
	int32_t *perm = piece_act(c, ACT_PERM), *pos = piece_act(c, ACT_POS);
	int32_t *idx = piece_act(c, ACT_IDX);
	moe_share s = token_share(m, n);
	if (s.r.n != n && counts) { /* the router's counts are every token's */
		be->ops->moe_permute(be, perm, pos, offs, counts, idx, &r);
		counts = NULL;
	}
	be->ops->moe_permute(be, perm, pos, offs, counts, idx + s.r0 * r.k, &s.r);
	gather_rows(c, &s);
	if (m->ep.size > 1) { /* the backward uses these rows unless it recomputes them */
		int kept = (model_layer_keep(m, c->l) & ACT_BIT(ACT_EY)) != 0;
		model_ep_fwd(c, c->mb->train && (!y || kept));
	} else {
		moe_rows v = layer_rows(c);
		model_moe_experts_fwd(c, &v);
	}
	int64_t sh = m->moe_sh;
	if (sh)
		model_swiglu_fwd(c, shared_w, sh);
	if (!y)
		return;
	/* out = shared(n2) + combine(ey), into d_xn (the activation type), then
	 * added to the stream as torch adds the branch. */
	const float *w = mo->score_before_experts ? NULL : piece_act(c, ACT_RW);
	if (s.r.n != n)
		be->ops->zero(be, m->d_xn, (size_t)(n * d) * be_dtype_size(at));
	be->ops->moe_combine(be, elt(m->d_xn, at, (size_t)(s.r0 * d)), piece_act(c, ACT_EY), at,
			     pos, w ? w + s.r0 * r.k : NULL, 0, &s.r, d);
	if (sh)
		model_linear(m, m->d_xn, piece_act(c, ACT_H), c->w->p[W_SW2], n, sh, d, 1);
	if (m->tp.size == 1) {
		be->ops->axpy(be, y, m->prec.resid, 1, m->d_xn, at, n * d);
		return;
	}
	/* Under TP every rank routed every token to its slice of each expert's
	 * hidden units (under ep: its share of the tokens through whole
	 * experts): the output is a partial sum, reduce-scattered to the rank's
	 * rows of the stream (torchtitan's moe output Partial -> Shard(1)). */
	int64_t ns = model_seq(m, n);
	model_tp_scatter(m, m->d_xs, m->d_xn, n, d, at);
	be->ops->axpy(be, y, m->prec.resid, 1, m->d_xs, at, ns * d);
}

/* Op-level checkpointing kept the routing and the matmul outputs: the rows'
 * gather and the gates again. */
void model_moe_recompute_op(const piece_ctx *c)
{
	model *m = c->m;
	moe_share s = token_share(m, c->n);
	int64_t sh = m->moe_sh;
	if (m->ep.size == 1) { /* expert parallelism keeps the rank's rows whole */
		moe_rows v = layer_rows(c);
		gather_rows(c, &s);
		experts_gate(c, &v);
	}
	if (sh)
		m->be->ops->swiglu_fwd(m->be, piece_act(c, ACT_H), piece_act(c, ACT_A),
				       piece_act(c, ACT_G), m->prec.act, c->n * sh);
}

/* dW[g] += dy[rows of g]^T x[rows of g]: now from the view's rows, or as the
 * layer's activation xi says (deferred where the backward defers). */
static int grouped_dw(const piece_ctx *c, const moe_rows *v, int slot, const void *dy,
		      const void *x, int xi, int64_t in, int64_t out, titan_err *e)
{
	model *m = c->m;
	if (!v->direct)
		return model_grouped_weight_grad(c, slot, dy, xi, in, out, e);
	model_tp_finish(m);
	model_grouped_mm(m, c->l, BE_GMM_DW, v->groups, v->offs, v->rows, out, in, dy, x, 1,
			 c->g->p[slot], m->prec.grad);
	return 0;
}

int model_moe_experts_bwd(const piece_ctx *c, const moe_rows *v, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	const moe_args *mo = &m->args.moe;
	be_dtype at = m->prec.act;
	int64_t d = m->args.dim, in = mo->inter_dim, rows = v->rows;
	int gpt = gpt_oss(m);
	if (gpt && (!model_experts_tp(m) || m->tp.rank == 0)) /* the other tp ranks' add 0 */
		expert_bias_grad(c, v, v->d_rows, W_EB2, d);
	experts_mm(c, v, BE_GMM_DX, W_EW2, d, in, v->d_rows, 0, v->d_eh);
	if (grouped_dw(c, v, W_EW2, v->d_rows, v->eh, ACT_EH, in, d, e))
		return -1;
	if (gpt) { /* d_ea holds mlp1's (gate, up) pairs */
		be->ops->swiglu_clamp_bwd(be, v->d_ea, v->d_eh, v->ea, at, rows, in, GPT_OSS_ALPHA,
					  (float)mo->swiglu_limit);
		expert_bias_grad(c, v, v->d_ea, W_EB1, 2 * in);
		experts_mm(c, v, BE_GMM_DX, W_EW1, 2 * in, d, v->d_ea, 0, v->d_rows);
		return grouped_dw(c, v, W_EW1, v->d_ea, v->xr, ACT_XR, d, 2 * in, e);
	}
	be->ops->swiglu_bwd(be, v->d_ea, v->d_eg, v->d_eh, v->ea, v->eg, at, rows * in);
	experts_mm(c, v, BE_GMM_DX, W_EW1, in, d, v->d_ea, 0, v->d_rows);
	experts_mm(c, v, BE_GMM_DX, W_EW3, in, d, v->d_eg, 1, v->d_rows);
	return grouped_dw(c, v, W_EW1, v->d_ea, v->xr, ACT_XR, d, in, e) ||
	       grouped_dw(c, v, W_EW3, v->d_eg, v->xr, ACT_XR, d, in, e)
		       ? -1 : 0;
}

int model_moe_bwd(const piece_ctx *c, const void *dy, titan_err *e)
{
	model *m = c->m;
	backend *be = m->be;
	const moe_args *mo = &m->args.moe;
	be_dtype at = m->prec.act;
	int64_t n = c->n, d = m->args.dim, ex = mo->experts;
	be_moe r = model_moe_shape(m, n);
	const int32_t *perm = piece_act(c, ACT_PERM), *pos = piece_act(c, ACT_POS);
	const int32_t *offs = piece_act(c, ACT_OFFS);
	/* the rank's share of the tokens: its rows of dy, x and the weights; the
	 * other tokens' gradients through the experts are other tp ranks' (0 here) */
	moe_share s = token_share(m, n);
	size_t o = (size_t)(s.r0 * d);
	float *rw = (float *)piece_act(c, ACT_RW) + s.r0 * r.k, *drw = m->d_rw + s.r0 * r.k;
	const void *dys = elt(dy, at, o), *xn = elt(piece_act(c, ACT_XN2), at, o);
	int before = mo->score_before_experts;
	model_tp_finish(m); /* async TP: dy's gather, which no linear reads first here */
	if (s.r.n != n) {
		be->ops->zero(be, m->d_rw, (size_t)(n * r.k) * sizeof(float));
		be->ops->zero(be, m->d_xn, (size_t)(n * d) * be_dtype_size(at));
	}
	/* The combine: the rows' gradients, and (weighted outputs) the weights'. */
	be->ops->moe_gather(be, m->d_rows, dys, at, perm, offs, before ? NULL : rw, &s.r, d);
	if (!before)
		be->ops->moe_dot(be, drw, piece_act(c, ACT_EY), dys, at, pos, &s.r, d);
	moe_rows v = layer_rows(c);
	if (m->ep.size > 1 ? model_ep_bwd(c, e) : model_moe_experts_bwd(c, &v, e))
		return -1;
	/* The gather: rows back to their tokens (weighted inputs: the weights'
	 * gradient first). */
	if (before)
		be->ops->moe_dot(be, drw, m->d_rows, xn, at, pos, &s.r, d);
	be->ops->moe_combine(be, elt(m->d_xn, at, o), m->d_rows, at, pos, before ? rw : NULL, 0,
			     &s.r, d);
	/* The router. */
	be->ops->moe_route_bwd(be, m->rlogits, at, m->d_rw, piece_act(c, ACT_SCORES),
			       piece_act(c, ACT_IDX), &r);
	if (c->g->p[W_GATE_B])
		be->ops->bias_grad(be, c->g->p[W_GATE_B], m->prec.grad, m->rlogits, at, n, ex, 1,
				   NULL);
	model_linear_dx(m, m->d_xn, m->rlogits, c->w->p[W_GATE], n, d, ex, 1);
	if (model_weight_grad(c, W_GATE, m->rlogits, ACT_XN2, d, ex, e))
		return -1;
	int64_t sh = m->moe_sh;
	return sh ? model_swiglu_bwd(c, shared_w, sh, dy, 1, e) : 0;
}
