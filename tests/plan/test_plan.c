/* The parallel plans against the single process.  tests/plan/equiv.sh runs
 * this program under mpirun once per plan, naming it in TITAN_PLAN_TEST
 * ("rep=2 shard=2 tp=1 accum=2 reshard=always async=0 lp=1 ac=none
 * prec=fsdp steps=5 model=debugmodel"; the degrees' product is the world size); run alone it
 * checks the world of one.  prec=fsdp puts FSDP2's mixed precision (bf16
 * parameters and activations, float32 reduce) on both sides.
 *
 * Every rank trains a small Llama (3 layers, GQA, seq 64) for 5 steps of a
 * global batch of 12 sequences under the plan, and beside it the same model
 * as one process (the plan of a world of one: mesh NULL) on the whole batch.
 * Per step the loss and grad norm must agree, and after the steps every
 * rank's boxes of the final parameters must equal the same boxes of the
 * single process's tensors, within float32 reduction-order tolerances (see
 * LOSS_TOL, NORM_TOL, PARAM_TOL).  The bytes each rank sent on every mesh
 * dimension in a step, as lib/comm counts them, must equal the formula of
 * titan-train(1) (COMMUNICATION), computed here from the model's shapes.
 * Seeds fixed and printed. */
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
#include "plan/plan.h"

/* Tolerances.  The plans add the same float32 products in another order (a
 * micro-batch's rows split over ranks, partial sums over tp heads,
 * reduce-scatters summing rank by rank, the grad norm's partial sums): each
 * gradient element differs from the single process's by a few units of
 * float32 rounding of the terms it sums.  The loss (summed in double from
 * float32 rows) and the grad norm agree to ~1e-8 relative (measured up to
 * 2e-9 and 2e-8: the bounds leave a factor 50).  Parameters are compared in
 * units of the learning rate: AdamW normalises each gradient element
 * (m / sqrt(v)), so an element whose gradient is a sum of many terms of both
 * signs and nearly cancels keeps little relative precision under reordering,
 * and its update may differ by a visible fraction of lr while every gradient
 * agrees to 1e-7 of the gradient's scale; 5 steps moved no element by more
 * than 0.4% of one step's lr (printed).  A wrong gradient (a contribution
 * lost or counted twice) moves parameters by the order of lr itself. */
#define LOSS_TOL 1e-7
#define NORM_TOL 1e-6
#define PARAM_TOL_LR 0.02
#define LR 1e-3
/* prec=fsdp (FSDP2's MixedPrecisionPolicy: parameters gathered and
 * activations in bf16, gradients reduced in float32), both sides in that
 * mode: the same reorderings, but a float32 difference that moves a value
 * across a bf16 rounding boundary shows as a whole bf16 ulp (2^-8 relative)
 * of an activation, and such flips accumulate over steps.  Measured over 200
 * steps of FSDP 2 against one process in the same mode: loss 5.2e-5, grad
 * norm 3.4e-4 (relative), parameters 0.63 lr; against one process in
 * float32 instead (the bounds must tell the modes apart): 3.1e-4, 3.1e-3,
 * 6.9 lr.  Bounds about 3x above the first and 2-3x below the second. */
#define LOSS_TOL_BF16 1.5e-4
#define NORM_TOL_BF16 1.5e-3
#define PARAM_TOL_LR_BF16 2.0

enum { STEPS = 5, ROWS = 12, T = 64 };

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 256, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

static comm *world;

typedef struct cfg {
	int rep, shard, tp, accum, async, lp;
	int bf16;  /* prec=fsdp: FSDP2's MixedPrecisionPolicy, bf16 param, float32 reduce */
	int steps;
	const llama_args *args; /* model=debugmodel: that flavor instead of the small one */
	plan_reshard reshard;
	model_ac_mode ac;
	int ac_every;
	char text[256];
} cfg;

static int get(const char *s, const char *key, int dflt)
{
	const char *p = strstr(s, key);
	return p ? atoi(p + strlen(key)) : dflt;
}

