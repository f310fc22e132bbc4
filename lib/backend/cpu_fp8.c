/* The CPU backend's float8 ops (cpu_fp8.h): lib/float8's casts and scales on
 * host memory, and the scaled GEMM as torchao emulates it: each operand
 * dequantized (its float8 value divided by its scale, in float32) and the
 * product taken by the float32 GEMM. */
#include "backend/cpu_fp8.h"

#include <stddef.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"
#include "float8/float8.h"

_Static_assert(BE_F8_TENSOR == (int)F8_TENSOR && BE_F8_ROWS == (int)F8_ROWS &&
		       BE_F8_COLS == (int)F8_COLS,
	       "be_f8_scaling vs f8_scaling");

static int is_f8(be_dtype t) { return t == BE_E4M3 || t == BE_E5M2; }
static int is_hp(be_dtype t) { return t == BE_F32 || t == BE_BF16; }
static f8_format fmt_of(be_dtype t) { return t == BE_E5M2 ? F8_E5M2 : F8_E4M3FN; }

static int scaling_ok(backend *be, const char *op, int s)
{
	if (s == BE_F8_TENSOR || s == BE_F8_ROWS || s == BE_F8_COLS)
		return 1;
	backend_fault(be, "cpu backend: %s: scaling %d is not tensor, rows or columns", op, s);
	return 0;
}

static int hp_ok(backend *be, const char *op, be_dtype t)
{
	if (is_hp(t))
		return 1;
	backend_fault(be, "cpu backend: %s: reads float32 or bfloat16, not %s", op, be_dtype_name(t));
	return 0;
}

/* x (n) as float32: x itself, or its bfloat16 values widened (exactly) into
 * the backend's scratch.  NULL with a fault when the scratch cannot be had. */
static const float *widen(backend *be, const void *x, be_dtype xt, size_t n, const char *op)
{
	if (xt == BE_F32)
		return x;
	float *buf = cpu_scratch(be, n * sizeof(float), op);
	if (buf)
		cpu_bf16_convert(buf, BE_F32, x, BE_BF16, (int64_t)n);
	return buf;
}

void cpu_f8_amax(backend *be, float *amax, const void *x, be_dtype xt, int64_t rows,
		 int64_t cols, int scaling)
{
	if (!hp_ok(be, "f8_amax", xt) || !scaling_ok(be, "f8_amax", scaling))
		return;
	const float *xf = widen(be, x, xt, (size_t)(rows * cols), "f8_amax");
	if (xf)
		f8_amax(amax, xf, rows, cols, (f8_scaling)scaling);
}

void cpu_f8_cast(backend *be, void *q, be_dtype qt, float *scale, const void *x, be_dtype xt,
		 int64_t rows, int64_t cols, int scaling, int pow2, int transpose,
		 const float *amax)
{
	if (!is_f8(qt)) {
		backend_fault(be, "cpu backend: f8_cast: writes float8, not %s", be_dtype_name(qt));
		return;
	}
	if (!hp_ok(be, "f8_cast", xt) || !scaling_ok(be, "f8_cast", scaling))
		return;
	const float *xf = widen(be, x, xt, (size_t)(rows * cols), "f8_cast");
	if (!xf)
		return;
	f8_scaling s = (f8_scaling)scaling;
	f8_format f = fmt_of(qt);
	if (amax) {
		int64_t ns = f8_n_scales(s, rows, cols);
		for (int64_t i = 0; i < ns; i++)
			scale[i] = f8_amax_to_scale(amax[i], f, pow2 != 0);
	} else {
		f8_scales(scale, xf, rows, cols, s, f, pow2 != 0);
	}
	if (transpose)
		f8_quantize_t(q, xf, scale, rows, cols, s, f);
	else
		f8_quantize(q, xf, scale, rows, cols, s, f);
}

void cpu_f8_matmul(backend *be, int64_t m, int64_t n, int64_t k, const void *a, be_dtype at,
		   const float *sa, int64_t nsa, const void *b, be_dtype bt, const float *sb,
		   int64_t nsb, float beta, void *c, be_dtype ct)
{
	if (!is_f8(at) || !is_f8(bt) || (at == BE_E5M2 && bt == BE_E5M2) || !is_hp(ct)) {
		backend_fault(be, "cpu backend: f8_matmul: %s x %s -> %s: expected float8 operands "
			      "(not both e5m2) and a float32 or bfloat16 output", be_dtype_name(at),
			      be_dtype_name(bt), be_dtype_name(ct));
		return;
	}
	if ((nsa != 1 && nsa != m) || (nsb != 1 && nsb != n)) {
		backend_fault(be, "cpu backend: f8_matmul %lldx%lldx%lld: %lld and %lld scales, "
			      "expected 1 or m, 1 or n", (long long)m, (long long)n, (long long)k,
			      (long long)nsa, (long long)nsb);
		return;
	}
	if (m == 0 || n == 0)
		return;
	size_t mk = (size_t)(m * k), nk = (size_t)(n * k), mn = ct == BE_BF16 ? (size_t)(m * n) : 0;
	float *af = cpu_scratch(be, (mk + nk + mn) * sizeof(float), "f8_matmul");
	if (!af)
		return;
	float *bf = af + mk, *cf = ct == BE_BF16 ? bf + nk : c;
	/* torchao's emulation: a._data.float() / a._scale, the same for b */
	f8_dequantize(af, a, sa, m, k, nsa == 1 ? F8_TENSOR : F8_ROWS, fmt_of(at));
	f8_dequantize(bf, b, sb, n, k, nsb == 1 ? F8_TENSOR : F8_ROWS, fmt_of(bt));
	if (ct == BE_BF16 && beta != 0)
		cpu_bf16_convert(cf, BE_F32, c, BE_BF16, m * n);
	/* C (m, n) = a (m, k) @ b (n, k)^T + beta C */
	cpu_matmul_f32(0, 1, m, n, k, 1.0f, af, k, bf, k, beta, cf, n);
	if (ct == BE_BF16)
		cpu_bf16_convert(c, BE_BF16, cf, BE_F32, m * n);
}

void cpu_f8_decode(backend *be, void *dst, be_dtype dt, const uint8_t *src, be_dtype st,
		   int64_t n)
{
	if (!is_f8(st) || !hp_ok(be, "convert", dt))
		return;
	/* every float8 value is a float32 and a bfloat16 exactly: a table lookup */
	float v[256];
	for (int c = 0; c < 256; c++)
		v[c] = f8_to_float((uint8_t)c, fmt_of(st));
	if (dt == BE_F32) {
		float *y = dst;
#pragma omp parallel for if (n > CPU_PAR_MIN)
		for (int64_t i = 0; i < n; i++)
			y[i] = v[src[i]];
	} else {
		uint16_t *y = dst;
#pragma omp parallel for if (n > CPU_PAR_MIN)
		for (int64_t i = 0; i < n; i++)
			y[i] = bf16_from_f32(v[src[i]]);
	}
}
