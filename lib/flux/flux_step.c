/* flux_step.c: one training step of the Flux transformer (flux.h): the
 * forward keeps every activation its backward reads, or under full
 * activation checkpointing each block's input alone (the backward runs the
 * block's forward again from it); the backward runs the blocks in reverse
 * and accumulates each parameter's gradient.  Every op on the activations is a backend op, so the step runs
 * on any backend; flux_ops.h's host pieces (the noisy input, the timestep
 * embedding, the RoPE tables) are computed from the batch and uploaded.
 *
 * Layouts, float32 row-major: a stream's activation (b * n, width), sample i's
 * rows from i * n; the joint sequence [txt; img] of the attentions and the
 * single blocks (b, L = lt + li, width), a stream's rows of sample i at
 * i * L + (txt: 0, img: lt); q, k, v (b, L, heads, hd) as the backend's
 * attention reads them.  A stream's q, k, v are written there straight from
 * its qkv linear (the three row blocks of the weight, a product each), and
 * linear2 of a single block reads [attention | gelu] as two products over the
 * weight's column blocks: no split or concatenation is copied.
 *
 * Under bf16 (flux_model_set_compute) the same ops run on bf16 activations
 * and the model's bf16 weight copy, as 0.3.0 computes under FSDP's
 * MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32): every op
 * rounds its output to bf16 (a linear's bias joins its float32 sum before
 * the one rounding, as addmm adds it); a weight's gradient is summed in
 * float32 over the step's products, rounded to bf16 (the bf16 parameter's
 * .grad) and added to the float32 gradient (the cast to reduce_dtype); the
 * LayerNorm stats, RMSNorm rstd and attention lse stay float32. */
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "flux/flux_ops.h"
#include "flux/flux_priv.h"

#define LN_EPS 1e-6f
#define QK_EPS 1e-5f /* torchtitan's RMSNorm.Config default */
#define T_DIM 256    /* timestep_embedding's dim */

typedef struct attn_act {
	void *qraw, *kraw;        /* the qkv linear's q, k before their RMSNorm */
	void *q, *k, *v, *o;      /* attention's operands and output (b * L, h) */
	float *rq, *rk;           /* RMSNorm's rstd (b * L * heads) */
	float *lse;               /* (b, heads, L) */
} attn_act;

typedef struct dstream {          /* a double block's stream: (b * n, .) each */
	void *mod;                /* (b, 6h): shift1 scale1 gate1 shift2 scale2 gate2 */
	void *x_in, *a;           /* block input, qkv's input */
	float *st1, *st2;         /* LN stats (b * n, 2) of the attention's, the MLP's */
	void *proj, *x1;          /* attention's projection; the stream after it */
	void *mi, *hid, *gel, *mo; /* MLP input, hidden (F), GELU, output */
} dstream;

typedef struct dblk {
	dstream s[2];             /* FLUX_IMG, FLUX_TXT */
	attn_act at;
} dblk;

typedef struct sblk {
	void *mod;                /* (b, 3h): shift scale gate */
	void *x_in, *a;           /* (b * L, h) */
	float *st;                /* LN stats (b * L, 2) */
	void *mlp, *gel;          /* (b * L, F) */
	void *out;                /* linear2's output */
	attn_act at;
} sblk;

typedef struct fx_run {
	flux_model *m;
	backend *be;
	be_dtype t;               /* the activations' and the weights' the ops read */
	size_t es;                /* its size */
	int64_t b, li, lt, L, h, f;
	int64_t n[2];             /* rows per sample of each stream */
	int64_t off[2];           /* each stream's first row in the joint sequence */
	void **mem;               /* every buffer, for freeing */
	int nmem, capmem;
	/* inputs in backend memory */
	void *x, *noise, *noisy, *txt_raw, *y, *temb;
	void *host;               /* upload_host's buffer */
	float *cs;                /* (b, L, hd/2, 2) RoPE tables */
	/* embedders */
	void *th, *ths, *yh, *yhs, *vec, *svec;
	void *img, *txt;          /* the streams (b * li, h), (b * lt, h) */
	void *joint;              /* single blocks' stream (b * L, h) */
	dblk *dbl;
	sblk *sgl;
	void *fmod, *xf, *fa, *pred; /* final layer */
	float *fst;
	/* backward scratch */
	void *dimg, *dtxt, *djoint, *dvec, *dh1, *dh2;
	float *dsvec;             /* silu(vec)'s gradient, summed in float32 */
	void *dsvec_t;            /* it in t, for silu's backward */
	void *dmod;               /* (2, b, 6h): each stream's modulation gradient */
	void *th1, *th2, *tf1, *tf2, *dq, *dk, *dv, *dout, *dpred, *dxf;
	/* bf16: a weight's and a bias's gradient summed in float32, and the
	 * bf16 rounding of either (wg_begin, wg_end) */
	float *gw32, *gb32;
	void *g16;
	float *acc32;             /* bf16: linear2's float32 sum (b * L, h) */
	float *x32, *noise32;     /* bf16 with target_f32: the float32 latents and noise */
	int target_f32;
	const be_attn_hook *attn; /* the model's attention hook (a step's), or NULL */
} fx_run;

/* Element i of a tensor of the run's type at p. */
static inline void *E(const fx_run *r, const void *p, int64_t i)
{
	return (char *)p + (size_t)i * r->es;
}

/* A buffer of n elements of size es (n floats with es 4). */
static int grab_es(fx_run *r, void **p, int64_t n, size_t es, titan_err *err)
{
	if (r->nmem == r->capmem) {
		int cap = r->capmem ? 2 * r->capmem : 64;
		void **mem = realloc(r->mem, sizeof *mem * (size_t)cap);
		if (mem == NULL)
			return err_set(err, "flux: out of memory for the step's buffers");
		r->mem = mem;
		r->capmem = cap;
	}
	size_t floats = ((size_t)(n > 0 ? n : 1) * es + sizeof(float) - 1) / sizeof(float);
	*p = backend_alloc_floats(r->be, floats, err);
	if (*p == NULL)
		return err_prefix(err, "flux: the step's activations");
	r->mem[r->nmem++] = *p;
	return 0;
}

/* An activation (the run's type) of n elements. */
static int grab(fx_run *r, void **p, int64_t n, titan_err *err)
{
	return grab_es(r, p, n, r->es, err);
}

/* A float32 buffer (statistics, float32 sums) of n floats. */
static int grabf(fx_run *r, float **p, int64_t n, titan_err *err)
{
	void *v;
	if (grab_es(r, &v, n, sizeof(float), err) < 0)
		return -1;
	*p = v;
	return 0;
}

static void release(fx_run *r)
{
	for (int i = 0; i < r->nmem; i++)
		r->be->ops->free(r->be, r->mem[i]);
	free(r->mem);
	free(r->host);
	free(r->dbl);
	free(r->sgl);
}

static int grab_attn(fx_run *r, attn_act *a, titan_err *err)
{
	int64_t n = r->b * r->L * r->h, rows = r->b * r->L * r->m->heads;
	return grab(r, &a->qraw, n, err) || grab(r, &a->kraw, n, err) ||
	       grab(r, &a->q, n, err) || grab(r, &a->k, n, err) || grab(r, &a->v, n, err) ||
	       grab(r, &a->o, n, err) || grabf(r, &a->rq, rows, err) ||
	       grabf(r, &a->rk, rows, err) || grabf(r, &a->lse, rows, err);
}

