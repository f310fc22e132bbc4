/* fluxtrain.c: the Flux training loop (fluxtrain.h). */
#include "fluxtrain/fluxtrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "core/afile.h"
#include "core/bf16.h"
#include "core/progress.h"
#include "core/torch_rng.h"
#include "flux/flux.h"
#include "fluxae/fluxae.h"
#include "fluxin/fluxin.h"
#include "fluxrec/fluxrec.h"
#include "fluxtrain/fluxtrain_priv.h"
#include "gpu/gpu.h"
#include "metrics/metrics.h"
#include "optim/optim.h"
#include "tb/tb.h"
#include "trainer/trainer.h"

/* torch's default generator seed (c10's default_rng_seed_val): a one-process
 * run without debug.seed draws from it. */
#define TORCH_DEFAULT_SEED 67280421310721ull

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
	if ((r->in = fluxin_open(r->enc_be, &o, err)) == NULL)
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
	if (r->cp > 1) {
		int64_t li = b * r->li / r->cp, lt = b * r->lt / r->cp;
		r->x_cp = floats(li * r->ci, &f);
		r->noise_cp = floats(li * r->ci, &f);
		r->img_ids_cp = floats(li * 3, &f);
		r->txt_cp = floats(lt * h->t5_dim, &f);
		r->txt_ids_cp = floats(lt * 3, &f);
	}
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
		      r->txt_ids, r->t, r->empty_t5, r->empty_clip, r->x_cp, r->noise_cp,
		      r->img_ids_cp, r->txt_cp, r->txt_ids_cp};
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		free(p[i]);
}

/* c's ranks for the model's tensors: over NCCL on the GPU's stream with the
 * CUDA backend, else c itself. */
static int dev_comm(ft_run *r, comm *c, const char *name, comm **out, titan_err *err)
{
	*out = c;
	if (r->device < 0)
		return 0;
	*out = NULL;
	if (comm_nccl_create(c, r->device, backend_cuda_stream(r->be), name, out, err) != 0)
		return err_prefix(err, "--backend cuda: NCCL over %s", name);
	return 0;
}

static void dev_comm_free(comm *dev, const comm *c)
{
	if (dev != NULL && dev != c)
		comm_free(dev);
}

/* FSDP's groups: the dp_shard x cp ranks of one replica (0.3.0's world mesh
 * is dp_replicate, dp_shard, cp, cp innermost), and under HSDP the ranks of
 * one shard index across the replicas. */
static int open_fsdp(ft_run *r, titan_err *err)
{
	int group = r->shard * r->cp;
	if (comm_split(r->world, r->rank / group, r->rank, "fsdp", &r->fsdpc, err) != 0 ||
	    dev_comm(r, r->fsdpc, "fsdp", &r->fsdp_dev, err) != 0 ||
	    (r->rep > 1 &&
	     (comm_split(r->world, r->rank % group, r->rank, "dp_replicate", &r->repc, err) != 0 ||
	      dev_comm(r, r->repc, "dp_replicate", &r->rep_dev, err) != 0)) ||
	    (r->fsdp = fluxfsdp_create(r->m, r->fsdp_dev, r->rep_dev, r->fsdpc, err)) == NULL)
		return err_prefix(err, "FSDP");
	return 0;
}

