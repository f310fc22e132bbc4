/* The parallel plans against the single process.  tests/plan/equiv.sh runs
 * this program under mpirun once per world size, naming its plans in
 * TITAN_PLAN_TEST (several separated by ';': tests/support/case_batch.h), each
 * ("rep=2 shard=2 cp=1 tp=1 accum=2 reshard=always async=0 lp=1 ac=none
 * bal=headtail rot=allgather"; bal=ptrr deals blocks of PTRR_BLOCK tokens by
 * each row's documents, with docs=1; the degrees' product is the world size); run
 * alone it checks the world of one.
 * Pipeline parallelism: "pp=2 sched=1F1B mbs=2" (pipeline_parallel_degree,
 * _schedule, _microbatch_size), optionally "lps=N" (layers_per_stage),
 * "fl=N ll=N" (first/last_stage_less_layers, default 1), "layers=N" (the
 * model's, default 3), "csv=PATH" (pipeline_parallel_schedule_csv): the
 * plan's runner is then lib/pp's engine (plan_set_pipeline).
 * "prec=fsdp" puts FSDP2's mixed precision (bf16 parameters and activations,
 * float32 reduce) on both sides; "steps=N" (default 5, 2 in short runs:
 * test_short, one step from fresh weights and one with AdamW's state);
 * "model=debugmodel" trains that flavor instead of the small model;
 * "mb=ranks" has the single process run the ranks' micro-batches one after
 * another (as float8 does).
 *
 * The case's words are key=value, matched by whole key; an unknown key or a
 * value the key does not take is refused (tests/support/case_args.h).
 *
 * Every rank trains a small Llama (3 layers, GQA, seq 64) for 5 steps of a
 * global batch of 12 sequences under the plan, and rank 0 beside it the
 * same model as one process (the plan of a world of one: mesh NULL) on the
 * whole batch, its results sent to every rank (tests/support/plan_harness.h).
 * Per step the loss and grad norm must agree, and after the steps every
 * rank's boxes of the final parameters must equal the same boxes of the
 * single process's tensors (under context parallelism each rank trains on its
 * chunks of its rows' sequences, the single process on whole sequences), within float32 reduction-order tolerances (see
 * LOSS_TOL, NORM_TOL, PARAM_TOL).  The bytes each rank sent on every mesh
 * dimension in a step, as lib/comm counts them, must equal the formula of
 * titan-train(1) (COMMUNICATION), computed here from the model's shapes.
 * Seeds fixed and printed.
 *
 * f8=1 converts every linear to Float8 (tensorwise) on both sides and gathers
 * the converted weights as float8 (enable_fsdp_float8_all_gather); f8=2 also
 * precomputes their scales once per step.  A float8 linear's activation
 * scales run over its micro-batch, so the single process then runs the same
 * micro-batches as the ranks, one after another (gradient accumulation over
 * ROWS / a micro-batch's rows): the float8 weights gathered with the whole weight's
 * scale are the single process's cast, and every micro-batch computes what
 * the rank that runs it computes.  "recipe=rowwise" (or rowwise_with_gw_hp)
 * converts with that recipe instead, without the float8 all-gather (torchtitan
 * asserts it is tensorwise's).  Under tensor parallelism (tp=2 f8=1) every
 * cast's scales are the whole tensor's: where an amax runs along the
 * dimension tp splits, the ranks all-reduce its maximum (model.h), counted in
 * the formula; every input a cast reads is the single process's bit for bit
 * at step 1 (the norm's rows, the weights; gradients up to float32 order), so
 * step 1's gradients are held to STEP1_GRAD_TOL.  "amax=shard" is the
 * negative control: each tp rank scales by its own part's amax
 * (model_float8_tp_shard_amax), and the case passes only when step 1 then
 * differs from the single process beyond those bounds.
 *
 * dev=1 gives the mesh device-shaped communicators (tests/support/devcomm.h:
 * MPI that takes only the backend's memory, as NCCL does) beside its host
 * twins: the plan must hand its tensors to the first and its host scalars to
 * the second, and still equal the single process.  always=1 runs FSDP's and
 * HSDP's collectives through the communicators even over one rank
 * (plan_opts.comm_always, the path of one GPU under NCCL).
 *
 * muon=1 gives both sides optimizer.param_groups (plan_set_param_groups):
 * DistMuon for the layers' matrices (match_rms_adamw's lr, nesterov), AdamW
 * at another lr and betas without decay for the norms, the default AdamW
 * for the embedding and the output.  Each Muon matrix is gathered whole over
 * FSDP's and TP's boxes (an all-reduce of its float32 update on each,
 * counted in the formula) and orthogonalised alike on every rank; under
 * expert parallelism Muon is refused (tests/family).
 *
 * bf16states=1 keeps AdamW's exp_avg and exp_avg_sq in bf16 on both sides
 * (optimizer.implementation = "fused_opt_states_bf16", as
 * train_adamw_config sets it; the plans' states are checked to be bf16), the
 * parameters' root mean square difference held to RMS_TOL_LR_BF16_STATES
 * besides; "refstates=float32" is its negative control (the single process
 * keeps float32 states, and the case passes only when the root mean square
 * exceeds that bound).
 *
 * masked=1 masks the labels as SFT's chat data does (harness_tokens_mask:
 * prompts, rows and on step 2 half the batch nearly all masked, so that a
 * rank, a micro-batch or a context-parallel chunk holds one valid label or
 * none): every plan must normalise by the global count of valid labels. */
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
#include "float8/float8.h"
#include "mesh/mesh.h"
#include "plan/plan.h"
#include "../support/case_args.h"
#include "../support/case_batch.h"
#include "../support/devcomm.h"
#include "../support/plan_harness.h"
#include "../support/testutil.h"

