/* flavor.h: the shape of a model (torchtitan's ModelArgs), for every family
 * (family.h): the Llama 3 fields, and the ones other families set.  A field
 * left 0 means Llama 3's behaviour, so a Llama flavor is written as before. */
#ifndef TITAN_FLAVOR_H
#define TITAN_FLAVOR_H

#include <stdint.h>

typedef struct model_family model_family;

/* A mixture-of-experts feed-forward (torchtitan's MoEArgs and moe_inter_dim). */
typedef struct moe_args {
	int experts;               /* num_experts; 0: the layers are dense */
	int shared_experts;        /* num_shared_experts: one SwiGLU of shared_experts *
	                              inter_dim that every token goes through */
	int top_k;                 /* experts per token */
	int score;                 /* be_moe_score: 0 softmax, 1 sigmoid */
	int route_norm;            /* normalise each token's top_k scores to sum 1 */
	double route_scale;        /* then scale them (1.0) */
	int score_before_experts;  /* weight the experts' inputs (1) or outputs (0) */
	int dense_layers;          /* DeepSeek V3's n_dense_layers: the first layers are
	                              dense SwiGLUs of hidden_dim */
	int interleave;            /* Llama 4's interleave_moe_layer_step: layer l is a
	                              mixture when (l + 1) % interleave == 0 (0: every) */
	int groups, limited;       /* node-limited routing: num_expert_groups,
	                              num_limited_groups (0: off) */
	double load_balance_coeff; /* aux-loss-free balancing: expert_bias steps of this
	                              size after each step (0: no expert_bias) */
	double capacity_factor;    /* an expert takes at most ceil(factor * tokens *
	                              top_k / experts) per micro-batch; 0: no limit */
	int inter_dim;             /* each expert's hidden size (moe_inter_dim) */
	int force_balance;         /* debug.moe_force_load_balance: round-robin routing */
	int gate_bias;             /* the router's linear has a bias (GPT-OSS) */
	double swiglu_limit;       /* GPT-OSS's experts (0: w1 w3 w2 SwiGLUs): mlp1 (gate
	                              and up rows interleaved) + bias, the clamped SwiGLU
	                              (alpha 1.702, this limit), mlp2 + bias */
} moe_args;

/* How a flavor stretches RoPE's frequencies for long contexts (torchtitan's
 * precompute_freqs_cis of each family; HF's rope_scaling). */
enum rope_scale_kind {
	ROPE_SCALE_NONE,
	ROPE_SCALE_LLAMA3, /* Llama 3.1 / Llama 4: wavelengths above orig/low divided
	                      by factor, below orig/high kept, smoothed between */
	ROPE_SCALE_YARN,   /* YaRN (DeepSeek V3, GPT-OSS): frequencies blended between
	                      f/factor and f over the dims whose rotations in orig
	                      positions fall from high (beta_fast) to low (beta_slow) */
};
typedef struct rope_scaling {
	int kind;          /* rope_scale_kind */
	double factor;
	double low, high;  /* LLAMA3: low_freq_factor, high_freq_factor; YARN:
	                      beta_slow, beta_fast */
	double orig;       /* original context (original_max_position_embeddings,
	                      original_seq_len) */
	int truncate;      /* YARN: the blending range rounded out to whole dims
	                      (DeepSeek's find_correction_range; HF's truncate) */
	int beyond_orig;   /* YARN only when max_seq_len > orig (torchtitan's DeepSeek
	                      V3 decides so from training.seq_len) */
	double cs_scale;   /* cos and sin multiplied by this (GPT-OSS's YaRN
	                      concentration 0.1 ln(factor) + 1, which scales the
	                      attention logits by its square); 0: 1 */
} rope_scaling;

/* Multi-head latent attention (DeepSeek V2/V3, torchtitan's MLA): q from dim
 * (or through a q_lora_rank bottleneck with its RMSNorm), k and v from a
 * kv_lora_rank latent with its RMSNorm plus one shared rope key of
 * qk_rope_head_dim per token; query/key heads of qk_nope + qk_rope dims,
 * value heads of v_head_dim.  kv_lora_rank 0: not MLA. */
