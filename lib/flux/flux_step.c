/* flux_step.c: one training step of the Flux transformer (flux.h): the
 * forward keeps every activation its backward reads (no recomputation), the
 * backward runs the blocks in reverse and accumulates each parameter's
 * gradient.  Every op on the activations is a backend op, so the step runs
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
 * weight's column blocks: no split or concatenation is copied. */
#include <stdlib.h>
#include <string.h>

#include "flux/flux_ops.h"
#include "flux/flux_priv.h"

#define LN_EPS 1e-6f
#define QK_EPS 1e-5f /* torchtitan's RMSNorm.Config default */
#define T_DIM 256    /* timestep_embedding's dim */

typedef struct attn_act {
	float *qraw, *kraw;       /* the qkv linear's q, k before their RMSNorm */
	float *q, *k, *v, *o;     /* attention's operands and output (b * L, h) */
	float *rq, *rk;           /* RMSNorm's rstd (b * L * heads) */
	float *lse;               /* (b, heads, L) */
} attn_act;

typedef struct dstream {          /* a double block's stream: (b * n, .) each */
	float *mod;               /* (b, 6h): shift1 scale1 gate1 shift2 scale2 gate2 */
	float *x_in, *st1, *a;    /* block input, LN stats (b * n, 2), qkv's input */
	float *proj, *x1;         /* attention's projection; the stream after it */
	float *st2, *mi, *hid, *gel, *mo; /* MLP input, hidden (F), GELU, output */
} dstream;

typedef struct dblk {
	dstream s[2];             /* FLUX_IMG, FLUX_TXT */
	attn_act at;
} dblk;

typedef struct sblk {
	float *mod;               /* (b, 3h): shift scale gate */
	float *x_in, *st, *a;     /* (b * L, h) */
	float *mlp, *gel;         /* (b * L, F) */
	float *out;               /* linear2's output */
	attn_act at;
} sblk;

typedef struct fx_run {
	flux_model *m;
	backend *be;
	int64_t b, li, lt, L, h, f;
	int64_t n[2];             /* rows per sample of each stream */
	int64_t off[2];           /* each stream's first row in the joint sequence */
	float **mem;              /* every buffer, for freeing */
	int nmem, capmem;
	/* inputs in backend memory */
	float *x, *noise, *noisy, *txt_raw, *y, *temb;
	float *host;              /* upload_host's buffer */
	float *cs;                /* (b, L, hd/2, 2) RoPE tables */
	/* embedders */
	float *th, *ths, *yh, *yhs, *vec, *svec;
	float *img, *txt;         /* the streams (b * li, h), (b * lt, h) */
	float *joint;             /* single blocks' stream (b * L, h) */
	dblk *dbl;
	sblk *sgl;
	float *fmod, *xf, *fst, *fa, *pred; /* final layer */
	/* backward scratch */
	float *dimg, *dtxt, *djoint, *dsvec, *dvec, *dh1, *dh2;
	float *dmod;              /* (2, b, 6h): each stream's modulation gradient */
	float *th1, *th2, *tf1, *tf2, *dq, *dk, *dv, *dout, *dpred, *dxf;
} fx_run;

static int grab(fx_run *r, float **p, int64_t n, titan_err *err)
{
	if (r->nmem == r->capmem) {
		int cap = r->capmem ? 2 * r->capmem : 64;
		float **mem = realloc(r->mem, sizeof *mem * (size_t)cap);
		if (mem == NULL)
			return err_set(err, "flux: out of memory for the step's buffers");
		r->mem = mem;
		r->capmem = cap;
	}
	*p = backend_alloc_floats(r->be, (size_t)(n > 0 ? n : 1), err);
	if (*p == NULL)
		return err_prefix(err, "flux: the step's activations");
	r->mem[r->nmem++] = *p;
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
	       grab(r, &a->o, n, err) || grab(r, &a->rq, rows, err) ||
	       grab(r, &a->rk, rows, err) || grab(r, &a->lse, rows, err);
}

static int grab_dstream(fx_run *r, dstream *s, int64_t n, titan_err *err)
{
	int64_t rows = r->b * n, h = r->h, f = r->f;
	return grab(r, &s->mod, r->b * 6 * h, err) || grab(r, &s->x_in, rows * h, err) ||
	       grab(r, &s->st1, rows * 2, err) || grab(r, &s->a, rows * h, err) ||
	       grab(r, &s->proj, rows * h, err) || grab(r, &s->x1, rows * h, err) ||
	       grab(r, &s->st2, rows * 2, err) || grab(r, &s->mi, rows * h, err) ||
	       grab(r, &s->hid, rows * f, err) || grab(r, &s->gel, rows * f, err) ||
	       grab(r, &s->mo, rows * h, err);
}

