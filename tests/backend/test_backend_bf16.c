/* The CPU backend's bfloat16 ops, through its op table, against the float64
 * kernels (cpu_kernels.h _f64) on the same inputs: every input is drawn, then
 * rounded to the element type the op reads, and the float64 reference runs on
 * those rounded values, so what is measured is the op's own error.
 *
 * Bounds, element by element (|got - ref| <= bound, the test prints the worst
 * ratio).  u = 2^-8 is bfloat16's unit roundoff (8 significant bits, round to
 * nearest even), e = 2^-24 float32's.  An op computes in float32 and rounds
 * once where it stores bf16, so each bound is u_out |ref| (u for a bf16 output,
 * e for float32) plus the float32 arithmetic's own error, written per op
 * beside its test as c e times the magnitudes the result is a sum of (the
 * "condition" terms): a result that cancels is held to the size of its terms,
 * not of itself.  A matmul's float32 sum of K products errs by at most
 * (K + 2) e sum |a b| (the products of two bf16 values are exact in float32),
 * so its bound grows with K.
 *
 * Each op runs every combination of float32 and bfloat16 its arguments may
 * take (the modes' combinations listed in backend.h among them); inputs have
 * fixed, printed seeds; outputs are poisoned before the op runs. */
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
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"
#include "../support/att_ref.h"
#include "../support/testutil.h"

#define U16 (1.0 / 256.0)      /* bfloat16 unit roundoff, 2^-8 */
#define U32 (1.0 / 16777216.0) /* float32 unit roundoff, 2^-24 */


static double u_of(be_dtype t)
{
	return t == BE_BF16 ? U16 : U32;
}

static const char *tn(be_dtype t)
{
	return t == BE_BF16 ? "bf16" : "f32";
}

/* A tensor in an element type, with its values in float64 (ref). */
typedef struct tens {
	be_dtype t;
	size_t n;
	void *p;
	double *ref;
} tens;

static void set_elem(tens *x, size_t i, double v)
{
	if (x->t == BE_BF16) {
		uint16_t h = bf16_from_f32((float)v);
		((uint16_t *)x->p)[i] = h;
		x->ref[i] = bf16_to_f32(h);
	} else {
		((float *)x->p)[i] = (float)v;
		x->ref[i] = (float)v;
	}
}

static double get_elem(const tens *x, size_t i)
{
	return x->t == BE_BF16 ? bf16_to_f32(((const uint16_t *)x->p)[i]) : ((const float *)x->p)[i];
}

/* n values uniform in [-scale, scale), rounded to t. */
static tens tens_rand(be_dtype t, size_t n, double scale)
{
	tens x = {t, n, malloc((n ? n : 1) * be_dtype_size(t)), malloc((n ? n : 1) * sizeof(double))};
	assert_non_null(x.p);
	assert_non_null(x.ref);
	for (size_t i = 0; i < n; i++)
		set_elem(&x, i, scale * test_urand());
	return x;
}

/* An output: poisoned with NaN so an element the op forgets fails. */
static tens tens_out(be_dtype t, size_t n)
{
	tens x = tens_rand(t, n, 0);
	for (size_t i = 0; i < n; i++)
		set_elem(&x, i, NAN);
	return x;
}

static void tens_free(tens *x)
{
	free(x->p);
	free(x->ref);
}

/* The worst |got - ref| / bound over n elements; fails above 1. */
static void check(const char *what, const tens *got, const double *ref, const double *bound,
		  size_t n)
{
	double worst = 0, abs_err = 0;
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		double g = get_elem(got, i), err = fabs(g - ref[i]);
		double r = err / bound[i];
		if (!(r <= worst) || isnan(g)) { /* NaN counts as a failure */
			worst = isnan(g) ? INFINITY : r;
			at = i;
		}
		abs_err = fmax(abs_err, err);
	}
	print_message("%-44s max err %.3g, worst err/bound %.3f\n", what, abs_err, worst);
	if (!(worst <= 1))
		fail_msg("%s: element %zu: got %.9g, want %.9g within %.3g", what, at,
			 get_elem(got, at), ref[at], bound[at]);
}

static double *dalloc(size_t n)
{
	double *p = calloc(n ? n : 1, sizeof(double));
	assert_non_null(p);
	return p;
}

static backend *be_open(int threads)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(threads, &e);
	assert_non_null(be);
	return be;
}

static void be_sync_ok(backend *be)
{
	titan_err e = {0};
	if (be->ops->sync(be, &e) != 0)
		fail_msg("op faulted: %s", e.msg);
}

static const be_dtype types[2] = {BE_F32, BE_BF16};

/* ---- convert ---- */

/* Round to nearest even, by definition: the nearer of the two bf16 neighbours,
 * the one with an even last bit on a tie. */
static double rne_bf16(double x)
{
	int ex;
	frexp(x, &ex);
	double ulp = ldexp(1.0, ex - 8); /* 8 significant bits */
	double lo = floor(x / ulp) * ulp, hi = lo + ulp;
	if (x - lo < hi - x)
		return lo;
	if (hi - x < x - lo)
		return hi;
	return fmod(fabs(lo / ulp), 2) == 0 ? lo : hi;
}

static void convert_rounds_every_float_to_nearest_even_bf16_and_back_exactly(void **s)
{
	(void)s;
	test_seed(101);
	backend *be = be_open(0);
	size_t n = 200000;
	float *x = malloc(n * 4), *back = malloc(n * 4);
	uint16_t *h = malloc(n * 2);
	for (size_t i = 0; i < n; i++) { /* wide exponents, and exact ties */
		float v = (float)(test_urand() * pow(2, 40 * test_urand()));
		if (i % 7 == 0) {
			uint32_t u;
			memcpy(&u, &v, 4);
			u = (u & 0xffff0000u) | 0x8000u;
			memcpy(&v, &u, 4);
		}
		x[i] = v;
	}
	be->ops->convert(be, h, BE_BF16, x, BE_F32, (int64_t)n);
	be->ops->convert(be, back, BE_F32, h, BE_BF16, (int64_t)n);
	be_sync_ok(be);
	for (size_t i = 0; i < n; i++) {
		double want = x[i] == 0 ? 0 : rne_bf16(x[i]);
		if ((double)back[i] != want)
			fail_msg("convert %.9g: got %.9g, want %.9g", x[i], back[i], want);
		assert_int_equal(bf16_from_f32(back[i]), h[i]);
	}
	free(x), free(back), free(h);
	backend_free(be);
}

/* ---- matmul ---- */

/* C = alpha op(A) op(B) + beta C with bf16 A, B, C of type ct; with pad the
 * leading dimensions are wider than the rows (oneDNN then takes another kernel
 * than for dense operands).  Bound: u_out |ref| + (K + 2) e (|alpha| sum_p |a b| +
 * |beta c0|): the products are exact, the float32 sum of K of them errs by
 * (K - 1) e times the sum of their sizes, alpha and beta add one rounding each. */
static void check_matmul(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
			 float alpha, float beta, be_dtype ct, int pad)
{
	int64_t lda = (ta ? m : k) + 3 * pad, ldb = (tb ? k : n) + 5 * pad, ldc = n + 2 * pad;
	tens a = tens_rand(BE_BF16, (size_t)((ta ? k : m) * lda), 1);
	tens b = tens_rand(BE_BF16, (size_t)((tb ? n : k) * ldb), 1);
	tens c = tens_rand(ct, (size_t)(m * ldc), 1);
	double *ref = dalloc((size_t)(m * ldc)), *bound = dalloc((size_t)(m * ldc));
	double *cond = dalloc((size_t)(m * ldc));
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < ldc; j++) {
			double acc = 0, mag = 0;
			for (int64_t p = 0; p < k && j < n; p++) {
				double pr = a.ref[ta ? p * lda + i : i * lda + p] *
					    b.ref[tb ? j * ldb + p : p * ldb + j];
				acc += pr;
				mag += fabs(pr);
			}
			size_t o = (size_t)(i * ldc + j);
			if (j >= n) { /* the padding past n is not touched */
				ref[o] = c.ref[o];
				bound[o] = 1e-30;
				continue;
			}
			ref[o] = alpha * acc + beta * c.ref[o];
			cond[o] = fabs(alpha) * mag + fabs(beta * c.ref[o]);
			bound[o] = u_of(ct) * fabs(ref[o]) + (double)(k + 2) * U32 * cond[o] + 1e-30;
		}
	if (beta == 0) /* C is not read: NaN there must not leak */
		for (size_t i = 0; i < c.n; i++)
			if ((int64_t)(i % (size_t)ldc) < n)
				set_elem(&c, i, NAN);
	be->ops->matmul(be, ta, tb, m, n, k, alpha, a.p, lda, b.p, ldb, BE_BF16, beta, c.p, ldc,
			ct);
	be_sync_ok(be);
	char what[96];
	snprintf(what, sizeof what, "matmul %c%c %lldx%lldx%lld a%.2g b%.2g C %s %s",
		 ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
		 (double)alpha, (double)beta, tn(ct), k ? backend_cpu_bf16_gemm(be) : "-");
	check(what, &c, ref, bound, c.n);
	tens_free(&a), tens_free(&b), tens_free(&c);
	free(ref), free(bound), free(cond);
}

