/* Unit tests of lib/tb: record and Event bytes against the TensorFlow test
 * vectors (formats.md, produced by tensorboard's own writer), and a round trip
 * through the reader with corruption detected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb/tb.h"

static size_t unhex(const char *h, uint8_t *out)
{
	size_t n = 0;
	while (*h) {
		if (*h == ' ') {
			h++;
			continue;
		}
		unsigned v;
		sscanf(h, "%2x", &v);
		out[n++] = (uint8_t)v;
		h += 2;
	}
	return n;
}

static void version_record_matches_tensorflow_bytes(void **state)
{
	(void)state;
	uint8_t want[128], ev[64], rec[128];
	size_t wn = unhex("1800000000000000 a37f4b22 0900000040fc54d941 1a0d627261696e2e4576656e743a32 "
			  "eced8f9d", want);
	size_t en = tb_encode_version_event(1.7e9, ev);
	size_t rn = tb_encode_record(ev, en, rec);
	assert_int_equal(rn, wn);
	assert_memory_equal(rec, want, wn);
}

static void scalar_record_matches_tensorflow_bytes(void **state)
{
	(void)state;
	uint8_t want[128], ev[128], rec[160];
	size_t wn = unhex("1a00000000000000 129bd82d 0900004040fc54d941100a2a0d0a0b0a046c6f7373150000"
			  "2040 5c6a918a", want);
	/* formats.md's vector: wall time 1.7e9 + 0.5 s (0x41d954fc40400000). */
	double wall;
	uint64_t bits = 0x41d954fc40400000ull;
	memcpy(&wall, &bits, 8);
	size_t en = tb_encode_scalar_event(wall, 10, "loss", 2.5f, ev);
	size_t rn = tb_encode_record(ev, en, rec);
	assert_int_equal(rn, wn);
	assert_memory_equal(rec, want, wn);
}

/* tensorboard 2.21's Event (its protobuf classes and RecordWriter) of
 * Summary.Value(tag "images/0", image=Summary.Image(height 2, width 3,
 * colorspace 3, encoded_image_string "\x89PNG\r\n\x1a\nxyz")), wall time
 * 1.7e9, step 3: the Summary torch's SummaryWriter.add_image writes. */
static void image_record_matches_tensorboard_bytes(void **state)
{
	(void)state;
	uint8_t want[128], ev[128], rec[160];
	size_t wn = unhex("2e00000000000000 c5cb57fa 0900000040fc54d94110032a210a1f0a08696d61676573"
			  "2f302213080210031803220b89504e470d0a1a0a78797a e87e6b0f", want);
	const uint8_t png[11] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 'x', 'y', 'z'};
	size_t en = tb_encode_image_event(1.7e9, 3, "images/0", 2, 3, 3, png, sizeof png, ev);
	size_t rn = tb_encode_record(ev, en, rec);
	assert_int_equal(rn, wn);
	assert_memory_equal(rec, want, wn);
}

typedef struct seen {
	int n;
	int versions;
	char tags[8][64];
	float values[8];
	int64_t steps[8];
	int images;
	char image_tag[64];
	int image_dims[3];
	uint8_t image[4096];
	size_t image_n;
} seen;

static int collect(void *ctx, const tb_event *ev, titan_err *err)
{
	(void)err;
	seen *s = ctx;
	if (ev->file_version != NULL) {
		assert_string_equal(ev->file_version, "brain.Event:2");
		s->versions++;
		return 0;
	}
	if (ev->image_tag != NULL) {
		assert_null(ev->tag);
		assert_true(ev->image_n <= sizeof s->image);
		snprintf(s->image_tag, sizeof s->image_tag, "%s", ev->image_tag);
		s->image_dims[0] = ev->image_height;
		s->image_dims[1] = ev->image_width;
		s->image_dims[2] = ev->image_channels;
		memcpy(s->image, ev->image, ev->image_n);
		s->image_n = ev->image_n;
		s->images++;
		return 0;
	}
	assert_non_null(ev->tag);
	assert_true(s->n < 8);
	snprintf(s->tags[s->n], 64, "%s", ev->tag);
	s->values[s->n] = ev->value;
	s->steps[s->n] = ev->step;
	s->n++;
	return 0;
}

