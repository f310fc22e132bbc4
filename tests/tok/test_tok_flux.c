/* Flux's text-encoder tokenizers against torchtitan 0.3.0's FluxTokenizer
 * (transformers' CLIPTokenizer and T5Tokenizer over HF tokenizers, called with
 * truncation and max_length padding): tests/tok/flux/ (the .ref files), made by
 * scripts/tok_flux_reference.py from tests/tok/flux/captions.jsonl.  Also the
 * pieces beneath: grapheme clusters against the regex module's \X at Unicode
 * 16.0.0, a hand-made charsmap and Unigram model with ids worked out by hand,
 * hostile charsmaps refused, fixed-length edge cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/testutil.h"
#include "fixture.h"
#include "tok/tok.h"
#include "unicode/unicode.h"

#define CAPTIONS "tests/tok/flux/captions.jsonl"

typedef struct lines {
	char **v;
	size_t n;
} lines;

/* The lines of path that are not comments; the test fails when it cannot be read. */
static lines read_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	lines l = {0};
	char *buf = NULL;
	size_t cap = 0;
	ssize_t got;
	while ((got = getline(&buf, &cap, f)) >= 0) {
		if (buf[0] == '#')
			continue;
		if (got && buf[got - 1] == '\n')
			buf[got - 1] = 0;
		l.v = realloc(l.v, (l.n + 1) * sizeof *l.v);
		assert_non_null(l.v);
		l.v[l.n++] = strdup(buf);
	}
	free(buf);
	fclose(f);
	return l;
}