static int open_model(ft_run *r, titan_err *err)
{
	const job_config *c = r->c;
	const flux_config *fc = flux_flavor(c->model.flavor);
	if (fc == NULL) {
		char names[128];
		flux_flavor_names(names, sizeof names);
		return err_set(err, "model.flavor %s: not a Flux flavor (%s)", c->model.flavor, names);
	}
	int sharded = r->shard * r->cp > 1;
	if (check_shapes(r, fc, err) != 0)
		return -1;
	r->m = sharded ? flux_model_create_unbound(r->be, fc, err) : flux_model_create(r->be, fc, err);
	if (r->m == NULL)
		return -1;
	/* 0.3.0's parallelize_flux checkpoints every block whenever the job
	 * has an activation_checkpoint config (the presets' FullAC) */
	const char *ac_mode = c->activation_checkpoint.mode;
	flux_model_set_full_ac(r->m, ac_mode != NULL && strcmp(ac_mode, "none") != 0);
	/* 0.3.0 applies fully_shard to Flux on any number of ranks: its
	 * parameters compute in mixed_precision_param */
	if (strcmp(c->training.mixed_precision_param, "bfloat16") == 0 &&
	    flux_model_set_compute(r->m, BE_BF16, err) != 0)
		return -1;
	uint64_t seed = c->debug.seed_set ? (uint64_t)c->debug.seed : 0;
	if (sharded ? open_fsdp(r, err) != 0 || fluxfsdp_init(r->fsdp, seed, err) != 0
		    : flux_model_init(r->m, seed, err) != 0)
		return -1;
	adamw_config ac;
	adamw_config_default(&ac);
	ac.lr = c->optimizer.lr;
	ac.beta1 = c->optimizer.beta1;
	ac.beta2 = c->optimizer.beta2;
	ac.eps = c->optimizer.eps;
	ac.weight_decay = c->optimizer.weight_decay;
	int64_t held = r->fsdp ? fluxfsdp_numel(r->fsdp) : flux_model_numel(r->m);
	if ((r->opt = adamw_create(r->be, (size_t)held, &ac, err)) == NULL)
		return -1;
	const char *dt = c->lr_scheduler.decay_type;
	return lr_schedule_init(&r->sched, c->training.steps, c->lr_scheduler.warmup_steps,
				isnan(c->lr_scheduler.decay_ratio) ? -1.0 : c->lr_scheduler.decay_ratio,
				dt, c->lr_scheduler.min_lr_factor, err);
}

/* torch.randn of n values in the encoders' dtype (randn_like of a bf16
 * tensor is another sequence of draws), as float32. */
void ft_draw_normal(ft_run *r, float *out, size_t n)
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

/* The batch's encodings, a dropped prompt's replaced by the empty caption's:
 * each sample's record (dtype: the records' own, or the encoders' output). */
static int gather(ft_run *r, uint32_t dtype, titan_err *err)
{
	const fluxrec_header *h = r->h;
	size_t nt = (size_t)r->lt * h->t5_dim, lat2 = (size_t)2 * r->zc * r->hl * r->wl;
	for (int64_t i = 0; i < r->b; i++) {
		const ft_item *it = &r->items[i];
		fluxrec_view v = it->rec;
		if (!it->has_rec && r->status[i] != FLUXIN_OK) {
			*err = r->why[i];
			return err_prefix(err, "flux inputs");
		}
		if (!it->has_rec && fluxrec_record_view(h, r->recs + (size_t)i * h->record_bytes, &v,
							"batch", err) != 0)
			return -1;
		if (it->t5_dropped)
			widen(r->txt + i * nt, h->empty_t5, nt, h->dtype);
		else
			widen(r->txt + i * nt, v.t5, nt, dtype);
		if (it->clip_dropped)
			widen(r->y + i * h->clip_dim, h->empty_clip, h->clip_dim, h->dtype);
		else
			widen(r->y + i * h->clip_dim, v.clip, h->clip_dim, dtype);
		widen(r->moments + i * lat2, v.moments, lat2, dtype);
	}
	return 0;
}

/* A batch of ld's through the encoders (no draws: the records hold the
 * posterior's moments). */
int ft_encode_batch(ft_run *r, ft_loader *ld, titan_err *err)
{
	int b = (int)r->b;
	if (ft_loader_batch(ld, &r->g, b, r->items, err) != 0)
		return -1;
	if (ld->rf != NULL) /* records: encoded already */
		return gather(r, fluxrec_file_header(ld->rf[0])->dtype, err);
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
	return rc != 0 || gather(r, r->h->dtype, err) != 0 ? -1 : 0;
}

/* The step's draws in FluxTrainer's order: the posterior's eps, the noise,
 * then (unless given: validation's) the timesteps; the latents packed. */