static char tmpdir[256];

static const char *only_file(char *path, size_t n)
{
	DIR *d = opendir(tmpdir);
	assert_non_null(d);
	struct dirent *e;
	path[0] = '\0';
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0)
			snprintf(path, n, "%s/%s", tmpdir, e->d_name);
	closedir(d);
	assert_true(path[0] != '\0');
	return path;
}

static void written_file_reads_back_and_corruption_is_caught(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-tb.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(tmpdir));
	tb_writer w;
	titan_err err = {{0}};
	assert_int_equal(tb_open(&w, tmpdir, 1.7e9, &err), 0);
	const char *tags[] = {"loss_metrics/global_avg_loss", "grad_norm", "throughput(tps)",
			      "memory/max_reserved(GiB)"};
	for (int i = 0; i < 4; i++)
		assert_int_equal(tb_add_scalar(&w, tags[i], 1.5f * (float)i - 0.25f, 1000 + i,
					       1.7e9 + i, &err), 0);
	/* an image of 1500 bytes: a record larger than the scalars' buffer */
	uint8_t png[1500];
	for (size_t i = 0; i < sizeof png; i++)
		png[i] = (uint8_t)(i * 7);
	assert_int_equal(tb_add_image(&w, "validation/image", png, sizeof png, 64, 48, 3, 1004,
				      1.7e9 + 4, &err), 0);
	assert_int_equal(tb_add_image(&w, "x", png, sizeof png, 64, 48, 5, 1, 1.7e9, &err), -1);
	assert_non_null(strstr(err.msg, "channels 5"));
	assert_int_equal(tb_add_image(&w, "x", png, 0, 64, 48, 3, 1, 1.7e9, &err), -1);
	assert_non_null(strstr(err.msg, "0 bytes"));
	assert_int_equal(tb_close(&w, &err), 0);

	char path[512];
	only_file(path, sizeof path);
	/* events.out.tfevents.1700000000.HOST.PID.UID */
	assert_non_null(strstr(path, "events.out.tfevents.1700000000."));
	seen s = {0};
	assert_int_equal(tb_read_file(path, 0, collect, &s, &err), 0);
	assert_int_equal(s.versions, 1);
	assert_int_equal(s.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_string_equal(s.tags[i], tags[i]);
		assert_true(s.values[i] == 1.5f * (float)i - 0.25f);
		assert_int_equal(s.steps[i], 1000 + i);
	}
	assert_int_equal(s.images, 1);
	assert_string_equal(s.image_tag, "validation/image");
	assert_int_equal(s.image_dims[0], 64);
	assert_int_equal(s.image_dims[1], 48);
	assert_int_equal(s.image_dims[2], 3);
	assert_int_equal(s.image_n, sizeof png);
	assert_memory_equal(s.image, png, sizeof png);

	/* Flip one bit of the last record's data: its CRC must catch it. */
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, -8, SEEK_END);
	int c = fgetc(f);
	fseek(f, -8, SEEK_END);
	fputc(c ^ 1, f);
	fclose(f);
	memset(&s, 0, sizeof s);
	assert_int_equal(tb_read_file(path, 0, collect, &s, &err), -1);
	assert_non_null(strstr(err.msg, "data CRC mismatch"));

	/* A cut file is an error, unless the caller allows a tail in progress. */
	assert_int_equal(truncate(path, 50), 0);
	memset(&s, 0, sizeof s);
	assert_int_equal(tb_read_file(path, 0, collect, &s, &err), -1);
	assert_non_null(strstr(err.msg, "truncated"));
	memset(&s, 0, sizeof s);
	assert_int_equal(tb_read_file(path, 1, collect, &s, &err), 0);
	assert_int_equal(s.versions, 1);
	unlink(path);
	rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(version_record_matches_tensorflow_bytes),
		cmocka_unit_test(scalar_record_matches_tensorflow_bytes),
		cmocka_unit_test(image_record_matches_tensorboard_bytes),
		cmocka_unit_test(written_file_reads_back_and_corruption_is_caught),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
