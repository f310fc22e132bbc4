// attention.cu: grouped-query attention, forward and backward, on plain CUDA
// cores in float32.  This is the simple reference the cuDNN path
// (lib/gpu/attn_cudnn.c) is tested and timed against, and the path for what
// cuDNN does not take (float32, context-parallel blocks at other positions, no
// cuDNN); it is exact (float32 arithmetic over the stored inputs) and
// deterministic, not fast.
//
// Layout as the backend ops (backend.h's be_attn): q (b, tq, h, hd), k, v
// (b, tk, hkv, hd), out (b, tq, h, hd), lse (b, h, tq).  Query head j reads kv
// head j / (h / hkv); query i at position q_pos0 + i sees, when causal, the keys
// at positions up to its own.  A query that sees no key gets out = 0 and
// lse = -inf.
//
// Each warp owns one row (a query in the forward and dq, a key in dk/dv) and
// walks the other side in tiles of 32 rows staged in shared memory as float:
// lane j scores the tile's row j, then lane l accumulates output dimensions
// l, l + 32, ... (below hd) over the tile.  Head dims 16, 32, 64, 96 and 128
// (debugmodel's 16 to Llama 3's 128).
#include "gpu/device.cuh"

#define TILE 32
#define FWD_ROWS 16 // query rows (warps) per block in the forward
#define BWD_ROWS 8  // rows per block in the backward kernels

// How many keys (a prefix 0..n-1 of k) query qi sees.
__device__ __forceinline__ int64_t keys_seen(const gpu_att &a, int64_t qi)
{
	if (!a.causal)
		return a.tk;
	int64_t n = a.q_pos0 + qi - a.k_pos0 + 1;
	return n < 0 ? 0 : n > a.tk ? a.tk : n;
}

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

// Forward: grid (ceil(tq / FWD_ROWS), h, b); warp w takes query q0 + w with the
// online softmax (running max m, running sum l, unnormalised output o).  A
// tile is visited only when its first key is seen, so m is finite after it.
template <int HD, typename T>
__global__ void __launch_bounds__(FWD_ROWS * 32)
	attention_fwd_kernel(T *out, float *lse, const T *__restrict__ q, const T *__restrict__ k,
			     const T *__restrict__ v, gpu_att a, float scale)
{
	__shared__ float qs[FWD_ROWS][HD];
	__shared__ float ks[TILE][HD + 1]; // +1: lane j reads row j, one bank each
	__shared__ float vs[TILE][HD];
	const int P = (HD + 31) / 32; // output dimensions per lane (some idle when HD < 32)
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (a.h / a.hkv);
	int64_t q0 = (int64_t)blockIdx.x * FWD_ROWS, qi = q0 + w;
	stage<FWD_ROWS, HD>(&qs[0][0], HD, q, bi, a.tq, a.h, hi, q0);
	int64_t seen = qi < a.tq ? keys_seen(a, qi) : 0;
	int64_t last = keys_seen(a, (q0 + FWD_ROWS < a.tq ? q0 + FWD_ROWS : a.tq) - 1);
	float m = -INFINITY, l = 0.0f, o[P];
#pragma unroll
	for (int p = 0; p < P; p++)
		o[p] = 0.0f;
	for (int64_t k0 = 0; k0 < last; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, a.tk, a.hkv, kv, k0);
		stage<TILE, HD>(&vs[0][0], HD, v, bi, a.tk, a.hkv, kv, k0);
		__syncthreads();
		if (k0 >= seen)
			continue;
		int64_t key = k0 + lane;
		float sc = key < seen ? dot_row<HD>(qs[w], ks[lane]) * scale : -INFINITY;
		float m_new = fmaxf(m, warp_max(sc));
		float p = key < seen ? expf(sc - m_new) : 0.0f;
		float corr = expf(m - m_new);
		l = l * corr + warp_sum(p);
#pragma unroll
		for (int d = 0; d < P; d++)
			o[d] *= corr;
		for (int j = 0; j < TILE; j++) {
			float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
			for (int d = 0; d < P; d++)
				if (lane + 32 * d < HD)
					o[d] += pj * vs[j][lane + 32 * d];
		}
		m = m_new;
	}
	if (qi >= a.tq)
		return;
	T *orow = out + ((bi * a.tq + qi) * a.h + hi) * HD;
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
	for (int d = 0; d < P; d++)
		if (lane + 32 * d < HD)
			orow[lane + 32 * d] = from_f<T>(o[d] * inv);
	if (lane == 0)
		lse[(bi * a.h + hi) * a.tq + qi] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D (b, h, tq) = rowsum(dout * out), one warp per row.
