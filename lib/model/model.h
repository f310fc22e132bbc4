/* model.h: the Llama 3 model of torchtitan (models/llama3), written once against
 * the backend op interface: parameter layout, initialisation, forward, hand-written
 * backward, activation checkpointing.
 *
 * Parameters, gradients (and the optimizer's states, see optim.h) each live in ONE
 * flat float buffer of model_num_params() elements; a table of named views gives
 * every tensor's torchtitan FQN, shape and offset into those buffers.  FSDP shards
 * by ranges of the flat buffer, checkpoints enumerate the views.  Tensors are in
 * the table's order: tok_embeddings.weight, then per layer N
 *   layers.N.attention_norm.weight  (dim)
 *   layers.N.attention.wq.weight    (n_heads*head_dim, dim)
 *   layers.N.attention.wk.weight    (n_kv_heads*head_dim, dim)
 *   layers.N.attention.wv.weight    (n_kv_heads*head_dim, dim)
 *   layers.N.attention.wo.weight    (dim, n_heads*head_dim)
 *   layers.N.ffn_norm.weight        (dim)
 *   layers.N.feed_forward.w1.weight (hidden, dim)
 *   layers.N.feed_forward.w2.weight (dim, hidden)
 *   layers.N.feed_forward.w3.weight (hidden, dim)
 * then norm.weight and output.weight (absent with tied embeddings: the output
 * projection reads tok_embeddings.weight).  Linear weights are (out, in) like
 * torch.nn.Linear. */
#ifndef TITAN_MODEL_H
#define TITAN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "model/flavor.h"

#define MODEL_IGNORE_INDEX (-100) /* labels equal to this count for nothing */

typedef struct model model;

typedef struct model_tensor {
	char fqn[64];     /* torchtitan's name, e.g. "layers.3.attention.wq.weight" */
	int ndim;         /* 1 or 2 */
	int64_t shape[2]; /* (out, in) for linears, (n,) for norms */
	size_t offset;    /* first element in the flat buffers */
	size_t numel;
	int is_norm;      /* RMSNorm weight */
	int is_embedding; /* tok_embeddings (also the output with tied embeddings) */
} model_tensor;

/* Activation checkpointing, torchtitan's activation_checkpoint.mode. */
typedef enum model_ac_mode {
	MODEL_AC_NONE,      /* keep every activation */
	MODEL_AC_FULL,      /* keep each layer's input, recompute the layer in backward */
	MODEL_AC_SELECTIVE, /* every Nth layer full (selective_ac_option "N") */
	MODEL_AC_OP,        /* op-level: keep matmul and attention outputs, recompute
	                       norms, rope and the SwiGLU gate (selective "op") */
} model_ac_mode;

/* A model of flavor a on backend be (which it uses, not owns).  vocab_size > 0
 * replaces the flavor's vocabulary (torchtitan follows the tokenizer).  The
 * weights are allocated, not initialised.  NULL on error. */
model *model_create(backend *be, const llama_args *a, int vocab_size, titan_err *e);
void model_free(model *m);

/* The model's arguments, vocab_size as used. */
const llama_args *model_args(const model *m);
int model_ffn_hidden(const model *m);

/* torchtitan's init_weights, from a seeded generator (same seed, same weights):
 * tok_embeddings normal(0, 1); wq wk wv w1 trunc_normal(0, 0.02); wo w2 w3
 * trunc_normal(0, 0.02/sqrt(2*(layer+1))) with depth_init, else
 * 0.02/sqrt(2*n_layers); norms 1; output trunc_normal(0, dim^-0.5) cut at 3 std.
 * trunc_normal without a cut is torch's default, cut at +-2 absolute. */
int model_init(model *m, uint64_t seed, int depth_init, titan_err *e);

/* The table of views. */
int model_num_tensors(const model *m);
const model_tensor *model_tensor_at(const model *m, int i);
const model_tensor *model_tensor_find(const model *m, const char *fqn);

size_t model_num_params(const model *m);
/* Parameters other than the embedding table (torchtitan's flops count). */
int64_t model_num_params_no_embedding(const model *m);
/* torchtitan's dense flops per token: 6*(params - embedding) + 6*L*H*2*hd*seq_len. */
double model_flops_per_token(const model *m, int seq_len);

/* The flat buffers, in backend memory (host memory on the CPU backend).  The
 * model owns them; they live as long as the model. */
float *model_params(model *m);
float *model_grads(model *m);
backend *model_backend(model *m);

/* Copy one tensor between the model's buffers and host memory (the checkpoint
 * path for any backend).  grads = 1 reads/writes the gradient instead. */
void model_tensor_read(model *m, const model_tensor *t, int grads, float *host);
void model_tensor_write(model *m, const model_tensor *t, int grads, const float *host);

/* Activation checkpointing; every is N for MODEL_AC_SELECTIVE (layers whose
 * 1-based index is a multiple of N are recomputed, like torchtitan's counter). */
int model_set_ac(model *m, model_ac_mode mode, int every, titan_err *e);

/* Set every gradient to 0 (before the first micro-batch of a step). */
void model_zero_grad(model *m);

/* One micro-batch: forward and backward.  inputs and labels are host arrays
 * (b, t) of token ids; labels equal to MODEL_IGNORE_INDEX are skipped.  The
 * gradient of (sum of token losses) * grad_scale is ADDED to model_grads, so
 * pass grad_scale = 1 / (valid tokens of the whole step, all micro-batches and
 * ranks), as torchtitan does.  *loss_sum gets the summed cross-entropy of this
 * micro-batch, *n_valid its number of valid labels. */
int model_forward_backward(model *m, const int32_t *inputs, const int32_t *labels,
			   int b, int t, float grad_scale, double *loss_sum,
			   int64_t *n_valid, titan_err *e);

/* Forward only.  logits (b, t, vocab) on the host when not NULL; when labels is
 * not NULL, *loss_sum and *n_valid as above (validation). */
int model_forward(model *m, const int32_t *inputs, const int32_t *labels, int b,
		  int t, float *logits, double *loss_sum, int64_t *n_valid,
		  titan_err *e);

/* Bytes of activations the model holds for a micro-batch of (b, t) in the
 * current AC mode (a prediction; backend_peak_bytes is the measurement). */
size_t model_activation_bytes(const model *m, int b, int t);

#endif
