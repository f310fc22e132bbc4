/* Causal GQA attention on the GPU, both paths, against the CPU backend's float64
 * attention: titan's reference kernels (launch_attention_*, float32 and bf16,
 * any t, head dims 8 to 128 and MLA's 192/128, sliding windows, chunks,
 * documents, sinks and their gradient) and cuDNN's fused flash attention (attn.h, bf16,
 * t a multiple of 128).  The backward is fed the forward's float64 output and
 * lse rounded to the device's types, so each direction is measured on its own.
 * Method and bounds: gpu_test.h; cuDNN rounds the probabilities to bf16 before
 * the second product (as flash attention does), hence TOL_BF16_CHAIN for its
 * outputs.  Without a GPU every test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu_kernels.h"
#include "gpu/attn.h"
#include "gpu_test.h"

#define TOL_LSE_CUDNN 1e-3 /* cuDNN's softmax statistics (its own exp) */
/* cuDNN's backward multiplies bf16-rounded P and dS: two roundings deep */
#define TOL_CUDNN_BWD 4e-2

/* One direction pair on one path (0 = reference kernels, 1 = cuDNN), on the
 * attention call a (element types: dt for every tensor; hdv 0 means hd).  With
 * sinks, random per-head sinks of magnitude up to `sinks` join the softmax,
 * and dsinks (random to start with: the op accumulates) is checked too.  doc
 * (b, a.doc_t) on the host, or NULL: the documents, copied to the device. */
