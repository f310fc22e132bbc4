/* The transformer block every family runs (torchtitan's TransformerBlock) and
 * its hand-written backward over the backend ops, with activation checkpointing
 * and the split of the backward into input gradients (B) and weight gradients
 * (W):
 *   xm = x + attention(n1),     n1 = attention_norm(x)
 *   y  = xm + feed_forward(n2), n2 = ffn_norm(xm)
 * attention and feed_forward are the layer's pieces (model_attn.c,
 * model_ffn.c).  x, xm and y are of the residual type; the norms' outputs, the
 * linears' inputs and outputs and attention of the activation type
 * (model_prec). */
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

static piece_ctx ctx_of(model *m, const model_mb *mb, int l, int defer)
{
	return (piece_ctx){.m = m, .mb = mb, .l = l, .a = &mb->acts[l + 1 - mb->u0],
			   .w = &m->lw[l], .g = &m->lg[l], .b = mb->b, .t = mb->t,
			   .n = (int64_t)mb->b * mb->t, .defer = defer,
			   .ns = model_seq(m, (int64_t)mb->b * mb->t)};
}

/* y (n, out) += x @ w^T with y of the residual type.  torch adds the branch's
 * output in the activation type to the stream, so a narrower activation type
 * rounds the product first. */
void model_resid_add_linear(model *m, void *y, const void *x, const void *w, int64_t n,
			    int64_t in, int64_t out)
{
	if (m->tp.size > 1) { /* a row-parallel linear: partial sums, reduce-scattered */
		model_tp_resid_add_linear(m, y, x, w, n, in, out);
		return;
	}
	if (m->resid_defer) { /* the block adds it fused with the next norm */
		model_linear(m, m->d_xn, x, w, n, in, out, 0);
		return;
	}
	if (m->prec.act == m->prec.resid) {
		model_linear(m, y, x, w, n, in, out, 1);
		return;
	}
	model_linear(m, m->d_xn, x, w, n, in, out, 0);
	m->be->ops->axpy(m->be, y, m->prec.resid, 1, m->d_xn, m->prec.act, n * out);
}

/* A norm over the rank's rows of the stream, into its rows of the norm's
 * output, which the pieces read whole: gathered under TP (torchtitan's
 * SequenceParallel norm, then PrepareModuleInput's Shard(1) -> Replicate). */
static void norm_fwd(const piece_ctx *c, int xn, int rstd, const void *x, int slot)
{
	model *m = c->m;
	int64_t d = m->args.dim;
	void *full = piece_act(c, xn);
	m->be->ops->rmsnorm_fwd(m->be, elt(full, m->prec.act, (size_t)(m->tp.rank * c->ns * d)),
				m->prec.act, piece_act(c, rstd), x, m->prec.resid, c->w->p[slot],
				m->prec.param, c->ns, d, (float)m->args.norm_eps);
	model_tp_gather(m, full, c->n, d, m->prec.act);
}

/* The feed-forward half after its norm: y = xm + feed_forward(n2). */
static void ffn_half_fwd(const piece_ctx *c, void *y)
{
	model *m = c->m;
	m->be->ops->copy(m->be, y, piece_act(c, ACT_XM),
			 (size_t)(c->ns * m->args.dim) * be_dtype_size(m->prec.resid), BACKEND_D2D);
	model_ffn_fwd(c, y);
}

static void attn_half_fwd(const piece_ctx *c, const void *x)
{
	model *m = c->m;
	void *xm = piece_act(c, ACT_XM);
	norm_fwd(c, ACT_XN1, ACT_RSTD1, x, W_ATTN_NORM);
	m->be->ops->copy(m->be, xm, x, (size_t)(c->ns * m->args.dim) * be_dtype_size(m->prec.resid),
			 BACKEND_D2D);
	model_attn_fwd(c, xm);
}

/* The attention half, then the feed-forward's norm of its output xm.  Under
 * MODEL_FUSE_BLOCKS the attention's output projection is left in d_xn and
 * rmsnorm_add_fwd adds it to the stream and normalises the sum in one pass
 * (one op on one rank; the sum as the plain path rounds it: x + delta of the
 * activation type into the residual type).  Not under TP (its row-parallel
 * linear reduce-scatters into the stream), nor with an output bias (GPT-OSS:
 * added to the stream after the product). */
