/* Unit tests of the loader over a mixture of shard folders (titan-shard mix):
 * the draws against torchtitan 0.3.0's InterleavedDataset
 * (tests/loader/golden/interleave.tsv, scripts/interleave_golden.py), the
 * realised token mixture, every source's windows in its own loader's order,
 * the same stream on 1, 2 and 4 ranks, exact resume and resharding, and what
 * is refused.
 *
 * Source s's documents hold ids from a range of its own (besides BOS 1 and
 * EOS 2), so a row tells which source it came from without the loader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader.h"
#include "loader/mixer.h"
#include "shard/shard.h"
#include "../support/doc_shards.h"
#include "../support/testutil.h"
#include "tokstream/tokstream.h"

#define NSRC 3
#define RANGE 1000 /* source s's ids: 3 + s * RANGE ... 3 + (s + 1) * RANGE - 1 */
#define VOCAB (3 + NSRC * RANGE)

static const double weights[NSRC] = {0.7, 0.2, 0.1};
static char src_dir[NSRC][300], mix_dir[300];

static uint64_t lcg = 777;
static uint32_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(lcg >> 33);
}

/* ndocs documents of 2 to 81 tokens with source s's ids into dir. */
static void build_source(const char *dir, int s, int ndocs)
{
	tokstream_header h = {.id_width = 2, .vocab_size = VOCAB, .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	uint32_t **docs = calloc((size_t)ndocs, sizeof *docs);
	size_t *lens = calloc((size_t)ndocs, sizeof *lens);
	assert_true(docs != NULL && lens != NULL);
	for (int d = 0; d < ndocs; d++) {
		size_t n = lens[d] = 2 + rnd() % 80;
		docs[d] = malloc(n * sizeof **docs);
		docs[d][0] = 1;
		for (size_t i = 1; i + 1 < n; i++)
			docs[d][i] = 3 + (uint32_t)s * RANGE + rnd() % RANGE;
		docs[d][n - 1] = 2;
	}
	shard_build_opts o = {.out = dir, .shard_tokens = 2000, .val_fraction = 0.1};
	titan_err err;
	if (test_doc_shards(&h, docs, lens, (size_t)ndocs, &o, &err) != 0)
		fail_msg("%s", err.msg);
	for (int d = 0; d < ndocs; d++)
		free(docs[d]);
	free(docs), free(lens);
}

static int setup(void **state)
{
	if (test_tmpdir_create(state) != 0)
		return -1;
	char *srcs[NSRC];
	for (int s = 0; s < NSRC; s++) {
		snprintf(src_dir[s], sizeof src_dir[s], "%s/src%d", test_tmpdir, s);
		build_source(src_dir[s], s, 150 + 50 * s);
		srcs[s] = src_dir[s];
	}
	snprintf(mix_dir, sizeof mix_dir, "%s/mix", test_tmpdir);
	titan_err err;
	if (shard_mix_write(mix_dir, srcs, weights, NSRC, 42, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	return 0;
}

static loader *open_at(const char *dir, int64_t T, int64_t B, int rank, int D, int documents,
		       int prefetch)
{
	loader_opts o = {.dir = dir, .split = LOADER_TRAIN, .seq_len = T, .local_batch = B,
			 .dp_rank = rank, .dp_degree = D, .seed = 1234, .documents = documents,
			 .doc_bounds = 1, .prefetch = prefetch};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL)
		fail_msg("%s", err.msg);
	return l;
}

static void next(loader *l, const loader_batch **b)
{
	titan_err err;
	int rc = loader_next(l, b, &err);
	if (rc != 1)
		fail_msg("loader_next: %d %s", rc, rc < 0 ? err.msg : "end");
}

/* The source a row's ids come from; every id of it must be that source's. */
static int source_of_row(const int32_t *in, const int32_t *lab, int64_t T)
{
	int s = -1;
	for (int64_t t = 0; t < T; t++) {
		int32_t ids[2] = {in[t], lab[t]};
		for (int k = 0; k < 2; k++) {
			if (ids[k] < 3)
				continue;
			int u = (ids[k] - 3) / RANGE;
			if (s >= 0 && u != s)
				fail_msg("a row mixes sources %d and %d", s, u);
			s = u;
		}
	}
	if (s < 0)
		fail_msg("a row of BOS and EOS only");
	return s;
}

/* ---- the draws are 0.3.0's */

static int parse_list(char *s, double *d, long long *ll, int cap)
{
	int n = 0;
	for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ","), n++) {
		if (d)
			d[n] = strtod(tok, NULL);
		else
			ll[n] = strtoll(tok, NULL, 10);
	}
	return n;
}

