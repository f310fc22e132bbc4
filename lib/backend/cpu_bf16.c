/* The CPU backend's ops over bfloat16 tensors (cpu_bf16.h), in float32: rows
 * and chunks are converted to float32 in buffers that stay in the L1 cache,
 * computed by the float32 kernels' own row functions where there is one (so a
 * bf16 result is the float32 op's result rounded once), and rounded to nearest
 * even where they are stored.  Attention, bound by its products rather than
 * by memory, converts its tensors whole and runs the float32 kernel.
 *
 * Work is split as in cpu_kernels.inc: fixed chunks or rows whatever the
 * threads, reductions in a fixed order, so results repeat bit for bit. */

/* As cpu_f32.c: lets GCC vectorise the compares of cpu_exp_f32. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"

/* Elements per chunk of the elementwise ops: a few float32 buffers of this
 * size live on each thread's stack. */
#define CHUNK 1024
/* Columns per block of the weight-gradient reductions, as cpu_kernels.inc. */
#define COL_BLOCK 64

static inline size_t esize(be_dtype t)
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
static inline const float *load(float *restrict buf, const void *src, be_dtype t, int64_t n)
{
	if (t == BE_F32)
		return src;
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

static inline void store(void *dst, be_dtype t, const float *src, int64_t n)
{
	if (t == BE_F32) {
		if (dst != src)
			memcpy(dst, src, sizeof(float) * (size_t)n);
		return;
	}
	uint16_t *restrict d = dst;
	const float *restrict s = src;
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		d[i] = bf16_from_f32(s[i]);
}

/* Per-thread scratch of `per` floats for a parallel loop of `work` elements:
 * one block for every thread that loop may run on (see scratch_of). */
static float *scratch_alloc(backend *be, const char *op, int64_t per, int64_t work)
{
	int nt = work > CPU_PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
	float *s = malloc(sizeof(float) * (size_t)per * (size_t)nt);
	if (!s)
		backend_fault(be, "cpu backend: %s: out of memory for %d x %lld floats of scratch",
			      op, nt, (long long)per);
	return s;
}

static inline float *scratch_of(float *s, int64_t per)
{
	return s + (size_t)per * (size_t)omp_get_thread_num();
}

/* One row or chunk converted between element types, on this thread. */
static void convert_span(void *dst, be_dtype dt, const void *src, be_dtype st, int64_t n)
{
	if (dt == st) {
		memmove(dst, src, (size_t)n * esize(dt));
	} else if (dt == BE_BF16) {
		store(dst, dt, src, n);
	} else {
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

/* w as float32 for the whole op: w itself, or a converted copy in *own. */
static const float *weights_f32(backend *be, const char *op, const void *w, be_dtype wt,
				int64_t d, float **own)
{
	*own = NULL;
	if (wt == BE_F32)
		return w;
	*own = malloc(sizeof(float) * (size_t)d);
	if (!*own) {
		backend_fault(be, "cpu backend: %s: out of memory", op);
		return NULL;
	}
	return load(*own, w, wt, d);
}

void cpu_bf16_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			  be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			  float eps)
{
	float *wown, *s = scratch_alloc(be, "rmsnorm_fwd", 2 * d, n * d);
	const float *wf = weights_f32(be, "rmsnorm_fwd", w, wt, d, &wown);
	if (s && wf) {
#pragma omp parallel for schedule(dynamic, 8) if (n * d > CPU_PAR_MIN)
		for (int64_t i = 0; i < n; i++) {
			float *bx = scratch_of(s, 2 * d), *by = bx + d;
			void *yi = elem_mut(y, yt, i * d);
			float *py = place(by, yi, yt);
			rstd[i] = cpu_rmsnorm_fwd_row_f32(py, load(bx, elem(x, xt, i * d), xt, d), wf,
							  d, eps);
			store(yi, yt, py, d);
		}
	}
	free(s);
	free(wown);
}

/* dw += sum over rows of dy x rstd, one column block at a time, the rows in
 * order (as the float32 kernel, whose sums this repeats). */
static void rmsnorm_dw(void *dw, be_dtype dwt, const void *dy, be_dtype dyt, const void *x,
		       be_dtype xt, const float *rstd, int64_t n, int64_t d)
{
	int64_t nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) if (n * d > CPU_PAR_MIN)
	for (int64_t blk = 0; blk < nblk; blk++) {
		int64_t j0 = blk * COL_BLOCK, nj = min64(COL_BLOCK, d - j0);
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
}

void cpu_bf16_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			  const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			  const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d)
{
	float *wown, *s = scratch_alloc(be, "rmsnorm_bwd", 3 * d, n * d);
	const float *wf = weights_f32(be, "rmsnorm_bwd", w, wt, d, &wown);
	if (s && wf) {
#pragma omp parallel for schedule(dynamic, 8) if (n * d > CPU_PAR_MIN)
		for (int64_t i = 0; i < n; i++) {
			float *bx = scratch_of(s, 3 * d), *bdy = bx + d, *bdx = bdy + d;
			void *dxi = elem_mut(dx, dxt, i * d);
			float *pdx = place(bdx, dxi, dxt);
			cpu_rmsnorm_bwd_row_f32(pdx, load(bdy, elem(dy, dyt, i * d), dyt, d),
						load(bx, elem(x, xt, i * d), xt, d), wf, rstd[i], d);
			store(dxi, dxt, pdx, d);
		}
		rmsnorm_dw(dw, dwt, dy, dyt, x, xt, rstd, n, d);
	}
	free(s);
	free(wown);
}

/* ---- RoPE: torchtitan's apply_rotary_emb rotates xq.float() and rounds back
 * with type_as; so does this, a token's heads at a time. ---- */

void cpu_bf16_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b, int64_t t,
		   int64_t h, int64_t hd, int style, int inverse)
{
	int64_t row = h * hd;
	float *s = scratch_alloc(be, "rope", row, b * t * row);
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 8) if (b * t * row > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * t; r++) {
		void *xr = elem_mut(x, xt, r * row);
		float *px = fetch(scratch_of(s, row), xr, xt, row);
		cpu_rope_row_f32(px, cs + (r % t) * hd, h, hd, style, inverse);
		store(xr, xt, px, row);
	}
	free(s);
}

