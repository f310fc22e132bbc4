// attention.cu: causal grouped-query attention, forward and backward, on plain
// CUDA cores in float32.  This is the simple reference the cuDNN path
// (lib/gpu/attn_cudnn.c) is tested and timed against, and the fallback where
// cuDNN is missing; it is exact (float32 arithmetic over the stored inputs) and
// deterministic, not fast.
//
// Layout as the backend ops: q, out (b, t, h, hd); k, v (b, t, hkv, hd);
// lse (b, h, t).  Query head j reads kv head j / (h / hkv).
//
// Each warp owns one row (a query in the forward and dq, a key in dk/dv) and
// walks the other side in tiles of 32 rows staged in shared memory as float:
// lane j scores the tile's row j, then every lane accumulates its hd/32
// output dimensions over the tile.
#include "gpu/device.cuh"

#define TILE 32
#define FWD_ROWS 16 // query rows (warps) per block in the forward
#define BWD_ROWS 8  // rows per block in the backward kernels

// Stage rows r0 .. r0+ROWS-1 of a (b, t, nh, HD) tensor's head hh into s
// (ROWS, ld) as float; rows past t are zero (finite, and their weight is 0).
template <int ROWS, int HD, typename T>
__device__ __forceinline__ void stage(float *s, int ld, const T *x, int64_t bi, int64_t t,
				      int64_t nh, int64_t hh, int64_t r0)
{
	for (int e = threadIdx.x; e < ROWS * HD; e += blockDim.x) {
		int r = e / HD, c = e % HD;
		int64_t row = r0 + r;
		s[r * ld + c] = row < t ? to_f(x[((bi * t + row) * nh + hh) * HD + c]) : 0.0f;
	}
}

// Dot product of two float rows of HD elements.
template <int HD> __device__ __forceinline__ float dot_row(const float *a, const float *b)
{
	float acc = 0.0f;
#pragma unroll 16
	for (int d = 0; d < HD; d++)
		acc += a[d] * b[d];
	return acc;
}

// Forward: grid (ceil(t / FWD_ROWS), h, b); warp w takes query q0 + w with the
// online softmax (running max m, running sum l, unnormalised output o).
template <int HD, typename T>
__global__ void __launch_bounds__(FWD_ROWS * 32)
	attention_fwd_kernel(T *out, float *lse, const T *__restrict__ q, const T *__restrict__ k,
			     const T *__restrict__ v, int64_t t, int64_t h, int64_t hkv, float scale)
{
	__shared__ float qs[FWD_ROWS][HD];
	__shared__ float ks[TILE][HD + 1]; // +1: lane j reads row j, one bank each
	__shared__ float vs[TILE][HD];
	const int P = HD / 32; // output dimensions per lane
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (h / hkv);
	int64_t q0 = (int64_t)blockIdx.x * FWD_ROWS, qi = q0 + w;
	stage<FWD_ROWS, HD>(&qs[0][0], HD, q, bi, t, h, hi, q0);
	float m = -INFINITY, l = 0.0f, o[P];
#pragma unroll
	for (int p = 0; p < P; p++)
		o[p] = 0.0f;
	int64_t last = q0 + FWD_ROWS < t ? q0 + FWD_ROWS : t; // keys the block can see: < last
	for (int64_t k0 = 0; k0 < last; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, t, hkv, kv, k0);
		stage<TILE, HD>(&vs[0][0], HD, v, bi, t, hkv, kv, k0);
		__syncthreads();
		if (qi >= t || k0 > qi)
			continue;
		int64_t key = k0 + lane;
		float sc = key <= qi ? dot_row<HD>(qs[w], ks[lane]) * scale : -INFINITY;
		float m_new = fmaxf(m, warp_max(sc)); // finite: key k0 <= qi
		float p = key <= qi ? expf(sc - m_new) : 0.0f;
		float corr = expf(m - m_new);
		l = l * corr + warp_sum(p);
#pragma unroll
		for (int d = 0; d < P; d++)
			o[d] *= corr;
		for (int j = 0; j < TILE; j++) {
			float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
			for (int d = 0; d < P; d++)
				o[d] += pj * vs[j][lane + 32 * d];
		}
		m = m_new;
	}
	if (qi >= t)
		return;
	T *orow = out + ((bi * t + qi) * h + hi) * HD;
	float inv = 1.0f / l;
#pragma unroll
	for (int d = 0; d < P; d++)
		orow[lane + 32 * d] = from_f<T>(o[d] * inv);
	if (lane == 0)
		lse[(bi * h + hi) * t + qi] = m + logf(l);
}

