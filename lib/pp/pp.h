/* pp.h: pipeline parallelism as torchtitan 0.2.2 does it
 * (torchtitan/distributed/pipeline_parallel.py over
 * torch.distributed.pipelining): the STAGE SPLIT (which of the model's units
 * each stage holds, which pipeline rank holds each stage) and the SCHEDULE as
 * data.
 *
 * A schedule is, per pipeline rank, the list of compute actions that rank
 * runs in order: F (forward), B (full backward), I (backward of the inputs
 * only) and W (the deferred weight gradients) of one stage on one
 * micro-batch; the zero-bubble schedules split B into I and W.  Generators
 * follow torch's schedule classes (the order torch executes, checked against
 * torch by tests/pp/test_pp_torch.c); pipeline_parallel_schedule_csv reads
 * torch's compute-only CSV form (a row per rank, cells "2F0", "3I1", "1W0",
 * "(0F3;3B1)OVERLAP_F_B", empty cells for bubbles).
 *
 * Communication is not in the lists: it is implied.  The F of stage s on
 * micro-batch m sends its output to the rank of stage s + 1 (when that is
 * another rank), which receives it before its F of s + 1 on m; the B or I of
 * s sends the input gradient to the rank of s - 1.  Sends never block (they
 * are started and finished at the end of the step); a receiver posts its
 * receives from a peer in the order that peer sends them (every rank knows
 * every rank's list).  Under these rules a schedule cannot deadlock if and
 * only if the dependency simulation of pp_schedule_check() completes, which
 * is what that function proves before any work. */
#ifndef TITAN_PP_H
#define TITAN_PP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

typedef enum pp_op { PP_F, PP_B, PP_I, PP_W, PP_OP_COUNT } pp_op;

typedef struct pp_action {
	int32_t stage;
	int32_t mb;
	uint8_t op;      /* pp_op */
	uint8_t overlap; /* an F that DualPipeV overlaps with the B after it (OVERLAP_F_B) */
} pp_action;

/* torchtitan's parallelism.pipeline_parallel_schedule values. */
typedef enum pp_kind {
	PP_GPIPE,
	PP_1F1B,
	PP_INTERLEAVED_1F1B,
	PP_LOOPED_BFS,
	PP_INTERLEAVED_ZB,
	PP_ZBV,
	PP_DUALPIPEV,
	PP_KIND_COUNT
} pp_kind;

/* The kind named name, case-insensitively as torch's get_schedule_class. */
int pp_kind_parse(const char *name, pp_kind *k, titan_err *e);
const char *pp_kind_name(pp_kind k);
/* One stage per rank (torch's PipelineScheduleSingle: GPipe, 1F1B). */
int pp_kind_single(pp_kind k);
/* Stages placed in a V (rank r holds r and 2p-1-r: ZBV, DualPipeV) rather than
 * looped (rank r holds r, r+p, r+2p, ...). */
int pp_kind_v(pp_kind k);

/* The rank of stage s among n_ranks with n_stages (torch's
 * generate_stage_to_rank_mapping, "v" or "loop"). */
int pp_stage_rank(int v_style, int n_ranks, int n_stages, int s);

typedef struct pp_schedule {
	char name[32];   /* "1F1B", ..., or "csv" */
	int n_ranks, n_stages, n_mb;
	int *stage_rank; /* (n_stages) */
	int *first;      /* (n_ranks + 1): rank r's actions are act[first[r] .. first[r + 1]) */
	pp_action *act;
} pp_schedule;

/* The schedule of kind k for n_ranks ranks with stages_per_rank stages each and
 * n_mb micro-batches, after torch's class of that name, refusing what torch
 * refuses with torch's message ("Number of microbatches (2) must be greater
 * than or equal to the number of stages (4)."). */
int pp_schedule_build(pp_kind k, int n_ranks, int stages_per_rank, int n_mb,
		      pp_schedule **out, titan_err *e);

/* Read torch's compute-only CSV form.  Its stage placement is inferred from
 * it (each stage on the one rank that runs it); n_ranks rows, n_stages stages
 * and n_mb micro-batches are required; the result is checked
 * (pp_schedule_check).  Errors name the file, the row (rank) and the cell. */
int pp_schedule_read_csv(const char *path, int n_ranks, int n_stages, int n_mb,
			 pp_schedule **out, titan_err *e);
int pp_schedule_parse_csv(const char *name, const char *text, size_t len, int n_ranks,
			  int n_stages, int n_mb, pp_schedule **out, titan_err *e);
