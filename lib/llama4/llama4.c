/* The Llama 4 family (torchtitan/models/llama4, v0.2.2): Llama 3's attention
 * and RoPE (interleaved pairs) with Llama 4's frequency scaling (factor 16,
 * low 1, high 1 over 8192: wavelengths past 8192 divided by 16), mixture-of-
 * experts layers interleaved with dense ones (every interleave-th layer), one
 * shared expert, top-1 sigmoid routing that weights the expert's input; the
 * experts' hidden size auto-scaled: int(int(2 * 4 dim / 3) * mult / (top_k +
 * shared)) rounded up to multiple_of.  The irope flavors make every 4th layer
 * (layer_id % 4 == 0) NoPE with full causal attention and the others attend
 * in fixed chunks (torchtitan's flex "block_causal" document masking is not
 * built: plain causal).  HF's Llama 4 options torchtitan lacks are flavor
 * fields: QK-norm after RoPE (qk_l2_norm) and the NoPE layers' attention
 * temperature (attn_temp_floor, attn_temp_scale).
 * HF: Llama4ForCausalLM (the text model), torchtitan's Llama4StateDictAdapter
 * names without the multimodal "language_model." prefix; the experts' fused
 * gate_up_proj (experts, dim, 2f) is w1 and w3 transposed side by side, their
 * down_proj w2 transposed; no RoPE row permutation (HF rotates interleaved
 * pairs as torchtitan does). */
#include <jansson.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/family.h"

extern const model_family llama4_family;

/* TransformerModelArgs' defaults; RoPEScalingArgs() when scaled. */
#define LLAMA4(nm, d, layers, heads, kv, vocab, mult, mof, seq, scaled, ne, step, inter)       \
	.name = nm, .dim = d, .n_layers = layers, .n_heads = heads, .n_kv_heads = kv,          \
	.vocab_size = vocab, .multiple_of = mof, .ffn_dim_multiplier = mult, .norm_eps = 1e-5, \
	.rope_theta = 500000, .max_seq_len = seq, .family = &llama4_family,                    \
	.rope = {.kind = scaled ? ROPE_SCALE_LLAMA3 : ROPE_SCALE_NONE, .factor = 16, .low = 1, \
		 .high = 1, .orig = 8192},                                                     \
	.moe = {.experts = ne, .shared_experts = 1, .top_k = 1, .score = BE_MOE_SIGMOID,       \
		.route_scale = 1.0, .score_before_experts = 1, .load_balance_coeff = 1e-3,     \
		.inter_dim = inter, .interleave = step}
#define IROPE(chunk) .nope_every = 4, .attn_chunk = chunk

/* torchtitan's llama4_args.  Experts' hidden sizes by the rule above:
 * debugmodel int(682 / 2) = 341 -> 512; 17B int(int(13653 * 1.2) / 2) = 8191
 * -> 8192. */
static const llama_args flavors[] = {
	{LLAMA4("debugmodel", 256, 6, 16, 16, 2048, 0, 256, 1048576, 1, 8, 2, 512)},
	{LLAMA4("17bx16e", 5120, 48, 40, 8, 202048, 1.2, 2048, 10485760, 1, 16, 1, 8192)},
	{LLAMA4("17bx128e", 5120, 48, 40, 8, 202048, 1.2, 2048, 1048576, 0, 128, 2, 8192)},
	{LLAMA4("debugmodel_irope", 256, 6, 16, 16, 2048, 0, 256, 1048576, 1, 8, 2, 512),
	 IROPE(256)},
	{LLAMA4("17bx16e_irope", 5120, 48, 40, 8, 202048, 1.2, 2048, 10485760, 1, 16, 1, 8192),
	 IROPE(8192)},
	{LLAMA4("17bx128e_irope", 5120, 48, 40, 8, 202048, 1.2, 2048, 1048576, 0, 128, 2, 8192),
	 IROPE(8192)},
	{0},
};

