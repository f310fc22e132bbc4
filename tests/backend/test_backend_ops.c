/* Every CPU op against independent references: the float64 backward of each op
 * against central finite differences of its float64 forward (loss = sum(out *
 * r) with fixed random r), and each float32 op against its float64 twin.
 * Error metric: max|a - b| / max|b| over the tensor (rel_err).  Seeds fixed
 * and printed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "../support/att_ref.h"
#include "../support/testutil.h"

#define FD_H 1e-6
#define FD_TOL 1e-6  /* central differences in float64: error ~ h^2 + eps/h */
#define F32_TOL 2e-6 /* float32 op vs float64 op */


static double *rnd(size_t n, double scale)
{
	double *x = malloc(n * sizeof(double));
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * test_urand();
	return x;
}

static float *to_f32(const double *x, size_t n)
{
	float *y = malloc(n * sizeof(float));
	assert_non_null(y);
	for (size_t i = 0; i < n; i++)
		y[i] = (float)x[i];
	return y;
}

/* Float32 copy of a float64 array that went through float32 (so both precisions
 * start from the same numbers). */
static void round_f32(double *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)x[i];
}

static double rel_err_fd(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return den > 0 ? num / den : num;
}

static double rel_err_dd(const double *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs(a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return den > 0 ? num / den : num;
}

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* The loss of one op's forward at the current inputs. */
typedef double (*loss_fn)(void *ctx);

/* Central differences of loss with respect to x[i] for every stride-th i,
 * compared with the analytic gradient g; returns the relative error.  In
 * short runs (test_short: the sanitizers' build, where each of these forwards
 * costs 10x) at most about 128 elements, the stride kept odd so that the
 * elements still fall on every position of a row. */
static double fd_check(loss_fn f, void *ctx, double *x, const double *g, size_t n,
		       size_t stride)
{
	while (test_short() && n / stride > 128)
		stride = 2 * stride + 1;
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i += stride) {
		double x0 = x[i];
		x[i] = x0 + FD_H;
		double lp = f(ctx);
		x[i] = x0 - FD_H;
		double lm = f(ctx);
		x[i] = x0;
		double fd = (lp - lm) / (2 * FD_H);
		num = fmax(num, fabs(fd - g[i]));
		den = fmax(den, fabs(g[i]));
	}
	return den > 0 ? num / den : num;
}

/* ---- rmsnorm ---- */
typedef struct { double *x, *w, *r, *y, *rstd; int64_t n, d; } rms_ctx;

static double rms_loss(void *p)
{
	rms_ctx *c = p;
	cpu_rmsnorm_fwd_f64(c->y, c->rstd, c->x, c->w, c->n, c->d, 1e-5);
	return dot(c->y, c->r, (size_t)(c->n * c->d));
}

static void rmsnorm_backward_matches_finite_differences_and_f32_matches_f64(void **s)
{
	(void)s;
	test_seed(11);
	int64_t n = 5, d = 70;
	size_t nd = (size_t)(n * d);
	rms_ctx c = {rnd(nd, 2), rnd((size_t)d, 1), rnd(nd, 1), rnd(nd, 0), rnd((size_t)n, 0), n, d};
	round_f32(c.x, nd);
	round_f32(c.w, (size_t)d);
	round_f32(c.r, nd);
	double *dx = rnd(nd, 0), *dw = calloc((size_t)d, sizeof(double));
	rms_loss(&c);
	cpu_rmsnorm_bwd_f64(dx, dw, c.r, c.x, c.w, c.rstd, n, d);
	double ex = fd_check(rms_loss, &c, c.x, dx, nd, 1);
	double ew = fd_check(rms_loss, &c, c.w, dw, (size_t)d, 1);
	print_message("rmsnorm fd: dx %.2e dw %.2e\n", ex, ew);
	assert_true(ex < FD_TOL && ew < FD_TOL);

	rms_loss(&c);
	float *x = to_f32(c.x, nd), *w = to_f32(c.w, (size_t)d), *r = to_f32(c.r, nd);
	float *y = malloc(nd * 4), *rs = malloc((size_t)n * 4), *fdx = malloc(nd * 4);
	float *fdw = calloc((size_t)d, 4);
	cpu_rmsnorm_fwd_f32(y, rs, x, w, n, d, 1e-5f);
	cpu_rmsnorm_bwd_f32(fdx, fdw, r, x, w, rs, n, d);
	double e1 = rel_err_fd(y, c.y, nd), e2 = rel_err_fd(fdx, dx, nd),
	       e3 = rel_err_fd(fdw, dw, (size_t)d);
	print_message("rmsnorm f32: y %.2e dx %.2e dw %.2e\n", e1, e2, e3);
	assert_true(e1 < F32_TOL && e2 < F32_TOL && e3 < F32_TOL);
	/* dw accumulates: a second backward doubles it. */
	cpu_rmsnorm_bwd_f32(fdx, fdw, r, x, w, rs, n, d);
	for (int64_t j = 0; j < d; j++)
		assert_true(fabs(fdw[j] - 2 * dw[j]) <= 1e-5 * fabs(dw[j]) + 1e-6);
	free(c.x), free(c.w), free(c.r), free(c.y), free(c.rstd), free(dx), free(dw);
	free(x), free(w), free(r), free(y), free(rs), free(fdx), free(fdw);
}

/* ---- rope ---- */
typedef struct { double *x, *cs, *r, *y; int64_t b, t, h, hd; } rope_ctx;

static double rope_loss(void *p)
{
	rope_ctx *c = p;
	size_t n = (size_t)(c->b * c->t * c->h * c->hd);
	memcpy(c->y, c->x, n * sizeof(double));
	cpu_rope_f64(c->y, c->cs, c->b, c->t, c->h, c->hd, 0);
	return dot(c->y, c->r, n);
}

static void rope_inverse_is_its_gradient_and_matches_complex_rotation(void **s)
{
	(void)s;
	test_seed(12);
	int64_t b = 2, t = 9, h = 3, hd = 8;
	size_t n = (size_t)(b * t * h * hd);
	double *cs = malloc((size_t)(t * hd) * sizeof(double));
	cpu_rope_table_f64(cs, t, hd, 0, 500000.0, 8.0);
	rope_ctx c = {rnd(n, 1), cs, rnd(n, 1), rnd(n, 0), b, t, h, hd};
	double *g = malloc(n * sizeof(double));
	memcpy(g, c.r, n * sizeof(double));
	cpu_rope_f64(g, cs, b, t, h, hd, 1);
	double e = fd_check(rope_loss, &c, c.x, g, n, 1);
	print_message("rope fd %.2e\n", e);
	assert_true(e < FD_TOL);
	/* Position 3, pair 1 of head 0 of batch 0 by hand: (x0 + i x1) e^{i a}. */
	rope_loss(&c);
	double a = atan2(cs[(3 * hd / 2 + 1) * 2 + 1], cs[(3 * hd / 2 + 1) * 2]);
	const double *x = c.x + (3 * h) * hd + 2;
	double re = x[0] * cos(a) - x[1] * sin(a), im = x[0] * sin(a) + x[1] * cos(a);
	const double *y = c.y + (3 * h) * hd + 2;
	assert_true(fabs(y[0] - re) < 1e-12 && fabs(y[1] - im) < 1e-12);
	free(c.x), free(cs), free(c.r), free(c.y), free(g);
}

