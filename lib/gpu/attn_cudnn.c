/* Causal GQA attention through cuDNN's backend (graph) API.
 *
 * cuDNN runs fused flash attention when an operation graph has the shape of
 * scaled dot-product attention: bmm, scale, mask, softmax, bmm (and for the
 * backward the matching gradient graph).  The graphs below are the ones
 * cudnn-frontend's composite SDPA nodes build (its "Composite" forward and
 * backward, no dropout, no bias, top-left causal mask, BSHD layout), written
 * out node by node in C: tensor ids, shapes, strides and element types must
 * match that pattern or no engine takes the graph.
 *
 * A plan per (direction, shape) is built once and kept; execution binds the
 * tensors' pointers in a variant pack each call. */
#include "gpu/attn.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(TITAN_CUDA) && defined(TITAN_CUDNN)
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <float.h>
#include <math.h>

/* Tensor ids the variant pack binds (virtual tensors count from VIRTUAL_UID). */
enum {
	UID_Q = 1,
	UID_K,
	UID_V,
	UID_O,
	UID_STATS,
	UID_SCALE,
	UID_NEGINF,
	UID_DO,
	UID_DQ,
	UID_DK,
	UID_DV,
	UID_SOFTMAX_SUM, /* backward: rowsum(dO * O), in the scratch */
	UID_DQ_ACCUM,    /* backward: dq in float32, in the scratch */
	UID_ONE,
	VIRTUAL_UID = 100,
};

/* One graph under construction: every descriptor made (destroyed with the plan;
 * the plan may refer to them), its operations, and the first failure. */
typedef struct builder {
	cudnnBackendDescriptor_t *d;
	int nd, capd;
	cudnnBackendDescriptor_t ops[48];
	int nops;
	int64_t next_uid;
	cudnnStatus_t st;
	const char *what;
	/* gpu_attn_graph_describe's record: each tensor's type, and a line per
	 * operation (NULL text: not recording) */
	struct {
		cudnnBackendDescriptor_t d;
		cudnnDataType_t dt;
		int64_t uid;
		bool virt, f16x16;
	} tensors[160];
	int ntensors;
	char *text;
	size_t text_len, text_cap;
} builder;

typedef struct attn_plan {
	int bwd;
	int64_t b, t, h, hkv, hd;
	cudnnBackendDescriptor_t plan;
	cudnnBackendDescriptor_t *descs; /* everything the plan was built from */
	int ndescs;
	int64_t ws;  /* cuDNN's own workspace */
	size_t need; /* the whole scratch: ws, then softmax_sum and dq_accum */
} attn_plan;

struct gpu_attn {
	cudnnHandle_t h;
	long version;
	float scale, neg_inf, one; /* by-value scalars: stable addresses */
	attn_plan *plans;
	int nplans, cap;
};

long gpu_attn_cudnn_version(void)
{
	return (long)cudnnGetVersion();
}

static int cudnn_fail(titan_err *e, const char *what, cudnnStatus_t st)
{
	char detail[512] = "";
	cudnnGetLastErrorString(detail, sizeof detail);
	return err_set(e, "cuDNN: %s: %s%s%s", what, cudnnGetErrorString(st), detail[0] ? ": " : "",
		       detail);
}

/* --- building, with a sticky error: after a failure every step is skipped --- */

static int ok(builder *g)
{
	return g->st == CUDNN_STATUS_SUCCESS;
}

static void check(builder *g, cudnnStatus_t st, const char *what)
{
	if (ok(g) && st != CUDNN_STATUS_SUCCESS) {
		g->st = st;
		g->what = what;
	}
}

static cudnnBackendDescriptor_t make(builder *g, cudnnBackendDescriptorType_t type)
{
	cudnnBackendDescriptor_t d = NULL;
	if (!ok(g))
		return NULL;
	if (g->nd == g->capd) {
		int cap = g->capd ? 2 * g->capd : 64;
		cudnnBackendDescriptor_t *nd = realloc(g->d, (size_t)cap * sizeof *nd);
		if (!nd) {
			check(g, CUDNN_STATUS_ALLOC_FAILED, "out of host memory");
			return NULL;
		}
		g->d = nd;
		g->capd = cap;
	}
	check(g, cudnnBackendCreateDescriptor(type, &d), "cudnnBackendCreateDescriptor");
	if (ok(g))
		g->d[g->nd++] = d;
	return d;
}

static void set(builder *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
		cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what)
{
	if (ok(g))
		check(g, cudnnBackendSetAttribute(d, name, type, n, v), what);
}