static int grab_dstream(fx_run *r, dstream *s, int64_t n, titan_err *err)
{
	int64_t rows = r->b * n, h = r->h, f = r->f;
	return grab(r, &s->mod, r->b * 6 * h, err) || grab(r, &s->x_in, rows * h, err) ||
	       grabf(r, &s->st1, rows * 2, err) || grab(r, &s->a, rows * h, err) ||
	       grab(r, &s->proj, rows * h, err) || grab(r, &s->x1, rows * h, err) ||
	       grabf(r, &s->st2, rows * 2, err) || grab(r, &s->mi, rows * h, err) ||
	       grab(r, &s->hid, rows * f, err) || grab(r, &s->gel, rows * f, err) ||
	       grab(r, &s->mo, rows * h, err);
}

static int grab_sblk(fx_run *r, sblk *s, titan_err *err)
{
	int64_t rows = r->b * r->L, h = r->h, f = r->f;
	return grab(r, &s->mod, r->b * 3 * h, err) || grab(r, &s->x_in, rows * h, err) ||
	       grabf(r, &s->st, rows * 2, err) || grab(r, &s->a, rows * h, err) ||
	       grab(r, &s->mlp, rows * f, err) || grab(r, &s->gel, rows * f, err) ||
	       grab(r, &s->out, rows * h, err) || grab_attn(r, &s->at, err);
}

/* Every buffer of the step, before any op runs. */
static int grab_all(fx_run *r, int backward, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, li = r->li, lt = r->lt;
	r->dbl = calloc((size_t)c->depth, sizeof *r->dbl);
	r->sgl = calloc((size_t)c->depth_single_blocks, sizeof *r->sgl);
	if (r->dbl == NULL || r->sgl == NULL)
		return err_set(err, "flux: out of memory for the step's tables");
	if (grab(r, &r->x, b * li * c->in_channels, err) ||
	    grab(r, &r->noise, b * li * c->in_channels, err) ||
	    grab(r, &r->noisy, b * li * c->in_channels, err) ||
	    grab(r, &r->txt_raw, b * lt * c->context_in_dim, err) ||
	    grab(r, &r->y, b * c->vec_in_dim, err) ||
	    grab(r, &r->temb, b * T_DIM, err) || grabf(r, &r->cs, b * L * r->m->hd, err) ||
	    grab(r, &r->th, b * h, err) || grab(r, &r->ths, b * h, err) ||
	    grab(r, &r->yh, b * h, err) || grab(r, &r->yhs, b * h, err) ||
	    grab(r, &r->vec, b * h, err) || grab(r, &r->svec, b * h, err) ||
	    grab(r, &r->img, b * li * h, err) || grab(r, &r->txt, b * lt * h, err) ||
	    grab(r, &r->joint, b * L * h, err) || grab(r, &r->fmod, b * 2 * h, err) ||
	    grab(r, &r->xf, b * li * h, err) || grabf(r, &r->fst, b * li * 2, err) ||
	    grab(r, &r->fa, b * li * h, err) || grab(r, &r->pred, b * li * c->out_channels, err))
		return -1;
	/* acc32 also holds the prediction and its gradient in float32 for a
	 * float32 target */
	int64_t npred = b * li * c->out_channels;
	int64_t nacc = b * L * h > 2 * npred ? b * L * h : 2 * npred;
	if (r->t != BE_F32 && grabf(r, &r->acc32, nacc, err))
		return -1;
	if (r->t != BE_F32 && r->target_f32 &&
	    (grabf(r, &r->x32, b * li * c->in_channels, err) ||
	     grabf(r, &r->noise32, b * li * c->in_channels, err)))
		return -1;
	/* without a backward no block's activations outlive it: the blocks
	 * share the first one's buffers; under full activation checkpointing
	 * they share them too and each keeps its own input (x_in), from which
	 * the backward recomputes it */
	int shared = !backward || r->m->full_ac;
	for (int64_t k = 0; k < c->depth; k++)
		if (shared && k > 0) {
			r->dbl[k] = r->dbl[0];
			if (backward && (grab(r, &r->dbl[k].s[FLUX_IMG].x_in, b * li * h, err) ||
					 grab(r, &r->dbl[k].s[FLUX_TXT].x_in, b * lt * h, err)))
				return -1;
		} else if (grab_dstream(r, &r->dbl[k].s[FLUX_IMG], li, err) ||
			   grab_dstream(r, &r->dbl[k].s[FLUX_TXT], lt, err) ||
			   grab_attn(r, &r->dbl[k].at, err))
			return -1;
	for (int64_t k = 0; k < c->depth_single_blocks; k++)
		if (shared && k > 0) {
			r->sgl[k] = r->sgl[0];
			if (backward && grab(r, &r->sgl[k].x_in, b * L * h, err))
				return -1;
		} else if (grab_sblk(r, &r->sgl[k], err))
			return -1;
	if (!backward)
		return 0;
	int64_t n = b * L * h;
	if (r->t != BE_F32 &&
	    (grabf(r, &r->gw32, r->m->maxw, err) || grabf(r, &r->gb32, r->m->maxb, err) ||
	     grab(r, &r->g16, r->m->maxw, err) || grab(r, &r->dsvec_t, b * h, err)))
		return -1;
	return grab(r, &r->dimg, b * li * h, err) || grab(r, &r->dtxt, b * lt * h, err) ||
	       grab(r, &r->djoint, n, err) || grabf(r, &r->dsvec, b * h, err) ||
	       grab(r, &r->dmod, 2 * b * 6 * h, err) || grab(r, &r->dvec, b * h, err) ||
	       grab(r, &r->dh1, b * h, err) || grab(r, &r->dh2, b * h, err) ||
	       grab(r, &r->th1, n, err) || grab(r, &r->th2, n, err) ||
	       grab(r, &r->tf1, b * L * f, err) || grab(r, &r->tf2, b * L * f, err) ||
	       grab(r, &r->dq, n, err) || grab(r, &r->dk, n, err) || grab(r, &r->dv, n, err) ||
	       grab(r, &r->dout, n, err) || grab(r, &r->dpred, b * li * c->out_channels, err) ||
	       grab(r, &r->dxf, b * li * h, err);
}

/* ---- the backend's ops, in the run's type ---- */

/* C (m, n) = beta C + op(A) op(B), row-major with leading dimensions; A, B of
 * the run's type, C of ct. */
static void mm_t(fx_run *r, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *a,
		 int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc,
		 be_dtype ct)
{
	r->be->ops->matmul(r->be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, r->t, beta, c, ldc, ct);
}

/* The same with C of the run's type. */
static void mm(fx_run *r, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *a,
	       int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc)
{
	mm_t(r, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, r->t);
}

static void zero(fx_run *r, void *p, int64_t n, size_t es)
{
	r->be->ops->zero(r->be, p, es * (size_t)n);
}

/* y (rows, out) = x (rows, in) w^T + bias; w's rows ldw apart (a row block of
 * a wider weight), bias NULL: none.  bf16: the bias first and the product
 * added to it, so that the sum rounds once (addmm's). */
static void lin(fx_run *r, void *y, const void *x, int64_t rows, int64_t in, int64_t out,
		const void *w, int64_t ldw, const void *bias)
{
	if (r->t != BE_F32 && bias != NULL) {
		zero(r, y, rows * out, r->es);
		r->be->ops->bias_add(r->be, y, r->t, bias, r->t, rows, out, 1, NULL);
		mm(r, 0, 1, rows, out, in, x, in, w, ldw, 1.0f, y, out);
		return;
	}
	mm(r, 0, 1, rows, out, in, x, in, w, ldw, 0.0f, y, out);
	if (bias != NULL)
		r->be->ops->bias_add(r->be, y, r->t, bias, r->t, rows, out, 1, NULL);
}

