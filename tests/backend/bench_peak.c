/* bench_peak: the arithmetic ceiling of one core of this CPU for the two
 * element types the CPU backend multiplies in, at the level in force
 * (core/cpu_isa; TITAN_CPU_ISA forces a lower one): float32 multiply-adds (the
 * FMAs of OpenBLAS's sgemm and oneDNN's float32 kernels: 16 lanes at avx512,
 * 8 at avx2, 4 without FMA below) and, at avx512_bf16 and above, bf16 dot
 * products (vdpbf16ps: a pair of bf16 products added into each float32 lane,
 * what oneDNN's bf16 matmul issues without AMX).  The chains are titan-bench's
 * (tools/bench/peak.h).  The ratio is the most a bf16 GEMM can gain over a
 * float32 one here, and so bounds what a training step in bf16 can gain over
 * float32; below avx512_bf16 the bf16 GEMMs multiply in float32 and there is
 * no dot-product peak to measure.  One line for scripts/bench/precision.sh:
 *   f32_gflops= bf16_gflops= ratio= (level: what was measured)
 * Best of many short bursts: a shared machine's preemptions only lengthen a
 * burst, so the fastest is the core's own rate. */
#include <stdio.h>
#include <time.h>

#include "../../tools/bench/peak.h"
#include "core/cpu_isa.h"
#include "core/err.h"

enum { ITERS = 50000, BURSTS = 2000 };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void)
{
	titan_err e = {0};
	if (cpu_isa_check(&e)) {
		fprintf(stderr, "bench_peak: %s\n", e.msg);
		return TITAN_EXIT_USAGE;
	}
	cpu_level level = cpu_isa_level();
	int raised;
	peak_kind f = peak_f32(&raised);
#if defined(__x86_64__)
	peak_kind b = level >= CPU_AVX512_BF16 ? PEAK_BF16_DOT : PEAK_NONE;
	int amx = level == CPU_AMX;
#else
	peak_kind b = PEAK_NONE; /* aarch64's bf16 GEMMs are the portable path's */
	int amx = 0;
#endif
	double best_f = 1e30, best_b = 1e30;
	volatile float sink = 0;
	for (int r = 0; r < BURSTS; r++) {
		double t0 = now();
		sink += peak_run(f, ITERS, (float)r);
		double t1 = now();
		if (t1 - t0 < best_f)
			best_f = t1 - t0;
		if (b == PEAK_NONE)
			continue;
		sink += peak_run(b, ITERS, (float)r);
		double t2 = now();
		if (t2 - t1 < best_b)
			best_b = t2 - t1;
	}
	double gf = peak_flops(f, ITERS) / best_f * 1e-9;
	printf("f32_gflops=%.1f ", gf);
	if (b == PEAK_NONE) {
		printf("bf16_gflops=- ratio=- (%s: %s%s; no bf16 dot products at this level, "
		       "the bf16 GEMMs multiply in float32)\n", cpu_level_name(level), peak_what(f),
		       raised ? ", OpenBLAS's kernel's width" : "");
		return 0;
	}
	double gb = peak_flops(b, ITERS) / best_b * 1e-9;
	printf("bf16_gflops=%.1f ratio=%.2f (%s: %s; %s%s)\n", gb, gb / gf, cpu_level_name(level),
	       peak_what(f), peak_what(b),
	       amx ? "; AMX tiles not measured: oneDNN's bf16 GEMMs can beat it" : "");
	return 0;
}
