/* gpu.h: CUDA devices, seen from C.
 *
 * Built with CUDA (make finds nvcc; TITAN_CUDA is defined) these talk to the
 * CUDA runtime; built with CUDA=0 they report that there is no device, so a
 * caller needs no #ifdef: `if (gpu_count() == 0) use the CPU backend`.
 * Kernels live in kernels/ (.cu files); their C-callable launchers are declared in
 * lib/gpu/launch.h (private to lib/). */
#ifndef TITAN_GPU_H
#define TITAN_GPU_H

#include <stddef.h>

#include "core/err.h"

typedef struct gpu_info {
	char name[256];
	int major, minor;        /* compute capability, 9.0 for an H100 */
	int sm_count;
	size_t mem_bytes;
} gpu_info;

/* Whether this build has CUDA at all. */
int gpu_built_with_cuda(void);

/* Number of usable CUDA devices: 0 when there is none, no driver, or no CUDA
 * in this build (never an error).  The first call asks the runtime. */
int gpu_count(void);

/* Why gpu_count() is 0 ("built without CUDA (CUDA=0)", "no CUDA device (...)"),
 * or "" when there are devices. */
const char *gpu_why_none(void);

int gpu_device_info(int device, gpu_info *out, titan_err *err);

/* c[i] = a[i] + b[i] on the current device, for host arrays of n floats:
 * copies in, runs kernels/vecadd.cu, copies out.  The smallest end-to-end check
 * that the toolchain, the driver and the device agree. */
int gpu_vecadd(const float *a, const float *b, float *c, size_t n, titan_err *err);

#endif
