/* model_priv.h: the model's private state, shared by model.c (layout, storage,
 * init), model_mb.c (micro-batch contexts, the embedding and head units, the
 * runner), model_block.c (the transformer block) and the block's pieces:
 * model_attn.c (attention) and model_ffn.c (feed-forward).
 *
 * Every family runs the same pre-norm block,
 *   xm = x + attention(attention_norm(x)),  y = xm + feed_forward(ffn_norm(xm)),
 * whose two branches are pieces chosen per layer (layer_kind): a piece owns
 * its parameters (their slots in layer_w), its activations (their slots in
 * layer_act) and its forward, recompute and backward.  model_block.c owns the
 * norms, the residual stream, activation checkpointing and the deferred weight
 * gradients every piece's linears go through.  The attention pieces are
 * model_attn.c (grouped-query attention and its per-layer options) and
 * model_mla.c (multi-head latent attention). */
#ifndef TITAN_MODEL_PRIV_H
#define TITAN_MODEL_PRIV_H

#include "model/family.h"
#include "model/model.h"

/* The pieces. */
enum { ATTN_GQA,     /* grouped-query attention with RoPE (model_attn.c) */
       ATTN_MLA };   /* multi-head latent attention (model_mla.c) */
enum { FFN_DENSE,    /* SwiGLU: w2(silu(w1 x) * w3 x) */
       FFN_MOE };     /* a mixture of SwiGLU experts (model_moe.c) */

/* A layer's pieces and the options its attention runs with (torchtitan's
 * per-layer rules, set by model_attn_kind). */
typedef struct layer_kind {
	int attn, ffn;
	int rope;          /* RoPE on q and k (0: a NoPE layer, Llama 4) */
	int64_t window;    /* be_attn's sliding window (GPT-OSS's even layers) */
	int64_t chunk;     /* be_attn's chunk (Llama 4's RoPE layers) */
	int qk_l2;         /* q and k divided by their RMS after RoPE (Llama 4) */
	int temperature;   /* q scaled by the position's temperature (Llama 4's NoPE) */
} layer_kind;

/* A layer's parameter slots: pointers into the bound parameter (or gradient)
 * storage, NULL for the slots its pieces do not use. */
enum {
	W_ATTN_NORM, /* (dim) */
	W_WQ,        /* (h*hd, dim) */
	W_WK, W_WV,  /* (hkv*hd, dim) */
	W_WO,        /* (dim, h*hd) */
	W_LORA_A,    /* (lora_rank, h*hd) wo's LoRA adapters (llama_args.lora_rank) */
	W_LORA_B,    /* (dim, lora_rank) */
	W_Q_NORM,    /* (hd) with qk_norm */
	W_K_NORM,    /* (hd) */
	W_FFN_NORM,  /* (dim) */
	W_W1, W_W3,  /* (ffn, dim) */
	W_W2,        /* (dim, ffn) */
	W_GATE,      /* (experts, dim) the router */
	W_EW1, W_EW3,/* (experts, inter, dim) */
	W_EW2,       /* (experts, dim, inter) */
	W_SW1, W_SW3,/* (shared*inter, dim) the shared experts */
	W_SW2,       /* (dim, shared*inter) */
	W_BQ, W_BK, W_BV, W_BO, /* attention biases (h*hd), (hkv*hd), (hkv*hd), (dim) */
	W_SINKS,     /* (h) attention sinks */
	W_WQ_A,      /* MLA: (q_lora, dim) */
	W_QA_NORM,   /* (q_lora) */
	W_WQ_B,      /* (h*(nope+rope), q_lora) */
	W_WKV_A,     /* (kv_lora+rope, dim) */
	W_KV_NORM,   /* (kv_lora) */
	W_WKV_B,     /* (h*(nope+v), kv_lora) */
	W_GATE_B,    /* (experts) the router's bias (GPT-OSS) */
	W_EB1,       /* (experts, 2*inter) GPT-OSS's experts' mlp1 bias */
	W_EB2,       /* (experts, dim) mlp2 bias */
	W_ENORM,     /* (dim) multi-token prediction: the next tokens' embedding's norm */
	W_HNORM,     /* (dim) the previous depth's hidden state's norm */
	W_EH_PROJ,   /* (dim, 2*dim) the projection of [enorm; hnorm] */
	W_MTP_NORM,  /* (dim) the depth's output norm, before the shared output */
	W_COUNT,
};
typedef struct layer_w {
	void *p[W_COUNT];
} layer_w;

