/* The CPU backend's Flux transformer training ops (backend.h's ln_mod_fwd ..
 * flow_mse), two ways:
 * - the float64 kernels (cpu_kernels.h _f64): each forward against the
 *   formula written out here in another shape (LN's statistics from sum and
 *   sum of squares, gelu's 0.5 (1 + tanh u) as sigmoid(2u)), each backward
 *   against central differences of the float64 forward of sum(dy * y);
 * - the float32 ops through the backend's table against the float64 kernels
 *   on the same inputs, within F32_TOL of the largest reference value
 *   (accumulated outputs start from a nonzero value: they add);
 * - the bfloat16 ops on the same inputs rounded to bf16, against the float64
 *   kernels on those values, within BF16_TOL: each op rounds 1 to 4 times
 *   (torch's bf16 modules' roundings, backend.h), each a relative 2^-9 at
 *   most of an intermediate that can be twice the output's largest value
 *   (ln_mod's (1 + scale) LN(x) before the shift), so 4 * 2 * 2^-9; GELU
 *   and SiLU are the float32 kernels' values rounded once, bit for bit.
 * Bad types and shapes fault at sync.  Errors are max |got - want| / max
 * |want| over a tensor, printed; seeds fixed and printed. */
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
#include "core/bf16.h"
#include "../support/testutil.h"

#define F64_TOL 1e-12 /* float64 forward vs the formula here */
#define FD_TOL 1e-7   /* float64 backward vs central differences */
#define F32_TOL 2e-6  /* float32 op vs float64 */
#define BF16_TOL (8.0 / 512) /* bfloat16 op vs float64 */
#define FD_H 1e-5
#define ACC0 0.25 /* where accumulated outputs start */

/* The shapes: b samples of n rows of d, per-sample vectors ld apart. */
enum { B = 2, N = 5, D = 12, LD = 3 * D, ROWS = B * N, NE = ROWS * D, NV = B * LD };

static backend *be;

static int setup(void **state)
{
	(void)state;
	titan_err e;
	be = backend_cpu_create(0, &e);
	return be ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	backend_free(be);
	return 0;
}

static void sync_ok(void)
{
	titan_err e;
	if (be->ops->sync(be, &e) != 0)
		fail_msg("op faulted: %s", e.msg);
}

static void expect_d(const char *what, const char *how, const double *got, const double *want,
		     size_t n, double tol)
{
	double err = test_max_rel_d(got, want, n);
	print_message("  %-28s %-16s rel err %.2e (bound %.1e)\n", what, how, err, tol);
	if (!(err <= tol))
		fail_msg("%s (%s): relative error %.3e over %.1e", what, how, err, tol);
}

/* A float32 op's output (backend memory, after sync) against float64. */
static void expect_f32(const char *what, const float *got, const double *want, size_t n)
{
	sync_ok();
	double *g = malloc(n * sizeof *g);
	assert_non_null(g);
	for (size_t i = 0; i < n; i++)
		g[i] = got[i];
	expect_d(what, "f32 vs f64", g, want, n, F32_TOL);
	free(g);
}

/* n doubles uniform in [-s, s), rounded to float32 (the float32 op's inputs). */
static double *drand_n(size_t n, double s)
{
	double *p = malloc(n * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(s * test_urand());
	return p;
}

static double *dfill(size_t n, double v)
{
	double *p = malloc(n * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return p;
}

/* The values of d in backend memory as float32. */
static float *up(const double *d, size_t n)
{
	titan_err e;
	float *p = backend_alloc_floats(be, n ? n : 1, &e);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)d[i];
	return p;
}

/* The values of d rounded to bf16, in d itself and in backend memory. */
static uint16_t *up16(double *d, size_t n)
{
	titan_err e;
	uint16_t *p = be->ops->alloc(be, 2 * (n ? n : 1), &e);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		p[i] = bf16_from_f32((float)d[i]);
		d[i] = bf16_to_f32(p[i]);
	}
	return p;
}

