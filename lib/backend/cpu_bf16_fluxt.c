/* The CPU backend's bfloat16 kernels of the Flux transformer's training ops
 * (cpu_bf16.h; backend.h's ln_mod_fwd .. flow_mse), every tensor bf16 but the
 * LayerNorm's float32 stats.  Each rounds where torch's bf16 module stores a
 * tensor (FSDP's param_dtype bf16: every op of the block is a bf16 op that
 * computes in float32 and rounds its output once):
 *   ln_mod      LN(x) rounded, 1 + scale rounded, their product rounded,
 *               + shift rounded; the backward rounds dy (1 + scale) before
 *               LayerNorm's float32 backward, whose dx is rounded before it
 *               joins the residual's gradient (another rounding), and
 *               dscale sums dy LN(x) rounded per element
 *   gate_add    gate y rounded, then x + it rounded; dy = gate dx rounded,
 *               dgate sums dx y rounded per element
 *   gelu, silu  the float32 function of the float value, rounded once
 *   flow_mse    the target noise - x rounded (bf16 tensors' difference),
 *               the error and the loss's terms in float32 (the loss's
 *               .float()), the gradient rounded
 * Sums run in double in row order, as the float32 kernels', so results do
 * not depend on the threads. */
#include <math.h>
#include <stdint.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"

typedef uint16_t bf;

static inline float F(bf v) { return bf16_to_f32(v); }
static inline float R(float v) { return bf16_round(v); }
static inline bf B(float v) { return bf16_from_f32(v); }

void cpu_bf16_ln_mod_fwd(void *yv, float *stats, const void *xv, const void *shv,
			 const void *scv, int64_t ld, int64_t b, int64_t n, int64_t d, float eps)
{
	bf *y = yv;
	const bf *x = xv, *shift = shv, *scale = scv;
#pragma omp parallel for schedule(static) if (b * n * d > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const bf *xr = x + r * d, *sh = shift + r / n * ld, *sc = scale + r / n * ld;
		double s = 0, ss = 0;
		for (int64_t j = 0; j < d; j++)
			s += F(xr[j]);
		double mean = s / (double)d;
		for (int64_t j = 0; j < d; j++)
			ss += (F(xr[j]) - mean) * (F(xr[j]) - mean);
		float fm = (float)mean, rstd = (float)(1.0 / sqrt(ss / (double)d + eps));
		stats[2 * r] = fm;
		stats[2 * r + 1] = rstd;
		for (int64_t j = 0; j < d; j++) {
			float xn = R((F(xr[j]) - fm) * rstd);
			y[r * d + j] = B(R(R(1 + F(sc[j])) * xn) + F(sh[j]));
		}
	}
}

void cpu_bf16_ln_mod_bwd(void *dxv, void *dshv, void *dscv, const void *dyv, const void *xv,
			 const float *stats, const void *scv, int64_t ld, int64_t b, int64_t n,
			 int64_t d)
{
	bf *dx = dxv, *dshift = dshv, *dscale = dscv;
	const bf *dy = dyv, *x = xv, *scale = scv;
#pragma omp parallel for schedule(static) if (b * n * d > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const bf *xr = x + r * d, *dyr = dy + r * d, *sc = scale + r / n * ld;
		float fm = stats[2 * r], rstd = stats[2 * r + 1];
		double a = 0, c = 0;
		for (int64_t j = 0; j < d; j++) {
			double xn = (F(xr[j]) - fm) * rstd, g = R(F(dyr[j]) * R(1 + F(sc[j])));
			a += g;
			c += g * xn;
		}
		a /= (double)d;
		c /= (double)d;
		for (int64_t j = 0; j < d; j++) {
			double xn = (F(xr[j]) - fm) * rstd, g = R(F(dyr[j]) * R(1 + F(sc[j])));
			float dln = R((float)(rstd * (g - a - xn * c)));
			dx[r * d + j] = B(F(dx[r * d + j]) + dln);
		}
	}
#pragma omp parallel for collapse(2) schedule(static) if (b * n * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < d; j++) {
			double gs = 0, gc = 0;
			for (int64_t r = i * n; r < (i + 1) * n; r++) {
				float xn = R((F(x[r * d + j]) - stats[2 * r]) * stats[2 * r + 1]);
				gs += F(dy[r * d + j]);
				gc += R(F(dy[r * d + j]) * xn);
			}
			dshift[i * ld + j] = B(F(dshift[i * ld + j]) + (float)gs);
			dscale[i * ld + j] = B(F(dscale[i * ld + j]) + (float)gc);
		}
}

