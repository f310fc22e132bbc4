/* tok.h: exact tokenization as HF tokenizers and tiktoken do it: ByteLevel BPE
 * (HF tokenizer.json, tiktoken files) and the text encoders of Flux, CLIP's
 * BPE and T5's SentencePiece Unigram model (tokenizer.json).
 *
 * What loads:
 *   - a tokenizer.json, or a folder holding one, with the tokenizer_config.json
 *     beside it read the way torchtitan 0.2.2's HuggingFaceTokenizer reads it:
 *     bos_token and eos_token name BOS and EOS, and every token it names
 *     (bos/eos/pad/unk/sep/cls/mask_token, each added_tokens_decoder entry)
 *     becomes a special added token, with the next free id when the tokenizer
 *     lacks it;
 *   - a tiktoken file ("base64(bytes) rank" per line: Meta's Llama 3
 *     tokenizer.model, cl100k_base.tiktoken, o200k_base.tiktoken), or a folder
 *     holding tokenizer.model or one *.tiktoken file.  The encoding is recognised
 *     from the file's SHA-256 (the published hashes) and, failing that, from its
 *     number of ranks (128,000 / 100,256 / 199,998), to pick its regex and its
 *     special tokens; see tok_load().
 *
 * Pieces: HF's pipeline in its order: added tokens are cut out of the text
 * first (TOK_ADDED_EXTRACT, the default for tokenizer.json), then the normalizer
 * (none or NFC), the pre-tokenizer (Split regexes, ByteLevel), then BPE.
 * tiktoken files default to TOK_ADDED_PLAIN: special tokens' text is encoded as
 * ordinary text, like tiktoken's encode_ordinary().  Added tokens are matched
 * leftmost-longest on the raw text; their lstrip / rstrip / single_word flags
 * are ignored (no ByteLevel tokenizer we know sets them), and normalized ones
 * are matched before NFC too (their text is ASCII in practice).
 *
 * Beyond ByteLevel BPE (Flux's encoders; tokenizers using any of this are not
 * kept in the compiled cache):
 *   - normalizers Precompiled (a SentencePiece charsmap, run per extended
 *     grapheme cluster as HF runs it; one that would make HF read outside its
 *     arrays is refused), Replace (a literal or regex, through PCRE2),
 *     Lowercase (HF's per-character table), Strip, with NFC, in a Sequence;
 *   - pre-tokenizers WhitespaceSplit, Metaspace (prepend_scheme always or
 *     never, split true), Split with behavior Removed and invert true (only the
 *     regex's matches go on: CLIP);
 *   - BPE's end_of_word_suffix (CLIP's "</w>": a word's last byte starts as
 *     its suffixed token);
 *   - the Unigram model (SentencePiece: T5, ALBERT): Viterbi over the pieces'
 *     scores, HF's tie order, unknown characters fused into one unk_id,
 *     byte_fallback; the decoder Metaspace;
 *   - the post-processor's special tokens and the pad token, for
 *     tok_encode_fixed (HF's truncation and max_length padding).
 *
 * Refused with a message naming the field: models other than BPE and Unigram,
 * BPE with byte_fallback, dropout or continuing_subword_prefix; a Unigram
 * model without unk_id, or with a piece twice; normalizers other than the
 * above; pre-tokenizers other than Split (Isolated, invert false; or Removed,
 * invert true), ByteLevel (add_prefix_space false), WhitespaceSplit and
 * Metaspace; Metaspace prepend_scheme "first" (it depends on offsets into the
 * original text, which titan does not track); a Split after the ByteLevel
 * step; BPE without ByteLevel, Unigram with it.
 *
 * Pre-tokenizer regexes run through hand-written scanners when the regex is one
 * of the known patterns (Llama 3 / cl100k, Qwen2/3, GPT-2, o200k), otherwise
 * through PCRE2 (JIT, UTF, UCP).  Both are exact on titan's own Unicode tables
 * (Unicode 16.0.0, what the references' regex engines use): a tokenizer.json
 * regex, in the Oniguruma syntax HF tokenizers runs it with, is rewritten for
 * PCRE2 with its Unicode classes as explicit code point ranges (tok_regex.c),
 * since PCRE2's own tables are older (Unicode 14 in Debian bookworm).  A regex
 * needing Unicode data titan's tables lack (scripts, Alphabetic...) is refused
 * at load.  The scanners are faster (TOK_PRETOK_AUTO).
 *
 * Bytes in: the encoder takes raw bytes.  Valid UTF-8 is tokenized exactly as
 * the references tokenize the same string.  Each byte of an invalid UTF-8
 * sequence (stray continuation bytes, truncated sequences, overlong forms,
 * encoded surrogates, values above U+10FFFF) counts as one code point that is
 * neither letter, number, mark nor white space, and keeps its own byte value in
 * the output bytes, so decode(encode(x)) == x for every byte string x.
 * NUL is an ordinary character.  No input size limit, no recursion; time is
 * O(n log n) in the length of a piece at worst.
 *
 * Threads: a tok is read-only once loaded and may be shared; each thread
 * encodes with its own tok_enc (scratch space and a piece cache). */
