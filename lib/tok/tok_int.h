/* tok_int.h: what the tok module's files share (private). */
#ifndef TITAN_TOK_INT_H
#define TITAN_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mfile.h"
#include "tok/tok.h"

/* What a compiled tokenizer in the cache (tok_cache.c) was made by: bump it
 * whenever what a loaded tok holds, or how a loader computes it, changes, so
 * that caches written before are not used. */
#define TOK_CACHE_VERSION 2

/* Open-addressing hash: byte strings -> id (the vocabulary, added tokens). */
/* A slot holds short tokens' bytes inline, so that a lookup of a word that is
 * a token touches one cache line instead of four arrays. */
enum { TOK_INLINE = 10 };
typedef struct tok_strslot {
	int32_t id;     /* -1 when empty */
	uint8_t len;    /* the token's length when <= TOK_INLINE, else 255 */
	uint8_t tag;    /* the hash's high byte: most misses stop here */
	uint8_t bytes[TOK_INLINE];
} tok_strslot;

typedef struct tok_strmap {
	tok_strslot *slot;
	size_t mask;
	const uint8_t *pool; /* bytes of id k at pool + off[k], length len[k] */
	const uint64_t *off;
	const uint32_t *len;
} tok_strmap;

/* Open-addressing hash: (left id, right id) -> merge rank, then rank ->
 * merged id.  A slot is one u64, (left << idbits | right) in the low 2*idbits
 * bits and the rank above them, so that the map of a 200k vocabulary is a
 * few megabytes: its probes are the encoder's cache misses. */
typedef struct tok_pairmap {
	uint64_t *slot;     /* UINT64_MAX when empty */
	size_t mask, n;
	unsigned idbits;    /* bits of one id; ids are < 2^idbits - 1 */
	uint64_t keymask;   /* the low 2*idbits bits */
	uint64_t rnone;     /* the rank field's all-ones: no merge */
	uint32_t *merged;   /* (n_ranks) id that the merge of rank r makes */
	uint32_t n_ranks;
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
	bool post_eos;            /* HF's post-processor ends a single sequence with a token
	                             (EOS): encode(text, add_eos=False) still has it */

	uint8_t source_sha[32];   /* SHA-256 of the file (or text) loaded */
	mfile map;                /* a compiled cache file the tables point into */
	bool mapped;              /* pool ... pairs live in map: not freed */
	char cache_note[192];     /* what the cache did, for tok_describe */
};

enum {
	TOK_F_ADDED = 1,   /* an added token (content is raw text) */
	TOK_F_SPECIAL = 2, /* special */
	TOK_F_UNREACH = 4, /* a vocabulary string that is not ByteLevel text: no
			    * byte sequence encodes to it (HF keeps it for decode) */
};

uint64_t tok_hash_bytes(const uint8_t *p, size_t n);
/* malloc for a large table probed at random (huge pages where available). */
void *tok_alloc_table(size_t size);
int tok_strmap_build(tok_strmap *m, const tok *t, uint8_t flag_mask, uint8_t flag_want,
		     titan_err *err);
int32_t tok_strmap_get(const tok_strmap *m, const uint8_t *p, size_t n);
/* The same with the hash of p already computed (tok_hash_bytes). */
int32_t tok_strmap_get_h(const tok_strmap *m, const uint8_t *p, size_t n, uint64_t h);
void tok_strmap_free(tok_strmap *m);

/* Ranks are < n_ranks; ids < n_vocab. */
int tok_pairmap_init(tok_pairmap *m, size_t expect, int64_t n_vocab, uint32_t n_ranks,
		     titan_err *err);
/* Insert or overwrite (HF: a later duplicate merge wins). */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
/* Shrink the table to the pairs it holds, once all are in. */
void tok_pairmap_fit(tok_pairmap *m);
/* Mix both ids into every bit (a plain multiply leaves the low bits to b
 * alone, and linear probing then clusters). */
static inline uint64_t tok_pair_hash(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	key *= 0xc4ceb9fe1a85ec53ull;
	return key ^ (key >> 33);
}

static inline uint64_t tok_pair_key(const tok_pairmap *m, int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << m->idbits | (uint32_t)b;
}

/* The slot of key (rank field included), or key with the rank field all
 * ones when the pair does not merge. */
static inline uint64_t tok_pairmap_get(const tok_pairmap *m, uint64_t key, uint64_t h)
{
	size_t i = (size_t)h & m->mask;
	for (;;) {
		uint64_t v = m->slot[i];
		if ((v & m->keymask) == key)
			return v;
		if (v == UINT64_MAX)
			return key | m->rnone << (2 * m->idbits);
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

/* The compiled cache (tok_cache.c).  tok_cache_key: the key of a load of
 * source (its SHA-256) with config (NULL: none) under the options. */
void tok_cache_key(const uint8_t source_sha[32], const uint8_t *config_sha, int added, int pretok,
		   uint8_t key[32]);
/* Load t from dir's file for key: 0 done, 1 no usable file (t untouched
 * except cache_note), -1 out of memory. */
int tok_cache_read(tok *t, const char *dir, const uint8_t key[32], titan_err *err);
/* Write t (freshly loaded) for key; failures only go to t->cache_note. */
void tok_cache_write(tok *t, const char *dir, const uint8_t key[32]);

/* Loaders (tok_load.c calls them). */
int tok_load_hf_json(tok *t, const char *json_path, const char *config_path, titan_err *err);
int tok_load_hf_text(tok *t, const char *text, size_t n, const char *config_path,
		     titan_err *err);
int tok_load_tiktoken(tok *t, const char *path, titan_err *err);
/* Allocate the per-id arrays for n ids, all holes. */
int tok_alloc_ids(tok *t, int64_t n, titan_err *err);
/* Finish after the vocabulary is in place: hash maps, byte ids, description. */
int tok_finish(tok *t, titan_err *err);

#endif