/* n bfloat16 values of v in backend memory (an output or accumulator). */
static uint16_t *up16_fill(size_t n, double v)
{
	double *h = dfill(n, v);
	uint16_t *p = up16(h, n);
	free(h);
	return p;
}

/* A bfloat16 op's output (after sync) against float64. */
static void expect_bf16(const char *what, const uint16_t *got, const double *want, size_t n)
{
	sync_ok();
	double *g = malloc(n * sizeof *g);
	assert_non_null(g);
	for (size_t i = 0; i < n; i++)
		g[i] = bf16_to_f32(got[i]);
	expect_d(what, "bf16 vs f64", g, want, n, BF16_TOL);
	free(g);
}

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ---- the modulated LayerNorm ---- */

/* sum(dy * ln_mod(x, shift = mod, scale = mod + D)) by the float64 kernel. */
static double ln_objective(const double *x, const double *mod, const double *dy)
{
	double y[NE], st[2 * ROWS];
	cpu_ln_mod_fwd_f64(y, st, x, mod, mod + D, LD, B, N, D, 1e-6);
	return dot(y, dy, NE);
}

/* Central differences of f at each of n values of v (changed and restored). */
#define CENTRAL(grad, v, n, f)                                                         \
	for (size_t i_ = 0; i_ < (n); i_++) {                                          \
		double keep = (v)[i_];                                                 \
		(v)[i_] = keep + FD_H;                                                 \
		double hi = (f);                                                       \
		(v)[i_] = keep - FD_H;                                                 \
		double lo = (f);                                                       \
		(v)[i_] = keep;                                                        \
		(grad)[i_] = (hi - lo) / (2 * FD_H);                                   \
	}

static void ln_mod_matches_its_formula_and_differences(void **state)
{
	(void)state;
	test_seed(29);
	double *x = drand_n(NE, 2.0), *mod = drand_n(NV, 0.5), *dy = drand_n(NE, 1.0);
	for (size_t i = 0; i < NE; i++)
		x[i] += 0.75; /* a mean away from 0 */
	double y[NE], st[2 * ROWS], want[NE];
	cpu_ln_mod_fwd_f64(y, st, x, mod, mod + D, LD, B, N, D, 1e-6);
	for (int r = 0; r < ROWS; r++) {
		double s = 0, ss = 0;
		for (int j = 0; j < D; j++)
			s += x[r * D + j], ss += x[r * D + j] * x[r * D + j];
		double mean = s / D, rstd = 1 / sqrt(ss / D - mean * mean + 1e-6);
		const double *m = mod + r / N * LD;
		for (int j = 0; j < D; j++)
			want[r * D + j] = (x[r * D + j] - mean) * rstd * (1 + m[D + j]) + m[j];
	}
	expect_d("ln_mod_fwd", "f64 vs formula", y, want, NE, F64_TOL);
	/* the backward: the kernel's accumulation from ACC0 against differences */
	double *dx = dfill(NE, ACC0), *dmod = dfill(NV, ACC0), fx[NE], fmod[NV];
	cpu_ln_mod_bwd_f64(dx, dmod, dmod + D, dy, x, st, mod + D, LD, B, N, D);
	CENTRAL(fx, x, NE, ln_objective(x, mod, dy));
	CENTRAL(fmod, mod, NV, ln_objective(x, mod, dy));
	for (size_t i = 0; i < NE; i++)
		fx[i] += ACC0;
	for (size_t i = 0; i < NV; i++) /* gate's columns [2D, 3D) are not touched */
		fmod[i] = i % LD < 2 * D ? fmod[i] + ACC0 : ACC0;
	expect_d("ln_mod_bwd dx", "f64 vs diff", dx, fx, NE, FD_TOL);
	expect_d("ln_mod_bwd dshift dscale", "f64 vs diff", dmod, fmod, NV, FD_TOL);
	/* float32 through the table */
	float *fy = up(want, NE), *fst = up(st, 2 * ROWS), *px = up(x, NE), *pm = up(mod, NV);
	double *acc = dfill(NE, ACC0), *accm = dfill(NV, ACC0);
	float *pdy = up(dy, NE), *pdx = up(acc, NE), *pdm = up(accm, NV);
	be->ops->ln_mod_fwd(be, fy, fst, px, pm, pm + D, BE_F32, LD, B, N, D, 1e-6f);
	expect_f32("ln_mod_fwd", fy, y, NE);
	expect_f32("ln_mod_fwd stats", fst, st, 2 * ROWS);
	be->ops->ln_mod_bwd(be, pdx, pdm, pdm + D, pdy, px, fst, pm + D, BE_F32, LD, B, N, D);
	expect_f32("ln_mod_bwd dx", pdx, dx, NE);
	expect_f32("ln_mod_bwd dshift dscale", pdm, dmod, NV);
	float *bufs[] = {fy, fst, px, pm, pdy, pdx, pdm};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x), free(mod), free(dy), free(dx), free(dmod), free(acc), free(accm);
}

