/* ae_ops.c: the autoencoder's plain-C ops (ae_ops.h). */
#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "fluxae/ae_ops.h"

void ae_round(int bf16, float *x, int64_t n)
{
	if (!bf16)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
		x[i] = bf16_round(x[i]);
}

void ae_group_norm(float *restrict y, const float *restrict x, const float *w, const float *b,
		   int64_t c, int64_t hw, int64_t groups, float eps)
{
	int64_t cg = c / groups, n = cg * hw;
#pragma omp parallel for schedule(static)
	for (int64_t g = 0; g < groups; g++) {
		const float *xg = x + g * n;
		float *yg = y + g * n;
		/* one pass, shifted by a value of the group: the sums of squares
		 * cancel only as far as that value is from the mean, a few
		 * standard deviations, which double absorbs */
		double k0 = xg[0], sum = 0, sq = 0;
		for (int64_t i = 0; i < n; i++) {
			double d = xg[i] - k0;
			sum += d;
			sq += d * d;
		}
		double mean = k0 + sum / (double)n;
		double var = fmax((sq - sum * sum / (double)n) / (double)n, 0.0); /* biased */
		float rstd = (float)(1.0 / sqrt(var + eps));
		for (int64_t k = 0; k < cg; k++) {
			int64_t ch = g * cg + k;
			float s = rstd * w[ch], t = b[ch] - s * (float)mean;
			const float *xr = xg + k * hw;
			float *yr = yg + k * hw;
			for (int64_t i = 0; i < hw; i++)
				yr[i] = xr[i] * s + t;
		}
	}
}

void ae_swish(float *x, int64_t n, int bf16)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++) {
		float s = 1.0f / (1.0f + expf(-x[i]));
		x[i] = bf16 ? bf16_round(x[i] * bf16_round(s)) : x[i] * s;
	}
}

void ae_upsample2x(float *restrict y, const float *restrict x, int64_t c, int64_t h, int64_t w)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < c * 2 * h; r++) { /* output row r of (c, 2h) */
		const float *xr = x + (r / (2 * h) * h + r % (2 * h) / 2) * w;
		float *yr = y + r * 2 * w;
		for (int64_t j = 0; j < 2 * w; j++)
			yr[j] = xr[j / 2];
	}
}

/* d[j] = x[ix0 + j * stride] for j < n, 0 where that is outside x (w). */
static void row_gather(float *restrict d, const float *restrict x, int64_t w, int64_t ix0,
		       int64_t stride, int64_t n)
{
	/* the j whose index is inside: lo <= j < hi */
	int64_t lo = ix0 >= 0 ? 0 : (-ix0 + stride - 1) / stride;
	int64_t hi = ix0 >= w ? 0 : (w - ix0 + stride - 1) / stride;
	lo = lo < n ? lo : n;
	hi = hi < n ? hi : n;
	hi = hi > lo ? hi : lo;
	for (int64_t j = 0; j < lo; j++)
		d[j] = 0.0f;
	if (stride == 1)
		memcpy(d + lo, x + ix0 + lo, (size_t)(hi - lo) * sizeof *d);
	else
		for (int64_t j = lo; j < hi; j++)
			d[j] = x[ix0 + j * stride];
	for (int64_t j = hi; j < n; j++)
		d[j] = 0.0f;
}

void ae_im2col(float *restrict col, const float *restrict x, int64_t c, int64_t h, int64_t w,
	       int64_t stride, int64_t pad, int64_t ho, int64_t wo, int64_t p0, int64_t np)
{
	(void)ho;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < c * 9; r++) {
		int64_t ci = r / 9, ky = r % 9 / 3, kx = r % 3;
		const float *xc = x + ci * h * w;
		float *dst = col + r * np;
		/* a run of output pixels on one output row at a time */
		for (int64_t p = p0; p < p0 + np;) {
			int64_t oy = p / wo, ox = p % wo;
			int64_t end = (oy + 1) * wo < p0 + np ? (oy + 1) * wo : p0 + np;
			int64_t iy = oy * stride + ky - pad;
			float *d = dst + (p - p0);
			if (iy < 0 || iy >= h) {
				memset(d, 0, (size_t)(end - p) * sizeof *d);
			} else {
				row_gather(d, xc + iy * w, w, ox * stride + kx - pad, stride, end - p);
			}
			p = end;
		}
	}
}

void ae_bias_fill(float *y, const float *b, int64_t c, int64_t hw)
{
#pragma omp parallel for schedule(static)
	for (int64_t ch = 0; ch < c; ch++)
		for (int64_t i = 0; i < hw; i++)
			y[ch * hw + i] = b[ch];
}

void ae_softmax_exp(float *s, float *sum, int64_t rows, int64_t n, int bf16)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < rows; i++) {
		float *r = s + i * n;
		float mx = r[0], acc = 0;
		for (int64_t j = 1; j < n; j++)
			mx = r[j] > mx ? r[j] : mx;
		for (int64_t j = 0; j < n; j++) {
			float e = expf(r[j] - mx);
			acc += e;
			r[j] = bf16 ? bf16_round(e) : e;
		}
		sum[i] = acc;
	}
}

void ae_div_cols(float *y, const float *sum, int64_t c, int64_t ld, int64_t q)
{
#pragma omp parallel for schedule(static)
	for (int64_t ch = 0; ch < c; ch++)
		for (int64_t j = 0; j < q; j++)
			y[ch * ld + j] /= sum[j];
}

void ae_unscale(float *z, int64_t n, float scale, float shift, int bf16)
{
	float sh = bf16 ? bf16_round(shift) : shift;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
		z[i] = bf16 ? bf16_round(bf16_round(bf16_round(z[i]) / scale) + sh)
			    : z[i] / scale + shift;
}
