/* fluxtrain.c: the Flux training loop (fluxtrain.h). */
#include "fluxtrain/fluxtrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/afile.h"
#include "core/bf16.h"
#include "core/progress.h"
#include "core/torch_rng.h"
#include "flux/flux.h"
#include "flux/flux_sample.h"
#include "fluxae/fluxae.h"
#include "fluxin/fluxin.h"
#include "fluxrec/fluxrec.h"
#include "fluxckpt/fluxckpt.h"
#include "fluxtrain/fluxtrain_priv.h"
#include "image/image.h"
#include "metrics/metrics.h"
#include "optim/optim.h"
#include "tb/tb.h"
#include "trainer/trainer.h"

/* torch's default generator seed (c10's default_rng_seed_val): a one-process
 * run without debug.seed draws from it. */
#define TORCH_DEFAULT_SEED 67280421310721ull

typedef struct ft_run {
	const job_config *c;
	comm *world;
	int rank, ranks;
	int enc_bf16;      /* the encoders in bfloat16: 0.3.0's self._dtype under FSDP */
	backend *be;
	fluxin *in;
	const fluxrec_header *h;
	flux_ae_config ae;
	flux_model *m;
	adamw *opt;
	lr_schedule sched;
	torch_rng g;
	ft_loader ld;
	/* the batch: b samples, li image tokens of ci values, lt text tokens */
	int64_t b, li, lt, ci, zc, hl, wl;
	ft_item *items;
	uint8_t *recs;
	int *status;
	titan_err *why;
	float *txt, *y, *moments, *eps, *z, *noise4, *x, *noise, *img_ids, *txt_ids, *t;
	float *empty_t5, *empty_clip; /* the empty caption's encodings, float32 */
	metrics_jsonl jl;
	int jl_open;
	tb_writer tb;
	int tb_open;
	double flops_per_token, peak;
} ft_run;

/* One line to stderr on rank 0, as the language models' trainer logs. */
#define LOG0(r, ...)                                  \
	do {                                          \
		if ((r)->rank == 0)                   \
			metrics_log(stderr, __VA_ARGS__); \
	} while (0)

static int need_path(const char *v, const char *key, const char *key030, titan_err *err)
{
	if (v == NULL || v[0] == '\0')
		return err_set(err, "%s (0.3.0's %s): not set; the Flux trainer needs it", key,
			       key030);
	return 0;
}

/* The autoencoder's config beside its weights: X.json for X.safetensors,
 * when there is one (a 0.3.0 run takes it from its flavor, which has FLUX.1's
 * alone); NULL otherwise. */
static const char *ae_sidecar(const char *weights, char *buf, size_t n)
{
	size_t len = strlen(weights), ext = strlen(".safetensors");
	if (len <= ext || strcmp(weights + len - ext, ".safetensors") != 0 || len - ext + 6 > n)
		return NULL;
	snprintf(buf, n, "%.*s.json", (int)(len - ext), weights);
	return access(buf, R_OK) == 0 ? buf : NULL;
}

static int open_inputs(ft_run *r, titan_err *err)
{
	const job_config *c = r->c;
	if (need_path(c->flux.t5_encoder, "flux.t5_encoder", "encoder.t5_encoder", err) ||
	    need_path(c->flux.clip_encoder, "flux.clip_encoder", "encoder.clip_encoder", err) ||
	    need_path(c->flux.autoencoder_path, "flux.autoencoder_path", "encoder.autoencoder_path",
		      err))
		return -1;
	char side[4096];
	const char *aecfg = c->flux.autoencoder_config[0] ? c->flux.autoencoder_config
			    : ae_sidecar(c->flux.autoencoder_path, side, sizeof side);
	fluxin_opts o = {
		.t5 = c->flux.t5_encoder, .clip = c->flux.clip_encoder,
		.t5_tokenizer = c->flux.t5_tokenizer, .clip_tokenizer = c->flux.clip_tokenizer,
		.autoencoder = c->flux.autoencoder_path, .ae_config = aecfg,
		.image_size = (int)c->flux.img_size, .t5_len = (int)c->flux.max_t5_encoding_len,
		.clip_len = 77, .dtype = r->enc_bf16 ? FLUXREC_BF16 : FLUXREC_F32,
		.model_dtype = r->enc_bf16 ? FLUXREC_BF16 : FLUXREC_F32,
		.test_tokenizer = c->flux.test_tokenizer,
	};
	if ((r->in = fluxin_open(r->be, &o, err)) == NULL)
		return err_prefix(err, "flux inputs");
	r->h = fluxin_header(r->in);
	/* FluxTrainer builds its autoencoder after seeding: torch's init draws */
	for (int64_t i = fluxin_ae_init_draws(r->in); i > 0; i--)
		(void)torch_rng_random(&r->g);
	flux_ae_config_default(&r->ae);
	if (aecfg && flux_ae_config_read(&r->ae, aecfg, err) != 0)
		return -1;
	return 0;
}

/* The flavor's sizes against the encoders'. */
static int check_shapes(ft_run *r, const flux_config *fc, titan_err *err)
{
	const fluxrec_header *h = r->h;
	if (fc->context_in_dim != (int64_t)h->t5_dim)
		return err_set(err, "model.flavor %s: context_in_dim %lld, the T5 encoder's d_model "
			       "is %u", fc->name, (long long)fc->context_in_dim, h->t5_dim);
	if (fc->vec_in_dim != (int64_t)h->clip_dim)
		return err_set(err, "model.flavor %s: vec_in_dim %lld, the CLIP model's hidden size "
			       "is %u", fc->name, (long long)fc->vec_in_dim, h->clip_dim);
	if (fc->in_channels != 2 * (int64_t)h->latent_channels)
		return err_set(err, "model.flavor %s: in_channels %lld, 2x2 patches of the "
			       "autoencoder's %u latent channels are %u", fc->name,
			       (long long)fc->in_channels, h->latent_channels / 2,
			       2 * h->latent_channels);
	return 0;
}

