#include "model/flavor.h"

#include <string.h>

/* Dims of torchtitan's llama3_args; 1B and 3B are Llama 3.2's shapes (tied
 * embeddings, rope scaling factor 32 as in Meta's release).  torchtitan's
 * TransformerModelArgs applies the Llama 3.1 rope scaling (RoPEScalingArgs:
 * factor 8, low 1, high 4, original 8192) to every flavor, debugmodel included;
 * n_kv_heads unset means n_heads. */
static const llama_args flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 256, 0.0, 1e-5, 500000.0, 8, 0, 131072},
	{"1B", 2048, 16, 32, 8, 128256, 256, 1.5, 1e-5, 500000.0, 32, 1, 131072},
	{"3B", 3072, 28, 24, 8, 128256, 256, 1.0, 1e-5, 500000.0, 32, 1, 131072},
	{"8B", 4096, 32, 32, 8, 128256, 1024, 1.3, 1e-5, 500000.0, 8, 0, 131072},
	{"70B", 8192, 80, 64, 8, 128256, 4096, 1.3, 1e-5, 500000.0, 8, 0, 131072},
	{"405B", 16384, 126, 128, 8, 128256, 4096, 1.2, 1e-5, 500000.0, 8, 0, 131072},
	{0},
};

const llama_args *flavor_find(const char *name)
{
	for (const llama_args *a = flavors; a->name != NULL; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

const llama_args *flavor_all(void)
{
	return flavors;
}

int flavor_ffn_hidden(const llama_args *a)
{
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
