/* The CPU backend: the ops of backend.h on host memory, with OpenBLAS sgemm for
 * the float32 matmuls, oneDNN or the portable path for the bfloat16 ones (as
 * core/cpu_isa's level says: cpu_onednn.c, cpu_bf16.c) and OpenMP for the rest (kernels in cpu_kernels.inc, mixed precision in cpu_bf16.c,
 * float8 in cpu_fp8.c). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_fp8.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_pool.h"
#include "core/bigmem.h"
#include "core/cpu_isa.h"
#include "core/move.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>

/* cpu_kernels.h's check of an array a streaming kernel touches: a poisoned
 * byte in it is read here, where ASan sees the read and reports it (a
 * heap-buffer-overflow, a use after free) with the kernel's caller on the
 * stack. */
void cpu_san_span(const void *p, size_t bytes)
{
	const volatile char *bad = __asan_region_is_poisoned((void *)p, bytes);
	if (bad != NULL)
		(void)*bad;
}
#endif

/* Each block starts with a header that remembers its size, so free can count it
 * off; 64 keeps the data aligned for vector loads. */
#define CPU_HDR 64

/* The backend's own state: oneDNN's engine and primitives, made on the first
 * bfloat16 GEMM that goes to oneDNN (a float32 run never loads them), and the
 * cache of freed blocks. */
typedef struct cpu_state {
	cpu_onednn *dnnl;
	int dnnl_failed;
	char dnnl_refusal[160]; /* why oneDNN was given up for the portable path */
	int gemm_portable;	/* the last bf16 GEMM ran the portable path */
	void *scratch; /* cpu_scratch's block, backend memory */
	size_t scratch_bytes;
	cpu_pool pool;	   /* freed blocks for the next request of their size */
	int pool_off;	   /* TITAN_CPU_POOL=0: every free goes back to the C library */
	size_t live;	   /* bytes of the live blocks, headers included */
	size_t high_water; /* the most live ever held, never reset */
} cpu_state;

/* A block of total bytes (header included): a kept one of that size if the
 * pool has it.  Otherwise a new one; first the pool gives back what would
 * take the process past the most its live blocks ever held, so that the
 * pool adds nothing to the peak when the sizes change (a longer sequence,
 * MoE's token counts). */
static char *block_get(cpu_state *st, size_t total)
{
	char *p = cpu_pool_take(&st->pool, total);
	if (p)
		return p;
	size_t after = st->live + total;
	if (st->pool.bytes > 0 && after + st->pool.bytes > st->high_water)
		cpu_pool_trim(&st->pool, after < st->high_water ? st->high_water - after : 0);
	return bigmem_alloc(total); /* huge pages for big blocks: bigmem.h */
}

/* A block's size, its header included. */
static size_t block_bytes(size_t bytes)
{
	return (bytes + CPU_HDR + 63) / 64 * 64;
}

static void *cpu_alloc(backend *be, size_t bytes, titan_err *e)
{
	cpu_state *st = be->impl;
	size_t total = block_bytes(bytes);
	char *p = block_get(st, total);
	if (!p) {
		err_set(e, "cpu backend: out of memory allocating %zu bytes", bytes);
		return NULL;
	}
	memcpy(p, &bytes, sizeof bytes);
	be->bytes_in_use += bytes;
	if (be->bytes_in_use > be->peak_bytes)
		be->peak_bytes = be->bytes_in_use;
	st->live += total;
	if (st->live > st->high_water)
		st->high_water = st->live;
	return p + CPU_HDR;
}

/* The block goes to the pool while the pool would hold no more than the live
 * blocks' high-water mark (so at worst twice the peak is held, and in a
 * training loop, where every size comes back, about the peak itself). */
static void cpu_free(backend *be, void *p)
{
	if (!p)
		return;
	cpu_state *st = be->impl;
	char *base = (char *)p - CPU_HDR;
	size_t bytes;
	memcpy(&bytes, base, sizeof bytes);
	be->bytes_in_use -= bytes;
	size_t total = block_bytes(bytes);
	st->live -= total;
	if (st->pool_off || st->pool.bytes + total > st->high_water ||
	    cpu_pool_keep(&st->pool, base, total) != 0)
		free(base);
}

static void cpu_copy(backend *be, void *dst, const void *src, size_t bytes, int kind)
{
	(void)be;
	(void)kind;
	if (bytes)
		move_bytes(dst, src, bytes);
}

static void cpu_zero(backend *be, void *p, size_t bytes)
{
	(void)be;
	if (bytes)
		memset(p, 0, bytes);
}

static int cpu_sync(backend *be, titan_err *e)
{
	return backend_take_fault(be, e);
}

/* The element types of an op's float tensors decide its kernels: all float32,
 * the float32 kernels (cpu_kernels.inc, the exactness reference); float32 and
 * bfloat16 in any mix, the mixed kernels (cpu_bf16.c) and oneDNN's GEMMs;
 * anything else (float8) is not implemented here and faults. */
enum { ALL_F32, MIXED, UNSUPPORTED };

static int kinds(backend *be, const char *op, int n, ...)
{
	va_list ap;
	va_start(ap, n);
	int all32 = 1, ok = 1;
	for (int i = 0; i < n; i++) {
		int t = va_arg(ap, int);
		all32 &= t == BE_F32;
		ok &= t == BE_F32 || t == BE_BF16;
	}
	va_end(ap);
	if (!ok) {
		backend_fault(be, "cpu backend: %s: only float32 and bfloat16 tensors are implemented",
			      op);
		return UNSUPPORTED;
	}
	return all32 ? ALL_F32 : MIXED;
}

static void cpu_destroy(backend *be)
{
	cpu_state *st = be->impl;
	if (st) {
		cpu_onednn_free(st->dnnl);
		cpu_free(be, st->scratch);
		cpu_pool_release(&st->pool);
	}
	free(st);
	free(be);
}

