/* Causal GQA attention on the GPU, both paths, against the CPU backend's float64
 * attention: titan's reference kernels (launch_attention_*, float32 and bf16,
 * any t) and cuDNN's fused flash attention (attn.h, bf16, t a multiple of 128).
 * The backward is fed the forward's float64 output and lse rounded to the
 * device's types, so each direction is measured on its own.  Method and bounds:
 * gpu_test.h; cuDNN rounds the probabilities to bf16 before the second product
 * (as flash attention does), hence TOL_BF16_CHAIN for its outputs.  Without a
 * GPU every test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu_kernels.h"
#include "gpu/attn.h"
#include "gpu_test.h"

#define TOL_LSE_CUDNN 1e-3 /* cuDNN's softmax statistics (its own exp) */

typedef struct att_case {
	int64_t b, t, h, hkv, hd;
} att_case;

/* One direction pair on one path: 0 = reference kernels, 1 = cuDNN. */
static void check_attention(att_case c, int dt, int path, gpu_attn *cudnn)
{
	int64_t b = c.b, t = c.t, h = c.h, hkv = c.hkv, hd = c.hd;
	size_t nq = (size_t)(b * t * h * hd), nk = (size_t)(b * t * hkv * hd);
	size_t nl = (size_t)(b * h * t);
	double *q = rnd(nq, 1.0), *k = rnd(nk, 1.0), *v = rnd(nk, 1.0), *dout = rnd(nq, 1.0);
	void *dq_in = dev_from(q, nq, dt), *dk_in = dev_from(k, nk, dt);
	void *dv_in = dev_from(v, nk, dt), *ddout = dev_from(dout, nq, dt);
	double *out = zeros(nq), *lse = zeros(nl);
	cpu_attention_fwd_f64(out, lse, q, k, v, b, t, h, hkv, hd);
	print_message(" %s b=%lld t=%lld h=%lld hkv=%lld hd=%lld\n", path ? "cuDNN" : "reference",
		      (long long)b, (long long)t, (long long)h, (long long)hkv, (long long)hd);

	void *dout_gpu = dev_poisoned(nq, dt);
	float *dlse = dev_poisoned(nl, GPU_F32);
	titan_err e;
	size_t scratch_bytes = attention_bwd_scratch_bytes(b, t, h);
	if (path == 1 && gpu_attn_prepare(cudnn, b, t, h, hkv, hd, &scratch_bytes, &e))
		fail_msg("%s", e.msg);
	void *scratch = dev_alloc(scratch_bytes ? scratch_bytes : 256);
	if (path == 0)
		gpu_ok(launch_attention_fwd(dout_gpu, dlse, dq_in, dk_in, dv_in, dt, b, t, h, hkv, hd,
					    NULL),
		       "attention_fwd");
	else if (gpu_attn_fwd(cudnn, NULL, dout_gpu, dlse, dq_in, dk_in, dv_in, b, t, h, hkv, hd,
			      scratch, scratch_bytes, &e))
		fail_msg("%s", e.msg);
	double tol_out = path ? TOL_BF16_CHAIN : dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
	expect_close("attention out", dout_gpu, out, nq, dt, tol_out);
	expect_close("attention lse", dlse, lse, nl, GPU_F32, path ? TOL_LSE_CUDNN : TOL_F32);

	/* backward from the float64 forward's out and lse, as stored */
	void *dout_ref = dev_from(out, nq, dt);
	void *dlse_ref = dev_from(lse, nl, GPU_F32);
	void *dgq = dev_poisoned(nq, dt), *dgk = dev_poisoned(nk, dt), *dgv = dev_poisoned(nk, dt);
	if (path == 0)
		gpu_ok(launch_attention_bwd(dgq, dgk, dgv, ddout, dq_in, dk_in, dv_in, dout_ref,
					    dlse_ref, dt, b, t, h, hkv, hd, scratch, NULL),
		       "attention_bwd");
	else if (gpu_attn_bwd(cudnn, NULL, dgq, dgk, dgv, ddout, dq_in, dk_in, dv_in, dout_ref,
			      dlse_ref, b, t, h, hkv, hd, scratch, scratch_bytes, &e))
		fail_msg("%s", e.msg);
	double *gq = zeros(nq), *gk = zeros(nk), *gv = zeros(nk);
	cpu_attention_bwd_f64(gq, gk, gv, dout, q, k, v, out, lse, b, t, h, hkv, hd);
	double tol = path ? TOL_BF16_CHAIN : dt == GPU_BF16 ? TOL_BF16 : 5 * TOL_F32;
	expect_close("attention dq", dgq, gq, nq, dt, tol);
	expect_close("attention dk", dgk, gk, nk, dt, tol);
	expect_close("attention dv", dgv, gv, nk, dt, tol);
	free(q), free(k), free(v), free(dout), free(out), free(lse), free(gq), free(gk), free(gv);
	gpu_free(dq_in), gpu_free(dk_in), gpu_free(dv_in), gpu_free(ddout), gpu_free(dout_gpu);
	gpu_free(dlse), gpu_free(scratch), gpu_free(dout_ref), gpu_free(dlse_ref), gpu_free(dgq);
	gpu_free(dgk), gpu_free(dgv);
}

