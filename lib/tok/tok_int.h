/* tok_int.h: what the tok module's files share (private). */
#ifndef TITAN_TOK_INT_H
#define TITAN_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

/* Open-addressing hash: byte strings -> id (the vocabulary, added tokens). */
typedef struct tok_strslot {
	int32_t id;   /* -1 when empty */
	uint32_t tag; /* the hash's high bits: most misses stop here */
} tok_strslot;

typedef struct tok_strmap {
	tok_strslot *slot;
	size_t mask;
	const uint8_t *pool; /* bytes of id k at pool + off[k], length len[k] */
	const uint64_t *off;
	const uint32_t *len;
} tok_strmap;

/* Open-addressing hash: (left id, right id) -> (merge rank, merged id). */
typedef struct tok_pair {
	uint64_t key; /* left << 32 | right; UINT64_MAX when empty */
	uint32_t rank, id;
} tok_pair;

typedef struct tok_pairmap {
	tok_pair *slot;
	size_t mask, n;
} tok_pairmap;

typedef struct tok_added_tok {
	int32_t id;
	bool special;
} tok_added_tok;

#define TOK_MAX_SPLITS 8

struct tok {
	int format;               /* enum tok_format */
	char encoding[32];        /* "llama3", ..., "tokenizer.json" */
	char describe[512];
	int added_mode;           /* TOK_ADDED_EXTRACT or TOK_ADDED_PLAIN */
	int pretok_mode;          /* enum tok_pretok_mode */
	bool nfc;                 /* normalizer NFC */
	bool ignore_merges;       /* a piece in the vocabulary is emitted whole */
	int n_splits;             /* pre-tokenizer stages, applied in turn */
	tok_split *split[TOK_MAX_SPLITS];

	int64_t n_vocab;          /* largest id + 1 */
	uint8_t *pool;            /* every token's bytes */
	uint64_t *off;            /* (n_vocab) offset into pool, */
	uint32_t *len;            /* (n_vocab) length; UINT32_MAX for a hole */
	uint8_t *flags;           /* (n_vocab) TOK_F_* */
	uint8_t **dec;            /* (n_vocab) decoded bytes when not pool's (HF
				   * added tokens), else NULL; dec_len their length */
	uint32_t *dec_len;
	tok_strmap vocab;         /* reachable ordinary tokens by bytes */
	tok_strmap added;         /* added tokens by content */
	uint32_t added_lens[64];  /* the distinct lengths of added tokens, longest first */
	int n_added_lens;
	uint8_t added_first[32];  /* bitmap of the added tokens' first bytes */
	int32_t byte_id[256];     /* id of each single byte, -1 when none */
	tok_pairmap pairs;

	int32_t bos, eos;
	bool add_bos, add_eos;
};

enum {
	TOK_F_ADDED = 1,   /* an added token (content is raw text) */
	TOK_F_SPECIAL = 2, /* special */
	TOK_F_UNREACH = 4, /* a vocabulary string that is not ByteLevel text: no
			    * byte sequence encodes to it (HF keeps it for decode) */
};

uint64_t tok_hash_bytes(const uint8_t *p, size_t n);
int tok_strmap_build(tok_strmap *m, const tok *t, uint8_t flag_mask, uint8_t flag_want,
		     titan_err *err);
int32_t tok_strmap_get(const tok_strmap *m, const uint8_t *p, size_t n);
void tok_strmap_free(tok_strmap *m);

int tok_pairmap_init(tok_pairmap *m, size_t expect, titan_err *err);
/* Insert or overwrite (HF: a later duplicate merge wins). */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
static inline const tok_pair *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
	for (;;) {
		const tok_pair *p = &m->slot[i];
		if (p->key == key)
			return p;
		if (p->key == UINT64_MAX)
			return NULL;
		i = (i + 1) & m->mask;
	}
}
void tok_pairmap_free(tok_pairmap *m);

/* The merge loop on one piece (raw bytes), appending ids; the caller has
 * already tried the whole piece when ignore_merges.  scratch is the encoder's. */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *tok_bpe_scratch_new(void);
void tok_bpe_scratch_free(tok_bpe_scratch *s);
int tok_bpe_piece(const tok *t, tok_bpe_scratch *s, const uint8_t *p, size_t n, tok_ids *out,
		  titan_err *err);

/* Loaders (tok_load.c calls them). */
int tok_load_hf_json(tok *t, const char *json_path, const char *config_path, titan_err *err);
int tok_load_tiktoken(tok *t, const char *path, titan_err *err);
/* Allocate the per-id arrays for n ids, all holes. */
int tok_alloc_ids(tok *t, int64_t n, titan_err *err);
/* Finish after the vocabulary is in place: hash maps, byte ids, description. */
int tok_finish(tok *t, titan_err *err);

#endif
