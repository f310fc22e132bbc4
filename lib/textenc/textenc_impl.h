/* textenc_impl.h: what t5.c and clip.c share (private to lib/textenc). */
#ifndef TITAN_TEXTENC_IMPL_H
#define TITAN_TEXTENC_IMPL_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "safetensors/safetensors.h"

/* The weights a model owns, for freeing in one place. */
typedef struct te_params {
	backend *be;
	be_dtype dt;   /* the model's element type: weights and activations */
	void **p;
	size_t n, cap;
} te_params;

/* Element i of a tensor of type dt in backend memory. */
static inline void *te_at(const void *p, be_dtype dt, int64_t i)
{
	return (char *)p + (size_t)i * be_dtype_size(dt);
}

/* Tensor NAME of s (tried with each prefix in turn: a NULL-terminated list,
 * "" for none) checked to have ndim dims of the given sizes, converted to
 * ps->dt (rounded to nearest even for bfloat16) into backend memory that ps
 * owns.  NULL and err naming the tensor when it is missing, misshapen or of
 * a non-float type. */
void *te_load(te_params *ps, const st_set *s, const char *const *prefixes, const char *name,
	      int ndim, int64_t d0, int64_t d1, titan_err *err);
void te_params_free(te_params *ps);

/* What opening a model folder does for either encoder: read DIR/config.json
 * with read_config(cfg, path, err), open DIR's safetensors and call
 * load(model, set, err); an error of load is prefixed with DIR.  0 or -1. */
int te_open_dir(const char *dir,
		int (*read_config)(void *cfg, const char *path, titan_err *err), void *cfg,
		int (*load)(void *model, const st_set *s, titan_err *err), void *model,
		titan_err *err);

/* n buffers *bufs[i] of bytes[i] bytes in backend memory and the (rows) int32
 * ids; on failure the ones allocated stay set for te_scratch_free. */
int te_scratch_alloc(backend *be, void **const *bufs, const size_t *bytes, size_t n,
		     int32_t **ids, size_t rows, titan_err *err);
void te_scratch_free(backend *be, void *const *bufs, size_t n, int32_t *ids);

/* 0 when every id is in [0, vocab), else -1 naming the first that is not. */
int te_check_ids(const int32_t *ids, int64_t n, int64_t vocab, const char *what, titan_err *err);

/* y (rows, out) = x (rows, in) @ w (out, in)^T in dt: nn.Linear without its
 * bias (float32 sums, y rounded once for bfloat16). */
void te_linear(backend *be, be_dtype dt, void *y, const void *x, const void *w, int64_t rows,
	       int64_t in, int64_t out);

/* Between host floats and backend memory of type dt (rounded to nearest even
 * for bfloat16): the inputs the host computes, the outputs it returns.  0, or
 * -1 when the host buffer cannot be had; a copy's own failure surfaces at the
 * backend's next sync. */
int te_upload(backend *be, be_dtype dt, void *dev, const float *host, int64_t n, titan_err *err);
int te_download(backend *be, be_dtype dt, float *host, const void *dev, int64_t n, titan_err *err);

#endif
