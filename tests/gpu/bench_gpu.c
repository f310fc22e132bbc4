/* bench_gpu: the CUDA backend's figures, for scripts/bench/gpu.sh (and through
 * it scripts/gpu/check.sh).  Each section prints human lines and one
 * "result SECTION NAME VALUE UNIT" line per figure for the summary table.
 *
 *   bench_gpu ceiling     device-to-device copy GB/s; bf16 GEMM 8192^3 TFLOP/s
 *   bench_gpu gemm        cuBLASLt on Llama 3 8B's linear shapes (b*t = 8192 tokens):
 *                         forward, input gradient, weight gradient
 *   bench_gpu attention   causal GQA, cuDNN and titan's kernels, forward and backward
 *   bench_gpu attention-variants
 *                         GPT-OSS's sliding window + sinks, MLA's heads, Llama 4's
 *                         chunks on titan's kernels, forward and backward
 *   bench_gpu kernels     the memory-bound kernels in GB/s
 *   bench_gpu model FLAVOR LAYERS B T STEPS AC
 *                         a training step (forward, backward, clip, AdamW) of a Llama 3
 *                         flavor with LAYERS layers (0: the flavor's), bf16 activations,
 *                         AC none|op|full; eagerly and as a replayed CUDA graph
 *
 * Timing: device events around each run after warm-up runs, the median of the
 * timed runs; inputs are random (never zeros: they run faster than data). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "gpu/att_mask.h"
#include "gpu/attn.h"
#include "gpu/gemm.h"
#include "gpu/gpu.h"
#include "gpu/launch.h"
#include "model/model.h"
#include "optim/optim.h"

/* torchtitan's peak for MFU on H100/H200 SXM: dense bf16 989 TFLOP/s. */
#define PEAK_BF16_FLOPS 989e12

static void die(const titan_err *e)
{
	fprintf(stderr, "bench_gpu: %s\n", e->msg);
	exit(1);
}

static void ok(int rc, const char *what)
{
	titan_err e;
	if (gpu_check(rc, what, &e))
		die(&e);
}

static void *dalloc(size_t bytes)
{
	titan_err e;
	void *p = gpu_malloc(bytes, &e);
	if (!p)
		die(&e);
	return p;
}

/* n elements of dtype dt, uniform in [-scale, scale) (scale < 0: in
 * [0, -scale)), from a host generator through a float32 staging buffer. */