static void finalize(builder *g, cudnnBackendDescriptor_t d, const char *what)
{
	if (ok(g))
		check(g, cudnnBackendFinalize(d), what);
}

static const char *type_name(cudnnDataType_t t)
{
	return t == CUDNN_DATA_FLOAT ? "f32" : t == CUDNN_DATA_BFLOAT16 ? "bf16"
	       : t == CUDNN_DATA_INT32 ? "i32" : t == CUDNN_DATA_BOOLEAN ? "bool" : "?";
}

/* A 4-d tensor; uid 0 makes a virtual one with the next free id.  f16x16: in
 * cuDNN's swizzled F16x16 layout (the float32 dq accumulator, as
 * cudnn-frontend declares it). */
static cudnnBackendDescriptor_t tensor_in(builder *g, int64_t uid, cudnnDataType_t dt,
					  const int64_t dims[4], const int64_t strides[4],
					  bool by_value, bool f16x16)
{
	bool virt = uid == 0;
	int64_t id = virt ? g->next_uid++ : uid, align = 16;
	cudnnBackendDescriptor_t d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
	set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
	set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
	set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor id");
	set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
	set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
	set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
	if (f16x16) {
		cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
		set(g, d, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r,
		    "tensor reordering");
	}
	finalize(g, d, "tensor");
	if (ok(g) && g->ntensors < (int)(sizeof g->tensors / sizeof g->tensors[0])) {
		g->tensors[g->ntensors].d = d;
		g->tensors[g->ntensors].dt = dt;
		g->tensors[g->ntensors].uid = id;
		g->tensors[g->ntensors].virt = virt;
		g->tensors[g->ntensors].f16x16 = f16x16;
		g->ntensors++;
	}
	return d;
}

static cudnnBackendDescriptor_t tensor(builder *g, int64_t uid, cudnnDataType_t dt,
				       const int64_t dims[4], const int64_t strides[4], bool by_value)
{
	return tensor_in(g, uid, dt, dims, strides, by_value, false);
}

/* Append "<op>[ <detail>] -> <y's type>[ F16x16][ uid N]\n" to the record. */
static void record(builder *g, const char *op, const char *detail, cudnnBackendDescriptor_t y)
{
	if (!g->text || !ok(g))
		return;
	char line[160];
	int n = snprintf(line, sizeof line, "%s%s%s ->", op, detail[0] ? " " : "", detail);
	for (int i = 0; i < g->ntensors; i++)
		if (g->tensors[i].d == y) {
			n += snprintf(line + n, sizeof line - (size_t)n, " %s%s",
				      type_name(g->tensors[i].dt), g->tensors[i].f16x16 ? " F16x16" : "");
			if (!g->tensors[i].virt)
				n += snprintf(line + n, sizeof line - (size_t)n, " uid %lld",
					      (long long)g->tensors[i].uid);
		}
	snprintf(line + n, sizeof line - (size_t)n, "\n");
	size_t len = strlen(line);
	if (g->text_len + len + 1 > g->text_cap)
		return; /* the caller's buffer is full: the record ends there */
	memcpy(g->text + g->text_len, line, len + 1);
	g->text_len += len;
}

static const char *mode_name(cudnnPointwiseMode_t m)
{
	switch (m) {
	case CUDNN_POINTWISE_ADD: return "ADD";
	case CUDNN_POINTWISE_SUB: return "SUB";
	case CUDNN_POINTWISE_MUL: return "MUL";
	case CUDNN_POINTWISE_DIV: return "DIV";
	case CUDNN_POINTWISE_EXP: return "EXP";
	case CUDNN_POINTWISE_LOG: return "LOG";
	case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
	case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
	case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
	case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
	default: return "?";
	}
}

static void add_op(builder *g, cudnnBackendDescriptor_t op, const char *what)
{
	finalize(g, op, what);
	if (!ok(g))
		return;
	if (g->nops == (int)(sizeof g->ops / sizeof g->ops[0])) {
		check(g, CUDNN_STATUS_BAD_PARAM, "too many operations");
		return;
	}
	g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) computed in prec; axis >= 0 for GEN_INDEX. */
static void pointwise(builder *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
		      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
	cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
	set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
	set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
	if (axis >= 0)
		set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
	finalize(g, pw, "pointwise descriptor");
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
	    "pointwise op");
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    "pointwise x");
	if (b)
		set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
		    "pointwise b");
	if (t)
		set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
		    "pointwise t");
	set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    "pointwise y");
	add_op(g, op, "pointwise op");
	char detail[64];
	snprintf(detail, sizeof detail, "%s %s", mode_name(mode), type_name(prec));
	if (axis >= 0)
		snprintf(detail + strlen(detail), sizeof detail - strlen(detail), " axis %lld",
			 (long long)axis);
	record(g, "pointwise", detail, y);
}

