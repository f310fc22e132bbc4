/* tok_split_int.h: the pre-tokenizer's internals (private to lib/tok). */
#ifndef TITAN_TOK_SPLIT_INT_H
#define TITAN_TOK_SPLIT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

enum {
	TOK_SPLIT_PCRE2 = 0,
	TOK_SPLIT_LLAMA3,
	TOK_SPLIT_QWEN2,
	TOK_SPLIT_GPT2,
	TOK_SPLIT_O200K,
};

struct tok_split {
	int kind;
	char *src; /* the regex as given */
	void *re;  /* pcre2_code *, compiled for every kind */
};

/* The regex a split was made from. */
const char *tok_split_source(const tok_split *s);

/* A tokenizer.json regex (Oniguruma syntax, as HF tokenizers runs it) as a
 * PCRE2 pattern with the same meaning on Unicode 16.0.0 (malloc'd; see
 * tok_regex.c), or NULL with *err naming what cannot be made exact. */
char *tok_regex_to_pcre2(const char *re, titan_err *err);

/* Per-thread PCRE2 match state (the compiled code is shared). */
typedef struct tok_pcre {
	void *md, *mc, *js; /* match data, match context, JIT stack */
} tok_pcre;
int tok_pcre_init(tok_pcre *p, titan_err *err);
void tok_pcre_free(tok_pcre *p);

/* End of the scanner's piece starting at i < n (kind is not PCRE2). */
size_t tok_split_scan(const tok_split *sp, const uint8_t *s, size_t n, size_t i);
/* Run with the caller's match state (pc may be NULL for a scanner). */
int tok_split_run_with(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
		       tok_piece_fn fn, void *ctx, titan_err *err);
/* Through PCRE2 always, telling matches (is_match true) from the gaps
 * between them: for Split Removed/invert and the Replace normalizer.  An
 * empty match makes no piece. */
typedef int (*tok_mark_fn)(void *ctx, const uint8_t *piece, size_t n, bool is_match);
int tok_split_run_marked(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
			 tok_mark_fn fn, void *ctx, titan_err *err);
/* Always through PCRE2, even when a scanner exists (tests, fuzzing). */
int tok_split_run_pcre2(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
			tok_piece_fn fn, void *ctx, titan_err *err);

#endif
