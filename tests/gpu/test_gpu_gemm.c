/* cuBLASLt products (gemm.h) against the CPU backend's float64 matmul in every
 * transposition, float32 and bf16, with accumulation (beta), a separate C and
 * the bias epilogue; and the fused output projection + cross-entropy (lmhead.h)
 * against the float64 ops it is made of.  Method and bounds: gpu_test.h.
 * Without a GPU every test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu_kernels.h"
#include "gpu/gemm.h"
#include "gpu/lmhead.h"
#include "gpu_test.h"

static gpu_gemm *gemm;
static void *workspace;

static int setup(void **state)
{
	(void)state;
	if (gpu_count() == 0)
		return 0;
	titan_err e;
	if (!(workspace = gpu_malloc(GPU_GEMM_WORKSPACE, &e)) ||
	    !(gemm = gpu_gemm_create(workspace, GPU_GEMM_WORKSPACE, &e))) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gpu_gemm_free(gemm);
	gpu_free(workspace);
	return 0;
}

typedef struct mm_case {
	int64_t m, n, k;
} mm_case;

/* Small and odd shapes, a tall-skinny one, and a Llama-3-8B-like projection. */
static const mm_case mm_cases[] = {
	{1, 1, 1}, {3, 5, 7}, {64, 48, 40}, {130, 17, 256}, {512, 1024, 4096},
};

static void run_case(mm_case c, int ta, int tb, int ab, int dtd, int use_c, int use_bias)
{
	int64_t m = c.m, n = c.n, k = c.k;
	/* Row strides a little larger than the rows: lda/ldb/ldd are honoured. */
	int64_t lda = (ta ? m : k) + 8, ldb = (tb ? k : n) + 8, ldd = n + 8;
	size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb);
	size_t nd = (size_t)(m * ldd);
	double *a = rnd(na, 1.0), *b = rnd(nb, 1.0), *cin = rnd(nd, 1.0), *bias = rnd((size_t)n, 1.0);
	void *da = dev_from(a, na, ab), *db = dev_from(b, nb, ab);
	void *dc = use_c ? dev_from(cin, nd, dtd) : NULL;
	void *dbias = use_bias ? dev_from(bias, (size_t)n, dtd) : NULL;
	double *want = use_c ? f64_copy(cin, nd) : zeros(nd);
	/* D is poisoned, then the expected D keeps the poison's place in the padding
	 * (ldd > n): those elements must stay unwritten, so compare rows only. */
	void *dd = use_c == 2 ? dc : dev_poisoned(nd, dtd);
	float alpha = 0.75f, beta = use_c ? 0.5f : 0.0f;
	gpu_gemm_args x = {
		.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
		.a = da, .lda = lda, .b = db, .ldb = ldb, .ab_type = ab,
		.c = dc, .d = dd, .ldd = ldd, .d_type = dtd,
		.bias = dbias, .bias_type = dtd,
	};
	titan_err e;
	if (gpu_gemm_run(gemm, NULL, &x, &e))
		fail_msg("m=%lld n=%lld k=%lld: %s", (long long)m, (long long)n, (long long)k, e.msg);
	cpu_matmul_f64(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldd);
	if (use_bias)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				want[i * ldd + j] += bias[j];
	double *got = host_of(dd, nd, dtd);
	/* rows only: the padding of each row was never part of D */
	double *g2 = zeros((size_t)(m * n)), *w2 = zeros((size_t)(m * n));
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			g2[i * n + j] = got[i * ldd + j];
			w2[i * n + j] = want[i * ldd + j];
		}
	double err = rel_err(g2, w2, (size_t)(m * n));
	double tol = dtd == GPU_BF16 ? TOL_BF16 : TOL_F32 * (ab == GPU_F32 ? 1 : 5);
	print_message("  %s%s m=%-4lld n=%-4lld k=%-4lld A,B %-4s D %-4s%s%s rel err %.2e\n",
		      ta ? "A^T" : "A  ", tb ? "B^T" : "B  ", (long long)m, (long long)n,
		      (long long)k, dt_name(ab), dt_name(dtd),
		      use_c ? (use_c == 2 ? " +=D" : " +C") : "", use_bias ? " +bias" : "", err);
	if (!(err <= tol))
		fail_msg("relative error %.3e over %.1e", err, tol);
	free(a), free(b), free(cin), free(bias), free(want), free(got), free(g2), free(w2);
	gpu_free(da), gpu_free(db), gpu_free(dbias);
	if (dd != dc)
		gpu_free(dd);
	gpu_free(dc);
}

