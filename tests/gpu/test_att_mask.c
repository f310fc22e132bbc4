/* The index arithmetic of the attention kernels' masks (lib/gpu/att_mask.h),
 * on the host: for every combination of positions, lengths, causal, sliding
 * window and chunk below, the keys each query sees and the queries that see
 * each key must be exactly the mask of the CPU backend's attention op, read off
 * the op itself (q = k = 0 makes every seen key's probability equal, v = the
 * identity writes each key's probability into its own column of out), and a
 * block of consecutive rows must cover its rows' ranges and stay inside the
 * tensors.  No GPU needed: this is what the kernels walk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "gpu/att_mask.h"

/* seen[qi * tk + kj] from the CPU op's probabilities (out (tq, tk)). */
static void cpu_mask(const gpu_att *a, unsigned char *seen)
{
	int64_t tq = a->tq, tk = a->tk;
	double *q = calloc((size_t)tq, sizeof *q), *k = calloc((size_t)tk, sizeof *k);
	double *v = calloc((size_t)(tk * tk), sizeof *v), *out = calloc((size_t)(tq * tk), sizeof *out);
	double *lse = calloc((size_t)tq, sizeof *lse);
	assert_true(q && k && v && out && lse);
	for (int64_t j = 0; j < tk; j++)
		v[j * tk + j] = 1;
	be_attn ba = {.b = 1, .tq = tq, .tk = tk, .h = 1, .hkv = 1, .hd = 1, .hdv = tk,
		      .causal = a->causal, .q_pos0 = a->q_pos0, .k_pos0 = a->k_pos0,
		      .window = a->window, .chunk = a->chunk};
	cpu_attention_fwd_f64(out, lse, q, k, v, &ba);
	for (int64_t i = 0; i < tq * tk; i++)
		seen[i] = out[i] > 0;
	free(q), free(k), free(v), free(out), free(lse);
}

/* Range [r0, r1) as a set of n flags: equal to want's row (stride 1) or
 * column (stride n_other)? */
static void same_set(const char *what, const gpu_att *a, int64_t row, int64_t r0, int64_t r1,
		     const unsigned char *want, int64_t n, int64_t stride)
{
	for (int64_t x = 0; x < n; x++) {
		int in = x >= r0 && x < r1;
		if (in != want[x * stride])
			fail_msg("%s of row %lld: %lld %s the range [%lld, %lld) but the CPU op %s it "
				 "(tq %lld tk %lld q@%lld k@%lld causal %d window %lld chunk %lld)",
				 what, (long long)row, (long long)x, in ? "in" : "outside",
				 (long long)r0, (long long)r1, want[x * stride] ? "sees" : "masks",
				 (long long)a->tq, (long long)a->tk, (long long)a->q_pos0,
				 (long long)a->k_pos0, a->causal, (long long)a->window,
				 (long long)a->chunk);
	}
}

/* Blocks of `rows` consecutive rows of n: their range is inside [0, n_other]
 * and holds every row's own (nonempty) range. */
static void blocks_cover(const gpu_att *a, int queries, int64_t rows)
{
	int64_t n = queries ? a->tq : a->tk, n_other = queries ? a->tk : a->tq;
	for (int64_t r0 = 0; r0 < n; r0 += rows) {
		int64_t r1 = r0 + rows < n ? r0 + rows : n, b0, b1;
		if (queries)
			att_block_keys(a, r0, r1, &b0, &b1);
		else
			att_block_queries(a, r0, r1, &b0, &b1);
		assert_true(b0 >= 0 && b1 >= b0);
		if (b1 > b0)
			assert_true(b1 <= n_other);
		for (int64_t r = r0; r < r1; r++) {
			int64_t x0, x1;
			if (queries)
				att_keys(a, r, &x0, &x1);
			else
				att_queries(a, r, &x0, &x1);
			if (x1 > x0)
				assert_true(x0 >= b0 && x1 <= b1);
		}
	}
}

static void ranges_are_the_cpu_ops_mask(void **state)
{
	(void)state;
	static const int64_t pos[] = {0, 5, 40}, len[] = {1, 9, 37};
	static const int64_t windows[] = {0, 1, 4, 40}, chunks[] = {0, 1, 8, 32};
	int n = 3 * 3 * 3 * 3 * 2 * 4 * 4;
	for (int i = 0; i < n; i++) { /* every combination, i's digits in mixed radix */
		gpu_att a = {.b = 1, .tq = len[i % 3], .tk = len[i / 3 % 3], .h = 1, .hkv = 1,
			     .hd = 1, .q_pos0 = pos[i / 9 % 3], .k_pos0 = pos[i / 27 % 3],
			     .causal = i / 81 % 2, .window = windows[i / 162 % 4],
			     .chunk = chunks[i / 648 % 4]};
		unsigned char *seen = malloc((size_t)(a.tq * a.tk));
		assert_non_null(seen);
		cpu_mask(&a, seen);
		for (int64_t qi = 0; qi < a.tq; qi++) {
			int64_t j0, j1;
			att_keys(&a, qi, &j0, &j1);
			same_set("keys", &a, qi, j0, j1, seen + qi * a.tk, a.tk, 1);
		}
		for (int64_t kj = 0; kj < a.tk; kj++) {
			int64_t i0, i1;
			att_queries(&a, kj, &i0, &i1);
			same_set("queries", &a, kj, i0, i1, seen + kj, a.tq, a.tk);
		}
		for (int64_t rows = 1; rows <= 16; rows *= 2) {
			blocks_cover(&a, 1, rows);
			blocks_cover(&a, 0, rows);
		}
		free(seen);
	}
	print_message("%d masks match the CPU op's\n", n);
}

/* GPT-OSS's window of 128: query at position p sees keys p-127 .. p. */
static void a_window_of_128_is_the_last_128_keys(void **state)
{
	(void)state;
	gpu_att a = {.b = 1, .tq = 1000, .tk = 1000, .h = 1, .hkv = 1, .hd = 64, .causal = 1,
		     .window = 128};
	int64_t j0, j1;
	att_keys(&a, 500, &j0, &j1);
	assert_int_equal(j0, 373);
	assert_int_equal(j1, 501);
	att_keys(&a, 100, &j0, &j1);
	assert_int_equal(j0, 0);
	assert_int_equal(j1, 101);
	att_queries(&a, 373, &j0, &j1);
	assert_int_equal(j0, 373);
	assert_int_equal(j1, 501);
	a.window = 0, a.chunk = 128; /* Llama 4: chunk 3 is positions 384 .. 511 */
	att_keys(&a, 500, &j0, &j1);
	assert_int_equal(j0, 384);
	assert_int_equal(j1, 501);
	att_queries(&a, 400, &j0, &j1);
	assert_int_equal(j0, 400);
	assert_int_equal(j1, 512);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ranges_are_the_cpu_ops_mask),
		cmocka_unit_test(a_window_of_128_is_the_last_128_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
