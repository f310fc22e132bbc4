/* plan.h: the parallel plan, what each rank of a job holds and does in a
 * training step (DESIGN.md, "Parallel training").  It mirrors torchtitan
 * 0.2.2's parallelize_llama (models/llama3/infra/parallelize.py): one
 * function per parallelism, applied to the model's units in torchtitan's
 * order (tensor parallelism, then the pipeline's units, then data
 * parallelism: FSDP2 / HSDP, or replication alone), and the step of
 * train.py that drives them.  A world of one process is the plan with every
 * degree 1: the same code, whose collectives all have one rank.
 *
 * What a rank holds:
 *  - the model (unbound, model_create_unbound), with the shapes of its
 *    tensor-parallel rank (model_create_tp): wq wk wv w1 w3 and output split
 *    by rows (colwise), wo w2 by columns (rowwise), tok_embeddings by
 *    vocabulary rows, the norms whole;
 *  - for every unit it holds (all of them, or a pipeline rank's stages) the
 *    SHARD of each of the unit's tensors: FSDP2's chunk of dim 0 over the
 *    fsdp dimension (dp_shard x cp), ceil(rows / N) rows with the last
 *    ranks' rows padded with zeros (so any N works), as float32 master
 *    weights, their gradients and AdamW's exp_avg and exp_avg_sq, in one
 *    flat shard buffer (a unit's tensors after each other, each padded);
 *    with an fsdp dimension of one rank the shard is the whole (TP-local)
 *    tensor, laid out as the model's units are, and the units are bound to
 *    it directly.
 *
 * What a rank does in a step (plan_step), torchtitan's train_step:
 *  1. the valid labels of its micro-batches, all-reduced over the loss
 *     dimension (dp x cp; tp and pp ranks see the same labels): every
 *     token's loss is divided by this global count;
 *  2. the RUNNER runs the micro-batches (gradient accumulation) over the
 *     rank's units with the plan's hooks around every unit
 *     (plan_unit_hooks):
 *       before a unit's forward: its parameters gathered and bound (the
 *         all-gather was started before the previous unit ran: prefetch;
 *         in mixed_precision_param);
 *       after its forward: freed per fsdp_reshard_after_forward (default:
 *         every unit but the head, none under pipeline parallelism; always;
 *         never);
 *       before its backward: gathered again where freed, the unit before it
 *         prefetched, a zeroed unsharded gradient bound;
 *       after its backward: the gradient, in mixed_precision_reduce,
 *         reduce-scattered over the fsdp dimension into the shard's gradient
 *         (started now, finished while the next units run); under HSDP the
 *         reduced shard is then all-reduced over dp_replicate; replication
 *         alone (torchtitan's DDP: dp_replicate is the whole world)
 *         all-reduces each unit's gradient after the step's last
 *         micro-batch; the parameters are freed (FSDP2 reshards after
 *         backward);
 *     tensor parallelism's collectives run inside the units (the model's
 *     model_tp callbacks, over the tp dimension);
 *  3. the loss: the rank's summed cross-entropy all-reduced over the loss
 *     dimension, over the global count (torchtitan's global_avg_loss), and
 *     the largest rank's own average (global_max_loss);
 *  4. the global grad norm: each rank's sum of squares over its shards (a
 *     tensor that tp replicates counted by tp rank 0 alone), all-reduced over
 *     every rank of the same dp_replicate index (replicas hold the same
 *     shards); clipping by it scales the shards (clip_grad_norm_);
 *  5. AdamW on the shards.
 * The communication of each plan per step, in lib/comm's counting, is
 * written in titan-train(1) (COMMUNICATION) and held to by tests/plan.
 *
 * Pipeline parallelism (lib/pp) slots in as the runner (plan_set_runner):
 * its engine runs the rank's action list over the units of its stages (the
 * opts.hold units), calling the unit hooks as model_run_mb does, and
 * plan_stage_gather / plan_stage_reduce once a step per stage (its
 * pp_stage_hooks' first and last: torch's UNSHARD and REDUCE_GRAD).  With
 * opts.pp set nothing is resharded after forward by default and a unit's
 * gradient accumulates unsharded over the micro-batches until
 * plan_stage_reduce.
 *
 * Context parallelism (torchtitan's context_parallel over the cp dimension):
 * each sequence of seq_len tokens is cut into chunks (opts.cp_balance:
 * headtail, rank i holding chunks i and 2cp-1-i, or none), and a rank's
 * micro-batches hold its chunks (opts.t = seq_len / cp tokens; plan_cp_share
 * cuts them out of whole sequences).  The plan gives the model the tokens'
 * global positions (RoPE) and ring attention over the cp dimension
 * (lib/cp; opts.cp_rotate: allgather or alltoall).  Every other op works
 * token by token, so a rank's loss and gradients are its tokens' share:
 * FSDP's reduce-scatter over dp_shard x cp sums the cp ranks' gradients, and
 * the loss and its token count are all-reduced over dp x cp.  With tensor
 * parallelism the ring runs on each tp rank's heads, sequence parallelism
 * splitting the rank's tokens further.
 *
 * Checkpoints are each rank's boxes of the global tensors (plan_box): its TP
 * slice cut by its FSDP chunk, written as DCP chunks with global offsets and
 * read back from any checkpoint's chunking (lib/dcp). */
