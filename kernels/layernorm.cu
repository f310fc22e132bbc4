// layernorm.cu: nn.LayerNorm and nn.GroupNorm forward (backend.h's
// layernorm_fwd and groupnorm_fwd) as one kernel: a group norm normalises
// each (sample, group) run of cg = c / groups channels of hw values (NCHW:
// consecutive in memory) with channel ch scaled by w[ch] and shifted by b[ch];
// a layer norm over rows of d is the group norm of one group of d channels of
// one value (hw 1).  One block per run, three passes over it: the mean, the
// biased variance around it (both summed in double, as the CPU backend sums
// them), then y = (x - mean) * rstd * w + b.
#include "gpu/device.cuh"

static const int THREADS = 256;

// x, y (n * groups runs of len = cg * hw); w, b (c = groups * cg).
template <typename Ty, typename Tx, typename Tw>
__global__ void groupnorm_fwd_kernel(Ty *y, const Tx *__restrict__ x, const Tw *__restrict__ w,
				     const Tw *__restrict__ b, int64_t cg, int64_t hw,
				     int64_t groups, float eps)
{
	__shared__ double red[32];
	int64_t run = blockIdx.x, len = cg * hw, c0 = run % groups * cg;
	const Tx *xr = x + run * len;
	double acc = 0.0;
	for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
		acc += to_f(xr[j]);
	double mean = block_sum_d(acc, red) / (double)len;
	acc = 0.0;
	for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
		double dx = to_f(xr[j]) - mean;
		acc += dx * dx;
	}
	double var = block_sum_d(acc, red) / (double)len;
	float rstd = (float)(1.0 / sqrt(var + eps));
	Ty *yr = y + run * len;
	for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
		int64_t ch = c0 + j / hw;
		yr[j] = from_f<Ty>((float)(to_f(xr[j]) - mean) * rstd * to_f(w[ch]) + to_f(b[ch]));
	}
}

extern "C" int launch_groupnorm_fwd(void *y, int ty, const void *x, int tx, const void *w,
				    const void *b, int tw, int64_t n, int64_t c, int64_t hw,
				    int64_t groups, float eps, void *stream)
{
	if (n < 0 || c < 1 || hw < 1 || groups < 1 || c % groups != 0 || n * groups > 0x7fffffff)
		return (int)cudaErrorInvalidValue;
	if (n == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH2(ty, Ty, tx, Tx,
		  DISPATCH(tw, Tw,
			   groupnorm_fwd_kernel<<<(unsigned)(n * groups), THREADS, 0, s>>>(
				   (Ty *)y, (const Tx *)x, (const Tw *)w, (const Tw *)b, c / groups,
				   hw, groups, eps)));
	return launch_status();
}

extern "C" int launch_layernorm_fwd(void *y, int ty, const void *x, int tx, const void *w,
				    const void *b, int tw, int64_t n, int64_t d, float eps,
				    void *stream)
{
	return launch_groupnorm_fwd(y, ty, x, tx, w, b, tw, n, d, 1, 1, eps, stream);
}
