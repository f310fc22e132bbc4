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
	int64_t m = a->multiple_of;
	return (int)(m * ((h + m - 1) / m));
}

int64_t flavor_embedding_params(const llama_args *a)
{
	return (int64_t)a->vocab_size * a->dim;
}

int64_t flavor_param_count(const llama_args *a)
{
	int64_t d = a->dim, hd = flavor_head_dim(a), f = flavor_ffn_hidden(a);
	int64_t attn = d * a->n_heads * hd + 2 * d * a->n_kv_heads * hd + a->n_heads * hd * d;
	int64_t ffn = 3 * d * f;
	int64_t layer = attn + ffn + 2 * d;
	int64_t out = a->tied_embeddings ? 0 : flavor_embedding_params(a);
	return flavor_embedding_params(a) + a->n_layers * layer + d + out;
}
