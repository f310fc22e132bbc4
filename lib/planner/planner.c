/* The planner: the run's structures built without storage, and their bytes.
 * See planner.h for what each figure counts. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cp/cp.h"
#include "gpu/gpu.h"
#include "loader/loader.h"
#include "mesh/mesh.h"
#include "model/family.h"
#include "planner/planner.h"
#include "planner/planner_priv.h"
#include "pp/pp.h"

int planner_ac_mode(const job_config *c, model_ac_mode *mode, int *every, titan_err *e)
{
	const char *m = c->activation_checkpoint.mode, *opt = c->activation_checkpoint.selective_ac_option;
	*mode = MODEL_AC_NONE;
	*every = 1;
	if (strcmp(m, "full") == 0) {
		*mode = MODEL_AC_FULL;
	} else if (strcmp(m, "selective") == 0 && strcmp(opt, "op") == 0) {
		*mode = MODEL_AC_OP;
	} else if (strcmp(m, "selective") == 0) {
		*every = atoi(opt);
		if (*every < 1)
			return err_set(e, "activation_checkpoint.selective_ac_option \"%s\": expected a "
				       "positive integer or \"op\"", opt);
		*mode = MODEL_AC_SELECTIVE;
	} else if (strcmp(m, "memory_budget") == 0) {
		return err_set(e, "activation_checkpoint.mode = \"memory_budget\" is not supported yet");
	}
	return 0;
}

uint64_t planner_local_memory(void)
{
	gpu_info g;
	titan_err e;
	if (gpu_count() > 0 && gpu_device_info(0, &g, &e) == 0)
		return g.mem_bytes;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

int planner_parse_bytes(const char *s, uint64_t *out, titan_err *e)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	char *end;
	double v = strtod(s, &end);
	while (isspace((unsigned char)*end))
		end++;
	int u = *end == '\0' ? 0 : -1;
	for (int i = 0; i < 5 && u < 0; i++)
		if (strcmp(end, units[i]) == 0)
			u = i;
	if (end == s || u < 0 || !(v > 0) || v * pow(1024, u) > 1e18)
		return err_set(e, "'%s': expected a size like 80GiB (B, KiB, MiB, GiB, TiB)", s);
	*out = (uint64_t)(v * pow(1024, u));
	return 0;
}

/* torchtitan's mesh rules as the run applies them (lib/mesh): the degrees
 * against the world, then against the model. */
static int resolve(const job_config *c, int world, plan_degrees *out, titan_err *e)
{
	const __typeof__(c->parallelism) *p = &c->parallelism;
	mesh_degrees want = {p->data_parallel_replicate_degree, p->data_parallel_shard_degree,
			     p->context_parallel_degree, p->tensor_parallel_degree,
			     p->pipeline_parallel_degree, p->expert_parallel_degree,
			     p->expert_tensor_parallel_degree}, d;
	if (mesh_resolve(&want, world, &d, e))
		return -1;
	*out = (plan_degrees){.pp = (int)d.pp, .dp_replicate = (int)d.dp_replicate,
			      .dp_shard = (int)d.dp_shard, .cp = (int)d.cp, .tp = (int)d.tp,
			      .ep = (int)d.ep};
	return 0;
}

/* The mesh against the model: tp dividing the heads and the FFN, no more
 * stages than layers, FSDP ranks and sequence divisible (lib/mesh's
 * refusals, word for word as the run's). */
static int check_model(const plan_ctx *x, const llama_args *a, titan_err *e)
{
	mesh_degrees d = {.dp_replicate = x->d.dp_replicate, .dp_shard = x->d.dp_shard,
			  .cp = x->d.cp, .tp = x->d.tp, .pp = x->d.pp, .ep = x->d.ep, .etp = 1};
	mesh_model m = {a->name, a->n_layers, a->n_heads, a->n_kv_heads, a->dim,
			flavor_ffn_hidden(a), a->moe.experts, x->c->training.seq_len,
			cp_balance_multiple(x->c->parallelism.context_parallel_load_balancer)};
	if (x->d.ep > 1 && (a->moe.experts <= 0 || x->d.pp > 1))
		return err_set(e, "parallelism.expert_parallel_degree = %d: %s", x->d.ep,
			       a->moe.experts <= 0 ? "the model has no experts"
			       : "expert parallelism runs with data, context and tensor "
				 "parallelism only yet");
	return mesh_check_model(&d, &m, e);
}

static int parse_dtype(const char *key, const char *name, be_dtype *t, titan_err *e)
{
	int v = be_dtype_parse(name);
	if (v < 0)
		return err_set(e, "%s = \"%s\": expected float32 or bfloat16", key, name);
	*t = (be_dtype)v;
	return 0;
}

