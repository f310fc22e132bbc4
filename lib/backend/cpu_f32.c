/* The CPU kernels in float32: the backend's ops. */

/* Floating-point exceptions are never inspected: without this GCC keeps the
 * compares of cpu_exp_f32 as branches and leaves its loops scalar. */
#if defined(__GNUC__) && !defined(__clang__)
/* fp-contract=off restated: the optimize pragma resets it to GCC's own
 * default (fast), and the x86-64-v3/v4 builds of the hot kernels would then
 * fuse multiply-adds the baseline build cannot, giving other bits. */
#pragma GCC optimize("no-trapping-math")
#endif
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"

#define REAL float
#define SFX f32
#define GEMM cblas_sgemm
#define EXP cpu_exp_f32
#define LOG logf
#define SQRT sqrtf
#define FMA fmaf
#include "backend/cpu_kernels.inc"
