/* Unit tests of lib/tok and lib/unicode: known ids from the references
 * (tests/tok/tok_vectors.h, made by scripts/tok_reference.py with HF tokenizers
 * and tiktoken), scanners against PCRE2, byte round trips, huge inputs,
 * BOS/EOS defaults, added-token policies, loader errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../support/testutil.h"
#include "fixture.h"
#include "tok/tok.h"
#include "unicode/unicode.h"

#include "tok_vectors.h"

/* Sanitizers and qemu make this code 10-100x slower: do less of the random
 * and huge work there (test_short; the full amounts run in make check). */
#define SCALE(n) (test_short() ? (n) / 8 : (n))

/* Loaded once per name and mode, freed at exit. */
enum { N_NAMES = 7 };
static const char *const names[N_NAMES] = {"llama3_1", "qwen3", "torchtitan_test",
					   "llama3_tiktoken", "cl100k_base", "o200k_base",
					   "deepseek_like"};
static tok *cache[N_NAMES][2];

/* The tokenizer name loaded with pretok mode, or NULL when its fixture is
 * missing (said on stderr; a failure under CI=true). */
static tok *get_or_null(const char *name, int mode)
{
	for (int i = 0; i < N_NAMES; i++) {
		if (strcmp(names[i], name))
			continue;
		if (!cache[i][mode]) {
			char rel[256];
			const char *path;
			/* deepseek_like is ours (scripts/tok_make_deepseek_like.py): three
			 * Splits through PCRE2, checked against HF tokenizers. */
			snprintf(rel, sizeof rel, "tokenizers/%s", name);
			path = !strcmp(name, "deepseek_like") ? "tests/tok/deepseek_like" : fixture_path(rel);
			if (!path) {
				if (fixture_ci())
					fail_msg("fixture %s missing under CI=true: %s", rel,
						 fixture_how(rel));
				fprintf(stderr, "# SKIP part: no fixture %s: %s\n", rel, fixture_how(rel));
				return NULL;
			}
			tok_opts o = {.pretok = mode};
			titan_err err = {0};
			if (tok_load(&cache[i][mode], path, &o, &err))
				fail_msg("%s", err.msg);
		}
		return cache[i][mode];
	}
	fail_msg("unknown tokenizer %s", name);
	return NULL;
}

/* The same, or the test is skipped when the fixture is missing. */
static tok *get(const char *name, int mode)
{
	tok *t = get_or_null(name, mode);
	if (!t) {
		char rel[256];
		snprintf(rel, sizeof rel, "tokenizers/%s", name);
		need_fixture(rel);
	}
	return t;
}

static int free_all(void **state)
{
	(void)state;
	for (int i = 0; i < N_NAMES; i++)
		for (int m = 0; m < 2; m++)
			tok_free(cache[i][m]);
	return 0;
}

static void encode(const tok *t, const void *s, size_t n, tok_ids *ids)
{
	titan_err err = {0};
	tok_enc *e = tok_enc_new(t, &err);
	assert_non_null(e);
	ids->n = 0;
	if (tok_encode(e, s, n, ids, &err))
		fail_msg("%s", err.msg);
	tok_enc_free(e);
}

static void assert_ids(const tok_ids *got, const int32_t *want, size_t n, const char *what)
{
	if (got->n == n && !memcmp(got->v, want, n * sizeof *want))
		return;
	fprintf(stderr, "%s: got %zu ids:", what, got->n);
	for (size_t i = 0; i < got->n && i < 40; i++)
		fprintf(stderr, " %d", got->v[i]);
	fprintf(stderr, "\n  want %zu:", n);
	for (size_t i = 0; i < n && i < 40; i++)
		fprintf(stderr, " %d", want[i]);
	fprintf(stderr, "\n");
	fail_msg("%s: ids differ from the reference", what);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void fixture_readme_vectors_give_llama3_ids(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		int n;
		int32_t ids[8];
	} v[] = {
		{"This is a test sentence.", 6, {2028, 374, 264, 1296, 11914, 13}},
		{"   Hello", 2, {256, 22691}},
		{"    Hello\n    Hello", 5, {262, 22691, 198, 262, 22691}},
		{"3333", 2, {8765, 18}},
		{"\n\n\n", 1, {1432}},
		{"ied 4 \xc2\xbd months", 6, {1142, 220, 19, 220, 27154, 4038}},
	};
	const char *toks[] = {"llama3_1", "llama3_tiktoken"};
	tok_ids ids = {0};
	for (int k = 0; k < 2; k++)
		for (int mode = 0; mode < 2; mode++)
			for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
				encode(get(toks[k], mode), v[i].text, strlen(v[i].text), &ids);
				assert_ids(&ids, v[i].ids, (size_t)v[i].n, v[i].text);
			}
	tok_ids_free(&ids);
}

