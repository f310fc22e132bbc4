/* torchtitan 0.3.0's presets and command-line paths: see tt030.h. */
#include "config/tt030.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A preset's values, read from models/<family>/config_registry.py of the
 * 0.3.0 wheel: what each function sets on Trainer.Config, and the flavor its
 * model_registry call builds.  0.3.0's defaults that differ from 0.2.2's are
 * spelled out (per-op selective AC). */
typedef struct tt030_preset {
	const char *module, *name, *toml;
	int plain_loss; /* CrossEntropyLoss itself, not ChunkedLossWrapper over it */
} tt030_preset;

/* The debug presets' recipe (qwen3_debugmodel, deepseek_v3_debugmodel);
 * llama3_debugmodel adds its pipeline schedule and validator. */
#define FAMILY_DEBUG(family)                                                                \
	"[model]\nname = \"" family "\"\nflavor = \"debugmodel\"\n"                       \
	"hf_assets_path = \"./tests/assets/tokenizer\"\n"                                   \
	"[optimizer]\nlr = 8e-4\n"                                                          \
	"[lr_scheduler]\nwarmup_steps = 2\ndecay_ratio = 0.8\ndecay_type = \"linear\"\n"    \
	"min_lr_factor = 0.0\n"                                                             \
	"[training]\nlocal_batch_size = 8\nseq_len = 2048\nsteps = 10\n"                    \
	"dataset = \"c4_test\"\n"                                                           \
	"[metrics]\nlog_freq = 1\n"                                                         \
	"[checkpoint]\ninterval = 10\nlast_save_model_only = false\n"                       \
	"[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n"

#define LLAMA3_DEBUG                                                                        \
	FAMILY_DEBUG("llama3")                                                              \
	"[parallelism]\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"                 \
	"[validation]\nfreq = 5\nsteps = 10\n"

#define LLAMA3_BIG(flavor, lr, batch, ac)                                                   \
	"[model]\nname = \"llama3\"\nflavor = \"" flavor "\"\n"                             \
	"hf_assets_path = \"./assets/hf/Llama-3.1-" flavor "\"\n"                           \
	"[profiling]\nenable_profiling = true\nprofile_freq = 100\n"                        \
	"[metrics]\nenable_tensorboard = true\n"                                            \
	"[optimizer]\nlr = " lr "\n"                                                        \
	"[training]\nlocal_batch_size = " batch "\nseq_len = 8192\nsteps = 1000\n"          \
	"dataset = \"c4\"\n"                                                                \
	"[checkpoint]\ninterval = 500\n"                                                    \
	"[activation_checkpoint]\n" ac                                                      \
	"[validation]\nfreq = 500\nsteps = 1200\n"

/* 0.3.0's defaults that are not 0.2.2's, under every preset. */
static const char defaults_030[] =
	"[profiling]\nsave_traces_folder = \"profiling/traces\"\n"
	"save_memory_snapshot_folder = \"profiling/memory_snapshot\"\n";

static const tt030_preset presets[] = {
	{"llama3", "llama3_debugmodel", LLAMA3_DEBUG, 0},
	/* the same with the plain (unchunked) cross-entropy */
	{"llama3", "llama3_debugmodel_ce_loss", LLAMA3_DEBUG, 1},
	{"llama3", "llama3_8b",
	 LLAMA3_BIG("8B", "3e-4", "1", "mode = \"selective\"\nselective_ac_option = \"op\"\n"),
	 0},
	{"qwen3", "qwen3_debugmodel", FAMILY_DEBUG("qwen3"), 0},
	{"deepseek_v3", "deepseek_v3_debugmodel", FAMILY_DEBUG("deepseek_v3"), 0},
	{"llama3", "llama3_70b",
	 LLAMA3_BIG("70B", "1.5e-4", "8", "mode = \"full\"\n") "[parallelism]\n"
							     "tensor_parallel_degree = 8\n",
	 0},
};

static const tt030_preset *find_preset(const char *module, const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].module, module) == 0 && strcmp(presets[i].name, name) == 0)
			return &presets[i];
	return NULL;
}

