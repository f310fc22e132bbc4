/* The fused ops of backend.h (what compile.enable runs) on the CPU backend:
 * each against a float64 reference built from the float64 kernels
 * (cpu_kernels.h _f64: the plain ops' definitions), in float32 and with
 * bfloat16 tensors, on random inputs from fixed, printed seeds, outputs
 * poisoned with NaN first; and against the plain ops they stand for, which the
 * CPU backend's fused ops must equal bit for bit (the model's plain and fused
 * paths then agree exactly on the CPU, and the CPU is the reference the CUDA
 * backend's fused kernels are tested against in tests/gpu).
 *
 * Error: max |got - want| / max |want| over a tensor.  Bounds: float32 results
 * 1e-5 (float32 arithmetic over sums of at most a few hundred terms lands
 * below 1e-6); bfloat16 results 2^-7 (one rounding to 8 bits, 2^-9 relative,
 * with room for the float32 arithmetic before it and for a bf16 input rounded
 * by the op that made it); 2e-2 where a bf16 intermediate feeds a product (the
 * bf16 head's logits gradient into dh and dw). */
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

#define TOL_F32 1e-5
#define TOL_BF16 (1.0 / 128)

static backend *be;

static int setup(void **s)
{
	(void)s;
	titan_err e = {0};
	be = backend_cpu_create(0, &e);
	return be ? 0 : -1;
}

static int teardown(void **s)
{
	(void)s;
	backend_free(be);
	return 0;
}

static void sync_ok(void)
{
	titan_err e = {0};
	if (be->ops->sync(be, &e) != 0)
		fail_msg("op faulted: %s", e.msg);
}

static double tol_of(be_dtype t)
{
	return t == BE_BF16 ? TOL_BF16 : TOL_F32;
}

static const char *tn(be_dtype t)
{
	return t == BE_BF16 ? "bf16" : "f32";
}

/* n random values in [-scale, scale), rounded in place to what type t holds,
 * and a buffer of type t holding them. */
static double *rnd(size_t n, double scale)
{
	double *x = malloc((n ? n : 1) * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * test_urand();
	return x;
}

static void *buf_of(double *x, size_t n, be_dtype t)
{
	void *p = malloc((n ? n : 1) * be_dtype_size(t));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		float f = (float)x[i];
		if (t == BE_BF16) {
			((uint16_t *)p)[i] = bf16_from_f32(f);
			x[i] = bf16_round(f);
		} else {
			((float *)p)[i] = f;
			x[i] = f;
		}
	}
	return p;
}

static void *poisoned(size_t n, be_dtype t)
{
	void *p = malloc((n ? n : 1) * be_dtype_size(t));
	assert_non_null(p);
	memset(p, 0xff, (n ? n : 1) * be_dtype_size(t)); /* NaN in both types */
	return p;
}

static void *copy_of(const void *p, size_t bytes)
{
	void *q = malloc(bytes ? bytes : 1);
	assert_non_null(q);
	memcpy(q, p, bytes);
	return q;
}

static double val(const void *p, be_dtype t, size_t i)
{
	return t == BE_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void expect_close(const char *what, const void *got, be_dtype t, const double *want,
			 size_t n, double tol)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double g = val(got, t, i);
		if (isnan(g))
			fail_msg("%s (%s): NaN at %zu (an element not written)", what, tn(t), i);
		num = fmax(num, fabs(g - want[i]));
		den = fmax(den, fabs(want[i]));
	}
	double err = den > 0 ? num / den : num;
	print_message("  %-40s %-4s rel err %.2e (bound %.1e)\n", what, tn(t), err, tol);
	if (!(err <= tol))
		fail_msg("%s (%s): relative error %.3e over %.1e", what, tn(t), err, tol);
}

static void expect_same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
	if (memcmp(a, b, bytes) != 0)
		fail_msg("%s: the fused op differs from the plain ops", what);
}

/* ---- rmsnorm with the residual add ---- */

/* r = x + delta, y = rmsnorm(r): against float64 (add, then the norm over the
 * stored r), and against add then rmsnorm_fwd; both with r written over x. */