/* HF's rotate_half: q cos + rotate_half(q) sin with rotate_half(x) =
 * cat(-x2, x1) and cos, sin of cat(freqs, freqs), written out; the inverse is
 * the backward. */
static void rope_half_matches_hf_rotate_half_and_inverts(void **s)
{
	(void)s;
	test_seed(26);
	int64_t b = 1, t = 5, h = 2, hd = 8, half = hd / 2;
	size_t n = (size_t)(b * t * h * hd);
	double *cs = malloc((size_t)(t * hd) * sizeof(double));
	cpu_rope_table_f64(cs, t, hd, 0, 1000000.0, 0);
	double *x = rnd(n, 1), *y = malloc(n * sizeof(double));
	memcpy(y, x, n * sizeof(double));
	cpu_rope_half_f64(y, cs, b, t, h, hd, 0);
	for (int64_t ti = 0; ti < t; ti++)
		for (int64_t hi = 0; hi < h; hi++)
			for (int64_t i = 0; i < hd; i++) {
				const double *xr = x + (ti * h + hi) * hd;
				double f = 1.0 / pow(1000000.0, (double)(2 * (i % half)) / (double)hd);
				double c = cos((double)ti * f), sn = sin((double)ti * f);
				double rot = i < half ? -xr[i + half] : xr[i - half];
				assert_true(fabs(y[(ti * h + hi) * hd + i] - (xr[i] * c + rot * sn)) < 1e-12);
			}
	cpu_rope_half_f64(y, cs, b, t, h, hd, 1);
	assert_true(rel_err_dd(y, x, n) < 1e-15);
	free(cs), free(x), free(y);
}

static void rope_table_applies_llama31_scaling_bands(void **s)
{
	(void)s;
	/* hd 128, theta 500000: pair 0 (f = 1, wavelength 2 pi) unscaled; the last
	 * pair (wavelength far above 8192) divided by 8; a pair with wavelength in
	 * (2048, 8192) interpolated. */
	int64_t hd = 128;
	double cs[2 * 128];
	cpu_rope_table_f64(cs, 2, hd, 0, 500000.0, 8.0);
	const double *p1 = cs + hd; /* position 1: angle = frequency */
	double f0 = atan2(p1[1], p1[0]);
	assert_true(fabs(f0 - 1.0) < 1e-12);
	double flast = atan2(p1[2 * 63 + 1], p1[2 * 63]);
	double want_last = 1.0 / pow(500000.0, 126.0 / 128.0) / 8.0;
	assert_true(fabs(flast - want_last) < 1e-15);
	for (int p = 0; p < 64; p++) {
		double f = 1.0 / pow(500000.0, 2.0 * p / 128.0), wl = 2 * M_PI / f;
		if (wl < 2048 || wl > 8192)
			continue;
		double sm = (8192 / wl - 1) / 3, want = (1 - sm) * f / 8 + sm * f;
		assert_true(fabs(atan2(p1[2 * p + 1], p1[2 * p]) - want) < 1e-15);
	}
}

/* ---- attention (with windows, chunks and sinks) ---- */

typedef struct {
	double *q, *k, *v, *r, *o, *lse, *sinks;
	be_attn a;
} att_ctx;

static size_t att_nq(const be_attn *a) { return (size_t)(a->b * a->tq * a->h * a->hd); }
static size_t att_nk(const be_attn *a) { return (size_t)(a->b * a->tk * a->hkv * a->hd); }
static size_t att_nv(const be_attn *a) { return (size_t)(a->b * a->tk * a->hkv * a->hdv); }
static size_t att_no(const be_attn *a) { return (size_t)(a->b * a->tq * a->h * a->hdv); }

static double att_loss(void *p)
{
	att_ctx *c = p;
	c->a.sinks = c->sinks;
	cpu_attention_fwd_f64(c->o, c->lse, c->q, c->k, c->v, &c->a);
	return dot(c->o, c->r, att_no(&c->a));
}

/* softmax over the visible keys (torchtitan's mask_mods: att_ref_visible) and
 * the sink (GPT-OSS's output times sigmoid(lse - sink)) of scale q k^T, times
 * v; lse includes the sink. */
static void att_naive(double *o, double *lse, const att_ctx *c)
{
	const be_attn *a = &c->a;
	int64_t rep = a->h / a->hkv, hd = a->hd, hdv = a->hdv;
	double scale = a->scale != 0 ? a->scale : 1 / sqrt((double)hd);
	double *p = malloc((size_t)a->tk * sizeof(double) + 8);
	for (int64_t b = 0; b < a->b; b++)
		for (int64_t h = 0; h < a->h; h++)
			for (int64_t i = 0; i < a->tq; i++) {
				const double *qi = c->q + ((b * a->tq + i) * a->h + h) * hd;
				double *oi = o + ((b * a->tq + i) * a->h + h) * hdv;
				double mx = c->sinks ? c->sinks[h] : -INFINITY, sum = 0;
				for (int64_t j = 0; j < a->tk; j++) {
					p[j] = -INFINITY;
					if (!att_ref_visible(a, b, i, j))
						continue;
					const double *kj = c->k + ((b * a->tk + j) * a->hkv + h / rep) * hd;
					p[j] = dot(qi, kj, (size_t)hd) * scale;
					mx = fmax(mx, p[j]);
				}
				if (isinf(mx)) {
					memset(oi, 0, sizeof(double) * (size_t)hdv);
					lse[(b * a->h + h) * a->tq + i] = -INFINITY;
					continue;
				}
				for (int64_t j = 0; j < a->tk; j++)
					sum += p[j] = exp(p[j] - mx);
				double plain = sum; /* without the sink */
				if (c->sinks)
					sum += exp(c->sinks[h] - mx);
				lse[(b * a->h + h) * a->tq + i] = mx + log(sum);
				for (int64_t d = 0; d < hdv && plain == 0; d++)
					oi[d] = 0; /* only the sink: nothing to average */
				for (int64_t d = 0; d < hdv && plain > 0; d++) {
					double acc = 0;
					for (int64_t j = 0; j < a->tk; j++)
						acc += p[j] / plain *
						       c->v[((b * a->tk + j) * a->hkv + h / rep) * hdv + d];
					/* torchtitan: out * sigmoid(lse_keys - sink) */
					oi[d] = acc * (c->sinks ? 1 / (1 + exp(c->sinks[h] - mx - log(plain)))
								: 1);
				}
			}
	free(p);
}

/* The op in float64 against the definition: the forward against att_naive
 * (torchtitan's sigmoid form of the sinks) and the backward against
 * att_ref_bwd (the chain rule on the full mask) and, when fd is set, central
 * differences of the forward; the float32 op against the float64 one. */
