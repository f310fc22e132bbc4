/* Expert parallelism against the single process.  tests/plan/ep.sh runs this
 * program under mpirun once per world size, naming its meshes in TITAN_EP_TEST
 * (separated by ';': tests/support/case_batch.h), each ("ep=2
 * shard=4 tp=1 accum=2 ac=full"; dp_shard defaults to the world size over
 * tp; model=gpt_oss: see flavor(); words matched by whole key, an unknown
 * one refused: tests/support/case_args.h); run alone it checks the world of
 * one (ep 1), 2 steps in short runs (test_short).
 *
 * Every rank trains DeepSeek V3's debugmodel_small (titan's debugmodel with 4
 * heads of a narrower latent attention: 6 layers, the last 5 of 8
 * experts, top-3, 2 shared experts, expert_bias balancing) for 5 steps (or
 * steps=N) of a global batch of 8 sequences of 32 tokens under the plan, and
 * rank 0 beside it the same model as one process (mesh NULL) on the whole
 * batch, its results sent to every rank (tests/support/plan_harness.h).  Per
 * step the loss and grad norm must agree, and after the steps every rank's
 * boxes of the final parameters (its experts' chunks included) must equal
 * the same boxes of the single process's tensors, within float32
 * reduction-order tolerances (see LOSS_TOL, NORM_TOL, PARAM_TOL_LR).  The
 * bytes each rank sent on every mesh dimension in a step, as lib/comm counts
 * them, must equal the formula of titan-train(1) (COMMUNICATION), the
 * all-to-alls' from the rows the routing sent (model_ep_take_rows); the rows
 * sent and received over all ranks must balance.  Seeds fixed and printed.  dev=1: the mesh's
 * communicators take the backend's memory only, as NCCL's (test_plan.c's
 * dev=1), their host twins the scalars.  masked=1: SFT chat data's masked
 * labels on both sides (test_plan.c's masked=1). */
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
#include "../support/devcomm.h"
#include "../support/plan_harness.h"
#include "../support/testutil.h"

/* Tolerances: test_plan.c's for the loss and grad norm (measured here up to
 * 4.1e-9 and 4.3e-9 on debugmodel_small; 1.5e-8 and 2.3e-7 on debugmodel).
 * Parameters in units of the learning rate, as there: AdamW's m / sqrt(v)
 * turns the last bits of a nearly cancelling gradient element into a visible
 * fraction of lr; here the meshes move a parameter by 0.004 to 0.008 lr from
 * the single process in 5 steps, GPT-OSS's by 0.014 (on debugmodel FSDP 2
 * alone moved layers.5.attention.wo.weight by 0.036 lr, EP 2 x TP 2 by 0.042:
 * float32 sums in the tp reduce-scatters' order besides).  A lost or doubled
 * contribution moves parameters by the order of lr itself. */
#define LOSS_TOL 1e-7
#define NORM_TOL 1e-6
#define PARAM_TOL_LR 0.1
#define LR 1e-3

enum { STEPS = 5, ROWS = 8, T = 32 }; /* STEPS: the most (steps=N: fewer) */

static comm *world;
static int gpt_oss; /* model=gpt_oss: see flavor() */
static int mtp;     /* mtp=1: one multi-token prediction depth (0.3.0's MTP) */

typedef struct cfg {
	int ep, shard, tp, accum, steps, dev;
	int docs; /* docs=1: torchtitan 0.3.0's documents on both sides */
	int masked; /* masked=1: chat data's masked labels (harness_tokens_mask) */
	int lp;   /* lp=0: the logits gathered (disable_loss_parallel) */
	model_ac_mode ac;
	case_args spec; /* TITAN_EP_TEST */
} cfg;

static const case_choice ac_modes[] = {
	{"none", MODEL_AC_NONE}, {"full", MODEL_AC_FULL}, {"op", MODEL_AC_OP}, {NULL, 0}};
static const case_choice models[] = {{"deepseek_v3", 0}, {"gpt_oss", 1}, {NULL, 0}};