static void rmsnorm_add_matches_add_then_norm(void **s)
{
	(void)s;
	test_seed(501);
	const int64_t n = 37, d = 96;
	const size_t nd = (size_t)(n * d);
	for (int k = 0; k < 3; k++) {
		/* (stream, branch and output types): float32; autocast's float32
		 * stream with a bf16 branch; bf16 throughout */
		be_dtype rt = k == 2 ? BE_BF16 : BE_F32, dt = k ? BE_BF16 : BE_F32, yt = dt;
		double *x = rnd(nd, 1), *dl = rnd(nd, 1), *w = rnd((size_t)d, 1);
		void *px = buf_of(x, nd, rt), *pd = buf_of(dl, nd, dt), *pw = buf_of(w, (size_t)d, rt);
		void *px2 = copy_of(px, nd * be_dtype_size(rt));
		void *py = poisoned(nd, yt), *py2 = poisoned(nd, yt);
		float *rstd = poisoned((size_t)n, BE_F32), *rstd2 = poisoned((size_t)n, BE_F32);
		be->ops->rmsnorm_add_fwd(be, py, yt, rstd, px, rt, px, pd, dt, pw, rt, n, d, 1e-5f);
		be->ops->add(be, px2, rt, px2, rt, pd, dt, (int64_t)nd);
		be->ops->rmsnorm_fwd(be, py2, yt, rstd2, px2, rt, pw, rt, n, d, 1e-5f);
		sync_ok();
		double *r = malloc(nd * sizeof *r), *y = malloc(nd * sizeof *y), *rs = malloc(n * 8);
		for (size_t i = 0; i < nd; i++)
			r[i] = rt == BE_BF16 ? bf16_round((float)(x[i] + dl[i])) : (float)(x[i] + dl[i]);
		cpu_rmsnorm_fwd_f64(y, rs, r, w, n, d, 1e-5);
		print_message(" stream %s, branch %s\n", tn(rt), tn(dt));
		expect_close("rmsnorm_add_fwd residual", px, rt, r, nd, tol_of(rt));
		expect_close("rmsnorm_add_fwd y", py, yt, y, nd, tol_of(yt));
		expect_close("rmsnorm_add_fwd rstd", rstd, BE_F32, rs, (size_t)n, TOL_F32);
		expect_same_bits("rmsnorm_add_fwd residual", px, px2, nd * be_dtype_size(rt));
		expect_same_bits("rmsnorm_add_fwd y", py, py2, nd * be_dtype_size(yt));
		expect_same_bits("rmsnorm_add_fwd rstd", rstd, rstd2, (size_t)n * 4);
		free(x), free(dl), free(w), free(px), free(pd), free(pw), free(px2), free(py);
		free(py2), free(rstd), free(rstd2), free(r), free(y), free(rs);
	}
}

/* dx = rmsnorm_bwd(dy) + dres, in place over dres (the model's use) and into
 * a separate dx; dw accumulated. */