void *cpu_scratch(backend *be, size_t bytes, const char *op)
{
	cpu_state *st = be->impl;
	if (bytes <= st->scratch_bytes)
		return st->scratch;
	cpu_free(be, st->scratch);
	st->scratch_bytes = 0;
	titan_err e = {0};
	if (!(st->scratch = cpu_alloc(be, bytes, &e))) {
		backend_fault(be, "cpu backend: %s: scratch: %s", op, e.msg);
		return NULL;
	}
	st->scratch_bytes = bytes;
	return st->scratch;
}

size_t cpu_scratch_bytes(const backend *be)
{
	const cpu_state *st = be->impl;
	return st->scratch_bytes;
}

size_t backend_cpu_cached_bytes(const backend *be)
{
	const cpu_state *st = be->impl;
	return st->pool.bytes;
}

const char *backend_cpu_bf16_gemm(const backend *be)
{
	const cpu_state *st = be->impl;
	if (st && st->gemm_portable)
		return st->dnnl_refusal[0] ? st->dnnl_refusal : "portable";
	return cpu_onednn_impl(st ? st->dnnl : NULL);
}

void backend_cpu_describe(char *buf, size_t n)
{
	char isa[256];
	cpu_isa_describe(isa, sizeof isa);
	snprintf(buf, n, "%s, OpenBLAS %s", isa, openblas_get_corename());
}

static void cpu_convert(backend *be, void *dst, be_dtype dt, const void *src, be_dtype st,
			int64_t n)
{
	if (st == BE_E4M3 || st == BE_E5M2)
		cpu_f8_decode(be, dst, dt, src, st, n);
	else if (kinds(be, "convert", 2, dt, st) != UNSUPPORTED)
		cpu_bf16_convert(dst, dt, src, st, n);
}

/* C = beta C in place: a product over k = 0. */
static void scale_c(int64_t m, int64_t n, float beta, void *c, int64_t ldc,
		    be_dtype ct)
{
	size_t es = be_dtype_size(ct);
	for (int64_t i = 0; i < m; i++) {
		void *row = (char *)c + (size_t)(i * ldc) * es;
		if (beta == 0)
			memset(row, 0, es * (size_t)n);
		else if (ct == BE_F32)
			cpu_scale_f32(row, beta, n);
		else
			cpu_bf16_scale(row, beta, n);
	}
}

static void cpu_matmul_bf16(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
			    float alpha, const void *a, int64_t lda, const void *b,
			    int64_t ldb, float beta, void *c, int64_t ldc, be_dtype ct)
{
	cpu_state *st = be->impl;
	titan_err e = {0};
	if (m == 0 || n == 0)
		return;
	if (k == 0) {
		scale_c(m, n, beta, c, ldc, ct);
		return;
	}
	if (cpu_isa_onednn_gemm() && !st->dnnl_failed) {
		if (!st->dnnl)
			st->dnnl = cpu_onednn_create(&e);
		if (st->dnnl && cpu_onednn_matmul(st->dnnl, ta, tb, m, n, k, alpha, a, lda, b, ldb,
						  beta, c, ldc, ct, &e) == 0) {
			st->gemm_portable = 0;
			return;
		}
		st->dnnl_failed = 1;
		/* A oneDNN that refuses (built or limited below the level, e.g. by
		 * ONEDNN_MAX_CPU_ISA) leaves the portable path for the rest of the
		 * run: one path for every shape, and the reason for the log. */
		snprintf(st->dnnl_refusal, sizeof st->dnnl_refusal,
			 "portable (oneDNN refused %lldx%lldx%lld: %s)", (long long)m,
			 (long long)n, (long long)k, e.msg);
	}
	st->gemm_portable = 1;
	cpu_bf16_matmul_portable(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ct);
}

static void cpu_matmul(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
		       float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
		       be_dtype ab, float beta, void *c, int64_t ldc, be_dtype ct)
{
	switch (kinds(be, "matmul", 2, ab, ct)) {
	case ALL_F32:
		cpu_matmul_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		break;
	case MIXED:
		if (ab == BE_BF16)
			cpu_matmul_bf16(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
					ct);
		else
			backend_fault(be, "cpu backend: matmul: float32 A and B with a bfloat16 C "
					  "is not implemented");
		break;
	}
}

static void cpu_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			    be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			    float eps)
{
	switch (kinds(be, "rmsnorm_fwd", 3, yt, xt, wt)) {
	case ALL_F32:
		cpu_rmsnorm_fwd_f32(y, rstd, x, w, n, d, eps);
		break;
	case MIXED:
		cpu_bf16_rmsnorm_fwd(be, y, yt, rstd, x, xt, w, wt, n, d, eps);
		break;
	}
}

static void cpu_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			    const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			    const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d)
{
	switch (kinds(be, "rmsnorm_bwd", 5, dxt, dwt, dyt, xt, wt)) {
	case ALL_F32:
		cpu_rmsnorm_bwd_f32(dx, dw, dy, x, w, rstd, n, d);
		break;
	case MIXED:
		cpu_bf16_rmsnorm_bwd(be, dx, dxt, dw, dwt, dy, dyt, x, xt, w, wt, rstd, n, d);
		break;
	}
}

static void cpu_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b,
		     int64_t t, int64_t h, int64_t hd, int style, int inverse)
{
	switch (kinds(be, "rope", 1, xt)) {
	case ALL_F32:
		if (style == BE_ROPE_HALF)
			cpu_rope_half_f32(x, cs, b, t, h, hd, inverse);
		else
			cpu_rope_f32(x, cs, b, t, h, hd, inverse);
		break;
	case MIXED:
		cpu_bf16_rope(be, x, xt, cs, b, t, h, hd, style, inverse);
		break;
	}
}

static void cpu_attention_fwd(backend *be, void *out, float *lse, const void *q,
			      const void *k, const void *v, const be_attn *a)
{
	switch (kinds(be, "attention_fwd", 2, a->qkv, a->out)) {
	case ALL_F32:
		cpu_attention_fwd_f32(out, lse, q, k, v, a);
		break;
	case MIXED:
		cpu_bf16_attention_fwd(be, out, lse, q, k, v, a);
		break;
	}
}

