/* flux_ops.h: the Flux transformer's ops the backend table lacks, plain C
 * over host memory, float32 (private to lib/flux).  Each is one op with its
 * own shapes and its backward beside it, so that it can become a backend op
 * (a CPU function and a CUDA kernel) as it stands.  Each computes as torch's
 * float32 CPU kernel does, op by op: a product and a sum are each rounded
 * (no fused multiply-add), so only the libm functions and the order of a
 * reduction's sums can differ from torch's, by float32 rounding.
 *
 * "Per sample" vectors: a modulation's shift, scale and gate are columns of
 * mod (b, ld): sample i's vector at mod + i * ld; the rows of a (b * n, d)
 * activation are sample i's from i * n. */
#ifndef TITAN_FLUX_OPS_H
#define TITAN_FLUX_OPS_H

#include <stdint.h>

/* timestep_embedding(t, dim) (dim even, max_period 10000, time_factor 1000):
 * out (b, dim) = [cos(a), sin(a)], a_i = (1000 t) * exp(-ln(10000) i / (dim/2)). */
void fx_timestep_embedding(float *out, const float *t, int64_t b, int64_t dim);

/* EmbedND's table for one sample: cs (n, pairs, 2) = (cos, sin) of each
 * position's angle for each pair, the axes' pairs one after the other:
 * axis a's pair p turns by ids[a] / theta^(2p / axes_dim[a]).  ids (n, 3). */
void fx_rope_table(float *cs, const float *ids, int64_t n, const int64_t axes_dim[3],
		   double theta);

/* y (n) = silu(x) = x / (1 + exp(-x)); the backward dx (n) = dy silu'(x),
 * ACCUMULATED when acc, else written. */
void fx_silu(float *y, const float *x, int64_t n);
void fx_silu_bwd(float *dx, const float *dy, const float *x, int64_t n, int acc);

/* GELU(approximate="tanh"): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
 * the backward writes dx = dy gelu'(x).  n values. */
void fx_gelu_tanh(float *y, const float *x, int64_t n);
void fx_gelu_tanh_bwd(float *dx, const float *dy, const float *x, int64_t n);

/* The modulated LayerNorm (no affine, eps): per row r of sample i,
 *   y = (1 + scale_i) (x - mean) rstd + shift_i
 * x, y (b * n, d); stats (b * n, 2) keeps (mean, rstd) for the backward;
 * shift, scale (d) of sample i at shift + i * ld, scale + i * ld. */
void fx_ln_mod(float *y, float *stats, const float *x, const float *shift,
	       const float *scale, int64_t ld, int64_t b, int64_t n, int64_t d, float eps);
/* Its backward: dx (b * n, d) ACCUMULATED (the residual stream's gradient),
 * dshift, dscale (sample i's at + i * ld) ACCUMULATED. */
void fx_ln_mod_bwd(float *dx, float *dshift, float *dscale, const float *dy, const float *x,
		   const float *stats, const float *scale, int64_t ld, int64_t b, int64_t n,
		   int64_t d);

/* The gated residual x (b * n, d) += gate_i * y; gate (d) of sample i at
 * gate + i * ld. */
void fx_gate_add(float *x, const float *gate, const float *y, int64_t ld, int64_t b,
		 int64_t n, int64_t d);
/* Its backward for the gradient dx of the sum: dgate (+ i * ld) ACCUMULATED
 * with sum over rows of dx * y, dy (b * n, d) = gate_i * dx written. */
void fx_gate_add_bwd(float *dgate, float *dy, const float *dx, const float *gate,
		     const float *y, int64_t ld, int64_t b, int64_t n, int64_t d);

/* The rectified-flow input: img (b * n, d) = (1 - t_i) x + t_i noise. */
void fx_noisy(float *img, const float *x, const float *noise, const float *t, int64_t b,
	      int64_t n, int64_t d);
/* MSE against target = noise - x over cnt values: returns
 * sum((pred - target)^2) / cnt (the sum in double, then float32); with
 * grad not NULL, grad = 2 (pred - target) / cnt. */
float fx_mse(float *grad, const float *pred, const float *x, const float *noise, int64_t cnt);

#endif
