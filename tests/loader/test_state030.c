/* torchtitan 0.3.0's data loader state (lib/loader/state030.c) against 0.3.0's
 * HuggingFaceTextDataset replayed here over the same documents: read a
 * document, append its pairs (inputs doc[:-1], labels doc[1:], positions
 * 0..n-2), emit windows of seq_len pairs while the buffer holds one.
 *
 * With arguments, the helper of tests/ckpt/crossing.sh, over a titan-shard
 * folder read as a 0.3.0 run's loader reads it (documents, no shuffle, one
 * rank):
 *   next DIR SEQ BATCH PICKLE N [WORLD]  load PICKLE (0.3.0's state, its
 *       dataloader.world_size WORLD, 1 by default) and print the next N
 *       batches: per row "batch row", then its inputs, labels and positions,
 *       tab-separated, ids space-separated;
 *   encode DIR SEQ BATCH WINDOWS OUT  write the pickle of the state after
 *       WINDOWS windows;
 *   fields PICKLE  print 0.3.0's keys of the pickle (titan's record left out),
 *       sorted, one "key value" a line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader.h"
#include "pickle/pickle.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"
#include "../support/doc_shards.h"

#define SEED 3030u
#define NDOCS 150
#define VOCAB 900
#define SEQ 16
#define BATCH 2

static char tmpdir[256];
static uint32_t *docs[NDOCS];
static size_t lens[NDOCS];

static uint64_t lcg = SEED;
static uint32_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(lcg >> 33);
}

static int setup(void **state)
{
	(void)state;
	printf("# seed %u\n", SEED);
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-state030.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		return -1;
	for (int d = 0; d < NDOCS; d++) {
		/* some of one token (no pairs: 0.3.0 reads them and emits nothing),
		 * some longer than a window */
		lens[d] = d % 17 == 5 ? 1 : 2 + rnd() % (d % 9 == 0 ? 60 : 20);
		docs[d] = malloc(lens[d] * sizeof *docs[d]);
		docs[d][0] = 1;
		for (size_t i = 1; i < lens[d]; i++)
			docs[d][i] = i + 1 == lens[d] ? 2 : 3 + rnd() % (VOCAB - 3);
	}
	tokstream_header h = {.id_width = 2, .vocab_size = VOCAB, .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	shard_build_opts o = {.out = tmpdir, .shard_tokens = 300, .val_fraction = 0};
	titan_err err;
	int rc = test_doc_shards(&h, docs, lens, NDOCS, &o, &err);
	if (rc != 0)
		fprintf(stderr, "%s\n", err.msg);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	for (int d = 0; d < NDOCS; d++)
		free(docs[d]);
	return system(cmd) == 0 ? 0 : -1;
}

static loader *open_030(const char *dir, int64_t seq, int64_t batch, int dp_rank, int dp)
{
	loader_opts o = {.dir = dir, .split = LOADER_TRAIN, .seq_len = seq, .local_batch = batch,
			 .dp_rank = dp_rank, .dp_degree = dp, .documents = 1, .prefetch = 2};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL)
		fprintf(stderr, "%s\n", err.msg);
	return l;
}

/* 0.3.0's dataset state after `windows` windows, replayed. */
typedef struct replay {
	uint64_t sample_idx;
	int64_t in[4096], lab[4096], pos[4096];
	size_t n;
} replay;

static void replay_to(uint64_t windows, replay *r)
{
	memset(r, 0, sizeof *r);
	uint64_t emitted = 0;
	for (int d = 0; d < NDOCS && emitted < windows; d++) {
		for (size_t i = 0; i + 1 < lens[d]; i++, r->n++) {
			r->in[r->n] = docs[d][i];
			r->lab[r->n] = docs[d][i + 1];
			r->pos[r->n] = (int64_t)i;
		}
		r->sample_idx++;
		while (r->n >= SEQ && emitted < windows) {
			r->n -= SEQ;
			memmove(r->in, r->in + SEQ, r->n * sizeof r->in[0]);
			memmove(r->lab, r->lab + SEQ, r->n * sizeof r->lab[0]);
			memmove(r->pos, r->pos + SEQ, r->n * sizeof r->pos[0]);
			emitted++;
		}
	}
}

static pk_val *list_of(pk_arena *a, const int64_t *v, size_t n)
{
	pk_val *l = pk_new(a, PK_LIST);
	for (size_t i = 0; i < n; i++)
		pk_append(a, l, pk_int(a, v[i]));
	return l;
}

static void set(pk_arena *a, pk_val *d, const char *k, pk_val *v)
{
	assert_int_equal(pk_dict_set(a, d, pk_str(a, k), v), 0);
}