static void read_cfg(cfg *c)
{
	case_args *a = &c->spec;
	titan_err e = {{0}};
	if (case_parse(a, "TITAN_EP_TEST", getenv("TITAN_EP_TEST"), &e) != 0)
		fail_msg("%s", e.msg);
	c->ep = case_int(a, "ep", 1);
	c->tp = case_int(a, "tp", 1);
	c->shard = case_int(a, "shard", comm_size(world) / c->tp);
	c->accum = case_int(a, "accum", 1);
	c->steps = case_int(a, "steps", test_short() ? 2 : STEPS);
	if (c->steps < 1 || c->steps > STEPS)
		c->steps = STEPS;
	gpt_oss = case_pick(a, "model", models, 0);
	c->dev = case_int(a, "dev", 0);
	c->docs = case_int(a, "docs", 0);
	c->masked = case_int(a, "masked", 0);
	c->lp = case_int(a, "lp", 1);
	mtp = case_int(a, "mtp", 0);
	c->ac = (model_ac_mode)case_pick(a, "ac", ac_modes, MODEL_AC_NONE);
	if (case_end(a, &e) != 0)
		fail_msg("%s", e.msg);
}

/* The model: DeepSeek V3's debugmodel_small (with mtp=1 one MTP depth, whose
 * block's experts are the head unit's), or with model=gpt_oss GPT-OSS's
 * debugmodel_small (experts with biases: mlp2's is added once per token)
 * on a vocabulary of 2048. */
static const llama_args *flavor(void)
{
	static llama_args with_mtp;
	const llama_args *a =
		gpt_oss ? model_family_flavor(model_family_find("gpt_oss"), "debugmodel_small")
			: model_family_flavor(model_family_find("deepseek_v3"), "debugmodel_small");
	assert_non_null(a);
	if (!mtp)
		return a;
	with_mtp = *a;
	with_mtp.mtp_layers = 1;
	with_mtp.mtp_scale = 0.3;
	return &with_mtp;
}

/* The MoE blocks: the MoE layers and the MTP depths copying the last one. */
static uint64_t moe_blocks(const llama_args *a)
{
	uint64_t n = 0;
	for (int l = 0; l < a->n_layers + a->mtp_layers; l++)
		n += model_family_moe_layer(a, l < a->n_layers ? l : a->n_layers - 1) != 0;
	return n;
}

static int vocab(void)
{
	return gpt_oss ? 2048 : flavor()->vocab_size;
}