static void matmul_bf16_every_transpose_and_output_within_k_bound(void **s)
{
	(void)s;
	test_seed(102);
	backend *be = be_open(0);
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int ci = 0; ci < 2; ci++) {
				check_matmul(be, ta, tb, 37, 45, 300, 1, 0, types[ci], 0);
				check_matmul(be, ta, tb, 29, 17, 1000, 0.5f, 1, types[ci], 0);
				check_matmul(be, ta, tb, 37, 45, 300, 0.5f, 1, types[ci], 1);
			}
	/* The linears' products (x W^T, dy W, dy^T x accumulated), large enough
	 * for every thread; a product over k = 0 leaves beta C. */
	check_matmul(be, 0, 1, 256, 192, 128, 1, 0, BE_BF16, 0);
	check_matmul(be, 0, 0, 256, 128, 192, 1, 0, BE_BF16, 0);
	check_matmul(be, 1, 0, 192, 128, 256, 1, 1, BE_F32, 0);
	check_matmul(be, 1, 0, 192, 128, 256, 1, 1, BE_BF16, 0);
	check_matmul(be, 0, 0, 7, 9, 0, 1, 0.5f, BE_BF16, 0);
	/* Past one 16 MiB block of the portable path's widened operands: two
	 * blocks of A's rows (A transposed, C bf16 read with beta), then two of
	 * B's columns (B transposed); one primitive each on oneDNN. */
	check_matmul(be, 1, 0, 4200, 70, 1100, 1, 1, BE_BF16, 0);
	check_matmul(be, 0, 1, 20, 3900, 1100, 0.5f, 0, BE_F32, 0);
	backend_free(be);
}

/* The same product twice, and a bf16 C accumulated with beta 1, repeat bit
 * for bit (a primitive from the cache runs as the first). */
static void matmul_bf16_repeats_bit_for_bit(void **s)
{
	(void)s;
	test_seed(103);
	backend *be = be_open(0);
	int64_t m = 96, n = 80, k = 512;
	tens a = tens_rand(BE_BF16, (size_t)(m * k), 1), b = tens_rand(BE_BF16, (size_t)(k * n), 1);
	tens c1 = tens_rand(BE_BF16, (size_t)(m * n), 1);
	void *c2 = malloc(c1.n * 2);
	memcpy(c2, c1.p, c1.n * 2);
	be->ops->matmul(be, 0, 0, m, n, k, 1, a.p, k, b.p, n, BE_BF16, 1, c1.p, n, BE_BF16);
	be->ops->matmul(be, 0, 0, m, n, k, 1, a.p, k, b.p, n, BE_BF16, 1, c2, n, BE_BF16);
	be_sync_ok(be);
	assert_memory_equal(c1.p, c2, c1.n * 2);
	tens_free(&a), tens_free(&b), tens_free(&c1);
	free(c2);
	backend_free(be);
}

/* ---- rmsnorm ---- */

/* Forward: y = x r w with r = (mean x^2 + eps)^-1/2, the sum in double, r and
 * the two products rounded in float32: |y - ref| <= (u_y + 4 e) |ref|; rstd
 * within 2 e. */
static void check_rmsnorm_fwd(backend *be, be_dtype yt, be_dtype xt, be_dtype wt, int64_t n,
			      int64_t d)
{
	size_t nd = (size_t)(n * d);
	tens x = tens_rand(xt, nd, 3), w = tens_rand(wt, (size_t)d, 1.5), y = tens_out(yt, nd);
	float *rstd = malloc((size_t)n * 4);
	double *ref = dalloc(nd), *rref = dalloc((size_t)n), *bound = dalloc(nd);
	cpu_rmsnorm_fwd_f64(ref, rref, x.ref, w.ref, n, d, 1e-5);
	for (size_t i = 0; i < nd; i++)
		bound[i] = (u_of(yt) + 4 * U32) * fabs(ref[i]) + 1e-30;
	be->ops->rmsnorm_fwd(be, y.p, yt, rstd, x.p, xt, w.p, wt, n, d, 1e-5f);
	be_sync_ok(be);
	char what[96];
	snprintf(what, sizeof what, "rmsnorm_fwd x %s w %s -> y %s", tn(xt), tn(wt), tn(yt));
	check(what, &y, ref, bound, nd);
	for (int64_t i = 0; i < n; i++)
		assert_true(fabs(rstd[i] - rref[i]) <= 2 * U32 * rref[i]);
	tens_free(&x), tens_free(&w), tens_free(&y);
	free(rstd), free(ref), free(rref), free(bound);
}

static void rmsnorm_fwd_every_type_mix_within_bound(void **s)
{
	(void)s;
	test_seed(104);
	backend *be = be_open(0);
	for (int m = 0; m < 8; m++) {
		check_rmsnorm_fwd(be, types[m & 1], types[m >> 1 & 1], types[m >> 2], 5, 70);
		check_rmsnorm_fwd(be, types[m & 1], types[m >> 1 & 1], types[m >> 2], 300, 256);
	}
	backend_free(be);
}

/* Backward: dx = r w dy - c x, c = r^3 mean(w dy x) (the mean in double, c
 * rounded): |dx - ref| <= u_dx |ref| + 8 e (|r w dy| + |c x|), the float32
 * rstd the op reads adding 3 e.  dw += sum_i dy x r in float32 over n rows:
 * |dw - ref| <= u_dw |ref| + (n + 3) e (sum_i |dy x r| + |dw0|). */
static void check_rmsnorm_bwd(backend *be, const be_dtype t[5], int64_t n, int64_t d)
{
	be_dtype dxt = t[0], dwt = t[1], dyt = t[2], xt = t[3], wt = t[4];
	size_t nd = (size_t)(n * d);
	tens x = tens_rand(xt, nd, 3), w = tens_rand(wt, (size_t)d, 1.5), dy = tens_rand(dyt, nd, 1);
	tens dx = tens_out(dxt, nd), dw = tens_rand(dwt, (size_t)d, 0.5);
	double *y = dalloc(nd), *rref = dalloc((size_t)n), *dxref = dalloc(nd);
	double *dwref = dalloc((size_t)d), *bx = dalloc(nd), *bw = dalloc((size_t)d);
	float *rstd = malloc((size_t)n * 4);
	cpu_rmsnorm_fwd_f64(y, rref, x.ref, w.ref, n, d, 1e-5);
	memcpy(dwref, dw.ref, (size_t)d * 8);
	cpu_rmsnorm_bwd_f64(dxref, dwref, dy.ref, x.ref, w.ref, rref, n, d);
	for (int64_t i = 0; i < n; i++) {
		rstd[i] = (float)rref[i];
		double dot = 0, r = rref[i];
		for (int64_t j = 0; j < d; j++)
			dot += w.ref[j] * dy.ref[i * d + j] * x.ref[i * d + j];
		double c = dot / (double)d * r * r * r;
		for (int64_t j = 0; j < d; j++) {
			size_t o = (size_t)(i * d + j);
			bx[o] = u_of(dxt) * fabs(dxref[o]) +
				11 * U32 * (fabs(r * w.ref[j] * dy.ref[o]) + fabs(c * x.ref[o])) + 1e-30;
		}
	}
	for (int64_t j = 0; j < d; j++) {
		double mag = fabs(dw.ref[j]);
		for (int64_t i = 0; i < n; i++)
			mag += fabs(dy.ref[i * d + j] * x.ref[i * d + j] * rref[i]);
		bw[j] = u_of(dwt) * fabs(dwref[j]) + (double)(n + 3) * U32 * mag + 1e-30;
	}
	be->ops->rmsnorm_bwd(be, dx.p, dxt, dw.p, dwt, dy.p, dyt, x.p, xt, w.p, wt, rstd, n, d);
	be_sync_ok(be);
	char what[96];
	snprintf(what, sizeof what, "rmsnorm_bwd dy %s x %s w %s -> dx %s dw %s", tn(dyt), tn(xt),
		 tn(wt), tn(dxt), tn(dwt));
	check(what, &dx, dxref, bx, nd);
	check("  dw (accumulated)", &dw, dwref, bw, (size_t)d);
	tens_free(&x), tens_free(&w), tens_free(&dy), tens_free(&dx), tens_free(&dw);
	free(y), free(rref), free(dxref), free(dwref), free(bx), free(bw), free(rstd);
}

