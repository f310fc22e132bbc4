// rope.cu: rotary position embedding, in place (the backend op) and fused into
// attention's layout (split the QKV projection into q, k, v with q and k
// rotated; merge the gradients back, rotated the other way).  Two pairings:
// interleaved (2i, 2i+1), torchtitan's complex view of Llama; and half
// (i, i + hd/2), HF's rotate_half used by Qwen3.
#include "gpu/device.cuh"

// (x0, x1) rotated by the angle whose (cos, sin) is (c, s); the inverse passes -sin.
__device__ __forceinline__ void rot_pair(float &x0, float &x1, float c, float s)
{
	float a = x0, b = x1;
	x0 = a * c - b * s;
	x1 = a * s + b * c;
}

// One launch moves nh heads of every token: src row tok at src + tok*src_ld +
// head*hd to dst + tok*dst_ld + head*hd, rotated when rotate is set.
// Token tok = bi*t + ti sits at position ti; cs (t, hd/2, 2).
// Interleaved: a thread takes V consecutive elements (V/2 pairs).
template <int V, typename To, typename Ti>
__global__ void rope_interleaved_kernel(To *dst, int64_t dst_ld, const Ti *src, int64_t src_ld,
					const float *__restrict__ cs, int64_t ntok, int64_t t,
					int64_t nh, int64_t hd, float sgn, int rotate)
{
	int64_t per_head = hd / V, total = ntok * nh * per_head;
	for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
	     it += (int64_t)gridDim.x * blockDim.x) {
		int64_t e = (it % per_head) * V, hh = (it / per_head) % nh, tok = it / (per_head * nh);
		float v[V];
		load_vec<V>(src + tok * src_ld + hh * hd + e, v);
		if (rotate) {
			const float *c = cs + (tok % t) * hd + e; // pair p = e/2 at c[2p], c[2p+1]
#pragma unroll
			for (int k = 0; k < V; k += 2)
				rot_pair(v[k], v[k + 1], c[k], sgn * c[k + 1]);
		}
		store_vec<V>(dst + tok * dst_ld + hh * hd + e, v);
	}
}

// Half: a thread takes V elements of the first half and their V partners.
template <int V, typename To, typename Ti>
__global__ void rope_half_kernel(To *dst, int64_t dst_ld, const Ti *src, int64_t src_ld,
				 const float *__restrict__ cs, int64_t ntok, int64_t t, int64_t nh,
				 int64_t hd, float sgn, int rotate)
{
	int64_t half = hd / 2, per_head = half / V, total = ntok * nh * per_head;
	for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
	     it += (int64_t)gridDim.x * blockDim.x) {
		int64_t e = (it % per_head) * V, hh = (it / per_head) % nh, tok = it / (per_head * nh);
		const Ti *sp = src + tok * src_ld + hh * hd + e;
		To *dp = dst + tok * dst_ld + hh * hd + e;
		float a[V], b[V];
		load_vec<V>(sp, a);
		load_vec<V>(sp + half, b);
		if (rotate) {
			const float *c = cs + (tok % t) * hd + 2 * e;
#pragma unroll
			for (int k = 0; k < V; k++)
				rot_pair(a[k], b[k], c[2 * k], sgn * c[2 * k + 1]);
		}
		store_vec<V>(dp, a);
		store_vec<V>(dp + half, b);
	}
}

static const int THREADS = 256;

