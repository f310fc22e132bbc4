/* torchtitan 0.3.0's presets and command-line paths: see tt030.h. */
#include "config/tt030.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A preset's values, read from models/<family>/config_registry.py of the
 * 0.3.0 wheel: what each function sets on Trainer.Config, and the flavor its
 * model_registry call builds, as TOML fragments in titan's keys (read in
 * order, each over the last).  0.3.0's defaults that differ from 0.2.2's are
 * spelled out (SelectiveAC is per-op selective checkpointing).  A preset that
 * needs what titan does not have is listed with why, and refused. */
enum { PRESET_MTP_LOSS = 2 };

typedef struct tt030_preset {
	const char *module, *name;
	const char *flavor;     /* 0.3.0's model_spec.flavor where titan's differs */
	const char *toml[4];    /* NULL-ended */
	int plain_loss;         /* CrossEntropyLoss itself, not ChunkedLossWrapper over it;
	                           PRESET_MTP_LOSS: DeepSeek V3's MTPLoss (unchunked too) */
	const char *refused;    /* why titan cannot run it, or NULL */
	const char *note;       /* how titan runs what the preset asks for, or NULL */
} tt030_preset;

/* The presets whose model keeps q, k and v apart (0.3.0's fuse_qkv False):
 * wq, wk and wv are parameters, and optimizer state, of their own; every
 * other GQA preset fuses them into qkv_linear.wqkv. */
static const char *const qkv_apart[] = {"qwen3_debugmodel_non_fused_qkv"};

/* The presets with a LoRAConverter.Config: its rank and alpha. */
static const struct {
	const char *name;
	int rank;
	double alpha;
} lora_presets[] = {{"llama3_debugmodel_float8_emulate_lora", 8, 16.0}};

#define MODEL(family, flavor, hf)                                                          \
	"[model]\nname = \"" family "\"\nflavor = \"" flavor "\"\nhf_assets_path = \"" hf "\"\n"
#define TOKENIZER "./tests/assets/tokenizer"
#define SELECTIVE_AC "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n"
#define FULL_AC "[activation_checkpoint]\nmode = \"full\"\n"
#define NO_AC "[activation_checkpoint]\nmode = \"none\"\n"

/* The debug presets' recipe (every family's *_debugmodel). */
#define DEBUG_RECIPE(ac)                                                                    \
	"[optimizer]\nlr = 8e-4\n"                                                          \
	"[lr_scheduler]\nwarmup_steps = 2\ndecay_ratio = 0.8\ndecay_type = \"linear\"\n"    \
	"min_lr_factor = 0.0\n"                                                             \
	"[training]\nlocal_batch_size = 8\nseq_len = 2048\nsteps = 10\n"                    \
	"dataset = \"c4_test\"\n"                                                           \
	"[metrics]\nlog_freq = 1\n"                                                         \
	"[checkpoint]\ninterval = 10\nlast_save_model_only = false\n" ac

#define FAMILY_DEBUG(family) MODEL(family, "debugmodel", TOKENIZER) DEBUG_RECIPE(SELECTIVE_AC)

/* llama3_debugmodel adds its pipeline schedule and validator. */
#define LLAMA3_DEBUG                                                                        \
	FAMILY_DEBUG("llama3")                                                              \
	"[parallelism]\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"                 \
	"[validation]\nfreq = 5\nsteps = 10\n"

#define LLAMA3_BIG(flavor, lr, warmup, batch, steps, ac)                                    \
	MODEL("llama3", flavor, "./assets/hf/Llama-3.1-" flavor)                            \
	"[profiling]\nenable_profiling = true\nprofile_freq = 100\n"                        \
	"[metrics]\nenable_tensorboard = true\n"                                            \
	"[optimizer]\nlr = " lr "\n"                                                        \
	"[lr_scheduler]\nwarmup_steps = " warmup "\n"                                       \
	"[training]\nlocal_batch_size = " batch "\nseq_len = 8192\nsteps = " steps "\n"     \
	"dataset = \"c4\"\n"                                                                \
	"[checkpoint]\ninterval = 500\n"                                                    \
	"[validation]\nfreq = 500\nsteps = 1200\n" ac

/* qwen3_0_6b ... qwen3_32b: c4 at 4096 positions, float16 exports. */
#define QWEN3_SIZED(flavor, lr, warmup, batch, steps, interval, ac)                          \
	MODEL("qwen3", flavor, "./assets/hf/Qwen3-" flavor)                                 \
	"[optimizer]\nlr = " lr "\n"                                                        \
	"[lr_scheduler]\nwarmup_steps = " warmup "\n"                                       \
	"[training]\nlocal_batch_size = " batch "\nseq_len = 4096\nsteps = " steps "\n"     \
	"dataset = \"c4\"\n"                                                                \
	"[checkpoint]\ninterval = " interval "\nlast_save_model_only = false\n"             \
	"export_dtype = \"float16\"\n" ac

/* deepseek_v3_16b and _671b: cosine decay to 0.1, the loss compiled. */
#define DEEPSEEK_BIG(flavor, hf, warmup, steps, ep, interval)                                \
	MODEL("deepseek_v3", flavor, "./assets/hf/" hf)                                     \
	"[optimizer]\nlr = 2.2e-4\n"                                                        \
	"[lr_scheduler]\nwarmup_steps = " warmup "\ndecay_ratio = 0.8\n"                    \
	"decay_type = \"cosine\"\nmin_lr_factor = 0.1\n"                                    \
	"[training]\nlocal_batch_size = 4\nseq_len = 4096\nsteps = " steps "\n"             \
	"dataset = \"c4\"\n"                                                                \
	"[parallelism]\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"                 \
	"expert_parallel_degree = " ep "\n"                                                 \
	"[checkpoint]\ninterval = " interval "\n"                                           \
	"[compile]\nenable = true\ncomponents = [\"loss\"]\n" SELECTIVE_AC

/* qwen3_moe_debug (and qwen3_debugmodel_moe_param_groups, its optimizer
 * replaced) */
