// image.cu: the autoencoder's data movement on NCHW images (backend.h's
// upsample2x and im2col): copies, one thread per output element in a
// grid-stride loop, so every output is written (zero in im2col's padding).
#include "gpu/device.cuh"

static const int THREADS = 256;

// y (planes, 2h, 2w) = x (planes, h, w) repeated 2 x 2: y[p][i][j] = x[p][i / 2][j / 2].
template <typename T>
__global__ void upsample2x_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t planes,
				  int64_t h, int64_t w)
{
	int64_t total = planes * 4 * h * w, stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		int64_t j = e % (2 * w), i = e / (2 * w) % (2 * h), p = e / (4 * h * w);
		y[e] = x[(p * h + i / 2) * w + j / 2];
	}
}

// cols (n c k k, np): row r = ((image c + ch) k + ki) k + kj holds, in column
// j, x[image][ch][oy s + ki - top][ox s + kj - left] for output pixel p0 + j =
// oy wo + ox, 0 outside x.
template <typename T>
__global__ void im2col_kernel(T *__restrict__ cols, const T *__restrict__ x, int64_t rows,
			      int64_t h, int64_t w, int64_t k, int64_t stride, int64_t left,
			      int64_t top, int64_t wo, int64_t p0, int64_t np)
{
	int64_t total = rows * np, gs = (int64_t)gridDim.x * blockDim.x;
	for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gs) {
		int64_t p = p0 + e % np, r = e / np, ox = p % wo, oy = p / wo;
		int64_t kj = r % k, ki = r / k % k, plane = r / (k * k);
		int64_t iy = oy * stride + ki - top, ix = ox * stride + kj - left;
		bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
		cols[e] = inside ? x[(plane * h + iy) * w + ix] : from_f<T>(0.0f);
	}
}

extern "C" int launch_upsample2x(void *y, const void *x, int t, int64_t n, int64_t c, int64_t h,
				 int64_t w, void *stream)
{
	if (n < 0 || c < 0 || h < 0 || w < 0)
		return (int)cudaErrorInvalidValue;
	int64_t total = n * c * 4 * h * w;
	if (total == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 upsample2x_kernel<<<grid_for(total, THREADS), THREADS, 0, s>>>((T *)y, (const T *)x,
										n * c, h, w));
	return launch_status();
}

extern "C" int launch_im2col(void *cols, const void *x, int t, int64_t n, int64_t c, int64_t h,
			     int64_t w, int64_t k, int64_t stride, int64_t left, int64_t right,
			     int64_t top, int64_t bottom, int64_t p0, int64_t np, void *stream)
{
	if (n < 0 || c < 0 || k < 1 || stride < 1 || left < 0 || right < 0 || top < 0 ||
	    bottom < 0 || h + top + bottom < k || w + left + right < k || p0 < 0 || np < 0)
		return (int)cudaErrorInvalidValue;
	int64_t ho = (h + top + bottom - k) / stride + 1, wo = (w + left + right - k) / stride + 1;
	if (p0 + np > ho * wo)
		return (int)cudaErrorInvalidValue;
	int64_t rows = n * c * k * k;
	if (rows * np == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	DISPATCH(t, T,
		 im2col_kernel<<<grid_for(rows * np, THREADS), THREADS, 0, s>>>(
			 (T *)cols, (const T *)x, rows, h, w, k, stride, left, top, wo, p0, np));
	return launch_status();
}
