/* The model (lib/model) on the CUDA backend against the same model on the CPU
 * backend: one training step's loss and every gradient, in float32 (equal within
 * float32 rounding) and under autocast-style bf16 (bf16 activations, float32
 * residual stream, parameters and gradients: within bf16 tolerance); then a
 * short training run with AdamW whose loss curve must track the CPU's.  The
 * flavor is debugmodel's shape with fewer layers and a smaller vocabulary, so
 * the CPU side stays quick.  Without a GPU every test reports skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "model/model.h"
#include "optim/optim.h"
#include "gpu_test.h"

#define B 2
#define T 64
#define VOCAB 512

/* float32 vs float32: the kernels' sums run in another order than the CPU's. */
#define TOL_STEP_F32 1e-4
/* bf16 activations against float32: loss and gradients within bf16 tolerance. */
#define TOL_STEP_BF16_LOSS 1e-2
#define TOL_STEP_BF16_GRAD 5e-2

static llama_args small(void)
{
	llama_args a = *flavor_find("debugmodel");
	a.n_layers = 2;
	return a;
}

static void tokens(int32_t *ids, int32_t *labels, size_t n, uint64_t seed)
{
	print_message("token seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % VOCAB);
		labels[i] = (seed >> 20) % 9 == 0 ? MODEL_IGNORE_INDEX : (int32_t)((seed >> 40) % VOCAB);
	}
}

typedef struct side {
	backend *be;
	model *m;
	double loss;
	int64_t valid;
	float *grads; /* host copy, the whole flat layout */
} side;

static void side_open(side *s, backend *be, const model_prec *prec)
{
	titan_err e;
	llama_args a = small();
	s->be = be;
	s->m = model_create(be, &a, VOCAB, &e);
	if (!s->m)
		fail_msg("%s", e.msg);
	if (model_init(s->m, 7, 1, &e) || (prec && model_set_prec(s->m, prec, &e)))
		fail_msg("%s", e.msg);
	s->grads = malloc(model_num_params(s->m) * sizeof(float));
	assert_non_null(s->grads);
}

static void side_close(side *s)
{
	model_free(s->m);
	free(s->grads);
}

/* One step: forward and backward of a batch, gradients read to the host. */
static void side_step(side *s, const int32_t *ids, const int32_t *labels)
{
	titan_err e;
	model_zero_grad(s->m);
	if (model_forward_backward(s->m, ids, labels, B, T, 1.0f / (B * T), &s->loss, &s->valid, &e))
		fail_msg("%s: %s", s->be->ops->name, e.msg);
	for (int i = 0; i < model_num_tensors(s->m); i++) {
		const model_tensor *t = model_tensor_at(s->m, i);
		model_tensor_read(s->m, t, 1, s->grads + t->offset);
	}
	if (s->be->ops->sync(s->be, &e))
		fail_msg("%s", e.msg);
}

/* Every tensor's gradient, each against its own largest element. */
static void compare_grads(const side *gpu, const side *cpu, double tol)
{
	double worst = 0;
	const char *where = "";
	for (int i = 0; i < model_num_tensors(cpu->m); i++) {
		const model_tensor *t = model_tensor_at(cpu->m, i);
		double num = 0, den = 0;
		for (size_t j = 0; j < t->numel; j++) {
			double g = gpu->grads[t->offset + j], c = cpu->grads[t->offset + j];
			if (isnan(g))
				fail_msg("%s: NaN at %zu", t->fqn, j);
			num = fmax(num, fabs(g - c));
			den = fmax(den, fabs(c));
		}
		double err = den > 0 ? num / den : num;
		if (err > worst)
			worst = err, where = t->fqn;
	}
	print_message("  gradients: worst rel err %.2e in %s (bound %.1e)\n", worst, where, tol);
	if (!(worst <= tol))
		fail_msg("gradient of %s: relative error %.3e over %.1e", where, worst, tol);
}

static backend *cuda_backend(int attention)
{
	titan_err e;
	backend_cuda_opts o = {.device = 0, .arena_bytes = (size_t)2 << 30, .attention = attention};
	backend *be = backend_cuda_create(&o, &e);
	if (!be)
		fail_msg("%s", e.msg);
	return be;
}

