/* fluxae.c: the autoencoder's forward (fluxae.h), an image at a time: each
 * block reads and writes the stream x in place through two temporaries. */
#include <math.h>
#include <stdlib.h>

#include "core/bf16.h"
#include "fluxae/ae_model.h"
#include "fluxae/ae_ops.h"

#define GROUPS 32
#define NORM_EPS 1e-6f

/* One encode or decode's scratch in backend memory. */
typedef struct ae_run {
	flux_ae *m;
	float *x, *t1, *t2;   /* (max_act) each: the stream and two temporaries */
	float *qkv;           /* (3, c_mid, n_mid): the mid attention's q, k, v */
	float *chunk;         /* (chunk_n) im2col columns or attention scores and sums */
	int64_t chunk_n;      /* the chunk budget, or one column or row where that is more */
	int64_t budget;       /* m->chunk_floats: what a step of im2col or scores fills */
} ae_run;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The largest activation (channels x height x width) an encode or decode of
 * an h x w image holds, and the widest conv input. */
static void sizes(const flux_ae_config *c, int64_t h, int64_t w, int64_t *max_act,
		  int64_t *max_c)
{
	int64_t L = c->n_levels, last = (h >> (L - 1)) * (w >> (L - 1));
	int64_t act = max64(max64(c->in_channels, c->out_ch) * h * w, 2 * c->z_channels * last);
	int64_t mc = max64(c->in_channels, c->z_channels);
	for (int64_t i = 0; i < L; i++) {
		int64_t ci = c->ch * c->ch_mult[i];
		int64_t prev = i > 0 ? c->ch * c->ch_mult[i - 1] : c->ch;      /* encoder's input */
		int64_t next = c->ch * c->ch_mult[i < L - 1 ? i + 1 : L - 1]; /* decoder's input */
		int64_t widest = max64(ci, max64(prev, next));
		act = max64(act, widest * (h >> i) * (w >> i));
		if (i > 0) /* the decoder's upsampled level i */
			act = max64(act, ci * (h >> (i - 1)) * (w >> (i - 1)));
		mc = max64(mc, widest);
	}
	*max_act = act;
	*max_c = mc;
}

static void run_free(ae_run *r)
{
	float *bufs[] = {r->x, r->t1, r->t2, r->qkv, r->chunk};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		if (bufs[i] != NULL)
			r->m->be->ops->free(r->m->be, bufs[i]);
}

static int run_alloc(ae_run *r, flux_ae *m, int64_t h, int64_t w, titan_err *err)
{
	const flux_ae_config *c = &m->c;
	int64_t act, mc, L = c->n_levels;
	int64_t c_mid = c->ch * c->ch_mult[L - 1], n_mid = (h >> (L - 1)) * (w >> (L - 1));
	sizes(c, h, w, &act, &mc);
	/* a chunk holds at least one pixel's im2col column or one row of scores */
	int64_t chunk = max64((int64_t)m->chunk_floats, max64(9 * mc, n_mid + 1));
	*r = (ae_run){.m = m, .chunk_n = chunk, .budget = (int64_t)m->chunk_floats};
	float **bufs[] = {&r->x, &r->t1, &r->t2, &r->qkv, &r->chunk};
	const int64_t n[] = {act, act, act, 3 * c_mid * n_mid, r->chunk_n};
	for (size_t i = 0; i < sizeof n / sizeof *n; i++)
		if ((*bufs[i] = backend_alloc_floats(m->be, (size_t)n[i], err)) == NULL) {
			run_free(r);
			return err_prefix(err, "fluxae: %lld x %lld images", (long long)h,
					  (long long)w);
		}
	return 0;
}

/* out (cout, ho, wo) = conv of in (cin, h, w): 3x3 padding 1, or Downsample's
 * (down: the right and bottom padded, stride 2), or 1x1. */
static void conv(ae_run *r, const ae_conv *cv, float *out, const float *in, int64_t h, int64_t w,
		 int down)
{
	backend *be = r->m->be;
	int64_t ho = down ? h / 2 : h, wo = down ? w / 2 : w, hw = ho * wo;
	ae_bias_fill(out, cv->b, cv->cout, hw);
	if (cv->k == 1) {
		be->ops->matmul(be, 0, 0, cv->cout, hw, cv->cin, 1.0f, cv->w, cv->cin, in, hw,
				BE_F32, 1.0f, out, hw, BE_F32);
	} else {
		int64_t k = cv->cin * 9, step = max64(1, r->budget / k < hw ? r->budget / k : hw);
		for (int64_t p0 = 0; p0 < hw; p0 += step) {
			int64_t np = hw - p0 < step ? hw - p0 : step;
			/* out[:, p0 .. p0+np) += w (cout, k) @ col (k, np) */
			ae_im2col(r->chunk, in, cv->cin, h, w, down ? 2 : 1, down ? 0 : 1, ho, wo,
				  p0, np);
			be->ops->matmul(be, 0, 0, cv->cout, np, k, 1.0f, cv->w, k, r->chunk, np,
					BE_F32, 1.0f, out + p0, hw, BE_F32);
		}
	}
	ae_round(r->m->bf16, out, cv->cout * hw);
}