static void tricky_strings_match_reference_ids_on_both_paths(void **state)
{
	(void)state;
	tok_ids ids = {0};
	for (size_t i = 0; i < sizeof tok_vectors / sizeof *tok_vectors; i++) {
		const struct tok_vector *v = &tok_vectors[i];
		/* The PCRE2 path of each tokenizer, except in short runs (test_short)
		 * where loading every big tokenizer.json twice costs too much. */
		int modes = test_short() && v->tokenizer[0] != 'o' ? 1 : 2;
		for (int mode = 0; mode < modes; mode++) {
			char what[128];
			snprintf(what, sizeof what, "%s/%s/%s", v->tokenizer, v->name,
				 mode ? "pcre2" : "scanner");
			const tok *t = get_or_null(v->tokenizer, mode);
			if (!t)
				continue;
			encode(t, v->text, v->len, &ids);
			assert_ids(&ids, v->ids, (size_t)v->n, what);
		}
	}
	tok_ids_free(&ids);
}

/* Pieces as (start, length) pairs. */
typedef struct pieces {
	const uint8_t *base;
	size_t n, cap;
	size_t *v;
} pieces;

static int collect(void *ctx, const uint8_t *p, size_t n)
{
	pieces *ps = ctx;
	if (ps->n + 2 > ps->cap) {
		ps->cap = ps->cap ? ps->cap * 2 : 256;
		ps->v = realloc(ps->v, ps->cap * sizeof *ps->v);
		assert_non_null(ps->v);
	}
	ps->v[ps->n++] = (size_t)(p - ps->base);
	ps->v[ps->n++] = n;
	return 0;
}

/* Characters whose classes predate Unicode 14, so PCRE2's tables agree with
 * titan's: letters of each case class, marks, numbers, spaces, line breaks,
 * punctuation, the contraction letters, U+017F, NUL and invalid UTF-8. */
static const char *const alphabet[] = {
	"a", "b", "s", "t", "d", "m", "l", "e", "r", "v", "S", "T", "R", "E", "L", "D", "M",
	"V", "A", "Z", "'", "'", "'", " ", " ", " ", "  ", "\t", "\r", "\n", "\n", "\r\n",
	"\x0b", "\x0c", "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8", "0", "1", "9",
	"\xd9\xa3", "\xe2\x85\xab", "\xc2\xbd", ".", ",", "!", "/", "//", "-", "\xe2\x94\x80",
	"\xc5\xbf", "\xc3\xa9", "\xc3\x89", "\xc7\x85", "\xca\xb0", "\xe4\xb8\xad",
	"\xcc\x81", "\xe0\xa4\x95", "\xe0\xa4\xbe", "\xd0\x96", "\xd0\xb6", "\x00", "\xff",
	"\x80", "\xe2\x82", "\xed\xa0\x80", "\xf0\x9f\x98\x80", "$", "+", "_", "\xe2\x80\x99",
};

static size_t random_text(uint64_t *rng, uint8_t *buf, size_t cap)
{
	size_t n = 0, len = (size_t)(*rng >> 40) % 60;
	for (size_t i = 0; i < len; i++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		const char *a = alphabet[(*rng >> 33) % (sizeof alphabet / sizeof *alphabet)];
		size_t l = a[0] ? strlen(a) : 1;
		if (n + l > cap)
			break;
		memcpy(buf + n, a, l);
		n += l;
	}
	return n;
}

static void scanners_split_like_pcre2_on_random_strings(void **state)
{
	(void)state;
	const char *res[] = {tok_re_llama3, tok_re_qwen2, tok_re_gpt2, tok_re_o200k};
	uint64_t seed = 20261202;
	printf("# seed %llu\n", (unsigned long long)seed);
	titan_err err = {0};
	for (int r = 0; r < 4; r++) {
		tok_split *sc = tok_split_new(res[r], TOK_PRETOK_AUTO, &err);
		tok_split *pc = tok_split_new(res[r], TOK_PRETOK_PCRE2, &err);
		assert_non_null(sc);
		assert_non_null(pc);
		assert_string_not_equal(tok_split_kind(sc), "pcre2");
		assert_string_equal(tok_split_kind(pc), "pcre2");
		uint64_t rng = seed + (uint64_t)r;
		uint8_t buf[512];
		for (int iter = 0; iter < SCALE(20000); iter++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			size_t n = random_text(&rng, buf, sizeof buf);
			pieces a = {.base = buf}, b = {.base = buf};
			assert_int_equal(tok_split_run(sc, buf, n, collect, &a, &err), 0);
			assert_int_equal(tok_split_run(pc, buf, n, collect, &b, &err), 0);
			if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v))) {
				fprintf(stderr, "%s: text of %zu bytes:", tok_split_kind(sc), n);
				for (size_t i = 0; i < n; i++)
					fprintf(stderr, " %02x", buf[i]);
				fprintf(stderr, "\n");
				for (size_t i = 0; i < a.n || i < b.n; i += 2)
					fprintf(stderr, "  scanner %zu+%zu  pcre2 %zu+%zu\n",
						i < a.n ? a.v[i] : 0, i < a.n ? a.v[i + 1] : 0,
						i < b.n ? b.v[i] : 0, i < b.n ? b.v[i + 1] : 0);
				fail_msg("scanner and PCRE2 split differently (iteration %d)", iter);
			}
			free(a.v);
			free(b.v);
		}
		tok_split_free(sc);
		tok_split_free(pc);
	}
}