/* The pickle 0.3.0 writes for r (its StatefulDataLoader's keys around it). */
static void pickle_030(const replay *r, int64_t epoch, int with_positions, uint8_t **out,
		       size_t *n)
{
	pk_arena *a = pk_arena_new();
	pk_val *root = pk_new(a, PK_DICT), *ds = pk_new(a, PK_DICT), *f = pk_new(a, PK_DICT);
	set(a, ds, "inputs_buffer", list_of(a, r->in, r->n));
	set(a, ds, "labels_buffer", list_of(a, r->lab, r->n));
	if (with_positions)
		set(a, ds, "positions_buffer", list_of(a, r->pos, r->n));
	set(a, ds, "sample_idx", pk_int(a, (int64_t)r->sample_idx));
	set(a, ds, "epoch", pk_int(a, epoch));
	set(a, f, "dataset_iter_state", pk_new(a, PK_NONE));
	set(a, f, "fetcher_ended", pk_bool(a, 0));
	set(a, root, "_num_yielded", pk_int(a, 3));
	set(a, root, "fetcher_state", f);
	set(a, root, "dataset_state", ds);
	pk_buf b = {0};
	titan_err err;
	assert_int_equal(pk_dump(&b, root, 4, &err), 0);
	*out = b.p;
	*n = b.n;
	pk_free(a);
}

static pk_val *load_plain(const uint8_t *p, size_t n, pk_arena **a)
{
	static const char *const none[] = {NULL};
	static const pk_allow plain = {none};
	pk_val *v;
	titan_err err;
	if (pk_load(p, n, &plain, &v, a, &err) != 0)
		fail_msg("%s", err.msg);
	return v;
}

