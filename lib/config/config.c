#include "config/config.h"
#include "config/toml.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The schema.  Defaults and sets of values are torchtitan v0.2.2's
 * (torchtitan/config/job_config.py); `torchtitan` is the JobConfig path of
 * the same setting. */
typedef struct cfg_key {
	cfg_key_info info;
	size_t off;     /* offset of the value in job_config */
	size_t set_off; /* CFG_OPT_INT: offset of its *_set flag */
} cfg_key;

#define OFF(m) offsetof(job_config, m)
#define K(name, type, member, def, choices, tt, help) \
	{{name, type, def, choices, tt, help}, OFF(member), 0}
#define KOPT(name, member, setm, def, tt, help) \
	{{name, CFG_OPT_INT, def, NULL, tt, help}, OFF(member), OFF(setm)}

static const cfg_key keys[] = {
	K("job.config_file", CFG_OPT_STR, job.config_file, "none", NULL, "job.config_file",
	  "the TOML file read (set by --config)"),
	K("job.dump_folder", CFG_STR, job.dump_folder, "\"./outputs\"", NULL, "job.dump_folder",
	  "folder for checkpoints, TensorBoard events and metrics"),
	K("job.description", CFG_STR, job.description, "\"default job\"", NULL, "job.description",
	  "free text printed at the start"),
	K("job.print_config", CFG_BOOL, job.print_config, "false", NULL, "job.print_config",
	  "print the resolved configuration and exit"),

	K("profiling.enable_profiling", CFG_BOOL, profiling.enable_profiling, "false", NULL,
	  "profiling.enable_profiling", "collect profiler traces (no profiler yet: warned)"),
	K("profiling.save_traces_folder", CFG_STR, profiling.save_traces_folder,
	  "\"profile_traces\"", NULL, "profiling.save_traces_folder", "trace folder"),
	K("profiling.profile_freq", CFG_INT, profiling.profile_freq, "10", NULL,
	  "profiling.profile_freq", "steps between traces"),
	K("profiling.enable_memory_snapshot", CFG_BOOL, profiling.enable_memory_snapshot, "false",
	  NULL, "profiling.enable_memory_snapshot", "dump memory snapshots (warned)"),
	K("profiling.save_memory_snapshot_folder", CFG_STR, profiling.save_memory_snapshot_folder,
	  "\"memory_snapshot\"", NULL, "profiling.save_memory_snapshot_folder",
	  "memory snapshot folder"),

	K("metrics.log_freq", CFG_INT, metrics.log_freq, "10", NULL, "metrics.log_freq",
	  "steps between log lines and TensorBoard points (and step 1)"),
	K("metrics.enable_tensorboard", CFG_BOOL, metrics.enable_tensorboard, "false", NULL,
	  "metrics.enable_tensorboard", "write TensorBoard event files"),
	K("metrics.save_tb_folder", CFG_STR, metrics.save_tb_folder, "\"tb\"", NULL,
	  "metrics.save_tb_folder", "TensorBoard folder under dump_folder"),
	K("metrics.save_for_all_ranks", CFG_BOOL, metrics.save_for_all_ranks, "false", NULL,
	  "metrics.save_for_all_ranks", "every rank writes its own events"),
	K("metrics.disable_color_printing", CFG_BOOL, metrics.disable_color_printing, "false",
	  NULL, "metrics.disable_color_printing", "no ANSI colours even on a terminal"),
	K("metrics.enable_wandb", CFG_BOOL, metrics.enable_wandb, "false", NULL,
	  "metrics.enable_wandb", "Weights & Biases (not available: refused)"),

	K("model.name", CFG_STR, model.name, "\"llama3\"", "llama3", "model.name", "model family"),
	K("model.flavor", CFG_STR, model.flavor, "\"debugmodel\"",
	  "debugmodel|1B|3B|8B|70B|405B", "model.flavor", "model size (see --list-flavors)"),
	K("model.hf_assets_path", CFG_STR, model.hf_assets_path, "\"./tests/assets/tokenizer\"",
	  NULL, "model.hf_assets_path", "tokenizer folder (informational: data comes tokenized)"),
	K("model.converters", CFG_LIST, model.converters, "[]", NULL, "model.converters",
	  "model converters, e.g. quantize.linear.float8 (refused for now)"),
	K("model.print_after_conversion", CFG_BOOL, model.print_after_conversion, "false", NULL,
	  "model.print_after_conversion", "print the model after converters"),

	K("optimizer.name", CFG_STR, optimizer.name, "\"AdamW\"", "AdamW|Adam", "optimizer.name",
	  "optimizer"),
	K("optimizer.lr", CFG_FLOAT, optimizer.lr, "8e-4", NULL, "optimizer.lr", "peak learning rate"),
	K("optimizer.beta1", CFG_FLOAT, optimizer.beta1, "0.9", NULL, "optimizer.beta1",
	  "first moment decay"),
	K("optimizer.beta2", CFG_FLOAT, optimizer.beta2, "0.95", NULL, "optimizer.beta2",
	  "second moment decay"),
	K("optimizer.eps", CFG_FLOAT, optimizer.eps, "1e-8", NULL, "optimizer.eps",
	  "denominator epsilon"),
	K("optimizer.weight_decay", CFG_FLOAT, optimizer.weight_decay, "0.1", NULL,
	  "optimizer.weight_decay", "decoupled weight decay, on every parameter"),
	K("optimizer.no_decay_norms_embeddings", CFG_BOOL, optimizer.no_decay_norms_embeddings,
	  "false", NULL, "(titan only)", "exempt RMSNorm weights and embeddings from weight decay"),
	K("optimizer.implementation", CFG_STR, optimizer.implementation, "\"fused\"",
	  "for-loop|foreach|fused", "optimizer.implementation",
	  "update kernel (all give the same numbers on the CPU)"),
	K("optimizer.early_step_in_backward", CFG_BOOL, optimizer.early_step_in_backward, "false",
	  NULL, "optimizer.early_step_in_backward", "step in backward (refused)"),

	K("lr_scheduler.warmup_steps", CFG_INT, lr_scheduler.warmup_steps, "200", NULL,
	  "lr_scheduler.warmup_steps", "linear warmup steps"),
	K("lr_scheduler.decay_ratio", CFG_OPT_FLOAT, lr_scheduler.decay_ratio, "none", NULL,
	  "lr_scheduler.decay_ratio", "fraction of steps spent decaying (none: all after warmup)"),
	K("lr_scheduler.decay_type", CFG_STR, lr_scheduler.decay_type, "\"linear\"",
	  "linear|sqrt|cosine", "lr_scheduler.decay_type", "decay curve"),
	K("lr_scheduler.min_lr_factor", CFG_FLOAT, lr_scheduler.min_lr_factor, "0.0", NULL,
	  "lr_scheduler.min_lr_factor", "floor of the lr as a fraction of optimizer.lr"),

	K("training.dataset", CFG_STR, training.dataset, "\"c4_test\"", NULL, "training.dataset",
	  "shard folder name under dump_folder (when dataset_path is none)"),
	K("training.dataset_path", CFG_OPT_STR, training.dataset_path, "none", NULL,
	  "training.dataset_path", "titan-shard folder to train on"),
	K("training.local_batch_size", CFG_INT, training.local_batch_size, "8", NULL,
	  "training.local_batch_size", "sequences per rank per micro-batch"),
	K("training.global_batch_size", CFG_INT, training.global_batch_size, "-1", NULL,
	  "training.global_batch_size", "sequences per step (-1: local x dp); the rest is accumulation"),
	K("training.seq_len", CFG_INT, training.seq_len, "2048", NULL, "training.seq_len",
	  "tokens per sequence"),
	K("training.max_norm", CFG_FLOAT, training.max_norm, "1.0", NULL, "training.max_norm",
	  "gradient clipping norm"),
	K("training.steps", CFG_INT, training.steps, "10000", NULL, "training.steps",
	  "optimizer steps to run"),
	K("training.enable_cpu_offload", CFG_BOOL, training.enable_cpu_offload, "false", NULL,
	  "training.enable_cpu_offload", "FSDP CPU offload (refused)"),
	K("training.dtype", CFG_STR, training.dtype, "\"float32\"", "float32|bfloat16",
	  "training.dtype", "parameter dtype"),
	K("training.mixed_precision_param", CFG_STR, training.mixed_precision_param,
	  "\"bfloat16\"", "bfloat16|float32", "training.mixed_precision_param",
	  "FSDP compute dtype (takes effect with sharding only)"),
	K("training.mixed_precision_reduce", CFG_STR, training.mixed_precision_reduce,
	  "\"float32\"", "float32", "training.mixed_precision_reduce", "gradient reduce dtype"),
	K("training.gc_freq", CFG_INT, training.gc_freq, "50", NULL, "training.gc_freq",
	  "Python GC interval (no effect in C)"),
	K("training.gc_debug", CFG_BOOL, training.gc_debug, "false", NULL, "training.gc_debug",
	  "Python GC debugging (no effect in C)"),

	K("parallelism.data_parallel_replicate_degree", CFG_INT,
	  parallelism.data_parallel_replicate_degree, "1", NULL,
	  "parallelism.data_parallel_replicate_degree", "DDP/HSDP replicas"),
	K("parallelism.data_parallel_shard_degree", CFG_INT, parallelism.data_parallel_shard_degree,
	  "-1", NULL, "parallelism.data_parallel_shard_degree", "FSDP degree (-1: the ranks left)"),
	K("parallelism.fsdp_reshard_after_forward", CFG_STR, parallelism.fsdp_reshard_after_forward,
	  "\"default\"", "default|always|never", "parallelism.fsdp_reshard_after_forward",
	  "FSDP resharding policy"),
	K("parallelism.tensor_parallel_degree", CFG_INT, parallelism.tensor_parallel_degree, "1",
	  NULL, "parallelism.tensor_parallel_degree", "tensor parallel degree"),
	K("parallelism.disable_loss_parallel", CFG_BOOL, parallelism.disable_loss_parallel, "false",
	  NULL, "parallelism.disable_loss_parallel", "no loss parallel under TP"),
	K("parallelism.enable_async_tensor_parallel", CFG_BOOL,
	  parallelism.enable_async_tensor_parallel, "false", NULL,
	  "parallelism.enable_async_tensor_parallel", "async TP"),
	K("parallelism.pipeline_parallel_degree", CFG_INT, parallelism.pipeline_parallel_degree,
	  "1", NULL, "parallelism.pipeline_parallel_degree", "pipeline stages"),
	K("parallelism.pipeline_parallel_split_points", CFG_LIST,
	  parallelism.pipeline_parallel_split_points, "[]", NULL,
	  "parallelism.pipeline_parallel_split_points", "module names that start a stage"),
	KOPT("parallelism.pipeline_parallel_layers_per_stage",
	     parallelism.pipeline_parallel_layers_per_stage,
	     parallelism.pipeline_parallel_layers_per_stage_set, "none",
	     "parallelism.pipeline_parallel_layers_per_stage", "layers per (virtual) stage"),
	K("parallelism.pipeline_parallel_first_stage_less_layers", CFG_INT,
	  parallelism.pipeline_parallel_first_stage_less_layers, "1", NULL,
	  "parallelism.pipeline_parallel_first_stage_less_layers",
	  "fewer layers on the first stage"),
	K("parallelism.pipeline_parallel_last_stage_less_layers", CFG_INT,
	  parallelism.pipeline_parallel_last_stage_less_layers, "1", NULL,
	  "parallelism.pipeline_parallel_last_stage_less_layers",
	  "fewer layers on the last stage"),
	K("parallelism.pipeline_parallel_schedule", CFG_STR, parallelism.pipeline_parallel_schedule,
	  "\"1F1B\"", "GPipe|1F1B|Interleaved1F1B|LoopedBFS|InterleavedZeroBubble|ZBVZeroBubble|DualPipeV",
	  "parallelism.pipeline_parallel_schedule", "pipeline schedule"),
	K("parallelism.pipeline_parallel_schedule_csv", CFG_STR,
	  parallelism.pipeline_parallel_schedule_csv, "\"\"", NULL,
	  "parallelism.pipeline_parallel_schedule_csv", "schedule from a CSV file"),
	K("parallelism.pipeline_parallel_microbatch_size", CFG_INT,
	  parallelism.pipeline_parallel_microbatch_size, "1", NULL,
	  "parallelism.pipeline_parallel_microbatch_size", "pipeline micro-batch size"),
	K("parallelism.context_parallel_degree", CFG_INT, parallelism.context_parallel_degree, "1",
	  NULL, "parallelism.context_parallel_degree", "context parallel degree"),
	K("parallelism.context_parallel_load_balancer", CFG_STR,
	  parallelism.context_parallel_load_balancer, "\"headtail\"", "headtail|ptrr|none",
	  "parallelism.context_parallel_load_balancer", "CP load balancing"),
	K("parallelism.context_parallel_rotate_method", CFG_STR,
	  parallelism.context_parallel_rotate_method, "\"allgather\"", "allgather|alltoall",
	  "parallelism.context_parallel_rotate_method", "CP key/value exchange"),
	K("parallelism.expert_parallel_degree", CFG_INT, parallelism.expert_parallel_degree, "1",
	  NULL, "parallelism.expert_parallel_degree", "expert parallel degree"),

	K("checkpoint.enable", CFG_BOOL, checkpoint.enable, "false", NULL, "checkpoint.enable",
	  "save checkpoints and resume from the latest"),
	K("checkpoint.folder", CFG_STR, checkpoint.folder, "\"checkpoint\"", NULL,
	  "checkpoint.folder", "checkpoint folder under dump_folder"),
	K("checkpoint.interval", CFG_INT, checkpoint.interval, "500", NULL, "checkpoint.interval",
	  "steps between checkpoints"),
	K("checkpoint.initial_load_path", CFG_OPT_STR, checkpoint.initial_load_path, "none", NULL,
	  "checkpoint.initial_load_path", "checkpoint to start from when the folder is empty"),
	K("checkpoint.initial_load_model_only", CFG_BOOL, checkpoint.initial_load_model_only,
	  "true", NULL, "checkpoint.initial_load_model_only",
	  "load only the model from initial_load_path"),
	K("checkpoint.initial_load_in_hf", CFG_BOOL, checkpoint.initial_load_in_hf, "false", NULL,
	  "checkpoint.initial_load_in_hf", "initial_load_path is HF safetensors (refused)"),
	K("checkpoint.last_save_model_only", CFG_BOOL, checkpoint.last_save_model_only, "true",
	  NULL, "checkpoint.last_save_model_only", "the last save holds the model only"),
	K("checkpoint.last_save_in_hf", CFG_BOOL, checkpoint.last_save_in_hf, "false", NULL,
	  "checkpoint.last_save_in_hf", "last save as HF safetensors (refused)"),
	K("checkpoint.export_dtype", CFG_STR, checkpoint.export_dtype, "\"float32\"",
	  "float16|bfloat16|float32", "checkpoint.export_dtype", "dtype of a model-only last save"),
	K("checkpoint.async_mode", CFG_STR, checkpoint.async_mode, "\"disabled\"",
	  "disabled|async|async_with_pinned_mem", "checkpoint.async_mode",
	  "write checkpoints in the background"),
	K("checkpoint.keep_latest_k", CFG_INT, checkpoint.keep_latest_k, "10", NULL,
	  "checkpoint.keep_latest_k", "checkpoints kept (0: all; 1 refused)"),
	K("checkpoint.load_step", CFG_INT, checkpoint.load_step, "-1", NULL, "checkpoint.load_step",
	  "step to resume from (-1: the latest)"),
	K("checkpoint.exclude_from_loading", CFG_LIST, checkpoint.exclude_from_loading, "[]", NULL,
	  "checkpoint.exclude_from_loading", "state parts not loaded (e.g. optimizer,dataloader)"),
	K("checkpoint.enable_first_step_checkpoint", CFG_BOOL,
	  checkpoint.enable_first_step_checkpoint, "false", NULL,
	  "checkpoint.enable_first_step_checkpoint", "also save after step 1"),
	K("checkpoint.create_seed_checkpoint", CFG_BOOL, checkpoint.create_seed_checkpoint, "false",
	  NULL, "checkpoint.create_seed_checkpoint", "save the initial model as step-0 and exit"),

	K("activation_checkpoint.mode", CFG_STR, activation_checkpoint.mode, "\"selective\"",
	  "selective|full|memory_budget|none", "activation_checkpoint.mode",
	  "recompute activations in backward"),
	K("activation_checkpoint.selective_ac_option", CFG_STR,
	  activation_checkpoint.selective_ac_option, "\"2\"", NULL,
	  "activation_checkpoint.selective_ac_option", "every Nth layer, or \"op\""),

	K("compile.enable", CFG_BOOL, compile.enable, "false", NULL, "compile.enable",
	  "torch.compile equivalent (refused)"),
	K("compile.components", CFG_LIST, compile.components, "[\"model\", \"loss\"]", NULL,
	  "compile.components", "what to compile"),

	K("quantize.linear.float8.enable_fsdp_float8_all_gather", CFG_BOOL,
	  float8.enable_fsdp_float8_all_gather, "false", NULL,
	  "quantize.linear.float8.enable_fsdp_float8_all_gather", "Float8 all-gather (refused)"),
	K("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", CFG_BOOL,
	  float8.precompute_float8_dynamic_scale_for_fsdp, "false", NULL,
	  "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
	  "precomputed Float8 scales (refused)"),
	K("quantize.linear.float8.recipe_name", CFG_OPT_STR, float8.recipe_name, "none",
	  "tensorwise|rowwise|rowwise_with_gw_hp", "quantize.linear.float8.recipe_name",
	  "Float8 recipe"),
	K("quantize.linear.float8.filter_fqns", CFG_LIST, float8.filter_fqns, "[]", NULL,
	  "quantize.linear.float8.filter_fqns", "modules left in high precision"),
	K("quantize.linear.float8.emulate", CFG_BOOL, float8.emulate, "false", NULL,
	  "quantize.linear.float8.emulate", "emulated Float8"),

	K("validation.enable", CFG_BOOL, validation.enable, "false", NULL, "validation.enable",
	  "evaluate on the validation shards"),
	K("validation.dataset", CFG_STR, validation.dataset, "\"c4_validation\"", NULL,
	  "validation.dataset", "validation dataset name (informational)"),
	K("validation.dataset_path", CFG_OPT_STR, validation.dataset_path, "none", NULL,
	  "validation.dataset_path", "shard folder whose val shards are used (none: the training one)"),
	K("validation.local_batch_size", CFG_INT, validation.local_batch_size, "8", NULL,
	  "validation.local_batch_size", "validation sequences per batch"),
	K("validation.seq_len", CFG_INT, validation.seq_len, "2048", NULL, "validation.seq_len",
	  "validation sequence length"),
	K("validation.freq", CFG_INT, validation.freq, "10", NULL, "validation.freq",
	  "steps between validations"),
	K("validation.steps", CFG_INT, validation.steps, "-1", NULL, "validation.steps",
	  "validation batches (-1: all the validation data)"),

	KOPT("debug.seed", debug.seed, debug.seed_set, "none", "debug.seed",
	     "seed of the initialisation (none: 0)"),
	K("debug.deterministic", CFG_BOOL, debug.deterministic, "false", NULL,
	  "debug.deterministic", "deterministic kernels (the CPU backend always is)"),
};

