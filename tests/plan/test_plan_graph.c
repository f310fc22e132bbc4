/* compile.enable's whole step on the device (plan_set_graph, lib/plan/graph.c)
 * on the CPU backend, against the plain step (plan_step as step.c runs it):
 *   - the same ops, so the same numbers: every step's loss and grad norm and
 *     the final weights and AdamW states bit for bit (float32 gradients; the
 *     clipping factor is applied inside AdamW instead of by a scale of the
 *     gradients first, the same float32 product), with clipping active on
 *     some steps, in float32 and under bf16 autocast with full activation
 *     checkpointing and two micro-batches a step;
 *   - nothing inside the step waits for the backend: the backend's ops table
 *     is wrapped so that sync, sumsq, copies to the host, allocations and
 *     frees between the capture callbacks (where the CUDA backend records the
 *     graph) are counted, and they must be 0; the callbacks run once a step
 *     from the second on (the first runs as is: on CUDA it sizes what the
 *     recording uses);
 *   - the plans it must refuse (FSDP's per-step bf16 copies, the plain loss
 *     head) say why.
 * Random tokens with a fixed printed seed; the weights are torchtitan's
 * initialisation drawn with seed 7. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

enum { T = 16, B = 2, STEPS = 4 };
#define LR 3e-3
#define MAX_NORM 1.0 /* below every step's norm here: the clipping factor is exercised */

static llama_args small = {
	.name = "small", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 256, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

/* ---- the guard: what the backend is asked between the capture callbacks ---- */

static const backend_ops *cpu_ops;
static backend_ops guarded;
static int inside, begins, ends;
static int waits; /* sync, sumsq, copies to the host, alloc, free while inside */

static int g_sync(backend *be, titan_err *e)
{
	waits += inside;
	return cpu_ops->sync(be, e);
}

static double g_sumsq(backend *be, const void *x, be_dtype t, int64_t n)
{
	waits += inside;
	return cpu_ops->sumsq(be, x, t, n);
}

static void g_copy(backend *be, void *dst, const void *src, size_t bytes, int kind)
{
	/* a host -> device copy inside a capture is refused by CUDA too: the
	 * batch must already be in backend memory */
	waits += inside && kind != BACKEND_D2D;
	cpu_ops->copy(be, dst, src, bytes, kind);
}

static void *g_alloc(backend *be, size_t bytes, titan_err *e)
{
	waits += inside;
	return cpu_ops->alloc(be, bytes, e);
}

static void g_free(backend *be, void *p)
{
	waits += inside;
	cpu_ops->free(be, p);
}

static int cap_begin(void *ctx, titan_err *e)
{
	(void)ctx, (void)e;
	assert_false(inside);
	inside = 1;
	begins++;
	return 0;
}

static int cap_end(void *ctx, titan_err *e)
{
	(void)ctx, (void)e;
	assert_true(inside);
	inside = 0;
	ends++;
	return 0;
}

static backend *guarded_cpu(void)
{
	titan_err e = {{0}};
	backend *be = backend_cpu_create(1, &e);
	if (!be)
		fail_msg("%s", e.msg);
	cpu_ops = be->ops;
	guarded = *cpu_ops;
	guarded.sync = g_sync;
	guarded.sumsq = g_sumsq;
	guarded.copy = g_copy;
	guarded.alloc = g_alloc;
	guarded.free = g_free;
	be->ops = &guarded;
	return be;
}

/* ---- the runs ---- */

typedef struct mode {
	const char *name;
	int autocast; /* bf16 linears and activations, float32 masters (one device) */
	model_ac_mode ac;
	int n_mb;
} mode;

typedef struct run {
	double loss[STEPS], norm[STEPS];
	float *w, *m, *v; /* the final masters and AdamW states, host images */
	size_t n;         /* their elements */
} run;

static void tokens(int32_t *ids, int32_t *labels, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 256);
		labels[i] = (seed >> 20) % 9 == 0 ? -100 : (int32_t)((seed >> 41) % 256);
	}
}

static plan *make_plan(backend *be, const mode *md, model_prec prec, unsigned fuse)
{
	plan_opts o = {.be = be, .args = &small, .b = B, .t = T, .ac = md->ac, .reduce = BE_F32,
		       .prec = prec};
	adamw_config_default(&o.adamw);
	o.adamw.lr = LR;
	titan_err e = {{0}};
	plan *p = plan_create(&o, &e);
	if (!p || (md->autocast && model_set_autocast(plan_model(p), BE_BF16, &e)) ||
	    model_set_fusion(plan_model(p), fuse, &e) || plan_init_weights(p, 7, 1, &e))
		fail_msg("%s: %s", md->name, e.msg);
	return p;
}

static float *image(plan *p, const void *dev)
{
	titan_err e = {{0}};
	float *h = malloc(plan_shard_numel(p) * sizeof *h);
	assert_non_null(h);
	if (plan_shard_download(p, h, dev, &e))
		fail_msg("%s", e.msg);
	return h;
}