#define QWEN3_MOE_DEBUG                                                                      \
	MODEL("qwen3", "debugmodel_moe", TOKENIZER)                                         \
	"[optimizer]\nlr = 3e-4\n[lr_scheduler]\nwarmup_steps = 2\n"                         \
	"[training]\nlocal_batch_size = 4\nseq_len = 4096\nsteps = 10\ndataset = \"c4_test\"\n" \
	"[metrics]\nlog_freq = 1\n[parallelism]\nexpert_parallel_degree = 1\n"              \
	"[checkpoint]\ninterval = 10\nlast_save_model_only = false\nexport_dtype = \"float16\"\n" \
	SELECTIVE_AC

#define GPT_OSS_DEBUG                                                                       \
	MODEL("gpt_oss", "debugmodel_030", TOKENIZER) DEBUG_RECIPE(NO_AC)                   \
	"[parallelism]\nexpert_parallel_degree = 1\n"                                       \
	"[validation]\nfreq = 5\nsteps = 10\n"

#define GPT_OSS_BIG(flavor)                                                                 \
	MODEL("gpt_oss", flavor, "./assets/hf/gpt-oss-" flavor)                             \
	"[optimizer]\nlr = 8e-4\n"                                                          \
	"[lr_scheduler]\nwarmup_steps = 2000\ndecay_ratio = 0.8\ndecay_type = \"cosine\"\n" \
	"min_lr_factor = 0.1\n"                                                             \
	"[training]\nlocal_batch_size = 1\nseq_len = 8192\nsteps = 10000\n"                 \
	"dataset = \"c4\"\n"                                                                \
	"[parallelism]\nexpert_parallel_degree = 1\n"                                       \
	"[checkpoint]\ninterval = 500\n" FULL_AC

/* sft_debugmodel: the debug recipe, then chat data (ChatDataLoader, whose
 * dataset_path "json" names HF's loader: titan's is the shard folder, given
 * with --dataloader.dataset_path). */
#define SFT_DEBUG FAMILY_DEBUG("llama3"), \
	"[training]\nsft = true\ndataset = \"\"\ndataset_path = \"json\"\n"

/* Float8LinearConverter.Config(): rowwise scaling, every linear whose dims
 * are multiples of 16 (the output projection too). */
#define FLOAT8 "[model]\nconverters = [\"quantize.linear.float8\"]\n"                      \
	       "[quantize.linear.float8]\nrecipe_name = \"rowwise\"\n"

/* Float8LinearConverter.Config(emulate=True): torchao's Float8LinearConfig
 * (emulate=True), its defaults, tensorwise scaling whatever the recipe. */
#define FLOAT8_EMULATE "[model]\nconverters = [\"quantize.linear.float8\"]\n"                \
		       "[quantize.linear.float8]\nemulate = true\n"

/* Flux (models/flux/config_registry.py): FluxTrainer.Config's encoders,
 * tokenizers, loader, validator and inference in titan's flux.* keys. */
#define FLUX_COMMON(flavor, hf, t5len)                                                     \
	MODEL("flux", flavor, hf)                                                           \
	"[flux]\nt5_tokenizer = \"google/t5-v1_1-xxl\"\n"                                     \
	"clip_tokenizer = \"openai/clip-vit-large-patch14\"\nmax_t5_encoding_len = " t5len "\n" \
	"autoencoder_path = \"assets/hf/FLUX.1-dev/ae.safetensors\"\n"                      \
	"prompt_dropout_prob = 0.447\nval_cfg = true\n" FULL_AC
#define FLUX_DEBUG                                                                          \
	FLUX_COMMON("flux-debug", "tests/assets/tokenizer", "256"),                          \
	"[flux]\nval_denoising_steps = 4\n"                                                   \
	"inference_prompts = \"./torchtitan/models/flux/inference/prompts.txt\"\n"           \
	"[lr_scheduler]\nwarmup_steps = 1\ndecay_ratio = 0.0\n"                                \
	"[training]\nlocal_batch_size = 4\nmax_norm = 2.0\nsteps = 10\n"                      \
	"dataset = \"cc12m-test\"\n"                                                          \
	"[metrics]\nlog_freq = 1\n"                                                           \
	"[checkpoint]\ninterval = 10\nlast_save_model_only = false\n"                         \
	"[validation]\nfreq = 5\nsteps = 48\ndataset = \"cc12m-test\"\n"
#define FLUX_BIG(flavor, batch, t5len, valsteps)                                           \
	FLUX_COMMON(flavor, "./tests/assets/tokenizer", t5len),                              \
	"[flux]\nval_denoising_steps = 50\nval_save_img_count = 50\n"                         \
	"[optimizer]\nlr = 1e-4\n"                                                            \
	"[lr_scheduler]\nwarmup_steps = 3000\ndecay_ratio = 0.0\n"                             \
	"[training]\nlocal_batch_size = " batch "\nmax_norm = 1.0\nsteps = 30000\n"           \
	"dataset = \"cc12m-wds\"\n"                                                           \
	"[metrics]\nlog_freq = 100\n"                                                         \
	"[checkpoint]\ninterval = 1000\n"                                                     \
	"[validation]\nfreq = 1000\nsteps = " valsteps "\ndataset = \"coco-validation\"\n"
#define FLUX_NOTE                                                                           \
	"titan's Flux trainer: image-caption webdataset tars (dataloader.dataset_path), the " \
	"encoders and autoencoder from encoder.t5_encoder, encoder.clip_encoder and " \
	"encoder.autoencoder_path, float32 on one data-parallel rank and bf16 parameters " \
	"under FSDP as 0.3.0's mixed precision"

#define REFUSE(module, name, why) {module, name, NULL, {NULL}, 0, why, NULL}
#define NVFP4 "NVFP4 linears (NVFP4LinearConverter, Blackwell only) are not built"
#define MXFP8 "MXFP8 linears and grouped GEMMs (MXFP8*Converter) are not built"
#define SFT "its ChatDataLoader's sample_processor (GSM8K's answer split at \"####\" into " \
	"reasoning_content and content) is Python: titan takes conversations as JSON Lines " \
	"(titan-tokenize --chat) with training.sft"
#define HYBRIDEP "HybridEP's token dispatch (moe_comm_backend \"hybridep\") is not built"
#define MINIMAL_EP "MinimalAsyncEP's token dispatch (moe_comm_backend \"minimal_async_ep\") and " \
	"the fused SwiGLU overrides (override.imports) are not built"

