/* Flux's text encoders (lib/textenc) on the CUDA backend against the same
 * encoders on the CPU backend and against transformers, on the tiny models of
 * tests/textenc/golden (scripts/textenc_golden.py): T5's last_hidden_state
 * and CLIP's pooler_output; the float32 models within 1e-5 of the CPU's
 * outputs and of transformers' (relative to the largest value), the bf16
 * models (bf16 weights and activations on both backends) within
 * tests/textenc's bounds of the CPU's bf16 outputs and of transformers' bf16
 * models: the two backends round the same tensors, their float32 sums in
 * other orders flip some roundings.  Prints "result textenc NAME VALUE" lines
 * for scripts/gpu/check.sh's table.  Without a GPU every test reports skipped
 * with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "safetensors/safetensors.h"
#include "textenc/textenc.h"
/* titan's attention kernels: cuDNN's refusal of CLIP's tiny heads would only warn */
#define GPU_TEST_ATTENTION BACKEND_CUDA_ATTN_REFERENCE
#define GPU_TEST_TWO_BACKENDS
#include "gpu_test.h"

#define GOLDEN "tests/textenc/golden"
#define TOL_TEXTENC_F32 1e-5
/* tests/textenc's bounds of the bf16 models against transformers' bf16 */
#define TOL_T5_BF16 6e-2
#define TOL_CLIP_BF16 2e-2

/* Golden case NAME encoded on be in dt: the output (T5 (b, l, d_model), CLIP
 * (b, hidden)), poisoned first, which the caller frees. */
static float *encode(backend *be, const char *name, int t5, be_dtype dt, const st_file *io)
{
	char dir[256];
	titan_err e;
	snprintf(dir, sizeof dir, GOLDEN "/%s", name);
	const st_tensor *ids = st_find(io, "ids"), *ref = st_find(io, "out");
	assert_non_null(ids);
	assert_non_null(ref);
	int64_t b = ids->shape[0], l = ids->shape[1];
	int64_t n = (int64_t)((ref->end - ref->begin) / sizeof(float));
	t5_encoder *tm = t5 ? t5_encoder_open(be, dir, dt, &e) : NULL;
	clip_text *cm = t5 ? NULL : clip_text_open(be, dir, dt, &e);
	if (tm == NULL && cm == NULL)
		fail_msg("%s on %s: %s", name, be->ops->name, e.msg);
	float *out = malloc((size_t)n * sizeof *out);
	assert_non_null(out);
	for (int64_t i = 0; i < n; i++)
		out[i] = NAN;
	int rc = t5 ? t5_encoder_forward(tm, (const int32_t *)ids->data, b, l, out, &e)
		    : clip_text_forward(cm, (const int32_t *)ids->data, b, l, out, &e);
	if (rc < 0)
		fail_msg("%s on %s: %s", name, be->ops->name, e.msg);
	t5_encoder_free(tm);
	clip_text_free(cm);
	return out;
}

/* One golden case in float32 and in bf16 on both backends; against
 * transformers too where the case has its output (every case in float32,
 * the *_bf16 ones in bf16). */
static void case_on_both(const char *name, int t5, double tol_bf16)
{
	need_gpu();
	char path[256];
	titan_err e;
	st_file io;
	snprintf(path, sizeof path, GOLDEN "/%s/io.safetensors", name);
	if (st_open(&io, path, &e) < 0)
		fail_msg("%s", e.msg);
	const st_tensor *ref = st_find(&io, "out");
	int64_t n = (int64_t)((ref->end - ref->begin) / sizeof(float));
	for (int bf = 0; bf < 2; bf++) {
		be_dtype dt = bf ? BE_BF16 : BE_F32;
		const char *tn = bf ? "bf16" : "f32";
		const st_tensor *hf = bf ? st_find(&io, "out_bf16") : ref;
		float *c = encode(cpu, name, t5, dt, &io), *g = encode(gpu, name, t5, dt, &io);
		double tol = bf ? tol_bf16 : TOL_TEXTENC_F32, vs_cpu = rel_err_f(g, c, n);
		double vs_hf = hf ? rel_err_f(g, (const float *)hf->data, n) : 0;
		if (hf)
			print_message("  %-24s %-4s cuda vs cpu %.2e, vs transformers %.2e (cpu "
				      "%.2e), bound %.1e\n",
				      name, tn, vs_cpu, vs_hf, rel_err_f(c, (const float *)hf->data, n),
				      tol);
		else
			print_message("  %-24s %-4s cuda vs cpu %.2e, bound %.1e\n", name, tn, vs_cpu,
				      tol);
		print_message("result textenc %s_%s_cuda_vs_cpu %.3g\n", name, tn, vs_cpu);
		if (!(vs_cpu <= tol && vs_hf <= tol))
			fail_msg("%s (%s) on the CUDA backend: %.3e from the CPU's, %.3e from "
				 "transformers', bound %.1e",
				 name, tn, vs_cpu, vs_hf, tol);
		free(c), free(g);
	}
	st_close(&io);
}

static void t5_on_cuda_matches_the_cpu_and_transformers(void **state)
{
	(void)state;
	case_on_both("t5", 1, TOL_T5_BF16);
	case_on_both("t5_sharded_bf16", 1, TOL_T5_BF16);
}

static void clip_on_cuda_matches_the_cpu_and_transformers(void **state)
{
	(void)state;
	case_on_both("clip", 0, TOL_CLIP_BF16);
	case_on_both("clip_eos_prefixed_bf16", 0, TOL_CLIP_BF16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t5_on_cuda_matches_the_cpu_and_transformers),
		cmocka_unit_test(clip_on_cuda_matches_the_cpu_and_transformers),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
