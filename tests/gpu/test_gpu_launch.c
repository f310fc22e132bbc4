/* The launchers of launch.h that no other GPU test calls directly (vecadd, the
 * split heads, AdamW on one tensor, the float8 casts and the scaled GEMM's
 * helpers) against the CPU: the float64 ops of cpu_kernels.h, a float64 AdamW,
 * and lib/float8 (torchao's numerics), which the float8 kernels must match bit
 * for bit (amax, scales, codes, decodes, reciprocals).  Called directly, not
 * through the CUDA backend, so that no cuBLASLt or cuDNN is needed.  Method and
 * bounds: gpu_test.h.  Without a GPU every test reports skipped with the
 * reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu_kernels.h"
#include "float8/float8.h"
#include "gpu_test.h"

_Static_assert((int)GPU_F8_TENSOR == (int)F8_TENSOR && (int)GPU_F8_ROWS == (int)F8_ROWS &&
		       (int)GPU_F8_COLS == (int)F8_COLS,
	       "launch.h's float8 scalings are float8.h's");

/* bytes of the device's d, after a sync that reports kernel errors */
static void download(void *h, const void *d, size_t bytes)
{
	titan_err e;
	if (gpu_sync(&e) || gpu_download(h, d, bytes, &e))
		fail_msg("%s", e.msg);
}

/* A device copy of bytes of h. */
static void *dev_bytes(const void *h, size_t bytes)
{
	void *d = dev_alloc(bytes);
	titan_err e;
	if (gpu_upload(d, h, bytes, &e))
		fail_msg("%s", e.msg);
	return d;
}

/* Fails unless the count elements of es bytes at d are want's bits. */
static void same_bits(const char *what, const void *d, const void *want, size_t count, size_t es)
{
	unsigned char *got = malloc(count * es);
	assert_non_null(got);
	download(got, d, count * es);
	for (size_t i = 0; i < count; i++) {
		if (memcmp(got + i * es, (const unsigned char *)want + i * es, es) == 0)
			continue;
		uint32_t g = 0, w = 0;
		memcpy(&g, got + i * es, es);
		memcpy(&w, (const unsigned char *)want + i * es, es);
		fail_msg("%s: element %zu of %zu is 0x%0*x on the device, 0x%0*x on the CPU", what, i,
			 count, (int)(2 * es), g, (int)(2 * es), w);
	}
	free(got);
}

static float *floats_of(const double *x, size_t n)
{
	float *f = malloc(n * sizeof *f);
	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		f[i] = (float)x[i];
	return f;
}

/* x (n) on the device as tx, and *xf the same values as floats, as the CPU's
 * float8 functions read them. */
static void *f8_input_dev(const double *x, size_t n, int tx, float **xf)
{
	double *xr = f64_copy(x, n);
	void *dx = dev_from(xr, n, tx);
	*xf = floats_of(xr, n);
	free(xr);
	return dx;
}

/* A device copy of x (n of dt) starting off elements into its allocation
 * (off = 1: not 16-byte aligned, which sends a launcher to its element-wise
 * path); *base is what to free.  x is rounded in place, as by dev_from. */
static void *dev_from_off(double *x, size_t n, int dt, int off, void **base)
{
	double *h = zeros(n + (size_t)off);
	memcpy(h + off, x, n * sizeof *x);
	*base = dev_from(h, n + (size_t)off, dt);
	memcpy(x, h + off, n * sizeof *x);
	free(h);
	return (char *)*base + (size_t)off * gpu_dtype_size(dt);
}

/* --- vecadd --- */

/* A float32 add of two floats is their exact sum rounded once: the device's
 * result is known to the bit. */
static void vecadd_is_the_float32_sum_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(101);
	const size_t sizes[] = {1, 255, 256, 257, 100003};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t n = sizes[k];
		double *a = rnd(n, 3.0), *b = rnd(n, 3.0), *want = zeros(n);
		void *da = dev_from(a, n, GPU_F32), *db = dev_from(b, n, GPU_F32);
		void *dc = dev_poisoned(n, GPU_F32);
		print_message(" n=%zu\n", n);
		gpu_ok(launch_vecadd(da, db, dc, n, NULL), "vecadd");
		for (size_t i = 0; i < n; i++)
			want[i] = round_to(a[i] + b[i], GPU_F32); /* a + b exact in double */
		expect_close("vecadd c = a + b (exact)", dc, want, n, GPU_F32, 0.0);
		free(a), free(b), free(want);
		gpu_free(da), gpu_free(db), gpu_free(dc);
	}
}