/* 0.3.0's defaults that are not 0.2.2's, under every preset. */
static const char defaults_030[] =
	"[profiling]\nsave_traces_folder = \"profiling/traces\"\n"
	"save_memory_snapshot_folder = \"profiling/memory_snapshot\"\n";

/* Every preset function of the four families, in config_registry.py's order
 * (deepseek_v3_debugmodel_mtp comes with multi-token prediction). */
static const tt030_preset presets[] = {
	{"llama3", "llama3_debugmodel", NULL, {LLAMA3_DEBUG}, 0, NULL, NULL},
	{"llama3", "llama3_debugmodel_varlen_attn", NULL, {LLAMA3_DEBUG}, 0, NULL,
	 "varlen attention is the per-document attention every 0.3.0 run has here (flex's "
	 "block-causal mask is the same); CUDA graphs off, which titan accepts either way"},
	/* model_registry(tp_gemm_backend="dist_gemm"): the same projections with
	 * tensor parallelism's collectives folded into their GEMMs */
	{"llama3", "llama3_debugmodel_dist_gemm", NULL, {LLAMA3_DEBUG}, 0, NULL,
	 "attention's tensor-parallel collectives folded into its GEMMs (dist_gemm) compute "
	 "the projections titan's tensor parallelism computes with its own collectives"},
	{"llama3", "llama3_debugmodel_float8", NULL, {LLAMA3_DEBUG, FLOAT8}, 0, NULL,
	 "titan's Float8 linears (quantize.linear.float8, recipe rowwise)"},
	REFUSE("llama3", "llama3_debugmodel_nvfp4", NVFP4),
	REFUSE("llama3", "llama3_debugmodel_first_85_pct_layers_nvfp4", NVFP4),
	/* LoRAConverter.Config(rank=8, alpha=16.0, target_modules=["wq", "wkv",
	 * "wo"]) after the Float8 converter: of those names 0.3.0's Llama 3 has wo
	 * alone (q, k and v are qkv_linear.wqkv), so wo is the one LoRALinear */
	{"llama3", "llama3_debugmodel_float8_emulate_lora", NULL, {LLAMA3_DEBUG, FLOAT8_EMULATE}, 0,
	 NULL,
	 "titan's Float8 linears (tensorwise, emulate=True's Float8LinearConfig; q, k, v cast as "
	 "the one fused wqkv) and LoRA adapters (rank 8, alpha 16) on attention.wo, the only one "
	 "of target_modules wq, wkv, wo that 0.3.0's Llama 3 has; every other parameter frozen"},
	/* the same with the plain (unchunked) cross-entropy */
	{"llama3", "llama3_debugmodel_ce_loss", NULL, {LLAMA3_DEBUG}, 1, NULL, NULL},
	{"llama3", "llama3_8b", NULL, {LLAMA3_BIG("8B", "3e-4", "200", "1", "1000", SELECTIVE_AC)},
	 0, NULL, NULL},
	REFUSE("llama3", "llama3_8b_first_85_pct_layers_nvfp4", NVFP4),
	REFUSE("llama3", "llama3_8b_mxfp8", MXFP8),
	{"llama3", "llama3_70b", NULL,
	 {LLAMA3_BIG("70B", "1.5e-4", "200", "8", "1000", FULL_AC),
	  "[parallelism]\ntensor_parallel_degree = 8\n"},
	 0, NULL, NULL},
	/* Float8LinearConverter.Config(filter_fqns=["lm_head"]): 0.3.0's lm_head
	 * is titan's output projection */
	{"llama3", "llama3_405b", NULL,
	 {LLAMA3_BIG("405B", "8e-5", "600", "2", "3000", FULL_AC),
	  "[parallelism]\ntensor_parallel_degree = 8\nenable_async_tensor_parallel = true\n"
	  "[compile]\nenable = true\n",
	  FLOAT8 "filter_fqns = [\"output\"]\n"},
	 0, NULL,
	 "titan's Float8 linears (recipe rowwise, every linear but the output projection: "
	 "0.3.0's filter lm_head) under tensor parallelism 8, each scale the whole tensor's "
	 "as torchao's casts of DTensors take it; async TP leaves the Float8 linears "
	 "unoverlapped"},
	{"llama3", "sft_debugmodel", NULL, {SFT_DEBUG}, 0, NULL,
	 "the chat data is a titan-tokenize --chat --chat-fields question,answer shard folder "
	 "(--dataloader.dataset_path), packed as its ChatDataLoader packs it"},

	{"qwen3", "qwen3_debugmodel", NULL, {FAMILY_DEBUG("qwen3")}, 0, NULL, NULL},
	REFUSE("qwen3", "qwen3_debugmodel_nvfp4", NVFP4),
	REFUSE("qwen3", "qwen3_debugmodel_first_85_pct_layers_nvfp4", NVFP4),
	{"qwen3", "qwen3_debugmodel_moe_param_groups", NULL,
	 {QWEN3_MOE_DEBUG,
	  "[[optimizer.param_groups]]\npattern = \"(?:tok_embeddings|output)\\\\.\"\n"
	  "optimizer_name = \"AdamW\"\noptimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], "
	  "eps = 1e-8, weight_decay = 0.0}\n"
	  "[[optimizer.param_groups]]\npattern = \"\\\\.router\\\\.gate\\\\.\"\n"
	  "optimizer_name = \"Adam\"\noptimizer_kwargs = {lr = 1e-4, betas = [0.9, 0.95], "
	  "eps = 1e-8}\n"
	  "[[optimizer.param_groups]]\npattern = \".*\"\noptimizer_name = \"AdamW\"\n"
	  "optimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], eps = 1e-8, weight_decay = 0.1}\n"},
	 0, NULL,
	 "three optimizer.param_groups matched against 0.3.0's names, first match wins: "
	 "tok_embeddings (its pattern's output. matches no 0.3.0 name: the output is "
	 "lm_head) AdamW without decay, the routers' gates Adam at lr 1e-4, the rest AdamW"},
	{"qwen3", "qwen3_debugmodel_flex_flash", NULL, {FAMILY_DEBUG("qwen3")}, 0, NULL,
	 "FlexAttention's FLASH kernel computes the same block-causal attention as titan's "
	 "kernels, which run it"},
	{"qwen3", "qwen3_0_6b", NULL,
	 {QWEN3_SIZED("0.6B", "3e-4", "2", "4", "10", "500", SELECTIVE_AC), "[metrics]\nlog_freq = 1\n"},
	 0, NULL, NULL},
	{"qwen3", "qwen3_1_7b", NULL,
	 {QWEN3_SIZED("1.7B", "8e-4", "20", "4", "100", "50", SELECTIVE_AC)}, 0, NULL, NULL},
	REFUSE("qwen3", "qwen3_8b_first_85_pct_layers_nvfp4", NVFP4 "; " SFT),
	{"qwen3", "qwen3_14b", NULL,
	 {QWEN3_SIZED("14B", "8e-4", "600", "4", "3000", "500", FULL_AC)}, 0, NULL, NULL},
	{"qwen3", "qwen3_30b_a3b", NULL,
	 {QWEN3_SIZED("30B-A3B", "8e-4", "600", "2", "3000", "500", FULL_AC)}, 0, NULL, NULL},
	{"qwen3", "qwen3_32b", NULL,
	 {QWEN3_SIZED("32B", "8e-4", "600", "2", "3000", "500", FULL_AC)}, 0, NULL, NULL},
	{"qwen3", "qwen3_debugmodel_non_fused_qkv", "debugmodel_non_fused_qkv",
	 {FAMILY_DEBUG("qwen3")}, 0, NULL,
	 "wq, wk and wv apart: the same model names as fused QKV (flavor debugmodel), the "
	 "optimizer's state of each its own"},
	{"qwen3", "qwen3_moe_debug", NULL, {QWEN3_MOE_DEBUG}, 0, NULL, NULL},
	/* model_registry("debugmodel_moe", moe_comm_backend="deepep"): "numerics
	 * match the standard all-to-all backend", says its docstring */
	{"qwen3", "qwen3_moe_deepep", NULL,
	 {MODEL("qwen3", "debugmodel_moe", TOKENIZER)
	  "[optimizer]\nlr = 3e-4\n[lr_scheduler]\nwarmup_steps = 2\n"
	  "[training]\nlocal_batch_size = 2\nseq_len = 512\nsteps = 10\ndataset = \"c4_test\"\n"
	  "[metrics]\nlog_freq = 1\n[parallelism]\nexpert_parallel_degree = 4\n"
	  "[checkpoint]\ninterval = 1000\nlast_save_model_only = false\nexport_dtype = \"float16\"\n"
	  SELECTIVE_AC},
	 0, NULL,
	 "DeepEP's token dispatch (moe_comm_backend deepep) computes what the standard "
	 "all-to-all does, which titan's expert parallelism runs"},
	REFUSE("qwen3", "sft_qwen3_8b_math", SFT),

	{"deepseek_v3", "deepseek_v3_debugmodel", NULL,
	 {FAMILY_DEBUG("deepseek_v3"), "[parallelism]\nexpert_parallel_degree = 1\n"}, 0, NULL, NULL},
	{"deepseek_v3", "deepseek_v3_debugmodel_mtp", NULL,
	 {FAMILY_DEBUG("deepseek_v3"), "[parallelism]\nexpert_parallel_degree = 1\n",
	  "[model]\nnum_mtp_layers = 1\n"}, PRESET_MTP_LOSS, NULL,
	 "one multi-token prediction depth (model.num_mtp_layers) and MTPLoss (model.mtp_scale); "
	 "pipeline and context parallelism and validation are refused with it"},
	REFUSE("deepseek_v3", "deepseek_v3_debugmodel_mxfp8", MXFP8),
	REFUSE("deepseek_v3", "deepseek_v3_debugmodel_hybridep", HYBRIDEP),
	REFUSE("deepseek_v3", "deepseek_v3_debugmodel_minimal_async_ep", MINIMAL_EP),
	{"deepseek_v3", "deepseek_v3_16b", NULL,
	 {DEEPSEEK_BIG("16B", "deepseek-moe-16b-base", "200", "1000", "8", "10")}, 0, NULL, NULL},
	REFUSE("deepseek_v3", "deepseek_v3_16b_hybridep", HYBRIDEP),
	REFUSE("deepseek_v3", "deepseek_v3_16b_minimal_async_ep", MINIMAL_EP),
	{"deepseek_v3", "deepseek_v3_671b", NULL,
	 {DEEPSEEK_BIG("671B", "DeepSeek-V3.1-Base", "2000", "10000", "2", "500")}, 0, NULL, NULL},
	/* Float8LinearConverter.Config(filter_fqns=["lm_head", "router.gate"]) and
	 * Float8GroupedExpertsConverter.Config(): every GroupedExperts, which is
	 * the 0.2.2 converter quantize.grouped_mm.float8 with fqns ["experts"]
	 * (titan's routed experts are "layers.N.moe.experts") */
	{"deepseek_v3", "deepseek_v3_671b_float8", NULL,
	 {DEEPSEEK_BIG("671B", "DeepSeek-V3.1-Base", "2000", "10000", "2", "500"),
	  "[model]\nconverters = [\"quantize.linear.float8\", \"quantize.grouped_mm.float8\"]\n"
	  "[quantize.linear.float8]\nrecipe_name = \"rowwise\"\n"
	  "filter_fqns = [\"output\", \"router.gate\"]\n"
	  "[quantize.grouped_mm.float8]\nfqns = [\"experts\"]\n"},
	 0, NULL,
	 "titan's Float8 linears (recipe rowwise, all but the output projection and the "
	 "routers: 0.3.0's filter lm_head, router.gate) and Float8 grouped experts "
	 "(quantize.grouped_mm.float8, fqns experts: torchao's e4m3 rowwise grouped GEMMs); "
	 "the experts' token groups are not padded to 16 rows (padding rows change no value)"},

	{"flux", "flux_debugmodel", NULL, {FLUX_DEBUG}, 0, NULL, FLUX_NOTE},
	{"flux", "flux_dev", NULL, {FLUX_BIG("flux-dev", "32", "512", "12")}, 0, NULL, FLUX_NOTE},
	{"flux", "flux_schnell", NULL, {FLUX_BIG("flux-schnell", "64", "256", "6")}, 0, NULL,
	 FLUX_NOTE},
	REFUSE("flux", "flux_schnell_mxfp8", MXFP8),

	{"gpt_oss", "gpt_oss_debugmodel", "debugmodel", {GPT_OSS_DEBUG}, 0, NULL,
	 "0.3.0's debugmodel is titan's flavor debugmodel_030; varlen attention (sliding "
	 "windows as its window) is titan's per-document attention"},
	{"gpt_oss", "gpt_oss_debugmodel_flex", "debugmodel", {GPT_OSS_DEBUG}, 0, NULL,
	 "0.3.0's debugmodel is titan's flavor debugmodel_030; flex attention (sliding windows "
	 "as a mask) is titan's per-document attention"},
	{"gpt_oss", "gpt_oss_20b", NULL, {GPT_OSS_BIG("20b")}, 0, NULL, NULL},
	{"gpt_oss", "gpt_oss_120b", NULL, {GPT_OSS_BIG("120b")}, 0, NULL, NULL},
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
	REFUSED("dataloader.load_dataset_kwargs", "ChatDataLoader's HF datasets arguments: titan "
		"reads chat shards (titan-tokenize --chat) from dataloader.dataset_path"),
	REFUSED("dataloader.sample_processor", "a Python callable: titan-tokenize --chat reads "
		"{\"messages\": [...]} lines or two fields (--chat-fields)"),
	ONLY("dataloader.infinite", "true", "titan's training loader always starts the data "
	     "over"),
	{"optimizer.param_groups", "@param_groups", NULL, "a list of Python ParamGroupConfig "
	 "objects, which 0.3.0 takes from a preset alone: titan takes a TOML file of "
	 "[[optimizer.param_groups]] tables (titan-config(5)) in place of the preset's groups", 0},
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
	{"parallelism.context_parallel_ptrr_mask_key", NULL, NULL, "picks the mask of a dict of "
	 "masks the ptrr load balancer is built from; titan's language models have one (the "
	 "documents' block-causal mask), so any value is accepted, as 0.3.0 ignores it then", 0},
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
	/* None under gpt_oss's debug presets; the others' SelectiveAC or FullAC
	 * is a Python class, not a value */
	{"activation_checkpoint", "activation_checkpoint.mode", "none", "None: no activation "
	 "checkpointing (SelectiveAC and FullAC are the presets' own)", 0},
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
	{"validator.dataloader.infinite", NULL, NULL, "the language models' validation reads "
	 "its split once, Flux's reads validator.steps batches from the start again as often "
	 "as it needs: either value is accepted", 0},
	/* Flux's FluxTrainer.Config (flux_* presets) */
	MOVED("tokenizer.t5_tokenizer_path", "flux.t5_tokenizer"),
	MOVED("tokenizer.clip_tokenizer_path", "flux.clip_tokenizer"),
	MOVED("tokenizer.max_t5_encoding_len", "flux.max_t5_encoding_len"),
	MOVED("tokenizer.test_mode", "flux.test_tokenizer"),
	MOVED("dataloader.prompt_dropout_prob", "flux.prompt_dropout_prob"),
	MOVED("dataloader.img_size", "flux.img_size"),
	ONLY("dataloader.generate_timesteps", "false", "the training loader draws its "
	     "timesteps; validation's are stratified"),
	MOVED("encoder.t5_encoder", "flux.t5_encoder"),
	MOVED("encoder.clip_encoder", "flux.clip_encoder"),
	MOVED("encoder.autoencoder_path", "flux.autoencoder_path"),
	ONLY("encoder.random_init", "false", "titan loads the encoders' weights from "
	     "encoder.t5_encoder, encoder.clip_encoder and encoder.autoencoder_path"),
	MOVED("validator.dataloader.img_size", "flux.val_img_size"),
	ONLY("validator.dataloader.prompt_dropout_prob", "0.0", "validation keeps every caption"),
	ONLY("validator.dataloader.generate_timesteps", "true", "validation's timesteps are "
	     "stratified over its samples, round-robin"),
	ONLY("validator.all_timesteps", "false", "validation samples at its own timesteps"),
	MOVED("validator.save_img_count", "flux.val_save_img_count"),
	MOVED("validator.save_img_folder", "flux.val_save_img_folder"),
	MOVED("validator.sampling.enable_classifier_free_guidance", "flux.val_cfg"),
	MOVED("validator.sampling.classifier_free_guidance_scale", "flux.val_cfg_scale"),
	MOVED("validator.sampling.denoising_steps", "flux.val_denoising_steps"),
	MOVED("inference.save_img_folder", "flux.inference_folder"),
	MOVED("inference.prompts_path", "flux.inference_prompts"),
	MOVED("inference.local_batch_size", "flux.inference_batch"),
	MOVED("inference.img_size", "flux.inference_img_size"),
	MOVED("inference.sampling.enable_classifier_free_guidance", "flux.inference_cfg"),
	MOVED("inference.sampling.classifier_free_guidance_scale", "flux.inference_cfg_scale"),
	MOVED("inference.sampling.denoising_steps", "flux.inference_denoising_steps"),
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
	ONLY("override.imports", "[]", NO_PY),
	{"loss.num_chunks", "@num_chunks", NULL, "ChunkedLossWrapper's chunks: titan computes the "
	 "output projection and the loss over chunks of rows whatever this is, so any divisor of "
	 "training.seq_len is accepted", 0},
	{"loss.loss_fn.global_vocab_size", "@global_vocab_size", NULL, "the model's vocabulary "
	 "(0.3.0's presets derive it from the model): another value is refused", 0},
	/* the same under the presets whose loss is CrossEntropyLoss itself */
	{"loss.global_vocab_size", "@global_vocab_size", NULL, "the model's vocabulary: another "
	 "value is refused", 0},
	/* MTPLoss's own (deepseek_v3_debugmodel_mtp) */
	MOVED("loss.mtp_scale", "model.mtp_scale"),
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
 * spells them (config_parse_bool), None in either case, {} and [] also empty. */
static int value_is(const char *v, const char *only)
{
	int want, got;
	if (config_parse_bool(only, &want) == 0)
		return config_parse_bool(v, &got) == 0 && got == want;
	char *ve, *oe;
	double dv = strtod(v, &ve), dov = strtod(only, &oe);
	if (*v != '\0' && *ve == '\0' && *only != '\0' && *oe == '\0')
		return dv == dov; /* numbers by value: 0 is 0.0 */
	return strcasecmp(v, only) == 0 ||
	       ((strcmp(only, "{}") == 0 || strcmp(only, "[]") == 0) && *v == '\0');
}

/* Whether loss path name belongs to the preset's loss: ChunkedLossWrapper's,
 * CrossEntropyLoss's (global_vocab_size) or MTPLoss's (that and mtp_scale). */
static int loss_path_of(const tt030_preset *p, const char *name)
{
	if (strcmp(name, "loss.mtp_scale") == 0)
		return p->plain_loss == PRESET_MTP_LOSS;
	if (strcmp(name, "loss.global_vocab_size") == 0)
		return p->plain_loss != 0;
	return p->plain_loss == 0;
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

/* The paths of 0.3.0's weighted multi-source loader
 * (InterleavedHuggingFaceTextDataLoader.Config: sources, seed,
 * stopping_strategy), which a preset of its own would bring to the CLI; a
 * titan-shard mix folder is titan's spelling of the same mixture. */
static int interleaved_path(const char *name)
{
	return !strncmp(name, "dataloader.sources.", 19) || !strcmp(name, "dataloader.seed") ||
	       !strcmp(name, "dataloader.stopping_strategy");
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
	if (t && !strncmp(name, "loss.", 5) && !loss_path_of(p, name))
		t = NULL; /* the other loss's path */
	if (t == NULL) {
		if (config_key_exists(name))
			return err_set(err, "--%s: torchtitan 0.2.2's key, and this run follows 0.3.0 "
				       "(--module/--config name a 0.3.0 preset), whose CLI has no such "
				       "path: mixing the two is refused", name);
		if (interleaved_path(name))
			return err_set(err, "--%s: InterleavedHuggingFaceTextDataLoader's, which no preset "
				       "of titan's uses; make the mixture with titan-shard mix --seed N "
				       "--weight W SRC ... --out DIR and pass --dataloader.dataset_path "
				       "DIR (titan-shard(1))", name);
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
	if (strcmp(t->key, "@param_groups") == 0)
		return config_load_param_groups(c, val, err);
	if (t->key[0] == '@')
		return set_loss(c, t, val, err);
	size_t len = strlen(t->key) + strlen(t->only ? t->only : val) + 4;
	if (!(out[*nout] = malloc(len)))
		return err_set(err, "out of memory");
	snprintf(out[(*nout)++], len, "--%s=%s", t->key, t->only ? t->only : val);
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
	if (p->refused)
		return err_set(err, "--module %s --config %s: refused: %s", module, name, p->refused);
	char label[160];
	snprintf(label, sizeof label, "preset %s", p->name);
	if (config_load_string(c, "torchtitan 0.3.0's defaults", defaults_030, err) != 0)
		return -1;
	for (int i = 0; p->toml[i]; i++)
		if (config_load_string(c, label, p->toml[i], err) != 0)
			return -1;
	c->follows_030 = 1;
	c->preset030 = p->name;
	c->loss030.chunked = p->plain_loss == 0;
	for (size_t i = 0; i < sizeof lora_presets / sizeof lora_presets[0]; i++)
		if (strcmp(p->name, lora_presets[i].name) == 0) {
			c->lora030.rank = lora_presets[i].rank;
			c->lora030.alpha = lora_presets[i].alpha;
		}
	for (size_t i = 0; i < sizeof qkv_apart / sizeof qkv_apart[0]; i++)
		c->qkv_apart030 |= strcmp(p->name, qkv_apart[i]) == 0;
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

/* A double as Python's repr writes it (json.dumps does the same): the
 * shortest digits that read back to it, positional from 1e-4 to 1e16 with
 * at least one digit after the point, else d.ddde-XX. */
static void python_float(double v, char *buf, size_t n)
{
	char e[64];
	int prec = 1;
	for (; prec < 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	snprintf(e, sizeof e, "%.*e", prec - 1, v);
	char *x = strchr(e, 'e');
	int exp = atoi(x + 1), neg = e[0] == '-';
	char digits[32];
	size_t nd = 0;
	for (const char *p = e + neg; p < x; p++)
		if (*p != '.')
			digits[nd++] = *p;
	digits[nd] = '\0';
	if (exp < -4 || exp >= 16) {
		snprintf(buf, n, "%s%c%s%s%se%c%02d", neg ? "-" : "", digits[0], nd > 1 ? "." : "",
			 digits + 1, "", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
		return;
	}
	char out[64];
	size_t o = 0;
	if (neg)
		out[o++] = '-';
	if (exp < 0) {
		out[o++] = '0', out[o++] = '.';
		for (int i = -1; i > exp; i--)
			out[o++] = '0';
		for (size_t i = 0; i < nd; i++)
			out[o++] = digits[i];
	} else {
		for (int i = 0; i <= exp; i++)
			out[o++] = (size_t)i < nd ? digits[i] : '0';
		out[o++] = '.';
		if ((size_t)exp + 1 >= nd)
			out[o++] = '0';
		for (size_t i = (size_t)exp + 1; i < nd; i++)
			out[o++] = digits[i];
	}
	out[o] = '\0';
	snprintf(buf, n, "%s", out);
}

/* The JSON printer of tt030_print_config: json.dumps(indent=2)'s layout. */
typedef struct json_out {
	FILE *f;
	char open[8][64]; /* the objects open below the top one */
	int depth;
	int first;        /* nothing written yet in the innermost object */
} json_out;

static void json_indent(json_out *j, int level)
{
	fprintf(j->f, "%*s", 2 * level, "");
}

/* Close and open objects so that path's parents (its components but the
 * last) are the open ones, then start its entry; returns the leaf's name. */
static const char *json_enter(json_out *j, const char *path)
{
	const char *comp[8];
	size_t len[8];
	int n = 0;
	for (const char *p = path; n < 8;) {
		comp[n] = p;
		const char *dot = strchr(p, '.');
		len[n++] = dot ? (size_t)(dot - p) : strlen(p);
		if (!dot)
			break;
		p = dot + 1;
	}
	int keep = 0;
	while (keep < j->depth && keep < n - 1 && strlen(j->open[keep]) == len[keep] &&
	       strncmp(j->open[keep], comp[keep], len[keep]) == 0)
		keep++;
	while (j->depth > keep) {
		fputc('\n', j->f);
		json_indent(j, j->depth--);
		fputc('}', j->f);
		j->first = 0;
	}
	for (; j->depth < n - 1; j->depth++) {
		fputs(j->first ? "\n" : ",\n", j->f);
		json_indent(j, j->depth + 1);
		fprintf(j->f, "\"%.*s\": {", (int)len[j->depth], comp[j->depth]);
		snprintf(j->open[j->depth], sizeof j->open[0], "%.*s", (int)len[j->depth],
			 comp[j->depth]);
		j->first = 1;
	}
	fputs(j->first ? "\n" : ",\n", j->f);
	json_indent(j, j->depth + 1);
	j->first = 0;
	return comp[n - 1];
}

/* A list as config_print writes it (["a", "b"]): one element a line. */
static void json_list(json_out *j, const char *text)
{
	if (strcmp(text, "[]") == 0) {
		fputs("[]", j->f);
		return;
	}
	fputc('[', j->f);
	const char *p = text + 1;
	for (int first = 1; *p == '"'; first = 0) {
		const char *q = p + 1;
		while (*q && *q != '"')
			q += *q == '\\' && q[1] ? 2 : 1;
		fputs(first ? "\n" : ",\n", j->f);
		json_indent(j, j->depth + 2);
		fprintf(j->f, "%.*s", (int)(q + 1 - p), p);
		p = q + 1;
		if (*p == ',')
			p += 2;
	}
	fputc('\n', j->f);
	json_indent(j, j->depth + 1);
	fputc(']', j->f);
}

/* Titan's value of key as 0.3.0's JSON writes it. */
static int json_key_value(json_out *j, const job_config *c, const char *key)
{
	cfg_type type;
	char *v = config_value_text(c, key, &type);
	if (v == NULL)
		return -1;
	char num[64];
	if (strcmp(v, "none") == 0)
		fputs("null", j->f);
	else if (type == CFG_FLOAT || type == CFG_OPT_FLOAT)
		python_float(strtod(v, NULL), num, sizeof num), fputs(num, j->f);
	else if (type == CFG_LIST)
		json_list(j, v);
	else
		fputs(v, j->f);
	free(v);
	return 0;
}

/* An only-path's one value: None, a boolean, {}, [], a number, or a string. */
static void json_only(json_out *j, const char *only)
{
	char *end;
	if (strcmp(only, "none") == 0)
		fputs("null", j->f);
	else if (!strcmp(only, "true") || !strcmp(only, "false") || !strcmp(only, "{}") ||
		 !strcmp(only, "[]") || (strtod(only, &end), *only && *end == '\0'))
		fputs(only, j->f);
	else
		fprintf(j->f, "\"%s\"", only);
}

/* One group's optimizer_kwargs, those given, in the order 0.3.0's presets
 * write them; d: the dict's indent. */
static void json_kwargs(FILE *f, const cfg_param_group *g, int d)
{
	const cfg_param_group_values *v = &g->v;
	char a[64], b[64], c3[64];
	const char *sep = "\n";
	fputc('{', f);
#define ITEM(bit, name) if (g->given & (bit)) { fprintf(f, "%s%*s\"%s\": ", sep, d + 2, "", name); sep = ",\n";
	ITEM(CFG_PG_LR, "lr") python_float(v->lr, a, sizeof a); fputs(a, f); }
	ITEM(CFG_PG_BETAS, "betas")
		python_float(v->beta1, a, sizeof a);
		python_float(v->beta2, b, sizeof b);
		fprintf(f, "[\n%*s%s,\n%*s%s\n%*s]", d + 4, "", a, d + 4, "", b, d + 2, "");
	}
	ITEM(CFG_PG_EPS, "eps") python_float(v->eps, a, sizeof a); fputs(a, f); }
	ITEM(CFG_PG_WEIGHT_DECAY, "weight_decay") python_float(v->weight_decay, a, sizeof a); fputs(a, f); }
	ITEM(CFG_PG_MOMENTUM, "momentum") python_float(v->momentum, a, sizeof a); fputs(a, f); }
	ITEM(CFG_PG_NESTEROV, "nesterov") fputs(v->nesterov ? "true" : "false", f); }
	ITEM(CFG_PG_NS_COEFFICIENTS, "ns_coefficients")
		python_float(v->ns_coefficients[0], a, sizeof a);
		python_float(v->ns_coefficients[1], b, sizeof b);
		python_float(v->ns_coefficients[2], c3, sizeof c3);
		fprintf(f, "[\n%*s%s,\n%*s%s,\n%*s%s\n%*s]", d + 4, "", a, d + 4, "", b, d + 4, "",
			c3, d + 2, "");
	}
	ITEM(CFG_PG_NS_STEPS, "ns_steps") fprintf(f, "%lld", (long long)v->ns_steps); }
	ITEM(CFG_PG_ADJUST_LR_FN, "adjust_lr_fn") config_print_string(v->adjust_lr_fn, f); }