static void rmsnorm_bwd_every_type_mix_within_bound(void **s)
{
	(void)s;
	test_seed(105);
	backend *be = be_open(0);
	for (int m = 0; m < 32; m++) {
		be_dtype t[5];
		for (int i = 0; i < 5; i++)
			t[i] = types[m >> i & 1];
		check_rmsnorm_bwd(be, t, 6, 130);
		if (m == 0x04 || m == 0x1d || m == 0x1f) /* the modes' mixes, on every thread */
			check_rmsnorm_bwd(be, t, 300, 256);
	}
	backend_free(be);
}

/* ---- rope ---- */

/* Each output x0 cos - x1 sin (or x0 sin + x1 cos) in float32, the table itself
 * rounded to float32: |y - ref| <= u_x |ref| + 4 e (|x0 cos| + |x1 sin|). */
static void rope_bf16_both_styles_and_inverse_within_bound(void **s)
{
	(void)s;
	test_seed(106);
	backend *be = be_open(0);
	int64_t b = 2, t = 70, h = 6, hd = 64;
	size_t n = (size_t)(b * t * h * hd), nc = (size_t)(t * hd);
	double *cs = dalloc(nc), *ref = dalloc(n), *bound = dalloc(n);
	float *csf = malloc(nc * 4);
	cpu_rope_table_f64(cs, t, hd, 0, 500000.0, 8.0);
	for (size_t i = 0; i < nc; i++)
		csf[i] = (float)cs[i];
	for (int style = 0; style < 2; style++)
		for (int inv = 0; inv < 2; inv++) {
			tens x = tens_rand(BE_BF16, n, 2);
			memcpy(ref, x.ref, n * 8);
			if (style == BE_ROPE_HALF)
				cpu_rope_half_f64(ref, cs, b, t, h, hd, inv);
			else
				cpu_rope_f64(ref, cs, b, t, h, hd, inv);
			for (size_t i = 0; i < n; i++) {
				size_t row = i / (size_t)hd * (size_t)hd, j = i % (size_t)hd;
				size_t ti = i / (size_t)(h * hd) % (size_t)t, half = (size_t)hd / 2;
				size_t p = style == BE_ROPE_HALF ? j % half : j / 2;
				size_t j0 = style == BE_ROPE_HALF ? p : 2 * p;
				size_t j1 = style == BE_ROPE_HALF ? p + half : 2 * p + 1;
				double co = cs[(ti * half + p) * 2], si = cs[(ti * half + p) * 2 + 1];
				double mag = fabs(x.ref[row + j0]) * (fabs(co) + fabs(si)) +
					     fabs(x.ref[row + j1]) * (fabs(co) + fabs(si));
				bound[i] = U16 * fabs(ref[i]) + 4 * U32 * mag + 1e-30;
			}
			be->ops->rope(be, x.p, BE_BF16, csf, b, t, h, hd, style, inv);
			be_sync_ok(be);
			check(style ? (inv ? "rope half inverse bf16" : "rope half bf16")
				    : (inv ? "rope interleaved inverse bf16" : "rope interleaved bf16"),
			      &x, ref, bound, n);
			tens_free(&x);
		}
	free(cs), free(ref), free(bound), free(csf);
	backend_free(be);
}

/* ---- attention ---- */

/* bf16 q, k, v (and dout) go through the float32 kernel, which
 * test_backend_ops holds within 2e-6 of float64 relative to the largest
 * element; each output is rounded once: |got - ref| <= u_out |ref| +
 * 4e-6 max|ref|.  The reference is the definition on the full mask
 * (att_ref) in float64 over the same bf16 inputs. */
static void check_attention(backend *be, const be_attn *shape, be_dtype ot, be_dtype gt)
{
	be_attn a = *shape;
	a.qkv = BE_BF16, a.out = ot, a.dout = BE_BF16, a.grad = gt;
	size_t nq = (size_t)(a.b * a.tq * a.h * a.hd), nk = (size_t)(a.b * a.tk * a.hkv * a.hd);
	size_t nv = (size_t)(a.b * a.tk * a.hkv * a.hdv), no = (size_t)(a.b * a.tq * a.h * a.hdv);
	size_t nl = (size_t)(a.b * a.h * a.tq);
	tens q = tens_rand(BE_BF16, nq, 1.5), k = tens_rand(BE_BF16, nk, 1.5);
	tens v = tens_rand(BE_BF16, nv, 1), dout = tens_rand(BE_BF16, no, 1);
	tens out = tens_out(ot, no), dq = tens_out(gt, nq), dk = tens_out(gt, nk), dv = tens_out(gt, nv);
	double *o = dalloc(no), *lse = dalloc(nl), *rq = dalloc(nq), *rk = dalloc(nk), *rv = dalloc(nv);
	float *flse = malloc(nl * 4);
	/* sinks (h) float32 for the backend, their float64 copies for the
	 * reference; dsinks accumulated by the backend from zero */
	double sk[16], dsk[16] = {0};
	float fdsk[16] = {0};
	assert_true(a.h <= 16);
	if (a.sinks) {
		for (int64_t i = 0; i < a.h; i++)
			sk[i] = ((const float *)a.sinks)[i];
		a.dsinks = fdsk;
	}
	att_ref_fwd(o, lse, q.ref, k.ref, v.ref, a.sinks ? sk : NULL, &a);
	be->ops->attention_fwd(be, out.p, flse, q.p, k.p, v.p, &a);
	be_sync_ok(be);
	/* the backward reads the out the forward stored, as a model does: so does
	 * its reference */
	double *oin = dalloc(no);
	for (size_t i = 0; i < no; i++)
		oin[i] = get_elem(&out, i);
	att_ref_bwd(rq, rk, rv, a.sinks ? dsk : NULL, dout.ref, q.ref, k.ref, v.ref, oin,
		    a.sinks ? sk : NULL, &a);
	be->ops->attention_bwd(be, dq.p, dk.p, dv.p, dout.p, q.p, k.p, v.p, out.p, flse, &a);
	be_sync_ok(be);
	const struct {
		const char *name;
		tens *got;
		double *ref;
		size_t n;
	} outs[] = {{"out", &out, o, no}, {"dq", &dq, rq, nq}, {"dk", &dk, rk, nk}, {"dv", &dv, rv, nv}};
	for (int i = 0; i < 4; i++) {
		double mx = 0;
		for (size_t j = 0; j < outs[i].n; j++)
			mx = fmax(mx, fabs(outs[i].ref[j]));
		double slack = 4e-6;
		double *bound = dalloc(outs[i].n);
		be_dtype t = i == 0 ? ot : gt;
		for (size_t j = 0; j < outs[i].n; j++)
			bound[j] = u_of(t) * fabs(outs[i].ref[j]) + slack * mx + 1e-30;
		char what[96];
		snprintf(what, sizeof what, "attention t%lld out %s grad %s: %s", (long long)a.tq,
			 tn(ot), tn(gt), outs[i].name);
		check(what, outs[i].got, outs[i].ref, bound, outs[i].n);
		free(bound);
	}
	for (size_t i = 0; i < nl; i++)
		assert_true(isinf(lse[i]) ? isinf(flse[i]) : fabs(flse[i] - lse[i]) < 1e-5 * (1 + fabs(lse[i])));
	double dmx = 0; /* dsinks: float32 sums of the float32 kernel's, 1e-5 of the largest */
	for (int64_t i = 0; a.sinks && i < a.h; i++)
		dmx = fmax(dmx, fabs(dsk[i]));
	for (int64_t i = 0; a.sinks && i < a.h; i++) {
		print_message("dsink[%lld] %.9g ref %.9g\n", (long long)i, fdsk[i], dsk[i]);
		assert_true(fabs(fdsk[i] - dsk[i]) <= 1e-5 * dmx + 1e-30);
	}
	tens_free(&q), tens_free(&k), tens_free(&v), tens_free(&dout), tens_free(&out);
	tens_free(&dq), tens_free(&dk), tens_free(&dv);
	free(o), free(lse), free(rq), free(rk), free(rv), free(flse), free(oin);
}

