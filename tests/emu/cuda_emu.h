// cuda_emu.h: CUDA C++ on the host, for testing kernels/*.cu without a GPU.
// Included before everything else in each kernel source (g++ -include), after
// tests/emu/cu2cpp has rewritten the two things C++ cannot parse: a launch
// `k<<<grid, block, smem, stream>>>(args)` becomes a call of emu::launch, and
// `extern __shared__ T x[];` a pointer to the launch's dynamic shared memory.
// Everything else in the kernels is compiled as written.
//
// The model (tests/emu/emu.cc): the blocks of a grid run one after another;
// the threads of a block are fibers that run until they reach __syncthreads,
// a warp collective (shuffle, vote, __syncwarp) or their end, so a block
// barrier or a warp exchange happens only when every thread concerned has
// arrived, and a missing one shows up as a thread reading what another has not
// yet written.  __shared__ variables are static storage poisoned (all bytes
// 0xff: NaN as float) before each block; device memory is host memory.
//
// Not emulated (no kernel uses them; a kernel that does fails to compile
// unless they sit behind #if defined(__CUDA_ARCH__) beside a portable path):
// inline PTX, tensor-core MMA/WGMMA, TMA, cp.async, cooperative groups.
// __launch_bounds__ is accepted and not checked; the device math functions are
// the host's (expf and __expf are both the correctly rounded expf).
#ifndef TITAN_CUDA_EMU_H
#define TITAN_CUDA_EMU_H

// Before CUDA's headers: they keep what is already defined.
#define __host__
#define __device__
#define __global__
#define __shared__ static __attribute__((section("emu_shared"), aligned(16)))

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu_abi.h"

#undef __launch_bounds__
#define __launch_bounds__(...)

// --- the emulator's interface (emu.cc, compiled without sanitizer
// instrumentation of its own bookkeeping) ---
extern "C" {
uint3 emu_thread_idx(void);
uint3 emu_block_idx(void);
dim3 emu_block_dim(void);
dim3 emu_grid_dim(void);
void *emu_dynamic_shared(void);
void emu_syncthreads(void);
// A warp collective: op (emu.cc's EMU_*), the calling lane's value and
// argument; returns what the lane receives.
uint64_t emu_warp_op(int op, unsigned mask, uint64_t value, int arg, int width);
}

#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())
#define blockDim (emu_block_dim())
#define gridDim (emu_grid_dim())
#define warpSize 32

inline void __syncthreads(void) { emu_syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_warp_op(EMU_SYNCWARP, mask, 0, 0, 32); }

template <typename T> inline T emu_shfl(int op, unsigned mask, T v, int arg, int width)
{
	static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
		      "a shuffled value is at most 8 bytes");
	uint64_t u = 0;
	std::memcpy(&u, &v, sizeof v);
	u = emu_warp_op(op, mask, u, arg, width);
	T r;
	std::memcpy(&r, &u, sizeof r);
	return r;
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	return emu_shfl(EMU_SHFL, mask, v, src, width);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_shfl(EMU_SHFL_UP, mask, v, (int)d, width);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_shfl(EMU_SHFL_DOWN, mask, v, (int)d, width);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
	return emu_shfl(EMU_SHFL_XOR, mask, v, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
	return (unsigned)emu_warp_op(EMU_BALLOT, mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) { return (int)emu_warp_op(EMU_ANY, mask, pred != 0, 0, 32); }
inline int __all_sync(unsigned mask, int pred) { return (int)emu_warp_op(EMU_ALL, mask, pred != 0, 0, 32); }

// --- atomics: the fibers of one OS thread never interleave inside one, but
// TSan must see them as atomic accesses ---
template <typename T> inline T atomicAdd(T *p, T v)
{
	if constexpr (std::is_integral<T>::value) {
		return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
	} else { // float, double: a compare-and-swap of the bits
		typedef std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> U;
		U *q = reinterpret_cast<U *>(p), old = __atomic_load_n(q, __ATOMIC_RELAXED), sum;
		T was;
		do {
			std::memcpy(&was, &old, sizeof was);
			T s = was + v;
			std::memcpy(&sum, &s, sizeof sum);
		} while (!__atomic_compare_exchange_n(q, &old, sum, false, __ATOMIC_RELAXED,
						      __ATOMIC_RELAXED));
		return was;
	}
}
template <typename T> inline T atomicMax(T *p, T v)
{
	static_assert(std::is_integral<T>::value, "atomicMax takes integers");
	T old = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
	return old;
}
template <typename T> inline T atomicMin(T *p, T v)
{
	static_assert(std::is_integral<T>::value, "atomicMin takes integers");
	T old = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
	return old;
}
template <typename T> inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
template <typename T> inline T atomicCAS(T *p, T cmp, T v)
{
	__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return cmp;
}

template <typename T> inline T __ldg(const T *p) { return *p; }

// cuda_runtime.h declares its kernel-pointer overloads for nvcc only.
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int value)
{
	return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel), attr, value);
}

// --- the device intrinsics the host headers leave out ---
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline unsigned __float_as_uint(float x)
{
	unsigned u;
	std::memcpy(&u, &x, 4);
	return u;
}
inline float __uint_as_float(unsigned u)
{
	float x;
	std::memcpy(&x, &u, 4);
	return x;
}
// CUDA's min and max overloads: integers in their common type (int and
// unsigned meet as unsigned, as there), floats as fminf/fmaxf.
template <typename A, typename B> inline std::common_type_t<A, B> max(A a, B b)
{
	typedef std::common_type_t<A, B> C;
	if constexpr (std::is_floating_point<C>::value)
		return std::fmax((C)a, (C)b);
	else
		return (C)a > (C)b ? (C)a : (C)b;
}
template <typename A, typename B> inline std::common_type_t<A, B> min(A a, B b)
{
	typedef std::common_type_t<A, B> C;
	if constexpr (std::is_floating_point<C>::value)
		return std::fmin((C)a, (C)b);
	else
		return (C)a < (C)b ? (C)a : (C)b;
}
inline int __float_as_int(float x) { return (int)__float_as_uint(x); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }

// --- launches ---
namespace emu {

// Runs body(ctx) as every thread of every block of c's grid; a configuration
// the device would refuse sets the launch error instead (cudaGetLastError).
extern "C" void emu_run(const config *c, void (*body)(void *), void *ctx);

template <typename F> struct launcher {
	config c;
	F f;
	// The arguments are copied once, as into the device's parameter buffer;
	// each thread's call copies them again into its parameters.
	template <typename... A> void operator()(A &&...a)
	{
		std::tuple<std::decay_t<A>...> args(std::forward<A>(a)...);
		auto call = [&]() { std::apply(f, args); };
		emu_run(&c, [](void *ctx) { (*static_cast<decltype(call) *>(ctx))(); }, &call);
	}
};

template <typename F>
launcher<F> launch(const char *kernel, const char *file, int line, F f, dim3 grid, dim3 block,
		   size_t smem = 0, cudaStream_t stream = 0)
{
	return launcher<F>{{kernel, file, line, grid, block, smem, stream}, f};
}

} // namespace emu

// Inline PTX (and with it WGMMA, TMA, cp.async) has no host meaning: a kernel
// keeps it behind #if defined(__CUDA_ARCH__) beside a portable path, which is
// what the emulator compiles; an unfenced asm statement stops the build here.
#define asm inline_PTX_is_not_emulated__fence_it_with_CUDA_ARCH

#endif
