/* backend.h: the op interface the model, the optimizer and the parallel plans are
 * written against.  A backend owns device memory and implements every op on it;
 * the CPU backend (OpenBLAS sgemm + OpenMP) is the reference, a CUDA backend
 * implements the same table.
 *
 * Conventions shared by every op:
 * - Tensors are dense, row-major float32 in device memory (host memory on the
 *   CPU).  Token ids and labels are int32 in device memory.
 * - Shapes are given as counts; the layout of each argument is in its comment.
 * - Ops that produce a weight gradient ACCUMULATE into it (dw += ...), so
 *   micro-batches add up without extra copies; activation gradients are written.
 * - Ops do not fail: the arguments are the caller's contract.  Only allocation
 *   and synchronisation report errors (a CUDA backend reports a failed kernel
 *   at the next sync).
 * - Reductions run in a fixed order that does not depend on timing, so a run
 *   repeats bit for bit with the same thread count (resume tests rely on it). */
#ifndef TITAN_BACKEND_H
#define TITAN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct backend backend;

enum backend_copy_kind {
	BACKEND_H2D,
	BACKEND_D2H,
	BACKEND_D2D,
};

typedef struct backend_ops {
	const char *name; /* "cpu", "cuda" */

	/* Memory.  alloc returns NULL (and sets e) when out of memory; bytes are
	 * counted for backend_peak_bytes. */
	void *(*alloc)(backend *be, size_t bytes, titan_err *e);
	void (*free)(backend *be, void *p);
	void (*copy)(backend *be, void *dst, const void *src, size_t bytes, int kind);
	void (*zero)(backend *be, void *p, size_t bytes);
	int (*sync)(backend *be, titan_err *e);

	/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, row-major, with
	 * leading dimensions lda/ldb/ldc (sgemm). */
	void (*matmul)(backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
		       int64_t k, float alpha, const float *a, int64_t lda,
		       const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

	/* y = x / sqrt(mean(x^2) + eps) * w over the last dim.  x, y (n, d); w (d);
	 * rstd (n) keeps 1/sqrt(mean + eps) for the backward. */
	void (*rmsnorm_fwd)(backend *be, float *y, float *rstd, const float *x,
			    const float *w, int64_t n, int64_t d, float eps);
	/* dx (n, d) written; dw (d) accumulated. */
	void (*rmsnorm_bwd)(backend *be, float *dx, float *dw, const float *dy,
			    const float *x, const float *w, const float *rstd,
			    int64_t n, int64_t d);

	/* Rotary embedding on interleaved pairs (x[2i], x[2i+1]) of the last dim,
	 * in place.  x (b, t, h, hd); cs (t, hd/2, 2) holds (cos, sin) of each
	 * position's angle (a CP rank passes the rows of its own positions).
	 * inverse = 1 rotates by minus the angle: the backward of the forward. */
	void (*rope)(backend *be, float *x, const float *cs, int64_t b, int64_t t,
		     int64_t h, int64_t hd, int inverse);

	/* Causal grouped-query attention, softmax(q k^T / sqrt(hd)) v; query head j
	 * reads kv head j / (h / hkv).  q, out (b, t, h, hd); k, v (b, t, hkv, hd);
	 * lse (b, h, t) keeps each row's log-sum-exp for the backward. */
	void (*attention_fwd)(backend *be, float *out, float *lse, const float *q,
			      const float *k, const float *v, int64_t b, int64_t t,
			      int64_t h, int64_t hkv, int64_t hd);
	/* dq (b, t, h, hd), dk, dv (b, t, hkv, hd) written. */
	void (*attention_bwd)(backend *be, float *dq, float *dk, float *dv,
			      const float *dout, const float *q, const float *k,
			      const float *v, const float *out, const float *lse,
			      int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd);

	/* SwiGLU gate: y = silu(a) * g, all (n). */
	void (*swiglu_fwd)(backend *be, float *y, const float *a, const float *g,
			   int64_t n);
	/* da, dg (n) written. */
	void (*swiglu_bwd)(backend *be, float *da, float *dg, const float *dy,
			   const float *a, const float *g, int64_t n);

	/* out (n, d) = table[ids] ; table (vocab, d); ids (n). */
	void (*embedding_fwd)(backend *be, float *out, const float *table,
			      const int32_t *ids, int64_t n, int64_t d);
	/* dtable[ids[i]] += dout[i], in token order. */
	void (*embedding_bwd)(backend *be, float *dtable, const float *dout,
			      const int32_t *ids, int64_t n, int64_t d);

	/* Fused softmax + cross-entropy over logits (n, v) with labels (n); a label
	 * equal to ignore_index counts for nothing.  Adds the summed loss of the
	 * valid rows to *loss_sum and their number to *n_valid.  When grad_scale
	 * is not 0 the logits are overwritten by their gradient,
	 * (softmax - onehot) * grad_scale, zero on ignored rows: no probability
	 * matrix is kept beside the logits. */
	void (*cross_entropy)(backend *be, float *logits, const int32_t *labels,
			      int64_t n, int64_t v, int32_t ignore_index,
			      float grad_scale, double *loss_sum, int64_t *n_valid);

	/* Elementwise: y = a + b; y += alpha * x; x *= alpha. */
	void (*add)(backend *be, float *y, const float *a, const float *b, int64_t n);
	void (*axpy)(backend *be, float *y, float alpha, const float *x, int64_t n);
	void (*scale)(backend *be, float *x, float alpha, int64_t n);

	/* sum(x^2) in double, in a fixed order: the grad-norm partial. */
	double (*sumsq)(backend *be, const float *x, int64_t n);

	/* torch.optim.AdamW's update of n elements:
	 *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	 *   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
	 * with bc1 = 1 - b1^step, bc2 = 1 - b2^step. */
	void (*adamw)(backend *be, float *p, const float *g, float *m, float *v,
		      int64_t n, float lr, float b1, float b2, float eps, float wd,
		      float bc1, float bc2);
} backend_ops;

struct backend {
	const backend_ops *ops;
	size_t bytes_in_use; /* device bytes held by alloc, now */
	size_t peak_bytes;   /* the most held at once since creation or reset */
	int threads;         /* CPU threads the backend uses */
	void *impl;          /* the backend's own state */
};

/* The CPU backend with threads OpenMP/OpenBLAS threads (0: the library's
 * default, OMP_NUM_THREADS).  Free with backend_free. */
backend *backend_cpu_create(int threads, titan_err *e);
void backend_free(backend *be);

static inline size_t backend_peak_bytes(const backend *be) { return be->peak_bytes; }
static inline void backend_reset_peak(backend *be) { be->peak_bytes = be->bytes_in_use; }

/* Allocation helpers: n floats, zeroed or not. */
float *backend_alloc_floats(backend *be, size_t n, titan_err *e);
float *backend_calloc_floats(backend *be, size_t n, titan_err *e);

#endif
