/* The CUDA backend's float8 ops (kernels/float8.cu, cuBLASLt's scaled GEMM)
 * against the CPU backend's, which follow torchao's emulation bit for bit
 * (tests/backend/test_backend_fp8.c holds those to torchao): amax and the
 * scales equal to the bit, the float8 codes of every cast equal (both formats,
 * the three scalings, power-of-two scales, transposed, from float32 and bf16
 * inputs, and from a given amax), every code decoded exactly, and the scaled
 * GEMM (tensorwise and row-wise scales, float32 and bf16 outputs,
 * accumulating into C) within float32 summation-order error of the CPU's.
 * Without a GPU every test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#define GPU_TEST_TWO_BACKENDS
#include "gpu_test.h"
#include "gpu/gemm.h"

static void *put(const void *x, size_t bytes)
{
	titan_err e;
	void *p = gpu->ops->alloc(gpu, bytes + 16, &e);
	if (!p)
		fail_msg("%s", e.msg);
	if (x)
		gpu->ops->copy(gpu, p, x, bytes, BACKEND_H2D);
	return p;
}

static void *get(const void *d, size_t bytes)
{
	void *h = malloc(bytes + 16);
	assert_non_null(h);
	gpu->ops->copy(gpu, h, d, bytes, BACKEND_D2H);
	sync_ok(gpu);
	return h;
}

/* n random floats of magnitudes over several decades (the casts' saturation
 * and subnormals both get used), as float32 and as their bf16 bits. */
static float *values(size_t n, uint16_t **as_bf16)
{
	float *x = malloc(n * sizeof *x);
	uint16_t *h = malloc(n * sizeof *h);
	assert_non_null(x);
	assert_non_null(h);
	for (size_t i = 0; i < n; i++) {
		double u = urand();
		x[i] = (float)(u * exp(6 * urand()));
		h[i] = bf16_from_f32(x[i]);
	}
	*as_bf16 = h;
	return x;
}

static void casts_match_the_cpu_to_the_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(815);
	const int64_t rows = 200, cols = 328;
	size_t n = (size_t)(rows * cols);
	uint16_t *xh;
	float *x = values(n, &xh);
	void *dx = put(x, n * 4), *dxh = put(xh, n * 2);
	uint8_t *q = malloc(n), *dq = put(NULL, n);
	float *sc = malloc((size_t)(rows + cols) * 4), *dsc = put(NULL, (size_t)(rows + cols) * 4);
	float *am = malloc((size_t)(rows + cols) * 4), *dam = put(NULL, (size_t)(rows + cols) * 4);
	int cases = 0;
	for (int xt = BE_F32; xt <= BE_BF16; xt++)
		for (int qt = BE_E4M3; qt <= BE_E5M2; qt++)
			for (int s = BE_F8_TENSOR; s <= BE_F8_COLS; s++)
				for (int pow2 = 0; pow2 < 2; pow2++)
					for (int tr = 0; tr < 2; tr++) {
						const void *hx = xt == BE_F32 ? (void *)x : (void *)xh;
						const void *gx = xt == BE_F32 ? dx : dxh;
						int64_t ns = s == BE_F8_TENSOR ? 1 : s == BE_F8_ROWS ? rows : cols;
						cpu->ops->f8_cast(cpu, q, qt, sc, hx, xt, rows, cols, s, pow2,
								  tr, NULL);
						gpu->ops->f8_cast(gpu, dq, qt, dsc, gx, xt, rows, cols, s, pow2,
								  tr, NULL);
						sync_ok(cpu);
						uint8_t *gq = get(dq, n);
						float *gs = get(dsc, (size_t)ns * 4);
						if (memcmp(gs, sc, (size_t)ns * 4) != 0)
							fail_msg("case %d: scales differ", cases);
						size_t bad = 0;
						for (size_t i = 0; i < n; i++)
							bad += gq[i] != q[i];
						if (bad)
							fail_msg("case %d (x %d, q %d, scaling %d, pow2 %d, "
								 "transposed %d): %zu of %zu codes differ",
								 cases, xt, qt, s, pow2, tr, bad, n);
						free(gq);
						free(gs);
						cases++;
					}
	/* amax alone, and a cast from a given amax (FSDP's precomputed one) */
	for (int s = BE_F8_TENSOR; s <= BE_F8_COLS; s++) {
		int64_t ns = s == BE_F8_TENSOR ? 1 : s == BE_F8_ROWS ? rows : cols;
		cpu->ops->f8_amax(cpu, am, x, BE_F32, rows, cols, s);
		gpu->ops->f8_amax(gpu, dam, dx, BE_F32, rows, cols, s);
		sync_ok(cpu);
		float *ga = get(dam, (size_t)ns * 4);
		if (memcmp(ga, am, (size_t)ns * 4) != 0)
			fail_msg("amax (scaling %d) differs", s);
		free(ga);
	}
	am[0] *= 2;
	gpu->ops->copy(gpu, dam, am, 4, BACKEND_H2D);
	cpu->ops->f8_cast(cpu, q, BE_E4M3, sc, x, BE_F32, rows, cols, BE_F8_TENSOR, 0, 0, am);
	gpu->ops->f8_cast(gpu, dq, BE_E4M3, dsc, dx, BE_F32, rows, cols, BE_F8_TENSOR, 0, 0, dam);
	sync_ok(cpu);
	uint8_t *gq = get(dq, n);
	assert_memory_equal(gq, q, n);
	print_message("  %d casts and 3 amax equal to the bit\n", cases);
	free(gq), free(x), free(xh), free(q), free(sc), free(am);
	gpu->ops->free(gpu, dx), gpu->ops->free(gpu, dxh), gpu->ops->free(gpu, dq);
	gpu->ops->free(gpu, dsc), gpu->ops->free(gpu, dam);
}