static void any_bytes_decode_back_to_themselves(void **state)
{
	(void)state;
	uint64_t rng = 7;
	printf("# seed 7\n");
	tok_ids ids = {0};
	tok_buf out = {0};
	titan_err err = {0};
	const char *toks[] = {"llama3_1", "qwen3", "llama3_tiktoken", "o200k_base"};
	for (int k = 0; k < 4; k++) {
		const tok *t = get_or_null(toks[k], 0);
		for (int iter = 0; t && iter < SCALE(300); iter++) {
			uint8_t buf[300];
			size_t n = (size_t)(rng >> 50) % sizeof buf;
			for (size_t i = 0; i < n; i++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				buf[i] = (uint8_t)(rng >> 56);
			}
			encode(t, buf, n, &ids);
			out.n = 0;
			assert_int_equal(tok_decode(t, ids.v, ids.n, &out, &err), 0);
			/* Qwen's NFC may change valid text; random bytes are rarely valid
			 * composable UTF-8, but compare only where NFC is the identity. */
			if (!strcmp(toks[k], "qwen3") && !uni_is_nfc_quick(buf, n))
				continue;
			assert_int_equal(out.n, n);
			assert_memory_equal(out.p, buf, n);
		}
	}
	tok_ids_free(&ids);
	tok_buf_free(&out);
}

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A piece whose match outgrows PCRE2's own 32 KiB JIT stack (a repeated
 * group with alternatives backtracks through a megabyte) still comes out
 * whole: the split's state makes its big stack on that first need. */
static void a_piece_past_the_small_jit_stack_is_whole(void **state)
{
	(void)state;
	titan_err err = {0};
	tok_split *sp = tok_split_new("(?:(a)|b|[c-z]|(?:q|r)*?s?)+", TOK_PRETOK_PCRE2, &err);
	assert_non_null(sp);
	size_t n = 1 << 20;
	uint8_t *text = malloc(n);
	assert_non_null(text);
	for (size_t i = 0; i < n; i++)
		text[i] = (uint8_t)('a' + i % 26);
	for (int run = 0; run < 2; run++) { /* each run a fresh state */
		pieces p = {.base = text};
		assert_int_equal(tok_split_run(sp, text, n, collect, &p, &err), 0);
		assert_int_equal(p.n, 2);
		assert_int_equal(p.v[0], 0);
		assert_int_equal(p.v[1], n);
		free(p.v);
	}
	free(text);
	tok_split_free(sp);
}

/* A megabyte of one character class is one piece (or one whitespace run):
 * it must take linear-ish time and round-trip. */
static void megabyte_runs_encode_in_linear_time(void **state)
{
	(void)state;
	const char *units[] = {" ", "a", "\xe2\x94\x80", "\n ", "1", "\xcc\x81", "\xff", "'s"};
	size_t n = SCALE(1 << 20);
	uint8_t *buf = malloc(n + 8);
	assert_non_null(buf);
	tok_ids ids = {0};
	tok_buf out = {0};
	titan_err err = {0};
	const char *toks[] = {"llama3_1", "qwen3", "o200k_base"};
	for (int k = 0; k < 3; k++) {
		const tok *t = get_or_null(toks[k], 0);
		for (size_t u = 0; t && u < sizeof units / sizeof *units; u++) {
			size_t l = strlen(units[u]), m = 0;
			while (m + l <= n)
				memcpy(buf + m, units[u], l), m += l;
			memcpy(buf + m, "x", 1);
			m++;
			double t0 = cpu_seconds();
			encode(t, buf, m, &ids);
			double dt = cpu_seconds() - t0;
			out.n = 0;
			assert_int_equal(tok_decode(t, ids.v, ids.n, &out, &err), 0);
			assert_int_equal(out.n, m);
			assert_memory_equal(out.p, buf, m);
			if (dt > 20.0)
				fail_msg("%s: 1 MB of \"%s\" took %.1f s", toks[k], units[u], dt);
		}
	}
	free(buf);
	tok_ids_free(&ids);
	tok_buf_free(&out);
}

