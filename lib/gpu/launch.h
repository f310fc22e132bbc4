/* launch.h: the host launchers of kernels/ (.cu files), with C linkage.  Private to
 * lib/gpu and the CUDA backend: programs use gpu.h.
 *
 * Conventions:
 * - Pointers are device pointers; stream is a cudaStream_t (NULL: the default
 *   stream).  Each launcher returns the cudaError_t of its launch (0 = success);
 *   an unsupported element type or size returns cudaErrorInvalidValue (1).
 * - A tensor's element type travels beside its pointer as a gpu_dtype.  GPU_BF16
 *   elements are bfloat16 bit patterns (uint16_t on the C side, __nv_bfloat16 in
 *   the kernels).  Whatever the storage, every kernel computes in float32 and
 *   rounds to nearest even when it stores bf16 (torch's .to(torch.bfloat16)).
 * - Statistics (rstd, lse, losses) and reductions (norms, loss sums) are float32
 *   or double always (DESIGN.md "Precision"): their pointers are typed.  Weight
 *   gradients take the type the caller gives them (float32 unless training.dtype
 *   is bfloat16), summed in float32 whatever it is.
 * - Shapes as in backend.h: row-major, sizes as counts, the layout of each
 *   argument in its comment.
 * - Nothing here uses atomics on floating point: every result repeats bit for bit
 *   on the same device with the same shapes.  Where an op needs scratch memory it
 *   says how much (a *_scratch_bytes function) and the caller passes it in: no
 *   launcher allocates, so a whole step can be captured in a CUDA graph. */
#ifndef TITAN_GPU_LAUNCH_H
#define TITAN_GPU_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gpu_dtype {
	GPU_F32 = 0,
	GPU_BF16 = 1,
	GPU_E4M3 = 2, /* float8 codes (the float8 ops and the scaled GEMM only) */
	GPU_E5M2 = 3,
} gpu_dtype;

/* Bytes of one element of dtype (0 for an unknown one). */
static inline size_t gpu_dtype_size(int dtype)
{
	return dtype == GPU_F32 ? 4 : dtype == GPU_BF16 ? 2
	       : dtype == GPU_E4M3 || dtype == GPU_E5M2 ? 1 : 0;
}

/* c[i] = a[i] + b[i] for i < n (n may exceed 2^31). */
int launch_vecadd(const float *a, const float *b, float *c, size_t n, void *stream);

/* --- elementwise (kernels/elementwise.cu) --- */

/* y (n) = x (n) converted; y and x may not overlap unless they are the same
 * pointer with the same type. */
int launch_cast(void *y, int ty, const void *x, int tx, int64_t n, void *stream);
/* y = a + b, all (n); y may be a or b. */
int launch_add(void *y, int ty, const void *a, int ta, const void *b, int tb, int64_t n,
	       void *stream);
/* y += alpha * x, (n). */
int launch_axpy(void *y, int ty, float alpha, const void *x, int tx, int64_t n, void *stream);
/* x *= alpha, (n). */
int launch_scale(void *x, int tx, float alpha, int64_t n, void *stream);
/* x = torch.lerp(x, end, w), float32 (backend.h's lerp). */
int launch_lerp(float *x, const float *end, float w, int64_t n, void *stream);

/* --- RMSNorm fused with the residual add (kernels/rmsnorm.cu) --- */

/* r = x + delta (delta NULL: r = x), rounded to tres when res is given, and
 * stored to res (which may be x: the residual stream updated in place);
 * y = r * rstd * w with rstd = 1/sqrt(mean(r^2) + eps) over the last dim.
 * x, delta, res, y (n, d); w (d); rstd (n).  The statistics are float32 over
 * the stored r, as torch computes the norm of a bf16 residual.  With delta and
 * res NULL this is backend.h's rmsnorm_fwd. */
int launch_rmsnorm_fwd(void *y, int ty, float *rstd, void *res, int tres, const void *x,
		       int tx, const void *delta, int tdelta, const void *w, int tw, int64_t n,
		       int64_t d, float eps, void *stream);
/* dx = rmsnorm backward of dy (+ dres when not NULL: the gradient arriving along
 * the residual stream), written; dw (d) += sum over rows of dy * x * rstd.  dres
 * has dx's type and may be dx.  dy, dres, x, dx (n, d); w, dw (d); rstd (n).
 * scratch: at least rmsnorm_bwd_scratch_bytes(n, d) bytes (per-block partial
 * dw, summed in block order). */
