/* cpu_pool.h: the CPU backend's cache of freed blocks, kept by exact size and
 * handed out again to the next request of that size, as torch's caching
 * allocator does on a GPU.  A training step asks for the same sizes in the
 * same order every step, and a block that goes back to the C library comes
 * back as fresh pages: a page fault and a cleared page for every 4 KiB.
 * Under ASan that is most of all: its allocator maps every block from
 * 128 KiB anew and unmaps it when its quarantine lets go, and records each
 * allocation's stack.
 *
 * The backend decides what to keep (cpu.c: never more than the most its
 * live blocks ever held); the pool only files and hands out.  A kept block
 * is poisoned in ASan builds apart from the pool's link in its first bytes,
 * so that a use after the backend's free is still reported (as a
 * use-after-poison); the same size is then handed out oldest first, as
 * ASan's quarantine would, rather than newest first, which the plain build
 * does for warm caches.
 *
 * Not thread-safe: the backend's alloc and free are called from one
 * thread. */
#ifndef TITAN_CPU_POOL_H
#define TITAN_CPU_POOL_H

#include <stddef.h>

typedef struct cpu_pool_bucket {
	size_t bytes; /* every block's size in this bucket */
	void *head;   /* the next one handed out; each block links the next */
	void *tail;   /* the last one kept */
} cpu_pool_bucket;

/* Zero-initialised is an empty pool. */
typedef struct cpu_pool {
	cpu_pool_bucket *buckets;
	size_t n, cap;
	size_t bytes;  /* held in kept blocks */
	size_t blocks; /* how many */
} cpu_pool;

/* A kept block of exactly bytes, unpoisoned and no longer the pool's; NULL
 * when there is none. */
void *cpu_pool_take(cpu_pool *p, size_t bytes);

/* Files block (bytes long, at least a pointer, from malloc) for a later
 * take.  0, or -1 when the pool cannot grow its index: the caller still
 * owns the block and frees it. */
int cpu_pool_keep(cpu_pool *p, void *block, size_t bytes);

/* Frees kept blocks, the most recently opened sizes first, until the pool
 * holds at most target bytes. */
void cpu_pool_trim(cpu_pool *p, size_t target);

/* Frees every kept block and the index: the pool is empty and may be used
 * again. */
void cpu_pool_release(cpu_pool *p);

#endif
