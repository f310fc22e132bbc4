/* The CUDA backend's ops table (lib/backend/cuda.c) against the CPU backend's,
 * op by op in float32 on the same random inputs, and its own mechanics: faults
 * for element types it does not implement, the loss that arrives at sync, a
 * captured step replayed, memory counted from the arena; the fused ops
 * (compile.enable's) against the CPU backend's plain sequences; Flux's encoder
 * and autoencoder ops.  The kernels' bf16
 * paths are measured in test_gpu_ops.c.  Without a GPU every test reports
 * skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "backend/cpu_kernels.h"
#define GPU_TEST_TWO_BACKENDS
#include "gpu/attn.h"
#include "gpu_test.h"

/* n floats on be, copied from x (NULL: left as allocated). */
static float *put(backend *be, const float *x, size_t n)
{
	titan_err e;
	float *p = be->ops->alloc(be, n * sizeof(float) + 16, &e);
	if (!p)
		fail_msg("%s", e.msg);
	if (x)
		be->ops->copy(be, p, x, n * sizeof(float), BACKEND_H2D);
	return p;
}

static float *frand(size_t n, double scale)
{
	float *x = malloc((n ? n : 1) * sizeof *x);
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(scale * urand());
	return x;
}

/* The CUDA result d (n floats) against the CPU's host array want. */
static void same(const char *what, const float *d, const float *want, size_t n, double tol)
{
	float *got = malloc((n ? n : 1) * sizeof *got);
	double *g = malloc((n ? n : 1) * sizeof *g), *w = malloc((n ? n : 1) * sizeof *w);
	assert_non_null(got);
	assert_non_null(g);
	assert_non_null(w);
	gpu->ops->copy(gpu, got, d, n * sizeof(float), BACKEND_D2H);
	sync_ok(gpu);
	for (size_t i = 0; i < n; i++)
		g[i] = got[i], w[i] = want[i];
	double err = rel_err(g, w, n);
	print_message("  %-36s rel err %.2e (bound %.1e)\n", what, err, tol);
	if (!(err <= tol))
		fail_msg("%s: relative error %.3e over %.1e", what, err, tol);
	free(got), free(g), free(w);
}

/* RoPE's (t, hd/2, 2) table in float32, from the float64 one. */
static float *rope_table(int64_t t, int64_t hd)
{
	double *cs64 = zeros((size_t)(t * hd));
	float *cs = malloc((size_t)(t * hd) * sizeof *cs);
	assert_non_null(cs);
	cpu_rope_table_f64(cs64, t, hd, 0, 500000.0, 0.0);
	for (int64_t i = 0; i < t * hd; i++)
		cs[i] = (float)cs64[i];
	free(cs64);
	return cs;
}

