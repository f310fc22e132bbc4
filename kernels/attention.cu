// attention.cu: grouped-query attention, forward and backward, on plain CUDA
// cores in float32, with the variants of the families: sliding windows
// (GPT-OSS), chunks (Llama 4's local layers), documents (torchtitan's
// block-causal mask over packed windows), learned sinks (GPT-OSS) and MLA's
// split heads (DeepSeek V3: q, k of head dim 192, v of 128).  This is
// the simple reference the cuDNN path (lib/gpu/attn_cudnn.c) is tested and
// timed against, and the path for what cuDNN does not take (float32, context-
// parallel blocks at other positions, the variants above, no cuDNN); it is
// exact (float32 arithmetic over the stored inputs) and deterministic, not fast.
//
// Layout as the backend ops (backend.h's be_attn): q (b, tq, h, hd), k
// (b, tk, hkv, hd), v (b, tk, hkv, hdv), out (b, tq, h, hdv), lse (b, h, tq).
// Query head j reads kv head j / (h / hkv); query i sees the keys
// lib/gpu/att_mask.h gives it.  A query that sees no key gets out = 0 and
// lse = -inf (its sink with sinks).
//
// Each warp owns one row (a query in the forward and dq, a key in dk/dv) and
// walks the rows of the other side its row's range can reach, in tiles of 32
// staged in shared memory as float: lane j scores the tile's row j, then lane
// l accumulates output dimensions l, l + 32, ... over the tile.  A block's
// warps take consecutive rows, so the block walks the union of their ranges
// and a warp skips the tiles outside its own (warp-uniform: no divergence).
#include "gpu/att_mask.h"
#include "gpu/device.cuh"

#define TILE 32

// Rows (warps) per block: the most that keep the static shared memory within
// 48 KiB for the head dims (MLA's 192 + 128 takes half as many).
template <int HD, int HDV> struct att_rows {
	static const int fwd = HD + HDV > 256 ? 8 : 16;
	static const int bwd = HD + HDV > 256 ? 4 : 8;
};

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

// Whether the tile of rows t0 .. t0+TILE-1 meets the range [r0, r1).
__device__ __forceinline__ bool tile_meets(int64_t t0, int64_t r0, int64_t r1)
{
	return r1 > r0 && t0 < r1 && t0 + TILE > r0;
}