/* ---- attention ---- */

/* A tensor of n elements as float32: p itself, or a converted copy in *own
 * (NULL with a fault when out of memory). */
static const float *tensor_f32(backend *be, const void *p, be_dtype t, int64_t n, float **own)
{
	*own = NULL;
	if (t == BE_F32)
		return p;
	*own = malloc(sizeof(float) * (size_t)(n ? n : 1));
	if (!*own) {
		backend_fault(be, "cpu backend: attention: out of memory converting to float32");
		return NULL;
	}
	cpu_bf16_convert(*own, BE_F32, p, t, n);
	return *own;
}

/* Where the float32 kernel writes a tensor of n elements bound for p (type t). */
static float *result_f32(backend *be, void *p, be_dtype t, int64_t n, float **own)
{
	*own = NULL;
	if (t == BE_F32)
		return p;
	*own = malloc(sizeof(float) * (size_t)(n ? n : 1));
	if (!*own)
		backend_fault(be, "cpu backend: attention: out of memory converting to float32");
	return *own;
}

static void result_store(void *p, be_dtype t, float *own, int64_t n)
{
	if (own)
		cpu_bf16_convert(p, t, own, BE_F32, n);
	free(own);
}

void cpu_bf16_attention_fwd(backend *be, void *out, float *lse, const void *q, const void *k,
			    const void *v, const be_attn *a)
{
	int64_t nq = a->b * a->tq * a->h * a->hd, nk = a->b * a->tk * a->hkv * a->hd;
	int64_t nv = a->b * a->tk * a->hkv * a->hdv, no = a->b * a->tq * a->h * a->hdv;
	float *oq, *ok, *ov, *oo;
	const float *fq = tensor_f32(be, q, a->qkv, nq, &oq);
	const float *fk = tensor_f32(be, k, a->qkv, nk, &ok);
	const float *fv = tensor_f32(be, v, a->qkv, nv, &ov);
	float *fo = result_f32(be, out, a->out, no, &oo);
	if (fq && fk && fv && fo) {
		cpu_attention_fwd_f32(fo, lse, fq, fk, fv, a);
		result_store(out, a->out, oo, no);
		oo = NULL;
	}
	free(oq), free(ok), free(ov), free(oo);
}

