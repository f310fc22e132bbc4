/* gpu_test.h: what the GPU test programs share (static functions, included by
 * each tests/gpu/test_*.c).
 *
 * The method, applied to every kernel: random inputs from a fixed, printed
 * seed; inputs rounded to the element type the kernel reads (bf16 or float32),
 * so that the float64 reference of the CPU backend (cpu_kernels.h, the _f64
 * twins) sees exactly the kernel's inputs; outputs poisoned with NaN before the
 * kernel runs; the error of an output is max|got - want| / max|want| over the
 * tensor, and NaN anywhere fails. */
#ifndef TITAN_GPU_TEST_H
#define TITAN_GPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "core/bf16.h"
#include "gpu/gpu.h"
#include "gpu/launch.h"

/* Error bounds (max-abs-error relative to the tensor's largest element):
 * float32 arithmetic against float64 lands far under TOL_F32 even after sums of
 * a few thousand terms; a bf16 output is within half an ulp of 8 bits (2^-9) of
 * the float value, so TOL_BF16 = 2^-7 allows that rounding twice over plus the
 * float32 arithmetic before it.  Ops whose bf16 intermediates feed further
 * arithmetic (cuDNN's probabilities, a bf16 gradient fed to a product) get
 * TOL_BF16_CHAIN. */
#define TOL_F32 2e-5
#define TOL_BF16 (1.0 / 128)
#define TOL_BF16_CHAIN 2e-2

static inline void need_gpu(void)
{
	if (gpu_count() == 0) {
		print_message("# SKIP GPU test: %s\n", gpu_why_none());
		skip();
	}
}

/* Defined by the CUDA emulator (tests/emu/emu.cc), which runs every device
 * thread on one core (1; 2 in its TSan build): a case that launches millions
 * of threads, or needs gigabytes of float64 references, is left to a device
 * there, saying so. */
int titan_gpu_emulated(void) __attribute__((weak));

static inline int gpu_emulated(void)
{
	return titan_gpu_emulated ? titan_gpu_emulated() : 0;
}

static inline int device_only(const char *what)
{
	if (!gpu_emulated())
		return 0;
	print_message("  (left to a device under the emulator: %s)\n", what);
	return 1;
}

/* Under the emulator's TSan build (ten times the cost), which needs each
 * kernel's paths once, not every shape: the larger cases are left to its ASan
 * run, saying so. */
static inline int tsan_leaves(const char *what)
{
	if (gpu_emulated() < 2)
		return 0;
	print_message("  (left to the emulator's ASan run: %s)\n", what);
	return 1;
}

static uint64_t rng_state;

static inline void seed(uint64_t s)
{
	print_message("seed %llu\n", (unsigned long long)s);
	rng_state = s;
}