static void cpu_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			      const void *q, const void *k, const void *v, const void *out,
			      const float *lse, const be_attn *a)
{
	switch (kinds(be, "attention_bwd", 4, a->qkv, a->out, a->dout, a->grad)) {
	case ALL_F32:
		cpu_attention_bwd_f32(dq, dk, dv, dout, q, k, v, out, lse, a);
		break;
	case MIXED:
		cpu_bf16_attention_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, a);
		break;
	}
}

static void cpu_swiglu_fwd(backend *be, void *y, const void *a, const void *g, be_dtype t,
			   int64_t n)
{
	switch (kinds(be, "swiglu_fwd", 1, t)) {
	case ALL_F32:
		cpu_swiglu_fwd_f32(y, a, g, n);
		break;
	case MIXED:
		cpu_bf16_swiglu_fwd(y, a, g, n);
		break;
	}
}

static void cpu_swiglu_bwd(backend *be, void *da, void *dg, const void *dy, const void *a,
			   const void *g, be_dtype t, int64_t n)
{
	switch (kinds(be, "swiglu_bwd", 1, t)) {
	case ALL_F32:
		cpu_swiglu_bwd_f32(da, dg, dy, a, g, n);
		break;
	case MIXED:
		cpu_bf16_swiglu_bwd(da, dg, dy, a, g, n);
		break;
	}
}

static void cpu_swiglu_clamp_fwd(backend *be, void *y, const void *x, be_dtype t, int64_t n,
				 int64_t f, float alpha, float limit)
{
	switch (kinds(be, "swiglu_clamp_fwd", 1, t)) {
	case ALL_F32:
		cpu_swiglu_clamp_fwd_f32(y, x, n, f, alpha, limit);
		break;
	case MIXED:
		cpu_bf16_swiglu_clamp_fwd(y, x, n, f, alpha, limit);
		break;
	}
}

static void cpu_swiglu_clamp_bwd(backend *be, void *dx, const void *dy, const void *x,
				 be_dtype t, int64_t n, int64_t f, float alpha, float limit)
{
	switch (kinds(be, "swiglu_clamp_bwd", 1, t)) {
	case ALL_F32:
		cpu_swiglu_clamp_bwd_f32(dx, dy, x, n, f, alpha, limit);
		break;
	case MIXED:
		cpu_bf16_swiglu_clamp_bwd(dx, dy, x, n, f, alpha, limit);
		break;
	}
}

static void cpu_bias_add(backend *be, void *y, be_dtype yt, const void *bias, be_dtype bt,
			 int64_t rows, int64_t d, int64_t groups, const int32_t *offs)
{
	switch (kinds(be, "bias_add", 2, yt, bt)) {
	case ALL_F32:
		cpu_bias_add_f32(y, bias, rows, d, groups, offs);
		break;
	case MIXED:
		cpu_bf16_bias_add(y, yt, bias, bt, rows, d, groups, offs);
		break;
	}
}

static void cpu_bias_grad(backend *be, void *dbias, be_dtype bt, const void *dy, be_dtype dyt,
			  int64_t rows, int64_t d, int64_t groups, const int32_t *offs)
{
	switch (kinds(be, "bias_grad", 2, bt, dyt)) {
	case ALL_F32:
		cpu_bias_grad_f32(dbias, dy, rows, d, groups, offs);
		break;
	case MIXED:
		cpu_bf16_bias_grad(dbias, bt, dy, dyt, rows, d, groups, offs);
		break;
	}
}

static void cpu_heads_cat(backend *be, void *y, const void *x1, const void *x2, be_dtype t,
			  int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	switch (kinds(be, "heads_cat", 1, t)) {
	case ALL_F32:
		cpu_heads_cat_f32(y, x1, x2, n, h, d1, d2, h2);
		break;
	case MIXED:
		cpu_bf16_heads_cat(y, x1, x2, n, h, d1, d2, h2);
		break;
	}
}

static void cpu_heads_split(backend *be, void *x1, void *x2, const void *y, be_dtype t,
			    int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	switch (kinds(be, "heads_split", 1, t)) {
	case ALL_F32:
		cpu_heads_split_f32(x1, x2, y, n, h, d1, d2, h2);
		break;
	case MIXED:
		cpu_bf16_heads_split(x1, x2, y, n, h, d1, d2, h2);
		break;
	}
}

static void cpu_embedding_fwd(backend *be, void *out, be_dtype ot, const void *table,
			      be_dtype tt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv)
{
	switch (kinds(be, "embedding_fwd", 2, ot, tt)) {
	case ALL_F32:
		cpu_embedding_fwd_f32(out, table, ids, n, d, v0, nv);
		break;
	case MIXED:
		cpu_bf16_embedding_fwd(out, ot, table, tt, ids, n, d, v0, nv);
		break;
	}
}

static void cpu_embedding_bwd(backend *be, void *dtable, be_dtype tt, const void *dout,
			      be_dtype dt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv)
{
	switch (kinds(be, "embedding_bwd", 2, tt, dt)) {
	case ALL_F32:
		cpu_embedding_bwd_f32(dtable, dout, ids, n, d, v0, nv);
		break;
	case MIXED:
		cpu_bf16_embedding_bwd(dtable, tt, dout, dt, ids, n, d, v0, nv);
		break;
	}
}

static void cpu_cross_entropy(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			      int64_t n, int64_t v, int32_t ignore_index, float grad_scale,
			      double *loss_sum, int64_t *n_valid)
{
	switch (kinds(be, "cross_entropy", 1, lt)) {
	case ALL_F32:
		cpu_cross_entropy_f32(logits, labels, n, v, ignore_index, grad_scale, loss_sum,
				      n_valid);
		break;
	case MIXED:
		cpu_bf16_cross_entropy(be, logits, labels, n, v, ignore_index, grad_scale,
				       loss_sum, n_valid);
		break;
	}
}

/* The vocabulary-parallel loss on bfloat16 logits: in float32 on a copy. */
static float *logits_f32(backend *be, const void *logits, be_dtype lt, int64_t n)
{
	float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	if (!f)
		backend_fault(be, "cpu backend: ce_vocab: out of memory");
	else
		cpu_bf16_convert(f, BE_F32, logits, lt, n);
	return f;
}

