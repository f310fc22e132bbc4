// rmsnorm.cu: RMSNorm forward and backward, each fused with the residual add
// around it (torchtitan's h = x + attention(norm(x)); the norm of the next
// sublayer reads h).  One block per row in the forward; the backward's weight
// gradient is summed per block of rows and then across blocks in block order.
#include "gpu/device.cuh"

// v = x[j..j+V) + delta[j..j+V) (delta NULL: x alone).
template <int V, typename Tx, typename Td>
__device__ __forceinline__ void load_sum(const Tx *x, const Td *delta, int64_t j, float *v)
{
	load_vec<V>(x + j, v);
	if (delta) {
		float dv[V];
		load_vec<V>(delta + j, dv);
#pragma unroll
		for (int k = 0; k < V; k++)
			v[k] += dv[k];
	}
}

// Forward, one block per row:
//   r = x + delta (rounded to Tx when stored to res), rstd = 1/sqrt(mean(r^2) + eps),
//   y = r * rstd * w.
// x, delta, res, y (n, d); w (d); rstd (n).  res may be x.
template <int V, typename Ty, typename Tx, typename Td, typename Tw>
__global__ void rmsnorm_fwd_kernel(Ty *y, float *rstd, Tx *res, const Tx *x, const Td *delta,
				   const Tw *__restrict__ w, int64_t d, float eps)
{
	__shared__ float red[32];
	int64_t row = blockIdx.x;
	const Tx *xr = x + row * d;
	const Td *dr = delta ? delta + row * d : nullptr;
	Tx *rr = res ? res + row * d : nullptr;
	float ss = 0.0f;
	for (int64_t j = (int64_t)threadIdx.x * V; j < d; j += (int64_t)blockDim.x * V) {
		float v[V];
		load_sum<V>(xr, dr, j, v);
		if (rr) {
			store_vec<V>(rr + j, v);
#pragma unroll
			for (int k = 0; k < V; k++) // the norm sees what the stream stores
				v[k] = to_f(from_f<Tx>(v[k]));
		}
#pragma unroll
		for (int k = 0; k < V; k++)
			ss += v[k] * v[k];
	}
	ss = block_sum(ss, red);
	float r = 1.0f / sqrtf(ss / (float)d + eps);
	if (threadIdx.x == 0)
		rstd[row] = r;
	// Second pass: the row again (from L1/L2), now normalised.  A thread reads
	// back only what it wrote itself, so no barrier is needed for res.
	Ty *yr = y + row * d;
	for (int64_t j = (int64_t)threadIdx.x * V; j < d; j += (int64_t)blockDim.x * V) {
		float v[V], wv[V];
		if (rr)
			load_vec<V>(rr + j, v);
		else
			load_sum<V>(xr, dr, j, v);
		load_vec<V>(w + j, wv);
#pragma unroll
		for (int k = 0; k < V; k++)
			v[k] = v[k] * r * wv[k];
		store_vec<V>(yr + j, v);
	}
}

// Threads per row: enough for one vector each up to 1024, whole warps.
static int row_threads(int64_t d, int v)
{
	int64_t t = (d / v + 31) / 32 * 32;
	return t < 32 ? 32 : t > 1024 ? 1024 : (int)t;
}

extern "C" int launch_rmsnorm_fwd(void *y, int ty, float *rstd, void *res, int tres, const void *x,
				  int tx, const void *delta, int tdelta, const void *w, int tw,
				  int64_t n, int64_t d, float eps, void *stream)
{
	if (n <= 0 || d <= 0)
		return 0;
	if (res && tres != tx)
		return (int)cudaErrorInvalidValue; // the residual stream has one type
	if (!delta)
		tdelta = tx;
	cudaStream_t s = (cudaStream_t)stream;
	bool v8 = vec_ok(d, y, res, x, delta, w);
	int th = row_threads(d, v8 ? 8 : 1);
	DISPATCH2(ty, Ty, tx, Tx,
		  DISPATCH2(tdelta, Td, tw, Tw, {
			  auto kern = v8 ? rmsnorm_fwd_kernel<8, Ty, Tx, Td, Tw>
					 : rmsnorm_fwd_kernel<1, Ty, Tx, Td, Tw>;
			  kern<<<n, th, 0, s>>>((Ty *)y, rstd, (Tx *)res, (const Tx *)x,
						(const Td *)delta, (const Tw *)w, d, eps);
		  }));
	return launch_status();
}