static void reduction(builder *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t y)
{
	cudnnDataType_t f = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
	set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how,
	    "reduction operator");
	set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction type");
	finalize(g, r, "reduction descriptor");
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    "reduction x");
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    "reduction y");
	set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
	    "reduction op");
	add_op(g, op, "reduction op");
	record(g, "reduction", how == CUDNN_REDUCE_TENSOR_MAX ? "MAX" : "ADD", y);
}

/* c = a @ b over the last two dims, batched over the first two (b's head dim
 * may divide a's: grouped-query attention). */
static void matmul(builder *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
		   cudnnBackendDescriptor_t c)
{
	cudnnDataType_t f = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
	set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul type");
	finalize(g, mm, "matmul descriptor");
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
	set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm,
	    "matmul op");
	add_op(g, op, "matmul op");
	record(g, "matmul", "", c);
}

/* y: x seen with other dims and strides (here, transposed views). */
static void reshape(builder *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
	set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
	    "reshape x");
	set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
	    "reshape y");
	add_op(g, op, "reshape op");
	record(g, "reshape", "", y);
}

/* --- the two graphs --- */

typedef struct shapes {
	int64_t q[4], q_s[4];   /* (b, h, t, hd) over BSHD memory */
	int64_t kv[4], kv_s[4]; /* (b, hkv, t, hd) */
	int64_t kt[4], kt_s[4]; /* (b, hkv, hd, t): k (or v) transposed */
	int64_t s[4], s_s[4];   /* (b, h, t, t) scores */
	int64_t st[4], st_s[4]; /* (b, h, t, t) transposed view */
	int64_t r[4], r_s[4];   /* (b, h, t, 1) row statistics */
	int64_t full[4], full_s[4]; /* (b, h, t, hd) dense BHSD (GQA partial sums, dq_accum) */
	int64_t one[4];         /* scalars */
} shapes;

static shapes shapes_of(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd)
{
	shapes x = {
		.q = {b, h, t, hd}, .q_s = {t * h * hd, hd, h * hd, 1},
		.kv = {b, hkv, t, hd}, .kv_s = {t * hkv * hd, hd, hkv * hd, 1},
		.kt = {b, hkv, hd, t}, .kt_s = {t * hkv * hd, hd, 1, hkv * hd},
		.s = {b, h, t, t}, .s_s = {h * t * t, t * t, t, 1},
		.st = {b, h, t, t}, .st_s = {h * t * t, t * t, 1, t},
		.r = {b, h, t, 1}, .r_s = {h * t, t, 1, 1},
		.full = {b, h, t, hd}, .full_s = {h * t * hd, t * hd, hd, 1},
		.one = {1, 1, 1, 1},
	};
	return x;
}

/* scores = causal_mask(scale * q @ k^T); the forward subtracts nothing, the
 * backward passes the stats to subtract before the mask (as cudnn-frontend
 * orders them in each). */
static cudnnBackendDescriptor_t masked_scores(builder *g, const shapes *x,
					      cudnnBackendDescriptor_t q,
					      cudnnBackendDescriptor_t kt,
					      cudnnBackendDescriptor_t scale,
					      cudnnBackendDescriptor_t neg_inf,
					      cudnnBackendDescriptor_t stats)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, B = CUDNN_DATA_BOOLEAN;
	cudnnBackendDescriptor_t s = tensor(g, 0, F, x->s, x->s_s, false);
	matmul(g, q, kt, s);
	cudnnBackendDescriptor_t s2 = tensor(g, 0, F, x->s, x->s_s, false);
	pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, s2, -1);
	if (stats) {
		cudnnBackendDescriptor_t s3 = tensor(g, 0, F, x->s, x->s_s, false);
		pointwise(g, CUDNN_POINTWISE_SUB, F, s2, stats, NULL, s3, -1);
		s2 = s3;
	}
	cudnnBackendDescriptor_t row = tensor(g, 0, I, x->s, x->s_s, false);
	cudnnBackendDescriptor_t col = tensor(g, 0, I, x->s, x->s_s, false);
	cudnnBackendDescriptor_t keep = tensor(g, 0, B, x->s, x->s_s, false);
	cudnnBackendDescriptor_t out = tensor(g, 0, F, x->s, x->s_s, false);
	/* indices in INT32 math, as cudnn-frontend's causal mask generates them */
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, I, s2, NULL, NULL, row, 2);
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, I, s2, NULL, NULL, col, 3);
	pointwise(g, CUDNN_POINTWISE_CMP_GE, B, row, col, NULL, keep, -1);
	pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, F, s2, neg_inf, keep, out, -1);
	return out;
}

