/* The mixture-of-experts layer in the model: routing that every expert shares
 * under forced balance, a skewed routing that drops no token without a
 * capacity (and does with one), the expert_bias update against a float64
 * reference of torchtitan's formula, activation checkpointing and deferred
 * weight gradients through the experts, and flops per token from the active
 * parameters (a hand count of Qwen3-30B-A3B).  Seeds fixed and printed. */
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

/* A small Qwen3-MoE: 8 experts, top 2, a shared expert. */
static llama_args small_moe(void)
{
	llama_args a = *model_family_flavor(model_family_find("qwen3"), "debugmodel_moe_small");
	a.name = "small";
	a.dim = 32;
	a.n_layers = 3;
	a.n_heads = 4;
	a.n_kv_heads = 2;
	a.head_dim = 16;
	a.vocab_size = 96;
	a.moe.experts = 8;
	a.moe.top_k = 2;
	a.moe.inter_dim = 24;
	a.moe.shared_experts = 1;
	return a;
}

enum { B = 2, T = 16, N = B * T };

static void tokens(int32_t *ids, int32_t *labels, uint64_t seed)
{
	print_message("seed %llu\n", (unsigned long long)seed);
	for (int i = 0; i < N; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 96);
		labels[i] = (seed >> 20) % 9 == 0 ? MODEL_IGNORE_INDEX : (int32_t)((seed >> 40) % 96);
	}
}

static model *make(backend *be, const llama_args *a, uint64_t seed)
{
	titan_err e = {0};
	model *m = model_create(be, a, 0, &e);
	if (!m)
		fail_msg("%s", e.msg);
	assert_int_equal(model_init(m, seed, 1, &e), 0);
	return m;
}

static void step(model *m, const int32_t *ids, const int32_t *labels, double *loss)
{
	titan_err e = {0};
	int64_t nv;
	model_zero_grad(m);
	if (model_forward_backward(m, ids, labels, B, T, 0.05f, loss, &nv, &e))
		fail_msg("%s", e.msg);
}

/* debug.moe_force_load_balance: assignment a goes to expert a % experts. */
static void forced_balance_gives_every_expert_its_share(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	llama_args a = small_moe();
	a.moe.force_balance = 1;
	model *m = make(be, &a, 3);
	int32_t ids[N], labels[N];
	tokens(ids, labels, 3);
	double loss;
	step(m, ids, labels, &loss);
	size_t n;
	const float *c = model_moe_counts(m, &n);
	assert_int_equal(n, (size_t)(a.n_layers * a.moe.experts));
	for (size_t i = 0; i < n; i++)
		assert_true(c[i] == (float)(N * a.moe.top_k / a.moe.experts));
	print_message("every expert of every layer got %d of the %d assignments\n",
		      N * a.moe.top_k / a.moe.experts, N * a.moe.top_k);
	model_free(m);
	backend_free(be);
}

/* Every token's first choice is expert 0 (its expert_bias dwarfs the scores):
 * without a capacity nothing is dropped (the same logits as a capacity that
 * cannot bind); a capacity factor of 1 drops most of expert 0's tokens. */
static void skewed_routing_drops_no_token_without_a_capacity(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	int32_t ids[N], labels[N];
	tokens(ids, labels, 4);
	double factor[3] = {0, 4.0, 1.0}; /* none; experts / top_k (capacity N); 1 */
	float *logits[3];
	for (int i = 0; i < 3; i++) {
		llama_args a = small_moe();
		a.moe.capacity_factor = factor[i];
		model *m = make(be, &a, 4);
		float bias[8] = {10, 0, 0, 0, 0, 0, 0, 0};
		for (int k = 0; k < model_num_buffers(m); k++)
			model_buffer_write(m, model_buffer_at(m, k), bias);
		double loss;
		step(m, ids, labels, &loss);
		size_t n;
		const float *c = model_moe_counts(m, &n);
		for (int l = 0; l < a.n_layers; l++)
			assert_true(c[l * 8] == N); /* chosen by every token, whatever was kept */
		logits[i] = malloc(sizeof(float) * N * 96);
		assert_int_equal(model_forward(m, ids, NULL, B, T, logits[i], NULL, NULL, &e), 0);
		print_message("capacity factor %g: loss %.7f\n", factor[i], loss / N);
		model_free(m);
	}
	assert_memory_equal(logits[0], logits[1], sizeof(float) * N * 96);
	assert_true(memcmp(logits[0], logits[2], sizeof(float) * N * 96) != 0);
	for (int i = 0; i < 3; i++)
		free(logits[i]);
	backend_free(be);
}

