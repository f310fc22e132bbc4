#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

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