static void check_attention_docs(gpu_att a, int dt, int path, gpu_attn *cudnn, double sinks,
				 const int32_t *doc)
{
	if (a.b * a.tq * a.tk * a.h > 40000 && tsan_leaves("b tq tk h over 40000"))
		return;
	int64_t b = a.b, tq = a.tq, tk = a.tk, h = a.h, hkv = a.hkv, hd = a.hd;
	int64_t hdv = a.hdv ? a.hdv : hd;
	size_t nq = (size_t)(b * tq * h * hd), nk = (size_t)(b * tk * hkv * hd);
	size_t nv = (size_t)(b * tk * hkv * hdv), no = (size_t)(b * tq * h * hdv);
	size_t nl = (size_t)(b * h * tq);
	double *q = rnd(nq, 1.0), *k = rnd(nk, 1.0), *v = rnd(nv, 1.0), *dout = rnd(no, 1.0);
	double *sk = sinks ? rnd((size_t)h, sinks) : NULL;
	double *dsk = sinks ? rnd((size_t)h, 0.01) : NULL; /* small: the sum must show */
	void *dq_in = dev_from(q, nq, dt), *dk_in = dev_from(k, nk, dt);
	void *dv_in = dev_from(v, nv, dt), *ddout = dev_from(dout, no, dt);
	float *dev_sk = sinks ? dev_from(sk, (size_t)h, GPU_F32) : NULL; /* sk rounded to float */
	float *dev_dsk = sinks ? dev_from(dsk, (size_t)h, GPU_F32) : NULL;
	a.sinks = dev_sk;
	int32_t *dev_doc = NULL;
	if (doc) {
		titan_err de;
		size_t bytes = sizeof(int32_t) * (size_t)(b * a.doc_t);
		dev_doc = dev_alloc(bytes);
		if (gpu_upload(dev_doc, doc, bytes, &de))
			fail_msg("%s", de.msg);
	}
	a.doc = dev_doc;
	be_attn ba = {.b = b, .tq = tq, .tk = tk, .h = h, .hkv = hkv, .hd = hd, .hdv = hdv,
		      .scale = a.scale, .causal = a.causal, .q_pos0 = a.q_pos0, .k_pos0 = a.k_pos0,
		      .window = a.window, .chunk = a.chunk, .sinks = sk, /* _f64: double sinks */
		      .doc = doc, .doc_t = a.doc_t};
	double *out = zeros(no), *lse = zeros(nl);
	cpu_attention_fwd_f64(out, lse, q, k, v, &ba);
	print_message(" %s b=%lld tq=%lld tk=%lld h=%lld hkv=%lld hd=%lld hdv=%lld%s q@%lld k@%lld"
		      " window %lld chunk %lld%s%s\n",
		      path ? "cuDNN" : "reference", (long long)b, (long long)tq, (long long)tk,
		      (long long)h, (long long)hkv, (long long)hd, (long long)hdv,
		      a.causal ? " causal" : "", (long long)a.q_pos0, (long long)a.k_pos0,
		      (long long)a.window, (long long)a.chunk, sinks ? " sinks" : "",
		      doc ? " documents" : "");

	void *dout_gpu = dev_poisoned(no, dt);
	float *dlse = dev_poisoned(nl, GPU_F32);
	titan_err e;
	size_t scratch_bytes = attention_bwd_scratch_bytes(&a);
	if (path == 1 && gpu_attn_prepare(cudnn, b, tq, h, hkv, hd, &scratch_bytes, &e))
		fail_msg("%s", e.msg);
	void *scratch = dev_alloc(scratch_bytes ? scratch_bytes : 256);
	/* NaN everywhere: cuDNN's dq accumulator must be zeroed by gpu_attn_bwd,
	 * not found zero in fresh memory */
	if (gpu_memset(scratch, 0xff, scratch_bytes ? scratch_bytes : 256, &e) != 0)
		fail_msg("%s", e.msg);
	if (path == 0)
		gpu_ok(launch_attention_fwd(dout_gpu, dlse, dq_in, dk_in, dv_in, dt, &a, NULL),
		       "attention_fwd");
	else if (gpu_attn_fwd(cudnn, NULL, dout_gpu, dlse, dq_in, dk_in, dv_in, b, tq, h, hkv, hd,
			      a.scale, scratch, scratch_bytes, &e))
		fail_msg("%s", e.msg);
	double tol_out = path ? TOL_BF16_CHAIN : dt == GPU_BF16 ? TOL_BF16 : TOL_F32;
	expect_close("attention out", dout_gpu, out, no, dt, tol_out);
	/* lse: -inf where a query sees no key (and there is no sink), on both sides */
	double *got_lse = host_of(dlse, nl, GPU_F32);
	for (size_t i = 0; i < nl; i++)
		if (isinf(lse[i]) || isinf(got_lse[i])) {
			if (!(isinf(lse[i]) && isinf(got_lse[i]) && got_lse[i] < 0))
				fail_msg("lse[%zu] = %g, want %g", i, got_lse[i], lse[i]);
			got_lse[i] = lse[i] = 0;
		}
	double err = rel_err(got_lse, lse, nl), tol_lse = path ? TOL_LSE_CUDNN : TOL_F32;
	print_message("  %-44s f32  rel err %.2e (bound %.1e)\n", "attention lse", err, tol_lse);
	if (!(err <= tol_lse))
		fail_msg("attention lse: relative error %.3e over %.1e", err, tol_lse);
	cpu_attention_fwd_f64(out, lse, q, k, v, &ba); /* lse again, -inf kept */

	/* backward from the float64 forward's out and lse, as stored */
	void *dout_ref = dev_from(out, no, dt);
	void *dlse_ref = dev_from(lse, nl, GPU_F32);
	void *dgq = dev_poisoned(nq, dt), *dgk = dev_poisoned(nk, dt), *dgv = dev_poisoned(nv, dt);
	a.dsinks = dev_dsk;
	if (path == 0)
		gpu_ok(launch_attention_bwd(dgq, dgk, dgv, ddout, dq_in, dk_in, dv_in, dout_ref,
					    dlse_ref, dt, &a, scratch, NULL),
		       "attention_bwd");
	else if (gpu_attn_bwd(cudnn, NULL, dgq, dgk, dgv, ddout, dq_in, dk_in, dv_in, dout_ref,
			      dlse_ref, b, tq, h, hkv, hd, a.scale, scratch, scratch_bytes, &e))
		fail_msg("%s", e.msg);
	double *gq = zeros(nq), *gk = zeros(nk), *gv = zeros(nv);
	ba.dsinks = dsk;
	cpu_attention_bwd_f64(gq, gk, gv, dout, q, k, v, out, lse, &ba);
	double tol = path ? TOL_CUDNN_BWD : dt == GPU_BF16 ? TOL_BF16 : 5 * TOL_F32;
	expect_close("attention dq", dgq, gq, nq, dt, tol);
	expect_close("attention dk", dgk, gk, nk, dt, tol);
	expect_close("attention dv", dgv, gv, nv, dt, tol);
	/* float32 sums (exp in double) of the same rounded inputs, whatever dt */
	if (sinks)
		expect_close("attention dsinks (accumulated)", dev_dsk, dsk, (size_t)h, GPU_F32,
			     5 * TOL_F32);
	free(q), free(k), free(v), free(dout), free(out), free(lse), free(got_lse);
	free(gq), free(gk), free(gv), free(sk), free(dsk);
	gpu_free(dq_in), gpu_free(dk_in), gpu_free(dv_in), gpu_free(ddout), gpu_free(dout_gpu);
	gpu_free(dlse), gpu_free(scratch), gpu_free(dout_ref), gpu_free(dlse_ref), gpu_free(dgq);
	gpu_free(dgk), gpu_free(dgv);
	if (sinks)
		gpu_free(dev_sk), gpu_free(dev_dsk);
	if (doc)
		gpu_free(dev_doc);
}