#undef ITEM
	if (g->given)
		fprintf(f, "\n%*s", d, "");
	fputc('}', f);
}

/* optimizer.param_groups: the run's groups, or as 0.3.0's default_adamw
 * makes them, one group of every parameter with titan's optimizer and its
 * hyperparameters. */
static void json_param_groups(json_out *j, const job_config *c)
{
	int d = 2 * (j->depth + 1);
	if (c->optimizer.n_param_groups > 0) {
		fputc('[', j->f);
		for (int i = 0; i < c->optimizer.n_param_groups; i++) {
			const cfg_param_group *g = &c->optimizer.param_groups[i];
			fprintf(j->f, "%s\n%*s{\n%*s\"pattern\": ", i ? "," : "", d + 2, "", d + 4, "");
			config_print_string(g->pattern, j->f);
			fprintf(j->f, ",\n%*s\"optimizer_name\": ", d + 4, "");
			config_print_string(g->optimizer_name, j->f);
			fprintf(j->f, ",\n%*s\"optimizer_kwargs\": ", d + 4, "");
			json_kwargs(j->f, g, d + 4);
			fprintf(j->f, "\n%*s}", d + 2, "");
		}
		fprintf(j->f, "\n%*s]", d, "");
		return;
	}
	char lr[64], b1[64], b2[64], eps[64], wd[64];
	python_float(c->optimizer.lr, lr, sizeof lr);
	python_float(c->optimizer.beta1, b1, sizeof b1);
	python_float(c->optimizer.beta2, b2, sizeof b2);
	python_float(c->optimizer.eps, eps, sizeof eps);
	python_float(c->optimizer.weight_decay, wd, sizeof wd);
	fprintf(j->f,
		"[\n%*s{\n"
		"%*s\"pattern\": \".*\",\n%*s\"optimizer_name\": \"%s\",\n"
		"%*s\"optimizer_kwargs\": {\n%*s\"lr\": %s,\n"
		"%*s\"betas\": [\n%*s%s,\n%*s%s\n%*s],\n"
		"%*s\"eps\": %s,\n%*s\"weight_decay\": %s\n%*s}\n%*s}\n%*s]",
		d + 2, "", d + 4, "", d + 4, "", c->optimizer.name, d + 4, "", d + 6, "", lr,
		d + 6, "", d + 8, "", b1, d + 8, "", b2, d + 6, "", d + 6, "", eps, d + 6, "", wd,
		d + 4, "", d + 2, "", d, "");
}

