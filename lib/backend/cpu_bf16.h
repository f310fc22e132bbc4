/* cpu_bf16.h (private to lib/backend and its tests): the CPU backend's ops over
 * bfloat16 tensors.  Arguments as in backend.h; every float tensor may be
 * float32 or bfloat16 in any mix (cpu.c sends the all-float32 calls to the
 * float32 kernels and faults on other types before calling these).  Each op
 * computes in float32 and rounds to nearest even where it stores bfloat16; the
 * scratch it cannot allocate is a fault for the next sync. */
#ifndef TITAN_CPU_BF16_H
#define TITAN_CPU_BF16_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "core/cpu_isa.h"

void cpu_bf16_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			  be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			  float eps);
void cpu_bf16_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			  const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			  const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d);
void cpu_bf16_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b, int64_t t,
		   int64_t h, int64_t hd, int style, int inverse);
void cpu_bf16_rope_qkv(backend *be, void *q, void *k, void *v, const void *qkv, const float *cs,
		       int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd, int style);
void cpu_bf16_rope_qkv_bwd(backend *be, void *dqkv, const void *dq, const void *dk,
			   const void *dv, const float *cs, int64_t b, int64_t t, int64_t h,
			   int64_t hkv, int64_t hd, int style);
void cpu_bf16_attention_fwd(backend *be, void *out, float *lse, const void *q, const void *k,
			    const void *v, const be_attn *a);
void cpu_bf16_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			    const void *q, const void *k, const void *v, const void *out,
			    const float *lse, const be_attn *a);
/* SwiGLU with torch's roundings of bfloat16 tensors: silu(a) is rounded before
 * the product, and the backward rounds dy * g before silu's derivative. */
void cpu_bf16_swiglu_fwd(void *y, const void *a, const void *g, int64_t n);
void cpu_bf16_swiglu_bwd(void *da, void *dg, const void *dy, const void *a, const void *g,
			 int64_t n);
void cpu_bf16_embedding_fwd(void *out, be_dtype ot, const void *table, be_dtype tt,
			    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv);
void cpu_bf16_embedding_bwd(void *dtable, be_dtype tt, const void *dout, be_dtype dt,
			    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv);
void cpu_bf16_cross_entropy(backend *be, void *logits, const int32_t *labels, int64_t n,
			    int64_t v, int32_t ignore_index, float grad_scale, double *loss_sum,
			    int64_t *n_valid);
void cpu_bf16_convert(void *dst, be_dtype dt, const void *src, be_dtype st, int64_t n);
void cpu_bf16_add(void *y, be_dtype yt, const void *a, be_dtype at, const void *b,
		  be_dtype bt, int64_t n);
void cpu_bf16_axpy(void *y, be_dtype yt, float alpha, const void *x, be_dtype xt, int64_t n);
void cpu_bf16_scale(void *x, float alpha, int64_t n);
double cpu_bf16_sumsq(const void *x, int64_t n);
/* adamw_bf16_states (backend.h): k = lr, b1, b2, eps, wd, bc1, sqrt(bc2), each
 * rounded to float32. */
void cpu_bf16_adamw_states(float *p, const float *g, void *m, void *v, int64_t n,
			   const float k[7]);
void cpu_bf16_adamw(void *p, const void *g, void *m, void *v, int64_t n,
		    const cpu_adamw_consts *c);

/* The mixture-of-experts, MLA and GPT-OSS ops (cpu_bf16_moe.c): the tensors
 * of one element type t are bf16; yt/bt/dyt may be either; scores, routing
 * weights and expert biases (bias of moe_route) stay float32. */
void cpu_bf16_swiglu_clamp_fwd(void *y, const void *x, int64_t n, int64_t f, float alpha,
			       float limit);
void cpu_bf16_swiglu_clamp_bwd(void *dx, const void *dy, const void *x, int64_t n, int64_t f,
			       float alpha, float limit);
void cpu_bf16_bias_add(void *y, be_dtype yt, const void *bias, be_dtype bt, int64_t rows,
		       int64_t d, int64_t groups, const int32_t *offs);
void cpu_bf16_bias_grad(void *dbias, be_dtype bt, const void *dy, be_dtype dyt, int64_t rows,
			int64_t d, int64_t groups, const int32_t *offs);
void cpu_bf16_heads_cat(void *y, const void *x1, const void *x2, int64_t n, int64_t h,
			int64_t d1, int64_t d2, int64_t h2);
void cpu_bf16_heads_split(void *x1, void *x2, const void *y, int64_t n, int64_t h, int64_t d1,
			  int64_t d2, int64_t h2);
void cpu_bf16_moe_route(backend *be, float *scores, int32_t *idx, float *w, const void *logits,
			const float *bias, const be_moe *r);
void cpu_bf16_moe_route_bwd(backend *be, void *dlogits, const float *dw, const float *scores,
			    const int32_t *idx, const be_moe *r);
void cpu_bf16_moe_gather(void *y, const void *x, const int32_t *perm, const int32_t *offs,
			 const float *w, const be_moe *r, int64_t d);
void cpu_bf16_moe_combine(void *out, const void *y, const int32_t *pos, const float *w,
			  float beta, const be_moe *r, int64_t d);
