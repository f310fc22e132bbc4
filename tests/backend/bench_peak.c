/* bench_peak: the arithmetic ceiling of one core of this CPU for the two
 * element types the CPU backend multiplies in: float32 fused multiply-adds
 * (vfmadd231ps, what OpenBLAS's sgemm and oneDNN's float32 kernels issue) and
 * bf16 dot products (vdpbf16ps, AVX512-BF16: a pair of bf16 products added
 * into each float32 lane, what oneDNN's bf16 matmul issues without AMX), each
 * as twelve independent 512-bit accumulator chains (enough to hide either
 * instruction's latency).  The ratio is the most a bf16 GEMM can gain over a
 * float32 one here, and so bounds what a training step in bf16 can gain over
 * float32.  One line for scripts/bench/precision.sh:
 *   f32_gflops= bf16_gflops= ratio=
 * Best of many short bursts: a shared machine's preemptions only lengthen a
 * burst, so the fastest is the core's own rate. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

enum { CHAINS = 12, ITERS = 50000, BURSTS = 2000 };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

__attribute__((target("avx512f"), noinline)) static float fma_chains(long iters)
{
	__m512 acc[CHAINS], x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.9999f);
	for (int i = 0; i < CHAINS; i++)
		acc[i] = _mm512_set1_ps((float)i);
	for (long k = 0; k < iters; k++)
#pragma GCC unroll 12
		for (int i = 0; i < CHAINS; i++)
			acc[i] = _mm512_fmadd_ps(acc[i], x, y);
	for (int i = 1; i < CHAINS; i++)
		acc[0] = _mm512_add_ps(acc[0], acc[i]);
	return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx512f,avx512bf16"), noinline)) static float dot_chains(long iters)
{
	__m512 acc[CHAINS];
	__m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* bf16 1.0 */
	for (int i = 0; i < CHAINS; i++)
		acc[i] = _mm512_set1_ps((float)i);
	for (long k = 0; k < iters; k++)
#pragma GCC unroll 12
		for (int i = 0; i < CHAINS; i++)
			acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
	for (int i = 1; i < CHAINS; i++)
		acc[0] = _mm512_add_ps(acc[0], acc[i]);
	return _mm512_reduce_add_ps(acc[0]);
}

int main(void)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f")) {
		printf("f32_gflops=- bf16_gflops=- ratio=- (no AVX-512)\n");
		return 0;
	}
	int bf16 = __builtin_cpu_supports("avx512bf16");
	double best_f = 1e30, best_b = 1e30;
	volatile float sink = 0;
	for (int r = 0; r < BURSTS; r++) {
		double t0 = now();
		sink += fma_chains(ITERS);
		double t1 = now();
		if (t1 - t0 < best_f)
			best_f = t1 - t0;
		if (!bf16)
			continue;
		sink += dot_chains(ITERS);
		double t2 = now();
		if (t2 - t1 < best_b)
			best_b = t2 - t1;
	}
	double instr = (double)ITERS * CHAINS;
	double f = instr * 16 * 2 / best_f * 1e-9; /* 16 lanes, multiply + add */
	if (!bf16) {
		printf("f32_gflops=%.1f bf16_gflops=- ratio=- (no AVX512-BF16)\n", f);
		return 0;
	}
	double b = instr * 32 * 2 / best_b * 1e-9; /* 32 bf16 products, each added */
	printf("f32_gflops=%.1f bf16_gflops=%.1f ratio=%.2f\n", f, b, b / f);
	return 0;
}
