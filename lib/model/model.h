/* model.h: the decoder-only transformers of torchtitan (models/llama3, qwen3,
 * ...), written once against the backend op interface: parameter layout,
 * initialisation, forward, hand-written backward, activation checkpointing, as
 * UNITS that a parallel plan can drive one at a time.  The family and flavor
 * (family.h, flavor.h) choose the pieces of each block; the units, the table
 * of views and the storage binding are the same for every family.
 *
 * Units, in order: 0 the embedding, 1..n_layers the transformer blocks,
 * n_layers + 1 the head (final norm, output projection, loss).  A unit's forward
 * reads the hidden state (b*t, dim) before it and writes the one after it; its
 * backward turns the gradient of the one after into the gradient of the one
 * before.  These are the units torchtitan wraps with FSDP, the runs of units a
 * pipeline stage holds, the places a plan's hooks run, and the blocks
 * activation checkpointing recomputes.
 *
 * Parameters: a table of named views gives every tensor's torchtitan FQN, shape and
 * offset in ONE flat layout of model_num_params() elements.  Tensors are in the
 * table's order: tok_embeddings.weight, then per layer N (Llama 3's)
 *   layers.N.attention_norm.weight  (dim)
 *   layers.N.attention.wq.weight    (n_heads*head_dim, dim)
 *   layers.N.attention.wk.weight    (n_kv_heads*head_dim, dim)
 *   layers.N.attention.wv.weight    (n_kv_heads*head_dim, dim)
 *   layers.N.attention.wo.weight    (dim, n_heads*head_dim)
 *   layers.N.ffn_norm.weight        (dim)
 *   layers.N.feed_forward.w1.weight (hidden, dim)
 *   layers.N.feed_forward.w2.weight (dim, hidden)
 *   layers.N.feed_forward.w3.weight (hidden, dim)
 * then norm.weight and output.weight (absent with tied embeddings: the head then
 * reads tok_embeddings.weight, the embedding unit's tensor).  Other pieces add
 * their own tensors in the same places: QK-norm layers.N.attention.q_norm.weight
 * and .k_norm.weight (head_dim) after wo; a mixture of experts, in place of
 * feed_forward, layers.N.moe.experts.w1 / .w2 / .w3 (experts, hidden, dim) /
 * (experts, dim, hidden) / (experts, hidden, dim), layers.N.moe.router.gate.weight
 * (experts, dim) and layers.N.moe.shared_experts.w1/w2/w3.weight; LoRA
 * (llama_args.lora_rank) layers.N.attention.wo.lora_a.weight (rank, h*hd) and
 * .lora_b.weight (dim, rank) after wo, every other tensor frozen.  Each unit's
 * tensors are contiguous in the layout.  Linear weights are (out, in) like
 * torch.nn.Linear.
 *
 * Storage: a unit computes with whatever storage is BOUND to it
 * (model_bind_unit): params of the precision's param type and gradients of its
 * grad type, each laid out as the unit's slice of the flat layout.  The plain
 * model (model_create) owns float32 flat buffers of the whole layout and keeps
 * every unit bound to them; an FSDP plan owns shards instead and binds a unit's
 * gathered parameters before running it.  The plain model's own buffers follow
 * the precision (model_set_prec): bfloat16 parameters and gradients under
 * training.dtype = "bfloat16", float32 otherwise.
 *
 * Activations: a model_mb holds one micro-batch's activations over a run of
 * units (a pipeline stage holds several at once); scratch that only lives inside
 * one unit's forward or backward is the model's. */
#ifndef TITAN_MODEL_H
#define TITAN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "model/family.h"
#include "model/flavor.h"

#define MODEL_IGNORE_INDEX (-100) /* labels equal to this count for nothing */

typedef struct model model;
typedef struct model_mb model_mb;

/* How torchtitan's tensor-parallel plan shards a tensor (its parallelize_fn):
 * a colwise linear splits its output features, a rowwise one its input
 * features (its output is then a partial sum); tok_embeddings under
 * RowwiseParallel splits its vocabulary rows.  tp_dim says which dimension. */
enum model_tp {
	MODEL_TP_REPLICATE, /* every rank holds it whole (norms; under sequence
	                       parallelism the norms see a shard of the tokens) */
	MODEL_TP_COLWISE,   /* wq wk wv w1 w3, output */
	MODEL_TP_ROWWISE,   /* wo w2, tok_embeddings */
};

