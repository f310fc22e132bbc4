/* ptzip.h: torch.save files (the zip container PyTorch has written since 1.6)
 * and the element types titan's checkpoint code shares.
 *
 * A torch.save stream is an uncompressed zip whose entries live under one root
 * folder ("archive" for a stream, the file's base name for a file):
 *   ROOT/data.pkl                pickle (protocol 2) of the saved object; tensors
 *                                are torch._utils._rebuild_tensor_v2 calls whose
 *                                storages are persistent ids ("storage", torch.XStorage,
 *                                KEY, "cpu", numel)
 *   ROOT/.format_version         "1"
 *   ROOT/.storage_alignment      "64"
 *   ROOT/byteorder               "little"
 *   ROOT/data/KEY                raw little-endian storage bytes
 *   ROOT/version                 "3\n"
 *   ROOT/.data/serialization_id  40 decimal digits
 * Every entry's data starts on a 64-byte boundary (relative to the start of the
 * zip), padded by a local-header extra field "FB" filled with 'Z'; entries have
 * data descriptors (flag bit 3) and zip64 records end the archive, as PyTorch's
 * writer (miniz) makes them.  See titan-formats(5), CHECKPOINTS. */
#ifndef TITAN_PTZIP_H
#define TITAN_PTZIP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "pickle/pickle.h"

/* Element types of checkpoint tensors.  0 is "none". */
typedef enum ptz_dtype {
	PTZ_NONE = 0,
	PTZ_F32, PTZ_BF16, PTZ_F16, PTZ_F64,
	PTZ_I64, PTZ_I32, PTZ_I16, PTZ_I8, PTZ_U8, PTZ_BOOL,
	PTZ_DTYPE_COUNT
} ptz_dtype;

size_t ptz_dtype_size(ptz_dtype t);
/* torch's attribute name ("float32", "bfloat16", ...), NULL for PTZ_NONE. */
const char *ptz_dtype_torch(ptz_dtype t);
/* The legacy storage class pickled by torch.save ("FloatStorage", ...). */
const char *ptz_dtype_storage(ptz_dtype t);
/* safetensors' name ("F32", "BF16", ...). */
const char *ptz_dtype_st(ptz_dtype t);
/* Parse any of the three spellings above, or titan's short ones ("f32", "bf16",
 * "fp32", "float", "half"...); PTZ_NONE when unknown. */
ptz_dtype ptz_dtype_parse(const char *s);
ptz_dtype ptz_dtype_from_storage(const char *cls);

/* Convert n elements from one type to another.  Floats to bfloat16/float16
 * round to nearest even as torch does (NaN stays NaN); to integers truncate
 * toward zero; to bool is "!= 0".  src and dst must not overlap unless the
 * types are equal. */
void ptz_convert(void *dst, ptz_dtype dt, const void *src, ptz_dtype st, size_t n);

/* One entry of a zip being read. */
typedef struct ptz_entry {
	char *name;          /* full name, e.g. "archive/data/0" */
	uint64_t data_off;   /* offset of the data from the start of the zip */
	uint64_t size;
	uint32_t crc32;
} ptz_entry;

/* A torch.save zip held in memory (for instance a slice of a mapped .distcp
 * file).  Reading checks the central directory against the local headers and
 * every entry's bounds; it never copies the data. */
typedef struct ptz_reader {
	const uint8_t *buf;
	uint64_t size;
	ptz_entry *entries;
	size_t n_entries;
	char *root;          /* the root folder name, without '/' */
} ptz_reader;

int ptz_open(ptz_reader *r, const uint8_t *buf, uint64_t size, titan_err *err);
void ptz_close(ptz_reader *r);
/* The entry ROOT/rel ("data.pkl", "data/0"), or NULL. */
const ptz_entry *ptz_find(const ptz_reader *r, const char *rel);
/* Verify the CRC-32 of an entry's data. */
int ptz_check_crc(const ptz_reader *r, const ptz_entry *e, titan_err *err);
/* The same for a CRC-32 the caller computed (zipcrc) over the entry's bytes as
 * it read them, so that a reader that already streams the data through
 * memory pays no second pass: 0 when crc is the entry's, else -1 with the
 * message ptz_check_crc gives. */
