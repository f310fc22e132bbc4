/* textin.h: documents out of text corpora, whatever the wrapping.
 *
 * A textin reads one input (a file, or "-" for stdin) and hands back its
 * documents one at a time, in order.  Compression and containers are detected
 * from the bytes, never from the name, through libarchive: gzip, zstd, xz,
 * bzip2, lz4 (and anything else libarchive's filters know), plain or inside tar
 * and zip archives whose members may themselves be compressed.
 *
 * Formats:
 *   TEXTIN_JSONL   one JSON object per line; the document is the string value
 *                  of one field ("text" by default, as in C4).  Blank lines
 *                  (only spaces, tabs, CR) are skipped.
 *   TEXTIN_TEXT    plain UTF-8 text, split by textin_split:
 *                  TEXTIN_SPLIT_FILE  the whole file (or archive member);
 *                  TEXTIN_SPLIT_BLANK blocks separated by blank lines (the
 *                                     newline ending a block's last line is
 *                                     not part of the document);
 *                  TEXTIN_SPLIT_LINE  every non-blank line (without "\n").
 *
 * JSON strings are decoded exactly (RFC 8259): \uXXXX escapes with surrogate
 * pairs joined; a lone surrogate escape becomes U+FFFD (what tiktoken does
 * with such a Python str); \u0000 becomes a NUL byte in the document.  A
 * line that is not valid JSON, not valid UTF-8, not an object, or lacks the
 * field as a string is malformed; so is invalid UTF-8 in plain text.
 * Malformed input fails with "NAME:LINE: reason" (NAME is "file" or
 * "file:member" inside an archive) unless skip_bad is set, in which case the
 * line (or text document) is counted and skipped.  Damaged or truncated
 * compressed input is always an error.  No length limits: a line or document
 * of any size is read whole. */
#ifndef TITAN_TEXTIN_H
#define TITAN_TEXTIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

enum textin_format { TEXTIN_JSONL = 0, TEXTIN_TEXT = 1 };
enum textin_split { TEXTIN_SPLIT_FILE = 0, TEXTIN_SPLIT_BLANK = 1, TEXTIN_SPLIT_LINE = 2 };

typedef struct textin_opts {
	int format;        /* enum textin_format */
	int split;         /* enum textin_split, for TEXTIN_TEXT */
	const char *field; /* JSONL field, default "text" when NULL */
	int skip_bad;      /* count and skip malformed lines instead of failing */
} textin_opts;

typedef struct textin textin;

/* Open path ("-" = stdin).  Returns NULL and fills err on failure. */
textin *textin_open(const char *path, const textin_opts *opts, titan_err *err);

/* Next document: 1 and (*doc, *len) valid until the next call, 0 at the end,
 * -1 on error (message "NAME:LINE: reason").  *doc is NUL-terminated. */
int textin_next(textin *t, const char **doc, size_t *len, titan_err *err);

/* Where the last document came from: "file" or "file:member", and its first
 * line (1-based). */
const char *textin_where(const textin *t);
uint64_t textin_line(const textin *t);

/* Malformed lines / documents skipped so far (skip_bad), bytes read after
 * decompression. */
uint64_t textin_skipped(const textin *t);
uint64_t textin_bytes(const textin *t);

void textin_close(textin *t);

/* A growable byte buffer (owned; free with free(b->p)). */
typedef struct textin_buf {
	char *p;
	size_t n, cap;
} textin_buf;

/* Append n bytes, keeping the buffer NUL-terminated.  -1 out of memory. */
int textin_buf_append(textin_buf *b, const void *s, size_t n);

/* Decode one JSON Lines line (without its "\n"): the string value of field
 * into out (replacing its contents, NUL-terminated).  0 ok, -1 malformed with
 * the reason in err (no file name, no line). */
int textin_json_field(const char *line, size_t n, const char *field,
		      textin_buf *out, titan_err *err);

/* Whether s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
 * On failure *bad is the offset of the first invalid byte. */
int textin_utf8_valid(const char *s, size_t n, size_t *bad);

/* Append s as a JSON string (quotes included) to b: '"', '\\' and control
 * characters escaped, other bytes as they are; invalid UTF-8 sequences become
 * U+FFFD.  0 ok, -1 out of memory. */
int textin_json_quote(textin_buf *b, const char *s, size_t n);

#endif
