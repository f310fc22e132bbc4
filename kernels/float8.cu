// float8.cu: torchao's dynamic float8 casts on the GPU (backend.h's f8_amax
// and f8_cast; the numerics of lib/float8/float8.h, which the CPU backend runs
// and the GPU check compares against), the decode of float8 codes (convert),
// and the helpers of the scaled GEMM (gemm.c: reciprocal scales, the row-wise
// epilogue).
//
// amax: the largest |x| as the bits of a non-negative float, maximised as
// unsigned integers (the order of such bits is the order of the values, and a
// NaN's bits lie above infinity's: a NaN is kept, as torch.amax keeps it);
// integer atomicMax is exact and order-free, so results repeat bit for bit.
#include <cuda_fp8.h>

#include "gpu/device.cuh"

__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

struct op_umax {
	__device__ __forceinline__ unsigned operator()(unsigned a, unsigned b) const
	{
		return a > b ? a : b;
	}
};

// Per tensor: a grid-stride loop, each block's max folded in with atomicMax.
template <typename T>
__global__ void amax_all_kernel(unsigned *amax, const T *x, int64_t n)
{
	__shared__ unsigned sh[32];
	unsigned m = 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		m = max(m, abs_bits(to_f(x[i])));
	m = block_reduce(m, sh, op_umax(), 0u);
	if (threadIdx.x == 0)
		atomicMax(amax, m);
}

// Per row: one block a row.
template <typename T>
__global__ void amax_rows_kernel(unsigned *amax, const T *x, int64_t rows, int64_t cols)
{
	__shared__ unsigned sh[32];
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		unsigned m = 0;
		for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
			m = max(m, abs_bits(to_f(x[r * cols + j])));
		m = block_reduce(m, sh, op_umax(), 0u);
		if (threadIdx.x == 0)
			amax[r] = m;
	}
}

// Per column: a thread a column over a slice of the rows (blockIdx.y), the
// slices folded in with atomicMax.
template <typename T>
__global__ void amax_cols_kernel(unsigned *amax, const T *x, int64_t rows, int64_t cols,
				 int64_t slice)
{
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= cols)
		return;
	int64_t r0 = (int64_t)blockIdx.y * slice, r1 = min(rows, r0 + slice);
	unsigned m = 0;
	for (int64_t r = r0; r < r1; r++)
		m = max(m, abs_bits(to_f(x[r * cols + j])));
	atomicMax(&amax[j], m);
}

extern "C" int launch_f8_amax(float *amax, const void *x, int tx, int64_t rows, int64_t cols,
			      int scaling, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	unsigned *a = reinterpret_cast<unsigned *>(amax);
	if (rows < 0 || cols < 0 || scaling < GPU_F8_TENSOR || scaling > GPU_F8_COLS)
		return (int)cudaErrorInvalidValue;
	int64_t na = scaling == GPU_F8_TENSOR ? 1 : scaling == GPU_F8_ROWS ? rows : cols;
	if (na > 0 && cudaMemsetAsync(a, 0, (size_t)na * sizeof(unsigned), s) != cudaSuccess)
		return launch_status();
	if (rows == 0 || cols == 0)
		return 0;
	const int threads = 256;
	DISPATCH(tx, T, {
		const T *p = (const T *)x;
		if (scaling == GPU_F8_TENSOR) {
			amax_all_kernel<<<grid_for(rows * cols, threads), threads, 0, s>>>(a, p, rows * cols);
		} else if (scaling == GPU_F8_ROWS) {
			unsigned g = (unsigned)(rows < 65535 ? rows : 65535);
			amax_rows_kernel<<<g, threads, 0, s>>>(a, p, rows, cols);
		} else {
			int64_t bx = (cols + threads - 1) / threads;
			int64_t by = (rows + 255) / 256; // 256 rows a slice
			by = by > 65535 ? 65535 : by;
			int64_t slice = (rows + by - 1) / by;
			amax_cols_kernel<<<dim3((unsigned)bx, (unsigned)by), threads, 0, s>>>(a, p, rows,
											 cols, slice);
		}
	});
	return launch_status();
}

// torchao's amax_to_scale: float32(qmax / max(amax, 1e-12)) in double, then
// rounded down to a power of two when pow2 (torch.exp2(floor(log2(s)))).
__global__ void scale_kernel(float *scale, const float *amax, int64_t n, double qmax, int pow2)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		double a = amax[i];
		a = a < 1e-12 ? 1e-12 : a; // a NaN stays NaN
		float sc = (float)(qmax / a);
		scale[i] = pow2 ? exp2f(floorf(log2f(sc))) : sc;
	}
}

