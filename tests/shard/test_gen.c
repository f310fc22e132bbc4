/* A token stream generator for the end-to-end tests (the shell scripts in tests/shard), and
 * unit tests of the shard files it feeds.
 *
 *   test_gen                       run the unit tests
 *   test_gen gen SEED DOCS VOCAB [MAXLEN [FPBYTE]]
 *                                  write a stream to stdout: DOCS documents of
 *                                  BOS (id 1), 0..MAXLEN random ids, EOS (id 2)
 *   test_gen ids FILE              print a stream's documents, one per line
 *   test_gen sft DIR SEQ B DP RANK CALLS
 *                                  print the rows lib/loader's SFT packing gives
 *                                  rank RANK of DP over CALLS calls of B rows:
 *                                  "in", "lab" and "pos" lines of ids per row
 *
 * Random ids come from a fixed LCG so a seed names a stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "loader/loader.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

static uint64_t lcg;
static uint32_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(lcg >> 33);
}

static int gen(FILE *out, uint64_t seed, uint64_t docs, uint32_t vocab, uint32_t maxlen,
	       uint8_t fp)
{
	tokstream_header h = {.id_width = tokstream_id_width(vocab), .vocab_size = vocab,
			      .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	memset(h.fingerprint, fp, 32);
	titan_err err;
	tokstream_writer *w = tokstream_writer_open(out, &h, &err);
	if (w == NULL) {
		fprintf(stderr, "gen: %s\n", err.msg);
		return 1;
	}
	lcg = seed;
	uint32_t *ids = malloc(((size_t)maxlen + 2) * sizeof *ids);
	for (uint64_t d = 0; d < docs; d++) {
		size_t n = rnd() % (maxlen + 1);
		ids[0] = 1;
		for (size_t i = 1; i <= n; i++)
			ids[i] = 3 + rnd() % (vocab - 3);
		ids[n + 1] = 2;
		if (tokstream_write_doc(w, ids, n + 2, &err) != 0) {
			fprintf(stderr, "gen: %s\n", err.msg);
			return 1;
		}
	}
	free(ids);
	return tokstream_writer_close(w, &err) == 0 ? 0 : 1;
}

static int print_ids(const char *path)
{
	FILE *fp = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	titan_err err;
	tokstream_reader *r = fp ? tokstream_reader_open(fp, path, &err) : NULL;
	if (r == NULL) {
		fprintf(stderr, "ids: %s\n", fp ? err.msg : "cannot open");
		return 1;
	}
	const uint32_t *ids;
	size_t n;
	int rc;
	while ((rc = tokstream_read_doc(r, &ids, &n, &err)) == 1) {
		for (size_t i = 0; i < n; i++)
			printf(i ? " %u" : "%u", ids[i]);
		putchar('\n');
	}
	if (rc < 0)
		fprintf(stderr, "ids: %s\n", err.msg);
	tokstream_reader_close(r);
	return rc < 0;
}

/* ---- unit tests of single shard files */

static char tmpdir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-shard.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes docs to a shard, reads every token range and document back. */
static void check_shard(uint32_t vocab, int level, uint32_t frame)
{
	tokstream_header h = {.id_width = tokstream_id_width(vocab), .vocab_size = vocab,
			      .bos_id = -1, .eos_id = 0, .flags = TOKSTREAM_FLAG_EOS};
	memset(h.fingerprint, 7, 32);
	char path[400];
	snprintf(path, sizeof path, "%s/s-%u-%d.bin", tmpdir, vocab, level);
	unlink(path);
	shard_write_opts o = {.stream = &h, .zstd_level = level, .frame_tokens = frame};
	titan_err err;
	shard_writer *w = shard_writer_open(path, &o, &err);
	assert_non_null(w);
	enum { NDOC = 300 };
	size_t total = 0, starts[NDOC];
	uint32_t *all = malloc(NDOC * 200 * sizeof *all);
	lcg = 99;
	for (int d = 0; d < NDOC; d++) {
		size_t n = d == 5 ? 0 : rnd() % 200;
		starts[d] = total;
		for (size_t i = 0; i < n; i++)
			all[total + i] = rnd() % vocab;
		assert_int_equal(shard_writer_add_doc(w, all + total, n, &err), 0);
		total += n;
	}
	/* Not visible under its name until committed. */
	assert_int_not_equal(access(path, F_OK), 0);
	shard_header out;
	assert_int_equal(shard_writer_commit(w, &out, &err), 0);
	shard_file *f = shard_file_open(path, &err);
	assert_non_null(f);
	const shard_header *rh = shard_file_header(f);
	assert_int_equal(rh->n_tokens, total);
	assert_int_equal(rh->n_docs, NDOC);
	assert_int_equal(rh->header_crc, out.header_crc);
	assert_int_equal(shard_file_verify(f, &err), 0);
	uint32_t *buf = malloc((total + 1) * sizeof *buf);
	for (size_t a = 0; a < total; a += 997) {
		size_t n = total - a < 3000 ? total - a : 3000;
		memset(buf, 0xff, n * sizeof *buf);
		assert_int_equal(shard_file_tokens(f, a, n, buf, &err), 0);
		assert_memory_equal(buf, all + a, n * sizeof *buf);
	}
	assert_int_equal(shard_file_tokens(f, total, 1, buf, &err), -1);
	for (int d = 0; d < NDOC; d++) {
		assert_int_equal(shard_file_doc_start(f, (uint64_t)d), starts[d]);
		if (d + 1 < NDOC && starts[d + 1] > starts[d])
			assert_int_equal(shard_file_doc_of(f, starts[d + 1] - 1), d);
	}
	shard_file_close(f);
	free(buf);
	free(all);
}