static void attn_norm2_fwd(const piece_ctx *c, const void *x)
{
	model *m = c->m;
	if (!(m->fuse & MODEL_FUSE_BLOCKS) || m->tp.size > 1 || c->w->p[W_BO]) {
		attn_half_fwd(c, x);
		norm_fwd(c, ACT_XN2, ACT_RSTD2, piece_act(c, ACT_XM), W_FFN_NORM);
		return;
	}
	void *xm = piece_act(c, ACT_XM);
	norm_fwd(c, ACT_XN1, ACT_RSTD1, x, W_ATTN_NORM);
	m->resid_defer = 1;
	model_attn_fwd(c, xm);
	m->resid_defer = 0;
	m->be->ops->rmsnorm_add_fwd(m->be, piece_act(c, ACT_XN2), m->prec.act,
				    piece_act(c, ACT_RSTD2), xm, m->prec.resid, x, m->d_xn,
				    m->prec.act, c->w->p[W_FFN_NORM], m->prec.param, c->ns,
				    m->args.dim, (float)m->args.norm_eps);
}

void model_block_fwd(model *m, model_mb *mb, int l, const void *x, void *y)
{
	piece_ctx c = ctx_of(m, mb, l, 0);
	attn_norm2_fwd(&c, x);
	ffn_half_fwd(&c, y);
}

/* Before layer l's backward: recompute what it did not keep.  Op-level
 * checkpointing kept the matmul and attention outputs; full recomputation
 * stops before the feed-forward's output (y itself is not needed). */
static void recompute(const piece_ctx *c, const void *x)
{
	if (c->a->keep == ACT_ALL)
		return;
	if (c->a->keep == ACT_OP_KEEP) {
		norm_fwd(c, ACT_XN1, ACT_RSTD1, x, W_ATTN_NORM);
		norm_fwd(c, ACT_XN2, ACT_RSTD2, piece_act(c, ACT_XM), W_FFN_NORM);
		model_ffn_recompute_op(c);
		return;
	}
	attn_norm2_fwd(c, x); /* as the forward ran it */
	model_ffn_fwd(c, NULL);
}

/* A copy of activation i that outlives the shared recompute set (for a
 * deferred job), or the kept one. */
static const void *job_input(const piece_ctx *c, int i, size_t bytes, titan_err *e)
{
	layer_act *a = c->a;
	backend *be = c->m->be;
	if (a->kept[i])
		return a->kept[i];
	if (!a->saved[i]) {
		if (!(a->saved[i] = be->ops->alloc(be, bytes, e))) {
			err_prefix(e, "deferred weight gradient");
			return NULL;
		}
		be->ops->copy(be, a->saved[i], c->m->recomp[i], bytes, BACKEND_D2D);
	}
	return a->saved[i];
}

static void run_job(model *m, void *dw, const wgrad_job *j)
{
	if (j->offs)
		model_grouped_mm(m, j->layer, BE_GMM_DW, j->groups, j->offs, j->rows, j->out, j->in,
				 j->dy, j->x, 1, dw, m->prec.grad);
	else
		model_linear_dw(m, dw, j->dy, j->x, j->rows, j->in, j->out);
}

/* dW += dy^T x now, or (defer) keep what it needs for model_block_wgrad: a copy
 * of dy always (it is scratch the next layer reuses), of x (and the groups'
 * offsets) when recomputed into the shared set (one copy per activation,
 * shared by its weights). */
static int weight_grad(const piece_ctx *c, int slot, const void *dy, int xi, int64_t rows,
		       int64_t in, int64_t out, int grouped, titan_err *e)
{
	model *m = c->m;
	layer_act *a = c->a;
	wgrad_job now = {.slot = slot, .dy = (void *)dy, .x = piece_act(c, xi), .rows = rows,
			 .in = in, .out = out};
	if (grouped) {
		now.offs = piece_act(c, ACT_OFFS);
		now.groups = m->args.moe.experts;
		now.layer = c->l;
	}
	model_tp_finish(m);
	if (model_slot_frozen(m, slot))
		return 0;
	if (!c->defer) {
		run_job(m, c->g->p[slot], &now);
		return 0;
	}
	backend *be = m->be;
	size_t es = be_dtype_size(m->prec.act);
	wgrad_job *j = &a->jobs[a->n_jobs];
	*j = now;
	if (!(j->x = job_input(c, xi, (size_t)(rows * in) * es, e)) ||
	    (grouped && !(j->offs = job_input(c, ACT_OFFS, (size_t)(now.groups + 1) *
							    sizeof(int32_t), e))))
		return -1;
	if (!(j->dy = be->ops->alloc(be, (size_t)(rows * out) * es, e)))
		return err_prefix(e, "deferred weight gradient");
	be->ops->copy(be, j->dy, dy, (size_t)(rows * out) * es, BACKEND_D2D);
	a->n_jobs++;
	return 0;
}

int model_weight_grad(const piece_ctx *c, int slot, const void *dy, int xi, int64_t in,
		      int64_t out, titan_err *e)
{
	return weight_grad(c, slot, dy, xi, c->n, in, out, 0, e);
}

