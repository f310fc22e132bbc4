/* The vocabulary-parallel cross-entropy (ce_vocab_stats, ce_vocab_loss:
 * tensor parallelism's loss_parallel) against the whole-vocabulary
 * cross-entropy: the vocabulary cut into 1 to 4 ranks' columns in
 * torch.chunk's sizes (uneven: 301 columns), every rank's stats gathered, the
 * loss on every rank and the ranks' gradient columns put side by side.  The
 * float64 kernels must give cross_entropy's float64 loss and gradient to
 * rounding (the decomposition is exact), the backend's float32 and bfloat16
 * ops the float64 reference within their types' tolerances.  Seeds printed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"
#include "../support/testutil.h"

enum { N = 23, V = 301 };

typedef struct ref {
	double x[N * V];   /* logits */
	int32_t y[N];
	double g[N * V];   /* cross_entropy's gradient, grad_scale 0.5 */
	double loss;
	int64_t valid;
} ref;

static void make_ref(ref *r, uint64_t seed)
{
	test_seed(seed);
	for (int i = 0; i < N * V; i++)
		r->x[i] = (double)(float)(4 * test_urand());
	for (int i = 0; i < N; i++)
		r->y[i] = i % 5 == 3 ? -100 : (int32_t)((test_urand() + 1) * 0.5 * V) % V;
	memcpy(r->g, r->x, sizeof r->x);
	r->loss = 0;
	r->valid = 0;
	cpu_cross_entropy_f64(r->g, r->y, N, V, -100, 0.5, &r->loss, &r->valid);
}

/* Rank k of ranks: its first column and number of columns (torch.chunk). */
static void cols(int ranks, int k, int64_t *v0, int64_t *nv)
{
	int64_t c = (V + ranks - 1) / ranks;
	*v0 = c * k;
	*nv = V - *v0 < 0 ? 0 : V - *v0 > c ? c : V - *v0;
}

static void float64_kernels_give_the_whole_vocabulary_loss(void **s)
{
	(void)s;
	ref *r = malloc(sizeof *r);
	make_ref(r, 31);
	for (int ranks = 1; ranks <= 4; ranks++) {
		double *all = malloc(sizeof(double) * (size_t)(ranks * N * 3));
		double *x[4];
		for (int k = 0; k < ranks; k++) {
			int64_t v0, nv;
			cols(ranks, k, &v0, &nv);
			x[k] = malloc(sizeof(double) * (size_t)(N * (nv ? nv : 1)));
			for (int i = 0; i < N; i++)
				memcpy(x[k] + i * nv, r->x + i * V + v0, sizeof(double) * (size_t)nv);
			cpu_ce_vocab_stats_f64(x[k], r->y, N, nv, v0, all + k * N * 3);
		}
		for (int k = 0; k < ranks; k++) {
			int64_t v0, nv, valid = 0;
			double loss = 0;
			cols(ranks, k, &v0, &nv);
			cpu_ce_vocab_loss_f64(x[k], r->y, N, nv, v0, -100, all, ranks, 0.5, &loss, &valid);
			assert_int_equal(valid, r->valid);
			assert_true(fabs(loss - r->loss) <= 1e-12 * fabs(r->loss));
			for (int i = 0; i < N; i++)
				for (int64_t j = 0; j < nv; j++)
					assert_true(fabs(x[k][i * nv + j] - r->g[i * V + v0 + j]) < 1e-15);
			free(x[k]);
		}
		free(all);
	}
	free(r);
}

/* The backend's ops on logits of type t against the float64 reference. */
static void ops_match(be_dtype t, double tol)
{
	titan_err e = {{0}};
	backend *be = backend_cpu_create(2, &e);
	assert_non_null(be);
	ref *r = malloc(sizeof *r);
	make_ref(r, 32);
	size_t es = be_dtype_size(t);
	for (int ranks = 1; ranks <= 4; ranks++) {
		float *all = malloc(sizeof(float) * (size_t)(ranks * N * 3));
		void *x[4];
		for (int k = 0; k < ranks; k++) {
			int64_t v0, nv;
			cols(ranks, k, &v0, &nv);
			float *f = malloc(sizeof(float) * (size_t)(N * (nv ? nv : 1)));
			for (int i = 0; i < N; i++)
				for (int64_t j = 0; j < nv; j++)
					f[i * nv + j] = (float)r->x[i * V + v0 + j];
			x[k] = malloc(es * (size_t)(N * (nv ? nv : 1)));
			be->ops->convert(be, x[k], t, f, BE_F32, N * nv);
			be->ops->ce_vocab_stats(be, x[k], t, r->y, N, nv, v0, all + k * N * 3);
			free(f);
		}
		double worst = 0;
		for (int k = 0; k < ranks; k++) {
			int64_t v0, nv, valid = 0;
			double loss = 0;
			cols(ranks, k, &v0, &nv);
			be->ops->ce_vocab_loss(be, x[k], t, r->y, N, nv, v0, -100, all, ranks, 0.5f,
					       &loss, &valid);
			assert_int_equal(be->ops->sync(be, &e), 0);
			assert_int_equal(valid, r->valid);
			assert_true(fabs(loss - r->loss) <= tol * fabs(r->loss));
			float *g = malloc(sizeof(float) * (size_t)(N * (nv ? nv : 1)));
			be->ops->convert(be, g, BE_F32, x[k], t, N * nv);
			for (int i = 0; i < N; i++)
				for (int64_t j = 0; j < nv; j++) {
					double d = fabs(g[i * nv + j] - r->g[i * V + v0 + j]);
					worst = d > worst ? d : worst;
				}
			free(g);
			free(x[k]);
		}
		print_message("%s, %d ranks: gradient max |diff| %.2e (gradient scale 0.5)\n",
			      be_dtype_name(t), ranks, worst);
		assert_true(worst < tol * 0.5);
		free(all);
	}
	free(r);
	backend_free(be);
}

static void float32_ops_match_the_float64_loss(void **s)
{
	(void)s;
	ops_match(BE_F32, 1e-5);
}

/* bfloat16 logits: the loss and gradient computed in float32 from them; the
 * reference is the float64 loss of the unrounded logits, so the bound is
 * bfloat16's rounding of a logit (2^-8 relative, logits up to 4). */
static void bfloat16_ops_match_within_bfloat16_rounding(void **s)
{
	(void)s;
	ops_match(BE_BF16, 2e-2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(float64_kernels_give_the_whole_vocabulary_loss),
		cmocka_unit_test(float32_ops_match_the_float64_loss),
		cmocka_unit_test(bfloat16_ops_match_within_bfloat16_rounding),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