static void rmsnorm_add_bwd_matches_norm_bwd_then_axpy(void **s)
{
	(void)s;
	test_seed(502);
	const int64_t n = 29, d = 80;
	const size_t nd = (size_t)(n * d);
	for (int k = 0; k < 3; k++) {
		be_dtype xt = k == 2 ? BE_BF16 : BE_F32, dyt = k ? BE_BF16 : BE_F32;
		be_dtype gt = k == 2 ? BE_BF16 : BE_F32; /* dx (the stream's) and dw */
		double *x = rnd(nd, 1), *w = rnd((size_t)d, 1), *dy = rnd(nd, 1), *dres = rnd(nd, 1);
		double *dw0 = rnd((size_t)d, 1);
		void *px = buf_of(x, nd, xt), *pw = buf_of(w, (size_t)d, xt), *pdy = buf_of(dy, nd, dyt);
		void *pdr = buf_of(dres, nd, gt), *pdw = buf_of(dw0, (size_t)d, gt);
		double *rs = malloc(n * 8), *ytmp = malloc(nd * 8);
		cpu_rmsnorm_fwd_f64(ytmp, rs, x, w, n, d, 1e-5);
		float *rstd = malloc(n * 4);
		for (int64_t i = 0; i < n; i++)
			rstd[i] = (float)rs[i], rs[i] = rstd[i];
		size_t gb = nd * be_dtype_size(gt), wb = (size_t)d * be_dtype_size(gt);
		void *dx_in = copy_of(pdr, gb), *dw_in = copy_of(pdw, wb);    /* in place */
		void *dx_out = poisoned(nd, gt), *dw_out = copy_of(pdw, wb);  /* separate */
		void *dx_pl = copy_of(pdr, gb), *dw_pl = copy_of(pdw, wb);    /* plain ops */
		void *tmp = poisoned(nd, gt);
		be->ops->rmsnorm_add_bwd(be, dx_in, gt, dx_in, dw_in, gt, pdy, dyt, px, xt, pw, xt,
					 rstd, n, d);
		be->ops->rmsnorm_add_bwd(be, dx_out, gt, pdr, dw_out, gt, pdy, dyt, px, xt, pw, xt,
					 rstd, n, d);
		be->ops->rmsnorm_bwd(be, tmp, gt, dw_pl, gt, pdy, dyt, px, xt, pw, xt, rstd, n, d);
		be->ops->axpy(be, dx_pl, gt, 1, tmp, gt, (int64_t)nd);
		sync_ok();
		double *dx = malloc(nd * 8), *dw = malloc((size_t)d * 8);
		memcpy(dw, dw0, (size_t)d * 8);
		cpu_rmsnorm_bwd_f64(dx, dw, dy, x, w, rs, n, d);
		for (size_t i = 0; i < nd; i++)
			dx[i] += dres[i];
		print_message(" x %s, dy %s, gradients %s\n", tn(xt), tn(dyt), tn(gt));
		expect_close("rmsnorm_add_bwd dx (in place)", dx_in, gt, dx, nd, tol_of(gt));
		expect_close("rmsnorm_add_bwd dx", dx_out, gt, dx, nd, tol_of(gt));
		expect_close("rmsnorm_add_bwd dw", dw_in, gt, dw, (size_t)d, tol_of(gt));
		expect_same_bits("rmsnorm_add_bwd dx", dx_in, dx_pl, gb);
		expect_same_bits("rmsnorm_add_bwd dx (separate)", dx_out, dx_pl, gb);
		expect_same_bits("rmsnorm_add_bwd dw", dw_in, dw_pl, wb);
		free(x), free(w), free(dy), free(dres), free(dw0), free(px), free(pw), free(pdy);
		free(pdr), free(pdw), free(rs), free(ytmp), free(rstd), free(dx_in), free(dw_in);
		free(dx_out), free(dw_out), free(dx_pl), free(dw_pl), free(tmp), free(dx), free(dw);
	}
}

/* ---- RoPE in the QKV layout ---- */

