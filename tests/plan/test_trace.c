/* Profiler traces of the plan's steps.  Run alone it traces 2 steps of a
 * world-of-one plan; tests/plan/trace.sh runs titan-train under FSDP 2 with
 * profiling on and hands this program the folder (TITAN_TRACE_DIR, with
 * TITAN_TRACE_RANKS ranks).  Every rank's file must follow the trace-event
 * format (tests/support/trace_check.c) and show the step's phases, every
 * unit's forward and backward as ops, and (with several ranks) FSDP's
 * collectives with their bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "prof/prof.h"
#include "../support/testutil.h"
#include "../support/trace_check.h"

static void check_rank(const char *dir, int rank, int ranks, int units)
{
	char path[512];
	snprintf(path, sizeof path, "%s/rank%d_trace.json", dir, rank);
	json_t *root = trace_load(path);
	int steps[4] = {0};
	size_t n = trace_validate(root, rank, steps, 4);
	print_message("%s: %zu complete events\n", path, n);
	assert_true(steps[1] && steps[2]);
	assert_true(trace_count(root, "forward_backward", NULL, -1) >= 2);
	assert_true(trace_count(root, "optimizer", NULL, -1) == 2);
	assert_true(trace_count(root, "clip_grad_norm", NULL, -1) == 2);
	for (int u = 0; u < units; u++) {
		assert_true(trace_count(root, "forward", "unit", u) >= 2);
		assert_true(trace_count(root, "backward", "unit", u) >= 2);
	}
	if (ranks > 1) {
		assert_true(trace_count(root, "all_gather", "bytes", -1) >= 2 * units);
		assert_true(trace_count(root, "reduce_scatter", "bytes", -1) >= 2 * units);
		assert_true(trace_count(root, "all_reduce", "bytes", -1) >= 2);
	}
	json_decref(root);
}

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 128, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.max_seq_len = 4096,
};

/* Alone: 2 steps of the plan of a world of one, traced. */
static void a_plans_steps_trace_validates(void **state)
{
	(void)state;
	const char *dir = getenv("TITAN_TRACE_DIR");
	if (dir) {
		int ranks = atoi(getenv("TITAN_TRACE_RANKS") ? getenv("TITAN_TRACE_RANKS") : "1");
		int units = atoi(getenv("TITAN_TRACE_UNITS") ? getenv("TITAN_TRACE_UNITS") : "8");
		for (int r = 0; r < ranks; r++)
			check_rank(dir, r, ranks, units);
		return;
	}
	titan_err e = {{0}};
	backend *be = backend_cpu_create(1, &e);
	plan_opts o = {.be = be, .args = &small, .b = 2, .t = 16, .reduce = BE_F32};
	adamw_config_default(&o.adamw);
	plan *p = plan_create(&o, &e);
	assert_non_null(p);
	assert_int_equal(plan_init_weights(p, 1, 1, &e), 0);
	prof_opts po = {.trace_folder = test_path("traces"), .rank = 0, .freq = 2, .active = 2};
	assert_int_equal(prof_start(&po, &e), 0);
	int32_t ids[32], labels[32];
	for (int i = 0; i < 32; i++)
		ids[i] = i * 7 % 128, labels[i] = i * 5 % 128;
	for (int s = 1; s <= 2; s++) {
		prof_step_begin(s);
		plan_batch b = {.inputs = ids, .labels = labels, .n_mb = 1};
		plan_result r;
		assert_int_equal(plan_step(p, &b, 1e-3, 1.0, &r, &e), 0);
		assert_int_equal(prof_step_end(s, &e), 0);
	}
	prof_stop();
	char it[300];
	snprintf(it, sizeof it, "%s/iteration_2", test_path("traces"));
	check_rank(it, 0, 1, model_num_units(plan_model(p)));
	plan_free(p);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_plans_steps_trace_validates),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
