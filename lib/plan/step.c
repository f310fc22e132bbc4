/* The training step of torchtitan's train.py (train_step, forward_backward_step)
 * over the plan: the global count of valid labels, the micro-batches run by
 * the runner with the unit hooks, the reductions finished, the loss and its
 * maximum over the loss dimension, the global grad norm and clipping
 * (dist_utils.clip_grad_norm_), AdamW on the shards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_priv.h"
#include "prof/prof.h"

/* A blocking all-reduce of n values on c (nothing to do without one).  The
 * host's scalars go on the h_* twins, the backend's buffers (the MoE
 * counts) on the c_* communicators. */
static int all_reduce(plan *p, comm *c, void *buf, size_t n, comm_dtype t, comm_redop op,
		      const char *what, titan_err *e)
{
	if (c == NULL || comm_size(c) == 1)
		return 0;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_all_reduce(c, buf, buf, n, t, op, e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, what, PA_I("bytes", n * comm_dtype_size(t)));
	if (rc)
		p->broken = 1;
	return rc;
}

/* The default runner: the micro-batches one after another, each over every
 * unit (gradient accumulation). */
static int run_micro_batches(void *ctx, plan *p, const plan_batch *b, float grad_scale,
			     const model_hooks *h, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	(void)ctx;
	if (p->o.hold != NULL)
		return err_set(e, "plan: a rank holding some units only needs a runner for them "
			       "(pipeline parallelism's engine)");
	if (!p->mb && !(p->mb = model_mb_create(p->m, 0, p->head, p->o.b, p->o.t, e)))
		return -1;
	size_t per = (size_t)p->o.b * (size_t)p->o.t;
	for (int k = 0; k < b->n_mb; k++) {
		p->last_mb = k == b->n_mb - 1;
		PROF_T0(t);
		if (model_mb_set_tokens(p->mb, b->inputs + k * per, b->labels + k * per, 1,
					grad_scale, NULL, e) ||
		    plan_mb_positions(p, p->mb, b->positions ? b->positions + k * per * p->cp : NULL,
				      p->o.b, p->o.t, e) ||
		    model_run_mb(p->m, p->mb, h, e))
			return -1;
		PROF_PHASE(t, "forward_backward");
		*loss_sum += model_mb_loss_sum(p->mb);
		*n_valid += model_mb_valid(p->mb);
	}
	return 0;
}

static const plan_runner default_runner = {NULL, run_micro_batches};

void plan_set_runner(plan *p, const plan_runner *r)
{
	p->runner = r ? *r : default_runner;
}

int64_t plan_count_valid(const int32_t *labels, size_t n)
{
	int64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v += labels[i] != MODEL_IGNORE_INDEX;
	return v;
}

/* LoRA's frozen tensors have no gradient (torch's .grad stays None): the
 * backward's values for them are zeroed, out of the norm and the update. */
static void zero_frozen(plan *p)
{
	for (int i = 0; i < model_num_tensors(p->m); i++) {
		const model_tensor *mt = model_tensor_at(p->m, i);
		const plan_tensor *t = &p->t[i];
		size_t numel = (size_t)(t->cs * t->cols);
		if (mt->frozen && p->u[mt->unit].held && numel)
			p->be->ops->zero(p->be, plan_shard_at(p, p->grads, t->shard_off),
					 numel * be_dtype_size(p->mt));
	}
}

/* Each rank's sum of squares of its shards' gradients, a tensor tp replicates
 * counted on tp rank 0 only. */
static double local_sumsq(plan *p)
{
	if (p->tp == 1)
		return grad_sumsq_typed(p->be, p->grads, p->mt, p->shard_numel);
	double s = 0;
	for (int i = 0; i < model_num_tensors(p->m); i++) {
		const plan_tensor *t = &p->t[i];
		if (p->u[model_tensor_at(p->m, i)->unit].held && (!t->tp_replicated || p->tp_rank == 0))
			s += grad_sumsq_typed(p->be, plan_shard_at(p, p->grads, t->shard_off), p->mt,
					      (size_t)(t->cs * t->cols));
	}
	return s;
}

/* torchtitan's clip_grad_norm_: the norm over every shard, then the scale.
 * The sum of squares adds up over the dimensions whose ranks hold different
 * shards (fsdp, tp, pp), not over the replicas. */
static int clip(plan *p, double max_norm, double *norm, titan_err *e)
{
	PROF_T0(t);
	double s = local_sumsq(p);
	if (all_reduce(p, p->h_fsdp, &s, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_tp, &s, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_pp, &s, 1, COMM_F64, COMM_SUM, "all_reduce", e))
		return -1;
	*norm = sqrt(s);
	grad_clip_scale_typed(p->be, p->grads, p->mt, p->shard_numel, *norm, max_norm);
	PROF_PHASE(t, "clip_grad_norm");
	return 0;
}

/* torchtitan's optimizer pre-step hook of MoE models (_update_expert_bias): the
 * tokens routed to each expert summed over the loss mesh (dp and cp), then
 * each layer's expert_bias moved (model_moe_balance). */
static int moe_balance(plan *p, titan_err *e)
{
	size_t n;
	float *counts = model_moe_counts(p->m, &n);
	if (counts == NULL)
		return 0;
	if (all_reduce(p, p->c_loss, counts, n, COMM_F32, COMM_SUM, "all_reduce", e))
		return -1;
	return model_moe_balance(p->m, e);
}