static void draws_are_torchtitan_030_interleaved_dataset(void **state)
{
	(void)state;
	const char *path = "tests/loader/golden/interleave.tsv";
	FILE *f = fopen(path, "r");
	if (f == NULL)
		fail_msg("%s: cannot open (run from the repository root)", path);
	static char line[1 << 16];
	static long long want[1 << 13];
	int cases = 0;
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#')
			continue;
		char *cols[5], *save = NULL;
		int nc = 0;
		for (char *c = strtok_r(line, "\t\n", &save); c && nc < 5;
		     c = strtok_r(NULL, "\t\n", &save))
			cols[nc++] = c;
		assert_int_equal(nc, 5);
		uint64_t seed = strtoull(cols[0], NULL, 10);
		double w[64];
		int n = parse_list(cols[1], w, NULL, 64);
		int nd = parse_list(cols[2], NULL, want, 1 << 13);
		mixer m;
		mix_rng r;
		titan_err err;
		assert_int_equal(mixer_init(&m, w, (size_t)n, &err), 0);
		mix_rng_seed(&r, seed);
		for (int i = 0; i < nd; i++)
			if ((long long)mixer_draw(&m, &r) != want[i])
				fail_msg("seed %llu, %d sources: draw %d differs from 0.3.0's",
					 (unsigned long long)seed, n, i);
		uint32_t sum = 0;
		for (int i = 0; i < MIX_MT_N; i++)
			sum += r.mt[i];
		assert_int_equal(r.index, strtoul(cols[3], NULL, 10));
		assert_int_equal(sum, strtoul(cols[4], NULL, 10));
		cases++;
	}
	fclose(f);
	assert_true(cases >= 5);
}

static void weights_that_interleaved_dataset_refuses_are_refused(void **state)
{
	(void)state;
	mixer m;
	titan_err err;
	const double neg[2] = {1, -0.5}, zero[2] = {0, 0}, inf[2] = {1, INFINITY};
	assert_int_equal(mixer_init(&m, neg, 2, &err), -1);
	assert_int_equal(mixer_init(&m, zero, 2, &err), -1);
	assert_int_equal(mixer_init(&m, inf, 2, &err), -1);
	assert_int_equal(mixer_init(&m, neg, 0, &err), -1);
}

/* ---- the realised mixture, and every source's windows in its own order */

static void realised_mixture_is_within_half_a_percent_over_a_million_tokens(void **state)
{
	(void)state;
	const int64_t T = 16, B = 25;
	const int calls = 2500; /* 2500 x 25 x 16 = 10^6 input tokens */
	loader *l = open_at(mix_dir, T, B, 0, 1, 0, 2);
	uint64_t tokens[NSRC] = {0};
	for (int i = 0; i < calls; i++) {
		const loader_batch *b;
		next(l, &b);
		for (int64_t j = 0; j < B; j++)
			tokens[source_of_row(b->inputs + j * T, b->labels + j * T, T)] += (uint64_t)T;
	}
	uint64_t taken[NSRC];
	assert_int_equal(loader_mix_sources(l), NSRC);
	loader_mix_taken(l, taken);
	for (int s = 0; s < NSRC; s++) {
		double share = (double)tokens[s] / 1e6;
		printf("# source %d: weight %.2f, realised %.4f of 10^6 tokens\n", s, weights[s],
		       share);
		assert_true(fabs(share - weights[s]) <= 0.005);
		assert_int_equal(taken[s] * (uint64_t)T, tokens[s]);
	}
	loader_close(l);
}

