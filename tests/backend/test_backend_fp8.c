/* The CPU backend's float8 ops (f8_amax, f8_cast, f8_matmul) through its op
 * table, against torchao and float64:
 *   - every cast of every operand of the three GEMMs of a linear, for each
 *     recipe, against torchao's own float8 bytes and scales
 *     (tests/float8/golden, scripts/float8_golden.py), bit for bit, in the
 *     operand's layout and transposed (the layout the GEMMs read);
 *   - the scaled GEMM on torchao's bytes and scales gives Float8Linear
 *     (emulate=True)'s output and gradients within TOL (the float32 GEMMs
 *     differ in summation order alone);
 *   - the scaled GEMM against a float64 sum of the dequantized operands, with
 *     tensorwise, row-wise and mixed scales, float32 and bfloat16 outputs,
 *     beta 0 and 1;
 *   - bfloat16 inputs cast as their (exact) float32 values; amax against a
 *     float64 scan with a NaN; a precomputed amax gives the scales of the
 *     amax it came from;
 *   - element types the ops do not take are faults at the next sync. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bf16.h"
#include "float8/float8.h"
#include "../float8/golden_io.h"
#include "../support/testutil.h"

#define TOL 1e-5

static json_t *index_json;
static backend *be;

static int setup(void **state)
{
	(void)state;
	titan_err e = {0};
	index_json = f8_golden_index();
	if (!(be = backend_cpu_create(0, &e)))
		fprintf(stderr, "%s\n", e.msg);
	return !index_json || !be;
}

static int teardown(void **state)
{
	(void)state;
	json_decref(index_json);
	backend_free(be);
	return 0;
}

static void sync_ok(void)
{
	titan_err e = {0};
	if (be->ops->sync(be, &e))
		fail_msg("%s", e.msg);
}

static be_dtype qtype(f8_format f)
{
	return f == F8_E5M2 ? BE_E5M2 : BE_E4M3;
}

static uint8_t *transposed(const uint8_t *q, int64_t rows, int64_t cols)
{
	uint8_t *t = malloc((size_t)(rows * cols));
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			t[j * rows + i] = q[i * cols + j];
	return t;
}

/* The golden operands of a linear case: name, source tensor, shape. */
typedef struct operand {
	const char *name;
	int op;
	char which; /* x (M, K), w (N, K), d: dy (M, N) */
} operand;

static const operand OPERANDS[] = {
	{"input", F8_INPUT, 'x'},       {"weight", F8_WEIGHT, 'w'},
	{"grad_output", F8_GRAD_OUTPUT, 'd'}, {"weight_gi", F8_WEIGHT_GI, 'w'},
	{"grad_output_gw", F8_GRAD_OUTPUT_GW, 'd'}, {"input_gw", F8_INPUT_GW, 'x'},
};

typedef struct lcase {
	const char *name;
	int64_t m, n, k;
	float *x, *w, *dy;
} lcase;

/* One operand cast by the backend (layout as stored, then transposed) checked
 * byte for byte against torchao's. */
static void check_cast(const lcase *c, const f8_recipe *r, const operand *o, const json_t *want)
{
	f8_scaling s = f8_operand_scaling(r, o->op);
	const float *src = o->which == 'x' ? c->x : o->which == 'w' ? c->w : c->dy;
	int64_t rows = o->which == 'w' ? c->n : c->m;
	int64_t cols = o->which == 'd' ? c->n : c->k;
	int64_t ns = f8_n_scales(s, rows, cols);
	f8_format fmt = r->cast[o->op].fmt;
	uint8_t *wq = read_golden(want, "bits", 1, (size_t)(rows * cols));
	float *ws = read_golden(want, "scale", 4, (size_t)ns);
	uint8_t *wt = transposed(wq, rows, cols);
	uint8_t *q = malloc((size_t)(rows * cols));
	float *sc = malloc(sizeof(float) * (size_t)ns);
	for (int t = 0; t < 2; t++) {
		memset(q, 0x55, (size_t)(rows * cols));
		for (int64_t i = 0; i < ns; i++)
			sc[i] = NAN;
		be->ops->f8_cast(be, q, qtype(fmt), sc, src, BE_F32, rows, cols, s, r->pow2_scales, t,
				 NULL);
		sync_ok();
		for (int64_t i = 0; i < ns; i++)
			if (!same_float(sc[i], ws[i]))
				fail_msg("%s %s %s: scale %lld %.9g, torchao %.9g", c->name, r->name,
					 o->name, (long long)i, sc[i], ws[i]);
		const uint8_t *ref = t ? wt : wq;
		for (int64_t i = 0; i < rows * cols; i++)
			if (q[i] != ref[i])
				fail_msg("%s %s %s%s: byte %lld 0x%02x, torchao 0x%02x", c->name, r->name,
					 o->name, t ? " transposed" : "", (long long)i, q[i], ref[i]);
	}
	free(wq);
	free(ws);
	free(wt);
	free(q);
	free(sc);
}


