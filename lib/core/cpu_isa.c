/* The processor's level from cpuid, and TITAN_CPU_ISA's forced one (cpu_isa.h). */
#include "core/cpu_isa.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

#if defined(__aarch64__)
static const char *const level_names[] = {
	[CPU_BASELINE] = "baseline",
	[CPU_CRC] = "crc",
	[CPU_SVE] = "sve",
};
/* What each build of the hot kernels is called in cpu_isa_describe. */
static const char *const clone_names[] = {[1] = "NEON", [2] = "SVE"};
#else
static const char *const level_names[] = {
	[CPU_BASELINE] = "baseline", [CPU_V2] = "v2",
	[CPU_AVX2] = "avx2",	     [CPU_AVX512] = "avx512",
	[CPU_AVX512_BF16] = "avx512_bf16", [CPU_AMX] = "amx",
};
static const char *const clone_names[] = {[1] = "baseline", [3] = "x86-64-v3",
					  [4] = "x86-64-v4"};
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cpu_level native = CPU_BASELINE;
static _Atomic int forced; /* 0: none; cpu_isa_force's or TITAN_CPU_ISA's level */
static int env_bad;	   /* TITAN_CPU_ISA named no level, or one above native */
static char env_value[32];
_Atomic int cpu_isa_clone_;

#if defined(__x86_64__)
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

static int has(uint32_t reg, int bit)
{
	return (reg >> bit & 1) != 0;
}

/* The x86-64 micro-architecture levels as the psABI defines them, each also
 * asking the OS for the register state it needs (XCR0). */
static cpu_level detect(void)
{
	unsigned a, b, c1, d, b7 = 0, d7 = 0, a71 = 0, ce = 0, x, sub7 = 0;
	if (!__get_cpuid(1, &a, &b, &c1, &d))
		return CPU_BASELINE;
	if (__get_cpuid_max(0, NULL) >= 7) {
		__cpuid_count(7, 0, sub7, b7, x, d7);
		if (sub7 >= 1) /* leaf 7's last subleaf: 1 holds AVX512_BF16 */
			__cpuid_count(7, 1, a71, b, x, d);
	}
	if (!__get_cpuid(0x80000001, &a, &b, &ce, &d))
		ce = 0;
	/* SSE3 SSSE3 CX16 SSE4.1 SSE4.2 POPCNT, LAHF */
	int v2 = has(c1, 0) && has(c1, 9) && has(c1, 13) && has(c1, 19) && has(c1, 20) &&
		 has(c1, 23) && has(ce, 0);
	if (!v2)
		return CPU_BASELINE;
	uint64_t xcr0 = has(c1, 27) ? xgetbv0() : 0; /* OSXSAVE */
	int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
	int os_amx = (xcr0 & 0x60000) == 0x60000;
	/* FMA MOVBE AVX F16C, BMI1 AVX2 BMI2, LZCNT */
	int v3 = os_avx && has(c1, 12) && has(c1, 22) && has(c1, 28) && has(c1, 29) &&
		 has(b7, 3) && has(b7, 5) && has(b7, 8) && has(ce, 5);
	if (!v3)
		return CPU_V2;
	/* AVX512 F DQ CD BW VL */
	int v4 = os_avx512 && has(b7, 16) && has(b7, 17) && has(b7, 28) && has(b7, 30) &&
		 has(b7, 31);
	if (!v4)
		return CPU_AVX2;
	if (!has(a71, 5)) /* AVX512_BF16 */
		return CPU_AVX512;
	/* AMX-BF16, AMX-TILE */
	return os_amx && has(d7, 22) && has(d7, 24) ? CPU_AMX : CPU_AVX512_BF16;
}

static int clone_of(cpu_level l)
{
	return l >= CPU_AVX512 ? 4 : l >= CPU_AVX2 ? 3 : 1;
}
#elif defined(__aarch64__)
/* The kernel's hardware capabilities (the ID registers are the kernel's to
 * read; it also says whether it saves the SVE state).  Bit values from the
 * arm64 uapi, named here so that an older libc's headers need not have them. */