static void check_attention_sinks(gpu_att a, int dt, int path, gpu_attn *cudnn, double sinks)
{
	check_attention_docs(a, dt, path, cudnn, sinks, NULL);
}

static void check_attention(gpu_att a, int dt, int path, gpu_attn *cudnn)
{
	check_attention_sinks(a, dt, path, cudnn, 0);
}

/* A causal self-attention call over t tokens. */
static gpu_att self_att(int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd)
{
	return (gpu_att){.b = b, .tq = t, .tk = t, .h = h, .hkv = hkv, .hd = hd, .causal = 1};
}

static void reference_kernels_match_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	seed(101);
	const gpu_att cases[] = {
		self_att(1, 1, 1, 1, 64),
		self_att(2, 37, 4, 2, 64),
		self_att(2, 50, 16, 16, 16), /* debugmodel's head dim */
		self_att(2, 9, 4, 4, 8),     /* the tiny CLIP of tests/textenc */
		self_att(1, 45, 6, 3, 96),
		self_att(1, 130, 8, 2, 128),
		self_att(2, 256, 4, 1, 128),
		/* context parallelism: this rank's queries after keys it holds */
		{.b = 1, .tq = 64, .tk = 128, .h = 4, .hkv = 2, .hd = 64, .causal = 1,
		 .q_pos0 = 64, .k_pos0 = 0},
		/* queries 0..15 see no key at all (out 0, lse -inf) */
		{.b = 2, .tq = 32, .tk = 64, .h = 2, .hkv = 1, .hd = 128, .causal = 1,
		 .q_pos0 = 16, .k_pos0 = 32},
		/* no mask, and a scale of its own */
		{.b = 1, .tq = 40, .tk = 72, .h = 4, .hkv = 4, .hd = 64, .scale = 0.3f},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++)
			check_attention(cases[c], dt, 0, NULL);
}

/* The families' variants on the reference kernels: GPT-OSS's sliding window
 * of 128 (keys p-127..p) with sinks, Llama 4's chunks, MLA's head dims (q, k
 * 192, v 128), and their combinations with context-parallel positions, rows
 * that see nothing, and windows and chunks that cut tiles of 32 anywhere. */