/* n values of a record's array (dtype) as float32. */
static void widen(float *dst, const void *src, size_t n, uint32_t dtype)
{
	if (dtype == FLUXREC_F32) {
		memcpy(dst, src, n * sizeof *dst);
		return;
	}
	const uint16_t *s = src;
	for (size_t i = 0; i < n; i++)
		dst[i] = bf16_to_f32(s[i]);
}

static float *floats(int64_t n, int *failed)
{
	float *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
	*failed |= p == NULL;
	return p;
}

static int alloc_batch(ft_run *r, titan_err *err)
{
	const fluxrec_header *h = r->h;
	r->b = r->c->training.local_batch_size;
	r->zc = h->latent_channels / 2;
	r->hl = h->latent_height;
	r->wl = h->latent_width;
	r->li = (r->hl / 2) * (r->wl / 2);
	r->ci = 4 * r->zc;
	r->lt = h->t5_len;
	int64_t b = r->b, lat = b * r->zc * r->hl * r->wl;
	int f = 0;
	r->items = calloc((size_t)b, sizeof *r->items);
	r->recs = malloc((size_t)b * h->record_bytes);
	r->status = calloc((size_t)b, sizeof *r->status);
	r->why = calloc((size_t)b, sizeof *r->why);
	f |= !r->items || !r->recs || !r->status || !r->why;
	r->txt = floats(b * r->lt * h->t5_dim, &f);
	r->y = floats(b * h->clip_dim, &f);
	r->moments = floats(2 * lat, &f);
	r->eps = floats(lat, &f);
	r->z = floats(lat, &f);
	r->noise4 = floats(lat, &f);
	r->x = floats(lat, &f);
	r->noise = floats(lat, &f);
	r->img_ids = floats(b * r->li * 3, &f);
	r->txt_ids = floats(b * r->lt * 3, &f); /* zeros: the trainer's text positions */
	r->t = floats(b, &f);
	r->empty_t5 = floats(r->lt * h->t5_dim, &f);
	r->empty_clip = floats(h->clip_dim, &f);
	if (!f) {
		widen(r->empty_t5, h->empty_t5, (size_t)(r->lt * h->t5_dim), h->dtype);
		widen(r->empty_clip, h->empty_clip, h->clip_dim, h->dtype);
	}
	return f ? err_set(err, "out of memory for a batch of %lld samples", (long long)b) : 0;
}

static void free_batch(ft_run *r)
{
	ft_items_free(r->items, (int)r->b);
	free(r->recs);
	free(r->status);
	free(r->why);
	float *p[] = {r->txt, r->y, r->moments, r->eps, r->z, r->noise4, r->x, r->noise, r->img_ids,
		      r->txt_ids, r->t, r->empty_t5, r->empty_clip};
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		free(p[i]);
}

static int open_model(ft_run *r, titan_err *err)
{
	const job_config *c = r->c;
	const flux_config *fc = flux_flavor(c->model.flavor);
	if (fc == NULL)
		return err_set(err, "model.flavor %s: not a Flux flavor (flux-debug, flux-schnell, "
			       "flux-dev)", c->model.flavor);
	if (check_shapes(r, fc, err) != 0 || (r->m = flux_model_create(r->be, fc, err)) == NULL)
		return -1;
	/* 0.3.0 applies fully_shard to Flux on any number of ranks: its
	 * parameters compute in mixed_precision_param */
	if (strcmp(c->training.mixed_precision_param, "bfloat16") == 0 &&
	    flux_model_set_compute(r->m, BE_BF16, err) != 0)
		return -1;
	uint64_t seed = c->debug.seed_set ? (uint64_t)c->debug.seed : 0;
	if (flux_model_init(r->m, seed, err) != 0)
		return -1;
	adamw_config ac;
	adamw_config_default(&ac);
	ac.lr = c->optimizer.lr;
	ac.beta1 = c->optimizer.beta1;
	ac.beta2 = c->optimizer.beta2;
	ac.eps = c->optimizer.eps;
	ac.weight_decay = c->optimizer.weight_decay;
	if ((r->opt = adamw_create(r->be, (size_t)flux_model_numel(r->m), &ac, err)) == NULL)
		return -1;
	const char *dt = c->lr_scheduler.decay_type;
	return lr_schedule_init(&r->sched, c->training.steps, c->lr_scheduler.warmup_steps,
				isnan(c->lr_scheduler.decay_ratio) ? -1.0 : c->lr_scheduler.decay_ratio,
				dt, c->lr_scheduler.min_lr_factor, err);
}

/* torch.randn of n values in the encoders' dtype (randn_like of a bf16
 * tensor is another sequence of draws), as float32. */
static void draw_normal(ft_run *r, float *out, size_t n)
{
	if (!r->enc_bf16) {
		torch_rng_randn_f32(&r->g, out, n);
		return;
	}
	uint16_t *tmp = malloc(n * sizeof *tmp);
	if (tmp == NULL) /* out of memory here would change the draws: stop */
		abort();
	torch_rng_randn_bf16(&r->g, tmp, n);
	for (size_t i = 0; i < n; i++)
		out[i] = bf16_to_f32(tmp[i]);
	free(tmp);
}

