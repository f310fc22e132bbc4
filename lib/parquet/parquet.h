/* parquet.h: reading the columns of Apache Parquet files that the Hugging
 * Face datasets library (pyarrow) writes, such as the COCO caption sets
 * torchtitan's Flux validation loads (howard-hou/COCO-Text: an "image"
 * struct of bytes and path, a "caption" list of strings).
 *
 * What is read: the footer (FileMetaData, Thrift compact protocol), the
 * schema's leaf columns with their definition and repetition levels, and a
 * column chunk's pages: data pages v1 and v2 and dictionary pages; values
 * PLAIN or dictionary-encoded (PLAIN_DICTIONARY, RLE_DICTIONARY); levels in
 * the RLE/bit-packed hybrid; pages uncompressed or in SNAPPY, GZIP or ZSTD;
 * physical types BYTE_ARRAY, INT32 and INT64 (the integers given as decimal
 * text).  Anything else (other encodings, codecs or types, encrypted files)
 * is refused with a message naming the file, the column and what it is.
 *
 * A row's value is its column's first leaf value: a plain column's value, a
 * struct field's ("image.bytes"), a list's first element
 * ("caption.list.element": COCO's first caption, as flux_datasets takes
 * prompt[0]); absent when null or an empty list.
 *
 * Hostile files: every offset, length, count and level is checked against
 * the file and the footer before it is used; a page may not claim more than
 * PQ_MAX_PAGE bytes, nor a footer more than PQ_MAX_FOOTER; Thrift nesting is
 * bounded.  The file is mapped read-only. */
#ifndef TITAN_PARQUET_H
#define TITAN_PARQUET_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define PQ_MAX_PAGE (256u << 20)
#define PQ_MAX_FOOTER (64u << 20)

typedef struct pq_file pq_file;

pq_file *pq_open(const char *path, titan_err *err);
/* The same over a buffer the caller keeps alive until pq_close (fuzzing). */
pq_file *pq_open_memory(const uint8_t *buf, size_t size, const char *name, titan_err *err);
void pq_close(pq_file *f);

int64_t pq_num_rows(const pq_file *f);
int pq_num_row_groups(const pq_file *f);
int64_t pq_row_group_rows(const pq_file *f, int rg);
/* The leaf column whose dotted path is path ("image.bytes"), or -1. */
int pq_column(const pq_file *f, const char *path);

/* A row group's values of one column, a value per row. */
typedef struct pq_values {
	int64_t n;             /* rows */
	uint8_t *buf;          /* the values back to back (owned) */
	size_t *off, *len;     /* row i's bytes: buf[off[i] .. off[i] + len[i]) */
	uint8_t *present;      /* 0: null or an empty list */
} pq_values;

int pq_read(pq_file *f, int rg, int col, pq_values *out, titan_err *err);
void pq_values_free(pq_values *v);

#endif
