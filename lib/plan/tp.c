/* Tensor parallelism's collectives over the tp dimension, as the model asks
 * for them (model_tp_group: the sequence's gathers and reduce-scatters, the
 * Float8 casts' amax maxima), and the gradients of the tensors tp replicates:
 * each rank's norm weights see only its rows of the sequence (and the
 * heads it holds), so their gradients are partial sums, all-reduced over tp
 * once a step (torchtitan's SequenceParallel norms reduce the same Partial
 * gradient). */
#include <stdlib.h>

#include "plan/plan_priv.h"
#include "prof/prof.h"

static int tp_all_gather(void *ctx, void *full, const void *part, size_t count, be_dtype t,
			 titan_err *e)
{
	plan *p = ctx;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_all_gather(p->c_tp, part, full, count, plan_comm_dtype(t), e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "all_gather", PA_I("bytes", count * be_dtype_size(t)), PA_S("dim", "tp"));
	return rc;
}

static int tp_reduce_scatter(void *ctx, void *part, const void *full, size_t count, be_dtype t,
			     titan_err *e)
{
	plan *p = ctx;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_reduce_scatter(p->c_tp, full, part, count, plan_comm_dtype(t), COMM_SUM, e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "reduce_scatter", PA_I("bytes", count * be_dtype_size(t)), PA_S("dim", "tp"));
	return rc;
}

static int tp_ring_start(void *ctx, const void *send, void *recv, size_t count, be_dtype t,
			 void **req, titan_err *e)
{
	plan *p = ctx;
	int n = p->tp, r = p->tp_rank;
	comm_p2p ops[2] = {{1, (r + 1) % n, (void *)send, count, plan_comm_dtype(t)},
			   {0, (r + n - 1) % n, recv, count, plan_comm_dtype(t)}};
	return comm_p2p_start(p->c_tp, ops, 2, (comm_req **)req, e);
}

static int tp_ring_wait(void *ctx, void *req, titan_err *e)
{
	plan *p = ctx;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_wait(req, e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "ring_send_recv", PA_S("dim", "tp"));
	return rc;
}

static int tp_all_reduce_max(void *ctx, float *x, size_t count, titan_err *e)
{
	plan *p = ctx;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_all_reduce(p->c_tp, x, x, count, COMM_F32, COMM_MAX, e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "all_reduce", PA_I("bytes", count * 4), PA_S("of", "float8 amax"),
		  PA_S("dim", "tp"));
	return rc;
}

model_tp_group plan_tp_group(plan *p)
{
	return (model_tp_group){.size = p->tp, .rank = p->tp_rank,
				.loss_parallel = p->o.loss_parallel, .async = p->o.async_tp,
				.ctx = p, .all_gather = tp_all_gather,
				.reduce_scatter = tp_reduce_scatter, .ring_start = tp_ring_start,
				.ring_wait = tp_ring_wait, .all_reduce_max = tp_all_reduce_max};
}

/* The shard's ranges of the tensors tp replicates, packed, all-reduced over
 * tp and put back. */
int plan_tp_reduce_replicated(plan *p, titan_err *e)
{
	if (p->tp == 1)
		return 0;
	size_t n = 0;
	int nt = model_num_tensors(p->m);
	for (int i = 0; i < nt; i++)
		if (p->t[i].tp_replicated && p->u[model_tensor_at(p->m, i)->unit].held)
			n += (size_t)(p->t[i].cs * p->t[i].cols);
	if (n == 0)
		return 0;
	size_t es = be_dtype_size(p->mt);
	char *buf = p->be->ops->alloc(p->be, n * es, e);
	if (!buf)
		return err_prefix(e, "tensor parallel: replicated gradients");
	size_t at = 0;
	for (int pass = 0; pass < 2; pass++, at = 0) {
		for (int i = 0; i < nt; i++) {
			const plan_tensor *t = &p->t[i];
			if (!t->tp_replicated || !p->u[model_tensor_at(p->m, i)->unit].held)
				continue;
			size_t k = (size_t)(t->cs * t->cols);
			void *g = plan_shard_at(p, p->grads, t->shard_off);
			p->be->ops->copy(p->be, pass ? g : buf + at * es, pass ? buf + at * es : g, k * es,
					 BACKEND_D2D);
			at += k;
		}
		if (pass == 0) {
			PROF_T0(t0);
			uint64_t w0 = plan_now();
			int rc = comm_all_reduce(p->c_tp, buf, buf, n, plan_comm_dtype(p->mt), COMM_SUM, e);
			p->wait_ns += plan_now() - w0;
			PROF_COMM(t0, "all_reduce", PA_I("bytes", n * es), PA_S("dim", "tp"));
			if (rc) {
				p->broken = 1;
				return -1; /* buf stays: MPI may still write it */
			}
		}
	}
	p->be->ops->free(p->be, buf);
	return 0;
}