/* Source s's rows of the mixed stream, in order, are that folder's own
 * loader's windows 0, 1, 2, ... (through its epochs: the sources wrap). */
static void check_sources_in_order(int documents)
{
	const int64_t T = 24, B = 4;
	loader *l = open_at(mix_dir, T, B, 0, 1, documents, 1);
	loader *own[NSRC];
	for (int s = 0; s < NSRC; s++)
		own[s] = open_at(src_dir[s], T, 1, 0, 1, documents, 0);
	uint64_t seen[NSRC] = {0};
	for (int i = 0; i < 600; i++) {
		const loader_batch *b, *o;
		next(l, &b);
		for (int64_t j = 0; j < B; j++) {
			int s = source_of_row(b->inputs + j * T, b->labels + j * T, T);
			next(own[s], &o);
			assert_memory_equal(b->inputs + j * T, o->inputs, T * sizeof(int32_t));
			assert_memory_equal(b->labels + j * T, o->labels, T * sizeof(int32_t));
			assert_memory_equal(b->doc_ids + j * T, o->doc_ids, T * sizeof(int32_t));
			if (documents)
				assert_memory_equal(b->positions + j * T, o->positions,
						    T * sizeof(int32_t));
			seen[s]++;
		}
	}
	/* The small source went round more than once. */
	assert_true(seen[0] > loader_windows(own[0]));
	for (int s = 0; s < NSRC; s++)
		loader_close(own[s]);
	loader_close(l);
}

static void each_source_gives_its_own_windows_in_order_and_wraps(void **state)
{
	(void)state;
	check_sources_in_order(0);
}

static void documents_packing_030_draws_from_each_sources_documents(void **state)
{
	(void)state;
	check_sources_in_order(1);
}

/* ---- ranks, resume, reshard */

/* D ranks of local batch G / D for `steps` calls from the saved bytes (or
 * the start); rows in global order into out; returns rank 0's saved bytes
 * (every rank's must be the same). */
static uint8_t *run_ranks(int D, int64_t G, int steps, const uint8_t *from, size_t from_n,
			  int32_t *out, size_t *n_out)
{
	const int64_t T = 20, B = G / D;
	uint8_t *saved[4] = {0};
	size_t n[4];
	for (int r = 0; r < D; r++) {
		loader *l = open_at(mix_dir, T, B, r, D, 0, r % 2 ? 2 : 0);
		titan_err err;
		loader_state st;
		if (from != NULL && loader_load(l, from, from_n, &st, &err) != 0)
			fail_msg("%s", err.msg);
		for (int i = 0; i < steps; i++) {
			const loader_batch *b;
			next(l, &b);
			memcpy(out + ((int64_t)i * G + r * B) * T, b->inputs, B * T * sizeof(int32_t));
		}
		assert_int_equal(loader_save(l, &saved[r], &n[r], &err), 0);
		loader_close(l);
	}
	for (int r = 1; r < D; r++) {
		assert_int_equal(n[r], n[0]);
		assert_memory_equal(saved[r], saved[0], n[0]);
		free(saved[r]);
	}
	*n_out = n[0];
	return saved[0];
}