/* torchtitan's _update_expert_bias in float64:
 *   delta = coeff * sign(mean(counts) - counts); bias += delta - mean(delta). */
static void ref_update(double *bias, const double *counts, int ex, double coeff)
{
	double mean = 0, dmean = 0, delta[64];
	for (int i = 0; i < ex; i++)
		mean += counts[i] / ex;
	for (int i = 0; i < ex; i++) {
		delta[i] = coeff * ((mean > counts[i]) - (mean < counts[i]));
		dmean += delta[i] / ex;
	}
	for (int i = 0; i < ex; i++)
		bias[i] += delta[i] - dmean;
}

static void expert_bias_update_matches_torchtitans_formula_in_float64(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	llama_args a = small_moe();
	model *m = make(be, &a, 5);
	int ex = a.moe.experts, nl = a.n_layers;
	assert_int_equal(model_num_buffers(m), nl);
	assert_string_equal(model_buffer_at(m, 1)->fqn, "layers.1.moe.expert_bias");
	double ref[3][8] = {{0}}, counts[8];
	uint64_t sd = 6;
	print_message("seed %llu\n", (unsigned long long)sd);
	for (int st = 0; st < 5; st++) {
		size_t n;
		float *c = model_moe_counts(m, &n); /* host memory on the CPU backend */
		for (int l = 0; l < nl; l++) {
			for (int i = 0; i < ex; i++) {
				sd = sd * 6364136223846793005ull + 1442695040888963407ull;
				/* ties with the mean included: layer 2 all equal at step 0 */
				counts[i] = l == 2 && st == 0 ? 5 : (double)((sd >> 40) % 9);
				c[l * ex + i] = (float)counts[i];
			}
			ref_update(ref[l], counts, ex, a.moe.load_balance_coeff);
		}
		assert_int_equal(model_moe_balance(m, &e), 0);
		for (size_t i = 0; i < n; i++)
			assert_true(c[i] == 0); /* counts start again */
	}
	double worst = 0;
	for (int l = 0; l < nl; l++) {
		float got[8];
		model_buffer_read(m, model_buffer_at(m, l), got);
		for (int i = 0; i < ex; i++)
			worst = fmax(worst, fabs(got[i] - ref[l][i]));
	}
	print_message("expert_bias after 5 updates: max |titan - float64| %.2e (coeff %g)\n", worst,
		      a.moe.load_balance_coeff);
	assert_true(worst < 1e-4 * a.moe.load_balance_coeff);
	/* from real routing: the most loaded expert's bias goes down */
	int32_t ids[N], labels[N];
	tokens(ids, labels, 7);
	double loss;
	step(m, ids, labels, &loss);
	size_t n;
	const float *c = model_moe_counts(m, &n);
	int hi = 0;
	double total = 0;
	for (int i = 0; i < ex; i++) {
		total += c[i];
		hi = c[i] > c[hi] ? i : hi;
	}
	assert_true(total == N * a.moe.top_k);
	float before[8], after[8];
	model_buffer_read(m, model_buffer_at(m, 0), before);
	assert_int_equal(model_moe_balance(m, &e), 0);
	model_buffer_read(m, model_buffer_at(m, 0), after);
	assert_true(after[hi] < before[hi]);
	model_free(m);
	backend_free(be);
}

/* Recomputation repeats the same ops on the same numbers: the gradients of
 * every AC mode are those of keeping everything, bit for bit, and the tokens
 * are counted once per forward. */
static void activation_checkpointing_through_the_experts_is_bit_exact(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	llama_args a = small_moe();
	a.moe.score_before_experts = 1;
	a.moe.capacity_factor = 1.5;
	a.moe.score = BE_MOE_SIGMOID;
	model *m = make(be, &a, 8);
	int32_t ids[N], labels[N];
	tokens(ids, labels, 8);
	size_t np = model_num_params(m), nc;
	float *ref = malloc(np * sizeof(float));
	model_ac_mode modes[] = {MODEL_AC_NONE, MODEL_AC_SELECTIVE, MODEL_AC_OP, MODEL_AC_FULL};
	float counts[4][24];
	double loss[4];
	for (int i = 0; i < 4; i++) {
		assert_int_equal(model_set_ac(m, modes[i], 2, &e), 0);
		step(m, ids, labels, &loss[i]);
		float *c = model_moe_counts(m, &nc);
		memcpy(counts[i], c, nc * sizeof(float));
		memset(c, 0, nc * sizeof(float));
		if (i == 0)
			memcpy(ref, model_grads(m), np * sizeof(float));
		else
			assert_memory_equal(ref, model_grads(m), np * sizeof(float));
		assert_true(loss[i] == loss[0]);
		assert_memory_equal(counts[i], counts[0], nc * sizeof(float));
	}
	print_message("none, selective 2, op, full: the same gradients and token counts\n");
	free(ref);
	model_free(m);
	backend_free(be);
}