void cpu_bf16_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			    const void *q, const void *k, const void *v, const void *out,
			    const float *lse, const be_attn *a)
{
	int64_t nq = a->b * a->tq * a->h * a->hd, nk = a->b * a->tk * a->hkv * a->hd;
	int64_t nv = a->b * a->tk * a->hkv * a->hdv, no = a->b * a->tq * a->h * a->hdv;
	float *own[8];
	const float *fdo = tensor_f32(be, dout, a->dout, no, &own[0]);
	const float *fq = tensor_f32(be, q, a->qkv, nq, &own[1]);
	const float *fk = tensor_f32(be, k, a->qkv, nk, &own[2]);
	const float *fv = tensor_f32(be, v, a->qkv, nv, &own[3]);
	const float *fo = tensor_f32(be, out, a->out, no, &own[4]);
	float *fdq = result_f32(be, dq, a->grad, nq, &own[5]);
	float *fdk = result_f32(be, dk, a->grad, nk, &own[6]);
	float *fdv = result_f32(be, dv, a->grad, nv, &own[7]);
	if (fdo && fq && fk && fv && fo && fdq && fdk && fdv) {
		cpu_attention_bwd_f32(fdq, fdk, fdv, fdo, fq, fk, fv, fo, lse, a);
		result_store(dq, a->grad, own[5], nq);
		result_store(dk, a->grad, own[6], nk);
		result_store(dv, a->grad, own[7], nv);
		own[5] = own[6] = own[7] = NULL;
	}
	for (int i = 0; i < 8; i++)
		free(own[i]);
}

/* ---- SwiGLU: torchtitan's F.silu(w1(x)) * w3(x) on bf16 tensors rounds
 * silu(a) to bf16, then the product; its backward rounds dy * g (the
 * gradient of silu's output) before silu's derivative. ---- */

static inline float silu_bf16(float a, float e)
{
	return bf16_round(a / (1 + e));
}

void cpu_bf16_swiglu_fwd(void *y, const void *a, const void *g, int64_t n)
{
	uint16_t *yy = y;
	const uint16_t *aa = a, *gg = g;
#pragma omp parallel for simd schedule(dynamic, 8192) if (n > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float ai = bf16_to_f32(aa[i]);
		float s = silu_bf16(ai, cpu_exp_f32(-ai));
		yy[i] = bf16_from_f32(s * bf16_to_f32(gg[i]));
	}
}

void cpu_bf16_swiglu_bwd(void *da, void *dg, const void *dy, const void *a, const void *g,
			 int64_t n)
{
	uint16_t *dda = da, *ddg = dg;
	const uint16_t *ddy = dy, *aa = a, *gg = g;
#pragma omp parallel for simd schedule(dynamic, 8192) if (n > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float ai = bf16_to_f32(aa[i]), dyi = bf16_to_f32(ddy[i]);
		float e = cpu_exp_f32(-ai), sig = 1 / (1 + e);
		float ds = bf16_round(dyi * bf16_to_f32(gg[i]));
		ddg[i] = bf16_from_f32(dyi * silu_bf16(ai, e));
		dda[i] = bf16_from_f32(ds * sig * (1 + ai * (1 - sig)));
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

/* Column blocks, tokens in order, as the float32 kernel.  A bf16 table rounds
 * after each token's row is added. */
void cpu_bf16_embedding_bwd(void *dtable, be_dtype tt, const void *dout, be_dtype dt,
			    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv)
{
	int64_t nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) if (n * d > CPU_PAR_MIN)
	for (int64_t blk = 0; blk < nblk; blk++) {
		int64_t j0 = blk * COL_BLOCK, nj = min64(COL_BLOCK, d - j0);
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
}

/* ---- cross-entropy: torchtitan's loss takes pred.float(); the gradient
 * comes back through that cast, rounded to bf16. ---- */

void cpu_bf16_cross_entropy(backend *be, void *logits, const int32_t *labels, int64_t n,
			    int64_t v, int32_t ignore_index, float grad_scale, double *loss_sum,
			    int64_t *n_valid)
{
	float *s = scratch_alloc(be, "cross_entropy", v, n * v);
	double *row_loss = malloc(sizeof(double) * (size_t)(n ? n : 1)); /* (n) */
	if (!s || !row_loss) {
		if (s)
			backend_fault(be, "cpu backend: cross_entropy: out of memory");
		free(s);
		free(row_loss);
		return;
	}
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
	free(row_loss);
	free(s);
}

/* ---- elementwise ---- */

void cpu_bf16_add(void *y, be_dtype yt, const void *a, be_dtype at, const void *b,
		  be_dtype bt, int64_t n)
{
	int64_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < nc; c++) {
		float ba[CHUNK], bb[CHUNK], by[CHUNK];
		int64_t i0 = c * CHUNK, len = min64(CHUNK, n - i0);
		const float *pa = load(ba, elem(a, at, i0), at, len);
		const float *pb = load(bb, elem(b, bt, i0), bt, len);
		float *py = place(by, elem_mut(y, yt, i0), yt);
#pragma omp simd
		for (int64_t i = 0; i < len; i++)
			py[i] = pa[i] + pb[i];
		store(elem_mut(y, yt, i0), yt, py, len);
	}
}

