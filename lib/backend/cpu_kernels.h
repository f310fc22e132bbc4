/* cpu_kernels.h (private to lib/backend and its tests): the CPU backend's kernels,
 * each written once in cpu_kernels.inc and instantiated for float (_f32, the
 * backend's ops) and double (_f64, the reference the float32 ops and the finite
 * difference gradient checks are measured against).  Arguments as in backend.h,
 * every tensor of the kernel's own type (a be_attn's element types and a
 * scale of 0 mean: the kernel's type, and 1/sqrt(hd); its sinks and dsinks
 * are of the kernel's type). */
#ifndef TITAN_CPU_KERNELS_H
#define TITAN_CPU_KERNELS_H

#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/row_group.h"
#include "core/cpu_hot.h"
#include "core/cpu_isa.h"

/* A hot function that streams through whole arrays, defined with CPU_STREAM
 * or CPU_STREAM_VOID as with CPU_HOT, and whose body first hands each array
 * it touches to cpu_san_span.  In the sanitizer build neither ASan nor UBSan
 * instruments the body: cpu_san_span checks each array's bytes once, where
 * ASan checked every vector access with a call and UBSan's checks of every
 * index and pointer kept the loop from vectorising (AdamW's update and the
 * clip's sum of squares were 40 % of a Flux step of 258 M parameters under
 * the sanitizers).  ASan sees the same bytes, and reports a bad one as it
 * reports an access; the loops over [0, n) leave UBSan nothing of their own
 * to find.  In other builds cpu_san_span is nothing.  A body may call only
 * always-inline functions: the compiler keeps a function with
 * instrumentation out of one without. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_STREAM_ATTR __attribute__((no_sanitize_address, no_sanitize_undefined))
void cpu_san_span(const void *p, size_t bytes);
#else
#define CPU_STREAM_ATTR
#define cpu_san_span(p, bytes) ((void)(p), (void)(bytes))
#endif
#define CPU_STREAM(link, ret, name, params, args) \
	CPU_HOT_(link, ret, name, params, args, return, CPU_STREAM_ATTR)
#define CPU_STREAM_VOID(link, name, params, args) \
	CPU_HOT_(link, void, name, params, args, , CPU_STREAM_ATTR)

/* Below this many elements a loop runs on one thread: waking the team costs
 * more than the work (and a loaded machine makes it worse). */
#define CPU_PAR_MIN 65536

/* expf that the compiler can vectorise (glibc's is a call per element): Cody-Waite
 * range reduction x = k ln2 + r, a degree-6 polynomial for e^r (Cephes'
 * coefficients) and 2^k put into the exponent bits.  Within 2 ulp of expf on
 * [-87.3, 88.7]; below that 0, as the softmax wants.  Always inline, for the
 * CPU_STREAM kernels. */
static inline __attribute__((always_inline)) float cpu_exp_f32(float x)
{
	/* a NaN computes as 0 and comes back out at the end: converting it to an
	 * integer below would be undefined */
	float xc = x != x ? 0.0f : x < -87.33654f ? -87.33654f : x;
	xc = xc > 88.72283f ? 88.72283f : xc;
	float kf = (xc * 1.44269504089f + 12582912.0f) - 12582912.0f; /* round to nearest */
	float r = xc - kf * 0.693359375f - kf * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	/* 2^k; bits through a union, as core/bf16.h says why */
	union {
		uint32_t u;
		float f;
	} sc = {.u = (uint32_t)((int32_t)kf + 127) << 23};
	float y = p * sc.f;
	return x != x ? x : x < -87.33654f ? 0.0f : y;
}

/* AdamW's constants as torch's fused kernel derives them: in double from the
 * hyper-parameters, rounded to the kernel's type where they are used (a float32
 * kernel's 1 - b1 is (float)(1 - 0.9), not 1 - (float)0.9). */
typedef struct cpu_adamw_consts {
	double decay;  /* 1 - lr * wd */
	double omb1;   /* 1 - b1 */
	double b2;
	double omb2;   /* 1 - b2 */
	double step;   /* lr / bc1 */
	double sbc2;   /* sqrt(bc2) */
	double eps;
	double clip;   /* the gradient's clipping factor (1: none) */
} cpu_adamw_consts;