/* Tolerances.  The plans add the same float32 products in another order (a
 * micro-batch's rows split over ranks, partial sums over tp heads,
 * reduce-scatters summing rank by rank, the grad norm's partial sums): each
 * gradient element differs from the single process's by a few units of
 * float32 rounding of the terms it sums.  The loss (summed in double from
 * float32 rows) and the grad norm agree to ~1e-8 relative (context
 * parallelism adds ring attention's log-sum-exp merge of the key blocks'
 * partial outputs, float32 again: the same order of agreement) (measured up to
 * 2e-9 and 2e-8: the bounds leave a factor 50).  Parameters are compared in
 * units of the learning rate: AdamW normalises each gradient element
 * (m / sqrt(v)), so an element whose gradient is a sum of many terms of both
 * signs and nearly cancels keeps little relative precision under reordering,
 * and its update may differ by a visible fraction of lr while every gradient
 * agrees to 1e-7 of the gradient's scale; 5 steps moved no element by more
 * than 0.4% of one step's lr (printed).  Pipeline plans split the batch
 * into micro-batches whose gradients add up across the schedule's order:
 * the same kind of reordering, measured within the same bounds (loss 2e-9,
 * grad norm 2e-8, parameters 0.5% of lr).  A wrong gradient (a contribution
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
/* These bounds hold for the small model over 200 steps; debugmodel (dim 256,
 * 6 layers) amplifies faster and passes them at step 14 (grad norm 3.0e-3)
 * while step 1's gradients still agree to 1.2e-6 of each tensor's largest:
 * the same reorderings, grown (tests/train/precision_fsdp.sh follows
 * debugmodel's curves to their noise).  So under prec=fsdp step 1's reduced
 * gradients are held to float32 reordering: within STEP1_GRAD_TOL of each
 * tensor's largest element (measured 9e-7 small, 1.2e-6 debugmodel).
 * "mb=ranks" runs the single process on the ranks' micro-batches in turn:
 * every row then sees the same bf16 weights and the same products, the
 * reduce-scatter's sum of two ranks' float32 gradients is the accumulation's
 * same sum, and step 1's gradients must be identical (measured: identical,
 * and so were 30 steps' losses and parameters): any cast or rounding the plan
 * did otherwise than the single process would show; its steps are held to the
 * float32 tolerances. */
#define STEP1_GRAD_TOL 2e-5
/* Float8 under tensor parallelism.  Every cast reads the single process's
 * values and scales up to float32 order: the forward's first casts read the
 * same bits, but the gradients (and later layers' inputs) come through tp's
 * partial sums, so now and then an element whose scaled value lies at a
 * float8 rounding boundary rounds the other way: one step of e5m2 (25 %) or
 * e4m3 (12.5 %) of that element, which a weight gradient sums over all rows
 * (measured: 2 of 18432 codes of a gradient cast differ, one by a step).
 * Step 1's loss keeps float32's bound (LOSS_TOL; measured up to 1.7e-10):
 * its forward meets no such boundary at this size (debugmodel's, six layers
 * of dim 256, does: 5e-6).  Measured over 5 steps (each recipe, async, AC,
 * with FSDP, under a pipeline, accum up to 3): loss 2.4e-5, grad norm
 * 4.7e-5, parameters 2.05 lr (an AdamW-normalised element whose small
 * gradient a flip moved), step 1's gradients 2.4e-2 of a box's largest with
 * a flip and 1.2e-6 without.  The negative control (each tp rank's own
 * amax, tensorwise) gives step 1's loss 1.45e-4 (the test's judge: float32's
 * bound), grad norm 1.5e-4, parameters 7.1 lr, step 1's gradients 0.126.
 * Rowwise recipes round their scales to powers of two, and a float8 cast
 * scaled by a power of two rounds as the unscaled one (the format is
 * floating point) until values reach the subnormals: a shard's own amax
 * changes nothing measurable there (identical at step 1), so the negative
 * control is tensorwise's. */
#define LOSS_TOL_F8 1e-4
#define NORM_TOL_F8 2e-4
#define PARAM_TOL_LR_F8 4
#define STEP1_GRAD_TOL_F8 5e-2
/* muon=1: a Muon matrix's direction is five Newton-Schulz iterations of
 * bfloat16 GEMMs on its gathered update, and a float32 reordering that moves
 * an element of the update across a bf16 rounding boundary changes it by a
 * bf16 ulp (2^-8 of the element), which the iterations spread; the step is
 * the adjusted lr (match_rms_adamw: 0.2 sqrt(max(rows, cols)), up to 2.8 lr
 * here) times the direction.  Measured over 5 steps (FSDP, HSDP, TP, CP, PP,
 * FSDP x TP, PP x FSDP): parameters up to 0.092 lr, loss and grad norm within
 * float32's bounds.  A matrix orthogonalised without a rank's box (a lost
 * gather) takes a direction of another matrix: O(2.8 lr) apart. */
#define PARAM_TOL_LR_MUON 0.3
/* bf16states=1 (optimizer.implementation = "fused_opt_states_bf16"): both
 * sides keep exp_avg and exp_avg_sq in bf16, each rank its shard's elements
 * rounded by the same elementwise update as the single process's.  But a
 * float32 reordering of a gradient element that moves its state across a bf16
 * rounding boundary changes that state by a bf16 ulp (2^-8 of it), where
 * float32 states would keep the difference in their last bits: rare
 * elements, each moved by up to a few tenths of a percent of lr a step.
 * Measured over 5 steps (FSDP, HSDP, TP, PP, CP, FSDP x TP, with
 * accumulation): the worst element 0.012 lr, the root mean square of the
 * parameters' differences 1.1e-4 lr (float32 states: 0.004 lr and 1e-6 lr),
 * loss and grad norm within float32's bounds (over 200 steps of FSDP 2 the
 * flips grow: the loss 1.3e-7 apart at step 72).  The worst element cannot
 * tell the states' type apart: the single process with float32 states
 * instead (the negative control, refstates=float32) moves it by 0.019 lr
 * only; but it moves every element, by 3.1e-3 lr root mean square (8.6e-4
 * after 2 steps, the sanitizers' runs), and its loss by 2.8e-7 at step 5.
 * So the worst element is held to a bound of a lost contribution's order,
 * the root mean square to RMS_TOL_LR_BF16_STATES: 5x the measured, 6x below
 * the control's.  Under prec=fsdp the activations' bf16 flips come on top
 * (measured 0.035 lr, 8.2e-4 lr root mean square; the control 4.1e-3): the
 * root mean square is bounded in float32 only. */
#define PARAM_TOL_LR_BF16_STATES 0.05
#define RMS_TOL_LR_BF16_STATES 5e-4

enum { STEPS = 5, ROWS = 12, T = 64 };

