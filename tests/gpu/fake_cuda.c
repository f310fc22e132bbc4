/* fake_cuda.c: the host-only CUDA runtime of fake_cuda.h.  Only what gpu.c's
 * and nccl.c's tested paths call is here; the test programs link with
 * --gc-sections so that the functions they never reach need no fake. */
#include "fake_cuda.h"

#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The runtime's types are opaque to its users: these are the fake's. */
struct CUstream_st {
	int pending;
};
struct CUevent_st {
	int queries_left; /* cudaEventQuery answers NotReady this many times */
};

static int legacy_pending, nonblocking_pending, breaches;
static char last_breach[512];

int fake_legacy_pending(void)
{
	return legacy_pending;
}

int fake_stream_pending(void)
{
	return nonblocking_pending;
}

int fake_breaches(void)
{
	return breaches;
}

const char *fake_last_breach(void)
{
	return last_breach;
}

void fake_breach(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_breach, sizeof last_breach, fmt, ap);
	va_end(ap);
	breaches++;
	fprintf(stderr, "fake CUDA: %s\n", last_breach);
}

void fake_check_written(const void *p, size_t bytes, const char *who)
{
	const unsigned char *b = p;
	for (size_t i = 0; i + 4 <= bytes; i += 4)
		if (b[i] == FAKE_POISON && b[i + 1] == FAKE_POISON && b[i + 2] == FAKE_POISON &&
		    b[i + 3] == FAKE_POISON) {
			fake_breach("%s reads device memory nobody wrote (byte %zu)", who, i);
			return;
		}
}

static void pend(cudaStream_t s)
{
	if (s == NULL || s == cudaStreamLegacy) {
		legacy_pending = 1;
	} else {
		s->pending = 1;
		nonblocking_pending = 1;
	}
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	return error == cudaSuccess ? "no error" : "fake CUDA error";
}

/* Weak: the CUDA emulator (tests/emu/emu.cc), which launches kernels, has the
 * real one. */
__attribute__((weak)) cudaError_t CUDARTAPI cudaGetLastError(void)
{
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	(void)device;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void **p, size_t size)
{
	*p = malloc(size);
	if (*p == NULL)
		return cudaErrorMemoryAllocation;
	memset(*p, FAKE_POISON, size);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	legacy_pending = nonblocking_pending = 0;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	if (!(flags & cudaStreamNonBlocking))
		fake_breach("a blocking stream: the fake models non-blocking ones");
	*s = calloc(1, sizeof **s);
	return *s != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t s)
{
	if (s == NULL || s == cudaStreamLegacy)
		legacy_pending = 0;
	else
		s->pending = nonblocking_pending = 0; /* (one non-blocking stream per test) */
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t s)
{
	(void)s;
	return cudaSuccess;
}

/* H2D from pageable memory may return before the DMA lands; D2H reads now. */
cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	if (nonblocking_pending)
		fake_breach("cudaMemcpy on the legacy stream while a non-blocking stream has work in "
			    "flight (it does not wait for it)");
	memcpy(dst, src, count);
	if (kind == cudaMemcpyHostToDevice)
		legacy_pending = 1;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void *p, int value, size_t count)
{
	if (nonblocking_pending)
		fake_breach("cudaMemset on the legacy stream while a non-blocking stream has work in "
			    "flight (it does not wait for it)");
	memset(p, value, count);
	legacy_pending = 1;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind, cudaStream_t s)
{
	(void)kind;
	memcpy(dst, src, count);
	pend(s);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t s)
{
	memset(p, value, count);
	pend(s);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags)
{
	(void)flags;
	*ev = calloc(1, sizeof **ev);
	return *ev != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t ev)
{
	free(ev);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	(void)s;
	ev->queries_left = 1;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t ev)
{
	if (ev->queries_left > 0) {
		ev->queries_left--;
		return cudaErrorNotReady;
	}
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags)
{
	(void)s, (void)ev, (void)flags;
	return cudaSuccess;
}
