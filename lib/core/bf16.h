/* bf16.h: bfloat16 <-> float32 conversions with torch's (c10's) rounding, shared by
 * the checkpoint dtypes and the backends.  bfloat16 is the top half of a
 * float32, stored as uint16_t. */
#ifndef TITAN_BF16_H
#define TITAN_BF16_H

#include <stdint.h>
#include <string.h>

/* Round to nearest even; a NaN stays a quiet NaN. */
static inline uint16_t bf16_from_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* x rounded to bfloat16 and back: what storing a float in bfloat16 keeps. */
static inline float bf16_round(float x)
{
	return bf16_to_f32(bf16_from_f32(x));
}

#endif
