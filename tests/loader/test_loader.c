/* Unit tests of lib/loader against a packing written here from the generated
 * documents (torchtitan's rule: concatenate, cut seq_len + 1, shift by one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/crc32c.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"
#include "../support/doc_shards.h"

#define SEED 4242u
#define NDOCS 400
#define VOCAB 5000

static char tmpdir[256], plain[300], zdir[300];
static uint32_t *docs[NDOCS];
static size_t lens[NDOCS];
/* The train split's shards, rebuilt from the documents: shard k = docs [k0, k1). */
static uint32_t *shard_tok[64];
static size_t shard_len[64], n_shards;
static uint32_t *val_tok;
static size_t val_len;
static int doc_shard[NDOCS]; /* the train shard of each document, -1 for val */

static uint64_t lcg = SEED;
static uint32_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(lcg >> 33);
}

static void append(uint32_t **buf, size_t *len, const uint32_t *ids, size_t n)
{
	*buf = realloc(*buf, (*len + n + 1) * sizeof **buf);
	memcpy(*buf + *len, ids, n * sizeof *ids);
	*len += n;
}

static void build_sized(const char *dir, int level, uint64_t shard_tokens)
{
	tokstream_header h = {.id_width = 2, .vocab_size = VOCAB, .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	shard_build_opts o = {.out = dir, .shard_tokens = shard_tokens, .val_fraction = 0.1,
			      .zstd_level = level, .frame_tokens = level ? 500 : 0};
	titan_err err;
	if (test_doc_shards(&h, docs, lens, NDOCS, &o, &err) != 0)
		fail_msg("%s", err.msg);
}

static void build(const char *dir, int level)
{
	build_sized(dir, level, 3000);
}

static int setup(void **state)
{
	(void)state;
	printf("# seed %u\n", SEED);
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-loader.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	for (int d = 0; d < NDOCS; d++) {
		lens[d] = 2 + rnd() % 100;
		docs[d] = malloc(lens[d] * sizeof *docs[d]);
		docs[d][0] = 1;
		for (size_t i = 1; i + 1 < lens[d]; i++)
			docs[d][i] = 3 + rnd() % (VOCAB - 3);
		docs[d][lens[d] - 1] = 2;
	}
	snprintf(plain, sizeof plain, "%s/plain", tmpdir);
	snprintf(zdir, sizeof zdir, "%s/zstd", tmpdir);
	build(plain, 0);
	build(zdir, 3);
	/* Reference shards: the split rule and the shard size rule, applied here. */
	shard_manifest m = {.val_fraction = 0.1};
	size_t cur = 0;
	for (int d = 0; d < NDOCS; d++) {
		if (shard_split_of(&m, (uint64_t)d) == SHARD_VAL) {
			append(&val_tok, &val_len, docs[d], lens[d]);
			doc_shard[d] = -1;
			continue;
		}
		append(&shard_tok[cur], &shard_len[cur], docs[d], lens[d]);
		doc_shard[d] = (int)cur;
		if (shard_len[cur] >= 3000)
			cur++;
	}
	n_shards = shard_len[cur] ? cur + 1 : cur;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static loader *open_loader(const char *dir, int split, int64_t T, int64_t B, int rank, int D,
			   int shuffle, int prefetch)
{
	loader_opts o = {.dir = dir, .split = split, .seq_len = T, .local_batch = B,
			 .dp_rank = rank, .dp_degree = D, .seed = 1234, .shuffle = shuffle,
			 .doc_bounds = 1, .prefetch = prefetch};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL)
		fail_msg("%s", err.msg);
	return l;
}

/* Epoch e's stream from the reference shards, in the loader's shard order. */
static uint32_t *epoch_stream(loader *l, uint64_t e, size_t *len)
{
	assert_int_equal(loader_shards(l), n_shards);
	uint32_t order[64];
	loader_shard_order(l, e, order);
	uint32_t *s = NULL;
	*len = 0;
	for (size_t k = 0; k < n_shards; k++)
		append(&s, len, shard_tok[order[k]], shard_len[order[k]]);
	return s;
}

static void next(loader *l, const loader_batch **b)
{
	titan_err err;
	int rc = loader_next(l, b, &err);
	if (rc != 1)
		fail_msg("loader_next: %d %s", rc, rc < 0 ? err.msg : "end");
}

/* Check row j of b against window w of stream s. */
static void row_is_window(const loader_batch *b, int64_t j, const uint32_t *s, uint64_t w)
{
	const int64_t T = b->T;
	const uint32_t *x = s + w * (uint64_t)(T + 1);
	for (int64_t t = 0; t < T; t++) {
		assert_int_equal(b->inputs[j * T + t], x[t]);
		assert_int_equal(b->labels[j * T + t], x[t + 1]);
	}
}

static void unshuffled_order_is_torchtitan_packing_and_reloops(void **state)
{
	(void)state;
	const int64_t T = 31, B = 3;
	loader *l = open_loader(plain, SHARD_TRAIN, T, B, 0, 1, 0, 0);
	size_t len;
	uint32_t *s = epoch_stream(l, 0, &len);
	uint64_t W = len / (T + 1);
	assert_int_equal(loader_windows(l), W);
	assert_int_equal(loader_vocab_size(l), VOCAB);
	const loader_batch *b;
	for (uint64_t p = 0; p < 2 * W + 5; p += B) {
		next(l, &b);
		assert_int_equal(b->position, p);
		assert_int_equal(b->epoch, p / W);
		for (int64_t j = 0; j < B; j++)
			row_is_window(b, j, s, (p + (uint64_t)j) % W);
		assert_int_equal(b->n_valid, B * T);
	}
	free(s);
	loader_close(l);
}

static int cmp_rows(const void *a, const void *b, void *n)
{
	return memcmp(a, b, *(size_t *)n);
}

static void shuffled_epoch_visits_every_window_exactly_once(void **state)
{
	(void)state;
	for (int64_t T = 7; T <= 200; T += 64) {
		loader *l = open_loader(plain, SHARD_TRAIN, T, 1, 0, 1, 1, 2);
		uint64_t W = loader_windows(l);
		size_t row = (size_t)(T + 1) * sizeof(int32_t), n = row;
		for (uint64_t e = 0; e < 2; e++) {
			size_t len;
			uint32_t *s = epoch_stream(l, e, &len);
			assert_int_equal(W, len / (T + 1));
			int32_t *got = malloc(W * row), *want = malloc(W * row);
			uint64_t moved = 0;
			for (uint64_t p = 0; p < W; p++) {
				const loader_batch *b;
				next(l, &b);
				assert_int_equal(b->epoch, e);
				memcpy(got + p * (T + 1), b->inputs, T * sizeof(int32_t));
				got[p * (T + 1) + T] = b->labels[T - 1];
				for (int64_t t = 0; t <= T; t++)
					want[p * (T + 1) + t] = (int32_t)s[p * (T + 1) + t];
				moved += memcmp(got + p * (T + 1), want + p * (T + 1), row) != 0;
			}
			assert_true(moved > W / 2); /* it did shuffle */
			qsort_r(got, W, row, cmp_rows, &n);
			qsort_r(want, W, row, cmp_rows, &n);
			assert_memory_equal(got, want, W * row);
			free(got), free(want), free(s);
		}
		loader_close(l);
	}
}

static void shard_order_and_windows_depend_on_seed_only(void **state)
{
	(void)state;
	loader *a = open_loader(plain, SHARD_TRAIN, 15, 4, 0, 1, 1, 0);
	loader *b = open_loader(plain, SHARD_TRAIN, 15, 4, 0, 1, 1, 3);
	loader_opts o = {.dir = plain, .seq_len = 15, .local_batch = 4, .dp_degree = 1,
			 .seed = 99, .shuffle = 1};
	titan_err err;
	loader *c = loader_open(&o, &err);
	assert_non_null(c);
	int same_ac = 1;
	for (int i = 0; i < 50; i++) {
		const loader_batch *x, *y, *z;
		next(a, &x), next(b, &y), next(c, &z);
		assert_memory_equal(x->inputs, y->inputs, 4 * 15 * sizeof(int32_t));
		same_ac &= memcmp(x->inputs, z->inputs, 4 * 15 * sizeof(int32_t)) == 0;
	}
	assert_false(same_ac);
	loader_close(a), loader_close(b), loader_close(c);
}

static void doc_ids_count_document_starts_in_each_row(void **state)
{
	(void)state;
	const int64_t T = 63, B = 2;
	loader *l = open_loader(plain, SHARD_TRAIN, T, B, 0, 1, 0, 1);
	/* Reference: document start offsets in the epoch-0 stream. */
	size_t len, pos = 0;
	uint32_t *s = epoch_stream(l, 0, &len);
	uint8_t *start = calloc(len + 1, 1);
	shard_manifest m = {.val_fraction = 0.1};
	for (int d = 0; d < NDOCS; d++)
		if (shard_split_of(&m, (uint64_t)d) == SHARD_TRAIN) {
			start[pos] = 1;
			pos += lens[d];
		}
	const loader_batch *b;
	for (int i = 0; i < 20; i++) {
		next(l, &b);
		for (int64_t j = 0; j < B; j++) {
			uint64_t w0 = (b->position + (uint64_t)j) * (T + 1);
			int32_t c = 0;
			for (int64_t t = 0; t < T; t++) {
				c += t > 0 && start[w0 + t];
				assert_int_equal(b->doc_ids[j * T + t], c);
			}
		}
	}
	free(start), free(s);
	loader_close(l);
}

/* torchtitan 0.3.0's pairs of epoch e in the loader's shard order: each
 * train document of n tokens gives inputs doc[:-1], labels doc[1:] and
 * positions 0..n-2. */
static size_t epoch_pairs(loader *l, uint64_t e, int32_t **in, int32_t **lab, int32_t **pos)
{
	uint32_t order[64];
	loader_shard_order(l, e, order);
	size_t n = 0, cap = 0;
	*in = *lab = *pos = NULL;
	for (size_t k = 0; k < n_shards; k++)
		for (int d = 0; d < NDOCS; d++) {
			if (doc_shard[d] != (int)order[k])
				continue;
			if (n + lens[d] > cap) {
				cap = 2 * (n + lens[d]);
				*in = realloc(*in, cap * sizeof **in);
				*lab = realloc(*lab, cap * sizeof **lab);
				*pos = realloc(*pos, cap * sizeof **pos);
			}
			for (size_t i = 0; i + 1 < lens[d]; i++, n++) {
				(*in)[n] = (int32_t)docs[d][i];
				(*lab)[n] = (int32_t)docs[d][i + 1];
				(*pos)[n] = (int32_t)i;
			}
		}
	return n;
}

/* The 0.3.0 packing, shuffled and not, on 2 ranks: each row is window
 * loader_window_at(p) of the pair stream, its positions counted from 0 at the
 * window's start for a document begun before it; a state taken midway
 * resumes bit for bit; the state says documents and a windows' loader refuses
 * it. */
static void documents_pack_as_torchtitan_030_and_resume(void **state)
{
	(void)state;
	const int64_t T = 50, B = 3;
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		loader_opts o = {.dir = zdir, .split = SHARD_TRAIN, .seq_len = T, .local_batch = B,
				 .dp_rank = 1, .dp_degree = 2, .seed = 1234, .shuffle = shuffle,
				 .documents = 1, .doc_bounds = 1, .prefetch = 2};
		titan_err err;
		loader *l = loader_open(&o, &err), *r = loader_open(&o, &err);
		assert_non_null(l);
		assert_non_null(r);
		int32_t *in, *lab, *pos;
		size_t n = epoch_pairs(l, 0, &in, &lab, &pos);
		assert_int_equal(loader_windows(l), n / (size_t)T);
		const loader_batch *b, *c;
		loader_state st;
		for (int i = 0; i < 12; i++) {
			next(l, &b);
			if (i == 5) {
				loader_state_get(l, &st);
				assert_int_equal(st.documents, 1);
				assert_int_equal(loader_state_set(r, &st, &err), 0);
			}
			if (i > 5) {
				next(r, &c);
				assert_memory_equal(b->positions, c->positions, B * T * sizeof(int32_t));
				assert_memory_equal(b->labels, c->labels, B * T * sizeof(int32_t));
			}
			for (int64_t j = 0; j < B; j++) {
				uint64_t w = loader_window_at(l, b->position + (uint64_t)(B + j));
				const int32_t *x = pos + w * T;
				assert_memory_equal(b->inputs + j * T, in + w * T, T * sizeof(int32_t));
				assert_memory_equal(b->labels + j * T, lab + w * T, T * sizeof(int32_t));
				for (int64_t t = 0, lead = 1; t < T; t++) {
					lead &= t == 0 || x[t] != 0;
					assert_int_equal(b->positions[j * T + t], lead ? x[t] - x[0] : x[t]);
					assert_int_equal(b->doc_ids[j * T + t] > (t ? b->doc_ids[j * T + t - 1] : -1),
							 b->positions[j * T + t] == 0);
				}
			}
		}
		free(in), free(lab), free(pos);
		loader_close(l), loader_close(r);
	}
	loader *w = open_loader(zdir, SHARD_TRAIN, T, B, 1, 2, 0, 0);
	loader_state st = {.seed = 1234, .seq_len = T, .documents = 1};
	loader_state got;
	loader_state_get(w, &got);
	st.data_tokens = got.data_tokens, st.data_crc = got.data_crc;
	titan_err err;
	assert_int_equal(loader_state_set(w, &st, &err), -1);
	assert_non_null(strstr(err.msg, "documents' packing; this loader has"));
	loader_close(w);
}