void cpu_bf16_moe_dot(float *dw, const void *y, const void *x, const int32_t *pos,
		      const be_moe *r, int64_t d);
/* Flux's encoder ops (cpu_bf16_flux.c): t5_attention, geglu_fwd and swish
 * on bf16 tensors alone, with torch's roundings of intermediates (the float32 ones go to the float32 kernels); the
 * norms take any mix; upsample2x and im2col of bf16 are cpu_image.inc's _bf16
 * instances (cpu_kernels.h). */
void cpu_bf16_t5_attention(backend *be, void *out, const void *q, const void *k, const void *v,
			   const void *bias, int64_t b, int64_t l, int64_t h, int64_t dk);
void cpu_bf16_geglu_fwd(void *y, const void *a, const void *g, int64_t n);
void cpu_bf16_swish(void *x, float beta, int64_t n);

/* The Flux transformer's training ops (cpu_bf16_fluxt.c): every tensor
 * bf16, the LayerNorm's stats float32; the roundings are torch's bf16
 * modules' (the file's comment). */
void cpu_bf16_ln_mod_fwd(void *y, float *stats, const void *x, const void *shift,
			 const void *scale, int64_t ld, int64_t b, int64_t n, int64_t d, float eps);
void cpu_bf16_ln_mod_bwd(void *dx, void *dshift, void *dscale, const void *dy, const void *x,
			 const float *stats, const void *scale, int64_t ld, int64_t b, int64_t n,
			 int64_t d);
void cpu_bf16_gate_add(void *x, const void *gate, const void *y, int64_t ld, int64_t b,
		       int64_t n, int64_t d);
void cpu_bf16_gate_add_bwd(void *dgate, void *dy, const void *dx, const void *gate,
			   const void *y, int64_t ld, int64_t b, int64_t n, int64_t d);
void cpu_bf16_gelu_tanh_fwd(void *y, const void *x, int64_t n);
void cpu_bf16_gelu_tanh_bwd(void *dx, const void *dy, const void *x, int64_t n);
void cpu_bf16_silu_fwd(void *y, const void *x, int64_t n);
void cpu_bf16_silu_bwd(void *dx, const void *dy, const void *x, int64_t n);
double cpu_bf16_flow_mse(void *grad, const void *pred, const void *x, const void *noise,
			 int64_t n, float grad_scale);
void cpu_bf16_layernorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			    const void *w, const void *b, be_dtype wt, int64_t n, int64_t d,
			    float eps);
void cpu_bf16_groupnorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			    const void *w, const void *b, be_dtype wt, int64_t n, int64_t c,
			    int64_t hw, int64_t groups, float eps);
/* The autoencoder's attention pieces with bf16 outputs (e, y); the scores,
 * sums and products they read are float32. */
void cpu_bf16_softmax_exp(backend *be, void *e, float *sum, const float *s, int64_t rows,
			  int64_t n);
void cpu_bf16_div_rows(backend *be, void *y, const float *x, const float *sum, int64_t rows,
		       int64_t d);

/* Rows from..rows of a (rows, width) output of type ct set to zero. */
void cpu_bf16_zero_rows(void *c, be_dtype ct, int64_t from, int64_t rows, int64_t width);

/* The backend's scratch (cpu.c): at least `bytes`, kept and grown across calls
 * (ops run one at a time, and no op holds it across another's call), 64-byte
 * aligned, counted in the backend's bytes.  NULL with a fault naming op when
 * out of memory. */
void *cpu_scratch(backend *be, size_t bytes, const char *op);
/* Its size now (the most any op has asked for): tests that measure a model's
 * own bytes leave it out, as they leave out oneDNN's scratchpad. */
size_t cpu_scratch_bytes(const backend *be);

/* The portable bfloat16 GEMM (every processor): A and B bfloat16 widened to
 * float32 in blocks of the backend's scratch, products summed in float32 by
 * cpu_matmul_f32, C float32 or rounded once to bfloat16; backend.h's matmul
 * otherwise.  Scratch it cannot have is a fault. */
void cpu_bf16_matmul_portable(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
			      float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
			      float beta, void *c, int64_t ldc, be_dtype ct);

/* bfloat16 GEMMs through oneDNN (cpu_onednn.c): A and B bfloat16, C float32 or
 * bfloat16, backend.h's matmul otherwise.  Returns 0, or -1 with e set. */
typedef struct cpu_onednn cpu_onednn;
/* oneDNN's ceiling for core/cpu_isa's level in force (cpu_onednn.c says
 * how).  oneDNN takes it once a process and only before it runs a kernel of
 * any type (a float32 sgemm first would fix its default ceiling), so
 * backend_cpu_create sets it. */
void cpu_onednn_limit(cpu_level level);
cpu_onednn *cpu_onednn_create(titan_err *e);
void cpu_onednn_free(cpu_onednn *o);
int cpu_onednn_matmul(cpu_onednn *o, int ta, int tb, int64_t m, int64_t n, int64_t k,
		      float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
		      float beta, void *c, int64_t ldc, be_dtype ct, titan_err *e);
/* The kernel oneDNN chose for the last primitive it made ("brg:avx512_core_bf16",
 * "brg:avx512_core_amx", ...), or "none". */
const char *cpu_onednn_impl(const cpu_onednn *o);

#endif