/* Zero-bubble's split through the experts' grouped weight gradients. */
static void deferred_expert_weight_gradients_equal_the_immediate_ones(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	llama_args a = small_moe();
	model *m = make(be, &a, 9);
	int32_t ids[N], labels[N];
	tokens(ids, labels, 9);
	model_ac_mode modes[] = {MODEL_AC_NONE, MODEL_AC_FULL, MODEL_AC_OP};
	size_t np = model_num_params(m);
	float *want = malloc(np * sizeof(float));
	for (int mi = 0; mi < 3; mi++) {
		assert_int_equal(model_set_ac(m, modes[mi], 1, &e), 0);
		double loss;
		step(m, ids, labels, &loss);
		memcpy(want, model_grads(m), np * sizeof(float));
		model_zero_grad(m);
		int head = model_head_unit(m);
		model_mb *mb = model_mb_create(m, 0, head, B, T, &e);
		assert_non_null(mb);
		assert_int_equal(model_mb_set_tokens(mb, ids, labels, 1, 0.05f, NULL, &e), 0);
		for (int u = 0; u <= head; u++)
			assert_int_equal(model_unit_fwd(m, u, mb, &e), 0);
		for (int u = head; u >= 0; u--)
			assert_int_equal(model_unit_bwd(m, u, mb, 1, &e), 0);
		for (int u = 0; u <= head; u++) /* another order */
			assert_int_equal(model_unit_wgrad(m, u, mb, &e), 0);
		assert_true(model_mb_loss_sum(mb) == loss);
		/* one micro-batch: each weight gets the same one product, later */
		assert_memory_equal(want, model_grads(m), np * sizeof(float));
		model_mb_free(mb);
	}
	print_message("deferred weight gradients (experts grouped) equal the immediate ones\n");
	free(want);
	model_free(m);
	backend_free(be);
}

/* Qwen3-30B-A3B counted by hand: per layer attention 4096x2048 (wq, wo) and
 * 512x2048 (wk, wv), QK-norm 2x128, norms 2x2048, router 128x2048, experts
 * 128 x 3 x 768x2048 of which 8 of 128 are active; embedding and output
 * 151936x2048, final norm 2048.  torchtitan: 6 x (active - embedding) +
 * 6 x layers x heads x 2 x head_dim x seq. */
static void flops_per_token_count_the_active_parameters_of_qwen3_30b_a3b(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create_unbound(be, model_family_flavor(model_family_find("qwen3"),
								"30B-A3B"), 0, &e);
	assert_non_null(m);
	int64_t attn = 2 * 4096LL * 2048 + 2 * 512LL * 2048 + 2 * 128;
	int64_t experts = 128LL * 3 * 768 * 2048, dense = attn + 2 * 2048 + 128LL * 2048;
	int64_t emb = 151936LL * 2048;
	int64_t total = 48 * (dense + experts) + 2 * emb + 2048;
	int64_t active = 48 * (dense + experts / 16) + 2 * emb + 2048;
	assert_int_equal((int64_t)model_num_params(m), total);
	assert_int_equal(total, 30532122624LL);
	assert_int_equal(model_num_params_active(m), active);
	assert_int_equal(active, 3353032704LL); /* "A3B": 3.3B activated */
	double want = 6.0 * (double)(active - emb) + 6.0 * 48 * 32 * (2 * 128) * 4096;
	print_message("Qwen3-30B-A3B: %lld parameters, %lld active, %.4g flops per token at seq "
		      "4096\n", (long long)total, (long long)active, want);
	assert_true(model_flops_per_token(m, 4096) == want);
	/* a dense flavor: active == total, torchtitan's dense formula */
	model *d = model_create_unbound(be, flavor_find("8B"), 0, &e);
	assert_int_equal(model_num_params_active(d), (int64_t)model_num_params(d));
	model_free(d);
	model_free(m);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(forced_balance_gives_every_expert_its_share),
		cmocka_unit_test(skewed_routing_drops_no_token_without_a_capacity),
		cmocka_unit_test(expert_bias_update_matches_torchtitans_formula_in_float64),
		cmocka_unit_test(activation_checkpointing_through_the_experts_is_bit_exact),
		cmocka_unit_test(deferred_expert_weight_gradients_equal_the_immediate_ones),
		cmocka_unit_test(flops_per_token_count_the_active_parameters_of_qwen3_30b_a3b),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