static void cpu_ce_vocab_stats(backend *be, const void *logits, be_dtype lt,
			       const int32_t *labels, int64_t n, int64_t nv, int64_t v0,
			       float *stats)
{
	switch (kinds(be, "ce_vocab_stats", 1, lt)) {
	case ALL_F32:
		cpu_ce_vocab_stats_f32(logits, labels, n, nv, v0, stats);
		break;
	case MIXED: {
		float *f = logits_f32(be, logits, lt, n * nv);
		if (f)
			cpu_ce_vocab_stats_f32(f, labels, n, nv, v0, stats);
		free(f);
		break;
	}
	}
}

static void cpu_ce_vocab_loss(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			      int64_t n, int64_t nv, int64_t v0, int32_t ignore_index,
			      const float *all, int ranks, float grad_scale, double *loss_sum,
			      int64_t *n_valid)
{
	switch (kinds(be, "ce_vocab_loss", 1, lt)) {
	case ALL_F32:
		cpu_ce_vocab_loss_f32(logits, labels, n, nv, v0, ignore_index, all, ranks,
				      grad_scale, loss_sum, n_valid);
		break;
	case MIXED: {
		float *f = logits_f32(be, logits, lt, n * nv);
		if (!f)
			break;
		cpu_ce_vocab_loss_f32(f, labels, n, nv, v0, ignore_index, all, ranks, grad_scale,
				      loss_sum, n_valid);
		if (grad_scale != 0)
			cpu_bf16_convert(logits, lt, f, BE_F32, n * nv);
		free(f);
		break;
	}
	}
}

static void cpu_add(backend *be, void *y, be_dtype yt, const void *a, be_dtype at,
		    const void *b, be_dtype bt, int64_t n)
{
	switch (kinds(be, "add", 3, yt, at, bt)) {
	case ALL_F32:
		cpu_add_f32(y, a, b, n);
		break;
	case MIXED:
		cpu_bf16_add(y, yt, a, at, b, bt, n);
		break;
	}
}

static void cpu_axpy(backend *be, void *y, be_dtype yt, float alpha, const void *x,
		     be_dtype xt, int64_t n)
{
	switch (kinds(be, "axpy", 2, yt, xt)) {
	case ALL_F32:
		cpu_axpy_f32(y, alpha, x, n);
		break;
	case MIXED:
		cpu_bf16_axpy(y, yt, alpha, x, xt, n);
		break;
	}
}

static void cpu_lerp(backend *be, float *x, const float *end, float w, int64_t n)
{
	(void)be;
	cpu_lerp_f32(x, end, w, n);
}