/* The config's model, whole (to read each tensor's shape and TP style) and as
 * one tensor-parallel rank holds it (local heads and FFN rows). */
static int build_models(plan_ctx *x, titan_err *e)
{
	const job_config *c = x->c;
	const model_family *f = model_family_find(c->model.name);
	if (f == NULL)
		return err_set(e, "model.name \"%s\": no such model family", c->model.name);
	const llama_args *a = model_family_flavor(f, c->model.flavor);
	if (a == NULL)
		return err_set(e, "model.flavor \"%s\": not a flavor of model.name \"%s\"",
			       c->model.flavor, c->model.name);
	int tp = x->d.tp, ffn = flavor_ffn_hidden(a);
	if (check_model(x, a, e))
		return -1;
	if ((x->be = backend_cpu_create(1, e)) == NULL)
		return -1;
	if ((x->whole = model_create_unbound(x->be, a, 0, e)) == NULL)
		return -1;
	llama_args l = *a;
	l.n_heads /= tp;
	l.n_kv_heads /= tp;
	l.head_dim = flavor_head_dim(a);
	l.hidden_dim = ffn / tp;
	int vocab = (a->vocab_size + tp - 1) / tp;
	if ((x->local = model_create_unbound(x->be, &l, vocab, e)) == NULL)
		return -1;
	model_prec p = {x->param_t, x->param_t, x->compute_t, x->compute_t};
	if (planner_ac_mode(c, &x->ac, &x->ac_every, e) || model_set_prec(x->local, &p, e) ||
	    model_set_ac(x->local, x->ac, x->ac_every, e))
		return -1;
	if (planner_float8(x, e))
		return -1;
	snprintf(x->r->model, sizeof x->r->model, "%s %s", c->model.name, a->name);
	x->r->n_params = (int64_t)model_num_params(x->whole);
	snprintf(x->r->ac, sizeof x->r->ac, "%s%s%s", c->activation_checkpoint.mode,
		 strcmp(c->activation_checkpoint.mode, "selective") ? "" : " ",
		 strcmp(c->activation_checkpoint.mode, "selective")
			 ? "" : c->activation_checkpoint.selective_ac_option);
	return 0;
}

/* Precision as the run applies it: parameters and optimizer states in
 * training.dtype; under FSDP the units compute in mixed_precision_param and
 * reduce gradients in mixed_precision_reduce (torchtitan's
 * MixedPrecisionPolicy), without sharding in training.dtype. */
static int precision(plan_ctx *x, titan_err *e)
{
	const job_config *c = x->c;
	if (parse_dtype("training.dtype", c->training.dtype, &x->param_t, e) ||
	    parse_dtype("training.mixed_precision_param", c->training.mixed_precision_param,
			&x->mp_t, e) ||
	    parse_dtype("training.mixed_precision_reduce", c->training.mixed_precision_reduce,
			&x->reduce_t, e))
		return -1;
	/* fused_opt_states_bf16: exp_avg and exp_avg_sq in bf16 beside float32 */
	x->state_t = strcmp(c->optimizer.implementation, "fused_opt_states_bf16") == 0
			     ? BE_BF16 : x->param_t;
	x->fsdp = x->d.dp_shard * x->d.cp;
	x->compute_t = x->fsdp > 1 ? x->mp_t : x->param_t;
	snprintf(x->r->dtypes, sizeof x->r->dtypes, "params %s, compute %s, reduce %s",
		 be_dtype_name(x->param_t), be_dtype_name(x->compute_t),
		 be_dtype_name(x->fsdp > 1 ? x->reduce_t : x->param_t));
	return 0;
}