/* BOS, EOS and whether a training stream adds them, as torchtitan 0.2.2
 * encodes a document (tests/tokenize/stream.sh holds the stream itself to
 * torchtitan's loader). */
static void bos_eos_follow_torchtitan(void **state)
{
	(void)state;
	const tok *q = get("qwen3", 0), *tt = get("torchtitan_test", 0), *c = get("cl100k_base", 0),
		  *o = get("o200k_base", 0);
	assert_int_equal(tok_bos_id(q), -1); /* bos_token null */
	assert_int_equal(tok_eos_id(q), 151645);
	assert_false(tok_default_add_bos(q));
	assert_true(tok_default_add_eos(q));
	/* torchtitan's test tokenizer: specials only in tokenizer_config.json. */
	assert_int_equal(tok_bos_id(tt), 2002);
	assert_int_equal(tok_eos_id(tt), 2003);
	assert_true(tok_default_add_bos(tt));
	assert_true(tok_default_add_eos(tt));
	assert_int_equal(tok_token_id(tt, "<|pad|>", 7), 2001);
	assert_int_equal(tok_bos_id(c), -1);
	assert_int_equal(tok_eos_id(c), 100257);
	assert_false(tok_default_add_bos(c));
	assert_true(tok_default_add_eos(c));
	assert_int_equal(tok_n_vocab(c), 100277);
	assert_int_equal(tok_eos_id(o), 199999);
	assert_int_equal(tok_n_vocab(o), 200019);
	assert_string_equal(tok_encoding_name(o), "o200k_base");
	assert_int_equal(tok_token_id(c, "<|endofprompt|>", 15), 100276);
	const tok *l = get_or_null("llama3_1", 0), *lt = get_or_null("llama3_tiktoken", 0);
	if (l) {
		assert_int_equal(tok_bos_id(l), 128000); /* the template adds it */
		assert_int_equal(tok_eos_id(l), 128009); /* tokenizer_config.json: <|eot_id|> */
		assert_true(tok_default_add_bos(l));
		assert_true(tok_default_add_eos(l));
		assert_int_equal(tok_token_id(l, " Hello", 6), 22691);
	}
	if (lt) {
		assert_int_equal(tok_bos_id(lt), 128000);
		assert_int_equal(tok_eos_id(lt), 128001);
		assert_true(tok_default_add_bos(lt));
		assert_true(tok_default_add_eos(lt));
		assert_int_equal(tok_n_vocab(lt), 128256);
		assert_string_equal(tok_encoding_name(lt), "llama3");
		assert_int_equal(tok_token_id(lt, "<|eot_id|>", 10), 128009);
		assert_int_equal(tok_token_id(lt, "<|reserved_special_token_250|>", 30), 128255);
	}
}

/* tokenizer_config.json as torchtitan reads it: a token it names that the
 * tokenizer lacks gets the next free id, eos_token equal to bos_token adds no
 * EOS, a template adding two tokens cannot be a titan stream. */
static void config_tokens_and_templates_follow_torchtitan(void **state)
{
	(void)state;
	char dir[] = "/tmp/titan-tok.XXXXXX", path[256], cfg[256];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
	static const char base[] =
		"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"<s>\": 2}, "
		"\"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
		"\"use_regex\": false}%s}";
	char text[1024];
	snprintf(text, sizeof text, base, "");
	write_file(path, text);
	write_file(cfg, "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, "
			"\"pad_token\": \"<pad>\"}");
	tok *t = NULL;
	titan_err err = {0};
	assert_int_equal(tok_load(&t, dir, NULL, &err), 0);
	/* <s> is the vocabulary's id 2; </s> and <pad> are new: 3 and 4. */
	assert_int_equal(tok_bos_id(t), 2);
	assert_int_equal(tok_eos_id(t), 3);
	assert_int_equal(tok_token_id(t, "<pad>", 5), 4);
	assert_int_equal(tok_n_vocab(t), 5);
	assert_true(tok_default_add_bos(t) && tok_default_add_eos(t));
	tok_ids ids = {0};
	encode(t, "a<s>b<pad>", 10, &ids); /* the text of a config token is that token */
	int32_t want[] = {0, 2, 1, 4};
	assert_ids(&ids, want, 4, "config tokens in text");
	tok_free(t);
	write_file(cfg, "{\"bos_token\": \"<s>\", \"eos_token\": \"<s>\"}");
	assert_int_equal(tok_load(&t, dir, NULL, &err), 0);
	assert_true(tok_default_add_bos(t));
	assert_false(tok_default_add_eos(t)); /* torchtitan's elif: no eos_id */
	tok_free(t);
	snprintf(text, sizeof text, base,
		 ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
		 "{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"SpecialToken\": {\"id\": \"<s>\"}}, "
		 "{\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [2]}}}");
	write_file(path, text);
	assert_int_equal(tok_load(&t, dir, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "2 token(s) before"));
	remove(path);
	remove(cfg);
	remove(dir);
	tok_ids_free(&ids);
}

