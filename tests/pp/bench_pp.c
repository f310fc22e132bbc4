/* bench_pp: the pipeline's bubble measured on the CPU, each schedule's step
 * run by the engine over lib/comm with one rank per core (mpirun -np P), next
 * to its formula (unit costs: F 1, B 2, I 1, W 1) and to the schedule
 * simulated with the costs measured (the mean time of each op on the ranks):
 * what the schedule would give on this machine without waiting on messages.
 * A rank's busy time is the time spent inside the model's units (the engine's
 * hooks); the bubble is 1 - mean busy / the step's wall time, the median over
 * the timed steps.
 *
 *   mpirun -np 2 build/tests/pp/bench_pp [STEPS [MICROBATCHES]] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "model/model.h"
#include "pp/pp.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct timer {
	double busy, t0;
	double phase[3]; /* forward, backward, weight gradient */
} timer;

static int before(void *ctx, int u, int phase, titan_err *e)
{
	(void)u, (void)phase, (void)e;
	((timer *)ctx)->t0 = now();
	return 0;
}

static int after(void *ctx, int u, int phase, titan_err *e)
{
	(void)u, (void)phase, (void)e;
	timer *t = ctx;
	double d = now() - t->t0;
	t->busy += d;
	t->phase[phase] += d;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static const llama_args shape = {
	.name = "bench", .dim = 256, .n_layers = 8, .n_heads = 8, .n_kv_heads = 4,
	.vocab_size = 2048, .multiple_of = 256, .norm_eps = 1e-5, .rope_theta = 500000,
	.max_seq_len = 4096,
};

int main(int argc, char **argv)
{
	comm *world;
	titan_err e = {0};
	if (comm_init(&argc, &argv, 600, &world, &e)) {
		fprintf(stderr, "bench_pp: %s\n", e.msg);
		return 1;
	}
	int steps = argc > 1 ? atoi(argv[1]) : 3, p = comm_size(world), me = comm_rank(world);
	int nmb = argc > 2 ? atoi(argv[2]) : 4 * p, b = 1, t = 256;
	backend *be = backend_cpu_create(1, &e);
	if (me == 0)
		printf("%-22s %3s %3s %4s %9s %9s %10s %8s\n", "schedule", "p", "v", "m", "measured",
		       "formula", "simulated", "step s");
	for (int k = 0; k < PP_KIND_COUNT; k++) {
		int v = pp_kind_single((pp_kind)k) ? 1 : 2;
		pp_schedule *s;
		pp_split sp;
		pp_split_args a = {.n_layers = shape.n_layers, .pp = p, .kind = (pp_kind)k,
				   .first_less = 1, .last_less = 1};
		if (pp_schedule_build((pp_kind)k, p, v, nmb, &s, &e) || pp_split_make(&a, &sp, &e)) {
			if (me == 0)
				printf("%-22s skipped: %s\n", pp_kind_name((pp_kind)k), e.msg);
			continue;
		}
		model *m = model_create(be, &shape, 0, &e);
		model_init(m, 1, 1, &e);
		size_t ntok = (size_t)nmb * (size_t)(b * t);
		int32_t *ids = malloc(ntok * 4), *labels = malloc(ntok * 4);
		for (size_t i = 0; i < ntok; i++)
			ids[i] = labels[i] = (int32_t)(i * 7919 % 2048);
		pp_transport tr;
		pp_transport_comm(world, &tr);
		pp_engine *en = pp_engine_create(m, &sp, s, me, b, t, &tr, &e);
		timer tm = {0};
		model_hooks h = {.ctx = &tm, .before = before, .after = after};
		double *bubble = calloc((size_t)steps, sizeof *bubble), *wall = calloc((size_t)steps, sizeof *wall);
		double costs[3] = {0};
		for (int i = -1; i < steps && en; i++) {
			double l;
			int64_t nv;
			tm.busy = tm.phase[0] = tm.phase[1] = tm.phase[2] = 0;
			comm_barrier(world, &e);
			double t0 = now();
			if (pp_engine_step(en, ids, labels, 1e-4f, &h, &l, &nv, &e)) {
				fprintf(stderr, "bench_pp: rank %d: %s\n", me, e.msg);
				comm_abort(world, 1);
			}
			double w = now() - t0, busy = tm.busy;
			comm_all_reduce(world, &w, &w, 1, COMM_F64, COMM_MAX, &e);
			comm_all_reduce(world, &busy, &busy, 1, COMM_F64, COMM_SUM, &e);
			if (i >= 0) { /* the first step warms up */
				bubble[i] = 1 - busy / p / w;
				wall[i] = w;
				for (int ph = 0; ph < 3; ph++)
					costs[ph] += tm.phase[ph];
			}
		}
		/* mean cost of one action of each op, over the ranks and steps */
		int count[PP_OP_COUNT] = {0};
		for (int i = s->first[me]; i < s->first[me + 1]; i++)
			count[s->act[i].op]++;
		double c3[3] = {costs[0], costs[1], costs[2]}, n3[3] = {count[PP_F],
			count[PP_B] + count[PP_I], count[PP_W]};
		comm_all_reduce(world, c3, c3, 3, COMM_F64, COMM_SUM, &e);
		comm_all_reduce(world, n3, n3, 3, COMM_F64, COMM_SUM, &e);
		pp_costs pc = {.op = {[PP_F] = c3[0] / (n3[0] * steps)}};
		double bwd = c3[1] / (n3[1] * steps), w = n3[2] > 0 ? c3[2] / (n3[2] * steps) : 0;
		pc.op[PP_B] = bwd + w; /* a full backward does what I and W do */
		pc.op[PP_I] = bwd;
		pc.op[PP_W] = w;
		if (n3[2] == 0) /* no split backward measured: B's share as I, none as W */
			pc.op[PP_B] = bwd;
		pp_sim sim = {0};
		pp_simulate(s, &pc, &sim, NULL, &e);
		qsort(bubble, (size_t)steps, sizeof *bubble, cmp);
		qsort(wall, (size_t)steps, sizeof *wall, cmp);
		if (me == 0)
			printf("%-22s %3d %3d %4d %8.1f%% %8.1f%% %9.1f%% %8.3f\n", pp_kind_name((pp_kind)k),
			       p, v, nmb, 100 * bubble[steps / 2],
			       100 * pp_bubble_formula((pp_kind)k, p, v, nmb), 100 * sim.bubble,
			       wall[steps / 2]);
		free(bubble), free(wall), free(ids), free(labels);
		pp_engine_free(en);
		model_free(m);
		pp_split_free(&sp);
		pp_schedule_free(s);
	}
	backend_free(be);
	comm_finalize(world);
	return 0;
}