void ft_draw_latents(ft_run *r, int draw_t)
{
	size_t lat = (size_t)r->b * r->zc * r->hl * r->wl;
	ft_draw_normal(r, r->eps, lat);
	flux_ae_sample(&r->ae, r->enc_bf16, r->moments, r->eps, r->b, r->hl, r->wl, r->z);
	ft_draw_normal(r, r->noise4, lat);
	if (draw_t)
		torch_rng_rand_f32(&r->g, r->t, (size_t)r->b);
	flux_pack_latents(r->x, r->z, r->b, r->zc, r->hl, r->wl);
	flux_pack_latents(r->noise, r->noise4, r->b, r->zc, r->hl, r->wl);
	flux_latent_ids(r->img_ids, r->b, r->hl, r->wl);
}

/* A training batch: the loader's samples, encoded, and the step's draws. */
static int make_batch(ft_run *r, titan_err *err)
{
	if (ft_encode_batch(r, &r->ld, err) != 0)
		return -1;
	ft_draw_latents(r, 1);
	return 0;
}

flux_batch ft_model_batch(ft_run *r, int64_t global_numel)
{
	flux_batch in = {.b = r->b, .li = r->li, .lt = r->lt, .c_img = r->ci,
			 .c_txt = r->h->t5_dim, .c_vec = r->h->clip_dim, .x = r->x,
			 .noise = r->noise, .img_ids = r->img_ids, .txt = r->txt,
			 .txt_ids = r->txt_ids, .t = r->t, .y = r->y,
			 .global_numel = global_numel, .target_f32 = !r->enc_bf16};
	if (r->cp == 1)
		return in;
	const cp_layout *li = &r->lay_img, *lt = &r->lay_txt;
	size_t f = sizeof(float);
	cp_shard(li, r->cp_rank, r->x, r->x_cp, r->b, f * (size_t)r->ci);
	cp_shard(li, r->cp_rank, r->noise, r->noise_cp, r->b, f * (size_t)r->ci);
	cp_shard(li, r->cp_rank, r->img_ids, r->img_ids_cp, r->b, f * 3);
	cp_shard(lt, r->cp_rank, r->txt, r->txt_cp, r->b, f * r->h->t5_dim);
	cp_shard(lt, r->cp_rank, r->txt_ids, r->txt_ids_cp, r->b, f * 3);
	in.li = cp_local_len(li);
	in.lt = cp_local_len(lt);
	in.x = r->x_cp;
	in.noise = r->noise_cp;
	in.img_ids = r->img_ids_cp;
	in.txt = r->txt_cp;
	in.txt_ids = r->txt_ids_cp;
	return in;
}

/* Sum of a double over the ranks (max with want_max). */
int ft_reduce_double(ft_run *r, double *v, int want_max, titan_err *err)
{
	if (r->ranks == 1)
		return 0;
	return comm_all_reduce(r->world, v, v, 1, COMM_F64, want_max ? COMM_MAX : COMM_SUM, err);
}

typedef struct ft_step_out {
	double loss, max_loss, grad_norm, lr;
} ft_step_out;

/* The step's loss summed over the ranks (and its largest), once the
 * optimizer's update is done. */
static int finish_step(ft_run *r, ft_step_out *o, float loss, titan_err *err)
{
	if (r->be->ops->sync(r->be, err) != 0)
		return -1;
	o->loss = o->max_loss = loss;
	if (ft_reduce_double(r, &o->loss, 0, err) != 0 || ft_reduce_double(r, &o->max_loss, 1, err) != 0)
		return -1;
	return 0;
}

