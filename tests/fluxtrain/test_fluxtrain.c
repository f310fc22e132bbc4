/* Tests of the Flux trainer's loader (lib/fluxtrain/loader.c), and its test
 * inputs (tests/fluxtrain/train.sh, scripts/flux_train_golden.py):
 *
 *   test_fluxtrain                the loader's tests
 *   test_fluxtrain pngdiff A B    the largest difference of two images' pixel
 *                                 values and how many differ, one line; exit
 *                                 1 when their sizes differ or one is not read
 *   test_fluxtrain mkmodels DIR   DIR/t5 and DIR/clip: deterministic random
 *                                 text encoders of flux-debug's widths (T5
 *                                 d_model 4096, CLIP hidden 768) over the
 *                                 torchtitan test tokenizer's 2020 ids, one
 *                                 layer each; DIR/ae.safetensors and
 *                                 DIR/ae.json: the small 16-channel
 *                                 autoencoder of tests/fluxtrain/golden/ae
 *                                 (tests/support/flux_models.h draws them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../support/flux_models.h"
#include "../support/testutil.h"
#include "fluxtrain/fluxtrain_priv.h"
#include "image/image.h"

#define AE_GOLDEN "tests/fluxtrain/golden/ae"
#define IMG "tests/image/golden/img/"
#define SIZE 64
#define DROPOUT 0.447

/* flux-debug's context_in_dim and vec_in_dim; the vocabulary covers the
 * torchtitan test tokenizer's ids; the rest as small as the encoders allow. */
static const test_t5_dims t5_flux = {2048, 4096, 8, 2, 16, 1};
static const test_clip_dims clip_flux = {2048, 768, 16, 2, 1};

/* The shard: images of several sizes and formats, two under 64 px on a side,
 * one without a caption, one with a caption that is not UTF-8. */
static const struct {
	const char *key, *image, *caption;
} samples[] = {
	{"s0", "big_jpeg_256x256.jpg", "a square"},
	{"s1", "jpeg_31x64_s1.jpg", "too narrow"},
	{"s2", "big_png_400x300.png", "a png"},
	{"s3", "big_webp_257x700.webp", "a tall webp"},
	{"s4", "jpeg_127x64_s1.jpg", "just tall enough"},
	{"s5", "big_jpeg_512x384.jpg", NULL},
	{"s6", "jpeg_200x150_s2.jpg", "caf\xc3"},
	{"s7", "big_jpeg_300x257.jpg", "the last"},
	{"s8", "jpeg_32x32_s0.jpg", "too small"},
};
#define N_SAMPLES (int)(sizeof samples / sizeof samples[0])
/* the kept ones, in order */
static const char *const kept[] = {"s0", "s2", "s3", "s4", "s7"};
#define N_KEPT 5

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *d = malloc(*n);
	assert_int_equal(fread(d, 1, *n, f), *n);
	fclose(f);
	return d;
}

static void add(struct archive *a, const char *name, const void *d, size_t n)
{
	struct archive_entry *e = archive_entry_new();
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)n);
	assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
	assert_int_equal(archive_write_data(a, d, n), (la_ssize_t)n);
	archive_entry_free(e);
}

/* Samples [first, end) into the tar path. */
static void write_tar(const char *path, int first, int end)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (int i = first; i < end; i++) {
		char name[64], file[256];
		const char *ext = strrchr(samples[i].image, '.') + 1;
		snprintf(file, sizeof file, IMG "%s", samples[i].image);
		size_t n;
		uint8_t *d = slurp(file, &n);
		snprintf(name, sizeof name, "%s.%s", samples[i].key, ext);
		add(a, name, d, n);
		free(d);
		if (samples[i].caption) {
			snprintf(name, sizeof name, "%s.txt", samples[i].key);
			add(a, name, samples[i].caption, strlen(samples[i].caption));
		}
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
}

static char dir[] = "/tmp/test_fluxtrain.XXXXXX";
static char tar[300];