/* How a tensor is initialised (torchtitan's init_weights). */
enum {
	INIT_ONES,   /* norms */
	INIT_EMBED,  /* normal(0, 1) */
	INIT_OUTPUT, /* trunc_normal(0, dim^-0.5) cut at 3 std */
	INIT_INPUT,  /* trunc_normal(0, 0.02): wq wk wv w1 */
	INIT_DEPTH,  /* trunc_normal(0, 0.02/sqrt(2*(layer+1))) (depth_init) or
	                0.02/sqrt(2*n_layers): wo w2 w3 */
	INIT_FANIN,  /* uniform(-dim^-0.5, dim^-0.5): nn.Linear's own bias init, which
	                torchtitan leaves on the router's bias (GPT-OSS) */
	INIT_LINEAR, /* uniform(-in^-0.5, in^-0.5): nn.Linear's own weight init (kaiming
	                uniform), which 0.3.0 leaves on MTP's eh_proj and LoRA's lora_a */
	INIT_ZEROS,  /* 0: LoRA's lora_b */
};

/* The activations a layer's backward reads; n = b*t tokens.  Each layer uses
 * the slots of its pieces (model_act_bytes is 0 for the others). */
enum {
	ACT_XN1,   /* (n, dim) attention_norm output */
	ACT_RSTD1, /* (n) float32 */
	ACT_Q,     /* (n, h*hd) after rope */
	ACT_K,     /* (n, hkv*hd) after rope */
	ACT_V,     /* (n, hkv*hd) */
	ACT_ATT,   /* (n, h*hd) attention output, wo's input */
	ACT_LSE,   /* (b, h, t) float32 */
	ACT_XM,    /* (n, dim) x + attention branch, of the residual type */
	ACT_XN2,   /* (n, dim) ffn_norm output */
	ACT_RSTD2, /* (n) float32 */
	ACT_A,     /* (n, ffn) w1 output */
	ACT_G,     /* (n, ffn) w3 output */
	ACT_H,     /* (n, ffn) silu(a) * g, w2's input */
	ACT_QR,    /* (n, h*hd) with qk_norm: wq's output, q_norm's input */
	ACT_KR,    /* (n, hkv*hd) wk's output */
	ACT_QRSTD, /* (n*h) float32: q_norm's rstd */
	ACT_KRSTD, /* (n*hkv) float32 */
	/* a mixture of experts, R = n*top_k rows (the shared experts use A, G, H) */
	ACT_SCORES,/* (n, experts) float32 router scores */
	ACT_IDX,   /* (n, top_k) int32 chosen experts */
	ACT_RW,    /* (n, top_k) float32 routing weights */
	ACT_PERM,  /* (R) int32 the assignment of each row */
	ACT_POS,   /* (R) int32 the row of each assignment */
	ACT_OFFS,  /* (experts + 1) int32 each expert's first row */
	ACT_XR,    /* (R, dim) the experts' input rows */
	ACT_EA,    /* (R, inter) w1 output */
	ACT_EG,    /* (R, inter) w3 output */
	ACT_EH,    /* (R, inter) silu(ea) * eg, w2's input */
	ACT_EY,    /* (R, dim) the experts' output rows */
	/* multi-head latent attention (ACT_Q, K, V, ATT as above with MLA's heads) */
	ACT_QA,    /* (n, q_lora) wq_a output */
	ACT_QAN,   /* (n, q_lora) q_norm output, wq_b's input */
	ACT_QA_RSTD, /* (n) float32 */
	ACT_KVA,   /* (n, kv_lora) the latent, wkv_a's output */
	ACT_KVN,   /* (n, kv_lora) kv_norm output, wkv_b's input */
	ACT_KV_RSTD, /* (n) float32 */
	ACT_COUNT,
};

/* A set of activations, bit i for activation i. */
typedef uint64_t act_set;
#define ACT_BIT(i) ((act_set)1 << (i))

/* Activations that op-level checkpointing keeps: matmul and attention outputs
 * (and the per-head norms' statistics, a few floats per token). */