static int train_step(ft_run *r, ft_step_out *o, titan_err *err)
{
	const job_config *c = r->c;
	if (make_batch(r, err) != 0)
		return -1;
	/* FluxTrainer's global_valid_tokens: every data-parallel rank's whole
	 * latents (cp ranks share theirs) */
	flux_batch in = ft_model_batch(r, r->b * r->li * r->ci * r->dp);
	float loss;
	flux_zero_grad(r->m);
	if (flux_step(r->m, &in, 1, &loss, NULL, err) != 0)
		return -1;
	if (r->fsdp != NULL) { /* the step reduce-scattered each unit's gradients */
		if (fluxfsdp_clip(r->fsdp, c->training.max_norm, &o->grad_norm, err) != 0)
			return -1;
		o->lr = c->optimizer.lr * lr_schedule_factor(&r->sched, r->sched_steps);
		adamw_step(r->opt, fluxfsdp_weights(r->fsdp), fluxfsdp_grads(r->fsdp), o->lr);
		r->sched_steps++;
		return finish_step(r, o, loss, err);
	}
	float *g = flux_model_grads(r->m), *w = flux_model_weights(r->m);
	size_t n = (size_t)flux_model_numel(r->m);
	/* replication alone: the replicas' gradients summed in float32 (0.3.0
	 * turns FSDP's division off) */
	if (r->ranks > 1 && (r->be->ops->sync(r->be, err) != 0 ||
			     comm_all_reduce(r->world_dev, g, g, n, COMM_F32, COMM_SUM, err) != 0))
		return -1;
	o->grad_norm = grad_clip_norm(r->be, g, n, c->training.max_norm);
	o->lr = c->optimizer.lr * lr_schedule_factor(&r->sched, r->sched_steps);
	adamw_step(r->opt, w, g, o->lr);
	r->sched_steps++;
	return finish_step(r, o, loss, err);
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
	if (trainer_tb_dir(r->c, "", path, sizeof path, err) != 0)
		return -1;
	if (tb_open(&r->tb, path, trainer_wall_s(), err) != 0)
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
		if (tb_add_scalar(&r->tb, sc[i].tag, (float)sc[i].v, step, trainer_wall_s(), err) != 0)
			return -1;
	return tb_flush(&r->tb, err);
}

/* The log's memory: the process's resident peak, or on a GPU the arena's
 * high-water mark against the device's memory. */
void ft_memory(const ft_run *r, double *gib, double *pct)
{
	if (r->device < 0) {
		metrics_cpu_memory(gib, pct);
		return;
	}
	*gib = (double)backend_cuda_high_water(r->be) / (1 << 30);
	*pct = r->gpu_bytes ? 100.0 * (double)backend_cuda_high_water(r->be) / (double)r->gpu_bytes : 0;
}