/* ---- the gated residual ---- */

static double gate_objective(const double *x0, const double *gate, const double *y,
			     const double *dx)
{
	double x[NE];
	memcpy(x, x0, sizeof x);
	cpu_gate_add_f64(x, gate, y, LD, B, N, D);
	return dot(x, dx, NE);
}

static void gate_add_matches_its_formula_and_differences(void **state)
{
	(void)state;
	test_seed(30);
	double *x0 = drand_n(NE, 1.0), *mod = drand_n(NV, 1.0), *y = drand_n(NE, 1.0);
	double *ddx = drand_n(NE, 1.0), x[NE], want[NE];
	const double *gate = mod + 2 * D;
	memcpy(x, x0, sizeof x);
	cpu_gate_add_f64(x, gate, y, LD, B, N, D);
	for (int r = 0; r < ROWS; r++)
		for (int j = 0; j < D; j++)
			want[r * D + j] = x0[r * D + j] + y[r * D + j] * gate[r / N * LD + j];
	expect_d("gate_add", "f64 vs formula", x, want, NE, F64_TOL);
	double *dmod = dfill(NV, ACC0), dy[NE], fy[NE], fmod[NV];
	cpu_gate_add_bwd_f64(dmod + 2 * D, dy, ddx, gate, y, LD, B, N, D);
	CENTRAL(fy, y, NE, gate_objective(x0, gate, y, ddx));
	CENTRAL(fmod, mod, NV, gate_objective(x0, gate, y, ddx));
	for (size_t i = 0; i < NV; i++)
		fmod[i] += ACC0;
	expect_d("gate_add_bwd dy", "f64 vs diff", dy, fy, NE, FD_TOL);
	expect_d("gate_add_bwd dgate", "f64 vs diff", dmod, fmod, NV, FD_TOL);
	float *px = up(x0, NE), *pm = up(mod, NV), *py = up(y, NE), *pdx = up(ddx, NE);
	double *accm = dfill(NV, ACC0);
	float *pdm = up(accm, NV), *pdy = up(fy, NE);
	be->ops->gate_add(be, px, pm + 2 * D, py, BE_F32, LD, B, N, D);
	expect_f32("gate_add", px, x, NE);
	be->ops->gate_add_bwd(be, pdm + 2 * D, pdy, pdx, pm + 2 * D, py, BE_F32, LD, B, N, D);
	expect_f32("gate_add_bwd dy", pdy, dy, NE);
	expect_f32("gate_add_bwd dgate", pdm, dmod, NV);
	float *bufs[] = {px, pm, py, pdx, pdm, pdy};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x0), free(mod), free(y), free(ddx), free(dmod), free(accm);
}

/* ---- GELU, SiLU ---- */

enum { NA = 1000 };

