/* Floating-point exceptions are never inspected: without this GCC keeps the
 * compares of the casts as branches and leaves their loops scalar. */
#if defined(__GNUC__) && !defined(__clang__)
/* fp-contract=off restated: the optimize pragma resets it to GCC's own
 * default (fast), and the x86-64-v3/v4 builds of the hot kernels would then
 * fuse multiply-adds the baseline build cannot, giving other bits. */
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
#include "float8/float8.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/err.h"

/* Below this many elements a loop stays on one thread. */
#define PAR_MIN (1 << 16)

typedef struct fmt_info {
	int mbits, bias;
	uint32_t max_code;      /* largest finite magnitude code */
	uint32_t overflow_code; /* what a larger magnitude becomes */
	float max;
	float sub_mul;          /* 2^(bias - 1 + mbits): a subnormal's count */
	const char *name;
} fmt_info;

static const fmt_info FMT[2] = {
	/* e4m3fn has no infinity: torch saturates a plain cast at 448. */
	[F8_E4M3FN] = {3, 7, 0x7e, 0x7e, F8_E4M3FN_MAX, 512.0f, "e4m3fn"},
	/* e5m2 rounds past 57344 to infinity, as IEEE formats do. */
	[F8_E5M2] = {2, 15, 0x7b, 0x7c, F8_E5M2_MAX, 65536.0f, "e5m2"},
};

float f8_max(f8_format f) { return FMT[f].max; }
const char *f8_format_name(f8_format f) { return FMT[f].name; }

uint8_t f8_from_float(float x, f8_format f)
{
	const fmt_info *fi = &FMT[f];
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	uint8_t sign = (uint8_t)((u >> 24) & 0x80);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7f;
	uint32_t code;
	if (a >= (uint32_t)(128 - fi->bias) << 23) {
		/* Normal in the format: round the 23-bit mantissa to mbits, ties to
		 * even; a carry moves into the exponent by itself.  Infinity lands
		 * far above max_code. */
		int shift = 23 - fi->mbits;
		a += ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
		code = (a >> shift) - ((uint32_t)(127 - fi->bias) << fi->mbits);
	} else {
		/* A subnormal (or zero): count units of 2^(1 - bias - mbits); the
		 * product is exact, nearbyintf rounds ties to even, and a count of
		 * 2^mbits is the smallest normal's code. */
		float v;
		memcpy(&v, &a, sizeof v);
		code = (uint32_t)nearbyintf(v * fi->sub_mul);
	}
	if (code > fi->max_code)
		code = fi->overflow_code;
	return sign | (uint8_t)code;
}

static inline float clamp_max(float x, float max)
{
	/* torch.clamp: NaN passes through. */
	return x > max ? max : x < -max ? -max : x;
}

/* f8_from_float of a value already clamped to +-max (or NaN), without branches
 * so that the casting loops vectorise: both roundings are computed and one
 * chosen.  Subnormals count units of 2^(1 - bias - mbits) rounded to nearest
 * even by the 2^23 trick (the count is below 2^mbits, far below 2^22). */
static inline uint32_t encode_clamped(float x, int mbits, int bias, float sub_mul)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
	int shift = 23 - mbits;
	uint32_t rn = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
	uint32_t normal = (rn >> shift) - ((uint32_t)(127 - bias) << mbits);
	int is_normal = a >= (uint32_t)(128 - bias) << 23;
	float v;
	memcpy(&v, &a, sizeof v);
	v = is_normal ? 0.0f : v;
	uint32_t sub = (uint32_t)(int32_t)((v * sub_mul + 8388608.0f) - 8388608.0f);
	uint32_t code = is_normal ? normal : sub;
	code = a > 0x7f800000u ? 0x7fu : code; /* NaN keeps its sign */
	return sign | code;
}