typedef struct model_tensor {
	char fqn[64];     /* torchtitan's name, e.g. "layers.3.attention.wq.weight" */
	int ndim;         /* 1 to 3 */
	int64_t shape[3]; /* (out, in) for linears, (n,) for norms */
	size_t offset;    /* first element in the flat layout */
	size_t numel;
	int unit;         /* the unit that owns it */
	int is_norm;      /* RMSNorm weight */
	int is_embedding; /* tok_embeddings (also the output with tied embeddings) */
	int tp;           /* enum model_tp */
	int tp_dim;       /* the dimension tensor parallelism splits, -1 for none */
	int frozen;       /* LoRA (llama_args.lora_rank): not trained, no gradient, no
	                     optimizer state (every tensor but the adapters) */
	int is_expert;    /* routed experts' weights (experts, out, in): expert
	                     parallelism splits dim 0 */
} model_tensor;

typedef struct model_unit {
	int first_tensor, n_tensors; /* its tensors in the table */
	size_t offset, numel;        /* its slice of the flat layout */
} model_unit;

/* Activation checkpointing, torchtitan's activation_checkpoint.mode. */
typedef enum model_ac_mode {
	MODEL_AC_NONE,      /* keep every activation */
	MODEL_AC_FULL,      /* keep each layer's input, recompute the layer in backward */
	MODEL_AC_SELECTIVE, /* every Nth layer full (selective_ac_option "N") */
	MODEL_AC_OP,        /* op-level: keep matmul and attention outputs, recompute
	                       norms, rope and the SwiGLU gate (selective "op") */
} model_ac_mode;

/* Element types the units compute with (backend.h lists the combinations a
 * backend implements).  float32 everywhere is the reference. */
typedef struct model_prec {
	be_dtype param; /* the bound parameters */
	be_dtype grad;  /* the bound gradients (accumulated) */
	be_dtype act;   /* activations: linear inputs and outputs, attention, logits */
	be_dtype resid; /* the residual stream: the hidden states between units */
} model_prec;

/* A model of flavor a on backend be (which it uses, not owns).  vocab_size > 0
 * replaces the flavor's vocabulary.  The model owns float32 flat buffers of
 * parameters and gradients, bound to every unit; the weights are allocated,
 * not initialised.  NULL on error. */
model *model_create(backend *be, const llama_args *a, int vocab_size, titan_err *e);
/* The same without storage: every unit must be bound before it runs (an FSDP
 * plan's model). */
model *model_create_unbound(backend *be, const llama_args *a, int vocab_size, titan_err *e);
/* Tensor parallelism, torchtitan's Llama plan (apply_tp) with sequence
 * parallelism, on one tp rank of `size`.  The model is built with the rank's
 * shapes: the colwise linears (wq wk wv w1 w3, output) keep their rank's
 * rows of output features, the rowwise ones (wo w2) their columns of input
 * features, tok_embeddings its rows of the vocabulary (torch.chunk's sizes:
 * ceil(V / size) rows, the last ranks fewer), the norms whole; heads and the
 * FFN's hidden size must divide by size.  The residual stream between and
 * inside units is SEQUENCE PARALLEL: a rank holds rows rank * n/size ..
 * of the micro-batch's n = b*t tokens (torchtitan shards dim 1 of (b, t, dim);
 * sharding the flattened tokens gives the same numbers, every op on the stream
 * working token by token), and n must divide by size.  The collectives sit at
 * the edges of the pieces, as torchtitan's layouts put them:
 *   a norm's output is all-gathered over the sequence before the
 *     column-parallel linears (attention, feed-forward, output);
 *   a row-parallel linear's output (partial sums) is reduce-scattered back
 *     to sequence shards before it joins the stream; the embedding's too;
 *   their backward the other way round;
 *   the loss: with loss_parallel the cross-entropy of the vocabulary-sharded
 *     logits (ce_vocab_stats, an all-gather of the row statistics,
 *     ce_vocab_loss), else the logits all-gathered over the vocabulary.
 * With async (enable_async_tensor_parallel) a gather is finished inside the
 * first matmul that reads it, chunk by chunk round the ring (each rank's
 * shard multiplied while the next one arrives), and a row-parallel matmul is
 * computed chunk by chunk into a ring reduce-scatter.  The plan supplies the
 * collectives; a failure is recorded with backend_fault and reported by the
 * next sync, as an op's. */
