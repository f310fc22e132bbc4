/* cpu_fp8.h (private to lib/backend): the CPU backend's float8 ops, backend.h's
 * f8_amax, f8_cast and f8_matmul, over lib/float8's numerics.  They are the
 * emulation torchao runs with emulate=True, and the reference a GPU's float8
 * kernels are tested against.  Arguments as in backend.h; a type or a scaling
 * they do not take is a fault for the next sync. */
#ifndef TITAN_CPU_FP8_H
#define TITAN_CPU_FP8_H

#include <stdint.h>

#include "backend/backend.h"

void cpu_f8_amax(backend *be, float *amax, const void *x, be_dtype xt, int64_t rows,
		 int64_t cols, int scaling);
void cpu_f8_cast(backend *be, void *q, be_dtype qt, float *scale, const void *x, be_dtype xt,
		 int64_t rows, int64_t cols, int scaling, int pow2, int transpose,
		 const float *amax);
void cpu_f8_matmul(backend *be, int64_t m, int64_t n, int64_t k, const void *a, be_dtype at,
		   const float *sa, int64_t nsa, const void *b, be_dtype bt, const float *sb,
		   int64_t nsb, float beta, void *c, be_dtype ct);
void cpu_f8_grouped_matmul(backend *be, int mode, int64_t groups, const int32_t *offs,
			   int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
			   be_dtype ab, float beta, void *c, be_dtype ct);
/* convert from float8: dst (n, float32 or bfloat16) = the values of the codes
 * src (n, st = BE_E4M3 or BE_E5M2), exactly (FSDP's float8 all-gather). */
void cpu_f8_decode(backend *be, void *dst, be_dtype dt, const uint8_t *src, be_dtype st,
		   int64_t n);

#endif
