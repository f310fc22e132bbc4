/* The CPU backend's ops over bfloat16 tensors (cpu_bf16.h), in float32: rows
 * and chunks are converted to float32 in buffers that stay in the L1 cache,
 * computed by the float32 kernels' own row functions where there is one (so a
 * bf16 result is the float32 op's result rounded once), and rounded to nearest
 * even where they are stored.  Attention runs the float32 kernel on one
 * (batch, kv head) group at a time, converted.
 *
 * Work is split as in cpu_kernels.inc: fixed chunks or rows whatever the
 * threads, reductions in a fixed order, so results repeat bit for bit. */

/* As cpu_f32.c: lets GCC vectorise the compares of cpu_exp_f32. */
#if defined(__GNUC__) && !defined(__clang__)
/* fp-contract=off restated: the optimize pragma resets it to GCC's own
 * default (fast), and the x86-64-v3/v4 builds of the hot kernels would then
 * fuse multiply-adds the baseline build cannot, giving other bits. */
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"
#include "core/move.h"

/* Elements per chunk of the elementwise ops: a few float32 buffers of this
 * size live on each thread's stack. */
#define CHUNK 1024
/* Columns per block of the weight-gradient reductions, as cpu_kernels.inc. */
#define COL_BLOCK 64

static inline __attribute__((always_inline)) size_t esize(be_dtype t)
{
	return t == BE_BF16 ? 2 : 4;
}

static inline const void *elem(const void *p, be_dtype t, int64_t i)
{
	return (const char *)p + (size_t)i * esize(t);
}

static inline void *elem_mut(void *p, be_dtype t, int64_t i)
{
	return (char *)p + (size_t)i * esize(t);
}

static inline int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* n elements of src (type t) as float32: src itself when it is float32,
 * otherwise converted into buf. */
CPU_STREAM(static, const float *, load, (float *restrict buf, const void *src, be_dtype t, int64_t n), (buf, src, t, n))
{
	if (t == BE_F32)
		return src;
	cpu_san_span(buf, (size_t)n * sizeof *buf);
	cpu_san_span(src, (size_t)n * 2);
	const uint16_t *restrict s = src;
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		buf[i] = bf16_to_f32(s[i]);
	return buf;
}

/* load for an argument updated in place: the float32 values to change, then
 * put back with store. */
static inline float *fetch(float *restrict buf, void *p, be_dtype t, int64_t n)
{
	return t == BE_F32 ? p : (float *)load(buf, p, t, n);
}

/* Where to compute n values bound for dst (type t): dst itself when it is
 * float32, otherwise buf (store then rounds them into dst). */
static inline float *place(float *buf, void *dst, be_dtype t)
{
	return t == BE_F32 ? dst : buf;
}

CPU_STREAM_VOID(static, store, (void *dst, be_dtype t, const float *src, int64_t n), (dst, t, src, n))
{
	if (t == BE_F32) {
		if (dst != src)
			memcpy(dst, src, sizeof(float) * (size_t)n);
		return;
	}
	cpu_san_span(dst, (size_t)n * 2);
	cpu_san_span(src, (size_t)n * sizeof *src);
	uint16_t *restrict d = dst;
	const float *restrict s = src;
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		d[i] = bf16_from_f32(s[i]);
}

/* Threads a parallel loop over `work` elements runs on (its `if` clause). */
static int threads_for(int64_t work)
{
	return work > CPU_PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
}

/* This thread's block of `per` floats in a scratch laid out one block a thread. */
static inline float *scratch_of(float *s, int64_t per)
{
	return s + (size_t)per * (size_t)omp_get_thread_num();
}

/* One row or chunk converted between element types, on this thread. */
CPU_STREAM_VOID(static, convert_span, (void *dst, be_dtype dt, const void *src, be_dtype st, int64_t n), (dst, dt, src, st, n))
{
	if (dt == st) {
		move_bytes(dst, src, (size_t)n * esize(dt));
	} else if (dt == BE_BF16) {
		store(dst, dt, src, n);
	} else {
		cpu_san_span(dst, (size_t)n * sizeof(float));
		cpu_san_span(src, (size_t)n * 2);
		float *restrict d = dst;
		const uint16_t *restrict s = src;
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			d[i] = bf16_to_f32(s[i]);
	}
}

