/* The streaming kernels (CPU_STREAM in backend/cpu_kernels.h: AdamW's span
 * update, the clip's sum of squares) run without the sanitizers' checks of
 * every access and check their arrays once on entry.  Under ASan that check
 * must catch what per-access instrumentation caught: an array one element
 * short, and an array already freed, each in a child process whose report
 * is read back.  In-bounds calls stay silent.  In a build without ASan there
 * is nothing to catch: those tests skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu_kernels.h"
#include "../support/testutil.h"

#define N 1000

static const cpu_adamw_consts consts = {.decay = 0.999, .omb1 = 0.1, .b2 = 0.999,
					.omb2 = 0.001, .step = 1e-3, .sbc2 = 1, .eps = 1e-8,
					.clip = 1};

static volatile double sink; /* keeps the kernels' results */

/* What a kernel does to its arrays, in a child process. */
enum misuse { IN_BOUNDS, SHORT_GRAD, FREED_SUMSQ };

static void misuse_kernel(enum misuse how)
{
	/* the arrays exactly as long as asked: one short is one past its end */
	float *p = test_spread(N, 1), *m = test_spread(N, 2), *v = test_spread(N, 3);
	float *g = test_spread(how == SHORT_GRAD ? N - 1 : N, 4);
	if (how == FREED_SUMSQ) {
		float *volatile dead = g; /* read after the free on purpose */
		free(g);
		sink = cpu_sumsq_span_f32(dead, N);
		return;
	}
	cpu_adamw_span_f32(p, g, m, v, N, &consts);
	sink = cpu_sumsq_span_f32(p, N) + cpu_sumsq_span_f32(v, N);
	free(p);
	free(g);
	free(m);
	free(v);
}

/* Runs misuse_kernel(how) in a child; its exit status and the start of what
 * it wrote to standard error. */
static int run_child(enum misuse how, char *err, size_t cap)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		dup2(fd[1], STDERR_FILENO);
		misuse_kernel(how);
		fflush(NULL);
		_exit(0);
	}
	close(fd[1]);
	size_t n = 0;
	ssize_t k;
	char buf[4096];
	while ((k = read(fd[0], buf, sizeof buf)) > 0) {
		size_t take = (size_t)k < cap - 1 - n ? (size_t)k : cap - 1 - n;
		memcpy(err + n, buf, take);
		n += take;
	}
	err[n] = 0;
	close(fd[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_report(enum misuse how, const char *kind)
{
#if defined(__SANITIZE_ADDRESS__)
	static char err[1 << 16];
	int rc = run_child(how, err, sizeof err);
	if (how == IN_BOUNDS) {
		assert_int_equal(rc, 0);
		assert_null(strstr(err, "AddressSanitizer"));
		return;
	}
	if (rc == 0 || strstr(err, kind) == NULL || strstr(err, "cpu_san_span") == NULL)
		fail_msg("expected an ASan report of %s from cpu_san_span, exit %d: %.300s", kind,
			 rc, err);
#else
	(void)how;
	(void)kind;
	(void)run_child;
	skip();
#endif
}

static void test_in_bounds_is_silent(void **state)
{
	(void)state;
	expect_report(IN_BOUNDS, NULL);
}

static void test_short_array_caught(void **state)
{
	(void)state;
	expect_report(SHORT_GRAD, "heap-buffer-overflow");
}

static void test_freed_array_caught(void **state)
{
	(void)state;
	expect_report(FREED_SUMSQ, "heap-use-after-free");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_bounds_is_silent),
		cmocka_unit_test(test_short_array_caught),
		cmocka_unit_test(test_freed_array_caught),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