static void compressed_shards_give_the_same_batches(void **state)
{
	(void)state;
	loader *a = open_loader(plain, SHARD_TRAIN, 100, 2, 1, 2, 1, 0);
	loader *b = open_loader(zdir, SHARD_TRAIN, 100, 2, 1, 2, 1, 2);
	for (int i = 0; i < 60; i++) {
		const loader_batch *x, *y;
		next(a, &x), next(b, &y);
		assert_memory_equal(x->inputs, y->inputs, 200 * sizeof(int32_t));
		assert_memory_equal(x->labels, y->labels, 200 * sizeof(int32_t));
		assert_memory_equal(x->doc_ids, y->doc_ids, 200 * sizeof(int32_t));
	}
	loader_close(a), loader_close(b);
}

static void same_state(const loader_state *a, const loader_state *b)
{
	assert_int_equal(a->seed, b->seed);
	assert_int_equal(a->windows, b->windows);
	assert_int_equal(a->seq_len, b->seq_len);
	assert_int_equal(a->shuffle, b->shuffle);
	assert_int_equal(a->split, b->split);
	assert_int_equal(a->data_tokens, b->data_tokens);
	assert_int_equal(a->data_crc, b->data_crc);
}

static void resume_after_save_is_bit_exact(void **state)
{
	(void)state;
	const int64_t T = 50, B = 3;
	loader *a = open_loader(zdir, SHARD_TRAIN, T, B, 1, 2, 1, 2);
	const loader_batch *x, *y;
	for (int i = 0; i < 37; i++)
		next(a, &x);
	loader_state st, back;
	loader_state_get(a, &st);
	assert_int_equal(st.windows, 37 * B * 2);
	uint8_t bytes[LOADER_STATE_BYTES];
	loader_state_encode(&st, bytes);
	titan_err err;
	assert_int_equal(loader_state_decode(bytes, sizeof bytes, &back, &err), 0);
	char *json = loader_state_to_json(&st, 0);
	loader_state fromj;
	assert_int_equal(loader_state_from_json(json, &fromj, &err), 0);
	same_state(&fromj, &st);
	same_state(&back, &st);
	free(json);
	loader *b = open_loader(zdir, SHARD_TRAIN, T, B, 1, 2, 1, 2);
	next(b, &y); /* moves b somewhere else first: set must override it */
	assert_int_equal(loader_state_set(b, &back, &err), 0);
	for (int i = 0; i < 40; i++) {
		next(a, &x), next(b, &y);
		assert_int_equal(x->position, y->position);
		assert_memory_equal(x->inputs, y->inputs, B * T * sizeof(int32_t));
		assert_memory_equal(x->labels, y->labels, B * T * sizeof(int32_t));
		assert_memory_equal(x->doc_ids, y->doc_ids, B * T * sizeof(int32_t));
	}
	bytes[20] ^= 1;
	assert_int_equal(loader_state_decode(bytes, sizeof bytes, &back, &err), -1);
	loader_close(a), loader_close(b);
}

