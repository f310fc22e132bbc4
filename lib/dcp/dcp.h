/* dcp.h: PyTorch Distributed Checkpoint (DCP) folders, written and read as
 * torch.distributed.checkpoint's FileSystemWriter / FileSystemReader do, so that
 * torch (dcp.load, format_utils.dcp_to_torch_save) and torchtitan read what
 * titan writes and titan reads what they write, on any world size.
 *
 * A checkpoint is a folder:
 *   .metadata        pickle of torch.distributed.checkpoint.metadata.Metadata:
 *                    every key's global shape, dtype and chunk list, and for
 *                    every chunk the file, offset and length that hold it
 *   __R_0.distcp     rank R's items back to back; each item is one complete
 *                    torch.save stream (a tensor chunk, or a pickled Python value)
 *
 * A state dict is a flat list of items.  A tensor item is one rank's chunk of
 * a tensor (a box given by offsets and sizes inside the global shape, stored
 * row-major and contiguous); a bytes item is a small Python value already in
 * torch.save form (the dcp_value_* helpers below make them).
 *
 * The keys torchtitan v0.2.2 writes (CheckpointManager flattens the model's
 * state dict to the top level; DCP flattens nested dicts with "."), which
 * titan-train uses so either side can resume the other's checkpoint:
 *   tok_embeddings.weight, layers.{i}.attention.w{q,k,v,o}.weight,
 *   layers.{i}.feed_forward.w{1,2,3}.weight, layers.{i}.attention_norm.weight,
 *   layers.{i}.ffn_norm.weight, norm.weight, output.weight      tensors, fp32
 *   optimizer.state.{fqn}.step         tensor, float32, shape () (AdamW's step)
 *   optimizer.state.{fqn}.exp_avg      tensor, float32, the parameter's shape
 *   optimizer.state.{fqn}.exp_avg_sq   tensor, float32, the parameter's shape
 *   optimizer.param_groups.{fqn}.{lr, eps, weight_decay, initial_lr}  float
 *   optimizer.param_groups.{fqn}.betas                                tuple of 2 floats
 *   optimizer.param_groups.{fqn}.{amsgrad, maximize, capturable, differentiable,
 *       fused, decoupled_weight_decay}                                bool
 *   optimizer.param_groups.{fqn}.foreach                              None (or bool)
 *       (torch.distributed.checkpoint.state_dict with
 *        flatten_optimizer_state_dict=True: one "group" per parameter FQN)
 *   lr_scheduler.base_lrs      list of floats [lr]       (LambdaLR.state_dict())
 *   lr_scheduler.last_epoch    int (the step)
 *   lr_scheduler._step_count   int (step + 1)
 *   lr_scheduler._is_initial   bool (False once stepped; torch >= 2.6 writes it)
 *   lr_scheduler._get_lr_called_within_step  bool False
 *   lr_scheduler._last_lr      list of floats [current lr]
 *   lr_scheduler.lr_lambdas    list [None]
 *   dataloader.dp_rank_{r}     bytes (torchtitan: pickle.dumps of the loader state)
 *   dataloader.world_size      int (dp degree)
 *   train_state.step           int
 *   train_state.ntokens_seen   int
 * Lists and tuples of plain values are one item each; dicts are flattened.
 * A model-only checkpoint (the last save with last_save_model_only, or the
 * step-0 seed checkpoint) holds just the model keys, possibly in bfloat16.
 *
 * Saving, and why a crash never destroys the previous checkpoint: every rank
 * writes into the staging folder DIR.partial (its __R_0.distcp, fsynced, and a
 * small sidecar __R.titan-chunks describing its items).  After all ranks are
 * done (the caller's barrier), rank 0's dcp_save_commit() merges the sidecars
 * into .metadata (written to .metadata.tmp, fsynced, renamed), removes the
 * sidecars and renames DIR.partial to DIR, fsyncing the parent folder.  Until
 * that rename nothing under DIR changes, and a folder counts as a checkpoint
 * only when its .metadata exists (torchtitan's rule too), so an interrupted
 * save leaves a DIR.partial that discovery ignores and the next save replaces.
 * Older step folders are removed only by dcp_purge() after a save committed. */
#ifndef TITAN_DCP_H
#define TITAN_DCP_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "pickle/pickle.h"
#include "ptzip/ptzip.h"
#include "safetensors/safetensors.h"

#define DCP_MAX_DIM 8