/* Where a weight gradient's products go: the float32 gradient g itself, or
 * under bf16 a zeroed float32 scratch (slot 0 a weight's, 1 a bias's) whose
 * sum wg_end rounds to bf16 (the bf16 parameter's gradient) and adds to g
 * (FSDP's cast to reduce_dtype float32). */
static float *wg_begin(fx_run *r, float *g, int slot, int64_t n)
{
	if (r->t == BE_F32)
		return g;
	float *s = slot ? r->gb32 : r->gw32;
	zero(r, s, n, sizeof(float));
	return s;
}

static void wg_end(fx_run *r, float *g, int slot, int64_t n)
{
	if (r->t == BE_F32)
		return;
	r->be->ops->convert(r->be, r->g16, r->t, slot ? r->gb32 : r->gw32, BE_F32, n);
	r->be->ops->axpy(r->be, g, BE_F32, 1.0f, r->g16, r->t, n);
}

/* lin's backward: gw (out, in; rows ldw apart) += dy^T x, gb += dy's column
 * sums (when not NULL), both float32 (wg_begin's); dx (rows, in) of type
 * dxt = beta dx + dy w (when not NULL). */
static void lin_bwd_into(fx_run *r, void *dx, be_dtype dxt, float beta, float *gw, float *gb,
			 const void *dy, const void *x, int64_t rows, int64_t in, int64_t out,
			 const void *w, int64_t ldw)
{
	mm_t(r, 1, 0, out, in, rows, dy, out, x, in, 1.0f, gw, ldw, BE_F32);
	if (gb != NULL)
		r->be->ops->bias_grad(r->be, gb, BE_F32, dy, r->t, rows, out, 1, NULL);
	if (dx != NULL)
		mm_t(r, 0, 0, rows, in, out, dy, out, w, ldw, beta, dx, in, dxt);
}

/* The same into the parameter's gradients gw (out x in, ldw = in) and gb. */
static void lin_bwd_t(fx_run *r, void *dx, be_dtype dxt, float beta, float *gw, float *gb,
		      const void *dy, const void *x, int64_t rows, int64_t in, int64_t out,
		      const void *w)
{
	float *sw = wg_begin(r, gw, 0, out * in), *sb = gb ? wg_begin(r, gb, 1, out) : NULL;
	lin_bwd_into(r, dx, dxt, beta, sw, sb, dy, x, rows, in, out, w, in);
	wg_end(r, gw, 0, out * in);
	if (gb != NULL)
		wg_end(r, gb, 1, out);
}

static void lin_bwd(fx_run *r, void *dx, float beta, float *gw, float *gb, const void *dy,
		    const void *x, int64_t rows, int64_t in, int64_t out, const void *w)
{
	lin_bwd_t(r, dx, r->t, beta, gw, gb, dy, x, rows, in, out, w);
}

/* Parameter i's weight as the ops read it: the float32 master or its bf16
 * copy (flux_model_set_compute). */
static const void *W(const fx_run *r, int i)
{
	return r->m->p[i].wc;
}

static be_attn attn_shape(const fx_run *r)
{
	const flux_model *m = r->m;
	return (be_attn){.b = r->b, .tq = r->L, .tk = r->L, .h = m->heads, .hkv = m->heads,
			 .hd = m->hd, .hdv = m->hd, .causal = 0, .qkv = r->t, .out = r->t,
			 .dout = r->t, .grad = r->t};
}

/* The joint attention of a block's q, k, v: the hook's (context
 * parallelism) or the backend's op. */
static void attend(fx_run *r, attn_act *at)
{
	be_attn a = attn_shape(r);
	if (r->attn)
		r->attn->fwd(r->attn->ctx, at->o, at->lse, at->q, at->k, at->v, &a);
	else
		r->be->ops->attention_fwd(r->be, at->o, at->lse, at->q, at->k, at->v, &a);
}

/* Its backward from r->dout into r->dq, r->dk, r->dv. */
static void attend_bwd(fx_run *r, const attn_act *at)
{
	be_attn a = attn_shape(r);
	if (r->attn)
		r->attn->bwd(r->attn->ctx, r->dq, r->dk, r->dv, r->dout, at->q, at->k, at->v, at->o,
			     at->lse, &a);
	else
		r->be->ops->attention_bwd(r->be, r->dq, r->dk, r->dv, r->dout, at->q, at->k, at->v,
					  at->o, at->lse, &a);
}

/* RoPE of the joint q and k (b, L, heads, hd), each sample by its own table. */
static void rope_qk(fx_run *r, void *q, void *k, int inverse)
{
	const flux_model *m = r->m;
	int64_t per = r->L * r->h;
	for (int64_t i = 0; i < r->b; i++) {
		const float *cs = r->cs + i * r->L * m->hd;
		r->be->ops->rope(r->be, E(r, q, i * per), r->t, cs, 1, r->L, m->heads, m->hd,
				 BE_ROPE_INTERLEAVED, inverse);
		r->be->ops->rope(r->be, E(r, k, i * per), r->t, cs, 1, r->L, m->heads, m->hd,
				 BE_ROPE_INTERLEAVED, inverse);
	}
}

/* The QK RMSNorm of rows [row0, row0 + n) of each sample's joint sequence,
 * weights qn, kn; then (all rows done) RoPE and attention run on the whole. */
static void qk_norm(fx_run *r, attn_act *a, int64_t row0, int64_t n, const void *qn,
		    const void *kn)
{
	const flux_model *m = r->m;
	for (int64_t i = 0; i < r->b; i++) {
		int64_t e = (i * r->L + row0) * r->h, s = (i * r->L + row0) * m->heads;
		r->be->ops->rmsnorm_fwd(r->be, E(r, a->q, e), r->t, a->rq + s, E(r, a->qraw, e),
					r->t, qn, r->t, n * m->heads, m->hd, QK_EPS);
		r->be->ops->rmsnorm_fwd(r->be, E(r, a->k, e), r->t, a->rk + s, E(r, a->kraw, e),
					r->t, kn, r->t, n * m->heads, m->hd, QK_EPS);
	}
}

/* Its backward; the norms' weight gradients into gqn, gkn (parameters). */
static void qk_norm_bwd(fx_run *r, const attn_act *a, int64_t row0, int64_t n, const void *dq,
			const void *dk, const void *qn, const void *kn, float *gqn, float *gkn)
{
	const flux_model *m = r->m;
	float *sq = wg_begin(r, gqn, 0, m->hd), *sk = wg_begin(r, gkn, 1, m->hd);
	for (int64_t i = 0; i < r->b; i++) {
		int64_t e = (i * r->L + row0) * r->h, s = (i * r->L + row0) * m->heads;
		/* the gradients before the norms into th1 (q) and th2 (k), same rows */
		r->be->ops->rmsnorm_bwd(r->be, E(r, r->th1, e), r->t, sq, BE_F32, E(r, dq, e),
					r->t, E(r, a->qraw, e), r->t, qn, r->t, a->rq + s,
					n * m->heads, m->hd);
		r->be->ops->rmsnorm_bwd(r->be, E(r, r->th2, e), r->t, sk, BE_F32, E(r, dk, e),
					r->t, E(r, a->kraw, e), r->t, kn, r->t, a->rk + s,
					n * m->heads, m->hd);
	}
	wg_end(r, gqn, 0, m->hd);
	wg_end(r, gkn, 1, m->hd);
}

static float *G(const fx_run *r, int i) { return r->m->p[i].g; }

