/* tokstream.h: the token stream between titan-tokenize and titan-shard.
 *
 * Specified in titan-formats(5), TOKEN STREAM.  A stream is one or more
 * segments back to back (so `cat a.tts b.tts` is a stream when they agree):
 *
 *   header (68 bytes)  "TTOK", version 1, header_len 68, id_width (2|4),
 *                      vocab_size, bos_id, eos_id (i32, -1 none), flags,
 *                      fingerprint[32] (SHA-256 naming the tokenizer),
 *                      header_crc = CRC32C of the header_len - 4 bytes before it
 *                      (the fields before the CRC take 64 bytes, so the header
 *                      is 68; a reader accepts longer headers from later
 *                      versions of this layout and skips what it does not know)
 *   documents          n u32 (0..0xFFFFFFFE), then n ids of id_width bytes;
 *                      in a masked stream (version 2, flag MASK) then the
 *                      label mask: ceil(n / 8) bytes, bit i (LSB first) set
 *                      when token i is a training target (chat data: the
 *                      assistant's reply), the pad bits 0
 *   trailer (28 bytes) 0xFFFFFFFF, n_docs u64, n_tokens u64,
 *                      data_crc u32 (CRC32C of the segment's document records),
 *                      trailer_crc u32 (CRC32C of the 24 bytes before it)
 *
 * All integers little-endian.  The writer and reader work on a FILE* the caller
 * opened and closes; they buffer through stdio and never seek, so pipes work. */
#ifndef TITAN_TOKSTREAM_H
#define TITAN_TOKSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

#define TOKSTREAM_MAGIC "TTOK"
#define TOKSTREAM_VERSION 1u           /* without label masks */
#define TOKSTREAM_VERSION_MASK 2u      /* with them: version-1 readers refuse it */
#define TOKSTREAM_HEADER_LEN 68u      /* what the writer writes */
#define TOKSTREAM_HEADER_MAX 4096u     /* longest header a reader accepts */
#define TOKSTREAM_TRAILER_LEN 28u
#define TOKSTREAM_END 0xFFFFFFFFu       /* document length that starts the trailer */
#define TOKSTREAM_MAX_DOC 0xFFFFFFFEu   /* longest document, in tokens */

enum {
	TOKSTREAM_FLAG_BOS = 1u << 0, /* every document starts with bos_id */
	TOKSTREAM_FLAG_EOS = 1u << 1, /* every document ends with eos_id */
	TOKSTREAM_FLAG_MASK = 1u << 2, /* documents carry label masks (version 2) */
};

typedef struct tokstream_header {
	uint32_t id_width;       /* 2 when vocab_size <= 65536, else 4 */
	uint32_t vocab_size;     /* every id is < vocab_size */
	int32_t bos_id, eos_id;  /* -1: none */
	uint32_t flags;          /* TOKSTREAM_FLAG_* */
	uint8_t fingerprint[32]; /* SHA-256 identifying the tokenizer */
} tokstream_header;

/* The id width a vocabulary needs: 2 up to 65536 ids, else 4. */
uint32_t tokstream_id_width(uint32_t vocab_size);

/* Encode the TOKSTREAM_HEADER_LEN-byte header. */
void tokstream_header_encode(const tokstream_header *h, uint8_t out[TOKSTREAM_HEADER_LEN]);
/* Check and decode a header of len bytes (len = its header_len field, which the
 * caller read from bytes 8..11): magic, version, width, vocab, CRC.  name is
 * used in messages. */
int tokstream_header_decode(const uint8_t *in, size_t len, tokstream_header *h,
			    const char *name, titan_err *err);
/* Whether two headers describe the same vocabulary (width, size, fingerprint). */
int tokstream_header_same_vocab(const tokstream_header *a, const tokstream_header *b);

typedef struct tokstream_writer tokstream_writer;

/* Write the segment header to fp.  The writer does not own fp. */
tokstream_writer *tokstream_writer_open(FILE *fp, const tokstream_header *h, titan_err *err);
/* Append one document; ids must be < vocab_size, n <= TOKSTREAM_MAX_DOC.  A
 * masked stream needs tokstream_write_doc_masked. */
int tokstream_write_doc(tokstream_writer *w, const uint32_t *ids, size_t n, titan_err *err);
/* The same with its label mask: mask[i] != 0 when token i is a target.  The
 * stream must be masked (flag MASK); mask NULL is allowed only when it is not. */
int tokstream_write_doc_masked(tokstream_writer *w, const uint32_t *ids, const uint8_t *mask,
			       size_t n, titan_err *err);
/* Write the trailer, fflush fp and free w (also on failure).  fp stays open. */
int tokstream_writer_close(tokstream_writer *w, titan_err *err);
/* Free w without writing a trailer (the stream then reads as truncated). */
void tokstream_writer_abort(tokstream_writer *w);

typedef struct tokstream_reader tokstream_reader;

/* Read and check the first segment header.  name is kept (copied) for messages.
 * The reader does not own fp. */
tokstream_reader *tokstream_reader_open(FILE *fp, const char *name, titan_err *err);
/* Accept later segments whose vocabulary differs from the first (default: error
 * "vocab mismatch between inputs"). */
void tokstream_reader_accept_mismatch(tokstream_reader *r, int accept);
/* Next document: 1 with *ids / *n set (ids valid until the next call, owned by
 * r), 0 at a clean end of stream, -1 on error (truncated, bad CRC, id out of
 * range, vocab mismatch). */
int tokstream_read_doc(tokstream_reader *r, const uint32_t **ids, size_t *n, titan_err *err);
/* The label mask of the document tokstream_read_doc returned last: one byte
 * per token (1 target, 0 not), owned by r, valid until the next call; NULL
 * when the stream is not masked.  Every segment of a stream is masked or none
 * is. */
const uint8_t *tokstream_read_mask(const tokstream_reader *r);
/* Header of the segment being read (the first one before any document). */
const tokstream_header *tokstream_reader_header(const tokstream_reader *r);
/* Documents / tokens returned so far, over all segments. */
uint64_t tokstream_reader_docs(const tokstream_reader *r);
uint64_t tokstream_reader_tokens(const tokstream_reader *r);
/* CRC-32C of every document record returned so far, over all segments (the
 * bytes a segment's data_crc covers, chained across segments). */
uint32_t tokstream_reader_crc(const tokstream_reader *r);
/* Bytes consumed from fp so far. */
uint64_t tokstream_reader_offset(const tokstream_reader *r);
void tokstream_reader_close(tokstream_reader *r);

#endif