#ifndef TITAN_PLAN_H
#define TITAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "core/err.h"
#include "cp/cp.h"
#include "mesh/mesh.h"
#include "model/model.h"
#include "optim/optim.h"
#include "pp/pp.h"

typedef struct plan plan;
typedef struct plan_pipe plan_pipe;

/* parallelism.fsdp_reshard_after_forward. */
typedef enum plan_reshard {
	PLAN_RESHARD_DEFAULT, /* every unit but the head; none under pipeline parallelism */
	PLAN_RESHARD_ALWAYS,
	PLAN_RESHARD_NEVER,
} plan_reshard;

/* "default", "always", "never"; -1 with e set otherwise. */
int plan_reshard_parse(const char *name, plan_reshard *r, titan_err *e);

typedef struct plan_opts {
	backend *be;             /* used, not owned */
	mesh *mesh;              /* used, not owned; NULL: a world of one */
	const llama_args *args;  /* the flavor */
	int vocab_size;          /* > 0: replaces the flavor's (the tokenizer's) */
	int b, t;                /* a micro-batch: b sequences of t tokens (t: the
	                            rank's share under context parallelism) */
	model_ac_mode ac;        /* activation checkpointing */
	int ac_every;
	/* The units' element types: prec.param is what FSDP gathers
	 * (mixed_precision_param), prec.grad the unsharded gradients; the shards
	 * are float32.  All zero: float32. */
	model_prec prec;
	be_dtype reduce;         /* mixed_precision_reduce: gradients reduced in */
	be_dtype master;         /* the shards (master weights, their gradients,
	                            AdamW's states): float32 (0), or bf16 under
	                            training.dtype = "bfloat16" */
	plan_reshard reshard;
	int loss_parallel;       /* !disable_loss_parallel */
	int async_tp;            /* enable_async_tensor_parallel */
	adamw_config adamw;
	int no_decay_norms_embeddings; /* optimizer.no_decay_norms_embeddings */
	int pp;                  /* pipeline parallelism drives the units */
	const int8_t *hold;      /* (units) the units this rank holds; NULL: all */
	int layout_only;         /* the model's table and the shard layout, nothing
	                            allocated (the planner: plan_shard_numel,
	                            plan_memory_get); not for steps */
	/* context parallelism (a cp dimension of more than one rank): how the
	 * sequence of t x cp tokens is cut (context_parallel_load_balancer) and
	 * how keys and values go round (context_parallel_rotate_method) */
	cp_balance cp_balance;
	cp_rotate cp_rotate;
	int64_t cp_block;        /* ptrr's block (0: FlexAttention's CP_PTRR_BLOCK) */
	/* quantize.linear.float8's FSDP options (act under FSDP, with the model's
	 * Float8 converter set, tensorwise): the converted weights all-gathered as
	 * float8 codes with the whole weight's scale; their amax all-reduced with
	 * each gather, or once per step when precomputed. */
	int f8_all_gather;       /* enable_fsdp_float8_all_gather */
	int f8_precompute;       /* precompute_float8_dynamic_scale_for_fsdp */
	/* FSDP's and HSDP's gathers and reductions go through the communicators
	 * even over one rank (no unit resident), which otherwise are copies: the
	 * comm path of a world of one, as on one GPU under NCCL (titan-train's
	 * TITAN_COMM_ALWAYS).  Same numbers, more copies. */
	int comm_always;
} plan_opts;