static void read_cfg(cfg *c)
{
	const char *s = getenv("TITAN_PLAN_TEST");
	s = s ? s : "";
	snprintf(c->text, sizeof c->text, "%s", s);
	c->rep = get(s, "rep=", 1);
	c->tp = get(s, "tp=", 1);
	c->shard = get(s, "shard=", comm_size(world) / (c->rep * c->tp));
	c->accum = get(s, "accum=", 1);
	c->async = get(s, "async=", 0);
	c->lp = get(s, "lp=", 1);
	c->reshard = strstr(s, "reshard=always") ? PLAN_RESHARD_ALWAYS
		     : strstr(s, "reshard=never") ? PLAN_RESHARD_NEVER : PLAN_RESHARD_DEFAULT;
	c->ac = strstr(s, "ac=full") ? MODEL_AC_FULL : strstr(s, "ac=op") ? MODEL_AC_OP
		: strstr(s, "ac=sel2") ? MODEL_AC_SELECTIVE : MODEL_AC_NONE;
	c->ac_every = 2;
	c->bf16 = strstr(s, "prec=fsdp") != NULL;
	c->steps = get(s, "steps=", STEPS);
	c->args = strstr(s, "model=debugmodel") ? flavor_find("debugmodel") : &small;
}

/* Tokens of every step: (steps, ROWS, T), ids and labels, 1 in 9 labels ignored. */
static void tokens(int32_t *ids, int32_t *labels, int steps, uint64_t seed)
{
	print_message("seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < (size_t)steps * ROWS * T; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 256);
		labels[i] = (seed >> 20) % 9 == 0 ? -100 : (int32_t)((seed >> 41) % 256);
	}
}

static plan *make_plan(backend *be, mesh *m, const cfg *c, int b)
{
	plan_opts o = {.be = be, .mesh = m, .args = c->args, .b = b, .t = T, .ac = c->ac,
		       .ac_every = c->ac_every, .reduce = BE_F32, .reshard = c->reshard,
		       .loss_parallel = c->lp, .async_tp = c->async};
	if (c->bf16) /* the policy's types, as lib/trainer/precision.c puts them */
		o.prec = (model_prec){BE_BF16, BE_F32, BE_BF16, BE_BF16};
	adamw_config_default(&o.adamw);
	o.adamw.lr = LR;
	titan_err e = {{0}};
	plan *p = plan_create(&o, &e);
	if (!p)
		fail_msg("plan_create: %s", e.msg);
	assert_int_equal(plan_init_weights(p, 7, 1, &e), 0);
	return p;
}

/* ---- the formula of titan-train(1), COMMUNICATION ---- */

typedef uint64_t counts[MESH_DIM_COUNT][COMM_OP_COUNT];

static uint64_t ar(int n, uint64_t bytes) /* an all-reduce's share, rounded down */
{
	return n > 1 ? 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n : 0;
}

