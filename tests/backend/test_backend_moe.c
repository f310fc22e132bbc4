/* The mixture-of-experts ops against independent references: routing against a
 * plain sort of torchtitan's formula, its backward against central finite
 * differences of the float64 forward, the sort by expert against a stable
 * argsort, gather / combine / dot against their definitions (and each other:
 * combine is gather's adjoint), the grouped matmul's three modes against a
 * loop of per-expert products; every float32 op against its float64 twin.
 * Seeds fixed and printed; outputs poisoned before each op runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"

static uint64_t rng_state;

static void seed(uint64_t s)
{
	print_message("seed %llu\n", (unsigned long long)s);
	rng_state = s;
}

static double urand(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* n random values rounded through float32, as double and as float. */
static void rnd2(double **d, float **f, size_t n, double scale)
{
	*d = malloc(n * sizeof(double) + 8);
	*f = malloc(n * sizeof(float) + 4);
	assert_true(*d && *f);
	for (size_t i = 0; i < n; i++) {
		(*f)[i] = (float)(scale * urand());
		(*d)[i] = (*f)[i];
	}
}

static double rel_err(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return den > 0 ? num / den : num;
}

/* ---- routing ---- */

typedef struct ref_route {
	double s[64];
	int idx[8];
	double w[8];
} ref_route;

static const double *sort_key;
static int by_key_desc(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	if (sort_key[i] != sort_key[j])
		return sort_key[i] > sort_key[j] ? -1 : 1;
	return i - j;
}

/* torchtitan's TokenChoiceTopKRouter for one token, written from its code:
 * scores, + bias for the choice, groups ranked by their top-2 sum, experts
 * sorted by choice. */
static void route_ref(ref_route *o, const double *lg, const double *bias, const be_moe *r,
		      int64_t t)
{
	int e = (int)r->e, k = (int)r->k, order[64];
	double mx = lg[0], sum = 0, choice[64];
	for (int i = 1; i < e; i++)
		mx = fmax(mx, lg[i]);
	for (int i = 0; i < e; i++) {
		o->s[i] = r->score == BE_MOE_SOFTMAX ? exp(lg[i] - mx) : 1 / (1 + exp(-lg[i]));
		sum += o->s[i];
	}
	for (int i = 0; i < e; i++) {
		if (r->score == BE_MOE_SOFTMAX)
			o->s[i] /= sum;
		choice[i] = o->s[i] + (bias ? bias[i] : 0);
	}
	if (r->groups) {
		int per = e / (int)r->groups, go[64];
		double gs[64];
		for (int g = 0; g < r->groups; g++) {
			for (int i = 0; i < per; i++)
				order[i] = g * per + i;
			sort_key = choice;
			qsort(order, (size_t)per, sizeof(int), by_key_desc);
			gs[g] = choice[order[0]] + choice[order[1]];
			go[g] = g;
		}
		sort_key = gs;
		qsort(go, (size_t)r->groups, sizeof(int), by_key_desc);
		for (int j = (int)r->limited; j < r->groups; j++)
			for (int i = 0; i < per; i++)
				choice[go[j] * per + i] = -INFINITY;
	}
	for (int i = 0; i < e; i++)
		order[i] = i;
	sort_key = choice;
	qsort(order, (size_t)e, sizeof(int), by_key_desc);
	double top = 0;
	for (int j = 0; j < k; j++) {
		o->idx[j] = r->force_balance ? (int)((t * k + j) % e) : order[j];
		top += o->s[o->idx[j]];
	}
	for (int j = 0; j < k; j++)
		o->w[j] = (r->route_norm ? o->s[o->idx[j]] / (top + 1e-20) : o->s[o->idx[j]]) *
			  r->route_scale;
}