static void one_activation(int gelu)
{
	const char *name = gelu ? "gelu_tanh" : "silu";
	double *x = drand_n(NA, 6.0), *dy = drand_n(NA, 1.0), y[NA], want[NA], dx[NA], fd[NA];
	if (gelu)
		cpu_gelu_tanh_fwd_f64(y, x, NA);
	else
		cpu_silu_fwd_f64(y, x, NA);
	for (int i = 0; i < NA; i++) {
		double u = gelu ? 2 * sqrt(2 / M_PI) * (x[i] + 0.044715 * pow(x[i], 3)) : x[i];
		want[i] = x[i] / (1 + exp(-u));
	}
	expect_d(name, "f64 vs formula", y, want, NA, F64_TOL);
	if (gelu)
		cpu_gelu_tanh_bwd_f64(dx, dy, x, NA);
	else
		cpu_silu_bwd_f64(dx, dy, x, NA);
	/* elementwise: one difference per value, each a value's own objective */
	for (int i = 0; i < NA; i++) {
		double v[2] = {x[i] + FD_H, x[i] - FD_H}, o[2];
		for (int s = 0; s < 2; s++)
			gelu ? cpu_gelu_tanh_fwd_f64(&o[s], &v[s], 1) : cpu_silu_fwd_f64(&o[s], &v[s], 1);
		fd[i] = dy[i] * (o[0] - o[1]) / (2 * FD_H);
	}
	expect_d(name, "bwd: f64 vs diff", dx, fd, NA, FD_TOL);
	float *px = up(x, NA), *pdy = up(dy, NA), *py = up(want, NA), *pdx = up(want, NA);
	if (gelu) {
		be->ops->gelu_tanh_fwd(be, py, px, BE_F32, NA);
		be->ops->gelu_tanh_bwd(be, pdx, pdy, px, BE_F32, NA);
	} else {
		be->ops->silu_fwd(be, py, px, BE_F32, NA);
		be->ops->silu_bwd(be, pdx, pdy, px, BE_F32, NA);
	}
	char bwd[32];
	snprintf(bwd, sizeof bwd, "%s bwd", name);
	expect_f32(name, py, y, NA);
	expect_f32(bwd, pdx, dx, NA);
	float *bufs[] = {px, pdy, py, pdx};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x), free(dy);
}

static void gelu_and_silu_match_their_formulas_and_differences(void **state)
{
	(void)state;
	test_seed(31);
	one_activation(1);
	one_activation(0);
}

/* ---- the loss ---- */

static void flow_mse_sums_squares_and_scales_the_gradient(void **state)
{
	(void)state;
	test_seed(32);
	enum { NL = 777 };
	double *pred = drand_n(NL, 2.0), *x = drand_n(NL, 1.0), *noise = drand_n(NL, 1.0);
	double grad[NL], want[NL], s = 0;
	double got = cpu_flow_mse_f64(grad, pred, x, noise, NL, 1.0 / NL);
	for (int i = 0; i < NL; i++) {
		double e = pred[i] + x[i] - noise[i];
		s += e * e;
		want[i] = 2 * e / NL;
	}
	expect_d("flow_mse loss", "f64 vs formula", &got, &s, 1, F64_TOL);
	expect_d("flow_mse grad", "f64 vs formula", grad, want, NL, F64_TOL);
	float *pp = up(pred, NL), *px = up(x, NL), *pn = up(noise, NL), *pg = up(want, NL);
	double sum = ACC0;
	int64_t count = 3;
	be->ops->flow_mse(be, pg, pp, px, pn, BE_F32, NL, 1.0f / NL, &sum, &count);
	expect_f32("flow_mse grad", pg, grad, NL);
	sum -= ACC0;
	expect_d("flow_mse loss", "f32 vs f64", &sum, &got, 1, F32_TOL);
	assert_int_equal(count, 3 + NL);
	be->ops->flow_mse(be, NULL, pp, px, pn, BE_F32, NL, 1.0f / NL, &sum, &count); /* loss only */
	sync_ok();
	float *bufs[] = {pp, px, pn, pg};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(pred), free(x), free(noise);
}

/* ---- bfloat16 ---- */

