/* cuBLASLt products in the row-major convention of gemm.h.
 *
 * cuBLASLt is column-major.  A row-major (m, n) matrix is the column-major
 * (n, m) one, so D^T = op(B)^T op(A)^T is computed instead: cuBLASLt's first
 * operand is our B, its second our A, with the same transposition flags, and
 * its (rows, cols) are our (n, m). */
#include "gpu/gemm.h"

#include <stdlib.h>
#include <string.h>

int gpu_f8_scales_plan(int64_t m, int64_t n, int64_t nsa, int64_t nsb, gpu_f8_scales *out,
		       titan_err *e)
{
	memset(out, 0, sizeof *out);
	if (m < 0 || n < 0 || (nsa != 1 && nsa != m) || (nsb != 1 && nsb != n))
		return err_set(e, "gemm float8: %lld and %lld scales for (%lld, %lld): expected 1 "
				  "or a row's each", (long long)nsa, (long long)nsb, (long long)m,
			       (long long)n);
	out->outer_vec = nsa > 1 || nsb > 1;
	out->na = out->outer_vec ? m : 1;
	out->nb = out->outer_vec ? n : 1;
	const size_t f = sizeof(float);
	if ((uint64_t)out->na > SIZE_MAX / f / 2 || (uint64_t)out->nb > SIZE_MAX / f / 2)
		return err_set(e, "gemm float8: %lld and %lld scales overflow", (long long)out->na,
			       (long long)out->nb);
	out->b_offset = ((size_t)out->na * f + 15) & ~(size_t)15;
	out->bytes = out->b_offset + (size_t)out->nb * f;
	if (out->outer_vec) {
		if (n > 0 && (uint64_t)m > SIZE_MAX / f / (uint64_t)n)
			return err_set(e, "gemm float8: a (%lld, %lld) float32 product overflows",
				       (long long)m, (long long)n);
		out->fallback_bytes = (size_t)m * (size_t)n * f;
	}
	return 0;
}

#ifdef TITAN_CUDA
#include <cuda_runtime_api.h>

#include "gpu/cublaslt.h"
#include "gpu/launch.h"

/* Everything that selects an algorithm: shapes, strides, types, whether C is
 * read, the epilogue, and each pointer's alignment (cuBLASLt's kernels assume
 * the alignment they were chosen for). */
typedef struct gemm_key { /* all int64_t: no padding, so memcmp compares keys */
	int64_t trans_a, trans_b, ab_type, d_type, bias_type, use_c, use_bias;
	int64_t align_a, align_b, align_c, align_d;
	int64_t m, n, k, lda, ldb, ldd;
	int64_t f8_a, f8_b, vec_a, vec_b; /* the scaled float8 product's (0: not one) */
} gemm_key;

typedef struct gemm_plan {
	gemm_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C = D */
	cublasLtMatmulAlgo_t algo;
	int refused; /* the heuristic had no algorithm: kept so that it is asked once */
} gemm_plan;

struct gpu_gemm {
	cublasLtHandle_t lt;
	void *ws;
	size_t ws_bytes;
	gemm_plan *plans;
	int nplans, cap;
};

static int lt_fail(titan_err *e, const char *what, cublasStatus_t st)
{
	return err_set(e, "cuBLASLt: %s: %s", what, gpu_lt()->GetStatusString(st));
}

gpu_gemm *gpu_gemm_create(void *workspace, size_t workspace_bytes, titan_err *e)
{
	gpu_gemm *g = calloc(1, sizeof *g);
	if (!g) {
		err_set(e, "cuBLASLt: out of memory");
		return NULL;
	}
	if (gpu_lt_load(e) == NULL) {
		free(g);
		return NULL;
	}
	cublasStatus_t st = gpu_lt()->Create(&g->lt);
	if (st != CUBLAS_STATUS_SUCCESS) {
		lt_fail(e, "cublasLtCreate", st);
		free(g);
		return NULL;
	}
	g->ws = workspace;
	g->ws_bytes = workspace ? workspace_bytes : 0;
	return g;
}

static void plan_destroy(gemm_plan *p)
{
	if (p->la)
		gpu_lt()->MatrixLayoutDestroy(p->la);
	if (p->lb)
		gpu_lt()->MatrixLayoutDestroy(p->lb);
	if (p->lc)
		gpu_lt()->MatrixLayoutDestroy(p->lc);
	if (p->desc)
		gpu_lt()->MatmulDescDestroy(p->desc);
	p->la = p->lb = p->lc = NULL;
	p->desc = NULL;
}