static void reference_kernels_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(101);
	const att_case cases[] = {
		{1, 1, 1, 1, 64}, {2, 37, 4, 2, 64}, {1, 130, 8, 2, 128}, {2, 256, 4, 1, 128},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++)
			check_attention(cases[c], dt, 0, NULL);
}

/* dk and dv add the heads of a group in a fixed order, without atomics. */
static void reference_backward_repeats_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(102);
	att_case c = {1, 200, 8, 2, 64};
	size_t nq = (size_t)(c.b * c.t * c.h * c.hd), nk = (size_t)(c.b * c.t * c.hkv * c.hd);
	size_t nl = (size_t)(c.b * c.h * c.t);
	double *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *g = rnd(nq, 1);
	void *dq = dev_from(q, nq, GPU_BF16), *dk = dev_from(k, nk, GPU_BF16);
	void *dv = dev_from(v, nk, GPU_BF16), *dg = dev_from(g, nq, GPU_BF16);
	void *out = dev_poisoned(nq, GPU_BF16);
	float *lse = dev_poisoned(nl, GPU_F32);
	void *scratch = dev_alloc(attention_bwd_scratch_bytes(c.b, c.t, c.h));
	gpu_ok(launch_attention_fwd(out, lse, dq, dk, dv, GPU_BF16, c.b, c.t, c.h, c.hkv, c.hd, NULL),
	       "attention_fwd");
	double *first[3] = {NULL, NULL, NULL};
	for (int run = 0; run < 3; run++) {
		void *gq = dev_poisoned(nq, GPU_BF16), *gk = dev_poisoned(nk, GPU_BF16);
		void *gv = dev_poisoned(nk, GPU_BF16);
		gpu_ok(launch_attention_bwd(gq, gk, gv, dg, dq, dk, dv, out, lse, GPU_BF16, c.b, c.t, c.h,
					    c.hkv, c.hd, scratch, NULL),
		       "attention_bwd");
		double *got[3] = {host_of(gq, nq, GPU_BF16), host_of(gk, nk, GPU_BF16),
				  host_of(gv, nk, GPU_BF16)};
		size_t len[3] = {nq, nk, nk};
		for (int i = 0; i < 3; i++) {
			if (!first[i]) {
				first[i] = got[i];
				continue;
			}
			assert_memory_equal(first[i], got[i], len[i] * sizeof(double));
			free(got[i]);
		}
		gpu_free(gq), gpu_free(gk), gpu_free(gv);
	}
	for (int i = 0; i < 3; i++)
		free(first[i]);
	free(q), free(k), free(v), free(g);
	gpu_free(dq), gpu_free(dk), gpu_free(dv), gpu_free(dg), gpu_free(out), gpu_free(lse);
	gpu_free(scratch);
}

/* cuDNN where this build has it: a plan that fails to build on a GPU fails
 * the test (the backend would silently lose its fast path). */
static void cudnn_flash_attention_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	titan_err e;
	gpu_attn *a = gpu_attn_create(&e);
	if (!a) {
		print_message("# SKIP cuDNN attention: %s\n", e.msg);
		skip();
	}
	print_message("cuDNN %ld\n", gpu_attn_cudnn_version());
	seed(103);
	const att_case cases[] = {
		{1, 128, 4, 4, 64}, {2, 256, 8, 2, 128}, {1, 1024, 8, 1, 128}, {1, 384, 16, 4, 64},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		check_attention(cases[c], GPU_BF16, 1, a);
	size_t bytes;
	assert_int_equal(gpu_attn_prepare(a, 1, 100, 4, 4, 64, &bytes, &e), -1);
	print_message("  t=100 refused: %s\n", e.msg);
	gpu_attn_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reference_kernels_match_the_cpu),
		cmocka_unit_test(reference_backward_repeats_bit_for_bit),
		cmocka_unit_test(cudnn_flash_attention_matches_the_cpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
