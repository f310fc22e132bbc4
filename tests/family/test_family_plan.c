/* Every family's debug flavor under the parallel plans against the single
 * process.  tests/family/equiv.sh runs this program under mpirun once per
 * world size, naming its cases in TITAN_FAMILY_PLAN (separated by ';':
 * tests/support/case_batch.h), each ("qwen3:debugmodel_moe_small shard=2
 * tp=1 accum=1 async=0 steps=5"; the degrees' product is the world size;
 * steps defaults to 5, 2 in short runs (test_short; equiv.sh gives its own
 * under the sanitizers); after family:flavor, words key=value matched by
 * whole key, an unknown one refused: tests/support/case_args.h); run alone
 * it checks Qwen3's debug flavor in a world of one (a plan over a mesh of one
 * rank against the plan without a mesh).
 *
 * Every rank trains the flavor for 5 steps of a global batch of 4 sequences
 * of 32 tokens under the plan, and rank 0 beside it the same model as one
 * process on the whole batch (the families' own shapes, vocabulary cut to
 * 2048: 4 x 32 tokens keep CI fast, as tests/family/train.sh does), its
 * results sent to every rank (tests/support/plan_harness.h).  Per step the
 * loss and grad norm must agree; after step 1 (the same weights on both
 * sides) every rank's boxes of the gradients must equal the same boxes of
 * the single process's; after the last step its boxes of the parameters, and
 * its buffers (the MoE layers' expert_bias, moved by the load balancing
 * after every step) the single process's.  Seeds fixed and printed.
 *
 * Tolerances.  The plans add the same float32 products in another order
 * (rows split over ranks, partial sums over tp heads, the reduce-scatters).
 * Step 1 starts from the same weights: loss and grad norm within FIRST_TOL
 * (measured up to 6e-9 on the Zen 4 it was written on, 2.0e-8 on a Zen 5
 * whose OpenBLAS kernel orders the split sums otherwise: Qwen3's grad norm
 * under TP 2; a few float32 ulps either way, so the bound leaves room for any
 * processor's kernel), every gradient element within GRAD_TOL of its
 * tensor's largest (measured 2.2e-6, Qwen3's q_norm under TP 2: a sum over
 * every token and head); a lost or doubled contribution (a replicated
 * tensor's gradient not summed over tp, an expert's rows sent twice) is off
 * by the order of the tensor's own gradient.  Later steps start from weights
 * that AdamW moved by m / sqrt(v), which turns the reordering of a nearly
 * cancelling gradient element into a visible fraction of lr, and Qwen3's
 * QK-norm makes such elements common in wq and wk (an RMSNorm's backward
 * takes out the component along its input): over steps 2-5 the loss drifts
 * to 1.5e-7, the grad norm to 3.6e-6 (TP 2), and the parameters to 0.042 lr
 * (wo, wk); the bounds leave a factor 5 to 14 (LOSS_TOL, NORM_TOL,
 * PARAM_TOL_LR).  The MoE router's top-k: a token whose k-th and (k+1)-th
 * scores tie within float32 rounding may pick another expert when its
 * scores are computed in another order; nothing here makes a tie likely
 * (random weights, 128 tokens), and one flip would move the loss by ~1e-3
 * relative, far outside the bounds, so a failure of that kind is visible.
 * expert_bias moves by load_balance_coeff * sign(mean - count): the counts
 * are integers summed exactly, so it must agree to float32 rounding
 * (BIAS_TOL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "mesh/mesh.h"
#include "model/family.h"
#include "plan/plan.h"
#include "../support/case_args.h"
#include "../support/case_batch.h"
#include "../support/plan_harness.h"
#include "../support/testutil.h"

#define FIRST_TOL 5e-8
#define LOSS_TOL 1e-6
#define NORM_TOL 5e-5
#define GRAD_TOL 1e-5
#define PARAM_TOL_LR 0.2
#define BIAS_TOL 1e-6
#define LR 1e-3

enum { STEPS = 5, ROWS = 4, T = 32, VOCAB = 2048 };

static comm *world;

typedef struct cfg {
	const llama_args *args;
	int shard, tp, accum, async, steps;
	case_args spec; /* TITAN_FAMILY_PLAN after its first word */
	char text[256]; /* the whole case */
} cfg;

/* The first word, family:flavor, then the keys. */
static void read_cfg(cfg *c)
{
	const char *s = getenv("TITAN_FAMILY_PLAN");
	s = s && *s ? s : "qwen3:debugmodel";
	snprintf(c->text, sizeof c->text, "%s", s);
	char fam[64] = "", fl[64] = "";
	if (sscanf(s, "%63[^:]:%63s", fam, fl) != 2)
		fail_msg("TITAN_FAMILY_PLAN \"%s\": expected family:flavor first", s);
	const model_family *f = model_family_find(fam);
	c->args = f ? model_family_flavor(f, fl) : NULL;
	if (!c->args)
		fail_msg("TITAN_FAMILY_PLAN \"%s\": no flavor %s of family %s", s, fl, fam);
	case_args *a = &c->spec;
	titan_err e = {{0}};
	char var[160];
	snprintf(var, sizeof var, "TITAN_FAMILY_PLAN %s:%s", fam, fl);
	const char *keys = s + strcspn(s, " \t");
	if (case_parse(a, var, keys + strspn(keys, " \t"), &e) != 0)
		fail_msg("%s", e.msg);
	c->tp = case_int(a, "tp", 1);
	c->shard = case_int(a, "shard", comm_size(world) / c->tp);
	c->accum = case_int(a, "accum", 1);
	c->async = case_int(a, "async", 0);
	c->steps = case_int(a, "steps", test_short() ? 2 : STEPS);
	if (case_end(a, &e) != 0)
		fail_msg("%s", e.msg);
	if (c->steps < 2)
		fail_msg("TITAN_FAMILY_PLAN \"%s\": steps must be at least 2", s);
}