/* --- multi-head latent attention's split heads --- */

/* cat and split are copies (exact); the split of a part shared by every head
 * (h2 = 1) sums the heads, in float32 on the device. */
static void heads_cat_and_split_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(102);
	const struct {
		int64_t n, h, d1, d2;
	} cases[] = {{1, 1, 1, 1}, {3, 4, 5, 3}, {7, 3, 1, 9}, {2, 16, 128, 64}, {200, 16, 16, 8}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = GPU_F32; dt <= GPU_BF16; dt++)
			for (int shared = 0; shared < 2; shared++) {
				int64_t n = cases[c].n, h = cases[c].h, d1 = cases[c].d1, d2 = cases[c].d2;
				int64_t h2 = shared ? 1 : h;
				size_t ny = (size_t)(n * h * (d1 + d2)), n1 = (size_t)(n * h * d1);
				size_t n2 = (size_t)(n * h2 * d2);
				double tol_sum = h2 == 1 && h > 1 ? (dt == GPU_BF16 ? TOL_BF16 : TOL_F32) : 0.0;
				double *x1 = rnd(n1, 2.0), *x2 = rnd(n2, 2.0), *y = zeros(ny);
				void *dx1 = dev_from(x1, n1, dt), *dx2 = dev_from(x2, n2, dt);
				void *dy = dev_poisoned(ny, dt);
				print_message(" n=%lld h=%lld d1=%lld d2=%lld h2=%lld\n", (long long)n,
					      (long long)h, (long long)d1, (long long)d2, (long long)h2);
				gpu_ok(launch_heads_cat(dy, dx1, dx2, dt, n, h, d1, d2, h2, NULL), "heads_cat");
				cpu_heads_cat_f64(y, x1, x2, n, h, d1, d2, h2);
				expect_close("heads_cat y (a copy: exact)", dy, y, ny, dt, 0.0);
				/* the split of another y (the gradient at the joined heads):
				 * both outputs, then each alone (the other NULL) */
				double *gy = rnd(ny, 1.0);
				void *dgy = dev_from(gy, ny, dt);
				for (int outs = 0; outs < 3; outs++) {
					void *dg1 = outs != 2 ? dev_poisoned(n1, dt) : NULL;
					void *dg2 = outs != 1 ? dev_poisoned(n2, dt) : NULL;
					double *g1 = zeros(n1), *g2 = zeros(n2);
					gpu_ok(launch_heads_split(dg1, dg2, dgy, dt, n, h, d1, d2, h2, NULL),
					       "heads_split");
					cpu_heads_split_f64(dg1 ? g1 : NULL, dg2 ? g2 : NULL, gy, n, h, d1, d2, h2);
					if (dg1)
						expect_close(outs ? "heads_split x1 alone (exact)"
								   : "heads_split x1 (exact)",
							     dg1, g1, n1, dt, 0.0);
					if (dg2)
						expect_close(h2 == 1 ? outs ? "heads_split x2 alone, summed over heads"
									    : "heads_split x2, summed over heads"
							     : outs ? "heads_split x2 alone (exact)"
								    : "heads_split x2 (exact)",
							     dg2, g2, n2, dt, tol_sum);
					free(g1), free(g2);
					gpu_free(dg1), gpu_free(dg2);
				}
				free(x1), free(x2), free(y), free(gy);
				gpu_free(dx1), gpu_free(dx2), gpu_free(dy), gpu_free(dgy);
			}
}

/* --- AdamW on one tensor --- */

typedef struct adamw_case {
	int64_t n;
	int off; /* which of p, g, m, v (0..3) sits one element off 16 bytes; -1 none */
} adamw_case;