static void every_op_in_float32_matches_the_cpu_backend(void **state)
{
	(void)state;
	need_gpu();
	seed(201);
	const int64_t n = 48, d = 256, f = 512, v = 1000, vocab = 300;
	/* matmul: C (n, f) = x (n, d) W^T (f, d), accumulated once more */
	float *x = frand((size_t)(n * d), 1), *w = frand((size_t)(f * d), 0.1);
	float *c = frand((size_t)(n * f), 1);
	float *dx = put(gpu, x, (size_t)(n * d)), *dw = put(gpu, w, (size_t)(f * d));
	float *dc = put(gpu, c, (size_t)(n * f));
	gpu->ops->matmul(gpu, 0, 1, n, f, d, 1.0f, dx, d, dw, d, BE_F32, 0.5f, dc, f, BE_F32);
	cpu->ops->matmul(cpu, 0, 1, n, f, d, 1.0f, x, d, w, d, BE_F32, 0.5f, c, f, BE_F32);
	same("matmul (beta 0.5)", dc, c, (size_t)(n * f), 5 * TOL_F32);

	/* rmsnorm */
	float *nw = frand((size_t)d, 1), *y = frand((size_t)(n * d), 1), *rstd = frand((size_t)n, 1);
	float *dnw = put(gpu, nw, (size_t)d), *dy = put(gpu, NULL, (size_t)(n * d));
	float *drstd = put(gpu, NULL, (size_t)n);
	gpu->ops->rmsnorm_fwd(gpu, dy, BE_F32, drstd, dx, BE_F32, dnw, BE_F32, n, d, 1e-5f);
	cpu->ops->rmsnorm_fwd(cpu, y, BE_F32, rstd, x, BE_F32, nw, BE_F32, n, d, 1e-5f);
	same("rmsnorm_fwd y", dy, y, (size_t)(n * d), TOL_F32);
	same("rmsnorm_fwd rstd", drstd, rstd, (size_t)n, TOL_F32);
	float *g = frand((size_t)(n * d), 1), *gx = frand((size_t)(n * d), 1);
	float *gw = frand((size_t)d, 0.1);
	float *dg = put(gpu, g, (size_t)(n * d)), *dgx = put(gpu, NULL, (size_t)(n * d));
	float *dgw = put(gpu, gw, (size_t)d);
	gpu->ops->rmsnorm_bwd(gpu, dgx, BE_F32, dgw, BE_F32, dg, BE_F32, dx, BE_F32, dnw, BE_F32,
			      drstd, n, d);
	cpu->ops->rmsnorm_bwd(cpu, gx, BE_F32, gw, BE_F32, g, BE_F32, x, BE_F32, nw, BE_F32, rstd,
			      n, d);
	same("rmsnorm_bwd dx", dgx, gx, (size_t)(n * d), TOL_F32);
	same("rmsnorm_bwd dw", dgw, gw, (size_t)d, TOL_F32);

	/* rope, both pairings, there and back */
	const int64_t b = 2, t = 24, h = 2, hd = 64;
	float *cs = rope_table(t, hd);
	float *dcs = put(gpu, cs, (size_t)(t * hd));
	for (int style = 0; style < 2; style++) {
		float *r = frand((size_t)(b * t * h * hd), 1);
		float *dr = put(gpu, r, (size_t)(b * t * h * hd));
		gpu->ops->rope(gpu, dr, BE_F32, dcs, b, t, h, hd, style, 0);
		cpu->ops->rope(cpu, r, BE_F32, cs, b, t, h, hd, style, 0);
		same(style ? "rope rotate-half" : "rope interleaved", dr, r, (size_t)(b * t * h * hd),
		     TOL_F32);
		free(r);
		gpu->ops->free(gpu, dr);
	}

	/* attention through the op (titan's kernels for float32) */
	be_attn a = {.b = b, .tq = t, .tk = t, .h = 4, .hkv = 2, .hd = hd, .hdv = hd, .causal = 1};
	size_t nq = (size_t)(b * t * 4 * hd), nk = (size_t)(b * t * 2 * hd), nl = (size_t)(b * 4 * t);
	float *q = frand(nq, 1), *k = frand(nk, 1), *vv = frand(nk, 1), *o = frand(nq, 1);
	float *lse = frand(nl, 1);
	float *dq = put(gpu, q, nq), *dk = put(gpu, k, nk), *dvv = put(gpu, vv, nk);
	float *dout = put(gpu, NULL, nq), *dlse = put(gpu, NULL, nl);
	gpu->ops->attention_fwd(gpu, dout, dlse, dq, dk, dvv, &a);
	cpu->ops->attention_fwd(cpu, o, lse, q, k, vv, &a);
	same("attention out", dout, o, nq, TOL_F32);
	same("attention lse", dlse, lse, nl, TOL_F32);
	print_message("  attention ran on: %s\n", backend_cuda_attention_path(gpu));
	float *go = frand(nq, 1), *gq = frand(nq, 1), *gk = frand(nk, 1), *gv = frand(nk, 1);
	float *dgo = put(gpu, go, nq), *dgq = put(gpu, NULL, nq), *dgk = put(gpu, NULL, nk);
	float *dgv = put(gpu, NULL, nk);
	gpu->ops->attention_bwd(gpu, dgq, dgk, dgv, dgo, dq, dk, dvv, dout, dlse, &a);
	cpu->ops->attention_bwd(cpu, gq, gk, gv, go, q, k, vv, o, lse, &a);
	same("attention dq", dgq, gq, nq, 5 * TOL_F32);
	same("attention dk", dgk, gk, nk, 5 * TOL_F32);
	same("attention dv", dgv, gv, nk, 5 * TOL_F32);

	/* swiglu */
	float *sa = frand((size_t)(n * f), 4), *sg = frand((size_t)(n * f), 2);
	float *sy = frand((size_t)(n * f), 1), *sda = frand((size_t)(n * f), 1);
	float *sdg = frand((size_t)(n * f), 1);
	float *dsa = put(gpu, sa, (size_t)(n * f)), *dsg = put(gpu, sg, (size_t)(n * f));
	float *dsy = put(gpu, NULL, (size_t)(n * f)), *dsda = put(gpu, NULL, (size_t)(n * f));
	float *dsdg = put(gpu, NULL, (size_t)(n * f));
	gpu->ops->swiglu_fwd(gpu, dsy, dsa, dsg, BE_F32, n * f);
	cpu->ops->swiglu_fwd(cpu, sy, sa, sg, BE_F32, n * f);
	same("swiglu_fwd", dsy, sy, (size_t)(n * f), TOL_F32);
	gpu->ops->swiglu_bwd(gpu, dsda, dsdg, dc, dsa, dsg, BE_F32, n * f);
	cpu->ops->swiglu_bwd(cpu, sda, sdg, c, sa, sg, BE_F32, n * f);
	same("swiglu_bwd da", dsda, sda, (size_t)(n * f), TOL_F32);
	same("swiglu_bwd dg", dsdg, sdg, (size_t)(n * f), TOL_F32);

	/* embedding: bit for bit both ways */
	int32_t *ids = malloc((size_t)n * sizeof *ids);
	assert_non_null(ids);
	for (int64_t i = 0; i < n; i++)
		ids[i] = (int32_t)(((urand() + 1) / 2) * 40); /* many repeats */
	int32_t *dids = gpu->ops->alloc(gpu, (size_t)n * 4, NULL);
	assert_non_null(dids);
	gpu->ops->copy(gpu, dids, ids, (size_t)n * 4, BACKEND_H2D);
	float *tab = frand((size_t)(vocab * d), 1), *dtab = put(gpu, tab, (size_t)(vocab * d));
	gpu->ops->embedding_fwd(gpu, dy, BE_F32, dtab, BE_F32, dids, n, d, 0, vocab);
	cpu->ops->embedding_fwd(cpu, y, BE_F32, tab, BE_F32, ids, n, d, 0, vocab);
	same("embedding_fwd", dy, y, (size_t)(n * d), 0.0);
	gpu->ops->embedding_bwd(gpu, dtab, BE_F32, dg, BE_F32, dids, n, d, 0, vocab);
	cpu->ops->embedding_bwd(cpu, tab, BE_F32, g, BE_F32, ids, n, d, 0, vocab);
	same("embedding_bwd (bit for bit)", dtab, tab, (size_t)(vocab * d), 0.0);

	/* cross-entropy: the loss arrives at sync */
	float *lg = frand((size_t)(n * v), 6);
	int32_t *lab = malloc((size_t)n * sizeof *lab);
	assert_non_null(lab);
	for (int64_t i = 0; i < n; i++)
		lab[i] = i == 3 ? -100 : (int32_t)(((urand() + 1) / 2) * (v - 1));
	float *dlg = put(gpu, lg, (size_t)(n * v));
	int32_t *dlab = gpu->ops->alloc(gpu, (size_t)n * 4, NULL);
	assert_non_null(dlab);
	gpu->ops->copy(gpu, dlab, lab, (size_t)n * 4, BACKEND_H2D);
	double gl = 0.5, cl = 0.5;
	int64_t gn = 2, cn = 2;
	gpu->ops->cross_entropy(gpu, dlg, BE_F32, dlab, n, v, -100, 0.01f, &gl, &gn);
	cpu->ops->cross_entropy(cpu, lg, BE_F32, lab, n, v, -100, 0.01f, &cl, &cn);
	assert_true(gl == 0.5 && gn == 2); /* not before sync */
	sync_ok(gpu);
	print_message("  cross_entropy loss %.9f cpu %.9f, valid %lld\n", gl, cl, (long long)gn);
	assert_int_equal(gn, cn);
	assert_true(fabs(gl - cl) <= TOL_F32 * fabs(cl));
	same("cross_entropy gradient", dlg, lg, (size_t)(n * v), TOL_F32);

	/* add, axpy, scale, sumsq, adamw */
	gpu->ops->add(gpu, dy, BE_F32, dx, BE_F32, dg, BE_F32, n * d);
	cpu->ops->add(cpu, y, BE_F32, x, BE_F32, g, BE_F32, n * d);
	same("add", dy, y, (size_t)(n * d), 0.0);
	gpu->ops->axpy(gpu, dy, BE_F32, -0.3f, dx, BE_F32, n * d);
	cpu->ops->axpy(cpu, y, BE_F32, -0.3f, x, BE_F32, n * d);
	same("axpy", dy, y, (size_t)(n * d), TOL_F32);
	gpu->ops->scale(gpu, dy, BE_F32, 1.7f, n * d);
	cpu->ops->scale(cpu, y, BE_F32, 1.7f, n * d);
	same("scale", dy, y, (size_t)(n * d), TOL_F32);
	double s_gpu = gpu->ops->sumsq(gpu, dy, BE_F32, n * d);
	double s_cpu = cpu->ops->sumsq(cpu, y, BE_F32, n * d);
	sync_ok(gpu);
	print_message("  sumsq %.12g cpu %.12g\n", s_gpu, s_cpu);
	assert_true(fabs(s_gpu - s_cpu) <= 1e-6 * s_cpu);
	float *m = frand((size_t)(f * d), 0.01), *vs = frand((size_t)(f * d), 0.01);
	for (int64_t i = 0; i < f * d; i++)
		vs[i] = fabsf(vs[i]);
	float *dm = put(gpu, m, (size_t)(f * d)), *dvs = put(gpu, vs, (size_t)(f * d));
	float *gr = frand((size_t)(f * d), 0.01), *dgr = put(gpu, gr, (size_t)(f * d));
	gpu->ops->adamw(gpu, dw, dgr, dm, dvs, BE_F32, f * d, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f,
			0.0975f);
	cpu->ops->adamw(cpu, w, gr, m, vs, BE_F32, f * d, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f,
			0.0975f);
	same("adamw p", dw, w, (size_t)(f * d), TOL_F32);
	same("adamw v", dvs, vs, (size_t)(f * d), TOL_F32);

	/* convert there and back */
	uint16_t *dh = gpu->ops->alloc(gpu, (size_t)(n * d) * 2, NULL);
	assert_non_null(dh);
	gpu->ops->convert(gpu, dh, BE_BF16, dx, BE_F32, n * d);
	gpu->ops->convert(gpu, dy, BE_F32, dh, BE_BF16, n * d);
	for (int64_t i = 0; i < n * d; i++)
		y[i] = bf16_round(x[i]);
	same("convert f32 -> bf16 -> f32", dy, y, (size_t)(n * d), 0.0);
	sync_ok(gpu);
	free(x), free(w), free(c), free(nw), free(y), free(rstd), free(g), free(gx), free(gw);
	free(cs), free(q), free(k), free(vv), free(o), free(lse), free(go), free(gq);
	free(gk), free(gv), free(sa), free(sg), free(sy), free(sda), free(sdg), free(ids), free(tab);
	free(lg), free(lab), free(m), free(vs), free(gr);
	/* the backend's books: everything it handed out comes back */
	size_t before = gpu->bytes_in_use;
	void *all[] = {dx,  dw,   dc,   dnw,  dy,   drstd, dg,   dgx, dgw, dcs,  dq,  dk,  dvv,
		       dout, dlse, dgo, dgq,  dgk,  dgv,   dsa,  dsg, dsy, dsda, dsdg, dids, dtab,
		       dlg, dlab, dm,  dvs, dgr, dh};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		gpu->ops->free(gpu, all[i]);
	sync_ok(gpu);
	print_message("  arena: %zu bytes in use before the frees, %zu after, peak %zu\n", before,
		      gpu->bytes_in_use, gpu->peak_bytes);
	assert_true(gpu->bytes_in_use < before);
	assert_true(gpu->peak_bytes >= before);
}