static void added_tokens_policy_is_an_option(void **state)
{
	(void)state;
	const char *tt_path = need_fixture("tokenizers/llama3_tiktoken/tokenizer.model");
	const char *hf_path = need_fixture("tokenizers/llama3_1");
	titan_err err = {0};
	tok *ex, *pl;
	tok_opts o = {.added = TOK_ADDED_EXTRACT};
	assert_int_equal(tok_load(&ex, tt_path, &o, &err), 0);
	o.added = TOK_ADDED_PLAIN;
	assert_int_equal(tok_load(&pl, hf_path, &o, &err), 0);
	tok_ids a = {0}, b = {0}, c = {0};
	const char *s = "x<|eot_id|>y";
	encode(ex, s, strlen(s), &a);                      /* tiktoken file, extracted */
	encode(get("llama3_1", 0), s, strlen(s), &b);      /* HF default: extracted */
	encode(pl, s, strlen(s), &c);                      /* HF file, as text */
	assert_int_equal(a.n, 3);
	assert_int_equal(a.v[1], 128009);
	assert_int_equal(b.n, 3);
	assert_memory_equal(a.v, b.v, 3 * sizeof *a.v);
	assert_true(c.n > 3);
	tok_ids d = {0};
	encode(get("llama3_tiktoken", 0), s, strlen(s), &d); /* tiktoken default: text */
	assert_int_equal(c.n, d.n);
	assert_memory_equal(c.v, d.v, c.n * sizeof *c.v);
	tok_buf out = {0};
	assert_int_equal(tok_decode(ex, a.v, a.n, &out, &err), 0);
	assert_int_equal(out.n, strlen(s));
	assert_memory_equal(out.p, s, out.n);
	int32_t badid = 128256;
	assert_int_equal(tok_decode(ex, &badid, 1, &out, &err), -1);
	assert_non_null(strstr(err.msg, "128256"));
	tok_buf_free(&out);
	tok_ids_free(&a);
	tok_ids_free(&b);
	tok_ids_free(&c);
	tok_ids_free(&d);
	tok_free(ex);
	tok_free(pl);
}

static void nfc_composes_like_unicode_16(void **state)
{
	(void)state;
	/* Expected forms from unicodedata2 16.0.0's normalize("NFC", ...). */
	static const struct {
		const char *in, *out;
	} v[] = {
		{"e\xcc\x81", "\xc3\xa9"},                                     /* e + acute */
		{"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"},     /* Hangul L V T */
		{"\xe2\x84\xab", "\xc3\x85"},                                 /* Angstrom sign */
		{"a\xcc\x9b\xcc\x81\xcc\xa3", "\xe1\xba\xa1\xcc\x9b\xcc\x81"}, /* reordering */
		{"\xe0\xa4\x95\xe0\xa4\xbc", "\xe0\xa4\x95\xe0\xa4\xbc"},     /* an exclusion */
		{"\xf0\x91\x8e\x82\xf0\x91\x8f\x89", "\xf0\x91\x8e\x83"},     /* new in 16.0 */
		{"\xff\xcc\x81", "\xff\xcc\x81"},                             /* bad byte stays */
	};
	titan_err err = {0};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		uint8_t *o;
		size_t n;
		assert_int_equal(uni_nfc((const uint8_t *)v[i].in, strlen(v[i].in), &o, &n, &err), 0);
		assert_int_equal(n, strlen(v[i].out));
		assert_memory_equal(o, v[i].out, n);
		free(o);
	}
	assert_true(uni_is_nfc_quick((const uint8_t *)"Caf\xc3\xa9 \xd0\xb9", 8));
	assert_false(uni_is_nfc_quick((const uint8_t *)"Cafe\xcc\x81", 6));
	assert_string_equal(uni_version, "16.0.0");
}