typedef ptz_dtype dcp_dtype; /* PTZ_F32, PTZ_BF16, PTZ_F16, PTZ_F64, PTZ_I64, ... */

typedef enum dcp_kind { DCP_TENSOR = 0, DCP_BYTES = 1 } dcp_kind;

typedef struct dcp_item {
	const char *fqn;               /* flattened key, e.g. "layers.0.attention.wq.weight" */
	dcp_kind kind;
	/* DCP_TENSOR */
	dcp_dtype dtype;               /* of data (save: also the stored type) */
	int ndim;                      /* 0 .. DCP_MAX_DIM; 0 is a scalar */
	int64_t shape[DCP_MAX_DIM];    /* global shape */
	int64_t offsets[DCP_MAX_DIM];  /* this rank's chunk: first index in each dim */
	int64_t sizes[DCP_MAX_DIM];    /* this rank's chunk: extent in each dim */
	void *data;                    /* the chunk, row-major contiguous, prod(sizes)
	                                  elements of dtype.  save: read; load: filled
	                                  (converted from the stored dtype if needed) */
	/* DCP_BYTES */
	uint8_t *bytes;                /* torch.save stream of the value.  save: read;
	                                  load: malloc'd by dcp_load, the caller frees */
	size_t nbytes;
	/* save, optional: the nesting torch's format_utils.dcp_to_torch_save rebuilds
	 * (Metadata.planner_data).  NULL: split after a leading "optimizer.",
	 * "lr_scheduler.", "dataloader." or "train_state." as torchtitan's nesting
	 * is, else the key alone. */
	const char *const *path;
	int npath;
	/* load only */
	int optional;                  /* absent from the checkpoint is not an error */
	int found;                     /* set by dcp_load */
} dcp_item;

/* Fill a tensor item whose chunk is the whole tensor (a replicated or
 * unsharded tensor).  fqn and data are borrowed. */
void dcp_item_full(dcp_item *it, const char *fqn, dcp_dtype dtype, int ndim,
		   const int64_t *shape, void *data);

/* "(4096, 14336)", "(256)", "()": a shape for messages, cut to cap bytes. */
void dcp_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape);

/* Saving ------------------------------------------------------------------ */

typedef struct dcp_save_opts {
	int async;        /* write on a background thread; dcp_save_wait joins it */
	int copy;         /* async: copy the tensors first (like torchtitan's
	                     async_with_pinned_mem) into a staging buffer kept for
	                     the next save, so the caller may change them as soon as
	                     dcp_save_begin returns; otherwise the data must stay
	                     valid and unchanged until dcp_save_wait */
	int no_fsync;     /* skip fsync (tests, benchmarks of the page cache) */
} dcp_save_opts;

typedef struct dcp_saver dcp_saver;

/* Rank `rank` of `world` writes its items into DIR.partial.  Every (fqn,
 * chunk) must be given by exactly one rank (pass a replicated tensor or a
 * bytes item on one rank only, e.g. rank 0; dataloader.dp_rank_R on its own
 * rank).  The items and their fqn strings are copied; the data is not unless
 * opts->copy.  Returns a handle for dcp_save_wait, or NULL on error. */
dcp_saver *dcp_save_begin(const char *dir, int rank, int world, const dcp_item *items,
			  size_t n, const dcp_save_opts *opts, titan_err *err);
/* Wait for this rank's writing to finish (fsynced) and free the handle. */
int dcp_save_wait(dcp_saver *s, titan_err *err);
/* Rank 0, after every rank's dcp_save_wait returned 0: write .metadata and move
 * DIR.partial to DIR (an existing DIR is replaced). */
int dcp_save_commit(const char *dir, int world, titan_err *err);
/* begin + wait + commit for one process (world 1). */
int dcp_save(const char *dir, const dcp_item *items, size_t n, const dcp_save_opts *opts,
	     titan_err *err);

/* Loading (resharding) ------------------------------------------------------ */

/* Fill every item from the checkpoint at DIR.  A tensor item names the chunk
 * this rank wants (any box of the global shape, whatever chunking the
 * checkpoint was saved with) and the dtype wanted; the global shape must match.
 * Bytes items get a malloc'd copy of the stored stream.  A key absent from
 * the checkpoint is an error unless the item is optional. */
int dcp_load(const char *dir, dcp_item *items, size_t n, titan_err *err);

/* Inspecting --------------------------------------------------------------- */