static void rope_qkv_splits_rotates_and_merges_back(void **s)
{
	(void)s;
	test_seed(503);
	const int64_t b = 2, t = 7, h = 4, hkv = 2, hd = 16;
	const int64_t nq = b * t * h * hd, nk = b * t * hkv * hd, nt = nq + 2 * nk;
	double *cs64 = malloc((size_t)(t * hd) * 8);
	float *cs = malloc((size_t)(t * hd) * 4);
	cpu_rope_table_f64(cs64, t, hd, 3, 500000.0, 0);
	for (int64_t i = 0; i < t * hd; i++)
		cs[i] = (float)cs64[i], cs64[i] = cs[i];
	for (int style = 0; style < 2; style++)
		for (int k = 0; k < 2; k++) {
			be_dtype xt = k ? BE_BF16 : BE_F32;
			double *qkv = rnd((size_t)nt, 1);
			void *pqkv = buf_of(qkv, (size_t)nt, xt);
			void *q = poisoned((size_t)nq, xt), *kk = poisoned((size_t)nk, xt);
			void *v = poisoned((size_t)nk, xt);
			be->ops->rope_qkv(be, q, kk, v, pqkv, xt, cs, b, t, h, hkv, hd, style);
			/* the plain ops: split by copies, then rope on q and k */
			size_t es = be_dtype_size(xt);
			void *q2 = malloc((size_t)nq * es), *k2 = malloc((size_t)nk * es);
			double *rq = malloc((size_t)nq * 8), *rk = malloc((size_t)nk * 8);
			double *rv = malloc((size_t)nk * 8);
			for (int64_t i = 0; i < b * t; i++) {
				const char *row = (const char *)pqkv + (size_t)(i * (h + 2 * hkv) * hd) * es;
				memcpy((char *)q2 + (size_t)(i * h * hd) * es, row, (size_t)(h * hd) * es);
				memcpy((char *)k2 + (size_t)(i * hkv * hd) * es, row + (size_t)(h * hd) * es,
				       (size_t)(hkv * hd) * es);
				const double *r64 = qkv + i * (h + 2 * hkv) * hd;
				memcpy(rq + i * h * hd, r64, (size_t)(h * hd) * 8);
				memcpy(rk + i * hkv * hd, r64 + h * hd, (size_t)(hkv * hd) * 8);
				memcpy(rv + i * hkv * hd, r64 + (h + hkv) * hd, (size_t)(hkv * hd) * 8);
			}
			be->ops->rope(be, q2, xt, cs, b, t, h, hd, style, 0);
			be->ops->rope(be, k2, xt, cs, b, t, hkv, hd, style, 0);
			void (*ref)(double *, const double *, int64_t, int64_t, int64_t, int64_t, int) =
				style == BE_ROPE_HALF ? cpu_rope_half_f64 : cpu_rope_f64;
			ref(rq, cs64, b, t, h, hd, 0);
			ref(rk, cs64, b, t, hkv, hd, 0);
			/* backward: the gradients of q, k, v packed and rotated back */
			double *dq = rnd((size_t)nq, 1), *dk = rnd((size_t)nk, 1), *dv = rnd((size_t)nk, 1);
			void *pdq = buf_of(dq, (size_t)nq, xt), *pdk = buf_of(dk, (size_t)nk, xt);
			void *pdv = buf_of(dv, (size_t)nk, xt), *dqkv = poisoned((size_t)nt, xt);
			be->ops->rope_qkv_bwd(be, dqkv, pdq, pdk, pdv, xt, cs, b, t, h, hkv, hd, style);
			sync_ok();
			ref(dq, cs64, b, t, h, hd, 1);
			ref(dk, cs64, b, t, hkv, hd, 1);
			double *rd = malloc((size_t)nt * 8);
			for (int64_t i = 0; i < b * t; i++) {
				double *row = rd + i * (h + 2 * hkv) * hd;
				memcpy(row, dq + i * h * hd, (size_t)(h * hd) * 8);
				memcpy(row + h * hd, dk + i * hkv * hd, (size_t)(hkv * hd) * 8);
				memcpy(row + (h + hkv) * hd, dv + i * hkv * hd, (size_t)(hkv * hd) * 8);
			}
			print_message(" %s pairs\n", style == BE_ROPE_HALF ? "rotate-half" : "interleaved");
			expect_close("rope_qkv q", q, xt, rq, (size_t)nq, tol_of(xt));
			expect_close("rope_qkv k", kk, xt, rk, (size_t)nk, tol_of(xt));
			expect_close("rope_qkv v", v, xt, rv, (size_t)nk, 0);
			expect_close("rope_qkv_bwd dqkv", dqkv, xt, rd, (size_t)nt, tol_of(xt));
			expect_same_bits("rope_qkv q", q, q2, (size_t)nq * es);
			expect_same_bits("rope_qkv k", kk, k2, (size_t)nk * es);
			free(qkv), free(pqkv), free(q), free(kk), free(v), free(q2), free(k2), free(rq);
			free(rk), free(rv), free(dq), free(dk), free(dv), free(pdq), free(pdk), free(pdv);
			free(dqkv), free(rd);
		}
	free(cs64), free(cs);
}

/* ---- the output projection fused with the loss ---- */

/* Chunks of 5 rows over 23 (the last one short); against the float64 head on
 * all rows at once, and against the model's plain sequence per chunk. */