void cpu_bf16_convert(void *dst, be_dtype dt, const void *src, be_dtype st, int64_t n)
{
	const int64_t piece = 16384;
	int64_t np = (n + piece - 1) / piece;
#pragma omp parallel for schedule(dynamic, 4) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < np; c++) {
		int64_t i0 = c * piece;
		convert_span(elem_mut(dst, dt, i0), dt, elem(src, st, i0), st,
			     min64(piece, n - i0));
	}
}

/* ---- norms ---- */

/* A norm's scratch: w (d) as float32 (w itself, or converted at the start of
 * the scratch) into *wf, then `rows` rows of d floats for each thread (*rows).
 * -1 when the scratch could not be had (a fault). */
static int norm_scratch(backend *be, const char *op, const void *w, be_dtype wt, int64_t n,
			int64_t d, int rows_per_thread, const float **wf, float **rows)
{
	int nt = threads_for(n * d);
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(d + rows_per_thread * d * nt), op);
	if (!s)
		return -1;
	*wf = load(s, w, wt, d);
	*rows = s + d;
	return 0;
}

void cpu_bf16_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			  be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			  float eps)
{
	const float *wf;
	float *rows;
	if (norm_scratch(be, "rmsnorm_fwd", w, wt, n, d, 2, &wf, &rows) < 0)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (n * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float *bx = scratch_of(rows, 2 * d), *by = bx + d;
		void *yi = elem_mut(y, yt, i * d);
		float *py = place(by, yi, yt);
		rstd[i] = cpu_rmsnorm_fwd_row_f32(py, load(bx, elem(x, xt, i * d), xt, d), wf, d,
						  eps);
		store(yi, yt, py, d);
	}
}

/* dw[j0..j0+nj) += sum over rows of dy x rstd, the rows in order (as the
 * float32 kernel, whose sums this repeats). */
CPU_HOT_VOID(static, rmsnorm_dw_block, (void *dw, be_dtype dwt, const void *dy, be_dtype dyt, const void *x, be_dtype xt, const float *rstd, int64_t n, int64_t d, int64_t j0, int64_t nj), (dw, dwt, dy, dyt, x, xt, rstd, n, d, j0, nj))
{
	float acc[COL_BLOCK] = {0}, bx[COL_BLOCK], bdy[COL_BLOCK], bw[COL_BLOCK];
	for (int64_t i = 0; i < n; i++) {
		const float *xi = load(bx, elem(x, xt, i * d + j0), xt, nj);
		const float *dyi = load(bdy, elem(dy, dyt, i * d + j0), dyt, nj);
		float r = rstd[i];
#pragma omp simd
		for (int64_t j = 0; j < nj; j++)
			acc[j] += dyi[j] * xi[j] * r;
	}
	float *pw = fetch(bw, elem_mut(dw, dwt, j0), dwt, nj);
	for (int64_t j = 0; j < nj; j++)
		pw[j] += acc[j];
	store(elem_mut(dw, dwt, j0), dwt, pw, nj);
}

static void rmsnorm_dw(void *dw, be_dtype dwt, const void *dy, be_dtype dyt, const void *x,
		       be_dtype xt, const float *rstd, int64_t n, int64_t d)
{
	int64_t nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) if (n * d > CPU_PAR_MIN)
	for (int64_t blk = 0; blk < nblk; blk++)
		rmsnorm_dw_block(dw, dwt, dy, dyt, x, xt, rstd, n, d, blk * COL_BLOCK,
				 min64(COL_BLOCK, d - blk * COL_BLOCK));
}

void cpu_bf16_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			  const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			  const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d)
{
	const float *wf;
	float *rows;
	if (norm_scratch(be, "rmsnorm_bwd", w, wt, n, d, 3, &wf, &rows) < 0)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (n * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float *bx = scratch_of(rows, 3 * d), *bdy = bx + d, *bdx = bdy + d;
		void *dxi = elem_mut(dx, dxt, i * d);
		float *pdx = place(bdx, dxi, dxt);
		cpu_rmsnorm_bwd_row_f32(pdx, load(bdy, elem(dy, dyt, i * d), dyt, d),
					load(bx, elem(x, xt, i * d), xt, d), wf, rstd[i], d);
		store(dxi, dxt, pdx, d);
	}
	rmsnorm_dw(dw, dwt, dy, dyt, x, xt, rstd, n, d);
}

