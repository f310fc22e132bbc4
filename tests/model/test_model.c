/* The model's layout, flavors, initialisation, activation checkpointing,
 * gradient accumulation and determinism.  Seeds fixed and printed. */
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

/* Published sizes (Meta's model cards / HF configs), an independent reference. */
static void flavors_have_published_parameter_counts_and_ffn_sizes(void **s)
{
	(void)s;
	struct {
		const char *name;
		int64_t params;
		int ffn;
	} want[] = {
		{"debugmodel", 6163712, 768},   {"1B", 1235814400, 8192},
		{"3B", 3212749824, 8192},       {"8B", 8030261248, 14336},
		{"70B", 70553706496, 28672},    {"405B", 405853388800, 53248},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const llama_args *a = flavor_find(want[i].name);
		assert_non_null(a);
		assert_int_equal(flavor_ffn_hidden(a), want[i].ffn);
		assert_int_equal(flavor_param_count(a), want[i].params);
		assert_true(a->rope_scale_factor > 0); /* torchtitan applies 3.1 scaling to all */
	}
	assert_null(flavor_find("7B"));
}

static model *make(backend **be, const char *flavor, int vocab, int threads)
{
	titan_err e = {0};
	*be = backend_cpu_create(threads, &e);
	assert_non_null(*be);
	model *m = model_create(*be, flavor_find(flavor), vocab, &e);
	if (!m)
		fail_msg("%s", e.msg);
	return m;
}

static void debugmodel_layout_uses_torchtitan_fqns_and_covers_the_flat_buffer(void **s)
{
	(void)s;
	backend *be;
	model *m = make(&be, "debugmodel", 0, 0);
	assert_int_equal(model_num_params(m), 6163712);
	assert_int_equal(model_num_tensors(m), 1 + 6 * 9 + 2);
	size_t at = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		assert_int_equal(t->offset, at); /* contiguous, in table order */
		at += t->numel;
	}
	assert_int_equal(at, model_num_params(m));
	const model_tensor *t = model_tensor_find(m, "layers.5.feed_forward.w2.weight");
	assert_non_null(t);
	assert_int_equal(t->shape[0], 256);
	assert_int_equal(t->shape[1], 768);
	t = model_tensor_find(m, "layers.0.attention.wk.weight");
	assert_int_equal(t->shape[0], 256);
	assert_non_null(model_tensor_find(m, "output.weight"));
	assert_true(model_tensor_find(m, "norm.weight")->is_norm);
	assert_true(model_tensor_find(m, "tok_embeddings.weight")->is_embedding);
	/* flops/token: 6 (N - embedding) + 6 L H (2 hd) seq, torchtitan's formula. */
	double want = 6.0 * (6163712 - 2048 * 256) + 6.0 * 6 * 16 * (2 * 16) * 2048;
	assert_true(model_flops_per_token(m, 2048) == want);
	model_free(m);
	backend_free(be);
}

static void vocab_override_resizes_embedding_and_output(void **s)
{
	(void)s;
	backend *be;
	model *m = make(&be, "debugmodel", 1000, 0);
	assert_int_equal(model_args(m)->vocab_size, 1000);
	assert_int_equal(model_tensor_find(m, "output.weight")->shape[0], 1000);
	assert_int_equal(model_num_params(m), 6163712 - 2 * (2048 - 1000) * 256);
	model_free(m);
	backend_free(be);
}

static void stats(const float *x, size_t n, double *std, double *maxabs)
{
	double s2 = 0, mx = 0;
	for (size_t i = 0; i < n; i++) {
		s2 += (double)x[i] * x[i];
		mx = fmax(mx, fabs(x[i]));
	}
	*std = sqrt(s2 / (double)n);
	*maxabs = mx;
}

/* torchtitan 0.3.0's tied Llama 3 flavors (1B, 3B) skip the embedding's
 * init and initialise the shared weight as lm_head: trunc_normal(std
 * dim^-0.5, cut at 3 std), not the embedding's normal(1).  1B's args, small. */
static void tied_llama3_initialises_the_shared_weight_as_the_output(void **s)
{
	(void)s;
	titan_err e = {0};
	llama_args a = *flavor_find("1B");
	assert_int_equal(a.tied_embeddings, 1);
	a.dim = 256, a.n_layers = 1, a.n_heads = 4, a.n_kv_heads = 2, a.vocab_size = 2048;
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &a, 0, &e);
	if (!m)
		fail_msg("%s", e.msg);
	assert_int_equal(model_init(m, 42, 1, &e), 0);
	assert_null(model_tensor_find(m, "output.weight"));
	const model_tensor *t = model_tensor_find(m, "tok_embeddings.weight");
	double sd, mx;
	stats(model_params(m) + t->offset, t->numel, &sd, &mx);
	print_message("tied tok_embeddings.weight: std %.5f (want %.5f less the cut's 1.4%%), "
		      "max %.4f (cut %.4f)\n", sd, 1 / 16.0, mx, 3 / 16.0);
	assert_true(fabs(sd - 1 / 16.0) < 0.03 / 16.0);
	assert_true(mx <= 3 / 16.0);
	model_free(m);
	backend_free(be);
}