#define GPU_RMSNORM_BWD_BLOCKS 256 /* at most; a function of n alone, so the sum's order is too */
static inline size_t rmsnorm_bwd_scratch_bytes(int64_t n, int64_t d)
{
	int64_t blocks = n < GPU_RMSNORM_BWD_BLOCKS ? n : GPU_RMSNORM_BWD_BLOCKS;
	return n > 0 && d > 0 ? (size_t)blocks * (size_t)d * sizeof(float) : 0;
}
int launch_rmsnorm_bwd(void *dx, int tdx, void *dw, int tdw, const void *dy, int tdy,
		       const void *dres, const void *x, int tx, const void *w, int tw,
		       const float *rstd, int64_t n, int64_t d, void *scratch, void *stream);

/* --- rotary embedding (kernels/rope.cu) --- */

/* Which elements form a rotated pair: (2i, 2i+1) in torchtitan's and Meta's
 * Llama (complex view), (i, i + hd/2) in HF's rotate_half (Qwen3, HF Llama). */
enum gpu_rope_style { GPU_ROPE_INTERLEAVED = 0, GPU_ROPE_HALF = 1 };

/* In place, as backend.h's rope: x (b, t, h, hd); cs (t, hd/2, 2) holds (cos, sin)
 * of pair i's angle at each position; inverse rotates by minus the angle. */
int launch_rope(void *x, int tx, const float *cs, int64_t b, int64_t t, int64_t h,
		int64_t hd, int inverse, int style, void *stream);
/* The fused QKV projection's output split into attention's layout with q and k
 * rotated: qkv (b, t, h + 2 hkv, hd) -> q (b, t, h, hd), k, v (b, t, hkv, hd). */
int launch_rope_qkv_split(void *q, void *k, void *v, int tout, const void *qkv, int tin,
			  const float *cs, int64_t b, int64_t t, int64_t h, int64_t hkv,
			  int64_t hd, int style, void *stream);
/* Its backward: dq, dk rotated back and dv packed into dqkv (b, t, h + 2 hkv, hd). */
int launch_rope_qkv_merge(void *dqkv, int tout, const void *dq, const void *dk,
			  const void *dv, int tin, const float *cs, int64_t b, int64_t t,
			  int64_t h, int64_t hkv, int64_t hd, int style, void *stream);

/* --- SwiGLU (kernels/swiglu.cu) --- */

/* y = silu(a) * g, all (n); a and g of type tin. */
int launch_swiglu_fwd(void *y, int ty, const void *a, const void *g, int tin, int64_t n,
		      void *stream);
/* da, dg (n) written (type tgrad). */
int launch_swiglu_bwd(void *da, void *dg, int tgrad, const void *dy, int tdy, const void *a,
		      const void *g, int tin, int64_t n, void *stream);

/* --- token embedding (kernels/embedding.cu) --- */

/* out (n, d) = table[ids - v0] for ids in [v0, v0 + nv), zero rows for the
 * others (a vocabulary-parallel rank holds rows v0.. of the table); table
 * (nv, d); ids (n). */
int launch_embedding_fwd(void *out, int tout, const void *table, int ttab,
			 const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
			 void *stream);
/* dtable[ids[i] - v0] += dout[i] for the ids in range, in token order, without
 * atomics: the (row, i) pairs are radix-sorted and each row's gradients are
 * added in token order onto the table's row in float32 and stored once (for a
 * float32 table: exactly the CPU backend's additions, bit for bit).  dtable
 * (nv, d); dout (n, d).  scratch: at least the bytes embedding_bwd_scratch_bytes
 * gives (it asks CUB, so it needs a device and returns a cudaError_t like the
 * launchers). */
int embedding_bwd_scratch_bytes(int64_t n, int64_t nv, size_t *bytes);
int launch_embedding_bwd(void *dtable, int ttab, const void *dout, int tdout,
			 const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
			 void *scratch, size_t scratch_bytes, void *stream);

/* --- cross-entropy (kernels/crossentropy.cu) --- */