#define ACT_OP_KEEP                                                                         \
	(ACT_BIT(ACT_Q) | ACT_BIT(ACT_K) | ACT_BIT(ACT_V) | ACT_BIT(ACT_ATT) | ACT_BIT(ACT_LSE) | \
	 ACT_BIT(ACT_XM) | ACT_BIT(ACT_A) | ACT_BIT(ACT_G) | ACT_BIT(ACT_QR) | ACT_BIT(ACT_KR) |  \
	 ACT_BIT(ACT_QRSTD) | ACT_BIT(ACT_KRSTD) | ACT_BIT(ACT_SCORES) | ACT_BIT(ACT_IDX) |      \
	 ACT_BIT(ACT_RW) | ACT_BIT(ACT_PERM) | ACT_BIT(ACT_POS) | ACT_BIT(ACT_OFFS) |            \
	 ACT_BIT(ACT_EA) | ACT_BIT(ACT_EG) | ACT_BIT(ACT_EY) | ACT_BIT(ACT_QA) |                 \
	 ACT_BIT(ACT_QAN) | ACT_BIT(ACT_QA_RSTD) | ACT_BIT(ACT_KVA) | ACT_BIT(ACT_KVN) |         \
	 ACT_BIT(ACT_KV_RSTD))
#define ACT_ALL (ACT_BIT(ACT_COUNT) - 1)

/* A weight gradient the backward left for model_unit_wgrad: dW += dy^T x (by
 * expert groups when offs is set: the experts' weights). */
typedef struct wgrad_job {
	int slot;          /* W_*: the weight */
	void *dy;          /* (rows, out) of prec.act, owned by the job */
	const void *x;     /* (rows, in) of prec.act: a kept activation or a saved copy */
	const int32_t *offs; /* (groups + 1) the rows of each expert, or NULL */
	int64_t rows, in, out, groups;
	int layer;         /* the block (grouped: whether its experts run in Float8) */
} wgrad_job;

typedef struct layer_act {
	void *kept[ACT_COUNT];  /* kept activations (in the mb's memory), else NULL */
	act_set keep;           /* bit i set: activation i survives until the backward */
	wgrad_job jobs[W_COUNT];
	int n_jobs;
	void *saved[ACT_COUNT]; /* copies of recomputed inputs the jobs read (owned) */
} layer_act;

struct model_mb {
	model *m;
	int u0, u1;        /* units held */
	int b, t;
	int train;
	float grad_scale;
	float *logits_host;
	double loss_sum;
	int64_t n_valid;
	int has_labels;
	int32_t *ids, *labels; /* (n) on the device */
	void *mem;             /* one allocation: hidden states, kept activations, head */
	void **hidden;         /* (u1 - u0 + 2): hidden(u) = hidden[u - u0] */
	layer_act *acts;       /* (u1 - u0 + 1), used for the blocks */
	void *xf;              /* (n, dim) final norm output, prec.act */
	float *rstdf;          /* (n) */
	float *gscale;         /* (1) grad_scale in backend memory (MODEL_FUSE_LOSS) */
	/* torchtitan 0.3.0's documents (model_mb_set_positions, _documents), in
	   backend memory, or NULL: each row one causal sequence */
	int32_t *doc;          /* (b, doc_t) the position where the document of each
	                          position of the rows starts */
	int64_t doc_t;         /* positions a row: t, or the whole rows' under context
	                          parallelism */
	size_t doc_n;          /* int32s doc holds */
	int32_t *doc_host;     /* (b, doc_t) doc's host copy (doc_n): ring attention plans
	                          its blocks by it without copying doc back */
	float *doc_cs;         /* (n, rope_dim/2, 2) the RoPE table of each token's position */
	int docs;              /* doc and doc_cs hold this micro-batch's documents */
	/* multi-token prediction (model_mtp.c): its depths' activations, the
	   summed loss and valid labels of all depths, the tokens on the host */
	struct mtp_mb *mtp;
	double mtp_sum;
	int64_t mtp_valid;
};

struct model {
	backend *be;
	llama_args args;
	const model_family *family;
	int ffn;
	int ffn_max;           /* the largest SwiGLU hidden size (dense, shared experts) */
	int moe_sh;            /* the shared experts' hidden units on this rank
	                          (moe.inter_dim x shared_experts, split over tp) */
	int head_dim;          /* query/key heads (MLA: qk_nope + qk_rope) */
	int v_head_dim;        /* value heads (== head_dim but for MLA) */
	int rope_dim;          /* the dims RoPE rotates (MLA: qk_rope) */
	layer_kind *kind;      /* (n_layers) the pieces of each layer */
	int n_tensors;
	model_tensor *tensors;
	int *slot;             /* (n_tensors) W_* of a layer's tensor, -1 for the others */
	int *init;             /* (n_tensors) INIT_* */
	int *tlayer;           /* (n_tensors) the layer of a layer's tensor (MTP depth k:
	                          n_layers + k), -1 for the others */
	int n_units;
	model_unit *units;
	size_t n_params;
	model_prec prec;
	void *params, *grads;  /* own storage (n_params each) of prec.param and prec.grad
	                          (model_set_prec converts it), or NULL */
	layer_w *lw, *lg;      /* (n_layers) views into the bound storage */
	void *tok, *tok_g;     /* (vocab, dim) */
	void *norm, *norm_g;   /* (dim) */
	void *out, *out_g;     /* (vocab, dim); == tok with tied embeddings */

