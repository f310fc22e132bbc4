/* Each family against Hugging Face transformers' own modules on the same
 * weights (tests/family/golden/<case>/, written by scripts/family_golden.py):
 * the HF folder goes through titan's HF import (dcp_from_hf, the family's key
 * table) into a DCP folder, the model loads it, and titan's float32 logits,
 * loss and every parameter's gradient must match transformers' float64 ones.
 * The MoE options transformers has no model for (sigmoid scores, expert_bias,
 * node-limited groups, route_scale, shared experts, weighted inputs) are
 * checked the same way against torchtitan's own Qwen3Model and MoE, whose
 * weights and expert_bias are loaded by name, with the tokens counted per
 * expert.
 * Error metric: max|titan - ref| / max|ref| per tensor, < 1e-5 (float32
 * rounding through a few layers; transformers' RoPE angles are float32).
 *
 * Under torch.autocast's bfloat16 rules (the *_autocast cases): the same
 * reference model in float32 ran its forward and loss under
 * torch.autocast("cpu", bfloat16) (scripts/family_autocast_golden.py writes
 * <case>/autocast.safetensors); titan's model with float32 parameters, bf16
 * activations, a float32 stream and linears and grouped GEMMs reading bf16
 * copies of their weights must give
 *   - the loss within AC_LOSS_TOL of torch's autocast loss (relative),
 *   - every gradient within AC_GRAD_TOL of torch's (max-norm relative, per
 *     tensor; a tensor whose reference is below AC_TINY of the largest
 *     gradient's magnitude is measured against that instead),
 *   - over all parameters, gradients as far from the exact (float64) ones as
 *     torch's autocast gradients are, within a factor 4 either way (two bf16
 *     computations; a model left in float32 sits far closer, a wrong one far
 *     above).
 * Measured (torch 2.15, transformers 5): loss 8.9e-5 (DeepSeek V3), 2.9e-4
 * (moe_routing), 1.7e-4 (GPT-OSS), 1.7e-4 (Llama 4) from torch's autocast loss;
 * worst tensor 1.6e-2, 1.8e-2, 5.9e-2, 2.3e-2; all gradients from the exact
 * ones: titan 1.1e-2, 6.3e-3, 9.7e-3, 9.2e-3, torch 1.1e-2, 6.8e-3, 1.8e-2,
 * 1.1e-2.  GPT-OSS's reference is the loosest: transformers' experts and
 * attention keep the biased products in float32 where torchtitan's grouped
 * experts (and titan) round them to bf16.  The tolerances are 7x (loss) and
 * 1.4x-5x (tensors) the measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/model.h"
#include "safetensors/safetensors.h"

#define TOL 1e-5
#define AC_LOSS_TOL 2e-3
#define AC_GRAD_TOL 8e-2
#define AC_TINY 1e-2

static double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - (double)b[i]));
		den = fmax(den, fabs((double)b[i]));
	}
	return den > 0 ? num / den : num;
}

typedef struct golden {
	char dir[256];
	json_t *c;
	llama_args a;
	st_file ref;
	int b, t;
	int32_t *ids, *labels;
} golden;

static int ci(json_t *c, const char *k)
{
	return (int)json_integer_value(json_object_get(c, k));
}

/* The case's optional settings over the flavor's (key absent: the flavor's). */
static void opt_int(json_t *c, const char *k, int *dst)
{
	json_t *v = json_object_get(c, k);
	if (v)
		*dst = json_is_boolean(v) ? json_is_true(v) : (int)json_integer_value(v);
}

static void opt_real(json_t *c, const char *k, double *dst)
{
	json_t *v = json_object_get(c, k);
	if (v)
		*dst = json_number_value(v);
}

/* The attention, RoPE and layer-pattern settings the families beyond Qwen3
 * take from the case. */