/* Whether path belongs to this run's Trainer.Config: the loss's paths of its
 * loss class, the activation checkpointing's of its mode. */
/* Whether path is FluxTrainer.Config's own (only the flux presets have it). */
static int flux_only_path(const char *path)
{
	static const char *const prefix[] = {"tokenizer.", "encoder.", "inference.",
					     "validator.sampling.", "validator.save_img_"};
	static const char *const exact[] = {
		"dataloader.prompt_dropout_prob", "dataloader.img_size",
		"dataloader.generate_timesteps", "validator.dataloader.prompt_dropout_prob",
		"validator.dataloader.img_size", "validator.dataloader.generate_timesteps",
		"validator.all_timesteps"};
	for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
		if (strncmp(path, prefix[i], strlen(prefix[i])) == 0)
			return 1;
	for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
		if (strcmp(path, exact[i]) == 0)
			return 1;
	return 0;
}

static int path_applies(const job_config *c, const tt030_preset *p, const char *path)
{
	const char *mode = c->activation_checkpoint.mode;
	int none = mode && strcmp(mode, "none") == 0, flux = strcmp(p->module, "flux") == 0;
	if (flux_only_path(path))
		return flux;
	if (strncmp(path, "loss.", 5) == 0)
		return !flux && loss_path_of(p, path); /* Flux's MSELoss has no fields */
	if (strcmp(path, "activation_checkpoint") == 0)
		return none;
	if (strcmp(path, "activation_checkpoint.force_recompute_mm_shapes_by_fqns") == 0)
		return mode && strcmp(mode, "selective") == 0;
	if (strncmp(path, "activation_checkpoint.", 22) == 0)
		return !none;
	return 1;
}

