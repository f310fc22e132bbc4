/* The CPU backend's cache of freed blocks: cpu_pool.h. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_pool.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POOL_OLDEST_FIRST 1
#define poison(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POOL_OLDEST_FIRST 0
#define poison(p, n) ((void)(p), (void)(n))
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

/* The link to the next block of a bucket, in a kept block's first bytes. */
static void *next_of(void *block)
{
	void *next;
	memcpy(&next, block, sizeof next);
	return next;
}

static void set_next(void *block, void *next)
{
	memcpy(block, &next, sizeof next);
}

/* The bucket of blocks of bytes, or NULL.  Linear: a bucket leaves the index
 * when it empties, so there are as many as sizes kept now (tens in a step). */
static cpu_pool_bucket *find(cpu_pool *p, size_t bytes)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->buckets[i].bytes == bytes)
			return &p->buckets[i];
	return NULL;
}

static void drop_bucket(cpu_pool *p, cpu_pool_bucket *b)
{
	*b = p->buckets[--p->n];
}

/* The bucket's first block, unlinked and unpoisoned. */
static void *pop(cpu_pool *p, cpu_pool_bucket *b)
{
	void *block = b->head;
	b->head = next_of(block);
	if (b->head == NULL)
		b->tail = NULL;
	p->bytes -= b->bytes;
	p->blocks--;
	unpoison(block, b->bytes);
	return block;
}

void *cpu_pool_take(cpu_pool *p, size_t bytes)
{
	cpu_pool_bucket *b = find(p, bytes);
	if (b == NULL)
		return NULL;
	void *block = pop(p, b);
	if (b->head == NULL)
		drop_bucket(p, b);
	return block;
}

int cpu_pool_keep(cpu_pool *p, void *block, size_t bytes)
{
	cpu_pool_bucket *b = find(p, bytes);
	if (b == NULL) {
		if (p->n == p->cap) {
			size_t cap = p->cap ? 2 * p->cap : 32;
			cpu_pool_bucket *nb = realloc(p->buckets, cap * sizeof *nb);
			if (nb == NULL)
				return -1;
			p->buckets = nb;
			p->cap = cap;
		}
		b = &p->buckets[p->n++];
		*b = (cpu_pool_bucket){.bytes = bytes};
	}
	if (POOL_OLDEST_FIRST && b->tail != NULL) {
		set_next(block, NULL);
		set_next(b->tail, block);
		b->tail = block;
	} else {
		set_next(block, b->head);
		b->head = block;
		if (b->tail == NULL)
			b->tail = block;
	}
	p->bytes += bytes;
	p->blocks++;
	/* all of it but the link, which stays readable for pop */
	poison((char *)block + sizeof(void *), bytes - sizeof(void *));
	return 0;
}

void cpu_pool_trim(cpu_pool *p, size_t target)
{
	while (p->bytes > target && p->n > 0) {
		cpu_pool_bucket *b = &p->buckets[p->n - 1];
		free(pop(p, b));
		if (b->head == NULL)
			drop_bucket(p, b);
	}
}

void cpu_pool_release(cpu_pool *p)
{
	cpu_pool_trim(p, 0);
	free(p->buckets);
	*p = (cpu_pool){0};
}