static void fill_random(void *dst, size_t n, int dt, float scale, uint64_t seed)
{
	const size_t chunk = (size_t)1 << 22;
	float *host = malloc(chunk * sizeof *host), *stage = dalloc(chunk * sizeof *stage);
	titan_err e;
	if (!host) {
		fprintf(stderr, "bench_gpu: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i += chunk) {
		size_t m = n - i < chunk ? n - i : chunk;
		for (size_t j = 0; j < m; j++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			double u = (double)(seed >> 11) / 9007199254740992.0; /* [0, 1) */
			host[j] = scale < 0 ? -scale * (float)u : scale * (float)(2 * u - 1);
		}
		if (gpu_upload(stage, host, m * sizeof *host, &e))
			die(&e);
		ok(launch_cast((char *)dst + i * gpu_dtype_size(dt), dt, stage, GPU_F32, (int64_t)m,
			       NULL),
		   "cast");
	}
	if (gpu_sync(&e))
		die(&e);
	free(host);
	gpu_free(stage);
}

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* Median milliseconds of `runs` timed calls of fn(ctx) after `warm` untimed. */
typedef void (*bench_fn)(void *ctx);
static float time_ms(bench_fn fn, void *ctx, int warm, int runs)
{
	titan_err e;
	gpu_timer *t = gpu_timer_create(&e);
	if (!t)
		die(&e);
	float ms[64];
	if (runs > 64)
		runs = 64;
	for (int i = 0; i < warm; i++)
		fn(ctx);
	for (int i = 0; i < runs; i++) {
		if (gpu_timer_start(t, NULL, &e))
			die(&e);
		fn(ctx);
		if (gpu_timer_stop(t, NULL, &e) || gpu_timer_ms(t, &ms[i], &e))
			die(&e);
	}
	gpu_timer_free(t);
	qsort(ms, (size_t)runs, sizeof ms[0], cmp_f);
	return ms[runs / 2];
}

static void result(const char *section, const char *name, double value, const char *unit)
{
	printf("result %s %s %.4g %s\n", section, name, value, unit);
	fflush(stdout);
}

/* --- ceilings --- */

typedef struct copy_ctx {
	void *dst, *src;
	size_t bytes;
} copy_ctx;

static void run_copy(void *p)
{
	copy_ctx *c = p;
	titan_err e;
	if (gpu_copy_async(c->dst, c->src, c->bytes, NULL, &e))
		die(&e);
}

typedef struct gemm_ctx {
	gpu_gemm *g;
	gpu_gemm_args a;
} gemm_ctx;

static void run_gemm(void *p)
{
	gemm_ctx *c = p;
	titan_err e;
	if (gpu_gemm_run(c->g, NULL, &c->a, &e))
		die(&e);
}

static gpu_gemm *gemm_handle(void)
{
	titan_err e;
	void *ws = dalloc(GPU_GEMM_WORKSPACE);
	gpu_gemm *g = gpu_gemm_create(ws, GPU_GEMM_WORKSPACE, &e);
	if (!g)
		die(&e);
	return g;
}

/* The bf16 product ceiling: the best of a few large squares. */
static double gemm_ceiling(gpu_gemm *g)
{
	const int64_t n = 8192;
	void *a = dalloc((size_t)(n * n) * 2), *b = dalloc((size_t)(n * n) * 2);
	void *d = dalloc((size_t)(n * n) * 2);
	fill_random(a, (size_t)(n * n), GPU_BF16, 1, 1);
	fill_random(b, (size_t)(n * n), GPU_BF16, 1, 2);
	double best = 0;
	for (int tb = 0; tb < 2; tb++) {
		gemm_ctx c = {g, {.trans_b = tb, .m = n, .n = n, .k = n, .alpha = 1, .a = a, .lda = n,
				  .b = b, .ldb = n, .ab_type = GPU_BF16, .d = d, .ldd = n,
				  .d_type = GPU_BF16}};
		float ms = time_ms(run_gemm, &c, 3, 10);
		double tf = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
		printf("  bf16 gemm 8192^3 %s: %.3f ms, %.1f TFLOP/s\n", tb ? "NT" : "NN", ms, tf);
		best = tf > best ? tf : best;
	}
	gpu_free(a), gpu_free(b), gpu_free(d);
	return best;
}

static void bench_ceiling(void)
{
	size_t bytes = (size_t)4 << 30;
	copy_ctx c = {dalloc(bytes), dalloc(bytes), bytes};
	fill_random(c.src, bytes / 4, GPU_F32, 1, 3);
	float ms = time_ms(run_copy, &c, 2, 10);
	double gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9; /* read + written */
	printf("  device copy of %zu MiB: %.3f ms, %.0f GB/s (read + write)\n", bytes >> 20, ms, gbs);
	result("ceiling", "copy_GBps", gbs, "GB/s");
	gpu_free(c.dst), gpu_free(c.src);
	gpu_gemm *g = gemm_handle();
	result("ceiling", "bf16_gemm_TFLOPs", gemm_ceiling(g), "TFLOP/s");
}

/* --- Llama 3 8B's linears --- */

static void bench_gemm(void)
{
	gpu_gemm *g = gemm_handle();
	double ceil = gemm_ceiling(g);
	const int64_t tok = 8192; /* local batch 1 at seq 8192 */
	const struct {
		const char *name;
		int64_t out, in;
	} lin[] = {{"wq", 4096, 4096},   {"wk", 1024, 4096},   {"wo", 4096, 4096},
		   {"w1", 14336, 4096},  {"w2", 4096, 14336},  {"output", 128256, 4096}};
	int64_t most = 128256 * 4096;
	void *x = dalloc((size_t)(tok * 14336) * 2), *w = dalloc((size_t)most * 2);
	void *y = dalloc((size_t)tok * 128256 * 2), *gw = dalloc((size_t)most * 4);
	fill_random(x, (size_t)(tok * 14336), GPU_BF16, 1, 4);
	fill_random(w, (size_t)most, GPU_BF16, 0.02f, 5);
	fill_random(y, (size_t)tok * 128256, GPU_BF16, 1, 6);
	fill_random(gw, (size_t)most, GPU_F32, 0.01f, 7);
	double flops_all = 0, ms_all = 0;
	printf("  %-8s %-6s %6s %6s %6s %9s %9s %7s\n", "linear", "pass", "m", "n", "k", "ms",
	       "TFLOP/s", "of ceil");
	for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
		int64_t o = lin[i].out, in = lin[i].in;
		/* y = x W^T; dx = dy W; dW += dy^T x (float32 accumulate) */
		gpu_gemm_args pass[3] = {
			{.trans_b = 1, .m = tok, .n = o, .k = in, .alpha = 1, .a = x, .lda = in, .b = w,
			 .ldb = in, .ab_type = GPU_BF16, .d = y, .ldd = o, .d_type = GPU_BF16},
			{.m = tok, .n = in, .k = o, .alpha = 1, .a = y, .lda = o, .b = w, .ldb = in,
			 .ab_type = GPU_BF16, .d = x, .ldd = in, .d_type = GPU_BF16},
			{.trans_a = 1, .m = o, .n = in, .k = tok, .alpha = 1, .beta = 1, .a = y, .lda = o,
			 .b = x, .ldb = in, .ab_type = GPU_BF16, .c = gw, .d = gw, .ldd = in,
			 .d_type = GPU_F32},
		};
		const char *pname[3] = {"fwd", "dgrad", "wgrad"};
		for (int p = 0; p < 3; p++) {
			gemm_ctx c = {g, pass[p]};
			float ms = time_ms(run_gemm, &c, 2, 7);
			double fl = 2.0 * (double)pass[p].m * (double)pass[p].n * (double)pass[p].k;
			double tf = fl / (ms * 1e-3) / 1e12;
			flops_all += fl, ms_all += ms;
			printf("  %-8s %-6s %6lld %6lld %6lld %9.3f %9.1f %6.0f%%\n", lin[i].name, pname[p],
			       (long long)pass[p].m, (long long)pass[p].n, (long long)pass[p].k, ms, tf,
			       100 * tf / ceil);
			char name[64];
			snprintf(name, sizeof name, "%s_%s_TFLOPs", lin[i].name, pname[p]);
			result("gemm", name, tf, "TFLOP/s");
		}
	}
	double avg = flops_all / (ms_all * 1e-3) / 1e12;
	printf("  all 8B linears: %.1f TFLOP/s, %.0f%% of the measured ceiling %.1f\n", avg,
	       100 * avg / ceil, ceil);
	result("gemm", "8B_linears_TFLOPs", avg, "TFLOP/s");
	result("gemm", "8B_linears_of_ceiling", 100 * avg / ceil, "%");
	gpu_free(x), gpu_free(w), gpu_free(y), gpu_free(gw);
}