static void check_route(be_moe r, int with_bias, uint64_t sd)
{
	seed(sd);
	int64_t n = r.n, e = r.e, k = r.k;
	double *lg, *bias;
	float *lgf, *biasf;
	rnd2(&lg, &lgf, (size_t)(n * e), 3.0);
	rnd2(&bias, &biasf, (size_t)e, 0.05);
	float *s = malloc(sizeof(float) * (size_t)(n * e)), *w = malloc(sizeof(float) * (size_t)(n * k));
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n * k));
	memset(idx, 0xff, sizeof(int32_t) * (size_t)(n * k));
	memset(w, 0xff, sizeof(float) * (size_t)(n * k));
	cpu_moe_route_f32(s, idx, w, lgf, with_bias ? biasf : NULL, &r);
	double werr = 0, serr = 0;
	for (int64_t t = 0; t < n; t++) {
		ref_route o;
		route_ref(&o, lg + t * e, with_bias ? bias : NULL, &r, t);
		for (int j = 0; j < k; j++) {
			if (idx[t * k + j] != o.idx[j])
				fail_msg("token %lld choice %d: expert %d, reference %d", (long long)t, j,
					 idx[t * k + j], o.idx[j]);
			werr = fmax(werr, fabs(w[t * k + j] - o.w[j]));
		}
		serr = fmax(serr, rel_err(s + t * e, o.s, (size_t)e));
	}
	print_message("route e %lld k %lld score %d groups %lld/%lld bias %d: scores err %.1e, "
		      "weights err %.1e\n", (long long)e, (long long)k, r.score, (long long)r.groups,
		      (long long)r.limited, with_bias, serr, werr);
	assert_true(serr < 1e-6 && werr < 1e-6 * r.route_scale);
	free(lg), free(lgf), free(bias), free(biasf), free(s), free(w), free(idx);
}

static void routing_picks_torchtitans_top_k_by_score_plus_bias(void **st)
{
	(void)st;
	check_route((be_moe){.n = 97, .e = 64, .k = 8, .score = BE_MOE_SOFTMAX, .route_norm = 1,
			     .route_scale = 1}, 0, 11);
	check_route((be_moe){.n = 50, .e = 16, .k = 4, .score = BE_MOE_SIGMOID, .route_norm = 1,
			     .route_scale = 2.5f}, 1, 12);
	check_route((be_moe){.n = 50, .e = 16, .k = 1, .score = BE_MOE_SIGMOID,
			     .route_scale = 1}, 1, 13);
	/* DeepSeek-V3's node-limited routing: 8 groups, 4 kept */
	check_route((be_moe){.n = 64, .e = 64, .k = 6, .score = BE_MOE_SIGMOID, .route_norm = 1,
			     .route_scale = 2.5f, .groups = 8, .limited = 4}, 1, 14);
	check_route((be_moe){.n = 33, .e = 8, .k = 3, .score = BE_MOE_SOFTMAX, .route_norm = 1,
			     .route_scale = 1, .force_balance = 1}, 0, 15);
}

/* d(sum(w * g))/d logits by central differences of the float64 forward, the
 * choice held (small steps do not change it). */
