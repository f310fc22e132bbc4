/* The CPU dispatch (core/cpu_isa): TITAN_CPU_ISA's names and clamps, and the
 * promise that lets one machine's tests stand for every x86-64 CPU: each build
 * of the hot kernels (x86-64-v4, v3, baseline) gives the same bits for every
 * op, in float32 and bfloat16, and the two GEMM paths of each type (oneDNN;
 * OpenBLAS or the portable bf16 one) agree within the bound either meets
 * against float64.
 *
 * Every level at or below this processor's is forced in turn in this one
 * process (cpu_isa_force), a fixed workload runs through the backend's op
 * table on inputs of odd sizes (vector tails) with a printed seed, and each
 * op's output bytes are compared with the baseline build's.
 *
 * TITAN_ISA_DIGESTS=FILE also writes the baseline build's outputs as one
 * line an op ("f32 rmsnorm_fwd 1a2b3c4d 4268": type, name, CRC32C, bytes),
 * which tests/arm64/ops.sh compares across architectures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "core/bf16.h"
#include "core/cpu_isa.h"
#include "core/crc32c.h"
#include "../support/testutil.h"

/* ---- the names and the clamp ---- */

/* Each level of this architecture's ladder, the kernel build it runs and
 * whether its GEMMs go to oneDNN (core/cpu_isa.h). */
static const struct {
	cpu_level l;
	int clone, onednn;
} LEVELS[] = {
#if defined(__aarch64__)
	{CPU_BASELINE, 1, 0}, {CPU_CRC, 1, 0}, {CPU_SVE, 2, 0},
#else
	{CPU_BASELINE, 1, 0}, {CPU_V2, 1, 0},	       {CPU_AVX2, 3, 0},
	{CPU_AVX512, 4, 1},   {CPU_AVX512_BF16, 4, 1}, {CPU_AMX, 4, 1},
#endif
};
#define NLEVELS (int)(sizeof LEVELS / sizeof LEVELS[0])

static void level_names_round_trip_and_unknown_ones_parse_to_zero(void **s)
{
	(void)s;
	assert_int_equal(NLEVELS, CPU_TOP);
	for (int l = CPU_BASELINE; l <= CPU_TOP; l++)
		assert_int_equal(cpu_level_parse(cpu_level_name((cpu_level)l)), l);
	assert_int_equal(cpu_level_parse("avx3"), 0);
	assert_int_equal(cpu_level_parse(""), 0);
	assert_int_equal(cpu_level_parse("AVX2"), 0);
	assert_null(cpu_level_name((cpu_level)0));
	assert_null(cpu_level_name((cpu_level)(CPU_TOP + 1)));
}

static void force_clamps_to_the_processor_and_picks_the_kernel_build(void **s)
{
	(void)s;
	cpu_level native = cpu_isa_native(), was = cpu_isa_force(CPU_TOP);
	assert_int_equal(cpu_isa_level(), native);
	for (int i = 0; i < NLEVELS && LEVELS[i].l <= native; i++) {
		cpu_isa_force(LEVELS[i].l);
		assert_int_equal(cpu_isa_level(), LEVELS[i].l);
		assert_int_equal(cpu_isa_clone(), LEVELS[i].clone);
		assert_int_equal(cpu_isa_onednn_gemm(), LEVELS[i].onednn);
	}
	char line[256];
	cpu_isa_force(CPU_BASELINE);
	cpu_isa_describe(line, sizeof line);
	printf("forced: %s\n", line);
	assert_non_null(strstr(line, "baseline"));
	assert_non_null(strstr(line, "portable"));
	cpu_isa_force(was);
	cpu_isa_describe(line, sizeof line);
	printf("in force: %s\n", line);
}

