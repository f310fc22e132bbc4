// flux_train.cu: the Flux transformer's training ops (backend.h's ln_mod_fwd
// .. flow_mse), float32.  Each rounds as the CPU backend's float32 kernel
// (products and sums each rounded: _rn intrinsics, no contraction into fused
// multiply-adds; expf and tanhf, not their fast intrinsics); what differs is
// the order of a row's sums (block reductions in double).  The per-sample
// vectors' gradients sum a column over its sample's rows in row order, one
// thread per column, so they repeat bit for bit.
#include "gpu/device.cuh"

static const int THREADS = 256;

// One block per row r of (b * n, d): LN's statistics in double, then y =
// (1 + scale) xn + shift with sample r / n's vectors.
__global__ void ln_mod_fwd_kernel(float *y, float *stats, const float *__restrict__ x,
				  const float *shift, const float *scale, int64_t ld, int64_t n,
				  int64_t d, float eps)
{
	__shared__ double red[32];
	int64_t r = blockIdx.x;
	const float *xr = x + r * d, *sh = shift + r / n * ld, *sc = scale + r / n * ld;
	double acc = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		acc += xr[j];
	double mean = block_sum_d(acc, red) / (double)d;
	acc = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		acc += (xr[j] - mean) * (xr[j] - mean);
	double var = block_sum_d(acc, red) / (double)d;
	float fm = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
	if (threadIdx.x == 0)
		stats[2 * r] = fm, stats[2 * r + 1] = rstd;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		float xn = __fmul_rn(xr[j] - fm, rstd);
		y[r * d + j] = __fadd_rn(__fmul_rn(1.0f + sc[j], xn), sh[j]);
	}
}

// dx's part: one block per row, the means of g = dy (1 + scale) and of g xn
// in double, then dx += rstd (g - a - xn c).
__global__ void ln_mod_bwd_dx_kernel(float *dx, const float *__restrict__ dy,
				     const float *__restrict__ x, const float *stats,
				     const float *scale, int64_t ld, int64_t n, int64_t d)
{
	__shared__ double red[32];
	int64_t r = blockIdx.x;
	const float *xr = x + r * d, *dyr = dy + r * d, *sc = scale + r / n * ld;
	float fm = stats[2 * r], rstd = stats[2 * r + 1];
	double a = 0.0, c = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		double xn = __fmul_rn(xr[j] - fm, rstd), g = (double)dyr[j] * (1.0f + sc[j]);
		a += g;
		c += g * xn;
	}
	a = block_sum_d(a, red) / (double)d;
	c = block_sum_d(c, red) / (double)d;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		double xn = __fmul_rn(xr[j] - fm, rstd), g = (double)dyr[j] * (1.0f + sc[j]);
		dx[r * d + j] += (float)(rstd * (g - a - xn * c));
	}
}

// The shift and scale gradients: thread (i, j) sums column j over sample i's
// rows, in order.
__global__ void ln_mod_bwd_vec_kernel(float *dshift, float *dscale, const float *__restrict__ dy,
				      const float *__restrict__ x, const float *stats, int64_t ld,
				      int64_t b, int64_t n, int64_t d)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= b * d)
		return;
	int64_t i = t / d, j = t % d;
	double gs = 0.0, gc = 0.0;
	for (int64_t r = i * n; r < (i + 1) * n; r++) {
		float xn = __fmul_rn(x[r * d + j] - stats[2 * r], stats[2 * r + 1]);
		gs += dy[r * d + j];
		gc += (double)dy[r * d + j] * xn;
	}
	dshift[i * ld + j] += (float)gs;
	dscale[i * ld + j] += (float)gc;
}

__global__ void gate_add_kernel(float *x, const float *gate, const float *__restrict__ y,
				int64_t ld, int64_t n, int64_t d, int64_t total)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
		x[e] = __fadd_rn(x[e], __fmul_rn(gate[e / d / n * ld + e % d], y[e]));
}

// Thread (i, j): dy = gate dx down column j of sample i, dgate += sum dx y.
__global__ void gate_add_bwd_kernel(float *dgate, float *dy, const float *__restrict__ dx,
				    const float *gate, const float *__restrict__ y, int64_t ld,
				    int64_t b, int64_t n, int64_t d)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= b * d)
		return;
	int64_t i = t / d, j = t % d;
	float g = gate[i * ld + j];
	double s = 0.0;
	for (int64_t r = i * n; r < (i + 1) * n; r++) {
		s += (double)dx[r * d + j] * y[r * d + j];
		dy[r * d + j] = __fmul_rn(g, dx[r * d + j]);
	}
	dgate[i * ld + j] += (float)s;
}

#define GELU_BETA 0.7978845608028654f // sqrt(2 / pi)
#define GELU_KAPPA 0.044715f

struct op_gelu_tanh {
	__device__ __forceinline__ float operator()(float v, float) const
	{
		float cube = __fmul_rn(__fmul_rn(v, v), v);
		float inner = __fmul_rn(GELU_BETA, __fadd_rn(v, __fmul_rn(GELU_KAPPA, cube)));
		return __fmul_rn(__fmul_rn(0.5f, v), 1.0f + tanhf(inner));
	}
};

