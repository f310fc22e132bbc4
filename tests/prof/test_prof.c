/* lib/prof: the traces it writes are Chrome trace-event JSON that Perfetto and
 * chrome://tracing accept (checked here against the format's rules: the
 * required fields of each phase type, one process per rank, a named track for
 * every thread and stream, complete events that nest on each track and come in
 * time order), in torchtitan's layout and schedule; the memory snapshot is
 * torch.cuda.memory._snapshot()'s layout, read back with titan's unpickler.
 * Disabled, the hooks evaluate none of their arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mfile.h"
#include "pickle/pickle.h"
#include "prof/prof.h"
#include "../support/testutil.h"
#include "../support/trace_check.h"

static int evaluated;

static int64_t count_eval(int64_t v)
{
	evaluated++;
	return v;
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void spin_us(int us)
{
	uint64_t end = prof_now() + (uint64_t)us * 1000;
	while (prof_now() < end)
		;
}

static void disabled_hooks_evaluate_nothing_and_write_nothing(void **state)
{
	(void)state;
	titan_err e = {0};
	prof_opts o = {NULL, NULL, 0, 1, 1};
	assert_int_equal(prof_start(&o, &e), 0);
	for (int64_t step = 1; step <= 3; step++) {
		prof_step_begin(step);
		assert_null(prof_on);
		PROF_T0(t);
		assert_int_equal(t, 0);
		PROF_OP(t, "matmul", PA_I("m", count_eval(1)));
		PROF_MEM_ALLOC(&step, (size_t)count_eval(8), "x");
		assert_int_equal(prof_step_end(step, &e), 0);
	}
	assert_int_equal(evaluated, 0);
	prof_stop();
}

static void bad_schedules_are_refused(void **state)
{
	(void)state;
	titan_err e = {0};
	prof_opts o = {test_path("t"), NULL, 0, 0, 1};
	assert_int_equal(prof_start(&o, &e), -1);
	assert_non_null(strstr(e.msg, "profile_freq"));
	o.freq = 4;
	o.active = 5;
	assert_int_equal(prof_start(&o, &e), -1);
	assert_non_null(strstr(e.msg, "profiler_active"));
}

typedef struct worker_arg {
	const char *name;
	int n;
} worker_arg;

static void *worker(void *p)
{
	worker_arg *w = p;
	prof_thread_name(w->name);
	for (int i = 0; i < w->n; i++) {
		PROF_T0(t);
		spin_us(20);
		PROF_OP(t, "swiglu_fwd", PA_I("n", 1024 * (i + 1)), PA_S("dtype", "float32"));
	}
	return NULL;
}

/* One training step's worth of events: phases holding ops and collectives, two
 * worker threads, two GPU streams, allocations. */
static void fake_step(int64_t step)
{
	prof_step_begin(step);
	PROF_T0(fwd);
	for (int i = 0; i < 3; i++) {
		PROF_T0(t);
		spin_us(30);
		PROF_OP(t, "matmul", PA_I("m", 64), PA_I("n", 128), PA_I("k", 32 + i),
			PA_S("dtype", "bfloat16"));
	}
	PROF_T0(c);
	spin_us(10);
	PROF_COMM(c, "all_gather", PA_I("bytes", 1 << 20), PA_I("ranks", 2));
	uint64_t g0 = prof_now();
	if (prof_on)
		prof_gpu(0, PROF_CAT_OP, "gemm_kernel", g0, g0 + 5000, (prof_arg[]){PA_I("m", 64)}, 1);
	if (prof_on)
		prof_gpu(1, PROF_CAT_COMM, "nccl_all_gather", g0 + 1000, g0 + 9000, NULL, 0);
	static char buf[3][64];
	PROF_MEM_ALLOC(buf[0], 1000, "activations");
	PROF_MEM_ALLOC(buf[1], 2000, "params");
	PROF_MEM_FREE(buf[0], 1000);
	PROF_PHASE(fwd, "forward");
	pthread_t th[2];
	worker_arg wa[2] = {{"loader", 3}, {"checkpoint", 2}};
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker, &wa[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	PROF_T0(opt);
	spin_us(10);
	PROF_PHASE(opt, "optimizer");
	PROF_MEM_FREE(buf[1], 2000);
	PROF_MEM_ALLOC(buf[2], 3000, "optimizer");
	if (prof_on)
		prof_counter("tokens", (prof_arg[]){PA_I("seen", step * 100)}, 1);
}

static bool has_track(const json_t *root, const char *name)
{
	size_t i;
	json_t *ev;
	json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
		const char *n = json_string_value(json_object_get(ev, "name"));
		const char *v = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
		if (strcmp(n, "thread_name") == 0 && v != NULL && strcmp(v, name) == 0)
			return true;
	}
	return false;
}