typedef struct model_tp_group {
	int size, rank;
	int loss_parallel;
	int async;
	void *ctx;
	/* full (size * count) = every rank's part (count) in rank order; part
	 * may be full + rank * count. */
	int (*all_gather)(void *ctx, void *full, const void *part, size_t count, be_dtype t,
			  titan_err *e);
	/* part (count) = the sum over ranks of their full[rank * count ..]. */
	int (*reduce_scatter)(void *ctx, void *part, const void *full, size_t count, be_dtype t,
			      titan_err *e);
	/* async: send (count) to rank + 1 and receive recv (count) from rank - 1
	 * (mod size), started; ring_wait finishes it. */
	int (*ring_start)(void *ctx, const void *send, void *recv, size_t count, be_dtype t,
			  void **req, titan_err *e);
	int (*ring_wait)(void *ctx, void *req, titan_err *e);
	/* x (count floats, backend memory) = the elementwise maximum over the
	 * ranks' x: a Float8 cast's amax over the whole of a split tensor. */
	int (*all_reduce_max)(void *ctx, float *x, size_t count, titan_err *e);
} model_tp_group;

/* model_create_unbound's model for tp rank tp->rank (tp->size 1: the whole
 * model).  The table of views holds the rank's shapes under the global
 * names. */
model *model_create_tp(backend *be, const llama_args *a, int vocab_size, const model_tp_group *tp,
		       titan_err *e);
void model_free(model *m);
/* Expert parallelism (torchtitan 0.2.2's ExpertParallel on the MoE layers'
 * experts): the routed experts split over `size` ranks of the ep group, rank
 * r holding experts r*E/size .. (r+1)*E/size - 1 (the model's expert tensors
 * have E/size rows of dim 0); the router, the shared experts and every other
 * tensor stay whole.  After routing and the sort by expert on each rank, the
 * rows of each expert go to the rank holding it and come back after the
 * experts ran: the rows per expert exchanged first (all_to_all of E/size
 * int32 per rank), then the rows themselves (all_to_allv of the activation
 * type), forward and backward (the gradients of the rows the same way).  The
 * plan supplies the collectives; buffers are backend memory.  size 1: none. */
typedef struct model_ep_group {
	int size, rank;
	void *ctx;
	/* recv (size * count) = every rank's send[rank * count ..], int32 */
	int (*all_to_all_i32)(void *ctx, const int32_t *send, int32_t *recv, size_t count,
			      titan_err *e);
	/* rows of type t: send's rows sdispls[j] .. + scounts[j] go to rank j,
	 * recv's rows rdispls[j] .. + rcounts[j] come from rank j (counts and
	 * displacements in elements) */
	int (*all_to_allv)(void *ctx, const void *send, const size_t *scounts,
			   const size_t *sdispls, void *recv, const size_t *rcounts,
			   const size_t *rdispls, be_dtype t, titan_err *e);
} model_ep_group;

/* model_create_tp with the experts of ep->rank (ep NULL or size 1: all);
 * the ep size must divide the experts. */
model *model_create_ep(backend *be, const llama_args *a, int vocab_size,
		       const model_tp_group *tp, const model_ep_group *ep, titan_err *e);
/* The expert rows this rank sent to other ranks' experts and received from
 * other ranks for its own, in the forward dispatches since the last call
 * (recomputations included; each is sent four times a step: rows and
 * outputs forward, their gradients backward), then zeroed. */
void model_ep_take_rows(model *m, int64_t *sent, int64_t *received);

/* The model's arguments, vocab_size as used, and its family. */
const llama_args *model_args(const model *m);
const model_family *model_get_family(const model *m);
int model_ffn_hidden(const model *m);

/* torchtitan's init_weights, from a seeded generator (same seed, same weights):
 * tok_embeddings normal(0, 1); wq wk wv w1 trunc_normal(0, 0.02); wo w2 w3
 * trunc_normal(0, 0.02/sqrt(2*(layer+1))) with depth_init, else
 * 0.02/sqrt(2*n_layers); norms 1; output trunc_normal(0, dim^-0.5) cut at 3 std
 * (each family's init_weights says the same for its own tensors).
 * trunc_normal without a cut is torch's default, cut at +-2 absolute.  Needs the
 * model's own storage (model_create). */
