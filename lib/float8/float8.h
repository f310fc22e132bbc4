/* float8.h: torchao's Float8 training numerics (torchao.float8 0.18, the code
 * torchtitan's quantize.linear.float8 converter runs) as plain C over float32
 * buffers.  It is titan's `emulate` mode, the CPU path of Float8 training, and
 * the reference a GPU implementation is tested against.
 *
 * Formats.  e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits, no infinity,
 * NaN = S.1111.111, largest 448, smallest subnormal 2^-9.  e5m2: IEEE-like,
 * bias 15, 2 mantissa bits, infinities, largest 57344, smallest 2^-16.
 * Conversions round to nearest, ties to even, through the subnormals.
 *
 * Scaling (torchao float8_utils):
 *   amax  = max |x| over the tensor (tensorwise) or over one axis (axiswise);
 *           a NaN anywhere in the reduction makes it NaN
 *   scale = float32( (double)fmt_max / max((double)amax, 1e-12) )
 *           then, when the recipe rounds scales to powers of two,
 *           exp2f(floorf(log2f(scale))) in float32, as torch computes it: a
 *           scale a few ulps below 2^k rounds UP to 2^k (log2f rounds to k)
 *   q     = fp8( clamp(x * scale, -fmt_max, fmt_max) )   x * scale in float32
 *   x~    = float(q) / scale                             division, float32
 * Emulation (torchao's emulate=True) multiplies the dequantized x~ operands
 * with a float32 GEMM; the three GEMMs of a linear y = x w^T, with x (M, K),
 * w (N, K), dy (M, N):
 *   output       y  (M, N) = x~ (M, K)  @ w~^T (K, N)   reduces over K
 *   grad_input   dx (M, K) = dy~ (M, N) @ w~ (N, K)     reduces over N
 *   grad_weight  dw (N, K) = dy~^T (N, M) @ x~ (M, K)   reduces over M
 * Each operand of each GEMM has its own cast (the six F8_* operands below).
 * An axiswise scale is always taken along the GEMM's reduction dimension, so
 * it is one scale per row or per column of the operand as titan stores it:
 *   operand            stored   axiswise scales      torchao's name
 *   F8_INPUT           x (M,K)  per row    (M)       cast_config_input, dim -1
 *   F8_WEIGHT          w (N,K)  per row    (N)       cast_config_weight, w^T dim 0
 *   F8_GRAD_OUTPUT     dy (M,N) per row    (M)       cast_config_grad_output, dim -1
 *   F8_WEIGHT_GI       w (N,K)  per column (K)       ..._weight_for_grad_input, w^T dim -1
 *   F8_GRAD_OUTPUT_GW  dy (M,N) per column (N)       ..._grad_output_for_grad_weight, dim 0
 *   F8_INPUT_GW        x (M,K)  per column (K)       ..._input_for_grad_weight, dim 0
 *
 * Recipes (Float8LinearConfig.from_recipe_name; e4m3 = e4m3fn):
 *   recipe              output GEMM        grad_input GEMM          grad_weight GEMM    pow2
 *   tensorwise          x, w: e4m3 tensor  dy: e5m2, w: e4m3 tensor dy: e5m2, x: e4m3   no
 *                                                                   tensor
 *   rowwise             x, w: e4m3 rows    dy, w: e4m3 rows         dy, x: e4m3 rows    yes
 *   rowwise_with_gw_hp  x, w: e4m3 rows    dy: e4m3 rows,           high precision      yes
 *                                          w: e4m3 tensor           (x^T dy unquantized)
 * Note that the rowwise recipes cast gradients to e4m3, not e5m2.
 *
 * How a model drives one linear (the per-operand steps; f8_linear_* below do
 * exactly these with cblas_sgemm):
 *   f8_scaling s = f8_operand_scaling(r, F8_INPUT);       // or F8_NONE: keep x
 *   f8_scales(scale, x, M, K, s, r->cast[F8_INPUT].fmt, r->pow2_scales);
 *   f8_fake_quantize(xq, x, scale, M, K, s, r->cast[F8_INPUT].fmt);
 *   ... the same for the weight, then the GEMM on xq and wq in float32
 *   (a backend with float8 GEMMs uses f8_quantize's bytes and 1/scale instead).
 * A bf16 model converts its bf16 operands to float32 first (exact) and rounds
 * the GEMM's output to bf16, which is what torchao does for bf16 inputs.
 *
 * FSDP's float8 all-gather (tensorwise only): each rank takes f8_amax of its
 * shard, the ranks all-reduce the maximum, f8_amax_to_scale makes the one
 * scale, each rank f8_quantize's its shard with it, and the bytes are
 * gathered.  The bits are those of casting the whole weight (the test checks).
 *
 * Nothing here allocates or fails: the arguments are the caller's contract,
 * like the backend's ops.  Loops run on the calling thread (OpenMP inside). */
