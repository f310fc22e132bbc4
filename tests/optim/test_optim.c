/* AdamW, clipping and the LR schedule against torchtitan's and torch's
 * definitions worked by hand, and AdamW on bfloat16 parameters against torch's
 * fused AdamW on the same numbers (tests/optim/golden, made by
 * scripts/optim_bf16_golden.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bf16.h"
#include "optim/optim.h"

static void expect_factors(const lr_schedule *s, const double *want, int n)
{
	for (int i = 0; i < n; i++) {
		double got = lr_schedule_factor(s, i);
		if (fabs(got - want[i]) > 1e-12)
			fail_msg("step index %d: factor %.15g, expected %.15g", i, got, want[i]);
	}
}

/* steps 10, warmup 2, decay_ratio 0.5: decay 5 steps, stable 10+1-2-5 = 4 (the
 * virtual last step), so decay starts at index 6. */
static void wsd_linear_sqrt_cosine_match_torchtitan(void **s)
{
	(void)s;
	lr_schedule sc;
	titan_err e = {0};
	assert_int_equal(lr_schedule_init(&sc, 10, 2, 0.5, "linear", 0, &e), 0);
	assert_int_equal(sc.decay_steps, 5);
	assert_int_equal(sc.stable_steps, 4);
	double lin[] = {0.5, 1, 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2};
	expect_factors(&sc, lin, 10);
	assert_int_equal(lr_schedule_init(&sc, 10, 2, 0.5, "sqrt", 0.1, &e), 0);
	double sq[10] = {0.5, 1, 1, 1, 1, 1};
	for (int i = 6; i < 10; i++)
		sq[i] = 0.1 + 0.9 * (1 - sqrt((i - 5) / 5.0));
	expect_factors(&sc, sq, 10);
	assert_int_equal(lr_schedule_init(&sc, 10, 2, 0.5, "cosine", 0, &e), 0);
	double co[10] = {0.5, 1, 1, 1, 1, 1};
	for (int i = 6; i < 10; i++)
		co[i] = 0.5 * (1 + cos(M_PI * (i - 5) / 5.0));
	expect_factors(&sc, co, 10);
}

/* No decay_ratio: decay over every step after warmup; the virtual last step
 * keeps the last lr above 0 (linear: 1/(steps - warmup)). */
static void default_decay_never_reaches_zero(void **s)
{
	(void)s;
	lr_schedule sc;
	titan_err e = {0};
	assert_int_equal(lr_schedule_init(&sc, 10, 3, -1, "linear", 0, &e), 0);
	assert_int_equal(sc.stable_steps, 1);
	double want[] = {1 / 3.0, 2 / 3.0, 1, 1, 6 / 7.0, 5 / 7.0, 4 / 7.0, 3 / 7.0, 2 / 7.0,
			 1 / 7.0};
	expect_factors(&sc, want, 10);
	/* warmup beyond the run is clamped to the run */
	assert_int_equal(lr_schedule_init(&sc, 4, 10, -1, "linear", 0, &e), 0);
	assert_int_equal(sc.warmup_steps, 4);
	assert_true(fabs(lr_schedule_factor(&sc, 3) - 1.0) < 1e-15);
	/* Python's round: 5 * 0.5 = 2.5 rounds to 2 */
	assert_int_equal(lr_schedule_init(&sc, 5, 1, 0.5, "linear", 0, &e), 0);
	assert_int_equal(sc.decay_steps, 2);
	assert_int_equal(lr_schedule_init(&sc, 10, 1, -1, "exp", 0, &e), -1);
	assert_non_null(strstr(e.msg, "\"exp\""));
}