static void unicode_tables_classify_like_unicode_16(void **state)
{
	(void)state;
	assert_int_equal(uni_gc_of(uni_props('A')), UNI_LU);
	assert_int_equal(uni_gc_of(uni_props(0x01C5)), UNI_LT);
	assert_int_equal(uni_gc_of(uni_props(0x02B0)), UNI_LM);
	assert_int_equal(uni_gc_of(uni_props(0x0301)), UNI_MN);
	assert_int_equal(uni_gc_of(uni_props(0x0663)), UNI_ND);
	assert_int_equal(uni_gc_of(uni_props(0x11380)), UNI_LO); /* Tulu-Tigalari, 16.0 */
	assert_int_equal(uni_gc_of(uni_props(0x0378)), UNI_CN);
	assert_true(uni_props(0x0085) & UNI_PROP_WS);
	assert_true(uni_props(0x3000) & UNI_PROP_WS);
	assert_false(uni_props(0x180E) & UNI_PROP_WS);
	assert_false(uni_props(0x200B) & UNI_PROP_WS);
	uint32_t cp;
	assert_int_equal(uni_utf8_decode((const uint8_t *)"\xed\xa0\x80", 3, &cp), 1);
	assert_int_equal(cp, UNI_BAD_BYTE(0xed));
	assert_int_equal(uni_utf8_decode((const uint8_t *)"\xc0\x80", 2, &cp), 1);
	assert_int_equal(uni_utf8_decode((const uint8_t *)"\xf4\x90\x80\x80", 4, &cp), 1);
	assert_int_equal(uni_utf8_decode((const uint8_t *)"\xf0\x9f\x98\x80", 4, &cp), 4);
	assert_int_equal(cp, 0x1F600);
}

/* A file holding text must fail to load with a message naming it and saying
 * expect. */
static void refused_saying(const char *path, const char *text, const char *expect)
{
	write_file(path, text);
	tok *t = NULL;
	titan_err err = {0};
	if (tok_load(&t, path, NULL, &err) != -1)
		fail_msg("%s loaded: it must be refused saying \"%s\"", path, expect);
	if (!strstr(err.msg, expect) || !strstr(err.msg, path))
		fail_msg("\"%s\" does not name the file and say \"%s\"", err.msg, expect);
	remove(path);
}

static void unsupported_or_broken_files_are_refused_with_a_reason(void **state)
{
	(void)state;
	char dir[] = "/tmp/titan-tok.XXXXXX", path[256];
	assert_non_null(mkdtemp(dir));
	static const struct {
		const char *text, *expect;
	} v[] = {
		{"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "WordPiece"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "merges[0]"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}", "Metaspace"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
		 "\"behavior\": \"Isolated\"}}", "regex"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "ByteLevel"},
		{"{\"model\": ", "line"},
		{"YQ== 0\nYg== 1\n", "unknown tiktoken encoding"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 4194304}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "largest id 4194304"},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		snprintf(path, sizeof path, "%s/t%zu", dir, i);
		refused_saying(path, v[i].text, v[i].expect);
	}
	tok *t = NULL;
	titan_err err = {0};
	assert_int_equal(tok_load(&t, dir, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "no tokenizer.json"));
	remove(dir);
}

/* Files that used to load wrongly or be misnamed: an empty file and a
 * BOM-prefixed tokenizer.json were called unknown tiktoken encodings, and a
 * vocabulary giving one id to several strings dropped all their text. */
