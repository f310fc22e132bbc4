/* backend.h: the op interface the model, the optimizer and the parallel plans are
 * written against.  A backend owns device memory and implements every op on it;
 * the CPU backend (OpenBLAS sgemm + OpenMP in float32, oneDNN for bfloat16
 * GEMMs) is the reference, a CUDA backend implements the same table.
 *
 * Conventions shared by every op:
 * - Tensors are dense and row-major in device memory (host memory on the CPU);
 *   each float tensor argument comes with its element type (be_dtype).  Token
 *   ids and labels are int32 in device memory.  Statistics (norm rstd,
 *   attention lse), the loss and the grad-norm partial are always float32 or
 *   double: only activations, the weights an op reads and gradients narrow.
 * - Shapes are given as counts; the layout of each argument is in its comment.
 * - Ops that produce a weight gradient ACCUMULATE into it (dw += ...), so
 *   micro-batches add up without extra copies; activation gradients are written.
 * - Ops do not return errors: the arguments are the caller's contract.  A
 *   failure inside an op (a kernel, or a combination of element types the
 *   backend does not implement) is recorded and reported by the next sync, as
 *   a CUDA backend reports a failed kernel.
 * - Reductions run in a fixed order that does not depend on timing, so a run
 *   repeats bit for bit with the same thread count (resume tests rely on it). */
#ifndef TITAN_BACKEND_H
#define TITAN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct backend backend;

enum backend_copy_kind {
	BACKEND_H2D,
	BACKEND_D2H,
	BACKEND_D2D,
};

/* Element types of the float tensors an op reads and writes.  bfloat16 is the
 * top half of a float32 (stored as uint16_t on the host); the float8 types are
 * those of torch.float8_e4m3fn and torch.float8_e5m2.  Every op computes in
 * float32 whatever it reads, and rounds to nearest even when it stores a
 * narrower type. */
typedef enum be_dtype {
	BE_F32 = 0,
	BE_BF16,
	BE_E4M3,
	BE_E5M2,
} be_dtype;

size_t be_dtype_size(be_dtype t);
const char *be_dtype_name(be_dtype t); /* "float32", "bfloat16", ... */
/* "float32" / "bfloat16" (torch's names, as configs spell them) or -1. */
int be_dtype_parse(const char *name);

/* The element-type combinations the model uses, by torchtitan's precision mode
 * (every backend implements these; all-float32 is the reference; "f32" is
 * BE_F32, "bf16" BE_BF16).  The CPU backend implements every mix of f32 and
 * bf16 for every op.
 *
 * autocast: torch.autocast("cpu"/"cuda", bfloat16) on one device or under pure
 * data replication; float32 master weights, cast once per step to the bf16
 * copies the linears read (autocast's weight cache):
 *   embedding_fwd    table f32 -> out f32: the residual stream is float32
 *   rmsnorm_fwd      x f32, w f32 -> y bf16: the float32 norm, rounded where
 *                    autocast casts it for the next linear
 *   matmul           A, B bf16 -> C bf16 (activations, dx with beta 0 or 1), or
 *                    C f32 with beta 1 (weight gradients into float32 grads)
 *   rope             x bf16, rotated in float32 and rounded (apply_rotary_emb's
 *                    .float() and type_as)
 *   attention_*      q, k, v, out, dout, dq, dk, dv bf16
 *   swiglu_*         bf16, with torch's roundings (silu(a) rounded before the
 *                    product)
 *   add, axpy        y f32 = x f32 + branch bf16; y f32 += x bf16
 *   rmsnorm_bwd      dy bf16, x f32, w f32 -> dx f32, dw f32
 *   cross_entropy    logits bf16, the loss in float32 (the loss's .float()),
 *                    the gradient stored bf16
 *   convert          f32 -> bf16 (the weight copies; the residual gradient
 *                    entering a bf16 branch), bf16 -> f32
 * FSDP's MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32):
 * parameters gathered in bf16, every activation and the residual stream bf16:
 *   embedding_fwd    table bf16 -> out bf16
 *   rmsnorm_fwd      x, w, y bf16;   rmsnorm_bwd  dy, x, w, dx bf16, dw f32
 *   matmul           C bf16 (activations), C f32 with beta 1 (weight gradients)
 *   embedding_bwd    dout bf16 -> dtable f32
 *   add, axpy        all bf16
 *   rope, attention_*, swiglu_*, cross_entropy as under autocast
 * training.dtype = "bfloat16": parameters, gradients and AdamW states bf16:
 *   matmul           C bf16 with beta 1 (weight gradients)
 *   rmsnorm_bwd      dw bf16;   embedding_bwd  dtable bf16
 *   adamw, sumsq, scale   bf16 (AdamW in float32, rounded as torch's fused
 *                    AdamW rounds bf16 states)
 *   the rest as under FSDP's policy */

/* RoPE layouts: torchtitan's Llama rotates interleaved pairs (x[2i], x[2i+1])
 * (view_as_complex of (..., hd/2, 2)); HF's and Qwen3's rotate_half pairs
 * (x[i], x[i + hd/2]). */
enum be_rope_style {
	BE_ROPE_INTERLEAVED,
	BE_ROPE_HALF,
};