static void crc32c_is_the_same_at_every_level(void **s)
{
	(void)s;
	unsigned char buf[3 * 4096 * 2 + 13];
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	cpu_level was = cpu_isa_force(CPU_BASELINE);
	uint32_t base = crc32c(0, buf, sizeof buf);
	assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
	cpu_isa_force(cpu_isa_native());
	assert_int_equal(crc32c(0, buf, sizeof buf), base);
	assert_int_equal(crc32c_sw(0, buf, sizeof buf), base);
	cpu_isa_force(was);
}

/* ---- one workload, its outputs as bytes, op by op ---- */

#define MAX_OPS 40

typedef struct outputs {
	int n;
	const char *name[MAX_OPS];
	unsigned char *bytes[MAX_OPS];
	size_t size[MAX_OPS];
} outputs;

static void keep(outputs *o, const char *name, const void *p, size_t bytes)
{
	assert_true(o->n < MAX_OPS);
	o->name[o->n] = name;
	o->bytes[o->n] = malloc(bytes);
	assert_non_null(o->bytes[o->n]);
	memcpy(o->bytes[o->n], p, bytes);
	o->size[o->n++] = bytes;
}

static void outputs_free(outputs *o)
{
	for (int i = 0; i < o->n; i++)
		free(o->bytes[i]);
	o->n = 0;
}

/* n values in [-scale, scale) of type t, drawn from the seeded generator. */
static void *rand_of(be_dtype t, size_t n, double scale)
{
	void *p = malloc(n * be_dtype_size(t) + 64);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		float v = (float)(scale * test_urand());
		if (t == BE_BF16)
			((uint16_t *)p)[i] = bf16_from_f32(v);
		else
			((float *)p)[i] = v;
	}
	return p;
}

/* An output buffer poisoned with NaN bytes. */
static void *poisoned(be_dtype t, size_t n)
{
	void *p = malloc(n * be_dtype_size(t) + 64);
	assert_non_null(p);
	memset(p, 0xff, n * be_dtype_size(t));
	return p;
}

static void sync_ok(backend *be)
{
	titan_err e = {0};
	if (be->ops->sync(be, &e) != 0)
		fail_msg("backend fault: %s", e.msg);
}

static void run_norms(backend *be, be_dtype t, outputs *o)
{
	const int64_t n = 37, d = 100;
	size_t es = be_dtype_size(t);
	void *x = rand_of(t, n * d, 2), *w = rand_of(t, d, 1), *dy = rand_of(t, n * d, 1);
	void *y = poisoned(t, n * d), *dx = poisoned(t, n * d), *dw = calloc(d, es);
	float *rstd = malloc(n * sizeof(float));
	be->ops->rmsnorm_fwd(be, y, t, rstd, x, t, w, t, n, d, 1e-5f);
	be->ops->rmsnorm_bwd(be, dx, t, dw, t, dy, t, x, t, w, t, rstd, n, d);
	sync_ok(be);
	keep(o, "rmsnorm_fwd", y, n * d * es);
	keep(o, "rmsnorm_fwd rstd", rstd, n * sizeof(float));
	keep(o, "rmsnorm_bwd dx", dx, n * d * es);
	keep(o, "rmsnorm_bwd dw", dw, d * es);
	free(x), free(w), free(dy), free(y), free(dx), free(dw), free(rstd);
}

static void run_rope(backend *be, be_dtype t, outputs *o)
{
	const int64_t b = 2, tt = 9, h = 3, hd = 18;
	size_t nc = (size_t)(tt * hd), n = (size_t)(b * tt * h * hd);
	double *cs = malloc(nc * sizeof(double));
	float *csf = malloc(nc * sizeof(float));
	cpu_rope_table_f64(cs, tt, hd, 0, 500000.0, 8.0);
	for (size_t i = 0; i < nc; i++)
		csf[i] = (float)cs[i];
	void *x = rand_of(t, n, 1);
	be->ops->rope(be, x, t, csf, b, tt, h, hd, BE_ROPE_INTERLEAVED, 0);
	be->ops->rope(be, x, t, csf, b, tt, h, hd, BE_ROPE_HALF, 1);
	sync_ok(be);
	keep(o, "rope", x, n * be_dtype_size(t));
	free(cs), free(csf), free(x);
}