static inline uint8_t encode_sat(float x, f8_format f)
{
	/* constant per call site: the compiler folds the format in */
	if (f == F8_E4M3FN)
		return (uint8_t)encode_clamped(clamp_max(x, F8_E4M3FN_MAX), 3, 7, 512.0f);
	return (uint8_t)encode_clamped(clamp_max(x, F8_E5M2_MAX), 2, 15, 65536.0f);
}

uint8_t f8_from_float_sat(float x, f8_format f)
{
	return encode_sat(x, f);
}

static float decode(uint32_t code, f8_format f)
{
	const fmt_info *fi = &FMT[f];
	uint32_t m = code & ((1u << fi->mbits) - 1);
	uint32_t e = (code & 0x7f) >> fi->mbits;
	uint32_t emax = 0x7fu >> fi->mbits;
	float v;
	if (e == emax && (f == F8_E5M2 || m == ((1u << fi->mbits) - 1)))
		v = f == F8_E5M2 && m == 0 ? INFINITY : NAN;
	else if (e == 0)
		v = (float)m / fi->sub_mul;
	else
		v = ldexpf(1.0f + (float)m / (float)(1u << fi->mbits), (int)e - fi->bias);
	return code & 0x80 ? -v : v;
}

static float decode_table[2][256];
static pthread_once_t decode_once = PTHREAD_ONCE_INIT;

static void decode_init(void)
{
	for (int f = 0; f < 2; f++)
		for (uint32_t c = 0; c < 256; c++)
			decode_table[f][c] = decode(c, (f8_format)f);
}

static const float *table(f8_format f)
{
	pthread_once(&decode_once, decode_init);
	return decode_table[f];
}

float f8_to_float(uint8_t code, f8_format f) { return table(f)[code]; }

/* Scales ------------------------------------------------------------------ */

int64_t f8_n_scales(f8_scaling s, int64_t rows, int64_t cols)
{
	switch (s) {
	case F8_TENSOR:
		return 1;
	case F8_ROWS:
		return rows;
	case F8_COLS:
		return cols;
	default:
		return 0;
	}
}

/* |x| as its bits: for non-negative floats the order of the bits is the order
 * of the values, and every NaN's bits lie above infinity's, so an integer max
 * keeps a NaN once seen (as torch.amax does) and vectorises. */
static inline uint32_t abs_bits(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u & 0x7fffffffu;
}

static inline float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static float amax_all(const float *x, int64_t n)
{
	uint32_t m = 0;
#pragma omp parallel for simd reduction(max : m) if (n > PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		uint32_t a = abs_bits(x[i]);
		m = a > m ? a : m;
	}
	return from_bits(m);
}

void f8_amax(float *amax, const float *x, int64_t rows, int64_t cols, f8_scaling s)
{
	if (s == F8_TENSOR) {
		amax[0] = amax_all(x, rows * cols);
	} else if (s == F8_ROWS) {
#pragma omp parallel for if (rows * cols > PAR_MIN)
		for (int64_t i = 0; i < rows; i++) {
			uint32_t m = 0;
#pragma omp simd reduction(max : m)
			for (int64_t j = 0; j < cols; j++) {
				uint32_t a = abs_bits(x[i * cols + j]);
				m = a > m ? a : m;
			}
			amax[i] = from_bits(m);
		}
	} else if (s == F8_COLS) {
		/* Column blocks per thread, rows streamed in order. */
		enum { BLK = 256 };
#pragma omp parallel for if (rows * cols > PAR_MIN)
		for (int64_t j0 = 0; j0 < cols; j0 += BLK) {
			uint32_t m[BLK] = {0};
			int64_t nb = j0 + BLK < cols ? BLK : cols - j0;
			for (int64_t i = 0; i < rows; i++)
#pragma omp simd
				for (int64_t j = 0; j < nb; j++) {
					uint32_t a = abs_bits(x[i * cols + j0 + j]);
					m[j] = a > m[j] ? a : m[j];
				}
			for (int64_t j = 0; j < nb; j++)
				amax[j0 + j] = from_bits(m[j]);
		}
	}
}

float f8_round_scale_pow2(float scale) { return exp2f(floorf(log2f(scale))); }