	model_ac_mode ac;
	int ac_every;
	unsigned fuse;          /* enum model_fuse */
	int resid_defer;        /* model_resid_add_linear leaves the branch in d_xn: the
	                           block adds it with the next norm (rmsnorm_add_fwd) */

	/* Scratch for the micro-batches of n tokens seen so far: the recomputed
	 * activations, the backward's gradients, a logits chunk, the RoPE table. */
	int sb, st;             /* (b, t) it is laid out for */
	void *scratch;          /* one allocation for all of it */
	void *recomp[ACT_COUNT];/* one set of recomputed activations */
	float *rope_cs;         /* (t, rope_dim/2, 2) */
	float *temp_cs;         /* (t, hd/2, 2) (scale, 0): Llama 4's attention temperature
	                           as a rotation the rope op applies */
	void *ones;             /* (hd) of prec.param: the weight of a weightless norm */
	void *junk_dw;          /* (hd) of prec.grad: its gradient, discarded */
	float *sinks32;         /* (2h) a layer's sinks and their gradient in float32, the
	                           attention's types, when prec.param or .grad is bf16 */
	void *logits;           /* (chunk, vocab) prec.act */
	int chunk;              /* rows of logits at a time */
	int64_t loss_rows;      /* model_set_loss_rows' (0: logits_chunk's rule) */
	int seq_chunks;         /* model_set_seq_chunks' (0: off) */
	void *seq_x, *seq_dx;   /* (n / seq_chunks, dim) prec.act: a chunk's rows of xf, of
	                           their gradient */
	int32_t *seq_lab;       /* (n / seq_chunks) their labels */
	void *d_x, *d_tmp;      /* (n, dim) prec.resid: d_x the propagated gradient */
	void *d_xn, *d_ya;      /* (n, dim) prec.act: a norm output's gradient; d_x as
	                           prec.act (== d_x when the types agree) */
	void *d_q, *d_att;      /* (n, h*hd) */
	void *d_k, *d_v;        /* (n, hkv*hd) */
	void *d_kr;             /* (n, hkv*hd) with qk_norm: the gradient of wk's output */
	void *d_kvb;            /* MLA (n, h*(nope+v)): wkv_b's output, then its gradient */
	void *d_lat[3];         /* MLA (n, kv_lora+rope) each: the latent's gradients */
	void *d_pe;             /* MLA (n, h*rope): q_pe, then its gradient */
	void *d_kpe;            /* MLA (n, rope): k_pe, then its gradient */
	void *d_qa[2];          /* MLA (n, q_lora): q's bottleneck's gradients */
	void *rlogits;          /* (n, experts) prec.act: router logits, then their gradient */
	float *d_rw;            /* (n, top_k) the routing weights' gradient */
	void *d_rows;           /* (n*top_k, dim) the gradient of ey, then of xr */
	void *d_eh, *d_ea, *d_eg; /* (n*top_k, inter) */

	/* Mixture of experts: layer l's index among the MoE layers (-1: dense);
	 * their expert_bias (load balancing) and tokens-per-expert counts, each
	 * (n_moe, experts) float32 on the device. */
	int *moe_index;
	int n_moe;
	int n_moe_main;        /* the MoE layers among layers.N (balanced); the MTP
	                          layers' come after them (0.3.0 leaves their bias) */
	float *moe_bias, *moe_counts;
	int n_buffers;
	model_tensor *buffers; /* expert_bias per MoE layer: offset into moe_bias */
	void *d_h, *d_a, *d_g;  /* (n, ffn) */
	void *qkv;              /* (n, (h + 2 hkv) hd) prec.act: the fused projection's
	                           output, in the backward its gradient (MODEL_FUSE_BLOCKS) */

	void *lora[2];          /* (n, lora_rank) prec.act: LoRA's lora_a output (scaled),
	                           in the backward also its gradient */

	model_mb *own_mb;       /* model_forward(_backward)'s context */

