/* Unit tests of lib/core/pool: the thread pool and the ordered parallel map. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/pool.h"

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static _Atomic int hits[10000];

static void hit(void *arg)
{
	atomic_fetch_add(&hits[(intptr_t)arg], 1);
}

static void every_job_runs_exactly_once(void **state)
{
	(void)state;
	titan_err err;
	pool *p = pool_create(4, &err);
	assert_non_null(p);
	assert_int_equal(pool_size(p), 4);
	for (intptr_t i = 0; i < 10000; i++)
		assert_int_equal(pool_submit(p, hit, (void *)i, &err), 0);
	pool_wait(p);
	for (int i = 0; i < 10000; i++)
		assert_int_equal(atomic_load(&hits[i]), 1);
	/* The pool is reusable after a wait. */
	for (intptr_t i = 0; i < 100; i++)
		assert_int_equal(pool_submit(p, hit, (void *)i, &err), 0);
	pool_destroy(p);
	for (int i = 0; i < 100; i++)
		assert_int_equal(atomic_load(&hits[i]), 2);
}

static _Atomic int slow_done;

static void slow(void *arg)
{
	(void)arg;
	sleep_us(20000);
	atomic_fetch_add(&slow_done, 1);
}

static void wait_returns_only_after_running_jobs_finish(void **state)
{
	(void)state;
	pool *p = pool_create(2, NULL);
	assert_non_null(p);
	for (int i = 0; i < 6; i++)
		assert_int_equal(pool_submit(p, slow, NULL, NULL), 0);
	pool_wait(p);
	assert_int_equal(atomic_load(&slow_done), 6);
	/* destroy waits too */
	for (int i = 0; i < 4; i++)
		assert_int_equal(pool_submit(p, slow, NULL, NULL), 0);
	pool_destroy(p);
	assert_int_equal(atomic_load(&slow_done), 10);
	pool_destroy(NULL);
}

static _Atomic int arrived, met;

/* Each job waits (at most 10 s) until all four have started: this only
 * succeeds when four threads really run at once. */
static void rendezvous(void *arg)
{
	(void)arg;
	atomic_fetch_add(&arrived, 1);
	for (int i = 0; i < 10000 && atomic_load(&arrived) < 4; i++)
		sleep_us(1000);
	if (atomic_load(&arrived) >= 4)
		atomic_fetch_add(&met, 1);
}

static void jobs_run_concurrently_on_all_threads(void **state)
{
	(void)state;
	pool *p = pool_create(4, NULL);
	assert_non_null(p);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pool_submit(p, rendezvous, NULL, NULL), 0);
	pool_destroy(p);
	assert_int_equal(atomic_load(&met), 4);
}

typedef struct nest {
	pool *p;
	_Atomic int children, failed;
} nest;

static void child(void *arg)
{
	nest *n = arg;
	sleep_us(5000);
	atomic_fetch_add(&n->children, 1);
}

static void parent(void *arg)
{
	nest *n = arg;
	/* No cmocka assertion here: they may only run on the test's own thread. */
	for (int i = 0; i < 3; i++)
		if (pool_submit(n->p, child, n, NULL) != 0)
			atomic_fetch_add(&n->failed, 1);
}

static void wait_covers_jobs_submitted_by_jobs(void **state)
{
	(void)state;
	nest n = {.p = pool_create(3, NULL)};
	assert_non_null(n.p);
	for (int i = 0; i < 5; i++)
		assert_int_equal(pool_submit(n.p, parent, &n, NULL), 0);
	pool_wait(n.p);
	assert_int_equal(atomic_load(&n.failed), 0);
	assert_int_equal(atomic_load(&n.children), 15);
	pool_destroy(n.p);
}

static void create_with_zero_uses_every_cpu(void **state)
{
	(void)state;
	pool *p = pool_create(0, NULL);
	assert_non_null(p);
	assert_int_equal(pool_size(p), pool_ncpu());
	assert_true(pool_ncpu() >= 1);
	pool_destroy(p);
}

typedef struct work {
	uint32_t seq;   /* position in the input */
	uint32_t in;
	uint64_t out;   /* in's 64-bit hash, the job's result */
	int sleep_us;   /* uneven work, so jobs finish out of order */
} work;

