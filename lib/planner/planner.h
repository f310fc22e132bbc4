/* planner.h: what a job will hold and send on each rank, before it runs
 * (titan-train --dry-run; torchtitan's memory_estimation.enable).
 *
 * The planner builds what the run builds from the config (the mesh degrees,
 * the pipeline split and schedule, the context-parallel layout, the model
 * with each rank's local shapes and the same precision and activation
 * checkpointing) and asks the same code for its figures: the model's
 * model_mb_bytes and model_scratch_bytes for activations, the schedule's
 * action lists for how many micro-batches each stage keeps alive at once and
 * which messages cross ranks, pp_simulate for the bubble.  Nothing is
 * allocated but the model's table of tensors, so a 405B model over 512 ranks
 * plans on a laptop.
 *
 * A ROLE is what one pipeline rank does (its stages); every rank of a role
 * holds the same bytes (the dp, cp and tp ranks are symmetric; FSDP's padded
 * last shard is counted on every rank).  Per role the planner gives:
 *   params     the rank's parameters in training.dtype: each tensor split by
 *              tensor parallelism along its tp_dim, then FSDP's dim-0 shard
 *              over dp_shard x cp, rows padded up as FSDP2 pads them
 *   grads      the same shapes, in training.dtype
 *   optimizer  AdamW's exp_avg and exp_avg_sq, the same shapes (bfloat16 under
 *              optimizer.implementation = "fused_opt_states_bf16")
 *   gathered   FSDP's unsharded copies in mixed_precision_param: the unit
 *              computing and the one prefetched, or every unit of the rank
 *              when nothing is resharded after forward (pipeline parallel, as
 *              torchtitan); and one unit's unsharded gradients in
 *              mixed_precision_reduce before its reduce-scatter
 *   activations the micro-batch contexts alive at the schedule's worst
 *              moment, each model_mb_bytes of its stage at (microbatch size,
 *              seq_len / cp) tokens, with the model's scratch
 *   comm       buffers of communication outside those: what the pipeline
 *              engine's messages add to the activations' peak, context
 *              parallel's gathered or passed keys and values and their float32
 *              gradients
 *   peak       the sum: all of the above can be alive at once (the first
 *              backward of the last micro-batch)
 * and the bytes it sends per step on each mesh dimension, in lib/comm's
 * counting (an all-gather sends (n-1) x its shard, a reduce-scatter (n-1) x
 * its result, a send its payload); with the Float8 converter, the part of
 * them that is Float8's own: the converted weights FSDP gathers as e4m3 (one
 * byte an element, enable_fsdp_float8_all_gather) and the casts' amax
 * all-reduces (FSDP's per gather or per step; under TP each cast's whose
 * scales run along the split dimension). */
#ifndef TITAN_PLANNER_H
#define TITAN_PLANNER_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/err.h"
#include "flux/flux.h"
#include "fluxae/fluxae.h"
#include "model/model.h"
#include "pp/pp.h"
#include "textenc/textenc.h"

/* The resolved degrees of torchtitan's mesh. */
typedef struct plan_degrees {
	int pp, dp_replicate, dp_shard, cp, tp;
	int ep; /* expert parallelism: the routed experts over ep of the fsdp x tp ranks */
} plan_degrees;

enum plan_term {
	PLAN_PARAMS,
	PLAN_GRADS,
	PLAN_OPTIMIZER,
	PLAN_GATHERED,
	PLAN_ACTIVATIONS,
	PLAN_COMM_BUFFERS,
	PLAN_TERM_COUNT
};

enum plan_dim { PLAN_DIM_PP, PLAN_DIM_DP_REPLICATE, PLAN_DIM_FSDP, PLAN_DIM_CP, PLAN_DIM_TP,
		PLAN_DIM_EP, PLAN_DIM_COUNT };

typedef struct plan_role {
	int pp_rank;
	int n_ranks;         /* ranks that play it */
	int n_stages;
	int stage[8];        /* its stages (the first 8) */
	int unit0[8], unit1[8];
	int live_mb;         /* the most micro-batch contexts alive at once */
	uint64_t bytes[PLAN_TERM_COUNT];
	uint64_t peak;
	uint64_t sent[PLAN_DIM_COUNT]; /* bytes sent per step on each dimension */
	uint64_t f8_sent[PLAN_DIM_COUNT]; /* of those, Float8's: weights gathered as e4m3,
	                                     the casts' amax all-reduces */
} plan_role;

