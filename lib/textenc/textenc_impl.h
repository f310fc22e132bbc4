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
	int bf16;      /* round every weight to bfloat16 as it is loaded */
	float **p;
	size_t n, cap;
} te_params;

/* Tensor NAME of s (tried with each prefix in turn: a NULL-terminated list,
 * "" for none) checked to have ndim dims of the given sizes, converted to
 * float32 into backend memory that ps owns.  NULL and err naming the tensor
 * when it is missing, misshapen or of a non-float type. */
float *te_load(te_params *ps, const st_set *s, const char *const *prefixes, const char *name,
	       int ndim, int64_t d0, int64_t d1, titan_err *err);
void te_params_free(te_params *ps);

/* What opening a model folder does for either encoder: check the backend,
 * read DIR/config.json with read_config(cfg, path, err), open DIR's
 * safetensors and call load(model, set, err); an error of load is prefixed
 * with DIR.  0 or -1. */
int te_open_dir(backend *be, const char *dir, const char *what,
		int (*read_config)(void *cfg, const char *path, titan_err *err), void *cfg,
		int (*load)(void *model, const st_set *s, titan_err *err), void *model,
		titan_err *err);

/* n float buffers *bufs[i] of sizes[i] floats in backend memory and the (rows)
 * int32 ids; on failure the ones allocated stay set for te_scratch_free. */
int te_scratch_alloc(backend *be, float **const *bufs, const size_t *sizes, size_t n,
		     int32_t **ids, size_t rows, titan_err *err);
void te_scratch_free(backend *be, float *const *bufs, size_t n, int32_t *ids);

/* 0 when be computes in host memory (the CPU backend), else -1 naming it. */
int te_check_backend(const backend *be, const char *what, titan_err *err);
/* 0 when every id is in [0, vocab), else -1 naming the first that is not. */
int te_check_ids(const int32_t *ids, int64_t n, int64_t vocab, const char *what, titan_err *err);

/* y (rows, out) = x (rows, in) @ w (out, in)^T: nn.Linear without its bias. */
void te_linear(backend *be, float *y, const float *x, const float *w, int64_t rows, int64_t in,
	       int64_t out);

/* x (n) rounded to bfloat16 in place when bf16 is set (the bf16 model's
 * storing of a tensor). */
void te_round(int bf16, float *x, int64_t n);
/* x (n) += t (n), t and the sum rounded to bfloat16 when bf16 is set (a
 * residual add of a branch's output, as the bf16 model stores both). */
void te_residual(backend *be, int bf16, float *x, float *t, int64_t n);

/* Plain-C ops the backend table lacks (host memory, float32). */
/* y (n, d) = (x - mean) / sqrt(var + eps) * w + b: nn.LayerNorm. */
void te_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d,
		  float eps);
/* g (n) = gelu_new(g) * u: T5's gated-gelu (the tanh approximation); with
 * bf16 the gelu and the product are rounded to bfloat16. */
void te_gated_gelu_new(float *g, const float *u, int64_t n, int bf16);
/* x (n) = x sigmoid(1.702 x): CLIP's quick_gelu, in place. */
void te_quick_gelu(float *x, int64_t n);

#endif
