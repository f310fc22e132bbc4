/* pool.h: a fixed-size thread pool, and an ordered parallel map on top of it.
 *
 *   pool *p = pool_create(n, &err);          n threads (0: one per online CPU)
 *   pool_submit(p, fn, arg, &err);           run fn(arg) on some thread
 *   pool_wait(p);                             until every submitted job has returned
 *   pool_destroy(p);                          waits, then joins the threads
 *
 * The ordered map lets one producer thread hand work items to the pool and get
 * them back in the order it handed them in, with at most `window` items alive
 * at once (bounded memory), so `titan-tokenize -j N` writes documents in input
 * order:
 *
 *   pool_omap *m = pool_omap_create(p, 2 * n, encode, ctx, &err);
 *   while ((item = read_next()) != NULL)
 *       if ((done = pool_omap_push(m, item)) != NULL)   oldest item, finished
 *           emit(done);
 *   while ((done = pool_omap_pop(m)) != NULL)
 *       emit(done);
 *   pool_omap_destroy(m);
 *
 * Items are the caller's: the pool never frees them, and an item returned by
 * push or pop is no longer touched by any worker, so the caller may reuse it as
 * the next input.  A job reports failure through its item (or ctx); the pool has
 * no notion of a failed job.  Jobs must not call pool_wait on their own pool. */
#ifndef TITAN_POOL_H
#define TITAN_POOL_H

#include <stddef.h>

#include "core/err.h"

typedef struct pool pool;
typedef struct pool_omap pool_omap;

typedef void (*pool_fn)(void *arg);
typedef void (*pool_map_fn)(void *item, void *ctx);

/* Number of online CPUs (at least 1). */
int pool_ncpu(void);

/* Start nthreads worker threads (nthreads <= 0: pool_ncpu()). */
pool *pool_create(int nthreads, titan_err *err);
int pool_size(const pool *p);
/* Queue fn(arg).  Fails only when memory runs out. */
int pool_submit(pool *p, pool_fn fn, void *arg, titan_err *err);
/* Block until every job submitted so far (and any they submitted) has returned. */
void pool_wait(pool *p);
/* Wait for the jobs, stop and join the threads, free p.  NULL is fine. */
void pool_destroy(pool *p);

/* An ordered map running fn(item, ctx) on p with at most window items in
 * flight (window <= 0: twice the pool's threads). */
pool_omap *pool_omap_create(pool *p, int window, pool_map_fn fn, void *ctx, titan_err *err);
/* Hand in the next item (not NULL).  When window items are already in flight,
 * first wait for the oldest and return it (the caller emits it); otherwise
 * return NULL.  Never fails: the queue entries are allocated up front. */
void *pool_omap_push(pool_omap *m, void *item);
/* Wait for the oldest item in flight and return it; NULL when none is. */
void *pool_omap_pop(pool_omap *m);
/* Items handed in and not yet returned. */
int pool_omap_pending(const pool_omap *m);
/* Free m; items still in flight are waited for and dropped (not freed). */
void pool_omap_destroy(pool_omap *m);

#endif
