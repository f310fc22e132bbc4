/* cp.h: context parallelism as torchtitan does it (0.2.2's
 * torchtitan/distributed/context_parallel.py, 0.3.0's
 * distributed/context_parallel/api.py, over torch's experimental
 * _context_parallel): the sequence dimension sharded over the cp ranks, and
 * attention computed as RING ATTENTION over them.
 *
 * Layout.  The global sequence of seq_len tokens is cut into equal chunks.
 * With the headtail load balancer (torchtitan's default) there are 2 cp chunks
 * and rank i holds chunks i and 2cp-1-i, so that under the causal mask every
 * rank has the same work; without a balancer ("none") rank i holds chunk i of
 * cp.  With ptrr (torch's _PTRRLoadBalancer, 0.3.0's balancer for
 * FlexAttention's document masks) the chunks are the mask's blocks of
 * `block` tokens (FlexAttention's 128), and each ROW of the batch has its own
 * assignment, from its documents: a query block's work is the number of key
 * blocks its documents' causal mask touches (the block itself and those back
 * to its first query's document start); the blocks sorted by work, most
 * first (ties in order), go round the ranks 0..cp-1, then back cp-1..0, and
 * so on; a rank holds its blocks in sequence order.  A rank's local sequence
 * is its chunks concatenated; positions (RoPE, the causal mask) are each
 * token's global position.
 *
 * Documents (torchtitan 0.3.0's packed rows): the attention's mask is also
 * block-causal, a query seeing the keys of its own document only; ring
 * attention reads each row's document starts by global position
 * (be_attn.doc over the whole rows, doc_t = seq_len), and plans each row's
 * layout and the blocks to skip by their host copy (be_attn.doc_host, which
 * the model keeps from the micro-batch's positions): no copy back to the
 * host, no wait for the backend beyond the blocks' own.
 *
 * Ring attention.  A rank's queries meet every rank's keys and values, a
 * block of them at a time: for a query chunk at global chunk index a and a key
 * chunk at b, nothing when b > a, the causal diagonal when b = a, everything
 * when b < a; with documents also nothing when the key chunk ends before the
 * document of the query chunk's first token starts, and each call masks by
 * the row's documents (a row that sees no key of a block gets lse -inf: the
 * merge skips it).  The backend's attention op computes each block at its
 * positions; the partial results are merged by log-sum-exp in float32
 * (out = sum_j exp(lse_j - lse) out_j, lse = log sum_j exp lse_j).  The
 * backward runs each block with the MERGED out and lse, which gives that
 * block's exact share of dq, dk and dv; dq is summed locally (float32) and dk,
 * dv (float32) go back to the keys' owner.
 *
 * This file's cp_ring does the arithmetic of one rank given the blocks, in
 * any order; lib/cp/ring.c (with lib/comm) moves the blocks between ranks by
 * all-gather or by passing them round the ring.
 *
 * Layouts of one rank's tensors, as the backend's attention op has them, with
 * T = the local length (chunks x chunk): q (b, T, h, hd), k (b, T, hkv, hd),
 * v (b, T, hkv, hdv), out (b, T, h, hdv); lse is cp's own: (chunks, b, h,
 * chunk) float32, each block's rows contiguous. */
#ifndef TITAN_CP_H
#define TITAN_CP_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"

typedef enum cp_balance { CP_BALANCE_NONE, CP_BALANCE_HEADTAIL, CP_BALANCE_PTRR } cp_balance;
/* FlexAttention's block (torch's _DEFAULT_SPARSE_BLOCK_SIZE): ptrr's chunk. */
enum { CP_PTRR_BLOCK = 128 };
typedef enum cp_rotate { CP_ROTATE_ALLGATHER, CP_ROTATE_ALLTOALL } cp_rotate;

/* parallelism.context_parallel_load_balancer (NULL: None) and
 * context_parallel_rotate_method. */
int cp_balance_parse(const char *name, cp_balance *b, titan_err *e);
int cp_rotate_parse(const char *name, cp_rotate *r, titan_err *e);
/* ptrr deals the blocks of FlexAttention's document masks: refused for a run
 * over cp > 1 ranks without documents (not a torchtitan 0.3.0 run). */
