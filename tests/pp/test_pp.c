/* lib/pp on its own: every generated schedule proves sound and matches its
 * bubble formula under unit costs; the checker refuses each kind of bad
 * schedule (deadlocks named); the CSV reader refuses malformed cells with the
 * place; the split follows torchtitan's rules and messages for
 * layers_per_stage, module names and split points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp/pp.h"

static pp_schedule *csv(const char *text, int p, int n, int m, titan_err *e)
{
	pp_schedule *s = NULL;
	if (pp_schedule_parse_csv("t.csv", text, strlen(text), p, n, m, &s, e) != 0)
		return NULL;
	return s;
}

static void refused(const char *text, int p, int n, int m, const char *words)
{
	titan_err e = {0};
	pp_schedule *s = csv(text, p, n, m, &e);
	if (s != NULL || strstr(e.msg, words) == NULL)
		fail_msg("%s\n  got: %s\n  expected words: %s", text, s ? "(accepted)" : e.msg,
			 words);
}

static void every_generated_schedule_is_sound(void **state)
{
	(void)state;
	int built = 0, refused_n = 0;
	for (int k = 0; k < PP_KIND_COUNT; k++)
		for (int p = 1; p <= 6; p++)
			for (int v = 1; v <= 4; v++)
				for (int m = 1; m <= 12; m++) {
					pp_schedule *s = NULL;
					titan_err e = {0};
					if (pp_schedule_build((pp_kind)k, p, v, m, &s, &e) != 0) {
						refused_n++;
						continue;
					}
					if (pp_schedule_check(s, &e) != 0)
						fail_msg("%s p=%d v=%d m=%d: %s", pp_kind_name((pp_kind)k), p,
							 v, m, e.msg);
					assert_int_equal(s->n_stages, p * v);
					built++;
					pp_schedule_free(s);
				}
	print_message("%d schedules built and proved sound (%d argument sets refused)\n", built,
		      refused_n);
	assert_true(built > 900);
}

static void bubble_matches_each_schedules_formula(void **state)
{
	(void)state;
	int compared = 0;
	print_message("%-22s %2s %2s %3s %8s %8s\n", "schedule", "p", "v", "m", "measured",
		      "formula");
	for (int k = 0; k < PP_KIND_COUNT; k++)
		for (int p = 2; p <= 8; p *= 2)
			for (int v = 1; v <= 3; v++)
				for (int m = 1; m <= 32; m *= 2) {
					pp_schedule *s = NULL;
					titan_err e = {0};
					if (pp_schedule_build((pp_kind)k, p, v, m, &s, &e) != 0)
						continue;
					pp_sim sim;
					assert_int_equal(pp_simulate(s, &PP_COSTS_UNIT, &sim, NULL, &e), 0);
					double f = pp_bubble_formula((pp_kind)k, p, v, m);
					if (!isnan(f)) {
						if (fabs(sim.bubble - f) > 1e-12)
							fail_msg("%s p=%d v=%d m=%d: measured %.6f, formula %.6f",
								 pp_kind_name((pp_kind)k), p, v, m, sim.bubble, f);
						if (m == 8)
							print_message("%-22s %2d %2d %3d %8.4f %8.4f\n",
								      pp_kind_name((pp_kind)k), p, v, m,
								      sim.bubble, f);
						compared++;
					}
					/* Ranks do equal work: p v m forwards and backwards of 3 units. */
					assert_true(fabs(sim.busy - 3.0 * v * m) < 1e-9);
					pp_schedule_free(s);
				}
	assert_true(compared > 100);
}

