/* The launchers of launch.h in a build without CUDA (CUDA=0): each says there
 * is no device, so the library, the backend and the GPU tests link and run the
 * same way everywhere (the tests skip before calling them). */
#include "gpu/launch.h"

#ifndef TITAN_CUDA

#define NO_DEVICE 100 /* cudaErrorNoDevice */

int launch_vecadd(const float *a, const float *b, float *c, size_t n, void *stream)
{
	(void)a, (void)b, (void)c, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_cast(void *y, int ty, const void *x, int tx, int64_t n, void *stream)
{
	(void)y, (void)ty, (void)x, (void)tx, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_add(void *y, int ty, const void *a, int ta, const void *b, int tb, int64_t n,
	       void *stream)
{
	(void)y, (void)ty, (void)a, (void)ta, (void)b, (void)tb, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_axpy(void *y, int ty, float alpha, const void *x, int tx, int64_t n, void *stream)
{
	(void)y, (void)ty, (void)alpha, (void)x, (void)tx, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_scale(void *x, int tx, float alpha, int64_t n, void *stream)
{
	(void)x, (void)tx, (void)alpha, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_lerp(float *x, const float *end, float w, int64_t n, void *stream)
{
	(void)x, (void)end, (void)w, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_adamw_bf16_states(float *p, const float *g, void *m, void *v, int64_t n, double lr,
			     double b1, double b2, double eps, double wd, double bc1, double bc2,
			     void *stream)
{
	(void)p, (void)g, (void)m, (void)v, (void)n, (void)lr, (void)b1, (void)b2, (void)eps;
	(void)wd, (void)bc1, (void)bc2, (void)stream;
	return NO_DEVICE;
}

int launch_rmsnorm_fwd(void *y, int ty, float *rstd, void *res, int tres, const void *x,
		       int tx, const void *delta, int tdelta, const void *w, int tw, int64_t n,
		       int64_t d, float eps, void *stream)
{
	(void)y, (void)ty, (void)rstd, (void)res, (void)tres, (void)x, (void)tx, (void)delta;
	(void)tdelta, (void)w, (void)tw, (void)n, (void)d, (void)eps, (void)stream;
	return NO_DEVICE;
}

int launch_rmsnorm_bwd(void *dx, int tdx, void *dw, int tdw, const void *dy, int tdy,
		       const void *dres, const void *x, int tx, const void *w, int tw,
		       const float *rstd, int64_t n, int64_t d, void *scratch, void *stream)
{
	(void)dx, (void)tdx, (void)dw, (void)tdw, (void)dy, (void)tdy, (void)dres, (void)x, (void)tx;
	(void)w, (void)tw, (void)rstd, (void)n, (void)d, (void)scratch, (void)stream;
	return NO_DEVICE;
}

int launch_rope(void *x, int tx, const float *cs, int64_t b, int64_t t, int64_t h,
		int64_t hd, int inverse, int style, void *stream)
{
	(void)x, (void)tx, (void)cs, (void)b, (void)t, (void)h, (void)hd, (void)inverse;
	(void)style, (void)stream;
	return NO_DEVICE;
}

int launch_rope_qkv_split(void *q, void *k, void *v, int tout, const void *qkv, int tin,
			  const float *cs, int64_t b, int64_t t, int64_t h, int64_t hkv,
			  int64_t hd, int style, void *stream)
{
	(void)q, (void)k, (void)v, (void)tout, (void)qkv, (void)tin, (void)cs, (void)b, (void)t;
	(void)h, (void)hkv, (void)hd, (void)style, (void)stream;
	return NO_DEVICE;
}

int launch_rope_qkv_merge(void *dqkv, int tout, const void *dq, const void *dk,
			  const void *dv, int tin, const float *cs, int64_t b, int64_t t,
			  int64_t h, int64_t hkv, int64_t hd, int style, void *stream)
{
	(void)dqkv, (void)tout, (void)dq, (void)dk, (void)dv, (void)tin, (void)cs, (void)b;
	(void)t, (void)h, (void)hkv, (void)hd, (void)style, (void)stream;
	return NO_DEVICE;
}

int launch_swiglu_fwd(void *y, int ty, const void *a, const void *g, int tin, int64_t n,
		      void *stream)
{
	(void)y, (void)ty, (void)a, (void)g, (void)tin, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_swiglu_bwd(void *da, void *dg, int tgrad, const void *dy, int tdy, const void *a,
		      const void *g, int tin, int64_t n, void *stream)
{
	(void)da, (void)dg, (void)tgrad, (void)dy, (void)tdy, (void)a, (void)g, (void)tin;
	(void)n, (void)stream;
	return NO_DEVICE;
}

int launch_embedding_fwd(void *out, int tout, const void *table, int ttab,
			 const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
			 void *stream)
{
	(void)out, (void)tout, (void)table, (void)ttab, (void)ids, (void)n, (void)d, (void)v0;
	(void)nv, (void)stream;
	return NO_DEVICE;
}

int embedding_bwd_scratch_bytes(int64_t n, int64_t nv, size_t *bytes)
{
	(void)n, (void)nv;
	*bytes = 0;
	return NO_DEVICE;
}

int launch_embedding_bwd(void *dtable, int ttab, const void *dout, int tdout,
			 const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
			 void *scratch, size_t scratch_bytes, void *stream)
{
	(void)dtable, (void)ttab, (void)dout, (void)tdout, (void)ids, (void)n, (void)d, (void)v0;
	(void)nv, (void)scratch, (void)scratch_bytes, (void)stream;
	return NO_DEVICE;
}

int launch_cross_entropy(void *logits, int tl, const int32_t *labels, int64_t n, int64_t v,
			 int32_t ignore_index, float grad_scale, const float *grad_scale_dev,
			 float *row_loss, void *stream)
{
	(void)logits, (void)tl, (void)labels, (void)n, (void)v, (void)ignore_index;
	(void)grad_scale, (void)grad_scale_dev, (void)row_loss, (void)stream;
	return NO_DEVICE;
}

int launch_loss_sum(double *loss_sum, int64_t *n_valid, const float *row_loss,
		    const int32_t *labels, int64_t n, int32_t ignore_index, void *stream)
{
	(void)loss_sum, (void)n_valid, (void)row_loss, (void)labels, (void)n, (void)ignore_index;
	(void)stream;
	return NO_DEVICE;
}

int launch_heads_cat(void *y, const void *x1, const void *x2, int t, int64_t n, int64_t h,
		     int64_t d1, int64_t d2, int64_t h2, void *stream)
{
	(void)y, (void)x1, (void)x2, (void)t, (void)n, (void)h, (void)d1, (void)d2, (void)h2;
	(void)stream;
	return NO_DEVICE;
}

int launch_heads_split(void *x1, void *x2, const void *y, int t, int64_t n, int64_t h,
		       int64_t d1, int64_t d2, int64_t h2, void *stream)
{
	(void)x1, (void)x2, (void)y, (void)t, (void)n, (void)h, (void)d1, (void)d2, (void)h2;
	(void)stream;
	return NO_DEVICE;
}

int launch_attention_fwd(void *out, float *lse, const void *q, const void *k, const void *v,
			 int dt, const gpu_att *a, void *stream)
{
	(void)out, (void)lse, (void)q, (void)k, (void)v, (void)dt, (void)a, (void)stream;
	return NO_DEVICE;
}

int launch_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
			 const void *k, const void *v, const void *out, const float *lse,
			 int dt, const gpu_att *a, void *scratch, void *stream)
{
	(void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v, (void)out, (void)lse;
	(void)dt, (void)a, (void)scratch, (void)stream;
	return NO_DEVICE;
}

int launch_adamw(void *p, const void *g, void *m, void *v, int t, int64_t n, double lr,
		 double b1, double b2, double eps, double wd, double bc1, double bc2,
		 void *stream)
{
	(void)p, (void)g, (void)m, (void)v, (void)t, (void)n, (void)lr, (void)b1, (void)b2;
	(void)eps, (void)wd, (void)bc1, (void)bc2, (void)stream;
	return NO_DEVICE;
}

int launch_adamw_multi(const gpu_mt_tensor *tensors, const gpu_mt_chunk *chunks,
		       int64_t nchunks, const gpu_adamw_step *step, int dt, void *stream)
{
	(void)tensors, (void)chunks, (void)nchunks, (void)step, (void)dt, (void)stream;
	return NO_DEVICE;
}

int launch_sumsq_multi(double *sumsq, double *partials, const gpu_mt_tensor *tensors,
		       const gpu_mt_chunk *chunks, int64_t nchunks, int dt, void *stream)
{
	(void)sumsq, (void)partials, (void)tensors, (void)chunks, (void)nchunks, (void)dt;
	(void)stream;
	return NO_DEVICE;
}

int launch_clip_factor(gpu_adamw_step *step, float *norm, const double *sumsq,
		       float max_norm, void *stream)
{
	(void)step, (void)norm, (void)sumsq, (void)max_norm, (void)stream;
	return NO_DEVICE;
}

int launch_sumsq(double *out, double *partials, const void *x, int tx, int64_t n,
		 void *stream)
{
	(void)out, (void)partials, (void)x, (void)tx, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_f8_amax(float *amax, const void *x, int tx, int64_t rows, int64_t cols,
		   int scaling, void *stream)
{
	(void)amax, (void)x, (void)tx, (void)rows, (void)cols, (void)scaling, (void)stream;
	return NO_DEVICE;
}

int launch_f8_cast(uint8_t *q, int fmt, float *scale, const void *x, int tx, int64_t rows,
		   int64_t cols, int scaling, int pow2, int transpose, const float *amax,
		   void *stream)
{
	(void)q, (void)fmt, (void)scale, (void)x, (void)tx, (void)rows, (void)cols, (void)scaling;
	(void)pow2, (void)transpose, (void)amax, (void)stream;
	return NO_DEVICE;
}

int launch_f8_decode(void *y, int ty, const uint8_t *q, int fmt, int64_t n, void *stream)
{
	(void)y, (void)ty, (void)q, (void)fmt, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_f8_recip(float *y, const float *x, int64_t n, void *stream)
{
	(void)y, (void)x, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_f8_recip_bcast(float *y, int64_t n, const float *x, void *stream)
{
	(void)y, (void)n, (void)x, (void)stream;
	return NO_DEVICE;
}

int launch_f8_epilogue(void *c, int tc, const float *acc, const float *sa, int64_t nsa,
		       const float *sb, int64_t nsb, float beta, int64_t m, int64_t n,
		       void *stream)
{
	(void)c, (void)tc, (void)acc, (void)sa, (void)nsa, (void)sb, (void)nsb, (void)beta;
	(void)m, (void)n, (void)stream;
	return NO_DEVICE;
}


int launch_bias_add(void *y, int ty, const void *bias, int tb, int64_t rows, int64_t d,
		    int64_t groups, const int32_t *offs, void *stream)
{
	(void)y, (void)ty, (void)bias, (void)tb, (void)rows, (void)d, (void)groups, (void)offs;
	(void)stream;
	return NO_DEVICE;
}

int launch_t5_attention(void *out, const void *q, const void *k, const void *v,
			const void *bias, int t, int64_t b, int64_t l, int64_t h, int64_t dk,
			void *stream)
{
	(void)out, (void)q, (void)k, (void)v, (void)bias, (void)t, (void)b, (void)l, (void)h;
	(void)dk, (void)stream;
	return NO_DEVICE;
}

int launch_geglu_fwd(void *y, const void *a, const void *g, int t, int64_t n, void *stream)
{
	(void)y, (void)a, (void)g, (void)t, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_swish(void *x, int t, float beta, int64_t n, void *stream)
{
	(void)x, (void)t, (void)beta, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_layernorm_fwd(void *y, int ty, const void *x, int tx, const void *w, const void *b,
			 int tw, int64_t n, int64_t d, float eps, void *stream)
{
	(void)y, (void)ty, (void)x, (void)tx, (void)w, (void)b, (void)tw, (void)n, (void)d;
	(void)eps, (void)stream;
	return NO_DEVICE;
}

int launch_groupnorm_fwd(void *y, int ty, const void *x, int tx, const void *w, const void *b,
			 int tw, int64_t n, int64_t c, int64_t hw, int64_t groups, float eps,
			 void *stream)
{
	(void)y, (void)ty, (void)x, (void)tx, (void)w, (void)b, (void)tw, (void)n, (void)c;
	(void)hw, (void)groups, (void)eps, (void)stream;
	return NO_DEVICE;
}

int launch_upsample2x(void *y, const void *x, int t, int64_t n, int64_t c, int64_t h, int64_t w,
		      void *stream)
{
	(void)y, (void)x, (void)t, (void)n, (void)c, (void)h, (void)w, (void)stream;
	return NO_DEVICE;
}

int launch_im2col(void *cols, const void *x, int t, int64_t n, int64_t c, int64_t h, int64_t w,
		  int64_t k, int64_t stride, int64_t left, int64_t right, int64_t top,
		  int64_t bottom, int64_t p0, int64_t np, void *stream)
{
	(void)cols, (void)x, (void)t, (void)n, (void)c, (void)h, (void)w, (void)k, (void)stride;
	(void)left, (void)right, (void)top, (void)bottom, (void)p0, (void)np, (void)stream;
	return NO_DEVICE;
}

int launch_ln_mod_fwd(void *y, float *stats, const void *x, const void *shift,
		      const void *scale, int t, int64_t ld, int64_t b, int64_t n, int64_t d,
		      float eps, void *stream)
{
	(void)y, (void)stats, (void)x, (void)shift, (void)scale, (void)t, (void)ld, (void)b;
	(void)n, (void)d, (void)eps, (void)stream;
	return NO_DEVICE;
}

int launch_ln_mod_bwd(void *dx, void *dshift, void *dscale, const void *dy, const void *x,
		      const float *stats, const void *scale, int t, int64_t ld, int64_t b,
		      int64_t n, int64_t d, void *stream)
{
	(void)dx, (void)dshift, (void)dscale, (void)dy, (void)x, (void)stats, (void)scale;
	(void)t, (void)ld, (void)b, (void)n, (void)d, (void)stream;
	return NO_DEVICE;
}

int launch_gate_add(void *x, const void *gate, const void *y, int t, int64_t ld, int64_t b,
		    int64_t n, int64_t d, void *stream)
{
	(void)x, (void)gate, (void)y, (void)t, (void)ld, (void)b, (void)n, (void)d;
	(void)stream;
	return NO_DEVICE;
}

int launch_gate_add_bwd(void *dgate, void *dy, const void *dx, const void *gate, const void *y,
			int t, int64_t ld, int64_t b, int64_t n, int64_t d, void *stream)
{
	(void)dgate, (void)dy, (void)dx, (void)gate, (void)y, (void)t, (void)ld, (void)b;
	(void)n, (void)d, (void)stream;
	return NO_DEVICE;
}

int launch_gelu_tanh(void *y, const void *x, const void *dy, int t, int64_t n, void *stream)
{
	(void)y, (void)x, (void)dy, (void)t, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_silu(void *y, const void *x, const void *dy, int t, int64_t n, void *stream)
{
	(void)y, (void)x, (void)dy, (void)t, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_flow_mse(void *grad, const void *pred, const void *x, const void *noise, int t,
		    int64_t n, float scale, double *part, int parts, double *sum, int64_t *count,
		    void *stream)
{
	(void)grad, (void)pred, (void)x, (void)noise, (void)t, (void)n, (void)scale;
	(void)part, (void)parts, (void)sum, (void)count, (void)stream;
	return NO_DEVICE;
}

int launch_bias_grad(void *dbias, int tb, const void *dy, int ty, int64_t rows, int64_t d,
		     int64_t groups, const int32_t *offs, void *stream)
{
	(void)dbias, (void)tb, (void)dy, (void)ty, (void)rows, (void)d, (void)groups, (void)offs;
	(void)stream;
	return NO_DEVICE;
}

int launch_conv_bias(void *y, const void *b, int t, int64_t n, int64_t c, int64_t hw,
		     void *stream)
{
	(void)y, (void)b, (void)t, (void)n, (void)c, (void)hw, (void)stream;
	return NO_DEVICE;
}

int launch_softmax_exp(void *e, int te, float *sum, const float *s, int64_t rows, int64_t n,
		       void *stream)
{
	(void)e, (void)te, (void)sum, (void)s, (void)rows, (void)n, (void)stream;
	return NO_DEVICE;
}

int launch_div_rows(void *y, int ty, const float *x, const float *sum, int64_t rows, int64_t d,
		    void *stream)
{
	(void)y, (void)ty, (void)x, (void)sum, (void)rows, (void)d, (void)stream;
	return NO_DEVICE;
}

#endif