static void ln_mod_bf16(void)
{
	double *x = drand_n(NE, 2.0), *mod = drand_n(NV, 0.5), *dy = drand_n(NE, 1.0);
	for (size_t i = 0; i < NE; i++)
		x[i] += 0.75;
	uint16_t *px = up16(x, NE), *pm = up16(mod, NV), *pdy = up16(dy, NE);
	double y[NE], st[2 * ROWS], *dx = dfill(NE, ACC0), *dmod = dfill(NV, ACC0);
	cpu_ln_mod_fwd_f64(y, st, x, mod, mod + D, LD, B, N, D, 1e-6);
	cpu_ln_mod_bwd_f64(dx, dmod, dmod + D, dy, x, st, mod + D, LD, B, N, D);
	uint16_t *py = up16_fill(NE, 0), *pdx = up16_fill(NE, ACC0);
	uint16_t *pdm = up16_fill(NV, ACC0);
	float *fst = up(st, 2 * ROWS);
	be->ops->ln_mod_fwd(be, py, fst, px, pm, pm + D, BE_BF16, LD, B, N, D, 1e-6f);
	expect_bf16("ln_mod_fwd", py, y, NE);
	expect_f32("ln_mod_fwd stats", fst, st, 2 * ROWS);
	be->ops->ln_mod_bwd(be, pdx, pdm, pdm + D, pdy, px, fst, pm + D, BE_BF16, LD, B, N, D);
	expect_bf16("ln_mod_bwd dx", pdx, dx, NE);
	expect_bf16("ln_mod_bwd dshift dscale", pdm, dmod, NV);
	void *bufs[] = {px, pm, pdy, py, pdx, pdm, fst};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x), free(mod), free(dy), free(dx), free(dmod);
}

static void gate_add_bf16(void)
{
	double *x = drand_n(NE, 1.0), *mod = drand_n(NV, 1.0), *y = drand_n(NE, 1.0);
	double *ddx = drand_n(NE, 1.0), *dmod = dfill(NV, ACC0), dy[NE];
	uint16_t *px = up16(x, NE), *pm = up16(mod, NV), *py = up16(y, NE), *pdx = up16(ddx, NE);
	uint16_t *pdm = up16_fill(NV, ACC0), *pdy = up16_fill(NE, 0);
	cpu_gate_add_bwd_f64(dmod + 2 * D, dy, ddx, mod + 2 * D, y, LD, B, N, D);
	cpu_gate_add_f64(x, mod + 2 * D, y, LD, B, N, D);
	be->ops->gate_add(be, px, pm + 2 * D, py, BE_BF16, LD, B, N, D);
	expect_bf16("gate_add", px, x, NE);
	be->ops->gate_add_bwd(be, pdm + 2 * D, pdy, pdx, pm + 2 * D, py, BE_BF16, LD, B, N, D);
	expect_bf16("gate_add_bwd dy", pdy, dy, NE);
	expect_bf16("gate_add_bwd dgate", pdm, dmod, NV);
	void *bufs[] = {px, pm, py, pdx, pdm, pdy};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x), free(mod), free(y), free(ddx), free(dmod);
}

/* GELU and SiLU in bf16: the float32 kernel's value rounded, bit for bit. */
static void activation_bf16(int gelu)
{
	const char *name = gelu ? "gelu_tanh" : "silu";
	double *x = drand_n(NA, 6.0), *dy = drand_n(NA, 1.0);
	uint16_t *px = up16(x, NA), *pdy = up16(dy, NA), *py = up16_fill(NA, 0);
	uint16_t *pdx = up16_fill(NA, 0);
	float fx[NA], fdy[NA], fy[NA], fdx[NA];
	for (int i = 0; i < NA; i++)
		fx[i] = (float)x[i], fdy[i] = (float)dy[i];
	if (gelu) {
		cpu_gelu_tanh_fwd_f32(fy, fx, NA);
		cpu_gelu_tanh_bwd_f32(fdx, fdy, fx, NA);
		be->ops->gelu_tanh_fwd(be, py, px, BE_BF16, NA);
		be->ops->gelu_tanh_bwd(be, pdx, pdy, px, BE_BF16, NA);
	} else {
		cpu_silu_fwd_f32(fy, fx, NA);
		cpu_silu_bwd_f32(fdx, fdy, fx, NA);
		be->ops->silu_fwd(be, py, px, BE_BF16, NA);
		be->ops->silu_bwd(be, pdx, pdy, px, BE_BF16, NA);
	}
	sync_ok();
	int off = 0;
	for (int i = 0; i < NA; i++)
		off += py[i] != bf16_from_f32(fy[i]) || pdx[i] != bf16_from_f32(fdx[i]);
	print_message("  %-28s bf16 vs f32 rounded: %d of %d differ\n", name, off, 2 * NA);
	assert_int_equal(off, 0);
	void *bufs[] = {px, pdy, py, pdx};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(x), free(dy);
}