static void golden_options(golden *g)
{
	llama_args *a = &g->a;
	opt_int(g->c, "q_lora", &a->mla.q_lora_rank);
	opt_int(g->c, "kv_lora", &a->mla.kv_lora_rank);
	opt_int(g->c, "qk_nope", &a->mla.qk_nope_head_dim);
	opt_int(g->c, "qk_rope", &a->mla.qk_rope_head_dim);
	opt_int(g->c, "v_head", &a->mla.v_head_dim);
	opt_real(g->c, "mscale", &a->mla.mscale);
	opt_real(g->c, "mla_eps", &a->mla.norm_eps);
	opt_real(g->c, "rope_orig", &a->rope.orig);
	opt_real(g->c, "rope_factor", &a->rope.factor);
	opt_int(g->c, "max_seq", &a->max_seq_len);
	opt_real(g->c, "final_eps", &a->final_norm_eps);
	opt_int(g->c, "dense", &a->moe.dense_layers);
	opt_int(g->c, "interleave", &a->moe.interleave);
	opt_int(g->c, "route_norm", &a->moe.route_norm);
	opt_int(g->c, "window", &a->sliding_window);
	opt_int(g->c, "sinks", &a->attn_sinks);
	opt_int(g->c, "attn_bias", &a->attn_bias);
	opt_int(g->c, "nope_every", &a->nope_every);
	opt_int(g->c, "chunk", &a->attn_chunk);
	opt_int(g->c, "qk_l2", &a->qk_l2_norm);
	opt_int(g->c, "temp_floor", &a->attn_temp_floor);
	opt_real(g->c, "temp_scale", &a->attn_temp_scale);
	opt_int(g->c, "mtp_layers", &a->mtp_layers);
	opt_real(g->c, "mtp_scale", &a->mtp_scale);
}

/* The case's shapes on the family's debugmodel flavor (its other settings:
 * RoPE style, QK-norm, tying). */
static void golden_open(golden *g, const char *name)
{
	titan_err e = {0};
	snprintf(g->dir, sizeof g->dir, "tests/family/golden/%s", name);
	char p[320];
	snprintf(p, sizeof p, "%s/case.json", g->dir);
	json_error_t je;
	g->c = json_load_file(p, 0, &je);
	if (!g->c)
		fail_msg("%s: %s (run scripts/family_golden.py)", p, je.text);
	const model_family *f = model_family_find(json_string_value(json_object_get(g->c, "family")));
	json_t *fl = json_object_get(g->c, "flavor");
	assert_non_null(f);
	g->a = *model_family_flavor(f, fl ? json_string_value(fl) : "debugmodel");
	g->a.name = name;
	g->a.dim = ci(g->c, "dim");
	g->a.n_layers = ci(g->c, "layers");
	g->a.n_heads = ci(g->c, "heads");
	g->a.n_kv_heads = ci(g->c, "kv");
	g->a.head_dim = ci(g->c, "head_dim");
	g->a.hidden_dim = ci(g->c, "hidden");
	g->a.vocab_size = ci(g->c, "vocab");
	g->a.norm_eps = json_number_value(json_object_get(g->c, "eps"));
	g->a.rope_theta = json_number_value(json_object_get(g->c, "theta"));
	g->a.tied_embeddings = json_is_true(json_object_get(g->c, "tied"));
	if (json_object_get(g->c, "experts")) {
		moe_args *mo = &g->a.moe;
		mo->experts = ci(g->c, "experts");
		mo->top_k = ci(g->c, "top_k");
		mo->inter_dim = ci(g->c, "moe_inter");
		mo->shared_experts = ci(g->c, "shared");
		mo->groups = ci(g->c, "groups");
		mo->limited = ci(g->c, "limited");
		mo->score_before_experts = json_is_true(json_object_get(g->c, "score_before"));
		const char *sc = json_string_value(json_object_get(g->c, "score"));
		if (sc && strcmp(sc, "sigmoid") == 0)
			mo->score = BE_MOE_SIGMOID;
		if (json_object_get(g->c, "route_scale"))
			mo->route_scale = json_number_value(json_object_get(g->c, "route_scale"));
	}
	golden_options(g);
	g->b = ci(g->c, "b");
	g->t = ci(g->c, "t");
	snprintf(p, sizeof p, "%s/ref.safetensors", g->dir);
	if (st_open(&g->ref, p, &e))
		fail_msg("%s", e.msg);
	const st_tensor *ids = st_find(&g->ref, "ids"), *labels = st_find(&g->ref, "labels");
	assert_true(ids && labels && ids->dtype == PTZ_I32);
	size_t n = (size_t)g->b * g->t;
	g->ids = malloc(n * sizeof(int32_t));
	g->labels = malloc(n * sizeof(int32_t));
	memcpy(g->ids, ids->data, n * sizeof(int32_t));
	memcpy(g->labels, labels->data, n * sizeof(int32_t));
}

static void golden_close(golden *g)
{
	st_close(&g->ref);
	json_decref(g->c);
	free(g->ids);
	free(g->labels);
}

