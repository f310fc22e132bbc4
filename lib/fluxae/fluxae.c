/* fluxae.c: the autoencoder's forward (fluxae.h) over backend ops, an image
 * at a time: each block reads and writes the stream x in place through two
 * temporaries.  In bf16 every op rounds where it stores, as the bf16 model
 * stores each tensor. */
#include <math.h>
#include <stdlib.h>

#include "core/bf16.h"
#include "fluxae/ae_model.h"

#define GROUPS 32
#define NORM_EPS 1e-6f
#define ALIGN 256 /* bytes: where each piece of the attention's chunk starts */

/* One encode or decode's scratch in backend memory, of the model's type but
 * for the attention's float32 pieces. */
typedef struct ae_run {
	flux_ae *m;
	backend *be;
	be_dtype dt;
	size_t esz;           /* be_dtype_size(dt) */
	void *x, *t1, *t2;    /* (max_act) each: the stream and two temporaries */
	void *qkv;            /* (3, c_mid, n_mid): the mid attention's q, k, v */
	void *chunk;          /* im2col columns, or the attention's pieces */
	int64_t budget;       /* m->chunk_bytes: what a step of im2col or scores fills */
} ae_run;

/* How conv reads its input: (cin, h, w); Downsample's (the right and bottom
 * padded, stride 2); or, for a 1x1 conv, (h w, cin) (the attention's output,
 * rows of query positions). */
enum { CONV_SAME, CONV_DOWN, CONV_IN_T };

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static void *at(const ae_run *r, const void *p, int64_t i)
{
	return (char *)p + (size_t)i * r->esz;
}

/* The bytes of one query row's attention pieces over n keys of c channels:
 * scores and the product (float32), its sum, its exps (dt). */
static int64_t attn_row_bytes(int64_t n, int64_t c, size_t esz)
{
	return 4 * (n + c + 1) + (int64_t)esz * n;
}

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
	void *bufs[] = {r->x, r->t1, r->t2, r->qkv, r->chunk};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
		if (bufs[i] != NULL)
			r->be->ops->free(r->be, bufs[i]);
}

static int run_alloc(ae_run *r, flux_ae *m, int64_t h, int64_t w, titan_err *err)
{
	const flux_ae_config *c = &m->c;
	int64_t act, mc, L = c->n_levels;
	int64_t c_mid = c->ch * c->ch_mult[L - 1], n_mid = (h >> (L - 1)) * (w >> (L - 1));
	size_t esz = be_dtype_size(m->dt);
	sizes(c, h, w, &act, &mc);
	/* a chunk holds at least one pixel's im2col column or one query row's
	 * attention pieces, and the alignment of those */
	int64_t chunk = max64((int64_t)m->chunk_bytes,
			      max64(9 * mc * (int64_t)esz, attn_row_bytes(n_mid, c_mid, esz))) +
			4 * ALIGN;
	*r = (ae_run){.m = m, .be = m->be, .dt = m->dt, .esz = esz,
		      .budget = (int64_t)m->chunk_bytes};
	void **bufs[] = {&r->x, &r->t1, &r->t2, &r->qkv, &r->chunk};
	const int64_t n[] = {act * (int64_t)esz, act * (int64_t)esz, act * (int64_t)esz,
			     3 * c_mid * n_mid * (int64_t)esz, chunk};
	for (size_t i = 0; i < sizeof n / sizeof *n; i++)
		if ((*bufs[i] = m->be->ops->alloc(m->be, (size_t)n[i], err)) == NULL) {
			run_free(r);
			return err_prefix(err, "fluxae: %lld x %lld images", (long long)h,
					  (long long)w);
		}
	return 0;
}

/* out (cout, ho, wo) = conv of in (mode above): the bias written, then the
 * product added by the matmul (3x3: over im2col columns a chunk of output
 * pixels at a time). */
