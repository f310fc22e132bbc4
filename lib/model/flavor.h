/* flavor.h: the shape of a model (torchtitan's ModelArgs), for every family
 * (family.h): the Llama 3 fields, and the ones other families set.  A field
 * left 0 means Llama 3's behaviour, so a Llama flavor is written as before. */
#ifndef TITAN_FLAVOR_H
#define TITAN_FLAVOR_H

#include <stdint.h>

typedef struct model_family model_family;

typedef struct llama_args {
	const char *name;          /* "debugmodel", "1B", "3B", "8B", "70B", "405B" */
	int dim;
	int n_layers;
	int n_heads;
	int n_kv_heads;            /* == n_heads when there is no GQA */
	int vocab_size;
	int multiple_of;           /* FFN hidden size is rounded up to this */
	double ffn_dim_multiplier; /* 0 when the flavor has none */
	double norm_eps;           /* 1e-5 */
	double rope_theta;
	double rope_scale_factor;  /* Llama 3.1 frequency scaling factor (8; 32 for 3.2), 0 for
	                              none; low 1, high 4, original context 8192 */
	int tied_embeddings;       /* the output projection is tok_embeddings (Llama 3.2
	                              1B/3B, small Qwen3) */
	int max_seq_len;

	/* Set by families other than Llama 3 (0: Llama 3's choice). */
	const model_family *family; /* NULL: llama3 */
	int head_dim;              /* 0: dim / n_heads */
	int hidden_dim;            /* FFN hidden size; 0: Llama's rule (flavor_ffn_hidden) */
} llama_args;

/* Llama 3's flavor named name (the default family; model_family_flavor looks
 * one up in any family), or NULL. */
const llama_args *flavor_find(const char *name);
/* Llama 3's flavors, ending with an entry whose name is NULL. */
const llama_args *flavor_all(void);

/* The FFN hidden size: hidden_dim when set, else torchtitan's Llama rule:
 * h = 4*dim; h = int(2h/3); h = int(mult*h); round up to multiple_of. */
int flavor_ffn_hidden(const llama_args *a);
static inline int flavor_head_dim(const llama_args *a)
{
	return a->head_dim > 0 ? a->head_dim : a->dim / a->n_heads;
}

/* Parameter counts, with and without the embedding table (torchtitan subtracts
 * the embedding when it counts flops per token). */
int64_t flavor_param_count(const llama_args *a);
int64_t flavor_embedding_params(const llama_args *a);

#endif
