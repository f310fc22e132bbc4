/* The planner's figures against what the CPU backend measures: a
 * single-process step (forward, backward, AdamW) in every AC mode, and every
 * pipeline rank of every schedule run by the engine in one process (each rank
 * a backend of its own, its stages' storage, AdamW, the engine's messages);
 * the peak each backend saw must equal the plan's.  Then the plan's arithmetic on known cases: FSDP's
 * padded shards, the pipeline's traffic, torchtitan's refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "config/config.h"
#include "model/family.h"
#include "model/model.h"
#include "optim/optim.h"
#include "planner/planner.h"
#include "pp/pp.h"
#include "../support/pp_loop.h"

static void load(job_config *c, const char *toml)
{
	titan_err e = {0};
	assert_int_equal(config_defaults(c, &e), 0);
	if (config_load_string(c, "test.toml", toml, &e) != 0)
		fail_msg("%s", e.msg);
}

static const char *base =
	"[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
	"[training]\nlocal_batch_size = 4\nseq_len = 32\n";

static void tokens(int32_t *ids, int32_t *labels, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 2048);
		labels[i] = (int32_t)((seed >> 40) % 2048);
	}
}

static const llama_args *debugmodel(void)
{
	return model_family_flavor(model_family_find("llama3"), "debugmodel");
}

/* One training step in one process, as the trainer runs it. */
static uint64_t measured_single(const job_config *c)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create(be, debugmodel(), 0, &e);
	model_ac_mode ac;
	int every;
	assert_int_equal(planner_ac_mode(c, &ac, &every, &e), 0);
	assert_int_equal(model_set_ac(m, ac, every, &e), 0);
	assert_int_equal(model_init(m, 3, 1, &e), 0);
	adamw_config oc;
	adamw_config_default(&oc);
	adamw *o = adamw_create(be, model_num_params(m), &oc, &e);
	int b = (int)c->training.local_batch_size, t = (int)c->training.seq_len;
	int32_t *ids = malloc((size_t)(b * t) * 4), *labels = malloc((size_t)(b * t) * 4);
	tokens(ids, labels, (size_t)(b * t), 7);
	double loss;
	int64_t nv;
	assert_int_equal(model_forward_backward(m, ids, labels, b, t, 1.0f / (float)(b * t), &loss,
						&nv, &e), 0);
	adamw_step(o, model_params(m), model_grads(m), 1e-3);
	assert_int_equal(be->ops->sync(be, &e), 0);
	uint64_t peak = backend_peak_bytes(be);
	free(ids);
	free(labels);
	adamw_free(o);
	model_free(m);
	backend_free(be);
	return peak;
}

static void single_process_plan_equals_measured_peak(void **state)
{
	(void)state;
	static const char *const modes[] = {
		"mode = \"none\"\n", "mode = \"full\"\n",
		"mode = \"selective\"\nselective_ac_option = \"2\"\n",
		"mode = \"selective\"\nselective_ac_option = \"op\"\n"};
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
		char toml[512];
		snprintf(toml, sizeof toml, "%s[activation_checkpoint]\n%s", base, modes[i]);
		job_config c;
		load(&c, toml);
		plan_report r;
		titan_err e = {0};
		if (planner_run(&c, 1, (uint64_t)1 << 40, &r, &e))
			fail_msg("%s", e.msg);
		uint64_t got = measured_single(&c);
		print_message("AC %-12s planned %10llu bytes, measured %10llu (%+.3f%%)\n", r.ac,
			      (unsigned long long)r.roles[0].peak, (unsigned long long)got,
			      100.0 * ((double)r.roles[0].peak - (double)got) / (double)got);
		assert_int_equal(r.roles[0].peak, got);
		planner_report_free(&r);
		config_free(&c);
	}
}