static plan *make_plan(backend *be, mesh *m, const cfg *c, int b)
{
	plan_opts o = {.be = be, .mesh = m, .args = c->args, .vocab_size = VOCAB, .b = b, .t = T,
		       .reduce = BE_F32, .loss_parallel = 1, .async_tp = c->async};
	adamw_config_default(&o.adamw);
	o.adamw.lr = LR;
	titan_err e = {{0}};
	plan *p = plan_create(&o, &e);
	if (!p)
		fail_msg("plan_create: %s", e.msg);
	if (plan_init_weights(p, 7, 1, &e) != 0)
		fail_msg("plan_init_weights: %s", e.msg);
	return p;
}

/* One case on this rank: its plan, and the single process's run (on rank 0:
 * plan_harness.h). */
typedef struct run {
	cfg c;
	harness_rank k;
	backend *be;
	plan *p;
	harness_ref ref;
	harness_tokens tk;
	harness_gap gap;
	double dg;       /* step 1's gradients: the worst difference of their tensor's largest */
	const char *gat; /* its tensor */
} run;

static plan *make_reference(backend *be, const void *c)
{
	return make_plan(be, NULL, c, ROWS);
}

static void open_run(run *u)
{
	cfg *c = &u->c;
	read_cfg(c);
	titan_err e = {{0}};
	mesh_degrees want = {1, c->shard, 1, c->tp, 1, 1, 1};
	if (harness_rank_open(&u->k, world, &want, &c->spec, ROWS, c->accum, &e) != 0 ||
	    !(u->be = backend_cpu_create(1, &e)))
		fail_msg("%s", e.msg);
	u->p = make_plan(u->be, u->k.m, c, u->k.lb);
	if (harness_ref_open(&u->ref, world, make_reference, c, &e) != 0 ||
	    harness_tokens_make(&u->tk, c->steps, ROWS, T, VOCAB, 20261203, &e) != 0)
		fail_msg("%s", e.msg);
}

static void close_run(run *u)
{
	harness_tokens_free(&u->tk);
	harness_ref_free(&u->ref);
	plan_free(u->p);
	backend_free(u->be);
	mesh_free(u->k.m);
}

/* Step s (0-based) on this rank and the single process: the loss and grad
 * norm (step 1 within FIRST_TOL), and step 1's gradients (the same weights
 * on both sides) within GRAD_TOL of their tensor's largest. */
static void run_step(run *u, int s)
{
	titan_err e = {{0}};
	int32_t ids[ROWS * T], labels[ROWS * T];
	plan_batch b, rb;
	harness_step_batches(&u->k, &u->tk, s, ids, labels, &b, &rb);
	plan_result got, want;
	if (plan_step(u->p, &b, LR, 1.0, &got, &e) != 0)
		fail_msg("step %d: %s", s + 1, e.msg);
	if (harness_ref_step(&u->ref, s + 1, &rb, LR, 1.0, &want, &e) != 0)
		fail_msg("%s", e.msg);
	double tol_l = s ? LOSS_TOL : FIRST_TOL, tol_n = s ? NORM_TOL : FIRST_TOL;
	harness_gap *g = &u->gap;
	int bad = harness_check_step(g, u->k.m->rank, s + 1, &got, &want, tol_l, tol_n, &e);
	if (u->k.m->rank == 0)
		print_message("step %d: loss %.2e, grad norm %.2e (relative)\n", s + 1, g->loss,
			      g->norm);
	if (bad)
		fail_msg("%s", e.msg);
	harness_diff d;
	if (s == 0) {
		if (harness_compare(u->p, &u->ref, 1, &d, &e) != 0)
			fail_msg("%s", e.msg);
		u->dg = d.of_tensor;
		u->gat = d.of_tensor_at;
	}
	if (u->dg > GRAD_TOL)
		fail_msg("rank %d: step 1's gradients differ by %.2e of their tensor's "
			 "largest (%s)", u->k.m->rank, u->dg, u->gat);
}

static void family_plan_equals_the_single_process(void **state)
{
	(void)state;
	run u = {.gat = "-"};
	open_run(&u);
	for (int s = 0; s < u.c.steps; s++)
		run_step(&u, s);
	titan_err e = {{0}};
	harness_diff d;
	double db, bmax;
	if (harness_ref_finish(&u.ref, u.p, &d, &e) != 0 ||
	    harness_compare_buffers(u.p, &u.ref, &db, &bmax, &e) != 0)
		fail_msg("%s", e.msg);
	double dw = d.worst / LR;
	if (u.k.m->rank == 0)
		print_message("%s: worst differences: loss %.2e, grad norm %.2e (relative), "
			      "step 1's gradients %.2e (%s), parameters %.2e lr (%s), buffers "
			      "%.2e (of %.2e)\n", u.c.text, u.gap.worst_loss, u.gap.worst_norm,
			      u.dg, u.gat, dw, d.worst_at, db, bmax);
	if (dw > PARAM_TOL_LR)
		fail_msg("rank %d: parameters differ by %.3f lr (%s)", u.k.m->rank, dw, d.worst_at);
	if (db > BIAS_TOL)
		fail_msg("rank %d: buffers (expert_bias) differ by %.3g", u.k.m->rank, db);
	close_run(&u);
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 60, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(family_plan_equals_the_single_process),
	};
	int rc = case_batch_run("TITAN_FAMILY_PLAN", tests, sizeof tests / sizeof tests[0]);
	comm_finalize(world);
	return rc;
}
