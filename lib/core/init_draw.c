/* init_draw.c: see init_draw.h; why it is exact, in init_fill.c. */
#include "core/init_draw.h"

#include <math.h>
#include <string.h>

#include "core/cpu_hot.h"

static inline __attribute__((always_inline)) double bits_double(uint64_t b)
{
	double d;
	memcpy(&d, &b, sizeof d);
	return d;
}

static inline __attribute__((always_inline)) uint64_t double_bits(double d)
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

CPU_HOT_VOID(, init_draw_normals,
	     (const double *restrict u1, const double *restrict u2, double std, double lo,
	      double hi, double *restrict x, uint64_t *restrict sure),
	     (u1, u2, std, lo, hi, x, sure))
{
	int uncut = !(lo < hi);
	for (int j = 0; j < INIT_DRAW_BLOCK; j++) {
		double v = std * (sqrt(-2.0 * log_unit(u1[j])) * cos_turn(2.0 * M_PI * u2[j]));
		double band = fabs(v) * INIT_DRAW_BAND;
		float f = (float)v;
		int ok = ((float)(v - band) == f) & ((float)(v + band) == f);
		ok &= uncut | ((fabs(v - lo) > band) & (fabs(v - hi) > band));
		x[j] = v;
		sure[j] = 0 - (uint64_t)ok;
	}
}

