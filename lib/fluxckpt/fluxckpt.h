/* fluxckpt.h: the Flux transformer's training state on disk, as torchtitan
 * 0.3.0's CheckpointManager writes it for FluxTrainer, and FLUX.1's
 * transformer weights in Hugging Face's two layouts.
 *
 * A checkpoint is a DCP folder (lib/dcp) with these keys (titan-formats(5)):
 *   {fqn}                                   the model's tensors under 0.3.0's
 *                                           state-dict names (flux.h), float32
 *                                           (a model-only save: export_dtype)
 *   optimizer.state.{fqn}.exp_avg           AdamW's, the parameter's shape, in
 *   optimizer.state.{fqn}.exp_avg_sq        the optimizer's state type (float32,
 *                                           bfloat16 under bf16 states)
 *   optimizer.state.{fqn}.step              float32 scalar
 *   optimizer.param_groups.{fqn}.{lr, ...}  torch's AdamW group, each parameter
 *                                           its own (flatten_optimizer_state_dict;
 *                                           dcp_adamw_group_keys)
 *   lr_scheduler.last_epoch                 int: the schedule's steps (the step
 *                                           unless a resume left one of the two
 *                                           out; 0.3.0's container saves
 *                                           nothing else)
 *   dataloader.dp_rank_0                    bytes: the data loader's state as the
 *                                           trainer gives it
 *   dataloader.world_size                   int
 *   train_state.step, train_state.ntokens_seen   int
 *   train_state.{name}                      bytes: titan's own extras (the noise
 *                                           generator's state, ...): 0.3.0's
 *                                           Trainer.load_state_dict reads step
 *                                           and ntokens_seen alone, and DCP
 *                                           loads only the keys asked for, so
 *                                           0.3.0 resumes titan's checkpoint
 * A model-only checkpoint (checkpoint.last_save_model_only, the step-0 seed
 * checkpoint) holds the model's keys alone.
 *
 * Saving is lib/dcp's: the folder is written as DIR.partial, fsynced, its
 * .metadata renamed into place, the folder renamed to DIR.  Loading is
 * strict: a key the state asks for that the checkpoint lacks, or holds with
 * another shape or kind, is an error naming it (one line); so is an
 * optimizer step that differs between parameters.
 *
 * A sharded model (lib/fluxfsdp) saves and loads each rank's rows of every
 * tensor as DCP chunks at their row offsets: the ranks write one folder
 * together (fluxckpt_save_commit once all have written), and a load reads
 * this rank's rows from whatever chunking the checkpoint has (a whole
 * model's, another number of ranks'). */
#ifndef TITAN_FLUXCKPT_H
#define TITAN_FLUXCKPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "dcp/dcp.h"
#include "flux/flux.h"
#include "fluxfsdp/fluxfsdp.h"
#include "optim/optim.h"

/* A named byte string the trainer keeps beside the state, stored as
 * train_state.{name} (a Python bytes value).  Saving reads p; loading fills
 * p with a malloc'd copy (the caller frees it; what p held is not freed:
 * pass NULL) and sets found, and a blob absent from the checkpoint is an
 * error unless optional. */
typedef struct fluxckpt_blob {
	const char *name;   /* [A-Za-z0-9_]+, not "step" or "ntokens_seen" */
	uint8_t *p;
	size_t n;
	int optional;       /* load */
	int found;          /* load */
} fluxckpt_blob;

/* What a save writes and a load fills.  The optimizer is lib/optim's AdamW
 * over the model's parameters as one flat run in flux_param order
 * (adamw_create(be, flux_model_numel(model), ...), adamw_step(o,
 * flux_model_weights(model), flux_model_grads(model), lr)): parameter i's
 * exp_avg and exp_avg_sq are at its offset in that run (fluxckpt_offset). */
