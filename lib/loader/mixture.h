/* mixture.h: the loader over a mixture of shard folders (private to
 * lib/loader; see loader.h for the order it defines).
 *
 * Global position p of a mixture is the window of source s_p at that
 * source's own position k_p, where s_0, s_1, ... are the mixer's draws from
 * the mixture's seed (mixer.h) and k_p counts the earlier draws of s_p.  Each
 * source is a loader of its own over its folder (one rank, no prefetch), so
 * its k-th window is what that folder's loader would give at position k: its
 * epochs, wraps and packing.  The draws depend on the position alone, never
 * on the ranks, so every rank walks the same draws and keeps its rows. */
#ifndef TITAN_LOADER_MIXTURE_H
#define TITAN_LOADER_MIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "loader/loader.h"
#include "loader/mixer.h"

typedef struct loader_mix loader_mix;

/* The sampler at a position: the generator and the windows taken from each
 * source before it. */
typedef struct mix_mark {
	uint64_t pos;
	mix_rng rng;
	uint64_t *taken; /* n sources */
} mix_mark;

/* A batch's rows on this rank: source and source position of each. */
typedef struct mix_rows {
	uint32_t *src;   /* (B) */
	uint64_t *k;     /* (B) */
	mix_mark after;  /* the sampler after the whole global batch */
} mix_rows;

/* o->dir's mixture, each source opened with o's options.  NULL with err. */
loader_mix *mix_open(const loader_opts *o, titan_err *err);
void mix_close(loader_mix *x);
size_t mix_sources(const loader_mix *x);
loader *mix_source(const loader_mix *x, size_t i);
/* The mixture's identity for loader_state: its sources' tokens, and a CRC
 * over their identities, the weights and the seed. */
void mix_identity(const loader_mix *x, uint64_t *tokens, uint32_t *crc);
const uint8_t *mix_fingerprint(const loader_mix *x);
uint32_t mix_vocab_size(const loader_mix *x);
uint64_t mix_windows(const loader_mix *x); /* the sources' windows per epoch, summed */

mix_rows *mix_rows_new(const loader_mix *x, int64_t B);
void mix_rows_free(mix_rows *r);
/* Draw positions [P, P + n) from the producer's sampler (which is at P) and
 * keep rows [first, first + B) of them in r. */
int mix_batch(loader_mix *x, uint64_t P, uint64_t n, uint64_t first, int64_t B, mix_rows *r,
	      titan_err *err);
/* Where the producer starts (loader_state_set / a restart of the thread). */
const mix_mark *mix_base(const loader_mix *x);
void mix_rewind(loader_mix *x);
/* Put the base at position p: from mark m, or by replaying the draws from
 * the seed when m is NULL. */
void mix_seek(loader_mix *x, uint64_t p, const mix_mark *m);

/* The mixture's record of the loader's state (titan-formats(5), DATA
 * LOADER STATE): "TLDM", the sampler, each source's windows taken. */
size_t mix_record_bytes(const loader_mix *x);
void mix_record_encode(const loader_mix *x, const mix_mark *m, uint8_t *out);
/* Read it into m (from mix_mark_new), checked against this mixture and
 * against windows, the position the state's first record holds. */
int mix_record_decode(const loader_mix *x, const uint8_t *buf, size_t n, uint64_t windows,
		      mix_mark *m, titan_err *err);
int mix_mark_init(const loader_mix *x, mix_mark *m);
void mix_mark_free(mix_mark *m);

#endif
