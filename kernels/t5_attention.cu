// t5_attention.cu: T5's self-attention core (backend.h's t5_attention), forward
// only: out = softmax(q k^T + bias) v per batch row and head, unscaled, with
// the relative position bias (h, l, l) shared by the batch.
//
// One warp per query row (batch, position, head), 8 warps a block.  Two passes
// over the keys in tiles of 32, lane j scoring the tile's key j: the first
// finds the row's max and the sum of exp(s - max) (each lane online over its
// keys, then the lanes combined), the second scores again and adds p v with
// p = exp(s - max) / sum, each lane owning output dimensions lane, lane + 32,
// ...  The probabilities exist one by one, so the bf16 model's rounding of
// each (softmax(scores.float()).type_as(scores)) is applied before it weighs
// its value row.  Plain float32 arithmetic, no tensor cores: T5's attention is
// a small share of the encoder's work (its linears are cuBLASLt's).
#include "gpu/device.cuh"

static const int WARPS = 8;

// The score of query row qs (dk floats in shared memory) and key j: q.k and
// the bias added, each rounded as T stores them.
template <typename T>
__device__ __forceinline__ float t5_score(const float *qs, const T *__restrict__ kj,
					  const T *__restrict__ brow, int64_t j, int64_t dk)
{
	float dot = 0.0f;
	for (int64_t d = 0; d < dk; d++)
		dot += qs[d] * to_f(kj[d]);
	return round_as<T>(round_as<T>(dot) + to_f(brow[j]));
}

// q, k, v, out (b, l, h, dk); bias (h, l, l).  Dynamic shared memory: each
// warp's query row and output accumulator, 2 dk floats.
template <typename T>
__global__ void t5_attention_kernel(T *out, const T *__restrict__ q, const T *__restrict__ k,
				    const T *__restrict__ v, const T *__restrict__ bias, int64_t b,
				    int64_t l, int64_t h, int64_t dk)
{
	extern __shared__ float t5_smem[];
	int w = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t row = (int64_t)blockIdx.x * WARPS + w; // ((bi * l) + i) * h + hi
	if (row >= b * l * h)
		return; // whole warps: no barrier below
	float *qs = t5_smem + w * 2 * dk, *os = qs + dk;
	int64_t hi = row % h, i = row / h % l, bi = row / (h * l);
	int64_t ld = h * dk; // between positions
	const T *qrow = q + row * dk, *kb = k + bi * l * ld + hi * dk, *vb = v + bi * l * ld + hi * dk;
	const T *brow = bias + (hi * l + i) * l;
	for (int64_t d = lane; d < dk; d += 32) {
		qs[d] = to_f(qrow[d]);
		os[d] = 0.0f;
	}
	__syncwarp();
	float m = -INFINITY, sum = 0.0f; // this lane's keys, online
	for (int64_t j = lane; j < l; j += 32) {
		float s = t5_score(qs, kb + j * ld, brow, j, dk);
		if (s > m) {
			sum = sum * expf(m - s) + 1.0f;
			m = s;
		} else {
			sum += expf(s - m);
		}
	}
	float mx = warp_max(m);
	sum = warp_sum(m > -INFINITY ? sum * expf(m - mx) : 0.0f);
	for (int64_t j0 = 0; j0 < l; j0 += 32) {
		int64_t j = j0 + lane;
		float p = j < l ? round_as<T>(expf(t5_score(qs, kb + j * ld, brow, j, dk) - mx) / sum)
				: 0.0f;
		int nj = l - j0 < 32 ? (int)(l - j0) : 32;
		for (int jj = 0; jj < nj; jj++) {
			float pj = __shfl_sync(0xffffffffu, p, jj);
			const T *vj = vb + (j0 + jj) * ld;
			for (int64_t d = lane; d < dk; d += 32)
				os[d] += pj * to_f(vj[d]);
		}
	}
	T *orow = out + row * dk;
	for (int64_t d = lane; d < dk; d += 32)
		orow[d] = from_f<T>(os[d]);
}

extern "C" int launch_t5_attention(void *out, const void *q, const void *k, const void *v,
				   const void *bias, int t, int64_t b, int64_t l, int64_t h,
				   int64_t dk, void *stream)
{
	if (b < 0 || l < 0 || h < 0 || dk < 1 || dk > GPU_T5_ATTENTION_MAX_DK)
		return (int)cudaErrorInvalidValue;
	int64_t rows = b * l * h;
	if (rows == 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	unsigned grid = (unsigned)((rows + WARPS - 1) / WARPS);
	size_t smem = (size_t)WARPS * 2 * (size_t)dk * sizeof(float);
	DISPATCH(t, T,
		 t5_attention_kernel<<<grid, WARPS * 32, smem, s>>>((T *)out, (const T *)q,
								    (const T *)k, (const T *)v,
								    (const T *)bias, b, l, h, dk));
	return launch_status();
}