/* The attention variants through the ops table (GPT-OSS's window and sinks,
 * Llama 4's chunks, MLA's head dims, torchtitan's documents) against the CPU
 * backend in float32; they run on titan's kernels, and dsinks accumulates as
 * on the CPU. */
static void attention_variants_match_the_cpu_backend(void **state)
{
	(void)state;
	need_gpu();
	seed(203);
	static int32_t doc[2 * 96]; /* row 0: documents from 0, 30, 31, 64; row 1: 0, 50 */
	for (int p = 0; p < 96; p++)
		doc[p] = p >= 64 ? 64 : p >= 31 ? 31 : p >= 30 ? 30 : 0, doc[96 + p] = p >= 50 ? 50 : 0;
	const be_attn cases[] = {
		{.b = 1, .tq = 256, .tk = 256, .h = 4, .hkv = 2, .hd = 64, .hdv = 64, .causal = 1,
		 .window = 128},
		{.b = 2, .tq = 96, .tk = 96, .h = 2, .hkv = 1, .hd = 128, .hdv = 128, .causal = 1,
		 .chunk = 40},
		{.b = 1, .tq = 80, .tk = 80, .h = 2, .hkv = 2, .hd = 192, .hdv = 128, .causal = 1,
		 .scale = 0.1f},
		{.b = 2, .tq = 96, .tk = 96, .h = 4, .hkv = 2, .hd = 64, .hdv = 64, .causal = 1,
		 .doc = doc, .doc_t = 96},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		be_attn a = cases[c];
		int sinks = a.window > 0; /* GPT-OSS's sliding layers have sinks */
		size_t nq = (size_t)(a.b * a.tq * a.h * a.hd);
		size_t nk = (size_t)(a.b * a.tk * a.hkv * a.hd);
		size_t nv = (size_t)(a.b * a.tk * a.hkv * a.hdv);
		size_t no = (size_t)(a.b * a.tq * a.h * a.hdv);
		size_t nl = (size_t)(a.b * a.h * a.tq), nh = (size_t)a.h;
		float *q = frand(nq, 1), *k = frand(nk, 1), *v = frand(nv, 1), *go = frand(no, 1);
		float *sk = frand(nh, 2), *dsk = frand(nh, 0.01);
		float *o = frand(no, 1), *lse = frand(nl, 1), *gq = frand(nq, 1), *gk = frand(nk, 1);
		float *gv = frand(nv, 1);
		float *dq = put(gpu, q, nq), *dk = put(gpu, k, nk), *dv = put(gpu, v, nv);
		float *dgo = put(gpu, go, no), *dsk_d = put(gpu, dsk, nh), *sk_d = put(gpu, sk, nh);
		float *dout = put(gpu, NULL, no), *dlse = put(gpu, NULL, nl);
		float *dgq = put(gpu, NULL, nq), *dgk = put(gpu, NULL, nk), *dgv = put(gpu, NULL, nv);
		be_attn ga = a, ca = a;
		if (sinks)
			ga.sinks = sk_d, ga.dsinks = dsk_d, ca.sinks = sk, ca.dsinks = dsk;
		titan_err e;
		int32_t *doc_d = a.doc ? gpu->ops->alloc(gpu, sizeof doc, &e) : NULL;
		if (a.doc) {
			assert_non_null(doc_d);
			gpu->ops->copy(gpu, doc_d, doc, sizeof doc, BACKEND_H2D);
			ga.doc = doc_d;
		}
		print_message(" window %lld chunk %lld hd %lld hdv %lld%s%s\n", (long long)a.window,
			      (long long)a.chunk, (long long)a.hd, (long long)a.hdv,
			      sinks ? " sinks" : "", a.doc ? " documents" : "");
		gpu->ops->attention_fwd(gpu, dout, dlse, dq, dk, dv, &ga);
		cpu->ops->attention_fwd(cpu, o, lse, q, k, v, &ca);
		same("attention out", dout, o, no, TOL_F32);
		same("attention lse", dlse, lse, nl, TOL_F32);
		print_message("  attention ran on: %s\n", backend_cuda_attention_path(gpu));
		assert_non_null(strstr(backend_cuda_attention_path(gpu), "titan kernels"));
		gpu->ops->attention_bwd(gpu, dgq, dgk, dgv, dgo, dq, dk, dv, dout, dlse, &ga);
		cpu->ops->attention_bwd(cpu, gq, gk, gv, go, q, k, v, o, lse, &ca);
		same("attention dq", dgq, gq, nq, 5 * TOL_F32);
		same("attention dk", dgk, gk, nk, 5 * TOL_F32);
		same("attention dv", dgv, gv, nv, 5 * TOL_F32);
		if (sinks)
			same("attention dsinks", dsk_d, dsk, nh, 5 * TOL_F32);
		free(q), free(k), free(v), free(go), free(sk), free(dsk), free(o), free(lse);
		free(gq), free(gk), free(gv);
		float *dev[] = {dq, dk, dv, dgo, dsk_d, sk_d, dout, dlse, dgq, dgk, dgv};
		for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
			gpu->ops->free(gpu, dev[i]);
		if (doc_d)
			gpu->ops->free(gpu, doc_d);
	}
}

