/* flux_sample.c: sampling.py's denoise, decode and save_image conversion
 * (flux_sample.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flux/flux_sample.h"
#include "image/image.h"

void flux_schedule(float *ts, int steps, int64_t image_seq_len, int shift)
{
	/* torch.linspace(1, 0, steps + 1): the first half from the start, the
	 * rest back from the end, each a fused multiply-add in torch's kernel */
	float step = (0.0f - 1.0f) / (float)steps;
	int n = steps + 1, half = n / 2;
	for (int i = 0; i < n; i++)
		ts[i] = i < half ? fmaf(step, (float)i, 1.0f) : fmaf(-step, (float)(n - i - 1), 0.0f);
	if (!shift)
		return;
	/* get_lin_function(x1=256, y1=0.5, x2=4096, y2=1.15) in Python floats */
	double m = (1.15 - 0.5) / (4096.0 - 256.0), b = 0.5 - m * 256.0;
	double mu = m * (double)image_seq_len + b;
	/* time_shift(mu, 1.0, t): 1 / t and e / d are torch's reciprocal times
	 * the scalar; ** 1.0 is a copy; at t = 0, 1 / t = inf gives 0 */
	float e = (float)exp(mu);
	for (int i = 0; i < n; i++) {
		float a = 1.0f / ts[i] - 1.0f;
		ts[i] = 1.0f / (e + a) * e;
	}
}

void flux_sample_rgb8(uint8_t *rgb, const float *pixels, int64_t b, int64_t h, int64_t w)
{
	int64_t hw = h * w;
	for (int64_t i = 0; i < b; i++)
		for (int64_t p = 0; p < hw; p++)
			for (int c = 0; c < 3; c++) {
				float x = pixels[(i * 3 + c) * hw + p];
				uint8_t v = 0;
				if (!isnan(x)) {
					x = x < -1.0f ? -1.0f : x > 1.0f ? 1.0f : x;
					v = (uint8_t)(127.5f * (x + 1.0f));
				}
				rgb[(i * hw + p) * 3 + c] = v;
			}
}

int flux_sample_check(const flux_model *m, const flux_ae *ae, const flux_sample_in *in,
		      const flux_sample_out *out, titan_err *err)
{
	const flux_config *c = flux_model_config(m);
	const struct {
		const char *field;
		int64_t got, lo, hi;
	} sz[] = {
		{"b (images)", in->b, 1, 1 << 15},
		{"height", in->height, FLUX_SIDE_MULTIPLE, FLUX_SAMPLE_MAX_SIDE},
		{"width", in->width, FLUX_SIDE_MULTIPLE, FLUX_SAMPLE_MAX_SIDE},
		{"lt (text tokens)", in->lt, 1, 1 << 20},
		{"steps", in->steps, 1, FLUX_SAMPLE_MAX_STEPS},
	};
	for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
		if (sz[i].got < sz[i].lo || sz[i].got > sz[i].hi)
			return err_set(err, "flux sample: %s %lld, expected %lld .. %lld",
				       sz[i].field, (long long)sz[i].got, (long long)sz[i].lo,
				       (long long)sz[i].hi);
	if (in->height % FLUX_SIDE_MULTIPLE || in->width % FLUX_SIDE_MULTIPLE)
		return err_set(err, "flux sample: %s %lld is not a multiple of %d (8x latents "
			       "packed 2x2)", in->height % FLUX_SIDE_MULTIPLE ? "height" : "width",
			       (long long)(in->height % FLUX_SIDE_MULTIPLE ? in->height : in->width),
			       FLUX_SIDE_MULTIPLE);
	if (in->cfg && !isfinite(in->cfg_scale))
		return err_set(err, "flux sample: cfg_scale %g is not finite", in->cfg_scale);
	if (in->noise == NULL || in->txt == NULL || in->y == NULL ||
	    (in->cfg && (in->txt_empty == NULL || in->y_empty == NULL)))
		return err_set(err, "flux sample: an input is missing (noise, txt, y%s)",
			       in->cfg ? ", txt_empty, y_empty with cfg" : "");
	if (in->c_txt != c->context_in_dim || in->c_vec != c->vec_in_dim)
		return err_set(err, "flux sample: %s %lld, the model's %s is %lld",
			       in->c_txt != c->context_in_dim ? "c_txt" : "c_vec",
			       (long long)(in->c_txt != c->context_in_dim ? in->c_txt : in->c_vec),
			       in->c_txt != c->context_in_dim ? "context_in_dim" : "vec_in_dim",
			       (long long)(in->c_txt != c->context_in_dim ? c->context_in_dim
									  : c->vec_in_dim));
	if (c->in_channels % 4 || c->out_channels != c->in_channels)
		return err_set(err, "flux sample: the model's in_channels %lld and out_channels "
			       "%lld must be equal and a multiple of 4 (2x2 patches)",
			       (long long)c->in_channels, (long long)c->out_channels);
	if (out->pixels == NULL && out->rgb == NULL)
		return 0;
	if (ae == NULL)
		return err_set(err, "flux sample: pixels or rgb asked for without an autoencoder");
	const flux_ae_config *a = flux_ae_config_of(ae);
	if (a->z_channels != c->in_channels / 4)
		return err_set(err, "flux sample: the autoencoder's z_channels %lld, the model's "
			       "latents have in_channels / 4 = %lld",
			       (long long)a->z_channels, (long long)(c->in_channels / 4));
	if (a->n_levels != 4)
		return err_set(err, "flux sample: the autoencoder's ch_mult has %lld levels, a "
			       "factor of %d needs 4", (long long)a->n_levels, FLUX_LATENT_RATIO);
	if (out->rgb != NULL && a->out_ch != 3)
		return err_set(err, "flux sample: rgb asked for, the autoencoder's out_ch is %lld",
			       (long long)a->out_ch);
	return 0;
}

