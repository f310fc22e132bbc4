/* torch's CPU generator and its draws: see torch_rng.h. */
#include "core/torch_rng.h"

#include <math.h>
#include <string.h>

#include "core/bf16.h"
#include "core/le.h"

/* c10::pi<double> */
#define TORCH_PI 3.14159265358979323846

void torch_rng_seed(torch_rng *g, uint64_t seed, torch_normal_kernel kernel)
{
	mt19937_init(&g->mt, (uint32_t)seed);
	g->seed = seed;
	g->has_normal = 0;
	g->normal = 0;
	g->has_float_normal = 0;
	g->float_normal = 0;
	g->kernel = kernel;
}

uint32_t torch_rng_random(torch_rng *g)
{
	return mt19937_next(&g->mt);
}

uint64_t torch_rng_random64(torch_rng *g)
{
	uint64_t hi = mt19937_next(&g->mt);
	return hi << 32 | mt19937_next(&g->mt);
}

int64_t torch_rng_int64(torch_rng *g)
{
	return (int64_t)(torch_rng_random64(g) & INT64_MAX);
}

int torch_rng_randint(torch_rng *g, int64_t low, int64_t high, int64_t *out, size_t n,
		      titan_err *err)
{
	if (low >= high)
		return err_set(err, "randint: low %lld must be below high %lld", (long long)low,
			       (long long)high);
	uint64_t range = (uint64_t)high - (uint64_t)low;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = range >= (1ull << 28) ? torch_rng_random64(g) % range
						    : torch_rng_random(g) % range;
		out[i] = (int64_t)(v + (uint64_t)low);
	}
	return 0;
}

/* uniform_real_distribution<float>(0, 1): 24 bits of one output. */
static float uniform_f32(torch_rng *g)
{
	return (float)(torch_rng_random(g) & 0xffffffu) * 0x1p-24f;
}

static double uniform_f64(torch_rng *g)
{
	return (double)(torch_rng_random64(g) & ((1ull << 53) - 1)) * 0x1p-53;
}

void torch_rng_rand_f32(torch_rng *g, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = uniform_f32(g);
}

void torch_rng_rand_f64(torch_rng *g, double *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = uniform_f64(g);
}

void torch_rng_rand_bf16(torch_rng *g, uint16_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint16_t v = bf16_from_f32(uniform_f32(g));
		out[i] = v == 0x3f80 ? 0 : v; /* uniform_kernel's clamp: to becomes from */
	}
}

/* avx_mathfun's log256_ps and sincos256_ps for one lane, as torch's AVX2
 * kernel computes them: GCC builds it with -mfma and contracts each multiply
 * whose one use is an add or subtract into an FMA (a multiply feeding another
 * multiply stays rounded), so the fmaf calls below stand where that happens.
 * Some of them cannot change a result here (z * 0.5 and e * 0.693359375 are
 * exact); they are kept as the build has them. */

/* Cephes' logf on the mantissa in [sqrt(1/2), sqrt(2)) and the exponent.  x
 * is a normal positive float here (1 - u for a uniform u: at least 2^-24), so
 * the vector code's clamps for zero, negatives and subnormals are left out. */
static float cephes_logf(float x)
{
	static const float p[9] = {
		(float)7.0376836292E-2,	 (float)-1.1514610310E-1, (float)1.1676998740E-1,
		(float)-1.2420140846E-1, (float)1.4249322787E-1,  (float)-1.6668057665E-1,
		(float)2.0000714765E-1,	 (float)-2.4999993993E-1, (float)3.3333331174E-1,
	};
	uint32_t b;
	memcpy(&b, &x, 4);
	float e = (float)((int32_t)(b >> 23) - 0x7f) + 1.0f;
	b = (b & ~0x7f800000u) | 0x3f000000u; /* the mantissa, in [0.5, 1) */
	float m;
	memcpy(&m, &b, 4);
	int lo = m < (float)0.707106781186547524;
	float t = lo ? m : 0.0f;
	m = m - 1.0f;
	e = e - (lo ? 1.0f : 0.0f);
	m = m + t;
	float z = m * m;
	float y = p[0];
	for (int i = 1; i < 9; i++)
		y = fmaf(y, m, p[i]);
	y = y * m;
	y = fmaf(y, z, e * (float)-2.12194440e-4);
	y = fmaf(-z, 0.5f, y);
	return fmaf(e, 0.693359375f, m + y);
}

/* Cephes' sinf and cosf sharing the reduction by pi/4 (three-part
 * Cody-Waite); both polynomials evaluated, then picked and summed with +0
 * the way the vector code's masks do it. */