/* The plan's pipeline run by the engine with every rank in one process over
 * a loopback (a send finished only when the step ends, as over lib/comm),
 * each rank with a backend of its own, its stages' units bound to float32
 * storage of their own and AdamW over them; each rank's measured peak into
 * peak[r]. */
static void measured_ranks(const job_config *c, const pp_schedule *s, const pp_split *sp,
			   uint64_t *peak)
{
	titan_err e = {0};
	int b = (int)c->parallelism.pipeline_parallel_microbatch_size, t = (int)c->training.seq_len;
	size_t ntok = (size_t)s->n_mb * (size_t)(b * t);
	int32_t *ids = malloc(ntok * 4), *labels = malloc(ntok * 4);
	tokens(ids, labels, ntok, 11);
	static pp_loop lb;
	pp_transport tr;
	pp_loop_transport(&lb, &tr);
	backend *be[PP_LOOP_MAX];
	model *m[PP_LOOP_MAX];
	float *store[PP_LOOP_MAX][8] = {{0}};
	adamw *o[PP_LOOP_MAX];
	pp_engine *en[PP_LOOP_MAX];
	model_ac_mode ac;
	int every;
	assert_int_equal(planner_ac_mode(c, &ac, &every, &e), 0);
	for (int r = 0; r < s->n_ranks; r++) {
		be[r] = backend_cpu_create(1, &e);
		m[r] = model_create_unbound(be[r], debugmodel(), 0, &e);
		assert_int_equal(model_set_ac(m[r], ac, every, &e), 0);
		size_t n_state = 0;
		for (int st = 0; st < s->n_stages; st++) {
			if (s->stage_rank[st] != r)
				continue;
			const model_unit *u0 = model_unit_at(m[r], sp->u0[st]);
			const model_unit *u1 = model_unit_at(m[r], sp->u1[st]);
			size_t n = u1->offset + u1->numel - u0->offset;
			float *p = store[r][st] = backend_calloc_floats(be[r], 2 * n, &e);
			for (int u = sp->u0[st]; u <= sp->u1[st]; u++) {
				size_t off = model_unit_at(m[r], u)->offset - u0->offset;
				model_bind_unit(m[r], u, p + off, p + n + off);
			}
			n_state += n;
		}
		adamw_config oc;
		adamw_config_default(&oc);
		o[r] = adamw_create(be[r], n_state, &oc, &e);
		en[r] = pp_engine_create(m[r], sp, s, r, b, t, &tr, &e);
		assert_non_null(en[r]);
		assert_int_equal(pp_engine_begin(en[r], ids, labels, 1e-3f, NULL, &e), 0);
	}
	if (pp_loop_run(&lb, en, s->n_ranks, s->first[s->n_ranks], &e))
		fail_msg("%s", e.msg);
	for (int r = 0; r < s->n_ranks; r++) {
		peak[r] = backend_peak_bytes(be[r]);
		pp_engine_free(en[r]);
		adamw_free(o[r]);
		model_free(m[r]);
		for (int st = 0; st < 8; st++)
			if (store[r][st])
				be[r]->ops->free(be[r], store[r][st]);
		backend_free(be[r]);
	}
	pp_loop_free(&lb);
	free(ids);
	free(labels);
}

