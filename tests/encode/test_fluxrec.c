/* Tests of lib/fluxrec, the Flux record stream and its shard files
 * (titan-formats(5), FLUX RECORDS): round trips, and every damage refused
 * with a message naming what is wrong: cuts, checksums, reserved bytes, ids
 * outside the vocabulary, headers that differ between segments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/testutil.h"
#include "core/crc32c.h"
#include "fluxrec/fluxrec.h"

/* A small header: T5 4 x 3, CLIP 5 ids and 2 pooled, 8 x 8 pixels, moments
 * 4 x 1 x 1, float32. */
static void small_header(fluxrec_header *h, uint32_t flags)
{
	memset(h, 0, sizeof *h);
	*h = (fluxrec_header){.flags = flags, .image_size = 8, .key_bytes = FLUXREC_KEY_BYTES,
			      .t5_len = 4, .t5_dim = 3, .t5_vocab = 100, .clip_len = 5,
			      .clip_dim = 2, .clip_vocab = 50, .seed = 42, .empty_t5_tokens = 1,
			      .empty_clip_tokens = 2};
	if (flags & FLUXREC_MOMENTS) {
		h->latent_channels = 4;
		h->latent_height = h->latent_width = 1;
		h->ae_scale = 0.3611f;
		h->ae_shift = 0.1159f;
	}
	titan_err e;
	assert_int_equal(fluxrec_header_layout(h, &e), 0);
	h->empty_t5_ids[0] = 1;
	h->empty_clip_ids[0] = 49;
	((float *)h->empty_t5)[3] = 0.5f;
	memset(h->t5_weights, 0xab, 32);
}

/* Record i: ids i + k, values i + k / 8, pixels k + i. */
static void make_record(const fluxrec_header *h, uint8_t *rec, int i)
{
	titan_err e;
	char key[32];
	snprintf(key, sizeof key, "%09d", i);
	assert_int_equal(fluxrec_record_init(h, rec, (uint64_t)i * 2, key, &e), 0);
	fluxrec_record_set_image(rec, 10 + (uint32_t)i, 8, (uint32_t)i);
	fluxrec_record_set_tokens(rec, 2, 3);
	fluxrec_layout l;
	fluxrec_layout_of(h, &l);
	int32_t *t5 = (int32_t *)(void *)(rec + l.t5_ids), *cl = (int32_t *)(void *)(rec + l.clip_ids);
	for (uint32_t k = 0; k < h->t5_len; k++)
		t5[k] = (int32_t)((uint32_t)i + k) % 100;
	for (uint32_t k = 0; k < h->clip_len; k++)
		cl[k] = (int32_t)((uint32_t)i + k) % 50;
	float *s = (float *)(void *)(rec + l.t5);
	for (uint32_t k = 0; k < h->t5_len * h->t5_dim; k++)
		s[k] = (float)i + (float)k / 8;
	if (l.pixels)
		for (uint64_t k = 0; k < l.pixels_bytes; k++)
			rec[l.pixels + k] = (uint8_t)(k + (uint64_t)i);
	fluxrec_record_seal(h, rec);
}

/* A stream of n records in memory (caller frees *buf). */
static size_t make_stream(const fluxrec_header *h, int n, int first, uint8_t **buf)
{
	size_t size;
	FILE *fp = open_memstream((char **)buf, &size);
	assert_non_null(fp);
	titan_err e;
	fluxrec_writer *w = fluxrec_writer_open(fp, h, &e);
	assert_non_null(w);
	uint8_t *rec = malloc(h->record_bytes);
	for (int i = 0; i < n; i++) {
		make_record(h, rec, first + i);
		assert_int_equal(fluxrec_write(w, rec, &e), 0);
	}
	assert_int_equal(fluxrec_writer_close(w, &e), 0);
	fclose(fp);
	free(rec);
	return size;
}

/* Read a stream: the records' count, or -1 with the message in *e. */
static int read_all(const uint8_t *buf, size_t n, titan_err *e)
{
	FILE *fp = fmemopen((void *)buf, n, "rb");
	if (n == 0)
		fp = fopen("/dev/null", "rb");
	assert_non_null(fp);
	fluxrec_reader *r = fluxrec_reader_open(fp, "mem", e);
	int count = 0, rc = r ? 1 : -1;
	const uint8_t *rec;
	while (rc == 1 && (rc = fluxrec_read(r, &rec, e)) == 1)
		count++;
	fluxrec_reader_close(r);
	fclose(fp);
	return rc < 0 ? -1 : count;
}

