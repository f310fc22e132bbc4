/* Muon's update of one matrix: see muon.h. */
#include <math.h>

#include "core/bf16.h"
#include "optim/muon.h"

void muon_momentum(backend *be, float *m, const float *g, float *u, size_t n,
		   const optim_group *gr)
{
	const backend_ops *o = be->ops;
	int64_t k = (int64_t)n;
	/* torch's weights: Python's doubles, rounded to float32 by the kernel */
	o->lerp(be, m, g, (float)(1 - gr->momentum), k); /* m.lerp_(g, 1 - mu) */
	if (gr->nesterov) { /* u = torch.lerp(g, m, mu) */
		o->copy(be, u, g, n * sizeof(float), BACKEND_D2D);
		o->lerp(be, u, m, (float)gr->momentum, k);
	} else {
		o->copy(be, u, m, n * sizeof(float), BACKEND_D2D);
	}
}

int muon_scratch_reserve(backend *be, muon_scratch *s, int64_t rows, int64_t cols, titan_err *e)
{
	size_t n = (size_t)(rows * cols), k = (size_t)(rows < cols ? rows : cols);
	if (n > s->cap) {
		be->ops->free(be, s->x);
		be->ops->free(be, s->xn);
		s->xn = NULL;
		s->cap = 0;
		if (!(s->x = be->ops->alloc(be, n * 2, e)) || !(s->xn = be->ops->alloc(be, n * 2, e)))
			return err_prefix(e, "muon: scratch of %zu elements", n);
		s->cap = n;
	}
	if (k * k > s->kcap) {
		be->ops->free(be, s->g);
		be->ops->free(be, s->gu);
		s->gu = NULL;
		s->kcap = 0;
		if (!(s->g = be->ops->alloc(be, k * k * 2, e)) ||
		    !(s->gu = be->ops->alloc(be, k * k * 2, e)))
			return err_prefix(e, "muon: Gram scratch of %zu elements", k * k);
		s->kcap = k * k;
	}
	return 0;
}

void muon_scratch_free(backend *be, muon_scratch *s)
{
	be->ops->free(be, s->x);
	be->ops->free(be, s->xn);
	be->ops->free(be, s->g);
	be->ops->free(be, s->gu);
	*s = (muon_scratch){0};
}

/* One Newton-Schulz iteration on X in the stored layout A (rows, cols):
 * X = A when rows <= cols, else X = A^T, whose products the GEMM's
 * transpose flags give without moving A (G = A^T A; A' = a A + A G'^T). */
static void ns_iteration(backend *be, muon_scratch *s, int64_t r, int64_t c, const double *abc)
{
	const backend_ops *o = be->ops;
	int t = r > c;
	int64_t k = t ? c : r, l = t ? r : c; /* X is (k, l) */
	size_t kk = (size_t)(k * k) * 2, n = (size_t)(r * c) * 2;
	/* G (k, k) = X X^T */
	o->matmul(be, t, !t, k, k, l, 1.0f, s->x, c, s->x, c, BE_BF16, 0.0f, s->g, k, BE_BF16);
	/* G' = b G + c G G (addmm(G, G, G, beta=b, alpha=c)) */
	o->copy(be, s->gu, s->g, kk, BACKEND_D2D);
	o->matmul(be, 0, 0, k, k, k, (float)abc[2], s->g, k, s->g, k, BE_BF16, (float)abc[1], s->gu,
		  k, BE_BF16);
	/* X' = a X + G' X (addmm(X, G', X, beta=a)) */
	o->copy(be, s->xn, s->x, n, BACKEND_D2D);
	if (!t)
		o->matmul(be, 0, 0, r, c, r, 1.0f, s->gu, k, s->x, c, BE_BF16, (float)abc[0], s->xn,
			  c, BE_BF16);
	else
		o->matmul(be, 0, 1, r, c, c, 1.0f, s->x, c, s->gu, k, BE_BF16, (float)abc[0], s->xn,
			  c, BE_BF16);
	void *sw = s->x;
	s->x = s->xn;
	s->xn = sw;
}

const void *muon_direction(backend *be, muon_scratch *s, const float *u, int64_t rows,
			   int64_t cols, const optim_group *gr)
{
	const backend_ops *o = be->ops;
	int64_t n = rows * cols;
	o->convert(be, s->x, BE_BF16, u, BE_F32, n);
	/* torch's norm of a bf16 tensor accumulates in float32 and rounds the
	 * result to bf16; clamp_min(eps) compares in bf16 */
	float norm = bf16_round((float)sqrt(o->sumsq(be, s->x, BE_BF16, n)));
	float eps = bf16_round((float)gr->eps);
	if (norm < eps)
		norm = eps;
	o->scale(be, s->x, BE_BF16, 1.0f / norm, n);
	for (int i = 0; i < gr->ns_steps; i++)
		ns_iteration(be, s, rows, cols, gr->ns);
	return s->x;
}

double muon_adjusted_lr(double lr, muon_adjust a, int64_t rows, int64_t cols)
{
	double r = (double)rows, c = (double)cols, ratio;
	switch (a) {
	case MUON_ADJUST_MATCH_RMS: ratio = 0.2 * sqrt(r > c ? r : c); break;
	case MUON_ADJUST_SPECTRAL: ratio = sqrt(r / c); break;
	default: ratio = sqrt(r / c > 1 ? r / c : 1); break;
	}
	return lr * ratio;
}

void muon_apply(backend *be, float *p, const void *dir, size_t n, double lr,
		double adjusted_lr, double weight_decay)
{
	be->ops->scale(be, p, BE_F32, (float)(1 - lr * weight_decay), (int64_t)n);
	be->ops->axpy(be, p, BE_F32, (float)-adjusted_lr, dir, BE_BF16, (int64_t)n);
}
