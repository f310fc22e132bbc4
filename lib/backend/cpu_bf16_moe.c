/* The CPU backend's bfloat16 kernels for the mixture-of-experts, MLA and
 * GPT-OSS ops (cpu_bf16.h): routing, the rows' gather, combine and dot,
 * biases, the clamped SwiGLU and MLA's heads.  As in cpu_bf16.c, every value
 * is computed in float32 (the routing's scores and weights stay float32, as
 * torchtitan's router computes them in float32 whatever the autocast) and
 * rounded to nearest even once, where it is stored as bf16.  The grouped
 * GEMMs are oneDNN's (cpu.c, one GEMM a group).
 *
 * Work is split as the float32 kernels split it (rows or columns, fixed
 * blocks, sums in a fixed order): results repeat bit for bit whatever the
 * threads. */
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

#define COL_BLOCK 64

static inline size_t esize(be_dtype t)
{
	return t == BE_BF16 ? 2 : 4;
}

static inline float get(const void *p, be_dtype t, int64_t i)
{
	return t == BE_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void put(void *p, be_dtype t, int64_t i, float v)
{
	if (t == BE_BF16)
		((uint16_t *)p)[i] = bf16_from_f32(v);
	else
		((float *)p)[i] = v;
}

/* ---- GPT-OSS's clamped SwiGLU on (gate, up) pairs, bf16 in and out ---- */

void cpu_bf16_swiglu_clamp_fwd(void *y, const void *x, int64_t n, int64_t f, float alpha,
			       float limit)
{
	const uint16_t *xx = x;
	uint16_t *yy = y;
	int64_t m = n * f;
#pragma omp parallel for simd schedule(dynamic, 8192) if (m > CPU_PAR_MIN)
	for (int64_t i = 0; i < m; i++) {
		float gate = bf16_to_f32(xx[2 * i]), up = bf16_to_f32(xx[2 * i + 1]);
		float g = gate < limit ? gate : limit;
		float u = up < -limit ? -limit : up > limit ? limit : up;
		yy[i] = bf16_from_f32(g / (1 + cpu_exp_f32(-alpha * g)) * (u + 1));
	}
}

void cpu_bf16_swiglu_clamp_bwd(void *dx, const void *dy, const void *x, int64_t n, int64_t f,
			       float alpha, float limit)
{
	const uint16_t *xx = x, *dd = dy;
	uint16_t *out = dx;
	int64_t m = n * f;
#pragma omp parallel for simd schedule(dynamic, 8192) if (m > CPU_PAR_MIN)
	for (int64_t i = 0; i < m; i++) {
		float gate = bf16_to_f32(xx[2 * i]), up = bf16_to_f32(xx[2 * i + 1]);
		float d = bf16_to_f32(dd[i]);
		float g = gate < limit ? gate : limit;
		float u = up < -limit ? -limit : up > limit ? limit : up;
		float s = 1 / (1 + cpu_exp_f32(-alpha * g));
		float dg = gate <= limit ? d * (u + 1) * s * (1 + alpha * g * (1 - s)) : 0;
		float du = up >= -limit && up <= limit ? d * g * s : 0;
		out[2 * i] = bf16_from_f32(dg);
		out[2 * i + 1] = bf16_from_f32(du);
	}
}

/* ---- biases (optionally per row group) ---- */

/* y += bias: the bias is first rounded to y's type (torchtitan's h +
 * b.to(h.dtype); autocast's linear casts its bias too), the sum then rounded
 * once. */
void cpu_bf16_bias_add(void *y, be_dtype yt, const void *bias, be_dtype bt, int64_t rows,
		       int64_t d, int64_t groups, const int32_t *offs)
{
	int64_t used = offs ? offs[groups] - offs[0] : rows, r0 = offs ? offs[0] : 0;
#pragma omp parallel for schedule(dynamic, 32) if (used * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < used; i++) {
		int64_t r = r0 + i, b0 = offs ? row_group(offs, groups, r) * d : 0;
		for (int64_t j = 0; j < d; j++) {
			float b = get(bias, bt, b0 + j);
			if (yt == BE_BF16)
				b = bf16_round(b);
			put(y, yt, r * d + j, get(y, yt, r * d + j) + b);
		}
	}
}

