/* cpu_isa.h: what the processor can do, decided once per process, and the one
 * switch that forces a lower level so that one machine's tests cover every path.
 *
 * A level is a rung of a ladder; each includes the ones below it.  The ladder
 * is the architecture's own.  On x86-64:
 *   baseline      x86-64 (SSE2): portable C only
 *   v2            x86-64-v2: SSE4.2 (the CRC32C instruction), POPCNT
 *   avx2          x86-64-v3: AVX2, FMA, BMI2
 *   avx512        x86-64-v4: AVX-512 F/BW/VL/DQ/CD
 *   avx512_bf16   v4 and the bf16 dot-product instructions
 *   amx           avx512_bf16 and AMX tiles with bf16 (the OS granting them)
 * On aarch64 (ARM64: Grace, Graviton, Ampere):
 *   baseline      ARMv8-A with Advanced SIMD (NEON, which every AArch64 Linux
 *                 processor has): portable C vectorised for NEON
 *   crc           and the ARMv8 CRC32 instructions (CRC32C)
 *   sve           and SVE (the kernels built for SVE as well)
 * Any other architecture has the baseline alone.
 * What follows from it, in one place:
 *   - the build of each hot kernel (CPU_HOT in backend/cpu_kernels.h): on
 *     x86-64 the x86-64-v4 build at avx512 and above, the x86-64-v3 build at
 *     avx2, the baseline build below; on aarch64 the SVE build at sve, the NEON
 *     build below.  Every build gives the same bits (no contraction,
 *     reductions in fixed lanes), only their speed differs;
 *   - the bfloat16 GEMMs: oneDNN at avx512 and above (its bf16 matmul exists
 *     only from avx512_core on, and uses the dot products or the tiles the
 *     level allows), the portable path elsewhere (bf16 widened to float32,
 *     OpenBLAS sgemm, rounded once where stored), aarch64 included;
 *   - the float32 GEMMs: oneDNN's sgemm at avx512 and above, OpenBLAS's
 *     below (OpenBLAS picks its kernels by processor model and may give a
 *     processor it does not know its AVX2 ones; oneDNN picks by the
 *     instructions present);
 *   - CRC32C: the SSE4.2 instruction from v2 on, the ARMv8 one from crc on.
 *
 * TITAN_CPU_ISA=native or a level's name chooses a level at or below the
 * processor's (native, the default, is the processor's own).  A name that is
 * unknown or above the processor is refused by cpu_isa_check, which every
 * program calls at start-up; until then the level is the processor's own.
 * Thread-safe; detection runs once. */
#ifndef TITAN_CPU_ISA_H
#define TITAN_CPU_ISA_H

#include <stdatomic.h>
#include <stddef.h>

#include "core/err.h"

#if defined(__aarch64__)
typedef enum cpu_level {
	CPU_BASELINE = 1,
	CPU_CRC,
	CPU_SVE,
	CPU_TOP = CPU_SVE,
} cpu_level;
#else
typedef enum cpu_level {
	CPU_BASELINE = 1,
	CPU_V2,
	CPU_AVX2,
	CPU_AVX512,
	CPU_AVX512_BF16,
	CPU_AMX,
	CPU_TOP = CPU_AMX,
} cpu_level;
#endif

/* The level in force: the processor's, or the lower one TITAN_CPU_ISA asks for
 * (a refused TITAN_CPU_ISA leaves the processor's). */
cpu_level cpu_isa_level(void);
/* The processor's own level, whatever TITAN_CPU_ISA says. */
cpu_level cpu_isa_native(void);
/* 0, or -1 with e naming TITAN_CPU_ISA's value and what was expected. */
int cpu_isa_check(titan_err *e);
/* Tests: put level l in force (clamped to the processor's) for the calls that
 * follow; returns the level that was in force. */
cpu_level cpu_isa_force(cpu_level l);
/* "avx512_bf16", "sve", ...; NULL for a value that is no level here. */
const char *cpu_level_name(cpu_level l);
/* The level named s (as TITAN_CPU_ISA spells it), or 0. */
cpu_level cpu_level_parse(const char *s);
/* One line for logs and benchmark headers: the processor's level and flags,
 * the level in force and why, the kernel clone and the GEMM paths, e.g.
 * "avx2 (TITAN_CPU_ISA; the processor: avx512_bf16), kernels x86-64-v3, bf16
 * GEMMs portable (float32 sgemm), float32 GEMMs OpenBLAS".  backend_cpu_describe adds the libraries'
 * own choices. */
void cpu_isa_describe(char *buf, size_t n);

/* Which build of a hot kernel runs (CPU_HOT): 4, 3 or 1, for x86-64-v4, v3 and
 * the baseline; 2 or 1 on aarch64, for SVE and NEON.  Read on every call of a hot kernel, so a plain atomic load
 * once detection has run. */
extern _Atomic int cpu_isa_clone_;
int cpu_isa_clone_init(void);
static inline int cpu_isa_clone(void)
{
	int c = atomic_load_explicit(&cpu_isa_clone_, memory_order_relaxed);
	return c ? c : cpu_isa_clone_init();
}

/* Whether the GEMMs (bfloat16 and float32) go to oneDNN at the level in force. */
int cpu_isa_onednn_gemm(void);

#endif
