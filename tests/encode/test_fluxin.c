/* Tests of lib/fluxin (titan-encode's library) with the deterministic tiny
 * encoders of tests/support/flux_models.h and the Flux tokenizer fixtures.
 *
 *   test_fluxin                      the unit tests
 *   test_fluxin mkmodels DIR [real [T5_LAYERS]]
 *                                    write the encoders into DIR/t5 and
 *                                    DIR/clip: tiny, or T5-XXL's and CLIP
 *                                    ViT-L/14's shapes (T5_LAYERS of T5's 24);
 *                                    and the tiny autoencoder, DIR/ae.json and
 *                                    DIR/ae.safetensors
 *   test_fluxin golden STREAM GOLDEN a record stream against torchtitan's
 *                                    (scripts/flux_encode_golden.py): ids and
 *                                    offsets equal, encodings within 1e-5 of
 *                                    the largest reference value, pixels'
 *                                    SHA-256 equal; a line per check
 *   test_fluxin recheck STREAM MODELS T5TOK CLIPTOK TAR
 *                                    every record against lib/tok, lib/textenc
 *                                    and lib/image run on its sample alone
 *   test_fluxin mktar OUT NAME FILE [NAME FILE...]
 *                                    a tar whose members are named NAME (any
 *                                    bytes: "../x.jpg", control characters)
 *                                    holding FILE's bytes ("-": none) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "../support/flux_models.h"
#include "../support/testutil.h"
#include "core/bf16.h"
#include "core/sha256.h"
#include "fluxae/fluxae.h"
#include "fluxin/fluxin.h"
#include "safetensors/safetensors.h"
#include "textenc/textenc.h"
#include "tok/tok.h"
#include "wds/wds.h"

#define TOKS "build/fixtures/tokenizers"
#define T5_TOK TOKS "/sentencepiece_unigram"
#define CLIP_TOK TOKS "/clip_vit_l14"
#define IMG "tests/image/golden/img/"
#define HOSTILE "tests/image/golden/hostile/"

static int mkmodels(int argc, char **argv)
{
	test_t5_dims t5 = test_t5_tiny;
	test_clip_dims clip = test_clip_tiny;
	if (argc > 3 && strcmp(argv[3], "real") == 0) {
		t5 = test_t5_xxl;
		clip = test_clip_large;
		if (argc > 4)
			t5.layers = atoi(argv[4]);
	}
	titan_err err;
	if (test_make_encoders(argv[2], &t5, &clip, &err) != 0 || test_make_ae(argv[2], &err) != 0) {
		fprintf(stderr, "test_fluxin: %s\n", err.msg);
		return 1;
	}
	return 0;
}

static uint8_t *slurp(const char *path, size_t *n);

/* Names as given: GNU tar strips "../" and leading "/" when it writes. */
static int mktar(int argc, char **argv)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (archive_write_open_filename(a, argv[2]) != ARCHIVE_OK) {
		fprintf(stderr, "%s: %s\n", argv[2], archive_error_string(a));
		return 1;
	}
	for (int i = 3; i + 1 < argc; i += 2) {
		size_t n = 0;
		uint8_t *d = strcmp(argv[i + 1], "-") ? slurp(argv[i + 1], &n) : NULL;
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, argv[i]);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0644);
		archive_entry_set_size(e, (la_int64_t)n);
		if (archive_write_header(a, e) != ARCHIVE_OK ||
		    (n && archive_write_data(a, d, n) != (la_ssize_t)n)) {
			fprintf(stderr, "%s: %s\n", argv[2], archive_error_string(a));
			return 1;
		}
		archive_entry_free(e);
		free(d);
	}
	int rc = archive_write_close(a) == ARCHIVE_OK ? 0 : 1;
	archive_write_free(a);
	return rc;
}

static float elem(const void *p, size_t i, uint32_t dtype)
{
	if (dtype == FLUXREC_BF16)
		return bf16_to_f32(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

/* max |got - want| over max |want| */
static double rel_err(const void *got, uint32_t dtype, const float *want, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)elem(got, i, dtype) - want[i]));
		den = fmax(den, fabs((double)want[i]));
	}
	return den > 0 ? num / den : num;
}

static void hex_sha(const void *p, size_t n, uint8_t out[32])
{
	titan_err e;
	if (sha256(p, n, out, &e) != 0)
		memset(out, 0, 32);
}

/* ---- golden: the records against torchtitan's */

