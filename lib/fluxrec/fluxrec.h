/* fluxrec.h: Flux training inputs on disk, the records titan-encode writes
 * and titan-shard shards (titan-formats(5), FLUX RECORDS).
 *
 * One record is one image-caption sample as torchtitan 0.3.0's Flux trainer
 * consumes it after preprocess_data: the caption's T5 and CLIP ids, the T5
 * encoder's last_hidden_state (t5_len, t5_dim), CLIP's pooler_output
 * (clip_dim), and the image as the autoencoder's posterior moments
 * (2 z_channels, n/8, n/8: mean then logvar, for the trainer to sample
 * mean + exp(logvar / 2) * eps every step, as torchtitan does) and/or as the
 * cropped RGB planes (3, n, n) uint8 (torchtitan's image tensor is
 * x / 255 * 2 - 1 of them).  Which of the two a stream holds is in its header.
 *
 * A stream is a header, fixed-size records, and a trailer:
 *
 *   header   "TTFR", version, header_len; the shapes and dtypes; the crop
 *            rule; the encoders' identities (SHA-256 of their weight files,
 *            the tokenizers' fingerprints); and the empty string's ids and
 *            encodings, which prompt dropout substitutes (flux_datasets.py:
 *            a dropped prompt is the encoder's encoding of ""); CRC-32C
 *   records  "FREC", the sample's index, image size, crop offset, key; the
 *            arrays; CRC-32C of the record
 *   trailer  "FEND", the record count, the CRC-32C of all records' bytes;
 *            CRC-32C of the trailer
 *
 * A stream may be several such segments with byte-identical headers back to
 * back (`cat a.ttfr b.ttfr`).  A stream without its trailer is truncated and
 * refused: a killed writer never looks complete.  A shard file is a stream of
 * one segment, so record i lies at header_len + i * record_bytes.
 *
 * Integers are little-endian; the arrays (ids, float32, bfloat16) are stored
 * in the host's order, which is little-endian on every machine titan builds
 * for.  Reader and writer work on a FILE* the caller owns; they never seek. */
#ifndef TITAN_FLUXREC_H
#define TITAN_FLUXREC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

#define FLUXREC_MAGIC "TTFR"
#define FLUXREC_VERSION 1u
#define FLUXREC_FIXED_HEADER 264u  /* the header's fields before the empty encodings */
#define FLUXREC_MAX_HEADER (1u << 30)
#define FLUXREC_TRAILER_LEN 24u
#define FLUXREC_KEY_BYTES 256u     /* a key of up to 255 bytes and its NUL */
#define FLUXREC_RECORD_FIXED 40u   /* the record's fields before the key */
#define FLUXREC_MAX_RECORD (1ull << 34)

enum {
	FLUXREC_PIXELS = 1u << 0,      /* records carry the (3, n, n) uint8 RGB crop */
	FLUXREC_MOMENTS = 1u << 1,     /* records carry the autoencoder's moments */
	FLUXREC_CROP_RANDOM = 1u << 2, /* crop offsets drawn from the seed; else centred */
};

enum { FLUXREC_F32 = 0, FLUXREC_BF16 = 1 };

typedef struct fluxrec_header {
	uint32_t flags;
	uint32_t dtype;          /* FLUXREC_F32 / _BF16: states, pooled, moments */
	uint32_t model_dtype;    /* the encoders' numerics: FLUXREC_F32 / _BF16 */
	uint32_t image_size;     /* n: images are n x n */
	uint32_t key_bytes;      /* FLUXREC_KEY_BYTES */
	uint32_t t5_len, t5_dim, t5_vocab;
	uint32_t clip_len, clip_dim, clip_vocab;
	uint32_t latent_channels, latent_height, latent_width; /* 0 without moments */
	uint64_t seed;           /* the crop offsets' (FLUXREC_CROP_RANDOM) */
	float ae_scale, ae_shift; /* the autoencoder's scale_factor, shift_factor; 0 without */
	uint8_t t5_weights[32], clip_weights[32], ae_weights[32]; /* fluxrec_weights_sha256 */
	uint8_t t5_tokenizer[32], clip_tokenizer[32];             /* tok_fingerprint */
	uint32_t empty_t5_tokens, empty_clip_tokens; /* the empty string's, before padding */
	/* The empty string's encodings (owned; fluxrec_header_free): ids
	 * (t5_len) and (clip_len), states (t5_len, t5_dim) and pooled (clip_dim)
	 * in dtype. */
	int32_t *empty_t5_ids, *empty_clip_ids;
	void *empty_t5, *empty_clip;
	/* Derived by fluxrec_header_layout (and the decoder). */
	uint64_t header_len, record_bytes;
} fluxrec_header;

