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

#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu_kernels.h"
#include "core/cpu_isa.h"

/* The float32 GEMM of one call (cpu_matmul splits a large product over the
 * team; a call inside a parallel region runs on its thread alone, oneDNN
 * seeing omp_in_parallel and OpenBLAS set to one thread): oneDNN's sgemm where
 * the level in force sends GEMMs to oneDNN (avx512 and above), OpenBLAS's
 * below.  OpenBLAS picks its kernels by processor model, and 0.3.21 gives one
 * it does not know (Zen 5) its AVX2 kernels; oneDNN picks by the instructions
 * present.  On a Zen 5 its sgemm made the debugmodel step 1.7x faster (0.190
 * -> 0.112 s at 2 threads); at avx2 the two are as fast.  oneDNN refuses only
 * arguments OpenBLAS would refuse too; OpenBLAS then has the call. */
static void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m,
		  blasint n, blasint k, float alpha, const float *a, blasint lda,
		  const float *b, blasint ldb, float beta, float *c, blasint ldc)
{
	/* both row-major, as every caller here is */
	if (order == CblasRowMajor && cpu_isa_onednn_gemm() &&
	    dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k,
		       alpha, a, lda, b, ldb, beta, c, ldc) == dnnl_success)
		return;
	cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

#define REAL float
#define SFX f32
#define GEMM sgemm
#define EXP cpu_exp_f32
#define LOG logf
#define SQRT sqrtf
#define FMA fmaf
#include "backend/cpu_kernels.inc"
#include "backend/cpu_flux.inc"
#include "backend/cpu_flux_train.inc"
#include "backend/cpu_image.inc"