const char *tt030_preset_name(int i, const char **module)
{
	if (i < 0 || (size_t)i >= sizeof presets / sizeof presets[0])
		return NULL;
	*module = presets[i].module;
	return presets[i].name;
}

int tt030_is_preset(const char *module, const char *name)
{
	return module != NULL && name != NULL && find_preset(module, name) != NULL;
}

#define SAME(p) {p, p, NULL, NULL, 0}
#define MOVED(p, k) {p, k, NULL, NULL, 0}
#define ONLY(p, v, why) {p, NULL, v, why, 0}
#define REFUSED(p, why) {p, NULL, NULL, why, 1}
#define NO_PY "titan-train cannot import Python modules"

/* Every leaf path of 0.3.0's Trainer.Config under llama3_debugmodel (the
 * list tests/config/torchtitan-0.3.0-keys.tsv holds), in its order. */
static const tt030_path paths[] = {
	MOVED("hf_assets_path", "model.hf_assets_path"),
	MOVED("dump_folder", "job.dump_folder"),
	MOVED("profiler.enable_profiling", "profiling.enable_profiling"),
	MOVED("profiler.save_traces_folder", "profiling.save_traces_folder"),
	MOVED("profiler.profile_freq", "profiling.profile_freq"),
	ONLY("profiler.profiler_repeat", "none", "titan's profiler repeats every profile_freq steps"),
	ONLY("profiler.profiler_skip_first", "none", "titan's profiler skips no first steps"),
	ONLY("profiler.profiler_skip_first_wait", "none", "titan's profiler has no first wait"),
	MOVED("profiler.profiler_active", "profiling.profiler_active"),
	MOVED("profiler.profiler_warmup", "profiling.profiler_warmup"),
	MOVED("profiler.enable_memory_snapshot", "profiling.enable_memory_snapshot"),
	ONLY("profiler.memory_snapshot_freq", "none", "memory snapshots are taken at the "
	     "profiler's steps"),
	MOVED("profiler.save_memory_snapshot_folder", "profiling.save_memory_snapshot_folder"),
	ONLY("profiler.memory_snapshot_max_entries", "1000000", "the snapshot's entries are "
	     "not capped"),
	ONLY("profiler.trace_post_processor", "none", NO_PY),
	SAME("metrics.log_freq"),
	SAME("metrics.enable_tensorboard"),
	SAME("metrics.disable_color_printing"),
	SAME("metrics.save_tb_folder"),
	SAME("metrics.save_for_all_ranks"),
	SAME("metrics.enable_wandb"),
	MOVED("dataloader.dataset", "training.dataset"),
	MOVED("dataloader.dataset_path", "training.dataset_path"),
	MOVED("dataloader.num_workers", "training.dataloader.num_workers"),
	MOVED("dataloader.persistent_workers", "training.dataloader.persistent_workers"),
	MOVED("dataloader.pin_memory", "training.dataloader.pin_memory"),
	MOVED("dataloader.prefetch_factor", "training.dataloader.prefetch_factor"),
	ONLY("dataloader.infinite", "true", "titan's training loader always starts the data "
	     "over"),
	REFUSED("optimizer.param_groups", "a list of Python ParamGroupConfig objects: the "
		"preset's AdamW over every parameter is used"),
	SAME("optimizer.implementation"),
	ONLY("optimizer.optimizer_factory_kwargs_by_name", "{}", NO_PY),
	SAME("lr_scheduler.warmup_steps"),
	SAME("lr_scheduler.total_steps"),
	SAME("lr_scheduler.decay_ratio"),
	SAME("lr_scheduler.decay_type"),
	SAME("lr_scheduler.min_lr_factor"),
	SAME("training.local_batch_size"),
	SAME("training.global_batch_size"),
	SAME("training.seq_len"),
	SAME("training.max_norm"),
	SAME("training.steps"),
	SAME("training.enable_cpu_offload"),
	{"training.disable_cuda_graphs", NULL, NULL, "titan captures a CUDA graph of the step "
	 "only under compile.enable; either value is accepted", 0},
	SAME("training.dtype"),
	SAME("training.mixed_precision_param"),
	SAME("training.mixed_precision_reduce"),
	SAME("training.gc_freq"),
	SAME("training.gc_debug"),
	SAME("parallelism.data_parallel_replicate_degree"),
	SAME("parallelism.data_parallel_shard_degree"),
	SAME("parallelism.fsdp_reshard_after_forward"),
	ONLY("parallelism.enable_fsdp_symm_mem", "false", "NCCL symmetric memory is not built"),
	SAME("parallelism.tensor_parallel_degree"),
	ONLY("parallelism.enable_sequence_parallel", "true", "titan's tensor parallelism always "
	     "shards the sequence between its regions"),
	{"parallelism.spmd_backend", NULL, NULL, "titan has no DTensor: any value is accepted", 0},
	SAME("parallelism.pipeline_parallel_degree"),
	SAME("parallelism.module_fqns_per_model_part"),
	SAME("parallelism.pipeline_parallel_first_stage_less_layers"),
	SAME("parallelism.pipeline_parallel_last_stage_less_layers"),
	SAME("parallelism.pipeline_parallel_layers_per_stage"),
	SAME("parallelism.pipeline_parallel_schedule"),
	SAME("parallelism.pipeline_parallel_schedule_csv"),
	SAME("parallelism.pipeline_parallel_microbatch_size"),
	SAME("parallelism.context_parallel_degree"),
	SAME("parallelism.context_parallel_load_balancer"),
	ONLY("parallelism.context_parallel_ptrr_mask_key", "none", "the PTRR load balancer is "
	     "not built"),
	SAME("parallelism.expert_parallel_degree"),
	SAME("checkpoint.enable"),
	SAME("checkpoint.folder"),
	SAME("checkpoint.interval"),
	SAME("checkpoint.initial_load_path"),
	SAME("checkpoint.initial_load_model_only"),
	SAME("checkpoint.initial_load_in_hf"),
	SAME("checkpoint.initial_load_in_hf_quantized"),
	SAME("checkpoint.last_save_model_only"),
	SAME("checkpoint.last_save_in_hf"),
	SAME("checkpoint.export_dtype"),
	SAME("checkpoint.keep_latest_k"),
	SAME("checkpoint.load_step"),
	SAME("checkpoint.exclude_from_loading"),
	SAME("checkpoint.enable_first_step_checkpoint"),
	SAME("checkpoint.create_seed_checkpoint"),
	SAME("checkpoint.load_only"),
	SAME("checkpoint.async_mode"),
	SAME("activation_checkpoint.preserve_rng_state"),
	SAME("activation_checkpoint.determinism_check"),
	SAME("activation_checkpoint.debug"),
	MOVED("activation_checkpoint.force_recompute_mm_shapes_by_fqns",
	      "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns"),
	SAME("compile.enable"),
	MOVED("compile.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"),
	SAME("compile.components"),
	SAME("compile.backend"),
	SAME("comm.init_timeout_seconds"),
	SAME("comm.train_timeout_seconds"),
	SAME("comm.trace_buf_size"),
	SAME("comm.save_traces_folder"),
	SAME("comm.save_traces_file_prefix"),
	SAME("comm.mode"),
	MOVED("validator.freq", "validation.freq"),
	MOVED("validator.enable", "validation.enable"),
	MOVED("validator.steps", "validation.steps"),
	MOVED("validator.dataloader.dataset", "validation.dataset"),
	MOVED("validator.dataloader.dataset_path", "validation.dataset_path"),
	MOVED("validator.dataloader.num_workers", "validation.dataloader.num_workers"),
	MOVED("validator.dataloader.persistent_workers", "validation.dataloader.persistent_workers"),
	MOVED("validator.dataloader.pin_memory", "validation.dataloader.pin_memory"),
	MOVED("validator.dataloader.prefetch_factor", "validation.dataloader.prefetch_factor"),
	ONLY("validator.dataloader.infinite", "false", "validation reads its split once"),
	SAME("debug.seed"),
	ONLY("debug.spmd_typechecking", "false", "titan has no spmd_types"),
	SAME("debug.deterministic"),
	SAME("debug.deterministic_warn_only"),
	SAME("debug.moe_force_load_balance"),
	ONLY("debug.detect_anomaly", "false", "autograd's anomaly mode has no titan "
	     "counterpart: a non-finite loss stops the run"),
	ONLY("debug.batch_invariant", "false", "batch-invariant kernels are not built"),
	MOVED("debug.print_config", "job.print_config"),
	MOVED("debug.save_config_file", "job.save_config_file"),
	{"debug.enable_structured_logging", NULL, NULL, "titan writes no structured trace log; "
	 "either value is accepted", 0},
	ONLY("override.imports", "", NO_PY),
	{"loss.num_chunks", "@num_chunks", NULL, "ChunkedLossWrapper's chunks: titan computes the "
	 "output projection and the loss over chunks of rows whatever this is, so any divisor of "
	 "training.seq_len is accepted", 0},
	{"loss.loss_fn.global_vocab_size", "@global_vocab_size", NULL, "the model's vocabulary "
	 "(0.3.0's presets derive it from the model): another value is refused", 0},
	/* the same under the presets whose loss is CrossEntropyLoss itself */
	{"loss.global_vocab_size", "@global_vocab_size", NULL, "the model's vocabulary: another "
	 "value is refused", 0},
};

