/* Unit tests of lib/core/init_fill: its weights are, bit for bit, those of
 * the plain definition below (one Box-Muller draw at a time through libm's
 * log and cos, as scripts/model_golden.py's titan_init replicates), at every
 * instruction-set level this processor has, with and without a cut, and
 * where the cut falls exactly on a drawn value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_isa.h"
#include "core/init_fill.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static uint64_t chunk_stream(uint64_t seed, uint64_t tensor, size_t c)
{
	uint64_t s = seed ^ (tensor * 0xD1B54A32D192ED03ull) ^ (c * 0x8CB92BA72F3D8DD7ull);
	splitmix64(&s);
	return s;
}

/* The definition's next normal candidate from stream s: std * z, one
 * Box-Muller draw through libm. */
static double next_candidate(uint64_t *s, double std)
{
	double u1 = uniform01(s), u2 = uniform01(s);
	return std * (sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* The k-th normal candidate of chunk c. */
static double candidate(uint64_t seed, uint64_t tensor, size_t c, int k, double std)
{
	uint64_t s = chunk_stream(seed, tensor, c);
	double x = 0;
	for (int i = 0; i <= k; i++)
		x = next_candidate(&s, std);
	return x;
}

/* The definition: whole chunks of [first, end), one draw at a time. */
static void reference(float *dst, size_t n, size_t first, size_t end, double std, double lo,
		      double hi, int uniform, uint64_t seed, uint64_t tensor)
{
	for (size_t c = first / INIT_FILL_CHUNK; c * INIT_FILL_CHUNK < end; c++) {
		uint64_t s = chunk_stream(seed, tensor, c);
		size_t i1 = (c + 1) * INIT_FILL_CHUNK < n ? (c + 1) * INIT_FILL_CHUNK : n;
		for (size_t i = c * INIT_FILL_CHUNK; i < i1; i++) {
			double x;
			if (uniform)
				x = std * (2 * uniform01(&s) - 1);
			else
				do
					x = next_candidate(&s, std);
				while (lo < hi && (x < lo || x > hi));
			dst[i] = (float)x;
		}
	}
}

typedef struct fill_case {
	const char *name;
	size_t n, first, end;
	double std, lo, hi;
	int uniform;
	uint64_t seed, tensor;
} fill_case;

/* init_fill equals the definition on every element it writes, at each level. */
static void check_case(const fill_case *fc)
{
	size_t bytes = fc->n * sizeof(float);
	float *want = malloc(bytes), *got = malloc(bytes);
	assert_non_null(want);
	assert_non_null(got);
	memset(want, 0xff, bytes);
	reference(want, fc->n, fc->first, fc->end, fc->std, fc->lo, fc->hi, fc->uniform, fc->seed,
		  fc->tensor);
	cpu_level was = cpu_isa_force(CPU_TOP);
	for (int l = CPU_BASELINE; l <= (int)cpu_isa_native(); l++) {
		cpu_isa_force((cpu_level)l);
		memset(got, 0xff, bytes);
		init_fill(got, fc->n, fc->first, fc->end, fc->std, fc->lo, fc->hi, fc->uniform,
			  fc->seed, fc->tensor);
		size_t bad = 0, at = 0;
		for (size_t i = 0; i < fc->n; i++)
			if (memcmp(&want[i], &got[i], sizeof(float)) != 0 && bad++ == 0)
				at = i;
		if (bad != 0)
			fail_msg("%s at %s: %zu of %zu elements differ, the first %zu (%a, want %a)",
				 fc->name, cpu_level_name((cpu_level)l), bad, fc->n, at, got[at],
				 want[at]);
	}
	cpu_isa_force(was);
	free(want);
	free(got);
}

static void normal_draws_are_the_definitions(void **state)
{
	(void)state;
	size_t before = init_fill_libm_draws();
	fill_case fc = {"normal", 3 * INIT_FILL_CHUNK + 12345, 0, 3 * INIT_FILL_CHUNK + 12345, 1.0,
			0, 0, 0, 7, 3};
	check_case(&fc);
	fill_case small = {"normal std 0.02", 100000, 0, 100000, 0.02, 0, 0, 0, 1234, 0};
	check_case(&small);
	/* Some draws were too close to call, and went to libm (about 1 in 40,000;
	 * at least one is all but certain in 1.1 M draws); few did. */
	size_t levels = (size_t)cpu_isa_native(), draws = levels * (fc.n + small.n);
	size_t libm = init_fill_libm_draws() - before;
	assert_true(libm > 0);
	assert_true(libm < draws / 1000);
}

static void cut_draws_are_the_definitions(void **state)
{
	(void)state;
	/* A tight cut rejects a third of the candidates; a cut at the usual
	 * +-2 (never met at std 0.02), and a part of a tensor. */
	fill_case tight = {"cut at -0.5, 1 std", 2 * INIT_FILL_CHUNK + 99, 0, 2 * INIT_FILL_CHUNK + 99,
			   0.02, -0.01, 0.02, 0, 42, 11};
	check_case(&tight);
	fill_case part = {"cut at 2, part", 5 * INIT_FILL_CHUNK, INIT_FILL_CHUNK + 777,
			  3 * INIT_FILL_CHUNK - 5, 0.02, -2.0, 2.0, 0, 9, 4};
	check_case(&part);
}

/* A cut exactly at a value the definition draws: the fast value lies within
 * the band of it, so libm's decides (kept, as x > hi is false). */
static void cut_on_a_drawn_value(void **state)
{
	(void)state;
	double std = 0.5;
	double x0 = candidate(5, 6, 0, 0, std), x1 = candidate(5, 6, 0, 1, std);
	double lo = fmin(x0, x1), hi = fmax(x0, x1);
	size_t before = init_fill_libm_draws();
	fill_case fc = {"cut on drawn values", 1000, 0, 1000, std, lo, hi, 0, 5, 6};
	check_case(&fc);
	assert_true(init_fill_libm_draws() - before >= 2 * (size_t)cpu_isa_native());
	/* lo and hi are the first two elements */
	float got[1000];
	init_fill(got, 1000, 0, 1000, std, lo, hi, 0, 5, 6);
	assert_true(got[0] == (float)x0);
	assert_true(got[1] == (float)x1);
}

static void uniform_draws_are_the_definitions(void **state)
{
	(void)state;
	fill_case fc = {"uniform", 2 * INIT_FILL_CHUNK + 3, 5, 2 * INIT_FILL_CHUNK + 3, 0.125, 0, 0,
			1, 77, 2};
	check_case(&fc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(normal_draws_are_the_definitions),
		cmocka_unit_test(cut_draws_are_the_definitions),
		cmocka_unit_test(cut_on_a_drawn_value),
		cmocka_unit_test(uniform_draws_are_the_definitions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