static void cpu_adamw_bf16_states(backend *be, float *p, const float *g, void *m, void *v,
				  int64_t n, double lr, double b1, double b2, double eps, double wd,
				  double bc1, double bc2)
{
	(void)be;
	const float k[7] = {(float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (float)bc1,
			    (float)sqrt(bc2)};
	cpu_bf16_adamw_states(p, g, m, v, n, k);
}

static void cpu_scale(backend *be, void *x, be_dtype xt, float alpha, int64_t n)
{
	switch (kinds(be, "scale", 1, xt)) {
	case ALL_F32:
		cpu_scale_f32(x, alpha, n);
		break;
	case MIXED:
		cpu_bf16_scale(x, alpha, n);
		break;
	}
}

static double cpu_sumsq(backend *be, const void *x, be_dtype xt, int64_t n)
{
	switch (kinds(be, "sumsq", 1, xt)) {
	case ALL_F32:
		return cpu_sumsq_f32(x, n);
	case MIXED:
		return cpu_bf16_sumsq(x, n);
	}
	return 0;
}

static void cpu_adamw(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
		      int64_t n, double lr, double b1, double b2, double eps, double wd, double bc1,
		      double bc2)
{
	cpu_adamw_consts c = cpu_adamw_consts_of(lr, b1, b2, eps, wd, bc1, bc2);
	switch (kinds(be, "adamw", 1, t)) {
	case ALL_F32:
		cpu_adamw_f32(p, g, m, v, n, &c);
		break;
	case MIXED:
		cpu_bf16_adamw(p, g, m, v, n, &c);
		break;
	}
}

/* ---- fused ops: the plain kernels one after another, the reference the
 * CUDA backend's fused kernels are tested against (equal to the plain ops'
 * sequence in the model bit for bit) ---- */

static void cpu_rmsnorm_add_fwd(backend *be, void *y, be_dtype yt, float *rstd, void *res,
				be_dtype rt, const void *x, const void *delta, be_dtype dt,
				const void *w, be_dtype wt, int64_t n, int64_t d, float eps)
{
	cpu_add(be, res, rt, x, rt, delta, dt, n * d);
	cpu_rmsnorm_fwd(be, y, yt, rstd, res, rt, w, wt, n, d, eps);
}

/* The norm's gradient in dx, or in a temporary when dx is dres; then added. */
static void cpu_rmsnorm_add_bwd(backend *be, void *dx, be_dtype dxt, const void *dres, void *dw,
				be_dtype dwt, const void *dy, be_dtype dyt, const void *x,
				be_dtype xt, const void *w, be_dtype wt, const float *rstd,
				int64_t n, int64_t d)
{
	titan_err e = {0};
	void *g = dx;
	if (dx == dres && !(g = cpu_alloc(be, (size_t)(n * d) * be_dtype_size(dxt), &e))) {
		backend_fault(be, "cpu backend: rmsnorm_add_bwd: %s", e.msg);
		return;
	}
	cpu_rmsnorm_bwd(be, g, dxt, dw, dwt, dy, dyt, x, xt, w, wt, rstd, n, d);
	cpu_axpy(be, dx, dxt, 1, g == dx ? dres : g, dxt, n * d);
	if (g != dx)
		cpu_free(be, g);
}

static void cpu_rope_qkv(backend *be, void *q, void *k, void *v, const void *qkv, be_dtype xt,
			 const float *cs, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			 int style)
{
	switch (kinds(be, "rope_qkv", 1, xt)) {
	case ALL_F32:
		cpu_rope_qkv_f32(q, k, v, qkv, cs, b, t, h, hkv, hd, style);
		break;
	case MIXED:
		cpu_bf16_rope_qkv(be, q, k, v, qkv, cs, b, t, h, hkv, hd, style);
		break;
	}
}

static void cpu_rope_qkv_bwd(backend *be, void *dqkv, const void *dq, const void *dk,
			     const void *dv, be_dtype xt, const float *cs, int64_t b, int64_t t,
			     int64_t h, int64_t hkv, int64_t hd, int style)
{
	switch (kinds(be, "rope_qkv_bwd", 1, xt)) {
	case ALL_F32:
		cpu_rope_qkv_bwd_f32(dqkv, dq, dk, dv, cs, b, t, h, hkv, hd, style);
		break;
	case MIXED:
		cpu_bf16_rope_qkv_bwd(be, dqkv, dq, dk, dv, cs, b, t, h, hkv, hd, style);
		break;
	}
}

/* The model's head, chunk by chunk: logits, loss (and gradient), dh, dw. */
static void cpu_lm_head_loss(backend *be, const void *h, const void *w, be_dtype t,
			     const int32_t *labels, int64_t n, int64_t d, int64_t v,
			     int32_t ignore_index, const float *grad_scale, void *dh, be_dtype dht,
			     void *dw, be_dtype dwt, void *logits, int64_t chunk,
			     double *loss_sum, int64_t *n_valid)
{
	size_t es = be_dtype_size(t), ds = be_dtype_size(dht);
	float scale = grad_scale ? *grad_scale : 0;
	if (chunk < 1) {
		backend_fault(be, "cpu backend: lm_head_loss: chunk %lld", (long long)chunk);
		return;
	}
	for (int64_t r0 = 0; r0 < n; r0 += chunk) {
		int64_t c = n - r0 < chunk ? n - r0 : chunk;
		const void *hc = (const char *)h + (size_t)(r0 * d) * es;
		void *dhc = grad_scale ? (char *)dh + (size_t)(r0 * d) * ds : NULL;
		cpu_matmul(be, 0, 1, c, v, d, 1, hc, d, w, d, t, 0, logits, v, t);
		cpu_cross_entropy(be, logits, t, labels + r0, c, v, ignore_index, scale, loss_sum,
				  n_valid);
		if (!grad_scale)
			continue;
		if (scale == 0) { /* a zero gradient: the logits hold no gradient to multiply */
			memset(dhc, 0, (size_t)(c * d) * ds);
			continue;
		}
		cpu_matmul(be, 0, 0, c, d, v, 1, logits, v, w, d, t, 0, dhc, d, dht);
		cpu_matmul(be, 1, 0, v, d, c, 1, logits, v, hc, d, t, 1, dw, d, dwt);
	}
}

static void cpu_sumsq_dev(backend *be, double *out, const void *x, be_dtype xt, int64_t n)
{
	*out = cpu_sumsq(be, x, xt, n);
}

/* clip_grad_norm_'s factor as grad_clip_scale computes it (in double). */
static void cpu_clip_factor(backend *be, be_adamw_step *st, const double *sumsq, float max_norm)
{
	(void)be;
	double norm = sqrt(*sumsq), coef = max_norm / (norm + 1e-6);
	st->norm = (float)norm;
	st->clip = max_norm > 0 && coef < 1 ? (float)coef : 1.0f;
}

static void cpu_adamw_multi(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
			    const be_span *spans, int nspans, const be_adamw_step *st)
{
	int kind = kinds(be, "adamw_multi", 1, t);
	size_t es = be_dtype_size(t);
	for (int i = 0; kind != UNSUPPORTED && i < nspans; i++) {
		cpu_adamw_consts c = cpu_adamw_consts_of(st->lr, st->b1, st->b2, st->eps, spans[i].wd,
							 st->bc1, st->bc2);
		c.clip = st->clip;
		size_t off = (size_t)spans[i].offset * es;
		void *pi = (char *)p + off, *mi = (char *)m + off, *vi = (char *)v + off;
		const void *gi = (const char *)g + off;
		if (kind == ALL_F32)
			cpu_adamw_f32(pi, gi, mi, vi, spans[i].n, &c);
		else
			cpu_bf16_adamw(pi, gi, mi, vi, spans[i].n, &c);
	}
}

static void cpu_moe_route(backend *be, float *scores, int32_t *idx, float *w, const void *logits,
			  be_dtype lt, const float *bias, const be_moe *r)
{
	switch (kinds(be, "moe_route", 1, lt)) {
	case ALL_F32:
		cpu_moe_route_f32(scores, idx, w, logits, bias, r);
		break;
	case MIXED:
		cpu_bf16_moe_route(be, scores, idx, w, logits, bias, r);
		break;
	}
}

static void cpu_moe_route_bwd(backend *be, void *dlogits, be_dtype lt, const float *dw,
			      const float *scores, const int32_t *idx, const be_moe *r)
{
	switch (kinds(be, "moe_route_bwd", 1, lt)) {
	case ALL_F32:
		cpu_moe_route_bwd_f32(dlogits, dw, scores, idx, r);
		break;
	case MIXED:
		cpu_bf16_moe_route_bwd(be, dlogits, dw, scores, idx, r);
		break;
	}
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
	switch (kinds(be, "moe_gather", 1, t)) {
	case ALL_F32:
		cpu_moe_gather_f32(y, x, perm, offs, w, r, d);
		break;
	case MIXED:
		cpu_bf16_moe_gather(y, x, perm, offs, w, r, d);
		break;
	}
}

static void cpu_moe_combine(backend *be, void *out, const void *y, be_dtype t, const int32_t *pos,
			    const float *w, float beta, const be_moe *r, int64_t d)
{
	switch (kinds(be, "moe_combine", 1, t)) {
	case ALL_F32:
		cpu_moe_combine_f32(out, y, pos, w, beta, r, d);
		break;
	case MIXED:
		cpu_bf16_moe_combine(out, y, pos, w, beta, r, d);
		break;
	}
}

static void cpu_moe_dot(backend *be, float *dw, const void *y, const void *x, be_dtype t,
			const int32_t *pos, const be_moe *r, int64_t d)
{
	switch (kinds(be, "moe_dot", 1, t)) {
	case ALL_F32:
		cpu_moe_dot_f32(dw, y, x, pos, r, d);
		break;
	case MIXED:
		cpu_bf16_moe_dot(dw, y, x, pos, r, d);
		break;
	}
}

/* The grouped products in bf16: one oneDNN GEMM a group (torch._grouped_mm's
 * bf16 operands, float32 accumulation), each group's rows a contiguous block. */
static void grouped_matmul_bf16(backend *be, int mode, int64_t groups, const int32_t *offs,
				int64_t rows, int64_t nn, int64_t kk, const void *a,
				const void *b, float beta, void *c, be_dtype ct)
{
	size_t cs = be_dtype_size(ct);
	for (int64_t g = 0; g < groups; g++) {
		int64_t r0 = offs[g], m = offs[g + 1] - r0;
		const char *bg = (const char *)b + (size_t)(g * nn * kk) * 2;
		if (mode == BE_GMM_DW) /* C_g (nn, kk) = beta C_g + A_g^T B_g */
			cpu_matmul_bf16(be, 1, 0, nn, kk, m, 1, (const char *)a + (size_t)(r0 * nn) * 2,
					nn, (const char *)b + (size_t)(r0 * kk) * 2, kk, beta,
					(char *)c + (size_t)(g * nn * kk) * cs, kk, ct);
		else if (mode == BE_GMM_FWD) /* C_g (m, nn) = A_g (m, kk) B_g^T */
			cpu_matmul_bf16(be, 0, 1, m, nn, kk, 1, (const char *)a + (size_t)(r0 * kk) * 2,
					kk, bg, kk, beta, (char *)c + (size_t)(r0 * nn) * cs, nn, ct);
		else /* DX: C_g (m, kk) = A_g (m, nn) B_g */
			cpu_matmul_bf16(be, 0, 0, m, kk, nn, 1, (const char *)a + (size_t)(r0 * nn) * 2,
					nn, bg, kk, beta, (char *)c + (size_t)(r0 * kk) * cs, kk, ct);
	}
	if (mode != BE_GMM_DW && beta == 0)
		cpu_bf16_zero_rows(c, ct, offs[groups], rows, mode == BE_GMM_FWD ? nn : kk);
}

static void cpu_grouped_matmul(backend *be, int mode, int64_t groups, const int32_t *offs,
			       int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
			       be_dtype ab, float beta, void *c, be_dtype ct)
{
	switch (kinds(be, "grouped_matmul", 2, ab, ct)) {
	case ALL_F32:
		cpu_grouped_matmul_f32(mode, groups, offs, rows, nn, kk, a, b, beta, c);
		break;
	case MIXED:
		if (ab == BE_BF16)
			grouped_matmul_bf16(be, mode, groups, offs, rows, nn, kk, a, b, beta, c, ct);
		else
			backend_fault(be, "cpu backend: grouped_matmul: float32 A and B with a "
					  "bfloat16 C is not implemented");
		break;
	}
}

/* ---- Flux's encoders and autoencoder ---- */

static void cpu_t5_attention(backend *be, void *out, const void *q, const void *k, const void *v,
			     const void *bias, be_dtype t, int64_t b, int64_t l, int64_t h,
			     int64_t dk)
{
	switch (kinds(be, "t5_attention", 1, t)) {
	case ALL_F32:
		cpu_t5_attention_f32(out, q, k, v, bias, b, l, h, dk, 0);
		break;
	case MIXED:
		cpu_bf16_t5_attention(be, out, q, k, v, bias, b, l, h, dk);
		break;
	}
}

static void cpu_geglu_fwd(backend *be, void *y, const void *a, const void *g, be_dtype t,
			  int64_t n)
{
	switch (kinds(be, "geglu_fwd", 1, t)) {
	case ALL_F32:
		cpu_geglu_fwd_f32(y, a, g, n, 0);
		break;
	case MIXED:
		cpu_bf16_geglu_fwd(y, a, g, n);
		break;
	}
}

static void cpu_swish(backend *be, void *x, be_dtype t, float beta, int64_t n)
{
	switch (kinds(be, "swish", 1, t)) {
	case ALL_F32:
		cpu_swish_f32(x, beta, n, 0);
		break;
	case MIXED:
		cpu_bf16_swish(x, beta, n);
		break;
	}
}

static void cpu_layernorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			      const void *w, const void *b, be_dtype wt, int64_t n, int64_t d,
			      float eps)
{
	switch (kinds(be, "layernorm_fwd", 3, yt, xt, wt)) {
	case ALL_F32:
		cpu_layernorm_fwd_f32(y, x, w, b, n, d, eps);
		break;
	case MIXED:
		cpu_bf16_layernorm_fwd(be, y, yt, x, xt, w, b, wt, n, d, eps);
		break;
	}
}

