/* config.h: titan-train's job configuration, with torchtitan's (v0.2.2) TOML
 * sections, key names and defaults, read from a TOML file and `--section.key
 * value` overrides.
 *
 * The schema is one table (config.c): every key, its type, its default, the
 * values it may take, and its torchtitan equivalent.  config_print() and the
 * man page titan-config(5) list the same keys; the tests check that they agree.
 *
 * Errors name the place: "FILE:LINE: section.key: reason (did you mean X?)" for a
 * file, "--section.key: reason" for an override. */
#ifndef TITAN_CONFIG_H
#define TITAN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

/* A list of strings (model.converters, checkpoint.exclude_from_loading, ...). */
typedef struct cfg_strlist {
	char **v; /* owned, each owned */
	int n;
} cfg_strlist;
/* Whether l holds s (whole strings). */
int cfg_strlist_has(const cfg_strlist *l, const char *s);

/* A list of lists of strings, or None (parallelism.module_fqns_per_model_part). */
typedef struct cfg_strlists {
	cfg_strlist *v; /* owned */
	int n;
	int set;        /* 0: None */
} cfg_strlists;

/* torch DataLoader settings ([training.dataloader], [validation.dataloader]). */
typedef struct cfg_dataloader {
	int64_t num_workers;
	int persistent_workers;
	int pin_memory;
	int64_t prefetch_factor;
	int prefetch_factor_set;
} cfg_dataloader;

/* One of optimizer.param_groups: torchtitan 0.3.0's ParamGroupConfig, a
 * regular expression over the parameters' names (the first group whose
 * pattern re.search-matches a name holds it), the optimizer ("AdamW",
 * "Adam" or "DistMuon") and its keyword arguments as given (the rest take
 * torch's defaults, or DistMuon's: config_param_group_values).  In TOML:
 *   [[optimizer.param_groups]]
 *   pattern = "(?:tok_embeddings|output)\\."
 *   optimizer_name = "AdamW"
 *   optimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], eps = 1e-8, weight_decay = 0.0}
 */
enum {
	CFG_PG_LR = 1 << 0,
	CFG_PG_BETAS = 1 << 1,
	CFG_PG_EPS = 1 << 2,
	CFG_PG_WEIGHT_DECAY = 1 << 3,
	CFG_PG_MOMENTUM = 1 << 4,
	CFG_PG_NESTEROV = 1 << 5,
	CFG_PG_NS_COEFFICIENTS = 1 << 6,
	CFG_PG_NS_STEPS = 1 << 7,
	CFG_PG_ADJUST_LR_FN = 1 << 8,
};
typedef struct cfg_param_group_values {
	double lr, beta1, beta2, eps, weight_decay;
	double momentum;            /* DistMuon's */
	int nesterov;
	double ns_coefficients[3];
	int64_t ns_steps;
	const char *adjust_lr_fn;   /* NULL (None), "original", "match_rms_adamw" or
				       "spectral_unclamped" */
} cfg_param_group_values;
typedef struct cfg_param_group {
	char *pattern;
	char *optimizer_name;
	unsigned given;             /* CFG_PG_* of the kwargs given */
	cfg_param_group_values v;   /* the given ones (adjust_lr_fn owned) */
	int line;                   /* where the group began (messages), 0: unknown */
} cfg_param_group;
/* The group's values: those given, the others its optimizer's defaults
 * (torch's AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2;
 * Adam's the same but weight_decay 0; DistMuon's: lr 1e-3, weight_decay
 * 0.1, momentum 0.95, nesterov, ns_coefficients (3.4445, -4.7750, 2.0315),
 * eps 1e-7, ns_steps 5, adjust_lr_fn None). */
void config_param_group_values(const cfg_param_group *g, cfg_param_group_values *out);

/* Every string member is owned by the job_config (config_free frees it).  An
 * optional value torchtitan spells `None` is a NULL string, a NaN double, or
 * an integer with its *_set flag 0. */
