/* The streaming kernels (CPU_STREAM in backend/cpu_kernels.h: AdamW's span
 * update, the clip's sum of squares, the norms' and RoPE's rows, the softmax
 * row, SwiGLU and the elementwise spans, the bf16 conversions, im2col's
 * rows) run without the sanitizers' checks of every access and check their
 * arrays once on entry.  Under ASan that check must catch what per-access
 * instrumentation caught: an array one element short (each kernel in turn,
 * reached through the op that calls it), and an array already freed, each in
 * a child process whose report is read back.  In-bounds calls stay silent.
 * In a build without ASan there is nothing to catch: those tests skip.  (The
 * softmax row is reached only inside attention, whose scratch it reads: the
 * in-bounds runs of the attention tests cover it.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "../support/testutil.h"

#define N 1000
#define HEADS 5
#define HD 8

static const cpu_adamw_consts consts = {.decay = 0.999, .omb1 = 0.1, .b2 = 0.999,
					.omb2 = 0.001, .step = 1e-3, .sbc2 = 1, .eps = 1e-8,
					.clip = 1};

static volatile double sink; /* keeps the kernels' results */

/* n - short_by floats (or bf16 zeros below): short_by elements fewer than the
 * kernel is told, so that its last one lies past the end */
static float *floats(int64_t n, int short_by, uint32_t seed)
{
	return test_spread(n - short_by, seed);
}

static uint16_t *bf16s(int64_t n, int short_by)
{
	uint16_t *v = calloc((size_t)(n - short_by), sizeof *v);
	assert_non_null(v);
	return v;
}

/* Each kernel alone, through the op that calls it, with one of its arrays
 * `s` elements short (0 or 1); the other arrays are whole. */
static void k_adamw(int s)
{
	float *p = floats(N, 0, 1), *m = floats(N, 0, 2), *v = floats(N, 0, 3);
	float *g = floats(N, s, 4);
	cpu_adamw_span_f32(p, g, m, v, N, &consts);
	sink = cpu_sumsq_span_f32(p, N) + cpu_sumsq_span_f32(v, N);
	free(p), free(g), free(m), free(v);
}

static void k_rmsnorm_fwd(int s)
{
	float *y = floats(N, 0, 1), *w = floats(N, 0, 2), *x = floats(N, s, 3);
	sink = cpu_rmsnorm_fwd_row_f32(y, x, w, N, 1e-6f);
	free(y), free(w), free(x);
}

static void k_rmsnorm_bwd(int s)
{
	float *dx = floats(N, 0, 1), *dy = floats(N, 0, 2), *w = floats(N, 0, 3);
	float *x = floats(N, s, 4);
	cpu_rmsnorm_bwd_row_f32(dx, dy, x, w, 0.5f, N);
	free(dx), free(dy), free(w), free(x);
}

static void k_rope(int s)
{
	float *c = floats(HD, 0, 1), *x = floats(HEADS * HD, s, 2);
	cpu_rope_row_f32(x, c, HEADS, HD, BE_ROPE_HALF, 1);
	cpu_rope_row_f32(x, c, HEADS, HD, BE_ROPE_INTERLEAVED, 0);
	free(c), free(x);
}

static void k_swiglu_fwd(int s)
{
	float *y = floats(N, 0, 1), *a = floats(N, 0, 2), *g = floats(N, s, 3);
	cpu_swiglu_fwd_f32(y, a, g, N);
	free(y), free(a), free(g);
}

static void k_swiglu_bwd(int s)
{
	float *da = floats(N, 0, 1), *dg = floats(N, 0, 2), *dy = floats(N, 0, 3);
	float *a = floats(N, 0, 4), *g = floats(N, s, 5);
	cpu_swiglu_bwd_f32(da, dg, dy, a, g, N);
	free(da), free(dg), free(dy), free(a), free(g);
}

static void k_add(int s)
{
	float *y = floats(N, 0, 1), *a = floats(N, 0, 2), *b = floats(N, s, 3);
	cpu_add_f32(y, a, b, N);
	free(y), free(a), free(b);
}

static void k_axpy(int s)
{
	float *y = floats(N, 0, 1), *x = floats(N, s, 2);
	cpu_axpy_f32(y, 0.5f, x, N);
	free(y), free(x);
}

static void k_lerp(int s)
{
	float *x = floats(N, 0, 1), *end = floats(N, s, 2);
	cpu_lerp_f32(x, end, 0.25f, N);
	cpu_lerp_f32(x, end, 0.75f, N);
	free(x), free(end);
}

static void k_scale(int s)
{
	float *x = floats(N, s, 1);
	cpu_scale_f32(x, 2.0f, N);
	free(x);
}

