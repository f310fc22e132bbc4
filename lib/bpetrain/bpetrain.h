/* bpetrain.h: train a ByteLevel BPE tokenizer the way HF tokenizers'
 * BpeTrainer does, and write it as a tokenizer.json HF loads.
 *
 * Training follows BpeTrainer (tokenizers 0.2x) step by step so that the same
 * corpus gives the same vocabulary and merges:
 *   - documents are pre-tokenized (Llama 3 regex then ByteLevel, or GPT-2's
 *     ByteLevel with its regex) and the pieces counted as words;
 *   - ids: the special tokens first, in the order given, then the 256 byte
 *     symbols sorted by their ByteLevel code point (BpeTrainer with
 *     initial_alphabet = ByteLevel.alphabet()), then one id per new token;
 *   - each step takes the pair with the highest count, ties to the smallest
 *     (left id, right id); counts are updated incrementally from the words the
 *     pair occurs in, with BpeTrainer's lazy priority queue (an entry whose
 *     count is stale is pushed back with the current count), including its
 *     quirks: the merged pair's own count is not cleared, and a pair can be
 *     merged again later (the later rank is kept, as HF's merge map does);
 *   - it stops when the vocabulary (specials + 256 + new tokens) reaches
 *     vocab_size or the best count is below min_frequency (or zero).
 * Time: about O(total merge work), each step touching only the words that
 * hold the pair. */
#ifndef TITAN_BPETRAIN_H
#define TITAN_BPETRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

enum bpetrain_pretok { BPETRAIN_LLAMA3 = 0, BPETRAIN_GPT2 = 1 };

typedef struct bpetrain_opts {
	size_t vocab_size;       /* target, specials and the 256 bytes included */
	uint64_t min_frequency;  /* a pair needs at least this count (0 = any) */
	const char **specials;   /* special tokens, ids 0.. in this order */
	size_t n_specials;
	int pretok;              /* enum bpetrain_pretok */
	const char *bos, *eos;   /* for tokenizer_config.json; NULL: none */
	int add_bos, add_eos;    /* add_bos_token / add_eos_token */
} bpetrain_opts;

typedef struct bpetrain bpetrain;

/* A trainer; the strings in opts are copied.  NULL with err on failure
 * (vocab_size below specials + 256, a bos/eos that is not a special). */
bpetrain *bpetrain_new(const bpetrain_opts *opts, titan_err *err);
void bpetrain_free(bpetrain *b);

/* Pre-tokenize one document and count its words. */
int bpetrain_feed(bpetrain *b, const uint8_t *text, size_t n, titan_err *err);

/* Compute the merges from the words fed so far (once). */
int bpetrain_run(bpetrain *b, titan_err *err);

/* After bpetrain_run: words seen, distinct words, vocabulary size, merges. */
uint64_t bpetrain_n_words(const bpetrain *b);
size_t bpetrain_n_distinct(const bpetrain *b);
size_t bpetrain_n_vocab(const bpetrain *b);
size_t bpetrain_n_merges(const bpetrain *b);

/* Write dir/tokenizer.json and dir/tokenizer_config.json atomically (dir is
 * created when missing). */
int bpetrain_save(const bpetrain *b, const char *dir, titan_err *err);

#endif
