/* row_group.h: which group a row belongs to when rows are sorted by group and
 * offs (groups + 1, ascending) holds each group's first row (backend.h's
 * grouped biases and the experts' rows).  Plain C, compiled for the host and
 * the device: the CPU kernels and the CUDA ones share it. */
#ifndef TITAN_BACKEND_ROW_GROUP_H
#define TITAN_BACKEND_ROW_GROUP_H

#include <stdint.h>

#ifdef __CUDACC__
#define ROW_GROUP_FN static __host__ __device__ __forceinline__
#else
#define ROW_GROUP_FN static inline
#endif

/* The last g with offs[g] <= r (r at or after offs[0]): a binary search. */
ROW_GROUP_FN int64_t row_group(const int32_t *offs, int64_t groups, int64_t r)
{
	int64_t lo = 0, hi = groups - 1;
	while (lo < hi) {
		int64_t mid = (lo + hi + 1) / 2;
		if (offs[mid] <= r)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

#endif
