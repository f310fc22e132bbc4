/* lib/fluxfsdp: the Flux transformer sharded over the ranks (run alone: a
 * world of one; tests/fluxfsdp/mpi.sh runs it on 2, 3 and 4 ranks) trains
 * as the whole model does on every rank with its gradients all-reduced:
 * 3 steps of loss, gradient clipping and AdamW in float32 and in bf16
 * (FSDP's param_dtype), each rank its own batch.  On one and two ranks every
 * loss and weight is the same bits (a sum of two is the same either way; the
 * norm's float64 sum of squares adds the shards' partial sums, to 1e-12);
 * on more ranks the reduce-scatter adds in another order than the
 * all-reduce, so within float32's rounding.  Predictions run through the
 * hooks too; a rank holds its shard and the same kept buffers between steps,
 * and its rows of a
 * parameter (uneven: 26-row norms over 3 and 4 ranks, 104 rows over 3) are
 * the whole model's.  The initial rows equal flux_model_init's.  Checkpoints
 * reshard both ways: the ranks' sharded save read back by a whole model,
 * a whole model's save read back by the shards, weights and AdamW's states
 * the same bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <ftw.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "flux/flux.h"
#include "../support/testutil.h"
#include "fluxckpt/fluxckpt.h"
#include "fluxfsdp/fluxfsdp.h"
#include "optim/optim.h"

/* hidden 104 over 3 ranks is 35, 35, 34 rows; the QK norms' 26 rows over 4
 * ranks 7, 7, 7, 5 */
static const flux_config small = {
	.name = "fsdp-small", .in_channels = 16, .out_channels = 16, .vec_in_dim = 24,
	.context_in_dim = 32, .hidden_size = 104, .num_heads = 4, .depth = 2,
	.depth_single_blocks = 2, .mlp_ratio = 2.0, .axes_dim = {6, 10, 10}, .theta = 10000,
	.qkv_bias = 1,
};

enum { B = 2, LI = 12, LT = 5, STEPS = 3 };

static backend *be;
static comm *world;

typedef struct batch {
	float *x, *noise, *img_ids, *txt, *txt_ids, *t, *y;
	flux_batch in;
} batch;

/* This rank's batch for a step: every rank and step its own values. */
static void batch_make(batch *bt, int step)
{
	const flux_config *c = &small;
	uint32_t s = (uint32_t)(100 * comm_rank(world) + 10 * step);
	bt->x = test_spread(B * LI * c->in_channels, s + 1);
	bt->noise = test_spread(B * LI * c->in_channels, s + 2);
	bt->txt = test_spread(B * LT * c->context_in_dim, s + 3);
	bt->y = test_spread(B * c->vec_in_dim, s + 4);
	bt->t = malloc(B * sizeof *bt->t);
	bt->img_ids = calloc(B * LI * 3, sizeof(float));
	bt->txt_ids = calloc(B * LT * 3, sizeof(float));
	assert_true(bt->t && bt->img_ids && bt->txt_ids);
	for (int i = 0; i < B; i++) {
		bt->t[i] = 0.2f + 0.3f * (float)i + 0.05f * (float)comm_rank(world);
		for (int j = 0; j < LI; j++) {
			bt->img_ids[(i * LI + j) * 3 + 1] = (float)(j / 4);
			bt->img_ids[(i * LI + j) * 3 + 2] = (float)(j % 4);
		}
	}
	bt->in = (flux_batch){.b = B, .li = LI, .lt = LT, .c_img = c->in_channels,
			      .c_txt = c->context_in_dim, .c_vec = c->vec_in_dim, .x = bt->x,
			      .noise = bt->noise, .img_ids = bt->img_ids, .txt = bt->txt,
			      .txt_ids = bt->txt_ids, .t = bt->t, .y = bt->y,
			      .global_numel = (int64_t)B * LI * c->in_channels * comm_size(world)};
}

static void batch_free(batch *bt)
{
	float *p[] = {bt->x, bt->noise, bt->img_ids, bt->txt, bt->txt_ids, bt->t, bt->y};
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		free(p[i]);
}

static adamw *optimizer(size_t n)
{
	titan_err e;
	adamw_config c;
	adamw_config_default(&c);
	c.lr = 1e-3;
	c.weight_decay = 0.1;
	adamw *o = adamw_create(be, n, &c, &e);
	if (o == NULL)
		fail_msg("%s", e.msg);
	return o;
}

