/* att_ref.h: attention by its definition in float64, the reference the CPU
 * backend's blocked kernels are held to (test_backend_ops, test_backend_bf16).
 * The mask is built key by key from torchtitan's mask_mods (causal, sliding
 * window, fixed chunk, document) with no ranges and no blocks; the softmax
 * runs over the whole row of scores (GPT-OSS's sink joining its denominator)
 * and the backward is the chain rule on those dense rows.  Layouts and fields
 * as backend.h's be_attn (its sinks, dsinks and element types are not read:
 * the reference's sinks are double and passed apart; doc is). */
#ifndef TITAN_TEST_ATT_REF_H
#define TITAN_TEST_ATT_REF_H

#include <stdint.h>

#include "backend/backend.h"

/* Whether query i of batch row bi (position q_pos0 + i) sees key j (position
 * k_pos0 + j) under a's masks. */
int att_ref_visible(const be_attn *a, int64_t bi, int64_t i, int64_t j);

/* out (b, tq, h, hdv) and lse (b, h, tq) of q, k, v; sinks (h) or NULL.  A
 * row that sees nothing gets out 0 and lse -inf, or its sink's logit. */
void att_ref_fwd(double *out, double *lse, const double *q, const double *k, const double *v,
		 const double *sinks, const be_attn *a);

/* dq, dk, dv written, and dsinks (h) when not NULL, for the loss <out, dout>.
 * rowsum(dS) enters as rowsum(dout * out) with out as given (the out a
 * backward reads: the forward's, perhaps rounded), or from the probabilities
 * themselves when out is NULL. */
void att_ref_bwd(double *dq, double *dk, double *dv, double *dsinks, const double *dout,
		 const double *q, const double *k, const double *v, const double *out,
		 const double *sinks, const be_attn *a);

/* One row of a doc array (t positions) from its documents' first positions
 * starts[0 .. n-1], increasing: row[p] = the last start <= p (0 before the
 * first). */
void att_ref_doc_row(int32_t *row, int64_t t, const int64_t *starts, int n);

#endif