/* Build the plan of this rank: the model with its TP shapes, the shards, the
 * optimizer.  Refuses (naming the numbers) what the mesh or the model cannot
 * do.  The weights are allocated, not initialised.  NULL on error. */
plan *plan_create(const plan_opts *o, titan_err *e);
void plan_free(plan *p);

/* torchtitan's init_weights (model_init's values, seed and depth_init): each
 * rank draws the elements of its own boxes. */
int plan_init_weights(plan *p, uint64_t seed, int depth_init, titan_err *e);

/* The model this rank computes with (TP shapes, unbound between steps), for
 * settings that are the model's: precision, context parallelism's positions
 * and attention.  Owned by the plan. */
model *plan_model(plan *p);
/* The model's tensors as a single process has them: global FQNs and shapes
 * (a table without storage).  Owned by the plan. */
const model *plan_global_model(const plan *p);
const mesh *plan_mesh(const plan *p);
/* The rank's index and the number of ranks in a mesh dimension (1 and 0
 * without a mesh). */
int plan_size(const plan *p, mesh_dim d);
int plan_coord(const plan *p, mesh_dim d);

/* ---- the step ---- */

/* A step's micro-batches for this rank: n_mb of (b, t) tokens each (the
 * plan's shape), host arrays (n_mb, b, t); labels equal to
 * MODEL_IGNORE_INDEX count for nothing. */
typedef struct plan_batch {
	const int32_t *inputs, *labels;
	const int32_t *positions; /* torchtitan 0.3.0's per-document positions, as
				     inputs, or NULL (model_mb_set_positions); under
				     context parallelism the whole rows' (n_mb, b,
				     t x cp): the plan cuts the rank's share */
	int n_mb;
} plan_batch;

typedef struct plan_result {
	double loss;      /* summed loss of every rank / global valid labels */
	double max_loss;  /* the largest of the ranks' own averages */
	double grad_norm; /* global L2 norm of the gradients, before clipping */
	int64_t n_valid;  /* global valid labels */
	double local_loss_sum; /* this rank's summed cross-entropy */
	int64_t local_valid;   /* this rank's valid labels */
	double step_s;    /* seconds the step took on this rank */
	double comm_s;    /* of which blocked in communication (waits, blocking
	                     collectives): the rest computes or copies */
	double run_s;     /* of which the runner ran the micro-batches (forward
	                     and backward) */
	double busy_s;    /* of which inside the units' compute (between the unit
	                     hooks): 1 - busy_s / run_s is a pipeline rank's bubble */
} plan_result;

/* One training step: forward and backward of every micro-batch (gradients
 * of loss / global valid labels), the gradients reduced, clipped to max_norm
 * by their global norm (max_norm <= 0: not clipped), AdamW with learning
 * rate lr.  Collective over the mesh. */
int plan_step(plan *p, const plan_batch *b, double lr, double max_norm, plan_result *r,
	      titan_err *e);

/* compile.enable's whole step on the device (torch.compile's CUDA graphs
 * under torchtitan's compile): with plan_set_graph on, plan_step queues the
 * step's work -- gradients zeroed, every micro-batch's forward and backward,
 * the grad norm (sumsq_dev), the clipping factor (clip_factor) and AdamW
 * (adamw_multi) -- without one wait for the device: the batch goes to fixed
 * backend buffers and the gradient scale, lr and bias corrections to backend
 * memory before it runs, and the loss, valid count and grad norm are read
 * after it.  On the CUDA backend the first such step runs as is (it sizes
 * the ops' scratch and the libraries' plans), the second is captured as a
 * CUDA graph, and every step from then replays it (captured again when the
 * number of micro-batches or the ops' scratch changes).  Other backends run
 * the same queued step every time, between the plan_capture callbacks when
 * set (a test's guard: nothing may wait for the backend in between).  The
 * results equal plan_step's: the same ops, with the clipping factor applied
 * inside AdamW (float32 gradients: bit for bit; bfloat16 gradients differ by
 * the rounding of the clipped gradient that the plain path stores).
 * plan_graph_refusal: NULL when the plan's step can run so, else why not
 * (one line); plan_set_graph(p, 1) refuses with that reason. */
