/* Private to lib/loader: torchtitan 0.3.0's ChatDataset order and packing
 * (hf_datasets/text_datasets.py), computed from the documents' lengths.
 *
 * Order: HF datasets' Dataset.shuffle(seed=42) of the whole data set (numpy's
 * default_rng(42).permutation), split_dataset_by_node's contiguous block of
 * dp rank r, and in epoch e > 0 that block shuffled again with seed 42 + e
 * (ChatDataset.reloop).
 *
 * Packing per rank (_iter_greedy_packed): a conversation of n tokens gives n - 1
 * (input, label) pairs and is dropped when n - 1 > seq_len; conversations go
 * whole into the window in order; one that does not fit closes the window
 * (padded with EOS inputs, ignored labels, positions 0.. of the pad) and
 * opens the next; a window exactly full closes; at the end of the epoch the
 * partial window closes padded.  Epochs therefore never share a window. */
#ifndef TITAN_LOADER_SFT_H
#define TITAN_LOADER_SFT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* numpy.random.default_rng(seed).permutation(n) into perm (n entries). */
void sft_numpy_permutation(uint64_t seed, uint64_t n, uint64_t *perm);

typedef struct sft_plan sft_plan;

/* The plan of dp rank r's windows over n_docs documents of len[d] tokens. */
sft_plan *sft_plan_new(const uint32_t *len, uint64_t n_docs, int64_t seq_len, int dp_rank,
		       int dp_degree, titan_err *err);
void sft_plan_free(sft_plan *p);
/* Windows in epoch 0 (every epoch has its own count; this one names the
 * size of an epoch in logs).  Fails when no conversation fits seq_len. */
int sft_plan_windows0(sft_plan *p, uint64_t *w, titan_err *err);

/* The rank's window k (0, 1, ... over all epochs): its documents, in order,
 * as indices into the data set (*docs owned by p, valid until the next call),
 * and its epoch.  Fails when no conversation fits seq_len. */
int sft_plan_window(sft_plan *p, uint64_t k, const uint64_t **docs, size_t *n, uint64_t *epoch,
		    titan_err *err);

#endif