/* One attention call: softmax(scale q k^T + mask) v per query head; query head j
 * reads kv head j / (h / hkv).  Layouts, contiguous:
 *   q (b, tq, h, hd); k (b, tk, hkv, hd); v (b, tk, hkv, hdv); out (b, tq, h, hdv);
 *   lse (b, h, tq) float32, each row's log-sum-exp.
 * Query i sits at position q_pos0 + i and key j at k_pos0 + j; the mask keeps
 * the keys whose positions pass every test that is on: causal (at or before
 * the query's), window (the last `window` of those: GPT-OSS's sliding window),
 * chunk (the query's own chunk of `chunk` positions, [p / chunk * chunk, + chunk):
 * Llama 4's local attention), doc (the query's own document of a packed window:
 * the keys at or after its document's first position, torchtitan's
 * block-causal mask).  A context-parallel rank passes the positions of its
 * chunks; a query that sees no key gets out = 0 and lse = -inf (the sink's
 * logit with sinks), which merging partial results expects.  The gradients dq,
 * dk, dv are written (not accumulated).
 *
 * Variants the families use, each off when 0 / NULL:
 *   hdv != hd       MLA's value heads (DeepSeek V3: hd 192 = nope 128 + rope 64,
 *                   hdv 128)
 *   scale           MLA's 1/sqrt(hd) times YaRN's mscale^2
 *   window, chunk   as above
 *   doc, doc_t      documents, as above: meant with causal (the mask of
 *                   torchtitan's packed windows); with sinks a query keeps its
 *                   sink whatever its document.
 *   sinks (h)       GPT-OSS's learned sinks, float32: one logit per query head
 *                   that joins each row's softmax denominator with no value
 *                   (out = softmax over [keys, sink] without the sink's column;
 *                   lse includes it).  dsinks (h) float32, when not NULL, is
 *                   ACCUMULATED by the backward (a weight gradient).  A
 *                   context-parallel rank gives the sinks to one block of a
 *                   query's row only. */
typedef struct be_attn {
	int64_t b, tq, tk, h, hkv, hd, hdv;
	float scale;       /* 0: 1/sqrt(hd), as Llama */
	int causal;
	int64_t q_pos0, k_pos0;
	be_dtype qkv;      /* q, k, v */
	be_dtype out;      /* out (forward), and the out the backward reads */
	be_dtype dout;     /* the gradient of out */
	be_dtype grad;     /* dq, dk, dv */
	int64_t window;    /* sliding window in positions; 0: none */
	int64_t chunk;     /* chunked attention's chunk in positions; 0: none */
	const int32_t *doc; /* (b, doc_t) backend memory, or NULL: doc[bi * doc_t + p] is the
			       first position of the document that position p of batch row bi
			       belongs to (non-decreasing in p, <= p) */
	int64_t doc_t;      /* positions per row of doc (the whole sequence: a context-parallel
			       rank passes the full rows and its q_pos0/k_pos0) */
	const int32_t *doc_host; /* doc's host copy (the model keeps one), or NULL; the
				    backends ignore it: it is for a caller's own attention
				    (ring attention) to plan by without copying doc back */
	const void *sinks; /* (h) float32 or NULL */
	void *dsinks;      /* (h) float32, accumulated, or NULL */
} be_attn;

/* A caller's own attention in place of the backend's op (context
 * parallelism: the other ranks' keys and values), called with the op's
 * arguments for this rank's tokens; a failure is recorded with backend_fault
 * and reported by the next sync, as an op's.  Models take one (lib/model's
 * model_set_attention, lib/flux's flux_model_set_attention). */
typedef struct be_attn_hook {
	void *ctx;
	void (*fwd)(void *ctx, void *out, float *lse, const void *q, const void *k,
		    const void *v, const be_attn *a);
	void (*bwd)(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
		    const void *k, const void *v, const void *out, const float *lse,
		    const be_attn *a);
} be_attn_hook;

/* Mixture of experts (torchtitan's MoE: TokenChoiceTopKRouter, TokenReorderer,
 * GroupedExperts).  n tokens each go to k of e experts; assignment a =
 * token * k + j is the token's j-th choice.  The assignments sorted by expert
 * (stable: in token order within an expert) are the ROWS r = 0 .. offs[e] - 1
 * the experts' grouped matmuls run over; an expert past its capacity drops the
 * rest of its assignments (their output is zero).  Integer arrays (idx, perm,
 * pos, offs) are int32 in device memory. */
enum be_moe_score {
	BE_MOE_SOFTMAX, /* softmax over the experts */
	BE_MOE_SIGMOID, /* an independent sigmoid per expert */
};
typedef struct be_moe {
	int64_t n, e, k;   /* tokens, experts, experts per token (k <= e) */
	int score;         /* be_moe_score, computed in float32 */
	int route_norm;    /* divide each token's k scores by their sum (+ 1e-20) */
	float route_scale; /* then multiply them by this */
	int64_t groups;    /* node-limited routing: the experts form `groups` equal
	                      groups (at most 256, of 2 experts at least); a token
	                      chooses among the `limited` groups whose two best
	                      scores sum highest; 0: off */
	int64_t limited;
	int force_balance; /* debug.moe_force_load_balance: assignment a goes to
	                      expert a % e, whatever the scores */
	int64_t capacity;  /* rows an expert takes at most (in token order); 0: all */
} be_moe;

/* Grouped matmul modes (torch._grouped_mm's three uses by the experts), group
 * g owning rows offs[g] .. offs[g+1] - 1 of the row-major 2-D operands:
 *   BE_GMM_FWD  c (rows, nn) = a (rows, kk) @ b[g]^T,  b (groups, nn, kk)  (y = x W^T)
 *   BE_GMM_DX   c (rows, kk) = a (rows, nn) @ b[g],    b (groups, nn, kk)  (dx = dy W)
 *   BE_GMM_DW   c[g] (nn, kk) = a[rows of g]^T (nn, m_g) @ b[rows of g] (m_g, kk),
 *               a (rows, nn), b (rows, kk), c (groups, nn, kk)           (dW = dy^T x)
 * c = beta * c + product (beta 0 writes); FWD and DX with beta 0 write zero rows
 * from offs[groups] to rows, so every row of c is defined. */
enum be_gmm_mode { BE_GMM_FWD, BE_GMM_DX, BE_GMM_DW };