int planner_pipeline(const job_config *c, int pp, int n_layers, pp_split *sp, pp_schedule **out,
		     int *n_mb, titan_err *e)
{
	const __typeof__(c->parallelism) *p = &c->parallelism;
	*out = NULL;
	pp_kind k;
	if (pp_kind_parse(p->pipeline_parallel_schedule, &k, e))
		return err_prefix(e, "parallelism.pipeline_parallel_schedule");
	const cfg_strlists *fq = &p->module_fqns_per_model_part;
	const char *const **parts = NULL;
	int *len = NULL;
	if (fq->set && fq->n > 0) {
		parts = malloc((size_t)fq->n * sizeof *parts);
		len = malloc((size_t)fq->n * sizeof *len);
		if (parts == NULL || len == NULL) {
			free(parts);
			free(len);
			return err_set(e, "planner: out of memory");
		}
		for (int i = 0; i < fq->n; i++) {
			parts[i] = (const char *const *)fq->v[i].v;
			len[i] = fq->v[i].n;
		}
	}
	pp_split_args a = {
		.n_layers = n_layers, .pp = pp, .kind = k,
		.layers_per_stage = p->pipeline_parallel_layers_per_stage_set
					    ? p->pipeline_parallel_layers_per_stage : 0,
		.first_less = p->pipeline_parallel_first_stage_less_layers,
		.last_less = p->pipeline_parallel_last_stage_less_layers,
		.n_parts = fq->set ? fq->n : 0, .part_len = len, .parts = parts,
		.n_split_points = p->pipeline_parallel_split_points.n,
		.split_points = (const char *const *)p->pipeline_parallel_split_points.v};
	int rc = pp_split_make(&a, sp, e);
	free(parts);
	free(len);
	if (rc)
		return -1;
	int few;
	if (pp_microbatches(c->training.local_batch_size, p->pipeline_parallel_microbatch_size,
			    sp->n_stages, n_mb, &few, e))
		goto fail;
	/* Every schedule holds an F and a B (or an I and a W) per stage and
	 * micro-batch, and the planner walks them again; refused here, before a
	 * list of that size is built, rather than when an allocation fails. */
	int64_t actions = 3 * (int64_t)sp->n_stages * *n_mb;
	if (actions > PLANNER_MAX_ACTIONS) {
		err_set(e, "parallelism: a pipeline schedule of %d stages x %d micro-batches "
			"(local_batch_size %lld / pipeline_parallel_microbatch_size %lld) holds up "
			"to %lld actions, more than the %lld a schedule may hold: use fewer "
			"micro-batches", sp->n_stages, *n_mb, (long long)c->training.local_batch_size,
			(long long)p->pipeline_parallel_microbatch_size, (long long)actions,
			(long long)PLANNER_MAX_ACTIONS);
		goto fail;
	}
	const char *csv = p->pipeline_parallel_schedule_csv;
	if (csv != NULL && csv[0] != '\0') {
		if (pp_schedule_read_csv(csv, pp, sp->n_stages, *n_mb, out, e))
			goto fail;
		for (int s = 0; s < sp->n_stages; s++)
			if ((*out)->stage_rank[s] != sp->stage_rank[s]) {
				err_set(e, "%s: stage %d runs on rank %d, but %s places it on rank %d",
					csv, s, (*out)->stage_rank[s], p->pipeline_parallel_schedule,
					sp->stage_rank[s]);
				goto fail;
			}
	} else if (pp_schedule_build(k, pp, sp->stages_per_rank, *n_mb, out, e)) {
		goto fail;
	}
	return 0;
fail:
	pp_schedule_free(*out);
	*out = NULL;
	pp_split_free(sp);
	return -1;
}

/* The pipeline split and schedule, or one stage of every unit. */
static int pipeline(plan_ctx *x, titan_err *e)
{
	const job_config *c = x->c;
	const __typeof__(c->parallelism) *p = &c->parallelism;
	int L = model_args(x->whole)->n_layers;
	x->r->microbatch = x->d.pp > 1 ? p->pipeline_parallel_microbatch_size : c->training.local_batch_size;
	if (x->d.pp == 1) {
		int64_t dp = (int64_t)x->d.dp_replicate * x->d.dp_shard, lb = c->training.local_batch_size;
		int64_t gb = c->training.global_batch_size > 0 ? c->training.global_batch_size : lb * dp;
		if (gb % (lb * dp))
			return err_set(e, "training.global_batch_size %lld is not a multiple of "
				       "local_batch_size %lld x data parallel degree %lld",
				       (long long)gb, (long long)lb, (long long)dp);
		x->r->n_mb = gb / (lb * dp);
		return 0;
	}
	int n_mb;
	if (planner_pipeline(c, x->d.pp, L, &x->split, &x->sched, &n_mb, e))
		return -1;
	x->r->n_mb = n_mb;
	snprintf(x->r->schedule, sizeof x->r->schedule, "%s", x->sched->name);
	pp_sim sim;
	if (pp_simulate(x->sched, &PP_COSTS_UNIT, &sim, NULL, e))
		return -1;
	x->r->bubble = sim.bubble;
	return 0;
}

void planner_report_free(plan_report *r)
{
	free(r->roles);
	r->roles = NULL;
	r->n_roles = 0;
}

static void ctx_free(plan_ctx *x)
{
	model_free(x->whole);
	model_free(x->local);
	if (x->be)
		backend_free(x->be);
	pp_schedule_free(x->sched);
	pp_split_free(&x->split);
}