static void shard_returns_the_tokens_and_documents_written(void **state)
{
	(void)state;
	check_shard(1000, 0, 0);
	check_shard(200000, 0, 0);
}

static void zstd_shard_returns_the_same_tokens_across_frames(void **state)
{
	(void)state;
	check_shard(1000, 3, 1000);
	check_shard(200000, 1, 777);
}

static void damaged_shard_is_refused_with_its_name(void **state)
{
	(void)state;
	check_shard(1000, 0, 0);
	char path[400], cmd[900];
	snprintf(path, sizeof path, "%s/s-1000-0.bin", tmpdir);
	titan_err err;
	/* A flipped data byte passes open (header only) and fails verify. */
	FILE *fp = fopen(path, "r+b");
	fseek(fp, 200, SEEK_SET);
	int c = fgetc(fp);
	fseek(fp, 200, SEEK_SET);
	fputc(c ^ 1, fp);
	fclose(fp);
	shard_file *f = shard_file_open(path, &err);
	assert_non_null(f);
	assert_int_equal(shard_file_verify(f, &err), -1);
	assert_non_null(strstr(err.msg, "data checksum"));
	shard_file_close(f);
	/* Truncation is caught at open. */
	snprintf(cmd, sizeof cmd, "truncate -s -8 '%s'", path);
	assert_int_equal(system(cmd), 0);
	assert_null(shard_file_open(path, &err));
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "truncated"));
	fp = fopen(path, "r+b");
	fputc('X', fp);
	fclose(fp);
	assert_null(shard_file_open(path, &err));
	assert_non_null(strstr(err.msg, "bad magic"));
}

static void val_split_is_exact_and_evenly_spread(void **state)
{
	(void)state;
	shard_manifest m = {.val_fraction = 0.1};
	uint64_t val = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		val += shard_split_of(&m, i) == SHARD_VAL;
		if (i % 100 == 99)
			assert_int_equal(val, (i + 1) / 10);
	}
	m.val_fraction = 0;
	m.val_docs = 3;
	assert_int_equal(shard_split_of(&m, 2), SHARD_VAL);
	assert_int_equal(shard_split_of(&m, 3), SHARD_TRAIN);
}

static void print_row(const char *what, const int32_t *v, int64_t T)
{
	printf("%s", what);
	for (int64_t t = 0; t < T; t++)
		printf(" %d", v[t]);
	printf("\n");
}

static int print_sft(char **a)
{
	loader_opts o = {.dir = a[0], .split = LOADER_TRAIN, .seq_len = atoll(a[1]),
			 .local_batch = atoll(a[2]), .dp_degree = atoi(a[3]), .dp_rank = atoi(a[4]),
			 .sft = 1, .doc_bounds = 1};
	titan_err err;
	loader *l = loader_open(&o, &err);
	if (l == NULL) {
		fprintf(stderr, "test_gen: %s\n", err.msg);
		return 1;
	}
	for (long c = 0; c < atol(a[5]); c++) {
		const loader_batch *b;
		if (loader_next(l, &b, &err) != 1) {
			fprintf(stderr, "test_gen: %s\n", err.msg);
			loader_close(l);
			return 1;
		}
		for (int64_t j = 0; j < b->B; j++) {
			print_row("in", b->inputs + j * b->T, b->T);
			print_row("lab", b->labels + j * b->T, b->T);
			print_row("pos", b->positions + j * b->T, b->T);
		}
	}
	loader_close(l);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "gen") == 0)
		return gen(stdout, strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
			   (uint32_t)strtoul(argv[4], NULL, 10),
			   argc > 5 ? (uint32_t)strtoul(argv[5], NULL, 10) : 500,
			   argc > 6 ? (uint8_t)strtoul(argv[6], NULL, 10) : 0x42);
	if (argc == 3 && strcmp(argv[1], "ids") == 0)
		return print_ids(argv[2]);
	if (argc == 8 && strcmp(argv[1], "sft") == 0)
		return print_sft(argv + 2);
	if (argc > 1) {
		fprintf(stderr, "usage: test_gen [gen SEED DOCS VOCAB [MAXLEN [FP]] | ids FILE | sft DIR SEQ B DP "
			"RANK CALLS]\n");
		return 2;
	}
	printf("# seed 99\n");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shard_returns_the_tokens_and_documents_written),
		cmocka_unit_test(zstd_shard_returns_the_same_tokens_across_frames),
		cmocka_unit_test(damaged_shard_is_refused_with_its_name),
		cmocka_unit_test(val_split_is_exact_and_evenly_spread),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
