#include "config/config.h"
#include "config/param_groups.h"
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
	{{name, type, def, choices, tt, help, CFG_HONOURED, NULL}, OFF(member), 0}
#define KOPT(name, member, setm, def, tt, help) \
	{{name, CFG_OPT_INT, def, NULL, tt, help, CFG_HONOURED, NULL}, OFF(member), OFF(setm)}
/* A key titan-train takes but cannot act on: sup says how (cfg_support), why
 * says what is missing. */
#define KS(name, type, member, def, choices, help, sup, why) \
	{{name, type, def, choices, name, help, sup, why}, OFF(member), 0}
#define KOPTS(name, member, setm, def, help, sup, why) \
	{{name, CFG_OPT_INT, def, NULL, name, help, sup, why}, OFF(member), OFF(setm)}

/* Reasons shared by several keys. */
#define NO_WARMUP "titan's profiler records the last profiler_active steps of each window " \
	"from their first op; it needs no warm-up steps"
#define OWN_LOADER "titan's loader reads shards on its own prefetch thread, without worker processes"
#define NO_MOE "titan's expert parallelism has no expert tensor parallelism, DeepEP all-to-all or DualPipeV overlap yet"
#define NO_MX "MX (MXFP8) training is not built"
#define NO_FT "fault tolerance (TorchFT) is not built"
#define NO_BUDGET "the memory_budget mode (torch.compile's min-cut partitioner) is not built"
#define NO_FLIGHT_RECORDER "titan's comm layer has no flight recorder: a timeout names the operation instead"
#define NO_PY "titan-train cannot import Python modules"

/* [training.dataloader] and [validation.dataloader]: torch DataLoader settings. */
#define DATALOADER_KEYS(sec)                                                                      \
	KS(#sec ".dataloader.num_workers", CFG_INT, sec.dataloader.num_workers, "0", NULL,           \
	   "DataLoader worker processes", CFG_NO_EFFECT, OWN_LOADER),                                \
	KS(#sec ".dataloader.persistent_workers", CFG_BOOL, sec.dataloader.persistent_workers,       \
	   "false", NULL, "keep the workers between epochs (needs num_workers > 0)", CFG_NO_EFFECT,  \
	   OWN_LOADER),                                                                              \
	KS(#sec ".dataloader.pin_memory", CFG_BOOL, sec.dataloader.pin_memory, "false", NULL,        \
	   "batches in pinned host memory", CFG_NO_EFFECT, OWN_LOADER),                              \
	KOPTS(#sec ".dataloader.prefetch_factor", sec.dataloader.prefetch_factor,                    \
	      sec.dataloader.prefetch_factor_set, "none",                                            \
	      "batches each worker loads ahead (needs num_workers > 0)", CFG_NO_EFFECT, OWN_LOADER)