static void reference_kernels_take_the_variants(void **state)
{
	(void)state;
	need_gpu();
	seed(104);
	struct {
		gpu_att a;
		double sinks; /* 0: none */
	} cases[] = {
		/* GPT-OSS: window 128 over 300 tokens, GQA, sinks */
		{{.b = 1, .tq = 300, .tk = 300, .h = 4, .hkv = 2, .hd = 64, .causal = 1,
		  .window = 128}, 2.0},
		/* GPT-OSS's full layers: sinks alone; large sinks that dominate the rows */
		{{.b = 2, .tq = 100, .tk = 100, .h = 2, .hkv = 1, .hd = 64, .causal = 1}, 8.0},
		/* a window of 2 (itself and the one before: with 1, P = 1 and dq, dk are
		 * exactly 0, a relative error of rounding noise) and of 5 */
		{{.b = 1, .tq = 70, .tk = 70, .h = 2, .hkv = 2, .hd = 32, .causal = 1, .window = 2}, 0},
		{{.b = 1, .tq = 70, .tk = 70, .h = 2, .hkv = 1, .hd = 16, .causal = 1, .window = 5}, 0},
		/* context-parallel positions with a window: the first tiles partly seen */
		{{.b = 1, .tq = 64, .tk = 128, .h = 4, .hkv = 2, .hd = 64, .causal = 1,
		  .q_pos0 = 64, .k_pos0 = 0, .window = 40}, 1.0},
		/* queries 0..15 see no key: out 0, lse = the sink */
		{{.b = 2, .tq = 32, .tk = 64, .h = 2, .hkv = 1, .hd = 128, .causal = 1,
		  .q_pos0 = 16, .k_pos0 = 32}, 1.0},
		/* Llama 4's chunks (8192 there), unaligned with the tiles */
		{{.b = 1, .tq = 200, .tk = 200, .h = 4, .hkv = 1, .hd = 128, .causal = 1,
		  .chunk = 48}, 0},
		{{.b = 1, .tq = 60, .tk = 60, .h = 2, .hkv = 2, .hd = 96, .chunk = 24}, 0}, /* no mask */
		{{.b = 1, .tq = 90, .tk = 90, .h = 2, .hkv = 1, .hd = 64, .causal = 1, .chunk = 32,
		  .window = 20}, 0.5},
		/* DeepSeek V3's MLA: hd 192 (nope 128 + rope 64), hdv 128, its own scale */
		{{.b = 1, .tq = 150, .tk = 150, .h = 4, .hkv = 4, .hd = 192, .hdv = 128, .causal = 1,
		  .scale = 0.0883883f}, 0},
		{{.b = 2, .tq = 40, .tk = 72, .h = 2, .hkv = 2, .hd = 192, .hdv = 128, .causal = 1,
		  .q_pos0 = 32, .k_pos0 = 0}, 0},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++)
			check_attention_sinks(cases[c].a, dt, 0, NULL, cases[c].sinks);
}

/* A doc array (b, t): row bi's documents start at starts[bi][0..], a list
 * ended by -1 (0 before its first). */
static int32_t *doc_rows(int64_t b, int64_t t, const int64_t (*starts)[8])
{
	int32_t *doc = malloc(sizeof(int32_t) * (size_t)(b * t));
	assert_non_null(doc);
	for (int64_t bi = 0; bi < b; bi++)
		for (int64_t p = 0, d = 0, cur = 0; p < t; p++) {
			while (d < 8 && starts[bi][d] >= 0 && starts[bi][d] <= p)
				cur = starts[bi][d++];
			doc[bi * t + p] = (int32_t)cur;
		}
	return doc;
}

/* torchtitan's block-causal mask over packed windows on the reference
 * kernels: each batch row its own boundaries, documents of one position
 * (20, 69), boundaries on and off the tiles of 32 and the blocks' rows, with
 * a window and sinks, chunks, GQA, MLA's head dims, and context-parallel
 * blocks that index the full rows of doc (queries 60..99 against keys 20..59
 * of 120, where rows see no key from 75 and 62: out 0, lse -inf or the sink;
 * queries 80..99 against keys 0..39, which see none at all).  The dk/dv
 * kernel walks each key's queries to the end of its document. */
static void reference_kernels_mask_documents(void **state)
{
	(void)state;
	need_gpu();
	seed(105);
	static const int64_t packed[2][8] = {{0, 20, 21, 32, 45, -1}, {0, 5, 33, 64, 69, -1}};
	static const int64_t cp[2][8] = {{0, 50, 75, 76, -1}, {0, 62, 100, -1}};
	int32_t *pd = doc_rows(2, 70, packed), *cd = doc_rows(2, 120, cp);
	struct {
		gpu_att a;
		double sinks; /* 0: none */
		const int32_t *doc;
	} cases[] = {
		{{.b = 2, .tq = 70, .tk = 70, .h = 4, .hkv = 2, .hd = 32, .causal = 1, .doc_t = 70},
		 0, pd},
		{{.b = 2, .tq = 70, .tk = 70, .h = 2, .hkv = 1, .hd = 64, .causal = 1, .window = 12,
		  .doc_t = 70}, 1.0, pd},
		{{.b = 2, .tq = 70, .tk = 70, .h = 2, .hkv = 2, .hd = 16, .causal = 1, .chunk = 16,
		  .doc_t = 70}, 0, pd},
		{{.b = 2, .tq = 40, .tk = 40, .h = 2, .hkv = 2, .hd = 192, .hdv = 128, .causal = 1,
		  .scale = 0.0883883f, .doc_t = 70}, 0.5, pd},
		{{.b = 2, .tq = 40, .tk = 40, .h = 2, .hkv = 1, .hd = 64, .causal = 1, .q_pos0 = 60,
		  .k_pos0 = 20, .doc_t = 120}, 0, cd},
		{{.b = 2, .tq = 40, .tk = 40, .h = 2, .hkv = 1, .hd = 64, .causal = 1, .q_pos0 = 60,
		  .k_pos0 = 20, .doc_t = 120}, 1.0, cd},
		{{.b = 2, .tq = 20, .tk = 40, .h = 2, .hkv = 1, .hd = 32, .causal = 1, .q_pos0 = 80,
		  .k_pos0 = 0, .doc_t = 120}, 1.0, cd},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int dt = 0; dt < 2; dt++)
			check_attention_docs(cases[c].a, dt, 0, NULL, cases[c].sinks, cases[c].doc);
	free(pd), free(cd);
}