static void cp(fx_run *r, void *dst, const void *src, int64_t n)
{
	r->be->ops->copy(r->be, dst, src, r->es * (size_t)n, BACKEND_D2D);
}

/* The modulation, gated residual, GELU and SiLU ops, in the run's type. */
static void ln_mod(fx_run *r, void *y, float *stats, const void *x, const void *shift,
		   const void *scale, int64_t ld, int64_t b, int64_t n, int64_t d, float eps)
{
	r->be->ops->ln_mod_fwd(r->be, y, stats, x, shift, scale, r->t, ld, b, n, d, eps);
}

static void ln_mod_bwd(fx_run *r, void *dx, void *dshift, void *dscale, const void *dy,
		       const void *x, const float *stats, const void *scale, int64_t ld,
		       int64_t b, int64_t n, int64_t d)
{
	r->be->ops->ln_mod_bwd(r->be, dx, dshift, dscale, dy, x, stats, scale, r->t, ld, b, n,
			       d);
}

static void gate_add(fx_run *r, void *x, const void *gate, const void *y, int64_t ld,
		     int64_t b, int64_t n, int64_t d)
{
	r->be->ops->gate_add(r->be, x, gate, y, r->t, ld, b, n, d);
}

static void gate_add_bwd(fx_run *r, void *dgate, void *dy, const void *dx, const void *gate,
			 const void *y, int64_t ld, int64_t b, int64_t n, int64_t d)
{
	r->be->ops->gate_add_bwd(r->be, dgate, dy, dx, gate, y, r->t, ld, b, n, d);
}

static void gelu(fx_run *r, void *y, const void *x, int64_t n)
{
	r->be->ops->gelu_tanh_fwd(r->be, y, x, r->t, n);
}

static void gelu_bwd(fx_run *r, void *dx, const void *dy, const void *x, int64_t n)
{
	r->be->ops->gelu_tanh_bwd(r->be, dx, dy, x, r->t, n);
}

static void silu(fx_run *r, void *y, const void *x, int64_t n)
{
	r->be->ops->silu_fwd(r->be, y, x, r->t, n);
}

static void silu_bwd(fx_run *r, void *dx, const void *dy, const void *x, int64_t n)
{
	r->be->ops->silu_bwd(r->be, dx, dy, x, r->t, n);
}

/* ---- double blocks ---- */

static void dbl_fwd(fx_run *r, int64_t k)
{
	dblk *d = &r->dbl[k];
	int64_t b = r->b, h = r->h, f = r->f, L = r->L;
	void *stream[2] = {r->img, r->txt};
	for (int s = 0; s < 2; s++) {
		dstream *ds = &d->s[s];
		int p = flux_pd(r->m, k, s, 0);
		int64_t n = r->n[s], rows = b * n;
		lin(r, ds->mod, r->svec, b, h, 6 * h, W(r, p + D_MOD_W), h, W(r, p + D_MOD_B));
		cp(r, ds->x_in, stream[s], rows * h);
		ln_mod(r, ds->a, ds->st1, ds->x_in, ds->mod, E(r, ds->mod, h), 6 * h, b, n, h,
		       LN_EPS);
		const void *w = W(r, p + D_QKV_W), *bias = W(r, p + D_QKV_B);
		void *dst[3] = {d->at.qraw, d->at.kraw, d->at.v};
		for (int64_t i = 0; i < b; i++)
			for (int c = 0; c < 3; c++)
				lin(r, E(r, dst[c], (i * L + r->off[s]) * h), E(r, ds->a, i * n * h),
				    n, h, h, E(r, w, c * h * h), h, E(r, bias, c * h));
		qk_norm(r, &d->at, r->off[s], n, W(r, p + D_QN), W(r, p + D_KN));
	}
	rope_qk(r, d->at.q, d->at.k, 0);
	attend(r, &d->at);
	for (int s = 0; s < 2; s++) {
		dstream *ds = &d->s[s];
		int p = flux_pd(r->m, k, s, 0);
		int64_t n = r->n[s], rows = b * n;
		for (int64_t i = 0; i < b; i++)
			lin(r, E(r, ds->proj, i * n * h), E(r, d->at.o, (i * L + r->off[s]) * h), n,
			    h, h, W(r, p + D_PROJ_W), h, W(r, p + D_PROJ_B));
		gate_add(r, stream[s], E(r, ds->mod, 2 * h), ds->proj, 6 * h, b, n, h);
		cp(r, ds->x1, stream[s], rows * h);
		ln_mod(r, ds->mi, ds->st2, ds->x1, E(r, ds->mod, 3 * h), E(r, ds->mod, 4 * h),
		       6 * h, b, n, h, LN_EPS);
		lin(r, ds->hid, ds->mi, rows, h, f, W(r, p + D_MLP0_W), h, W(r, p + D_MLP0_B));
		gelu(r, ds->gel, ds->hid, rows * f);
		lin(r, ds->mo, ds->gel, rows, f, h, W(r, p + D_MLP2_W), f, W(r, p + D_MLP2_B));
		gate_add(r, stream[s], E(r, ds->mod, 5 * h), ds->mo, 6 * h, b, n, h);
	}
}

/* A stream's MLP and attention projection backward: the residual gradient dS
 * becomes the one of the stream before the MLP, dmod gets gate2, shift2,
 * scale2 and gate1's, and the projection's input gradient goes to r->dout. */
static void dbl_stream_tail_bwd(fx_run *r, int64_t k, int s, void *dS, void *dmod)
{
	dblk *d = &r->dbl[k];
	dstream *ds = &d->s[s];
	int p = flux_pd(r->m, k, s, 0);
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, n = r->n[s], rows = b * n;
	gate_add_bwd(r, E(r, dmod, 5 * h), r->th1, dS, E(r, ds->mod, 5 * h), ds->mo, 6 * h, b,
		     n, h);
	lin_bwd(r, r->tf1, 0.0f, G(r, p + D_MLP2_W), G(r, p + D_MLP2_B), r->th1, ds->gel, rows, f,
		h, W(r, p + D_MLP2_W));
	gelu_bwd(r, r->tf2, r->tf1, ds->hid, rows * f);
	lin_bwd(r, r->th2, 0.0f, G(r, p + D_MLP0_W), G(r, p + D_MLP0_B), r->tf2, ds->mi, rows, h,
		f, W(r, p + D_MLP0_W));
	ln_mod_bwd(r, dS, E(r, dmod, 3 * h), E(r, dmod, 4 * h), r->th2, ds->x1, ds->st2,
		   E(r, ds->mod, 4 * h), 6 * h, b, n, h);
	gate_add_bwd(r, E(r, dmod, 2 * h), r->th1, dS, E(r, ds->mod, 2 * h), ds->proj, 6 * h, b,
		     n, h);
	float *gw = wg_begin(r, G(r, p + D_PROJ_W), 0, h * h);
	float *gb = wg_begin(r, G(r, p + D_PROJ_B), 1, h);
	for (int64_t i = 0; i < b; i++) {
		int64_t e = (i * L + r->off[s]) * h;
		lin_bwd_into(r, E(r, r->dout, e), r->t, 0.0f, gw, gb, E(r, r->th1, i * n * h),
			     E(r, d->at.o, e), n, h, h, W(r, p + D_PROJ_W), h);
	}
	wg_end(r, G(r, p + D_PROJ_W), 0, h * h);
	wg_end(r, G(r, p + D_PROJ_B), 1, h);
}

