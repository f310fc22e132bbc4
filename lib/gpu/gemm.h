/* gemm.h: matrix products on the GPU through cuBLASLt, with the CPU backend's
 * row-major convention (backend.h's matmul):
 *
 *   D (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C  [+ bias (n) per column]
 *
 * op(X) = X, or X^T when its trans flag is set (then A is stored (k, m), B
 * (n, k)); lda, ldb, ldd are row strides in elements; C, when given, has D's
 * type and layout and may be D itself (beta = 1 accumulates into D: the weight
 * gradients of micro-batches, a residual added by the product).  A and B are
 * both float32 or both bf16; D is float32 or bf16; accumulation is float32
 * always (CUBLAS_COMPUTE_32F: float32 inputs get full float32, never TF32, so
 * they match the CPU backend).
 *
 * The first call with a shape asks cuBLASLt's heuristic for an algorithm and
 * keeps it (with its descriptors) for later calls of that shape; nothing is
 * allocated on the device after gpu_gemm_create, so calls may be captured in a
 * CUDA graph once each shape has run once. */
#ifndef TITAN_GPU_GEMM_H
#define TITAN_GPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct gpu_gemm gpu_gemm;

/* The workspace cuBLASLt may use (device memory the caller owns and keeps while
 * g lives; GPU_GEMM_WORKSPACE bytes is what Hopper's fastest kernels want). */
#define GPU_GEMM_WORKSPACE ((size_t)32 << 20)
gpu_gemm *gpu_gemm_create(void *workspace, size_t workspace_bytes, titan_err *e);
void gpu_gemm_free(gpu_gemm *g);

typedef struct gpu_gemm_args {
	int trans_a, trans_b;
	int64_t m, n, k;
	float alpha, beta;
	const void *a; /* (m, k), or (k, m) with trans_a */
	int64_t lda;
	const void *b; /* (k, n), or (n, k) with trans_b */
	int64_t ldb;
	int ab_type;   /* gpu_dtype of A and B */
	const void *c; /* (m, n) like D, or NULL (then beta must be 0) */
	void *d;       /* (m, n) */
	int64_t ldd;
	int d_type;
	const void *bias; /* (n) or NULL */
	int bias_type;
} gpu_gemm_args;

/* Runs on stream (a cudaStream_t; NULL: the default stream).  m or n = 0 does
 * nothing; k must be at least 1.  Errors: a shape or type cuBLASLt has no
 * algorithm for, or a failed launch. */
int gpu_gemm_run(gpu_gemm *g, void *stream, const gpu_gemm_args *args, titan_err *e);

/* The scaled float8 product (backend.h's f8_matmul, torch._scaled_mm):
 *   D (m, n) = beta * D + sum_k (sa[i] a[i,k]) (sb[j] b[j,k])
 * a (m, k) and b (n, k) float8 codes (GPU_E4M3 / GPU_E5M2, not both e5m2)
 * with k contiguous; sa, sb the dequantising multipliers on the device (the
 * reciprocals of torchao's cast scales): one each, or with a_rows / b_rows one
 * per row of a (m) / of b (n) (cuBLASLt's outer-vector scaling); NULL: 1.  D
 * float32 or bf16, row stride n; float32 accumulation.  cuBLASLt wants k and
 * the row strides multiples of 16 bytes. */
typedef struct gpu_gemm_f8_args {
	int64_t m, n, k;
	const void *a;
	int a_type;
	const void *b;
	int b_type;
	const float *sa, *sb;
	int a_rows, b_rows;
	float beta;
	void *d;
	int d_type;
} gpu_gemm_f8_args;
/* As gpu_gemm_run; -2 (with a message) when cuBLASLt has no algorithm for
 * this product (its heuristic refused the shape, types or scale modes): the
 * caller may compute it another way.  A refusal is remembered with the shape,
 * so asking again costs a lookup. */
int gpu_gemm_f8_run(gpu_gemm *g, void *stream, const gpu_gemm_f8_args *args, titan_err *e);
#define GPU_GEMM_NO_ALGO (-2)

/* How a scaled float8 product's scales reach cuBLASLt, decided per call from
 * nsa (1 or m) and nsb (1 or n) scales.  cuBLASLt takes
 * CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on both operands or on neither
 * (a vector beside a scalar has no kernel: torch._scaled_mm's row-wise sets
 * both), so one vector makes both vectors, the scalar broadcast to its
 * operand's rows.  The reciprocals live in one scratch buffer: a's at 0, b's at
 * b_offset, a multiple of 16 bytes (cuBLASLt's alignment for scale vectors).
 * fallback_bytes is the float32 product (m, n) that the epilogue fallback
 * needs when cuBLASLt refuses the vector product (0 for a scalar product,
 * which has no fallback): allocated only then.  Errors: counts that are
 * neither 1 nor the rows, sizes that overflow. */
typedef struct gpu_f8_scales {
	int outer_vec;           /* 1: OUTER_VEC_32F on both operands; 0: scalars */
	int64_t na, nb;          /* the lengths cuBLASLt reads: 1 and 1, or m and n */
	size_t b_offset, bytes;  /* b's vector's offset, and both vectors' bytes */
	size_t fallback_bytes;
} gpu_f8_scales;
int gpu_f8_scales_plan(int64_t m, int64_t n, int64_t nsa, int64_t nsb, gpu_f8_scales *out,
		       titan_err *e);

/* Shapes seen so far (each holds one cached algorithm). */
int gpu_gemm_cached(const gpu_gemm *g);

#endif