typedef struct golden {
	st_file f;
	const int32_t *t5_ids, *clip_ids, *offset, *e_t5_ids, *e_clip_ids;
	const float *t5, *clip, *e_t5, *e_clip;
	const float *moments;   /* NULL: the golden has none */
	int64_t n_moments;      /* per record */
	const uint8_t *px_sha;
	int64_t n, t5_len, clip_len, t5_dim, clip_dim;
	char *keys;
} golden;

static const void *gt(golden *g, const char *name)
{
	const st_tensor *t = st_find(&g->f, name);
	if (t == NULL) {
		fprintf(stderr, "golden: no tensor %s\n", name);
		exit(1);
	}
	return t->data;
}

static void golden_open(golden *g, const char *path)
{
	titan_err e;
	if (st_open(&g->f, path, &e) != 0) {
		fprintf(stderr, "%s\n", e.msg);
		exit(1);
	}
	g->t5_ids = gt(g, "t5_ids");
	g->clip_ids = gt(g, "clip_ids");
	g->offset = gt(g, "offset");
	g->e_t5_ids = gt(g, "empty_t5_ids");
	g->e_clip_ids = gt(g, "empty_clip_ids");
	g->t5 = gt(g, "t5");
	g->clip = gt(g, "clip");
	g->e_t5 = gt(g, "empty_t5");
	g->e_clip = gt(g, "empty_clip");
	g->px_sha = gt(g, "pixels_sha256");
	const st_tensor *m = st_find(&g->f, "moments");
	if (m != NULL) {
		g->moments = (const float *)m->data;
		g->n_moments = m->shape[1] * m->shape[2] * m->shape[3];
	}
	const st_tensor *t = st_find(&g->f, "t5");
	g->n = t->shape[0];
	g->t5_len = t->shape[1];
	g->t5_dim = t->shape[2];
	g->clip_len = st_find(&g->f, "clip_ids")->shape[1];
	g->clip_dim = st_find(&g->f, "clip")->shape[1];
	g->keys = strdup(st_meta_get(&g->f, "keys"));
}

static int check(const char *what, int ok, const char *detail)
{
	printf("%s %s%s%s\n", ok ? "ok" : "DIFFERS", what, detail ? ": " : "", detail ? detail : "");
	return ok ? 0 : 1;
}

static int golden_header(golden *g, const fluxrec_header *h)
{
	int bad = 0;
	char d[160], hex[65];
	bad |= check("shapes", h->t5_len == g->t5_len && h->t5_dim == g->t5_dim &&
		     h->clip_len == g->clip_len && h->clip_dim == g->clip_dim, NULL);
	if (bad)
		return bad;
	sha256_hex(h->t5_weights, hex);
	bad |= check("T5 weights are the golden's", strcmp(hex, st_meta_get(&g->f, "t5_weights")) == 0,
		     hex);
	sha256_hex(h->clip_weights, hex);
	bad |= check("CLIP weights are the golden's",
		     strcmp(hex, st_meta_get(&g->f, "clip_weights")) == 0, hex);
	if (g->moments != NULL && (h->flags & FLUXREC_MOMENTS)) {
		sha256_hex(h->ae_weights, hex);
		bad |= check("autoencoder weights are the golden's",
			     strcmp(hex, st_meta_get(&g->f, "ae_weights")) == 0, hex);
		bad |= check("moments' shape is the golden's",
			     (int64_t)h->latent_channels * h->latent_height * h->latent_width ==
				     g->n_moments, NULL);
	}
	bad |= check("empty string's T5 ids", memcmp(h->empty_t5_ids, g->e_t5_ids, 4 * g->t5_len) == 0,
		     NULL);
	bad |= check("empty string's CLIP ids",
		     memcmp(h->empty_clip_ids, g->e_clip_ids, 4 * g->clip_len) == 0, NULL);
	double e1 = rel_err(h->empty_t5, h->dtype, g->e_t5, (size_t)(g->t5_len * g->t5_dim));
	double e2 = rel_err(h->empty_clip, h->dtype, g->e_clip, (size_t)g->clip_dim);
	snprintf(d, sizeof d, "T5 %.2e, CLIP %.2e", e1, e2);
	bad |= check("empty string's encodings within 1e-5", e1 <= 1e-5 && e2 <= 1e-5, d);
	return bad;
}

