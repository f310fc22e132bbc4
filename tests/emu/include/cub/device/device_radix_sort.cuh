// cub/device/device_radix_sort.cuh for the CUDA emulator: CUB's
// DeviceRadixSort::SortKeys as a stable host sort on the same bits, with the
// same protocol (a first call with no storage asks for its size; too little
// storage is an error).  A library call, not a titan kernel: it stands in so
// that the kernels around it run.
#ifndef TITAN_EMU_CUB_RADIX_SORT
#define TITAN_EMU_CUB_RADIX_SORT

#include <algorithm>
#include <cstring>
#include <vector>

namespace cub {
struct DeviceRadixSort {
	template <typename K, typename N>
	static cudaError_t SortKeys(void *temp, size_t &temp_bytes, const K *in, K *out, N n,
				    int begin_bit = 0, int end_bit = (int)sizeof(K) * 8,
				    cudaStream_t stream = 0)
	{
		(void)stream;
		size_t need = (size_t)n * sizeof(K) + 256; // what CUB asks, roughly: a copy
		if (!temp) {
			temp_bytes = need;
			return cudaSuccess;
		}
		if (temp_bytes < need || begin_bit < 0 || end_bit > (int)sizeof(K) * 8 ||
		    begin_bit > end_bit)
			return cudaErrorInvalidValue;
		K mask = end_bit - begin_bit >= (int)sizeof(K) * 8 ? ~(K)0
								    : (((K)1 << (end_bit - begin_bit)) - 1);
		std::vector<K> v(in, in + n);
		std::stable_sort(v.begin(), v.end(), [&](K a, K b) {
			return (a >> begin_bit & mask) < (b >> begin_bit & mask);
		});
		std::memcpy(out, v.data(), (size_t)n * sizeof(K));
		return cudaSuccess;
	}
};
} // namespace cub

#endif