/* ---- RoPE: torchtitan's apply_rotary_emb rotates xq.float() and rounds back
 * with type_as; so does this, a token's heads at a time. ---- */

void cpu_bf16_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b, int64_t t,
		   int64_t h, int64_t hd, int style, int inverse)
{
	int64_t row = h * hd;
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(row * threads_for(b * t * row)), "rope");
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (b * t * row > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * t; r++) {
		void *xr = elem_mut(x, xt, r * row);
		float *px = fetch(scratch_of(s, row), xr, xt, row);
		cpu_rope_row_f32(px, cs + (r % t) * hd, h, hd, style, inverse);
		store(xr, xt, px, row);
	}
}

/* RoPE fused into the QKV layout (backend.h's rope_qkv) on bf16 tensors: a
 * token's heads converted to float32, rotated and rounded, as rope does.
 * Scratch: a row of h + 2 hkv heads per thread. */
void cpu_bf16_rope_qkv(backend *be, void *q, void *k, void *v, const void *qkv, const float *cs,
		       int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd, int style)
{
	int64_t nq = h * hd, nk = hkv * hd, row = nq + 2 * nk;
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(row * threads_for(b * t * row)),
			       "rope_qkv");
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (b * t * row > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * t; r++) {
		float *px = scratch_of(s, row);
		load(px, elem(qkv, BE_BF16, r * row), BE_BF16, row);
		cpu_rope_row_f32(px, cs + (r % t) * hd, h, hd, style, 0);
		cpu_rope_row_f32(px + nq, cs + (r % t) * hd, hkv, hd, style, 0);
		store(elem_mut(q, BE_BF16, r * nq), BE_BF16, px, nq);
		store(elem_mut(k, BE_BF16, r * nk), BE_BF16, px + nq, nk);
		store(elem_mut(v, BE_BF16, r * nk), BE_BF16, px + nq + nk, nk);
	}
}

void cpu_bf16_rope_qkv_bwd(backend *be, void *dqkv, const void *dq, const void *dk,
			   const void *dv, const float *cs, int64_t b, int64_t t, int64_t h,
			   int64_t hkv, int64_t hd, int style)
{
	int64_t nq = h * hd, nk = hkv * hd, row = nq + 2 * nk;
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(row * threads_for(b * t * row)),
			       "rope_qkv_bwd");
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (b * t * row > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * t; r++) {
		float *px = scratch_of(s, row);
		load(px, elem(dq, BE_BF16, r * nq), BE_BF16, nq);
		load(px + nq, elem(dk, BE_BF16, r * nk), BE_BF16, nk);
		load(px + nq + nk, elem(dv, BE_BF16, r * nk), BE_BF16, nk);
		cpu_rope_row_f32(px, cs + (r % t) * hd, h, hd, style, 1);
		cpu_rope_row_f32(px + nq, cs + (r % t) * hd, hkv, hd, style, 1);
		store(elem_mut(dqkv, BE_BF16, r * row), BE_BF16, px, row);
	}
}

/* ---- attention: one (batch, kv head) group at a time, as the float32 kernel
 * splits its work.  A group's rows of q (its query heads), k and v are gathered
 * from the strided tensors into float32 buffers of its thread, the float32
 * kernel runs on them as a problem of one batch and one kv head, and out (or
 * dq, dk, dv) is scattered back, rounded.  Scratch: a group per thread.  A
 * group's sinks are its query heads' (GPT-OSS); their gradients are summed per
 * group and then over the batch in order (groups of one kv head run on
 * different threads). ---- */

typedef struct att_geom {
	be_attn g;          /* the group's problem: b 1, h rep, hkv 1 */
	int64_t rep;
	int64_t nq, nk, nv, no; /* floats of the group's q, k, v, out */
} att_geom;

static att_geom att_group(const be_attn *a)
{
	att_geom ge = {.g = *a, .rep = a->h / a->hkv};
	ge.g.b = 1, ge.g.h = ge.rep, ge.g.hkv = 1;
	ge.g.dsinks = NULL;
	ge.nq = a->tq * ge.rep * a->hd, ge.nk = a->tk * a->hd;
	ge.nv = a->tk * a->hdv, ge.no = a->tq * ge.rep * a->hdv;
	return ge;
}