int cp_balance_check(cp_balance b, int cp, int documents, titan_err *e);
/* What a sequence's length must be a multiple of per cp rank under the
 * balancer named name (NULL: None): cp chunks (1), headtail's 2 cp chunks,
 * ptrr's blocks of CP_PTRR_BLOCK tokens.  A name cp_balance_parse refuses
 * counts as headtail (the refusal comes from cp_balance_parse). */
int64_t cp_balance_multiple(const char *name);

typedef struct cp_layout {
	int cp;             /* ranks */
	int chunks;         /* chunks per rank: 2 (headtail), 1 (none), seq_len / (block cp) (ptrr) */
	int64_t seq_len;    /* global tokens per sequence */
	int64_t chunk;      /* tokens per chunk */
	cp_balance balance;
} cp_layout;

/* The layout of seq_len tokens over cp ranks (ptrr's blocks of CP_PTRR_BLOCK
 * tokens); refuses a seq_len the chunks do not divide, naming the numbers.
 * cp_layout_init_block takes ptrr's block (the others ignore it). */
int cp_layout_init(cp_layout *l, int64_t seq_len, int cp, cp_balance b, titan_err *e);
int cp_layout_init_block(cp_layout *l, int64_t seq_len, int cp, cp_balance b, int64_t block,
			 titan_err *e);
static inline int64_t cp_local_len(const cp_layout *l) { return l->chunks * l->chunk; }
/* Whether every row has the same layout (not ptrr, whose rows follow their
 * documents). */
static inline int cp_layout_fixed(const cp_layout *l) { return l->balance != CP_BALANCE_PTRR; }
/* The global chunk index of rank r's k-th chunk (a fixed layout; ptrr's for
 * a row that is one document). */
int cp_chunk_index(const cp_layout *l, int r, int k);
/* The global positions of rank r's local tokens (cp_local_len of them; as
 * cp_chunk_index). */
void cp_positions(const cp_layout *l, int r, int64_t *pos);
/* One row's MAP: map[r * chunks + k] the global chunk index of rank r's k-th
 * chunk, from the row's document starts doc (seq_len of them: doc[p] the
 * first position of p's document; NULL: one document).  A fixed layout's
 * map is cp_chunk_index's, ptrr's for one document too. */
int cp_row_map(const cp_layout *l, const int32_t *doc, int *map, titan_err *e);
static inline int cp_map_len(const cp_layout *l) { return l->cp * l->chunks; }
/* The maps (b, cp_map_len) of b rows of torchtitan 0.3.0's per-document
 * positions (b, seq_len: 0 at each document's start, counting up; NULL:
 * rows of one document): the array given to cp_shard_rows. */
int cp_row_maps(const cp_layout *l, const int32_t *positions, int64_t b, int *maps, titan_err *e);
/* Rank r's share of a host array of b sequences of seq_len items of elem
 * bytes (tokens, labels, a reference tensor with elem = row bytes): local
 * (b, T_local) from full (b, seq_len); cp_unshard puts it back.  The _rows
 * forms take each row's map (cp_row_maps; NULL: the fixed layout's). */
void cp_shard(const cp_layout *l, int r, const void *full, void *local, int64_t b, size_t elem);
void cp_unshard(const cp_layout *l, int r, const void *local, void *full, int64_t b, size_t elem);
void cp_shard_rows(const cp_layout *l, const int *maps, int r, const void *full, void *local,
		   int64_t b, size_t elem);
void cp_unshard_rows(const cp_layout *l, const int *maps, int r, const void *local, void *full,
		     int64_t b, size_t elem);

/* One rank's ring-attention arithmetic for a fixed shape.  shape is the
 * rank's local call: b, h, hkv, hd, hdv, scale and element types as for the
 * backend's attention; tq and tk must be cp_local_len; causal must be set;
 * its doc is ignored (cp_ring_set_docs gives each call's). */
typedef struct cp_ring cp_ring;

cp_ring *cp_ring_create(backend *be, const cp_layout *l, int rank, const be_attn *shape,
			titan_err *e);
void cp_ring_free(cp_ring *r);
/* The documents of the calls that follow: doc (b, doc_t) in backend memory,
 * the rows' document starts by global position (doc_t = seq_len), or NULL
 * (plain causal; refused under ptrr, whose layout follows the documents);
 * doc_host the same on the host (be_attn.doc_host), which the ring reads for
 * each row's layout and the blocks the documents hide: it never copies doc
 * back, so neither this nor skipping a block waits for the backend.  Both
 * must hold until the calls are done. */