/* D ranks with local batch B for `steps` calls each, from state s (or the
 * start); rows gathered in global order into out; returns the final state. */
static loader_state run_ranks(int D, int64_t B, int steps, const loader_state *s, int32_t *out)
{
	const int64_t T = 20;
	loader_state end[8];
	for (int r = 0; r < D; r++) {
		loader *l = open_loader(plain, SHARD_TRAIN, T, B, r, D, 1, r % 2 ? 2 : 0);
		titan_err err;
		if (s != NULL && loader_state_set(l, s, &err) != 0)
			fail_msg("%s", err.msg);
		for (int i = 0; i < steps; i++) {
			const loader_batch *b;
			next(l, &b);
			int32_t *dst = out + ((int64_t)i * D * B + r * B) * T;
			memcpy(dst, b->inputs, B * T * sizeof(int32_t));
		}
		loader_state_get(l, &end[r]);
		loader_close(l);
	}
	for (int r = 1; r < D; r++) /* every rank holds the same state */
		same_state(&end[r], &end[0]);
	return end[0];
}

static void reshard(int D1, int D2)
{
	const int64_t T = 20, G = 8; /* global batch */
	const int s1 = 13, s2 = 11;
	int32_t *ref = malloc((size_t)(s1 + s2) * G * T * sizeof(int32_t));
	int32_t *got = malloc((size_t)(s1 + s2) * G * T * sizeof(int32_t));
	run_ranks(1, G, s1 + s2, NULL, ref);
	loader_state mid = run_ranks(D1, G / D1, s1, NULL, got);
	assert_int_equal(mid.windows, (uint64_t)s1 * G);
	run_ranks(D2, G / D2, s2, &mid, got + (size_t)s1 * G * T);
	/* Same rows in the same global order: nothing repeated, nothing skipped. */
	assert_memory_equal(got, ref, (size_t)(s1 + s2) * G * T * sizeof(int32_t));
	free(ref), free(got);
}