static void traces_follow_torchtitans_layout_and_schedule(void **state)
{
	(void)state;
	titan_err e = {0};
	char folder[300];
	snprintf(folder, sizeof folder, "%s", test_path("traces"));
	prof_opts o = {folder, NULL, 5, 3, 2};
	assert_int_equal(prof_start(&o, &e), 0);
	for (int64_t step = 1; step <= 7; step++) {
		fake_step(step);
		if (prof_step_end(step, &e))
			fail_msg("%s", e.msg);
	}
	prof_stop();
	char path[400];
	snprintf(path, sizeof path, "%s/iteration_3/rank5_trace.json", folder);
	assert_true(exists(path));
	snprintf(path, sizeof path, "%s/iteration_7", folder);
	assert_false(exists(path));
	snprintf(path, sizeof path, "%s/iteration_6/rank5_trace.json", folder);
	json_t *root = trace_load(path);
	int steps[10] = {0};
	size_t n_x = trace_validate(root, 5, steps, 10);
	print_message("iteration_6: %zu complete events\n", n_x);
	/* active = 2: steps 5 and 6 only. */
	assert_true(!steps[4] && steps[5] && steps[6] && !steps[7]);
	assert_int_equal(trace_count(root, "matmul", "k", 33), 2);
	assert_int_equal(trace_count(root, "matmul", "m", -1), 6);
	assert_int_equal(trace_count(root, "all_gather", "bytes", 1 << 20), 2);
	assert_int_equal(trace_count(root, "forward", NULL, 0), 2);
	assert_int_equal(trace_count(root, "swiglu_fwd", "n", 3072), 2);
	assert_int_equal(trace_count(root, "gemm_kernel", "m", 64), 2);
	static const char *const tracks[] = {"main", "loader", "checkpoint", "GPU stream 0",
					     "GPU stream 1"};
	for (size_t i = 0; i < sizeof tracks / sizeof tracks[0]; i++)
		if (!has_track(root, tracks[i]))
			fail_msg("no track named '%s'", tracks[i]);
	assert_true(trace_count(root, "memory", "allocated", -1) >= 8);
	assert_int_equal(trace_count(root, "tokens", "seen", 600), 1);
	json_decref(root);
}

static void trace_escapes_names_and_strings(void **state)
{
	(void)state;
	titan_err e = {0};
	prof_opts o = {test_path("esc"), NULL, 0, 1, 1};
	assert_int_equal(prof_start(&o, &e), 0);
	prof_step_begin(1);
	prof_thread_name("a \"quoted\"\tname");
	PROF_T0(t);
	PROF_OP(t, "op\\with\nodd \"chars\"", PA_S("fqn", "layers.0.\"x\"\x01"));
	assert_int_equal(prof_step_end(1, &e), 0);
	prof_stop();
	char path[400];
	snprintf(path, sizeof path, "%s/iteration_1/rank0_trace.json", test_path("esc"));
	json_t *root = trace_load(path);
	int steps[2];
	trace_validate(root, 0, steps, 2);
	assert_int_equal(trace_count(root, "op\\with\nodd \"chars\"", NULL, 0), 1);
	assert_true(has_track(root, "a \"quoted\"\tname"));
	size_t i;
	json_t *ev;
	int found = 0;
	json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
		const char *v = json_string_value(json_object_get(json_object_get(ev, "args"), "fqn"));
		found += v != NULL && strcmp(v, "layers.0.\"x\"\x01") == 0;
	}
	assert_int_equal(found, 1);
	json_decref(root);
}