static const cfg_key keys[] = {
	K("job.config_file", CFG_OPT_STR, job.config_file, "none", NULL, "job.config_file",
	  "the TOML file read (set by --config)"),
	K("job.dump_folder", CFG_STR, job.dump_folder, "\"./outputs\"", NULL, "job.dump_folder",
	  "folder for checkpoints, TensorBoard events and metrics"),
	K("job.description", CFG_STR, job.description, "\"default job\"", NULL, "job.description",
	  "free text printed at the start"),
	K("job.print_config", CFG_BOOL, job.print_config, "false", NULL, "job.print_config",
	  "print the resolved configuration and exit"),
	KS("job.save_config_file", CFG_OPT_STR, job.save_config_file, "none", NULL,
	   "file under dump_folder to save the resolved configuration in", CFG_NOT_BUILT,
	   "saving the configuration is not built; use --job.print_config > FILE"),
	KS("job.custom_config_module", CFG_STR, job.custom_config_module, "\"\"", NULL,
	   "Python module extending the configuration", CFG_NOT_BUILT, NO_PY),

	K("profiling.enable_profiling", CFG_BOOL, profiling.enable_profiling, "false", NULL,
	  "profiling.enable_profiling", "write Chrome trace-event files of each rank"),
	K("profiling.save_traces_folder", CFG_STR, profiling.save_traces_folder,
	  "\"profile_traces\"", NULL, "profiling.save_traces_folder", "trace folder"),
	K("profiling.profile_freq", CFG_INT, profiling.profile_freq, "10", NULL,
	  "profiling.profile_freq", "steps between traces"),
	K("profiling.profiler_active", CFG_INT, profiling.profiler_active, "1", NULL,
	  "profiling.profiler_active", "steps each profiling cycle records"),
	KS("profiling.profiler_warmup", CFG_INT, profiling.profiler_warmup, "3", NULL,
	   "warmup steps before each recorded one", CFG_NO_EFFECT, NO_WARMUP),
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
	  "metrics.save_tb_folder",
	  "TensorBoard folder under dump_folder (an absolute one as given)"),
	K("metrics.save_for_all_ranks", CFG_BOOL, metrics.save_for_all_ranks, "false", NULL,
	  "metrics.save_for_all_ranks", "every rank writes its own events"),
	K("metrics.disable_color_printing", CFG_BOOL, metrics.disable_color_printing, "false",
	  NULL, "metrics.disable_color_printing", "no ANSI colours even on a terminal"),
	KS("metrics.enable_wandb", CFG_BOOL, metrics.enable_wandb, "false", NULL,
	   "log metrics to Weights & Biases", CFG_NOT_BUILT,
	   "Weights & Biases is not available; use metrics.enable_tensorboard"),

	K("model.name", CFG_STR, model.name, "\"llama3\"", NULL, "model.name",
	  "model family: llama3, or another of --list-flavors"),
	K("model.flavor", CFG_STR, model.flavor, "\"debugmodel\"", NULL, "model.flavor",
	  "model size, a flavor of model.name (see --list-flavors)"),
	K("model.hf_assets_path", CFG_STR, model.hf_assets_path, "\"./tests/assets/tokenizer\"",
	  NULL, "model.hf_assets_path",
	  "HF assets folder: weights for checkpoint.initial_load_in_hf without initial_load_path, "
	  "the shard layout for checkpoint.last_save_in_hf (data comes tokenized)"),
	K("model.tokenizer_path", CFG_OPT_STR, model.tokenizer_path, "none", NULL,
	  "model.tokenizer_path", "deprecated: when set, replaces hf_assets_path (with a warning)"),
	K("model.converters", CFG_LIST, model.converters, "[]", NULL, "model.converters",
	  "model converters: quantize.linear.float8 (Float8 linears), quantize.grouped_mm.float8 "
	  "(Float8 grouped experts)"),
	K("model.print_after_conversion", CFG_BOOL, model.print_after_conversion, "false", NULL,
	  "model.print_after_conversion", "print the model after converters"),
	K("model.num_mtp_layers", CFG_INT, model.num_mtp_layers, "0", NULL, NULL,
	  "DeepSeek V3's multi-token prediction blocks after the last layer (torchtitan 0.3.0's "
	  "model_registry(num_mtp_layers), its preset deepseek_v3_debugmodel_mtp: 1)"),
	K("model.mtp_scale", CFG_FLOAT, model.mtp_scale, "0.3", NULL, NULL,
	  "the weight of the MTP depths' mean loss in the loss (0.3.0's loss.mtp_scale)"),

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
	  "false", NULL, NULL,
	  "exempt RMSNorm weights and the embedding table from weight decay (torchtitan decays "
	  "every parameter)"),
	K("optimizer.implementation", CFG_STR, optimizer.implementation, "\"fused\"",
	  "for-loop|foreach|fused|fused_opt_states_bf16", "optimizer.implementation",
	  "update kernel (the first three give the same numbers); fused_opt_states_bf16 keeps "
	  "AdamW's exp_avg and exp_avg_sq in bfloat16 beside float32 parameters (torchtitan "
	  "0.3.0's)"),
	KS("optimizer.early_step_in_backward", CFG_BOOL, optimizer.early_step_in_backward, "false",
	   NULL, "apply the optimizer during backward", CFG_NOT_BUILT,
	   "the optimizer step in backward is not built"),

	K("lr_scheduler.warmup_steps", CFG_INT, lr_scheduler.warmup_steps, "200", NULL,
	  "lr_scheduler.warmup_steps", "linear warmup steps"),
	KOPT("lr_scheduler.total_steps", lr_scheduler.total_steps, lr_scheduler.total_steps_set,
	     "none", "lr_scheduler.total_steps",
	     "length of the schedule (none: training.steps), to stop early on the same curve"),
	K("lr_scheduler.decay_ratio", CFG_OPT_FLOAT, lr_scheduler.decay_ratio, "none", NULL,
	  "lr_scheduler.decay_ratio", "fraction of steps spent decaying (none: all after warmup)"),
	K("lr_scheduler.decay_type", CFG_STR, lr_scheduler.decay_type, "\"linear\"",
	  "linear|sqrt|cosine", "lr_scheduler.decay_type", "decay curve"),
	K("lr_scheduler.min_lr_factor", CFG_FLOAT, lr_scheduler.min_lr_factor, "0.0", NULL,
	  "lr_scheduler.min_lr_factor", "floor of the lr as a fraction of optimizer.lr"),

	K("training.dataset", CFG_STR, training.dataset, "\"c4_test\"", NULL, "training.dataset",
	  "shard folder name under dump_folder (when dataset_path is none)"),
	K("training.dataset_path", CFG_OPT_STR, training.dataset_path, "none", NULL,
	  "training.dataset_path",
	  "the titan-shard folder, or mixture of folders (titan-shard mix), to train on"),
	K("training.sft", CFG_BOOL, training.sft, "false", NULL, NULL,
	  "SFT chat data: the folder holds titan-tokenize --chat shards, packed as torchtitan "
	  "0.3.0's ChatDataLoader packs them (prompt tokens masked out of the loss); 0.3.0 runs "
	  "only"),
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
	KS("training.enable_cpu_offload", CFG_BOOL, training.enable_cpu_offload, "false", NULL,
	   "FSDP offload of parameters, gradients and optimizer states to the CPU", CFG_NOT_BUILT,
	   "FSDP CPU offload is not built"),
	K("training.dtype", CFG_STR, training.dtype, "\"float32\"", "float32|bfloat16",
	  "training.dtype", "parameter dtype"),
	K("training.mixed_precision_param", CFG_STR, training.mixed_precision_param,
	  "\"bfloat16\"", "bfloat16|float32", "training.mixed_precision_param",
	  "compute dtype: torch.autocast's on one process, FSDP's parameter dtype when sharding"),
	K("training.mixed_precision_reduce", CFG_STR, training.mixed_precision_reduce,
	  "\"float32\"", "float32", "training.mixed_precision_reduce", "gradient reduce dtype"),
	K("training.mixed_precision_mode", CFG_STR, training.mixed_precision_mode, "\"auto\"",
	  "auto|fully_shard", NULL,
	  "which mode mixed_precision_param is applied in: auto is torchtitan's rule (autocast on "
	  "one process or under replication alone, FSDP's policy when sharding); fully_shard "
	  "puts FSDP's policy on any job, one process included, to compare a sharded run "
	  "against one process in the same mode"),
	K("training.gc_freq", CFG_INT, training.gc_freq, "50", NULL, "training.gc_freq",
	  "Python GC interval (no effect in C)"),
	K("training.gc_debug", CFG_BOOL, training.gc_debug, "false", NULL, "training.gc_debug",
	  "Python GC debugging (no effect in C)"),
	DATALOADER_KEYS(training),

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
	KS("parallelism.module_fqns_per_model_part", CFG_OPT_LISTS,
	   parallelism.module_fqns_per_model_part, "none", NULL,
	   "the modules of each pipeline stage, a list per stage", CFG_HONOURED, NULL),
	{{"parallelism.pipeline_parallel_split_points", CFG_LIST, "[]", NULL, NULL,
	  "module names that start a stage (torchtitan 0.1's spelling; 0.2 has "
	  "module_fqns_per_model_part, and the two may not both be set)", CFG_HONOURED, NULL},
	 OFF(parallelism.pipeline_parallel_split_points), 0},
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
	K("parallelism.pipeline_parallel_schedule_csv", CFG_OPT_STR,
	  parallelism.pipeline_parallel_schedule_csv, "\"\"", NULL,
	  "parallelism.pipeline_parallel_schedule_csv", "schedule from a CSV file"),
	K("parallelism.pipeline_parallel_microbatch_size", CFG_INT,
	  parallelism.pipeline_parallel_microbatch_size, "1", NULL,
	  "parallelism.pipeline_parallel_microbatch_size", "pipeline micro-batch size"),
	KS("parallelism.pipeline_parallel_expert_parallel_overlap", CFG_BOOL,
	   parallelism.pipeline_parallel_expert_parallel_overlap, "true", NULL,
	   "overlap expert and pipeline communication under DualPipeV", CFG_NOT_BUILT, NO_MOE),
	K("parallelism.context_parallel_degree", CFG_INT, parallelism.context_parallel_degree, "1",
	  NULL, "parallelism.context_parallel_degree",
	  "context parallel degree: the ranks each sequence is split over, attention a ring over them"),
	K("parallelism.context_parallel_load_balancer", CFG_OPT_STR,
	  parallelism.context_parallel_load_balancer, "\"headtail\"", "headtail|ptrr",
	  "parallelism.context_parallel_load_balancer", "CP load balancing: headtail gives rank i chunks i and 2cp-1-i of 2cp, none "
	  "(off) chunk i of cp; ptrr (torchtitan 0.3.0 runs: FlexAttention's) deals each row's blocks of 128 "
	  "tokens by their documents' work"),
	K("parallelism.context_parallel_rotate_method", CFG_STR,
	  parallelism.context_parallel_rotate_method, "\"allgather\"", "allgather|alltoall",
	  "parallelism.context_parallel_rotate_method", "CP key/value exchange: allgather gathers every rank's once, alltoall passes "
	  "them round the ring overlapped with compute"),
	K("parallelism.expert_parallel_degree", CFG_INT, parallelism.expert_parallel_degree, "1",
	  NULL, "parallelism.expert_parallel_degree",
	  "expert parallel degree: each rank of an ep group holds experts / ep of the routed "
	  "experts, its ranks taken from dp_shard x cp x tp (tp first); the experts' FSDP is "
	  "over the dp_shard x cp x tp / ep ranks that hold the same experts (titan-train(1))"),
	KS("parallelism.expert_tensor_parallel_degree", CFG_INT,
	   parallelism.expert_tensor_parallel_degree, "1", NULL,
	   "tensor parallel degree of the routed experts", CFG_NOT_BUILT, NO_MOE),
	KS("parallelism.expert_parallel_comm_backend", CFG_STR,
	   parallelism.expert_parallel_comm_backend, "\"standard\"", "standard|deepep",
	   "all-to-all of expert parallelism", CFG_NOT_BUILT, NO_MOE),

	K("checkpoint.enable", CFG_BOOL, checkpoint.enable, "false", NULL, "checkpoint.enable",
	  "save checkpoints and resume from the latest"),
	KS("checkpoint.enable_ft_dataloader_checkpoints", CFG_BOOL,
	   checkpoint.enable_ft_dataloader_checkpoints, "true", NULL,
	   "fault-tolerant replicas checkpoint their data loader", CFG_NOT_BUILT, NO_FT),
	K("checkpoint.folder", CFG_STR, checkpoint.folder, "\"checkpoint\"", NULL,
	  "checkpoint.folder",
	  "checkpoint folder under dump_folder (an absolute one as given)"),
	K("checkpoint.interval", CFG_INT, checkpoint.interval, "500", NULL, "checkpoint.interval",
	  "steps between checkpoints"),
	K("checkpoint.initial_load_path", CFG_OPT_STR, checkpoint.initial_load_path, "none", NULL,
	  "checkpoint.initial_load_path", "checkpoint to start from when the folder is empty"),
	K("checkpoint.initial_load_model_only", CFG_BOOL, checkpoint.initial_load_model_only,
	  "true", NULL, "checkpoint.initial_load_model_only",
	  "load only the model from initial_load_path"),
	K("checkpoint.initial_load_in_hf", CFG_BOOL, checkpoint.initial_load_in_hf, "false", NULL,
	  "checkpoint.initial_load_in_hf",
	  "with no checkpoint yet, start from the HF safetensors model at initial_load_path "
	  "(none: model.hf_assets_path)"),
	KS("checkpoint.initial_load_in_hf_quantized", CFG_BOOL,
	   checkpoint.initial_load_in_hf_quantized, "false", NULL,
	   "the HF checkpoint holds quantized weights to dequantize", CFG_NOT_BUILT,
	   "loading quantized HF checkpoints is not built"),
	K("checkpoint.last_save_model_only", CFG_BOOL, checkpoint.last_save_model_only, "true",
	  NULL, "checkpoint.last_save_model_only", "the last save holds the model only"),
	K("checkpoint.last_save_in_hf", CFG_BOOL, checkpoint.last_save_in_hf, "false", NULL,
	  "checkpoint.last_save_in_hf",
	  "the last save is the model as HF safetensors, in the files model.hf_assets_path's "
	  "index names"),
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
	K("checkpoint.load_only", CFG_BOOL, checkpoint.load_only, "false", NULL,
	  "checkpoint.load_only", "load checkpoints but never save one"),

	K("activation_checkpoint.mode", CFG_STR, activation_checkpoint.mode, "\"selective\"",
	  "selective|full|memory_budget|none", "activation_checkpoint.mode",
	  "recompute activations in backward"),
	K("activation_checkpoint.selective_ac_option", CFG_STR,
	  activation_checkpoint.selective_ac_option, "\"2\"", NULL,
	  "activation_checkpoint.selective_ac_option", "every Nth layer, or \"op\""),
	KS("activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", CFG_LIST,
	   activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns,
	   "[\"moe.router.gate\"]", NULL,
	   "op-level AC: always recompute matmuls of these modules' shapes", CFG_NOT_BUILT,
	   "forced recomputation by module is not built in op-level AC"),
	KS("activation_checkpoint.early_stop", CFG_BOOL, activation_checkpoint.early_stop, "false",
	   NULL, "stop recomputing once every saved activation is back", CFG_NO_EFFECT,
	   "titan's recomputation runs a block's forward once, with nothing to stop early"),
	KS("activation_checkpoint.memory_budget", CFG_FLOAT, activation_checkpoint.memory_budget,
	   "0.5", NULL, "memory_budget mode: activation memory kept, 0 to 1", CFG_NOT_BUILT,
	   NO_BUDGET),
	KS("activation_checkpoint.visualize_memory_budget_pareto", CFG_BOOL,
	   activation_checkpoint.visualize_memory_budget_pareto, "false", NULL,
	   "draw the runtime/memory trade-off of memory_budget", CFG_NOT_BUILT, NO_BUDGET),
	K("activation_checkpoint.preserve_rng_state", CFG_BOOL,
	  activation_checkpoint.preserve_rng_state, "true", NULL,
	  "activation_checkpoint.preserve_rng_state",
	  "replay the RNG in recomputation (the forward draws no random numbers: exact either way)"),
	KS("activation_checkpoint.determinism_check", CFG_STR, activation_checkpoint.determinism_check,
	   "\"default\"", NULL, "torch.utils.checkpoint's check of recomputed tensors",
	   CFG_NO_EFFECT, "titan's recomputation calls the same code on the same inputs"),
	KS("activation_checkpoint.debug", CFG_BOOL, activation_checkpoint.debug, "false", NULL,
	   "torch.utils.checkpoint's debug capture", CFG_NO_EFFECT,
	   "there is no torch.utils.checkpoint to debug"),

	K("compile.enable", CFG_BOOL, compile.enable, "false", NULL, "compile.enable",
	  "torch.compile of the model and the loss: titan runs its fused ops there"),
	K("compile.components", CFG_LIST, compile.components, "[\"model\", \"loss\"]", NULL,
	  "compile.components", "what to compile"),
	KS("compile.backend", CFG_STR, compile.backend, "\"inductor\"", NULL,
	   "torch.compile backend", CFG_NOT_BUILT, "compilation is not built"),

	K("quantize.linear.float8.enable_fsdp_float8_all_gather", CFG_BOOL,
	  float8.enable_fsdp_float8_all_gather, "false", NULL,
	  "quantize.linear.float8.enable_fsdp_float8_all_gather",
	  "FSDP all-gathers float8 weights (tensorwise; acts only under FSDP)"),
	K("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", CFG_BOOL,
	  float8.precompute_float8_dynamic_scale_for_fsdp, "false", NULL,
	  "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
	  "one amax all-reduce per step for the float8 all-gather's scales"),
	K("quantize.linear.float8.recipe_name", CFG_OPT_STR, float8.recipe_name, "none",
	  "tensorwise|rowwise|rowwise_with_gw_hp", "quantize.linear.float8.recipe_name",
	  "Float8 recipe (none: tensorwise)"),
	K("quantize.linear.float8.filter_fqns", CFG_LIST, float8.filter_fqns, "[]", NULL,
	  "quantize.linear.float8.filter_fqns",
	  "linears left in high precision (FQN substrings; auto_filter_small_kn)"),
	K("quantize.linear.float8.emulate", CFG_BOOL, float8.emulate, "false", NULL,
	  "quantize.linear.float8.emulate",
	  "float8 GEMMs emulated in float32 (always so on the CPU)"),

	KS("quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", CFG_STR,
	   mx.mxfp8_dim1_cast_kernel_choice, "\"triton\"", "triton|cuda|torch",
	   "kernel of the MXFP8 column cast", CFG_NOT_BUILT, NO_MX),
	KS("quantize.linear.mx.recipe_name", CFG_STR, mx.recipe_name, "\"mxfp8_cublas\"", NULL,
	   "MX recipe", CFG_NOT_BUILT, NO_MX),
	KS("quantize.linear.mx.filter_fqns", CFG_LIST, mx.filter_fqns, "[\"output\"]", NULL,
	   "modules left in high precision", CFG_NOT_BUILT, NO_MX),

	K("quantize.grouped_mm.float8.fqns", CFG_LIST, grouped_mm.float8.fqns, "[]", NULL,
	  "quantize.grouped_mm.float8.fqns",
	  "MoE layers (a substring of \"layers.3.moe.experts\") whose routed experts' grouped "
	  "GEMMs run in Float8 under the quantize.grouped_mm.float8 converter"),
	KS("quantize.grouped_mm.mx.recipe_name", CFG_STR, grouped_mm.mx.recipe_name, "\"mxfp8\"",
	   "mxfp8", "MX recipe of grouped GEMMs", CFG_NOT_BUILT, NO_MOE),
	KS("quantize.grouped_mm.mx.fqns", CFG_LIST, grouped_mm.mx.fqns, "[]", NULL,
	   "MoE layers whose grouped GEMMs run in MXFP8", CFG_NOT_BUILT, NO_MOE),

	K("comm.init_timeout_seconds", CFG_INT, comm.init_timeout_seconds, "300", NULL,
	  "comm.init_timeout_seconds", "collective timeout until the first step (seconds)"),
	K("comm.train_timeout_seconds", CFG_INT, comm.train_timeout_seconds, "100", NULL,
	  "comm.train_timeout_seconds", "collective timeout after the first step (seconds)"),
	KS("comm.trace_buf_size", CFG_INT, comm.trace_buf_size, "20000", NULL,
	   "flight recorder entries (0: off)", CFG_NO_EFFECT, NO_FLIGHT_RECORDER),
	KS("comm.save_traces_folder", CFG_STR, comm.save_traces_folder, "\"comm_traces\"", NULL,
	   "flight recorder folder", CFG_NO_EFFECT, NO_FLIGHT_RECORDER),
	KS("comm.save_traces_file_prefix", CFG_STR, comm.save_traces_file_prefix, "\"rank_\"",
	   NULL, "flight recorder file prefix", CFG_NO_EFFECT, NO_FLIGHT_RECORDER),
	KS("comm.mode", CFG_STR, comm.mode, "\"default\"", "default|fake_backend|local_tensor",
	   "real collectives, or a dry run", CFG_NOT_BUILT,
	   "dry runs on a fake or local-tensor backend are not built"),

	K("memory_estimation.enable", CFG_BOOL, memory_estimation.enable, "false", NULL,
	  "memory_estimation.enable",
	  "plan memory and traffic per rank before training (as titan-train --dry-run)"),
	KS("memory_estimation.disable_fake_mode", CFG_BOOL, memory_estimation.disable_fake_mode,
	   "false", NULL, "estimate with real tensors", CFG_NO_EFFECT,
	   "titan's planner allocates no tensors, fake or real"),

	KS("fault_tolerance.enable", CFG_BOOL, fault_tolerance.enable, "false", NULL,
	   "train as TorchFT replica groups", CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.process_group", CFG_STR, fault_tolerance.process_group, "\"gloo\"",
	   NULL, "TorchFT process group", CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.process_group_timeout_ms", CFG_INT,
	   fault_tolerance.process_group_timeout_ms, "10000", NULL, "TorchFT process group timeout",
	   CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.replica_id", CFG_INT, fault_tolerance.replica_id, "0", NULL,
	   "TorchFT replica of this run", CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.group_size", CFG_INT, fault_tolerance.group_size, "0", NULL,
	   "number of TorchFT replica groups", CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.min_replica_size", CFG_INT, fault_tolerance.min_replica_size, "1",
	   NULL, "TorchFT replicas needed per step", CFG_NOT_BUILT, NO_FT),
	KS("fault_tolerance.semi_sync_method", CFG_OPT_STR, fault_tolerance.semi_sync_method,
	   "none", NULL, "TorchFT semi-synchronous training (local_sgd, diloco)", CFG_NOT_BUILT,
	   NO_FT),

	KS("experimental.custom_import", CFG_STR, experimental.custom_import, "\"\"", NULL,
	   "Python module to import", CFG_NOT_BUILT, NO_PY),
	KS("experimental.custom_args_module", CFG_STR, experimental.custom_args_module, "\"\"",
	   NULL, "deprecated spelling of job.custom_config_module", CFG_NOT_BUILT, NO_PY),

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
	DATALOADER_KEYS(validation),

	K("flux.t5_encoder", CFG_STR, flux.t5_encoder, "\"\"", NULL, NULL,
	  "Flux: the T5 text encoder's folder (config.json and safetensors)"),
	K("flux.clip_encoder", CFG_STR, flux.clip_encoder, "\"\"", NULL, NULL,
	  "Flux: the CLIP text model's folder (config.json and safetensors)"),
	K("flux.autoencoder_path", CFG_STR, flux.autoencoder_path,
	  "\"torchtitan/experiments/flux/assets/autoencoder/ae.safetensors\"", NULL, NULL,
	  "Flux: the autoencoder's safetensors file"),
	K("flux.autoencoder_config", CFG_STR, flux.autoencoder_config, "\"\"", NULL, NULL,
	  "Flux: a JSON file of the autoencoder's AutoEncoder.Config (\"\": FLUX.1's)"),
	K("flux.t5_tokenizer", CFG_STR, flux.t5_tokenizer, "\"google/t5-v1_1-small\"", NULL, NULL,
	  "Flux: T5's tokenizer (a tokenizer.json or its folder)"),
	K("flux.clip_tokenizer", CFG_STR, flux.clip_tokenizer,
	  "\"openai/clip-vit-large-patch14\"", NULL, NULL,
	  "Flux: CLIP's tokenizer (a tokenizer.json or its folder)"),
	K("flux.max_t5_encoding_len", CFG_INT, flux.max_t5_encoding_len, "256", NULL, NULL,
	  "Flux: T5's token length (captions cut and padded to it)"),
	K("flux.test_tokenizer", CFG_BOOL, flux.test_tokenizer, "false", NULL, NULL,
	  "Flux: both encoders take t5_tokenizer's ids with BOS and EOS, padded with 0 "
	  "(0.3.0's tokenizer.test_mode)"),
	K("flux.img_size", CFG_INT, flux.img_size, "256", NULL, NULL,
	  "Flux: training images' side in pixels"),
	K("flux.prompt_dropout_prob", CFG_FLOAT, flux.prompt_dropout_prob, "0.0", NULL, NULL,
	  "Flux: probability of replacing each encoder's caption with the empty one"),
	K("flux.val_img_size", CFG_INT, flux.val_img_size, "256", NULL, NULL,
	  "Flux: validation images' side in pixels"),
	K("flux.val_cfg", CFG_BOOL, flux.val_cfg, "false", NULL, NULL,
	  "Flux: classifier-free guidance when validation samples images"),
	K("flux.val_cfg_scale", CFG_FLOAT, flux.val_cfg_scale, "5.0", NULL, NULL,
	  "Flux: validation's guidance scale"),
	K("flux.val_denoising_steps", CFG_INT, flux.val_denoising_steps, "50", NULL, NULL,
	  "Flux: validation's denoising steps"),
	K("flux.val_save_img_count", CFG_INT, flux.val_save_img_count, "1", NULL, NULL,
	  "Flux: validation images saved per validation (-1: all)"),
	K("flux.val_save_img_folder", CFG_STR, flux.val_save_img_folder, "\"img\"", NULL, NULL,
	  "Flux: the folder under the dump folder of validation's images"),
	K("flux.inference_prompts", CFG_STR, flux.inference_prompts,
	  "\"./torchtitan/experiments/flux/inference/prompts.txt\"", NULL, NULL,
	  "Flux: --sample's prompts, one per line"),
	K("flux.inference_folder", CFG_STR, flux.inference_folder, "\"inference_results\"", NULL,
	  NULL, "Flux: --sample's image folder under the dump folder"),
	K("flux.inference_batch", CFG_INT, flux.inference_batch, "2", NULL, NULL,
	  "Flux: prompts sampled together by --sample"),
	K("flux.inference_img_size", CFG_INT, flux.inference_img_size, "256", NULL, NULL,
	  "Flux: --sample's images' side in pixels"),
	K("flux.inference_cfg", CFG_BOOL, flux.inference_cfg, "false", NULL, NULL,
	  "Flux: classifier-free guidance in --sample"),
	K("flux.inference_cfg_scale", CFG_FLOAT, flux.inference_cfg_scale, "5.0", NULL, NULL,
	  "Flux: --sample's guidance scale"),
	K("flux.inference_denoising_steps", CFG_INT, flux.inference_denoising_steps, "50", NULL,
	  NULL, "Flux: --sample's denoising steps"),
	KOPT("debug.seed", debug.seed, debug.seed_set, "none", "debug.seed",
	     "seed of the initialisation (none: 0)"),
	K("debug.deterministic", CFG_BOOL, debug.deterministic, "false", NULL,
	  "debug.deterministic", "deterministic kernels (the CPU backend always is)"),
	K("debug.deterministic_warn_only", CFG_BOOL, debug.deterministic_warn_only, "false", NULL,
	  "debug.deterministic_warn_only",
	  "warn instead of failing on an op without a deterministic kernel (the CPU backend has "
	  "none)"),
	K("debug.moe_force_load_balance", CFG_BOOL, debug.moe_force_load_balance, "false", NULL,
	  "debug.moe_force_load_balance", "route tokens to experts round-robin (MoE flavors)"),
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