static void attention_bf16_gqa_causal_blocks_sinks_and_windows_within_bound(void **s)
{
	(void)s;
	test_seed(107);
	backend *be = be_open(0);
	be_attn a = {.b = 2, .tq = 70, .tk = 70, .h = 4, .hkv = 2, .hd = 16, .hdv = 16, .causal = 1};
	check_attention(be, &a, BE_BF16, BE_BF16);
	check_attention(be, &a, BE_F32, BE_F32);
	be_attn cp = {.b = 1, .tq = 20, .tk = 30, .h = 2, .hkv = 1, .hd = 8, .hdv = 4,
		      .causal = 1, .q_pos0 = 10, .k_pos0 = 20, .scale = 0.3f};
	check_attention(be, &cp, BE_BF16, BE_BF16);
	/* GPT-OSS's sinks with a sliding window, Llama 4's chunks: each group of
	 * query heads gets its own sinks, their gradients summed over the batch */
	static const float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
	be_attn gs = {.b = 3, .tq = 40, .tk = 40, .h = 4, .hkv = 2, .hd = 8, .hdv = 8,
		      .causal = 1, .window = 7, .sinks = sinks};
	check_attention(be, &gs, BE_BF16, BE_BF16);
	be_attn ch = {.b = 2, .tq = 40, .tk = 40, .h = 4, .hkv = 1, .hd = 8, .hdv = 8,
		      .causal = 1, .chunk = 16};
	check_attention(be, &ch, BE_BF16, BE_F32);
	backend_free(be);
}

/* torchtitan's block-causal mask over packed windows: each group of query
 * heads (a problem of one batch row in the float32 kernel) reads its own
 * row's documents.  Rows with different boundaries, documents of one
 * position, a window and chunks across boundaries, sinks, MLA's hdv, and a
 * context-parallel block (full rows of doc, queries 30..59 against keys
 * 10..39) whose row-2 queries from 40 see no key (out 0, lse their sink). */
static void attention_bf16_documents_within_bound(void **s)
{
	(void)s;
	test_seed(108);
	backend *be = be_open(0);
	int32_t doc[3 * 70];
	static const int64_t starts[3][5] = {{0, 20, 21, 64}, {0, 35, 69}, {0, 1, 2, 40, 41}};
	static const int n[3] = {4, 3, 5};
	for (int bi = 0; bi < 3; bi++)
		att_ref_doc_row(doc + bi * 70, 70, starts[bi], n[bi]);
	static const float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
	be_attn a = {.b = 3, .tq = 70, .tk = 70, .h = 4, .hkv = 2, .hd = 16, .hdv = 16,
		     .causal = 1, .doc = doc, .doc_t = 70};
	check_attention(be, &a, BE_BF16, BE_BF16);
	a.window = 12, a.sinks = sinks;
	check_attention(be, &a, BE_BF16, BE_F32);
	a.window = 0, a.chunk = 16, a.sinks = NULL;
	check_attention(be, &a, BE_F32, BE_BF16);
	be_attn cp = {.b = 3, .tq = 30, .tk = 30, .h = 2, .hkv = 1, .hd = 8, .hdv = 4,
		      .causal = 1, .q_pos0 = 30, .k_pos0 = 10, .scale = 0.3f, .sinks = sinks,
		      .doc = doc, .doc_t = 70};
	check_attention(be, &cp, BE_BF16, BE_BF16);
	backend_free(be);
}

/* ---- SwiGLU ---- */

/* Forward y = bf16(bf16(silu a) g): two roundings, silu itself within 8 e:
 * |y - ref| <= (2u + u^2 + 8 e) |ref|.  Backward: dg = bf16(dy bf16(silu a)),
 * the same bound; da = bf16(bf16(dy g) silu'(a)) with silu' = s (1 + a (1 - s))
 * in float32: |da - ref| <= (2u + u^2) |ref| + 16 e |dy g| (s + |a| s (1 - s)). */
static void swiglu_bf16_rounds_as_torch_within_bound(void **s)
{
	(void)s;
	test_seed(108);
	backend *be = be_open(0);
	size_t n = 100000;
	tens a = tens_rand(BE_BF16, n, 8), g = tens_rand(BE_BF16, n, 2), dy = tens_rand(BE_BF16, n, 1);
	tens y = tens_out(BE_BF16, n), da = tens_out(BE_BF16, n), dg = tens_out(BE_BF16, n);
	double *ry = dalloc(n), *rda = dalloc(n), *rdg = dalloc(n);
	double *by = dalloc(n), *bda = dalloc(n), *bdg = dalloc(n);
	cpu_swiglu_fwd_f64(ry, a.ref, g.ref, (int64_t)n);
	cpu_swiglu_bwd_f64(rda, rdg, dy.ref, a.ref, g.ref, (int64_t)n);
	const double r2 = 2 * U16 + U16 * U16;
	for (size_t i = 0; i < n; i++) {
		double sg = 1 / (1 + exp(-a.ref[i]));
		by[i] = (r2 + 8 * U32) * fabs(ry[i]) + 1e-30;
		bdg[i] = (r2 + 8 * U32) * fabs(rdg[i]) + 1e-30;
		bda[i] = r2 * fabs(rda[i]) +
			 16 * U32 * fabs(dy.ref[i] * g.ref[i]) * (sg + fabs(a.ref[i]) * sg * (1 - sg)) +
			 1e-30;
	}
	be->ops->swiglu_fwd(be, y.p, a.p, g.p, BE_BF16, (int64_t)n);
	be->ops->swiglu_bwd(be, da.p, dg.p, dy.p, a.p, g.p, BE_BF16, (int64_t)n);
	be_sync_ok(be);
	check("swiglu_fwd bf16", &y, ry, by, n);
	check("swiglu_bwd bf16 da", &da, rda, bda, n);
	check("swiglu_bwd bf16 dg", &dg, rdg, bdg, n);
	/* torch's rounding, not one rounding of the float32 result: an element where
	 * the two differ exists among these and this op takes torch's. */
	size_t differ = 0;
	for (size_t i = 0; i < n; i++) {
		float ai = (float)a.ref[i], si = bf16_round(ai / (1 + expf(-ai)));
		uint16_t torch = bf16_from_f32(si * (float)g.ref[i]);
		uint16_t once = bf16_from_f32(ai / (1 + expf(-ai)) * (float)g.ref[i]);
		if (torch != once) {
			differ++;
			assert_int_equal(((uint16_t *)y.p)[i], torch);
		}
	}
	print_message("swiglu: %zu elements where torch's double rounding differs\n", differ);
	assert_true(differ > 0);
	tens_free(&a), tens_free(&g), tens_free(&dy), tens_free(&y), tens_free(&da), tens_free(&dg);
	free(ry), free(rda), free(rdg), free(by), free(bda), free(bdg);
	backend_free(be);
}

/* ---- embedding ---- */

/* Forward copies rows: exact between equal types, one rounding from a float32
 * table to bf16 rows: |out - ref| <= u_out |ref| (0 for equal types).
 * Backward over ids with repeats: a float32 table sums the rows in float32,
 * |dt - ref| <= (c + 1) e (|dt0| + sum |dout|) for a row hit c times; a bf16
 * table rounds after each of its c additions: (c + 1) u instead of e. */
static void check_embedding(backend *be, be_dtype tt, be_dtype dt, int64_t n, int64_t d)
{
	int64_t v = 37, v0 = 5, nv = 25;
	int32_t *ids = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		ids[i] = (int32_t)((test_urand() + 1) * 0.5 * (double)v);
	tens tab = tens_rand(tt, (size_t)(nv * d), 1), out = tens_out(dt, (size_t)(n * d));
	double *ref = dalloc((size_t)(n * d)), *bound = dalloc((size_t)(n * d));
	cpu_embedding_fwd_f64(ref, tab.ref, ids, n, d, v0, nv);
	for (size_t i = 0; i < (size_t)(n * d); i++)
		bound[i] = (tt == dt ? 0 : u_of(dt)) * fabs(ref[i]) + 1e-30;
	be->ops->embedding_fwd(be, out.p, dt, tab.p, tt, ids, n, d, v0, nv);
	be_sync_ok(be);
	char what[96];
	snprintf(what, sizeof what, "embedding_fwd table %s -> out %s", tn(tt), tn(dt));
	check(what, &out, ref, bound, (size_t)(n * d));

	tens dout = tens_rand(dt, (size_t)(n * d), 1), dtab = tens_rand(tt, (size_t)(nv * d), 0.5);
	double *dref = dalloc((size_t)(nv * d)), *db = dalloc((size_t)(nv * d));
	memcpy(dref, dtab.ref, (size_t)(nv * d) * 8);
	cpu_embedding_bwd_f64(dref, dout.ref, ids, n, d, v0, nv);
	for (int64_t r = 0; r < nv; r++)
		for (int64_t j = 0; j < d; j++) {
			double mag = fabs(dtab.ref[r * d + j]);
			int hits = 0;
			for (int64_t i = 0; i < n; i++)
				if (ids[i] - v0 == r) {
					mag += fabs(dout.ref[i * d + j]);
					hits++;
				}
			db[r * d + j] = (hits + 1) * u_of(tt) * mag + 1e-30;
		}
	be->ops->embedding_bwd(be, dtab.p, tt, dout.p, dt, ids, n, d, v0, nv);
	be_sync_ok(be);
	snprintf(what, sizeof what, "embedding_bwd dout %s -> dtable %s", tn(dt), tn(tt));
	check(what, &dtab, dref, db, (size_t)(nv * d));
	tens_free(&tab), tens_free(&out), tens_free(&dout), tens_free(&dtab);
	free(ids), free(ref), free(bound), free(dref), free(db);
}