const char *plan_graph_refusal(plan *p);
int plan_set_graph(plan *p, int on, titan_err *e);
typedef struct plan_capture {
	void *ctx;
	int (*begin)(void *ctx, titan_err *e);
	int (*end)(void *ctx, titan_err *e);
} plan_capture;
void plan_set_capture(plan *p, const plan_capture *c);
/* Steps replayed from a CUDA graph so far, and graphs captured; why a
 * capture failed (the steps then run queued, unrecorded), or NULL. */
int64_t plan_graph_replays(const plan *p);
int plan_graph_captures(const plan *p);
const char *plan_graph_failure(const plan *p);

/* Forward only (validation) of one micro-batch of (b, t) tokens (under
 * context parallelism the rank's share of sequences of t x cp, any length
 * the chunks divide): the summed loss and valid labels over the loss
 * dimension (every rank gets them); positions as plan_batch's (the whole
 * rows' under context parallelism).  Under a pipeline (plan_set_pipeline)
 * forward through the stages, the last stage's loss summed over pp. */
int plan_eval(plan *p, const int32_t *inputs, const int32_t *labels, const int32_t *positions,
	      int b, int t, double *loss_sum, int64_t *n_valid, titan_err *e);

/* This rank's share of rows sequences of seq_len tokens (host, (rows,
 * seq_len) into (rows, seq_len / cp)): its context-parallel chunks, the
 * whole sequences without context parallelism.  Refuses a seq_len the
 * chunks do not divide.  positions: the rows' per-document positions (rows,
 * seq_len) or NULL; the ptrr balancer deals each row's chunks by them. */
int plan_cp_share(const plan *p, const int32_t *full, int32_t *local, int64_t rows,
		  int64_t seq_len, const int32_t *positions, titan_err *e);

/* What runs a step's micro-batches over the rank's units; the default runs
 * them one after another over every unit (model_run_mb with the unit hooks).
 * run gets the step's batch and each loss's scale (1 / global valid labels)
 * and returns the rank's summed loss and valid labels (0 where the rank
 * holds no head). */
typedef struct plan_runner {
	void *ctx;
	int (*run)(void *ctx, plan *p, const plan_batch *b, float grad_scale,
		   const model_hooks *hooks, double *loss_sum, int64_t *n_valid, titan_err *e);
} plan_runner;
/* NULL restores the default. */
void plan_set_runner(plan *p, const plan_runner *r);
/* The hooks the runner calls around every unit. */
const model_hooks *plan_unit_hooks(plan *p);
/* Pipeline parallelism: before a stage's first action, gather its units
 * u0..u1 and keep them; after its last backward, reduce their gradients. */
int plan_stage_gather(plan *p, int u0, int u1, titan_err *e);
int plan_stage_reduce(plan *p, int u0, int u1, titan_err *e);

/* The units pipeline rank r holds under split sp (its stages' units): what
 * opts.hold takes (n_units entries). */
void plan_pipeline_hold(const pp_split *sp, int r, int n_units, int8_t *hold);
/* Drive the steps by lib/pp's engine: this rank's action list (its
 * coordinate in the pp dimension) of schedule s over the stages of split sp
 * (checked against the plan's held units, and every pipeline rank's schedule
 * against the others': pp_schedule_agree), the stage hooks gathering and
 * reducing each stage once per round.  A step's n_mb must be a multiple of
 * the schedule's (the rest is gradient accumulation).  The loss is summed
 * over pp as well (only the last stage has one), and the grad norm's sum of
 * squares.  sp and s are the caller's and must outlive the plan.  Collective
 * over pp. */