int model_grouped_weight_grad(const piece_ctx *c, int slot, const void *dy, int xi, int64_t in,
			      int64_t out, titan_err *e)
{
	return weight_grad(c, slot, dy, xi, c->n * c->m->args.moe.top_k, in, out, 1, e);
}

/* The bytes model_weight_grad keeps for layer l's deferred jobs: the pieces'
 * linears (GQA attention, dense SwiGLU) as they call it. */
static size_t wgrad_layer_bytes(const model *m, int l, size_t n)
{
	size_t d = (size_t)m->args.dim, hq = (size_t)m->args.n_heads * (size_t)m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * (size_t)m->head_dim, f = (size_t)m->ffn;
	size_t dy = n * (d + hq + 2 * hk + d + 2 * f) * be_dtype_size(m->prec.act);
	static const int inputs[] = {ACT_ATT, ACT_XN1, ACT_H, ACT_XN2};
	unsigned keep = model_layer_keep(m, l);
	for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
		if (!(keep & (1u << inputs[i])))
			dy += model_act_bytes(m, l, inputs[i], n);
	return dy;
}

size_t model_wgrad_bytes(const model *m, int u0, int u1, int b, int t)
{
	size_t total = 0;
	for (int u = u0; u <= u1; u++)
		if (u >= 1 && u <= m->args.n_layers)
			total += wgrad_layer_bytes(m, u - 1, (size_t)b * (size_t)t);
	return total;
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

/* The gradient of the stream, d_x (residual type, the rank's rows), as the
 * activation type the linears' backward reads: d_ya, or d_x itself when the
 * types agree; under TP gathered over the sequence into d_full (n rows). */
static void *stream_grad_as_act(model *m, int64_t n)
{
	int64_t ns = model_seq(m, n), d = m->args.dim;
	be_dtype at = m->prec.act;
	void *g = m->d_x;
	if (at != m->prec.resid)
		m->be->ops->convert(m->be, g = m->d_ya, at, m->d_x, m->prec.resid, ns * d);
	if (m->tp.size == 1)
		return g;
	m->be->ops->copy(m->be, elt(m->d_full, at, (size_t)(m->tp.rank * ns * d)), g,
			 (size_t)(ns * d) * be_dtype_size(at), BACKEND_D2D);
	model_tp_gather(m, m->d_full, n, d, at);
	return m->d_full;
}

/* A half's norm backward: its output's gradient (m->d_xn) through the norm,
 * added to the stream's gradient. */
static void norm_bwd(const piece_ctx *c, int rstd, const void *x, int slot)
{
	model *m = c->m;
	backend *be = m->be;
	be_dtype rt = m->prec.resid;
	int64_t d = m->args.dim;
	const void *dy = m->d_xn; /* (n, d): under TP each rank's part of the sum */
	if (m->tp.size > 1) {
		model_tp_scatter(m, m->d_xs, dy, c->n, d, m->prec.act);
		dy = m->d_xs;
	}
	if (m->fuse & MODEL_FUSE_BLOCKS) { /* the stream's gradient added in the same pass */
		be->ops->rmsnorm_add_bwd(be, m->d_x, rt, m->d_x, c->g->p[slot], m->prec.grad, dy,
					 m->prec.act, x, rt, c->w->p[slot], m->prec.param,
					 piece_act(c, rstd), c->ns, d);
		return;
	}
	be->ops->rmsnorm_bwd(be, m->d_tmp, rt, c->g->p[slot], m->prec.grad, dy, m->prec.act, x, rt,
			     c->w->p[slot], m->prec.param, piece_act(c, rstd), c->ns, d);
	be->ops->axpy(be, m->d_x, rt, 1, m->d_tmp, rt, c->ns * d);
}

int model_block_bwd(model *m, model_mb *mb, int l, const void *x, int defer, titan_err *e)
{
	piece_ctx c = ctx_of(m, mb, l, defer);
	recompute(&c, x);
	/* Feed-forward branch; the residual passes d_x through to dxm. */
	if (model_ffn_bwd(&c, stream_grad_as_act(m, c.n), e))
		return -1;
	norm_bwd(&c, ACT_RSTD2, piece_act(&c, ACT_XM), W_FFN_NORM); /* d_x = dxm */
	/* Attention branch. */
	if (model_attn_bwd(&c, stream_grad_as_act(m, c.n), e))
		return -1;
	norm_bwd(&c, ACT_RSTD1, x, W_ATTN_NORM);
	return 0;
}

int model_block_wgrad(model *m, model_mb *mb, int l, titan_err *e)
{
	(void)e;
	layer_act *a = &mb->acts[l + 1 - mb->u0];
	for (int i = 0; i < a->n_jobs; i++)
		run_job(m, m->lg[l].p[a->jobs[i].slot], &a->jobs[i]);
	model_block_drop_jobs(m, a);
	return 0;
}