static void conv(ae_run *r, const ae_conv *cv, void *out, const void *in, int64_t h, int64_t w,
		 int mode)
{
	backend *be = r->be;
	int down = mode == CONV_DOWN;
	int64_t ho = down ? h / 2 : h, wo = down ? w / 2 : w, hw = ho * wo;
	be->ops->conv_bias(be, out, cv->b, r->dt, 1, cv->cout, hw);
	if (cv->k == 1) {
		int t = mode == CONV_IN_T; /* in (hw, cin): its transpose */
		be->ops->matmul(be, 0, t, cv->cout, hw, cv->cin, 1.0f, cv->w, cv->cin, in,
				t ? cv->cin : hw, r->dt, 1.0f, out, hw, r->dt);
		return;
	}
	/* Conv2d(padding=1), or Downsample's pad (0, 1, 0, 1) before its stride 2 */
	static const int64_t same[4] = {1, 1, 1, 1}, pad_down[4] = {0, 1, 0, 1};
	int64_t k = cv->cin * 9;
	int64_t step = max64(1, min64(r->budget / (k * (int64_t)r->esz), hw));
	for (int64_t p0 = 0; p0 < hw; p0 += step) {
		int64_t np = min64(hw - p0, step);
		/* out[:, p0 .. p0+np) += w (cout, k) @ col (k, np) */
		be->ops->im2col(be, r->chunk, in, r->dt, 1, cv->cin, h, w, 3, down ? 2 : 1,
				down ? pad_down : same, p0, np);
		be->ops->matmul(be, 0, 0, cv->cout, np, k, 1.0f, cv->w, k, r->chunk, np, r->dt, 1.0f,
				at(r, out, p0), hw, r->dt);
	}
}

/* out (c, hw) = GroupNorm of in; then swish when act. */
static void norm(ae_run *r, const ae_norm *n, void *out, const void *in, int64_t hw, int act)
{
	backend *be = r->be;
	be->ops->groupnorm_fwd(be, out, r->dt, in, r->dt, n->w, n->b, r->dt, 1, n->c, hw, GROUPS,
			       NORM_EPS);
	if (act)
		be->ops->swish(be, out, r->dt, 1.0f, n->c * hw);
}

/* x (cin, h, w) -> (cout, h, w). */
static void resnet(ae_run *r, const ae_resnet *b, int64_t h, int64_t w)
{
	backend *be = r->be;
	int64_t hw = h * w, n = b->conv2.cout * hw;
	norm(r, &b->norm1, r->t1, r->x, hw, 1);
	conv(r, &b->conv1, r->t2, r->t1, h, w, CONV_SAME);
	norm(r, &b->norm2, r->t1, r->t2, hw, 1);
	conv(r, &b->conv2, r->t2, r->t1, h, w, CONV_SAME);
	if (b->nin.w != NULL) { /* x = nin_shortcut(x) + h */
		conv(r, &b->nin, r->t1, r->x, h, w, CONV_SAME);
		be->ops->add(be, r->x, r->dt, r->t1, r->dt, r->t2, r->dt, n);
	} else {
		be->ops->add(be, r->x, r->dt, r->x, r->dt, r->t2, r->dt, n);
	}
}

/* x (c, h, w) += proj_out(attention of norm(x)), one head over the h*w
 * positions, a chunk of query positions at a time: the scores and the
 * product in float32 (torch's attention computes in float32 whatever the
 * storage), the exps in the model's type; the output (h w, c) in t2. */
static void attn(ae_run *r, const ae_attn *a, int64_t h, int64_t w)
{
	backend *be = r->be;
	int64_t c = a->norm.c, n = h * w;
	void *q = r->qkv, *k = at(r, q, c * n), *v = at(r, k, c * n); /* (c, n) each */
	norm(r, &a->norm, r->t1, r->x, n, 0);
	conv(r, &a->q, q, r->t1, h, w, CONV_SAME);
	conv(r, &a->k, k, r->t1, h, w, CONV_SAME);
	conv(r, &a->v, v, r->t1, h, w, CONV_SAME);
	int64_t step = max64(1, min64(r->budget / attn_row_bytes(n, c, r->esz), n));
	float *s = r->chunk;                                              /* (step, n) */
	float *o = (float *)((char *)s + align_up(4 * step * n));        /* (step, c) */
	float *sum = (float *)((char *)o + align_up(4 * step * c));      /* (step) */
	void *e = (char *)sum + align_up(4 * step);                      /* (step, n) of dt */
	float scale = (float)(1.0 / sqrt((double)c));
	for (int64_t q0 = 0; q0 < n; q0 += step) {
		int64_t nq = min64(n - q0, step);
		/* s (nq, n) = scale q[:, q0 .. q0+nq)^T k */
		be->ops->matmul(be, 1, 0, nq, n, c, scale, at(r, q, q0), n, k, n, r->dt, 0.0f, s, n,
				BE_F32);
		be->ops->softmax_exp(be, e, r->dt, sum, s, nq, n);
		/* o (nq, c) = e (nq, n) @ v^T, then / sum: rows q0.. of the output */
		be->ops->matmul(be, 0, 1, nq, c, n, 1.0f, e, n, v, n, r->dt, 0.0f, o, c, BE_F32);
		be->ops->div_rows(be, at(r, r->t2, q0 * c), r->dt, o, sum, nq, c);
	}
	conv(r, &a->proj_out, r->t1, r->t2, h, w, CONV_IN_T);
	be->ops->add(be, r->x, r->dt, r->x, r->dt, r->t1, r->dt, c * n);
}

