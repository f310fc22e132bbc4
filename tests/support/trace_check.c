/* The trace-event format's rules (trace_check.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "trace_check.h"

json_t *trace_load(const char *path)
{
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (j == NULL)
		fail_msg("%s:%d: %s", path, je.line, je.text);
	return j;
}

/* The format's rules, event by event and track by track.  Returns the number
 * of complete events; fills *steps with the ProfilerStep numbers seen. */
size_t trace_validate(const json_t *root, int rank, int *steps, int max_steps)
{
	assert_true(json_is_object(root));
	const json_t *evs = json_object_get(root, "traceEvents");
	assert_true(json_is_array(evs));
	assert_string_equal(json_string_value(json_object_get(root, "displayTimeUnit")), "ms");
	size_t i, n_x = 0, n_named = 0;
	json_t *ev;
	int64_t named[64];
	/* Per track: the last start and a stack of the ends of open events. */
	struct trk {
		int64_t tid;
		double last_ts, stack[64];
		int depth;
	} trk[64];
	int n_trk = 0;
	json_array_foreach(evs, i, ev) {
		const char *ph = json_string_value(json_object_get(ev, "ph"));
		assert_non_null(ph);
		assert_true(json_is_string(json_object_get(ev, "name")));
		assert_true(json_is_integer(json_object_get(ev, "pid")));
		assert_int_equal(json_integer_value(json_object_get(ev, "pid")), rank);
		assert_true(json_is_integer(json_object_get(ev, "tid")));
		int64_t tid = json_integer_value(json_object_get(ev, "tid"));
		const json_t *args = json_object_get(ev, "args");
		assert_true(args == NULL || json_is_object(args));
		const char *name = json_string_value(json_object_get(ev, "name"));
		if (strcmp(ph, "M") == 0) {
			assert_non_null(args);
			if (strcmp(name, "thread_name") == 0) {
				assert_true(json_is_string(json_object_get(args, "name")));
				assert_true(n_named < 64);
				named[n_named++] = tid;
			} else if (strcmp(name, "process_name") == 0) {
				char want[32];
				snprintf(want, sizeof want, "rank %d", rank);
				assert_string_equal(json_string_value(json_object_get(args, "name")), want);
			} else {
				assert_true(strcmp(name, "process_sort_index") == 0 ||
					    strcmp(name, "thread_sort_index") == 0);
			}
			continue;
		}
		assert_true(json_is_number(json_object_get(ev, "ts")));
		double ts = json_number_value(json_object_get(ev, "ts"));
		assert_true(ts > 0);
		assert_true(json_is_string(json_object_get(ev, "cat")));
		if (strcmp(ph, "C") == 0) {
			const char *k;
			json_t *v;
			assert_non_null(args);
			json_object_foreach((json_t *)args, k, v) assert_true(json_is_number(v));
			continue;
		}
		assert_string_equal(ph, "X");
		assert_true(json_is_number(json_object_get(ev, "dur")));
		double dur = json_number_value(json_object_get(ev, "dur"));
		assert_true(dur >= 0);
		n_x++;
		int s;
		if (sscanf(name, "ProfilerStep#%d", &s) == 1 && s < max_steps)
			steps[s] = 1;
		struct trk *t = NULL;
		for (int j = 0; j < n_trk; j++)
			if (trk[j].tid == tid)
				t = &trk[j];
		if (t == NULL) {
			assert_true(n_trk < 64);
			t = &trk[n_trk++];
			*t = (struct trk){.tid = tid, .last_ts = 0, .depth = 0};
		}
		if (ts < t->last_ts)
			fail_msg("track %lld: %s starts at %.3f before the previous start %.3f",
				 (long long)tid, name, ts, t->last_ts);
		t->last_ts = ts;
		/* Close what ended before this one starts; what stays open must
		 * enclose it (no partial overlap: complete events nest). */
		while (t->depth > 0 && t->stack[t->depth - 1] <= ts)
			t->depth--;
		if (t->depth > 0 && ts + dur > t->stack[t->depth - 1] + 1e-3)
			fail_msg("track %lld: %s [%.3f, %.3f] overlaps its parent ending %.3f",
				 (long long)tid, name, ts, ts + dur, t->stack[t->depth - 1]);
		assert_true(t->depth < 64);
		t->stack[t->depth++] = ts + dur;
	}
	for (int j = 0; j < n_trk; j++) {
		int found = 0;
		for (size_t k = 0; k < n_named; k++)
			found |= named[k] == trk[j].tid;
		if (!found)
			fail_msg("track %lld has no thread_name", (long long)trk[j].tid);
	}
	return n_x;
}

/* How many events named name have args[key] == want (want < 0: any value). */
int trace_count(const json_t *root, const char *name, const char *key, int64_t want)
{
	size_t i;
	json_t *ev;
	int n = 0;
	json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
		if (strcmp(json_string_value(json_object_get(ev, "name")), name) != 0)
			continue;
		json_t *v = json_object_get(json_object_get(ev, "args"), key);
		if (key == NULL || (v != NULL && (want < 0 || json_integer_value(v) == want)))
			n++;
	}
	return n;
}