static int log_step(ft_run *r, int64_t step, const ft_step_out *o, double dt, int64_t tokens,
		    titan_err *err)
{
	if (r->rank != 0)
		return 0;
	metrics_step s = {.step = step, .loss = o->loss, .grad_norm = o->grad_norm};
	ft_memory(r, &s.mem_gib, &s.mem_pct);
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

static int train(ft_run *r, titan_err *err)
{
	const job_config *c = r->c;
	/* 0.3.0's seq_len per sample, a cp rank counting its share */
	int64_t tokens = r->b * (r->li + r->lt) * r->dp;
	int64_t done;
	if (ft_load_ckpt(r, &done, 0, err) != 0)
		return -1;
	if (c->checkpoint.create_seed_checkpoint) /* 0.3.0: step-0, the model alone */
		return ft_save_ckpt(r, 0, 1, err);
	double t0 = progress_now();
	for (int64_t step = done + 1; step <= c->training.steps; step++) {
		ft_step_out o;
		if (train_step(r, &o, err) != 0)
			return err_prefix(err, "step %lld", (long long)step);
		if (!isfinite(o.loss))
			return err_set(err, "step %lld: the loss is %g", (long long)step, o.loss);
		double t1 = progress_now();
		if ((step % c->metrics.log_freq == 0 || step == 1) &&
		    log_step(r, step, &o, t1 - t0, tokens, err) != 0)
			return -1;
		/* 0.3.0's should_validate: step 1 too */
		if (c->validation.enable && (step == 1 || step % c->validation.freq == 0) &&
		    ft_validate(r, step, err) != 0)
			return err_prefix(err, "validation at step %lld", (long long)step);
		int last = step == c->training.steps;
		if (c->checkpoint.enable && (step % c->checkpoint.interval == 0 || last) &&
		    ft_save_ckpt(r, step, last && c->checkpoint.last_save_model_only, err) != 0)
			return err_prefix(err, "checkpoint at step %lld", (long long)step);
		t0 = progress_now();
	}
	return 0;
}

/* The mesh fills the world: dp_replicate x dp_shard x cp ranks (dp_shard
 * -1: what is left), cp innermost as in 0.3.0's world mesh.  HSDP and FSDP
 * compute the same sums here. */
static int check_mesh(const job_config *c, int world, int64_t *shard_out, titan_err *err)
{
	int64_t rep = c->parallelism.data_parallel_replicate_degree;
	int64_t shard = c->parallelism.data_parallel_shard_degree;
	int64_t cp = c->parallelism.context_parallel_degree;
	if (cp < 1 || rep < 1 || world % (rep * cp) != 0)
		return err_set(err, "parallelism: data_parallel_replicate_degree %lld x "
			       "context_parallel_degree %lld does not divide the %d ranks",
			       (long long)rep, (long long)cp, world);
	if (shard == -1)
		shard = world / (rep * cp);
	if (rep * shard * cp != world)
		return err_set(err, "parallelism: data_parallel_replicate_degree %lld x "
			       "data_parallel_shard_degree %lld x context_parallel_degree %lld is "
			       "not the %d ranks", (long long)rep, (long long)shard, (long long)cp,
			       world);
	*shard_out = shard;
	return 0;
}

/* The token layouts: the image and the text tokens each cut into cp equal
 * runs, as 0.3.0's cp_shard cuts them (checked before the model is made). */
static int cp_layouts(ft_run *r, titan_err *err)
{
	if (r->cp == 1)
		return 0;
	if (r->li % r->cp != 0 || r->lt % r->cp != 0)
		return err_set(err, "parallelism.context_parallel_degree %d: the %lld image and %lld "
			       "text tokens of a sample do not divide into %d equal shares "
			       "(dataloader.img_size, tokenizer.max_t5_encoding_len)", r->cp,
			       (long long)r->li, (long long)r->lt, r->cp);
	if (cp_layout_init(&r->lay_img, r->li, r->cp, CP_BALANCE_NONE, err) != 0 ||
	    cp_layout_init(&r->lay_txt, r->lt, r->cp, CP_BALANCE_NONE, err) != 0)
		return -1;
	return 0;
}

/* The cp group and the model's attention over it. */
static int open_cp(ft_run *r, titan_err *err)
{
	if (r->cp == 1)
		return 0;
	if (comm_split(r->world, r->dp_rank, r->rank, "cp", &r->cpc, err) != 0 ||
	    dev_comm(r, r->cpc, "cp", &r->cp_dev, err) != 0 ||
	    (r->gather = cp_gather_create(r->be, r->cp_dev, err)) == NULL)
		return err_prefix(err, "context parallelism");
	be_attn_hook hook;
	cp_gather_hook(r->gather, &hook);
	flux_model_set_attention(r->m, &hook);
	return 0;
}

/* The encoders' CPU backend, and the transformer's: the same one, or with
 * --backend cuda the process's GPU (one arena; its tensors' collectives over
 * NCCL, the host's scalars over MPI). */
static int open_backends(ft_run *r, const fluxtrain_opts *o, titan_err *err)
{
	r->device = -1;
	if ((r->enc_be = backend_cpu_create(o->threads, err)) == NULL)
		return -1;
	if (o->backend != TRAINER_BACKEND_CUDA) {
		r->be = r->enc_be;
		r->world_dev = r->world;
		return 0;
	}
	if (o->device < 0)
		return err_set(err, "--backend cuda: no GPU for this process (%s)", gpu_why_none());
	backend_cuda_opts bo = {.device = o->device};
	gpu_info gi;
	if (gpu_device_info(o->device, &gi, err) != 0 ||
	    (r->ranks > 1 && trainer_nccl_arena(o->device, &bo, err) != 0) ||
	    (r->be = backend_cuda_create(&bo, err)) == NULL)
		return err_prefix(err, "--backend cuda");
	r->device = o->device;
	r->gpu_bytes = gi.mem_bytes;
	if (r->ranks > 1 && dev_comm(r, r->world, "world", &r->world_dev, err) != 0)
		return -1;
	LOG0(r, "CUDA backend: the transformer on device %d (%s, %.1f GiB), the encoders and "
	     "the autoencoder on the CPU%s", o->device, gi.name, (double)gi.mem_bytes / (1 << 30),
	     r->ranks > 1 ? "; its collectives over NCCL" : "");
	return 0;
}

static int check_supported(const job_config *c, titan_err *err)
{
	const char *mp = c->training.mixed_precision_param;
	if (strcmp(mp, "float32") != 0 && strcmp(mp, "bfloat16") != 0)
		return err_set(err, "training.mixed_precision_param %s: the Flux trainer computes "
			       "in float32 or bfloat16", mp);
	if (c->parallelism.tensor_parallel_degree > 1 || c->parallelism.pipeline_parallel_degree > 1 ||
	    c->parallelism.expert_parallel_degree > 1)
		return err_set(err, "parallelism: the Flux trainer has data and context parallelism "
			       "(0.3.0's flux has no tensor, pipeline or expert parallelism)");
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
	fluxfsdp_free(r->fsdp);
	cp_gather_free(r->gather);
	dev_comm_free(r->fsdp_dev, r->fsdpc);
	dev_comm_free(r->rep_dev, r->repc);
	dev_comm_free(r->cp_dev, r->cpc);
	dev_comm_free(r->world_dev, r->world);
	comm *own[] = {r->fsdpc, r->repc, r->cpc};
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (own[i])
			comm_free(own[i]);
	flux_model_free(r->m);
	fluxin_free(r->in);
	if (r->be && r->be != r->enc_be)
		backend_free(r->be);
	if (r->enc_be)
		backend_free(r->enc_be);
}

int fluxtrain_run(const job_config *c, comm *world, const fluxtrain_opts *o, titan_err *err)
{
	ft_run r = {.c = c, .world = world, .rank = comm_rank(world), .ranks = comm_size(world)};
	int64_t shard = 1;
	if (check_supported(c, err) != 0 || check_mesh(c, r.ranks, &shard, err) != 0)
		return -1;
	r.cp = (int)c->parallelism.context_parallel_degree;
	r.cp_rank = r.rank % r.cp;
	r.dp = r.ranks / r.cp;
	r.dp_rank = r.rank / r.cp;
	r.shard = (int)shard;
	r.rep = (int)c->parallelism.data_parallel_replicate_degree;
	/* FluxTrainer's self._dtype: the encoders in mixed_precision_param when
	 * dp_shard is on, else float32 */
	r.enc_bf16 = shard > 1 && strcmp(c->training.mixed_precision_param, "bfloat16") == 0;
	uint64_t seed = c->debug.seed_set ? (uint64_t)c->debug.seed
			: r.ranks == 1 ? TORCH_DEFAULT_SEED : 0;
	torch_rng_seed(&r.g, seed + (uint64_t)r.rank, TORCH_NORMAL_AVX2);
	int rc = -1;
	if (open_backends(&r, o, err) != 0 || open_inputs(&r, err) != 0 ||
	    alloc_batch(&r, err) != 0 || cp_layouts(&r, err) != 0 || open_model(&r, err) != 0 ||
	    open_cp(&r, err) != 0 || open_metrics(&r, err) != 0)
		goto out;
	if (!o->sample &&
	    (need_path(c->training.dataset_path, "training.dataset_path", "dataloader.dataset_path",
		       err) != 0 ||
	     ft_loader_open(&r.ld, c->training.dataset_path, (int)c->flux.img_size,
			    c->flux.prompt_dropout_prob, r.dp_rank, r.dp, r.h, err) != 0))
		goto out;
	r.flops_per_token = flux_flops_per_token(flux_model_config(r.m), r.li + r.lt);
	r.peak = metrics_matmul_peak_flops(r.be, BE_F32);
	LOG0(&r, "Flux %s: %lld parameters, %lld image + %lld text tokens per sample, local "
	     "batch %lld on %d rank(s)", c->model.flavor, (long long)flux_model_numel(r.m),
	     (long long)r.li, (long long)r.lt, (long long)r.b, r.ranks);
	if (r.cp > 1)
		LOG0(&r, "Context parallelism: %d ranks share each batch, %lld image + %lld text "
		     "tokens each; attention over their all-gathered keys and values", r.cp,
		     (long long)cp_local_len(&r.lay_img), (long long)cp_local_len(&r.lay_txt));
	rc = o->sample ? ft_sample_all(&r, err) : train(&r, err);
out:
	close_run(&r);
	return rc;
}