/* The same form back (no bubbles: the lists only). */
int pp_schedule_write_csv(const pp_schedule *s, FILE *f);
void pp_schedule_free(pp_schedule *s);

/* Prove the schedule sound: every stage on one rank; for every stage and
 * micro-batch one F, and either one B or one I and one W; B and I after their
 * F, W after its I; and no deadlock under the communication rules above (the
 * message names the actions each stuck rank waits on). */
int pp_schedule_check(const pp_schedule *s, titan_err *e);

/* A checksum of the whole schedule (every rank's list and the placement),
 * which the ranks compare before the first step. */
uint32_t pp_schedule_crc(const pp_schedule *s);

/* Costs of one action of a stage, in any unit, and of a message between
 * ranks.  PP_COSTS_UNIT: F 1, B 2, I 1, W 1, messages free. */
typedef struct pp_costs {
	double op[PP_OP_COUNT];
	double send;
} pp_costs;
extern const pp_costs PP_COSTS_UNIT;

/* The schedule run on ideal ranks: each action starts when its rank is free
 * and its input has arrived.  start (may be NULL) gets each action's start
 * time, indexed like s->act. */
typedef struct pp_sim {
	double makespan; /* the last action's end */
	double busy;     /* the busiest rank's compute time */
	double bubble;   /* 1 - mean busy / makespan: the idle fraction */
} pp_sim;
int pp_simulate(const pp_schedule *s, const pp_costs *c, pp_sim *out, double *start,
		titan_err *e);

/* The bubble fraction the schedule's paper gives for p ranks, v stages per
 * rank and m micro-batches under PP_COSTS_UNIT (see pp_schedule.c for each
 * formula and where torch's schedule departs from it); NaN when it has none. */
double pp_bubble_formula(pp_kind k, int p, int v, int m);

/* The action lists, a line per rank ("rank 0: 0F0 0F1 2F0 ..."), then the
 * unit-cost timeline as a grid (a column per rank, a row per time unit). */
int pp_schedule_print(const pp_schedule *s, FILE *f, titan_err *e);

/* ---- the stage split ---- */

/* torchtitan's module names of a model part ("tok_embeddings", "layers.3",
 * "norm", "output") map onto titan's units: 0 the embedding, 1..L the blocks,
 * L + 1 the head (norm and output together). */
typedef struct pp_split_args {
	int n_layers;
	int pp;                       /* pipeline_parallel_degree */
	pp_kind kind;                 /* pipeline_parallel_schedule */
	int64_t layers_per_stage;     /* 0: not set */
	int64_t first_less, last_less; /* pipeline_parallel_{first,last}_stage_less_layers */
	/* module_fqns_per_model_part: n_parts lists (0: not set) */
	int n_parts;
	const int *part_len;
	const char *const *const *parts;
	/* pipeline_parallel_split_points (torchtitan 0.1): module names that start
	 * a stage after the first */
	int n_split_points;
	const char *const *split_points;
} pp_split_args;

typedef struct pp_split {
	int n_stages, stages_per_rank, pp;
	int v_style;
	int *u0, *u1;    /* (n_stages): stage s holds units u0[s]..u1[s] */
	int *stage_rank; /* (n_stages) */
} pp_split;

/* Split the model as torchtitan's pipeline_llm: the number of (virtual)
 * stages from layers_per_stage or the schedule (1 per rank for GPipe and 1F1B,
 * 2 for the others), the layers shared out by generate_llm_fqn_per_model_part
 * with the embedding and the head weighing first_less and last_less layers, or
 * the stages given by module names; refused with torchtitan's messages. */
int pp_split_make(const pp_split_args *a, pp_split *s, titan_err *e);
void pp_split_free(pp_split *s);
/* The stages of pipeline rank r, in increasing order (n_stages / pp of them). */
int pp_split_rank_stages(const pp_split *s, int r, int *stages);

/* torchtitan's micro-batch count: local_batch_size / microbatch_size, which
 * must divide ("Batch size 8 must be divisible by microbatch_size 3. ...").
 * *few is set when there are fewer micro-batches than stages (torchtitan warns:
 * the pipeline will have a bubble). */
int pp_microbatches(int64_t local_batch_size, int64_t microbatch_size, int n_stages,
		    int *n_mb, int *few, titan_err *e);

/* ---- the engine ---- */

