/* Timing, the arithmetic ceiling, and what the machine is doing meanwhile. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "core/bf16.h"
#include "float8/float8.h"
#include "gpu/gpu.h"
#include "prof/prof.h"

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double bench_time(void (*fn)(void *), void *ctx, double min_s, backend *be, titan_err *e)
{
	enum { MAX_RUNS = 1000 };
	double t[MAX_RUNS], total = 0;
	int n = 0;
	fn(ctx); /* warm-up: caches, thread pools, the backend's first touch */
	if (be != NULL && be->ops->sync(be, e))
		return -1;
	while (n < MAX_RUNS && (n < 3 || total < min_s)) {
		double t0 = bench_now();
		fn(ctx);
		if (be != NULL && be->ops->sync(be, e))
			return -1;
		t[n] = bench_now() - t0;
		total += t[n++];
	}
	qsort(t, (size_t)n, sizeof t[0], cmp_double);
	return t[n / 2];
}

/* Independent multiply-add chains, enough of them (12 vectors of 16 lanes) to
 * cover the FMA latency times the FMA ports of any x86 core, in registers.
 * One copy per instruction set: AVX-512, AVX2 + FMA, and the portable one. */
typedef float v16 __attribute__((vector_size(64)));
#define NACC 12
#if defined(__x86_64__) && !defined(__clang__)
#define ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ISA_CLONES
#endif

__attribute__((optimize("fp-contract=fast"), noinline)) ISA_CLONES
static float fma_chains(int64_t iters, float seed)
{
	v16 acc[NACC], m = {0}, a = {0};
	m += 0.999f;
	a += 1e-3f;
	for (int j = 0; j < NACC; j++)
		acc[j] = (v16){0} + (seed + (float)j);
	for (int64_t i = 0; i < iters; i++) {
#pragma GCC unroll 16
		for (int j = 0; j < NACC; j++)
			acc[j] = acc[j] * m + a;
	}
	float s = 0;
	for (int j = 0; j < NACC; j++)
		for (int l = 0; l < 16; l++)
			s += acc[j][l];
	return s;
}

/* Where the chains' result goes, so the compiler keeps them. */
static volatile float sink;

double bench_cpu_ceiling(int threads, double min_s)
{
	const int64_t iters = 200000; /* ~80 MFLOP per thread, a few ms */
	double best = 0, start = bench_now();
	for (int rep = 0; rep < 200 && (rep < 5 || bench_now() - start < min_s); rep++) {
		float s = 0;
		double t0 = bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : s)
		s += fma_chains(iters, (float)rep);
		double dt = bench_now() - t0;
		sink = s;
		double flops = 2.0 * 16 * NACC * (double)iters * threads / dt;
		if (flops > best)
			best = flops;
	}
	return best;
}

void bench_ceiling_begin(report *r, int threads)
{
	/* Not shorter than 0.3 s whatever --seconds says: on a shared machine the
	 * best of many short runs is what finds the unloaded rate. */
	r->ceiling = bench_cpu_ceiling(threads, 0.3);
}

void bench_ceiling_end(report *r, int threads)
{
	double c = bench_cpu_ceiling(threads, 0.3);
	if (c > r->ceiling)
		r->ceiling = c;
	json_t *o = json_object();
	if (o != NULL) {
		rset(o, "tflops", json_real(r->ceiling / 1e12));
		rset(o, "what", json_string("float32 FMA chains in registers, all threads, best run "
					    "before and after"));
		rset(r->doc, "ceiling", o);
	}
	size_t i;
	json_t *row;
	json_array_foreach(r->rows, i, row) {
		json_t *tf = json_object_get(row, "tflops");
		if (tf != NULL)
			rset(row, "pct_ceiling", json_real(100.0 * json_real_value(tf) * 1e12 / r->ceiling));
	}
}

void *bench_operand(backend *be, be_dtype t, size_t n, float amp, uint64_t seed, float *scale,
		     titan_err *e)
{
	size_t sz = be_dtype_size(t);
	float *h = malloc(n * sizeof(float));
	void *conv = malloc(n * sz);
	void *d = be->ops->alloc(be, n * sz, e);
	if (h == NULL || conv == NULL || d == NULL) {
		if (h == NULL || conv == NULL)
			err_set(e, "out of memory for a %zu-element operand", n);
		free(h);
		free(conv);
		if (d)
			be->ops->free(be, d);
		return NULL;
	}
	PROF_MEM_ALLOC(d, n * sz, "bench operand");
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		h[i] = amp * ((float)(seed >> 40) / 8388608.0f - 1.0f);
	}
	*scale = 1.0f;
	if (t == BE_F32) {
		memcpy(conv, h, n * sz);
	} else if (t == BE_BF16) {
		for (size_t i = 0; i < n; i++)
			((uint16_t *)conv)[i] = bf16_from_f32(h[i]);
	} else {
		f8_format f = t == BE_E4M3 ? F8_E4M3FN : F8_E5M2;
		f8_scales(scale, h, 1, (int64_t)n, F8_TENSOR, f, false);
		f8_quantize(conv, h, scale, 1, (int64_t)n, F8_TENSOR, f);
	}
	be->ops->copy(be, d, conv, n * sz, BACKEND_H2D);
	free(h);
	free(conv);
	return d;
}

float *bench_fill_floats(backend *be, float v, size_t n, titan_err *e)
{
	float *h = malloc(n * sizeof *h);
	float *d = h ? be->ops->alloc(be, n * sizeof *d, e) : NULL;
	if (h == NULL)
		err_set(e, "out of memory for %zu scales", n);
	if (d != NULL) {
		PROF_MEM_ALLOC(d, n * sizeof *d, "bench scales");
		for (size_t i = 0; i < n; i++)
			h[i] = v;
		be->ops->copy(be, d, h, n * sizeof *d, BACKEND_H2D);
	}
	free(h);
	return d;
}

void bench_release(backend *be, void *p, size_t bytes)
{
	if (p != NULL) {
		PROF_MEM_FREE(p, bytes);
		be->ops->free(be, p);
	}
}

int bench_listed(const char *list, const char *name)
{
	size_t l = strlen(name);
	for (const char *p = list; (p = strstr(p, name)) != NULL; p += l)
		if ((p == list || p[-1] == ',') && (p[l] == '\0' || p[l] == ','))
			return 1;
	return 0;
}

int bench_check_list(const char *list, const char *valid, titan_err *e)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", list);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
		if (!bench_listed(valid, tok))
			return err_set(e, "--dtype: unknown '%s' (expected %s)", tok, valid);
	return 0;
}

const char *bench_cuda_unavailable(void)
{
	if (gpu_count() == 0)
		return gpu_why_none();
	return "this build has no CUDA backend yet (the CUDA backend issue brings it)";
}

void bench_loadavg(char *buf, size_t n)
{
	double l[3];
	if (getloadavg(l, 3) == 3)
		snprintf(buf, n, "%.2f %.2f %.2f", l[0], l[1], l[2]);
	else
		snprintf(buf, n, "unknown");
}