static void check_attention_fd(const be_attn *shape, int sinks, uint64_t sd, int fd)
{
	test_seed(sd);
	att_ctx c = {.a = *shape};
	size_t nq = att_nq(&c.a), nk = att_nk(&c.a), nv = att_nv(&c.a), no = att_no(&c.a);
	size_t nl = (size_t)(c.a.b * c.a.h * c.a.tq), nh = (size_t)c.a.h;
	c.q = rnd(nq, 1.5), c.k = rnd(nk, 1.5), c.v = rnd(nv, 1), c.r = rnd(no, 1);
	c.o = rnd(no, 0), c.lse = rnd(nl, 0);
	c.sinks = sinks ? rnd(nh, 2) : NULL;
	round_f32(c.q, nq), round_f32(c.k, nk), round_f32(c.v, nv), round_f32(c.r, no);
	if (sinks)
		round_f32(c.sinks, nh);
	att_loss(&c);
	double *naive = malloc(no * sizeof(double)), *nlse = malloc(nl * sizeof(double));
	att_naive(naive, nlse, &c);
	double en = rel_err_dd(c.o, naive, no), el = 0;
	for (size_t i = 0; i < nl; i++) {
		assert_true(isinf(nlse[i]) == isinf(c.lse[i]));
		if (!isinf(nlse[i]))
			el = fmax(el, fabs(nlse[i] - c.lse[i]));
	}
	print_message("attention vs definition: out %.2e lse %.2e\n", en, el);
	assert_true(en < 1e-12 && el < 1e-12);

	double *dq = malloc(nq * 8), *dk = malloc(nk * 8), *dv = malloc(nv * 8);
	double *ds = calloc(nh, 8);
	c.a.dsinks = sinks ? ds : NULL;
	cpu_attention_bwd_f64(dq, dk, dv, c.r, c.q, c.k, c.v, c.o, c.lse, &c.a);
	double *rq = malloc(nq * 8), *rk = malloc(nk * 8), *rv = malloc(nv * 8);
	double *rs = malloc(nh * 8);
	att_ref_bwd(rq, rk, rv, sinks ? rs : NULL, c.r, c.q, c.k, c.v, NULL, c.sinks, &c.a);
	double bq = rel_err_dd(dq, rq, nq), bk = rel_err_dd(dk, rk, nk), bv = rel_err_dd(dv, rv, nv);
	double bs = sinks ? rel_err_dd(ds, rs, nh) : 0;
	print_message("attention bwd vs definition: dq %.2e dk %.2e dv %.2e dsinks %.2e\n", bq, bk,
		      bv, bs);
	assert_true(bq < 1e-12 && bk < 1e-12 && bv < 1e-12 && bs < 1e-12);
	if (fd) {
		double eq = fd_check(att_loss, &c, c.q, dq, nq, 7);
		double ek = fd_check(att_loss, &c, c.k, dk, nk, 5);
		double ev = fd_check(att_loss, &c, c.v, dv, nv, 5);
		double es = sinks ? fd_check(att_loss, &c, c.sinks, ds, nh, 1) : 0;
		print_message("attention fd: dq %.2e dk %.2e dv %.2e dsinks %.2e\n", eq, ek, ev, es);
		assert_true(eq < FD_TOL && ek < FD_TOL && ev < FD_TOL && es < FD_TOL);
	}

	/* float32 against float64, and dsinks accumulating onto what is there */
	att_loss(&c);
	float *q = to_f32(c.q, nq), *k = to_f32(c.k, nk), *v = to_f32(c.v, nv), *r = to_f32(c.r, no);
	float *o = malloc(no * 4), *lse = malloc(nl * 4), *fs = sinks ? to_f32(c.sinks, nh) : NULL;
	float *fq = malloc(nq * 4), *fk = malloc(nk * 4), *fv = malloc(nv * 4);
	float *fds = malloc(nh * 4);
	for (size_t i = 0; i < nh; i++)
		fds[i] = 1.0f;
	be_attn af = c.a;
	af.sinks = fs, af.dsinks = sinks ? fds : NULL;
	cpu_attention_fwd_f32(o, lse, q, k, v, &af);
	cpu_attention_bwd_f32(fq, fk, fv, r, q, k, v, o, lse, &af);
	double e1 = rel_err_fd(o, c.o, no), e2 = rel_err_fd(fq, dq, nq),
	       e3 = rel_err_fd(fk, dk, nk), e4 = rel_err_fd(fv, dv, nv), e5 = 0;
	for (size_t i = 0; sinks && i < nh; i++)
		e5 = fmax(e5, fabs(fds[i] - 1.0 - ds[i]) / (1 + fabs(ds[i])));
	print_message("attention f32: out %.2e dq %.2e dk %.2e dv %.2e dsinks %.2e\n", e1, e2,
		      e3, e4, e5);
	assert_true(e1 < F32_TOL && e2 < F32_TOL && e3 < F32_TOL && e4 < F32_TOL &&
		    e5 < F32_TOL);
	for (size_t i = 0; i < nl; i++)
		assert_true(isinf(c.lse[i]) ? isinf(lse[i]) && lse[i] < 0
					    : fabs(lse[i] - c.lse[i]) < 1e-5 * (1 + fabs(c.lse[i])));
	free(c.q), free(c.k), free(c.v), free(c.r), free(c.o), free(c.lse), free(c.sinks);
	free(naive), free(nlse), free(dq), free(dk), free(dv), free(ds);
	free(rq), free(rk), free(rv), free(rs);
	free(q), free(k), free(v), free(r), free(o), free(lse), free(fs), free(fq), free(fk);
	free(fv), free(fds);
}

static void check_attention(const be_attn *shape, int sinks, uint64_t sd)
{
	check_attention_fd(shape, sinks, sd, 1);
}

static void attention_gqa_causal_backward_matches_finite_differences(void **s)
{
	(void)s;
	/* t = 70 spans two query blocks of 64; 4 query heads share 2 kv heads. */
	be_attn a = {.b = 2, .tq = 70, .tk = 70, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1};
	check_attention(&a, 0, 13);
}

/* The blocks a context-parallel rank computes: queries of one chunk against the
 * keys of another, at their true positions.  Keys after every query: no key
 * seen, out 0 and lse -inf; keys before every query: a full block. */
static void attention_blocks_at_positions_mask_by_position(void **s)
{
	(void)s;
	be_attn diag = {.b = 1, .tq = 20, .tk = 20, .h = 2, .hkv = 1, .hd = 8, .hdv = 8,
			.causal = 1, .q_pos0 = 40, .k_pos0 = 40};
	check_attention(&diag, 0, 21);
	be_attn past = diag;
	past.k_pos0 = 0;
	past.tk = 24; /* keys 0..23 all before queries 40..59 */
	check_attention(&past, 0, 22);
	be_attn straddle = diag;
	straddle.q_pos0 = 10, straddle.k_pos0 = 20, straddle.tk = 30;
	check_attention(&straddle, 0, 23); /* queries 10..19 see nothing, 20..29 some */
}

/* MLA's value heads are narrower than its query/key heads, and its softmax scale
 * is not 1/sqrt(hd); a bidirectional mask for completeness. */