/* MLA's split heads against the CPU backend, bit for bit in float32 (copies,
 * and the shared part's sum over heads in the same order): per-head second
 * parts (q's rope) and one shared by every head (k_pe), either output alone. */
/* Llama-shaped bf16 attention is what cuDNN's fused kernels exist for: where
 * this build has cuDNN, the backend must run it there.  A graph cuDNN refuses
 * would otherwise fall back to titan's float32 reference kernels in silence
 * (issue 24, item 19): the GPU check fails here instead. */
static void llama_attention_runs_on_cudnn_where_built(void **state)
{
	(void)state;
	need_gpu();
	if (gpu_attn_cudnn_version() == 0) {
		print_message("# SKIP cuDNN path: built without cuDNN\n");
		skip();
	}
	seed(219);
	const be_attn cases[] = {
		{.b = 1, .tq = 256, .tk = 256, .h = 8, .hkv = 2, .hd = 128, .hdv = 128, .causal = 1,
		 .qkv = BE_BF16, .out = BE_BF16, .dout = BE_BF16, .grad = BE_BF16},
		{.b = 2, .tq = 128, .tk = 128, .h = 4, .hkv = 4, .hd = 64, .hdv = 64, .causal = 1,
		 .qkv = BE_BF16, .out = BE_BF16, .dout = BE_BF16, .grad = BE_BF16},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const be_attn *a = &cases[c];
		size_t nq = (size_t)(a->b * a->tq * a->h * a->hd), nk = (size_t)(a->b * a->tk * a->hkv * a->hd);
		size_t nl = (size_t)(a->b * a->h * a->tq);
		uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2);
		assert_true(hq && hk);
		for (size_t i = 0; i < nq; i++)
			hq[i] = bf16_from_f32((float)urand());
		for (size_t i = 0; i < nk; i++)
			hk[i] = bf16_from_f32((float)urand());
		titan_err e;
		void *q = gpu->ops->alloc(gpu, nq * 2, &e), *k = gpu->ops->alloc(gpu, nk * 2, &e);
		void *v = gpu->ops->alloc(gpu, nk * 2, &e), *o = gpu->ops->alloc(gpu, nq * 2, &e);
		void *go = gpu->ops->alloc(gpu, nq * 2, &e), *gq = gpu->ops->alloc(gpu, nq * 2, &e);
		void *gk = gpu->ops->alloc(gpu, nk * 2, &e), *gv = gpu->ops->alloc(gpu, nk * 2, &e);
		float *lse = gpu->ops->alloc(gpu, nl * 4, &e);
		assert_true(q && k && v && o && go && gq && gk && gv && lse);
		gpu->ops->copy(gpu, q, hq, nq * 2, BACKEND_H2D);
		gpu->ops->copy(gpu, go, hq, nq * 2, BACKEND_H2D);
		gpu->ops->copy(gpu, k, hk, nk * 2, BACKEND_H2D);
		gpu->ops->copy(gpu, v, hk, nk * 2, BACKEND_H2D);
		gpu->ops->attention_fwd(gpu, o, lse, q, k, v, a);
		sync_ok(gpu);
		const char *path = backend_cuda_attention_path(gpu);
		print_message("  b=%lld t=%lld h=%lld hkv=%lld hd=%lld bf16 forward ran on: %s\n",
			      (long long)a->b, (long long)a->tq, (long long)a->h, (long long)a->hkv,
			      (long long)a->hd, path);
		if (strncmp(path, "cuDNN", 5) != 0)
			fail_msg("the fast path (cuDNN %ld) was expected: %s", gpu_attn_cudnn_version(),
				 path);
		gpu->ops->attention_bwd(gpu, gq, gk, gv, go, q, k, v, o, lse, a);
		sync_ok(gpu);
		path = backend_cuda_attention_path(gpu);
		print_message("  backward ran on: %s\n", path);
		if (strncmp(path, "cuDNN", 5) != 0)
			fail_msg("the fast path (cuDNN %ld) was expected: %s", gpu_attn_cudnn_version(),
				 path);
		/* documents are no graph of cuDNN's: the same shape with one
		 * document a row runs on titan's kernels */
		be_attn da = *a;
		int32_t *doc = calloc((size_t)(a->b * a->tq), sizeof *doc);
		int32_t *doc_d = gpu->ops->alloc(gpu, (size_t)(a->b * a->tq) * sizeof *doc, &e);
		assert_true(doc && doc_d);
		gpu->ops->copy(gpu, doc_d, doc, (size_t)(a->b * a->tq) * sizeof *doc, BACKEND_H2D);
		da.doc = doc_d, da.doc_t = a->tq;
		gpu->ops->attention_fwd(gpu, o, lse, q, k, v, &da);
		sync_ok(gpu);
		path = backend_cuda_attention_path(gpu);
		print_message("  with documents: %s\n", path);
		assert_string_equal(path, "titan kernels: document masks");
		gpu->ops->attention_bwd(gpu, gq, gk, gv, go, q, k, v, o, lse, &da);
		sync_ok(gpu);
		assert_string_equal(backend_cuda_attention_path(gpu), "titan kernels: document masks");
		free(doc);
		gpu->ops->free(gpu, doc_d);
		free(hq), free(hk);
		gpu->ops->free(gpu, q), gpu->ops->free(gpu, k), gpu->ops->free(gpu, v);
		gpu->ops->free(gpu, o), gpu->ops->free(gpu, go), gpu->ops->free(gpu, gq);
		gpu->ops->free(gpu, gk), gpu->ops->free(gpu, gv), gpu->ops->free(gpu, lse);
	}
}

