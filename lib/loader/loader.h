/* loader.h: the training data loader over a titan-shard folder.
 *
 * Packing is torchtitan's: documents (BOS/EOS already in the stream) are
 * concatenated and cut into windows of seq_len + 1 tokens that do not overlap;
 * inputs = window[:-1], labels = window[1:].
 *
 * The global order does not depend on the data-parallel degree, which is what
 * makes resharding possible (torchtitan refuses it, its issue #811):
 *   - epoch e's stream is the train shards concatenated in an order that is a
 *     seeded shuffle of the manifest's order (the manifest's order when shuffle
 *     is off); it holds W = floor(train_tokens / (seq_len + 1)) windows, and the
 *     tail shorter than a window is not used in that epoch (torchtitan carries
 *     its tail into the next epoch's buffer; dropping it keeps every epoch's
 *     windows the same set, which the permutation needs);
 *   - global position p (0, 1, 2, ... over all epochs) is window
 *     perm_e(p mod W) of epoch e = p / W, where perm_e is a seeded permutation
 *     of [0, W) (the identity when shuffle is off: torchtitan's order);
 *   - every call of loader_next consumes local_batch * dp_degree positions from
 *     the shared cursor; rank r takes rows [r * local_batch, (r+1) * local_batch)
 *     of them.
 * The state is the cursor (windows consumed), identical on every rank.  Resuming
 * with another dp_degree or local_batch continues from the same cursor: nothing
 * repeated, nothing skipped.  The global batch is local_batch * dp_degree by
 * construction, so it always splits evenly; a trainer that keeps its global
 * batch fixed across a reshard picks local_batch = global / dp_degree (and
 * refuses when that does not divide) or accumulates gradients over several
 * calls.
 *
 * torchtitan 0.3.0 packs documents instead (opts.documents): each document of n
 * tokens gives the n - 1 pairs (input doc[i], label doc[i + 1]), so a
 * document's last token never predicts the next one's first; the epoch's stream
 * is these pairs, cut into windows of seq_len pairs as above (W = floor(pairs /
 * seq_len)), and batch.positions holds each input's position in its document,
 * counted from 0 at the window's start for a document that began before it.
 * The model masks attention to each document and rotates by these positions.
 *
 * torchtitan 0.3.0's ChatDataset (opts.sft, SFT chat data from titan-tokenize
 * --chat) orders and packs conversations its own way (lib/loader/sft.h): its
 * seeded shuffles (42, then 42 + epoch), each dp rank its contiguous block of
 * the conversations, whole conversations per window (those longer than
 * seq_len + 1 tokens dropped), the rest of a window padded with EOS inputs
 * and ignored labels; labels whose token the shard's label mask leaves out
 * (the prompt) are LOADER_IGNORE_INDEX.  Each rank reads its own windows, so
 * the state holds the dp degree and resuming needs the same one (as in
 * torchtitan); positions and doc_ids as with opts.documents.
 *
 * The validation loader (split LOADER_VAL) reads the val shards once in order,
 * with no shuffle; its last window may be short and a final global batch may be
 * incomplete: those positions get label -100 (torchtitan's ignore_index) so
 * every rank makes the same number of calls; then loader_next returns 0.
 *
 * Ids are int32 in both inputs and labels: our embedding and cross-entropy
 * kernels take int32 (PyTorch's int64 targets are not needed in C); -100 fits.
 *
 * A mixture (a folder titan-shard mix wrote: shard folders and weights) is
 * one more order on top (lib/loader/mixture.h): global position p is window
 * k of source s, where s is the p-th draw of torchtitan 0.3.0's
 * InterleavedDataset (random.Random(seed).choices over the weights, one draw
 * per window) and k counts the earlier draws of s; source s's window k is the
 * one its own folder's loader gives at position k (its epochs: a source that
 * runs out starts over, as 0.3.0's sources do with their default infinite =
 * true).  The draws depend on the position alone, so the ranks split the
 * global batch as above and a mixture reshards like a folder.  Its val split
 * is its sources' val splits read one after another.
 *
 * A background thread prepares the next batches (opts.prefetch of them) so the
 * trainer never waits on I/O; the batches it returns are the same with or
 * without prefetching. */
#ifndef TITAN_LOADER_H
#define TITAN_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define LOADER_IGNORE_INDEX (-100)
enum { LOADER_TRAIN = 0, LOADER_VAL = 1 }; /* = SHARD_TRAIN, SHARD_VAL */
#define LOADER_STATE_BYTES 56
/* The largest batch the loader serves (loader_open refuses more): the
 * trainer's limits on training.seq_len and local_batch_size, which the
 * planner (lib/planner) applies too, so that a plan and a run refuse alike. */
