/* The planner's report: a table for people, an object for scripts. */
#include <jansson.h>
#include <stdlib.h>

#include "core/json.h"
#include "planner/planner.h"

static const char *const term_key[PLAN_TERM_COUNT] = {
	"params", "grads", "optimizer", "gathered", "activations", "comm_buffers"};
static const char *const dim_key[PLAN_DIM_COUNT] = {"pp", "dp_replicate", "fsdp", "cp", "tp",
						     "ep"};

static double gib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

int planner_print(const plan_report *r, FILE *f)
{
	const plan_degrees *d = &r->d;
	fprintf(f, "plan: %s (%lld parameters) on %d ranks: pp %d, dp_replicate %d, dp_shard %d, "
		"cp %d, tp %d", r->model, (long long)r->n_params, r->world_size, d->pp,
		d->dp_replicate, d->dp_shard, d->cp, d->tp);
	if (d->ep > 1)
		fprintf(f, ", ep %d (experts' FSDP over %d)", d->ep, d->dp_shard * d->cp * d->tp / d->ep);
	fputc('\n', f);
	fprintf(f, "batch: local %lld x seq %lld, %lld micro-batch%s of %lld a step; AC %s; %s\n",
		(long long)r->local_batch, (long long)r->seq_len, (long long)r->n_mb,
		r->n_mb == 1 ? "" : "es", (long long)r->microbatch, r->ac, r->dtypes);
	if (r->schedule[0])
		fprintf(f, "pipeline: %s, bubble %.1f%% (unit costs: F 1, B 2)\n", r->schedule,
			100 * r->bubble);
	fprintf(f, "memory per rank in GiB, against %.2f GiB:\n", gib(r->device_bytes));
	fprintf(f, "%-9s %5s %-12s %8s %8s %9s %8s %11s %8s %8s %s\n", "role", "ranks", "units",
		"params", "grads", "optimizer", "gathered", "activations", "comm-buf", "peak", "fits");
	for (int i = 0; i < r->n_roles; i++) {
		const plan_role *ro = &r->roles[i];
		char units[32];
		snprintf(units, sizeof units, "%d-%d%s", ro->unit0[0], ro->unit1[0],
			 ro->n_stages > 1 ? ",..." : "");
		char name[16];
		snprintf(name, sizeof name, "pp %d", ro->pp_rank);
		fprintf(f, "%-9s %5d %-12s", name, ro->n_ranks, units);
		for (int t = 0; t < PLAN_TERM_COUNT; t++)
			fprintf(f, " %*.2f", t == PLAN_ACTIVATIONS ? 11 : t == PLAN_OPTIMIZER ? 9 : 8,
				gib(ro->bytes[t]));
		fprintf(f, " %8.2f %s\n", gib(ro->peak), ro->peak <= r->device_bytes ? "yes" : "NO");
	}
	fprintf(f, "sent per rank per step in GiB:\n");
	for (int i = 0; i < r->n_roles; i++) {
		const plan_role *ro = &r->roles[i];
		fprintf(f, "pp %d:", ro->pp_rank);
		for (int k = 0; k < PLAN_DIM_COUNT; k++)
			if (k != PLAN_DIM_EP || r->d.ep > 1)
				fprintf(f, " %s %.3f", dim_key[k], gib(ro->sent[k]));
		fprintf(f, " (%d micro-batch contexts alive at most)\n", ro->live_mb);
	}
	if (r->f8_converted > 0)
		for (int i = 0; i < r->n_roles; i++) {
			const plan_role *ro = &r->roles[i];
			fprintf(f, "pp %d: of which Float8's (%d of %d linears, recipe %s%s): fsdp %.3f, "
				"tp %.3f (%llu and %llu bytes)\n", ro->pp_rank, r->f8_converted,
				r->f8_linears, r->f8_recipe,
				r->f8_gather ? "; FSDP gathers them as e4m3" : "",
				gib(ro->f8_sent[PLAN_DIM_FSDP]), gib(ro->f8_sent[PLAN_DIM_TP]),
				(unsigned long long)ro->f8_sent[PLAN_DIM_FSDP],
				(unsigned long long)ro->f8_sent[PLAN_DIM_TP]);
		}
	if (r->f8_moe_layers > 0)
		fprintf(f, "Float8 grouped experts: %d MoE layers (torchao's e4m3 rowwise grouped "
			"GEMMs)\n", r->f8_moe_layers);
	fprintf(f, "loss of a micro-batch (%lld rows) in GiB: %.3f in chunks of %lld rows (in the "
		"activations), %.3f unchunked; torch's cross_entropy %.3f, 0.3.0's "
		"ChunkedLossWrapper of %lld chunks %.3f\n", (long long)(r->microbatch * r->seq_len / r->d.cp),
		gib(r->loss_bytes), (long long)r->loss_rows, gib(r->loss_whole), gib(r->loss_torch),
		(long long)r->loss_chunks_030, gib(r->loss_torch_030));
	fprintf(f, "FLOPs per token: %.4g counting the (query, key) pairs attention's masks leave "
		"(one document per row; titan-train's tflops and mfu), %.4g in torchtitan's count "
		"(every query against seq_len keys): the real work at the device's peak reads mfu "
		"100%% here, %.1f%% in torchtitan's count\n", r->flops, r->flops_tt,
		100 * r->flops_tt / r->flops);
	fprintf(f, "%s\n", r->fits ? "fits" : "does NOT fit");
	return ferror(f) ? -1 : 0;
}

