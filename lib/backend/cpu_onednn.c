/* bfloat16 GEMMs of the CPU backend through oneDNN's matmul primitive: bf16 A
 * and B, products accumulated in float32, C float32 or bf16 with alpha as the
 * output scale and beta as a sum post-op.  oneDNN picks its kernel from what the
 * processor has (AMX tiles, avx512_bf16 dot products, or a conversion to
 * float32), as PyTorch's CPU path does.
 *
 * Debian's libdnnl is built on OpenMP (libgomp), the runtime titan's kernels
 * use: a primitive runs on the same team of threads, so the two never spin
 * against each other, and a call made inside a parallel region runs on its
 * thread alone.
 *
 * Creating a primitive costs far more than running a small one, so each
 * shape's primitive is kept, with its memory objects, in a small table keyed
 * by everything the primitive bakes in. */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_bf16.h"

#define MM_SLOTS 256 /* a power of two */
#define MM_PROBES 8

typedef struct mm_key {
	int64_t m, n, k, lda, ldb, ldc;
	uint32_t alpha, beta; /* float bits */
	int32_t ta, tb, ct, threads;
} mm_key;

typedef struct mm_slot {
	int used;
	mm_key key;
	dnnl_primitive_t prim;
	dnnl_memory_t a, b, c;
} mm_slot;

struct cpu_onednn {
	dnnl_engine_t engine;
	dnnl_stream_t stream;
	char impl[64]; /* the kernel oneDNN chose for the last primitive made */
	mm_slot slot[MM_SLOTS];
};

static int ck(dnnl_status_t s, const char *what, titan_err *e)
{
	if (s == dnnl_success)
		return 0;
	err_set(e, "oneDNN: %s: %s", what, dnnl_status2str(s));
	return -1;
}

#if defined(__x86_64__)
/* Whether the user gave oneDNN a ceiling of its own. */
static int user_ceiling(void)
{
	static const char *const names[] = {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const char *v = getenv(names[i]);
		if (v != NULL && *v != '\0')
			return 1;
	}
	return 0;
}
#endif

/* oneDNN's own ceiling for a level forced below the processor's, so that a
 * forced avx512 runs oneDNN's avx512_core kernels on a processor that has
 * more.  Below avx512 no GEMM goes to oneDNN (cpu_isa_onednn_gemm), and its
 * ceiling is left alone for a later backend of the process.  A ceiling the
 * user gave oneDNN (ONEDNN_MAX_CPU_ISA, or the older DNNL_MAX_CPU_ISA) stands
 * at every level: oneDNN reads it only as the default, and setting the
 * ceiling here would replace it.  A oneDNN so limited refuses what it cannot
 * run, and cpu.c takes the portable path. */
void cpu_onednn_limit(cpu_level l)
{
#if defined(__x86_64__)
	if (l < CPU_AVX512 || l >= cpu_isa_native() || user_ceiling())
		return;
	dnnl_cpu_isa_t isa = l >= CPU_AMX ? dnnl_cpu_isa_avx512_core_amx
			     : l >= CPU_AVX512_BF16 ? dnnl_cpu_isa_avx512_core_bf16
						    : dnnl_cpu_isa_avx512_core;
	/* Refused once oneDNN has read its ceiling (any kernel it ran before, a
	 * second backend in the process): the ceiling in force stays, and a
	 * primitive it cannot make is the portable path's (cpu.c). */
	(void)dnnl_set_max_cpu_isa(isa);
#else
	(void)l; /* oneDNN keeps its own choice (no bf16 GEMMs go to it here) */
#endif
}

cpu_onednn *cpu_onednn_create(titan_err *e)
{
	cpu_onednn *o = calloc(1, sizeof *o);
	if (!o) {
		err_set(e, "oneDNN: out of memory");
		return NULL;
	}
	if (ck(dnnl_engine_create(&o->engine, dnnl_cpu, 0), "engine", e) < 0) {
		free(o);
		return NULL;
	}
	if (ck(dnnl_stream_create(&o->stream, o->engine, dnnl_stream_default_flags), "stream",
	       e) < 0) {
		dnnl_engine_destroy(o->engine);
		free(o);
		return NULL;
	}
	return o;
}

static void slot_clear(mm_slot *s)
{
	if (s->prim)
		dnnl_primitive_destroy(s->prim);
	if (s->a)
		dnnl_memory_destroy(s->a);
	if (s->b)
		dnnl_memory_destroy(s->b);
	if (s->c)
		dnnl_memory_destroy(s->c);
	memset(s, 0, sizeof *s);
}

void cpu_onednn_free(cpu_onednn *o)
{
	if (!o)
		return;
	for (int i = 0; i < MM_SLOTS; i++)
		slot_clear(&o->slot[i]);
	dnnl_stream_destroy(o->stream);
	dnnl_engine_destroy(o->engine);
	free(o);
}

const char *cpu_onednn_impl(const cpu_onednn *o)
{
	return o && o->impl[0] ? o->impl : "none";
}