static void embedding_every_type_mix_within_bound(void **s)
{
	(void)s;
	test_seed(109);
	backend *be = be_open(0);
	for (int m = 0; m < 4; m++) {
		check_embedding(be, types[m & 1], types[m >> 1], 40, 70);
		check_embedding(be, types[m & 1], types[m >> 1], 600, 256);
	}
	backend_free(be);
}

/* ---- cross-entropy ---- */

/* Over bf16 logits in float32 (the row max exact, exps within 2 ulp, the sum and
 * log in double): each row's loss within 8 e (1 + |max| + |x_y|); the summed loss
 * within the sum of those.  The gradient (softmax - onehot) scale, rounded to
 * bf16: |g - ref| <= u |ref| + 8 e |scale| (p_j + [j = y]). */
static void cross_entropy_bf16_loss_and_gradient_within_bound(void **s)
{
	(void)s;
	test_seed(110);
	backend *be = be_open(0);
	int64_t n = 70, v = 2000;
	size_t nv = (size_t)(n * v);
	int32_t *y = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		y[i] = i % 9 == 4 ? -100 : (int32_t)((test_urand() + 1) * 0.5 * (double)v);
	tens x = tens_rand(BE_BF16, nv, 6);
	double *g = dalloc(nv), *bound = dalloc(nv), lref = 0, lbound = 0, l = 0;
	int64_t kref = 0, k = 0;
	memcpy(g, x.ref, nv * 8);
	const float scale = 1.0f / 63;
	cpu_cross_entropy_f64(g, y, n, v, -100, scale, &lref, &kref);
	for (int64_t i = 0; i < n; i++) {
		double mx = -INFINITY;
		for (int64_t j = 0; j < v; j++)
			mx = fmax(mx, x.ref[i * v + j]);
		if (y[i] != -100)
			lbound += 8 * U32 * (1 + fabs(mx) + fabs(x.ref[i * v + y[i]]));
		for (int64_t j = 0; j < v; j++) {
			size_t o = (size_t)(i * v + j);
			double p = y[i] == -100 ? 0 : g[o] / scale + (j == y[i]);
			bound[o] = U16 * fabs(g[o]) + 8 * U32 * scale * (p + (j == y[i])) + 1e-30;
		}
	}
	be->ops->cross_entropy(be, x.p, BE_BF16, y, n, v, -100, scale, &l, &k);
	be_sync_ok(be);
	print_message("cross_entropy bf16: loss %.9g, want %.9g within %.3g\n", l, lref, lbound);
	assert_true(fabs(l - lref) <= lbound);
	assert_int_equal(k, kref);
	check("cross_entropy bf16 gradient", &x, g, bound, nv);
	tens_free(&x);
	free(y), free(g), free(bound);
	backend_free(be);
}

/* ---- elementwise, sumsq, adamw ---- */

/* y = a + b rounded once: |y - ref| <= u_y |ref| + e (|a| + |b|).
 * y += alpha x: |y - ref| <= u_y |ref| + 2 e (|y0| + |alpha x|).
 * x *= alpha (bf16): |x - ref| <= (u + e) |ref|. */
static void add_axpy_scale_every_type_mix_within_bound(void **s)
{
	(void)s;
	test_seed(111);
	backend *be = be_open(0);
	size_t sizes[2] = {1000, 150001};
	for (int si = 0; si < 2; si++) {
		size_t n = sizes[si];
		double *ref = dalloc(n), *bound = dalloc(n);
		for (int m = 0; m < 8; m++) {
			be_dtype yt = types[m & 1], at = types[m >> 1 & 1], bt = types[m >> 2];
			tens a = tens_rand(at, n, 4), b = tens_rand(bt, n, 4), y = tens_out(yt, n);
			for (size_t i = 0; i < n; i++) {
				ref[i] = a.ref[i] + b.ref[i];
				bound[i] = u_of(yt) * fabs(ref[i]) + U32 * (fabs(a.ref[i]) + fabs(b.ref[i])) + 1e-30;
			}
			be->ops->add(be, y.p, yt, a.p, at, b.p, bt, (int64_t)n);
			be_sync_ok(be);
			char what[96];
			snprintf(what, sizeof what, "add %s + %s -> %s n %zu", tn(at), tn(bt), tn(yt), n);
			check(what, &y, ref, bound, n);
			/* in place, y = y + b (the residual stream) */
			if (yt == at) {
				be->ops->add(be, a.p, at, a.p, at, b.p, bt, (int64_t)n);
				be_sync_ok(be);
				snprintf(what, sizeof what, "add in place %s += %s n %zu", tn(at), tn(bt), n);
				check(what, &a, ref, bound, n);
			}
			tens_free(&a), tens_free(&b), tens_free(&y);
		}
		for (int m = 0; m < 4; m++) {
			be_dtype yt = types[m & 1], xt = types[m >> 1];
			const float alpha = -0.75f;
			tens y = tens_rand(yt, n, 4), x = tens_rand(xt, n, 4);
			for (size_t i = 0; i < n; i++) {
				ref[i] = y.ref[i] + alpha * x.ref[i];
				bound[i] = u_of(yt) * fabs(ref[i]) +
					   2 * U32 * (fabs(y.ref[i]) + fabs(alpha * x.ref[i])) + 1e-30;
			}
			be->ops->axpy(be, y.p, yt, alpha, x.p, xt, (int64_t)n);
			be_sync_ok(be);
			char what[96];
			snprintf(what, sizeof what, "axpy %s += a %s n %zu", tn(yt), tn(xt), n);
			check(what, &y, ref, bound, n);
			tens_free(&y), tens_free(&x);
		}
		tens x = tens_rand(BE_BF16, n, 4);
		for (size_t i = 0; i < n; i++) {
			ref[i] = x.ref[i] * 0.3f;
			bound[i] = (U16 + U32) * fabs(ref[i]) + 1e-30;
		}
		be->ops->scale(be, x.p, BE_BF16, 0.3f, (int64_t)n);
		be_sync_ok(be);
		check("scale bf16", &x, ref, bound, n);
		tens_free(&x);
		free(ref), free(bound);
	}
	backend_free(be);
}

/* The squares of bf16 values are exact in double and their sum errs by n 2^-53
 * of it: within 1e-12 relative of a long double sum, and the same bits on one
 * thread and on two. */
static void sumsq_bf16_is_exact_and_independent_of_threads(void **s)
{
	(void)s;
	test_seed(112);
	size_t n = 300007;
	tens x = tens_rand(BE_BF16, n, 3);
	long double want = 0;
	for (size_t i = 0; i < n; i++)
		want += (long double)x.ref[i] * x.ref[i];
	backend *be = be_open(1);
	double one = be->ops->sumsq(be, x.p, BE_BF16, (int64_t)n);
	be_sync_ok(be);
	backend_free(be);
	be = be_open(2);
	double two = be->ops->sumsq(be, x.p, BE_BF16, (int64_t)n);
	be_sync_ok(be);
	backend_free(be);
	print_message("sumsq bf16 %.17g, want %.17Lg\n", one, want);
	assert_true(fabs(one - (double)want) <= 1e-12 * (double)want);
	assert_memory_equal(&one, &two, sizeof one);
	tens_free(&x);
}

/* torch.optim.AdamW in float64 on the bf16 states: the float32 update, each
 * state rounded once to bf16: m, v within u |ref| + 4 e (terms); p within
 * u |ref| + 8 e (|p| + lr/bc1 |m/denom|). */
static void adamw_bf16_states_within_bound(void **s)
{
	(void)s;
	test_seed(113);
	backend *be = be_open(0);
	size_t n = 100000;
	tens p = tens_rand(BE_BF16, n, 1), g = tens_rand(BE_BF16, n, 1e-2);
	tens m = tens_rand(BE_BF16, n, 1e-2), v = tens_rand(BE_BF16, n, 1);
	for (size_t i = 0; i < n; i++)
		set_elem(&v, i, 1e-4 * v.ref[i] * v.ref[i]);
	double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
	int step = 5;
	double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
	double *rp = dalloc(n), *rm = dalloc(n), *rv = dalloc(n);
	double *bp = dalloc(n), *bm = dalloc(n), *bv = dalloc(n);
	for (size_t i = 0; i < n; i++) {
		double gi = g.ref[i];
		rm[i] = b1 * m.ref[i] + (1 - b1) * gi;
		rv[i] = b2 * v.ref[i] + (1 - b2) * gi * gi;
		double upd = lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
		rp[i] = p.ref[i] * (1 - lr * wd) - upd;
		bm[i] = U16 * fabs(rm[i]) + 4 * U32 * (b1 * fabs(m.ref[i]) + (1 - b1) * fabs(gi)) + 1e-30;
		bv[i] = U16 * fabs(rv[i]) + 4 * U32 * (b2 * v.ref[i] + (1 - b2) * gi * gi) + 1e-30;
		bp[i] = U16 * fabs(rp[i]) + 8 * U32 * (fabs(p.ref[i]) + fabs(upd)) + 1e-30;
	}
	be->ops->adamw(be, p.p, g.p, m.p, v.p, BE_BF16, (int64_t)n, lr, b1, b2, eps, wd, bc1, bc2);
	be_sync_ok(be);
	check("adamw bf16 exp_avg", &m, rm, bm, n);
	check("adamw bf16 exp_avg_sq", &v, rv, bv, n);
	check("adamw bf16 param", &p, rp, bp, n);
	tens_free(&p), tens_free(&g), tens_free(&m), tens_free(&v);
	free(rp), free(rm), free(rv), free(bp), free(bm), free(bv);
	backend_free(be);
}

