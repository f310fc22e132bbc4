/* The chunk table of the multi-tensor kernels (launch.h): plain C, built once on
 * the host when the optimizer's tensors are known. */
#include <stdint.h>

#include "gpu/launch.h"

int64_t gpu_mt_chunks(const gpu_mt_tensor *t, int nt, gpu_mt_chunk *out)
{
	int64_t k = 0;
	for (int i = 0; i < nt; i++) {
		if (t[i].n < 0)
			return -1;
		for (int64_t off = 0; off < t[i].n; off += GPU_MT_CHUNK) {
			if (out) {
				int64_t len = t[i].n - off < GPU_MT_CHUNK ? t[i].n - off : GPU_MT_CHUNK;
				out[k] = (gpu_mt_chunk){.tensor = i, .len = (int32_t)len, .offset = off};
			}
			k++;
		}
	}
	return k;
}
