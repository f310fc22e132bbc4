/* Tests of make demo-flux's pieces, which the demo then runs unchecked:
 *   - build/demo/flux_shapes' tar reads back through lib/wds as a cc12m
 *     shard (KEY.jpg, KEY.txt, KEY.json), its images pass fluxin_image at 64
 *     px, its samples depend on (seed, index) alone, its first image is
 *     the one the autoencoder's golden was made from, and --centred
 *     --in-order gives the demo's 15 kinds in turn;
 *   - the committed tokenizers (scripts/demo/flux/{t5,clip}) give the ids
 *     transformers' T5TokenizerFast / CLIPTokenizerFast give
 *     (scripts/demo_flux_tokenizers.py printed them);
 *   - build/demo/flux_encoders' weights load in lib/textenc and tell
 *     captions apart, and fluxin encodes the demo's samples with every
 *     committed piece (tokenizers, encoders, autoencoder) into records;
 *   - the committed autoencoder (scripts/demo/flux/ae.*) encodes and decodes
 *     as torchtitan 0.3.0's AutoEncoder does (tests/demo/golden/ae_io from
 *     scripts/demo_flux_ae.py golden) within float32 rounding;
 *   - image_grid places its images, and image_png_encode's PNG decodes back
 *     through lib/image to the same pixels.
 * The demo's programs are run from $BUILD/demo (tests/run.sh sets BUILD). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fluxae/fluxae.h"
#include "fluxin/fluxin.h"
#include "image/image.h"
#include "safetensors/safetensors.h"
#include "textenc/textenc.h"
#include "tok/tok.h"
#include "wds/wds.h"
#include "../support/testutil.h"

#define ASSETS "scripts/demo/flux"
#define GOLDEN "tests/demo/golden/ae_io.safetensors"

static backend *be;
static char demo_bin[512];

static int setup(void **state)
{
	titan_err e;
	if ((be = backend_cpu_create(0, &e)) == NULL) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	const char *b = getenv("BUILD");
	snprintf(demo_bin, sizeof demo_bin, "%s/demo", b && *b ? b : "build");
	return test_tmpdir_create(state);
}

static int teardown(void **state)
{
	backend_free(be);
	return test_tmpdir_remove(state);
}

static void run(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("failed: %s", cmd);
}

/* A tar of n shapes with seed and flux_shapes' flags ("" or "--centred ...")
 * into the scratch folder; its path. */
static const char *shapes_with(int n, int seed, const char *flags)
{
	static char path[512];
	char name[64];
	snprintf(name, sizeof name, "shapes-%d-%d-%zu.tar", n, seed, strlen(flags));
	snprintf(path, sizeof path, "%s", test_path(name));
	run("%s/flux_shapes -n %d --seed %d %s -o %s", demo_bin, n, seed, flags, path);
	return path;
}

static const char *shapes(int n, int seed)
{
	return shapes_with(n, seed, "");
}

static void shapes_tar_reads_back_as_a_cc12m_shard(void **state)
{
	(void)state;
	const char *tar = shapes(12, 0);
	titan_err e;
	wds *w;
	assert_int_equal(wds_open(&w, tar, NULL, &e), 0);
	wds_sample s = {0};
	int n = 0, r;
	uint8_t *rgb = malloc(3 * 64 * 64);
	while ((r = wds_next(w, &s, &e)) == 1) {
		char key[16];
		snprintf(key, sizeof key, "%09d", n);
		assert_string_equal(s.key, key);
		assert_int_equal(s.n_fields, 3);
		const wds_field *img = wds_field_get(&s, "jpg"), *txt = wds_field_get(&s, "txt");
		assert_non_null(img);
		assert_non_null(txt);
		assert_non_null(wds_field_get(&s, "json"));
		assert_true(wds_utf8_valid(txt->data, txt->size));
		assert_memory_equal(txt->data, "a ", 2);
		assert_true(strstr((char *)txt->data, "circle") || strstr((char *)txt->data, "square") ||
			    strstr((char *)txt->data, "triangle"));
		uint32_t iw, ih, off;
		assert_int_equal(fluxin_image(img->data, img->size, s.key, s.index, 64, 0, 0, NULL, NULL,
					      rgb, &iw, &ih, &off, &e),
				 FLUXIN_OK);
		assert_int_equal(iw, 64);
		assert_int_equal(ih, 64);
		n++;
	}
	assert_int_equal(r, 0);
	assert_int_equal(n, 12);
	free(rgb);
	wds_sample_free(&s);
	wds_close(w);
}

