/* Tests of lib/fluxin (titan-encode's library).
 *
 *   test_fluxin                      the unit tests
 *   test_fluxin mkmodels DIR [real [T5_LAYERS]]
 *                                    write the deterministic random encoders
 *                                    (tests/support/flux_models.h) into DIR/t5
 *                                    and DIR/clip: tiny, or the real shapes */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/flux_models.h"
#include "fluxin/fluxin.h"

static int mkmodels(int argc, char **argv)
{
	test_t5_dims t5 = test_t5_tiny;
	test_clip_dims clip = test_clip_tiny;
	if (argc > 3 && strcmp(argv[3], "real") == 0) {
		t5 = test_t5_xxl;
		clip = test_clip_large;
		if (argc > 4)
			t5.layers = atoi(argv[4]);
	}
	titan_err err;
	if (test_make_encoders(argv[2], &t5, &clip, &err) != 0) {
		fprintf(stderr, "test_fluxin: %s\n", err.msg);
		return 1;
	}
	return 0;
}

static void centre_crop_is_the_middle_offset(void **state)
{
	(void)state;
	assert_int_equal(fluxin_crop_offset(0, 0, 7, 1), 0);
	assert_int_equal(fluxin_crop_offset(0, 0, 7, 85), 42);
	assert_int_equal(fluxin_crop_offset(0, 9, 7, 86), 42);
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "mkmodels") == 0)
		return mkmodels(argc, argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(centre_crop_is_the_middle_offset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
