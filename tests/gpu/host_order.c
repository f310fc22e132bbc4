/* host_order.c: lib/gpu/gpu.c's plain copies against the fake CUDA runtime
 * (fake_cuda.h), on the host: an upload or a fill has landed when it returns,
 * so that a kernel launched next on a non-blocking stream (the backend's,
 * NCCL's) reads it, and a download waits for what such a stream still has in
 * flight.  Prints TAP lines; tests/gpu/host_order.sh builds and runs it. */
#include <stdio.h>
#include <string.h>

#include "fake_cuda.h"
#include "gpu/gpu.h"

static int n, failed;

static void ok(int cond, const char *name)
{
	n++;
	if (cond) {
		printf("ok %d %s\n", n, name);
	} else {
		failed = 1;
		printf("not ok %d %s: %s\n", n, name,
		       fake_breaches() ? fake_last_breach() : "work left in flight on the legacy stream");
	}
}

int main(void)
{
	titan_err e;
	void *stream = gpu_stream_create(&e);
	float host[64], back[64];
	for (int i = 0; i < 64; i++)
		host[i] = (float)i;
	float *d = gpu_malloc(sizeof host, &e);
	if (stream == NULL || d == NULL) {
		printf("not ok 1 setup: %s\n", e.msg);
		return 1;
	}

	int rc = gpu_upload(d, host, sizeof host, &e);
	ok(rc == 0 && !fake_legacy_pending() && fake_breaches() == 0,
	   "an upload has landed for a kernel on a non-blocking stream");

	int before = fake_breaches();
	rc = gpu_memset(d, 0, sizeof host, &e);
	ok(rc == 0 && !fake_legacy_pending() && fake_breaches() == before,
	   "a fill has landed for a kernel on a non-blocking stream");

	/* a kernel of the backend's stream, still running */
	before = fake_breaches();
	rc = gpu_memset_async(d, 0, sizeof host, stream, &e) == 0 &&
	     gpu_download(back, d, sizeof back, &e) == 0;
	ok(rc && fake_breaches() == before, "a download waits for a non-blocking stream's work");

	before = fake_breaches();
	rc = gpu_memset_async(d, 0, sizeof host, stream, &e) == 0 &&
	     gpu_upload(d, host, sizeof host, &e) == 0;
	ok(rc && fake_breaches() == before,
	   "an upload waits for a non-blocking stream's work on the same memory");

	gpu_free(d);
	gpu_stream_free(stream);
	printf("1..%d\n", n);
	return failed;
}