/* Aligned: 8-wide vectors with a tail (n % 8) or none; one misaligned
 * pointer, each of the four in turn: element by element. */
static const adamw_case adamw_cases[] = {{1, -1},   {7, -1}, {8, -1},   {4099, -1}, {100000, -1},
					 {1000, 0}, {8, 1},  {13, 2},   {4099, 3}};

/* Three steps of launch_adamw against torch.optim.AdamW in float64
 * (cpu_adamw_f64, the formula of backend.h's adamw).  A float32 state follows
 * its own float64 trajectory; a bf16 one is rounded at every store, an error
 * of up to 2^-8 of the tensor's largest element that three steps would add up
 * past TOL_BF16, so each of its steps starts the reference from the state the
 * device holds (what test_gpu_ops's scale does). */
static void adamw_one_tensor_steps_match_the_float64_reference(void **state)
{
	(void)state;
	need_gpu();
	seed(103);
	/* a large lr, so that a wrong update shows above even TOL_BF16 */
	const double lr = 0.02, b1 = 0.9, b2 = 0.95, eps = 1e-8;
	for (size_t c = 0; c < sizeof adamw_cases / sizeof adamw_cases[0]; c++)
		for (int dt = GPU_F32; dt <= GPU_BF16; dt++) {
			adamw_case k = adamw_cases[c];
			size_t n = (size_t)k.n;
			double wd = k.n == 7 ? 0.0 : 0.1, tol = dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
			double *p = rnd(n, 1.0), *m = rnd(n, 0.01), *v = rnd(n, 1.0);
			for (size_t i = 0; i < n; i++)
				v[i] = 1e-4 * (0.5 + 0.5 * fabs(v[i])); /* v bounded away from 0 */
			void *bp, *bm, *bv;
			void *dp = dev_from_off(p, n, dt, k.off == 0, &bp);
			void *dm = dev_from_off(m, n, dt, k.off == 2, &bm);
			void *dv = dev_from_off(v, n, dt, k.off == 3, &bv);
			for (int step = 1; step <= 3; step++) {
				if (dt == GPU_BF16 && step > 1) {
					free(p), free(m), free(v);
					p = host_of(dp, n, dt), m = host_of(dm, n, dt), v = host_of(dv, n, dt);
				}
				double *g = rnd(n, 0.01);
				void *bg, *dg = dev_from_off(g, n, dt, k.off == 1, &bg);
				double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
				print_message(" n=%zu wd %.1f step %d%s%s\n", n, wd, step,
					      k.off >= 0 ? ", misaligned " : "",
					      k.off >= 0 ? (const char *[]){"p", "g", "m", "v"}[k.off] : "");
				gpu_ok(launch_adamw(dp, dg, dm, dv, dt, (int64_t)n, lr, b1, b2, eps, wd, bc1, bc2,
						    NULL),
				       "adamw");
				cpu_adamw_consts kc = cpu_adamw_consts_of(lr, b1, b2, eps, wd, bc1, bc2);
				cpu_adamw_f64(p, g, m, v, (int64_t)n, &kc);
				expect_close("adamw p", dp, p, n, dt, tol);
				expect_close("adamw m", dm, m, n, dt, tol);
				expect_close("adamw v", dv, v, n, dt, tol);
				free(g);
				gpu_free(bg);
			}
			free(p), free(m), free(v);
			gpu_free(bp), gpu_free(bm), gpu_free(bv);
		}
}

/* --- float8 --- */

static f8_format cpu_fmt(int fmt)
{
	return fmt == GPU_E5M2 ? F8_E5M2 : F8_E4M3FN;
}

static const char *scaling_name(int s)
{
	return s == GPU_F8_TENSOR ? "tensor" : s == GPU_F8_ROWS ? "rows" : "cols";
}

typedef struct f8_shape {
	int64_t rows, cols;
	int trap; /* the amax whose scale sits a few ulps under a power of two */
} f8_shape;

/* 1 x 1; odd sizes; 64 x 256 (whole blocks of columns); cols over one block
 * of the per-column amax (256) and of the per-row one's threads; rows over
 * one slice of the per-column amax (256 rows), so that slices fold in; every
 * size with partial 32 x 32 tiles of the transposed cast but 64 x 256. */