typedef struct dcp_chunk {
	int64_t offsets[DCP_MAX_DIM];
	int64_t sizes[DCP_MAX_DIM];
	char *file;          /* relative path, e.g. "__1_0.distcp" */
	uint64_t offset;     /* of the torch.save stream in file */
	uint64_t length;
} dcp_chunk;

typedef struct dcp_entry {
	char *fqn;
	dcp_kind kind;
	dcp_dtype dtype;     /* tensors */
	int ndim;
	int64_t shape[DCP_MAX_DIM];
	dcp_chunk *chunks;   /* tensors: the chunk list; bytes: one entry (sizes unused) */
	size_t n_chunks;
	char **path;         /* planner_data's nesting for this key, or NULL */
	int npath;
} dcp_entry;

typedef struct dcp_ckpt {
	char *dir;
	dcp_entry *entries;  /* in .metadata's order */
	size_t n;
	char *version;       /* Metadata.version ("1.0.0"), NULL when absent (older torch) */
	struct dcp_files *files; /* mapped data files (private) */
	struct strmap *index;    /* fqn -> entry (private) */
} dcp_ckpt;

/* Read DIR/.metadata. */
int dcp_open(dcp_ckpt *c, const char *dir, titan_err *err);
void dcp_close(dcp_ckpt *c);
const dcp_entry *dcp_find(const dcp_ckpt *c, const char *fqn);
/* dcp_load from a checkpoint already open (dcp_open), which stays open: for a
 * caller that reads its metadata first (which names its keys). */
int dcp_load_open(dcp_ckpt *c, dcp_item *items, size_t n, titan_err *err);

/* Loading shared by the ranks of a job.  A storage record's CRC-32 covers the
 * whole record, so a rank that wants a few rows of a tensor saved whole (a
 * resharded load, 1 -> N) would read all of it to check them, and N ranks
 * the file N times.  Instead each rank reads only its rows, notes their
 * CRC-32 as a part, and the ranks' parts, gathered, check the record.  A part
 * is plain bytes, the same on every rank of a job, to be exchanged as is. */
typedef struct dcp_part {
	char file[64];       /* the data file, relative to the folder */
	uint64_t record;     /* the storage record's offset in the file */
	uint64_t record_len; /* its length */
	uint64_t off, len;   /* the part: bytes [off, off + len) of the record */
	uint32_t record_crc; /* the record's stored CRC-32 */
	uint32_t crc;        /* the part's */
} dcp_part;

typedef struct dcp_parts {
	dcp_part *p;
	/* for messages, this rank's alone: where each part's chunk is ("FILE at
	 * OFFSET (fqn)") and its storage record's name in the zip */
	struct dcp_part_at {
		char *where, *record;
	} *at;
	size_t n, cap;
} dcp_parts;

/* dcp_load_open, except that a stored chunk of which this rank wants whole
 * rows is read only in those rows, unchecked: the part is added to parts, to
 * be checked by dcp_parts_check once every rank's are gathered.  Every other
 * record is read whole and checked as dcp_load_open does. */
int dcp_load_parts(dcp_ckpt *c, dcp_item *items, size_t n, dcp_parts *parts, titan_err *err);
/* Check every record this rank read a part of (mine) against all (n_all
 * parts, every rank's, mine among them): where the parts of a record tile it,
 * their CRC-32s joined must be the record's; where they do not (a rank that
 * failed, rows wanted twice), the record is read here whole from DIR. */
int dcp_parts_check(const char *dir, const dcp_parts *mine, const dcp_part *all, size_t n_all,
		    titan_err *err);
void dcp_parts_free(dcp_parts *p);

/* Read the box (offsets, sizes) of a tensor entry, converted to dtype. */
int dcp_read_region(dcp_ckpt *c, const dcp_entry *e, const int64_t *offsets,
		    const int64_t *sizes, dcp_dtype dtype, void *out, titan_err *err);
/* The stored torch.save stream of a bytes entry (points into a mapped file,
 * valid until dcp_close). */
int dcp_read_bytes(dcp_ckpt *c, const dcp_entry *e, const uint8_t **p, size_t *n,
		   titan_err *err);
/* Check that every tensor's chunks cover it exactly once and every chunk's
 * stream is a readable torch.save zip of the right dtype and shape. */
int dcp_verify(dcp_ckpt *c, titan_err *err);

/* Step folders ------------------------------------------------------------- */

