/* Unit tests of lib/gpu and kernels/: they run where a CUDA device is present
 * and are counted as skipped (saying why) everywhere else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

static void need_gpu(void)
{
	if (gpu_count() == 0) {
		print_message("# SKIP GPU test: %s\n", gpu_why_none());
		skip();
	}
}

static void no_device_is_reported_with_a_reason_not_an_error(void **state)
{
	(void)state;
	int n = gpu_count();
	assert_true(n >= 0);
	if (n == 0) {
		assert_true(strlen(gpu_why_none()) > 0);
		titan_err err = {{0}};
		float x = 1;
		assert_int_equal(gpu_vecadd(&x, &x, &x, 1, &err), -1);
		assert_string_equal(err.msg, gpu_why_none());
		gpu_info info;
		assert_int_equal(gpu_device_info(0, &info, &err), -1);
	} else {
		assert_string_equal(gpu_why_none(), "");
	}
	if (!gpu_built_with_cuda())
		assert_int_equal(n, 0);
}

static void device_info_names_a_real_device(void **state)
{
	(void)state;
	need_gpu();
	gpu_info info;
	titan_err err;
	assert_int_equal(gpu_device_info(0, &info, &err), 0);
	print_message("device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", info.name, info.major,
		      info.minor, info.sm_count, (double)info.mem_bytes / (1 << 30));
	assert_true(info.major >= 1);
	assert_true(info.sm_count >= 1);
	assert_true(info.mem_bytes > 0);
	assert_int_equal(gpu_device_info(gpu_count(), &info, &err), -1);
}

/* The kernel against the CPU: float addition is exact in IEEE 754, so the
 * results must be bit-identical, including past a grid's worth of blocks. */
static void vecadd_matches_the_cpu_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	const unsigned seed = 1234u;
	const size_t sizes[] = {1, 255, 256, 257, 1000003, (size_t)65535 * 256 + 17};
	print_message("seed %u\n", seed);
	srand(seed);
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		size_t n = sizes[k];
		float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
		float *c = malloc(n * sizeof *c);
		assert_non_null(a);
		assert_non_null(b);
		assert_non_null(c);
		for (size_t i = 0; i < n; i++) {
			a[i] = (float)rand() / RAND_MAX * 200.0f - 100.0f;
			b[i] = (float)rand() / RAND_MAX * 2e-3f;
			c[i] = NAN; /* poison */
		}
		titan_err err;
		if (gpu_vecadd(a, b, c, n, &err) != 0)
			fail_msg("%s", err.msg);
		for (size_t i = 0; i < n; i++) {
			float want = a[i] + b[i];
			if (memcmp(&c[i], &want, sizeof want) != 0)
				fail_msg("n=%zu: c[%zu] = %a, want %a", n, i, c[i], want);
		}
		free(a);
		free(b);
		free(c);
	}
	titan_err err;
	assert_int_equal(gpu_vecadd(NULL, NULL, NULL, 0, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_device_is_reported_with_a_reason_not_an_error),
		cmocka_unit_test(device_info_names_a_real_device),
		cmocka_unit_test(vecadd_matches_the_cpu_bit_for_bit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