static void odd_files_and_shared_ids_are_refused_with_a_reason(void **state)
{
	(void)state;
	char dir[] = "/tmp/titan-tok.XXXXXX", path[256];
	assert_non_null(mkdtemp(dir));
	/* Every ByteLevel character, all with id 0 (HF would give each text id 0). */
	char all_zero[4096] = "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {";
	for (int c = '!'; c <= '~'; c++)
		if (c != '"' && c != '\\')
			snprintf(all_zero + strlen(all_zero), sizeof all_zero - strlen(all_zero),
				 "%s\"%c\": 0", c == '!' ? "" : ", ", c);
	strcat(all_zero, "}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
	static const char good[] = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
				   "\"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}";
	char bom[256];
	snprintf(bom, sizeof bom, "\xef\xbb\xbf%s", good);
	const struct {
		const char *text, *expect;
	} v[] = {
		{"", "empty"},
		{" \n\t\n", "empty"},
		{bom, "byte order mark"},
		{all_zero, "id 0 is given to"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}, "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "id 0 is given to"},
		{"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
		 "\"added_tokens\": [{\"id\": 0, \"content\": \"<x>\", \"special\": true}], "
		 "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "already the vocabulary's token"},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		snprintf(path, sizeof path, "%s/t%zu.json", dir, i);
		refused_saying(path, v[i].text, v[i].expect);
	}
	/* The same files pass once the defect is removed: BOM gone, ids distinct. */
	snprintf(path, sizeof path, "%s/good.json", dir);
	write_file(path, good);
	tok *t = NULL;
	titan_err err = {0};
	assert_int_equal(tok_load(&t, path, NULL, &err), 0);
	tok_free(t);
	remove(path);
	remove(dir);
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	uint8_t *b = malloc(*n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

static void spill(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* The one *.ttok file of dir, into path. */
static void cache_file(const char *dir, char *path, size_t cap)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "ls %s/*.ttok", dir);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(path, (int)cap, p));
	path[strcspn(path, "\n")] = 0;
	pclose(p);
}

/* What the cached and the fresh tokenizer make of the same texts agrees. */
static void same_tokenizer(const tok *a, const tok *b)
{
	static const char *const texts[] = {
		"Hello world, it's 2026!  \n\n\tcaf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 <|im_end|>x",
		"\xf0\x90\xb5\x90's \xff\xfe bad bytes, 12345 \xd9\xa3", "", "<|endoftext|>",
	};
	assert_int_equal(tok_n_vocab(a), tok_n_vocab(b));
	assert_int_equal(tok_bos_id(a), tok_bos_id(b));
	assert_int_equal(tok_eos_id(a), tok_eos_id(b));
	assert_int_equal(tok_default_add_bos(a), tok_default_add_bos(b));
	assert_int_equal(tok_default_add_eos(a), tok_default_add_eos(b));
	uint8_t fa[32], fb[32];
	tok_fingerprint(a, fa);
	tok_fingerprint(b, fb);
	assert_memory_equal(fa, fb, 32);
	tok_ids x = {0}, y = {0};
	tok_buf dx = {0}, dy = {0};
	titan_err err = {0};
	for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
		encode(a, texts[i], strlen(texts[i]), &x);
		encode(b, texts[i], strlen(texts[i]), &y);
		assert_ids(&y, x.v, x.n, texts[i]);
		dx.n = dy.n = 0;
		assert_int_equal(tok_decode(a, x.v, x.n, &dx, &err), 0);
		assert_int_equal(tok_decode(b, y.v, y.n, &dy, &err), 0);
		assert_int_equal(dx.n, dy.n);
		assert_memory_equal(dx.p, dy.p, dx.n);
	}
	for (int32_t id = 0; id < tok_n_vocab(a); id += 97) {
		size_t la = 0, lb = 0;
		const uint8_t *pa = tok_token_bytes(a, id, &la, NULL), *pb = tok_token_bytes(b, id, &lb, NULL);
		assert_true((pa == NULL) == (pb == NULL));
		assert_int_equal(la, lb);
		if (pa)
			assert_memory_equal(pa, pb, la);
	}
	tok_ids_free(&x);
	tok_ids_free(&y);
	tok_buf_free(&dx);
	tok_buf_free(&dy);
}

/* The compiled cache: written on the first load, mapped on the next, the
 * same tokenizer either way; a damaged, truncated or foreign file is ignored
 * and rewritten; a cache that cannot be written only costs speed.  Each damage
 * reloads the tokenizer from its source: in short runs (test_short) only the
 * small torchtitan_test's cache is damaged, the file's checks being the same
 * code whatever tokenizer it holds. */
static void compiled_cache_gives_the_same_tokenizer_and_survives_damage(void **state)
{
	(void)state;
	const char *names[] = {"qwen3", "cl100k_base", "torchtitan_test", "llama3_1"};
	for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
		char rel[64], dir[] = "/tmp/titan-tokcache.XXXXXX", file[512];
		snprintf(rel, sizeof rel, "tokenizers/%s", names[k]);
		const char *src = fixture_path(rel);
		if (!src) {
			get_or_null(names[k], 0); /* says SKIP, or fails under CI=true */
			continue;
		}
		assert_non_null(mkdtemp(dir));
		tok_opts o = {.cache_dir = dir};
		titan_err err = {0};
		tok *fresh = get(names[k], 0), *t = NULL;
		assert_int_equal(tok_load(&t, src, &o, &err), 0);
		assert_non_null(strstr(tok_describe(t), "compiled into"));
		same_tokenizer(fresh, t);
		tok_free(t);
		assert_int_equal(tok_load(&t, src, &o, &err), 0);
		assert_non_null(strstr(tok_describe(t), "compiled, from"));
		same_tokenizer(fresh, t);
		tok_free(t);

		cache_file(dir, file, sizeof file);
		if (test_short() && strcmp(names[k], "torchtitan_test") != 0) {
			remove(file);
			remove(dir);
			continue;
		}
		size_t n;
		uint8_t *good = slurp(file, &n);
		const struct {
			size_t at, len; /* flip a byte at at, then keep len bytes */
			const char *why;
		} damage[] = {{n / 2, n, "bad CRC"}, {n, n / 3, "truncated"}, {5, n, "another version"},
			      {20, n, "another key"}, {130, n, "bad CRC"}, {58, n, "bad header CRC"}};
		for (size_t d = 0; d < sizeof damage / sizeof *damage; d++) {
			uint8_t *bad = malloc(n);
			memcpy(bad, good, n);
			if (damage[d].at < n)
				bad[damage[d].at] ^= 0x40;
			spill(file, bad, damage[d].len);
			free(bad);
			assert_int_equal(tok_load(&t, src, &o, &err), 0);
			if (!strstr(tok_describe(t), damage[d].why) || !strstr(tok_describe(t), "compiled into"))
				fail_msg("%s, damage %zu: %s", names[k], d, tok_describe(t));
			same_tokenizer(fresh, t);
			tok_free(t);
		}
		free(good);
		remove(file);
		remove(dir);
	}
	/* A cache folder that cannot be made: loaded from the source all the same. */
	const char *src = fixture_path("tokenizers/torchtitan_test");
	if (src) {
		tok_opts o = {.cache_dir = "/dev/null/titan-cache"};
		titan_err err = {0};
		tok *t = NULL;
		assert_int_equal(tok_load(&t, src, &o, &err), 0);
		assert_non_null(strstr(tok_describe(t), "cache not written"));
		same_tokenizer(get("torchtitan_test", 0), t);
		tok_free(t);
	}
}