#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

const cfg_key_info *config_keys(int *n)
{
	static cfg_key_info infos[NKEYS];
	for (int i = 0; i < NKEYS; i++)
		infos[i] = keys[i].info;
	*n = NKEYS;
	return infos;
}

const char *config_type_name(cfg_type t)
{
	switch (t) {
	case CFG_BOOL: return "bool";
	case CFG_INT: return "int";
	case CFG_OPT_INT: return "int or none";
	case CFG_FLOAT: return "float";
	case CFG_OPT_FLOAT: return "float or none";
	case CFG_STR: return "string";
	case CFG_OPT_STR: return "string or none";
	case CFG_LIST: return "list of strings";
	}
	return "?";
}

static const cfg_key *find_key(const char *name)
{
	for (int i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].info.name, name) == 0)
			return &keys[i];
	return NULL;
}

int config_key_exists(const char *key)
{
	return find_key(key) != NULL;
}

int config_key_is_bool(const char *key)
{
	const cfg_key *k = find_key(key);
	return k != NULL && k->info.type == CFG_BOOL;
}

/* Levenshtein distance, small strings only. */
static int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 127 || lb > 127)
		return 1000;
	int row[128];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Compare with the whole name, and with the key part alone (a right key in the
 * wrong section); a suggestion must be closer than a third of the length. */