/* The batch's encodings, a dropped prompt's replaced by the empty caption's. */
static int gather(ft_run *r, titan_err *err)
{
	const fluxrec_header *h = r->h;
	size_t nt = (size_t)r->lt * h->t5_dim, lat2 = (size_t)2 * r->zc * r->hl * r->wl;
	for (int64_t i = 0; i < r->b; i++) {
		fluxrec_view v;
		if (r->status[i] != FLUXIN_OK) {
			*err = r->why[i];
			return err_prefix(err, "flux inputs");
		}
		if (fluxrec_record_view(h, r->recs + (size_t)i * h->record_bytes, &v, "batch",
					err) != 0)
			return -1;
		widen(r->txt + i * nt, r->items[i].t5_dropped ? h->empty_t5 : v.t5, nt, h->dtype);
		widen(r->y + i * h->clip_dim, r->items[i].clip_dropped ? h->empty_clip : v.clip,
		      h->clip_dim, h->dtype);
		widen(r->moments + i * lat2, v.moments, lat2, h->dtype);
	}
	return 0;
}

/* A batch of ld's through the encoders (no draws: the records hold the
 * posterior's moments). */
static int encode_batch(ft_run *r, ft_loader *ld, titan_err *err)
{
	int b = (int)r->b;
	if (ft_loader_batch(ld, &r->g, b, r->items, err) != 0)
		return -1;
	fluxin_sample *s = calloc((size_t)b, sizeof *s);
	if (s == NULL)
		return err_set(err, "out of memory");
	for (int i = 0; i < b; i++) {
		ft_item *it = &r->items[i];
		s[i] = (fluxin_sample){.key = it->key, .index = it->index, .image = it->image,
				       .image_bytes = it->image_bytes, .caption = it->caption,
				       .caption_bytes = it->caption_bytes, .has_offset = 1,
				       .offset = it->offset};
	}
	int rc = fluxin_encode(r->in, s, b, r->recs, r->status, r->why, err);
	free(s);
	return rc != 0 || gather(r, err) != 0 ? -1 : 0;
}

/* The step's draws in FluxTrainer's order: the posterior's eps, the noise,
 * then (unless given: validation's) the timesteps; the latents packed. */
static void draw_latents(ft_run *r, int draw_t)
{
	size_t lat = (size_t)r->b * r->zc * r->hl * r->wl;
	draw_normal(r, r->eps, lat);
	flux_ae_sample(&r->ae, r->enc_bf16, r->moments, r->eps, r->b, r->hl, r->wl, r->z);
	draw_normal(r, r->noise4, lat);
	if (draw_t)
		torch_rng_rand_f32(&r->g, r->t, (size_t)r->b);
	flux_pack_latents(r->x, r->z, r->b, r->zc, r->hl, r->wl);
	flux_pack_latents(r->noise, r->noise4, r->b, r->zc, r->hl, r->wl);
	flux_latent_ids(r->img_ids, r->b, r->hl, r->wl);
}

/* A training batch: the loader's samples, encoded, and the step's draws. */
static int make_batch(ft_run *r, titan_err *err)
{
	if (encode_batch(r, &r->ld, err) != 0)
		return -1;
	draw_latents(r, 1);
	return 0;
}

/* Sum of a double over the ranks (max with want_max). */
static int reduce_double(ft_run *r, double *v, int want_max, titan_err *err)
{
	if (r->ranks == 1)
		return 0;
	return comm_all_reduce(r->world, v, v, 1, COMM_F64, want_max ? COMM_MAX : COMM_SUM, err);
}

typedef struct ft_step_out {
	double loss, max_loss, grad_norm, lr;
} ft_step_out;

static int train_step(ft_run *r, int64_t step, ft_step_out *o, titan_err *err)
{
	const job_config *c = r->c;
	if (make_batch(r, err) != 0)
		return -1;
	int64_t numel = r->b * r->li * r->ci;
	flux_batch in = {.b = r->b, .li = r->li, .lt = r->lt, .c_img = r->ci,
			 .c_txt = r->h->t5_dim, .c_vec = r->h->clip_dim, .x = r->x,
			 .noise = r->noise, .img_ids = r->img_ids, .txt = r->txt,
			 .txt_ids = r->txt_ids, .t = r->t, .y = r->y,
			 .global_numel = numel * r->ranks, .target_f32 = !r->enc_bf16};
	float loss;
	flux_zero_grad(r->m);
	if (flux_step(r->m, &in, 1, &loss, NULL, err) != 0)
		return -1;
	float *g = flux_model_grads(r->m), *w = flux_model_weights(r->m);
	size_t n = (size_t)flux_model_numel(r->m);
	/* FSDP's reduce (float32, summed: 0.3.0 turns FSDP's division off) */
	if (r->ranks > 1 && (r->be->ops->sync(r->be, err) != 0 ||
			     comm_all_reduce(r->world, g, g, n, COMM_F32, COMM_SUM, err) != 0))
		return -1;
	o->grad_norm = grad_clip_norm(r->be, g, n, c->training.max_norm);
	o->lr = c->optimizer.lr * lr_schedule_factor(&r->sched, step - 1);
	adamw_step(r->opt, w, g, o->lr);
	if (r->be->ops->sync(r->be, err) != 0)
		return -1;
	o->loss = o->max_loss = loss;
	if (reduce_double(r, &o->loss, 0, err) != 0 || reduce_double(r, &o->max_loss, 1, err) != 0)
		return -1;
	return 0;
}

/* Seconds since the epoch: TensorBoard's wall_time. */
static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One image of the validator's: prompt i of the batch (its encodings are the
 * batch's), sampled from noise the run's generator draws, saved as 0.3.0's
 * save_image names it and to TensorBoard. */
