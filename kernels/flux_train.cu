// flux_train.cu: the Flux transformer's training ops (backend.h's ln_mod_fwd
// .. flow_mse), float32 or bf16 (T).  float32 rounds as the CPU backend's float32 kernel
// (products and sums each rounded: _rn intrinsics, no contraction into fused
// multiply-adds; expf and tanhf, not their fast intrinsics); what differs is
// the order of a row's sums (block reductions in double).  The per-sample
// vectors' gradients sum a column over its sample's rows in row order, one
// thread per column, so they repeat bit for bit.  bf16 adds the CPU bf16
// kernels' roundings (cpu_bf16_fluxt.c: torch's bf16 modules') through
// round_as<T>, which is the identity for float, so the float32 kernels are
// what they were.
#include "gpu/device.cuh"

static const int THREADS = 256;

// One block per row r of (b * n, d): LN's statistics in double, then y =
// (1 + scale) xn + shift with sample r / n's vectors.
template <typename T>
__global__ void ln_mod_fwd_kernel(T *y, float *stats, const T *__restrict__ x, const T *shift,
				  const T *scale, int64_t ld, int64_t n, int64_t d, float eps)
{
	__shared__ double red[32];
	int64_t r = blockIdx.x;
	const T *xr = x + r * d, *sh = shift + r / n * ld, *sc = scale + r / n * ld;
	double acc = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		acc += to_f(xr[j]);
	double mean = block_sum_d(acc, red) / (double)d;
	acc = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		acc += (to_f(xr[j]) - mean) * (to_f(xr[j]) - mean);
	double var = block_sum_d(acc, red) / (double)d;
	float fm = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
	if (threadIdx.x == 0)
		stats[2 * r] = fm, stats[2 * r + 1] = rstd;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		float xn = round_as<T>(__fmul_rn(to_f(xr[j]) - fm, rstd));
		float p = round_as<T>(__fmul_rn(round_as<T>(1.0f + to_f(sc[j])), xn));
		y[r * d + j] = from_f<T>(__fadd_rn(p, to_f(sh[j])));
	}
}

// g = dy (1 + scale): float32 keeps it in double, bf16 rounds it (torch's
// mul backward stores it).
template <typename T> __device__ __forceinline__ double ln_g(T dy, T sc)
{
	if (sizeof(T) == 2)
		return round_as<T>(__fmul_rn(to_f(dy), round_as<T>(1.0f + to_f(sc))));
	return (double)to_f(dy) * (1.0f + to_f(sc));
}

// dx's part: one block per row, the means of g = dy (1 + scale) and of g xn
// in double, then dx += rstd (g - a - xn c).
template <typename T>
__global__ void ln_mod_bwd_dx_kernel(T *dx, const T *__restrict__ dy, const T *__restrict__ x,
				     const float *stats, const T *scale, int64_t ld, int64_t n,
				     int64_t d)
{
	__shared__ double red[32];
	int64_t r = blockIdx.x;
	const T *xr = x + r * d, *dyr = dy + r * d, *sc = scale + r / n * ld;
	float fm = stats[2 * r], rstd = stats[2 * r + 1];
	double a = 0.0, c = 0.0;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		double xn = __fmul_rn(to_f(xr[j]) - fm, rstd), g = ln_g(dyr[j], sc[j]);
		a += g;
		c += g * xn;
	}
	a = block_sum_d(a, red) / (double)d;
	c = block_sum_d(c, red) / (double)d;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
		double xn = __fmul_rn(to_f(xr[j]) - fm, rstd), g = ln_g(dyr[j], sc[j]);
		float dln = round_as<T>((float)(rstd * (g - a - xn * c)));
		dx[r * d + j] = from_f<T>(to_f(dx[r * d + j]) + dln);
	}
}

// The shift and scale gradients: thread (i, j) sums column j over sample i's
// rows, in order (bf16: each dy LN(x) rounded, as torch's mul backward).
template <typename T>
__global__ void ln_mod_bwd_vec_kernel(T *dshift, T *dscale, const T *__restrict__ dy,
				      const T *__restrict__ x, const float *stats, int64_t ld,
				      int64_t b, int64_t n, int64_t d)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= b * d)
		return;
	int64_t i = t / d, j = t % d;
	double gs = 0.0, gc = 0.0;
	for (int64_t r = i * n; r < (i + 1) * n; r++) {
		float xn = round_as<T>(__fmul_rn(to_f(x[r * d + j]) - stats[2 * r], stats[2 * r + 1]));
		float g = to_f(dy[r * d + j]);
		gs += g;
		gc += sizeof(T) == 2 ? (double)round_as<T>(__fmul_rn(g, xn)) : (double)g * xn;
	}
	dshift[i * ld + j] = from_f<T>(to_f(dshift[i * ld + j]) + (float)gs);
	dscale[i * ld + j] = from_f<T>(to_f(dscale[i * ld + j]) + (float)gc);
}

template <typename T>
__global__ void gate_add_kernel(T *x, const T *gate, const T *__restrict__ y, int64_t ld,
				int64_t n, int64_t d, int64_t total)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		float gy = round_as<T>(__fmul_rn(to_f(gate[e / d / n * ld + e % d]), to_f(y[e])));
		x[e] = from_f<T>(__fadd_rn(to_f(x[e]), gy));
	}
}