static void cpu_groupnorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			      const void *w, const void *b, be_dtype wt, int64_t n, int64_t c,
			      int64_t hw, int64_t groups, float eps)
{
	if (groups < 1 || c % groups != 0) {
		backend_fault(be, "cpu backend: groupnorm_fwd: %lld channels in %lld groups",
			      (long long)c, (long long)groups);
		return;
	}
	switch (kinds(be, "groupnorm_fwd", 3, yt, xt, wt)) {
	case ALL_F32:
		cpu_groupnorm_fwd_f32(y, x, w, b, n, c, hw, groups, eps);
		break;
	case MIXED:
		cpu_bf16_groupnorm_fwd(be, y, yt, x, xt, w, b, wt, n, c, hw, groups, eps);
		break;
	}
}

static void cpu_upsample2x(backend *be, void *y, const void *x, be_dtype t, int64_t n, int64_t c,
			   int64_t h, int64_t w)
{
	switch (kinds(be, "upsample2x", 1, t)) {
	case ALL_F32:
		cpu_upsample2x_f32(y, x, n, c, h, w);
		break;
	case MIXED:
		cpu_upsample2x_bf16(y, x, n, c, h, w);
		break;
	}
}

static void cpu_im2col(backend *be, void *cols, const void *x, be_dtype t, int64_t n, int64_t c,
		       int64_t h, int64_t w, int64_t k, int64_t stride, const int64_t pad[4],
		       int64_t p0, int64_t np)
{
	int64_t hp = h + pad[2] + pad[3], wp = w + pad[0] + pad[1];
	if (k < 1 || stride < 1 || pad[0] < 0 || pad[1] < 0 || pad[2] < 0 || pad[3] < 0 ||
	    hp < k || wp < k || p0 < 0 || np < 0 ||
	    p0 + np > ((hp - k) / stride + 1) * ((wp - k) / stride + 1)) {
		backend_fault(be, "cpu backend: im2col: kernel %lld, stride %lld over %lldx%lld "
				  "padded by (%lld, %lld, %lld, %lld), output pixels %lld + %lld",
			      (long long)k, (long long)stride, (long long)h, (long long)w,
			      (long long)pad[0], (long long)pad[1], (long long)pad[2],
			      (long long)pad[3], (long long)p0, (long long)np);
		return;
	}
	switch (kinds(be, "im2col", 1, t)) {
	case ALL_F32:
		cpu_im2col_f32(cols, x, n, c, h, w, k, stride, pad, p0, np);
		break;
	case MIXED:
		cpu_im2col_bf16(cols, x, n, c, h, w, k, stride, pad, p0, np);
		break;
	}
}