// D (b, h, t) = rowsum(dout * out), one warp per row.
template <typename T>
__global__ void attention_dsum_kernel(float *dsum, const T *__restrict__ dout,
				      const T *__restrict__ out, int64_t b, int64_t t, int64_t h,
				      int64_t hd)
{
	int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; // (bi, ti, hi)
	int lane = threadIdx.x % 32;
	if (row >= b * t * h)
		return;
	float acc = 0.0f;
	for (int64_t d = lane; d < hd; d += 32)
		acc += to_f(dout[row * hd + d]) * to_f(out[row * hd + d]);
	acc = warp_sum(acc);
	int64_t hi = row % h, ti = (row / h) % t, bi = row / (h * t);
	if (lane == 0)
		dsum[(bi * h + hi) * t + ti] = acc;
}

// dq: grid (ceil(t / BWD_ROWS), h, b); warp w takes query q0 + w:
//   p = exp(scale q.k - lse), ds = p (dout.v - D), dq = scale sum ds k.
template <int HD, typename T>
__global__ void __launch_bounds__(BWD_ROWS * 32)
	attention_dq_kernel(T *dq, const T *__restrict__ dout, const T *__restrict__ q,
			    const T *__restrict__ k, const T *__restrict__ v,
			    const float *__restrict__ lse, const float *__restrict__ dsum,
			    int64_t t, int64_t h, int64_t hkv, float scale)
{
	__shared__ float qs[BWD_ROWS][HD];
	__shared__ float dos[BWD_ROWS][HD];
	__shared__ float ks[TILE][HD + 1];
	__shared__ float vs[TILE][HD + 1];
	const int P = HD / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (h / hkv);
	int64_t q0 = (int64_t)blockIdx.x * BWD_ROWS, qi = q0 + w;
	stage<BWD_ROWS, HD>(&qs[0][0], HD, q, bi, t, h, hi, q0);
	stage<BWD_ROWS, HD>(&dos[0][0], HD, dout, bi, t, h, hi, q0);
	float row_lse = qi < t ? lse[(bi * h + hi) * t + qi] : 0.0f;
	float row_d = qi < t ? dsum[(bi * h + hi) * t + qi] : 0.0f;
	float acc[P];
#pragma unroll
	for (int d = 0; d < P; d++)
		acc[d] = 0.0f;
	int64_t last = q0 + BWD_ROWS < t ? q0 + BWD_ROWS : t;
	for (int64_t k0 = 0; k0 < last; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, t, hkv, kv, k0);
		stage<TILE, HD>(&vs[0][0], HD + 1, v, bi, t, hkv, kv, k0);
		__syncthreads();
		if (qi >= t || k0 > qi)
			continue;
		int64_t key = k0 + lane;
		float ds = 0.0f;
		if (key <= qi) {
			float p = expf(dot_row<HD>(qs[w], ks[lane]) * scale - row_lse);
			ds = p * (dot_row<HD>(dos[w], vs[lane]) - row_d);
		}
		for (int j = 0; j < TILE; j++) {
			float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
			for (int d = 0; d < P; d++)
				acc[d] += dsj * ks[j][lane + 32 * d];
		}
	}
	if (qi >= t)
		return;
	T *row = dq + ((bi * t + qi) * h + hi) * HD;
#pragma unroll
	for (int d = 0; d < P; d++)
		row[lane + 32 * d] = from_f<T>(scale * acc[d]);
}

// dk, dv: grid (ceil(t / BWD_ROWS), hkv, b); warp w takes key k0 + w and walks
// the queries at or after it, for each query head of its group in head order:
//   dv = sum p dout, dk = scale sum ds q.
template <int HD, typename T>
__global__ void __launch_bounds__(BWD_ROWS * 32)
	attention_dkv_kernel(T *dk, T *dv, const T *__restrict__ dout, const T *__restrict__ q,
			     const T *__restrict__ k, const T *__restrict__ v,
			     const float *__restrict__ lse, const float *__restrict__ dsum,
			     int64_t t, int64_t h, int64_t hkv, float scale)
{
	__shared__ float kr[BWD_ROWS][HD];
	__shared__ float vr[BWD_ROWS][HD];
	__shared__ float qs[TILE][HD + 1];
	__shared__ float dos[TILE][HD + 1];
	__shared__ float lse_t[TILE], d_t[TILE];
	const int P = HD / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, kv = blockIdx.y, rep = h / hkv;
	int64_t k0 = (int64_t)blockIdx.x * BWD_ROWS, kj = k0 + w;
	stage<BWD_ROWS, HD>(&kr[0][0], HD, k, bi, t, hkv, kv, k0);
	stage<BWD_ROWS, HD>(&vr[0][0], HD, v, bi, t, hkv, kv, k0);
	float dk_acc[P], dv_acc[P];
#pragma unroll
	for (int d = 0; d < P; d++)
		dk_acc[d] = dv_acc[d] = 0.0f;
	for (int64_t hi = kv * rep; hi < (kv + 1) * rep; hi++) {
		for (int64_t q0 = k0 / TILE * TILE; q0 < t; q0 += TILE) {
			__syncthreads();
			stage<TILE, HD>(&qs[0][0], HD + 1, q, bi, t, h, hi, q0);
			stage<TILE, HD>(&dos[0][0], HD + 1, dout, bi, t, h, hi, q0);
			if (threadIdx.x < TILE) {
				int64_t row = q0 + threadIdx.x;
				lse_t[threadIdx.x] = row < t ? lse[(bi * h + hi) * t + row] : 0.0f;
				d_t[threadIdx.x] = row < t ? dsum[(bi * h + hi) * t + row] : 0.0f;
			}
			__syncthreads();
			if (kj >= t || q0 + TILE <= kj)
				continue;
			int64_t qi = q0 + lane;
			float p = 0.0f, ds = 0.0f;
			if (qi >= kj && qi < t) {
				p = expf(dot_row<HD>(qs[lane], kr[w]) * scale - lse_t[lane]);
				ds = p * (dot_row<HD>(dos[lane], vr[w]) - d_t[lane]);
			}
			for (int j = 0; j < TILE; j++) {
				float pj = __shfl_sync(0xffffffffu, p, j);
				float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
				for (int d = 0; d < P; d++) {
					dv_acc[d] += pj * dos[j][lane + 32 * d];
					dk_acc[d] += dsj * qs[j][lane + 32 * d];
				}
			}
		}
	}
	if (kj >= t)
		return;
	int64_t off = ((bi * t + kj) * hkv + kv) * HD;
#pragma unroll
	for (int d = 0; d < P; d++) {
		dk[off + lane + 32 * d] = from_f<T>(scale * dk_acc[d]);
		dv[off + lane + 32 * d] = from_f<T>(dv_acc[d]);
	}
}

