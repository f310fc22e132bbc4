/* fuzz_tok_regex: the translation of tokenizer.json regexes (Oniguruma syntax)
 * into PCRE2 patterns on titan's Unicode 16 tables (lib/tok/tok_regex.c).
 *
 * Input: the regex, up to the first NUL, then the text to split.  Properties:
 * the translator either refuses the regex with a message or yields a pattern
 * PCRE2 compiles, never a crash or a hang; a pattern that compiles splits the
 * text into pieces that tile it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

typedef struct tiling {
	const uint8_t *base;
	size_t at;
} tiling;

static int next(void *ctx, const uint8_t *p, size_t n)
{
	tiling *t = ctx;
	check(p == t->base + t->at && n > 0);
	t->at += n;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t rlen = nul ? (size_t)(nul - data) : size;
	if (rlen > 4096)
		return 0; /* the classes of a long regex make fuzzing slow, not better */
	char *re = malloc(rlen + 1);
	check(re != NULL);
	memcpy(re, data, rlen);
	re[rlen] = 0;
	titan_err err = {0};
	tok_split *s = tok_split_new(re, TOK_PRETOK_PCRE2, &err);
	free(re);
	if (!s) {
		check(err.msg[0] != 0);
		return 0;
	}
	const uint8_t *text = nul ? nul + 1 : data + size;
	size_t n = (size_t)(data + size - text);
	tiling t = {text, 0};
	/* PCRE2 may stop at its match limit on a pathological regex: an error, not a crash. */
	if (tok_split_run(s, text, n, next, &t, &err) == 0)
		check(t.at == n);
	tok_split_free(s);
	return 0;
}
