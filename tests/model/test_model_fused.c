/* compile.enable's fused ops in the model (model_set_fusion: the q, k, v
 * projections as one product with RoPE fused into the split, the attention's
 * residual add fused into the ffn norm's forward (rmsnorm_add_fwd: once per
 * layer and forward, twice under full AC, counted), the norms' backward fused
 * with the stream's gradient add, the output projection fused with the loss)
 * against the same model without them, on the CPU backend,
 * whose fused ops are its plain kernels in sequence: on the gqa golden case's
 * weights and batch (tests/model/golden), in float32, under torch.autocast's
 * bf16 rules and under FSDP's bf16 policy, without and with full activation
 * checkpointing, and with gradient accumulation over two micro-batches.
 *   - the loss and the gradients within float32 rounding: the fused q, k, v
 *     product is one GEMM of another shape, which the library blocks (and so
 *     sums) differently, and its input gradient sums the three parts inside
 *     one product instead of adding three, so they differ by a few float32
 *     ulps (float32: bounds 1e-7 on the loss, 1e-6 relative over all the
 *     gradients; measured 4e-9 and 1.5e-7); with bf16 activations such a
 *     difference can flip a bf16 rounding downstream (bounds 1e-4 and 5e-3, a
 *     tenth of the distance between two bf16 computations: test_model_bf16.c;
 *     measured: the same loss, gradients 2.5e-4 and 5e-4 apart);
 *   - both sides near the exact (float64) gradients, as test_model_bf16.c
 *     bounds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "golden_io.h"

typedef struct mode {
	const char *name;
	model_prec prec;
	be_dtype autocast;
	model_ac_mode ac;
	double loss_tol, grad_tol, exact_tol;
} mode;

/* The CPU backend's table with rmsnorm_add_fwd counted. */
static backend_ops counted;
static __typeof__(counted.rmsnorm_add_fwd) real_add_fwd;
static int add_norms;

static void count_add_fwd(backend *be, void *y, be_dtype yt, float *rstd, void *res,
			  be_dtype rt, const void *x, const void *delta, be_dtype dt,
			  const void *w, be_dtype wt, int64_t n, int64_t d, float eps)
{
	add_norms++;
	real_add_fwd(be, y, yt, rstd, res, rt, x, delta, dt, w, wt, n, d, eps);
}

/* One step of the case on a model built for mode, fused or not: the loss,
 * the gradients (float32, the model's layout). */
static double step(json_t *c, const mode *md, unsigned fuse, int micro, float *grads)
{
	titan_err e = {0};
	llama_args a = golden_args(c);
	int b = (int)json_integer_value(json_object_get(c, "b"));
	int t = (int)json_integer_value(json_object_get(c, "t"));
	backend *be = backend_cpu_create(0, &e);
	if (be) {
		counted = *be->ops;
		real_add_fwd = counted.rmsnorm_add_fwd;
		counted.rmsnorm_add_fwd = count_add_fwd;
		be->ops = &counted;
	}
	add_norms = 0;
	model *m = be ? model_create(be, &a, 0, &e) : NULL;
	if (!m)
		fail_msg("%s", e.msg);
	size_t np = model_num_params(m), n = (size_t)b * t;
	float *w = golden_read(c, "weights", 4, np);
	int32_t *ids = golden_read(c, "inputs", 4, n), *labels = golden_read(c, "labels", 4, n);
	assert_non_null(w), assert_non_null(ids), assert_non_null(labels);
	for (int i = 0; i < model_num_tensors(m); i++)
		model_tensor_write(m, model_tensor_at(m, i), 0, w + model_tensor_at(m, i)->offset);
	if (model_set_prec(m, &md->prec, &e) ||
	    (md->autocast != BE_F32 && model_set_autocast(m, md->autocast, &e)) ||
	    model_set_ac(m, md->ac, 1, &e) || model_set_fusion(m, fuse, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(model_get_fusion(m), fuse);
	int64_t want_nv = json_integer_value(json_object_get(c, "n_valid"));
	double loss = 0;
	model_zero_grad(m);
	int bm = micro ? b / 2 : b; /* two micro-batches of half the rows */
	for (int k = 0; k * bm < b; k++) {
		double ls = 0;
		int64_t nv = 0;
		size_t off = (size_t)k * bm * t;
		if (model_forward_backward(m, ids + off, labels + off, bm, t, 1.0f / (float)want_nv,
					   &ls, &nv, &e) ||
		    be->ops->sync(be, &e))
			fail_msg("%s", e.msg);
		loss += ls;
	}
	int want = fuse & MODEL_FUSE_BLOCKS ? a.n_layers * (micro ? 2 : 1) *
						 (md->ac == MODEL_AC_FULL ? 2 : 1) : 0;
	assert_int_equal(add_norms, want);
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *tt = model_tensor_at(m, i);
		model_tensor_read(m, tt, 1, grads + tt->offset);
	}
	free(w), free(ids), free(labels);
	model_free(m);
	backend_free(be);
	return loss / (double)want_nv;
}

static void fused_model_matches_the_plain_one(void **s)
{
	(void)s;
	static const mode modes[] = {
		{"float32", {BE_F32, BE_F32, BE_F32, BE_F32}, BE_F32, MODEL_AC_NONE, 1e-7, 1e-6, 1e-4},
		{"float32, full AC", {BE_F32, BE_F32, BE_F32, BE_F32}, BE_F32, MODEL_AC_FULL, 1e-7, 1e-6,
		 1e-4},
		{"autocast bf16", {BE_F32, BE_F32, BE_BF16, BE_F32}, BE_BF16, MODEL_AC_NONE, 1e-4, 5e-3,
		 2e-2},
		{"FSDP policy bf16", {BE_BF16, BE_F32, BE_BF16, BE_BF16}, BE_F32, MODEL_AC_NONE, 1e-4, 5e-3,
		 2e-2},
	};
	json_t *c = golden_case("gqa");
	assert_non_null(c);
	llama_args a = golden_args(c);
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *probe = be ? model_create_unbound(be, &a, 0, &e) : NULL;
	assert_non_null(probe);
	size_t np = model_num_params(probe);
	model_free(probe);
	backend_free(be);
	float *g0 = malloc(np * 4), *g1 = malloc(np * 4), *g64 = golden_read(c, "grads", 4, np);
	assert_non_null(g0), assert_non_null(g1), assert_non_null(g64);
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
		for (int micro = 0; micro < 2; micro++) {
			const mode *md = &modes[i];
			double l0 = step(c, md, 0, micro, g0);
			double l1 = step(c, md, MODEL_FUSE_BLOCKS | MODEL_FUSE_LOSS, micro, g1);
			double dg = rel_err(g1, g0, np), x0 = rel_err(g0, g64, np);
			double x1 = rel_err(g1, g64, np);
			print_message("%-18s %s: loss %.9f plain, %.9f fused; gradients fused vs plain "
				      "%.2e, vs exact %.2e and %.2e\n", md->name,
				      micro ? "2 micro-batches" : "1 micro-batch ", l0, l1, dg, x0, x1);
			assert_true(fabs(l1 - l0) <= md->loss_tol * l0);
			assert_true(dg <= md->grad_tol);
			assert_true(x0 <= md->exact_tol && x1 <= md->exact_tol);
		}
	free(g0), free(g1), free(g64);
	json_decref(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fused_model_matches_the_plain_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
