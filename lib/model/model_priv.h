/* model_priv.h: the model's private state, shared by model.c (layout, init) and
 * model_run.c (forward, backward, activation checkpointing). */
#ifndef TITAN_MODEL_PRIV_H
#define TITAN_MODEL_PRIV_H

#include "model/model.h"

/* Pointers into the flat parameter (or gradient) buffer for one layer. */
typedef struct layer_w {
	float *attn_norm; /* (dim) */
	float *wq;        /* (h*hd, dim) */
	float *wk, *wv;   /* (hkv*hd, dim) */
	float *wo;        /* (dim, h*hd) */
	float *ffn_norm;  /* (dim) */
	float *w1, *w3;   /* (ffn, dim) */
	float *w2;        /* (dim, ffn) */
} layer_w;

/* The activations one layer's backward reads; n = b*t tokens. */
enum {
	ACT_XN1,   /* (n, dim) attention_norm output */
	ACT_RSTD1, /* (n) */
	ACT_Q,     /* (n, h*hd) after rope */
	ACT_K,     /* (n, hkv*hd) after rope */
	ACT_V,     /* (n, hkv*hd) */
	ACT_ATT,   /* (n, h*hd) attention output, wo's input */
	ACT_LSE,   /* (b, h, t) */
	ACT_XM,    /* (n, dim) x + attention branch */
	ACT_XN2,   /* (n, dim) ffn_norm output */
	ACT_RSTD2, /* (n) */
	ACT_A,     /* (n, ffn) w1 output */
	ACT_G,     /* (n, ffn) w3 output */
	ACT_H,     /* (n, ffn) silu(a) * g, w2's input */
	ACT_COUNT,
};

/* Activations that op-level checkpointing keeps: matmul and attention outputs. */
#define ACT_OP_KEEP ((1u << ACT_Q) | (1u << ACT_K) | (1u << ACT_V) | (1u << ACT_ATT) | \
		     (1u << ACT_LSE) | (1u << ACT_XM) | (1u << ACT_A) | (1u << ACT_G))
#define ACT_ALL ((1u << ACT_COUNT) - 1)

typedef struct layer_act {
	float *f[ACT_COUNT]; /* kept: the layer's own; recomputed: the shared scratch */
	unsigned keep;       /* bit i set: f[i] survives until this layer's backward */
} layer_act;

struct model {
	backend *be;
	llama_args args;
	int ffn;
	int head_dim;
	int n_tensors;
	model_tensor *tensors;
	size_t n_params;
	float *params, *grads; /* (n_params) each */
	layer_w *lw, *lg;      /* (n_layers) views into params, grads */
	float *tok, *tok_g;    /* (vocab, dim) */
	float *norm, *norm_g;  /* (dim) */
	float *out, *out_g;    /* (vocab, dim); == tok with tied embeddings */

	model_ac_mode ac;
	int ac_every;

	/* Activations for micro-batches of (b, t); reallocated when that changes. */
	int b, t;
	float *rope_cs;     /* (t, hd/2, 2) */
	int32_t *ids;       /* (n) inputs on the device */
	int32_t *labels;    /* (n) */
	float *resid;       /* (n_layers + 1, n, dim) each layer's input, then the last output */
	float *act_mem;     /* every layer's kept activations */
	float *scratch;     /* one set of recomputed activations */
	layer_act *acts;    /* (n_layers) */
	float *xf, *rstdf;  /* (n, dim), (n): final norm */
	float *logits;      /* (chunk, vocab) */
	int chunk;          /* rows of logits at a time */
	float *grad_mem;    /* backward scratch, below */
	float *d_x, *d_tmp, *d_xn; /* (n, dim) */
	float *d_q, *d_att; /* (n, h*hd) */
	float *d_k, *d_v;   /* (n, hkv*hd) */
	float *d_h, *d_a, *d_g; /* (n, ffn) */
};

int model_prepare(model *m, int b, int t, titan_err *e);
void model_release_acts(model *m);

#endif
