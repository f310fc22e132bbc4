/* The device arena: a list of pieces sorted by offset that covers the whole
 * region, each used or free; no two free pieces are neighbours. */
#include "gpu/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef TITAN_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct piece {
	size_t off, size;
	int used;
} piece;

struct gpu_arena {
	char *base;
	size_t size;
	int owns; /* base came from cudaMalloc */
	piece *p; /* (n), sorted by off, covering [0, size) */
	size_t n, cap;
	size_t in_use, peak, high_water;
};

static gpu_arena *arena_new(void *base, size_t bytes, int owns, titan_err *e)
{
	gpu_arena *a = calloc(1, sizeof *a);
	if (!a || !(a->p = malloc(16 * sizeof *a->p))) {
		free(a);
		err_set(e, "arena: out of host memory");
		return NULL;
	}
	a->base = base;
	a->size = bytes / GPU_ARENA_ALIGN * GPU_ARENA_ALIGN;
	a->owns = owns;
	a->cap = 16;
	a->n = 1;
	a->p[0] = (piece){0, a->size, 0};
	return a;
}

gpu_arena *gpu_arena_wrap(void *base, size_t bytes, titan_err *e)
{
	if (!base || (uintptr_t)base % GPU_ARENA_ALIGN) {
		err_set(e, "arena: base %p is not %d-byte aligned", base, GPU_ARENA_ALIGN);
		return NULL;
	}
	return arena_new(base, bytes, 0, e);
}

gpu_arena *gpu_arena_create(size_t bytes, titan_err *e)
{
#ifdef TITAN_CUDA
	void *d = NULL;
	cudaError_t rc = cudaMalloc(&d, bytes);
	if (rc != cudaSuccess) {
		cudaGetLastError();
		err_set(e, "arena: cudaMalloc of %zu bytes (%.2f GiB): %s", bytes,
			(double)bytes / (1 << 30), cudaGetErrorString(rc));
		return NULL;
	}
	gpu_arena *a = arena_new(d, bytes, 1, e);
	if (!a)
		cudaFree(d);
	return a;
#else
	(void)bytes;
	err_set(e, "arena: built without CUDA (CUDA=0)");
	return NULL;
#endif
}

void gpu_arena_free(gpu_arena *a)
{
	if (!a)
		return;
#ifdef TITAN_CUDA
	if (a->owns)
		cudaFree(a->base);
#endif
	free(a->p);
	free(a);
}

static size_t largest_free(const gpu_arena *a)
{
	size_t m = 0;
	for (size_t i = 0; i < a->n; i++)
		if (!a->p[i].used && a->p[i].size > m)
			m = a->p[i].size;
	return m;
}

void *gpu_arena_alloc(gpu_arena *a, size_t bytes, titan_err *e)
{
	size_t need = bytes == 0 ? GPU_ARENA_ALIGN
				 : (bytes + GPU_ARENA_ALIGN - 1) / GPU_ARENA_ALIGN * GPU_ARENA_ALIGN;
	if (need < bytes)
		need = SIZE_MAX; /* overflowed: no piece is that large */
	size_t i = 0;
	while (i < a->n && (a->p[i].used || a->p[i].size < need))
		i++;
	if (i == a->n) {
		err_set(e, "arena: out of device memory: %zu bytes wanted, %zu of %zu in use, "
			   "largest free piece %zu (plan a larger arena)",
			bytes, a->in_use, a->size, largest_free(a));
		return NULL;
	}
	if (a->p[i].size > need) { /* split: the rest stays free after it */
		if (a->n == a->cap) {
			piece *np = realloc(a->p, 2 * a->cap * sizeof *np);
			if (!np) {
				err_set(e, "arena: out of host memory");
				return NULL;
			}
			a->p = np;
			a->cap *= 2;
		}
		memmove(&a->p[i + 2], &a->p[i + 1], (a->n - i - 1) * sizeof *a->p);
		a->p[i + 1] = (piece){a->p[i].off + need, a->p[i].size - need, 0};
		a->p[i].size = need;
		a->n++;
	}
	a->p[i].used = 1;
	a->in_use += need;
	if (a->in_use > a->peak)
		a->peak = a->in_use;
	if (a->p[i].off + need > a->high_water)
		a->high_water = a->p[i].off + need;
	return a->base + a->p[i].off;
}

/* Remove piece i (merged into its left neighbour). */
static void drop(gpu_arena *a, size_t i)
{
	a->p[i - 1].size += a->p[i].size;
	memmove(&a->p[i], &a->p[i + 1], (a->n - i - 1) * sizeof *a->p);
	a->n--;
}

int gpu_arena_release(gpu_arena *a, void *ptr, titan_err *e)
{
	if (!ptr)
		return 0;
	char *c = ptr;
	if (c < a->base || c >= a->base + a->size)
		return err_set(e, "arena: release of %p, which is outside the arena", ptr);
	size_t off = (size_t)(c - a->base), lo = 0, hi = a->n;
	while (hi - lo > 1) { /* last piece with p.off <= off */
		size_t mid = (lo + hi) / 2;
		if (a->p[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	if (a->p[lo].off != off || !a->p[lo].used)
		return err_set(e, "arena: release of %p, which the arena did not hand out", ptr);
	a->p[lo].used = 0;
	a->in_use -= a->p[lo].size;
	if (lo + 1 < a->n && !a->p[lo + 1].used)
		drop(a, lo + 1);
	if (lo > 0 && !a->p[lo - 1].used)
		drop(a, lo);
	return 0;
}

size_t gpu_arena_size(const gpu_arena *a)
{
	return a->size;
}

size_t gpu_arena_in_use(const gpu_arena *a)
{
	return a->in_use;
}

size_t gpu_arena_peak(const gpu_arena *a)
{
	return a->peak;
}

size_t gpu_arena_high_water(const gpu_arena *a)
{
	return a->high_water;
}

void gpu_arena_reset_peak(gpu_arena *a)
{
	a->peak = a->in_use;
	a->high_water = 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->p[i].used && a->p[i].off + a->p[i].size > a->high_water)
			a->high_water = a->p[i].off + a->p[i].size;
}
