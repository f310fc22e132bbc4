#include "core/init_fill.h"

#include <math.h>
#include <stdatomic.h>

#include "core/init_draw.h"

/* A normal draw is Box-Muller's sqrt(-2 log u1) cos(2 pi u2), in double,
 * with libm's log and cos, rounded once to float: that is the value the
 * goldens (scripts/model_golden.py's titan_init) replicate.  libm's calls
 * were most of a small model's start-up (a fifth of debugmodel's), so the
 * draws are made in blocks by a log and a cos the compiler vectorises
 * (core/init_draw), each within 2^-51 of the exact value, as libm's are.
 * The two results then lie within 2^-49 of each other, and where every
 * double within 2^-40 of the fast one rounds to the same float and falls on
 * the same side of the cut, libm's does too: that float is libm's.  The other
 * draws, about 1 in 40,000, are made again with libm's calls (fill_normal).
 * So the weights are libm's bit for bit, at every instruction-set level. */
enum { BLOCK = INIT_DRAW_BLOCK };

static _Atomic size_t libm_draws;

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

static double libm_normal(double u1, double u2)
{
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Elements [i, i1) of one chunk from its stream s: each candidate takes two
 * uniforms in turn, as one draw at a time would; a candidate the band leaves
 * undecided is drawn again through libm (see above). */
static void fill_normal(float *dst, size_t i, size_t i1, double std, double lo, double hi,
			uint64_t *s)
{
	double x[BLOCK], u1[BLOCK], u2[BLOCK];
	uint64_t sure[BLOCK];
	while (i < i1) {
		for (int j = 0; j < BLOCK; j++) {
			u1[j] = uniform01(s);
			u2[j] = uniform01(s);
		}
		init_draw_normals(u1, u2, std, lo, hi, x, sure);
		for (int j = 0; j < BLOCK && i < i1; j++) {
			double v = x[j];
			if (!sure[j]) {
				atomic_fetch_add_explicit(&libm_draws, 1, memory_order_relaxed);
				v = std * libm_normal(u1[j], u2[j]);
			}
			if (!(lo < hi && (v < lo || v > hi)))
				dst[i++] = (float)v;
		}
	}
}

void init_fill(float *dst, size_t n, size_t first, size_t end, double std, double lo, double hi,
	       int uniform, uint64_t seed, uint64_t tensor)
{
	size_t c0 = first / INIT_FILL_CHUNK, c1 = (end + INIT_FILL_CHUNK - 1) / INIT_FILL_CHUNK;
#pragma omp parallel for schedule(static)
	for (size_t c = c0; c < c1; c++) {
		uint64_t s = seed ^ (tensor * 0xD1B54A32D192ED03ull) ^ (c * 0x8CB92BA72F3D8DD7ull);
		splitmix64(&s);
		size_t i0 = c * INIT_FILL_CHUNK;
		size_t i1 = (c + 1) * INIT_FILL_CHUNK < n ? (c + 1) * INIT_FILL_CHUNK : n;
		if (!uniform) {
			fill_normal(dst, i0, i1, std, lo, hi, &s);
			continue;
		}
		for (size_t i = i0; i < i1; i++)
			dst[i] = (float)(std * (2 * uniform01(&s) - 1));
	}
}

size_t init_fill_libm_draws(void)
{
	return atomic_load(&libm_draws);
}