static plan *make_plan(backend *be, mesh *m, const cfg *c, int b)
{
	plan_opts o = {.be = be, .mesh = m, .args = flavor(), .vocab_size = vocab(), .b = b,
		       .t = T, .ac = c->ac,
		       .ac_every = 1, .reduce = BE_F32, .loss_parallel = c->lp};
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

static uint64_t ar(int n, uint64_t bytes)
{
	return n > 1 ? 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n : 0;
}

/* Unit u's tensor-parallel bytes per step: per micro-batch of n tokens,
 * m = (P - 1) n/P d x 4 per gather or reduce-scatter of the stream; a block 2
 * gathers and 2 reduce-scatters forward and backward each, what AC recomputes
 * again (full: 2 gathers, 1 reduce-scatter; op: 2 gathers); the embedding a
 * reduce-scatter forward and a gather backward, the head the reverse and the
 * loss's all-gather of (n, 3) float32 statistics (lp=0: the (n, V/P) logits).
 * Each MTP depth (counted
 * with the head) is a block that keeps its activations (4 and 4), its shifted
 * embedding's reduce-scatter and gather, its output's gather and gradient's
 * reduce-scatter and its own loss statistics. */
static void tp_unit(counts x, const cfg *c, int u, int head, uint64_t A, const model *m, int P)
{
	uint64_t n = (uint64_t)(ROWS / (c->shard * c->accum)) * T; /* batch = shard ranks */
	uint64_t one = (uint64_t)(P - 1) * (n / (uint64_t)P) * (uint64_t)model_args(m)->dim * 4;
	uint64_t ag = 1, rs = 1, loss = 0;
	if (u == head) {
		int k = model_args(m)->mtp_layers;
		uint64_t v = (uint64_t)vocab(), per = c->lp ? 3 : (v + (uint64_t)P - 1) / (uint64_t)P;
		loss = (uint64_t)(1 + k) * (P - 1) * n * per * 4;
		ag += 6 * (uint64_t)k;
		rs += 6 * (uint64_t)k;
	} else if (u > 0) {
		int full = c->ac == MODEL_AC_FULL;
		ag = 4 + (full || c->ac == MODEL_AC_OP ? 2 : 0);
		rs = 4 + (full ? 1 : 0);
	}
	x[MESH_TP][COMM_OP_ALL_GATHER] += A * (ag * one + loss);
	x[MESH_TP][COMM_OP_REDUCE_SCATTER] += A * rs * one;
}

/* rows: the expert rows this rank sent to and received from other ranks in
 * the step's forwards (recomputations included), fwd_layers: the MoE
 * layers' forwards (each exchanges its rows per expert once). */
static void formula(const plan *pl, const cfg *c, int64_t rows, uint64_t fwd_layers,
		    uint64_t bwd_rows, counts x)
{
	memset(x, 0, sizeof(counts));
	const model *m = plan_model((plan *)pl);
	const llama_args *a = model_args(m);
	int N = plan_size(pl, MESH_FSDP), L = plan_size(pl, MESH_LOSS), A = c->accum;
	int EP = plan_size(pl, MESH_EP), NE = EP > 1 ? plan_size(pl, MESH_EFSDP) : N;
	int P = plan_size(pl, MESH_TP);
	int head = model_head_unit(m);
	uint64_t rep = 0; /* tp-replicated elements of the rank's shard */
	for (int u = 0; u <= head; u++) {
		const model_unit *mu = model_unit_at(m, u);
		uint64_t s = 0, se = 0;
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			const model_tensor *t = model_tensor_at(m, i);
			uint64_t r = (uint64_t)t->shape[0], cols = t->numel / r;
			if (EP > 1 && t->is_expert)
				se += (r + (uint64_t)NE - 1) / (uint64_t)NE * cols;
			else
				s += (r + (uint64_t)N - 1) / (uint64_t)N * cols;
			if (t->tp == MODEL_TP_REPLICATE && !(EP > 1 && t->is_expert))
				rep += (r + (uint64_t)N - 1) / (uint64_t)N * cols;
		}
		uint64_t gathers = u == head ? 1 : 2;
		if (N > 1) {
			x[MESH_FSDP][COMM_OP_ALL_GATHER] += A * gathers * (uint64_t)(N - 1) * s * 4;
			x[MESH_FSDP][COMM_OP_REDUCE_SCATTER] += A * (uint64_t)(N - 1) * s * 4;
		}
		if (EP > 1 && NE > 1 && se) {
			x[MESH_EFSDP][COMM_OP_ALL_GATHER] += A * gathers * (uint64_t)(NE - 1) * se * 4;
			x[MESH_EFSDP][COMM_OP_REDUCE_SCATTER] += A * (uint64_t)(NE - 1) * se * 4;
		}
		if (P > 1) /* titan-train(1)'s tp term, float32, loss parallel, not async */
			tp_unit(x, c, u, head, A, m, P);
	}
	if (P > 1)
		x[MESH_TP][COMM_OP_ALL_REDUCE] += ar(P, rep * 4) + ar(P, 8); /* + the grad norm */
	if (EP > 1) {
		uint64_t el = (uint64_t)(a->moe.experts / EP), d = (uint64_t)a->dim;
		x[MESH_EP][COMM_OP_ALL_TO_ALL] += fwd_layers * (uint64_t)(EP - 1) * el * 4;
		x[MESH_EP][COMM_OP_ALL_TO_ALLV] += ((uint64_t)rows + bwd_rows) * d * 4;
	}
	/* the expert_bias counts: (MoE blocks, experts) float32 */
	uint64_t nb = moe_blocks(a) * (uint64_t)a->moe.experts * 4;
	x[MESH_LOSS][COMM_OP_ALL_REDUCE] += 3 * ar(L, 8) + ar(L, nb);
	x[MESH_FSDP][COMM_OP_ALL_REDUCE] += ar(N, 8); /* the grad norm */
}

static const mesh_dim dims[] = {MESH_FSDP, MESH_LOSS, MESH_EP, MESH_EFSDP, MESH_TP};

static void reset_stats(mesh *m)
{
	for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
		comm_reset_stats(mesh_comm(m, dims[k]));
		comm_reset_stats(mesh_host_comm(m, dims[k]));
	}
}