static void same_stream_on_1_2_and_4_ranks_and_across_reshards(void **state)
{
	(void)state;
	const int64_t T = 20, G = 8;
	const int s1 = 40, s2 = 30;
	size_t rows = (size_t)(s1 + s2) * G * T, n;
	int32_t *ref = malloc(rows * sizeof *ref), *got = malloc(rows * sizeof *got);
	free(run_ranks(1, G, s1 + s2, NULL, 0, ref, &n));
	for (int D = 2; D <= 4; D *= 2) {
		memset(got, 0, rows * sizeof *got);
		free(run_ranks(D, G, s1 + s2, NULL, 0, got, &n));
		assert_memory_equal(got, ref, rows * sizeof *got);
	}
	const int plan[3][2] = {{4, 2}, {2, 4}, {1, 4}};
	for (int c = 0; c < 3; c++) {
		memset(got, 0, rows * sizeof *got);
		uint8_t *mid = run_ranks(plan[c][0], G, s1, NULL, 0, got, &n);
		assert_int_equal(n, LOADER_STATE_BYTES + 2524 + 8 * NSRC);
		free(run_ranks(plan[c][1], G, s2, mid, n, got + (size_t)s1 * G * T, &n));
		/* The state alone (no mixture record): the draws replay from the seed. */
		int32_t *alone = malloc((size_t)s2 * G * T * sizeof *alone);
		free(run_ranks(plan[c][1], G, s2, mid, LOADER_STATE_BYTES, alone, &n));
		assert_memory_equal(alone, got + (size_t)s1 * G * T, (size_t)s2 * G * T * sizeof *alone);
		free(alone);
		free(mid);
		assert_memory_equal(got, ref, rows * sizeof *got);
	}
	free(ref), free(got);
}

static void a_damaged_or_foreign_mixture_record_is_refused(void **state)
{
	(void)state;
	int32_t buf[10 * 8 * 20];
	size_t n;
	uint8_t *st = run_ranks(1, 8, 10, NULL, 0, buf, &n);
	loader *l = open_at(mix_dir, 20, 8, 0, 1, 0, 0);
	loader_state s;
	titan_err err;
	st[LOADER_STATE_BYTES + 100] ^= 1;
	assert_int_equal(loader_load(l, st, n, &s, &err), -1);
	assert_non_null(strstr(err.msg, "checksum"));
	st[LOADER_STATE_BYTES + 100] ^= 1;
	assert_int_equal(loader_load(l, st, n - 8, &s, &err), -1);
	loader_close(l);
	/* Another mixture of the same folders (other weights) is another data set. */
	char other[320], *srcs[NSRC];
	const double w2[NSRC] = {0.1, 0.2, 0.7};
	snprintf(other, sizeof other, "%s/other", test_tmpdir);
	for (int i = 0; i < NSRC; i++)
		srcs[i] = src_dir[i];
	assert_int_equal(shard_mix_write(other, srcs, w2, NSRC, 42, &err), 0);
	l = open_at(other, 20, 8, 0, 1, 0, 0);
	assert_int_equal(loader_load(l, st, n, &s, &err), -1);
	assert_non_null(strstr(err.msg, "another data set"));
	loader_close(l);
	/* A folder's loader refuses a mixture's bytes. */
	l = open_at(src_dir[0], 20, 8, 0, 1, 0, 0);
	assert_int_equal(loader_load(l, st, n, &s, &err), -1);
	loader_close(l);
	free(st);
}

/* ---- what is refused when opening */

static void a_source_changed_after_mixing_is_refused_naming_it(void **state)
{
	(void)state;
	char copy[320], path[400], *srcs[2];
	snprintf(copy, sizeof copy, "%s/changing", test_tmpdir);
	build_source(copy, 1, 60);
	srcs[0] = src_dir[0];
	srcs[1] = copy;
	char mix2[320];
	snprintf(mix2, sizeof mix2, "%s/mix2", test_tmpdir);
	titan_err err;
	const double w[2] = {1, 1};
	assert_int_equal(shard_mix_write(mix2, srcs, w, 2, 7, &err), 0);
	loader_close(open_at(mix2, 20, 2, 0, 1, 0, 0));
	/* The manifest rewritten with a byte more: same data, another file. */
	snprintf(path, sizeof path, "%s/manifest.json", copy);
	FILE *f = fopen(path, "a");
	assert_non_null(f);
	fputc(' ', f);
	fclose(f);
	loader_opts o = {.dir = mix2, .split = LOADER_TRAIN, .seq_len = 20, .local_batch = 2,
			 .dp_degree = 1};
	assert_null(loader_open(&o, &err));
	printf("# %s\n", err.msg);
	assert_non_null(strstr(err.msg, "mixture source 2"));
	assert_non_null(strstr(err.msg, "changed since the mixture was made"));
	assert_null(strchr(err.msg, '\n'));
	assert_int_equal(shard_mix_verify(mix2, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "changed since the mixture was made"));
}