typedef struct golden_cast {
	uint8_t *q; /* as the GEMM reads it: reduction dimension contiguous */
	float *s;
	int64_t ns;
	be_dtype t;
} golden_cast;

/* torchao's cast of an operand, laid out for the GEMM (transposed when the
 * GEMM reduces over its rows). */
static golden_cast load_cast(const lcase *c, const f8_recipe *r, const json_t *casts,
			     const char *name, int op, int64_t rows, int64_t cols, int transpose)
{
	const json_t *want = at(casts, name);
	golden_cast g = {.ns = (int64_t)num(want, "n_scales"), .t = qtype(r->cast[op].fmt)};
	(void)c;
	uint8_t *q = read_golden(want, "bits", 1, (size_t)(rows * cols));
	g.s = read_golden(want, "scale", 4, (size_t)g.ns);
	g.q = transpose ? transposed(q, rows, cols) : q;
	if (transpose)
		free(q);
	return g;
}

static void free_cast(golden_cast *g)
{
	free(g->q);
	free(g->s);
}

/* Float8Linear's three GEMMs from torchao's own bytes and scales. */
static void check_gemms(const lcase *c, const f8_recipe *r, const json_t *rc)
{
	int64_t m = c->m, n = c->n, k = c->k;
	const json_t *casts = at(rc, "casts");
	float *y = malloc(sizeof(float) * (size_t)(m * n));
	float *dx = malloc(sizeof(float) * (size_t)(m * k));
	float *dw = calloc((size_t)(n * k), sizeof(float));
	float *wy = read_golden(rc, "y", 4, (size_t)(m * n));
	float *wdx = read_golden(rc, "dx", 4, (size_t)(m * k));
	float *wdw = read_golden(rc, "dw", 4, (size_t)(n * k));
	/* output: y (M, N) = x (M, K) . w (N, K) */
	golden_cast a = load_cast(c, r, casts, "input", F8_INPUT, m, k, 0);
	golden_cast b = load_cast(c, r, casts, "weight", F8_WEIGHT, n, k, 0);
	be->ops->f8_matmul(be, m, n, k, a.q, a.t, a.s, a.ns, b.q, b.t, b.s, b.ns, 0, y, BE_F32);
	free_cast(&a);
	free_cast(&b);
	/* grad_input: dx (M, K) = dy (M, N) . w^T (K, N) */
	a = load_cast(c, r, casts, "grad_output", F8_GRAD_OUTPUT, m, n, 0);
	b = load_cast(c, r, casts, "weight_gi", F8_WEIGHT_GI, n, k, 1);
	be->ops->f8_matmul(be, m, k, n, a.q, a.t, a.s, a.ns, b.q, b.t, b.s, b.ns, 0, dx, BE_F32);
	free_cast(&a);
	free_cast(&b);
	/* grad_weight: dw (N, K) += dy^T (N, M) . x^T (K, M), when float8 */
	int gw = f8_operand_scaling(r, F8_GRAD_OUTPUT_GW) != F8_NONE;
	if (gw) {
		a = load_cast(c, r, casts, "grad_output_gw", F8_GRAD_OUTPUT_GW, m, n, 1);
		b = load_cast(c, r, casts, "input_gw", F8_INPUT_GW, m, k, 1);
		be->ops->f8_matmul(be, n, k, m, a.q, a.t, a.s, a.ns, b.q, b.t, b.s, b.ns, 1, dw,
				   BE_F32);
		free_cast(&a);
		free_cast(&b);
	}
	sync_ok();
	double ey = rel_err(y, wy, (size_t)(m * n)), edx = rel_err(dx, wdx, (size_t)(m * k));
	double edw = gw ? rel_err(dw, wdw, (size_t)(n * k)) : 0;
	print_message("%s %-18s f8_matmul on torchao's casts vs Float8Linear: y %.2e  dx %.2e  "
		      "dw %s%.2e\n", c->name, r->name, ey, edx, gw ? "" : "(high precision) ", edw);
	assert_true(ey < TOL && edx < TOL && edw < TOL);
	free(y);
	free(dx);
	free(dw);
	free(wy);
	free(wdx);
	free(wdw);
}

