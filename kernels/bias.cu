// bias.cu: the biases of linears (backend.h's bias_add): y (rows, d) += the
// bias row of each row's group (one row for all when offs is NULL), the bias
// first rounded to y's type (torchtitan's h + b.to(h.dtype)) and the sum
// rounded once, as the CPU backend adds them; and a convolution's over NCHW
// (conv_bias): y (n, c, hw) = b[ch], written for the conv's matmul to add
// its product to.  One thread per element; bias_grad (the biases' gradients)
// one per column.
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

// bias_grad: thread (g, j) sums column j of dy over group g's rows (all rows
// when offs is NULL) in row order in double, then dbias += the sum: float32
// adds the sum rounded to float32 (the CPU's float32 kernel), other types
// round dbias + sum once from double (the CPU's bf16 kernel).
template <typename Tb, typename Ty>
__global__ void bias_grad_kernel(Tb *dbias, const Ty *__restrict__ dy, int64_t rows, int64_t d,
				 int64_t ng, const int32_t *__restrict__ offs)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= ng * d)
		return;
	int64_t g = t / d, j = t % d;
	int64_t r0 = offs ? offs[g] : 0, r1 = offs ? offs[g + 1] : rows;
	double acc = 0.0;
	for (int64_t r = r0; r < r1; r++)
		acc += to_f(dy[r * d + j]);
	float old = to_f(dbias[g * d + j]);
	if (sizeof(Tb) == 4 && sizeof(Ty) == 4)
		dbias[g * d + j] = from_f<Tb>(__fadd_rn(old, (float)acc));
	else
		dbias[g * d + j] = from_f<Tb>((float)((double)old + acc));
}

extern "C" int launch_bias_grad(void *dbias, int tb, const void *dy, int ty, int64_t rows,
				int64_t d, int64_t groups, const int32_t *offs, void *stream)
{
	if (rows < 0 || d < 0 || (offs && groups < 1))
		return (int)cudaErrorInvalidValue;
	int64_t ng = offs ? groups : 1;
	if (ng * d == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	unsigned grid = (unsigned)((ng * d + THREADS - 1) / THREADS);
	DISPATCH2(tb, Tb, ty, Ty,
		  bias_grad_kernel<<<grid, THREADS, 0, s>>>((Tb *)dbias, (const Ty *)dy, rows, d, ng,
							    offs));
	return launch_status();
}

template <typename T>
__global__ void conv_bias_kernel(T *__restrict__ y, const T *__restrict__ b, int64_t c, int64_t hw,
				 int64_t total)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
		y[e] = b[e / hw % c];
}

extern "C" int launch_conv_bias(void *y, const void *b, int t, int64_t n, int64_t c, int64_t hw,
				void *stream)
{
	if (n < 0 || c < 0 || hw < 0)
		return (int)cudaErrorInvalidValue;
	int64_t total = n * c * hw;
	if (total == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 conv_bias_kernel<<<grid_for(total, THREADS), THREADS, 0, s>>>((T *)y, (const T *)b,
									      c, hw, total));
	return launch_status();
}
