/* How the CUDA backend's scaled float8 product hands its scales to cuBLASLt
 * (gpu_f8_scales_plan, lib/gpu/gemm.h), on the host: cuBLASLt's outer-vector
 * mode goes on both operands or on neither, the second vector starts on a
 * 16-byte boundary, and the float32 product of the epilogue fallback is sized
 * for the row-wise case alone (it is allocated only when cuBLASLt refuses).
 * No GPU needed: this is what cuda_f8_matmul asks before it launches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gpu/gemm.h"

static void tensorwise_is_two_scalars_and_no_fallback(void **state)
{
	(void)state;
	gpu_f8_scales p;
	titan_err e;
	assert_int_equal(gpu_f8_scales_plan(8192, 14336, 1, 1, &p, &e), 0);
	assert_int_equal(p.outer_vec, 0);
	assert_int_equal(p.na, 1);
	assert_int_equal(p.nb, 1);
	assert_int_equal(p.b_offset, 16);
	assert_int_equal(p.bytes, 20);
	assert_int_equal(p.fallback_bytes, 0);
}

/* Llama 3 8B's w1 at 8192 tokens: the scales take 90 KiB, the fallback's
 * product 448 MiB, which the scales alone must not cost. */
static void rowwise_puts_vectors_on_both_and_sizes_the_fallback_apart(void **state)
{
	(void)state;
	gpu_f8_scales p;
	titan_err e;
	assert_int_equal(gpu_f8_scales_plan(8192, 14336, 8192, 14336, &p, &e), 0);
	assert_int_equal(p.outer_vec, 1);
	assert_int_equal(p.na, 8192);
	assert_int_equal(p.nb, 14336);
	assert_int_equal(p.b_offset, 8192 * 4);
	assert_int_equal(p.bytes, (8192 + 14336) * 4);
	assert_int_equal(p.fallback_bytes, (size_t)8192 * 14336 * 4);
}

/* A vector beside a scalar is not a mode cuBLASLt has: both become vectors. */
static void a_vector_beside_a_scalar_makes_both_vectors(void **state)
{
	(void)state;
	gpu_f8_scales p;
	titan_err e;
	assert_int_equal(gpu_f8_scales_plan(64, 48, 64, 1, &p, &e), 0);
	assert_int_equal(p.outer_vec, 1);
	assert_int_equal(p.na, 64);
	assert_int_equal(p.nb, 48);
	assert_int_equal(gpu_f8_scales_plan(64, 48, 1, 48, &p, &e), 0);
	assert_int_equal(p.outer_vec, 1);
	assert_int_equal(p.na, 64);
	assert_int_equal(p.nb, 48);
	assert_int_equal(p.fallback_bytes, 64 * 48 * 4);
}

/* cuBLASLt reads scale vectors 16 bytes at a time: an odd row count must not
 * leave b's vector on a 4-byte boundary. */
static void the_second_vector_is_16_byte_aligned(void **state)
{
	(void)state;
	for (int64_t m = 1; m <= 40; m++) {
		gpu_f8_scales p;
		titan_err e;
		assert_int_equal(gpu_f8_scales_plan(m, 7, m, 7, &p, &e), 0);
		assert_int_equal(p.b_offset % 16, 0);
		assert_true(p.b_offset >= (size_t)m * 4);
		assert_true(p.b_offset < (size_t)m * 4 + 16);
		assert_int_equal(p.bytes, p.b_offset + 7 * 4);
	}
}

static void bad_counts_and_overflow_are_refused(void **state)
{
	(void)state;
	gpu_f8_scales p;
	titan_err e;
	assert_int_equal(gpu_f8_scales_plan(64, 48, 63, 48, &p, &e), -1);
	assert_non_null(strstr(e.msg, "63 and 48 scales for (64, 48)"));
	assert_int_equal(gpu_f8_scales_plan(64, 48, 64, 2, &p, &e), -1);
	assert_int_equal(gpu_f8_scales_plan(-1, 48, 1, 1, &p, &e), -1);
	int64_t big = INT64_C(1) << 40;
	assert_int_equal(gpu_f8_scales_plan(big, big, big, big, &p, &e), -1);
	assert_non_null(strstr(e.msg, "overflows"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tensorwise_is_two_scalars_and_no_fallback),
		cmocka_unit_test(rowwise_puts_vectors_on_both_and_sizes_the_fallback_apart),
		cmocka_unit_test(a_vector_beside_a_scalar_makes_both_vectors),
		cmocka_unit_test(the_second_vector_is_16_byte_aligned),
		cmocka_unit_test(bad_counts_and_overflow_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
