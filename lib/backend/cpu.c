/* The CPU backend: the ops of backend.h on host memory, with OpenBLAS sgemm for
 * every matmul and OpenMP for the rest (kernels in cpu_kernels.inc). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"

/* Each block starts with a header that remembers its size, so free can count it
 * off; 64 keeps the data aligned for vector loads. */
#define CPU_HDR 64

static void *cpu_alloc(backend *be, size_t bytes, titan_err *e)
{
	size_t total = (bytes + CPU_HDR + 63) / 64 * 64;
	char *p = aligned_alloc(64, total);
	if (!p) {
		err_set(e, "cpu backend: out of memory allocating %zu bytes", bytes);
		return NULL;
	}
	memcpy(p, &bytes, sizeof bytes);
	be->bytes_in_use += bytes;
	if (be->bytes_in_use > be->peak_bytes)
		be->peak_bytes = be->bytes_in_use;
	return p + CPU_HDR;
}

static void cpu_free(backend *be, void *p)
{
	if (!p)
		return;
	char *base = (char *)p - CPU_HDR;
	size_t bytes;
	memcpy(&bytes, base, sizeof bytes);
	be->bytes_in_use -= bytes;
	free(base);
}

static void cpu_copy(backend *be, void *dst, const void *src, size_t bytes, int kind)
{
	(void)be;
	(void)kind;
	if (bytes)
		memmove(dst, src, bytes);
}

static void cpu_zero(backend *be, void *p, size_t bytes)
{
	(void)be;
	if (bytes)
		memset(p, 0, bytes);
}

static int cpu_sync(backend *be, titan_err *e)
{
	(void)be;
	(void)e;
	return 0;
}

static void cpu_matmul(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
		       float alpha, const float *a, int64_t lda, const float *b,
		       int64_t ldb, float beta, float *c, int64_t ldc)
{
	(void)be;
	cpu_matmul_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_rmsnorm_fwd(backend *be, float *y, float *rstd, const float *x,
			    const float *w, int64_t n, int64_t d, float eps)
{
	(void)be;
	cpu_rmsnorm_fwd_f32(y, rstd, x, w, n, d, eps);
}

static void cpu_rmsnorm_bwd(backend *be, float *dx, float *dw, const float *dy,
			    const float *x, const float *w, const float *rstd, int64_t n,
			    int64_t d)
{
	(void)be;
	cpu_rmsnorm_bwd_f32(dx, dw, dy, x, w, rstd, n, d);
}

static void cpu_rope(backend *be, float *x, const float *cs, int64_t b, int64_t t,
		     int64_t h, int64_t hd, int inverse)
{
	(void)be;
	cpu_rope_f32(x, cs, b, t, h, hd, inverse);
}

static void cpu_attention_fwd(backend *be, float *out, float *lse, const float *q,
			      const float *k, const float *v, int64_t b, int64_t t,
			      int64_t h, int64_t hkv, int64_t hd)
{
	(void)be;
	cpu_attention_fwd_f32(out, lse, q, k, v, b, t, h, hkv, hd);
}

static void cpu_attention_bwd(backend *be, float *dq, float *dk, float *dv,
			      const float *dout, const float *q, const float *k,
			      const float *v, const float *out, const float *lse, int64_t b,
			      int64_t t, int64_t h, int64_t hkv, int64_t hd)
{
	(void)be;
	cpu_attention_bwd_f32(dq, dk, dv, dout, q, k, v, out, lse, b, t, h, hkv, hd);
}

static void cpu_swiglu_fwd(backend *be, float *y, const float *a, const float *g,
			   int64_t n)
{
	(void)be;
	cpu_swiglu_fwd_f32(y, a, g, n);
}

static void cpu_swiglu_bwd(backend *be, float *da, float *dg, const float *dy,
			   const float *a, const float *g, int64_t n)
{
	(void)be;
	cpu_swiglu_bwd_f32(da, dg, dy, a, g, n);
}

static void cpu_embedding_fwd(backend *be, float *out, const float *table,
			      const int32_t *ids, int64_t n, int64_t d)
{
	(void)be;
	cpu_embedding_fwd_f32(out, table, ids, n, d);
}

static void cpu_embedding_bwd(backend *be, float *dtable, const float *dout,
			      const int32_t *ids, int64_t n, int64_t d)
{
	(void)be;
	cpu_embedding_bwd_f32(dtable, dout, ids, n, d);
}

static void cpu_cross_entropy(backend *be, float *logits, const int32_t *labels,
			      int64_t n, int64_t v, int32_t ignore_index, float grad_scale,
			      double *loss_sum, int64_t *n_valid)
{
	(void)be;
	cpu_cross_entropy_f32(logits, labels, n, v, ignore_index, grad_scale, loss_sum,
			      n_valid);
}

static void cpu_add(backend *be, float *y, const float *a, const float *b, int64_t n)
{
	(void)be;
	cpu_add_f32(y, a, b, n);
}

static void cpu_axpy(backend *be, float *y, float alpha, const float *x, int64_t n)
{
	(void)be;
	cpu_axpy_f32(y, alpha, x, n);
}

static void cpu_scale(backend *be, float *x, float alpha, int64_t n)
{
	(void)be;
	cpu_scale_f32(x, alpha, n);
}

static double cpu_sumsq(backend *be, const float *x, int64_t n)
{
	(void)be;
	return cpu_sumsq_f32(x, n);
}

static void cpu_adamw(backend *be, float *p, const float *g, float *m, float *v,
		      int64_t n, float lr, float b1, float b2, float eps, float wd,
		      float bc1, float bc2)
{
	(void)be;
	cpu_adamw_f32(p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
}

static const backend_ops cpu_ops = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.copy = cpu_copy,
	.zero = cpu_zero,
	.sync = cpu_sync,
	.matmul = cpu_matmul,
	.rmsnorm_fwd = cpu_rmsnorm_fwd,
	.rmsnorm_bwd = cpu_rmsnorm_bwd,
	.rope = cpu_rope,
	.attention_fwd = cpu_attention_fwd,
	.attention_bwd = cpu_attention_bwd,
	.swiglu_fwd = cpu_swiglu_fwd,
	.swiglu_bwd = cpu_swiglu_bwd,
	.embedding_fwd = cpu_embedding_fwd,
	.embedding_bwd = cpu_embedding_bwd,
	.cross_entropy = cpu_cross_entropy,
	.add = cpu_add,
	.axpy = cpu_axpy,
	.scale = cpu_scale,
	.sumsq = cpu_sumsq,
	.adamw = cpu_adamw,
};

backend *backend_cpu_create(int threads, titan_err *e)
{
	backend *be = calloc(1, sizeof *be);
	if (!be) {
		err_set(e, "cpu backend: out of memory");
		return NULL;
	}
	be->ops = &cpu_ops;
	if (threads > 0)
		omp_set_num_threads(threads);
	/* OpenBLAS works single-threaded inside OpenMP's blocks (cpu_matmul). */
	openblas_set_num_threads(1);
	be->threads = threads > 0 ? threads : omp_get_max_threads();
	return be;
}

void backend_free(backend *be)
{
	free(be);
}

float *backend_alloc_floats(backend *be, size_t n, titan_err *e)
{
	return be->ops->alloc(be, n * sizeof(float), e);
}

float *backend_calloc_floats(backend *be, size_t n, titan_err *e)
{
	float *p = backend_alloc_floats(be, n, e);
	if (p)
		be->ops->zero(be, p, n * sizeof(float));
	return p;
}