static void torch_refusals_of_microbatch_counts(void **state)
{
	(void)state;
	pp_schedule *s = NULL;
	titan_err e = {0};
	assert_int_equal(pp_schedule_build(PP_1F1B, 4, 1, 3, &s, &e), -1);
	assert_string_equal(e.msg, "Number of microbatches (3) must be greater than or equal to "
			    "the number of stages (4).");
	assert_int_equal(pp_schedule_build(PP_INTERLEAVED_1F1B, 2, 2, 5, &s, &e), -1);
	assert_string_equal(e.msg, "Interleaved 1F1B requires the number of microbatches to be a "
			    "multiple of the number of rounds (2), but got 5.");
	assert_int_equal(pp_schedule_build(PP_ZBV, 2, 3, 4, &s, &e), -1);
	assert_string_equal(e.msg, "ZBV requires exactly 2 stages per rank, but got 3.");
	assert_int_equal(pp_schedule_build(PP_DUALPIPEV, 3, 2, 5, &s, &e), -1);
	assert_string_equal(e.msg, "DualPipeV requires at least as many microbatches as stages, "
			    "but got 5 microbatches and 6 stages.");
	pp_kind k;
	assert_int_equal(pp_kind_parse("interleaved1f1b", &k, &e), 0);
	assert_int_equal(k, PP_INTERLEAVED_1F1B);
	assert_int_equal(pp_kind_parse("Zigzag", &k, &e), -1);
	assert_non_null(strstr(e.msg, "Unknown schedule name 'Zigzag'"));
	int n, few;
	assert_int_equal(pp_microbatches(8, 3, 2, &n, &few, &e), -1);
	assert_string_equal(e.msg, "Batch size 8 must be divisible by microbatch_size 3. Update the "
			    "config arguments for either batch_size or "
			    "pipeline_parallel_microbatch_size.");
	assert_int_equal(pp_microbatches(8, 4, 4, &n, &few, &e), 0);
	assert_int_equal(n, 2);
	assert_int_equal(few, 1);
}

static void checker_refuses_unsound_schedules(void **state)
{
	(void)state;
	/* The deadlock of a cycle: rank 0 waits for stage 1 on rank 1, which waits
	 * for stage 2 on rank 0, which comes after. */
	refused("0F0,2F0,0F1,2F1,2B0,2B1,0B0,0B1\n3F0,1F0,1F1,3F1,3B0,3B1,1B0,1B1\n", 2, 4, 2,
		"the schedule deadlocks: rank 0 waits at action 1 (2F0) for 1F0 of rank 1; rank 1 "
		"waits at action 0 (3F0) for 2F0 of rank 0");
	/* Rank 0's first backward needs rank 1's, which comes after a forward
	 * that needs rank 0's second forward, after that backward. */
	refused("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", 2, 2, 2, "the schedule deadlocks: rank 0 "
		"waits at action 1 (0B0) for 1B0 or I of rank 1; rank 1 waits at action 0 (1F1) "
		"for 0F1 of rank 0");
	/* Three ranks round a ring: each waits for the next. */
	refused("0F0,3F0,0B0,3B0\n4F0,1F0,1B0,4B0\n5F0,2F0,2B0,5B0\n", 3, 6, 1, "deadlocks");
	refused("0F0,0F0,0B0\n1F0,1B0\n", 2, 2, 1, "Running Forward for stage 0, microbatch 0 a "
		"second time");
	refused("0F0,0B0,0I0,0W0\n1F0,1B0\n", 2, 2, 1, "after a backward of the other kind");
	refused("0F0,0W0,0I0\n1F0,1B0\n", 2, 2, 1, "Running Backward Weight for stage 0, "
		"microbatch 0 without first running Backward Input");
	refused("0F0,0I0\n1F0,1B0\n", 2, 2, 1, "Backward Input without its Backward Weight");
	refused("0F0,0F1,0B0\n1F0,1F1,1B0,1B1\n", 2, 2, 2, "stage 0, microbatch 1: no backward");
	refused("0F0,1F0,0B0\n1B0\n", 2, 2, 1, "stage 1 is also run by rank 0");
	refused("0F0,0B0\n1F0,1B0\n", 2, 3, 1, "stage 2 has no actions");
	refused("0F0,0B0,0F1\n1F0,1B0\n", 2, 2, 1, "micro-batch 1 out of range");
	/* The same lists, sound: accepted, and out-of-order consumption is fine. */
	titan_err e = {0};
	pp_schedule *s = csv("0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1\n1F1,1F0,3F0,3F1,3B0,3B1,1B0,1B1\n",
			     2, 4, 2, &e);
	assert_non_null(s);
	assert_int_equal(s->stage_rank[3], 1);
	pp_schedule_free(s);
}

