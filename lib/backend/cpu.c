/* The CPU backend: the ops of backend.h on host memory, with OpenBLAS sgemm for
 * every matmul and OpenMP for the rest (kernels in cpu_kernels.inc). */
#include <cblas.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"

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

static void cpu_destroy(backend *be)
{
	free(be);
}

static int cpu_sync(backend *be, titan_err *e)
{
	return backend_take_fault(be, e);
}

/* The float32 kernels serve every op whose tensors are all float32; other
 * element types are not implemented here yet and fault. */
static int all_f32(backend *be, const char *op, int n, ...)
{
	va_list ap;
	va_start(ap, n);
	int ok = 1;
	for (int i = 0; i < n; i++)
		if (va_arg(ap, int) != BE_F32)
			ok = 0;
	va_end(ap);
	if (!ok)
		backend_fault(be, "cpu backend: %s: only float32 tensors are implemented", op);
	return ok;
}

static void cpu_convert(backend *be, void *dst, be_dtype dt, const void *src, be_dtype st,
			int64_t n)
{
	if (dt == st) {
		if (n)
			memmove(dst, src, (size_t)n * be_dtype_size(dt));
	} else if (dt == BE_BF16 && st == BE_F32) {
		uint16_t *restrict d = dst;
		const float *restrict x = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
		for (int64_t i = 0; i < n; i++)
			d[i] = bf16_from_f32(x[i]);
	} else if (dt == BE_F32 && st == BE_BF16) {
		float *restrict d = dst;
		const uint16_t *restrict x = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
		for (int64_t i = 0; i < n; i++)
			d[i] = bf16_to_f32(x[i]);
	} else {
		backend_fault(be, "cpu backend: convert %s to %s is not implemented",
			      be_dtype_name(st), be_dtype_name(dt));
	}
}

static void cpu_matmul(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
		       float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
		       be_dtype ab, float beta, void *c, int64_t ldc, be_dtype ct)
{
	if (all_f32(be, "matmul", 2, ab, ct))
		cpu_matmul_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			    be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			    float eps)
{
	if (all_f32(be, "rmsnorm_fwd", 3, yt, xt, wt))
		cpu_rmsnorm_fwd_f32(y, rstd, x, w, n, d, eps);
}

static void cpu_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			    const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			    const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d)
{
	if (all_f32(be, "rmsnorm_bwd", 5, dxt, dwt, dyt, xt, wt))
		cpu_rmsnorm_bwd_f32(dx, dw, dy, x, w, rstd, n, d);
}

static void cpu_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b,
		     int64_t t, int64_t h, int64_t hd, int style, int inverse)
{
	if (!all_f32(be, "rope", 1, xt))
		return;
	if (style == BE_ROPE_HALF)
		cpu_rope_half_f32(x, cs, b, t, h, hd, inverse);
	else
		cpu_rope_f32(x, cs, b, t, h, hd, inverse);
}

static void cpu_attention_fwd(backend *be, void *out, float *lse, const void *q,
			      const void *k, const void *v, const be_attn *a)
{
	if (all_f32(be, "attention_fwd", 2, a->qkv, a->out))
		cpu_attention_fwd_f32(out, lse, q, k, v, a);
}

static void cpu_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			      const void *q, const void *k, const void *v, const void *out,
			      const float *lse, const be_attn *a)
{
	if (all_f32(be, "attention_bwd", 4, a->qkv, a->out, a->dout, a->grad))
		cpu_attention_bwd_f32(dq, dk, dv, dout, q, k, v, out, lse, a);
}

static void cpu_swiglu_fwd(backend *be, void *y, const void *a, const void *g, be_dtype t,
			   int64_t n)
{
	if (all_f32(be, "swiglu_fwd", 1, t))
		cpu_swiglu_fwd_f32(y, a, g, n);
}

static void cpu_swiglu_bwd(backend *be, void *da, void *dg, const void *dy, const void *a,
			   const void *g, be_dtype t, int64_t n)
{
	if (all_f32(be, "swiglu_bwd", 1, t))
		cpu_swiglu_bwd_f32(da, dg, dy, a, g, n);
}

static void cpu_embedding_fwd(backend *be, void *out, be_dtype ot, const void *table,
			      be_dtype tt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv)
{
	if (all_f32(be, "embedding_fwd", 2, ot, tt))
		cpu_embedding_fwd_f32(out, table, ids, n, d, v0, nv);
}