float f8_amax_to_scale(float amax, f8_format f, bool pow2)
{
	/* In double, as torchao does to make eager and compiled runs agree; the
	 * comparison keeps a NaN amax (torch.clamp propagates it). */
	double a = amax;
	if (a < F8_SCALE_EPS)
		a = F8_SCALE_EPS;
	float s = (float)((double)FMT[f].max / a);
	return pow2 ? f8_round_scale_pow2(s) : s;
}

void f8_scales(float *scale, const float *x, int64_t rows, int64_t cols, f8_scaling s,
	       f8_format f, bool pow2)
{
	f8_amax(scale, x, rows, cols, s);
	int64_t n = f8_n_scales(s, rows, cols);
	for (int64_t i = 0; i < n; i++)
		scale[i] = f8_amax_to_scale(scale[i], f, pow2);
}

/* Casts -------------------------------------------------------------------- */

/* One row of x cast with scale sc[j] (per column, cs = 1) or sc[0] (cs = 0). */
static inline void quantize_row(uint8_t *q, const float *x, const float *sc, int cs,
				int64_t n, f8_format f)
{
	if (f == F8_E4M3FN && cs) {
#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			q[j] = encode_sat(x[j] * sc[j], F8_E4M3FN);
	} else if (f == F8_E4M3FN) {
		float s0 = sc[0];
#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			q[j] = encode_sat(x[j] * s0, F8_E4M3FN);
	} else if (cs) {
#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			q[j] = encode_sat(x[j] * sc[j], F8_E5M2);
	} else {
		float s0 = sc[0];
#pragma omp simd
		for (int64_t j = 0; j < n; j++)
			q[j] = encode_sat(x[j] * s0, F8_E5M2);
	}
}

void f8_quantize(uint8_t *q, const float *x, const float *scale, int64_t rows,
		 int64_t cols, f8_scaling s, f8_format f)
{
#pragma omp parallel for if (rows * cols > PAR_MIN)
	for (int64_t i = 0; i < rows; i++)
		quantize_row(q + i * cols, x + i * cols, s == F8_ROWS ? scale + i : scale,
			     s == F8_COLS, cols, f);
}

void f8_quantize_t(uint8_t *q, const float *x, const float *scale, int64_t rows,
		   int64_t cols, f8_scaling s, f8_format f)
{
	/* 64 x 64 tiles: a tile of x transposed through a local buffer, then each
	 * of its rows (a column of x) cast as a row of q.  A row of q is a column
	 * of x: per-column scales are one per row of q, per-row ones run along it. */
	enum { T = 64 };
	int64_t ti = (rows + T - 1) / T, tj = (cols + T - 1) / T;
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > PAR_MIN)
	for (int64_t bi = 0; bi < ti; bi++)
		for (int64_t bj = 0; bj < tj; bj++) {
			float tile[T][T];
			int64_t i0 = bi * T, j0 = bj * T;
			int64_t ni = rows - i0 < T ? rows - i0 : T, nj = cols - j0 < T ? cols - j0 : T;
			for (int64_t i = 0; i < ni; i++)
				for (int64_t j = 0; j < nj; j++)
					tile[j][i] = x[(i0 + i) * cols + j0 + j];
			for (int64_t j = 0; j < nj; j++) {
				const float *sc = s == F8_TENSOR ? scale : s == F8_COLS ? scale + j0 + j
										   : scale + i0;
				quantize_row(q + (j0 + j) * rows + i0, tile[j], sc, s == F8_ROWS, ni, f);
			}
		}
}

void f8_dequantize(float *y, const uint8_t *q, const float *scale, int64_t rows,
		   int64_t cols, f8_scaling s, f8_format f)
{
	const float *t = table(f);
#pragma omp parallel for if (rows * cols > PAR_MIN)
	for (int64_t i = 0; i < rows; i++) {
		const uint8_t *qi = q + i * cols;
		float *yi = y + i * cols;
		if (s == F8_COLS) {
			for (int64_t j = 0; j < cols; j++)
				yi[j] = t[qi[j]] / scale[j];
		} else {
			float sc = scale[s == F8_ROWS ? i : 0];
			for (int64_t j = 0; j < cols; j++)
				yi[j] = t[qi[j]] / sc;
		}
	}
}