static void csv_reader_names_the_bad_cell(void **state)
{
	(void)state;
	const char *ok = "0F0,0B0\n1F0,1B0\n";
	refused("0F0,0B0\n1F0,1X0\n", 2, 2, 1, "t.csv: row 2 (rank 1), cell 2 '1X0': expected an "
		"action type F, B, I or W after the stage");
	refused("0F0,0B0\n1F,1B0\n", 2, 2, 1, "cell 1 '1F': expected a microbatch number");
	refused("0F0,0B0\nF0,1B0\n", 2, 2, 1, "cell 1 'F0': expected [stage][action type]");
	refused("0F0,0B0z\n1F0,1B0\n", 2, 2, 1, "unexpected text after the microbatch");
	refused("0F0,0SEND_F0,0B0\n1F0,1B0\n", 2, 2, 1, "a communication or FSDP action");
	refused("0F0,0UNSHARD,0B0\n1F0,1B0\n", 2, 2, 1, "a communication or FSDP action");
	refused("0F0,0B0\n1F0,1B0\n", 3, 2, 1, "Schedule has incorrect number of ranks - expected "
		"3, actual 2");
	refused("0F0,0B0\n\n1F0,1B0\n", 2, 2, 1, "expected 2, actual 3");
	refused("(0F0;0F0)OVERLAP_F_B\n1F0,1B0\n", 2, 2, 1, "a forward then a backward");
	refused("(0F0;0B0)OVERLAP\n1F0,1B0\n", 2, 2, 1, "expected (FORWARD;BACKWARD)OVERLAP_F_B");
	refused("0F9999999,0B0\n1F0,1B0\n", 2, 2, 1, "expected a microbatch number");
	refused("", 1, 1, 1, "expected 1, actual 0");
	titan_err e = {0};
	/* Bubbles (empty cells), spaces, quotes, CRLF and no final newline. */
	pp_schedule *s = csv(",0F0, \"0B0\" ,\r\n,,1F0,1B0", 2, 2, 1, &e);
	assert_non_null(s);
	pp_schedule *t = csv(ok, 2, 2, 1, &e);
	assert_int_equal(pp_schedule_crc(s), pp_schedule_crc(t));
	pp_schedule_free(s);
	pp_schedule_free(t);
}

static void crc_tells_schedules_apart(void **state)
{
	(void)state;
	pp_schedule *a, *b, *c;
	titan_err e = {0};
	assert_int_equal(pp_schedule_build(PP_1F1B, 4, 1, 8, &a, &e), 0);
	assert_int_equal(pp_schedule_build(PP_1F1B, 4, 1, 8, &b, &e), 0);
	assert_int_equal(pp_schedule_build(PP_GPIPE, 4, 1, 8, &c, &e), 0);
	assert_int_equal(pp_schedule_crc(a), pp_schedule_crc(b));
	assert_int_not_equal(pp_schedule_crc(a), pp_schedule_crc(c));
	b->act[5].mb ^= 1;
	assert_int_not_equal(pp_schedule_crc(a), pp_schedule_crc(b));
	pp_schedule_free(a);
	pp_schedule_free(b);
	pp_schedule_free(c);
}

static void split_errors(const pp_split_args *a, const char *want)
{
	pp_split s;
	titan_err e = {0};
	if (pp_split_make(a, &s, &e) == 0) {
		pp_split_free(&s);
		fail_msg("split accepted; expected: %s", want);
	}
	if (strstr(e.msg, want) == NULL)
		fail_msg("got: %s\nexpected: %s", e.msg, want);
}

