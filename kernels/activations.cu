// activations.cu: the gates and activations of Flux's encoders and
// autoencoder (backend.h's geglu_fwd and swish), elementwise over (n) with
// map2 (device.cuh): T5 v1.1's gated gelu_new and swish x sigmoid(beta x)
// (the autoencoder's, CLIP's quick_gelu), each with the roundings of torch's
// bf16 model.  expf and tanhf, not their fast intrinsics: the CPU reference
// computes them to float precision.
#include "gpu/device.cuh"

// y = gelu_tanh(a) * g, gelu_tanh(a) = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)));
// T = the storage type: bf16 rounds gelu_tanh(a) before the product, as the
// bf16 model stores it.
template <typename T> struct op_geglu {
	__device__ __forceinline__ float operator()(float a, float g) const
	{
		const float c = 0.7978845608028654f; // sqrt(2 / pi)
		float gelu = 0.5f * a * (1.0f + tanhf(c * (a + 0.044715f * a * a * a)));
		return round_as<T>(gelu) * g;
	}
};

// x sigmoid(beta x) as torch's x * torch.sigmoid(beta * x): bf16 rounds beta x
// and the sigmoid before the product.
template <typename T> struct op_swish {
	float beta;
	__device__ __forceinline__ float operator()(float x, float) const
	{
		float s = 1.0f / (1.0f + expf(-round_as<T>(beta * x)));
		return x * round_as<T>(s);
	}
};

extern "C" int launch_geglu_fwd(void *y, const void *a, const void *g, int t, int64_t n,
				void *stream)
{
	DISPATCH(t, T,
		 return map2((T *)y, (const T *)a, (const T *)g, n, op_geglu<T>(),
			     (cudaStream_t)stream));
	return 0;
}

extern "C" int launch_swish(void *x, int t, float beta, int64_t n, void *stream)
{
	DISPATCH(t, T,
		 return map2((T *)x, (const T *)x, (const float *)nullptr, n, op_swish<T>{beta},
			     (cudaStream_t)stream));
	return 0;
}