static int grab_sblk(fx_run *r, sblk *s, titan_err *err)
{
	int64_t rows = r->b * r->L, h = r->h, f = r->f;
	return grab(r, &s->mod, r->b * 3 * h, err) || grab(r, &s->x_in, rows * h, err) ||
	       grab(r, &s->st, rows * 2, err) || grab(r, &s->a, rows * h, err) ||
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
	    grab(r, &r->temb, b * T_DIM, err) || grab(r, &r->cs, b * L * r->m->hd, err) ||
	    grab(r, &r->th, b * h, err) || grab(r, &r->ths, b * h, err) ||
	    grab(r, &r->yh, b * h, err) || grab(r, &r->yhs, b * h, err) ||
	    grab(r, &r->vec, b * h, err) || grab(r, &r->svec, b * h, err) ||
	    grab(r, &r->img, b * li * h, err) || grab(r, &r->txt, b * lt * h, err) ||
	    grab(r, &r->joint, b * L * h, err) || grab(r, &r->fmod, b * 2 * h, err) ||
	    grab(r, &r->xf, b * li * h, err) || grab(r, &r->fst, b * li * 2, err) ||
	    grab(r, &r->fa, b * li * h, err) || grab(r, &r->pred, b * li * c->out_channels, err))
		return -1;
	/* without a backward no block's activations outlive it: the blocks
	 * share the first one's buffers */
	for (int64_t k = 0; k < c->depth; k++)
		if (!backward && k > 0)
			r->dbl[k] = r->dbl[0];
		else if (grab_dstream(r, &r->dbl[k].s[FLUX_IMG], li, err) ||
			 grab_dstream(r, &r->dbl[k].s[FLUX_TXT], lt, err) ||
			 grab_attn(r, &r->dbl[k].at, err))
			return -1;
	for (int64_t k = 0; k < c->depth_single_blocks; k++)
		if (!backward && k > 0)
			r->sgl[k] = r->sgl[0];
		else if (grab_sblk(r, &r->sgl[k], err))
			return -1;
	if (!backward)
		return 0;
	int64_t n = b * L * h;
	return grab(r, &r->dimg, b * li * h, err) || grab(r, &r->dtxt, b * lt * h, err) ||
	       grab(r, &r->djoint, n, err) || grab(r, &r->dsvec, b * h, err) ||
	       grab(r, &r->dmod, 2 * b * 6 * h, err) || grab(r, &r->dvec, b * h, err) ||
	       grab(r, &r->dh1, b * h, err) || grab(r, &r->dh2, b * h, err) ||
	       grab(r, &r->th1, n, err) || grab(r, &r->th2, n, err) ||
	       grab(r, &r->tf1, b * L * f, err) || grab(r, &r->tf2, b * L * f, err) ||
	       grab(r, &r->dq, n, err) || grab(r, &r->dk, n, err) || grab(r, &r->dv, n, err) ||
	       grab(r, &r->dout, n, err) || grab(r, &r->dpred, b * li * c->out_channels, err) ||
	       grab(r, &r->dxf, b * li * h, err);
}

/* ---- the backend's ops, float32 ---- */

/* C (m, n) = beta C + op(A) op(B), row-major with leading dimensions. */
static void mm(fx_run *r, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
	       int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	r->be->ops->matmul(r->be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, BE_F32, beta, c, ldc,
			   BE_F32);
}

/* y (rows, out) = x (rows, in) w^T + bias; w's rows ldw apart (a row block of
 * a wider weight), bias NULL: none. */
static void lin(fx_run *r, float *y, const float *x, int64_t rows, int64_t in, int64_t out,
		const float *w, int64_t ldw, const float *bias)
{
	mm(r, 0, 1, rows, out, in, x, in, w, ldw, 0.0f, y, out);
	if (bias != NULL)
		r->be->ops->bias_add(r->be, y, BE_F32, bias, BE_F32, rows, out, 1, NULL);
}

/* lin's backward: gw (out, in; rows ldw apart) += dy^T x, gb += dy's column
 * sums (when not NULL), dx (rows, in) = beta dx + dy w (when not NULL). */
static void lin_bwd(fx_run *r, float *dx, float beta, float *gw, float *gb, const float *dy,
		    const float *x, int64_t rows, int64_t in, int64_t out, const float *w,
		    int64_t ldw)
{
	mm(r, 1, 0, out, in, rows, dy, out, x, in, 1.0f, gw, ldw);
	if (gb != NULL)
		r->be->ops->bias_grad(r->be, gb, BE_F32, dy, BE_F32, rows, out, 1, NULL);
	if (dx != NULL)
		mm(r, 0, 0, rows, in, out, dy, out, w, ldw, beta, dx, in);
}

static const flux_param *P(const fx_run *r, int i) { return &r->m->p[i]; }