/* Group (bi, kv)'s problem: its query heads' sinks, its sinks' gradient in
 * dsink (rep floats, or NULL), its batch row's documents (a problem of one
 * row). */
static be_attn att_problem(const att_geom *ge, const be_attn *a, int64_t bi, int64_t kv,
			   float *dsink)
{
	be_attn g = ge->g;
	if (a->doc)
		g.doc = a->doc + bi * a->doc_t;
	if (a->sinks)
		g.sinks = (const float *)a->sinks + kv * ge->rep;
	g.dsinks = a->sinks ? dsink : NULL;
	return g;
}

/* rows of width elements, ld apart in src (type t), into dst packed. */
static void gather(float *dst, const void *src, be_dtype t, int64_t rows, int64_t width,
		   int64_t ld)
{
	for (int64_t r = 0; r < rows; r++)
		convert_span(dst + r * width, BE_F32, elem(src, t, r * ld), t, width);
}

static void scatter(void *dst, be_dtype t, int64_t ld, const float *src, int64_t rows,
		    int64_t width)
{
	for (int64_t r = 0; r < rows; r++)
		convert_span(elem_mut(dst, t, r * ld), t, src + r * width, BE_F32, width);
}

/* Offsets of group (bi, kv)'s first row in q / out (query heads kv*rep..) and
 * in k / v. */
static int64_t q_off(const be_attn *a, int64_t bi, int64_t kv, int64_t rep, int64_t w)
{
	return (bi * a->tq * a->h + kv * rep) * w;
}

static int64_t k_off(const be_attn *a, int64_t bi, int64_t kv, int64_t w)
{
	return (bi * a->tk * a->hkv + kv) * w;
}

void cpu_bf16_attention_fwd(backend *be, void *out, float *lse, const void *q, const void *k,
			    const void *v, const be_attn *a)
{
	att_geom ge = att_group(a);
	int64_t per = ge.nq + ge.nk + ge.nv + ge.no, groups = a->b * a->hkv;
	int64_t work = a->b * a->h * a->tq * a->tk * a->hd;
	int nt = groups > 1 && work > CPU_PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(per * nt), "attention_fwd");
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 1) if (nt > 1)
	for (int64_t grp = 0; grp < groups; grp++) {
		int64_t bi = grp / a->hkv, kv = grp % a->hkv;
		float *fq = scratch_of(s, per), *fk = fq + ge.nq, *fv = fk + ge.nk, *fo = fv + ge.nv;
		gather(fq, elem(q, a->qkv, q_off(a, bi, kv, ge.rep, a->hd)), a->qkv, a->tq,
		       ge.rep * a->hd, a->h * a->hd);
		gather(fk, elem(k, a->qkv, k_off(a, bi, kv, a->hd)), a->qkv, a->tk, a->hd,
		       a->hkv * a->hd);
		gather(fv, elem(v, a->qkv, k_off(a, bi, kv, a->hdv)), a->qkv, a->tk, a->hdv,
		       a->hkv * a->hdv);
		be_attn g = att_problem(&ge, a, bi, kv, NULL);
		cpu_attention_fwd_f32(fo, lse + (bi * a->h + kv * ge.rep) * a->tq, fq, fk, fv, &g);
		scatter(elem_mut(out, a->out, q_off(a, bi, kv, ge.rep, a->hdv)), a->out,
			a->h * a->hdv, fo, a->tq, ge.rep * a->hdv);
	}
}

void cpu_bf16_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			    const void *q, const void *k, const void *v, const void *out,
			    const float *lse, const be_attn *a)
{
	att_geom ge = att_group(a);
	int64_t per = 2 * (ge.nq + ge.nk + ge.nv + ge.no), groups = a->b * a->hkv;
	int64_t work = a->b * a->h * a->tq * a->tk * a->hd;
	int nt = groups > 1 && work > CPU_PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
	int64_t nds = a->sinks && a->dsinks ? groups * ge.rep : 0; /* per group's dsinks */
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(per * nt + nds), "attention_bwd");
	if (!s)
		return;
	float *ds = s + per * nt;
	memset(ds, 0, sizeof(float) * (size_t)nds);
	int64_t ldq = a->h * a->hd, ldk = a->hkv * a->hd, ldv = a->hkv * a->hdv, ldo = a->h * a->hdv;