/* Causal GQA attention, with a sliding window or with documents (each batch
 * row its own boundaries, a document of one position among them). */
static void run_attention(backend *be, be_dtype t, int64_t window, int docs, outputs *o)
{
	static const int32_t doc[2 * 11] = {0, 0, 0, 3, 4, 4, 4, 4, 4, 4, 4,
					    0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7};
	be_attn a = {.b = 2, .tq = 11, .tk = 11, .h = 4, .hkv = 2, .hd = 24, .hdv = 24,
		     .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t, .window = window,
		     .doc = docs ? doc : NULL, .doc_t = 11};
	size_t nq = (size_t)(a.b * a.tq * a.h * a.hd), nk = (size_t)(a.b * a.tk * a.hkv * a.hd);
	size_t es = be_dtype_size(t);
	void *q = rand_of(t, nq, 1), *k = rand_of(t, nk, 1), *v = rand_of(t, nk, 1);
	void *dout = rand_of(t, nq, 1), *out = poisoned(t, nq);
	void *dq = poisoned(t, nq), *dk = poisoned(t, nk), *dv = poisoned(t, nk);
	float *lse = malloc((size_t)(a.b * a.h * a.tq) * sizeof(float));
	be->ops->attention_fwd(be, out, lse, q, k, v, &a);
	be->ops->attention_bwd(be, dq, dk, dv, dout, q, k, v, out, lse, &a);
	sync_ok(be);
	keep(o, docs ? "attention_fwd doc" : window ? "attention_fwd window" : "attention_fwd", out,
	     nq * es);
	keep(o, "attention lse", lse, (size_t)(a.b * a.h * a.tq) * sizeof(float));
	keep(o, "attention_bwd dq", dq, nq * es);
	keep(o, "attention_bwd dk", dk, nk * es);
	keep(o, "attention_bwd dv", dv, nk * es);
	free(q), free(k), free(v), free(dout), free(out), free(dq), free(dk), free(dv), free(lse);
}

static void run_elementwise(backend *be, be_dtype t, outputs *o)
{
	const int64_t n = 70001; /* past CPU_PAR_MIN: the threaded paths too */
	size_t es = be_dtype_size(t);
	void *a = rand_of(t, n, 3), *g = rand_of(t, n, 3), *dy = rand_of(t, n, 1);
	void *y = poisoned(t, n), *da = poisoned(t, n), *dg = poisoned(t, n);
	be->ops->swiglu_fwd(be, y, a, g, t, n);
	be->ops->swiglu_bwd(be, da, dg, dy, a, g, t, n);
	sync_ok(be);
	keep(o, "swiglu_fwd", y, n * es);
	keep(o, "swiglu_bwd da", da, n * es);
	keep(o, "swiglu_bwd dg", dg, n * es);
	be->ops->add(be, y, t, a, t, g, t, n);
	be->ops->axpy(be, y, t, 0.37f, dy, t, n);
	be->ops->scale(be, y, t, -1.3f, n);
	double ss = be->ops->sumsq(be, y, t, n);
	sync_ok(be);
	keep(o, "add axpy scale", y, n * es);
	keep(o, "sumsq", &ss, sizeof ss);
	void *p = rand_of(t, n, 1), *m = rand_of(t, n, 0.1), *v = rand_of(t, n, 0.01);
	for (int64_t i = 0; i < n; i++) /* the second moment is a square */
		if (t == BE_BF16)
			((uint16_t *)v)[i] &= 0x7fff;
		else
			((float *)v)[i] = fabsf(((float *)v)[i]);
	be->ops->adamw(be, p, g, m, v, t, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.19, 0.0975);
	sync_ok(be);
	keep(o, "adamw p", p, n * es);
	keep(o, "adamw m", m, n * es);
	keep(o, "adamw v", v, n * es);
	void *f = poisoned(BE_F32, n);
	be->ops->convert(be, f, BE_F32, a, t, n);
	be->ops->convert(be, y, t, f, BE_F32, n);
	sync_ok(be);
	keep(o, "convert", y, n * es);
	free(a), free(g), free(dy), free(y), free(da), free(dg), free(p), free(m), free(v), free(f);
}

