/* lmhead.h: the output projection fused with the cross-entropy loss, a chunk of
 * rows at a time, so that the logits of the whole batch (n x 128k floats for
 * Llama 3) never exist: per chunk of rows, the logits are computed into one
 * scratch buffer, turned into their gradient in place (launch_cross_entropy),
 * and consumed at once by the two backward products.
 *
 *   logits_c (c, v) = h_c (c, d) @ w^T          (stored in the type of h and w,
 *                                                 bf16 as under torch autocast)
 *   row_loss_c = lse - logits_c[label]; logits_c <- (softmax - onehot) * scale
 *   dh_c (c, d)  = logits_c @ w                 (written)
 *   dw (v, d)   += logits_c^T @ h_c             (dw_type: float32, or bf16 under
 *                                                 training.dtype; accumulated)
 *
 * With grad_scale 0 (and no grad_scale_dev) only the loss is computed (eval). */
#ifndef TITAN_GPU_LMHEAD_H
#define TITAN_GPU_LMHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gpu/gemm.h"

typedef struct gpu_lmhead_args {
	const void *h; /* (n, d): the final norm's output */
	const void *w; /* (v, d): the output projection */
	int type;      /* gpu_dtype of h, w and the logits */
	const int32_t *labels; /* (n) */
	int64_t n, d, v;
	int32_t ignore_index;
	float grad_scale;            /* 0: loss only */
	const float *grad_scale_dev; /* not NULL: the scale, read on the device */
	void *dh;                    /* (n, d) of dh_type, written; NULL for loss only */
	int dh_type;
	void *dw;       /* (v, d) of dw_type, accumulated; NULL for loss only */
	int dw_type;    /* gpu_dtype (0: float32) */
	void *logits;   /* scratch (chunk, v) of type */
	int64_t chunk;  /* rows per chunk, >= 1 */
	float *row_loss;    /* (n) */
	double *loss_sum;   /* device: += sum of valid rows' losses */
	int64_t *n_valid;   /* device: += number of valid rows */
} gpu_lmhead_args;

/* Bytes of the logits scratch for chunk rows. */
size_t gpu_lmhead_scratch_bytes(int64_t chunk, int64_t v, int type);

int gpu_lmhead_loss(gpu_gemm *g, void *stream, const gpu_lmhead_args *a, titan_err *e);

#endif