/* o = softmax(masked scores) @ v, stats = max + log(sum exp) per row. */
static void build_fwd(builder *g, const shapes *x)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
	cudnnBackendDescriptor_t q = tensor(g, UID_Q, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t kt = tensor(g, UID_K, H, x->kt, x->kt_s, false);
	cudnnBackendDescriptor_t v = tensor(g, UID_V, H, x->kv, x->kv_s, false);
	cudnnBackendDescriptor_t o = tensor(g, UID_O, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, F, x->r, x->r_s, false);
	cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, F, x->one, x->one, true);
	cudnnBackendDescriptor_t neg_inf = tensor(g, UID_NEGINF, F, x->one, x->one, true);

	cudnnBackendDescriptor_t s = masked_scores(g, x, q, kt, scale, neg_inf, NULL);
	cudnnBackendDescriptor_t m = tensor(g, 0, F, x->r, x->r_s, false);
	cudnnBackendDescriptor_t sub = tensor(g, 0, F, x->s, x->s_s, false);
	cudnnBackendDescriptor_t ex = tensor(g, 0, F, x->s, x->s_s, false);
	cudnnBackendDescriptor_t z = tensor(g, 0, F, x->r, x->r_s, false);
	cudnnBackendDescriptor_t lz = tensor(g, 0, F, x->r, x->r_s, false);
	/* bmm2 reads P in the i/o type: cudnn-frontend sets the softmax output to
	 * q's type ("requirement by cudnn backend to take in bmm2 aType as i/o
	 * type") */
	cudnnBackendDescriptor_t p = tensor(g, 0, H, x->s, x->s_s, false);
	reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, m);
	pointwise(g, CUDNN_POINTWISE_SUB, F, s, m, NULL, sub, -1);
	pointwise(g, CUDNN_POINTWISE_EXP, F, sub, NULL, NULL, ex, -1);
	reduction(g, CUDNN_REDUCE_TENSOR_ADD, ex, z);
	pointwise(g, CUDNN_POINTWISE_LOG, F, z, NULL, NULL, lz, -1);
	pointwise(g, CUDNN_POINTWISE_ADD, F, m, lz, NULL, stats, -1);
	pointwise(g, CUDNN_POINTWISE_DIV, F, ex, z, NULL, p, -1);
	matmul(g, p, v, o);
}

/* With P = exp(masked scale q k^T - stats):
 *   dv = P^T dO;  dS = scale * P * (dO v^T - rowsum(dO * O));
 *   dk = dS^T q;  dq = dS k  (through a float32 accumulator).
 * Under GQA dk and dv come per query head and are summed over each group. */