static int golden_cmd(const char *stream, const char *gpath)
{
	golden g = {0};
	golden_open(&g, gpath);
	FILE *fp = fopen(stream, "rb");
	titan_err e;
	fluxrec_reader *r = fp ? fluxrec_reader_open(fp, stream, &e) : NULL;
	if (r == NULL) {
		fprintf(stderr, "%s\n", fp ? e.msg : "cannot open the stream");
		return 1;
	}
	const fluxrec_header *h = fluxrec_reader_header(r);
	int bad = golden_header(&g, h);
	const uint8_t *rec;
	int64_t n = 0, id_bad = 0, off_bad = 0, px_bad = 0, key_bad = 0;
	double t5e = 0, ce = 0, me = 0;
	char *save = NULL, *key = strtok_r(g.keys, " ", &save);
	int rc;
	while (!bad && (rc = fluxrec_read(r, &rec, &e)) == 1) {
		fluxrec_view v;
		if (n >= g.n || fluxrec_record_view(h, rec, &v, stream, &e) != 0) {
			bad = 1;
			break;
		}
		key_bad += key == NULL || strcmp(key, v.key) != 0;
		key = strtok_r(NULL, " ", &save);
		id_bad += memcmp(v.t5_ids, g.t5_ids + n * g.t5_len, 4 * g.t5_len) != 0 ||
			  memcmp(v.clip_ids, g.clip_ids + n * g.clip_len, 4 * g.clip_len) != 0;
		off_bad += (int32_t)v.crop_offset != g.offset[n];
		t5e = fmax(t5e, rel_err(v.t5, h->dtype, g.t5 + n * g.t5_len * g.t5_dim,
					(size_t)(g.t5_len * g.t5_dim)));
		ce = fmax(ce, rel_err(v.clip, h->dtype, g.clip + n * g.clip_dim, (size_t)g.clip_dim));
		uint8_t sha[32];
		if (v.pixels)
			hex_sha(v.pixels, 3ull * h->image_size * h->image_size, sha);
		px_bad += v.pixels != NULL && memcmp(sha, g.px_sha + 32 * n, 32) != 0;
		px_bad += v.pixels == NULL && v.moments == NULL;
		if (g.moments != NULL && (h->flags & FLUXREC_MOMENTS))
			me = v.moments ? fmax(me, rel_err(v.moments, h->dtype, g.moments + n * g.n_moments,
							  (size_t)g.n_moments))
				       : INFINITY;
		n++;
	}
	char d[160];
	snprintf(d, sizeof d, "%lld of %lld", (long long)n, (long long)g.n);
	bad |= check("every golden sample has its record, in order", n == g.n && key_bad == 0, d);
	bad |= check("T5 and CLIP ids equal torchtitan's", id_bad == 0, NULL);
	bad |= check("crop offsets equal", off_bad == 0, NULL);
	bad |= check(h->flags & FLUXREC_PIXELS ? "pixels equal torchtitan's image tensors"
					       : "records without pixels have moments", px_bad == 0, NULL);
	if (g.moments != NULL && (h->flags & FLUXREC_MOMENTS)) {
		snprintf(d, sizeof d, "%.2e", me);
		bad |= check("moments within 1e-5 of torchtitan's AutoEncoder.encoder",
			     (h->flags & FLUXREC_MOMENTS) == 0 || me <= 1e-5, d);
	}
	snprintf(d, sizeof d, "T5 %.2e, CLIP %.2e", t5e, ce);
	bad |= check("T5 and CLIP encodings within 1e-5 of torchtitan's", t5e <= 1e-5 && ce <= 1e-5, d);
	fluxrec_reader_close(r);
	fclose(fp);
	st_close(&g.f);
	free(g.keys);
	return bad;
}

/* ---- recheck: each record against the libraries on its sample alone */

typedef struct alone {
	backend *be;
	t5_encoder *t5;
	clip_text *clip;
	tok *t5_tok, *clip_tok;
	tok_enc *t5_enc, *clip_enc;
} alone;

static int alone_open(alone *a, const char *models, const char *t5tok, const char *cliptok,
		      titan_err *e)
{
	char p[4096];
	if ((a->be = backend_cpu_create(0, e)) == NULL)
		return -1;
	snprintf(p, sizeof p, "%s/t5", models);
	if ((a->t5 = t5_encoder_open(a->be, p, BE_F32, e)) == NULL)
		return -1;
	snprintf(p, sizeof p, "%s/clip", models);
	if ((a->clip = clip_text_open(a->be, p, BE_F32, e)) == NULL)
		return -1;
	if (tok_load(&a->t5_tok, t5tok, NULL, e) != 0 || tok_load(&a->clip_tok, cliptok, NULL, e) != 0)
		return -1;
	a->t5_enc = tok_enc_new(a->t5_tok, e);
	a->clip_enc = tok_enc_new(a->clip_tok, e);
	return a->t5_enc && a->clip_enc ? 0 : -1;
}