static void init_follows_torchtitan_stds_and_cuts_and_is_seeded(void **s)
{
	(void)s;
	backend *be;
	titan_err e = {0};
	model *m = make(&be, "debugmodel", 0, 0);
	print_message("seed 42\n");
	assert_int_equal(model_init(m, 42, 1, &e), 0);
	struct {
		const char *fqn;
		double std, cut;
	} want[] = {
		{"tok_embeddings.weight", 1.0, 0},
		{"layers.0.attention.wq.weight", 0.02, 2},
		{"layers.3.feed_forward.w1.weight", 0.02, 2},
		{"layers.0.attention.wo.weight", 0.02 / sqrt(2.0), 2},
		{"layers.5.feed_forward.w2.weight", 0.02 / sqrt(12.0), 2},
		{"layers.2.feed_forward.w3.weight", 0.02 / sqrt(6.0), 2},
		{"output.weight", 1 / 16.0, 3 / 16.0},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const model_tensor *t = model_tensor_find(m, want[i].fqn);
		double sd, mx;
		stats(model_params(m) + t->offset, t->numel, &sd, &mx);
		print_message("%s: std %.5f (want %.5f), max %.4f\n", t->fqn, sd, want[i].std, mx);
		/* the 3-sigma cut of output.weight shrinks its std by 1.4% */
		double tol = strcmp(want[i].fqn, "output.weight") == 0 ? 0.03 : 0.02;
		assert_true(fabs(sd - want[i].std) < tol * want[i].std);
		if (want[i].cut > 0)
			assert_true(mx <= want[i].cut);
	}
	const model_tensor *n = model_tensor_find(m, "layers.4.ffn_norm.weight");
	for (size_t i = 0; i < n->numel; i++)
		assert_true(model_params(m)[n->offset + i] == 1.0f);
	/* depth_init off: every wo/w2/w3 uses 0.02/sqrt(2 n_layers). */
	assert_int_equal(model_init(m, 42, 0, &e), 0);
	const model_tensor *w = model_tensor_find(m, "layers.0.attention.wo.weight");
	double sd, mx;
	stats(model_params(m) + w->offset, w->numel, &sd, &mx);
	assert_true(fabs(sd - 0.02 / sqrt(12.0)) < 0.02 * 0.02 / sqrt(12.0));

	/* Same seed, same weights, whatever the threads; another seed differs. */
	size_t np = model_num_params(m);
	float *a = malloc(np * 4);
	assert_int_equal(model_init(m, 42, 1, &e), 0);
	memcpy(a, model_params(m), np * 4);
	backend *be1;
	model *m1 = make(&be1, "debugmodel", 0, 1);
	assert_int_equal(model_init(m1, 42, 1, &e), 0);
	assert_memory_equal(a, model_params(m1), np * 4);
	assert_int_equal(model_init(m1, 43, 1, &e), 0);
	assert_true(memcmp(a, model_params(m1), np * 4) != 0);
	free(a);
	model_free(m1);
	backend_free(be1);
	model_free(m);
	backend_free(be);
}

/* A small model with GQA and random tokens, for the AC and accumulation tests. */
static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
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

static void activation_checkpointing_keeps_gradients_and_saves_memory(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &small, 0, &e);
	assert_non_null(m);
	print_message("seed 7\n");
	assert_int_equal(model_init(m, 7, 1, &e), 0);
	int b = 2, t = 96;
	size_t n = (size_t)b * t, np = model_num_params(m);
	int32_t *ids = malloc(n * 4), *labels = malloc(n * 4);
	tokens(ids, labels, n, 7);
	float *ref = malloc(np * 4);
	struct {
		model_ac_mode mode;
		int every;
		const char *name;
	} modes[] = {
		{MODEL_AC_NONE, 0, "none"}, {MODEL_AC_SELECTIVE, 2, "selective 2"},
		{MODEL_AC_OP, 0, "op"},     {MODEL_AC_FULL, 0, "full"},
	};
	size_t peak[4];
	double loss0 = 0;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(model_set_ac(m, modes[i].mode, modes[i].every, &e), 0);
		model_zero_grad(m);
		backend_reset_peak(be);
		size_t base = be->bytes_in_use;
		double ls;
		int64_t nv;
		assert_int_equal(model_forward_backward(m, ids, labels, b, t, 0.01f, &ls, &nv, &e), 0);
		peak[i] = backend_peak_bytes(be) - base;
		print_message("ac %-11s: activation peak %zu bytes (predicted %zu), loss %.7f\n",
			      modes[i].name, peak[i], model_activation_bytes(m, b, t), ls);
		if (i == 0) {
			memcpy(ref, model_grads(m), np * 4);
			loss0 = ls;
		} else {
			/* recomputation repeats the same ops in the same order: bit-exact */
			assert_memory_equal(ref, model_grads(m), np * 4);
			assert_true(ls == loss0);
		}
		assert_true(peak[i] >= model_activation_bytes(m, b, t));
	}
	assert_true(peak[1] < peak[0]);
	assert_true(peak[2] < peak[0]);
	assert_true(peak[3] < peak[2]);
	assert_true(peak[3] < peak[1]);
	assert_int_equal(model_set_ac(m, MODEL_AC_SELECTIVE, 0, &e), -1);
	free(ids), free(labels), free(ref);
	model_free(m);
	backend_free(be);
}