static void headers_round_trip_with_8_aligned_records(void **state)
{
	(void)state;
	for (uint32_t flags = 1; flags < 8; flags++) {
		if (!(flags & 3))
			continue;
		fluxrec_header h, back;
		small_header(&h, flags);
		assert_int_equal(h.record_bytes % 8, 0);
		assert_int_equal(h.header_len % 8, 0);
		uint8_t *b = malloc(h.header_len);
		fluxrec_header_encode(&h, b);
		titan_err e;
		assert_int_equal(fluxrec_header_decode(b, h.header_len, &back, "h", &e), 0);
		assert_int_equal(back.record_bytes, h.record_bytes);
		assert_int_equal(back.flags, flags);
		assert_int_equal(back.seed, 42);
		assert_memory_equal(back.t5_weights, h.t5_weights, 32);
		assert_memory_equal(back.empty_t5, h.empty_t5, 4 * 12);
		assert_int_equal(back.empty_clip_ids[0], 49);
		fluxrec_layout l;
		fluxrec_layout_of(&h, &l);
		assert_int_equal(l.t5 % 8, 0);
		assert_int_equal(l.crc + 4, h.record_bytes);
		assert_int_equal(!!(flags & FLUXREC_PIXELS), l.pixels != 0);
		assert_int_equal(!!(flags & FLUXREC_MOMENTS), l.moments != 0);
		fluxrec_header_free(&h);
		fluxrec_header_free(&back);
		free(b);
	}
}

static void bad_headers_are_refused(void **state)
{
	(void)state;
	fluxrec_header h, back;
	small_header(&h, FLUXREC_PIXELS);
	uint8_t *b = malloc(h.header_len);
	titan_err e;
	fluxrec_header_encode(&h, b);
	b[68] = 1; /* reserved, CRC made good */
	uint32_t crc = crc32c(0, b, h.header_len - 4);
	memcpy(b + h.header_len - 4, &crc, 4);
	assert_int_equal(fluxrec_header_decode(b, h.header_len, &back, "h", &e), -1);
	assert_non_null(strstr(e.msg, "reserved bytes"));
	fluxrec_header_encode(&h, b);
	b[100] ^= 1;
	assert_int_equal(fluxrec_header_decode(b, h.header_len, &back, "h", &e), -1);
	assert_non_null(strstr(e.msg, "checksum"));
	fluxrec_header_encode(&h, b);
	b[4] = 9;
	assert_int_equal(fluxrec_header_decode(b, h.header_len, &back, "h", &e), -1);
	assert_non_null(strstr(e.msg, "version 9"));
	/* an empty id outside the vocabulary, CRC made good */
	h.empty_clip_ids[1] = 50;
	fluxrec_header_encode(&h, b);
	assert_int_equal(fluxrec_header_decode(b, h.header_len, &back, "h", &e), -1);
	assert_non_null(strstr(e.msg, "empty CLIP id 50 at position 1"));
	fluxrec_header bad = {.image_size = 8, .key_bytes = FLUXREC_KEY_BYTES, .t5_len = 4,
			      .t5_dim = 3, .t5_vocab = 9, .clip_len = 5, .clip_dim = 2, .clip_vocab = 9};
	assert_int_equal(fluxrec_header_layout(&bad, &e), -1);
	assert_non_null(strstr(e.msg, "neither pixels nor moments"));
	bad.flags = FLUXREC_PIXELS;
	bad.t5_len = 1u << 17;
	assert_int_equal(fluxrec_header_layout(&bad, &e), -1);
	assert_non_null(strstr(e.msg, "out of range"));
	fluxrec_header_free(&h);
	free(b);
}

static void streams_round_trip_and_every_cut_is_refused(void **state)
{
	(void)state;
	fluxrec_header h;
	small_header(&h, FLUXREC_PIXELS | FLUXREC_MOMENTS);
	uint8_t *buf;
	size_t n = make_stream(&h, 3, 0, &buf);
	assert_int_equal(n, h.header_len + 3 * h.record_bytes + FLUXREC_TRAILER_LEN);
	titan_err e;
	assert_int_equal(read_all(buf, n, &e), 3);
	for (size_t cut = 0; cut < n; cut += cut < 300 ? 1 : 7) {
		if (read_all(buf, cut, &e) != -1)
			fail_msg("a stream cut at %zu of %zu bytes read as complete", cut, n);
	}
	assert_int_equal(read_all(buf, n - 1, &e), -1);
	assert_non_null(strstr(e.msg, "truncated Flux record stream (no trailer after 3 records)"));
	fluxrec_header_free(&h);
	free(buf);
}

