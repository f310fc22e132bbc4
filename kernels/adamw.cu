// adamw.cu: the optimizer step and the global gradient norm over all of a
// model's tensors in one launch each (multi-tensor: a table of chunks, one
// block per chunk), with every step-dependent scalar read from device memory so
// that a captured step replays correctly.
#include "gpu/device.cuh"

static const int THREADS = 256;

// torch.optim.AdamW, one element, as torch's fused kernel computes it (the CPU
// backend's cpu_adamw_span): the constants derived in double from the
// hyper-parameters and rounded to float, exp_avg by lerp, exp_avg_sq with one
// fma, the gradient scaled by the clipping factor first:
//   m = m + (1-b1)(g - m); v = g (1-b2) g + v b2;
//   p = p (1 - lr wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
struct adamw_consts {
	float decay, omb1, b2, omb2, step, sbc2, eps, clip;
};

__host__ __device__ __forceinline__ adamw_consts adamw_consts_of(double lr, double b1, double b2,
								  double eps, double wd, double bc1,
								  double bc2, float clip)
{
	return {(float)(1.0 - lr * wd), (float)(1.0 - b1), (float)b2, (float)(1.0 - b2),
		(float)(lr / bc1), (float)sqrt(bc2), (float)eps, clip};
}

__device__ __forceinline__ void adamw_one(float &p, float g, float &m, float &v,
					  const adamw_consts &c)
{
	g *= c.clip;
	m = fmaf(c.omb1, g - m, m);
	v = fmaf(g * c.omb2, g, v * c.b2);
	p = __fsub_rn(__fmul_rn(p, c.decay), c.step * m / (sqrtf(v) / c.sbc2 + c.eps));
}

// One block per chunk; p, g, m, v of type T (float32 masters, or bf16 under
// training.dtype = "bfloat16").  Chunks start at multiples of GPU_MT_CHUNK
// into their tensor, so a tensor whose pointers are 16-byte aligned takes
// 8-wide vectors through every chunk; a misaligned one (a span of a flat
// buffer at an odd offset) and a chunk's tail go element by element.
template <typename T>
__global__ void adamw_multi_kernel(const gpu_mt_tensor *__restrict__ tensors,
				   const gpu_mt_chunk *__restrict__ chunks,
				   const gpu_adamw_step *__restrict__ stepp)
{
	gpu_mt_chunk ch = chunks[blockIdx.x];
	gpu_mt_tensor tn = tensors[ch.tensor];
	gpu_adamw_step st = *stepp;
	adamw_consts c = adamw_consts_of(st.lr, st.b1, st.b2, st.eps, tn.wd, st.bc1, st.bc2, st.clip);
	T *p = (T *)tn.p + ch.offset, *m = (T *)tn.m + ch.offset, *v = (T *)tn.v + ch.offset;
	const T *g = (const T *)tn.g + ch.offset;
	bf16 *pb = tn.p_bf16 ? (bf16 *)tn.p_bf16 + ch.offset : nullptr;
	bool vec = (((uintptr_t)p | (uintptr_t)g | (uintptr_t)m | (uintptr_t)v | (uintptr_t)pb) &
		    15) == 0;
	int len = ch.len, whole = vec ? len / 8 * 8 : 0;
	for (int i = threadIdx.x * 8; i < whole; i += blockDim.x * 8) {
		float pv[8], gv[8], mv[8], vv[8];
		load_vec<8>(p + i, pv);
		load_vec<8>(g + i, gv);
		load_vec<8>(m + i, mv);
		load_vec<8>(v + i, vv);
#pragma unroll
		for (int k = 0; k < 8; k++)
			adamw_one(pv[k], gv[k], mv[k], vv[k], c);
		store_vec<8>(p + i, pv);
		store_vec<8>(m + i, mv);
		store_vec<8>(v + i, vv);
		if (pb)
			store_vec<8>(pb + i, pv);
	}
	for (int i = whole + threadIdx.x; i < len; i += blockDim.x) {
		float pi = to_f(p[i]), mi = to_f(m[i]), vi = to_f(v[i]);
		adamw_one(pi, to_f(g[i]), mi, vi, c);
		p[i] = from_f<T>(pi);
		m[i] = from_f<T>(mi);
		v[i] = from_f<T>(vi);
		if (pb)
			pb[i] = from_f<bf16>(pi);
	}
}