int ptz_crc_matches(const ptz_entry *e, uint32_t crc, titan_err *err);
/* Extend crc (0 to start) over n bytes: the zip CRC-32 that ptz_crc_matches
 * compares. */
uint32_t ptz_crc32(uint32_t crc, const void *buf, size_t n);
/* The CRC-32 of A followed by B from crc_a, crc_b and B's length: pieces
 * checked by different threads join into the record's CRC in order. */
uint32_t ptz_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* Where a torch.save'd tensor's elements are.  Only the forms torch writes for
 * a saved tensor are accepted: one storage, any strides (a view). */
typedef struct ptz_tensor {
	ptz_dtype dtype;
	int ndim;
	int64_t shape[8];
	int64_t stride[8];       /* in elements */
	int64_t storage_offset;  /* in elements */
	const uint8_t *storage;  /* points into the zip */
	uint64_t storage_bytes;
	const ptz_entry *entry;  /* the storage's record (its size and CRC-32);
	                            owned by the reader */
} ptz_tensor;

/* The globals a torch.save'd tensor's pickle may name (for pk_load). */
extern const pk_allow ptz_allow;
/* Interpret an unpickled _rebuild_tensor_v2 (or _rebuild_parameter) call whose
 * storage lives in r; checks that the view stays inside the storage. */
int ptz_tensor_from_val(const ptz_reader *r, const pk_val *v, ptz_tensor *t, titan_err *err);
int64_t ptz_tensor_numel(const ptz_tensor *t);
int ptz_tensor_contiguous(const ptz_tensor *t);

/* Parse data.pkl of a zip that holds exactly one tensor (what DCP writes per
 * chunk) and locate its storage. */
int ptz_read_tensor(const ptz_reader *r, ptz_tensor *t, titan_err *err);
/* Copy the tensor's elements, in row-major order, converted to dtype. */
int ptz_tensor_copy(const ptz_tensor *t, void *out, ptz_dtype dtype, titan_err *err);

/* Writing.  The writer streams to a FILE (or grows a memory buffer when fp is
 * NULL) and tracks its own offset, so a zip may start anywhere in a file. */
typedef struct ptz_writer {
	FILE *fp;
	uint8_t *mem;          /* when fp == NULL: the bytes written so far (owned) */
	size_t mem_cap;
	uint64_t pos;          /* bytes written to this zip */
	char *root;
	struct ptz_cd *cd;     /* central directory records so far */
	size_t n_cd, cap_cd;
	uint32_t crc_all;      /* for the serialization id */
	int failed;
} ptz_writer;

int ptz_writer_init(ptz_writer *w, FILE *fp, const char *root, titan_err *err);
/* Add ROOT/rel with n bytes (data may be NULL when n == 0). */
int ptz_writer_add(ptz_writer *w, const char *rel, const void *data, uint64_t n, titan_err *err);
/* Write the version records and the central directory; after it w->mem holds
 * the whole zip when writing to memory (the caller frees it with free()). */
int ptz_writer_finish(ptz_writer *w, titan_err *err);
void ptz_writer_free(ptz_writer *w);

/* torch.save(tensor): a contiguous tensor of ndim dims.  requires_grad false. */
int ptz_save_tensor(ptz_writer *w, ptz_dtype dtype, int ndim, const int64_t *shape,
		    const void *data, titan_err *err);

/* The pickle node of a contiguous tensor whose storage is record data/KEY
 * (torch._utils._rebuild_tensor_v2, as torch.save writes it). */
pk_val *ptz_tensor_val(pk_arena *a, ptz_dtype dtype, int ndim, const int64_t *shape,
		       const char *key);
/* data.pkl, .format_version, .storage_alignment, byteorder: what torch.save
 * writes before the storages (ptz_writer_finish adds the rest). */
int ptz_write_preamble(ptz_writer *w, const void *pkl, size_t n, titan_err *err);
/* torch.save(value) of a plain Python value (no tensors). */
int ptz_save_value(ptz_writer *w, const pk_val *v, titan_err *err);

#endif