int model_init(model *m, uint64_t seed, int depth_init, titan_err *e);
/* The same values for one tensor alone, into host (numel floats): what a rank
 * that holds a shard of the tensor draws (each 64Ki chunk has its own stream). */
void model_init_tensor(const model *m, int i, uint64_t seed, int depth_init, float *host);
/* ... only its elements [first, end) (and the rest of their chunks) drawn:
 * the same values there, the others of host left as they were. */
void model_init_tensor_span(const model *m, int i, uint64_t seed, int depth_init, float *host,
			    size_t first, size_t end);

/* The table of views. */
int model_num_tensors(const model *m);
const model_tensor *model_tensor_at(const model *m, int i);
const model_tensor *model_tensor_find(const model *m, const char *fqn);
int model_num_units(const model *m);
const model_unit *model_unit_at(const model *m, int u);
static inline int model_head_unit(const model *m) { return model_num_units(m) - 1; }

size_t model_num_params(const model *m);
/* Parameters other than the embedding table (torchtitan's flops count). */
int64_t model_num_params_no_embedding(const model *m);
/* The parameters one token computes with: the routed experts' scaled by
 * top_k / experts (the total for a dense model). */
int64_t model_num_params_active(const model *m);

/* FLOPs of training (forward and backward; 2 per multiply-add; recomputation
 * not counted).  The matmuls: 6 x the active parameters less the embedding
 * table (a tied table counted: the output multiplies by it) per token.
 * Attention: 6 x n_heads x (qk + v head dims) per (query, key) pair of every
 * layer.  Two counts of the pairs:
 *   model_flops_per_token   torchtitan's (get_dense/moe_model_nparams_and_flops):
 *                           every query against seq_len keys, whatever the mask
 *                           (twice the causal work; far more under a window)
 *   model_train_flops       the pairs each layer's mask leaves, counted exactly
 *                           for rows x t tokens: causal, the layer's sliding
 *                           window and chunk, and the documents of positions
 *                           (rows, t), host, as model_mb_set_positions takes
 *                           them (NULL: one document per row).  Sinks add no
 *                           pair (their logit has no value). */
double model_flops_per_token(const model *m, int seq_len);
double model_train_flops(const model *m, int64_t rows, int64_t t, const int32_t *positions);
/* Unmasked (query, key) pairs of a causal span of positions [start, end) (one
 * document) with a sliding window of `window` positions (a query sees itself
 * and window - 1 keys before it) and fixed chunks of `chunk` absolute
 * positions (0: off, each); of a row of t positions split into documents
 * where pos (t) is 0 (NULL: one document). */
int64_t model_attn_pairs_span(int64_t start, int64_t end, int64_t window, int64_t chunk);
int64_t model_attn_pairs_row(int64_t t, int64_t window, int64_t chunk, const int32_t *pos);

/* Buffers: state that is saved with the model but not trained (torchtitan's
 * persistent buffers): layers.N.moe.expert_bias (experts) float32 of each
 * mixture-of-experts layer with load balancing.  Each buffer's offset indexes
 * the model's own buffer storage; unit is its layer's.  Every rank holds them
 * whole. */
int model_num_buffers(const model *m);
const model_tensor *model_buffer_at(const model *m, int i);
/* The buffer named fqn; NULL when none is. */
const model_tensor *model_buffer_find(const model *m, const char *fqn);
void model_buffer_read(model *m, const model_tensor *t, float *host);
void model_buffer_write(model *m, const model_tensor *t, const float *host);

/* Auxiliary-loss-free load balancing (DeepSeek-V3's, torchtitan's
 * _update_expert_bias).  Every training forward of a mixture-of-experts layer
 * adds the tokens routed to each expert to its counts; model_moe_balance (once
 * per optimizer step, before it) moves each layer's expert_bias by
 *   delta = coeff * sign(mean(counts) - counts);  bias += delta - mean(delta)
 * (float32, as torch) and zeroes the counts.  Under data parallelism a plan
 * first sums the counts over the ranks of the loss mesh: model_moe_counts
 * gives them all, (n_moe_layers, experts) float32 on the device (*n elements;
 * NULL without MoE layers). */
float *model_moe_counts(model *m, size_t *n);
int model_moe_balance(model *m, titan_err *e);


