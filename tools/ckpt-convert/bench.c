/* bench.c: titan-ckpt-convert bench.  The state is a model with its AdamW
 * state as torchtitan saves it: np parameters "layers.P.w" of (rows, 1024)
 * float32, each with optimizer.state.layers.P.w.{exp_avg, exp_avg_sq} of the
 * same shape and a scalar .step; np and rows are chosen so that the tensors
 * total about --size bytes (scripts/bench/ckpt_torch.py builds the same state
 * for torch.distributed.checkpoint).  Every tensor is split by rows into one
 * chunk per rank as torch.chunk (and DTensor's Shard(0)) splits it.
 *
 * Under mpirun every process is a rank and writes its own __R_0.distcp; alone,
 * --chunks N writes N rank files in turn.  A load reads the slice of the
 * loading job's split, whatever the saving job's was (resharding), and checks
 * every element against the value it was saved with. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/err.h"
#include "dcp/dcp.h"

#include "bench.h"

#define COLS 1024
#define TENSOR_BYTES ((uint64_t)64 << 20) /* a parameter's size, about */

typedef struct layout {
	int np;        /* parameters */
	int64_t rows;  /* of each of the 3 * np tensors */
	uint64_t bytes;
} layout;

static layout layout_of(uint64_t size)
{
	layout l;
	uint64_t per = 3 * TENSOR_BYTES;
	l.np = (int)((size + per / 2) / per);
	if (l.np < 1)
		l.np = 1;
	l.rows = (int64_t)(size / (3 * (uint64_t)l.np * COLS * 4));
	if (l.rows < 1)
		l.rows = 1;
	l.bytes = 3 * (uint64_t)l.np * (uint64_t)l.rows * COLS * 4;
	return l;
}

/* Rank r of k's rows of a tensor of `rows`: torch.chunk's sizes. */
static void chunk_rows(int64_t rows, int r, int k, int64_t *lo, int64_t *hi)
{
	int64_t cs = (rows + k - 1) / k;
	*lo = r * cs < rows ? r * cs : rows;
	*hi = *lo + cs < rows ? *lo + cs : rows;
}

/* Element g of tensor t: a hash, so that any slice can be filled or checked
 * on its own (ckpt_torch.py computes the same). */
