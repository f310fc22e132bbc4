/* le.h: little-endian loads and stores for the file formats and saved states
 * (shards, the loader's mixture state, torch_rng's state bytes). */
#ifndef TITAN_CORE_LE_H
#define TITAN_CORE_LE_H

#include <stdint.h>

static inline void le_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void le_put64(uint8_t *p, uint64_t v)
{
	le_put32(p, (uint32_t)v);
	le_put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t le_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t le_get64(const uint8_t *p)
{
	return (uint64_t)le_get32(p) | (uint64_t)le_get32(p + 4) << 32;
}

/* Widen n stored ids of width w (2 or 4) to u32. */
static inline void le_widen(const uint8_t *restrict p, uint32_t w, size_t n, uint32_t *restrict out)
{
	if (w == 2)
		for (size_t i = 0; i < n; i++)
			out[i] = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
	else
		for (size_t i = 0; i < n; i++)
			out[i] = le_get32(p + 4 * i);
}

#endif