static inline cpu_adamw_consts cpu_adamw_consts_of(double lr, double b1, double b2, double eps,
						   double wd, double bc1, double bc2)
{
	return (cpu_adamw_consts){1 - lr * wd, 1 - b1, b2, 1 - b2, lr / bc1, sqrt(bc2), eps, 1};
}

#define CPU_KERNELS_DECLARE(REAL, SFX)                                                 \
	void cpu_matmul_##SFX(int ta, int tb, int64_t m, int64_t n, int64_t k,         \
			      REAL alpha, const REAL *a, int64_t lda, const REAL *b,   \
			      int64_t ldb, REAL beta, REAL *c, int64_t ldc);           \
	void cpu_rmsnorm_fwd_##SFX(REAL *y, REAL *rstd, const REAL *x, const REAL *w,  \
				   int64_t n, int64_t d, REAL eps);                    \
	void cpu_rmsnorm_bwd_##SFX(REAL *dx, REAL *dw, const REAL *dy, const REAL *x,  \
				   const REAL *w, const REAL *rstd, int64_t n,         \
				   int64_t d);                                         \
	void cpu_rope_##SFX(REAL *x, const REAL *cs, int64_t b, int64_t t, int64_t h,  \
			    int64_t hd, int inverse);                                  \
	void cpu_rope_half_##SFX(REAL *x, const REAL *cs, int64_t b, int64_t t,        \
				 int64_t h, int64_t hd, int inverse);                  \
	void cpu_attention_fwd_##SFX(REAL *out, REAL *lse, const REAL *q,              \
				     const REAL *k, const REAL *v, const be_attn *a);  \
	void cpu_attention_bwd_##SFX(REAL *dq, REAL *dk, REAL *dv, const REAL *dout,   \
				     const REAL *q, const REAL *k, const REAL *v,      \
				     const REAL *out, const REAL *lse,                 \
				     const be_attn *a);                                \
	void cpu_rope_qkv_##SFX(REAL *q, REAL *k, REAL *v, const REAL *qkv,            \
				const REAL *cs, int64_t b, int64_t t, int64_t h,       \
				int64_t hkv, int64_t hd, int style);                   \
	void cpu_rope_qkv_bwd_##SFX(REAL *dqkv, const REAL *dq, const REAL *dk,        \
				    const REAL *dv, const REAL *cs, int64_t b,         \
				    int64_t t, int64_t h, int64_t hkv, int64_t hd,     \
				    int style);                                        \
	void cpu_swiglu_fwd_##SFX(REAL *y, const REAL *a, const REAL *g, int64_t n);   \
	void cpu_swiglu_bwd_##SFX(REAL *da, REAL *dg, const REAL *dy, const REAL *a,   \
				  const REAL *g, int64_t n);                           \
	void cpu_swiglu_clamp_fwd_##SFX(REAL *y, const REAL *x, int64_t n, int64_t f,  \
					REAL alpha, REAL limit);                       \
	void cpu_swiglu_clamp_bwd_##SFX(REAL *dx, const REAL *dy, const REAL *x,       \
					int64_t n, int64_t f, REAL alpha, REAL limit); \
	void cpu_bias_add_##SFX(REAL *y, const REAL *bias, int64_t rows, int64_t d,    \
				int64_t groups, const int32_t *offs);                  \
	void cpu_bias_grad_##SFX(REAL *dbias, const REAL *dy, int64_t rows, int64_t d, \
				 int64_t groups, const int32_t *offs);                 \
	void cpu_heads_cat_##SFX(REAL *y, const REAL *x1, const REAL *x2, int64_t n,   \
				 int64_t h, int64_t d1, int64_t d2, int64_t h2);       \
	void cpu_heads_split_##SFX(REAL *x1, REAL *x2, const REAL *y, int64_t n,       \
				   int64_t h, int64_t d1, int64_t d2, int64_t h2);     \
	void cpu_embedding_fwd_##SFX(REAL *out, const REAL *table, const int32_t *ids, \
				     int64_t n, int64_t d, int64_t v0, int64_t nv);    \
	void cpu_embedding_bwd_##SFX(REAL *dtable, const REAL *dout,                   \
				     const int32_t *ids, int64_t n, int64_t d,         \
				     int64_t v0, int64_t nv);                          \
	void cpu_ce_vocab_stats_##SFX(const REAL *logits, const int32_t *labels,        \
				      int64_t n, int64_t nv, int64_t v0, REAL *stats); \
	void cpu_ce_vocab_loss_##SFX(REAL *logits, const int32_t *labels, int64_t n,   \
				     int64_t nv, int64_t v0, int32_t ignore_index,     \
				     const REAL *all, int ranks, REAL grad_scale,      \
				     double *loss_sum, int64_t *n_valid);              \
	void cpu_cross_entropy_##SFX(REAL *logits, const int32_t *labels, int64_t n,   \
				     int64_t v, int32_t ignore_index, REAL grad_scale, \
				     double *loss_sum, int64_t *n_valid);              \
	void cpu_add_##SFX(REAL *y, const REAL *a, const REAL *b, int64_t n);          \
	void cpu_axpy_##SFX(REAL *y, REAL alpha, const REAL *x, int64_t n);            \
	void cpu_scale_##SFX(REAL *x, REAL alpha, int64_t n);                          \
	void cpu_lerp_##SFX(REAL *x, const REAL *end, REAL w, int64_t n);              \
	double cpu_sumsq_##SFX(const REAL *x, int64_t n);                              \
	void cpu_adamw_##SFX(REAL *p, const REAL *g, REAL *m, REAL *v, int64_t n,      \
			     const cpu_adamw_consts *c);                               \
	void cpu_moe_route_##SFX(REAL *scores, int32_t *idx, REAL *w,                  \
				 const REAL *logits, const REAL *bias,                 \
				 const be_moe *r);                                     \
	void cpu_moe_route_bwd_##SFX(REAL *dlogits, const REAL *dw,                    \
				     const REAL *scores, const int32_t *idx,           \
				     const be_moe *r);                                 \
	void cpu_moe_permute_##SFX(int32_t *perm, int32_t *pos, int32_t *offs,         \
				   REAL *counts, const int32_t *idx, const be_moe *r); \
	void cpu_moe_gather_##SFX(REAL *y, const REAL *x, const int32_t *perm,         \
				  const int32_t *offs, const REAL *w,                  \
				  const be_moe *r, int64_t d);                         \
	void cpu_moe_combine_##SFX(REAL *out, const REAL *y, const int32_t *pos,       \
				   const REAL *w, REAL beta, const be_moe *r,          \
				   int64_t d);                                         \
	void cpu_moe_dot_##SFX(REAL *dw, const REAL *y, const REAL *x,                 \
			       const int32_t *pos, const be_moe *r, int64_t d);        \
	void cpu_grouped_matmul_##SFX(int mode, int64_t groups, const int32_t *offs,   \
				      int64_t rows, int64_t nn, int64_t kk,            \
				      const REAL *a, const REAL *b, REAL beta,         \
				      REAL *c);                                       \
	/* Pieces of the ops above on one thread: a row, a span. */                    \
	REAL cpu_rmsnorm_fwd_row_##SFX(REAL *y, const REAL *x, const REAL *w,          \
				       int64_t d, REAL eps);                           \
	void cpu_rmsnorm_bwd_row_##SFX(REAL *dx, const REAL *dy, const REAL *x,        \
				       const REAL *w, REAL r, int64_t d);              \
	void cpu_rope_row_##SFX(REAL *x, const REAL *c, int64_t h, int64_t hd,         \
				int style, int inverse);                               \
	double cpu_cross_entropy_row_##SFX(REAL *x, int64_t v, int32_t y,              \
					   REAL grad_scale);                           \
	double cpu_sum_valid_##SFX(const double *row_loss, const int32_t *labels,      \
				   int64_t n, int32_t ignore_index, int64_t *n_valid); \
	double cpu_sumsq_span_##SFX(const REAL *x, int64_t n);                         \
	void cpu_adamw_span_##SFX(REAL *p, const REAL *g, REAL *m, REAL *v, int64_t n, \
				  const cpu_adamw_consts *c);