const char *config_support_name(cfg_support s)
{
	switch (s) {
	case CFG_HONOURED: return "honoured";
	case CFG_NO_EFFECT: return "no effect";
	case CFG_NOT_BUILT: return "not built";
	}
	return "?";
}

int config_list_keys(FILE *out)
{
	for (int i = 0; i < NKEYS; i++) {
		const cfg_key_info *k = &keys[i].info;
		fprintf(out, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k->name, config_type_name(k->type),
			k->def, k->choices ? k->choices : "-", k->torchtitan ? k->torchtitan : "-",
			config_support_name(k->support), k->why ? k->why : "-", k->help);
	}
	return ferror(out) ? -1 : 0;
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
	case CFG_OPT_LISTS: return "list of lists of strings or none";
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

int cfg_strlist_has(const cfg_strlist *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return 1;
	return 0;
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

static void lists_free(cfg_strlists *l)
{
	for (int i = 0; i < l->n; i++)
		list_free(&l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
	l->set = 0;
}

/* A new empty inner list at the end of l. */
static cfg_strlist *lists_push(cfg_strlists *l)
{
	cfg_strlist *v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
	if (v == NULL)
		return NULL;
	l->v = v;
	l->v[l->n] = (cfg_strlist){NULL, 0};
	l->set = 1;
	return &l->v[l->n++];
}

/* On the command line, a list of lists is its lists separated by spaces, each
 * "a,b" (tyro's form for torchtitan: --key a,b c,d); "none" is None. */
static int lists_from_text(cfg_strlists *l, const char *s)
{
	lists_free(l);
	l->set = 1;
	while (*s != '\0') {
		size_t n = strcspn(s, " \t");
		if (n > 0) {
			char *one = strndup(s, n);
			cfg_strlist *in = one != NULL ? lists_push(l) : NULL;
			int rc = in != NULL ? list_from_csv(in, one) : -1;
			free(one);
			if (rc != 0)
				return -1;
		}
		s += n;
		s += strspn(s, " \t");
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

int config_parse_bool(const char *s, int *b)
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
		if (config_parse_bool(s, p) != 0)
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
	case CFG_OPT_LISTS:
		if (is_none(s)) {
			lists_free(p);
			return 0;
		}
		return lists_from_text(p, s) != 0 ? err_set(err, "out of memory") : 0;
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
		} else if (keys[i].info.type == CFG_OPT_LISTS) {
			lists_free(p);
		}
	}
	pg_free(c);
}

/* A TOML array of strings into l (name and where for messages). */
static int list_from_toml(cfg_strlist *l, const toml_value *v, const char *name, const char *where,
			  titan_err *err)
{
	list_free(l);
	for (int i = 0; i < v->n; i++) {
		if (v->items[i].kind != TOML_STR)
			return err_set(err, "%s: expected a list of strings, %sitem %d is %s %s", name,
				       where, i, v->items[i].kind == TOML_ARRAY ||
				       v->items[i].kind == TOML_INT ? "an" : "a",
				       toml_kind_name(v->items[i].kind));
		if (list_push(l, v->items[i].s, strlen(v->items[i].s)) != 0)
			return err_set(err, "out of memory");
	}
	return 0;
}

static int lists_from_toml(cfg_strlists *l, const toml_value *v, const char *name, titan_err *err)
{
	lists_free(l);
	l->set = 1;
	for (int i = 0; i < v->n; i++) {
		char where[48];
		snprintf(where, sizeof where, "list %d ", i);
		if (v->items[i].kind != TOML_ARRAY)
			return err_set(err, "%s: expected a list of lists of strings, item %d is %s %s",
				       name, i, v->items[i].kind == TOML_INT ? "an" : "a",
				       toml_kind_name(v->items[i].kind));
		cfg_strlist *in = lists_push(l);
		if (in == NULL)
			return err_set(err, "out of memory");
		if (list_from_toml(in, &v->items[i], name, where, err) != 0)
			return -1;
	}
	return 0;
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
	if (t == CFG_LIST && v->kind == TOML_ARRAY)
		return list_from_toml(p, v, name, "", err);
	if (t == CFG_OPT_LISTS && v->kind == TOML_ARRAY)
		return lists_from_toml(p, v, name, err);
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
	if (strncmp(key, PG_PREFIX, strlen(PG_PREFIX)) == 0) {
		char where[300];
		snprintf(where, sizeof where, "%s:%d", ctx->name, line);
		return pg_set(ctx->c, key + strlen(PG_PREFIX), v, where, line, err);
	}
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

static int read_text(const char *path, char **out, titan_err *err);

static int on_group_key(void *vctx, const char *key, const toml_value *v, int line, titan_err *err)
{
	load_ctx *ctx = vctx;
	if (strncmp(key, PG_PREFIX, strlen(PG_PREFIX)) != 0)
		return err_set(err, "%s:%d: %s: a file of optimizer.param_groups holds "
			       "[[optimizer.param_groups]] tables alone", ctx->name, line, key);
	return on_toml_key(vctx, key, v, line, err);
}

int config_load_param_groups(job_config *c, const char *path, titan_err *err)
{
	char *text = NULL;
	if (read_text(path, &text, err) != 0)
		return err_prefix(err, "optimizer.param_groups");
	pg_free(c);
	load_ctx ctx = {c, path};
	int rc = toml_parse(path, text, on_group_key, &ctx, err);
	free(text);
	if (rc == 0 && c->optimizer.n_param_groups == 0)
		return err_set(err, "%s: no [[optimizer.param_groups]] table", path);
	return rc;
}

int config_load_string(job_config *c, const char *name, const char *text, titan_err *err)
{
	load_ctx ctx = {c, name};
	return toml_parse(name, text, on_toml_key, &ctx, err);
}

/* The whole of the text file path, NUL-terminated (malloc'd into *out). */
static int read_text(const char *path, char **out, titan_err *err)
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
	*out = buf;
	return 0;
}

int config_load_file(job_config *c, const char *path, titan_err *err)
{
	char *buf = NULL;
	if (read_text(path, &buf, err) != 0)
		return -1;
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

/* Steps are bounded far beyond any run, so that step arithmetic (the
 * schedule's step + 1, decay progress as a double) stays exact. */
#define MAX_STEPS 1000000000000000LL

/* torch's DataLoader refuses these without worker processes. */
static int validate_dataloader(const cfg_dataloader *d, const char *section, titan_err *err)
{
	if (need(d->num_workers >= 0, err, "%s.num_workers: must be >= 0", section) ||
	    need(!d->persistent_workers || d->num_workers > 0, err,
		 "%s.persistent_workers: needs num_workers > 0", section) ||
	    need(!d->prefetch_factor_set || d->num_workers > 0, err,
		 "%s.prefetch_factor: only with num_workers > 0 (otherwise none)", section) ||
	    need(!d->prefetch_factor_set || d->prefetch_factor >= 0, err,
		 "%s.prefetch_factor: must be >= 0", section))
		return -1;
	return 0;
}

/* Flux's images are whole 2x2 patches of the autoencoder's 8x smaller
 * latents: sides a multiple of 16. */
static int validate_flux(const job_config *c, titan_err *err)
{
	const struct {
		const char *key;
		int64_t v;
	} side[] = {{"flux.img_size", c->flux.img_size}, {"flux.val_img_size", c->flux.val_img_size},
		    {"flux.inference_img_size", c->flux.inference_img_size}};
	for (size_t i = 0; i < sizeof side / sizeof side[0]; i++)
		if (need(side[i].v >= 16 && side[i].v <= 8192 && side[i].v % 16 == 0, err,
			 "%s: %lld, expected a multiple of 16 from 16 to 8192 (the autoencoder's 8x "
			 "latents in 2x2 patches)", side[i].key, (long long)side[i].v))
			return -1;
	const double p = c->flux.prompt_dropout_prob;
	if (need(c->flux.max_t5_encoding_len >= 1 && c->flux.max_t5_encoding_len <= 65536, err,
		 "flux.max_t5_encoding_len: must be from 1 to 65536") ||
	    need(p >= 0.0 && p <= 1.0, err, "flux.prompt_dropout_prob: must be from 0 to 1") ||
	    need(c->flux.val_denoising_steps >= 1 && c->flux.inference_denoising_steps >= 1, err,
		 "flux.val_denoising_steps, flux.inference_denoising_steps: must be >= 1") ||
	    need(isfinite(c->flux.val_cfg_scale) && isfinite(c->flux.inference_cfg_scale), err,
		 "flux.val_cfg_scale, flux.inference_cfg_scale: must be finite") ||
	    need(c->flux.val_save_img_count >= -1, err, "flux.val_save_img_count: must be >= -1") ||
	    need(c->flux.inference_batch >= 1, err, "flux.inference_batch: must be >= 1"))
		return -1;
	return 0;
}

int config_validate(const job_config *c, titan_err *err)
{
	const __typeof__(c->training) *t = &c->training;
	const __typeof__(c->checkpoint) *ck = &c->checkpoint;
	if (pg_validate(c, err) != 0)
		return -1;
	if (need(!c->lr_scheduler.total_steps_set ||
			 (c->lr_scheduler.total_steps >= 1 && c->lr_scheduler.total_steps <= MAX_STEPS),
		 err, "lr_scheduler.total_steps: must be none or in [1, %lld]", MAX_STEPS) ||
	    need(t->steps <= MAX_STEPS, err, "training.steps: must be <= %lld", MAX_STEPS) ||
	    need(c->lr_scheduler.warmup_steps <= MAX_STEPS, err,
		 "lr_scheduler.warmup_steps: must be <= %lld", MAX_STEPS) ||
	    need(isfinite(c->optimizer.lr) && isfinite(c->optimizer.eps) &&
			 isfinite(c->optimizer.weight_decay), err,
		 "optimizer.lr, eps and weight_decay: must be finite") ||
	    need(!c->parallelism.module_fqns_per_model_part.set ||
			 c->parallelism.pipeline_parallel_split_points.n == 0, err,
		 "parallelism.pipeline_parallel_split_points and module_fqns_per_model_part: set "
		 "one of them, not both") ||
	    need(!ck->initial_load_in_hf || ck->initial_load_model_only, err,
		 "checkpoint.initial_load_in_hf: needs checkpoint.initial_load_model_only (HF "
		 "safetensors hold the model only)") ||
	    need(!ck->last_save_in_hf || ck->last_save_model_only, err,
		 "checkpoint.last_save_in_hf: needs checkpoint.last_save_model_only (HF safetensors "
		 "hold the model only)") ||
	    validate_dataloader(&t->dataloader, "training.dataloader", err) ||
	    validate_dataloader(&c->validation.dataloader, "validation.dataloader", err))
		return -1;
	if (need(c->metrics.log_freq >= 1, err, "metrics.log_freq: must be >= 1") ||
	    need(c->comm.init_timeout_seconds >= 1 && c->comm.train_timeout_seconds >= 1, err,
		 "comm.init_timeout_seconds and train_timeout_seconds: must be >= 1") ||
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
	    need(c->validation.seq_len >= 2, err, "validation.seq_len: must be >= 2") ||
	    validate_flux(c, err) != 0)
		return -1;
	return 0;
}

static char *value_text(const job_config *c, const cfg_key *k);

/* model.converters: torchtitan's registry names; the Float8 linear and grouped
 * GEMM converters are built (lib/model/model_f8.c, model_f8moe.c), the MX ones
 * are not.
 * torchtitan asserts that a recipe and FSDP's float8 all-gather are not asked
 * for together; the all-gather itself acts only under FSDP (dp_shard > 1).
 * Every recipe runs under tensor parallelism, as torchtitan's: the scales are
 * the whole tensors' (lib/model/model_f8.c), rowwise ones too (torchtitan
 * gives them plain TP, never refuses them). */
static int check_converters(const job_config *c, titan_err *err)
{
	static const char *const known[] = {"quantize.linear.float8", "quantize.linear.mx",
					    "quantize.grouped_mm.float8", "quantize.grouped_mm.mx"};
	for (int i = 0; i < c->model.converters.n; i++) {
		const char *v = c->model.converters.v[i];
		size_t k = 0;
		while (k < sizeof known / sizeof known[0] && strcmp(v, known[k]) != 0)
			k++;
		if (k == sizeof known / sizeof known[0])
			return err_set(err, "model.converters: \"%s\" is not a converter (expected "
				       "quantize.linear.float8, quantize.linear.mx, "
				       "quantize.grouped_mm.float8 or quantize.grouped_mm.mx)", v);
		if (k == 1 || k == 3)
			return err_set(err, "model.converters: %s is not supported by this titan-train "
				       "yet (quantize.linear.float8 and quantize.grouped_mm.float8 are)",
				       v);
	}
	const __typeof__(c->float8) *f = &c->float8;
	if (f->recipe_name != NULL && f->enable_fsdp_float8_all_gather)
		return err_set(err, "quantize.linear.float8: enable_fsdp_float8_all_gather with "
			       "recipe_name \"%s\" is not supported (torchtitan asserts the same: the "
			       "all-gather is the tensorwise default's)", f->recipe_name);
	return 0;
}

/* The schema's CFG_NOT_BUILT keys away from their default are refused, its
 * CFG_NO_EFFECT ones warned about. */
static int check_schema_support(const job_config *c, titan_err *err)
{
	job_config d;
	if (config_defaults(&d, err) != 0)
		return -1;
	int rc = 0;
	for (int i = 0; i < NKEYS && rc == 0; i++) {
		const cfg_key *k = &keys[i];
		if (k->info.support == CFG_HONOURED)
			continue;
		char *v = value_text(c, k), *dv = value_text(&d, k);
		if (v == NULL || dv == NULL)
			rc = err_set(err, "out of memory");
		else if (strcmp(v, dv) != 0 && k->info.support == CFG_NOT_BUILT)
			rc = err_set(err, "%s = %s: %s (only the default, %s, is accepted)",
				     k->info.name, v, k->info.why, dv);
		else if (strcmp(v, dv) != 0)
			titan_warn("%s = %s has no effect: %s", k->info.name, v, k->info.why);
		free(v);
		free(dv);
	}
	config_free(&d);
	return rc;
}

/* model.num_mtp_layers: torchtitan 0.3.0 builds multi-token prediction for
 * DeepSeek V3 and refuses it under pipeline and context parallelism
 * (MTPDecoder.Config.update_from_config); its validator calls MTPLoss without
 * the positions it requires. */
static int check_mtp(const job_config *c, titan_err *err)
{
	const __typeof__(c->parallelism) *p = &c->parallelism;
	int64_t k = c->model.num_mtp_layers;
	if (need(k >= 0 && k <= 16, err, "model.num_mtp_layers %lld: must be in [0, 16]",
		 (long long)k) ||
	    need(isfinite(c->model.mtp_scale) && c->model.mtp_scale >= 0, err,
		 "model.mtp_scale %g: must be finite and >= 0", c->model.mtp_scale))
		return -1;
	if (k == 0)
		return 0;
	return need(strcmp(c->model.name, "deepseek_v3") == 0, err,
		    "model.num_mtp_layers %lld with model.name \"%s\": torchtitan 0.3.0 builds "
		    "multi-token prediction for deepseek_v3 only", (long long)k, c->model.name) ||
	       need(p->pipeline_parallel_degree <= 1, err,
		    "model.num_mtp_layers with parallelism.pipeline_parallel_degree %lld: MTP does "
		    "not support pipeline parallelism yet (torchtitan 0.3.0 refuses it too)",
		    (long long)p->pipeline_parallel_degree) ||
	       need(p->context_parallel_degree <= 1, err,
		    "model.num_mtp_layers with parallelism.context_parallel_degree %lld: MTP does "
		    "not support context parallelism yet (torchtitan 0.3.0 refuses it too)",
		    (long long)p->context_parallel_degree) ||
	       need(!c->validation.enable, err,
		    "model.num_mtp_layers with validation.enable: torchtitan 0.3.0's validator calls "
		    "MTPLoss without the positions it requires (a ValueError); refused");
}

/* torchtitan's CheckpointManager does nothing at all when checkpoint.enable
 * is false, loading included: titan does the same, but says so, since a run
 * that quietly starts from its random init instead of the named checkpoint
 * looks like a run that loaded it. */
static void warn_checkpoint_unused(const job_config *c)
{
	const __typeof__(c->checkpoint) *k = &c->checkpoint;
	if (k->enable)
		return;
	if (k->initial_load_path != NULL)
		titan_warn("checkpoint.initial_load_path = \"%s\" has no effect: checkpoint.enable "
			   "is false (torchtitan loads nothing then either)", k->initial_load_path);
	if (k->load_step >= 0)
		titan_warn("checkpoint.load_step = %lld has no effect: checkpoint.enable is false",
			   (long long)k->load_step);
}

int config_check_supported(const job_config *c, int world_size, titan_err *err)
{
	warn_checkpoint_unused(c);
	(void)world_size; /* every parallelism takes any world (lib/plan) */
	if (check_converters(c, err) || check_mtp(c, err) ||
	    need(c->model.converters.n == 0 || strcmp(c->training.dtype, "float32") == 0, err,
		 "training.dtype = \"%s\" with model.converters: Float8 training keeps float32 "
		 "masters; use training.dtype = \"float32\"", c->training.dtype))
		return -1;
	return check_schema_support(c, err);
}

/* A TOML basic string. */
void config_print_string(const char *s, FILE *out)
{
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
}

static void print_list(const cfg_strlist *l, FILE *out)
{
	fputc('[', out);
	for (int i = 0; i < l->n; i++) {
		if (i)
			fputs(", ", out);
		config_print_string(l->v[i], out);
	}
	fputc(']', out);
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
		if (s == NULL)
			fputs("none", out);
		else
			config_print_string(s, out);
		break;
	}
	case CFG_LIST:
		print_list(p, out);
		break;
	case CFG_OPT_LISTS: {
		const cfg_strlists *l = p;
		if (!l->set) {
			fputs("none", out);
			break;
		}
		fputc('[', out);
		for (int i = 0; i < l->n; i++) {
			if (i)
				fputs(", ", out);
			print_list(&l->v[i], out);
		}
		fputc(']', out);
		break;
	}
	}
}

/* The value of key k as config_print writes it (malloc'd), or NULL. */
static char *value_text(const job_config *c, const cfg_key *k)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	if (m == NULL)
		return NULL;
	print_value(c, k, m);
	if (fclose(m) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

char *config_value_text(const job_config *c, const char *key, cfg_type *type)
{
	const cfg_key *k = find_key(key);
	if (k == NULL)
		return NULL;
	*type = k->info.type;
	return value_text(c, k);
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
		char *buf = value_text(c, &keys[i]);
		if (buf == NULL) {
			fprintf(out, "# %s: out of memory\n", name);
			continue;
		}
		/* job.config_file names the file read; as a comment the output reads
		 * back to itself. */
		if (strcmp(buf, "none") == 0 || strcmp(name, "job.config_file") == 0)
			fprintf(out, "# %s = %s\n", dot + 1, buf);
		else
			fprintf(out, "%s = %s\n", dot + 1, buf);
		free(buf);
	}
	pg_print(c, out);
}

static int is_flag_name(const char *a)
{
	return a[0] == '-' && a[1] == '-' && strchr(a + 2, '.') != NULL;
}

/* A value follows a boolean flag only when it reads as a boolean. */
static int looks_bool(const char *s)
{
	int b;
	return s != NULL && config_parse_bool(s, &b) == 0;
}

/* The --section.key overrides of argv, in order. */
static int apply_overrides(job_config *c, int argc, char **argv, titan_err *err)
{
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
	if (apply_overrides(c, argc, argv, err) != 0)
		return -1;
	/* torchtitan's ConfigManager: the old key wins, with a warning. */
	if (c->model.tokenizer_path != NULL) {
		titan_warn("model.tokenizer_path is deprecated, use model.hf_assets_path; setting "
			   "hf_assets_path to \"%s\"", c->model.tokenizer_path);
		if (set_str(&c->model.hf_assets_path, c->model.tokenizer_path) != 0)
			return err_set(err, "out of memory");
	}
	return 0;
}

/* Keys that may differ across the ranks of a job (config.h says why). */
static int rank_local_key(const char *name)
{
	static const char *const local[] = {"job.config_file", "job.description", "job.print_config",
					    "metrics.disable_color_printing"};
	for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
		if (strcmp(name, local[i]) == 0)
			return 1;
	return 0;
}

char *config_agreement_text(const job_config *c, size_t *n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (m == NULL)
		return NULL;
	for (int i = 0; i < NKEYS; i++) {
		if (rank_local_key(keys[i].info.name))
			continue;
		fprintf(m, "%s = ", keys[i].info.name);
		print_value(c, &keys[i], m);
		fputc('\n', m);
	}
	pg_print(c, m);
	if (fclose(m) != 0) {
		free(buf);
		return NULL;
	}
	*n = len;
	return buf;
}

/* One line of an agreement text: [p, end) up to its newline. */
typedef struct agree_line {
	const char *p;
	size_t len;
	int present;   /* 0: the text ended before this line */
	const char *val;
	size_t key_len, val_len;
	int has_val;   /* 0: no " = " on the line */
} agree_line;

static agree_line next_line(const char **p, const char *end)
{
	agree_line l = {0};
	if (*p >= end)
		return l;
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	l.p = *p;
	l.len = (size_t)((nl != NULL ? nl : end) - *p);
	l.present = 1;
	*p = nl != NULL ? nl + 1 : end;
	l.key_len = l.len;
	for (size_t i = 0; i + 3 <= l.len; i++)
		if (memcmp(l.p + i, " = ", 3) == 0) {
			l.key_len = i;
			l.val = l.p + i + 3;
			l.val_len = l.len - i - 3;
			l.has_val = 1;
			break;
		}
	return l;
}

/* Append s (len bytes) to out (room bytes in all, *k written), ASCII only,
 * at most cap bytes written for s (then "..."). */
static void put_escaped(char *out, size_t room, size_t *k, const char *s, size_t len, size_t cap)
{
	size_t start = *k, i = 0;
	for (; i < len && *k + 5 < room && *k - start + 4 <= cap; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch >= 0x20 && ch < 0x7f)
			out[(*k)++] = (char)ch;
		else
			*k += (size_t)snprintf(out + *k, room - *k, "\\x%02x", ch);
	}
	if (i < len && *k + 4 < room) {
		memcpy(out + *k, "...", 3);
		*k += 3;
	}
	out[*k < room ? *k : room - 1] = '\0';
}

