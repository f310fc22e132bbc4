/* Expert parallelism's collectives over the ep dimension, as the model's MoE
 * layers ask for them (model_ep_group): the rows per expert (all-to-all) and
 * the rows themselves (all-to-allv), blocking, their time counted as
 * communication. */
#include "plan/plan_priv.h"
#include "prof/prof.h"

static int ep_all_to_all_i32(void *ctx, const int32_t *send, int32_t *recv, size_t count,
			     titan_err *e)
{
	plan *p = ctx;
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_all_to_all(p->c_ep, send, recv, count, COMM_I32, e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "all_to_all", PA_I("bytes", count * sizeof(int32_t)), PA_S("dim", "ep"));
	if (rc)
		p->broken = 1;
	return rc;
}

static int ep_all_to_allv(void *ctx, const void *send, const size_t *scounts,
			  const size_t *sdispls, void *recv, const size_t *rcounts,
			  const size_t *rdispls, be_dtype t, titan_err *e)
{
	plan *p = ctx;
	size_t bytes = 0;
	for (int j = 0; j < p->ep; j++)
		bytes += j == p->ep_rank ? 0 : scounts[j] * be_dtype_size(t);
	PROF_T0(t0);
	uint64_t w0 = plan_now();
	int rc = comm_all_to_allv(p->c_ep, send, scounts, sdispls, recv, rcounts, rdispls,
				  plan_comm_dtype(t), e);
	p->wait_ns += plan_now() - w0;
	PROF_COMM(t0, "all_to_allv", PA_I("bytes", bytes), PA_S("dim", "ep"));
	if (rc)
		p->broken = 1;
	return rc;
}

model_ep_group plan_ep_group(plan *p)
{
	return (model_ep_group){.size = p->ep, .rank = p->ep_rank, .ctx = p,
				.all_to_all_i32 = ep_all_to_all_i32,
				.all_to_allv = ep_all_to_allv};
}