static void clipping_scales_to_max_norm_and_leaves_small_gradients(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	float g[4] = {3, 0, -4, 0};
	double n = grad_clip_norm(be, g, 4, 1.0);
	assert_true(fabs(n - 5) < 1e-12);
	float c = (float)(1.0 / (5 + 1e-6));
	assert_true(g[0] == 3 * c && g[2] == -4 * c);
	float h[2] = {0.3f, 0.4f};
	n = grad_clip_norm(be, h, 2, 1.0);
	assert_true(fabs(n - 0.5) < 1e-7);
	assert_true(h[0] == 0.3f && h[1] == 0.4f);
	backend_free(be);
}

static void adamw_decays_every_parameter_unless_exempted(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	adamw_config c;
	adamw_config_default(&c);
	assert_true(c.lr == 8e-4 && c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 &&
		    c.weight_decay == 0.1);
	adamw *o = adamw_create(be, 10, &c, &e);
	assert_non_null(o);
	assert_int_equal(adamw_no_decay(o, 6, 2, &e), 0);
	assert_int_equal(adamw_no_decay(o, 2, 2, &e), 0);
	assert_int_equal(adamw_no_decay(o, 3, 2, &e), -1); /* overlaps [2, 4) */
	assert_int_equal(adamw_no_decay(o, 9, 2, &e), -1); /* past the end */
	float p[10], g[10] = {0};
	for (int i = 0; i < 10; i++)
		p[i] = 1;
	adamw_step(o, p, g, 0.5);
	assert_int_equal(adamw_get_step(o), 1);
	for (int i = 0; i < 10; i++) {
		int exempt = (i >= 2 && i < 4) || (i >= 6 && i < 8);
		assert_true(p[i] == (exempt ? 1.0f : 1.0f - 0.5f * 0.1f));
	}
	/* First step with a gradient: m/bc1 = g, sqrt(v/bc2) = |g|: a step of lr. */
	float q[1] = {0}, h[1] = {2};
	adamw *o1 = adamw_create(be, 1, &c, &e);
	assert_int_equal(adamw_no_decay(o1, 0, 1, &e), 0);
	adamw_step(o1, q, h, 0.01);
	assert_true(fabs(q[0] + 0.01) < 1e-8);
	assert_true(fabs(((float *)adamw_exp_avg(o1))[0] - 0.2) < 1e-7);
	assert_true(fabs(((float *)adamw_exp_avg_sq(o1))[0] - 0.2) < 1e-7);
	adamw_free(o1);
	adamw_free(o);
	backend_free(be);
}

/* LoRA's frozen ranges: never updated nor decayed, their states stay 0, and
 * the fused step's spans leave them out; the rest steps as before. */
static void adamw_frozen_ranges_stay_as_they_are(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	adamw_config c;
	adamw_config_default(&c);
	adamw *o = adamw_create(be, 8, &c, &e);
	assert_non_null(o);
	assert_int_equal(adamw_freeze(o, 4, 3, &e), 0);
	assert_int_equal(adamw_no_decay(o, 0, 2, &e), 0);
	assert_int_equal(adamw_no_decay(o, 5, 1, &e), -1); /* inside the frozen [4, 7) */
	float p[8], g[8];
	for (int i = 0; i < 8; i++)
		p[i] = 1, g[i] = 0.5f;
	adamw_step(o, p, g, 0.01);
	const float *m = adamw_exp_avg(o), *v = adamw_exp_avg_sq(o);
	for (int i = 0; i < 8; i++) {
		int frozen = i >= 4 && i < 7, nd = i < 2;
		/* a step of lr (m/bc1 = g, sqrt(v/bc2) = |g|), and lr * wd of decay */
		float want = frozen ? 1.0f : nd ? 1.0f - 0.01f : (1.0f - 0.01f * 0.1f) - 0.01f;
		assert_true(fabs(p[i] - want) < 1e-6);
		assert_true(frozen ? m[i] == 0 && v[i] == 0 : m[i] != 0 && v[i] != 0);
	}
	int n;
	be_span *sp = adamw_spans(o, &n, &e);
	assert_non_null(sp);
	int64_t covered = 0;
	for (int i = 0; i < n; i++) {
		assert_true(sp[i].offset + sp[i].n <= 4 || sp[i].offset >= 7);
		covered += sp[i].n;
	}
	assert_int_equal(covered, 5);
	free(sp);
	adamw_free(o);
	backend_free(be);
}