static void check_route_bwd(be_moe r, uint64_t sd)
{
	seed(sd);
	int64_t n = r.n, e = r.e, k = r.k;
	double *lg, *g, *s = malloc(sizeof(double) * (size_t)(n * e)), *w = malloc(sizeof(double) * (size_t)(n * k));
	float *lgf, *gf;
	rnd2(&lg, &lgf, (size_t)(n * e), 3.0);
	rnd2(&g, &gf, (size_t)(n * k), 1.0);
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n * k)), *idx2 = malloc(sizeof(int32_t) * (size_t)(n * k));
	double *dl = malloc(sizeof(double) * (size_t)(n * e)), *fd = malloc(sizeof(double) * (size_t)(n * e));
	cpu_moe_route_f64(s, idx, w, lg, NULL, &r);
	cpu_moe_route_bwd_f64(dl, g, s, idx, &r);
	const double h = 1e-6;
	for (int64_t i = 0; i < n * e; i++) {
		double keep = lg[i], lp = 0, lm = 0;
		lg[i] = keep + h;
		cpu_moe_route_f64(s, idx2, w, lg, NULL, &r);
		for (int64_t j = 0; j < n * k; j++)
			lp += w[j] * g[j];
		assert_memory_equal(idx, idx2, sizeof(int32_t) * (size_t)(n * k));
		lg[i] = keep - h;
		cpu_moe_route_f64(s, idx2, w, lg, NULL, &r);
		for (int64_t j = 0; j < n * k; j++)
			lm += w[j] * g[j];
		lg[i] = keep;
		fd[i] = (lp - lm) / (2 * h);
	}
	double num = 0, den = 0;
	for (int64_t i = 0; i < n * e; i++) {
		num = fmax(num, fabs(dl[i] - fd[i]));
		den = fmax(den, fabs(fd[i]));
	}
	/* float32 against float64 */
	float *sf = malloc(sizeof(float) * (size_t)(n * e)), *wf = malloc(sizeof(float) * (size_t)(n * k));
	float *dlf = malloc(sizeof(float) * (size_t)(n * e));
	cpu_moe_route_f64(s, idx, w, lg, NULL, &r);
	cpu_moe_route_f32(sf, idx2, wf, lgf, NULL, &r);
	cpu_moe_route_bwd_f32(dlf, gf, sf, idx2, &r);
	double e32 = rel_err(dlf, dl, (size_t)(n * e));
	print_message("route bwd score %d norm %d: vs finite differences %.1e, f32 vs f64 %.1e\n",
		      r.score, r.route_norm, num / den, e32);
	assert_true(num / den < 1e-6);
	assert_true(e32 < 2e-6);
	free(lg), free(g), free(s), free(w), free(lgf), free(gf), free(idx), free(idx2), free(dl);
	free(fd), free(sf), free(wf), free(dlf);
}

static void routing_backward_matches_finite_differences(void **st)
{
	(void)st;
	check_route_bwd((be_moe){.n = 9, .e = 16, .k = 4, .score = BE_MOE_SOFTMAX, .route_norm = 1,
				 .route_scale = 1.5f}, 21);
	check_route_bwd((be_moe){.n = 9, .e = 16, .k = 4, .score = BE_MOE_SOFTMAX,
				 .route_scale = 1}, 22);
	check_route_bwd((be_moe){.n = 9, .e = 12, .k = 3, .score = BE_MOE_SIGMOID, .route_norm = 1,
				 .route_scale = 2.5f}, 23);
	check_route_bwd((be_moe){.n = 9, .e = 12, .k = 2, .score = BE_MOE_SIGMOID,
				 .route_scale = 1, .force_balance = 1}, 24);
}

/* ---- the sort by expert ---- */

static int64_t *ref_idx;
static int by_expert_then_position(const void *a, const void *b)
{
	int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
	if (ref_idx[i] != ref_idx[j])
		return ref_idx[i] < ref_idx[j] ? -1 : 1;
	return i < j ? -1 : 1;
}

/* torch.argsort(idx, stable=True), each expert then cut to its capacity. */
static void check_permute(int64_t n, int64_t e, int64_t k, int64_t cap, uint64_t sd)
{
	seed(sd);
	be_moe r = {.n = n, .e = e, .k = k, .capacity = cap};
	int64_t na = n * k, *order = malloc(sizeof(int64_t) * (size_t)na);
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)na), *perm = malloc(sizeof(int32_t) * (size_t)na);
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)na), *offs = malloc(sizeof(int32_t) * (size_t)(e + 1));
	ref_idx = malloc(sizeof(int64_t) * (size_t)na);
	float *counts = calloc((size_t)e, sizeof(float));
	for (int64_t a = 0; a < na; a++) {
		/* skewed: expert 0 takes about half */
		double u = urand();
		idx[a] = u < 0 ? 0 : (int32_t)(1 + (int64_t)((u * 1e6)) % (e - 1));
		ref_idx[a] = idx[a];
		order[a] = a;
	}
	qsort(order, (size_t)na, sizeof(int64_t), by_expert_then_position);
	memset(perm, 0x55, sizeof(int32_t) * (size_t)na);
	memset(pos, 0x55, sizeof(int32_t) * (size_t)na);
	counts[1] = 7; /* counts accumulate */
	cpu_moe_permute_f32(perm, pos, offs, counts, idx, &r);
	int64_t row = 0, dropped = 0;
	for (int64_t i = 0, x = 0; x < e; x++) {
		int64_t cnt = 0;
		assert_int_equal(offs[x], row);
		for (; i < na && ref_idx[order[i]] == x; i++, cnt++) {
			int64_t a = order[i];
			if (cap && cnt >= cap) {
				assert_int_equal(pos[a], -1);
				dropped++;
				continue;
			}
			assert_int_equal(perm[row], a);
			assert_int_equal(pos[a], row);
			row++;
		}
		assert_true(counts[x] == (float)(cnt + (x == 1 ? 7 : 0)));
	}
	assert_int_equal(offs[e], row);
	for (int64_t i = row; i < na; i++)
		assert_int_equal(perm[i], -1);
	print_message("permute %lld assignments to %lld experts, capacity %lld: %lld dropped\n",
		      (long long)na, (long long)e, (long long)cap, (long long)dropped);
	assert_true(cap || dropped == 0);
	free(order), free(idx), free(perm), free(pos), free(offs), free(ref_idx), free(counts);
}