static const f8_shape f8_shapes[] = {
	{1, 1, 0}, {3, 5, 1}, {17, 33, 0}, {64, 256, 0}, {130, 70, 0}, {7, 300, 0}, {520, 24, 0},
};
/* More rows than the per-row amax's grid (65535 blocks): its loop wraps. */
static const f8_shape f8_tall = {65537, 1, 0};

/* The shapes the emulator's TSan run leaves to its ASan one (the small ones
 * reach every path of the casts). */
static int f8_tsan_leaves(f8_shape s)
{
	return s.rows * s.cols > 4096 && tsan_leaves("over 4096 elements");
}

/* x (rows, cols): magnitudes over several decades, so that the casts reach
 * both their saturation and their subnormals; a zero row and a column of -0
 * (an amax of 0 takes the 1e-12 floor; -0's code keeps its sign).  With trap:
 * |x| < 0.75 but x[0][0] = 0.875 + 2^-22, whose e4m3 scale 448 / amax is 2^9
 * less 5 ulps and e5m2 one 2^16 less 5 ulps: log2 of either is 4.3e-7 under
 * the integer, less than half an ulp, so log2f rounds up to it and pow2 keeps
 * 2^9 and 2^16 (torch's behaviour, float8.h) where floor(log2(s)) would halve
 * them.  The device's log2f must round it the same way.  (A bf16 x holds
 * 0.875: exact powers.) */
static double *f8_input(f8_shape s)
{
	size_t n = (size_t)(s.rows * s.cols);
	double *x = malloc(n * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++) {
		double u = urand();
		x[i] = s.trap ? 0.75 * u : u * exp(6 * urand());
	}
	if (s.rows >= 3 && s.cols >= 3) {
		for (int64_t j = 0; j < s.cols; j++)
			x[s.cols + j] = 0.0;
		for (int64_t i = 0; i < s.rows; i++)
			x[i * s.cols + 2] = -0.0;
	}
	if (s.trap)
		x[0] = 0.875 + ldexp(1.0, -22);
	return x;
}

static void f8_amax_matches_the_cpu_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(104);
	const size_t nshapes = sizeof f8_shapes / sizeof f8_shapes[0];
	for (size_t c = 0; c <= nshapes; c++) {
		if (c == nshapes && device_only("65537 x 1, 65535 blocks of 256 threads"))
			break;
		f8_shape s = c < nshapes ? f8_shapes[c] : f8_tall;
		if (f8_tsan_leaves(s))
			continue;
		size_t n = (size_t)(s.rows * s.cols);
		double *x = f8_input(s);
		for (int tx = GPU_F32; tx <= GPU_BF16; tx++) {
			float *xf;
			void *dx = f8_input_dev(x, n, tx, &xf);
			for (int sc = GPU_F8_TENSOR; sc <= GPU_F8_COLS; sc++) {
				int64_t ns = f8_n_scales((f8_scaling)sc, s.rows, s.cols);
				float *want = malloc((size_t)ns * sizeof *want);
				assert_non_null(want);
				f8_amax(want, xf, s.rows, s.cols, (f8_scaling)sc);
				float *dam = dev_poisoned((size_t)ns, GPU_F32);
				gpu_ok(launch_f8_amax(dam, dx, tx, s.rows, s.cols, sc, NULL), "f8_amax");
				char what[128];
				snprintf(what, sizeof what, "amax %lldx%lld %s per %s", (long long)s.rows,
					 (long long)s.cols, dt_name(tx), scaling_name(sc));
				same_bits(what, dam, want, (size_t)ns, 4);
				print_message("  %-44s bit for bit\n", what);
				free(want);
				gpu_free(dam);
			}
			free(xf);
			gpu_free(dx);
		}
		free(x);
	}
}

typedef struct cast_case {
	int64_t rows, cols;
	int tx, fmt, scaling, pow2, transpose;
	int given; /* amax given (FSDP's all-reduced one) rather than taken from x */
} cast_case;

/* One launch_f8_cast against f8_scales (or f8_amax_to_scale of the given
 * amax) and f8_quantize or f8_quantize_t: scales and codes to the bit. */
