/* flux.h: the Flux transformer (torchtitan 0.3.0's FluxModel,
 * models/flux/model/model.py and layers.py), one training step's forward,
 * rectified-flow loss and backward in float32, every parameter's gradient
 * (the encoders and the autoencoder are frozen: no input gradients).
 *
 * With h hidden, H heads of D = h/H, F = int(h * mlp_ratio), per sample:
 *   img  = img_in(img latents (Li, in_channels))              (Li, h)
 *   txt  = txt_in(T5 states (Lt, context_in_dim))             (Lt, h)
 *   vec  = time_in(timestep_embedding(t, 256)) + vector_in(y) (h)
 *          MLPEmbedder: out_layer(silu(in_layer(x)));
 *          timestep_embedding: [cos(1000 t f), sin(1000 t f)], f_i =
 *          exp(-ln(10000) i / 128)
 *   pe   = EmbedND over ids = [txt_ids; img_ids] (L = Lt + Li, 3): pair p of
 *          a head's D/2 (axes_dim's pairs in axis order) turns by
 *          ids[axis] / theta^(2p'/axes_dim[axis]) (p' the pair within its axis),
 *          interleaved pairs (x[2p], x[2p+1])
 *   double_blocks (depth): per stream s (img, txt) with its own weights:
 *          shift1 scale1 gate1 shift2 scale2 gate2 = s_mod.lin(silu(vec));
 *          a = (1 + scale1) LN(s) + shift1; q k v = s_attn.qkv(a) (K H D);
 *          q, k = RMSNorm_D(q), RMSNorm_D(k) (s_attn.norm, eps 1e-5);
 *          then [txt; img] joined: q, k turned by pe, attention (no mask,
 *          1/sqrt(D)); split back; s += gate1 s_attn.proj(attn_s);
 *          s += gate2 s_mlp.2(gelu_tanh(s_mlp.0((1 + scale2) LN(s) + shift2)))
 *   single_blocks (depth_single_blocks) over x = [txt; img] (L, h):
 *          shift scale gate = modulation.lin(silu(vec)); a = (1+scale) LN(x)
 *          + shift; [q k v | m] = linear1(a) (3h + F); q, k normed and turned
 *          as above; x += gate linear2([attention | gelu_tanh(m)])
 *   final_layer on x's image rows: shift scale = adaLN_modulation.1(silu(vec));
 *          pred = linear((1 + scale) LN(x) + shift)   (Li, out_channels)
 * LN is LayerNorm(h, eps 1e-6) without affine parameters.
 *
 * Training (FluxTrainer.forward_backward_step): the latents x and noise
 * packed (flux_pack_latents), img = (1 - t) x + t noise per sample, target
 * noise - x, loss = sum((pred - target)^2) / numel (MSELoss over
 * global_valid_tokens = numel).
 *
 * Parameters are named as 0.3.0's state dict names them (img_in.weight,
 * time_in.in_layer.*, vector_in.*, txt_in.*, double_blocks.N.{img,txt}_mod.lin.*,
 * .{img,txt}_attn.qkv.*, .{img,txt}_attn.norm.{query,key}_norm.weight,
 * .{img,txt}_attn.proj.*, .{img,txt}_mlp.{0,2}.*, single_blocks.N.linear1.*,
 * .linear2.*, .norm.{query,key}_norm.weight, .modulation.lin.*,
 * final_layer.linear.*, final_layer.adaLN_modulation.1.*), in its order.
 * 0.3.0's flavors have no guidance embedder (BFL's guidance_in): flux-dev
 * and flux-schnell are the same model there.
 *
 * Weights, gradients and activations live in the backend's memory and every
 * op on them is a backend op (the modulated LayerNorm, gated residuals,
 * GELU, SiLU and the loss included), so a model runs on any backend; the
 * noisy input, the timestep embedding and the RoPE tables are computed on the
 * host from the batch and uploaded.  The model keeps a pointer to the
 * backend, which must outlive it. */