static void attention_value_dim_scale_and_no_mask(void **s)
{
	(void)s;
	be_attn a = {.b = 1, .tq = 9, .tk = 13, .h = 3, .hkv = 3, .hd = 12, .hdv = 4,
		     .scale = 0.2f};
	check_attention(&a, 0, 24);
	a.causal = 1, a.q_pos0 = 4;
	check_attention(&a, 0, 25);
}

/* GPT-OSS's sliding layers: each query sees itself and the window - 1 keys
 * before it.  t = 150 spans three query blocks of 64, so blocks start and end
 * inside the window; GQA with 4 query heads on 2 kv heads. */
static void sliding_window_matches_mask_definition_and_finite_differences(void **s)
{
	(void)s;
	be_attn a = {.b = 2, .tq = 150, .tk = 150, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1, .window = 37};
	check_attention(&a, 0, 31);
	a.window = 1; /* only itself */
	check_attention(&a, 0, 32);
	/* a context-parallel block: queries 100..139 against keys 60..119 */
	be_attn cp = {.b = 1, .tq = 40, .tk = 60, .h = 2, .hkv = 1, .hd = 8, .hdv = 8,
		      .causal = 1, .window = 25, .q_pos0 = 100, .k_pos0 = 60};
	check_attention(&cp, 0, 33);
}

/* Llama 4's local layers: a query sees the keys of its own chunk, causally;
 * chunks of 16 cut through the 64-row query blocks. */
static void chunked_attention_matches_mask_definition_and_finite_differences(void **s)
{
	(void)s;
	be_attn a = {.b = 2, .tq = 100, .tk = 100, .h = 2, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1, .chunk = 16};
	check_attention(&a, 0, 41);
	be_attn cp = a; /* queries at 40..79 against keys 30..69 */
	cp.b = 1, cp.tq = 40, cp.tk = 40, cp.q_pos0 = 40, cp.k_pos0 = 30;
	check_attention(&cp, 0, 42);
}

/* GPT-OSS's sinks, with full and sliding masks, with MLA's shapes for
 * completeness; a block whose queries see no key returns the sink's logit as
 * lse and zero output. */
static void sinks_match_sigmoid_rescale_and_their_gradient_finite_differences(void **s)
{
	(void)s;
	be_attn a = {.b = 2, .tq = 70, .tk = 70, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1};
	check_attention(&a, 1, 51);
	a.window = 9;
	check_attention(&a, 1, 52);
	be_attn mla = {.b = 1, .tq = 20, .tk = 20, .h = 3, .hkv = 3, .hd = 12, .hdv = 4,
		       .causal = 1, .scale = 0.31f};
	check_attention(&mla, 1, 53);
	be_attn none = {.b = 1, .tq = 10, .tk = 10, .h = 2, .hkv = 1, .hd = 8, .hdv = 8,
			.causal = 1, .q_pos0 = 0, .k_pos0 = 50};
	check_attention(&none, 1, 54);
	double q[160] = {0}, k[80] = {0}, v[80] = {0}, o[160], lse[20], sk[2] = {0.25, -1.5};
	none.sinks = sk;
	cpu_attention_fwd_f64(o, lse, q, k, v, &none);
	for (int i = 0; i < 20; i++)
		assert_true(lse[i] == sk[i / 10]);
	for (int i = 0; i < 160; i++)
		assert_true(o[i] == 0);
}

/* ---- documents (torchtitan's block-causal mask over packed windows) ---- */

/* A doc array (b, t): row bi's documents start at starts[bi][0..], a list
 * ended by -1. */
static int32_t *doc_rows(int64_t b, int64_t t, const int64_t (*starts)[8])
{
	int32_t *doc = malloc(sizeof(int32_t) * (size_t)(b * t));
	assert_non_null(doc);
	for (int64_t bi = 0; bi < b; bi++) {
		int n = 0;
		while (n < 8 && starts[bi][n] >= 0)
			n++;
		att_ref_doc_row(doc + bi * t, t, starts[bi], n);
	}
	return doc;
}

/* A query sees the keys of its own document only, on top of the other masks.
 * t = 150 spans three query blocks of 64; each batch row has its own
 * boundaries, among them documents of one position (37, 90, 149: a query
 * whose document starts at itself), a boundary on a block's edge (64), and
 * windows and chunks that cross boundaries; GQA, sinks, MLA's hdv != hd. */
static void documents_mask_the_keys_before_each_querys_document(void **s)
{
	(void)s;
	static const int64_t starts[2][8] = {{0, 37, 38, 64, 100, 149, -1},
					     {0, 5, 90, 91, 130, -1}};
	int32_t *doc = doc_rows(2, 150, starts);
	be_attn a = {.b = 2, .tq = 150, .tk = 150, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1, .doc = doc, .doc_t = 150};
	check_attention_fd(&a, 0, 91, 0);
	a.window = 20; /* row 0's queries 100..119: windows reach past their document */
	check_attention_fd(&a, 1, 92, 0);
	a.window = 0, a.chunk = 16; /* chunk 32..47 holds the boundaries 37, 38 */
	check_attention_fd(&a, 0, 93, 0);
	be_attn mla = {.b = 2, .tq = 40, .tk = 40, .h = 3, .hkv = 3, .hd = 12, .hdv = 4,
		       .causal = 1, .scale = 0.2f, .doc = doc, .doc_t = 150};
	check_attention_fd(&mla, 1, 94, 1); /* and finite differences, on a small one */
	free(doc);
}

/* A context-parallel rank passes the full rows of doc and its blocks'
 * positions: queries 60..99 against keys 20..59 of 120, where row 0's queries
 * from 75 and row 1's from 62 see no key of the block (out 0, lse -inf or
 * their sink), a block whose queries see no key at all, and the diagonal
 * block with a window and sinks. */
static void documents_in_context_parallel_blocks_index_the_full_rows(void **s)
{
	(void)s;
	static const int64_t starts[2][8] = {{0, 50, 75, 76, -1}, {0, 62, 100, -1}};
	int32_t *doc = doc_rows(2, 120, starts);
	be_attn a = {.b = 2, .tq = 40, .tk = 40, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		     .causal = 1, .q_pos0 = 60, .k_pos0 = 20, .doc = doc, .doc_t = 120};
	check_attention_fd(&a, 0, 95, 0);
	check_attention_fd(&a, 1, 96, 0);
	be_attn none = a; /* queries 80..99 against keys 0..39: all of them masked */
	none.tq = 20, none.q_pos0 = 80, none.k_pos0 = 0;
	check_attention_fd(&none, 1, 97, 0);
	double q[2 * 20 * 4 * 8] = {0}, k[2 * 40 * 2 * 8] = {0}, v[2 * 40 * 2 * 8] = {0};
	double o[2 * 20 * 4 * 8], lse[2 * 4 * 20];
	cpu_attention_fwd_f64(o, lse, q, k, v, &none);
	for (int i = 0; i < 2 * 4 * 20; i++)
		assert_true(isinf(lse[i]) && lse[i] < 0);
	for (int i = 0; i < 2 * 20 * 4 * 8; i++)
		assert_true(o[i] == 0);
	be_attn diag = a;
	diag.k_pos0 = 60, diag.window = 10;
	check_attention_fd(&diag, 1, 98, 0);
	free(doc);
}

