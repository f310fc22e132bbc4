/* The CPU backend's cache of freed blocks (backend/cpu_pool.h): a freed block
 * comes back for the next request of its size; the cache never holds more
 * than the live blocks' high-water mark, nor lets the two together pass it;
 * TITAN_CPU_POOL=0 keeps nothing; the backend's byte counts are those of the
 * live blocks alone.  Under ASan a kept block is poisoned: reading one after
 * the backend's free is reported.  The pool itself: each size its bucket,
 * newest first (oldest first under ASan, as its quarantine hands out), trim
 * frees down to its target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu_pool.h"
#include "../support/testutil.h"

#define MIB ((size_t)1 << 20)

static backend *cpu(void)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	return be;
}

static void *get(backend *be, size_t bytes)
{
	titan_err e = {0};
	void *p = be->ops->alloc(be, bytes, &e);
	assert_non_null(p);
	memset(p, 0x5a, bytes); /* every byte usable */
	return p;
}

static void test_freed_block_comes_back_for_its_size(void **state)
{
	(void)state;
	backend *be = cpu();
	void *a = get(be, 3 * MIB);
	be->ops->free(be, a);
	assert_true(backend_cpu_cached_bytes(be) >= 3 * MIB);
	void *b = get(be, 3 * MIB);
	assert_ptr_equal(a, b);
	assert_int_equal(backend_cpu_cached_bytes(be), 0);
	be->ops->free(be, b);
	assert_true(backend_cpu_cached_bytes(be) >= 3 * MIB);
	backend_free(be);
}

static void test_counts_are_the_live_blocks(void **state)
{
	(void)state;
	backend *be = cpu();
	size_t base = be->bytes_in_use;
	void *a = get(be, 5 * MIB);
	assert_int_equal(be->bytes_in_use, base + 5 * MIB);
	be->ops->free(be, a);
	assert_int_equal(be->bytes_in_use, base);
	backend_reset_peak(be);
	void *b = get(be, 5 * MIB); /* from the cache: counted again */
	assert_int_equal(be->bytes_in_use, base + 5 * MIB);
	assert_int_equal(backend_peak_bytes(be), base + 5 * MIB);
	be->ops->free(be, b);
	backend_free(be);
}

/* 4 MiB live at most: kept, then a 6 MiB request would make the process hold
 * 10, so the kept block goes back first. */
static void test_cache_never_passes_the_high_water_mark(void **state)
{
	(void)state;
	backend *be = cpu();
	void *a = get(be, 4 * MIB);
	be->ops->free(be, a);
	size_t kept = backend_cpu_cached_bytes(be);
	assert_true(kept >= 4 * MIB);
	void *b = get(be, 6 * MIB);
	assert_int_equal(backend_cpu_cached_bytes(be), 0);
	/* 6 MiB is the mark now: freeing it keeps it; a 1 MiB request beside
	 * the kept 6 would make 7, past the mark, so the 6 goes back */
	be->ops->free(be, b);
	assert_true(backend_cpu_cached_bytes(be) >= 6 * MIB);
	void *c = get(be, 1 * MIB);
	assert_int_equal(backend_cpu_cached_bytes(be), 0);
	/* 7 MiB live is the mark now: both are kept when freed */
	void *d = get(be, 6 * MIB);
	be->ops->free(be, d);
	be->ops->free(be, c);
	assert_true(backend_cpu_cached_bytes(be) <= 7 * MIB + 128);
	assert_true(backend_cpu_cached_bytes(be) >= 6 * MIB);
	backend_free(be);
}

static void test_pool_off_keeps_nothing(void **state)
{
	(void)state;
	assert_int_equal(setenv("TITAN_CPU_POOL", "0", 1), 0);
	backend *be = cpu();
	assert_int_equal(unsetenv("TITAN_CPU_POOL"), 0);
	void *a = get(be, 3 * MIB);
	be->ops->free(be, a);
	assert_int_equal(backend_cpu_cached_bytes(be), 0);
	backend_free(be);
}

/* Reads a block the backend has freed (in a child: test_child_stderr). */
static void read_after_free(void *arg)
{
	(void)arg;
	backend *be = cpu();
	volatile char *p = get(be, 2 * MIB);
	be->ops->free(be, (void *)p);
	char c = p[MIB]; /* after the free, on purpose */
	_exit(c == 0x5a ? 0 : 1);
}

static void test_use_of_a_kept_block_is_reported(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__)
	static char err[1 << 15];
	int rc = test_child_stderr(read_after_free, NULL, err, sizeof err);
	if (rc == 0 || strstr(err, "use-after-poison") == NULL)
		fail_msg("expected ASan's use-after-poison report, exit %d: %.300s", rc, err);
#else
	(void)read_after_free;
	skip();
#endif
}

/* blocks from malloc, as the backend's */
static void *block(size_t bytes)
{
	void *p = malloc(bytes);
	assert_non_null(p);
	return p;
}

static void test_pool_buckets_order_and_trim(void **state)
{
	(void)state;
	cpu_pool p = {0};
	void *a = block(256), *b = block(256), *c = block(512);
	assert_int_equal(cpu_pool_keep(&p, a, 256), 0);
	assert_int_equal(cpu_pool_keep(&p, b, 256), 0);
	assert_int_equal(cpu_pool_keep(&p, c, 512), 0);
	assert_int_equal(p.bytes, 1024);
	assert_int_equal(p.blocks, 3);
	assert_int_equal(p.n, 2);
	assert_null(cpu_pool_take(&p, 128));
#if defined(__SANITIZE_ADDRESS__)
	void *first = a, *second = b;
#else
	void *first = b, *second = a;
#endif
	assert_ptr_equal(cpu_pool_take(&p, 256), first);
	assert_ptr_equal(cpu_pool_take(&p, 256), second);
	assert_int_equal(p.n, 1); /* the emptied size left the index */
	assert_null(cpu_pool_take(&p, 256));
	assert_int_equal(cpu_pool_keep(&p, a, 256), 0);
	cpu_pool_trim(&p, 600); /* 768 held: one block goes */
	assert_true(p.bytes <= 600);
	assert_int_equal(p.blocks, 1);
	cpu_pool_trim(&p, 0);
	assert_int_equal(p.bytes, 0);
	assert_int_equal(p.n, 0);
	free(b);
	cpu_pool_release(&p);
	assert_null(p.buckets);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_freed_block_comes_back_for_its_size),
		cmocka_unit_test(test_counts_are_the_live_blocks),
		cmocka_unit_test(test_cache_never_passes_the_high_water_mark),
		cmocka_unit_test(test_pool_off_keeps_nothing),
		cmocka_unit_test(test_use_of_a_kept_block_is_reported),
		cmocka_unit_test(test_pool_buckets_order_and_trim),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