static void sort_by_expert_is_a_stable_argsort_cut_at_capacity(void **st)
{
	(void)st;
	check_permute(100, 8, 2, 0, 31);
	check_permute(100, 8, 2, 30, 32);
	check_permute(7, 64, 8, 0, 33); /* most experts empty */
}

/* ---- gather, combine, dot ---- */

static void gather_combine_and_dot_match_definitions(void **st)
{
	(void)st;
	seed(41);
	int64_t n = 23, e = 6, k = 3, d = 37, na = n * k;
	be_moe r = {.n = n, .e = e, .k = k, .capacity = 10};
	int32_t *idx = malloc(sizeof(int32_t) * (size_t)na), *perm = malloc(sizeof(int32_t) * (size_t)na);
	int32_t *pos = malloc(sizeof(int32_t) * (size_t)na), offs[7];
	for (int64_t t = 0; t < n; t++)
		for (int64_t j = 0; j < k; j++)
			idx[t * k + j] = (int32_t)((t + j * 2) % e);
	cpu_moe_permute_f32(perm, pos, offs, NULL, idx, &r);
	double *x, *w, *y, *u;
	float *xf, *wf, *yf, *uf;
	rnd2(&x, &xf, (size_t)(n * d), 1);
	rnd2(&w, &wf, (size_t)na, 1);
	rnd2(&y, &yf, (size_t)(na * d), 1);
	rnd2(&u, &uf, (size_t)(n * d), 1);
	double *gy = malloc(sizeof(double) * (size_t)(na * d)), *co = malloc(sizeof(double) * (size_t)(n * d));
	double *dw = malloc(sizeof(double) * (size_t)na);
	float *gyf = malloc(sizeof(float) * (size_t)(na * d)), *cof = malloc(sizeof(float) * (size_t)(n * d));
	float *dwf = malloc(sizeof(float) * (size_t)na);
	memset(gy, 0xff, sizeof(double) * (size_t)(na * d));
	cpu_moe_gather_f64(gy, x, perm, offs, w, &r, d);
	for (int64_t row = 0; row < na; row++)
		for (int64_t i = 0; i < d; i++) {
			double want = row < offs[e] ? x[perm[row] / k * d + i] * w[perm[row]] : 0;
			assert_true(gy[row * d + i] == want);
		}
	/* combine: out = sum_j w y[pos], dropped skipped; beta keeps a part of out */
	memcpy(co, u, sizeof(double) * (size_t)(n * d));
	cpu_moe_combine_f64(co, y, pos, w, 0.5, &r, d);
	double num = 0;
	for (int64_t t = 0; t < n; t++)
		for (int64_t i = 0; i < d; i++) {
			double want = 0.5 * u[t * d + i];
			for (int64_t j = 0; j < k; j++)
				if (pos[t * k + j] >= 0)
					want += w[t * k + j] * y[pos[t * k + j] * d + i];
			num = fmax(num, fabs(co[t * d + i] - want));
		}
	assert_true(num < 1e-13);
	/* adjoint: <combine(y), u> == <y, gather(u)> with the same weights */
	cpu_moe_combine_f64(co, y, pos, w, 0, &r, d);
	cpu_moe_gather_f64(gy, u, perm, offs, w, &r, d);
	double lhs = 0, rhs = 0;
	for (int64_t i = 0; i < n * d; i++)
		lhs += co[i] * u[i];
	for (int64_t i = 0; i < offs[e] * d; i++)
		rhs += y[i] * gy[i];
	assert_true(fabs(lhs - rhs) < 1e-11 * fabs(lhs));
	/* dot: the weights' gradient of <combine(y), u> */
	cpu_moe_dot_f64(dw, y, u, pos, &r, d);
	for (int64_t a = 0; a < na; a++) {
		double want = 0;
		for (int64_t i = 0; pos[a] >= 0 && i < d; i++)
			want += y[pos[a] * d + i] * u[a / k * d + i];
		assert_true(fabs(dw[a] - want) < 1e-12);
	}
	/* float32 against float64 */
	cpu_moe_gather_f32(gyf, uf, perm, offs, wf, &r, d);
	cpu_moe_combine_f32(cof, yf, pos, wf, 0, &r, d);
	cpu_moe_dot_f32(dwf, yf, uf, pos, &r, d);
	double e1 = rel_err(gyf, gy, (size_t)(na * d)), e2 = rel_err(cof, co, (size_t)(n * d));
	double e3 = rel_err(dwf, dw, (size_t)na);
	print_message("gather %.1e, combine %.1e, dot %.1e (f32 vs f64); %d rows kept of %lld\n", e1,
		      e2, e3, offs[e], (long long)na);
	assert_true(e1 < 1e-7 && e2 < 1e-6 && e3 < 1e-6);
	assert_true(offs[e] < na); /* the capacity dropped some */
	free(idx), free(perm), free(pos), free(x), free(xf), free(w), free(wf), free(y), free(yf);
	free(u), free(uf), free(gy), free(co), free(dw), free(gyf), free(cof), free(dwf);
}