static void gemm_every_transposition_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(81);
	for (size_t c = 0; c < sizeof mm_cases / sizeof mm_cases[0]; c++)
		for (int ta = 0; ta < 2; ta++)
			for (int tb = 0; tb < 2; tb++) {
				run_case(mm_cases[c], ta, tb, GPU_BF16, GPU_F32, 0, 0);
				run_case(mm_cases[c], ta, tb, GPU_BF16, GPU_BF16, 0, 0);
				run_case(mm_cases[c], ta, tb, GPU_F32, GPU_F32, 0, 0);
			}
}

/* beta: C read from another buffer, or D accumulated in place (weight gradients
 * of micro-batches); the bias epilogue of a linear layer with bias. */
static void gemm_accumulates_and_adds_bias(void **state)
{
	(void)state;
	need_gpu();
	seed(82);
	for (size_t c = 1; c < sizeof mm_cases / sizeof mm_cases[0]; c++) {
		run_case(mm_cases[c], 1, 0, GPU_BF16, GPU_F32, 2, 0); /* dW += x^T dy */
		run_case(mm_cases[c], 0, 1, GPU_BF16, GPU_F32, 1, 0);
		run_case(mm_cases[c], 0, 1, GPU_BF16, GPU_BF16, 0, 1); /* y = x W^T + b */
		run_case(mm_cases[c], 0, 1, GPU_F32, GPU_F32, 2, 1);
	}
}

/* One heuristic query per shape: repeated shapes reuse the cached algorithm. */
static void gemm_caches_one_algorithm_per_shape(void **state)
{
	(void)state;
	need_gpu();
	seed(83);
	int before = gpu_gemm_cached(gemm);
	mm_case c = {96, 80, 72};
	run_case(c, 0, 1, GPU_BF16, GPU_BF16, 0, 0);
	int after_one = gpu_gemm_cached(gemm);
	for (int i = 0; i < 3; i++)
		run_case(c, 0, 1, GPU_BF16, GPU_BF16, 0, 0);
	assert_int_equal(after_one, before + 1);
	assert_int_equal(gpu_gemm_cached(gemm), after_one);
}

static void gemm_rejects_bad_arguments_with_a_message(void **state)
{
	(void)state;
	need_gpu();
	gpu_gemm_args x = {.m = 4, .n = 4, .k = 4, .alpha = 1, .beta = 1, .ab_type = GPU_BF16,
			   .d_type = GPU_F32, .lda = 4, .ldb = 4, .ldd = 4};
	titan_err e = {{0}};
	assert_int_equal(gpu_gemm_run(gemm, NULL, &x, &e), -1); /* beta without C */
	assert_non_null(strstr(e.msg, "needs C"));
	x.beta = 0;
	x.ab_type = 7;
	assert_int_equal(gpu_gemm_run(gemm, NULL, &x, &e), -1);
	assert_non_null(strstr(e.msg, "bad arguments"));
}

/* The fused head against the ops it stands for, in float64 over the values the
 * device holds: logits = h w^T rounded to the logits' type, softmax
 * cross-entropy, the gradient rounded likewise, dh = g w, dw += g^T h. */
