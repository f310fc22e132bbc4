// softmax.cu: the autoencoder's attention pieces (backend.h's softmax_exp and
// div_rows), a chunk of query rows at a time around two matmuls, as torch's
// CPU attention computes a head of any size: the exps of each row's scores
// (rounded where the bf16 model hands them to its P @ V product) with their
// float32 sum, then the product divided by it.  The sums add each thread's
// exps in its stride order and then the threads' in block_reduce's fixed
// order: the same on every run (not the CPU's order, which sums a row in
// sequence).
#include "gpu/device.cuh"

static const int THREADS = 256;

// One block per row of s (rows, n): e (rows, n) = exp(s - the row's max),
// sum (rows) their float32 sum before e rounds them.
template <typename Te>
__global__ void softmax_exp_kernel(Te *__restrict__ e, float *__restrict__ sum,
				   const float *__restrict__ s, int64_t n)
{
	__shared__ float red[32];
	int64_t row = blockIdx.x;
	const float *sr = s + row * n;
	float mx = -INFINITY;
	for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
		mx = fmaxf(mx, sr[j]);
	mx = block_max(mx, red);
	float acc = 0.0f;
	for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
		float ex = expf(sr[j] - mx);
		acc += ex;
		e[row * n + j] = from_f<Te>(ex);
	}
	acc = block_reduce(acc, red, op_sum(), 0.0f);
	if (threadIdx.x == 0)
		sum[row] = acc;
}

// y (rows, d) = x / sum[row], one thread per element.
template <typename Ty>
__global__ void div_rows_kernel(Ty *__restrict__ y, const float *__restrict__ x,
				const float *__restrict__ sum, int64_t rows, int64_t d)
{
	int64_t total = rows * d, gs = (int64_t)gridDim.x * blockDim.x;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gs)
		y[i] = from_f<Ty>(x[i] / sum[i / d]);
}

extern "C" int launch_softmax_exp(void *e, int te, float *sum, const float *s, int64_t rows,
				  int64_t n, void *stream)
{
	if (rows < 0 || n < 1 || rows > 0x7fffffff)
		return (int)cudaErrorInvalidValue;
	if (rows == 0)
		return 0;
	cudaStream_t st = (cudaStream_t)stream;
	DISPATCH(te, Te,
		 softmax_exp_kernel<<<(unsigned)rows, THREADS, 0, st>>>((Te *)e, sum, s, n));
	return launch_status();
}

extern "C" int launch_div_rows(void *y, int ty, const float *x, const float *sum, int64_t rows,
			       int64_t d, void *stream)
{
	if (rows < 0 || d < 0)
		return (int)cudaErrorInvalidValue;
	if (rows * d == 0)
		return 0;
	cudaStream_t st = (cudaStream_t)stream;
	DISPATCH(ty, Ty,
		 div_rows_kernel<<<grid_for(rows * d, THREADS), THREADS, 0, st>>>((Ty *)y, x, sum,
										  rows, d));
	return launch_status();
}