/* The model's own flat buffers, of the precision's param and grad types (NULL
 * for model_create_unbound).  They live as long as the model (model_set_prec
 * may replace them).  model_params and model_grads are the same buffers as
 * float32, NULL when they are stored in another type. */
void *model_param_storage(model *m);
void *model_grad_storage(model *m);
float *model_params(model *m);
float *model_grads(model *m);
backend *model_backend(model *m);

/* Copy one tensor between the model's own buffers and host memory as float32
 * (converted from and to the stored type; the checkpoint path for any
 * backend).  grads = 1 reads/writes the gradient. */
void model_tensor_read(model *m, const model_tensor *t, int grads, float *host);
void model_tensor_write(model *m, const model_tensor *t, int grads, const float *host);

/* Bind unit u to params (the unit's numel elements of prec.param) and grads
 * (prec.grad), each laid out as the unit's slice of the flat layout.  grads may
 * be NULL for a forward-only unit. */
void model_bind_unit(model *m, int u, const void *params, void *grads);
/* Element types; the bound storage must follow them.  Default: float32.  The
 * model's own buffers are converted to the new param type (rounded to nearest
 * even) and its gradients zeroed in the new grad type.  A model with MoE
 * layers, MLA, attention biases or sinks refuses any other (their ops have
 * float32 kernels only). */
int model_set_prec(model *m, const model_prec *p, titan_err *e);
const model_prec *model_get_prec(const model *m);

/* torch.autocast(dtype=t): the linears read copies of their weights cast to t
 * (bfloat16), made on first use and kept until the weights change, as
 * autocast's weight cache does within a step; the norms and the embedding read
 * the bound float32 parameters.  Needs prec.param float32 and prec.act t;
 * BE_F32 turns it off (as does model_set_prec).  The copies are backend memory
 * (counted in its peak). */
int model_set_autocast(model *m, be_dtype t, titan_err *e);
be_dtype model_get_autocast(const model *m);
/* The bound weights changed (an optimizer step): drop the cast copies.  Writing
 * a tensor, init and binding a unit do this themselves. */
void model_weights_changed(model *m);

/* The Float8 converter (torchtitan's quantize.linear.float8 on
 * model.converters): the linears its filter picks run their three GEMMs
 * (output, grad_input, grad_weight) on float8 operands with torchao's
 * Float8Linear numerics (lib/float8/float8.h: the recipe's formats, scales and
 * which GEMM casts what), through the backend's f8_cast and f8_matmul.
 * filter_fqns are torchtitan's: module FQNs ("layers.1.attention.wq",
 * "output"), an entry matching as a substring; "auto_filter_small_kn" applies
 * torchao's size rule; a linear whose dimensions are not multiples of 16 is
 * never converted.  A converted output projection computes the whole
 * micro-batch's logits at once (its scales run over every token), not in
 * chunks.  Under autocast the weight is cast from the float32 masters, as
 * torchao does.
 * Under tensor parallelism every scale is the whole tensor's, as torchao's
 * casts of DTensors compute it: where a scale's amax runs along the dimension
 * the tp ranks split (a column-parallel linear's weight rows and output
 * gradient columns, a row-parallel one's weight and input columns), each rank
 * takes its part's amax and the group all-reduces the maximum
 * (all_reduce_max) before the cast; along the sequence nothing is split (the
 * linears read the gathered rows).  Asynchronous TP does not overlap a
 * converted linear with its gather or reduce-scatter: its scales span every
 * row, so it waits for the whole input. */
typedef struct model_float8 {
	const char *recipe;             /* tensorwise (NULL too), rowwise, rowwise_with_gw_hp */
	const char *const *filter_fqns; /* borrowed for the call */
	size_t n_filter;
} model_float8;
/* Convert (c NULL: back to plain linears).  Returns the number of linears
 * converted, or -1 with e set (an unknown recipe, a filter torchao refuses). */
int model_set_float8(model *m, const model_float8 *c, titan_err *e);
/* Whether tensor i is the weight of a converted linear; the recipe's name
 * (NULL when none is set). */