/* dk and dv add the heads of a group in a fixed order, without atomics. */
static void reference_backward_repeats_bit_for_bit(void **state)
{
	(void)state;
	need_gpu();
	seed(102);
	gpu_att c = self_att(1, 200, 8, 2, 64);
	size_t nq = (size_t)(c.b * c.tq * c.h * c.hd), nk = (size_t)(c.b * c.tk * c.hkv * c.hd);
	size_t nl = (size_t)(c.b * c.h * c.tq);
	double *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *g = rnd(nq, 1);
	void *dq = dev_from(q, nq, GPU_BF16), *dk = dev_from(k, nk, GPU_BF16);
	void *dv = dev_from(v, nk, GPU_BF16), *dg = dev_from(g, nq, GPU_BF16);
	void *out = dev_poisoned(nq, GPU_BF16);
	float *lse = dev_poisoned(nl, GPU_F32);
	void *scratch = dev_alloc(attention_bwd_scratch_bytes(&c));
	gpu_ok(launch_attention_fwd(out, lse, dq, dk, dv, GPU_BF16, &c, NULL), "attention_fwd");
	double *first[3] = {NULL, NULL, NULL};
	for (int run = 0; run < 3; run++) {
		void *gq = dev_poisoned(nq, GPU_BF16), *gk = dev_poisoned(nk, GPU_BF16);
		void *gv = dev_poisoned(nk, GPU_BF16);
		gpu_ok(launch_attention_bwd(gq, gk, gv, dg, dq, dk, dv, out, lse, GPU_BF16, &c, scratch,
					    NULL),
		       "attention_bwd");
		double *got[3] = {host_of(gq, nq, GPU_BF16), host_of(gk, nk, GPU_BF16),
				  host_of(gv, nk, GPU_BF16)};
		size_t len[3] = {nq, nk, nk};
		for (int i = 0; i < 3; i++) {
			if (!first[i]) {
				first[i] = got[i];
				continue;
			}
			assert_memory_equal(first[i], got[i], len[i] * sizeof(double));
			free(got[i]);
		}
		gpu_free(gq), gpu_free(gk), gpu_free(gv);
	}
	for (int i = 0; i < 3; i++)
		free(first[i]);
	free(q), free(k), free(v), free(g);
	gpu_free(dq), gpu_free(dk), gpu_free(dv), gpu_free(dg), gpu_free(out), gpu_free(lse);
	gpu_free(scratch);
}

/* cuDNN where this build has it: a plan that fails to build on a GPU fails
 * the test (the backend would silently lose its fast path). */
static void cudnn_flash_attention_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	titan_err e;
	gpu_attn *a = gpu_attn_create(&e);
	if (!a) {
		print_message("# SKIP cuDNN attention: %s\n", e.msg);
		skip();
	}
	print_message("cuDNN %ld\n", gpu_attn_cudnn_version());
	seed(103);
	const gpu_att cases[] = {
		self_att(1, 128, 4, 4, 64),
		self_att(2, 256, 8, 2, 128),
		self_att(1, 1024, 8, 1, 128),
		self_att(1, 384, 16, 4, 64),
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		check_attention(cases[c], GPU_BF16, 1, a);
	size_t bytes;
	assert_int_equal(gpu_attn_prepare(a, 1, 100, 4, 4, 64, &bytes, &e), -1);
	print_message("  t=100 refused: %s\n", e.msg);
	gpu_attn_free(a);
}

/* Without a device: cuDNN itself checks every descriptor of the graphs and the
 * operation graph they form (it cannot say without a GPU whether an engine
 * takes them: the test above does that). */