static llama_args small = {
	.name = "small", .dim = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 256, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

static comm *world;

typedef struct cfg {
	int rep, shard, cp, tp, accum, async, lp, f8;
	const char *recipe; /* recipe=: the float8 recipe's name (f8 >= 1) */
	int shard_amax;     /* amax=shard: the negative control */
	cp_balance bal;
	cp_rotate rot;
	int pp, mbs, lps, fl, ll; /* pipeline: degree, micro-batch size, layers per stage */
	pp_kind kind;
	char csv[256];
	int bf16;  /* prec=fsdp: FSDP2's MixedPrecisionPolicy, bf16 param, float32 reduce */
	int dev, always; /* device-shaped communicators; collectives over one rank too */
	int steps;
	int same_mb; /* mb=ranks: the single process runs the ranks' micro-batches in turn */
	int docs;    /* docs=1: torchtitan 0.3.0's documents (per-document positions) */
	int muon;    /* muon=1: DistMuon and AdamW groups (plan_set_param_groups) */
	int bf16states; /* bf16states=1: AdamW's states in bf16 (fused_opt_states_bf16) */
	int ref_f32_states; /* refstates=float32: the negative control of bf16states */
	int masked;  /* masked=1: chat data's masked labels (harness_tokens_mask) */
	const llama_args *args; /* model=debugmodel: that flavor instead of the small one */
	plan_reshard reshard;
	model_ac_mode ac;
	int ac_every;
	case_args spec; /* TITAN_PLAN_TEST */
} cfg;

static const case_choice balancers[] = {
	{"headtail", CP_BALANCE_HEADTAIL}, {"none", CP_BALANCE_NONE}, {"ptrr", CP_BALANCE_PTRR},
	{NULL, 0}};
/* ptrr's block: FlexAttention's 128 would leave T = 64 one block; 16 deals
 * each of 2 ranks 2 of 4 blocks by their documents */
enum { PTRR_BLOCK = 16 };
static const case_choice rotations[] = {
	{"allgather", CP_ROTATE_ALLGATHER}, {"alltoall", CP_ROTATE_ALLTOALL}, {NULL, 0}};
static const case_choice reshards[] = {{"default", PLAN_RESHARD_DEFAULT},
				       {"always", PLAN_RESHARD_ALWAYS},
				       {"never", PLAN_RESHARD_NEVER},
				       {NULL, 0}};
static const case_choice ac_modes[] = {{"none", MODEL_AC_NONE}, {"full", MODEL_AC_FULL},
				       {"op", MODEL_AC_OP},     {"sel2", MODEL_AC_SELECTIVE},
				       {NULL, 0}};
static const case_choice precisions[] = {{"float32", 0}, {"fsdp", 1}, {NULL, 0}};
static const case_choice ref_batches[] = {{"batch", 0}, {"ranks", 1}, {NULL, 0}};
static const case_choice models[] = {{"small", 0}, {"debugmodel", 1}, {NULL, 0}};
static const case_choice recipes[] = {{"tensorwise", F8_RECIPE_TENSORWISE},
				      {"rowwise", F8_RECIPE_ROWWISE},
				      {"rowwise_with_gw_hp", F8_RECIPE_ROWWISE_WITH_GW_HP},
				      {NULL, 0}};
static const case_choice amaxes[] = {{"whole", 0}, {"shard", 1}, {NULL, 0}};
static const case_choice ref_states[] = {{"same", 0}, {"float32", 1}, {NULL, 0}};

/* The pipeline's keys: pp= sched= mbs= lps= fl= ll= layers= csv=. */
static void read_pipeline(case_args *a, cfg *c)
{
	c->pp = case_int(a, "pp", 1);
	c->mbs = case_int(a, "mbs", 1);
	c->lps = case_int(a, "lps", 0);
	c->fl = case_int(a, "fl", 1);
	c->ll = case_int(a, "ll", 1);
	small.n_layers = case_int(a, "layers", 3);
	c->kind = PP_1F1B;
	const char *sched = case_str(a, "sched", NULL);
	titan_err e;
	if (sched != NULL && pp_kind_parse(sched, &c->kind, &e) != 0)
		fail_msg("TITAN_PLAN_TEST: %s", e.msg);
	const char *csv = case_str(a, "csv", "");
	if (strlen(csv) >= sizeof c->csv)
		fail_msg("TITAN_PLAN_TEST: csv=%s: longer than %zu", csv, sizeof c->csv - 1);
	snprintf(c->csv, sizeof c->csv, "%s", csv);
}

/* The mesh's degrees and the plan's options. */
static void read_plan(case_args *a, cfg *c)
{
	c->rep = case_int(a, "rep", 1);
	c->tp = case_int(a, "tp", 1);
	c->cp = case_int(a, "cp", 1);
	c->shard = case_int(a, "shard", comm_size(world) / (c->rep * c->cp * c->tp * c->pp));
	c->bal = (cp_balance)case_pick(a, "bal", balancers, CP_BALANCE_HEADTAIL);
	c->rot = (cp_rotate)case_pick(a, "rot", rotations, CP_ROTATE_ALLGATHER);
	c->accum = case_int(a, "accum", 1);
	c->async = case_int(a, "async", 0);
	c->lp = case_int(a, "lp", 1);
	c->f8 = case_int(a, "f8", 0);
	int r = case_pick(a, "recipe", recipes, F8_RECIPE_TENSORWISE);
	c->recipe = recipes[r].name;
	c->shard_amax = case_pick(a, "amax", amaxes, 0);
	c->reshard = (plan_reshard)case_pick(a, "reshard", reshards, PLAN_RESHARD_DEFAULT);
	c->ac = (model_ac_mode)case_pick(a, "ac", ac_modes, MODEL_AC_NONE);
	c->ac_every = 2;
	c->bf16 = case_pick(a, "prec", precisions, 0);
	c->dev = case_int(a, "dev", 0);
	c->always = case_int(a, "always", 0);
}

static void read_cfg(cfg *c)
{
	case_args *a = &c->spec;
	titan_err e = {{0}};
	if (case_parse(a, "TITAN_PLAN_TEST", getenv("TITAN_PLAN_TEST"), &e) != 0)
		fail_msg("%s", e.msg);
	read_pipeline(a, c); /* first: shard's default divides by pp */
	read_plan(a, c);
	c->steps = case_int(a, "steps", test_short() ? 2 : STEPS);
	c->same_mb = case_pick(a, "mb", ref_batches, 0);
	c->docs = case_int(a, "docs", 0);
	c->muon = case_int(a, "muon", 0);
	c->bf16states = case_int(a, "bf16states", 0);
	c->ref_f32_states = case_pick(a, "refstates", ref_states, 0);
	c->masked = case_int(a, "masked", 0);
	c->args = case_pick(a, "model", models, 0) ? flavor_find("debugmodel") : &small;
	if (case_end(a, &e) != 0)
		fail_msg("%s", e.msg);
}

/* The pipeline of a cfg: torchtitan's split and the schedule (built, or read
 * from the CSV) for n_mb micro-batches a round. */
typedef struct pipe {
	pp_split sp;
	pp_schedule *s;
	int8_t hold[64];
} pipe;

static void make_pipe(const cfg *c, int n_mb, int rank, pipe *pi)
{
	titan_err e = {{0}};
	pp_split_args a = {.n_layers = small.n_layers, .pp = c->pp, .kind = c->kind,
			   .layers_per_stage = c->lps, .first_less = c->fl, .last_less = c->ll};
	if (pp_split_make(&a, &pi->sp, &e) != 0)
		fail_msg("pp_split_make: %s", e.msg);
	int rc = c->csv[0] ? pp_schedule_read_csv(c->csv, c->pp, pi->sp.n_stages, n_mb, &pi->s, &e)
			   : pp_schedule_build(c->kind, c->pp, pi->sp.stages_per_rank, n_mb, &pi->s, &e);
	if (rc != 0)
		fail_msg("schedule: %s", e.msg);
	plan_pipeline_hold(&pi->sp, rank, small.n_layers + 2, pi->hold);
	if (rank == 0)
		for (int st = 0; st < pi->sp.n_stages; st++)
			print_message("stage %d: units %d..%d on pipeline rank %d\n", st, pi->sp.u0[st],
				      pi->sp.u1[st], pi->sp.stage_rank[st]);
}

/* FSDP's float8 all-gather: asked for by f8 >= 1 with the tensorwise recipe. */
static int f8_gathers(const cfg *c)
{
	return c->f8 >= 1 && strcmp(c->recipe, "tensorwise") == 0;
}

/* Whether tensor t is one of Muon's matrices under muon=1: a layer's 2-D
 * weight. */
static int muon_matrix(const model *m, const model_tensor *t)
{
	return t->ndim == 2 && t->unit >= 1 && t->unit <= model_args(m)->n_layers;
}

/* muon=1's groups: DistMuon (0.3.0's defaults, match_rms_adamw) for the
 * layers' matrices, AdamW at 2 lr with other betas and no decay for the norms,
 * the plan's default AdamW for the rest. */
static void set_muon_groups(plan *p)
{
	const optim_group groups[2] = {
		{.kind = OPTIM_MUON, .lr = LR, .weight_decay = 0.1, .momentum = 0.95,
		 .nesterov = 1, .eps = 1e-7, .ns = {3.4445, -4.7750, 2.0315}, .ns_steps = 5,
		 .adjust = MUON_ADJUST_MATCH_RMS},
		{.kind = OPTIM_ADAMW, .lr = 2 * LR, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-8}};
	const model *g = plan_global_model(p);
	int n = model_num_tensors(g), group_of[64], matrix_of[64];
	assert_true(n <= 64);
	for (int i = 0; i < n; i++) {
		const model_tensor *t = model_tensor_at(g, i);
		group_of[i] = muon_matrix(g, t) ? 0 : strstr(t->fqn, "norm") ? 1 : -1;
		matrix_of[i] = i;
	}
	titan_err e = {{0}};
	if (plan_set_param_groups(p, groups, group_of, matrix_of, &e) != 0)
		fail_msg("plan_set_param_groups: %s", e.msg);
}

/* b rows of t tokens (the rank's share of T under context parallelism). */
static plan *make_plan(backend *be, mesh *m, const cfg *c, int b, int t, const pipe *pi)
{
	plan_opts o = {.be = be, .mesh = m, .args = c->args, .b = b, .t = t, .ac = c->ac,
		       .ac_every = c->ac_every, .reduce = BE_F32, .reshard = c->reshard,
		       .loss_parallel = c->lp, .async_tp = c->async, .pp = pi != NULL,
		       .hold = pi ? pi->hold : NULL, .cp_balance = c->bal, .cp_rotate = c->rot,
		       .cp_block = PTRR_BLOCK,
		       .f8_all_gather = f8_gathers(c), .f8_precompute = c->f8 == 2,
		       .comm_always = c->always};
	if (c->bf16) /* the policy's types, as lib/trainer/precision.c puts them */
		o.prec = (model_prec){BE_BF16, BE_F32, BE_BF16, BE_BF16};
	adamw_config_default(&o.adamw);
	o.adamw.lr = LR;
	o.adamw.bf16_states = c->bf16states; /* as train_adamw_config reads the config */
	titan_err e = {{0}};
	plan *p = plan_create(&o, &e);
	if (!p)
		fail_msg("plan_create: %s", e.msg);
	if (adamw_state_dtype(plan_optimizer(p)) != (c->bf16states ? BE_BF16 : plan_shard_dtype(p)))
		fail_msg("AdamW's states in %s",
			 be_dtype_name(adamw_state_dtype(plan_optimizer(p))));
	model_float8 f8 = {c->recipe, NULL, 0}; /* every linear */
	if (c->f8 && model_set_float8(plan_model(p), &f8, &e) < 0)
		fail_msg("model_set_float8: %s", e.msg);
	model_float8_tp_shard_amax(plan_model(p), c->shard_amax);
	if (c->muon)
		set_muon_groups(p);
	assert_int_equal(plan_init_weights(p, 7, 1, &e), 0);
	if (pi != NULL && plan_set_pipeline(p, &pi->sp, pi->s, &e) != 0)
		fail_msg("plan_set_pipeline: %s", e.msg);
	return p;
}

/* ---- the formula of titan-train(1), COMMUNICATION ---- */

typedef uint64_t counts[MESH_DIM_COUNT][COMM_OP_COUNT];

static uint64_t ar(int n, uint64_t bytes) /* an all-reduce's share, rounded down */
{
	return n > 1 ? 2 * (uint64_t)(n - 1) * bytes / (uint64_t)n : 0;
}

/* Whether layer l runs its forward again in its backward (ac=full, sel2). */
static int recomputes(const cfg *c, int l)
{
	return c->ac == MODEL_AC_FULL || (c->ac == MODEL_AC_SELECTIVE && (l + 1) % c->ac_every == 0);
}

/* The bytes a step's Float8 casts send over tp: one all-reduce (max) of the
 * amax of each cast whose reduction runs along a dimension tp splits.  A
 * linear y (n, out) = x (n, in) w^T, column-parallel splitting out (w's rows,
 * dy's columns), row-parallel in (w's and x's columns); its forward casts x
 * and w (again where AC recomputes it, but for w2, whose output full AC does
 * not recompute), its backward dy and w, then dy and x; FSDP's float8
 * all-gather brings w's codes and scale (no cast of w here).  Every linear of
 * the test's models is converted. */
static uint64_t f8_tp_amax(const plan *pl, const cfg *c, uint64_t n, int n_mb, const pipe *pi)
{
	const model *m = plan_model((plan *)pl);
	int P = plan_size(pl, MESH_TP), gathered = f8_gathers(c) && plan_size(pl, MESH_FSDP) > 1;
	if (!c->f8 || P == 1)
		return 0;
	if (c->ac == MODEL_AC_OP)
		fail_msg("the formula does not count float8 under ac=op");
	f8_recipe r;
	titan_err e = {{0}};
	if (f8_recipe_get(&r, c->recipe, &e) != 0)
		fail_msg("%s", e.msg);
	uint64_t total = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		if (!model_float8_converted(m, i) || (pi && !pi->hold[t->unit]))
			continue;
		int64_t out = t->shape[0], in = t->shape[1];
		int col = t->tp == MODEL_TP_COLWISE, row = t->tp == MODEL_TP_ROWWISE;
		int again = t->unit >= 1 && t->unit <= model_args(m)->n_layers &&
			    recomputes(c, t->unit - 1) && !strstr(t->fqn, "feed_forward.w2");
		struct {
			int op;
			int64_t rows, cols;
			int rsplit, csplit, fwd;
		} ops[] = {{F8_INPUT, (int64_t)n, in, 0, row, 1},
			   {F8_WEIGHT, out, in, col, row, 1},
			   {F8_GRAD_OUTPUT, (int64_t)n, out, 0, col, 0},
			   {F8_WEIGHT_GI, out, in, col, row, 0},
			   {F8_GRAD_OUTPUT_GW, (int64_t)n, out, 0, col, 0},
			   {F8_INPUT_GW, (int64_t)n, in, 0, row, 0}};
		for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
			f8_scaling sc = f8_operand_scaling(&r, ops[k].op);
			int w = ops[k].op == F8_WEIGHT || ops[k].op == F8_WEIGHT_GI;
			int split = sc == F8_TENSOR ? ops[k].rsplit || ops[k].csplit
				    : sc == F8_ROWS ? ops[k].csplit : ops[k].rsplit;
			if (sc == F8_NONE || !split || (w && gathered))
				continue;
			uint64_t times = (uint64_t)n_mb * (ops[k].fwd && again ? 2 : 1);
			total += times * ar(P, (uint64_t)f8_n_scales(sc, ops[k].rows, ops[k].cols) * 4);
		}
	}
	return total;
}