template <typename T>
__global__ void attention_dsum_kernel(float *dsum, const T *__restrict__ dout,
				      const T *__restrict__ out, gpu_att a)
{
	int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; // (bi, ti, hi)
	int lane = threadIdx.x % 32;
	if (row >= a.b * a.tq * a.h)
		return;
	float acc = 0.0f;
	for (int64_t d = lane; d < a.hd; d += 32)
		acc += to_f(dout[row * a.hd + d]) * to_f(out[row * a.hd + d]);
	acc = warp_sum(acc);
	int64_t hi = row % a.h, ti = (row / a.h) % a.tq, bi = row / (a.h * a.tq);
	if (lane == 0)
		dsum[(bi * a.h + hi) * a.tq + ti] = acc;
}

// dq: grid (ceil(tq / BWD_ROWS), h, b); warp w takes query q0 + w:
//   p = exp(scale q.k - lse), ds = p (dout.v - D), dq = scale sum ds k.
template <int HD, typename T>
__global__ void __launch_bounds__(BWD_ROWS * 32)
	attention_dq_kernel(T *dq, const T *__restrict__ dout, const T *__restrict__ q,
			    const T *__restrict__ k, const T *__restrict__ v,
			    const float *__restrict__ lse, const float *__restrict__ dsum, gpu_att a,
			    float scale)
{
	__shared__ float qs[BWD_ROWS][HD];
	__shared__ float dos[BWD_ROWS][HD];
	__shared__ float ks[TILE][HD + 1];
	__shared__ float vs[TILE][HD + 1];
	const int P = (HD + 31) / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (a.h / a.hkv);
	int64_t q0 = (int64_t)blockIdx.x * BWD_ROWS, qi = q0 + w;
	stage<BWD_ROWS, HD>(&qs[0][0], HD, q, bi, a.tq, a.h, hi, q0);
	stage<BWD_ROWS, HD>(&dos[0][0], HD, dout, bi, a.tq, a.h, hi, q0);
	int64_t seen = qi < a.tq ? keys_seen(a, qi) : 0;
	int64_t last = keys_seen(a, (q0 + BWD_ROWS < a.tq ? q0 + BWD_ROWS : a.tq) - 1);
	float row_lse = seen > 0 ? lse[(bi * a.h + hi) * a.tq + qi] : 0.0f;
	float row_d = seen > 0 ? dsum[(bi * a.h + hi) * a.tq + qi] : 0.0f;
	float acc[P];
#pragma unroll
	for (int d = 0; d < P; d++)
		acc[d] = 0.0f;
	for (int64_t k0 = 0; k0 < last; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, a.tk, a.hkv, kv, k0);
		stage<TILE, HD>(&vs[0][0], HD + 1, v, bi, a.tk, a.hkv, kv, k0);
		__syncthreads();
		if (k0 >= seen)
			continue;
		float ds = 0.0f;
		if (k0 + lane < seen) {
			float p = expf(dot_row<HD>(qs[w], ks[lane]) * scale - row_lse);
			ds = p * (dot_row<HD>(dos[w], vs[lane]) - row_d);
		}
		for (int j = 0; j < TILE; j++) {
			float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
			for (int d = 0; d < P; d++)
				if (lane + 32 * d < HD)
					acc[d] += dsj * ks[j][lane + 32 * d];
		}
	}
	if (qi >= a.tq)
		return;
	T *row = dq + ((bi * a.tq + qi) * a.h + hi) * HD;
