#include "core/init_fill.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double uniform01(uint64_t *s)
{
	return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double std_normal(uint64_t *s)
{
	double u1 = uniform01(s), u2 = uniform01(s);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void init_fill(float *dst, size_t n, size_t first, size_t end, double std, double lo, double hi,
	       int uniform, uint64_t seed, uint64_t tensor)
{
	size_t c0 = first / INIT_FILL_CHUNK, c1 = (end + INIT_FILL_CHUNK - 1) / INIT_FILL_CHUNK;
#pragma omp parallel for schedule(static)
	for (size_t c = c0; c < c1; c++) {
		uint64_t s = seed ^ (tensor * 0xD1B54A32D192ED03ull) ^ (c * 0x8CB92BA72F3D8DD7ull);
		splitmix64(&s);
		size_t i1 = (c + 1) * INIT_FILL_CHUNK < n ? (c + 1) * INIT_FILL_CHUNK : n;
		for (size_t i = c * INIT_FILL_CHUNK; i < i1; i++) {
			double x;
			if (uniform)
				x = std * (2 * uniform01(&s) - 1);
			else
				do
					x = std * std_normal(&s);
				while (lo < hi && (x < lo || x > hi));
			dst[i] = (float)x;
		}
	}
}