static void alone_close(alone *a)
{
	tok_enc_free(a->t5_enc);
	tok_enc_free(a->clip_enc);
	tok_free(a->t5_tok);
	tok_free(a->clip_tok);
	t5_encoder_free(a->t5);
	clip_text_free(a->clip);
	backend_free(a->be);
}

/* One record against its sample; counts what differs. */
static void recheck_one(alone *a, const fluxrec_header *h, const fluxrec_view *v,
			const wds_sample *s, int64_t *bad, double *err_max)
{
	const wds_field *txt = wds_field_get(s, "txt"), *jpg = wds_field_get(s, "jpg");
	int32_t *ids = malloc(4ull * (h->t5_len + h->clip_len));
	float *o = malloc(4ull * h->t5_len * h->t5_dim + 4ull * h->clip_dim);
	uint8_t *rgb = malloc(3ull * h->image_size * h->image_size);
	titan_err e;
	if (!ids || !o || !rgb || !txt || !jpg) {
		bad[0]++;
		goto done;
	}
	int64_t t5n = tok_encode_fixed(a->t5_enc, txt->data, txt->size, h->t5_len, ids, NULL, &e);
	int64_t cn = tok_encode_fixed(a->clip_enc, txt->data, txt->size, h->clip_len,
				      ids + h->t5_len, NULL, &e);
	bad[0] += memcmp(ids, v->t5_ids, 4ull * h->t5_len) != 0 ||
		  memcmp(ids + h->t5_len, v->clip_ids, 4ull * h->clip_len) != 0 ||
		  t5n != v->t5_tokens || cn != v->clip_tokens;
	if (t5_encoder_forward(a->t5, v->t5_ids, 1, h->t5_len, o, &e) != 0 ||
	    clip_text_forward(a->clip, v->clip_ids, 1, h->clip_len, o + h->t5_len * h->t5_dim, &e))
		bad[1]++;
	err_max[0] = fmax(err_max[0], rel_err(v->t5, h->dtype, o, (size_t)h->t5_len * h->t5_dim));
	err_max[1] = fmax(err_max[1], rel_err(v->clip, h->dtype, o + h->t5_len * h->t5_dim,
					      h->clip_dim));
	uint32_t w, hh, off;
	int st = fluxin_image(jpg->data, jpg->size, s->key, v->index,
			      (int)h->image_size, (h->flags & FLUXREC_CROP_RANDOM) != 0, h->seed,
			      NULL, NULL, rgb, &w, &hh, &off, &e);
	bad[2] += st != FLUXIN_OK || off != v->crop_offset || w != v->width || hh != v->height ||
		  memcmp(rgb, v->pixels, 3ull * h->image_size * h->image_size) != 0;
done:
	free(ids);
	free(o);
	free(rgb);
}

static int recheck_cmd(char **argv)
{
	alone a = {0};
	titan_err e;
	FILE *fp = fopen(argv[2], "rb");
	fluxrec_reader *r = fp ? fluxrec_reader_open(fp, argv[2], &e) : NULL;
	wds *w = NULL;
	if (r == NULL || alone_open(&a, argv[3], argv[4], argv[5], &e) != 0 ||
	    wds_open(&w, argv[6], NULL, &e) != 0) {
		fprintf(stderr, "recheck: %s\n", fp ? e.msg : "cannot open the stream");
		return 1;
	}
	const fluxrec_header *h = fluxrec_reader_header(r);
	wds_sample s = {0};
	const uint8_t *rec;
	int64_t n = 0, bad[3] = {0}, unmatched = 0;
	double err_max[2] = {0};
	while (fluxrec_read(r, &rec, &e) == 1) {
		fluxrec_view v;
		if (fluxrec_record_view(h, rec, &v, argv[2], &e) != 0)
			break;
		/* the tar's samples in order; the record's is the one at its index */
		while (wds_next(w, &s, &e) == 1 && s.index < v.index)
			;
		if (s.key == NULL || s.index != v.index || strcmp(s.key, v.key) != 0) {
			unmatched++;
			continue;
		}
		recheck_one(&a, h, &v, &s, bad, err_max);
		n++;
	}
	char d[160];
	snprintf(d, sizeof d, "%lld records", (long long)n);
	int rc = check("every record is its sample's (key and index)", unmatched == 0 && n > 0, d);
	rc |= check("ids equal lib/tok's on the caption alone", bad[0] == 0, NULL);
	snprintf(d, sizeof d, "T5 %.2e, CLIP %.2e", err_max[0], err_max[1]);
	rc |= check("encodings equal lib/textenc's on the sample alone (batch of 1)",
		    bad[1] == 0 && err_max[0] <= 1e-6 && err_max[1] <= 1e-6, d);
	rc |= check("pixels, size and offset equal lib/image's on the sample alone", bad[2] == 0,
		    NULL);
	wds_sample_free(&s);
	wds_close(w);
	fluxrec_reader_close(r);
	fclose(fp);
	alone_close(&a);
	return rc;
}