/* The whole model on this rank, its gradients all-reduced. */
typedef struct whole {
	flux_model *m;
	adamw *opt;
} whole;

/* The sharded one. */
typedef struct sharded {
	flux_model *m;
	fluxfsdp *f;
	adamw *opt;
} sharded;

/* Weights every rank gives both models: 0.3.0's init leaves modulations
 * and the final layer zero, and so most gradients; give every weight a
 * value. */
static float *weights(void)
{
	titan_err e;
	flux_model *m = flux_model_create(be, &small, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	float *w = test_spread(flux_model_numel(m), 9);
	for (int64_t i = 0; i < flux_model_numel(m); i++)
		w[i] *= 0.2f;
	flux_model_free(m);
	return w;
}

static whole whole_make(be_dtype t, const float *w)
{
	titan_err e;
	whole h = {.m = flux_model_create(be, &small, &e)};
	if (h.m == NULL || flux_model_set_compute(h.m, t, &e) != 0)
		fail_msg("%s", e.msg);
	size_t n = (size_t)flux_model_numel(h.m);
	be->ops->copy(be, flux_model_weights(h.m), w, n * sizeof(float), BACKEND_H2D);
	h.opt = optimizer(n);
	return h;
}

/* Parameter i's offset in the whole model's flat weights. */
static int64_t offset_of(const flux_model *m, int i)
{
	int64_t off = 0;
	for (int k = 0; k < i; k++)
		off += flux_param_at(m, k)->numel;
	return off;
}

static sharded sharded_make(be_dtype t, const float *w)
{
	titan_err e;
	sharded s = {.m = flux_model_create_unbound(be, &small, &e)};
	if (s.m == NULL || flux_model_set_compute(s.m, t, &e) != 0 ||
	    (s.f = fluxfsdp_create(s.m, world, NULL, world, &e)) == NULL)
		fail_msg("%s", e.msg);
	for (int i = 0; i < flux_param_count(s.m); i++) {
		fluxfsdp_rows r = fluxfsdp_param_rows(s.f, i);
		be->ops->copy(be, fluxfsdp_weights(s.f) + r.off,
			      w + offset_of(s.m, i) + r.row0 * r.cols,
			      sizeof(float) * (size_t)(r.rows * r.cols), BACKEND_H2D);
	}
	s.opt = optimizer((size_t)fluxfsdp_numel(s.f));
	return s;
}

static float whole_step(whole *h, const batch *bt, double *norm)
{
	titan_err e;
	float loss;
	size_t n = (size_t)flux_model_numel(h->m);
	float *g = flux_model_grads(h->m);
	flux_zero_grad(h->m);
	if (flux_step(h->m, &bt->in, 1, &loss, NULL, &e) != 0 ||
	    comm_all_reduce(world, g, g, n, COMM_F32, COMM_SUM, &e) != 0)
		fail_msg("%s", e.msg);
	*norm = grad_clip_norm(be, g, n, 1.0);
	adamw_step(h->opt, flux_model_weights(h->m), g, 1e-3);
	return loss;
}

static float sharded_step(sharded *s, const batch *bt, double *norm)
{
	titan_err e;
	float loss;
	if (flux_step(s->m, &bt->in, 1, &loss, NULL, &e) != 0 ||
	    fluxfsdp_clip(s->f, 1.0, norm, &e) != 0)
		fail_msg("%s", e.msg);
	adamw_step(s->opt, fluxfsdp_weights(s->f), fluxfsdp_grads(s->f), 1e-3);
	return loss;
}

/* a == b on one and two ranks, else within rel of the larger and 2e-6
 * (0.2% of AdamW's step of 1e-3: a gradient that three ranks' terms nearly
 * cancel in changes its step most under another order of the sum). */
static void same(double a, double b, double rel, const char *what, int i)
{
	if (comm_size(world) <= 2 ? a == b : fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 2e-6)
		return;
	fail_msg("%s %d: %.9g (whole) vs %.9g (sharded), %d ranks", what, i, a, b,
		 comm_size(world));
}

/* Each parameter's rows on this rank against the whole model's. */
static void rows_match(whole *h, sharded *s)
{
	size_t n = (size_t)flux_model_numel(h->m), ns = (size_t)fluxfsdp_numel(s->f);
	float *w = malloc(n * sizeof *w), *ws = malloc(ns * sizeof *ws);
	assert_true(w && ws);
	be->ops->copy(be, w, flux_model_weights(h->m), n * sizeof *w, BACKEND_D2H);
	be->ops->copy(be, ws, fluxfsdp_weights(s->f), ns * sizeof *ws, BACKEND_D2H);
	for (int i = 0; i < flux_param_count(h->m); i++) {
		fluxfsdp_rows r = fluxfsdp_param_rows(s->f, i);
		const float *a = w + offset_of(h->m, i) + r.row0 * r.cols, *b = ws + r.off;
		for (int64_t k = 0; k < r.rows * r.cols; k++)
			same(a[k], b[k], 1e-5, flux_param_at(h->m, i)->name, (int)k);
	}
	free(w);
	free(ws);
}

static void trains_as_the_whole_model(be_dtype t)
{
	float *w = weights();
	whole h = whole_make(t, w);
	sharded s = sharded_make(t, w);
	size_t shard_bytes = 2 * sizeof(float) * (size_t)fluxfsdp_numel(s.f), kept = 0;
	for (int step = 1; step <= STEPS; step++) {
		batch bt;
		batch_make(&bt, step);
		double nh, ns;
		float lh = whole_step(&h, &bt, &nh), ls = sharded_step(&s, &bt, &ns);
		same(lh, ls, 1e-6, "loss at step", step);
		/* the norm's sum of squares in float64 adds the shards' partial sums:
		 * the last bits of the double differ, not the float32 clip */
		if (fabs(nh - ns) > 1e-12 * nh + (comm_size(world) > 2 ? 1e-5 * nh : 0))
			fail_msg("grad norm at step %d: %.17g vs %.17g", step, nh, ns);
		/* between steps a rank holds its shard and the buffers kept for the
		 * units (the same ones every step: nothing left gathered, nothing
		 * allocated again) */
		size_t k = fluxfsdp_scratch_bytes(s.f);
		assert_int_equal(fluxfsdp_bytes(s.f), shard_bytes + k);
		assert_true(kept == 0 || k == kept);
		kept = k;
		batch_free(&bt);
	}
	rows_match(&h, &s);
	/* a prediction gathers each unit in turn too */
	batch bt;
	batch_make(&bt, 9);
	flux_input in = {.b = B, .li = LI, .lt = LT, .c_img = small.in_channels,
			 .c_txt = small.context_in_dim, .c_vec = small.vec_in_dim, .img = bt.x,
			 .img_ids = bt.img_ids, .txt = bt.txt, .txt_ids = bt.txt_ids, .t = bt.t,
			 .y = bt.y};
	int64_t np = B * LI * small.out_channels;
	float *ph = malloc((size_t)np * sizeof *ph), *ps = malloc((size_t)np * sizeof *ps);
	titan_err e;
	assert_true(ph && ps);
	if (flux_predict(h.m, &in, ph, &e) != 0 || flux_predict(s.m, &in, ps, &e) != 0)
		fail_msg("%s", e.msg);
	for (int64_t k = 0; k < np; k++)
		same(ph[k], ps[k], 1e-4, "prediction", (int)k);
	/* more than one rank: the most held at once (the shard, one unit's
	 * weights, gathers and gradients) is under the whole model's weights
	 * and gradients */
	size_t whole_bytes = 2 * sizeof(float) * (size_t)flux_model_numel(h.m);
	if (comm_size(world) > 1)
		assert_true(fluxfsdp_peak_bytes(s.f) < whole_bytes);
	free(ph);
	free(ps);
	batch_free(&bt);
	adamw_free(h.opt);
	adamw_free(s.opt);
	flux_model_free(h.m);
	fluxfsdp_free(s.f);
	flux_model_free(s.m);
	free(w);
}

static void float32_trains_as_the_whole_model(void **state)
{
	(void)state;
	trains_as_the_whole_model(BE_F32);
}

static void bf16_trains_as_the_whole_model(void **state)
{
	(void)state;
	trains_as_the_whole_model(BE_BF16);
}

/* Each rank's rows of flux_model_init's values, and the padding zero. */
static void init_draws_the_whole_models_rows(void **state)
{
	(void)state;
	titan_err e;
	flux_model *m = flux_model_create(be, &small, &e), *u = NULL;
	fluxfsdp *f = NULL;
	if (m == NULL || flux_model_init(m, 5, &e) != 0 ||
	    (u = flux_model_create_unbound(be, &small, &e)) == NULL ||
	    (f = fluxfsdp_create(u, world, NULL, world, &e)) == NULL || fluxfsdp_init(f, 5, &e) != 0)
		fail_msg("%s", e.msg);
	size_t n = (size_t)flux_model_numel(m), ns = (size_t)fluxfsdp_numel(f);
	float *w = malloc(n * sizeof *w), *ws = malloc(ns * sizeof *ws);
	char *seen = calloc(ns, 1);
	assert_true(w && ws && seen);
	be->ops->copy(be, w, flux_model_weights(m), n * sizeof *w, BACKEND_D2H);
	be->ops->copy(be, ws, fluxfsdp_weights(f), ns * sizeof *ws, BACKEND_D2H);
	int64_t rows = 0;
	for (int i = 0; i < flux_param_count(m); i++) {
		fluxfsdp_rows r = fluxfsdp_param_rows(f, i);
		size_t k = (size_t)(r.rows * r.cols);
		assert_memory_equal(ws + r.off, w + offset_of(m, i) + r.row0 * r.cols, k * 4);
		memset(seen + r.off, 1, k);
		rows += r.rows;
	}
	for (size_t k = 0; k < ns; k++)
		if (!seen[k])
			assert_true(ws[k] == 0.0f);
	/* every row of every parameter on exactly one rank */
	int64_t all = 0, mine = rows;
	for (int i = 0; i < flux_param_count(m); i++)
		all += flux_param_at(m, i)->shape[0];
	if (comm_all_reduce(world, &mine, &mine, 1, COMM_I64, COMM_SUM, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(mine, all);
	free(w);
	free(ws);
	free(seen);
	fluxfsdp_free(f);
	flux_model_free(u);
	flux_model_free(m);
}

/* n floats of backend memory as a host copy. */
static float *host_copy(const float *dev, size_t n)
{
	titan_err e;
	float *h = malloc(n * sizeof *h + 1);
	assert_non_null(h);
	be->ops->copy(be, h, dev, n * sizeof *h, BACKEND_D2H);
	assert_int_equal(be->ops->sync(be, &e), 0);
	return h;
}

/* Each parameter's rows of the shard's three runs (weights, exp_avg,
 * exp_avg_sq) against the whole model's, byte for byte. */
static void shard_rows_equal(whole *h, sharded *s)
{
	size_t n = (size_t)flux_model_numel(h->m), ns = (size_t)fluxfsdp_numel(s->f);
	const float *wd[3] = {flux_model_weights(h->m), adamw_exp_avg(h->opt),
			      adamw_exp_avg_sq(h->opt)};
	const float *sd[3] = {fluxfsdp_weights(s->f), adamw_exp_avg(s->opt),
			      adamw_exp_avg_sq(s->opt)};
	for (int k = 0; k < 3; k++) {
		float *a = host_copy(wd[k], n), *b = host_copy(sd[k], ns);
		for (int i = 0; i < flux_param_count(h->m); i++) {
			fluxfsdp_rows r = fluxfsdp_param_rows(s->f, i);
			assert_memory_equal(a + offset_of(h->m, i) + r.row0 * r.cols, b + r.off,
					    sizeof(float) * (size_t)(r.rows * r.cols));
		}
		free(a);
		free(b);
	}
	assert_int_equal(adamw_get_step(h->opt), adamw_get_step(s->opt));
}

/* One directory name for every rank (rank 0's pid). */
static void shared_dir(char *dir, size_t n, const char *what)
{
	titan_err e;
	int64_t pid = (int64_t)getpid();
	if (comm_broadcast(world, &pid, 1, COMM_I64, 0, &e) != 0)
		fail_msg("%s", e.msg);
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, n, "%s/fluxfsdp-%lld-%s", tmp && *tmp ? tmp : "/tmp", (long long)pid, what);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(path);
}

static void remove_tree(const char *dir)
{
	assert_int_equal(nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void barrier(void)
{
	titan_err e;
	if (comm_barrier(world, &e) != 0)
		fail_msg("%s", e.msg);
}

static void checkpoints_reshard_both_ways(void **state)
{
	(void)state;
	titan_err e;
	float *w = weights();
	whole h = whole_make(BE_F32, w);
	sharded s = sharded_make(BE_F32, w);
	batch bt;
	batch_make(&bt, 1);
	double norm;
	whole_step(&h, &bt, &norm);
	sharded_step(&s, &bt, &norm); /* AdamW's states not zero */
	batch_free(&bt);
	char d1[512], d2[512];
	shared_dir(d1, sizeof d1, "sharded");
	shared_dir(d2, sizeof d2, "whole");
	/* the ranks' rows saved together, read by a whole model on each rank */
	fluxckpt_state ss = {.model = s.m, .fsdp = s.f, .rank = comm_rank(world),
			     .world = comm_size(world), .opt = s.opt, .base_lr = 1e-3, .cur_lr = 1e-3,
			     .step = 1, .last_epoch = 1};
	fluxckpt_save_opts o = {.no_fsync = 1};
	if (fluxckpt_save(d1, &ss, &o, &e) != 0)
		fail_msg("%s", e.msg);
	barrier();
	if (comm_rank(world) == 0 && fluxckpt_save_commit(d1, comm_size(world), &e) != 0)
		fail_msg("%s", e.msg);
	barrier();
	whole back = whole_make(BE_F32, w);
	fluxckpt_state bs = {.model = back.m, .opt = back.opt};
	fluxckpt_loaded got;
	if (fluxckpt_load(d1, &bs, 0, 0, &got, &e) != 0)
		fail_msg("%s", e.msg);
	assert_true(got.parts & FLUXCKPT_OPTIMIZER);
	shard_rows_equal(&back, &s);
	/* a whole model's save (rank 0's) read by the shards */
	fluxckpt_state hs = {.model = h.m, .opt = h.opt, .base_lr = 1e-3, .cur_lr = 1e-3,
			     .step = 1, .last_epoch = 1};
	if (comm_rank(world) == 0 && fluxckpt_save(d2, &hs, &o, &e) != 0)
		fail_msg("%s", e.msg);
	barrier();
	sharded into = sharded_make(BE_F32, w);
	fluxckpt_state is = {.model = into.m, .fsdp = into.f, .opt = into.opt};
	if (fluxckpt_load(d2, &is, 0, 0, &got, &e) != 0)
		fail_msg("%s", e.msg);
	shard_rows_equal(&h, &into);
	barrier();
	if (comm_rank(world) == 0) {
		remove_tree(d1);
		remove_tree(d2);
	}
	whole *wh[] = {&h, &back};
	for (int i = 0; i < 2; i++) {
		adamw_free(wh[i]->opt);
		flux_model_free(wh[i]->m);
	}
	sharded *sh[] = {&s, &into};
	for (int i = 0; i < 2; i++) {
		adamw_free(sh[i]->opt);
		fluxfsdp_free(sh[i]->f);
		flux_model_free(sh[i]->m);
	}
	free(w);
}

/* An unbound model without hooks refuses a step rather than reading NULL. */
static void unbound_model_without_hooks_is_refused(void **state)
{
	(void)state;
	titan_err e;
	flux_model *u = flux_model_create_unbound(be, &small, &e);
	assert_non_null(u);
	batch bt;
	batch_make(&bt, 1);
	float loss;
	assert_int_equal(flux_step(u, &bt.in, 1, &loss, NULL, &e), -1);
	assert_non_null(strstr(e.msg, "unit hooks"));
	assert_int_equal(flux_model_init(u, 1, &e), -1);
	batch_free(&bt);
	flux_model_free(u);
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 120, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	if ((be = backend_cpu_create(1, &e)) == NULL) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(float32_trains_as_the_whole_model),
		cmocka_unit_test(bf16_trains_as_the_whole_model),
		cmocka_unit_test(init_draws_the_whole_models_rows),
		cmocka_unit_test(checkpoints_reshard_both_ways),
		cmocka_unit_test(unbound_model_without_hooks_is_refused),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	backend_free(be);
	comm_finalize(world);
	return rc;
}