static int sample_image(ft_run *r, int64_t i, int64_t step, titan_err *err)
{
	const job_config *c = r->c;
	const fluxrec_header *h = r->h;
	int64_t side = 16 * (c->flux.val_img_size / 16), n = side * side;
	size_t nz = (size_t)r->zc * (size_t)(n / 64);
	float *noise = malloc(nz * sizeof *noise);
	uint8_t *rgb = malloc((size_t)n * 3);
	int rc = -1;
	if (noise == NULL || rgb == NULL) {
		err_set(err, "out of memory for a %lld px image", (long long)side);
		goto out;
	}
	draw_normal(r, noise, nz);
	flux_sample_in in = {.b = 1, .height = side, .width = side, .lt = r->lt,
			     .c_txt = h->t5_dim, .c_vec = h->clip_dim, .noise = noise,
			     .txt = r->txt + i * r->lt * h->t5_dim, .y = r->y + i * h->clip_dim,
			     .txt_empty = r->empty_t5, .y_empty = r->empty_clip,
			     .steps = (int)c->flux.val_denoising_steps, .cfg = c->flux.val_cfg,
			     .cfg_scale = c->flux.val_cfg_scale};
	flux_sample_out out = {.rgb = rgb};
	if (flux_sample(r->m, fluxin_autoencoder(r->in), &in, &out, err) != 0)
		goto out;
	char name[96], dir[2048], path[2200], prompt[FLUXREC_KEY_BYTES + 64];
	snprintf(name, sizeof name, "image_rank%d_%lld.png", r->rank, (long long)step);
	snprintf(prompt, sizeof prompt, "%.*s", (int)r->items[i].caption_bytes,
		 (const char *)r->items[i].caption);
	if (trainer_under_dump(c, "validator.save_img_folder", c->flux.val_save_img_folder, dir,
			       sizeof dir, err) != 0 || mkdir_p(dir, err) != 0)
		goto out;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (flux_sample_save_png(path, rgb, side, side, name, prompt, err) != 0)
		goto out;
	rc = 0;
	if (r->tb_open) {
		size_t np = 0;
		uint8_t *png = NULL;
		rc = image_png_encode(rgb, (int)side, (int)side, 3, NULL, 0, &png, &np, err) == 0 &&
				     tb_add_image(&r->tb, "validation/image", png, np, (int)side,
						  (int)side, 3, step, wall_s(), err) == 0
			     ? 0 : -1;
		free(png);
	}
out:
	free(noise);
	free(rgb);
	return rc;
}

/* FluxValidator.validate: validation.steps batches of a fresh loader over
 * validation.dataset_path (the training data's when unset) without prompt
 * dropout, the first flux.val_save_img_count prompts sampled into images,
 * the loss at the stratified timesteps (i + 0.5) / 8, round-robin over the
 * samples; every draw on the run's generator, as 0.3.0's are. */
static int validate(ft_run *r, int64_t step, titan_err *err)
{
	const job_config *c = r->c;
	const char *path = c->validation.dataset_path ? c->validation.dataset_path
						      : c->training.dataset_path;
	ft_loader v;
	if (ft_loader_open(&v, path, (int)c->flux.img_size, 0.0, r->rank, r->ranks, err) != 0) {
		ft_loader_close(&v);
		return -1;
	}
	int64_t save_left = c->flux.val_save_img_count, k = 0;
	double sum = 0, count = 0;
	int rc = 0;
	for (int64_t s = 0; rc == 0 && s < c->validation.steps; s++) {
		if (encode_batch(r, &v, err) != 0) {
			rc = -1;
			break;
		}
		for (int64_t i = 0; rc == 0 && i < r->b && save_left != 0; i++, save_left--)
			rc = sample_image(r, i, step, err);
		for (int64_t i = 0; i < r->b; i++, k++)
			r->t[i] = (float)((double)(k % 8) * 0.125 + 0.0625);
		draw_latents(r, 0);
		flux_batch in = {.b = r->b, .li = r->li, .lt = r->lt, .c_img = r->ci,
				 .c_txt = r->h->t5_dim, .c_vec = r->h->clip_dim, .x = r->x,
				 .noise = r->noise, .img_ids = r->img_ids, .txt = r->txt,
				 .txt_ids = r->txt_ids, .t = r->t, .y = r->y, .global_numel = 1,
				 .target_f32 = !r->enc_bf16};
		float loss; /* the batch's sum of squared errors (MSELoss's sum) */
		if (rc == 0 && flux_step(r->m, &in, 0, &loss, NULL, err) != 0)
			rc = -1;
		sum += loss;
		count += (double)(r->b * r->li * r->ci);
	}
	/* 0.3.0's `for batch in loader: if num_steps >= steps: break` fetches one
	 * batch more before it stops: its samples' draws are made too */
	if (rc == 0 && ft_loader_batch(&v, &r->g, (int)r->b, r->items, err) != 0)
		rc = -1;
	ft_loader_close(&v);
	if (rc != 0 || reduce_double(r, &sum, 0, err) != 0 || reduce_double(r, &count, 0, err) != 0)
		return -1;
	double avg = sum / count, gib, pct;
	if (r->rank != 0)
		return 0;
	metrics_cpu_memory(&gib, &pct);
	char line[256];
	metrics_format_validation_line(line, sizeof line, step, avg, gib, pct,
				       metrics_use_color(2, c->metrics.disable_color_printing));
	metrics_log(stderr, "%s", line);
	if (r->tb_open && (tb_add_scalar(&r->tb, "validation_metrics/loss", (float)avg, step,
					 wall_s(), err) != 0 ||
			   tb_flush(&r->tb, err) != 0))
		return -1;
	return metrics_jsonl_validation(&r->jl, step, avg, (int64_t)count, err);
}