static int no_algo(const gemm_key *k, titan_err *e)
{
	err_set(e, "cuBLASLt: no algorithm for %s%s m=%lld n=%lld k=%lld (A/B %s, D %s)",
		k->trans_a ? "A^T" : "A", k->trans_b ? "B^T" : "B", (long long)k->m,
		(long long)k->n, (long long)k->k,
		k->f8_a ? (k->vec_a || k->vec_b ? "float8, row-wise scales" : "float8")
		: k->ab_type == GPU_BF16 ? "bf16" : "f32",
		k->d_type == GPU_BF16 ? "bf16" : "f32");
	return GPU_GEMM_NO_ALGO;
}

void gpu_gemm_free(gpu_gemm *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nplans; i++)
		plan_destroy(&g->plans[i]);
	free(g->plans);
	gpu_lt()->Destroy(g->lt);
	free(g);
}

int gpu_gemm_cached(const gpu_gemm *g)
{
	return g->nplans;
}

/* The alignment every row of a matrix keeps: its start pointer's and its row
 * stride's in bytes, at most 256. */
static int64_t align_of(const void *p, int64_t ld, int dt)
{
	uintptr_t a = (uintptr_t)p | (uintptr_t)(ld * (int64_t)gpu_dtype_size(dt));
	int64_t al = 256;
	while (al > 1 && a % (uintptr_t)al)
		al /= 2;
	return al;
}

static cudaDataType_t cuda_type(int dt)
{
	return dt == GPU_BF16 ? CUDA_R_16BF : dt == GPU_E4M3 ? CUDA_R_8F_E4M3
	       : dt == GPU_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_32F;
}

static int type_ok(int dt)
{
	return dt == GPU_F32 || dt == GPU_BF16;
}

static gemm_key key_of(const gpu_gemm_args *x)
{
	gemm_key k;
	memset(&k, 0, sizeof k);
	k.trans_a = x->trans_a != 0;
	k.trans_b = x->trans_b != 0;
	k.ab_type = x->ab_type;
	k.d_type = x->d_type;
	k.use_c = x->beta != 0.0f;
	k.use_bias = x->bias != NULL;
	k.bias_type = x->bias ? x->bias_type : 0;
	k.align_a = align_of(x->a, x->lda, x->ab_type);
	k.align_b = align_of(x->b, x->ldb, x->ab_type);
	k.align_c = k.use_c ? align_of(x->c, x->ldd, x->d_type) : 256;
	k.align_d = align_of(x->d, x->ldd, x->d_type);
	k.m = x->m, k.n = x->n, k.k = x->k;
	k.lda = x->lda, k.ldb = x->ldb, k.ldd = x->ldd;
	return k;
}

static int set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *v,
		    size_t bytes, titan_err *e)
{
	cublasStatus_t st = gpu_lt()->MatmulDescSetAttribute(d, attr, v, bytes);
	return st == CUBLAS_STATUS_SUCCESS ? 0 : lt_fail(e, "cublasLtMatmulDescSetAttribute", st);
}

