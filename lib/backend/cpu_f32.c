/* The CPU kernels in float32: the backend's ops. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_kernels.h"

#define REAL float
#define SFX f32
#define GEMM cblas_sgemm
#define EXP expf
#define LOG logf
#define SQRT sqrtf
#include "backend/cpu_kernels.inc"