static bool attention_shape_ok(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd)
{
	return b > 0 && t > 0 && h > 0 && hkv > 0 && h % hkv == 0 && (hd == 64 || hd == 128) &&
	       b <= 65535 && h <= 65535;
}

static float attention_scale(int64_t hd)
{
	return (float)(1.0 / sqrt((double)hd)); // as the CPU backend rounds it
}

extern "C" int launch_attention_fwd(void *out, float *lse, const void *q, const void *k,
				    const void *v, int dt, int64_t b, int64_t t, int64_t h,
				    int64_t hkv, int64_t hd, void *stream)
{
	if (!attention_shape_ok(b, t, h, hkv, hd))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	dim3 grid((unsigned)((t + FWD_ROWS - 1) / FWD_ROWS), (unsigned)h, (unsigned)b);
	float sc = attention_scale(hd);
	DISPATCH(dt, T,
		 if (hd == 64) attention_fwd_kernel<64><<<grid, FWD_ROWS * 32, 0, s>>>(
			 (T *)out, lse, (const T *)q, (const T *)k, (const T *)v, t, h, hkv, sc);
		 else attention_fwd_kernel<128><<<grid, FWD_ROWS * 32, 0, s>>>(
			 (T *)out, lse, (const T *)q, (const T *)k, (const T *)v, t, h, hkv, sc));
	return launch_status();
}

extern "C" int launch_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
				    const void *k, const void *v, const void *out, const float *lse,
				    int dt, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
				    void *scratch, void *stream)
{
	if (!attention_shape_ok(b, t, h, hkv, hd))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	float *dsum = (float *)scratch; // (b, h, t)
	float sc = attention_scale(hd);
	dim3 gq((unsigned)((t + BWD_ROWS - 1) / BWD_ROWS), (unsigned)h, (unsigned)b);
	dim3 gk((unsigned)((t + BWD_ROWS - 1) / BWD_ROWS), (unsigned)hkv, (unsigned)b);
	int rc = 0;
	DISPATCH(dt, T, {
		attention_dsum_kernel<<<(unsigned)((b * t * h * 32 + 255) / 256), 256, 0, s>>>(
			dsum, (const T *)dout, (const T *)out, b, t, h, hd);
		if ((rc = launch_status()) != 0)
			return rc;
		if (hd == 64) {
			attention_dq_kernel<64><<<gq, BWD_ROWS * 32, 0, s>>>(
				(T *)dq, (const T *)dout, (const T *)q, (const T *)k, (const T *)v, lse,
				dsum, t, h, hkv, sc);
			attention_dkv_kernel<64><<<gk, BWD_ROWS * 32, 0, s>>>(
				(T *)dk, (T *)dv, (const T *)dout, (const T *)q, (const T *)k,
				(const T *)v, lse, dsum, t, h, hkv, sc);
		} else {
			attention_dq_kernel<128><<<gq, BWD_ROWS * 32, 0, s>>>(
				(T *)dq, (const T *)dout, (const T *)q, (const T *)k, (const T *)v, lse,
				dsum, t, h, hkv, sc);
			attention_dkv_kernel<128><<<gk, BWD_ROWS * 32, 0, s>>>(
				(T *)dk, (T *)dv, (const T *)dout, (const T *)q, (const T *)k,
				(const T *)v, lse, dsum, t, h, hkv, sc);
		}
	});
	return launch_status();
}
