/* Tests of lib/image against torchtitan 0.3.0's _process_cc12m_image (PIL 13),
 * on the images and tensors scripts/flux_pixels_golden.py wrote into
 * tests/image/golden/: the pixels of every generated JPEG, PNG and WebP
 * equal, the images torchtitan skips skipped, the hostile ones refused.
 *
 *   test_image                        run the tests
 *   test_image process FILE N OFFSET  write the (3, N, N) float32 tensor of an
 *                                     image file to stdout (exit 1: refused,
 *                                     3: skipped as too small) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "image/image.h"

#define GOLDEN "tests/image/golden"

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return NULL;
	size_t cap = 1 << 16, len = 0, r;
	uint8_t *buf = malloc(cap);
	while (buf != NULL && (r = fread(buf + len, 1, cap - len, f)) > 0) {
		len += r;
		if (len == cap) {
			uint8_t *t = realloc(buf, cap *= 2);
			if (t == NULL)
				free(buf);
			buf = t;
		}
	}
	fclose(f);
	*n = len;
	return buf;
}

typedef struct gcase {
	char name[128], file[160], status[16], sha[72], aux[160], pil[64];
	int n, offset;
} gcase;

/* The rows of cases.tsv; returns how many. */
static int read_cases(gcase **out)
{
	FILE *f = fopen(GOLDEN "/cases.tsv", "r");
	assert_non_null(f);
	char line[1024];
	int n = 0;
	gcase *c = NULL;
	while (fgets(line, sizeof line, f) != NULL) {
		if (line[0] == '#')
			continue;
		c = realloc(c, (size_t)(n + 1) * sizeof *c);
		assert_non_null(c);
		gcase *g = &c[n];
		line[strcspn(line, "\n")] = 0;
		char *fld[8];
		int k = 0;
		for (char *p = line, *tab; k < 8; p = tab + 1) {
			fld[k++] = p;
			if ((tab = strchr(p, '\t')) == NULL)
				break;
			*tab = 0;
		}
		if (k != 8)
			fail_msg("cases.tsv: a line of %d fields: %s", k, line);
		snprintf(g->name, sizeof g->name, "%s", fld[0]);
		snprintf(g->file, sizeof g->file, "%s/%s", GOLDEN, fld[1]);
		g->n = atoi(fld[2]);
		g->offset = atoi(fld[3]);
		snprintf(g->status, sizeof g->status, "%s", fld[4]);
		snprintf(g->sha, sizeof g->sha, "%s", fld[5]);
		snprintf(g->aux, sizeof g->aux, "%s", fld[6]);
		snprintf(g->pil, sizeof g->pil, "%s", fld[7]);
		n++;
	}
	fclose(f);
	*out = c;
	return n;
}

static float torch_unit[256];

static int setup(void **state)
{
	(void)state;
	size_t n;
	uint8_t *b = slurp(GOLDEN "/unit.f32", &n);
	if (b == NULL || n != sizeof torch_unit)
		return -1;
	memcpy(torch_unit, b, n); /* little-endian float32, as every host titan runs on */
	free(b);
	return 0;
}

static void unit_values_are_torchs_float32(void **state)
{
	(void)state;
	for (int v = 0; v < 256; v++) {
		float u = image_unit((uint8_t)v);
		if (memcmp(&u, &torch_unit[v], 4) != 0)
			fail_msg("v=%d: titan %.9g, torch %.9g", v, u, torch_unit[v]);
	}
}

static void hex_of(const float *t, size_t n, char hex[65])
{
	uint8_t d[32];
	titan_err err;
	assert_int_equal(sha256(t, n * sizeof *t, d, &err), 0);
	sha256_hex(d, hex);
}

/* One "ok" case: 0 when equal; the largest difference in *maxdiff. */
static int check_ok(const gcase *g, double *maxdiff)
{
	size_t size;
	uint8_t *data = slurp(g->file, &size);
	assert_non_null(data);
	image im;
	titan_err err;
	if (image_decode(&im, data, size, NULL, &err) != 0)
		fail_msg("%s: %s", g->name, err.msg);
	free(data);
	size_t plane = (size_t)g->n * g->n;
	float *out = malloc(3 * plane * sizeof *out);
	assert_non_null(out);
	int rc = image_cc12m(&im, g->n, g->offset, out, &err);
	image_free(&im);
	if (rc != 1)
		fail_msg("%s: %s", g->name, rc < 0 ? err.msg : "skipped, torchtitan processed it");
	int bad = 0;
	if (strcmp(g->aux, "-") != 0) {
		char path[200];
		snprintf(path, sizeof path, "%s/%s", GOLDEN, g->aux);
		size_t un;
		uint8_t *u8 = slurp(path, &un);
		assert_non_null(u8);
		assert_int_equal(un, 3 * plane);
		for (size_t i = 0; i < 3 * plane; i++) {
			double d = fabs((double)out[i] - torch_unit[u8[i]]);
			if (d > *maxdiff)
				*maxdiff = d;
			if (d != 0 && bad++ == 0)
				print_message("# %s: channel %zu row %zu col %zu: titan %.9g, torchtitan %.9g\n",
					      g->name, i / plane, i % plane / g->n, i % g->n, out[i],
					      torch_unit[u8[i]]);
		}
		free(u8);
	}
	char hex[65];
	hex_of(out, 3 * plane, hex);
	free(out);
	if (strcmp(hex, g->sha) != 0 && bad == 0) {
		print_message("# %s: tensor sha256 differs\n", g->name);
		bad = 1;
	}
	return bad;
}