#define LOADER_MAX_SEQ_LEN ((int64_t)1 << 24)
#define LOADER_MAX_LOCAL_BATCH ((int64_t)1 << 20)

typedef struct loader_opts {
	const char *dir;      /* titan-shard folder (manifest.json) */
	int split;            /* LOADER_TRAIN or LOADER_VAL */
	int64_t seq_len;      /* T */
	int64_t local_batch;  /* B: rows per call on this rank */
	int dp_rank, dp_degree;
	uint64_t seed;        /* below 2^63 (it travels through JSON) */
	int shuffle;          /* shuffle shards and windows per epoch (train only);
				 0 is torchtitan's order, the default we suggest so
				 loss curves compare with torchtitan's */
	int doc_bounds;       /* also fill batch.doc_ids */
	int documents;        /* torchtitan 0.3.0's packing (below), with batch.positions */
	int sft;              /* torchtitan 0.3.0's ChatDataset packing (above), with
				 batch.positions; train split only */
	int prefetch;         /* batches prepared ahead by a thread; 0 = none */
	const uint8_t *tokenizer; /* NULL, or the 32-byte fingerprint the folder's
				     tokenizer must have (validation data must be the
				     training data's tokens) */
} loader_opts;

typedef struct loader_batch {
	const int32_t *inputs;  /* (B, T) token ids */
	const int32_t *labels;  /* (B, T) next tokens; LOADER_IGNORE_INDEX where none */
	const int32_t *positions; /* (B, T) with opts.documents, else NULL: each input's
				     position in its document, 0 where one starts */
	const int32_t *doc_ids; /* (B, T) or NULL: per row, the index (from 0) of the
				   document each input position belongs to; a new
				   document starts where the id increases (block-causal
				   attention masks q, k with doc_ids[q] == doc_ids[k]) */
	int64_t B, T;
	int64_t n_valid;        /* labels that are not LOADER_IGNORE_INDEX */
	uint64_t position;      /* global position of this call's first row (rank 0's) */
	uint64_t epoch;         /* epoch of this rank's first row */
} loader_batch;

/* What a checkpoint keeps.  The same on every rank. */
typedef struct loader_state {
	uint64_t seed;
	uint64_t windows;       /* global positions consumed */
	int64_t seq_len;
	uint32_t shuffle;
	uint32_t documents;     /* 0.3.0's packing: its windows count pairs */
	uint32_t sft_dp;        /* 0.3.0's ChatDataset packing: the dp degree (each rank's
				   windows are its own); 0 otherwise */
	uint32_t split;
	uint64_t data_tokens;   /* tokens in the split's shards */
	uint32_t data_crc;      /* CRC-32C over the split's shard list and CRCs */
} loader_state;

typedef struct loader loader;

/* Open the folder's split.  Fails on a folder that verify would not pass at
 * the header level (shard_entry_check: counts, CRCs and vocabulary against
 * manifest.json), an incomplete shard set, too few tokens for one window
 * (train), or bad options.  The rest of verify (shard_file_verify: data and
 * index CRCs, every id below the vocabulary) runs on each shard before its
 * first tokens are used, so loader_next fails naming a damaged shard. */
loader *loader_open(const loader_opts *o, titan_err *err);
/* Next batch: 1 with *b set (valid until the next call on l), 0 when the
 * validation split is exhausted (never for train), -1 on error. */
int loader_next(loader *l, const loader_batch **b, titan_err *err);
void loader_close(loader *l);

/* State of the batches returned so far (prefetched ones do not count). */
void loader_state_get(const loader *l, loader_state *s);
/* Continue from s (taken on any dp_degree / local_batch).  Refuses a state from
 * another data set, split, seed, shuffle or seq_len. */
int loader_state_set(loader *l, const loader_state *s, titan_err *err);

/* The checkpoint's dataloader item for the batches returned so far:
 * loader_state_encode's bytes, and for a mixture its record after them (the
 * sampler's Mersenne Twister state and each source's windows taken,
 * titan-formats(5)).  *out is malloc'd. */
int loader_save(const loader *l, uint8_t **out, size_t *n, titan_err *err);
/* Continue from loader_save's bytes into l (*s gets the state read).  The
 * state alone (LOADER_STATE_BYTES, as 0.3.0 runs' pickles hold it) does for
 * a mixture too: its draws are replayed from the seed. */
