/* plan_priv.h: the plan's state, shared by plan.c (building it: the TP
 * model, FSDP's shard layout, the optimizer, initialisation, checkpoint
 * boxes, memory), fsdp.c (the unit hooks: gather, free, reduce) and step.c
 * (the step: the runner, the loss, the grad norm, clipping, AdamW). */
#ifndef TITAN_PLAN_PRIV_H
#define TITAN_PLAN_PRIV_H

#include <time.h>

#include "comm/comm.h"
#include "plan/plan.h"

/* Where tensor i of the rank's model lives in the shard: dim 0 is cut into
 * FSDP chunks of cs rows; this rank holds rows r0 .. r0 + nr - 1 (nr may be
 * less than cs, or 0), stored as cs rows (the rest zeros) from shard_off. */
typedef struct plan_tensor {
	int64_t rows, cols;  /* the TP-local tensor as (dim 0, the rest) */
	int64_t cs, r0, nr;
	size_t shard_off;    /* in the rank's flat shard */
	size_t unit_off;     /* in its unit's slice of the model's flat layout */
	size_t chunk_off;    /* in its unit's shard: shard_off - unit's shard_off */
	int tp_replicated;   /* every tp rank holds it whole (norms) */
	int grp;             /* PLAN_DENSE or PLAN_EXPERT: the FSDP group it shards over */
	int f8;              /* float8 all-gather: 1 + its ordinal among the converted
	                        weights, 0 when not converted (f8.c) */
	size_t chunk_boff;   /* float8 all-gather: its chunk's byte offset in the unit's */
} plan_tensor;

/* FSDP's groups: a unit's tensors shard over the fsdp dimension, but under
 * expert parallelism its routed experts' tensors (the rank's experts) shard
 * over efsdp, the ranks that hold the same experts (torchtitan's
 * fully_shard of the experts on the dp_shard_mod_ep mesh).  Each group of a
 * unit is gathered and reduced by its own collectives, its chunks a block of
 * the unit's shard. */
enum { PLAN_DENSE, PLAN_EXPERT, PLAN_GROUPS };
typedef struct plan_shards {
	size_t shard_off, shard_numel; /* the group's block of the flat shard */
	void *send;                    /* (shard_numel) prec.param: the shard converted */
	void *gbuf;                    /* (N * shard_numel) prec.param (float8: N * f8_bytes) */
	comm_req *ag;                  /* the all-gather in flight */
	void *rsbuf;                   /* (N * shard_numel) reduce type */
	void *rsout;                   /* (shard_numel) reduce type */
	comm_req *rs, *ar;             /* reduce-scatter over the group, all-reduce over replicas */
} plan_shards;

/* A unit's storage and what is in flight for it.  A resident unit is bound to
 * the shard itself (one fsdp rank, parameters and gradients of the shard's
 * type): it is never gathered (its all-reduce over replicas is
 * g[PLAN_DENSE].ar).  The others gather each group into its gbuf (the group's
 * ranks x its shard, the all-gather's receive buffer; under FSDP's float8
 * all-gather the dense group's blocks are f8_bytes of packed codes) and copy
 * out into params (the model's layout);
 * their gradient goes the other way: grad (model layout), copied into each
 * group's rsbuf (FSDP's padded layout, in the reduce type), reduce-scattered
 * into its rsout. */
typedef struct plan_unit {
	int held;
	int resident;
	size_t numel;                  /* model layout */
	size_t shard_off, shard_numel; /* the unit's slice of the flat shard */
	plan_shards g[PLAN_GROUPS];
	void *params;                  /* (numel) prec.param, bound while gathered */
	int gathered;                  /* params hold the gathered weights */
	int kept;                      /* gathered for a pipeline stage: kept until reduced */
	void *grad;                    /* (numel) prec.grad, bound during backward */
	int queued;                    /* in the reduction queue */
	size_t f8_bytes;               /* float8 all-gather: the rank's bytes of the unit
	                                  (0: gathered in prec.param as above) */
	int f8_first, f8_n;            /* its converted weights' ordinals */
} plan_unit;

struct plan {
	plan_opts o;
	backend *be;
	mesh *mesh;
	model *m;          /* the rank's model (TP shapes), unbound */
	model *g;          /* the global table (no storage) */
	int n_units, head;
	model_prec prec;   /* the units' element types in force */
	/* sizes and this rank's index in the dimensions the plan uses */
	int fsdp, fsdp_rank;   /* dp_shard x cp */
	int rep, rep_rank;     /* dp_replicate */
	int tp, tp_rank;
	int ep, ep_rank;       /* expert parallelism (ep borrowed from dp_shard x cp) */
	int cp, cp_rank;
	comm *c_fsdp, *c_rep, *c_tp, *c_loss, *c_pp, *c_cp, *c_ep; /* the backend's memory */
	/* their host twins (mesh_host_comm: the same MPI communicators on the CPU,
	 * MPI beside NCCL on a GPU): the host's scalars, the token count, the loss
	 * sums, the grad norm's sum of squares, are born and used on the host */
	comm *h_fsdp, *h_tp, *h_loss, *h_pp;
	/* FSDP's groups (PLAN_DENSE: fsdp; PLAN_EXPERT: efsdp): size, index, comm */
	int gn[PLAN_GROUPS], gr[PLAN_GROUPS];
	comm *gc[PLAN_GROUPS];
	cp_layout cpl;     /* context parallelism: the training sequence's chunks */
	cp_attn *ring;     /* its ring attention (NULL: one cp rank) */
	int ddp;           /* replication alone: all-reduce the unit's gradient */
	plan_tensor *t;    /* (model's tensors) */
	plan_box *box;     /* (global tensors) */
	plan_unit *u;      /* (units) */
	size_t shard_numel;
	be_dtype mt;       /* the shards' element type (opts.master) */
	void *params, *grads; /* (shard_numel) of mt: masters and their gradients */
	adamw *opt;
	model_hooks hooks;
	plan_runner runner;
	model_mb *mb;      /* the default runner's context over the held units */
	int eval;          /* the hooks serve a forward only */
	int last_mb;       /* the runner is in the step's last micro-batch */
	size_t live_bytes, peak_bytes; /* unsharded buffers alive now / at most */
	int *queue, nq;    /* units whose reductions are in flight, oldest first */
	uint64_t op_t0;    /* when the running unit's compute began (profiler) */
	uint64_t unit_t0, busy_ns; /* the same, and the step's compute (plan_result.busy_s) */
	uint64_t wait_ns;  /* blocked in communication this step (plan_result.comm_s) */
	int broken;        /* a collective failed: its buffers stay (MPI may write them) */
	plan_pipe *pipe;   /* pipeline parallelism's engine (plan_set_pipeline) */
	/* FSDP's float8 all-gather (f8.c) */
	int f8_ready, f8_conv;  /* laid out; the number of converted weights (0: off) */
	float *f8_amax;         /* (f8_conv) their amax over the fsdp ranks */
	float *f8_scale;        /* (model's tensors) their scales */
	struct plan_graph *graph; /* compile.enable's whole step on the device (graph.c) */
	struct plan_muon *muon;   /* optimizer.param_groups' DistMuon matrices (muon.c) */
};

