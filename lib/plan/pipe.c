/* Pipeline parallelism in the plan (torchtitan's pipeline_llm and the
 * schedule's step in train.py): this rank holds the units of its stages
 * (plan_pipeline_hold gives opts.hold), and lib/pp's engine is the runner,
 * running the rank's action list of the step's micro-batches with the
 * plan's unit hooks and, once a step per stage, plan_stage_gather before
 * its first action and plan_stage_reduce after its last backward (torch's
 * UNSHARD and REDUCE_GRAD: FSDP does not reshard between micro-batches, and
 * a stage's gradient is reduced once).  A step of more micro-batches than
 * the schedule's is gradient accumulation: the schedule runs once per group
 * of its n_mb (torchtitan calls the schedule's step per accumulation
 * micro-batch). */
#include <stdlib.h>

#include "plan/plan_priv.h"

struct plan_pipe {
	plan *p;
	const pp_split *sp;
	const pp_schedule *s;
	pp_transport tr;
	pp_engine *en;
};

void plan_pipeline_hold(const pp_split *sp, int r, int n_units, int8_t *hold)
{
	for (int u = 0; u < n_units; u++)
		hold[u] = 0;
	for (int s = 0; s < sp->n_stages; s++)
		if (sp->stage_rank[s] == r)
			for (int u = sp->u0[s]; u <= sp->u1[s] && u < n_units; u++)
				hold[u] = 1;
}

static int stage_first(void *ctx, int stage, titan_err *e)
{
	plan_pipe *pp = ctx;
	return plan_stage_gather(pp->p, pp->sp->u0[stage], pp->sp->u1[stage], e);
}

static int stage_last(void *ctx, int stage, titan_err *e)
{
	plan_pipe *pp = ctx;
	return plan_stage_reduce(pp->p, pp->sp->u0[stage], pp->sp->u1[stage], e);
}

static int run_pipeline(void *ctx, plan *p, const plan_batch *b, float grad_scale,
			const model_hooks *h, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	plan_pipe *pp = ctx;
	int n = pp->s->n_mb;
	if (b->n_mb % n != 0)
		return err_set(e, "pipeline: the step has %d micro-batches, not a multiple of the "
			       "schedule's %d", b->n_mb, n);
	size_t per = (size_t)n * (size_t)p->o.b * (size_t)p->o.t;
	int rounds = b->n_mb / n;
	/* context parallelism: the documents' rows whole, the rank's share cut */
	size_t rows_per = per * (size_t)p->cp;
	int32_t *own = b->positions && p->cp > 1 ? malloc(per * sizeof *own) : NULL;
	if (b->positions && p->cp > 1 && own == NULL)
		return err_set(e, "pipeline: out of memory");
	for (int k = 0; k < rounds; k++) {
		p->last_mb = k == rounds - 1; /* replicas all-reduce a resident gradient once */
		double ls = 0;
		int64_t nv = 0;
		const int32_t *rows = b->positions ? b->positions + k * rows_per : NULL;
		if (own && plan_cp_share(p, rows, own, (int64_t)n * p->o.b, (int64_t)p->o.t * p->cp,
					 rows, e)) {
			free(own);
			return -1;
		}
		pp_engine_set_positions(pp->en, own ? own : rows, own ? rows : NULL,
					(int64_t)p->o.t * p->cp);
		int rc = pp_engine_step(pp->en, b->inputs + k * per, b->labels + k * per, grad_scale,
					h, &ls, &nv, e);
		pp_engine_set_positions(pp->en, NULL, NULL, 0);
		if (rc) {
			free(own);
			return -1;
		}
		*loss_sum += ls;
		*n_valid += nv;
	}
	free(own);
	return 0;
}