/* The loop's host state: B = b, or 2b with guidance ([uncond; cond]). */
typedef struct loop {
	int64_t B, li, lt, cin;
	float *img, *pred, *txt, *y, *img_ids, *txt_ids, *t;
} loop;

static void loop_free(loop *l)
{
	free(l->img);
	free(l->pred);
	free(l->txt);
	free(l->y);
	free(l->img_ids);
	free(l->txt_ids);
	free(l->t);
}

/* denoise's setup: the noise (twice with guidance) packed, the encodings
 * [empty; prompt] with guidance, the ids; txt_ids are zeros. */
static int loop_init(loop *l, const flux_model *m, const flux_sample_in *in, titan_err *err)
{
	const flux_config *c = flux_model_config(m);
	int64_t hl = in->height / FLUX_LATENT_RATIO, wl = in->width / FLUX_LATENT_RATIO;
	int64_t b = in->b, halves = in->cfg ? 2 : 1, per = (hl / 2) * (wl / 2) * c->in_channels;
	*l = (loop){.B = halves * b, .li = (hl / 2) * (wl / 2), .lt = in->lt,
		    .cin = c->in_channels};
	size_t ntxt = (size_t)(b * in->lt * in->c_txt), ny = (size_t)(b * in->c_vec);
	l->img = malloc(sizeof(float) * (size_t)(l->B * per));
	l->pred = malloc(sizeof(float) * (size_t)(l->B * per));
	l->txt = malloc(sizeof(float) * ntxt * (size_t)halves);
	l->y = malloc(sizeof(float) * ny * (size_t)halves);
	l->img_ids = malloc(sizeof(float) * (size_t)(l->B * l->li * 3));
	l->txt_ids = calloc((size_t)(l->B * l->lt * 3), sizeof(float));
	l->t = malloc(sizeof(float) * (size_t)l->B);
	if (!l->img || !l->pred || !l->txt || !l->y || !l->img_ids || !l->txt_ids || !l->t) {
		loop_free(l);
		return err_set(err, "flux sample: out of memory for %lld latents of %lld x %lld",
			       (long long)l->B, (long long)hl, (long long)wl);
	}
	if (in->noise_packed)
		memcpy(l->img, in->noise, sizeof(float) * (size_t)(b * per));
	else
		flux_pack_latents(l->img, in->noise, b, c->in_channels / 4, hl, wl);
	if (in->cfg)
		memcpy(l->img + b * per, l->img, sizeof(float) * (size_t)(b * per));
	float *txt = l->txt, *y = l->y;
	if (in->cfg) {
		memcpy(txt, in->txt_empty, sizeof(float) * ntxt);
		memcpy(y, in->y_empty, sizeof(float) * ny);
		txt += ntxt;
		y += ny;
	}
	memcpy(txt, in->txt, sizeof(float) * ntxt);
	memcpy(y, in->y, sizeof(float) * ny);
	flux_latent_ids(l->img_ids, l->B, hl, wl);
	return 0;
}

/* One Euler step from t_curr to t_prev with the guided prediction; torch's
 * float32 ops one by one (the scalars rounded to float32 as its CPU kernels
 * take them). */
static void euler(loop *l, int cfg, double scale, float t_curr, float t_prev)
{
	int64_t half = l->B / 2 * l->li * l->cin, n = l->B * l->li * l->cin;
	if (cfg) {
		float s = (float)scale;
		for (int64_t j = 0; j < half; j++) {
			float d = l->pred[half + j] - l->pred[j];
			float g = l->pred[j] + d * s;
			l->pred[j] = l->pred[half + j] = g;
		}
	}
	float dt = (float)((double)t_prev - (double)t_curr);
	for (int64_t j = 0; j < n; j++) {
		float p = l->pred[j] * dt;
		l->img[j] = l->img[j] + p;
	}
}