/* Where each field of a record lies (bytes from its start); 0 for a field the
 * stream does not carry. */
typedef struct fluxrec_layout {
	uint64_t key, t5_ids, clip_ids, t5, clip, moments, pixels, crc;
	uint64_t t5_bytes, clip_bytes, moments_bytes, pixels_bytes, elem;
} fluxrec_layout;

/* Bytes per element of a dtype. */
size_t fluxrec_dtype_size(uint32_t dtype);
/* Check the header's shapes, compute header_len and record_bytes; then
 * allocate the empty encodings (zeroed) unless they are there. */
int fluxrec_header_layout(fluxrec_header *h, titan_err *err);
void fluxrec_layout_of(const fluxrec_header *h, fluxrec_layout *l);
void fluxrec_header_free(fluxrec_header *h);

/* The header's bytes (h->header_len of them, CRC included) into out. */
void fluxrec_header_encode(const fluxrec_header *h, uint8_t *out);
/* Decode and check header bytes (len = their header_len field, which the
 * caller read from bytes 8..11); *h owns its empty encodings afterwards. */
int fluxrec_header_decode(const uint8_t *in, size_t len, fluxrec_header *h, const char *name,
			  titan_err *err);

/* ---- one record */

typedef struct fluxrec_view {
	uint64_t index;
	uint32_t width, height, crop_offset, t5_tokens, clip_tokens;
	const char *key;          /* NUL-terminated inside the record */
	const int32_t *t5_ids, *clip_ids;
	const void *t5, *clip;    /* in the header's dtype */
	const void *moments;      /* NULL without FLUXREC_MOMENTS */
	const uint8_t *pixels;    /* NULL without FLUXREC_PIXELS */
} fluxrec_view;

/* Zero rec (record_bytes) and fill its tag, index and key; the key must be
 * shorter than key_bytes (an error naming it otherwise).  The caller then sets
 * the image's geometry and the token counts, writes the arrays at their
 * layout offsets and seals the record. */
int fluxrec_record_init(const fluxrec_header *h, uint8_t *rec, uint64_t index, const char *key,
			titan_err *err);
/* The decoded image's size and the crop offset along its long side. */
void fluxrec_record_set_image(uint8_t *rec, uint32_t width, uint32_t height,
			      uint32_t crop_offset);
void fluxrec_record_set_tokens(uint8_t *rec, uint32_t t5_tokens, uint32_t clip_tokens);
/* Write the record's CRC. */
void fluxrec_record_seal(const fluxrec_header *h, uint8_t *rec);
/* Check a record (tag, CRC, key, token counts, every id below its
 * vocabulary) and point *v into it.  name names the record in messages. */
int fluxrec_record_view(const fluxrec_header *h, const uint8_t *rec, fluxrec_view *v,
			const char *name, titan_err *err);

/* ---- streams */

typedef struct fluxrec_writer fluxrec_writer;

/* Write the header to fp (not owned). */
fluxrec_writer *fluxrec_writer_open(FILE *fp, const fluxrec_header *h, titan_err *err);
/* Append one sealed record (record_bytes). */
int fluxrec_write(fluxrec_writer *w, const uint8_t *rec, titan_err *err);
uint64_t fluxrec_writer_records(const fluxrec_writer *w);
/* CRC-32C of the records written so far (what the trailer will hold). */
uint32_t fluxrec_writer_crc(const fluxrec_writer *w);
/* Write the trailer, flush, free w (also on failure). */
int fluxrec_writer_close(fluxrec_writer *w, titan_err *err);
/* Free w without a trailer: what is written reads as truncated. */
void fluxrec_writer_abort(fluxrec_writer *w);

typedef struct fluxrec_reader fluxrec_reader;

