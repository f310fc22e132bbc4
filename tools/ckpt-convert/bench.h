/* bench.h: titan-ckpt-convert bench, checkpoint save and load throughput. */
#ifndef TITAN_CKPT_BENCH_H
#define TITAN_CKPT_BENCH_H

#include <stdint.h>

enum { BENCH_BOTH = 0, BENCH_SAVE = 1, BENCH_LOAD = 2 };

typedef struct bench_opts {
	uint64_t size; /* bytes of state wanted (the layout rounds it, see bench.c) */
	int chunks;    /* a world of one: write this many rank files in turn */
	int async;     /* save on a background thread after a copy */
	int phase;     /* BENCH_*: save, load (of what a save left), or both */
} bench_opts;

/* Save and/or load the bench state at DIR as every rank of the MPI job (a
 * world of one when started alone) and print MB/s on rank 0's stdout.
 * Returns 0, or exits with a message on failure. */
int ckpt_bench(const char *dir, const bench_opts *o);

#endif