static void pipeline_rank_plans_equal_measured_peaks(void **state)
{
	(void)state;
	static const char *const kinds[] = {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
					    "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"};
	static const char *const acs[] = {"none", "full"};
	int compared = 0;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
		for (size_t a = 0; a < 2; a++) {
			char toml[600];
			snprintf(toml, sizeof toml,
				 "%s[parallelism]\npipeline_parallel_degree = 2\n"
				 "pipeline_parallel_schedule = \"%s\"\ndata_parallel_shard_degree = 1\n"
				 "[activation_checkpoint]\nmode = \"%s\"\n", base, kinds[k], acs[a]);
			job_config c;
			load(&c, toml);
			plan_report r;
			titan_err e = {0};
			if (planner_run(&c, 2, (uint64_t)1 << 40, &r, &e))
				fail_msg("%s: %s", kinds[k], e.msg);
			pp_schedule *s;
			assert_int_equal(planner_schedule(&c, 2, &s, &e), 0);
			pp_kind kind;
			assert_int_equal(pp_kind_parse(kinds[k], &kind, &e), 0);
			pp_split sp;
			pp_split_args sa = {.n_layers = debugmodel()->n_layers, .pp = 2, .kind = kind,
					    .first_less = 1, .last_less = 1};
			assert_int_equal(pp_split_make(&sa, &sp, &e), 0);
			uint64_t peaks[2];
			measured_ranks(&c, s, &sp, peaks);
			for (int rank = 0; rank < 2; rank++) {
				const plan_role *ro = &r.roles[rank];
				uint64_t want = ro->peak, got = peaks[rank];
				print_message("%-22s AC %-4s rank %d: %d contexts at most, planned %9llu, "
					      "measured %9llu\n", kinds[k], acs[a], rank, ro->live_mb,
					      (unsigned long long)want, (unsigned long long)got);
				assert_int_equal(want, got);
				compared++;
			}
			pp_split_free(&sp);
			pp_schedule_free(s);
			planner_report_free(&r);
			config_free(&c);
		}
	assert_int_equal(compared, 28);
}

/* FSDP's shards of a 2-layer model over 3 ranks, counted by hand: every
 * tensor's rows rounded up to a multiple of 3. */
static void fsdp_shards_are_padded_like_fsdp2(void **state)
{
	(void)state;
	job_config c;
	load(&c, "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
		 "[training]\nlocal_batch_size = 1\nseq_len = 16\nmixed_precision_param = \"float32\"\n");
	plan_report r;
	titan_err e = {0};
	assert_int_equal(planner_run(&c, 3, (uint64_t)1 << 40, &r, &e), 0);
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create_unbound(be, debugmodel(), 0, &e);
	uint64_t want = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		uint64_t rows = (uint64_t)t->shape[0];
		want += (rows + 2) / 3 * (t->numel / rows);
	}
	assert_int_equal(r.d.dp_shard, 3);
	assert_int_equal(r.roles[0].bytes[PLAN_PARAMS], 4 * want);
	assert_int_equal(r.roles[0].bytes[PLAN_OPTIMIZER], 8 * want);
	/* each unit: gathered once for forward and once for backward (resharded),
	 * its gradient reduce-scattered, all float32 here: (3 - 1) x shard x 3 */
	assert_int_equal(r.roles[0].sent[PLAN_DIM_FSDP], 2 * 4 * want * 3);
	model_free(m);
	backend_free(be);
	planner_report_free(&r);
	config_free(&c);
}

/* Expert parallelism: a rank holds E/ep experts of each routed expert tensor,
 * sharded over efsdp = fsdp / ep; the other tensors over fsdp.  DeepSeek V3's
 * debug flavor on 4 ranks with ep 2: 4 experts a rank, 2 rows each of efsdp 2. */
static void expert_tensors_split_over_ep_then_efsdp(void **state)
{
	(void)state;
	job_config c;
	load(&c, "[model]\nname = \"deepseek_v3\"\nflavor = \"debugmodel\"\n"
		 "[training]\nlocal_batch_size = 1\nseq_len = 16\nmixed_precision_param = \"float32\"\n"
		 "[parallelism]\nexpert_parallel_degree = 2\n");
	plan_report r;
	titan_err e = {0};
	if (planner_run(&c, 4, (uint64_t)1 << 40, &r, &e))
		fail_msg("%s", e.msg);
	const llama_args *a =
		model_family_flavor(model_family_find("deepseek_v3"), "debugmodel");
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create_unbound(be, a, 0, &e);
	uint64_t dense = 0, experts = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		uint64_t rows = (uint64_t)t->shape[0], cols = t->numel / rows;
		if (t->is_expert)
			experts += (rows / 2 + 1) / 2 * cols;
		else
			dense += (rows + 3) / 4 * cols;
	}
	assert_int_equal(r.d.ep, 2);
	assert_int_equal(r.roles[0].bytes[PLAN_PARAMS], 4 * (dense + experts));
	assert_int_equal(r.roles[0].bytes[PLAN_OPTIMIZER], 8 * (dense + experts));
	/* gathered twice and reduced once, float32: the dense shards round 4
	 * ranks, the experts' round their 2 efsdp ranks */
	assert_int_equal(r.roles[0].sent[PLAN_DIM_FSDP], 3 * 4 * (3 * dense + 1 * experts));
	model_free(m);
	backend_free(be);
	planner_report_free(&r);
	config_free(&c);
}