int model_float8_converted(const model *m, int i);
/* Float8 grouped experts (torchtitan 0.3.0's Float8GroupedExpertsConverter,
 * 0.2.2's quantize.grouped_mm.float8 with its fqns): the routed experts of
 * each MoE layer whose module FQN ("layers.3.moe.experts",
 * "mtp_layers.0.moe.experts") contains one of fqns as a substring run their
 * three grouped GEMMs as torchao's _Float8GroupedMM (e4m3, power-of-two
 * rowwise scales, bfloat16 products: backend.h's f8_grouped_matmul).  n 0
 * turns it off.  Returns the number of MoE layers converted, or -1 with e set
 * (a backend without the op, dim or moe_inter_dim not a multiple of 16). */
int model_set_float8_experts(model *m, const char *const *fqns, size_t n, titan_err *e);
/* Whether block l's experts are converted. */
int model_float8_experts(const model *m, int l);
/* Tests only (tests/plan's negative control): under tensor parallelism each
 * rank scales by the amax of its own part instead of the whole tensor's,
 * which torchao never does.  After model_set_float8. */
void model_float8_tp_shard_amax(model *m, int on);
const char *model_float8_recipe(const model *m);
/* FSDP's float8 all-gather (torchao's WeightWithDynamicFloat8CastTensor): the
 * weight bound for converted tensor i holds the values of its float8 e4m3
 * codes (decoded exactly into the parameter type) and *scale, one float on the
 * backend, is their tensorwise scale: its linear multiplies those codes with
 * that scale instead of casting the weight.  scale NULL: cast the bound weight
 * again.  0, or -1 with e (tensor i is not converted, or the recipe does not
 * cast weights tensorwise to e4m3). */
int model_float8_weight_cast(model *m, int i, const float *scale, titan_err *e);

/* Activation checkpointing; every is N for MODEL_AC_SELECTIVE (layers whose
 * 1-based index is a multiple of N are recomputed, like torchtitan's counter).
 * Micro-batch contexts made before the change keep their layout: make new ones. */
int model_set_ac(model *m, model_ac_mode mode, int every, titan_err *e);

/* compile.enable: torchtitan compiles its components "model" (each block) and
 * "loss"; titan runs fused ops of backend.h in their place.
 * MODEL_FUSE_BLOCKS: the attention's q, k, v projections as one product
 * whose output rope_qkv splits and rotates (and rope_qkv_bwd packs back: one
 * product each way in the backward), when the three weights lie after each
 * other in the bound storage and its gradients, as the model's layout puts
 * them (not under tensor parallelism); and each norm's backward fused with
 * the residual stream's gradient add (rmsnorm_add_bwd).  MODEL_FUSE_LOSS: the
 * output projection and the loss as lm_head_loss over the logits' chunks, the
 * micro-batch's gradient scale read from backend memory (not under tensor
 * parallelism, nor with logits copied to the host).  Results equal the plain
 * ops' up to the order of float32 sums: on the CPU backend, whose fused ops are
 * its plain kernels in sequence, the loss bit for bit and the gradients within
 * float32 rounding (the input gradient of the q, k, v product sums its three
 * parts in one product instead of three).  0: one plain op per step. */
enum model_fuse {
	MODEL_FUSE_BLOCKS = 1,
	MODEL_FUSE_LOSS = 2,
};
int model_set_fusion(model *m, unsigned flags, titan_err *e);
unsigned model_get_fusion(const model *m);

/* Set the gradients of the model's own buffers to 0 (before a step's first
 * micro-batch). */
void model_zero_grad(model *m);

/* ---- micro-batches and units ---- */

/* Activations for one micro-batch of (b, t) tokens over units u0..u1.  NULL on
 * error. */
model_mb *model_mb_create(model *m, int u0, int u1, int b, int t, titan_err *e);
void model_mb_free(model_mb *mb);

/* The micro-batch's tokens, host arrays (b, t): inputs (needed when the run
 * starts at the embedding) and labels (when it ends at the head; NULL for a
 * forward that only wants logits).  Ids outside the vocabulary are refused.
 * train = 1: the head computes the loss and its gradient, scaled by grad_scale,
 * in its backward (pass 1 / valid tokens of the whole step, all micro-batches
 * and ranks, as torchtitan does); train = 0: the head computes the loss in its
 * forward, and the logits into logits_host (b*t, vocab) when not NULL. */