/* Softmax cross-entropy of each row of logits (n, v) against labels (n):
 * row_loss[i] = logsumexp(row) - row[label] (float32; 0 where the label is
 * ignore_index).  When the gradient scale is not 0 the logits are overwritten by
 * their gradient (softmax - onehot) * scale, zero on ignored rows: no probability
 * matrix beside them.  The scale is *grad_scale_dev when that pointer is not
 * NULL (so a captured graph can change it between replays), else grad_scale. */
int launch_cross_entropy(void *logits, int tl, const int32_t *labels, int64_t n, int64_t v,
			 int32_t ignore_index, float grad_scale, const float *grad_scale_dev,
			 float *row_loss, void *stream);
/* *loss_sum += sum of row_loss over valid rows (in row order, in double) and
 * *n_valid += their number; both device pointers.  One block: deterministic. */
int launch_loss_sum(double *loss_sum, int64_t *n_valid, const float *row_loss,
		    const int32_t *labels, int64_t n, int32_t ignore_index, void *stream);

/* --- multi-head latent attention's split heads (kernels/heads.cu) --- */

/* backend.h's heads_cat and heads_split, all of type t: y (n, h, d1 + d2) =
 * [x1 (n, h, d1), x2 (n, h2, d2)] with h2 = h or 1 (one x2 row for every head,
 * which the split sums over the heads in head order); either output of the
 * split may be NULL. */
int launch_heads_cat(void *y, const void *x1, const void *x2, int t, int64_t n, int64_t h,
		     int64_t d1, int64_t d2, int64_t h2, void *stream);
int launch_heads_split(void *x1, void *x2, const void *y, int t, int64_t n, int64_t h,
		       int64_t d1, int64_t d2, int64_t h2, void *stream);

/* --- biases of linears (kernels/bias.cu) --- */

/* backend.h's bias_add: y (rows, d) += bias (d), or with offs (groups + 1,
 * device int32) rows offs[g] .. offs[g+1] - 1 += row g of bias (groups, d)
 * and the rest left alone; the bias rounded to y's type before the add. */
int launch_bias_add(void *y, int ty, const void *bias, int tb, int64_t rows, int64_t d,
		    int64_t groups, const int32_t *offs, void *stream);
/* backend.h's bias_grad: dbias (d) or (groups, d) of type tb += the column
 * sums of dy (rows, d) of type ty over each group's rows (offs as in
 * bias_add), in row order in double. */
int launch_bias_grad(void *dbias, int tb, const void *dy, int ty, int64_t rows, int64_t d,
		     int64_t groups, const int32_t *offs, void *stream);
/* backend.h's conv_bias: y (n, c, hw) = b[ch], both of type t. */
int launch_conv_bias(void *y, const void *b, int t, int64_t n, int64_t c, int64_t hw,
		     void *stream);

/* --- Flux's encoders and autoencoder, forward only (backend.h's t5_attention
 * .. im2col; kernels/t5_attention.cu, activations.cu, layernorm.cu,
 * image.cu) --- */

/* T5's attention: out = softmax(q k^T + bias) v, unscaled; q, k, v, out
 * (b, l, h, dk), bias (h, l, l), all of type t, with the bf16 model's
 * roundings for bf16.  dk at most GPU_T5_ATTENTION_MAX_DK (T5's is 64). */
#define GPU_T5_ATTENTION_MAX_DK 512
int launch_t5_attention(void *out, const void *q, const void *k, const void *v,
			const void *bias, int t, int64_t b, int64_t l, int64_t h, int64_t dk,
			void *stream);
/* y = gelu_tanh(a) * g, (n) of type t (bf16: gelu_tanh(a) rounded first). */
int launch_geglu_fwd(void *y, const void *a, const void *g, int t, int64_t n, void *stream);
/* x = x sigmoid(beta x) in place, (n) of type t. */
int launch_swish(void *x, int t, float beta, int64_t n, void *stream);
/* nn.LayerNorm over rows: y (n, d) of ty, x of tx, w and b (d) of tw. */
int launch_layernorm_fwd(void *y, int ty, const void *x, int tx, const void *w, const void *b,
			 int tw, int64_t n, int64_t d, float eps, void *stream);
