/* The index arithmetic of the attention kernels' masks (lib/gpu/att_mask.h),
 * on the host: for every combination of positions, lengths, causal, sliding
 * window, chunk and documents below, the keys each query sees and the queries
 * that see each key must be exactly the mask of the CPU backend's attention
 * op, read off
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

/* seen[qi * tk + kj] from the CPU op's probabilities (out (tq, tk)), for
 * batch row bi of a's documents. */
static void cpu_mask(const gpu_att *a, int64_t bi, unsigned char *seen)
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
		      .window = a->window, .chunk = a->chunk,
		      .doc = a->doc ? a->doc + bi * a->doc_t : NULL, .doc_t = a->doc_t};
	cpu_attention_fwd_f64(out, lse, q, k, v, &ba);
	for (int64_t i = 0; i < tq * tk; i++)
		seen[i] = out[i] > 0;
	free(q), free(k), free(v), free(out), free(lse);
}

/* Range [r0, r1) as a set of n flags: equal to want's row (stride 1) or
 * column (stride n_other)? */
static void same_set(const char *what, const gpu_att *a, int docs, int64_t row, int64_t r0,
		     int64_t r1, const unsigned char *want, int64_t n, int64_t stride)
{
	for (int64_t x = 0; x < n; x++) {
		int in = x >= r0 && x < r1;
		if (in != want[x * stride])
			fail_msg("%s of row %lld: %lld %s the range [%lld, %lld) but the CPU op %s it "
				 "(tq %lld tk %lld q@%lld k@%lld causal %d window %lld chunk %lld "
				 "documents %d)",
				 what, (long long)row, (long long)x, in ? "in" : "outside",
				 (long long)r0, (long long)r1, want[x * stride] ? "sees" : "masks",
				 (long long)a->tq, (long long)a->tk, (long long)a->q_pos0,
				 (long long)a->k_pos0, a->causal, (long long)a->window,
				 (long long)a->chunk, docs);
	}
}

/* Blocks of `rows` consecutive rows of n (of batch row bi): their range is
 * inside [0, n_other] and holds every row's own (nonempty) range. */
static void blocks_cover(const gpu_att *a, int64_t bi, int queries, int64_t rows)
{
	int64_t n = queries ? a->tq : a->tk, n_other = queries ? a->tk : a->tq;
	for (int64_t r0 = 0; r0 < n; r0 += rows) {
		int64_t r1 = r0 + rows < n ? r0 + rows : n, b0, b1;
		if (queries)
			att_block_keys(a, bi, r0, r1, &b0, &b1);
		else
			att_block_queries(a, bi, r0, r1, &b0, &b1);
		assert_true(b0 >= 0 && b1 >= b0);
		if (b1 > b0)
			assert_true(b1 <= n_other);
		for (int64_t r = r0; r < r1; r++) {
			int64_t x0, x1;
			if (queries)
				att_keys(a, bi, r, &x0, &x1);
			else
				att_queries(a, bi, r, &x0, &x1);
			if (x1 > x0)
				assert_true(x0 >= b0 && x1 <= b1);
		}
	}
}

/* Document layouts over positions 0 .. DOC_T-1 (past every position below),
 * as batch row 1 of two (row 0 is another layout: the row's offset must be
 * taken): 1 none (one document), 2 several (one of a single position at 3,
 * one starting at 41, just past a block's first query at 40), 3 every
 * position its own document. */
#define DOC_T 80
static void doc_layout(int32_t *doc, int layout)
{
	static const int32_t starts[] = {0, 3, 4, 20, 41, 45, 60};
	for (int64_t p = 0; p < DOC_T; p++) {
		doc[p] = (int32_t)(p / 10 * 10); /* row 0: documents of 10 */
		int32_t d = 0;
		for (size_t s = 0; s < sizeof starts / sizeof *starts; s++)
			d = starts[s] <= p ? starts[s] : d;
		doc[DOC_T + p] = layout == 1 ? 0 : layout == 2 ? d : (int32_t)p;
	}
}