static void resharding_4_to_2_ranks_continues_the_global_order(void **state)
{
	(void)state;
	reshard(4, 2);
}

static void resharding_2_to_4_ranks_continues_the_global_order(void **state)
{
	(void)state;
	reshard(2, 4);
}

static void val_loader_reads_val_once_with_padding(void **state)
{
	(void)state;
	const int64_t T = 40, B = 2;
	const int D = 3;
	size_t got_len = 0;
	uint32_t *got = calloc(val_len + (size_t)D * B * (T + 1) * 2, sizeof *got);
	int calls[3] = {0};
	int64_t valid = 0;
	for (int r = 0; r < D; r++) {
		loader *l = open_loader(plain, SHARD_VAL, T, B, r, D, 1, r);
		const loader_batch *b;
		titan_err err;
		int rc;
		while ((rc = loader_next(l, &b, &err)) == 1) {
			calls[r]++;
			valid += b->n_valid;
			for (int64_t j = 0; j < B; j++) {
				uint64_t w = b->position + (uint64_t)r * B + (uint64_t)j;
				for (int64_t t = 0; t < T; t++) {
					int32_t lab = b->labels[j * T + t];
					if (lab == LOADER_IGNORE_INDEX)
						continue;
					size_t at = w * (T + 1) + t;
					got[at] = (uint32_t)b->inputs[j * T + t];
					got[at + 1] = (uint32_t)lab;
					if (at + 2 > got_len)
						got_len = at + 2;
				}
			}
		}
		assert_int_equal(rc, 0);
		assert_int_equal(loader_next(l, &b, &err), 0); /* stays at the end */
		loader_close(l);
	}
	assert_int_equal(calls[0], calls[1]);
	assert_int_equal(calls[0], calls[2]);
	assert_int_equal(got_len, val_len);
	assert_memory_equal(got, val_tok, val_len * sizeof *got);
	uint64_t W = (val_len + T) / (T + 1);
	assert_int_equal(valid, (int64_t)(val_len - W)); /* each window loses one label */
	free(got);
}