static const pk_val *dget(const pk_val *d, const char *k)
{
	const pk_val *v = pk_dict_get(d, k);
	if (v == NULL)
		fail_msg("snapshot: no key '%s'", k);
	return v;
}

static void memory_snapshot_is_torchs_layout(void **state)
{
	(void)state;
	titan_err e = {0};
	prof_opts o = {NULL, test_path("mem"), 1, 2, 1};
	assert_int_equal(prof_start(&o, &e), 0);
	for (int64_t step = 1; step <= 2; step++) {
		fake_step(step);
		if (prof_step_end(step, &e))
			fail_msg("%s", e.msg);
	}
	prof_stop();
	char path[400];
	snprintf(path, sizeof path, "%s/iteration_2/rank1_memory_snapshot.pickle", test_path("mem"));
	mfile m;
	if (mfile_open(&m, path, &e))
		fail_msg("%s", e.msg);
	pk_val *root;
	pk_arena *a;
	if (pk_load(m.data, m.size, &(pk_allow){NULL}, &root, &a, &e))
		fail_msg("%s", e.msg);
	/* Two steps: alloc a, alloc b, free a, free b, alloc c each; left live:
	 * step 1's c and step 2's c (the same static buffer: one block). */
	const pk_val *segs = dget(root, "segments");
	assert_int_equal(segs->kind, PK_LIST);
	assert_int_equal(segs->n, 1);
	assert_int_equal(dget(segs->items[0], "total_size")->i, 3000);
	const pk_val *blk = dget(segs->items[0], "blocks")->items[0];
	assert_string_equal(dget(blk, "state")->s, "active_allocated");
	assert_string_equal(dget(dget(blk, "frames")->items[0], "name")->s, "optimizer");
	const pk_val *tr = dget(root, "device_traces");
	assert_int_equal(tr->n, 1);
	const pk_val *ent = tr->items[0];
	static const char *const want[] = {"alloc", "alloc", "free_requested", "free_completed",
					   "free_requested", "free_completed", "alloc"};
	assert_int_equal(ent->n, 14);
	for (size_t i = 0; i < ent->n; i++) {
		const pk_val *x = ent->items[i];
		assert_string_equal(dget(x, "action")->s, want[i % 7]);
		assert_true(dget(x, "addr")->i != 0 && dget(x, "size")->i > 0);
		assert_true(dget(x, "time_us")->i > 0);
		assert_int_equal(dget(x, "stream")->i, 0);
	}
	/* A free carries the tag of what it frees. */
	assert_string_equal(dget(dget(ent->items[3], "frames")->items[0], "name")->s, "activations");
	pk_free(a);
	mfile_close(&m);
}

static void unwritable_folder_is_an_error_naming_it(void **state)
{
	(void)state;
	titan_err e = {0};
	char file[300];
	snprintf(file, sizeof file, "%s", test_path("plainfile"));
	FILE *f = fopen(file, "w");
	assert_non_null(f);
	fclose(f);
	prof_opts o = {file, NULL, 0, 1, 1};
	assert_int_equal(prof_start(&o, &e), 0);
	prof_step_begin(1);
	assert_int_equal(prof_step_end(1, &e), -1);
	assert_non_null(strstr(e.msg, "plainfile"));
	prof_stop();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(disabled_hooks_evaluate_nothing_and_write_nothing),
		cmocka_unit_test(bad_schedules_are_refused),
		cmocka_unit_test(traces_follow_torchtitans_layout_and_schedule),
		cmocka_unit_test(trace_escapes_names_and_strings),
		cmocka_unit_test(memory_snapshot_is_torchs_layout),
		cmocka_unit_test(unwritable_folder_is_an_error_naming_it),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
