/* textenc.h: the frozen text encoders of Flux (torchtitan's FluxEmbedder,
 * models/flux/model/hf_embedder.py), forward only, in float32 or with the
 * bfloat16 model's roundings:
 *
 *   t5_encoder  transformers' T5EncoderModel in its v1.1 form
 *               (feed_forward_proj "gated-gelu"); FluxEmbedder takes its
 *               last_hidden_state (B, L, d_model).
 *   clip_text   transformers' CLIPTextModel; FluxEmbedder takes its
 *               pooler_output (B, hidden).
 *
 * FluxEmbedder calls both with attention_mask=None, so neither takes a padding
 * mask: padding tokens are encoded and attended to as transformers does then.
 *
 * T5 v1.1 (modeling_t5.py), per block, x the residual stream (B*L, d_model):
 *   x += o(softmax(q(n) k(n)^T + bias) v(n)) per head,  n = rmsnorm(x)
 *        ("T5LayerNorm": x / sqrt(mean(x^2) + eps) * w, no mean, no bias);
 *   the scores have NO 1/sqrt(d_kv) scaling; bias (h, L, L) is the relative
 *   position bias that block 0's relative_attention_bias (buckets, h) gives
 *   and every block shares (t5_relative_bucket);
 *   x += wo(gelu_new(wi_0(n)) * wi_1(n)),  n = rmsnorm(x); gelu_new is the tanh
 *   approximation; then the final rmsnorm.  Linears have no bias.
 * CLIP text (modeling_clip.py): x = token_embedding[ids] + position_embedding[0..L);
 *   per layer x += out_proj(causal attention, scale 1/sqrt(head_dim)) of
 *   layer_norm1(x), x += fc2(quick_gelu(fc1(layer_norm2(x)))) with
 *   quick_gelu(y) = y sigmoid(1.702 y); then final_layer_norm; the pooled row
 *   of sequence b is, as transformers picks it: with eos_token_id 2 (configs
 *   older than transformers PR #24773, Flux's clip-vit-large-patch14) the
 *   position of the largest id (the first of equals); else the first position
 *   holding eos_token_id (0 when there is none).  Linears and layer norms have
 *   biases.
 *
 * Loading: a model folder as save_pretrained writes it (config.json and
 * model.safetensors, or model.safetensors.index.json and its shards), through
 * lib/safetensors.  Weights may be stored F32, BF16 or F16; they are converted
 * to the model's type (t5_encoder_open).  A CLIPModel config.json (model_type
 * "clip") is read through its text_config; CLIP tensor names are found with
 * or without the "text_model." prefix (transformers 4 writes it, 5 does not);
 * T5's token embedding is "encoder.embed_tokens.weight" or the tied
 * "shared.weight".  Every tensor's shape is checked against the config; a
 * missing or misshapen one is an error naming it.
 *
 * Computation: the weights and activations live in the memory of a backend
 * (lib/backend) and every step is a backend op (the linears, norms,
 * embeddings, residual adds, biases, both attentions, T5's gated gelu_new,
 * CLIP's quick_gelu as swish with beta 1.702), so the encoders run on any
 * backend, the CPU's or a GPU's; only the ids' checks, CLIP's pooled
 * positions and T5's position bias table (h, l, l) are computed on the host.
 * The models keep a pointer to the backend, which must outlive them.
 * bfloat16: see t5_encoder_open. */
#ifndef TITAN_TEXTENC_H
#define TITAN_TEXTENC_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef struct t5_config {
	int64_t vocab, d_model, d_kv, n_heads, d_ff, n_layers;
	int64_t n_buckets;    /* relative_attention_num_buckets (32) */
	int64_t max_distance; /* relative_attention_max_distance (128) */
	float eps;            /* layer_norm_epsilon (1e-6) */
} t5_config;

typedef struct clip_config {
	int64_t vocab, hidden, intermediate, n_heads, n_layers, max_pos;
	float eps;            /* layer_norm_eps (1e-5) */
	int64_t eos_id;       /* eos_token_id (49407); 2 pools at the largest id */
} clip_config;

/* Read an HF config.json; absent optional fields take transformers' defaults.
 * A T5 config must say feed_forward_proj "gated-gelu" and a CLIP one
 * hidden_act "quick_gelu" (the only forms implemented). */
int t5_config_read(t5_config *c, const char *path, titan_err *err);
int clip_config_read(clip_config *c, const char *path, titan_err *err);

/* T5's bidirectional relative position bucket of key position minus query
 * position (transformers' _relative_position_bucket with bidirectional=True):
 * half the buckets per direction, the first half of those exact distances,
 * the rest logarithmic up to max_distance, the farther ones in the last. */
int64_t t5_relative_bucket(int64_t rel, int64_t n_buckets, int64_t max_distance);

typedef struct t5_encoder t5_encoder;
typedef struct clip_text clip_text;

/* Open DIR (config.json and the safetensors), weights into be's memory; NULL
 * and err on failure.  Free with t5_encoder_free / clip_text_free.
 * dtype BE_F32: the float32 model (torchtitan's encoders without FSDP).
 * dtype BE_BF16: the model cast to bfloat16, as torchtitan's Flux trainer
 * casts its encoders to training.mixed_precision_param when FSDP is on (a
 * whole-model .to(bfloat16), not autocast): the weights rounded to bfloat16
 * as they load, and every tensor the bf16 model stores held in bfloat16
 * (half the memory), each op computing in float32 and rounding where it
 * stores, with the bf16 model's roundings inside the ops where it has more
 * (T5's attention scores and probabilities, gelu_new before its gate,
 * quick_gelu's 1.702 y and sigmoid before its product; see backend.h); only
 * gelu_new's own chain of ops is rounded at its end alone, and a linear's
 * bias joins its product before the one rounding (torch's addmm). */
t5_encoder *t5_encoder_open(backend *be, const char *dir, be_dtype dtype, titan_err *err);
clip_text *clip_text_open(backend *be, const char *dir, be_dtype dtype, titan_err *err);
const t5_config *t5_encoder_config(const t5_encoder *m);
const clip_config *clip_text_config(const clip_text *m);
void t5_encoder_free(t5_encoder *m);
void clip_text_free(clip_text *m);

/* ids (b, l) host int32, each in [0, vocab) (else an error naming it).
 * T5:   out (b, l, d_model) host float32, last_hidden_state.
 * CLIP: out (b, hidden) host float32, pooler_output; l <= max_pos. */
int t5_encoder_forward(t5_encoder *m, const int32_t *ids, int64_t b, int64_t l, float *out,
		       titan_err *err);
int clip_text_forward(clip_text *m, const int32_t *ids, int64_t b, int64_t l, float *out,
		      titan_err *err);

#endif