/* A tokenizer.json of our own making: two Isolated Splits (a DeepSeek-like
 * sequence, through PCRE2), a literal String split, merges as pairs. */
static void split_sequences_and_pair_merges_load(void **state)
{
	(void)state;
	char dir[] = "/tmp/titan-tok.XXXXXX", path[256];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	write_file(path,
		   "{\"added_tokens\": [{\"id\": 9, \"content\": \"<s>\", \"special\": true}],"
		   "\"normalizer\": null,"
		   "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
		   "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{N}{1,3}\"}, "
		   "\"behavior\": \"Isolated\", \"invert\": false},"
		   "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
		   "\"behavior\": \"Isolated\", \"invert\": false},"
		   "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},"
		   "\"model\": {\"type\": \"BPE\", \"ignore_merges\": false, \"vocab\": "
		   "{\"a\": 0, \"b\": 1, \"1\": 2, \"-\": 3, \"ab\": 4, \"11\": 5, \"aba\": 6, "
		   "\"111\": 7, \"b-\": 8},"
		   "\"merges\": [[\"a\", \"b\"], [\"1\", \"1\"], [\"ab\", \"a\"], [\"11\", \"1\"], "
		   "[\"b\", \"-\"]]}}");
	tok *t = NULL;
	titan_err err = {0};
	if (tok_load(&t, dir, NULL, &err))
		fail_msg("%s", err.msg);
	tok_ids ids = {0};
	/* Pieces: "aba" "1111"->"111","1" ... "b" "-" (the String split keeps "b-"
	 * from merging), "<s>" extracted. */
	const char *s = "aba1111b-<s>ab";
	encode(t, s, strlen(s), &ids);
	const int32_t want[] = {6, 7, 2, 1, 3, 9, 4};
	assert_ids(&ids, want, sizeof want / sizeof *want, "custom tokenizer.json");
	assert_string_equal(tok_describe(t) + strlen(tok_describe(t)) - 14, "Unicode 16.0.0");
	assert_int_equal(tok_bos_id(t), -1);
	tok_ids_free(&ids);
	tok_free(t);
	remove(path);
	remove(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fixture_readme_vectors_give_llama3_ids),
		cmocka_unit_test(tricky_strings_match_reference_ids_on_both_paths),
		cmocka_unit_test(scanners_split_like_pcre2_on_random_strings),
		cmocka_unit_test(any_bytes_decode_back_to_themselves),
		cmocka_unit_test(a_piece_past_the_small_jit_stack_is_whole),
		cmocka_unit_test(megabyte_runs_encode_in_linear_time),
		cmocka_unit_test(bos_eos_follow_torchtitan),
		cmocka_unit_test(config_tokens_and_templates_follow_torchtitan),
		cmocka_unit_test(added_tokens_policy_is_an_option),
		cmocka_unit_test(nfc_composes_like_unicode_16),
		cmocka_unit_test(unicode_tables_classify_like_unicode_16),
		cmocka_unit_test(unsupported_or_broken_files_are_refused_with_a_reason),
		cmocka_unit_test(split_sequences_and_pair_merges_load),
		cmocka_unit_test(odd_files_and_shared_ids_are_refused_with_a_reason),
		cmocka_unit_test(compiled_cache_gives_the_same_tokenizer_and_survives_damage),
	};
	return cmocka_run_group_tests(tests, NULL, free_all);
}