/* ---- swiglu ---- */
typedef struct { double *a, *g, *r, *y; int64_t n; } glu_ctx;

static double glu_loss(void *p)
{
	glu_ctx *c = p;
	cpu_swiglu_fwd_f64(c->y, c->a, c->g, c->n);
	return dot(c->y, c->r, (size_t)c->n);
}

static void swiglu_backward_matches_finite_differences_and_f32_matches_f64(void **s)
{
	(void)s;
	test_seed(14);
	int64_t n = 300;
	glu_ctx c = {rnd(300, 6), rnd(300, 2), rnd(300, 1), rnd(300, 0), n};
	round_f32(c.a, 300), round_f32(c.g, 300), round_f32(c.r, 300);
	double *da = malloc(300 * 8), *dg = malloc(300 * 8);
	cpu_swiglu_bwd_f64(da, dg, c.r, c.a, c.g, n);
	double ea = fd_check(glu_loss, &c, c.a, da, 300, 1);
	double eg = fd_check(glu_loss, &c, c.g, dg, 300, 1);
	print_message("swiglu fd: da %.2e dg %.2e\n", ea, eg);
	assert_true(ea < FD_TOL && eg < FD_TOL);
	glu_loss(&c);
	float *a = to_f32(c.a, 300), *g = to_f32(c.g, 300), *r = to_f32(c.r, 300);
	float *y = malloc(1200), *fa = malloc(1200), *fg = malloc(1200);
	cpu_swiglu_fwd_f32(y, a, g, n);
	cpu_swiglu_bwd_f32(fa, fg, r, a, g, n);
	double e1 = rel_err_fd(y, c.y, 300), e2 = rel_err_fd(fa, da, 300), e3 = rel_err_fd(fg, dg, 300);
	print_message("swiglu f32: y %.2e da %.2e dg %.2e\n", e1, e2, e3);
	assert_true(e1 < F32_TOL && e2 < F32_TOL && e3 < F32_TOL);
	free(c.a), free(c.g), free(c.r), free(c.y), free(da), free(dg);
	free(a), free(g), free(r), free(y), free(fa), free(fg);
}

/* ---- GPT-OSS's clamped SwiGLU ---- */

typedef struct { double *x, *r, *y; int64_t n, f; double alpha, limit; } clamp_ctx;

static double clamp_loss(void *p)
{
	clamp_ctx *c = p;
	cpu_swiglu_clamp_fwd_f64(c->y, c->x, c->n, c->f, c->alpha, c->limit);
	return dot(c->y, c->r, (size_t)(c->n * c->f));
}

static void swiglu_clamp_matches_gpt_oss_and_finite_differences(void **s)
{
	(void)s;
	test_seed(61);
	int64_t n = 7, f = 40, m = n * f;
	/* scale 12 with limit 7: about 40% of the inputs clamped */
	clamp_ctx c = {rnd((size_t)(2 * m), 12), rnd((size_t)m, 1), rnd((size_t)m, 0), n, f,
		       1.702, 7.0};
	round_f32(c.x, (size_t)(2 * m)), round_f32(c.r, (size_t)m);
	clamp_loss(&c);
	double worst = 0;
	int clamped = 0;
	for (int64_t i = 0; i < m; i++) { /* torchtitan's swiglu(x, alpha, limit) */
		double glu = fmin(c.x[2 * i], c.limit);
		double lin = fmin(fmax(c.x[2 * i + 1], -c.limit), c.limit);
		double want = glu / (1 + exp(-c.alpha * glu)) * (lin + 1);
		worst = fmax(worst, fabs(c.y[i] - want) / (1 + fabs(want)));
		clamped += glu != c.x[2 * i] || lin != c.x[2 * i + 1];
	}
	print_message("clamped swiglu vs definition %.2e (%d of %lld clamped)\n", worst, clamped,
		      (long long)m);
	assert_true(worst < 1e-15 && clamped > m / 5);
	double *dx = malloc((size_t)(2 * m) * 8);
	cpu_swiglu_clamp_bwd_f64(dx, c.r, c.x, n, f, c.alpha, c.limit);
	double e = fd_check(clamp_loss, &c, c.x, dx, (size_t)(2 * m), 1);
	print_message("clamped swiglu fd %.2e\n", e);
	assert_true(e < FD_TOL);
	float *x = to_f32(c.x, (size_t)(2 * m)), *r = to_f32(c.r, (size_t)m);
	float *y = malloc((size_t)m * 4), *fdx = malloc((size_t)(2 * m) * 4);
	clamp_loss(&c);
	cpu_swiglu_clamp_fwd_f32(y, x, n, f, 1.702f, 7.0f);
	cpu_swiglu_clamp_bwd_f32(fdx, r, x, n, f, 1.702f, 7.0f);
	double e1 = rel_err_fd(y, c.y, (size_t)m), e2 = rel_err_fd(fdx, dx, (size_t)(2 * m));
	print_message("clamped swiglu f32: y %.2e dx %.2e\n", e1, e2);
	assert_true(e1 < F32_TOL && e2 < F32_TOL);
	free(c.x), free(c.r), free(c.y), free(dx), free(x), free(r), free(y), free(fdx);
}

/* ---- biases ---- */

static void bias_add_and_grad_match_definition_per_row_group(void **s)
{
	(void)s;
	test_seed(71);
	int64_t rows = 50, d = 70, groups = 4; /* d > 64: two column blocks */
	int32_t offs[5] = {3, 10, 10, 31, 44};  /* an empty group; rows 0-2, 44-49 unused */
	double *y = rnd((size_t)(rows * d), 1), *y0 = malloc((size_t)(rows * d) * 8);
	double *bias = rnd((size_t)(groups * d), 1), *db = rnd((size_t)(groups * d), 1);
	double *db0 = malloc((size_t)(groups * d) * 8);
	memcpy(y0, y, (size_t)(rows * d) * 8);
	memcpy(db0, db, (size_t)(groups * d) * 8);
	cpu_bias_add_f64(y, bias, rows, d, groups, offs);
	cpu_bias_grad_f64(db, y0, rows, d, groups, offs);
	for (int64_t r = 0; r < rows; r++) {
		int64_t g = -1;
		for (int64_t j = 0; j < groups; j++)
			if (r >= offs[j] && r < offs[j + 1])
				g = j;
		for (int64_t c = 0; c < d; c++)
			assert_true(y[r * d + c] == y0[r * d + c] + (g >= 0 ? bias[g * d + c] : 0));
	}
	for (int64_t g = 0; g < groups; g++)
		for (int64_t c = 0; c < d; c++) {
			double want = db0[g * d + c];
			for (int64_t r = offs[g]; r < offs[g + 1]; r++)
				want += y0[r * d + c];
			assert_true(fabs(db[g * d + c] - want) < 1e-13);
		}
	/* one bias for every row */
	memcpy(y, y0, (size_t)(rows * d) * 8);
	memset(db, 0, (size_t)d * 8);
	cpu_bias_add_f64(y, bias, rows, d, 1, NULL);
	cpu_bias_grad_f64(db, y0, rows, d, 1, NULL);
	for (int64_t c = 0; c < d; c++) {
		double want = 0;
		for (int64_t r = 0; r < rows; r++) {
			assert_true(y[r * d + c] == y0[r * d + c] + bias[c]);
			want += y0[r * d + c];
		}
		assert_true(fabs(db[c] - want) < 1e-13);
	}
	free(y), free(y0), free(bias), free(db), free(db0);
}

