/* fuzz_loader_state030: lib/loader/state030.c's reading of torchtitan 0.3.0's
 * data loader pickle (loader_state_030_decode) against one titan loader.
 *
 * The pickle parser has its own target (fuzz_pickle); this one reaches what
 * is read from a pickle that parses: the keys, their kinds, sample_idx, the
 * buffers checked against the documents, the position they map to.  Random
 * bytes seldom parse, so an input is one of two kinds:
 *   - starting with 0x80 (a pickle's PROTO): the pickle itself;
 *   - else edits of a valid one: byte 0 picks the windows read (of titan's
 *     own encoding, loader_state_030_encode, over the documents below),
 *     byte 1's low bit drops titan's own record (so 0.3.0's keys are read),
 *     and each following 3 bytes (offset low, offset high, value) overwrite
 *     one byte of the encoding.
 * Properties: decoding never crashes and returns 0, 1 or -1 with its reason
 * or error set; an unedited encoding decodes to the windows encoded; a state
 * that decodes is either refused by loader_state_set with a message or reads
 * a batch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/loader.h"
#include "pickle/pickle.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

#define NDOCS 60
#define VOCAB 500
#define SEQ 16
#define BATCH 2

static void check(int ok)
{
	if (!ok)
		abort();
}

static char dir[256];

static void remove_dir(void)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

/* Documents of 1 to 40 tokens (some of one: no pairs), bos 1 and eos 2. */
static int write_docs(tokstream_writer *w, titan_err *err)
{
	uint64_t lcg = 303;
	uint32_t doc[40];
	for (int d = 0; d < NDOCS; d++) {
		lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
		size_t n = d % 13 == 4 ? 1 : 2 + (size_t)(lcg >> 33) % 38;
		doc[0] = 1;
		for (size_t i = 1; i < n; i++)
			doc[i] = i + 1 == n ? 2 : 3 + (uint32_t)((lcg >> (i % 20)) % (VOCAB - 3));
		if (tokstream_write_doc(w, doc, n, err) != 0)
			return -1;
	}
	return 0;
}

/* The shard folder once, in TMPDIR; the loader opened afresh per input. */
static int make_shards(void)
{
	snprintf(dir, sizeof dir, "%s/titan-fuzz-state030.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(dir) == NULL)
		return -1;
	atexit(remove_dir);
	tokstream_header h = {.id_width = 2, .vocab_size = VOCAB, .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	char *buf = NULL;
	size_t size = 0;
	FILE *fp = open_memstream(&buf, &size);
	titan_err err;
	tokstream_writer *w = fp ? tokstream_writer_open(fp, &h, &err) : NULL;
	int rc = w == NULL || write_docs(w, &err) != 0;
	if (w != NULL && tokstream_writer_close(w, &err) != 0)
		rc = 1;
	if (fp != NULL)
		fclose(fp);
	FILE *in = rc == 0 ? fmemopen(buf, size, "rb") : NULL;
	tokstream_reader *r = in ? tokstream_reader_open(in, "mem", &err) : NULL;
	shard_build_opts o = {.out = dir, .shard_tokens = 200, .val_fraction = 0};
	shard_build_stats st;
	if (r == NULL || shard_build(r, &o, &st, &err) != 0)
		rc = 1;
	if (r != NULL)
		tokstream_reader_close(r);
	if (in != NULL)
		fclose(in);
	free(buf);
	return rc ? -1 : 0;
}

static loader *open_loader(void)
{
	loader_opts o = {.dir = dir, .split = LOADER_TRAIN, .seq_len = SEQ, .local_batch = BATCH,
			 .dp_rank = 0, .dp_degree = 1, .documents = 1, .prefetch = 1};
	titan_err err;
	loader *l = loader_open(&o, &err);
	check(l != NULL);
	return l;
}

/* 0.3.0's keys alone: the pickle again without titan's record. */
static int without_titan(uint8_t **p, size_t *n)
{
	static const char *const none[] = {NULL};
	static const pk_allow plain = {none};
	pk_val *root;
	pk_arena *a = NULL;
	titan_err err;
	check(pk_load(*p, *n, &plain, &root, &a, &err) == 0 && root->kind == PK_DICT);
	size_t k = 0;
	for (size_t i = 0; i < root->n; i++) {
		const pk_val *key = root->items[2 * i];
		if (key->kind == PK_STR && strcmp(key->s, "titan_loader_state") == 0)
			continue;
		root->items[2 * k] = root->items[2 * i];
		root->items[2 * k + 1] = root->items[2 * i + 1];
		k++;
	}
	root->n = k;
	pk_buf b = {0};
	int rc = pk_dump(&b, root, 4, &err);
	pk_free(a);
	if (rc != 0) {
		free(b.p);
		return -1;
	}
	free(*p);
	*p = b.p;
	*n = b.n;
	return 0;
}

/* The encoding of windows w, then the input's edits. */
static int edited(loader *l, const uint8_t *data, size_t size, uint8_t **p, size_t *n,
		  uint64_t *windows)
{
	loader_state s;
	loader_state_get(l, &s);
	s.windows = *windows = data[0] % 40;
	const char *why;
	titan_err err;
	if (loader_state_030_encode(l, &s, BATCH, 1, p, n, &why, &err) != 0)
		return -1;
	if (size > 1 && (data[1] & 1) && why == NULL && without_titan(p, n) != 0) {
		free(*p);
		return -1;
	}
	for (size_t i = 2; i + 3 <= size; i += 3) {
		size_t at = ((size_t)data[i] | (size_t)data[i + 1] << 8) % *n;
		(*p)[at] = data[i + 2];
	}
	return 0;
}

static void decode(loader *l, const uint8_t *p, size_t n, int exact, uint64_t windows)
{
	loader_state s;
	char why[256] = "";
	titan_err err = {0};
	int rc = loader_state_030_decode(l, p, n, 1, &s, why, sizeof why, &err);
	check(rc == 0 || rc == 1 || rc == -1);
	check(rc != -1 || err.msg[0] != '\0');
	check(rc != 1 || why[0] != '\0');
	if (exact)
		check(rc == 0 && s.windows == windows);
	if (rc != 0)
		return;
	titan_err e2 = {0};
	if (loader_state_set(l, &s, &e2) != 0) {
		check(e2.msg[0] != '\0');
		return;
	}
	const loader_batch *b;
	titan_err e3 = {0};
	check(loader_next(l, &b, &e3) == 1 && b->B == BATCH && b->T == SEQ);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		check(make_shards() == 0);
		ready = 1;
	}
	if (size == 0)
		return 0;
	loader *l = open_loader();
	if (data[0] == 0x80) {
		decode(l, data, size, 0, 0);
	} else {
		uint8_t *p;
		size_t n;
		uint64_t windows;
		if (edited(l, data, size, &p, &n, &windows) == 0) {
			decode(l, p, n, size <= 2, windows);
			free(p);
		}
	}
	loader_close(l);
	return 0;
}