/* The members of a tar as one buffer each, in order (up to max). */
static int members(const char *tar, wds_sample *out, int max)
{
	titan_err e;
	wds *w;
	assert_int_equal(wds_open(&w, tar, NULL, &e), 0);
	int n = 0;
	while (n < max && wds_next(w, &out[n], &e) == 1)
		n++;
	wds_close(w);
	return n;
}

static void shapes_depend_on_seed_and_index_alone(void **state)
{
	(void)state;
	wds_sample a[8] = {0}, b[8] = {0}, c[8] = {0};
	assert_int_equal(members(shapes(8, 0), a, 8), 8);
	assert_int_equal(members(shapes(3, 0), b, 8), 3);
	assert_int_equal(members(shapes(3, 1), c, 8), 3);
	int differ = 0;
	for (int i = 0; i < 3; i++) {
		const wds_field *fa = wds_field_get(&a[i], "jpg"), *fb = wds_field_get(&b[i], "jpg"),
				*fc = wds_field_get(&c[i], "jpg");
		assert_int_equal(fa->size, fb->size);
		assert_memory_equal(fa->data, fb->data, fa->size);
		differ += fa->size != fc->size || memcmp(fa->data, fc->data, fa->size) != 0;
	}
	assert_true(differ > 0);
	for (int i = 0; i < 8; i++) {
		wds_sample_free(&a[i]);
		wds_sample_free(&b[i]);
		wds_sample_free(&c[i]);
	}
}

/* The demo's data: every shape large in the centre, captioned by colour and
 * shape; its prompts: the 15 kinds in turn, a shape every five. */
static void centred_in_order_are_the_demos_15_kinds(void **state)
{
	(void)state;
	static const char *const shape[] = {"circle", "square", "triangle"};
	static const char *const colour[] = {"red", "green", "blue", "yellow", "purple"};
	wds_sample s[16] = {{0}};
	assert_int_equal(members(shapes_with(16, 1, "--centred --in-order"), s, 16), 16);
	for (int i = 0; i < 16; i++) {
		char want[64];
		snprintf(want, sizeof want, "a %s %s", colour[i % 5], shape[i / 5 % 3]);
		const wds_field *txt = wds_field_get(&s[i], "txt"), *json = wds_field_get(&s[i], "json");
		assert_string_equal((char *)txt->data, want);
		assert_non_null(strstr((char *)json->data, "\"size\": \"large\""));
		assert_non_null(strstr((char *)json->data, "\"place\": \"in the centre\""));
		wds_sample_free(&s[i]);
	}
	wds_sample c[3] = {{0}}; /* random kinds, three words each */
	assert_int_equal(members(shapes_with(3, 0, "--centred"), c, 3), 3);
	for (int i = 0; i < 3; i++) {
		const char *txt = (char *)wds_field_get(&c[i], "txt")->data;
		int spaces = 0;
		for (const char *p = txt; *p; p++)
			spaces += *p == ' ';
		assert_memory_equal(txt, "a ", 2);
		assert_int_equal(spaces, 2);
		wds_sample_free(&c[i]);
	}
}

typedef struct golden {
	st_file f;
	float *pixels, *moments, *decoded; /* (1, 3, 64, 64), (1, 32, 8, 8), (1, 3, 64, 64) */
} golden;

static float *golden_tensor(golden *g, const char *name, int64_t c, int64_t hw)
{
	titan_err e;
	const st_tensor *t = st_find(&g->f, name);
	assert_non_null(t);
	int64_t shape[4] = {1, c, hw, hw};
	float *p = malloc((size_t)(c * hw * hw) * sizeof *p);
	assert_int_equal(st_tensor_to_f32(t, 4, shape, p, &e), 0);
	return p;
}

static void golden_open(golden *g)
{
	titan_err e;
	if (st_open(&g->f, GOLDEN, &e) < 0)
		fail_msg("%s", e.msg);
	g->pixels = golden_tensor(g, "pixels", 3, 64);
	g->moments = golden_tensor(g, "moments", 32, 8);
	g->decoded = golden_tensor(g, "decoded", 3, 64);
}

