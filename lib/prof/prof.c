#include "prof/prof.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/cli.h"
#include "core/err.h"
#include "prof/prof_priv.h"

void *_Atomic prof_on;
void *_Atomic prof_mem_on;

/* Events past MAX_EVENTS in one trace are counted and dropped (the file says
 * how many), so a forgotten profiler cannot eat the machine. */
#define MAX_EVENTS (4u << 20)

static prof_state *P;

uint64_t prof_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int32_t thread_id(void) { return (int32_t)syscall(SYS_gettid); }

/* Strings ------------------------------------------------------------------ */

/* Append s to the pool; its offset, or UINT32_MAX when memory runs out. */
static uint32_t pool_add(strpool *sp, const char *s)
{
	size_t n = strlen(s) + 1;
	if (sp->len + n > sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 4096;
		while (cap < sp->len + n)
			cap *= 2;
		if (cap > UINT32_MAX)
			return UINT32_MAX;
		char *p = realloc(sp->p, cap);
		if (p == NULL)
			return UINT32_MAX;
		sp->p = p;
		sp->cap = cap;
	}
	memcpy(sp->p + sp->len, s, n);
	uint32_t off = (uint32_t)sp->len;
	sp->len += n;
	return off;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 1024;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* Tracks ------------------------------------------------------------------- */

/* The track of tid (a thread, or GPU_TRACK + stream), made on first use. */
static track *track_of(prof_state *p, int32_t tid)
{
	for (size_t i = 0; i < p->n_tracks; i++)
		if (p->tracks[i].tid == tid)
			return &p->tracks[i];
	if (grow((void **)&p->tracks, &p->cap_tracks, p->n_tracks + 1, sizeof(track)))
		return NULL;
	track *t = &p->tracks[p->n_tracks++];
	memset(t, 0, sizeof *t);
	t->tid = tid;
	return t;
}

static void set_track_name(prof_state *p, int32_t tid, const char *name)
{
	track *t = track_of(p, tid);
	if (t == NULL) {
		p->oom = 1;
		return;
	}
	snprintf(t->name, sizeof t->name, "%s", name);
}

/* Events ------------------------------------------------------------------- */

/* Append one event; called with the lock held. */
static void add_event(prof_state *p, char ph, int32_t tid, const char *cat, const char *name,
		      uint64_t t0, uint64_t t1, const prof_arg *args, int nargs)
{
	if (p->n_ev >= MAX_EVENTS) {
		p->dropped++;
		return;
	}
	if (grow((void **)&p->ev, &p->cap_ev, p->n_ev + 1, sizeof(event)) ||
	    grow((void **)&p->args, &p->cap_args, p->n_args + (size_t)nargs, sizeof(earg)) ||
	    track_of(p, tid) == NULL) {
		p->oom = 1;
		return;
	}
	event *e = &p->ev[p->n_ev];
	e->ph = ph;
	e->tid = tid;
	e->ts = t0;
	e->dur = t1 > t0 ? t1 - t0 : 0;
	e->seq = (uint32_t)p->n_ev;
	e->cat = pool_add(&p->strs, cat);
	e->name = pool_add(&p->strs, name);
	e->arg0 = (uint32_t)p->n_args;
	e->nargs = (uint32_t)nargs;
	int bad = e->cat == UINT32_MAX || e->name == UINT32_MAX;
	for (int i = 0; i < nargs && !bad; i++) {
		earg *a = &p->args[p->n_args + (size_t)i];
		a->key = pool_add(&p->strs, args[i].key);
		a->is_str = args[i].s != NULL;
		a->i = args[i].i;
		a->s = a->is_str ? pool_add(&p->strs, args[i].s) : 0;
		bad = a->key == UINT32_MAX || a->s == UINT32_MAX;
	}
	if (bad) {
		p->oom = 1;
		return;
	}
	p->n_args += (size_t)nargs;
	p->n_ev++;
}

void prof_complete(const char *cat, const char *name, uint64_t t0, const prof_arg *args,
		   int nargs)
{
	prof_state *p = prof_on;
	if (p == NULL || t0 == 0)
		return;
	uint64_t t1 = prof_now();
	int32_t tid = thread_id();
	pthread_mutex_lock(&p->lock);
	add_event(p, 'X', tid, cat, name, t0, t1, args, nargs);
	pthread_mutex_unlock(&p->lock);
}

void prof_gpu(int stream, const char *cat, const char *name, uint64_t t0, uint64_t t1,
	      const prof_arg *args, int nargs)
{
	prof_state *p = prof_on;
	if (p == NULL)
		return;
	int32_t tid = GPU_TRACK + stream;
	char label[32];
	snprintf(label, sizeof label, "GPU stream %d", stream);
	pthread_mutex_lock(&p->lock);
	track *t = track_of(p, tid);
	if (t != NULL && t->name[0] == '\0')
		snprintf(t->name, sizeof t->name, "%s", label);
	add_event(p, 'X', tid, cat, name, t0, t1, args, nargs);
	pthread_mutex_unlock(&p->lock);
}

void prof_counter(const char *name, const prof_arg *series, int n)
{
	prof_state *p = prof_on;
	if (p == NULL)
		return;
	uint64_t t = prof_now();
	pthread_mutex_lock(&p->lock);
	add_event(p, 'C', p->main_tid, "counter", name, t, t, series, n);
	pthread_mutex_unlock(&p->lock);
}

void prof_thread_name(const char *name)
{
	prof_state *p = P;
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	set_track_name(p, thread_id(), name);
	pthread_mutex_unlock(&p->lock);
}

/* Memory ------------------------------------------------------------------- */

static uint32_t tag_id(prof_state *p, const char *tag)
{
	if (tag == NULL)
		tag = "unknown";
	for (size_t i = 0; i < p->n_tags; i++)
		if (strcmp(p->tags.p + p->tag_off[i], tag) == 0)
			return (uint32_t)i;
	uint32_t off = pool_add(&p->tags, tag);
	if (off == UINT32_MAX ||
	    grow((void **)&p->tag_off, &p->cap_tags, p->n_tags + 1, sizeof(uint32_t)))
		return UINT32_MAX;
	p->tag_off[p->n_tags] = off;
	return (uint32_t)p->n_tags++;
}

/* The live allocations: open addressing on the address. */
static size_t live_slot(const prof_state *p, uint64_t addr)
{
	size_t mask = p->cap_live - 1, i = (size_t)((addr >> 4) * 0x9E3779B97F4A7C15ull) & mask;
	while (p->live[i].addr != 0 && p->live[i].addr != addr)
		i = (i + 1) & mask;
	return i;
}

static int live_put(prof_state *p, uint64_t addr, uint64_t bytes, uint32_t tag)
{
	if (2 * (p->n_live + 1) > p->cap_live) {
		size_t cap = p->cap_live ? 2 * p->cap_live : 1024;
		live_block *old = p->live;
		size_t old_cap = p->cap_live;
		live_block *nw = calloc(cap, sizeof *nw);
		if (nw == NULL)
			return -1;
		p->live = nw;
		p->cap_live = cap;
		for (size_t i = 0; i < old_cap; i++)
			if (old[i].addr != 0)
				p->live[live_slot(p, old[i].addr)] = old[i];
		free(old);
	}
	size_t i = live_slot(p, addr);
	if (p->live[i].addr == 0)
		p->n_live++;
	p->live[i] = (live_block){addr, bytes, tag};
	return 0;
}

/* The tag of a live block, UINT32_MAX when addr is not one. */
static uint32_t live_tag(const prof_state *p, uint64_t addr)
{
	if (p->cap_live == 0)
		return UINT32_MAX;
	size_t i = live_slot(p, addr);
	return p->live[i].addr != 0 ? p->live[i].tag : UINT32_MAX;
}

static void live_del(prof_state *p, uint64_t addr)
{
	if (p->cap_live == 0)
		return;
	size_t mask = p->cap_live - 1, i = live_slot(p, addr);
	if (p->live[i].addr == 0)
		return;
	p->live[i].addr = 0;
	p->n_live--;
	/* Re-place the rest of the cluster so lookups still find them. */
	for (size_t j = (i + 1) & mask; p->live[j].addr != 0; j = (j + 1) & mask) {
		live_block b = p->live[j];
		p->live[j].addr = 0;
		p->live[live_slot(p, b.addr)] = b;
	}
}

static void mem_event(prof_state *p, int action, const void *addr, size_t bytes,
		      const char *tag)
{
	uint64_t t = prof_now();
	pthread_mutex_lock(&p->lock);
	if (action == MEM_ALLOC)
		p->mem_in_use += bytes;
	else
		p->mem_in_use -= bytes < p->mem_in_use ? bytes : p->mem_in_use;
	if (p->memory_folder != NULL) {
		uint64_t a = (uint64_t)(uintptr_t)addr;
		uint32_t tg;
		if (action == MEM_ALLOC) {
			tg = tag_id(p, tag);
			if (tg == UINT32_MAX || live_put(p, a, bytes, tg))
				p->oom = 1;
		} else {
			tg = live_tag(p, a);
			live_del(p, a);
		}
		p->hist[p->hist_next % MEM_HISTORY] = (mem_entry){a, bytes, t, tg, action};
		p->hist_next++;
	}
	if (prof_on != NULL) {
		prof_arg a = PA_I("allocated", p->mem_in_use);
		add_event(p, 'C', p->main_tid, "memory", "memory", t, t, &a, 1);
	}
	pthread_mutex_unlock(&p->lock);
}

void prof_mem_alloc(const void *addr, size_t bytes, const char *tag)
{
	if (P != NULL)
		mem_event(P, MEM_ALLOC, addr, bytes, tag);
}

void prof_mem_free(const void *addr, size_t bytes)
{
	if (P != NULL)
		mem_event(P, MEM_FREE, addr, bytes, NULL);
}

/* Start, steps, stop ------------------------------------------------------- */

int prof_start(const prof_opts *o, titan_err *e)
{
	if (P != NULL)
		return err_set(e, "profiler: already started");
	if (o->freq < 1)
		return err_set(e, "profiling.profile_freq: %" PRId64 ", expected at least 1", o->freq);
	if (o->active < 1 || o->active > o->freq)
		return err_set(e, "profiling.profiler_active: %" PRId64 ", expected 1 to "
			       "profile_freq (%" PRId64 ")", o->active, o->freq);
	if (o->trace_folder == NULL && o->memory_folder == NULL)
		return 0;
	prof_state *p = calloc(1, sizeof *p);
	if (p == NULL)
		return err_set(e, "profiler: out of memory");
	pthread_mutex_init(&p->lock, NULL);
	p->rank = o->rank;
	p->freq = o->freq;
	p->active = o->active;
	p->main_tid = thread_id();
	p->trace_folder = o->trace_folder ? strdup(o->trace_folder) : NULL;
	p->memory_folder = o->memory_folder ? strdup(o->memory_folder) : NULL;
	if (o->memory_folder != NULL)
		p->hist = malloc(sizeof(mem_entry) * MEM_HISTORY);
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	p->mono0 = prof_now();
	p->real0 = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
	if ((o->trace_folder && !p->trace_folder) || (o->memory_folder && (!p->memory_folder ||
									   !p->hist))) {
		P = p;
		prof_stop();
		return err_set(e, "profiler: out of memory");
	}
	set_track_name(p, p->main_tid, "main");
	P = p;
	prof_mem_on = p;
	return 0;
}

void prof_stop(void)
{
	prof_state *p = P;
	if (p == NULL)
		return;
	prof_on = NULL;
	prof_mem_on = NULL;
	P = NULL;
	pthread_mutex_destroy(&p->lock);
	free(p->ev);
	free(p->args);
	free(p->strs.p);
	free(p->tracks);
	free(p->tags.p);
	free(p->tag_off);
	free(p->live);
	free(p->hist);
	free(p->trace_folder);
	free(p->memory_folder);
	free(p);
}

/* Whether step is one of the `active` last steps before a multiple of freq. */
static int in_window(const prof_state *p, int64_t step)
{
	return step >= 1 && (step - 1) % p->freq >= p->freq - p->active;
}

void prof_step_begin(int64_t step)
{
	prof_state *p = P;
	if (p == NULL || p->trace_folder == NULL || !in_window(p, step))
		return;
	pthread_mutex_lock(&p->lock);
	if (prof_on == NULL) {
		/* A new window: forget what an earlier one left. */
		p->n_ev = p->n_args = p->strs.len = 0;
		p->dropped = 0;
		p->first_step = step;
	}
	p->step_t0 = prof_now();
	pthread_mutex_unlock(&p->lock);
	prof_on = p;
}

/* "<folder>/iteration_<step>/rank<R>_<suffix>", its folder made. */
static char *iteration_path(const char *folder, int64_t step, int rank, const char *suffix,
			    titan_err *e)
{
	char sub[64];
	snprintf(sub, sizeof sub, "iteration_%" PRId64, step);
	char *dir = path_join(folder, sub);
	if (dir == NULL) {
		err_set(e, "profiler: out of memory");
		return NULL;
	}
	if (mkdir_p(dir, e)) {
		free(dir);
		return NULL;
	}
	char name[64];
	snprintf(name, sizeof name, "rank%d_%s", rank, suffix);
	char *path = path_join(dir, name);
	free(dir);
	if (path == NULL)
		err_set(e, "profiler: out of memory");
	return path;
}

int prof_step_end(int64_t step, titan_err *e)
{
	prof_state *p = P;
	if (p == NULL)
		return 0;
	int rc = 0;
	if (prof_on != NULL) {
		char name[48];
		snprintf(name, sizeof name, "ProfilerStep#%" PRId64, step);
		prof_complete(PROF_CAT_PHASE, name, p->step_t0, NULL, 0);
	}
	if (step % p->freq != 0)
		return 0;
	/* Under the lock: another thread's hook may still be adding. */
	pthread_mutex_lock(&p->lock);
	if (prof_on != NULL) {
		prof_on = NULL;
		char *path = iteration_path(p->trace_folder, step, p->rank, "trace.json", e);
		rc = path == NULL ? -1 : prof_write_trace(p, path, step, e);
		free(path);
	}
	if (rc == 0 && p->memory_folder != NULL) {
		char *path = iteration_path(p->memory_folder, step, p->rank,
					    "memory_snapshot.pickle", e);
		rc = path == NULL ? -1 : prof_write_snapshot(p, path, e);
		free(path);
	}
	pthread_mutex_unlock(&p->lock);
	if (rc == 0 && p->oom) {
		p->oom = 0;
		rc = err_set(e, "profiler: out of memory while recording step %" PRId64
			     ": the trace or snapshot of this window is incomplete", step);
	}
	return rc;
}
