/* Unit tests of lib/tokstream: the token stream format of titan-formats(5). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "tokstream/tokstream.h"

#define SEED 20261202u /* fixed; printed by main */

static uint32_t rng_state;
static uint32_t rnd(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return rng_state >> 8;
}

static tokstream_header make_header(uint32_t vocab, uint8_t fp_byte)
{
	tokstream_header h = {.id_width = tokstream_id_width(vocab), .vocab_size = vocab,
			      .bos_id = 1, .eos_id = 2, .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	memset(h.fingerprint, fp_byte, 32);
	return h;
}

/* Writes ndocs random documents; returns the stream in *buf (malloc'd). */
static size_t write_stream(const tokstream_header *h, int ndocs, char **buf, uint32_t ***docs_out,
			   size_t **lens_out)
{
	size_t size = 0;
	FILE *fp = open_memstream(buf, &size);
	assert_non_null(fp);
	titan_err err;
	tokstream_writer *w = tokstream_writer_open(fp, h, &err);
	assert_non_null(w);
	uint32_t **docs = calloc((size_t)ndocs, sizeof *docs);
	size_t *lens = calloc((size_t)ndocs, sizeof *lens);
	for (int d = 0; d < ndocs; d++) {
		lens[d] = d % 7 == 3 ? 0 : rnd() % 300;
		docs[d] = malloc((lens[d] + 1) * sizeof **docs);
		for (size_t i = 0; i < lens[d]; i++)
			docs[d][i] = rnd() % h->vocab_size;
		assert_int_equal(tokstream_write_doc(w, docs[d], lens[d], &err), 0);
	}
	assert_int_equal(tokstream_writer_close(w, &err), 0);
	fclose(fp);
	if (docs_out) {
		*docs_out = docs;
		*lens_out = lens;
	} else {
		for (int d = 0; d < ndocs; d++)
			free(docs[d]);
		free(docs);
		free(lens);
	}
	return size;
}

static void roundtrip(uint32_t vocab)
{
	tokstream_header h = make_header(vocab, 0xab);
	char *buf;
	uint32_t **docs;
	size_t *lens;
	const int nd = 200;
	size_t size = write_stream(&h, nd, &buf, &docs, &lens);
	FILE *fp = fmemopen(buf, size, "rb");
	titan_err err;
	tokstream_reader *r = tokstream_reader_open(fp, "mem", &err);
	assert_non_null(r);
	const tokstream_header *rh = tokstream_reader_header(r);
	assert_int_equal(rh->vocab_size, vocab);
	assert_int_equal(rh->id_width, vocab <= 65536 ? 2 : 4);
	assert_int_equal(rh->bos_id, 1);
	assert_memory_equal(rh->fingerprint, h.fingerprint, 32);
	const uint32_t *ids;
	size_t n;
	uint64_t total = 0;
	for (int d = 0; d < nd; d++) {
		assert_int_equal(tokstream_read_doc(r, &ids, &n, &err), 1);
		assert_int_equal(n, lens[d]);
		if (n)
			assert_memory_equal(ids, docs[d], n * sizeof *ids);
		total += n;
		free(docs[d]);
	}
	assert_int_equal(tokstream_read_doc(r, &ids, &n, &err), 0);
	assert_int_equal(tokstream_reader_docs(r), nd);
	assert_int_equal(tokstream_reader_tokens(r), total);
	assert_int_equal(tokstream_reader_offset(r), size);
	/* Stream size from the format's arithmetic, not from the writer. */
	assert_int_equal(size, 68 + nd * 4 + total * (vocab <= 65536 ? 2 : 4) + 28);
	tokstream_reader_close(r);
	fclose(fp);
	free(docs);
	free(lens);
	free(buf);
}

static void roundtrip_preserves_ids_with_16_bit_ids(void **state)
{
	(void)state;
	roundtrip(2048);
	roundtrip(65536);
}

static void roundtrip_preserves_ids_with_32_bit_ids(void **state)
{
	(void)state;
	roundtrip(65537);
	roundtrip(128256);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The byte layout of a one-document stream, built by hand from the spec. */
static void bytes_match_the_specified_layout(void **state)
{
	(void)state;
	tokstream_header h = make_header(300, 0x5a);
	h.bos_id = -1;
	h.flags = TOKSTREAM_FLAG_EOS;
	uint8_t want[68 + 4 + 3 * 2 + 28] = {0};
	memcpy(want, "TTOK", 4);
	put32(want + 4, 1);
	put32(want + 8, 68);
	put32(want + 12, 2);
	put32(want + 16, 300);
	put32(want + 20, 0xffffffffu);
	put32(want + 24, 2);
	put32(want + 28, 2);
	memset(want + 32, 0x5a, 32);
	put32(want + 64, crc32c_sw(0, want, 64));
	uint8_t *d = want + 68;
	put32(d, 3);
	d[4] = 7, d[5] = 0, d[6] = 0x2b, d[7] = 1, d[8] = 2, d[9] = 0; /* 7, 299, 2 */
	uint8_t *t = d + 10;
	put32(t, 0xffffffffu);
	put32(t + 4, 1);  /* n_docs u64 */
	put32(t + 12, 3); /* n_tokens u64 */
	put32(t + 20, crc32c_sw(0, d, 10));
	put32(t + 24, crc32c_sw(0, t, 24));

	char *buf;
	size_t size = 0;
	FILE *fp = open_memstream(&buf, &size);
	titan_err err;
	tokstream_writer *w = tokstream_writer_open(fp, &h, &err);
	uint32_t ids[3] = {7, 299, 2};
	assert_int_equal(tokstream_write_doc(w, ids, 3, &err), 0);
	assert_int_equal(tokstream_writer_close(w, &err), 0);
	fclose(fp);
	assert_int_equal(size, sizeof want);
	assert_memory_equal(buf, want, sizeof want);
	free(buf);
}

static int read_all(const void *buf, size_t size, int accept, titan_err *err, uint64_t *docs)
{
	FILE *fp = fmemopen((void *)buf, size, "rb");
	if (fp == NULL) /* fmemopen refuses size 0 on some libcs */
		fp = fopen("/dev/null", "rb");
	tokstream_reader *r = tokstream_reader_open(fp, "in.tts", err);
	int rc = -1;
	if (r != NULL) {
		tokstream_reader_accept_mismatch(r, accept);
		const uint32_t *ids;
		size_t n;
		while ((rc = tokstream_read_doc(r, &ids, &n, err)) == 1)
			;
		if (docs)
			*docs = tokstream_reader_docs(r);
		tokstream_reader_close(r);
	}
	fclose(fp);
	return rc;
}

static void concatenated_segments_read_as_one_stream(void **state)
{
	(void)state;
	tokstream_header h = make_header(1000, 1);
	char *a, *b;
	size_t na = write_stream(&h, 10, &a, NULL, NULL);
	size_t nb = write_stream(&h, 5, &b, NULL, NULL);
	char *ab = malloc(na + nb);
	memcpy(ab, a, na);
	memcpy(ab + na, b, nb);
	titan_err err;
	uint64_t docs = 0;
	assert_int_equal(read_all(ab, na + nb, 0, &err, &docs), 0);
	assert_int_equal(docs, 15);
	free(a), free(b), free(ab);
}

static void second_segment_with_other_vocab_is_refused_unless_accepted(void **state)
{
	(void)state;
	tokstream_header h1 = make_header(1000, 1), h2 = make_header(1000, 2);
	char *a, *b;
	size_t na = write_stream(&h1, 3, &a, NULL, NULL);
	size_t nb = write_stream(&h2, 3, &b, NULL, NULL);
	char *ab = malloc(na + nb);
	memcpy(ab, a, na);
	memcpy(ab + na, b, nb);
	titan_err err;
	assert_int_equal(read_all(ab, na + nb, 0, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "vocab mismatch between inputs"));
	assert_int_equal(read_all(ab, na + nb, 1, &err, NULL), 0);
	free(a), free(b), free(ab);
}

static void every_truncation_is_an_error_naming_the_input(void **state)
{
	(void)state;
	tokstream_header h = make_header(70000, 3);
	char *a;
	size_t na = write_stream(&h, 6, &a, NULL, NULL);
	titan_err err;
	for (size_t cut = 0; cut < na; cut++) {
		memset(&err, 0, sizeof err);
		assert_int_equal(read_all(a, cut, 0, &err, NULL), -1);
		assert_non_null(strstr(err.msg, "in.tts"));
	}
	/* A cut after the header and some whole documents says "truncated". */
	assert_int_equal(read_all(a, 68 + 4, 0, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "truncated token stream (no trailer after"));
	assert_int_equal(read_all(a, 0, 0, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "empty input"));
	free(a);
}

static void corrupted_bytes_are_detected(void **state)
{
	(void)state;
	tokstream_header h = make_header(50000, 4);
	char *a;
	size_t na = write_stream(&h, 20, &a, NULL, NULL);
	titan_err err;
	/* Flip a bit in every byte position in turn: each must fail (a bit flip in a
	 * length field turns into a truncation or a count mismatch). */
	for (size_t i = 0; i < na; i += 3) {
		a[i] ^= 0x10;
		assert_int_equal(read_all(a, na, 0, &err, NULL), -1);
		a[i] ^= 0x10;
	}
	assert_int_equal(read_all(a, na, 0, &err, NULL), 0);
	a[0] = 'X';
	assert_int_equal(read_all(a, na, 0, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "bad magic"));
	free(a);
}

static void ids_at_or_above_vocab_size_are_refused(void **state)
{
	(void)state;
	tokstream_header h = make_header(100, 5);
	char *buf;
	size_t size = 0;
	FILE *fp = open_memstream(&buf, &size);
	titan_err err;
	tokstream_writer *w = tokstream_writer_open(fp, &h, &err);
	uint32_t ids[2] = {99, 100};
	assert_int_equal(tokstream_write_doc(w, ids, 2, &err), -1);
	assert_non_null(strstr(err.msg, "id 100"));
	tokstream_writer_abort(w);
	fclose(fp);
	free(buf);
	/* Reader side: patch an id in an otherwise valid stream (CRC fixed up by
	 * reading would fail anyway; the id check must come first). */
	char *a;
	size_t na = write_stream(&h, 1, &a, NULL, NULL);
	uint32_t n;
	memcpy(&n, a + 68, 4);
	if (n > 0) {
		a[68 + 4] = (char)200;
		a[68 + 5] = 0;
		assert_int_equal(read_all(a, na, 0, &err, NULL), -1);
		assert_non_null(strstr(err.msg, "not below vocab_size 100"));
	}
	free(a);
}

/* A later version may append header fields: header_len says how many bytes
 * to skip, and the CRC still sits in the last 4. */
static void longer_header_from_a_later_layout_is_read(void **state)
{
	(void)state;
	tokstream_header h = make_header(1000, 6);
	char *a;
	size_t na = write_stream(&h, 4, &a, NULL, NULL);
	uint8_t *b = malloc(na + 8);
	memcpy(b, a, 64);              /* fields before the CRC */
	memset(b + 64, 0xee, 8);       /* 8 bytes of unknown fields */
	put32(b + 8, 76);
	put32(b + 72, crc32c_sw(0, b, 72));
	memcpy(b + 76, a + 68, na - 68);
	titan_err err;
	uint64_t docs = 0;
	assert_int_equal(read_all(b, na + 8, 0, &err, &docs), 0);
	assert_int_equal(docs, 4);
	put32(b + 8, 5000); /* beyond what a reader accepts */
	assert_int_equal(read_all(b, na + 8, 0, &err, NULL), -1);
	assert_non_null(strstr(err.msg, "header_len 5000"));
	free(a);
	free(b);
}

int main(void)
{
	printf("# seed %u\n", SEED);
	rng_state = SEED;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(roundtrip_preserves_ids_with_16_bit_ids),
		cmocka_unit_test(roundtrip_preserves_ids_with_32_bit_ids),
		cmocka_unit_test(bytes_match_the_specified_layout),
		cmocka_unit_test(concatenated_segments_read_as_one_stream),
		cmocka_unit_test(second_segment_with_other_vocab_is_refused_unless_accepted),
		cmocka_unit_test(every_truncation_is_an_error_naming_the_input),
		cmocka_unit_test(corrupted_bytes_are_detected),
		cmocka_unit_test(ids_at_or_above_vocab_size_are_refused),
		cmocka_unit_test(longer_header_from_a_later_layout_is_read),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