static void linear_case(const char *name)
{
	const json_t *j = at(at(index_json, "linear"), name);
	lcase c = {.name = name, .m = (int64_t)num(j, "m"), .n = (int64_t)num(j, "n"),
		   .k = (int64_t)num(j, "k")};
	c.x = read_golden(j, "x", 4, (size_t)(c.m * c.k));
	c.w = read_golden(j, "w", 4, (size_t)(c.n * c.k));
	c.dy = read_golden(j, "dy", 4, (size_t)(c.m * c.n));
	const char *rname;
	json_t *rc;
	json_object_foreach(at(j, "recipes"), rname, rc) {
		f8_recipe r;
		titan_err e = {0};
		if (f8_recipe_get(&r, rname, &e))
			fail_msg("%s", e.msg);
		const json_t *casts = at(rc, "casts");
		for (size_t i = 0; i < sizeof OPERANDS / sizeof OPERANDS[0]; i++) {
			const json_t *want = json_object_get(casts, OPERANDS[i].name);
			assert_int_equal(want == NULL,
					 f8_operand_scaling(&r, OPERANDS[i].op) == F8_NONE);
			if (want)
				check_cast(&c, &r, &OPERANDS[i], want);
		}
		check_gemms(&c, &r, rc);
	}
	free(c.x);
	free(c.w);
	free(c.dy);
}

static void casts_and_gemms_match_torchao_small(void **state)
{
	(void)state;
	linear_case("small");
}

static void casts_and_gemms_match_torchao_batched(void **state)
{
	(void)state;
	linear_case("batched");
}

static void casts_and_gemms_match_torchao_mid(void **state)
{
	(void)state;
	linear_case("mid");
}

/* Random float8 operands with their scales: values over several binades, the
 * scales of a real cast. */
static void random_cast(uint8_t *q, float *s, int64_t rows, int64_t cols, be_dtype t,
			int rowwise)
{
	float *x = malloc(sizeof(float) * (size_t)(rows * cols));
	for (int64_t i = 0; i < rows * cols; i++)
		x[i] = (float)(test_urand() * exp2(8 * test_urand()));
	be->ops->f8_cast(be, q, t, s, x, BE_F32, rows, cols, rowwise ? BE_F8_ROWS : BE_F8_TENSOR,
			 0, 0, NULL);
	sync_ok();
	free(x);
}

/* Each element against the float64 sum of the dequantized products: a
 * float32 sum of k terms errs by at most (k + 2) 2^-24 sum |terms|, plus the
 * output's rounding. */
static void scaled_gemm_matches_float64(void **state)
{
	(void)state;
	test_seed(20261203);
	static const struct {
		int64_t m, n, k;
		int ra, rb;
		be_dtype at, bt, ct;
		float beta;
	} cases[] = {
		{37, 29, 64, 0, 0, BE_E4M3, BE_E4M3, BE_F32, 0},
		{37, 29, 64, 1, 1, BE_E4M3, BE_E4M3, BE_F32, 1},
		{16, 48, 96, 1, 0, BE_E4M3, BE_E4M3, BE_BF16, 0},
		{16, 48, 96, 0, 1, BE_E5M2, BE_E4M3, BE_BF16, 1},
		{65, 33, 17, 0, 0, BE_E4M3, BE_E5M2, BE_F32, 1},
	};
	for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
		be_dtype ct = cases[ci].ct;
		uint8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(n * k));
		float *sa = malloc(sizeof(float) * (size_t)m), *sb = malloc(sizeof(float) * (size_t)n);
		random_cast(a, sa, m, k, cases[ci].at, cases[ci].ra);
		random_cast(b, sb, n, k, cases[ci].bt, cases[ci].rb);
		double *c0 = malloc(sizeof(double) * (size_t)(m * n));
		void *c = malloc((size_t)(m * n) * 4);
		for (int64_t i = 0; i < m * n; i++) {
			float v = (float)test_urand();
			if (ct == BE_BF16) {
				((uint16_t *)c)[i] = bf16_from_f32(v);
				c0[i] = bf16_to_f32(((uint16_t *)c)[i]);
			} else {
				((float *)c)[i] = v;
				c0[i] = v;
			}
		}
		f8_format fa = cases[ci].at == BE_E5M2 ? F8_E5M2 : F8_E4M3FN;
		f8_format fb = cases[ci].bt == BE_E5M2 ? F8_E5M2 : F8_E4M3FN;
		int64_t nsa = cases[ci].ra ? m : 1, nsb = cases[ci].rb ? n : 1;
		be->ops->f8_matmul(be, m, n, k, a, cases[ci].at, sa, nsa, b, cases[ci].bt, sb, nsb,
				   cases[ci].beta, c, ct);
		sync_ok();
		double worst = 0;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0, sabs = 0;
				for (int64_t p = 0; p < k; p++) {
					double t = (double)(f8_to_float(a[i * k + p], fa) / sa[nsa > 1 ? i : 0]) *
						   (double)(f8_to_float(b[j * k + p], fb) / sb[nsb > 1 ? j : 0]);
					s += t;
					sabs += fabs(t);
				}
				double ref = cases[ci].beta * c0[i * n + j] + s;
				double got = ct == BE_BF16 ? bf16_to_f32(((uint16_t *)c)[i * n + j])
							   : ((float *)c)[i * n + j];
				double bound = (k + 4) * 0x1p-24 * (sabs + fabs(c0[i * n + j])) +
					       (ct == BE_BF16 ? 0x1p-8 : 0x1p-24) * fabs(ref) + 1e-30;
				worst = fmax(worst, fabs(got - ref) / bound);
			}
		print_message("f8_matmul %lldx%lldx%lld %s x %s -> %s, %s x %s scales, beta %g: worst "
			      "error %.2f of its bound\n", (long long)m, (long long)n, (long long)k,
			      be_dtype_name(cases[ci].at), be_dtype_name(cases[ci].bt),
			      be_dtype_name(ct), cases[ci].ra ? "row" : "tensor",
			      cases[ci].rb ? "row" : "tensor", (double)cases[ci].beta, worst);
		assert_true(worst <= 1.0);
		free(a);
		free(b);
		free(sa);
		free(sb);
		free(c0);
		free(c);
	}
}