/* dbias += the column sums of dy (per group), summed in double in row order
 * and rounded once into dbias's type. */
void cpu_bf16_bias_grad(void *dbias, be_dtype bt, const void *dy, be_dtype dyt, int64_t rows,
			int64_t d, int64_t groups, const int32_t *offs)
{
	int64_t ng = offs ? groups : 1, nblk = (d + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(dynamic, 1) if (rows * d > CPU_PAR_MIN)
	for (int64_t task = 0; task < ng * nblk; task++) {
		int64_t g = task / nblk, j0 = task % nblk * COL_BLOCK;
		int64_t j1 = j0 + COL_BLOCK < d ? j0 + COL_BLOCK : d;
		int64_t r0 = offs ? offs[g] : 0, r1 = offs ? offs[g + 1] : rows;
		double acc[COL_BLOCK] = {0};
		for (int64_t r = r0; r < r1; r++)
			for (int64_t j = j0; j < j1; j++)
				acc[j - j0] += get(dy, dyt, r * d + j);
		for (int64_t j = j0; j < j1; j++)
			put(dbias, bt, g * d + j,
			    (float)((double)get(dbias, bt, g * d + j) + acc[j - j0]));
	}
}

/* ---- MLA's heads: copies of bf16 elements; the split's shared part (h2 1)
 * sums the heads in float32 and rounds once ---- */

void cpu_bf16_heads_cat(void *y, const void *x1, const void *x2, int64_t n, int64_t h,
			int64_t d1, int64_t d2, int64_t h2)
{
	const uint16_t *a = x1, *b = x2;
	uint16_t *yy = y;
	int64_t d = d1 + d2;
#pragma omp parallel for schedule(dynamic, 16) if (n * h * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < h; j++) {
			uint16_t *yr = yy + (i * h + j) * d;
			memcpy(yr, a + (i * h + j) * d1, sizeof *yr * (size_t)d1);
			memcpy(yr + d1, b + (i * h2 + (h2 == 1 ? 0 : j)) * d2, sizeof *yr * (size_t)d2);
		}
}

void cpu_bf16_heads_split(void *x1, void *x2, const void *y, int64_t n, int64_t h, int64_t d1,
			  int64_t d2, int64_t h2)
{
	uint16_t *a = x1, *b = x2;
	const uint16_t *yy = y;
	int64_t d = d1 + d2;
#pragma omp parallel for schedule(dynamic, 16) if (n * h * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		for (int64_t j = 0; a && j < h; j++)
			memcpy(a + (i * h + j) * d1, yy + (i * h + j) * d, sizeof *a * (size_t)d1);
		if (!b)
			continue;
		if (h2 != 1) {
			for (int64_t j = 0; j < h; j++)
				memcpy(b + (i * h + j) * d2, yy + (i * h + j) * d + d1,
				       sizeof *b * (size_t)d2);
			continue;
		}
		for (int64_t c = 0; c < d2; c++) {
			float s = 0;
			for (int64_t j = 0; j < h; j++)
				s += bf16_to_f32(yy[(i * h + j) * d + d1 + c]);
			b[i * d2 + c] = bf16_from_f32(s);
		}
	}
}

/* ---- routing: torchtitan's router takes scores.to(float32) of the gate's
 * bf16 logits; their gradient comes back through that cast, rounded ---- */

void cpu_bf16_moe_route(backend *be, float *scores, int32_t *idx, float *w, const void *logits,
			const float *bias, const be_moe *r)
{
	int64_t n = r->n * r->e;
	float *f = cpu_scratch(be, sizeof(float) * (size_t)(n > 0 ? n : 1), "moe_route");
	if (!f)
		return;
	cpu_bf16_convert(f, BE_F32, logits, BE_BF16, n);
	cpu_moe_route_f32(scores, idx, w, f, bias, r);
}