static void bad_mixtures_are_refused_with_one_line(void **state)
{
	(void)state;
	char out[320], missing[320], *srcs[2];
	snprintf(out, sizeof out, "%s/bad", test_tmpdir);
	snprintf(missing, sizeof missing, "%s/nowhere", test_tmpdir);
	titan_err err;
	const double ok[2] = {1, 2}, neg[2] = {1, -2}, zero[2] = {0, 0};
	srcs[0] = src_dir[0];
	srcs[1] = src_dir[1];
	assert_int_equal(shard_mix_write(out, srcs, neg, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, ">= 0"));
	assert_int_equal(shard_mix_write(out, srcs, zero, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, "sum to 0"));
	srcs[1] = missing;
	assert_int_equal(shard_mix_write(out, srcs, ok, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, "no such folder"));
	srcs[1] = src_dir[0];
	assert_int_equal(shard_mix_write(out, srcs, ok, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, "same data"));
	srcs[1] = mix_dir;
	assert_int_equal(shard_mix_write(out, srcs, ok, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, "a mixture"));
	/* Nothing was made for a refused mixture. */
	assert_int_equal(shard_dir_is_mix(out), 0);
	srcs[1] = src_dir[1];
	assert_int_equal(shard_mix_write(src_dir[2], srcs, ok, 2, 1, &err), -1);
	assert_non_null(strstr(err.msg, "shard folder"));
}

/* The val split of a mixture is its sources' val splits one after another. */
/* SFT packing (0.3.0's ChatDataset) reads one folder of chat shards. */
static void sft_packing_of_a_mixture_is_refused(void **state)
{
	(void)state;
	titan_err err;
	loader_opts o = {.dir = mix_dir, .split = LOADER_TRAIN, .seq_len = 20, .local_batch = 2,
			 .dp_degree = 1, .documents = 1, .sft = 1};
	assert_null(loader_open(&o, &err));
	assert_non_null(strstr(err.msg, "SFT packing reads one shard folder, not a mixture"));
}

static void val_split_reads_each_sources_val_in_turn(void **state)
{
	(void)state;
	const int64_t T = 30;
	loader_opts o = {.dir = mix_dir, .split = LOADER_VAL, .seq_len = T, .local_batch = 1,
			 .dp_degree = 1};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL)
		fail_msg("%s", err.msg);
	const loader_batch *b;
	int last = 0, rows = 0, rc;
	while ((rc = loader_next(l, &b, &err)) == 1) {
		for (int64_t t = 0; t < T; t++) {
			if (b->labels[t] == LOADER_IGNORE_INDEX || b->inputs[t] < 3)
				continue;
			int s = (b->inputs[t] - 3) / RANGE;
			assert_true(s >= last); /* in source order */
			last = s;
		}
		rows++;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(last, NSRC - 1);
	assert_true(rows > 10);
	loader_close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(draws_are_torchtitan_030_interleaved_dataset),
		cmocka_unit_test(weights_that_interleaved_dataset_refuses_are_refused),
		cmocka_unit_test(realised_mixture_is_within_half_a_percent_over_a_million_tokens),
		cmocka_unit_test(each_source_gives_its_own_windows_in_order_and_wraps),
		cmocka_unit_test(documents_packing_030_draws_from_each_sources_documents),
		cmocka_unit_test(same_stream_on_1_2_and_4_ranks_and_across_reshards),
		cmocka_unit_test(a_damaged_or_foreign_mixture_record_is_refused),
		cmocka_unit_test(a_source_changed_after_mixing_is_refused_naming_it),
		cmocka_unit_test(bad_mixtures_are_refused_with_one_line),
		cmocka_unit_test(sft_packing_of_a_mixture_is_refused),
		cmocka_unit_test(val_split_reads_each_sources_val_in_turn),
	};
	return cmocka_run_group_tests(tests, setup, test_tmpdir_remove);
}