/* ---- unit tests */

static backend *be;
static char models[300];

static int setup(void **state)
{
	titan_err e;
	if (test_tmpdir_create(state) != 0 || (be = backend_cpu_create(0, &e)) == NULL)
		return -1;
	snprintf(models, sizeof models, "%s", test_path("models"));
	if (test_make_encoders(models, &test_t5_tiny, &test_clip_tiny, &e) != 0 ||
	    test_make_ae(models, &e) != 0) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	backend_free(be);
	return test_tmpdir_remove(state);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL) {
		fprintf(stderr, "%s: cannot open\n", path);
		exit(1);
	}
	fseek(fp, 0, SEEK_END);
	long size = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *p = malloc((size_t)size + 1);
	if (p == NULL)
		exit(1);
	*n = fread(p, 1, (size_t)size, fp);
	fclose(fp);
	return p;
}

static fluxin *open_tiny(int image_size, uint32_t dtype, int crop_random)
{
	char t5[400], clip[400];
	snprintf(t5, sizeof t5, "%s/t5", models);
	snprintf(clip, sizeof clip, "%s/clip", models);
	fluxin_opts o = {.t5 = t5, .clip = clip, .t5_tokenizer = T5_TOK, .clip_tokenizer = CLIP_TOK,
			 .image_size = image_size, .dtype = dtype, .crop_random = crop_random,
			 .seed = 7};
	titan_err e;
	fluxin *f = fluxin_open(be, &o, &e);
	if (f == NULL)
		fail_msg("%s", e.msg);
	return f;
}

static void centre_crop_is_the_middle_offset(void **state)
{
	(void)state;
	assert_int_equal(fluxin_crop_offset(0, 0, 7, 1), 0);
	assert_int_equal(fluxin_crop_offset(0, 0, 7, 85), 42);
	assert_int_equal(fluxin_crop_offset(0, 9, 7, 86), 42);
}

/* A function of (seed, index) alone, spread over every offset. */
static void random_crop_is_seeded_per_index_and_uniform(void **state)
{
	(void)state;
	int hist[10] = {0};
	for (uint64_t i = 0; i < 10000; i++) {
		uint32_t o = fluxin_crop_offset(1, 3, i, 10);
		assert_true(o < 10);
		assert_int_equal(o, fluxin_crop_offset(1, 3, i, 10));
		hist[o]++;
	}
	for (int k = 0; k < 10; k++)
		assert_true(hist[k] > 900 && hist[k] < 1100);
	int same = 0;
	for (uint64_t i = 0; i < 100; i++)
		same += fluxin_crop_offset(1, 3, i, 1000) == fluxin_crop_offset(1, 4, i, 1000);
	assert_true(same < 5);
}

/* lib/image's refusals reach the caller as skips naming the key. */
static void hostile_images_are_skipped_naming_the_key(void **state)
{
	(void)state;
	static const char *const files[] = {
		"truncated.jpg", "truncated.png", "truncated.webp", "zero_size.jpg", "huge.jpg",
		"huge.png", "huge.webp", "header_only.jpg", "bad_crc.png", "not_an_image.gif",
		"cmyk.jpg", "grey16.png", "animated.png", "animated.webp",
	};
	uint8_t *rgb = malloc(3 * 32 * 32);
	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		char p[256];
		snprintf(p, sizeof p, HOSTILE "%s", files[i]);
		size_t n;
		uint8_t *d = slurp(p, &n);
		uint32_t w, h, off;
		titan_err e;
		int st = fluxin_image(d, n, "key-007", 7, 32, 1, 0, NULL, NULL, rgb, &w, &h, &off, &e);
		if (st != FLUXIN_BAD_IMAGE || strstr(e.msg, "key-007") == NULL)
			fail_msg("%s: status %d, \"%s\"", files[i], st, e.msg);
		free(d);
	}
	free(rgb);
}