void cpu_bf16_moe_route_bwd(backend *be, void *dlogits, const float *dw, const float *scores,
			    const int32_t *idx, const be_moe *r)
{
	int64_t n = r->n * r->e;
	float *f = cpu_scratch(be, sizeof(float) * (size_t)(n > 0 ? n : 1), "moe_route_bwd");
	if (!f)
		return;
	cpu_moe_route_bwd_f32(f, dw, scores, idx, r);
	cpu_bf16_convert(dlogits, BE_BF16, f, BE_F32, n);
}

/* ---- the rows: gather (optionally weighted), combine, dot ---- */

void cpu_bf16_moe_gather(void *y, const void *x, const int32_t *perm, const int32_t *offs,
			 const float *w, const be_moe *r, int64_t d)
{
	const uint16_t *xx = x;
	uint16_t *yy = y;
	int64_t rows = r->n * r->k, used = offs[r->e];
#pragma omp parallel for schedule(dynamic, 32) if (rows * d > CPU_PAR_MIN)
	for (int64_t row = 0; row < rows; row++) {
		uint16_t *yr = yy + row * d;
		if (row >= used) {
			memset(yr, 0, sizeof *yr * (size_t)d);
			continue;
		}
		int64_t a = perm[row];
		const uint16_t *xr = xx + (a / r->k) * d;
		if (!w) {
			memcpy(yr, xr, sizeof *yr * (size_t)d);
			continue;
		}
		float c = w[a];
		for (int64_t i = 0; i < d; i++)
			yr[i] = bf16_from_f32(bf16_to_f32(xr[i]) * c);
	}
}

/* A token's output: beta out + its rows weighted, summed in float32 in the
 * order of its choices, rounded once. */
void cpu_bf16_moe_combine(void *out, const void *y, const int32_t *pos, const float *w,
			  float beta, const be_moe *r, int64_t d)
{
	const uint16_t *yy = y;
	uint16_t *oo = out;
	int64_t k = r->k;
#pragma omp parallel for schedule(dynamic, 8) if (r->n * k * d > CPU_PAR_MIN)
	for (int64_t t = 0; t < r->n; t++) {
		float acc[COL_BLOCK];
		for (int64_t j0 = 0; j0 < d; j0 += COL_BLOCK) {
			int64_t nj = d - j0 < COL_BLOCK ? d - j0 : COL_BLOCK;
			uint16_t *o = oo + t * d + j0;
			for (int64_t i = 0; i < nj; i++)
				acc[i] = beta == 0 ? 0 : beta * bf16_to_f32(o[i]);
			for (int64_t j = 0; j < k; j++) {
				int64_t a = t * k + j, p = pos[a];
				if (p < 0)
					continue;
				const uint16_t *yr = yy + p * d + j0;
				float c = w ? w[a] : 1;
				for (int64_t i = 0; i < nj; i++)
					acc[i] += c * bf16_to_f32(yr[i]);
			}
			for (int64_t i = 0; i < nj; i++)
				o[i] = bf16_from_f32(acc[i]);
		}
	}
}

void cpu_bf16_moe_dot(float *dw, const void *y, const void *x, const int32_t *pos,
		      const be_moe *r, int64_t d)
{
	const uint16_t *yy = y, *xx = x;
	int64_t na = r->n * r->k;
#pragma omp parallel for schedule(dynamic, 64) if (na * d > CPU_PAR_MIN)
	for (int64_t a = 0; a < na; a++) {
		int64_t p = pos[a];
		if (p < 0) {
			dw[a] = 0;
			continue;
		}
		const uint16_t *yr = yy + p * d, *xr = xx + (a / r->k) * d;
		double acc = 0;
		for (int64_t i = 0; i < d; i++)
			acc += (double)bf16_to_f32(yr[i]) * bf16_to_f32(xr[i]);
		dw[a] = (float)acc;
	}
}

/* Rows past the groups' last (a capacity's dropped rows) of a grouped
 * product's output with beta 0: zero, as the float32 kernel leaves them. */
void cpu_bf16_zero_rows(void *c, be_dtype ct, int64_t from, int64_t rows, int64_t width)
{
	if (rows > from)
		memset((char *)c + (size_t)(from * width) * esize(ct), 0,
		       (size_t)((rows - from) * width) * esize(ct));
}