/* Descriptors and the heuristic's first algorithm for key k. */
static int plan_make(gpu_gemm *g, const gemm_key *k, gemm_plan *p, titan_err *e)
{
	memset(p, 0, sizeof *p);
	p->key = *k;
	cublasStatus_t st = gpu_lt()->MatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (st != CUBLAS_STATUS_SUCCESS)
		return lt_fail(e, "cublasLtMatmulDescCreate", st);
	cublasOperation_t op_first = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* our B */
	cublasOperation_t op_second = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* our A */
	cublasLtEpilogue_t epi = k->use_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	if (set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first, e) ||
	    set_desc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second, e) ||
	    set_desc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, e))
		goto fail;
	if (k->f8_a && k->vec_a) { /* outer vectors on both (gpu_gemm_f8_run checks) */
		int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
		if (set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec, e) ||
		    set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec, e))
			goto fail;
	}
	if (k->use_bias) {
		cudaDataType_t bt = cuda_type(k->bias_type);
		if (set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt, e))
			goto fail;
	}
	/* Column-major views: first operand (n, k) after op, stored (n, k) or (k, n);
	 * second (k, m) after op, stored (k, m) or (m, k); D (n, m). */
	cudaDataType_t ab = cuda_type(k->ab_type), dt = cuda_type(k->d_type);
	cudaDataType_t first = k->f8_a ? cuda_type((int)k->f8_b) : ab;
	cudaDataType_t second = k->f8_a ? cuda_type((int)k->f8_a) : ab;
	if ((st = gpu_lt()->MatrixLayoutCreate(&p->la, first, k->trans_b ? k->k : k->n,
					     k->trans_b ? k->n : k->k, k->ldb)) != CUBLAS_STATUS_SUCCESS ||
	    (st = gpu_lt()->MatrixLayoutCreate(&p->lb, second, k->trans_a ? k->m : k->k,
					     k->trans_a ? k->k : k->m, k->lda)) != CUBLAS_STATUS_SUCCESS ||
	    (st = gpu_lt()->MatrixLayoutCreate(&p->lc, dt, k->n, k->m, k->ldd)) != CUBLAS_STATUS_SUCCESS) {
		lt_fail(e, "cublasLtMatrixLayoutCreate", st);
		goto fail;
	}
	cublasLtMatmulPreference_t pref;
	if ((st = gpu_lt()->MatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) {
		lt_fail(e, "cublasLtMatmulPreferenceCreate", st);
		goto fail;
	}
	uint64_t ws = g->ws_bytes;
	uint32_t al_first = (uint32_t)k->align_b, al_second = (uint32_t)k->align_a;
	uint32_t al_c = (uint32_t)k->align_c, al_d = (uint32_t)k->align_d;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	if ((st = gpu_lt()->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
							&ws, sizeof ws)) == CUBLAS_STATUS_SUCCESS &&
	    (st = gpu_lt()->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
							&al_first, sizeof al_first)) == CUBLAS_STATUS_SUCCESS &&
	    (st = gpu_lt()->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
							&al_second, sizeof al_second)) == CUBLAS_STATUS_SUCCESS &&
	    (st = gpu_lt()->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
							&al_c, sizeof al_c)) == CUBLAS_STATUS_SUCCESS &&
	    (st = gpu_lt()->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
							&al_d, sizeof al_d)) == CUBLAS_STATUS_SUCCESS)
		st = gpu_lt()->MatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1,
						    &res, &found);
	gpu_lt()->MatmulPreferenceDestroy(pref);
	if (st != CUBLAS_STATUS_SUCCESS) {
		lt_fail(e, "cublasLtMatmulAlgoGetHeuristic", st);
		goto fail;
	}
	if (found < 1) {
		plan_destroy(p);
		p->refused = 1;
		return no_algo(k, e);
	}
	p->algo = res.algo;
	return 0;
fail:
	plan_destroy(p);
	return -1;
}

/* The plan of key k, or NULL with *rc -1 or GPU_GEMM_NO_ALGO. */
static gemm_plan *plan_for(gpu_gemm *g, const gemm_key *k, int *rc, titan_err *e)
{
	*rc = -1;
	for (int i = 0; i < g->nplans; i++)
		if (memcmp(&g->plans[i].key, k, sizeof *k) == 0) {
			if (!g->plans[i].refused)
				return &g->plans[i];
			*rc = no_algo(k, e);
			return NULL;
		}
	if (g->nplans == g->cap) {
		int cap = g->cap ? 2 * g->cap : 16;
		gemm_plan *np = realloc(g->plans, (size_t)cap * sizeof *np);
		if (!np) {
			err_set(e, "cuBLASLt: out of memory");
			return NULL;
		}
		g->plans = np;
		g->cap = cap;
	}
	gemm_plan *p = &g->plans[g->nplans];
	int made = plan_make(g, k, p, e);
	if (made == GPU_GEMM_NO_ALGO) {
		g->nplans++;
		*rc = made;
	}
	return made == 0 ? &g->plans[g->nplans++] : NULL;
}

int gpu_gemm_run(gpu_gemm *g, void *stream, const gpu_gemm_args *x, titan_err *e)
{
	if (x->m == 0 || x->n == 0)
		return 0;
	if (x->m < 0 || x->n < 0 || x->k <= 0 || !type_ok(x->ab_type) || !type_ok(x->d_type) ||
	    (x->bias && !type_ok(x->bias_type)))
		return err_set(e, "gemm: bad arguments (m=%lld n=%lld k=%lld, types %d/%d)",
			       (long long)x->m, (long long)x->n, (long long)x->k, x->ab_type,
			       x->d_type);
	if (x->beta != 0.0f && !x->c)
		return err_set(e, "gemm: beta = %g needs C", (double)x->beta);
	gemm_key k = key_of(x);
	int rc;
	gemm_plan *p = plan_for(g, &k, &rc, e);
	if (!p)
		return -1;
	if (x->bias && set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias,
				sizeof x->bias, e))
		return -1;
	const void *c = x->beta != 0.0f ? x->c : x->d;
	cublasStatus_t st = gpu_lt()->Matmul(g->lt, p->desc, &x->alpha, x->b, p->la, x->a, p->lb,
					   &x->beta, c, p->lc, x->d, p->lc, &p->algo, g->ws,
					   g->ws_bytes, (cudaStream_t)stream);
	return st == CUBLAS_STATUS_SUCCESS ? 0 : lt_fail(e, "cublasLtMatmul", st);
}