static void state_from_other_data_or_seq_len_is_refused(void **state)
{
	(void)state;
	loader *a = open_loader(plain, SHARD_TRAIN, 20, 2, 0, 1, 1, 0);
	loader *z = open_loader(zdir, SHARD_TRAIN, 20, 2, 0, 1, 1, 0);
	loader *t = open_loader(plain, SHARD_TRAIN, 21, 2, 0, 1, 1, 0);
	loader_state s;
	loader_state_get(a, &s);
	titan_err err;
	assert_int_equal(loader_state_set(t, &s, &err), -1);
	assert_non_null(strstr(err.msg, "seq_len"));
	/* Same tokens, but compressed shards have other CRCs: another data set. */
	assert_int_equal(loader_state_set(z, &s, &err), -1);
	assert_non_null(strstr(err.msg, "another data set"));
	loader_close(a), loader_close(z), loader_close(t);
}

/* A copy of the uncompressed folder, its first train shard's data changed
 * by edit (at the data's start) and, when fix, its data and header CRCs
 * (and the manifest's) made right again; *dir is the copy. */
static void damaged_copy(const char *name, void (*edit)(uint8_t *data), int fix, char *dir,
			 size_t cap)
{
	snprintf(dir, cap, "%s/%s", tmpdir, name);
	char cmd[1400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, plain, dir);
	assert_int_equal(system(cmd), 0);
	titan_err err;
	shard_manifest m;
	assert_int_equal(shard_manifest_read(dir, &m, &err), 0);
	shard_entry *e = &m.split[SHARD_TRAIN].shards[0];
	char path[1200];
	snprintf(path, sizeof path, "%s/%s", dir, e->file);
	shard_file *sf = shard_file_open(path, &err);
	assert_non_null(sf);
	shard_header h = *shard_file_header(sf);
	shard_file_close(sf);
	FILE *fp = fopen(path, "r+b");
	assert_non_null(fp);
	uint8_t *buf = malloc((size_t)(h.index_offset + h.index_bytes));
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)(h.index_offset + h.index_bytes), fp),
			 (size_t)(h.index_offset + h.index_bytes));
	edit(buf + h.data_offset);
	if (fix) {
		/* the header's data_crc (offset 76) and header_crc (124), LE */
		uint32_t dc = crc32c(0, buf + h.data_offset, (size_t)h.data_bytes);
		for (int b = 0; b < 4; b++)
			buf[76 + b] = (uint8_t)(dc >> (8 * b));
		uint32_t hc = crc32c(0, buf, 124);
		for (int b = 0; b < 4; b++)
			buf[124 + b] = (uint8_t)(hc >> (8 * b));
		e->data_crc = dc;
		e->header_crc = hc;
		assert_int_equal(shard_manifest_write(dir, &m, &err), 0);
	}
	assert_int_equal(fseek(fp, 0, SEEK_SET), 0);
	assert_int_equal(fwrite(buf, 1, (size_t)(h.index_offset + h.index_bytes), fp),
			 (size_t)(h.index_offset + h.index_bytes));
	assert_int_equal(fclose(fp), 0);
	free(buf);
	shard_manifest_free(&m);
}