int model_mb_set_tokens(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			int train, float grad_scale, float *logits_host, titan_err *e);
/* torchtitan 0.3.0's documents: positions (b, t), host, each token's position
 * in its document as 0.3.0's dataloader emits them (0 where a document starts,
 * then 1, 2, ...; every row starts a document).  RoPE rotates each token by its
 * own position and attention is block-causal: a token sees the tokens of its
 * own document up to itself.  NULL: every row one causal sequence at positions
 * 0..t-1 (0.2.2).  Holds until set again.  Refused with context parallelism's
 * positions (model_set_positions: model_mb_set_documents takes the whole rows
 * then) and with Llama 4's attention temperature. */
int model_mb_set_positions(model_mb *mb, const int32_t *positions, titan_err *e);
/* The same under context parallelism, where a rank holds chunks of each row
 * (lib/cp's layout): positions (b, t) its tokens' own (RoPE), rows (b, row_t)
 * the whole rows' positions, whose documents the attention (ring attention)
 * masks by, reading them by global position (be_attn.doc with doc_t =
 * row_t).  rows NULL: model_mb_set_positions. */
int model_mb_set_documents(model_mb *mb, const int32_t *positions, const int32_t *rows,
			   int64_t row_t, titan_err *e);
/* A training step whose work never waits for the host (compile.enable's
 * whole-step CUDA graph, lib/plan/graph.c): the tokens come from backend
 * memory, int32 (b, t) each (what the micro-batch needs: inputs when it
 * starts at the embedding, labels when it ends at the head), copied on the
 * backend, not read by the host; check them beforehand with
 * model_check_tokens (n tokens, either array may be NULL).  The gradient
 * scale is the float in backend memory that model_mb_grad_scale gives
 * (NULL when the head does not read it from there: MODEL_FUSE_LOSS off, or
 * tensor parallelism), written by the caller before the step runs.  The
 * losses ADD to what model_mb_loss_sum / model_mb_valid hold (the step's
 * micro-batches in one context); model_mb_clear_loss zeroes them. */
int model_check_tokens(const model *m, const int32_t *inputs, const int32_t *labels, int64_t n,
		       titan_err *e);
int model_mb_set_tokens_dev(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			    titan_err *e);
float *model_mb_grad_scale(model_mb *mb);
void model_mb_clear_loss(model_mb *mb);
/* The summed cross-entropy of the head's valid labels, and their number (after
 * the head ran). */
double model_mb_loss_sum(const model_mb *mb);
int64_t model_mb_valid(const model_mb *mb);
/* The hidden state before unit u (b*t, dim) of prec.resid, u in u0..u1+1: a
 * pipeline stage receives its input into hidden(u0) and sends hidden(u1 + 1). */
void *model_mb_hidden(model_mb *mb, int u);
/* Bytes of one hidden state (or its gradient) of b sequences of t tokens:
 * the rows of the stream this rank holds (b*t, or b*t / tp under tensor
 * parallelism) x dim in prec.resid; what a pipeline stage sends. */
size_t model_hidden_bytes(const model *m, int b, int t);

/* The gradient of the hidden state being propagated (b*t, dim) of prec.resid: a
 * pipeline stage puts the received gradient of hidden(u1 + 1) there before the
 * backward of u1, and sends it after the backward of u0 (the gradient of
 * hidden(u0)). */
void *model_dhidden(model *m);

/* Forward of unit u on mb (u in the mb's range, units in order). */
int model_unit_fwd(model *m, int u, model_mb *mb, titan_err *e);
/* Backward of unit u (units in reverse order, after the forward).  With
 * defer_wgrad the weight gradients of a block's linears wait for
 * model_unit_wgrad (the zero-bubble schedules' split of B and W); the embedding
 * and the head never defer. */
int model_unit_bwd(model *m, int u, model_mb *mb, int defer_wgrad, titan_err *e);
int model_unit_wgrad(model *m, int u, model_mb *mb, titan_err *e);

/* A plan's hooks around every unit's forward, backward and deferred weight
 * gradient: FSDP gathers and binds parameters before, frees them and
 * reduce-scatters gradients after.  Any may be NULL. */
enum model_phase { MODEL_FWD, MODEL_BWD, MODEL_WGRAD };
typedef struct model_hooks {
	void *ctx;
	int (*before)(void *ctx, int unit, int phase, titan_err *e);
	int (*after)(void *ctx, int unit, int phase, titan_err *e);
} model_hooks;

