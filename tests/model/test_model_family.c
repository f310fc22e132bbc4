/* The registry of model families: every family is found by name, its flavors
 * point back to it and build models whose layout agrees with the flavor's
 * parameter count, and every tensor carries torchtitan's tensor-parallel style
 * (what the TP plan reads); the pieces TP and bfloat16 cannot run yet refuse
 * them by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
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

/* The MoE, MLA, attention-bias and sink ops have float32 kernels only: such a
 * model refuses other element types by name, where a Llama takes them. */
static void float32_only_pieces_refuse_bfloat16(void **s)
{
	(void)s;
	static const struct {
		const char *family, *flavor, *piece;
	} cases[] = {
		{"qwen3", "debugmodel_moe", "mixture-of-experts"},
		{"deepseek_v3", "debugmodel", "mixture-of-experts"},
		{"gpt_oss", "debugmodel", "mixture-of-experts"},
	};
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	model_prec autocast = {BE_F32, BE_F32, BE_BF16, BE_F32};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const llama_args *a =
			model_family_flavor(model_family_find(cases[i].family), cases[i].flavor);
		model *m = model_create_unbound(be, a, 0, &e);
		assert_non_null(m);
		e.msg[0] = 0;
		assert_int_equal(model_set_prec(m, &autocast, &e), -1);
		print_message("%s\n", e.msg);
		assert_non_null(strstr(e.msg, cases[i].piece));
		assert_non_null(strstr(e.msg, "bfloat16"));
		model_free(m);
	}
	model *m = model_create_unbound(be, model_family_flavor(model_family_find("qwen3"),
								"debugmodel"), 0, &e);
	assert_non_null(m);
	assert_int_equal(model_set_prec(m, &autocast, &e), 0);
	model_free(m);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_family_is_found_by_name_and_owns_its_flavors),
		cmocka_unit_test(llama3_tensors_carry_torchtitans_tensor_parallel_plan),
		cmocka_unit_test(every_flavor_lays_out_its_parameter_count),
		cmocka_unit_test(every_family_takes_tensor_parallelism),
		cmocka_unit_test(float32_only_pieces_refuse_bfloat16),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
