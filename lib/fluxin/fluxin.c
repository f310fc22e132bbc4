/* fluxin.c: image-caption samples to Flux records (see fluxin.h). */
#include "fluxin/fluxin.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/progress.h"
#include "fluxin/fluxin_impl.h"
#include "textenc/textenc.h"
#include "tok/tok.h"
#include "wds/wds.h"

struct fluxin {
	backend *be;
	fluxin_opts o;
	fluxrec_header h;
	fluxrec_layout l;
	tok *t5_tok, *clip_tok;
	tok_enc **t5_enc, **clip_enc; /* one per OpenMP thread */
	int n_threads;
	t5_encoder *t5;
	clip_text *clip;
	fluxin_ae *ae;
	/* scratch for a batch of cap samples */
	int cap;
	int32_t *t5_ids, *clip_ids;   /* (cap, t5_len), (cap, clip_len): the kept samples' */
	float *t5_out, *clip_out;     /* (cap, t5_len, t5_dim), (cap, clip_dim) */
	uint8_t *rgb;                 /* (cap, 3, n, n): crops when records do not keep them */
	float *px, *moments;          /* (cap, 3, n, n), (cap, 2z, n/8, n/8) */
	int *kept;                    /* (cap) */
	fluxin_times times;
};

const char *fluxin_status_name(int status)
{
	static const char *const names[FLUXIN_N_STATUS] = {
		"encoded", "no image", "undecodable image", "too small", "no caption",
		"caption not UTF-8", "key too long",
	};
	return status >= 0 && status < FLUXIN_N_STATUS ? names[status] : "?";
}

uint32_t fluxin_crop_offset(int random, uint64_t seed, uint64_t index, uint32_t choices)
{
	if (!random)
		return (choices - 1) / 2;
	uint64_t x = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	x ^= x >> 31;
	return (uint32_t)(x % choices);
}

int fluxin_image(const uint8_t *data, size_t size, const char *key, uint64_t index, int n,
		 int crop_random, uint64_t seed, const uint32_t *given_offset,
		 const image_limits *lim, uint8_t *rgb, uint32_t *w, uint32_t *h,
		 uint32_t *offset, titan_err *err)
{
	*w = *h = *offset = 0;
	if (data == NULL) {
		err_set(err, "%s: no image", key);
		return FLUXIN_NO_IMAGE;
	}
	image im;
	if (image_decode(&im, data, size, lim, err) != 0) {
		err_prefix(err, "%s: image refused", key);
		return FLUXIN_BAD_IMAGE;
	}
	*w = (uint32_t)im.w;
	*h = (uint32_t)im.h;
	image_cc12m_geom g;
	int st = FLUXIN_SMALL;
	if (!image_cc12m_geom_of(im.w, im.h, n, &g)) {
		err_set(err, "%s: image %dx%d is smaller than %d px on a side", key, im.w, im.h, n);
	} else if (given_offset && *given_offset >= (uint32_t)g.crop_choices) {
		err_set(err, "%s: crop offset %u, the image has %d", key, *given_offset,
			g.crop_choices);
		st = FLUXIN_BAD_IMAGE;
	} else {
		*offset = given_offset ? *given_offset
				       : fluxin_crop_offset(crop_random, seed, index,
							    (uint32_t)g.crop_choices);
		int rc = image_cc12m_rgb(&im, n, (int)*offset, rgb, err);
		st = rc == 1 ? FLUXIN_OK : FLUXIN_BAD_IMAGE;
		if (rc != 1)
			err_prefix(err, "%s: image", key);
	}
	image_free(&im);
	return st;
}

static int load_tok(const char *path, const char *cache, tok **t, titan_err *err)
{
	tok_opts to = {.cache_dir = cache};
	if (tok_load(t, path, &to, err) != 0)
		return err_prefix(err, "tokenizer %s", path);
	return 0;
}