/* ---- grouped matmul ---- */

static void check_gmm(int mode, const int32_t *offs, int64_t g, int64_t rows, int64_t nn,
		      int64_t kk, double beta, uint64_t sd)
{
	seed(sd);
	int64_t used = offs[g];
	size_t na = mode == BE_GMM_FWD ? (size_t)(rows * kk) : (size_t)(rows * nn);
	size_t nb = mode == BE_GMM_DW ? (size_t)(rows * kk) : (size_t)(g * nn * kk);
	size_t nc = mode == BE_GMM_FWD ? (size_t)(rows * nn)
		    : mode == BE_GMM_DX ? (size_t)(rows * kk) : (size_t)(g * nn * kk);
	double *a, *b, *c, *c0;
	float *af, *bf, *cf, *c0f;
	rnd2(&a, &af, na, 1);
	rnd2(&b, &bf, nb, 1);
	rnd2(&c0, &c0f, nc, 1);
	c = malloc(sizeof(double) * nc);
	cf = malloc(sizeof(float) * nc);
	memcpy(c, c0, sizeof(double) * nc);
	memcpy(cf, c0f, sizeof(float) * nc);
	cpu_grouped_matmul_f64(mode, g, offs, rows, nn, kk, a, b, beta, c);
	cpu_grouped_matmul_f32(mode, g, offs, rows, nn, kk, af, bf, (float)beta, cf);
	double num = 0, den = 0;
	for (int64_t x = 0; x < g; x++)
		for (int64_t r = offs[x]; r < offs[x + 1] || (mode == BE_GMM_DW && r == offs[x]); r++) {
			if (mode == BE_GMM_DW)
				break;
			int64_t w = mode == BE_GMM_FWD ? nn : kk;
			for (int64_t j = 0; j < w; j++) {
				double want = beta * c0[r * w + j];
				for (int64_t q = 0; q < (mode == BE_GMM_FWD ? kk : nn); q++)
					want += mode == BE_GMM_FWD
							? a[r * kk + q] * b[(x * nn + j) * kk + q]
							: a[r * nn + q] * b[(x * nn + q) * kk + j];
				num = fmax(num, fabs(c[r * w + j] - want));
				den = fmax(den, fabs(want));
			}
		}
	if (mode == BE_GMM_DW)
		for (int64_t x = 0; x < g; x++)
			for (int64_t i = 0; i < nn; i++)
				for (int64_t j = 0; j < kk; j++) {
					double want = beta * c0[(x * nn + i) * kk + j];
					for (int64_t r = offs[x]; r < offs[x + 1]; r++)
						want += a[r * nn + i] * b[r * kk + j];
					num = fmax(num, fabs(c[(x * nn + i) * kk + j] - want));
					den = fmax(den, fabs(want));
				}
	if (mode != BE_GMM_DW && beta == 0) /* rows past the groups: zero */
		for (size_t i = (size_t)used * (mode == BE_GMM_FWD ? nn : kk); i < nc; i++)
			assert_true(c[i] == 0 && cf[i] == 0);
	double e32 = rel_err(cf, c, nc);
	print_message("grouped matmul mode %d, %lld groups, %lld of %lld rows: vs per-group loop "
		      "%.1e, f32 vs f64 %.1e\n", mode, (long long)g, (long long)used,
		      (long long)rows, num / den, e32);
	assert_true(num / den < 1e-13);
	assert_true(e32 < 1e-5);
	free(a), free(b), free(c), free(c0), free(af), free(bf), free(cf), free(c0f);
}

