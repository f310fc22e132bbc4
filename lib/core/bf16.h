/* bf16.h: bfloat16 <-> float32 conversions with torch's (c10's) rounding, shared by
 * the checkpoint dtypes and the backends.  bfloat16 is the top half of a
 * float32, stored as uint16_t. */
#ifndef TITAN_BF16_H
#define TITAN_BF16_H

#include <stdint.h>

/* Bits through a union, not memcpy.  Under ASan a memcpy'd local is a stack
 * object whose scope GCC marks in the shadow memory, and it marks it even
 * where these are inlined into an uninstrumented kernel (backend/cpu_kernels.h,
 * CPU_STREAM), which never clears the marks: titan-train's first step then
 * stopped with a false "unknown-crash" in a later frame.  Always inline: such
 * a kernel can call nothing else.  Round to nearest even; a NaN stays a quiet
 * NaN. */
static inline __attribute__((always_inline)) uint16_t bf16_from_f32(float f)
{
	union {
		float f;
		uint32_t u;
	} v = {.f = f};
	uint32_t u = v.u;
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline __attribute__((always_inline)) float bf16_to_f32(uint16_t h)
{
	union {
		uint32_t u;
		float f;
	} v = {.u = (uint32_t)h << 16};
	return v.f;
}

/* x rounded to bfloat16 and back: what storing a float in bfloat16 keeps. */
static inline __attribute__((always_inline)) float bf16_round(float x)
{
	return bf16_to_f32(bf16_from_f32(x));
}

#endif
