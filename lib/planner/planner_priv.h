/* planner_priv.h: what the planner's files share. */
#ifndef TITAN_PLANNER_PRIV_H
#define TITAN_PLANNER_PRIV_H

#include "backend/backend.h"
#include "cp/cp.h"
#include "float8/float8.h"
#include "planner/planner.h"
#include "pp/pp.h"

typedef struct plan_ctx {
	const job_config *c;
	plan_report *r;
	plan_degrees d;
	int fsdp;                 /* dp_shard x cp: FSDP's ranks */
	be_dtype param_t, mp_t, reduce_t, compute_t;
	be_dtype state_t; /* AdamW's states: param_t, or bf16 under fused_opt_states_bf16 */
	model_ac_mode ac;
	int ac_every;
	cp_layout cpl;
	cp_rotate rotate;
	backend *be;              /* for the unbound models' figures; allocates nothing */
	model *whole;             /* global shapes, each tensor's TP style */
	model *local;             /* one TP rank's shapes, the run's precision and AC */
	pp_split split;           /* pp > 1 */
	pp_schedule *sched;       /* pp > 1 */
	int overflow;             /* a figure passed INT64_MAX (roles.c's mul, add) */
	int f8;                   /* linears the Float8 converter converts (float8.c) */
	int f8_gather, f8_precompute; /* FSDP's float8 all-gather acts; its scales once a step */
	f8_recipe f8r;
} plan_ctx;

/* a x b and a + b, or INT64_MAX with x->overflow set past it (every figure
 * the planner adds up goes through these). */
uint64_t planner_mul(plan_ctx *x, uint64_t a, uint64_t b);
uint64_t planner_add(plan_ctx *x, uint64_t a, uint64_t b);

/* The Float8 converter on x->whole as the run applies it (float8.c). */
int planner_float8(plan_ctx *x, titan_err *e);
/* Whether FSDP gathers tensor i as float8 e4m3 (one byte an element). */
int planner_f8_gathered(const plan_ctx *x, int i);
/* The amax all-reduces of units u0..u1 (passes forward and backward, FSDP's
 * gathers of each, rows tokens a micro-batch) into ro->sent and ro->f8_sent. */
void planner_f8_traffic(plan_ctx *x, int u0, int u1, uint64_t passes, uint64_t gathers,
			uint64_t rows, int (*recomputed)(const plan_ctx *, int), plan_role *ro);

/* Every role's bytes and traffic into x->r. */
int planner_roles(plan_ctx *x, titan_err *e);

#endif