// Move (and maybe rotate) nh heads; chooses the pairing and the vector width.
template <typename To, typename Ti>
static int rope_move(To *dst, int64_t dst_ld, const Ti *src, int64_t src_ld, const float *cs,
		     int64_t ntok, int64_t t, int64_t nh, int64_t hd, int inverse, int style,
		     int rotate, cudaStream_t s)
{
	if (ntok <= 0 || nh <= 0)
		return 0;
	if (hd <= 0 || hd % 2 != 0 || (style != GPU_ROPE_INTERLEAVED && style != GPU_ROPE_HALF))
		return (int)cudaErrorInvalidValue;
	float sgn = inverse ? -1.0f : 1.0f;
	// Vectors need every row start aligned: lds and hd multiples of 8 elements.
	bool v8 = aligned16(dst, src) && dst_ld % 8 == 0 && src_ld % 8 == 0 &&
		  (style == GPU_ROPE_INTERLEAVED ? hd % 8 == 0 : hd % 16 == 0);
	if (style == GPU_ROPE_INTERLEAVED) {
		int64_t work = ntok * nh * hd / (v8 ? 8 : 2);
		if (v8)
			rope_interleaved_kernel<8><<<grid_for(work, THREADS), THREADS, 0, s>>>(
				dst, dst_ld, src, src_ld, cs, ntok, t, nh, hd, sgn, rotate);
		else
			rope_interleaved_kernel<2><<<grid_for(work, THREADS), THREADS, 0, s>>>(
				dst, dst_ld, src, src_ld, cs, ntok, t, nh, hd, sgn, rotate);
	} else {
		int64_t work = ntok * nh * hd / (v8 ? 16 : 2);
		if (v8)
			rope_half_kernel<8><<<grid_for(work, THREADS), THREADS, 0, s>>>(
				dst, dst_ld, src, src_ld, cs, ntok, t, nh, hd, sgn, rotate);
		else
			rope_half_kernel<1><<<grid_for(work, THREADS), THREADS, 0, s>>>(
				dst, dst_ld, src, src_ld, cs, ntok, t, nh, hd, sgn, rotate);
	}
	return launch_status();
}

extern "C" int launch_rope(void *x, int tx, const float *cs, int64_t b, int64_t t, int64_t h,
			   int64_t hd, int inverse, int style, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(tx, T,
		 return rope_move((T *)x, h * hd, (const T *)x, h * hd, cs, b * t, t, h, hd,
				  inverse, style, 1, s));
	return 0;
}

extern "C" int launch_rope_qkv_split(void *q, void *k, void *v, int tout, const void *qkv,
				     int tin, const float *cs, int64_t b, int64_t t, int64_t h,
				     int64_t hkv, int64_t hd, int style, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int64_t ld = (h + 2 * hkv) * hd, ntok = b * t;
	DISPATCH2(tout, To, tin, Ti, {
		const Ti *src = (const Ti *)qkv;
		int rc = rope_move((To *)q, h * hd, src, ld, cs, ntok, t, h, hd, 0, style, 1, s);
		if (rc == 0)
			rc = rope_move((To *)k, hkv * hd, src + h * hd, ld, cs, ntok, t, hkv, hd, 0,
				       style, 1, s);
		if (rc == 0)
			rc = rope_move((To *)v, hkv * hd, src + (h + hkv) * hd, ld, cs, ntok, t, hkv,
				       hd, 0, style, 0, s);
		return rc;
	});
	return 0;
}

extern "C" int launch_rope_qkv_merge(void *dqkv, int tout, const void *dq, const void *dk,
				     const void *dv, int tin, const float *cs, int64_t b, int64_t t,
				     int64_t h, int64_t hkv, int64_t hd, int style, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	int64_t ld = (h + 2 * hkv) * hd, ntok = b * t;
	DISPATCH2(tout, To, tin, Ti, {
		To *dst = (To *)dqkv;
		int rc = rope_move(dst, ld, (const Ti *)dq, h * hd, cs, ntok, t, h, hd, 1, style, 1, s);
		if (rc == 0)
			rc = rope_move(dst + h * hd, ld, (const Ti *)dk, hkv * hd, cs, ntok, t, hkv, hd,
				       1, style, 1, s);
		if (rc == 0)
			rc = rope_move(dst + (h + hkv) * hd, ld, (const Ti *)dv, hkv * hd, cs, ntok, t,
				       hkv, hd, 1, style, 0, s);
		return rc;
	});
	return 0;
}