/* ---- MLA's split heads ---- */

static void heads_cat_and_split_are_adjoint_and_sum_the_shared_rope_key(void **s)
{
	(void)s;
	test_seed(81);
	int64_t n = 5, h = 3, d1 = 6, d2 = 4, d = d1 + d2;
	for (int64_t h2 = 1; h2 <= h; h2 += h - 1) {
		double *x1 = rnd((size_t)(n * h * d1), 1), *x2 = rnd((size_t)(n * h2 * d2), 1);
		double *y = rnd((size_t)(n * h * d), 0), *r = rnd((size_t)(n * h * d), 1);
		double *r1 = rnd((size_t)(n * h * d1), 0), *r2 = rnd((size_t)(n * h2 * d2), 0);
		cpu_heads_cat_f64(y, x1, x2, n, h, d1, d2, h2);
		for (int64_t i = 0; i < n; i++)
			for (int64_t j = 0; j < h; j++)
				for (int64_t c = 0; c < d; c++)
					assert_true(y[(i * h + j) * d + c] ==
						    (c < d1 ? x1[(i * h + j) * d1 + c]
							    : x2[(i * h2 + (h2 == 1 ? 0 : j)) * d2 + c - d1]));
		/* <cat(x1, x2), r> = <x1, split1(r)> + <x2, split2(r)> */
		cpu_heads_split_f64(r1, r2, r, n, h, d1, d2, h2);
		double lhs = dot(y, r, (size_t)(n * h * d));
		double rhs = dot(x1, r1, (size_t)(n * h * d1)) + dot(x2, r2, (size_t)(n * h2 * d2));
		assert_true(fabs(lhs - rhs) < 1e-12 * (1 + fabs(lhs)));
		/* the split of a concatenation gives its parts back (h2 = h) */
		if (h2 == h) {
			cpu_heads_split_f64(r1, NULL, y, n, h, d1, d2, h2);
			assert_true(rel_err_dd(r1, x1, (size_t)(n * h * d1)) == 0);
		}
		free(x1), free(x2), free(y), free(r), free(r1), free(r2);
	}
}

/* ---- the backend table ---- */

/* The CPU backend's entries run the float32 kernels and fault on the types
 * they do not take. */
static void backend_entries_run_the_kernels_and_fault_on_other_types(void **s)
{
	(void)s;
	titan_err e;
	backend *be = backend_cpu_create(2, &e);
	assert_non_null(be);
	float x[16], y[8], y2[8], b[4] = {1, 2, 3, 4};
	for (int i = 0; i < 16; i++)
		x[i] = (float)(i - 8) * 1.3f;
	be->ops->swiglu_clamp_fwd(be, y, x, BE_F32, 2, 4, 1.702f, 7.0f);
	cpu_swiglu_clamp_fwd_f32(y2, x, 2, 4, 1.702f, 7.0f);
	assert_memory_equal(y, y2, sizeof y);
	be->ops->bias_add(be, y, BE_F32, b, BE_F32, 2, 4, 1, NULL);
	for (int i = 0; i < 8; i++)
		assert_true(y[i] == y2[i] + b[i % 4]);
	float cat[24];
	be->ops->heads_cat(be, cat, x, b, BE_F32, 2, 2, 4, 2, 1);
	assert_true(cat[4] == b[0] && cat[10] == b[0] && cat[16] == b[2]);
	assert_int_equal(be->ops->sync(be, &e), 0);
	be->ops->heads_split(be, y, NULL, cat, BE_E4M3, 2, 2, 4, 2, 1);
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "heads_split"));
	backend_free(be);
}

/* ---- embedding ---- */
static void embedding_backward_adds_repeated_ids_in_order(void **s)
{
	(void)s;
	test_seed(15);
	int64_t v = 10, d = 130, n = 7;
	int32_t ids[7] = {3, 0, 3, 9, 3, 1, 0};
	double *tab = rnd((size_t)(v * d), 1), *out = rnd((size_t)(n * d), 0);
	double *dout = rnd((size_t)(n * d), 1), *dtab = calloc((size_t)(v * d), 8);
	cpu_embedding_fwd_f64(out, tab, ids, n, d, 0, v);
	for (int64_t i = 0; i < n; i++)
		assert_memory_equal(out + i * d, tab + ids[i] * d, (size_t)d * 8);
	/* The loss sum(out * dout) is linear in the table: its gradient is exact. */
	cpu_embedding_bwd_f64(dtab, dout, ids, n, d, 0, v);
	for (int64_t r = 0; r < v; r++)
		for (int64_t j = 0; j < d; j++) {
			double want = 0;
			for (int64_t i = 0; i < n; i++)
				if (ids[i] == r)
					want += dout[i * d + j];
			assert_true(fabs(dtab[r * d + j] - want) < 1e-15);
		}
	free(tab), free(out), free(dout), free(dtab);
}

/* A vocabulary-parallel rank holds rows v0..v0+nv-1: other ids look up zero rows
 * and add no gradient, so the ranks' outputs sum to the whole table's lookup. */
static void embedding_vocab_shards_sum_to_the_whole_lookup(void **s)
{
	(void)s;
	test_seed(27);
	int64_t v = 10, d = 5, n = 6;
	int32_t ids[6] = {9, 0, 4, 5, 4, 7};
	double *tab = rnd((size_t)(v * d), 1), *whole = rnd((size_t)(n * d), 0);
	double *part = rnd((size_t)(n * d), 0), *sum = calloc((size_t)(n * d), 8);
	double *dout = rnd((size_t)(n * d), 1), *dtab = calloc((size_t)(v * d), 8);
	double *dwhole = calloc((size_t)(v * d), 8);
	cpu_embedding_fwd_f64(whole, tab, ids, n, d, 0, v);
	cpu_embedding_bwd_f64(dwhole, dout, ids, n, d, 0, v);
	for (int64_t v0 = 0; v0 < v; v0 += 4) {
		int64_t nv = v - v0 < 4 ? v - v0 : 4;
		cpu_embedding_fwd_f64(part, tab + v0 * d, ids, n, d, v0, nv);
		for (int64_t i = 0; i < n * d; i++)
			sum[i] += part[i];
		cpu_embedding_bwd_f64(dtab + v0 * d, dout, ids, n, d, v0, nv);
	}
	assert_memory_equal(sum, whole, (size_t)(n * d) * 8);
	assert_memory_equal(dtab, dwhole, (size_t)(v * d) * 8);
	free(tab), free(whole), free(part), free(sum), free(dout), free(dtab), free(dwhole);
}

/* ---- cross-entropy ---- */
typedef struct { double *x, *tmp; int32_t *y; int64_t n, v; } ce_ctx;