static be_attn attn_shape(const fx_run *r)
{
	const flux_model *m = r->m;
	return (be_attn){.b = r->b, .tq = r->L, .tk = r->L, .h = m->heads, .hkv = m->heads,
			 .hd = m->hd, .hdv = m->hd, .causal = 0, .qkv = BE_F32, .out = BE_F32,
			 .dout = BE_F32, .grad = BE_F32};
}

/* RoPE of the joint q and k (b, L, heads, hd), each sample by its own table. */
static void rope_qk(fx_run *r, float *q, float *k, int inverse)
{
	const flux_model *m = r->m;
	int64_t per = r->L * r->h;
	for (int64_t i = 0; i < r->b; i++) {
		const float *cs = r->cs + i * r->L * m->hd;
		r->be->ops->rope(r->be, q + i * per, BE_F32, cs, 1, r->L, m->heads, m->hd,
				 BE_ROPE_INTERLEAVED, inverse);
		r->be->ops->rope(r->be, k + i * per, BE_F32, cs, 1, r->L, m->heads, m->hd,
				 BE_ROPE_INTERLEAVED, inverse);
	}
}

/* The QK RMSNorm of rows [row0, row0 + n) of each sample's joint sequence,
 * weights qn, kn; then (all rows done) RoPE and attention run on the whole. */
static void qk_norm(fx_run *r, attn_act *a, int64_t row0, int64_t n, const float *qn,
		    const float *kn)
{
	const flux_model *m = r->m;
	for (int64_t i = 0; i < r->b; i++) {
		int64_t e = (i * r->L + row0) * r->h, s = (i * r->L + row0) * m->heads;
		r->be->ops->rmsnorm_fwd(r->be, a->q + e, BE_F32, a->rq + s, a->qraw + e, BE_F32,
					qn, BE_F32, n * m->heads, m->hd, QK_EPS);
		r->be->ops->rmsnorm_fwd(r->be, a->k + e, BE_F32, a->rk + s, a->kraw + e, BE_F32,
					kn, BE_F32, n * m->heads, m->hd, QK_EPS);
	}
}

static void qk_norm_bwd(fx_run *r, const attn_act *a, int64_t row0, int64_t n, float *dq,
			float *dk, const float *qn, const float *kn, float *gqn, float *gkn)
{
	const flux_model *m = r->m;
	for (int64_t i = 0; i < r->b; i++) {
		int64_t e = (i * r->L + row0) * r->h, s = (i * r->L + row0) * m->heads;
		/* the gradients before the norms into th1 (q) and th2 (k), same rows */
		r->be->ops->rmsnorm_bwd(r->be, r->th1 + e, BE_F32, gqn, BE_F32, dq + e, BE_F32,
					a->qraw + e, BE_F32, qn, BE_F32, a->rq + s, n * m->heads,
					m->hd);
		r->be->ops->rmsnorm_bwd(r->be, r->th2 + e, BE_F32, gkn, BE_F32, dk + e, BE_F32,
					a->kraw + e, BE_F32, kn, BE_F32, a->rk + s, n * m->heads,
					m->hd);
	}
}

static float *G(const fx_run *r, int i) { return r->m->p[i].g; }

static void cp(fx_run *r, float *dst, const float *src, int64_t n)
{
	r->be->ops->copy(r->be, dst, src, sizeof(float) * (size_t)n, BACKEND_D2D);
}

static void zero(fx_run *r, float *p, int64_t n)
{
	r->be->ops->zero(r->be, p, sizeof(float) * (size_t)n);
}

/* The modulation, gated residual, GELU and SiLU ops, float32. */
static void ln_mod(fx_run *r, float *y, float *stats, const float *x, const float *shift,
		   const float *scale, int64_t ld, int64_t b, int64_t n, int64_t d, float eps)
{
	r->be->ops->ln_mod_fwd(r->be, y, stats, x, shift, scale, BE_F32, ld, b, n, d, eps);
}

static void ln_mod_bwd(fx_run *r, float *dx, float *dshift, float *dscale, const float *dy,
		       const float *x, const float *stats, const float *scale, int64_t ld,
		       int64_t b, int64_t n, int64_t d)
{
	r->be->ops->ln_mod_bwd(r->be, dx, dshift, dscale, dy, x, stats, scale, BE_F32, ld, b, n,
			       d);
}

static void gate_add(fx_run *r, float *x, const float *gate, const float *y, int64_t ld,
		     int64_t b, int64_t n, int64_t d)
{
	r->be->ops->gate_add(r->be, x, gate, y, BE_F32, ld, b, n, d);
}

static void gate_add_bwd(fx_run *r, float *dgate, float *dy, const float *dx, const float *gate,
			 const float *y, int64_t ld, int64_t b, int64_t n, int64_t d)
{
	r->be->ops->gate_add_bwd(r->be, dgate, dy, dx, gate, y, BE_F32, ld, b, n, d);
}

