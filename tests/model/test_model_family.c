/* The registry of model families: every family is found by name, its flavors
 * point back to it and build models whose layout agrees with the flavor's
 * parameter count, and every tensor carries torchtitan's tensor-parallel style
 * (what the TP plan reads); every family's pieces run under the bfloat16
 * precision modes; every flavor of torchtitan 0.3.0's four families is one of
 * titan's, with 0.3.0's numbers. */
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

static void every_family_is_found_by_name_and_owns_its_flavors(void **s)
{
	(void)s;
	const model_family *f;
	int n = 0;
	for (int i = 0; (f = model_family_at(i)) != NULL; i++, n++) {
		assert_ptr_equal(model_family_find(f->name), f);
		assert_non_null(f->description);
		int nf = 0;
		for (const llama_args *a = f->flavors; a->name != NULL; a++, nf++) {
			assert_ptr_equal(model_family_of(a), f);
			assert_ptr_equal(model_family_flavor(f, a->name), a);
			for (const llama_args *b = f->flavors; b != a; b++)
				assert_true(strcmp(a->name, b->name) != 0);
		}
		print_message("%s: %d flavors\n", f->name, nf);
		assert_true(nf > 0);
		assert_non_null(model_family_flavor(f, "debugmodel"));
	}
	assert_true(n >= 1);
	assert_null(model_family_find("gpt2"));
	assert_null(model_family_flavor(model_family_find("llama3"), "7B"));
	/* args without a family are Llama 3's (tests and tools write their own) */
	llama_args plain = {.name = "plain"};
	assert_ptr_equal(model_family_of(&plain), model_family_find("llama3"));
	assert_ptr_equal(flavor_find("8B"), model_family_flavor(model_family_find("llama3"), "8B"));
}

/* torchtitan's parallelize_llama: colwise wq wk wv w1 w3 and output, rowwise wo
 * w2 and the embedding (its vocabulary rows), the norms replicated. */
static void llama3_tensors_carry_torchtitans_tensor_parallel_plan(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create_unbound(be, flavor_find("debugmodel"), 0, &e);
	assert_non_null(m);
	const char *col[] = {".wq.", ".wk.", ".wv.", ".w1.", ".w3.", "output."};
	const char *row[] = {".wo.", ".w2."};
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		int want = MODEL_TP_REPLICATE, dim = -1;
		for (size_t k = 0; k < sizeof col / sizeof *col; k++)
			if (strstr(t->fqn, col[k]) || strncmp(t->fqn, col[k], strlen(col[k])) == 0)
				want = MODEL_TP_COLWISE, dim = 0;
		for (size_t k = 0; k < sizeof row / sizeof *row; k++)
			if (strstr(t->fqn, row[k]))
				want = MODEL_TP_ROWWISE, dim = 1;
		if (t->is_embedding)
			want = MODEL_TP_ROWWISE, dim = 0;
		if (t->tp != want || t->tp_dim != dim)
			fail_msg("%s: tp %d dim %d, expected %d dim %d", t->fqn, t->tp, t->tp_dim, want,
				 dim);
		assert_true(t->is_norm == (want == MODEL_TP_REPLICATE));
	}
	model_free(m);
	backend_free(be);
}

/* Every flavor of every family: the model's layout has the flavor's parameter
 * count (an independent sum over the shapes), tensors cover the flat layout in
 * order and each unit's tensors are contiguous.  Unbound: no storage needed
 * even for 405B. */
/* Tensor parallelism has a plan for every family's pieces: each family's
 * debug flavors build at degree 2 (the rank's shapes: heads, hidden units and
 * the experts' hidden units halved), and a degree that does not divide the
 * heads is refused by name. */
static void every_family_takes_tensor_parallelism(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	model_tp_group two = {.size = 2, .rank = 1}, three = {.size = 3, .rank = 0};
	for (int i = 0; model_family_at(i); i++) {
		const model_family *f = model_family_at(i);
		for (const llama_args *a = f->flavors; a->name; a++) {
			if (strncmp(a->name, "debugmodel", 10) != 0)
				continue;
			model *m = model_create_tp(be, a, 0, &two, &e);
			if (!m)
				fail_msg("%s %s at TP 2: %s", f->name, a->name, e.msg);
			assert_int_equal(model_args(m)->n_heads * 2, a->n_heads);
			assert_int_equal(model_args(m)->moe.inter_dim * 2, a->moe.inter_dim);
			model_free(m);
		}
	}
	const llama_args *q = model_family_flavor(model_family_find("qwen3"), "debugmodel");
	e.msg[0] = 0;
	assert_null(model_create_tp(be, q, 0, &three, &e));
	print_message("qwen3 debugmodel at TP 3: %s\n", e.msg);
	assert_non_null(strstr(e.msg, "tensor parallel degree 3 does not divide n_heads 16"));
	backend_free(be);
}