static void pixels_equal_torchtitan_on_generated_images(void **state)
{
	(void)state;
	gcase *c;
	int n = read_cases(&c), checked = 0, failed = 0, per_format[3] = {0};
	double maxdiff = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(c[i].status, "ok") != 0)
			continue;
		failed += check_ok(&c[i], &maxdiff) != 0;
		checked++;
		const char *ext = strrchr(c[i].file, '.');
		per_format[strcmp(ext, ".webp") == 0 ? 2 : strcmp(ext, ".png") == 0 ? 1 : 0]++;
	}
	print_message("# %d images (%d .jpg, %d .png, %d .webp files): %d differ, max |diff| %g\n",
		      checked, per_format[0], per_format[1], per_format[2], failed, maxdiff);
	free(c);
	assert_true(checked >= 100);
	assert_int_equal(failed, 0);
}

static void images_torchtitan_skips_are_skipped(void **state)
{
	(void)state;
	gcase *c;
	int n = read_cases(&c), skipped = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(c[i].status, "skip") != 0)
			continue;
		size_t size;
		uint8_t *data = slurp(c[i].file, &size);
		image im;
		titan_err err;
		if (image_decode(&im, data, size, NULL, &err) != 0)
			fail_msg("%s: %s", c[i].name, err.msg);
		float out[3 * 32 * 32];
		assert_int_equal(image_cc12m(&im, c[i].n, 0, out, &err), 0);
		image_free(&im);
		free(data);
		skipped++;
	}
	free(c);
	assert_true(skipped >= 6);
}

static void hostile_images_are_refused_saying_why(void **state)
{
	(void)state;
	gcase *c;
	int n = read_cases(&c), refused = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(c[i].status, "refuse") != 0)
			continue;
		size_t size;
		uint8_t *data = slurp(c[i].file, &size);
		assert_non_null(data);
		image im;
		titan_err err = {{0}};
		if (image_decode(&im, data, size, NULL, &err) == 0)
			fail_msg("%s: decoded as a %dx%d %s image; titan refuses it (%s)", c[i].name, im.w,
				 im.h, image_mode_name(im.mode), c[i].pil);
		if (strstr(err.msg, c[i].aux) == NULL)
			fail_msg("%s: message \"%s\" does not say \"%s\"", c[i].name, err.msg, c[i].aux);
		print_message("# %-18s %-28s titan: %s\n", c[i].name, c[i].pil, err.msg);
		free(data);
		refused++;
	}
	free(c);
	assert_true(refused >= 15);
}

/* Every prefix of every small image: refused or decoded, never a crash (the
 * sanitizer build checks the reads). */
static void cut_images_never_crash(void **state)
{
	(void)state;
	gcase *c;
	int n = read_cases(&c), refused = 0, tried = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(c[i].status, "ok") != 0 || c[i].n > 32)
			continue;
		size_t size;
		uint8_t *data = slurp(c[i].file, &size);
		for (int k = 1; k < 8; k++) {
			size_t cut = size * (size_t)k / 8;
			uint8_t *part = malloc(cut);
			memcpy(part, data, cut);
			image im;
			titan_err err;
			if (image_decode(&im, part, cut, NULL, &err) == 0)
				image_free(&im);
			else
				refused++;
			tried++;
			free(part);
		}
		free(data);
	}
	free(c);
	print_message("# %d cut images, %d refused\n", tried, refused);
	assert_true(refused > tried * 9 / 10);
}

static void limits_are_checked_from_the_header(void **state)
{
	(void)state;
	size_t size;
	uint8_t *data = slurp(GOLDEN "/img/big_jpeg_512x384.jpg", &size);
	assert_non_null(data);
	image im;
	titan_err err;
	image_limits side = {500, 1u << 30}, pixels = {1u << 15, 512 * 384 - 1},
		     fits = {512, 512 * 384};
	assert_int_equal(image_decode(&im, data, size, &side, &err), -1);
	assert_non_null(strstr(err.msg, "512x384"));
	assert_int_equal(image_decode(&im, data, size, &pixels, &err), -1);
	assert_non_null(strstr(err.msg, "limit"));
	assert_int_equal(image_decode(&im, data, size, &fits, &err), 0);
	image_free(&im);
	free(data);
}