#pragma unroll
	for (int d = 0; d < P; d++)
		if (lane + 32 * d < HD)
			row[lane + 32 * d] = from_f<T>(scale * acc[d]);
}

// The first query that sees key kj (causal; 0 without the mask).
__device__ __forceinline__ int64_t first_query(const gpu_att &a, int64_t kj)
{
	if (!a.causal)
		return 0;
	int64_t q = a.k_pos0 + kj - a.q_pos0;
	return q < 0 ? 0 : q;
}

// dk, dv: grid (ceil(tk / BWD_ROWS), hkv, b); warp w takes key k0 + w and walks
// the queries that see it, for each query head of its group in head order:
//   dv = sum p dout, dk = scale sum ds q.
template <int HD, typename T>
__global__ void __launch_bounds__(BWD_ROWS * 32)
	attention_dkv_kernel(T *dk, T *dv, const T *__restrict__ dout, const T *__restrict__ q,
			     const T *__restrict__ k, const T *__restrict__ v,
			     const float *__restrict__ lse, const float *__restrict__ dsum,
			     gpu_att a, float scale)
{
	__shared__ float kr[BWD_ROWS][HD];
	__shared__ float vr[BWD_ROWS][HD];
	__shared__ float qs[TILE][HD + 1];
	__shared__ float dos[TILE][HD + 1];
	__shared__ float lse_t[TILE], d_t[TILE];
	const int P = (HD + 31) / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, kv = blockIdx.y, rep = a.h / a.hkv;
	int64_t k0 = (int64_t)blockIdx.x * BWD_ROWS, kj = k0 + w;
	stage<BWD_ROWS, HD>(&kr[0][0], HD, k, bi, a.tk, a.hkv, kv, k0);
	stage<BWD_ROWS, HD>(&vr[0][0], HD, v, bi, a.tk, a.hkv, kv, k0);
	int64_t qmin = kj < a.tk ? first_query(a, kj) : a.tq; // this warp's first query
	float dk_acc[P], dv_acc[P];
#pragma unroll
	for (int d = 0; d < P; d++)
		dk_acc[d] = dv_acc[d] = 0.0f;
	int64_t start = first_query(a, k0) / TILE * TILE; // the block's first key's
	for (int64_t hi = kv * rep; hi < (kv + 1) * rep; hi++) {
		for (int64_t q0 = start; q0 < a.tq; q0 += TILE) {
			__syncthreads();
			stage<TILE, HD>(&qs[0][0], HD + 1, q, bi, a.tq, a.h, hi, q0);
			stage<TILE, HD>(&dos[0][0], HD + 1, dout, bi, a.tq, a.h, hi, q0);
			if (threadIdx.x < TILE) {
				int64_t row = q0 + threadIdx.x;
				lse_t[threadIdx.x] = row < a.tq ? lse[(bi * a.h + hi) * a.tq + row] : 0.0f;
				d_t[threadIdx.x] = row < a.tq ? dsum[(bi * a.h + hi) * a.tq + row] : 0.0f;
			}
			__syncthreads();
			if (q0 + TILE <= qmin)
				continue;
			int64_t qi = q0 + lane;
			float p = 0.0f, ds = 0.0f;
			if (qi >= qmin && qi < a.tq) {
				p = expf(dot_row<HD>(qs[lane], kr[w]) * scale - lse_t[lane]);
				ds = p * (dot_row<HD>(dos[lane], vr[w]) - d_t[lane]);
			}
			for (int j = 0; j < TILE; j++) {
				float pj = __shfl_sync(0xffffffffu, p, j);
				float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
				for (int d = 0; d < P; d++) {
					if (lane + 32 * d < HD) {
						dv_acc[d] += pj * dos[j][lane + 32 * d];
						dk_acc[d] += dsj * qs[j][lane + 32 * d];
					}
				}
			}
		}
	}
	if (kj >= a.tk)
		return;
	int64_t off = ((bi * a.tk + kj) * a.hkv + kv) * HD;
#pragma unroll
	for (int d = 0; d < P; d++) {
		if (lane + 32 * d < HD) {
			dk[off + lane + 32 * d] = from_f<T>(scale * dk_acc[d]);
			dv[off + lane + 32 * d] = from_f<T>(dv_acc[d]);
		}
	}
}

