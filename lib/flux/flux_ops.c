/* flux_ops.c: flux_ops.h's plain C ops.  The loops run over rows with
 * OpenMP where a row's work is independent; sums over rows (the gradients
 * of per-sample vectors) run in row order in double, so a result does not
 * depend on the thread count. */
#include <math.h>
#include <stddef.h>

#include "flux/flux_ops.h"

#define PAR_MIN 65536

void fx_timestep_embedding(float *out, const float *t, int64_t b, int64_t dim)
{
	int64_t half = dim / 2;
	/* torch: -math.log(max_period) * arange(half) / half in float32 (the
	 * Python scalar rounded to float32 by the multiply) */
	float neg_log = (float)-log(10000.0);
	for (int64_t i = 0; i < b; i++) {
		float tt = 1000.0f * t[i];
		for (int64_t j = 0; j < half; j++) {
			float f = expf((float)j * neg_log / (float)half);
			float a = tt * f;
			out[i * dim + j] = cosf(a);
			out[i * dim + half + j] = sinf(a);
		}
	}
}

void fx_rope_table(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
		   double theta)
{
	int64_t pairs = (axes_dim[0] + axes_dim[1] + axes_dim[2]) / 2;
	for (int64_t r = 0; r < n; r++) {
		float *row = cs + r * pairs * 2;
		for (int a = 0, p0 = 0; a < 3; p0 += (int)(axes_dim[a] / 2), a++)
			for (int64_t p = 0; p < axes_dim[a] / 2; p++) {
				/* rope(): omega = 1 / theta ** (arange(0, dim, 2) / dim), float32 */
				float sc = (float)(2 * p) / (float)axes_dim[a];
				float om = 1.0f / powf((float)theta, sc);
				float ang = ids[r * 3 + a] * om;
				row[2 * (p0 + p)] = cosf(ang);
				row[2 * (p0 + p) + 1] = sinf(ang);
			}
	}
}

void fx_silu(float *y, const float *x, int64_t n)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] / (1.0f + expf(-x[i]));
}

void fx_silu_bwd(float *dx, const float *dy, const float *x, int64_t n, int acc)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float s = 1.0f / (1.0f + expf(-x[i]));
		float g = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
		dx[i] = acc ? dx[i] + g : g;
	}
}

#define GELU_BETA 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715f

void fx_gelu_tanh(float *y, const float *x, int64_t n)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float v = x[i], cube = v * v * v;
		float inner = GELU_BETA * (v + GELU_KAPPA * cube);
		y[i] = 0.5f * v * (1.0f + tanhf(inner));
	}
}

void fx_gelu_tanh_bwd(float *dx, const float *dy, const float *x, int64_t n)
{
#pragma omp parallel for if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float v = x[i], sq = v * v;
		float inner = GELU_BETA * (v + GELU_KAPPA * sq * v);
		float th = tanhf(inner);
		float left = 0.5f * v, right = 1.0f + th;
		float dleft = 0.5f * right;
		float dinner = GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * sq);
		float dright = left * ((1.0f - th * th) * dinner);
		dx[i] = dy[i] * (dleft + dright);
	}
}

void fx_ln_mod(float *y, float *stats, const float *x, const float *shift,
	       const float *scale, int64_t ld, int64_t b, int64_t n, int64_t d, float eps)
{
#pragma omp parallel for if (b * n * d > PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const float *xr = x + r * d, *sh = shift + (r / n) * ld, *sc = scale + (r / n) * ld;
		double s = 0, ss = 0;
		for (int64_t j = 0; j < d; j++)
			s += xr[j];
		double mean = s / (double)d;
		for (int64_t j = 0; j < d; j++)
			ss += (xr[j] - mean) * (xr[j] - mean);
		float fm = (float)mean, rstd = (float)(1.0 / sqrt(ss / (double)d + eps));
		stats[2 * r] = fm;
		stats[2 * r + 1] = rstd;
		for (int64_t j = 0; j < d; j++) {
			float xn = (xr[j] - fm) * rstd;
			y[r * d + j] = (1.0f + sc[j]) * xn + sh[j];
		}
	}
}

void fx_ln_mod_bwd(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
		   const float *stats, const float *scale, int64_t ld, int64_t b, int64_t n,
		   int64_t d)
{
#pragma omp parallel for if (b * n * d > PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const float *xr = x + r * d, *dyr = dy + r * d, *sc = scale + (r / n) * ld;
		float fm = stats[2 * r], rstd = stats[2 * r + 1];
		double a = 0, c = 0; /* mean of dxn and of dxn * xn */
		for (int64_t j = 0; j < d; j++) {
			double xn = (xr[j] - fm) * rstd, g = (double)dyr[j] * (1.0f + sc[j]);
			a += g;
			c += g * xn;
		}
		a /= (double)d;
		c /= (double)d;
		for (int64_t j = 0; j < d; j++) {
			double xn = (xr[j] - fm) * rstd, g = (double)dyr[j] * (1.0f + sc[j]);
			dx[r * d + j] += (float)(rstd * (g - a - xn * c));
		}
	}
	/* the per-sample vectors: column sums over each sample's rows, in order */
#pragma omp parallel for collapse(2) if (b * n * d > PAR_MIN)
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < d; j++) {
			double gs = 0, gc = 0;
			for (int64_t r = i * n; r < (i + 1) * n; r++) {
				float xn = (x[r * d + j] - stats[2 * r]) * stats[2 * r + 1];
				gs += dy[r * d + j];
				gc += (double)dy[r * d + j] * xn;
			}
			dshift[i * ld + j] += (float)gs;
			dscale[i * ld + j] += (float)gc;
		}
}

void fx_gate_add(float *x, const float *gate, const float *y, int64_t ld, int64_t b,
		 int64_t n, int64_t d)
{
#pragma omp parallel for if (b * n * d > PAR_MIN)
	for (int64_t r = 0; r < b * n; r++) {
		const float *g = gate + (r / n) * ld;
		for (int64_t j = 0; j < d; j++)
			x[r * d + j] += g[j] * y[r * d + j];
	}
}

void fx_gate_add_bwd(float *dgate, float *dy, const float *dx, const float *gate,
		     const float *y, int64_t ld, int64_t b, int64_t n, int64_t d)
{
#pragma omp parallel for collapse(2) if (b * n * d > PAR_MIN)
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < d; j++) {
			double s = 0;
			float g = gate[i * ld + j];
			for (int64_t r = i * n; r < (i + 1) * n; r++) {
				s += (double)dx[r * d + j] * y[r * d + j];
				dy[r * d + j] = g * dx[r * d + j];
			}
			dgate[i * ld + j] += (float)s;
		}
}

void fx_noisy(float *img, const float *x, const float *noise, const float *t, int64_t b,
	      int64_t n, int64_t d)
{
	for (int64_t i = 0; i < b; i++) {
		float s = t[i], one_minus = 1.0f - s;
		for (int64_t j = i * n * d; j < (i + 1) * n * d; j++)
			img[j] = one_minus * x[j] + s * noise[j];
	}
}

float fx_mse(float *grad, const float *pred, const float *x, const float *noise, int64_t cnt)
{
	double s = 0;
	/* torch: the loss's division's backward hands mse_loss 1/cnt in float32,
	 * which multiplies 2 (pred - target) */
	float inv = 1.0f / (float)cnt;
	for (int64_t j = 0; j < cnt; j++) {
		float diff = pred[j] - (noise[j] - x[j]);
		s += (double)diff * diff;
		if (grad != NULL)
			grad[j] = 2.0f * diff * inv;
	}
	return (float)((float)s / (float)cnt);
}