/* b: rows of a micro-batch; under pipeline parallelism the step runs
 * c->accum rounds of the schedule's micro-batches (pi), FSDP gathering and
 * reducing each held unit once a round; without, c->accum micro-batches, a
 * gather (or two) and a reduction each. */
static void formula(const plan *pl, const cfg *c, int b, const pipe *pi, counts x)
{
	memset(x, 0, sizeof(counts));
	const model *m = plan_model((plan *)pl);
	int N = plan_size(pl, MESH_FSDP), R = plan_size(pl, MESH_DP_REPLICATE);
	int P = plan_size(pl, MESH_TP), L = plan_size(pl, MESH_LOSS), A = c->accum;
	int PP = plan_size(pl, MESH_PP), rank = plan_coord(pl, MESH_PP);
	int C = plan_size(pl, MESH_CP);
	int n_mb = pi ? A * pi->s->n_mb : A; /* micro-batches run */
	int head = model_head_unit(m), layers = model_args(m)->n_layers;
	uint64_t pe = c->bf16 ? 2 : 4, ge = 4, ae = c->bf16 ? 2 : 4;
	uint64_t n = (uint64_t)b * T / (uint64_t)C, ns = n / (uint64_t)P;
	uint64_t d = (uint64_t)model_args(m)->dim, one = (uint64_t)(P - 1) * ns * d;
	uint64_t conv = 0; /* float8 weights */
	for (int u = 0; u <= head; u++) {
		if (pi && !pi->hold[u])
			continue;
		const model_unit *mu = model_unit_at(m, u);
		uint64_t s = 0, sb = 0, f8 = 0; /* elements, bytes gathered, float8 weights */
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
			const model_tensor *t = model_tensor_at(m, i);
			uint64_t rows = (uint64_t)t->shape[0], cols = t->numel / rows;
			uint64_t sn = (rows + (uint64_t)N - 1) / (uint64_t)N * cols;
			int q = f8_gathers(c) && N > 1 && model_float8_converted(m, i);
			s += sn;
			sb += sn * (q ? 1 : pe);
			f8 += (uint64_t)q;
		}
		conv += f8;
		uint64_t gathers = c->reshard == PLAN_RESHARD_ALWAYS ? 2
				   : c->reshard == PLAN_RESHARD_NEVER || pi || u == head ? 1 : 2;
		if (pi && c->reshard == PLAN_RESHARD_ALWAYS)
			gathers = 1; /* a stage's units stay gathered for the round */
		if (N > 1) {
			x[MESH_FSDP][COMM_OP_ALL_GATHER] += A * gathers * (uint64_t)(N - 1) * sb;
			/* the float8 weights' amax with each gather, unless precomputed */
			if (c->f8 == 1 && f8) { /* and over tp: the whole weight's */
				x[MESH_FSDP][COMM_OP_ALL_REDUCE] += A * gathers * ar(N, f8 * 4);
				x[MESH_TP][COMM_OP_ALL_REDUCE] += A * gathers * ar(P, f8 * 4);
			}
			x[MESH_FSDP][COMM_OP_REDUCE_SCATTER] += A * (uint64_t)(N - 1) * s * ge;
			x[MESH_DP_REPLICATE][COMM_OP_ALL_REDUCE] += A * ar(R, s * ge);
		} else {
			x[MESH_DP_REPLICATE][COMM_OP_ALL_REDUCE] += ar(R, mu->numel * 4);
		}
		if (P == 1)
			continue;
		/* tensor parallel, per micro-batch: gathers read by a matmul and the
		 * row-parallel reduce-scatters of the forward go round the ring when
		 * async (sends of the same bytes).  A layer: 2 gathers forward and 2
		 * backward, 2 such reduce-scatters forward and 2 plain ones backward,
		 * plus what activation checkpointing recomputes (norm outputs
		 * gathered again, wo reduce-scattered again); the embedding: its
		 * reduce-scatter forward, a gather backward; the head: its gather
		 * forward, a reduce-scatter backward, and the loss's all-gather. */
		uint64_t ag_mm = 0, rs_mm = 0, rs_plain = 0, loss = 0;
		if (u == 0) {
			ag_mm = 1;
			rs_plain = 1;
		} else if (u == head) {
			ag_mm = 1;
			rs_plain = 1;
			loss = c->lp ? (uint64_t)(P - 1) * n * 3 * 4
			       : (uint64_t)(P - 1) * n *
				 (((uint64_t)c->args->vocab_size + (uint64_t)P - 1) / (uint64_t)P) * ae;
		} else {
			int full = recomputes(c, u - 1);
			ag_mm = 4 + (full || c->ac == MODEL_AC_OP ? 2 : 0);
			rs_mm = 2 + (full ? 1 : 0);
			rs_plain = 2;
		}
		int op_ag = c->async ? COMM_OP_SEND : COMM_OP_ALL_GATHER;
		/* a Float8 row-parallel linear waits for its whole product */
		int op_rs = c->async && !c->f8 ? COMM_OP_SEND : COMM_OP_REDUCE_SCATTER;
		x[MESH_TP][op_ag] += n_mb * ag_mm * one * ae;
		x[MESH_TP][op_rs] += n_mb * rs_mm * one * ae;
		x[MESH_TP][COMM_OP_REDUCE_SCATTER] += n_mb * rs_plain * one * ae;
		x[MESH_TP][COMM_OP_ALL_GATHER] += n_mb * loss;
	}
	if (P > 1) {
		uint64_t rep = 0;
		for (int i = 0; i < model_num_tensors(m); i++) {
			const model_tensor *t = model_tensor_at(m, i);
			uint64_t rows = (uint64_t)t->shape[0];
			if (t->tp == MODEL_TP_REPLICATE && (!pi || pi->hold[t->unit]))
				rep += (rows + (uint64_t)N - 1) / (uint64_t)N * (t->numel / rows);
		}
		x[MESH_TP][COMM_OP_ALL_REDUCE] += ar(P, rep * 4) + ar(P, 8); /* + the grad norm */
		x[MESH_TP][COMM_OP_ALL_REDUCE] += f8_tp_amax(pl, c, n, n_mb, pi);
	}
	if (C > 1) {
		/* ring attention, per layer and micro-batch: the rank's keys and
		 * values (b, T/C, kv heads of its tp rank, 2 x head_dim) reach the
		 * C - 1 others in the forward (a forward recomputed under AC again)
		 * and the backward; their float32 gradients go back to their owner
		 * (allgather: a reduce-scatter of C blocks; alltoall: C hops) */
		const llama_args *a = model_args(plan_global_model(pl));
		uint64_t kv = (uint64_t)b * T / (uint64_t)C * (uint64_t)(a->n_kv_heads / P) * 2 *
			      (uint64_t)(a->dim / a->n_heads) * 4;
		for (int l = 0; l < layers; l++) {
			if (pi && !pi->hold[l + 1])
				continue;
			int full = c->ac == MODEL_AC_FULL ||
				   (c->ac == MODEL_AC_SELECTIVE && (l + 1) % c->ac_every == 0);
			uint64_t kvs = (uint64_t)(2 + full) * (uint64_t)(C - 1) * kv;
			if (c->rot == CP_ROTATE_ALLGATHER) {
				x[MESH_CP][COMM_OP_ALL_GATHER] += n_mb * kvs;
				x[MESH_CP][COMM_OP_REDUCE_SCATTER] += n_mb * (uint64_t)(C - 1) * kv;
			} else {
				x[MESH_CP][COMM_OP_SEND] += n_mb * (kvs + (uint64_t)C * kv);
			}
		}
	}
	x[MESH_LOSS][COMM_OP_ALL_REDUCE] += 3 * ar(L, 8); /* valid labels, loss sum, max */
	x[MESH_FSDP][COMM_OP_ALL_REDUCE] += ar(N, 8);     /* the grad norm */
	if (pi) {
		/* an F whose next stage is on another rank sends its output, a B or I
		 * whose previous stage is the input gradient: a micro-batch's stream
		 * rows (b*t / tp) x dim, float32; then the loss sum and its max and
		 * the grad norm all-reduced over pp */
		const pp_schedule *sc = pi->s;
		uint64_t msgs = 0;
		for (int i = sc->first[rank]; i < sc->first[rank + 1]; i++) {
			const pp_action *a = &sc->act[i];
			int to = a->op == PP_F && a->stage + 1 < sc->n_stages ? a->stage + 1
				 : (a->op == PP_B || a->op == PP_I) && a->stage > 0 ? a->stage - 1 : -1;
			msgs += to >= 0 && sc->stage_rank[to] != rank;
		}
		x[MESH_PP][COMM_OP_SEND] += A * msgs * ns * d * 4;
		x[MESH_PP][COMM_OP_ALL_REDUCE] += 3 * ar(PP, 8);
	}
	if (c->muon) { /* each Muon matrix's update gathered whole over fsdp and tp */
		const model *g = plan_global_model((plan *)pl);
		for (int i = 0; i < model_num_tensors(g); i++) {
			const model_tensor *t = model_tensor_at(g, i);
			if (!muon_matrix(g, t) || (pi && !pi->hold[t->unit]))
				continue;
			x[MESH_FSDP][COMM_OP_ALL_REDUCE] += ar(N, (uint64_t)t->numel * 4);
			x[MESH_TP][COMM_OP_ALL_REDUCE] += ar(P, (uint64_t)t->numel * 4);
		}
	}
	if (c->f8 == 2) { /* precomputed amax */
		x[MESH_FSDP][COMM_OP_ALL_REDUCE] += ar(N, conv * 4);
		x[MESH_TP][COMM_OP_ALL_REDUCE] += ar(P, conv * 4);
	}
}

