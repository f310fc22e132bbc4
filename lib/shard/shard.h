/* shard.h: token shards, the files titan-shard writes and the loader reads.
 *
 * Specified in titan-formats(5), TOKEN SHARDS.  A shard file is
 *
 *   header (128 bytes)  "TTSH", version, counts, offsets, CRCs, tokenizer
 *   data                n_tokens ids of id_width bytes (u16 / u32 LE), or with
 *                       SHARD_ZSTD a zstd seekable-format stream of them: frames
 *                       of frame_tokens ids each, then the seek table
 *   document index      n_docs u64: the token offset where each document starts
 *   label mask          (version 2 only) ceil(n_tokens / 8) bytes, bit t (LSB
 *                       first) set when token t is a training target
 *
 * Version 1 (128-byte header) is every shard without label masks, as before;
 * version 2 (SHARD_HEADER_LEN_MASK bytes: v1's fields, then the mask's offset,
 * size and CRC) is written only for chat data (titan-tokenize --chat).  Both
 * are read.
 * A shard holds whole documents.  A folder of shards has a manifest.json that
 * lists the complete shards with their counts and CRCs; files not listed there
 * are not part of the data set.  Uncompressed shards are mmap'd, so reading a
 * window costs a copy; compressed ones decompress one frame at a time. */
#ifndef TITAN_SHARD_H
#define TITAN_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "tokstream/tokstream.h"

#define SHARD_MAGIC "TTSH"
#define SHARD_VERSION 1u
#define SHARD_VERSION_MASK 2u      /* shards with a label mask */
#define SHARD_HEADER_LEN 128u
#define SHARD_HEADER_LEN_MASK 160u
#define SHARD_DEFAULT_TOKENS 100000000ull /* like llm.c's and Megatron's ~100M */
#define SHARD_DEFAULT_FRAME_TOKENS 16384u /* 4x faster random windows than 64K, ~4% larger */

enum {
	SHARD_ZSTD = 1u << 0,      /* data is a zstd seekable stream */
	SHARD_DOC_BOS = 1u << 8,   /* token stream flag BOS, carried over */
	SHARD_DOC_EOS = 1u << 9,   /* token stream flag EOS, carried over */
	SHARD_MASK = 1u << 10,     /* a label mask follows the index (version 2) */
};

typedef struct shard_header {
	uint32_t id_width, vocab_size, flags;
	uint64_t n_tokens, n_docs;
	uint64_t data_offset, data_bytes;   /* data as stored */
	uint64_t index_offset, index_bytes; /* index_bytes = 8 * n_docs */
	uint32_t frame_tokens;              /* 0 when uncompressed */
	uint32_t data_crc, index_crc, header_crc;
	int32_t bos_id, eos_id;
	uint8_t fingerprint[32];
	uint32_t version, header_len;       /* 1 and 128, or 2 and 160 (SHARD_MASK) */
	uint64_t mask_offset, mask_bytes;   /* version 2: the label mask */
	uint32_t mask_crc;
} shard_header;

/* ---- writing one shard */

typedef struct shard_writer shard_writer;

typedef struct shard_write_opts {
	const tokstream_header *stream; /* vocabulary, specials, fingerprint */
	int zstd_level;                 /* 0: uncompressed; else zstd level (1..19) */
	uint32_t frame_tokens;          /* tokens per zstd frame; 0: default */
} shard_write_opts;

/* Start writing path atomically (a temporary name until shard_writer_commit). */
shard_writer *shard_writer_open(const char *path, const shard_write_opts *o, titan_err *err);
int shard_writer_add_doc(shard_writer *w, const uint32_t *ids, size_t n, titan_err *err);
/* The same with its label mask (mask[i] != 0: token i is a target); the
 * stream the writer was opened with must be masked (TOKSTREAM_FLAG_MASK), and
 * then every document needs one. */
int shard_writer_add_doc_masked(shard_writer *w, const uint32_t *ids, const uint8_t *mask,
				size_t n, titan_err *err);
uint64_t shard_writer_tokens(const shard_writer *w);
uint64_t shard_writer_docs(const shard_writer *w);
/* Finish the file, fsync, rename into place; *out gets the header written.
 * Frees w, also on failure (the temporary file is then removed). */
