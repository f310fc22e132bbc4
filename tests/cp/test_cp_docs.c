/* Context parallelism over torchtitan 0.3.0's packed documents.
 *
 * The ptrr load balancer's layout against torch's: tests/cp/golden/ptrr.txt
 * holds the rearrange indices torch's _PTRRLoadBalancer computes from
 * FlexAttention's BlockMask of rows of given documents
 * (scripts/cp_ptrr_golden.py); lib/cp's maps must give every rank the same
 * tokens in the same order.
 *
 * Ring attention with documents, every cp rank simulated in one process
 * (each rank's queries meeting every rank's keys block by block, in ring
 * order and in a shuffled one), for each load balancer and cp 1..4, in
 * float32 and bf16: the block-causal mask of the whole rows (a query sees its
 * own document's keys up to itself) must come out as attention in float64
 * over the whole rows (tests/support/att_ref, whose mask is built key by
 * key).  The documents cut chunks mid-way, hold one token, and start on a
 * chunk's edge (blocks all masked, and rows of a block that see no key:
 * lse -inf).  The ring plans by the documents' host copy: taking them copies
 * nothing back and waits for nothing, and each owner's keys cost the forward
 * two copies back and a sync for each block the mask leaves (counted against
 * the blocks with a visible (query, key) pair, found pair by pair), the
 * backward one sync. */
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
#include "core/bf16.h"
#include "cp/cp.h"
#include "../support/att_ref.h"
#include "../support/be_count.h"

/* ---- ptrr's layout against torch's ---- */

enum { MAX_SEQ = 1024, MAX_ROWS = 4, MAX_DOCS = 64 };

typedef struct golden_case {
	int seq_len, block, cp, rows;
	int32_t pos[MAX_ROWS][MAX_SEQ];
	int idx[MAX_ROWS][MAX_SEQ];
} golden_case;

/* The next case of the golden file; 0 at its end. */
static int read_case(FILE *f, golden_case *g)
{
	if (fscanf(f, " case %d %d %d %d", &g->seq_len, &g->block, &g->cp, &g->rows) != 4)
		return 0;
	assert_true(g->seq_len <= MAX_SEQ && g->rows <= MAX_ROWS);
	char line[8192];
	for (int r = 0; r < g->rows; r++) {
		assert_non_null(fgets(line, sizeof line, f));
		if (line[0] == '\n')
			assert_non_null(fgets(line, sizeof line, f));
		assert_true(strncmp(line, "docs ", 5) == 0);
		int at = 0, n = 0;
		for (char *p = line + 5, *end; at < g->seq_len; p = end) {
			long len = strtol(p, &end, 10);
			assert_true(end != p && len > 0);
			for (long i = 0; i < len; i++)
				g->pos[r][at++] = (int32_t)i;
			n++;
		}
		assert_true(n <= MAX_DOCS);
	}
	for (int r = 0; r < g->rows; r++) {
		assert_int_equal(fscanf(f, " idx"), 0);
		for (int i = 0; i < g->seq_len; i++)
			assert_int_equal(fscanf(f, "%d", &g->idx[r][i]), 1);
	}
	return 1;
}

/* Rank r's tokens of each row (the shard of a row of 0..seq_len-1) are
 * torch's indices r * seq_len / cp onwards. */
