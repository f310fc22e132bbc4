/* peak.h: the arithmetic peak of one thread for the element types the CPU
 * backend multiplies in, measured by independent multiply-add chains held in
 * registers (no memory traffic): what no kernel of that type can beat here.
 * titan-bench's ceilings (measure.c, on all threads) and make bench's one-core
 * figures (tests/backend/bench_peak.c) both run these chains; the header holds
 * them whole (static functions) so that the bench driver links nothing of
 * titan-bench's.
 *
 * Which chains are the peak is decided from core/cpu_isa's level in force, so
 * TITAN_CPU_ISA moves it with the kernels it forces:
 *   float32  16 lanes, FMA, at avx512 and above (x86-64-v4);
 *            8 lanes, FMA, at avx2 (x86-64-v3);
 *            4 lanes, a multiply then an add, below (x86-64's SSE2 has no FMA);
 *            on aarch64 4 lanes, FMA (NEON; Neoverse V2's SVE is as wide);
 *            raised to OpenBLAS's kernel where that is wider: the float32 GEMMs
 *            (and the portable bf16 path's) are OpenBLAS's sgemm, whose kernel
 *            OpenBLAS picks when it loads (cpuid, or OPENBLAS_CORETYPE) whatever
 *            TITAN_CPU_ISA says.
 *   bf16     at avx512_bf16, 16 lanes of vdpbf16ps (each lane two bf16 products
 *            added: twice the float32 FMA's FLOPs), what oneDNN's bf16 matmul
 *            issues; below it the float32 peak (oneDNN's avx512_core kernels
 *            and the portable path multiply in float32); at amx none (oneDNN
 *            runs AMX tiles, whose peak these chains do not measure).
 * Chains per version: enough to cover the instruction's latency times its two
 * ports (FMA: 4-5 cycles; vdpbf16ps: 6 on Zen 4/5, which needs 14 chains to
 * reach its rate), within the registers: 16 of the 32 zmm, 12 (and the two
 * operands) of the 16 ymm or xmm.  None spills: objdump -d shows the loops as
 * register-only vfmadd231ps, vdpbf16ps or mulps/addps. */
#ifndef TITAN_BENCH_PEAK_H
#define TITAN_BENCH_PEAK_H

#include <cblas.h>
#include <stdint.h>
#include <strings.h>

#include "core/cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

typedef enum peak_kind {
	PEAK_NONE,        /* not measured */
	PEAK_F32_BASE,    /* float32, 4 lanes, multiply then add */
	PEAK_F32_AVX2,    /* float32, 8 lanes, FMA */
	PEAK_F32_AVX512,  /* float32, 16 lanes, FMA */
	PEAK_BF16_DOT,    /* bf16 pairs into 16 float32 lanes, vdpbf16ps */
	PEAK_F32_NEON,    /* float32, 4 lanes, FMA (aarch64) */
	PEAK_KINDS
} peak_kind;

enum { PEAK_CHAINS_NARROW = 12, PEAK_CHAINS_WIDE = 16 };

/* Each chain: acc = acc * m + a, which settles at a / (1 - m) (no overflow,
 * no subnormals); m and a come from the caller so nothing folds. */
__attribute__((unused, noinline)) static float peak_f32_base(int64_t iters, float m, float a,
							       float seed)
{
	typedef float v4f __attribute__((vector_size(16)));
	v4f acc[PEAK_CHAINS_NARROW], vm = {m, m, m, m}, va = {a, a, a, a};
	for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
		acc[j] = (v4f){0} + (seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
			acc[j] = acc[j] * vm + va; /* -std=c17: no contraction */
	}
	for (int j = 1; j < PEAK_CHAINS_NARROW; j++)
		acc[0] += acc[j];
	return acc[0][0] + acc[0][1] + acc[0][2] + acc[0][3];
}