const char *config_suggest(const char *name)
{
	const char *best = NULL;
	int bestd = 1 << 30;
	const char *nkey = strrchr(name, '.');
	nkey = nkey ? nkey + 1 : name;
	for (int i = 0; i < NKEYS; i++) {
		const char *full = keys[i].info.name;
		const char *kkey = strrchr(full, '.') + 1;
		int d = edit_distance(name, full);
		int dk = edit_distance(nkey, kkey) + 1;
		if (dk < d)
			d = dk;
		if (d < bestd) {
			bestd = d;
			best = full;
		}
	}
	int len = (int)strlen(nkey);
	return bestd <= (len > 6 ? len / 3 + 1 : 2) ? best : NULL;
}

static void *at(job_config *c, size_t off)
{
	return (char *)c + off;
}

static int set_str(char **dst, const char *s)
{
	char *d = NULL;
	if (s != NULL && (d = strdup(s)) == NULL)
		return -1;
	free(*dst);
	*dst = d;
	return 0;
}

static void list_free(cfg_strlist *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static int list_push(cfg_strlist *l, const char *s, size_t n)
{
	char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
	if (v == NULL)
		return -1;
	l->v = v;
	if ((l->v[l->n] = strndup(s, n)) == NULL)
		return -1;
	l->n++;
	return 0;
}

/* torchtitan accepts a list either as an array or as "a,b,c". */
static int list_from_csv(cfg_strlist *l, const char *s)
{
	list_free(l);
	while (*s != '\0') {
		while (*s == ' ')
			s++;
		size_t n = strcspn(s, ",");
		size_t m = n;
		while (m > 0 && s[m - 1] == ' ')
			m--;
		if (m > 0 && list_push(l, s, m) != 0)
			return -1;
		s += n;
		if (*s == ',')
			s++;
	}
	return 0;
}

static int check_choice(const cfg_key *k, const char *v, titan_err *err)
{
	if (k->info.choices == NULL)
		return 0;
	const char *c = k->info.choices;
	size_t n = strlen(v);
	while (*c != '\0') {
		size_t m = strcspn(c, "|");
		if (m == n && strncmp(c, v, n) == 0)
			return 0;
		c += m + (c[m] == '|');
	}
	return err_set(err, "%s: \"%s\" is not one of %s", k->info.name, v, k->info.choices);
}

static int is_none(const char *s)
{
	return strcmp(s, "none") == 0 || strcmp(s, "None") == 0;
}

static int parse_bool_text(const char *s, int *b)
{
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1") || !strcmp(s, "yes")) {
		*b = 1;
		return 0;
	}
	if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "0") || !strcmp(s, "no")) {
		*b = 0;
		return 0;
	}
	return -1;
}

