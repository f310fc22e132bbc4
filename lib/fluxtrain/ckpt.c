/* ckpt.c: the Flux trainer's checkpoints (fluxtrain_priv.h). */
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

/* ---- checkpoints: lib/fluxckpt's folders under checkpoint.folder, with
 * titan's loader position and torch's generator state beside 0.3.0's keys,
 * so a resumed run draws what the uninterrupted one draws. */

#define LOADER_MAGIC 0x444C4654u /* "TFLD" */
#define LOADER_BYTES 20
#define RANK_BYTES (TORCH_RNG_STATE_BYTES + LOADER_BYTES)

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

/* Whether every rank's *rc is 0 (a failed rank's own message stays in
 * err); 0, or -1 with *rc -1. */
static int all_ok(ft_run *r, int *rc, titan_err *err)
{
	int64_t bad = *rc != 0;
	titan_err e2;
	if (comm_all_reduce(r->world, &bad, &bad, 1, COMM_I64, COMM_MAX, &e2) != 0) {
		if (*rc == 0)
			*err = e2;
		bad = 1;
	} else if (bad && *rc == 0) {
		err_set(err, "another rank failed to write its part of the checkpoint");
	}
	if (bad)
		*rc = -1;
	return bad ? -1 : 0;
}

int ft_save_ckpt(ft_run *r, int64_t step, int model_only, titan_err *err)
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
	int rc = -1, group = r->fsdp ? r->shard * r->cp : 1;
	double t0 = progress_now();
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
	fluxckpt_state s = {.model = r->m, .fsdp = r->fsdp, .rank = r->rank % group, .world = group,
			    .opt = model_only ? NULL : r->opt, .base_lr = c->optimizer.lr,
			    .cur_lr = c->optimizer.lr * lr_schedule_factor(&r->sched, r->sched_steps),
			    .step = step, .last_epoch = r->sched_steps,
			    .ntokens_seen = r->b * (r->li + r->lt) * r->dp * step,
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
	if (ckpt_dir(r, step, dir, sizeof dir, err) != 0 || ckpt_dir(r, -1, base, sizeof base, err) != 0)
		goto out;
	/* unsharded, every rank's state is the same model and optimizer (the
	 * gradients are summed): rank 0 writes it.  Sharded, the ranks of the
	 * first replica write their rows (the others hold the same ones) and
	 * rank 0 commits the folder once all have. */
	int writes = r->rank < group;
	if (writes && (mkdir_p(base, err) != 0 || fluxckpt_save(dir, &s, &o, err) != 0))
		goto out;
	rc = 0;
out:
	if (r->fsdp != NULL && all_ok(r, &rc, err) == 0 && r->rank == 0 &&
	    fluxckpt_save_commit(dir, group, err) != 0)
		rc = -1;
	if (rc == 0 && r->rank == 0 && dcp_purge(base, (int)c->checkpoint.keep_latest_k, err) != 0)
		rc = -1;
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

/* checkpoint.exclude_from_loading as fluxckpt's flags: 0.3.0's state names
 * (the model may not be left out, as 0.3.0 refuses it). */
static int exclude_flags(const cfg_strlist *l, int *flags, titan_err *err)
{
	static const struct {
		const char *name;
		int flag;
	} parts[] = {{"optimizer", FLUXCKPT_OPTIMIZER}, {"dataloader", FLUXCKPT_DATALOADER},
		     {"train_state", FLUXCKPT_TRAIN_STATE}, {"lr_scheduler", FLUXCKPT_LR_SCHEDULER}};
	*flags = 0;
	for (int i = 0; i < l->n; i++) {
		size_t k = 0;
		while (k < sizeof parts / sizeof parts[0] && strcmp(parts[k].name, l->v[i]) != 0)
			k++;
		if (k == sizeof parts / sizeof parts[0])
			return err_set(err, "checkpoint.exclude_from_loading: '%s' is not a part the "
				       "Flux checkpoint loads (optimizer, lr_scheduler, dataloader, "
				       "train_state; the model always loads)", l->v[i]);
		*flags |= parts[k].flag;
	}
	return 0;
}

/* Resume from checkpoint.load_step (-1: the latest) under checkpoint.folder,
 * or start from checkpoint.initial_load_path's weights; *step the steps done.
 * model_only: the weights alone (--sample). */
int ft_load_ckpt(ft_run *r, int64_t *step, int model_only, titan_err *err)
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
		if (c->checkpoint.initial_load_in_hf && r->fsdp != NULL)
			return err_set(err, "checkpoint.initial_load_in_hf: HF weights load into a "
				       "whole model, and FSDP shards this one (dp_shard x cp = %d); "
				       "convert them first (titan-ckpt-convert from-hf) and give "
				       "the DCP folder as checkpoint.initial_load_path",
				       r->shard * r->cp);
		if (c->checkpoint.initial_load_in_hf)
			return fluxckpt_load_hf(init, r->m, FLUXCKPT_AUTO, err);
		fluxckpt_state s = {.model = r->m, .fsdp = r->fsdp};
		fluxckpt_loaded got;
		return fluxckpt_load(init, &s, 1, 0, &got, err);
	}
	int exclude = 0;
	if (exclude_flags(&c->checkpoint.exclude_from_loading, &exclude, err) != 0)
		return -1;
	snprintf(dir, sizeof dir, "%s/step-%lld", base, (long long)at);
	uint8_t mine[RANK_BYTES] = {0};
	char name[32];
	snprintf(name, sizeof name, "rank_%d", r->rank);
	fluxckpt_blob blobs[] = {{.name = name, .optional = 1}};
	fluxckpt_state s = {.model = r->m, .fsdp = r->fsdp, .opt = model_only ? NULL : r->opt,
			    .blobs = blobs, .nblobs = model_only ? 0 : 1};
	fluxckpt_loaded got;
	double t0 = progress_now();
	LOG0(r, "loading the checkpoint %s", dir);
	if (fluxckpt_load(dir, &s, model_only, exclude, &got, err) != 0)
		return err_prefix(err, "checkpoint %s", dir);
	int rc = 0;
	/* without lr_scheduler the schedule starts again from its warmup, as
	 * 0.3.0's fresh LambdaLR does; without train_state it goes on */
	r->sched_steps = (got.parts & FLUXCKPT_LR_SCHEDULER) ? s.last_epoch : 0;
	/* without train_state the run starts at step 1 from the loaded weights,
	 * its draws and loader fresh (titan's rank states are train_state's) */
	if (!got.model_only && !model_only && (got.parts & FLUXCKPT_TRAIN_STATE)) {
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
			rc = err_set(err, "checkpoint %s: saved by %lld ranks, this run has "
				     "%d (each rank's samples and draws would change)", dir,
				     (long long)s.dp_world, r->ranks);
		else if (!blobs[0].found || magic != LOADER_MAGIC)
			rc = err_set(err, "checkpoint %s: no train_state.%s (not titan's Flux "
				     "checkpoint): its random draws cannot go on", dir, name);
		if (rc == 0) {
			memcpy(&consumed, ld + 4, 8);
			memcpy(&skipped, ld + 12, 8);
			rc = torch_rng_set_state(&r->g, mine, TORCH_RNG_STATE_BYTES, err);
			if (!(exclude & FLUXCKPT_DATALOADER)) {
				if (rc == 0 && ft_loader_seek(&r->ld, consumed, err) != 0)
					rc = -1;
				r->ld.skipped = skipped;
			}
			*step = s.step;
		}
	}
	free(s.loader);
	if (rc == 0)
		LOG0(r, "Finished loading the checkpoint in %.2f seconds.", progress_now() - t0);
	return rc;
}
