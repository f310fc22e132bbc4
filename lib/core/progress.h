/* progress.h: a one-line progress bar on stderr, drawn only when stderr is a
 * terminal (a pipe or a log file never sees it).
 *
 *   progress pg;
 *   progress_init(&pg, "tokenize", PROGRESS_BYTES, total_bytes); (0: total unknown)
 *   ... progress_add(&pg, n); ...            cheap; redraws at most 10 times a second
 *   progress_finish(&pg, 1);                 clears the bar, prints a summary line
 *
 *   tokenize  42% [=========>            ] 1.23/2.92 GiB  45.6 MiB/s  ETA 38s
 *
 * progress_add may be called from several threads.  The summary line
 * ("titan-NAME: tokenize: 2.92 GiB in 1m04s, 46.7 MiB/s") goes to the bar's
 * stream (stderr) whether or not it is a terminal: it is a diagnostic, not a
 * drawing.  The formatting
 * functions are public so that tests and --json reports use the same units. */
#ifndef TITAN_PROGRESS_H
#define TITAN_PROGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum progress_unit {
	PROGRESS_BYTES,  /* binary prefixes: 1.50 KiB, 12.3 MiB */
	PROGRESS_TOKENS, /* decimal prefixes and "tok": 1.23M tok */
	PROGRESS_ITEMS,  /* decimal prefixes and the caller's noun: 12.3k docs */
} progress_unit;

typedef struct progress {
	FILE *fp;              /* where the bar goes */
	int tty;               /* draw at all? */
	int width;             /* terminal columns */
	const char *label;     /* not owned */
	const char *noun;      /* PROGRESS_ITEMS only; "items" when NULL */
	progress_unit unit;
	_Atomic uint64_t done;
	_Atomic uint64_t total; /* 0: unknown */
	double start;          /* monotonic seconds */
	_Atomic double next_draw;
	double interval;       /* seconds between redraws (0.1) */
	int drawn;             /* a bar is on the screen */
	pthread_mutex_t mu;    /* serialises drawing */
} progress;

/* Prepare a bar on stderr. */
void progress_init(progress *pg, const char *label, progress_unit unit, uint64_t total);
/* The same on fp; draws only when fp is a terminal. */
void progress_init_fp(progress *pg, FILE *fp, const char *label, progress_unit unit,
		      uint64_t total);
/* The noun for PROGRESS_ITEMS ("docs", "files"); not copied. */
void progress_set_noun(progress *pg, const char *noun);
void progress_set_total(progress *pg, uint64_t total);
/* Count n more units done; redraw when the interval has passed. */
void progress_add(progress *pg, uint64_t n);
/* Set the count done (for callers that know the position, e.g. a file offset). */
void progress_set(progress *pg, uint64_t done);
/* Erase the bar; with summary, print the summary line on the bar's stream.  Frees nothing
 * the caller gave; pg may be initialised again afterwards. */
void progress_finish(progress *pg, int summary);

/* Formatting, into buf of size n; each returns buf.  Three significant digits. */
/* An amount: "512 B", "1.50 KiB", "12.3 MiB"; "950 tok", "1.23M tok"; "12.3k docs". */
char *progress_fmt_amount(char *buf, size_t n, double v, progress_unit unit, const char *noun);
/* A rate: the amount per second, "45.6 MiB/s", "1.20M tok/s". */
char *progress_fmt_rate(char *buf, size_t n, double per_s, progress_unit unit, const char *noun);
/* A duration: "7s", "3m05s", "2h03m", "3d04h"; "--" when negative, NaN or infinite. */
char *progress_fmt_duration(char *buf, size_t n, double seconds);
/* The whole bar for done/total after elapsed seconds, at most width columns. */
char *progress_fmt_line(char *buf, size_t n, const progress *pg, uint64_t done, uint64_t total,
			double elapsed, int width);
/* The summary: "LABEL: AMOUNT in DURATION, RATE". */
char *progress_fmt_summary(char *buf, size_t n, const progress *pg, uint64_t done,
			   double elapsed);

/* Monotonic clock in seconds. */
double progress_now(void);

#endif