#pragma omp parallel for schedule(dynamic, 1) if (nt > 1)
	for (int64_t grp = 0; grp < groups; grp++) {
		int64_t bi = grp / a->hkv, kv = grp % a->hkv;
		int64_t oq = q_off(a, bi, kv, ge.rep, a->hd), oo = q_off(a, bi, kv, ge.rep, a->hdv);
		int64_t ok = k_off(a, bi, kv, a->hd), ov = k_off(a, bi, kv, a->hdv);
		float *fq = scratch_of(s, per), *fk = fq + ge.nq, *fv = fk + ge.nk, *fo = fv + ge.nv;
		float *fdo = fo + ge.no, *fdq = fdo + ge.no, *fdk = fdq + ge.nq, *fdv = fdk + ge.nk;
		gather(fq, elem(q, a->qkv, oq), a->qkv, a->tq, ge.rep * a->hd, ldq);
		gather(fk, elem(k, a->qkv, ok), a->qkv, a->tk, a->hd, ldk);
		gather(fv, elem(v, a->qkv, ov), a->qkv, a->tk, a->hdv, ldv);
		gather(fo, elem(out, a->out, oo), a->out, a->tq, ge.rep * a->hdv, ldo);
		gather(fdo, elem(dout, a->dout, oo), a->dout, a->tq, ge.rep * a->hdv, ldo);
		be_attn g = att_problem(&ge, a, bi, kv, nds ? ds + grp * ge.rep : NULL);
		cpu_attention_bwd_f32(fdq, fdk, fdv, fdo, fq, fk, fv, fo,
				      lse + (bi * a->h + kv * ge.rep) * a->tq, &g);
		scatter(elem_mut(dq, a->grad, oq), a->grad, ldq, fdq, a->tq, ge.rep * a->hd);
		scatter(elem_mut(dk, a->grad, ok), a->grad, ldk, fdk, a->tk, a->hd);
		scatter(elem_mut(dv, a->grad, ov), a->grad, ldv, fdv, a->tk, a->hdv);
	}
	for (int64_t grp = 0; grp < (nds ? groups : 0); grp++) /* in batch order */
		for (int64_t j = 0; j < ge.rep; j++)
			((float *)a->dsinks)[grp % a->hkv * ge.rep + j] += ds[grp * ge.rep + j];
}

/* ---- SwiGLU: torchtitan's F.silu(w1(x)) * w3(x) on bf16 tensors rounds
 * silu(a) to bf16, then the product; its backward rounds dy * g (the
 * gradient of silu's output) before silu's derivative. ---- */

static inline __attribute__((always_inline)) float silu_bf16(float a, float e)
{
	return bf16_round(a / (1 + e));
}

CPU_STREAM_VOID(static, swiglu_fwd_span, (uint16_t *y, const uint16_t *a, const uint16_t *g, int64_t n), (y, a, g, n))
{
	size_t bytes = (size_t)n * sizeof *y;
	cpu_san_span(y, bytes);
	cpu_san_span(a, bytes);
	cpu_san_span(g, bytes);
#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		float ai = bf16_to_f32(a[i]);
		float s = silu_bf16(ai, cpu_exp_f32(-ai));
		y[i] = bf16_from_f32(s * bf16_to_f32(g[i]));
	}
}

void cpu_bf16_swiglu_fwd(void *y, const void *a, const void *g, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		swiglu_fwd_span((uint16_t *)y + i0, (const uint16_t *)a + i0,
				(const uint16_t *)g + i0, min64(CHUNK, n - i0));
	}
}

CPU_STREAM_VOID(static, swiglu_bwd_span, (uint16_t *da, uint16_t *dg, const uint16_t *dy, const uint16_t *a, const uint16_t *g, int64_t n), (da, dg, dy, a, g, n))
{
	size_t bytes = (size_t)n * sizeof *da;
	cpu_san_span(da, bytes);
	cpu_san_span(dg, bytes);
	cpu_san_span(dy, bytes);
	cpu_san_span(a, bytes);
	cpu_san_span(g, bytes);
#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		float ai = bf16_to_f32(a[i]), dyi = bf16_to_f32(dy[i]);
		float e = cpu_exp_f32(-ai), sig = 1 / (1 + e);
		float ds = bf16_round(dyi * bf16_to_f32(g[i]));
		dg[i] = bf16_from_f32(dyi * silu_bf16(ai, e));
		da[i] = bf16_from_f32(ds * sig * (1 + ai * (1 - sig)));
	}
}