static void one_step_matches_the_cpu_in_float32_and_bf16(void **state)
{
	(void)state;
	need_gpu();
	titan_err e;
	int32_t ids[B * T], labels[B * T];
	tokens(ids, labels, B * T, 41);
	backend *cb = backend_cpu_create(0, &e), *gb = cuda_backend(BACKEND_CUDA_ATTN_AUTO);
	assert_non_null(cb);
	side cpu, gpu32, gpu16;
	side_open(&cpu, cb, NULL);
	side_step(&cpu, ids, labels);

	side_open(&gpu32, gb, NULL);
	side_step(&gpu32, ids, labels);
	double err = fabs(gpu32.loss - cpu.loss) / fabs(cpu.loss);
	print_message(" float32: loss %.7f cpu %.7f (rel %.1e), attention on %s\n",
		      gpu32.loss / (double)gpu32.valid, cpu.loss / (double)cpu.valid, err,
		      backend_cuda_attention_path(gb));
	assert_int_equal(gpu32.valid, cpu.valid);
	assert_true(err <= TOL_STEP_F32);
	compare_grads(&gpu32, &cpu, TOL_STEP_F32);
	side_close(&gpu32);

	model_prec autocast = {.param = BE_F32, .grad = BE_F32, .act = BE_BF16, .resid = BE_F32};
	side_open(&gpu16, gb, &autocast);
	side_step(&gpu16, ids, labels);
	err = fabs(gpu16.loss - cpu.loss) / fabs(cpu.loss);
	print_message(" bf16 activations: loss %.7f cpu %.7f (rel %.1e)\n",
		      gpu16.loss / (double)gpu16.valid, cpu.loss / (double)cpu.valid, err);
	assert_true(err <= TOL_STEP_BF16_LOSS);
	compare_grads(&gpu16, &cpu, TOL_STEP_BF16_GRAD);
	print_message(" arena peak %.1f MiB\n", (double)gb->peak_bytes / (1 << 20));
	side_close(&gpu16);
	side_close(&cpu);
	backend_free(gb);
	backend_free(cb);
}

/* Steps of AdamW on one fixed batch (on the CPU the loss falls from 6.7 to
 * about 1.2 in these 12 steps): the GPU's losses in float32 track the CPU's
 * step for step, titan's attention kernels on both sides of the comparison. */
static void training_tracks_the_cpu_loss_curve(void **state)
{
	(void)state;
	need_gpu();
	enum { STEPS = 12 };
	titan_err e;
	int32_t ids[B * T], labels[B * T];
	tokens(ids, labels, B * T, 43);
	backend *bes[2] = {backend_cpu_create(0, &e), cuda_backend(BACKEND_CUDA_ATTN_REFERENCE)};
	assert_non_null(bes[0]);
	double curve[2][STEPS];
	for (int k = 0; k < 2; k++) {
		side s;
		side_open(&s, bes[k], NULL);
		adamw_config c;
		adamw_config_default(&c);
		adamw *o = adamw_create(bes[k], model_num_params(s.m), &c, &e);
		if (!o)
			fail_msg("%s", e.msg);
		for (int step = 0; step < STEPS; step++) {
			model_zero_grad(s.m);
			if (model_forward_backward(s.m, ids, labels, B, T, 1.0f / (B * T), &s.loss,
						   &s.valid, &e))
				fail_msg("%s", e.msg);
			grad_clip_norm(bes[k], model_grads(s.m), model_num_params(s.m), 1.0);
			adamw_step(o, model_params(s.m), model_grads(s.m), c.lr);
			curve[k][step] = s.loss / (double)s.valid;
		}
		if (bes[k]->ops->sync(bes[k], &e))
			fail_msg("%s", e.msg);
		adamw_free(o);
		side_close(&s);
	}
	double worst = 0;
	for (int step = 0; step < STEPS; step++) {
		double d = fabs(curve[1][step] - curve[0][step]) / curve[0][step];
		worst = fmax(worst, d);
		if (step % 5 == 0 || step == STEPS - 1)
			print_message("  step %2d loss gpu %.6f cpu %.6f\n", step + 1, curve[1][step],
				      curve[0][step]);
	}
	print_message("  worst relative difference %.2e\n", worst);
	assert_true(curve[1][STEPS - 1] < curve[1][0] - 1.0); /* it learned */
	assert_true(worst <= 2e-3);
	backend_free(bes[1]);
	backend_free(bes[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_step_matches_the_cpu_in_float32_and_bf16),
		cmocka_unit_test(training_tracks_the_cpu_loss_curve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