/* The golden file's doubles and its uint16 arrays. */
static json_t *golden_meta(char *bin, size_t n)
{
	const char *root = getenv("ROOT");
	char path[600];
	snprintf(path, sizeof path, "%s/tests/optim/golden/adamw_bf16.json", root ? root : ".");
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j)
		fail_msg("%s: %s (make it with PYTHON=... scripts/optim_bf16_golden.py)", path,
			 je.text);
	snprintf(bin, n, "%s/tests/optim/golden/%s", root ? root : ".",
		 json_string_value(json_object_get(j, "file")));
	return j;
}

static double num(json_t *j, const char *k)
{
	return json_number_value(json_object_get(j, k));
}

/* Bits of titan's bf16 AdamW against torch's fused one, each step from torch's
 * parameters and states after the step before (so each compares one update on
 * the same numbers; left to itself a trajectory that differs by one ulp
 * somewhere drifts, lr / sqrt(v) magnifying it).  Both compute in float32 from
 * constants derived in double and round once per stored tensor; titan follows
 * torch's expressions and fused multiply-adds, so every element must agree bit
 * for bit (a different evaluation order would show as one-ulp differences: the
 * message counts them). */
/* Muon's ranges keep no exp_avg_sq: once dropped, the states hold n + (n -
 * Muon's) elements, and AdamW's ranges on both sides of a Muon range update
 * as they do without it (their exp_avg_sq moved down, not mixed up). */
static void muon_ranges_keep_no_exp_avg_sq(void **s)
{
	(void)s;
	titan_err e = {{0}};
	backend *be = backend_cpu_create(0, &e);
	assert_non_null(be);
	adamw_config c;
	adamw_config_default(&c);
	adamw *with = adamw_create(be, 12, &c, &e), *without = adamw_create(be, 12, &c, &e);
	assert_true(with && without);
	optim_group mu = {.kind = OPTIM_MUON, .lr = 1e-3, .momentum = 0.95, .ns_steps = 5};
	assert_int_equal(adamw_set_group(with, 3, 4, &mu, &e), 0);
	assert_int_equal(adamw_no_decay(with, 9, 2, &e), 0);
	assert_int_equal(adamw_no_decay(without, 9, 2, &e), 0);
	assert_int_equal(adamw_drop_muon_states(with, &e), 0);
	assert_int_equal(adamw_exp_avg_sq_numel(with), 8);
	assert_int_equal(adamw_exp_avg_sq_numel(without), 12);
	assert_int_equal(adamw_state_bytes(with), (12 + 8) * 4);
	assert_int_equal(adamw_exp_avg_sq_index(with, 2), 2);
	assert_int_equal(adamw_exp_avg_sq_index(with, 7), 3);
	assert_int_equal(adamw_exp_avg_sq_index(with, 9), 5);
	float p[2][12], g[12];
	for (int i = 0; i < 12; i++)
		p[0][i] = p[1][i] = 1 + 0.1f * (float)i, g[i] = 0.01f * (float)(i - 5);
	for (int k = 0; k < 3; k++) {
		adamw_step(with, p[0], g, 1e-2);
		adamw_step(without, p[1], g, 1e-2);
	}
	const float *v0 = adamw_exp_avg_sq(with), *v1 = adamw_exp_avg_sq(without);
	for (int i = 0; i < 12; i++) {
		if (i >= 3 && i < 7) { /* Muon's: the plan's step updates them, not adamw_step */
			assert_true(p[0][i] == 1 + 0.1f * (float)i);
			continue;
		}
		assert_true(p[0][i] == p[1][i]);
		assert_true(v0[adamw_exp_avg_sq_index(with, (size_t)i)] == v1[i]);
	}
	adamw_free(with);
	adamw_free(without);
	backend_free(be);
}