/* ---- the Flux transformer's training ops (float32 or bfloat16) ---- */

/* t is float32 or bfloat16 and the rows' shape fits (ld 0: an elementwise
 * op), else a fault naming op. */
static int fluxt_ok(backend *be, const char *op, be_dtype t, int64_t ld, int64_t b, int64_t n,
		    int64_t d)
{
	if (t != BE_F32 && t != BE_BF16) {
		backend_fault(be, "cpu backend: %s: %s tensors are not implemented (float32, "
				  "bfloat16)", op, be_dtype_name(t));
		return 0;
	}
	if (ld == 0 && d < 0) {
		backend_fault(be, "cpu backend: %s: %lld values", op, (long long)d);
		return 0;
	}
	if (b < 0 || n < 1 || d < 0 || (ld != 0 && ld < d)) {
		backend_fault(be, "cpu backend: %s: %lld samples of %lld rows of %lld, vectors %lld "
				  "apart", op, (long long)b, (long long)n, (long long)d, (long long)ld);
		return 0;
	}
	return 1;
}

static void cpu_ln_mod_fwd(backend *be, void *y, float *stats, const void *x, const void *shift,
			   const void *scale, be_dtype t, int64_t ld, int64_t b, int64_t n,
			   int64_t d, float eps)
{
	if (!fluxt_ok(be, "ln_mod_fwd", t, ld, b, n, d))
		return;
	if (t == BE_BF16)
		cpu_bf16_ln_mod_fwd(y, stats, x, shift, scale, ld, b, n, d, eps);
	else
		cpu_ln_mod_fwd_f32(y, stats, x, shift, scale, ld, b, n, d, eps);
}

static void cpu_ln_mod_bwd(backend *be, void *dx, void *dshift, void *dscale, const void *dy,
			   const void *x, const float *stats, const void *scale, be_dtype t,
			   int64_t ld, int64_t b, int64_t n, int64_t d)
{
	if (!fluxt_ok(be, "ln_mod_bwd", t, ld, b, n, d))
		return;
	if (t == BE_BF16)
		cpu_bf16_ln_mod_bwd(dx, dshift, dscale, dy, x, stats, scale, ld, b, n, d);
	else
		cpu_ln_mod_bwd_f32(dx, dshift, dscale, dy, x, stats, scale, ld, b, n, d);
}

static void cpu_gate_add(backend *be, void *x, const void *gate, const void *y, be_dtype t,
			 int64_t ld, int64_t b, int64_t n, int64_t d)
{
	if (!fluxt_ok(be, "gate_add", t, ld, b, n, d))
		return;
	if (t == BE_BF16)
		cpu_bf16_gate_add(x, gate, y, ld, b, n, d);
	else
		cpu_gate_add_f32(x, gate, y, ld, b, n, d);
}

static void cpu_gate_add_bwd(backend *be, void *dgate, void *dy, const void *dx, const void *gate,
			     const void *y, be_dtype t, int64_t ld, int64_t b, int64_t n, int64_t d)
{
	if (!fluxt_ok(be, "gate_add_bwd", t, ld, b, n, d))
		return;
	if (t == BE_BF16)
		cpu_bf16_gate_add_bwd(dgate, dy, dx, gate, y, ld, b, n, d);
	else
		cpu_gate_add_bwd_f32(dgate, dy, dx, gate, y, ld, b, n, d);
}

static void cpu_gelu_tanh_fwd(backend *be, void *y, const void *x, be_dtype t, int64_t n)
{
	if (!fluxt_ok(be, "gelu_tanh_fwd", t, 0, 1, 1, n))
		return;
	if (t == BE_BF16)
		cpu_bf16_gelu_tanh_fwd(y, x, n);
	else
		cpu_gelu_tanh_fwd_f32(y, x, n);
}

static void cpu_gelu_tanh_bwd(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			      int64_t n)
{
	if (!fluxt_ok(be, "gelu_tanh_bwd", t, 0, 1, 1, n))
		return;
	if (t == BE_BF16)
		cpu_bf16_gelu_tanh_bwd(dx, dy, x, n);
	else
		cpu_gelu_tanh_bwd_f32(dx, dy, x, n);
}

static void cpu_silu_fwd(backend *be, void *y, const void *x, be_dtype t, int64_t n)
{
	if (!fluxt_ok(be, "silu_fwd", t, 0, 1, 1, n))
		return;
	if (t == BE_BF16)
		cpu_bf16_silu_fwd(y, x, n);
	else
		cpu_silu_fwd_f32(y, x, n);
}

static void cpu_silu_bwd(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			 int64_t n)
{
	if (!fluxt_ok(be, "silu_bwd", t, 0, 1, 1, n))
		return;
	if (t == BE_BF16)
		cpu_bf16_silu_bwd(dx, dy, x, n);
	else
		cpu_silu_bwd_f32(dx, dy, x, n);
}