static void small_images_are_skipped_as_torchtitan_does(void **state)
{
	(void)state;
	size_t n;
	uint8_t *d = slurp(IMG "jpeg_31x64_s1.jpg", &n), *rgb = malloc(3 * 32 * 32);
	uint32_t w, h, off;
	titan_err e;
	assert_int_equal(fluxin_image(d, n, "k", 0, 32, 0, 0, NULL, NULL, rgb, &w, &h, &off, &e),
			 FLUXIN_SMALL);
	assert_non_null(strstr(e.msg, "31x64 is smaller than 32"));
	assert_int_equal(fluxin_image(d, n, "k", 0, 31, 0, 0, NULL, NULL, rgb, &w, &h, &off, &e), FLUXIN_OK);
	assert_int_equal(w, 31);
	assert_int_equal(h, 64);
	assert_int_equal(off, (uint32_t)(64 - 31) / 2);
	free(d);
	free(rgb);
}

/* Good samples make records; each bad one its status, the key named. */
static void a_batch_keeps_the_good_samples_and_names_the_bad(void **state)
{
	(void)state;
	fluxin *f = open_tiny(32, FLUXREC_F32, 1);
	const fluxrec_header *h = fluxin_header(f);
	size_t ng, nt, ns;
	uint8_t *good = slurp(IMG "big_jpeg_300x257.jpg", &ng);
	uint8_t *trunc = slurp(HOSTILE "truncated.jpg", &nt);
	uint8_t *small = slurp(IMG "jpeg_31x64_s1.jpg", &ns);
	char longkey[300];
	memset(longkey, 'k', 299);
	longkey[299] = 0;
	const uint8_t cap[] = "a photo of a cat", bad_utf8[] = "caf\xc3";
	fluxin_sample s[] = {
		{"good0", 0, good, ng, cap, sizeof cap - 1, 0, 0},
		{"noimg", 1, NULL, 0, cap, sizeof cap - 1, 0, 0},
		{"trunc", 2, trunc, nt, cap, sizeof cap - 1, 0, 0},
		{"small", 3, small, ns, cap, sizeof cap - 1, 0, 0},
		{"nocap", 4, good, ng, NULL, 0, 0, 0},
		{"badcap", 5, good, ng, bad_utf8, 4, 0, 0},
		{longkey, 6, good, ng, cap, sizeof cap - 1, 0, 0},
		{"good7", 7, good, ng, (const uint8_t *)"", 0, 0, 0},
	};
	int n = (int)(sizeof s / sizeof *s), status[8];
	const int want[] = {FLUXIN_OK, FLUXIN_NO_IMAGE, FLUXIN_BAD_IMAGE, FLUXIN_SMALL,
			    FLUXIN_NO_CAPTION, FLUXIN_BAD_CAPTION, FLUXIN_BAD_KEY, FLUXIN_OK};
	titan_err why[8], e;
	uint8_t *recs = malloc((size_t)n * h->record_bytes);
	assert_int_equal(fluxin_encode(f, s, n, recs, status, why, &e), 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(status[i], want[i]);
		if (status[i] == FLUXIN_OK)
			continue;
		if (strncmp(why[i].msg, s[i].key, 5) != 0)
			fail_msg("sample %d: \"%s\" does not name its key", i, why[i].msg);
	}
	fluxrec_view v;
	assert_int_equal(fluxrec_record_view(h, recs, &v, "rec", &e), 0);
	assert_string_equal(v.key, "good0");
	assert_int_equal(v.width, 300);
	assert_int_equal(v.height, 257);
	assert_int_equal(v.crop_offset, fluxin_crop_offset(1, 7, 0, 38 - 32 + 1)); /* ceil(32 / 257 * 300) */
	assert_int_equal(fluxrec_record_view(h, recs + 7 * h->record_bytes, &v, "rec", &e), 0);
	/* the empty caption's record holds the header's empty encodings */
	assert_memory_equal(v.t5_ids, h->empty_t5_ids, 4 * h->t5_len);
	assert_memory_equal(v.clip_ids, h->empty_clip_ids, 4 * h->clip_len);
	assert_true(rel_err(v.t5, h->dtype, h->empty_t5, (size_t)h->t5_len * h->t5_dim) <= 1e-6);
	assert_int_equal(v.t5_tokens, 1);  /* </s> */
	assert_int_equal(v.clip_tokens, 2); /* <|startoftext|> <|endoftext|> */
	free(recs);
	free(good);
	free(trunc);
	free(small);
	fluxin_free(f);
}

/* A record is the same bits in any batch, and bfloat16 storage is
 * float32's rounded. */
