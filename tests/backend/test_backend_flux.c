/* The CPU backend's ops for Flux's encoders and autoencoder (backend.h's
 * t5_attention, geglu_fwd, swish, layernorm_fwd, groupnorm_fwd, upsample2x,
 * im2col), three ways:
 * - the float64 kernels (cpu_kernels.h _f64) against references written out
 *   here in another shape: T5's scores as a whole matrix, softmaxed row by
 *   row; the group norm's statistics gathered channel by channel; the
 *   convolution computed directly, not through its columns (the layouts are
 *   torch's: F.unfold, F.interpolate(mode="nearest"), nn.GroupNorm);
 * - the float32 ops through the backend's table against the float64 kernels
 *   on the same inputs, within F32_TOL of the largest reference value;
 * - the bf16 ops (and the norms' type mixes) against float64 on the same
 *   bf16-rounded inputs: within TOL_BF16 (one rounding of the output, 2^-8,
 *   and float32 arithmetic before it) where the op rounds once, TOL_T5 for
 *   T5's attention, whose bf16 model rounds the scores (|s| up to about 10
 *   here: an error of 2^-9 |s| in an exponent, 2 % of a probability) and the
 *   probabilities before they weigh the values; the data movement ops
 *   exactly.  That the bf16 ops round where torch's bf16 model does is
 *   checked bit for bit against the float32 kernels with those roundings.
 * Errors are max |got - want| / max |want| over a tensor, printed; outputs are
 * poisoned with NaN first; seeds fixed and printed. */
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
#include "core/bf16.h"
#include "../support/testutil.h"

#define F64_TOL 1e-12      /* float64 kernel vs the reference here */
#define F32_TOL 2e-6       /* float32 op vs float64 */
#define TOL_BF16 (1.0 / 128)
#define TOL_T5 4e-2

static backend *be;

static int setup(void **state)
{
	(void)state;
	titan_err e;
	be = backend_cpu_create(0, &e);
	return be ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	backend_free(be);
	return 0;
}

static void sync_ok(void)
{
	titan_err e;
	if (be->ops->sync(be, &e) != 0)
		fail_msg("op faulted: %s", e.msg);
}

/* A tensor in backend memory of type t with its values as float64 (v). */
typedef struct tens {
	be_dtype t;
	size_t n;
	void *p;
	double *v;
} tens;

static void tens_set(tens *x, size_t i, double d)
{
	if (x->t == BE_BF16) {
		uint16_t h = bf16_from_f32((float)d);
		((uint16_t *)x->p)[i] = h;
		x->v[i] = bf16_to_f32(h);
	} else {
		((float *)x->p)[i] = (float)d;
		x->v[i] = (float)d;
	}
}

static double tens_get(const tens *x, size_t i)
{
	return x->t == BE_BF16 ? bf16_to_f32(((const uint16_t *)x->p)[i]) : ((const float *)x->p)[i];
}

/* n values uniform in [-scale, scale) (NaN: poisoned), stored as t. */
static tens tens_new(be_dtype t, size_t n, double scale)
{
	titan_err e;
	tens x = {t, n, be->ops->alloc(be, (n ? n : 1) * be_dtype_size(t), &e),
		  malloc((n ? n : 1) * sizeof(double))};
	assert_non_null(x.p);
	assert_non_null(x.v);
	for (size_t i = 0; i < n; i++)
		tens_set(&x, i, isnan(scale) ? NAN : scale * test_urand());
	return x;
}

static void tens_free(tens *x)
{
	be->ops->free(be, x->p);
	free(x->v);
}

static double *dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));
	assert_non_null(p);
	return p;
}

static const char *tn(be_dtype t)
{
	return t == BE_BF16 ? "bf16" : "f32";
}

/* The op's output (after a sync) against want within tol. */
static void expect(const char *what, const tens *got, const double *want, double tol)
{
	sync_ok();
	double *g = dalloc(got->n);
	for (size_t i = 0; i < got->n; i++)
		g[i] = tens_get(got, i);
	double err = test_max_rel_d(g, want, got->n);
	print_message("  %-40s %-4s rel err %.2e (bound %.1e)\n", what, tn(got->t), err, tol);
	if (!(err <= tol))
		fail_msg("%s (%s): relative error %.3e over %.1e", what, tn(got->t), err, tol);
	free(g);
}