	/* Autocast (model_set_autocast): the type linears read (BE_F32: off), and
	 * per unit its bound parameters, their cast copy (backend memory, made on
	 * first use) and whether the copy is current. */
	be_dtype autocast;
	const void **ubound;    /* (n_units) */
	void **wcast;           /* (n_units) */
	unsigned char *wcast_ok;/* (n_units) */
	int64_t *pos;           /* (n_pos) the tokens' global positions (CP), or NULL */
	int n_pos;
	model_attention attn;   /* a plan's attention, or fwd NULL for the backend's */

	struct model_f8 *f8;    /* the Float8 converter (model_f8.c), or NULL */
	unsigned char *f8_moe;  /* (blocks) 1: the layer's experts run Float8 grouped GEMMs
	                           (model_f8moe.c), or NULL */
	/* Tensor parallelism (model_tp.c); size 1: none.  Scratch it adds, for
	 * n = b*t tokens and ns = n / size held by the rank: */
	model_tp_group tp;
	int64_t v0, vocab_global; /* the rank's first vocabulary row; the whole vocabulary */
	void *d_full;           /* (n, dim) act or resid: a gathered stream gradient, the
	                           embedding's partial output */
	void *d_xs;             /* (ns, dim) prec.act: a norm output's gradient, scattered */
	void *ring;             /* async: 3 x (ns, dim) prec.act, a fused reduce-scatter's */
	float *ce_stats;        /* loss parallel: (chunk, 3) then (size, chunk, 3) */
	void *lg_full;          /* logits gathered: (chunk, vocab) then (size, chunk,
	                           vchunk) and (chunk, vchunk) prec.act */
	void *pend;             /* async: a gather left for the first matmul that reads it */
	int64_t pend_n, pend_d; /* its rows (n) and row length */
	be_dtype pend_t;

	/* Expert parallelism (model_ep.c); size 1: none.  el: the routed experts
	 * this rank holds; epl (n_layers): a MoE layer's rows on this rank between
	 * its forward and its backward; the rows sent and received so far. */
	model_ep_group ep;
	int el;
	struct moe_ep_layer *epl;
	int64_t ep_sent, ep_recv;
};

/* The transformer blocks: layers.N, then the MTP depths' blocks (in the head
 * unit, layer indices n_layers + k). */
static inline int model_n_blocks(const model *m)
{
	return m->args.n_layers + m->args.mtp_layers;
}

/* Rows of the residual stream a rank holds for n tokens. */
static inline int64_t model_seq(const model *m, int64_t n)
{
	return n / m->tp.size;
}

/* Whether tensor parallelism splits the routed experts' hidden units
 * (torchtitan's TensorParallel of GroupedExperts).  Under expert parallelism
 * (expert_tensor_parallel_degree 1) a rank holds whole experts instead and
 * sends its 1/tp share of the gathered tokens through them (model_moe.c). */
static inline int model_experts_tp(const model *m)
{
	return m->tp.size > 1 && m->ep.size == 1;
}

/* Bytes of activation i of layer l for n tokens in the current precision (0
 * when the layer's pieces do not use it). */
size_t model_act_bytes(const model *m, int l, int i, size_t n);
/* Which activations layer l keeps until its backward. */
act_set model_layer_keep(const model *m, int l);
/* Lay the scratch out for micro-batches of (b, t) (grows; keeps it when it fits). */
int model_scratch_prepare(model *m, int b, int t, titan_err *e);
void model_scratch_release(model *m);

/* Element i of a tensor of type t at p. */
static inline void *elt(const void *p, be_dtype t, size_t i)
{
	return (char *)p + i * be_dtype_size(t);
}

/* y (n, out) = x (n, in) @ w^T with w (out, in) as nn.Linear; beta 1 adds into y. */
void model_linear(model *m, void *y, const void *x, const void *w, int64_t n, int64_t in,
		  int64_t out, float beta);
/* dx (n, in) (+)= dy (n, out) @ w (beta_dx 0 writes, 1 adds). */
void model_linear_dx(model *m, void *dx, const void *dy, const void *w, int64_t n,
		     int64_t in, int64_t out, float beta_dx);
/* The weight a linear reads: w, or its autocast copy (made on first use). */
const void *model_linear_weight(model *m, const void *w);
/* dw (out, in) += dy^T @ x. */
void model_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		     int64_t in, int64_t out);

/* The Float8 converter (model_f8.c): each runs the linear's GEMM in float8
 * and returns 1 when the linear of weight w (gradient dw) is converted, else
 * 0 and the caller runs the plain GEMM. */
int model_f8_linear(model *m, void *y, const void *x, const void *w, int64_t n, int64_t in,
		    int64_t out, float beta);