static void lines_free(lines *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

static tok *load(const char *path)
{
	tok *t = NULL;
	titan_err err = {0};
	if (tok_load(&t, path, NULL, &err))
		fail_msg("%s", err.msg);
	return t;
}

/* Every caption through tok_encode_fixed(len): the ids the reference gives
 * under its attention mask, then the pad id; the mask 1 exactly there. */
static void check_captions(const char *tok_dir, const char *ref, size_t len)
{
	tok *t = load(tok_dir);
	tok_enc *e = tok_enc_new(t, NULL);
	assert_non_null(e);
	lines cap = read_lines(CAPTIONS), want = read_lines(ref);
	assert_int_equal(cap.n, want.n);
	int32_t *ids = malloc(len * sizeof *ids);
	uint8_t *mask = malloc(len);
	assert_non_null(ids);
	assert_non_null(mask);
	size_t bad = 0;
	for (size_t i = 0; i < cap.n; i++) {
		json_t *j = json_loads(cap.v[i], 0, NULL);
		const char *text = json_string_value(json_object_get(j, "text"));
		assert_non_null(text);
		titan_err err = {0};
		int64_t n = tok_encode_fixed(e, (const uint8_t *)text, json_string_length(
			json_object_get(j, "text")), len, ids, mask, &err);
		if (n < 0)
			fail_msg("caption %zu: %s", i + 1, err.msg);
		char *p = want.v[i], *end;
		size_t k = 0;
		bool ok = true;
		for (long v; (v = strtol(p, &end, 10)), end != p; p = end, k++)
			ok &= k < len && ids[k] == v && mask[k];
		ok &= (int64_t)k == n;
		for (; k < len; k++)
			ok &= ids[k] == tok_pad_id(t) && !mask[k];
		if (!ok && bad++ < 3)
			fprintf(stderr, "# caption %zu differs from %s: %.60s\n", i + 1, ref, text);
		json_decref(j);
	}
	if (bad)
		fail_msg("%zu of %zu captions differ from %s", bad, cap.n, ref);
	free(ids);
	free(mask);
	lines_free(&cap);
	lines_free(&want);
	tok_enc_free(e);
	tok_free(t);
}

/* The folder of fixture rel (a tokenizer.json), or the test is skipped. */
static char *fixture_dir(const char *rel)
{
	char *dir = strdup(need_fixture(rel));
	*strrchr(dir, '/') = 0;
	return dir;
}

static void clip_ids_match_torchtitan_flux_tokenizer_on_captions(void **state)
{
	(void)state;
	char *dir = fixture_dir("tokenizers/clip_vit_l14/tokenizer.json");
	check_captions(dir, "tests/tok/flux/clip.ref", 77);
	free(dir);
}

static void t5_path_on_albert_unigram_matches_torchtitan_on_captions(void **state)
{
	(void)state;
	char *dir = fixture_dir("tokenizers/sentencepiece_unigram/tokenizer.json");
	check_captions(dir, "tests/tok/flux/t5_unigram.ref", 256);
	free(dir);
}

/* google/t5-v1_1-xxl's own files cannot be fetched where the references were
 * made: with its spiece.model in the fixtures, scripts/tok_flux_reference.py
 * goldens writes its tokenizer.json beside it and t5_v1_1_xxl.ref here. */
static void t5_v1_1_xxl_matches_when_its_tokenizer_is_present(void **state)
{
	(void)state;
	const char *p = fixture_path("tokenizers/t5_v1_1_xxl/tokenizer.json");
	FILE *ref = fopen("tests/tok/flux/t5_v1_1_xxl.ref", "r");
	if (!p || !ref) {
		if (ref)
			fclose(ref);
		fprintf(stderr, "# SKIP google/t5-v1_1-xxl: put its spiece.model in "
			"build/fixtures/tokenizers/t5_v1_1_xxl/ (titan-hf-fetch google/t5-v1_1-xxl) and "
			"run scripts/tok_flux_reference.py goldens build/fixtures tests/tok/flux\n");
		skip();
	}
	fclose(ref);
	char *dir = strdup(p);
	*strrchr(dir, '/') = 0;
	check_captions(dir, "tests/tok/flux/t5_v1_1_xxl.ref", 256);
	free(dir);
}

static void grapheme_clusters_match_regex_at_unicode_16(void **state)
{
	(void)state;
	lines l = read_lines("tests/tok/flux/graphemes.ref");
	assert_true(l.n > 100);
	for (size_t i = 0; i < l.n; i++) {
		uint8_t s[256];
		size_t n = 0;
		char *p = l.v[i];
		while (*p && *p != ' ') {
			unsigned b;
			assert_int_equal(sscanf(p, "%2x", &b), 1);
			s[n++] = (uint8_t)b;
			p += 2;
		}
		size_t at = 0;
		char *end;
		for (long want; (want = strtol(p, &end, 10)), end != p; p = end) {
			size_t got = uni_grapheme_end(s, n, at);
			if ((long)got != want)
				fail_msg("line %zu (%s): a cluster from %zu ends at %zu, regex says %ld", i + 1,
					 l.v[i], at, got, want);
			at = got;
		}
		assert_int_equal(at, n);
	}
	lines_free(&l);
}

/* A charsmap of 1024 units mapping "a" to "A": the root's children at
 * 256 ^ byte, "a"'s leaf value at unit 512, strings "A\0" (or what a case
 * asks instead). */
static char *charsmap_b64(uint32_t n_units, uint32_t root, uint32_t leaf_value,
			  const char *strings, size_t str_len)
{
	size_t raw_len = 4 + (size_t)n_units * 4 + str_len;
	uint8_t *raw = calloc(raw_len, 1);
	assert_non_null(raw);
	uint32_t trie = n_units * 4, *u = (uint32_t *)(raw + 4);
	memcpy(raw, &trie, 4);
	u[0] = root << 10;
	uint32_t pos = 256 ^ 'a';
	if (pos < n_units)
		u[pos] = (uint32_t)(pos ^ 512) << 10 | 1u << 8 | 'a';
	if (512 < n_units)
		u[512] = leaf_value | 1u << 31;
	memcpy(raw + 4 + trie, strings, str_len);
	static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *o = malloc(raw_len / 3 * 4 + 8), *q = o;
	assert_non_null(o);
	for (size_t i = 0; i < raw_len; i += 3) {
		uint32_t v = (uint32_t)raw[i] << 16 | (i + 1 < raw_len ? raw[i + 1] << 8 : 0) |
			     (i + 2 < raw_len ? raw[i + 2] : 0);
		*q++ = al[v >> 18];
		*q++ = al[v >> 12 & 63];
		*q++ = i + 1 < raw_len ? al[v >> 6 & 63] : '=';
		*q++ = i + 2 < raw_len ? al[v & 63] : '=';
	}
	*q = 0;
	free(raw);
	return o;
}

/* A Unigram tokenizer.json around a charsmap: pieces <unk> -9, ▁ -1, A -2,
 * ▁A -1.5, b -3, <0x78> -4 (byte_fallback as asked). */
static char *unigram_json(const char *charsmap, bool byte_fallback)
{
	char *j = malloc(strlen(charsmap) + 1024);
	assert_non_null(j);
	sprintf(j, "{\"added_tokens\": [], \"normalizer\": {\"type\": \"Precompiled\", "
		"\"precompiled_charsmap\": \"%s\"}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
		"\"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": \"Metaspace\", "
		"\"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true}]}, "
		"\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
		"\"prepend_scheme\": \"always\", \"split\": true}, "
		"\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": %s, \"vocab\": "
		"[[\"<unk>\", -9.0], [\"\\u2581\", -1.0], [\"A\", -2.0], [\"\\u2581A\", -1.5], "
		"[\"b\", -3.0], [\"<0x78>\", -4.0]]}}", charsmap, byte_fallback ? "true" : "false");
	return j;
}

static void encode_is(tok *t, const char *text, const int32_t *want, size_t n)
{
	tok_enc *e = tok_enc_new(t, NULL);
	tok_ids ids = {0};
	titan_err err = {0};
	assert_int_equal(tok_encode(e, (const uint8_t *)text, strlen(text), &ids, &err), 0);
	if (ids.n != n || memcmp(ids.v, want, n * sizeof *want))
		fail_msg("\"%s\": %zu ids, first %d, want %zu ids, first %d", text, ids.n,
			 ids.n ? ids.v[0] : -1, n, want[0]);
	tok_ids_free(&ids);
	tok_enc_free(e);
}

/* Ids worked out by hand: "a" -> "A" by the charsmap; ▁A + b (-4.5) beats
 * ▁ + A + b (-6); unknown characters fuse into one <unk>, or become their
 * bytes' pieces under byte_fallback when all exist. */
static void unigram_viterbi_and_charsmap_give_hand_computed_ids(void **state)
{
	(void)state;
	char *cm = charsmap_b64(1024, 256, 0, "A", 2);
	for (int fb = 0; fb < 2; fb++) {
		char *j = unigram_json(cm, fb);
		tok *t = NULL;
		titan_err err = {0};
		if (tok_load_json_text(&t, j, strlen(j), NULL, &err))
			fail_msg("%s", err.msg);
		encode_is(t, "ab", (const int32_t[]){3, 4}, 2);
		encode_is(t, "  a  b ", (const int32_t[]){3, 1, 4}, 3);
		encode_is(t, "A\xc3\xa9\xc3\xa9", (const int32_t[]){3, 0}, 2);
		encode_is(t, "x", fb ? (const int32_t[]){1, 5} : (const int32_t[]){1, 0}, 2);
		tok_buf out = {0};
		assert_int_equal(tok_decode(t, (const int32_t[]){3, 1, 4}, 3, &out, &err), 0);
		assert_int_equal(out.n, 3);
		assert_memory_equal(out.p, "A b", 3);
		tok_buf_free(&out);
		tok_free(t);
		free(j);
	}
	free(cm);
}

static void hostile_charsmaps_are_refused(void **state)
{
	(void)state;
	static const struct {
		uint32_t n_units, root, leaf;
		const char *str;
		size_t str_len;
		const char *expect;
	} v[] = {
		{300, 256, 0, "A", 2, "run past"},         /* children's slots past the end */
		{1024, 4000, 0, "A", 2, "root points past"},
		{1024, 256, 100, "A", 2, "string offset"}, /* past the strings */
		{1024, 256, 1, "\xc3\xa9", 3, "string offset"}, /* inside a character */
		{1024, 256, 0, "\xff", 2, "not UTF-8"},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		char *cm = charsmap_b64(v[i].n_units, v[i].root, v[i].leaf, v[i].str, v[i].str_len);
		char *j = unigram_json(cm, false);
		tok *t = NULL;
		titan_err err = {0};
		if (tok_load_json_text(&t, j, strlen(j), NULL, &err) != -1)
			fail_msg("case %zu loaded", i);
		if (!strstr(err.msg, v[i].expect) || !strstr(err.msg, "precompiled_charsmap"))
			fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, v[i].expect);
		free(j);
		free(cm);
	}
	const char *bad[] = {"AAA", "!!!!", ""};
	for (size_t i = 0; i < 3; i++) {
		char *j = unigram_json(bad[i], false);
		tok *t = NULL;
		titan_err err = {0};
		assert_int_equal(tok_load_json_text(&t, j, strlen(j), NULL, &err), -1);
		assert_non_null(strstr(err.msg, "precompiled_charsmap"));
		free(j);
	}
}

