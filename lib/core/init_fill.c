#include "core/init_fill.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/cpu_hot.h"

/* A normal draw is Box-Muller's sqrt(-2 log u1) cos(2 pi u2), in double,
 * with libm's log and cos, rounded once to float: that is the value the
 * goldens (scripts/model_golden.py's titan_init) replicate.  libm's calls
 * were most of a small model's start-up (a fifth of debugmodel's), so the
 * draws are made in blocks by a log and a cos the compiler vectorises, each
 * within 2^-51 of the exact value, as libm's are.  The two results then lie
 * within 2^-49 of each other, and where every double within 2^-40 of the
 * fast one rounds to the same float and falls on the same side of the cut,
 * libm's does too: that float is libm's.  The other draws, about 1 in 40,000,
 * are made again with libm's calls (fill_normal).  So the weights are libm's bit for
 * bit, at every instruction-set level. */
enum { BLOCK = 64 };
#define BAND 0x1p-40

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

static double bits_double(uint64_t b)
{
	double d;
	memcpy(&d, &b, sizeof d);
	return d;
}

static uint64_t double_bits(double d)
{
	uint64_t b;
	memcpy(&b, &d, sizeof b);
	return b;
}

/* log u for u in [2^-54, 1): u = 2^e m with m in [sqrt(1/2), sqrt(2)), and
 * log m = 2 atanh s, s = (m - 1)/(m + 1), |s| < 0.172, by its series to
 * s^21 (the next term is under 2^-60 of it); e ln 2 in two parts, the first
 * exact.  No branch and no int64-to-double conversion (AVX2 has none): e
 * goes through the bits of 1.5 * 2^52 + e. */
static inline __attribute__((always_inline)) double log_unit(double u)
{
	uint64_t b = double_bits(u);
	int64_t e = (int64_t)(b - 0x3fe6a09e667f3bcdull) >> 52; /* the bits of sqrt(1/2) */
	double m = bits_double(b - ((uint64_t)e << 52));
	double de = bits_double(0x4338000000000000ull + (uint64_t)e) - 0x1.8p52;
	double s = (m - 1.0) / (m + 1.0), z = s * s;
	double p = 1.0 / 21;
	p = p * z + 1.0 / 19;
	p = p * z + 1.0 / 17;
	p = p * z + 1.0 / 15;
	p = p * z + 1.0 / 13;
	p = p * z + 1.0 / 11;
	p = p * z + 1.0 / 9;
	p = p * z + 1.0 / 7;
	p = p * z + 1.0 / 5;
	p = p * z + 1.0 / 3;
	double log_m = 2.0 * s + 2.0 * s * (z * p);
	return de * 0x1.62e42fee00000p-1 + (log_m + de * 0x1.a39ef35793c76p-33);
}

/* cos a for a in [0, 2 pi]: a = q pi/2 + r with |r| <= pi/4 (Cody-Waite, pi/2
 * in three parts: q times each of the first two is exact, and a - q p1
 * is exact by Sterbenz), then cos r or sin r by Taylor's series to r^18 and
 * r^17 (the next terms are under 2^-58), the choice and the sign made in
 * the bits.  q comes from the bits of a 2/pi + 1.5 * 2^52. */
static inline __attribute__((always_inline)) double cos_turn(double a)
{
	const double shift = 0x1.8p52;
	double qs = a * 0x1.45f306dc9c883p-1 + shift, q = qs - shift;
	double r = a - q * 0x1.921fb54400000p+0;
	r = r - q * 0x1.0b4611a600000p-34;
	r = r - q * 0x1.3198a2e037073p-69;
	double z = r * r;
	double s = 1.0 / 355687428096000.0;
	s = s * z - 1.0 / 1307674368000.0;
	s = s * z + 1.0 / 6227020800.0;
	s = s * z - 1.0 / 39916800.0;
	s = s * z + 1.0 / 362880.0;
	s = s * z - 1.0 / 5040.0;
	s = s * z + 1.0 / 120.0;
	s = s * z - 1.0 / 6.0;
	double sin_r = r + r * (z * s);
	double c = -1.0 / 6402373705728000.0;
	c = c * z + 1.0 / 20922789888000.0;
	c = c * z - 1.0 / 87178291200.0;
	c = c * z + 1.0 / 479001600.0;
	c = c * z - 1.0 / 3628800.0;
	c = c * z + 1.0 / 40320.0;
	c = c * z - 1.0 / 720.0;
	c = c * z + 1.0 / 24.0;
	double cos_r = 1.0 - 0.5 * z + (z * z) * c;
	/* cos(r + q pi/2) = cos r, -sin r, -cos r, sin r */
	uint64_t qb = double_bits(qs), odd = 0 - (qb & 1);
	uint64_t v = (double_bits(sin_r) & odd) | (double_bits(cos_r) & ~odd);
	return bits_double(v ^ (((qb + 1) & 2) << 62));
}

/* x[j] = std * Box-Muller's normal of (u1[j], u2[j]), BLOCK of them, and
 * sure[j] all ones where the band decides x[j]'s float and its side of the
 * cut (lo < hi), else 0. */
CPU_HOT_VOID(static, normal_block,
	     (const double *restrict u1, const double *restrict u2, double std, double lo,
	      double hi, double *restrict x, uint64_t *restrict sure),
	     (u1, u2, std, lo, hi, x, sure))
{
	int uncut = !(lo < hi);
	for (int j = 0; j < BLOCK; j++) {
		double v = std * (sqrt(-2.0 * log_unit(u1[j])) * cos_turn(2.0 * M_PI * u2[j]));
		double band = fabs(v) * BAND;
		float f = (float)v;
		int ok = ((float)(v - band) == f) & ((float)(v + band) == f);
		ok &= uncut | ((fabs(v - lo) > band) & (fabs(v - hi) > band));
		x[j] = v;
		sure[j] = 0 - (uint64_t)ok;
	}
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
		normal_block(u1, u2, std, lo, hi, x, sure);
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