static void every_code_decodes_exactly(void **state)
{
	(void)state;
	need_gpu();
	uint8_t codes[256];
	for (int c = 0; c < 256; c++)
		codes[c] = (uint8_t)c;
	void *dc = put(codes, 256), *dy = put(NULL, 256 * 4);
	float want[256];
	for (int t = BE_E4M3; t <= BE_E5M2; t++) {
		cpu->ops->convert(cpu, want, BE_F32, codes, t, 256);
		gpu->ops->convert(gpu, dy, BE_F32, dc, t, 256);
		sync_ok(cpu);
		float *got = get(dy, 256 * 4);
		for (int c = 0; c < 256; c++)
			if (!(got[c] == want[c] || (isnan(got[c]) && isnan(want[c]))))
				fail_msg("type %d code 0x%02x: %g, want %g", t, c, got[c], want[c]);
		free(got);
	}
	gpu->ops->free(gpu, dc), gpu->ops->free(gpu, dy);
}

/* The scaled GEMM: a (m, k) and b (n, k) cast as torchao's tensorwise or
 * rowwise recipe casts them, multiplied on both backends. */
static void scaled_gemm_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(816);
	const int64_t m = 256, n = 384, k = 512;
	uint16_t *ah, *bh;
	float *a = values((size_t)(m * k), &ah), *b = values((size_t)(n * k), &bh);
	uint8_t *qa = malloc((size_t)(m * k)), *qb = malloc((size_t)(n * k));
	float *sa = malloc((size_t)m * 4), *sb = malloc((size_t)n * 4);
	float *c = malloc((size_t)(m * n) * 4);
	double *g64 = malloc((size_t)(m * n) * 8), *w64 = malloc((size_t)(m * n) * 8);
	assert_true(qa && qb && sa && sb && c && g64 && w64);
	void *dqa = put(NULL, (size_t)(m * k)), *dqb = put(NULL, (size_t)(n * k));
	void *dsa = put(NULL, (size_t)m * 4), *dsb = put(NULL, (size_t)n * 4);
	void *dc = put(NULL, (size_t)(m * n) * 4);
	/* modes: tensorwise, row-wise, and one operand row-wise beside a scalar
	 * (cuBLASLt has no such mode: the scalar is broadcast to a vector) */
	static const char *mode_name[] = {"tensorwise", "row-wise", "a row-wise, b scalar",
					  "a scalar, b row-wise"};
	for (int mode = 0; mode < 4; mode++)
		for (int ct = BE_F32; ct <= BE_BF16; ct++)
			for (int acc = 0; acc < 2; acc++) {
				int rows_a = mode == 1 || mode == 2, rows_b = mode == 1 || mode == 3;
				int s_a = rows_a ? BE_F8_ROWS : BE_F8_TENSOR;
				int s_b = rows_b ? BE_F8_ROWS : BE_F8_TENSOR;
				int64_t nsa = rows_a ? m : 1, nsb = rows_b ? n : 1;
				cpu->ops->f8_cast(cpu, qa, BE_E4M3, sa, a, BE_F32, m, k, s_a, rows_a, 0, NULL);
				cpu->ops->f8_cast(cpu, qb, BE_E5M2, sb, b, BE_F32, n, k, s_b, rows_b, 0, NULL);
				sync_ok(cpu);
				gpu->ops->copy(gpu, dqa, qa, (size_t)(m * k), BACKEND_H2D);
				gpu->ops->copy(gpu, dqb, qb, (size_t)(n * k), BACKEND_H2D);
				gpu->ops->copy(gpu, dsa, sa, (size_t)nsa * 4, BACKEND_H2D);
				gpu->ops->copy(gpu, dsb, sb, (size_t)nsb * 4, BACKEND_H2D);
				size_t cb = (size_t)(m * n) * (ct == BE_F32 ? 4 : 2);
				for (int64_t i = 0; i < m * n; i++)
					c[i] = (float)urand();
				if (ct == BE_BF16)
					for (int64_t i = 0; i < m * n; i++)
						((uint16_t *)c)[i] = bf16_from_f32(c[i]);
				gpu->ops->copy(gpu, dc, c, cb, BACKEND_H2D);
				float beta = acc ? 1.0f : 0.0f;
				cpu->ops->f8_matmul(cpu, m, n, k, qa, BE_E4M3, sa, nsa, qb, BE_E5M2, sb, nsb,
						    beta, c, ct);
				gpu->ops->f8_matmul(gpu, m, n, k, dqa, BE_E4M3, dsa, nsa, dqb, BE_E5M2, dsb,
						    nsb, beta, dc, ct);
				sync_ok(cpu);
				void *got = get(dc, cb);
				for (int64_t i = 0; i < m * n; i++) {
					g64[i] = ct == BE_F32 ? ((float *)got)[i]
							      : bf16_to_f32(((uint16_t *)got)[i]);
					w64[i] = ct == BE_F32 ? c[i] : bf16_to_f32(((uint16_t *)c)[i]);
				}
				double err = rel_err(g64, w64, (size_t)(m * n));
				double tol = ct == BE_F32 ? 1e-5 : TOL_BF16;
				print_message("  %s scales, %s out%s: rel err %.2e (bound %.0e)\n",
					      mode_name[mode], ct == BE_F32 ? "f32" : "bf16",
					      acc ? ", += C" : "", err, tol);
				if (!(err <= tol))
					fail_msg("relative error %.3e", err);
				free(got);
			}
	free(a), free(b), free(ah), free(bh), free(qa), free(qb), free(sa), free(sb), free(c);
	free(g64), free(w64);
	gpu->ops->free(gpu, dqa), gpu->ops->free(gpu, dqb), gpu->ops->free(gpu, dsa);
	gpu->ops->free(gpu, dsb), gpu->ops->free(gpu, dc);
}