static void bf16_adamw_matches_torch_fused_adamw(void **s)
{
	(void)s;
	char bin[700];
	json_t *j = golden_meta(bin, sizeof bin);
	json_t *sizes = json_object_get(j, "sizes");
	size_t n0 = (size_t)json_integer_value(json_array_get(sizes, 0));
	size_t n = n0 + (size_t)json_integer_value(json_array_get(sizes, 1));
	int steps = (int)json_integer_value(json_object_get(j, "steps"));
	print_message("golden: seed %lld, torch %s, %zu elements, %d steps\n",
		      (long long)json_integer_value(json_object_get(j, "seed")),
		      json_string_value(json_object_get(j, "torch")), n, steps);
	size_t total = n * (1 + 4 * (size_t)steps);
	uint16_t *gold = malloc(total * 2 + 1);
	FILE *f = fopen(bin, "rb");
	assert_non_null(gold);
	if (!f || fread(gold, 2, total + 1, f) != total)
		fail_msg("%s: expected %zu bf16 values", bin, total);
	fclose(f);
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	adamw_config c;
	adamw_config_default(&c);
	c.lr = num(j, "lr"), c.beta1 = num(j, "beta1"), c.beta2 = num(j, "beta2");
	c.eps = num(j, "eps"), c.weight_decay = num(j, "weight_decay");
	c.dtype = BE_BF16;
	adamw *o = be ? adamw_create(be, n, &c, &e) : NULL;
	if (!o || adamw_no_decay(o, n0, n - n0, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(adamw_dtype(o), BE_BF16);
	uint16_t *p = malloc(n * 2), *g = malloc(n * 2);
	assert_non_null(p), assert_non_null(g);
	size_t exact = 0, all = 0;
	for (int k = 0; k < steps; k++) {
		const uint16_t *want = gold + n + (size_t)k * 4 * n;
		memcpy(p, want - (k ? 3 : 1) * n, n * 2); /* torch's parameters before the step */
		if (k) { /* and its states (CPU backend memory is host memory) */
			memcpy(adamw_exp_avg(o), want - 2 * n, n * 2);
			memcpy(adamw_exp_avg_sq(o), want - n, n * 2);
		}
		memcpy(g, want, n * 2);
		adamw_step(o, p, g, c.lr);
		const uint16_t *got[3] = {p, adamw_exp_avg(o), adamw_exp_avg_sq(o)};
		const char *what[3] = {"param", "exp_avg", "exp_avg_sq"};
		for (int t = 0; t < 3; t++)
			for (size_t i = 0; i < n; i++) {
				uint16_t a = got[t][i], b = want[(size_t)(t + 1) * n + i];
				/* same sign: one ulp is a difference of one in the bits */
				int ulps = abs((int)a - (int)b);
				if ((a ^ b) & 0x8000)
					ulps = (a | b) & 0x7fff ? 99 : 0; /* +0 and -0 agree */
				if (ulps > 1)
					fail_msg("step %d %s[%zu]: titan %g, torch %g", k + 1, what[t], i,
						 (double)bf16_to_f32(a), (double)bf16_to_f32(b));
				exact += ulps == 0;
				all++;
			}
	}
	print_message("bit for bit: %zu of %zu, the rest within one ulp\n", exact, all);
	assert_int_equal(exact, all);
	adamw_free(o);
	backend_free(be);
	free(p), free(g), free(gold);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wsd_linear_sqrt_cosine_match_torchtitan),
		cmocka_unit_test(default_decay_never_reaches_zero),
		cmocka_unit_test(clipping_scales_to_max_norm_and_leaves_small_gradients),
		cmocka_unit_test(adamw_decays_every_parameter_unless_exempted),
		cmocka_unit_test(adamw_frozen_ranges_stay_as_they_are),
		cmocka_unit_test(bf16_adamw_matches_torch_fused_adamw),
		cmocka_unit_test(muon_ranges_keep_no_exp_avg_sq),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
