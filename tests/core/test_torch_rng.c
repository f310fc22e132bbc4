/* Tests of core/torch_rng against torch's own draws: the scripts of
 * tests/core/torch_rng/ (scripts/torch_rng_golden.py) replayed line by line on
 * one generator, each result written as the script writes torch's and compared
 * as text (seeds 0, 1, 42, 2^32 + 7 and a 64-bit one; sizes 1 to 4099; randint
 * ranges either side of 2^28 and 2^32; the Flux loader's and step's draws
 * interleaved; the scalar path's cached normal; the state bytes), at torch's
 * AVX2 normal kernel and at its DEFAULT one; and the state bytes resuming a
 * generator mid-sequence.  Assumes a little-endian host, as titan does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "core/torch_rng.h"

#define SHOW 8 /* elements a line shows before its sha256 */

typedef struct line_buf {
	char *s;
	size_t len, cap;
} line_buf;

static void put(line_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char tmp[128];
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	assert_true(k >= 0 && (size_t)k < sizeof tmp);
	if (b->len + (size_t)k + 1 > b->cap) {
		b->cap = 2 * (b->len + (size_t)k + 1);
		b->s = realloc(b->s, b->cap);
		assert_non_null(b->s);
	}
	memcpy(b->s + b->len, tmp, (size_t)k + 1);
	b->len += (size_t)k;
}

static void put_sha(line_buf *b, const void *p, size_t n)
{
	uint8_t d[32];
	char hex[65];
	titan_err err;
	assert_int_equal(sha256(p, n, d, &err), 0);
	sha256_hex(d, hex);
	put(b, " sha256 %s", hex);
}

/* Element i of n elements of width w (1 int64, else the bits' hex digits). */
static void put_values(line_buf *b, const void *p, size_t n, int hex_digits)
{
	put(b, " =");
	for (size_t i = 0; i < n && i < SHOW; i++) {
		if (hex_digits == 0)
			put(b, " %" PRId64, ((const int64_t *)p)[i]);
		else if (hex_digits == 4)
			put(b, " %04x", ((const uint16_t *)p)[i]);
		else if (hex_digits == 8)
			put(b, " %08" PRIx32, ((const uint32_t *)p)[i]);
		else
			put(b, " %016" PRIx64, ((const uint64_t *)p)[i]);
	}
	if (n > SHOW)
		put_sha(b, p, n * (hex_digits ? (size_t)hex_digits / 2 : 8));
}

/* One float draw: op "rand" or "randn", dt "f32", "f64" or "bf16". */
static void float_draw(torch_rng *g, const char *op, const char *dt, size_t n, line_buf *b)
{
	int randn = strcmp(op, "randn") == 0;
	void *v = malloc(n * 8);
	assert_non_null(v);
	int digits;
	if (strcmp(dt, "f32") == 0) {
		(randn ? torch_rng_randn_f32 : torch_rng_rand_f32)(g, v, n);
		digits = 8;
	} else if (strcmp(dt, "f64") == 0) {
		(randn ? torch_rng_randn_f64 : torch_rng_rand_f64)(g, v, n);
		digits = 16;
	} else {
		assert_string_equal(dt, "bf16");
		(randn ? torch_rng_randn_bf16 : torch_rng_rand_bf16)(g, v, n);
		digits = 4;
	}
	put(b, "%s %s %zu", op, dt, n);
	put_values(b, v, n, digits);
	free(v);
}

/* The state line, then g continues from its own bytes set into a new
 * generator: what a checkpoint's resume does. */
static void state_line(torch_rng *g, line_buf *b)
{
	static uint8_t st[TORCH_RNG_STATE_BYTES];
	torch_rng_get_state(g, st);
	put(b, "state");
	put_sha(b, st, sizeof st);
	torch_rng r;
	memset(&r, 0xa5, sizeof r);
	r.kernel = g->kernel;
	titan_err err;
	assert_int_equal(torch_rng_set_state(&r, st, sizeof st, &err), 0);
	*g = r;
}

/* Replays one golden line on g into b (the line as torch's script wrote it). */
static void replay(torch_rng *g, char *line, line_buf *b)
{
	char *save, *op = strtok_r(line, " ", &save);
	assert_non_null(op);
	if (strcmp(op, "seed") == 0) {
		const char *s = strtok_r(NULL, " ", &save), *k = strtok_r(NULL, " ", &save);
		assert_true(s && k);
		uint64_t seed = strtoull(s, NULL, 10);
		torch_rng_seed(g, seed, strcmp(k, "default") == 0 ? TORCH_NORMAL_DEFAULT
								  : TORCH_NORMAL_AVX2);
		put(b, "seed %" PRIu64 " %s", seed, k);
	} else if (strcmp(op, "int64") == 0) {
		size_t n = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
		int64_t *v = malloc(n * sizeof *v);
		assert_non_null(v);
		for (size_t i = 0; i < n; i++)
			v[i] = torch_rng_int64(g);
		put(b, "int64 %zu", n);
		put_values(b, v, n, 0);
		free(v);
	} else if (strcmp(op, "randint") == 0) {
		int64_t lo = strtoll(strtok_r(NULL, " ", &save), NULL, 10);
		int64_t hi = strtoll(strtok_r(NULL, " ", &save), NULL, 10);
		size_t n = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
		int64_t *v = malloc(n * sizeof *v);
		assert_non_null(v);
		titan_err err;
		assert_int_equal(torch_rng_randint(g, lo, hi, v, n, &err), 0);
		put(b, "randint %" PRId64 " %" PRId64 " %zu", lo, hi, n);
		put_values(b, v, n, 0);
		free(v);
	} else if (strcmp(op, "rand") == 0 || strcmp(op, "randn") == 0) {
		const char *dt = strtok_r(NULL, " ", &save);
		size_t n = strtoull(strtok_r(NULL, " ", &save), NULL, 10);
		float_draw(g, op, dt, n, b);
	} else {
		assert_string_equal(op, "state");
		state_line(g, b);
	}
}