/* The largest N such that FOLDER/step-N/.metadata exists (or, for a last
 * save in HF safetensors as torchtitan's last_save_in_hf writes it,
 * step-N/model.safetensors.index.json); -1 when none (or no FOLDER), -2 on
 * error. */
int64_t dcp_latest_step(const char *folder, titan_err *err);
/* Whether a step folder holds HF safetensors (an index, no .metadata). */
int dcp_is_hf_step(const char *dir);
/* Remove all but the newest k complete step-N folders (and any step-N.partial
 * older than the newest complete one).  k <= 0 keeps everything.  A folder is
 * renamed out of sight before it is deleted, so a kill never leaves a step
 * that looks complete but is not; dcp_clean_stale runs first. */
int dcp_purge(const char *folder, int keep_latest_k, titan_err *err);
/* Remove the step-N.old.PID folders left when a process was killed while it
 * replaced or purged a step (PID gone, or this process). */
int dcp_clean_stale(const char *folder, titan_err *err);

/* Any checkpoint as a flat list of named items ----------------------------- */

/* A source is a DCP folder (it holds .metadata), a torch.save file (.pt,
 * .pth, .bin: a possibly nested dict of tensors and plain values, as
 * format_utils.dcp_to_torch_save writes), a .safetensors file, or a folder of
 * safetensors (model.safetensors.index.json or model.safetensors).  Nested
 * dicts are flattened with "." like DCP does; path keeps the nesting. */
typedef struct dcp_src_item {
	char *name;
	dcp_kind kind;
	dcp_dtype dtype;
	int ndim;
	int64_t shape[DCP_MAX_DIM];
	char **path;
	int npath;
	const void *priv;
	const void *view; /* private: a view of 0.3.0's fused q/k/v (source.c) */
} dcp_src_item;

typedef struct dcp_source dcp_source;

int dcp_source_open(dcp_source **s, const char *path, titan_err *err);
void dcp_source_close(dcp_source *s);
size_t dcp_source_count(const dcp_source *s);
const dcp_src_item *dcp_source_item(const dcp_source *s, size_t i);
const dcp_src_item *dcp_source_find(const dcp_source *s, const char *name);
/* Read a whole tensor, converted to dtype (out holds numel elements). */
int dcp_source_read(dcp_source *s, const dcp_src_item *it, void *out, dcp_dtype dtype,
		    titan_err *err);
/* A bytes item as a torch.save stream (*out malloc'd). */
int dcp_source_bytes(dcp_source *s, const dcp_src_item *it, uint8_t **out, size_t *n,
		     titan_err *err);
/* A source is read under torchtitan 0.2.2's names whatever it was saved
 * under: dcp_source_is_030 says whether that was 0.3.0's
 * (dcp_name_030); dcp_source_names respells its items (and their planner
 * paths) as 0.3.0's (names_030) or back, for a conversion writing them so. */
int dcp_source_is_030(const dcp_source *s);
int dcp_source_names(dcp_source *s, int names_030, titan_err *err);
/* 0.3.0 fuses a GQA attention's q, k and v into one parameter,
 * qkv_linear.wqkv, whose optimizer state is stored fused (its model state
 * dict splits the weight back into wq, wk, wv): rows per kv group g are
 * the group's n_heads / n_kv_heads query heads, then its k head, then its v
 * head, head_dim rows each.  Under 0.2.2's names a source shows that state
 * as attention.wq, wk, wv's (and the fused tensor's step and param_groups
 * under each); under 0.3.0's, attention.wq, wk, wv's state as the fused
 * tensor's.  Both need the head dim: a source knows it from a q_norm
 * (Qwen3), or from dcp_source_set_head_dim; until then the fused state
 * keeps its stored name, and dcp_source_names(s, 1) of a 0.2.2 source with
 * wq's optimizer state fails asking for it. */
int dcp_source_set_head_dim(dcp_source *s, int64_t head_dim, titan_err *err);
/* The items under the names and layout they were stored with (for info):
 * 0.3.0's names back, and fused state split on open fused again. */
int dcp_source_as_stored(dcp_source *s, titan_err *err);
/* Whether the source holds fused q/k/v state not yet split (no head dim). */
int dcp_source_has_fused_qkv(const dcp_source *s);
/* The row of 0.3.0's fused wqkv that row r of wq (slot 0), wk (1) or wv (2)
 * is, with hpk query heads per kv head of hd rows. */
int64_t dcp_qkv_fused_row(int slot, int64_t r, int64_t hpk, int64_t hd);
/* Whether a flattened key is model state (not optimizer., lr_scheduler.,
 * dataloader. or train_state.). */