/* One step of the model under every precision mode the trainer puts on it
 * (torch.autocast's; FSDP's policy: bf16 parameters and stream, float32
 * gradients; training.dtype bf16: everything bf16), for each family's pieces
 * (MoE with GPT-OSS's biases and clamped SwiGLU, MLA, sinks, chunked and NoPE
 * attention): no fault, a finite loss within LOSS_TOL of the float32 step's on
 * the same weights, and a gradient norm within GNORM_TOL of its.  Measured:
 * loss within 1.4e-4, gradient norm within 5.8e-4 (bf16 rounding of a random
 * model); the tolerances are 10x that, far below what a piece computing
 * garbage in bf16 would give.  tests/family/test_family_golden.c measures
 * closeness to torch's own autocast. */
#define LOSS_TOL 2e-3
#define GNORM_TOL 1e-2

static double step(model *m, const int32_t *ids, const int32_t *labels, int b, int t,
		   double *gnorm)
{
	titan_err e = {0};
	backend *be = model_backend(m);
	double ls = 0;
	int64_t nv = 0;
	model_zero_grad(m);
	if (model_forward_backward(m, ids, labels, b, t, 1.0f / (float)(b * t), &ls, &nv, &e) ||
	    be->ops->sync(be, &e))
		fail_msg("%s", e.msg);
	*gnorm = sqrt(be->ops->sumsq(be, model_grad_storage(m), model_get_prec(m)->grad,
				     (int64_t)model_num_params(m)));
	return ls / (double)nv;
}

static void bf16_modes_run_every_familys_pieces(void **s)
{
	(void)s;
	static const struct {
		const char *family, *flavor;
	} cases[] = {
		{"qwen3", "debugmodel_moe_small"},
		{"deepseek_v3", "debugmodel"},
		{"gpt_oss", "debugmodel_small"},
		{"llama4", "debugmodel_irope"},
	};
	static const struct {
		const char *name;
		model_prec p;
		int autocast;
	} modes[] = {
		{"autocast", {BE_F32, BE_F32, BE_BF16, BE_F32}, 1},
		{"fsdp bf16/f32", {BE_BF16, BE_F32, BE_BF16, BE_BF16}, 0},
		{"training.dtype bf16", {BE_BF16, BE_BF16, BE_BF16, BE_BF16}, 0},
	};
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	assert_non_null(be);
	enum { B = 2, T = 24 };
	int32_t ids[B * T], labels[B * T];
	for (int i = 0; i < B * T; i++)
		ids[i] = (i * 37 + 11) % 500, labels[i] = (i * 53 + 7) % 500;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		llama_args a = *model_family_flavor(model_family_find(cases[i].family),
						    cases[i].flavor);
		a.vocab_size = 512; /* GPT-OSS's 201088 are not what is tested */
		model *m = model_create(be, &a, 0, &e);
		if (!m || model_init(m, 42, 0, &e))
			fail_msg("%s %s: %s", cases[i].family, cases[i].flavor, e.msg);
		double g32, l32 = step(m, ids, labels, B, T, &g32);
		print_message("%s %s: float32 loss %.6f, grad norm %.4g\n", cases[i].family,
			      cases[i].flavor, l32, g32);
		for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
			if (model_set_prec(m, &modes[k].p, &e) ||
			    (modes[k].autocast && model_set_autocast(m, BE_BF16, &e)))
				fail_msg("%s: %s", modes[k].name, e.msg);
			double g, l = step(m, ids, labels, B, T, &g);
			print_message("  %-20s loss %.6f (rel %.2e), grad norm %.4g (rel %.2e)\n",
				      modes[k].name, l, fabs(l - l32) / l32, g, fabs(g - g32) / g32);
			assert_true(isfinite(l) && fabs(l - l32) < LOSS_TOL * l32);
			assert_true(isfinite(g) && fabs(g - g32) < GNORM_TOL * g32);
		}
		model_free(m);
	}
	backend_free(be);
}

static void every_flavor_lays_out_its_parameter_count(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	const model_family *f;
	for (int i = 0; (f = model_family_at(i)) != NULL; i++)
		for (const llama_args *a = f->flavors; a->name != NULL; a++) {
			model *m = model_create_unbound(be, a, 0, &e);
			if (!m)
				fail_msg("%s %s: %s", f->name, a->name, e.msg);
			size_t at = 0;
			int unit = 0;
			for (int k = 0; k < model_num_tensors(m); k++) {
				const model_tensor *t = model_tensor_at(m, k);
				assert_int_equal(t->offset, at);
				assert_true(t->unit >= unit);
				unit = t->unit;
				at += t->numel;
			}
			assert_int_equal(at, model_num_params(m));
			assert_int_equal((int64_t)model_num_params(m), flavor_param_count(a));
			assert_int_equal(model_num_units(m), a->n_layers + 2);
			assert_ptr_equal(model_get_family(m), f);
			model_free(m);
		}
	backend_free(be);
}