/* --- float8: Llama 3 8B's forward linears, bf16 against the scaled float8
 * GEMM (e4m3 operands, bf16 out) with one scale each (tensorwise) and one per
 * row (rowwise: cuBLASLt's outer-vector scales) --- */

typedef struct gemm8_ctx {
	gpu_gemm *g;
	gpu_gemm_f8_args a;
} gemm8_ctx;

static void run_gemm8(void *p)
{
	gemm8_ctx *c = p;
	titan_err e;
	if (gpu_gemm_f8_run(c->g, NULL, &c->a, &e))
		die(&e);
}

static void bench_gemm8(void)
{
	gpu_gemm *g = gemm_handle();
	const int64_t tok = 8192;
	const struct {
		const char *name;
		int64_t out, in;
	} lin[] = {{"wq", 4096, 4096}, {"wk", 1024, 4096}, {"w1", 14336, 4096}, {"w2", 4096, 14336},
		   {"output", 128256, 4096}};
	int64_t most = 128256 * 4096;
	void *x = dalloc((size_t)(tok * 14336) * 2), *w = dalloc((size_t)most * 2);
	void *y = dalloc((size_t)tok * 128256 * 2);
	void *x8 = dalloc((size_t)(tok * 14336)), *w8 = dalloc((size_t)most);
	float *sx = dalloc((size_t)tok * 4), *sw = dalloc((size_t)128256 * 4);
	fill_random(x, (size_t)(tok * 14336), GPU_BF16, 1, 4);
	fill_random(w, (size_t)most, GPU_BF16, 0.02f, 5);
	/* the float8 operands: x and w cast row-wise (their first scales serve tensorwise) */
	if (launch_f8_cast(x8, GPU_E4M3, sx, x, GPU_BF16, tok, 14336, GPU_F8_ROWS, 1, 0, NULL, NULL) ||
	    launch_f8_cast(w8, GPU_E4M3, sw, w, GPU_BF16, 128256, 4096, GPU_F8_ROWS, 1, 0, NULL, NULL) ||
	    launch_f8_recip(sx, sx, tok, NULL) || launch_f8_recip(sw, sw, 128256, NULL))
		die(&(titan_err){.msg = "float8 operands: a launch failed"});
	printf("  %-8s %6s %6s %6s %9s %9s %9s %7s %7s\n", "linear", "m", "n", "k", "bf16", "fp8-t",
	       "fp8-r", "t/bf16", "r/bf16");
	double fl_all = 0, ms_b = 0, ms_t = 0, ms_r = 0;
	for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
		int64_t o = lin[i].out, in = lin[i].in;
		gemm_ctx cb = {g, {.trans_b = 1, .m = tok, .n = o, .k = in, .alpha = 1, .a = x, .lda = in,
				   .b = w, .ldb = in, .ab_type = GPU_BF16, .d = y, .ldd = o,
				   .d_type = GPU_BF16}};
		gemm8_ctx ct = {g, {.m = tok, .n = o, .k = in, .a = x8, .a_type = GPU_E4M3, .b = w8,
				    .b_type = GPU_E4M3, .sa = sx, .sb = sw, .d = y, .d_type = GPU_BF16}};
		gemm8_ctx cr = ct;
		cr.a.a_rows = cr.a.b_rows = 1;
		double fl = 2.0 * (double)tok * (double)o * (double)in;
		float mb = time_ms(run_gemm, &cb, 2, 7), mt = time_ms(run_gemm8, &ct, 2, 7);
		float mr = time_ms(run_gemm8, &cr, 2, 7);
		double tb = fl / (mb * 1e-3) / 1e12, tt = fl / (mt * 1e-3) / 1e12;
		double tr = fl / (mr * 1e-3) / 1e12;
		fl_all += fl, ms_b += mb, ms_t += mt, ms_r += mr;
		printf("  %-8s %6lld %6lld %6lld %9.1f %9.1f %9.1f %6.2fx %6.2fx  TFLOP/s\n",
		       lin[i].name, (long long)tok, (long long)o, (long long)in, tb, tt, tr, tt / tb,
		       tr / tb);
		char name[64];
		snprintf(name, sizeof name, "%s_bf16_TFLOPs", lin[i].name);
		result("gemm8", name, tb, "TFLOP/s");
		snprintf(name, sizeof name, "%s_fp8_tensorwise_TFLOPs", lin[i].name);
		result("gemm8", name, tt, "TFLOP/s");
		snprintf(name, sizeof name, "%s_fp8_rowwise_TFLOPs", lin[i].name);
		result("gemm8", name, tr, "TFLOP/s");
	}
	printf("  all: bf16 %.1f, fp8 tensorwise %.1f (%.2fx), rowwise %.1f (%.2fx) TFLOP/s\n",
	       fl_all / (ms_b * 1e-3) / 1e12, fl_all / (ms_t * 1e-3) / 1e12, ms_b / ms_t,
	       fl_all / (ms_r * 1e-3) / 1e12, ms_b / ms_r);
	result("gemm8", "tensorwise_over_bf16", ms_b / ms_t, "x");
	result("gemm8", "rowwise_over_bf16", ms_b / ms_r, "x");
	gpu_free(x), gpu_free(w), gpu_free(y), gpu_free(x8), gpu_free(w8), gpu_free(sx), gpu_free(sw);
}