/* A bfloat16 tensor casts as its float32 values do (torchao casts x.float()). */
static void bf16_input_casts_as_its_float32_values(void **state)
{
	(void)state;
	test_seed(7);
	int64_t rows = 40, cols = 72, n = rows * cols;
	uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)n);
	float *xf = malloc(sizeof(float) * (size_t)n);
	for (int64_t i = 0; i < n; i++) {
		xb[i] = bf16_from_f32((float)(test_urand() * exp2(10 * test_urand())));
		xf[i] = bf16_to_f32(xb[i]);
	}
	uint8_t *q1 = malloc((size_t)n), *q2 = malloc((size_t)n);
	float s1[72], s2[72];
	for (int sc = BE_F8_TENSOR; sc <= BE_F8_COLS; sc++)
		for (int t = 0; t < 2; t++) {
			be->ops->f8_cast(be, q1, BE_E4M3, s1, xb, BE_BF16, rows, cols, sc, 1, t, NULL);
			be->ops->f8_cast(be, q2, BE_E4M3, s2, xf, BE_F32, rows, cols, sc, 1, t, NULL);
			sync_ok();
			int64_t ns = f8_n_scales((f8_scaling)sc, rows, cols);
			assert_memory_equal(s1, s2, sizeof(float) * (size_t)ns);
			assert_memory_equal(q1, q2, (size_t)n);
		}
	free(xb);
	free(xf);
	free(q1);
	free(q2);
}

/* amax per tensor, row and column against a scan in float64, a NaN included;
 * a given amax (FSDP's all-reduced one) makes the scales of that amax. */