static int parse_int_text(const char *s, int64_t *v)
{
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (end == s || *end != '\0' || errno != 0)
		return -1;
	*v = x;
	return 0;
}

static int parse_float_text(const char *s, double *v)
{
	char *end;
	errno = 0;
	double x = strtod(s, &end);
	if (end == s || *end != '\0' || errno == ERANGE || isnan(x))
		return -1;
	*v = x;
	return 0;
}

/* Set key k from text (an override or a default).  "none" stands for None. */
static int set_from_text(job_config *c, const cfg_key *k, const char *s, titan_err *err)
{
	void *p = at(c, k->off);
	const char *name = k->info.name;
	switch (k->info.type) {
	case CFG_BOOL:
		if (parse_bool_text(s, p) != 0)
			return err_set(err, "%s: \"%s\" is not a boolean (true or false)", name, s);
		return 0;
	case CFG_OPT_INT:
		if (is_none(s)) {
			*(int *)at(c, k->set_off) = 0;
			*(int64_t *)p = 0;
			return 0;
		}
		if (parse_int_text(s, p) != 0)
			return err_set(err, "%s: \"%s\" is not an integer or none", name, s);
		*(int *)at(c, k->set_off) = 1;
		return 0;
	case CFG_INT:
		if (parse_int_text(s, p) != 0)
			return err_set(err, "%s: \"%s\" is not an integer", name, s);
		return 0;
	case CFG_OPT_FLOAT:
		if (is_none(s)) {
			*(double *)p = NAN;
			return 0;
		}
		/* fall through */
	case CFG_FLOAT:
		if (parse_float_text(s, p) != 0)
			return err_set(err, "%s: \"%s\" is not a number", name, s);
		return 0;
	case CFG_OPT_STR:
		if (is_none(s))
			return set_str(p, NULL) != 0 ? err_set(err, "out of memory") : 0;
		/* fall through */
	case CFG_STR:
		if (check_choice(k, s, err) != 0)
			return -1;
		return set_str(p, s) != 0 ? err_set(err, "out of memory") : 0;
	case CFG_LIST:
		return list_from_csv(p, s) != 0 ? err_set(err, "out of memory") : 0;
	}
	return err_set(err, "%s: bad type", name);
}