/* The header's shapes and identities from the loaded parts. */
static int make_header(fluxin *f, const fluxin_ae_info *ai, titan_err *err)
{
	const fluxin_opts *o = &f->o;
	const t5_config *tc = t5_encoder_config(f->t5);
	const clip_config *cc = clip_text_config(f->clip);
	fluxrec_header *h = &f->h;
	if (tok_n_vocab(f->t5_tok) > tc->vocab || tok_n_vocab(f->clip_tok) > cc->vocab)
		return err_set(err, "tokenizers of %lld and %lld ids for encoders of %lld (T5) and "
			       "%lld (CLIP) embeddings", (long long)tok_n_vocab(f->t5_tok),
			       (long long)tok_n_vocab(f->clip_tok), (long long)tc->vocab,
			       (long long)cc->vocab);
	if (o->clip_len > cc->max_pos)
		return err_set(err, "CLIP length %d: the encoder has %lld positions", o->clip_len,
			       (long long)cc->max_pos);
	h->flags = (o->pixels || !o->autoencoder ? FLUXREC_PIXELS : 0) |
		   (o->autoencoder ? FLUXREC_MOMENTS : 0) |
		   (o->crop_random ? FLUXREC_CROP_RANDOM : 0);
	h->dtype = o->dtype;
	h->model_dtype = o->model_dtype;
	h->image_size = (uint32_t)o->image_size;
	h->key_bytes = FLUXREC_KEY_BYTES;
	h->t5_len = (uint32_t)o->t5_len;
	h->t5_dim = (uint32_t)tc->d_model;
	h->t5_vocab = (uint32_t)tc->vocab;
	h->clip_len = (uint32_t)o->clip_len;
	h->clip_dim = (uint32_t)cc->hidden;
	h->clip_vocab = (uint32_t)cc->vocab;
	h->seed = o->crop_random ? o->seed : 0;
	if (o->autoencoder) {
		if (o->image_size % ai->downsample != 0)
			return err_set(err, "image size %d is not a multiple of the autoencoder's %lld",
				       o->image_size, (long long)ai->downsample);
		h->latent_channels = (uint32_t)(2 * ai->z_channels);
		h->latent_height = h->latent_width = (uint32_t)(o->image_size / ai->downsample);
		h->ae_scale = ai->scale_factor;
		h->ae_shift = ai->shift_factor;
		if (fluxrec_weights_sha256(o->autoencoder, h->ae_weights, err) != 0)
			return -1;
	}
	tok_fingerprint(f->t5_tok, h->t5_tokenizer);
	tok_fingerprint(f->clip_tok, h->clip_tokenizer);
	if (fluxrec_weights_sha256(o->t5, h->t5_weights, err) != 0 ||
	    fluxrec_weights_sha256(o->clip, h->clip_weights, err) != 0 ||
	    fluxrec_header_layout(h, err) != 0)
		return -1;
	fluxrec_layout_of(h, &f->l);
	return 0;
}

static void store(void *dst, const float *src, size_t n, uint32_t dtype)
{
	if (dtype == FLUXREC_F32) {
		memcpy(dst, src, n * sizeof *src);
		return;
	}
	uint16_t *d = dst;
	for (size_t i = 0; i < n; i++)
		d[i] = bf16_from_f32(src[i]);
}

static int grow(fluxin *f, int n, titan_err *err)
{
	if (n <= f->cap)
		return 0;
	const fluxrec_header *h = &f->h;
	size_t nn = (size_t)h->image_size * h->image_size;
	size_t lat = (size_t)h->latent_channels * h->latent_height * h->latent_width;
	int ae = f->ae != NULL, keep = (h->flags & FLUXREC_PIXELS) != 0;
	void **bufs[] = {(void **)&f->t5_ids, (void **)&f->clip_ids, (void **)&f->t5_out,
			 (void **)&f->clip_out, (void **)&f->rgb, (void **)&f->px,
			 (void **)&f->moments, (void **)&f->kept};
	size_t sizes[] = {4ull * h->t5_len, 4ull * h->clip_len, 4ull * h->t5_len * h->t5_dim,
			  4ull * h->clip_dim, ae && !keep ? 3 * nn : 0, ae ? 12 * nn : 0,
			  ae ? 4 * lat : 0, sizeof(int)};
	for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
		free(*bufs[i]);
		*bufs[i] = sizes[i] ? malloc(sizes[i] * (size_t)n) : NULL;
		if (sizes[i] && *bufs[i] == NULL) {
			f->cap = 0;
			return err_set(err, "out of memory for a batch of %d samples", n);
		}
	}
	f->cap = n;
	return 0;
}