void cpu_bf16_gate_add(void *xv, const void *gv, const void *yv, int64_t ld, int64_t b,
		       int64_t n, int64_t d)
{
	bf *x = xv;
	const bf *gate = gv, *y = yv;
#pragma omp parallel for schedule(static) if (b * n * d > CPU_PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const bf *g = gate + r / n * ld;
		for (int64_t j = 0; j < d; j++)
			x[r * d + j] = B(F(x[r * d + j]) + R(F(g[j]) * F(y[r * d + j])));
	}
}

void cpu_bf16_gate_add_bwd(void *dgv, void *dyv, const void *dxv, const void *gv,
			   const void *yv, int64_t ld, int64_t b, int64_t n, int64_t d)
{
	bf *dgate = dgv, *dy = dyv;
	const bf *dx = dxv, *gate = gv, *y = yv;
#pragma omp parallel for collapse(2) schedule(static) if (b * n * d > CPU_PAR_MIN)
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < d; j++) {
			double s = 0;
			float g = F(gate[i * ld + j]);
			for (int64_t r = i * n; r < (i + 1) * n; r++) {
				s += R(F(dx[r * d + j]) * F(y[r * d + j]));
				dy[r * d + j] = B(g * F(dx[r * d + j]));
			}
			dgate[i * ld + j] = B(F(dgate[i * ld + j]) + (float)s);
		}
}

/* Elementwise ops through the float32 kernels, a chunk at a time. */
#define CHUNK 1024

typedef void (*unary_f32)(float *y, const float *x, int64_t n);
typedef void (*binary_f32)(float *y, const float *a, const float *x, int64_t n);

static void unary(void *y, const void *x, int64_t n, unary_f32 f)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
		float fx[CHUNK], fy[CHUNK];
		cpu_bf16_convert(fx, BE_F32, (const bf *)x + i0, BE_BF16, m);
		f(fy, fx, m);
		cpu_bf16_convert((bf *)y + i0, BE_BF16, fy, BE_F32, m);
	}
}

static void binary(void *y, const void *a, const void *x, int64_t n, binary_f32 f)
{
#pragma omp parallel for schedule(dynamic, 1) if (n > CPU_PAR_MIN)
	for (int64_t c = 0; c < (n + CHUNK - 1) / CHUNK; c++) {
		int64_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
		float fa[CHUNK], fx[CHUNK], fy[CHUNK];
		cpu_bf16_convert(fa, BE_F32, (const bf *)a + i0, BE_BF16, m);
		cpu_bf16_convert(fx, BE_F32, (const bf *)x + i0, BE_BF16, m);
		f(fy, fa, fx, m);
		cpu_bf16_convert((bf *)y + i0, BE_BF16, fy, BE_F32, m);
	}
}

void cpu_bf16_gelu_tanh_fwd(void *y, const void *x, int64_t n)
{
	unary(y, x, n, cpu_gelu_tanh_fwd_f32);
}

void cpu_bf16_gelu_tanh_bwd(void *dx, const void *dy, const void *x, int64_t n)
{
	binary(dx, dy, x, n, cpu_gelu_tanh_bwd_f32);
}

void cpu_bf16_silu_fwd(void *y, const void *x, int64_t n)
{
	unary(y, x, n, cpu_silu_fwd_f32);
}

void cpu_bf16_silu_bwd(void *dx, const void *dy, const void *x, int64_t n)
{
	binary(dx, dy, x, n, cpu_silu_bwd_f32);
}

double cpu_bf16_flow_mse(void *gv, const void *pv, const void *xv, const void *nv, int64_t n,
			 float grad_scale)
{
	bf *grad = gv;
	const bf *pred = pv, *x = xv, *noise = nv;
	double s = 0;
	for (int64_t j = 0; j < n; j++) {
		float e = F(pred[j]) - R(F(noise[j]) - F(x[j]));
		s += (double)e * e;
		if (grad != NULL)
			grad[j] = B(2 * e * grad_scale);
	}
	return s;
}
