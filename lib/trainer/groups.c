/* optimizer.param_groups on the plan: names, assignment, hyper-parameters. */
#include <stdlib.h>
#include <string.h>

#include "dcp/dcp.h"
#include "model/model.h"
#include "trainer/groups.h"

double train_base_lr(const job_config *c)
{
	if (c->optimizer.n_param_groups == 0)
		return c->optimizer.lr;
	cfg_param_group_values v;
	config_param_group_values(&c->optimizer.param_groups[0], &v);
	return v.lr;
}

static int is_adam(const cfg_param_group *g)
{
	return strcmp(g->optimizer_name, "Adam") == 0;
}

static int group_of_config(const cfg_param_group *cg, int i, optim_group *g, titan_err *err)
{
	cfg_param_group_values v;
	config_param_group_values(cg, &v);
	if (is_adam(cg) && v.weight_decay != 0)
		return err_set(err, "optimizer.param_groups[%d]: Adam with weight_decay %g: torch's "
			       "Adam adds it to the gradient (L2), which is not built; use AdamW or "
			       "weight_decay 0", i, v.weight_decay);
	*g = (optim_group){.kind = strcmp(cg->optimizer_name, "DistMuon") == 0 ? OPTIM_MUON
									       : OPTIM_ADAMW,
			   .lr = v.lr, .beta1 = v.beta1, .beta2 = v.beta2, .eps = v.eps,
			   .weight_decay = v.weight_decay, .adam = is_adam(cg), .momentum = v.momentum,
			   .nesterov = v.nesterov, .ns_steps = (int)v.ns_steps,
			   .ns = {v.ns_coefficients[0], v.ns_coefficients[1], v.ns_coefficients[2]}};
	const char *a = v.adjust_lr_fn;
	g->adjust = !a || !strcmp(a, "original") ? MUON_ADJUST_ORIGINAL
		    : !strcmp(a, "match_rms_adamw") ? MUON_ADJUST_MATCH_RMS : MUON_ADJUST_SPECTRAL;
	return 0;
}

int train_adamw_config(const job_config *c, adamw_config *ac, titan_err *err)
{
	adamw_config_default(ac);
	ac->bf16_states = strcmp(c->optimizer.implementation, "fused_opt_states_bf16") == 0;
	if (c->optimizer.n_param_groups > 0) {
		optim_group g;
		if (group_of_config(&c->optimizer.param_groups[0], 0, &g, err))
			return -1;
		ac->lr = g.lr, ac->beta1 = g.beta1, ac->beta2 = g.beta2, ac->eps = g.eps;
		ac->weight_decay = g.weight_decay;
		return 0;
	}
	ac->lr = c->optimizer.lr;
	ac->beta1 = c->optimizer.beta1;
	ac->beta2 = c->optimizer.beta2;
	ac->eps = c->optimizer.eps;
	ac->weight_decay = c->optimizer.weight_decay;
	/* torch's Adam adds weight decay to the gradient (L2), AdamW decouples it;
	 * only AdamW is implemented, so Adam is allowed only without decay. */
	if (strcmp(c->optimizer.name, "Adam") == 0 && c->optimizer.weight_decay != 0)
		return err_set(err, "optimizer.name = \"Adam\" with weight_decay %g: only AdamW's "
			       "decoupled decay is implemented; use AdamW or weight_decay 0",
			       c->optimizer.weight_decay);
	return 0;
}

/* The name 0.3.0's named_parameters gives tensor t (buf n bytes): its
 * renames (lm_head, qkv_linear, routed_experts), and wq, wk, wv as the one
 * fused qkv_linear.wqkv of a model that fuses them. */
static const char *name_030(const char *fqn, int mla, int fused, char *buf, size_t n)
{
	char tmp[256];
	const char *r = dcp_name_030(fqn, mla, tmp, sizeof tmp);
	snprintf(buf, n, "%s", r);
	char *at = fused ? strstr(buf, ".qkv_linear.w") : NULL;
	if (at && strchr("qkv", at[13]) && at[14] == '.' && strlen(buf) + 3 < n) {
		memmove(at + 16, at + 14, strlen(at + 14) + 1);
		memcpy(at + 13, "qkv", 3);
	}
	return buf;
}

static int assign(plan *p, const job_config *c, char **names, int *group_of, int *matrix_of,
		  titan_err *err)
{
	const model *g = plan_global_model(p);
	const llama_args *a = model_args(g);
	int nt = model_num_tensors(g), np = c->optimizer.n_param_groups;
	int mla = a->mla.kv_lora_rank > 0;
	int fused = c->follows_030 && !c->qkv_apart030 && !mla && a->n_kv_heads > 0;
	for (int i = 0; i < nt; i++) {
		const model_tensor *t = model_tensor_at(g, i);
		char buf[256];
		if (t->frozen) /* 0.3.0 groups the parameters that require grad */
			continue;
		const char *nm = c->follows_030 ? name_030(t->fqn, mla, fused, buf, sizeof buf) : t->fqn;
		if (!(names[i] = strdup(nm)))
			return err_set(err, "out of memory");
	}
	const char **pat = malloc(sizeof *pat * (size_t)np);
	if (!pat)
		return err_set(err, "out of memory");
	for (int k = 0; k < np; k++)
		pat[k] = c->optimizer.param_groups[k].pattern;
	int rc = optim_assign_groups(pat, np, (const char *const *)names, nt, group_of, err);
	free(pat);
	/* tensors of one name (the fused wqkv) are one matrix, as 0.3.0 holds it */
	for (int i = 0; i < nt; i++) {
		matrix_of[i] = i;
		for (int j = 0; names[i] && j < i; j++)
			if (names[j] && strcmp(names[i], names[j]) == 0) {
				matrix_of[i] = j;
				break;
			}
	}
	return rc;
}

int train_param_groups(plan *p, const job_config *c, titan_err *err)
{
	int np = c->optimizer.n_param_groups, nt = model_num_tensors(plan_global_model(p));
	if (np == 0)
		return 0;
	if (c->optimizer.no_decay_norms_embeddings)
		return err_set(err, "optimizer.no_decay_norms_embeddings with optimizer.param_groups: "
			       "give the norms and embeddings a group of weight_decay 0 instead");
	optim_group *groups = calloc((size_t)np, sizeof *groups);
	char **names = calloc((size_t)nt, sizeof *names);
	int *group_of = calloc((size_t)nt, sizeof *group_of);
	int *matrix_of = calloc((size_t)nt, sizeof *matrix_of);
	int rc = -1;
	if (!groups || !names || !group_of || !matrix_of) {
		err_set(err, "out of memory");
		goto out;
	}
	for (int k = 0; k < np; k++)
		if (group_of_config(&c->optimizer.param_groups[k], k, &groups[k], err))
			goto out;
	if (assign(p, c, names, group_of, matrix_of, err) == 0)
		rc = plan_set_param_groups(p, groups, group_of, matrix_of, err);
out:
	for (int i = 0; names && i < nt; i++)
		free(names[i]);
	free(names);
	free(groups);
	free(group_of);
	free(matrix_of);
	return rc;
}
