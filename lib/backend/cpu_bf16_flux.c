/* The CPU backend's bfloat16 kernels of Flux's encoder ops (cpu_bf16.h): as in
 * cpu_bf16.c, the float32 kernels (cpu_flux.inc) run on pieces converted to
 * float32 (a batch row, a chunk, a row, a group of channels) with their bf16
 * roundings of intermediates on, and the results are rounded where they are
 * stored.  So a bf16 result is the float32 op's with torch's bf16 roundings,
 * and repeats bit for bit whatever the threads.  The image ops only move
 * elements: their bf16 instances copy bf16's bits (cpu_image.inc). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"

#define REAL uint16_t
#define SFX bf16
#include "backend/cpu_image.inc"
#undef REAL
#undef SFX

/* Elements per chunk of the elementwise ops (three float buffers on the stack). */
#define CHUNK 1024

static inline const void *at(const void *p, be_dtype t, int64_t i)
{
	return (const char *)p + (size_t)i * be_dtype_size(t);
}

/* Threads of a loop over `work` elements that holds per-thread scratch (its
 * `if` clause asks the same). */
static int threads_for(int64_t work)
{
	return work > CPU_PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
}

void cpu_bf16_t5_attention(backend *be, void *out, const void *q, const void *k, const void *v,
			   const void *bias, int64_t b, int64_t l, int64_t h, int64_t dk)
{
	int64_t rows = l * h * dk; /* one batch row of q, k, v or out */
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(4 * rows + h * l * l), "t5_attention");
	if (!s)
		return;
	float *qf = s, *kf = qf + rows, *vf = kf + rows, *of = vf + rows, *bf = of + rows;
	cpu_bf16_convert(bf, BE_F32, bias, BE_BF16, h * l * l);
	for (int64_t bi = 0; bi < b; bi++) {
		cpu_bf16_convert(qf, BE_F32, at(q, BE_BF16, bi * rows), BE_BF16, rows);
		cpu_bf16_convert(kf, BE_F32, at(k, BE_BF16, bi * rows), BE_BF16, rows);
		cpu_bf16_convert(vf, BE_F32, at(v, BE_BF16, bi * rows), BE_BF16, rows);
		cpu_t5_attention_f32(of, qf, kf, vf, bf, 1, l, h, dk, 1);
		cpu_bf16_convert((char *)out + (size_t)(bi * rows) * 2, BE_BF16, of, BE_F32, rows);
	}
}

void cpu_bf16_geglu_fwd(void *y, const void *a, const void *g, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
		float fa[CHUNK], fg[CHUNK], fy[CHUNK];
		cpu_bf16_convert(fa, BE_F32, at(a, BE_BF16, i0), BE_BF16, m);
		cpu_bf16_convert(fg, BE_F32, at(g, BE_BF16, i0), BE_BF16, m);
		cpu_geglu_fwd_f32(fy, fa, fg, m, 1);
		cpu_bf16_convert((char *)y + (size_t)i0 * 2, BE_BF16, fy, BE_F32, m);
	}
}

void cpu_bf16_swish(void *x, float beta, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
		float f[CHUNK];
		void *xi = (char *)x + (size_t)i0 * 2;
		cpu_bf16_convert(f, BE_F32, xi, BE_BF16, m);
		cpu_swish_f32(f, beta, m, 1);
		cpu_bf16_convert(xi, BE_BF16, f, BE_F32, m);
	}
}

/* A norm's scratch: w and b (nw each) as float32, then 2 * per floats for each
 * of nt threads.  NULL with a fault when it cannot be had. */
static float *norm_scratch(backend *be, const char *op, const void *w, const void *b,
			   be_dtype wt, int64_t nw, int64_t per, int nt)
{
	float *s = cpu_scratch(be, sizeof(float) * (size_t)(2 * nw + 2 * per * nt), op);
	if (s) {
		cpu_bf16_convert(s, BE_F32, w, wt, nw);
		cpu_bf16_convert(s + nw, BE_F32, b, wt, nw);
	}
	return s;
}

void cpu_bf16_layernorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			    const void *w, const void *b, be_dtype wt, int64_t n, int64_t d,
			    float eps)
{
	int nt = threads_for(n * d);
	float *s = norm_scratch(be, "layernorm_fwd", w, b, wt, d, d, nt);
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt)
	for (int64_t i = 0; i < n; i++) {
		float *fx = s + 2 * d + 2 * d * omp_get_thread_num(), *fy = fx + d;
		cpu_bf16_convert(fx, BE_F32, at(x, xt, i * d), xt, d);
		cpu_layernorm_fwd_f32(fy, fx, s, s + d, 1, d, eps);
		cpu_bf16_convert((char *)y + (size_t)(i * d) * be_dtype_size(yt), yt, fy, BE_F32, d);
	}
}

/* One (sample, group) at a time: the float32 kernel over its channels alone. */
void cpu_bf16_groupnorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			    const void *w, const void *b, be_dtype wt, int64_t n, int64_t c,
			    int64_t hw, int64_t groups, float eps)
{
	int64_t cg = c / groups, len = cg * hw;
	int nt = threads_for(n * c * hw);
	float *s = norm_scratch(be, "groupnorm_fwd", w, b, wt, c, len, nt);
	if (!s)
		return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
	for (int64_t t = 0; t < n * groups; t++) {
		float *fx = s + 2 * c + 2 * len * omp_get_thread_num(), *fy = fx + len;
		int64_t c0 = t % groups * cg;
		cpu_bf16_convert(fx, BE_F32, at(x, xt, t * len), xt, len);
		cpu_groupnorm_fwd_f32(fy, fx, s + c0, s + c + c0, 1, cg, hw, 1, eps);
		cpu_bf16_convert((char *)y + (size_t)(t * len) * be_dtype_size(yt), yt, fy, BE_F32,
				 len);
	}
}