// hd -> template argument HD.
#define DISPATCH_HD(hd, HD, ...)                                                       \
	do {                                                                           \
		switch (hd) {                                                          \
		case 16: { const int HD = 16; __VA_ARGS__; } break;                    \
		case 32: { const int HD = 32; __VA_ARGS__; } break;                    \
		case 64: { const int HD = 64; __VA_ARGS__; } break;                    \
		case 96: { const int HD = 96; __VA_ARGS__; } break;                    \
		default: { const int HD = 128; __VA_ARGS__; } break;                   \
		}                                                                      \
	} while (0)

static bool attention_shape_ok(const gpu_att *a)
{
	return a->b > 0 && a->tq > 0 && a->tk > 0 && a->h > 0 && a->hkv > 0 && a->h % a->hkv == 0 &&
	       (a->hd == 16 || a->hd == 32 || a->hd == 64 || a->hd == 96 || a->hd == 128) &&
	       a->b <= 65535 && a->h <= 65535;
}

static float attention_scale(const gpu_att *a)
{
	return a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->hd)); // as the CPU rounds it
}

extern "C" int launch_attention_fwd(void *out, float *lse, const void *q, const void *k,
				    const void *v, int dt, const gpu_att *a, void *stream)
{
	if (!attention_shape_ok(a))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	dim3 grid((unsigned)((a->tq + FWD_ROWS - 1) / FWD_ROWS), (unsigned)a->h, (unsigned)a->b);
	float sc = attention_scale(a);
	DISPATCH(dt, T, DISPATCH_HD(a->hd, HD, {
		attention_fwd_kernel<HD><<<grid, FWD_ROWS * 32, 0, s>>>(
			(T *)out, lse, (const T *)q, (const T *)k, (const T *)v, *a, sc);
	}));
	return launch_status();
}

template <int HD, typename T>
static void attention_bwd_kernels(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
				  const T *v, const float *lse, const float *dsum, const gpu_att *a,
				  float sc, cudaStream_t s)
{
	dim3 gq((unsigned)((a->tq + BWD_ROWS - 1) / BWD_ROWS), (unsigned)a->h, (unsigned)a->b);
	dim3 gk((unsigned)((a->tk + BWD_ROWS - 1) / BWD_ROWS), (unsigned)a->hkv, (unsigned)a->b);
	attention_dq_kernel<HD><<<gq, BWD_ROWS * 32, 0, s>>>(dq, dout, q, k, v, lse, dsum, *a, sc);
	attention_dkv_kernel<HD><<<gk, BWD_ROWS * 32, 0, s>>>(dk, dv, dout, q, k, v, lse, dsum, *a,
							      sc);
}

extern "C" int launch_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
				    const void *k, const void *v, const void *out, const float *lse,
				    int dt, const gpu_att *a, void *scratch, void *stream)
{
	if (!attention_shape_ok(a))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	float *dsum = (float *)scratch; // (b, h, tq)
	float sc = attention_scale(a);
	int rc = 0;
	DISPATCH(dt, T, {
		attention_dsum_kernel<<<(unsigned)((a->b * a->tq * a->h * 32 + 255) / 256), 256, 0, s>>>(
			dsum, (const T *)dout, (const T *)out, *a);
		if ((rc = launch_status()) != 0)
			return rc;
		DISPATCH_HD(a->hd, HD,
			    attention_bwd_kernels<HD>((T *)dq, (T *)dk, (T *)dv, (const T *)dout,
						      (const T *)q, (const T *)k, (const T *)v, lse,
						      dsum, a, sc, s));
	});
	return launch_status();
}