struct op_gelu_tanh_bwd { // b = dy
	__device__ __forceinline__ float operator()(float v, float dy) const
	{
		float sq = __fmul_rn(v, v);
		float inner = __fmul_rn(GELU_BETA, __fadd_rn(v, __fmul_rn(__fmul_rn(GELU_KAPPA, sq), v)));
		float th = tanhf(inner);
		float dinner = __fmul_rn(GELU_BETA, __fadd_rn(1.0f, __fmul_rn(3.0f * GELU_KAPPA, sq)));
		float dright = __fmul_rn(__fmul_rn(0.5f, v), __fmul_rn(1.0f - __fmul_rn(th, th), dinner));
		return __fmul_rn(dy, __fadd_rn(__fmul_rn(0.5f, 1.0f + th), dright));
	}
};

struct op_silu {
	__device__ __forceinline__ float operator()(float x, float) const
	{
		return __fdiv_rn(x, 1.0f + expf(-x));
	}
};

struct op_silu_bwd { // b = dy
	__device__ __forceinline__ float operator()(float x, float dy) const
	{
		float s = __fdiv_rn(1.0f, 1.0f + expf(-x));
		return __fmul_rn(dy, __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(x, 1.0f - s))));
	}
};

// The loss's terms: e = pred - (noise - x), grad = 2 e scale, and each block's
// sum of e^2 (double) to part[blockIdx.x]; one block then sums the parts in
// order into the loss slot.
__global__ void flow_mse_kernel(float *grad, double *part, const float *__restrict__ pred,
				const float *__restrict__ x, const float *__restrict__ noise,
				int64_t n, float scale)
{
	__shared__ double red[32];
	double acc = 0.0;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
		float e = pred[j] - (noise[j] - x[j]);
		acc += (double)e * e;
		if (grad)
			grad[j] = __fmul_rn(2.0f * e, scale);
	}
	acc = block_sum_d(acc, red);
	if (threadIdx.x == 0)
		part[blockIdx.x] = acc;
}

__global__ void flow_mse_sum_kernel(double *sum, int64_t *count, const double *part, int parts,
				    int64_t n)
{
	__shared__ double red[32];
	double acc = 0.0;
	for (int i = threadIdx.x; i < parts; i += blockDim.x)
		acc += part[i];
	acc = block_sum_d(acc, red);
	if (threadIdx.x == 0)
		*sum = acc, *count = n;
}

static int rows_ok(int64_t ld, int64_t b, int64_t n, int64_t d)
{
	return b >= 0 && n >= 1 && d >= 0 && ld >= d && b * n <= 0x7fffffff;
}

static unsigned blocks_for(int64_t work) { return (unsigned)((work + THREADS - 1) / THREADS); }

extern "C" int launch_ln_mod_fwd(float *y, float *stats, const float *x, const float *shift,
				 const float *scale, int64_t ld, int64_t b, int64_t n, int64_t d,
				 float eps, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	ln_mod_fwd_kernel<<<(unsigned)(b * n), THREADS, 0, (cudaStream_t)stream>>>(
		y, stats, x, shift, scale, ld, n, d, eps);
	return launch_status();
}

extern "C" int launch_ln_mod_bwd(float *dx, float *dshift, float *dscale, const float *dy,
				 const float *x, const float *stats, const float *scale,
				 int64_t ld, int64_t b, int64_t n, int64_t d, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	ln_mod_bwd_dx_kernel<<<(unsigned)(b * n), THREADS, 0, s>>>(dx, dy, x, stats, scale, ld, n, d);
	ln_mod_bwd_vec_kernel<<<blocks_for(b * d), THREADS, 0, s>>>(dshift, dscale, dy, x, stats,
								    ld, b, n, d);
	return launch_status();
}

extern "C" int launch_gate_add(float *x, const float *gate, const float *y, int64_t ld,
			       int64_t b, int64_t n, int64_t d, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	gate_add_kernel<<<grid_for(b * n * d, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
		x, gate, y, ld, n, d, b * n * d);
	return launch_status();
}

extern "C" int launch_gate_add_bwd(float *dgate, float *dy, const float *dx, const float *gate,
				   const float *y, int64_t ld, int64_t b, int64_t n, int64_t d,
				   void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	gate_add_bwd_kernel<<<blocks_for(b * d), THREADS, 0, (cudaStream_t)stream>>>(
		dgate, dy, dx, gate, y, ld, b, n, d);
	return launch_status();
}

extern "C" int launch_gelu_tanh(float *y, const float *x, const float *dy, int64_t n,
				void *stream)
{
	if (n < 0)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	return dy ? map2(y, x, dy, n, op_gelu_tanh_bwd(), s)
		  : map2(y, x, (const float *)nullptr, n, op_gelu_tanh(), s);
}

extern "C" int launch_silu(float *y, const float *x, const float *dy, int64_t n, void *stream)
{
	if (n < 0)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	return dy ? map2(y, x, dy, n, op_silu_bwd(), s)
		  : map2(y, x, (const float *)nullptr, n, op_silu(), s);
}

extern "C" int launch_flow_mse(float *grad, const float *pred, const float *x,
			       const float *noise, int64_t n, float scale, double *part,
			       int parts, double *sum, int64_t *count, void *stream)
{
	if (n < 0 || parts < 1)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	flow_mse_kernel<<<(unsigned)parts, THREADS, 0, s>>>(grad, part, pred, x, noise, n, scale);
	flow_mse_sum_kernel<<<1, THREADS, 0, s>>>(sum, count, part, parts, n);
	return launch_status();
}