typedef struct job_config {
	/* The torchtitan release the run follows: 0 for 0.2.2 (a TOML config and
	 * the keys below), 1 for 0.3.0 (--module/--config naming one of its
	 * presets, and its CLI paths: lib/config/tt030.h), which packs documents,
	 * masks attention to them and names its checkpoint's tensors its way. */
	int follows_030;
	const char *preset030; /* the 0.3.0 preset's name (tt030.c's, not owned), or NULL */
	int qkv_apart030;      /* the preset's model keeps q, k, v apart (0.3.0's fuse_qkv
				  False), so does its checkpoint's optimizer state */
	struct {
		int64_t num_chunks;        /* 0.3.0's loss.num_chunks (0: its 8) */
		int64_t global_vocab_size; /* 0.3.0's loss.loss_fn.global_vocab_size (0: the
					      model's; another value is refused) */
		int chunked;               /* the preset's loss is ChunkedLossWrapper */
	} loss030;
	struct {
		int rank;     /* the preset's LoRAConverter (0: none): rank and alpha */
		double alpha;
	} lora030;
	struct {
		char *config_file; /* the TOML file read, or NULL */
		char *dump_folder;
		char *description;
		int print_config;
		char *save_config_file; /* NULL: None */
		char *custom_config_module;
	} job;
	struct {
		int enable_profiling;
		char *save_traces_folder;
		int64_t profile_freq;
		int64_t profiler_active;
		int64_t profiler_warmup;
		int enable_memory_snapshot;
		char *save_memory_snapshot_folder;
	} profiling;
	struct {
		int64_t log_freq;
		int enable_tensorboard;
		char *save_tb_folder;
		int save_for_all_ranks;
		int disable_color_printing;
		int enable_wandb;
	} metrics;
	struct {
		char *name;
		char *flavor;
		char *hf_assets_path;
		char *tokenizer_path; /* NULL: None; deprecated spelling of hf_assets_path */
		cfg_strlist converters;
		int print_after_conversion;
		int64_t num_mtp_layers; /* 0.3.0's DeepSeek V3 multi-token prediction */
		double mtp_scale;       /* MTPLoss.mtp_scale */
	} model;
	struct {
		char *name;
		double lr, beta1, beta2, eps, weight_decay;
		int no_decay_norms_embeddings;
		char *implementation;
		int early_step_in_backward;
		/* optimizer.param_groups, in order (none: one group of every
		 * parameter, name/lr/betas/eps/weight_decay above) */
		cfg_param_group *param_groups;
		int n_param_groups;
	} optimizer;
	struct {
		int64_t warmup_steps;
		int64_t total_steps; /* the schedule's length when total_steps_set, else training.steps */
		int total_steps_set;
		double decay_ratio; /* NaN: None (decay right after warmup) */
		char *decay_type;
		double min_lr_factor;
	} lr_scheduler;
	struct {
		char *dataset;
		char *dataset_path; /* NULL: None */
		int sft;            /* titan's: 0.3.0's ChatDataLoader packing of chat shards */
		int64_t local_batch_size;
		int64_t global_batch_size;
		int64_t seq_len;
		double max_norm;
		int64_t steps;
		int enable_cpu_offload;
		char *dtype;
		char *mixed_precision_param;
		char *mixed_precision_reduce;
		char *mixed_precision_mode; /* titan's: "auto" | "fully_shard" */
		int64_t gc_freq;
		int gc_debug;
		cfg_dataloader dataloader;
	} training;
	struct {
		int64_t data_parallel_replicate_degree;
		int64_t data_parallel_shard_degree;
		char *fsdp_reshard_after_forward;
		int64_t tensor_parallel_degree;
		int disable_loss_parallel;
		int enable_async_tensor_parallel;
		int64_t pipeline_parallel_degree;
		cfg_strlists module_fqns_per_model_part;
		cfg_strlist pipeline_parallel_split_points; /* titan's extension (torchtitan <= 0.1) */
		int64_t pipeline_parallel_layers_per_stage;
		int pipeline_parallel_layers_per_stage_set;
		int64_t pipeline_parallel_first_stage_less_layers;
		int64_t pipeline_parallel_last_stage_less_layers;
		char *pipeline_parallel_schedule;
		char *pipeline_parallel_schedule_csv; /* NULL: None */
		int64_t pipeline_parallel_microbatch_size;
		int pipeline_parallel_expert_parallel_overlap;
		int64_t context_parallel_degree;
		char *context_parallel_load_balancer; /* NULL: None */
		char *context_parallel_rotate_method;
		int64_t expert_parallel_degree;
		int64_t expert_tensor_parallel_degree;
		char *expert_parallel_comm_backend;
	} parallelism;
	struct {
		int enable;
		int enable_ft_dataloader_checkpoints;
		char *folder;
		int64_t interval;
		char *initial_load_path; /* NULL: None */
		int initial_load_model_only;
		int initial_load_in_hf;
		int initial_load_in_hf_quantized;
		int last_save_model_only;
		int last_save_in_hf;
		char *export_dtype;
		char *async_mode;
		int64_t keep_latest_k;
		int64_t load_step;
		cfg_strlist exclude_from_loading;
		int enable_first_step_checkpoint;
		int create_seed_checkpoint;
		int load_only;
	} checkpoint;
	struct {
		char *mode;
		char *selective_ac_option;
		cfg_strlist per_op_sac_force_recompute_mm_shapes_by_fqns;
		int early_stop;
		double memory_budget;
		int visualize_memory_budget_pareto;
		int preserve_rng_state;
		char *determinism_check;
		int debug;
	} activation_checkpoint;
	struct {
		int enable;
		cfg_strlist components;
		char *backend;
	} compile;
	struct {
		int enable_fsdp_float8_all_gather;
		int precompute_float8_dynamic_scale_for_fsdp;
		char *recipe_name; /* NULL: None */
		cfg_strlist filter_fqns;
		int emulate;
	} float8; /* [quantize.linear.float8] */
	struct {
		char *mxfp8_dim1_cast_kernel_choice;
		char *recipe_name;
		cfg_strlist filter_fqns;
	} mx; /* [quantize.linear.mx] */
	struct {
		struct {
			cfg_strlist fqns;
		} float8; /* [quantize.grouped_mm.float8] */
		struct {
			char *recipe_name;
			cfg_strlist fqns;
		} mx; /* [quantize.grouped_mm.mx] */
	} grouped_mm;
	struct {
		int64_t init_timeout_seconds;
		int64_t train_timeout_seconds;
		int64_t trace_buf_size;
		char *save_traces_folder;
		char *save_traces_file_prefix;
		char *mode;
	} comm;
	struct {
		int enable;
		int disable_fake_mode;
	} memory_estimation;
	struct {
		int enable;
		char *process_group;
		int64_t process_group_timeout_ms;
		int64_t replica_id;
		int64_t group_size;
		int64_t min_replica_size;
		char *semi_sync_method; /* NULL: None */
	} fault_tolerance;
	struct {
		char *custom_import;
		char *custom_args_module;
	} experimental;
	struct {
		int enable;
		char *dataset;
		char *dataset_path; /* NULL: None */
		int64_t local_batch_size;
		int64_t seq_len;
		int64_t freq;
		int64_t steps;
		cfg_dataloader dataloader;
	} validation;
	/* Flux (model.name = "flux"): its encoders, inputs and sampling, as
	 * torchtitan 0.3.0's FluxTrainer.Config has them (encoder, tokenizer,
	 * the loader's image size and prompt dropout, validator.sampling,
	 * inference); titan's own keys, which 0.3.0's paths set. */
	struct {
		char *t5_encoder, *clip_encoder; /* folders: config.json and safetensors */
		char *autoencoder_path;          /* the FLUX ae.safetensors */
		char *autoencoder_config;        /* JSON of AutoEncoder.Config; "": FLUX.1's */
		char *t5_tokenizer, *clip_tokenizer;
		int64_t max_t5_encoding_len;
		int test_tokenizer;              /* 0.3.0's tokenizer.test_mode */
		int64_t img_size;
		double prompt_dropout_prob;
		int64_t val_img_size;
		int val_cfg;                     /* validator.sampling */
		double val_cfg_scale;
		int64_t val_denoising_steps;
		int64_t val_save_img_count;
		char *val_save_img_folder;
		char *inference_prompts, *inference_folder;
		int64_t inference_batch, inference_img_size;
		int inference_cfg;
		double inference_cfg_scale;
		int64_t inference_denoising_steps;
	} flux;
	struct {
		int64_t seed;
		int seed_set;
		int deterministic;
		int deterministic_warn_only;
		int moe_force_load_balance;
	} debug;
} job_config;