/* EP 2 x TP 2 on 4 ranks (torchtitan's ETP 1): ep borrowed from tp, so a
 * rank holds E/ep whole experts (not split over tp) sharded over efsdp =
 * dp_shard x tp / ep = 2, the other tensors TP-split and sharded over fsdp 2. */
static void experts_stay_whole_under_ep_with_tp(void **state)
{
	(void)state;
	job_config c;
	load(&c, "[model]\nname = \"deepseek_v3\"\nflavor = \"debugmodel\"\n"
		 "[training]\nlocal_batch_size = 1\nseq_len = 16\nmixed_precision_param = \"float32\"\n"
		 "[parallelism]\nexpert_parallel_degree = 2\ntensor_parallel_degree = 2\n"
		 "[activation_checkpoint]\nmode = \"none\"\n");
	plan_report r;
	titan_err e = {0};
	if (planner_run(&c, 4, (uint64_t)1 << 40, &r, &e))
		fail_msg("%s", e.msg);
	const llama_args *a =
		model_family_flavor(model_family_find("deepseek_v3"), "debugmodel");
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create_unbound(be, a, 0, &e);
	uint64_t dense = 0, experts = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		uint64_t rows = (uint64_t)t->shape[0], cols = t->numel / rows;
		if (t->is_expert) {
			experts += (rows / 2 + 1) / 2 * cols;
			continue;
		}
		if (t->tp_dim == 0)
			rows = (rows + 1) / 2;
		else if (t->tp_dim > 0)
			cols = cols / (uint64_t)t->shape[t->tp_dim] *
			       (((uint64_t)t->shape[t->tp_dim] + 1) / 2);
		dense += (rows + 1) / 2 * cols;
	}
	assert_int_equal(r.d.ep, 2);
	assert_int_equal(r.d.tp, 2);
	assert_int_equal(r.d.dp_shard, 2);
	assert_int_equal(r.roles[0].bytes[PLAN_PARAMS], 4 * (dense + experts));
	/* gathered twice and reduced once, float32, each round its 2 ranks */
	assert_int_equal(r.roles[0].sent[PLAN_DIM_FSDP], 3 * 4 * (dense + experts));
	/* each MoE layer: the counts (4 experts a rank, int32) to the other ep
	 * rank, then the rank's 8 of 16 tokens x top_k rows, half of them to the
	 * other rank and as many back, forward and backward, float32 */
	uint64_t moe = 0, rows = 8 * (uint64_t)a->moe.top_k;
	for (int l = 0; l < a->n_layers; l++)
		moe += model_family_moe_layer(a, l) != 0;
	assert_int_equal(r.roles[0].sent[PLAN_DIM_EP],
			 moe * (4 * 4 + 2 * (rows / 2 + rows / 2) * (uint64_t)a->dim * 4));
	model_free(m);
	backend_free(be);
	planner_report_free(&r);
	config_free(&c);
}