static void put_text(char *out, size_t room, size_t *k, const char *s)
{
	int w = snprintf(out + *k, room - *k, "%s", s);
	if (w > 0)
		*k += (size_t)w < room - *k ? (size_t)w : room - *k - 1;
}

/* "VALUE" of a line, or what stands for a missing one. */
static void put_value(char *out, size_t room, size_t *k, const agree_line *l)
{
	enum { CAP = 160 };
	if (!l->present)
		put_text(out, room, k, "(no such key)");
	else if (!l->has_val)
		put_text(out, room, k, "(no value)");
	else if (l->val_len == 0)
		put_text(out, room, k, "(empty)");
	else
		put_escaped(out, room, k, l->val, l->val_len, CAP);
}

int config_agreement_diff(const char *a, size_t na, int rank_a, const char *b, size_t nb,
			  int rank_b, char *msg, size_t n)
{
	enum { KEY_CAP = 120 };
	const char *pa = a, *pb = b, *ea = a + na, *eb = b + nb;
	if (n == 0)
		return -1;
	msg[0] = '\0';
	for (;;) {
		agree_line la = next_line(&pa, ea), lb = next_line(&pb, eb);
		if (!la.present && !lb.present)
			return 0;
		if (la.present && lb.present && la.len == lb.len && memcmp(la.p, lb.p, la.len) == 0)
			continue;
		char rk[64];
		size_t k = 0;
		put_text(msg, n, &k, "config differs across ranks: ");
		int same_key = la.present && lb.present && la.key_len == lb.key_len &&
			       memcmp(la.p, lb.p, la.key_len) == 0;
		if (same_key || !lb.present || !la.present) {
			const agree_line *named = la.present ? &la : &lb;
			put_escaped(msg, n, &k, named->p, named->key_len, KEY_CAP);
			put_text(msg, n, &k, " is ");
			put_value(msg, n, &k, &la);
			snprintf(rk, sizeof rk, " on rank %d and ", rank_a);
			put_text(msg, n, &k, rk);
			put_value(msg, n, &k, &lb);
			snprintf(rk, sizeof rk, " on rank %d", rank_b);
			put_text(msg, n, &k, rk);
		} else {
			/* Another schema: the ranks run different builds of titan. */
			snprintf(rk, sizeof rk, "rank %d has ", rank_a);
			put_text(msg, n, &k, rk);
			put_escaped(msg, n, &k, la.p, la.key_len, KEY_CAP);
			snprintf(rk, sizeof rk, " where rank %d has ", rank_b);
			put_text(msg, n, &k, rk);
			put_escaped(msg, n, &k, lb.p, lb.key_len, KEY_CAP);
			put_text(msg, n, &k, " (different titan builds?)");
		}
		return 1;
	}
}