void cpu_bf16_axpy(void *y, be_dtype yt, float alpha, const void *x, be_dtype xt, int64_t n)
{
	int64_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < nc; c++) {
		float bx[CHUNK], by[CHUNK];
		int64_t i0 = c * CHUNK, len = min64(CHUNK, n - i0);
		const float *px = load(bx, elem(x, xt, i0), xt, len);
		float *py = fetch(by, elem_mut(y, yt, i0), yt, len);
#pragma omp simd
		for (int64_t i = 0; i < len; i++)
			py[i] += alpha * px[i];
		store(elem_mut(y, yt, i0), yt, py, len);
	}
}

void cpu_bf16_scale(void *x, float alpha, int64_t n)
{
	uint16_t *xx = x;
#pragma omp parallel for simd schedule(dynamic, 8192) if (n > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		xx[i] = bf16_from_f32(bf16_to_f32(xx[i]) * alpha);
}

/* Fixed chunks, partials summed in chunk order, as the float32 kernel. */
#define SUMSQ_CHUNK 8192
double cpu_bf16_sumsq(const void *x, int64_t n)
{
	const uint16_t *xx = x;
	int64_t nchunk = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
	double total = 0;
#pragma omp parallel for ordered schedule(static, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < nchunk; c++) {
		int64_t i0 = c * SUMSQ_CHUNK, i1 = min64(i0 + SUMSQ_CHUNK, n);
		double acc = 0;
		for (int64_t i = i0; i < i1; i++) {
			double f = bf16_to_f32(xx[i]);
			acc += f * f;
		}
#pragma omp ordered
		total += acc;
	}
	return total;
}

void cpu_bf16_adamw(void *p, const void *g, void *m, void *v, int64_t n, float lr, float b1,
		    float b2, float eps, float wd, float bc1, float bc2)
{
	int64_t nc = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 8) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < nc; c++) {
		float bp[CHUNK], bg[CHUNK], bm[CHUNK], bv[CHUNK];
		int64_t i0 = c * CHUNK, len = min64(CHUNK, n - i0);
		uint16_t *pp = (uint16_t *)p + i0, *mm = (uint16_t *)m + i0, *vv = (uint16_t *)v + i0;
		float *fp = fetch(bp, pp, BE_BF16, len), *fm = fetch(bm, mm, BE_BF16, len);
		float *fv = fetch(bv, vv, BE_BF16, len);
		cpu_adamw_span_f32(fp, load(bg, (const uint16_t *)g + i0, BE_BF16, len), fm, fv, len,
				   lr, b1, b2, eps, wd, bc1, bc2);
		store(pp, BE_BF16, fp, len);
		store(mm, BE_BF16, fm, len);
		store(vv, BE_BF16, fv, len);
	}
}