static void cpu_flow_mse(backend *be, void *grad, const void *pred, const void *x,
			 const void *noise, be_dtype t, int64_t n, float grad_scale,
			 double *loss_sum, int64_t *count)
{
	if (!fluxt_ok(be, "flow_mse", t, 0, 1, 1, n))
		return;
	*loss_sum += t == BE_BF16 ? cpu_bf16_flow_mse(grad, pred, x, noise, n, grad_scale)
				  : cpu_flow_mse_f32(grad, pred, x, noise, n, grad_scale);
	*count += n;
}

static void cpu_conv_bias(backend *be, void *y, const void *b, be_dtype t, int64_t n, int64_t c,
			  int64_t hw)
{
	switch (kinds(be, "conv_bias", 1, t)) {
	case ALL_F32:
		cpu_conv_bias_f32(y, b, n, c, hw);
		break;
	case MIXED:
		cpu_conv_bias_bf16(y, b, n, c, hw);
		break;
	}
}

static void cpu_softmax_exp(backend *be, void *e, be_dtype et, float *sum, const float *s,
			    int64_t rows, int64_t n)
{
	if (n < 1) {
		backend_fault(be, "cpu backend: softmax_exp: rows of %lld scores", (long long)n);
		return;
	}
	switch (kinds(be, "softmax_exp", 1, et)) {
	case ALL_F32:
		cpu_softmax_exp_f32(e, sum, s, rows, n, 0);
		break;
	case MIXED:
		cpu_bf16_softmax_exp(be, e, sum, s, rows, n);
		break;
	}
}

static void cpu_div_rows(backend *be, void *y, be_dtype yt, const float *x, const float *sum,
			 int64_t rows, int64_t d)
{
	switch (kinds(be, "div_rows", 1, yt)) {
	case ALL_F32:
		cpu_div_rows_f32(y, x, sum, rows, d);
		break;
	case MIXED:
		cpu_bf16_div_rows(be, y, x, sum, rows, d);
		break;
	}
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
	.swiglu_clamp_fwd = cpu_swiglu_clamp_fwd,
	.swiglu_clamp_bwd = cpu_swiglu_clamp_bwd,
	.bias_add = cpu_bias_add,
	.bias_grad = cpu_bias_grad,
	.heads_cat = cpu_heads_cat,
	.heads_split = cpu_heads_split,
	.embedding_fwd = cpu_embedding_fwd,
	.embedding_bwd = cpu_embedding_bwd,
	.cross_entropy = cpu_cross_entropy,
	.ce_vocab_stats = cpu_ce_vocab_stats,
	.ce_vocab_loss = cpu_ce_vocab_loss,
	.moe_route = cpu_moe_route,
	.moe_route_bwd = cpu_moe_route_bwd,
	.moe_permute = cpu_moe_permute,
	.moe_gather = cpu_moe_gather,
	.moe_combine = cpu_moe_combine,
	.moe_dot = cpu_moe_dot,
	.grouped_matmul = cpu_grouped_matmul,
	.f8_amax = cpu_f8_amax,
	.f8_cast = cpu_f8_cast,
	.f8_matmul = cpu_f8_matmul,
	.f8_grouped_matmul = cpu_f8_grouped_matmul,
	.add = cpu_add,
	.axpy = cpu_axpy,
	.scale = cpu_scale,
	.lerp = cpu_lerp,
	.sumsq = cpu_sumsq,
	.adamw = cpu_adamw,
	.adamw_bf16_states = cpu_adamw_bf16_states,
	.rmsnorm_add_fwd = cpu_rmsnorm_add_fwd,
	.rmsnorm_add_bwd = cpu_rmsnorm_add_bwd,
	.rope_qkv = cpu_rope_qkv,
	.rope_qkv_bwd = cpu_rope_qkv_bwd,
	.lm_head_loss = cpu_lm_head_loss,
	.sumsq_dev = cpu_sumsq_dev,
	.clip_factor = cpu_clip_factor,
	.adamw_multi = cpu_adamw_multi,
	.t5_attention = cpu_t5_attention,
	.geglu_fwd = cpu_geglu_fwd,
	.swish = cpu_swish,
	.layernorm_fwd = cpu_layernorm_fwd,
	.groupnorm_fwd = cpu_groupnorm_fwd,
	.upsample2x = cpu_upsample2x,
	.im2col = cpu_im2col,
	.ln_mod_fwd = cpu_ln_mod_fwd,
	.ln_mod_bwd = cpu_ln_mod_bwd,
	.gate_add = cpu_gate_add,
	.gate_add_bwd = cpu_gate_add_bwd,
	.gelu_tanh_fwd = cpu_gelu_tanh_fwd,
	.gelu_tanh_bwd = cpu_gelu_tanh_bwd,
	.silu_fwd = cpu_silu_fwd,
	.silu_bwd = cpu_silu_bwd,
	.flow_mse = cpu_flow_mse,
	.conv_bias = cpu_conv_bias,
	.softmax_exp = cpu_softmax_exp,
	.div_rows = cpu_div_rows,
};

backend *backend_cpu_create(int threads, titan_err *e)
{
	backend *be = calloc(1, sizeof *be);
	if (!be) {
		err_set(e, "cpu backend: out of memory");
		return NULL;
	}
	be->ops = &cpu_ops;
	be->impl = calloc(1, sizeof(cpu_state));
	if (!be->impl) {
		free(be);
		err_set(e, "cpu backend: out of memory");
		return NULL;
	}
	const char *pool = getenv("TITAN_CPU_POOL");
	((cpu_state *)be->impl)->pool_off = pool != NULL && strcmp(pool, "0") == 0;
	if (threads > 0)
		omp_set_num_threads(threads);
	/* OpenBLAS works single-threaded inside OpenMP's blocks (cpu_matmul). */
	openblas_set_num_threads(1);
	/* before any GEMM of either type reaches oneDNN (cpu_bf16.h) */
	cpu_onednn_limit(cpu_isa_level());
	be->threads = threads > 0 ? threads : omp_get_max_threads();
	return be;
}