extern "C" int launch_adamw_multi(const gpu_mt_tensor *tensors, const gpu_mt_chunk *chunks,
				  int64_t nchunks, const gpu_adamw_step *step, int dt, void *stream)
{
	if (nchunks <= 0)
		return 0;
	if (nchunks > 0x7fffffff)
		return (int)cudaErrorInvalidValue;
	DISPATCH(dt, T,
		 adamw_multi_kernel<T><<<(unsigned)nchunks, THREADS, 0, (cudaStream_t)stream>>>(
			 tensors, chunks, step));
	return launch_status();
}

// One tensor, p, g, m, v all of type T (float32 masters, or bf16 under
// training.dtype = "bfloat16": computed in float32 and rounded back).
template <int V, typename T>
__global__ void adamw_kernel(T *p, const T *__restrict__ g, T *m, T *v, int64_t n,
			     adamw_consts c)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x * V;
	for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
		int len = n - i < V ? (int)(n - i) : V;
		float pv[V], gv[V], mv[V], vv[V];
		if (len == V) {
			load_vec<V>(p + i, pv), load_vec<V>(g + i, gv);
			load_vec<V>(m + i, mv), load_vec<V>(v + i, vv);
		} else {
			for (int k = 0; k < V; k++) {
				pv[k] = k < len ? to_f(p[i + k]) : 0.0f;
				gv[k] = k < len ? to_f(g[i + k]) : 0.0f;
				mv[k] = k < len ? to_f(m[i + k]) : 0.0f;
				vv[k] = k < len ? to_f(v[i + k]) : 0.0f;
			}
		}
#pragma unroll
		for (int k = 0; k < V; k++)
			adamw_one(pv[k], gv[k], mv[k], vv[k], c);
		if (len == V) {
			store_vec<V>(p + i, pv), store_vec<V>(m + i, mv), store_vec<V>(v + i, vv);
		} else {
			for (int k = 0; k < len; k++) {
				p[i + k] = from_f<T>(pv[k]);
				m[i + k] = from_f<T>(mv[k]);
				v[i + k] = from_f<T>(vv[k]);
			}
		}
	}
}

extern "C" int launch_adamw(void *p, const void *g, void *m, void *v, int t, int64_t n,
			    double lr, double b1, double b2, double eps, double wd, double bc1,
			    double bc2, void *stream)
{
	if (n <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	adamw_consts c = adamw_consts_of(lr, b1, b2, eps, wd, bc1, bc2, 1.0f);
	bool v8 = aligned16(p, g, m, v);
	DISPATCH(t, T, {
		if (v8)
			adamw_kernel<8><<<grid_for(n / 8 + 1, THREADS), THREADS, 0, s>>>(
				(T *)p, (const T *)g, (T *)m, (T *)v, n, c);
		else
			adamw_kernel<1><<<grid_for(n, THREADS), THREADS, 0, s>>>(
				(T *)p, (const T *)g, (T *)m, (T *)v, n, c);
	});
	return launch_status();
}

// fused_opt_states_bf16: float32 p and g, bf16 m and v, as torch's
// FusedAdamMathFunctorMP (backend.h's adamw_bf16_states), every fused
// multiply-add of its adam_math written out (nvcc contracts its
// param -= lr * weight_decay * param into the first).
struct adamw_mp_consts {
	float lr, b1, b2, eps, wd, bc1, sbc2;
};

__global__ void adamw_bf16_states_kernel(float *p, const float *__restrict__ g, bf16 *m, bf16 *v,
					 int64_t n, adamw_mp_consts c)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		float pi = p[i], gi = g[i], gg = __fmul_rn(gi, gi);
		if (c.wd != 0.0f)
			pi = __fmaf_rn(-__fmul_rn(c.lr, c.wd), pi, pi);
		float mi = __fmaf_rn(c.b1, to_f(m[i]), __fmaf_rn(-c.b1, gi, gi));
		float vi = __fmaf_rn(c.b2, to_f(v[i]), __fmaf_rn(-c.b2, gg, gg));
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.sbc2), c.eps);
		p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(__fdiv_rn(c.lr, c.bc1), mi), denom));
		m[i] = from_f<bf16>(mi);
		v[i] = from_f<bf16>(vi);
	}
}