static void replay_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		fail_msg("%s: cannot open (run from the repository root)", path);
	char line[8192], copy[8192];
	line_buf b = {0};
	torch_rng g;
	torch_rng_seed(&g, 0, TORCH_NORMAL_AVX2);
	int lines = 0, bad = 0;
	for (int no = 1; fgets(line, sizeof line, f); no++) {
		line[strcspn(line, "\n")] = 0;
		if (line[0] == '#' || line[0] == 0)
			continue;
		memcpy(copy, line, sizeof line);
		b.len = 0;
		put(&b, "%s", "");
		replay(&g, copy, &b);
		lines++;
		if (strcmp(b.s, line) != 0 && bad++ < 3)
			print_error("%s:%d:\n  torch %s\n  titan %s\n", path, no, line, b.s);
	}
	fclose(f);
	free(b.s);
	printf("# %s: %d of %d lines equal torch's\n", path, lines - bad, lines);
	assert_int_equal(bad, 0);
	assert_true(lines > 0);
}

static void draws_equal_torch_at_its_avx2_kernel(void **state)
{
	(void)state;
	replay_file("tests/core/torch_rng/ops.txt");
}

static void draws_equal_torch_at_its_default_kernel(void **state)
{
	(void)state;
	replay_file("tests/core/torch_rng/ops_default.txt");
}

/* n draws of everything, into out (n floats of each kind). */
static void mixed_draws(torch_rng *g, float *out, int rounds)
{
	for (int r = 0; r < rounds; r++) {
		int64_t k;
		assert_int_equal(torch_rng_randint(g, 0, 300 + r, &k, 1, NULL), 0);
		out[0] = (float)k;
		torch_rng_rand_f32(g, out + 1, 2);
		torch_rng_randn_f32(g, out + 3, 1 + (size_t)r % 20); /* both paths, the cache */
		out += 23;
	}
}

static void state_bytes_resume_a_generator_mid_sequence(void **state)
{
	(void)state;
	enum { ROUNDS = 90 }; /* past a twist of the 624 words */
	static float a[ROUNDS * 23], b[ROUNDS * 23];
	static uint8_t st[TORCH_RNG_STATE_BYTES], st2[TORCH_RNG_STATE_BYTES];
	torch_rng g, h;
	torch_rng_seed(&g, 2024, TORCH_NORMAL_AVX2);
	mixed_draws(&g, a, 7);
	float one;
	torch_rng_randn_f32(&g, &one, 1); /* leaves a cached normal */
	assert_true(g.has_normal);
	torch_rng_get_state(&g, st);
	memset(&h, 0, sizeof h);
	h.kernel = TORCH_NORMAL_AVX2;
	titan_err err;
	assert_int_equal(torch_rng_set_state(&h, st, sizeof st, &err), 0);
	torch_rng_get_state(&h, st2);
	assert_memory_equal(st, st2, sizeof st);
	memset(a, 0, sizeof a);
	mixed_draws(&g, a, ROUNDS);
	mixed_draws(&h, b, ROUNDS);
	assert_memory_equal(a, b, sizeof a);
	assert_memory_equal(&g.mt, &h.mt, sizeof g.mt);
}

static void bad_states_and_ranges_are_refused(void **state)
{
	(void)state;
	static uint8_t st[TORCH_RNG_STATE_BYTES];
	torch_rng g;
	titan_err err;
	torch_rng_seed(&g, 5, TORCH_NORMAL_AVX2);
	torch_rng_get_state(&g, st);
	assert_int_equal(torch_rng_set_state(&g, st, sizeof st - 1, &err), -1);
	assert_non_null(strstr(err.msg, "5055 bytes"));
	st[8] = 0; /* left 0 */
	assert_int_equal(torch_rng_set_state(&g, st, sizeof st, &err), -1);
	assert_non_null(strstr(err.msg, "invalid engine"));
	st[8] = 7; /* left 7 with next 0 */
	assert_int_equal(torch_rng_set_state(&g, st, sizeof st, &err), -1);
	assert_non_null(strstr(err.msg, "no position"));
	int64_t v = 99;
	uint32_t before = g.mt.index;
	assert_int_equal(torch_rng_randint(&g, 3, 3, &v, 1, &err), -1);
	assert_non_null(strstr(err.msg, "low 3 must be below high 3"));
	assert_int_equal(v, 99);
	assert_int_equal(g.mt.index, before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(draws_equal_torch_at_its_avx2_kernel),
		cmocka_unit_test(draws_equal_torch_at_its_default_kernel),
		cmocka_unit_test(state_bytes_resume_a_generator_mid_sequence),
		cmocka_unit_test(bad_states_and_ranges_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
