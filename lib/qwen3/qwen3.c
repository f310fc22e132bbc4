/* The Qwen3 family (torchtitan/models/qwen3, v0.2.2): Llama's block with
 * heads of 128 whatever the width, QK-norm (an RMSNorm over each head of q and
 * k before RoPE), RoPE on halves (HF's rotate_half, not Llama's interleaved
 * pairs) with theta 1e6, RMSNorm eps 1e-6, an explicit FFN size, and tied
 * embeddings in the small flavors.  The MoE flavors (Qwen3-MoE) make every
 * layer's feed-forward a mixture of experts: softmax scores, top 8, weights
 * normalised to sum 1, applied to the experts' outputs.  HF: Qwen3ForCausalLM
 * and Qwen3MoeForCausalLM, whose q_proj / k_proj need no row permutation (both
 * sides rotate halves). */
#include <jansson.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/family.h"

extern const model_family qwen3_family;

#define QWEN3(nm, d, layers, heads, kv, vocab, hidden, tied, seq)                           \
	{.name = nm, .dim = d, .n_layers = layers, .n_heads = heads, .n_kv_heads = kv,      \
	 .vocab_size = vocab, .norm_eps = 1e-6, .rope_theta = 1e6, .tied_embeddings = tied, \
	 .max_seq_len = seq, .family = &qwen3_family, .head_dim = 128,                      \
	 .hidden_dim = hidden, .qk_norm = 1, .rope_style = BE_ROPE_HALF}

/* MoEArgs of torchtitan's Qwen3-MoE flavors (load_balance_coeff is MoEArgs'
 * default; see qwen3_family's note on it). */
#define QWEN3_MOE(nm, d, layers, heads, kv, vocab, hidden, seq, theta, ne, nk, ni)           \
	{.name = nm, .dim = d, .n_layers = layers, .n_heads = heads, .n_kv_heads = kv,         \
	 .vocab_size = vocab, .norm_eps = 1e-6, .rope_theta = theta, .max_seq_len = seq,       \
	 .family = &qwen3_family, .head_dim = 128, .hidden_dim = hidden, .qk_norm = 1,         \
	 .rope_style = BE_ROPE_HALF,                                                           \
	 .moe = {.experts = ne, .top_k = nk, .score = BE_MOE_SOFTMAX, .route_norm = 1,         \
		 .route_scale = 1.0, .load_balance_coeff = 1e-3, .inter_dim = ni}}

/* torchtitan's qwen3_args ("debugmodel_moe_small" is titan's: debugmodel_moe
 * holds 316M parameters, too many for the CPU tests).  max_seq_len is 0.3.0's
 * RoPE cache length (CosSinRoPE.Config's, Qwen3's 40960 context; 0.2.2 had
 * 4096, and 262144 for 30B-A3B): no scaling, so only the longest sequence a
 * 0.3.0 run may train on, and the max_position_embeddings of an HF export. */
static const llama_args flavors[] = {
	QWEN3("debugmodel", 256, 8, 16, 8, 2048, 3072, 1, 4096),
	QWEN3("0.6B", 1024, 28, 16, 8, 151936, 3072, 1, 40960),
	QWEN3("1.7B", 2048, 28, 16, 8, 151936, 6144, 1, 40960),
	QWEN3("4B", 2560, 36, 32, 8, 151936, 9728, 1, 40960),
	QWEN3("8B", 4096, 36, 32, 8, 151936, 12288, 0, 40960),
	QWEN3("14B", 5120, 40, 40, 8, 151936, 17408, 0, 40960),
	QWEN3("32B", 5120, 64, 64, 8, 151936, 25600, 0, 40960),
	QWEN3_MOE("debugmodel_moe", 256, 8, 16, 8, 2048, 3072, 4096, 1e6, 64, 8, 768),
	QWEN3_MOE("30B-A3B", 2048, 48, 32, 4, 151936, 6144, 40960, 1e6, 128, 8, 768),
	QWEN3_MOE("235B-A22B", 4096, 94, 64, 4, 151936, 12288, 40960, 5e6, 128, 8, 1536),
	QWEN3_MOE("debugmodel_moe_small", 256, 4, 4, 2, 2048, 3072, 4096, 1e6, 8, 2, 256),
	{0},
};

/* torchtitan's Qwen3StateDictAdapter. */
static const dcp_hf_key hf_keys[] = {
	DCP_HF_KEYS_EDGES,
	DCP_HF_KEY_ATTN("wq", "q", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wk", "k", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wv", "v", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wo", "o", DCP_HF_PLAIN),
	{"layers.{}.attention.q_norm.weight", "model.layers.{}.self_attn.q_norm.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.k_norm.weight", "model.layers.{}.self_attn.k_norm.weight",
	 DCP_HF_PLAIN},
	DCP_HF_KEYS_FFN("mlp"),
	DCP_HF_KEYS_LAYER_NORMS,
	DCP_HF_KEYS_EXPERTS_PER_EXPERT,
	{"layers.{}.moe.expert_bias", NULL, DCP_HF_DROP},
	{NULL, NULL, 0},
};

/* Qwen3ForCausalLM's (Qwen3MoeForCausalLM's) config.json, as the Qwen3
 * releases write it. */
static int hf_config(json_t *c, const dcp_hf_model *m)
{
	json_t *arch = json_array();
	json_array_append_new(arch, json_string(m->n_experts ? "Qwen3MoeForCausalLM"
							     : "Qwen3ForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	if (m->n_experts) {
		json_object_set_new(c, "decoder_sparse_step", json_integer(1));
		json_object_set_new(c, "mlp_only_layers", json_array());
		json_object_set_new(c, "moe_intermediate_size", json_integer(m->moe_inter));
		json_object_set_new(c, "norm_topk_prob", json_boolean(m->route_norm));
		json_object_set_new(c, "num_experts", json_integer(m->n_experts));
		json_object_set_new(c, "num_experts_per_tok", json_integer(m->top_k));
		json_object_set_new(c, "output_router_logits", json_false());
		json_object_set_new(c, "router_aux_loss_coef", json_real(0.001));
	}
	if (m->vocab_size == 151936) {
		json_object_set_new(c, "bos_token_id", json_integer(151643));
		json_object_set_new(c, "eos_token_id", json_integer(151645));
	}
	json_object_set_new(c, "max_window_layers", json_integer(m->n_layers));
	json_object_set_new(c, "model_type", json_string(m->n_experts ? "qwen3_moe" : "qwen3"));
	json_object_set_new(c, "rope_scaling", json_null());
	json_object_set_new(c, "sliding_window", json_null());
	json_object_set_new(c, "use_sliding_window", json_false());
	return 0;
}

/* load_balance_coeff: torchtitan 0.2.2's Qwen3 TrainSpec builds plain
 * optimizers, so its expert_bias (a persistent buffer, MoEArgs' default
 * coefficient 1e-3) stays 0; titan updates it after every step as MoEArgs
 * asks (model_moe_balance), which the DeepSeek-V3 recipe relies on. */
const model_family qwen3_family = {
	.name = "qwen3",
	.description = "Qwen3 and Qwen3-MoE: heads of 128, QK-norm, rotate-half RoPE",
	.flavors = flavors,
	.tied_init_as_output = 1,
	.hf_keys = hf_keys,
	.hf_config = hf_config,
};