static void formula(const plan *pl, const cfg *c, int b, counts x)
{
	memset(x, 0, sizeof(counts));
	const model *m = plan_model((plan *)pl);
	int N = plan_size(pl, MESH_FSDP), R = plan_size(pl, MESH_DP_REPLICATE);
	int P = plan_size(pl, MESH_TP), L = plan_size(pl, MESH_LOSS), A = c->accum;
	int head = model_head_unit(m), layers = model_args(m)->n_layers;
	uint64_t pe = c->bf16 ? 2 : 4, ge = 4, ae = c->bf16 ? 2 : 4, re = 4;
	for (int u = 0; u <= head; u++) {
		const model_unit *mu = model_unit_at(m, u);
		uint64_t s = 0;
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			const model_tensor *t = model_tensor_at(m, i);
			uint64_t rows = (uint64_t)t->shape[0], cols = t->numel / rows;
			s += (rows + (uint64_t)N - 1) / (uint64_t)N * cols;
		}
		uint64_t gathers = c->reshard == PLAN_RESHARD_ALWAYS ? 2
				   : c->reshard == PLAN_RESHARD_NEVER ? 1 : u == head ? 1 : 2;
		if (N > 1) {
			x[MESH_FSDP][COMM_OP_ALL_GATHER] += A * gathers * (uint64_t)(N - 1) * s * pe;
			x[MESH_FSDP][COMM_OP_REDUCE_SCATTER] += A * (uint64_t)(N - 1) * s * ge;
			x[MESH_DP_REPLICATE][COMM_OP_ALL_REDUCE] += A * ar(R, s * ge);
		} else {
			x[MESH_DP_REPLICATE][COMM_OP_ALL_REDUCE] += ar(R, mu->numel * 4);
		}
	}
	if (P > 1) {
		uint64_t n = (uint64_t)b * T, ns = n / (uint64_t)P, d = (uint64_t)model_args(m)->dim;
		uint64_t one = (uint64_t)(P - 1) * ns * d, L3 = (uint64_t)layers;
		/* recomputed gathers (norm outputs) and reduce-scatters (wo) per layer */
		uint64_t rg = 0, rr = 0;
		for (int l = 0; l < layers; l++) {
			int full = c->ac == MODEL_AC_FULL ||
				   (c->ac == MODEL_AC_SELECTIVE && (l + 1) % c->ac_every == 0);
			rg += full || c->ac == MODEL_AC_OP ? 2 : 0;
			rr += full ? 1 : 0;
		}
		/* gathers read by a matmul and the row-parallel reduce-scatters of the
		 * forward go round the ring when async (sends of the same bytes):
		 * forward 2 per layer + the head's; backward 2 per layer + the
		 * embedding's; the forward's 2 reduce-scatters per layer */
		uint64_t ag_mm = (2 * L3 + 1 + 2 * L3 + 1 + rg) * one * ae;
		uint64_t rs_mm = (2 * L3 + rr) * one * ae;
		uint64_t rs_plain = (1 + 2 * L3 + 1) * one * ae; /* embedding, backward's, head's */
		uint64_t loss = c->lp ? (uint64_t)(P - 1) * n * 3 * 4
				: (uint64_t)(P - 1) * n *
					  (((uint64_t)c->args->vocab_size + (uint64_t)P - 1) / (uint64_t)P) * ae;
		int op_ag = c->async ? COMM_OP_SEND : COMM_OP_ALL_GATHER;
		int op_rs = c->async ? COMM_OP_SEND : COMM_OP_REDUCE_SCATTER;
		x[MESH_TP][op_ag] += A * ag_mm;
		x[MESH_TP][op_rs] += A * rs_mm;
		x[MESH_TP][COMM_OP_REDUCE_SCATTER] += A * rs_plain;
		x[MESH_TP][COMM_OP_ALL_GATHER] += A * loss;
		(void)re;
		uint64_t rep = 0;
		for (int i = 0; i < model_num_tensors(m); i++) {
			const model_tensor *t = model_tensor_at(m, i);
			uint64_t rows = (uint64_t)t->shape[0];
			if (t->tp == MODEL_TP_REPLICATE)
				rep += (rows + (uint64_t)N - 1) / (uint64_t)N * (t->numel / rows);
		}
		x[MESH_TP][COMM_OP_ALL_REDUCE] += ar(P, rep * 4) + ar(P, 8); /* + the grad norm */
	}
	x[MESH_LOSS][COMM_OP_ALL_REDUCE] += 3 * ar(L, 8); /* valid labels, loss sum, max */
	x[MESH_FSDP][COMM_OP_ALL_REDUCE] += ar(N, 8);     /* the grad norm */
}

static const mesh_dim dims[] = {MESH_FSDP, MESH_DP_REPLICATE, MESH_TP, MESH_LOSS};

static void check_bytes(const mesh *m, const counts want)
{
	for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
		const comm_stats *s = comm_get_stats(mesh_comm(m, dims[k]));
		for (int op = 0; op < COMM_OP_COUNT; op++)
			if (s->bytes_sent[op] != want[dims[k]][op])
				fail_msg("rank %d: %s %s: %llu bytes sent, the formula says %llu", m->rank,
					 mesh_dim_name(dims[k]), comm_op_name((comm_op)op),
					 (unsigned long long)s->bytes_sent[op],
					 (unsigned long long)want[dims[k]][op]);
	}
}

/* Every rank's boxes of its final parameters against the same boxes of the
 * single process's tensors: the largest |a - b|. */
static double compare_params(plan *dist, plan *ref)
{
	const model *g = plan_global_model(dist);
	size_t nd = plan_shard_numel(dist), nr = plan_shard_numel(ref);
	float *a = malloc(nd * sizeof(float)), *b = malloc(nr * sizeof(float));
	assert_non_null(a);
	assert_non_null(b);
	memcpy(a, plan_shard_params(dist), nd * sizeof(float));
	memcpy(b, plan_shard_params(ref), nr * sizeof(float));
	double worst = 0;
	for (int i = 0; i < model_num_tensors(g); i++) {
		const model_tensor *t = model_tensor_at(g, i);
		const plan_box *x = plan_box_at(dist, i);
		const float *full = b + plan_box_at(ref, i)->shard_off;
		double num = 0;
		int64_t z1 = x->ndim > 1 ? x->sizes[1] : 1, s1 = t->ndim > 1 ? t->shape[1] : 1;
		int64_t o1 = x->ndim > 1 ? x->offsets[1] : 0;
		for (int64_t r = 0; x->numel && r < x->sizes[0]; r++)
			for (int64_t j = 0; j < z1; j++) {
				double d = fabs((double)a[x->shard_off + (size_t)(r * z1 + j)] -
						(double)full[(x->offsets[0] + r) * s1 + o1 + j]);
				num = d > num ? d : num;
			}
		worst = num > worst ? num : worst;
	}
	free(a);
	free(b);
	return worst;
}