#ifndef TITAN_TOK_H
#define TITAN_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct tok tok;
typedef struct tok_enc tok_enc;

/* How added tokens (specials) in the text are treated. */
enum tok_added {
	TOK_ADDED_DEFAULT = 0, /* EXTRACT for tokenizer.json, PLAIN for tiktoken */
	TOK_ADDED_EXTRACT,     /* HF: "<|eot_id|>" in the text becomes its id */
	TOK_ADDED_PLAIN,       /* tiktoken encode_ordinary: encode it as text */
};

/* How pre-tokenizer regexes are run. */
enum tok_pretok_mode {
	TOK_PRETOK_AUTO = 0, /* a scanner for the known patterns, PCRE2 otherwise */
	TOK_PRETOK_PCRE2,    /* always PCRE2 (for tests and odd cases) */
};

typedef struct tok_opts {
	int added;             /* enum tok_added */
	int pretok;            /* enum tok_pretok_mode */
	const char *cache_dir; /* compiled tokenizers' folder (tok_cache_dir); NULL: none */
} tok_opts;

/* The compiled-tokenizer cache.  With opts->cache_dir set, tok_load looks there
 * for the compiled form of what it is asked to load, keyed by the SHA-256 of
 * the source (and of its tokenizer_config.json, the options, titan's loader
 * version and Unicode version): a file found and sound is mapped in a few
 * milliseconds; otherwise the source is loaded and its compiled form written
 * there (atomically: a cache folder may be shared by concurrent runs; a file
 * that is not sound is ignored and rewritten).  The format is titan-formats(5),
 * COMPILED TOKENIZER.  A cache that cannot be written only costs speed; what
 * happened is in tok_describe().
 *
 * The default folder: $TITAN_TOK_CACHE when set ("" or "off": no cache),
 * else $XDG_CACHE_HOME/titan/tokenizers, else $HOME/.cache/titan/tokenizers.
 * Writes it into buf and returns buf, or NULL for no cache. */
const char *tok_cache_dir(char *buf, size_t cap);

/* Which file format the tokenizer came from. */
enum tok_format { TOK_FORMAT_HF_JSON = 1, TOK_FORMAT_TIKTOKEN = 2 };

/* Load from path: a tokenizer.json, a tiktoken file, or a folder holding one
 * (tokenizer.json is preferred, then tokenizer.model, then a single *.tiktoken).
 * opts may be NULL (defaults).  On success *out owns everything; tok_free() it.
 * tiktoken encodings recognised: "llama3" (Meta's tokenizer.model, 128,000
 * ranks + 256 specials at 128000..128255), "cl100k_base" (specials
 * <|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|> 100259,
 * <|fim_suffix|> 100260, <|endofprompt|> 100276), "o200k_base" (<|endoftext|>
 * 199999, <|endofprompt|> 200018).  Another tiktoken file is refused unless its
 * content is one of these (an unknown file has no known regex). */