static float value_at(uint32_t t, uint64_t g)
{
	uint32_t x = (uint32_t)g * 2654435761u + t * 40503u + 1;
	x ^= x >> 15;
	x *= 2246822519u;
	x ^= x >> 13;
	return (float)(x >> 8) * 1e-7f;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This process's rows of every tensor, [lo, hi), and the items that name
 * them (3 * np tensors, then np scalars). */
typedef struct state {
	layout l;
	int64_t lo, hi;
	size_t nt;
	char **names;
	float **data;   /* (hi - lo, COLS) each */
	float *steps;   /* (np) */
	dcp_item *items;
} state;

static const char *const field[3] = {"", ".exp_avg", ".exp_avg_sq"};

static void state_make(state *s, const layout *l, int64_t lo, int64_t hi)
{
	memset(s, 0, sizeof *s);
	s->l = *l;
	s->lo = lo;
	s->hi = hi;
	s->nt = 3 * (size_t)l->np;
	size_t n = s->nt + (size_t)l->np;
	s->names = calloc(n, sizeof *s->names);
	s->data = calloc(s->nt, sizeof *s->data);
	s->steps = calloc((size_t)l->np, sizeof *s->steps);
	s->items = calloc(n, sizeof *s->items);
	if (!s->names || !s->data || !s->steps || !s->items)
		titan_die(1, "out of memory");
	size_t bytes = (size_t)(hi - lo) * COLS * 4;
	for (size_t i = 0; i < n; i++) {
		size_t p = i < s->nt ? i / 3 : i - s->nt;
		s->names[i] = malloc(96);
		if (!s->names[i])
			titan_die(1, "out of memory");
		if (i < s->nt && i % 3 == 0)
			snprintf(s->names[i], 96, "layers.%zu.w", p);
		else if (i < s->nt)
			snprintf(s->names[i], 96, "optimizer.state.layers.%zu.w%s", p, field[i % 3]);
		else
			snprintf(s->names[i], 96, "optimizer.state.layers.%zu.w.step", p);
		if (i < s->nt && !(s->data[i] = malloc(bytes ? bytes : 1)))
			titan_die(1, "out of memory");
	}
}

static void state_free(state *s)
{
	for (size_t i = 0; i < s->nt + (size_t)s->l.np; i++)
		free(s->names[i]);
	for (size_t i = 0; i < s->nt; i++)
		free(s->data[i]);
	free(s->names);
	free(s->data);
	free(s->steps);
	free(s->items);
}

static void state_fill(state *s)
{
	for (size_t i = 0; i < s->nt; i++) {
		uint64_t g0 = (uint64_t)s->lo * COLS, n = (uint64_t)(s->hi - s->lo) * COLS;
		for (uint64_t j = 0; j < n; j++)
			s->data[i][j] = value_at((uint32_t)i, g0 + j);
	}
	for (int p = 0; p < s->l.np; p++)
		s->steps[p] = (float)(p + 1);
}

/* 0 when every element is what state_fill wrote; else names the first bad one. */
static int state_check(const state *s, int with_steps, titan_err *err)
{
	for (size_t i = 0; i < s->nt; i++) {
		uint64_t g0 = (uint64_t)s->lo * COLS, n = (uint64_t)(s->hi - s->lo) * COLS;
		for (uint64_t j = 0; j < n; j++)
			if (s->data[i][j] != value_at((uint32_t)i, g0 + j))
				return err_set(err, "%s: element %" PRIu64 " loaded as %g, saved as %g",
					       s->names[i], g0 + j, (double)s->data[i][j],
					       (double)value_at((uint32_t)i, g0 + j));
	}
	for (int p = 0; with_steps && p < s->l.np; p++)
		if (s->steps[p] != (float)(p + 1))
			return err_set(err, "%s: loaded as %g", s->names[s->nt + (size_t)p], (double)s->steps[p]);
	return 0;
}

/* The items for rows [lo, hi) (inside the state's), with the scalars when
 * with_steps; returns how many. */
static size_t state_items(state *s, int64_t lo, int64_t hi, int with_steps)
{
	int64_t shape[2] = {s->l.rows, COLS};
	size_t n = 0;
	for (size_t i = 0; i < s->nt; i++, n++) {
		dcp_item_full(&s->items[n], s->names[i], PTZ_F32, 2, shape, s->data[i] + (lo - s->lo) * COLS);
		s->items[n].offsets[0] = lo;
		s->items[n].sizes[0] = hi - lo;
	}
	for (int p = 0; with_steps && p < s->l.np; p++, n++)
		dcp_item_full(&s->items[n], s->names[s->nt + (size_t)p], PTZ_F32, 0, shape, &s->steps[p]);
	return n;
}

static void barrier(comm *w)
{
	titan_err err;
	if (comm_barrier(w, &err))
		titan_die_err(&err);
}

/* One save of the state: rank files k, this process writing rank `rank`'s
 * (a world of one: every rank's in turn).  Returns the wall seconds, all
 * ranks' files fsynced and committed; *blocked adds the caller's wait. */
static double save_once(comm *w, state *s, const char *dir, int k, const bench_opts *o,
			double *blocked)
{
	titan_err err;
	int world = comm_size(w), first = world > 1 ? comm_rank(w) : 0;
	int last = world > 1 ? first : k - 1;
	barrier(w);
	double t0 = now();
	for (int r = first; r <= last; r++) {
		int64_t lo, hi;
		chunk_rows(s->l.rows, r, k, &lo, &hi);
		size_t n = state_items(s, lo, hi, r == 0);
		dcp_save_opts so = {.async = o->async, .copy = o->async};
		double b0 = now();
		dcp_saver *sv = dcp_save_begin(dir, r, k, s->items, n, &so, &err);
		*blocked += now() - b0;
		if (!sv || dcp_save_wait(sv, &err))
			titan_die_err(&err);
	}
	barrier(w);
	if (comm_rank(w) == 0 && dcp_save_commit(dir, k, &err))
		titan_die_err(&err);
	barrier(w);
	return now() - t0;
}

static void bench_save(comm *w, state *s, const char *dir, int k, const bench_opts *o)
{
	/* An async save is timed twice: the first pays for the staging buffer's
	 * page faults, the second shows the steady state of a training run. */
	double blocked = 0, first = 0, t = 0;
	for (int rep = 0; rep < (o->async ? 2 : 1); rep++) {
		blocked = 0;
		t = save_once(w, s, dir, k, o, &blocked);
		if (rep == 0)
			first = blocked;
	}
	if (comm_rank(w) != 0)
		return;
	double mb = (double)s->l.bytes / 1e6;
	printf("save %.1f MB/s (%.2f s, %.0f MB, fsync, %d rank file%s%s)\n", mb / t, t, mb, k,
	       k == 1 ? "" : "s", o->async ? ", async" : "");
	if (o->async)
		printf("save blocked the caller %.3f s (copy; %.3f s the first time), wrote in the background\n",
		       blocked, first);
}

/* Drop DIR's files from the page cache so that loading reads the disk (they
 * are clean after the save's fsync). */
static void drop_cache(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		int fd = open(p, O_RDONLY);
		if (fd >= 0) {
			if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
				titan_warn("%s: cannot drop from the page cache", p);
			close(fd);
		}
	}
	if (d)
		closedir(d);
}