/* Float8 (torchao's Float8Linear under the quantize.linear.float8 converter;
 * the numerics are lib/float8's, see float8.h).  A cast's scaling: one scale
 * for the tensor, or one per row or per column of x (rows, cols), its amax
 * taken along that row or column.  (The values are float8.h's f8_scaling.) */
enum be_f8_scaling {
	BE_F8_TENSOR = 1,
	BE_F8_ROWS = 2,
	BE_F8_COLS = 3,
};

/* The optimizer's values of one step, in device memory, that the fused
 * optimizer ops read and write there (so a step captured in a CUDA graph
 * replays with the next step's lr and clipping): the hyper-parameters and the
 * bias corrections 1 - b^step in double (the update's constants are derived
 * from them as torch's fused AdamW does), the gradient's clipping factor and
 * its norm before clipping. */
typedef struct be_adamw_step {
	double lr, b1, b2, eps;
	double bc1, bc2;
	float clip; /* clip_factor writes it; 1 when not clipping */
	float norm; /* clip_factor writes it: the global gradient norm */
} be_adamw_step;

/* A span of the optimizer's flat buffers with its weight decay (a tensor, or a
 * run of tensors that share the decay). */
typedef struct be_span {
	int64_t offset, n;
	float wd;
} be_span;

typedef struct backend_ops {
	const char *name; /* "cpu", "cuda" */

	/* Memory.  alloc returns NULL (and sets e) when out of memory; bytes are
	 * counted for backend_peak_bytes.  A later alloc may hand out freed
	 * memory again as it was, never zeroed (the CUDA backend's arena; the CPU
	 * backend's cache, backend_cpu_cached_bytes). */
	void *(*alloc)(backend *be, size_t bytes, titan_err *e);
	void (*free)(backend *be, void *p);
	void (*destroy)(backend *be); /* the backend itself (backend_free) */
	void (*copy)(backend *be, void *dst, const void *src, size_t bytes, int kind);
	void (*zero)(backend *be, void *p, size_t bytes);
	/* Waits for the work queued so far; reports an op's failure (a kernel, or an
	 * element type the backend does not implement for that op) since the last
	 * sync. */
	int (*sync)(backend *be, titan_err *e);

	/* dst (n) = src (n) converted between element types; also from float8
	 * (BE_E4M3, BE_E5M2) to float32 or bfloat16, exactly (their values, no
	 * scale: FSDP's float8 all-gather hands the linears the gathered codes). */
	void (*convert)(backend *be, void *dst, be_dtype dt, const void *src, be_dtype st,
			int64_t n);

	/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, row-major, with
	 * leading dimensions lda/ldb/ldc (sgemm).  A and B share type ab; the
	 * products accumulate in float32 and C (type ct) is read (beta != 0) and
	 * written in its type. */
	void (*matmul)(backend *be, int trans_a, int trans_b, int64_t m, int64_t n,
		       int64_t k, float alpha, const void *a, int64_t lda, const void *b,
		       int64_t ldb, be_dtype ab, float beta, void *c, int64_t ldc,
		       be_dtype ct);

	/* y = x / sqrt(mean(x^2) + eps) * w over the last dim.  x, y (n, d); w (d);
	 * rstd (n) float32 keeps 1/sqrt(mean + eps) for the backward. */
	void (*rmsnorm_fwd)(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			    be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			    float eps);
	/* dx (n, d) written; dw (d) accumulated. */
	void (*rmsnorm_bwd)(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			    const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			    const void *w, be_dtype wt, const float *rstd, int64_t n,
			    int64_t d);

	/* Rotary embedding in place over the last dim of x (b, t, h, hd), in the
	 * given be_rope_style.  cs (t, hd/2, 2) float32 holds (cos, sin) of each
	 * token's angle for pair i (a CP rank passes the rows of its own positions).
	 * inverse = 1 rotates by minus the angle: the backward of the forward. */
	void (*rope)(backend *be, void *x, be_dtype xt, const float *cs, int64_t b,
		     int64_t t, int64_t h, int64_t hd, int style, int inverse);

	void (*attention_fwd)(backend *be, void *out, float *lse, const void *q,
			      const void *k, const void *v, const be_attn *a);
	void (*attention_bwd)(backend *be, void *dq, void *dk, void *dv, const void *dout,
			      const void *q, const void *k, const void *v, const void *out,
			      const float *lse, const be_attn *a);

	/* SwiGLU gate: y = silu(a) * g, all (n) of type t. */
	void (*swiglu_fwd)(backend *be, void *y, const void *a, const void *g, be_dtype t,
			   int64_t n);
	/* da, dg (n) written. */
	void (*swiglu_bwd)(backend *be, void *da, void *dg, const void *dy, const void *a,
			   const void *g, be_dtype t, int64_t n);

	/* GPT-OSS's clamped SwiGLU over x (n, 2f) whose columns (2i, 2i+1) hold
	 * the pair (gate, up) of hidden unit i (its mlp1's interleaved rows):
	 *   g = min(gate, limit), u = clamp(up, -limit, limit),
	 *   y (n, f) = g sigmoid(alpha g) (u + 1),
	 * all of type t.  The backward writes dx (n, 2f); a clamped input gets no
	 * gradient (torch.clamp's: the bounds themselves pass it). */
	void (*swiglu_clamp_fwd)(backend *be, void *y, const void *x, be_dtype t, int64_t n,
				 int64_t f, float alpha, float limit);
	void (*swiglu_clamp_bwd)(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
				 int64_t n, int64_t f, float alpha, float limit);

	/* Biases of linears (GPT-OSS's attention, router and experts): y (rows, d)
	 * += bias.  With offs NULL every row adds bias (d); else rows offs[g] ..
	 * offs[g+1] - 1 add row g of bias (groups, d) (the experts' biases over
	 * rows sorted by expert) and rows from offs[groups] on are left alone. */
	void (*bias_add)(backend *be, void *y, be_dtype yt, const void *bias, be_dtype bt,
			 int64_t rows, int64_t d, int64_t groups, const int32_t *offs);
	/* dbias (d) or (groups, d) += the sums of dy's rows over the same groups, in
	 * row order. */
	void (*bias_grad)(backend *be, void *dbias, be_dtype bt, const void *dy, be_dtype dyt,
			  int64_t rows, int64_t d, int64_t groups, const int32_t *offs);

	/* Multi-head latent attention's split heads (DeepSeek V3), of type t:
	 *   heads_cat:   y (n, h, d1 + d2) = [x1 (n, h, d1), x2 (n, h2, d2)]
	 *   heads_split: x1 (n, h, d1), x2 (n, h2, d2) = the two parts of y
	 * with h2 = h, or h2 = 1: one x2 row shared by every head (MLA's k_pe,
	 * which the split then sums over the heads in order: the backward of the
	 * broadcast).  Either output of the split may be NULL (not wanted).  They
	 * are each other's backward. */
	void (*heads_cat)(backend *be, void *y, const void *x1, const void *x2, be_dtype t,
			  int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2);
	void (*heads_split)(backend *be, void *x1, void *x2, const void *y, be_dtype t, int64_t n,
			    int64_t h, int64_t d1, int64_t d2, int64_t h2);

	/* out (n, d) = table[ids - v0] for ids in [v0, v0 + nv), zero rows for the
	 * others (a vocabulary-parallel rank holds rows v0.. of the table);
	 * table (nv, d); ids (n). */
	void (*embedding_fwd)(backend *be, void *out, be_dtype ot, const void *table,
			      be_dtype tt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv);
	/* dtable[ids[i] - v0] += dout[i] for the ids in range, in token order. */
	void (*embedding_bwd)(backend *be, void *dtable, be_dtype tt, const void *dout,
			      be_dtype dt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			      int64_t nv);

	/* Fused softmax + cross-entropy over logits (n, v) of type lt with labels
	 * (n), in float32; a label equal to ignore_index counts for nothing.  Adds
	 * the summed loss of the valid rows to *loss_sum and their number to
	 * *n_valid.  When grad_scale is not 0 the logits are overwritten by their
	 * gradient, (softmax - onehot) * grad_scale, zero on ignored rows: no
	 * probability matrix is kept beside the logits. */
	void (*cross_entropy)(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			      int64_t n, int64_t v, int32_t ignore_index, float grad_scale,
			      double *loss_sum, int64_t *n_valid);

	/* Cross-entropy over logits sharded by vocabulary (tensor parallelism's
	 * loss_parallel): a rank's logits (n, nv) of type lt are columns v0 ..
	 * v0 + nv - 1.  ce_vocab_stats writes stats (n, 3) float32 per row: the
	 * max m over its columns, s = sum of exp(logit - m), and the label's logit
	 * when the label is one of its columns, else 0 (m = -inf, s = 0 without
	 * columns).  ce_vocab_loss gets every rank's stats (ranks, n, 3) in rank
	 * order (an all-gather of them): per row lse = M + log(sum_r s_r exp(m_r -
	 * M)), M = max_r m_r, the label's logit = sum_r of the third column; adds
	 * the valid rows' lse - logit to *loss_sum and their number to *n_valid;
	 * with grad_scale not 0 overwrites the logits by (exp(logit - lse) -
	 * onehot) * grad_scale, zero on ignored rows.  Every rank gets the same
	 * loss; the sum over its rows of the gradient is this rank's columns of
	 * cross_entropy's. */
	void (*ce_vocab_stats)(backend *be, const void *logits, be_dtype lt,
			       const int32_t *labels, int64_t n, int64_t nv, int64_t v0,
			       float *stats);
	void (*ce_vocab_loss)(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			      int64_t n, int64_t nv, int64_t v0, int32_t ignore_index,
			      const float *all, int ranks, float grad_scale, double *loss_sum,
			      int64_t *n_valid);

	/* Mixture of experts (be_moe above).  Routing: scores (n, e) float32 =
	 * softmax or sigmoid of logits (n, e) of type lt; idx (n, k) the experts
	 * chosen (best first, ties to the lower index) by scores + bias (bias (e)
	 * float32, or NULL: it only steers the choice); w (n, k) float32 the chosen
	 * experts' scores, normalised (route_norm) and scaled (route_scale). */
	void (*moe_route)(backend *be, float *scores, int32_t *idx, float *w, const void *logits,
			  be_dtype lt, const float *bias, const be_moe *r);
	/* dlogits (n, e) of type lt written from dw (n, k) float32, the gradient
	 * of w; scores and idx as moe_route left them. */
	void (*moe_route_bwd)(backend *be, void *dlogits, be_dtype lt, const float *dw,
			      const float *scores, const int32_t *idx, const be_moe *r);
	/* The sort by expert: perm (n*k) the assignment of each row (-1 past
	 * offs[e]); pos (n*k) the row of each assignment (-1: dropped by
	 * capacity); offs (e+1) each expert's first row.  counts (e) float32, when
	 * not NULL, += the assignments each expert was chosen for (torchtitan's
	 * tokens_per_expert, before capacity). */
	void (*moe_permute)(backend *be, int32_t *perm, int32_t *pos, int32_t *offs,
			    float *counts, const int32_t *idx, const be_moe *r);
	/* y (n*k, d): row r = x[perm[r] / k] (x (n, d)), times w[perm[r]] when w
	 * (n*k float32) is not NULL; rows from offs[e] on are zero. */
	void (*moe_gather)(backend *be, void *y, const void *x, be_dtype t, const int32_t *perm,
			   const int32_t *offs, const float *w, const be_moe *r, int64_t d);
	/* out (n, d) = beta * out + sum over j in order of (w ? w[a] : 1) * y[pos[a]],
	 * a = token * k + j, dropped assignments skipped: the experts' outputs
	 * back in token order (and the backward of moe_gather). */
	void (*moe_combine)(backend *be, void *out, const void *y, be_dtype t, const int32_t *pos,
			    const float *w, float beta, const be_moe *r, int64_t d);
	/* dw (n*k) float32: dw[a] = <y[pos[a]], x[a / k]> over d (0 when dropped);
	 * y (rows, d), x (n, d): the gradient of the routing weights. */
	void (*moe_dot)(backend *be, float *dw, const void *y, const void *x, be_dtype t,
			const int32_t *pos, const be_moe *r, int64_t d);
	/* The experts' matmuls, one call for all groups (be_gmm_mode above).
	 * a, b of type ab; c of type ct; products accumulate in float32. */
	void (*grouped_matmul)(backend *be, int mode, int64_t groups, const int32_t *offs,
			       int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
			       be_dtype ab, float beta, void *c, be_dtype ct);

	/* Float8 (be_f8_scaling above).  amax (1, rows or cols floats) = max |x|
	 * of x (rows, cols) of type xt over the tensor, each row or each column; a
	 * NaN in a reduction makes it NaN.  FSDP's precomputed scales: each rank's
	 * amax of its shard, all-reduced with max, then f8_cast with it. */
	void (*f8_amax)(backend *be, float *amax, const void *x, be_dtype xt, int64_t rows,
			int64_t cols, int scaling);
	/* torchao's dynamic cast (hp_tensor_to_float8_dynamic), fused: per scale
	 * s = float32(qmax / max(amax, 1e-12)) computed in double (then rounded down
	 * to a power of two when pow2), q = the saturating cast of x * s (float32)
	 * to qt (BE_E4M3 or BE_E5M2, qmax 448 or 57344); scale (1, rows or cols
	 * floats) gets s.  amax NULL: taken here; else the given one (FSDP's).  q
	 * is (rows, cols) like x, or with transpose set its transpose (cols, rows):
	 * a float8 GEMM reads its operands with the reduction dimension contiguous. */
	void (*f8_cast)(backend *be, void *q, be_dtype qt, float *scale, const void *x,
			be_dtype xt, int64_t rows, int64_t cols, int scaling, int pow2,
			int transpose, const float *amax);
	/* The scaled float8 GEMM (torch._scaled_mm with torchao's scales):
	 *   C (m, n) = beta * C + sum_k (a[i,k] / sa[i]) * (b[j,k] / sb[j])
	 * a (m, k) and b (n, k) float8 of types at, bt (not both e5m2) with k
	 * contiguous; sa (nsa = 1 or m floats) and sb (nsb = 1 or n) the scales
	 * f8_cast wrote (q = x * s); C (m, n), ldc n, of type ct (float32 or
	 * bfloat16); float32 accumulation.  The CPU divides each operand by its
	 * scale and multiplies in float32: torchao's emulate=True, the same operand
	 * values bit for bit.  A GPU multiplies the float8 values and scales the
	 * float32 sums by 1 / (sa[i] sb[j]). */
	void (*f8_matmul)(backend *be, int64_t m, int64_t n, int64_t k, const void *a,
			  be_dtype at, const float *sa, int64_t nsa, const void *b, be_dtype bt,
			  const float *sb, int64_t nsb, float beta, void *c, be_dtype ct);

	/* grouped_matmul (same arguments) with torchao's Float8 grouped GEMM
	 * (prototype.moe_training's _Float8GroupedMM, torchtitan's
	 * Float8GroupedExpertsConverter): every operand cast to e4m3 with
	 * power-of-two scales (f8_cast's), each along its GEMM's reduction:
	 *   FWD  a: per row (token); b[g]: per row of b[g] (B_t's columns)
	 *   DX   a (dy): per row; b[g]: per column of b[g]
	 *   DW   a (dy), b (x): per column, over group g's rows only
	 * The float8 operands are multiplied with float32 accumulation and the
	 * product rounded to bfloat16 (torchao's out_dtype) before
	 * c = beta * c + product is written in ct.  NULL: not built. */
	void (*f8_grouped_matmul)(backend *be, int mode, int64_t groups, const int32_t *offs,
				  int64_t rows, int64_t nn, int64_t kk, const void *a, const void *b,
				  be_dtype ab, float beta, void *c, be_dtype ct);

	/* Elementwise: y = a + b; y += alpha * x; x *= alpha. */
	void (*add)(backend *be, void *y, be_dtype yt, const void *a, be_dtype at,
		    const void *b, be_dtype bt, int64_t n);
	void (*axpy)(backend *be, void *y, be_dtype yt, float alpha, const void *x,
		     be_dtype xt, int64_t n);
	void (*scale)(backend *be, void *x, be_dtype xt, float alpha, int64_t n);

	/* torch.lerp(x, end, w) in place, float32: x + w (end - x) when |w| < 0.5,
	 * else end - (1 - w)(end - x), each a single fused multiply-add as torch's
	 * vectorised CPU kernel and its CUDA kernel compute it (bit for bit;
	 * Muon's momentum_buffer.lerp_ and its Nesterov lerp). */
	void (*lerp)(backend *be, float *x, const float *end, float w, int64_t n);

	/* sum(x^2) in double, in a fixed order: the grad-norm partial. */
	double (*sumsq)(backend *be, const void *x, be_dtype xt, int64_t n);

	/* torch.optim.AdamW's update of n elements, p, g, m, v all of type t
	 * (float32 masters, or bfloat16 under training.dtype = "bfloat16", computed
	 * in float32 and rounded back as torch's fused AdamW does):
	 *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	 *   p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
	 * with bc1 = 1 - b1^step, bc2 = 1 - b2^step.  The hyper-parameters come in
	 * double, as torch's kernel gets them: it derives 1 - b1, lr/bc1, sqrt(bc2)
	 * in double before rounding them to float32, and so do the backends. */
	void (*adamw)(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
		      int64_t n, double lr, double b1, double b2, double eps, double wd,
		      double bc1, double bc2);
	/* The same update with float32 p and g and bfloat16 m and v (torchtitan
	 * 0.3.0's fused_opt_states_bf16: torch's fused CUDA AdamW on fp32
	 * parameters and bf16 states, FusedAdamMathFunctorMP), computed in
	 * float32 as that kernel's adam_math does, m and v rounded to bf16 when
	 * stored:
	 *   p = fma(-(lr wd), p, p);  m = fma(b1, m, fma(-b1, g, g));
	 *   v = fma(b2, v, fma(-b2, g g, g g));
	 *   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
	 * every hyper-parameter (and bc1, sqrt(bc2), derived in double) rounded to
	 * float32. */
	void (*adamw_bf16_states)(backend *be, float *p, const float *g, void *m, void *v,
				  int64_t n, double lr, double b1, double b2, double eps,
				  double wd, double bc1, double bc2);

	/* Fused ops: what compile.enable runs in place of several plain ones (the
	 * CUDA backend in one kernel or one library plan each, the CPU backend by
	 * its plain kernels: the reference).  Their results are the plain ops'
	 * up to the order of float32 sums. */

	/* The residual add fused into the next norm: r = x + delta, rounded to
	 * rt and stored to res (which may be x: the stream updated in place);
	 * y = r / sqrt(mean(r^2) + eps) * w over the last dim, the statistics over
	 * the stored r as torch computes the norm of its residual stream.  x, res
	 * (n, d) of rt; delta (n, d) of dt; w (d); y (n, d) of yt; rstd (n). */
	void (*rmsnorm_add_fwd)(backend *be, void *y, be_dtype yt, float *rstd, void *res,
				be_dtype rt, const void *x, const void *delta, be_dtype dt,
				const void *w, be_dtype wt, int64_t n, int64_t d, float eps);
	/* rmsnorm_bwd with the gradient arriving along the residual stream added:
	 * dx = (the norm's input gradient) + dres, written; dres (n, d) of dx's
	 * type, and may be dx; dw (d) accumulated. */
	void (*rmsnorm_add_bwd)(backend *be, void *dx, be_dtype dxt, const void *dres, void *dw,
				be_dtype dwt, const void *dy, be_dtype dyt, const void *x,
				be_dtype xt, const void *w, be_dtype wt, const float *rstd,
				int64_t n, int64_t d);

	/* RoPE fused into the QKV layout: the fused projection's output qkv
	 * (b, t, h + 2 hkv, hd) split into attention's q (b, t, h, hd), k and v
	 * (b, t, hkv, hd), q and k rotated as rope does (style; cs (t, hd/2, 2)).
	 * All of type xt. */
	void (*rope_qkv)(backend *be, void *q, void *k, void *v, const void *qkv, be_dtype xt,
			 const float *cs, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			 int style);
	/* Its backward: dq and dk rotated back and dv packed into dqkv
	 * (b, t, h + 2 hkv, hd), written. */
	void (*rope_qkv_bwd)(backend *be, void *dqkv, const void *dq, const void *dk,
			     const void *dv, be_dtype xt, const float *cs, int64_t b, int64_t t,
			     int64_t h, int64_t hkv, int64_t hd, int style);

	/* The output projection fused with the loss over chunks of rows, so that
	 * the logits of all n rows never exist at once: per chunk of at most chunk
	 * rows, logits_c (c, v) = h_c w^T of type t in the scratch logits
	 * (chunk, v); their cross-entropy against labels as cross_entropy (the
	 * loss of the valid rows added to *loss_sum, their number to *n_valid);
	 * and when grad_scale (a float in device memory, so a replayed step reads
	 * the next step's) is not NULL, the logits' gradient in place, then
	 * dh_c (c, d) = logits_c w (type dht, written) and dw (v, d) +=
	 * logits_c^T h_c (type dwt).  h (n, d) and w (v, d) of type t. */
	void (*lm_head_loss)(backend *be, const void *h, const void *w, be_dtype t,
			     const int32_t *labels, int64_t n, int64_t d, int64_t v,
			     int32_t ignore_index, const float *grad_scale, void *dh, be_dtype dht,
			     void *dw, be_dtype dwt, void *logits, int64_t chunk,
			     double *loss_sum, int64_t *n_valid);

	/* The optimizer on the device, waiting for nothing.  sumsq_dev: *out
	 * (device double) = sum(x^2) in a fixed order, as sumsq.  clip_factor:
	 * st->norm = sqrt(*sumsq) and st->clip = min(1, max_norm / (norm + 1e-6))
	 * (torch's clip_grad_norm_; 1 when max_norm <= 0).  adamw_multi: AdamW as
	 * adamw over every span of the flat p, g, m, v (type t), all spans in one
	 * go (one kernel), with the gradient multiplied by st->clip first and the
	 * step's values read from st (device memory); spans is a host array (the
	 * CUDA backend keeps its device table per distinct list). */
	void (*sumsq_dev)(backend *be, double *out, const void *x, be_dtype xt, int64_t n);
	void (*clip_factor)(backend *be, be_adamw_step *st, const double *sumsq, float max_norm);
	void (*adamw_multi)(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
			    const be_span *spans, int nspans, const be_adamw_step *st);

	/* Flux's frozen encoders: T5 and CLIP (lib/textenc) and the FLUX
	 * autoencoder (NCHW images), forward only.  As every op, each computes in
	 * float32 what it reads and rounds where it stores bf16; where torch's bf16
	 * model rounds more often inside the op, that is said. */

	/* T5's self-attention (transformers' T5Attention, no mask): per batch row
	 * and head, out = softmax(q k^T + bias) v, with NO 1/sqrt(dk) scaling (T5
	 * folds it into its initialisation).  q, k, v, out (b, l, h, dk); bias
	 * (h, l, l) the relative position bias every batch row shares.  All of
	 * type t.  bf16: the scores q k^T and the biased scores are rounded (the
	 * bf16 matmul and add store them), the softmax runs in float32 and its
	 * probabilities are rounded (softmax(scores.float()).type_as(scores)),
	 * out is summed in float32 and rounded once. */
	void (*t5_attention)(backend *be, void *out, const void *q, const void *k, const void *v,
			     const void *bias, be_dtype t, int64_t b, int64_t l, int64_t h,
			     int64_t dk);
	/* T5 v1.1's gated-gelu: y = gelu_tanh(a) * g with gelu_tanh(x) =
	 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (transformers'
	 * gelu_new, torch's gelu(approximate="tanh")); all (n) of type t, y may
	 * be a.  bf16: gelu_tanh(a) is rounded before the product (the bf16 model
	 * stores it). */
	void (*geglu_fwd)(backend *be, void *y, const void *a, const void *g, be_dtype t,
			  int64_t n);
	/* Swish in place: x = x sigmoid(beta x), (n) of type t: beta 1 the
	 * autoencoder's swish, beta 1.702 CLIP's quick_gelu.  Both are written
	 * x * torch.sigmoid(beta * x) in torch, three ops: bf16 rounds beta x
	 * and the sigmoid before the product (torch's fused F.silu would round
	 * once). */
	void (*swish)(backend *be, void *x, be_dtype t, float beta, int64_t n);
	/* nn.LayerNorm over the last dim: y (n, d) = (x - mean) / sqrt(var + eps)
	 * * w + b, the variance biased, mean and variance summed in double; w, b
	 * (d) of type wt. */
	void (*layernorm_fwd)(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			      const void *w, const void *b, be_dtype wt, int64_t n, int64_t d,
			      float eps);
	/* nn.GroupNorm(groups, c, eps) on NCHW: x, y (n, c, hw) with hw = H * W;
	 * the channels form `groups` runs of c / groups; per sample and group the
	 * mean and biased variance of its c / groups * hw values (in double), then
	 * y = (x - mean) / sqrt(var + eps) * w[ch] + b[ch]; w, b (c) of type wt. */
	void (*groupnorm_fwd)(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			      const void *w, const void *b, be_dtype wt, int64_t n, int64_t c,
			      int64_t hw, int64_t groups, float eps);
	/* interpolate(x, scale_factor=2, mode="nearest"): y (n, c, 2h, 2w) with
	 * y[.., i, j] = x (n, c, h, w)[.., i / 2, j / 2]; both of type t. */
	void (*upsample2x)(backend *be, void *y, const void *x, be_dtype t, int64_t n, int64_t c,
			   int64_t h, int64_t w);
	/* The columns of a k x k convolution with stride s over x (n, c, h, w)
	 * zero-padded by pad = (left, right, top, bottom) (F.pad's order; Conv2d's
	 * padding p is (p, p, p, p)), as F.unfold lays them out, for the output
	 * pixels p0 .. p0 + np - 1 of each image (row-major over (ho, wo), ho =
	 * (h + top + bottom - k) / s + 1, wo likewise): cols (n, c k k, np) with
	 *   cols[i][(ch k + ki) k + kj][j] = x[i][ch][oy s + ki - top][ox s + kj - left]
	 * for (oy, ox) = divmod(p0 + j, wo), 0 in the padding.  So conv2d(x, W
	 * (co, c, k, k)) of image i is the matmul W (co, c k k) @ cols[i], the
	 * columns of output pixels p0.. (y[i] (co, ho wo) with ldc ho wo); a
	 * caller takes the pixels a chunk at a time when k^2 times the image
	 * would not fit.  Both of type t; pad is a host array. */
	void (*im2col)(backend *be, void *cols, const void *x, be_dtype t, int64_t n, int64_t c,
		       int64_t h, int64_t w, int64_t k, int64_t stride, const int64_t pad[4],
		       int64_t p0, int64_t np);

	/* The Flux transformer's training ops (lib/flux), forward and backward,
	 * every tensor of type t, float32 or bfloat16 (others fault); the
	 * LayerNorm's stats float32.  bf16 rounds where torch's bf16 modules
	 * store (lib/flux's bf16 step, FSDP's param_dtype): ln_mod rounds LN(x),
	 * 1 + scale, their product and the sum with shift; its backward rounds
	 * dy (1 + scale), LayerNorm's dx before it joins dx, and each dy LN(x)
	 * that dscale sums; gate_add rounds gate y and the sum, its backward
	 * dy and each dx y that dgate sums; GELU and SiLU round the float32
	 * function once; flow_mse rounds the target noise - x and the gradient,
	 * the loss's terms float32.  A stream's rows are
	 * (b * n, d), sample i's rows from i * n; a per-sample vector (shift,
	 * scale, gate) is d values of row i of a (b, ld) matrix (a column block
	 * of the modulation linear's output).  Sums over rows (the per-sample
	 * vectors' gradients) run in row order in double, so results do not
	 * depend on threads. */

	/* Modulated LayerNorm without affine parameters: y = (1 + scale)
	 * LN(x) + shift, LN's mean and biased variance summed in double, eps
	 * added to the variance; stats (b * n, 2) receives each row's float32
	 * mean and rstd for ln_mod_bwd. */
	void (*ln_mod_fwd)(backend *be, void *y, float *stats, const void *x, const void *shift,
			   const void *scale, be_dtype t, int64_t ld, int64_t b, int64_t n,
			   int64_t d, float eps);
	/* Its backward from dy: dx (b * n, d), dshift and dscale (rows of ld) are
	 * ACCUMULATED. */
	void (*ln_mod_bwd)(backend *be, void *dx, void *dshift, void *dscale, const void *dy,
			   const void *x, const float *stats, const void *scale, be_dtype t,
			   int64_t ld, int64_t b, int64_t n, int64_t d);
	/* The gated residual x += gate y, (b * n, d). */
	void (*gate_add)(backend *be, void *x, const void *gate, const void *y, be_dtype t,
			 int64_t ld, int64_t b, int64_t n, int64_t d);
	/* Its backward from the residual's gradient dx: dy = gate dx (written),
	 * dgate += the sum over the sample's rows of dx y. */
	void (*gate_add_bwd)(backend *be, void *dgate, void *dy, const void *dx, const void *gate,
			     const void *y, be_dtype t, int64_t ld, int64_t b, int64_t n,
			     int64_t d);
	/* gelu(x, approximate="tanh") = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
	 * x^3))) as torch's CPU kernel rounds it, (n); and its backward dx = dy
	 * gelu'(x) (written). */
	void (*gelu_tanh_fwd)(backend *be, void *y, const void *x, be_dtype t, int64_t n);
	void (*gelu_tanh_bwd)(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			      int64_t n);
	/* silu(x) = x / (1 + exp(-x)) (torch's CPU kernel; swish rounds as x *
	 * sigmoid(x)), (n); its backward dx = dy s (1 + x (1 - s)), s = sigmoid(x)
	 * (written). */
	void (*silu_fwd)(backend *be, void *y, const void *x, be_dtype t, int64_t n);
	void (*silu_bwd)(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			 int64_t n);
	/* The rectified-flow loss's terms over n values: e = pred - (noise - x);
	 * sum(e^2) (in double) is added to *loss_sum and n to *count, by the next
	 * sync as cross_entropy's; grad, when not NULL, = 2 e grad_scale (the
	 * mean's 1/n as torch hands it: float32). */
	void (*flow_mse)(backend *be, void *grad, const void *pred, const void *x,
			 const void *noise, be_dtype t, int64_t n, float grad_scale,
			 double *loss_sum, int64_t *count);
	/* A convolution's bias over NCHW: y (n, c, hw) = b[ch] on every pixel,
	 * written; both of type t.  The conv's matmul then adds its product with
	 * beta 1, so the bias joins the float32 sum before its one rounding, as
	 * torch's conv2d adds it. */
	void (*conv_bias)(backend *be, void *y, const void *b, be_dtype t, int64_t n, int64_t c,
			  int64_t hw);
	/* The autoencoder's attention (one head of c channels over the pixels:
	 * head dims the attention kernels do not take) is matmuls and these two,
	 * a chunk of query rows at a time, as torch's CPU attention computes it:
	 * softmax_exp: e (rows, n) of type et = exp(s - max of s's row) for the
	 * scores s (rows, n) float32; sum (rows) float32 = each row's sum of the
	 * exps before e rounds them (bf16: torch hands the rounded exps to its
	 * P @ V product and divides by the float32 sum).
	 * div_rows: y (rows, d) of type yt = x (rows, d) float32 / sum[row]: the
	 * product's normalisation, rounded once. */
	void (*softmax_exp)(backend *be, void *e, be_dtype et, float *sum, const float *s,
			    int64_t rows, int64_t n);
	void (*div_rows)(backend *be, void *y, be_dtype yt, const float *x, const float *sum,
			 int64_t rows, int64_t d);
} backend_ops;