static void k_bf16_store(int s)
{
	float *f = floats(N, 0, 1);
	uint16_t *h = bf16s(N, s);
	cpu_bf16_convert(h, BE_BF16, f, BE_F32, N);
	free(f), free(h);
}

static void k_bf16_load(int s)
{
	float *f = floats(N, 0, 1);
	uint16_t *h = bf16s(N, s);
	cpu_bf16_convert(f, BE_F32, h, BE_BF16, N);
	free(f), free(h);
}

static void k_bf16_scale(int s)
{
	uint16_t *h = bf16s(N, s);
	cpu_bf16_scale(h, 0.5f, N);
	free(h);
}

static void k_bf16_swiglu_fwd(int s)
{
	uint16_t *y = bf16s(N, 0), *a = bf16s(N, 0), *g = bf16s(N, s);
	cpu_bf16_swiglu_fwd(y, a, g, N);
	free(y), free(a), free(g);
}

static void k_bf16_swiglu_bwd(int s)
{
	uint16_t *da = bf16s(N, 0), *dg = bf16s(N, 0), *dy = bf16s(N, 0), *a = bf16s(N, 0);
	uint16_t *g = bf16s(N, s);
	cpu_bf16_swiglu_bwd(da, dg, dy, a, g, N);
	free(da), free(dg), free(dy), free(a), free(g);
}

/* one image of 2 channels, 5 x 6, a 3 x 3 kernel padded by 1: 30 columns */
static void k_im2col(int s)
{
	const int64_t pad[4] = {1, 1, 1, 1};
	float *cols = floats(2 * 9 * 30, 0, 1), *x = floats(2 * 5 * 6, s, 2);
	cpu_im2col_f32(cols, x, 1, 2, 5, 6, 3, 1, pad, 0, 30);
	free(cols), free(x);
}

static void (*const kernels[])(int) = {
	k_adamw, k_rmsnorm_fwd, k_rmsnorm_bwd, k_rope, k_swiglu_fwd, k_swiglu_bwd,
	k_add, k_axpy, k_lerp, k_scale, k_bf16_store, k_bf16_load, k_bf16_scale,
	k_bf16_swiglu_fwd, k_bf16_swiglu_bwd, k_im2col,
};
#define N_KERNELS (sizeof kernels / sizeof kernels[0])

/* What a child does: every kernel in bounds, kernel k with an array one
 * element short, or the sum of squares of a freed array. */
enum misuse { IN_BOUNDS, SHORT_ARRAY, FREED_SUMSQ };

static void misuse_kernel(enum misuse how, size_t k)
{
	if (how == FREED_SUMSQ) {
		float *volatile dead = test_spread(N, 4); /* read after the free on purpose */
		free(dead);
		sink = cpu_sumsq_span_f32(dead, N);
		return;
	}
	if (how == SHORT_ARRAY) {
		kernels[k](1);
		return;
	}
	for (size_t i = 0; i < N_KERNELS; i++)
		kernels[i](0);
}

struct misuse_args {
	enum misuse how;
	size_t k;
};

static void misuse_child(void *arg)
{
	const struct misuse_args *m = arg;
	misuse_kernel(m->how, m->k);
}

/* Runs misuse_kernel(how, k) in a child; its exit status and the start of
 * what it wrote to standard error. */
static int run_child(enum misuse how, size_t k, char *err, size_t cap)
{
	struct misuse_args m = {how, k};
	return test_child_stderr(misuse_child, &m, err, cap);
}

static void expect_report(enum misuse how, size_t k, const char *kind)
{
#if defined(__SANITIZE_ADDRESS__)
	static char err[1 << 16];
	int rc = run_child(how, k, err, sizeof err);
	if (how == IN_BOUNDS) {
		assert_int_equal(rc, 0);
		assert_null(strstr(err, "AddressSanitizer"));
		return;
	}
	if (rc == 0 || strstr(err, kind) == NULL || strstr(err, "cpu_san_span") == NULL)
		fail_msg("kernel %zu: expected an ASan report of %s from cpu_san_span, exit %d: "
			 "%.300s", k, kind, rc, err);
#else
	(void)how;
	(void)k;
	(void)kind;
	(void)run_child;
	skip();
#endif
}

static void test_in_bounds_is_silent(void **state)
{
	(void)state;
	expect_report(IN_BOUNDS, 0, NULL);
}

static void test_short_array_caught(void **state)
{
	(void)state;
	for (size_t k = 0; k < N_KERNELS; k++)
		expect_report(SHORT_ARRAY, k, "heap-buffer-overflow");
}

static void test_freed_array_caught(void **state)
{
	(void)state;
	expect_report(FREED_SUMSQ, 0, "heap-use-after-free");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_bounds_is_silent),
		cmocka_unit_test(test_short_array_caught),
		cmocka_unit_test(test_freed_array_caught),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