#if defined(__aarch64__)
__attribute__((unused, noinline)) static float peak_f32_neon(int64_t iters, float m, float a,
							       float seed)
{
	float32x4_t acc[PEAK_CHAINS_NARROW], vm = vdupq_n_f32(m), va = vdupq_n_f32(a);
	for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
		acc[j] = vdupq_n_f32(seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
			acc[j] = vfmaq_f32(va, acc[j], vm);
	}
	for (int j = 1; j < PEAK_CHAINS_NARROW; j++)
		acc[0] = vaddq_f32(acc[0], acc[j]);
	return vaddvq_f32(acc[0]);
}
#endif

#if defined(__x86_64__)
__attribute__((unused, noinline, target("arch=x86-64-v3"))) static float
peak_f32_avx2(int64_t iters, float m, float a, float seed)
{
	__m256 acc[PEAK_CHAINS_NARROW], vm = _mm256_set1_ps(m), va = _mm256_set1_ps(a);
	for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
		acc[j] = _mm256_set1_ps(seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < PEAK_CHAINS_NARROW; j++)
			acc[j] = _mm256_fmadd_ps(acc[j], vm, va);
	}
	for (int j = 1; j < PEAK_CHAINS_NARROW; j++)
		acc[0] = _mm256_add_ps(acc[0], acc[j]);
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
	return _mm_cvtss_f32(_mm_add_ps(s, _mm_movehl_ps(s, s)));
}

__attribute__((unused, noinline, target("arch=x86-64-v4"))) static float
peak_f32_avx512(int64_t iters, float m, float a, float seed)
{
	__m512 acc[PEAK_CHAINS_WIDE], vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a);
	for (int j = 0; j < PEAK_CHAINS_WIDE; j++)
		acc[j] = _mm512_set1_ps(seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < PEAK_CHAINS_WIDE; j++)
			acc[j] = _mm512_fmadd_ps(acc[j], vm, va);
	}
	for (int j = 1; j < PEAK_CHAINS_WIDE; j++)
		acc[0] = _mm512_add_ps(acc[0], acc[j]);
	return _mm512_reduce_add_ps(acc[0]);
}

/* acc += x.lo * x.lo + x.hi * x.hi per lane: m as bf16 (truncated: any value
 * does, 2 m^2 a step stays far from overflow for m near 1). */
__attribute__((unused, noinline, target("avx512f,avx512bf16"))) static float
peak_bf16_dot(int64_t iters, float m, float a, float seed)
{
	union {
		float f;
		uint32_t u;
	} b = {m};
	(void)a;
	__m512 acc[PEAK_CHAINS_WIDE];
	__m512bh x = (__m512bh)_mm512_set1_epi16((short)(b.u >> 16));
	for (int j = 0; j < PEAK_CHAINS_WIDE; j++)
		acc[j] = _mm512_set1_ps(seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < PEAK_CHAINS_WIDE; j++)
			acc[j] = _mm512_dpbf16_ps(acc[j], x, x);
	}
	for (int j = 1; j < PEAK_CHAINS_WIDE; j++)
		acc[0] = _mm512_add_ps(acc[0], acc[j]);
	return _mm512_reduce_add_ps(acc[0]);
}
#endif

static inline peak_kind peak_of_level(cpu_level l)
{
#if defined(__x86_64__)
	return l >= CPU_AVX512 ? PEAK_F32_AVX512 : l >= CPU_AVX2 ? PEAK_F32_AVX2 : PEAK_F32_BASE;
#elif defined(__aarch64__)
	(void)l;
	return PEAK_F32_NEON;
#else
	(void)l;
	return PEAK_F32_BASE;
#endif
}

/* The level OpenBLAS's float32 kernel computes at, by its name: the AVX-512
 * kernels, the AVX2 + FMA ones, else none above the baseline. */
