/* The DeepSeek V3 family (torchtitan/models/deepseek_v3, v0.2.2): multi-head
 * latent attention (model_mla.c) with YaRN RoPE on interleaved pairs, the
 * first n_dense_layers dense SwiGLUs of inter_dim, the others mixtures of
 * experts of moe_inter_dim with shared experts (softmax scores in the debug,
 * 16B and 236B flavors, DeepSeek-V2's; sigmoid, node-limited groups, weights
 * normalised and scaled in 671B, DeepSeek-V3's), aux-loss-free balancing
 * (expert_bias).  YaRN and its softmax mscale apply only when the training
 * sequence exceeds original_seq_len (4096), as torchtitan decides.  The final
 * norm is nn.RMSNorm's default (float32's epsilon), not norm_eps.
 * HF: DeepseekV3ForCausalLM (sigmoid flavors) or DeepseekV2ForCausalLM
 * (softmax), torchtitan's DeepSeekV3StateDictAdapter's names; no RoPE row
 * permutation (HF's rope_interleave rotates the same pairs); expert_bias is
 * HF's e_score_correction_bias.  0.3.0's multi-token prediction depths
 * (mtp_layers.<k>) are HF's layers after the last (lib/dcp/hf.c). */
#include <float.h>
#include <jansson.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/family.h"

extern const model_family deepseek_v3_family;

/* DeepSeekV3ModelArgs' defaults around a flavor's dims, its latent
 * attention's DeepSeekV3ModelArgs' too (DSV3) or given (DSV3_MLA). */
#define DSV3_MLA(nm, v, d, inter, minter, layers, dense, heads, qlora, kvlora, nope, rot, vdim, \
		 mscl)                                                                          \
	.name = nm, .vocab_size = v, .dim = d, .hidden_dim = inter, .n_layers = layers,         \
	.n_heads = heads, .n_kv_heads = heads, .norm_eps = 1e-5, .final_norm_eps = FLT_EPSILON,  \
	.rope_theta = 10000, .max_seq_len = 16384, .family = &deepseek_v3_family,               \
	.head_dim = (nope) + (rot), .rope_style = BE_ROPE_INTERLEAVED,                          \
	.rope = {.kind = ROPE_SCALE_YARN, .factor = 40, .low = 1, .high = 32, .orig = 4096,     \
		 .truncate = 1, .beyond_orig = 1},                                              \
	.mla = {.q_lora_rank = qlora, .kv_lora_rank = kvlora, .qk_nope_head_dim = nope,         \
		.qk_rope_head_dim = rot, .v_head_dim = vdim, .mscale = mscl}
#define DSV3(nm, v, d, inter, minter, layers, dense, heads, qlora, mscl)                      \
	DSV3_MLA(nm, v, d, inter, minter, layers, dense, heads, qlora, 512, 128, 64, 128, mscl)

/* MoEArgs (load_balance_coeff: MoEArgs' default 1e-3). */
#define MOE(ne, sh, k, sc, norm, rscale, grp, lim, minter, dense)                             \
	.moe = {.experts = ne, .shared_experts = sh, .top_k = k, .score = sc, .route_norm = norm, \
		.route_scale = rscale, .groups = grp, .limited = lim, .load_balance_coeff = 1e-3,  \
		.inter_dim = minter, .dense_layers = dense}

/* torchtitan's deepseekv3_args (debugmodel_flex_attn and the larger flavors'
 * attn_mask_type "block_causal" document masking is not built: their
 * attention here is plain causal).  debugmodel_small is titan's: debugmodel
 * with 4 heads and a narrower latent attention (kv_lora_rank 64, q/k heads of
 * 32 + 16 rotary, v heads of 32), 12 M parameters to its 33 M and a quarter
 * of its work a token, for the CPU tests of the parallel plans. */
static const llama_args flavors[] = {
	{DSV3("debugmodel", 2048, 256, 1024, 256, 6, 1, 16, 0, 0.70),
	 MOE(8, 2, 3, BE_MOE_SOFTMAX, 0, 1.0, 0, 0, 256, 1)},
	{DSV3("16B", 102400, 2048, 10944, 1408, 27, 1, 16, 0, 0.70),
	 MOE(64, 2, 6, BE_MOE_SOFTMAX, 0, 1.0, 0, 0, 1408, 1)},
	{DSV3("236B", 102400, 5120, 12288, 1536, 60, 1, 128, 1536, 1.0),
	 MOE(160, 2, 6, BE_MOE_SOFTMAX, 0, 16.0, 8, 3, 1536, 1)},
	{DSV3("671B", 129280, 7168, 18432, 2048, 61, 3, 128, 1536, 1.0),
	 MOE(256, 1, 8, BE_MOE_SIGMOID, 1, 2.5, 8, 4, 2048, 3)},
	{DSV3_MLA("debugmodel_small", 2048, 256, 1024, 256, 6, 1, 4, 0, 64, 32, 16, 32, 0.70),
	 MOE(8, 2, 3, BE_MOE_SOFTMAX, 0, 1.0, 0, 0, 256, 1)},
	{0},
};

/* torchtitan's DeepSeekV3StateDictAdapter (q_proj without a q bottleneck,
 * q_a_proj / q_a_layernorm / q_b_proj with one). */