static json_t *role_json(const plan_role *ro)
{
	json_t *o = json_object(), *stages = json_array(), *bytes = json_object(),
	       *sent = json_object();
	for (int k = 0; k < ro->n_stages && k < 8; k++)
		json_array_append_new(stages, json_pack("{s:i, s:[i, i]}", "stage", ro->stage[k],
							"units", ro->unit0[k], ro->unit1[k]));
	for (int t = 0; t < PLAN_TERM_COUNT; t++)
		json_object_set_new(bytes, term_key[t], json_integer((json_int_t)ro->bytes[t]));
	json_object_set_new(bytes, "peak", json_integer((json_int_t)ro->peak));
	for (int k = 0; k < PLAN_DIM_COUNT; k++)
		json_object_set_new(sent, dim_key[k], json_integer((json_int_t)ro->sent[k]));
	json_object_set_new(o, "pp_rank", json_integer(ro->pp_rank));
	json_object_set_new(o, "ranks", json_integer(ro->n_ranks));
	json_object_set_new(o, "stages", stages);
	json_object_set_new(o, "live_microbatches", json_integer(ro->live_mb));
	json_object_set_new(o, "bytes", bytes);
	json_object_set_new(o, "sent_per_step", sent);
	json_t *f8 = json_object();
	for (int k = 0; k < PLAN_DIM_COUNT; k++)
		json_object_set_new(f8, dim_key[k], json_integer((json_int_t)ro->f8_sent[k]));
	json_object_set_new(o, "float8_sent_per_step", f8);
	return o;
}

int planner_print_json(const plan_report *r, FILE *f, titan_err *e)
{
	json_t *o = json_object(), *roles = json_array();
	const plan_degrees *d = &r->d;
	json_object_set_new(o, "model", json_string(r->model));
	json_object_set_new(o, "n_params", json_integer(r->n_params));
	json_object_set_new(o, "world_size", json_integer(r->world_size));
	json_object_set_new(o, "degrees", json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "pp", d->pp,
						    "dp_replicate", d->dp_replicate, "dp_shard",
						    d->dp_shard, "cp", d->cp, "tp", d->tp, "ep", d->ep));
	json_object_set_new(o, "local_batch_size", json_integer(r->local_batch));
	json_object_set_new(o, "seq_len", json_integer(r->seq_len));
	json_object_set_new(o, "microbatch_size", json_integer(r->microbatch));
	json_object_set_new(o, "microbatches", json_integer(r->n_mb));
	json_object_set_new(o, "schedule", r->schedule[0] ? json_string(r->schedule) : json_null());
	json_object_set_new(o, "bubble", json_real(r->bubble));
	json_object_set_new(o, "activation_checkpoint", json_string(r->ac));
	json_object_set_new(o, "dtypes", json_string(r->dtypes));
	json_object_set_new(o, "device_bytes", json_integer((json_int_t)r->device_bytes));
	json_object_set_new(o, "fits", json_boolean(r->fits));
	json_object_set_new(o, "flops_per_token", json_pack("{s:f, s:f}", "titan", r->flops,
							    "torchtitan", r->flops_tt));
	json_object_set_new(o, "loss", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "chunk_rows",
						 (json_int_t)r->loss_rows, "bytes",
						 (json_int_t)r->loss_bytes, "unchunked_bytes",
						 (json_int_t)r->loss_whole, "torch_bytes",
						 (json_int_t)r->loss_torch, "torch_030_chunks",
						 (json_int_t)r->loss_chunks_030, "torch_030_bytes",
						 (json_int_t)r->loss_torch_030));
	json_object_set_new(o, "float8_experts", r->f8_moe_layers > 0
		? json_integer(r->f8_moe_layers) : json_null());
	json_object_set_new(o, "float8", r->f8_converted > 0
		? json_pack("{s:i, s:i, s:s, s:b}", "converted", r->f8_converted, "linears",
			    r->f8_linears, "recipe", r->f8_recipe, "fsdp_float8_all_gather",
			    r->f8_gather)
		: json_null());
	for (int i = 0; i < r->n_roles; i++)
		json_array_append_new(roles, role_json(&r->roles[i]));
	json_object_set_new(o, "roles", roles);
	char *text = tjson_dump_str(o);
	json_decref(o);
	if (text == NULL)
		return err_set(e, "planner: out of memory");
	int rc = fputs(text, f) < 0 ? err_set(e, "writing the plan failed") : 0;
	free(text);
	return rc;
}