static void mid(ae_run *r, const ae_mid *md, int64_t h, int64_t w)
{
	resnet(r, &md->block_1, h, w);
	attn(r, &md->attn_1, h, w);
	resnet(r, &md->block_2, h, w);
}

static void swap(void **a, void **b)
{
	void *t = *a;
	*a = *b;
	*b = t;
}

/* moments (2z, h/f, w/f) host = encoder(pixels (in_channels, h, w) host);
 * the pixels rounded as they upload (preprocess_data's cast). */
static int encoder(ae_run *r, const float *pixels, int64_t h, int64_t w, float *moments,
		   titan_err *err)
{
	flux_ae *m = r->m;
	const ae_half *e = &m->enc;
	int64_t L = m->c.n_levels;
	if (backend_upload(r->be, r->dt, r->t1, pixels, m->c.in_channels * h * w, err) < 0)
		return -1;
	conv(r, &e->conv_in, r->x, r->t1, h, w, CONV_SAME);
	for (int64_t i = 0; i < L; i++) {
		for (int64_t j = 0; j < e->per_level; j++)
			resnet(r, &e->block[i * e->per_level + j], h, w);
		if (i < L - 1) {
			conv(r, &e->resample[i], r->t1, r->x, h, w, CONV_DOWN);
			swap(&r->x, &r->t1);
			h /= 2;
			w /= 2;
		}
	}
	mid(r, &e->mid, h, w);
	norm(r, &e->norm_out, r->t1, r->x, h * w, 1);
	conv(r, &e->conv_out, r->t2, r->t1, h, w, CONV_SAME);
	return backend_download(r->be, r->dt, moments, r->t2, e->conv_out.cout * h * w, err);
}

/* z (n) = z / scale + shift on the host: AutoEncoder.decode's input; with
 * bf16 z is rounded first (the bf16 model's input), then the quotient and
 * the sum (the shift rounded to bfloat16 as torch adds a Python scalar to a
 * bf16 tensor). */
static void unscale(float *z, int64_t n, float scale, float shift, int bf16)
{
	float sh = bf16 ? bf16_round(shift) : shift;
	for (int64_t i = 0; i < n; i++)
		z[i] = bf16 ? bf16_round(bf16_round(bf16_round(z[i]) / scale) + sh)
			    : z[i] / scale + shift;
}

/* pixels (out_ch, hl*f, wl*f) host = decoder(z (z_channels, hl, wl) host / scale + shift). */
static int decoder(ae_run *r, const float *z, int64_t h, int64_t w, float *pixels,
		   titan_err *err)
{
	flux_ae *m = r->m;
	const ae_half *d = &m->dec;
	int64_t nz = m->c.z_channels * h * w;
	float *zs = malloc((size_t)nz * sizeof *zs);
	if (zs == NULL)
		return err_set(err, "fluxae: out of memory");
	for (int64_t i = 0; i < nz; i++)
		zs[i] = z[i];
	unscale(zs, nz, m->c.scale_factor, m->c.shift_factor, r->dt == BE_BF16);
	int rc = backend_upload(r->be, r->dt, r->t1, zs, nz, err);
	free(zs);
	if (rc < 0)
		return -1;
	conv(r, &d->conv_in, r->x, r->t1, h, w, CONV_SAME);
	mid(r, &d->mid, h, w);
	for (int64_t i = m->c.n_levels - 1; i >= 0; i--) {
		for (int64_t j = 0; j < d->per_level; j++)
			resnet(r, &d->block[i * d->per_level + j], h, w);
		if (i > 0) {
			r->be->ops->upsample2x(r->be, r->t1, r->x, r->dt, 1, d->resample[i].cin, h, w);
			h *= 2;
			w *= 2;
			conv(r, &d->resample[i], r->x, r->t1, h, w, CONV_SAME);
		}
	}
	norm(r, &d->norm_out, r->t1, r->x, h * w, 1);
	conv(r, &d->conv_out, r->t2, r->t1, h, w, CONV_SAME);
	return backend_download(r->be, r->dt, pixels, r->t2, m->c.out_ch * h * w, err);
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
	int rc = 0;
	for (int64_t i = 0; i < b && rc == 0; i++)
		rc = encoder(&r, pixels + i * in, h, w, moments + i * out, err);
	if (rc == 0)
		rc = m->be->ops->sync(m->be, err);
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
	int rc = 0;
	for (int64_t i = 0; i < b && rc == 0; i++)
		rc = decoder(&r, z + i * in, hl, wl, pixels + i * out, err);
	if (rc == 0)
		rc = m->be->ops->sync(m->be, err);
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