static uint64_t key_hash(const mm_key *k)
{
	const unsigned char *p = (const unsigned char *)k;
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < sizeof *k; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* A (m, k) is stored (k, m) when transposed: a transpose is a pair of strides. */
static int mem_desc(dnnl_memory_desc_t *d, int64_t rows, int64_t cols, int trans, int64_t ld,
		    dnnl_data_type_t t, titan_err *e)
{
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
	return ck(dnnl_memory_desc_init_by_strides(d, 2, dims, t, strides), "memory desc", e);
}

static int slot_make(cpu_onednn *o, mm_slot *s, const mm_key *k, float alpha, float beta,
		     titan_err *e)
{
	dnnl_memory_desc_t da, db, dc;
	dnnl_data_type_t ct = k->ct == BE_BF16 ? dnnl_bf16 : dnnl_f32;
	if (mem_desc(&da, k->m, k->k, k->ta, k->lda, dnnl_bf16, e) < 0 ||
	    mem_desc(&db, k->k, k->n, k->tb, k->ldb, dnnl_bf16, e) < 0 ||
	    mem_desc(&dc, k->m, k->n, 0, k->ldc, ct, e) < 0)
		return -1;
	dnnl_matmul_desc_t md;
	if (ck(dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc), "matmul desc", e) < 0)
		return -1;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	int rc = -1;
	if (ck(dnnl_primitive_attr_create(&attr), "attr", e) < 0)
		goto out;
	if (alpha != 1 &&
	    ck(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "alpha", e) < 0)
		goto out;
	if (beta != 0) {
		if (ck(dnnl_post_ops_create(&po), "post ops", e) < 0 ||
		    ck(dnnl_post_ops_append_sum(po, beta), "beta", e) < 0 ||
		    ck(dnnl_primitive_attr_set_post_ops(attr, po), "post ops", e) < 0)
			goto out;
	}
	if (ck(dnnl_primitive_desc_create(&pd, &md, attr, o->engine, NULL), "matmul", e) < 0)
		goto out;
	const char *impl = "?";
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
		impl = "?";
	snprintf(o->impl, sizeof o->impl, "%s", impl);
	s->key = *k;
	if (ck(dnnl_primitive_create(&s->prim, pd), "primitive", e) < 0 ||
	    ck(dnnl_memory_create(&s->a, &da, o->engine, DNNL_MEMORY_NONE), "memory", e) < 0 ||
	    ck(dnnl_memory_create(&s->b, &db, o->engine, DNNL_MEMORY_NONE), "memory", e) < 0 ||
	    ck(dnnl_memory_create(&s->c, &dc, o->engine, DNNL_MEMORY_NONE), "memory", e) < 0) {
		slot_clear(s);
		goto out;
	}
	s->used = 1;
	rc = 0;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

/* The slot holding k's primitive, made on first use; a full probe sequence
 * evicts its first slot. */
static mm_slot *slot_get(cpu_onednn *o, const mm_key *k, float alpha, float beta,
			 titan_err *e)
{
	uint64_t h = key_hash(k);
	mm_slot *victim = NULL;
	for (int p = 0; p < MM_PROBES; p++) {
		mm_slot *s = &o->slot[(h + (uint64_t)p) & (MM_SLOTS - 1)];
		if (s->used && memcmp(&s->key, k, sizeof *k) == 0)
			return s;
		if (!s->used && !victim)
			victim = s;
	}
	if (!victim) {
		victim = &o->slot[h & (MM_SLOTS - 1)];
		slot_clear(victim);
	}
	return slot_make(o, victim, k, alpha, beta, e) < 0 ? NULL : victim;
}

int cpu_onednn_matmul(cpu_onednn *o, int ta, int tb, int64_t m, int64_t n, int64_t k,
		      float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
		      float beta, void *c, int64_t ldc, be_dtype ct, titan_err *e)
{
	mm_key key;
	memset(&key, 0, sizeof key); /* the padding is hashed and compared too */
	key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
	memcpy(&key.alpha, &alpha, 4);
	memcpy(&key.beta, &beta, 4);
	key.ta = ta != 0, key.tb = tb != 0, key.ct = ct;
	key.threads = omp_in_parallel() ? 1 : omp_get_max_threads();
	mm_slot *s = slot_get(o, &key, alpha, beta, e);
	if (!s)
		return -1;
	if (ck(dnnl_memory_set_data_handle(s->a, (void *)a), "memory", e) < 0 ||
	    ck(dnnl_memory_set_data_handle(s->b, (void *)b), "memory", e) < 0 ||
	    ck(dnnl_memory_set_data_handle(s->c, c), "memory", e) < 0)
		return -1;
	dnnl_exec_arg_t args[3] = {
		{DNNL_ARG_SRC, s->a},
		{DNNL_ARG_WEIGHTS, s->b},
		{DNNL_ARG_DST, s->c},
	};
	if (ck(dnnl_primitive_execute(s->prim, o->stream, 3, args), "matmul", e) < 0)
		return -1;
	return ck(dnnl_stream_wait(o->stream), "matmul", e);
}