// Backward.  With g = w * dy:  dx = rstd * g - x * rstd^3 * mean(g * x) (+ dres),
// dw += sum over rows of dy * x * rstd.  Block b takes a fixed run of rows and
// keeps its dw partial (d floats) in shared memory, each column owned by one
// thread; partial (blocks, d) then goes to rmsnorm_dw_kernel.  dres has dx's
// type (the residual stream's gradient); dy may be narrower (the activations').
template <int V, typename Tdx, typename Tdy, typename Tx, typename Tw>
__global__ void rmsnorm_bwd_kernel(Tdx *dx, float *partial, const Tdy *dy, const Tdx *dres,
				   const Tx *__restrict__ x, const Tw *__restrict__ w,
				   const float *__restrict__ rstd, int64_t n, int64_t d)
{
	extern __shared__ float dw_part[]; // (d)
	__shared__ float red[32];
	int64_t rows_per = (n + gridDim.x - 1) / gridDim.x;
	int64_t r0 = blockIdx.x * rows_per, r1 = r0 + rows_per < n ? r0 + rows_per : n;
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		dw_part[j] = 0.0f;
	__syncthreads();
	for (int64_t row = r0; row < r1; row++) {
		const Tdy *dyr = dy + row * d;
		const Tx *xr = x + row * d;
		float r = rstd[row];
		float dot = 0.0f;
		for (int64_t j = (int64_t)threadIdx.x * V; j < d; j += (int64_t)blockDim.x * V) {
			float gv[V], xv[V], wv[V];
			load_vec<V>(dyr + j, gv);
			load_vec<V>(xr + j, xv);
			load_vec<V>(w + j, wv);
#pragma unroll
			for (int k = 0; k < V; k++)
				dot += wv[k] * gv[k] * xv[k];
		}
		dot = block_sum(dot, red);
		float c = dot / (float)d * r * r * r;
		for (int64_t j = (int64_t)threadIdx.x * V; j < d; j += (int64_t)blockDim.x * V) {
			float gv[V], xv[V], wv[V], out[V];
			load_vec<V>(dyr + j, gv);
			load_vec<V>(xr + j, xv);
			load_vec<V>(w + j, wv);
			if (dres) {
				load_vec<V>(dres + row * d + j, out);
			} else {
#pragma unroll
				for (int k = 0; k < V; k++)
					out[k] = 0.0f;
			}
#pragma unroll
			for (int k = 0; k < V; k++) {
				out[k] += r * wv[k] * gv[k] - c * xv[k];
				dw_part[j + k] += gv[k] * xv[k] * r;
			}
			store_vec<V>(dx + row * d + j, out);
		}
	}
	__syncthreads();
	for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
		partial[blockIdx.x * d + j] = dw_part[j];
}

// dw[j] += sum over blocks of partial[b][j], in block order.
template <typename Tdw>
__global__ void rmsnorm_dw_kernel(Tdw *dw, const float *__restrict__ partial, int blocks,
				  int64_t d)
{
	for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < d;
	     j += (int64_t)gridDim.x * blockDim.x) {
		float acc = 0.0f;
		for (int b = 0; b < blocks; b++)
			acc += partial[b * d + j];
		dw[j] = from_f<Tdw>(to_f(dw[j]) + acc);
	}
}

// Blocks of rows in the backward: a function of n alone, so the order of the
// dw sum does not depend on the device.
static int bwd_blocks(int64_t n)
{
	return n < GPU_RMSNORM_BWD_BLOCKS ? (int)n : GPU_RMSNORM_BWD_BLOCKS;
}

extern "C" int launch_rmsnorm_bwd(void *dx, int tdx, void *dw, int tdw, const void *dy, int tdy,
				  const void *dres, const void *x, int tx, const void *w, int tw,
				  const float *rstd, int64_t n, int64_t d, void *scratch, void *stream)
{
	if (n <= 0 || d <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	int blocks = bwd_blocks(n);
	size_t smem = (size_t)d * sizeof(float);
	bool v8 = vec_ok(d, dx, dy, dres, x, w);
	int th = row_threads(d, v8 ? 8 : 1);
	float *partial = (float *)scratch;
	int rc = 0;
	DISPATCH2(tdx, Tdx, tdy, Tdy,
		  DISPATCH2(tx, Tx, tw, Tw, {
			  auto kern = v8 ? rmsnorm_bwd_kernel<8, Tdx, Tdy, Tx, Tw>
					 : rmsnorm_bwd_kernel<1, Tdx, Tdy, Tx, Tw>;
			  if (smem > 32 * 1024) /* with the static part, past the default 48 KiB */
				  rc = (int)cudaFuncSetAttribute(
					  kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
			  if (rc == 0)
				  kern<<<blocks, th, smem, s>>>((Tdx *)dx, partial, (const Tdy *)dy,
								(const Tdx *)dres, (const Tx *)x,
								(const Tw *)w, rstd, n, d);
		  }));
	if (rc != 0)
		return rc;
	if ((rc = launch_status()) != 0)
		return rc;
	DISPATCH(tdw, Tdw,
		 rmsnorm_dw_kernel<<<grid_for(d, 256), 256, 0, s>>>((Tdw *)dw, partial, blocks, d));
	return launch_status();
}
