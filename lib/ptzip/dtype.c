/* dtype.c: checkpoint element types, their names in torch and safetensors, and
 * conversions with torch's rounding. */
#include "ptzip/ptzip.h"

#include "core/bf16.h"
#include "core/move.h"

#include <math.h>
#include <string.h>
#include <strings.h>

static const struct {
	ptz_dtype t;
	size_t size;
	const char *torch, *storage, *st;
	const char *alias[4];
} types[] = {
	{PTZ_F32, 4, "float32", "FloatStorage", "F32", {"float", "f32", "fp32", NULL}},
	{PTZ_BF16, 2, "bfloat16", "BFloat16Storage", "BF16", {"bf16", NULL}},
	{PTZ_F16, 2, "float16", "HalfStorage", "F16", {"half", "f16", "fp16", NULL}},
	{PTZ_F64, 8, "float64", "DoubleStorage", "F64", {"double", "f64", "fp64", NULL}},
	{PTZ_I64, 8, "int64", "LongStorage", "I64", {"long", "i64", NULL}},
	{PTZ_I32, 4, "int32", "IntStorage", "I32", {"int", "i32", NULL}},
	{PTZ_I16, 2, "int16", "ShortStorage", "I16", {"short", "i16", NULL}},
	{PTZ_I8, 1, "int8", "CharStorage", "I8", {"i8", NULL}},
	{PTZ_U8, 1, "uint8", "ByteStorage", "U8", {"u8", NULL}},
	{PTZ_BOOL, 1, "bool", "BoolStorage", "BOOL", {NULL}},
};
#define NTYPES (sizeof types / sizeof types[0])

static int find(ptz_dtype t)
{
	for (size_t i = 0; i < NTYPES; i++)
		if (types[i].t == t)
			return (int)i;
	return -1;
}

size_t ptz_dtype_size(ptz_dtype t)
{
	int i = find(t);
	return i < 0 ? 0 : types[i].size;
}

const char *ptz_dtype_torch(ptz_dtype t)
{
	int i = find(t);
	return i < 0 ? NULL : types[i].torch;
}

const char *ptz_dtype_storage(ptz_dtype t)
{
	int i = find(t);
	return i < 0 ? NULL : types[i].storage;
}

const char *ptz_dtype_st(ptz_dtype t)
{
	int i = find(t);
	return i < 0 ? NULL : types[i].st;
}

ptz_dtype ptz_dtype_parse(const char *s)
{
	if (!s)
		return PTZ_NONE;
	if (strncmp(s, "torch.", 6) == 0)
		s += 6;
	for (size_t i = 0; i < NTYPES; i++) {
		if (!strcmp(s, types[i].torch) || !strcmp(s, types[i].st) ||
		    !strcasecmp(s, types[i].st))
			return types[i].t;
		for (int k = 0; k < 4 && types[i].alias[k]; k++)
			if (!strcmp(s, types[i].alias[k]))
				return types[i].t;
	}
	return PTZ_NONE;
}

ptz_dtype ptz_dtype_from_storage(const char *cls)
{
	for (size_t i = 0; i < NTYPES; i++)
		if (!strcmp(cls, types[i].storage))
			return types[i].t;
	return PTZ_NONE;
}

/* IEEE half <-> float, round to nearest even, written out so that the result
 * does not depend on the compiler's _Float16 support. */
static uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t ax = u & 0x7fffffffu;
	if (ax > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
	if (ax >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(sign | 0x7c00u);
	if (ax < 0x38800000u) { /* below 2^-14: subnormal half or zero */
		if (ax < 0x33000000u) /* below 2^-25: rounds to zero */
			return (uint16_t)sign;
		uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; /* 14 + 112 */
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t r = ((ax >> 13) - (112u << 10));
	uint32_t rem = ax & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
		r++;
	return (uint16_t)(sign | r);
}

static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
	if (e == 0) {
		if (m == 0) {
			u = sign;
		} else {
			e = 113;
			while (!(m & 0x400u)) {
				m <<= 1;
				e--;
			}
			u = sign | (e << 23) | ((m & 0x3ffu) << 13);
		}
	} else if (e == 31) {
		u = sign | 0x7f800000u | (m << 13);
	} else {
		u = sign | ((e + 112) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static int is_int(ptz_dtype t)
{
	return t == PTZ_I64 || t == PTZ_I32 || t == PTZ_I16 || t == PTZ_I8 || t == PTZ_U8 ||
	       t == PTZ_BOOL;
}

static double load_d(const void *p, ptz_dtype t, size_t i)
{
	switch (t) {
	case PTZ_F32: { float f; memcpy(&f, (const char *)p + 4 * i, 4); return f; }
	case PTZ_BF16: { uint16_t h; memcpy(&h, (const char *)p + 2 * i, 2); return bf16_to_f32(h); }
	case PTZ_F16: { uint16_t h; memcpy(&h, (const char *)p + 2 * i, 2); return f16_to_f32(h); }
	case PTZ_F64: { double d; memcpy(&d, (const char *)p + 8 * i, 8); return d; }
	case PTZ_I64: { int64_t v; memcpy(&v, (const char *)p + 8 * i, 8); return (double)v; }
	case PTZ_I32: { int32_t v; memcpy(&v, (const char *)p + 4 * i, 4); return v; }
	case PTZ_I16: { int16_t v; memcpy(&v, (const char *)p + 2 * i, 2); return v; }
	case PTZ_I8: return ((const int8_t *)p)[i];
	case PTZ_U8: return ((const uint8_t *)p)[i];
	case PTZ_BOOL: return ((const uint8_t *)p)[i] != 0;
	default: return 0;
	}
}

static int64_t load_i(const void *p, ptz_dtype t, size_t i)
{
	switch (t) {
	case PTZ_I64: { int64_t v; memcpy(&v, (const char *)p + 8 * i, 8); return v; }
	case PTZ_I32: { int32_t v; memcpy(&v, (const char *)p + 4 * i, 4); return v; }
	case PTZ_I16: { int16_t v; memcpy(&v, (const char *)p + 2 * i, 2); return v; }
	case PTZ_I8: return ((const int8_t *)p)[i];
	case PTZ_U8: return ((const uint8_t *)p)[i];
	case PTZ_BOOL: return ((const uint8_t *)p)[i] != 0;
	default: return 0;
	}
}

static void store_i(void *p, ptz_dtype t, size_t i, int64_t v)
{
	switch (t) {
	case PTZ_I64: memcpy((char *)p + 8 * i, &v, 8); break;
	case PTZ_I32: { int32_t x = (int32_t)v; memcpy((char *)p + 4 * i, &x, 4); break; }
	case PTZ_I16: { int16_t x = (int16_t)v; memcpy((char *)p + 2 * i, &x, 2); break; }
	case PTZ_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	case PTZ_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
	case PTZ_BOOL: ((uint8_t *)p)[i] = v != 0; break;
	default: break;
	}
}

/* Float to integer truncates toward zero (torch's .to()); out-of-range values
 * are clamped here to stay defined in C. */
static int64_t d_to_i(double d)
{
	if (isnan(d))
		return 0;
	if (d >= 9.2233720368547758e18)
		return INT64_MAX;
	if (d <= -9.2233720368547758e18)
		return INT64_MIN;
	return (int64_t)d;
}

static void store_d(void *p, ptz_dtype t, size_t i, double d)
{
	switch (t) {
	case PTZ_F32: { float f = (float)d; memcpy((char *)p + 4 * i, &f, 4); break; }
	case PTZ_BF16: { uint16_t h = bf16_from_f32((float)d); memcpy((char *)p + 2 * i, &h, 2); break; }
	case PTZ_F16: { uint16_t h = f32_to_f16((float)d); memcpy((char *)p + 2 * i, &h, 2); break; }
	case PTZ_F64: memcpy((char *)p + 8 * i, &d, 8); break;
	case PTZ_BOOL: ((uint8_t *)p)[i] = d != 0; break;
	default: store_i(p, t, i, d_to_i(d)); break;
	}
}

void ptz_convert(void *dst, ptz_dtype dt, const void *src, ptz_dtype st, size_t n)
{
	if (dt == st) {
		if (n && dst != src)
			move_bytes(dst, src, n * ptz_dtype_size(dt));
		return;
	}
	/* The hot pairs for checkpoints get their own loops.  Note that f64 ->
	 * bf16/f16 goes through float first, as torch's .to() does on CPU. */
	/* Storages inside a mapped .distcp file need not be aligned: go through
	 * memcpy, which compiles to plain loads. */
	if (st == PTZ_F32 && dt == PTZ_BF16) {
		const uint8_t *s = src;
		uint8_t *d = dst;
		#pragma omp parallel for if (n > (1u << 20)) schedule(static)
		for (size_t i = 0; i < n; i++) {
			float f;
			memcpy(&f, s + 4 * i, 4);
			uint16_t h = bf16_from_f32(f);
			memcpy(d + 2 * i, &h, 2);
		}
		return;
	}
	if (st == PTZ_BF16 && dt == PTZ_F32) {
		const uint8_t *s = src;
		uint8_t *d = dst;
		#pragma omp parallel for if (n > (1u << 20)) schedule(static)
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, s + 2 * i, 2);
			float f = bf16_to_f32(h);
			memcpy(d + 4 * i, &f, 4);
		}
		return;
	}
	if (is_int(st) && is_int(dt)) {
		for (size_t i = 0; i < n; i++)
			store_i(dst, dt, i, load_i(src, st, i));
		return;
	}
	for (size_t i = 0; i < n; i++)
		store_d(dst, dt, i, load_d(src, st, i));
}