static void gelu(fx_run *r, float *y, const float *x, int64_t n)
{
	r->be->ops->gelu_tanh_fwd(r->be, y, x, BE_F32, n);
}

static void gelu_bwd(fx_run *r, float *dx, const float *dy, const float *x, int64_t n)
{
	r->be->ops->gelu_tanh_bwd(r->be, dx, dy, x, BE_F32, n);
}

static void silu(fx_run *r, float *y, const float *x, int64_t n)
{
	r->be->ops->silu_fwd(r->be, y, x, BE_F32, n);
}

static void silu_bwd(fx_run *r, float *dx, const float *dy, const float *x, int64_t n)
{
	r->be->ops->silu_bwd(r->be, dx, dy, x, BE_F32, n);
}

/* ---- double blocks ---- */

static void dbl_fwd(fx_run *r, int64_t k)
{
	dblk *d = &r->dbl[k];
	int64_t b = r->b, h = r->h, f = r->f, L = r->L;
	float *stream[2] = {r->img, r->txt};
	for (int s = 0; s < 2; s++) {
		dstream *ds = &d->s[s];
		int p = flux_pd(r->m, k, s, 0);
		int64_t n = r->n[s], rows = b * n;
		lin(r, ds->mod, r->svec, b, h, 6 * h, P(r, p + D_MOD_W)->w, h, P(r, p + D_MOD_B)->w);
		cp(r, ds->x_in, stream[s], rows * h);
		ln_mod(r, ds->a, ds->st1, ds->x_in, ds->mod, ds->mod + h, 6 * h, b, n, h, LN_EPS);
		const float *w = P(r, p + D_QKV_W)->w, *bias = P(r, p + D_QKV_B)->w;
		float *dst[3] = {d->at.qraw, d->at.kraw, d->at.v};
		for (int64_t i = 0; i < b; i++)
			for (int c = 0; c < 3; c++)
				lin(r, dst[c] + (i * L + r->off[s]) * h, ds->a + i * n * h, n, h, h,
				    w + c * h * h, h, bias + c * h);
		qk_norm(r, &d->at, r->off[s], n, P(r, p + D_QN)->w, P(r, p + D_KN)->w);
	}
	rope_qk(r, d->at.q, d->at.k, 0);
	be_attn a = attn_shape(r);
	r->be->ops->attention_fwd(r->be, d->at.o, d->at.lse, d->at.q, d->at.k, d->at.v, &a);
	for (int s = 0; s < 2; s++) {
		dstream *ds = &d->s[s];
		int p = flux_pd(r->m, k, s, 0);
		int64_t n = r->n[s], rows = b * n;
		for (int64_t i = 0; i < b; i++)
			lin(r, ds->proj + i * n * h, d->at.o + (i * L + r->off[s]) * h, n, h, h,
			    P(r, p + D_PROJ_W)->w, h, P(r, p + D_PROJ_B)->w);
		gate_add(r, stream[s], ds->mod + 2 * h, ds->proj, 6 * h, b, n, h);
		cp(r, ds->x1, stream[s], rows * h);
		ln_mod(r, ds->mi, ds->st2, ds->x1, ds->mod + 3 * h, ds->mod + 4 * h, 6 * h, b, n, h,
			  LN_EPS);
		lin(r, ds->hid, ds->mi, rows, h, f, P(r, p + D_MLP0_W)->w, h, P(r, p + D_MLP0_B)->w);
		gelu(r, ds->gel, ds->hid, rows * f);
		lin(r, ds->mo, ds->gel, rows, f, h, P(r, p + D_MLP2_W)->w, f, P(r, p + D_MLP2_B)->w);
		gate_add(r, stream[s], ds->mod + 5 * h, ds->mo, 6 * h, b, n, h);
	}
}

/* A stream's MLP and attention projection backward: the residual gradient dS
 * becomes the one of the stream before the MLP, dmod gets gate2, shift2,
 * scale2 and gate1's, and the projection's input gradient goes to r->dout. */
