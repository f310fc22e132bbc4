/* testutil.h: helpers shared by the cmocka programs under tests/. */
#ifndef TITAN_TESTUTIL_H
#define TITAN_TESTUTIL_H

#include <stddef.h>

/* A fresh scratch folder for a test group: pass these as the group's setup and
 * teardown to cmocka_run_group_tests(); test_tmpdir holds its path. */
extern char test_tmpdir[256];
int test_tmpdir_create(void **state);
int test_tmpdir_remove(void **state);

/* test_tmpdir "/" name, in a static buffer that the next call overwrites. */
const char *test_path(const char *name);

#endif