// Forward: grid (ceil(tq / ROWS), h, b); warp w takes query q0 + w with the
// online softmax (running max m, running sum l, unnormalised output o).  The
// sink starts the row as a first logit with no value (m = sink, l = 1); without
// one m starts at -inf and only tiles holding a seen key are visited, so m is
// finite after the first.
template <int HD, int HDV, typename T>
__global__ void __launch_bounds__(att_rows<HD, HDV>::fwd * 32)
	attention_fwd_kernel(T *out, float *lse, const T *__restrict__ q, const T *__restrict__ k,
			     const T *__restrict__ v, gpu_att a, float scale)
{
	const int ROWS = att_rows<HD, HDV>::fwd;
	__shared__ float qs[ROWS][HD];
	__shared__ float ks[TILE][HD + 1]; // +1: lane j reads row j, one bank each
	__shared__ float vs[TILE][HDV];
	const int P = (HDV + 31) / 32; // output dimensions per lane (some idle when HDV < 32)
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (a.h / a.hkv);
	int64_t q0 = (int64_t)blockIdx.x * ROWS, qi = q0 + w;
	int64_t q1 = q0 + ROWS < a.tq ? q0 + ROWS : a.tq;
	stage<ROWS, HD>(&qs[0][0], HD, q, bi, a.tq, a.h, hi, q0);
	int64_t j0 = 0, j1 = 0, kb0, kb1;
	if (qi < a.tq)
		att_keys(&a, bi, qi, &j0, &j1);
	att_block_keys(&a, bi, q0, q1, &kb0, &kb1);
	float sink = a.sinks ? a.sinks[hi] : -INFINITY;
	float m = sink, l = sink > -INFINITY ? 1.0f : 0.0f, o[P];
#pragma unroll
	for (int p = 0; p < P; p++)
		o[p] = 0.0f;
	for (int64_t k0 = kb0; k0 < kb1; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, a.tk, a.hkv, kv, k0);
		stage<TILE, HDV>(&vs[0][0], HDV, v, bi, a.tk, a.hkv, kv, k0);
		__syncthreads();
		if (!tile_meets(k0, j0, j1))
			continue;
		int64_t key = k0 + lane;
		bool seen = key >= j0 && key < j1;
		float sc = seen ? dot_row<HD>(qs[w], ks[lane]) * scale : -INFINITY;
		float m_new = fmaxf(m, warp_max(sc)); // finite: the tile holds a seen key
		float p = seen ? expf(sc - m_new) : 0.0f;
		float corr = expf(m - m_new); // 0 while m is -inf
		l = l * corr + warp_sum(p);
#pragma unroll
		for (int d = 0; d < P; d++)
			o[d] *= corr;
		for (int j = 0; j < TILE; j++) {
			float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
			for (int d = 0; d < P; d++)
				if (lane + 32 * d < HDV)
					o[d] += pj * vs[j][lane + 32 * d];
		}
		m = m_new;
	}
	if (qi >= a.tq)
		return;
	T *orow = out + ((bi * a.tq + qi) * a.h + hi) * HDV;
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
	for (int d = 0; d < P; d++)
		if (lane + 32 * d < HDV)
			orow[lane + 32 * d] = from_f<T>(o[d] * inv);
	if (lane == 0)
		lse[(bi * a.h + hi) * a.tq + qi] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D (b, h, tq) = rowsum(dout * out), one warp per row of hdv.
template <typename T>
__global__ void attention_dsum_kernel(float *dsum, const T *__restrict__ dout,
				      const T *__restrict__ out, gpu_att a)
{
	int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; // (bi, ti, hi)
	int lane = threadIdx.x % 32;
	if (row >= a.b * a.tq * a.h)
		return;
	float acc = 0.0f;
	for (int64_t d = lane; d < a.hdv; d += 32)
		acc += to_f(dout[row * a.hdv + d]) * to_f(out[row * a.hdv + d]);
	acc = warp_sum(acc);
	int64_t hi = row % a.h, ti = (row / a.h) % a.tq, bi = row / (a.h * a.tq);
	if (lane == 0)
		dsum[(bi * a.h + hi) * a.tq + ti] = acc;
}

// The sinks' gradient: the sink s of head hi is a logit with no value, so
// dL/ds = sum over rows of P_s (0 - D) = -sum exp(s - lse) D over the batch
// and queries (rows that see nothing and have no sink: lse -inf, no term).
// One block per head sums its rows in double in a fixed order and adds the
// result into dsinks[hi].
__global__ void attention_dsink_kernel(float *dsinks, const float *__restrict__ sinks,
				       const float *__restrict__ lse,
				       const float *__restrict__ dsum, gpu_att a)
{
	__shared__ double red[32];
	int64_t hi = blockIdx.x, n = a.b * a.tq;
	double s = sinks[hi], acc = 0.0;
	for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
		int64_t bi = r / a.tq, ti = r % a.tq, at = (bi * a.h + hi) * a.tq + ti;
		float row_lse = lse[at];
		if (row_lse > -INFINITY)
			acc -= exp(s - (double)row_lse) * (double)dsum[at];
	}
	acc = block_sum_d(acc, red);
	if (threadIdx.x == 0)
		dsinks[hi] += (float)acc;
}