/* --- attention --- */

typedef struct att_ctx {
	gpu_attn *cudnn; /* NULL: titan's kernels */
	gpu_att a;
	void *q, *k, *v, *o, *dq, *dk, *dv, *dout, *ws;
	float *lse;
	size_t ws_bytes;
	int bwd;
} att_ctx;

static void run_att(void *p)
{
	att_ctx *c = p;
	titan_err e;
	gpu_att *a = &c->a;
	if (c->cudnn && !c->bwd &&
	    gpu_attn_fwd(c->cudnn, NULL, c->o, c->lse, c->q, c->k, c->v, a->b, a->tq, a->h, a->hkv,
			 a->hd, 0, c->ws, c->ws_bytes, &e))
		die(&e);
	if (c->cudnn && c->bwd &&
	    gpu_attn_bwd(c->cudnn, NULL, c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o, c->lse,
			 a->b, a->tq, a->h, a->hkv, a->hd, 0, c->ws, c->ws_bytes, &e))
		die(&e);
	if (!c->cudnn && !c->bwd)
		ok(launch_attention_fwd(c->o, c->lse, c->q, c->k, c->v, GPU_BF16, a, NULL), "attn fwd");
	if (!c->cudnn && c->bwd)
		ok(launch_attention_bwd(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o, c->lse,
					GPU_BF16, a, c->ws, NULL),
		   "attn bwd");
}

/* c's tensors for its call c->a (hdv 0: hd), random bf16; and their release. */
static void att_alloc(att_ctx *c)
{
	const gpu_att *a = &c->a;
	int64_t hdv = a->hdv ? a->hdv : a->hd;
	size_t nq = (size_t)(a->b * a->tq * a->h * a->hd), nk = (size_t)(a->b * a->tk * a->hkv * a->hd);
	size_t nv = (size_t)(a->b * a->tk * a->hkv * hdv), no = (size_t)(a->b * a->tq * a->h * hdv);
	c->q = dalloc(nq * 2), c->k = dalloc(nk * 2), c->v = dalloc(nv * 2), c->o = dalloc(no * 2);
	c->dq = dalloc(nq * 2), c->dk = dalloc(nk * 2), c->dv = dalloc(nv * 2);
	c->dout = dalloc(no * 2), c->lse = dalloc((size_t)(a->b * a->h * a->tq) * 4);
	fill_random(c->q, nq, GPU_BF16, 1, 8), fill_random(c->k, nk, GPU_BF16, 1, 9);
	fill_random(c->v, nv, GPU_BF16, 1, 10), fill_random(c->dout, no, GPU_BF16, 1, 11);
}

static void att_release(att_ctx *c)
{
	gpu_free(c->q), gpu_free(c->k), gpu_free(c->v), gpu_free(c->o), gpu_free(c->dq);
	gpu_free(c->dk), gpu_free(c->dv), gpu_free(c->dout), gpu_free(c->lse);
}

static void bench_attention(void)
{
	titan_err e;
	gpu_attn *cudnn = gpu_attn_create(&e);
	if (!cudnn)
		printf("  cuDNN: %s\n", e.msg);
	else
		printf("  cuDNN %ld\n", gpu_attn_cudnn_version());
	const struct {
		const char *name;
		gpu_att a;
	} shapes[] = {
		{"8B", {.b = 1, .tq = 8192, .tk = 8192, .h = 32, .hkv = 8, .hd = 128, .causal = 1}},
		{"1B", {.b = 1, .tq = 8192, .tk = 8192, .h = 32, .hkv = 8, .hd = 64, .causal = 1}},
	};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		gpu_att a = shapes[s].a;
		att_ctx c = {.a = a};
		att_alloc(&c);
		/* causal: half the score matrix; forward 2 products, backward 5 */
		double fwd_flops = 2.0 * 2 * (double)a.b * a.h * a.tq * a.tk * a.hd / 2;
		for (int path = 0; path < 2; path++) {
			if (path == 0 && !cudnn)
				continue;
			c.cudnn = path == 0 ? cudnn : NULL;
			c.ws_bytes = attention_bwd_scratch_bytes(&a);
			if (path == 0 && gpu_attn_prepare(cudnn, a.b, a.tq, a.h, a.hkv, a.hd, &c.ws_bytes,
							  &e)) {
				printf("  cuDNN %s: %s\n", shapes[s].name, e.msg);
				continue;
			}
			c.ws = dalloc(c.ws_bytes ? c.ws_bytes : 256);
			const char *pn = path == 0 ? "cudnn" : "titan";
			int runs = path == 0 ? 10 : 3;
			for (c.bwd = 0; c.bwd < 2; c.bwd++) {
				float ms = time_ms(run_att, &c, 1, runs);
				double tf = fwd_flops * (c.bwd ? 2.5 : 1.0) / (ms * 1e-3) / 1e12;
				printf("  %s attention %s %s (b=%lld t=%lld h=%lld hkv=%lld hd=%lld): "
				       "%.3f ms, %.1f TFLOP/s\n",
				       pn, shapes[s].name, c.bwd ? "bwd" : "fwd", (long long)a.b,
				       (long long)a.tq, (long long)a.h, (long long)a.hkv, (long long)a.hd,
				       ms, tf);
				char name[64];
				snprintf(name, sizeof name, "%s_%s_%s_TFLOPs", pn, shapes[s].name,
					 c.bwd ? "bwd" : "fwd");
				result("attention", name, tf, "TFLOP/s");
			}
			gpu_free(c.ws);
		}
		att_release(&c);
	}
	gpu_attn_free(cudnn);
}

