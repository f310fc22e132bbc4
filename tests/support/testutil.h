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

/* A cmocka assertion that a call was refused with a one-line message: rc is
 * -1 and e's message (printed as a TAP comment) holds want and no newline. */
struct titan_err;
void test_refused(int rc, const struct titan_err *e, const char *want);

/* test_tmpdir "/" name, in a static buffer that the next call overwrites. */
const char *test_path(const char *name);

/* A fixed-seed generator for random test inputs: test_seed prints the seed
 * (a failure can be replayed), test_urand draws uniformly from [-1, 1). */
void test_seed(uint64_t s);
double test_urand(void);

/* The counter-based generator the goldens of large models share with their
 * scripts (scripts/fluxae_golden.py): test_counter_bits is splitmix64's
 * finaliser of seed + t * 2^32 + j + 0x9e3779b97f4a7c15 (element j of tensor
 * t), test_counter_draw its top 24 bits as a float32 uniform in [-1, 1),
 * ((bits >> 40) - 2^23) / 2^23, exact. */
uint64_t test_counter_bits(uint64_t seed, uint64_t t, uint64_t j);
float test_counter_draw(uint64_t seed, uint64_t t, uint64_t j);

/* n values spread deterministically over [-1, 1) by a linear congruential
 * generator from seed (a malloc'd array the caller frees; a cmocka failure
 * on no memory). */
float *test_spread(int64_t n, uint32_t seed);

/* Runs fn(arg) in a child process whose standard error is read into err (cap
 * bytes, NUL-terminated; the rest dropped): the child's exit status, or 128
 * plus the signal that ended it.  The child exits 0 when fn returns.  For
 * the tests that must see a sanitizer's report of a deliberate misuse. */
int test_child_stderr(void (*fn)(void *arg), void *arg, char *err, size_t cap);

/* The largest |got - want| over n values relative to the largest |want|;
 * the _print form also prints "# NAME: max |err| E, max |ref| R, relative X". */
double test_max_rel(const float *got, const float *want, int64_t n);
double test_max_rel_print(const char *name, const float *got, const float *want, int64_t n);
/* The same over doubles, infinite when got holds a NaN (a value never
 * written); the absolute error when want is all zero. */
double test_max_rel_d(const double *got, const double *want, size_t n);

/* A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"); -1 if absent. */
long test_status_kib(const char *field);
/* Reset VmHWM to the current RSS (Linux's clear_refs "5"): a peak read after
 * it is the peak since.  0 or -1. */
int test_reset_hwm(void);

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

/* 1 where a run is there to execute the code rather than to do the whole
 * amount of work: the sanitizers' build (SANITIZED), and make check-arm64,
 * whose programs run under qemu-user 10-100x slower than on a processor and
 * are started with TITAN_TEST_SHORT=1 (scripts/arm64/check.sh).  Tests then
 * repeat the same code fewer times (fewer random cases, a part of a corpus,
 * fewer steps); make check runs the full amounts. */
int test_short(void);

#endif