static void golden_close(golden *g)
{
	free(g->pixels);
	free(g->moments);
	free(g->decoded);
	st_close(&g->f);
}

static void first_shape_is_the_goldens_image(void **state)
{
	(void)state;
	golden g;
	golden_open(&g);
	wds_sample s[1] = {0};
	assert_int_equal(members(shapes(1, 0), s, 1), 1);
	const wds_field *img = wds_field_get(&s[0], "jpg");
	image im;
	titan_err e;
	assert_int_equal(image_decode(&im, img->data, img->size, NULL, &e), 0);
	float *px = malloc(3 * 64 * 64 * sizeof *px);
	assert_int_equal(image_cc12m(&im, 64, 0, px, &e), 1);
	assert_memory_equal(px, g.pixels, 3 * 64 * 64 * sizeof *px);
	free(px);
	image_free(&im);
	wds_sample_free(&s[0]);
	golden_close(&g);
}

/* ids transformers gave (scripts/demo_flux_tokenizers.py), up to the padding */
static const struct {
	const char *text;
	int32_t t5[12], clip[12];
	int t5_n, clip_n;
} tok_cases[] = {
	{"a large blue circle at the bottom",
	 {3, 6, 20, 8, 5, 4, 12, 1}, {574, 262, 274, 320, 283, 270, 266, 295, 575}, 8, 9},
	{"a large blue circle at the bottom left",
	 {3, 6, 20, 8, 5, 4, 12, 14, 1}, {574, 262, 274, 320, 283, 270, 266, 295, 303, 575}, 9, 10},
	{"A Red CIRCLE, at the top!",
	 {23, 50, 23, 67, 28, 27, 23, 52, 58, 67, 52, 61},
	 {574, 262, 308, 283, 338, 270, 266, 287, 327, 575}, 12, 10},
};

static void check_ids(const char *dir, int len, int t5)
{
	titan_err e;
	tok *t;
	assert_int_equal(tok_load(&t, dir, NULL, &e), 0);
	tok_enc *enc = tok_enc_new(t, &e);
	assert_non_null(enc);
	for (size_t i = 0; i < sizeof tok_cases / sizeof *tok_cases; i++) {
		int32_t ids[77];
		const char *s = tok_cases[i].text;
		int64_t n = tok_encode_fixed(enc, (const uint8_t *)s, strlen(s), (size_t)len, ids,
					     NULL, &e);
		int want_n = t5 ? tok_cases[i].t5_n : tok_cases[i].clip_n;
		const int32_t *want = t5 ? tok_cases[i].t5 : tok_cases[i].clip;
		int cmp = want_n < 12 ? want_n : 12;
		assert_true(n >= cmp);
		assert_memory_equal(ids, want, (size_t)cmp * sizeof *ids);
		if (want_n < 12) {
			assert_int_equal(n, want_n);
			assert_int_equal(ids[n], t5 ? 0 : 575); /* the pad */
		}
	}
	tok_enc_free(enc);
	tok_free(t);
}

static void tokenizers_give_transformers_ids(void **state)
{
	(void)state;
	check_ids(ASSETS "/t5", 32, 1);
	check_ids(ASSETS "/clip", 77, 0);
}

/* The committed encoder folders with drawn weights, in the scratch folder. */
static void encoders(char *t5, char *clip, size_t cap)
{
	snprintf(t5, cap, "%s", test_path("enc"));
	run("rm -rf %s && mkdir -p %s && cp -r " ASSETS "/t5 " ASSETS "/clip %s", t5, t5, t5);
	snprintf(clip, cap, "%s/clip", t5);
	strcat(t5, "/t5");
	run("%s/flux_encoders t5 %s && %s/flux_encoders clip %s", demo_bin, t5, demo_bin, clip);
}