CPU_KERNELS_DECLARE(float, f32)
CPU_KERNELS_DECLARE(double, f64)

/* Flux's encoder ops (cpu_flux.inc), each tensor of the kernel's type; round
 * set applies the bf16 model's roundings of intermediates (backend.h) to the
 * float values (the bf16 op runs the float32 kernel so).  The images' data
 * movement (cpu_image.inc) comes for bf16's bits too (uint16_t, _bf16). */
#define CPU_FLUX_DECLARE(REAL, SFX)                                                    \
	void cpu_t5_attention_##SFX(REAL *out, const REAL *q, const REAL *k,           \
				    const REAL *v, const REAL *bias, int64_t b,        \
				    int64_t l, int64_t h, int64_t dk, int round);      \
	void cpu_geglu_fwd_##SFX(REAL *y, const REAL *a, const REAL *g, int64_t n,     \
				 int round);                                           \
	void cpu_swish_##SFX(REAL *x, REAL beta, int64_t n, int round);                \
	void cpu_layernorm_fwd_##SFX(REAL *y, const REAL *x, const REAL *w,            \
				     const REAL *b, int64_t n, int64_t d, REAL eps);   \
	void cpu_groupnorm_fwd_##SFX(REAL *y, const REAL *x, const REAL *w,            \
				     const REAL *b, int64_t n, int64_t c, int64_t hw,  \
				     int64_t groups, REAL eps);                        \
	void cpu_softmax_exp_##SFX(REAL *e, REAL *sum, const REAL *s, int64_t rows,    \
				   int64_t n, int round);                              \
	void cpu_div_rows_##SFX(REAL *y, const REAL *x, const REAL *sum, int64_t rows, \
				int64_t d);
