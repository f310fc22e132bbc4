/* state.h (private to lib/trainer): the training state as a DCP state dict with
 * torchtitan's keys (see lib/dcp/dcp.h for the list): model, optimizer,
 * lr_scheduler, dataloader, train_state. */
#ifndef TITAN_TRAINER_STATE_H
#define TITAN_TRAINER_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/err.h"
#include "dcp/dcp.h"
#include "plan/plan.h"

/* Each rank saves and loads its own boxes of the tensors (plan_box_at): the
 * model and the optimizer's states as DCP chunks with global offsets, so
 * that any mesh loads any other's checkpoint. */
typedef struct tstate {
	plan *p;                /* the rank's shards: model and optimizer */
	int rank, world;        /* this rank among the job's writers (world rank) */
	int dp_rank;            /* writes dataloader.dp_rank_{dp_rank} when write_loader */
	int write_loader;
	double base_lr;         /* optimizer.lr */
	double cur_lr;          /* the lr of the next step, which torch's LambdaLR has
	                           set after the last step (lr_scheduler._last_lr) */
	int64_t step;           /* train_state.step */
	int64_t ntokens_seen;   /* train_state.ntokens_seen */
	uint8_t *loader;        /* dataloader.dp_rank_N bytes (owned when loaded: dp_rank_0's,
	                           the loader's state being the same on every rank) */
	size_t loader_len;
	int dp_world;           /* dataloader.world_size */
	int names_030;          /* save under torchtitan 0.3.0's names (dcp_name_030); a
	                           load reads either */
	int qkv_apart;          /* 0.3.0's model keeps q, k, v apart (no fused wqkv): their
	                           optimizer state is saved as their own */
} tstate;

/* Save to dir (step-N folder).  model_only: just the model, converted to
 * export_dtype (float32, bfloat16 or float16). */
typedef struct tstate_save_opts {
	int model_only;
	const char *export_dtype;
	int async;       /* checkpoint.async_mode != disabled */
} tstate_save_opts;

/* A save in flight (async) or done. */
typedef struct tstate_saver tstate_saver;

/* This rank's part: its boxes, and the values rank 0 alone writes (the
 * lr_scheduler, train_state, dataloader.world_size; a tensor's optimizer step
 * and param_groups by the rank of its first box). */
tstate_saver *tstate_save_begin(const char *dir, const tstate *s, const tstate_save_opts *o,
				titan_err *err);
/* Wait for this rank's writing and free the handle.  When every rank's has
 * returned (a barrier), rank 0 commits the folder with dcp_save_commit. */
int tstate_save_wait(tstate_saver *sv, titan_err *err);

/* What a load restored. */
typedef struct tstate_loaded {
	int had_train_state; /* 0: a model-only checkpoint */
	int optimizer, lr_scheduler, dataloader, train_state; /* parts restored */
	int64_t loader_world; /* dataloader.world_size (1 when absent) */
} tstate_loaded;

/* Load dir into s: every rank reads its own boxes, whatever chunks the
 * checkpoint holds.  model_only loads the model alone; exclude lists
 * top-level parts not to load ("optimizer", "lr_scheduler", "dataloader",
 * "train_state").  The model must match the checkpoint's global shapes.
 * With parts, rows of a stored chunk are read alone and left to be checked
 * with the other ranks' parts (dcp_load_parts); NULL checks every record. */
int tstate_load(const char *dir, tstate *s, int model_only, const cfg_strlist *exclude,
		dcp_parts *parts, tstate_loaded *got, titan_err *err);

/* Load the model's weights from a Hugging Face Llama folder (safetensors, as
 * torchtitan's checkpoint.initial_load_in_hf): every weight the model has must
 * be there with its shape. */
int tstate_load_hf(const char *dir, tstate *s, titan_err *err);
/* Save the model as Hugging Face safetensors in dir, as torchtitan's
 * checkpoint.last_save_in_hf: in export_dtype, files numbered as index_json
 * (the HF model's model.safetensors.index.json) numbers them, or one file. */
int tstate_save_hf(const char *dir, const tstate *s, const char *export_dtype,
		   const char *index_json, titan_err *err);

#endif
