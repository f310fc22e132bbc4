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

/* A rank's bytes of unit u in its all-gather (FSDP's float8 all-gather packs
 * the converted weights as float8: f8.c). */
static size_t sbytes(const plan *p, int u)
{
	size_t b = plan_f8_gather_bytes(p, u);
	return b ? b : pbytes(p, p->u[u].shard_numel);
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

/* Start the all-gather of unit u's shards (a held unit that is not resident,
 * gathered or being gathered). */
static int start_gather(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (!pu->held || pu->resident || pu->gathered || pu->ag)
		return 0;
	be_dtype pt = p->prec.param;
	size_t s = pu->shard_numel, sb = sbytes(p, u);
	int f8 = plan_f8_gather_bytes(p, u) != 0;
	if (!(pu->gbuf = take(p, (size_t)p->fsdp * sb, e)))
		return err_prefix(e, "fsdp: gathering unit %d", u);
	const void *src = plan_shard_at(p, p->params, pu->shard_off);
	if (f8 || pt != p->mt) {
		if (!(pu->send = take(p, sb, e)))
			return err_prefix(e, "fsdp: gathering unit %d", u);
		if (f8 && plan_f8_pack(p, u, pu->send, e))
			return -1;
		if (!f8)
			p->be->ops->convert(p->be, pu->send, pt, src, p->mt, (int64_t)s);
		src = pu->send;
	}
	if (p->fsdp == 1) {
		plan_move(p->be, pu->gbuf, pt, src, pt, s);
		return 0;
	}
	PROF_T0(t);
	if (comm_all_gather_start(p->c_fsdp, src, pu->gbuf, f8 ? sb : s,
				  f8 ? COMM_U8 : plan_comm_dtype(pt), &pu->ag, e))
		return p->broken = 1, -1;
	PROF_COMM(t, "all_gather_start", PA_I("bytes", sb), PA_I("unit", u));
	return 0;
}

/* Move unit u between the model's layout (flat, of type ft: tensors after
 * each other, whole) and FSDP's padded one (padded, of type pt: rank j's
 * chunk of every tensor in block j), either way.  A unit gathered with the
 * float8 all-gather comes out of its packed layout (f8.c: the converted
 * weights' chunks as e4m3 codes, decoded here). */
static void relayout(plan *p, int u, void *flat, be_dtype ft, void *padded, be_dtype pt,
		     int to_padded)
{
	const plan_unit *pu = &p->u[u];
	const model_unit *mu = model_unit_at(p->m, u);
	size_t fe = be_dtype_size(ft), pe = be_dtype_size(pt);
	int packed = !to_padded && plan_f8_gather_bytes(p, u) != 0;
	size_t block = packed ? pu->f8_bytes : pu->shard_numel * pe;
	for (int j = 0; j < p->fsdp; j++)
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			const plan_tensor *t = &p->t[i];
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
	if (!pu->gbuf && start_gather(p, u, e))
		return -1;
	size_t sb = sbytes(p, u);
	if (wait_req(p, &pu->ag, "all_gather", sb, e))
		return -1;
	if (!(pu->params = take(p, pbytes(p, pu->numel), e)))
		return err_prefix(e, "fsdp: unit %d", u);
	relayout(p, u, pu->params, p->prec.param, pu->gbuf, p->prec.param, 0);
	give(p, &pu->gbuf, (size_t)p->fsdp * sb);
	give(p, &pu->send, sb);
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
	p->be->ops->axpy(p->be, plan_shard_at(p, p->grads, pu->shard_off), p->mt, 1, pu->rsout,
			 p->o.reduce,
			 (int64_t)pu->shard_numel);
	give(p, &pu->rsout, rbytes(p, pu->shard_numel));
}

static int start_all_reduce(plan *p, int u, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	void *buf = pu->resident ? plan_shard_at(p, p->grads, pu->shard_off) : pu->rsout;
	comm_dtype t = plan_comm_dtype(pu->resident ? p->mt : p->o.reduce);
	PROF_T0(t0);
	if (comm_all_reduce_start(p->c_rep, buf, buf, pu->shard_numel, t, COMM_SUM, &pu->ar, e))
		return p->broken = 1, -1;
	PROF_COMM(t0, "all_reduce_start", PA_I("bytes", rbytes(p, pu->shard_numel)), PA_I("unit", u));
	return 0;
}

/* Move every reduction in flight on by one stage: an all-reduce is waited
 * for and added in; a reduce-scatter is waited for and, under HSDP, its
 * all-reduce started (else added in). */
static int advance(plan *p, titan_err *e)
{
	int n = p->nq, w = 0;
	for (int k = 0; k < n; k++) {
		int u = p->queue[k];
		plan_unit *pu = &p->u[u];
		if (pu->ar) {
			if (wait_req(p, &pu->ar, "all_reduce", rbytes(p, pu->shard_numel), e))
				return -1;
			accumulate(p, u);
			pu->queued = 0;
			continue;
		}
		if (wait_req(p, &pu->rs, "reduce_scatter", rbytes(p, pu->shard_numel), e))
			return -1;
		give(p, &pu->rsbuf, rbytes(p, (size_t)p->fsdp * pu->shard_numel));
		if (p->rep > 1 && !pu->resident) {
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

/* Copy unit u's gradient into FSDP's padded layout in the reduce type, the
 * padding zero. */
static void copy_in(plan *p, int u)
{
	plan_unit *pu = &p->u[u];
	void *dst = p->fsdp > 1 ? pu->rsbuf : pu->rsout;
	p->be->ops->zero(p->be, dst, rbytes(p, (size_t)p->fsdp * pu->shard_numel));
	relayout(p, u, pu->grad, p->prec.grad, dst, p->o.reduce, 1);
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
	if (!(pu->rsout = take(p, rbytes(p, pu->shard_numel), e)) ||
	    (p->fsdp > 1 && !(pu->rsbuf = take(p, rbytes(p, (size_t)p->fsdp * pu->shard_numel), e))))
		return err_prefix(e, "fsdp: reducing unit %d", u);
	copy_in(p, u);
	give(p, &pu->grad, gbytes(p, pu->numel));
	model_bind_unit(p->m, u, pu->params, NULL);
	if (p->fsdp == 1)
		return 0;
	PROF_T0(t);
	if (comm_reduce_scatter_start(p->c_fsdp, pu->rsbuf, pu->rsout, pu->shard_numel,
				      plan_comm_dtype(p->o.reduce), COMM_SUM, &pu->rs, e))
		return p->broken = 1, -1;
	PROF_COMM(t, "reduce_scatter_start", PA_I("bytes", rbytes(p, pu->shard_numel)),
		  PA_I("unit", u));
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
		comm_req **rq[3] = {&pu->ag, &pu->rs, &pu->ar};
		for (int k = 0; k < 3; k++)
			if (*rq[k] && comm_wait(*rq[k], &e))
				p->broken = 1;
		for (int k = 0; k < 3; k++)
			*rq[k] = NULL;
		if (p->broken) /* MPI may still write what it was given */
			continue;
		give(p, &pu->gbuf, (size_t)p->fsdp * sbytes(p, u));
		give(p, &pu->send, sbytes(p, u));
		give(p, &pu->params, pbytes(p, pu->numel));
		give(p, &pu->grad, gbytes(p, pu->numel));
		give(p, &pu->rsbuf, rbytes(p, (size_t)p->fsdp * pu->shard_numel));
		give(p, &pu->rsout, rbytes(p, pu->shard_numel));
		pu->gathered = pu->kept = pu->queued = 0;
		if (!pu->resident && pu->held)
			model_bind_unit(p->m, u, NULL, NULL);
	}
	p->nq = 0;
}