/* How a pipeline rank talks to the others: nonblocking sends and receives of
 * raw bytes to and from other pipeline ranks, messages from one peer
 * arriving in the order it sent them (lib/comm's send/recv on the pp
 * communicator; tests use a loopback in one process).  A request is finished
 * by wait, which frees it; with block = 0 wait only tests (*done). */
typedef struct pp_transport {
	void *ctx;
	int (*send)(void *ctx, int peer, const void *buf, size_t n, void **req, titan_err *e);
	int (*recv)(void *ctx, int peer, void *buf, size_t n, void **req, titan_err *e);
	int (*wait)(void *ctx, void *req, int block, int *done, titan_err *e);
} pp_transport;

typedef struct pp_engine pp_engine;
struct model;
struct model_hooks;

/* Once per step and stage of the rank, for FSDP under pipeline parallelism
 * (torch's UNSHARD before a stage's first action, REDUCE_GRAD after its last
 * backward: the parameters stay gathered and the gradients unreduced across
 * the micro-batches in between).  Either may be NULL. */
typedef struct pp_stage_hooks {
	void *ctx;
	int (*first)(void *ctx, int stage, titan_err *e); /* before its first action */
	int (*last)(void *ctx, int stage, titan_err *e);  /* after its last B or W */
} pp_stage_hooks;

/* The engine of pipeline rank `rank`: it runs that rank's list of the
 * (checked) schedule s on model m, whose units of the rank's stages (split
 * sp) are bound to storage, with micro-batches of b sequences of t tokens.
 * The model, split, schedule and transport are the caller's and outlive the
 * engine. */
pp_engine *pp_engine_create(struct model *m, const pp_split *sp, const pp_schedule *s,
			    int rank, int b, int t, const pp_transport *tr, titan_err *e);
void pp_engine_free(pp_engine *en);

/* One step, the gradients ADDED to the model's: ids and labels are the
 * step's n_mb micro-batches (n_mb x b x t each, host; the first stage reads
 * ids, the last labels; NULL where the rank holds neither); every loss
 * scaled by grad_scale (1 / the step's valid tokens); hooks run around every
 * unit as model_run_mb runs them.  *loss_sum and *n_valid get the loss of
 * this rank's last-stage micro-batches (0 elsewhere).  begin sets the step
 * up; advance runs actions until the list ends (*done) or, with block = 0,
 * until a message it needs has not arrived; step is begin and a blocking
 * advance. */
int pp_engine_begin(pp_engine *en, const int32_t *ids, const int32_t *labels, float grad_scale,
		    const struct model_hooks *hooks, titan_err *e);
/* torchtitan 0.3.0's per-document positions of the next steps' micro-batches
 * (n_mb x b x t, host, as ids; every stage reads them), or NULL: none; under
 * context parallelism with the whole rows' (n_mb x b x row_t), else rows
 * NULL (model_mb_set_documents). */
void pp_engine_set_positions(pp_engine *en, const int32_t *positions, const int32_t *rows,
			     int64_t row_t);
void pp_engine_set_stage_hooks(pp_engine *en, const pp_stage_hooks *h);
int pp_engine_advance(pp_engine *en, int block, int *done, titan_err *e);
/* Actions of the step not yet run (0: only sends may be open). */
int pp_engine_actions_left(const pp_engine *en);
int pp_engine_step(pp_engine *en, const int32_t *ids, const int32_t *labels, float grad_scale,
		   const struct model_hooks *hooks, double *loss_sum, int64_t *n_valid,
		   titan_err *e);
void pp_engine_loss(const pp_engine *en, double *loss_sum, int64_t *n_valid);
/* The transport over lib/comm's send and receive on the pipeline ranks'
 * communicator (the mesh's pp dimension). */
struct comm;
void pp_transport_comm(struct comm *pp, pp_transport *out);
/* Before the first step: every pipeline rank built the same schedule
 * (pp_schedule_crc all-gathered over pp); refused naming the first rank that
 * differs, so a mismatch is an error, not a hang. */
int pp_schedule_agree(struct comm *pp, const pp_schedule *s, titan_err *e);

/* The engine's message buffers on `rank`, per action of its list: posted[k]
 * receives it posts before action k, used[k] whether k consumes a message
 * (whose buffer is freed then), made[k] whether it makes one (a buffer kept
 * for a stage of the rank until used, or a send kept until the step ends, as
 * lib/comm finishes sends only by waiting).  -1 when out of memory. */
int pp_engine_message_events(const pp_schedule *s, int rank, int *posted, int *used,
			     int *made);

#endif