static void pipeline_traffic_is_one_message_per_crossing(void **state)
{
	(void)state;
	job_config c;
	load(&c, "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
		 "[training]\nlocal_batch_size = 8\nseq_len = 32\n"
		 "[parallelism]\npipeline_parallel_degree = 4\ndata_parallel_shard_degree = 1\n");
	plan_report r;
	titan_err e = {0};
	assert_int_equal(planner_run(&c, 4, (uint64_t)1 << 40, &r, &e), 0);
	/* 8 micro-batches of 1 x 32 tokens x dim 256 float32: a message is 32 KiB;
	 * inner ranks send forward and backward, the ends one way only */
	uint64_t msg = 32 * 256 * 4;
	assert_int_equal(r.roles[0].sent[PLAN_DIM_PP], 8 * msg);
	assert_int_equal(r.roles[1].sent[PLAN_DIM_PP], 16 * msg);
	assert_int_equal(r.roles[3].sent[PLAN_DIM_PP], 8 * msg);
	/* 1F1B: rank 0 holds p = 4 micro-batches at most, the last rank 1 */
	assert_int_equal(r.roles[0].live_mb, 4);
	assert_int_equal(r.roles[3].live_mb, 1);
	assert_true(r.bubble > 0.27 && r.bubble < 0.28); /* 3 / 11 */
	planner_report_free(&r);
	config_free(&c);
}

/* Float8 with FSDP's float8 all-gather beside TP: debugmodel on 4 ranks (fsdp
 * 2 x tp 2), one row of 32 tokens, no AC.  A layer's converted weights (the
 * output projection filtered) at tp 2 hold 3 x 128 x 256 (wq wk wv) + 256 x
 * 128 (wo) + 2 x 384 x 256 (w1 w3) + 256 x 384 (w2) elements, half of them a
 * shard: 212992, gathered twice a step as one byte instead of bf16's two,
 * over 6 layers; each gather all-reduces the 7 amax over fsdp and over tp (28
 * bytes: 28 sent of an all-reduce of 2); the casts' own amax over tp, one
 * float each (tensorwise): a column-parallel linear's output gradient, twice
 * (grad_input, grad_weight), a row-parallel one's input twice (output,
 * grad_weight), 14 all-reduces of 4 bytes a layer. */