#define ARM_HWCAP_CRC32 (1UL << 7)
#define ARM_HWCAP_SVE (1UL << 22)
static cpu_level detect(void)
{
	unsigned long hw = getauxval(AT_HWCAP);
	if (!(hw & ARM_HWCAP_CRC32))
		return CPU_BASELINE;
	return hw & ARM_HWCAP_SVE ? CPU_SVE : CPU_CRC;
}

static int clone_of(cpu_level l)
{
	return l >= CPU_SVE ? 2 : 1;
}
#else
static cpu_level detect(void)
{
	return CPU_BASELINE;
}

static int clone_of(cpu_level l)
{
	(void)l;
	return 1;
}
#endif

static void init(void)
{
	native = detect();
	const char *s = getenv("TITAN_CPU_ISA");
	if (s && *s && strcmp(s, "native") != 0) {
		snprintf(env_value, sizeof env_value, "%s", s);
		cpu_level l = cpu_level_parse(s);
		if (l && l <= native)
			atomic_store(&forced, (int)l);
		else
			env_bad = 1;
	}
	int f = atomic_load(&forced);
	atomic_store(&cpu_isa_clone_, clone_of(f ? (cpu_level)f : native));
}

cpu_level cpu_isa_native(void)
{
	pthread_once(&once, init);
	return native;
}

cpu_level cpu_isa_level(void)
{
	pthread_once(&once, init);
	int f = atomic_load(&forced);
	return f ? (cpu_level)f : native;
}

int cpu_isa_clone_init(void)
{
	pthread_once(&once, init);
	return atomic_load(&cpu_isa_clone_);
}

cpu_level cpu_isa_force(cpu_level l)
{
	cpu_level was = cpu_isa_level();
	if (l < CPU_BASELINE)
		l = CPU_BASELINE;
	if (l > native)
		l = native;
	atomic_store(&forced, (int)l);
	atomic_store(&cpu_isa_clone_, clone_of(l));
	return was;
}

int cpu_isa_check(titan_err *e)
{
	pthread_once(&once, init);
	if (!env_bad)
		return 0;
	cpu_level l = cpu_level_parse(env_value);
	if (!l) {
		char names[96] = "native";
		for (int k = CPU_TOP; k >= CPU_BASELINE; k--)
			snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
				 k == CPU_BASELINE ? " or " : ", ", level_names[k]);
		return err_set(e, "TITAN_CPU_ISA=%s: expected %s", env_value, names);
	}
	return err_set(e, "TITAN_CPU_ISA=%s: this processor's level is %s, below it", env_value,
		       cpu_level_name(native));
}

const char *cpu_level_name(cpu_level l)
{
	return l >= CPU_BASELINE && l <= CPU_TOP ? level_names[l] : NULL;
}

cpu_level cpu_level_parse(const char *s)
{
	for (int l = CPU_BASELINE; l <= CPU_TOP; l++)
		if (strcmp(s, level_names[l]) == 0)
			return (cpu_level)l;
	return 0;
}

int cpu_isa_onednn_gemm(void)
{
#if defined(__x86_64__)
	return cpu_isa_level() >= CPU_AVX512;
#else
	return 0; /* oneDNN's bf16 matmul on aarch64 wants ARM's Compute Library */
#endif
}

void cpu_isa_describe(char *buf, size_t n)
{
	cpu_level l = cpu_isa_level(), nat = cpu_isa_native();
	char why[96] = "";
	if (l != nat)
		snprintf(why, sizeof why, " (TITAN_CPU_ISA; the processor: %s)", cpu_level_name(nat));
	else if (env_bad)
		snprintf(why, sizeof why, " (TITAN_CPU_ISA=%s refused)", env_value);
	const char *clone = clone_names[cpu_isa_clone()];
	int dnnl = cpu_isa_onednn_gemm();
	snprintf(buf, n, "%s%s, kernels %s, bf16 GEMMs %s, float32 GEMMs %s", cpu_level_name(l),
		 why, clone, dnnl ? "oneDNN" : "portable (float32 sgemm)",
		 dnnl ? "oneDNN" : "OpenBLAS");
}
