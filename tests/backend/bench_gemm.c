/* bench_gemm: the CPU backend's matmul on Llama linears' shapes, float32
 * (OpenBLAS) against bfloat16 (oneDNN), through the op table as the model
 * calls it: per linear of a model, the forward y = x W^T (bf16 out), the input
 * gradient dx = dy W (bf16 out) and the weight gradient dW += dy^T x (float32
 * out, beta 1); a fault (oneDNN missing a kernel) ends it with status 1.  One line per product for scripts/bench/gemm.sh:
 *   model=... linear=... op=... m= n= k= f32_gflops= bf16_gflops= impl=
 *
 *   bench_gemm [MODEL]     MODEL: debugmodel | 100M | 8B (default: all) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu_bf16.h"

typedef struct linear {
	const char *name;
	int64_t out, in;
} linear;

typedef struct shape {
	const char *model;
	int64_t tokens; /* rows of x: batch x sequence */
	linear lin[5];
} shape;

/* Widths as flavor.c and bench_model.c define the models (FFN hidden from
 * multiple_of); the tokens keep one product near a second on two cores. */
static const shape shapes[] = {
	{"debugmodel", 1024, {{"wq", 256, 256}, {"wk,wv", 256, 256}, {"w13", 768, 256},
			      {"w2", 256, 768}, {"output", 2048, 256}}},
	{"100M", 512, {{"wq", 768, 768}, {"wk,wv", 256, 768}, {"w13", 2048, 768},
		       {"w2", 768, 2048}, {"output", 16384, 768}}},
	{"8B", 256, {{"wq", 4096, 4096}, {"wk,wv", 1024, 4096}, {"w13", 14336, 4096},
		     {"w2", 4096, 14336}, {"output", 128256, 4096}}},
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct product {
	int ta, tb;
	int64_t m, n, k;
	float beta;
	const void *a, *b;
	void *c;
	int64_t lda, ldb, ldc;
	be_dtype ab, ct;
} product;

/* One run of p: seconds, or -1 when the op faulted. */
static double run_once(backend *be, const product *p)
{
	titan_err e = {0};
	double t0 = now();
	be->ops->matmul(be, p->ta, p->tb, p->m, p->n, p->k, 1, p->a, p->lda, p->b, p->ldb, p->ab,
			p->beta, p->c, p->ldc, p->ct);
	if (be->ops->sync(be, &e) != 0) {
		fprintf(stderr, "bench_gemm: %s\n", e.msg);
		return -1;
	}
	return now() - t0;
}

/* The fastest of at least 5 runs of each and 0.5 s, the two types taking turns
 * so that both meet the same load on a shared machine; GFLOP/s into gf[2]. */
static int time_pair(backend *be, const product p[2], double gf[2])
{
	double best[2] = {1e300, 1e300}, start = now();
	for (int r = 0; r < 5 || now() - start < 0.5; r++)
		for (int i = 0; i < 2; i++) {
			double dt = run_once(be, &p[i]);
			if (dt < 0)
				return -1;
			best[i] = dt < best[i] ? dt : best[i];
		}
	for (int i = 0; i < 2; i++)
		gf[i] = 2.0 * (double)p[i].m * (double)p[i].n * (double)p[i].k / best[i] * 1e-9;
	return 0;
}

/* The three products of one linear, x (tokens, in), W (out, in), in one type. */
static void products(product out[3], const linear *l, int64_t t, const void *x,
		     const void *w, void *y, const void *dy, void *dx, void *dw, be_dtype ab)
{
	out[0] = (product){0, 1, t, l->out, l->in, 0, x, w, y, l->in, l->in, l->out, ab, ab};
	out[1] = (product){0, 0, t, l->in, l->out, 0, dy, w, dx, l->out, l->in, l->in, ab, ab};
	out[2] = (product){1, 0, l->out, l->in, t, 1, dy, x, dw, l->out, l->in, l->in, ab, BE_F32};
}

static int run_linear(backend *be, const shape *s, const linear *l)
{
	int64_t t = s->tokens;
	size_t nx = (size_t)(t * l->in), nw = (size_t)(l->out * l->in), ny = (size_t)(t * l->out);
	/* float32 buffers serve both types (a bf16 tensor takes half of one) */
	float *x = malloc(nx * 4), *w = malloc(nw * 4), *y = malloc(ny * 4), *dy = malloc(ny * 4);
	float *dx = malloc(nx * 4), *dw = malloc(nw * 4);
	uint16_t *hx = malloc(nx * 2), *hw = malloc(nw * 2), *hdy = malloc(ny * 2);
	if (!x || !w || !y || !dy || !dx || !dw || !hx || !hw || !hdy) {
		fprintf(stderr, "bench_gemm: out of memory\n");
		return -1;
	}
	uint64_t r = 7;
	float *fill[3] = {x, w, dy};
	size_t nfill[3] = {nx, nw, ny};
	for (int f = 0; f < 3; f++)
		for (size_t i = 0; i < nfill[f]; i++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			fill[f][i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
		}
	memset(dw, 0, nw * 4);
	be->ops->convert(be, hx, BE_BF16, x, BE_F32, (int64_t)nx);
	be->ops->convert(be, hw, BE_BF16, w, BE_F32, (int64_t)nw);
	be->ops->convert(be, hdy, BE_BF16, dy, BE_F32, (int64_t)ny);
	product pf[3], pb[3];
	products(pf, l, t, x, w, y, dy, dx, dw, BE_F32);
	products(pb, l, t, hx, hw, y, hdy, dx, dw, BE_BF16);
	static const char *ops[3] = {"fwd", "dx", "dw"};
	for (int i = 0; i < 3; i++) {
		double gf[2];
		if (time_pair(be, (product[2]){pf[i], pb[i]}, gf) < 0)
			return -1;
		printf("model=%s linear=%s op=%s m=%lld n=%lld k=%lld f32_gflops=%.1f "
		       "bf16_gflops=%.1f impl=%s\n",
		       s->model, l->name, ops[i], (long long)pf[i].m, (long long)pf[i].n,
		       (long long)pf[i].k, gf[0], gf[1], backend_cpu_bf16_gemm(be));
		fflush(stdout);
	}
	free(x), free(w), free(y), free(dy), free(dx), free(dw), free(hx), free(hw), free(hdy);
	return 0;
}

int main(int argc, char **argv)
{
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	if (!be) {
		titan_err_print(&e);
		return 1;
	}
	int found = 0;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		if (argc > 1 && strcmp(argv[1], shapes[i].model) != 0)
			continue;
		found = 1;
		for (int j = 0; j < 5; j++)
			if (run_linear(be, &shapes[i], &shapes[i].lin[j]) < 0)
				return 1;
	}
	backend_free(be);
	if (!found) {
		fprintf(stderr, "bench_gemm: unknown model '%s' (debugmodel, 100M, 8B)\n", argv[1]);
		return 2;
	}
	return 0;
}