static double diff(const float *a, const float *b, int64_t n)
{
	double d = 0;
	for (int64_t i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return d;
}

static void drawn_encoders_tell_captions_apart(void **state)
{
	(void)state;
	char t5d[512], clipd[512];
	encoders(t5d, clipd, sizeof t5d);
	titan_err e;
	t5_encoder *t5 = t5_encoder_open(be, t5d, BE_F32, &e);
	if (t5 == NULL)
		fail_msg("%s", e.msg);
	clip_text *clip = clip_text_open(be, clipd, BE_F32, &e);
	if (clip == NULL)
		fail_msg("%s", e.msg);
	int32_t t5_ids[2][8] = {{3, 6, 20, 8, 5, 4, 12, 1}, {3, 6, 21, 8, 5, 4, 12, 1}};
	int32_t clip_ids[2][10] = {{574, 262, 274, 320, 283, 270, 266, 295, 575, 575},
				   {574, 262, 274, 308, 283, 270, 266, 295, 575, 575}};
	int64_t d = t5_encoder_config(t5)->d_model, h = clip_text_config(clip)->hidden;
	float *ht = malloc((size_t)(2 * 8 * d) * sizeof *ht), *hc = malloc((size_t)(2 * h) * sizeof *hc);
	assert_int_equal(t5_encoder_forward(t5, &t5_ids[0][0], 2, 8, ht, &e), 0);
	assert_int_equal(clip_text_forward(clip, &clip_ids[0][0], 2, 10, hc, &e), 0);
	for (int64_t i = 0; i < 2 * 8 * d; i++)
		assert_true(isfinite(ht[i]));
	for (int64_t i = 0; i < 2 * h; i++)
		assert_true(isfinite(hc[i]));
	/* one word apart: every T5 position sees it (bidirectional), CLIP's pooled row too */
	double dt = diff(ht, ht + 8 * d, d), dc = diff(hc, hc + h, h);
	printf("# T5 position 0 moves %.3g, CLIP pooled %.3g for one word\n", dt, dc);
	assert_true(dt > 1e-3);
	assert_true(dc > 1e-2);
	free(ht);
	free(hc);
	clip_text_free(clip);
	t5_encoder_free(t5);
}

static void fluxin_encodes_the_demo_with_its_assets(void **state)
{
	(void)state;
	char t5d[512], clipd[512];
	encoders(t5d, clipd, sizeof t5d);
	fluxin_opts o = {.t5 = t5d, .clip = clipd, .autoencoder = ASSETS "/ae.safetensors",
			 .ae_config = ASSETS "/ae.json", .image_size = 64, .t5_len = 32,
			 .dtype = FLUXREC_F32, .model_dtype = FLUXREC_F32};
	titan_err e;
	fluxin *f = fluxin_open(be, &o, &e);
	if (f == NULL)
		fail_msg("%s", e.msg);
	const fluxrec_header *h = fluxin_header(f);
	assert_int_equal(h->latent_height, 8);
	assert_int_equal(h->latent_width, 8);
	wds_sample s[4] = {0};
	assert_int_equal(members(shapes(4, 0), s, 4), 4);
	fluxin_sample in[4];
	for (int i = 0; i < 4; i++) {
		const wds_field *img = wds_field_get(&s[i], "jpg"), *txt = wds_field_get(&s[i], "txt");
		in[i] = (fluxin_sample){.key = s[i].key, .index = s[i].index, .image = img->data,
					.image_bytes = img->size, .caption = txt->data,
					.caption_bytes = txt->size};
	}
	uint8_t *recs = malloc(4 * h->record_bytes);
	int status[4];
	titan_err why[4];
	assert_int_equal(fluxin_encode(f, in, 4, recs, status, why, &e), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(status[i], FLUXIN_OK);
		fluxrec_view v;
		assert_int_equal(fluxrec_record_view(h, recs + i * h->record_bytes, &v, "rec", &e), 0);
		assert_non_null(v.moments);
		assert_true(v.t5_tokens > 3 && v.t5_tokens < 32);
	}
	free(recs);
	for (int i = 0; i < 4; i++)
		wds_sample_free(&s[i]);
	fluxin_free(f);
}

static void autoencoder_matches_torch(void **state)
{
	(void)state;
	golden g;
	golden_open(&g);
	titan_err e;
	flux_ae_config c;
	assert_int_equal(flux_ae_config_read(&c, ASSETS "/ae.json", &e), 0);
	flux_ae *m = flux_ae_open(be, ASSETS "/ae.safetensors", &c, BE_F32, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	float *mom = malloc(32 * 64 * sizeof *mom), *z = malloc(16 * 64 * sizeof *z);
	float *dec = malloc(3 * 64 * 64 * sizeof *dec), *zero = calloc(16 * 64, sizeof *zero);
	assert_int_equal(flux_ae_encode(m, g.pixels, 1, 64, 64, mom, &e), 0);
	assert_true(test_max_rel_print("moments", mom, g.moments, 32 * 64) < 1e-5);
	/* eps 0: z = scale * (mean - shift), the golden's latents */
	flux_ae_sample(&c, 0, g.moments, zero, 1, 8, 8, z);
	assert_int_equal(flux_ae_decode(m, z, 1, 8, 8, dec, &e), 0);
	assert_true(test_max_rel_print("decoded", dec, g.decoded, 3 * 64 * 64) < 1e-5);
	/* and the reconstruction is the image: a mean error of a few 8-bit steps */
	double err = 0;
	for (int i = 0; i < 3 * 64 * 64; i++)
		err += fabs(fmin(fmax(dec[i], -1), 1) - g.pixels[i]);
	err = err / (3 * 64 * 64) * 127.5;
	printf("# reconstruction: mean |error| %.2f / 255\n", err);
	assert_true(err < 4);
	free(mom);
	free(z);
	free(dec);
	free(zero);
	flux_ae_free(m);
	golden_close(&g);
}

static void grid_places_images_and_png_round_trips(void **state)
{
	(void)state;
	uint8_t a[2 * 3 * 3], b[2 * 3 * 3], c[2 * 3 * 3]; /* (2, 3, 3) each */
	for (int i = 0; i < 18; i++) {
		a[i] = (uint8_t)i;
		b[i] = (uint8_t)(100 + i);
		c[i] = (uint8_t)(200 + i);
	}
	const uint8_t *imgs[3] = {a, b, c}, bg[3] = {7, 8, 9};
	uint8_t *g;
	int gw, gh;
	titan_err e;
	assert_int_equal(image_grid(imgs, 3, 3, 2, 2, 1, bg, &g, &gw, &gh, &e), 0);
	assert_int_equal(gw, 2 * 3 + 3);
	assert_int_equal(gh, 2 * 2 + 3);
	/* c is the second row's first: x 1, y 1 + 2 + 1 */
	assert_memory_equal(g + ((size_t)4 * gw + 1) * 3, c, 9);
	assert_memory_equal(g + ((size_t)5 * gw + 1) * 3, c + 9, 9);
	assert_memory_equal(g + ((size_t)1 * gw + 5) * 3, b, 9);
	assert_memory_equal(g, bg, 3);
	assert_memory_equal(g + ((size_t)4 * gw + 5) * 3, bg, 3); /* the empty cell */
	uint8_t *png;
	size_t n;
	assert_int_equal(image_png_encode(g, gw, gh, 3, NULL, 0, &png, &n, &e), 0);
	image im;
	assert_int_equal(image_decode(&im, png, n, NULL, &e), 0);
	assert_int_equal(im.mode, IMAGE_RGB);
	assert_int_equal(im.w, gw);
	assert_int_equal(im.h, gh);
	assert_memory_equal(im.px, g, (size_t)gw * gh * 3);
	assert_int_equal(image_png_write(test_path("grid.png"), g, gw, gh, 3, NULL, 0, &e), 0);
	uint8_t *none;
	assert_int_equal(image_grid(imgs, 0, 3, 2, 2, 1, bg, &none, &gw, &gh, &e) == 0 ? 1 : 0, 0);
	image_free(&im);
	free(png);
	free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shapes_tar_reads_back_as_a_cc12m_shard),
		cmocka_unit_test(shapes_depend_on_seed_and_index_alone),
		cmocka_unit_test(centred_in_order_are_the_demos_15_kinds),
		cmocka_unit_test(first_shape_is_the_goldens_image),
		cmocka_unit_test(tokenizers_give_transformers_ids),
		cmocka_unit_test(drawn_encoders_tell_captions_apart),
		cmocka_unit_test(fluxin_encodes_the_demo_with_its_assets),
		cmocka_unit_test(autoencoder_matches_torch),
		cmocka_unit_test(grid_places_images_and_png_round_trips),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