void cpu_bf16_swiglu_bwd(void *da, void *dg, const void *dy, const void *a, const void *g,
			 int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		swiglu_bwd_span((uint16_t *)da + i0, (uint16_t *)dg + i0, (const uint16_t *)dy + i0,
				(const uint16_t *)a + i0, (const uint16_t *)g + i0,
				min64(CHUNK, n - i0));
	}
}

/* ---- embedding ---- */

void cpu_bf16_embedding_fwd(void *out, be_dtype ot, const void *table, be_dtype tt,
			    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv)
{
#pragma omp parallel for schedule(dynamic, 8) if (n * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		int64_t r = (int64_t)ids[i] - v0;
		if (r >= 0 && r < nv)
			convert_span(elem_mut(out, ot, i * d), ot, elem(table, tt, r * d), tt, d);
		else
			memset(elem_mut(out, ot, i * d), 0, esize(ot) * (size_t)d);
	}
}

/* Columns j0..j0+nj of dtable, the tokens in order (as the float32 kernel).  A
 * bf16 table rounds after each token's row is added. */
CPU_HOT_VOID(static, embedding_bwd_block, (void *dtable, be_dtype tt, const void *dout, be_dtype dt, const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv, int64_t j0, int64_t nj), (dtable, tt, dout, dt, ids, n, d, v0, nv, j0, nj))
{
	float bs[COL_BLOCK], bd[COL_BLOCK];
	for (int64_t i = 0; i < n; i++) {
		int64_t r = (int64_t)ids[i] - v0;
		if (r < 0 || r >= nv)
			continue;
		void *dst = elem_mut(dtable, tt, r * d + j0);
		const float *src = load(bs, elem(dout, dt, i * d + j0), dt, nj);
		float *pd = fetch(bd, dst, tt, nj);
#pragma omp simd
		for (int64_t j = 0; j < nj; j++)
			pd[j] += src[j];
		store(dst, tt, pd, nj);
	}
}

void cpu_bf16_embedding_bwd(void *dtable, be_dtype tt, const void *dout, be_dtype dt,
			    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv)
{
	int64_t nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) if (n * d > CPU_PAR_MIN)
	for (int64_t blk = 0; blk < nblk; blk++)
		embedding_bwd_block(dtable, tt, dout, dt, ids, n, d, v0, nv, blk * COL_BLOCK,
				    min64(COL_BLOCK, d - blk * COL_BLOCK));
}

/* ---- cross-entropy: torchtitan's loss takes pred.float(); the gradient
 * comes back through that cast, rounded to bf16. ---- */

void cpu_bf16_cross_entropy(backend *be, void *logits, const int32_t *labels, int64_t n,
			    int64_t v, int32_t ignore_index, float grad_scale, double *loss_sum,
			    int64_t *n_valid)
{
	int nt = threads_for(n * v);
	/* (n) row losses, then a row of v floats a thread */
	double *row_loss = cpu_scratch(be, sizeof(double) * (size_t)n + sizeof(float) * (size_t)(v * nt),
				       "cross_entropy");
	if (!row_loss)
		return;
	float *s = (float *)(row_loss + n);
#pragma omp parallel for schedule(dynamic, 8) if (n * v > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		uint16_t *x = (uint16_t *)logits + i * v;
		row_loss[i] = 0;
		if (labels[i] == ignore_index) {
			if (grad_scale != 0)
				memset(x, 0, sizeof(uint16_t) * (size_t)v);
			continue;
		}
		float *px = fetch(scratch_of(s, v), x, BE_BF16, v);
		row_loss[i] = cpu_cross_entropy_row_f32(px, v, labels[i], grad_scale);
		if (grad_scale != 0)
			store(x, BE_BF16, px, v);
	}
	*loss_sum += cpu_sum_valid_f32(row_loss, labels, n, ignore_index, n_valid);
}

/* ---- elementwise ---- */

CPU_HOT_VOID(static, add_chunk, (void *y, be_dtype yt, const void *a, be_dtype at, const void *b, be_dtype bt, int64_t n), (y, yt, a, at, b, bt, n))
{
	float ba[CHUNK], bb[CHUNK], by[CHUNK];
	const float *pa = load(ba, a, at, n), *pb = load(bb, b, bt, n);
	float *py = place(by, y, yt);
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		py[i] = pa[i] + pb[i];
	store(y, yt, py, n);
}