static void records_do_not_depend_on_batching_and_bf16_is_rounded_f32(void **state)
{
	(void)state;
	fluxin *f = open_tiny(32, FLUXREC_F32, 1), *g = open_tiny(32, FLUXREC_BF16, 1);
	const fluxrec_header *h = fluxin_header(f), *hb = fluxin_header(g);
	size_t n1, n2;
	uint8_t *a = slurp(IMG "big_jpeg_512x384.jpg", &n1), *b = slurp(IMG "big_png_400x300.png", &n2);
	const uint8_t c1[] = "Two dogs running on the beach at sunset.",
		      c2[] = "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ, 東京タワーの夜景";
	fluxin_sample s[3] = {{"a", 10, a, n1, c1, sizeof c1 - 1, 0, 0},
			      {"b", 11, b, n2, c2, sizeof c2 - 1, 0, 0},
			      {"a2", 12, a, n1, c2, sizeof c2 - 1, 0, 0}};
	int st[3];
	titan_err why[3], e;
	uint8_t *batch = malloc(3 * h->record_bytes), *one = malloc(h->record_bytes);
	uint8_t *bf = malloc(3 * hb->record_bytes);
	assert_int_equal(fluxin_encode(f, s, 3, batch, st, why, &e), 0);
	assert_int_equal(fluxin_encode(g, s, 3, bf, st, why, &e), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fluxin_encode(f, &s[i], 1, one, st, why, &e), 0);
		assert_int_equal(st[0], FLUXIN_OK);
		fluxrec_view va, vb, vh;
		assert_int_equal(fluxrec_record_view(h, batch + i * h->record_bytes, &va, "b", &e), 0);
		assert_int_equal(fluxrec_record_view(h, one, &vb, "o", &e), 0);
		assert_int_equal(fluxrec_record_view(hb, bf + i * hb->record_bytes, &vh, "h", &e), 0);
		assert_memory_equal(va.t5_ids, vb.t5_ids, 4 * h->t5_len);
		uint8_t rgb[3 * 32 * 32];
		uint32_t w, hh, off;
		assert_int_equal(fluxin_image(s[i].image, s[i].image_bytes, s[i].key, s[i].index, 32, 1,
					      7, NULL, NULL, rgb, &w, &hh, &off, &e), FLUXIN_OK);
		assert_memory_equal(va.pixels, rgb, sizeof rgb);
		assert_int_equal(va.crop_offset, off);
		assert_int_equal(va.width, w);
		assert_memory_equal(vb.pixels, rgb, sizeof rgb);
		assert_memory_equal(vh.pixels, rgb, sizeof rgb);
		size_t nt = (size_t)h->t5_len * h->t5_dim;
		assert_memory_equal(va.t5, vb.t5, 4 * nt);
		assert_memory_equal(va.clip, vb.clip, 4ull * h->clip_dim);
		const float *t5 = va.t5;
		const uint16_t *t5b = vh.t5;
		for (size_t k = 0; k < nt; k++)
			assert_int_equal(t5b[k], bf16_from_f32(t5[k]));
	}
	const float *ef = h->empty_clip;
	const uint16_t *eb = hb->empty_clip;
	for (uint32_t k = 0; k < h->clip_dim; k++)
		assert_int_equal(eb[k], bf16_from_f32(ef[k]));
	free(batch);
	free(one);
	free(bf);
	free(a);
	free(b);
	fluxin_free(f);
	fluxin_free(g);
}

/* With an autoencoder, a record's moments are lib/fluxae's encoder on its
 * crop alone; the pixels stay only with pixels set. */