static void lmhead_matches_projection_then_cross_entropy(void **state)
{
	(void)state;
	need_gpu();
	seed(91);
	const struct {
		int64_t n, d, v, chunk;
	} cases[] = {{5, 16, 33, 2}, {64, 128, 1000, 24}, {256, 512, 32000, 100}};
	const int32_t ignore = -100;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		int64_t n = cases[c].n, d = cases[c].d, v = cases[c].v, chunk = cases[c].chunk;
		int t = GPU_BF16;
		size_t nd = (size_t)(n * d), vd = (size_t)(v * d);
		double *h = rnd(nd, 1.0), *w = rnd(vd, 0.1), *dw = rnd(vd, 0.01);
		int32_t *labels = malloc((size_t)n * sizeof *labels);
		assert_non_null(labels);
		for (int64_t i = 0; i < n; i++)
			labels[i] = i % 7 == 3 ? ignore : (int32_t)((urand() + 1) / 2 * (double)(v - 1));
		void *dh_in = dev_from(h, nd, t), *dwt = dev_from(w, vd, t);
		void *ddw = dev_from(dw, vd, GPU_F32), *ddh = dev_poisoned(nd, GPU_F32);
		void *dlab = dev_alloc((size_t)n * 4);
		void *logits = dev_alloc(gpu_lmhead_scratch_bytes(chunk, v, t));
		float *rows = dev_poisoned((size_t)n, GPU_F32);
		double *dsum = dev_alloc(sizeof(double));
		int64_t *dvalid = dev_alloc(sizeof(int64_t));
		titan_err e;
		if (gpu_upload(dlab, labels, (size_t)n * 4, &e) || gpu_memset(dsum, 0, 8, &e) ||
		    gpu_memset(dvalid, 0, 8, &e))
			fail_msg("%s", e.msg);
		int64_t nvalid = 0;
		for (int64_t i = 0; i < n; i++)
			nvalid += labels[i] != ignore;
		float scale = 1.0f / (float)nvalid;
		gpu_lmhead_args a = {
			.h = dh_in, .w = dwt, .type = t, .labels = dlab, .n = n, .d = d, .v = v,
			.ignore_index = ignore, .grad_scale = scale, .dh = ddh, .dh_type = GPU_F32,
			.dw = ddw, .logits = logits, .chunk = chunk, .row_loss = rows,
			.loss_sum = dsum, .n_valid = dvalid,
		};
		if (gpu_lmhead_loss(gemm, NULL, &a, &e))
			fail_msg("%s", e.msg);
		/* reference */
		double *lg = zeros((size_t)(n * v)), *dh = zeros(nd);
		cpu_matmul_f64(0, 1, n, v, d, 1.0, h, d, w, d, 0.0, lg, v);
		round_all(lg, (size_t)(n * v), t);
		double loss = 0;
		int64_t valid = 0;
		cpu_cross_entropy_f64(lg, labels, n, v, ignore, scale, &loss, &valid);
		round_all(lg, (size_t)(n * v), t);
		cpu_matmul_f64(0, 0, n, d, v, 1.0, lg, v, w, d, 0.0, dh, d);
		cpu_matmul_f64(1, 0, v, d, n, 1.0, lg, v, h, d, 1.0, dw, d);
		double got_loss;
		int64_t got_valid;
		if (gpu_sync(&e) || gpu_download(&got_loss, dsum, 8, &e) ||
		    gpu_download(&got_valid, dvalid, 8, &e))
			fail_msg("%s", e.msg);
		print_message(" n=%lld d=%lld v=%lld chunk=%lld: loss %.6f want %.6f\n", (long long)n,
			      (long long)d, (long long)v, (long long)chunk, got_loss / (double)nvalid,
			      loss / (double)valid);
		assert_int_equal(got_valid, valid);
		assert_true(fabs(got_loss - loss) <= TOL_BF16_CHAIN * fabs(loss));
		expect_close("lmhead dh", ddh, dh, nd, GPU_F32, TOL_BF16_CHAIN);
		expect_close("lmhead dw (accumulated)", ddw, dw, vd, GPU_F32, TOL_BF16_CHAIN);
		free(h), free(w), free(dw), free(labels), free(lg), free(dh);
		gpu_free(dh_in), gpu_free(dwt), gpu_free(ddw), gpu_free(ddh), gpu_free(dlab);
		gpu_free(logits), gpu_free(rows), gpu_free(dsum), gpu_free(dvalid);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(gemm_every_transposition_matches_the_cpu),
		cmocka_unit_test(gemm_accumulates_and_adds_bias),
		cmocka_unit_test(gemm_caches_one_algorithm_per_shape),
		cmocka_unit_test(gemm_rejects_bad_arguments_with_a_message),
		cmocka_unit_test(lmhead_matches_projection_then_cross_entropy),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