/* muon.c: the DistMuon groups' update (after AdamW's, with the step's lr). */
int plan_muon_step(plan *p, double lr, titan_err *e);
void plan_muon_free(plan *p);

/* fsdp.c: the unit hooks, and what finishes a step's reductions. */
int plan_hook_before(void *ctx, int u, int phase, titan_err *e);
int plan_hook_after(void *ctx, int u, int phase, titan_err *e);
/* Wait for every reduction in flight and add it into the shard's gradient. */
int plan_finish_reduce(plan *p, titan_err *e);
/* Free every unit's unsharded storage (after a step, an eval, a failure). */
void plan_release_all(plan *p);
/* Gather unit u now (blocking), bound; release it. */
int plan_gather_unit(plan *p, int u, titan_err *e);
void plan_release_unit(plan *p, int u);
/* Reduce unit u's gradient (started; finished by plan_finish_reduce). */
int plan_reduce_unit(plan *p, int u, titan_err *e);

/* pipe.c: the pipeline's engine freed; plan_eval through the stages (the
 * rank's loss: 0 off the last stage). */
void plan_pipeline_free(plan *p);
int plan_pipeline_eval(plan *p, const int32_t *inputs, const int32_t *labels,
		       const int32_t *positions, int b, int t,
		       double *loss_sum, int64_t *n_valid, titan_err *e);
/* f8.c: FSDP's float8 all-gather.  plan_f8_begin before a step or an eval
 * (the first time: the layout; with precompute: every amax all-reduced);
 * plan_f8_gather_bytes: a rank's bytes of unit u in the all-gather, 0 when the
 * unit goes in prec.param; plan_f8_pack casts them into send (the unit's amax
 * all-reduced first unless precomputed); fsdp.c's relayout decodes the
 * gathered chunks (at chunk_boff in blocks of f8_bytes). */
int plan_f8_begin(plan *p, titan_err *e);
size_t plan_f8_gather_bytes(const plan *p, int u);
int plan_f8_pack(plan *p, int u, void *send, titan_err *e);
void plan_f8_free(plan *p);
/* ep.c: the model's all-to-alls over ep. */
model_ep_group plan_ep_group(plan *p);

/* tp.c: the model's collectives over tp; the replicated tensors' gradients
 * all-reduced over tp. */
model_tp_group plan_tp_group(plan *p);
int plan_tp_reduce_replicated(plan *p, titan_err *e);

/* cp.c: context parallelism on the model: the positions of the rank's
 * chunks and ring attention for micro-batches of t tokens (plan_apply_cp:
 * the training length, kept; plan_cp_use: another, for an evaluation, until
 * plan_cp_restore). */
int plan_apply_cp(plan *p, titan_err *e);
int plan_cp_use(plan *p, int t, cp_attn **ring, titan_err *e);
int plan_cp_restore(plan *p, cp_attn *ring, titan_err *e);
/* The bytes of the training ring's buffers (0 without context parallelism). */
size_t plan_cp_bytes(const plan *p);
/* A micro-batch's documents (model_mb_set_positions): rows the whole rows'
 * positions (b, t x cp), the rank's share cut by the layout; NULL: none. */
int plan_mb_positions(plan *p, model_mb *mb, const int32_t *rows, int b, int t, titan_err *e);

/* step.c: the labels of n tokens that count (not MODEL_IGNORE_INDEX). */
int64_t plan_count_valid(const int32_t *labels, size_t n);
/* graph.c: plan_step when plan_set_graph turned it on; freed with the plan. */
int plan_graph_step(plan *p, const plan_batch *b, double lr, double max_norm, plan_result *r,
		    titan_err *e);
void plan_graph_free(plan *p);

/* Nanoseconds on the monotonic clock: what the rank waits on communication
 * is the time spent inside the blocking calls and waits. */
static inline uint64_t plan_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Copy n elements between element types (a copy when they agree). */
void plan_move(backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n);
/* Element i of a shard buffer of the plan's master type. */
static inline void *plan_shard_at(const plan *p, void *base, size_t i)
{
	return (char *)base + i * be_dtype_size(p->mt);
}
comm_dtype plan_comm_dtype(be_dtype t);

#endif
