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

/* The launchers' and libraries' status codes (a cudaError_t) as a message:
 * 0 when rc is 0, else -1 with "CUDA: what: <the runtime's text>". */
int gpu_check(int rc, const char *what, titan_err *e);

/* Plain device memory and copies, for tests, benchmarks and setup: a training
 * step takes its memory from an arena (arena.h) instead.  gpu_upload,
 * gpu_download and gpu_memset are device-wide synchronous: they start after
 * the work queued on every stream (the backend's, NCCL's) and have landed
 * when they return, so a kernel on any stream sees them.  Not inside a CUDA
 * graph capture; a stream's own copies are gpu_copy_async below. */
void *gpu_malloc(size_t bytes, titan_err *e);
void gpu_free(void *p);
int gpu_upload(void *dst, const void *src, size_t bytes, titan_err *e);
int gpu_download(void *dst, const void *src, size_t bytes, titan_err *e);
int gpu_memset(void *dst, int byte, size_t bytes, titan_err *e);
/* Wait for the device; reports any error a kernel raised since the last check. */
int gpu_sync(titan_err *e);
/* Free and total memory of the current device. */
int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, titan_err *e);

/* Make device the current one for this thread. */
int gpu_set_device(int device, titan_err *e);

/* Queued on stream, in order with its kernels: a copy in any direction
 * (pointers say which: host or device) and a fill. */
int gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream, titan_err *e);
int gpu_memset_async(void *dst, int byte, size_t bytes, void *stream, titan_err *e);

/* Streams (a cudaStream_t as void *): work on one stream runs in order;
 * gpu_stream_sync waits for it and reports its errors. */
void *gpu_stream_create(titan_err *e);
void gpu_stream_free(void *stream);
int gpu_stream_sync(void *stream, titan_err *e);

/* Device time between two points of a stream, in milliseconds (events). */
typedef struct gpu_timer gpu_timer;
gpu_timer *gpu_timer_create(titan_err *e);
void gpu_timer_free(gpu_timer *t);
int gpu_timer_start(gpu_timer *t, void *stream, titan_err *e);
int gpu_timer_stop(gpu_timer *t, void *stream, titan_err *e);
/* Waits for the stop event; the milliseconds between start and stop. */
int gpu_timer_ms(gpu_timer *t, float *ms, titan_err *e);

/* CUDA graphs: everything launched on stream between gpu_graph_begin and
 * gpu_graph_end is recorded, not run (nothing in it may allocate, copy to the
 * host or synchronise); gpu_graph_launch replays it.  The step of a model with
 * static shapes is captured once and replayed every step (compile.enable). */
typedef struct gpu_graph gpu_graph;
int gpu_graph_begin(void *stream, titan_err *e);
gpu_graph *gpu_graph_end(void *stream, titan_err *e);
int gpu_graph_launch(gpu_graph *g, void *stream, titan_err *e);
void gpu_graph_free(gpu_graph *g);

/* c[i] = a[i] + b[i] on the current device, for host arrays of n floats:
 * copies in, runs kernels/vecadd.cu, copies out.  The smallest end-to-end check
 * that the toolchain, the driver and the device agree. */
int gpu_vecadd(const float *a, const float *b, float *c, size_t n, titan_err *err);

#endif