static void segments_with_the_same_header_read_as_one_stream(void **state)
{
	(void)state;
	fluxrec_header h, other;
	small_header(&h, FLUXREC_PIXELS);
	small_header(&other, FLUXREC_PIXELS);
	other.seed = 43;
	uint8_t *a, *b, *c;
	size_t na = make_stream(&h, 2, 0, &a), nb = make_stream(&h, 3, 2, &b);
	size_t nc = make_stream(&other, 1, 0, &c);
	uint8_t *ab = malloc(na + nb), *ac = malloc(na + nc);
	memcpy(ab, a, na);
	memcpy(ab + na, b, nb);
	memcpy(ac, a, na);
	memcpy(ac + na, c, nc);
	titan_err e;
	assert_int_equal(read_all(ab, na + nb, &e), 5);
	assert_int_equal(read_all(ac, na + nc, &e), -1);
	assert_non_null(strstr(e.msg, "a later segment's header differs"));
	/* a trailer counting another number of records */
	memcpy(ab, a, na);
	ab[na - FLUXREC_TRAILER_LEN + 8] = 3;
	uint32_t crc = crc32c(0, ab + na - FLUXREC_TRAILER_LEN, 20);
	memcpy(ab + na - 4, &crc, 4);
	assert_int_equal(read_all(ab, na, &e), -1);
	assert_non_null(strstr(e.msg, "the trailer says 3 records"));
	free(a);
	free(b);
	free(c);
	free(ab);
	free(ac);
	fluxrec_header_free(&h);
	fluxrec_header_free(&other);
}

static void damaged_records_are_refused_naming_them(void **state)
{
	(void)state;
	fluxrec_header h;
	small_header(&h, FLUXREC_PIXELS);
	uint8_t *buf;
	size_t n = make_stream(&h, 3, 0, &buf);
	uint8_t *rec1 = buf + h.header_len + h.record_bytes;
	titan_err e;
	rec1[h.record_bytes / 2] ^= 0x10;
	assert_int_equal(read_all(buf, n, &e), -1);
	assert_non_null(strstr(e.msg, "mem: record 1: record checksum"));
	rec1[h.record_bytes / 2] ^= 0x10;
	fluxrec_layout l;
	fluxrec_layout_of(&h, &l);
	int32_t big = 100;
	memcpy(rec1 + l.t5_ids + 8, &big, 4);
	fluxrec_record_seal(&h, rec1);
	assert_int_equal(read_all(buf, n, &e), -1);
	assert_non_null(strstr(e.msg, "key 000000001"));
	assert_non_null(strstr(e.msg, "T5 id 100 at position 2"));
	memset(rec1 + l.key, 'x', h.key_bytes);
	fluxrec_record_seal(&h, rec1);
	assert_int_equal(read_all(buf, n, &e), -1);
	assert_non_null(strstr(e.msg, "key not terminated"));
	memcpy(rec1, "FRXC", 4);
	assert_int_equal(read_all(buf, n, &e), -1);
	assert_non_null(strstr(e.msg, "neither a record nor a trailer"));
	char longkey[300];
	memset(longkey, 'k', 299);
	longkey[299] = 0;
	assert_int_equal(fluxrec_record_init(&h, rec1, 0, longkey, &e), -1);
	assert_non_null(strstr(e.msg, "up to 255"));
	fluxrec_header_free(&h);
	free(buf);
}

static void shard_files_map_records_and_refuse_truncation(void **state)
{
	(void)state;
	fluxrec_header h;
	small_header(&h, FLUXREC_PIXELS);
	uint8_t *buf;
	size_t n = make_stream(&h, 4, 0, &buf);
	const char *path = test_path("s.rec");
	titan_err e;
	for (int cut = 0; cut < 2; cut++) {
		FILE *fp = fopen(path, "wb");
		fwrite(buf, 1, n - (size_t)cut * 5, fp);
		fclose(fp);
		fluxrec_file *f = fluxrec_file_open(path, &e);
		if (cut) {
			assert_null(f);
			assert_non_null(strstr(e.msg, "truncated or damaged"));
			assert_int_equal(fluxrec_verify_file(path, &e), -1);
			continue;
		}
		assert_non_null(f);
		assert_int_equal(fluxrec_file_records(f), 4);
		fluxrec_view v;
		assert_int_equal(fluxrec_file_record(f, 2, &v, &e), 0);
		assert_string_equal(v.key, "000000002");
		assert_int_equal(v.index, 4);
		assert_int_equal(v.width, 12);
		assert_int_equal(v.crop_offset, 2);
		assert_int_equal(v.t5_tokens, 2);
		assert_int_equal(v.clip_ids[1], 3);
		assert_int_equal(((const float *)v.t5)[1], 2.125f);
		assert_int_equal(fluxrec_file_record(f, 4, &v, &e), -1);
		fluxrec_file_close(f);
		assert_int_equal(fluxrec_verify_file(path, &e), 0);
	}
	fluxrec_header_free(&h);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(headers_round_trip_with_8_aligned_records),
		cmocka_unit_test(bad_headers_are_refused),
		cmocka_unit_test(streams_round_trip_and_every_cut_is_refused),
		cmocka_unit_test(segments_with_the_same_header_read_as_one_stream),
		cmocka_unit_test(damaged_records_are_refused_naming_them),
		cmocka_unit_test(shard_files_map_records_and_refuse_truncation),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
