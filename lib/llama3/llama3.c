/* The Llama 3 family (torchtitan/models/llama3, v0.2.2): GQA attention with
 * interleaved RoPE and Llama 3.1 frequency scaling, dense SwiGLU, the FFN
 * size from multiple_of and ffn_dim_multiplier.  Its Hugging Face mapping
 * (LlamaForCausalLM, wq / wk rows permuted for HF's rotate-half RoPE) is
 * lib/dcp/hf.c's default. */
#include "model/family.h"

extern const model_family llama3_family;

/* Dims of torchtitan's llama3_args; 1B and 3B are Llama 3.2's shapes (tied
 * embeddings, rope scaling factor 32 as in Meta's release).  torchtitan's
 * TransformerModelArgs applies the Llama 3.1 rope scaling (RoPEScalingArgs:
 * factor 8, low 1, high 4, original 8192) to every flavor, debugmodel included;
 * n_kv_heads unset means n_heads. */
#define L3 .family = &llama3_family
static const llama_args flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 256, 0.0, 1e-5, 500000.0, 8, 0, 131072, L3},
	{"1B", 2048, 16, 32, 8, 128256, 256, 1.5, 1e-5, 500000.0, 32, 1, 131072, L3},
	{"3B", 3072, 28, 24, 8, 128256, 256, 1.0, 1e-5, 500000.0, 32, 1, 131072, L3},
	{"8B", 4096, 32, 32, 8, 128256, 1024, 1.3, 1e-5, 500000.0, 8, 0, 131072, L3},
	{"70B", 8192, 80, 64, 8, 128256, 4096, 1.3, 1e-5, 500000.0, 8, 0, 131072, L3},
	{"405B", 16384, 126, 128, 8, 128256, 4096, 1.2, 1e-5, 500000.0, 8, 0, 131072, L3},
	{0},
};
#undef L3

const model_family llama3_family = {
	.name = "llama3",
	.description = "Llama 3.1 / 3.2: GQA, interleaved RoPE with 3.1 scaling, SwiGLU",
	.flavors = flavors,
};