static void expect_f64(const char *what, const double *got, const double *want, size_t n)
{
	double err = test_max_rel_d(got, want, n);
	print_message("  %-40s f64  rel err %.2e (bound %.1e)\n", what, err, F64_TOL);
	if (!(err <= F64_TOL))
		fail_msg("%s: float64 kernel vs the reference: %.3e", what, err);
}

/* ---- T5's attention ---- */

/* softmax(q k^T + bias) v of one batch row and head, as matrices. */
static void t5_reference(double *out, const double *q, const double *k, const double *v,
			 const double *bias, int64_t b, int64_t l, int64_t h, int64_t dk)
{
	double *s = dalloc((size_t)(l * l));
	for (int64_t bi = 0; bi < b; bi++)
		for (int64_t hi = 0; hi < h; hi++) {
			for (int64_t i = 0; i < l; i++)
				for (int64_t j = 0; j < l; j++) {
					double dot = bias[(hi * l + i) * l + j];
					for (int64_t d = 0; d < dk; d++)
						dot += q[((bi * l + i) * h + hi) * dk + d] *
						       k[((bi * l + j) * h + hi) * dk + d];
					s[i * l + j] = dot;
				}
			for (int64_t i = 0; i < l; i++) {
				double mx = -INFINITY, sum = 0;
				for (int64_t j = 0; j < l; j++)
					mx = fmax(mx, s[i * l + j]);
				for (int64_t j = 0; j < l; j++)
					sum += s[i * l + j] = exp(s[i * l + j] - mx);
				for (int64_t d = 0; d < dk; d++) {
					double acc = 0;
					for (int64_t j = 0; j < l; j++)
						acc += s[i * l + j] / sum * v[((bi * l + j) * h + hi) * dk + d];
					out[((bi * l + i) * h + hi) * dk + d] = acc;
				}
			}
		}
	free(s);
}

static void t5_attention_matches_softmax_of_biased_scores(void **state)
{
	(void)state;
	test_seed(301);
	const int64_t cases[][4] = {{1, 1, 1, 1}, {2, 9, 4, 8}, {1, 40, 3, 64}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int ti = 0; ti < 2; ti++) {
			be_dtype t = ti ? BE_BF16 : BE_F32;
			int64_t b = cases[c][0], l = cases[c][1], h = cases[c][2], dk = cases[c][3];
			size_t n = (size_t)(b * l * h * dk), nb = (size_t)(h * l * l);
			print_message(" b=%lld l=%lld h=%lld dk=%lld\n", (long long)b, (long long)l,
				      (long long)h, (long long)dk);
			tens q = tens_new(t, n, 1.0), k = tens_new(t, n, 1.0), v = tens_new(t, n, 2.0);
			tens bias = tens_new(t, nb, 3.0), out = tens_new(t, n, NAN);
			double *want = dalloc(n), *ref = dalloc(n);
			cpu_t5_attention_f64(want, q.v, k.v, v.v, bias.v, b, l, h, dk, 0);
			t5_reference(ref, q.v, k.v, v.v, bias.v, b, l, h, dk);
			if (ti == 0)
				expect_f64("t5_attention", want, ref, n);
			be->ops->t5_attention(be, out.p, q.p, k.p, v.p, bias.p, t, b, l, h, dk);
			expect("t5_attention out", &out, want, t == BE_BF16 ? TOL_T5 : F32_TOL);
			tens_free(&q), tens_free(&k), tens_free(&v), tens_free(&bias), tens_free(&out);
			free(want), free(ref);
		}
}

/* The bf16 op rounds the scores and the probabilities as torch's bf16 model
 * stores them: it equals the float32 kernel with those roundings, rounded,
 * bit for bit, and not one rounding of the float32 result everywhere. */