static inline cpu_level peak_blas_level(void)
{
#if !defined(__x86_64__)
	return CPU_BASELINE; /* the baseline's chains are the widest there (above) */
#else
	static const struct {
		const char *core;
		cpu_level l;
	} CORES[] = {
		{"SkylakeX", CPU_AVX512}, {"Cooperlake", CPU_AVX512}, {"SapphireRapids", CPU_AVX512},
		{"Haswell", CPU_AVX2},    {"Zen", CPU_AVX2},          {"Excavator", CPU_AVX2},
	};
	const char *name = openblas_get_corename();
	for (size_t i = 0; name != NULL && i < sizeof CORES / sizeof CORES[0]; i++)
		if (strcasecmp(name, CORES[i].core) == 0)
			return CORES[i].l <= cpu_isa_native() ? CORES[i].l : cpu_isa_native();
	return CPU_BASELINE;
#endif
}

/* The float32 peak's chains (above), and whether OpenBLAS raised them. */
static inline peak_kind peak_f32(int *raised)
{
	peak_kind own = peak_of_level(cpu_isa_level()), blas = peak_of_level(peak_blas_level());
	if (raised != NULL)
		*raised = blas > own;
	return blas > own ? blas : own;
}

/* The bf16 peak's chains (above); PEAK_NONE at amx. */
static inline peak_kind peak_bf16(void)
{
#if defined(__x86_64__)
	cpu_level l = cpu_isa_level();
	return l == CPU_AMX ? PEAK_NONE : l == CPU_AVX512_BF16 ? PEAK_BF16_DOT : peak_f32(NULL);
#else
	return peak_f32(NULL); /* the portable path multiplies in float32 */
#endif
}

/* The FLOPs of one peak_run of iters iterations. */
static inline double peak_flops(peak_kind k, int64_t iters)
{
	static const double per[] = {
		[PEAK_F32_BASE] = 4 * 2 * PEAK_CHAINS_NARROW, [PEAK_F32_AVX2] = 8 * 2 * PEAK_CHAINS_NARROW,
		[PEAK_F32_AVX512] = 16 * 2 * PEAK_CHAINS_WIDE, [PEAK_BF16_DOT] = 32 * 2 * PEAK_CHAINS_WIDE,
		[PEAK_F32_NEON] = 4 * 2 * PEAK_CHAINS_NARROW,
	};
	return k > PEAK_NONE && k < PEAK_KINDS ? per[k] * (double)iters : 0;
}

/* Run chains k for iters iterations; the sum of the accumulators (store it
 * where the compiler must keep it). */
static inline float peak_run(peak_kind k, int64_t iters, float seed)
{
	volatile float vm = 0.999f, va = 1e-3f; /* read at run time: no constant propagation */
	float m = vm, a = va;
	switch (k) {
#if defined(__x86_64__)
	case PEAK_F32_AVX2: return peak_f32_avx2(iters, m, a, seed);
	case PEAK_F32_AVX512: return peak_f32_avx512(iters, m, a, seed);
	case PEAK_BF16_DOT: return peak_bf16_dot(iters, m, a, seed);
#elif defined(__aarch64__)
	case PEAK_F32_NEON: return peak_f32_neon(iters, m, a, seed);
#endif
	case PEAK_F32_BASE: return peak_f32_base(iters, m, a, seed);
	default: return 0;
	}
}

/* "avx512", ... for JSON; what the chains are, for people. */
static inline const char *peak_isa(peak_kind k)
{
	static const char *const n[] = {"none", "baseline", "avx2", "avx512", "avx512_bf16", "neon"};
	return n[k];
}

static inline const char *peak_what(peak_kind k)
{
	static const char *const w[] = {
		"not measured",
		"float32 multiply then add, 4 lanes (the x86-64 baseline has no FMA), 12 chains",
		"float32 FMA, 8 lanes (AVX2, x86-64-v3), 12 chains",
		"float32 FMA, 16 lanes (AVX-512, x86-64-v4), 16 chains",
		"bf16 dot products (vdpbf16ps: two products a float32 lane), 16 lanes (AVX512-BF16), "
		"16 chains",
		"float32 FMA, 4 lanes (NEON), 12 chains",
	};
	return w[k];
}

#endif