static void split_by_layers_per_stage(void **state)
{
	(void)state;
	/* 8 layers + 1 + 1 at 2 per stage: 5 stages, not divisible by 2. */
	pp_split_args a = {.n_layers = 8, .pp = 2, .kind = PP_INTERLEAVED_1F1B,
			   .layers_per_stage = 2, .first_less = 1, .last_less = 1};
	split_errors(&a, "Number of virtual stages (5) must be divisible by pipeline parallel "
		     "size (2). Model has 8 layers with pipeline_parallel_layers_per_stage=2. "
		     "Please adjust");
	a.layers_per_stage = 5; /* 2 stages: 1 per rank, a multi-stage schedule wants 2 */
	split_errors(&a, "Multi-stage schedule requires at least 2 stages per rank, but got 1 "
		     "stages per rank.");
	a.kind = PP_1F1B;
	a.layers_per_stage = 3; /* 4 stages: 2 per rank */
	split_errors(&a, "Single stage schedule requires exactly 1 stage per rank, but got 2 "
		     "stages per rank. Model has 8 layers with pipeline_parallel_layers_per_stage=3, "
		     "resulting in num_virtual_stages=4 across 2 PP ranks. Please increase "
		     "pipeline_parallel_layers_per_stage to 4 or higher");
	a.kind = PP_ZBV;
	a.layers_per_stage = 1; /* 10 stages on 2 ranks: a V holds 2 per rank */
	split_errors(&a, "v schedules assume 2 stages per rank, got 5");
	a.kind = PP_INTERLEAVED_1F1B;
	pp_split s;
	titan_err e = {0};
	assert_int_equal(pp_split_make(&a, &s, &e), 0);
	assert_int_equal(s.n_stages, 10);
	assert_int_equal(s.stages_per_rank, 5);
	/* 10 effective layers over 10 stages: the embedding alone, a layer each,
	 * the head alone. */
	assert_int_equal(s.u0[0], 0);
	assert_int_equal(s.u1[0], 0);
	assert_int_equal(s.u0[1], 1);
	assert_int_equal(s.u1[1], 1);
	assert_int_equal(s.u0[9], 9);
	assert_int_equal(s.u1[9], 9);
	int st[8];
	assert_int_equal(pp_split_rank_stages(&s, 1, st), 5);
	assert_int_equal(st[0], 1);
	assert_int_equal(st[1], 3);
	assert_int_equal(st[4], 9);
	pp_split_free(&s);
	/* ZBV's V: rank 0 holds stages 0 and 3 of 4. */
	pp_split_args v = {.n_layers = 4, .pp = 2, .kind = PP_ZBV, .first_less = 1,
			   .last_less = 1};
	assert_int_equal(pp_split_make(&v, &s, &e), 0);
	assert_int_equal(pp_split_rank_stages(&s, 0, st), 2);
	assert_int_equal(st[0], 0);
	assert_int_equal(st[1], 3);
	assert_int_equal(s.stage_rank[2], 1);
	pp_split_free(&s);
	/* More stages than effective layers. */
	pp_split_args many = {.n_layers = 2, .pp = 8, .kind = PP_1F1B, .first_less = 1,
			      .last_less = 1};
	split_errors(&many, "Number of stages (8) cannot be greater than effective layers (4)");
}