/* Context parallelism.  A cp rank's micro-batches hold its own tokens of
 * every sequence (torchtitan's load balancer picks them), so the model needs
 * their global positions, t of them, the same for each sequence: RoPE rotates
 * each token by its own (NULL: 0..t-1, the default).  Attention over the
 * whole sequence needs the other ranks' keys and values: a plan replaces the
 * backend's attention op by its own (ring attention), called with the
 * backend's arguments for the rank's tokens; a failure is recorded with
 * backend_fault and reported by the next sync, as an op's.  NULL restores
 * the backend's op. */
typedef be_attn_hook model_attention;
int model_set_positions(model *m, const int64_t *pos, int t, titan_err *e);
void model_set_attention(model *m, const model_attention *a);

/* Forward then backward of every unit of mb with the hooks (NULL: none).
 * model_run_mb waits for the backend at the end (and reports its faults);
 * model_run_mb_queued leaves the ops queued (a step recorded as a CUDA
 * graph: the caller syncs after it). */
int model_run_mb(model *m, model_mb *mb, const model_hooks *h, titan_err *e);
int model_run_mb_queued(model *m, model_mb *mb, const model_hooks *h, titan_err *e);

/* One micro-batch on the model's own storage: forward and backward of every
 * unit.  inputs and labels are host arrays (b, t); labels equal to
 * MODEL_IGNORE_INDEX are skipped.  The gradient of (sum of token losses) *
 * grad_scale is ADDED to the gradients.  *loss_sum gets the summed
 * cross-entropy of this micro-batch, *n_valid its number of valid labels. */
int model_forward_backward(model *m, const int32_t *inputs, const int32_t *labels,
			   int b, int t, float grad_scale, double *loss_sum,
			   int64_t *n_valid, titan_err *e);

/* Forward only.  logits (b, t, vocab) on the host when not NULL; when labels is
 * not NULL, *loss_sum and *n_valid as above (validation). */
int model_forward(model *m, const int32_t *inputs, const int32_t *labels, int b,
		  int t, float *logits, double *loss_sum, int64_t *n_valid,
		  titan_err *e);

/* Bytes of activations a micro-batch of (b, t) over every unit holds in the
 * current AC mode and precision, with the model's scratch (a prediction;
 * backend_peak_bytes is the measurement). */
size_t model_activation_bytes(const model *m, int b, int t);
/* The part one micro-batch context over units u0..u1 holds, and the model's
 * scratch, apart (a pipeline stage keeps several contexts). */
size_t model_mb_bytes(const model *m, int u0, int u1, int b, int t);
size_t model_scratch_bytes(const model *m, int b, int t);
/* The head's loss: the output projection and the cross-entropy run over
 * chunks of rows of the micro-batch's n = b x t, so only one chunk's logits
 * (rows x the rank's vocabulary, in the activations' type; their gradient
 * written in place) exist at a time.  model_loss_rows gives the rows of a
 * chunk: by default the rows of 64 MiB of float32 logits, at least 256 (256
 * for a vocabulary of 128256), all n under Float8's whole head;
 * model_set_loss_rows fixes them (0: the default; n or more: one chunk, the
 * unchunked loss, for measuring what chunking saves).  model_loss_bytes is
 * that chunk's bytes, part of model_scratch_bytes. */
int64_t model_loss_rows(const model *m, int64_t n);
void model_set_loss_rows(model *m, int64_t rows);
/* torchtitan 0.3.0's ChunkedLossWrapper(num_chunks = k): the output
 * projection and the loss run on k chunks of each micro-batch's sequence
 * (positions [i t/k, (i+1) t/k) of every row together), one after the other,
 * which is what a Float8 output projection's scales run over (its amax per
 * chunk).  Needs t divisible by k (else the whole micro-batch is one chunk),
 * no tensor parallelism; logits copied to the host stay whole.  0: off. */
int model_set_seq_chunks(model *m, int k, titan_err *e);
size_t model_loss_bytes(const model *m, int b, int t);
/* What a backward with defer_wgrad leaves alive until model_unit_wgrad for
 * units u0..u1 of a micro-batch of (b, t): each linear's output gradient and
 * the copies of inputs AC did not keep (a zero-bubble stage holds this per
 * micro-batch between its I and its W). */
size_t model_wgrad_bytes(const model *m, int u0, int u1, int b, int t);

#endif