void cpu_bf16_add(void *y, be_dtype yt, const void *a, be_dtype at, const void *b,
		  be_dtype bt, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		add_chunk(elem_mut(y, yt, i0), yt, elem(a, at, i0), at, elem(b, bt, i0), bt,
			  min64(CHUNK, n - i0));
	}
}

CPU_HOT_VOID(static, axpy_chunk, (void *y, be_dtype yt, float alpha, const void *x, be_dtype xt, int64_t n), (y, yt, alpha, x, xt, n))
{
	float bx[CHUNK], by[CHUNK];
	const float *px = load(bx, x, xt, n);
	float *py = fetch(by, y, yt, n);
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		py[i] += alpha * px[i];
	store(y, yt, py, n);
}

void cpu_bf16_axpy(void *y, be_dtype yt, float alpha, const void *x, be_dtype xt, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		axpy_chunk(elem_mut(y, yt, i0), yt, alpha, elem(x, xt, i0), xt, min64(CHUNK, n - i0));
	}
}

CPU_STREAM_VOID(static, scale_span, (uint16_t *x, float alpha, int64_t n), (x, alpha, n))
{
	cpu_san_span(x, (size_t)n * sizeof *x);
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		x[i] = bf16_from_f32(bf16_to_f32(x[i]) * alpha);
}

void cpu_bf16_scale(void *x, float alpha, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++)
		scale_span((uint16_t *)x + c * CHUNK, alpha, min64(CHUNK, n - c * CHUNK));
}

/* The float32 kernel's span sum over chunks converted to float32 (exactly),
 * the chunks' partials added in chunk order: the same bits whatever the
 * threads. */
static double sumsq_chunk(const uint16_t *x, int64_t n)
{
	float buf[CHUNK];
	return cpu_sumsq_span_f32(load(buf, x, BE_BF16, n), n);
}

double cpu_bf16_sumsq(const void *x, int64_t n)
{
	const uint16_t *xx = x;
	double total = 0;
#pragma omp parallel for ordered schedule(static, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		double part = sumsq_chunk(xx + c * CHUNK, min64(CHUNK, n - c * CHUNK));
#pragma omp ordered
		total += part;
	}
	return total;
}

CPU_HOT_VOID(static, adamw_chunk, (uint16_t *p, const uint16_t *g, uint16_t *m, uint16_t *v, int64_t n, const cpu_adamw_consts *c), (p, g, m, v, n, c))
{
	float bp[CHUNK], bg[CHUNK], bm[CHUNK], bv[CHUNK];
	float *fp = fetch(bp, p, BE_BF16, n), *fm = fetch(bm, m, BE_BF16, n);
	float *fv = fetch(bv, v, BE_BF16, n);
	cpu_adamw_span_f32(fp, load(bg, g, BE_BF16, n), fm, fv, n, c);
	store(p, BE_BF16, fp, n);
	store(m, BE_BF16, fm, n);
	store(v, BE_BF16, fv, n);
}

void cpu_bf16_adamw(void *p, const void *g, void *m, void *v, int64_t n,
		    const cpu_adamw_consts *k)
{
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		adamw_chunk((uint16_t *)p + i0, (const uint16_t *)g + i0, (uint16_t *)m + i0,
			    (uint16_t *)v + i0, min64(CHUNK, n - i0), k);
	}
}

/* torch's FusedAdamMathFunctorMP on one chunk (backend.h's adamw_bf16_states) */
CPU_HOT_VOID(static, adamw_mp_chunk, (float *p, const float *g, uint16_t *m, uint16_t *v, int64_t n, const float *k), (p, g, m, v, n, k))
{
	float lw = k[0] * k[4], b1 = k[1], b2 = k[2], eps = k[3], step = k[0] / k[5], sbc2 = k[6];
	float bm[CHUNK], bv[CHUNK];
	float *fm = fetch(bm, m, BE_BF16, n), *fv = fetch(bv, v, BE_BF16, n);
#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		float pi = k[4] != 0 ? fmaf(-lw, p[i], p[i]) : p[i], gi = g[i], gg = gi * gi;
		fm[i] = fmaf(b1, fm[i], fmaf(-b1, gi, gi));
		fv[i] = fmaf(b2, fv[i], fmaf(-b2, gg, gg));
		p[i] = pi - step * fm[i] / (sqrtf(fv[i]) / sbc2 + eps);
	}
	store(m, BE_BF16, fm, n);
	store(v, BE_BF16, fv, n);
}