int dcp_is_model_key(const char *name);

/* torchtitan 0.3.0's names --------------------------------------------------
 * 0.3.0 renamed model tensors (the layout, shapes and values are 0.2.2's):
 * output.weight -> lm_head.weight; attention.w{q,k,v}.* -> attention.
 * qkv_linear.w{q,k,v}.* (not MLA's wq: DeepSeek V3 keeps attention.wq);
 * moe.experts.w1, w2, w3 -> moe.routed_experts.inner_experts.w1_EFD, w2_EDF,
 * w3_EFD (GPT-OSS's mlp1_weight, mlp1_bias, mlp2_weight, mlp2_bias -> _EGD,
 * _EG, _EDF, _ED); moe.expert_bias -> moe.expert_bias_E.  Prefixes (optimizer.
 * state.) pass through.  Each returns its result in buf (n bytes), or name
 * itself when unchanged or too long. */
const char *dcp_name_030(const char *name, int mla, char *buf, size_t n);
const char *dcp_name_022(const char *name, char *buf, size_t n);
/* Whether the open checkpoint names its model tensors 0.3.0's way. */
int dcp_names_are_030(const dcp_ckpt *c);

/* Conversions ------------------------------------------------------------- */

typedef struct dcp_convert_opts {
	int model_only;          /* keep model keys only (torchtitan's last_save_model_only) */
	dcp_dtype export_dtype;  /* cast floating-point tensors to this; PTZ_NONE keeps */
	int chunks;              /* to DCP: split every tensor of >= 1 dim into this many
	                            pieces along `dim` (torch.chunk's sizes), piece i
	                            written by "rank" i; 0 or 1: whole tensors, rank 0 */
	int dim;
	int verbose;             /* progress lines on stderr */
	int names;               /* the output's tensor names: DCP_NAMES_SOURCE (the
	                            source's), DCP_NAMES_022 or DCP_NAMES_030 */
	int64_t head_dim;        /* of 0.3.0's fused q/k/v (dcp_source_set_head_dim);
	                            0: the source's own (a q_norm's) if any */
} dcp_convert_opts;
enum { DCP_NAMES_SOURCE, DCP_NAMES_022, DCP_NAMES_030 };

/* Write SRC (any source) as a DCP folder at OUT (through OUT.partial). */
int dcp_convert_to_dcp(const char *src, const char *out, const dcp_convert_opts *o,
		       titan_err *err);
/* Write SRC as one torch.save file (nested as planner_data says, like
 * format_utils.dcp_to_torch_save; loadable with torch.load(weights_only=True)). */
int dcp_convert_to_torch(const char *src, const char *out, const dcp_convert_opts *o,
			 titan_err *err);
/* Write SRC's tensors as one safetensors file (bytes items are left out;
 * *skipped counts them). */
int dcp_convert_to_safetensors(const char *src, const char *out, const dcp_convert_opts *o,
			       size_t *skipped, titan_err *err);

/* Hugging Face export and import (LlamaForCausalLM, or a family's) ---------- */

/* One weight's name in torchtitan's state dict and in Hugging Face's, as
 * torchtitan's StateDictAdapter maps them: "{}" stands for the layer number,
 * e.g. {"layers.{}.attention.wq.weight", "model.layers.{}.self_attn.q_proj.weight",
 * DCP_HF_ROPE_Q}.  A family's table ends with {NULL}. */
enum dcp_hf_kind {
	DCP_HF_PLAIN,   /* the same tensor */
	DCP_HF_ROPE_Q,  /* wq: rows permuted per query head (dcp_rope_permute) */
	DCP_HF_ROPE_K,  /* wk: rows permuted per kv head */
	DCP_HF_EXPERTS, /* torchtitan's (experts, a, b) stack <-> one HF tensor (a, b)
	                   per expert; hf has a second "{}", the expert */
	DCP_HF_DROP,    /* a torchtitan buffer HF has no place for (expert_bias):
	                   to-hf leaves it out; hf is NULL */
	DCP_HF_TRANSPOSE, /* torchtitan's (experts, out, in) <-> HF's fused (experts, in,
	                     out): the last two dims swapped (GPT-OSS, Llama 4) */
	DCP_HF_GATE_HALF, /* torchtitan's w1 (experts, f, dim) <-> the first half of HF's
	                     fused gate_up_proj (experts, dim, 2f), transposed (Llama 4);
	                     the table's next entry is its DCP_HF_UP_HALF, same hf */
	DCP_HF_UP_HALF,   /* w3 <-> the second half */
};
typedef struct dcp_hf_key {
	const char *titan, *hf;
	int kind; /* enum dcp_hf_kind */
} dcp_hf_key;

