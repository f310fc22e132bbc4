/* move.h: memmove for bulk data, through memcpy where the two ranges do not
 * overlap.  Why: under ASan, memmove is libasan's own copy a byte at a time,
 * where memcpy checks the ranges and calls the C library's; FSDP's gathers
 * and reduces move their shards with the backend's copy, which was 4 % of a
 * 2-rank step under ASan.  The plain build copies as fast either way. */
#ifndef TITAN_MOVE_H
#define TITAN_MOVE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* memmove(dst, src, n).  Always inline: the sanitizer build's uninstrumented
 * kernels (backend/cpu_kernels.h) call it. */
static inline __attribute__((always_inline)) void move_bytes(void *dst, const void *src, size_t n)
{
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
	if (d - s >= n && s - d >= n) /* |d - s| >= n: apart */
		memcpy(dst, src, n);
	else
		memmove(dst, src, n);
}

#endif
