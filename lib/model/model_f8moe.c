/* Float8 grouped experts (torchtitan 0.3.0's Float8GroupedExpertsConverter,
 * 0.2.2's quantize.grouped_mm.float8): the routed experts' three grouped GEMMs
 * of the converted MoE layers run as torchao's _Float8GroupedMM, the backend's
 * f8_grouped_matmul (backend.h has the casts).  Shared experts and the router
 * are linears: the Float8 linear converter (model_f8.c) decides those. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

/* torchao asserts that every dimension of the experts' GEMMs (the model's dim,
 * the experts' hidden size) is a multiple of 16. */
static int dims_ok(const model *m, titan_err *e)
{
	int64_t d = m->args.dim, in = m->args.moe.inter_dim;
	if (d % 16 == 0 && in % 16 == 0)
		return 0;
	return err_set(e, "model %s: Float8 grouped experts need dim (%lld) and moe_inter_dim "
		       "(%lld) to be multiples of 16 (torchao's float8 grouped GEMM asserts it)",
		       m->args.name, (long long)d, (long long)in);
}

/* 1 when one of fqns is a substring of the layer's experts' module FQN. */
static int layer_matches(const model *m, int l, const char *const *fqns, size_t n)
{
	char fqn[64];
	int nl = m->args.n_layers, mtp = l >= nl;
	snprintf(fqn, sizeof fqn, "%slayers.%d.moe.experts", mtp ? "mtp_" : "", mtp ? l - nl : l);
	for (size_t i = 0; i < n; i++)
		if (fqns[i] && strstr(fqn, fqns[i]))
			return 1;
	return 0;
}

int model_set_float8_experts(model *m, const char *const *fqns, size_t n, titan_err *e)
{
	free(m->f8_moe);
	m->f8_moe = NULL;
	int nblk = model_n_blocks(m), count = 0;
	if (n == 0 || m->n_moe == 0)
		return 0;
	unsigned char *on = calloc((size_t)nblk, 1);
	if (!on)
		return err_set(e, "model: out of memory");
	for (int l = 0; l < nblk; l++) {
		on[l] = m->kind[l].ffn == FFN_MOE && layer_matches(m, l, fqns, n);
		count += on[l];
	}
	if (!count) {
		free(on);
		return 0;
	}
	if (!m->be->ops->f8_grouped_matmul) {
		free(on);
		return err_set(e, "model %s: the %s backend has no Float8 grouped GEMM "
			       "(f8_grouped_matmul) for the Float8 grouped experts", m->args.name,
			       m->be->ops->name);
	}
	if (dims_ok(m, e)) {
		free(on);
		return -1;
	}
	m->f8_moe = on;
	return count;
}

int model_float8_experts(const model *m, int l)
{
	return m->f8_moe && l >= 0 && l < model_n_blocks(m) && m->f8_moe[l];
}

void model_grouped_mm(model *m, int l, int mode, int64_t groups, const int32_t *offs,
		      int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
		      float beta, void *c, be_dtype ct)
{
	const backend_ops *o = m->be->ops;
	if (model_float8_experts(m, l))
		o->f8_grouped_matmul(m->be, mode, groups, offs, rows, nn, kk, a, b, m->prec.act,
				     beta, c, ct);
	else
		o->grouped_matmul(m->be, mode, groups, offs, rows, nn, kk, a, b, m->prec.act, beta,
				  c, ct);
}