static void f8_cast_case(const void *dx, const float *xf, cast_case k)
{
	size_t n = (size_t)(k.rows * k.cols);
	f8_format f = cpu_fmt(k.fmt);
	f8_scaling s = (f8_scaling)k.scaling;
	int64_t ns = f8_n_scales(s, k.rows, k.cols);
	float *sc = malloc((size_t)ns * sizeof *sc);
	uint8_t *q = malloc(n);
	assert_non_null(sc);
	assert_non_null(q);
	float *dam = NULL;
	if (k.given) {
		/* half the true amax: the largest elements saturate */
		f8_amax(sc, xf, k.rows, k.cols, s);
		for (int64_t i = 0; i < ns; i++)
			sc[i] *= 0.5f;
		dam = dev_bytes(sc, (size_t)ns * sizeof *sc);
		for (int64_t i = 0; i < ns; i++)
			sc[i] = f8_amax_to_scale(sc[i], f, k.pow2);
	} else {
		f8_scales(sc, xf, k.rows, k.cols, s, f, k.pow2);
	}
	if (k.transpose)
		f8_quantize_t(q, xf, sc, k.rows, k.cols, s, f); /* q (cols, rows) */
	else
		f8_quantize(q, xf, sc, k.rows, k.cols, s, f); /* q (rows, cols) */
	uint8_t *dq = dev_poisoned(n, k.fmt);
	float *dsc = dev_poisoned((size_t)ns, GPU_F32);
	gpu_ok(launch_f8_cast(dq, k.fmt, dsc, dx, k.tx, k.rows, k.cols, k.scaling, k.pow2, k.transpose,
			      dam, NULL),
	       "f8_cast");
	char what[160];
	snprintf(what, sizeof what, "%lldx%lld %s -> %s per %s%s%s%s", (long long)k.rows,
		 (long long)k.cols, dt_name(k.tx), f8_format_name(f), scaling_name(k.scaling),
		 k.pow2 ? " pow2" : "", k.transpose ? " transposed" : "",
		 k.given ? " amax given" : "");
	same_bits(what, dsc, sc, (size_t)ns, 4);
	same_bits(what, dq, q, n, 1);
	print_message("  %-52s scales, codes bit for bit\n", what);
	free(sc), free(q);
	gpu_free(dam), gpu_free(dq), gpu_free(dsc);
}

static void f8_cast_scales_and_codes_match_the_cpu_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(105);
	for (size_t c = 0; c < sizeof f8_shapes / sizeof f8_shapes[0]; c++) {
		f8_shape s = f8_shapes[c];
		if (f8_tsan_leaves(s))
			continue;
		size_t n = (size_t)(s.rows * s.cols);
		double *x = f8_input(s);
		for (int tx = GPU_F32; tx <= GPU_BF16; tx++) {
			float *xf;
			void *dx = f8_input_dev(x, n, tx, &xf);
			for (int fmt = GPU_E4M3; fmt <= GPU_E5M2; fmt++)
				for (int sc = GPU_F8_TENSOR; sc <= GPU_F8_COLS; sc++)
					for (int pow2 = 0; pow2 < 2; pow2++)
						for (int tr = 0; tr < 2; tr++)
							for (int given = 0; given < 2; given++) {
								/* the given amax changes the scales
								 * alone: one layout is enough */
								if (given && tr)
									continue;
								cast_case k = {s.rows, s.cols, tx, fmt, sc,
									       pow2,   tr,     given};
								f8_cast_case(dx, xf, k);
							}
			free(xf);
			gpu_free(dx);
		}
		free(x);
	}
	/* the per-row amax's grid wrapping inside the cast */
	if (device_only("65537 x 1, 65535 blocks of 256 threads"))
		return;
	size_t n = (size_t)(f8_tall.rows * f8_tall.cols);
	double *x = f8_input(f8_tall);
	for (int tx = GPU_F32; tx <= GPU_BF16; tx++) {
		float *xf;
		void *dx = f8_input_dev(x, n, tx, &xf);
		cast_case k = {f8_tall.rows, f8_tall.cols, tx, tx == GPU_F32 ? GPU_E4M3 : GPU_E5M2,
			       GPU_F8_ROWS,  1,            tx == GPU_BF16, 0};
		f8_cast_case(dx, xf, k);
		free(xf);
		gpu_free(dx);
	}
	free(x);
}