/* out (c, hw) = GroupNorm of in, rounded as stored; then swish when act. */
static void norm(ae_run *r, const ae_norm *n, float *out, const float *in, int64_t hw, int act)
{
	ae_group_norm(out, in, n->w, n->b, n->c, hw, GROUPS, NORM_EPS);
	ae_round(r->m->bf16, out, n->c * hw);
	if (act)
		ae_swish(out, n->c * hw, r->m->bf16);
}

/* x (n) += t (n), the sum rounded as stored. */
static void residual(ae_run *r, const float *t, int64_t n)
{
	backend *be = r->m->be;
	be->ops->add(be, r->x, BE_F32, r->x, BE_F32, t, BE_F32, n);
	ae_round(r->m->bf16, r->x, n);
}

/* x (cin, h, w) -> (cout, h, w). */
static void resnet(ae_run *r, const ae_resnet *b, int64_t h, int64_t w)
{
	int64_t hw = h * w;
	norm(r, &b->norm1, r->t1, r->x, hw, 1);
	conv(r, &b->conv1, r->t2, r->t1, h, w, 0);
	norm(r, &b->norm2, r->t1, r->t2, hw, 1);
	conv(r, &b->conv2, r->t2, r->t1, h, w, 0);
	if (b->nin.w != NULL) { /* x = nin_shortcut(x) + h */
		conv(r, &b->nin, r->t1, r->x, h, w, 0);
		r->m->be->ops->add(r->m->be, r->x, BE_F32, r->t1, BE_F32, r->t2, BE_F32,
				   b->conv2.cout * hw);
		ae_round(r->m->bf16, r->x, b->conv2.cout * hw);
	} else {
		residual(r, r->t2, b->conv2.cout * hw);
	}
}

/* x (c, h, w) += proj_out(attention of norm(x)), one head over the h*w
 * positions, computed a chunk of query positions at a time. */
static void attn(ae_run *r, const ae_attn *a, int64_t h, int64_t w)
{
	backend *be = r->m->be;
	int64_t c = a->norm.c, n = h * w;
	float *q = r->qkv, *k = q + c * n, *v = k + c * n; /* (c, n) each */
	norm(r, &a->norm, r->t1, r->x, n, 0);
	conv(r, &a->q, q, r->t1, h, w, 0);
	conv(r, &a->k, k, r->t1, h, w, 0);
	conv(r, &a->v, v, r->t1, h, w, 0);
	int64_t step = max64(1, r->budget / (n + 1) < n ? r->budget / (n + 1) : n);
	float scale = (float)(1.0 / sqrt((double)c));
	for (int64_t q0 = 0; q0 < n; q0 += step) {
		int64_t nq = n - q0 < step ? n - q0 : step;
		float *s = r->chunk, *sum = r->chunk + nq * n; /* (nq, n), (nq) */
		be->ops->matmul(be, 1, 0, nq, n, c, scale, q + q0, n, k, n, BE_F32, 0.0f, s, n,
				BE_F32);
		ae_softmax_exp(s, sum, nq, n, r->m->bf16);
		/* out[:, q0 .. q0+nq) (c, nq) = v (c, n) @ s^T */
		be->ops->matmul(be, 0, 1, c, nq, n, 1.0f, v, n, s, n, BE_F32, 0.0f, r->t2 + q0, n,
				BE_F32);
		ae_div_cols(r->t2 + q0, sum, c, n, nq);
	}
	ae_round(r->m->bf16, r->t2, c * n);
	conv(r, &a->proj_out, r->t1, r->t2, h, w, 0);
	residual(r, r->t1, c * n);
}

static void mid(ae_run *r, const ae_mid *md, int64_t h, int64_t w)
{
	resnet(r, &md->block_1, h, w);
	attn(r, &md->attn_1, h, w);
	resnet(r, &md->block_2, h, w);
}

static void swap(float **a, float **b)
{
	float *t = *a;
	*a = *b;
	*b = t;
}

/* moments (2z, h/f, w/f) host = encoder(pixels (in_channels, h, w) host). */
static void encoder(ae_run *r, const float *pixels, int64_t h, int64_t w, float *moments)
{
	flux_ae *m = r->m;
	backend *be = m->be;
	const ae_half *e = &m->enc;
	int64_t L = m->c.n_levels;
	be->ops->copy(be, r->t1, pixels, (size_t)(m->c.in_channels * h * w) * sizeof(float),
		      BACKEND_H2D);
	ae_round(m->bf16, r->t1, m->c.in_channels * h * w); /* preprocess_data's cast */
	conv(r, &e->conv_in, r->x, r->t1, h, w, 0);
	for (int64_t i = 0; i < L; i++) {
		for (int64_t j = 0; j < e->per_level; j++)
			resnet(r, &e->block[i * e->per_level + j], h, w);
		if (i < L - 1) {
			conv(r, &e->resample[i], r->t1, r->x, h, w, 1);
			swap(&r->x, &r->t1);
			h /= 2;
			w /= 2;
		}
	}
	mid(r, &e->mid, h, w);
	norm(r, &e->norm_out, r->t1, r->x, h * w, 1);
	conv(r, &e->conv_out, r->t2, r->t1, h, w, 0);
	be->ops->copy(be, moments, r->t2, (size_t)(e->conv_out.cout * h * w) * sizeof(float),
		      BACKEND_D2H);
}