/* ---- mixture of experts, MLA and GPT-OSS (cpu_bf16_moe.c) ---- */

/* Row offsets of `groups` groups over rows: one group empty, and the last
 * rows past every group (a capacity's dropped rows). */
static int32_t *group_offs(int64_t groups, int64_t rows)
{
	int32_t *offs = malloc(sizeof(int32_t) * (size_t)(groups + 1));
	assert_non_null(offs);
	int64_t used = rows - 3, at = 0;
	offs[0] = 0;
	for (int64_t g = 0; g < groups; g++) {
		int64_t len = g == 1 ? 0 : (used - at) / (groups - g) + (g % 3 == 0 ? 5 : -2);
		len = len < 0 ? 0 : at + len > used || g == groups - 1 ? used - at : len;
		at += len;
		offs[g + 1] = (int32_t)at;
	}
	return offs;
}

/* torch._grouped_mm's three uses on bf16 operands.  Bound as matmul's: u_out
 * |ref| + (K + 2) e (sum_p |a b| + |beta c0|), K the product's depth (the
 * group's rows for DW); rows no group holds are zero (FWD, DX with beta 0). */
static void check_grouped(backend *be, int mode, float beta, be_dtype ct)
{
	int64_t groups = 5, rows = 150, nn = 48, kk = 40;
	int32_t *offs = group_offs(groups, rows);
	int64_t arows = rows, acols = mode == BE_GMM_FWD ? kk : nn;
	int64_t crows = mode == BE_GMM_DW ? groups * nn : rows;
	int64_t ccols = mode == BE_GMM_FWD ? nn : kk;
	size_t nb = mode == BE_GMM_DW ? (size_t)(rows * kk) : (size_t)(groups * nn * kk);
	tens a = tens_rand(BE_BF16, (size_t)(arows * acols), 1), b = tens_rand(BE_BF16, nb, 1);
	tens c = tens_rand(ct, (size_t)(crows * ccols), 1);
	double *ref = dalloc(c.n), *bound = dalloc(c.n);
	for (int64_t g = 0; g < groups; g++) {
		int64_t r0 = offs[g], r1 = offs[g + 1];
		int64_t i1 = mode == BE_GMM_DW ? nn : r1 - r0, k = mode == BE_GMM_DW ? r1 - r0
							     : mode == BE_GMM_FWD ? kk : nn;
		for (int64_t i = 0; i < i1; i++)
			for (int64_t j = 0; j < ccols; j++) {
				double acc = 0, mag = 0;
				for (int64_t p = 0; p < k; p++) {
					double pr;
					if (mode == BE_GMM_FWD)
						pr = a.ref[(r0 + i) * kk + p] * b.ref[(g * nn + j) * kk + p];
					else if (mode == BE_GMM_DX)
						pr = a.ref[(r0 + i) * nn + p] * b.ref[(g * nn + p) * kk + j];
					else
						pr = a.ref[(r0 + p) * nn + i] * b.ref[(r0 + p) * kk + j];
					acc += pr;
					mag += fabs(pr);
				}
				size_t o = (size_t)((mode == BE_GMM_DW ? g * nn + i : r0 + i) * ccols + j);
				ref[o] = acc + beta * c.ref[o];
				bound[o] = u_of(ct) * fabs(ref[o]) +
					   (double)(k + 2) * U32 * (mag + fabs(beta * c.ref[o])) + 1e-30;
			}
	}
	if (mode != BE_GMM_DW) /* zero with beta 0, else left alone */
		for (int64_t r = offs[groups]; r < rows; r++)
			for (int64_t j = 0; j < ccols; j++) {
				ref[r * ccols + j] = beta == 0 ? 0 : c.ref[r * ccols + j];
				bound[r * ccols + j] = 1e-30;
			}
	if (beta == 0)
		for (size_t i = 0; i < c.n; i++)
			set_elem(&c, i, NAN);
	be->ops->grouped_matmul(be, mode, groups, offs, rows, nn, kk, a.p, b.p, BE_BF16, beta, c.p,
				ct);
	be_sync_ok(be);
	char what[80];
	snprintf(what, sizeof what, "grouped_matmul %s beta %g C %s",
		 mode == BE_GMM_FWD ? "fwd" : mode == BE_GMM_DX ? "dx" : "dw", (double)beta, tn(ct));
	check(what, &c, ref, bound, c.n);
	tens_free(&a), tens_free(&b), tens_free(&c);
	free(ref), free(bound), free(offs);
}

static void grouped_matmul_bf16_every_mode_within_k_bound(void **s)
{
	(void)s;
	test_seed(120);
	backend *be = be_open(0);
	for (int ci = 0; ci < 2; ci++) {
		check_grouped(be, BE_GMM_FWD, 0, types[ci]);
		check_grouped(be, BE_GMM_DX, 0, types[ci]);
		check_grouped(be, BE_GMM_DX, 1, types[ci]);
		check_grouped(be, BE_GMM_DW, 1, types[ci]);
		check_grouped(be, BE_GMM_DW, 0, types[ci]);
	}
	backend_free(be);
}

/* The router on bf16 logits (torchtitan's scores.to(float32)): the same
 * choice as float64 on the rounded logits, scores and weights within 64 e
 * (a float32 exp, a sum of e terms, a division, the scale); the logits'
 * gradient bf16, within u |ref| + 64 e Z, Z = route_scale sum_j |dw_j| (1 +
 * 1/S)^2 bounding every term it is a sum of (S the chosen scores' sum). */
static void check_route(backend *be, int score, int route_norm, int groups)
{
	be_moe r = {.n = 61, .e = 16, .k = 4, .score = score, .route_norm = route_norm,
		    .route_scale = 2.5f, .groups = groups, .limited = groups ? 2 : 0};
	size_t ne = (size_t)(r.n * r.e), nk = (size_t)(r.n * r.k);
	tens lg = tens_rand(BE_BF16, ne, 3), dl = tens_out(BE_BF16, ne);
	float *sc = malloc(ne * 4), *w = malloc(nk * 4), *bias = malloc((size_t)r.e * 4);
	float *dw = malloc(nk * 4);
	double *bias64 = dalloc((size_t)r.e), *sc64 = dalloc(ne), *w64 = dalloc(nk);
	double *dw64 = dalloc(nk), *dl64 = dalloc(ne), *bound = dalloc(ne);
	int32_t *idx = malloc(nk * 4), *idx64 = malloc(nk * 4);
	for (int64_t i = 0; i < r.e; i++)
		bias[i] = (float)(0.05 * test_urand()), bias64[i] = bias[i];
	for (size_t i = 0; i < nk; i++)
		dw[i] = (float)test_urand(), dw64[i] = dw[i];
	be->ops->moe_route(be, sc, idx, w, lg.p, BE_BF16, bias, &r);
	be_sync_ok(be);
	cpu_moe_route_f64(sc64, idx64, w64, lg.ref, bias64, &r);
	assert_memory_equal(idx, idx64, nk * 4);
	double worst = 0;
	for (size_t i = 0; i < ne; i++)
		worst = fmax(worst, fabs(sc[i] - sc64[i]) / (64 * U32));
	for (size_t i = 0; i < nk; i++)
		worst = fmax(worst, fabs(w[i] - w64[i]) / (64 * U32 * r.route_scale));
	print_message("moe_route %s norm %d groups %d: scores, weights worst err/bound %.3f\n",
		      score == BE_MOE_SOFTMAX ? "softmax" : "sigmoid", route_norm, groups, worst);
	assert_true(worst <= 1);
	/* the backward from the forward's own float32 scores */
	for (size_t i = 0; i < ne; i++)
		sc64[i] = sc[i];
	be->ops->moe_route_bwd(be, dl.p, BE_BF16, dw, sc, idx, &r);
	be_sync_ok(be);
	cpu_moe_route_bwd_f64(dl64, dw64, sc64, idx, &r);
	for (int64_t t = 0; t < r.n; t++) {
		double sum = 0, gs = 0;
		for (int64_t j = 0; j < r.k; j++)
			sum += sc64[t * r.e + idx[t * r.k + j]], gs += fabs(dw64[t * r.k + j]);
		double z = r.route_scale * gs * (1 + 1 / sum) * (1 + 1 / sum);
		for (int64_t i = 0; i < r.e; i++)
			bound[t * r.e + i] = U16 * fabs(dl64[t * r.e + i]) + 64 * U32 * z + 1e-30;
	}
	check("moe_route_bwd bf16 dlogits", &dl, dl64, bound, ne);
	tens_free(&lg), tens_free(&dl);
	free(sc), free(w), free(bias), free(dw), free(bias64), free(sc64), free(w64), free(dw64);
	free(dl64), free(bound), free(idx), free(idx64);
}

