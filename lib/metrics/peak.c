/* The peak FLOP/s that MFU is measured against on the CPU: the rate of the
 * backend's own matmul in the element type the model's linears compute in,
 * measured by a short probe (metrics.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bf16.h"
#include "metrics/metrics.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Square products of PROBE_N: large enough for oneDNN's and OpenBLAS's
 * blocked kernels to reach their rate, small enough for several runs in the
 * probe's PROBE_S.  The probe is paid by every start of titan-train (every
 * rank of it): the best of a few runs is as good as the best of fifty on a
 * quiet machine, and no better on a busy one.  On a 2-core AVX2 machine the
 * best of 512's runs came within the run-to-run noise of 1024's (0.7-1.4e11
 * FLOP/s both) in 25 ms instead of 75. */
#define PROBE_N 512
#define PROBE_S 0.02
#define PROBE_MIN_RUNS 3
#define PROBE_MAX_RUNS 12

/* The best of a few C = A B in type t on be, in FLOP/s; 0 when the backend
 * cannot run it (the fault is reported and cleared). */
static double probe(backend *be, be_dtype t)
{
	const int64_t n = PROBE_N;
	size_t es = be_dtype_size(t), bytes = (size_t)(n * n) * es;
	titan_err e;
	unsigned char *h = malloc(bytes);
	void *a = h ? be->ops->alloc(be, bytes, &e) : NULL;
	void *b = a ? be->ops->alloc(be, bytes, &e) : NULL;
	void *c = b ? be->ops->alloc(be, (size_t)(n * n) * sizeof(float), &e) : NULL;
	double best = 0;
	if (c) {
		for (size_t i = 0; i < (size_t)(n * n); i++) {
			float x = (float)((i * 2654435761u) % 1000) * 1e-3f;
			if (t == BE_BF16) {
				uint16_t v = bf16_from_f32(x);
				memcpy(h + 2 * i, &v, 2);
			} else {
				memcpy(h + 4 * i, &x, 4);
			}
		}
		be->ops->copy(be, a, h, bytes, BACKEND_H2D);
		be->ops->copy(be, b, h, bytes, BACKEND_H2D);
		double start = now_s(), fastest = 1e30;
		/* the first run warms caches, threads and the library's plans */
		for (int rep = 0; rep < PROBE_MAX_RUNS && (rep < PROBE_MIN_RUNS || now_s() - start < PROBE_S);
		     rep++) {
			double t0 = now_s();
			be->ops->matmul(be, 0, 0, n, n, n, 1, a, n, b, n, t, 0, c, n, BE_F32);
			if (be->ops->sync(be, &e) != 0)
				break;
			double dt = now_s() - t0;
			if (rep > 0 && dt < fastest)
				fastest = dt;
		}
		best = fastest < 1e30 ? 2.0 * (double)n * n * n / fastest : 0;
	}
	be->ops->free(be, a);
	be->ops->free(be, b);
	be->ops->free(be, c);
	free(h);
	backend_take_fault(be, NULL);
	return best;
}

double metrics_matmul_peak_flops(backend *be, be_dtype t)
{
	static double cached[2]; /* float32, bfloat16: one backend per process */
	int k = t == BE_BF16;
	if (cached[k] > 0)
		return cached[k];
	const char *env = getenv(k ? "TITAN_CPU_PEAK_FLOPS_BF16" : "TITAN_CPU_PEAK_FLOPS");
	if (env != NULL && atof(env) > 0)
		return cached[k] = atof(env);
	double r = probe(be, k ? BE_BF16 : BE_F32);
	return cached[k] = r > 0 ? r : 1e9;
}
