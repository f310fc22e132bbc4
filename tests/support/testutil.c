#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/err.h"

char test_tmpdir[256];

int test_tmpdir_create(void **state)
{
	(void)state;
	const char *t = getenv("TMPDIR");
	snprintf(test_tmpdir, sizeof test_tmpdir, "%s/titan-test.XXXXXX", t && *t ? t : "/tmp");
	return mkdtemp(test_tmpdir) ? 0 : -1;
}

int test_tmpdir_remove(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

const char *test_path(const char *name)
{
	static char buf[512];
	snprintf(buf, sizeof buf, "%s/%s", test_tmpdir, name);
	return buf;
}

static uint64_t rng_state;

void test_seed(uint64_t s)
{
	printf("seed %llu\n", (unsigned long long)s);
	rng_state = s;
}

double test_urand(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

uint64_t test_counter_bits(uint64_t seed, uint64_t t, uint64_t j)
{
	uint64_t z = seed + (t << 32) + j + 0x9e3779b97f4a7c15u;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

float test_counter_draw(uint64_t seed, uint64_t t, uint64_t j)
{
	int64_t u = (int64_t)(test_counter_bits(seed, t, j) >> 40) - (1 << 23);
	return (float)u / (float)(1 << 23);
}

static void max_abs(const float *got, const float *want, int64_t n, double *err, double *ref)
{
	*err = *ref = 0;
	for (int64_t i = 0; i < n; i++) {
		*err = fmax(*err, fabs((double)got[i] - want[i]));
		*ref = fmax(*ref, fabs((double)want[i]));
	}
}

double test_max_rel(const float *got, const float *want, int64_t n)
{
	double err, ref;
	max_abs(got, want, n, &err, &ref);
	return err / ref;
}

double test_max_rel_print(const char *name, const float *got, const float *want, int64_t n)
{
	double err, ref;
	max_abs(got, want, n, &err, &ref);
	printf("# %s: max |err| %.3g, max |ref| %.3g, relative %.3g\n", name, err, ref, err / ref);
	return err / ref;
}

double test_max_rel_d(const double *got, const double *want, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(got[i]))
			return INFINITY;
		num = fmax(num, fabs(got[i] - want[i]));
		den = fmax(den, fabs(want[i]));
	}
	return den > 0 ? num / den : num;
}

long test_status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(field);
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, field, n) == 0)
			v = strtol(line + n, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

int test_reset_hwm(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (f == NULL)
		return -1;
	int rc = fputs("5", f) < 0;
	return fclose(f) != 0 || rc ? -1 : 0;
}

void test_refused(int rc, const titan_err *e, const char *want)
{
	assert_int_equal(rc, -1);
	printf("# %s\n", e->msg);
	assert_null(strchr(e->msg, '\n'));
	if (strstr(e->msg, want) == NULL)
		fail_msg("'%s' does not say '%s'", e->msg, want);
}

int test_short(void)
{
	const char *v = getenv("TITAN_TEST_SHORT");
	return SANITIZED || (v != NULL && strcmp(v, "1") == 0);
}

float *test_spread(int64_t n, uint32_t seed)
{
	float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
	assert_non_null(v);
	uint32_t s = seed * 2654435761u + 1;
	for (int64_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		v[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
	}
	return v;
}

int test_child_stderr(void (*fn)(void *arg), void *arg, char *err, size_t cap)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		dup2(fd[1], STDERR_FILENO);
		fn(arg);
		fflush(NULL);
		_exit(0);
	}
	close(fd[1]);
	size_t n = 0;
	ssize_t got;
	char buf[4096];
	while ((got = read(fd[0], buf, sizeof buf)) > 0) {
		size_t take = (size_t)got < cap - 1 - n ? (size_t)got : cap - 1 - n;
		memcpy(err + n, buf, take);
		n += take;
	}
	err[n] = 0;
	close(fd[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