/* 0.3.0's FluxTestTokenizer: the tokenizer's training ids of the text (BOS,
 * the text, EOS as tok_default_add_bos/eos say), cut to len, padded with 0. */
static int64_t encode_test(const tok *t, tok_enc *e, const uint8_t *text, size_t n, size_t len,
			   int32_t *ids, titan_err *err)
{
	tok_ids a = {0};
	int rc = tok_default_add_bos(t) ? tok_ids_push(&a, tok_bos_id(t), err) : 0;
	if (rc == 0)
		rc = tok_encode(e, text, n, &a, err);
	if (rc == 0 && tok_default_add_eos(t))
		rc = tok_ids_push(&a, tok_eos_id(t), err);
	if (rc != 0) {
		tok_ids_free(&a);
		return -1;
	}
	size_t k = a.n < len ? a.n : len;
	memcpy(ids, a.v, k * sizeof *ids);
	memset(ids + k, 0, (len - k) * sizeof *ids);
	tok_ids_free(&a);
	return (int64_t)k;
}

/* A caption's fixed-length ids for one encoder: HF's truncation and padding,
 * or the test tokenizer's. */
static int64_t encode_ids(const fluxin *f, tok_enc *e, const uint8_t *text, size_t n,
			  size_t len, int32_t *ids, titan_err *err)
{
	if (f->o.test_tokenizer)
		return encode_test(f->t5_tok, e, text, n, len, ids, err);
	return tok_encode_fixed(e, text, n, len, ids, NULL, err);
}

/* The empty string through both encoders: what prompt dropout substitutes. */
static int encode_empty(fluxin *f, titan_err *err)
{
	fluxrec_header *h = &f->h;
	int64_t t5n = encode_ids(f, f->t5_enc[0], (const uint8_t *)"", 0, h->t5_len,
				 h->empty_t5_ids, err);
	int64_t cn = t5n < 0 ? -1 : encode_ids(f, f->clip_enc[0], (const uint8_t *)"", 0,
					       h->clip_len, h->empty_clip_ids, err);
	if (cn < 0 || grow(f, 1, err) != 0 ||
	    t5_encoder_forward(f->t5, h->empty_t5_ids, 1, h->t5_len, f->t5_out, err) != 0 ||
	    clip_text_forward(f->clip, h->empty_clip_ids, 1, h->clip_len, f->clip_out, err) != 0)
		return err_prefix(err, "the empty string's encodings");
	h->empty_t5_tokens = (uint32_t)t5n;
	h->empty_clip_tokens = (uint32_t)cn;
	store(h->empty_t5, f->t5_out, (size_t)h->t5_len * h->t5_dim, h->dtype);
	store(h->empty_clip, f->clip_out, h->clip_dim, h->dtype);
	return 0;
}

