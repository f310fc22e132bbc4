/* compile.enable's whole training step on the device (plan.h, plan_set_graph):
 * step.c's step with every wait for the device moved out of it, so that the
 * CUDA backend can record it once as a CUDA graph and replay it.
 *
 * What step.c does on the host inside the step, and where it goes here:
 *   - the global count of valid labels and the gradient scale 1 / count:
 *     counted on the host from the host batch BEFORE the step, the scale
 *     written to the micro-batch's float in backend memory, which the fused
 *     head (lm_head_loss) reads (so MODEL_FUSE_LOSS is required);
 *   - the tokens: copied to fixed backend buffers before the step, and from
 *     there into the micro-batch by backend copies inside it;
 *   - the loss sum and valid count: the backend adds them to the micro-batch's
 *     host sums at the sync after the step (the CUDA backend's loss slots);
 *   - the grad norm: sumsq_dev into backend memory, clip_factor there, and
 *     AdamW (adamw_multi) multiplies by the factor: nothing comes back before
 *     the update; the sum of squares is read after the step, its root logged;
 *   - AdamW's lr and bias corrections: in a be_adamw_step in backend memory,
 *     written before the step (the step count advances on the host);
 *   - allocations: none inside (the micro-batch, the autocast copies, the
 *     backend's scratch and its AdamW tables are made by the first step,
 *     which runs unrecorded);
 *   - model_run_mb's sync: model_run_mb_queued.
 * Everything that needs collectives (more than one rank), a pipeline's
 * engine, per-step gathers, or host reads of the step's values (MoE's
 * load balancing) is refused: plan_graph_refusal says which. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda.h"
#include "plan/plan_priv.h"
#include "prof/prof.h"

typedef struct plan_graph plan_graph;

struct plan_graph {
	int32_t *ids, *labels; /* (cap_mb, b, t) each in backend memory: the step's batch */
	int cap_mb;            /* micro-batches they hold */
	be_adamw_step *st;     /* backend memory: the optimizer's values of the step */
	double *sumsq;         /* backend memory: the gradients' sum of squares */
	be_span *spans;        /* the optimizer's runs of one weight decay (host) */
	int nspans;
	plan_capture cap;
	int warm;              /* a step ran unrecorded (the first) */
	/* CUDA */
	backend_cuda_graph *g; /* the recorded step */
	int g_mb;              /* its number of micro-batches */
	float g_norm;          /* its max_norm (an argument of clip_factor) */
	unsigned epoch;        /* the backend's scratch epoch it was recorded at */
	int64_t replays;
	int captures;
	char failed[sizeof(titan_err)]; /* a capture failed: why (steps then run unrecorded) */
};

/* A communicator of more than one rank. */
static int shared(comm *c)
{
	return c != NULL && comm_size(c) > 1;
}

const char *plan_graph_refusal(plan *p)
{
	size_t n;
	if (adamw_state_dtype(p->opt) != p->mt)
		return "optimizer.implementation = \"fused_opt_states_bf16\" (the fused AdamW "
		       "of the graph keeps its states in the parameters' type)";
	if (adamw_has_groups(p->opt))
		return "optimizer.param_groups with hyper-parameters of their own or Muon (the "
		       "fused AdamW carries one lr, betas and eps per step)";
	if (p->o.pp || p->o.hold || p->pipe)
		return "pipeline parallelism (the stages' engine exchanges activations and "
		       "gradients with other ranks inside the step)";
	if (shared(p->c_fsdp) || shared(p->c_rep) || shared(p->c_tp) || shared(p->c_loss) ||
	    shared(p->c_pp) || shared(p->c_cp) || shared(p->c_ep) || p->ddp)
		return "more than one rank (the plan's collectives and host reductions run inside "
		       "the step)";
	for (int u = 0; u < p->n_units; u++)
		if (p->u[u].held && !p->u[u].resident)
			return "the units' parameters are copied into another element type every "
			       "step (FSDP's mixed_precision_param differs from the masters')";
	if (model_args(p->m)->mtp_layers > 0)
		return "multi-token prediction (its shifted tokens are made on the host)";
	if (model_args(p->m)->lora_rank > 0)
		return "LoRA (its frozen weights' gradients are cleared between the backward and "
		       "the norm)";
	if (model_moe_counts(p->m, &n) != NULL)
		return "mixture of experts (the load-balancing update reads the experts' token "
		       "counts on the host)";
	if (p->f8_conv && p->o.f8_precompute)
		return "Float8's precomputed scales (an all-reduce of the weights' amax per step)";
	if (!(model_get_fusion(p->m) & MODEL_FUSE_LOSS))
		return "compile.components lacks \"loss\" (the plain cross-entropy takes each "
		       "step's gradient scale from the host)";
	return NULL;
}

static void drop(backend *be, void *q)
{
	if (q)
		be->ops->free(be, q);
}