void f8_fake_quantize(float *y, const float *x, const float *scale, int64_t rows,
		      int64_t cols, f8_scaling s, f8_format f)
{
	const float *t = table(f);
#pragma omp parallel for if (rows * cols > PAR_MIN)
	for (int64_t i = 0; i < rows; i++) {
		uint8_t q[256];
		const float *sc = s == F8_ROWS ? scale + i : scale;
		for (int64_t j0 = 0; j0 < cols; j0 += 256) {
			int64_t nb = cols - j0 < 256 ? cols - j0 : 256;
			const float *sj = s == F8_COLS ? sc + j0 : sc;
			quantize_row(q, x + i * cols + j0, sj, s == F8_COLS, nb, f);
			for (int64_t j = 0; j < nb; j++)
				y[i * cols + j0 + j] = t[q[j]] / sj[s == F8_COLS ? j : 0];
		}
	}
}

/* Recipes ------------------------------------------------------------------ */

#define E4 {true, false, F8_E4M3FN}
#define E5 {true, false, F8_E5M2}
#define E4AX {true, true, F8_E4M3FN}
#define HP {false, false, F8_E4M3FN}

/* Float8LinearConfig.from_recipe_name, operand by operand (enum f8_operand's
 * order: input, weight, grad_output, weight_gi, grad_output_gw, input_gw). */
static const f8_recipe RECIPES[] = {
	{F8_RECIPE_TENSORWISE, "tensorwise", {E4, E4, E5, E4, E5, E4}, false},
	{F8_RECIPE_ROWWISE, "rowwise", {E4AX, E4AX, E4AX, E4AX, E4AX, E4AX}, true},
	{F8_RECIPE_ROWWISE_WITH_GW_HP, "rowwise_with_gw_hp", {E4AX, E4AX, E4AX, E4, HP, HP}, true},
};

int f8_recipe_get(f8_recipe *r, const char *name, titan_err *e)
{
	if (name == NULL || name[0] == '\0')
		name = "tensorwise";
	for (size_t i = 0; i < sizeof RECIPES / sizeof RECIPES[0]; i++)
		if (strcmp(name, RECIPES[i].name) == 0) {
			*r = RECIPES[i];
			return 0;
		}
	return err_set(e, "float8 recipe '%s': expected tensorwise, rowwise or rowwise_with_gw_hp",
		       name);
}

f8_scaling f8_operand_scaling(const f8_recipe *r, int operand)
{
	const f8_cast *c = &r->cast[operand];
	if (!c->float8)
		return F8_NONE;
	if (!c->axiswise)
		return F8_TENSOR;
	/* Along the GEMM's reduction dim: K for the output GEMM (rows of x and
	 * of w), N for grad_input (rows of dy, columns of w), M for grad_weight
	 * (columns of dy and of x). */
	switch (operand) {
	case F8_INPUT:
	case F8_WEIGHT:
	case F8_GRAD_OUTPUT:
		return F8_ROWS;
	default:
		return F8_COLS;
	}
}

/* One linear -------------------------------------------------------------- */

static int64_t max3(int64_t a, int64_t b, int64_t c)
{
	int64_t m = a > b ? a : b;
	return m > c ? m : c;
}

size_t f8_linear_ws_floats(int64_t m, int64_t n, int64_t k)
{
	return (size_t)(m * k + n * k + m * n + 2 * max3(m, n, k));
}

/* The operand as the GEMM reads it: x itself when the recipe keeps it in high
 * precision, else its dequantized cast written to out. */
