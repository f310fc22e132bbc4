/* DeepSeek V3's multi-token prediction as torchtitan 0.3.0 builds it
 * (models/deepseek_v3/mtp.py: MTPDecoder, MTPTransformerBlock, MTPLoss).
 * Depth k = 1..K (num_mtp_layers) is one block of the last layer's kind
 * (attention and feed-forward) between four tensors of its own:
 *   prev_1 = the last layer's output h (before the final norm),
 *   prev_k = out_{k-1}
 *   x0  = eh_proj([enorm(emb(tokens shifted by k)); hnorm(prev_k * valid)])
 *   out_k = mtp_norm(block(x0))
 * and out_k's logits through the shared output projection predict the
 * labels shifted by k.  A shift never crosses a document (0.3.0's
 * roll_mtp_sequence under the positions): a position whose shifted token
 * lies past the row's end or in another document reads token 0, its prev row
 * is zeroed and its label ignored.  The loss is
 *   (main sum + mtp_scale * mean over depths of their sums) / main valid labels
 * (MTPLoss over the step's global_valid_tokens).  The depths' tensors are the
 * head unit's, named mtp_layers.<k-1>.*; the shifted tokens' embeddings are
 * looked up by the embedding unit, which owns the table.  The depths keep all
 * their activations (0.3.0's activation checkpointing wraps model.layers).
 *
 * Under tensor parallelism (sequence parallel, as 0.3.0's sharding.py lays
 * the depth out: enorm, hnorm, eh_proj and mtp_norm on the rank's rows with
 * replicated weights, the block as a layer's) a rank holds its n/size rows
 * of every (n, d) tensor but out_k, which is gathered whole for the output
 * projection like the head's xf.  The shift needs no exchange: the shifted
 * tokens are looked up (the rank's vocabulary rows, the sum over ranks
 * reduce-scattered to each rank's rows, as the embedding's), and the valid
 * mask is per row.  The loss is vocabulary parallel (or gathered) as the
 * head's; out_k's gradient is reduce-scattered back to the rank's rows and
 * the embeddings' gradients gathered for the table's backward. */
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

/* One depth's tokens and activations. */
typedef struct mtp_depth {
	int32_t *ids, *labels, *rows; /* (n) device: shifted inputs and labels, each
	                                 row's own index when valid, else -1 */
	void *emb, *demb;             /* (n, d) resid: emb(ids), its gradient */
	void *pm;                     /* (n, d) resid: prev with invalid rows zeroed */
	void *cat;                    /* (n, 2d) act: [enorm(emb); hnorm(pm)] */
	void *x0, *y;                 /* (n, d) resid: eh_proj's output, the block's */
	void *out;                    /* (n, d) act: mtp_norm(y) */
	float *rstd_e, *rstd_h, *rstd_o; /* (n) */
} mtp_depth;

struct mtp_mb {
	int k;
	mtp_depth *d;
	void *dcat;          /* (n, 2d) act: eh_proj's input's gradient */
	void *dact;          /* (n, d) act: hnorm's output, then its gradient */
	void *dpm;           /* (n, d) resid: pm's gradient */
	void *dout;          /* (n, d) act: out_k's gradient from depth k + 1 */
	void *dh;            /* (n, d) resid: h's gradient from depth 1 */
	int32_t *in, *lab, *pos; /* (n) host: the micro-batch's tokens, positions */
	int has_pos;
	int32_t *roll;       /* (3n) host scratch */
	void **mem;          /* device allocations, n_mem of them */
	int n_mem;
};