/* The load as titan-train's ranks do it: each reads its rows of a chunk
 * saved whole, and the ranks check the record together (dcp_load_parts). */
static void load_shared(comm *w, const char *dir, dcp_item *items, size_t n)
{
	titan_err err;
	dcp_ckpt c;
	dcp_parts parts = {0};
	int world = comm_size(w);
	if (dcp_open(&c, dir, &err) || dcp_load_parts(&c, items, n, world > 1 ? &parts : NULL, &err))
		titan_die_err(&err);
	dcp_close(&c);
	uint8_t *all;
	size_t n_all;
	if (comm_all_gather_bytes(w, parts.p, parts.n * sizeof *parts.p, &all, &n_all, &err) ||
	    dcp_parts_check(dir, &parts, (const dcp_part *)all, n_all / sizeof(dcp_part), &err))
		titan_die_err(&err);
	free(all);
	dcp_parts_free(&parts);
}

static void bench_load(comm *w, state *s, const char *dir)
{
	titan_err err;
	int world = comm_size(w), rank = comm_rank(w);
	for (size_t i = 0; i < s->nt; i++) /* poison: NaN everywhere */
		memset(s->data[i], 0xff, (size_t)(s->hi - s->lo) * COLS * 4);
	memset(s->steps, 0xff, (size_t)s->l.np * sizeof *s->steps);
	size_t n = state_items(s, s->lo, s->hi, 1);
	barrier(w);
	double t0 = now();
	load_shared(w, dir, s->items, n);
	barrier(w);
	double t = now() - t0;
	int bad = state_check(s, 1, &err) != 0, any = 0;
	if (bad)
		titan_warn("rank %d: %s", rank, err.msg);
	if (comm_all_reduce(w, &bad, &any, 1, COMM_I32, COMM_MAX, &err))
		titan_die_err(&err);
	if (any)
		titan_die(1, "%s: loaded state differs from the saved one", dir);
	if (rank == 0) {
		double mb = (double)s->l.bytes / 1e6;
		printf("load %.1f MB/s (%.2f s, %.0f MB, %d reader%s, checked)\n", mb / t, t, mb, world,
		       world == 1 ? "" : "s");
	}
}

int ckpt_bench(const char *dir, const bench_opts *o)
{
	titan_err err;
	comm *w;
	if (comm_init(NULL, NULL, 600, &w, &err))
		titan_die_err(&err);
	int world = comm_size(w), rank = comm_rank(w);
	if (world > 1 && o->chunks > 1 && o->chunks != world)
		titan_die(2, "--chunks %d under a job of %d ranks: each rank writes its own file", o->chunks,
			  world);
	int k = world > 1 ? world : (o->chunks > 1 ? o->chunks : 1);
	layout l = layout_of(o->size);
	int64_t lo, hi;
	chunk_rows(l.rows, rank, world, &lo, &hi);
	state s;
	state_make(&s, &l, lo, hi);
	if (o->phase != BENCH_LOAD) {
		state_fill(&s);
		bench_save(w, &s, dir, k, o);
	}
	if (o->phase == BENCH_BOTH && rank == 0)
		drop_cache(dir);
	if (o->phase != BENCH_SAVE)
		bench_load(w, &s, dir);
	fflush(stdout);
	state_free(&s);
	comm_finalize(w);
	return 0;
}