static void t5_attention_bf16_rounds_as_the_bf16_model(void **state)
{
	(void)state;
	test_seed(302);
	int64_t b = 2, l = 17, h = 2, dk = 16;
	size_t n = (size_t)(b * l * h * dk), nb = (size_t)(h * l * l);
	tens q = tens_new(BE_BF16, n, 2.0), k = tens_new(BE_BF16, n, 2.0);
	tens v = tens_new(BE_BF16, n, 1.0), bias = tens_new(BE_BF16, nb, 2.0);
	tens out = tens_new(BE_BF16, n, NAN);
	float *qf = malloc(n * 4), *kf = malloc(n * 4), *vf = malloc(n * 4), *bf = malloc(nb * 4);
	float *rounded = malloc(n * 4), *once = malloc(n * 4);
	assert_true(qf && kf && vf && bf && rounded && once);
	for (size_t i = 0; i < n; i++)
		qf[i] = (float)q.v[i], kf[i] = (float)k.v[i], vf[i] = (float)v.v[i];
	for (size_t i = 0; i < nb; i++)
		bf[i] = (float)bias.v[i];
	cpu_t5_attention_f32(rounded, qf, kf, vf, bf, b, l, h, dk, 1);
	cpu_t5_attention_f32(once, qf, kf, vf, bf, b, l, h, dk, 0);
	be->ops->t5_attention(be, out.p, q.p, k.p, v.p, bias.p, BE_BF16, b, l, h, dk);
	sync_ok();
	size_t differ = 0;
	for (size_t i = 0; i < n; i++) {
		uint16_t got = ((uint16_t *)out.p)[i];
		assert_int_equal(got, bf16_from_f32(rounded[i]));
		differ += got != bf16_from_f32(once[i]);
	}
	print_message("  t5_attention bf16: %zu of %zu outputs differ from one rounding\n", differ,
		      n);
	assert_true(differ > 0);
	tens_free(&q), tens_free(&k), tens_free(&v), tens_free(&bias), tens_free(&out);
	free(qf), free(kf), free(vf), free(bf), free(rounded), free(once);
}

/* ---- elementwise: the gated gelu_new, swish ---- */

static void geglu_and_swish_match_float64(void **state)
{
	(void)state;
	test_seed(303);
	/* torch.nn.functional.gelu(1.0, approximate="tanh") in float32 */
	double one = 1, half = 0.5, g1;
	cpu_geglu_fwd_f64(&g1, &one, &half, 1, 0);
	assert_true(fabs(g1 - 0.5 * 0.8411920070648193) < 1e-7);
	const size_t sizes[] = {1, 1000, 70001};
	for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
		for (int ti = 0; ti < 2; ti++) {
			be_dtype t = ti ? BE_BF16 : BE_F32;
			size_t n = sizes[c];
			double tol = t == BE_BF16 ? TOL_BF16 : F32_TOL;
			print_message(" n=%zu\n", n);
			tens a = tens_new(t, n, 5.0), g = tens_new(t, n, 2.0), y = tens_new(t, n, NAN);
			double *want = dalloc(n);
			cpu_geglu_fwd_f64(want, a.v, g.v, (int64_t)n, 0);
			be->ops->geglu_fwd(be, y.p, a.p, g.p, t, (int64_t)n);
			expect("geglu y", &y, want, tol);
			be->ops->geglu_fwd(be, a.p, a.p, g.p, t, (int64_t)n); /* y = a in place */
			expect("geglu in place", &a, want, tol);
			const float betas[] = {1.0f, 1.702f};
			for (int bi = 0; bi < 2; bi++) {
				tens x = tens_new(t, n, 8.0);
				double *sw = dalloc(n);
				memcpy(sw, x.v, n * sizeof *sw);
				cpu_swish_f64(sw, betas[bi], (int64_t)n, t == BE_BF16);
				be->ops->swish(be, x.p, t, betas[bi], (int64_t)n);
				expect(bi ? "swish beta 1.702 (quick_gelu)" : "swish beta 1 (the autoencoder's)", &x,
				       sw, tol);
				tens_free(&x);
				free(sw);
			}
			tens_free(&a), tens_free(&g), tens_free(&y);
			free(want);
		}
}