static inline double urand(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static inline double *rnd(size_t n, double scale)
{
	double *x = malloc((n ? n : 1) * sizeof(double));
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * urand();
	return x;
}

static inline double *zeros(size_t n)
{
	double *x = calloc(n ? n : 1, sizeof(double));
	assert_non_null(x);
	return x;
}

static inline const char *dt_name(int dt)
{
	return dt == GPU_BF16 ? "bf16" : "f32";
}

/* The value x takes when stored as dt. */
static inline double round_to(double x, int dt)
{
	float f = (float)x;
	return dt == GPU_BF16 ? (double)bf16_round(f) : (double)f;
}

static inline void round_all(double *x, size_t n, int dt)
{
	for (size_t i = 0; i < n; i++)
		x[i] = round_to(x[i], dt);
}

static inline void gpu_ok(int rc, const char *what)
{
	titan_err e;
	if (gpu_check(rc, what, &e) != 0)
		fail_msg("%s", e.msg);
}

static inline void *dev_alloc(size_t bytes)
{
	titan_err e;
	void *p = gpu_malloc(bytes, &e);
	if (!p)
		fail_msg("%s", e.msg);
	return p;
}

/* Device copy of x as dt; x is rounded in place to what the device holds. */
static inline void *dev_from(double *x, size_t n, int dt)
{
	round_all(x, n, dt);
	size_t es = gpu_dtype_size(dt);
	unsigned char *h = malloc((n ? n : 1) * es);
	assert_non_null(h);
	for (size_t i = 0; i < n; i++) {
		if (dt == GPU_BF16) {
			uint16_t b = bf16_from_f32((float)x[i]);
			memcpy(h + i * 2, &b, 2);
		} else {
			float f = (float)x[i];
			memcpy(h + i * 4, &f, 4);
		}
	}
	void *d = dev_alloc(n * es);
	titan_err e;
	if (gpu_upload(d, h, n * es, &e))
		fail_msg("%s", e.msg);
	free(h);
	return d;
}

/* n elements of dt, every byte 0xff: NaN as float32 and as bf16. */
static inline void *dev_poisoned(size_t n, int dt)
{
	void *d = dev_alloc(n * gpu_dtype_size(dt));
	titan_err e;
	if (gpu_memset(d, 0xff, n * gpu_dtype_size(dt), &e))
		fail_msg("%s", e.msg);
	return d;
}

/* The device tensor as doubles (after a device sync that reports kernel errors). */
static inline double *host_of(const void *d, size_t n, int dt)
{
	titan_err e;
	if (gpu_sync(&e))
		fail_msg("%s", e.msg);
	size_t es = gpu_dtype_size(dt);
	unsigned char *h = malloc((n ? n : 1) * es);
	double *x = malloc((n ? n : 1) * sizeof(double));
	assert_non_null(h);
	assert_non_null(x);
	if (gpu_download(h, d, n * es, &e))
		fail_msg("%s", e.msg);
	for (size_t i = 0; i < n; i++) {
		if (dt == GPU_BF16) {
			uint16_t b;
			memcpy(&b, h + i * 2, 2);
			x[i] = bf16_to_f32(b);
		} else {
			float f;
			memcpy(&f, h + i * 4, 4);
			x[i] = f;
		}
	}
	free(h);
	return x;
}

/* max|a - b| / max|b|; infinite when a has a NaN (an element never written). */
static inline double rel_err(const double *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isinf(a[i]))
			return INFINITY;
		num = fmax(num, fabs(a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return den > 0 ? num / den : num;
}

/* rel_err of float32 tensors. */
static inline double rel_err_f(const float *a, const float *b, int64_t n)
{
	double *da = malloc((size_t)n * sizeof *da), *db = malloc((size_t)n * sizeof *db);
	assert_true(da && db);
	for (int64_t i = 0; i < n; i++)
		da[i] = a[i], db[i] = b[i];
	double err = rel_err(da, db, (size_t)n);
	free(da), free(db);
	return err;
}

/* Compare the device tensor d (n of dt) with want; frees the download. */
static inline void expect_close(const char *what, const void *d, const double *want, size_t n, int dt,
			 double tol)
{
	double *got = host_of(d, n, dt);
	double err = rel_err(got, want, n);
	print_message("  %-44s %-4s rel err %.2e (bound %.1e)\n", what, dt_name(dt), err, tol);
	if (!(err <= tol))
		fail_msg("%s (%s): relative error %.3e over %.1e", what, dt_name(dt), err, tol);
	free(got);
}

static inline double *f64_copy(const double *x, size_t n)
{
	double *y = malloc((n ? n : 1) * sizeof(double));
	assert_non_null(y);
	memcpy(y, x, n * sizeof(double));
	return y;
}

#ifdef GPU_TEST_TWO_BACKENDS
/* The tests that compare the CUDA backend with the CPU one: both created by
 * the cmocka group's setup (the CUDA one with a 1 GiB arena and attention on
 * GPU_TEST_ATTENTION's path; nothing without a GPU), freed by its teardown. */
#ifndef GPU_TEST_ATTENTION
#define GPU_TEST_ATTENTION BACKEND_CUDA_ATTN_AUTO
#endif
static backend *cpu, *gpu;

static int setup(void **state)
{
	(void)state;
	if (gpu_count() == 0)
		return 0;
	titan_err e;
	backend_cuda_opts o = {.device = 0, .arena_bytes = (size_t)1 << 30,
			       .attention = GPU_TEST_ATTENTION};
	if (!(cpu = backend_cpu_create(0, &e)) || !(gpu = backend_cuda_create(&o, &e))) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	backend_free(cpu);
	backend_free(gpu);
	return 0;
}

static inline void sync_ok(backend *be)
{
	titan_err e;
	if (be->ops->sync(be, &e) != 0)
		fail_msg("%s: %s", be->ops->name, e.msg);
}
#endif

#endif