#define CPU_IMAGE_DECLARE(REAL, SFX)                                                   \
	void cpu_upsample2x_##SFX(REAL *y, const REAL *x, int64_t n, int64_t c,        \
				  int64_t h, int64_t w);                               \
	void cpu_im2col_##SFX(REAL *cols, const REAL *x, int64_t n, int64_t c,         \
			      int64_t h, int64_t w, int64_t k, int64_t stride,         \
			      const int64_t pad[4], int64_t p0, int64_t np);          \
	void cpu_conv_bias_##SFX(REAL *y, const REAL *b, int64_t n, int64_t c,         \
				 int64_t hw);

/* The Flux transformer's training ops (cpu_flux_train.inc), every tensor of
 * the kernel's type (stats too); flow_mse returns its sum of squares. */
#define CPU_FLUX_TRAIN_DECLARE(REAL, SFX)                                              \
	void cpu_ln_mod_fwd_##SFX(REAL *y, REAL *stats, const REAL *x,                 \
				  const REAL *shift, const REAL *scale, int64_t ld,    \
				  int64_t b, int64_t n, int64_t d, REAL eps);          \
	void cpu_ln_mod_bwd_##SFX(REAL *dx, REAL *dshift, REAL *dscale,                \
				  const REAL *dy, const REAL *x, const REAL *stats,    \
				  const REAL *scale, int64_t ld, int64_t b, int64_t n, \
				  int64_t d);                                          \
	void cpu_gate_add_##SFX(REAL *x, const REAL *gate, const REAL *y, int64_t ld,  \
				int64_t b, int64_t n, int64_t d);                      \
	void cpu_gate_add_bwd_##SFX(REAL *dgate, REAL *dy, const REAL *dx,             \
				    const REAL *gate, const REAL *y, int64_t ld,       \
				    int64_t b, int64_t n, int64_t d);                  \
	void cpu_gelu_tanh_fwd_##SFX(REAL *y, const REAL *x, int64_t n);               \
	void cpu_gelu_tanh_bwd_##SFX(REAL *dx, const REAL *dy, const REAL *x,          \
				     int64_t n);                                       \
	void cpu_silu_fwd_##SFX(REAL *y, const REAL *x, int64_t n);                    \
	void cpu_silu_bwd_##SFX(REAL *dx, const REAL *dy, const REAL *x, int64_t n);   \
	double cpu_flow_mse_##SFX(REAL *grad, const REAL *pred, const REAL *x,         \
				  const REAL *noise, int64_t n, REAL grad_scale);

CPU_FLUX_TRAIN_DECLARE(float, f32)
CPU_FLUX_TRAIN_DECLARE(double, f64)
CPU_FLUX_DECLARE(float, f32)
CPU_FLUX_DECLARE(double, f64)
CPU_IMAGE_DECLARE(float, f32)
CPU_IMAGE_DECLARE(double, f64)
CPU_IMAGE_DECLARE(uint16_t, bf16)

/* The (cos, sin) table (t, hd/2, 2) of positions pos0 .. pos0+t-1 with Llama 3.1
 * frequency scaling (scale_factor 0: none), computed in double. */
void cpu_rope_table_f64(double *cs, int64_t t, int64_t hd, int64_t pos0,
			double theta, double scale_factor);

#endif
