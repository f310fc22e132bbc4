#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
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

int gpu_check(int rc, const char *what, titan_err *e)
{
	return rc == 0 ? 0 : cuda_fail(e, what, (cudaError_t)rc);
}

void *gpu_malloc(size_t bytes, titan_err *e)
{
	void *p = NULL;
	cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		cuda_fail(e, "cudaMalloc", rc);
		return NULL;
	}
	return p;
}

void gpu_free(void *p)
{
	if (p)
		cudaFree(p);
}

/* cudaMemcpy and cudaMemset run on the legacy default stream, which does not
 * wait for, nor is waited for by, the non-blocking streams of the backend and
 * of NCCL: a kernel launched there right after cudaMemset (asynchronous) or a
 * pageable cudaMemcpy (which may return before its DMA lands) can read the
 * old bytes, and a download can read before that stream's kernels wrote.  So
 * these wait for the whole device before and after: ordered with every
 * stream, at the cost that keeps them out of a step's hot path. */
static int device_wide(cudaError_t rc, const char *what, titan_err *e)
{
	if (rc == cudaSuccess)
		rc = cudaDeviceSynchronize();
	return gpu_check(rc, what, e);
}

int gpu_upload(void *dst, const void *src, size_t bytes, titan_err *e)
{
	if (gpu_check(cudaDeviceSynchronize(), "before a copy to the device", e) != 0)
		return -1;
	return device_wide(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device",
			   e);
}

int gpu_download(void *dst, const void *src, size_t bytes, titan_err *e)
{
	if (gpu_check(cudaDeviceSynchronize(), "before a copy to the host", e) != 0)
		return -1;
	return device_wide(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host",
			   e);
}

int gpu_memset(void *dst, int byte, size_t bytes, titan_err *e)
{
	if (gpu_check(cudaDeviceSynchronize(), "before cudaMemset", e) != 0)
		return -1;
	return device_wide(cudaMemset(dst, byte, bytes), "cudaMemset", e);
}

int gpu_sync(titan_err *e)
{
	int rc = cudaDeviceSynchronize();
	if (rc == 0)
		rc = cudaGetLastError();
	return gpu_check(rc, "device", e);
}

int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, titan_err *e)
{
	return gpu_check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", e);
}

int gpu_set_device(int device, titan_err *e)
{
	if (device < 0 || device >= gpu_count())
		return err_set(e, "CUDA: no device %d (%d present)", device, gpu_count());
	return gpu_check(cudaSetDevice(device), "cudaSetDevice", e);
}

int gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream, titan_err *e)
{
	if (bytes == 0)
		return 0;
	return gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream),
			 "cudaMemcpyAsync", e);
}

int gpu_memset_async(void *dst, int byte, size_t bytes, void *stream, titan_err *e)
{
	if (bytes == 0)
		return 0;
	return gpu_check(cudaMemsetAsync(dst, byte, bytes, (cudaStream_t)stream), "cudaMemsetAsync", e);
}

void *gpu_stream_create(titan_err *e)
{
	cudaStream_t s = NULL;
	if (gpu_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", e))
		return NULL;
	return s;
}

void gpu_stream_free(void *stream)
{
	if (stream)
		cudaStreamDestroy((cudaStream_t)stream);
}

int gpu_stream_sync(void *stream, titan_err *e)
{
	int rc = cudaStreamSynchronize((cudaStream_t)stream);
	if (rc == 0)
		rc = cudaGetLastError();
	return gpu_check(rc, "stream", e);
}

struct gpu_timer {
	cudaEvent_t start, stop;
};

gpu_timer *gpu_timer_create(titan_err *e)
{
	gpu_timer *t = calloc(1, sizeof *t);
	if (!t) {
		err_set(e, "gpu timer: out of memory");
		return NULL;
	}
	if (gpu_check(cudaEventCreate(&t->start), "cudaEventCreate", e)) {
		free(t);
		return NULL;
	}
	if (gpu_check(cudaEventCreate(&t->stop), "cudaEventCreate", e)) {
		cudaEventDestroy(t->start);
		free(t);
		return NULL;
	}
	return t;
}

void gpu_timer_free(gpu_timer *t)
{
	if (!t)
		return;
	cudaEventDestroy(t->start);
	cudaEventDestroy(t->stop);
	free(t);
}

int gpu_timer_start(gpu_timer *t, void *stream, titan_err *e)
{
	return gpu_check(cudaEventRecord(t->start, (cudaStream_t)stream), "cudaEventRecord", e);
}

int gpu_timer_stop(gpu_timer *t, void *stream, titan_err *e)
{
	return gpu_check(cudaEventRecord(t->stop, (cudaStream_t)stream), "cudaEventRecord", e);
}

int gpu_timer_ms(gpu_timer *t, float *ms, titan_err *e)
{
	if (gpu_check(cudaEventSynchronize(t->stop), "cudaEventSynchronize", e))
		return -1;
	return gpu_check(cudaEventElapsedTime(ms, t->start, t->stop), "cudaEventElapsedTime", e);
}

struct gpu_graph {
	cudaGraph_t graph;
	cudaGraphExec_t exec;
};

int gpu_graph_begin(void *stream, titan_err *e)
{
	return gpu_check(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal),
			 "cudaStreamBeginCapture", e);
}