typedef struct fluxckpt_state {
	flux_model *model;      /* its weights are saved and loaded (not its gradients) */
	/* Not NULL: the model is unbound and sharded; this rank's rows of its
	 * flat shard are saved and loaded (and the optimizer runs over the
	 * shard).  The rank writes its chunks as DCP rank `rank` of `world`;
	 * rank 0 alone the scalars, groups and train_state. */
	fluxfsdp *fsdp;
	int rank, world;
	adamw *opt;             /* NULL: the model alone */
	double base_lr;         /* the configured lr: param_groups' initial_lr */
	double cur_lr;          /* the next step's lr (the schedule's factor after
	                           last_epoch steps times base_lr): param_groups' lr */
	int64_t step;           /* train_state.step */
	int64_t last_epoch;     /* lr_scheduler.last_epoch */
	int64_t ntokens_seen;   /* train_state.ntokens_seen */
	uint8_t *loader;        /* dataloader.dp_rank_0; NULL: none saved.  A load
	                           that restores the loader frees what was here and
	                           leaves a malloc'd copy (the caller frees it) */
	size_t loader_len;
	int64_t dp_world;       /* dataloader.world_size (1 when 0) */
	fluxckpt_blob *blobs;   /* titan's extras, nblobs of them */
	int nblobs;
} fluxckpt_state;

/* Parameter i's offset in the model's flat run. */
int64_t fluxckpt_offset(const flux_model *m, int i);

typedef struct fluxckpt_save_opts {
	int model_only;          /* the model's keys alone */
	dcp_dtype export_dtype;  /* model_only: the tensors' type (PTZ_F32, PTZ_BF16,
	                            PTZ_F16); PTZ_NONE is float32 */
	int async;               /* write on a background thread (checkpoint.async_mode) */
	int no_fsync;            /* tests */
} fluxckpt_save_opts;

/* Write s as the checkpoint folder dir (a step-N folder); o may be NULL.
 * A sharded state (s->fsdp) writes this rank's part only: every rank saves,
 * then rank 0 calls fluxckpt_save_commit. */
int fluxckpt_save(const char *dir, const fluxckpt_state *s, const fluxckpt_save_opts *o,
		  titan_err *err);
/* The same in two halves: begin copies the state to host images (the
 * model and optimizer may change as soon as it returns) and starts writing
 * (on a background thread with o->async); wait finishes, commits the folder
 * (.metadata, the rename) and frees the handle. */
typedef struct fluxckpt_saver fluxckpt_saver;
fluxckpt_saver *fluxckpt_save_begin(const char *dir, const fluxckpt_state *s,
				    const fluxckpt_save_opts *o, titan_err *err);
int fluxckpt_save_wait(fluxckpt_saver *sv, titan_err *err);
/* A sharded save's end, on rank 0 once every rank's save returned 0:
 * .metadata over the world's chunks, the folder renamed into place. */
int fluxckpt_save_commit(const char *dir, int world, titan_err *err);

/* The parts checkpoint.exclude_from_loading may name, as flags. */
enum {
	FLUXCKPT_OPTIMIZER = 1,
	FLUXCKPT_LR_SCHEDULER = 2,
	FLUXCKPT_DATALOADER = 4,
	FLUXCKPT_TRAIN_STATE = 8,
};

/* What a load restored. */
typedef struct fluxckpt_loaded {
	int model_only;         /* the checkpoint held no train_state (a seed or a
	                           model-only save): only the model was loaded */
	int parts;              /* FLUXCKPT_* flags of the parts restored */
} fluxckpt_loaded;

/* Load dir into s (a failed load leaves s as it was, the blobs' p NULL,
 * and the model and optimizer as they were unless their upload itself
 * failed): the model's weights always; unless model_only, and when
 * the checkpoint has a train_state, the optimizer (into s->opt, when not
 * NULL), step and ntokens_seen, the loader and the blobs, leaving out the
 * parts named in exclude (FLUXCKPT_* flags).  A checkpoint without
 * train_state is a model-only one: the model loads and got->model_only says
 * so.  The model's shapes must be the checkpoint's. */
int fluxckpt_load(const char *dir, fluxckpt_state *s, int model_only, int exclude,
		  fluxckpt_loaded *got, titan_err *err);

/* Hugging Face's FLUX.1 transformer weights ------------------------------- */

/* FLUXCKPT_DIFFUSERS: diffusers' FluxTransformer2DModel, as 0.3.0's
 * FluxStateDictAdapter maps it (to_hf / from_hf): q, k and v (and a single
 * block's MLP input) split out of the fused qkv / linear1, the final layer's
 * (shift, scale) halves swapped to (scale, shift), the rest renamed; a
 * folder of diffusion_pytorch_model*.safetensors (and its index when
 * sharded) with diffusers' config.json.
 * FLUXCKPT_BFL: Black Forest Labs' single file (flux1-dev.safetensors,
 * flux1-schnell.safetensors): 0.3.0's own names and layout, the QK norms'
 * weights named .scale.
 * FLUX.1-dev's guidance embedder (BFL's guidance_in.*, diffusers'
 * time_text_embed.guidance_embedder.*) has no place in 0.3.0's FluxModel
 * (0.3.0's adapter skips it without a word): an import leaves it out and
 * says so on stderr.  Any other unknown weight is refused. */
