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
#include <stdio.h>

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

/* 0.3.0's flux_configs: "flux-dev", "flux-schnell", "flux-debug", and
 * titan's "flux-tiny"; NULL when there is no such flavor. */
const flux_config *flux_flavor(const char *name);
/* The flavors' names, ", " between them, for a message naming the choices
 * (cut short to fit n bytes). */
void flux_flavor_names(char *buf, size_t n);
/* 0, or -1 and err naming the field: positive sizes, hidden_size divisible
 * by num_heads, axes_dim even and summing to the head dimension. */
int flux_config_check(const flux_config *c, titan_err *err);
/* Flavor i in the table's order, NULL past the end. */
const flux_config *flux_flavor_at(int i);
/* The parameters a model of config c has. */
int64_t flux_config_param_count(const flux_config *c);
/* --list-flavors' table of the flavors. */
void flux_print_flavors(FILE *out);

typedef struct flux_model flux_model;

/* One parameter: its state-dict name, shape, and its weight and gradient
 * (backend memory, numel floats each). */
typedef struct flux_param {
	char name[64];
	int ndim;
	int64_t shape[2];
	int64_t numel;
	float *w, *g;
	/* The weight as the step reads it, in its compute type: w, or its
	 * place in the bf16 copy; on an unbound model what a unit's gather
	 * bound (flux_param_bind). */
	void *wc;
} flux_param;

/* The parameters a model of config c has, in state-dict order (the order
 * of flux_model_weights' run), without storage (w and g NULL): n of them, a
 * malloc'd array the caller frees; NULL and err on a bad config.  For
 * checking or converting a checkpoint of a model too large to build. */
flux_param *flux_param_table(const flux_config *c, int *n, titan_err *err);

/* A model of config c (copied) on be, weights uninitialised (they come
 * from a checkpoint or the caller), gradients zero.  NULL and err on a bad
 * config or no memory. */
flux_model *flux_model_create(backend *be, const flux_config *c, titan_err *err);
/* The same without storage: no weight, gradient or bf16 copy (w, g, wc NULL,
 * flux_model_weights and flux_model_grads NULL).  Steps and predictions
 * run through unit hooks (flux_model_set_units) that bind each unit's
 * weights, and for a backward its gradients, while it runs: FSDP's sharded
 * model (lib/fluxfsdp). */
flux_model *flux_model_create_unbound(backend *be, const flux_config *c, titan_err *err);

/* FSDP's units, as 0.3.0's apply_fsdp wraps the model: unit 0 the
 * embedders (img_in, time_in, vector_in, txt_in), 1 .. depth the double
 * blocks, then the single blocks, last the final layer. */
int flux_unit_count(const flux_model *m);
/* The unit parameter i belongs to. */
int flux_param_unit(const flux_model *m, int i);

/* An unbound model's unit hooks.  A step calls, for every unit u in the
 * order it runs them: gather(u, 0) before its forward reads a weight and
 * release(u) after (the final layer is kept until its backward when one
 * follows, as 0.3.0 keeps it: reshard_after_forward=False); in the backward
 * gather(u, 1) before it (weights again, and zeroed float32 gradients),
 * reduce(u) once its gradients are whole, then release(u).  A prediction
 * calls gather(u, 0) and release(u) alone.  Every rank of a sharded model
 * makes the same calls in the same order (the hooks are collectives). */
typedef struct flux_unit_hooks {
	void *ctx;
	int (*gather)(void *ctx, int u, int grads, titan_err *err);
	int (*reduce)(void *ctx, int u, titan_err *err);
	void (*release)(void *ctx, int u);
} flux_unit_hooks;
void flux_model_set_units(flux_model *m, const flux_unit_hooks *h);
/* A gather's binding of parameter i: wc its weight in the compute type, g
 * its float32 gradient (NULL outside a backward). */
void flux_param_bind(flux_model *m, int i, void *wc, float *g);
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
/* The joint attention of flux_step's blocks through hook a (context
 * parallelism: the caller's batch holds this rank's share of the text and
 * image tokens, and the hook reaches the other ranks' keys and values);
 * NULL: the backend's op.  flux_predict always uses the backend's op (a
 * prediction holds the whole sequence). */
void flux_model_set_attention(flux_model *m, const be_attn_hook *a);
/* Full activation checkpointing (0.3.0's apply_ac: every double and single
 * block under checkpoint_wrapper): on, a step keeps each block's input and
 * one block's activations, and its backward runs each block's forward again
 * from its input before differentiating it.  The numbers are the same bits
 * as without it (the same ops on the same inputs); the attention hook runs
 * again in the recomputation, as torch's does.  Off by default. */
void flux_model_set_full_ac(flux_model *m, int on);
int flux_param_count(const flux_model *m);
const flux_param *flux_param_at(const flux_model *m, int i);
const flux_param *flux_param_find(const flux_model *m, const char *name);
/* Every gradient to zero (the backward accumulates). */
void flux_zero_grad(flux_model *m);
/* The backend the model lives on. */
backend *flux_model_backend(const flux_model *m);
/* Every weight and every gradient as one flat buffer each (backend memory,
 * the parameters back to back in flux_param_at's order): what the optimizer
 * and gradient clipping run over. */