static void cudnn_graphs_are_well_formed(void **state)
{
	(void)state;
	if (gpu_attn_cudnn_version() == 0) {
		print_message("# SKIP cuDNN graphs: built without cuDNN\n");
		skip();
	}
	print_message("cuDNN %ld\n", gpu_attn_cudnn_version());
	const gpu_att cases[] = {self_att(1, 128, 4, 4, 64), self_att(2, 8192, 32, 8, 128),
				 self_att(1, 256, 16, 1, 64)};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int bwd = 0; bwd < 2; bwd++) {
			gpu_att a = cases[c];
			titan_err e;
			int nops = 0;
			if (gpu_attn_graph_check(bwd, a.b, a.tq, a.h, a.hkv, a.hd, &nops, &e))
				fail_msg("%s graph b=%lld t=%lld h=%lld hkv=%lld hd=%lld: %s",
					 bwd ? "backward" : "forward", (long long)a.b, (long long)a.tq,
					 (long long)a.h, (long long)a.hkv, (long long)a.hd, e.msg);
			print_message("  %s h=%lld hkv=%lld hd=%lld: %d operations\n",
				      bwd ? "backward" : "forward", (long long)a.h, (long long)a.hkv,
				      (long long)a.hd, nops);
			/* the SDPA pattern: 14 forward, 22 backward (+2 GQA reductions) */
			assert_int_equal(nops, bwd ? (a.h != a.hkv ? 24 : 22) : 14);
		}
}

/* The graphs against cudnn-frontend's SDPA graph, node by node where it
 * decides whether an engine takes them (its scaled_dot_product_flash_attention.h
 * and attention score modifiers): the causal mask's indices generated in INT32
 * math into INT32 tensors and compared into a boolean, the probabilities bmm2
 * reads in the i/o type (bf16), and the backward's dq accumulated in a
 * float32 tensor in the F16x16 layout, then written as bf16.  No GPU needed. */
static void cudnn_graphs_follow_cudnn_frontend(void **state)
{
	(void)state;
	if (gpu_attn_cudnn_version() == 0) {
		print_message("# SKIP cuDNN graphs: built without cuDNN\n");
		skip();
	}
	static char text[8192];
	titan_err e;
	static const char *const fwd_lines[] = {
		"pointwise GEN_INDEX i32 axis 2 -> i32\n",
		"pointwise GEN_INDEX i32 axis 3 -> i32\n",
		"pointwise CMP_GE bool -> bool\n",
		"pointwise BINARY_SELECT f32 -> f32\n",
		"pointwise DIV f32 -> bf16\n",
		"matmul -> bf16 uid 4\n",
		"pointwise ADD f32 -> f32 uid 5\n",
	};
	static const char *const bwd_lines[] = {
		"pointwise GEN_INDEX i32 axis 2 -> i32\n",
		"pointwise GEN_INDEX i32 axis 3 -> i32\n",
		"pointwise CMP_GE bool -> bool\n",
		"matmul -> f32 F16x16 uid 13\n",
		"pointwise IDENTITY f32 -> bf16 uid 9\n",
	};
	for (int bwd = 0; bwd < 2; bwd++) {
		if (gpu_attn_graph_describe(bwd, 2, 256, 8, 2, 128, text, sizeof text, &e) != 0)
			fail_msg("%s", e.msg);
		print_message("%s graph:\n%s", bwd ? "backward" : "forward", text);
		const char *const *want = bwd ? bwd_lines : fwd_lines;
		size_t n = bwd ? sizeof bwd_lines / sizeof *bwd_lines : sizeof fwd_lines / sizeof *fwd_lines;
		for (size_t i = 0; i < n; i++)
			if (!strstr(text, want[i]))
				fail_msg("the %s graph has no \"%.*s\" (cudnn-frontend's)",
					 bwd ? "backward" : "forward", (int)strlen(want[i]) - 1, want[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cudnn_graphs_are_well_formed),
		cmocka_unit_test(cudnn_graphs_follow_cudnn_frontend),
		cmocka_unit_test(reference_kernels_match_the_cpu),
		cmocka_unit_test(reference_kernels_take_the_variants),
		cmocka_unit_test(reference_kernels_mask_documents),
		cmocka_unit_test(reference_backward_repeats_bit_for_bit),
		cmocka_unit_test(cudnn_flash_attention_matches_the_cpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
