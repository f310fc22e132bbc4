/* Tests of lib/wds: webdataset shards grouped and filtered as the Hugging Face
 * datasets "webdataset" builder does it, hostile members refused; and the
 * cc12m test shard end to end (tests/image/cc12m.sh).
 *
 *   test_wds                       run the tests (tars written here with libarchive)
 *   test_wds cc12m TAR GOLDEN      every sample of TAR: key, caption and the
 *                                  (3, 256, 256) tensor at GOLDEN's offset
 *                                  against GOLDEN (scripts/flux_pixels_golden.py
 *                                  --cc12m); a line per sample, exit 1 on a
 *                                  difference */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "core/sha256.h"
#include "image/image.h"
#include "wds/wds.h"

typedef struct member {
	const char *name;
	const char *data;
	int type; /* AE_IFREG, AE_IFDIR, AE_IFLNK */
	int64_t claimed; /* a size for the header other than the data's, or -1 */
} member;

/* A ustar/pax archive of the members, in memory (caller frees). */
static uint8_t *make_tar(const member *m, int n, size_t *size)
{
	size_t cap = 1 << 20;
	uint8_t *buf = malloc(cap);
	struct archive *a = archive_write_new();
	assert_non_null(buf);
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_in_last_block(a, 1);
	assert_int_equal(archive_write_open_memory(a, buf, cap, size), ARCHIVE_OK);
	for (int i = 0; i < n; i++) {
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, m[i].name);
		archive_entry_set_filetype(e, (unsigned)m[i].type);
		archive_entry_set_perm(e, 0644);
		size_t len = m[i].data ? strlen(m[i].data) : 0;
		if (m[i].type == AE_IFLNK)
			archive_entry_set_symlink(e, "target.jpg");
		archive_entry_set_size(e, m[i].type == AE_IFREG ? (la_int64_t)len : 0);
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (len && m[i].type == AE_IFREG)
			assert_int_equal(archive_write_data(a, m[i].data, len), (la_ssize_t)len);
		archive_entry_free(e);
	}
	archive_write_close(a);
	archive_write_free(a);
	return buf;
}

/* "key:field,field key:field ..." of every sample, or "ERROR: message". */
static void read_all(const uint8_t *tar, size_t size, const wds_limits *lim, char *out,
		     size_t cap)
{
	wds *w;
	titan_err err;
	out[0] = 0;
	if (wds_open_memory(&w, tar, size, lim, &err) != 0) {
		snprintf(out, cap, "ERROR: %s", err.msg);
		return;
	}
	wds_sample s = {0};
	int r;
	while ((r = wds_next(w, &s, &err)) == 1) {
		size_t at = strlen(out);
		snprintf(out + at, cap - at, "%s%s:", at ? " " : "", s.key);
		for (int i = 0; i < s.n_fields; i++) {
			at = strlen(out);
			snprintf(out + at, cap - at, "%s%s", i ? "," : "", s.fields[i].name);
		}
	}
	if (r < 0)
		snprintf(out, cap, "ERROR: %s", err.msg);
	wds_sample_free(&s);
	wds_close(w);
}

static void samples_are_grouped_and_skipped_as_datasets_does(void **state)
{
	(void)state;
	const member m[] = {
		{"a.jpg", "JPEGDATA", AE_IFREG, -1},
		{"a.txt", "a cat", AE_IFREG, -1},
		{"a.json", "{}", AE_IFREG, -1},
		{".hidden.jpg", "x", AE_IFREG, -1},
		{"__meta__.txt", "x", AE_IFREG, -1},
		{"noext", "x", AE_IFREG, -1},
		{"dir", NULL, AE_IFDIR, -1},
		{"link.jpg", NULL, AE_IFLNK, -1},
		{"b.jpg", "J", AE_IFREG, -1},
		{"b.seg.png", "P", AE_IFREG, -1},
		{"dir.v1/c.txt", "in a folder", AE_IFREG, -1},
		{"dir.v1/c.jpg", "J", AE_IFREG, -1},
		{"a.txt", "a again, not beside the first a", AE_IFREG, -1},
	};
	size_t size;
	uint8_t *tar = make_tar(m, sizeof m / sizeof *m, &size);
	char got[1024];
	read_all(tar, size, NULL, got, sizeof got);
	assert_string_equal(got, "a:jpg,txt,json b:jpg,seg.png dir.v1/c:txt,jpg a:txt");

	wds *w;
	titan_err err;
	wds_sample s = {0};
	assert_int_equal(wds_open_memory(&w, tar, size, NULL, &err), 0);
	assert_int_equal(wds_next(w, &s, &err), 1);
	const wds_field *txt = wds_field_get(&s, "txt");
	assert_non_null(txt);
	assert_int_equal(txt->size, 5);
	assert_string_equal((const char *)txt->data, "a cat");
	assert_null(wds_field_get(&s, "png"));
	assert_int_equal(s.index, 0);
	wds_sample_free(&s);
	wds_close(w);
	free(tar);
}

