/* AdamW, clipping and the LR schedule against torchtitan's and torch's
 * definitions worked by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "backend/backend.h"
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
	assert_true(fabs(adamw_exp_avg(o1)[0] - 0.2) < 1e-7);
	assert_true(fabs(adamw_exp_avg_sq(o1)[0] - 0.2) < 1e-7);
	adamw_free(o1);
	adamw_free(o);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(wsd_linear_sqrt_cosine_match_torchtitan),
		cmocka_unit_test(default_decay_never_reaches_zero),
		cmocka_unit_test(clipping_scales_to_max_norm_and_leaves_small_gradients),
		cmocka_unit_test(adamw_decays_every_parameter_unless_exempted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