static const mesh_dim dims[] = {MESH_FSDP, MESH_DP_REPLICATE, MESH_CP, MESH_TP, MESH_LOSS,
				 MESH_PP};

/* The bytes of dimension k's communicators: the device one and, when it is
 * another, its host twin. */
static uint64_t sent(const mesh *m, mesh_dim k, int op)
{
	uint64_t b = comm_get_stats(mesh_comm(m, k))->bytes_sent[op];
	if (mesh_host_comm(m, k) != mesh_comm(m, k))
		b += comm_get_stats(mesh_host_comm(m, k))->bytes_sent[op];
	return b;
}

static void reset_stats(mesh *m)
{
	for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
		comm_reset_stats(mesh_comm(m, dims[k]));
		comm_reset_stats(mesh_host_comm(m, dims[k]));
	}
}

static void check_bytes(const mesh *m, const counts want)
{
	for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
		for (int op = 0; op < COMM_OP_COUNT; op++)
			if (sent(m, dims[k], op) != want[dims[k]][op])
				fail_msg("rank %d: %s %s: %llu bytes sent, the formula says %llu", m->rank,
					 mesh_dim_name(dims[k]), comm_op_name((comm_op)op),
					 (unsigned long long)sent(m, dims[k], op),
					 (unsigned long long)want[dims[k]][op]);
}

