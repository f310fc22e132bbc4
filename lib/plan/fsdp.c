/* FSDP2 as the unit hooks run it (torch's FSDPParamGroup: unshard,
 * reshard, post_backward): a unit's parameters all-gathered over the fsdp
 * dimension before it runs (the next unit's gather started early: prefetch)
 * and copied out of FSDP's padded layout into the model's; freed after its
 * forward as fsdp_reshard_after_forward says and after its backward; its
 * gradient copied into the padded layout in mixed_precision_reduce and
 * reduce-scattered into the shard, then all-reduced over the replicas (HSDP).
 * Replication alone (DDP) all-reduces a resident unit's gradient in place.
 *
 * Reductions run one behind the backward: when a unit's reduction starts,
 * the previous unit's reduce-scatter is waited for (and its all-reduce
 * started), and the all-reduce before that waited for; so at most one of
 * each is in flight, and every rank starts them in the same order. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_priv.h"
#include "prof/prof.h"

static void *take(plan *p, size_t bytes, titan_err *e)
{
	void *q = p->be->ops->alloc(p->be, bytes ? bytes : 1, e);
	if (q) {
		p->live_bytes += bytes;
		if (p->live_bytes > p->peak_bytes)
			p->peak_bytes = p->live_bytes;
	}
	return q;
}

static void give(plan *p, void **q, size_t bytes)
{
	if (!*q)
		return;
	p->be->ops->free(p->be, *q);
	p->live_bytes -= bytes;
	*q = NULL;
}

static size_t pbytes(const plan *p, size_t n) { return n * be_dtype_size(p->prec.param); }
static size_t gbytes(const plan *p, size_t n) { return n * be_dtype_size(p->prec.grad); }
static size_t rbytes(const plan *p, size_t n) { return n * be_dtype_size(p->o.reduce); }

/* A rank's bytes of group k of unit u in its all-gather (FSDP's float8
 * all-gather packs the converted weights as float8: f8.c; it runs without
 * expert parallelism only, so the dense group is the whole unit). */
static size_t sbytes(const plan *p, int u, int k)
{
	size_t b = k == PLAN_DENSE ? plan_f8_gather_bytes(p, u) : 0;
	return b ? b : pbytes(p, p->u[u].g[k].shard_numel);
}

/* Whether group k's gathers and reductions go through its communicator: over
 * more than one rank, or always (opts.comm_always: a world of one on NCCL);
 * else they are copies. */
static int via_comm(const plan *p, int k)
{
	return p->gn[k] > 1 || p->o.comm_always;
}

/* Wait for a request; the comm's time is the profiler's "comm" event. */
static int wait_req(plan *p, comm_req **r, const char *what, size_t bytes, titan_err *e)
{
	if (!*r)
		return 0;
	PROF_T0(t);
	uint64_t w0 = plan_now();
	int rc = comm_wait(*r, e);
	p->wait_ns += plan_now() - w0;
	*r = NULL;
	PROF_COMM(t, what, PA_I("bytes", bytes));
	if (rc)
		p->broken = 1;
	return rc;
}

/* Start the all-gathers of unit u's shards, group by group (a held unit that
 * is not resident, gathered or being gathered). */
static int start_gather(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (!pu->held || pu->resident || pu->gathered || pu->g[PLAN_DENSE].gbuf)
		return 0;
	be_dtype pt = p->prec.param;
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		size_t s = g->shard_numel, sb = sbytes(p, u, k);
		int n = p->gn[k], f8 = k == PLAN_DENSE && plan_f8_gather_bytes(p, u) != 0;
		if (!(g->gbuf = take(p, (size_t)n * sb, e)))
			return err_prefix(e, "fsdp: gathering unit %d", u);
		const void *src = plan_shard_at(p, p->params, g->shard_off);
		if (f8 || pt != p->mt) {
			if (!(g->send = take(p, sb, e)))
				return err_prefix(e, "fsdp: gathering unit %d", u);
			if (f8 && plan_f8_pack(p, u, g->send, e))
				return -1;
			if (!f8)
				p->be->ops->convert(p->be, g->send, pt, src, p->mt, (int64_t)s);
			src = g->send;
		}
		if (!via_comm(p, k) || s == 0) { /* a group of one rank, or no tensors of it */
			plan_move(p->be, g->gbuf, pt, src, pt, s);
			continue;
		}
		PROF_T0(t);
		if (comm_all_gather_start(p->gc[k], src, g->gbuf, f8 ? sb : s,
					  f8 ? COMM_U8 : plan_comm_dtype(pt), &g->ag, e))
			return p->broken = 1, -1;
		PROF_COMM(t, "all_gather_start", PA_I("bytes", sb), PA_I("unit", u));
	}
	return 0;
}

