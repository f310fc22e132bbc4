/* model_priv.h: the model's private state, shared by model.c (layout, storage,
 * init), model_mb.c (micro-batch contexts, the embedding and head units, the
 * runner) and model_block.c (the transformer block). */
#ifndef TITAN_MODEL_PRIV_H
#define TITAN_MODEL_PRIV_H

#include "model/model.h"

/* Pointers into the bound parameter (or gradient) storage of one layer. */
typedef struct layer_w {
	void *attn_norm; /* (dim) */
	void *wq;        /* (h*hd, dim) */
	void *wk, *wv;   /* (hkv*hd, dim) */
	void *wo;        /* (dim, h*hd) */
	void *ffn_norm;  /* (dim) */
	void *w1, *w3;   /* (ffn, dim) */
	void *w2;        /* (dim, ffn) */
} layer_w;

/* The activations one layer's backward reads; n = b*t tokens. */
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
	ACT_COUNT,
};

/* Activations that op-level checkpointing keeps: matmul and attention outputs. */
#define ACT_OP_KEEP ((1u << ACT_Q) | (1u << ACT_K) | (1u << ACT_V) | (1u << ACT_ATT) | \
		     (1u << ACT_LSE) | (1u << ACT_XM) | (1u << ACT_A) | (1u << ACT_G))
#define ACT_ALL ((1u << ACT_COUNT) - 1)

/* The block's linears, in the order of layer_w: where a deferred weight
 * gradient goes. */
enum { LIN_WQ, LIN_WK, LIN_WV, LIN_WO, LIN_W1, LIN_W3, LIN_W2, LIN_COUNT };

/* A weight gradient the backward left for model_unit_wgrad: dW += dy^T x. */
typedef struct wgrad_job {
	int lin;          /* LIN_* */
	void *dy;         /* (n, out) of prec.act, owned by the job */
	const void *x;    /* (n, in) of prec.act: a kept activation or a saved copy */
	int64_t in, out;
} wgrad_job;

typedef struct layer_act {
	void *kept[ACT_COUNT];  /* kept activations (in the mb's memory), else NULL */
	unsigned keep;          /* bit i set: activation i survives until the backward */
	wgrad_job jobs[LIN_COUNT];
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
};

struct model {
	backend *be;
	llama_args args;
	int ffn;
	int head_dim;
	int n_tensors;
	model_tensor *tensors;
	int n_units;
	model_unit *units;
	size_t n_params;
	model_prec prec;
	float *params, *grads; /* own float32 storage (n_params each), or NULL */
	layer_w *lw, *lg;      /* (n_layers) views into the bound storage */
	void *tok, *tok_g;     /* (vocab, dim) */
	void *norm, *norm_g;   /* (dim) */
	void *out, *out_g;     /* (vocab, dim); == tok with tied embeddings */

	model_ac_mode ac;
	int ac_every;

	/* Scratch for the micro-batches of n tokens seen so far: the recomputed
	 * activations, the backward's gradients, a logits chunk, the RoPE table. */
	int sb, st;             /* (b, t) it is laid out for */
	void *scratch;          /* one allocation for all of it */
	void *recomp[ACT_COUNT];/* one set of recomputed activations */
	float *rope_cs;         /* (t, hd/2, 2) */
	void *logits;           /* (chunk, vocab) prec.act */
	int chunk;              /* rows of logits at a time */
	void *d_x, *d_tmp;      /* (n, dim) prec.resid: d_x the propagated gradient */
	void *d_xn, *d_ya;      /* (n, dim) prec.act: a norm output's gradient; d_x as
	                           prec.act (== d_x when the types agree) */
	void *d_q, *d_att;      /* (n, h*hd) */
	void *d_k, *d_v;        /* (n, hkv*hd) */
	void *d_h, *d_a, *d_g;  /* (n, ffn) */

	model_mb *own_mb;       /* model_forward(_backward)'s context */
};

/* Bytes of activation i for n tokens in the current precision. */
size_t model_act_bytes(const model *m, int i, size_t n);
/* Which activations layer l keeps until its backward. */
unsigned model_layer_keep(const model *m, int l);
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
/* dw (out, in) += dy^T @ x. */
void model_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		     int64_t in, int64_t out);

/* The transformer block (model_block.c): layer l of mb, x the hidden state
 * before it, y after; the backward turns m->d_x (gradient of y) into the
 * gradient of x in place. */
void model_block_fwd(model *m, model_mb *mb, int l, const void *x, void *y);
int model_block_bwd(model *m, model_mb *mb, int l, const void *x, int defer, titan_err *e);
int model_block_wgrad(model *m, model_mb *mb, int l, titan_err *e);
void model_block_drop_jobs(model *m, layer_act *a);

#endif