/* pixels (out_ch, hl*f, wl*f) host = decoder(z (z_channels, hl, wl) host / scale + shift). */
static void decoder(ae_run *r, const float *z, int64_t h, int64_t w, float *pixels)
{
	flux_ae *m = r->m;
	backend *be = m->be;
	const ae_half *d = &m->dec;
	int64_t nz = m->c.z_channels * h * w;
	be->ops->copy(be, r->t1, z, (size_t)nz * sizeof(float), BACKEND_H2D);
	ae_unscale(r->t1, nz, m->c.scale_factor, m->c.shift_factor, m->bf16);
	conv(r, &d->conv_in, r->x, r->t1, h, w, 0);
	mid(r, &d->mid, h, w);
	for (int64_t i = m->c.n_levels - 1; i >= 0; i--) {
		for (int64_t j = 0; j < d->per_level; j++)
			resnet(r, &d->block[i * d->per_level + j], h, w);
		if (i > 0) {
			ae_upsample2x(r->t1, r->x, d->resample[i].cin, h, w);
			h *= 2;
			w *= 2;
			conv(r, &d->resample[i], r->x, r->t1, h, w, 0);
		}
	}
	norm(r, &d->norm_out, r->t1, r->x, h * w, 1);
	conv(r, &d->conv_out, r->t2, r->t1, h, w, 0);
	be->ops->copy(be, pixels, r->t2, (size_t)(m->c.out_ch * h * w) * sizeof(float),
		      BACKEND_D2H);
}

int flux_ae_encode(flux_ae *m, const float *pixels, int64_t b, int64_t h, int64_t w,
		   float *moments, titan_err *err)
{
	int64_t f = (int64_t)1 << (m->c.n_levels - 1);
	if (b < 1)
		return err_set(err, "fluxae: batch size %lld, expected at least 1", (long long)b);
	if (h < f || w < f || h % f != 0 || w % f != 0)
		return err_set(err, "fluxae: images of %lld x %lld (height x width): the sides must "
			       "be positive multiples of %lld (2^(len(ch_mult)-1))", (long long)h,
			       (long long)w, (long long)f);
	ae_run r;
	if (run_alloc(&r, m, h, w, err) < 0)
		return -1;
	int64_t in = m->c.in_channels * h * w, out = 2 * m->c.z_channels * (h / f) * (w / f);
	for (int64_t i = 0; i < b; i++)
		encoder(&r, pixels + i * in, h, w, moments + i * out);
	int rc = m->be->ops->sync(m->be, err);
	run_free(&r);
	return rc;
}

int flux_ae_decode(flux_ae *m, const float *z, int64_t b, int64_t hl, int64_t wl, float *pixels,
		   titan_err *err)
{
	int64_t f = (int64_t)1 << (m->c.n_levels - 1);
	if (b < 1)
		return err_set(err, "fluxae: batch size %lld, expected at least 1", (long long)b);
	if (hl < 1 || wl < 1)
		return err_set(err, "fluxae: latents of %lld x %lld (height x width): the sides "
			       "must be positive", (long long)hl, (long long)wl);
	ae_run r;
	if (run_alloc(&r, m, hl * f, wl * f, err) < 0)
		return -1;
	int64_t in = m->c.z_channels * hl * wl, out = m->c.out_ch * hl * f * wl * f;
	for (int64_t i = 0; i < b; i++)
		decoder(&r, z + i * in, hl, wl, pixels + i * out);
	int rc = m->be->ops->sync(m->be, err);
	run_free(&r);
	return rc;
}

void flux_ae_sample(const flux_ae_config *c, int bf16, const float *moments, const float *eps,
		    int64_t b, int64_t hl, int64_t wl, float *z)
{
	int64_t n = c->z_channels * hl * wl;
	float scale = c->scale_factor, shift = bf16 ? bf16_round(c->shift_factor) : c->shift_factor;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < b * n; i++) {
		int64_t bi = i / n, j = i % n;
		float mean = moments[bi * 2 * n + j], logvar = moments[bi * 2 * n + n + j];
		if (!bf16) {
			float std = expf(0.5f * logvar);
			z[i] = scale * ((mean + std * eps[i]) - shift);
		} else { /* each op of DiagonalGaussian and encode stores a bf16 tensor */
			float std = bf16_round(expf(bf16_round(0.5f * logvar)));
			float s = bf16_round(mean + bf16_round(std * bf16_round(eps[i])));
			z[i] = bf16_round(scale * bf16_round(s - shift));
		}
	}
}