static double ce_loss(void *p)
{
	ce_ctx *c = p;
	size_t nv = (size_t)(c->n * c->v);
	memcpy(c->tmp, c->x, nv * 8);
	double l = 0;
	int64_t k = 0;
	cpu_cross_entropy_f64(c->tmp, c->y, c->n, c->v, -100, 0, &l, &k);
	return l;
}

static void cross_entropy_gradient_matches_finite_differences_and_skips_ignored(void **s)
{
	(void)s;
	test_seed(16);
	int64_t n = 6, v = 50;
	int32_t y[6] = {3, -100, 49, 0, -100, 17};
	size_t nv = (size_t)(n * v);
	ce_ctx c = {rnd(nv, 4), rnd(nv, 0), y, n, v};
	round_f32(c.x, nv);
	double *g = malloc(nv * 8);
	memcpy(g, c.x, nv * 8);
	double l = 0;
	int64_t k = 0;
	cpu_cross_entropy_f64(g, y, n, v, -100, 1, &l, &k);
	assert_int_equal(k, 4);
	/* By definition: sum over valid rows of logsumexp - x[label]. */
	double want = 0;
	for (int64_t i = 0; i < n; i++) {
		if (y[i] == -100)
			continue;
		double se = 0;
		for (int64_t j = 0; j < v; j++)
			se += exp(c.x[i * v + j]);
		want += log(se) - c.x[i * v + y[i]];
	}
	assert_true(fabs(l - want) < 1e-12 * fabs(want));
	double e = fd_check(ce_loss, &c, c.x, g, nv, 1);
	print_message("cross-entropy fd %.2e\n", e);
	assert_true(e < FD_TOL);
	for (int64_t j = 0; j < v; j++)
		assert_true(g[1 * v + j] == 0 && g[4 * v + j] == 0);

	float *x = to_f32(c.x, nv);
	double lf = 0;
	int64_t kf = 0;
	cpu_cross_entropy_f32(x, y, n, v, -100, 0.25f, &lf, &kf);
	for (size_t i = 0; i < nv; i++)
		g[i] *= 0.25;
	double eg = rel_err_fd(x, g, nv);
	print_message("cross-entropy f32: loss rel %.2e grad %.2e\n", fabs(lf - l) / l, eg);
	assert_true(fabs(lf - l) / l < F32_TOL && eg < F32_TOL);
	assert_int_equal(kf, 4);
	free(c.x), free(c.tmp), free(g), free(x);
}

/* ---- matmul, sumsq, adamw, elementwise ---- */
static void matmul_every_transpose_matches_definition(void **s)
{
	(void)s;
	test_seed(17);
	int64_t m = 13, n = 9, k = 21;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			double *a = rnd((size_t)(m * k), 1), *b = rnd((size_t)(k * n), 1);
			double *c = rnd((size_t)(m * n), 1);
			round_f32(a, (size_t)(m * k)), round_f32(b, (size_t)(k * n));
			round_f32(c, (size_t)(m * n));
			float *fa = to_f32(a, (size_t)(m * k)), *fb = to_f32(b, (size_t)(k * n));
			float *fc = to_f32(c, (size_t)(m * n));
			double *want = malloc((size_t)(m * n) * 8);
			for (int64_t i = 0; i < m; i++)
				for (int64_t j = 0; j < n; j++) {
					double acc = 0;
					for (int64_t p = 0; p < k; p++)
						acc += (ta ? a[p * m + i] : a[i * k + p]) *
						       (tb ? b[j * k + p] : b[p * n + j]);
					want[i * n + j] = 0.5 * acc + 2 * c[i * n + j];
				}
			cpu_matmul_f64(ta, tb, m, n, k, 0.5, a, ta ? m : k, b, tb ? k : n, 2, c, n);
			cpu_matmul_f32(ta, tb, m, n, k, 0.5f, fa, ta ? m : k, fb, tb ? k : n, 2, fc, n);
			assert_true(rel_err_dd(c, want, (size_t)(m * n)) < 1e-14);
			assert_true(rel_err_fd(fc, want, (size_t)(m * n)) < F32_TOL);
			free(a), free(b), free(c), free(fa), free(fb), free(fc), free(want);
		}
}

static void sumsq_is_exact_and_independent_of_threads(void **s)
{
	(void)s;
	test_seed(18);
	size_t n = 100003;
	double *x = rnd(n, 1);
	round_f32(x, n);
	float *f = to_f32(x, n);
	long double want = 0;
	for (size_t i = 0; i < n; i++)
		want += (long double)x[i] * x[i];
	double got = cpu_sumsq_f32(f, (int64_t)n);
	assert_true(fabs(got - (double)want) < 1e-12 * (double)want);
	backend *be = backend_cpu_create(1, NULL);
	double one = be->ops->sumsq(be, f, BE_F32, (int64_t)n);
	backend_free(be);
	be = backend_cpu_create(2, NULL);
	double two = be->ops->sumsq(be, f, BE_F32, (int64_t)n);
	backend_free(be);
	assert_memory_equal(&one, &two, sizeof one);
	free(x), free(f);
}

static void adamw_update_matches_torch_formula(void **s)
{
	(void)s;
	test_seed(19);
	size_t n = 1000;
	double *p = rnd(n, 1), *g = rnd(n, 1e-3), *m = rnd(n, 1e-3), *v = rnd(n, 0);
	for (size_t i = 0; i < n; i++)
		v[i] = fabs(test_urand()) * 1e-6;
	round_f32(p, n), round_f32(g, n), round_f32(m, n), round_f32(v, n);
	float *fp = to_f32(p, n), *fg = to_f32(g, n), *fm = to_f32(m, n), *fv = to_f32(v, n);
	double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
	int step = 3;
	double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
	cpu_adamw_consts k = cpu_adamw_consts_of(lr, b1, b2, eps, wd, bc1, bc2);
	cpu_adamw_f32(fp, fg, fm, fv, (int64_t)n, &k);
	for (size_t i = 0; i < n; i++) {
		/* torch.optim.AdamW (single tensor, not capturable). */
		double pi = p[i] * (1 - lr * wd);
		double mi = m[i] * b1 + (1 - b1) * g[i];
		double vi = v[i] * b2 + (1 - b2) * g[i] * g[i];
		double denom = sqrt(vi) / sqrt(bc2) + eps;
		pi -= lr / bc1 * mi / denom;
		/* float32 rounding of each term, relative to the terms' size */
		assert_true(fabs(fm[i] - mi) <= 1e-6 * (fabs(m[i]) + fabs(g[i])));
		assert_true(fabs(fv[i] - vi) <= 1e-6 * (v[i] + g[i] * g[i]));
		assert_true(fabs(fp[i] - pi) <= 1e-6 * (fabs(p[i]) + lr / bc1 * fabs(mi / denom)));
	}
	free(p), free(g), free(m), free(v), free(fp), free(fg), free(fm), free(fv);
}

/* lerp is torch.lerp bit for bit: values torch 2.x computed on the CPU for
 * Muon's two weights (1 - 0.95 from x, 0.95 from end), where the textbook
 * mu x + (1 - mu) end rounds otherwise (in 28% of 20000 random pairs). */