/* Types of keys, as the schema and titan-config(5) name them. */
typedef enum cfg_type {
	CFG_BOOL,
	CFG_INT,
	CFG_OPT_INT,   /* int or None */
	CFG_FLOAT,
	CFG_OPT_FLOAT, /* float or None */
	CFG_STR,
	CFG_OPT_STR,   /* str or None */
	CFG_LIST,      /* list of str (or one comma-separated string) */
	CFG_OPT_LISTS, /* list of lists of str, or None */
} cfg_type;

/* What titan-train does with a key.  Every torchtitan 0.2.2 key is accepted;
 * one titan-train cannot act on is either harmless to leave alone (it shapes
 * only speed or debugging output of a piece titan does differently) or needs a
 * feature titan lacks, and then any value but the default is refused. */
typedef enum cfg_support {
	CFG_HONOURED = 0, /* or checked by config_check_supported() in code */
	CFG_NO_EFFECT,    /* accepted; a value other than the default is warned about */
	CFG_NOT_BUILT,    /* a value other than the default is refused */
} cfg_support;

/* One key of the schema, for listings (config_print, the man page test). */
typedef struct cfg_key_info {
	const char *name;        /* "checkpoint.keep_latest_k" */
	cfg_type type;
	const char *def;         /* default as TOML would write it ("10", "\"tb\"", "none") */
	const char *choices;     /* "a|b|c" when the value is one of a set, else NULL */
	const char *torchtitan;  /* torchtitan's spelling (JobConfig attribute path);
	                            NULL for titan's own extensions */
	const char *help;        /* one line */
	cfg_support support;
	const char *why;         /* CFG_NO_EFFECT, CFG_NOT_BUILT: the reason, one line */
} cfg_key_info;

