/* Ring attention's arithmetic, every cp rank simulated in one process: the
 * sequence cut as torchtitan cuts it (headtail or none), each rank's queries
 * meeting every rank's keys block by block in ring order (and in a shuffled
 * one), merged by log-sum-exp; the backward's dq summed locally and dk, dv
 * summed at their owner.  Everything must equal causal attention over the
 * whole sequence on the same backend, and a float64 attention written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cp/cp.h"

enum { B = 2, T = 48, H = 4, HKV = 2, HD = 8, HDV = 6 };

static void randn(float *x, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((double)(*seed >> 11) / 9007199254740992.0 * 2 - 1);
	}
}

/* Causal attention in float64, the plain definition: out (B, T, H, HDV), lse
 * (B, H, T). */
static void attention_f64(const float *q, const float *k, const float *v, double *out,
			  double *lse)
{
	double scale = 1 / sqrt(HD);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < T; i++) {
				int kv = h / (H / HKV);
				double s[T], m = -INFINITY, sum = 0;
				for (int j = 0; j <= i; j++) {
					double d = 0;
					for (int x = 0; x < HD; x++)
						d += (double)q[((b * T + i) * H + h) * HD + x] *
						     k[((b * T + j) * HKV + kv) * HD + x];
					s[j] = d * scale;
					m = s[j] > m ? s[j] : m;
				}
				for (int j = 0; j <= i; j++)
					sum += exp(s[j] - m);
				lse[(b * H + h) * T + i] = m + log(sum);
				for (int x = 0; x < HDV; x++) {
					double o = 0;
					for (int j = 0; j <= i; j++)
						o += exp(s[j] - m) / sum * v[((b * T + j) * HKV + kv) * HDV + x];
					out[((b * T + i) * H + h) * HDV + x] = o;
				}
			}
}

static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

typedef struct whole {
	float q[B * T * H * HD], k[B * T * HKV * HD], v[B * T * HKV * HDV];
	float out[B * T * H * HDV], lse[B * H * T], dout[B * T * H * HDV];
	float dq[B * T * H * HD], dk[B * T * HKV * HD], dv[B * T * HKV * HDV];
} whole;

static const be_attn full_shape = {.b = B, .tq = T, .tk = T, .h = H, .hkv = HKV, .hd = HD,
				   .hdv = HDV, .causal = 1};

static void reference(backend *be, whole *w, uint64_t seed)
{
	print_message("seed %llu\n", (unsigned long long)seed);
	randn(w->q, sizeof w->q / 4, &seed);
	randn(w->k, sizeof w->k / 4, &seed);
	randn(w->v, sizeof w->v / 4, &seed);
	randn(w->dout, sizeof w->dout / 4, &seed);
	be->ops->attention_fwd(be, w->out, w->lse, w->q, w->k, w->v, &full_shape);
	be->ops->attention_bwd(be, w->dq, w->dk, w->dv, w->dout, w->q, w->k, w->v, w->out, w->lse,
			       &full_shape);
	static double o64[B * T * H * HDV], l64[B * H * T];
	attention_f64(w->q, w->k, w->v, o64, l64);
	double d = 0;
	for (size_t i = 0; i < sizeof o64 / sizeof o64[0]; i++)
		d = fmax(d, fabs(o64[i] - w->out[i]));
	for (size_t i = 0; i < sizeof l64 / sizeof l64[0]; i++)
		d = fmax(d, fabs(l64[i] - w->lse[i]));
	assert_true(d < 1e-5);
}

/* Rank r's lse in cp's layout (chunks, B, H, chunk) from the whole (B, H, T). */
static void shard_lse(const cp_layout *l, int r, const float *full, float *mine)
{
	int64_t c = l->chunk;
	for (int k = 0; k < l->chunks; k++)
		for (int b = 0; b < B; b++)
			for (int h = 0; h < H; h++)
				for (int64_t i = 0; i < c; i++)
					mine[((k * B + b) * H + h) * c + i] =
						full[(b * H + h) * T + cp_chunk_index(l, r, k) * c + i];
}

/* Every rank's forward and backward for one layout; order 0 visits the owners
 * in ring order (the rank's own first, then r-1, r-2, ...), 1 in a shuffled
 * order. */
