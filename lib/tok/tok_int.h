/* tok_int.h: what the tok module's files share (private). */
#ifndef TITAN_TOK_INT_H
#define TITAN_TOK_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mfile.h"
#include "tok/tok.h"
#include "tok/tok_split_int.h"

/* What a compiled tokenizer in the cache (tok_cache.c) was made by: bump it
 * whenever what a loaded tok holds, or how a loader computes it, changes, so
 * that caches written before are not used. */
#define TOK_CACHE_VERSION 3
/* The cache file's layout (tok_cache.c; the fuzz target writes its header). */
#define TOK_CACHE_FORMAT 3u

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
#define TOK_MAX_NORMS 8
#define TOK_MAX_AFFIX 8

/* Pre-tokenizer stages (HF's Sequence, in order); split[k] holds the regex of
 * the two Split kinds and is NULL for the others. */
enum tok_stage_kind {
	TOK_STAGE_ISOLATED = 0, /* Split, Isolated: matches and gaps are pieces */
	TOK_STAGE_MATCHES,      /* Split, Removed, invert: only the matches (CLIP) */
	TOK_STAGE_WHITESPACE,   /* WhitespaceSplit: runs of non-White_Space */
	TOK_STAGE_METASPACE,    /* Metaspace: ' ' -> replacement, prefix, split */
};

enum tok_model_kind { TOK_MODEL_BPE = 0, TOK_MODEL_UNIGRAM };

/* Normalizer steps (HF's Sequence, in order) when more than NFC is asked. */
enum tok_norm_kind {
	TOK_NORM_NFC, TOK_NORM_PRECOMPILED, TOK_NORM_REPLACE, TOK_NORM_LOWERCASE, TOK_NORM_STRIP,
};

typedef struct tok_charsmap tok_charsmap; /* tok_norm.c */
typedef struct tok_unigram tok_unigram;   /* tok_unigram.c */

typedef struct tok_norm {
	int kind;               /* enum tok_norm_kind */
	tok_split *re;          /* REPLACE: the pattern (always run by PCRE2) */
	char *content;          /* REPLACE: what each match becomes */
	size_t content_len;
	bool left, right;       /* STRIP: which ends */
	tok_charsmap *charsmap; /* PRECOMPILED */
} tok_norm;

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
	uint8_t stage_kind[TOK_MAX_SPLITS]; /* enum tok_stage_kind, per stage */

	/* What the compiled cache does not hold (a tok using any of it is not
	 * cached): more normalizer steps than NFC, stages other than Isolated
	 * splits, a Unigram model, BPE's end-of-word suffix, a Metaspace decoder. */
	bool extended;
	int n_norms;              /* > 0: these steps instead of nfc */
	tok_norm norm[TOK_MAX_NORMS];
	char meta_rep[8];         /* Metaspace: the replacement's UTF-8 ("\u2581") */
	size_t meta_rep_len;
	bool meta_prepend;        /* Metaspace prepend_scheme always (else never) */
	bool meta_decode;         /* decoder Metaspace: replacement -> ' ' */
	bool meta_decode_strip;   /* ... and dropped in the first token */
	int model;                /* enum tok_model_kind */
	bool vocab_raw;           /* tokens are UTF-8 text, not ByteLevel strings */
	bool has_eow;             /* BPE end_of_word_suffix: the last byte of a
				   * piece starts as eow_id[byte] */
	int32_t eow_id[256];
	tok_unigram *uni;

	/* The post-processor's special tokens around one sequence, and the pad
	 * token (tokenizer_config.json's pad_token; -1 when none), for
	 * tok_encode_fixed. */
	int32_t post_pre[TOK_MAX_AFFIX], post_suf[TOK_MAX_AFFIX];
	int n_post_pre, n_post_suf;
	int32_t pad_id;

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

/* Decode standard base64 (stops at '='); the length, or -1 for a character
 * outside the alphabet or more than cap bytes. */
long tok_b64decode(const uint8_t *s, size_t n, uint8_t *out, size_t cap);

/* The Unigram model (tok_unigram.c).  vocab: model.vocab, a list of
 * [piece, score]; ids are list positions.  Refuses duplicate pieces and an
 * unk_id that is missing or out of range. */
struct json_t;
int tok_unigram_load(tok *t, struct json_t *model, titan_err *err);
void tok_unigram_free(tok_unigram *u);
/* Per-encoder scratch space; NULL when out of memory. */
typedef struct tok_uni_scratch tok_uni_scratch;
tok_uni_scratch *tok_uni_scratch_new(void);
void tok_uni_scratch_free(tok_uni_scratch *s);
/* The ids of one pre-tokenized piece (Viterbi over the pieces' scores). */
int tok_unigram_piece(const tok *t, tok_uni_scratch *s, const uint8_t *p, size_t n,
		      tok_ids *out, titan_err *err);

/* Normalizers (tok_norm.c).  tok_charsmap_load: a Precompiled normalizer's
 * precompiled_charsmap (base64 text), checked whole: one that would make HF
 * read outside its arrays, or that is not a tree, is refused. */
int tok_charsmap_load(tok_charsmap **out, const char *b64, size_t n, titan_err *err);
void tok_charsmap_free(tok_charsmap *c);
/* Apply t's normalizer steps to s (n bytes): *out malloc'd (the caller frees). */
int tok_normalize(const tok *t, tok_pcre *pc, const uint8_t *s, size_t n, uint8_t **out,
		  size_t *out_n, titan_err *err);

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