static void lm_head_loss_matches_the_plain_head(void **s)
{
	(void)s;
	test_seed(504);
	const int64_t n = 23, d = 48, v = 97, chunk = 5;
	const size_t nd = (size_t)(n * d), vd = (size_t)(v * d);
	int32_t labels[23];
	for (int64_t i = 0; i < n; i++)
		labels[i] = i % 6 == 0 ? -100 : (int32_t)((i * 37) % v);
	for (int k = 0; k < 2; k++) {
		be_dtype t = k ? BE_BF16 : BE_F32, gt = BE_F32; /* autocast: bf16 head, float32 dw */
		double *h = rnd(nd, 1), *w = rnd(vd, 0.2), *dw0 = rnd(vd, 0.01);
		void *ph = buf_of(h, nd, t), *pw = buf_of(w, vd, t), *pdw = buf_of(dw0, vd, gt);
		void *pdw2 = copy_of(pdw, vd * 4);
		void *dh = poisoned(nd, t), *dh2 = poisoned(nd, t);
		void *logits = malloc((size_t)(chunk * v) * be_dtype_size(t));
		float scale = 1.0f / 19;
		double loss = 0, loss2 = 0;
		int64_t nv = 0, nv2 = 0;
		be->ops->lm_head_loss(be, ph, pw, t, labels, n, d, v, -100, &scale, dh, t, pdw, gt,
				      logits, chunk, &loss, &nv);
		size_t es = be_dtype_size(t);
		for (int64_t r0 = 0; r0 < n; r0 += chunk) { /* the plain ops, as model_mb.c runs them */
			int64_t c = n - r0 < chunk ? n - r0 : chunk;
			const char *hc = (const char *)ph + (size_t)(r0 * d) * es;
			be->ops->matmul(be, 0, 1, c, v, d, 1, hc, d, pw, d, t, 0, logits, v, t);
			be->ops->cross_entropy(be, logits, t, labels + r0, c, v, -100, scale, &loss2,
					       &nv2);
			be->ops->matmul(be, 0, 0, c, d, v, 1, logits, v, pw, d, t, 0,
					(char *)dh2 + (size_t)(r0 * d) * es, d, t);
			be->ops->matmul(be, 1, 0, v, d, c, 1, logits, v, hc, d, t, 1, pdw2, d, gt);
		}
		/* and the loss alone (validation): no gradient */
		double loss3 = 0;
		int64_t nv3 = 0;
		be->ops->lm_head_loss(be, ph, pw, t, labels, n, d, v, -100, NULL, NULL, t, NULL, gt,
				      logits, chunk, &loss3, &nv3);
		sync_ok();
		/* float64: logits of every row, their loss and gradient, the products */
		double *lg = malloc((size_t)(n * v) * 8), *dh64 = calloc(nd, 8), *dw64 = malloc(vd * 8);
		memcpy(dw64, dw0, vd * 8);
		cpu_matmul_f64(0, 1, n, v, d, 1, h, d, w, d, 0, lg, v);
		if (t == BE_BF16) /* the bf16 head stores its logits in bf16 */
			for (int64_t i = 0; i < n * v; i++)
				lg[i] = bf16_round((float)lg[i]);
		double ls64 = 0;
		int64_t nv64 = 0;
		cpu_cross_entropy_f64(lg, labels, n, v, -100, 1.0 / 19, &ls64, &nv64);
		cpu_matmul_f64(0, 0, n, d, v, 1, lg, v, w, d, 0, dh64, d);
		cpu_matmul_f64(1, 0, v, d, n, 1, lg, v, h, d, 1, dw64, d);
		print_message(" %s head: loss %.9f, float64 %.9f (%lld valid rows)\n", tn(t),
			      loss / (double)nv, ls64 / (double)nv64, (long long)nv);
		assert_int_equal(nv, nv64);
		assert_int_equal(nv3, nv64);
		assert_true(fabs(loss - ls64) <= (t == BE_BF16 ? 1e-3 : 1e-6) * fabs(ls64));
		assert_true(loss == loss2 && loss3 == loss);
		expect_close("lm_head_loss dh", dh, t, dh64, nd, t == BE_BF16 ? 2e-2 : TOL_F32);
		expect_close("lm_head_loss dw", pdw, gt, dw64, vd, t == BE_BF16 ? 2e-2 : TOL_F32);
		expect_same_bits("lm_head_loss dh", dh, dh2, nd * es);
		expect_same_bits("lm_head_loss dw", pdw, pdw2, vd * 4);
		free(h), free(w), free(dw0), free(ph), free(pw), free(pdw), free(pdw2), free(dh);
		free(dh2), free(logits), free(lg), free(dh64), free(dw64);
	}
}

/* ---- the optimizer on the device ---- */

/* sumsq_dev and clip_factor against the float64 sum; adamw_multi over three
 * spans (one without decay, one at an offset that is no multiple of 4) with
 * the clipping factor applied, against float64 AdamW on the clipped
 * gradients, and (float32) against grad_clip_scale then adamw per span. */
