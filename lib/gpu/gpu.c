#include "gpu/gpu.h"

#include <stdio.h>
#include <string.h>

#ifdef TITAN_CUDA
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "gpu/launch.h"

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int n_devices;
static char why[256];

/* No driver, no device, or a driver older than the runtime all mean "use the
 * CPU": the count is 0 and the reason is kept for messages. */
static void probe(void)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess || n <= 0) {
		snprintf(why, sizeof why, "no CUDA device (cudaGetDeviceCount: %s)",
			 rc != cudaSuccess ? cudaGetErrorString(rc) : "none listed");
		cudaGetLastError(); /* clear the sticky error */
		n_devices = 0;
		return;
	}
	n_devices = n;
	why[0] = '\0';
}

int gpu_built_with_cuda(void)
{
	return 1;
}

int gpu_count(void)
{
	pthread_once(&probe_once, probe);
	return n_devices;
}

const char *gpu_why_none(void)
{
	pthread_once(&probe_once, probe);
	return why;
}

static int cuda_fail(titan_err *err, const char *what, cudaError_t rc)
{
	return err_set(err, "CUDA: %s: %s", what, cudaGetErrorString(rc));
}

int gpu_device_info(int device, gpu_info *out, titan_err *err)
{
	if (device < 0 || device >= gpu_count())
		return err_set(err, "CUDA: no device %d (%d present)", device, gpu_count());
	struct cudaDeviceProp p;
	cudaError_t rc = cudaGetDeviceProperties(&p, device);
	if (rc != cudaSuccess)
		return cuda_fail(err, "cudaGetDeviceProperties", rc);
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%s", p.name);
	out->major = p.major;
	out->minor = p.minor;
	out->sm_count = p.multiProcessorCount;
	out->mem_bytes = p.totalGlobalMem;
	return 0;
}

int gpu_vecadd(const float *a, const float *b, float *c, size_t n, titan_err *err)
{
	if (gpu_count() == 0)
		return err_set(err, "%s", gpu_why_none());
	if (n == 0)
		return 0;
	float *d = NULL; /* (3, n): a, b, c */
	size_t bytes = n * sizeof(float);
	cudaError_t rc = cudaMalloc((void **)&d, 3 * bytes);
	if (rc != cudaSuccess)
		return cuda_fail(err, "cudaMalloc", rc);
	const char *what = "cudaMemcpy to device";
	if ((rc = cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice)) == cudaSuccess &&
	    (rc = cudaMemcpy(d + n, b, bytes, cudaMemcpyHostToDevice)) == cudaSuccess) {
		what = "vecadd launch";
		rc = (cudaError_t)launch_vecadd(d, d + n, d + 2 * n, n, NULL);
		if (rc == cudaSuccess) {
			what = "cudaMemcpy to host (vecadd)";
			rc = cudaMemcpy(c, d + 2 * n, bytes, cudaMemcpyDeviceToHost);
		}
	}
	cudaFree(d);
	return rc == cudaSuccess ? 0 : cuda_fail(err, what, rc);
}

#else /* built without CUDA */

int gpu_built_with_cuda(void)
{
	return 0;
}

int gpu_count(void)
{
	return 0;
}

const char *gpu_why_none(void)
{
	return "built without CUDA (CUDA=0)";
}

int gpu_device_info(int device, gpu_info *out, titan_err *err)
{
	(void)out;
	return err_set(err, "no device %d: %s", device, gpu_why_none());
}

int gpu_vecadd(const float *a, const float *b, float *c, size_t n, titan_err *err)
{
	(void)a, (void)b, (void)c, (void)n;
	return err_set(err, "%s", gpu_why_none());
}

#endif