typedef struct map_ctx {
	_Atomic int running, max_running;
} map_ctx;

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser, computed here serially as the reference */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void map_fn(void *item, void *ctxp)
{
	work *w = item;
	map_ctx *c = ctxp;
	int r = atomic_fetch_add(&c->running, 1) + 1;
	int m = atomic_load(&c->max_running);
	while (r > m && !atomic_compare_exchange_weak(&c->max_running, &m, r))
		;
	sleep_us(w->sleep_us);
	w->out = mix(w->in);
	atomic_fetch_sub(&c->running, 1);
}

static void check_ordered_map(int threads, int window, int n_items)
{
	const unsigned seed = 20261202u;
	print_message("ordered map: %d threads, window %d, %d items, seed %u\n", threads, window,
		      n_items, seed);
	srand(seed);
	pool *p = pool_create(threads, NULL);
	assert_non_null(p);
	map_ctx ctx = {0};
	pool_omap *m = pool_omap_create(p, window, map_fn, &ctx, NULL);
	assert_non_null(m);
	int alive = 0, max_alive = 0;
	uint32_t next_out = 0;
	for (int i = 0; i < n_items; i++) {
		work *w = malloc(sizeof *w);
		assert_non_null(w);
		*w = (work){.seq = (uint32_t)i, .in = (uint32_t)rand(), .sleep_us = rand() % 3000};
		w->out = 0xdeadbeef; /* poison */
		alive++;
		if (alive > max_alive)
			max_alive = alive;
		work *done = pool_omap_push(m, w);
		if (done != NULL) {
			assert_int_equal(done->seq, next_out++);
			assert_int_equal(done->out, mix(done->in));
			free(done);
			alive--;
		}
		assert_true(pool_omap_pending(m) <= window);
	}
	work *done;
	while ((done = pool_omap_pop(m)) != NULL) {
		assert_int_equal(done->seq, next_out++);
		assert_int_equal(done->out, mix(done->in));
		free(done);
		alive--;
	}
	assert_int_equal(next_out, (uint32_t)n_items);
	assert_int_equal(alive, 0);
	/* Bounded memory: never more than window items, plus the one being pushed. */
	assert_true(max_alive <= window + 1);
	assert_true(atomic_load(&ctx.max_running) <= threads);
	pool_omap_destroy(m);
	pool_destroy(p);
}

static void ordered_map_returns_input_order_with_bounded_window(void **state)
{
	(void)state;
	check_ordered_map(4, 8, 400);
}

static void ordered_map_works_with_one_thread_and_window_one(void **state)
{
	(void)state;
	check_ordered_map(1, 1, 50);
}

static void ordered_map_window_larger_than_input(void **state)
{
	(void)state;
	check_ordered_map(3, 64, 10);
}

static void ordered_map_lets_the_producer_reuse_returned_items(void **state)
{
	(void)state;
	pool *p = pool_create(2, NULL);
	map_ctx ctx = {0};
	pool_omap *m = pool_omap_create(p, 0, map_fn, &ctx, NULL); /* window 2 * 2 */
	assert_non_null(m);
	work buf[5]; /* window + 1 buffers serve any number of items */
	int free_top = 5;
	work *freelist[5];
	for (int i = 0; i < 5; i++)
		freelist[i] = &buf[i];
	uint32_t next_out = 0;
	for (uint32_t i = 0; i < 1000; i++) {
		assert_true(free_top > 0);
		work *w = freelist[--free_top];
		*w = (work){.seq = i, .in = i * 2654435761u, .sleep_us = (int)(i % 7) * 50};
		work *done = pool_omap_push(m, w);
		if (done != NULL) {
			assert_int_equal(done->seq, next_out++);
			assert_int_equal(done->out, mix(done->in));
			freelist[free_top++] = done;
		}
	}
	work *done;
	while ((done = pool_omap_pop(m)) != NULL)
		assert_int_equal(done->seq, next_out++);
	assert_int_equal(next_out, 1000);
	assert_null(pool_omap_pop(m));
	pool_omap_destroy(m);
	pool_destroy(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_job_runs_exactly_once),
		cmocka_unit_test(wait_returns_only_after_running_jobs_finish),
		cmocka_unit_test(jobs_run_concurrently_on_all_threads),
		cmocka_unit_test(wait_covers_jobs_submitted_by_jobs),
		cmocka_unit_test(create_with_zero_uses_every_cpu),
		cmocka_unit_test(ordered_map_returns_input_order_with_bounded_window),
		cmocka_unit_test(ordered_map_works_with_one_thread_and_window_one),
		cmocka_unit_test(ordered_map_window_larger_than_input),
		cmocka_unit_test(ordered_map_lets_the_producer_reuse_returned_items),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