/* The part before the attention: QK norms, qkv, LN1 and the modulation. */
static void dbl_stream_head_bwd(fx_run *r, int64_t k, int s, void *dS, void *dmod)
{
	dblk *d = &r->dbl[k];
	dstream *ds = &d->s[s];
	int p = flux_pd(r->m, k, s, 0);
	int64_t b = r->b, h = r->h, L = r->L, n = r->n[s];
	qk_norm_bwd(r, &d->at, r->off[s], n, r->dq, r->dk, W(r, p + D_QN), W(r, p + D_KN),
		    G(r, p + D_QN), G(r, p + D_KN));
	const void *w = W(r, p + D_QKV_W);
	const void *src[3] = {r->th1, r->th2, r->dv};
	void *da = r->tf1;
	float *gw = wg_begin(r, G(r, p + D_QKV_W), 0, 3 * h * h);
	float *gb = wg_begin(r, G(r, p + D_QKV_B), 1, 3 * h);
	for (int64_t i = 0; i < b; i++)
		for (int c = 0; c < 3; c++)
			lin_bwd_into(r, E(r, da, i * n * h), r->t, c ? 1.0f : 0.0f, gw + c * h * h,
				     gb + c * h, E(r, src[c], (i * L + r->off[s]) * h),
				     E(r, ds->a, i * n * h), n, h, h, E(r, w, c * h * h), h);
	wg_end(r, G(r, p + D_QKV_W), 0, 3 * h * h);
	wg_end(r, G(r, p + D_QKV_B), 1, 3 * h);
	ln_mod_bwd(r, dS, dmod, E(r, dmod, h), da, ds->x_in, ds->st1, E(r, ds->mod, h), 6 * h, b,
		   n, h);
	lin_bwd_t(r, r->dsvec, BE_F32, 1.0f, G(r, p + D_MOD_W), G(r, p + D_MOD_B), dmod, r->svec,
		  b, h, 6 * h, W(r, p + D_MOD_W));
}

/* Full activation checkpointing: double block k's forward again from its
 * input, into the buffers the blocks share (the streams it overwrites are
 * not read again: the backward has its gradients). */
static void dbl_recompute(fx_run *r, int64_t k)
{
	dblk *d = &r->dbl[k];
	cp(r, r->img, d->s[FLUX_IMG].x_in, r->b * r->li * r->h);
	cp(r, r->txt, d->s[FLUX_TXT].x_in, r->b * r->lt * r->h);
	dbl_fwd(r, k);
}

static void dbl_bwd(fx_run *r, int64_t k)
{
	dblk *d = &r->dbl[k];
	if (r->m->full_ac)
		dbl_recompute(r, k);
	void *dS[2] = {r->dimg, r->dtxt};
	void *dmod[2] = {r->dmod, E(r, r->dmod, r->b * 6 * r->h)};
	zero(r, r->dmod, 2 * r->b * 6 * r->h, r->es);
	for (int s = 0; s < 2; s++)
		dbl_stream_tail_bwd(r, k, s, dS[s], dmod[s]);
	attend_bwd(r, &d->at);
	rope_qk(r, r->dq, r->dk, 1);
	for (int s = 0; s < 2; s++)
		dbl_stream_head_bwd(r, k, s, dS[s], dmod[s]);
}

/* ---- single blocks ---- */

static void sgl_fwd(fx_run *r, int64_t k)
{
	sblk *sb = &r->sgl[k];
	int p = flux_ps(r->m, k, 0);
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, rows = b * L;
	lin(r, sb->mod, r->svec, b, h, 3 * h, W(r, p + S_MOD_W), h, W(r, p + S_MOD_B));
	cp(r, sb->x_in, r->joint, rows * h);
	ln_mod(r, sb->a, sb->st, sb->x_in, sb->mod, E(r, sb->mod, h), 3 * h, b, L, h, LN_EPS);
	const void *w1 = W(r, p + S_L1_W), *b1 = W(r, p + S_L1_B);
	lin(r, sb->at.qraw, sb->a, rows, h, h, w1, h, b1);
	lin(r, sb->at.kraw, sb->a, rows, h, h, E(r, w1, h * h), h, E(r, b1, h));
	lin(r, sb->at.v, sb->a, rows, h, h, E(r, w1, 2 * h * h), h, E(r, b1, 2 * h));
	lin(r, sb->mlp, sb->a, rows, h, f, E(r, w1, 3 * h * h), h, E(r, b1, 3 * h));
	qk_norm(r, &sb->at, 0, L, W(r, p + S_QN), W(r, p + S_KN));
	rope_qk(r, sb->at.q, sb->at.k, 0);
	attend(r, &sb->at);
	gelu(r, sb->gel, sb->mlp, rows * f);
	/* linear2 over [attention | gelu]: the weight's two column blocks (bf16:
	 * bias and both products summed in float32 first, one rounding) */
	const void *w2 = W(r, p + S_L2_W), *b2 = W(r, p + S_L2_B);
	if (r->t == BE_F32) {
		mm(r, 0, 1, rows, h, h, sb->at.o, h, w2, h + f, 0.0f, sb->out, h);
		mm(r, 0, 1, rows, h, f, sb->gel, f, E(r, w2, h), h + f, 1.0f, sb->out, h);
		r->be->ops->bias_add(r->be, sb->out, BE_F32, b2, BE_F32, rows, h, 1, NULL);
	} else {
		float *acc = r->acc32;
		zero(r, acc, rows * h, sizeof(float));
		r->be->ops->bias_add(r->be, acc, BE_F32, b2, r->t, rows, h, 1, NULL);
		mm_t(r, 0, 1, rows, h, h, sb->at.o, h, w2, h + f, 1.0f, acc, h, BE_F32);
		mm_t(r, 0, 1, rows, h, f, sb->gel, f, E(r, w2, h), h + f, 1.0f, acc, h, BE_F32);
		r->be->ops->convert(r->be, sb->out, r->t, acc, BE_F32, rows * h);
	}
	gate_add(r, r->joint, E(r, sb->mod, 2 * h), sb->out, 3 * h, b, L, h);
}

/* Single block k's forward again from its input (as dbl_recompute). */
static void sgl_recompute(fx_run *r, int64_t k)
{
	cp(r, r->joint, r->sgl[k].x_in, r->b * r->L * r->h);
	sgl_fwd(r, k);
}

