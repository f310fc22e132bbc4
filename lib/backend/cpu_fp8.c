/* The CPU backend's float8 ops (cpu_fp8.h): lib/float8's casts and scales on
 * host memory, and the scaled GEMM as torchao emulates it: each operand
 * dequantized (its float8 value divided by its scale, in float32) and the
 * product taken by the float32 GEMM. */
#include "backend/cpu_fp8.h"

#include <stddef.h>
#include <string.h>

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

/* x (rows, cols) float32 in place: torchao's e4m3 cast with power-of-two
 * scales, dequantized (float(q) / s, exact: s is a power of two). */
static void fake_e4m3(float *x, float *scale, int64_t rows, int64_t cols, f8_scaling s)
{
	f8_scales(scale, x, rows, cols, s, F8_E4M3FN, true);
	f8_fake_quantize(x, x, scale, rows, cols, s, F8_E4M3FN);
}

/* Float32 copies of a (an floats) and b (bn floats) into af, bf. */
static void widen_into(float *dst, const void *x, be_dtype t, size_t n)
{
	if (t == BE_F32)
		memcpy(dst, x, n * sizeof(float));
	else
		cpu_bf16_convert(dst, BE_F32, x, BE_BF16, (int64_t)n);
}

/* torchao's casts of the three grouped GEMMs (backend.h's f8_grouped_matmul). */
static void fake_operands(int mode, int64_t groups, const int32_t *offs, int64_t rows,
			  int64_t nn, int64_t kk, float *af, float *bf, float *scale)
{
	if (mode == BE_GMM_FWD) { /* tokens' rows of A; B_t's columns = rows of b[g] */
		fake_e4m3(af, scale, rows, kk, F8_ROWS);
		fake_e4m3(bf, scale, groups * nn, kk, F8_ROWS);
	} else if (mode == BE_GMM_DX) { /* rows of dy; b[g] (nn, kk) per column */
		fake_e4m3(af, scale, rows, nn, F8_ROWS);
		for (int64_t g = 0; g < groups; g++)
			fake_e4m3(bf + g * nn * kk, scale, nn, kk, F8_COLS);
	} else { /* each group's columns of dy and of x, over the group's rows */
		for (int64_t g = 0; g < groups; g++) {
			int64_t r0 = offs[g], m = offs[g + 1] - r0;
			if (m == 0)
				continue;
			fake_e4m3(af + r0 * nn, scale, m, nn, F8_COLS);
			fake_e4m3(bf + r0 * kk, scale, m, kk, F8_COLS);
		}
	}
}

void cpu_f8_grouped_matmul(backend *be, int mode, int64_t groups, const int32_t *offs,
			   int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
			   be_dtype ab, float beta, void *c, be_dtype ct)
{
	if (!hp_ok(be, "f8_grouped_matmul", ab) || !hp_ok(be, "f8_grouped_matmul", ct))
		return;
	if (mode != BE_GMM_FWD && mode != BE_GMM_DX && mode != BE_GMM_DW) {
		backend_fault(be, "cpu backend: f8_grouped_matmul: mode %d is not FWD, DX or DW", mode);
		return;
	}
	size_t an = (size_t)(rows * (mode == BE_GMM_FWD ? kk : nn));
	size_t bn = (size_t)(mode == BE_GMM_DW ? rows * kk : groups * nn * kk);
	size_t cn = (size_t)(mode == BE_GMM_DW	  ? groups * nn * kk
			     : mode == BE_GMM_FWD ? rows * nn
						  : rows * kk);
	size_t sn = (size_t)(rows > groups * nn ? rows : groups * nn) + (size_t)(nn + kk);
	float *af = cpu_scratch(be, (an + bn + cn + sn) * sizeof(float), "f8_grouped_matmul");
	if (!af)
		return;
	float *bf = af + an, *pf = bf + bn, *scale = pf + cn;
	widen_into(af, a, ab, an);
	widen_into(bf, b, ab, bn);
	fake_operands(mode, groups, offs, rows, nn, kk, af, bf, scale);
	cpu_grouped_matmul_f32(mode, groups, offs, rows, nn, kk, af, bf, 0, pf);
	/* torchao's out_dtype: the product is bfloat16, then added to c */
#pragma omp parallel for if (cn > CPU_PAR_MIN)
	for (size_t i = 0; i < cn; i++) {
		float p = bf16_round(pf[i]);
		if (ct == BE_F32) {
			float *cf = c;
			cf[i] = beta == 0 ? p : beta * cf[i] + p;
		} else {
			uint16_t *cb = c;
			cb[i] = bf16_from_f32(beta == 0 ? p : beta * bf16_to_f32(cb[i]) + p);
		}
	}
}