int tok_load(tok **out, const char *path, const tok_opts *opts, titan_err *err);
void tok_free(tok *t);
/* The same from tokenizer.json text in memory (n bytes; no tokenizer_config.json,
 * so no BOS/EOS): for tools that build one, tests and fuzzing. */
int tok_load_json_text(tok **out, const char *json, size_t n, const tok_opts *opts,
		       titan_err *err);

int tok_format(const tok *t);
/* SHA-256 of the file tok_load read (tokenizer.json or the tiktoken file), or
 * of the text tok_load_json_text was given: what names a tokenizer. */
void tok_fingerprint(const tok *t, uint8_t out[32]);
/* "llama3", "cl100k_base", "o200k_base" for tiktoken files; "tokenizer.json"
 * otherwise. */
const char *tok_encoding_name(const tok *t);
/* One line for logs: format, vocabulary size, pre-tokenizer stages and whether
 * each runs on a scanner or PCRE2, normalizer, added-token policy, and what
 * the compiled cache did. */
const char *tok_describe(const tok *t);

/* Ids run 0 .. n_vocab-1 (the largest id + 1; there may be holes).  A file
 * with an id of TOK_MAX_IDS or more is refused (per-id arrays are dense). */
#define TOK_MAX_IDS (1 << 22)
int64_t tok_n_vocab(const tok *t);

/* BOS / EOS ids, or -1 when the tokenizer has none.  For tokenizer.json they
 * come from tokenizer_config.json (bos_token / eos_token, a string or an
 * {"content": ...} object), else from the post-processor's template; tiktoken
 * "llama3": <|begin_of_text|> and <|end_of_text|>; cl100k_base / o200k_base:
 * no BOS, EOS <|endoftext|>. */
int32_t tok_bos_id(const tok *t);
int32_t tok_eos_id(const tok *t);
/* Whether a training stream starts every document with BOS and ends it with
 * EOS: what torchtitan's dataset makes with encode(text, add_bos=True,
 * add_eos=True) (HF's post-processor template, then BOS in front and EOS at
 * the end unless the template adds them; no EOS when eos_token is bos_token's
 * text).  tiktoken files: both, when the encoding has them.  A tokenizer.json
 * whose torchtitan stream would hold more than one token before or after a
 * document is refused at load.  tok_encode itself adds neither. */
bool tok_default_add_bos(const tok *t);
bool tok_default_add_eos(const tok *t);
/* Whether HF's post-processor itself ends a single sequence with a token (then
 * tok_eos_id()): torchtitan's encode(text, add_eos=False) still ends with it.
 * Chat data (lib/chat) needs the difference; tiktoken files: false. */
bool tok_post_adds_eos(const tok *t);

/* The pad token's id (tokenizer_config.json's pad_token, else the
 * tokenizer.json's padding pad_id), or -1 when it names none.  CLIP's is
 * <|endoftext|>, 49407 (its EOS); T5's is <pad>, 0. */
int32_t tok_pad_id(const tok *t);

/* The id of a token given by its text (an added/special token's content, or a
 * vocabulary entry's raw bytes), or -1. */
int32_t tok_token_id(const tok *t, const char *s, size_t n);
/* The raw bytes of a token (ByteLevel-decoded; an added token's content) and
 * whether it is special.  NULL when id is out of range or a hole. */
const uint8_t *tok_token_bytes(const tok *t, int32_t id, size_t *len, bool *special);

/* A growable array of ids; zero-initialise it.  Functions append to it. */
typedef struct tok_ids {
	int32_t *v;
	size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *a, int32_t id, titan_err *err);
