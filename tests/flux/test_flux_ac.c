/* lib/flux's full activation checkpointing (flux_model_set_full_ac): a step
 * that keeps only each block's input and recomputes the block in the
 * backward gives the loss, the prediction and every gradient of the step
 * that keeps everything, bit for bit, in float32 and in bf16; and an
 * attention hook (context parallelism's) is called again in the
 * recomputation, once per block more, with the backend's arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "flux/flux.h"
#include "../support/testutil.h"

static const flux_config small = {
	.name = "ac-small", .in_channels = 16, .out_channels = 16, .vec_in_dim = 24,
	.context_in_dim = 32, .hidden_size = 64, .num_heads = 4, .depth = 2,
	.depth_single_blocks = 3, .mlp_ratio = 2.6, .axes_dim = {4, 6, 6}, .theta = 10000,
	.qkv_bias = 1,
};

enum { B = 2, LI = 12, LT = 5 };

static backend *be;

typedef struct batch {
	float *x, *noise, *img_ids, *txt, *txt_ids, *t, *y;
	flux_batch in;
} batch;

static void batch_make(batch *bt)
{
	const flux_config *c = &small;
	bt->x = test_spread(B * LI * c->in_channels, 1);
	bt->noise = test_spread(B * LI * c->in_channels, 2);
	bt->txt = test_spread(B * LT * c->context_in_dim, 3);
	bt->y = test_spread(B * c->vec_in_dim, 4);
	bt->t = malloc(B * sizeof *bt->t);
	bt->img_ids = calloc(B * LI * 3, sizeof(float));
	bt->txt_ids = calloc(B * LT * 3, sizeof(float));
	assert_true(bt->t && bt->img_ids && bt->txt_ids);
	for (int i = 0; i < B; i++) {
		bt->t[i] = 0.3f + 0.4f * (float)i;
		for (int j = 0; j < LI; j++) {
			bt->img_ids[(i * LI + j) * 3 + 1] = (float)(j / 4);
			bt->img_ids[(i * LI + j) * 3 + 2] = (float)(j % 4);
		}
	}
	bt->in = (flux_batch){.b = B, .li = LI, .lt = LT, .c_img = c->in_channels,
			      .c_txt = c->context_in_dim, .c_vec = c->vec_in_dim, .x = bt->x,
			      .noise = bt->noise, .img_ids = bt->img_ids, .txt = bt->txt,
			      .txt_ids = bt->txt_ids, .t = bt->t, .y = bt->y};
}

static void batch_free(batch *bt)
{
	float *p[] = {bt->x, bt->noise, bt->img_ids, bt->txt, bt->txt_ids, bt->t, bt->y};
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		free(p[i]);
}

typedef struct result {
	float loss;
	float *pred, *grads;
} result;

/* One step from zero gradients: the loss, the prediction, every gradient
 * (host copies). */
static result step(flux_model *m, const batch *bt)
{
	titan_err e;
	int64_t n = flux_model_numel(m), np = B * LI * small.out_channels;
	result r = {.pred = malloc((size_t)np * sizeof(float)),
		    .grads = malloc((size_t)n * sizeof(float))};
	assert_true(r.pred && r.grads);
	flux_zero_grad(m);
	if (flux_step(m, &bt->in, 1, &r.loss, r.pred, &e) != 0)
		fail_msg("%s", e.msg);
	be->ops->copy(be, r.grads, flux_model_grads(m), (size_t)n * sizeof(float), BACKEND_D2H);
	assert_int_equal(be->ops->sync(be, &e), 0);
	return r;
}

static void result_free(result *r)
{
	free(r->pred);
	free(r->grads);
}

static flux_model *model(be_dtype t)
{
	titan_err e;
	flux_model *m = flux_model_create(be, &small, &e);
	if (m == NULL || flux_model_init(m, 11, &e) != 0 || flux_model_set_compute(m, t, &e) != 0)
		fail_msg("%s", e.msg);
	/* the zero modulations and final layer of 0.3.0's init leave most
	 * gradients zero: give every weight a value */
	int64_t n = flux_model_numel(m);
	float *w = test_spread(n, 9);
	for (int64_t i = 0; i < n; i++)
		w[i] *= 0.2f;
	be->ops->copy(be, flux_model_weights(m), w, (size_t)n * sizeof(float), BACKEND_H2D);
	free(w);
	return m;
}