int model_f8_linear_dx(model *m, void *dx, const void *dy, const void *w, int64_t n,
		       int64_t in, int64_t out, float beta_dx);
int model_f8_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		       int64_t in, int64_t out);
/* Whether the head computes its logits whole rather than in chunks (a
 * converted output projection whose scales run over all the tokens). */
int model_f8_head_whole(const model *m);
/* Whether the linear whose bound weight is w is converted. */
int model_f8_converts(const model *m, const void *w);
void model_f8_free(model *m);
/* The experts' grouped matmul of layer l (backend.h's grouped_matmul, operands
 * of prec.act): the Float8 one where the layer's experts are converted. */
void model_grouped_mm(model *m, int l, int mode, int64_t groups, const int32_t *offs,
		      int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
		      float beta, void *c, be_dtype ct);

/* ---- the block (model_block.c) ---- */

/* Layer l of mb, x the hidden state before it, y after; the backward turns
 * m->d_x (gradient of y) into the gradient of x in place. */
void model_block_fwd(model *m, model_mb *mb, int l, const void *x, void *y);
int model_block_bwd(model *m, model_mb *mb, int l, const void *x, int defer, titan_err *e);
int model_block_wgrad(model *m, model_mb *mb, int l, titan_err *e);
void model_block_drop_jobs(model *m, layer_act *a);

/* What a piece's forward and backward are given: the layer, its activations,
 * its parameter and gradient views, the micro-batch's shape. */
typedef struct piece_ctx {
	model *m;
	const model_mb *mb;
	int l;
	layer_act *a;
	const layer_w *w, *g;
	int64_t b, t, n; /* n = b*t tokens */
	int64_t ns;      /* the rank's rows of the stream: n / tensor parallel degree */
	int defer;       /* backward: leave the weight gradients for model_block_wgrad */
} piece_ctx;

/* Activation i of the layer: kept in the micro-batch, or the shared recompute set. */
static inline void *piece_act(const piece_ctx *c, int i)
{
	return c->a->kept[i] ? c->a->kept[i] : c->m->recomp[i];
}

/* LoRA trains its adapters alone (0.3.0's LoRAConverter freezes every other
 * parameter): a frozen weight's gradient GEMM is skipped, as torch computes
 * none.  slot is the tensor's layer slot, -1 for the embedding, the norms and
 * the output, which are frozen too. */
static inline int model_slot_frozen(const model *m, int slot)
{
	return m->args.lora_rank > 0 && slot != W_LORA_A && slot != W_LORA_B;
}

/* y (n, out) += x @ w^T with y of the residual type: a branch's last linear
 * adding into the stream; with m->resid_defer set, x @ w^T is written to
 * m->d_xn (prec.act) instead and y is left alone (the block adds it). */
void model_resid_add_linear(model *m, void *y, const void *x, const void *w, int64_t n,
			    int64_t in, int64_t out);
/* The weight gradient of slot (dW += dy^T x, x the layer's activation xi) now,
 * or with c->defer kept for model_block_wgrad. */
int model_weight_grad(const piece_ctx *c, int slot, const void *dy, int xi, int64_t in,
		      int64_t out, titan_err *e);

/* ---- the pieces ---- */

/* Attention (model_attn.c): add the layer's tensors to the layout; forward
 * from ACT_XN1 adding its output into xm; the recompute op-level checkpointing
 * needs; backward from dy (the stream's gradient as prec.act) into m->d_xn. */
int model_attn_layout(model *m, int l, int *cap, titan_err *e);
size_t model_attn_act_bytes(const model *m, int l, int i, size_t n);
void model_attn_fwd(const piece_ctx *c, void *xm);
int model_attn_bwd(const piece_ctx *c, const void *dy, titan_err *e);
/* Layer l's attention piece and options, from the flavor (setup). */
layer_kind model_attn_kind(const llama_args *a, int l);
/* The be_attn of a layer's attention call over the micro-batch (block-causal
 * over its documents when it has them). */
be_attn model_attn_shape(const piece_ctx *c, int64_t h, int64_t hkv, int64_t hd, int64_t hdv);
/* RoPE (or its inverse) on x (b, t, heads, hd) by each token's position: the
 * micro-batch's documents' table when it has one (one call per row, each with
 * its own table), else the model's. */
void model_rope(const piece_ctx *c, void *x, int64_t heads, int64_t hd, int inverse);
/* The attention op on the piece's activations (ACT_Q, K, V, ATT, LSE): the
 * plan's (model_set_attention) or the backend's.  The backward reads d_att
 * and writes d_q, d_k, d_v. */