static void ring_equals_whole(backend *be, const whole *w, int cp, cp_balance bal, int order)
{
	titan_err e = {0};
	cp_layout l;
	assert_int_equal(cp_layout_init(&l, T, cp, bal, &e), 0);
	int64_t n = cp_local_len(&l);
	be_attn shape = full_shape;
	shape.tq = shape.tk = n;
	size_t nq = (size_t)(B * n * H * HD), nk = (size_t)(B * n * HKV * HD);
	size_t nv = (size_t)(B * n * HKV * HDV), no = (size_t)(B * n * H * HDV);
	float *q = malloc(cp * nq * 4), *k = malloc(cp * nk * 4), *v = malloc(cp * nv * 4);
	float *dout = malloc(cp * no * 4), *out = malloc(no * 4), *lse = malloc(B * H * n * 4);
	float *want = malloc(no * 4), *want_lse = malloc(B * H * n * 4), *dq = malloc(nq * 4);
	float *dk = calloc(cp * nk, 4), *dv = calloc(cp * nv, 4), *tmp = malloc((nq + nk + nv) * 4);
	float *outs = malloc(cp * no * 4), *lses = malloc(cp * B * H * n * 4);
	for (int r = 0; r < cp; r++) {
		cp_shard(&l, r, w->q, q + r * nq, B, H * HD * 4);
		cp_shard(&l, r, w->k, k + r * nk, B, HKV * HD * 4);
		cp_shard(&l, r, w->v, v + r * nv, B, HKV * HDV * 4);
		cp_shard(&l, r, w->dout, dout + r * no, B, H * HDV * 4);
	}
	double worst = 0;
	for (int r = 0; r < cp; r++) {
		cp_ring *ring = cp_ring_create(be, &l, r, &shape, &e);
		assert_non_null(ring);
		cp_ring_fwd_begin(ring, q + r * nq);
		for (int i = 0; i < cp; i++) {
			int j = order ? (i * 3 + r + 1) % cp : (r - i + cp) % cp;
			if (order && cp % 3 == 0)
				j = (cp - 1 - i + r) % cp;
			assert_int_equal(cp_ring_fwd_block(ring, j, k + j * nk, v + j * nv, &e), 0);
		}
		assert_int_equal(cp_ring_fwd_end(ring, out, lse, &e), 0);
		cp_shard(&l, r, w->out, want, B, H * HDV * 4);
		shard_lse(&l, r, w->lse, want_lse);
		worst = fmax(worst, max_diff(out, want, no));
		worst = fmax(worst, max_diff(lse, want_lse, (size_t)(B * H * n)));
		memcpy(outs + r * no, out, no * 4);
		memcpy(lses + r * B * H * n, lse, (size_t)(B * H * n) * 4);
		cp_ring_free(ring);
	}
	double bworst = 0;
	for (int r = 0; r < cp; r++) {
		cp_ring *ring = cp_ring_create(be, &l, r, &shape, &e);
		cp_ring_bwd_begin(ring, dout + r * no, q + r * nq, outs + r * no, lses + r * B * H * n);
		for (int i = 0; i < cp; i++) {
			int j = (r - i + cp) % cp;
			assert_int_equal(cp_ring_bwd_block(ring, j, k + j * nk, v + j * nv, dk + j * nk,
							   dv + j * nv, &e), 0);
		}
		assert_int_equal(cp_ring_bwd_end(ring, dq, &e), 0);
		cp_shard(&l, r, w->dq, tmp, B, H * HD * 4);
		bworst = fmax(bworst, max_diff(dq, tmp, nq));
		cp_ring_free(ring);
	}
	for (int r = 0; r < cp; r++) {
		cp_shard(&l, r, w->dk, tmp, B, HKV * HD * 4);
		bworst = fmax(bworst, max_diff(dk + r * nk, tmp, nk));
		cp_shard(&l, r, w->dv, tmp, B, HKV * HDV * 4);
		bworst = fmax(bworst, max_diff(dv + r * nv, tmp, nv));
	}
	print_message("cp %d %-8s order %d: forward max |diff| %.2e, backward %.2e\n", cp,
		      bal == CP_BALANCE_HEADTAIL ? "headtail" : "none", order, worst, bworst);
	/* float32 sums in another order: a few ulps of values near 1 */
	assert_true(worst < 2e-6);
	assert_true(bworst < 1e-5);
	free(q), free(k), free(v), free(dout), free(out), free(lse), free(want), free(want_lse);
	free(dq), free(dk), free(dv), free(tmp), free(outs), free(lses);
}

static void ring_attention_equals_whole_sequence_attention(void **state)
{
	(void)state;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	static whole w;
	reference(be, &w, 20261203);
	for (int cp = 1; cp <= 4; cp++)
		for (int bal = 0; bal < 2; bal++)
			for (int order = 0; order < 2; order++)
				ring_equals_whole(be, &w, cp, (cp_balance)bal, order);
	backend_free(be);
}