/* Lengths at the edges: room for the special tokens only, or not even that;
 * a tokenizer without a pad token cannot pad. */
static void fixed_length_edges(void **state)
{
	(void)state;
	char *dir = fixture_dir("tokenizers/clip_vit_l14/tokenizer.json");
	tok *t = load(dir);
	tok_enc *e = tok_enc_new(t, NULL);
	int32_t ids[4];
	uint8_t mask[4];
	titan_err err = {0};
	assert_int_equal(tok_pad_id(t), 49407);
	assert_int_equal(tok_encode_fixed(e, (const uint8_t *)"a cat", 5, 2, ids, mask, &err), 2);
	assert_int_equal(ids[0], 49406);
	assert_int_equal(ids[1], 49407);
	assert_int_equal(tok_encode_fixed(e, (const uint8_t *)"a cat", 5, 1, ids, mask, &err), -1);
	assert_int_equal(tok_encode_fixed(e, (const uint8_t *)"", 0, 4, ids, mask, &err), 2);
	assert_int_equal(ids[3], 49407);
	assert_int_equal(mask[1], 1);
	assert_int_equal(mask[2], 0);
	tok_enc_free(e);
	tok_free(t);
	free(dir);
	char *cm = charsmap_b64(1024, 256, 0, "A", 2), *j = unigram_json(cm, false);
	assert_int_equal(tok_load_json_text(&t, j, strlen(j), NULL, &err), 0);
	e = tok_enc_new(t, NULL);
	assert_int_equal(tok_encode_fixed(e, (const uint8_t *)"a", 1, 4, ids, mask, &err), -1);
	assert_non_null(strstr(err.msg, "pad"));
	tok_enc_free(e);
	tok_free(t);
	free(j);
	free(cm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(clip_ids_match_torchtitan_flux_tokenizer_on_captions),
		cmocka_unit_test(t5_path_on_albert_unigram_matches_torchtitan_on_captions),
		cmocka_unit_test(t5_v1_1_xxl_matches_when_its_tokenizer_is_present),
		cmocka_unit_test(grapheme_clusters_match_regex_at_unicode_16),
		cmocka_unit_test(unigram_viterbi_and_charsmap_give_hand_computed_ids),
		cmocka_unit_test(hostile_charsmaps_are_refused),
		cmocka_unit_test(fixed_length_edges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