static void cephes_sincosf(float x, float *s, float *c)
{
	uint32_t b;
	memcpy(&b, &x, 4);
	uint32_t sign_sin = b & 0x80000000u;
	b &= 0x7fffffffu;
	memcpy(&x, &b, 4);
	int32_t j = (int32_t)(x * (float)1.27323954473516); /* 4/pi, truncated */
	j = (j + 1) & ~1;
	float y = (float)j;
	sign_sin ^= (uint32_t)(j & 4) << 29;
	int sin_poly = (j & 2) == 0;
	x = fmaf(y, -0.78515625f, x);
	x = fmaf(y, (float)-2.4187564849853515625e-4, x);
	x = fmaf(y, (float)-3.77489497744594108e-8, x);
	uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;

	float z = x * x;
	float yc = fmaf((float)2.443315711809948E-005, z, (float)-1.388731625493765E-003);
	yc = fmaf(yc, z, (float)4.166664568298827E-002);
	yc = yc * z;
	yc = fmaf(yc, z, -(z * 0.5f));
	yc = yc + 1.0f;
	float ys = fmaf((float)-1.9515295891E-4, z, (float)8.3321608736E-3);
	ys = fmaf(ys, z, (float)-1.6666654611E-1);
	ys = ys * z;
	ys = fmaf(ys, x, x);

	float s2 = sin_poly ? ys : 0.0f, s1 = sin_poly ? 0.0f : yc;
	ys = ys - s2;
	yc = yc - s1;
	float sv = s1 + s2, cv = yc + ys;
	memcpy(&b, &sv, 4);
	b ^= sign_sin;
	memcpy(s, &b, 4);
	memcpy(&b, &cv, 4);
	b ^= sign_cos;
	memcpy(c, &b, 4);
}

/* NormalFill16 over d[0..15] (uniforms in, normals out): d[j] and d[j + 8]
 * from u1 = 1 - d[j], u2 = d[j + 8].  The closing fma(v, std 1, mean 0) of
 * torch is v + 0. */
static void box_muller16_f32(float *d, torch_normal_kernel kernel)
{
	const float two_pi = (float)(2.0 * TORCH_PI);
	for (int j = 0; j < 8; j++) {
		float u1 = 1.0f - d[j], u2 = d[j + 8], r, s, c;
		if (kernel == TORCH_NORMAL_AVX2) {
			r = sqrtf(-2.0f * cephes_logf(u1));
			cephes_sincosf(two_pi * u2, &s, &c);
		} else {
			/* the scalar template: theta is a double product rounded once */
			r = sqrtf(-2.0f * logf(u1));
			float theta = (float)(2.0 * TORCH_PI * (double)u2);
			s = sinf(theta);
			c = cosf(theta);
		}
		d[j] = r * c + 0.0f;
		d[j + 8] = r * s + 0.0f;
	}
}

static void box_muller16_f64(double *d)
{
	for (int j = 0; j < 8; j++) {
		double u1 = 1.0 - d[j], u2 = d[j + 8];
		double r = sqrt(-2.0 * log(u1)), theta = 2.0 * TORCH_PI * u2;
		d[j] = r * cos(theta) + 0.0;
		d[j + 8] = r * sin(theta) + 0.0;
	}
}

/* normal_distribution<double>(0, 1): Box-Muller on two uniforms, one of the
 * pair cached. */
static double normal_f64(torch_rng *g)
{
	if (g->has_normal) {
		g->has_normal = 0;
		return g->normal + 0.0;
	}
	double u1 = uniform_f64(g), u2 = uniform_f64(g);
	double r = sqrt(-2.0 * log1p(-u2)), theta = 2.0 * TORCH_PI * u1;
	g->normal = r * sin(theta);
	g->has_normal = 1;
	return r * cos(theta) + 0.0;
}

void torch_rng_randn_f32(torch_rng *g, float *out, size_t n)
{
	if (n < 16) {
		for (size_t i = 0; i < n; i++)
			out[i] = (float)normal_f64(g);
		return;
	}
	torch_rng_rand_f32(g, out, n);
	for (size_t i = 0; i + 16 <= n; i += 16)
		box_muller16_f32(out + i, g->kernel);
	if (n % 16) {
		torch_rng_rand_f32(g, out + n - 16, 16);
		box_muller16_f32(out + n - 16, g->kernel);
	}
}

void torch_rng_randn_f64(torch_rng *g, double *out, size_t n)
{
	if (n < 16) {
		for (size_t i = 0; i < n; i++)
			out[i] = normal_f64(g);
		return;
	}
	torch_rng_rand_f64(g, out, n);
	for (size_t i = 0; i + 16 <= n; i += 16)
		box_muller16_f64(out + i);
	if (n % 16) {
		torch_rng_rand_f64(g, out + n - 16, 16);
		box_muller16_f64(out + n - 16);
	}
}

