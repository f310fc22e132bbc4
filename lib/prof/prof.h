/* prof.h: the training profiler (torchtitan's [profiling] section).
 *
 * Traces.  Every profile_freq steps each rank writes what it did in the last
 * profiler_active steps as a Chrome trace-event JSON file, the format
 * chrome://tracing, Perfetto (ui.perfetto.dev, trace_processor) and
 * torch.profiler's export_chrome_trace share, laid out as torchtitan lays
 * them out:
 *     <trace_folder>/iteration_<N>/rank<R>_trace.json      (N % freq == 0)
 * The file holds complete events ("ph": "X") for the phases of a step (data,
 * forward, backward, optimizer, ...), every op with its shapes and element
 * types, every collective with its bytes, on the track of the CPU thread that
 * ran it; GPU work on a track per stream; counters ("ph": "C") for memory;
 * metadata naming the process "rank R" and each track.  See titan-formats(5).
 *
 * Memory snapshots (enable_memory_snapshot).  Every allocation and free the
 * backend reports is kept (the last 100000, as torch keeps its history) and
 * every profile_freq steps written as
 *     <memory_folder>/iteration_<N>/rank<R>_memory_snapshot.pickle
 * in torch.cuda.memory._snapshot()'s layout, so PyTorch's memory viewer
 * (memory_viz, torch.cuda._memory_viz) reads it.  See titan-formats(5).
 *
 * The profiler is one per process (one per rank) and is reached through
 * globals, so the backend, the comm layer and the trainer need no handle
 * passed down.  Disabled, every hook below costs one predictable branch on a
 * global pointer (prof_on, prof_mem_on) and evaluates none of its arguments.
 *
 *   prof_start(&opts, &err);                       once, after MPI_Init
 *   for step ... {
 *       prof_step_begin(step);                     recording starts if due
 *       PROF_T0(t);  ...phase...  PROF_PHASE(t, "forward");
 *       PROF_T0(t);  matmul(...); PROF_OP(t, "matmul", PA_I("m", m),
 *                                          PA_I("n", n), PA_I("k", k),
 *                                          PA_S("dtype", "bfloat16"));
 *       PROF_T0(t);  allgather(); PROF_COMM(t, "all_gather", PA_I("bytes", b),
 *                                            PA_I("ranks", 2));
 *       if (prof_step_end(step, &err)) ...         writes the files when due
 *   }
 *   prof_stop(&err);
 *
 * In the backend's allocator: PROF_MEM_ALLOC(ptr, bytes, "activations") and
 * PROF_MEM_FREE(ptr, bytes).  A CUDA backend times its kernels with events and
 * reports them with prof_gpu(stream, ...) in host nanoseconds (prof_now's
 * clock).
 *
 * Strings passed to the hooks are copied; they need not outlive the call.
 * The hooks are thread-safe.  Errors (a full disk) surface at prof_step_end. */
#ifndef TITAN_PROF_H
#define TITAN_PROF_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct prof_opts {
	const char *trace_folder;  /* <dump_folder>/<save_traces_folder>; NULL: no traces */
	const char *memory_folder; /* <dump_folder>/<save_memory_snapshot_folder>; NULL: none */
	int rank;
	int64_t freq;              /* profile_freq (>= 1) */
	int64_t active;            /* profiler_active: steps per trace, 1..freq */
} prof_opts;

/* Start the process's profiler (either folder may be NULL; both NULL is a
 * valid no-op).  Refuses freq < 1 or active outside [1, freq]. */
int prof_start(const prof_opts *o, titan_err *e);
/* Stop and free everything; writes nothing that is not due. */
void prof_stop(void);

/* Step boundaries (steps count from 1, as torchtitan's).  Recording is on
 * for steps N - active + 1 .. N of every N multiple of freq. */
void prof_step_begin(int64_t step);
/* At a step N multiple of freq: write the trace and the memory snapshot. */
int prof_step_end(int64_t step, titan_err *e);

/* An argument of an event: an integer or (when s is not NULL) a string. */
typedef struct prof_arg {
	const char *key;
	int64_t i;
	const char *s;
} prof_arg;
#define PA_I(k, v) ((prof_arg){(k), (int64_t)(v), NULL})
#define PA_S(k, v) ((prof_arg){(k), 0, (v)})

/* Event categories ("cat"). */
#define PROF_CAT_PHASE "phase"
#define PROF_CAT_OP "op"
#define PROF_CAT_COMM "comm"

/* Nanoseconds on the monotonic clock. */
uint64_t prof_now(void);

/* Non-NULL while recording (steps in a trace window); the hooks test it. */
extern void *_Atomic prof_on;
/* Non-NULL when allocations are tracked (a snapshot, or a trace's counter). */
extern void *_Atomic prof_mem_on;

/* Record a complete event [t0, now) on the calling thread's track. */
void prof_complete(const char *cat, const char *name, uint64_t t0, const prof_arg *args,
		   int nargs);
/* A complete event [t0, t1) on the track of GPU stream `stream`. */
void prof_gpu(int stream, const char *cat, const char *name, uint64_t t0, uint64_t t1,
	      const prof_arg *args, int nargs);
/* A counter sample now: each arg is one series (integers only). */
void prof_counter(const char *name, const prof_arg *series, int n);
/* Name the calling thread's track ("loader", "checkpoint"); the thread that
 * called prof_start is "main". */
void prof_thread_name(const char *name);

void prof_mem_alloc(const void *addr, size_t bytes, const char *tag);
void prof_mem_free(const void *addr, size_t bytes);

#define PROF_NARGS(...) ((int)(sizeof((prof_arg[]){__VA_ARGS__}) / sizeof(prof_arg)))
#define PROF_T0(t) uint64_t t = prof_on ? prof_now() : 0
#define PROF_EVENT_(t, cat, name, ...)                                                       \
	do {                                                                                 \
		if (__builtin_expect(prof_on != NULL, 0) && (t) != 0)                        \
			prof_complete((cat), (name), (t), (prof_arg[]){__VA_ARGS__},         \
				      PROF_NARGS(__VA_ARGS__));                              \
	} while (0)
/* PROF_PHASE takes no arguments; PROF_OP and PROF_COMM at least one. */
#define PROF_PHASE(t, name)                                                                  \
	do {                                                                                 \
		if (__builtin_expect(prof_on != NULL, 0) && (t) != 0)                        \
			prof_complete(PROF_CAT_PHASE, (name), (t), NULL, 0);                 \
	} while (0)
#define PROF_OP(t, name, ...) PROF_EVENT_(t, PROF_CAT_OP, name, __VA_ARGS__)
#define PROF_COMM(t, name, ...) PROF_EVENT_(t, PROF_CAT_COMM, name, __VA_ARGS__)
#define PROF_MEM_ALLOC(addr, bytes, tag)                                                     \
	do {                                                                                 \
		if (__builtin_expect(prof_mem_on != NULL, 0))                                \
			prof_mem_alloc((addr), (bytes), (tag));                              \
	} while (0)
#define PROF_MEM_FREE(addr, bytes)                                                           \
	do {                                                                                 \
		if (__builtin_expect(prof_mem_on != NULL, 0))                                \
			prof_mem_free((addr), (bytes));                                      \
	} while (0)

#endif