static uint64_t calls(const comm *c)
{
	uint64_t n = 0;
	for (int op = 0; op < COMM_OP_COUNT; op++)
		n += comm_get_stats(c)->calls[op];
	return n;
}

/* dev=1: the tensors went to the device communicators (FSDP's gathers and
 * reductions), the scalars (the token count, the loss sums) to the twins. */
static void check_routes(const mesh *m, const cfg *c)
{
	if (!c->dev)
		return;
	if ((m->size[MESH_FSDP] > 1 || c->always) && calls(mesh_comm(m, MESH_FSDP)) == 0)
		fail_msg("rank %d: no FSDP collective on the device communicator", m->rank);
	if (m->size[MESH_LOSS] > 1 && calls(mesh_host_comm(m, MESH_LOSS)) == 0)
		fail_msg("rank %d: no scalar reduced on the loss dimension's host twin", m->rank);
	if (calls(mesh_comm(m, MESH_LOSS)) != 0) /* a dense model has no device tensor there */
		fail_msg("rank %d: %llu operations on the loss dimension's device communicator",
			 m->rank, (unsigned long long)calls(mesh_comm(m, MESH_LOSS)));
}

/* One case on this rank: its mesh, pipeline and plan, and the single
 * process's run (the plan of a world of one, on rank 0: plan_harness.h). */