/* nn.GroupNorm on x, y (n, c, hw) with c / groups channels a group; w, b (c). */
int launch_groupnorm_fwd(void *y, int ty, const void *x, int tx, const void *w, const void *b,
			 int tw, int64_t n, int64_t c, int64_t hw, int64_t groups, float eps,
			 void *stream);
/* Nearest 2x upsampling: y (n, c, 2h, 2w) from x (n, c, h, w), of type t. */
int launch_upsample2x(void *y, const void *x, int t, int64_t n, int64_t c, int64_t h, int64_t w,
		      void *stream);
/* im2col of x (n, c, h, w) for a k x k convolution with stride, zero-padded
 * by (left, right, top, bottom), output pixels p0 .. p0 + np - 1 of each
 * image: cols (n, c k k, np), of type t. */
int launch_im2col(void *cols, const void *x, int t, int64_t n, int64_t c, int64_t h, int64_t w,
		  int64_t k, int64_t stride, int64_t left, int64_t right, int64_t top,
		  int64_t bottom, int64_t p0, int64_t np, void *stream);
/* The autoencoder's attention pieces (kernels/softmax.cu), backend.h's
 * softmax_exp: e (rows, n) of type te = exp(s - the row's max), sum (rows) =
 * their float32 sums, s (rows, n) float32; div_rows: y (rows, d) of type ty
 * = x (rows, d) float32 / sum[row]. */
int launch_softmax_exp(void *e, int te, float *sum, const float *s, int64_t rows, int64_t n,
		       void *stream);
int launch_div_rows(void *y, int ty, const float *x, const float *sum, int64_t rows, int64_t d,
		    void *stream);

/* --- the Flux transformer's training ops, every tensor of gpu_dtype t,
 * float32 or bf16, the stats float32 (backend.h's ln_mod_fwd .. flow_mse;
 * kernels/flux_train.cu): rows (b * n, d), per-sample vectors ld apart --- */

int launch_ln_mod_fwd(void *y, float *stats, const void *x, const void *shift,
		      const void *scale, int t, int64_t ld, int64_t b, int64_t n, int64_t d,
		      float eps, void *stream);
int launch_ln_mod_bwd(void *dx, void *dshift, void *dscale, const void *dy, const void *x,
		      const float *stats, const void *scale, int t, int64_t ld, int64_t b,
		      int64_t n, int64_t d, void *stream);
int launch_gate_add(void *x, const void *gate, const void *y, int t, int64_t ld, int64_t b,
		    int64_t n, int64_t d, void *stream);
int launch_gate_add_bwd(void *dgate, void *dy, const void *dx, const void *gate, const void *y,
			int t, int64_t ld, int64_t b, int64_t n, int64_t d, void *stream);
/* The activations (n): the forward y = f(x) when dy is NULL, else the
 * backward y = dy f'(x). */
int launch_gelu_tanh(void *y, const void *x, const void *dy, int t, int64_t n, void *stream);
int launch_silu(void *y, const void *x, const void *dy, int t, int64_t n, void *stream);
/* grad (NULL: none) = 2 (pred - (noise - x)) scale; the sum of squares of
 * pred - (noise - x) in double to *sum and n to *count (device), through
 * parts doubles of scratch part. */
int launch_flow_mse(void *grad, const void *pred, const void *x, const void *noise, int t,
		    int64_t n, float scale, double *part, int parts, double *sum, int64_t *count,
		    void *stream);

/* --- grouped-query attention, the reference kernels (kernels/attention.cu) --- */

/* One attention call, as backend.h's be_attn (whose fields it mirrors):
 * q (b, tq, h, hd), k (b, tk, hkv, hd), v (b, tk, hkv, hdv), out (b, tq, h,
 * hdv), lse (b, h, tq) float32; query i sits at position q_pos0 + i, key j at
 * k_pos0 + j.  With causal set a query sees the keys at positions up to its
 * own; a window w keeps the last w of those (GPT-OSS's sliding window); a
 * chunk c keeps the keys of the query's own chunk of c positions (Llama 4's
 * local layers; positions >= 0).  A query that sees no key gets out 0 and lse
 * -inf, or lse = its sink with sinks.  scale 0 means 1/sqrt(hd).  (hd, hdv):
 * attention_dims_ok's pairs; h a multiple of hkv; hdv 0 means hd.
 * sinks (h) float32 on the device: GPT-OSS's learned per-head logits that
 * join each row's softmax denominator with no value; the backward adds their
 * gradient into dsinks (h) when both are set.  doc (b, doc_t) int32 on the
 * device, or NULL: as be_attn's, position p of batch row bi sees only keys at
 * or after doc[bi * doc_t + p], the first position of its document
 * (non-decreasing in p, <= p; q_pos0 >= 0 and q_pos0 + tq <= doc_t). */
