/* The CPU kernels in float32: the backend's ops. */

/* Floating-point exceptions are never inspected: without this GCC keeps the
 * compares of exp_vec as branches and leaves its loops scalar. */
#if defined(__GNUC__) && !defined(__clang__)
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
/* expf that the compiler can vectorise (glibc's is a call per element): Cody-Waite
 * range reduction x = k ln2 + r, a degree-6 polynomial for e^r (Cephes'
 * coefficients) and 2^k put into the exponent bits.  Within 2 ulp of expf on
 * [-87.3, 88.7]; below that 0, as the softmax wants. */
static inline float exp_vec(float x)
{
	float xc = x < -87.33654f ? -87.33654f : x;
	xc = xc > 88.72283f ? 88.72283f : xc;
	float kf = (xc * 1.44269504089f + 12582912.0f) - 12582912.0f; /* round to nearest */
	float r = xc - kf * 0.693359375f - kf * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	int32_t bits = ((int32_t)kf + 127) << 23; /* 2^k */
	float sc;
	memcpy(&sc, &bits, sizeof sc);
	float y = p * sc;
	return x < -87.33654f ? 0.0f : y;
}
#define EXP exp_vec
#define LOG logf
#define SQRT sqrtf
#include "backend/cpu_kernels.inc"
