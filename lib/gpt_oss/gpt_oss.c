/* The GPT-OSS family (torchtitan/models/gpt_oss, v0.2.2): grouped-query
 * attention with biases and learned sinks, heads of 64, sliding-window (128)
 * attention on the even layers and full causal attention on the odd ones,
 * RoPE on halves with YaRN (factor 32 over 4096 positions, beta 32 / 1, cos
 * and sin scaled by 0.1 ln 32 + 1, whatever the sequence length); every layer
 * a mixture of experts with a biased router (softmax scores, top 4, weights
 * normalised) and GPT-OSS's experts: mlp1 (gate and up interleaved) and mlp2
 * with biases around the clamped SwiGLU (alpha 1.702, limit 7).
 * HF: GptOssForCausalLM as save_pretrained writes it unquantized (the fused
 * experts stored (experts, in, out): torchtitan's transposed); the released
 * MXFP4 checkpoints are not read. */
#include <jansson.h>
#include <math.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/family.h"

extern const model_family gpt_oss_family;

/* GptOssModelArgs' defaults; MoEArgs of torchtitan's gptoss_configs. */
#define GPT_OSS(nm, vocab, d, layers, heads, kv, ne, inter)                                    \
	{.name = nm, .dim = d, .n_layers = layers, .n_heads = heads, .n_kv_heads = kv,        \
	 .vocab_size = vocab, .norm_eps = 1e-5, .rope_theta = 150000, .max_seq_len = 131072, \
	 .family = &gpt_oss_family, .head_dim = 64, .rope_style = BE_ROPE_HALF,               \
	 .rope = {.kind = ROPE_SCALE_YARN, .factor = 32, .low = 1, .high = 32, .orig = 4096,  \
		  .cs_scale = 1.3465735902799727 /* 0.1 ln 32 + 1 */},                        \
	 .sliding_window = 128, .attn_sinks = 1, .attn_bias = 1,                                \
	 .moe = {.experts = ne, .top_k = 4, .score = BE_MOE_SOFTMAX, .route_norm = 1,          \
		 .route_scale = 1.0, .load_balance_coeff = 1e-3, .inter_dim = inter,             \
		 .gate_bias = 1, .swiglu_limit = 7.0}}

/* debugmodel_030 is torchtitan 0.3.0's debugmodel (its gpt_oss_debugmodel
 * presets'): 0.2.2's with the other families' debug vocabulary of 2048 ids.
 * debugmodel_small is titan's (16 heads, experts of 256, and the other
 * families' debug vocabulary of 2048 ids): debugmodel's 64 heads and experts
 * of 2880 make 71M parameters, and GPT-OSS's 201088-id vocabulary 103M more in
 * the embedding and output, too many for the CPU tests. */
static const llama_args flavors[] = {
	GPT_OSS("debugmodel", 201088, 256, 4, 64, 8, 8, 2880),
	GPT_OSS("20b", 201088, 2880, 24, 64, 8, 32, 2880),
	GPT_OSS("120b", 201088, 2880, 36, 64, 8, 128, 2880),
	GPT_OSS("debugmodel_small", 2048, 256, 4, 16, 4, 8, 256),
	GPT_OSS("debugmodel_030", 2048, 256, 4, 64, 8, 8, 2880),
	{0},
};

/* torchtitan's GptOssStateDictAdapter's names, unquantized. */
static const dcp_hf_key hf_keys[] = {
	DCP_HF_KEYS_EDGES,
	DCP_HF_KEY_ATTN("wq", "q", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN_BIAS("wq", "q"),
	DCP_HF_KEY_ATTN("wk", "k", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN_BIAS("wk", "k"),
	DCP_HF_KEY_ATTN("wv", "v", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN_BIAS("wv", "v"),
	DCP_HF_KEY_ATTN("wo", "o", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN_BIAS("wo", "o"),
	{"layers.{}.attention.sinks", "model.layers.{}.self_attn.sinks", DCP_HF_PLAIN},
	DCP_HF_KEYS_LAYER_NORMS,
	{"layers.{}.moe.experts.mlp1_weight", "model.layers.{}.mlp.experts.gate_up_proj",
	 DCP_HF_TRANSPOSE},
	{"layers.{}.moe.experts.mlp1_bias", "model.layers.{}.mlp.experts.gate_up_proj_bias",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.experts.mlp2_weight", "model.layers.{}.mlp.experts.down_proj",
	 DCP_HF_TRANSPOSE},
	{"layers.{}.moe.experts.mlp2_bias", "model.layers.{}.mlp.experts.down_proj_bias",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.router.gate.weight", "model.layers.{}.mlp.router.weight", DCP_HF_PLAIN},
	{"layers.{}.moe.router.gate.bias", "model.layers.{}.mlp.router.bias", DCP_HF_PLAIN},
	{"layers.{}.moe.expert_bias", NULL, DCP_HF_DROP},
	{NULL, NULL, 0},
};

/* GptOssForCausalLM's config.json, as openai/gpt-oss-20b's (unquantized). */
static int hf_config(json_t *c, const dcp_hf_model *m)
{
	const llama_args *a = m->args;
	if (!a)
		return -1;
	json_t *arch = json_array(), *types = json_array(), *r = json_object();
	json_array_append_new(arch, json_string("GptOssForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	json_object_set_new(c, "model_type", json_string("gpt_oss"));
	json_object_set_new(c, "attention_bias", json_true());
	json_object_set_new(c, "intermediate_size", json_integer(m->moe_inter));
	for (int l = 0; l < m->n_layers; l++) /* torchtitan: sliding on even layers */
		json_array_append_new(types, json_string(l % 2 == 0 ? "sliding_attention"
								 : "full_attention"));
	json_object_set_new(c, "layer_types", types);
	json_object_set_new(c, "num_experts_per_tok", json_integer(m->top_k));
	json_object_set_new(c, "num_local_experts", json_integer(m->n_experts));
	json_object_set_new(r, "rope_type", json_string("yarn"));
	json_object_set_new(r, "factor", json_real(a->rope.factor));
	json_object_set_new(r, "beta_fast", json_real(a->rope.high));
	json_object_set_new(r, "beta_slow", json_real(a->rope.low));
	json_object_set_new(r, "truncate", json_false());
	json_object_set_new(r, "original_max_position_embeddings", json_integer((int)a->rope.orig));
	json_object_set_new(c, "rope_scaling", r);
	json_object_set_new(c, "router_aux_loss_coef", json_real(0.001));
	json_object_set_new(c, "sliding_window", json_integer(a->sliding_window));
	json_object_set_new(c, "swiglu_limit", json_real(a->moe.swiglu_limit));
	return 0;
}

const model_family gpt_oss_family = {
	.name = "gpt_oss",
	.description = "GPT-OSS: sinks, sliding/full attention, biased experts, clamped SwiGLU",
	.flavors = flavors,
	.hf_keys = hf_keys,
	.hf_config = hf_config,
};
