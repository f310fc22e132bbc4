// elementwise.cu: conversions and the backend's elementwise ops (add, axpy,
// scale) over any mix of float32 and bf16: each is map2 (device.cuh), a
// grid-stride loop of 16-byte accesses, with its own functor.
#include "gpu/device.cuh"

struct op_first {
	__device__ __forceinline__ float operator()(float a, float) const { return a; }
};
struct op_axpy { // y + alpha x, with a = y and b = x
	float alpha;
	__device__ __forceinline__ float operator()(float y, float x) const { return y + alpha * x; }
};
struct op_scale {
	float alpha;
	__device__ __forceinline__ float operator()(float x, float) const { return alpha * x; }
};

extern "C" int launch_cast(void *y, int ty, const void *x, int tx, int64_t n, void *stream)
{
	DISPATCH2(ty, Ty, tx, Tx,
		  return map2((Ty *)y, (const Tx *)x, (const float *)nullptr, n, op_first(),
			      (cudaStream_t)stream));
	return 0;
}

extern "C" int launch_add(void *y, int ty, const void *a, int ta, const void *b, int tb, int64_t n,
			  void *stream)
{
	DISPATCH(ty, Ty,
		 DISPATCH2(ta, Ta, tb, Tb,
			   return map2((Ty *)y, (const Ta *)a, (const Tb *)b, n, op_sum(),
				       (cudaStream_t)stream)));
	return 0;
}

extern "C" int launch_axpy(void *y, int ty, float alpha, const void *x, int tx, int64_t n,
			   void *stream)
{
	DISPATCH2(ty, Ty, tx, Tx,
		  return map2((Ty *)y, (const Ty *)y, (const Tx *)x, n, op_axpy{alpha},
			      (cudaStream_t)stream));
	return 0;
}

struct op_lerp { // torch.lerp(a, b, w): ATen's lerp, one fused multiply-add
	float w;
	__device__ __forceinline__ float operator()(float a, float b) const
	{
		return fabsf(w) < 0.5f ? __fmaf_rn(w, b - a, a) : __fmaf_rn(w - 1.0f, b - a, b);
	}
};

extern "C" int launch_lerp(float *x, const float *end, float w, int64_t n, void *stream)
{
	return map2(x, (const float *)x, end, n, op_lerp{w}, (cudaStream_t)stream);
}

extern "C" int launch_scale(void *x, int tx, float alpha, int64_t n, void *stream)
{
	DISPATCH(tx, T,
		 return map2((T *)x, (const T *)x, (const float *)nullptr, n, op_scale{alpha},
			     (cudaStream_t)stream));
	return 0;
}
