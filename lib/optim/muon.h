/* muon.h: Muon's update of one matrix, as torchtitan 0.3.0's DistMuon
 * (distributed/flex_shard/dist_muon.py) computes it, in backend ops:
 *
 *   momentum:  m = lerp(m, g, 1 - mu);  u = nesterov ? lerp(g, m, mu) : m
 *              (torch.lerp's formula, the backend's lerp: bit for bit)
 *   direction: X = bf16(u), transposed when rows > cols; X /= max(|X|_F, eps)
 *              (the norm rounded to bfloat16, as torch's norm of a bf16
 *              tensor); ns_steps times:
 *                G = X X^T;  G' = b G + c G G;  X = a X + G' X
 *              every product a bfloat16 GEMM accumulating in float32 (torch's
 *              addmm on bf16: one rounding of alpha AB + beta C)
 *   apply:     p *= 1 - lr wd;  p -= lr ratio(rows, cols) X
 *              (ratio: muon_adjust, from the whole matrix's shape)
 *
 * The momentum and the apply are elementwise: they run on a rank's shard.
 * The direction needs the whole matrix: the caller gathers u (the plan's
 * FSDP and TP boxes) into one (rows, cols) float32 matrix; every rank then
 * computes the same direction and keeps its box. */
#ifndef TITAN_OPTIM_MUON_H
#define TITAN_OPTIM_MUON_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "optim/optim.h"

/* m and g (n) float32 in backend memory; u (n) float32 receives the update
 * to orthogonalise. */
void muon_momentum(backend *be, float *m, const float *g, float *u, size_t n,
		   const optim_group *gr);

/* Scratch for matrices of up to rows x cols elements (and min(rows,
 * cols)^2 Gram matrices), in backend memory. */
typedef struct muon_scratch {
	void *x, *xn;  /* (rows * cols) bf16 */
	void *g, *gu;  /* (k * k) bf16 */
	size_t cap, kcap;
} muon_scratch;
int muon_scratch_reserve(backend *be, muon_scratch *s, int64_t rows, int64_t cols, titan_err *e);
void muon_scratch_free(backend *be, muon_scratch *s);

/* The direction of the (rows, cols) float32 update u (backend memory): a
 * (rows, cols) bf16 matrix in scratch, returned (valid until the next call). */
const void *muon_direction(backend *be, muon_scratch *s, const float *u, int64_t rows,
			   int64_t cols, const optim_group *gr);

/* DistMuon's lr of the matrix: lr times muon_adjust's ratio. */
double muon_adjusted_lr(double lr, muon_adjust a, int64_t rows, int64_t cols);

/* p (n) float32 *= 1 - lr wd, then -= adjusted_lr dir (n bf16). */
void muon_apply(backend *be, float *p, const void *dir, size_t n, double lr,
		double adjusted_lr, double weight_decay);

#endif