const tt030_path *tt030_paths(int *n)
{
	*n = (int)(sizeof paths / sizeof paths[0]);
	return paths;
}

static const tt030_path *find_path(const char *path)
{
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		if (strcmp(paths[i].path, path) == 0)
			return &paths[i];
	return NULL;
}

/* The option's name in arg (after "--", before any "="), into buf. */
static const char *option_name(const char *arg, char *buf, size_t n)
{
	if (arg[0] != '-' || arg[1] != '-' || arg[2] == '\0')
		return NULL;
	const char *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
	if (len >= n)
		return NULL;
	memcpy(buf, arg + 2, len);
	buf[len] = '\0';
	return buf;
}

const char *tt030_path_of(const char *arg)
{
	char name[256];
	const char *p = option_name(arg, name, sizeof name);
	const tt030_path *t = p ? find_path(p) : NULL;
	return t && (t->key == NULL || strcmp(t->key, t->path) != 0) ? t->path : NULL;
}

/* Whether an only-path's value v is the one accepted: booleans as titan
 * spells them (config_parse_bool), None in either case, {} also empty. */
static int value_is(const char *v, const char *only)
{
	int want, got;
	if (config_parse_bool(only, &want) == 0)
		return config_parse_bool(v, &got) == 0 && got == want;
	return strcasecmp(v, only) == 0 || (strcmp(only, "{}") == 0 && *v == '\0');
}