int shard_writer_commit(shard_writer *w, shard_header *out, titan_err *err);
/* Remove the temporary file and free w. */
void shard_writer_abort(shard_writer *w);

/* ---- reading one shard */

typedef struct shard_file shard_file;

/* Map path and check its header (magic, version, CRC, sizes, file length).
 * Data and index CRCs are checked by shard_file_verify, not here. */
shard_file *shard_file_open(const char *path, titan_err *err);
void shard_file_close(shard_file *f);
const shard_header *shard_file_header(const shard_file *f);
const char *shard_file_path(const shard_file *f);
/* Copy tokens [start, start + n) into out (widened to u32).  A compressed
 * shard decompresses through a decoder of its own, made on first use: one
 * thread at a time per shard_file. */
int shard_file_tokens(shard_file *f, uint64_t start, size_t n, uint32_t *out, titan_err *err);

/* A zstd decoder with a one-frame cache, to share between many shard files
 * (a loader reading thousands of shards needs one, not one per shard).  One
 * thread at a time per decoder.  Uncompressed shards ignore it (may be NULL). */
typedef struct shard_dec shard_dec;
shard_dec *shard_dec_new(void);
void shard_dec_free(shard_dec *d);
int shard_file_read(shard_file *f, shard_dec *d, uint64_t start, size_t n, uint32_t *out,
		    titan_err *err);
/* The label mask of tokens [start, start + n): out[i] = 1 when token start + i
 * is a training target; all 1 in a shard without a mask. */
int shard_file_mask(const shard_file *f, uint64_t start, size_t n, uint8_t *out, titan_err *err);
/* Start of document d (0 <= d < n_docs); end of the last one is n_tokens. */
uint64_t shard_file_doc_start(const shard_file *f, uint64_t d);
/* Index of the document holding token t (the last start <= t). */
uint64_t shard_file_doc_of(const shard_file *f, uint64_t t);
/* Check the data, index (and label mask) CRCs, the index's order and range, and that every
 * id is below the header's vocab_size: titan-shard verify's reading of a
 * shard, which the loader does once per shard before its first tokens are
 * used.  Reads the whole shard (decompressing it through a decoder of its
 * own, freed before it returns). */
int shard_file_verify(shard_file *f, titan_err *err);

/* ---- folders: manifest.json */

typedef struct shard_entry {
	char file[64];          /* "train-000000.bin", relative to the folder */
	uint64_t tokens, docs, bytes;
	uint32_t header_crc, data_crc, index_crc;
	uint64_t first_doc;     /* input document index of its first document */
} shard_entry;

typedef struct shard_split {
	shard_entry *shards;
	size_t n_shards;
	uint64_t tokens, docs;  /* sums over the listed shards */
	uint64_t next_doc;      /* input documents before this index that belong to
				   the split are all in listed shards */
} shard_split;

enum { SHARD_TRAIN = 0, SHARD_VAL = 1 };

typedef struct shard_manifest {
	tokstream_header stream;    /* of the input */
	uint64_t shard_tokens;      /* target tokens per shard */
	int zstd_level;             /* 0: none */
	uint32_t frame_tokens;
	double val_fraction;        /* used when val_docs == 0 */
	uint64_t val_docs;          /* first N documents go to val */
	int complete;               /* the input ended and every shard is listed */
	uint64_t input_docs, input_tokens; /* input prefix covered by this manifest */
	uint32_t input_crc;         /* CRC-32C of that prefix's document records */
	shard_split split[2];       /* SHARD_TRAIN, SHARD_VAL */
} shard_manifest;

/* Which split input document i goes to (SHARD_TRAIN or SHARD_VAL): with
 * val_docs the first val_docs documents, else evenly spaced so that exactly
 * floor(n * val_fraction) of the first n documents are val for every n. */
int shard_split_of(const shard_manifest *m, uint64_t i);

int shard_manifest_read(const char *dir, shard_manifest *m, titan_err *err);
/* The same from text (name is used in messages). */
int shard_manifest_parse(const char *text, size_t len, const char *name, shard_manifest *m,
			 titan_err *err);
int shard_manifest_write(const char *dir, const shard_manifest *m, titan_err *err);
void shard_manifest_free(shard_manifest *m);
/* Append a committed shard to split s. */
int shard_manifest_add(shard_manifest *m, int s, const shard_entry *e, titan_err *err);
/* A listed shard's header against its manifest entry and the manifest's
 * vocabulary (counts, size, the three CRCs, vocab_size, tokenizer), as
 * titan-shard verify checks it before reading the data. */
