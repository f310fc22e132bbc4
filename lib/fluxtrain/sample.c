/* sample.c: the Flux trainer's images: 0.3.0's FluxValidator and infer.py
 * (fluxtrain_priv.h). */
#include "fluxtrain/fluxtrain_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "core/progress.h"
#include "flux/flux_sample.h"
#include "fluxckpt/fluxckpt.h"
#include "image/image.h"
#include "metrics/metrics.h"
#include "trainer/trainer.h"

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
	char *prompt = NULL;
	int rc = -1;
	if (noise == NULL || rgb == NULL) {
		err_set(err, "out of memory for a %lld px image", (long long)side);
		goto out;
	}
	ft_draw_normal(r, noise, nz);
	flux_sample_in in = {.b = 1, .height = side, .width = side, .lt = r->lt,
			     .c_txt = h->t5_dim, .c_vec = h->clip_dim, .noise = noise,
			     .txt = r->txt + i * r->lt * h->t5_dim, .y = r->y + i * h->clip_dim,
			     .txt_empty = r->empty_t5, .y_empty = r->empty_clip,
			     .steps = (int)c->flux.val_denoising_steps, .cfg = c->flux.val_cfg,
			     .cfg_scale = c->flux.val_cfg_scale};
	flux_sample_out out = {.rgb = rgb};
	if (flux_sample(r->m, fluxin_autoencoder(r->in), &in, &out, err) != 0)
		goto out;
	char name[96], dir[2048], path[2200];
	size_t nc = r->items[i].caption_bytes;
	if ((prompt = malloc(nc + 1)) == NULL) { /* the whole caption: the image's description */
		err_set(err, "out of memory for a caption of %zu bytes", nc);
		goto out;
	}
	memcpy(prompt, r->items[i].caption, nc);
	prompt[nc] = '\0';
	snprintf(name, sizeof name, "image_rank%d_%lld.png", r->rank, (long long)step);
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
						  (int)side, 3, step, trainer_wall_s(), err) == 0
			     ? 0 : -1;
		free(png);
	}
out:
	free(noise);
	free(rgb);
	free(prompt);
	return rc;
}

/* FluxValidator.validate: validation.steps batches of a fresh loader over
 * validation.dataset_path (the training data's when unset) without prompt
 * dropout, the first flux.val_save_img_count prompts sampled into images,
 * the loss at the stratified timesteps (i + 0.5) / 8, round-robin over the
 * samples; every draw on the run's generator, as 0.3.0's are. */
int ft_validate(ft_run *r, int64_t step, titan_err *err)
{
	const job_config *c = r->c;
	const char *path = c->validation.dataset_path ? c->validation.dataset_path
						      : c->training.dataset_path;
	ft_loader v;
	if (ft_loader_open(&v, path, (int)c->flux.img_size, 0.0, r->dp_rank, r->dp, r->h, err) != 0) {
		ft_loader_close(&v);
		return -1;
	}
	int64_t save_left = c->flux.val_save_img_count, k = 0;
	double sum = 0, count = 0;
	int rc = 0;
	for (int64_t s = 0; rc == 0 && s < c->validation.steps; s++) {
		if (ft_encode_batch(r, &v, err) != 0) {
			rc = -1;
			break;
		}
		for (int64_t i = 0; rc == 0 && i < r->b && save_left != 0; i++, save_left--)
			rc = sample_image(r, i, step, err);
		for (int64_t i = 0; i < r->b; i++, k++)
			r->t[i] = (float)((double)(k % 8) * 0.125 + 0.0625);
		ft_draw_latents(r, 0);
		flux_batch in = ft_model_batch(r, 1);
		float loss; /* the batch's (or this cp rank's share's) sum of squared errors */
		if (rc == 0 && flux_step(r->m, &in, 0, &loss, NULL, err) != 0)
			rc = -1;
		sum += loss;
		/* the whole latents' values, every data-parallel rank's (cp ranks
		 * share theirs) */
		count += (double)(r->b * r->li * r->ci * r->dp);
	}
	/* 0.3.0's `for batch in loader: if num_steps >= steps: break` fetches one
	 * batch more before it stops: its samples' draws are made too */
	if (rc == 0 && ft_loader_batch(&v, &r->g, (int)r->b, r->items, err) != 0)
		rc = -1;
	ft_loader_close(&v);
	if (rc != 0 || ft_reduce_double(r, &sum, 0, err) != 0)
		return -1;
	double avg = sum / count, gib, pct;
	if (r->rank != 0)
		return 0;
	ft_memory(r, &gib, &pct);
	char line[256];
	metrics_format_validation_line(line, sizeof line, step, avg, gib, pct,
				       metrics_use_color(2, c->metrics.disable_color_printing));
	metrics_log(stderr, "%s", line);
	if (r->tb_open && (tb_add_scalar(&r->tb, "validation_metrics/loss", (float)avg, step,
					 trainer_wall_s(), err) != 0 ||
			   tb_flush(&r->tb, err) != 0))
		return -1;
	return metrics_jsonl_validation(&r->jl, step, avg, (int64_t)count, err);
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
 * inference.save_img_folder under the dump folder.  ids NULL: a sharded
 * model's filler batch, sampled to keep the ranks' gathers in step and not
 * saved. */
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
	ft_draw_normal(r, noise, nz * (size_t)k);
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
	for (int i = 0; ids != NULL && i < k; i++) {
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

int ft_sample_all(ft_run *r, titan_err *err)
{
	int64_t step;
	if (ft_load_ckpt(r, &step, 1, err) != 0)
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
	/* a sharded model's predictions are collectives: a rank with a batch
	 * fewer than the first samples one more, of its first prompt, unsaved */
	int most = (n + r->ranks - 1) / r->ranks;
	if (rc == 0 && r->fsdp != NULL && (m + bs - 1) / bs < (most + bs - 1) / bs)
		rc = sample_batch(r, mine, NULL, 1, err);
	free(mine);
	free(ids);
	free_prompts(all, n);
	return rc;
}