static void cpu_embedding_bwd(backend *be, void *dtable, be_dtype tt, const void *dout,
			      be_dtype dt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv)
{
	if (all_f32(be, "embedding_bwd", 2, tt, dt))
		cpu_embedding_bwd_f32(dtable, dout, ids, n, d, v0, nv);
}

static void cpu_cross_entropy(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			      int64_t n, int64_t v, int32_t ignore_index, float grad_scale,
			      double *loss_sum, int64_t *n_valid)
{
	if (all_f32(be, "cross_entropy", 1, lt))
		cpu_cross_entropy_f32(logits, labels, n, v, ignore_index, grad_scale, loss_sum,
				      n_valid);
}

static void cpu_add(backend *be, void *y, be_dtype yt, const void *a, be_dtype at,
		    const void *b, be_dtype bt, int64_t n)
{
	if (all_f32(be, "add", 3, yt, at, bt))
		cpu_add_f32(y, a, b, n);
}

static void cpu_axpy(backend *be, void *y, be_dtype yt, float alpha, const void *x,
		     be_dtype xt, int64_t n)
{
	if (all_f32(be, "axpy", 2, yt, xt))
		cpu_axpy_f32(y, alpha, x, n);
}

static void cpu_scale(backend *be, void *x, be_dtype xt, float alpha, int64_t n)
{
	if (all_f32(be, "scale", 1, xt))
		cpu_scale_f32(x, alpha, n);
}

static double cpu_sumsq(backend *be, const void *x, be_dtype xt, int64_t n)
{
	return all_f32(be, "sumsq", 1, xt) ? cpu_sumsq_f32(x, n) : 0;
}

static void cpu_adamw(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
		      int64_t n, float lr, float b1, float b2, float eps, float wd, float bc1,
		      float bc2)
{
	if (all_f32(be, "adamw", 1, t))
		cpu_adamw_f32(p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
}

static void cpu_moe_route(backend *be, float *scores, int32_t *idx, float *w, const void *logits,
			  be_dtype lt, const float *bias, const be_moe *r)
{
	if (all_f32(be, "moe_route", 1, lt))
		cpu_moe_route_f32(scores, idx, w, logits, bias, r);
}

static void cpu_moe_route_bwd(backend *be, void *dlogits, be_dtype lt, const float *dw,
			      const float *scores, const int32_t *idx, const be_moe *r)
{
	if (all_f32(be, "moe_route_bwd", 1, lt))
		cpu_moe_route_bwd_f32(dlogits, dw, scores, idx, r);
}

static void cpu_moe_permute(backend *be, int32_t *perm, int32_t *pos, int32_t *offs,
			    float *counts, const int32_t *idx, const be_moe *r)
{
	(void)be;
	cpu_moe_permute_f32(perm, pos, offs, counts, idx, r);
}

static void cpu_moe_gather(backend *be, void *y, const void *x, be_dtype t, const int32_t *perm,
			   const int32_t *offs, const float *w, const be_moe *r, int64_t d)
{
	if (all_f32(be, "moe_gather", 1, t))
		cpu_moe_gather_f32(y, x, perm, offs, w, r, d);
}

static void cpu_moe_combine(backend *be, void *out, const void *y, be_dtype t, const int32_t *pos,
			    const float *w, float beta, const be_moe *r, int64_t d)
{
	if (all_f32(be, "moe_combine", 1, t))
		cpu_moe_combine_f32(out, y, pos, w, beta, r, d);
}

static void cpu_moe_dot(backend *be, float *dw, const void *y, const void *x, be_dtype t,
			const int32_t *pos, const be_moe *r, int64_t d)
{
	if (all_f32(be, "moe_dot", 1, t))
		cpu_moe_dot_f32(dw, y, x, pos, r, d);
}

static void cpu_grouped_matmul(backend *be, int mode, int64_t groups, const int32_t *offs,
			       int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
			       be_dtype ab, float beta, void *c, be_dtype ct)
{
	if (all_f32(be, "grouped_matmul", 2, ab, ct))
		cpu_grouped_matmul_f32(mode, groups, offs, rows, nn, kk, a, b, beta, c);
}

static const backend_ops cpu_ops = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.copy = cpu_copy,
	.zero = cpu_zero,
	.destroy = cpu_destroy,
	.sync = cpu_sync,
	.convert = cpu_convert,
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
	.moe_route = cpu_moe_route,
	.moe_route_bwd = cpu_moe_route_bwd,
	.moe_permute = cpu_moe_permute,
	.moe_gather = cpu_moe_gather,
	.moe_combine = cpu_moe_combine,
	.moe_dot = cpu_moe_dot,
	.grouped_matmul = cpu_grouped_matmul,
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