static int setup(void **state)
{
	(void)state;
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(tar, sizeof tar, "%s/one.tar", dir);
	write_tar(tar, 0, N_SAMPLES);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The decoded size of a sample's image. */
static void size_of(const char *key, int *w, int *h)
{
	for (int i = 0; i < N_SAMPLES; i++) {
		if (strcmp(samples[i].key, key) != 0)
			continue;
		char file[256];
		snprintf(file, sizeof file, IMG "%s", samples[i].image);
		size_t n;
		uint8_t *d = slurp(file, &n);
		image im;
		titan_err e;
		assert_int_equal(image_decode(&im, d, n, NULL, &e), 0);
		*w = im.w;
		*h = im.h;
		image_free(&im);
		free(d);
		return;
	}
	fail_msg("no sample %s", key);
}

/* The loader's items equal a replay on another generator: the base seed,
 * then image_cc12m_draw of each kept image, in order and around again; the
 * skipped ones drew nothing. */
static void draws_follow_torchtitans_order_and_loop(void **state)
{
	(void)state;
	ft_loader l;
	titan_err e;
	assert_int_equal(ft_loader_open(&l, tar, SIZE, DROPOUT, 0, 1, NULL, &e), 0);
	torch_rng g, want;
	torch_rng_seed(&g, 7, TORCH_NORMAL_AVX2);
	torch_rng_seed(&want, 7, TORCH_NORMAL_AVX2);
	(void)torch_rng_int64(&want);
	ft_item *it = calloc(3, sizeof *it);
	for (int b = 0; b < 4; b++) { /* 12 samples: the 5 kept ones, around twice more */
		assert_int_equal(ft_loader_batch(&l, &g, 3, it, &e), 0);
		for (int i = 0; i < 3; i++) {
			const char *key = kept[(b * 3 + i) % N_KEPT];
			int w = 0, h = 0;
			size_of(key, &w, &h);
			image_cc12m_draws d;
			assert_int_equal(image_cc12m_draw(&want, w, h, SIZE, DROPOUT, &d), 1);
			assert_string_equal(it[i].key, key);
			assert_int_equal(it[i].offset, d.offset);
			assert_int_equal(it[i].t5_dropped, d.t5_dropped);
			assert_int_equal(it[i].clip_dropped, d.clip_dropped);
		}
	}
	assert_int_equal(torch_rng_random(&g), torch_rng_random(&want));
	ft_items_free(it, 3);
	ft_loader_close(&l);
}

/* A loader seeked to another's position, with its generator's state, goes on
 * with the same samples and draws (the resume of a checkpoint). */
static void a_seeked_loader_goes_on_as_the_first(void **state)
{
	(void)state;
	ft_loader a, b;
	titan_err e;
	torch_rng ga, gb;
	torch_rng_seed(&ga, 3, TORCH_NORMAL_AVX2);
	ft_item *ia = calloc(2, sizeof *ia), *ib = calloc(2, sizeof *ib);
	assert_int_equal(ft_loader_open(&a, tar, SIZE, DROPOUT, 0, 1, NULL, &e), 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(ft_loader_batch(&a, &ga, 2, ia, &e), 0);
	gb = ga;
	assert_int_equal(ft_loader_open(&b, tar, SIZE, DROPOUT, 0, 1, NULL, &e), 0);
	assert_int_equal(ft_loader_seek(&b, a.consumed, &e), 0);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(ft_loader_batch(&a, &ga, 2, ia, &e), 0);
		assert_int_equal(ft_loader_batch(&b, &gb, 2, ib, &e), 0);
		for (int i = 0; i < 2; i++) {
			assert_string_equal(ia[i].key, ib[i].key);
			assert_int_equal(ia[i].offset, ib[i].offset);
			assert_int_equal(ia[i].t5_dropped, ib[i].t5_dropped);
		}
	}
	ft_items_free(ia, 2);
	ft_items_free(ib, 2);
	ft_loader_close(&a);
	ft_loader_close(&b);
}

/* Two ranks keep every other sample, rank 1 from the second on; a folder's
 * tars are read in name order. */
static void ranks_split_the_samples_and_folders_read_in_order(void **state)
{
	(void)state;
	char sub[320], t1[340], t2[340];
	snprintf(sub, sizeof sub, "%s/folder", dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(t1, sizeof t1, "%s/b.tar", sub);
	snprintf(t2, sizeof t2, "%s/a.tar", sub);
	write_tar(t1, 4, N_SAMPLES); /* s4..s8: read second */
	write_tar(t2, 0, 4);
	const char *want[2][3] = {{"s0", "s2", "s4"}, {"s3", "s7", "s0"}};
	for (int rank = 0; rank < 2; rank++) {
		ft_loader l;
		titan_err e;
		torch_rng g;
		torch_rng_seed(&g, 1, TORCH_NORMAL_AVX2);
		ft_item *it = calloc(3, sizeof *it);
		assert_int_equal(ft_loader_open(&l, sub, SIZE, 0.0, rank, 2, NULL, &e), 0);
		assert_int_equal(ft_loader_batch(&l, &g, 3, it, &e), 0);
		for (int i = 0; i < 3; i++)
			assert_string_equal(it[i].key, want[rank][i]);
		ft_items_free(it, 3);
		ft_loader_close(&l);
	}
}

static void bad_paths_are_refused_naming_them(void **state)
{
	(void)state;
	ft_loader l;
	titan_err e;
	char empty[320];
	assert_int_equal(ft_loader_open(&l, "/nonexistent/x.tar", SIZE, 0, 0, 1, NULL, &e), -1);
	assert_non_null(strstr(e.msg, "/nonexistent/x.tar"));
	ft_loader_close(&l);
	snprintf(empty, sizeof empty, "%s/empty", dir);
	assert_int_equal(mkdir(empty, 0755), 0);
	assert_int_equal(ft_loader_open(&l, empty, SIZE, 0, 0, 1, NULL, &e), -1);
	assert_non_null(strstr(e.msg, "no .tar files"));
	ft_loader_close(&l);
}

static int pngdiff(const char *a, const char *b)
{
	image ia, ib;
	titan_err e;
	size_t na, nb;
	uint8_t *da = slurp(a, &na), *db = slurp(b, &nb);
	int rc = image_decode(&ia, da, na, NULL, &e) == 0 ? 0 : 1;
	if (rc == 0 && image_decode(&ib, db, nb, NULL, &e) != 0) {
		image_free(&ia);
		rc = 1;
	}
	free(da);
	free(db);
	if (rc != 0) {
		fprintf(stderr, "test_fluxtrain: %s\n", e.msg);
		return 1;
	}
	if (ia.w != ib.w || ia.h != ib.h || ia.channels != ib.channels) {
		printf("sizes %dx%dx%d and %dx%dx%d\n", ia.w, ia.h, ia.channels, ib.w, ib.h, ib.channels);
		rc = 1;
	} else {
		int most = 0;
		size_t differ = 0, n = (size_t)ia.w * (size_t)ia.h * (size_t)ia.channels;
		for (size_t i = 0; i < n; i++) {
			int d = abs((int)ia.px[i] - (int)ib.px[i]);
			most = d > most ? d : most;
			differ += d != 0;
		}
		printf("max %d, %zu of %zu values differ\n", most, differ, n);
	}
	image_free(&ia);
	image_free(&ib);
	return rc;
}

static int mkmodels(const char *out)
{
	titan_err err;
	if (test_make_encoders(out, &t5_flux, &clip_flux, &err) != 0 ||
	    test_make_ae_from(out, AE_GOLDEN, &err) != 0) {
		fprintf(stderr, "test_fluxtrain: %s\n", err.msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "mkmodels") == 0)
		return mkmodels(argv[2]);
	if (argc == 4 && strcmp(argv[1], "pngdiff") == 0)
		return pngdiff(argv[2], argv[3]);
	if (argc != 1) {
		fprintf(stderr, "usage: test_fluxtrain [mkmodels DIR | pngdiff A B]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(draws_follow_torchtitans_order_and_loop),
		cmocka_unit_test(a_seeked_loader_goes_on_as_the_first),
		cmocka_unit_test(ranks_split_the_samples_and_folders_read_in_order),
		cmocka_unit_test(bad_paths_are_refused_naming_them),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