static void flow_mse_bf16(void)
{
	enum { NL = 777 };
	double *pred = drand_n(NL, 2.0), *x = drand_n(NL, 1.0), *noise = drand_n(NL, 1.0);
	uint16_t *pp = up16(pred, NL), *px = up16(x, NL), *pn = up16(noise, NL);
	uint16_t *pg = up16_fill(NL, 0);
	double grad[NL], got = cpu_flow_mse_f64(grad, pred, x, noise, NL, 1.0 / NL), sum = 0;
	int64_t count = 0;
	be->ops->flow_mse(be, pg, pp, px, pn, BE_BF16, NL, 1.0f / NL, &sum, &count);
	expect_bf16("flow_mse grad", pg, grad, NL);
	expect_d("flow_mse loss", "bf16 vs f64", &sum, &got, 1, BF16_TOL);
	assert_int_equal(count, NL);
	void *bufs[] = {pp, px, pn, pg};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		be->ops->free(be, bufs[i]);
	free(pred), free(x), free(noise);
}

static void bf16_ops_are_within_their_roundings(void **state)
{
	(void)state;
	test_seed(33);
	ln_mod_bf16();
	gate_add_bf16();
	activation_bf16(1);
	activation_bf16(0);
	flow_mse_bf16();
}

static void faults(const char *op)
{
	titan_err e;
	assert_int_equal(be->ops->sync(be, &e), -1);
	print_message("  %s\n", e.msg);
	assert_non_null(strstr(e.msg, op));
}

static void other_types_and_bad_shapes_fault_at_sync(void **state)
{
	(void)state;
	titan_err e;
	float *p = backend_calloc_floats(be, 64, &e), st[16];
	double sum = 0;
	int64_t count = 0;
	assert_non_null(p);
	be->ops->ln_mod_fwd(be, p, st, p, p, p, BE_F32, 3, 1, 2, 4, 1e-6f); /* ld < d */
	faults("ln_mod_fwd");
	be->ops->ln_mod_bwd(be, p, p, p, p, p, st, p, BE_E5M2, 8, 1, 2, 4);
	faults("ln_mod_bwd");
	be->ops->gate_add(be, p, p, p, BE_F32, 4, 1, 0, 4); /* no rows */
	faults("gate_add");
	be->ops->gate_add_bwd(be, p, p, p, p, p, BE_F32, 4, -1, 1, 4);
	faults("gate_add_bwd");
	be->ops->gelu_tanh_fwd(be, p, p, BE_E4M3, 4);
	faults("gelu_tanh_fwd");
	be->ops->gelu_tanh_bwd(be, p, p, p, BE_E4M3, 4);
	faults("gelu_tanh_bwd");
	be->ops->silu_fwd(be, p, p, BE_F32, -1);
	faults("silu_fwd");
	be->ops->silu_bwd(be, p, p, p, BE_E5M2, 4);
	faults("silu_bwd");
	be->ops->flow_mse(be, p, p, p, p, BE_E4M3, 4, 1.0f, &sum, &count);
	faults("flow_mse");
	assert_int_equal(count, 0);
	be->ops->free(be, p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ln_mod_matches_its_formula_and_differences),
		cmocka_unit_test(gate_add_matches_its_formula_and_differences),
		cmocka_unit_test(gelu_and_silu_match_their_formulas_and_differences),
		cmocka_unit_test(flow_mse_sums_squares_and_scales_the_gradient),
		cmocka_unit_test(bf16_ops_are_within_their_roundings),
		cmocka_unit_test(other_types_and_bad_shapes_fault_at_sync),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
