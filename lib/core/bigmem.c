/* bigmem.c: see bigmem.h. */
#include "core/bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *bigmem_alloc(size_t bytes)
{
	if (bytes < BIGMEM_MIN) {
		size_t padded = bytes ? (bytes + 63) / 64 * 64 : 64; /* aligned_alloc wants a multiple */
		return padded >= bytes ? aligned_alloc(64, padded) : NULL;
	}
	if (bytes > SIZE_MAX - HUGE_PAGE)
		return NULL;
	size_t whole = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	void *p = aligned_alloc(HUGE_PAGE, whole);
#ifdef MADV_HUGEPAGE
	if (p)
		(void)madvise(p, whole, MADV_HUGEPAGE); /* advice: refused, 4 KiB pages serve */
#endif
	return p;
}

void *bigmem_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	size_t bytes = n * size;
	if (bytes < BIGMEM_MIN)
		return calloc(bytes ? bytes : 1, 1);
	void *p = bigmem_alloc(bytes);
	if (p)
		memset(p, 0, bytes); /* huge pages faulted in here, 2 MiB at a time */
	return p;
}
