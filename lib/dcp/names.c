/* torchtitan 0.3.0's names of the model's tensors: see dcp.h. */
#include <stdio.h>
#include <string.h>

#include "dcp/dcp.h"

/* 0.2.2's spelling, 0.3.0's; matched as a whole name (the first two) or a
 * component between dots. */
static const char *const renames[][2] = {
	{"output.weight", "lm_head.weight"},
	{"output.bias", "lm_head.bias"},
	{".attention.wq.", ".attention.qkv_linear.wq."},
	{".attention.wk.", ".attention.qkv_linear.wk."},
	{".attention.wv.", ".attention.qkv_linear.wv."},
	{".moe.experts.w1", ".moe.routed_experts.inner_experts.w1_EFD"},
	{".moe.experts.w2", ".moe.routed_experts.inner_experts.w2_EDF"},
	{".moe.experts.w3", ".moe.routed_experts.inner_experts.w3_EFD"},
	{".moe.experts.mlp1_weight", ".moe.routed_experts.inner_experts.mlp1_weight_EGD"},
	{".moe.experts.mlp1_bias", ".moe.routed_experts.inner_experts.mlp1_bias_EG"},
	{".moe.experts.mlp2_weight", ".moe.routed_experts.inner_experts.mlp2_weight_EDF"},
	{".moe.experts.mlp2_bias", ".moe.routed_experts.inner_experts.mlp2_bias_ED"},
	{".moe.expert_bias", ".moe.expert_bias_E"},
};
#define N_RENAMES (sizeof renames / sizeof renames[0])

/* Replace the first from in name by to: from as a whole component run
 * (after the start or a dot, before the end or a dot; a from that starts or
 * ends with a dot brings its own), as optimizer.state.<name>.exp_avg holds it. */
static const char *respell(const char *name, const char *from, const char *to, char *buf,
			  size_t n)
{
	size_t lf = strlen(from);
	for (const char *at = strstr(name, from); at; at = strstr(at + 1, from)) {
		int starts = from[0] == '.' || at == name || at[-1] == '.';
		int ends = from[lf - 1] == '.' || at[lf] == '\0' || at[lf] == '.';
		if (!starts || !ends)
			continue;
		int k = snprintf(buf, n, "%.*s%s%s", (int)(at - name), name, to, at + lf);
		return k >= 0 && (size_t)k < n ? buf : NULL;
	}
	return NULL;
}

const char *dcp_name_030(const char *name, int mla, char *buf, size_t n)
{
	for (size_t i = 0; i < N_RENAMES; i++) {
		if (mla && strcmp(renames[i][0], ".attention.wq.") == 0)
			continue;
		const char *r = respell(name, renames[i][0], renames[i][1], buf, n);
		if (r)
			return r;
	}
	return name;
}

const char *dcp_name_022(const char *name, char *buf, size_t n)
{
	for (size_t i = 0; i < N_RENAMES; i++) {
		const char *r = respell(name, renames[i][1], renames[i][0], buf, n);
		if (r)
			return r;
	}
	return name;
}

int dcp_names_are_030(const dcp_ckpt *c)
{
	char buf[512];
	for (size_t i = 0; i < c->n; i++)
		if (dcp_is_model_key(c->entries[i].fqn) &&
		    dcp_name_022(c->entries[i].fqn, buf, sizeof buf) != c->entries[i].fqn)
			return 1;
	return 0;
}

int64_t dcp_qkv_fused_row(int slot, int64_t r, int64_t hpk, int64_t hd)
{
	int64_t per = slot == 0 ? hpk * hd : hd; /* the slot's rows in one kv group */
	int64_t at = slot == 0 ? 0 : (hpk + slot - 1) * hd;
	return r / per * (hpk + 2) * hd + at + r % per;
}