void plan_graph_free(plan *p)
{
	plan_graph *g = p->graph;
	if (!g)
		return;
	backend_cuda_graph_free(g->g);
	drop(p->be, g->ids);
	drop(p->be, g->labels);
	drop(p->be, g->st);
	drop(p->be, g->sumsq);
	free(g->spans);
	free(g);
	p->graph = NULL;
}

int plan_set_graph(plan *p, int on, titan_err *e)
{
	if (!on) {
		plan_graph_free(p);
		return 0;
	}
	const char *why = plan_graph_refusal(p);
	if (why)
		return err_set(e, "plan: the step cannot run on the device alone: %s", why);
	if (p->graph)
		return 0;
	backend *be = p->be;
	plan_graph *g = calloc(1, sizeof *g);
	if (!g)
		return err_set(e, "plan: out of memory");
	p->graph = g;
	if (!(g->st = be->ops->alloc(be, sizeof *g->st, e)) ||
	    !(g->sumsq = be->ops->alloc(be, sizeof *g->sumsq, e)) ||
	    !(g->spans = adamw_spans(p->opt, &g->nspans, e))) {
		plan_graph_free(p);
		return err_prefix(e, "plan: the step on the device");
	}
	return 0;
}

void plan_set_capture(plan *p, const plan_capture *c)
{
	if (p->graph)
		p->graph->cap = c ? *c : (plan_capture){0};
}

int64_t plan_graph_replays(const plan *p) { return p->graph ? p->graph->replays : 0; }
int plan_graph_captures(const plan *p) { return p->graph ? p->graph->captures : 0; }

const char *plan_graph_failure(const plan *p)
{
	return p->graph && p->graph->failed[0] ? p->graph->failed : NULL;
}

/* Backend buffers for a batch of n_mb micro-batches (made before any
 * recording; a graph recorded over smaller ones is dropped). */
static int batch_buffers(plan *p, int n_mb, titan_err *e)
{
	plan_graph *g = p->graph;
	if (n_mb <= g->cap_mb)
		return 0;
	backend *be = p->be;
	size_t bytes = (size_t)n_mb * (size_t)p->o.b * (size_t)p->o.t * sizeof(int32_t);
	backend_cuda_graph_free(g->g);
	g->g = NULL;
	drop(be, g->ids);
	drop(be, g->labels);
	g->ids = g->labels = NULL;
	g->cap_mb = 0;
	if (!(g->ids = be->ops->alloc(be, bytes, e)) || !(g->labels = be->ops->alloc(be, bytes, e)))
		return err_prefix(e, "plan: the step's batch on the device");
	g->cap_mb = n_mb;
	return 0;
}

/* The step's work, queued on the backend: nothing here waits for it. */
static int queue_step(plan *p, int n_mb, float max_norm, titan_err *e)
{
	plan_graph *g = p->graph;
	backend *be = p->be;
	size_t per = (size_t)p->o.b * (size_t)p->o.t;
	be->ops->zero(be, p->grads, p->shard_numel * be_dtype_size(p->mt));
	p->eval = 0;
	for (int k = 0; k < n_mb; k++) {
		p->last_mb = k == n_mb - 1;
		if (model_mb_set_tokens_dev(p->mb, g->ids + k * per, g->labels + k * per, e) ||
		    model_run_mb_queued(p->m, p->mb, &p->hooks, e))
			return -1;
	}
	if (plan_finish_reduce(p, e))
		return -1;
	plan_release_all(p);
	be->ops->sumsq_dev(be, g->sumsq, p->grads, p->mt, (int64_t)p->shard_numel);
	be->ops->clip_factor(be, g->st, g->sumsq, max_norm);
	be->ops->adamw_multi(be, p->params, p->grads, adamw_exp_avg(p->opt),
			     adamw_exp_avg_sq(p->opt), p->mt, g->spans, g->nspans, g->st);
	return 0;
}

/* Record the step as a CUDA graph; NULL with why in e (nothing ran). */
static backend_cuda_graph *record(plan *p, int n_mb, float max_norm, titan_err *e)
{
	if (backend_cuda_capture_begin(p->be, e))
		return NULL;
	unsigned epoch = backend_cuda_scratch_epoch(p->be);
	titan_err later;
	int rc = queue_step(p, n_mb, max_norm, e);
	backend_cuda_graph *cg = backend_cuda_capture_end(p->be, rc ? &later : e);
	if (rc || !cg) {
		backend_cuda_graph_free(cg);
		return NULL;
	}
	p->graph->epoch = epoch;
	return cg;
}

/* The CUDA backend: the first step runs as is, then the step is recorded
 * once and replayed; recorded again when the number of micro-batches or
 * max_norm changes or the ops' scratch moved (a validation batch of another
 * shape).
 * A recording that fails leaves the steps unrecorded from then on (the
 * reason kept for the log): the recording's host side ran, none of its
 * work, so the step is queued again as is. */