gpu_graph *gpu_graph_end(void *stream, titan_err *e)
{
	gpu_graph *g = calloc(1, sizeof *g);
	cudaGraph_t graph = NULL;
	int rc = cudaStreamEndCapture((cudaStream_t)stream, &graph);
	if (rc != 0 || !g) {
		if (graph)
			cudaGraphDestroy(graph);
		free(g);
		cudaGetLastError();
		if (rc == 0)
			err_set(e, "CUDA graph: out of memory");
		else /* typically a call that may not be captured (sync, malloc, host copy) */
			gpu_check(rc, "cudaStreamEndCapture", e);
		return NULL;
	}
	g->graph = graph;
	if (gpu_check(cudaGraphInstantiate(&g->exec, graph, 0), "cudaGraphInstantiate", e)) {
		cudaGraphDestroy(graph);
		free(g);
		return NULL;
	}
	return g;
}

int gpu_graph_launch(gpu_graph *g, void *stream, titan_err *e)
{
	return gpu_check(cudaGraphLaunch(g->exec, (cudaStream_t)stream), "cudaGraphLaunch", e);
}

void gpu_graph_free(gpu_graph *g)
{
	if (!g)
		return;
	cudaGraphExecDestroy(g->exec);
	cudaGraphDestroy(g->graph);
	free(g);
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

int gpu_check(int rc, const char *what, titan_err *e)
{
	return rc == 0 ? 0 : err_set(e, "%s: %s", what, gpu_why_none());
}

void *gpu_malloc(size_t bytes, titan_err *e)
{
	(void)bytes;
	err_set(e, "%s", gpu_why_none());
	return NULL;
}

void gpu_free(void *p)
{
	(void)p;
}

int gpu_upload(void *dst, const void *src, size_t bytes, titan_err *e)
{
	(void)dst, (void)src, (void)bytes;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_download(void *dst, const void *src, size_t bytes, titan_err *e)
{
	(void)dst, (void)src, (void)bytes;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_memset(void *dst, int byte, size_t bytes, titan_err *e)
{
	(void)dst, (void)byte, (void)bytes;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_sync(titan_err *e)
{
	return err_set(e, "%s", gpu_why_none());
}

int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, titan_err *e)
{
	*free_bytes = *total_bytes = 0;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_set_device(int device, titan_err *e)
{
	return err_set(e, "no device %d: %s", device, gpu_why_none());
}

int gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream, titan_err *e)
{
	(void)dst, (void)src, (void)bytes, (void)stream;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_memset_async(void *dst, int byte, size_t bytes, void *stream, titan_err *e)
{
	(void)dst, (void)byte, (void)bytes, (void)stream;
	return err_set(e, "%s", gpu_why_none());
}

void *gpu_stream_create(titan_err *e)
{
	err_set(e, "%s", gpu_why_none());
	return NULL;
}

void gpu_stream_free(void *stream)
{
	(void)stream;
}

int gpu_stream_sync(void *stream, titan_err *e)
{
	(void)stream;
	return err_set(e, "%s", gpu_why_none());
}

gpu_timer *gpu_timer_create(titan_err *e)
{
	err_set(e, "%s", gpu_why_none());
	return NULL;
}

void gpu_timer_free(gpu_timer *t)
{
	(void)t;
}

int gpu_timer_start(gpu_timer *t, void *stream, titan_err *e)
{
	(void)t, (void)stream;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_timer_stop(gpu_timer *t, void *stream, titan_err *e)
{
	(void)t, (void)stream;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_timer_ms(gpu_timer *t, float *ms, titan_err *e)
{
	(void)t;
	*ms = 0;
	return err_set(e, "%s", gpu_why_none());
}

int gpu_graph_begin(void *stream, titan_err *e)
{
	(void)stream;
	return err_set(e, "%s", gpu_why_none());
}

gpu_graph *gpu_graph_end(void *stream, titan_err *e)
{
	(void)stream;
	err_set(e, "%s", gpu_why_none());
	return NULL;
}

int gpu_graph_launch(gpu_graph *g, void *stream, titan_err *e)
{
	(void)g, (void)stream;
	return err_set(e, "%s", gpu_why_none());
}

void gpu_graph_free(gpu_graph *g)
{
	(void)g;
}

#endif