/* A default as written in the schema: a TOML literal. */
static int set_default(job_config *c, const cfg_key *k, titan_err *err)
{
	const char *d = k->info.def;
	if (k->info.type == CFG_LIST) {
		cfg_strlist *l = at(c, k->off);
		list_free(l);
		/* ["a", "b"] -> a,b */
		char buf[256];
		size_t n = 0;
		for (const char *s = d; *s && n + 1 < sizeof buf; s++)
			if (*s != '[' && *s != ']' && *s != '"' && *s != ' ')
				buf[n++] = *s;
		buf[n] = '\0';
		return list_from_csv(l, buf) != 0 ? err_set(err, "out of memory") : 0;
	}
	if (d[0] == '"') {
		char buf[256];
		snprintf(buf, sizeof buf, "%.*s", (int)strlen(d) - 2, d + 1);
		return set_from_text(c, k, buf, err);
	}
	return set_from_text(c, k, d, err);
}

int config_defaults(job_config *c, titan_err *err)
{
	memset(c, 0, sizeof *c);
	for (int i = 0; i < NKEYS; i++)
		if (set_default(c, &keys[i], err) != 0)
			return -1;
	return 0;
}

void config_free(job_config *c)
{
	for (int i = 0; i < NKEYS; i++) {
		void *p = at(c, keys[i].off);
		if (keys[i].info.type == CFG_STR || keys[i].info.type == CFG_OPT_STR) {
			free(*(char **)p);
			*(char **)p = NULL;
		} else if (keys[i].info.type == CFG_LIST) {
			list_free(p);
		}
	}
}

