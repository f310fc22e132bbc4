// crossentropy.cu: softmax cross-entropy over the vocabulary, fused with its
// gradient so that no probability matrix exists beside the logits, and the sum
// of the row losses in a fixed order.  The model calls it on the output
// projection's logits one chunk of rows at a time (lib/gpu/lmhead.c).
#include "gpu/device.cuh"

// Online softmax statistics: (m, s) with s = sum exp(x - m); merge two.
__device__ __forceinline__ void ms_add(float &m, float &s, float x)
{
	if (x > m) {
		s = s * expf(m - x) + 1.0f;
		m = x;
	} else {
		s += expf(x - m);
	}
}

// One block per row of logits (n, v):
//   lse = log sum exp(row), row_loss = lse - row[label];
//   with a scale, row = (softmax(row) - onehot(label)) * scale.
// Ignored rows: loss 0 and, with a scale, a zero gradient.
template <int V, typename T>
__global__ void cross_entropy_kernel(T *logits, const int32_t *__restrict__ labels, int64_t v,
				     int32_t ignore_index, float grad_scale,
				     const float *__restrict__ grad_scale_dev, float *row_loss)
{
	__shared__ float red[32];
	int64_t row = blockIdx.x;
	T *x = logits + row * v;
	int32_t y = labels[row];
	float scale = grad_scale_dev ? *grad_scale_dev : grad_scale;
	if (y == ignore_index) {
		if (threadIdx.x == 0)
			row_loss[row] = 0.0f;
		if (scale != 0.0f) {
			float z[V] = {};
			for (int64_t j = (int64_t)threadIdx.x * V; j < v; j += (int64_t)blockDim.x * V)
				store_vec<V>(x + j, z);
		}
		return;
	}
	float m = -INFINITY, s = 0.0f;
	for (int64_t j = (int64_t)threadIdx.x * V; j < v; j += (int64_t)blockDim.x * V) {
		float xv[V];
		load_vec<V>(x + j, xv);
#pragma unroll
		for (int k = 0; k < V; k++)
			ms_add(m, s, xv[k]);
	}
	float mx = block_max(m, red);
	s = m == -INFINITY ? 0.0f : s * expf(m - mx);
	float sum = block_sum(s, red);
	float xy = to_f(x[y]);
	__syncthreads(); // every thread has read x[y] before the gradient overwrites it
	if (threadIdx.x == 0)
		row_loss[row] = mx + logf(sum) - xy;
	if (scale == 0.0f)
		return;
	float c = scale / sum;
	for (int64_t j = (int64_t)threadIdx.x * V; j < v; j += (int64_t)blockDim.x * V) {
		float xv[V];
		load_vec<V>(x + j, xv);
#pragma unroll
		for (int k = 0; k < V; k++)
			xv[k] = expf(xv[k] - mx) * c - (j + k == y ? scale : 0.0f);
		store_vec<V>(x + j, xv);
	}
}

extern "C" int launch_cross_entropy(void *logits, int tl, const int32_t *labels, int64_t n,
				    int64_t v, int32_t ignore_index, float grad_scale,
				    const float *grad_scale_dev, float *row_loss, void *stream)
{
	if (n <= 0 || v <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	bool v8 = vec_ok(v, logits);
	int th = v >= 4096 ? 512 : 128;
	DISPATCH(tl, T,
		 if (v8) cross_entropy_kernel<8><<<n, th, 0, s>>>((T *)logits, labels, v, ignore_index,
								  grad_scale, grad_scale_dev, row_loss);
		 else cross_entropy_kernel<1><<<n, th, 0, s>>>((T *)logits, labels, v, ignore_index,
							       grad_scale, grad_scale_dev, row_loss));
	return launch_status();
}

// One block of 1024 threads: thread i sums rows i, i + 1024, ... in double, then
// the block sums the threads' partials in its fixed tree.
__global__ void loss_sum_kernel(double *loss_sum, int64_t *n_valid, const float *__restrict__ row_loss,
				const int32_t *__restrict__ labels, int64_t n, int32_t ignore_index)
{
	__shared__ double red[32];
	double acc = 0.0, cnt = 0.0;
	for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
		if (labels[i] != ignore_index) {
			acc += (double)row_loss[i];
			cnt += 1.0;
		}
	acc = block_sum_d(acc, red);
	cnt = block_sum_d(cnt, red);
	if (threadIdx.x == 0) {
		*loss_sum += acc;
		*n_valid += (int64_t)cnt;
	}
}

extern "C" int launch_loss_sum(double *loss_sum, int64_t *n_valid, const float *row_loss,
			       const int32_t *labels, int64_t n, int32_t ignore_index, void *stream)
{
	if (n <= 0)
		return 0;
	loss_sum_kernel<<<1, 1024, 0, (cudaStream_t)stream>>>(loss_sum, n_valid, row_loss, labels, n,
							     ignore_index);
	return launch_status();
}