void model_attention_fwd(const piece_ctx *c, const be_attn *sh);
void model_attention_bwd(const piece_ctx *c, const be_attn *sh);

/* Multi-head latent attention (model_mla.c): the same interface. */
int model_mla_layout(model *m, int l, int *cap, titan_err *e);
size_t model_mla_act_bytes(const model *m, int l, int i, size_t n);
void model_mla_fwd(const piece_ctx *c, void *xm);
int model_mla_bwd(const piece_ctx *c, const void *dy, titan_err *e);

/* Feed-forward (model_ffn.c, dispatching to model_moe.c for FFN_MOE): the
 * same from ACT_XN2, adding into y (NULL: recompute its activations, without
 * the output linear). */
int model_ffn_layout(model *m, int l, int *cap, titan_err *e);
size_t model_ffn_act_bytes(const model *m, int l, int i, size_t n);
void model_ffn_fwd(const piece_ctx *c, void *y);
void model_ffn_recompute_op(const piece_ctx *c);
int model_ffn_bwd(const piece_ctx *c, const void *dy, titan_err *e);

/* A SwiGLU over ACT_XN2 with weights in slots w[0..2] (w1, w2, w3) and hidden
 * size ff, its activations in ACT_A, ACT_G, ACT_H: the dense feed-forward and
 * the shared experts.  The forward stops at ACT_H (the caller applies w2);
 * the backward goes from dy (n, dim) of w2's output into m->d_xn (beta_dx 0
 * writes, 1 adds). */
void model_swiglu_fwd(const piece_ctx *c, const int *w, int64_t ff);
int model_swiglu_bwd(const piece_ctx *c, const int *w, int64_t ff, const void *dy,
		     float beta_dx, titan_err *e);
/* The gradient of a grouped weight (the experts'): dW[g] += dy[rows of g]^T
 * x[rows of g] by ACT_OFFS's groups, or kept for model_block_wgrad. */
int model_grouped_weight_grad(const piece_ctx *c, int slot, const void *dy, int xi, int64_t in,
			      int64_t out, titan_err *e);

/* The mixture of experts (model_moe.c). */
int model_moe_layout(model *m, int l, int *cap, titan_err *e);
size_t model_moe_act_bytes(const model *m, int l, int i, size_t n);
void model_moe_fwd(const piece_ctx *c, void *y);
void model_moe_recompute_op(const piece_ctx *c);
int model_moe_bwd(const piece_ctx *c, const void *dy, titan_err *e);
/* The experts' routing of n tokens (be_moe), capacity included. */
be_moe model_moe_shape(const model *m, int64_t n);

/* The experts' rows of a MoE layer (sorted by expert, groups experts from
 * offs) and their activations: the layer's own (n*top_k rows, every expert),
 * or with expert parallelism the rows this rank's experts received. */
typedef struct moe_rows {
	int64_t rows, groups;
	const int32_t *offs;                /* (groups + 1) */
	void *xr, *ea, *eg, *eh, *ey;       /* as ACT_XR .. ACT_EY */
	void *d_rows, *d_eh, *d_ea, *d_eg;  /* the backward's scratch */
	int direct; /* weight gradients now from xr / eh (not the layer's activations) */
} moe_rows;
/* The experts from xr up to ey, and back from d_rows (ey's gradient) to
 * d_rows (xr's), adding the experts' weight gradients. */
void model_moe_experts_fwd(const piece_ctx *c, const moe_rows *v);
int model_moe_experts_bwd(const piece_ctx *c, const moe_rows *v, titan_err *e);

/* Expert parallelism (model_ep.c).  setup: the group and the experts held
 * (before the layout); free: what the layers hold.  fwd: the sorted rows
 * (ACT_XR, ACT_OFFS) to this rank's experts and their outputs back into
 * ACT_EY, the rank's rows kept for the backward when keep; a failure is
 * recorded with backend_fault.  bwd: the rows'
 * gradient (m->d_rows) through the experts that computed them, in place;
 * the layer's rows are freed. */
int model_ep_setup(model *m, const model_ep_group *ep, titan_err *e);
void model_ep_free(model *m);
void model_ep_fwd(const piece_ctx *c, int keep);
int model_ep_bwd(const piece_ctx *c, titan_err *e);

/* Add a tensor of layer l's unit to the layout (model.c): its name under
 * "layers.<l>.", shape (ndim of d0, d1, d2), slot, init and TP style. */