static const float *cast_operand(const f8_recipe *r, int op, const float *x, int64_t rows,
				 int64_t cols, float *out, float *scale)
{
	f8_scaling s = f8_operand_scaling(r, op);
	if (s == F8_NONE)
		return x;
	f8_format f = r->cast[op].fmt;
	f8_scales(scale, x, rows, cols, s, f, r->pow2_scales);
	f8_fake_quantize(out, x, scale, rows, cols, s, f);
	return out;
}

void f8_linear_forward(const f8_recipe *r, float *y, const float *x, const float *w,
		       int64_t m, int64_t n, int64_t k, float *ws)
{
	float *xq = ws, *wq = xq + m * k, *s1 = wq + n * k + m * n, *s2 = s1 + max3(m, n, k);
	const float *a = cast_operand(r, F8_INPUT, x, m, k, xq, s1);
	const float *b = cast_operand(r, F8_WEIGHT, w, n, k, wq, s2);
	/* y (m, n) = a (m, k) @ b^T (k, n) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
		    (int)k, b, (int)k, 0.0f, y, (int)n);
}

void f8_linear_backward(const f8_recipe *r, float *dx, float *dw, const float *dy,
			const float *x, const float *w, int64_t m, int64_t n, int64_t k,
			float *ws)
{
	float *xq = ws, *wq = xq + m * k, *dyq = wq + n * k, *s1 = dyq + m * n;
	float *s2 = s1 + max3(m, n, k);
	if (dx != NULL) {
		const float *a = cast_operand(r, F8_GRAD_OUTPUT, dy, m, n, dyq, s1);
		const float *b = cast_operand(r, F8_WEIGHT_GI, w, n, k, wq, s2);
		/* dx (m, k) = a (m, n) @ b (n, k) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)n,
			    1.0f, a, (int)n, b, (int)k, 0.0f, dx, (int)k);
	}
	if (dw != NULL) {
		const float *a = cast_operand(r, F8_GRAD_OUTPUT_GW, dy, m, n, dyq, s1);
		const float *b = cast_operand(r, F8_INPUT_GW, x, m, k, xq, s2);
		/* dw (n, k) += a^T (n, m) @ b (m, k) */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)k, (int)m, 1.0f,
			    a, (int)n, b, (int)k, 1.0f, dw, (int)k);
	}
}

/* Filter ------------------------------------------------------------------- */

#define AUTO_FILTER "auto_filter_small_kn"

int f8_filter_init(f8_filter *f, const char *recipe_name, const char *const *filter_fqns,
		   size_t n_fqns, titan_err *e)
{
	f8_recipe r;
	if (f8_recipe_get(&r, recipe_name, e))
		return -1;
	memset(f, 0, sizeof *f);
	f->fqns = filter_fqns;
	f->n_fqns = n_fqns;
	f->recipe = r.id;
	for (size_t i = 0; i < n_fqns; i++)
		if (strcmp(filter_fqns[i], AUTO_FILTER) == 0)
			f->auto_small_kn = true;
	if (f->auto_small_kn && r.id == F8_RECIPE_ROWWISE_WITH_GW_HP)
		return err_set(e, "quantize.linear.float8.filter_fqns: " AUTO_FILTER
			       " has no rule for recipe rowwise_with_gw_hp (torchao has none)");
	return 0;
}

bool f8_filter_convert(const f8_filter *f, const char *fqn, int64_t out_features,
		       int64_t in_features)
{
	int64_t n = out_features, k = in_features;
	if (n % 16 != 0 || k % 16 != 0)
		return false; /* float8 GEMMs need 16-element alignment */
	for (size_t i = 0; i < f->n_fqns; i++)
		if (strcmp(f->fqns[i], AUTO_FILTER) != 0 && strstr(fqn, f->fqns[i]) != NULL)
			return false;
	if (!f->auto_small_kn)
		return true;
	if (f->recipe == F8_RECIPE_TENSORWISE)
		return !(k <= 4096 && n <= 1024);
	return !(n <= 2048 || k <= 1024 || (n <= 4096 && k <= 2048));
}