static void dbl_stream_tail_bwd(fx_run *r, int64_t k, int s, float *dS, float *dmod)
{
	dblk *d = &r->dbl[k];
	dstream *ds = &d->s[s];
	int p = flux_pd(r->m, k, s, 0);
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, n = r->n[s], rows = b * n;
	gate_add_bwd(r, dmod + 5 * h, r->th1, dS, ds->mod + 5 * h, ds->mo, 6 * h, b, n, h);
	lin_bwd(r, r->tf1, 0.0f, G(r, p + D_MLP2_W), G(r, p + D_MLP2_B), r->th1, ds->gel, rows, f,
		h, P(r, p + D_MLP2_W)->w, f);
	gelu_bwd(r, r->tf2, r->tf1, ds->hid, rows * f);
	lin_bwd(r, r->th2, 0.0f, G(r, p + D_MLP0_W), G(r, p + D_MLP0_B), r->tf2, ds->mi, rows, h,
		f, P(r, p + D_MLP0_W)->w, h);
	ln_mod_bwd(r, dS, dmod + 3 * h, dmod + 4 * h, r->th2, ds->x1, ds->st2, ds->mod + 4 * h,
		      6 * h, b, n, h);
	gate_add_bwd(r, dmod + 2 * h, r->th1, dS, ds->mod + 2 * h, ds->proj, 6 * h, b, n, h);
	for (int64_t i = 0; i < b; i++) {
		int64_t e = (i * L + r->off[s]) * h;
		lin_bwd(r, r->dout + e, 0.0f, G(r, p + D_PROJ_W), G(r, p + D_PROJ_B),
			r->th1 + i * n * h, d->at.o + e, n, h, h, P(r, p + D_PROJ_W)->w, h);
	}
}

/* The part before the attention: QK norms, qkv, LN1 and the modulation. */
static void dbl_stream_head_bwd(fx_run *r, int64_t k, int s, float *dS, float *dmod)
{
	dblk *d = &r->dbl[k];
	dstream *ds = &d->s[s];
	int p = flux_pd(r->m, k, s, 0);
	int64_t b = r->b, h = r->h, L = r->L, n = r->n[s];
	qk_norm_bwd(r, &d->at, r->off[s], n, r->dq, r->dk, P(r, p + D_QN)->w, P(r, p + D_KN)->w,
		    G(r, p + D_QN), G(r, p + D_KN));
	const float *w = P(r, p + D_QKV_W)->w, *src[3] = {r->th1, r->th2, r->dv};
	float *gw = G(r, p + D_QKV_W), *gb = G(r, p + D_QKV_B), *da = r->tf1;
	for (int64_t i = 0; i < b; i++)
		for (int c = 0; c < 3; c++)
			lin_bwd(r, da + i * n * h, c ? 1.0f : 0.0f, gw + c * h * h, gb + c * h,
				src[c] + (i * L + r->off[s]) * h, ds->a + i * n * h, n, h, h,
				w + c * h * h, h);
	ln_mod_bwd(r, dS, dmod, dmod + h, da, ds->x_in, ds->st1, ds->mod + h, 6 * h, b, n, h);
	lin_bwd(r, r->dsvec, 1.0f, G(r, p + D_MOD_W), G(r, p + D_MOD_B), dmod, r->svec, b, h,
		6 * h, P(r, p + D_MOD_W)->w, h);
}

static void dbl_bwd(fx_run *r, int64_t k)
{
	dblk *d = &r->dbl[k];
	float *dS[2] = {r->dimg, r->dtxt};
	float *dmod[2] = {r->dmod, r->dmod + r->b * 6 * r->h};
	zero(r, r->dmod, 2 * r->b * 6 * r->h);
	for (int s = 0; s < 2; s++)
		dbl_stream_tail_bwd(r, k, s, dS[s], dmod[s]);
	be_attn a = attn_shape(r);
	r->be->ops->attention_bwd(r->be, r->dq, r->dk, r->dv, r->dout, d->at.q, d->at.k, d->at.v,
				  d->at.o, d->at.lse, &a);
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
	lin(r, sb->mod, r->svec, b, h, 3 * h, P(r, p + S_MOD_W)->w, h, P(r, p + S_MOD_B)->w);
	cp(r, sb->x_in, r->joint, rows * h);
	ln_mod(r, sb->a, sb->st, sb->x_in, sb->mod, sb->mod + h, 3 * h, b, L, h, LN_EPS);
	const float *w1 = P(r, p + S_L1_W)->w, *b1 = P(r, p + S_L1_B)->w;
	lin(r, sb->at.qraw, sb->a, rows, h, h, w1, h, b1);
	lin(r, sb->at.kraw, sb->a, rows, h, h, w1 + h * h, h, b1 + h);
	lin(r, sb->at.v, sb->a, rows, h, h, w1 + 2 * h * h, h, b1 + 2 * h);
	lin(r, sb->mlp, sb->a, rows, h, f, w1 + 3 * h * h, h, b1 + 3 * h);
	qk_norm(r, &sb->at, 0, L, P(r, p + S_QN)->w, P(r, p + S_KN)->w);
	rope_qk(r, sb->at.q, sb->at.k, 0);
	be_attn a = attn_shape(r);
	r->be->ops->attention_fwd(r->be, sb->at.o, sb->at.lse, sb->at.q, sb->at.k, sb->at.v, &a);
	gelu(r, sb->gel, sb->mlp, rows * f);
	/* linear2 over [attention | gelu]: the weight's two column blocks */
	const float *w2 = P(r, p + S_L2_W)->w;
	mm(r, 0, 1, rows, h, h, sb->at.o, h, w2, h + f, 0.0f, sb->out, h);
	mm(r, 0, 1, rows, h, f, sb->gel, f, w2 + h, h + f, 1.0f, sb->out, h);
	r->be->ops->bias_add(r->be, sb->out, BE_F32, P(r, p + S_L2_B)->w, BE_F32, rows, h, 1,
			     NULL);
	gate_add(r, r->joint, sb->mod + 2 * h, sb->out, 3 * h, b, L, h);
}