/* On Hopper cuBLASLt has outer-vector float8 kernels: a row-wise product that
 * its heuristic refuses would run on the slow epilogue fallback with nothing
 * but speed to show for it, so the GPU check fails here instead. */
static void rowwise_gemm_has_a_cublaslt_kernel(void **state)
{
	(void)state;
	need_gpu();
	titan_err e;
	gpu_info info;
	if (gpu_device_info(0, &info, &e) != 0)
		fail_msg("%s", e.msg);
	if (info.major < 9) {
		print_message("# SKIP row-wise kernels: %s is sm_%d%d, before Hopper\n", info.name,
			      info.major, info.minor);
		skip();
	}
	const int64_t m = 256, n = 384, k = 512;
	size_t ws = (size_t)32 << 20;
	void *w = gpu_malloc(ws, &e);
	void *qa = gpu_malloc((size_t)(m * k), &e), *qb = gpu_malloc((size_t)(n * k), &e);
	float *sa = gpu_malloc((size_t)m * 4, &e), *sb = gpu_malloc((size_t)n * 4, &e);
	void *d = gpu_malloc((size_t)(m * n) * 2, &e);
	assert_true(w && qa && qb && sa && sb && d);
	assert_int_equal(gpu_memset(qa, 0x38, (size_t)(m * k), &e), 0); /* e4m3 1.0 */
	assert_int_equal(gpu_memset(qb, 0x38, (size_t)(n * k), &e), 0);
	assert_int_equal(gpu_memset(sa, 0, (size_t)m * 4, &e), 0);
	assert_int_equal(gpu_memset(sb, 0, (size_t)n * 4, &e), 0);
	gpu_gemm *g = gpu_gemm_create(w, ws, &e);
	if (!g)
		fail_msg("%s", e.msg);
	gpu_gemm_f8_args x = {.m = m, .n = n, .k = k, .a = qa, .a_type = GPU_E4M3, .b = qb,
			      .b_type = GPU_E4M3, .sa = sa, .sb = sb, .a_rows = 1, .b_rows = 1,
			      .d = d, .d_type = GPU_BF16};
	int rc = gpu_gemm_f8_run(g, NULL, &x, &e);
	print_message("  row-wise float8 GEMM on %s: %s\n", info.name,
		      rc == 0 ? "cuBLASLt outer-vector kernel" : e.msg);
	if (rc != 0)
		fail_msg("row-wise float8 on sm_%d%d: %s (the fast path was expected)", info.major,
			 info.minor, e.msg);
	assert_int_equal(gpu_sync(&e), 0);
	gpu_gemm_free(g);
	gpu_free(w), gpu_free(qa), gpu_free(qb), gpu_free(sa), gpu_free(sb), gpu_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(casts_match_the_cpu_to_the_bit),
		cmocka_unit_test(every_code_decodes_exactly),
		cmocka_unit_test(scaled_gemm_matches_the_cpu),
		cmocka_unit_test(rowwise_gemm_has_a_cublaslt_kernel),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