/* Read and check the first header.  name is copied for messages. */
fluxrec_reader *fluxrec_reader_open(FILE *fp, const char *name, titan_err *err);
const fluxrec_header *fluxrec_reader_header(const fluxrec_reader *r);
/* The header as stored (header_len bytes). */
const uint8_t *fluxrec_reader_header_bytes(const fluxrec_reader *r);
/* Next record: 1 with *rec (record_bytes, checked by fluxrec_record_view,
 * valid until the next call), 0 at a clean end, -1 on error (truncated,
 * a bad CRC, a count that disagrees with a trailer, a later header that
 * differs from the first). */
int fluxrec_read(fluxrec_reader *r, const uint8_t **rec, titan_err *err);
uint64_t fluxrec_reader_records(const fluxrec_reader *r);
/* CRC-32C over every record returned so far (across segments). */
uint32_t fluxrec_reader_crc(const fluxrec_reader *r);
uint64_t fluxrec_reader_offset(const fluxrec_reader *r);
void fluxrec_reader_close(fluxrec_reader *r);

/* ---- identities */

/* What names an encoder's weights: the SHA-256 of, for each file of path in
 * name order (path itself when it is a file; a folder's config.json and
 * *.safetensors files), the file's name, a NUL, and its 32-byte SHA-256. */
int fluxrec_weights_sha256(const char *path, uint8_t out[32], titan_err *err);

/* ---- shards: a folder of one-segment streams and a manifest.json
 *
 * titan-shard's side (titan-formats(5), FLUX RECORD SHARDS): records in input
 * order, a validation split chosen by the record's position alone (as token
 * shards choose documents), shards closed at shard_records, each written to a
 * temporary name, fsynced and renamed, the manifest rewritten after each.  An
 * interrupted run resumes as token shards do: the input prefix the manifest
 * accounts for is read again, checked against its CRC and passed over. */

#define FLUXREC_SHARD_BYTES (1ull << 30) /* the default shard size: 1 GiB of records */

typedef struct fluxrec_shard_opts {
	const char *out;
	uint64_t shard_records;  /* 0: as many as fit FLUXREC_SHARD_BYTES (at least 1) */
	double val_fraction;
	uint64_t val_records;    /* the first N records go to val */
	int progress;            /* a line on stderr now and then */
} fluxrec_shard_opts;

typedef struct fluxrec_shard_stats {
	uint64_t records, bytes_out, skipped;
	int resumed;
} fluxrec_shard_stats;

int fluxrec_shard_build(fluxrec_reader *in, const fluxrec_shard_opts *o,
			fluxrec_shard_stats *st, titan_err *err);
/* Whether dir's manifest.json is a record shard folder's. */
int fluxrec_dir_is(const char *dir);
/* The shard files of one split of a complete folder (which 0 train, 1
 * val), in record order: *paths (n of them, each and the array malloc'd;
 * fluxrec_paths_free) joined onto dir.  An empty split is n 0. */
int fluxrec_dir_files(const char *dir, int which, char ***paths, int *n, titan_err *err);
void fluxrec_paths_free(char **paths, int n);
/* Every listed shard against the manifest and itself; unlisted .rec files are
 * reported through warn (may be NULL). */
int fluxrec_verify_dir(const char *dir, void (*warn)(const char *msg), titan_err *err);
/* One shard file read through: header, every record, the trailer. */
int fluxrec_verify_file(const char *path, titan_err *err);
/* The folder's records back as one stream on out, in input order (which -1),
 * or one split (0 train, 1 val); a file's as it is. */
int fluxrec_cat_dir(const char *dir, int which, FILE *out, titan_err *err);
int fluxrec_cat_file(const char *path, FILE *out, titan_err *err);
/* A human summary (json 0) or the manifest / the header as JSON on out. */
int fluxrec_info(const char *path, int is_dir, int json, FILE *out, titan_err *err);

/* ---- reading a shard in place (the loader's side) */

typedef struct fluxrec_file fluxrec_file;

/* Map a shard file and check its header, length and trailer (not the
 * records' CRCs: fluxrec_file_record does, per record). */
fluxrec_file *fluxrec_file_open(const char *path, titan_err *err);
void fluxrec_file_close(fluxrec_file *f);
const fluxrec_header *fluxrec_file_header(const fluxrec_file *f);
uint64_t fluxrec_file_records(const fluxrec_file *f);
/* Record i, checked; 0 or -1. */
int fluxrec_file_record(const fluxrec_file *f, uint64_t i, fluxrec_view *v, titan_err *err);

#endif