static void check_case(const golden_case *g)
{
	titan_err e = {0};
	cp_layout l;
	assert_int_equal(cp_layout_init_block(&l, g->seq_len, g->cp, CP_BALANCE_PTRR, g->block, &e),
			 0);
	int *maps = malloc((size_t)g->rows * (size_t)cp_map_len(&l) * sizeof *maps);
	int32_t *iota = malloc((size_t)(g->rows * g->seq_len) * sizeof *iota);
	int32_t *mine = malloc((size_t)(g->rows * cp_local_len(&l)) * sizeof *mine);
	assert_true(maps && iota && mine);
	for (int i = 0; i < g->rows * g->seq_len; i++)
		iota[i] = i % g->seq_len;
	int64_t n = cp_local_len(&l);
	for (int r = 0; r < g->cp; r++) {
		/* the rows are MAX_SEQ apart in the golden case, seq_len apart here */
		int32_t *pos = malloc((size_t)(g->rows * g->seq_len) * sizeof *pos);
		for (int bi = 0; bi < g->rows; bi++)
			memcpy(pos + bi * g->seq_len, g->pos[bi], (size_t)g->seq_len * sizeof *pos);
		assert_int_equal(cp_row_maps(&l, pos, g->rows, maps, &e), 0);
		cp_shard_rows(&l, maps, r, iota, mine, g->rows, sizeof *mine);
		for (int bi = 0; bi < g->rows; bi++)
			for (int64_t i = 0; i < n; i++)
				if (mine[bi * n + i] != g->idx[bi][r * n + i])
					fail_msg("seq %d block %d cp %d row %d rank %d token %lld: %d, "
						 "torch %d", g->seq_len, g->block, g->cp, bi, r,
						 (long long)i, mine[bi * n + i], g->idx[bi][r * n + i]);
		/* a row that is one document: cp_chunk_index's layout */
		for (int bi = 0; bi < g->rows; bi++) {
			if (g->pos[bi][g->seq_len - 1] != g->seq_len - 1)
				continue;
			int64_t *one = malloc((size_t)n * sizeof *one);
			cp_positions(&l, r, one);
			for (int64_t i = 0; i < n; i++)
				assert_int_equal(one[i], g->idx[bi][r * n + i]);
			free(one);
		}
		free(pos);
	}
	free(maps), free(iota), free(mine);
}

static void ptrr_layout_is_torchs(void **state)
{
	(void)state;
	const char *path = "tests/cp/golden/ptrr.txt";
	FILE *f = fopen(path, "r");
	if (f == NULL)
		fail_msg("%s: cannot open (run from the repository root)", path);
	static golden_case g;
	int cases = 0;
	while (read_case(f, &g)) {
		check_case(&g);
		cases++;
	}
	fclose(f);
	print_message("ptrr: %d cases of torch's layout\n", cases);
	assert_true(cases >= 5);
	titan_err e = {0};
	cp_layout l;
	assert_int_equal(cp_layout_init(&l, 384, 2, CP_BALANCE_PTRR, &e), -1);
	assert_string_equal(e.msg, "training.seq_len 384 is not divisible by 256 (FlexAttention's "
			    "block 128 x parallelism.context_parallel_degree 2: the ptrr load "
			    "balancer deals each rank as many whole blocks)");
	cp_balance b;
	assert_int_equal(cp_balance_parse("ptrr", &b, &e), 0);
	assert_int_equal(b, CP_BALANCE_PTRR);
}

/* ---- ring attention with documents ---- */

enum { B = 2, T = 48, H = 4, HKV = 2, HD = 8, BLOCK = 4 };
enum { NQ = B * T * H * HD, NK = B * T * HKV * HD };

/* Each row's documents: starts on a chunk's edge (24: cp 2 without a
 * balancer), documents of one token, a last one of one token. */
static const int64_t starts[B][6] = {{0, 5, 12, 13, 24, 40}, {0, 1, 19, 30, 47}};
static const int n_starts[B] = {6, 5};

typedef struct docs_case {
	int32_t doc[B * T], pos[B * T];
	double q[NQ], k[NK], v[NK], dout[NQ];
	double out[NQ], lse[B * H * T], dq[NQ], dk[NK], dv[NK];
} docs_case;

static void randd(double *x, size_t n, uint64_t *seed, int bf16)
{
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		float f = (float)((double)(*seed >> 11) / 9007199254740992.0 * 2 - 1);
		x[i] = bf16 ? bf16_to_f32(bf16_from_f32(f)) : f;
	}
}

/* Inputs (rounded to bf16 when bf16) and the float64 attention over the
 * whole rows. */
static void whole_rows(docs_case *d, int bf16)
{
	uint64_t seed = 20261205;
	randd(d->q, NQ, &seed, bf16);
	randd(d->k, NK, &seed, bf16);
	randd(d->v, NK, &seed, bf16);
	randd(d->dout, NQ, &seed, bf16);
	for (int bi = 0; bi < B; bi++) {
		att_ref_doc_row(d->doc + bi * T, T, starts[bi], n_starts[bi]);
		for (int i = 0; i < T; i++)
			d->pos[bi * T + i] = i - d->doc[bi * T + i];
	}
	be_attn a = {.b = B, .tq = T, .tk = T, .h = H, .hkv = HKV, .hd = HD, .hdv = HD,
		     .causal = 1, .doc = d->doc, .doc_t = T};
	att_ref_fwd(d->out, d->lse, d->q, d->k, d->v, NULL, &a);
	att_ref_bwd(d->dq, d->dk, d->dv, NULL, d->dout, d->q, d->k, d->v, NULL, NULL, &a);
}