static void fused_optimizer_matches_clip_and_adamw(void **s)
{
	(void)s;
	test_seed(505);
	const int64_t n = 3001;
	const be_span spans[3] = {{0, 1000, 0.1f}, {1000, 3, 0.0f}, {1003, 1998, 0.1f}};
	for (int k = 0; k < 2; k++) {
		be_dtype t = k ? BE_BF16 : BE_F32;
		size_t es = be_dtype_size(t), bytes = (size_t)n * es;
		double *p = rnd((size_t)n, 1), *g = rnd((size_t)n, 0.5), *m = rnd((size_t)n, 0.01);
		double *v = rnd((size_t)n, 1e-4);
		for (int64_t i = 0; i < n; i++)
			v[i] = fabs(v[i]);
		void *pp = buf_of(p, (size_t)n, t), *pg = buf_of(g, (size_t)n, t);
		void *pm = buf_of(m, (size_t)n, t), *pv = buf_of(v, (size_t)n, t);
		void *pp2 = copy_of(pp, bytes), *pg2 = copy_of(pg, bytes), *pm2 = copy_of(pm, bytes);
		void *pv2 = copy_of(pv, bytes);
		be_adamw_step st = {.lr = 1e-3, .b1 = 0.9, .b2 = 0.95, .eps = 1e-8,
				    .bc1 = 1 - pow(0.9, 4), .bc2 = 1 - pow(0.95, 4)};
		double sumsq = -1;
		const float max_norm = 1.0f;
		be->ops->sumsq_dev(be, &sumsq, pg, t, n);
		be->ops->clip_factor(be, &st, &sumsq, max_norm);
		be->ops->adamw_multi(be, pp, pg, pm, pv, t, spans, 3, &st);
		sync_ok();
		double want = cpu_sumsq_f64(g, n), norm = sqrt(want);
		double clip = fmin(1.0, max_norm / (norm + 1e-6));
		print_message(" %s: sumsq %.10g (float64 %.10g), norm %.6g, clip %.6g\n", tn(t), sumsq,
			      want, (double)st.norm, (double)st.clip);
		assert_true(fabs(sumsq - want) <= 1e-12 * want);
		assert_true(fabs(st.norm - norm) <= 1e-6 * norm);
		assert_true(fabs(st.clip - clip) <= 1e-6 && clip < 1);
		for (int i = 0; i < 3; i++) {
			int64_t o = spans[i].offset;
			for (int64_t j = 0; j < spans[i].n; j++)
				g[o + j] *= st.clip;
			cpu_adamw_consts c = cpu_adamw_consts_of(st.lr, st.b1, st.b2, st.eps, spans[i].wd,
								 st.bc1, st.bc2);
			cpu_adamw_f64(p + o, g + o, m + o, v + o, spans[i].n, &c);
		}
		expect_close("adamw_multi p", pp, t, p, (size_t)n, tol_of(t));
		expect_close("adamw_multi exp_avg", pm, t, m, (size_t)n, tol_of(t));
		expect_close("adamw_multi exp_avg_sq", pv, t, v, (size_t)n, tol_of(t));
		if (t == BE_F32) { /* the plain ops: clip in place, then AdamW span by span */
			double nrm = sqrt(be->ops->sumsq(be, pg2, t, n)), coef = max_norm / (nrm + 1e-6);
			be->ops->scale(be, pg2, t, (float)coef, n);
			for (int i = 0; i < 3; i++) {
				size_t off = (size_t)spans[i].offset * es;
				be->ops->adamw(be, (char *)pp2 + off, (char *)pg2 + off, (char *)pm2 + off,
					       (char *)pv2 + off, t, spans[i].n, st.lr, st.b1, st.b2,
					       st.eps, spans[i].wd, st.bc1, st.bc2);
			}
			sync_ok();
			expect_same_bits("adamw_multi p", pp, pp2, bytes);
			expect_same_bits("adamw_multi exp_avg", pm, pm2, bytes);
			expect_same_bits("adamw_multi exp_avg_sq", pv, pv2, bytes);
		}
		free(p), free(g), free(m), free(v), free(pp), free(pg), free(pm), free(pv);
		free(pp2), free(pg2), free(pm2), free(pv2);
	}
	/* no clipping: max_norm 0 leaves the factor 1 */
	be_adamw_step st = {0};
	double big = 1e6;
	be->ops->clip_factor(be, &st, &big, 0);
	sync_ok();
	assert_true(st.clip == 1.0f && fabs(st.norm - 1000.0) < 1e-3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rmsnorm_add_matches_add_then_norm),
		cmocka_unit_test(rmsnorm_add_bwd_matches_norm_bwd_then_axpy),
		cmocka_unit_test(rope_qkv_splits_rotates_and_merges_back),
		cmocka_unit_test(lm_head_loss_matches_the_plain_head),
		cmocka_unit_test(fused_optimizer_matches_clip_and_adamw),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