float *flux_model_weights(flux_model *m);
float *flux_model_grads(flux_model *m);
int64_t flux_model_numel(const flux_model *m);
/* torchtitan 0.3.0's initialisation (models/flux/__init__.py: xavier_uniform_
 * weights, normal(0, 0.02) for the timestep and vector embedders, zero
 * modulations, final layer and biases, unit QK norms), drawn from seed with
 * titan's streams (core/init_fill.h).  0, or -1 and err. */
int flux_model_init(flux_model *m, uint64_t seed, titan_err *err);
/* Parameter i's initial values (flux_model_init's) into host (numel floats):
 * what a sharded model cuts its rows from. */
void flux_param_init(const flux_param *p, int i, uint64_t seed, float *host);

/* One step's inputs, host float32, with the sizes the caller's tensors
 * have (each checked against the model's):
 *   x, noise  (b, li, c_img) packed latents and their noise (c_img = in_channels)
 *   img_ids   (b, li, 3)      txt (b, lt, c_txt) T5's states (c_txt = context_in_dim)
 *   txt_ids   (b, lt, 3)      t (b) timesteps
 *   y         (b, c_vec) CLIP's pooled output (c_vec = vec_in_dim) */
typedef struct flux_batch {
	int64_t b, li, lt, c_img, c_txt, c_vec;
	const float *x, *noise, *img_ids, *txt, *txt_ids, *t, *y;
	/* The loss's divisor: every data-parallel rank's latent values together
	 * (FluxTrainer's global_valid_tokens); 0: this batch's b * li * c_img. */
	int64_t global_numel;
	/* bf16 compute alone: x and noise are float32 tensors (0.3.0's latents
	 * when its encoders run in float32, on one data-parallel rank): the noisy
	 * input is mixed in float32 before FSDP's cast, the target noise - x and
	 * the loss stay float32.  0: they are bf16 (the encoders in bf16), each
	 * rounded before the mix and the target rounded. */
	int target_f32;
} flux_batch;

/* The step: forward on the noisy latent, the loss (this batch's squared
 * errors over global_numel) into *loss, and with
 * backward set every parameter's gradient ACCUMULATED.  pred, when not NULL,
 * receives the prediction (b, li, out_channels) host float32.  0, or -1 and
 * err (a size of the batch that does not fit the model, no memory). */
int flux_step(flux_model *m, const flux_batch *in, int backward, float *loss, float *pred,
	      titan_err *err);

/* FluxModel.Config.get_nparams_and_flops's FLOPs per token at seq_len tokens
 * (image and text): 6 per parameter, less one stream's per-token weights of
 * each double block, the modulations amortised over the sequence, plus the
 * attention's 6 h seq_len per block. */
double flux_flops_per_token(const flux_config *c, int64_t seq_len);

/* The model's input for a prediction alone (sampling, inference), host
 * float32, sizes as in flux_batch:
 *   img (b, li, c_img) the packed latent the model reads as it is (no noise
 *   mixed in), img_ids (b, li, 3), txt (b, lt, c_txt), txt_ids (b, lt, 3),
 *   t (b) timesteps, y (b, c_vec). */
typedef struct flux_input {
	int64_t b, li, lt, c_img, c_txt, c_vec;
	const float *img, *img_ids, *txt, *txt_ids, *t, *y;
} flux_input;

/* FluxModel.forward(img, img_ids, txt, txt_ids, timesteps=t, y) into pred
 * (b, li, out_channels) host float32: the step's forward without the noise,
 * the loss or the backward (the gradients are untouched), the numbers of
 * flux_step's forward.  The blocks share one block's activation buffers
 * (nothing is kept for a backward), so it holds one block's activations
 * beside the weights and the streams; they are allocated and freed per call.
 * 0, or -1 and err (a size that does not fit the model, a NULL input, no
 * memory). */
int flux_predict(flux_model *m, const flux_input *in, float *pred, titan_err *err);

/* utils.py's pack_latents: z (b, c, hl, wl) -> (b, (hl/2)(wl/2), 4c), each
 * 2x2 patch's values in (c, ph, pw) order; hl, wl even. */
void flux_pack_latents(float *out, const float *z, int64_t b, int64_t c, int64_t hl,
		       int64_t wl);
/* unpack_latents, pack's inverse: packed (b, (hl/2)(wl/2), 4c) -> z (b, c, hl, wl). */
void flux_unpack_latents(float *z, const float *packed, int64_t b, int64_t c, int64_t hl,
			 int64_t wl);
/* create_position_encoding_for_latents: ids (b, (hl/2)(wl/2), 3) = (0, row,
 * column) of each patch. */
void flux_latent_ids(float *ids, int64_t b, int64_t hl, int64_t wl);

#endif
