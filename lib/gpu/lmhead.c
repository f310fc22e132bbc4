/* The fused output projection and loss (lmhead.h): three products and one
 * kernel per chunk of rows, all on one stream. */
#include "gpu/lmhead.h"

#include "gpu/gpu.h"
#include "gpu/launch.h"

size_t gpu_lmhead_scratch_bytes(int64_t chunk, int64_t v, int type)
{
	return (size_t)chunk * (size_t)v * gpu_dtype_size(type);
}

/* Byte offset of row r of an (rows, cols) matrix of type t. */
static const char *row_at(const void *base, int64_t r, int64_t cols, int t)
{
	return (const char *)base + (size_t)r * (size_t)cols * gpu_dtype_size(t);
}

int gpu_lmhead_loss(gpu_gemm *g, void *stream, const gpu_lmhead_args *a, titan_err *e)
{
	int train = a->grad_scale != 0.0f || a->grad_scale_dev != NULL;
	if (a->chunk < 1 || gpu_dtype_size(a->type) == 0 || (train && (!a->dh || !a->dw)))
		return err_set(e, "lmhead: bad arguments (chunk %lld, type %d, %s)",
			       (long long)a->chunk, a->type,
			       train && (!a->dh || !a->dw) ? "training needs dh and dw" : "");
	for (int64_t r0 = 0; r0 < a->n; r0 += a->chunk) {
		int64_t c = a->n - r0 < a->chunk ? a->n - r0 : a->chunk;
		const void *h = row_at(a->h, r0, a->d, a->type);
		gpu_gemm_args logits = {
			.trans_b = 1, .m = c, .n = a->v, .k = a->d, .alpha = 1,
			.a = h, .lda = a->d, .b = a->w, .ldb = a->d, .ab_type = a->type,
			.d = a->logits, .ldd = a->v, .d_type = a->type,
		};
		if (gpu_gemm_run(g, stream, &logits, e))
			return err_prefix(e, "lmhead logits");
		if (gpu_check(launch_cross_entropy(a->logits, a->type, a->labels + r0, c, a->v,
						   a->ignore_index, a->grad_scale,
						   a->grad_scale_dev, a->row_loss + r0, stream),
			      "cross-entropy kernel", e))
			return -1;
		if (!train)
			continue;
		gpu_gemm_args dh = {
			.m = c, .n = a->d, .k = a->v, .alpha = 1,
			.a = a->logits, .lda = a->v, .b = a->w, .ldb = a->d, .ab_type = a->type,
			.d = (void *)row_at(a->dh, r0, a->d, a->dh_type), .ldd = a->d,
			.d_type = a->dh_type,
		};
		gpu_gemm_args dw = {
			.trans_a = 1, .m = a->v, .n = a->d, .k = c, .alpha = 1, .beta = 1,
			.a = a->logits, .lda = a->v, .b = h, .ldb = a->d, .ab_type = a->type,
			.c = a->dw, .d = a->dw, .ldd = a->d, .d_type = a->dw_type,
		};
		if (gpu_gemm_run(g, stream, &dh, e))
			return err_prefix(e, "lmhead dh");
		if (gpu_gemm_run(g, stream, &dw, e))
			return err_prefix(e, "lmhead dw");
	}
	return gpu_check(launch_loss_sum(a->loss_sum, a->n_valid, a->row_loss, a->labels, a->n,
					 a->ignore_index, stream),
			 "loss sum kernel", e);
}