typedef struct run {
	cfg c, one;          /* the case; the single process's (float8, mb=ranks: accum) */
	harness_rank k;
	backend *be;
	devcomm_tracker *trk;
	cp_layout cl;
	pipe pi;
	int b, n_mb, tl;     /* a micro-batch's rows, the step's micro-batches, a row's tokens */
	plan *p;
	harness_ref ref;
	harness_tokens tk;
	harness_gap gap;
	/* the tolerances: prec=fsdp's unless mb=ranks (bf16 flips grow the
	 * reorderings), else float32's */
	double loss_tol, norm_tol, param_tol_lr, step1_tol;
	double step1_grads; /* step 1's worst relative gradient difference, all ranks */
	double step1_loss;  /* step 1's relative loss difference */
} run;

/* memory: every rank holds 1/N of the (TP-local) parameters of its units,
 * padding aside */
static void check_memory(const run *u)
{
	size_t local = 0, N = (size_t)u->k.m->size[MESH_FSDP];
	const model *pm = plan_model(u->p);
	for (int i = 0; i < model_num_tensors(pm); i++) {
		const model_tensor *t = model_tensor_at(pm, i);
		local += u->c.pp == 1 || u->pi.hold[t->unit] ? t->numel : 0;
	}
	assert_true(plan_shard_numel(u->p) >= local / N);
	assert_true(plan_shard_numel(u->p) <= local / N + 64 * model_num_tensors(pm));
}

static plan *make_reference(backend *be, const void *one)
{
	const cfg *c = one;
	return make_plan(be, NULL, c, ROWS / c->accum, T, NULL);
}

/* The micro-batches: without pipeline the rank's rows in accum, with it
 * each of those in micro-batches of mbs rows. */
static void split_batch(run *u)
{
	const cfg *c = &u->c;
	int lb = u->k.lb;
	u->b = lb;
	u->n_mb = c->accum;
	if (c->pp > 1) {
		assert_true(lb % c->mbs == 0);
		u->b = c->mbs;
		u->n_mb = c->accum * (lb / c->mbs);
		make_pipe(c, lb / c->mbs, u->k.m->coord[MESH_PP], &u->pi);
	}
}

static void open_run(run *u)
{
	cfg *c = &u->c;
	read_cfg(c);
	titan_err e = {{0}};
	mesh_degrees want = {c->rep, c->shard, c->cp, c->tp, c->pp, 1, 1};
	if (harness_rank_open(&u->k, world, &want, &c->spec, ROWS, c->accum, &e) != 0 ||
	    !(u->be = backend_cpu_create(1, &e)))
		fail_msg("%s", e.msg);
	if (c->dev) {
		assert_non_null(u->trk = devcomm_track(u->be));
		if (mesh_use_device_comms(u->k.m, devcomm_make, u->trk, &e) != 0)
			fail_msg("mesh_use_device_comms: %s", e.msg);
	}
	int cp = u->k.m->size[MESH_CP];
	u->tl = T / cp;
	if (cp_layout_init_block(&u->cl, T, cp, c->bal, PTRR_BLOCK, &e) != 0)
		fail_msg("%s", e.msg);
	split_batch(u);
	u->p = make_plan(u->be, u->k.m, c, u->b, u->tl, c->pp > 1 ? &u->pi : NULL);
	u->one = *c;
	u->one.dev = u->one.always = 0;
	u->one.bf16states = c->bf16states && !c->ref_f32_states;
	/* float8 (and mb=ranks): the ranks' micro-batches in turn */
	u->one.accum = c->f8 || c->same_mb ? ROWS / u->b : 1;
	if (harness_ref_open(&u->ref, world, make_reference, &u->one, &e) != 0 ||
	    harness_tokens_make(&u->tk, c->steps, ROWS, T, 256, 20261203, &e) != 0 ||
	    (c->masked && harness_tokens_mask(&u->tk, c->steps, 256, &e) != 0))
		fail_msg("%s", e.msg);
	check_memory(u);
	int amplified = c->bf16 && !c->same_mb, f8tp = c->f8 && c->tp > 1;
	u->loss_tol = amplified ? LOSS_TOL_BF16 : f8tp ? LOSS_TOL_F8 : LOSS_TOL;
	u->norm_tol = amplified ? NORM_TOL_BF16 : f8tp ? NORM_TOL_F8 : NORM_TOL;
	u->param_tol_lr = amplified ? PARAM_TOL_LR_BF16 : f8tp ? PARAM_TOL_LR_F8 : PARAM_TOL_LR;
	if (c->muon && u->param_tol_lr < PARAM_TOL_LR_MUON)
		u->param_tol_lr = PARAM_TOL_LR_MUON;
	if (c->bf16states && u->param_tol_lr < PARAM_TOL_LR_BF16_STATES)
		u->param_tol_lr = PARAM_TOL_LR_BF16_STATES;
	u->step1_tol = f8tp ? STEP1_GRAD_TOL_F8 : STEP1_GRAD_TOL;
}

static void close_run(run *u)
{
	harness_tokens_free(&u->tk);
	harness_ref_free(&u->ref);
	plan_free(u->p);
	pp_schedule_free(u->pi.s);
	if (u->c.pp > 1)
		pp_split_free(&u->pi.sp);
	mesh_free(u->k.m);
	devcomm_untrack(u->trk);
	backend_free(u->be);
}

/* Step 1's gradients: the worst differences over every rank printed; under
 * prec=fsdp and float8 held to STEP1_GRAD_TOL of a tensor's box's largest
 * (mb=ranks: identical); the relative worst returned. */
static double check_step1_grads(run *u)
{
	titan_err e = {{0}};
	harness_diff d;
	if (harness_compare(u->p, &u->ref, 1, &d, &e) != 0)
		fail_msg("%s", e.msg);
	double w[2] = {d.worst, d.of_box};
	if (comm_all_reduce(world, w, w, 2, COMM_F64, COMM_MAX, &e) != 0)
		fail_msg("%s", e.msg);
	if (u->k.m->rank == 0)
		print_message("step 1 gradients: worst difference %.3e, %.3e of its "
			      "tensor's largest\n", w[0], w[1]);
	if (u->c.shard_amax) /* the negative control judges it */
		return w[1];
	if ((u->c.bf16 || u->c.f8) && (u->c.same_mb ? w[0] != 0 : w[1] > u->step1_tol))
		fail_msg("step 1 gradients differ by %.3e (%.3e of a tensor's largest)", w[0],
			 w[1]);
	return w[1];
}

/* Step s's batches: *whole, the single process's (in one.accum
 * micro-batches), and *mine, this rank's: its rows, then under context
 * parallelism its chunks of each, cut by lib/cp's layout (tested against
 * torch's in tests/cp; ptrr's by each row's documents), into ids and labels;
 * with docs=1 the positions of its whole rows. */