/* Move group k of unit u between the model's layout (flat, of type ft:
 * tensors after each other, whole) and FSDP's padded one (padded, of type pt:
 * rank j's chunk of every tensor of the group in block j), either way.  A
 * unit gathered with the float8 all-gather comes out of its packed layout
 * (f8.c: the converted weights' chunks as e4m3 codes, decoded here). */
static void relayout(plan *p, int u, int k, void *flat, be_dtype ft, void *padded, be_dtype pt,
		     int to_padded)
{
	const plan_unit *pu = &p->u[u];
	const model_unit *mu = model_unit_at(p->m, u);
	size_t fe = be_dtype_size(ft), pe = be_dtype_size(pt);
	int packed = !to_padded && k == PLAN_DENSE && plan_f8_gather_bytes(p, u) != 0;
	size_t block = packed ? pu->f8_bytes : pu->g[k].shard_numel * pe;
	for (int j = 0; j < p->gn[k]; j++)
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			const plan_tensor *t = &p->t[i];
			if (t->grp != k)
				continue;
			int64_t r = t->rows - j * t->cs;
			r = r < 0 ? 0 : r > t->cs ? t->cs : r;
			if (r == 0)
				continue;
			char *a = (char *)flat + (t->unit_off + (size_t)(j * t->cs * t->cols)) * fe;
			char *b = (char *)padded + (size_t)j * block +
				  (packed ? t->chunk_boff : t->chunk_off * pe);
			be_dtype bt = packed && t->f8 ? BE_E4M3 : pt;
			size_t n = (size_t)(r * t->cols);
			if (to_padded)
				plan_move(p->be, b, bt, a, ft, n);
			else
				plan_move(p->be, a, ft, b, bt, n);
		}
}

/* Finish unit u's gather: the padded chunks of every rank copied out into
 * the model's layout (rank j's rows j*cs .. of each tensor). */
static int finish_gather(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (pu->gathered || pu->resident)
		return 0;
	if (!pu->g[PLAN_DENSE].gbuf && start_gather(p, u, e))
		return -1;
	for (int k = 0; k < PLAN_GROUPS; k++)
		if (wait_req(p, &pu->g[k].ag, "all_gather", sbytes(p, u, k), e))
			return -1;
	if (!(pu->params = take(p, pbytes(p, pu->numel), e)))
		return err_prefix(e, "fsdp: unit %d", u);
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		relayout(p, u, k, pu->params, p->prec.param, g->gbuf, p->prec.param, 0);
		give(p, &g->gbuf, (size_t)p->gn[k] * sbytes(p, u, k));
		give(p, &g->send, sbytes(p, u, k));
	}
	pu->gathered = 1;
	return 0;
}

static void bind(plan *p, int u)
{
	plan_unit *pu = &p->u[u];
	if (!pu->resident)
		model_bind_unit(p->m, u, pu->params, pu->grad);
}

int plan_gather_unit(plan *p, int u, titan_err *e)
{
	if (finish_gather(p, u, e))
		return -1;
	bind(p, u);
	return 0;
}

void plan_release_unit(plan *p, int u)
{
	plan_unit *pu = &p->u[u];
	if (pu->resident || !pu->gathered)
		return;
	give(p, &pu->params, pbytes(p, pu->numel));
	pu->gathered = 0;
	model_bind_unit(p->m, u, NULL, NULL);
}

/* A zeroed unsharded gradient for unit u's backward (kept across micro-batches
 * until reduced: pipeline stages accumulate in it). */
static int ensure_grad(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (pu->resident || pu->grad)
		return 0;
	if (!(pu->grad = take(p, gbytes(p, pu->numel), e)))
		return err_prefix(e, "fsdp: gradient of unit %d", u);
	p->be->ops->zero(p->be, pu->grad, gbytes(p, pu->numel));
	return 0;
}

/* The shard's gradient += unit u's reduced shard. */
static void accumulate(plan *p, int u)
{
	plan_unit *pu = &p->u[u];
	if (pu->resident)
		return;
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		p->be->ops->axpy(p->be, plan_shard_at(p, p->grads, g->shard_off), p->mt, 1,
				 g->rsout, p->o.reduce, (int64_t)g->shard_numel);
		give(p, &g->rsout, rbytes(p, g->shard_numel));
	}
}

/* The all-reduces over the replicas (HSDP: each group's reduced shard; DDP:
 * the resident unit's gradient, as the dense group's). */
