/* LoRA (torchtitan 0.3.0's LoRAConverter on attention.wo): the model with
 * adapters computes what the plain model computes with the merged weight
 * wo + (alpha / rank) lora_b lora_a (merged on the host in double), and its
 * adapters' gradients are the chain rule through that merge:
 *   d lora_b = s dWo lora_a^T,  d lora_a = s lora_b^T dWo,
 * dWo the plain model's gradient of the merged weight.  The frozen matrices'
 * gradients (wo's, every other linear's, the embedding's, the output's) stay
 * 0: their GEMMs are skipped; the norms' weights' are the plain model's.
 * Checked plain, and with the fused blocks (the branch left to the next
 * norm) under full activation checkpointing.  Seeds fixed. */
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
#include "model/model.h"

enum { B = 2, T = 16, R = 4 };
#define ALPHA 3.0 /* scale 0.75 */

static const llama_args plain = {
	.name = "small", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 300, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

static void tokens(int32_t *ids, int32_t *labels, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 300);
		labels[i] = (seed >> 20) % 7 == 0 ? MODEL_IGNORE_INDEX : (int32_t)((seed >> 40) % 300);
	}
}

static float *read_t(model *m, const char *fqn, int grads)
{
	const model_tensor *t = model_tensor_find(m, fqn);
	assert_non_null(t);
	float *h = malloc(t->numel * sizeof(float));
	model_tensor_read(m, t, grads, h);
	return h;
}

/* max |a - b| / max |b| */
static double rel(const float *a, const double *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs(a[i] - b[i]));
		s = fmax(s, fabs(b[i]));
	}
	return d / s;
}

/* Whether fqn is layers.<layer>.attention.wo.weight (the whole name). */
static int is_wo(const char *fqn, int *layer)
{
	int end = 0;
	return sscanf(fqn, "layers.%d.attention.wo.weight%n", layer, &end) == 1 &&
	       end == (int)strlen(fqn);
}