/* A setting of 0.3.0's loss, which has no 0.2.2 key (t->key "@name"). */
static int set_loss(job_config *c, const tt030_path *t, const char *val, titan_err *err)
{
	char *end;
	long long v = strtoll(val, &end, 10);
	if (*val == '\0' || *end != '\0' || v < 1)
		return err_set(err, "--%s %s: needs a positive integer", t->path, val);
	if (strcmp(t->key, "@num_chunks") == 0)
		c->loss030.num_chunks = v;
	else
		c->loss030.global_vocab_size = v;
	return 0;
}

/* One 0.3.0 option at argv[*i]: its titan override appended to out (or
 * nothing), *i past its value. */
static int translate(job_config *c, const tt030_preset *p, int argc, char **argv, int *i,
		     char **out, int *nout, titan_err *err)
{
	char name[256];
	int b;
	const char *arg = argv[*i], *eq = strchr(arg, '=');
	if (!option_name(arg, name, sizeof name))
		return err_set(err, "%s: not an option", arg);
	const tt030_path *t = find_path(name);
	if (t && !strncmp(name, "loss.", 5) &&
	    (p->plain_loss ? strcmp(name, "loss.global_vocab_size") != 0
			   : strcmp(name, "loss.global_vocab_size") == 0))
		t = NULL; /* the other loss's path */
	if (t == NULL) {
		if (config_key_exists(name))
			return err_set(err, "--%s: torchtitan 0.2.2's key, and this run follows 0.3.0 "
				       "(--module/--config name a 0.3.0 preset), whose CLI has no such "
				       "path: mixing the two is refused", name);
		return err_set(err, "--%s: not a path of torchtitan 0.3.0's Trainer.Config (see "
			       "titan-config(5))", name);
	}
	const char *val = eq ? eq + 1 : NULL;
	int boolean = t->key && t->key[0] != '@' ? config_key_is_bool(t->key)
			     : (t->only && (!strcmp(t->only, "true") || !strcmp(t->only, "false")));
	if (!val && !boolean) {
		if (*i + 1 >= argc)
			return err_set(err, "--%s: needs a value", name);
		val = argv[++*i];
	} else if (!val && *i + 1 < argc && config_parse_bool(argv[*i + 1], &b) == 0) {
		val = argv[++*i];
	} else if (!val) {
		val = "true";
	}
	if (t->refused)
		return err_set(err, "--%s: refused: %s", name, t->why);
	if (t->only != NULL && !value_is(val, t->only))
		return err_set(err, "--%s %s: refused (only %s is accepted): %s", name, val,
			       *t->only ? t->only : "\"\"", t->why);
	if (t->key == NULL)
		return 0;
	if (t->key[0] == '@')
		return set_loss(c, t, val, err);
	size_t len = strlen(t->key) + strlen(val) + 4;
	if (!(out[*nout] = malloc(len)))
		return err_set(err, "out of memory");
	snprintf(out[(*nout)++], len, "--%s=%s", t->key, val);
	return 0;
}

