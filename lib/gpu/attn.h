/* attn.h: causal grouped-query attention through cuDNN's fused flash attention
 * (its graph/backend API: the SDPA pattern cuDNN's runtime fusion engines
 * recognise, the same graph cudnn-frontend builds for PyTorch).  bf16 q, k, v,
 * out and their gradients; float32 lse (the softmax statistics the backward
 * reads).  Layout as the backend ops: q, out (b, t, h, hd); k, v (b, t, hkv, hd);
 * lse (b, h, t).
 *
 * Where cuDNN is missing, refuses a shape (gpu_attn_prepare fails) or this build
 * has no cuDNN, the caller uses the reference kernels of launch.h instead.
 * cuDNN's backward adds dq with atomics: it is not bit-for-bit repeatable;
 * the reference kernels are. */
#ifndef TITAN_GPU_ATTN_H
#define TITAN_GPU_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct gpu_attn gpu_attn;

/* A cuDNN handle on the current device; NULL (with the reason) when this build
 * has no cuDNN or the library cannot start. */
gpu_attn *gpu_attn_create(titan_err *e);
void gpu_attn_free(gpu_attn *a);

/* cuDNN's version as major*10000 + minor*100 + patch (0 without cuDNN). */
long gpu_attn_cudnn_version(void);

/* The forward (bwd = 0) or backward graph of a shape built without a device:
 * every tensor and operation descriptor and the operation graph finalized, so
 * cuDNN has checked their attributes, shapes and types (what it cannot check
 * without a GPU is whether an engine takes the graph: gpu_attn_prepare).  *nops
 * gets the number of operations. */
int gpu_attn_graph_check(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			 int *nops, titan_err *e);

/* The same graph as text, a line per operation in the order built: "<kind>
 * <mode> <math precision>[ axis N] -> <output type>[ F16x16][ uid N]" (uid for
 * the tensors the caller binds), e.g. "pointwise GEN_INDEX i32 axis 2 -> i32".
 * For tests that hold the graph to cudnn-frontend's SDPA graph without a GPU;
 * lines that do not fit in bytes are left out. */
int gpu_attn_graph_describe(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			    char *text, size_t bytes, titan_err *e);

/* Build (once per shape) the forward and backward execution plans and report
 * the scratch both need (the larger); later calls with the shape are free.
 * -1 with a message when cuDNN cannot run this shape: head dims 64 and 128,
 * t a multiple of 128, h a multiple of hkv. */
int gpu_attn_prepare(gpu_attn *a, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
		     size_t *scratch_bytes, titan_err *e);

/* The ops, on stream: causal, queries and keys at the same positions (t each),
 * softmax scale `scale` (0: 1/sqrt(hd)).  scratch: at least what
 * gpu_attn_prepare reported for the shape (device memory, 256-byte aligned).
 * Both prepare the shape first if needed (which must not happen inside a graph
 * capture). */
int gpu_attn_fwd(gpu_attn *a, void *stream, void *out, float *lse, const void *q,
		 const void *k, const void *v, int64_t b, int64_t t, int64_t h, int64_t hkv,
		 int64_t hd, float scale, void *scratch, size_t scratch_bytes, titan_err *e);
/* dq (b, t, h, hd), dk, dv (b, t, hkv, hd) written. */
int gpu_attn_bwd(gpu_attn *a, void *stream, void *dq, void *dk, void *dv, const void *dout,
		 const void *q, const void *k, const void *v, const void *out, const float *lse,
		 int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd, float scale, void *scratch,
		 size_t scratch_bytes, titan_err *e);

#endif
