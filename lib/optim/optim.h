/* optim.h: AdamW, gradient clipping and the LR schedule, as torchtitan's
 * components/optimizer.py and lr_scheduler.py (v0.2.2) use them.
 *
 * The optimizer's states are flat buffers parallel to the model's parameters
 * (same length, same offsets, same element type), so a tensor view (fqn,
 * offset, numel) of the model is also the view of its exp_avg and exp_avg_sq,
 * and FSDP shards them by the same ranges.  The element type is float32
 * (master weights), or bfloat16 under training.dtype = "bfloat16", where torch
 * keeps the states in the parameters' dtype (zeros_like(param)) and its fused
 * AdamW computes in float32 and rounds each state back. */
#ifndef TITAN_OPTIM_H
#define TITAN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef struct adamw_config {
	double lr;           /* 8e-4 */
	double beta1, beta2; /* 0.9, 0.95 */
	double eps;          /* 1e-8 */
	double weight_decay; /* 0.1, applied to every parameter by default */
	be_dtype dtype;      /* of parameters, gradients and states: BE_F32 (default) or BE_BF16 */
	int bf16_states;     /* exp_avg and exp_avg_sq in bfloat16 beside float32 parameters
				(torchtitan 0.3.0's optimizer.implementation =
				"fused_opt_states_bf16": backend.h's adamw_bf16_states) */
} adamw_config;

void adamw_config_default(adamw_config *c);

typedef struct adamw adamw;

/* States for n parameters of c->dtype, zeroed, in be's memory; step 0.  NULL on
 * error. */
adamw *adamw_create(backend *be, size_t n, const adamw_config *c, titan_err *e);
void adamw_free(adamw *o);

/* Exempt [offset, offset + numel) from weight decay (norms and embeddings when
 * the trainer asks; torchtitan decays everything). */
int adamw_no_decay(adamw *o, size_t offset, size_t numel, titan_err *e);

/* A group of parameters with hyper-parameters of its own (torchtitan 0.3.0's
 * optimizer.param_groups).  OPTIM_ADAMW: torch's AdamW with these lr, betas,
 * eps and decoupled weight decay (torch's Adam without weight decay is the
 * same update).  OPTIM_MUON: DistMuon's (momentum, Newton-Schulz, its lr
 * rule: lib/optim/muon.h); adamw_step leaves such a range alone (the plan's
 * step updates it with the whole matrix at hand) and its exp_avg is Muon's
 * momentum_buffer. */
typedef enum optim_kind { OPTIM_ADAMW, OPTIM_MUON } optim_kind;
typedef enum muon_adjust {
	MUON_ADJUST_ORIGINAL,      /* None / "original": sqrt(max(1, rows / cols)) */
	MUON_ADJUST_MATCH_RMS,     /* "match_rms_adamw": 0.2 sqrt(max(rows, cols)) */
	MUON_ADJUST_SPECTRAL,      /* "spectral_unclamped": sqrt(rows / cols) */
} muon_adjust;
typedef struct optim_group {
	optim_kind kind;
	double lr, beta1, beta2, eps, weight_decay;
	int adam;                  /* torch's Adam (its checkpoint's decoupled_weight_decay
				      False; weight decay 0 only) */
	double momentum;           /* Muon's */
	int nesterov;
	double ns[3];              /* Newton-Schulz's a, b, c */
	int ns_steps;
	muon_adjust adjust;
} optim_group;
/* [offset, offset + numel) in group g (copied); ranges may not overlap. */
int adamw_set_group(adamw *o, size_t offset, size_t numel, const optim_group *g, titan_err *e);
/* The group of the parameter at offset: its own, or the config's (an
 * OPTIM_ADAMW group of adamw_config's values); NULL when frozen. */
const optim_group *adamw_group_of(const adamw *o, size_t offset);
/* Whether some range has hyper-parameters other than the config's but its
 * weight decay, or is Muon's (the fused adamw_multi carries one lr, betas
 * and eps per step). */
int adamw_has_groups(const adamw *o);
/* torchtitan 0.3.0's _build_param_groups: group_of[i] = the first of the np
 * patterns (Python regular expressions, run by PCRE2, whose syntax is a
 * superset for these) that re.search-matches names[i]; a NULL name (a frozen
 * parameter: 0.3.0 groups only those with requires_grad) gets -1.  Refused
 * as 0.3.0 refuses it: a pattern that matches no parameter, a parameter in
 * no group. */
int optim_assign_groups(const char *const *patterns, int np, const char *const *names, int nn,
			int *group_of, titan_err *e);
/* Freeze [offset, offset + numel): never updated, no weight decay, its
 * states stay 0 (LoRA's frozen base weights, which torch's optimizer never
 * holds). */