static void run_embedding_and_loss(backend *be, be_dtype t, outputs *o)
{
	const int64_t n = 13, v = 301, d = 40;
	size_t es = be_dtype_size(t);
	int32_t ids[13], labels[13];
	for (int i = 0; i < n; i++)
		ids[i] = (i * 37) % (int)v, labels[i] = i == 5 ? -100 : (i * 91 + 3) % (int)v;
	void *table = calloc((size_t)(v * d), es), *dout = rand_of(t, n * d, 1);
	be->ops->embedding_bwd(be, table, t, dout, t, ids, n, d, 0, v);
	void *logits = rand_of(t, n * v, 4);
	double loss = 0;
	int64_t valid = 0;
	be->ops->cross_entropy(be, logits, t, labels, n, v, -100, 1.0f / 12, &loss, &valid);
	sync_ok(be);
	keep(o, "embedding_bwd", table, (size_t)(v * d) * es);
	keep(o, "cross_entropy loss", &loss, sizeof loss);
	keep(o, "cross_entropy grad", logits, (size_t)(n * v) * es);
	free(table), free(dout), free(logits);
}

/* The matmuls: float32 and bf16. */
static void run_matmul(backend *be, be_dtype t, outputs *o)
{
	const int64_t m = 37, n = 45, k = 300;
	void *a = rand_of(t, m * k, 1), *b = rand_of(t, k * n, 1), *c = rand_of(t, m * n, 1);
	be->ops->matmul(be, 0, 1, m, n, k, 0.5f, a, k, b, k, t, 1.0f, c, n, t);
	sync_ok(be);
	keep(o, "matmul", c, (size_t)(m * n) * be_dtype_size(t));
	free(a), free(b), free(c);
}

static void workload(backend *be, be_dtype t, outputs *o)
{
	test_seed(20261204);
	run_norms(be, t, o);
	run_rope(be, t, o);
	run_attention(be, t, 0, 0, o);
	run_attention(be, t, 4, 0, o);
	run_attention(be, t, 0, 1, o);
	run_elementwise(be, t, o);
	run_embedding_and_loss(be, t, o);
	run_matmul(be, t, o);
}

/* The lowest level of each kernel build (x86-64: baseline, avx2, avx512;
 * aarch64: baseline, sve), as far as this processor goes. */
static int builds(cpu_level *out)
{
	int n = 0;
	for (int i = 0; i < NLEVELS && LEVELS[i].l <= cpu_isa_native(); i++)
		if (i == 0 || LEVELS[i].clone != LEVELS[i - 1].clone)
			out[n++] = LEVELS[i].l;
	return n;
}

/* Append o's digests to TITAN_ISA_DIGESTS's file, when it names one. */
static void write_digests(const outputs *o, be_dtype t)
{
	const char *path = getenv("TITAN_ISA_DIGESTS");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "a");
	assert_non_null(f);
	for (int j = 0; j < o->n; j++) {
		char name[64];
		snprintf(name, sizeof name, "%s", o->name[j]);
		for (char *c = name; *c; c++)
			*c = *c == ' ' ? '_' : *c;
		fprintf(f, "%s %s %08x %zu\n", t == BE_BF16 ? "bf16" : "f32", name,
			crc32c(0, o->bytes[j], o->size[j]), o->size[j]);
	}
	assert_int_equal(fclose(f), 0);
}