static void step_batches(const run *u, int s, int32_t *ids, int32_t *labels, plan_batch *mine,
			 plan_batch *whole)
{
	int32_t rows[2][ROWS * T];
	harness_step_batches(&u->k, &u->tk, s, rows[0], rows[1], mine, whole);
	int n = u->c.accum * u->k.lb, at = u->k.m->coord[MESH_CP];
	plan_batch docs = {0};
	if (u->c.docs) /* the rank's whole rows: the plan cuts its share */
		harness_doc_positions(&u->k, ROWS, T, s, &docs, whole);
	static int maps[ROWS * T];
	titan_err e = {{0}};
	if (cp_row_maps(&u->cl, docs.positions, n, maps, &e) != 0)
		fail_msg("%s", e.msg);
	cp_shard_rows(&u->cl, maps, at, rows[0], ids, n, sizeof(int32_t));
	cp_shard_rows(&u->cl, maps, at, rows[1], labels, n, sizeof(int32_t));
	*mine = (plan_batch){.inputs = ids, .labels = labels, .positions = docs.positions,
			     .n_mb = u->n_mb};
	whole->n_mb = u->one.accum;
}

/* Step s (0-based) on this rank and the single process: the bytes sent, the
 * routes, the loss and grad norm, after step 1 the gradients.  The negative
 * control (amax=shard) only records them. */
static void run_step(run *u, int s)
{
	titan_err e = {{0}};
	int32_t ids[ROWS * T], labels[ROWS * T];
	plan_batch bt, rb;
	step_batches(u, s, ids, labels, &bt, &rb);
	reset_stats(u->k.m);
	plan_result got, want;
	if (plan_step(u->p, &bt, LR, 1.0, &got, &e) != 0)
		fail_msg("step %d: %s", s + 1, e.msg);
	counts want_bytes;
	formula(u->p, &u->c, u->b, u->c.pp > 1 ? &u->pi : NULL, want_bytes);
	if (!u->c.shard_amax) /* it leaves the amax all-reduces out */
		check_bytes(u->k.m, want_bytes);
	check_routes(u->k.m, &u->c);
	if (harness_ref_step(&u->ref, s + 1, &rb, LR, 1.0, &want, &e) != 0)
		fail_msg("%s", e.msg);
	int bad = harness_check_step(&u->gap, u->k.m->rank, s + 1, &got, &want, u->loss_tol,
				     u->norm_tol, &e);
	if (s == 0) /* a collective: before a failure leaves the other ranks in it */
		u->step1_grads = check_step1_grads(u);
	if (s == 0)
		u->step1_loss = u->gap.loss;
	if (u->c.f8 && u->c.tp > 1 && s == 0 && u->k.m->rank == 0)
		print_message("step 1: loss %.2e, grad norm %.2e (relative)\n", u->gap.loss,
			      u->gap.norm);
	if (u->c.shard_amax || u->c.ref_f32_states)
		return;
	if (bad)
		fail_msg("%s", e.msg);
	if (s == 0 && u->c.f8 && u->c.tp > 1 && u->gap.loss > LOSS_TOL)
		fail_msg("step 1: loss differs by %.3e (relative), beyond float32's %.0e",
			 u->gap.loss, LOSS_TOL);
}

/* The root mean square of the parameters' differences over every rank's
 * boxes (a box tp or a replica holds twice counts twice), in units of lr. */
static double param_rms_lr(const harness_diff *d)
{
	double v[2] = {d->sumsq, (double)d->n};
	titan_err e = {{0}};
	if (comm_all_reduce(world, v, v, 2, COMM_F64, COMM_SUM, &e) != 0)
		fail_msg("%s", e.msg);
	return v[1] > 0 ? sqrt(v[0] / v[1]) / LR : 0;
}

/* bf16states=1: the parameters' root mean square difference within
 * RMS_TOL_LR_BF16_STATES; the negative control (refstates=float32) beyond. */
static void check_states_rms(const run *u, double rms)
{
	if (u->c.ref_f32_states && rms <= RMS_TOL_LR_BF16_STATES)
		fail_msg("bf16 states trained as the single process's float32 states do, within "
			 "%.0e lr root mean square: the test cannot see the states' type",
			 RMS_TOL_LR_BF16_STATES);
	if (u->c.bf16states && !u->c.ref_f32_states && !u->c.bf16 && rms > RMS_TOL_LR_BF16_STATES)
		fail_msg("rank %d: parameters differ by %.3e lr root mean square", u->k.m->rank,
			 rms);
}

static void plan_equals_the_single_process(void **state)
{
	(void)state;
	run u = {0};
	open_run(&u);
	if (u.c.shard_amax && (u.c.tp == 1 || !u.c.f8))
		fail_msg("amax=shard: a negative control of float8 (f8=1) under tp");
	if (u.c.ref_f32_states && !u.c.bf16states)
		fail_msg("refstates=float32: a negative control of bf16states=1");
	for (int s = 0; s < u.c.steps; s++)
		run_step(&u, s);
	titan_err e = {{0}};
	harness_diff d;
	if (harness_ref_finish(&u.ref, u.p, &d, &e) != 0)
		fail_msg("%s", e.msg);
	double dw = d.worst / LR, rms = param_rms_lr(&d);
	if (u.k.m->rank == 0)
		print_message("%s: worst differences: loss %.2e, grad norm %.2e (relative), "
			      "parameters %.2e lr (rms %.2e); step 1 gradients %.2e\n",
			      u.c.spec.text[0] ? u.c.spec.text : "world of one", u.gap.worst_loss,
			      u.gap.worst_norm, dw, rms, u.step1_grads);
	check_states_rms(&u, rms);
	if (u.c.shard_amax) { /* the negative control: beyond a bound on some rank */
		double v[5] = {u.gap.worst_loss / u.loss_tol, u.gap.worst_norm / u.norm_tol,
			       dw / u.param_tol_lr, u.step1_grads / u.step1_tol,
			       u.step1_loss / LOSS_TOL};
		if (comm_all_reduce(world, v, v, 5, COMM_F64, COMM_MAX, &e) != 0)
			fail_msg("%s", e.msg);
		if (v[0] <= 1 && v[1] <= 1 && v[2] <= 1 && v[3] <= 1 && v[4] <= 1)
			fail_msg("each tp rank's own amax trained as the single process does, within "
				 "the bounds: they cannot see the scales");
	} else if (dw > u.param_tol_lr && !u.c.ref_f32_states) {
		fail_msg("rank %d: parameters differ by %.3f lr", u.k.m->rank, dw);
	}
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
		cmocka_unit_test(plan_equals_the_single_process),
	};
	int rc = case_batch_run("TITAN_PLAN_TEST", tests, sizeof tests / sizeof tests[0]);
	comm_finalize(world);
	return rc;
}
