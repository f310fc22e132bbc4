/* launch.h: the host launchers of kernels/ (.cu files), with C linkage.  Private to
 * lib/gpu (and later lib/ backends): programs use gpu.h.  Pointers are device
 * pointers; stream is a cudaStream_t (NULL: the default stream).  Each returns
 * the cudaError_t of the launch (0 = success). */
#ifndef TITAN_GPU_LAUNCH_H
#define TITAN_GPU_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* c[i] = a[i] + b[i] for i < n (n may exceed 2^31). */
int launch_vecadd(const float *a, const float *b, float *c, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