static void sgl_bwd(fx_run *r, int64_t k)
{
	sblk *sb = &r->sgl[k];
	int p = flux_ps(r->m, k, 0);
	int64_t b = r->b, h = r->h, f = r->f, L = r->L, rows = b * L;
	float *dmod = r->dmod, *dout = r->th1;
	zero(r, dmod, b * 3 * h);
	gate_add_bwd(r, dmod + 2 * h, dout, r->djoint, sb->mod + 2 * h, sb->out, 3 * h, b, L, h);
	const float *w2 = P(r, p + S_L2_W)->w;
	float *g2 = G(r, p + S_L2_W);
	mm(r, 1, 0, h, h, rows, dout, h, sb->at.o, h, 1.0f, g2, h + f);
	mm(r, 1, 0, h, f, rows, dout, h, sb->gel, f, 1.0f, g2 + h, h + f);
	r->be->ops->bias_grad(r->be, G(r, p + S_L2_B), BE_F32, dout, BE_F32, rows, h, 1, NULL);
	mm(r, 0, 0, rows, h, h, dout, h, w2, h + f, 0.0f, r->dout, h);
	mm(r, 0, 0, rows, f, h, dout, h, w2 + h, h + f, 0.0f, r->tf1, f);
	gelu_bwd(r, r->tf2, r->tf1, sb->mlp, rows * f);
	be_attn a = attn_shape(r);
	r->be->ops->attention_bwd(r->be, r->dq, r->dk, r->dv, r->dout, sb->at.q, sb->at.k,
				  sb->at.v, sb->at.o, sb->at.lse, &a);
	rope_qk(r, r->dq, r->dk, 1);
	qk_norm_bwd(r, &sb->at, 0, L, r->dq, r->dk, P(r, p + S_QN)->w, P(r, p + S_KN)->w,
		    G(r, p + S_QN), G(r, p + S_KN));
	/* linear1's four row blocks: q k v from th1 th2 dv, the MLP's from tf2 */
	const float *w1 = P(r, p + S_L1_W)->w;
	float *g1 = G(r, p + S_L1_W), *gb1 = G(r, p + S_L1_B), *da = r->dout;
	const float *src[3] = {r->th1, r->th2, r->dv};
	for (int c = 0; c < 3; c++)
		lin_bwd(r, da, c ? 1.0f : 0.0f, g1 + c * h * h, gb1 + c * h, src[c], sb->a, rows, h,
			h, w1 + c * h * h, h);
	lin_bwd(r, da, 1.0f, g1 + 3 * h * h, gb1 + 3 * h, r->tf2, sb->a, rows, h, f,
		w1 + 3 * h * h, h);
	ln_mod_bwd(r, r->djoint, dmod, dmod + h, da, sb->x_in, sb->st, sb->mod + h, 3 * h, b, L,
		      h);
	lin_bwd(r, r->dsvec, 1.0f, G(r, p + S_MOD_W), G(r, p + S_MOD_B), dmod, r->svec, b, h,
		3 * h, P(r, p + S_MOD_W)->w, h);
}

/* ---- embedders and the final layer ---- */

static void embed_fwd(fx_run *r)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h, cin = c->in_channels;
	lin(r, r->img, r->noisy, b * r->li, cin, h, P(r, P_IMG_IN_W)->w, cin, P(r, P_IMG_IN_B)->w);
	lin(r, r->th, r->temb, b, T_DIM, h, P(r, P_TIME_IN_W)->w, T_DIM, P(r, P_TIME_IN_B)->w);
	silu(r, r->ths, r->th, b * h);
	lin(r, r->vec, r->ths, b, h, h, P(r, P_TIME_OUT_W)->w, h, P(r, P_TIME_OUT_B)->w);
	lin(r, r->yh, r->y, b, c->vec_in_dim, h, P(r, P_VEC_IN_W)->w, c->vec_in_dim,
	    P(r, P_VEC_IN_B)->w);
	silu(r, r->yhs, r->yh, b * h);
	lin(r, r->svec, r->yhs, b, h, h, P(r, P_VEC_OUT_W)->w, h, P(r, P_VEC_OUT_B)->w);
	r->be->ops->add(r->be, r->vec, BE_F32, r->vec, BE_F32, r->svec, BE_F32, b * h);
	silu(r, r->svec, r->vec, b * h);
	lin(r, r->txt, r->txt_raw, b * r->lt, c->context_in_dim, h, P(r, P_TXT_IN_W)->w,
	    c->context_in_dim, P(r, P_TXT_IN_B)->w);
}

