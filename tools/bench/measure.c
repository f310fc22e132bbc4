/* Timing, the arithmetic ceilings, and what the machine is doing meanwhile. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "core/bf16.h"
#include "core/cpu_isa.h"
#include "float8/float8.h"
#include "gpu/gpu.h"
#include "peak.h"
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

/* Where the chains' results go, so the compiler keeps them. */
static volatile float sink;

/* The best FLOP/s on all threads of chains k[0] and k[1] (PEAK_NONE: skipped),
 * over bursts of a few milliseconds lasting at least min_s in all, the two
 * alternated so that both see the same load. */
static void measure_peaks(const peak_kind k[2], int threads, double min_s, double best[2])
{
	const int64_t iters = 200000; /* 20-100 MFLOP a thread */
	double start = bench_now();
	best[0] = best[1] = 0;
	for (int rep = 0; rep < 200 && (rep < 5 || bench_now() - start < min_s); rep++)
		for (int i = 0; i < 2; i++) {
			if (k[i] == PEAK_NONE)
				continue;
			float s = 0;
			double t0 = bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : s)
			s += peak_run(k[i], iters, (float)rep);
			double dt = bench_now() - t0;
			sink = s;
			double flops = peak_flops(k[i], iters) * threads / dt;
			if (flops > best[i])
				best[i] = flops;
		}
}

/* Both ceilings into r, keeping the better of what r has and this run. */
static void measure_ceilings(report *r, int threads)
{
	peak_kind f = peak_f32(NULL), b = peak_bf16();
	peak_kind k[2] = {f, b == f ? PEAK_NONE : b};
	double c[2];
	/* Not shorter than 0.3 s whatever --seconds says: on a shared machine the
	 * best of many short runs is what finds the unloaded rate. */
	measure_peaks(k, threads, 0.3, c);
	if (c[0] > r->ceiling)
		r->ceiling = c[0];
	if (b == f)
		r->ceiling_bf16 = r->ceiling;
	else if (c[1] > r->ceiling_bf16)
		r->ceiling_bf16 = c[1];
}

void bench_ceiling_begin(report *r, int threads)
{
	r->ceiling = r->ceiling_bf16 = 0;
	measure_ceilings(r, threads);
}

static json_t *ceiling_json(double flops, peak_kind k, const char *what)
{
	json_t *o = json_object();
	if (o != NULL) {
		rset(o, "tflops", json_real(flops / 1e12));
		rset(o, "isa", json_string(peak_isa(k)));
		rset(o, "what", json_string(what));
	}
	return o;
}

void bench_ceiling_end(report *r, int threads)
{
	int raised;
	peak_kind f = peak_f32(&raised), b = peak_bf16();
	const char *level = cpu_level_name(cpu_isa_level());
	char what[512];
	measure_ceilings(r, threads);
	int n = snprintf(what, sizeof what, "%s, in registers, all threads, best run before and after",
			 peak_what(f));
	if (raised && n > 0 && (size_t)n < sizeof what)
		snprintf(what + n, sizeof what - (size_t)n, "; OpenBLAS's %s kernel, not the %s level in "
			 "force, sets the width", openblas_get_corename(), level);
	rset(r->doc, "ceiling", ceiling_json(r->ceiling, f, what));
	if (b == PEAK_BF16_DOT) {
		snprintf(what, sizeof what, "%s, in registers, all threads, best run before and after",
			 peak_what(b));
		rset(r->doc, "ceiling_bf16", ceiling_json(r->ceiling_bf16, b, what));
	} else if (b != PEAK_NONE) {
		snprintf(what, sizeof what, "the float32 ceiling: at %s (below avx512_bf16) the bf16 "
			 "GEMMs multiply in float32", level);
		rset(r->doc, "ceiling_bf16", ceiling_json(r->ceiling_bf16, b, what));
	} else {
		report_unavailable(r, "bf16 ceiling", "at amx oneDNN's bf16 GEMMs run AMX tiles, whose "
				   "peak titan-bench does not measure (TITAN_CPU_ISA=avx512_bf16 "
				   "measures them against the dot products)");
	}
	size_t i;
	json_t *row;
	json_array_foreach(r->rows, i, row) {
		json_t *tf = json_object_get(row, "tflops");
		const char *dt = json_string_value(json_object_get(row, "dtype"));
		double c = dt != NULL && strcmp(dt, "bf16") == 0 ? r->ceiling_bf16 : r->ceiling;
		if (tf != NULL && c > 0)
			rset(row, "pct_ceiling", json_real(100.0 * json_real_value(tf) * 1e12 / c));
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
