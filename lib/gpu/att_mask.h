/* att_mask.h: which keys a query of an attention call sees, and which queries
 * see a key, under its masks (causal, sliding window, chunks, documents) as
 * backend.h's be_attn defines them (the CPU backend's keys_seen).  Plain C,
 * compiled for the host and the device: the CUDA kernels walk these ranges,
 * and a host test (tests/gpu/test_att_mask.c) checks them against the
 * definition everywhere, since no GPU is needed to get index arithmetic wrong.
 *
 * Both ranges are half-open, inside the other side's rows, and empty when the
 * second end is not past the first; both ends are non-decreasing in the row,
 * so a block of consecutive rows sees the first row's start to the last row's
 * end. */
#ifndef TITAN_GPU_ATT_MASK_H
#define TITAN_GPU_ATT_MASK_H

#include <stdint.h>

#include "gpu/launch.h"

#ifdef __CUDACC__
#define ATT_MASK_FN static __host__ __device__ __forceinline__
#else
#define ATT_MASK_FN static inline
#endif

/* Keys [*j0, *j1) of the tk that query qi (position q_pos0 + qi) of batch row
 * bi sees. */
ATT_MASK_FN void att_keys(const gpu_att *a, int64_t bi, int64_t qi, int64_t *j0, int64_t *j1)
{
	int64_t p = a->q_pos0 + qi, lo = a->k_pos0, hi = a->k_pos0 + a->tk;
	if (a->causal && p + 1 < hi)
		hi = p + 1;
	if (a->window > 0 && p - a->window + 1 > lo)
		lo = p - a->window + 1;
	if (a->chunk > 0) {
		int64_t c0 = p / a->chunk * a->chunk;
		lo = c0 > lo ? c0 : lo;
		hi = c0 + a->chunk < hi ? c0 + a->chunk : hi;
	}
	if (a->doc) {
		int64_t d0 = a->doc[bi * a->doc_t + p];
		lo = d0 > lo ? d0 : lo;
	}
	if (lo > a->k_pos0 + a->tk) /* an empty range past the keys: at their end */
		lo = a->k_pos0 + a->tk;
	*j0 = lo - a->k_pos0;
	*j1 = hi > lo ? hi - a->k_pos0 : *j0;
}

/* Queries [*i0, *i1) of the tq that see key kj (position pk = k_pos0 + kj) of
 * batch row bi: positions p with p >= pk (causal), p <= pk + w - 1 (window w:
 * pk is among p's last w), p in pk's chunk [c0, c0 + c), and doc[p] <= pk (the
 * queries up to the end of pk's document: document starts do not decrease, so
 * these are the positions before the first whose start is past pk, found by
 * bisection among the others' range). */
ATT_MASK_FN void att_queries(const gpu_att *a, int64_t bi, int64_t kj, int64_t *i0,
			     int64_t *i1)
{
	int64_t pk = a->k_pos0 + kj, lo = a->q_pos0, hi = a->q_pos0 + a->tq; /* positions */
	if (a->causal && pk > lo)
		lo = pk;
	if (a->window > 0 && pk + a->window < hi)
		hi = pk + a->window;
	if (a->chunk > 0) {
		int64_t c0 = pk / a->chunk * a->chunk;
		lo = c0 > lo ? c0 : lo;
		hi = c0 + a->chunk < hi ? c0 + a->chunk : hi;
	}
	if (a->doc && lo < hi) {
		const int32_t *d = a->doc + bi * a->doc_t;
		int64_t l = lo, u = hi; /* the first p in [lo, hi) with d[p] > pk, or hi */
		while (l < u) {
			int64_t m = l + (u - l) / 2;
			if (d[m] > pk)
				u = m;
			else
				l = m + 1;
		}
		hi = l;
	}
	if (lo > a->q_pos0 + a->tq) /* an empty range past the queries: at their end */
		lo = a->q_pos0 + a->tq;
	*i0 = lo - a->q_pos0;
	*i1 = hi > lo ? hi - a->q_pos0 : *i0;
}

/* The keys rows r0 .. r1-1 (r1 > r0) of queries of batch row bi see at all:
 * [*j0, *j1). */
ATT_MASK_FN void att_block_keys(const gpu_att *a, int64_t bi, int64_t r0, int64_t r1,
				int64_t *j0, int64_t *j1)
{
	int64_t x0, x1;
	att_keys(a, bi, r0, j0, &x0);
	att_keys(a, bi, r1 - 1, &x1, j1);
	if (*j1 < *j0)
		*j1 = *j0;
}

/* The queries keys r0 .. r1-1 (r1 > r0) of batch row bi are seen by at all:
 * [*i0, *i1). */
ATT_MASK_FN void att_block_queries(const gpu_att *a, int64_t bi, int64_t r0, int64_t r1,
				   int64_t *i0, int64_t *i1)
{
	int64_t x0, x1;
	att_queries(a, bi, r0, i0, &x0);
	att_queries(a, bi, r1 - 1, &x1, i1);
	if (*i1 < *i0)
		*i1 = *i0;
}

#endif
