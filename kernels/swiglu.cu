// swiglu.cu: the gate of Llama's feed-forward, y = silu(a) * g with a = x W1^T
// and g = x W3^T, and its backward.  Elementwise over (n); 8 elements a thread.
#include "gpu/device.cuh"

// expf, not __expf: the CPU reference computes 1 / (1 + e^-a) to float precision.
__device__ __forceinline__ float sigmoid(float a)
{
	return 1.0f / (1.0f + expf(-a));
}

struct op_swiglu {
	__device__ __forceinline__ float operator()(float a, float g) const
	{
		return a * sigmoid(a) * g;
	}
};

// silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a):
// da = dy g silu'(a), dg = dy silu(a).
__device__ __forceinline__ void swiglu_grad(float dy, float a, float g, float &da, float &dg)
{
	float s = sigmoid(a);
	dg = dy * a * s;
	da = dy * g * s * (1.0f + a * (1.0f - s));
}

template <int V, typename Tg, typename Tdy, typename Ti>
__global__ void swiglu_bwd_kernel(Tg *__restrict__ da, Tg *__restrict__ dg,
				  const Tdy *__restrict__ dy, const Ti *__restrict__ a,
				  const Ti *__restrict__ g, int64_t n)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x * V;
	for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < n; i += stride) {
		if (i + V <= n) {
			float dyv[V], av[V], gv[V], dav[V], dgv[V];
			load_vec<V>(dy + i, dyv);
			load_vec<V>(a + i, av);
			load_vec<V>(g + i, gv);
#pragma unroll
			for (int k = 0; k < V; k++)
				swiglu_grad(dyv[k], av[k], gv[k], dav[k], dgv[k]);
			store_vec<V>(da + i, dav);
			store_vec<V>(dg + i, dgv);
		} else {
			for (int64_t j = i; j < n; j++) {
				float daj, dgj;
				swiglu_grad(to_f(dy[j]), to_f(a[j]), to_f(g[j]), daj, dgj);
				da[j] = from_f<Tg>(daj);
				dg[j] = from_f<Tg>(dgj);
			}
		}
	}
}

static const int THREADS = 256;

extern "C" int launch_swiglu_fwd(void *y, int ty, const void *a, const void *g, int tin, int64_t n,
				 void *stream)
{
	DISPATCH2(ty, Ty, tin, Ti,
		  return map2((Ty *)y, (const Ti *)a, (const Ti *)g, n, op_swiglu(),
			      (cudaStream_t)stream));
	return 0;
}

extern "C" int launch_swiglu_bwd(void *da, void *dg, int tgrad, const void *dy, int tdy,
				 const void *a, const void *g, int tin, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	bool v8 = aligned16(da, dg, dy, a, g);
	DISPATCH2(tgrad, Tg, tdy, Tdy,
		  DISPATCH(tin, Ti,
			   if (v8) swiglu_bwd_kernel<8><<<grid_for(n / 8 + 1, THREADS), THREADS, 0, s>>>(
				   (Tg *)da, (Tg *)dg, (const Tdy *)dy, (const Ti *)a, (const Ti *)g, n);
			   else swiglu_bwd_kernel<1><<<grid_for(n, THREADS), THREADS, 0, s>>>(
				   (Tg *)da, (Tg *)dg, (const Tdy *)dy, (const Ti *)a, (const Ti *)g, n)));
	return launch_status();
}