/* The bf16 roundings of torch's bf16 model inside the ops: gelu_tanh(a)
 * before the gate's product; beta x and the sigmoid before swish's product
 * (x * torch.sigmoid(beta * x) is three ops).  Each op equals its float32
 * kernel with those roundings, rounded, bit for bit; where that differs from
 * one rounding of the float32 result, the op takes torch's. */
static void geglu_and_swish_bf16_round_as_torch(void **state)
{
	(void)state;
	test_seed(304);
	size_t n = 20000, differ[3] = {0};
	tens a = tens_new(BE_BF16, n, 4.0), g = tens_new(BE_BF16, n, 3.0), y = tens_new(BE_BF16, n, NAN);
	tens s1 = tens_new(BE_BF16, n, 0), s2 = tens_new(BE_BF16, n, 0);
	memcpy(s1.p, a.p, n * 2), memcpy(s2.p, a.p, n * 2);
	be->ops->geglu_fwd(be, y.p, a.p, g.p, BE_BF16, (int64_t)n);
	be->ops->swish(be, s1.p, BE_BF16, 1.0f, (int64_t)n);
	be->ops->swish(be, s2.p, BE_BF16, 1.702f, (int64_t)n);
	sync_ok();
	const uint16_t *got[3] = {y.p, s1.p, s2.p};
	for (size_t i = 0; i < n; i++) {
		float ai = (float)a.v[i], gi = (float)g.v[i], r[3], o[3];
		cpu_geglu_fwd_f32(&r[0], &ai, &gi, 1, 1);
		cpu_geglu_fwd_f32(&o[0], &ai, &gi, 1, 0);
		for (int k = 1; k < 3; k++) {
			r[k] = o[k] = ai;
			cpu_swish_f32(&r[k], k == 1 ? 1.0f : 1.702f, 1, 1);
			cpu_swish_f32(&o[k], k == 1 ? 1.0f : 1.702f, 1, 0);
		}
		for (int k = 0; k < 3; k++) {
			assert_int_equal(got[k][i], bf16_from_f32(r[k]));
			differ[k] += bf16_from_f32(r[k]) != bf16_from_f32(o[k]);
		}
	}
	print_message("  elements where torch's roundings differ from one: geglu %zu, swish %zu, "
		      "quick_gelu %zu of %zu\n", differ[0], differ[1], differ[2], n);
	assert_true(differ[0] > 0 && differ[1] > 0 && differ[2] > 0);
	tens_free(&a), tens_free(&g), tens_free(&y), tens_free(&s1), tens_free(&s2);
}

/* ---- norms ---- */

/* nn.GroupNorm written out: per sample and group, the statistics over its
 * channels' planes, then each channel's affine. */
static void groupnorm_reference(double *y, const double *x, const double *w, const double *b,
				int64_t n, int64_t c, int64_t hw, int64_t groups, double eps)
{
	int64_t cg = c / groups;
	for (int64_t s = 0; s < n; s++)
		for (int64_t g = 0; g < groups; g++) {
			double sum = 0, sq = 0;
			for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
				for (int64_t p = 0; p < hw; p++)
					sum += x[(s * c + ch) * hw + p];
			double mean = sum / (double)(cg * hw);
			for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
				for (int64_t p = 0; p < hw; p++) {
					double d = x[(s * c + ch) * hw + p] - mean;
					sq += d * d;
				}
			double rstd = 1 / sqrt(sq / (double)(cg * hw) + eps);
			for (int64_t ch = g * cg; ch < (g + 1) * cg; ch++)
				for (int64_t p = 0; p < hw; p++) {
					int64_t i = (s * c + ch) * hw + p;
					y[i] = (x[i] - mean) * rstd * w[ch] + b[ch];
				}
		}
}

typedef struct norm_case {
	int64_t n, c, hw, groups;
} norm_case;