static int open_parts(fluxin *f, titan_err *err)
{
	const fluxin_opts *o = &f->o;
	be_dtype md = o->model_dtype == FLUXREC_BF16 ? BE_BF16 : BE_F32;
	fluxin_ae_info ai = {0};
	const char *clip_tok = o->test_tokenizer ? o->t5_tokenizer
			       : o->clip_tokenizer ? o->clip_tokenizer : o->clip;
	if (load_tok(o->t5_tokenizer ? o->t5_tokenizer : o->t5, o->tok_cache, &f->t5_tok, err) ||
	    load_tok(clip_tok ? clip_tok : o->t5, o->tok_cache, &f->clip_tok, err))
		return -1;
	f->n_threads = omp_get_max_threads();
	f->t5_enc = calloc((size_t)f->n_threads, sizeof *f->t5_enc);
	f->clip_enc = calloc((size_t)f->n_threads, sizeof *f->clip_enc);
	if (f->t5_enc == NULL || f->clip_enc == NULL)
		return err_set(err, "out of memory");
	for (int i = 0; i < f->n_threads; i++)
		if ((f->t5_enc[i] = tok_enc_new(f->t5_tok, err)) == NULL ||
		    (f->clip_enc[i] = tok_enc_new(f->clip_tok, err)) == NULL)
			return -1;
	if ((f->t5 = t5_encoder_open(f->be, o->t5, md, err)) == NULL)
		return err_prefix(err, "T5 encoder %s", o->t5);
	if ((f->clip = clip_text_open(f->be, o->clip, md, err)) == NULL)
		return err_prefix(err, "CLIP text model %s", o->clip);
	if (o->autoencoder &&
	    (f->ae = fluxin_ae_open(f->be, o->autoencoder, o->ae_config, md, &ai, err)) == NULL)
		return -1;
	if (make_header(f, &ai, err) != 0)
		return -1;
	return encode_empty(f, err);
}