static void build_bwd(builder *g, const shapes *x, int gqa)
{
	const cudnnDataType_t F = CUDNN_DATA_FLOAT, H = CUDNN_DATA_BFLOAT16;
	cudnnBackendDescriptor_t q = tensor(g, UID_Q, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t kt = tensor(g, UID_K, H, x->kt, x->kt_s, false);
	cudnnBackendDescriptor_t vt = tensor(g, UID_V, H, x->kt, x->kt_s, false);
	cudnnBackendDescriptor_t o = tensor(g, UID_O, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t dout = tensor(g, UID_DO, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, F, x->r, x->r_s, false);
	cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, F, x->one, x->one, true);
	cudnnBackendDescriptor_t neg_inf = tensor(g, UID_NEGINF, F, x->one, x->one, true);
	cudnnBackendDescriptor_t one = tensor(g, UID_ONE, F, x->one, x->one, true);
	cudnnBackendDescriptor_t dq = tensor(g, UID_DQ, H, x->q, x->q_s, false);
	cudnnBackendDescriptor_t dk = tensor(g, UID_DK, H, x->kv, x->kv_s, false);
	cudnnBackendDescriptor_t dv = tensor(g, UID_DV, H, x->kv, x->kv_s, false);
	cudnnBackendDescriptor_t ssum = tensor(g, UID_SOFTMAX_SUM, F, x->r, x->r_s, false);
	/* cudnn-frontend's non-virtual dq accumulator: float32 in the F16x16
	 * layout, zeroed before every run (its workspace "memset" entry) */
	cudnnBackendDescriptor_t dq_acc =
		tensor_in(g, UID_DQ_ACCUM, F, x->full, x->full_s, false, true);

	/* softmax_sum = rowsum(dO * O) * 1 */
	int64_t prod_s[4] = {x->q[1] * x->q[2] * x->q[3], x->q[2] * x->q[3], x->q[1] * x->q[3], 1};
	cudnnBackendDescriptor_t prod = tensor(g, 0, F, x->q, prod_s, false);
	cudnnBackendDescriptor_t rs = tensor(g, 0, F, x->r, x->r_s, false);
	pointwise(g, CUDNN_POINTWISE_MUL, F, dout, o, NULL, prod, -1);
	reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, rs);
	pointwise(g, CUDNN_POINTWISE_MUL, F, rs, one, NULL, ssum, -1);

	/* P, and dv = P^T dO */
	cudnnBackendDescriptor_t s = masked_scores(g, x, q, kt, scale, neg_inf, stats);
	cudnnBackendDescriptor_t p = tensor(g, 0, F, x->s, x->s_s, false);
	pointwise(g, CUDNN_POINTWISE_EXP, F, s, NULL, NULL, p, -1);
	cudnnBackendDescriptor_t pt = tensor(g, 0, H, x->st, x->st_s, false);
	reshape(g, p, pt);
	if (gqa) {
		cudnnBackendDescriptor_t dv_full = tensor(g, 0, H, x->full, x->full_s, false);
		matmul(g, pt, dout, dv_full);
		reduction(g, CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
	} else {
		matmul(g, pt, dout, dv);
	}

	/* dS = scale * P * (dO v^T - softmax_sum), dk = dS^T q */
	cudnnBackendDescriptor_t dp = tensor(g, 0, F, x->s, x->s_s, false);
	cudnnBackendDescriptor_t t1 = tensor(g, 0, F, x->s, x->s_s, false);
	cudnnBackendDescriptor_t t2 = tensor(g, 0, F, x->s, x->s_s, false);
	cudnnBackendDescriptor_t ds = tensor(g, 0, F, x->s, x->s_s, false);
	matmul(g, dout, vt, dp);
	pointwise(g, CUDNN_POINTWISE_SUB, F, dp, ssum, NULL, t1, -1);
	pointwise(g, CUDNN_POINTWISE_MUL, F, t1, p, NULL, t2, -1);
	pointwise(g, CUDNN_POINTWISE_MUL, F, t2, scale, NULL, ds, -1);
	cudnnBackendDescriptor_t dst = tensor(g, 0, H, x->st, x->st_s, false);
	reshape(g, ds, dst);
	if (gqa) {
		cudnnBackendDescriptor_t dk_full = tensor(g, 0, H, x->full, x->full_s, false);
		matmul(g, dst, q, dk_full);
		reduction(g, CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
	} else {
		matmul(g, dst, q, dk);
	}

	/* dq = dS k, accumulated in float32, then stored as bf16 */
	cudnnBackendDescriptor_t k = tensor(g, 0, F, x->kv, x->kv_s, false);
	reshape(g, kt, k);
	matmul(g, ds, k, dq_acc);
	pointwise(g, CUDNN_POINTWISE_IDENTITY, F, dq_acc, NULL, NULL, dq, -1);
}

/* Operation graph, heuristics (mode A), then the first engine configuration
 * that finalizes into an execution plan. */
static cudnnBackendDescriptor_t build_plan(builder *g, cudnnHandle_t h, int64_t *ws)
{
	cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
	set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
	    "graph ops");
	finalize(g, graph, "operation graph");
	cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
	    "heuristics graph");
	set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
	finalize(g, heur, "heuristics");
	int64_t count = 0;
	if (ok(g))
		check(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
						  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
		      "heuristics count");
	if (!ok(g))
		return NULL;
	if (count <= 0) {
		check(g, CUDNN_STATUS_NOT_SUPPORTED, "no engine for this graph");
		return NULL;
	}
	if (count > 16)
		count = 16;
	cudnnBackendDescriptor_t cfg[16];
	for (int64_t i = 0; i < count; i++)
		cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	int64_t got = 0;
	if (ok(g))
		check(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
						  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
		      "heuristics results");
	for (int64_t i = 0; ok(g) && i < got; i++) {
		cudnnBackendDescriptor_t plan = make(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
		set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
		set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		    &cfg[i], "plan config");
		if (!ok(g))
			return NULL;
		if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS)
			continue; /* this engine cannot run it here; try the next */
		int64_t n = 0;
		check(g, cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
						  CUDNN_TYPE_INT64, 1, &n, ws),
		      "plan workspace");
		return ok(g) ? plan : NULL;
	}
	check(g, CUDNN_STATUS_NOT_SUPPORTED, "no engine configuration finalizes");
	return NULL;
}