typedef struct gpu_att {
	int64_t b, tq, tk, h, hkv, hd, hdv;
	int64_t q_pos0, k_pos0;
	int causal;
	float scale;
	int64_t window, chunk; /* 0: none */
	const float *sinks;    /* NULL: none */
	float *dsinks;         /* NULL: no sink gradient */
	const int32_t *doc;    /* (b, doc_t); NULL: one document */
	int64_t doc_t;
} gpu_att;

/* The head dims the attention kernels take: hd == hdv in 8 (the tiny test
 * models of CLIP and the like), 16, 32, 64, 96, 128, and MLA's (192, 128)
 * (DeepSeek V3: nope 128 + rope 64 for q and k, 128 for v). */
static inline int attention_dims_ok(int64_t hd, int64_t hdv)
{
	if (hdv == 0)
		hdv = hd;
	if (hd == 192)
		return hdv == 128;
	return hd == hdv && (hd == 8 || hd == 16 || hd == 32 || hd == 64 || hd == 96 || hd == 128);
}

/* q, k, v, out all of type dt.  Plain CUDA cores in float32 (no tensor cores):
 * the simple, exact reference the cuDNN path is tested against, and the path for
 * what cuDNN does not take. */
int launch_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v,
			 int dt, const gpu_att *a, void *stream);
/* dq, dk, dv written, all tensors of type dt; dsinks (when set) accumulated.
 * dk and dv add their query heads in head order, like the CPU backend.
 * scratch: at least attention_bwd_scratch_bytes(a) (rowsum(dout * out)). */
static inline size_t attention_bwd_scratch_bytes(const gpu_att *a)
{
	return (size_t)(a->b * a->tq * a->h) * sizeof(float);
}
int launch_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
			 const void *k, const void *v, const void *out, const float *lse,
			 int dt, const gpu_att *a, void *scratch, void *stream);

/* --- optimizer and gradient norm over many tensors (kernels/adamw.cu) --- */

/* backend.h's adamw on one tensor: p, g, m, v (n) all of type t, computed in
 * float32 (and rounded back for bf16, as torch's fused AdamW), its constants
 * derived in double from the hyper-parameters as torch's kernel does. */
int launch_adamw(void *p, const void *g, void *m, void *v, int t, int64_t n, double lr,
		 double b1, double b2, double eps, double wd, double bc1, double bc2,
		 void *stream);
/* backend.h's adamw_bf16_states: p, g (n) float32, m, v (n) bf16. */
int launch_adamw_bf16_states(float *p, const float *g, void *m, void *v, int64_t n, double lr,
			     double b1, double b2, double eps, double wd, double bc1, double bc2,
			     void *stream);

/* One tensor of the multi-tensor kernels.  p, g, m, v (n) of the launch's
 * type (float32, or bf16 under training.dtype = "bfloat16"); p_bf16 (n), when
 * not NULL, receives p rounded to bf16 after the update (the compute copy the
 * next step's matmuls read); wd is this tensor's weight decay (0 for the
 * tensors torchtitan exempts). */
typedef struct gpu_mt_tensor {
	void *p;
	const void *g;
	void *m, *v;
	uint16_t *p_bf16;
	int64_t n;
	float wd;
} gpu_mt_tensor;

/* The work is cut into chunks of GPU_MT_CHUNK elements, each (tensor, offset);
 * the table is built once on the host (gpu_mt_chunks) and kept on the device. */
#define GPU_MT_CHUNK 65536
typedef struct gpu_mt_chunk {
	int32_t tensor;
	int32_t len;
	int64_t offset;
} gpu_mt_chunk;

/* Number of chunks of these tensors; with out not NULL, writes them (out must
 * hold that many).  -1 when a tensor's n < 0.  (A tensor whose pointers are not
 * 16-byte aligned is updated element by element instead of in 16-byte
 * vectors.) */
