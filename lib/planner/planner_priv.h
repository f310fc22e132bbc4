/* planner_priv.h: what the planner's files share. */
#ifndef TITAN_PLANNER_PRIV_H
#define TITAN_PLANNER_PRIV_H

#include "backend/backend.h"
#include "cp/cp.h"
#include "planner/planner.h"
#include "pp/pp.h"

typedef struct plan_ctx {
	const job_config *c;
	plan_report *r;
	plan_degrees d;
	int fsdp;                 /* dp_shard x cp: FSDP's ranks */
	be_dtype param_t, mp_t, reduce_t, compute_t;
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
} plan_ctx;

/* a x b and a + b, or INT64_MAX with x->overflow set past it (every figure
 * the planner adds up goes through these). */
uint64_t planner_mul(plan_ctx *x, uint64_t a, uint64_t b);
uint64_t planner_add(plan_ctx *x, uint64_t a, uint64_t b);

/* Every role's bytes and traffic into x->r. */
int planner_roles(plan_ctx *x, titan_err *e);

#endif