/* The batch the trainer would accept: its loader's limits (loader_open
 * refuses beyond them), which also keep every size the planner multiplies
 * from them within 64 bits (planner_roles checks what it adds up). */
static int check_batch(const job_config *c, titan_err *e)
{
	const __typeof__(c->training) *t = &c->training;
	if (t->seq_len < 1 || t->seq_len > LOADER_MAX_SEQ_LEN)
		return err_set(e, "training.seq_len = %lld: expected 1 to %lld (the trainer's "
			       "limit)", (long long)t->seq_len, (long long)LOADER_MAX_SEQ_LEN);
	if (t->local_batch_size < 1 || t->local_batch_size > LOADER_MAX_LOCAL_BATCH)
		return err_set(e, "training.local_batch_size = %lld: expected 1 to %lld (the "
			       "trainer's limit)", (long long)t->local_batch_size,
			       (long long)LOADER_MAX_LOCAL_BATCH);
	return 0;
}

/* Everything but the roles: the degrees, the layout, the models, the
 * pipeline. */
static int build(plan_ctx *x, int world_size, titan_err *e)
{
	const job_config *c = x->c;
	if (check_batch(c, e) || resolve(c, world_size, &x->d, e) || precision(x, e) ||
	    build_models(x, e))
		return -1;
	cp_balance bal;
	if (cp_balance_parse(c->parallelism.context_parallel_load_balancer, &bal, e) ||
	    cp_layout_init(&x->cpl, c->training.seq_len, x->d.cp, bal, e))
		return -1;
	if (x->d.cp > 1 && cp_rotate_parse(c->parallelism.context_parallel_rotate_method,
					   &x->rotate, e))
		return -1;
	return pipeline(x, e);
}

/* The work per token and the loss's memory (planner.h's figures). */
static int work(plan_ctx *x, titan_err *e)
{
	plan_report *r = x->r;
	const job_config *c = x->c;
	int64_t t = c->training.seq_len, tl = cp_local_len(&x->cpl);
	r->flops = model_train_flops(x->whole, 1, t, NULL) / (double)t;
	r->flops_tt = model_flops_per_token(x->whole, (int)t);
	r->loss_rows = model_loss_rows(x->local, r->microbatch * tl);
	r->loss_bytes = model_loss_bytes(x->local, (int)r->microbatch, (int)tl);
	/* a row's logits in the activations' type and in float32 */
	uint64_t v = (uint64_t)model_args(x->local)->vocab_size;
	uint64_t row = planner_mul(x, v, be_dtype_size(x->compute_t)), row32 = planner_mul(x, v, 4);
	uint64_t rows = planner_mul(x, (uint64_t)r->microbatch, (uint64_t)tl);
	r->loss_whole = planner_mul(x, rows, row);
	r->loss_torch = planner_mul(x, planner_mul(x, rows, row32), 3);
	r->loss_chunks_030 = c->loss030.num_chunks > 0 ? c->loss030.num_chunks : 8;
	uint64_t per = ((uint64_t)tl + (uint64_t)r->loss_chunks_030 - 1) / (uint64_t)r->loss_chunks_030;
	r->loss_torch_030 = planner_mul(x, planner_mul(x, (uint64_t)r->microbatch * per, row32), 4);
	if (x->overflow)
		return err_set(e, "planner: the loss of a micro-batch of %lld sequences of %lld "
			       "tokens needs more than 2^63 bytes", (long long)r->microbatch,
			       (long long)r->seq_len);
	return 0;
}

int planner_run(const job_config *c, int world_size, uint64_t device_bytes, plan_report *r,
		titan_err *e)
{
	memset(r, 0, sizeof *r);
	plan_ctx x = {.c = c, .r = r};
	int rc = build(&x, world_size, e);
	if (rc == 0) {
		r->d = x.d;
		r->world_size = world_size;
		r->local_batch = c->training.local_batch_size;
		r->seq_len = c->training.seq_len;
		r->device_bytes = device_bytes;
		rc = planner_roles(&x, e);
		if (rc == 0)
			rc = work(&x, e);
	}
	ctx_free(&x);
	if (rc)
		planner_report_free(r);
	return rc ? -1 : 0;
}

int planner_schedule(const job_config *c, int world_size, pp_schedule **out, titan_err *e)
{
	plan_report r;
	memset(&r, 0, sizeof r);
	plan_ctx x = {.c = c, .r = &r};
	int rc = build(&x, world_size, e);
	*out = rc == 0 ? x.sched : NULL;
	x.sched = NULL;
	ctx_free(&x);
	return rc;
}