static void flip_byte(uint8_t *data)
{
	data[10] ^= 1;
}

/* ids are u16 (VOCAB 5000): the second token becomes 65535 */
static void out_of_vocab(uint8_t *data)
{
	data[2] = data[3] = 0xff;
}

/* On main the loader checked a shard's header only; titan-shard verify's
 * data CRC and the manifest's vocabulary were left to verify. */
static void a_shard_with_a_flipped_data_byte_is_refused_naming_it(void **state)
{
	(void)state;
	char dir[600];
	damaged_copy("flipped", flip_byte, 0, dir, sizeof dir);
	for (int prefetch = 0; prefetch < 2; prefetch++) {
		loader *l = open_loader(dir, SHARD_TRAIN, 20, 1, 0, 1, 0, prefetch);
		const loader_batch *b;
		titan_err err;
		assert_int_equal(loader_next(l, &b, &err), -1);
		assert_non_null(strstr(err.msg, "/flipped/train-000000.bin: data checksum"));
		loader_close(l);
	}
}

static void ids_beyond_the_manifest_vocabulary_are_refused(void **state)
{
	(void)state;
	char dir[600];
	damaged_copy("oov", out_of_vocab, 1, dir, sizeof dir);
	loader *l = open_loader(dir, SHARD_TRAIN, 20, 1, 0, 1, 0, 0);
	const loader_batch *b;
	titan_err err;
	assert_int_equal(loader_next(l, &b, &err), -1);
	assert_non_null(strstr(err.msg, "/oov/train-000000.bin: an id near token 0 is not below "
				       "vocab_size 5000"));
	loader_close(l);
}

