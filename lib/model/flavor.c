#include "model/family.h"

const llama_args *flavor_find(const char *name)
{
	return model_family_flavor(model_family_find("llama3"), name);
}

const llama_args *flavor_all(void)
{
	return model_family_find("llama3")->flavors;
}

int flavor_ffn_hidden(const llama_args *a)
{
	if (a->hidden_dim > 0)
		return a->hidden_dim;
	int64_t h = 4 * (int64_t)a->dim;
	h = 2 * h / 3;
	if (a->ffn_dim_multiplier > 0)
		h = (int64_t)(a->ffn_dim_multiplier * (double)h);
	int64_t m = a->multiple_of > 0 ? a->multiple_of : 1; /* a family without dense layers */
	return (int)(m * ((h + m - 1) / m));
}

int64_t flavor_embedding_params(const llama_args *a)
{
	return (int64_t)a->vocab_size * a->dim;
}

/* Multi-head latent attention's parameters (model_mla.c's tensors). */
static int64_t mla_params(const llama_args *a)
{
	const mla_args *ml = &a->mla;
	int64_t d = a->dim, h = a->n_heads, hd = ml->qk_nope_head_dim + ml->qk_rope_head_dim;
	int64_t q = ml->q_lora_rank ? d * ml->q_lora_rank + ml->q_lora_rank +
					      (int64_t)ml->q_lora_rank * h * hd
				    : d * h * hd;
	int64_t kv = d * (ml->kv_lora_rank + ml->qk_rope_head_dim) + ml->kv_lora_rank +
		     (int64_t)ml->kv_lora_rank * h * (ml->qk_nope_head_dim + ml->v_head_dim);
	return q + kv + h * ml->v_head_dim * d;
}

/* Per layer: attention (QK-norm, biases, sinks), the two norms; the
 * feed-forward apart. */
static int64_t layer_common(const llama_args *a)
{
	int64_t d = a->dim, hd = flavor_head_dim(a);
	if (a->mla.kv_lora_rank > 0)
		return mla_params(a) + 2 * d;
	int64_t attn = d * a->n_heads * hd + 2 * d * a->n_kv_heads * hd + a->n_heads * hd * d;
	if (a->attn_bias)
		attn += a->n_heads * hd + 2 * a->n_kv_heads * hd + d;
	if (a->attn_sinks)
		attn += a->n_heads;
	return attn + 2 * d + (a->qk_norm ? 2 * hd : 0);
}

/* Layer l's feed-forward: its parameters, of which *experts the routed experts'. */
static int64_t layer_ffn(const llama_args *a, int l, int64_t *experts)
{
	int64_t d = a->dim;
	const moe_args *m = &a->moe;
	*experts = 0;
	if (!model_family_moe_layer(a, l))
		return 3 * d * flavor_ffn_hidden(a);
	*experts = (int64_t)m->experts * 3 * d * m->inter_dim;
	if (m->swiglu_limit > 0) /* GPT-OSS's experts' biases */
		*experts += (int64_t)m->experts * (2 * m->inter_dim + d);
	return *experts + (int64_t)m->experts * d + (m->gate_bias ? m->experts : 0) +
	       3 * d * (int64_t)m->inter_dim * m->shared_experts;
}

/* All parameters, and *experts of them the routed experts'. */
static int64_t count(const llama_args *a, int64_t *experts)
{
	int64_t total = flavor_embedding_params(a) + a->dim;
	if (!a->tied_embeddings)
		total += flavor_embedding_params(a);
	*experts = 0;
	for (int l = 0; l < a->n_layers; l++) {
		int64_t ex;
		total += layer_common(a) + layer_ffn(a, l, &ex);
		*experts += ex;
	}
	return total;
}

int64_t flavor_param_count(const llama_args *a)
{
	int64_t ex;
	return count(a, &ex);
}

int64_t flavor_active_params(const llama_args *a)
{
	int64_t ex, total = count(a, &ex);
	return ex ? total - ex + ex * a->moe.top_k / a->moe.experts : total;
}
