/* The PCRE2 path of the pre-tokenizer is exact on Unicode 16.0.0 for any
 * tokenizer.json regex: every general category, with the characters Unicode
 * 15.0, 15.1 and 16.0 added, and the constructs whose meaning differs between
 * Oniguruma (what HF tokenizers runs) and PCRE2, split a text where HF
 * tokenizers splits it (tests/tok/regex_vectors.h, made by
 * scripts/tok_regex_reference.py); what titan cannot make exact is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

#include "regex_vectors.h"

typedef struct ends {
	const uint8_t *base;
	uint32_t v[4096];
	int n;
} ends;

static int collect(void *ctx, const uint8_t *p, size_t n)
{
	ends *e = ctx;
	if (e->n == (int)(sizeof e->v / sizeof *e->v))
		return -1;
	e->v[e->n++] = (uint32_t)(p + n - e->base);
	return 0;
}

static void split_like_hf(const char *regex, int mode, const struct regex_vector *v)
{
	titan_err err = {0};
	tok_split *s = tok_split_new(regex, mode, &err);
	if (!s)
		fail_msg("%s: %s", regex, err.msg);
	ends e = {.base = (const uint8_t *)regex_text};
	assert_int_equal(tok_split_run(s, e.base, sizeof regex_text - 1, collect, &e, &err), 0);
	int i = 0;
	while (i < e.n && i < v->n && e.v[i] == v->ends[i])
		i++;
	if (i < e.n || i < v->n) {
		uint32_t at = i ? e.v[i - 1] : 0;
		fprintf(stderr, "%s (%s): %d pieces, HF %d; first difference after byte %u: titan's "
			"piece ends at %d, HF's at %d; text there: %.24s\n", regex, tok_split_kind(s), e.n,
			v->n, at, i < e.n ? (int)e.v[i] : -1, i < v->n ? (int)v->ends[i] : -1,
			regex_text + at);
		fail_msg("%s splits differently from HF tokenizers", regex);
	}
	tok_split_free(s);
}

static void every_category_with_unicode_15_and_16_characters_splits_like_hf(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof regex_vectors / sizeof *regex_vectors; i++)
		split_like_hf(regex_vectors[i].regex, TOK_PRETOK_PCRE2, &regex_vectors[i]);
}

/* The known patterns' scanners on the same text. */
static void scanners_split_the_new_characters_like_hf(void **state)
{
	(void)state;
	const char *known[] = {tok_re_llama3, tok_re_o200k, tok_re_gpt2};
	int found = 0;
	for (size_t k = 0; k < 3; k++)
		for (size_t i = 0; i < sizeof regex_vectors / sizeof *regex_vectors; i++)
			if (!strcmp(regex_vectors[i].regex, known[k])) {
				split_like_hf(known[k], TOK_PRETOK_AUTO, &regex_vectors[i]);
				found++;
			}
	assert_int_equal(found, 3);
}

static void what_cannot_be_exact_is_refused_with_the_reason(void **state)
{
	(void)state;
	static const struct {
		const char *regex, *expect;
	} v[] = {
		{"\\p{Greek}+", "Greek"},        {"[[:alpha:]]", "alpha"},
		{"\\p{Alphabetic}", "Alphabetic"}, {"\\X", "\\X"},
		{"(?x) a", "(?x)"},              {"(?s).", "(?s)"},
		{"(?(1)a|b)", "conditionals"},   {"[a-", "without ]"},
		{"(a", "unmatched ("},           {"\\x{D800}", "no character"},
		{"\\p{Lu", "without }"},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		titan_err err = {0};
		tok_split *s = tok_split_new(v[i].regex, TOK_PRETOK_PCRE2, &err);
		if (s || !strstr(err.msg, v[i].expect))
			fail_msg("%s: want a refusal saying \"%s\", got \"%s\"", v[i].regex, v[i].expect,
				 s ? "(loaded)" : err.msg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_category_with_unicode_15_and_16_characters_splits_like_hf),
		cmocka_unit_test(scanners_split_the_new_characters_like_hf),
		cmocka_unit_test(what_cannot_be_exact_is_refused_with_the_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