static void groupnorm_every_type_mix_matches_the_reference(void **state)
{
	(void)state;
	test_seed(305);
	/* the autoencoder's 32 groups; one group (a layer norm over c hw); a
	 * group per channel (an instance norm) */
	const norm_case cases[] = {{2, 64, 9, 32}, {1, 6, 1000, 1}, {3, 4, 7, 4}, {1, 128, 256, 32}};
	const float eps = 1e-6f;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int mix = 0; mix < 8; mix++) {
			norm_case q = cases[k];
			be_dtype yt = mix & 1 ? BE_BF16 : BE_F32, xt = mix & 2 ? BE_BF16 : BE_F32;
			be_dtype wt = mix & 4 ? BE_BF16 : BE_F32;
			size_t nx = (size_t)(q.n * q.c * q.hw);
			print_message(" n=%lld c=%lld hw=%lld groups=%lld y %s x %s w %s\n",
				      (long long)q.n, (long long)q.c, (long long)q.hw,
				      (long long)q.groups, tn(yt), tn(xt), tn(wt));
			tens x = tens_new(xt, nx, 3.0), y = tens_new(yt, nx, NAN);
			tens w = tens_new(wt, (size_t)q.c, 1.5), b = tens_new(wt, (size_t)q.c, 0.5);
			for (size_t i = 0; i < nx; i++) /* an offset: the variance about the mean */
				tens_set(&x, i, x.v[i] + 2.0);
			double *want = dalloc(nx), *ref = dalloc(nx);
			cpu_groupnorm_fwd_f64(want, x.v, w.v, b.v, q.n, q.c, q.hw, q.groups, eps);
			groupnorm_reference(ref, x.v, w.v, b.v, q.n, q.c, q.hw, q.groups, eps);
			if (mix == 0)
				expect_f64("groupnorm", want, ref, nx);
			be->ops->groupnorm_fwd(be, y.p, yt, x.p, xt, w.p, b.p, wt, q.n, q.c, q.hw,
					       q.groups, eps);
			expect("groupnorm y", &y, want, yt == BE_BF16 ? TOL_BF16 : F32_TOL);
			tens_free(&x), tens_free(&y), tens_free(&w), tens_free(&b);
			free(want), free(ref);
		}
}

/* nn.LayerNorm is the group norm of one group of d channels of one value. */
static void layernorm_every_type_mix_matches_the_reference(void **state)
{
	(void)state;
	test_seed(306);
	const int64_t shapes[][2] = {{1, 1}, {5, 32}, {77, 768}};
	const float eps = 1e-5f;
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int mix = 0; mix < 8; mix++) {
			int64_t n = shapes[k][0], d = shapes[k][1];
			be_dtype yt = mix & 1 ? BE_BF16 : BE_F32, xt = mix & 2 ? BE_BF16 : BE_F32;
			be_dtype wt = mix & 4 ? BE_BF16 : BE_F32;
			size_t nx = (size_t)(n * d);
			print_message(" n=%lld d=%lld y %s x %s w %s\n", (long long)n, (long long)d,
				      tn(yt), tn(xt), tn(wt));
			tens x = tens_new(xt, nx, 4.0), y = tens_new(yt, nx, NAN);
			tens w = tens_new(wt, (size_t)d, 1.0), b = tens_new(wt, (size_t)d, 1.0);
			double *want = dalloc(nx), *ref = dalloc(nx);
			cpu_layernorm_fwd_f64(want, x.v, w.v, b.v, n, d, eps);
			groupnorm_reference(ref, x.v, w.v, b.v, n, d, 1, 1, eps);
			if (mix == 0)
				expect_f64("layernorm", want, ref, nx);
			be->ops->layernorm_fwd(be, y.p, yt, x.p, xt, w.p, b.p, wt, n, d, eps);
			expect("layernorm y", &y, want, yt == BE_BF16 ? TOL_BF16 : F32_TOL);
			tens_free(&x), tens_free(&y), tens_free(&w), tens_free(&b);
			free(want), free(ref);
		}
}

/* ---- the autoencoder's data movement ---- */