static void amax_and_given_amax(void **state)
{
	(void)state;
	test_seed(11);
	int64_t rows = 33, cols = 70, n = rows * cols;
	float *x = malloc(sizeof(float) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(test_urand() * exp2(6 * test_urand()));
	x[5 * cols + 9] = NAN;
	for (int sc = BE_F8_TENSOR; sc <= BE_F8_COLS; sc++) {
		int64_t ns = f8_n_scales((f8_scaling)sc, rows, cols);
		float amax[70];
		be->ops->f8_amax(be, amax, x, BE_F32, rows, cols, sc);
		sync_ok();
		for (int64_t r = 0; r < ns; r++) {
			double m = 0;
			int nan = 0;
			for (int64_t i = 0; i < rows; i++)
				for (int64_t j = 0; j < cols; j++) {
					if ((sc == BE_F8_ROWS && i != r) || (sc == BE_F8_COLS && j != r))
						continue;
					double v = x[i * cols + j];
					nan |= isnan(v);
					m = fmax(m, fabs(v));
				}
			if (nan)
				assert_true(isnan(amax[r]));
			else
				assert_true(amax[r] == (float)m);
		}
	}
	/* the FSDP path: scales from an amax given instead of taken */
	x[5 * cols + 9] = 1.0f;
	float amax, s1, s2, big = 1000.0f;
	uint8_t *q1 = malloc((size_t)n), *q2 = malloc((size_t)n);
	be->ops->f8_amax(be, &amax, x, BE_F32, rows, cols, BE_F8_TENSOR);
	be->ops->f8_cast(be, q1, BE_E4M3, &s1, x, BE_F32, rows, cols, BE_F8_TENSOR, 0, 0, NULL);
	be->ops->f8_cast(be, q2, BE_E4M3, &s2, x, BE_F32, rows, cols, BE_F8_TENSOR, 0, 0, &amax);
	sync_ok();
	assert_true(same_float(s1, s2));
	assert_memory_equal(q1, q2, (size_t)n);
	be->ops->f8_cast(be, q2, BE_E4M3, &s2, x, BE_F32, rows, cols, BE_F8_TENSOR, 0, 0, &big);
	sync_ok();
	assert_true(same_float(s2, f8_amax_to_scale(big, F8_E4M3FN, false)));
	free(x);
	free(q1);
	free(q2);
}

/* A float8 code's value from its fields (the OCP formats: e4m3fn has no
 * infinities and one NaN mantissa, e5m2 is IEEE-like). */
static double decode_fields(unsigned c, int e5m2)
{
	int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emax = e5m2 ? 31 : 15;
	unsigned ex = (c >> mb) & (unsigned)emax, m = c & ((1u << mb) - 1);
	double sign = c & 0x80 ? -1 : 1;
	if (e5m2 && ex == 31)
		return m ? NAN : sign * INFINITY;
	if (!e5m2 && ex == 15 && m == 7)
		return NAN;
	if (ex == 0)
		return sign * ldexp(m, 1 - bias - mb);
	return sign * ldexp((double)((1u << mb) + m), (int)ex - bias - mb);
}

/* convert from float8 (FSDP's float8 all-gather): every code of both formats
 * into float32 and bfloat16, exactly its value. */
static void convert_decodes_every_code(void **state)
{
	(void)state;
	uint8_t q[256];
	float f[256];
	uint16_t h[256];
	for (int c = 0; c < 256; c++)
		q[c] = (uint8_t)c;
	for (int e5 = 0; e5 < 2; e5++) {
		be_dtype t = e5 ? BE_E5M2 : BE_E4M3;
		be->ops->convert(be, f, BE_F32, q, t, 256);
		be->ops->convert(be, h, BE_BF16, q, t, 256);
		sync_ok();
		for (int c = 0; c < 256; c++) {
			double want = decode_fields((unsigned)c, e5);
			if (isnan(want)) {
				assert_true(isnan(f[c]) && isnan(bf16_to_f32(h[c])));
				continue;
			}
			if ((double)f[c] != want || (double)bf16_to_f32(h[c]) != want)
				fail_msg("%s code 0x%02x: float32 %g, bfloat16 %g, want %g",
					 e5 ? "e5m2" : "e4m3", c, f[c], bf16_to_f32(h[c]), want);
		}
	}
}

static void unsupported_types_fault_at_sync(void **state)
{
	(void)state;
	float x[16] = {1}, s[4], c[16];
	uint8_t q[16] = {0};
	titan_err e = {0};
	be->ops->f8_cast(be, q, BE_BF16, s, x, BE_F32, 4, 4, BE_F8_TENSOR, 0, 0, NULL);
	assert_int_equal(be->ops->sync(be, &e), -1);
	assert_non_null(strstr(e.msg, "f8_cast"));
	be->ops->f8_matmul(be, 4, 4, 4, q, BE_E5M2, s, 1, q, BE_E5M2, s, 1, 0, c, BE_F32);
	assert_int_equal(be->ops->sync(be, &e), -1);
	assert_non_null(strstr(e.msg, "not both e5m2"));
	be->ops->f8_matmul(be, 4, 4, 4, q, BE_E4M3, s, 3, q, BE_E4M3, s, 1, 0, c, BE_F32);
	assert_int_equal(be->ops->sync(be, &e), -1);
	assert_non_null(strstr(e.msg, "scales"));
	be->ops->f8_amax(be, s, x, BE_F32, 4, 4, 7);
	assert_int_equal(be->ops->sync(be, &e), -1);
	assert_non_null(strstr(e.msg, "scaling"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(casts_and_gemms_match_torchao_small),
		cmocka_unit_test(casts_and_gemms_match_torchao_batched),
		cmocka_unit_test(casts_and_gemms_match_torchao_mid),
		cmocka_unit_test(scaled_gemm_matches_float64),
		cmocka_unit_test(bf16_input_casts_as_its_float32_values),
		cmocka_unit_test(amax_and_given_amax),
		cmocka_unit_test(convert_decodes_every_code),
		cmocka_unit_test(unsupported_types_fault_at_sync),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