static void list_is(const pk_val *l, const int64_t *v, size_t n)
{
	assert_non_null(l);
	assert_int_equal(l->kind, PK_LIST);
	assert_int_equal(l->n, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(l->items[i]->i, v[i]);
}

/* At every window boundary of the first epoch: titan's pickle holds 0.3.0's
 * state there (sample_idx, the three buffers, epoch 0, the batches counted),
 * and 0.3.0's state (without titan's record) reads back as that position. */
static void every_window_boundary_crosses_both_ways(void **state)
{
	(void)state;
	loader *l = open_030(tmpdir, SEQ, BATCH, 0, 1);
	assert_non_null(l);
	uint64_t W = loader_windows(l);
	assert_true(W > 20);
	replay *r = malloc(sizeof *r);
	titan_err err;
	for (uint64_t w = 0; w <= W; w++) {
		loader_state s, got;
		loader_state_get(l, &s);
		s.windows = w;
		uint8_t *p;
		size_t n;
		const char *why;
		assert_int_equal(loader_state_030_encode(l, &s, BATCH, 1, &p, &n, &why, &err), 0);
		assert_null(why);
		replay_to(w, r);
		pk_arena *a;
		pk_val *root = load_plain(p, n, &a), *ds = pk_dict_get(root, "dataset_state");
		assert_int_equal(pk_dict_get(ds, "sample_idx")->i, (int64_t)r->sample_idx);
		assert_int_equal(pk_dict_get(ds, "epoch")->i, 0);
		list_is(pk_dict_get(ds, "inputs_buffer"), r->in, r->n);
		list_is(pk_dict_get(ds, "labels_buffer"), r->lab, r->n);
		list_is(pk_dict_get(ds, "positions_buffer"), r->pos, r->n);
		assert_int_equal(pk_dict_get(root, "_num_yielded")->i, (int64_t)(w / BATCH));
		assert_int_equal(pk_dict_get(pk_dict_get(root, "_sampler_iter_state"),
					     "samples_yielded")->i, (int64_t)(w / BATCH * BATCH));
		pk_free(a);
		char msg[256];
		assert_int_equal(loader_state_030_decode(l, p, n, 1, &got, msg, sizeof msg, &err), 0);
		assert_string_equal(msg, "titan's record in the pickle");
		assert_int_equal(got.windows, w);
		free(p);
		pickle_030(r, 0, 1, &p, &n);
		got.windows = 12345;
		if (loader_state_030_decode(l, p, n, 1, &got, msg, sizeof msg, &err) != 0)
			fail_msg("window %llu: %s", (unsigned long long)w, err.msg);
		assert_non_null(strstr(msg, "torchtitan 0.3.0's"));
		assert_int_equal(got.windows, w);
		assert_int_equal(loader_state_set(l, &got, &err), 0);
		free(p);
	}
	free(r);
	loader_close(l);
}

/* What does not cross says why, and what is not these documents is refused. */
static void other_states_are_refused_or_told(void **state)
{
	(void)state;
	loader *l = open_030(tmpdir, SEQ, BATCH, 0, 1), *l2 = open_030(tmpdir, SEQ, BATCH, 1, 2);
	loader *l9 = open_030(tmpdir, SEQ + 1, BATCH, 0, 1);
	assert_non_null(l), assert_non_null(l2), assert_non_null(l9);
	replay *r = malloc(sizeof *r);
	replay_to(7, r);
	assert_true(r->n > 1);
	uint8_t *p;
	size_t n;
	char why[256];
	loader_state s;
	titan_err err;
	pickle_030(r, 0, 1, &p, &n);
	assert_int_equal(loader_state_030_decode(l, p, n, 2, &s, why, sizeof why, &err), 1);
	assert_non_null(strstr(why, "split the documents over 2 dp ranks"));
	assert_int_equal(loader_state_030_decode(l9, p, n, 1, &s, why, sizeof why, &err), -1);
	assert_non_null(strstr(err.msg, "not windows of seq_len 17"));
	free(p);
	pickle_030(r, 1, 1, &p, &n);
	assert_int_equal(loader_state_030_decode(l, p, n, 1, &s, why, sizeof why, &err), 1);
	assert_non_null(strstr(why, "in epoch 1"));
	free(p);
	pickle_030(r, 0, 0, &p, &n);
	assert_int_equal(loader_state_030_decode(l, p, n, 1, &s, why, sizeof why, &err), 1);
	assert_non_null(strstr(why, "no positions_buffer"));
	free(p);
	r->lab[1] += 1; /* another data set */
	pickle_030(r, 0, 1, &p, &n);
	assert_int_equal(loader_state_030_decode(l, p, n, 1, &s, why, sizeof why, &err), -1);
	assert_non_null(strstr(err.msg, "dataset_state.labels_buffer[1] is"));
	free(p);
	r->sample_idx = NDOCS + 1;
	pickle_030(r, 0, 1, &p, &n);
	assert_int_equal(loader_state_030_decode(l, p, n, 1, &s, why, sizeof why, &err), -1);
	assert_non_null(strstr(err.msg, "sample_idx 151 is past the 150 documents"));
	free(p);
	/* an object: never built, refused */
	pk_arena *a = pk_arena_new();
	pk_val *root = pk_new(a, PK_DICT), *obj = pk_new(a, PK_OBJ);
	obj->cls = pk_global(a, "os", "system");
	obj->args = pk_new(a, PK_TUPLE);
	pk_append(a, obj->args, pk_str(a, "true"));
	set(a, root, "dataset_state", obj);
	pk_buf b = {0};
	assert_int_equal(pk_dump(&b, root, 4, &err), 0);
	pk_free(a);
	assert_int_equal(loader_state_030_decode(l, b.p, b.n, 1, &s, why, sizeof why, &err), -1);
	assert_non_null(strstr(err.msg, "not a plain pickle of a data loader's state"));
	assert_non_null(strstr(err.msg, "os"));
	free(b.p);
	/* titan's positions 0.3.0 cannot be at: its record alone, and why */
	loader_state_get(l2, &s);
	s.windows = 6;
	const char *w;
	assert_int_equal(loader_state_030_encode(l2, &s, BATCH, 2, &p, &n, &w, &err), 0);
	assert_non_null(w);
	assert_non_null(strstr(w, "split_dataset_by_node"));
	a = NULL;
	root = load_plain(p, n, &a);
	assert_int_equal(root->n, 1);
	assert_null(pk_dict_get(root, "dataset_state"));
	pk_free(a);
	loader_state got;
	assert_int_equal(loader_state_030_decode(l2, p, n, 2, &got, why, sizeof why, &err), 0);
	assert_int_equal(got.windows, 6);
	free(p);
	loader_state_get(l, &s);
	s.windows = loader_windows(l) + 1;
	assert_int_equal(loader_state_030_encode(l, &s, BATCH, 1, &p, &n, &w, &err), 0);
	assert_non_null(strstr(w, "past the first epoch"));
	free(p);
	free(r);
	loader_close(l), loader_close(l2), loader_close(l9);
}

/* ---- the helper of tests/ckpt/crossing.sh */

static int read_file(const char *path, uint8_t **p, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return -1;
	size_t cap = 1 << 16;
	*p = malloc(cap);
	*n = 0;
	size_t got;
	while (*p && (got = fread(*p + *n, 1, cap - *n, f)) > 0)
		if ((*n += got) == cap)
			*p = realloc(*p, cap *= 2);
	fclose(f);
	return *p ? 0 : -1;
}

static void print_ids(const int32_t *v, int64_t n, const char *end)
{
	for (int64_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", v[i]);
	printf("%s", end);
}

static int next_batches(char **argv, int argc)
{
	int64_t seq = atoll(argv[3]), batch = atoll(argv[4]), steps = atoll(argv[6]);
	int64_t world = argc > 7 ? atoll(argv[7]) : 1;
	loader *l = open_030(argv[2], seq, batch, 0, 1);
	uint8_t *p = NULL;
	size_t n;
	loader_state s;
	char why[256] = "";
	titan_err err;
	int rc = l == NULL ? -1 : read_file(argv[5], &p, &n);
	if (rc == 0)
		rc = loader_state_030_decode(l, p, n, world, &s, why, sizeof why, &err);
	if (rc == 1)
		fprintf(stderr, "%s: a state titan's loader cannot continue: %s\n", argv[5], why);
	if (rc == 0)
		rc = loader_state_set(l, &s, &err);
	if (rc == 0)
		fprintf(stderr, "%s: %s; window %llu\n", argv[5], why,
			(unsigned long long)s.windows);
	for (int64_t k = 0; rc == 0 && k < steps; k++) {
		const loader_batch *b;
		if (loader_next(l, &b, &err) != 1)
			rc = -1;
		for (int64_t j = 0; rc == 0 && j < b->B; j++) {
			printf("%lld %lld\t", (long long)k, (long long)j);
			print_ids(b->inputs + j * b->T, b->T, "\t");
			print_ids(b->labels + j * b->T, b->T, "\t");
			print_ids(b->positions + j * b->T, b->T, "\n");
		}
	}
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", argv[5], err.msg);
	free(p);
	loader_close(l);
	return rc != 0;
}

static int encode(char **argv)
{
	loader *l = open_030(argv[2], atoll(argv[3]), atoll(argv[4]), 0, 1);
	if (l == NULL)
		return 1;
	loader_state s;
	loader_state_get(l, &s);
	s.windows = strtoull(argv[5], NULL, 10);
	uint8_t *p;
	size_t n;
	const char *why;
	titan_err err;
	int rc = loader_state_030_encode(l, &s, atoll(argv[4]), 1, &p, &n, &why, &err);
	FILE *f = rc == 0 ? fopen(argv[6], "wb") : NULL;
	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0)
		rc = -1;
	if (rc != 0)
		fprintf(stderr, "%s\n", err.msg);
	else if (why != NULL)
		fprintf(stderr, "no 0.3.0 state: %s\n", why);
	free(p);
	loader_close(l);
	return rc != 0;
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp((*(pk_val *const *)a)->s, (*(pk_val *const *)b)->s);
}

static int fields(const char *path)
{
	uint8_t *p;
	size_t n;
	static const char *const none[] = {NULL};
	static const pk_allow plain = {none};
	pk_val *root;
	pk_arena *a = NULL;
	titan_err err;
	if (read_file(path, &p, &n) != 0 || pk_load(p, n, &plain, &root, &a, &err) != 0 ||
	    root->kind != PK_DICT) {
		fprintf(stderr, "%s: not a plain pickle of a dict\n", path);
		return 1;
	}
	pk_val **keys = malloc((root->n + 1) * sizeof *keys);
	size_t k = 0;
	for (size_t i = 0; i < root->n; i++)
		if (root->items[2 * i]->kind == PK_STR &&
		    strcmp(root->items[2 * i]->s, "titan_loader_state") != 0)
			keys[k++] = root->items[2 * i];
	qsort(keys, k, sizeof *keys, cmp_key);
	char *text = malloc(1 << 20);
	for (size_t i = 0; i < k; i++) {
		pk_repr(pk_dict_get(root, keys[i]->s), text, 1 << 20);
		printf("%s %s\n", keys[i]->s, text);
	}
	free(text);
	free(keys);
	pk_free(a);
	free(p);
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 7 || argc == 8) && strcmp(argv[1], "next") == 0)
		return next_batches(argv, argc);
	if (argc == 7 && strcmp(argv[1], "encode") == 0)
		return encode(argv);
	if (argc == 3 && strcmp(argv[1], "fields") == 0)
		return fields(argv[2]);
	if (argc > 1) {
		fprintf(stderr, "usage: test_state030 [next DIR SEQ BATCH PICKLE N [WORLD] | encode "
			"DIR SEQ BATCH WINDOWS OUT | fields PICKLE]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_window_boundary_crosses_both_ways),
		cmocka_unit_test(other_states_are_refused_or_told),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