/* The families' variants on titan's kernels (cuDNN's graph takes none of them):
 * GPT-OSS 20B's sliding layers (window 128, sinks: forward, backward with the
 * sinks' gradient), DeepSeek V3 16B's MLA heads (192 / 128), Llama 4's chunked
 * layers at a chunk of 2048.  FLOPs count the (query, key) pairs the masks
 * keep: 2 (hd + hdv) per pair forward, 2.5 times that backward. */
static void bench_attention_variants(void)
{
	const struct {
		const char *name;
		gpu_att a;
		int sinks;
	} shapes[] = {
		{"gptoss_window128", {.b = 1, .tq = 8192, .tk = 8192, .h = 64, .hkv = 8, .hd = 64,
				      .hdv = 64, .causal = 1, .window = 128}, 1},
		{"mla_16B", {.b = 1, .tq = 4096, .tk = 4096, .h = 16, .hkv = 16, .hd = 192,
			     .hdv = 128, .causal = 1}, 0},
		{"llama4_chunk2048", {.b = 1, .tq = 8192, .tk = 8192, .h = 40, .hkv = 8, .hd = 128,
				      .hdv = 128, .causal = 1, .chunk = 2048}, 0},
	};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		gpu_att a = shapes[s].a;
		att_ctx c = {.a = a};
		att_alloc(&c);
		float *sinks = NULL, *dsinks = NULL;
		if (shapes[s].sinks) {
			sinks = dalloc((size_t)a.h * 4), dsinks = dalloc((size_t)a.h * 4);
			fill_random(sinks, (size_t)a.h, GPU_F32, 1, 12);
			fill_random(dsinks, (size_t)a.h, GPU_F32, 1, 13);
			c.a.sinks = sinks, c.a.dsinks = dsinks;
		}
		double pairs = 0;
		for (int64_t i = 0; i < a.tq; i++) {
			int64_t j0, j1;
			att_keys(&a, 0, i, &j0, &j1); /* no documents: every row alike */
			pairs += (double)(j1 - j0);
		}
		double fwd_flops = 2.0 * (double)(a.b * a.h) * pairs * (double)(a.hd + a.hdv);
		c.ws_bytes = attention_bwd_scratch_bytes(&a);
		c.ws = dalloc(c.ws_bytes);
		for (c.bwd = 0; c.bwd < 2; c.bwd++) {
			float ms = time_ms(run_att, &c, 1, 3);
			double tf = fwd_flops * (c.bwd ? 2.5 : 1.0) / (ms * 1e-3) / 1e12;
			printf("  titan attention %s %s (b=%lld t=%lld h=%lld hkv=%lld hd=%lld hdv=%lld "
			       "window=%lld chunk=%lld%s): %.3f ms, %.1f TFLOP/s\n",
			       shapes[s].name, c.bwd ? "bwd" : "fwd", (long long)a.b, (long long)a.tq,
			       (long long)a.h, (long long)a.hkv, (long long)a.hd, (long long)a.hdv,
			       (long long)a.window, (long long)a.chunk, sinks ? " sinks" : "", ms, tf);
			char name[64];
			snprintf(name, sizeof name, "%s_%s_ms", shapes[s].name, c.bwd ? "bwd" : "fwd");
			result("attention-variants", name, ms, "ms");
			snprintf(name, sizeof name, "%s_%s_TFLOPs", shapes[s].name, c.bwd ? "bwd" : "fwd");
			result("attention-variants", name, tf, "TFLOP/s");
		}
		gpu_free(c.ws);
		att_release(&c);
		if (sinks)
			gpu_free(sinks), gpu_free(dsinks);
	}
}

/* --- memory-bound kernels, on an 8B layer's tensors (8192 tokens) --- */

typedef struct kern_ctx {
	int which;
	int64_t tok, dim, ffn, vocab, ce_rows;
	float *x32, *dx32, *w32, *dw32, *rstd, *cs, *rows, *p, *g, *m, *v, *dtab;
	void *y16, *a16, *g16, *h16, *da16, *dg16, *q16, *logits16;
	int32_t *ids;
	void *scratch;
	size_t scratch_bytes;
} kern_ctx;

enum { K_RMS_FWD, K_RMS_BWD, K_SWIGLU_FWD, K_SWIGLU_BWD, K_ROPE, K_CE, K_ADAMW, K_EMB_BWD, K_N };