#ifndef TITAN_FLUX_H
#define TITAN_FLUX_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef struct flux_config {
	const char *name;            /* the flavor's */
	int64_t in_channels, out_channels, vec_in_dim, context_in_dim;
	int64_t hidden_size, num_heads, depth, depth_single_blocks;
	double mlp_ratio;
	int64_t axes_dim[3];
	double theta;
	int qkv_bias;
} flux_config;

/* 0.3.0's flux_configs: "flux-dev", "flux-schnell", "flux-debug"; NULL when
 * there is no such flavor. */
const flux_config *flux_flavor(const char *name);
/* 0, or -1 and err naming the field: positive sizes, hidden_size divisible
 * by num_heads, axes_dim even and summing to the head dimension. */
int flux_config_check(const flux_config *c, titan_err *err);

typedef struct flux_model flux_model;

/* One parameter: its state-dict name, shape, and its weight and gradient
 * (backend memory, numel floats each). */
typedef struct flux_param {
	char name[64];
	int ndim;
	int64_t shape[2];
	int64_t numel;
	float *w, *g;
} flux_param;

/* A model of config c (copied) on be, weights uninitialised (they come
 * from a checkpoint or the caller), gradients zero.  NULL and err on a bad
 * config or no memory. */
flux_model *flux_model_create(backend *be, const flux_config *c, titan_err *err);
void flux_model_free(flux_model *m);
const flux_config *flux_model_config(const flux_model *m);
/* The type the step computes in: BE_F32 (the default: 0.3.0's float32 step,
 * dp_shard 1), or BE_BF16 as 0.3.0 computes under FSDP's
 * MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) (every
 * run with dp_shard > 1): the float32 weights cast to a bf16 copy once per
 * step, the inputs the model takes rounded to bf16 (fully_shard's
 * cast_forward_inputs; the encoders' outputs are bf16 there), activations
 * and the ops' outputs bf16 (float32 inside each op), the loss in float32,
 * each weight's gradient rounded to bf16 and then ACCUMULATED into its
 * float32 gradient.  The weights and gradients the caller sees stay
 * float32.  0, or -1 and err (another type; no memory for the bf16 copy,
 * 2 bytes a weight). */
int flux_model_set_compute(flux_model *m, be_dtype t, titan_err *err);
be_dtype flux_model_compute(const flux_model *m);
int flux_param_count(const flux_model *m);
const flux_param *flux_param_at(const flux_model *m, int i);
const flux_param *flux_param_find(const flux_model *m, const char *name);
/* Every gradient to zero (the backward accumulates). */
void flux_zero_grad(flux_model *m);

/* One step's inputs, host float32, with the sizes the caller's tensors
 * have (each checked against the model's):
 *   x, noise  (b, li, c_img) packed latents and their noise (c_img = in_channels)
 *   img_ids   (b, li, 3)      txt (b, lt, c_txt) T5's states (c_txt = context_in_dim)
 *   txt_ids   (b, lt, 3)      t (b) timesteps
 *   y         (b, c_vec) CLIP's pooled output (c_vec = vec_in_dim) */
typedef struct flux_batch {
	int64_t b, li, lt, c_img, c_txt, c_vec;
	const float *x, *noise, *img_ids, *txt, *txt_ids, *t, *y;
} flux_batch;

/* The step: forward on the noisy latent, the loss into *loss, and with
 * backward set every parameter's gradient ACCUMULATED.  pred, when not NULL,
 * receives the prediction (b, li, out_channels) host float32.  0, or -1 and
 * err (a size of the batch that does not fit the model, no memory). */
int flux_step(flux_model *m, const flux_batch *in, int backward, float *loss, float *pred,
	      titan_err *err);

/* utils.py's pack_latents: z (b, c, hl, wl) -> (b, (hl/2)(wl/2), 4c), each
 * 2x2 patch's values in (c, ph, pw) order; hl, wl even. */
void flux_pack_latents(float *out, const float *z, int64_t b, int64_t c, int64_t hl,
		       int64_t wl);
/* create_position_encoding_for_latents: ids (b, (hl/2)(wl/2), 3) = (0, row,
 * column) of each patch. */
void flux_latent_ids(float *ids, int64_t b, int64_t hl, int64_t wl);

#endif