/* 16 normals in float, rounded to bfloat16 into out[0..15]. */
static void normal16_bf16(torch_rng *g, uint16_t *out)
{
	float buf[16];
	torch_rng_rand_f32(g, buf, 16);
	box_muller16_f32(buf, g->kernel);
	for (int j = 0; j < 16; j++)
		out[j] = bf16_from_f32(buf[j]);
}

void torch_rng_randn_bf16(torch_rng *g, uint16_t *out, size_t n)
{
	if (n < 16) {
		/* c10::BFloat16 is made from a float: the double rounds twice */
		for (size_t i = 0; i < n; i++)
			out[i] = bf16_from_f32((float)normal_f64(g));
		return;
	}
	for (size_t i = 0; i + 16 <= n; i += 16)
		normal16_bf16(g, out + i);
	if (n % 16)
		normal16_bf16(g, out + n - 16);
}

/* CPUGeneratorImplState's layout: the legacy THGenerator fields, then the
 * float cache; padding zero. */
enum {
	ST_SEED = 0,
	ST_LEFT = 8,
	ST_SEEDED = 12,
	ST_NEXT = 16,
	ST_WORDS = 24, /* 624 words widened to 64 bits */
	ST_NORMAL_Y = 5024,
	ST_NORMAL_VALID = 5040,
	ST_FLOAT_NORMAL = 5048,
	ST_FLOAT_VALID = 5052,
};

/* Whether m holds the words of mt19937(seed) before its first twist: torch
 * says next 0 there, 624 once a twist's words are used up. */
static int unused_seed_words(const torch_rng *g)
{
	mt19937 fresh;
	mt19937_init(&fresh, (uint32_t)g->seed);
	return memcmp(fresh.mt, g->mt.mt, sizeof fresh.mt) == 0;
}

void torch_rng_get_state(const torch_rng *g, uint8_t out[TORCH_RNG_STATE_BYTES])
{
	memset(out, 0, TORCH_RNG_STATE_BYTES);
	uint32_t next = g->mt.index;
	if (next == MT19937_N && unused_seed_words(g))
		next = 0;
	le_put64(out + ST_SEED, g->seed);
	le_put32(out + ST_LEFT, MT19937_N + 1 - g->mt.index); /* 1: the next draw twists */
	le_put32(out + ST_SEEDED, 1);
	le_put64(out + ST_NEXT, next);
	for (int i = 0; i < MT19937_N; i++)
		le_put64(out + ST_WORDS + 8 * i, g->mt.mt[i]);
	if (g->has_normal) {
		uint64_t b;
		memcpy(&b, &g->normal, 8);
		le_put64(out + ST_NORMAL_Y, b);
		le_put32(out + ST_NORMAL_VALID, 1);
	}
	if (g->has_float_normal) {
		uint32_t b;
		memcpy(&b, &g->float_normal, 4);
		le_put32(out + ST_FLOAT_NORMAL, b);
		out[ST_FLOAT_VALID] = 1;
	}
}

int torch_rng_set_state(torch_rng *g, const uint8_t *in, size_t n, titan_err *err)
{
	if (n != TORCH_RNG_STATE_BYTES)
		return err_set(err, "torch CPU generator state: %zu bytes, expected %d", n,
			       TORCH_RNG_STATE_BYTES);
	int32_t left = (int32_t)le_get32(in + ST_LEFT);
	uint64_t next = le_get64(in + ST_NEXT);
	/* mt19937_engine::is_valid(), then the positions its draws pass through */
	if (le_get32(in + ST_SEEDED) == 0 || left < 1 || left > MT19937_N || next > MT19937_N)
		return err_set(err, "torch CPU generator state: invalid engine (left %d, next %llu)",
			       left, (unsigned long long)next);
	if (left > 1 && (uint64_t)left + next != MT19937_N + 1)
		return err_set(err,
			       "torch CPU generator state: left %d with next %llu is no position "
			       "torch's engine reaches",
			       left, (unsigned long long)next);
	for (int i = 0; i < MT19937_N; i++)
		g->mt.mt[i] = (uint32_t)le_get64(in + ST_WORDS + 8 * i);
	g->mt.index = left == 1 ? MT19937_N : (uint32_t)next;
	g->seed = le_get64(in + ST_SEED);
	g->has_normal = le_get32(in + ST_NORMAL_VALID) != 0;
	uint64_t y = le_get64(in + ST_NORMAL_Y);
	memcpy(&g->normal, &y, 8);
	g->has_float_normal = in[ST_FLOAT_VALID] != 0;
	uint32_t f = le_get32(in + ST_FLOAT_NORMAL);
	memcpy(&g->float_normal, &f, 4);
	return 0;
}