/* The operations of one direction's graph for a shape. */
static builder build_ops(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd)
{
	builder g = {.next_uid = VIRTUAL_UID, .st = CUDNN_STATUS_SUCCESS};
	shapes x = shapes_of(b, t, h, hkv, hd);
	if (bwd)
		build_bwd(&g, &x, h != hkv);
	else
		build_fwd(&g, &x);
	return g;
}

int gpu_attn_graph_check(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			 int *nops, titan_err *e)
{
	builder g = build_ops(bwd, b, t, h, hkv, hd);
	cudnnBackendDescriptor_t graph = make(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops,
	    "graph ops");
	finalize(&g, graph, "operation graph");
	int rc = ok(&g) ? 0 : cudnn_fail(e, g.what, g.st);
	*nops = g.nops;
	for (int i = g.nd - 1; i >= 0; i--)
		cudnnBackendDestroyDescriptor(g.d[i]);
	free(g.d);
	return rc;
}

int gpu_attn_graph_describe(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			    char *text, size_t bytes, titan_err *e)
{
	if (bytes == 0)
		return err_set(e, "gpu_attn_graph_describe: no room");
	text[0] = '\0';
	builder g = {.next_uid = VIRTUAL_UID, .st = CUDNN_STATUS_SUCCESS, .text = text,
		     .text_cap = bytes};
	shapes x = shapes_of(b, t, h, hkv, hd);
	if (bwd)
		build_bwd(&g, &x, h != hkv);
	else
		build_fwd(&g, &x);
	int rc = ok(&g) ? 0 : cudnn_fail(e, g.what, g.st);
	for (int i = g.nd - 1; i >= 0; i--)
		cudnnBackendDestroyDescriptor(g.d[i]);
	free(g.d);
	return rc;
}

static size_t round256(size_t x)
{
	return (x + 255) / 256 * 256;
}

/* Scratch layout: [cuDNN workspace][softmax_sum (b,h,t) f32][dq_accum (b,h,t,hd) f32]. */
static size_t ssum_off(const attn_plan *p)
{
	return round256((size_t)p->ws);
}

static size_t dqacc_off(const attn_plan *p)
{
	return ssum_off(p) + round256((size_t)(p->b * p->h * p->t) * sizeof(float));
}

static void plan_release(attn_plan *p)
{
	for (int i = p->ndescs - 1; i >= 0; i--)
		cudnnBackendDestroyDescriptor(p->descs[i]);
	free(p->descs);
	p->descs = NULL;
	p->ndescs = 0;
}

static attn_plan *plan_get(gpu_attn *a, int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv,
			   int64_t hd, titan_err *e)
{
	for (int i = 0; i < a->nplans; i++) {
		attn_plan *p = &a->plans[i];
		if (p->bwd == bwd && p->b == b && p->t == t && p->h == h && p->hkv == hkv && p->hd == hd)
			return p;
	}
	if (!(hd == 64 || hd == 128) || t % 128 != 0 || b < 1 || h < 1 || hkv < 1 || h % hkv != 0) {
		err_set(e, "cuDNN attention: shape b=%lld t=%lld h=%lld hkv=%lld hd=%lld not supported "
			   "(head dim 64 or 128, t a multiple of 128, h a multiple of hkv)",
			(long long)b, (long long)t, (long long)h, (long long)hkv, (long long)hd);
		return NULL;
	}
	if (bwd && (a->version == 91000 || a->version == 91001)) {
		err_set(e, "cuDNN %ld: its attention backward is broken; use another version", a->version);
		return NULL;
	}
	if (a->nplans == a->cap) {
		int cap = a->cap ? 2 * a->cap : 8;
		attn_plan *np = realloc(a->plans, (size_t)cap * sizeof *np);
		if (!np) {
			err_set(e, "cuDNN attention: out of host memory");
			return NULL;
		}
		a->plans = np;
		a->cap = cap;
	}
	builder g = build_ops(bwd, b, t, h, hkv, hd);
	attn_plan *p = &a->plans[a->nplans];
	*p = (attn_plan){.bwd = bwd, .b = b, .t = t, .h = h, .hkv = hkv, .hd = hd};
	p->plan = build_plan(&g, a->h, &p->ws);
	p->descs = g.d;
	p->ndescs = g.nd;
	if (!p->plan) {
		cudnn_fail(e, g.what ? g.what : "building the attention graph", g.st);
		err_prefix(e, "%s b=%lld t=%lld h=%lld hkv=%lld hd=%lld", bwd ? "backward" : "forward",
			   (long long)b, (long long)t, (long long)h, (long long)hkv, (long long)hd);
		plan_release(p);
		return NULL;
	}
	p->need = bwd ? dqacc_off(p) + round256((size_t)(b * h * t * hd) * sizeof(float))
		      : round256((size_t)p->ws);
	a->nplans++;
	return p;
}