/* --a.b (a path, of 0.3.0 or not, refused in translate if not) or one of the
 * two dotless paths; other options are titan-train's. */
static int is_path_option(const char *arg)
{
	char name[256];
	if (!option_name(arg, name, sizeof name))
		return 0;
	return strchr(name, '.') != NULL || find_path(name) != NULL;
}

int tt030_list_paths(FILE *out)
{
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		const tt030_path *t = &paths[i];
		const char *what = t->refused ? "refused" : t->only ? "only" : t->key ? "sets" : "accepted";
		if (fprintf(out, "%s\t%s\t%s\t%s\t%s\n", t->path, what,
			    t->key ? (t->key[0] == '@' ? "-" : t->key) : "-",
			    t->only ? (*t->only ? t->only : "\"\"") : "-", t->why ? t->why : "-") < 0)
			return -1;
	}
	return 0;
}

int tt030_config(job_config *c, const char *module, const char *name, int argc, char **argv,
		 int *nrest, char **rest, titan_err *err)
{
	const tt030_preset *p = find_preset(module, name);
	if (p == NULL)
		return err_set(err, "--module %s --config %s: not a torchtitan 0.3.0 preset titan has",
			       module, name);
	char label[160];
	snprintf(label, sizeof label, "preset %s", p->name);
	if (config_load_string(c, "torchtitan 0.3.0's defaults", defaults_030, err) != 0 ||
	    config_load_string(c, label, p->toml, err) != 0)
		return -1;
	c->follows_030 = 1;
	char **out = calloc((size_t)argc + 1, sizeof *out);
	if (out == NULL)
		return err_set(err, "out of memory");
	int nout = 0, nr = 0, rc = 0;
	out[nout++] = argv[0];
	rest[nr++] = argv[0];
	for (int i = 1; rc == 0 && i < argc; i++) {
		if (!strcmp(argv[i], "--module") || !strcmp(argv[i], "--config"))
			i++;
		else if (is_path_option(argv[i]))
			rc = translate(c, p, argc, argv, &i, out, &nout, err);
		else /* titan-train's own options (--list-keys, --threads N, ...) */
			rest[nr++] = argv[i];
	}
	int ignored;
	char **none = calloc((size_t)nout + 1, sizeof *none); /* out has options only */
	if (rc == 0 && none == NULL)
		rc = err_set(err, "out of memory");
	if (rc == 0)
		rc = config_from_args(c, nout, out, &ignored, none, err);
	free(none);
	if (rc == 0 && c->loss030.num_chunks > 0 && c->training.seq_len % c->loss030.num_chunks)
		rc = err_set(err, "--loss.num_chunks %lld: must divide training.seq_len (%lld), as "
			     "0.3.0's ChunkedLossWrapper checks", (long long)c->loss030.num_chunks,
			     (long long)c->training.seq_len);
	for (int i = 1; i < nout; i++)
		free(out[i]);
	free(out);
	*nrest = nr;
	return rc;
}