/* A value a preset writes as an int where the class has a float (0 for 0.0):
 * its JSON as 0.3.0 prints it, or NULL. */
static const char *written_as(const tt030_preset *p, const char *path)
{
	static const struct {
		const char *preset, *path, *json;
	} ints[] = {
		{"flux_dev", "validator.dataloader.prompt_dropout_prob", "0"},
		{"flux_schnell", "validator.dataloader.prompt_dropout_prob", "0"},
	};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if (strcmp(p->name, ints[i].preset) == 0 && strcmp(path, ints[i].path) == 0)
			return ints[i].json;
	return NULL;
}

/* Whether the preset's own config sets model.flavor to flavor: 0.3.0's name
 * for the model is p->flavor then, and not once titan-train --flavor has
 * named another. */
static int sets_flavor(const tt030_preset *p, const char *flavor)
{
	char line[96];
	snprintf(line, sizeof line, "\nflavor = \"%s\"\n", flavor);
	return strstr(p->toml[0], line) != NULL;
}

int tt030_print_config(const job_config *c, int64_t vocab, FILE *out)
{
	const tt030_preset *p = NULL;
	for (size_t i = 0; c->preset030 && i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].name, c->preset030) == 0)
			p = &presets[i];
	if (p == NULL)
		return -1;
	json_out j = {.f = out, .first = 1};
	fputs("Running with configs: {", out);
	json_enter(&j, "model_spec.name");
	fprintf(out, "\"name\": \"%s\"", c->model.name);
	json_enter(&j, "model_spec.flavor");
	fprintf(out, "\"flavor\": \"%s\"",
		p->flavor && sets_flavor(p, c->model.flavor) ? p->flavor : c->model.flavor);
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		const tt030_path *t = &paths[i];
		int groups = strcmp(t->path, "optimizer.param_groups") == 0;
		if ((!groups && (t->refused || (!t->key && !t->only))) || !path_applies(c, p, t->path))
			continue;
		fprintf(out, "\"%s\": ", json_enter(&j, t->path));
		if (groups)
			json_param_groups(&j, c);
		else if (written_as(p, t->path))
			fputs(written_as(p, t->path), out);
		else if (t->only)
			json_only(&j, t->only);
		else if (strcmp(t->key, "@num_chunks") == 0)
			fprintf(out, "%lld", (long long)(c->loss030.num_chunks ? c->loss030.num_chunks : 8));
		else if (t->key[0] == '@')
			fprintf(out, "%lld", (long long)(c->loss030.global_vocab_size
							 ? c->loss030.global_vocab_size : vocab));
		else if (json_key_value(&j, c, t->key) != 0)
			return -1;
	}
	while (j.depth > 0) {
		fputc('\n', out);
		json_indent(&j, j.depth--);
		fputc('}', out);
	}
	return fputs("\n}\n", out) < 0 ? -1 : 0;
}

int tt030_list_presets(FILE *out)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		const tt030_preset *p = &presets[i];
		const char *why = p->refused ? p->refused : p->note ? p->note : "-";
		if (fprintf(out, "%s\t%s\t%s\t%s\n", p->module, p->name,
			    p->refused ? "refused" : "honoured", why) < 0)
			return -1;
	}
	return 0;
}

const char *tt030_preset_refusal(const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].name, name) == 0)
			return presets[i].refused;
	return NULL;
}