static void run_kern(void *p)
{
	kern_ctx *k = p;
	int64_t n = k->tok, d = k->dim, f = k->ffn;
	switch (k->which) {
	case K_RMS_FWD: /* y bf16 = norm(x float32): the residual stream under autocast */
		ok(launch_rmsnorm_fwd(k->y16, GPU_BF16, k->rstd, NULL, GPU_F32, k->x32, GPU_F32, NULL,
				      GPU_F32, k->w32, GPU_F32, n, d, 1e-5f, NULL),
		   "rmsnorm");
		break;
	case K_RMS_BWD:
		ok(launch_rmsnorm_bwd(k->dx32, GPU_F32, k->dw32, GPU_F32, k->y16, GPU_BF16, NULL, k->x32,
				      GPU_F32, k->w32, GPU_F32, k->rstd, n, d, k->scratch, NULL),
		   "rmsnorm bwd");
		break;
	case K_SWIGLU_FWD:
		ok(launch_swiglu_fwd(k->h16, GPU_BF16, k->a16, k->g16, GPU_BF16, n * f, NULL), "swiglu");
		break;
	case K_SWIGLU_BWD:
		ok(launch_swiglu_bwd(k->da16, k->dg16, GPU_BF16, k->h16, GPU_BF16, k->a16, k->g16,
				     GPU_BF16, n * f, NULL),
		   "swiglu bwd");
		break;
	case K_ROPE: /* q (1, 8192, 32, 128) */
		ok(launch_rope(k->q16, GPU_BF16, k->cs, 1, n, 32, 128, 0, GPU_ROPE_INTERLEAVED, NULL),
		   "rope");
		break;
	case K_CE: /* a chunk of bf16 logits, loss and gradient */
		ok(launch_cross_entropy(k->logits16, GPU_BF16, k->ids, k->ce_rows, k->vocab, -100,
					1e-4f, NULL, k->rows, NULL),
		   "cross entropy");
		break;
	case K_ADAMW: /* tok * ffn float32 parameters */
		ok(launch_adamw(k->p, k->g, k->m, k->v, GPU_F32, n * f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
				0.5f, 0.5f, NULL),
		   "adamw");
		break;
	case K_EMB_BWD:
		ok(launch_embedding_bwd(k->dtab, GPU_F32, k->y16, GPU_BF16, k->ids, n, d, 0, k->vocab,
					k->scratch, k->scratch_bytes, NULL),
		   "embedding bwd");
		break;
	}
}

static void *rnd_buf(size_t n, int dt, float scale, uint64_t seed)
{
	void *p = dalloc(n * gpu_dtype_size(dt));
	fill_random(p, n, dt, scale, seed);
	return p;
}

static void bench_kernels(double copy_gbs)
{
	kern_ctx k = {.tok = 8192, .dim = 4096, .ffn = 14336, .vocab = 128256, .ce_rows = 64};
	size_t nd = (size_t)(k.tok * k.dim), nf = (size_t)(k.tok * k.ffn);
	k.x32 = rnd_buf(nd, GPU_F32, 1, 12), k.dx32 = dalloc(nd * 4);
	k.w32 = rnd_buf((size_t)k.dim, GPU_F32, 1, 13), k.dw32 = rnd_buf((size_t)k.dim, GPU_F32, 1, 14);
	k.rstd = dalloc((size_t)k.tok * 4), k.y16 = rnd_buf(nd, GPU_BF16, 1, 15);
	k.a16 = rnd_buf(nf, GPU_BF16, 4, 16), k.g16 = rnd_buf(nf, GPU_BF16, 1, 17);
	k.h16 = rnd_buf(nf, GPU_BF16, 1, 18), k.da16 = dalloc(nf * 2), k.dg16 = dalloc(nf * 2);
	k.q16 = rnd_buf(nd, GPU_BF16, 1, 19), k.cs = rnd_buf(nd / 32, GPU_F32, 1, 20);
	k.logits16 = rnd_buf((size_t)(k.ce_rows * k.vocab), GPU_BF16, 8, 21);
	k.rows = dalloc((size_t)k.ce_rows * 4);
	k.p = rnd_buf(nf, GPU_F32, 1, 22), k.g = rnd_buf(nf, GPU_F32, 0.01f, 23);
	k.m = rnd_buf(nf, GPU_F32, 0.01f, 24), k.v = rnd_buf(nf, GPU_F32, -1e-4f, 25);
	k.dtab = rnd_buf((size_t)(k.vocab * k.dim), GPU_F32, 0.01f, 26);
	int32_t *ids = malloc((size_t)k.tok * 4);
	titan_err e;
	if (!ids) {
		fprintf(stderr, "bench_gpu: out of memory\n");
		exit(1);
	}
	for (int64_t i = 0; i < k.tok; i++) /* distinct ids: every row its own table row */
		ids[i] = (int32_t)(((uint64_t)i * 2654435761u) % (uint64_t)k.vocab);
	k.ids = dalloc((size_t)k.tok * 4);
	if (gpu_upload(k.ids, ids, (size_t)k.tok * 4, &e))
		die(&e);
	free(ids);
	size_t emb_bytes = 0;
	ok(embedding_bwd_scratch_bytes(k.tok, k.vocab, &emb_bytes), "embedding scratch");
	size_t rms_bytes = rmsnorm_bwd_scratch_bytes(k.tok, k.dim);
	k.scratch_bytes = emb_bytes > rms_bytes ? emb_bytes : rms_bytes;
	k.scratch = dalloc(k.scratch_bytes);
	/* each input read once, each output written once */
	const struct {
		const char *name;
		double bytes;
	} ks[K_N] = {
		[K_RMS_FWD] = {"rmsnorm_fwd", nd * (4.0 + 2)},
		[K_RMS_BWD] = {"rmsnorm_bwd", nd * (2.0 + 4 + 4)},
		[K_SWIGLU_FWD] = {"swiglu_fwd", nf * 2.0 * 3},
		[K_SWIGLU_BWD] = {"swiglu_bwd", nf * 2.0 * 5},
		[K_ROPE] = {"rope", nd * 2.0 * 2},
		[K_CE] = {"cross_entropy", (double)k.ce_rows * k.vocab * 2.0 * 2},
		[K_ADAMW] = {"adamw", nf * 4.0 * 7},
		[K_EMB_BWD] = {"embedding_bwd", nd * (2.0 + 4 + 4)},
	};
	for (int i = 0; i < K_N; i++) {
		k.which = i;
		float ms = time_ms(run_kern, &k, 2, 10);
		double gbs = ks[i].bytes / (ms * 1e-3) / 1e9;
		printf("  %-14s %8.3f ms %7.0f GB/s (%3.0f%% of copy)\n", ks[i].name, ms, gbs,
		       copy_gbs > 0 ? 100 * gbs / copy_gbs : 0);
		char name[64];
		snprintf(name, sizeof name, "%s_GBps", ks[i].name);
		result("kernels", name, gbs, "GB/s");
	}
	void *all[] = {k.x32, k.dx32, k.w32, k.dw32, k.rstd, k.y16, k.a16, k.g16, k.h16, k.da16,
		       k.dg16, k.q16, k.cs, k.logits16, k.rows, k.p, k.g, k.m, k.v, k.dtab, k.ids,
		       k.scratch};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		gpu_free(all[i]);
}