int model_mtp_layout(model *m, int *cap, titan_err *e)
{
	int64_t d = m->args.dim;
	for (int k = 0; k < m->args.mtp_layers; k++) {
		int l = m->args.n_layers + k;
		if (model_add_layer_tensor(m, cap, l, "enorm.weight", W_ENORM, INIT_ONES,
					   MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_add_layer_tensor(m, cap, l, "hnorm.weight", W_HNORM, INIT_ONES,
					   MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_add_layer_tensor(m, cap, l, "eh_proj.weight", W_EH_PROJ, INIT_LINEAR,
					   MODEL_TP_REPLICATE, 2, d, 2 * d, 0, e) ||
		    model_add_layer_tensor(m, cap, l, "attention_norm.weight", W_ATTN_NORM,
					   INIT_ONES, MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_attn_layout(m, l, cap, e) ||
		    model_add_layer_tensor(m, cap, l, "ffn_norm.weight", W_FFN_NORM, INIT_ONES,
					   MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_ffn_layout(m, l, cap, e) ||
		    model_add_layer_tensor(m, cap, l, "mtp_norm.weight", W_MTP_NORM, INIT_ONES,
					   MODEL_TP_REPLICATE, 1, d, 0, 0, e))
			return -1;
	}
	return 0;
}

/* ---- the micro-batch's state ---- */

static void *dev(model *m, struct mtp_mb *x, size_t bytes, titan_err *e)
{
	void *p = m->be->ops->alloc(m->be, bytes ? bytes : 1, e);
	if (p)
		x->mem[x->n_mem++] = p;
	return p;
}

void model_mtp_mb_free(model_mb *mb)
{
	struct mtp_mb *x = mb->mtp;
	if (!x)
		return;
	for (int i = 0; i < x->n_mem; i++)
		mb->m->be->ops->free(mb->m->be, x->mem[i]);
	free(x->mem);
	free(x->d);
	free(x->in);
	free(mb->mtp);
	mb->mtp = NULL;
}

/* The buffers of one depth and the shared ones, by size: (n) int32, (n)
 * float32, (n, d) of the residual type, (n, d) and (n, 2d) of the activation
 * type. */
enum { SZ_IDS, SZ_F32, SZ_RESID, SZ_ACT, SZ_ACT2 };

static size_t size_of(const model *m, size_t n, int kind)
{
	size_t d = (size_t)m->args.dim;
	switch (kind) {
	case SZ_IDS: return n * sizeof(int32_t);
	case SZ_F32: return n * sizeof(float);
	case SZ_RESID: return n * d * be_dtype_size(m->prec.resid);
	case SZ_ACT: return n * d * be_dtype_size(m->prec.act);
	}
	return 2 * n * d * be_dtype_size(m->prec.act);
}

/* A depth's buffers: where each goes and its size. */
static void depth_slots(mtp_depth *p, void ***slot)
{
	void **s[] = {(void **)&p->ids, (void **)&p->labels, (void **)&p->rows, &p->emb,
		      &p->demb, &p->pm, &p->cat, &p->x0, &p->y, &p->out, (void **)&p->rstd_e,
		      (void **)&p->rstd_h, (void **)&p->rstd_o};
	memcpy(slot, s, sizeof s);
}
static const int depth_kind[] = {SZ_IDS, SZ_IDS, SZ_IDS, SZ_RESID, SZ_RESID, SZ_RESID, SZ_ACT2,
				 SZ_RESID, SZ_RESID, SZ_ACT, SZ_F32, SZ_F32, SZ_F32};
#define N_DEPTH_BUFS (int)(sizeof depth_kind / sizeof depth_kind[0])

static void shared_slots(struct mtp_mb *x, void ***slot)
{
	void **s[] = {&x->dcat, &x->dact, &x->dpm, &x->dout, &x->dh};
	memcpy(slot, s, sizeof s);
}
static const int shared_kind[] = {SZ_ACT2, SZ_ACT, SZ_RESID, SZ_ACT, SZ_RESID};
#define N_SHARED_BUFS (int)(sizeof shared_kind / sizeof shared_kind[0])

size_t model_mtp_mb_bytes(const model *m, int b, int t)
{
	size_t n = (size_t)b * (size_t)t, total = 0;
	if (m->args.mtp_layers <= 0)
		return 0;
	for (int i = 0; i < N_SHARED_BUFS; i++)
		total += size_of(m, n, shared_kind[i]);
	for (int j = 0; j < m->args.mtp_layers; j++) {
		for (int i = 0; i < N_DEPTH_BUFS; i++)
			total += size_of(m, n, depth_kind[i]);
		for (int i = 0; i < ACT_COUNT; i++)
			total += model_act_bytes(m, m->args.n_layers + j, i, n);
	}
	return total;
}

/* Depth j's buffers and its block's activations, all kept (its own memory). */
static int depth_alloc(model *m, model_mb *mb, struct mtp_mb *x, int j, titan_err *e)
{
	int l = m->args.n_layers + j;
	size_t n = (size_t)mb->b * (size_t)mb->t;
	void **slot[N_DEPTH_BUFS];
	depth_slots(&x->d[j], slot);
	for (int i = 0; i < N_DEPTH_BUFS; i++)
		if (!(*slot[i] = dev(m, x, size_of(m, n, depth_kind[i]), e)))
			return -1;
	layer_act *a = &mb->acts[l + 1 - mb->u0];
	a->keep = ACT_ALL;
	for (int i = 0; i < ACT_COUNT; i++) {
		size_t bytes = model_act_bytes(m, l, i, n);
		if (bytes && !(a->kept[i] = dev(m, x, bytes, e)))
			return -1;
	}
	return 0;
}

int model_mtp_mb_create(model_mb *mb, titan_err *e)
{
	model *m = mb->m;
	int K = m->args.mtp_layers, head = m->n_units - 1;
	if (mb->u0 != 0 || mb->u1 != head)
		return err_set(e, "model: multi-token prediction needs the embedding and the head in "
			       "one micro-batch (units 0..%d, not %d..%d): pipeline parallelism "
			       "is not built with it, as in torchtitan 0.3.0", head, mb->u0, mb->u1);
	size_t n = (size_t)mb->b * (size_t)mb->t;
	struct mtp_mb *x = calloc(1, sizeof *x);
	if (!x)
		return err_set(e, "model: out of memory");
	mb->mtp = x;
	x->k = K;
	x->d = calloc((size_t)K, sizeof *x->d);
	x->mem = calloc((size_t)K * (N_DEPTH_BUFS + ACT_COUNT) + N_SHARED_BUFS, sizeof *x->mem);
	x->in = malloc(6 * n * sizeof(int32_t));
	if (!x->d || !x->mem || !x->in)
		return err_set(e, "model: out of memory");
	x->lab = x->in + n, x->pos = x->lab + n, x->roll = x->pos + n;
	for (int j = 0; j < K; j++)
		if (depth_alloc(m, mb, x, j, e))
			return err_prefix(e, "multi-token prediction depth %d", j + 1);
	void **slot[N_SHARED_BUFS];
	shared_slots(x, slot);
	for (int i = 0; i < N_SHARED_BUFS; i++)
		if (!(*slot[i] = dev(m, x, size_of(m, n, shared_kind[i]), e)))
			return err_prefix(e, "multi-token prediction");
	return 0;
}

/* Each depth's shifted inputs, labels and valid rows from the host tokens
 * (roll_mtp_sequence: position i reads i + k when it lies in the row and,
 * with positions, in the same document: pos[i + k] == pos[i] + k). */
static void upload_rolls(model_mb *mb)
{
	model *m = mb->m;
	struct mtp_mb *x = mb->mtp;
	int64_t b = mb->b, t = mb->t, n = b * t, ns = model_seq(m, n), r0 = m->tp.rank * ns;
	int32_t *ids = x->roll, *lab = ids + n, *rows = lab + n;
	for (int j = 0; j < x->k; j++) {
		int64_t k = j + 1;
		for (int64_t i = 0; i < n; i++) {
			int64_t c = i % t, s = i + k;
			int ok = c + k < t && (!x->has_pos || x->pos[s] == x->pos[i] + k);
			ids[i] = ok ? x->in[s] : 0;
			lab[i] = ok ? x->lab[s] : MODEL_IGNORE_INDEX;
			rows[i] = ok ? (int32_t)i : -1;
		}
		/* the rank's rows index its own slice of prev (under TP) */
		for (int64_t i = r0; i < r0 + ns; i++)
			rows[i] = rows[i] < 0 ? -1 : (int32_t)(rows[i] - r0);
		size_t bytes = (size_t)n * sizeof(int32_t);
		m->be->ops->copy(m->be, x->d[j].ids, ids, bytes, BACKEND_H2D);
		m->be->ops->copy(m->be, x->d[j].labels, lab, bytes, BACKEND_H2D);
		m->be->ops->copy(m->be, x->d[j].rows, rows + r0, (size_t)ns * sizeof(int32_t),
				 BACKEND_H2D);
	}
}

int model_mtp_set_tokens(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			 titan_err *e)
{
	struct mtp_mb *x = mb->mtp;
	size_t n = (size_t)mb->b * (size_t)mb->t;
	if (!inputs || !labels)
		return err_set(e, "model: multi-token prediction needs the inputs and the labels");
	memcpy(x->in, inputs, n * sizeof *x->in);
	memcpy(x->lab, labels, n * sizeof *x->lab);
	upload_rolls(mb);
	return 0;
}

int model_mtp_set_positions(model_mb *mb, const int32_t *pos, titan_err *e)
{
	(void)e;
	struct mtp_mb *x = mb->mtp;
	x->has_pos = pos != NULL;
	if (pos)
		memcpy(x->pos, pos, (size_t)mb->b * (size_t)mb->t * sizeof *x->pos);
	upload_rolls(mb);
	return 0;
}

/* ---- the embedding unit's part ---- */

/* The shifted tokens' embeddings into each depth's rows, as the stream's
 * (under TP reduce-scattered, their gradients gathered back). */
void model_mtp_embed_fwd(model *m, model_mb *mb)
{
	for (int j = 0; j < mb->mtp->k; j++)
		model_embed_rows_fwd(m, mb->mtp->d[j].emb, mb->mtp->d[j].ids,
				     (int64_t)mb->b * mb->t);
}

void model_mtp_embed_bwd(model *m, model_mb *mb)
{
	for (int j = 0; j < mb->mtp->k; j++)
		model_embed_rows_bwd(m, mb->mtp->d[j].demb, mb->mtp->d[j].ids,
				     (int64_t)mb->b * mb->t);
}

/* ---- the head's part ---- */

static void norm_fwd(model *m, void *y, float *rstd, const void *x, int l, int slot, int64_t n)
{
	m->be->ops->rmsnorm_fwd(m->be, y, m->prec.act, rstd, x, m->prec.resid, m->lw[l].p[slot],
				m->prec.param, n, m->args.dim, (float)m->args.norm_eps);
}

static void norm_bwd(model *m, void *dx, const void *dy, const void *x, const float *rstd, int l,
		     int slot, int64_t n)
{
	m->be->ops->rmsnorm_bwd(m->be, dx, m->prec.resid, m->lg[l].p[slot], m->prec.grad, dy,
				m->prec.act, x, m->prec.resid, m->lw[l].p[slot], m->prec.param,
				rstd, n, m->args.dim);
}

void model_mtp_fwd(model *m, model_mb *mb)
{
	backend *be = m->be;
	struct mtp_mb *x = mb->mtp;
	be_dtype at = m->prec.act, rt = m->prec.resid;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ns = model_seq(m, n);
	size_t mine = (size_t)(m->tp.rank * ns * d); /* the rank's rows of out_k */
	for (int j = 0; j < x->k; j++) {
		mtp_depth *p = &x->d[j];
		int l = m->args.n_layers + j;
		const void *prev = j ? elt(x->d[j - 1].out, at, mine) : model_mb_hidden(mb, m->n_units - 1);
		/* prev's rows where the shifted token is valid, zero elsewhere */
		be->ops->embedding_fwd(be, p->pm, rt, prev, j ? at : rt, p->rows, ns, d, 0, ns);
		norm_fwd(m, m->d_xn, p->rstd_e, p->emb, l, W_ENORM, ns);
		norm_fwd(m, x->dact, p->rstd_h, p->pm, l, W_HNORM, ns);
		be->ops->heads_cat(be, p->cat, m->d_xn, x->dact, at, ns, 1, d, d, 1);
		if (at == rt) {
			model_linear(m, p->x0, p->cat, m->lw[l].p[W_EH_PROJ], ns, 2 * d, d, 0);
		} else {
			model_linear(m, m->d_xn, p->cat, m->lw[l].p[W_EH_PROJ], ns, 2 * d, d, 0);
			be->ops->convert(be, p->x0, rt, m->d_xn, at, ns * d);
		}
		model_block_fwd(m, mb, l, p->x0, p->y);
		norm_fwd(m, elt(p->out, at, mine), p->rstd_o, p->y, l, W_MTP_NORM, ns);
		model_tp_gather(m, p->out, n, d, at);
		model_tp_finish(m);
	}
}

/* Depth j's backward from its loss (and depth j + 1's gradient of out_j in
 * x->dout): the gradient of prev_j into x->dh (j = 0) or x->dout. */
static int depth_bwd(model *m, model_mb *mb, int j, float gs, titan_err *e)
{
	backend *be = m->be;
	struct mtp_mb *x = mb->mtp;
	mtp_depth *p = &x->d[j];
	be_dtype at = m->prec.act, rt = m->prec.resid;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ns = model_seq(m, n);
	int l = m->args.n_layers + j;
	model_logits_loss(m, mb, p->out, p->labels, gs, &mb->mtp_sum, &mb->mtp_valid, 1);
	void *dout = m->d_xn; /* out_k's gradient: under TP the rank's rows of the sum */
	if (m->tp.size > 1)
		model_tp_scatter(m, dout = m->d_xs, m->d_xn, n, d, at);
	if (j + 1 < x->k)
		be->ops->axpy(be, dout, at, 1, x->dout, at, ns * d);
	norm_bwd(m, m->d_x, dout, p->y, p->rstd_o, l, W_MTP_NORM, ns);
	if (model_block_bwd(m, mb, l, p->x0, 0, e))
		return -1;
	const void *dx0 = m->d_x; /* eh_proj's output's gradient as the activation type */
	if (at != rt) {
		be->ops->convert(be, x->dact, at, m->d_x, rt, ns * d);
		dx0 = x->dact;
	}
	model_linear_dx(m, x->dcat, dx0, m->lw[l].p[W_EH_PROJ], ns, 2 * d, d, 0);
	model_linear_dw(m, m->lg[l].p[W_EH_PROJ], dx0, p->cat, ns, 2 * d, d);
	be->ops->heads_split(be, m->d_xn, x->dact, x->dcat, at, ns, 1, d, d, 1);
	norm_bwd(m, p->demb, m->d_xn, p->emb, p->rstd_e, l, W_ENORM, ns);
	norm_bwd(m, x->dpm, x->dact, p->pm, p->rstd_h, l, W_HNORM, ns);
	/* back to prev's valid rows (the masked copy's backward) */
	void *dprev = j ? x->dout : x->dh;
	be_dtype pt = j ? at : rt;
	be->ops->zero(be, dprev, (size_t)(ns * d) * be_dtype_size(pt));
	be->ops->embedding_bwd(be, dprev, pt, x->dpm, rt, p->rows, ns, d, 0, ns);
	return 0;
}

int model_mtp_bwd(model *m, model_mb *mb, titan_err *e)
{
	float gs = (float)(mb->grad_scale * m->args.mtp_scale / m->args.mtp_layers);
	if (gs == 0) { /* mtp_scale 0: the depths weigh nothing (cross_entropy's
	                  scale 0 means no gradient at all) */
		size_t bytes = (size_t)mb->b * (size_t)mb->t * (size_t)m->args.dim *
			       be_dtype_size(m->prec.resid);
		m->be->ops->zero(m->be, mb->mtp->dh, bytes);
		for (int j = 0; j < mb->mtp->k; j++)
			m->be->ops->zero(m->be, mb->mtp->d[j].demb, bytes);
		return 0;
	}
	for (int j = mb->mtp->k - 1; j >= 0; j--)
		if (depth_bwd(m, mb, j, gs, e))
			return -1;
	return 0;
}

void model_mtp_add_dh(model *m, model_mb *mb)
{
	int64_t ns = model_seq(m, (int64_t)mb->b * mb->t);
	m->be->ops->axpy(m->be, m->d_x, m->prec.resid, 1, mb->mtp->dh, m->prec.resid,
			 ns * m->args.dim);
}