#define FLAVORS_030 "tests/model/torchtitan-0.3.0-flavors.tsv"

/* titan's name of a 0.3.0 flavor: the same but where 0.3.0 reuses a name
 * 0.2.2 gave another model, or names a layout of the same model. */
static const char *titan_flavor(const char *family, const char *flavor)
{
	if (!strcmp(family, "gpt_oss") && !strcmp(flavor, "debugmodel"))
		return "debugmodel_030"; /* 0.2.2's debugmodel has GPT-OSS's vocabulary */
	if (!strcmp(family, "qwen3") && !strcmp(flavor, "debugmodel_non_fused_qkv"))
		return "debugmodel"; /* wq, wk, wv apart: the same model and names */
	return flavor;
}

/* The RoPE scaling written "none", "llama:F" or "yarn:F:BETA_FAST:BETA_SLOW:ORIG". */
static int same_scaling(const llama_args *a, const char *want)
{
	rope_scaling r = flavor_rope_scaling(a);
	double f, hi, lo, orig;
	if (strcmp(want, "none") == 0)
		return r.kind == ROPE_SCALE_NONE;
	if (sscanf(want, "llama:%lf", &f) == 1)
		return r.kind == ROPE_SCALE_LLAMA3 && r.factor == f && r.low == 1 && r.high == 4 &&
		       r.orig == 8192;
	if (sscanf(want, "yarn:%lf:%lf:%lf:%lf", &f, &hi, &lo, &orig) == 4)
		return r.kind == ROPE_SCALE_YARN && r.factor == f && r.high == hi && r.low == lo &&
		       r.orig == orig;
	return 0;
}

/* One line of the list against titan's flavor; 0, or 1 after saying what differs. */
static int check_flavor_030(const char *line)
{
	char family[32], flavor[64], scaling[64];
	long long dim, layers, heads, kv, hd, ffn, experts, top_k, inter, vocab, tied, seq, params;
	double theta;
	if (sscanf(line, "%31s %63s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld "
		   "%63s %lf %lld", family, flavor, &dim, &layers, &heads, &kv, &hd, &ffn, &experts,
		   &top_k, &inter, &vocab, &tied, &seq, scaling, &theta, &params) != 17)
		fail_msg("%s: not a line of the list: %s", FLAVORS_030, line);
	const model_family *f = model_family_find(family);
	const llama_args *a = f ? model_family_flavor(f, titan_flavor(family, flavor)) : NULL;
	if (a == NULL) {
		print_message("%s %s: titan has no such flavor\n", family, flavor);
		return 1;
	}
	int bad = a->dim != dim || a->n_layers != layers || a->n_heads != heads ||
		  a->n_kv_heads != (kv ? kv : heads) || (hd && flavor_head_dim(a) != hd) ||
		  (ffn && flavor_ffn_hidden(a) != ffn) || a->moe.experts != experts ||
		  a->moe.top_k != top_k || a->moe.inter_dim != inter || a->vocab_size != vocab ||
		  a->tied_embeddings != tied || a->max_seq_len != seq || !same_scaling(a, scaling) ||
		  a->rope_theta != theta || flavor_param_count(a) != params;
	if (bad)
		print_message("%s %s: titan's flavor is not 0.3.0's: %s", family, flavor, line);
	return bad;
}

static void every_torchtitan_030_flavor_is_titans_with_its_numbers(void **s)
{
	(void)s;
	FILE *in = fopen(FLAVORS_030, "r");
	if (in == NULL)
		fail_msg("%s: cannot open (run from the repository root)", FLAVORS_030);
	char line[512];
	int n = 0, bad = 0;
	while (fgets(line, sizeof line, in)) {
		if (line[0] == '#')
			continue;
		bad += check_flavor_030(line);
		n++;
	}
	fclose(in);
	assert_int_equal(bad, 0);
	assert_true(n >= 24);
	print_message("%d flavors of torchtitan 0.3.0 are titan's with their numbers\n", n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_family_is_found_by_name_and_owns_its_flavors),
		cmocka_unit_test(llama3_tensors_carry_torchtitans_tensor_parallel_plan),
		cmocka_unit_test(every_flavor_lays_out_its_parameter_count),
		cmocka_unit_test(every_family_takes_tensor_parallelism),
		cmocka_unit_test(bf16_modes_run_every_familys_pieces),
		cmocka_unit_test(every_torchtitan_030_flavor_is_titans_with_its_numbers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
