/* flavor.h: the Llama 3 model shapes, with torchtitan's names and numbers
 * (torchtitan/models/llama3/__init__.py, v0.2.2). */
#ifndef TITAN_FLAVOR_H
#define TITAN_FLAVOR_H

#include <stdint.h>

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
	int tied_embeddings;       /* Llama 3.2 1B/3B share tok_embeddings and output */
	int max_seq_len;
} llama_args;

/* The flavor named name, or NULL. */
const llama_args *flavor_find(const char *name);
/* All flavors, NULL-terminated by an entry with name == NULL. */
const llama_args *flavor_all(void);

/* torchtitan's FFN rule: h = 4*dim; h = int(2h/3); h = int(mult*h); round up to multiple_of. */
int flavor_ffn_hidden(const llama_args *a);
static inline int flavor_head_dim(const llama_args *a) { return a->dim / a->n_heads; }

/* Parameter counts, with and without the embedding table (torchtitan subtracts
 * the embedding when it counts flops per token). */
int64_t flavor_param_count(const llama_args *a);
int64_t flavor_embedding_params(const llama_args *a);

#endif
