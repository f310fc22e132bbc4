/* The device arena's bookkeeping (arena.h) and the multi-tensor chunk table
 * (launch.h): plain C over offsets, so these run on any machine, against a
 * model of the arena kept by the test (a byte map of what is in use). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gpu/arena.h"
#include "gpu/launch.h"

#define ARENA_BYTES (1 << 20)

static void *region(void)
{
	void *p = aligned_alloc(GPU_ARENA_ALIGN, ARENA_BYTES);
	assert_non_null(p);
	return p;
}

static void pieces_are_aligned_disjoint_and_counted(void **state)
{
	(void)state;
	char *base = region();
	titan_err e;
	gpu_arena *a = gpu_arena_wrap(base, ARENA_BYTES, &e);
	assert_non_null(a);
	assert_int_equal(gpu_arena_size(a), ARENA_BYTES);
	char *p = gpu_arena_alloc(a, 1, &e), *q = gpu_arena_alloc(a, 300, &e);
	char *r = gpu_arena_alloc(a, 0, &e);
	assert_non_null(p);
	assert_non_null(q);
	assert_non_null(r);
	assert_int_equal((uintptr_t)p % GPU_ARENA_ALIGN, 0);
	assert_int_equal((uintptr_t)q % GPU_ARENA_ALIGN, 0);
	assert_true(q >= p + GPU_ARENA_ALIGN);
	assert_true(r >= q + 512);
	assert_int_equal(gpu_arena_in_use(a), 256 + 512 + 256);
	assert_int_equal(gpu_arena_release(a, q, &e), 0);
	assert_int_equal(gpu_arena_in_use(a), 512);
	assert_int_equal(gpu_arena_peak(a), 1024);
	assert_int_equal(gpu_arena_high_water(a), 1024);
	/* first fit: the hole q left is reused by a piece that fits */
	char *s = gpu_arena_alloc(a, 500, &e);
	assert_ptr_equal(s, q);
	gpu_arena_reset_peak(a);
	assert_int_equal(gpu_arena_peak(a), gpu_arena_in_use(a));
	gpu_arena_free(a);
	free(base);
}

static void exhaustion_and_bad_releases_say_why(void **state)
{
	(void)state;
	char *base = region();
	titan_err e = {{0}};
	gpu_arena *a = gpu_arena_wrap(base, ARENA_BYTES, &e);
	assert_non_null(a);
	char *p = gpu_arena_alloc(a, ARENA_BYTES / 2, &e);
	assert_non_null(p);
	assert_null(gpu_arena_alloc(a, ARENA_BYTES, &e));
	assert_non_null(strstr(e.msg, "out of device memory"));
	assert_non_null(strstr(e.msg, "largest free piece 524288"));
	assert_null(gpu_arena_alloc(a, SIZE_MAX, &e)); /* no overflow into a small piece */
	assert_int_equal(gpu_arena_release(a, p + 256, &e), -1);
	assert_non_null(strstr(e.msg, "did not hand out"));
	assert_int_equal(gpu_arena_release(a, base + ARENA_BYTES, &e), -1);
	assert_non_null(strstr(e.msg, "outside the arena"));
	assert_int_equal(gpu_arena_release(a, p, &e), 0);
	assert_int_equal(gpu_arena_release(a, p, &e), -1); /* twice */
	assert_int_equal(gpu_arena_release(a, NULL, &e), 0);
	assert_null(gpu_arena_wrap(base + 1, 4096, &e));
	assert_non_null(strstr(e.msg, "aligned"));
	gpu_arena_free(a);
	free(base);
}

/* Random allocations and releases against a model: pieces never overlap, the
 * in-use count is exact, and when everything is released one piece (the whole
 * arena) can be taken again, so free neighbours always merged. */
