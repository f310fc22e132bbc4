/* Unit tests of lib/trainer/state.c: what a checkpoint may bring into a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/testutil.h"
#include "backend/backend.h"
#include "loader/loader.h"
#include "model/flavor.h"
#include "model/model.h"
#include "optim/optim.h"
#include "plan/plan.h"
#include "dcp/dcp.h"
#include "trainer/state.h"

typedef struct rig {
	backend *be;
	plan *p; /* a world of one */
} rig;

static void rig_make(rig *r)
{
	titan_err err;
	const llama_args *a = flavor_find("debugmodel");
	assert_non_null(a);
	assert_non_null(r->be = backend_cpu_create(1, &err));
	plan_opts o = {.be = r->be, .args = a, .b = 1, .t = 8, .reduce = BE_F32};
	adamw_config_default(&o.adamw);
	assert_non_null(r->p = plan_create(&o, &err));
	assert_int_equal(plan_init_weights(r->p, 3, 1, &err), 0);
}

static void rig_free(rig *r)
{
	plan_free(r->p);
	backend_free(r->be);
}

static void save(const rig *r, const char *dir, int64_t step, int64_t ntokens)
{
	uint8_t lbuf[LOADER_STATE_BYTES] = {0};
	tstate s = {.p = r->p, .world = 1, .write_loader = 1, .base_lr = 1e-3, .cur_lr = 1e-3,
		    .step = step, .ntokens_seen = ntokens, .loader = lbuf, .loader_len = sizeof lbuf,
		    .dp_world = 1};
	tstate_save_opts o = {0};
	titan_err err;
	tstate_saver *sv = tstate_save_begin(dir, &s, &o, &err);
	if (sv == NULL || tstate_save_wait(sv, &err) != 0 || dcp_save_commit(dir, 1, &err) != 0)
		fail_msg("%s", err.msg);
}

/* A checkpoint's train_state drives the lr schedule and the data position:
 * a negative or absurd step (a damaged or hostile file) is refused. */
static void negative_or_absurd_train_state_is_refused(void **state)
{
	(void)state;
	rig r;
	rig_make(&r);
	const int64_t bad[][2] = {{-5, 0}, {3, -1}, {(int64_t)1 << 62, 0}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char dir[300];
		snprintf(dir, sizeof dir, "%s/bad-%zu", test_tmpdir, i);
		save(&r, dir, bad[i][0], bad[i][1]);
		tstate s = {.p = r.p, .world = 1};
		tstate_loaded got;
		titan_err err;
		assert_int_equal(tstate_load(dir, &s, 0, NULL, NULL, &got, &err), -1);
		if (strstr(err.msg, "train_state.step") == NULL)
			fail_msg("%s", err.msg);
		free(s.loader);
	}
	char dir[300];
	snprintf(dir, sizeof dir, "%s/good", test_tmpdir);
	save(&r, dir, 7, 7 * 32);
	tstate s = {.p = r.p, .world = 1};
	tstate_loaded got;
	titan_err err;
	if (tstate_load(dir, &s, 0, NULL, NULL, &got, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(s.step, 7);
	assert_int_equal(s.ntokens_seen, 7 * 32);
	free(s.loader);
	rig_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(negative_or_absurd_train_state_is_refused),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
