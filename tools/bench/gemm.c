/* titan-bench gemm: the backend's matmul on a model's linear shapes (or given
 * ones), per element type, in TFLOP/s and as a percentage of the measured
 * ceiling of that element type, with the GEMM that ran (bf16: oneDNN's kernel
 * or the portable path).  An element type the backend does not implement is
 * probed with a small GEMM and reported with the backend's own reason. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "model/flavor.h"
#include "prof/prof.h"

typedef struct gemm_dtype {
	const char *name;
	be_dtype ab, ct;     /* operands, output (torchao: float8 in, bf16 out) */
	int rows;            /* float8: one scale per row of each operand (rowwise) */
	const char *path;    /* the CPU backend's GEMM (bf16: backend_cpu_bf16_gemm's) */
} gemm_dtype;

/* float8: the backend's f8_matmul (torch._scaled_mm), as torchao's recipes call
 * it; the CPU backend dequantizes to float32 and calls sgemm (torchao's
 * emulation) */
static const gemm_dtype DTYPES[] = {
	{"fp32", BE_F32, BE_F32, 0, "sgemm"},
	{"bf16", BE_BF16, BE_BF16, 0, NULL},
	{"fp8-tensorwise", BE_E4M3, BE_BF16, 0, "f32 sgemm"},
	{"fp8-rowwise", BE_E4M3, BE_BF16, 1, "f32 sgemm"},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

typedef struct shape {
	char name[48];
	int64_t m, n, k;
} shape;

const llama_args *bench_flavor(const char *spec)
{
	char name[32];
	if (strncasecmp(spec, "llama3-", 7) == 0)
		spec += 7;
	snprintf(name, sizeof name, "%s", spec);
	const llama_args *f = flavor_find(name);
	if (f == NULL && strlen(name) <= 5) {
		for (char *p = name; *p; p++)
			*p = (char)toupper((unsigned char)*p);
		f = flavor_find(name);
	}
	return f;
}

/* Append a shape, or add name to an equal (N, K) already there ("wq,wo"). */
static void add_shape(shape *s, int *n, const char *name, int64_t m, int64_t nn, int64_t k)
{
	for (int i = 0; i < *n; i++)
		if (s[i].n == nn && s[i].k == k) {
			size_t l = strlen(s[i].name);
			snprintf(s[i].name + l, sizeof s[i].name - l, ",%s", name);
			return;
		}
	s[*n] = (shape){.m = m, .n = nn, .k = k};
	snprintf(s[*n].name, sizeof s[*n].name, "%s", name);
	(*n)++;
}

/* The forward GEMM of each distinct linear of a flavor: y (M, N) = x (M, K) w^T. */
static int flavor_shapes(const llama_args *f, int64_t m, shape *s)
{
	int n = 0, hd = flavor_head_dim(f), ffn = flavor_ffn_hidden(f);
	add_shape(s, &n, "wq", m, (int64_t)f->n_heads * hd, f->dim);
	add_shape(s, &n, "wk", m, (int64_t)f->n_kv_heads * hd, f->dim);
	add_shape(s, &n, "wv", m, (int64_t)f->n_kv_heads * hd, f->dim);
	add_shape(s, &n, "wo", m, f->dim, (int64_t)f->n_heads * hd);
	add_shape(s, &n, "w1", m, ffn, f->dim);
	add_shape(s, &n, "w3", m, ffn, f->dim);
	add_shape(s, &n, "w2", m, f->dim, ffn);
	add_shape(s, &n, "output", m, f->vocab_size, f->dim);
	return n;
}

/* "M,N,K[:M,N,K...]". */
static int parse_shapes(const char *spec, shape *s, int max, titan_err *e)
{
	int n = 0;
	const char *p = spec;
	while (*p) {
		long long m, nn, k;
		int used;
		if (sscanf(p, "%lld,%lld,%lld%n", &m, &nn, &k, &used) != 3 || m < 1 || nn < 1 || k < 1 ||
		    m > (1 << 24) || nn > (1 << 24) || k > (1 << 24))
			return err_set(e, "--shapes: '%s': expected M,N,K[:M,N,K...] with sizes 1..2^24 "
				       "or a model (llama3-8b, llama3-70b, debugmodel)", spec);
		if (n == max)
			return err_set(e, "--shapes: more than %d shapes", max);
		s[n] = (shape){.m = m, .n = nn, .k = k};
		snprintf(s[n].name, sizeof s[n].name, "%lldx%lldx%lld", m, nn, k);
		n++;
		p += used;
		if (*p == ':')
			p++;
		else if (*p != '\0')
			return err_set(e, "--shapes: '%s': expected ':' between shapes", spec);
	}
	return n;
}

typedef struct gemm_run {
	backend *be;
	const gemm_dtype *dt;
	int64_t m, n, k;
	void *x, *w, *y;
	float *sx, *sw; /* float8: the operands' scales on the backend (1, or m and n) */
} gemm_run;

static int is_f8(be_dtype t)
{
	return t == BE_E4M3 || t == BE_E5M2;
}

static void run_gemm(void *p)
{
	gemm_run *g = p;
	PROF_T0(t);
	/* y (m, n) = x (m, k) @ w (n, k)^T */
	if (is_f8(g->dt->ab))
		g->be->ops->f8_matmul(g->be, g->m, g->n, g->k, g->x, g->dt->ab, g->sx,
				      g->dt->rows ? g->m : 1, g->w, g->dt->ab, g->sw,
				      g->dt->rows ? g->n : 1, 0.0f, g->y, g->dt->ct);
	else
		g->be->ops->matmul(g->be, 0, 1, g->m, g->n, g->k, 1.0f, g->x, g->k, g->w, g->k,
				   g->dt->ab, 0.0f, g->y, g->n, g->dt->ct);
	PROF_OP(t, "matmul", PA_I("m", g->m), PA_I("n", g->n), PA_I("k", g->k),
		PA_S("dtype", g->dt->name));
}

/* One GEMM of one element type; its median seconds, or -1 (the backend's
 * fault or an allocation failure in e). */
static double time_gemm(backend *be, const gemm_dtype *dt, const shape *s, double min_s,
			titan_err *e)
{
	float sx, sw;
	size_t ab = be_dtype_size(dt->ab), ct = be_dtype_size(dt->ct);
	int64_t nsx = dt->rows ? s->m : 1, nsw = dt->rows ? s->n : 1;
	gemm_run g = {be, dt, s->m, s->n, s->k, NULL, NULL, NULL, NULL, NULL};
	double t = -1;
	g.x = bench_operand(be, dt->ab, (size_t)(s->m * s->k), 1.0f, 1, &sx, e);
	g.w = g.x ? bench_operand(be, dt->ab, (size_t)(s->n * s->k), 0.02f, 2, &sw, e) : NULL;
	g.y = g.w ? be->ops->alloc(be, (size_t)(s->m * s->n) * ct, e) : NULL;
	if (g.y != NULL && is_f8(dt->ab)) { /* the tensorwise scale on every row: same time */
		g.sx = bench_fill_floats(be, sx, (size_t)nsx, e);
		g.sw = g.sx ? bench_fill_floats(be, sw, (size_t)nsw, e) : NULL;
	}
	if (g.y != NULL && (!is_f8(dt->ab) || g.sw != NULL)) {
		PROF_MEM_ALLOC(g.y, (size_t)(s->m * s->n) * ct, "gemm output");
		t = bench_time(run_gemm, &g, min_s, be, e);
	}
	bench_release(be, g.x, (size_t)(s->m * s->k) * ab);
	bench_release(be, g.w, (size_t)(s->n * s->k) * ab);
	bench_release(be, g.y, (size_t)(s->m * s->n) * ct);
	bench_release(be, g.sx, (size_t)nsx * sizeof(float));
	bench_release(be, g.sw, (size_t)nsw * sizeof(float));
	return t;
}

/* Whether the backend implements this element type: a 16x16x16 GEMM and a sync. */
static int probe(backend *be, const gemm_dtype *dt, char *why, size_t n)
{
	titan_err e = {0};
	shape s = {"probe", 16, 16, 16};
	if (time_gemm(be, dt, &s, 0, &e) < 0) {
		snprintf(why, n, "%s", e.msg);
		return 0;
	}
	return 1;
}

int bench_gemm(const bench_args *a, titan_err *e)
{
	enum { MAX_SHAPES = 64 };
	shape s[MAX_SHAPES];
	int ns;
	const llama_args *f = bench_flavor(a->shapes);
	if (bench_check_list(a->dtypes, "fp32,bf16,fp8-tensorwise,fp8-rowwise", e))
		return BENCH_USAGE;
	if (f != NULL)
		ns = flavor_shapes(f, a->tokens, s);
	else if ((ns = parse_shapes(a->shapes, s, MAX_SHAPES, e)) < 0)
		return BENCH_USAGE;
	report r;
	if (report_init(&r, "gemm", a, e))
		return -1;
	backend *be = backend_cpu_create(a->threads, e);
	if (be == NULL) {
		report_free(&r);
		return -1;
	}
	bench_ceiling_begin(&r, be->threads);
	int rc = 0;
	for (size_t d = 0; d < N_DTYPES && rc == 0; d++) {
		char why[1100];
		if (!bench_listed(a->dtypes, DTYPES[d].name))
			continue;
		if (!probe(be, &DTYPES[d], why, sizeof why)) {
			report_unavailable(&r, DTYPES[d].name, why);
			continue;
		}
		for (int i = 0; i < ns; i++) {
			double t = time_gemm(be, &DTYPES[d], &s[i], a->seconds, e);
			if (t < 0) {
				rc = -1;
				break;
			}
			double tf = 2.0 * (double)s[i].m * (double)s[i].n * (double)s[i].k / t;
			json_t *row = report_row(&r);
			rset(row, "shape", json_string(s[i].name));
			rset(row, "m", json_integer(s[i].m));
			rset(row, "n", json_integer(s[i].n));
			rset(row, "k", json_integer(s[i].k));
			rset(row, "dtype", json_string(DTYPES[d].name));
			rset(row, "path", json_string(DTYPES[d].path ? DTYPES[d].path
								     : backend_cpu_bf16_gemm(be)));
			rset(row, "ms", json_real(t * 1e3));
			rset(row, "tflops", json_real(tf / 1e12));
		}
	}
	if (rc == 0)
		bench_ceiling_end(&r, be->threads);
	report_unavailable(&r, "cuda", bench_cuda_unavailable());
	if (f != NULL)
		report_note(&r, "%s: the forward GEMM of each distinct linear, M = %" PRId64
			    " tokens (--tokens)", f->name, a->tokens);
	report_note(&r, "y (M,N) = x (M,K) @ w (N,K)^T on the %s backend; median of runs "
		    "lasting at least %.2f s", be->ops->name, a->seconds);
	static const report_col cols[] = {
		{"shape", "shape", NULL}, {"m", "M", NULL}, {"n", "N", NULL}, {"k", "K", NULL},
		{"dtype", "dtype", NULL}, {"path", "path", NULL}, {"ms", "ms", "%.3f"},
		{"tflops", "TFLOP/s", "%.4f"},
		{"pct_ceiling", "% ceiling", "%.1f"},
	};
	if (rc == 0)
		rc = report_emit(&r, cols, sizeof cols / sizeof cols[0], a->json, e);
	backend_free(be);
	report_free(&r);
	return rc;
}