static void float8_traffic_under_fsdp_and_tp(void **state)
{
	(void)state;
	const char *toml = "[model]\nname = \"llama3\"\nflavor = \"debugmodel\"\n"
			   "[training]\nlocal_batch_size = 1\nseq_len = 32\n"
			   "[activation_checkpoint]\nmode = \"none\"\n"
			   "[parallelism]\ntensor_parallel_degree = 2\n";
	const char *f8 = "[model]\nconverters = [\"quantize.linear.float8\"]\n"
			 "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"
			 "filter_fqns = [\"output\"]\n";
	job_config c, d;
	load(&c, toml);
	load(&d, toml);
	titan_err e = {0};
	if (config_load_string(&d, "f8.toml", f8, &e) != 0)
		fail_msg("%s", e.msg);
	plan_report r, q;
	assert_int_equal(planner_run(&c, 4, (uint64_t)1 << 40, &r, &e), 0);
	if (planner_run(&d, 4, (uint64_t)1 << 40, &q, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(q.f8_converted, 6 * 7);
	assert_int_equal(q.f8_linears, 6 * 7 + 1);
	assert_true(q.f8_gather);
	uint64_t gathered = 2 * 6 * 212992, amax = 2 * 6 * 28, casts = 6 * 14 * 4;
	const plan_role *a = &r.roles[0], *b = &q.roles[0];
	assert_int_equal(b->f8_sent[PLAN_DIM_FSDP], gathered + amax);
	assert_int_equal(b->sent[PLAN_DIM_FSDP], a->sent[PLAN_DIM_FSDP] - gathered + amax);
	assert_int_equal(b->f8_sent[PLAN_DIM_TP], amax + casts);
	assert_int_equal(b->sent[PLAN_DIM_TP], a->sent[PLAN_DIM_TP] + amax + casts);
	assert_int_equal(a->f8_sent[PLAN_DIM_FSDP] + a->f8_sent[PLAN_DIM_TP], 0);
	planner_report_free(&r);
	planner_report_free(&q);
	config_free(&c);
	config_free(&d);
}

/* The plan of one row of seq_len tokens a rank of a model on world ranks
 * (unlimited memory: the figures, not the fit, are tested). */
static void plan_one_row(job_config *c, plan_report *r, const char *name, const char *flavor,
			 int seq_len, int world)
{
	char toml[256];
	snprintf(toml, sizeof toml, "[model]\nname = \"%s\"\nflavor = \"%s\"\n"
		 "[training]\nlocal_batch_size = 1\nseq_len = %d\n", name, flavor, seq_len);
	load(c, toml);
	titan_err e = {0};
	if (planner_run(c, world, (uint64_t)1 << 40, r, &e) != 0)
		fail_msg("%s", e.msg);
}

/* GPT-OSS 20B at seq_len 4096, whose even layers see a window of 128:
 * torchtitan's count is 26,481,681,792 FLOPs per token (torchtitan #4300's
 * "Reference FLOPs/token" for gpt_oss:20b, the count of 0.3.0); #4300's fix
 * counts the windowed layers at 128 keys a query, 24,141,260,160.  titan
 * counts causal pairs: the 12 full layers see (4096 + 1) / 2 keys a query on
 * average, not 4096, and the 12 windowed ones (128 x 129 / 2 + 3968 x 128) /
 * 4096, not 128; 6 x 64 heads x (64 + 64) FLOPs per pair per layer.  A run
 * doing that real work at 90 % of the peak reads more than 100 % in
 * torchtitan's count, 90 % in titan's. */
static void windowed_model_mfu_stays_below_100_percent(void **state)
{
	(void)state;
	job_config c;
	plan_report r;
	plan_one_row(&c, &r, "gpt_oss", "20b", 4096, 8);
	assert_true(r.flops_tt == 26481681792.0);
	double pair = 6.0 * 64 * 128, t = 4096, w = 128;
	double fixed_4300 = 24141260160.0;
	double want = fixed_4300 - 12 * pair * (t - (t + 1) / 2) -
		      12 * pair * (w - (w * (w + 1) / 2 + (t - w) * w) / t);
	if (r.flops != want)
		fail_msg("%.17g FLOPs per token, want %.17g", r.flops, want);
	double peak = 989e12, tps = 0.9 * peak / r.flops; /* 90 % of the real work's peak */
	double mfu = 100 * r.flops * tps / peak, mfu_tt = 100 * r.flops_tt * tps / peak;
	printf("gpt_oss 20b seq 4096 at 90%% of peak: mfu %.1f%%, torchtitan's count %.1f%%\n",
	       mfu, mfu_tt);
	assert_true(mfu < 100 && mfu_tt > 100);
	planner_report_free(&r);
	config_free(&c);
}

/* Llama 3 8B at seq_len 8192: the loss of one row in titan's chunks of 256
 * rows of float32 logits (vocabulary 128256), unchunked, torch's
 * cross_entropy (three float32 (8192, 128256) tensors) and 0.3.0's 8 chunks
 * (four (1024, 128256) tensors): the forms scripts/bench/loss.sh measured
 * at seq 2048 to 8192 (titan's peak within 1 to 6 % of the model's figure,
 * torch's plain loss within 0.3 %, 0.3.0's 7 to 16 % above). */
static void loss_memory_of_8b_shapes(void **state)
{
	(void)state;
	job_config c;
	plan_report r;
	plan_one_row(&c, &r, "llama3", "8B", 8192, 1);
	uint64_t v = 128256, n = 8192;
	assert_int_equal(r.loss_rows, 256);
	assert_int_equal(r.loss_bytes, 256 * v * 4);
	assert_int_equal(r.loss_whole, n * v * 4);
	assert_int_equal(r.loss_torch, 3 * n * v * 4);
	assert_int_equal(r.loss_chunks_030, 8);
	assert_int_equal(r.loss_torch_030, 4 * (n / 8) * v * 4);
	planner_report_free(&r);
	config_free(&c);
}

static void bad_plans_are_refused_before_any_work(void **state)
{
	(void)state;
	static const struct {
		const char *toml;
		int world;
		const char *words;
	} bad[] = {
		{"[parallelism]\npipeline_parallel_degree = 8\ndata_parallel_shard_degree = 1\n", 8,
		 "more stages than the 6 layers"},
		{"[parallelism]\npipeline_parallel_degree = 2\ndata_parallel_shard_degree = 1\n"
		 "pipeline_parallel_microbatch_size = 3\n", 2,
		 "Batch size 4 must be divisible by microbatch_size 3"},
		{"[parallelism]\npipeline_parallel_degree = 2\ndata_parallel_shard_degree = 1\n"
		 "pipeline_parallel_microbatch_size = 4\n", 2,
		 "Number of microbatches (1) must be greater than or equal to the number of stages (2)"},
		{"[parallelism]\ncontext_parallel_degree = 3\ndata_parallel_shard_degree = 1\n", 3,
		 "training.seq_len = 32 is not divisible by tp 1 x 2 x cp 3 = 6"},
		{"[parallelism]\ntensor_parallel_degree = 3\ndata_parallel_shard_degree = 1\n", 3,
		 "parallelism.tensor_parallel_degree = 3 does not divide n_heads = 16 of debugmodel"},
		{"[parallelism]\ndata_parallel_shard_degree = 3\n", 4,
		 "dp_replicate 1 x dp_shard 3 x cp 1 x tp 1 x pp 1 = 3, not the world size 4"},
		{"[parallelism]\nexpert_parallel_degree = 2\n", 2,
		 "parallelism.expert_parallel_degree = 2: the model has no experts"},
		{"[parallelism]\nexpert_parallel_degree = 2\n", 3,
		 "expert_parallel_degree 2 x expert_tensor_parallel_degree 1 = 2 does not divide "
		 "dp_shard 3 x cp 1 x tp 1 = 3"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char toml[600];
		snprintf(toml, sizeof toml, "%s%s", base, bad[i].toml);
		job_config c;
		load(&c, toml);
		plan_report r;
		titan_err e = {0};
		assert_int_equal(planner_run(&c, bad[i].world, (uint64_t)1 << 40, &r, &e), -1);
		if (strstr(e.msg, bad[i].words) == NULL)
			fail_msg("got: %s\nexpected: %s", e.msg, bad[i].words);
		config_free(&c);
	}
	uint64_t v;
	titan_err e = {0};
	assert_int_equal(planner_parse_bytes("80GiB", &v, &e), 0);
	assert_int_equal(v, 80ull << 30);
	assert_int_equal(planner_parse_bytes("1.5 TiB", &v, &e), 0);
	assert_int_equal(v, 3ull << 39);
	assert_int_equal(planner_parse_bytes("80GB", &v, &e), -1);
	assert_int_equal(planner_parse_bytes("-1", &v, &e), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(single_process_plan_equals_measured_peak),
		cmocka_unit_test(pipeline_rank_plans_equal_measured_peaks),
		cmocka_unit_test(fsdp_shards_are_padded_like_fsdp2),
		cmocka_unit_test(expert_tensors_split_over_ep_then_efsdp),
		cmocka_unit_test(experts_stay_whole_under_ep_with_tp),
		cmocka_unit_test(pipeline_traffic_is_one_message_per_crossing),
		cmocka_unit_test(float8_traffic_under_fsdp_and_tp),
		cmocka_unit_test(windowed_model_mfu_stays_below_100_percent),
		cmocka_unit_test(loss_memory_of_8b_shapes),
		cmocka_unit_test(bad_plans_are_refused_before_any_work),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