static void moe_route_bf16_logits_choose_as_float64_within_bound(void **s)
{
	(void)s;
	test_seed(121);
	backend *be = be_open(0);
	check_route(be, BE_MOE_SOFTMAX, 1, 0);
	check_route(be, BE_MOE_SOFTMAX, 0, 0);
	check_route(be, BE_MOE_SIGMOID, 1, 4);
	check_route(be, BE_MOE_SIGMOID, 0, 0);
	backend_free(be);
}

/* The rows: gather (x c, one rounding: u |ref|), combine (beta out + sum c y
 * in float32, rounded once: u |ref| + (k + 2) e (|beta out| + sum |c y|)),
 * dot (a double sum rounded to float32: e |ref|), on a routing with dropped
 * assignments (capacity). */
static void moe_rows_bf16_gather_combine_dot_within_bound(void **s)
{
	(void)s;
	test_seed(122);
	backend *be = be_open(0);
	be_moe r = {.n = 37, .e = 6, .k = 3, .score = BE_MOE_SOFTMAX, .route_scale = 1,
		    .capacity = 16};
	int64_t d = 70, na = r.n * r.k;
	int32_t *idx = malloc((size_t)na * 4), *perm = malloc((size_t)na * 4);
	int32_t *pos = malloc((size_t)na * 4), offs[7];
	float *w = malloc((size_t)na * 4), *dw = malloc((size_t)na * 4);
	double *w64 = dalloc((size_t)na), *dw64 = dalloc((size_t)na);
	for (int64_t a = 0; a < na; a++)
		idx[a] = (int32_t)((a * 7 + a / 5) % r.e), w[a] = (float)test_urand(), w64[a] = w[a];
	be->ops->moe_permute(be, perm, pos, offs, NULL, idx, &r);
	tens x = tens_rand(BE_BF16, (size_t)(r.n * d), 2), y = tens_out(BE_BF16, (size_t)(na * d));
	double *ref = dalloc((size_t)(na * d)), *bound = dalloc((size_t)(na * d));
	for (int wi = 0; wi < 2; wi++) {
		be->ops->moe_gather(be, y.p, x.p, BE_BF16, perm, offs, wi ? w : NULL, &r, d);
		be_sync_ok(be);
		cpu_moe_gather_f64(ref, x.ref, perm, offs, wi ? w64 : NULL, &r, d);
		for (int64_t i = 0; i < na * d; i++)
			bound[i] = U16 * fabs(ref[i]) + 1e-30;
		check(wi ? "moe_gather bf16 weighted" : "moe_gather bf16", &y, ref, bound,
		      (size_t)(na * d));
	}
	tens yr = tens_rand(BE_BF16, (size_t)(na * d), 2);
	for (int bi = 0; bi < 2; bi++) {
		float beta = bi ? 0.5f : 0;
		tens out = bi ? tens_rand(BE_BF16, (size_t)(r.n * d), 1)
			      : tens_out(BE_BF16, (size_t)(r.n * d));
		double *o64 = dalloc((size_t)(r.n * d)), *ob = dalloc((size_t)(r.n * d));
		memcpy(o64, out.ref, sizeof(double) * (size_t)(r.n * d));
		if (!bi)
			memset(o64, 0, sizeof(double) * (size_t)(r.n * d));
		for (int64_t t = 0; t < r.n; t++)
			for (int64_t i = 0; i < d; i++) {
				double mag = fabs(beta * o64[t * d + i]);
				for (int64_t j = 0; j < r.k; j++)
					if (pos[t * r.k + j] >= 0)
						mag += fabs(w64[t * r.k + j] *
							    yr.ref[pos[t * r.k + j] * d + i]);
				ob[t * d + i] = (double)(r.k + 2) * U32 * mag;
			}
		be->ops->moe_combine(be, out.p, yr.p, BE_BF16, pos, w, beta, &r, d);
		be_sync_ok(be);
		cpu_moe_combine_f64(o64, yr.ref, pos, w64, beta, &r, d);
		for (int64_t i = 0; i < r.n * d; i++)
			ob[i] += U16 * fabs(o64[i]) + 1e-30;
		check(bi ? "moe_combine bf16 beta 0.5" : "moe_combine bf16", &out, o64, ob,
		      (size_t)(r.n * d));
		tens_free(&out);
		free(o64), free(ob);
	}
	be->ops->moe_dot(be, dw, yr.p, x.p, BE_BF16, pos, &r, d);
	be_sync_ok(be);
	cpu_moe_dot_f64(dw64, yr.ref, x.ref, pos, &r, d);
	for (int64_t a = 0; a < na; a++)
		if (fabs(dw[a] - dw64[a]) > U32 * fabs(dw64[a]) + 1e-30)
			fail_msg("moe_dot %lld: %.9g, want %.9g", (long long)a, dw[a], dw64[a]);
	print_message("moe_dot bf16: within e |ref|\n");
	tens_free(&x), tens_free(&y), tens_free(&yr);
	free(idx), free(perm), free(pos), free(w), free(dw), free(w64), free(dw64);
	free(ref), free(bound);
	backend_free(be);
}

/* Biases, per row group or whole: y + bias with the bias rounded to y's type
 * first (torchtitan's b.to(h.dtype)), then the sum once: u_y (|ref| + |b|);
 * the gradient's column sums in double, rounded once to its type: u |ref| +
 * 4 e sum |dy|. */
static void bias_add_grad_every_type_mix_within_bound(void **s)
{
	(void)s;
	test_seed(123);
	backend *be = be_open(0);
	int64_t rows = 90, d = 33, groups = 4;
	int32_t *offs = group_offs(groups, rows);
	for (int yi = 0; yi < 2; yi++)
		for (int bi = 0; bi < 2; bi++)
			for (int grouped = 0; grouped < 2; grouped++) {
				be_dtype yt = types[yi], bt = types[bi];
				int64_t ng = grouped ? groups : 1;
				const int32_t *of = grouped ? offs : NULL;
				tens y = tens_rand(yt, (size_t)(rows * d), 2);
				tens b = tens_rand(bt, (size_t)(ng * d), 1);
				double *ref = dalloc(y.n), *bound = dalloc(y.n);
				memcpy(ref, y.ref, sizeof(double) * y.n);
				cpu_bias_add_f64(ref, b.ref, rows, d, ng, of);
				for (int64_t r = 0; r < rows; r++)
					for (int64_t j = 0; j < d; j++) {
						int in = !of || (r >= of[0] && r < of[ng]);
						int64_t g = 0;
						while (of && in && g + 1 < ng && of[g + 1] <= r)
							g++;
						double bb = in ? fabs(b.ref[g * d + j]) : 0;
						size_t o = (size_t)(r * d + j);
						bound[o] = u_of(yt) * (fabs(ref[o]) + bb) + 1e-30;
					}
				be->ops->bias_add(be, y.p, yt, b.p, bt, rows, d, ng, of);
				be_sync_ok(be);
				char what[80];
				snprintf(what, sizeof what, "bias_add y %s bias %s%s", tn(yt), tn(bt),
					 grouped ? " grouped" : "");
				check(what, &y, ref, bound, y.n);
				/* the gradient: dy of yt into a bias of bt */
				tens dy = tens_rand(yt, (size_t)(rows * d), 2);
				tens db = tens_rand(bt, (size_t)(ng * d), 1);
				double *gref = dalloc(db.n), *gb = dalloc(db.n);
				memcpy(gref, db.ref, sizeof(double) * db.n);
				cpu_bias_grad_f64(gref, dy.ref, rows, d, ng, of);
				for (int64_t g = 0; g < ng; g++)
					for (int64_t j = 0; j < d; j++) {
						double mag = fabs(db.ref[g * d + j]);
						for (int64_t r = of ? of[g] : 0; r < (of ? of[g + 1] : rows); r++)
							mag += fabs(dy.ref[r * d + j]);
						gb[g * d + j] = u_of(bt) * fabs(gref[g * d + j]) + 4 * U32 * mag +
								1e-30;
					}
				be->ops->bias_grad(be, db.p, bt, dy.p, yt, rows, d, ng, of);
				be_sync_ok(be);
				snprintf(what, sizeof what, "bias_grad dy %s dbias %s%s", tn(yt), tn(bt),
					 grouped ? " grouped" : "");
				check(what, &db, gref, gb, db.n);
				tens_free(&y), tens_free(&b), tens_free(&dy), tens_free(&db);
				free(ref), free(bound), free(gref), free(gb);
			}
	free(offs);
	backend_free(be);
}

