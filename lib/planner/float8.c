/* The Float8 converter's share of a plan: which linears it converts (on the
 * whole model, as the run's filter decides: lib/model/model_f8.c), what FSDP's
 * float8 all-gather saves (the converted weights' shards go as e4m3, one byte
 * an element), and the amax all-reduces the casts add: FSDP's of the weights
 * it gathers (each gather, or once a step when precomputed), and under tensor
 * parallelism those of every cast whose scales run along the split dimension
 * (lib/plan/tp.c, model.h's model_float8). */
#include <string.h>

#include "float8/float8.h"
#include "planner/planner_priv.h"

/* The grouped experts' converter on the whole model: which MoE layers, and
 * its refusals (dimensions torchao does not take) before any run. */
static int float8_experts(plan_ctx *x, titan_err *e)
{
	const cfg_strlist *q = &x->c->grouped_mm.float8.fqns;
	if (!cfg_strlist_has(&x->c->model.converters, "quantize.grouped_mm.float8"))
		return 0;
	int n = model_set_float8_experts(x->whole, (const char *const *)q->v, (size_t)q->n, e);
	if (n < 0)
		return err_prefix(e, "quantize.grouped_mm.float8");
	x->r->f8_moe_layers = n;
	return 0;
}

int planner_float8(plan_ctx *x, titan_err *e)
{
	const job_config *c = x->c;
	const __typeof__(c->float8) *f = &c->float8;
	if (float8_experts(x, e))
		return -1;
	if (!cfg_strlist_has(&c->model.converters, "quantize.linear.float8"))
		return 0;
	model_float8 o = {f->recipe_name, (const char *const *)f->filter_fqns.v,
			  (size_t)f->filter_fqns.n};
	int n = model_set_float8(x->whole, &o, e);
	if (n < 0 || f8_recipe_get(&x->f8r, f->recipe_name, e))
		return err_prefix(e, "quantize.linear.float8");
	x->f8 = n;
	x->f8_gather = n > 0 && f->enable_fsdp_float8_all_gather && x->fsdp > 1 &&
		       x->f8r.id == F8_RECIPE_TENSORWISE;
	x->f8_precompute = x->f8_gather && f->precompute_float8_dynamic_scale_for_fsdp;
	int linears = 0;
	for (int i = 0; i < model_num_tensors(x->whole); i++) {
		const model_tensor *t = model_tensor_at(x->whole, i);
		linears += t->ndim == 2 && !t->is_embedding && !t->is_norm;
	}
	plan_report *r = x->r;
	r->f8_converted = n;
	r->f8_linears = linears;
	r->f8_gather = x->f8_gather;
	snprintf(r->f8_recipe, sizeof r->f8_recipe, "%s", x->f8r.name);
	return 0;
}

int planner_f8_gathered(const plan_ctx *x, int i)
{
	return x->f8_gather && model_float8_converted(x->whole, i);
}

static uint64_t all_reduce(plan_ctx *x, uint64_t n, uint64_t bytes)
{
	return n > 1 ? planner_mul(x, 2 * (n - 1), bytes) / n : 0;
}

/* The amax all-reduces over tp of one pass of unit u's converted linears:
 * y (rows, out) = x (rows, in) w^T at the rank's shapes, a column-parallel
 * linear splitting out (w's rows, dy's columns), a row-parallel one in (w's
 * and x's columns); the forward casts x and w (again when recomputed: every
 * linear but w2, whose output full AC does not recompute), the backward dy
 * and w, dy and x.  FSDP's float8 all-gather brings w's scale. */
static uint64_t tp_amax(plan_ctx *x, int u, uint64_t rows, int again)
{
	const model_unit *mu = model_unit_at(x->whole, u);
	uint64_t tp = (uint64_t)x->d.tp, sum = 0;
	for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
		const model_tensor *t = model_tensor_at(x->local, i);
		if (!model_float8_converted(x->whole, i))
			continue;
		int64_t out = t->shape[0], in = t->shape[1], n = (int64_t)rows;
		int col = t->tp == MODEL_TP_COLWISE, row = t->tp == MODEL_TP_ROWWISE;
		int fwd = 1 + (again && !strstr(t->fqn, "feed_forward.w2"));
		struct {
			int op, times;
			int64_t r, c;
			int rsplit, csplit;
		} ops[] = {{F8_INPUT, fwd, n, in, 0, row},       {F8_WEIGHT, fwd, out, in, col, row},
			   {F8_GRAD_OUTPUT, 1, n, out, 0, col},   {F8_WEIGHT_GI, 1, out, in, col, row},
			   {F8_GRAD_OUTPUT_GW, 1, n, out, 0, col}, {F8_INPUT_GW, 1, n, in, 0, row}};
		for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
			f8_scaling s = f8_operand_scaling(&x->f8r, ops[k].op);
			int w = ops[k].op == F8_WEIGHT || ops[k].op == F8_WEIGHT_GI;
			int split = s == F8_TENSOR ? ops[k].rsplit || ops[k].csplit
				    : s == F8_ROWS ? ops[k].csplit : ops[k].rsplit;
			if (s == F8_NONE || !split || (w && planner_f8_gathered(x, i)))
				continue;
			uint64_t b = (uint64_t)f8_n_scales(s, ops[k].r, ops[k].c) * 4;
			sum = planner_add(x, sum, planner_mul(x, (uint64_t)ops[k].times,
							      all_reduce(x, tp, b)));
		}
	}
	return sum;
}

void planner_f8_traffic(plan_ctx *x, int u0, int u1, uint64_t passes, uint64_t gathers,
			uint64_t rows, int (*recomputed)(const plan_ctx *, int), plan_role *ro)
{
	if (!x->f8)
		return;
	int H = model_head_unit(x->whole);
	uint64_t fsdp = (uint64_t)x->fsdp, tp = (uint64_t)x->d.tp;
	for (int u = u0; u <= u1; u++) {
		const model_unit *mu = model_unit_at(x->whole, u);
		uint64_t k = 0; /* the unit's weights FSDP gathers as float8 */
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++)
			k += (uint64_t)planner_f8_gathered(x, i);
		uint64_t per = x->f8_precompute ? 1 : gathers;
		uint64_t a_f = planner_mul(x, per, all_reduce(x, fsdp, k * 4));
		uint64_t a_t = planner_mul(x, per, all_reduce(x, tp, k * 4));
		if (tp > 1)
			a_t = planner_add(x, a_t, planner_mul(x, passes,
				tp_amax(x, u, rows, u != 0 && u != H && recomputed(x, u))));
		ro->sent[PLAN_DIM_FSDP] = planner_add(x, ro->sent[PLAN_DIM_FSDP], a_f);
		ro->sent[PLAN_DIM_TP] = planner_add(x, ro->sent[PLAN_DIM_TP], a_t);
		ro->f8_sent[PLAN_DIM_FSDP] = planner_add(x, ro->f8_sent[PLAN_DIM_FSDP], a_f);
		ro->f8_sent[PLAN_DIM_TP] = planner_add(x, ro->f8_sent[PLAN_DIM_TP], a_t);
	}
}