static void heads_cat_and_split_match_the_cpu_backend(void **state)
{
	(void)state;
	need_gpu();
	seed(204);
	const int64_t n = 37, h = 5, d1 = 128, d2 = 64;
	for (int64_t h2 = 1; h2 <= h; h2 += h - 1) {
		size_t ny = (size_t)(n * h * (d1 + d2)), n1 = (size_t)(n * h * d1);
		size_t n2 = (size_t)(n * h2 * d2);
		float *x1 = frand(n1, 1), *x2 = frand(n2, 1), *y = frand(ny, 1);
		float *dx1 = put(gpu, x1, n1), *dx2 = put(gpu, x2, n2), *dy = put(gpu, NULL, ny);
		gpu->ops->heads_cat(gpu, dy, dx1, dx2, BE_F32, n, h, d1, d2, h2);
		cpu->ops->heads_cat(cpu, y, x1, x2, BE_F32, n, h, d1, d2, h2);
		print_message(" h2 = %lld\n", (long long)h2);
		same("heads_cat", dy, y, ny, 0.0);
		float *g = frand(ny, 1), *dg = put(gpu, g, ny);
		gpu->ops->heads_split(gpu, dx1, dx2, dg, BE_F32, n, h, d1, d2, h2);
		cpu->ops->heads_split(cpu, x1, x2, g, BE_F32, n, h, d1, d2, h2);
		same("heads_split x1", dx1, x1, n1, 0.0);
		same("heads_split x2", dx2, x2, n2, 0.0);
		gpu->ops->heads_split(gpu, NULL, dx2, dg, BE_F32, n, h, d1, d2, h2);
		gpu->ops->heads_split(gpu, dx1, NULL, dg, BE_F32, n, h, d1, d2, h2);
		same("heads_split x1 alone", dx1, x1, n1, 0.0);
		same("heads_split x2 alone", dx2, x2, n2, 0.0);
		free(x1), free(x2), free(y), free(g);
		gpu->ops->free(gpu, dx1), gpu->ops->free(gpu, dx2), gpu->ops->free(gpu, dy);
		gpu->ops->free(gpu, dg);
	}
}

/* Flux's encoder and autoencoder ops and bias_add through both tables in
 * float32 (their bf16 paths are test_gpu_ops.c's): the wiring, argument for
 * argument.  The autoencoder's shapes in small: 32 groups, a 3x3 with padding
 * 1 and the stride-2 downsampling over F.pad's (0, 1, 0, 1). */