static int run_cuda(plan *p, int n_mb, float max_norm, titan_err *e)
{
	plan_graph *g = p->graph;
	if (!g->warm || g->failed[0]) {
		g->warm = 1;
		return queue_step(p, n_mb, max_norm, e);
	}
	if (g->g && (g->g_mb != n_mb || g->g_norm != max_norm ||
		     g->epoch != backend_cuda_scratch_epoch(p->be))) {
		backend_cuda_graph_free(g->g);
		g->g = NULL;
	}
	if (!g->g) {
		titan_err why = {0};
		if (!(g->g = record(p, n_mb, max_norm, &why))) {
			snprintf(g->failed, sizeof g->failed, "%s", why.msg[0] ? why.msg : "unknown");
			model_weights_changed(p->m); /* the casts were recorded, not run */
			model_mb_clear_loss(p->mb);
			return queue_step(p, n_mb, max_norm, e);
		}
		g->g_mb = n_mb;
		g->g_norm = max_norm;
		g->captures++;
	}
	g->replays++;
	return backend_cuda_replay(p->be, g->g, e);
}

/* Another backend: the same queued step every time; as on CUDA the first
 * runs as is (it allocates what the step keeps: the micro-batch's context,
 * autocast's copies), the later ones inside the caller's capture callbacks. */
static int run_queued(plan *p, int n_mb, float max_norm, titan_err *e)
{
	plan_graph *g = p->graph;
	if (!g->warm) {
		g->warm = 1;
		return queue_step(p, n_mb, max_norm, e);
	}
	if (g->cap.begin && g->cap.begin(g->cap.ctx, e))
		return -1;
	titan_err later;
	int rc = queue_step(p, n_mb, max_norm, e);
	if (g->cap.end && g->cap.end(g->cap.ctx, rc ? &later : e))
		rc = -1;
	return rc;
}

int plan_graph_step(plan *p, const plan_batch *b, double lr, double max_norm, plan_result *r,
		    titan_err *e)
{
	plan_graph *g = p->graph;
	backend *be = p->be;
	memset(r, 0, sizeof *r);
	uint64_t t0 = plan_now();
	p->wait_ns = p->busy_ns = 0;
	const char *why = plan_graph_refusal(p);
	if (why)
		return err_set(e, "plan: the step cannot run on the device alone: %s", why);
	if (b->positions)
		return err_set(e, "plan: the step cannot run on the device alone: per-document "
			       "positions (torchtitan 0.3.0's documents) are uploaded by the host "
			       "for each micro-batch");
	size_t n = (size_t)b->n_mb * (size_t)p->o.b * (size_t)p->o.t;
	int64_t global = plan_count_valid(b->labels, n);
	if (global == 0)
		return err_set(e, "no valid labels in the step's batch on any rank");
	if (model_check_tokens(p->m, b->inputs, b->labels, (int64_t)n, e) || plan_f8_begin(p, e) ||
	    batch_buffers(p, b->n_mb, e))
		return -1;
	if (!p->mb && !(p->mb = model_mb_create(p->m, 0, p->head, p->o.b, p->o.t, e)))
		return -1;
	float *gs = model_mb_grad_scale(p->mb);
	if (!gs)
		return err_set(e, "plan: the step on the device needs the fused loss head");
	/* the step's values, queued ahead of its work */
	PROF_T0(pt);
	float scale = (float)(1.0 / (double)global);
	be_adamw_step st;
	adamw_next_step(p->opt, lr, &st);
	be->ops->copy(be, g->ids, b->inputs, n * sizeof(int32_t), BACKEND_H2D);
	be->ops->copy(be, g->labels, b->labels, n * sizeof(int32_t), BACKEND_H2D);
	be->ops->copy(be, gs, &scale, sizeof scale, BACKEND_H2D);
	be->ops->copy(be, g->st, &st, sizeof st, BACKEND_H2D);
	model_mb_clear_loss(p->mb);
	PROF_PHASE(pt, "data");
	PROF_T0(pf);
	uint64_t r0 = plan_now();
	int rc = backend_is_cuda(be) ? run_cuda(p, b->n_mb, (float)max_norm, e)
				     : run_queued(p, b->n_mb, (float)max_norm, e);
	/* the step's results, after it */
	double sumsq = 0;
	titan_err later;
	if (be->ops->sync(be, rc ? &later : e) != 0)
		rc = -1;
	if (rc == 0) {
		be->ops->copy(be, &sumsq, g->sumsq, sizeof sumsq, BACKEND_D2H);
		rc = be->ops->sync(be, e);
	}
	PROF_PHASE(pf, "forward_backward"); /* the whole step: one graph */
	model_weights_changed(p->m); /* the next eager use casts the new weights */
	if (rc)
		return -1;
	double loss_sum = model_mb_loss_sum(p->mb);
	int64_t valid = model_mb_valid(p->mb);
	r->run_s = r->busy_s = (double)(plan_now() - r0) * 1e-9;
	r->loss = loss_sum / (double)global;
	r->max_loss = valid ? loss_sum / (double)valid : 0;
	r->grad_norm = sqrt(sumsq);
	r->n_valid = global;
	r->local_loss_sum = loss_sum;
	r->local_valid = valid;
	r->step_s = (double)(plan_now() - t0) * 1e-9;
	return 0;
}
