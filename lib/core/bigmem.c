/* bigmem.c: see bigmem.h. */
#include "core/bigmem.h"

#include <stddef.h>
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
	void *p;
	if (bytes > PTRDIFF_MAX) /* no object is that big: refused before an allocator aborts */
		return NULL;
	if (posix_memalign(&p, HUGE_PAGE, bytes) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	/* the whole huge pages alone: the tail's 4 KiB pages are faulted in as
	 * far as they are used, where a huge page would take 2 MiB for it */
	(void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice only */
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
