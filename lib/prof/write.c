/* The profiler's two files: the Chrome trace-event JSON of a window and the
 * memory snapshot pickle (both specified in titan-formats(5)). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "core/cli.h"
#include "core/err.h"
#include "pickle/pickle.h"
#include "prof/prof_priv.h"
#include "textin/textin.h"

/* Trace ---------------------------------------------------------------------- */

/* Per track by start; an enclosing event (longer) before what it encloses. */
static int ev_cmp(const void *a, const void *b)
{
	const event *x = a, *y = b;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->dur != y->dur)
		return x->dur > y->dur ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A JSON string, quoted as lib/textin quotes (invalid UTF-8 becomes U+FFFD,
 * so a trace always parses). */
static int put_str(afile *f, const char *s, titan_err *e)
{
	textin_buf b = {0};
	int rc = textin_json_quote(&b, s, strlen(s)) != 0 ? err_set(e, "out of memory")
							  : afile_write(f, b.p, b.n, e);
	free(b.p);
	return rc;
}

/* Microseconds since the epoch with nanosecond digits. */
static void put_us(char *out, size_t n, uint64_t ns)
{
	snprintf(out, n, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static int put_event(afile *f, const prof_state *p, const event *ev, titan_err *e)
{
	char ts[32], dur[32];
	put_us(ts, sizeof ts, p->real0 + (ev->ts - p->mono0));
	put_us(dur, sizeof dur, ev->dur);
	if (afile_printf(f, e, ",\n{\"ph\": \"%c\", \"pid\": %d, \"tid\": %" PRId32 ", \"ts\": %s",
			 ev->ph, p->rank, ev->tid, ts) ||
	    (ev->ph == 'X' && afile_printf(f, e, ", \"dur\": %s", dur)) ||
	    afile_printf(f, e, ", \"cat\": ") || put_str(f, p->strs.p + ev->cat, e) ||
	    afile_printf(f, e, ", \"name\": ") || put_str(f, p->strs.p + ev->name, e))
		return -1;
	if (ev->nargs > 0) {
		if (afile_printf(f, e, ", \"args\": {"))
			return -1;
		for (uint32_t i = 0; i < ev->nargs; i++) {
			const earg *a = &p->args[ev->arg0 + i];
			if ((i > 0 && afile_printf(f, e, ", ")) || put_str(f, p->strs.p + a->key, e) ||
			    afile_printf(f, e, ": "))
				return -1;
			if (a->is_str ? put_str(f, p->strs.p + a->s, e)
				      : afile_printf(f, e, "%" PRId64, a->i))
				return -1;
		}
		if (afile_printf(f, e, "}"))
			return -1;
	}
	return afile_printf(f, e, "}");
}

static int put_tracks(afile *f, const prof_state *p, titan_err *e)
{
	if (afile_printf(f, e, "{\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": "
			 "\"process_name\", \"args\": {\"name\": \"rank %d\"}},\n"
			 "{\"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"name\": "
			 "\"process_sort_index\", \"args\": {\"sort_index\": %d}}",
			 p->rank, p->rank, p->rank, p->rank))
		return -1;
	for (size_t i = 0; i < p->n_tracks; i++) {
		const track *t = &p->tracks[i];
		if (!t->used)
			continue; /* a thread of an earlier window */
		char name[80];
		if (t->name[0] != '\0')
			snprintf(name, sizeof name, "%s", t->name);
		else
			snprintf(name, sizeof name, "thread %" PRId32, t->tid);
		if (afile_printf(f, e, ",\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %" PRId32
				 ", \"name\": \"thread_name\", \"args\": {\"name\": ", p->rank,
				 t->tid) ||
		    put_str(f, name, e) || afile_printf(f, e, "}}") ||
		    afile_printf(f, e, ",\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %" PRId32
				 ", \"name\": \"thread_sort_index\", \"args\": {\"sort_index\": %zu}}",
				 p->rank, t->tid, i))
			return -1;
	}
	return 0;
}

int prof_write_trace(prof_state *p, const char *path, int64_t step, titan_err *e)
{
	qsort(p->ev, p->n_ev, sizeof(event), ev_cmp);
	for (size_t i = 0; i < p->n_tracks; i++) {
		track *t = &p->tracks[i];
		t->used = 0;
		for (size_t j = 0; j < p->n_ev && !t->used; j++)
			t->used = p->ev[j].tid == t->tid;
	}
	afile f;
	if (afile_open(&f, path, e))
		return -1;
	if (afile_printf(&f, e, "{\"traceEvents\": [\n") || put_tracks(&f, p, e))
		goto fail;
	for (size_t i = 0; i < p->n_ev; i++)
		if (put_event(&f, p, &p->ev[i], e))
			goto fail;
	if (afile_printf(&f, e, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": "
			 "{\"producer\": \"titan %s\", \"rank\": %d, \"first_step\": %" PRId64
			 ", \"last_step\": %" PRId64 ", \"dropped_events\": %" PRIu64 "}}\n",
			 TITAN_VERSION, p->rank, p->first_step, step, p->dropped))
		goto fail;
	return afile_commit(&f, e);
fail:
	afile_abort(&f);
	return err_prefix(e, "%s", path);
}

/* Memory snapshot ----------------------------------------------------------- */

static int set(pk_arena *a, pk_val *d, const char *key, pk_val *v)
{
	pk_val *k = pk_str(a, key);
	return k == NULL || v == NULL || pk_dict_set(a, d, k, v) ? -1 : 0;
}

static const char *tag_name(const prof_state *p, uint32_t tag)
{
	return tag < p->n_tags ? p->tags.p + p->tag_off[tag] : "unknown";
}

/* torch's frames: where the allocation came from.  titan has no Python stack;
 * the one frame names the allocation's tag. */
static pk_val *frames(pk_arena *a, const prof_state *p, uint32_t tag)
{
	pk_val *l = pk_new(a, PK_LIST), *fr = pk_new(a, PK_DICT);
	if (l == NULL || fr == NULL || set(a, fr, "filename", pk_str(a, "titan")) ||
	    set(a, fr, "line", pk_int(a, 0)) || set(a, fr, "name", pk_str(a, tag_name(p, tag))) ||
	    pk_append(a, l, fr))
		return NULL;
	return l;
}

static int trace_entry(pk_arena *a, pk_val *list, const prof_state *p, const mem_entry *m,
		       const char *action)
{
	pk_val *d = pk_new(a, PK_DICT);
	uint64_t us = (p->real0 + (m->t - p->mono0)) / 1000;
	if (d == NULL || set(a, d, "action", pk_str(a, action)) ||
	    set(a, d, "addr", pk_int(a, (int64_t)m->addr)) ||
	    set(a, d, "size", pk_int(a, (int64_t)m->bytes)) || set(a, d, "stream", pk_int(a, 0)) ||
	    set(a, d, "time_us", pk_int(a, (int64_t)us)) || set(a, d, "frames", frames(a, p, m->tag)))
		return -1;
	return pk_append(a, list, d);
}

/* One segment per live allocation (the CPU backend's allocations are its own
 * mallocs), holding one active block. */
static pk_val *segment(pk_arena *a, const prof_state *p, const live_block *b)
{
	pk_val *seg = pk_new(a, PK_DICT), *blocks = pk_new(a, PK_LIST), *blk = pk_new(a, PK_DICT);
	int64_t addr = (int64_t)b->addr, n = (int64_t)b->bytes;
	if (seg == NULL || blocks == NULL || blk == NULL || set(a, blk, "address", pk_int(a, addr)) ||
	    set(a, blk, "size", pk_int(a, n)) || set(a, blk, "requested_size", pk_int(a, n)) ||
	    set(a, blk, "state", pk_str(a, "active_allocated")) ||
	    set(a, blk, "frames", frames(a, p, b->tag)) || pk_append(a, blocks, blk) ||
	    set(a, seg, "device", pk_int(a, 0)) || set(a, seg, "address", pk_int(a, addr)) ||
	    set(a, seg, "total_size", pk_int(a, n)) || set(a, seg, "allocated_size", pk_int(a, n)) ||
	    set(a, seg, "active_size", pk_int(a, n)) || set(a, seg, "requested_size", pk_int(a, n)) ||
	    set(a, seg, "stream", pk_int(a, 0)) || set(a, seg, "segment_type", pk_str(a, "large")) ||
	    set(a, seg, "is_expandable", pk_bool(a, 0)) || set(a, seg, "frames", pk_new(a, PK_LIST)) ||
	    set(a, seg, "blocks", blocks))
		return NULL;
	return seg;
}

static int addr_cmp(const void *a, const void *b)
{
	const live_block *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static pk_val *snapshot(pk_arena *a, const prof_state *p)
{
	pk_val *root = pk_new(a, PK_DICT), *segs = pk_new(a, PK_LIST);
	pk_val *devs = pk_new(a, PK_LIST), *tr = pk_new(a, PK_LIST);
	if (root == NULL || segs == NULL || devs == NULL || tr == NULL)
		return NULL;
	live_block *live = malloc(sizeof *live * (p->n_live + 1));
	if (live == NULL)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < p->cap_live; i++)
		if (p->live[i].addr != 0)
			live[n++] = p->live[i];
	qsort(live, n, sizeof *live, addr_cmp);
	int bad = 0;
	for (size_t i = 0; i < n && !bad; i++) {
		pk_val *seg = segment(a, p, &live[i]);
		bad = seg == NULL || pk_append(a, segs, seg) != 0;
	}
	free(live);
	uint64_t cap = MEM_HISTORY, first = p->hist_next > cap ? p->hist_next - cap : 0;
	for (uint64_t i = first; i < p->hist_next && !bad; i++) {
		const mem_entry *m = &p->hist[i % cap];
		if (m->action == MEM_ALLOC)
			bad = trace_entry(a, tr, p, m, "alloc");
		else
			bad = trace_entry(a, tr, p, m, "free_requested") ||
			      trace_entry(a, tr, p, m, "free_completed");
	}
	if (bad || pk_append(a, devs, tr) || set(a, root, "segments", segs) ||
	    set(a, root, "device_traces", devs))
		return NULL;
	return root;
}

int prof_write_snapshot(prof_state *p, const char *path, titan_err *e)
{
	pk_arena *a = pk_arena_new();
	pk_val *root = a ? snapshot(a, p) : NULL;
	if (root == NULL) {
		pk_free(a);
		return err_set(e, "%s: out of memory building the memory snapshot", path);
	}
	pk_buf b = {0};
	int rc = pk_dump(&b, root, 2, e);
	pk_free(a);
	if (rc == 0)
		rc = atomic_write_file(path, b.p, b.n, e);
	free(b.p);
	return rc;
}