/* Fill c with the defaults.  Returns 0, or -1 on out of memory. */
int config_defaults(job_config *c, titan_err *err);
void config_free(job_config *c);

/* Read a TOML file over the current values.  Unknown sections and keys, wrong
 * types and values outside a key's set are refused. */
int config_load_file(job_config *c, const char *path, titan_err *err);
/* Parse TOML text (name is used in messages). */
int config_load_string(job_config *c, const char *name, const char *text, titan_err *err);
/* optimizer.param_groups from the TOML file path (its [[optimizer.param_groups]]
 * tables, nothing else) in place of c's: a 0.3.0 run's --optimizer.param_groups. */
int config_load_param_groups(job_config *c, const char *path, titan_err *err);

/* Apply one override: key without the leading "--" ("training.steps"); value may
 * be NULL for a bare boolean flag.  Returns 0, or -1 with "--key: reason". */
int config_set(job_config *c, const char *key, const char *value, titan_err *err);
/* Whether key names a boolean (so a bare flag needs no value). */
int config_key_is_bool(const char *key);
/* A boolean as the command line and TOML strings spell it (true, True, 1, yes;
 * false, False, 0, no) into *b; -1 for anything else. */
int config_parse_bool(const char *s, int *b);
/* Whether key names a known key. */
int config_key_exists(const char *key);

/* Cross-key checks after loading (ranges, keep_latest_k != 1, ...). */
int config_validate(const job_config *c, titan_err *err);
/* Refuse features that titan-train does not have yet (parallel degrees > 1,
 * Float8, compile, CPU offload, and every key the schema marks CFG_NOT_BUILT
 * set to other than its default), each with a message that says so; warn on
 * stderr about CFG_NO_EFFECT keys set to other than their default. */
int config_check_supported(const job_config *c, int world_size, titan_err *err);

/* Print every key with its value as TOML, section by section. */
void config_print(const job_config *c, FILE *out);
/* s as a TOML basic string, quoted (" and \\ escaped, control characters as
 * \\uXXXX), which is also JSON's spelling of it. */
void config_print_string(const char *s, FILE *out);

/* Key key's value as config_print writes it ("none" for None, strings quoted
 * and escaped, lists as ["a", "b"]), malloc'd, and its type into *type; NULL
 * for an unknown key or out of memory. */
char *config_value_text(const job_config *c, const char *key, cfg_type *type);

/* Agreement across the ranks of a job (titan-train compares these before the
 * mesh: a rank started with another degree, flavor, lr or seed would crash
 * in a collective or train its shard differently).
 *
 * config_agreement_text: every key the ranks must give the same value, one
 * "key = value\n" line each in schema order, the value as config_print
 * writes it (strings escaped: one line each).  Left out are the keys that
 * change only this process's own output or name the file it read:
 * job.config_file (the values read are compared), job.description,
 * job.print_config (exits before any rank starts) and
 * metrics.disable_color_printing (a terminal's choice).  Paths are compared:
 * the ranks of a job share one dump folder and one data set.  Malloc'd (the
 * caller frees), *n its length; NULL when out of memory.
 *
 * config_agreement_diff: the first line on which rank_a's text a (na bytes)
 * and rank_b's text b differ, as one line of at most n - 1 bytes in msg:
 * "config differs across ranks: KEY is VA on rank A and VB on rank B".
 * Any bytes are accepted (they come from another process): non-ASCII bytes
 * are written \xNN and long keys and values cut with "...".  Returns 1 when
 * the texts differ (msg set), 0 when they are the same line for line. */
char *config_agreement_text(const job_config *c, size_t *n);
int config_agreement_diff(const char *a, size_t na, int rank_a, const char *b, size_t nb,
			  int rank_b, char *msg, size_t n);

/* The schema: n keys. */
const cfg_key_info *config_keys(int *n);
const char *config_type_name(cfg_type t);
/* "honoured", "no effect", "not built". */
const char *config_support_name(cfg_support s);
/* The schema as tab-separated lines: key, type, default, values ("-": any),
 * torchtitan's key ("-": titan's own), support, why ("-"), description.
 * Returns -1 when out has an error. */
int config_list_keys(FILE *out);

/* The known name nearest to name by edit distance (NULL when nothing is
 * close); used for "did you mean" hints. */
const char *config_suggest(const char *name);

/* Parse the command line of titan-train: --config FILE and --section.key
 * [value] in any order (the file is read first, overrides then apply in order).
 * Other options are returned in *rest (argv order kept; rest[0] = argv[0]),
 * for the caller's own parsing.  Returns 0, or -1 on a bad key or value. */
int config_from_args(job_config *c, int argc, char **argv, int *nrest, char **rest,
		     titan_err *err);

#endif