static void sgl_bwd(fx_run *r, int64_t k)
{
	sblk *sb = &r->sgl[k];
	if (r->m->full_ac)
		sgl_recompute(r, k);
	int p = flux_ps(r->m, k, 0);
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, rows = b * L;
	void *dmod = r->dmod, *dout = r->th1;
	zero(r, dmod, b * 3 * h, r->es);
	gate_add_bwd(r, E(r, dmod, 2 * h), dout, r->djoint, E(r, sb->mod, 2 * h), sb->out, 3 * h,
		     b, L, h);
	const void *w2 = W(r, p + S_L2_W);
	float *g2 = wg_begin(r, G(r, p + S_L2_W), 0, h * (h + f));
	float *gb2 = wg_begin(r, G(r, p + S_L2_B), 1, h);
	mm_t(r, 1, 0, h, h, rows, dout, h, sb->at.o, h, 1.0f, g2, h + f, BE_F32);
	mm_t(r, 1, 0, h, f, rows, dout, h, sb->gel, f, 1.0f, g2 + h, h + f, BE_F32);
	r->be->ops->bias_grad(r->be, gb2, BE_F32, dout, r->t, rows, h, 1, NULL);
	wg_end(r, G(r, p + S_L2_W), 0, h * (h + f));
	wg_end(r, G(r, p + S_L2_B), 1, h);
	mm(r, 0, 0, rows, h, h, dout, h, w2, h + f, 0.0f, r->dout, h);
	mm(r, 0, 0, rows, f, h, dout, h, E(r, w2, h), h + f, 0.0f, r->tf1, f);
	gelu_bwd(r, r->tf2, r->tf1, sb->mlp, rows * f);
	attend_bwd(r, &sb->at);
	rope_qk(r, r->dq, r->dk, 1);
	qk_norm_bwd(r, &sb->at, 0, L, r->dq, r->dk, W(r, p + S_QN), W(r, p + S_KN),
		    G(r, p + S_QN), G(r, p + S_KN));
	/* linear1's four row blocks: q k v from th1 th2 dv, the MLP's from tf2 */
	const void *w1 = W(r, p + S_L1_W);
	float *g1 = wg_begin(r, G(r, p + S_L1_W), 0, (3 * h + f) * h);
	float *gb1 = wg_begin(r, G(r, p + S_L1_B), 1, 3 * h + f);
	void *da = r->dout;
	const void *src[3] = {r->th1, r->th2, r->dv};
	for (int c = 0; c < 3; c++)
		lin_bwd_into(r, da, r->t, c ? 1.0f : 0.0f, g1 + c * h * h, gb1 + c * h, src[c],
			     sb->a, rows, h, h, E(r, w1, c * h * h), h);
	lin_bwd_into(r, da, r->t, 1.0f, g1 + 3 * h * h, gb1 + 3 * h, r->tf2, sb->a, rows, h, f,
		     E(r, w1, 3 * h * h), h);
	wg_end(r, G(r, p + S_L1_W), 0, (3 * h + f) * h);
	wg_end(r, G(r, p + S_L1_B), 1, 3 * h + f);
	ln_mod_bwd(r, r->djoint, dmod, E(r, dmod, h), da, sb->x_in, sb->st, E(r, sb->mod, h),
		   3 * h, b, L, h);
	lin_bwd_t(r, r->dsvec, BE_F32, 1.0f, G(r, p + S_MOD_W), G(r, p + S_MOD_B), dmod, r->svec,
		  b, h, 3 * h, W(r, p + S_MOD_W));
}

/* ---- embedders and the final layer ---- */

static void embed_fwd(fx_run *r)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h, cin = c->in_channels;
	lin(r, r->img, r->noisy, b * r->li, cin, h, W(r, P_IMG_IN_W), cin, W(r, P_IMG_IN_B));
	lin(r, r->th, r->temb, b, T_DIM, h, W(r, P_TIME_IN_W), T_DIM, W(r, P_TIME_IN_B));
	silu(r, r->ths, r->th, b * h);
	lin(r, r->vec, r->ths, b, h, h, W(r, P_TIME_OUT_W), h, W(r, P_TIME_OUT_B));
	lin(r, r->yh, r->y, b, c->vec_in_dim, h, W(r, P_VEC_IN_W), c->vec_in_dim,
	    W(r, P_VEC_IN_B));
	silu(r, r->yhs, r->yh, b * h);
	lin(r, r->svec, r->yhs, b, h, h, W(r, P_VEC_OUT_W), h, W(r, P_VEC_OUT_B));
	r->be->ops->add(r->be, r->vec, r->t, r->vec, r->t, r->svec, r->t, b * h);
	silu(r, r->svec, r->vec, b * h);
	lin(r, r->txt, r->txt_raw, b * r->lt, c->context_in_dim, h, W(r, P_TXT_IN_W),
	    c->context_in_dim, W(r, P_TXT_IN_B));
}

static void embed_bwd(fx_run *r)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h, cin = c->in_channels;
	lin_bwd(r, NULL, 0.0f, G(r, P_IMG_IN_W), G(r, P_IMG_IN_B), r->dimg, r->noisy, b * r->li,
		cin, h, W(r, P_IMG_IN_W));
	lin_bwd(r, NULL, 0.0f, G(r, P_TXT_IN_W), G(r, P_TXT_IN_B), r->dtxt, r->txt_raw, b * r->lt,
		c->context_in_dim, h, W(r, P_TXT_IN_W));
	/* silu(vec)'s gradient, summed in float32 over the modulations, in t */
	const void *dsvec = r->dsvec;
	if (r->t != BE_F32) {
		r->be->ops->convert(r->be, r->dsvec_t, r->t, r->dsvec, BE_F32, b * h);
		dsvec = r->dsvec_t;
	}
	silu_bwd(r, r->dvec, dsvec, r->vec, b * h);
	lin_bwd(r, r->dh1, 0.0f, G(r, P_TIME_OUT_W), G(r, P_TIME_OUT_B), r->dvec, r->ths, b, h, h,
		W(r, P_TIME_OUT_W));
	silu_bwd(r, r->dh2, r->dh1, r->th, b * h);
	lin_bwd(r, NULL, 0.0f, G(r, P_TIME_IN_W), G(r, P_TIME_IN_B), r->dh2, r->temb, b, T_DIM, h,
		W(r, P_TIME_IN_W));
	lin_bwd(r, r->dh1, 0.0f, G(r, P_VEC_OUT_W), G(r, P_VEC_OUT_B), r->dvec, r->yhs, b, h, h,
		W(r, P_VEC_OUT_W));
	silu_bwd(r, r->dh2, r->dh1, r->yh, b * h);
	lin_bwd(r, NULL, 0.0f, G(r, P_VEC_IN_W), G(r, P_VEC_IN_B), r->dh2, r->y, b,
		c->vec_in_dim, h, W(r, P_VEC_IN_W));
}

static void final_fwd(fx_run *r)
{
	int p = flux_pf(r->m, 0);
	int64_t b = r->b, h = r->h, li = r->li, out = r->m->c.out_channels;
	for (int64_t i = 0; i < b; i++)
		cp(r, E(r, r->xf, i * li * h), E(r, r->joint, (i * r->L + r->lt) * h), li * h);
	lin(r, r->fmod, r->svec, b, h, 2 * h, W(r, p + F_ADA_W), h, W(r, p + F_ADA_B));
	ln_mod(r, r->fa, r->fst, r->xf, r->fmod, E(r, r->fmod, h), 2 * h, b, li, h, LN_EPS);
	lin(r, r->pred, r->fa, b * li, h, out, W(r, p + F_LIN_W), h, W(r, p + F_LIN_B));
}

static void final_bwd(fx_run *r)
{
	int p = flux_pf(r->m, 0);
	int64_t b = r->b, h = r->h, li = r->li, out = r->m->c.out_channels;
	lin_bwd(r, r->dxf, 0.0f, G(r, p + F_LIN_W), G(r, p + F_LIN_B), r->dpred, r->fa, b * li, h,
		out, W(r, p + F_LIN_W));
	zero(r, r->dmod, b * 2 * h, r->es);
	zero(r, r->th1, b * li * h, r->es);
	ln_mod_bwd(r, r->th1, r->dmod, E(r, r->dmod, h), r->dxf, r->xf, r->fst,
		   E(r, r->fmod, h), 2 * h, b, li, h);
	zero(r, r->djoint, b * r->L * h, r->es);
	for (int64_t i = 0; i < b; i++)
		cp(r, E(r, r->djoint, (i * r->L + r->lt) * h), E(r, r->th1, i * li * h), li * h);
	lin_bwd_t(r, r->dsvec, BE_F32, 1.0f, G(r, p + F_ADA_W), G(r, p + F_ADA_B), r->dmod,
		  r->svec, b, h, 2 * h, W(r, p + F_ADA_W));
}

/* ---- the step ---- */

/* step: flux_step's batch (noise given, the loss's channels); else
 * flux_predict's (x the model's input, noise NULL). */