/* Rows that every family's table shares, as torchtitan's adapters name them:
 * the embedding, the final norm and the output; a layer's two norms; an
 * attention projection ("wq", "q" -> layers.{}.attention.wq.weight <->
 * model.layers.{}.self_attn.q_proj.weight) and its bias; a dense feed-forward
 * projection under HF's module name ("mlp" or "feed_forward"); the routed
 * experts as one HF tensor each with the router (Qwen3-MoE, DeepSeek V3). */
#define DCP_HF_KEYS_EDGES                                                       \
	{"tok_embeddings.weight", "model.embed_tokens.weight", DCP_HF_PLAIN},   \
	{"norm.weight", "model.norm.weight", DCP_HF_PLAIN},                     \
	{"output.weight", "lm_head.weight", DCP_HF_PLAIN}
#define DCP_HF_KEYS_LAYER_NORMS                                                 \
	{"layers.{}.attention_norm.weight", "model.layers.{}.input_layernorm.weight", \
	 DCP_HF_PLAIN},                                                         \
	{"layers.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight", \
	 DCP_HF_PLAIN}
#define DCP_HF_KEY_ATTN(titan, hf, kind)                                        \
	{"layers.{}.attention." titan ".weight",                                \
	 "model.layers.{}.self_attn." hf "_proj.weight", kind}
#define DCP_HF_KEY_ATTN_BIAS(titan, hf)                                         \
	{"layers.{}.attention." titan ".bias", "model.layers.{}.self_attn." hf "_proj.bias", \
	 DCP_HF_PLAIN}
#define DCP_HF_KEYS_FFN(module)                                                 \
	{"layers.{}.feed_forward.w1.weight", "model.layers.{}." module ".gate_proj.weight", \
	 DCP_HF_PLAIN},                                                         \
	{"layers.{}.feed_forward.w2.weight", "model.layers.{}." module ".down_proj.weight", \
	 DCP_HF_PLAIN},                                                         \
	{"layers.{}.feed_forward.w3.weight", "model.layers.{}." module ".up_proj.weight", \
	 DCP_HF_PLAIN}
#define DCP_HF_KEYS_EXPERTS_PER_EXPERT                                          \
	{"layers.{}.moe.experts.w1", "model.layers.{}.mlp.experts.{}.gate_proj.weight", \
	 DCP_HF_EXPERTS},                                                       \
	{"layers.{}.moe.experts.w2", "model.layers.{}.mlp.experts.{}.down_proj.weight", \
	 DCP_HF_EXPERTS},                                                       \
	{"layers.{}.moe.experts.w3", "model.layers.{}.mlp.experts.{}.up_proj.weight", \
	 DCP_HF_EXPERTS},                                                       \
	{"layers.{}.moe.router.gate.weight", "model.layers.{}.mlp.gate.weight", DCP_HF_PLAIN}

/* LlamaForCausalLM's table (torchtitan's Llama3StateDictAdapter). */
extern const dcp_hf_key dcp_hf_llama_keys[];

struct json_t;
typedef struct dcp_hf_model {
	int dim, n_layers, n_heads, n_kv_heads, vocab_size, ffn_hidden, head_dim;
	double norm_eps, rope_theta, rope_scale_factor;
	int tied, max_seq_len;
	int n_experts, top_k, moe_inter, route_norm; /* mixture of experts (0: none);
	                                                 n_experts, moe_inter inferred */
	int dense_layers;       /* inferred: the layers before the first with experts */
	int mtp_layers;         /* inferred: DeepSeek V3's multi-token prediction depths,
	                           titan's mtp_layers.<k>, HF's model.layers.<n_layers + k> */
	int q_lora, kv_lora, qk_nope, qk_rope, v_head; /* inferred: multi-head latent
	                                                 attention's dims (kv_lora 0: none) */
	const dcp_hf_key *keys; /* the family's names; NULL: Llama's */
	const struct llama_args *args; /* the flavor, for a family's config writer
	                                  (MLA, RoPE scaling, attention options); may
	                                  be NULL */
	/* The model the weights are for (dcp_hf_read): NULL, or its tensors'
	 * names and shapes, which every weight read must have, none missing
	 * (output.weight aside when the model ties it): the one check behind
	 * titan-train's checkpoint.initial_load_in_hf and titan-ckpt-convert
	 * from-hf --flavor. */
	const struct model *model;
	/* The family's config.json: add its own keys (architectures, model_type,
	 * ...) to c, which holds torch_dtype and the keys every decoder has
	 * (sizes, heads, norm eps, rope_theta, tie_word_embeddings, ...; a key
	 * set again replaces them); NULL: LlamaForCausalLM's. */
	int (*config)(struct json_t *c, const struct dcp_hf_model *m);
} dcp_hf_model;