static void lerp_is_torch_lerp_bit_for_bit(void **s)
{
	(void)s;
	static const struct {
		float x, end, w, want;
	} cases[] = {
		{-0x1.39ef5ep-4f, 0x1.3bcb74p+0f, 0.05f, -0x1.6cd1e2p-7f},
		{0x1.7084c8p-2f, 0x1.47e99p+0f, 0.05f, 0x1.9facdap-2f},
		{-0x1.906482p-1f, 0x1.217e1cp+0f, 0.05f, -0x1.5f6c78p-1f},
		{0x1.7084c8p-2f, 0x1.47e99p+0f, 0.95f, 0x1.3c1f8cp+0f},
		{-0x1.906482p-1f, 0x1.217e1cp+0f, 0.95f, 0x1.090218p+0f},
		{0x1.9edc6ap+0f, -0x1.9b1714p-4f, 0.95f, -0x1.d52c8ep-7f},
	};
	backend *be = backend_cpu_create(1, NULL);
	assert_non_null(be);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* 0.05f is (float)(1 - 0.95), the weight torch's kernel gets */
		assert_true(cases[i].w == 0.95f || cases[i].w == (float)(1 - 0.95));
		float x[70], end[70];
		for (int k = 0; k < 70; k++) /* the vector loop and its tail */
			x[k] = cases[i].x, end[k] = cases[i].end;
		be->ops->lerp(be, x, end, cases[i].w, 70);
		for (int k = 0; k < 70; k++)
			if (x[k] != cases[i].want)
				fail_msg("case %zu element %d: %a, torch %a", i, k, (double)x[k],
					 (double)cases[i].want);
	}
	backend_free(be);
}

/* convert rounds float32 to bfloat16 to nearest even and back exactly; an
 * element type an op does not implement is reported by the next sync, once. */
static void convert_rounds_to_bf16_and_unsupported_types_fault_at_sync(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	float x[4] = {1.0f, 1.00390625f, 1.01171875f, -3.0e38f}; /* tie to even, tie up, big */
	uint16_t h[4];
	float back[4];
	be->ops->convert(be, h, BE_BF16, x, BE_F32, 4);
	be->ops->convert(be, back, BE_F32, h, BE_BF16, 4);
	assert_int_equal(h[0], 0x3f80);
	assert_int_equal(h[1], 0x3f80); /* 1 + 2^-8: halfway, rounds to the even 1.0 */
	assert_int_equal(h[2], 0x3f82); /* 1 + 3 * 2^-8: halfway, rounds up to even */
	assert_true(back[0] == 1.0f && back[2] == 1.015625f);
	assert_int_equal(be->ops->sync(be, &e), 0);
	float y[4];
	be->ops->scale(be, h, BE_E4M3, 2.0f, 4);
	be->ops->swiglu_fwd(be, y, x, x, BE_E5M2, 4);
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("fault: %s\n", e.msg);
	assert_non_null(strstr(e.msg, "scale"));
	assert_int_equal(be->ops->sync(be, &e), 0);
	assert_int_equal(be_dtype_parse("bfloat16"), BE_BF16);
	assert_int_equal(be_dtype_parse("float16"), -1);
	assert_int_equal(be_dtype_size(BE_E4M3), 1);
	backend_free(be);
}

/* The vectorisable exp: within 2 ulp of exp over the range, 0 below it, and a
 * NaN (an lr of inf makes them) passes through without undefined behaviour
 * (the sanitizer build runs this). */
static void fast_exp_is_close_and_passes_nan_and_infinities(void **s)
{
	(void)s;
	for (float x = -87.0f; x < 88.0f; x += 0.37f) {
		double want = exp((double)x), got = cpu_exp_f32(x);
		assert_true(fabs(got - want) <= 3e-7 * want);
	}
	assert_true(isnan(cpu_exp_f32(NAN)));
	assert_true(isnan(cpu_exp_f32(-NAN)));
	assert_true(cpu_exp_f32(-INFINITY) == 0.0f);
	assert_true(cpu_exp_f32(-200.0f) == 0.0f);
	assert_true(isinf(cpu_exp_f32(INFINITY)) || cpu_exp_f32(INFINITY) > 1e38f);
}

static void backend_counts_bytes_in_use_and_peak(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	assert_non_null(be);
	float *a = backend_alloc_floats(be, 1000, &e);
	float *b = backend_calloc_floats(be, 500, &e);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(be->bytes_in_use, 6000);
	for (int i = 0; i < 500; i++)
		assert_true(b[i] == 0);
	be->ops->free(be, a);
	assert_int_equal(be->bytes_in_use, 2000);
	assert_int_equal(backend_peak_bytes(be), 6000);
	backend_reset_peak(be);
	assert_int_equal(backend_peak_bytes(be), 2000);
	be->ops->free(be, b);
	assert_int_equal(be->bytes_in_use, 0);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rmsnorm_backward_matches_finite_differences_and_f32_matches_f64),
		cmocka_unit_test(rope_inverse_is_its_gradient_and_matches_complex_rotation),
		cmocka_unit_test(rope_half_matches_hf_rotate_half_and_inverts),
		cmocka_unit_test(rope_table_applies_llama31_scaling_bands),
		cmocka_unit_test(attention_gqa_causal_backward_matches_finite_differences),
		cmocka_unit_test(attention_blocks_at_positions_mask_by_position),
		cmocka_unit_test(attention_value_dim_scale_and_no_mask),
		cmocka_unit_test(sliding_window_matches_mask_definition_and_finite_differences),
		cmocka_unit_test(chunked_attention_matches_mask_definition_and_finite_differences),
		cmocka_unit_test(sinks_match_sigmoid_rescale_and_their_gradient_finite_differences),
		cmocka_unit_test(documents_mask_the_keys_before_each_querys_document),
		cmocka_unit_test(documents_in_context_parallel_blocks_index_the_full_rows),
		cmocka_unit_test(swiglu_backward_matches_finite_differences_and_f32_matches_f64),
		cmocka_unit_test(swiglu_clamp_matches_gpt_oss_and_finite_differences),
		cmocka_unit_test(bias_add_and_grad_match_definition_per_row_group),
		cmocka_unit_test(heads_cat_and_split_are_adjoint_and_sum_the_shared_rope_key),
		cmocka_unit_test(backend_entries_run_the_kernels_and_fault_on_other_types),
		cmocka_unit_test(embedding_backward_adds_repeated_ids_in_order),
		cmocka_unit_test(embedding_vocab_shards_sum_to_the_whole_lookup),
		cmocka_unit_test(cross_entropy_gradient_matches_finite_differences_and_skips_ignored),
		cmocka_unit_test(matmul_every_transpose_matches_definition),
		cmocka_unit_test(sumsq_is_exact_and_independent_of_threads),
		cmocka_unit_test(adamw_update_matches_torch_formula),
		cmocka_unit_test(lerp_is_torch_lerp_bit_for_bit),
		cmocka_unit_test(convert_rounds_to_bf16_and_unsupported_types_fault_at_sync),
		cmocka_unit_test(fast_exp_is_close_and_passes_nan_and_infinities),
		cmocka_unit_test(backend_counts_bytes_in_use_and_peak),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