static int start_all_reduce(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	for (int k = 0; k < (pu->resident ? 1 : PLAN_GROUPS); k++) {
		plan_shards *g = &pu->g[k];
		void *buf = pu->resident ? plan_shard_at(p, p->grads, pu->shard_off) : g->rsout;
		size_t n = pu->resident ? pu->shard_numel : g->shard_numel;
		comm_dtype t = plan_comm_dtype(pu->resident ? p->mt : p->o.reduce);
		if (n == 0)
			continue;
		PROF_T0(t0);
		if (comm_all_reduce_start(p->c_rep, buf, buf, n, t, COMM_SUM, &g->ar, e))
			return p->broken = 1, -1;
		PROF_COMM(t0, "all_reduce_start", PA_I("bytes", rbytes(p, n)), PA_I("unit", u));
	}
	return 0;
}

/* Move every reduction in flight on by one stage: all-reduces are waited for
 * and added in; reduce-scatters are waited for and, under HSDP, their
 * all-reduces started (else added in). */
static int advance(plan *p, titan_err *e)
{
	int n = p->nq, w = 0;
	for (int q = 0; q < n; q++) {
		int u = p->queue[q];
		plan_unit *pu = &p->u[u];
		if (pu->g[PLAN_DENSE].ar) {
			for (int k = 0; k < PLAN_GROUPS; k++)
				if (wait_req(p, &pu->g[k].ar, "all_reduce",
					     rbytes(p, pu->g[k].shard_numel), e))
					return -1;
			accumulate(p, u);
			pu->queued = 0;
			continue;
		}
		for (int k = 0; k < PLAN_GROUPS; k++) {
			plan_shards *g = &pu->g[k];
			if (wait_req(p, &g->rs, "reduce_scatter", rbytes(p, g->shard_numel), e))
				return -1;
			give(p, &g->rsbuf, rbytes(p, (size_t)p->gn[k] * g->shard_numel));
		}
		if ((p->rep > 1 || p->o.comm_always) && !pu->resident) {
			if (start_all_reduce(p, u, e))
				return -1;
			p->queue[w++] = u;
			continue;
		}
		accumulate(p, u);
		pu->queued = 0;
	}
	p->nq = w;
	return 0;
}

int plan_finish_reduce(plan *p, titan_err *e)
{
	while (p->nq > 0)
		if (advance(p, e))
			return -1;
	return 0;
}

/* Copy unit u's gradient into each group's padded layout in the reduce type,
 * the padding zero. */
static void copy_in(plan *p, int u)
{
	plan_unit *pu = &p->u[u];
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		void *dst = via_comm(p, k) ? g->rsbuf : g->rsout;
		p->be->ops->zero(p->be, dst, rbytes(p, (size_t)p->gn[k] * g->shard_numel));
		relayout(p, u, k, pu->grad, p->prec.grad, dst, p->o.reduce, 1);
	}
}

int plan_reduce_unit(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (!pu->held || pu->queued)
		return 0;
	if (pu->resident && !p->ddp)
		return 0; /* the gradient is already the shard's */
	if (advance(p, e))
		return -1;
	pu->queued = 1;
	p->queue[p->nq++] = u;
	if (pu->resident)
		return start_all_reduce(p, u, e);
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		if (!(g->rsout = take(p, rbytes(p, g->shard_numel), e)) ||
		    (via_comm(p, k) &&
		     !(g->rsbuf = take(p, rbytes(p, (size_t)p->gn[k] * g->shard_numel), e))))
			return err_prefix(e, "fsdp: reducing unit %d", u);
	}
	copy_in(p, u);
	give(p, &pu->grad, gbytes(p, pu->numel));
	model_bind_unit(p->m, u, pu->params, NULL);
	for (int k = 0; k < PLAN_GROUPS; k++) {
		plan_shards *g = &pu->g[k];
		if (!via_comm(p, k) || g->shard_numel == 0)
			continue;
		PROF_T0(t);
		if (comm_reduce_scatter_start(p->gc[k], g->rsbuf, g->rsout, g->shard_numel,
					      plan_comm_dtype(p->o.reduce), COMM_SUM, &g->rs, e))
			return p->broken = 1, -1;
		PROF_COMM(t, "reduce_scatter_start", PA_I("bytes", rbytes(p, g->shard_numel)),
			  PA_I("unit", u));
	}
	return 0;
}

/* The next (dir 1) or previous (dir -1) unit this rank holds, or -1. */
static int neighbour(const plan *p, int u, int dir)
{
	int v = u + dir;
	return v >= 0 && v < p->n_units && p->u[v].held ? v : -1;
}

static int tied(const plan *p)
{
	return model_args(p->m)->tied_embeddings;
}

/* torchtitan's apply_fsdp: reshard_after_forward per unit and policy. */
static int reshard_after_forward(const plan *p, int u)
{
	if (p->eval)
		return 1;
	if (p->u[u].kept || (u == 0 && tied(p)))
		return 0; /* a pipeline stage's; the tied table waits for the head's backward */
	switch (p->o.reshard) {
	case PLAN_RESHARD_ALWAYS: return 1;
	case PLAN_RESHARD_NEVER: return 0;
	default: return !p->o.pp && u != p->head;
	}
}