/* The ops whose kernels run GEMMs: from avx512 on, oneDNN's, which sum in
 * their own order (the GEMM paths are compared against each other below, and
 * the ops against float64 and torch at every level by test_backend_ops and
 * its run at avx2, tests/isa.list). */
static int runs_gemms(const char *op)
{
	return strncmp(op, "attention", 9) == 0 || strcmp(op, "matmul") == 0;
}

static void every_kernel_build_gives_the_same_bits(be_dtype t)
{
	titan_err e = {0};
	cpu_level lv[3], was = cpu_isa_level();
	int nl = builds(lv);
	outputs ref = {0}, got = {0};
	for (int i = 0; i < nl; i++) {
		cpu_isa_force(lv[i]);
		/* a backend a level: the GEMM path is chosen per call, but oneDNN's
		 * primitives are made for a processor level once */
		backend *be = backend_cpu_create(2, &e);
		assert_non_null(be);
		outputs *o = i == 0 ? &ref : &got;
		workload(be, t, o);
		backend_free(be);
		if (i == 0) {
			write_digests(&ref, t);
			continue;
		}
		int same = 0, gemms = 0;
		for (int j = 0; j < got.n; j++) {
			assert_string_equal(got.name[j], ref.name[j]);
			assert_int_equal(got.size[j], ref.size[j]);
			if (cpu_isa_onednn_gemm() && runs_gemms(got.name[j])) {
				gemms++;
				continue;
			}
			size_t diff = 0;
			for (size_t b = 0; b < got.size[j]; b++)
				diff += got.bytes[j][b] != ref.bytes[j][b];
			if (diff)
				print_message("%s %s: %s build differs from baseline in %zu of %zu "
					      "bytes\n", got.name[j], t == BE_BF16 ? "bf16" : "f32",
					      cpu_level_name(lv[i]), diff, got.size[j]);
			same += diff == 0;
		}
		printf("%s build vs baseline, %s: %d of %d op outputs bit-identical (%d on "
		       "oneDNN's GEMMs not compared)\n", cpu_level_name(lv[i]),
		       t == BE_BF16 ? "bf16" : "f32", same, got.n - gemms, gemms);
		assert_int_equal(same + gemms, got.n);
		outputs_free(&got);
	}
	if (nl == 1)
		printf("only the baseline build runs on this processor (%s)\n",
		       cpu_level_name(cpu_isa_native()));
	outputs_free(&ref);
	cpu_isa_force(was);
}

static void every_kernel_build_gives_the_same_bits_f32(void **s)
{
	(void)s;
	every_kernel_build_gives_the_same_bits(BE_F32);
}

static void every_kernel_build_gives_the_same_bits_bf16(void **s)
{
	(void)s;
	every_kernel_build_gives_the_same_bits(BE_BF16);
}

/* ---- the two GEMM paths of each type against each other (x86-64's) ---- */

#if defined(__x86_64__)
/* C (m, n) = A (m, k) B (n, k)^T in type t on the path of level l, C float32;
 * impl names the bf16 path that ran. */
static float *gemm_at(cpu_level l, be_dtype t, const void *a, const void *b, int64_t m,
		      int64_t n, int64_t k, char *impl, size_t impl_n)
{
	titan_err e = {0};
	cpu_isa_force(l);
	backend *be = backend_cpu_create(2, &e);
	assert_non_null(be);
	float *c = malloc((size_t)(m * n) * sizeof(float));
	be->ops->matmul(be, 0, 1, m, n, k, 1.0f, a, k, b, k, t, 0.0f, c, n, BE_F32);
	sync_ok(be);
	snprintf(impl, impl_n, "%s", t == BE_BF16 ? backend_cpu_bf16_gemm(be)
				     : cpu_isa_onednn_gemm() ? "oneDNN sgemm" : "OpenBLAS sgemm");
	backend_free(be);
	return c;
}