/* n doubles as the element type t (float32 or bf16) into out. */
static void to_type(void *out, const double *x, size_t n, be_dtype t)
{
	for (size_t i = 0; i < n; i++)
		if (t == BE_BF16)
			((uint16_t *)out)[i] = bf16_from_f32((float)x[i]);
		else
			((float *)out)[i] = (float)x[i];
}

static double at_type(const void *x, size_t i, be_dtype t)
{
	return t == BE_BF16 ? bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* The largest |got - want| of rank r's share of a whole (B, T, width) array. */
static double share_diff(const cp_layout *l, const int *maps, int r, const void *got,
			 be_dtype t, const double *whole, int width)
{
	int64_t n = cp_local_len(l);
	double *want = malloc((size_t)(B * n * width) * sizeof *want), m = 0;
	cp_shard_rows(l, maps, r, whole, want, B, (size_t)width * sizeof *want);
	for (size_t i = 0; i < (size_t)(B * n * width); i++)
		m = fmax(m, fabs(at_type(got, i, t) - want[i]));
	free(want);
	return m;
}

/* The same for the lse in cp's layout (chunks, B, H, chunk) against (B, H, T). */
static double lse_diff(const cp_layout *l, const int *maps, int r, const float *got,
		       const double *whole)
{
	double m = 0;
	int64_t c = l->chunk;
	for (int k = 0; k < l->chunks; k++)
		for (int bi = 0; bi < B; bi++) {
			int at = maps[bi * cp_map_len(l) + r * l->chunks + k];
			for (int h = 0; h < H; h++)
				for (int64_t i = 0; i < c; i++)
					m = fmax(m, fabs(got[((k * B + bi) * H + h) * c + i] -
							 whole[(bi * H + h) * T + at * c + i]));
		}
	return m;
}

typedef struct ranks {
	cp_layout l;
	int maps[B * T];
	size_t nq, nk, es; /* one rank's q (and out), k (and v) elements; element bytes */
	char *q, *k, *v, *dout, *out;
	float *lse, *dk, *dv;
} ranks;

/* Every rank's q, k, v, dout in the type t, its share of the whole rows. */
static void deal(ranks *w, const docs_case *d, int cp, cp_balance bal, be_dtype t)
{
	titan_err e = {0};
	assert_int_equal(cp_layout_init_block(&w->l, T, cp, bal, BLOCK, &e), 0);
	assert_int_equal(cp_row_maps(&w->l, d->pos, B, w->maps, &e), 0);
	int64_t n = cp_local_len(&w->l);
	w->nq = (size_t)(B * n * H * HD);
	w->nk = (size_t)(B * n * HKV * HD);
	w->es = be_dtype_size(t);
	w->q = malloc(cp * w->nq * w->es), w->k = malloc(cp * w->nk * w->es);
	w->v = malloc(cp * w->nk * w->es), w->dout = malloc(cp * w->nq * w->es);
	w->out = malloc(cp * w->nq * w->es), w->lse = malloc(cp * (size_t)(B * H * n) * 4);
	w->dk = calloc(cp * w->nk, 4), w->dv = calloc(cp * w->nk, 4);
	char *all = malloc(NQ * w->es);
	assert_true(w->q && w->k && w->v && w->dout && w->out && w->lse && w->dk && w->dv && all);
	const double *src[4] = {d->q, d->k, d->v, d->dout};
	char *dst[4] = {w->q, w->k, w->v, w->dout};
	size_t per[4] = {w->nq, w->nk, w->nk, w->nq}, width[4] = {H * HD, HKV * HD, HKV * HD, H * HD};
	for (int x = 0; x < 4; x++) {
		to_type(all, src[x], (size_t)(B * T) * width[x], t);
		for (int r = 0; r < cp; r++)
			cp_shard_rows(&w->l, w->maps, r, all, dst[x] + r * per[x] * w->es, B,
				      width[x] * w->es);
	}
	free(all);
}

static void ranks_free(ranks *w)
{
	free(w->q), free(w->k), free(w->v), free(w->dout), free(w->out), free(w->lse);
	free(w->dk), free(w->dv);
}

/* The blocks of rank r's queries against owner j's keys that some query of
 * the block sees some key of: causal and in the query's document, pair by
 * pair. */
static uint64_t visible_blocks(const ranks *w, const docs_case *d, int r, int j)
{
	const cp_layout *l = &w->l;
	int64_t c = l->chunk;
	uint64_t n = 0;
	for (int bi = 0; bi < B; bi++)
		for (int qk = 0; qk < l->chunks; qk++)
			for (int kk = 0; kk < l->chunks; kk++) {
				int64_t qa = w->maps[bi * cp_map_len(l) + r * l->chunks + qk];
				int64_t kb = w->maps[bi * cp_map_len(l) + j * l->chunks + kk];
				int seen = 0;
				for (int64_t p = qa * c; p < qa * c + c && !seen; p++)
					for (int64_t k = kb * c; k < kb * c + c && !seen; k++)
						seen = k <= p && k >= d->doc[bi * T + p];
				n += (uint64_t)seen;
			}
	return n;
}

/* What a call cost since *was: copies back and syncs. */
static void cost(const be_count *now, be_count *was, uint64_t *d2h, uint64_t *syncs)
{
	*d2h = now->copies[BACKEND_D2H] - was->copies[BACKEND_D2H];
	*syncs = now->syncs - was->syncs;
	*was = *now;
}

/* The owner rank r meets at step i: ring order (its own, r-1, r-2, ...) or a
 * shuffled one. */
static int owner_at(int r, int i, int cp, int order)
{
	if (!order)
		return (r - i + cp) % cp;
	return cp % 3 == 0 ? (cp - 1 - i + r) % cp : (i * 3 + r + 1) % cp;
}

/* Forward and backward of every rank; the worst differences from the float64
 * attention: out and lse, then dq, dk and dv. */
static void run_ranks(backend *be, const docs_case *d, ranks *w, int cp, be_dtype t, int order,
		      double worst[2])
{
	titan_err e = {0};
	int64_t n = cp_local_len(&w->l);
	be_attn shape = {.b = B, .tq = n, .tk = n, .h = H, .hkv = HKV, .hd = HD, .hdv = HD,
			 .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t};
	size_t nl = (size_t)(B * H * n);
	be_count now = {0}, was = {0};
	uint64_t d2h, syncs;
	be_count_wrap(be, &now);
	for (int r = 0; r < cp; r++) {
		cp_ring *ring = cp_ring_create(be, &w->l, r, &shape, &e);
		assert_non_null(ring);
		was = now;
		assert_int_equal(cp_ring_set_docs(ring, d->doc, d->doc, T, &e), 0);
		cost(&now, &was, &d2h, &syncs);
		assert_int_equal(d2h + syncs, 0);
		cp_ring_fwd_begin(ring, w->q + r * w->nq * w->es);
		for (int i = 0; i < cp; i++) {
			int j = owner_at(r, i, cp, order);
			assert_int_equal(cp_ring_fwd_block(ring, j, w->k + j * w->nk * w->es,
							   w->v + j * w->nk * w->es, &e), 0);
			cost(&now, &was, &d2h, &syncs);
			uint64_t blocks = visible_blocks(w, d, r, j);
			if (d2h != 2 * blocks || syncs != blocks)
				fail_msg("cp %d rank %d, keys of %d: %llu copies back and %llu syncs "
					 "for %llu blocks", cp, r, j, (unsigned long long)d2h,
					 (unsigned long long)syncs, (unsigned long long)blocks);
		}
		assert_int_equal(cp_ring_fwd_end(ring, w->out + r * w->nq * w->es, w->lse + r * nl, &e),
				 0);
		worst[0] = fmax(worst[0], share_diff(&w->l, w->maps, r, w->out + r * w->nq * w->es, t,
						     d->out, H * HD));
		worst[0] = fmax(worst[0], lse_diff(&w->l, w->maps, r, w->lse + r * nl, d->lse));
		cp_ring_free(ring);
	}
	char *dq = malloc(w->nq * w->es);
	for (int r = 0; r < cp; r++) {
		cp_ring *ring = cp_ring_create(be, &w->l, r, &shape, &e);
		was = now;
		assert_int_equal(cp_ring_set_docs(ring, d->doc, d->doc, T, &e), 0);
		cost(&now, &was, &d2h, &syncs);
		assert_int_equal(d2h + syncs, 0);
		cp_ring_bwd_begin(ring, w->dout + r * w->nq * w->es, w->q + r * w->nq * w->es,
				  w->out + r * w->nq * w->es, w->lse + r * nl);
		for (int i = 0; i < cp; i++) {
			int j = owner_at(r, cp - 1 - i, cp, order);
			assert_int_equal(cp_ring_bwd_block(ring, j, w->k + j * w->nk * w->es,
							   w->v + j * w->nk * w->es, w->dk + j * w->nk,
							   w->dv + j * w->nk, &e), 0);
			cost(&now, &was, &d2h, &syncs);
			assert_int_equal(d2h, 0);
			assert_int_equal(syncs, 1);
		}
		assert_int_equal(cp_ring_bwd_end(ring, dq, &e), 0);
		worst[1] = fmax(worst[1], share_diff(&w->l, w->maps, r, dq, t, d->dq, H * HD));
		cp_ring_free(ring);
	}
	be_count_unwrap(be);
	for (int r = 0; r < cp; r++) {
		worst[1] = fmax(worst[1], share_diff(&w->l, w->maps, r, w->dk + r * w->nk, BE_F32,
						     d->dk, HKV * HD));
		worst[1] = fmax(worst[1], share_diff(&w->l, w->maps, r, w->dv + r * w->nk, BE_F32,
						     d->dv, HKV * HD));
	}
	free(dq);
}

static const char *const balancer_names[] = {"none", "headtail", "ptrr"};

static void ring_with_documents_is_the_block_causal_mask(void **state)
{
	(void)state;
	titan_err e = {0};
	backend *be = backend_cpu_create(2, &e);
	assert_non_null(be);
	static docs_case d;
	for (int bf16 = 0; bf16 < 2; bf16++) {
		be_dtype t = bf16 ? BE_BF16 : BE_F32;
		whole_rows(&d, bf16);
		double most[2] = {0, 0};
		for (int bal = 0; bal < 3; bal++)
			for (int cp = 1; cp <= 4; cp++)
				for (int order = 0; order < 2; order++) {
					ranks w = {0};
					deal(&w, &d, cp, (cp_balance)bal, t);
					double worst[2] = {0, 0};
					run_ranks(be, &d, &w, cp, t, order, worst);
					ranks_free(&w);
					most[0] = fmax(most[0], worst[0]);
					most[1] = fmax(most[1], worst[1]);
					/* float32: the kernel's sums against float64; bf16: the
					 * outputs' and dq's rounding (values below 2: 2^-8 x 2) */
					if (worst[0] > (bf16 ? 1e-2 : 2e-6) ||
					    worst[1] > (bf16 ? 3e-2 : 1e-5))
						fail_msg("%s cp %d %s order %d: forward %.2e, backward %.2e",
							 bf16 ? "bf16" : "float32", cp,
							 balancer_names[bal], order, worst[0], worst[1]);
				}
		print_message("%-7s every balancer, cp 1..4: forward max |diff| %.2e, backward %.2e "
			      "(float64 reference)\n", bf16 ? "bf16" : "float32", most[0], most[1]);
	}
	backend_free(be);
}

/* The documents a ring takes: the whole rows', and ptrr needs them. */
static void ring_refuses_documents_it_cannot_place(void **state)
{
	(void)state;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	cp_layout l;
	assert_int_equal(cp_layout_init_block(&l, 16, 2, CP_BALANCE_PTRR, 4, &e), 0);
	be_attn s = {.b = 1, .tq = 8, .tk = 8, .h = 2, .hkv = 2, .hd = 4, .hdv = 4, .causal = 1};
	cp_ring *r = cp_ring_create(be, &l, 0, &s, &e);
	assert_non_null(r);
	int32_t doc[16] = {0};
	assert_int_equal(cp_ring_set_docs(r, NULL, NULL, 0, &e), -1);
	assert_non_null(strstr(e.msg, "ptrr"));
	assert_int_equal(cp_ring_set_docs(r, doc, doc, 8, &e), -1);
	assert_string_equal(e.msg, "ring attention: documents of rows of 8 positions for "
			    "sequences of 16");
	/* no host copy: the ring would have to copy them back at every call */
	assert_int_equal(cp_ring_set_docs(r, doc, NULL, 16, &e), -1);
	assert_string_equal(e.msg, "ring attention: documents without their host copy "
			    "(be_attn.doc_host)");
	assert_int_equal(cp_ring_set_docs(r, doc, doc, 16, &e), 0);
	cp_ring_free(r);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ptrr_layout_is_torchs),
		cmocka_unit_test(ring_with_documents_is_the_block_causal_mask),
		cmocka_unit_test(ring_refuses_documents_it_cannot_place),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