static int check_batch(const flux_model *m, const flux_batch *in, int step, titan_err *err)
{
	const flux_config *c = &m->c;
	if (in->x == NULL || (step && in->noise == NULL) || in->img_ids == NULL || in->txt == NULL ||
	    in->txt_ids == NULL || in->t == NULL || in->y == NULL)
		return err_set(err, "flux batch: an input is missing (NULL)");
	const struct {
		const char *what;
		int64_t got, lo, hi;
	} sz[] = {
		{"batch size", in->b, 1, 1 << 16},
		{"image tokens", in->li, 1, 1 << 20},
		{"text tokens", in->lt, 1, 1 << 20},
	};
	for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
		if (sz[i].got < sz[i].lo || sz[i].got > sz[i].hi)
			return err_set(err, "flux batch: %s %lld, expected %lld .. %lld", sz[i].what,
				       (long long)sz[i].got, (long long)sz[i].lo, (long long)sz[i].hi);
	if (in->b * (in->li + in->lt) > (INT64_C(1) << 24))
		return err_set(err, "flux batch: %lld x %lld tokens, more than 2^24",
			       (long long)in->b, (long long)(in->li + in->lt));
	const struct {
		const char *what, *field;
		int64_t got, want;
	} dim[] = {
		{"image latents (x, noise)", "in_channels", in->c_img, c->in_channels},
		{"T5 states (txt)", "context_in_dim", in->c_txt, c->context_in_dim},
		{"CLIP vector (y)", "vec_in_dim", in->c_vec, c->vec_in_dim},
	};
	for (size_t i = 0; i < sizeof dim / sizeof dim[0]; i++)
		if (dim[i].got != dim[i].want)
			return err_set(err, "flux batch: %s: %lld values per row, the model's %s "
				       "is %lld", dim[i].what, (long long)dim[i].got, dim[i].field,
				       (long long)dim[i].want);
	if (step && c->out_channels != c->in_channels)
		return err_set(err, "flux: the loss needs out_channels (%lld) = in_channels (%lld)",
			       (long long)c->out_channels, (long long)c->in_channels);
	return 0;
}

/* Uploads n host floats into dst of the run's type (rounded to bf16 on the
 * host into lo, n elements that the step keeps: an upload may still read
 * them). */
static void put(fx_run *r, void *dst, const float *src, uint16_t *lo, int64_t n)
{
	if (r->t == BE_F32) {
		r->be->ops->copy(r->be, dst, src, sizeof(float) * (size_t)n, BACKEND_H2D);
		return;
	}
	for (int64_t j = 0; j < n; j++)
		lo[j] = bf16_from_f32(src[j]);
	r->be->ops->copy(r->be, dst, lo, sizeof(uint16_t) * (size_t)n, BACKEND_H2D);
}

/* The host's pieces of the step, from the batch: the inputs, the noisy
 * input, the timestep embedding and EmbedND's RoPE tables of each sample's
 * [txt_ids; img_ids], uploaded.  One host buffer, each piece its own part of
 * it, kept until the step ends (an upload may still read it).  bf16: the
 * latents, their noise, T5's states and CLIP's vector are bf16 values (the
 * encoders' outputs), the noisy input their float32 mix rounded, the
 * timesteps and ids rounded before their tables (fully_shard casts
 * FluxModel's inputs to bf16). */
static int upload_host(fx_run *r, const flux_batch *in, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int bf = r->t != BE_F32;
	int64_t b = r->b, hd = r->m->hd, nx = b * r->li * c->in_channels;
	int64_t ncs = b * r->L * hd, nt = b * T_DIM, ntxt = b * r->lt * c->context_in_dim;
	int64_t ny = b * c->vec_in_dim;
	int64_t nf = nx + nt + ncs + 3 * r->L + (bf ? 2 * nx : 0);
	int64_t nlo = bf ? 3 * nx + nt + ntxt + ny : 0;
	r->host = malloc(sizeof(float) * (size_t)nf + sizeof(uint16_t) * (size_t)nlo);
	if (r->host == NULL)
		return err_set(err, "flux: out of memory for the step's host tables");
	float *noisy = r->host, *temb = noisy + nx, *cs = temb + nt, *ids = cs + ncs;
	const float *x = in->x, *noise = in->noise;
	uint16_t *lo = (uint16_t *)(noisy + nf);
	if (bf && noise != NULL && r->target_f32) { /* the target's float32 terms */
		r->be->ops->copy(r->be, r->x32, x, sizeof(float) * (size_t)nx, BACKEND_H2D);
		r->be->ops->copy(r->be, r->noise32, noise, sizeof(float) * (size_t)nx, BACKEND_H2D);
	} else if (bf && noise != NULL) {
		float *xr = ids + 3 * r->L, *nr = xr + nx;
		for (int64_t j = 0; j < nx; j++) {
			xr[j] = bf16_round(x[j]);
			nr[j] = bf16_round(noise[j]);
		}
		x = xr;
		noise = nr;
	}
	if (noise != NULL)
		fx_noisy(noisy, x, noise, in->t, b, r->li, c->in_channels);
	else /* flux_predict's input as it is */
		memcpy(noisy, x, sizeof(float) * (size_t)nx);
	(bf ? fx_timestep_embedding_bf16 : fx_timestep_embedding)(temb, in->t, b, T_DIM);
	for (int64_t i = 0; i < b; i++) {
		memcpy(ids, in->txt_ids + i * r->lt * 3, sizeof(float) * 3 * (size_t)r->lt);
		memcpy(ids + r->lt * 3, in->img_ids + i * r->li * 3, sizeof(float) * 3 * (size_t)r->li);
		(bf ? fx_rope_table_bf16 : fx_rope_table)(cs + i * r->L * hd, ids, r->L, c->axes_dim,
							  c->theta);
	}
	if (noise != NULL) {
		put(r, r->x, x, lo, nx);
		put(r, r->noise, noise, lo + nx, nx);
	}
	put(r, r->noisy, noisy, lo + 2 * nx, nx);
	put(r, r->temb, temb, lo + 3 * nx, nt);
	put(r, r->txt_raw, in->txt, lo + 3 * nx + nt, ntxt);
	put(r, r->y, in->y, lo + 3 * nx + nt + ntxt, ny);
	r->be->ops->copy(r->be, r->cs, cs, sizeof(float) * (size_t)ncs, BACKEND_H2D);
	return 0;
}

/* bf16: the weights the ops read, cast from the float32 masters once per
 * step (FSDP's all-gather in param_dtype). */
static int refresh_low(fx_run *r)
{
	if (r->t != BE_F32 && r->m->wbuf != NULL)
		r->be->ops->convert(r->be, r->m->wlow, r->t, r->m->wbuf, BE_F32, r->m->total);
	return 0;
}

/* An unbound model's unit hooks (flux_model_set_units); no-ops on a bound
 * model. */
static int unit_gather(fx_run *r, int u, int grads, titan_err *err)
{
	const flux_unit_hooks *h = &r->m->units;
	return h->gather != NULL ? h->gather(h->ctx, u, grads, err) : 0;
}

static int unit_reduce(fx_run *r, int u, titan_err *err)
{
	const flux_unit_hooks *h = &r->m->units;
	return h->reduce != NULL ? h->reduce(h->ctx, u, err) : 0;
}

static void unit_release(fx_run *r, int u)
{
	const flux_unit_hooks *h = &r->m->units;
	if (h->release != NULL)
		h->release(h->ctx, u);
}

