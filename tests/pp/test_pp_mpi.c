/* The pipeline engine across processes (tests/pp/mpi.sh runs it on 2, 3 and
 * 4 ranks; alone it runs a pipeline of one): every rank runs its list of
 * each schedule over lib/comm and its stages' gradients and the losses must
 * equal the plain model's on the same micro-batches, computed on each rank;
 * ranks that built different schedules are told so at once. */
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
#include "comm/comm.h"
#include "model/model.h"
#include "pp/pp.h"
#include "../support/pp_loop.h"

static comm *world;

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 8, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 300, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

enum { B = 1, T = 16 };

/* One schedule on the world's ranks; the worst relative gradient difference
 * of this rank's stages. */
static double schedule_equals_plain(pp_kind k, int v, int nmb)
{
	titan_err e = {0};
	int p = comm_size(world), me = comm_rank(world);
	pp_schedule *s;
	if (pp_schedule_build(k, p, v, nmb, &s, &e))
		fail_msg("%s", e.msg);
	pp_split sp;
	pp_split_args a = {.n_layers = small.n_layers, .pp = p, .kind = k, .first_less = 1,
			   .last_less = 1};
	if (pp_split_make(&a, &sp, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(pp_schedule_agree(world, s, &e), 0);
	backend *be = backend_cpu_create(1, &e);
	model *ref = model_create(be, &small, 0, &e);
	assert_int_equal(model_init(ref, 17, 1, &e), 0);
	size_t np = model_num_params(ref);
	pp_test_batch tb;
	if (pp_test_batch_make(&tb, ref, nmb, B, T, 23, &e))
		fail_msg("%s", e.msg);
	double l;
	int64_t nv;
	model *mine = model_create_unbound(be, &small, 0, &e);
	float *store = backend_calloc_floats(be, 2 * np, &e);
	memcpy(store, model_params(ref), np * 4);
	for (int st = 0; st < s->n_stages; st++)
		for (int u = sp.u0[st]; s->stage_rank[st] == me && u <= sp.u1[st]; u++) {
			size_t off = model_unit_at(ref, u)->offset;
			model_bind_unit(mine, u, store + off, store + np + off);
		}
	pp_transport tr;
	pp_transport_comm(world, &tr);
	pp_engine *en = pp_engine_create(mine, &sp, s, me, B, T, &tr, &e);
	if (en == NULL || pp_engine_step(en, tb.ids, tb.labels, tb.scale, NULL, &l, &nv, &e))
		fail_msg("rank %d: %s", me, e.msg);
	double got[2] = {l, (double)nv};
	assert_int_equal(comm_all_reduce(world, got, got, 2, COMM_F64, COMM_SUM, &e), 0);
	assert_true(fabs(got[0] - tb.loss) <= 1e-9 * fabs(tb.loss));
	assert_int_equal((int64_t)got[1], tb.valid);
	double worst = 0;
	for (int st = 0; st < s->n_stages; st++) {
		if (s->stage_rank[st] != me)
			continue;
		const model_unit *u0 = model_unit_at(ref, sp.u0[st]), *u1 = model_unit_at(ref, sp.u1[st]);
		double d = 0, m = 0;
		for (size_t i = u0->offset; i < u1->offset + u1->numel; i++) {
			d = fmax(d, fabs((double)store[np + i] - model_grads(ref)[i]));
			m = fmax(m, fabs((double)model_grads(ref)[i]));
		}
		worst = fmax(worst, m > 0 ? d / m : d);
	}
	pp_engine_free(en);
	model_free(mine);
	be->ops->free(be, store);
	model_free(ref);
	backend_free(be);
	pp_test_batch_free(&tb);
	pp_split_free(&sp);
	pp_schedule_free(s);
	return worst;
}

static void every_schedule_across_ranks_trains_as_the_plain_model(void **state)
{
	(void)state;
	int p = comm_size(world);
	static const struct {
		pp_kind k;
		int v;
	} kinds[] = {{PP_GPIPE, 1}, {PP_1F1B, 1}, {PP_INTERLEAVED_1F1B, 2}, {PP_LOOPED_BFS, 2},
		     {PP_INTERLEAVED_ZB, 2}, {PP_ZBV, 2}, {PP_DUALPIPEV, 2}};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		if (p == 1 && kinds[i].v > 1)
			continue;
		double d = schedule_equals_plain(kinds[i].k, kinds[i].v, 2 * p);
		if (comm_rank(world) == 0)
			print_message("pp %d %-22s gradients within %.1e of the plain model\n", p,
				      pp_kind_name(kinds[i].k), d);
		assert_true(d < 1e-6);
	}
}

static void ranks_with_different_schedules_are_told(void **state)
{
	(void)state;
	int p = comm_size(world);
	if (p < 2)
		skip();
	titan_err e = {0};
	pp_schedule *s;
	/* rank 0 builds GPipe, the others 1F1B: same shape, different lists */
	assert_int_equal(pp_schedule_build(comm_rank(world) == 0 ? PP_GPIPE : PP_1F1B, p, 1, 2 * p,
					   &s, &e), 0);
	assert_int_equal(pp_schedule_agree(world, s, &e), -1);
	assert_non_null(strstr(e.msg, "the pipeline ranks built different schedules"));
	pp_schedule_free(s);
}

int main(int argc, char **argv)
{
	titan_err e = {0};
	if (comm_init(&argc, &argv, 60, &world, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_schedule_across_ranks_trains_as_the_plain_model),
		cmocka_unit_test(ranks_with_different_schedules_are_told),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