static const float *ref_f32(const golden *g, const char *name, size_t n)
{
	const st_tensor *t = st_find(&g->ref, name);
	if (!t)
		return NULL;
	assert_int_equal(t->dtype, PTZ_F32);
	assert_int_equal(t->end - t->begin, n * sizeof(float));
	return (const float *)t->data;
}

/* The HF folder through titan's import into a DCP folder, then into m. */
static void load_from_hf(const golden *g, model *m, const char *tmp)
{
	titan_err e = {0};
	const model_family *f = model_get_family(m);
	dcp_hf_model hm = {.n_heads = g->a.n_heads, .n_kv_heads = g->a.n_kv_heads,
			   .norm_eps = g->a.norm_eps, .rope_theta = g->a.rope_theta,
			   .tied = g->a.tied_embeddings, .max_seq_len = g->a.max_seq_len,
			   .n_experts = g->a.moe.experts, .top_k = g->a.moe.top_k,
			   .keys = f->hf_keys, .config = f->hf_config, .args = &g->a};
	char hf[320];
	snprintf(hf, sizeof hf, "%s/hf", g->dir);
	if (dcp_from_hf(hf, tmp, &hm, PTZ_F32, DCP_NAMES_SOURCE, &e))
		fail_msg("%s", e.msg);
	int n = model_num_tensors(m);
	dcp_item *items = calloc((size_t)n, sizeof *items);
	for (int i = 0; i < n; i++) {
		const model_tensor *mt = model_tensor_at(m, i);
		dcp_item_full(&items[i], mt->fqn, PTZ_F32, mt->ndim, mt->shape,
			      model_params(m) + mt->offset);
	}
	if (dcp_load(tmp, items, (size_t)n, &e))
		fail_msg("%s", e.msg);
	free(items);
	/* buffers HF keeps (DeepSeek V3's e_score_correction_bias: expert_bias) */
	for (int i = 0; i < model_num_buffers(m); i++) {
		const model_tensor *t = model_buffer_at(m, i);
		float *host = malloc(t->numel * sizeof(float));
		dcp_item it;
		dcp_item_full(&it, t->fqn, PTZ_F32, t->ndim, t->shape, host);
		if (dcp_load(tmp, &it, 1, &e) == 0)
			model_buffer_write(m, t, host);
		free(host);
	}
}

/* torchtitan's state dict by name: parameters and buffers (expert_bias). */
static void load_weights(const golden *g, model *m)
{
	titan_err e = {0};
	char p[320];
	snprintf(p, sizeof p, "%s/weights.safetensors", g->dir);
	st_file w;
	if (st_open(&w, p, &e))
		fail_msg("%s", e.msg);
	for (int i = 0; i < model_num_tensors(m) + model_num_buffers(m); i++) {
		int buf = i >= model_num_tensors(m);
		const model_tensor *t = buf ? model_buffer_at(m, i - model_num_tensors(m))
					    : model_tensor_at(m, i);
		const st_tensor *s = st_find(&w, t->fqn);
		if (!s)
			fail_msg("%s: no %s", p, t->fqn);
		assert_int_equal(s->end - s->begin, t->numel * sizeof(float));
		if (buf)
			model_buffer_write(m, t, (const float *)s->data);
		else
			model_tensor_write(m, t, 0, (const float *)s->data);
	}
	st_close(&w);
}

/* The tokens each layer routed to each expert, as torchtitan counted them. */
static void check_counts(const golden *g, model *m)
{
	size_t n;
	const float *got = model_moe_counts(m, &n);
	int ex = g->a.moe.experts, mi = 0;
	for (int l = 0; l < g->a.n_layers; l++) {
		if (!model_family_moe_layer(&g->a, l))
			continue;
		char key[32];
		snprintf(key, sizeof key, "counts.%d", l);
		const float *want = ref_f32(g, key, (size_t)ex);
		assert_non_null(want);
		for (int i = 0; i < ex; i++)
			if (got[mi * ex + i] != want[i])
				fail_msg("layer %d expert %d: %g tokens, torchtitan %g", l, i,
					 got[mi * ex + i], want[i]);
		mi++;
	}
	print_message("%s: tokens per expert as torchtitan counts them (%zu)\n", g->dir, n);
}

/* max|a - b| over the tensor against max(max|b|, floor). */
static double rel_err_floor(const float *a, const float *b, size_t n, double floor)
{
	double num = 0, den = floor;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - (double)b[i]));
		den = fmax(den, fabs((double)b[i]));
	}
	return den > 0 ? num / den : num;
}