gpu_attn *gpu_attn_create(titan_err *e)
{
	gpu_attn *a = calloc(1, sizeof *a);
	if (!a) {
		err_set(e, "cuDNN attention: out of host memory");
		return NULL;
	}
	cudnnStatus_t st = cudnnCreate(&a->h);
	if (st != CUDNN_STATUS_SUCCESS) {
		cudnn_fail(e, "cudnnCreate", st);
		free(a);
		return NULL;
	}
	a->version = (long)cudnnGetVersion();
	/* cudnn-frontend masks with -inf from 9.10 on, with the lowest float before */
	a->neg_inf = a->version >= 91000 ? -INFINITY : -FLT_MAX;
	a->one = 1.0f;
	return a;
}

void gpu_attn_free(gpu_attn *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nplans; i++)
		plan_release(&a->plans[i]);
	free(a->plans);
	cudnnDestroy(a->h);
	free(a);
}

int gpu_attn_prepare(gpu_attn *a, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
		     size_t *scratch_bytes, titan_err *e)
{
	attn_plan *f = plan_get(a, 0, b, t, h, hkv, hd, e);
	if (!f)
		return -1;
	size_t need = f->need;
	attn_plan *bw = plan_get(a, 1, b, t, h, hkv, hd, e);
	if (!bw)
		return -1;
	*scratch_bytes = need > bw->need ? need : bw->need;
	return 0;
}

/* Bind pointers and run. */
static int execute(gpu_attn *a, attn_plan *p, void *stream, const int64_t *uids, void **ptrs,
		   int n, void *scratch, titan_err *e)
{
	cudnnStatus_t st = cudnnSetStream(a->h, (cudaStream_t)stream);
	if (st != CUDNN_STATUS_SUCCESS)
		return cudnn_fail(e, "cudnnSetStream", st);
	cudnnBackendDescriptor_t vp = NULL;
	if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) !=
	    CUDNN_STATUS_SUCCESS)
		return cudnn_fail(e, "variant pack", st);
	const char *what = "variant pack ids";
	if ((st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
					   uids)) == CUDNN_STATUS_SUCCESS &&
	    (what = "variant pack pointers",
	     st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
					   CUDNN_TYPE_VOID_PTR, n, ptrs)) == CUDNN_STATUS_SUCCESS &&
	    (what = "variant pack workspace",
	     st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
					   &scratch)) == CUDNN_STATUS_SUCCESS &&
	    (what = "variant pack", st = cudnnBackendFinalize(vp)) == CUDNN_STATUS_SUCCESS)
		what = "cudnnBackendExecute", st = cudnnBackendExecute(a->h, p->plan, vp);
	cudnnBackendDestroyDescriptor(vp);
	return st == CUDNN_STATUS_SUCCESS ? 0 : cudnn_fail(e, what, st);
}

/* The scale of this call (0: 1/sqrt(hd)), where the variant pack reads it. */
static float *scale_for(gpu_attn *a, int64_t hd, float scale)
{
	a->scale = scale != 0.0f ? scale : (float)(1.0 / sqrt((double)hd));
	return &a->scale;
}

int gpu_attn_fwd(gpu_attn *a, void *stream, void *out, float *lse, const void *q,
		 const void *k, const void *v, int64_t b, int64_t t, int64_t h, int64_t hkv,
		 int64_t hd, float scale, void *scratch, size_t scratch_bytes, titan_err *e)
{
	attn_plan *p = plan_get(a, 0, b, t, h, hkv, hd, e);
	if (!p)
		return -1;
	if (scratch_bytes < p->need)
		return err_set(e, "cuDNN attention forward: scratch of %zu bytes, %zu needed",
			       scratch_bytes, p->need);
	int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEGINF};
	void *ptrs[] = {(void *)q, (void *)k, (void *)v, out, lse, scale_for(a, hd, scale), &a->neg_inf};
	return execute(a, p, stream, uids, ptrs, 7, scratch, e);
}

