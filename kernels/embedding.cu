// embedding.cu: the token embedding, forward (a gather) and backward (a scatter
// that adds).  The backward uses no atomics: the pairs (row, position) are
// radix sorted, so each row's positions come out in token order, and one warp
// per row and column strip adds that row's gradients in that order onto the
// table's row (in float32, stored once), exactly the sequence of additions the
// CPU backend makes.
#include <cub/device/device_radix_sort.cuh>

#include "gpu/device.cuh"

// out (n, d) = table[ids - v0], zero rows for ids outside [v0, v0 + nv) (the
// rows another vocabulary-parallel rank holds); one block per token.
template <int V, typename To, typename Tt>
__global__ void embedding_fwd_kernel(To *__restrict__ out, const Tt *__restrict__ table,
				     const int32_t *__restrict__ ids, int64_t d, int64_t v0,
				     int64_t nv)
{
	int64_t i = blockIdx.x, r = (int64_t)ids[i] - v0;
	bool in = r >= 0 && r < nv;
	const Tt *src = table + (in ? r : 0) * d;
	To *dst = out + i * d;
	for (int64_t j = (int64_t)threadIdx.x * V; j < d; j += (int64_t)blockDim.x * V) {
		float v[V] = {};
		if (in)
			load_vec<V>(src + j, v);
		store_vec<V>(dst + j, v);
	}
}

extern "C" int launch_embedding_fwd(void *out, int tout, const void *table, int ttab,
				    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
				    void *stream)
{
	if (n <= 0 || d <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	bool v8 = vec_ok(d, out, table);
	int64_t per = d / (v8 ? 8 : 1);
	int th = per >= 256 ? 256 : (int)((per + 31) / 32 * 32);
	DISPATCH2(tout, To, ttab, Tt,
		  if (v8) embedding_fwd_kernel<8><<<n, th, 0, s>>>((To *)out, (const Tt *)table, ids, d,
								   v0, nv);
		  else embedding_fwd_kernel<1><<<n, th, 0, s>>>((To *)out, (const Tt *)table, ids, d,
								v0, nv));
	return launch_status();
}

// Bits to hold values 0..x-1 (at least 1).
static int bits_for(int64_t x)
{
	int b = 1;
	while (b < 62 && ((int64_t)1 << b) < x)
		b++;
	return b;
}

// key = row << pos_bits | position, row = id - v0 (nv for an id outside the
// rows held here: sorted last and skipped): sorting the keys groups the rows
// and keeps each row's positions in token order.
__global__ void embedding_keys_kernel(uint64_t *keys, const int32_t *__restrict__ ids, int64_t n,
				      int64_t v0, int64_t nv, int pos_bits)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t r = (int64_t)ids[i] - v0;
		uint64_t row = r >= 0 && r < nv ? (uint64_t)r : (uint64_t)nv;
		keys[i] = (row << pos_bits) | (uint64_t)i;
	}
}

// One warp per (sorted slot p, strip of 32*V columns): a warp whose slot starts
// a run of equal rows adds the run's gradients, in order, to that table row.
template <int V, typename Tt, typename Tg>
__global__ void embedding_bwd_kernel(Tt *dtable, const Tg *__restrict__ dout,
				     const uint64_t *__restrict__ sorted, int64_t n, int64_t d,
				     int64_t nv, int pos_bits)
{
	int64_t p = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (p >= n)
		return;
	uint64_t id = sorted[p] >> pos_bits;
	if (id == (uint64_t)nv || (p > 0 && (sorted[p - 1] >> pos_bits) == id))
		return; // not held here, or not the start of its run
	int64_t j = ((int64_t)blockIdx.y * 32 + lane) * V;
	if (j >= d)
		return;
	uint64_t mask = ((uint64_t)1 << pos_bits) - 1;
	Tt *dst = dtable + (int64_t)id * d + j;
	float acc[V];
	load_vec<V>(dst, acc);
	for (int64_t q = p; q < n && (sorted[q] >> pos_bits) == id; q++) {
		float g[V];
		load_vec<V>(dout + (int64_t)(sorted[q] & mask) * d + j, g);
#pragma unroll
		for (int k = 0; k < V; k++)
			acc[k] += g[k];
	}
	store_vec<V>(dst, acc);
}

// Scratch: keys in, keys out (n each), then CUB's temporary storage.
static size_t keys_bytes(int64_t n)
{
	return ((size_t)n * sizeof(uint64_t) + 255) / 256 * 256;
}

extern "C" int embedding_bwd_scratch_bytes(int64_t n, int64_t nv, size_t *bytes)
{
	*bytes = 0;
	if (n <= 0)
		return 0;
	size_t temp = 0;
	int end_bit = bits_for(n) + bits_for(nv + 1);
	cudaError_t rc = cub::DeviceRadixSort::SortKeys(nullptr, temp, (const uint64_t *)nullptr,
						       (uint64_t *)nullptr, n, 0, end_bit);
	if (rc != cudaSuccess)
		return (int)rc;
	*bytes = 2 * keys_bytes(n) + temp;
	return 0;
}

extern "C" int launch_embedding_bwd(void *dtable, int ttab, const void *dout, int tdout,
				    const int32_t *ids, int64_t n, int64_t d, int64_t v0, int64_t nv,
				    void *scratch, size_t scratch_bytes, void *stream)
{
	if (n <= 0 || d <= 0)
		return 0;
	cudaStream_t s = (cudaStream_t)stream;
	int pos_bits = bits_for(n), end_bit = pos_bits + bits_for(nv + 1);
	if (end_bit > 64)
		return (int)cudaErrorInvalidValue;
	size_t need = 0;
	int rc = embedding_bwd_scratch_bytes(n, nv, &need);
	if (rc != 0)
		return rc;
	if (scratch_bytes < need)
		return (int)cudaErrorInvalidValue;
	uint64_t *keys = (uint64_t *)scratch;
	uint64_t *sorted = (uint64_t *)((char *)scratch + keys_bytes(n));
	void *temp = (char *)scratch + 2 * keys_bytes(n);
	size_t temp_bytes = scratch_bytes - 2 * keys_bytes(n);
	embedding_keys_kernel<<<grid_for(n, 256), 256, 0, s>>>(keys, ids, n, v0, nv, pos_bits);
	if ((rc = launch_status()) != 0)
		return rc;
	rc = (int)cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, sorted, n, 0, end_bit, s);
	if (rc != 0)
		return rc;
	bool v8 = vec_ok(d, dtable, dout);
	int vw = v8 ? 8 : 1;
	dim3 grid((unsigned)((n * 32 + 255) / 256), (unsigned)((d + 32 * vw - 1) / (32 * vw)));
	DISPATCH2(ttab, Tt, tdout, Tg, {
		auto kern = v8 ? embedding_bwd_kernel<8, Tt, Tg> : embedding_bwd_kernel<1, Tt, Tg>;
		kern<<<grid, 256, 0, s>>>((Tt *)dtable, (const Tg *)dout, sorted, n, d, nv, pos_bits);
	});
	return launch_status();
}