static double rel(double a, double b)
{
	return fabs(a - b) / fabs(b);
}

static void plan_equals_the_single_process(void **state)
{
	(void)state;
	cfg c;
	read_cfg(&c);
	titan_err e = {{0}};
	mesh_degrees want = {c.rep, c.shard, 1, c.tp, 1, 1, 1}, d;
	if (mesh_resolve(&want, comm_size(world), &d, &e) != 0)
		fail_msg("TITAN_PLAN_TEST \"%s\": %s", c.text, e.msg);
	mesh *m;
	assert_int_equal(mesh_create(world, &d, &m, &e), 0);
	int dp = m->size[MESH_BATCH], r = m->coord[MESH_BATCH];
	assert_true(ROWS % (dp * c.accum) == 0);
	int lb = ROWS / (dp * c.accum);
	backend *be = backend_cpu_create(1, &e), *rbe = backend_cpu_create(1, &e);
	plan *p = make_plan(be, m, &c, lb);
	cfg one = c;
	one.accum = 1;
	plan *ref = make_plan(rbe, NULL, &one, ROWS);
	/* memory: every rank holds 1/N of the (TP-local) parameters, padding aside */
	size_t local = model_num_params(plan_model(p)), N = (size_t)m->size[MESH_FSDP];
	assert_true(plan_shard_numel(p) >= local / N);
	assert_true(plan_shard_numel(p) <= local / N + 64 * model_num_tensors(plan_model(p)));

	int32_t *ids = malloc(sizeof(int32_t) * (size_t)c.steps * ROWS * T);
	int32_t *labels = malloc(sizeof(int32_t) * (size_t)c.steps * ROWS * T);
	int32_t *mi = malloc(sizeof(int32_t) * ROWS * T), *ml = malloc(sizeof(int32_t) * ROWS * T);
	tokens(ids, labels, c.steps, 20261203);
	double worst_loss = 0, worst_norm = 0;
	double loss_tol = c.bf16 ? LOSS_TOL_BF16 : LOSS_TOL, norm_tol = c.bf16 ? NORM_TOL_BF16 : NORM_TOL;
	for (int s = 0; s < c.steps; s++) {
		size_t base = (size_t)s * ROWS * T;
		/* the loader's order: micro-batch k takes rows k*lb*dp + r*lb.. */
		for (int k = 0; k < c.accum; k++)
			for (int i = 0; i < lb; i++) {
				size_t row = (size_t)(k * lb * dp + r * lb + i);
				memcpy(mi + ((size_t)k * lb + i) * T, ids + base + row * T, T * sizeof(int32_t));
				memcpy(ml + ((size_t)k * lb + i) * T, labels + base + row * T, T * sizeof(int32_t));
			}
		for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
			comm_reset_stats(mesh_comm(m, dims[k]));
		plan_batch b = {mi, ml, c.accum}, rb = {ids + base, labels + base, 1};
		plan_result got, exp;
		if (plan_step(p, &b, LR, 1.0, &got, &e) != 0)
			fail_msg("step %d: %s", s + 1, e.msg);
		if (plan_step(ref, &rb, LR, 1.0, &exp, &e) != 0)
			fail_msg("reference step %d: %s", s + 1, e.msg);
		counts want_bytes;
		formula(p, &c, lb, want_bytes);
		check_bytes(m, want_bytes);
		assert_int_equal(got.n_valid, exp.n_valid);
		double dl = rel(got.loss, exp.loss), dn = rel(got.grad_norm, exp.grad_norm);
		worst_loss = dl > worst_loss ? dl : worst_loss;
		worst_norm = dn > worst_norm ? dn : worst_norm;
		if (dl > loss_tol || dn > norm_tol)
			fail_msg("rank %d step %d: loss %.10f vs %.10f (rel %.2e), grad norm %.10f vs "
				 "%.10f (rel %.2e)", m->rank, s + 1, got.loss, exp.loss, dl, got.grad_norm,
				 exp.grad_norm, dn);
	}
	double dw = compare_params(p, ref) / LR;
	if (m->rank == 0)
		print_message("%s: worst differences: loss %.2e, grad norm %.2e (relative), "
			      "parameters %.2e lr\n", c.text[0] ? c.text : "world of one", worst_loss,
			      worst_norm, dw);
	if (dw > (c.bf16 ? PARAM_TOL_LR_BF16 : PARAM_TOL_LR))
		fail_msg("rank %d: parameters differ by %.3f lr", m->rank, dw);
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
		cmocka_unit_test(plan_equals_the_single_process),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