int gpu_attn_bwd(gpu_attn *a, void *stream, void *dq, void *dk, void *dv, const void *dout,
		 const void *q, const void *k, const void *v, const void *out, const float *lse,
		 int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd, float scale, void *scratch,
		 size_t scratch_bytes, titan_err *e)
{
	attn_plan *p = plan_get(a, 1, b, t, h, hkv, hd, e);
	if (!p)
		return -1;
	if (scratch_bytes < p->need)
		return err_set(e, "cuDNN attention backward: scratch of %zu bytes, %zu needed",
			       scratch_bytes, p->need);
	char *ssum = (char *)scratch + ssum_off(p), *dq_acc = (char *)scratch + dqacc_off(p);
	/* cuDNN adds dq into the accumulator: cudnn-frontend zeroes it before
	 * every run, whatever the version, and so does this */
	cudaError_t rc = cudaMemsetAsync(dq_acc, 0, (size_t)(b * h * t * hd) * sizeof(float),
					 (cudaStream_t)stream);
	if (rc != cudaSuccess)
		return err_set(e, "cuDNN attention backward: cudaMemsetAsync: %s",
			       cudaGetErrorString(rc));
	int64_t uids[] = {UID_Q,  UID_K,  UID_V,  UID_O,     UID_DO,          UID_STATS,    UID_SCALE,
			  UID_NEGINF, UID_ONE, UID_DQ, UID_DK, UID_DV, UID_SOFTMAX_SUM, UID_DQ_ACCUM};
	void *ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)dout, (void *)lse,
			scale_for(a, hd, scale), &a->neg_inf, &a->one, dq, dk, dv, ssum, dq_acc};
	return execute(a, p, stream, uids, ptrs, 14, scratch, e);
}

#else /* no cuDNN in this build */

static int no_cudnn(titan_err *e)
{
	return err_set(e, "cuDNN attention: built without %s",
#ifdef TITAN_CUDA
		       "cuDNN (no cudnn.h found)"
#else
		       "CUDA (CUDA=0)"
#endif
	);
}

gpu_attn *gpu_attn_create(titan_err *e)
{
	no_cudnn(e);
	return NULL;
}

int gpu_attn_graph_check(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			 int *nops, titan_err *e)
{
	(void)bwd, (void)b, (void)t, (void)h, (void)hkv, (void)hd;
	*nops = 0;
	return no_cudnn(e);
}

int gpu_attn_graph_describe(int bwd, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			    char *text, size_t bytes, titan_err *e)
{
	(void)bwd, (void)b, (void)t, (void)h, (void)hkv, (void)hd;
	if (bytes > 0)
		text[0] = '\0';
	return no_cudnn(e);
}

void gpu_attn_free(gpu_attn *a)
{
	(void)a;
}

long gpu_attn_cudnn_version(void)
{
	return 0;
}

int gpu_attn_prepare(gpu_attn *a, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
		     size_t *scratch_bytes, titan_err *e)
{
	(void)a, (void)b, (void)t, (void)h, (void)hkv, (void)hd;
	*scratch_bytes = 0;
	return no_cudnn(e);
}

int gpu_attn_fwd(gpu_attn *a, void *stream, void *out, float *lse, const void *q,
		 const void *k, const void *v, int64_t b, int64_t t, int64_t h, int64_t hkv,
		 int64_t hd, float scale, void *scratch, size_t scratch_bytes, titan_err *e)
{
	(void)a, (void)stream, (void)out, (void)lse, (void)q, (void)k, (void)v, (void)b, (void)t;
	(void)h, (void)hkv, (void)hd, (void)scale, (void)scratch, (void)scratch_bytes;
	return no_cudnn(e);
}

int gpu_attn_bwd(gpu_attn *a, void *stream, void *dq, void *dk, void *dv, const void *dout,
		 const void *q, const void *k, const void *v, const void *out, const float *lse,
		 int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd, float scale, void *scratch,
		 size_t scratch_bytes, titan_err *e)
{
	(void)a, (void)stream, (void)dq, (void)dk, (void)dv, (void)dout, (void)q, (void)k, (void)v;
	(void)out, (void)lse, (void)b, (void)t, (void)h, (void)hkv, (void)hd, (void)scale;
	(void)scratch;
	(void)scratch_bytes;
	return no_cudnn(e);
}

#endif