/* Squared distance and squared norm over every gradient: titan's (or torch's
 * autocast ones, got NULL) against ref. */
static void dist_all(model *m, const st_file *ac, const golden *g, int torch_side, double *num,
		     double *den)
{
	*num = *den = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		char key[96];
		snprintf(key, sizeof key, "grad.%s", t->fqn);
		const float *ex = ref_f32(g, key, t->numel);
		const st_tensor *at = st_find(ac, key);
		const float *got = torch_side ? (const float *)at->data : model_grads(m) + t->offset;
		for (size_t j = 0; j < t->numel; j++) {
			double d = (double)got[j] - ex[j];
			*num += d * d;
			*den += (double)ex[j] * ex[j];
		}
	}
}

/* The step under autocast against torch's own (autocast.safetensors). */
static void check_autocast(const golden *g, model *m, const char *name)
{
	titan_err e = {0};
	char p[320];
	snprintf(p, sizeof p, "%s/autocast.safetensors", g->dir);
	st_file ac;
	if (st_open(&ac, p, &e))
		fail_msg("%s (run scripts/family_autocast_golden.py)", e.msg);
	model_prec pr = {.param = BE_F32, .grad = BE_F32, .act = BE_BF16, .resid = BE_F32};
	if (model_set_prec(m, &pr, &e) || model_set_autocast(m, BE_BF16, &e))
		fail_msg("%s", e.msg);
	int64_t want_nv = ci(g->c, "n_valid"), nv;
	double ls;
	model_zero_grad(m);
	if (model_forward_backward(m, g->ids, g->labels, g->b, g->t, 1.0f / (float)want_nv, &ls,
				   &nv, &e) ||
	    model_backend(m)->ops->sync(model_backend(m), &e))
		fail_msg("%s", e.msg);
	assert_int_equal(nv, want_nv);
	const st_tensor *lt = st_find(&ac, "loss");
	assert_non_null(lt);
	double want = *(const double *)lt->data, exact = json_number_value(json_object_get(g->c, "loss"));
	double loss = ls / (double)nv, lerr = fabs(loss - want) / want;
	print_message("%s autocast: loss %.9f, torch autocast %.9f (rel diff %.2e); exact %.9f "
		      "(torch autocast vs exact %.2e)\n", name, loss, want, lerr, exact,
		      fabs(want - exact) / exact);
	assert_true(lerr < AC_LOSS_TOL);
	double gmax = 0; /* the largest gradient's magnitude: the floor of tiny tensors */
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		char key[96];
		snprintf(key, sizeof key, "grad.%s", t->fqn);
		const st_tensor *at = st_find(&ac, key);
		if (!at || at->end - at->begin != t->numel * sizeof(float))
			fail_msg("%s: no autocast gradient %s", p, key);
		for (size_t j = 0; j < t->numel; j++)
			gmax = fmax(gmax, fabs(((const float *)at->data)[j]));
	}
	double worst = 0;
	const char *worst_name = "";
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		char key[96];
		snprintf(key, sizeof key, "grad.%s", t->fqn);
		const float *want_g = (const float *)st_find(&ac, key)->data;
		double r = rel_err_floor(model_grads(m) + t->offset, want_g, t->numel, AC_TINY * gmax);
		if (r >= AC_GRAD_TOL)
			print_message("%s autocast: grad %s rel diff %.2e\n", name, t->fqn, r);
		if (r > worst)
			worst = r, worst_name = t->fqn;
	}
	double tn, td, an, ad;
	dist_all(m, &ac, g, 0, &tn, &td);
	dist_all(m, &ac, g, 1, &an, &ad);
	double ex = sqrt(tn / td), mp = sqrt(an / ad);
	print_message("%s autocast: gradients vs torch autocast: worst tensor %.2e (%s); vs exact: "
		      "titan %.2e, torch autocast %.2e\n", name, worst, worst_name, ex, mp);
	assert_true(worst < AC_GRAD_TOL);
	assert_true(ex > mp / 4 && ex < mp * 4);
	st_close(&ac);
}