static int denoise(flux_model *m, const flux_sample_in *in, loop *l, titan_err *err)
{
	int64_t hl = in->height / FLUX_LATENT_RATIO, wl = in->width / FLUX_LATENT_RATIO;
	float *ts = malloc(sizeof(float) * (size_t)(in->steps + 1));
	if (ts == NULL)
		return err_set(err, "flux sample: out of memory for the schedule");
	flux_schedule(ts, in->steps, hl * wl, 1);
	flux_input fi = {.b = l->B, .li = l->li, .lt = l->lt, .c_img = l->cin, .c_txt = in->c_txt,
			 .c_vec = in->c_vec, .img = l->img, .img_ids = l->img_ids, .txt = l->txt,
			 .txt_ids = l->txt_ids, .t = l->t, .y = l->y};
	int rc = 0;
	for (int s = 0; s < in->steps && rc == 0; s++) {
		for (int64_t i = 0; i < l->B; i++)
			l->t[i] = ts[s];
		rc = flux_predict(m, &fi, l->pred, err);
		if (rc == 0)
			euler(l, in->cfg, in->cfg_scale, ts[s], ts[s + 1]);
	}
	free(ts);
	return rc < 0 ? err_prefix(err, "flux sample: step") : 0;
}

/* The conditional half's latents unpacked, decoded, converted. */
static int finish(flux_ae *ae, const flux_sample_in *in, const loop *l, flux_sample_out *out,
		  titan_err *err)
{
	int64_t b = in->b, hl = in->height / FLUX_LATENT_RATIO, wl = in->width / FLUX_LATENT_RATIO;
	int64_t per = l->li * l->cin, ch = l->cin / 4;
	const float *cond = l->img + (in->cfg ? b * per : 0);
	if (out->packed != NULL)
		memcpy(out->packed, cond, sizeof(float) * (size_t)(b * per));
	if (out->latents == NULL && out->pixels == NULL && out->rgb == NULL)
		return 0;
	float *z = out->latents ? out->latents : malloc(sizeof(float) * (size_t)(b * per));
	if (z == NULL)
		return err_set(err, "flux sample: out of memory for the latents");
	flux_unpack_latents(z, cond, b, ch, hl, wl);
	int rc = 0;
	if (out->pixels != NULL || out->rgb != NULL) {
		size_t np = (size_t)(b * flux_ae_config_of(ae)->out_ch * in->height * in->width);
		float *px = out->pixels ? out->pixels : malloc(sizeof(float) * np);
		if (px == NULL)
			rc = err_set(err, "flux sample: out of memory for the decoded pixels");
		else if (flux_ae_decode(ae, z, b, hl, wl, px, err) < 0)
			rc = err_prefix(err, "flux sample: decode");
		else if (out->rgb != NULL)
			flux_sample_rgb8(out->rgb, px, b, in->height, in->width);
		if (px != out->pixels)
			free(px);
	}
	if (z != out->latents)
		free(z);
	return rc;
}

int flux_sample(flux_model *m, flux_ae *ae, const flux_sample_in *in, flux_sample_out *out,
		titan_err *err)
{
	if (flux_sample_check(m, ae, in, out, err) < 0)
		return -1;
	loop l;
	if (loop_init(&l, m, in, err) < 0)
		return -1;
	int rc = denoise(m, in, &l, err) < 0 || finish(ae, in, &l, out, err) < 0 ? -1 : 0;
	loop_free(&l);
	return rc;
}

int flux_sample_save_png(const char *path, const uint8_t *rgb, int64_t h, int64_t w,
			 const char *name, const char *prompt, titan_err *err)
{
	/* PIL's ExifTags.Base: ImageDescription, Make, Model, Software */
	const uint16_t tags[4] = {0x0131, 0x010F, 0x0110, 0x010E};
	const char *values[4] = {"AI generated;txt2img;flux", "Black Forest Labs", name, prompt};
	uint8_t *exif;
	size_t n;
	if (h < 1 || w < 1 || h > FLUX_SAMPLE_MAX_SIDE || w > FLUX_SAMPLE_MAX_SIDE)
		return err_set(err, "%s: image of height %lld, width %lld, expected 1 .. %d", path,
			       (long long)h, (long long)w, FLUX_SAMPLE_MAX_SIDE);
	if (image_exif_ascii(tags, values, prompt != NULL ? 4 : 3, &exif, &n, err) < 0)
		return err_prefix(err, "%s", path);
	int rc = image_png_write(path, rgb, (int)w, (int)h, 3, exif, n, err);
	free(exif);
	return rc;
}
