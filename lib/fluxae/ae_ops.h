/* ae_ops.h: the autoencoder's ops the backend table lacks, plain C over host
 * memory (private to lib/fluxae).  Each is one op with its own shapes, so that
 * it can become a backend op (a CPU function and a CUDA kernel) as it stands.
 * Tensors are float32, one image's (c, h, w) row-major unless said. */
#ifndef TITAN_AE_OPS_H
#define TITAN_AE_OPS_H

#include <stdint.h>

/* x (n) rounded to bfloat16 in place when bf16 is set (the bf16 model's
 * storing of a tensor). */
void ae_round(int bf16, float *x, int64_t n);

/* y (c, hw) = GroupNorm(groups, eps) of x (c, hw) with weight w (c) and bias
 * b (c): per group of c/groups consecutive channels, the mean and biased
 * variance of its (c/groups)*hw values; y = x * s + t with s = rstd * w[ch],
 * t = b[ch] - s * mean, as torch's CPU kernel applies it.  c % groups == 0. */
void ae_group_norm(float *y, const float *x, const float *w, const float *b, int64_t c,
		   int64_t hw, int64_t groups, float eps);

/* x (n) = x * sigmoid(x) in place; with bf16 the sigmoid and the product are
 * rounded to bfloat16 (torch computes them as two ops). */
void ae_swish(float *x, int64_t n, int bf16);

/* y (c, 2h, 2w) = x (c, h, w) repeated 2x2: interpolate(scale_factor 2,
 * mode "nearest"). */
void ae_upsample2x(float *y, const float *x, int64_t c, int64_t h, int64_t w);

/* The im2col of output pixels p0 .. p0+np-1 (row-major over (ho, wo)) of a 3x3
 * conv of the given stride over x (c, h, w) zero-padded by pad at the top and
 * left and by whatever the output size reaches past the bottom and right:
 *   col (c*9, np), col[(ci*9 + ky*3 + kx), p - p0] = x[ci, oy*stride + ky - pad,
 *   ox*stride + kx - pad] or 0 outside x, with (oy, ox) = divmod(p, wo).
 * pad 1, stride 1, ho = h: Conv2d(padding=1); pad 0, stride 2, ho = h/2:
 * Downsample's pad (0, 1, 0, 1) and its conv. */
void ae_im2col(float *col, const float *x, int64_t c, int64_t h, int64_t w, int64_t stride,
	       int64_t pad, int64_t ho, int64_t wo, int64_t p0, int64_t np);

/* y (c, hw) = b[ch] on every row ch: a conv's bias, before the matmul adds
 * into it. */
void ae_bias_fill(float *y, const float *b, int64_t c, int64_t hw);

/* Each row of s (rows, n) replaced by exp(s - max(row)) and sum (rows) set to
 * the row's sum of them (float32, unrounded); with bf16 the exps stored are
 * rounded to bfloat16, as torch's bf16 CPU attention hands them to its
 * P @ V product.  The caller divides the product by sum (ae_div_cols). */
void ae_softmax_exp(float *s, float *sum, int64_t rows, int64_t n, int bf16);

/* y[ch, j] /= sum[j] for ch < c, j < q, y with row stride ld: the softmax's
 * normalisation of attention outputs laid out (c, positions). */
void ae_div_cols(float *y, const float *sum, int64_t c, int64_t ld, int64_t q);

/* z (n) = z / scale + shift in place: AutoEncoder.decode's input; with bf16
 * z is rounded first (the bf16 model's input), then the quotient and the sum
 * (the shift rounded to bfloat16 as torch adds a Python scalar to a bf16
 * tensor). */
void ae_unscale(float *z, int64_t n, float scale, float shift, int bf16);

#endif