fluxin *fluxin_open(backend *be, const fluxin_opts *o, titan_err *err)
{
	if (o->t5 == NULL || o->clip == NULL) {
		err_set(err, "the T5 and CLIP encoders are both needed");
		return NULL;
	}
	if (o->dtype > FLUXREC_BF16 || o->model_dtype > FLUXREC_BF16) {
		err_set(err, "dtype %u / model dtype %u: not float32 (0) or bfloat16 (1)", o->dtype,
			o->model_dtype);
		return NULL;
	}
	fluxin *f = calloc(1, sizeof *f);
	if (f == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	f->be = be;
	f->o = *o;
	f->o.image_size = o->image_size ? o->image_size : 256;
	f->o.t5_len = o->t5_len ? o->t5_len : 256;
	f->o.clip_len = o->clip_len ? o->clip_len : 77;
	if (open_parts(f, err) != 0) {
		fluxin_free(f);
		return NULL;
	}
	return f;
}

void fluxin_free(fluxin *f)
{
	if (f == NULL)
		return;
	for (int i = 0; i < f->n_threads; i++) {
		if (f->t5_enc)
			tok_enc_free(f->t5_enc[i]);
		if (f->clip_enc)
			tok_enc_free(f->clip_enc[i]);
	}
	free(f->t5_enc);
	free(f->clip_enc);
	tok_free(f->t5_tok);
	tok_free(f->clip_tok);
	t5_encoder_free(f->t5);
	clip_text_free(f->clip);
	fluxin_ae_free(f->ae);
	fluxrec_header_free(&f->h);
	free(f->t5_ids);
	free(f->clip_ids);
	free(f->t5_out);
	free(f->clip_out);
	free(f->rgb);
	free(f->px);
	free(f->moments);
	free(f->kept);
	free(f);
}

void fluxin_get_times(const fluxin *f, fluxin_times *t)
{
	*t = f->times;
}

struct flux_ae *fluxin_autoencoder(fluxin *f)
{
	return f->ae ? fluxin_ae_model(f->ae) : NULL;
}

int64_t fluxin_ae_init_draws(const fluxin *f)
{
	return f->ae ? fluxin_ae_draws(f->ae) : 0;
}

const fluxrec_header *fluxin_header(const fluxin *f)
{
	return &f->h;
}

/* One sample's checks, image and ids into its record; a status. */
static int prepare(fluxin *f, const fluxin_sample *s, uint8_t *rec, uint8_t *rgb,
		   int32_t *t5_ids, int32_t *clip_ids, titan_err *why)
{
	const fluxrec_header *h = &f->h;
	if (strlen(s->key) >= h->key_bytes) {
		err_set(why, "%.64s...: key of %zu bytes, records hold %u", s->key, strlen(s->key),
			h->key_bytes - 1);
		return FLUXIN_BAD_KEY;
	}
	if (s->image == NULL) {
		err_set(why, "%s: no image", s->key);
		return FLUXIN_NO_IMAGE;
	}
	if (s->caption == NULL) {
		err_set(why, "%s: no caption", s->key);
		return FLUXIN_NO_CAPTION;
	}
	if (!wds_utf8_valid(s->caption, s->caption_bytes)) {
		err_set(why, "%s: caption is not UTF-8", s->key);
		return FLUXIN_BAD_CAPTION;
	}
	if (fluxrec_record_init(h, rec, s->index, s->key, why) != 0)
		return FLUXIN_BAD_KEY; /* checked above */
	uint32_t w, hgt, off;
	int st = fluxin_image(s->image, s->image_bytes, s->key, s->index, (int)h->image_size,
			      f->o.crop_random, f->o.seed, s->has_offset ? &s->offset : NULL,
			      f->o.image_lim, rgb, &w, &hgt, &off, why);
	if (st != FLUXIN_OK)
		return st;
	fluxrec_record_set_image(rec, w, hgt, off);
	int t = omp_get_thread_num();
	int64_t t5n = encode_ids(f, f->t5_enc[t], s->caption, s->caption_bytes, h->t5_len, t5_ids,
				 why);
	int64_t cn = t5n < 0 ? -1 : encode_ids(f, f->clip_enc[t], s->caption, s->caption_bytes,
					       h->clip_len, clip_ids, why);
	if (cn < 0)
		return -1; /* the lengths were checked at open: only memory fails here */
	fluxrec_record_set_tokens(rec, (uint32_t)t5n, (uint32_t)cn);
	memcpy(rec + f->l.t5_ids, t5_ids, 4ull * h->t5_len);
	memcpy(rec + f->l.clip_ids, clip_ids, 4ull * h->clip_len);
	return FLUXIN_OK;
}

/* The text encoders on n samples' ids, one sample a call.  A GEMM's rows can
 * depend on how many rows it has (OpenBLAS's and oneDNN's AVX2 kernels take
 * a matrix's last rows with other code than the rest), so a batch of samples
 * through one call could encode a sample with other bits than the same sample
 * in another batch: a record titan-encode made would then differ from the
 * sample titan-train encodes on the fly, and the runs' bits with it.  One
 * sample's rows are as many in every batch. */
static int run_text(fluxin *f, const int32_t *t5_ids, const int32_t *clip_ids, int n,
		    float *t5, float *clip, titan_err *err)
{
	const fluxrec_header *h = &f->h;
	double t0 = progress_now();
	for (int i = 0; i < n; i++)
		if (t5_encoder_forward(f->t5, t5_ids + (size_t)i * h->t5_len, 1, h->t5_len,
				       t5 + (size_t)i * h->t5_len * h->t5_dim, err) != 0)
			return err_prefix(err, "T5 encoder");
	double t1 = progress_now();
	for (int i = 0; i < n; i++)
		if (clip_text_forward(f->clip, clip_ids + (size_t)i * h->clip_len, 1, h->clip_len,
				      clip + (size_t)i * h->clip_dim, err) != 0)
			return err_prefix(err, "CLIP text model");
	f->times.t5 += t1 - t0;
	f->times.clip += progress_now() - t1;
	return 0;
}

/* The encoders over the m kept samples (ids and pixels packed in f's
 * scratch), each sample alone as in run_text. */
static int run_encoders(fluxin *f, int m, titan_err *err)
{
	const fluxrec_header *h = &f->h;
	if (run_text(f, f->t5_ids, f->clip_ids, m, f->t5_out, f->clip_out, err) != 0)
		return -1;
	double t0 = progress_now();
	size_t plane = 3ull * h->image_size * h->image_size;
	size_t lat = (size_t)h->latent_channels * h->latent_height * h->latent_width;
	for (int i = 0; i < m && f->ae != NULL; i++)
		if (fluxin_ae_encode(f->ae, f->px + i * plane, 1, h->image_size,
				     f->moments + i * lat, err) != 0)
			return err_prefix(err, "autoencoder");
	f->times.ae += progress_now() - t0;
	return 0;
}

int fluxin_encode_text(fluxin *f, const uint8_t *const *captions, const size_t *bytes, int n,
		       float *t5, float *clip, titan_err *err)
{
	const fluxrec_header *h = &f->h;
	if (n < 1)
		return 0;
	if (grow(f, n, err) != 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (!wds_utf8_valid(captions[i], bytes[i]))
			return err_set(err, "prompt %d: not UTF-8", i);
		if (encode_ids(f, f->t5_enc[0], captions[i], bytes[i], h->t5_len,
			       f->t5_ids + (size_t)i * h->t5_len, err) < 0 ||
		    encode_ids(f, f->clip_enc[0], captions[i], bytes[i], h->clip_len,
			       f->clip_ids + (size_t)i * h->clip_len, err) < 0)
			return -1;
	}
	return run_text(f, f->t5_ids, f->clip_ids, n, t5, clip, err);
}

int fluxin_encode(fluxin *f, const fluxin_sample *s, int n, uint8_t *records, int *status,
		  titan_err *why, titan_err *err)
{
	if (n < 1)
		return 0;
	if (grow(f, n, err) != 0)
		return -1;
	const fluxrec_header *h = &f->h;
	const fluxrec_layout *l = &f->l;
	size_t rb = h->record_bytes, plane = 3ull * h->image_size * h->image_size;
	int keep = (h->flags & FLUXREC_PIXELS) != 0, failed = 0;
	double t0 = progress_now();
	/* Samples are independent: decode, crop and tokenize them side by side,
	 * each into its own slot (ids packed below, once the kept ones are known);
	 * as many threads as there are tokenizer encoders, one each. */
	#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) num_threads(f->n_threads)
	for (int i = 0; i < n; i++) {
		uint8_t *rec = records + (size_t)i * rb;
		/* records without pixels have moments: the crop waits in f->rgb */
		uint8_t *rgb = keep ? rec + l->pixels : f->rgb + (size_t)i * plane;
		status[i] = prepare(f, &s[i], rec, rgb, f->t5_ids + (size_t)i * h->t5_len,
				    f->clip_ids + (size_t)i * h->clip_len, &why[i]);
		failed |= status[i] < 0;
	}
	for (int i = 0; i < n && failed; i++)
		if (status[i] < 0) {
			*err = why[i];
			return -1;
		}
	int m = 0;
	for (int i = 0; i < n; i++) {
		if (status[i] != FLUXIN_OK)
			continue;
		if (m != i) { /* pack the kept samples' ids to the front */
			memmove(f->t5_ids + (size_t)m * h->t5_len, f->t5_ids + (size_t)i * h->t5_len,
				4ull * h->t5_len);
			memmove(f->clip_ids + (size_t)m * h->clip_len,
				f->clip_ids + (size_t)i * h->clip_len, 4ull * h->clip_len);
		}
		if (f->ae) {
			const uint8_t *rgb = keep ? records + (size_t)i * rb + l->pixels
						  : f->rgb + (size_t)i * plane;
			for (size_t k = 0; k < plane; k++)
				f->px[(size_t)m * plane + k] = image_unit(rgb[k]);
		}
		f->kept[m++] = i;
	}
	f->times.prepare += progress_now() - t0;
	if (m == 0)
		return 0;
	if (run_encoders(f, m, err) != 0)
		return -1;
	size_t lat = (size_t)h->latent_channels * h->latent_height * h->latent_width;
	for (int j = 0; j < m; j++) {
		uint8_t *rec = records + (size_t)f->kept[j] * rb;
		store(rec + l->t5, f->t5_out + (size_t)j * h->t5_len * h->t5_dim,
		      (size_t)h->t5_len * h->t5_dim, h->dtype);
		store(rec + l->clip, f->clip_out + (size_t)j * h->clip_dim, h->clip_dim, h->dtype);
		if (f->ae)
			store(rec + l->moments, f->moments + (size_t)j * lat, lat, h->dtype);
		fluxrec_record_seal(h, rec);
	}
	return 0;
}
