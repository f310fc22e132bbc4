/* The CPU kernels in float64: the reference of the float32 ops and the subject of
 * the finite-difference gradient checks. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"

#define REAL double
#define SFX f64
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#define SQRT sqrt
#define FMA fma
#include "backend/cpu_kernels.inc"
#include "backend/cpu_flux.inc"
#include "backend/cpu_flux_train.inc"
#include "backend/cpu_image.inc"

/* torchtitan's precompute_freqs_cis with apply_scaling (Llama 3.1): low 1, high 4,
 * original context 8192.  Angles in double; torchtitan computes the frequencies
 * in float32, the difference is below float32 rounding of cos and sin. */
void cpu_rope_table_f64(double *cs, int64_t t, int64_t hd, int64_t pos0, double theta,
			double scale_factor)
{
	const double orig = 8192, low = 1, high = 4;
	for (int64_t p = 0; p < hd / 2; p++) {
		double f = 1.0 / pow(theta, (double)(2 * p) / (double)hd);
		if (scale_factor > 0) {
			double wavelen = 2 * M_PI / f;
			double nf = wavelen > orig / low ? f / scale_factor : f;
			if (wavelen >= orig / high && wavelen <= orig / low) {
				double smooth = (orig / wavelen - low) / (high - low);
				nf = (1 - smooth) * nf / scale_factor + smooth * nf;
			}
			f = nf;
		}
		for (int64_t i = 0; i < t; i++) {
			double ang = (double)(pos0 + i) * f;
			cs[(i * (hd / 2) + p) * 2] = cos(ang);
			cs[(i * (hd / 2) + p) * 2 + 1] = sin(ang);
		}
	}
}