int plan_set_pipeline(plan *p, const pp_split *sp, const pp_schedule *s, titan_err *e);

/* ---- checkpoints ---- */

/* This rank's part of global tensor i (plan_global_model's table): a box of
 * the global tensor, the rank's TP slice cut by its FSDP chunk.  Its elements
 * are contiguous, row-major, in the shard buffers from shard_off.  numel 0:
 * the rank holds none of it (FSDP's last ranks of a short tensor, a unit of
 * another pipeline rank).  owner: this rank writes it to a checkpoint (a
 * replica along dp_replicate, or a tp rank but the first of a tensor tp
 * replicates, holds the same box and leaves it). */
typedef struct plan_box {
	int ndim;
	int64_t offsets[3], sizes[3];
	size_t numel;
	size_t shard_off;
	int owner;
} plan_box;
const plan_box *plan_box_at(const plan *p, int i);
/* Copy this rank's box of global tensor i out of the whole tensor (host,
 * row-major, float32) into shard + its shard_off (a host image of the
 * shard buffer); nothing when the rank holds none of it. */
void plan_box_extract(const plan *p, int i, const float *whole, float *shard);

/* The rank's shard buffers, in backend memory: master weights and their
 * gradients (plan_shard_numel elements each, of plan_shard_dtype: float32,
 * or bf16 under opts.master); the optimizer's states are laid out the same
 * (adamw_exp_avg / adamw_exp_avg_sq, of the same type). */
size_t plan_shard_numel(const plan *p);
be_dtype plan_shard_dtype(const plan *p);
void *plan_shard_params(plan *p);
void *plan_shard_grads(plan *p);
adamw *plan_optimizer(plan *p);
/* optimizer.param_groups: tensor i of the global model (plan_global_model)
 * in groups[group_of[i]] (-1: the optimizer's default, or frozen), before
 * the first step.  A DistMuon group's tensors are orthogonalised as
 * matrices: tensor i with every later j of matrix_of[j] == i stacked under
 * it by rows (0.3.0's fused wqkv: wq, wk, wv one matrix), matrix_of[i] == i
 * for a tensor that starts one.  Refused: Muon on a vector, on bf16 masters,
 * on experts under expert parallelism. */
int plan_set_param_groups(plan *p, const optim_group *groups, const int *group_of,
			  const int *matrix_of, titan_err *e);
/* A shard buffer (plan_shard_params, _grads, the optimizer's states) to and
 * from a host float32 image of it (plan_shard_numel floats; bf16 rounds to
 * nearest even going up, widens exactly coming down). */
int plan_shard_upload(plan *p, void *dev, const float *host, titan_err *e);
int plan_shard_download(plan *p, float *host, const void *dev, titan_err *e);
/* The same for a buffer of n elements of type t (the optimizer's states:
 * bf16 under fused_opt_states_bf16; exp_avg_sq without Muon's parameters). */
int plan_shard_upload_n(plan *p, void *dev, be_dtype t, const float *host, size_t n,
			titan_err *e);
int plan_shard_download_n(plan *p, float *host, const void *dev, be_dtype t, size_t n,
			  titan_err *e);
/* The master weights changed behind the plan's back (a checkpoint load):
 * autocast's cast copies are dropped. */
void plan_weights_changed(plan *p);

/* ---- what it costs ---- */

/* Bytes this rank holds for the model: its shards (params, grads, the
 * optimizer's two states), the unsharded copies alive at once at most
 * (gathered parameters and unreduced gradients, with what is prefetched and
 * in flight), a micro-batch's activations and, under context parallelism,
 * ring attention's key, value and gradient buffers. */
typedef struct plan_memory {
	size_t params, grads, optimizer;
	size_t gathered;
	size_t activations;
	size_t ring;      /* context parallelism: ring attention's buffers */
} plan_memory;
void plan_memory_get(const plan *p, plan_memory *m);

/* Log lines saying what was applied (torchtitan's "Applied FSDP to the
 * model", the shard sizes) and the per-rank memory breakdown. */
void plan_describe(const plan *p, FILE *log);

#endif