/* GPT-OSS's clamped SwiGLU in float32, rounded once: u |ref| plus 64 e times
 * the magnitudes of its terms (cpu_exp_f32's few ulps, a handful of roundings)
 * -- inputs straddle the limit. */
static void swiglu_clamp_bf16_within_bound(void **s)
{
	(void)s;
	test_seed(124);
	backend *be = be_open(0);
	int64_t n = 300, f = 50;
	float alpha = 1.702f, limit = 7;
	tens x = tens_rand(BE_BF16, (size_t)(2 * n * f), 10), dy = tens_rand(BE_BF16, (size_t)(n * f), 1);
	tens y = tens_out(BE_BF16, (size_t)(n * f)), dx = tens_out(BE_BF16, (size_t)(2 * n * f));
	double *yr = dalloc(y.n), *dxr = dalloc(dx.n), *yb = dalloc(y.n), *dxb = dalloc(dx.n);
	be->ops->swiglu_clamp_fwd(be, y.p, x.p, BE_BF16, n, f, alpha, limit);
	be->ops->swiglu_clamp_bwd(be, dx.p, dy.p, x.p, BE_BF16, n, f, alpha, limit);
	be_sync_ok(be);
	cpu_swiglu_clamp_fwd_f64(yr, x.ref, n, f, alpha, limit);
	cpu_swiglu_clamp_bwd_f64(dxr, dy.ref, x.ref, n, f, alpha, limit);
	for (int64_t i = 0; i < n * f; i++) {
		double g = fmin(x.ref[2 * i], limit), u = fmin(fmax(x.ref[2 * i + 1], -limit), limit);
		double d = fabs(dy.ref[i]);
		yb[i] = U16 * fabs(yr[i]) + 64 * U32 * fabs(g) * (fabs(u) + 1) + 1e-30;
		dxb[2 * i] = U16 * fabs(dxr[2 * i]) +
			     64 * U32 * d * (fabs(u) + 1) * (1 + alpha * fabs(g)) + 1e-30;
		dxb[2 * i + 1] = U16 * fabs(dxr[2 * i + 1]) + 64 * U32 * d * fabs(g) + 1e-30;
	}
	check("swiglu_clamp_fwd bf16", &y, yr, yb, y.n);
	check("swiglu_clamp_bwd bf16", &dx, dxr, dxb, dx.n);
	tens_free(&x), tens_free(&dy), tens_free(&y), tens_free(&dx);
	free(yr), free(dxr), free(yb), free(dxb);
	backend_free(be);
}

/* MLA's heads: cat and split copy bf16 exactly; the split's shared part (h2
 * 1) sums the heads in float32, rounded once: u |ref| + h e sum |terms|. */
static void heads_cat_split_bf16_within_bound(void **s)
{
	(void)s;
	test_seed(125);
	backend *be = be_open(0);
	int64_t n = 29, h = 6, d1 = 12, d2 = 8;
	for (int64_t h2 = 1; h2 <= h; h2 += h - 1) {
		tens x1 = tens_rand(BE_BF16, (size_t)(n * h * d1), 2);
		tens x2 = tens_rand(BE_BF16, (size_t)(n * h2 * d2), 2);
		tens y = tens_out(BE_BF16, (size_t)(n * h * (d1 + d2)));
		double *yr = dalloc(y.n), *yb = dalloc(y.n);
		be->ops->heads_cat(be, y.p, x1.p, x2.p, BE_BF16, n, h, d1, d2, h2);
		be_sync_ok(be);
		cpu_heads_cat_f64(yr, x1.ref, x2.ref, n, h, d1, d2, h2);
		for (size_t i = 0; i < y.n; i++)
			yb[i] = 1e-30;
		check(h2 == 1 ? "heads_cat bf16 shared" : "heads_cat bf16", &y, yr, yb, y.n);
		tens s1 = tens_out(BE_BF16, x1.n), s2 = tens_out(BE_BF16, x2.n);
		double *r1 = dalloc(x1.n), *r2 = dalloc(x2.n), *b1 = dalloc(x1.n), *b2 = dalloc(x2.n);
		be->ops->heads_split(be, s1.p, s2.p, y.p, BE_BF16, n, h, d1, d2, h2);
		be_sync_ok(be);
		cpu_heads_split_f64(r1, r2, yr, n, h, d1, d2, h2); /* y holds yr exactly */
		for (size_t i = 0; i < x1.n; i++)
			b1[i] = 1e-30;
		for (int64_t i = 0; i < n; i++)
			for (int64_t c = 0; c < d2; c++) {
				double mag = 0;
				for (int64_t j = 0; j < h && h2 == 1; j++)
					mag += fabs(yr[(i * h + j) * (d1 + d2) + d1 + c]);
				for (int64_t j = 0; j < h2; j++) {
					size_t o = (size_t)((i * h2 + j) * d2 + c);
					b2[o] = U16 * fabs(r2[o]) + (double)h * U32 * mag + 1e-30;
				}
			}
		check("heads_split bf16 x1", &s1, r1, b1, x1.n);
		check(h2 == 1 ? "heads_split bf16 shared x2 (summed)" : "heads_split bf16 x2", &s2,
		      r2, b2, x2.n);
		tens_free(&x1), tens_free(&x2), tens_free(&y), tens_free(&s1), tens_free(&s2);
		free(yr), free(yb), free(r1), free(r2), free(b1), free(b2);
	}
	backend_free(be);
}

/* What the CPU does not implement faults at the next sync, naming the op. */
static void unsupported_mixes_fault_at_sync(void **s)
{
	(void)s;
	backend *be = be_open(1);
	titan_err e = {0};
	float a[4] = {1, 2, 3, 4};
	uint16_t c[4];
	be->ops->matmul(be, 0, 0, 2, 2, 2, 1, a, 2, a, 2, BE_F32, 0, c, 2, BE_BF16);
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("fault: %s\n", e.msg);
	assert_non_null(strstr(e.msg, "matmul"));
	be->ops->rmsnorm_fwd(be, c, BE_E4M3, a, a, BE_F32, a, BE_F32, 1, 4, 1e-5f);
	assert_int_equal(be->ops->sync(be, &e), -1);
	assert_non_null(strstr(e.msg, "rmsnorm_fwd"));
	assert_int_equal(be->ops->sync(be, &e), 0);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(convert_rounds_every_float_to_nearest_even_bf16_and_back_exactly),
		cmocka_unit_test(matmul_bf16_every_transpose_and_output_within_k_bound),
		cmocka_unit_test(matmul_bf16_repeats_bit_for_bit),
		cmocka_unit_test(rmsnorm_fwd_every_type_mix_within_bound),
		cmocka_unit_test(rmsnorm_bwd_every_type_mix_within_bound),
		cmocka_unit_test(rope_bf16_both_styles_and_inverse_within_bound),
		cmocka_unit_test(attention_bf16_gqa_causal_blocks_sinks_and_windows_within_bound),
		cmocka_unit_test(attention_bf16_documents_within_bound),
		cmocka_unit_test(swiglu_bf16_rounds_as_torch_within_bound),
		cmocka_unit_test(embedding_every_type_mix_within_bound),
		cmocka_unit_test(cross_entropy_bf16_loss_and_gradient_within_bound),
		cmocka_unit_test(add_axpy_scale_every_type_mix_within_bound),
		cmocka_unit_test(sumsq_bf16_is_exact_and_independent_of_threads),
		cmocka_unit_test(adamw_bf16_states_within_bound),
		cmocka_unit_test(grouped_matmul_bf16_every_mode_within_k_bound),
		cmocka_unit_test(moe_route_bf16_logits_choose_as_float64_within_bound),
		cmocka_unit_test(moe_rows_bf16_gather_combine_dot_within_bound),
		cmocka_unit_test(bias_add_grad_every_type_mix_within_bound),
		cmocka_unit_test(swiglu_clamp_bf16_within_bound),
		cmocka_unit_test(heads_cat_split_bf16_within_bound),
		cmocka_unit_test(unsupported_mixes_fault_at_sync),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