int cp_ring_set_docs(cp_ring *r, const int32_t *doc, const int32_t *doc_host, int64_t doc_t,
		     titan_err *e);

/* Forward: begin with this rank's queries, add the blocks of keys and values
 * of each owner rank (each once, any order), end writes out and lse. */
void cp_ring_fwd_begin(cp_ring *r, const void *q);
int cp_ring_fwd_block(cp_ring *r, int owner, const void *k, const void *v, titan_err *e);
int cp_ring_fwd_end(cp_ring *r, void *out, float *lse, titan_err *e);

/* Backward: begin with the gradient of out and what the forward saw (q, and
 * its merged out and lse); each owner's block adds its share of dk and dv
 * into dk_acc and dv_acc (float32, shaped like the owner's k and v, in
 * backend memory); end writes dq in the shape's grad type. */
void cp_ring_bwd_begin(cp_ring *r, const void *dout, const void *q, const void *out,
		       const float *lse);
int cp_ring_bwd_block(cp_ring *r, int owner, const void *k, const void *v, float *dk_acc,
		      float *dv_acc, titan_err *e);
int cp_ring_bwd_end(cp_ring *r, void *dq, titan_err *e);

/* Element counts of one rank's k (and dk_acc) and v (dv_acc) for the shape. */
int64_t cp_ring_k_numel(const cp_ring *r);
int64_t cp_ring_v_numel(const cp_ring *r);
/* The backend bytes cp_ring_create allocates for the shape. */
size_t cp_ring_bytes(const cp_layout *l, const be_attn *shape);

/* ---- ring attention over lib/comm ---- */

/* This rank's ring attention over the cp communicator (its size the
 * layout's cp, its rank this rank's), moving keys and values as `how` says;
 * buffers follow the shape of each call.  cp_attn_hook fills a
 * be_attn_hook for model_set_attention: the model's attention then runs
 * over the ring, a failure reported by the backend's next sync. */
typedef struct cp_attn cp_attn;
struct comm;
cp_attn *cp_attn_create(backend *be, struct comm *cp, const cp_layout *l, cp_rotate how,
			titan_err *e);
void cp_attn_free(cp_attn *a);
void cp_attn_hook(cp_attn *a, be_attn_hook *out);
/* The backend bytes a cp_attn holds for calls of `shape` (the rank's local
 * call): its key/value and gradient buffers and its cp_ring's. */
size_t cp_attn_bytes(const cp_layout *l, cp_rotate how, const be_attn *shape);
/* The bytes a rank sends over the cp group (lib/comm's counting) in one
 * forward and in one backward of a call of `shape`: the forward's keys and
 * values to the cp - 1 others (allgather: one all-gather; alltoall: cp - 1
 * hops), the backward's again, and the float32 gradients of every block back
 * to its owner (a reduce-scatter, (cp - 1) blocks; or cp hops round the ring
 * with their block). */
void cp_attn_sent(const cp_layout *l, cp_rotate how, const be_attn *shape, uint64_t *fwd,
		  uint64_t *bwd);

/* ---- attention over gathered keys (torchtitan 0.3.0's Flux) ---- */

/* An unmasked attention of this rank's tokens over every cp rank's: each
 * sample's keys and values all-gathered over the cp communicator (rank after
 * rank) and the backend's op run over them once; the backward gathers them
 * again and reduce-scatters their gradients (summed in the call's grad type,
 * bf16 rounded once) back to their owners.  This is how 0.3.0's Flux
 * attention runs under context parallelism (spmd_types: keys and values
 * replicated over cp, queries sharded), not ring attention: no partial
 * results are merged.  Calls must be unmasked (not causal, no documents,
 * window, chunk or sinks); a failure is reported by the backend's next
 * sync.  cp_gather_hook fills the hook a model takes. */
typedef struct cp_gather cp_gather;
cp_gather *cp_gather_create(backend *be, struct comm *cp, titan_err *e);
void cp_gather_free(cp_gather *g);
void cp_gather_hook(cp_gather *g, be_attn_hook *out);

#endif