/* test_loader bench DIR SEQ_LEN BATCH PREFETCH SHUFFLE: loader tokens/s on
 * rank 0 of 1 for about two seconds (used by scripts/bench/shard.sh). */
static int bench(char **argv)
{
	loader_opts o = {.dir = argv[2], .split = SHARD_TRAIN, .seq_len = atoll(argv[3]),
			 .local_batch = atoll(argv[4]), .dp_degree = 1, .seed = 7,
			 .prefetch = atoi(argv[5]), .shuffle = atoi(argv[6]), .doc_bounds = 1};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL) {
		fprintf(stderr, "bench: %s\n", err.msg);
		return 1;
	}
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	double sec = 0;
	int64_t tokens = 0, sum = 0;
	while (sec < 2.0) {
		const loader_batch *x;
		for (int i = 0; i < 16; i++) {
			if (loader_next(l, &x, &err) != 1) {
				fprintf(stderr, "bench: %s\n", err.msg);
				return 1;
			}
			tokens += x->B * x->T;
			sum += x->inputs[0]; /* touch the batch */
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		sec = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
	}
	printf("%.0f %lld\n", (double)tokens / sec, (long long)(sum & 1));
	loader_close(l);
	return 0;
}

/* Shards stay mapped without a descriptor each: far more shards than the
 * descriptor limit open fine. */
static void many_shards_open_under_a_small_descriptor_limit(void **state)
{
	(void)state;
	char dir[300];
	snprintf(dir, sizeof dir, "%s/many", tmpdir);
	build_sized(dir, 3, 60); /* ~300 shards */
	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	loader_opts o = {.dir = dir, .seq_len = 64, .local_batch = 4, .dp_degree = 1,
			 .shuffle = 1, .prefetch = 1};
	titan_err err;
	loader *l = loader_open(&o, &err);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	if (l == NULL)
		fail_msg("%s", err.msg);
	assert_true(loader_shards(l) > 200);
	const loader_batch *b;
	for (int i = 0; i < 100; i++)
		next(l, &b);
	loader_close(l);
}

int main(int argc, char **argv)
{
	if (argc == 7 && strcmp(argv[1], "bench") == 0)
		return bench(argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unshuffled_order_is_torchtitan_packing_and_reloops),
		cmocka_unit_test(shuffled_epoch_visits_every_window_exactly_once),
		cmocka_unit_test(shard_order_and_windows_depend_on_seed_only),
		cmocka_unit_test(doc_ids_count_document_starts_in_each_row),
		cmocka_unit_test(compressed_shards_give_the_same_batches),
		cmocka_unit_test(documents_pack_as_torchtitan_030_and_resume),
		cmocka_unit_test(resume_after_save_is_bit_exact),
		cmocka_unit_test(resharding_4_to_2_ranks_continues_the_global_order),
		cmocka_unit_test(resharding_2_to_4_ranks_continues_the_global_order),
		cmocka_unit_test(val_loader_reads_val_once_with_padding),
		cmocka_unit_test(state_from_other_data_or_seq_len_is_refused),
		cmocka_unit_test(many_shards_open_under_a_small_descriptor_limit),
		cmocka_unit_test(a_shard_with_a_flipped_data_byte_is_refused_naming_it),
		cmocka_unit_test(ids_beyond_the_manifest_vocabulary_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