typedef struct plan_report {
	char model[64];         /* "llama3 8B" */
	int64_t n_params;
	plan_degrees d;
	int world_size;
	int64_t local_batch, seq_len, microbatch, n_mb;
	char schedule[32];      /* "" without pipeline parallelism */
	double bubble;          /* unit-cost idle fraction of the schedule */
	char ac[32];            /* "selective op", "full", ... */
	char dtypes[64];        /* "params float32, compute bfloat16, reduce float32" */
	uint64_t device_bytes;
	int fits;               /* every role's peak within device_bytes */
	/* FLOPs per token of training at seq_len (titan-train's tflops and mfu,
	 * model_train_flops): the (query, key) pairs attention's masks leave,
	 * one document per row (a 0.3.0 run's documents leave fewer); and
	 * torchtitan's count (every query against seq_len keys).  A run doing
	 * the real work at the device's peak reads mfu 100 % in titan's count,
	 * 100 x flops_tt / flops % in torchtitan's. */
	double flops, flops_tt;
	/* The loss of one micro-batch's rows on one rank (microbatch x
	 * seq_len / cp rows, the rank's vocabulary under TP): titan's chunks of
	 * loss_rows rows of logits in the activations' type, gradient in place
	 * (model_loss_bytes, within the activations above); the same loss in one
	 * chunk (unchunked); torch's cross_entropy on float32 logits, which holds
	 * three of them at its peak (the logits, log_softmax's saved output and
	 * the gradient log_softmax's backward writes: 0.2.2's loss, whose train
	 * step drops the logits before the backward); and 0.3.0's
	 * ChunkedLossWrapper, four per chunk of loss_chunks_030 (loss.num_chunks,
	 * 8) along the sequence (the chunk's logits stay referenced through its
	 * backward).  scripts/bench/loss.sh measures all four: torch's plain
	 * loss within 0.3 % of this, 0.3.0's 7 to 16 % above (a lower bound). */
	int64_t loss_rows, loss_chunks_030;
	uint64_t loss_bytes, loss_whole, loss_torch, loss_torch_030;
	/* The Float8 converter (quantize.linear.float8): linears converted of
	 * all, its recipe, whether FSDP gathers them as float8. */
	int f8_converted, f8_linears, f8_gather;
	char f8_recipe[24];
	/* Float8 grouped experts (quantize.grouped_mm.float8): MoE layers
	 * converted (their casts add no traffic: the scales are each rank's
	 * own rows, its experts' whole weights). */
	int f8_moe_layers;
	int n_roles;
	plan_role *roles;       /* owned */
} plan_report;

/* Plan c on world_size ranks against device_bytes of memory per rank. */
int planner_run(const job_config *c, int world_size, uint64_t device_bytes, plan_report *r,
		titan_err *e);
void planner_report_free(plan_report *r);

/* The pipeline schedule the run would execute (NULL when
 * pipeline_parallel_degree is 1), for --print-schedule. */
int planner_schedule(const job_config *c, int world_size, pp_schedule **out, titan_err *e);

/* The most actions a pipeline schedule may hold (3 per stage and micro-batch
 * at most): a larger one is refused before it is built. */
#define PLANNER_MAX_ACTIONS ((int64_t)1 << 22)

/* The stage split and the schedule of pipeline_parallel_degree pp for a model
 * of n_layers, as the run builds them (torchtitan's split and messages, the
 * schedule built or read from pipeline_parallel_schedule_csv), and the
 * micro-batches of a schedule step (local_batch_size / microbatch_size).
 * The caller frees sp and *s. */
int planner_pipeline(const job_config *c, int pp, int n_layers, pp_split *sp, pp_schedule **s,
		     int *n_mb, titan_err *e);

/* The report for people, and as JSON (one object; keys in planner.c). */
int planner_print(const plan_report *r, FILE *f);
int planner_print_json(const plan_report *r, FILE *f, titan_err *e);

/* The model settings the config asks for, shared with the trainer so that a
 * plan and a run agree: activation checkpointing (mode and selective
 * option). */
int planner_ac_mode(const job_config *c, model_ac_mode *mode, int *every, titan_err *e);

/* Memory per rank when none is given: the first GPU's, else this machine's. */
uint64_t planner_local_memory(void);

/* Sizes with a binary unit suffix ("80GiB", "512MiB", "1.5TiB", bytes without
 * one); -1 with a message otherwise. */
int planner_parse_bytes(const char *s, uint64_t *out, titan_err *e);

/* ---- Flux (lib/planner/flux.c: what it counts and why)
 *
 * titan-train --dry-run for --module flux: the job's figures (from the
 * preset and its overrides) into a plan_flux_job, planner_flux_run, then
 * planner_flux_print. */
typedef struct plan_flux_job {
	const flux_config *model;  /* flux_flavor("flux-dev"), ... */
	int dp_shard;              /* FSDP's ranks (0.3.0's Flux: no TP, no PP) */
	int dp_replicate;          /* HSDP's replicas (memory as one of them) */
	int cp;                    /* context parallelism: tokens per rank / cp */
	int64_t local_batch, img_size, t5_len, clip_len;
	int ac_full;               /* activation_checkpoint full, else none */
	t5_config t5;              /* the frozen encoders' shapes */
	clip_config clip;
	flux_ae_config ae;
	uint64_t device_bytes;     /* 0: no bound */
} plan_flux_job;

typedef struct plan_flux_report {
	char model[64];
	plan_flux_job job;
	int64_t n_params, n_t5, n_clip, n_ae;
	int64_t img_tokens, txt_tokens;     /* per image */
	char dtypes[96];
	uint64_t bytes[PLAN_TERM_COUNT];    /* comm_buffers 0: FSDP's are in gathered */
	uint64_t encoders;                  /* the frozen models' weights on the rank */
	uint64_t peak;
	int fits;
} plan_flux_report;

/* flux_dev's job (local batch 32, 256 px, T5 512 tokens, CLIP 77, full
 * AC; one rank), with T5-XXL's, CLIP-L's and FLUX.1's autoencoder's shapes. */
void planner_flux_defaults(plan_flux_job *j, const flux_config *model);
int planner_flux_run(const plan_flux_job *j, plan_flux_report *r, titan_err *e);
int planner_flux_print(const plan_flux_report *r, FILE *f);

#endif