int plan_set_pipeline(plan *p, const pp_split *sp, const pp_schedule *s, titan_err *e)
{
	int r = plan_coord(p, MESH_PP), n = plan_size(p, MESH_PP);
	if (!p->o.pp || p->o.hold == NULL)
		return err_set(e, "plan: a pipeline needs opts.pp and opts.hold");
	if (s->n_ranks != n || sp->pp != n || sp->n_stages != s->n_stages)
		return err_set(e, "plan: the pipeline has %d ranks and %d stages, the schedule %d "
			       "ranks and %d stages, the mesh %d pipeline ranks", sp->pp,
			       sp->n_stages, s->n_ranks, s->n_stages, n);
	for (int st = 0; st < s->n_stages; st++)
		if (s->stage_rank[st] != sp->stage_rank[st])
			return err_set(e, "plan: the schedule runs stage %d on pipeline rank %d, the "
				       "split places it on rank %d", st, s->stage_rank[st],
				       sp->stage_rank[st]);
	for (int u = 0; u < p->n_units; u++) {
		int mine = 0;
		for (int st = 0; st < sp->n_stages; st++)
			mine |= sp->stage_rank[st] == r && u >= sp->u0[st] && u <= sp->u1[st];
		if (mine != p->u[u].held)
			return err_set(e, "plan: unit %d is %sheld, but pipeline rank %d's stages %s it",
				       u, p->u[u].held ? "" : "not ", r, mine ? "hold" : "leave");
	}
	if (p->h_pp != NULL && comm_size(p->h_pp) > 1 && pp_schedule_agree(p->h_pp, s, e))
		return -1;
	plan_pipe *pp = calloc(1, sizeof *pp);
	if (pp == NULL)
		return err_set(e, "plan: out of memory");
	*pp = (plan_pipe){.p = p, .sp = sp, .s = s};
	if (p->c_pp != NULL)
		pp_transport_comm(p->c_pp, &pp->tr);
	if (!(pp->en = pp_engine_create(p->m, sp, s, r, p->o.b, p->o.t, &pp->tr, e))) {
		free(pp);
		return -1;
	}
	pp_engine_set_stage_hooks(pp->en, &(pp_stage_hooks){pp, stage_first, stage_last});
	plan_pipeline_free(p);
	p->pipe = pp;
	plan_set_runner(p, &(plan_runner){pp, run_pipeline});
	return 0;
}

/* Validation through the pipeline (torchtitan's schedule.eval): one
 * micro-batch of (b, t) forward only, each rank running its stages in order,
 * a stage's input received from the rank of the stage before and its output
 * sent on (the sends finished at the end, so a chain of stages cannot
 * deadlock); the last stage's loss. */
int plan_pipeline_eval(plan *p, const int32_t *inputs, const int32_t *labels,
		       const int32_t *positions, int b, int t,
		       double *loss_sum, int64_t *n_valid, titan_err *e)
{
	const pp_split *sp = p->pipe->sp;
	int r = plan_coord(p, MESH_PP), n = sp->n_stages, rc = 0, nreq = 0;
	size_t bytes = model_hidden_bytes(p->m, b, t);
	model_mb **mb = calloc((size_t)n, sizeof *mb);
	comm_req **req = calloc((size_t)n, sizeof *req);
	*loss_sum = 0;
	*n_valid = 0;
	if (mb == NULL || req == NULL)
		rc = err_set(e, "pipeline validation: out of memory");
	for (int s = 0; rc == 0 && s < n; s++) {
		if (sp->stage_rank[s] != r)
			continue;
		int u0 = sp->u0[s], u1 = sp->u1[s], from = s > 0 ? sp->stage_rank[s - 1] : r;
		if (!(mb[s] = model_mb_create(p->m, u0, u1, b, t, e)) ||
		    model_mb_set_tokens(mb[s], u0 == 0 ? inputs : NULL, u1 == p->head ? labels : NULL,
					0, 0, NULL, e) ||
		    plan_mb_positions(p, mb[s], positions, b, t, e)) {
			rc = -1;
			break;
		}
		void *in = model_mb_hidden(mb[s], u0);
		if (s > 0 && from == r) /* the stage before is this rank's */
			p->be->ops->copy(p->be, in, model_mb_hidden(mb[s - 1], sp->u1[s - 1] + 1), bytes,
					 BACKEND_D2D);
		comm_req *rq = NULL;
		if (s > 0 && from != r &&
		    (comm_recv_start(p->c_pp, in, bytes, COMM_U8, from, &rq, e) || comm_wait(rq, e))) {
			rc = -1;
			break;
		}
		for (int u = u0; rc == 0 && u <= u1; u++)
			rc = plan_hook_before(p, u, MODEL_FWD, e) || model_unit_fwd(p->m, u, mb[s], e) ||
			     plan_hook_after(p, u, MODEL_FWD, e) ? -1 : 0;
		if (rc == 0)
			rc = p->be->ops->sync(p->be, e);
		int to = s + 1 < n ? sp->stage_rank[s + 1] : r;
		if (rc == 0 && to != r &&
		    comm_send_start(p->c_pp, model_mb_hidden(mb[s], u1 + 1), bytes, COMM_U8, to,
				    &req[nreq++], e))
			rc = -1;
		if (rc == 0 && u1 == p->head) {
			*loss_sum += model_mb_loss_sum(mb[s]);
			*n_valid += model_mb_valid(mb[s]);
		}
	}
	for (int k = 0; k < nreq; k++) {
		titan_err we;
		if (req[k] && comm_wait(req[k], rc ? &we : e) && rc == 0)
			rc = -1;
	}
	for (int s = 0; mb && s < n; s++)
		model_mb_free(mb[s]);
	free(mb);
	free(req);
	if (rc)
		p->broken = 1;
	return rc;
}

void plan_pipeline_free(plan *p)
{
	if (p->pipe == NULL)
		return;
	pp_engine_free(p->pipe->en);
	free(p->pipe);
	p->pipe = NULL;
}