// Thread (i, j): dy = gate dx down column j of sample i, dgate += sum dx y.
template <typename T>
__global__ void gate_add_bwd_kernel(T *dgate, T *dy, const T *__restrict__ dx, const T *gate,
				    const T *__restrict__ y, int64_t ld, int64_t b, int64_t n,
				    int64_t d)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= b * d)
		return;
	int64_t i = t / d, j = t % d;
	float g = to_f(gate[i * ld + j]);
	double s = 0.0;
	for (int64_t r = i * n; r < (i + 1) * n; r++) {
		float v = to_f(dx[r * d + j]), w = to_f(y[r * d + j]);
		s += sizeof(T) == 2 ? (double)round_as<T>(__fmul_rn(v, w)) : (double)v * w;
		dy[r * d + j] = from_f<T>(__fmul_rn(g, v));
	}
	dgate[i * ld + j] = from_f<T>(to_f(dgate[i * ld + j]) + (float)s);
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

// The loss's terms: e = pred - (noise - x) (bf16: the target rounded), grad
// = 2 e scale, and each block's sum of e^2 (double) to part[blockIdx.x]; one
// block then sums the parts in order into the loss slot.
template <typename T>
__global__ void flow_mse_kernel(T *grad, double *part, const T *__restrict__ pred,
				const T *__restrict__ x, const T *__restrict__ noise, int64_t n,
				float scale)
{
	__shared__ double red[32];
	double acc = 0.0;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
		float e = to_f(pred[j]) - round_as<T>(to_f(noise[j]) - to_f(x[j]));
		acc += (double)e * e;
		if (grad)
			grad[j] = from_f<T>(__fmul_rn(2.0f * e, scale));
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

extern "C" int launch_ln_mod_fwd(void *y, float *stats, const void *x, const void *shift,
				 const void *scale, int t, int64_t ld, int64_t b, int64_t n,
				 int64_t d, float eps, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	DISPATCH(t, T,
		 ln_mod_fwd_kernel<T><<<(unsigned)(b * n), THREADS, 0, (cudaStream_t)stream>>>(
			 (T *)y, stats, (const T *)x, (const T *)shift, (const T *)scale, ld, n, d,
			 eps));
	return launch_status();
}

extern "C" int launch_ln_mod_bwd(void *dx, void *dshift, void *dscale, const void *dy,
				 const void *x, const float *stats, const void *scale, int t,
				 int64_t ld, int64_t b, int64_t n, int64_t d, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 ln_mod_bwd_dx_kernel<T><<<(unsigned)(b * n), THREADS, 0, s>>>(
			 (T *)dx, (const T *)dy, (const T *)x, stats, (const T *)scale, ld, n, d);
		 ln_mod_bwd_vec_kernel<T><<<blocks_for(b * d), THREADS, 0, s>>>(
			 (T *)dshift, (T *)dscale, (const T *)dy, (const T *)x, stats, ld, b, n, d));
	return launch_status();
}

extern "C" int launch_gate_add(void *x, const void *gate, const void *y, int t, int64_t ld,
			       int64_t b, int64_t n, int64_t d, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	unsigned grid = grid_for(b * n * d, THREADS);
	DISPATCH(t, T,
		 gate_add_kernel<T><<<grid, THREADS, 0, s>>>((T *)x, (const T *)gate, (const T *)y, ld,
							     n, d, b * n * d));
	return launch_status();
}

extern "C" int launch_gate_add_bwd(void *dgate, void *dy, const void *dx, const void *gate,
				   const void *y, int t, int64_t ld, int64_t b, int64_t n,
				   int64_t d, void *stream)
{
	if (!rows_ok(ld, b, n, d))
		return (int)cudaErrorInvalidValue;
	if (b * d == 0)
		return 0;
	DISPATCH(t, T,
		 gate_add_bwd_kernel<T><<<blocks_for(b * d), THREADS, 0, (cudaStream_t)stream>>>(
			 (T *)dgate, (T *)dy, (const T *)dx, (const T *)gate, (const T *)y, ld, b,
			 n, d));
	return launch_status();
}

extern "C" int launch_gelu_tanh(void *y, const void *x, const void *dy, int t, int64_t n,
				void *stream)
{
	if (n < 0)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 return dy ? map2((T *)y, (const T *)x, (const T *)dy, n, op_gelu_tanh_bwd(), s)
			   : map2((T *)y, (const T *)x, (const T *)nullptr, n, op_gelu_tanh(), s));
	return 0;
}

extern "C" int launch_silu(void *y, const void *x, const void *dy, int t, int64_t n,
			   void *stream)
{
	if (n < 0)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 return dy ? map2((T *)y, (const T *)x, (const T *)dy, n, op_silu_bwd(), s)
			   : map2((T *)y, (const T *)x, (const T *)nullptr, n, op_silu(), s));
	return 0;
}

extern "C" int launch_flow_mse(void *grad, const void *pred, const void *x, const void *noise,
			       int t, int64_t n, float scale, double *part, int parts,
			       double *sum, int64_t *count, void *stream)
{
	if (n < 0 || parts < 1)
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 flow_mse_kernel<T><<<(unsigned)parts, THREADS, 0, s>>>(
			 (T *)grad, part, (const T *)pred, (const T *)x, (const T *)noise, n,
			 scale));
	flow_mse_sum_kernel<<<1, THREADS, 0, s>>>(sum, count, part, parts, n);
	return launch_status();
}
