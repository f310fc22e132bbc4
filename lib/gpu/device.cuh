// device.cuh: what every kernel in kernels/ shares (CUDA C++, included by .cu
// files only): element types and their conversions, 16-byte vector loads and
// stores, warp and block reductions in a fixed order, and the dispatch from a
// gpu_dtype (launch.h) to a template argument.
#ifndef TITAN_GPU_DEVICE_CUH
#define TITAN_GPU_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/launch.h"

typedef __nv_bfloat16 bf16;

// Scalars: every kernel computes in float and converts at the edges (bf16 is
// rounded to nearest even, as torch's .to(torch.bfloat16)).
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }
// The value x takes when stored as T: where torch's bf16 model stores an
// intermediate tensor that an op of titan's keeps in float.
template <typename T> __device__ __forceinline__ float round_as(float x) { return to_f(from_f<T>(x)); }

// V consecutive elements as floats.  V == 8 moves 16 bytes per access for bf16
// (two for float) and needs 16-byte aligned pointers; any other V goes element
// by element (the fallback for odd sizes).  Launchers choose V with vec_ok().
template <int V, typename T> struct vec_io {
	__device__ __forceinline__ static void load(const T *p, float *v)
	{
#pragma unroll
		for (int i = 0; i < V; i++)
			v[i] = to_f(p[i]);
	}
	__device__ __forceinline__ static void store(T *p, const float *v)
	{
#pragma unroll
		for (int i = 0; i < V; i++)
			p[i] = from_f<T>(v[i]);
	}
};

template <> struct vec_io<8, float> {
	__device__ __forceinline__ static void load(const float *p, float *v)
	{
		float4 a = reinterpret_cast<const float4 *>(p)[0];
		float4 b = reinterpret_cast<const float4 *>(p)[1];
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
		v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
	}
	__device__ __forceinline__ static void store(float *p, const float *v)
	{
		reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
		reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
	}
};

template <> struct vec_io<8, bf16> {
	__device__ __forceinline__ static void load(const bf16 *p, float *v)
	{
		uint4 u = *reinterpret_cast<const uint4 *>(p);
		const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float2 f = __bfloat1622float2(h[i]);
			v[2 * i] = f.x;
			v[2 * i + 1] = f.y;
		}
	}
	__device__ __forceinline__ static void store(bf16 *p, const float *v)
	{
		uint4 u;
		__nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
		for (int i = 0; i < 4; i++)
			h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
		*reinterpret_cast<uint4 *>(p) = u;
	}
};

template <int V, typename T> __device__ __forceinline__ void load_vec(const T *p, float *v)
{
	vec_io<V, T>::load(p, v);
}
template <int V, typename T> __device__ __forceinline__ void store_vec(T *p, const float *v)
{
	vec_io<V, T>::store(p, v);
}

// Whether every pointer is 16-byte aligned (NULL counts as aligned): flat
// loops then use 8-wide vectors and finish the tail one element at a time.
static inline bool aligned16(const void *a, const void *b = nullptr, const void *c = nullptr,
			     const void *d = nullptr, const void *e = nullptr)
{
	return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e) & 15) == 0;
}

// Whether rows of `len` elements at these pointers can use 8-wide vectors
// throughout: len a multiple of 8 and every pointer aligned.
static inline bool vec_ok(int64_t len, const void *a, const void *b = nullptr,
			  const void *c = nullptr, const void *d = nullptr,
			  const void *e = nullptr)
{
	return len % 8 == 0 && aligned16(a, b, c, d, e);
}