static void upsample2x_repeats_each_pixel_2x2(void **state)
{
	(void)state;
	test_seed(307);
	const int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {1, 4, 64, 48}};
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int ti = 0; ti < 2; ti++) {
			be_dtype t = ti ? BE_BF16 : BE_F32;
			int64_t n = shapes[k][0], c = shapes[k][1], h = shapes[k][2], w = shapes[k][3];
			size_t nx = (size_t)(n * c * h * w);
			tens x = tens_new(t, nx, 1.0), y = tens_new(t, 4 * nx, NAN);
			double *want = dalloc(4 * nx);
			for (int64_t p = 0; p < n * c; p++)
				for (int64_t i = 0; i < 2 * h; i++)
					for (int64_t j = 0; j < 2 * w; j++)
						want[(p * 2 * h + i) * 2 * w + j] =
							x.v[(p * h + i / 2) * w + j / 2];
			be->ops->upsample2x(be, y.p, x.p, t, n, c, h, w);
			print_message(" n=%lld c=%lld h=%lld w=%lld\n", (long long)n, (long long)c,
				      (long long)h, (long long)w);
			expect("upsample2x", &y, want, 0);
			tens_free(&x), tens_free(&y);
			free(want);
		}
}

typedef struct conv_case {
	int64_t n, c, h, w, k, stride, co;
	int64_t pad[4]; /* left, right, top, bottom */
} conv_case;

/* y (n, co, ho, wo) = conv2d(x zero-padded, W (co, c, k, k)), directly. */
static void conv_reference(double *y, const double *x, const double *wt, const conv_case *q,
			   int64_t ho, int64_t wo)
{
	for (int64_t s = 0; s < q->n; s++)
		for (int64_t o = 0; o < q->co; o++)
			for (int64_t oy = 0; oy < ho; oy++)
				for (int64_t ox = 0; ox < wo; ox++) {
					double acc = 0;
					for (int64_t ch = 0; ch < q->c; ch++)
						for (int64_t ki = 0; ki < q->k; ki++)
							for (int64_t kj = 0; kj < q->k; kj++) {
								int64_t iy = oy * q->stride + ki - q->pad[2];
								int64_t ix = ox * q->stride + kj - q->pad[0];
								if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w)
									continue;
								acc += wt[((o * q->c + ch) * q->k + ki) * q->k + kj] *
								       x[((s * q->c + ch) * q->h + iy) * q->w + ix];
							}
					y[((s * q->co + o) * ho + oy) * wo + ox] = acc;
				}
}

/* im2col's columns times the flattened weight are the convolution: the
 * autoencoder's 3x3 with padding 1, its downsampling 3x3 of stride 2 over
 * F.pad(x, (0, 1, 0, 1)), a 1x1, and odd sizes; taken 5 output pixels at a
 * time, the same columns. */
