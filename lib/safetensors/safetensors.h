/* safetensors.h: Hugging Face safetensors files, read with the format's full
 * validation and written as the safetensors library writes them.
 *
 * Layout: u64 little-endian N; N bytes of UTF-8 JSON (an object, starting with
 * '{', padded with spaces to a multiple of 8 by writers); then the data.  Each
 * JSON entry is {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}
 * relative to the start of the data; "__metadata__" maps strings to strings.
 * A reader checks: N bounded (100,000,000) and inside the file, no duplicate
 * keys, end - begin == numel x element size, the entries tile the data from 0
 * with no hole or overlap, and 8 + N + the last end == the file size.
 * Sharded models add model.safetensors.index.json:
 * {"metadata": {"total_size": BYTES}, "weight_map": {name: file}}. */
#ifndef TITAN_SAFETENSORS_H
#define TITAN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/mfile.h"
#include "ptzip/ptzip.h"

#define ST_MAX_HEADER 100000000u
#define ST_MAX_DIM 8

typedef struct st_tensor {
	char *name;
	ptz_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIM];
	uint64_t begin, end;     /* data offsets, relative to the data start */
	const uint8_t *data;     /* into the buffer / mapping */
	int mapped;              /* data is a file mapping's (st_open), not a caller's buffer */
} st_tensor;

typedef struct st_file {
	mfile m;                 /* when opened from a path */
	const uint8_t *buf;
	uint64_t size;
	st_tensor *t;            /* in data order */
	size_t n;
	char **meta;             /* __metadata__ as key, value, key, value ... */
	size_t n_meta;
} st_file;

/* Validate and index a safetensors image in memory (borrowed). */
int st_parse(st_file *f, const uint8_t *buf, uint64_t size, titan_err *err);
/* Map and parse the file at path. */
int st_open(st_file *f, const char *path, titan_err *err);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta_get(const st_file *f, const char *key);
/* t's values as float32 into out (its numel floats), once t is found to have
 * ndim dims of the sizes in shape and a float type (F32, BF16 or F16, the
 * types model weights are stored in); else -1 and err naming the tensor and
 * what it was expected to be. */
int st_tensor_to_f32(const st_tensor *t, int ndim, const int64_t *shape, float *out,
		     titan_err *err);

typedef struct st_item {
	const char *name;
	ptz_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIM];
	const void *data;        /* row-major, numel x size bytes */
} st_item;

/* Write one file atomically (temporary name, fsync, rename).  meta: NULL or
 * key, value, ..., NULL. */
int st_write(const char *path, const st_item *items, size_t n, const char *const *meta,
	     titan_err *err);
/* Write DIR/model-0000K-of-0000M.safetensors shards of at most max_shard bytes
 * of data (a bigger tensor gets a shard of its own) and
 * DIR/model.safetensors.index.json; a single shard is named model.safetensors
 * and gets no index (as transformers' save_pretrained does). */
int st_write_sharded(const char *dir, const st_item *items, size_t n, uint64_t max_shard,
		     const char *const *meta, titan_err *err);
/* The same with files named STEM-0000K-of-0000M.safetensors, STEM.safetensors
 * and STEM.safetensors.index.json (diffusers' "diffusion_pytorch_model"). */
int st_write_sharded_as(const char *dir, const char *stem, const st_item *items, size_t n,
			uint64_t max_shard, const char *const *meta, titan_err *err);
/* Write item i into DIR/model-0000K-of-0000M.safetensors with K = file_of[i]
 * (1..m), and DIR/model.safetensors.index.json (always, as torch's
 * HuggingFaceStorageWriter does, even for one file). */
int st_write_indexed(const char *dir, const st_item *items, size_t n, const int *file_of, int m,
		     const char *const *meta, titan_err *err);

/* A set of safetensors files behind one model folder or one file. */
typedef struct st_set {
	st_file *files;
	size_t n;
} st_set;

/* PATH is a .safetensors file, or a folder with model.safetensors.index.json
 * (every file it names is opened and every mapped tensor checked present) or
 * with a single model.safetensors, or diffusers' diffusion_pytorch_model.*
 * the same way. */
int st_set_open(st_set *s, const char *path, titan_err *err);
void st_set_close(st_set *s);
const st_tensor *st_set_find(const st_set *s, const char *name);

#endif
