/* The pipeline engine with every rank in one process: a loopback transport
 * carries the messages (each peer's in the order sent), the ranks take turns
 * running until each needs a message that has not arrived.  Every schedule's
 * step must give the losses and gradients of the plain model run on the same
 * micro-batches (float32 sums of the micro-batches in another order: a few
 * ulps), and finish without deadlock.  Multi-process runs over lib/comm are
 * the shell tests under tests/pp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "pp/pp.h"
#include "../support/pp_loop.h"

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 6, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 300, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

enum { B = 1, T = 16, MAXR = PP_LOOP_MAX };

/* ---- the comparison ---- */

static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		s = fmax(s, fabs((double)b[i]));
	}
	return s > 0 ? d / s : d;
}

/* Stage hooks that check their order: first before any action of the stage,
 * once; last after all, once. */
typedef struct stage_log {
	int firsts[16], lasts[16];
	int calls;
} stage_log;

static int on_first(void *ctx, int stage, titan_err *e)
{
	stage_log *l = ctx;
	if (l->firsts[stage]++ || l->lasts[stage])
		return err_set(e, "stage %d: first hook again or after last", stage);
	l->calls++;
	return 0;
}

static int on_last(void *ctx, int stage, titan_err *e)
{
	stage_log *l = ctx;
	if (!l->firsts[stage] || l->lasts[stage]++)
		return err_set(e, "stage %d: last hook before first or again", stage);
	l->calls++;
	return 0;
}

/* Run schedule s (split sp) with the engine on every rank and compare with
 * the plain model; returns the worst relative gradient difference. */
static double engine_equals_plain(const pp_schedule *s, const pp_split *sp, const char *what)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	model *ref = model_create(be, &small, 0, &e);
	assert_int_equal(model_init(ref, 17, 1, &e), 0);
	pp_test_batch tb;
	if (pp_test_batch_make(&tb, ref, s->n_mb, B, T, 23, &e))
		fail_msg("%s", e.msg);
	double l;
	int64_t nv;
	static pp_loop lb;
	pp_transport tr;
	pp_loop_transport(&lb, &tr);
	model *m[MAXR];
	float *store[MAXR];
	pp_engine *en[MAXR];
	stage_log slog = {0};
	pp_stage_hooks sh = {.ctx = &slog, .first = on_first, .last = on_last};
	for (int r = 0; r < s->n_ranks; r++) {
		m[r] = model_create_unbound(be, &small, 0, &e);
		store[r] = backend_calloc_floats(be, 2 * model_num_params(ref), &e);
		size_t np = model_num_params(ref);
		memcpy(store[r], model_params(ref), np * 4);
		for (int st = 0; st < s->n_stages; st++)
			for (int u = sp->u0[st]; s->stage_rank[st] == r && u <= sp->u1[st]; u++) {
				size_t off = model_unit_at(ref, u)->offset;
				model_bind_unit(m[r], u, store[r] + off, store[r] + np + off);
			}
		en[r] = pp_engine_create(m[r], sp, s, r, B, T, &tr, &e);
		if (en[r] == NULL)
			fail_msg("%s", e.msg);
		pp_engine_set_stage_hooks(en[r], &sh);
		assert_int_equal(pp_engine_begin(en[r], tb.ids, tb.labels, tb.scale, NULL, &e), 0);
	}
	if (pp_loop_run(&lb, en, s->n_ranks, s->first[s->n_ranks], &e))
		fail_msg("%s: %s", what, e.msg);
	double got_loss = 0, worst = 0;
	int64_t got_valid = 0;
	size_t np = model_num_params(ref);
	for (int r = 0; r < s->n_ranks; r++) {
		pp_engine_loss(en[r], &l, &nv);
		got_loss += l;
		got_valid += nv;
		for (int st = 0; st < s->n_stages; st++) {
			if (s->stage_rank[st] != r)
				continue;
			const model_unit *a = model_unit_at(ref, sp->u0[st]), *z = model_unit_at(ref, sp->u1[st]);
			size_t n = z->offset + z->numel - a->offset;
			worst = fmax(worst, rel_diff(store[r] + np + a->offset, model_grads(ref) + a->offset, n));
		}
	}
	print_message("%-32s loss %.9f (plain %.9f), %lld tokens, gradients within %.1e\n", what,
		      got_loss, tb.loss, (long long)got_valid, worst);
	assert_int_equal(got_valid, tb.valid);
	assert_int_equal(slog.calls, 2 * s->n_stages); /* each stage's hooks once */
	assert_true(fabs(got_loss - tb.loss) <= 1e-9 * fabs(tb.loss));
	for (int r = 0; r < s->n_ranks; r++) {
		pp_engine_free(en[r]);
		model_free(m[r]);
		be->ops->free(be, store[r]);
	}
	pp_loop_free(&lb);
	pp_test_batch_free(&tb);
	model_free(ref);
	backend_free(be);
	return worst;
}

static void every_schedule_trains_as_the_plain_model(void **state)
{
	(void)state;
	static const struct {
		pp_kind k;
		int p, v, m;
	} cases[] = {
		{PP_GPIPE, 2, 1, 4},           {PP_1F1B, 2, 1, 4},
		{PP_INTERLEAVED_1F1B, 2, 2, 4}, {PP_LOOPED_BFS, 2, 2, 4},
		{PP_INTERLEAVED_ZB, 2, 2, 4},  {PP_ZBV, 2, 2, 4},
		{PP_DUALPIPEV, 2, 2, 4},       {PP_1F1B, 4, 1, 8},
		{PP_INTERLEAVED_1F1B, 3, 2, 6}, {PP_GPIPE, 1, 1, 3},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		titan_err e = {0};
		pp_schedule *s;
		assert_int_equal(pp_schedule_build(cases[i].k, cases[i].p, cases[i].v, cases[i].m, &s,
						   &e), 0);
		pp_split sp;
		pp_split_args a = {.n_layers = small.n_layers, .pp = cases[i].p, .kind = cases[i].k,
				   .first_less = 1, .last_less = 1};
		assert_int_equal(pp_split_make(&a, &sp, &e), 0);
		char what[64];
		snprintf(what, sizeof what, "%s pp %d x %d stages, %d mb", pp_kind_name(cases[i].k),
			 cases[i].p, cases[i].v, cases[i].m);
		double d = engine_equals_plain(s, &sp, what);
		assert_true(d < 1e-6);
		pp_split_free(&sp);
		pp_schedule_free(s);
	}
}

static void csv_schedule_consuming_out_of_order_runs(void **state)
{
	(void)state;
	/* rank 1 takes micro-batch 1 before 0: the receives still follow rank 0's
	 * sends, each message into its own buffer */
	const char *text = "0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1\n1F1,1F0,3F0,3F1,3B0,3B1,1B0,1B1\n";
	titan_err e = {0};
	pp_schedule *s;
	assert_int_equal(pp_schedule_parse_csv("t.csv", text, strlen(text), 2, 4, 2, &s, &e), 0);
	pp_split sp;
	pp_split_args a = {.n_layers = small.n_layers, .pp = 2, .kind = PP_INTERLEAVED_1F1B,
			   .first_less = 1, .last_less = 1};
	assert_int_equal(pp_split_make(&a, &sp, &e), 0);
	assert_true(engine_equals_plain(s, &sp, "csv, out-of-order receiver") < 1e-6);
	pp_split_free(&sp);
	pp_schedule_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_schedule_trains_as_the_plain_model),
		cmocka_unit_test(csv_schedule_consuming_out_of_order_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
