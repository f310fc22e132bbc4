/* The Llama 3 family (torchtitan/models/llama3, v0.2.2): GQA attention with
 * interleaved RoPE and Llama 3.1 frequency scaling, dense SwiGLU, the FFN
 * size from multiple_of and ffn_dim_multiplier.  Its Hugging Face mapping
 * (LlamaForCausalLM, wq / wk rows permuted for HF's rotate-half RoPE) is
 * lib/dcp/hf.c's default. */
#include "model/family.h"

extern const model_family llama3_family;

/* Dims of torchtitan's llama3_args; 1B and 3B are torchtitan 0.3.0's
 * (llama3_configs' _1b and _3b: Llama 3.2's shapes, enable_weight_tying, the
 * FFN from multiple_of 1024, which gives the same 8192 as 256).  torchtitan
 * applies the Llama 3.1 rope scaling (0.2.2's RoPEScalingArgs, 0.3.0's
 * RoPE.Config scaling "llama": factor 8, low 1, high 4, original 8192) to
 * every flavor, 1B and 3B included (Meta's Llama 3.2 release says factor 32:
 * its checkpoints load, with a warning, but train and infer with other
 * frequencies);
 * n_kv_heads unset means n_heads. */
#define L3 .family = &llama3_family
static const llama_args flavors[] = {
	{"debugmodel", 256, 6, 16, 16, 2048, 256, 0.0, 1e-5, 500000.0, 8, 0, 131072, L3},
	{"1B", 2048, 16, 32, 8, 128256, 1024, 1.5, 1e-5, 500000.0, 8, 1, 131072, L3},
	{"3B", 3072, 28, 24, 8, 128256, 1024, 1.0, 1e-5, 500000.0, 8, 1, 131072, L3},
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
	/* 0.3.0's tied flavors skip the embedding's init (skip_param_init) and
	 * initialise the shared weight as lm_head: trunc_normal(dim^-0.5, 3 std) */
	.tied_init_as_output = 1,
};
