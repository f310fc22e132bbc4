/* Tests of image_cc12m_draw: the crop offsets and prompt dropouts of
 * torchtitan 0.3.0's FluxDataLoader over the cc12m test shard
 * (tests/image/golden/flux_draws.txt, scripts/flux_draws_golden.py), drawn on
 * core/torch_rng as a run makes them: manual_seed, the DataLoader iterator's
 * base seed, then per sample randint and two rand; in the second run a CPU
 * training step's draws between batches.
 *
 *   test_flux_draws                the images' sizes taken from the golden
 *   test_flux_draws TAR GOLDEN     the images' sizes decoded from TAR, read in
 *                                  order and again from the start at its end
 *                                  (the loader's infinite re-loop), the keys
 *                                  checked too (tests/image/flux_draws.sh);
 *                                  a line per run, exit 1 on a difference */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/torch_rng.h"
#include "image/image.h"
#include "wds/wds.h"

#define SIZE 256
#define DROPOUT 0.447

/* Where a sample's image size comes from: the golden's record, or the shard. */
typedef struct sizes {
	const char *tar; /* NULL: the golden's own sizes */
	wds *w;
	wds_sample s;
} sizes;

/* The next image of the shard (from the start again at its end): 0 with its
 * key and size, or -1. */
static int shard_next(sizes *z, char *key, size_t cap, int *w, int *h)
{
	titan_err err = {"no samples"};
	for (int tries = 0; tries < 2; tries++) {
		if (z->w == NULL && wds_open(&z->w, z->tar, NULL, &err) != 0)
			break;
		int r = wds_next(z->w, &z->s, &err);
		if (r == 1) {
			const wds_field *jpg = wds_field_get(&z->s, "jpg");
			image im;
			if (jpg == NULL || image_decode(&im, jpg->data, jpg->size, NULL, &err) != 0) {
				fprintf(stderr, "%s: sample %s: %s\n", z->tar, z->s.key,
					jpg ? err.msg : "no jpg");
				return -1;
			}
			*w = im.w;
			*h = im.h;
			image_free(&im);
			snprintf(key, cap, "%s", z->s.key);
			return 0;
		}
		if (r < 0)
			break;
		wds_close(z->w); /* the end: FluxDataset re-loops */
		z->w = NULL;
	}
	fprintf(stderr, "%s: %s\n", z->tar, err.msg);
	return -1;
}

/* A CPU step's draws: randn_like of the posterior's mean and of the latents
 * (b, c, h, w), then rand(b). */
static void step_draws(torch_rng *g, int b, int c, int h, int w)
{
	size_t n = (size_t)b * c * h * w;
	float *x = malloc(n * sizeof *x), t[64];
	if (x == NULL || b > 64)
		abort();
	torch_rng_randn_f32(g, x, n);
	torch_rng_randn_f32(g, x, n);
	torch_rng_rand_f32(g, t, (size_t)b);
	free(x);
}

/* Replays the golden; the number of lines that differ (-1 when it cannot be
 * read), *samples the sample lines seen. */
static int replay(const char *golden, sizes *z, int *samples)
{
	FILE *f = fopen(golden, "r");
	if (f == NULL) {
		perror(golden);
		return -1;
	}
	torch_rng g;
	torch_rng_seed(&g, 0, TORCH_NORMAL_AVX2);
	char line[512], key[128], skey[128];
	int bad = 0, runs = 0;
	*samples = 0;
	for (int no = 1; fgets(line, sizeof line, f); no++) {
		uint64_t seed;
		int64_t base;
		int w, h, off, t5, clip, dims[4];
		char kind[8];
		if (line[0] == '#')
			continue;
		if (sscanf(line, "run %" SCNu64 " %7s", &seed, kind) == 2) {
			torch_rng_seed(&g, seed, TORCH_NORMAL_AVX2);
			runs++;
			if (z->w) { /* a new loader reads the shard from its start */
				wds_close(z->w);
				z->w = NULL;
			}
		} else if (sscanf(line, "base_seed %" SCNd64, &base) == 1) {
			int64_t v = torch_rng_int64(&g);
			if (v != base && bad++ < 5)
				printf("DIFFERS %s:%d: base seed %" PRId64 ", torch %" PRId64 "\n", golden,
				       no, v, base);
		} else if (sscanf(line, "sample %127s %d %d %d %d %d", key, &w, &h, &off, &t5, &clip) ==
			   6) {
			int sw = w, sh = h;
			snprintf(skey, sizeof skey, "%s", key);
			if (z->tar && shard_next(z, skey, sizeof skey, &sw, &sh) != 0) {
				bad++;
				break;
			}
			image_cc12m_draws d;
			int kept = image_cc12m_draw(&g, sw, sh, SIZE, DROPOUT, &d);
			int ok = kept == 1 && strcmp(skey, key) == 0 && sw == w && sh == h &&
				 d.offset == off && d.t5_dropped == t5 && d.clip_dropped == clip;
			if (!ok && bad++ < 5)
				printf("DIFFERS %s:%d: titan %s %dx%d offset %d t5 %d clip %d, torch %s",
				       golden, no, skey, sw, sh, d.offset, d.t5_dropped, d.clip_dropped,
				       line);
			(*samples)++;
		} else if (sscanf(line, "step %d %d %d %d", &dims[0], &dims[1], &dims[2], &dims[3]) ==
			   4) {
			step_draws(&g, dims[0], dims[1], dims[2], dims[3]);
		} else {
			printf("%s:%d: a line this test does not know: %s", golden, no, line);
			bad++;
		}
	}
	fclose(f);
	printf("# %d runs, %d samples, %d lines differ\n", runs, *samples, bad);
	return runs == 0 ? -1 : bad;
}

static void draws_equal_torchtitans_loader_over_cc12m(void **state)
{
	(void)state;
	sizes z = {0};
	int samples;
	assert_int_equal(replay("tests/image/golden/flux_draws.txt", &z, &samples), 0);
	assert_true(samples >= 80);
}

static void skipped_images_draw_nothing(void **state)
{
	(void)state;
	torch_rng g, h;
	torch_rng_seed(&g, 9, TORCH_NORMAL_AVX2);
	h = g;
	image_cc12m_draws d = {.offset = 7};
	assert_int_equal(image_cc12m_draw(&g, 255, 900, SIZE, DROPOUT, &d), 0);
	assert_int_equal(d.offset, 0);
	assert_memory_equal(&g.mt, &h.mt, sizeof g.mt);
	/* no dropout: the crop's draw alone */
	assert_int_equal(image_cc12m_draw(&g, 300, 256, SIZE, 0.0, &d), 1);
	int64_t off;
	assert_int_equal(torch_rng_randint(&h, 0, 300 - SIZE + 1, &off, 1, NULL), 0);
	assert_int_equal(d.offset, off);
	assert_int_equal(d.t5_dropped + d.clip_dropped, 0);
	assert_memory_equal(&g.mt, &h.mt, sizeof g.mt);
}

int main(int argc, char **argv)
{
	if (argc == 3) {
		sizes z = {.tar = argv[1]};
		int samples, bad = replay(argv[2], &z, &samples);
		if (z.w)
			wds_close(z.w);
		wds_sample_free(&z.s);
		return bad != 0;
	}
	if (argc > 1) {
		fprintf(stderr, "usage: test_flux_draws [TAR GOLDEN]\n");
		return 2;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(draws_equal_torchtitans_loader_over_cc12m),
		cmocka_unit_test(skipped_images_draw_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
