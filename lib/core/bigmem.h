/* bigmem.h: host memory for blocks of many megabytes (weights, gradients,
 * optimizer states, checkpoint images) on transparent huge pages.  A fresh
 * block is otherwise faulted in 4 KiB at a time, a kernel entry per page: a
 * Flux model of 258 M parameters (4 GB of weights, gradients and AdamW)
 * spent 2.5 s of system time in page faults at every start, its checkpoint
 * saves as much again.  A block from BIGMEM_MIN bytes starts on a 2 MiB
 * boundary (x86-64's huge page, and aarch64's with 4 KiB pages) and its
 * whole 2 MiB pages are advised MADV_HUGEPAGE; the rest of it, and smaller
 * blocks, take 4 KiB pages as they are touched, so nothing is backed that
 * would not be.  32 MiB: glibc maps every block from there on its own (its
 * mmap threshold rises no higher), so the advice goes with the block when it
 * is freed instead of staying on the heap.  bigmem_alloc's blocks are
 * 64-byte aligned; every block is freed by free(). */
#ifndef TITAN_BIGMEM_H
#define TITAN_BIGMEM_H

#include <stddef.h>

#define BIGMEM_MIN ((size_t)32 << 20)

/* bytes of memory (at least 1), or NULL. */
void *bigmem_alloc(size_t bytes);
/* n * size zeroed bytes, or NULL (also when n * size overflows). */
void *bigmem_calloc(size_t n, size_t size);

#endif