int adamw_freeze(adamw *o, size_t offset, size_t numel, titan_err *e);

/* One update of every parameter with learning rate lr (the schedule's factor
 * times the configured lr; a group's lr is its own times that factor, as
 * torch's LambdaLR scales every group's initial lr); increments the step
 * first, like torch.  params and grads are (n) of the optimizer's dtype. */
void adamw_step(adamw *o, void *params, const void *grads, double lr);

/* The same update as the fused ops see it (adamw_multi over the spans, the
 * step's values in backend memory: a step recorded as a CUDA graph).
 * adamw_spans: the runs of parameters that share a weight decay, in order,
 * as adamw_step updates them; *n of them, a malloc'd array (NULL with e).
 * adamw_next_step: increments the step as adamw_step does and fills st's
 * lr, betas, eps and bias corrections for it (clip 1, norm 0: clip_factor
 * writes those). */
be_span *adamw_spans(const adamw *o, int *n, titan_err *e);
void adamw_next_step(adamw *o, double lr, be_adamw_step *st);

void *adamw_exp_avg(adamw *o);    /* (n) of adamw_state_dtype, in backend memory */
void *adamw_exp_avg_sq(adamw *o); /* (adamw_exp_avg_sq_numel) */
/* Muon keeps no exp_avg_sq (its momentum_buffer is exp_avg): once the
 * groups are set, adamw_drop_muon_states shrinks exp_avg_sq to the other
 * parameters (zeroed: before the first step), the parameter at offset's
 * element then at adamw_exp_avg_sq_index (offset itself without Muon). */
int adamw_drop_muon_states(adamw *o, titan_err *e);
size_t adamw_exp_avg_sq_numel(const adamw *o);
size_t adamw_exp_avg_sq_index(const adamw *o, size_t offset);
/* The bytes of the states held: exp_avg and exp_avg_sq. */
size_t adamw_state_bytes(const adamw *o);
be_dtype adamw_dtype(const adamw *o);       /* the parameters' and gradients' */
be_dtype adamw_state_dtype(const adamw *o); /* exp_avg's and exp_avg_sq's */
int64_t adamw_get_step(const adamw *o);
void adamw_set_step(adamw *o, int64_t step); /* when a checkpoint is loaded */
/* A group's lr at a step whose configured lr is lr (the schedule's factor
 * times adamw_config.lr). */
double adamw_group_lr(const adamw *o, const optim_group *g, double lr);
const adamw_config *adamw_get_config(const adamw *o);

/* Gradient clipping by global L2 norm, torch.nn.utils.clip_grad_norm_:
 * coef = max_norm / (norm + 1e-6), clamped to 1, grads *= coef.
 * grad_sumsq gives a rank's partial (the sharded case sums the partials across
 * ranks, then calls grad_clip_scale with the global norm). */
double grad_sumsq(backend *be, const float *g, size_t n);
void grad_clip_scale(backend *be, float *g, size_t n, double total_norm,
		     double max_norm);
/* Both on one rank; returns the norm before clipping.  max_norm <= 0: no clip. */
double grad_clip_norm(backend *be, float *g, size_t n, double max_norm);
/* The same for gradients of element type t (bfloat16 under training.dtype =
 * "bfloat16": the sum of squares still runs in double). */
double grad_sumsq_typed(backend *be, const void *g, be_dtype t, size_t n);
void grad_clip_scale_typed(backend *be, void *g, be_dtype t, size_t n, double total_norm,
			   double max_norm);
double grad_clip_norm_typed(backend *be, void *g, be_dtype t, size_t n, double max_norm);

/* torchtitan's linear_warmup_stable_decay. */
typedef enum lr_decay_type {
	LR_DECAY_LINEAR,
	LR_DECAY_SQRT,
	LR_DECAY_COSINE,
} lr_decay_type;

typedef struct lr_schedule {
	int64_t warmup_steps, stable_steps, decay_steps;
	lr_decay_type decay_type;
	double min_lr_factor;
} lr_schedule;

/* training_steps total; decay_ratio < 0 means none (decay over every step after
 * warmup).  warmup > steps is clamped (torchtitan warns).  The stable phase gets
 * torchtitan's virtual last step (+1) so the lr never reaches 0.  decay_type is
 * "linear", "sqrt" or "cosine". */
int lr_schedule_init(lr_schedule *s, int64_t training_steps, int64_t warmup_steps,
		     double decay_ratio, const char *decay_type,
		     double min_lr_factor, titan_err *e);
/* The lr multiplier for the step with 0-based index i (LambdaLR's last_epoch:
 * training step 1 uses i = 0). */
double lr_schedule_factor(const lr_schedule *s, int64_t i);

#endif