static int f8_type_ok(int t)
{
	return t == GPU_E4M3 || t == GPU_E5M2;
}

/* Row-major D (m, n) = a (m, k) . b (n, k)^T is column-major D^T (n, m) =
 * op(first) (n, k) . op(second) (k, m) with first = our b stored (k, n)
 * column-major and transposed, second = our a stored (k, m): cuBLASLt's "TN",
 * the only layout of its float8 kernels. */
int gpu_gemm_f8_run(gpu_gemm *g, void *stream, const gpu_gemm_f8_args *x, titan_err *e)
{
	if (x->m == 0 || x->n == 0)
		return 0;
	if (x->m < 0 || x->n < 0 || x->k <= 0 || !f8_type_ok(x->a_type) || !f8_type_ok(x->b_type) ||
	    (x->a_type == GPU_E5M2 && x->b_type == GPU_E5M2) || !type_ok(x->d_type))
		return err_set(e, "gemm float8: bad arguments (m=%lld n=%lld k=%lld, types %d/%d/%d)",
			       (long long)x->m, (long long)x->n, (long long)x->k, x->a_type,
			       x->b_type, x->d_type);
	gemm_key k;
	memset(&k, 0, sizeof k);
	k.trans_a = 0; /* our a (m, k) is cuBLASLt's (k, m) untransposed */
	k.trans_b = 1; /* our b (n, k): (k, n) transposed */
	k.ab_type = GPU_F32; /* unused for float8 */
	k.d_type = x->d_type;
	k.use_c = x->beta != 0.0f;
	k.align_a = align_of(x->a, x->k, x->a_type);
	k.align_b = align_of(x->b, x->k, x->b_type);
	k.align_c = k.use_c ? align_of(x->d, x->n, x->d_type) : 256;
	k.align_d = align_of(x->d, x->n, x->d_type);
	k.m = x->m, k.n = x->n, k.k = x->k;
	k.lda = x->k, k.ldb = x->k, k.ldd = x->n;
	k.f8_a = x->a_type, k.f8_b = x->b_type;
	k.vec_a = x->a_rows != 0, k.vec_b = x->b_rows != 0;
	if (k.vec_a != k.vec_b)
		return err_set(e, "gemm float8: row-wise scales on one operand and a scalar on the "
				  "other (cuBLASLt's outer-vector mode is both or neither: "
				  "gpu_f8_scales_plan)");
	int rc;
	gemm_plan *p = plan_for(g, &k, &rc, e);
	if (!p)
		return rc;
	/* cuBLASLt's A is our b, its B our a */
	if (set_desc(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &x->sb, sizeof x->sb, e) ||
	    set_desc(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x->sa, sizeof x->sa, e))
		return -1;
	const float one = 1.0f;
	cublasStatus_t st = gpu_lt()->Matmul(g->lt, p->desc, &one, x->b, p->la, x->a, p->lb, &x->beta,
					   x->d, p->lc, x->d, p->lc, &p->algo, g->ws, g->ws_bytes,
					   (cudaStream_t)stream);
	return st == CUBLAS_STATUS_SUCCESS ? 0 : lt_fail(e, "cublasLtMatmul (float8)", st);
}

#else /* built without CUDA */

int gpu_gemm_f8_run(gpu_gemm *g, void *stream, const gpu_gemm_f8_args *args, titan_err *e)
{
	(void)g, (void)stream, (void)args;
	return err_set(e, "gemm: built without CUDA (CUDA=0)");
}


gpu_gemm *gpu_gemm_create(void *workspace, size_t workspace_bytes, titan_err *e)
{
	(void)workspace, (void)workspace_bytes;
	err_set(e, "gemm: built without CUDA (CUDA=0)");
	return NULL;
}

void gpu_gemm_free(gpu_gemm *g)
{
	(void)g;
}

int gpu_gemm_run(gpu_gemm *g, void *stream, const gpu_gemm_args *args, titan_err *e)
{
	(void)g, (void)stream, (void)args;
	return err_set(e, "gemm: built without CUDA (CUDA=0)");
}

int gpu_gemm_cached(const gpu_gemm *g)
{
	(void)g;
	return 0;
}

#endif