int model_add_layer_tensor(model *m, int *cap, int l, const char *name, int slot, int init,
			   int tp, int ndim, int64_t d0, int64_t d1, int64_t d2, titan_err *e);

/* ---- tensor parallelism (model_tp.c) ---- */

/* The scratch TP adds for micro-batches of n tokens with logits chunks of
 * chunk rows: sizes of d_full, d_xs, ring, ce_stats, lg_full (0 when unused). */
void model_tp_scratch(const model *m, size_t n, size_t chunk, size_t sz[5]);
/* full (n, d) of type t, this rank's rows (ns of them) already in place at
 * rank * ns: all-gathered (or, async, left for the first matmul reading it). */
void model_tp_gather(model *m, void *full, int64_t n, int64_t d, be_dtype t);
/* A gather left pending is finished (before anything but a matmul reads it). */
void model_tp_finish(model *m);
/* y = x @ w^T (dx = 0) or dx-style y = x @ w (dx = 1) when x is the pending
 * gather: computed rank's chunk by chunk as the ring brings them.  0 when x is
 * not pending (nothing done). */
int model_tp_linear_pending(model *m, void *y, const void *x, const void *w, int64_t n,
			    int64_t in, int64_t out, float beta, int dx);
/* part (n/size, d) = the reduce-scatter over the ranks of full (n, d). */
void model_tp_scatter(model *m, void *part, const void *full, int64_t n, int64_t d, be_dtype t);
/* y (n/size, out) of the residual type += the reduce-scatter of x (n, in) @
 * w^T: a row-parallel linear joining the stream. */
void model_tp_resid_add_linear(model *m, void *y, const void *x, const void *w, int64_t n,
			       int64_t in, int64_t out);
/* The loss of c rows of logits (c, vocab / size) against labels (c): vocabulary
 * parallel or gathered, added to *sum and *valid; with scale not 0 the logits
 * become their gradient times scale. */
void model_tp_loss(model *m, void *logits, const int32_t *labels, int64_t c, float scale,
		   double *sum, int64_t *valid);

/* ---- the head's output (model_mb.c) ---- */

/* The output projection of xf (n, dim) and the cross-entropy against labels,
 * chunk by chunk: the loss added to *sum and *valid; with backward the
 * logits' gradient scaled by grad_scale, d xf into m->d_xn and the output
 * weight's gradient added.  Under TP xf is gathered (n rows), the logits are
 * the rank's vocabulary and d xf its partial sum. */
void model_logits_loss(model *m, const model_mb *mb, const void *xf, const int32_t *labels,
		       float grad_scale, double *sum, int64_t *valid, int backward);

/* The embedding of ids (n, device) into rows, the rank's n/size rows of the
 * residual type under TP; backward, the table's gradient += that of drows
 * (the rank's rows under TP). */
void model_embed_rows_fwd(model *m, void *rows, const int32_t *ids, int64_t n);
void model_embed_rows_bwd(model *m, const void *drows, const int32_t *ids, int64_t n);

/* ---- multi-token prediction (model_mtp.c) ---- */

/* The MTP depths' tensors in the head unit (after norm and output). */
int model_mtp_layout(model *m, int *cap, titan_err *e);
/* A micro-batch's MTP state (mb->mtp) for units 0..head; NULL mtp without
 * MTP layers.  Refused for a micro-batch that does not hold every unit. */
int model_mtp_mb_create(model_mb *mb, titan_err *e);
void model_mtp_mb_free(model_mb *mb);
/* The bytes model_mtp_mb_create allocates for micro-batches of (b, t). */
size_t model_mtp_mb_bytes(const model *m, int b, int t);
/* The inputs and labels (host, b*t), then the positions (NULL: none): each
 * depth's shifted inputs, labels and valid rows, on the device. */
int model_mtp_set_tokens(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			 titan_err *e);
int model_mtp_set_positions(model_mb *mb, const int32_t *pos, titan_err *e);
/* The embedding unit's part: the depths' shifted tokens looked up, and
 * their gradients added to the table's. */
void model_mtp_embed_fwd(model *m, model_mb *mb);
void model_mtp_embed_bwd(model *m, model_mb *mb);
/* The head's part in training: forward of every depth from the last
 * block's output; backward from their losses, the gradient of that output
 * left in the mb for model_mtp_add_dh. */
void model_mtp_fwd(model *m, model_mb *mb);
int model_mtp_bwd(model *m, model_mb *mb, titan_err *e);
/* m->d_x (the stream's gradient before the head) += the depths' part. */
void model_mtp_add_dh(model *m, model_mb *mb);

#endif