static double elem(be_dtype t, const void *p, int64_t i)
{
	return t == BE_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Each path sums the products (exact in bf16, rounded once in float32) in
 * float32 in its own order, so each is within (k + 2) e sum|a b| of the exact
 * sum (test_backend_bf16's bound), and the two within twice that of each
 * other. */
static void gemm_paths_agree_within_twice_the_k_bound(be_dtype t)
{
	const char *tn = t == BE_BF16 ? "bf16" : "float32";
	if (cpu_isa_native() < CPU_AVX512) {
		print_message("SKIP: this processor (%s) has one %s GEMM path: oneDNN's is taken "
			      "from avx512 on\n", cpu_level_name(cpu_isa_native()), tn);
		skip();
		return;
	}
	const int64_t m = 64, n = 96, k = 1000;
	test_seed(4242);
	void *a = rand_of(t, m * k, 1), *b = rand_of(t, n * k, 1);
	cpu_level was = cpu_isa_level();
	char native_impl[160], avx2_impl[160];
	float *cn = gemm_at(cpu_isa_native(), t, a, b, m, n, k, native_impl, sizeof native_impl);
	float *cp = gemm_at(CPU_AVX2, t, a, b, m, n, k, avx2_impl, sizeof avx2_impl);
	cpu_isa_force(was);
	if (t == BE_BF16 && strstr(native_impl, "portable")) { /* ONEDNN_MAX_CPU_ISA, or a
								   oneDNN without bf16 */
		print_message("SKIP: oneDNN refused the bf16 matmul here: %s\n", native_impl);
		free(a), free(b), free(cn), free(cp);
		skip();
		return;
	}
	double worst = 0, max_abs = 0;
	size_t identical = 0;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double sab = 0;
			for (int64_t q = 0; q < k; q++)
				sab += fabs(elem(t, a, i * k + q) * elem(t, b, j * k + q));
			double bound = 2.0 * (double)(k + 2) * 0x1p-24 * sab;
			double d = fabs((double)cn[i * n + j] - cp[i * n + j]);
			identical += d == 0;
			max_abs = d > max_abs ? d : max_abs;
			worst = d / bound > worst ? d / bound : worst;
		}
	printf("%s GEMM %lldx%lldx%lld: %s vs %s: %zu of %lld outputs identical, max "
	       "|diff| %.3g, worst diff/bound %.3f\n", tn, (long long)m, (long long)n, (long long)k,
	       native_impl, avx2_impl, identical, (long long)(m * n), max_abs, worst);
	assert_true(worst <= 1.0);
	free(a), free(b), free(cn), free(cp);
}
#else
static void gemm_paths_agree_within_twice_the_k_bound(be_dtype t)
{
	print_message("SKIP: %s has one %s GEMM path (oneDNN's are x86-64's here)\n",
		      cpu_level_name(cpu_isa_native()), t == BE_BF16 ? "bf16" : "float32");
	skip();
}
#endif

static void bf16_gemm_paths_agree_within_twice_the_k_bound(void **s)
{
	(void)s;
	gemm_paths_agree_within_twice_the_k_bound(BE_BF16);
}

/* OpenBLAS's sgemm (avx2 and below) and oneDNN's (avx512 and above) */
static void float32_gemm_paths_agree_within_twice_the_k_bound(void **s)
{
	(void)s;
	gemm_paths_agree_within_twice_the_k_bound(BE_F32);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(level_names_round_trip_and_unknown_ones_parse_to_zero),
		cmocka_unit_test(force_clamps_to_the_processor_and_picks_the_kernel_build),
		cmocka_unit_test(crc32c_is_the_same_at_every_level),
		cmocka_unit_test(every_kernel_build_gives_the_same_bits_f32),
		cmocka_unit_test(every_kernel_build_gives_the_same_bits_bf16),
		cmocka_unit_test(bf16_gemm_paths_agree_within_twice_the_k_bound),
		cmocka_unit_test(float32_gemm_paths_agree_within_twice_the_k_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
