/* FSDP's float8 all-gather (torchao's enable_fsdp_float8_all_gather:
 * WeightWithDynamicFloat8CastTensor's fsdp_pre_all_gather and
 * fsdp_post_all_gather).  The weights of the converted linears go over the
 * wire as float8 e4m3 codes, one byte each, instead of in
 * mixed_precision_param: before the all-gather each rank casts its float32
 * shard of such a weight with the tensorwise scale of the WHOLE weight, from
 * its amax all-reduced (max) over the fsdp ranks, so the gathered codes are
 * exactly the single process's cast of the whole weight; after it, the codes
 * are decoded into the unit's parameters and the model told their scale
 * (model_float8_weight_cast), so the linear multiplies them as they are.
 *
 * The amax all-reduce runs with each gather of a unit (one over the unit's
 * converted weights), or, with precompute_float8_dynamic_scale_for_fsdp
 * (torchao's precompute_float8_dynamic_scale_for_fsdp after the optimizer
 * step), once per step over every converted weight of the rank's units.
 * The other tensors of a unit (norms, embeddings) travel in the same
 * all-gather, in mixed_precision_param, after the codes in the layout. */
#include <stdlib.h>

#include "plan/plan_priv.h"
#include "prof/prof.h"

static size_t pe(const plan *p) { return be_dtype_size(p->prec.param); }

/* The byte layout of each unit's shard when gathered: the converted tensors'
 * chunks as one byte per element, the others in prec.param. */
static void layout(plan *p)
{
	model *m = p->m;
	int k = 0;
	for (int u = 0; u < p->n_units; u++) {
		const model_unit *mu = model_unit_at(m, u);
		plan_unit *pu = &p->u[u];
		size_t at = 0;
		pu->f8_first = k;
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			plan_tensor *t = &p->t[i];
			t->f8 = model_float8_converted(m, i) ? k + 1 : 0;
			k += t->f8 != 0;
			t->chunk_boff = at;
			at += (size_t)(t->cs * t->cols) * (t->f8 ? 1 : pe(p));
		}
		pu->f8_n = k - pu->f8_first;
		pu->f8_bytes = pu->held && pu->f8_n ? at : 0;
	}
	p->f8_conv = k;
}

/* The first time: the layout, the amax and scale arrays, the model told where
 * each converted weight's scale is.  Acts under FSDP only (as torchtitan's). */
static int ready(plan *p, titan_err *e)
{
	if (p->f8_ready)
		return 0;
	p->f8_ready = 1;
	if (!p->o.f8_all_gather || p->fsdp == 1 || !model_float8_recipe(p->m))
		return 0;
	if (p->mt != BE_F32) /* the casts read float32 masters */
		return err_set(e, "plan: FSDP's float8 all-gather needs float32 master weights "
			       "(training.dtype = \"float32\")");
	layout(p);
	if (p->f8_conv == 0)
		return 0;
	int nt = model_num_tensors(p->m);
	if (!(p->f8_amax = backend_alloc_floats(p->be, (size_t)p->f8_conv, e)) ||
	    !(p->f8_scale = backend_alloc_floats(p->be, (size_t)nt, e)))
		return err_prefix(e, "fsdp float8 all-gather");
	for (int i = 0; i < nt; i++)
		if (p->t[i].f8 && model_float8_weight_cast(p->m, i, p->f8_scale + i, e))
			return err_prefix(e, "fsdp float8 all-gather");
	return 0;
}

/* amax of converted tensors k0 .. k0 + n - 1 (ordinals) over the fsdp ranks:
 * each rank's of its rows, then a max all-reduce; under tensor parallelism
 * over the tp ranks' parts too (the whole weight's, as torchao's amax of the
 * DTensor sharded over both). */
static int amax(plan *p, int k0, int n, titan_err *e)
{
	if (n == 0)
		return 0;
	backend *be = p->be;
	for (int i = 0; i < model_num_tensors(p->m); i++) {
		const plan_tensor *t = &p->t[i];
		int k = t->f8 - 1;
		if (!t->f8 || k < k0 || k >= k0 + n)
			continue;
		if (t->nr == 0 || !p->u[model_tensor_at(p->m, i)->unit].held)
			be->ops->zero(be, p->f8_amax + k, sizeof(float));
		else
			be->ops->f8_amax(be, p->f8_amax + k, plan_shard_at(p, p->params, t->shard_off),
					 BE_F32, t->nr, t->cols, BE_F8_TENSOR);
	}
	float *a = p->f8_amax + k0;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = p->be->ops->sync(p->be, e) ||
		 comm_all_reduce(p->c_fsdp, a, a, (size_t)n, COMM_F32, COMM_MAX, e) ||
		 (p->tp > 1 && comm_all_reduce(p->c_tp, a, a, (size_t)n, COMM_F32, COMM_MAX, e));
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "all_reduce", PA_I("bytes", (int64_t)n * 4), PA_S("of", "float8 amax"));
	if (rc)
		p->broken = 1;
	return rc;
}

int plan_f8_begin(plan *p, titan_err *e)
{
	if (ready(p, e))
		return -1;
	if (!p->f8_conv || !p->o.f8_precompute)
		return 0;
	return amax(p, 0, p->f8_conv, e);
}

size_t plan_f8_gather_bytes(const plan *p, int u)
{
	return p->f8_conv ? p->u[u].f8_bytes : 0;
}

int plan_f8_pack(plan *p, int u, void *send, titan_err *e)
{
	plan_unit *pu = &p->u[u];
	if (!p->o.f8_precompute && amax(p, pu->f8_first, pu->f8_n, e))
		return -1;
	const model_unit *mu = model_unit_at(p->m, u);
	backend *be = p->be;
	for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
		const plan_tensor *t = &p->t[i];
		char *dst = (char *)send + t->chunk_boff;
		const float *src = plan_shard_at(p, p->params, t->shard_off);
		if (t->f8) /* the padding rows are zeros: their codes are zeros */
			be->ops->f8_cast(be, dst, BE_E4M3, p->f8_scale + i, src, BE_F32, t->cs, t->cols,
					 BE_F8_TENSOR, 0, 0, p->f8_amax + (t->f8 - 1));
		else
			plan_move(be, dst, p->prec.param, src, BE_F32, (size_t)(t->cs * t->cols));
	}
	return 0;
}

void plan_f8_free(plan *p)
{
	if (p->f8_amax)
		p->be->ops->free(p->be, p->f8_amax);
	if (p->f8_scale)
		p->be->ops->free(p->be, p->f8_scale);
}
