/* The Mersenne Twister's engine: see mt19937.h. */
#include "core/mt19937.h"

enum { MT_M = 397 };
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu

void mt19937_init(mt19937 *m, uint32_t s)
{
	m->mt[0] = s;
	for (uint32_t i = 1; i < MT19937_N; i++)
		m->mt[i] = 1812433253u * (m->mt[i - 1] ^ (m->mt[i - 1] >> 30)) + i;
	m->index = MT19937_N;
}

static uint32_t twist(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t y = (a & MT_UPPER) | (b & MT_LOWER);
	return c ^ (y >> 1) ^ (y & 1u ? MT_MATRIX_A : 0u);
}

uint32_t mt19937_next(mt19937 *m)
{
	uint32_t *mt = m->mt;
	if (m->index >= MT19937_N) {
		int k = 0;
		for (; k < MT19937_N - MT_M; k++)
			mt[k] = twist(mt[k], mt[k + 1], mt[k + MT_M]);
		for (; k < MT19937_N - 1; k++)
			mt[k] = twist(mt[k], mt[k + 1], mt[k + MT_M - MT19937_N]);
		mt[MT19937_N - 1] = twist(mt[MT19937_N - 1], mt[0], mt[MT_M - 1]);
		m->index = 0;
	}
	uint32_t y = mt[m->index++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	return y ^ (y >> 18);
}
