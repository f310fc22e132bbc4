/* cublaslt.h: cuBLASLt's entry points, loaded with dlopen when the first GPU
 * product is planned rather than linked.
 *
 * Linking libcublasLt makes every start of every titan program pay for
 * loading it (about 60 ms of CPU: a 600 MB library with a large data segment
 * to relocate), the CPU backend's and titan-tokenize's included; only the
 * CUDA backend uses it.  The library is the one of the toolkit titan was built
 * with (libcublasLt.so.CUBLAS_VER_MAJOR), found as the dynamic linker finds
 * any library (the programs' run path, LD_LIBRARY_PATH, ld.so.cache). */
#ifndef TITAN_GPU_CUBLASLT_H
#define TITAN_GPU_CUBLASLT_H

#ifdef TITAN_CUDA
#include <cublasLt.h>

#include "core/err.h"

typedef struct gpu_lt_api {
	__typeof__(cublasLtCreate) *Create;
	__typeof__(cublasLtDestroy) *Destroy;
	__typeof__(cublasLtGetStatusString) *GetStatusString;
	__typeof__(cublasLtMatmul) *Matmul;
	__typeof__(cublasLtMatmulAlgoGetHeuristic) *MatmulAlgoGetHeuristic;
	__typeof__(cublasLtMatmulDescCreate) *MatmulDescCreate;
	__typeof__(cublasLtMatmulDescDestroy) *MatmulDescDestroy;
	__typeof__(cublasLtMatmulDescSetAttribute) *MatmulDescSetAttribute;
	__typeof__(cublasLtMatmulPreferenceCreate) *MatmulPreferenceCreate;
	__typeof__(cublasLtMatmulPreferenceDestroy) *MatmulPreferenceDestroy;
	__typeof__(cublasLtMatmulPreferenceSetAttribute) *MatmulPreferenceSetAttribute;
	__typeof__(cublasLtMatrixLayoutCreate) *MatrixLayoutCreate;
	__typeof__(cublasLtMatrixLayoutDestroy) *MatrixLayoutDestroy;
} gpu_lt_api;

/* The entry points, loaded once per process (thread-safe); NULL with e's
 * message naming the library and dlerror's reason. */
const gpu_lt_api *gpu_lt_load(titan_err *e);
/* The entry points once gpu_lt_load has succeeded (gpu_gemm_create's). */
const gpu_lt_api *gpu_lt(void);
#endif

#endif
