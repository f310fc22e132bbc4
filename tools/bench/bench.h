/* bench.h: what titan-bench's subcommands share: their arguments, the report
 * each builds (an aligned table on stdout, or one JSON document with --json),
 * the timing loop and the arithmetic ceilings the figures are a percentage of
 * (float32's and bf16's, by the chains of peak.h). */
#ifndef TITAN_BENCH_H
#define TITAN_BENCH_H

#include <jansson.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef struct bench_args {
	int json;
	int threads;         /* 0: all cores */
	double seconds;      /* least time per measurement */
	const char *device;  /* "cpu", "cuda" */
	const char *profile; /* write a trace of the run into this folder */
	/* gemm */
	const char *dtypes, *shapes;
	int64_t tokens;      /* M of the model presets */
	/* attention */
	const char *attn;    /* "B,T,H,HKV,HD" or a model preset */
	int64_t seq, batch;
	int64_t docs;        /* documents per row (block-causal rows beside causal); 0: none */
	/* io */
	const char *data, *dir;
	uint64_t size;
	/* tokenize */
	const char *tokenizer, *input, *python;
	/* step */
	const char *config, *model; /* a titan-train TOML; its model.flavor replaced */
	int steps;
} bench_args;

/* Report ------------------------------------------------------------------ */

typedef struct report {
	json_t *doc;         /* {"bench", "device", "threads", "load", "cpu", "rows", ...} */
	json_t *rows;        /* one object per table row */
	json_t *unavailable; /* [{"what", "why"}] */
	json_t *notes;       /* [string] */
	double ceiling;      /* float32 FLOP/s, the best measured so far */
	double ceiling_bf16; /* bf16 FLOP/s (the float32 one below avx512_bf16; 0 at amx) */
} report;

/* A table column: the row key, its header, and printf's format for a real
 * ("%.2f"); integers and strings print as they are, a missing key as "-". */
typedef struct report_col {
	const char *key, *head, *fmt;
} report_col;

int report_init(report *r, const char *bench, const bench_args *a, titan_err *e);
void report_free(report *r);
/* A new row (appended; owned by the report). */
json_t *report_row(report *r);
/* Something the bench cannot measure here, and why; printed, never faked. */
void report_unavailable(report *r, const char *what, const char *why);
void report_note(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the table (or, with json, the document) on stdout. */
int report_emit(const report *r, const report_col *cols, int ncols, int json, titan_err *e);

/* Set a key of a row or the document (the value reference is stolen). */
void rset(json_t *o, const char *key, json_t *v);

/* Measuring ---------------------------------------------------------------- */

double bench_now(void); /* seconds, monotonic */

/* Median seconds of fn(ctx) over at least 3 runs and at least min_s seconds,
 * after one run that warms up (caches, thread pools, the backend).  be, when
 * not NULL, is synced after every run; a fault it reports ends the loop with
 * -1 and the message in e. */
double bench_time(void (*fn)(void *), void *ctx, double min_s, backend *be, titan_err *e);

/* The CPU's ceilings on `threads` threads, in FLOP/s: peak.h's chains for
 * float32 and for bf16 at the level in force, what no kernel of that element
 * type can beat on this machine under this load.  Measured before the rows
 * and again after them: the better of the two counts (a shared machine's load
 * comes and goes).  The second call adds "ceiling" (float32) and
 * "ceiling_bf16" to the document, and to every row that has "tflops" its
 * "pct_ceiling": against the bf16 ceiling where the row's "dtype" is "bf16"
 * (none at amx, where the bf16 ceiling is not measured), the float32 one
 * otherwise (float32, and float8, which the CPU backend dequantizes and
 * multiplies in float32). */
void bench_ceiling_begin(report *r, int threads);
void bench_ceiling_end(report *r, int threads);

/* A device buffer of n values drawn uniformly from [-amp, amp) by an LCG
 * seeded with seed, stored in type t (float8: with one tensorwise scale,
 * returned in *scale; 1 otherwise).  NULL with e set when memory runs out.
 * bench_release frees it (bytes as allocated). */
void *bench_operand(backend *be, be_dtype t, size_t n, float amp, uint64_t seed, float *scale,
		    titan_err *e);
void bench_release(backend *be, void *p, size_t bytes);
/* n floats of value v on the backend (float8 GEMMs' scales); NULL with e set. */
float *bench_fill_floats(backend *be, float v, size_t n, titan_err *e);

/* Whether name is an entry of the comma-separated list. */
int bench_listed(const char *list, const char *name);
/* -1 naming the first entry of list that is not in valid. */
int bench_check_list(const char *list, const char *valid, titan_err *e);

/* The CUDA device, or why there is none to measure: NULL when a CUDA bench can
 * run (not yet: the CUDA backend has not landed), else the reason. */
const char *bench_cuda_unavailable(void);

/* A model's shapes: "llama3-8b", "llama3-70b", "debugmodel" or any flavor
 * name of titan's Llama 3 table ("8B"); NULL when spec is none of them. */
struct llama_args;
const struct llama_args *bench_flavor(const char *spec);

/* Load average of the machine as "1.05 0.90 0.70". */
void bench_loadavg(char *buf, size_t n);

/* The subcommands: 0, -1 when the measurement failed, BENCH_USAGE when an
 * option's value is wrong (titan-bench exits 2 then). */
#define BENCH_USAGE (-2)
int bench_gemm(const bench_args *a, titan_err *e);
int bench_attention(const bench_args *a, titan_err *e);
int bench_io(const bench_args *a, titan_err *e);
int bench_tokenize(const bench_args *a, titan_err *e);
int bench_step(const bench_args *a, titan_err *e);
int bench_comm(const bench_args *a, titan_err *e);

#endif