static void ranges_are_the_cpu_ops_mask(void **state)
{
	(void)state;
	static const int64_t pos[] = {0, 5, 40}, len[] = {1, 9, 37};
	static const int64_t windows[] = {0, 1, 4, 40}, chunks[] = {0, 1, 8, 32};
	int32_t docs[4][2 * DOC_T];
	for (int l = 1; l < 4; l++)
		doc_layout(docs[l], l);
	int n = 3 * 3 * 3 * 3 * 2 * 4 * 4 * 4;
	for (int i = 0; i < n; i++) { /* every combination, i's digits in mixed radix */
		int layout = i / 2592 % 4;
		gpu_att a = {.b = layout ? 2 : 1, .tq = len[i % 3], .tk = len[i / 3 % 3], .h = 1,
			     .hkv = 1, .hd = 1, .q_pos0 = pos[i / 9 % 3], .k_pos0 = pos[i / 27 % 3],
			     .causal = i / 81 % 2, .window = windows[i / 162 % 4],
			     .chunk = chunks[i / 648 % 4], .doc = layout ? docs[layout] : NULL,
			     .doc_t = DOC_T};
		int64_t bi = layout ? 1 : 0;
		unsigned char *seen = malloc((size_t)(a.tq * a.tk));
		assert_non_null(seen);
		cpu_mask(&a, bi, seen);
		for (int64_t qi = 0; qi < a.tq; qi++) {
			int64_t j0, j1;
			att_keys(&a, bi, qi, &j0, &j1);
			same_set("keys", &a, layout, qi, j0, j1, seen + qi * a.tk, a.tk, 1);
		}
		for (int64_t kj = 0; kj < a.tk; kj++) {
			int64_t i0, i1;
			att_queries(&a, bi, kj, &i0, &i1);
			same_set("queries", &a, layout, kj, i0, i1, seen + kj, a.tq, a.tk);
		}
		for (int64_t rows = 1; rows <= 16; rows *= 2) {
			blocks_cover(&a, bi, 1, rows);
			blocks_cover(&a, bi, 0, rows);
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
	att_keys(&a, 0, 500, &j0, &j1);
	assert_int_equal(j0, 373);
	assert_int_equal(j1, 501);
	att_keys(&a, 0, 100, &j0, &j1);
	assert_int_equal(j0, 0);
	assert_int_equal(j1, 101);
	att_queries(&a, 0, 373, &j0, &j1);
	assert_int_equal(j0, 373);
	assert_int_equal(j1, 501);
	a.window = 0, a.chunk = 128; /* Llama 4: chunk 3 is positions 384 .. 511 */
	att_keys(&a, 0, 500, &j0, &j1);
	assert_int_equal(j0, 384);
	assert_int_equal(j1, 501);
	att_queries(&a, 0, 400, &j0, &j1);
	assert_int_equal(j0, 400);
	assert_int_equal(j1, 512);
}

/* torchtitan's documents: a key is seen by the queries from itself to the end
 * of its document, a query sees the keys from its document's start, in a
 * context-parallel block too (positions index the full rows of doc). */
static void a_key_is_seen_up_to_the_end_of_its_document(void **state)
{
	(void)state;
	static int32_t doc[2 * 1000];
	static const int64_t starts[] = {0, 300, 301, 700};
	for (int64_t p = 0; p < 1000; p++) {
		doc[p] = 0;
		for (int s = 0; s < 4; s++)
			doc[1000 + p] = starts[s] <= p ? (int32_t)starts[s] : doc[1000 + p];
	}
	gpu_att a = {.b = 2, .tq = 1000, .tk = 1000, .h = 1, .hkv = 1, .hd = 64, .causal = 1,
		     .doc = doc, .doc_t = 1000};
	int64_t i0, i1;
	att_queries(&a, 1, 250, &i0, &i1);
	assert_int_equal(i0, 250);
	assert_int_equal(i1, 300);
	att_queries(&a, 1, 300, &i0, &i1); /* a document of one position */
	assert_int_equal(i0, 300);
	assert_int_equal(i1, 301);
	att_queries(&a, 1, 999, &i0, &i1);
	assert_int_equal(i0, 999);
	assert_int_equal(i1, 1000);
	att_queries(&a, 0, 250, &i0, &i1); /* row 0: one document */
	assert_int_equal(i1, 1000);
	att_keys(&a, 1, 500, &i0, &i1);
	assert_int_equal(i0, 301);
	assert_int_equal(i1, 501);
	a.tq = 200, a.tk = 400, a.q_pos0 = 600, a.k_pos0 = 200; /* queries 600.., keys 200..599 */
	att_queries(&a, 1, 150, &i0, &i1); /* position 350: queries 600 .. 699 */
	assert_int_equal(i0, 0);
	assert_int_equal(i1, 100);
	att_keys(&a, 1, 150, &i0, &i1); /* position 750: its document starts past the keys */
	assert_int_equal(i0, 400);
	assert_int_equal(i1, 400);
	att_keys(&a, 1, 50, &i0, &i1); /* position 650: keys 301 .. 599 */
	assert_int_equal(i0, 101);
	assert_int_equal(i1, 400);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ranges_are_the_cpu_ops_mask),
		cmocka_unit_test(a_window_of_128_is_the_last_128_keys),
		cmocka_unit_test(a_key_is_seen_up_to_the_end_of_its_document),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