enum { FLUXCKPT_AUTO = 0, FLUXCKPT_DIFFUSERS = 1, FLUXCKPT_BFL = 2 };

/* The format of an HF source's keys (a folder or .safetensors file):
 * FLUXCKPT_DIFFUSERS, FLUXCKPT_BFL, or -1 and err when neither. */
int fluxckpt_hf_format(const char *path, titan_err *err);

/* Called with each HF tensor of an export, in 0.3.0's to_hf order; data is
 * borrowed for the call. */
typedef int (*fluxckpt_hf_fn)(void *ctx, const char *name, dcp_dtype dtype, int ndim,
			      const int64_t *shape, const void *data, titan_err *err);
/* One tensor of 0.3.0's state dict (name, shape, data of dtype) as the
 * format's tensors, handed to fn.  c is the model's config (hidden size and
 * MLP ratio split the fused tensors). */
int fluxckpt_hf_export(const flux_config *c, int format, const char *name, dcp_dtype dtype,
		       int ndim, const int64_t *shape, const void *data, fluxckpt_hf_fn fn,
		       void *ctx, titan_err *err);

/* SRC's model tensors (any checkpoint source lib/dcp reads: a DCP folder, a
 * torch.save file, safetensors) as FORMAT at OUT: diffusers' folder, or
 * BFL's single file (OUT ends in .safetensors).  Every tensor of config c's
 * model must be there with its shape; export_dtype casts (PTZ_NONE keeps). */
int fluxckpt_to_hf(const char *src, const char *out, const flux_config *c, int format,
		   dcp_dtype export_dtype, uint64_t max_shard, titan_err *err);

/* Called with each weight of an import under 0.3.0's name; data is malloc'd
 * and belongs to the callee (dcp_collect_tensor collects them). */
typedef dcp_hf_tensor_fn fluxckpt_tt_fn;
/* Read an HF source (FORMAT, or FLUXCKPT_AUTO from its keys; a diffusers
 * pipeline folder's transformer/ is taken) as 0.3.0's tensors for config
 * c's model, checked: every weight present once with its shape, nothing
 * unknown (the guidance embedder aside), floating-point types only; in dtype
 * (PTZ_NONE: as stored).  Messages start with path. */
int fluxckpt_hf_read(const char *path, const flux_config *c, int format, dcp_dtype dtype,
		     fluxckpt_tt_fn fn, void *ctx, titan_err *err);
/* The model's sizes from PATH's tensors (a checkpoint under 0.3.0's names,
 * or an HF source in FORMAT or FLUXCKPT_AUTO): everything a conversion
 * needs (hidden size, heads from the QK norm's width, MLP ratio, blocks,
 * channels).  The RoPE axes are no weight's: axes_dim is (head dim, 0, 0)
 * and theta 10000, which a conversion never reads. */
int fluxckpt_infer_config(const char *path, int format, flux_config *c, titan_err *err);
/* The same into a model-only DCP folder OUT. */
int fluxckpt_from_hf(const char *path, const char *out, const flux_config *c, int format,
		     dcp_dtype dtype, titan_err *err);

/* The trainer's HF paths (checkpoint.initial_load_in_hf, last_save_in_hf).
 * fluxckpt_load_hf: the model's weights from an HF source (FORMAT or
 * FLUXCKPT_AUTO; checked as fluxckpt_hf_read checks them).
 * fluxckpt_save_hf: the model under diffusers' names in export_dtype
 * (PTZ_NONE: float32) as 0.3.0's last_save_in_hf writes it (torch's
 * HuggingFaceStorageWriter): DIR/model-0000K-of-0000M.safetensors numbered
 * as index_json's weight_map numbers them (hf_assets_path's
 * diffusion_pytorch_model.safetensors.index.json, 0.3.0's
 * fqn_to_index_mapping) or one file when NULL, and
 * DIR/model.safetensors.index.json; no config.json; written as DIR.partial
 * and renamed (dcp_hf_write). */
int fluxckpt_load_hf(const char *path, flux_model *m, int format, titan_err *err);
int fluxckpt_save_hf(const char *dir, const flux_model *m, dcp_dtype export_dtype,
		     const char *index_json, titan_err *err);

#endif