/* Key names through a table (NULL: Llama's): "layers.3.attention.wq.weight" <->
 * "model.layers.3.self_attn.q_proj.weight"; *kind is the key's dcp_hf_kind.
 * NULL when the key is not in the table.  The result is malloc'd. */
char *dcp_hf_key_name(const dcp_hf_key *keys, const char *name, int to_hf, int *kind);
/* One side of a table's entry against a name: whether name is pat with
 * each "{}" a decimal number (the numbers in nums, *nn of them, at most 4);
 * and pat with its "{}" replaced by nums in order (malloc'd, NULL when out
 * of memory).  For a model outside lib/model's families (Flux) with a table
 * of its own. */
int dcp_hf_match(const char *pat, const char *name, long *nums, int *nn);
char *dcp_hf_format(const char *pat, const long *nums, int nn);
/* The same through Llama's table (*rope 1 for wq, 2 for wk, else 0). */
char *dcp_hf_name(const char *name, int to_hf, int *rope);
/* The RoPE row permutation of wq / wk, W of shape (d1, d2) with n heads:
 * to HF W.view(n, d1/n/2, 2, d2).transpose(1, 2); from HF the inverse. */
void dcp_rope_permute(const void *src, void *dst, int64_t d1, int64_t d2, int n, int to_hf,
		      size_t es);
/* SRC's model weights as an HF folder: config.json, model.safetensors or
 * shards of at most max_shard bytes with model.safetensors.index.json.  The
 * shapes are taken from SRC; model supplies heads, rope and norm settings
 * (zero dims are inferred; nonzero ones are checked). */
int dcp_to_hf(const char *src, const char *outdir, const dcp_hf_model *model,
	      dcp_dtype export_dtype, uint64_t max_shard, titan_err *err);
/* An HF Llama folder (or .safetensors) as a model-only DCP folder with
 * torchtitan's keys, in dtype (PTZ_NONE keeps the stored types), under 0.3.0's
 * names when names is DCP_NAMES_030 (0.2.2's otherwise). */
int dcp_from_hf(const char *hfdir, const char *out, const dcp_hf_model *model, dcp_dtype dtype,
		int names, titan_err *err);

/* Called with each weight of an HF Llama under torchtitan's name; data is
 * malloc'd and belongs to the callee. */
typedef int (*dcp_hf_tensor_fn)(void *ctx, const char *name, dcp_dtype dtype, int ndim,
				const int64_t *shape, void *data, titan_err *err);
/* A dcp_hf_tensor_fn that keeps each tensor as a whole-tensor item (name
 * copied, data taken), for a dcp_save of them all; dcp_collect_free frees
 * the names and data. */
typedef struct dcp_collect {
	dcp_item *items;
	size_t n, cap;
} dcp_collect;
int dcp_collect_tensor(void *ctx, const char *name, dcp_dtype dtype, int ndim,
		       const int64_t *shape, void *data, titan_err *err);
void dcp_collect_free(dcp_collect *c);
/* Read the weights of an HF Llama folder (or .safetensors) one at a time, as
 * torchtitan's Llama3StateDictAdapter.from_hf gives them: torchtitan's names,
 * wq / wk rows permuted back, in dtype (PTZ_NONE: as stored); RoPE buffers
 * left out.  A missing lm_head.weight is the embedding when the folder's
 * config.json sets tie_word_embeddings (model->tied without a config.json),
 * and an error otherwise.  Every weight must be stored as a floating-point
 * type (an integer or boolean tensor is refused with its name, not cast);
 * with model->model set, each must be one of the model's tensors or buffers
 * (expert_bias) with its shape, and no tensor may be missing (a buffer may).
 * DeepSeek V3's depths (model.layers.<n_layers + k>) come as mtp_layers.<k>.*,
 * their own copies of the embedding and head (embed_tokens,
 * shared_head.head) left out.  Messages start with hfdir. */