int64_t gpu_mt_chunks(const gpu_mt_tensor *t, int nt, gpu_mt_chunk *out);

/* What changes from step to step, read on the device so that a captured step
 * replays with new values: lr, the bias corrections 1 - b^step (doubles, as
 * torch derives the update's constants), and the gradient clipping factor (1
 * when not clipping). */
typedef struct gpu_adamw_step {
	double lr, b1, b2, eps;
	double bc1, bc2;
	float clip;
	float pad;
} gpu_adamw_step;

/* torch.optim.AdamW (as backend.h's adamw) on every tensor, p, g, m, v of type
 * dt, with the gradient multiplied by step->clip first.  tensors, chunks, step:
 * device pointers. */
int launch_adamw_multi(const gpu_mt_tensor *tensors, const gpu_mt_chunk *chunks,
		       int64_t nchunks, const gpu_adamw_step *step, int dt, void *stream);

/* Sum of squares of every tensor's g (of type dt), in double, in a fixed order:
 * one partial per chunk (partials: nchunks doubles), then *sumsq = their sum in
 * chunk order.  All device pointers. */
int launch_sumsq_multi(double *sumsq, double *partials, const gpu_mt_tensor *tensors,
		       const gpu_mt_chunk *chunks, int64_t nchunks, int dt, void *stream);
/* torch.nn.utils.clip_grad_norm_: *norm = sqrt(*sumsq) and
 * step->clip = min(1, max_norm / (norm + 1e-6)) (1 when max_norm <= 0).  sumsq
 * is the total over every rank (a comm layer all-reduces it first). */
int launch_clip_factor(gpu_adamw_step *step, float *norm, const double *sumsq,
		       float max_norm, void *stream);
/* sum(x^2) of one float32 or bf16 tensor into *out (device double), fixed order;
 * partials holds sumsq_partials(n) doubles. */
static inline int64_t sumsq_partials(int64_t n)
{
	return n > 0 ? (n + GPU_MT_CHUNK - 1) / GPU_MT_CHUNK : 0;
}
int launch_sumsq(double *out, double *partials, const void *x, int tx, int64_t n,
		 void *stream);

/* --- float8 (kernels/float8.cu): backend.h's f8_amax and f8_cast --- */

/* A cast's scaling (backend.h's be_f8_scaling). */
enum gpu_f8_scaling { GPU_F8_TENSOR = 1, GPU_F8_ROWS = 2, GPU_F8_COLS = 3 };
/* amax (1, rows or cols floats) = max |x| of x (rows, cols) over the tensor,
 * each row or each column; a NaN is kept. */
int launch_f8_amax(float *amax, const void *x, int tx, int64_t rows, int64_t cols,
		   int scaling, void *stream);
/* torchao's dynamic cast: scale = float32(qmax / max(amax, 1e-12)) (amax NULL:
 * taken from x into scale first; pow2: rounded down to a power of two), q =
 * the saturating cast of x * scale to fmt (GPU_E4M3 / GPU_E5M2), (rows, cols)
 * or transposed (cols, rows). */
int launch_f8_cast(uint8_t *q, int fmt, float *scale, const void *x, int tx, int64_t rows,
		   int64_t cols, int scaling, int pow2, int transpose, const float *amax,
		   void *stream);
/* y (n, f32 or bf16) = the values of the codes q (n) of fmt, exactly. */
int launch_f8_decode(void *y, int ty, const uint8_t *q, int fmt, int64_t n, void *stream);
/* y = 1 / x, (n): the scaled GEMM's dequantising scales. */
int launch_f8_recip(float *y, const float *x, int64_t n, void *stream);
/* y (n) = 1 / x[0]: a scalar scale beside a vector one (gpu_f8_scales_plan). */
int launch_f8_recip_bcast(float *y, int64_t n, const float *x, void *stream);
/* c (m, n) = beta c + acc / (sa[i] sb[j]) (nsa, nsb: 1 or m, 1 or n): the
 * scaled GEMM's epilogue over an unscaled float32 product acc (m, n). */
int launch_f8_epilogue(void *c, int tc, const float *acc, const float *sa, int64_t nsa,
		       const float *sb, int64_t nsb, float beta, int64_t m, int64_t n,
		       void *stream);

#ifdef __cplusplus
}
#endif

#endif