static int dbl_unit(const fx_run *r, int64_t k) { (void)r; return 1 + (int)k; }
static int sgl_unit(const fx_run *r, int64_t k) { return 1 + (int)(r->m->c.depth + k); }
static int final_unit(const fx_run *r) { return flux_unit_count(r->m) - 1; }

/* keep_final: a backward follows, which reads the final layer's weights at
 * once (0.3.0's reshard_after_forward=False on it). */
static int forward(fx_run *r, const flux_batch *in, int keep_final, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h;
	if (upload_host(r, in, err) < 0 || unit_gather(r, 0, 0, err) < 0)
		return -1;
	embed_fwd(r);
	unit_release(r, 0);
	for (int64_t k = 0; k < c->depth; k++) {
		if (unit_gather(r, dbl_unit(r, k), 0, err) < 0)
			return -1;
		dbl_fwd(r, k);
		unit_release(r, dbl_unit(r, k));
	}
	for (int64_t i = 0; i < b; i++) {
		cp(r, E(r, r->joint, i * r->L * h), E(r, r->txt, i * r->lt * h), r->lt * h);
		cp(r, E(r, r->joint, (i * r->L + r->lt) * h), E(r, r->img, i * r->li * h),
		   r->li * h);
	}
	for (int64_t k = 0; k < c->depth_single_blocks; k++) {
		if (unit_gather(r, sgl_unit(r, k), 0, err) < 0)
			return -1;
		sgl_fwd(r, k);
		unit_release(r, sgl_unit(r, k));
	}
	if (unit_gather(r, final_unit(r), 0, err) < 0)
		return -1;
	final_fwd(r);
	if (!keep_final)
		unit_release(r, final_unit(r));
	return 0;
}

/* Unit u's backward (bwd, block k) between its hooks. */
static int unit_bwd(fx_run *r, int u, void (*bwd)(fx_run *, int64_t), int64_t k, titan_err *err)
{
	if (unit_gather(r, u, 1, err) < 0)
		return -1;
	bwd(r, k);
	int rc = unit_reduce(r, u, err);
	unit_release(r, u);
	return rc;
}

static void final_bwd_k(fx_run *r, int64_t k) { (void)k; final_bwd(r); }
static void embed_bwd_k(fx_run *r, int64_t k) { (void)k; embed_bwd(r); }

static int backward(fx_run *r, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int64_t h = r->h;
	zero(r, r->dsvec, r->b * h, sizeof(float));
	if (unit_bwd(r, final_unit(r), final_bwd_k, 0, err) < 0)
		return -1;
	for (int64_t k = c->depth_single_blocks - 1; k >= 0; k--)
		if (unit_bwd(r, sgl_unit(r, k), sgl_bwd, k, err) < 0)
			return -1;
	for (int64_t i = 0; i < r->b; i++) {
		cp(r, E(r, r->dtxt, i * r->lt * h), E(r, r->djoint, i * r->L * h), r->lt * h);
		cp(r, E(r, r->dimg, i * r->li * h), E(r, r->djoint, (i * r->L + r->lt) * h),
		   r->li * h);
	}
	for (int64_t k = c->depth - 1; k >= 0; k--)
		if (unit_bwd(r, dbl_unit(r, k), dbl_bwd, k, err) < 0)
			return -1;
	return unit_bwd(r, 0, embed_bwd_k, 0, err);
}

static fx_run run_of(flux_model *m, const flux_batch *in)
{
	fx_run r = {.m = m, .be = m->be, .t = m->dt, .es = be_dtype_size(m->dt), .b = in->b,
		    .li = in->li, .lt = in->lt, .L = in->li + in->lt, .h = m->h, .f = m->f,
		    .target_f32 = in->target_f32 && m->dt != BE_F32};
	r.n[FLUX_IMG] = in->li;
	r.n[FLUX_TXT] = in->lt;
	r.off[FLUX_IMG] = in->lt;
	r.off[FLUX_TXT] = 0;
	return r;
}

/* The prediction (b * li * out_channels) into host float32 pred. */
static void download_pred(fx_run *r, float *pred)
{
	int64_t npred = r->b * r->li * r->m->c.out_channels;
	const void *src = r->pred;
	if (r->t != BE_F32) {
		r->be->ops->convert(r->be, r->acc32, BE_F32, r->pred, r->t, npred);
		src = r->acc32;
	}
	r->be->ops->copy(r->be, pred, src, sizeof(float) * (size_t)npred, BACKEND_D2H);
}

/* An unbound model runs through its unit hooks alone. */
static int check_bound(const flux_model *m, titan_err *err)
{
	if (m->wbuf == NULL && m->units.gather == NULL)
		return err_set(err, "flux: an unbound model without unit hooks (flux_model_set_units)");
	return 0;
}

int flux_step(flux_model *m, const flux_batch *in, int backward_on, float *loss, float *pred,
	      titan_err *err)
{
	if (check_batch(m, in, 1, err) < 0)
		return -1;
	fx_run r = run_of(m, in);
	r.attn = m->attn.fwd ? &m->attn : NULL;
	int rc = -1;
	if (check_bound(m, err) < 0 || grab_all(&r, backward_on, err) < 0 ||
	    refresh_low(&r) < 0 || forward(&r, in, backward_on, err) < 0)
		goto out;
	int64_t npred = r.b * r.li * m->c.out_channels, count = 0;
	int64_t div = in->global_numel > 0 ? in->global_numel : npred;
	double sum = 0;
	/* torch: the loss's division's backward hands mse_loss 1/numel in
	 * float32, which multiplies 2 (pred - target) */
	if (r.x32 != NULL) {
		/* mse_loss(pred.float(), target) with a float32 target: the loss and
		 * its gradient in float32, the gradient cast to pred's bf16 */
		float *p32 = r.acc32, *g32 = r.acc32 + npred;
		m->be->ops->convert(m->be, p32, BE_F32, r.pred, r.t, npred);
		m->be->ops->flow_mse(m->be, backward_on ? g32 : NULL, p32, r.x32, r.noise32, BE_F32,
				     npred, 1.0f / (float)div, &sum, &count);
		if (backward_on)
			m->be->ops->convert(m->be, r.dpred, r.t, g32, BE_F32, npred);
	} else {
		m->be->ops->flow_mse(m->be, backward_on ? r.dpred : NULL, r.pred, r.x, r.noise, r.t,
				     npred, 1.0f / (float)div, &sum, &count);
	}
	if (pred != NULL)
		download_pred(&r, pred);
	if (backward_on && backward(&r, err) < 0)
		goto out;
	rc = m->be->ops->sync(m->be, err) < 0 ? -1 : 0;
	*loss = (float)((float)sum / (float)div);
out:
	release(&r);
	return rc;
}

int flux_predict(flux_model *m, const flux_input *in, float *pred, titan_err *err)
{
	flux_batch bt = {.b = in->b, .li = in->li, .lt = in->lt, .c_img = in->c_img,
			 .c_txt = in->c_txt, .c_vec = in->c_vec, .x = in->img,
			 .img_ids = in->img_ids, .txt = in->txt, .txt_ids = in->txt_ids,
			 .t = in->t, .y = in->y};
	if (check_batch(m, &bt, 0, err) < 0)
		return -1;
	fx_run r = run_of(m, &bt);
	int rc = -1;
	if (check_bound(m, err) < 0 || grab_all(&r, 0, err) < 0 || refresh_low(&r) < 0 ||
	    forward(&r, &bt, 0, err) < 0)
		goto out;
	download_pred(&r, pred);
	rc = m->be->ops->sync(m->be, err) < 0 ? -1 : 0;
out:
	release(&r);
	return rc;
}