/* Set key k from a TOML value, checking its type. */
static int set_from_toml(job_config *c, const cfg_key *k, const toml_value *v, titan_err *err)
{
	void *p = at(c, k->off);
	const char *name = k->info.name;
	cfg_type t = k->info.type;
	if (t == CFG_BOOL && v->kind == TOML_BOOL) {
		*(int *)p = v->b;
		return 0;
	}
	if ((t == CFG_INT || t == CFG_OPT_INT) && v->kind == TOML_INT) {
		*(int64_t *)p = v->i;
		if (t == CFG_OPT_INT)
			*(int *)at(c, k->set_off) = 1;
		return 0;
	}
	if ((t == CFG_FLOAT || t == CFG_OPT_FLOAT) && (v->kind == TOML_FLOAT || v->kind == TOML_INT)) {
		double f = v->kind == TOML_INT ? (double)v->i : v->f;
		if (isnan(f))
			return err_set(err, "%s: nan is not allowed", name);
		*(double *)p = f;
		return 0;
	}
	if ((t == CFG_STR || t == CFG_OPT_STR) && v->kind == TOML_STR)
		return set_from_text(c, k, v->s, err);
	if (t == CFG_LIST && v->kind == TOML_STR)
		return set_from_text(c, k, v->s, err);
	if (t == CFG_LIST && v->kind == TOML_ARRAY) {
		cfg_strlist *l = p;
		list_free(l);
		for (int i = 0; i < v->n; i++) {
			if (v->items[i].kind != TOML_STR)
				return err_set(err, "%s: expected a list of strings, item %d is %s %s",
					       name, i, toml_kind_name(v->items[i].kind) == NULL ? "" : "a",
					       toml_kind_name(v->items[i].kind));
			if (list_push(l, v->items[i].s, strlen(v->items[i].s)) != 0)
				return err_set(err, "out of memory");
		}
		return 0;
	}
	return err_set(err, "%s: expected %s, found %s %s", name, config_type_name(t),
		       v->kind == TOML_ARRAY || v->kind == TOML_INT ? "an" : "a",
		       toml_kind_name(v->kind));
}

static void add_suggestion(titan_err *err, const char *name)
{
	const char *s = config_suggest(name);
	if (s != NULL && err != NULL) {
		size_t n = strlen(err->msg);
		snprintf(err->msg + n, sizeof err->msg - n, " (did you mean %s?)", s);
	}
}

typedef struct load_ctx {
	job_config *c;
	const char *name;
} load_ctx;

static int on_toml_key(void *vctx, const char *key, const toml_value *v, int line, titan_err *err)
{
	load_ctx *ctx = vctx;
	const cfg_key *k = find_key(key);
	if (k == NULL) {
		err_set(err, "%s:%d: %s: unknown key", ctx->name, line, key);
		add_suggestion(err, key);
		return -1;
	}
	if (set_from_toml(ctx->c, k, v, err) != 0)
		return err_prefix(err, "%s:%d", ctx->name, line);
	return 0;
}

int config_load_string(job_config *c, const char *name, const char *text, titan_err *err)
{
	load_ctx ctx = {c, name};
	return toml_parse(name, text, on_toml_key, &ctx, err);
}

int config_load_file(job_config *c, const char *path, titan_err *err)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return err_errno(err, "%s", path);
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 8192;
			char *b = realloc(buf, cap);
			if (b == NULL) {
				free(buf);
				fclose(f);
				return err_set(err, "%s: out of memory", path);
			}
			buf = b;
		}
		size_t r = fread(buf + n, 1, 4096, f);
		n += r;
		if (r < 4096)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(buf);
		return err_set(err, "%s: read error", path);
	}
	buf[n] = '\0';
	if (strlen(buf) != n) {
		free(buf);
		return err_set(err, "%s: contains a NUL byte (not a TOML file?)", path);
	}
	int rc = config_load_string(c, path, buf, err);
	free(buf);
	if (rc == 0 && set_str(&c->job.config_file, path) != 0)
		return err_set(err, "out of memory");
	return rc;
}

int config_set(job_config *c, const char *key, const char *value, titan_err *err)
{
	const cfg_key *k = find_key(key);
	if (k == NULL) {
		const char *sug = config_suggest(key);
		return err_set(err, "--%s: unknown option%s%s%s", key, sug ? " (did you mean --" : "",
			       sug ? sug : "", sug ? "?)" : "");
	}
	if (value == NULL) {
		if (k->info.type != CFG_BOOL)
			return err_set(err, "--%s: needs a value (%s)", key, config_type_name(k->info.type));
		value = "true";
	}
	if (set_from_text(c, k, value, err) != 0) {
		if (err != NULL) {
			char m[sizeof err->msg];
			snprintf(m, sizeof m, "%s", err->msg);
			snprintf(err->msg, sizeof err->msg, "--%s", m);
		}
		return -1;
	}
	return 0;
}