static void train(const mode *md, int graph, run *r)
{
	backend *be = guarded_cpu();
	model_prec prec = md->autocast ? (model_prec){BE_F32, BE_F32, BE_BF16, BE_F32}
				       : (model_prec){BE_F32, BE_F32, BE_F32, BE_F32};
	plan *p = make_plan(be, md, prec, MODEL_FUSE_BLOCKS | MODEL_FUSE_LOSS);
	titan_err e = {{0}};
	assert_null(plan_graph_refusal(p));
	if (graph) {
		if (plan_set_graph(p, 1, &e))
			fail_msg("%s", e.msg);
		plan_capture c = {NULL, cap_begin, cap_end};
		plan_set_capture(p, &c);
	}
	size_t n = (size_t)md->n_mb * B * T;
	int32_t *ids = malloc(n * sizeof *ids), *labels = malloc(n * sizeof *labels);
	assert_non_null(ids), assert_non_null(labels);
	begins = ends = waits = 0;
	for (int s = 0; s < STEPS; s++) {
		uint64_t seed = 1000 + (uint64_t)s;
		if (s == 0 && graph)
			print_message("%s: tokens of step s from seed 1000 + s\n", md->name);
		tokens(ids, labels, n, seed);
		plan_batch b = {.inputs = ids, .labels = labels, .n_mb = md->n_mb};
		plan_result res;
		if (plan_step(p, &b, LR, MAX_NORM, &res, &e))
			fail_msg("%s step %d: %s", md->name, s + 1, e.msg);
		r->loss[s] = res.loss;
		r->norm[s] = res.grad_norm;
	}
	if (graph) {
		print_message("%s: %d steps queued between the capture callbacks, %d waits there\n",
			      md->name, begins, waits);
		assert_int_equal(begins, STEPS - 1); /* the first step runs as is */
		assert_int_equal(ends, STEPS - 1);
		assert_int_equal(waits, 0);
	}
	r->n = plan_shard_numel(p);
	r->w = image(p, plan_shard_params(p));
	r->m = image(p, adamw_exp_avg(plan_optimizer(p)));
	r->v = image(p, adamw_exp_avg_sq(plan_optimizer(p)));
	assert_int_equal(adamw_get_step(plan_optimizer(p)), STEPS);
	free(ids);
	free(labels);
	plan_free(p);
	backend_free(be);
}

static void same_bits(const char *what, const float *a, const float *b, size_t n)
{
	size_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
	if (diff)
		fail_msg("%s: %zu of %zu elements differ", what, diff, n);
}

static void check_mode(const mode *md)
{
	run plain = {0}, graph = {0};
	train(md, 0, &plain);
	train(md, 1, &graph);
	int clipped = 0;
	for (int s = 0; s < STEPS; s++) {
		print_message("%s step %d: loss %.9f / %.9f, grad norm %.9f / %.9f\n", md->name, s + 1,
			      plain.loss[s], graph.loss[s], plain.norm[s], graph.norm[s]);
		assert_memory_equal(&plain.loss[s], &graph.loss[s], sizeof(double));
		assert_memory_equal(&plain.norm[s], &graph.norm[s], sizeof(double));
		clipped += plain.norm[s] > MAX_NORM;
	}
	assert_true(clipped > 0); /* the clipping factor is exercised */
	size_t n = plain.n;
	same_bits("weights", plain.w, graph.w, n);
	same_bits("exp_avg", plain.m, graph.m, n);
	same_bits("exp_avg_sq", plain.v, graph.v, n);
	free(plain.w), free(plain.m), free(plain.v);
	free(graph.w), free(graph.m), free(graph.v);
}

static void float32_steps(void **state)
{
	(void)state;
	mode md = {"float32", 0, MODEL_AC_NONE, 1};
	check_mode(&md);
}

static void autocast_full_ac_accumulation(void **state)
{
	(void)state;
	mode md = {"bf16 autocast, full AC, 2 micro-batches", 1, MODEL_AC_FULL, 2};
	check_mode(&md);
}

/* What cannot run as one device step says why, and plan_set_graph refuses. */
static void refusals(void **state)
{
	(void)state;
	titan_err e = {{0}};
	backend *be = backend_cpu_create(1, &e);
	mode md = {"refused", 0, MODEL_AC_NONE, 1};
	plan *p = make_plan(be, &md, (model_prec){BE_F32, BE_F32, BE_F32, BE_F32},
			    MODEL_FUSE_BLOCKS);
	const char *why = plan_graph_refusal(p);
	assert_non_null(why);
	assert_non_null(strstr(why, "loss"));
	assert_int_equal(plan_set_graph(p, 1, &e), -1);
	print_message("plain loss head: %s\n", e.msg);
	plan_free(p);
	/* FSDP's policy on one rank: bf16 copies of the float32 masters each step */
	p = make_plan(be, &md, (model_prec){BE_BF16, BE_F32, BE_BF16, BE_BF16},
		      MODEL_FUSE_BLOCKS | MODEL_FUSE_LOSS);
	assert_non_null(why = plan_graph_refusal(p));
	print_message("bf16 parameters over float32 masters: %s\n", why);
	plan_free(p);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(float32_steps),
		cmocka_unit_test(autocast_full_ac_accumulation),
		cmocka_unit_test(refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