/* Every code of both formats (in order, then a longer run of them permuted),
 * into float32 and bf16 (both hold every float8 value), into an output filled
 * first with NaN and then with zeros: a code left unwritten shows either way. */
static void f8_decode_gives_every_code_exactly(void **state)
{
	(void)state;
	need_gpu();
	const size_t sizes[] = {256, 256 * 17 + 5};
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		size_t n = sizes[si];
		uint8_t *codes = malloc(n);
		assert_non_null(codes);
		for (size_t i = 0; i < n; i++)
			codes[i] = (uint8_t)(n == 256 ? i : i * 37 + 11);
		void *dq = dev_bytes(codes, n);
		for (int fmt = GPU_E4M3; fmt <= GPU_E5M2; fmt++)
			for (int ty = GPU_F32; ty <= GPU_BF16; ty++)
				for (int fill = 0; fill < 2; fill++) {
					int byte = fill ? 0x00 : 0xff;
					f8_format f = cpu_fmt(fmt);
					void *dy = dev_alloc(n * gpu_dtype_size(ty));
					titan_err e;
					if (gpu_memset(dy, byte, n * gpu_dtype_size(ty), &e))
						fail_msg("%s", e.msg);
					gpu_ok(launch_f8_decode(dy, ty, dq, fmt, (int64_t)n, NULL), "f8_decode");
					double *got = host_of(dy, n, ty);
					for (size_t i = 0; i < n; i++) {
						double want = f8_to_float(codes[i], f);
						int ok = isnan(want) ? isnan(got[i])
								     : got[i] == want &&
									       !signbit(got[i]) == !signbit(want);
						if (!ok)
							fail_msg("%s code 0x%02x -> %s: %a, want %a",
								 f8_format_name(f), codes[i], dt_name(ty), got[i],
								 want);
					}
					print_message("  %zu codes %-6s -> %-4s (output filled with 0x%02x): exact\n",
						      n, f8_format_name(f), dt_name(ty), byte);
					free(got);
					gpu_free(dy);
				}
		free(codes);
		gpu_free(dq);
	}
}

/* The scaled GEMM's dequantising scales: 1.0f / x, IEEE division in float32,
 * so known to the bit; in place too (as bench_gpu calls it). */
static void f8_recip_is_the_float32_division_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(106);
	const size_t sizes[] = {1, 7, 300, 4099};
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
		for (int in_place = 0; in_place < 2; in_place++) {
			size_t n = sizes[k];
			double *x = malloc(n * sizeof *x);
			float *want = malloc(n * sizeof *want);
			assert_non_null(x);
			assert_non_null(want);
			for (size_t i = 0; i < n; i++)
				x[i] = exp(20 * urand()); /* scales: positive, over many decades */
			x[0] = 3.0;                       /* 1/3 rounds */
			if (n > 2)
				x[1] = 448.0 / 1e-12, x[2] = 0.25; /* an all-zero row's scale; a power */
			void *dx = dev_from(x, n, GPU_F32);
			void *dy = in_place ? dx : dev_poisoned(n, GPU_F32);
			for (size_t i = 0; i < n; i++)
				want[i] = 1.0f / (float)x[i];
			gpu_ok(launch_f8_recip(dy, dx, (int64_t)n, NULL), "f8_recip");
			char what[96];
			snprintf(what, sizeof what, "recip n=%zu%s", n, in_place ? " in place" : "");
			same_bits(what, dy, want, n, 4);
			print_message("  %-44s bit for bit\n", what);
			free(x), free(want);
			gpu_free(dx);
			if (!in_place)
				gpu_free(dy);
		}
	/* a scalar scale broadcast beside a vector one */
	const size_t bsizes[] = {1, 5, 1000};
	for (size_t k = 0; k < sizeof bsizes / sizeof bsizes[0]; k++) {
		size_t n = bsizes[k];
		double x0 = exp(20 * urand());
		float *want = malloc(n * sizeof *want);
		assert_non_null(want);
		void *dx = dev_from(&x0, 1, GPU_F32), *dy = dev_poisoned(n, GPU_F32);
		for (size_t i = 0; i < n; i++)
			want[i] = 1.0f / (float)x0;
		gpu_ok(launch_f8_recip_bcast(dy, (int64_t)n, dx, NULL), "f8_recip_bcast");
		char what[96];
		snprintf(what, sizeof what, "recip_bcast n=%zu", n);
		same_bits(what, dy, want, n, 4);
		print_message("  %-44s bit for bit\n", what);
		free(want);
		gpu_free(dx), gpu_free(dy);
	}
}

