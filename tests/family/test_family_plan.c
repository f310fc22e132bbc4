/* Every family's debug flavor under the parallel plans against the single
 * process.  tests/family/equiv.sh runs this program under mpirun once per
 * case, naming it in TITAN_FAMILY_PLAN ("qwen3:debugmodel_moe_small shard=2
 * tp=1 accum=1 async=0 steps=5"; the degrees' product is the world size;
 * steps defaults to 5, fewer under the sanitizers); run alone it checks
 * Qwen3's debug flavor in a world of one (a plan over a mesh of one rank
 * against the plan without a mesh).
 *
 * Every rank trains the flavor for 5 steps of a global batch of 4 sequences
 * of 32 tokens under the plan, and beside it the same model as one process
 * on the whole batch (the families' own shapes, vocabulary cut to 2048: 4 x
 * 32 tokens keep CI fast, as tests/family/train.sh does).  Per step the loss
 * and grad norm must agree; after step 1 (the same weights on both sides)
 * every rank's boxes of the gradients must equal the same boxes of the single
 * process's; after the last step its boxes of the parameters, and its
 * buffers (the MoE layers' expert_bias, moved by the load balancing after
 * every step) the single process's.  Seeds fixed and printed.
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
	char text[256];
} cfg;

static int get(const char *s, const char *key, int dflt)
{
	const char *p = strstr(s, key);
	return p ? atoi(p + strlen(key)) : dflt;
}

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
	c->tp = get(s, "tp=", 1);
	c->shard = get(s, "shard=", comm_size(world) / c->tp);
	c->accum = get(s, "accum=", 1);
	c->async = get(s, "async=", 0);
	c->steps = get(s, "steps=", STEPS);
	if (c->steps < 2)
		fail_msg("TITAN_FAMILY_PLAN \"%s\": steps must be at least 2", s);
}

/* Tokens of every step: (steps, ROWS, T) ids below vocab and labels, 1 in 9
 * labels ignored. */