// Grid for a grid-stride loop over `work` items: enough blocks to fill the
// device several times over, never more than the work needs.
static inline unsigned grid_for(int64_t work, int threads)
{
	int64_t want = (work + threads - 1) / threads;
	const int64_t cap = 132 * 32; // H100/H200: 132 SMs, 32 resident blocks each at most
	return (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
}

// Reductions.  The butterfly and the block's fixed layout make every sum the
// same on every run: results never depend on timing (no atomics).
struct op_sum {
	template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct op_max {
	__device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op> __device__ __forceinline__ T warp_reduce(T x, Op op)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

// Over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result.  `shared` holds 32 values; the call ends with a barrier so the
// buffer can be reused at once.  `identity` fills the missing warps' places.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T x, T *shared, Op op, T identity)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarp = blockDim.x / 32;
	x = warp_reduce(x, op);
	if (lane == 0)
		shared[warp] = x;
	__syncthreads();
	x = lane < nwarp ? shared[lane] : identity;
	x = warp_reduce(x, op);
	__syncthreads();
	return x;
}

__device__ __forceinline__ float warp_sum(float x) { return warp_reduce(x, op_sum()); }
__device__ __forceinline__ float warp_max(float x) { return warp_reduce(x, op_max()); }
__device__ __forceinline__ float block_sum(float x, float *shared)
{
	return block_reduce(x, shared, op_sum(), 0.0f);
}
__device__ __forceinline__ double block_sum_d(double x, double *shared)
{
	return block_reduce(x, shared, op_sum(), 0.0);
}
__device__ __forceinline__ float block_max(float x, float *shared)
{
	return block_reduce(x, shared, op_max(), -INFINITY);
}

// y[i] = op(a[i], b[i]) for i < n over any element types, in a grid-stride loop
// of V elements per thread (b may be NULL: op then sees 0).  The elementwise
// ops are this loop with different op functors.
template <int V, typename Ty, typename Ta, typename Tb, typename Op>
__global__ void map2_kernel(Ty *y, const Ta *a, const Tb *b, int64_t n, Op op)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x * V;
	for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
		int m = n - i < V ? (int)(n - i) : V;
		float va[V], vb[V];
		if (m == V) {
			load_vec<V>(a + i, va);
			if (b)
				load_vec<V>(b + i, vb);
		} else {
			for (int k = 0; k < V; k++) {
				va[k] = k < m ? to_f(a[i + k]) : 0.0f;
				vb[k] = k < m && b ? to_f(b[i + k]) : 0.0f;
			}
		}
#pragma unroll
		for (int k = 0; k < V; k++)
			va[k] = op(va[k], b ? vb[k] : 0.0f);
		if (m == V)
			store_vec<V>(y + i, va);
		else
			for (int k = 0; k < m; k++)
				y[i + k] = from_f<Ty>(va[k]);
	}
}

// Launch map2_kernel with 16-byte vectors when every pointer allows.
template <typename Ty, typename Ta, typename Tb, typename Op>
static int map2(Ty *y, const Ta *a, const Tb *b, int64_t n, Op op, cudaStream_t s)
{
	if (n <= 0)
		return 0;
	const int threads = 256;
	if (aligned16(y, a, b))
		map2_kernel<8><<<grid_for(n / 8 + 1, threads), threads, 0, s>>>(y, a, b, n, op);
	else
		map2_kernel<1><<<grid_for(n, threads), threads, 0, s>>>(y, a, b, n, op);
	return (int)cudaGetLastError();
}

// dtype -> type: `DISPATCH(dt, T, body)` runs body with T = float or bf16;
// any other dtype returns cudaErrorInvalidValue from the launcher.
#define DISPATCH(dt, T, ...)                                                           \
	do {                                                                           \
		switch (dt) {                                                          \
		case GPU_F32: {                                                        \
			typedef float T;                                               \
			__VA_ARGS__;                                                   \
		} break;                                                               \
		case GPU_BF16: {                                                       \
			typedef bf16 T;                                                \
			__VA_ARGS__;                                                   \
		} break;                                                               \
		default:                                                               \
			return (int)cudaErrorInvalidValue;                             \
		}                                                                      \
	} while (0)

#define DISPATCH2(d1, T1, d2, T2, ...) DISPATCH(d1, T1, DISPATCH(d2, T2, __VA_ARGS__))

// The launcher's return: the launch error, if any.
static inline int launch_status(void)
{
	return (int)cudaGetLastError();
}

#endif