/* c = beta c + acc / (sa[i] sb[j]) with per-row or scalar scales on either
 * side; beta 0 must not read c (it holds NaN here). */
static void f8_epilogue_matches_the_float64_reference(void **state)
{
	(void)state;
	need_gpu();
	seed(107);
	const struct {
		int64_t m, n;
	} shapes[] = {{1, 1}, {3, 5}, {17, 33}, {64, 256}, {130, 70}};
	for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
		for (int tc = GPU_F32; tc <= GPU_BF16; tc++)
			for (int rows_a = 0; rows_a < 2; rows_a++)
				for (int rows_b = 0; rows_b < 2; rows_b++)
					for (int beta = 0; beta < 2; beta++) {
						int64_t m = shapes[c].m, n = shapes[c].n;
						int64_t nsa = rows_a ? m : 1, nsb = rows_b ? n : 1;
						size_t mn = (size_t)(m * n);
						double *acc = rnd(mn, 10.0), *c0 = rnd(mn, 10.0);
						double *sa = rnd((size_t)nsa, 2.0), *sb = rnd((size_t)nsb, 2.0);
						for (int64_t i = 0; i < nsa; i++)
							sa[i] = exp(sa[i]);
						for (int64_t j = 0; j < nsb; j++)
							sb[j] = exp(sb[j]);
						void *dacc = dev_from(acc, mn, GPU_F32);
						void *dsa = dev_from(sa, (size_t)nsa, GPU_F32);
						void *dsb = dev_from(sb, (size_t)nsb, GPU_F32);
						void *dc = beta ? dev_from(c0, mn, tc) : dev_poisoned(mn, tc);
						gpu_ok(launch_f8_epilogue(dc, tc, dacc, dsa, nsa, dsb, nsb,
									  (float)beta, m, n, NULL),
						       "f8_epilogue");
						double *want = zeros(mn);
						for (int64_t i = 0; i < m; i++)
							for (int64_t j = 0; j < n; j++) {
								size_t k = (size_t)(i * n + j);
								want[k] = acc[k] / (sa[rows_a ? i : 0] *
										    sb[rows_b ? j : 0]) +
									  (beta ? c0[k] : 0.0);
							}
						char what[96];
						snprintf(what, sizeof what, "epilogue %lldx%lld sa (%lld) sb (%lld) beta %d",
							 (long long)m, (long long)n, (long long)nsa,
							 (long long)nsb, beta);
						expect_close(what, dc, want, mn, tc,
							     tc == GPU_BF16 ? TOL_BF16 : TOL_F32);
						free(acc), free(c0), free(sa), free(sb), free(want);
						gpu_free(dacc), gpu_free(dsa), gpu_free(dsb), gpu_free(dc);
					}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(vecadd_is_the_float32_sum_bit_for_bit),
		cmocka_unit_test(heads_cat_and_split_match_the_cpu),
		cmocka_unit_test(adamw_one_tensor_steps_match_the_float64_reference),
		cmocka_unit_test(f8_amax_matches_the_cpu_bit_for_bit),
		cmocka_unit_test(f8_cast_scales_and_codes_match_the_cpu_bit_for_bit),
		cmocka_unit_test(f8_decode_gives_every_code_exactly),
		cmocka_unit_test(f8_recip_is_the_float32_division_bit_for_bit),
		cmocka_unit_test(f8_epilogue_matches_the_float64_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