static void layout_is_torchtitans(void **state)
{
	(void)state;
	titan_err e = {0};
	cp_layout l;
	int64_t pos[8];
	/* torch's _HeadTailLoadBalancer example: 8 tokens, 2 ranks: 0 1 6 7 | 2 3 4 5 */
	assert_int_equal(cp_layout_init(&l, 8, 2, CP_BALANCE_HEADTAIL, &e), 0);
	cp_positions(&l, 0, pos);
	int64_t r0[] = {0, 1, 6, 7}, r1[] = {2, 3, 4, 5};
	assert_memory_equal(pos, r0, sizeof r0);
	cp_positions(&l, 1, pos);
	assert_memory_equal(pos, r1, sizeof r1);
	assert_int_equal(cp_layout_init(&l, 8, 4, CP_BALANCE_HEADTAIL, &e), 0);
	cp_positions(&l, 1, pos);
	assert_int_equal(pos[0], 1);
	assert_int_equal(pos[1], 6);
	assert_int_equal(cp_layout_init(&l, 9, 3, CP_BALANCE_NONE, &e), 0);
	cp_positions(&l, 2, pos);
	assert_int_equal(pos[0], 6);
	assert_int_equal(pos[2], 8);
	/* tokens in and back out */
	int32_t full[2 * 12], mine[2 * 6], back[2 * 12];
	for (int i = 0; i < 24; i++)
		full[i] = i;
	assert_int_equal(cp_layout_init(&l, 12, 2, CP_BALANCE_HEADTAIL, &e), 0);
	memset(back, 0xff, sizeof back);
	for (int r = 0; r < 2; r++) {
		cp_shard(&l, r, full, mine, 2, 4);
		cp_unshard(&l, r, mine, back, 2, 4);
	}
	assert_memory_equal(full, back, sizeof full);
	cp_shard(&l, 1, full, mine, 2, 4);
	int32_t want[] = {3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20};
	assert_memory_equal(mine, want, sizeof want);
	assert_int_equal(cp_layout_init(&l, 12, 4, CP_BALANCE_HEADTAIL, &e), -1);
	assert_string_equal(e.msg, "training.seq_len 12 is not divisible by 8 (2 x "
			    "parallelism.context_parallel_degree 4: the headtail load balancer "
			    "gives each rank two chunks)");
	assert_int_equal(cp_layout_init(&l, 10, 4, CP_BALANCE_NONE, &e), -1);
	cp_balance b;
	cp_rotate rot;
	assert_int_equal(cp_balance_parse(NULL, &b, &e), 0);
	assert_int_equal(b, CP_BALANCE_NONE);
	assert_int_equal(cp_balance_parse("ptrr", &b, &e), 0); /* tests/cp/test_cp_docs.c */
	assert_int_equal(b, CP_BALANCE_PTRR);
	assert_int_equal(cp_balance_parse("roundrobin", &b, &e), -1);
	assert_int_equal(cp_rotate_parse("alltoall", &rot, &e), 0);
	assert_int_equal(cp_rotate_parse("ring", &rot, &e), -1);
}

/* Masks and softmaxes the ring does not cut by chunk are refused, not
 * computed wrong. */
static void ring_refuses_windows_chunks_and_sinks(void **state)
{
	(void)state;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	cp_layout l;
	assert_int_equal(cp_layout_init(&l, 16, 2, CP_BALANCE_HEADTAIL, &e), 0);
	float sinks[2] = {0};
	be_attn ok = {.b = 1, .tq = 8, .tk = 8, .h = 2, .hkv = 2, .hd = 4, .hdv = 4, .causal = 1};
	be_attn bad[3] = {ok, ok, ok};
	bad[0].window = 4;
	bad[1].chunk = 8;
	bad[2].sinks = sinks;
	cp_ring *r = cp_ring_create(be, &l, 0, &ok, &e);
	assert_non_null(r);
	cp_ring_free(r);
	for (int i = 0; i < 3; i++) {
		assert_null(cp_ring_create(be, &l, 0, &bad[i], &e));
		assert_non_null(strstr(e.msg, "not supported under context parallelism"));
	}
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layout_is_torchtitans),
		cmocka_unit_test(ring_attention_equals_whole_sequence_attention),
		cmocka_unit_test(ring_refuses_windows_chunks_and_sinks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