static int open_metrics(ft_run *r, titan_err *err)
{
	const char *dir = r->c->job.dump_folder;
	if (r->rank != 0)
		return 0;
	if (mkdir_p(dir, err) != 0)
		return -1;
	char path[4096];
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	if (metrics_jsonl_open(&r->jl, path, err) != 0)
		return -1;
	r->jl_open = 1;
	if (!r->c->metrics.enable_tensorboard)
		return 0;
	char stamp[32], tb[2048];
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M", &tm);
	if (trainer_under_dump(r->c, "metrics.save_tb_folder", r->c->metrics.save_tb_folder, tb,
			       sizeof tb, err) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/%s", tb, stamp);
	if (tb_open(&r->tb, path, wall_s(), err) != 0)
		return -1;
	r->tb_open = 1;
	LOG0(r, "TensorBoard logging enabled. Logs will be saved at %s", path);
	return 0;
}

static int tb_scalars(ft_run *r, int64_t step, const ft_step_out *o, const metrics_step *s,
		      titan_err *err)
{
	const struct {
		const char *tag;
		double v;
	} sc[] = {{"loss_metrics/global_avg_loss", o->loss}, {"loss_metrics/global_max_loss", o->max_loss},
		  {"grad_norm", o->grad_norm}, {"lr", o->lr}, {"throughput(tps)", s->tps},
		  {"tflops", s->tflops}, {"mfu(%)", s->mfu},
		  {"memory/max_reserved(GiB)", s->mem_gib}};
	for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
		if (tb_add_scalar(&r->tb, sc[i].tag, (float)sc[i].v, step, wall_s(), err) != 0)
			return -1;
	return tb_flush(&r->tb, err);
}

static int log_step(ft_run *r, int64_t step, const ft_step_out *o, double dt, int64_t tokens,
		    titan_err *err)
{
	if (r->rank != 0)
		return 0;
	metrics_step s = {.step = step, .loss = o->loss, .grad_norm = o->grad_norm};
	metrics_cpu_memory(&s.mem_gib, &s.mem_pct);
	double per_rank = (double)tokens / r->ranks;
	s.tps = dt > 0 ? per_rank / dt : 0;
	double flops = r->flops_per_token * per_rank;
	metrics_set_rates(&s, flops, flops, dt, r->peak);
	char line[512];
	metrics_format_line(line, sizeof line, &s, metrics_use_color(2, r->c->metrics.disable_color_printing));
	metrics_log(stderr, "%s", line);
	if (r->tb_open && tb_scalars(r, step, o, &s, err) != 0)
		return -1;
	return metrics_jsonl_step(&r->jl, &s, o->lr, tokens * step, dt, err);
}

/* ---- checkpoints: lib/fluxckpt's folders under checkpoint.folder, with
 * titan's loader position and torch's generator state beside 0.3.0's keys,
 * so a resumed run draws what the uninterrupted one draws. */

#define LOADER_MAGIC 0x444C4654u /* "TFLD" */
#define LOADER_BYTES 20
#define RANK_BYTES (TORCH_RNG_STATE_BYTES + LOADER_BYTES)
#define MAX_CKPT_RANKS 4096

/* The loader's position: magic, consumed, skipped (little-endian u32, u64,
 * u64). */
static void loader_bytes(const ft_loader *l, uint8_t out[LOADER_BYTES])
{
	uint32_t m = LOADER_MAGIC;
	memcpy(out, &m, 4);
	memcpy(out + 4, &l->consumed, 8);
	memcpy(out + 12, &l->skipped, 8);
}

/* This rank's draws so far: its generator's state, then its loader's
 * position (train_state.rank_R of the checkpoint). */
static void rank_bytes(const ft_run *r, uint8_t out[RANK_BYTES])
{
	torch_rng_get_state(&r->g, out);
	loader_bytes(&r->ld, out + TORCH_RNG_STATE_BYTES);
}

static int ckpt_dir(const ft_run *r, int64_t step, char *buf, size_t n, titan_err *err)
{
	char base[2048];
	if (trainer_under_dump(r->c, "checkpoint.folder", r->c->checkpoint.folder, base, sizeof base,
			       err) != 0)
		return -1;
	if (step < 0)
		snprintf(buf, n, "%s", base);
	else
		snprintf(buf, n, "%s/step-%lld", base, (long long)step);
	return 0;
}

static int save_ckpt(ft_run *r, int64_t step, int model_only, titan_err *err)
{
	const job_config *c = r->c;
	char dir[2200], base[2200];
	uint8_t mine[RANK_BYTES];
	rank_bytes(r, mine);
	/* every rank's state is the same model and optimizer (the gradients are
	 * summed): rank 0 writes it, with every rank's draws beside it */
	uint8_t *all = malloc((size_t)RANK_BYTES * (size_t)r->ranks);
	fluxckpt_blob *blobs = calloc((size_t)r->ranks, sizeof *blobs);
	char (*names)[32] = calloc((size_t)r->ranks, sizeof *names);
	int rc = -1;
	if (all == NULL || blobs == NULL || names == NULL) {
		err_set(err, "out of memory for the checkpoint's rank states");
		goto out;
	}
	if (comm_all_gather(r->world, mine, all, RANK_BYTES, COMM_U8, err) != 0)
		goto out;
	for (int i = 0; i < r->ranks; i++) {
		snprintf(names[i], sizeof names[i], "rank_%d", i);
		blobs[i] = (fluxckpt_blob){.name = names[i], .p = all + (size_t)i * RANK_BYTES,
					   .n = RANK_BYTES};
	}
	fluxckpt_state s = {.model = r->m, .opt = model_only ? NULL : r->opt,
			    .base_lr = c->optimizer.lr,
			    .cur_lr = c->optimizer.lr * lr_schedule_factor(&r->sched, step),
			    .step = step, .ntokens_seen = r->b * (r->li + r->lt) * r->ranks * step,
			    .loader = mine + TORCH_RNG_STATE_BYTES, .loader_len = LOADER_BYTES,
			    .dp_world = r->ranks, .blobs = blobs, .nblobs = r->ranks};
	fluxckpt_save_opts o = {.model_only = model_only};
	ptz_dtype dt = ptz_dtype_parse(c->checkpoint.export_dtype);
	if (model_only && dt != PTZ_F32 && dt != PTZ_BF16 && dt != PTZ_F16) {
		err_set(err, "checkpoint.export_dtype: %s is not float32, bfloat16 or float16",
			c->checkpoint.export_dtype);
		goto out;
	}
	o.export_dtype = model_only ? dt : PTZ_NONE;
	double t0 = progress_now();
	if (ckpt_dir(r, step, dir, sizeof dir, err) != 0 || ckpt_dir(r, -1, base, sizeof base, err) != 0)
		goto out;
	if (r->rank == 0 && (mkdir_p(base, err) != 0 || fluxckpt_save(dir, &s, &o, err) != 0 ||
			     dcp_purge(base, (int)c->checkpoint.keep_latest_k, err) != 0))
		goto out;
	rc = 0;
out:
	free(all);
	free(blobs);
	free(names);
	/* the others wait for rank 0's folder (a resume must find it whole) */
	if (r->ranks > 1 && comm_barrier(r->world, rc == 0 ? err : &(titan_err){{0}}) != 0)
		rc = -1;
	if (rc != 0)
		return -1;
	LOG0(r, "Finished saving the checkpoint (or staging if async is enabled)in %.2f seconds.",
	     progress_now() - t0);
	return 0;
}

/* Resume from checkpoint.load_step (-1: the latest) under checkpoint.folder,
 * or start from checkpoint.initial_load_path's weights; *step the steps done.
 * model_only: the weights alone (--sample). */
static int load_ckpt(ft_run *r, int64_t *step, int model_only, titan_err *err)
{
	const job_config *c = r->c;
	char base[2200], dir[2200];
	*step = 0;
	if (!c->checkpoint.enable || ckpt_dir(r, -1, base, sizeof base, err) != 0)
		return c->checkpoint.enable ? -1 : 0;
	int64_t at = c->checkpoint.load_step;
	if (at == -1 && (at = dcp_latest_step(base, err)) < -1)
		return -1;
	if (at < 0) {
		const char *init = c->checkpoint.initial_load_path;
		if (init == NULL)
			return 0;
		LOG0(r, "loading the initial weights from %s", init);
		if (c->checkpoint.initial_load_in_hf)
			return fluxckpt_load_hf(init, r->m, FLUXCKPT_AUTO, err);
		fluxckpt_state s = {.model = r->m};
		fluxckpt_loaded got;
		return fluxckpt_load(init, &s, 1, 0, &got, err);
	}
	snprintf(dir, sizeof dir, "%s/step-%lld", base, (long long)at);
	uint8_t mine[RANK_BYTES] = {0};
	char name[32];
	snprintf(name, sizeof name, "rank_%d", r->rank);
	fluxckpt_blob blobs[] = {{.name = name, .optional = 1}};
	fluxckpt_state s = {.model = r->m, .opt = model_only ? NULL : r->opt, .blobs = blobs,
			    .nblobs = model_only ? 0 : 1};
	fluxckpt_loaded got;
	double t0 = progress_now();
	LOG0(r, "loading the checkpoint %s", dir);
	if (fluxckpt_load(dir, &s, model_only, 0, &got, err) != 0)
		return err_prefix(err, "checkpoint %s", dir);
	int rc = 0;
	if (!got.model_only && !model_only) {
		const uint8_t *ld = mine + TORCH_RNG_STATE_BYTES;
		uint32_t magic = 0;
		uint64_t consumed = 0, skipped = 0;
		if (blobs[0].found && blobs[0].n == RANK_BYTES) /* the load's own copy */
			memcpy(mine, blobs[0].p, RANK_BYTES);
		else
			blobs[0].found = 0;
		free(blobs[0].p);
		memcpy(&magic, ld, 4);
		if (s.dp_world != r->ranks)
			rc = err_set(err, "checkpoint %s: saved by %lld data-parallel ranks, this run has "
				     "%d (each rank's samples and draws would change)", dir,
				     (long long)s.dp_world, r->ranks);
		else if (!blobs[0].found || magic != LOADER_MAGIC)
			rc = err_set(err, "checkpoint %s: no train_state.%s (not titan's Flux "
				     "checkpoint): its random draws cannot go on", dir, name);
		if (rc == 0) {
			memcpy(&consumed, ld + 4, 8);
			memcpy(&skipped, ld + 12, 8);
			rc = torch_rng_set_state(&r->g, mine, TORCH_RNG_STATE_BYTES, err);
			if (rc == 0 && ft_loader_seek(&r->ld, consumed, err) != 0)
				rc = -1;
			r->ld.skipped = skipped;
			*step = s.step;
		}
	}
	free(s.loader);
	if (rc == 0)
		LOG0(r, "Finished loading the checkpoint in %.2f seconds.", progress_now() - t0);
	return rc;
}

static int train(ft_run *r, titan_err *err)
{
	const job_config *c = r->c;
	int64_t tokens = r->b * (r->li + r->lt) * r->ranks; /* 0.3.0's seq_len per sample */
	int64_t done;
	if (load_ckpt(r, &done, 0, err) != 0)
		return -1;
	if (c->checkpoint.create_seed_checkpoint) /* 0.3.0: step-0, the model alone */
		return save_ckpt(r, 0, 1, err);
	double t0 = progress_now();
	for (int64_t step = done + 1; step <= c->training.steps; step++) {
		ft_step_out o;
		if (train_step(r, step, &o, err) != 0)
			return err_prefix(err, "step %lld", (long long)step);
		if (!isfinite(o.loss))
			return err_set(err, "step %lld: the loss is %g", (long long)step, o.loss);
		double t1 = progress_now();
		if ((step % c->metrics.log_freq == 0 || step == 1) &&
		    log_step(r, step, &o, t1 - t0, tokens, err) != 0)
			return -1;
		/* 0.3.0's should_validate: step 1 too */
		if (c->validation.enable && (step == 1 || step % c->validation.freq == 0) &&
		    validate(r, step, err) != 0)
			return err_prefix(err, "validation at step %lld", (long long)step);
		int last = step == c->training.steps;
		if (c->checkpoint.enable && (step % c->checkpoint.interval == 0 || last) &&
		    save_ckpt(r, step, last && c->checkpoint.last_save_model_only, err) != 0)
			return err_prefix(err, "checkpoint at step %lld", (long long)step);
		t0 = progress_now();
	}
	return 0;
}

/* The data-parallel mesh fills the world: dp_replicate x dp_shard ranks
 * (dp_shard -1: what is left).  HSDP and FSDP compute the same sums here. */
static int check_mesh(const job_config *c, int world, int64_t *shard_out, titan_err *err)
{
	int64_t rep = c->parallelism.data_parallel_replicate_degree;
	int64_t shard = c->parallelism.data_parallel_shard_degree;
	if (rep < 1 || world % rep != 0)
		return err_set(err, "parallelism.data_parallel_replicate_degree %lld: does not divide "
			       "the %d ranks", (long long)rep, world);
	if (shard == -1)
		shard = world / rep;
	if (rep * shard != world)
		return err_set(err, "parallelism: data_parallel_replicate_degree %lld x "
			       "data_parallel_shard_degree %lld is not the %d ranks", (long long)rep,
			       (long long)shard, world);
	*shard_out = shard;
	return 0;
}

/* The prompts file's lines (a line's end dropped; 0.3.0's readlines keeps
 * it, which only adds whitespace the tokenizers drop or pad over). */
static char **read_prompts(const char *path, int *n, titan_err *err)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		err_set(err, "inference.prompts_path %s: cannot open it", path);
		return NULL;
	}
	char **v = NULL, *line = NULL;
	size_t cap = 0;
	ssize_t len;
	*n = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		char **nv = realloc(v, sizeof *v * (size_t)(*n + 1));
		char *dup = nv ? strdup(line) : NULL;
		if (dup == NULL) {
			if (nv)
				v = nv;
			err_set(err, "out of memory reading %s", path);
			break;
		}
		v = nv;
		v[(*n)++] = dup;
	}
	free(line);
	fclose(f);
	return v;
}