static void im2col_times_weight_is_the_convolution(void **state)
{
	(void)state;
	test_seed(308);
	const conv_case cases[] = {
		{2, 3, 8, 8, 3, 1, 4, {1, 1, 1, 1}},
		{1, 4, 9, 6, 3, 2, 2, {0, 1, 0, 1}},
		{2, 5, 4, 3, 1, 1, 3, {0, 0, 0, 0}},
		{1, 2, 5, 7, 2, 3, 2, {2, 0, 1, 3}},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int ti = 0; ti < 2; ti++) {
			const conv_case *q = &cases[k];
			be_dtype t = ti ? BE_BF16 : BE_F32;
			int64_t ho = (q->h + q->pad[2] + q->pad[3] - q->k) / q->stride + 1;
			int64_t wo = (q->w + q->pad[0] + q->pad[1] - q->k) / q->stride + 1;
			int64_t ckk = q->c * q->k * q->k;
			size_t nx = (size_t)(q->n * q->c * q->h * q->w), ncol = (size_t)(q->n * ckk * ho * wo);
			size_t ny = (size_t)(q->n * q->co * ho * wo);
			print_message(" n=%lld c=%lld %lldx%lld k=%lld stride %lld pad (%lld %lld %lld %lld)\n",
				      (long long)q->n, (long long)q->c, (long long)q->h, (long long)q->w,
				      (long long)q->k, (long long)q->stride, (long long)q->pad[0],
				      (long long)q->pad[1], (long long)q->pad[2], (long long)q->pad[3]);
			tens x = tens_new(t, nx, 1.0), cols = tens_new(t, ncol, NAN);
			double *wt = dalloc((size_t)(q->co * ckk)), *y = dalloc(ny), *viacols = dalloc(ny);
			double *want = dalloc(ncol);
			for (int64_t i = 0; i < q->co * ckk; i++)
				wt[i] = test_urand();
			cpu_im2col_f64(want, x.v, q->n, q->c, q->h, q->w, q->k, q->stride, q->pad, 0,
				       ho * wo);
			conv_reference(y, x.v, wt, q, ho, wo);
			for (int64_t s = 0; s < q->n; s++) /* W (co, ckk) @ cols[s] (ckk, ho wo) */
				cpu_matmul_f64(0, 0, q->co, ho * wo, ckk, 1, wt, ckk,
					       want + s * ckk * ho * wo, ho * wo, 0,
					       viacols + s * q->co * ho * wo, ho * wo);
			if (ti == 0)
				expect_f64("conv2d through im2col", viacols, y, ny);
			be->ops->im2col(be, cols.p, x.p, t, q->n, q->c, q->h, q->w, q->k, q->stride,
					q->pad, 0, ho * wo);
			expect("im2col cols", &cols, want, 0);
			tens part = tens_new(t, (size_t)(q->n * ckk * 5), NAN);
			double *wpart = dalloc(part.n);
			for (int64_t p0 = 0; p0 < ho * wo; p0 += 5) {
				int64_t np = ho * wo - p0 < 5 ? ho * wo - p0 : 5;
				be->ops->im2col(be, part.p, x.p, t, q->n, q->c, q->h, q->w, q->k,
						q->stride, q->pad, p0, np);
				for (int64_t r = 0; r < q->n * ckk; r++)
					for (int64_t j = 0; j < np; j++)
						wpart[r * np + j] = want[r * ho * wo + p0 + j];
				part.n = (size_t)(q->n * ckk * np);
				expect("im2col cols, 5 pixels at a time", &part, wpart, 0);
				part.n = (size_t)(q->n * ckk * 5);
			}
			tens_free(&x), tens_free(&cols), tens_free(&part);
			free(wpart);
			free(wt), free(y), free(viacols), free(want);
		}
}

/* Arguments no op can honour are faults at the next sync, not crashes. */
static void impossible_shapes_fault_at_sync(void **state)
{
	(void)state;
	tens x = tens_new(BE_F32, 60, 1.0), y = tens_new(BE_F32, 60, NAN);
	titan_err e;
	be->ops->groupnorm_fwd(be, y.p, BE_F32, x.p, BE_F32, x.p, x.p, BE_F32, 1, 6, 10, 4, 1e-6f);
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("  %s\n", e.msg);
	assert_non_null(strstr(e.msg, "groupnorm_fwd"));
	const int64_t pad[4] = {0, 0, 0, 0};
	be->ops->im2col(be, y.p, x.p, BE_F32, 1, 1, 2, 30, 3, 1, pad, 0, 1); /* 3x3 over 2 rows */
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("  %s\n", e.msg);
	assert_non_null(strstr(e.msg, "im2col"));
	be->ops->im2col(be, y.p, x.p, BE_F32, 1, 1, 6, 10, 3, 1, pad, 30, 3); /* pixels 30..32 of 0..31 */
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("  %s\n", e.msg);
	be->ops->swish(be, x.p, BE_E4M3, 1.0f, 60);
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("  %s\n", e.msg);
	tens_free(&x), tens_free(&y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t5_attention_matches_softmax_of_biased_scores),
		cmocka_unit_test(t5_attention_bf16_rounds_as_the_bf16_model),
		cmocka_unit_test(geglu_and_swish_match_float64),
		cmocka_unit_test(geglu_and_swish_bf16_round_as_torch),
		cmocka_unit_test(groupnorm_every_type_mix_matches_the_reference),
		cmocka_unit_test(layernorm_every_type_mix_matches_the_reference),
		cmocka_unit_test(upsample2x_repeats_each_pixel_2x2),
		cmocka_unit_test(im2col_times_weight_is_the_convolution),
		cmocka_unit_test(impossible_shapes_fault_at_sync),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