void cpu_bf16_adamw_states(float *p, const float *g, void *m, void *v, int64_t n,
			   const float k[7])
{
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK;
		adamw_mp_chunk(p + i0, g + i0, (uint16_t *)m + i0, (uint16_t *)v + i0,
			       min64(CHUNK, n - i0), k);
	}
}

/* ---- the portable GEMM: bf16 operands widened to float32 a block at a time,
 * products and sums by the float32 matmul (OpenBLAS sgemm), C written as
 * float32 or rounded to nearest even once, as oneDNN's bf16 matmul rounds
 * (alpha AB + beta C in float32, then stored).  Only the order of the float32
 * sums differs from oneDNN's, whose dot-product instructions add pairs. ---- */

/* Floats in one widened block of an operand: 16 MiB bounds the scratch
 * whatever the shapes, and leaves sgemm panels long enough to run at speed. */
#define GEMM_BLOCK_FLOATS ((int64_t)4 << 20)

/* rows x width elements from src (type st, rows lds apart) to dst (type dt,
 * rows ldd apart), on all threads. */
static void convert_rows(void *dst, be_dtype dt, int64_t ldd, const void *src, be_dtype st,
			 int64_t lds, int64_t rows, int64_t width)
{
#pragma omp parallel for schedule(dynamic, 16) if (rows * width > CPU_PAR_MIN)
	for (int64_t r = 0; r < rows; r++)
		convert_span(elem_mut(dst, dt, r * ldd), dt, elem(src, st, r * lds), st, width);
}

/* The block length along a dimension of `len`: all of it when `len` lines of
 * `line` floats fit in a block, else whole multiples of 64. */
static int64_t gemm_block(int64_t len, int64_t line)
{
	int64_t fit = GEMM_BLOCK_FLOATS / (line > 0 ? line : 1) / 64 * 64;
	return len <= fit ? len : fit > 64 ? fit : 64;
}

void cpu_bf16_matmul_portable(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
			      float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
			      float beta, void *c, int64_t ldc, be_dtype ct)
{
	int64_t nb = gemm_block(n, k), mb = gemm_block(m, k + (ct == BE_BF16 ? nb : 0));
	size_t floats = (size_t)(nb * k + mb * k + (ct == BE_BF16 ? mb * nb : 0));
	float *bf = cpu_scratch(be, floats * sizeof(float), "matmul");
	if (!bf)
		return;
	float *af = bf + nb * k, *cf = af + mb * k;
	for (int64_t j0 = 0; j0 < n; j0 += nb) {
		int64_t nj = min64(nb, n - j0);
		/* B (k, n) is stored (n, k) when transposed: block j0 is nj rows there */
		if (tb)
			convert_rows(bf, BE_F32, k, elem(b, BE_BF16, j0 * ldb), BE_BF16, ldb, nj, k);
		else
			convert_rows(bf, BE_F32, nj, elem(b, BE_BF16, j0), BE_BF16, ldb, k, nj);
		for (int64_t i0 = 0; i0 < m; i0 += mb) {
			int64_t mi = min64(mb, m - i0);
			if (ta)
				convert_rows(af, BE_F32, mi, elem(a, BE_BF16, i0), BE_BF16, lda, k, mi);
			else
				convert_rows(af, BE_F32, k, elem(a, BE_BF16, i0 * lda), BE_BF16, lda, mi, k);
			void *cij = elem_mut(c, ct, i0 * ldc + j0);
			float *out = ct == BE_BF16 ? cf : cij;
			int64_t ldo = ct == BE_BF16 ? nj : ldc;
			if (ct == BE_BF16 && beta != 0)
				convert_rows(cf, BE_F32, nj, cij, ct, ldc, mi, nj);
			cpu_matmul_f32(ta, tb, mi, nj, k, alpha, af, ta ? mi : k, bf, tb ? k : nj,
				       beta, out, ldo);
			if (ct == BE_BF16)
				convert_rows(cij, ct, ldc, cf, BE_F32, nj, mi, nj);
		}
	}
}
