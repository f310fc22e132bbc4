/* fuzz_tok_encode: the pre-tokenizer scanners and the encoder on arbitrary bytes.
 *
 * Also, on the whole input: extended grapheme clusters tile it; a Unigram
 * tokenizer (NFC, Replace, Lowercase, Strip; WhitespaceSplit and Metaspace;
 * byte_fallback) encodes it to ids in range, and its fixed-length form holds
 * the post-processor's </s> and the pad id where the mask says.
 *
 * Input: one byte choosing a known regex (Llama 3, Qwen2, GPT-2, o200k), then
 * the text.  Properties: the hand-written scanner cuts the text into exactly
 * the pieces PCRE2 cuts it into (both on titan's Unicode 16 tables, characters
 * newer than PCRE2's own tables included); the pieces tile the text; a small byte-level BPE tokenizer with that regex
 * encodes it to ids that decode back to the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"
#include "unicode/unicode.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

typedef struct pieces {
	const uint8_t *base;
	size_t n, cap, *v;
} pieces;

static int collect(void *ctx, const uint8_t *p, size_t n)
{
	pieces *ps = ctx;
	if (ps->n + 2 > ps->cap) {
		ps->cap = ps->cap ? ps->cap * 2 : 64;
		ps->v = realloc(ps->v, ps->cap * sizeof *ps->v);
		check(ps->v != NULL);
	}
	check(n > 0);
	ps->v[ps->n++] = (size_t)(p - ps->base);
	ps->v[ps->n++] = n;
	return 0;
}

static const char *const regexes[4] = {tok_re_llama3, tok_re_qwen2, tok_re_gpt2, tok_re_o200k};
static tok_split *scan[4], *pcre[4];
static tok *toks[4];
static tok_enc *encs[4]; /* kept across inputs: building one is the costly part */

/* A byte-level BPE vocabulary: the 256 byte characters and a few merges. */
static char *tokenizer_json(const char *regex)
{
	size_t cap = 64 * 1024, k = 0;
	char *j = malloc(cap);
	check(j != NULL);
	k += (size_t)snprintf(j + k, cap - k,
			      "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|x|>\", \"special\": true}],"
			      "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
			      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"");
	for (const char *r = regex; *r; r++) {
		if (*r == '\\' || *r == '"')
			j[k++] = '\\';
		j[k++] = *r;
	}
	k += (size_t)snprintf(j + k, cap - k,
			      "\"}, \"behavior\": \"Isolated\", \"invert\": false},"
			      "{\"type\": \"ByteLevel\", \"use_regex\": false}]},"
			      "\"normalizer\": {\"type\": \"NFC\"},"
			      "\"model\": {\"type\": \"BPE\", \"vocab\": {");
	int extra = 0;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		int cp = printable ? b : 256 + extra++;
		k += (size_t)snprintf(j + k, cap - k, "\"\\u%04x\": %d, ", cp, b);
	}
	k += (size_t)snprintf(j + k, cap - k,
			      "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"aa\": 259, "
			      "\"aaaa\": 260, \"\\u0120\\u0120\": 261},"
			      "\"merges\": [\"\\u0120 t\", \"h e\", \"\\u0120t he\", \"a a\", \"aa aa\", "
			      "\"\\u0120 \\u0120\"]}}");
	return j;
}

static tok *uni_tok;
static tok_enc *uni_enc;

static const char uni_json[] =
	"{\"added_tokens\": [{\"id\": 7, \"content\": \"</s>\", \"special\": true}],"
	"\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"},"
	"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"},"
	"{\"type\": \"Lowercase\"}, {\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}]},"
	"\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"},"
	"{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\"}]},"
	"\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\"}},"
	"{\"SpecialToken\": {\"id\": \"</s>\"}}], \"special_tokens\": {\"</s>\": {\"ids\": [7]}}},"
	"\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\"},"
	"\"padding\": {\"pad_id\": 0},"
	"\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": ["
	"[\"<pad>\", 0.0], [\"\\u2581\", -1.0], [\"\\u2581the\", -2.0], [\"e\", -3.0], [\"th\", -2.5],"
	"[\"<0x41>\", -5.0], [\"<0xC3>\", -5.0], [\"</s>\", 0.0], [\"\\u00e9\", -4.0]]}}";

/* Clusters tile the text; the Unigram tokenizer's ids are in range. */
static void check_unigram(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = uni_grapheme_end(s, n, i);
		check(j > i && j <= n);
		i = j;
	}
	titan_err err = {0};
	tok_ids ids = {0};
	check(tok_encode(uni_enc, s, n, &ids, &err) == 0);
	for (size_t i = 0; i < ids.n; i++)
		check(ids.v[i] >= 0 && ids.v[i] < tok_n_vocab(uni_tok));
	enum { LEN = 8 };
	int32_t fx[LEN];
	uint8_t mask[LEN];
	int64_t k = tok_encode_fixed(uni_enc, s, n, LEN, fx, mask, &err);
	check(k >= 1 && k <= LEN && fx[k - 1] == 7);
	for (int64_t i = 0; i < LEN; i++)
		check(mask[i] == (i < k) && (i < k || fx[i] == 0));
	tok_buf out = {0};
	check(tok_decode(uni_tok, ids.v, ids.n, &out, &err) == 0);
	tok_buf_free(&out);
	tok_ids_free(&ids);
}

static void init(void)
{
	titan_err err = {0};
	for (int r = 0; r < 4; r++) {
		scan[r] = tok_split_new(regexes[r], TOK_PRETOK_AUTO, &err);
		pcre[r] = tok_split_new(regexes[r], TOK_PRETOK_PCRE2, &err);
		char *j = tokenizer_json(regexes[r]);
		if (tok_load_json_text(&toks[r], j, strlen(j), NULL, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			abort();
		}
		free(j);
		encs[r] = tok_enc_new(toks[r], &err);
		check(scan[r] && pcre[r] && encs[r]);
	}
	if (tok_load_json_text(&uni_tok, uni_json, sizeof uni_json - 1, NULL, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		abort();
	}
	uni_enc = tok_enc_new(uni_tok, &err);
	check(uni_enc != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!scan[0])
		init();
	if (size < 1)
		return 0;
	int r = data[0] & 3;
	const uint8_t *s = data + 1;
	size_t n = size - 1;
	titan_err err = {0};
	pieces a = {.base = s}, b = {.base = s};
	check(tok_split_run(scan[r], s, n, collect, &a, &err) == 0);
	check(tok_split_run(pcre[r], s, n, collect, &b, &err) == 0);
	size_t at = 0;
	for (size_t i = 0; i < a.n; i += 2) {
		check(a.v[i] == at);
		at += a.v[i + 1];
	}
	check(at == n);
	check(a.n == b.n);
	check(a.n == 0 || memcmp(a.v, b.v, a.n * sizeof *a.v) == 0);
	free(a.v);
	free(b.v);

	tok_enc *e = encs[r];
	tok_ids ids = {0};
	tok_buf out = {0};
	check(tok_encode(e, s, n, &ids, &err) == 0);
	check(tok_decode(toks[r], ids.v, ids.n, &out, &err) == 0);
	/* NFC may rewrite valid text; compare only where it is the identity. */
	if (uni_is_nfc_quick(s, n))
		check(out.n == n && (n == 0 || memcmp(out.p, s, n) == 0));
	tok_ids_free(&ids);
	tok_buf_free(&out);
	check_unigram(data, size);
	return 0;
}