int plan_step(plan *p, const plan_batch *b, double lr, double max_norm, plan_result *r,
	      titan_err *e)
{
	if (p->graph)
		return plan_graph_step(p, b, lr, max_norm, r, e);
	memset(r, 0, sizeof *r);
	uint64_t t0 = plan_now();
	p->wait_ns = p->busy_ns = 0;
	if (!p->runner.run)
		plan_set_runner(p, NULL);
	size_t n = (size_t)b->n_mb * (size_t)p->o.b * (size_t)p->o.t;
	int64_t global = plan_count_valid(b->labels, n);
	if (all_reduce(p, p->h_loss, &global, 1, COMM_I64, COMM_SUM, "all_reduce", e))
		return -1;
	if (global == 0)
		return err_set(e, "no valid labels in the step's batch on any rank");
	if (plan_f8_begin(p, e))
		return -1;
	p->be->ops->zero(p->be, p->grads, p->shard_numel * be_dtype_size(p->mt));
	p->eval = 0;
	double loss_sum = 0;
	int64_t valid = 0;
	uint64_t r0 = plan_now();
	if (p->runner.run(p->runner.ctx, p, b, (float)(1.0 / (double)global), &p->hooks,
			  &loss_sum, &valid, e))
		return -1;
	r->run_s = (double)(plan_now() - r0) * 1e-9;
	r->busy_s = (double)p->busy_ns * 1e-9;
	if (plan_finish_reduce(p, e) || plan_tp_reduce_replicated(p, e))
		return -1;
	zero_frozen(p);
	plan_release_all(p);
	double sums[1] = {loss_sum}, avg = valid ? loss_sum / (double)valid : 0;
	/* under pipeline parallelism the last stage alone has a loss: summed over
	 * pp too, so that every rank (rank 0 logs) knows it */
	if (all_reduce(p, p->h_loss, sums, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_loss, &avg, 1, COMM_F64, COMM_MAX, "all_reduce", e) ||
	    all_reduce(p, p->h_pp, sums, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_pp, &avg, 1, COMM_F64, COMM_MAX, "all_reduce", e) ||
	    clip(p, max_norm, &r->grad_norm, e) || moe_balance(p, e))
		return -1;
	PROF_T0(t);
	adamw_step(p->opt, p->params, p->grads, lr);
	if (plan_muon_step(p, lr, e))
		return -1;
	model_weights_changed(p->m); /* autocast casts the new weights on next use */
	int rc = p->be->ops->sync(p->be, e);
	PROF_PHASE(t, "optimizer");
	r->loss = sums[0] / (double)global;
	r->max_loss = avg;
	r->n_valid = global;
	r->local_loss_sum = loss_sum;
	r->local_valid = valid;
	r->step_s = (double)(plan_now() - t0) * 1e-9;
	r->comm_s = (double)p->wait_ns * 1e-9;
	return rc;
}

static int eval_batch(plan *p, const int32_t *inputs, const int32_t *labels,
		      const int32_t *positions, int b, int t, double *loss_sum, int64_t *n_valid,
		      titan_err *e)
{
	if (p->o.hold != NULL && p->pipe == NULL)
		return err_set(e, "plan: evaluation of a rank holding some units only");
	if (plan_f8_begin(p, e))
		return -1;
	double s = 0;
	int64_t v = 0;
	int rc;
	p->eval = 1;
	if (p->pipe != NULL) {
		rc = plan_pipeline_eval(p, inputs, labels, positions, b, t, &s, &v, e);
	} else {
		model_mb *mb = model_mb_create(p->m, 0, p->head, b, t, e);
		if (!mb) {
			p->eval = 0;
			return -1;
		}
		rc = model_mb_set_tokens(mb, inputs, labels, 0, 0, NULL, e) ||
		     plan_mb_positions(p, mb, positions, b, t, e) ||
		     model_run_mb(p->m, mb, &p->hooks, e);
		s = model_mb_loss_sum(mb);
		v = model_mb_valid(mb);
		model_mb_free(mb);
	}
	p->eval = 0;
	plan_release_all(p);
	/* under pipeline parallelism the last stage alone has the loss */
	if (rc || all_reduce(p, p->h_loss, &s, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_loss, &v, 1, COMM_I64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_pp, &s, 1, COMM_F64, COMM_SUM, "all_reduce", e) ||
	    all_reduce(p, p->h_pp, &v, 1, COMM_I64, COMM_SUM, "all_reduce", e))
		return -1;
	*loss_sum = s;
	*n_valid = v;
	return 0;
}

/* Context parallelism: t may be another length than training's (its own
 * ring and positions meanwhile). */
int plan_eval(plan *p, const int32_t *inputs, const int32_t *labels, const int32_t *positions,
	      int b, int t, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	cp_attn *ring;
	if (plan_cp_use(p, t, &ring, e))
		return -1;
	int rc = eval_batch(p, inputs, labels, positions, b, t, loss_sum, n_valid, e);
	titan_err later; /* the first error is the one told */
	if (plan_cp_restore(p, ring, rc ? &later : e))
		rc = -1;
	return rc;
}