int shard_entry_check(const shard_file *f, const shard_manifest *m, const shard_entry *e,
		      titan_err *err);

/* ---- mixtures: a folder whose manifest.json names shard folders and weights
 *
 * titan-shard mix writes it (titan-formats(5), MIXTURES); the loader reads
 * each source's windows in its own order and draws, window by window, which
 * source the next one comes from (torchtitan 0.3.0's InterleavedDataset). A
 * source is named by its path and by the SHA-256 of its manifest.json, so a
 * source rebuilt or changed after mixing is refused, not silently mixed. */

#define SHARD_MIX_DEFAULT_SEED 42 /* 0.3.0's dataloader.seed */

typedef struct shard_mix_source {
	char *path;            /* as written: relative to the mixture folder, or absolute */
	char *dir;             /* the folder: path resolved against the mixture's (owned) */
	double weight;         /* >= 0; the weights' sum is positive */
	char manifest_sha256[65]; /* hex, of the source's manifest.json when mixed */
	uint64_t tokens, docs; /* its train split's, when mixed */
} shard_mix_source;

typedef struct shard_mix {
	uint64_t seed;         /* the draws' seed (below 2^63) */
	size_t n;
	shard_mix_source *src; /* n, owned */
	uint8_t fingerprint[32]; /* the sources' tokenizer */
	uint32_t vocab_size;
} shard_mix;

/* Whether dir's manifest.json is a mixture's (1), a shard folder's or
 * missing (0). */
int shard_dir_is_mix(const char *dir);
/* Read dir's mixture manifest. */
int shard_mix_read(const char *dir, shard_mix *m, titan_err *err);
void shard_mix_free(shard_mix *m);
/* Source i's manifest, refused when its SHA-256 is no longer the one the
 * mixture names (the caller frees *sm). */
int shard_mix_source_manifest(const shard_mix *m, size_t i, shard_manifest *sm, titan_err *err);
/* Write a mixture of the n complete shard folders sources[] with weights[]
 * into folder out (created if missing; a mixture there is replaced, a shard
 * folder refused).  Refuses a missing or incomplete source, a mixture as a
 * source, one named twice, sources of different tokenizers, a weight that is
 * negative or not finite, and weights that sum to 0. */
int shard_mix_write(const char *out, char *const *sources, const double *weights, size_t n,
		    uint64_t seed, titan_err *err);
/* Check every source against the mixture (manifest SHA-256) and verify it
 * as shard_verify_dir does. */
int shard_mix_verify(const char *dir, void (*warn)(const char *msg), titan_err *err);

/* ---- the jobs behind titan-shard's commands */

typedef struct shard_build_opts {
	const char *out;          /* folder */
	uint64_t shard_tokens;    /* 0: SHARD_DEFAULT_TOKENS */
	double val_fraction;
	uint64_t val_docs;
	int zstd_level;
	uint32_t frame_tokens;
	int progress;             /* report on stderr */
} shard_build_opts;

typedef struct shard_build_stats {
	uint64_t docs, tokens, bytes_in, bytes_out, skipped_docs;
	int resumed;
} shard_build_stats;

/* Read the token stream (one reader over all inputs) into opts->out.  When the
 * folder holds an incomplete manifest made with the same options, the input
 * prefix it covers is read again, checked against its CRC and skipped, and the
 * job continues; any difference is an error and nothing is changed. */
int shard_build(tokstream_reader *in, const shard_build_opts *o, shard_build_stats *st,
		titan_err *err);

/* Check every listed shard against the manifest and itself; unlisted shard
 * files are reported through warn (may be NULL).  Returns -1 at the first
 * problem. */
int shard_verify_dir(const char *dir, void (*warn)(const char *msg), titan_err *err);

/* Write the folder's documents back as one token stream, in input order
 * (which = -1), or only one split (SHARD_TRAIN / SHARD_VAL). */
int shard_cat_dir(const char *dir, int which, FILE *out, titan_err *err);
/* Write one shard file's documents as a token stream. */
int shard_cat_file(const char *path, FILE *out, titan_err *err);

#endif