static void embed_bwd(fx_run *r)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h, cin = c->in_channels;
	lin_bwd(r, NULL, 0.0f, G(r, P_IMG_IN_W), G(r, P_IMG_IN_B), r->dimg, r->noisy, b * r->li,
		cin, h, P(r, P_IMG_IN_W)->w, cin);
	lin_bwd(r, NULL, 0.0f, G(r, P_TXT_IN_W), G(r, P_TXT_IN_B), r->dtxt, r->txt_raw, b * r->lt,
		c->context_in_dim, h, P(r, P_TXT_IN_W)->w, c->context_in_dim);
	silu_bwd(r, r->dvec, r->dsvec, r->vec, b * h);
	lin_bwd(r, r->dh1, 0.0f, G(r, P_TIME_OUT_W), G(r, P_TIME_OUT_B), r->dvec, r->ths, b, h, h,
		P(r, P_TIME_OUT_W)->w, h);
	silu_bwd(r, r->dh2, r->dh1, r->th, b * h);
	lin_bwd(r, NULL, 0.0f, G(r, P_TIME_IN_W), G(r, P_TIME_IN_B), r->dh2, r->temb, b, T_DIM, h,
		P(r, P_TIME_IN_W)->w, T_DIM);
	lin_bwd(r, r->dh1, 0.0f, G(r, P_VEC_OUT_W), G(r, P_VEC_OUT_B), r->dvec, r->yhs, b, h, h,
		P(r, P_VEC_OUT_W)->w, h);
	silu_bwd(r, r->dh2, r->dh1, r->yh, b * h);
	lin_bwd(r, NULL, 0.0f, G(r, P_VEC_IN_W), G(r, P_VEC_IN_B), r->dh2, r->y, b,
		c->vec_in_dim, h, P(r, P_VEC_IN_W)->w, c->vec_in_dim);
}

static void final_fwd(fx_run *r)
{
	int p = flux_pf(r->m, 0);
	int64_t b = r->b, h = r->h, li = r->li, out = r->m->c.out_channels;
	for (int64_t i = 0; i < b; i++)
		cp(r, r->xf + i * li * h, r->joint + (i * r->L + r->lt) * h, li * h);
	lin(r, r->fmod, r->svec, b, h, 2 * h, P(r, p + F_ADA_W)->w, h, P(r, p + F_ADA_B)->w);
	ln_mod(r, r->fa, r->fst, r->xf, r->fmod, r->fmod + h, 2 * h, b, li, h, LN_EPS);
	lin(r, r->pred, r->fa, b * li, h, out, P(r, p + F_LIN_W)->w, h, P(r, p + F_LIN_B)->w);
}