#ifndef TITAN_FLOAT8_H
#define TITAN_FLOAT8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum f8_format { F8_E4M3FN = 0, F8_E5M2 = 1 } f8_format;

#define F8_E4M3FN_MAX 448.0f
#define F8_E5M2_MAX 57344.0f
#define F8_SCALE_EPS 1e-12 /* torchao float8_utils.EPS: the smallest amax used */

/* Largest finite value of the format. */
float f8_max(f8_format f);
/* "e4m3fn", "e5m2". */
const char *f8_format_name(f8_format f);

/* Conversions of one value.
 * f8_from_float is torch's plain `x.to(float8)` (torch >= 2.12): e4m3fn
 * saturates (any finite or infinite overflow becomes +-448), e5m2 overflows to
 * +-inf as IEEE rounding says; NaN keeps its sign (0x7F / 0xFF).
 * f8_from_float_sat is torchao's to_fp8_saturated: clamp to +-max first (inf
 * becomes max, NaN stays NaN), then the cast.  Training uses this one. */
uint8_t f8_from_float(float x, f8_format f);
uint8_t f8_from_float_sat(float x, f8_format f);
float f8_to_float(uint8_t code, f8_format f);

/* How an operand is scaled.  Axis counts are of the operand as stored
 * (rows, cols) row-major. */
typedef enum f8_scaling {
	F8_NONE = 0,   /* not cast: the GEMM reads the operand in high precision */
	F8_TENSOR = 1, /* one scale */
	F8_ROWS = 2,   /* one scale per row (the amax runs along the row) */
	F8_COLS = 3,   /* one scale per column */
} f8_scaling;

/* Scales an operand of (rows, cols) has: 0, 1, rows or cols. */
int64_t f8_n_scales(f8_scaling s, int64_t rows, int64_t cols);

/* amax (f8_n_scales entries) of x (rows, cols). */
void f8_amax(float *amax, const float *x, int64_t rows, int64_t cols, f8_scaling s);
/* torchao's amax_to_scale. */
float f8_amax_to_scale(float amax, f8_format f, bool pow2);
/* torchao's _round_scale_down_to_power_of_2 (see above: float32 log2f). */
float f8_round_scale_pow2(float scale);
/* f8_amax then f8_amax_to_scale of each. */
void f8_scales(float *scale, const float *x, int64_t rows, int64_t cols, f8_scaling s,
	       f8_format f, bool pow2);

/* q (rows, cols) = fp8 bytes of clamp(x * scale); s is F8_TENSOR/ROWS/COLS. */
void f8_quantize(uint8_t *q, const float *x, const float *scale, int64_t rows,
		 int64_t cols, f8_scaling s, f8_format f);
/* The same cast written transposed: q (cols, rows), q[j][i] the cast of
 * x[i][j] (a float8 GEMM reads its operands with the reduction dimension
 * contiguous). */
void f8_quantize_t(uint8_t *q, const float *x, const float *scale, int64_t rows,
		   int64_t cols, f8_scaling s, f8_format f);
/* y = float(q) / scale. */
void f8_dequantize(float *y, const uint8_t *q, const float *scale, int64_t rows,
		   int64_t cols, f8_scaling s, f8_format f);