static void check(int fused)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	llama_args la = plain;
	la.lora_rank = R;
	la.lora_alpha = ALPHA;
	model *l = model_create(be, &la, 0, &e), *p = model_create(be, &plain, 0, &e);
	assert_non_null(l);
	assert_non_null(p);
	assert_int_equal(model_init(l, 5, 1, &e), 0);
	int64_t d = plain.dim, hq = d; /* n_heads * head_dim */
	double s = ALPHA / R;
	/* the adapters: lora_a kaiming uniform, lora_b zeros; every other tensor frozen */
	int adapters = 0;
	for (int i = 0; i < model_num_tensors(l); i++) {
		const model_tensor *t = model_tensor_at(l, i);
		int ad = strstr(t->fqn, ".lora_") != NULL;
		adapters += ad;
		assert_int_equal(t->frozen, !ad);
		if (!ad) /* the plain model's tensor of the same name and shape */
			assert_int_equal(model_tensor_find(p, t->fqn)->numel, t->numel);
	}
	assert_int_equal(adapters, 2 * plain.n_layers);
	float *a0 = read_t(l, "layers.0.attention.wo.lora_a.weight", 0);
	float *b0 = read_t(l, "layers.0.attention.wo.lora_b.weight", 0);
	double amax = 0;
	for (int64_t i = 0; i < R * hq; i++)
		amax = fmax(amax, fabs(a0[i]));
	assert_true(amax > 0.5 / sqrt((double)hq) && amax <= 1 / sqrt((double)hq));
	for (int64_t i = 0; i < d * R; i++)
		assert_true(b0[i] == 0);
	free(a0);
	free(b0);
	/* lora_b made non-zero; the plain model's wo the merged weight */
	for (int i = 0; i < model_num_tensors(p); i++) {
		const model_tensor *t = model_tensor_at(p, i);
		float *h = read_t(l, t->fqn, 0);
		int layer;
		if (is_wo(t->fqn, &layer)) {
			char an[64], bn[64];
			snprintf(an, sizeof an, "layers.%d.attention.wo.lora_a.weight", layer);
			snprintf(bn, sizeof bn, "layers.%d.attention.wo.lora_b.weight", layer);
			float *a = read_t(l, an, 0), *bw = read_t(l, bn, 0);
			for (int64_t k = 0; k < d * R; k++)
				bw[k] = (float)(0.05 * sin(0.7 * (double)k + layer));
			model_tensor_write(l, model_tensor_find(l, bn), 0, bw);
			for (int64_t o = 0; o < d; o++)
				for (int64_t c = 0; c < hq; c++) {
					double acc = 0;
					for (int r = 0; r < R; r++)
						acc += (double)bw[o * R + r] * a[r * hq + c];
					h[o * hq + c] = (float)(h[o * hq + c] + s * acc);
				}
			free(a);
			free(bw);
		}
		model_tensor_write(p, t, 0, h);
		free(h);
	}
	if (fused) {
		assert_int_equal(model_set_fusion(l, MODEL_FUSE_BLOCKS, &e), 0);
		assert_int_equal(model_set_fusion(p, MODEL_FUSE_BLOCKS, &e), 0);
		assert_int_equal(model_set_ac(l, MODEL_AC_FULL, 1, &e), 0);
		assert_int_equal(model_set_ac(p, MODEL_AC_FULL, 1, &e), 0);
	}
	int32_t ids[B * T], labels[B * T];
	tokens(ids, labels, B * T, 17);
	double ll, lp;
	int64_t nv;
	model_zero_grad(l);
	model_zero_grad(p);
	assert_int_equal(model_forward_backward(l, ids, labels, B, T, 0.05f, &ll, &nv, &e), 0);
	assert_int_equal(model_forward_backward(p, ids, labels, B, T, 0.05f, &lp, &nv, &e), 0);
	print_message("loss %.9g, merged %.9g\n", ll, lp);
	assert_true(fabs(ll - lp) <= 1e-6 * fabs(lp));
	for (int i = 0; i < model_num_tensors(p); i++) {
		const model_tensor *t = model_tensor_at(p, i);
		float *gl = read_t(l, t->fqn, 1), *gp = read_t(p, t->fqn, 1);
		int layer;
		if (is_wo(t->fqn, &layer)) {
			for (size_t k = 0; k < t->numel; k++)
				assert_true(gl[k] == 0); /* frozen: no gradient computed */
			char an[64], bn[64];
			snprintf(an, sizeof an, "layers.%d.attention.wo.lora_a.weight", layer);
			snprintf(bn, sizeof bn, "layers.%d.attention.wo.lora_b.weight", layer);
			float *a = read_t(l, an, 0), *bw = read_t(l, bn, 0);
			float *ga = read_t(l, an, 1), *gb = read_t(l, bn, 1);
			double *wa = calloc((size_t)(R * hq), sizeof(double));
			double *wb = calloc((size_t)(d * R), sizeof(double));
			for (int64_t o = 0; o < d; o++)
				for (int64_t c = 0; c < hq; c++)
					for (int r = 0; r < R; r++) {
						wb[o * R + r] += s * gp[o * hq + c] * a[r * hq + c];
						wa[r * hq + c] += s * bw[o * R + r] * gp[o * hq + c];
					}
			double ea = rel(ga, wa, (size_t)(R * hq)), eb = rel(gb, wb, (size_t)(d * R));
			print_message("layer %d: d lora_a %.2e, d lora_b %.2e\n", layer, ea, eb);
			assert_true(ea < 1e-4 && eb < 1e-4);
			free(a), free(bw), free(ga), free(gb), free(wa), free(wb);
		} else if (t->ndim == 2) {
			/* a frozen matrix (a linear, the embedding, the output):
			 * its gradient GEMM is skipped */
			for (size_t k = 0; k < t->numel; k++)
				assert_true(gl[k] == 0);
		} else {
			/* a norm's weight: its gradient, a by-product of the input
			 * gradient, is the merged model's (the plan clears it) */
			double *w = malloc(t->numel * sizeof(double));
			for (size_t k = 0; k < t->numel; k++)
				w[k] = gp[k];
			double er = rel(gl, w, t->numel);
			if (er >= 1e-4)
				print_message("%s: %.2e\n", t->fqn, er);
			assert_true(er < 1e-4);
			free(w);
		}
		free(gl);
		free(gp);
	}
	model_free(l);
	model_free(p);
	backend_free(be);
}

static void lora_is_the_merged_linear(void **s)
{
	(void)s;
	check(0);
}

static void lora_is_the_merged_linear_fused_full_ac(void **s)
{
	(void)s;
	check(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lora_is_the_merged_linear),
		cmocka_unit_test(lora_is_the_merged_linear_fused_full_ac),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