static void same_bits(be_dtype t)
{
	batch bt;
	batch_make(&bt);
	flux_model *m = model(t);
	result keep = step(m, &bt);
	flux_model_set_full_ac(m, 1);
	result ac = step(m, &bt);
	int64_t n = flux_model_numel(m), np = B * LI * small.out_channels, nonzero = 0;
	for (int64_t i = 0; i < n; i++)
		nonzero += keep.grads[i] != 0.0f;
	printf("# %s: loss %.9g, %lld of %lld gradients non-zero\n", be_dtype_name(t),
	       (double)keep.loss, (long long)nonzero, (long long)n);
	assert_true(nonzero > n / 2);
	assert_memory_equal(&keep.loss, &ac.loss, sizeof keep.loss);
	assert_memory_equal(keep.pred, ac.pred, (size_t)np * sizeof(float));
	assert_memory_equal(keep.grads, ac.grads, (size_t)n * sizeof(float));
	result_free(&keep);
	result_free(&ac);
	flux_model_free(m);
	batch_free(&bt);
}

static void ac_float32(void **state)
{
	(void)state;
	same_bits(BE_F32);
}

static void ac_bf16(void **state)
{
	(void)state;
	same_bits(BE_BF16);
}

/* An attention hook that passes to the backend's op and counts its calls. */
typedef struct counting {
	int fwd, bwd;
} counting;

static void count_fwd(void *ctx, void *out, float *lse, const void *q, const void *k,
		      const void *v, const be_attn *a)
{
	((counting *)ctx)->fwd++;
	be->ops->attention_fwd(be, out, lse, q, k, v, a);
}

static void count_bwd(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
		      const void *k, const void *v, const void *out, const float *lse,
		      const be_attn *a)
{
	((counting *)ctx)->bwd++;
	be->ops->attention_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, a);
}

static void hook_runs_again(void **state)
{
	(void)state;
	batch bt;
	batch_make(&bt);
	flux_model *m = model(BE_F32);
	result plain = step(m, &bt);
	counting n = {0};
	be_attn_hook hook = {.ctx = &n, .fwd = count_fwd, .bwd = count_bwd};
	flux_model_set_attention(m, &hook);
	flux_model_set_full_ac(m, 1);
	result hooked = step(m, &bt);
	int blocks = (int)(small.depth + small.depth_single_blocks);
	printf("# hook: %d forward calls, %d backward calls over %d blocks\n", n.fwd, n.bwd,
	       blocks);
	assert_int_equal(n.fwd, 2 * blocks);
	assert_int_equal(n.bwd, blocks);
	assert_memory_equal(plain.grads, hooked.grads, (size_t)flux_model_numel(m) * sizeof(float));
	/* a prediction holds the whole sequence: the backend's op */
	flux_input pin = {.b = B, .li = LI, .lt = LT, .c_img = small.in_channels,
			  .c_txt = small.context_in_dim, .c_vec = small.vec_in_dim, .img = bt.x,
			  .img_ids = bt.img_ids, .txt = bt.txt, .txt_ids = bt.txt_ids, .t = bt.t,
			  .y = bt.y};
	titan_err e;
	if (flux_predict(m, &pin, plain.pred, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(n.fwd, 2 * blocks);
	flux_model_set_attention(m, NULL);
	result_free(&plain);
	result_free(&hooked);
	flux_model_free(m);
	batch_free(&bt);
}

static int setup(void **state)
{
	(void)state;
	titan_err e;
	if ((be = backend_cpu_create(1, &e)) == NULL) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	backend_free(be);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ac_float32),
		cmocka_unit_test(ac_bf16),
		cmocka_unit_test(hook_runs_again),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
