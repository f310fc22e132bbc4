/* How lib/comm fails: never a hang.  Run alone, cmocka tests of a world of
 * one (a receive nobody sends times out, and the failure sticks).  With a
 * mode, the rank program of tests/comm/fail.sh, which runs it under mpirun:
 *
 *   test_comm_fail MODE VICTIM TIMEOUT_S
 *
 * Every rank all-reduces 1 MiB per step for 40 steps of 50 ms; at step 3 the
 * rank VICTIM breaks as MODE says: kill (SIGKILL to itself), hang (stops
 * calling the comm layer), error (fails, as a rank that cannot read its data
 * would), or ok (nothing).  A rank that fails prints "test_comm_fail: MSG"
 * and ends the job with comm_abort, as titan-train does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"

static comm *world;

static void a_receive_nobody_sends_times_out_naming_the_operation(void **state)
{
	(void)state;
	titan_err e;
	float x = 0;
	if (comm_set_timeout(world, 0.3, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(comm_recv(world, &x, 1, COMM_F32, 0, &e), -1);
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "rank 0: comm 'world': recv #"));
	assert_non_null(strstr(e.msg, "timed out after 0.3 s"));
}

static void after_a_failure_every_operation_is_refused(void **state)
{
	(void)state;
	titan_err e;
	assert_non_null(comm_failure(world));
	assert_int_equal(comm_barrier(world, &e), -1);
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "barrier not started"));
	assert_non_null(strstr(e.msg, "timed out"));
}

static int run_mode(const char *mode, int victim, double timeout_s)
{
	enum { N = 1 << 18, STEPS = 40 };
	float *buf = calloc(N, sizeof *buf);
	titan_err e;
	if (buf == NULL)
		return 1;
	for (int step = 0; step < STEPS; step++) {
		if (comm_rank(world) == victim && step == 3) {
			if (strcmp(mode, "kill") == 0) {
				raise(SIGKILL);
			} else if (strcmp(mode, "hang") == 0) {
				for (;;)
					pause();
			} else if (strcmp(mode, "error") == 0) {
				fprintf(stderr, "test_comm_fail: rank %d: simulated failure: cannot read "
					"data/shard-000007.bin\n", victim);
				free(buf);
				comm_abort(world, 1);
			}
		}
		if (comm_all_reduce(world, buf, buf, N, COMM_F32, COMM_SUM, &e) != 0) {
			fprintf(stderr, "test_comm_fail: %s\n", e.msg);
			free(buf);
			comm_abort(world, 1);
		}
		if (step == 0 && comm_set_timeout(world, timeout_s, &e) != 0) {
			fprintf(stderr, "test_comm_fail: %s\n", e.msg);
			free(buf);
			comm_abort(world, 1);
		}
		usleep(50000);
	}
	free(buf);
	printf("rank %d: %d steps done\n", comm_rank(world), STEPS);
	return 0;
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 60, &world, &e) != 0) {
		fprintf(stderr, "test_comm_fail: %s\n", e.msg);
		return 1;
	}
	int rc;
	if (argc == 4) {
		rc = run_mode(argv[1], atoi(argv[2]), atof(argv[3]));
	} else {
		const struct CMUnitTest tests[] = {
			cmocka_unit_test(a_receive_nobody_sends_times_out_naming_the_operation),
			cmocka_unit_test(after_a_failure_every_operation_is_refused),
		};
		rc = cmocka_run_group_tests(tests, NULL, NULL);
	}
	comm_finalize(world);
	return rc;
}
