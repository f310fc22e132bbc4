/* Tests of lib/flux's sampling (flux_sample.h) against torchtitan 0.3.0's
 * sampling.py, which scripts/flux_sample_golden.py ran into
 * tests/flux/golden/sample/: get_schedule's values exactly; denoise on the
 * flux-debug flavor (2 images of 64 x 48, 5 T5 tokens, 4 steps) with
 * guidance off and on, its latents within 1e-4 of their largest value; the
 * small autoencoder's decode of them; save_image's bytes equal or one level
 * apart where the float32 sums' order differs; the noise given packed the
 * same; bad jobs refused with a line naming the field.
 *
 * The weights and inputs are drawn from weights.json (golden_weights.h), the
 * autoencoder's ("ae.") written as a safetensors file of the test's own. */
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
#include "flux/flux_sample.h"
#include "image/image.h"
#include "safetensors/safetensors.h"
#include "../support/golden_weights.h"
#include "../support/testutil.h"

#define GOLDEN "tests/flux/golden/sample"
#define LATENT_TOL 1e-4  /* largest error over the largest |value| */
#define PIXEL_TOL 1e-4

static backend *be;
static gw_set gw;
static st_file io;

static int setup(void **state)
{
	titan_err e;
	be = backend_cpu_create(0, &e);
	if (be == NULL || gw_load(&gw, GOLDEN "/weights.json", &e) < 0 ||
	    st_open(&io, GOLDEN "/io.safetensors", &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return test_tmpdir_create(state);
}

static int teardown(void **state)
{
	st_close(&io);
	gw_free(&gw);
	backend_free(be);
	return test_tmpdir_remove(state);
}

static const st_tensor *io_get(const char *name, ptz_dtype dt)
{
	const st_tensor *t = st_find(&io, name);
	if (t == NULL)
		fail_msg("%s: no tensor '%s'", GOLDEN "/io.safetensors", name);
	assert_int_equal(t->dtype, dt);
	return t;
}

static int64_t head(const char *key)
{
	return json_integer_value(json_object_get(gw.root, key));
}

/* weights.json's tensor named name, drawn (freed by the caller). */
static float *drawn(const char *name)
{
	float *v = gw_draw(&gw, name);
	if (v == NULL)
		fail_msg("weights.json: no tensor '%s'", name);
	return v;
}

static void schedule_is_0_3_0s_exactly(void **state)
{
	(void)state;
	static const int steps[] = {1, 4, 9, 28, 50, 100};
	static const int64_t seq[] = {48, 1024, 4096};
	float ts[101];
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
		for (size_t j = 0; j < sizeof seq / sizeof seq[0]; j++) {
			char name[64];
			snprintf(name, sizeof name, "schedule.%d.%lld", steps[i], (long long)seq[j]);
			const st_tensor *t = io_get(name, PTZ_F32);
			assert_int_equal(t->shape[0], steps[i] + 1);
			flux_schedule(ts, steps[i], seq[j], 1);
			assert_memory_equal(ts, t->data, sizeof(float) * (size_t)(steps[i] + 1));
		}
	/* notes: 4 steps at 256 px (a 32 x 32 latent) */
	flux_schedule(ts, 4, 1024, 1);
	printf("# 4 steps at 256 px: %.9g %.9g %.9g %.9g %.9g\n", ts[0], ts[1], ts[2], ts[3],
	       ts[4]);
	flux_schedule(ts, 4, 1024, 0);
	assert_true(ts[0] == 1.0f && ts[2] == 0.5f && ts[4] == 0.0f);
}

static void rgb_is_save_images(void **state)
{
	(void)state;
	/* one image of 1 x 2 pixels: channel-major in, interleaved out */
	const float px[6] = {-2.0f, 1.0f, 0.0f, 0.999f, NAN, -0.99f};
	uint8_t rgb[6];
	flux_sample_rgb8(rgb, px, 1, 1, 2);
	const uint8_t want[6] = {0, 127, 0, 255, 254, 1};
	assert_memory_equal(rgb, want, sizeof want);
}

/* The data of path's eXIf chunk (a pointer into buf), or NULL. */
static const uint8_t *exif_chunk(const uint8_t *buf, size_t n, size_t *len)
{
	for (size_t pos = 8; pos + 12 <= n;) {
		size_t k = (size_t)buf[pos] << 24 | (size_t)buf[pos + 1] << 16 |
			   (size_t)buf[pos + 2] << 8 | buf[pos + 3];
		if (memcmp(buf + pos + 4, "eXIf", 4) == 0) {
			*len = k;
			return buf + pos + 8;
		}
		pos += 12 + k;
	}
	return NULL;
}

static void saved_png_is_save_images(void **state)
{
	(void)state;
	titan_err e;
	const st_tensor *gr = io_get("rgb_cfg0", PTZ_U8), *gx = io_get("exif_img0", PTZ_U8);
	int64_t h = gr->shape[1], w = gr->shape[2];
	const char *path = test_path("img0.png");
	if (flux_sample_save_png(path, (const uint8_t *)gr->data, h, w, "img0.png", "a prompt",
				 &e) < 0)
		fail_msg("%s", e.msg);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static uint8_t buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof buf);
	image im;
	if (image_decode(&im, buf, n, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(im.mode, IMAGE_RGB);
	assert_int_equal(im.w, w);
	assert_int_equal(im.h, h);
	assert_memory_equal(im.px, gr->data, (size_t)(h * w * 3));
	image_free(&im);
	size_t xn = 0;
	const uint8_t *x = exif_chunk(buf, n, &xn);
	assert_non_null(x);
	assert_int_equal(xn, gx->shape[0]);
	assert_memory_equal(x, gx->data, xn);
	printf("# %s: %zu bytes, its EXIF (%zu bytes) PIL's\n", "img0.png", n, xn);
	/* PIL's write_string: a character outside ASCII is one '?' */
	uint8_t *ex;
	const uint16_t tag = 0x010E;
	const char *val = "caf\xc3\xa9 \xe2\x82\xac";
	if (image_exif_ascii(&tag, &val, 1, &ex, &xn, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(xn, 8 + 2 + 12 + 4 + 8);
	assert_memory_equal(ex + 26, "caf? ?\0\0", 8);
	free(ex);
	test_refused(flux_sample_save_png(path, (const uint8_t *)gr->data, 0, w, "x", NULL, &e), &e,
		"image of height 0, width 48");
}

static flux_model *debug_model(void)
{
	titan_err e;
	flux_model *m = flux_model_create(be, flux_flavor("flux-debug"), &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		assert_string_equal(p->name, gw.t[i].name);
		gw_fill(&gw, (size_t)i, p->w);
	}
	return m;
}

static flux_ae *small_ae(void)
{
	titan_err e;
	flux_ae_config c;
	const char *path = test_path("ae.safetensors");
	if (flux_ae_config_read(&c, GOLDEN "/ae_config.json", &e) < 0 ||
	    gw_write_st(&gw, "ae.", path, &e) < 0)
		fail_msg("%s", e.msg);
	flux_ae *ae = flux_ae_open(be, path, &c, BE_F32, &e);
	if (ae == NULL)
		fail_msg("%s", e.msg);
	return ae;
}

/* The largest difference of two byte images, and how many bytes differ. */
static int rgb_diff(const uint8_t *a, const uint8_t *b, int64_t n, int64_t *ndiff)
{
	int worst = 0;
	*ndiff = 0;
	for (int64_t i = 0; i < n; i++) {
		int d = abs((int)a[i] - (int)b[i]);
		*ndiff += d != 0;
		worst = d > worst ? d : worst;
	}
	return worst;
}

static void sampling_matches_0_3_0(void **state)
{
	(void)state;
	titan_err e;
	flux_model *m = debug_model();
	flux_ae *ae = small_ae();
	int64_t b = head("batch"), hgt = head("height"), wid = head("width");
	int64_t hl = hgt / 8, wl = wid / 8, nlat = b * 16 * hl * wl, npx = b * 3 * hgt * wid;
	float *noise = drawn("input.noise"), *txt = drawn("input.txt"),
	      *txt0 = drawn("input.txt_empty"), *y = drawn("input.y"), *y0 = drawn("input.y_empty");
	flux_sample_in in = {.b = b, .height = hgt, .width = wid, .lt = head("text_tokens"),
			     .c_txt = 4096, .c_vec = 768, .noise = noise, .txt = txt, .y = y,
			     .txt_empty = txt0, .y_empty = y0, .steps = (int)head("steps"),
			     .cfg_scale = json_number_value(json_object_get(gw.root, "cfg_scale"))};
	float *packed = malloc(sizeof(float) * (size_t)nlat),
	      *lat = malloc(sizeof(float) * (size_t)nlat), *px = malloc(sizeof(float) * (size_t)npx),
	      *repacked = malloc(sizeof(float) * (size_t)nlat);
	uint8_t *rgb = malloc((size_t)npx);
	for (int cfg = 0; cfg < 2; cfg++) {
		char name[64];
		in.cfg = cfg;
		for (int64_t j = 0; j < nlat; j++)
			lat[j] = packed[j] = NAN;
		flux_sample_out out = {.packed = packed, .latents = lat, .pixels = px, .rgb = rgb};
		if (flux_sample(m, ae, &in, &out, &e) < 0)
			fail_msg("%s", e.msg);
		printf("# guidance %s:\n", cfg ? "on (scale 5)" : "off");
		snprintf(name, sizeof name, "latents_cfg%d", cfg);
		const st_tensor *gl = io_get(name, PTZ_F32);
		assert_int_equal(gl->shape[0] * gl->shape[1] * gl->shape[2] * gl->shape[3], nlat);
		assert_true(test_max_rel_print("latents", lat, (const float *)gl->data, nlat) <=
			    LATENT_TOL);
		flux_pack_latents(repacked, (const float *)gl->data, b, 16, hl, wl);
		assert_true(test_max_rel_print("packed latents", packed, repacked, nlat) <=
			    LATENT_TOL);
		/* the golden keeps every 4th row and column of the decoded pixels */
		snprintf(name, sizeof name, "decoded_cfg%d", cfg);
		const st_tensor *gd = io_get(name, PTZ_F32);
		int64_t sh = gd->shape[2], sw = gd->shape[3], nsub = b * 3 * sh * sw;
		float *sub = malloc(sizeof(float) * (size_t)nsub);
		for (int64_t p = 0; p < b * 3; p++)
			for (int64_t r = 0; r < sh; r++)
				for (int64_t c = 0; c < sw; c++)
					sub[(p * sh + r) * sw + c] = px[(p * hgt + 4 * r) * wid + 4 * c];
		assert_true(test_max_rel_print("decoded pixels", sub, (const float *)gd->data,
					       nsub) <= PIXEL_TOL);
		free(sub);
		snprintf(name, sizeof name, "rgb_cfg%d", cfg);
		const st_tensor *gr = io_get(name, PTZ_U8);
		int64_t ndiff;
		int worst = rgb_diff(rgb, (const uint8_t *)gr->data, npx, &ndiff);
		printf("# save_image's bytes: %lld of %lld differ, by %d at most\n",
		       (long long)ndiff, (long long)npx, worst);
		assert_true(worst <= 1);
	}
	free(noise);
	free(txt);
	free(txt0);
	free(y);
	free(y0);
	free(packed);
	free(lat);
	free(px);
	free(repacked);
	free(rgb);
	flux_ae_free(ae);
	flux_model_free(m);
}

/* A tiny model of the same kind (hidden 256 in 2 heads, a double block and
 * 2 single ones, T5 states of 24, CLIP vectors of 8). */
static flux_model *tiny_model(void)
{
	titan_err e;
	flux_config c = *flux_flavor("flux-debug");
	c.hidden_size = 256;
	c.num_heads = 2;
	c.context_in_dim = 24;
	c.vec_in_dim = 8;
	c.depth = 1;
	c.depth_single_blocks = 2;
	flux_model *m = flux_model_create(be, &c, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		for (int64_t j = 0; j < p->numel; j++)
			p->w[j] = 0.05f * test_counter_draw(7, (uint64_t)i, (uint64_t)j);
	}
	return m;
}

static void packed_noise_samples_the_same(void **state)
{
	(void)state;
	titan_err e;
	flux_model *m = tiny_model();
	float noise[16 * 4 * 6], packed_noise[16 * 4 * 6], txt[3 * 24], y[8], a[384], b[384];
	for (size_t j = 0; j < sizeof noise / sizeof noise[0]; j++)
		noise[j] = test_counter_draw(9, 0, j);
	for (size_t j = 0; j < sizeof txt / sizeof txt[0]; j++)
		txt[j] = test_counter_draw(9, 1, j);
	for (size_t j = 0; j < sizeof y / sizeof y[0]; j++)
		y[j] = test_counter_draw(9, 2, j);
	flux_pack_latents(packed_noise, noise, 1, 16, 4, 6);
	flux_sample_in in = {.b = 1, .height = 32, .width = 48, .lt = 3, .c_txt = 24, .c_vec = 8,
			     .noise = noise, .txt = txt, .y = y, .txt_empty = txt, .y_empty = y,
			     .steps = 3, .cfg = 1, .cfg_scale = 3.0};
	if (flux_sample(m, NULL, &in, &(flux_sample_out){.packed = a}, &e) < 0)
		fail_msg("%s", e.msg);
	in.noise = packed_noise;
	in.noise_packed = 1;
	if (flux_sample(m, NULL, &in, &(flux_sample_out){.packed = b}, &e) < 0)
		fail_msg("%s", e.msg);
	assert_memory_equal(a, b, sizeof a);
	/* guidance with the same prompt twice is the prompt alone (up to the
	 * products' order in a batch of 2) */
	in.cfg = 0;
	if (flux_sample(m, NULL, &in, &(flux_sample_out){.packed = b}, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(test_max_rel(b, a, 384) <= 1e-6);
	flux_model_free(m);
}

static void bad_jobs_are_refused(void **state)
{
	(void)state;
	titan_err e;
	flux_model *m = tiny_model();
	float v[8] = {0};
	const flux_sample_in ok = {.b = 1, .height = 32, .width = 32, .lt = 3, .c_txt = 24,
				   .c_vec = 8, .noise = v, .txt = v, .y = v, .steps = 4,
				   .cfg_scale = 5.0};
	flux_sample_out none = {0}, pix = {.rgb = (uint8_t *)v};
	const struct {
		const char *says;
		flux_sample_in in;
	} cases[] = {
		{"height 40 is not a multiple of 16", {.height = 40}},
		{"width 8, expected 16 .. 16384", {.width = 8}},
		{"height 32768", {.height = 32768}},
		{"b (images) 0", {.b = -1}},
		{"steps 0", {.steps = -1}},
		{"lt (text tokens) 0", {.lt = -1}},
		{"c_txt 4096, the model's context_in_dim is 24", {.c_txt = 4096}},
		{"c_vec 768, the model's vec_in_dim is 8", {.c_vec = 768}},
		{"cfg_scale nan is not finite", {.cfg = 1, .cfg_scale = NAN}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		flux_sample_in in = ok, d = cases[i].in;
		in.height = d.height ? d.height : in.height;
		in.width = d.width ? d.width : in.width;
		in.b = d.b ? (d.b < 0 ? 0 : d.b) : in.b;
		in.steps = d.steps ? (d.steps < 0 ? 0 : d.steps) : in.steps;
		in.lt = d.lt ? (d.lt < 0 ? 0 : d.lt) : in.lt;
		in.c_txt = d.c_txt ? d.c_txt : in.c_txt;
		in.c_vec = d.c_vec ? d.c_vec : in.c_vec;
		if (d.cfg) {
			in.cfg = 1;
			in.cfg_scale = d.cfg_scale;
			in.txt_empty = in.y_empty = v;
		}
		test_refused(flux_sample(m, NULL, &in, &none, &e), &e, cases[i].says);
	}
	flux_sample_in in = ok;
	in.cfg = 1;
	test_refused(flux_sample(m, NULL, &in, &none, &e), &e, "txt_empty, y_empty with cfg");
	in = ok;
	in.noise = NULL;
	test_refused(flux_sample(m, NULL, &in, &none, &e), &e, "missing");
	test_refused(flux_sample(m, NULL, &ok, &pix, &e), &e, "without an autoencoder");
	/* an autoencoder of the wrong latent width or factor */
	flux_ae *ae = small_ae();
	flux_config c = *flux_model_config(m);
	c.in_channels = c.out_channels = 32;
	flux_model *m8 = flux_model_create(be, &c, &e);
	assert_non_null(m8);
	test_refused(flux_sample(m8, ae, &ok, &pix, &e), &e,
		"the autoencoder's z_channels 16, the model's latents have in_channels / 4 = 8");
	flux_model_free(m8);
	flux_ae_free(ae);
	flux_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(schedule_is_0_3_0s_exactly),
		cmocka_unit_test(rgb_is_save_images),
		cmocka_unit_test(saved_png_is_save_images),
		cmocka_unit_test(packed_noise_samples_the_same),
		cmocka_unit_test(bad_jobs_are_refused),
		cmocka_unit_test(sampling_matches_0_3_0),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
