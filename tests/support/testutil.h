/* testutil.h: helpers shared by the cmocka programs under tests/. */
#ifndef TITAN_TESTUTIL_H
#define TITAN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A fresh scratch folder for a test group: pass these as the group's setup and
 * teardown to cmocka_run_group_tests(); test_tmpdir holds its path. */
extern char test_tmpdir[256];
int test_tmpdir_create(void **state);
int test_tmpdir_remove(void **state);

/* test_tmpdir "/" name, in a static buffer that the next call overwrites. */
const char *test_path(const char *name);

/* A fixed-seed generator for random test inputs: test_seed prints the seed
 * (a failure can be replayed), test_urand draws uniformly from [-1, 1). */
void test_seed(uint64_t s);
double test_urand(void);

/* SANITIZED is 1 in the ASan build (gcc's or clang's spelling), where tests
 * that scale with input size run a fraction of the work. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#endif