static void exif_orientation_follows_pil(void **state)
{
	(void)state;
	titan_err err;
	/* little-endian IFD0 with two Orientation entries: the first counts */
	static const uint8_t two[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 2, 0,
				      0x12, 1, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0,
				      0x12, 1, 3, 0, 1, 0, 0, 0, 3, 0, 0, 0};
	assert_int_equal(image_exif_orientation(two, sizeof two, &err), 6);
	/* BYTE type: PIL gets bytes, which match no orientation */
	static const uint8_t byte[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
				       1, 0x12, 0, 1, 0, 0, 0, 1, 6, 0, 0, 0};
	assert_int_equal(image_exif_orientation(byte, sizeof byte, &err), 9);
	/* an IFD offset past the end: no tags, no error */
	static const uint8_t far[] = {'I', 'I', 42, 0, 200, 0, 0, 0};
	assert_int_equal(image_exif_orientation(far, sizeof far, &err), 0);
	/* BigTIFF needs a 16-byte header PIL does not read: an error */
	static const uint8_t big[] = {'I', 'I', 43, 0, 8, 0, 0, 0};
	assert_int_equal(image_exif_orientation(big, sizeof big, &err), -1);
	static const char xmp[] = "<x tiff:Orientation>7</x>";
	assert_int_equal(image_xmp_orientation((const uint8_t *)xmp, sizeof xmp - 1), 7);
}

static int process_file(const char *path, int n, int offset)
{
	size_t size;
	uint8_t *data = slurp(path, &size);
	if (data == NULL) {
		perror(path);
		return 1;
	}
	image im;
	titan_err err;
	if (image_decode(&im, data, size, NULL, &err) != 0) {
		fprintf(stderr, "test_image: %s: %s\n", path, err.msg);
		free(data);
		return 1;
	}
	free(data);
	float *out = malloc((size_t)3 * n * n * sizeof *out);
	int rc = out ? image_cc12m(&im, n, offset, out, &err) : -1;
	image_free(&im);
	if (rc == 1)
		fwrite(out, sizeof *out, (size_t)3 * n * n, stdout);
	else if (rc == 0)
		fprintf(stderr, "test_image: %s: skipped (a side under %d)\n", path, n);
	else
		fprintf(stderr, "test_image: %s: %s\n", path, err.msg);
	free(out);
	return rc == 1 ? 0 : rc == 0 ? 3 : 1;
}

/* image_png_encode's PNGs decode to their pixels in every mode, the EXIF
 * block travelling with them; sizes and channel counts it cannot write are
 * refused. */
static void written_pngs_decode_to_their_pixels(void **state)
{
	(void)state;
	static const image_mode modes[5] = {0, IMAGE_L, IMAGE_LA, IMAGE_RGB, IMAGE_RGBA};
	const int w = 7, h = 5;
	uint8_t px[7 * 5 * 4];
	for (size_t i = 0; i < sizeof px; i++)
		px[i] = (uint8_t)(i * 37 + 11);
	uint8_t *exif;
	size_t exif_n;
	const uint16_t tag = 0x010E; /* ImageDescription */
	const char *val = "x";
	titan_err e;
	assert_int_equal(image_exif_ascii(&tag, &val, 1, &exif, &exif_n, &e), 0);
	for (int c = 1; c <= 4; c++) {
		uint8_t *png;
		size_t n;
		if (image_png_encode(px, w, h, c, c == 3 ? exif : NULL, exif_n, &png, &n, &e) < 0)
			fail_msg("%s", e.msg);
		image im;
		if (image_decode(&im, png, n, NULL, &e) < 0)
			fail_msg("%s", e.msg);
		assert_int_equal(im.format, IMAGE_PNG);
		assert_int_equal(im.mode, modes[c]);
		assert_int_equal(im.w, w);
		assert_int_equal(im.h, h);
		assert_memory_equal(im.px, px, (size_t)(w * h * c));
		image_free(&im);
		free(png);
	}
	free(exif);
	uint8_t *png;
	size_t n;
	assert_int_equal(image_png_encode(px, w, h, 5, NULL, 0, &png, &n, &e), -1);
	assert_non_null(strstr(e.msg, "5 channels"));
	assert_int_equal(image_png_encode(px, 0, h, 3, NULL, 0, &png, &n, &e), -1);
	assert_non_null(strstr(e.msg, "image of 0 x 5"));
	assert_null(png);
	const uint16_t twice[2] = {0x010E, 0x010E};
	const char *vals[2] = {"a", "b"};
	assert_int_equal(image_exif_ascii(twice, vals, 2, &exif, &exif_n, &e), -1);
	assert_non_null(strstr(e.msg, "tag 0x010e given twice"));
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "process") == 0)
		return process_file(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc > 1) {
		fprintf(stderr, "usage: test_image [process FILE N OFFSET]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unit_values_are_torchs_float32),
		cmocka_unit_test(pixels_equal_torchtitan_on_generated_images),
		cmocka_unit_test(images_torchtitan_skips_are_skipped),
		cmocka_unit_test(hostile_images_are_refused_saying_why),
		cmocka_unit_test(cut_images_never_crash),
		cmocka_unit_test(limits_are_checked_from_the_header),
		cmocka_unit_test(exif_orientation_follows_pil),
		cmocka_unit_test(written_pngs_decode_to_their_pixels),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