/* Every gradient of m within TOL of the reference's (max-norm relative). */
static void check_grads(const golden *g, model *m, const char *name)
{
	double worst = 0;
	const char *worst_name = "";
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		char key[96];
		snprintf(key, sizeof key, "grad.%s", t->fqn);
		const float *want = ref_f32(g, key, t->numel);
		if (!want)
			fail_msg("%s: no reference gradient", key);
		double r = rel_err(model_grads(m) + t->offset, want, t->numel);
		if (r >= TOL)
			print_message("%s: grad %s rel err %.2e\n", name, t->fqn, r);
		if (r > worst)
			worst = r, worst_name = t->fqn;
		assert_true(r < TOL);
	}
	print_message("%s: %d gradients, worst rel err %.2e (%s)\n", name, model_num_tensors(m),
		      worst, worst_name);
}

static void check_case_mode(const char *name, int autocast)
{
	golden g;
	titan_err e = {0};
	golden_open(&g, name);
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, &g.a, 0, &e);
	if (!m)
		fail_msg("%s", e.msg);
	char tmp[] = "/tmp/titan-family-XXXXXX";
	assert_non_null(mkdtemp(tmp));
	char dcp[64];
	snprintf(dcp, sizeof dcp, "%s/dcp", tmp);
	int titan = json_object_get(g.c, "source") != NULL;
	if (titan)
		load_weights(&g, m);
	else
		load_from_hf(&g, m, dcp);
	if (autocast) {
		check_autocast(&g, m, name);
		goto done;
	}

	size_t n = (size_t)g.b * g.t, v = (size_t)g.a.vocab_size;
	float *logits = malloc(n * v * sizeof(float));
	if (model_forward(m, g.ids, NULL, g.b, g.t, logits, NULL, NULL, &e))
		fail_msg("%s", e.msg);
	double le = rel_err(logits, ref_f32(&g, "logits", n * v), n * v);
	print_message("%s: logits rel err %.2e\n", name, le);
	assert_true(le < TOL);

	int64_t want_nv = ci(g.c, "n_valid");
	double want_loss = json_number_value(json_object_get(g.c, "loss")), ls;
	int64_t nv;
	model_zero_grad(m);
	if (model_forward_backward(m, g.ids, g.labels, g.b, g.t, 1.0f / (float)want_nv, &ls, &nv,
				   &e))
		fail_msg("%s", e.msg);
	assert_int_equal(nv, want_nv);
	if (titan)
		check_counts(&g, m);
	double lerr = fabs(ls / (double)nv - want_loss) / want_loss;
	print_message("%s: loss %.9f vs reference %.9f, rel err %.2e\n", name,
		      ls / (double)nv, want_loss, lerr);
	assert_true(lerr < TOL);
	check_grads(&g, m, name);
	free(logits);
done:
	model_free(m);
	backend_free(be);
	golden_close(&g);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	assert_int_equal(system(cmd), 0);
}

static void check_case(const char *name)
{
	check_case_mode(name, 0);
}

static void qwen3_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("qwen3");
}

/* Qwen3-MoE with debugmodel_moe's routing: 64 experts, top 8, softmax scores
 * normalised; expert_bias zero (HF has none), so routing is transformers'. */
static void qwen3_moe_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("qwen3_moe");
}

static void moe_routing_options_match_torchtitans_moe(void **s)
{
	(void)s;
	check_case("moe_routing");
}

/* DeepSeek V3's debugmodel layout against torchtitan's DeepSeekV3Model: MLA,
 * YaRN with its softmax mscale, a dense first layer, softmax experts with
 * shared ones and a random expert_bias. */
static void deepseek_v3_matches_torchtitan_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("deepseek_v3");
}

/* DeepSeek V3 (671B's routing) against transformers' DeepseekV3ForCausalLM,
 * through titan's HF import: MLA with a q bottleneck, sigmoid grouped routing
 * steered by e_score_correction_bias. */
static void deepseek_v3_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("deepseek_v3_hf");
}

/* GPT-OSS against transformers' GptOssForCausalLM, through titan's HF import:
 * sinks, attention biases, the 128-token window of the even layers, YaRN on
 * halves with its cos/sin scale, the router's bias, mlp1/mlp2 with biases and
 * the clamped SwiGLU. */
static void gpt_oss_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("gpt_oss");
}

/* Llama 4 against transformers' Llama4ForCausalLM with HF's options: NoPE
 * layers with the attention temperature, chunked RoPE layers with QK-norm
 * after RoPE, dense and MoE layers interleaved (top-1 sigmoid weighting the
 * input, a shared expert), Llama 4's RoPE scaling. */
static void llama4_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("llama4");
}

/* debugmodel_irope's own settings over 260 tokens: the 256-token chunks. */
static void llama4_irope_matches_transformers_logits_loss_and_gradients(void **s)
{
	(void)s;
	check_case("llama4_irope");
}