__device__ __forceinline__ uint8_t to_f8(float v, int fmt)
{
	// __NV_SATFINITE clamps to the largest finite value (torchao clamps, then
	// casts rounding to nearest even); a NaN stays NaN
	return fmt == GPU_E5M2 ? (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2)
			       : (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float scale_of(const float *sc, int scaling, int64_t i, int64_t j)
{
	return scaling == GPU_F8_TENSOR ? sc[0] : scaling == GPU_F8_ROWS ? sc[i] : sc[j];
}

template <typename T>
__global__ void quantize_kernel(uint8_t *q, const T *x, const float *sc, int64_t rows,
				int64_t cols, int scaling, int fmt)
{
	int64_t n = rows * cols;
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
	     k += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = k / cols, j = k % cols;
		q[k] = to_f8(to_f(x[k]) * scale_of(sc, scaling, i, j), fmt);
	}
}

// Transposed: q (cols, rows); 32 x 32 tiles through shared memory so that
// both the reads of x and the writes of q run along rows.
template <typename T>
__global__ void quantize_t_kernel(uint8_t *q, const T *x, const float *sc, int64_t rows,
				  int64_t cols, int scaling, int fmt)
{
	__shared__ uint8_t tile[32][33];
	int64_t i0 = (int64_t)blockIdx.y * 32, j0 = (int64_t)blockIdx.x * 32;
	for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
		int64_t i = i0 + dy, j = j0 + threadIdx.x;
		if (i < rows && j < cols)
			tile[dy][threadIdx.x] = to_f8(to_f(x[i * cols + j]) * scale_of(sc, scaling, i, j),
						      fmt);
	}
	__syncthreads();
	for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
		int64_t j = j0 + dy, i = i0 + threadIdx.x;
		if (i < rows && j < cols)
			q[j * rows + i] = tile[threadIdx.x][dy];
	}
}

extern "C" int launch_f8_cast(uint8_t *q, int fmt, float *scale, const void *x, int tx,
			      int64_t rows, int64_t cols, int scaling, int pow2, int transpose,
			      const float *amax, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (rows < 0 || cols < 0 || (fmt != GPU_E4M3 && fmt != GPU_E5M2) ||
	    scaling < GPU_F8_TENSOR || scaling > GPU_F8_COLS)
		return (int)cudaErrorInvalidValue;
	int64_t ns = scaling == GPU_F8_TENSOR ? 1 : scaling == GPU_F8_ROWS ? rows : cols;
	if (!amax) { // the amax goes into scale, then becomes the scale in place
		int rc = launch_f8_amax(scale, x, tx, rows, cols, scaling, stream);
		if (rc)
			return rc;
		amax = scale;
	}
	const int threads = 256;
	if (ns > 0)
		scale_kernel<<<grid_for(ns, threads), threads, 0, s>>>(scale, amax, ns,
									 fmt == GPU_E5M2 ? 57344.0 : 448.0,
									 pow2);
	if (rows == 0 || cols == 0)
		return launch_status();
	DISPATCH(tx, T, {
		const T *p = (const T *)x;
		if (!transpose) {
			quantize_kernel<<<grid_for(rows * cols, threads), threads, 0, s>>>(
				q, p, scale, rows, cols, scaling, fmt);
		} else {
			dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32));
			if (grid.y > 65535)
				return (int)cudaErrorInvalidValue;
			quantize_t_kernel<<<grid, dim3(32, 8), 0, s>>>(q, p, scale, rows, cols, scaling,
									fmt);
		}
	});
	return launch_status();
}

template <typename T>
__global__ void decode_kernel(T *y, const uint8_t *q, int64_t n, int fmt)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		__half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q[i],
							fmt == GPU_E5M2 ? __NV_E5M2 : __NV_E4M3);
		y[i] = from_f<T>(__half2float(__half(h))); // every code is a half exactly
	}
}

extern "C" int launch_f8_decode(void *y, int ty, const uint8_t *q, int fmt, int64_t n,
				void *stream)
{
	if (n < 0 || (fmt != GPU_E4M3 && fmt != GPU_E5M2))
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	const int threads = 256;
	DISPATCH(ty, T,
		 decode_kernel<<<grid_for(n, threads), threads, 0, (cudaStream_t)stream>>>((T *)y, q, n,
											fmt));
	return launch_status();
}

__global__ void recip_kernel(float *y, const float *x, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = 1.0f / x[i];
}

extern "C" int launch_f8_recip(float *y, const float *x, int64_t n, void *stream)
{
	if (n <= 0)
		return n < 0 ? (int)cudaErrorInvalidValue : 0;
	recip_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(y, x, n);
	return launch_status();
}

__global__ void recip_bcast_kernel(float *y, const float *x, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		y[i] = 1.0f / x[0];
}

extern "C" int launch_f8_recip_bcast(float *y, int64_t n, const float *x, void *stream)
{
	if (n <= 0)
		return n < 0 ? (int)cudaErrorInvalidValue : 0;
	recip_bcast_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(y, x, n);
	return launch_status();
}

// C (m, n) = beta C + acc / (sa[i] sb[j]): the unscaled float8 product's
// epilogue where cuBLASLt has no row-wise scales.
template <typename T>
__global__ void rowwise_epilogue_kernel(T *c, const float *acc, const float *sa, int64_t nsa,
					const float *sb, int64_t nsb, float beta, int64_t m,
					int64_t n)
{
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < m * n;
	     k += (int64_t)gridDim.x * blockDim.x) {
		int64_t i = k / n, j = k % n;
		float v = acc[k] / (sa[nsa == 1 ? 0 : i] * sb[nsb == 1 ? 0 : j]);
		c[k] = from_f<T>(beta == 0.0f ? v : beta * to_f(c[k]) + v);
	}
}

extern "C" int launch_f8_epilogue(void *c, int tc, const float *acc, const float *sa,
				  int64_t nsa, const float *sb, int64_t nsb, float beta, int64_t m,
				  int64_t n, void *stream)
{
	if (m < 0 || n < 0)
		return (int)cudaErrorInvalidValue;
	if (m == 0 || n == 0)
		return 0;
	DISPATCH(tc, T,
		 rowwise_epilogue_kernel<<<grid_for(m * n, 256), 256, 0, (cudaStream_t)stream>>>(
			 (T *)c, acc, sa, nsa, sb, nsb, beta, m, n));
	return launch_status();
}