extern "C" int launch_adamw_bf16_states(float *p, const float *g, void *m, void *v, int64_t n,
					double lr, double b1, double b2, double eps, double wd,
					double bc1, double bc2, void *stream)
{
	if (n <= 0)
		return 0;
	adamw_mp_consts c = {(float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (float)bc1,
			     (float)sqrt(bc2)};
	adamw_bf16_states_kernel<<<grid_for(n, THREADS), THREADS, 0, (cudaStream_t)stream>>>(
		p, g, (bf16 *)m, (bf16 *)v, n, c);
	return launch_status();
}

// Sum of squares of n elements in double, this block's share; the block's
// fixed tree makes it repeat exactly.
template <typename T> __device__ double chunk_sumsq(const T *x, int len)
{
	__shared__ double red[32];
	double acc = 0.0;
	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		double xi = (double)to_f(x[i]);
		acc += xi * xi;
	}
	return block_sum_d(acc, red);
}

template <typename T>
__global__ void sumsq_multi_kernel(double *partials, const gpu_mt_tensor *__restrict__ tensors,
				   const gpu_mt_chunk *__restrict__ chunks)
{
	gpu_mt_chunk ch = chunks[blockIdx.x];
	double s = chunk_sumsq((const T *)tensors[ch.tensor].g + ch.offset, ch.len);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = s;
}

// *out = sum of partials[0..n) in a fixed order (one block).
__global__ void sum_partials_kernel(double *out, const double *__restrict__ partials, int64_t n)
{
	__shared__ double red[32];
	double acc = 0.0;
	for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
		acc += partials[i];
	acc = block_sum_d(acc, red);
	if (threadIdx.x == 0)
		*out = acc;
}

extern "C" int launch_sumsq_multi(double *sumsq, double *partials, const gpu_mt_tensor *tensors,
				  const gpu_mt_chunk *chunks, int64_t nchunks, int dt, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	if (nchunks > 0x7fffffff)
		return (int)cudaErrorInvalidValue;
	if (nchunks > 0) {
		DISPATCH(dt, T,
			 sumsq_multi_kernel<T><<<(unsigned)nchunks, THREADS, 0, s>>>(partials, tensors,
										     chunks));
		int rc = launch_status();
		if (rc != 0)
			return rc;
	}
	sum_partials_kernel<<<1, 1024, 0, s>>>(sumsq, partials, nchunks);
	return launch_status();
}

__global__ void clip_factor_kernel(gpu_adamw_step *step, float *norm, const double *sumsq,
				   float max_norm)
{
	// in double, as the host's clip_grad_norm_ (optim.c) and the CPU backend:
	// the factor rounds to the same float, so a recorded step clips as a plain one
	double nrm = sqrt(*sumsq), f = (double)max_norm / (nrm + 1e-6);
	*norm = (float)nrm;
	step->clip = max_norm > 0.0f && f < 1.0 ? (float)f : 1.0f;
}

extern "C" int launch_clip_factor(gpu_adamw_step *step, float *norm, const double *sumsq,
				  float max_norm, void *stream)
{
	clip_factor_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(step, norm, sumsq, max_norm);
	return launch_status();
}

template <typename T> __global__ void sumsq_kernel(double *partials, const T *x, int64_t n)
{
	int64_t off = (int64_t)blockIdx.x * GPU_MT_CHUNK;
	int len = (int)(n - off < GPU_MT_CHUNK ? n - off : GPU_MT_CHUNK);
	double s = chunk_sumsq(x + off, len);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = s;
}

extern "C" int launch_sumsq(double *out, double *partials, const void *x, int tx, int64_t n,
			    void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int64_t np = sumsq_partials(n);
	if (np > 0x7fffffff)
		return (int)cudaErrorInvalidValue;
	if (np > 0) {
		DISPATCH(tx, T,
			 sumsq_kernel<<<(unsigned)np, THREADS, 0, s>>>(partials, (const T *)x, n));
		int rc = launch_status();
		if (rc != 0)
			return rc;
	}
	sum_partials_kernel<<<1, 1024, 0, s>>>(out, partials, np);
	return launch_status();
}