static const dcp_hf_key hf_keys[] = {
	DCP_HF_KEYS_EDGES,
	DCP_HF_KEY_ATTN("wq", "q", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wk", "k", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wv", "v", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wo", "o", DCP_HF_PLAIN),
	DCP_HF_KEYS_LAYER_NORMS,
	DCP_HF_KEYS_FFN("feed_forward"),
	{"layers.{}.moe.experts.w1", "model.layers.{}.feed_forward.experts.gate_up_proj",
	 DCP_HF_GATE_HALF},
	{"layers.{}.moe.experts.w3", "model.layers.{}.feed_forward.experts.gate_up_proj",
	 DCP_HF_UP_HALF},
	{"layers.{}.moe.experts.w2", "model.layers.{}.feed_forward.experts.down_proj",
	 DCP_HF_TRANSPOSE},
	{"layers.{}.moe.router.gate.weight", "model.layers.{}.feed_forward.router.weight",
	 DCP_HF_PLAIN},
	{"layers.{}.moe.shared_experts.w1.weight",
	 "model.layers.{}.feed_forward.shared_expert.gate_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.moe.shared_experts.w2.weight",
	 "model.layers.{}.feed_forward.shared_expert.down_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.moe.shared_experts.w3.weight",
	 "model.layers.{}.feed_forward.shared_expert.up_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.moe.expert_bias", NULL, DCP_HF_DROP},
	{NULL, NULL, 0},
};

static json_t *int_list(int n, int (*f)(const llama_args *, int), const llama_args *a)
{
	json_t *l = json_array();
	for (int i = 0; i < n; i++)
		if (f(a, i) >= 0)
			json_array_append_new(l, json_integer(f(a, i)));
	return l;
}

/* HF's no_rope_layers: 1 where the layer uses RoPE. */
static int uses_rope(const llama_args *a, int l)
{
	return !(a->nope_every > 0 && l % a->nope_every == 0);
}

static int moe_layer_or_none(const llama_args *a, int l)
{
	return model_family_moe_layer(a, l) ? l : -1;
}

/* Llama4ForCausalLM's config.json: the flavor's layer pattern spelled out
 * (moe_layers, no_rope_layers, the chunk only where torchtitan chunks). */
static int hf_config(json_t *c, const dcp_hf_model *m)
{
	const llama_args *a = m->args;
	if (!a)
		return -1;
	json_t *arch = json_array();
	json_array_append_new(arch, json_string("Llama4ForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	json_object_set_new(c, "model_type", json_string("llama4_text"));
	json_object_set_new(c, "attention_bias", json_false());
	json_object_set_new(c, "attention_chunk_size",
			    a->nope_every > 0 ? json_integer(a->attn_chunk) : json_null());
	json_object_set_new(c, "attn_temperature_tuning", json_boolean(a->attn_temp_floor > 0));
	json_object_set_new(c, "floor_scale", json_integer(a->attn_temp_floor > 0
								? a->attn_temp_floor : 8192));
	json_object_set_new(c, "attn_scale", json_real(a->attn_temp_floor > 0
							  ? a->attn_temp_scale : 0.1));
	json_object_set_new(c, "interleave_moe_layer_step",
			    json_integer(a->moe.interleave > 0 ? a->moe.interleave : 1));
	json_object_set_new(c, "intermediate_size", json_integer(m->moe_inter));
	json_object_set_new(c, "intermediate_size_mlp", json_integer(m->ffn_hidden));
	json_object_set_new(c, "moe_layers", int_list(m->n_layers, moe_layer_or_none, a));
	json_object_set_new(c, "no_rope_layers", int_list(m->n_layers, uses_rope, a));
	json_object_set_new(c, "num_experts_per_tok", json_integer(m->top_k));
	json_object_set_new(c, "num_local_experts", json_integer(m->n_experts));
	if (a->rope.kind == ROPE_SCALE_LLAMA3) {
		json_t *r = json_object();
		json_object_set_new(r, "rope_type", json_string("llama3"));
		json_object_set_new(r, "factor", json_real(a->rope.factor));
		json_object_set_new(r, "low_freq_factor", json_real(a->rope.low));
		json_object_set_new(r, "high_freq_factor", json_real(a->rope.high));
		json_object_set_new(r, "original_max_position_embeddings",
				    json_integer((int)a->rope.orig));
		json_object_set_new(c, "rope_scaling", r);
	} else {
		json_object_set_new(c, "rope_scaling", json_null());
	}
	json_object_set_new(c, "use_qk_norm", json_boolean(a->qk_l2_norm));
	return 0;
}

const model_family llama4_family = {
	.name = "llama4",
	.description = "Llama 4: interleaved MoE (shared expert, top-1 sigmoid), iRoPE chunks",
	.flavors = flavors,
	.hf_keys = hf_keys,
	.hf_config = hf_config,
};