static void check_bytes(const mesh *m, const counts want)
{
	for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
		if (dims[k] == MESH_EFSDP && m->size[MESH_EP] == 1)
			continue; /* without ep efsdp is fsdp's ranks: its bytes are fsdp's */
		comm *c = mesh_comm(m, dims[k]), *h = mesh_host_comm(m, dims[k]);
		for (int op = 0; op < COMM_OP_COUNT; op++) {
			uint64_t b = comm_get_stats(c)->bytes_sent[op] +
				     (h != c ? comm_get_stats(h)->bytes_sent[op] : 0);
			if (b != want[dims[k]][op])
				fail_msg("rank %d: %s %s: %llu bytes sent, the formula says %llu", m->rank,
					 mesh_dim_name(dims[k]), comm_op_name((comm_op)op),
					 (unsigned long long)b, (unsigned long long)want[dims[k]][op]);
		}
	}
}

/* One mesh on this rank: its plan, and the single process's run (on rank 0:
 * plan_harness.h). */
typedef struct run {
	cfg c;
	harness_rank k;
	backend *be;
	devcomm_tracker *trk;
	plan *p;
	harness_ref ref;
	harness_tokens tk;
	harness_gap gap;
	uint64_t moe_layers;
} run;

static plan *make_reference(backend *be, const void *c)
{
	cfg one = *(const cfg *)c;
	one.accum = 1;
	return make_plan(be, NULL, &one, ROWS);
}

static void open_run(run *u)
{
	cfg *c = &u->c;
	read_cfg(c);
	titan_err e = {{0}};
	mesh_degrees want = {1, c->shard, 1, c->tp, 1, c->ep, 1};
	if (harness_rank_open(&u->k, world, &want, &c->spec, ROWS, c->accum, &e) != 0 ||
	    !(u->be = backend_cpu_create(1, &e)))
		fail_msg("%s", e.msg);
	if (c->dev && (!(u->trk = devcomm_track(u->be)) ||
		       mesh_use_device_comms(u->k.m, devcomm_make, u->trk, &e) != 0))
		fail_msg("device-shaped communicators: %s", e.msg);
	u->p = make_plan(u->be, u->k.m, c, u->k.lb);
	if (harness_ref_open(&u->ref, world, make_reference, c, &e) != 0 ||
	    harness_tokens_make(&u->tk, c->steps, ROWS, T, vocab(), 20261203, &e) != 0 ||
	    (c->masked && harness_tokens_mask(&u->tk, c->steps, vocab(), &e) != 0))
		fail_msg("%s", e.msg);
	/* each rank holds its E/ep experts: the expert tensors' dim 0 */
	const model *pm = plan_model(u->p);
	for (int i = 0; i < model_num_tensors(pm); i++)
		if (model_tensor_at(pm, i)->is_expert)
			assert_int_equal(model_tensor_at(pm, i)->shape[0],
					 flavor()->moe.experts / c->ep);
	u->moe_layers = moe_blocks(flavor());
}

static void close_run(run *u)
{
	harness_tokens_free(&u->tk);
	harness_ref_free(&u->ref);
	plan_free(u->p);
	mesh_free(u->k.m);
	devcomm_untrack(u->trk);
	backend_free(u->be);
}

/* The bytes of step's communication against the formula, from the expert
 * rows this rank sent and received; the rows crossing ranks (all of them
 * sent are received) returned. */
