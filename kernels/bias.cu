// bias.cu: the biases of linears (backend.h's bias_add): y (rows, d) += the
// bias row of each row's group (one row for all when offs is NULL), the bias
// first rounded to y's type (torchtitan's h + b.to(h.dtype)) and the sum
// rounded once, as the CPU backend adds them.  One thread per element.
#include "backend/row_group.h"
#include "gpu/device.cuh"

static const int THREADS = 256;

template <typename Ty, typename Tb>
__global__ void bias_add_kernel(Ty *y, const Tb *__restrict__ bias, int64_t rows, int64_t d,
				int64_t groups, const int32_t *__restrict__ offs)
{
	int64_t total = rows * d, stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		int64_t r = e / d, j = e % d, g = 0;
		if (offs) {
			if (r < offs[0] || r >= offs[groups])
				continue; // rows past the groups' are left alone
			g = row_group(offs, groups, r);
		}
		y[e] = from_f<Ty>(to_f(y[e]) + round_as<Ty>(to_f(bias[g * d + j])));
	}
}

extern "C" int launch_bias_add(void *y, int ty, const void *bias, int tb, int64_t rows, int64_t d,
			       int64_t groups, const int32_t *offs, void *stream)
{
	if (rows < 0 || d < 0 || (offs && groups < 1))
		return (int)cudaErrorInvalidValue;
	if (rows * d == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH2(ty, Ty, tb, Tb,
		  bias_add_kernel<<<grid_for(rows * d, THREADS), THREADS, 0, s>>>(
			  (Ty *)y, (const Tb *)bias, rows, d, groups, offs));
	return launch_status();
}
