// vecadd.cu: c = a + b.  The first kernel: it proves the build (sm_90a code
// plus compute_90 PTX), the launcher's C linkage and the device path end to end.
#include <cuda_runtime.h>

#include "gpu/launch.h"

// Grid-stride loop: any n with a bounded grid, and the index in size_t so
// arrays past 2^31 elements are fine.
__global__ void vecadd_kernel(const float *__restrict__ a, const float *__restrict__ b,
			      float *__restrict__ c, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		c[i] = a[i] + b[i];
}

extern "C" int launch_vecadd(const float *a, const float *b, float *c, size_t n, void *stream)
{
	if (n == 0)
		return 0;
	const int threads = 256;
	size_t want = (n + threads - 1) / threads;
	int blocks = want > 65535 ? 65535 : (int)want;
	vecadd_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(a, b, c, n);
	return (int)cudaGetLastError();
}