static void tokens(int32_t *ids, int32_t *labels, int steps, int vocab, uint64_t seed)
{
	print_message("seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < (size_t)steps * ROWS * T; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
		labels[i] = (seed >> 20) % 9 == 0 ? -100 : (int32_t)((seed >> 41) % (uint64_t)vocab);
	}
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

/* Every rank's boxes of its shard buffer (final parameters, or gradients
 * with grads) against the same boxes of the single process's tensors, up to
 * 3 dims (the experts' weights): the largest |a - b|, or with grads the
 * largest |a - b| / max |b| of the tensor; *where names its tensor. */
static double compare_boxes(plan *dist, plan *ref, int grads, const char **where)
{
	const model *g = plan_global_model(dist);
	const float *a = grads ? plan_shard_grads(dist) : plan_shard_params(dist);
	const float *b = grads ? plan_shard_grads(ref) : plan_shard_params(ref);
	double worst = 0;
	for (int i = 0; i < model_num_tensors(g); i++) {
		const model_tensor *t = model_tensor_at(g, i);
		const plan_box *x = plan_box_at(dist, i);
		const float *full = b + plan_box_at(ref, i)->shard_off;
		double scale = 0;
		for (size_t k = 0; grads && k < t->numel; k++)
			scale = fabs(full[k]) > scale ? fabs(full[k]) : scale;
		scale = grads ? (scale > 0 ? scale : 1) : 1;
		int64_t z[3] = {1, 1, 1}, o[3] = {0, 0, 0}, s[3] = {1, 1, 1};
		for (int d = 0; d < x->ndim; d++) {
			z[d] = x->sizes[d];
			o[d] = x->offsets[d];
			s[d] = t->shape[d];
		}
		size_t k = 0;
		for (int64_t r = 0; x->numel && r < z[0]; r++)
			for (int64_t j = 0; j < z[1]; j++)
				for (int64_t l = 0; l < z[2]; l++, k++) {
					size_t at = (size_t)(((o[0] + r) * s[1] + o[1] + j) * s[2] + o[2] + l);
					double d = fabs((double)a[x->shard_off + k] - (double)full[at]) / scale;
					if (d > worst) {
						worst = d;
						*where = t->fqn;
					}
				}
	}
	return worst;
}

/* The largest difference of the buffers (every rank holds them whole), and
 * in *size the largest of the single process's (so that the log shows they
 * moved). */
static double compare_buffers(plan *dist, plan *ref, double *size)
{
	model *a = plan_model(dist), *b = plan_model(ref);
	assert_int_equal(model_num_buffers(a), model_num_buffers(b));
	double worst = 0;
	*size = 0;
	for (int i = 0; i < model_num_buffers(a); i++) {
		const model_tensor *ta = model_buffer_at(a, i), *tb = model_buffer_at(b, i);
		assert_int_equal(ta->numel, tb->numel);
		float *x = malloc(ta->numel * sizeof(float)), *y = malloc(tb->numel * sizeof(float));
		assert_non_null(x);
		assert_non_null(y);
		model_buffer_read(a, ta, x);
		model_buffer_read(b, tb, y);
		for (size_t j = 0; j < ta->numel; j++) {
			double d = fabs((double)x[j] - (double)y[j]);
			worst = d > worst ? d : worst;
			*size = fabs(y[j]) > *size ? fabs(y[j]) : *size;
		}
		free(x);
		free(y);
	}
	return worst;
}

static double rel(double a, double b)
{
	return fabs(a - b) / fabs(b);
}

static void family_plan_equals_the_single_process(void **state)
{
	(void)state;
	cfg c;
	read_cfg(&c);
	titan_err e = {{0}};
	mesh_degrees want = {1, c.shard, 1, c.tp, 1, 1, 1}, d;
	if (mesh_resolve(&want, comm_size(world), &d, &e) != 0)
		fail_msg("TITAN_FAMILY_PLAN \"%s\": %s", c.text, e.msg);
	mesh *m;
	assert_int_equal(mesh_create(world, &d, &m, &e), 0);
	int dp = m->size[MESH_BATCH], r = m->coord[MESH_BATCH];
	assert_true(ROWS % (dp * c.accum) == 0);
	int lb = ROWS / (dp * c.accum);
	backend *be = backend_cpu_create(1, &e), *rbe = backend_cpu_create(1, &e);
	plan *p = make_plan(be, m, &c, lb);
	plan *ref = make_plan(rbe, NULL, &c, ROWS);

	int vocab = VOCAB;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)c.steps * ROWS * T);
	int32_t *labels = malloc(sizeof(int32_t) * (size_t)c.steps * ROWS * T);
	int32_t *mi = malloc(sizeof(int32_t) * ROWS * T), *ml = malloc(sizeof(int32_t) * ROWS * T);
	assert_true(ids && labels && mi && ml);
	tokens(ids, labels, c.steps, vocab, 20261203);
	double worst_loss = 0, worst_norm = 0, dg = 0;
	const char *gat = "-";
	for (int s = 0; s < c.steps; s++) {
		size_t base = (size_t)s * ROWS * T;
		/* the loader's order: micro-batch k takes rows k*lb*dp + r*lb.. */
		for (int k = 0; k < c.accum; k++)
			for (int i = 0; i < lb; i++) {
				size_t row = (size_t)(k * lb * dp + r * lb + i);
				memcpy(mi + ((size_t)k * lb + i) * T, ids + base + row * T, T * sizeof(int32_t));
				memcpy(ml + ((size_t)k * lb + i) * T, labels + base + row * T, T * sizeof(int32_t));
			}
		plan_batch b = {mi, ml, c.accum}, rb = {ids + base, labels + base, 1};
		plan_result got, exp;
		if (plan_step(p, &b, LR, 1.0, &got, &e) != 0)
			fail_msg("step %d: %s", s + 1, e.msg);
		if (plan_step(ref, &rb, LR, 1.0, &exp, &e) != 0)
			fail_msg("reference step %d: %s", s + 1, e.msg);
		assert_int_equal(got.n_valid, exp.n_valid);
		double dl = rel(got.loss, exp.loss), dn = rel(got.grad_norm, exp.grad_norm);
		worst_loss = dl > worst_loss ? dl : worst_loss;
		worst_norm = dn > worst_norm ? dn : worst_norm;
		if (m->rank == 0)
			print_message("step %d: loss %.2e, grad norm %.2e (relative)\n", s + 1, dl, dn);
		double tol_l = s ? LOSS_TOL : FIRST_TOL, tol_n = s ? NORM_TOL : FIRST_TOL;
		if (dl > tol_l || dn > tol_n)
			fail_msg("rank %d step %d: loss %.10f vs %.10f (rel %.2e), grad norm %.10f vs "
				 "%.10f (rel %.2e)", m->rank, s + 1, got.loss, exp.loss, dl, got.grad_norm,
				 exp.grad_norm, dn);
		if (s == 0) /* the same weights: the gradients themselves */
			dg = compare_boxes(p, ref, 1, &gat);
		if (dg > GRAD_TOL)
			fail_msg("rank %d: step 1's gradients differ by %.2e of their tensor's "
				 "largest (%s)", m->rank, dg, gat);
	}
	const char *at = "-";
	double bmax, dw = compare_boxes(p, ref, 0, &at) / LR, db = compare_buffers(p, ref, &bmax);
	if (m->rank == 0)
		print_message("%s: worst differences: loss %.2e, grad norm %.2e (relative), "
			      "step 1's gradients %.2e (%s), parameters %.2e lr (%s), buffers "
			      "%.2e (of %.2e)\n", c.text, worst_loss, worst_norm, dg, gat, dw, at, db,
			      bmax);
	if (dw > PARAM_TOL_LR)
		fail_msg("rank %d: parameters differ by %.3f lr (%s)", m->rank, dw, at);
	if (db > BIAS_TOL)
		fail_msg("rank %d: buffers (expert_bias) differ by %.3g", m->rank, db);
	free(ids);
	free(labels);
	free(mi);
	free(ml);
	plan_free(p);
	plan_free(ref);
	backend_free(be);
	backend_free(rbe);
	mesh_free(m);
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
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