static void two_micro_batches_add_up_to_one_batch(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &small, 0, &e);
	assert_int_equal(model_init(m, 8, 1, &e), 0);
	int t = 33;
	size_t np = model_num_params(m);
	int32_t ids[66], labels[66];
	tokens(ids, labels, 66, 8);
	int64_t valid = 0;
	for (int i = 0; i < 66; i++)
		valid += labels[i] != MODEL_IGNORE_INDEX;
	double l1, l2, l3;
	int64_t n1, n2, n3;
	model_zero_grad(m);
	assert_int_equal(model_forward_backward(m, ids, labels, 2, t, 1.0f / (float)valid, &l1,
						&n1, &e), 0);
	float *whole = malloc(np * 4);
	memcpy(whole, model_grads(m), np * 4);
	model_zero_grad(m);
	assert_int_equal(model_forward_backward(m, ids, labels, 1, t, 1.0f / (float)valid, &l2,
						&n2, &e), 0);
	assert_int_equal(model_forward_backward(m, ids + t, labels + t, 1, t,
						1.0f / (float)valid, &l3, &n3, &e), 0);
	assert_int_equal(n1, valid);
	assert_int_equal(n2 + n3, valid);
	assert_true(fabs(l1 - (l2 + l3)) < 1e-6 * l1);
	double num = 0, den = 0;
	for (size_t i = 0; i < np; i++) {
		num = fmax(num, fabs(whole[i] - model_grads(m)[i]));
		den = fmax(den, fabs(whole[i]));
	}
	print_message("accumulated vs whole batch: rel err %.2e\n", num / den);
	assert_true(num / den < 1e-5);
	free(whole);
	model_free(m);
	backend_free(be);
}

static void repeated_steps_are_bit_identical(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &small, 0, &e);
	assert_int_equal(model_init(m, 9, 1, &e), 0);
	size_t np = model_num_params(m);
	int32_t ids[200], labels[200];
	tokens(ids, labels, 200, 9);
	float *g = malloc(np * 4);
	double l[2];
	int64_t nv;
	for (int r = 0; r < 2; r++) {
		model_zero_grad(m);
		assert_int_equal(model_forward_backward(m, ids, labels, 2, 100, 0.01f, &l[r], &nv,
							&e), 0);
		if (r == 0)
			memcpy(g, model_grads(m), np * 4);
	}
	assert_true(l[0] == l[1]);
	assert_memory_equal(g, model_grads(m), np * 4);
	free(g);
	model_free(m);
	backend_free(be);
}

static void bad_tokens_and_shapes_are_refused_with_a_message(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &small, 0, &e);
	assert_int_equal(model_init(m, 1, 1, &e), 0);
	int32_t ids[4] = {1, 2, 300, 4}, labels[4] = {1, 2, 3, 4};
	double ls;
	int64_t nv;
	assert_int_equal(model_forward_backward(m, ids, labels, 1, 4, 1, &ls, &nv, &e), -1);
	assert_non_null(strstr(e.msg, "outside the vocabulary"));
	ids[2] = 3;
	labels[1] = -5;
	assert_int_equal(model_forward_backward(m, ids, labels, 1, 4, 1, &ls, &nv, &e), -1);
	assert_non_null(strstr(e.msg, "label -5"));
	llama_args odd = small;
	odd.n_kv_heads = 3;
	assert_null(model_create(be, &odd, 0, &e));
	assert_non_null(strstr(e.msg, "n_kv_heads 3"));
	model_free(m);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flavors_have_published_parameter_counts_and_ffn_sizes),
		cmocka_unit_test(debugmodel_layout_uses_torchtitan_fqns_and_covers_the_flat_buffer),
		cmocka_unit_test(vocab_override_resizes_embedding_and_output),
		cmocka_unit_test(init_follows_torchtitan_stds_and_cuts_and_is_seeded),
		cmocka_unit_test(tied_llama3_initialises_the_shared_weight_as_the_output),
		cmocka_unit_test(activation_checkpointing_keeps_gradients_and_saves_memory),
		cmocka_unit_test(two_micro_batches_add_up_to_one_batch),
		cmocka_unit_test(repeated_steps_are_bit_identical),
		cmocka_unit_test(bad_tokens_and_shapes_are_refused_with_a_message),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
