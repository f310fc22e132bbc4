/* The FLOPs titan-train's tflops and mfu count: attention's unmasked
 * (query, key) pairs against a brute-force count of the reference mask
 * (tests/support/att_ref, torchtitan's mask_mods key by key) for causal rows,
 * sliding windows, fixed chunks and packed documents; each family's layers
 * with their own masks; torchtitan's full count beside it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "model/family.h"
#include "model/model.h"
#include "../support/att_ref.h"

/* Pairs of row bi that att_ref_visible keeps, one (query, key) at a time. */
static int64_t brute_pairs(const be_attn *a, int64_t bi)
{
	int64_t n = 0;
	for (int64_t i = 0; i < a->tq; i++)
		for (int64_t j = 0; j < a->tk; j++)
			n += att_ref_visible(a, bi, i, j);
	return n;
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* A row of t positions cut into documents at random (seed printed), as
 * 0.3.0's loader emits them: 0 at each document's start, then 1, 2, ...; and
 * att_ref's doc row of the same documents. */
static void random_docs(int64_t t, uint64_t *seed, int32_t *pos, int32_t *doc, int max_docs)
{
	int64_t starts[64];
	int n = 1;
	starts[0] = 0;
	int want = 1 + (int)(lcg(seed) % (uint64_t)max_docs);
	for (int k = 1; k < want && n < 64; k++) {
		int64_t s = (int64_t)(lcg(seed) % (uint64_t)t);
		if (s > starts[n - 1])
			starts[n++] = s;
	}
	att_ref_doc_row(doc, t, starts, n);
	for (int64_t p = 0; p < t; p++)
		pos[p] = (int32_t)(p - doc[p]);
}

static void pairs_equal_brute_force_mask_counts(void **state)
{
	(void)state;
	static const int64_t ts[] = {1, 2, 7, 64, 129, 300};
	static const int64_t windows[] = {0, 1, 5, 128};
	static const int64_t chunks[] = {0, 1, 16, 100};
	uint64_t seed = 20261205;
	printf("seed %llu\n", (unsigned long long)seed);
	int32_t pos[300], doc[300];
	for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
		for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++)
			for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
				for (int docs = 0; docs < 3; docs++) {
					int64_t t = ts[ti];
					be_attn a = {.b = 1, .tq = t, .tk = t, .causal = 1,
						     .window = windows[wi], .chunk = chunks[ci]};
					if (docs) {
						random_docs(t, &seed, pos, doc, docs == 1 ? 4 : 40);
						a.doc = doc;
						a.doc_t = t;
					}
					int64_t want = brute_pairs(&a, 0);
					int64_t got = model_attn_pairs_row(t, a.window, a.chunk,
									   docs ? pos : NULL);
					if (got != want)
						fail_msg("t %lld window %lld chunk %lld docs %d: %lld pairs, "
							 "the mask keeps %lld", (long long)t,
							 (long long)a.window, (long long)a.chunk, docs,
							 (long long)got, (long long)want);
				}
	/* the closed forms at a size no brute force reaches */
	assert_int_equal(model_attn_pairs_row(131072, 0, 0, NULL), 131072LL * 131073 / 2);
	assert_int_equal(model_attn_pairs_row(131072, 128, 0, NULL),
			 128LL * 129 / 2 + (131072LL - 128) * 128);
	assert_int_equal(model_attn_pairs_row(131072, 0, 8192, NULL), 16 * (8192LL * 8193 / 2));
}

static model *unbound(backend *be, const char *family, const char *flavor)
{
	titan_err e = {0};
	const llama_args *a = model_family_flavor(model_family_find(family), flavor);
	assert_non_null(a);
	model *m = model_create_unbound(be, a, 0, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	return m;
}

/* model_train_flops against the definition: 6 x (active params - embedding)
 * per token, and for every layer 6 h (hd + hdv) per pair its mask keeps,
 * counted by brute force with the families' layer rules (GPT-OSS: window on
 * even layers; Llama 4 iRoPE: chunks on layers not a multiple of 4). */
static void model_flops_count_each_layers_mask(void **state)
{
	(void)state;
	static const struct {
		const char *family, *flavor;
	} cases[] = {{"llama3", "debugmodel"}, {"gpt_oss", "debugmodel_small"},
		     {"llama4", "debugmodel_irope"}};
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	const int64_t t = 300, rows = 2;
	int32_t pos[2 * 300], doc[2 * 300];
	uint64_t seed = 77;
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		model *m = unbound(be, cases[c].family, cases[c].flavor);
		const llama_args *a = model_args(m);
		for (int r = 0; r < rows; r++)
			random_docs(t, &seed, pos + r * t, doc + r * t, 6);
		for (int docs = 0; docs < 2; docs++) {
			double pairs_flops = 0;
			int hd = a->head_dim ? a->head_dim : a->dim / a->n_heads;
			for (int l = 0; l < a->n_layers; l++) {
				be_attn at = {.b = rows, .tq = t, .tk = t, .causal = 1,
					      .doc = docs ? doc : NULL, .doc_t = docs ? t : 0};
				if (a->sliding_window && l % 2 == 0)
					at.window = a->sliding_window;
				if (a->nope_every && l % a->nope_every != 0)
					at.chunk = a->attn_chunk;
				for (int r = 0; r < rows; r++)
					pairs_flops += 6.0 * a->n_heads * 2 * hd * (double)brute_pairs(&at, r);
			}
			double matmul = 6.0 * (double)(model_num_params_active(m) -
						       (int64_t)a->vocab_size * a->dim);
			double want = matmul * (double)(rows * t) + pairs_flops;
			double got = model_train_flops(m, rows, t, docs ? pos : NULL);
			if (got != want)
				fail_msg("%s %s docs %d: %.17g FLOPs, want %.17g", cases[c].family,
					 cases[c].flavor, docs, got, want);
			/* torchtitan's count: every query against t keys */
			double full = model_flops_per_token(m, (int)t) * (double)(rows * t);
			assert_true(full == matmul * (double)(rows * t) +
						    6.0 * a->n_heads * 2 * hd * a->n_layers *
							    (double)(rows * t * t));
			assert_true(got < full);
		}
		model_free(m);
	}
	backend_free(be);
}

/* A tied table is the output projection's weight: its product is counted
 * (torchtitan 0.3.0), once. */
static void tied_output_projection_is_counted(void **state)
{
	(void)state;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	llama_args a = *model_family_flavor(model_family_find("llama3"), "debugmodel");
	model *untied = model_create_unbound(be, &a, 0, &e);
	a.tied_embeddings = 1;
	model *tied = model_create_unbound(be, &a, 0, &e);
	assert_non_null(untied);
	assert_non_null(tied);
	/* same products (the output's), one table fewer to hold */
	assert_true(model_flops_per_token(tied, 64) == model_flops_per_token(untied, 64));
	assert_true(model_train_flops(tied, 1, 64, NULL) == model_train_flops(untied, 1, 64, NULL));
	model_free(tied);
	model_free(untied);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pairs_equal_brute_force_mask_counts),
		cmocka_unit_test(model_flops_count_each_layers_mask),
		cmocka_unit_test(tied_output_projection_is_counted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