/* --- the model's step --- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Random parameters without the host drawing billions of numbers: one random
 * block copied along the flat buffer. */
static void random_params(backend *be, model *m)
{
	size_t n = model_num_params(m), blk = (size_t)1 << 24;
	float *src = dalloc(blk * 4);
	fill_random(src, blk, GPU_F32, 0.02f, 16);
	float *p = model_params(m);
	for (size_t i = 0; i < n; i += blk)
		be->ops->copy(be, p + i, src, (n - i < blk ? n - i : blk) * 4, BACKEND_D2D);
	titan_err e;
	if (be->ops->sync(be, &e))
		die(&e);
	gpu_free(src);
}

/* One training step, eagerly or as the replay of a captured forward and
 * backward; clip and AdamW either way. */
typedef struct step_ctx {
	backend *be;
	model *m;
	adamw *opt;
	double lr;
	const int32_t *ids, *labels;
	int b, t;
	backend_cuda_graph *g; /* NULL: eager */
	double loss;
} step_ctx;

static void one_step(step_ctx *c)
{
	titan_err e;
	int64_t nv = 1;
	double ls = 0;
	if (c->g) {
		if (backend_cuda_replay(c->be, c->g, &e))
			die(&e);
	} else {
		model_zero_grad(c->m);
		if (model_forward_backward(c->m, c->ids, c->labels, c->b, c->t,
					   1.0f / (float)(c->b * c->t), &ls, &nv, &e))
			die(&e);
	}
	grad_clip_norm(c->be, model_grads(c->m), model_num_params(c->m), 1.0);
	adamw_step(c->opt, model_params(c->m), model_grads(c->m), c->lr);
	if (c->be->ops->sync(c->be, &e))
		die(&e);
	if (!c->g)
		c->loss = ls / (double)nv;
}

/* Median wall seconds of steps steps after 2 warm-up steps. */
static double median_step(step_ctx *c, int steps)
{
	double *dt = malloc(sizeof(double) * (size_t)(steps + 2));
	if (!dt) {
		fprintf(stderr, "bench_gpu: out of memory\n");
		exit(1);
	}
	for (int i = 0; i < steps + 2; i++) {
		double t0 = now_s();
		one_step(c);
		dt[i] = now_s() - t0;
	}
	qsort(dt + 2, (size_t)steps, sizeof(double), cmp_d);
	double med = dt[2 + steps / 2];
	free(dt);
	return med;
}

/* Forward and backward of every unit, without waiting (as a capture wants). */
static void unit_pass(model *m, model_mb *mb)
{
	titan_err e;
	int units = model_num_units(m);
	for (int u = 0; u < units; u++)
		if (model_unit_fwd(m, u, mb, &e))
			die(&e);
	for (int u = units - 1; u >= 0; u--)
		if (model_unit_bwd(m, u, mb, 0, &e))
			die(&e);
}

static void model_result(const char *name, const char *what, double v, const char *unit)
{
	char key[192];
	snprintf(key, sizeof key, "%s_%s", name, what);
	result("model", key, v, unit);
}

/* recipe: NULL, or a Float8 recipe for every linear but the output (as
 * torchtitan's Llama 3 8B float8 runs filter it). */
