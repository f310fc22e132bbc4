// heads.cu: multi-head latent attention's split heads (DeepSeek V3): q and k
// heads of nope (d1) and rope (d2) parts joined, and their backward, the split
// (backend.h's heads_cat / heads_split).  Plain copies; the split of a part
// shared by every head (MLA's k_pe, h2 = 1) sums the heads in head order, one
// thread per output element, as the CPU backend does (bit-identical in float32).
#include "gpu/device.cuh"

static const int THREADS = 256;

// y (n, h, d1 + d2) = [x1 (n, h, d1), x2 (n, h2, d2)], h2 = h or 1.
template <typename T>
__global__ void heads_cat_kernel(T *__restrict__ y, const T *__restrict__ x1,
				 const T *__restrict__ x2, int64_t n, int64_t h, int64_t d1,
				 int64_t d2, int64_t h2)
{
	int64_t d = d1 + d2, total = n * h * d;
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		int64_t row = e / d, c = e % d, i = row / h, j = row % h;
		y[e] = c < d1 ? x1[row * d1 + c] : x2[(i * h2 + (h2 == 1 ? 0 : j)) * d2 + c - d1];
	}
}

// x1 (n, h, d1) = y's first parts (when x1 is not NULL).
template <typename T>
__global__ void heads_split1_kernel(T *__restrict__ x1, const T *__restrict__ y, int64_t n,
				    int64_t h, int64_t d1, int64_t d2)
{
	int64_t total = n * h * d1, stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride)
		x1[e] = y[(e / d1) * (d1 + d2) + e % d1];
}

// x2 (n, h2, d2) = y's second parts; with h2 = 1 their sum over the heads in
// head order (float accumulation, rounded once).
template <typename T>
__global__ void heads_split2_kernel(T *__restrict__ x2, const T *__restrict__ y, int64_t n,
				    int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	int64_t d = d1 + d2, total = n * h2 * d2, stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		int64_t row = e / d2, c = e % d2; // row of (n, h2)
		if (h2 != 1) {
			x2[e] = y[row * d + d1 + c];
			continue;
		}
		float acc = 0.0f;
		for (int64_t j = 0; j < h; j++)
			acc += to_f(y[(row * h + j) * d + d1 + c]);
		x2[e] = from_f<T>(acc);
	}
}

static bool heads_shape_ok(int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	return n >= 0 && h > 0 && d1 >= 0 && d2 >= 0 && (h2 == h || h2 == 1);
}

extern "C" int launch_heads_cat(void *y, const void *x1, const void *x2, int t, int64_t n,
				int64_t h, int64_t d1, int64_t d2, int64_t h2, void *stream)
{
	if (!heads_shape_ok(n, h, d1, d2, h2))
		return (int)cudaErrorInvalidValue;
	int64_t total = n * h * (d1 + d2);
	if (total == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 heads_cat_kernel<<<grid_for(total, THREADS), THREADS, 0, s>>>(
			 (T *)y, (const T *)x1, (const T *)x2, n, h, d1, d2, h2));
	return launch_status();
}

extern "C" int launch_heads_split(void *x1, void *x2, const void *y, int t, int64_t n, int64_t h,
				  int64_t d1, int64_t d2, int64_t h2, void *stream)
{
	if (!heads_shape_ok(n, h, d1, d2, h2))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	int64_t t1 = n * h * d1, t2 = n * h2 * d2;
	DISPATCH(t, T, {
		if (x1 && t1 > 0)
			heads_split1_kernel<<<grid_for(t1, THREADS), THREADS, 0, s>>>(
				(T *)x1, (const T *)y, n, h, d1, d2);
		if (x2 && t2 > 0)
			heads_split2_kernel<<<grid_for(t2, THREADS), THREADS, 0, s>>>(
				(T *)x2, (const T *)y, n, h, d1, d2, h2);
	});
	return launch_status();
}