static void final_bwd(fx_run *r)
{
	int p = flux_pf(r->m, 0);
	int64_t b = r->b, h = r->h, li = r->li, out = r->m->c.out_channels;
	lin_bwd(r, r->dxf, 0.0f, G(r, p + F_LIN_W), G(r, p + F_LIN_B), r->dpred, r->fa, b * li, h,
		out, P(r, p + F_LIN_W)->w, h);
	zero(r, r->dmod, b * 2 * h);
	zero(r, r->th1, b * li * h);
	ln_mod_bwd(r, r->th1, r->dmod, r->dmod + h, r->dxf, r->xf, r->fst, r->fmod + h, 2 * h, b,
		      li, h);
	zero(r, r->djoint, b * r->L * h);
	for (int64_t i = 0; i < b; i++)
		cp(r, r->djoint + (i * r->L + r->lt) * h, r->th1 + i * li * h, li * h);
	lin_bwd(r, r->dsvec, 1.0f, G(r, p + F_ADA_W), G(r, p + F_ADA_B), r->dmod, r->svec, b, h,
		2 * h, P(r, p + F_ADA_W)->w, h);
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

static void h2d(fx_run *r, float *dst, const float *src, int64_t n)
{
	r->be->ops->copy(r->be, dst, src, sizeof(float) * (size_t)n, BACKEND_H2D);
}

/* The host's pieces of the step, from the batch: the noisy input, the
 * timestep embedding and EmbedND's RoPE tables of each sample's [txt_ids;
 * img_ids], uploaded.  One host buffer, each piece its own part of it, kept
 * until the step ends (an upload may still read it). */
static int upload_host(fx_run *r, const flux_batch *in, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, hd = r->m->hd, nx = b * r->li * c->in_channels;
	int64_t ncs = b * r->L * hd, nt = b * T_DIM;
	r->host = malloc(sizeof(float) * (size_t)(nx + nt + ncs + 3 * r->L));
	if (r->host == NULL)
		return err_set(err, "flux: out of memory for the step's host tables");
	float *noisy = r->host, *temb = noisy + nx, *cs = temb + nt, *ids = cs + ncs;
	if (in->noise != NULL)
		fx_noisy(noisy, in->x, in->noise, in->t, b, r->li, c->in_channels);
	else
		memcpy(noisy, in->x, sizeof(float) * (size_t)nx);
	fx_timestep_embedding(temb, in->t, b, T_DIM);
	for (int64_t i = 0; i < b; i++) {
		memcpy(ids, in->txt_ids + i * r->lt * 3, sizeof(float) * 3 * (size_t)r->lt);
		memcpy(ids + r->lt * 3, in->img_ids + i * r->li * 3, sizeof(float) * 3 * (size_t)r->li);
		fx_rope_table(cs + i * r->L * hd, ids, r->L, c->axes_dim, c->theta);
	}
	h2d(r, r->noisy, noisy, nx);
	h2d(r, r->temb, temb, nt);
	h2d(r, r->cs, cs, ncs);
	return 0;
}

static int forward(fx_run *r, const flux_batch *in, titan_err *err)
{
	const flux_config *c = &r->m->c;
	int64_t b = r->b, h = r->h;
	if (in->noise != NULL) {
		h2d(r, r->x, in->x, b * r->li * c->in_channels);
		h2d(r, r->noise, in->noise, b * r->li * c->in_channels);
	}
	h2d(r, r->txt_raw, in->txt, b * r->lt * c->context_in_dim);
	h2d(r, r->y, in->y, b * c->vec_in_dim);
	if (upload_host(r, in, err) < 0)
		return -1;
	embed_fwd(r);
	for (int64_t k = 0; k < c->depth; k++)
		dbl_fwd(r, k);
	for (int64_t i = 0; i < b; i++) {
		cp(r, r->joint + i * r->L * h, r->txt + i * r->lt * h, r->lt * h);
		cp(r, r->joint + (i * r->L + r->lt) * h, r->img + i * r->li * h, r->li * h);
	}
	for (int64_t k = 0; k < c->depth_single_blocks; k++)
		sgl_fwd(r, k);
	final_fwd(r);
	return 0;
}

static void backward(fx_run *r)
{
	const flux_config *c = &r->m->c;
	int64_t h = r->h;
	zero(r, r->dsvec, r->b * h);
	final_bwd(r);
	for (int64_t k = c->depth_single_blocks - 1; k >= 0; k--)
		sgl_bwd(r, k);
	for (int64_t i = 0; i < r->b; i++) {
		cp(r, r->dtxt + i * r->lt * h, r->djoint + i * r->L * h, r->lt * h);
		cp(r, r->dimg + i * r->li * h, r->djoint + (i * r->L + r->lt) * h, r->li * h);
	}
	for (int64_t k = c->depth - 1; k >= 0; k--)
		dbl_bwd(r, k);
	embed_bwd(r);
}

static fx_run run_of(flux_model *m, const flux_batch *in)
{
	fx_run r = {.m = m, .be = m->be, .b = in->b, .li = in->li, .lt = in->lt,
		    .L = in->li + in->lt, .h = m->h, .f = m->f};
	r.n[FLUX_IMG] = in->li;
	r.n[FLUX_TXT] = in->lt;
	r.off[FLUX_IMG] = in->lt;
	r.off[FLUX_TXT] = 0;
	return r;
}

int flux_step(flux_model *m, const flux_batch *in, int backward_on, float *loss, float *pred,
	      titan_err *err)
{
	if (check_batch(m, in, 1, err) < 0)
		return -1;
	fx_run r = run_of(m, in);
	int rc = -1;
	if (grab_all(&r, backward_on, err) < 0 || forward(&r, in, err) < 0)
		goto out;
	int64_t npred = r.b * r.li * m->c.out_channels, count = 0;
	int64_t div = in->global_numel > 0 ? in->global_numel : npred;
	double sum = 0;
	/* torch: the loss's division's backward hands mse_loss 1/numel in
	 * float32, which multiplies 2 (pred - target) */
	m->be->ops->flow_mse(m->be, backward_on ? r.dpred : NULL, r.pred, r.x, r.noise, BE_F32,
			     npred, 1.0f / (float)div, &sum, &count);
	if (pred != NULL)
		m->be->ops->copy(m->be, pred, r.pred, sizeof(float) * (size_t)npred, BACKEND_D2H);
	if (backward_on)
		backward(&r);
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
	if (grab_all(&r, 0, err) < 0 || forward(&r, &bt, err) < 0)
		goto out;
	m->be->ops->copy(m->be, pred, r.pred,
			 sizeof(float) * (size_t)(r.b * r.li * m->c.out_channels), BACKEND_D2H);
	rc = m->be->ops->sync(m->be, err) < 0 ? -1 : 0;
out:
	release(&r);
	return rc;
}