typedef struct mla_args {
	int q_lora_rank;      /* 0: q = wq x */
	int kv_lora_rank;     /* 512 */
	int qk_nope_head_dim; /* 128 */
	int qk_rope_head_dim; /* 64 */
	int v_head_dim;       /* 128 */
	double mscale;        /* YaRN's softmax scale 0.1 mscale ln(factor) + 1 (squared)
	                         when the YaRN of rope applies */
	double norm_eps;      /* q_norm's and kv_norm's eps; 0: norm_eps, as torchtitan
	                         (HF's DeepSeek modules fix them at 1e-6) */
} mla_args;

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
	double rope_scale_factor;  /* Llama 3.1 frequency scaling factor (8, torchtitan's), 0 for
	                              none; low 1, high 4, original context 8192 */
	int tied_embeddings;       /* the output projection is tok_embeddings (Llama 3.2
	                              1B/3B, small Qwen3) */
	int max_seq_len;

	/* Set by families other than Llama 3 (0: Llama 3's choice). */
	const model_family *family; /* NULL: llama3 */
	int head_dim;              /* 0: dim / n_heads */
	int hidden_dim;            /* FFN hidden size; 0: Llama's rule (flavor_ffn_hidden) */
	double final_norm_eps;     /* the final norm's eps; 0: norm_eps (torchtitan's
	                              DeepSeek V3 leaves it at nn.RMSNorm's default, float32's
	                              epsilon) */
	int qk_norm;               /* RMSNorm (per head, weight of head_dim) on q and k
	                              before RoPE (Qwen3) */
	int rope_style;            /* be_rope_style: 0 interleaved pairs (Llama), 1 halves
	                              (Qwen3, HF's rotate_half) */
	moe_args moe;              /* experts 0: dense SwiGLU layers */

	/* Attention variants (0: off), by torchtitan's per-layer rules. */
	rope_scaling rope;         /* kind NONE with rope_scale_factor > 0: Llama 3.1's */
	mla_args mla;              /* kv_lora_rank > 0: every layer's attention is MLA */
	int sliding_window;        /* GPT-OSS: the even layers (layer_id % 2 == 0) see
	                              the last sliding_window positions */
	int attn_sinks;            /* GPT-OSS: a learned sink logit per query head */
	int attn_bias;             /* GPT-OSS: wq wk wv wo carry biases */
	int nope_every;            /* Llama 4's iRoPE: layers with layer_id % nope_every
	                              == 0 have no RoPE (NoPE) and see the whole causal
	                              context; the others ... */
	int attn_chunk;            /* ... attend within chunks of attn_chunk positions
	                              (fixed_attn_block_size) */
	int qk_l2_norm;            /* Llama 4 (HF's use_qk_norm): q and k of the RoPE
	                              layers divided by their RMS (no weight) after RoPE */
	int attn_temp_floor;       /* Llama 4 (HF's attn_temperature_tuning, floor_scale
	                              8192; 0: off): NoPE layers scale q by 1 +
	                              attn_temp_scale ln(floor((pos + 1) / floor) + 1) */
	double attn_temp_scale;    /* 0.1 */

	/* DeepSeek V3's multi-token prediction (torchtitan 0.3.0's num_mtp_layers and
	 * MTPLoss; 0: none): mtp_layers blocks after the last one, depth k predicting
	 * the token k + 1 ahead from the previous depth's output and the embedding of
	 * the token k ahead; their loss weighs mtp_scale / mtp_layers in the loss. */
	int mtp_layers;
	double mtp_scale;          /* MTPLoss.mtp_scale: 0.3 */

	/* torchtitan 0.3.0's LoRAConverter (components/lora.py; 0: none): each
	 * layer's attention.wo gains adapters lora_a (rank, h*hd), drawn as
	 * nn.Linear's kaiming uniform, and lora_b (dim, rank), zeros; its output
	 * becomes wo(x) + (lora_alpha / lora_rank) lora_b(lora_a(x)), and every
	 * other parameter is frozen (no gradient, no optimizer state). */
	int lora_rank;
	double lora_alpha;
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

/* The RoPE scaling in force for a model of these args (Llama 3.1's from
 * rope_scale_factor; YaRN dropped when it applies beyond_orig only and
 * max_seq_len does not exceed orig). */
rope_scaling flavor_rope_scaling(const llama_args *a);
/* The (cos, sin) table (t, hd/2, 2) of positions pos0 .. pos0 + t - 1 (pos
 * NULL) or pos[0 .. t-1], rotary dims hd, under the flavor's theta and
 * scaling; computed in double. */
void flavor_rope_table(const llama_args *a, double *cs, int64_t t, int64_t hd, int64_t pos0,
		       const int64_t *pos);

/* Parameter counts, with and without the embedding table (torchtitan subtracts
 * the embedding when it counts flops per token).  Layers are dense or mixtures
 * of experts as model_family_moe_layer says. */
int64_t flavor_param_count(const llama_args *a);
int64_t flavor_embedding_params(const llama_args *a);
/* The parameters a token computes with: the experts' count scaled by top_k /
 * experts, as torchtitan's get_moe_model_nparams_and_flops (== the total for
 * a dense flavor). */
int64_t flavor_active_params(const llama_args *a);

#endif
