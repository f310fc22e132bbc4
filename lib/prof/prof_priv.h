/* prof_priv.h: the profiler's state, shared by prof.c (recording) and
 * write.c (the trace JSON and the memory snapshot pickle). */
#ifndef TITAN_PROF_PRIV_H
#define TITAN_PROF_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* GPU stream s is track GPU_TRACK + s: far above any thread id Linux hands
 * out (pid_max is at most 2^22). */
#define GPU_TRACK (1 << 30)

enum { MEM_ALLOC = 0, MEM_FREE = 1 };

/* The memory history keeps the last MEM_HISTORY allocations and frees, as
 * torchtitan's _record_memory_history(max_entries=100000) does. */
#define MEM_HISTORY 100000

typedef struct strpool {
	char *p;
	size_t len, cap;
} strpool;

typedef struct event {
	uint64_t ts, dur;     /* ns, monotonic clock */
	uint32_t name, cat;   /* offsets in strs */
	uint32_t arg0, nargs; /* args[arg0 .. arg0 + nargs) */
	uint32_t seq;         /* recording order, to sort stably */
	int32_t tid;          /* track */
	char ph;              /* 'X' complete, 'C' counter */
} event;

typedef struct earg {
	uint32_t key, s; /* offsets in strs; s when is_str */
	int is_str;
	int64_t i;
} earg;

typedef struct track {
	int32_t tid;
	char name[64]; /* "" until named */
	int used;      /* has events in the window being written */
} track;

typedef struct live_block {
	uint64_t addr, bytes; /* addr 0: empty slot */
	uint32_t tag;
} live_block;

typedef struct mem_entry {
	uint64_t addr, bytes, t; /* t: ns, monotonic */
	uint32_t tag;            /* index in tag_off, UINT32_MAX: unknown */
	int action;              /* MEM_ALLOC, MEM_FREE */
} mem_entry;

typedef struct prof_state {
	pthread_mutex_t lock;
	int rank;
	int64_t freq, active;
	int32_t main_tid;
	char *trace_folder, *memory_folder;
	uint64_t mono0, real0; /* the clocks at start: ts = real0 + (t - mono0) */
	int oom;               /* a hook ran out of memory since the last write */

	/* The trace window. */
	int64_t first_step;
	uint64_t step_t0;
	event *ev;
	size_t n_ev, cap_ev;
	uint64_t dropped;
	earg *args;
	size_t n_args, cap_args;
	strpool strs;
	track *tracks;
	size_t n_tracks, cap_tracks;

	/* Memory. */
	uint64_t mem_in_use;
	strpool tags;
	uint32_t *tag_off;
	size_t n_tags, cap_tags;
	live_block *live; /* capacity a power of two */
	size_t n_live, cap_live;
	mem_entry *hist;  /* a ring of MEM_HISTORY */
	uint64_t hist_next;
} prof_state;

int prof_write_trace(prof_state *p, const char *path, int64_t step, titan_err *e);
int prof_write_snapshot(prof_state *p, const char *path, titan_err *e);

#endif