static int hook_before(plan *p, int u, int phase, titan_err *e);

/* The unit's compute, between the hooks, is the profiler's "op" event. */
int plan_hook_before(void *ctx, int u, int phase, titan_err *e)
{
	plan *p = ctx;
	int rc = hook_before(p, u, phase, e);
	p->op_t0 = prof_on ? prof_now() : 0;
	p->unit_t0 = plan_now();
	return rc;
}

static int hook_before(plan *p, int u, int phase, titan_err *e)
{
	if (!p->u[u].held)
		return err_set(e, "plan: unit %d runs on a rank that does not hold it", u);
	if (u == p->head && tied(p) && plan_gather_unit(p, 0, e))
		return -1;
	if (phase == MODEL_FWD) {
		if (finish_gather(p, u, e))
			return -1;
		int v = neighbour(p, u, 1);
		if (v >= 0 && start_gather(p, v, e))
			return -1;
		bind(p, u);
		return 0;
	}
	if (u == p->head && tied(p) && (ensure_grad(p, 0, e) || plan_gather_unit(p, 0, e)))
		return -1;
	if (finish_gather(p, u, e))
		return -1;
	int v = neighbour(p, u, -1);
	if (phase == MODEL_BWD && v >= 0 && start_gather(p, v, e))
		return -1;
	if (ensure_grad(p, u, e))
		return -1;
	bind(p, u);
	return 0;
}

int plan_hook_after(void *ctx, int u, int phase, titan_err *e)
{
	plan *p = ctx;
	plan_unit *pu = &p->u[u];
	p->busy_ns += plan_now() - p->unit_t0;
	PROF_OP(p->op_t0, phase == MODEL_FWD ? "forward" : phase == MODEL_BWD ? "backward"
		: "weight_grad", PA_I("unit", u), PA_I("tokens", (int64_t)p->o.b * p->o.t));
	if (phase == MODEL_FWD) {
		if (reshard_after_forward(p, u))
			plan_release_unit(p, u);
		if (p->eval && u == p->head && tied(p))
			plan_release_unit(p, 0);
		return 0;
	}
	if (pu->kept || phase == MODEL_WGRAD)
		return 0; /* a pipeline stage reduces once, after its last backward */
	if ((!pu->resident || p->last_mb) && plan_reduce_unit(p, u, e))
		return -1;
	plan_release_unit(p, u); /* FSDP2 reshards after backward */
	return 0;
}

int plan_stage_gather(plan *p, int u0, int u1, titan_err *e)
{
	for (int u = u0; u <= u1; u++)
		if (start_gather(p, u, e))
			return -1;
	for (int u = u0; u <= u1; u++) {
		if (plan_gather_unit(p, u, e))
			return -1;
		p->u[u].kept = 1;
	}
	return 0;
}

int plan_stage_reduce(plan *p, int u0, int u1, titan_err *e)
{
	for (int u = u1; u >= u0; u--) {
		p->u[u].kept = 0;
		/* a resident gradient accumulates in the shard: replicas all-reduce it
		 * after the step's last micro-batches only */
		if ((!p->u[u].resident || p->last_mb) && plan_reduce_unit(p, u, e))
			return -1;
		plan_release_unit(p, u);
	}
	return 0;
}

void plan_release_all(plan *p)
{
	titan_err e;
	if (!p->u)
		return;
	for (int u = 0; u < p->n_units; u++) {
		plan_unit *pu = &p->u[u];
		for (int k = 0; k < PLAN_GROUPS; k++) {
			plan_shards *g = &pu->g[k];
			comm_req **rq[3] = {&g->ag, &g->rs, &g->ar};
			for (int r = 0; r < 3; r++) {
				if (*rq[r] && comm_wait(*rq[r], &e))
					p->broken = 1;
				*rq[r] = NULL;
			}
		}
		if (p->broken) /* MPI may still write what it was given */
			continue;
		for (int k = 0; k < PLAN_GROUPS; k++) {
			plan_shards *g = &pu->g[k];
			size_t n = (size_t)p->gn[k] * g->shard_numel;
			give(p, &g->gbuf, (size_t)p->gn[k] * sbytes(p, u, k));
			give(p, &g->send, sbytes(p, u, k));
			give(p, &g->rsbuf, rbytes(p, n));
			give(p, &g->rsout, rbytes(p, g->shard_numel));
		}
		give(p, &pu->params, pbytes(p, pu->numel));
		give(p, &pu->grad, gbytes(p, pu->numel));
		pu->gathered = pu->kept = pu->queued = 0;
		if (!pu->resident && pu->held)
			model_bind_unit(p->m, u, NULL, NULL);
	}
	p->nq = 0;
}