// dq: grid (ceil(tq / ROWS), h, b); warp w takes query q0 + w:
//   p = exp(scale q.k - lse), ds = p (dout.v - D), dq = scale sum ds k.
template <int HD, int HDV, typename T>
__global__ void __launch_bounds__(att_rows<HD, HDV>::bwd * 32)
	attention_dq_kernel(T *dq, const T *__restrict__ dout, const T *__restrict__ q,
			    const T *__restrict__ k, const T *__restrict__ v,
			    const float *__restrict__ lse, const float *__restrict__ dsum, gpu_att a,
			    float scale)
{
	const int ROWS = att_rows<HD, HDV>::bwd;
	__shared__ float qs[ROWS][HD];
	__shared__ float dos[ROWS][HDV];
	__shared__ float ks[TILE][HD + 1];
	__shared__ float vs[TILE][HDV + 1];
	const int P = (HD + 31) / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, hi = blockIdx.y, kv = hi / (a.h / a.hkv);
	int64_t q0 = (int64_t)blockIdx.x * ROWS, qi = q0 + w;
	int64_t q1 = q0 + ROWS < a.tq ? q0 + ROWS : a.tq;
	stage<ROWS, HD>(&qs[0][0], HD, q, bi, a.tq, a.h, hi, q0);
	stage<ROWS, HDV>(&dos[0][0], HDV, dout, bi, a.tq, a.h, hi, q0);
	int64_t j0 = 0, j1 = 0, kb0, kb1;
	if (qi < a.tq)
		att_keys(&a, bi, qi, &j0, &j1);
	att_block_keys(&a, bi, q0, q1, &kb0, &kb1);
	bool any = j1 > j0; // then lse is finite
	float row_lse = any ? lse[(bi * a.h + hi) * a.tq + qi] : 0.0f;
	float row_d = any ? dsum[(bi * a.h + hi) * a.tq + qi] : 0.0f;
	float acc[P];
#pragma unroll
	for (int d = 0; d < P; d++)
		acc[d] = 0.0f;
	for (int64_t k0 = kb0; k0 < kb1; k0 += TILE) {
		__syncthreads();
		stage<TILE, HD>(&ks[0][0], HD + 1, k, bi, a.tk, a.hkv, kv, k0);
		stage<TILE, HDV>(&vs[0][0], HDV + 1, v, bi, a.tk, a.hkv, kv, k0);
		__syncthreads();
		if (!tile_meets(k0, j0, j1))
			continue;
		float ds = 0.0f;
		int64_t key = k0 + lane;
		if (key >= j0 && key < j1) {
			float p = expf(dot_row<HD>(qs[w], ks[lane]) * scale - row_lse);
			ds = p * (dot_row<HDV>(dos[w], vs[lane]) - row_d);
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

// dk, dv: grid (ceil(tk / ROWS), hkv, b); warp w takes key k0 + w and walks
// the queries that see it (att_queries), for each query head of its group in
// head order:  dv = sum p dout, dk = scale sum ds q.
template <int HD, int HDV, typename T>
__global__ void __launch_bounds__(att_rows<HD, HDV>::bwd * 32)
	attention_dkv_kernel(T *dk, T *dv, const T *__restrict__ dout, const T *__restrict__ q,
			     const T *__restrict__ k, const T *__restrict__ v,
			     const float *__restrict__ lse, const float *__restrict__ dsum,
			     gpu_att a, float scale)
{
	const int ROWS = att_rows<HD, HDV>::bwd;
	__shared__ float kr[ROWS][HD];
	__shared__ float vr[ROWS][HDV];
	__shared__ float qs[TILE][HD + 1];
	__shared__ float dos[TILE][HDV + 1];
	__shared__ float lse_t[TILE], d_t[TILE];
	const int P = (HD + 31) / 32, PV = (HDV + 31) / 32;
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t bi = blockIdx.z, kv = blockIdx.y, rep = a.h / a.hkv;
	int64_t k0 = (int64_t)blockIdx.x * ROWS, kj = k0 + w;
	int64_t k1 = k0 + ROWS < a.tk ? k0 + ROWS : a.tk;
	stage<ROWS, HD>(&kr[0][0], HD, k, bi, a.tk, a.hkv, kv, k0);
	stage<ROWS, HDV>(&vr[0][0], HDV, v, bi, a.tk, a.hkv, kv, k0);
	int64_t i0 = 0, i1 = 0, qb0, qb1; // this warp's queries, the block's
	if (kj < a.tk)
		att_queries(&a, bi, kj, &i0, &i1);
	att_block_queries(&a, bi, k0, k1, &qb0, &qb1);
	float dk_acc[P], dv_acc[PV];
#pragma unroll
	for (int d = 0; d < P; d++)
		dk_acc[d] = 0.0f;
#pragma unroll
	for (int d = 0; d < PV; d++)
		dv_acc[d] = 0.0f;
	for (int64_t hi = kv * rep; hi < (kv + 1) * rep; hi++) {
		for (int64_t q0 = qb0; q0 < qb1; q0 += TILE) {
			__syncthreads();
			stage<TILE, HD>(&qs[0][0], HD + 1, q, bi, a.tq, a.h, hi, q0);
			stage<TILE, HDV>(&dos[0][0], HDV + 1, dout, bi, a.tq, a.h, hi, q0);
			if (threadIdx.x < TILE) {
				int64_t row = q0 + threadIdx.x;
				lse_t[threadIdx.x] = row < a.tq ? lse[(bi * a.h + hi) * a.tq + row] : 0.0f;
				d_t[threadIdx.x] = row < a.tq ? dsum[(bi * a.h + hi) * a.tq + row] : 0.0f;
			}
			__syncthreads();
			if (!tile_meets(q0, i0, i1))
				continue;
			int64_t qi = q0 + lane;
			float p = 0.0f, ds = 0.0f;
			if (qi >= i0 && qi < i1) { // qi sees kj: its lse is finite
				p = expf(dot_row<HD>(qs[lane], kr[w]) * scale - lse_t[lane]);
				ds = p * (dot_row<HDV>(dos[lane], vr[w]) - d_t[lane]);
			}
			for (int j = 0; j < TILE; j++) {
				float pj = __shfl_sync(0xffffffffu, p, j);
				float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
				for (int d = 0; d < PV; d++)
					if (lane + 32 * d < HDV)
						dv_acc[d] += pj * dos[j][lane + 32 * d];
#pragma unroll
				for (int d = 0; d < P; d++)
					if (lane + 32 * d < HD)
						dk_acc[d] += dsj * qs[j][lane + 32 * d];
			}
		}
	}
	if (kj >= a.tk)
		return;
	int64_t koff = ((bi * a.tk + kj) * a.hkv + kv) * HD;
	int64_t voff = ((bi * a.tk + kj) * a.hkv + kv) * HDV;
#pragma unroll
	for (int d = 0; d < P; d++)
		if (lane + 32 * d < HD)
			dk[koff + lane + 32 * d] = from_f<T>(scale * dk_acc[d]);
#pragma unroll
	for (int d = 0; d < PV; d++)
		if (lane + 32 * d < HDV)
			dv[voff + lane + 32 * d] = from_f<T>(dv_acc[d]);
}

// (hd, hdv) -> template arguments HD, HDV (attention_dims_ok's pairs).
#define DISPATCH_DIMS(hd, HD, HDV, ...)                                                \
	do {                                                                           \
		switch (hd) {                                                          \
		case 8: { const int HD = 8, HDV = 8; __VA_ARGS__; } break;             \
		case 16: { const int HD = 16, HDV = 16; __VA_ARGS__; } break;          \
		case 32: { const int HD = 32, HDV = 32; __VA_ARGS__; } break;          \
		case 64: { const int HD = 64, HDV = 64; __VA_ARGS__; } break;          \
		case 96: { const int HD = 96, HDV = 96; __VA_ARGS__; } break;          \
		case 192: { const int HD = 192, HDV = 128; __VA_ARGS__; } break;       \
		default: { const int HD = 128, HDV = 128; __VA_ARGS__; } break;        \
		}                                                                      \
	} while (0)

// The call with hdv filled in (0: hd), or false when the kernels do not take it.
static bool attention_call(const gpu_att *in, gpu_att *a)
{
	*a = *in;
	if (a->hdv == 0)
		a->hdv = a->hd;
	return a->b > 0 && a->tq > 0 && a->tk > 0 && a->h > 0 && a->hkv > 0 &&
	       a->h % a->hkv == 0 && attention_dims_ok(a->hd, a->hdv) && a->b <= 65535 &&
	       a->h <= 65535 && a->window >= 0 && a->chunk >= 0 &&
	       (a->chunk == 0 || (a->q_pos0 >= 0 && a->k_pos0 >= 0)) &&
	       (!a->doc || (a->q_pos0 >= 0 && a->q_pos0 + a->tq <= a->doc_t));
}

static float attention_scale(const gpu_att *a)
{
	return a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->hd)); // as the CPU rounds it
}

template <int HD, int HDV, typename T>
static void attention_fwd_launch(T *out, float *lse, const T *q, const T *k, const T *v,
				 const gpu_att *a, float sc, cudaStream_t s)
{
	const int rows = att_rows<HD, HDV>::fwd;
	dim3 grid((unsigned)((a->tq + rows - 1) / rows), (unsigned)a->h, (unsigned)a->b);
	attention_fwd_kernel<HD, HDV><<<grid, rows * 32, 0, s>>>(out, lse, q, k, v, *a, sc);
}

extern "C" int launch_attention_fwd(void *out, float *lse, const void *q, const void *k,
				    const void *v, int dt, const gpu_att *in, void *stream)
{
	gpu_att a;
	if (!attention_call(in, &a))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	float sc = attention_scale(&a);
	DISPATCH(dt, T, DISPATCH_DIMS(a.hd, HD, HDV, {
		attention_fwd_launch<HD, HDV>((T *)out, lse, (const T *)q, (const T *)k,
					      (const T *)v, &a, sc, s);
	}));
	return launch_status();
}

template <int HD, int HDV, typename T>
static void attention_bwd_kernels(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
				  const T *v, const float *lse, const float *dsum, const gpu_att *a,
				  float sc, cudaStream_t s)
{
	const int rows = att_rows<HD, HDV>::bwd;
	dim3 gq((unsigned)((a->tq + rows - 1) / rows), (unsigned)a->h, (unsigned)a->b);
	dim3 gk((unsigned)((a->tk + rows - 1) / rows), (unsigned)a->hkv, (unsigned)a->b);
	attention_dq_kernel<HD, HDV><<<gq, rows * 32, 0, s>>>(dq, dout, q, k, v, lse, dsum, *a, sc);
	attention_dkv_kernel<HD, HDV><<<gk, rows * 32, 0, s>>>(dk, dv, dout, q, k, v, lse, dsum,
								*a, sc);
}

extern "C" int launch_attention_bwd(void *dq, void *dk, void *dv, const void *dout, const void *q,
				    const void *k, const void *v, const void *out, const float *lse,
				    int dt, const gpu_att *in, void *scratch, void *stream)
{
	gpu_att a;
	if (!attention_call(in, &a))
		return (int)cudaErrorInvalidValue;
	cudaStream_t s = (cudaStream_t)stream;
	float *dsum = (float *)scratch; // (b, h, tq)
	float sc = attention_scale(&a);
	int rc = 0;
	DISPATCH(dt, T, {
		attention_dsum_kernel<<<(unsigned)((a.b * a.tq * a.h * 32 + 255) / 256), 256, 0, s>>>(
			dsum, (const T *)dout, (const T *)out, a);
		if ((rc = launch_status()) != 0)
			return rc;
		if (a.sinks && a.dsinks) {
			attention_dsink_kernel<<<(unsigned)a.h, 256, 0, s>>>(a.dsinks, a.sinks, lse,
									    dsum, a);
			if ((rc = launch_status()) != 0)
				return rc;
		}
		DISPATCH_DIMS(a.hd, HD, HDV,
			      attention_bwd_kernels<HD, HDV>((T *)dq, (T *)dk, (T *)dv,
							     (const T *)dout, (const T *)q,
							     (const T *)k, (const T *)v, lse, dsum,
							     &a, sc, s));
	});
	return launch_status();
}