struct backend {
	const backend_ops *ops;
	size_t bytes_in_use; /* device bytes held by alloc, now */
	size_t peak_bytes;   /* the most held at once since creation or reset */
	int threads;         /* CPU threads the backend uses */
	void *impl;          /* the backend's own state */
	int faulted;         /* an op failed since the last sync: fault says why */
	titan_err fault;
};

/* Record an op's failure for the next sync (the first one is kept). */
void backend_fault(backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sync of every backend ends with this: reports and clears a fault. */
int backend_take_fault(backend *be, titan_err *e);

/* The CPU backend with threads OpenMP/OpenBLAS threads (0: the library's
 * default, OMP_NUM_THREADS).  Free with backend_free. */
backend *backend_cpu_create(int threads, titan_err *e);
void backend_free(backend *be);
/* One line on how the CPU backend computes on this processor (for logs and
 * benchmark headers): core/cpu_isa's level, kernel build and bf16 GEMM path,
 * and OpenBLAS's kernel. */
void backend_cpu_describe(char *buf, size_t n);
/* The path of the CPU backend's last bf16 GEMM: the kernel oneDNN chose
 * ("brg:avx512_core_bf16", ...), "portable", or "portable (oneDNN refused
 * ...)"; "none" before the first. */
const char *backend_cpu_bf16_gemm(const backend *be);
/* Bytes the CPU backend keeps of freed blocks for the next alloc of their size
 * (backend/cpu_pool.h): at most the most its live blocks ever held, and never
 * so much that the two together pass that mark; none under TITAN_CPU_POOL=0. */
size_t backend_cpu_cached_bytes(const backend *be);

static inline size_t backend_peak_bytes(const backend *be) { return be->peak_bytes; }
static inline void backend_reset_peak(backend *be) { be->peak_bytes = be->bytes_in_use; }

/* Allocation helpers: n floats, zeroed or not. */
float *backend_alloc_floats(backend *be, size_t n, titan_err *e);
float *backend_calloc_floats(backend *be, size_t n, titan_err *e);

/* Between host floats and n values of type dt (BE_F32 or BE_BF16, rounded to
 * nearest even) in backend memory: a model's inputs and outputs, its weights
 * as they load.  0, or -1 when the host buffer of a conversion cannot be had;
 * the copy's own failure surfaces at the next sync. */
int backend_upload(backend *be, be_dtype dt, void *dev, const float *host, int64_t n,
		   titan_err *err);
int backend_download(backend *be, be_dtype dt, float *host, const void *dev, int64_t n,
		     titan_err *err);

#endif