static void split_by_module_names(void **state)
{
	(void)state;
	const char *p0[] = {"tok_embeddings", "layers.0"}, *p1[] = {"layers.1", "layers.2"};
	const char *p2[] = {"layers.3"}, *p3[] = {"norm", "output"};
	const char *const *parts[] = {p0, p1, p2, p3};
	int len[] = {2, 2, 1, 2};
	pp_split_args a = {.n_layers = 4, .pp = 2, .kind = PP_INTERLEAVED_1F1B, .n_parts = 4,
			   .part_len = len, .parts = parts};
	pp_split s;
	titan_err e = {0};
	assert_int_equal(pp_split_make(&a, &s, &e), 0);
	int want[4][2] = {{0, 1}, {2, 3}, {4, 4}, {5, 5}};
	for (int k = 0; k < 4; k++) {
		assert_int_equal(s.u0[k], want[k][0]);
		assert_int_equal(s.u1[k], want[k][1]);
	}
	pp_split_free(&s);
	const char *bad[] = {"layers.3", "norm"};
	parts[3] = bad;
	split_errors(&a, "part 3 has norm without output");
	parts[3] = p3;
	const char *skip[] = {"layers.2"};
	parts[1] = skip;
	len[1] = 1;
	split_errors(&a, "part 1 is not the run of modules after part 0's");
	parts[1] = p1;
	len[1] = 2;
	/* the first part has no part before it to follow */
	const char *late[] = {"layers.0"};
	parts[0] = late;
	len[0] = 1;
	split_errors(&a, "part 0 is not a run of modules from tok_embeddings");
	parts[0] = p0;
	len[0] = 2;
	parts[1] = skip;
	len[1] = 1;
	const char *unknown[] = {"layers.1", "layers.9"};
	parts[1] = unknown;
	len[1] = 2;
	split_errors(&a, "part 1: unknown module 'layers.9'");
	a.kind = PP_1F1B;
	parts[1] = p1;
	split_errors(&a, "1F1B runs one stage per rank, but the stages named give 2 per rank");
	a.pp = 3;
	split_errors(&a, "num_stages 4 must be evenly divisible by pp_degree 3");
	/* torchtitan 0.1's split points: stages start at layers.2 and norm. */
	const char *points[] = {"layers.2", "norm"};
	pp_split_args b = {.n_layers = 4, .pp = 3, .kind = PP_GPIPE, .n_split_points = 2,
			   .split_points = points};
	assert_int_equal(pp_split_make(&b, &s, &e), 0);
	assert_int_equal(s.n_stages, 3);
	assert_int_equal(s.u1[0], 2);
	assert_int_equal(s.u0[1], 3);
	assert_int_equal(s.u1[1], 4);
	assert_int_equal(s.u0[2], 5);
	pp_split_free(&s);
	points[1] = "layers.1";
	split_errors(&b, "'layers.1' does not come after the previous split point");
	b.n_parts = 1;
	split_errors(&b, "set one");
}

static void print_shows_lists_and_timeline(void **state)
{
	(void)state;
	pp_schedule *s;
	titan_err e = {0};
	assert_int_equal(pp_schedule_build(PP_1F1B, 2, 1, 3, &s, &e), 0);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(pp_schedule_print(s, f, &e), 0);
	fclose(f);
	/* Rank 1 starts a unit late; B lasts two units. */
	const char *want =
		"schedule 1F1B: 2 ranks, 2 stages, 3 micro-batches\n"
		"rank 0 (stages 0): 0F0 0F1 0B0 0F2 0B1 0B2\n"
		"rank 1 (stages 1): 1F0 1B0 1F1 1B1 1F2 1B2\n"
		"timeline (F 1, B 2, I 1, W 1 units; bubble 25.0%):\n"
		"         rank 0   rank 1\n"
		"step 0   0F0\n"
		"step 1   0F1      1F0\n"
		"step 2            1B0\n"
		"step 3            ..\n"
		"step 4   0B0      1F1\n"
		"step 5   ..       1B1\n"
		"step 6   0F2      ..\n"
		"step 7   0B1      1F2\n"
		"step 8   ..       1B2\n"
		"step 9            ..\n"
		"step 10  0B2\n"
		"step 11  ..\n";
	if (strcmp(text, want) != 0)
		fail_msg("got:\n%s", text);
	free(text);
	pp_schedule_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_generated_schedule_is_sound),
		cmocka_unit_test(bubble_matches_each_schedules_formula),
		cmocka_unit_test(torch_refusals_of_microbatch_counts),
		cmocka_unit_test(checker_refuses_unsound_schedules),
		cmocka_unit_test(csv_reader_names_the_bad_cell),
		cmocka_unit_test(crc_tells_schedules_apart),
		cmocka_unit_test(split_by_layers_per_stage),
		cmocka_unit_test(split_by_module_names),
		cmocka_unit_test(print_shows_lists_and_timeline),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