static void bench_model(const char *flavor, int layers, int b, int t, int steps, const char *ac,
			const char *recipe)
{
	const llama_args *base = flavor_find(flavor);
	if (!base) {
		fprintf(stderr, "bench_gpu: no flavor %s\n", flavor);
		exit(2);
	}
	llama_args a = *base;
	if (layers > 0)
		a.n_layers = layers;
	titan_err e;
	backend_cuda_opts o = {.device = 0};
	backend *be = backend_cuda_create(&o, &e);
	model *m = be ? model_create(be, &a, 0, &e) : NULL;
	if (!m)
		die(&e);
	model_prec prec = {.param = BE_F32, .grad = BE_F32, .act = BE_BF16, .resid = BE_F32};
	model_ac_mode mode = strcmp(ac, "op") == 0 ? MODEL_AC_OP
			     : strcmp(ac, "full") == 0 ? MODEL_AC_FULL : MODEL_AC_NONE;
	if (model_set_prec(m, &prec, &e) || model_set_ac(m, mode, 1, &e))
		die(&e);
	const char *const keep[] = {"output"};
	model_float8 f8 = {recipe, keep, 1};
	if (recipe && model_set_float8(m, &f8, &e) < 0)
		die(&e);
	random_params(be, m);
	adamw_config cfg;
	adamw_config_default(&cfg);
	size_t n = (size_t)b * t;
	int32_t *ids = malloc(n * 4), *labels = malloc(n * 4);
	step_ctx c = {.be = be, .m = m, .opt = adamw_create(be, model_num_params(m), &cfg, &e),
		      .lr = cfg.lr, .ids = ids, .labels = labels, .b = b, .t = t};
	if (!c.opt || !ids || !labels)
		die(&e);
	uint64_t s = 17;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((s >> 33) % (uint64_t)a.vocab_size);
		labels[i] = (int32_t)((s >> 13) % (uint64_t)a.vocab_size);
	}
	printf("  %s with %d layers, %zu parameters, b=%d t=%d, bf16 activations, AC %s%s%s\n",
	       flavor, a.n_layers, model_num_params(m), b, t, ac, recipe ? ", Float8 " : "",
	       recipe ? recipe : "");
	char name[96];
	snprintf(name, sizeof name, "%s_L%d_t%d_%s%s%s", flavor, a.n_layers, t, ac,
		 recipe ? "_f8" : "", recipe ? recipe : "");
	double flops = model_flops_per_token(m, t);
	double step = median_step(&c, steps), tps = (double)n / step;
	double mfu = flops * tps / PEAK_BF16_FLOPS;
	printf("  eager step %.1f ms, %.0f tokens/s, MFU %.1f%% (of %.0f TFLOP/s), loss %.3f, "
	       "arena peak %.1f GiB, attention on %s\n",
	       1e3 * step, tps, 100 * mfu, PEAK_BF16_FLOPS / 1e12, c.loss,
	       (double)be->peak_bytes / (1 << 30), backend_cuda_attention_path(be));
	model_result(name, "tokens_per_s", tps, "tok/s");
	model_result(name, "MFU", 100 * mfu, "%");
	model_result(name, "peak_GiB", (double)be->peak_bytes / (1 << 30), "GiB");

	/* compile.enable: forward and backward captured once, replayed */
	model_mb *mb = model_mb_create(m, 0, model_head_unit(m), b, t, &e);
	if (!mb || model_mb_set_tokens(mb, ids, labels, 1, 1.0f / (float)n, NULL, &e))
		die(&e);
	unit_pass(m, mb); /* one eager pass sizes everything the capture uses */
	if (be->ops->sync(be, &e) || backend_cuda_capture_begin(be, &e))
		die(&e);
	model_zero_grad(m);
	unit_pass(m, mb);
	c.g = backend_cuda_capture_end(be, &e);
	if (!c.g) {
		printf("  graph capture failed: %s\n", e.msg);
	} else {
		double gstep = median_step(&c, steps), gtps = (double)n / gstep;
		double gmfu = flops * gtps / PEAK_BF16_FLOPS;
		printf("  graph step %.1f ms, %.0f tokens/s, MFU %.1f%% (%.2fx eager)\n", 1e3 * gstep,
		       gtps, 100 * gmfu, step / gstep);
		model_result(name, "graph_tokens_per_s", gtps, "tok/s");
		model_result(name, "graph_MFU", 100 * gmfu, "%");
		backend_cuda_graph_free(c.g);
	}
	model_mb_free(mb);
	adamw_free(c.opt);
	model_free(m);
	backend_free(be);
	free(ids), free(labels);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_gpu ceiling|gemm|gemm8|attention|attention-variants|"
				"kernels [COPY_GBPS]|model "
				"FLAVOR LAYERS B T STEPS AC [FLOAT8_RECIPE]\n");
		return 2;
	}
	if (gpu_count() == 0) {
		printf("bench_gpu: skipped: %s\n", gpu_why_none());
		return 0;
	}
	gpu_info info;
	titan_err e;
	if (gpu_device_info(0, &info, &e))
		die(&e);
	printf("bench_gpu %s on %s (sm_%d%d, %d SMs, %.0f GiB)\n", argv[1], info.name, info.major,
	       info.minor, info.sm_count, (double)info.mem_bytes / (1 << 30));
	if (strcmp(argv[1], "ceiling") == 0)
		bench_ceiling();
	else if (strcmp(argv[1], "gemm") == 0)
		bench_gemm();
	else if (strcmp(argv[1], "gemm8") == 0)
		bench_gemm8();
	else if (strcmp(argv[1], "attention") == 0)
		bench_attention();
	else if (strcmp(argv[1], "attention-variants") == 0)
		bench_attention_variants();
	else if (strcmp(argv[1], "kernels") == 0)
		bench_kernels(argc > 2 ? atof(argv[2]) : 0);
	else if (strcmp(argv[1], "model") == 0 && (argc == 8 || argc == 9))
		bench_model(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
			    argv[7], argc == 9 ? argv[8] : NULL);
	else {
		fprintf(stderr, "bench_gpu: unknown section %s\n", argv[1]);
		return 2;
	}
	return 0;
}