int dcp_hf_read(const char *hfdir, const dcp_hf_model *model, dcp_dtype dtype, dcp_hf_tensor_fn fn,
		void *ctx, titan_err *err);
/* Write model weights (torchtitan's names, as in a checkpoint) as torchtitan's
 * last_save_in_hf does: HF names, wq / wk permuted, cast to export_dtype
 * (PTZ_NONE keeps), lm_head left out when model->tied; in DIR, files
 * model-0000K-of-0000M.safetensors numbered as index_json's weight_map
 * numbers them (an HF model's model.safetensors.index.json, as torchtitan's
 * fqn_to_index_mapping), or one file when index_json is NULL, and
 * DIR/model.safetensors.index.json.  Written in DIR.partial and renamed. */
int dcp_hf_save(const char *dir, const st_item *items, size_t n, const dcp_hf_model *model,
		dcp_dtype export_dtype, const char *index_json, titan_err *err);

/* HF tensors being gathered for a write: push takes name and data (malloc'd;
 * freed by dcp_hf_out_free, or by the caller when push fails). */
typedef struct dcp_hf_out {
	st_item *items;
	size_t n, cap;
} dcp_hf_out;
st_item *dcp_hf_out_push(dcp_hf_out *o, char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			 void *data, titan_err *err);
void dcp_hf_out_free(dcp_hf_out *o);
/* The second half of dcp_hf_save, for tensors already under HF's names
 * (another model's adapter, Flux's): the same files, index and staging. */
int dcp_hf_write(const char *dir, const st_item *items, size_t n, const char *index_json,
		 titan_err *err);

/* Python values as torch.save streams (what DCP stores for non-tensors) ------ */

/* Serialise a value built with the pk_* builders (None, bool, int, float, str,
 * bytes, and tuples / lists / dicts of them) as torch.save(value) does.
 * *out is malloc'd. */
int dcp_value_save(const pk_val *v, uint8_t **out, size_t *n, titan_err *err);
int dcp_value_int(int64_t v, uint8_t **out, size_t *n, titan_err *err);
int dcp_value_float(double v, uint8_t **out, size_t *n, titan_err *err);
int dcp_value_bool(int v, uint8_t **out, size_t *n, titan_err *err);
int dcp_value_none(uint8_t **out, size_t *n, titan_err *err);
int dcp_value_str(const char *s, uint8_t **out, size_t *n, titan_err *err);
int dcp_value_pybytes(const void *p, size_t len, uint8_t **out, size_t *n, titan_err *err);
/* A list (tuple when as_tuple) of floats. */
int dcp_value_floats(const double *v, size_t len, int as_tuple, uint8_t **out, size_t *n,
		     titan_err *err);

/* torch's AdamW (Adam when adam: decoupled_weight_decay False) param group
 * as torch.distributed.checkpoint's flatten_optimizer_state_dict stores it
 * for each parameter FQN (optimizer.param_groups.{fqn}.{key}): the values of
 * dcp_adamw_group_keys in that order, as torch.save streams (vals[k]
 * malloc'd, lens[k] bytes; all NULL on error).  lr is the current step's,
 * initial_lr the configured one (LambdaLR's). */
#define DCP_ADAMW_GROUP_KEYS 12
extern const char *const dcp_adamw_group_keys[DCP_ADAMW_GROUP_KEYS];
typedef struct dcp_adamw_group {
	double lr, initial_lr, eps, weight_decay, beta1, beta2;
	int adam;
} dcp_adamw_group;
int dcp_adamw_group_values(const dcp_adamw_group *g, uint8_t **vals, size_t *lens,
			   titan_err *err);

/* Parse a torch.save stream of a plain value (no tensors).  *arena owns *out. */
int dcp_value_load(const uint8_t *p, size_t n, pk_val **out, pk_arena **arena,
		   titan_err *err);
/* Convenience readers for the scalar kinds (int accepts bool; float accepts int). */
int dcp_value_get_int(const uint8_t *p, size_t n, int64_t *v, titan_err *err);
int dcp_value_get_float(const uint8_t *p, size_t n, double *v, titan_err *err);
/* A Python bytes value's contents, malloc'd into *out (*len bytes). */
int dcp_value_get_pybytes(const uint8_t *p, size_t n, uint8_t **out, size_t *len,
			  titan_err *err);

#endif