static int64_t check_step_bytes(const run *u)
{
	int64_t sent, recvd;
	model_ep_take_rows(plan_model(u->p), &sent, &recvd);
	/* every forward sends its rows and brings the outputs back; the
	 * backward sends their gradients once each way (full AC: the
	 * forward twice) */
	int full = u->c.ac == MODEL_AC_FULL;
	uint64_t fwd = (uint64_t)u->c.accum * u->moe_layers * (full ? 2 : 1);
	int64_t bwd = full ? (sent + recvd) / 2 : sent + recvd;
	counts want_bytes;
	formula(u->p, &u->c, sent + recvd, fwd, (uint64_t)bwd, want_bytes);
	check_bytes(u->k.m, want_bytes);
	int64_t bal[2] = {sent, recvd};
	titan_err e = {{0}};
	if (comm_all_reduce(world, bal, bal, 2, COMM_I64, COMM_SUM, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(bal[0], bal[1]);
	return bal[0];
}

/* Step s (0-based) on this rank and the single process: the bytes, the loss
 * and grad norm; the expert rows that crossed ranks returned. */
static int64_t run_step(run *u, int s)
{
	titan_err e = {{0}};
	int32_t ids[ROWS * T], labels[ROWS * T];
	plan_batch b, rb;
	harness_step_batches(&u->k, &u->tk, s, ids, labels, &b, &rb);
	if (u->c.docs)
		harness_doc_positions(&u->k, ROWS, T, s, &b, &rb);
	reset_stats(u->k.m);
	plan_result got, want;
	if (plan_step(u->p, &b, LR, 1.0, &got, &e) != 0)
		fail_msg("step %d: %s", s + 1, e.msg);
	int64_t moved = check_step_bytes(u);
	if (harness_ref_step(&u->ref, s + 1, &rb, LR, 1.0, &want, &e) != 0 ||
	    harness_check_step(&u->gap, u->k.m->rank, s + 1, &got, &want, LOSS_TOL, NORM_TOL,
			       &e) != 0)
		fail_msg("%s", e.msg);
	return moved;
}

static void ep_equals_the_single_process(void **state)
{
	(void)state;
	run u = {0};
	int64_t moved = 0;
	open_run(&u);
	for (int s = 0; s < u.c.steps; s++)
		moved += run_step(&u, s);
	if (u.c.ep > 1)
		assert_true(moved > 0); /* tokens did cross ranks */
	titan_err e = {{0}};
	harness_diff d;
	if (harness_ref_finish(&u.ref, u.p, &d, &e) != 0)
		fail_msg("%s", e.msg);
	double dw = d.worst / LR;
	if (u.k.m->rank == 0)
		print_message("%s: worst differences: loss %.2e, grad norm %.2e (relative), "
			      "parameters %.2e lr; %lld expert rows crossed ranks\n",
			      u.c.spec.text[0] ? u.c.spec.text : "world of one",
			      u.gap.worst_loss, u.gap.worst_norm, dw, (long long)moved);
	if (dw > PARAM_TOL_LR)
		fail_msg("rank %d: parameters differ by %.3f lr (%s)", u.k.m->rank, dw,
			 d.worst_at);
	close_run(&u);
}

/* A layout-only plan of rank 0 of degrees d (no comms: the refusals come
 * before any), NULL with the message in e when refused. */
static plan *layout(backend *be, mesh_degrees d, int f8, titan_err *e)
{
	mesh m = {.d = d};
	m.world_size = d.dp_replicate * d.dp_shard * d.cp * d.tp * d.pp;
	mesh_sizes(&m.d, m.size);
	mesh_coords(&m.d, 0, m.coord);
	plan_opts o = {.be = be, .mesh = &m, .args = flavor(), .b = 1, .t = T, .reduce = BE_F32,
		       .layout_only = 1, .f8_all_gather = f8};
	adamw_config_default(&o.adamw);
	return plan_create(&o, e);
}

/* EP 2 and EP 2 x TP 2 lay out (the planner's layout-only plans), but EP
 * with experts split over tp (ETP = TP) and with FSDP's float8 all-gather
 * are refused, saying so. */
static void ep_refuses_what_it_has_no_plan_for(void **state)
{
	(void)state;
	titan_err e = {{0}};
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	plan *p = layout(be, (mesh_degrees){1, 2, 1, 1, 1, 2, 1}, 0, &e);
	if (!p)
		fail_msg("EP 2 layout: %s", e.msg);
	plan_free(p);
	assert_null(layout(be, (mesh_degrees){1, 2, 1, 1, 1, 2, 1}, 1, &e));
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "enable_fsdp_float8_all_gather"));
	p = layout(be, (mesh_degrees){1, 2, 1, 2, 1, 2, 1}, 0, &e);
	if (!p)
		fail_msg("EP 2 x TP 2 layout: %s", e.msg);
	plan_free(p);
	assert_null(layout(be, (mesh_degrees){1, 2, 1, 2, 1, 2, 2}, 0, &e));
	print_message("%s\n", e.msg);
	assert_non_null(strstr(e.msg, "expert_tensor_parallel_degree 2"));
	backend_free(be);
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 60, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ep_refuses_what_it_has_no_plan_for),
		cmocka_unit_test(ep_equals_the_single_process),
	};
	int rc = case_batch_run("TITAN_EP_TEST", tests, sizeof tests / sizeof tests[0]);
	comm_finalize(world);
	return rc;
}