static void grouped_matmul_modes_match_a_loop_over_experts(void **st)
{
	(void)st;
	/* uneven groups, empty ones, a large one split into blocks, unused rows */
	int32_t offs[7] = {0, 5, 5, 300, 301, 301, 340};
	for (int mode = BE_GMM_FWD; mode <= BE_GMM_DW; mode++) {
		check_gmm(mode, offs, 6, 360, 19, 70, 0, 51 + (uint64_t)mode);
		check_gmm(mode, offs, 6, 360, 19, 70, 1, 61 + (uint64_t)mode);
		check_gmm(mode, offs, 6, 340, 150, 8, 0, 71 + (uint64_t)mode);
	}
}

/* Through the backend table: the same numbers, and results that do not depend
 * on the thread count. */
static void backend_ops_are_the_kernels_and_independent_of_threads(void **st)
{
	(void)st;
	titan_err e = {0};
	seed(81);
	int64_t rows = 600, nn = 96, kk = 80, g = 5;
	int32_t offs[6] = {0, 100, 100, 350, 590, 600};
	double *a, *b;
	float *af, *bf;
	rnd2(&a, &af, (size_t)(rows * nn), 1);
	rnd2(&b, &bf, (size_t)(rows * kk), 1);
	float *c[2];
	for (int i = 0; i < 2; i++) {
		backend *be = backend_cpu_create(i ? 3 : 1, &e);
		c[i] = calloc((size_t)(g * nn * kk), sizeof(float));
		be->ops->grouped_matmul(be, BE_GMM_DW, g, offs, rows, nn, kk, af, bf, BE_F32, 1, c[i],
					BE_F32);
		assert_int_equal(be->ops->sync(be, &e), 0);
		be->ops->grouped_matmul(be, BE_GMM_DW, g, offs, rows, nn, kk, af, bf, BE_E5M2, 1, c[i],
					BE_F32);
		assert_int_equal(be->ops->sync(be, &e), -1);
		assert_non_null(strstr(e.msg, "grouped_matmul"));
		backend_free(be);
	}
	assert_memory_equal(c[0], c[1], sizeof(float) * (size_t)(g * nn * kk));
	free(a), free(b), free(af), free(bf), free(c[0]), free(c[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(routing_picks_torchtitans_top_k_by_score_plus_bias),
		cmocka_unit_test(routing_backward_matches_finite_differences),
		cmocka_unit_test(sort_by_expert_is_a_stable_argsort_cut_at_capacity),
		cmocka_unit_test(gather_combine_and_dot_match_definitions),
		cmocka_unit_test(grouped_matmul_modes_match_a_loop_over_experts),
		cmocka_unit_test(backend_ops_are_the_kernels_and_independent_of_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