int loader_load(loader *l, const uint8_t *buf, size_t n, loader_state *s, titan_err *err);
/* A mixture's sources (0 for a shard folder), and the windows taken from each
 * by the batches returned so far (taken has loader_mix_sources(l) entries). */
size_t loader_mix_sources(const loader *l);
void loader_mix_taken(const loader *l, uint64_t *taken);

/* Fixed little-endian bytes ("TLDS", version, fields, CRC-32C) for the
 * checkpoint's dataloader item, and back. */
void loader_state_encode(const loader_state *s, uint8_t out[LOADER_STATE_BYTES]);
int loader_state_decode(const uint8_t *buf, size_t n, loader_state *s, titan_err *err);
/* Whether buf starts as loader_state_encode's bytes do (a checkpoint torchtitan
 * wrote holds a pickle of its own loader there instead). */
int loader_state_is_titan(const uint8_t *buf, size_t n);
/* A JSON object with the same fields (plus "epoch", informative); malloc'd. */
char *loader_state_to_json(const loader_state *s, uint64_t windows_per_epoch);
int loader_state_from_json(const char *json, loader_state *s, titan_err *err);

/* The split's documents one at a time in the manifest's order: torchtitan
 * 0.3.0's dataset of the same documents, whose loader state (below) counts
 * documents read and keeps the pairs of the last one not yet emitted.  Safe
 * beside the prefetch thread (they read through a decoder of their own). */
typedef struct loader_doc {
	uint32_t *tokens;       /* the document's tokens (malloc'd; BOS and EOS included) */
	size_t n;
	uint64_t pairs_before;  /* pairs (tokens less one) of the documents before it */
} loader_doc;
uint64_t loader_doc_count(const loader *l);
/* The document holding pair `pair` (from 0) of the documents' stream. */
int loader_doc_of_pair(const loader *l, uint64_t pair, uint64_t *d, titan_err *err);
/* Document d (from 0); free out->tokens. */
int loader_doc_read(const loader *l, uint64_t d, loader_doc *out, titan_err *err);

/* torchtitan 0.3.0's loader state: the pickle its ParallelAwareDataloader
 * saves under dataloader.dp_rank_<r> (a StatefulDataLoader's state of one
 * process, num_workers 0, over HuggingFaceTextDataset of a map-style data set:
 * sample_idx = documents read, epoch, and the inputs, labels and positions of
 * the pairs read but not yet emitted).  titan writes it in its 0.3.0 runs with
 * its own state record beside 0.3.0's keys ("titan_loader_state", which 0.3.0
 * ignores).
 *
 * loader_state_030_encode: the pickle of state s of l (local_batch rows per
 * call, dp_degree ranks).  0.3.0's keys are there when titan's position is one
 * 0.3.0's loader can be at over the same documents: 0.3.0's packing, no
 * shuffle, dp_degree 1 and within the first epoch; otherwise the pickle holds
 * titan's record alone and *why says why (NULL when 0.3.0's keys are there).
 * The caller frees *out. */
int loader_state_030_encode(const loader *l, const loader_state *s, int64_t local_batch,
			    int dp_degree, uint8_t **out, size_t *n, const char **why,
			    titan_err *err);
/* Read such a pickle (it may hold no global: any other is refused) into *s:
 * titan's record when it holds one, else 0.3.0's position mapped onto l's
 * documents, its buffers checked against them.  world_size is the
 * checkpoint's dataloader.world_size.  Returns 0 with *s set (why says which
 * of the two it read); 1 when the
 * pickle is a data loader state that does not map onto titan's loader (why,
 * of whycap bytes, says why: another epoch, dp degree, packing or data set
 * kind); -1 on a pickle that is not a plain loader state or whose buffers are
 * not these documents' (err says which). */
int loader_state_030_decode(const loader *l, const uint8_t *buf, size_t n, int64_t world_size,
			    loader_state *s, char *why, size_t whycap, titan_err *err);

/* The data's vocabulary (for checking against the model) and tokenizer. */
uint32_t loader_vocab_size(const loader *l);
const uint8_t *loader_fingerprint(const loader *l); /* 32 bytes, owned by l */

/* Windows per epoch (train) or in the one pass (val). */
uint64_t loader_windows(const loader *l);
/* Epoch e's shard order (indices into the manifest's list); order has
 * loader_shards(l) entries. */
size_t loader_shards(const loader *l);
void loader_shard_order(const loader *l, uint64_t epoch, uint32_t *order);
/* The window at global position p, as indices into epoch e's stream. */
uint64_t loader_window_at(const loader *l, uint64_t p);

#endif