static void free_prompts(char **v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* 0.3.0's infer.py: this rank's prompts (every ranks-th from its rank on),
 * inference.local_batch_size at a time, each batch from noise the run's
 * generator draws, saved as image_prompt{i}_rank{rank}.png in
 * inference.save_img_folder under the dump folder. */
static int sample_batch(ft_run *r, char **prompts, const int *ids, int k, titan_err *err)
{
	const job_config *c = r->c;
	const fluxrec_header *h = r->h;
	int64_t side = 16 * (c->flux.inference_img_size / 16), px = side * side;
	size_t nt = (size_t)r->lt * h->t5_dim, nz = (size_t)r->zc * (size_t)(px / 64);
	float *t5 = malloc(sizeof(float) * nt * (size_t)k), *clip = malloc(sizeof(float) * h->clip_dim * (size_t)k);
	float *et5 = malloc(sizeof(float) * nt * (size_t)k), *eclip = malloc(sizeof(float) * h->clip_dim * (size_t)k);
	float *noise = malloc(sizeof(float) * nz * (size_t)k);
	uint8_t *rgb = malloc((size_t)(px * 3 * k));
	const uint8_t **caps = malloc(sizeof *caps * (size_t)k);
	size_t *lens = malloc(sizeof *lens * (size_t)k);
	int rc = -1;
	if (!t5 || !clip || !et5 || !eclip || !noise || !rgb || !caps || !lens) {
		err_set(err, "out of memory for %d images of %lld px", k, (long long)side);
		goto out;
	}
	for (int i = 0; i < k; i++) {
		caps[i] = (const uint8_t *)prompts[i];
		lens[i] = strlen(prompts[i]);
		memcpy(et5 + (size_t)i * nt, r->empty_t5, nt * sizeof(float));
		memcpy(eclip + (size_t)i * h->clip_dim, r->empty_clip, h->clip_dim * sizeof(float));
	}
	if (fluxin_encode_text(r->in, caps, lens, k, t5, clip, err) != 0)
		goto out;
	draw_normal(r, noise, nz * (size_t)k);
	flux_sample_in in = {.b = k, .height = side, .width = side, .lt = r->lt, .c_txt = h->t5_dim,
			     .c_vec = h->clip_dim, .noise = noise, .txt = t5, .y = clip,
			     .txt_empty = et5, .y_empty = eclip,
			     .steps = (int)c->flux.inference_denoising_steps,
			     .cfg = c->flux.inference_cfg, .cfg_scale = c->flux.inference_cfg_scale};
	flux_sample_out o = {.rgb = rgb};
	char dir[2048], name[96], path[2200];
	if (flux_sample(r->m, fluxin_autoencoder(r->in), &in, &o, err) != 0 ||
	    trainer_under_dump(c, "inference.save_img_folder", c->flux.inference_folder, dir,
			       sizeof dir, err) != 0 || mkdir_p(dir, err) != 0)
		goto out;
	for (int i = 0; i < k; i++) {
		snprintf(name, sizeof name, "image_prompt%d_rank%d.png", ids[i], r->rank);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		if (flux_sample_save_png(path, rgb + (size_t)i * (size_t)px * 3, side, side, name,
					 prompts[i], err) != 0)
			goto out;
		LOG0(r, "sampled %s: %s", path, prompts[i]);
	}
	rc = 0;
out:
	free(t5), free(clip), free(et5), free(eclip), free(noise), free(rgb), free(caps), free(lens);
	return rc;
}

static int sample_all(ft_run *r, titan_err *err)
{
	int64_t step;
	if (load_ckpt(r, &step, 1, err) != 0)
		return -1;
	int n;
	char **all = read_prompts(r->c->flux.inference_prompts, &n, err);
	if (all == NULL)
		return -1;
	int rc = 0, bs = (int)r->c->flux.inference_batch;
	if (n < r->ranks)
		rc = err_set(err, "inference.prompts_path %s: %d prompts for %d ranks (each needs one)",
			     r->c->flux.inference_prompts, n, r->ranks);
	char **mine = malloc(sizeof *mine * (size_t)(n + 1));
	int *ids = malloc(sizeof *ids * (size_t)(n + 1)), m = 0;
	if (rc == 0 && (mine == NULL || ids == NULL))
		rc = err_set(err, "out of memory");
	for (int i = r->rank; rc == 0 && i < n; i += r->ranks, m++) {
		mine[m] = all[i];
		ids[m] = i;
	}
	for (int i = 0; rc == 0 && i < m; i += bs)
		rc = sample_batch(r, mine + i, ids + i, m - i < bs ? m - i : bs, err);
	free(mine);
	free(ids);
	free_prompts(all, n);
	return rc;
}

static int check_supported(const job_config *c, titan_err *err)
{
	const char *mp = c->training.mixed_precision_param;
	if (strcmp(mp, "float32") != 0 && strcmp(mp, "bfloat16") != 0)
		return err_set(err, "training.mixed_precision_param %s: the Flux trainer computes "
			       "in float32 or bfloat16", mp);
	if (c->parallelism.tensor_parallel_degree > 1 || c->parallelism.pipeline_parallel_degree > 1 ||
	    c->parallelism.context_parallel_degree > 1 || c->parallelism.expert_parallel_degree > 1)
		return err_set(err, "parallelism: the Flux trainer has data parallelism only "
			       "(0.3.0's flux has no tensor, pipeline or expert parallelism; its "
			       "context parallelism is not built)");
	if (c->validation.enable && c->validation.steps < 1)
		return err_set(err, "validation.steps %lld: the Flux validator's loader starts over "
			       "at its end, so it needs a number of batches", (long long)c->validation.steps);
	if (c->validation.enable && c->flux.val_img_size != c->flux.img_size)
		return err_set(err, "validator.dataloader.img_size %lld: validation at another size "
			       "than training's %lld is not built", (long long)c->flux.val_img_size,
			       (long long)c->flux.img_size);
	if (c->training.global_batch_size > 0 &&
	    c->training.global_batch_size != c->training.local_batch_size)
		return err_set(err, "training.global_batch_size: FLUX has no gradient accumulation "
			       "(0.3.0 refuses it too)");
	return 0;
}

static void close_run(ft_run *r)
{
	if (r->jl_open)
		metrics_jsonl_close(&r->jl, NULL);
	if (r->tb_open)
		tb_close(&r->tb, NULL);
	ft_loader_close(&r->ld);
	free_batch(r);
	adamw_free(r->opt);
	flux_model_free(r->m);
	fluxin_free(r->in);
	if (r->be)
		backend_free(r->be);
}

int fluxtrain_run(const job_config *c, comm *world, const fluxtrain_opts *o, titan_err *err)
{
	ft_run r = {.c = c, .world = world, .rank = comm_rank(world), .ranks = comm_size(world)};
	int64_t shard = 1;
	if (check_supported(c, err) != 0 || check_mesh(c, r.ranks, &shard, err) != 0)
		return -1;
	/* FluxTrainer's self._dtype: the encoders in mixed_precision_param when
	 * dp_shard is on, else float32 */
	r.enc_bf16 = shard > 1 && strcmp(c->training.mixed_precision_param, "bfloat16") == 0;
	uint64_t seed = c->debug.seed_set ? (uint64_t)c->debug.seed
			: r.ranks == 1 ? TORCH_DEFAULT_SEED : 0;
	torch_rng_seed(&r.g, seed + (uint64_t)r.rank, TORCH_NORMAL_AVX2);
	int rc = -1;
	if ((r.be = backend_cpu_create(o->threads, err)) == NULL || open_inputs(&r, err) != 0 ||
	    alloc_batch(&r, err) != 0 || open_model(&r, err) != 0 || open_metrics(&r, err) != 0)
		goto out;
	if (!o->sample &&
	    (need_path(c->training.dataset_path, "training.dataset_path", "dataloader.dataset_path",
		       err) != 0 ||
	     ft_loader_open(&r.ld, c->training.dataset_path, (int)c->flux.img_size,
			    c->flux.prompt_dropout_prob, r.rank, r.ranks, err) != 0))
		goto out;
	r.flops_per_token = flux_flops_per_token(flux_model_config(r.m), r.li + r.lt);
	r.peak = metrics_matmul_peak_flops(r.be, BE_F32);
	LOG0(&r, "Flux %s: %lld parameters, %lld image + %lld text tokens per sample, local "
	     "batch %lld on %d rank(s)", c->model.flavor, (long long)flux_model_numel(r.m),
	     (long long)r.li, (long long)r.lt, (long long)r.b, r.ranks);
	rc = o->sample ? sample_all(&r, err) : train(&r, err);
out:
	close_run(&r);
	return rc;
}
