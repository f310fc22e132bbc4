/* arena.h: one device allocation made at start, handed out in pieces.
 *
 * The CUDA backend takes all its memory (weights, gradients, optimizer state,
 * activations, scratch) from one arena sized by the plan before the first step,
 * so no step calls cudaMalloc (which synchronises the device and cannot be
 * captured in a CUDA graph).  Pieces are first-fit from the start of the arena,
 * aligned to GPU_ARENA_ALIGN, and freed pieces merge with free neighbours.
 *
 * The bookkeeping is plain C over offsets: gpu_arena_wrap manages memory the
 * caller owns (any memory, so the allocator is tested without a device). */
#ifndef TITAN_GPU_ARENA_H
#define TITAN_GPU_ARENA_H

#include <stddef.h>

#include "core/err.h"

#define GPU_ARENA_ALIGN 256 /* cudaMalloc's own alignment: every vector access and cuBLASLt's best kernels */

typedef struct gpu_arena gpu_arena;

/* bytes of device memory from one cudaMalloc on the current device. */
gpu_arena *gpu_arena_create(size_t bytes, titan_err *e);
/* An arena over [base, base + bytes), which the caller owns (base aligned to
 * GPU_ARENA_ALIGN). */
gpu_arena *gpu_arena_wrap(void *base, size_t bytes, titan_err *e);
/* Frees the bookkeeping, and the device memory when gpu_arena_create made it. */
void gpu_arena_free(gpu_arena *a);

/* A piece of at least bytes (0 gives a piece of GPU_ARENA_ALIGN), or NULL with a
 * message giving the request, the arena's size, what is in use and the largest
 * free piece. */
void *gpu_arena_alloc(gpu_arena *a, size_t bytes, titan_err *e);
/* Give a piece back (NULL is ignored; a pointer the arena did not hand out is
 * reported, and ignored, by returning -1). */
int gpu_arena_release(gpu_arena *a, void *p, titan_err *e);

size_t gpu_arena_size(const gpu_arena *a);
size_t gpu_arena_in_use(const gpu_arena *a);   /* bytes in pieces now (rounded up) */
size_t gpu_arena_peak(const gpu_arena *a);     /* most in use at once since reset */
size_t gpu_arena_high_water(const gpu_arena *a); /* furthest end of a piece since reset: the
						    size this run needed, fragmentation included */
void gpu_arena_reset_peak(gpu_arena *a);

#endif