static void hostile_members_are_refused_naming_them(void **state)
{
	(void)state;
	static const struct {
		member m[2];
		int n;
		const char *want;
	} cases[] = {
		{{{"../evil.jpg", "x", AE_IFREG, -1}}, 1, "member ../evil.jpg refused"},
		{{{"a/../../evil.jpg", "x", AE_IFREG, -1}}, 1, "member a/../../evil.jpg refused"},
		{{{"/etc/evil.jpg", "x", AE_IFREG, -1}}, 1, "member /etc/evil.jpg refused"},
		{{{"bad\nname.jpg", "x", AE_IFREG, -1}}, 1, "member bad\\x0aname.jpg refused"},
		{{{"k.jpg", "x", AE_IFREG, -1}, {"k.jpg", "y", AE_IFREG, -1}}, 2, "sample k: field jpg twice"},
		{{{"big.jpg", "0123456789abcdef", AE_IFREG, -1}}, 1, "member big.jpg refused: 16 bytes, over the limit of 8"},
	};
	wds_limits lim = {8, 4};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		size_t size;
		uint8_t *tar = make_tar(cases[i].m, cases[i].n, &size);
		char got[1024];
		read_all(tar, size, &lim, got, sizeof got);
		if (strstr(got, cases[i].want) == NULL)
			fail_msg("case %zu: \"%s\", expected \"%s\"", i, got, cases[i].want);
		free(tar);
	}
	/* more fields than the limit */
	const member many[] = {{"k.a", "1", AE_IFREG, -1}, {"k.b", "1", AE_IFREG, -1},
			       {"k.c", "1", AE_IFREG, -1}, {"k.d", "1", AE_IFREG, -1},
			       {"k.e", "1", AE_IFREG, -1}};
	size_t size;
	uint8_t *tar = make_tar(many, 5, &size);
	char got[1024];
	read_all(tar, size, &lim, got, sizeof got);
	assert_non_null(strstr(got, "more than 4 fields"));
	free(tar);
}

static void cut_and_damaged_tars_are_refused(void **state)
{
	(void)state;
	const member m[] = {{"a.jpg", "0123456789012345678901234567890123456789", AE_IFREG, -1},
			    {"a.txt", "caption", AE_IFREG, -1}};
	size_t size;
	uint8_t *tar = make_tar(m, 2, &size);
	int refused = 0, tried = 0;
	for (size_t cut = 1; cut < 1024 + 512; cut += 37, tried++) {
		char got[1024];
		read_all(tar, cut, NULL, got, sizeof got);
		refused += strncmp(got, "ERROR", 5) == 0;
	}
	uint8_t *bad = malloc(size);
	memcpy(bad, tar, size);
	memset(bad + 100, 0x7f, 50); /* the header's mode, uid, gid, size: the checksum fails */
	char got[1024];
	read_all(bad, size, NULL, got, sizeof got);
	assert_non_null(strstr(got, "ERROR"));
	free(bad);
	free(tar);
	assert_true(refused >= tried - 2);
}

static void refusal_logged(void *ctx, const char *msg)
{
	char *log = ctx;
	size_t n = strlen(log);
	snprintf(log + n, 2048 - n, "%s|", msg);
}

/* Lenient mode: the refused members are reported and dropped, the samples
 * around them read as usual. */
static void lenient_mode_drops_refused_members_and_goes_on(void **state)
{
	(void)state;
	const member m[] = {{"a.jpg", "A", AE_IFREG, -1},  {"a.txt", "cap a", AE_IFREG, -1},
			    {"../b.jpg", "B", AE_IFREG, -1}, {"b.txt", "cap b", AE_IFREG, -1},
			    {"b.txt", "again", AE_IFREG, -1}, {"c.jpg", "0123456789", AE_IFREG, -1},
			    {"c.txt", "cap c", AE_IFREG, -1}, {"d.jpg", "D", AE_IFREG, -1}};
	size_t size;
	uint8_t *tar = make_tar(m, 8, &size);
	wds_limits lim = {8, 4};
	wds *w;
	titan_err err;
	assert_int_equal(wds_open_memory(&w, tar, size, &lim, &err), 0);
	char log[2048] = "", got[512] = "";
	wds_on_refused(w, refusal_logged, log);
	wds_sample s = {0};
	int r;
	while ((r = wds_next(w, &s, &err)) == 1) {
		size_t n = strlen(got);
		snprintf(got + n, sizeof got - n, "%s:%d ", s.key, s.n_fields);
	}
	assert_int_equal(r, 0);
	assert_string_equal(got, "a:2 b:1 c:1 d:1 ");
	assert_non_null(strstr(log, "member ../b.jpg refused"));
	assert_non_null(strstr(log, "sample b: field txt twice"));
	assert_non_null(strstr(log, "member c.jpg refused: 10 bytes"));
	wds_sample_free(&s);
	wds_close(w);
	free(tar);
}