/* y = f8_dequantize(f8_quantize(x)) in one pass (y may be x). */
void f8_fake_quantize(float *y, const float *x, const float *scale, int64_t rows,
		      int64_t cols, f8_scaling s, f8_format f);

/* Recipes ------------------------------------------------------------------ */

enum f8_operand {
	F8_INPUT = 0,      /* x in the output GEMM */
	F8_WEIGHT,         /* w in the output GEMM */
	F8_GRAD_OUTPUT,    /* dy in the grad_input GEMM */
	F8_WEIGHT_GI,      /* w in the grad_input GEMM */
	F8_GRAD_OUTPUT_GW, /* dy in the grad_weight GEMM */
	F8_INPUT_GW,       /* x in the grad_weight GEMM */
	F8_N_OPERANDS
};

/* One operand's cast: torchao's CastConfig. */
typedef struct f8_cast {
	bool float8;   /* false: ScalingType.DISABLED, high precision */
	bool axiswise; /* ScalingGranularity.AXISWISE (else TENSORWISE) */
	f8_format fmt; /* target_dtype */
} f8_cast;

typedef enum f8_recipe_id {
	F8_RECIPE_TENSORWISE = 0,
	F8_RECIPE_ROWWISE = 1,
	F8_RECIPE_ROWWISE_WITH_GW_HP = 2,
} f8_recipe_id;

typedef struct f8_recipe {
	f8_recipe_id id;
	const char *name;              /* "tensorwise", ... */
	f8_cast cast[F8_N_OPERANDS];
	bool pow2_scales;              /* round_scales_to_power_of_2 */
} f8_recipe;

/* The recipe named (torchtitan's quantize.linear.float8.recipe_name; NULL or
 * "" is tensorwise, torchtitan 0.2.2's default).  -1 naming the valid names. */
int f8_recipe_get(f8_recipe *r, const char *name, titan_err *e);
/* The scaling of one operand under r: F8_NONE, F8_TENSOR, or the axis above. */
f8_scaling f8_operand_scaling(const f8_recipe *r, int operand);

/* One linear, emulated ------------------------------------------------------ */

/* Workspace (floats) the calls below need for these sizes. */
size_t f8_linear_ws_floats(int64_t m, int64_t n, int64_t k);
/* y (m, n) = x (m, k) @ w (n, k)^T with the recipe's casts. */
void f8_linear_forward(const f8_recipe *r, float *y, const float *x, const float *w,
		       int64_t m, int64_t n, int64_t k, float *ws);
/* dx (m, k) written, dw (n, k) accumulated (dw += ...), as the backend's ops
 * do; either may be NULL to skip that GEMM. */
void f8_linear_backward(const f8_recipe *r, float *dx, float *dw, const float *dy,
			const float *x, const float *w, int64_t m, int64_t n, int64_t k,
			float *ws);

/* Which linears are converted ---------------------------------------------- */

/* torchtitan's rule (components/quantization/float8.py): a linear is converted
 * when both of its dimensions are multiples of 16 and no entry of filter_fqns
 * is a substring of its FQN ("layers.1" also matches "layers.10...").  When
 * filter_fqns holds "auto_filter_small_kn", torchao's _auto_filter_for_recipe
 * decides instead (that entry itself is not a pattern); with N = out_features,
 * K = in_features it also skips, for tensorwise, K <= 4096 and N <= 1024, and
 * for rowwise, N <= 2048, K <= 1024, or N <= 4096 and K <= 2048 (H100
 * measurements: smaller GEMMs lose to the casts).  It has no rule for
 * rowwise_with_gw_hp: f8_filter_init refuses that, as torchao raises. */
typedef struct f8_filter {
	const char *const *fqns;  /* borrowed, n_fqns entries */
	size_t n_fqns;
	bool auto_small_kn;
	f8_recipe_id recipe;
} f8_filter;

int f8_filter_init(f8_filter *f, const char *recipe_name, const char *const *filter_fqns,
		   size_t n_fqns, titan_err *e);
bool f8_filter_convert(const f8_filter *f, const char *fqn, int64_t out_features,
		       int64_t in_features);

#endif