/* One pass of m over the case's tokens and positions on a micro-batch of
 * every unit: a forward with the main logits into logits (labels NULL), or a
 * training step with the loss into *loss_sum (model_mb_loss_sum). */
static void run_with_positions(const golden *g, model *m, const int32_t *labels, float *logits,
			       double *loss_sum)
{
	titan_err e = {0};
	const st_tensor *pt = st_find(&g->ref, "positions");
	assert_true(pt && pt->dtype == PTZ_I32);
	model_mb *mb = model_mb_create(m, 0, model_head_unit(m), g->b, g->t, &e);
	int64_t nv = ci(g->c, "n_valid");
	if (!mb || model_mb_set_tokens(mb, g->ids, labels, labels != NULL,
				       labels ? 1.0f / (float)nv : 0, logits, &e) ||
	    model_mb_set_positions(mb, (const int32_t *)pt->data, &e) ||
	    model_run_mb(m, mb, NULL, &e))
		fail_msg("%s", e.msg);
	if (loss_sum) {
		assert_int_equal(model_mb_valid(mb), nv);
		*loss_sum = model_mb_loss_sum(mb);
	}
	model_mb_free(mb);
}

/* DeepSeek V3 with two multi-token prediction depths against torchtitan
 * 0.3.0's MTPDecoder and MTPLoss (scripts/mtp_golden.py, float64): the main
 * logits, the loss (main + 0.3 x the depths' mean, over the main labels) and
 * every gradient, the depths' included, over three documents in one row. */
static void deepseek_v3_mtp_matches_torchtitan_030_loss_and_gradients(void **s)
{
	(void)s;
	golden g;
	titan_err e = {0};
	golden_open(&g, "deepseek_v3_mtp");
	backend *be = backend_cpu_create(0, &e);
	model *m = be ? model_create(be, &g.a, 0, &e) : NULL;
	if (!m)
		fail_msg("%s", e.msg);
	load_weights(&g, m);
	size_t n = (size_t)g.b * g.t, v = (size_t)g.a.vocab_size;
	float *logits = malloc(n * v * sizeof(float));
	run_with_positions(&g, m, NULL, logits, NULL);
	double le = rel_err(logits, ref_f32(&g, "logits", n * v), n * v);
	print_message("deepseek_v3_mtp: logits rel err %.2e\n", le);
	assert_true(le < TOL);
	double ls, want = json_number_value(json_object_get(g.c, "loss"));
	model_zero_grad(m);
	run_with_positions(&g, m, g.labels, NULL, &ls);
	double loss = ls / (double)ci(g.c, "n_valid"), lerr = fabs(loss - want) / want;
	print_message("deepseek_v3_mtp: loss %.9f vs 0.3.0's %.9f, rel err %.2e\n", loss, want,
		      lerr);
	assert_true(lerr < TOL);
	check_grads(&g, m, "deepseek_v3_mtp");
	free(logits);
	model_free(m);
	backend_free(be);
	golden_close(&g);
}

/* Each family's pieces under torch.autocast's bf16 rules. */
static void deepseek_v3_autocast_matches_torch_autocast(void **s)
{
	(void)s;
	check_case_mode("deepseek_v3", 1);
}

static void moe_routing_autocast_matches_torch_autocast(void **s)
{
	(void)s;
	check_case_mode("moe_routing", 1);
}

static void gpt_oss_autocast_matches_torch_autocast(void **s)
{
	(void)s;
	check_case_mode("gpt_oss", 1);
}

static void llama4_autocast_matches_torch_autocast(void **s)
{
	(void)s;
	check_case_mode("llama4", 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(llama4_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(llama4_irope_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(gpt_oss_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(deepseek_v3_matches_torchtitan_logits_loss_and_gradients),
		cmocka_unit_test(deepseek_v3_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(deepseek_v3_mtp_matches_torchtitan_030_loss_and_gradients),
		cmocka_unit_test(qwen3_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(qwen3_moe_matches_transformers_logits_loss_and_gradients),
		cmocka_unit_test(moe_routing_options_match_torchtitans_moe),
		cmocka_unit_test(deepseek_v3_autocast_matches_torch_autocast),
		cmocka_unit_test(moe_routing_autocast_matches_torch_autocast),
		cmocka_unit_test(gpt_oss_autocast_matches_torch_autocast),
		cmocka_unit_test(llama4_autocast_matches_torch_autocast),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