static void random_traffic_keeps_the_books_exact(void **state)
{
	(void)state;
	char *base = region();
	titan_err e;
	gpu_arena *a = gpu_arena_wrap(base, ARENA_BYTES, &e);
	assert_non_null(a);
	enum { SLOTS = 64 };
	char *held[SLOTS] = {0};
	size_t sizes[SLOTS] = {0};
	unsigned char *owner = calloc(ARENA_BYTES / GPU_ARENA_ALIGN, 1); /* slot + 1 per unit */
	assert_non_null(owner);
	uint64_t st = 12345;
	print_message("seed %llu\n", (unsigned long long)st);
	size_t in_use = 0;
	for (int step = 0; step < 20000; step++) {
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		int slot = (int)((st >> 33) % SLOTS);
		if (held[slot]) {
			size_t off = (size_t)(held[slot] - base) / GPU_ARENA_ALIGN;
			for (size_t u = 0; u < sizes[slot]; u++)
				owner[off + u] = 0;
			assert_int_equal(gpu_arena_release(a, held[slot], &e), 0);
			in_use -= sizes[slot] * GPU_ARENA_ALIGN;
			held[slot] = NULL;
		} else {
			size_t bytes = (size_t)((st >> 13) % 40000);
			char *p = gpu_arena_alloc(a, bytes, &e);
			if (!p)
				continue; /* full: fine, the books must still balance */
			size_t units = bytes == 0 ? 1 : (bytes + GPU_ARENA_ALIGN - 1) / GPU_ARENA_ALIGN;
			size_t off = (size_t)(p - base) / GPU_ARENA_ALIGN;
			for (size_t u = 0; u < units; u++) {
				if (owner[off + u])
					fail_msg("step %d: piece at %zu overlaps slot %d", step, off,
						 owner[off + u] - 1);
				owner[off + u] = (unsigned char)(slot + 1);
			}
			held[slot] = p;
			sizes[slot] = units;
			in_use += units * GPU_ARENA_ALIGN;
		}
		assert_int_equal(gpu_arena_in_use(a), in_use);
	}
	for (int s = 0; s < SLOTS; s++)
		if (held[s])
			assert_int_equal(gpu_arena_release(a, held[s], &e), 0);
	assert_int_equal(gpu_arena_in_use(a), 0);
	assert_ptr_equal(gpu_arena_alloc(a, ARENA_BYTES, &e), base);
	free(owner);
	gpu_arena_free(a);
	free(base);
}

static void chunk_table_covers_every_element_once(void **state)
{
	(void)state;
	float *buf = aligned_alloc(16, 16 * 4);
	assert_non_null(buf);
	gpu_mt_tensor t[4] = {
		{.p = buf, .g = buf, .m = buf, .v = buf, .n = 0},
		{.p = buf, .g = buf, .m = buf, .v = buf, .n = 1},
		{.p = buf, .g = buf, .m = buf, .v = buf, .n = GPU_MT_CHUNK},
		{.p = buf, .g = buf, .m = buf, .v = buf, .n = 2 * GPU_MT_CHUNK + 5},
	};
	int64_t n = gpu_mt_chunks(t, 4, NULL);
	assert_int_equal(n, 1 + 1 + 3);
	gpu_mt_chunk ch[5];
	assert_int_equal(gpu_mt_chunks(t, 4, ch), 5);
	assert_int_equal(ch[0].tensor, 1);
	assert_int_equal(ch[0].len, 1);
	assert_int_equal(ch[2].tensor, 3);
	assert_int_equal(ch[3].offset, GPU_MT_CHUNK);
	assert_int_equal(ch[4].offset, 2 * GPU_MT_CHUNK);
	assert_int_equal(ch[4].len, 5);
	t[3].m = buf + 1; /* misaligned: element by element, same chunks */
	assert_int_equal(gpu_mt_chunks(t, 4, NULL), 5);
	t[3].n = -1;
	assert_int_equal(gpu_mt_chunks(t, 4, NULL), -1);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pieces_are_aligned_disjoint_and_counted),
		cmocka_unit_test(exhaustion_and_bad_releases_say_why),
		cmocka_unit_test(random_traffic_keeps_the_books_exact),
		cmocka_unit_test(chunk_table_covers_every_element_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