static int need(int ok, titan_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int need(int ok, titan_err *err, const char *fmt, ...)
{
	if (ok)
		return 0;
	va_list ap;
	va_start(ap, fmt);
	err_setv(err, fmt, ap);
	va_end(ap);
	return -1;
}

int config_validate(const job_config *c, titan_err *err)
{
	const __typeof__(c->training) *t = &c->training;
	if (need(c->metrics.log_freq >= 1, err, "metrics.log_freq: must be >= 1") ||
	    need(t->steps >= 1, err, "training.steps: must be >= 1") ||
	    need(t->local_batch_size >= 1, err, "training.local_batch_size: must be >= 1") ||
	    need(t->global_batch_size == -1 || t->global_batch_size >= 1, err,
		 "training.global_batch_size: must be -1 or >= 1") ||
	    need(t->seq_len >= 2, err, "training.seq_len: must be >= 2") ||
	    need(t->max_norm > 0, err, "training.max_norm: must be > 0") ||
	    need(c->optimizer.lr >= 0, err, "optimizer.lr: must be >= 0") ||
	    need(c->optimizer.beta1 >= 0 && c->optimizer.beta1 < 1, err,
		 "optimizer.beta1: must be in [0, 1)") ||
	    need(c->optimizer.beta2 >= 0 && c->optimizer.beta2 < 1, err,
		 "optimizer.beta2: must be in [0, 1)") ||
	    need(c->optimizer.eps > 0, err, "optimizer.eps: must be > 0") ||
	    need(c->optimizer.weight_decay >= 0, err, "optimizer.weight_decay: must be >= 0") ||
	    need(c->lr_scheduler.warmup_steps >= 0, err, "lr_scheduler.warmup_steps: must be >= 0") ||
	    need(isnan(c->lr_scheduler.decay_ratio) ||
		     (c->lr_scheduler.decay_ratio >= 0 && c->lr_scheduler.decay_ratio <= 1),
		 err, "lr_scheduler.decay_ratio: must be in [0, 1] or none") ||
	    need(c->lr_scheduler.min_lr_factor >= 0 && c->lr_scheduler.min_lr_factor <= 1, err,
		 "lr_scheduler.min_lr_factor: must be in [0, 1]") ||
	    need(c->checkpoint.interval >= 1, err, "checkpoint.interval: must be >= 1") ||
	    need(c->checkpoint.keep_latest_k >= 0 && c->checkpoint.keep_latest_k != 1, err,
		 "checkpoint.keep_latest_k: must be 0 (keep all) or >= 2 (the newest may still be "
		 "being written)") ||
	    need(c->checkpoint.load_step >= -1, err, "checkpoint.load_step: must be >= -1") ||
	    need(c->validation.freq >= 1, err, "validation.freq: must be >= 1") ||
	    need(c->validation.steps == -1 || c->validation.steps >= 1, err,
		 "validation.steps: must be -1 or >= 1") ||
	    need(c->validation.local_batch_size >= 1, err,
		 "validation.local_batch_size: must be >= 1") ||
	    need(c->validation.seq_len >= 2, err, "validation.seq_len: must be >= 2"))
		return -1;
	return 0;
}

static int list_has(const cfg_strlist *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (strstr(l->v[i], s) != NULL)
			return 1;
	return 0;
}

int config_check_supported(const job_config *c, int world_size, titan_err *err)
{
	const __typeof__(c->parallelism) *p = &c->parallelism;
	const char *later = "is not supported by this titan-train yet";
	int64_t dps = p->data_parallel_shard_degree == -1 ? world_size : p->data_parallel_shard_degree;
	if (need(p->tensor_parallel_degree == 1, err,
		 "parallelism.tensor_parallel_degree = %ld: tensor parallelism %s; use 1",
		 (long)p->tensor_parallel_degree, later) ||
	    need(p->pipeline_parallel_degree == 1, err,
		 "parallelism.pipeline_parallel_degree = %ld: pipeline parallelism %s; use 1",
		 (long)p->pipeline_parallel_degree, later) ||
	    need(p->context_parallel_degree == 1, err,
		 "parallelism.context_parallel_degree = %ld: context parallelism %s; use 1",
		 (long)p->context_parallel_degree, later) ||
	    need(p->expert_parallel_degree == 1, err,
		 "parallelism.expert_parallel_degree = %ld: expert parallelism %s; use 1",
		 (long)p->expert_parallel_degree, later) ||
	    need(p->data_parallel_replicate_degree == 1, err,
		 "parallelism.data_parallel_replicate_degree = %ld: replicated data parallelism %s; "
		 "use 1", (long)p->data_parallel_replicate_degree, later) ||
	    need(dps == 1, err,
		 "parallelism.data_parallel_shard_degree = %ld (world size %d): sharded data "
		 "parallelism %s; run one process", (long)dps, world_size, later) ||
	    need(!c->compile.enable, err, "compile.enable: compilation %s; set it false", later) ||
	    need(!list_has(&c->model.converters, "float8") && !list_has(&c->model.converters, "mx"),
		 err, "model.converters: Float8/MX training %s; remove the converter", later) ||
	    need(!c->float8.enable_fsdp_float8_all_gather &&
			 !c->float8.precompute_float8_dynamic_scale_for_fsdp && c->float8.recipe_name == NULL,
		 err, "quantize.linear.float8: Float8 training %s", later) ||
	    need(!c->training.enable_cpu_offload, err, "training.enable_cpu_offload: %s", later) ||
	    need(!c->optimizer.early_step_in_backward, err,
		 "optimizer.early_step_in_backward: %s", later) ||
	    need(!c->metrics.enable_wandb, err,
		 "metrics.enable_wandb: Weights & Biases is not available; use TensorBoard") ||
	    need(!c->checkpoint.initial_load_in_hf, err,
		 "checkpoint.initial_load_in_hf: %s; convert with titan-ckpt-convert first", later) ||
	    need(!c->checkpoint.last_save_in_hf, err,
		 "checkpoint.last_save_in_hf: %s; convert with titan-ckpt-convert afterwards", later) ||
	    need(strcmp(c->training.dtype, "float32") == 0, err,
		 "training.dtype = \"%s\": only float32 parameters are supported yet", c->training.dtype))
		return -1;
	return 0;
}

static void print_value(const job_config *c, const cfg_key *k, FILE *out)
{
	const void *p = (const char *)c + k->off;
	switch (k->info.type) {
	case CFG_BOOL:
		fputs(*(const int *)p ? "true" : "false", out);
		break;
	case CFG_OPT_INT:
		if (!*(const int *)((const char *)c + k->set_off)) {
			fputs("none", out);
			break;
		}
		/* fall through */
	case CFG_INT:
		fprintf(out, "%ld", (long)*(const int64_t *)p);
		break;
	case CFG_OPT_FLOAT:
	case CFG_FLOAT:
		if (isnan(*(const double *)p))
			fputs("none", out);
		else
			fprintf(out, "%.17g", *(const double *)p);
		break;
	case CFG_STR:
	case CFG_OPT_STR: {
		const char *s = *(char *const *)p;
		if (s == NULL) {
			fputs("none", out);
			break;
		}
		fputc('"', out);
		for (; *s; s++) {
			if (*s == '"' || *s == '\\')
				fprintf(out, "\\%c", *s);
			else if ((unsigned char)*s < 0x20)
				fprintf(out, "\\u%04x", (unsigned char)*s);
			else
				fputc(*s, out);
		}
		fputc('"', out);
		break;
	}
	case CFG_LIST: {
		const cfg_strlist *l = p;
		fputc('[', out);
		for (int i = 0; i < l->n; i++)
			fprintf(out, "%s\"%s\"", i ? ", " : "", l->v[i]);
		fputc(']', out);
		break;
	}
	}
}

/* TOML cannot spell None: a none value is printed as a comment. */
void config_print(const job_config *c, FILE *out)
{
	char section[128] = "";
	for (int i = 0; i < NKEYS; i++) {
		const char *name = keys[i].info.name;
		const char *dot = strrchr(name, '.');
		size_t sl = (size_t)(dot - name);
		if (strlen(section) != sl || strncmp(section, name, sl) != 0) {
			snprintf(section, sizeof section, "%.*s", (int)sl, name);
			fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
		}
		char buf[1024];
		FILE *m = fmemopen(buf, sizeof buf, "w");
		if (m == NULL)
			continue;
		print_value(c, &keys[i], m);
		fclose(m);
		buf[sizeof buf - 1] = '\0';
		/* job.config_file names the file read; as a comment the output reads
		 * back to itself. */
		if (strcmp(buf, "none") == 0 || strcmp(name, "job.config_file") == 0)
			fprintf(out, "# %s = %s\n", dot + 1, buf);
		else
			fprintf(out, "%s = %s\n", dot + 1, buf);
	}
}

static int is_flag_name(const char *a)
{
	return a[0] == '-' && a[1] == '-' && strchr(a + 2, '.') != NULL;
}

/* A value follows a boolean flag only when it reads as a boolean. */
static int looks_bool(const char *s)
{
	int b;
	return s != NULL && parse_bool_text(s, &b) == 0;
}

int config_from_args(job_config *c, int argc, char **argv, int *nrest, char **rest,
		     titan_err *err)
{
	const char *file = NULL;
	int nr = 0;
	rest[nr++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--job.config_file") == 0) {
			if (i + 1 >= argc)
				return err_set(err, "%s: needs a file", argv[i]);
			file = argv[++i];
		} else if (strncmp(argv[i], "--config=", 9) == 0) {
			file = argv[i] + 9;
		} else if (!is_flag_name(argv[i])) {
			rest[nr++] = argv[i];
		} else if (strchr(argv[i], '=') == NULL && !config_key_is_bool(argv[i] + 2)) {
			i++; /* a value; applied below */
		} else if (strchr(argv[i], '=') == NULL && looks_bool(i + 1 < argc ? argv[i + 1] : NULL)) {
			i++;
		}
	}
	*nrest = nr;
	if (file != NULL && config_load_file(c, file, err) != 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--job.config_file") == 0) {
			i++;
			continue;
		}
		if (!is_flag_name(argv[i]))
			continue;
		char key[256];
		const char *eq = strchr(argv[i], '=');
		const char *val = NULL;
		if (eq != NULL) {
			snprintf(key, sizeof key, "%.*s", (int)(eq - argv[i] - 2), argv[i] + 2);
			val = eq + 1;
		} else {
			snprintf(key, sizeof key, "%s", argv[i] + 2);
			int b = config_key_is_bool(key);
			if (!b && config_key_exists(key)) {
				if (i + 1 >= argc)
					return err_set(err, "--%s: needs a value", key);
				val = argv[++i];
			} else if (b && looks_bool(i + 1 < argc ? argv[i + 1] : NULL)) {
				val = argv[++i];
			}
		}
		if (config_set(c, key, val, err) != 0)
			return -1;
	}
	return 0;
}