static void flux_ops_match_the_cpu_backend(void **state)
{
	(void)state;
	need_gpu();
	seed(205);
	const int64_t b = 2, l = 20, h = 4, dk = 64, nx = b * l * h * dk, nb = h * l * l;
	float *q = frand((size_t)nx, 0.5), *k = frand((size_t)nx, 0.5), *v = frand((size_t)nx, 1);
	float *bias = frand((size_t)nb, 2), *o = frand((size_t)nx, 1);
	float *dq = put(gpu, q, (size_t)nx), *dk_ = put(gpu, k, (size_t)nx), *dv = put(gpu, v, (size_t)nx);
	float *dbias = put(gpu, bias, (size_t)nb), *dout = put(gpu, NULL, (size_t)nx);
	gpu->ops->t5_attention(gpu, dout, dq, dk_, dv, dbias, BE_F32, b, l, h, dk);
	cpu->ops->t5_attention(cpu, o, q, k, v, bias, BE_F32, b, l, h, dk);
	same("t5_attention", dout, o, (size_t)nx, TOL_F32);
	/* the gate in place on q, swish on k, a bias on each row of v (l h, dk) */
	gpu->ops->geglu_fwd(gpu, dq, dq, dk_, BE_F32, nx);
	cpu->ops->geglu_fwd(cpu, q, q, k, BE_F32, nx);
	same("geglu_fwd", dq, q, (size_t)nx, TOL_F32);
	gpu->ops->swish(gpu, dk_, BE_F32, 1.702f, nx);
	cpu->ops->swish(cpu, k, BE_F32, 1.702f, nx);
	same("swish", dk_, k, (size_t)nx, TOL_F32);
	float *dbv = put(gpu, bias, (size_t)dk);
	gpu->ops->bias_add(gpu, dv, BE_F32, dbv, BE_F32, nx / dk, dk, 0, NULL);
	cpu->ops->bias_add(cpu, v, BE_F32, bias, BE_F32, nx / dk, dk, 0, NULL);
	same("bias_add", dv, v, (size_t)nx, TOL_F32);
	/* norms: v's rows as a layer norm's, then as a (2, 64, 80) image */
	float *w = frand((size_t)dk, 1), *wb = frand((size_t)dk, 1);
	float *dw = put(gpu, w, (size_t)dk), *dwb = put(gpu, wb, (size_t)dk);
	gpu->ops->layernorm_fwd(gpu, dout, BE_F32, dv, BE_F32, dw, dwb, BE_F32, nx / dk, dk, 1e-5f);
	cpu->ops->layernorm_fwd(cpu, o, BE_F32, v, BE_F32, w, wb, BE_F32, nx / dk, dk, 1e-5f);
	same("layernorm_fwd", dout, o, (size_t)nx, TOL_F32);
	gpu->ops->groupnorm_fwd(gpu, dout, BE_F32, dv, BE_F32, dw, dwb, BE_F32, 2, 64, nx / 128, 32,
				1e-6f);
	cpu->ops->groupnorm_fwd(cpu, o, BE_F32, v, BE_F32, w, wb, BE_F32, 2, 64, nx / 128, 32, 1e-6f);
	same("groupnorm_fwd", dout, o, (size_t)nx, TOL_F32);
	/* images: v as (2, 16, 20, 16) */
	float *up = frand((size_t)(4 * nx), 1), *dup = put(gpu, NULL, (size_t)(4 * nx));
	gpu->ops->upsample2x(gpu, dup, dv, BE_F32, 2, 16, 20, 16);
	cpu->ops->upsample2x(cpu, up, v, BE_F32, 2, 16, 20, 16);
	same("upsample2x", dup, up, (size_t)(4 * nx), 0.0);
	const int64_t pads[2][4] = {{1, 1, 1, 1}, {0, 1, 0, 1}};
	for (int p = 0; p < 2; p++) {
		int64_t s = p + 1, ho = (20 + pads[p][2] + pads[p][3] - 3) / s + 1;
		int64_t wo = (16 + pads[p][0] + pads[p][1] - 3) / s + 1;
		size_t ncol = (size_t)(2 * 16 * 9 * ho * wo);
		float *cols = frand(ncol, 1), *dcols = put(gpu, NULL, ncol);
		gpu->ops->im2col(gpu, dcols, dv, BE_F32, 2, 16, 20, 16, 3, s, pads[p], 0, ho * wo);
		cpu->ops->im2col(cpu, cols, v, BE_F32, 2, 16, 20, 16, 3, s, pads[p], 0, ho * wo);
		same(p ? "im2col stride 2, pad (0, 1, 0, 1)" : "im2col pad 1", dcols, cols, ncol, 0.0);
		free(cols);
		gpu->ops->free(gpu, dcols);
	}
	free(q), free(k), free(v), free(bias), free(o), free(w), free(wb), free(up);
	gpu->ops->free(gpu, dq), gpu->ops->free(gpu, dk_), gpu->ops->free(gpu, dv);
	gpu->ops->free(gpu, dbias), gpu->ops->free(gpu, dout), gpu->ops->free(gpu, dbv);
	gpu->ops->free(gpu, dw), gpu->ops->free(gpu, dwb), gpu->ops->free(gpu, dup);
}

/* Types the backend does not implement fault at the next sync, saying which. */
static void unimplemented_types_fault_at_sync(void **state)
{
	(void)state;
	need_gpu();
	float *p = put(gpu, NULL, 64);
	gpu->ops->scale(gpu, p, BE_E4M3, 2.0f, 64);
	titan_err e;
	assert_int_equal(gpu->ops->sync(gpu, &e), -1);
	assert_non_null(strstr(e.msg, "float8_e4m3fn"));
	be_attn a = {.b = 1, .tq = 8, .tk = 8, .h = 1, .hkv = 1, .hd = 64, .hdv = 32, .causal = 1};
	gpu->ops->attention_fwd(gpu, p, p, p, p, p, &a);
	assert_int_equal(gpu->ops->sync(gpu, &e), -1);
	assert_non_null(strstr(e.msg, "head dims hd 64, hdv 32"));
	assert_int_equal(gpu->ops->sync(gpu, &e), 0); /* reported once */
	gpu->ops->free(gpu, p);
}

/* A step's ops captured once and replayed give what running them eagerly
 * gives, loss included. */
static void a_captured_step_replays_like_the_eager_one(void **state)
{
	(void)state;
	need_gpu();
	seed(202);
	const int64_t n = 64, d = 128, v = 512;
	float *x = frand((size_t)(n * d), 1), *w = frand((size_t)(v * d), 0.1);
	int32_t *lab = malloc((size_t)n * sizeof *lab);
	assert_non_null(lab);
	for (int64_t i = 0; i < n; i++)
		lab[i] = (int32_t)(((urand() + 1) / 2) * (v - 1));
	float *dx = put(gpu, x, (size_t)(n * d)), *dw = put(gpu, w, (size_t)(v * d));
	float *dl = put(gpu, NULL, (size_t)(n * v)), *dgw = put(gpu, NULL, (size_t)(v * d));
	int32_t *dlab = gpu->ops->alloc(gpu, (size_t)n * 4, NULL);
	assert_non_null(dlab);
	gpu->ops->copy(gpu, dlab, lab, (size_t)n * 4, BACKEND_H2D);
	double loss[2] = {0};
	int64_t cnt[2] = {0};
	titan_err e;
	/* logits, loss and gradient, the weight gradient: eager, then captured */
	float *eager = malloc((size_t)(v * d) * sizeof *eager);
	assert_non_null(eager);
	backend_cuda_graph *g = NULL;
	for (int run = 0; run < 2; run++) {
		if (run == 1 && backend_cuda_capture_begin(gpu, &e) != 0)
			fail_msg("%s", e.msg);
		gpu->ops->zero(gpu, dgw, (size_t)(v * d) * 4);
		gpu->ops->matmul(gpu, 0, 1, n, v, d, 1.0f, dx, d, dw, d, BE_F32, 0.0f, dl, v, BE_F32);
		gpu->ops->cross_entropy(gpu, dl, BE_F32, dlab, n, v, -100, 1.0f / (float)n, &loss[run],
					&cnt[run]);
		gpu->ops->matmul(gpu, 1, 0, v, d, n, 1.0f, dl, v, dx, d, BE_F32, 1.0f, dgw, d, BE_F32);
		if (run == 0) {
			sync_ok(gpu);
			gpu->ops->copy(gpu, eager, dgw, (size_t)(v * d) * 4, BACKEND_D2H);
		} else if (!(g = backend_cuda_capture_end(gpu, &e))) {
			fail_msg("%s", e.msg);
		}
	}
	assert_int_equal(cnt[1], 0);
	for (int replay = 0; replay < 2; replay++) {
		if (backend_cuda_replay(gpu, g, &e) != 0)
			fail_msg("%s", e.msg);
		sync_ok(gpu);
		same("replayed dW = eager dW", dgw, eager, (size_t)(v * d), 0.0);
	}
	backend_cuda_graph_free(g);
	free(eager);
	print_message("  loss eager %.9f (%lld), replayed twice %.9f (%lld)\n", loss[0],
		      (long long)cnt[0], loss[1], (long long)cnt[1]);
	assert_int_equal(cnt[1], 2 * cnt[0]);
	assert_true(fabs(loss[1] - 2 * loss[0]) <= 1e-9 * fabs(loss[0]));
	free(x), free(w), free(lab);
	gpu->ops->free(gpu, dx), gpu->ops->free(gpu, dw), gpu->ops->free(gpu, dl);
	gpu->ops->free(gpu, dgw), gpu->ops->free(gpu, dlab);
	sync_ok(gpu);
}