/* Two shards back to back (cat, titan-hf-fetch --stdout) read as one. */
static void concatenated_tars_read_as_one(void **state)
{
	(void)state;
	const member m1[] = {{"a.jpg", "A", AE_IFREG, -1}, {"a.txt", "x", AE_IFREG, -1}};
	const member m2[] = {{"b.jpg", "B", AE_IFREG, -1}, {"b.txt", "y", AE_IFREG, -1}};
	size_t n1, n2;
	uint8_t *t1 = make_tar(m1, 2, &n1), *t2 = make_tar(m2, 2, &n2);
	uint8_t *both = malloc(n1 + n2);
	assert_non_null(both);
	memcpy(both, t1, n1);
	memcpy(both + n1, t2, n2);
	char got[1024];
	read_all(both, n1 + n2, NULL, got, sizeof got);
	assert_string_equal(got, "a:jpg,txt b:jpg,txt");
	free(both);
	free(t1);
	free(t2);
}

static void captions_are_checked_as_strict_utf8(void **state)
{
	(void)state;
	assert_true(wds_utf8_valid((const uint8_t *)"caf\xc3\xa9 \xf0\x9f\x90\x88", 10));
	assert_false(wds_utf8_valid((const uint8_t *)"\xc0\xaf", 2));         /* overlong */
	assert_false(wds_utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));     /* surrogate */
	assert_false(wds_utf8_valid((const uint8_t *)"\xe2\x82", 2));         /* cut */
	assert_false(wds_utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
}

static void hex_sha(const void *p, size_t n, char hex[65])
{
	uint8_t d[32];
	titan_err err;
	if (sha256(p, n, d, &err) != 0)
		hex[0] = 0;
	else
		sha256_hex(d, hex);
}

/* The cc12m shard against the golden: 0 when every sample matches. */
static int cc12m(const char *tar, const char *golden)
{
	FILE *g = fopen(golden, "r");
	if (g == NULL) {
		perror(golden);
		return 1;
	}
	wds *w;
	titan_err err;
	if (wds_open(&w, tar, NULL, &err) != 0) {
		fprintf(stderr, "test_wds: %s\n", err.msg);
		fclose(g);
		return 1;
	}
	static float out[3 * 256 * 256];
	wds_sample s = {0};
	char line[512];
	int bad = 0, n = 0, r;
	while ((r = wds_next(w, &s, &err)) == 1) {
		do {
			if (fgets(line, sizeof line, g) == NULL) {
				fprintf(stderr, "%s: no line for sample %s\n", golden, s.key);
				bad = 1;
				goto done;
			}
		} while (line[0] == '#');
		char key[128], cap_sha[80], t_sha[80];
		int gw, gh, off;
		if (sscanf(line, "%127s %79s %d %d %d %79s", key, cap_sha, &gw, &gh, &off, t_sha) != 6) {
			fprintf(stderr, "%s: bad line %s", golden, line);
			bad = 1;
			break;
		}
		const wds_field *jpg = wds_field_get(&s, "jpg"), *txt = wds_field_get(&s, "txt");
		char hex[65] = "", chex[65] = "";
		image im;
		const char *why = NULL;
		if (jpg == NULL || txt == NULL)
			why = "no jpg or txt";
		else if (!wds_utf8_valid(txt->data, txt->size))
			why = "caption not UTF-8";
		else if (image_decode(&im, jpg->data, jpg->size, NULL, &err) != 0)
			why = err.msg;
		else {
			int rc = image_cc12m(&im, 256, off, out, &err);
			if (rc == 1)
				hex_sha(out, sizeof out, hex);
			else
				snprintf(hex, sizeof hex, "%s", rc == 0 ? "skip" : "error");
			if (im.w != gw || im.h != gh)
				why = "size differs";
			image_free(&im);
			hex_sha(txt->data, txt->size, chex);
		}
		int ok = why == NULL && strcmp(key, s.key) == 0 && strcmp(chex, cap_sha) == 0 &&
			 strcmp(hex, t_sha) == 0;
		printf("%s %s %dx%d offset %d%s%s\n", ok ? "ok" : "DIFFERS", s.key, gw, gh, off,
		       why ? ": " : "", why ? why : "");
		bad |= !ok;
		n++;
	}
	if (r < 0) {
		fprintf(stderr, "test_wds: %s\n", err.msg);
		bad = 1;
	}
done:
	printf("# %d samples\n", n);
	wds_sample_free(&s);
	wds_close(w);
	fclose(g);
	return bad || n == 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "cc12m") == 0)
		return cc12m(argv[2], argv[3]);
	if (argc > 1) {
		fprintf(stderr, "usage: test_wds [cc12m TAR GOLDEN]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(samples_are_grouped_and_skipped_as_datasets_does),
		cmocka_unit_test(hostile_members_are_refused_naming_them),
		cmocka_unit_test(cut_and_damaged_tars_are_refused),
		cmocka_unit_test(lenient_mode_drops_refused_members_and_goes_on),
		cmocka_unit_test(concatenated_tars_read_as_one),
		cmocka_unit_test(captions_are_checked_as_strict_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