static void records_hold_the_autoencoders_moments(void **state)
{
	(void)state;
	char t5[400], clip[400], ae[400], cfg[400];
	snprintf(t5, sizeof t5, "%s/t5", models);
	snprintf(clip, sizeof clip, "%s/clip", models);
	snprintf(ae, sizeof ae, "%s/ae.safetensors", models);
	snprintf(cfg, sizeof cfg, "%s/ae.json", models);
	titan_err e;
	for (int pixels = 0; pixels < 2; pixels++) {
		fluxin_opts o = {.t5 = t5, .clip = clip, .t5_tokenizer = T5_TOK,
				 .clip_tokenizer = CLIP_TOK, .autoencoder = ae, .ae_config = cfg,
				 .image_size = 32, .pixels = pixels};
		fluxin *f = fluxin_open(be, &o, &e);
		if (f == NULL)
			fail_msg("%s", e.msg);
		const fluxrec_header *h = fluxin_header(f);
		assert_int_equal(h->latent_channels, 8); /* 2 z_channels */
		assert_int_equal(h->latent_height, 8);   /* 32 / 2^(3 - 1) */
		assert_true(h->ae_scale == 0.3611f && h->ae_shift == 0.1159f);
		assert_int_equal(!!(h->flags & FLUXREC_PIXELS), pixels);
		size_t n;
		uint8_t *img = slurp(IMG "big_jpeg_512x384.jpg", &n);
		const uint8_t cap[] = "a cat";
		fluxin_sample s[2] = {{"a", 0, img, n, cap, 5, 0, 0}, {"b", 1, img, n, cap, 5, 0, 0}};
		int st[2];
		titan_err why[2];
		uint8_t *recs = malloc(2 * h->record_bytes);
		assert_int_equal(fluxin_encode(f, s, 2, recs, st, why, &e), 0);
		uint8_t rgb[3 * 32 * 32];
		float px[3 * 32 * 32], want[8 * 8 * 8];
		uint32_t w, hh, off;
		assert_int_equal(fluxin_image(img, n, "b", 1, 32, 0, 0, NULL, NULL, rgb, &w, &hh, &off, &e), 0);
		for (size_t k = 0; k < sizeof rgb; k++)
			px[k] = image_unit(rgb[k]);
		flux_ae_config c;
		flux_ae_config_default(&c);
		assert_int_equal(flux_ae_config_read(&c, cfg, &e), 0);
		flux_ae *m = flux_ae_open(be, ae, &c, BE_F32, &e);
		assert_non_null(m);
		assert_int_equal(flux_ae_encode(m, px, 1, 32, 32, want, &e), 0);
		flux_ae_free(m);
		fluxrec_view v;
		assert_int_equal(fluxrec_record_view(h, recs + h->record_bytes, &v, "r", &e), 0);
		assert_non_null(v.moments);
		assert_memory_equal(v.moments, want, sizeof want); /* the batch's second: the same bits */
		if (pixels)
			assert_memory_equal(v.pixels, rgb, sizeof rgb);
		else
			assert_null(v.pixels);
		free(recs);
		free(img);
		fluxin_free(f);
	}
	fluxin_opts o = {.t5 = t5, .clip = clip, .t5_tokenizer = T5_TOK, .clip_tokenizer = CLIP_TOK,
			 .autoencoder = "missing-ae.safetensors", .ae_config = cfg};
	assert_null(fluxin_open(be, &o, &e));
	assert_non_null(strstr(e.msg, "missing-ae.safetensors"));
	o.autoencoder = ae;
	o.image_size = 30; /* not a multiple of the 4 the tiny autoencoder divides by */
	assert_null(fluxin_open(be, &o, &e));
	assert_non_null(strstr(e.msg, "not a multiple of the autoencoder's 4"));
}

static void mismatched_tokenizers_and_lengths_are_refused(void **state)
{
	(void)state;
	char t5[400], clip[400];
	snprintf(t5, sizeof t5, "%s/t5", models);
	snprintf(clip, sizeof clip, "%s/clip", models);
	titan_err e;
	/* CLIP's 49,408 ids into T5's 32,128 embeddings */
	fluxin_opts o = {.t5 = t5, .clip = clip, .t5_tokenizer = CLIP_TOK, .clip_tokenizer = CLIP_TOK};
	assert_null(fluxin_open(be, &o, &e));
	assert_non_null(strstr(e.msg, "tokenizers of 49408"));
	o.t5_tokenizer = T5_TOK;
	o.clip_len = 78;
	assert_null(fluxin_open(be, &o, &e));
	assert_non_null(strstr(e.msg, "77 positions"));
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "mkmodels") == 0)
		return mkmodels(argc, argv);
	if (argc == 4 && strcmp(argv[1], "golden") == 0)
		return golden_cmd(argv[2], argv[3]);
	if (argc == 7 && strcmp(argv[1], "recheck") == 0)
		return recheck_cmd(argv);
	if (argc > 2 && strcmp(argv[1], "mktar") == 0)
		return mktar(argc, argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(centre_crop_is_the_middle_offset),
		cmocka_unit_test(random_crop_is_seeded_per_index_and_uniform),
		cmocka_unit_test(hostile_images_are_skipped_naming_the_key),
		cmocka_unit_test(small_images_are_skipped_as_torchtitan_does),
		cmocka_unit_test(a_batch_keeps_the_good_samples_and_names_the_bad),
		cmocka_unit_test(records_do_not_depend_on_batching_and_bf16_is_rounded_f32),
		cmocka_unit_test(records_hold_the_autoencoders_moments),
		cmocka_unit_test(mismatched_tokenizers_and_lengths_are_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