static const dcp_hf_key hf_keys[] = {
	DCP_HF_KEYS_EDGES,
	DCP_HF_KEY_ATTN("wq", "q", DCP_HF_PLAIN),
	{"layers.{}.attention.wq_a.weight", "model.layers.{}.self_attn.q_a_proj.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.q_norm.weight", "model.layers.{}.self_attn.q_a_layernorm.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.wq_b.weight", "model.layers.{}.self_attn.q_b_proj.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.wkv_a.weight", "model.layers.{}.self_attn.kv_a_proj_with_mqa.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.kv_norm.weight", "model.layers.{}.self_attn.kv_a_layernorm.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.attention.wkv_b.weight", "model.layers.{}.self_attn.kv_b_proj.weight",
	 DCP_HF_PLAIN},
	DCP_HF_KEY_ATTN("wo", "o", DCP_HF_PLAIN),
	DCP_HF_KEYS_LAYER_NORMS,
	DCP_HF_KEYS_FFN("mlp"),
	DCP_HF_KEYS_EXPERTS_PER_EXPERT,
	{"layers.{}.moe.shared_experts.w1.weight", "model.layers.{}.mlp.shared_experts.gate_proj.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.shared_experts.w2.weight", "model.layers.{}.mlp.shared_experts.down_proj.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.shared_experts.w3.weight", "model.layers.{}.mlp.shared_experts.up_proj.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.expert_bias", "model.layers.{}.mlp.gate.e_score_correction_bias",
	 DCP_HF_PLAIN},
	/* a multi-token prediction depth's own (mtp_layers.<k>: HF's layer n + k) */
	{"layers.{}.enorm.weight", "model.layers.{}.enorm.weight", DCP_HF_PLAIN},
	{"layers.{}.hnorm.weight", "model.layers.{}.hnorm.weight", DCP_HF_PLAIN},
	{"layers.{}.eh_proj.weight", "model.layers.{}.eh_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.mtp_norm.weight", "model.layers.{}.shared_head.norm.weight", DCP_HF_PLAIN},
	{NULL, NULL, 0},
};

static void set_int(json_t *c, const char *k, int64_t v)
{
	json_object_set_new(c, k, json_integer(v));
}

static void set_real(json_t *c, const char *k, double v)
{
	json_object_set_new(c, k, json_real(v));
}

/* DeepseekV3ForCausalLM's config.json (DeepseekV2ForCausalLM's for softmax
 * scores, which V3's router cannot express), as the releases write it: the
 * shapes as the checkpoint has them, the routing and RoPE as the flavor says. */
static int hf_config(json_t *c, const dcp_hf_model *m)
{
	const llama_args *a = m->args;
	if (!a)
		return -1;
	const moe_args *mo = &a->moe;
	int v3 = mo->score == BE_MOE_SIGMOID;
	json_t *arch = json_array();
	json_array_append_new(arch, json_string(v3 ? "DeepseekV3ForCausalLM"
						   : "DeepseekV2ForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	set_int(c, "head_dim", m->qk_rope); /* DeepseekV3Config's head_dim: the rotary dims */
	json_object_set_new(c, "model_type", json_string(v3 ? "deepseek_v3" : "deepseek_v2"));
	json_object_set_new(c, "attention_bias", json_false());
	set_int(c, "first_k_dense_replace", m->dense_layers);
	set_int(c, "intermediate_size", m->ffn_hidden);
	set_int(c, "kv_lora_rank", m->kv_lora);
	set_int(c, "moe_intermediate_size", m->moe_inter);
	set_int(c, "n_group", mo->groups ? mo->groups : 1);
	set_int(c, "n_routed_experts", m->n_experts);
	set_int(c, "n_shared_experts", mo->shared_experts);
	json_object_set_new(c, "norm_topk_prob", json_boolean(mo->route_norm));
	set_int(c, "num_experts_per_tok", mo->top_k);
	json_object_set_new(c, "q_lora_rank", m->q_lora ? json_integer(m->q_lora) : json_null());
	set_int(c, "qk_nope_head_dim", m->qk_nope);
	set_int(c, "qk_rope_head_dim", m->qk_rope);
	set_int(c, "v_head_dim", m->v_head);
	json_object_set_new(c, "rope_interleave", json_true());
	set_real(c, "routed_scaling_factor", mo->route_scale);
	json_object_set_new(c, "scoring_func", json_string(v3 ? "sigmoid" : "softmax"));
	json_object_set_new(c, "topk_method", json_string(v3 ? "noaux_tc" : mo->groups
							     ? "group_limited_greedy" : "greedy"));
	set_int(c, "topk_group", mo->groups ? mo->limited : 1);
	json_t *r = json_object();
	json_object_set_new(r, "type", json_string("yarn"));
	json_object_set_new(r, "rope_type", json_string("yarn"));
	set_real(r, "factor", a->rope.factor);
	set_real(r, "beta_fast", a->rope.high);
	set_real(r, "beta_slow", a->rope.low);
	set_real(r, "mscale", a->mla.mscale);
	set_real(r, "mscale_all_dim", a->mla.mscale);
	set_int(r, "original_max_position_embeddings", (int64_t)a->rope.orig);
	json_object_set_new(c, "rope_scaling", r);
	if (m->mtp_layers > 0) /* the depths after num_hidden_layers */
		set_int(c, "num_nextn_predict_layers", m->mtp_layers);
	return 0;
}

const model_family deepseek_v3_family = {
	.name = "deepseek_v3",
	.description = "DeepSeek V2/V3: MLA with YaRN, dense then MoE layers, shared experts",
	.flavors = flavors,
	.hf_keys = hf_keys,
	.hf_config = hf_config,
};