void tok_ids_free(tok_ids *a);

/* A growable byte buffer; zero-initialise it.  Functions append to it. */
typedef struct tok_buf {
	uint8_t *p;
	size_t n, cap;
} tok_buf;
int tok_buf_append(tok_buf *b, const void *p, size_t n, titan_err *err);
void tok_buf_free(tok_buf *b);

/* Per-thread encoder.  t must outlive it. */
tok_enc *tok_enc_new(const tok *t, titan_err *err);
void tok_enc_free(tok_enc *e);

/* Encode n bytes of text, appending ids to *out (no BOS/EOS: the caller adds
 * them).  Fails only when memory runs out. */
int tok_encode(tok_enc *e, const uint8_t *text, size_t n, tok_ids *out, titan_err *err);

/* A fixed-length input for a text encoder, as HF's tokenizer(text,
 * truncation=True, max_length=len, padding="max_length") makes it: what
 * torchtitan's Flux tokenizers give the CLIP (len 77) and T5
 * (max_t5_encoding_len) encoders.  The text's ids are cut from the right to
 * leave room for the post-processor's special tokens (CLIP: <|startoftext|>
 * before, <|endoftext|> after; T5: </s> after), which are then added, and the
 * rest is tok_pad_id().  Writes ids (len) and mask (len, may be NULL: 1 for a
 * token, 0 for padding; padding can be the same id as EOS, as in CLIP).
 * Returns the number of tokens before the padding, or -1 with *err set when
 * the tokenizer has no pad token or len is shorter than its special tokens. */
int64_t tok_encode_fixed(tok_enc *e, const uint8_t *text, size_t n, size_t len, int32_t *ids,
			 uint8_t *mask, titan_err *err);

/* Decode ids to bytes (ByteLevel decoder; added tokens as their content; a
 * Metaspace decoder turns its replacement into spaces, and drops it in ids[0]
 * when it prepends one, as HF does), appending to *out.  An id outside the
 * vocabulary is an error naming it. */
int tok_decode(const tok *t, const int32_t *ids, size_t n, tok_buf *out, titan_err *err);

/* Pre-tokenization alone (for BPE training and tests): the pieces the
 * tokenizer's normalizer and pre-tokenizer make of text, without added-token
 * extraction.  fn is called once per piece in order with the piece's bytes
 * (after normalization); a non-zero return stops and is returned. */
typedef int (*tok_piece_fn)(void *ctx, const uint8_t *piece, size_t n);
int tok_pieces(tok_enc *e, const uint8_t *text, size_t n, tok_piece_fn fn, void *ctx,
	       titan_err *err);

/* A standalone pre-tokenizer for one regex (BPE training without a tokenizer).
 * The regexes of the known patterns, as the references spell them: */
extern const char tok_re_llama3[]; /* Llama 3 = cl100k_base */
extern const char tok_re_qwen2[];  /* Qwen2/3: \p{N} single digits */
extern const char tok_re_gpt2[];   /* GPT-2 (ByteLevel use_regex) */
extern const char tok_re_o200k[];  /* o200k_base */

typedef struct tok_split tok_split;
/* mode: enum tok_pretok_mode.  A regex that cannot be made exact, or that
 * PCRE2 cannot compile, is an error naming the offset and the reason. */
tok_split *tok_split_new(const char *regex, int mode, titan_err *err);
void tok_split_free(tok_split *s);
/* "scanner:llama3", "scanner:qwen2", "scanner:gpt2", "scanner:o200k" or "pcre2". */
const char *tok_split_kind(const tok_split *s);
/* Split text into the regex's matches and the gaps between them (Isolated
 * behaviour), calling fn per piece; returns fn's first non-zero result, or -1
 * with *err set on a PCRE2 failure (match limit). */
int tok_split_run(const tok_split *s, const uint8_t *text, size_t n, tok_piece_fn fn,
		  void *ctx, titan_err *err);

#endif