/* The fused ops of the table (compile.enable's) against the CPU backend's,
 * which are the plain ops run one after another: float32, random inputs. */
static void fused_ops_match_the_cpu_backend(void **state)
{
	(void)state;
	need_gpu();
	seed(203);
	const int64_t n = 40, d = 192, b = 2, t = 20, h = 4, hkv = 2, hd = 64, v = 700;
	const size_t nd = (size_t)(n * d);
	/* the residual add fused into the norm, in place over the stream */
	float *x = frand(nd, 1), *dl = frand(nd, 1), *w = frand((size_t)d, 1);
	float *y = frand(nd, 1), *rs = frand((size_t)n, 1);
	float *gx = put(gpu, x, nd), *gdl = put(gpu, dl, nd), *gw = put(gpu, w, (size_t)d);
	float *gy = put(gpu, NULL, nd), *grs = put(gpu, NULL, (size_t)n);
	gpu->ops->rmsnorm_add_fwd(gpu, gy, BE_F32, grs, gx, BE_F32, gx, gdl, BE_F32, gw, BE_F32, n,
				  d, 1e-5f);
	cpu->ops->rmsnorm_add_fwd(cpu, y, BE_F32, rs, x, BE_F32, x, dl, BE_F32, w, BE_F32, n, d,
				  1e-5f);
	same("rmsnorm_add_fwd residual", gx, x, nd, 0.0);
	same("rmsnorm_add_fwd y", gy, y, nd, TOL_F32);
	same("rmsnorm_add_fwd rstd", grs, rs, (size_t)n, TOL_F32);
	/* and its backward, the stream's gradient added in place */
	float *dy = frand(nd, 1), *dres = frand(nd, 1), *dw = frand((size_t)d, 0.1);
	float *gdy = put(gpu, dy, nd), *gdres = put(gpu, dres, nd), *gdw = put(gpu, dw, (size_t)d);
	gpu->ops->rmsnorm_add_bwd(gpu, gdres, BE_F32, gdres, gdw, BE_F32, gdy, BE_F32, gx, BE_F32,
				  gw, BE_F32, grs, n, d);
	cpu->ops->rmsnorm_add_bwd(cpu, dres, BE_F32, dres, dw, BE_F32, dy, BE_F32, x, BE_F32, w,
				  BE_F32, rs, n, d);
	same("rmsnorm_add_bwd dx", gdres, dres, nd, TOL_F32);
	same("rmsnorm_add_bwd dw", gdw, dw, (size_t)d, TOL_F32);

	/* RoPE in the QKV layout, there and back */
	float *cs = rope_table(t, hd);
	float *gcs = put(gpu, cs, (size_t)(t * hd));
	size_t nq = (size_t)(b * t * h * hd), nk = (size_t)(b * t * hkv * hd), nt = nq + 2 * nk;
	float *qkv = frand(nt, 1), *q = frand(nq, 1), *k = frand(nk, 1), *vv = frand(nk, 1);
	float *gqkv = put(gpu, qkv, nt), *gq = put(gpu, NULL, nq), *gk = put(gpu, NULL, nk);
	float *gv = put(gpu, NULL, nk);
	for (int style = 0; style < 2; style++) {
		gpu->ops->rope_qkv(gpu, gq, gk, gv, gqkv, BE_F32, gcs, b, t, h, hkv, hd, style);
		cpu->ops->rope_qkv(cpu, q, k, vv, qkv, BE_F32, cs, b, t, h, hkv, hd, style);
		same("rope_qkv q", gq, q, nq, TOL_F32);
		same("rope_qkv k", gk, k, nk, TOL_F32);
		same("rope_qkv v", gv, vv, nk, 0.0);
		gpu->ops->rope_qkv_bwd(gpu, gqkv, gq, gk, gv, BE_F32, gcs, b, t, h, hkv, hd, style);
		cpu->ops->rope_qkv_bwd(cpu, qkv, q, k, vv, BE_F32, cs, b, t, h, hkv, hd, style);
		same("rope_qkv_bwd dqkv", gqkv, qkv, nt, TOL_F32);
	}

	/* the output projection fused with the loss, chunks of 16 rows over 40 */
	float *hh = frand(nd, 1), *hw = frand((size_t)(v * d), 0.1), *dh = frand(nd, 1);
	float *hdw = frand((size_t)(v * d), 0.01), *lg = frand((size_t)(16 * v), 1);
	int32_t *lab = malloc((size_t)n * sizeof *lab);
	assert_non_null(lab);
	for (int64_t i = 0; i < n; i++)
		lab[i] = i % 7 == 0 ? -100 : (int32_t)(((urand() + 1) / 2) * (v - 1));
	float *ghh = put(gpu, hh, nd), *ghw = put(gpu, hw, (size_t)(v * d));
	float *gdh = put(gpu, NULL, nd), *ghdw = put(gpu, hdw, (size_t)(v * d));
	float *glg = put(gpu, NULL, (size_t)(16 * v)), *gscale = put(gpu, NULL, 1);
	int32_t *glab = gpu->ops->alloc(gpu, (size_t)n * 4, NULL);
	assert_non_null(glab);
	gpu->ops->copy(gpu, glab, lab, (size_t)n * 4, BACKEND_H2D);
	float scale = 1.0f / 34;
	gpu->ops->copy(gpu, gscale, &scale, sizeof scale, BACKEND_H2D);
	double gl = 0, cl = 0;
	int64_t gn = 0, cn = 0;
	gpu->ops->lm_head_loss(gpu, ghh, ghw, BE_F32, glab, n, d, v, -100, gscale, gdh, BE_F32, ghdw,
			       BE_F32, glg, 16, &gl, &gn);
	cpu->ops->lm_head_loss(cpu, hh, hw, BE_F32, lab, n, d, v, -100, &scale, dh, BE_F32, hdw,
			       BE_F32, lg, 16, &cl, &cn);
	sync_ok(gpu);
	print_message("  lm_head_loss %.9f cpu %.9f, valid %lld\n", gl, cl, (long long)gn);
	assert_int_equal(gn, cn);
	assert_true(fabs(gl - cl) <= TOL_F32 * fabs(cl));
	same("lm_head_loss dh", gdh, dh, nd, TOL_F32);
	same("lm_head_loss dw", ghdw, hdw, (size_t)(v * d), TOL_F32);

	/* the optimizer on the device: norm, clip factor, AdamW over three spans
	 * (one at an offset that breaks the 16-byte vectors) */
	const int64_t np = 5003;
	const be_span spans[3] = {{0, 2000, 0.1f}, {2000, 3, 0.0f}, {2003, 3000, 0.1f}};
	float *p = frand((size_t)np, 1), *g = frand((size_t)np, 0.5), *m = frand((size_t)np, 0.01);
	float *vs = frand((size_t)np, 0.01);
	for (int64_t i = 0; i < np; i++)
		vs[i] = fabsf(vs[i]);
	float *gp = put(gpu, p, (size_t)np), *gg = put(gpu, g, (size_t)np);
	float *gm = put(gpu, m, (size_t)np), *gvs = put(gpu, vs, (size_t)np);
	be_adamw_step cst = {.lr = 1e-3, .b1 = 0.9, .b2 = 0.95, .eps = 1e-8,
			     .bc1 = 1 - pow(0.9, 3), .bc2 = 1 - pow(0.95, 3)};
	be_adamw_step *gst = gpu->ops->alloc(gpu, sizeof *gst, NULL);
	double *gsum = gpu->ops->alloc(gpu, sizeof(double), NULL), csum = 0, gsum_h = 0;
	assert_non_null(gst);
	assert_non_null(gsum);
	gpu->ops->copy(gpu, gst, &cst, sizeof cst, BACKEND_H2D);
	for (int rep = 0; rep < 2; rep++) { /* the second time from the kept device tables */
		gpu->ops->sumsq_dev(gpu, gsum, gg, BE_F32, np);
		gpu->ops->clip_factor(gpu, gst, gsum, 1.0f);
		gpu->ops->adamw_multi(gpu, gp, gg, gm, gvs, BE_F32, spans, 3, gst);
		cpu->ops->sumsq_dev(cpu, &csum, g, BE_F32, np);
		cpu->ops->clip_factor(cpu, &cst, &csum, 1.0f);
		cpu->ops->adamw_multi(cpu, p, g, m, vs, BE_F32, spans, 3, &cst);
	}
	be_adamw_step got;
	gpu->ops->copy(gpu, &got, gst, sizeof got, BACKEND_D2H);
	gpu->ops->copy(gpu, &gsum_h, gsum, sizeof gsum_h, BACKEND_D2H);
	sync_ok(gpu);
	print_message("  sumsq %.12g cpu %.12g, clip %.7g cpu %.7g\n", gsum_h, csum,
		      (double)got.clip, (double)cst.clip);
	assert_true(fabs(gsum_h - csum) <= 1e-9 * csum);
	assert_true(got.clip < 1 && fabs(got.clip - cst.clip) <= 1e-6);
	same("adamw_multi p", gp, p, (size_t)np, TOL_F32);
	same("adamw_multi exp_avg", gm, m, (size_t)np, TOL_F32);
	same("adamw_multi exp_avg_sq", gvs, vs, (size_t)np, TOL_F32);

	free(x), free(dl), free(w), free(y), free(rs), free(dy), free(dres), free(dw);
	free(cs), free(qkv), free(q), free(k), free(vv), free(hh), free(hw), free(dh), free(hdw);
	free(lg), free(lab), free(p), free(g), free(m), free(vs);
	void *all[] = {gx,  gdl, gw,  gy,   grs, gdy,    gdres, gdw,  gcs, gqkv, gq,  gk,  gv,
		       ghh, ghw, gdh, ghdw, glg, gscale, glab,  gp,   gg,  gm,   gvs, gst, gsum};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		gpu->ops->free(gpu, all[i]);
	sync_ok(gpu);
}

static void creation_fails_cleanly_without_a_device(void **state)
{
	(void)state;
	titan_err e = {{0}};
	backend_cuda_opts o = {.device = gpu_count() + 3};
	assert_null(backend_cuda_create(&o, &e));
	print_message("  %s\n", e.msg);
	assert_true(strlen(e.msg) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(creation_fails_cleanly_without_a_device),
		cmocka_unit_test(every_op_in_float32_matches_the_cpu_backend),
		cmocka_unit_test(fused_ops_match_the_cpu_backend),
		cmocka_unit_test(attention_variants_match_the_cpu_backend),
		cmocka_unit_test(llama_attention_runs_on_cudnn_where_built),
		cmocka_unit_test(heads_cat_and_split_match_the_cpu_backend),
		cmocka_unit_test(flux_ops_match_the_cpu_backend),
		cmocka_unit_test(unimplemented_types_fault_at_sync),
		cmocka_unit_test(a_captured_step_replays_like_the_eager_one),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
