/* The CUDA backend: backend.h's ops bound to the kernels of kernels/ (through
 * lib/gpu/launch.h), cuBLASLt (gemm.h) and cuDNN (attn.h), on one stream, with
 * every byte from one device arena.  See cuda.h for what differs from the CPU
 * backend.  Plain C over lib/gpu: a build without CUDA compiles it too, and
 * backend_cuda_create then says there is no device. */
#include "backend/cuda.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/arena.h"
#include "gpu/attn.h"
#include "gpu/gemm.h"
#include "gpu/gpu.h"
#include "gpu/launch.h"
#include "gpu/lmhead.h"

/* be_dtype and gpu_dtype agree on the types both have. */
_Static_assert(BE_F32 == (int)GPU_F32 && BE_BF16 == (int)GPU_BF16 && BE_E4M3 == (int)GPU_E4M3 &&
		       BE_E5M2 == (int)GPU_E5M2,
	       "be_dtype vs gpu_dtype");
_Static_assert(BE_F8_TENSOR == (int)GPU_F8_TENSOR && BE_F8_ROWS == (int)GPU_F8_ROWS &&
		       BE_F8_COLS == (int)GPU_F8_COLS,
	       "be_f8_scaling vs gpu_f8_scaling");
/* The fused optimizer's step record is the kernels' (its norm in their pad). */
_Static_assert(sizeof(be_adamw_step) == sizeof(gpu_adamw_step) &&
		       offsetof(be_adamw_step, lr) == offsetof(gpu_adamw_step, lr) &&
		       offsetof(be_adamw_step, bc2) == offsetof(gpu_adamw_step, bc2) &&
		       offsetof(be_adamw_step, clip) == offsetof(gpu_adamw_step, clip),
	       "be_adamw_step vs gpu_adamw_step");

/* A loss sum that lives on the device until the next sync: the slot's
 * (double sum, int64 count) are added to the caller's host variables then. */
typedef struct pending_loss {
	double *loss_sum;
	int64_t *n_valid;
	int slot;
} pending_loss;

#define LOSS_SLOTS 256

/* The device tables of one adamw_multi call's spans (kept: a step calls it
 * with the same buffers and spans every time, and a captured step must not
 * upload them). */
typedef struct mt_table {
	void *p, *m, *v;
	const void *g;
	int t;
	be_span *spans; /* the host list it was built from */
	int nspans;
	gpu_mt_tensor *tensors; /* device */
	gpu_mt_chunk *chunks;   /* device */
	int64_t nchunks;
	struct mt_table *next;
} mt_table;

/* A shape cuDNN refused: not tried again. */
typedef struct att_shape {
	int64_t b, t, h, hkv, hd;
} att_shape;

typedef struct cuda_state {
	int device;
	void *stream;
	gpu_arena *arena;
	gpu_gemm *gemm;
	void *gemm_ws;
	gpu_attn *cudnn; /* NULL: no cuDNN (why in cudnn_why) */
	char cudnn_why[sizeof(titan_err)];
	int attention;
	char att_path[sizeof(titan_err) + 32];
	att_shape *refused;
	int nrefused, cap_refused;
	void *scratch; /* the ops' temporaries, grown on demand (one stream: reused in order) */
	size_t scratch_bytes;
	struct {
		double sum;
		int64_t n;
	} *slots;            /* (LOSS_SLOTS) on the device */
	pending_loss *pending; /* (LOSS_SLOTS) on the host */
	int npending;
	int capturing;
	unsigned scratch_epoch; /* bumped when the scratch moves (a graph holding it is stale) */
	mt_table *mt;
} cuda_state;

struct backend_cuda_graph {
	gpu_graph *g;
	pending_loss *pending; /* the losses the recording produces */
	int npending;
};

static const backend_ops cuda_ops;

static cuda_state *st(const backend *be)
{
	return be->impl;
}

/* The arena's books are the backend's: pieces of 256 bytes, scratch included. */
static void count_memory(backend *be)
{
	be->bytes_in_use = gpu_arena_in_use(st(be)->arena);
	if (be->bytes_in_use > be->peak_bytes)
		be->peak_bytes = be->bytes_in_use;
}

/* A launcher's or library's failure becomes the backend's fault. */
static int check(backend *be, int rc, const char *op)
{
	if (rc == 0)
		return 0;
	titan_err e;
	gpu_check(rc, op, &e);
	backend_fault(be, "cuda backend: %s", e.msg);
	return -1;
}

static int types_ok(backend *be, const char *op, int n, ...)
{
	va_list ap;
	va_start(ap, n);
	int ok = 1;
	for (int i = 0; i < n; i++) {
		int t = va_arg(ap, int);
		if (t != BE_F32 && t != BE_BF16) {
			backend_fault(be, "cuda backend: %s: %s tensors are not implemented", op,
				      be_dtype_name((be_dtype)t));
			ok = 0;
			break;
		}
	}
	va_end(ap);
	return ok;
}

/* At least bytes of scratch (256-byte aligned), or NULL with a fault. */
static void *scratch(backend *be, size_t bytes, const char *op)
{
	cuda_state *s = st(be);
	if (bytes <= s->scratch_bytes)
		return s->scratch;
	titan_err e;
	if (s->scratch && gpu_arena_release(s->arena, s->scratch, &e) != 0) {
		backend_fault(be, "cuda backend: %s: %s", op, e.msg);
		return NULL;
	}
	size_t want = bytes > 2 * s->scratch_bytes ? bytes : 2 * s->scratch_bytes;
	if (s->capturing)
		backend_fault(be, "cuda backend: %s: scratch grows inside a CUDA graph capture "
				  "(run the step once before capturing it)", op);
	s->scratch_epoch++;
	s->scratch = gpu_arena_alloc(s->arena, want, &e);
	s->scratch_bytes = s->scratch ? want : 0;
	count_memory(be);
	if (!s->scratch)
		backend_fault(be, "cuda backend: %s: scratch: %s", op, e.msg);
	return s->scratch;
}

/* --- memory --- */

static void *cuda_alloc(backend *be, size_t bytes, titan_err *e)
{
	void *p = gpu_arena_alloc(st(be)->arena, bytes, e);
	if (p)
		count_memory(be);
	else
		err_prefix(e, "cuda backend");
	return p;
}

static void cuda_free(backend *be, void *p)
{
	titan_err e;
	if (gpu_arena_release(st(be)->arena, p, &e) != 0)
		backend_fault(be, "cuda backend: free: %s", e.msg);
	count_memory(be);
}

static void cuda_copy(backend *be, void *dst, const void *src, size_t bytes, int kind)
{
	titan_err e;
	cuda_state *s = st(be);
	if (gpu_copy_async(dst, src, bytes, s->stream, &e) != 0) {
		backend_fault(be, "cuda backend: copy: %s", e.msg);
		return;
	}
	/* the host reads dst when copy returns */
	if (kind == BACKEND_D2H && gpu_stream_sync(s->stream, &e) != 0)
		backend_fault(be, "cuda backend: copy to host: %s", e.msg);
}

static void cuda_zero(backend *be, void *p, size_t bytes)
{
	titan_err e;
	if (gpu_memset_async(p, 0, bytes, st(be)->stream, &e) != 0)
		backend_fault(be, "cuda backend: zero: %s", e.msg);
}

/* Add the device's loss sums to the callers' host variables (after a sync). */
static int settle_losses(backend *be, titan_err *e)
{
	cuda_state *s = st(be);
	if (s->npending == 0)
		return 0;
	struct {
		double sum;
		int64_t n;
	} host[LOSS_SLOTS];
	/* on the backend's stream: a device-wide gpu_download would also wait for
	 * NCCL's streams, which the step overlaps with */
	if (gpu_copy_async(host, s->slots, (size_t)s->npending * sizeof host[0], s->stream, e) != 0 ||
	    gpu_stream_sync(s->stream, e) != 0)
		return err_prefix(e, "cuda backend: loss");
	for (int i = 0; i < s->npending; i++) {
		pending_loss *p = &s->pending[i];
		*p->loss_sum += host[p->slot].sum;
		*p->n_valid += host[p->slot].n;
	}
	s->npending = 0;
	return 0;
}

static int cuda_sync(backend *be, titan_err *e)
{
	cuda_state *s = st(be);
	if (s->capturing) /* waiting would end the capture: nothing has run yet */
		return err_set(e, "cuda backend: sync inside a CUDA graph capture");
	titan_err se;
	if (gpu_stream_sync(s->stream, &se) != 0) {
		backend_fault(be, "cuda backend: %s", se.msg);
		s->npending = 0; /* those sums are lost with the failed work */
	} else if (settle_losses(be, &se) != 0) {
		backend_fault(be, "%s", se.msg);
		s->npending = 0;
	}
	return backend_take_fault(be, e);
}

static void cuda_destroy(backend *be)
{
	cuda_state *s = st(be);
	if (s) {
		titan_err e;
		if (s->stream)
			gpu_stream_sync(s->stream, &e);
		for (mt_table *t = s->mt, *nx; t; t = nx) {
			nx = t->next;
			free(t->spans);
			free(t);
		}
		gpu_attn_free(s->cudnn);
		gpu_gemm_free(s->gemm);
		gpu_stream_free(s->stream);
		gpu_arena_free(s->arena);
		free(s->refused);
		free(s->pending);
		free(s);
	}
	free(be);
}

/* --- ops --- */

static void cuda_convert(backend *be, void *dst, be_dtype dt, const void *src, be_dtype stt,
			 int64_t n)
{
	if ((stt == BE_E4M3 || stt == BE_E5M2) && types_ok(be, "convert", 1, dt)) {
		check(be, launch_f8_decode(dst, dt, src, stt, n, st(be)->stream), "convert");
		return;
	}
	if (!types_ok(be, "convert", 2, dt, stt))
		return;
	if (dt == stt) {
		titan_err e;
		if (gpu_copy_async(dst, src, (size_t)n * be_dtype_size(dt), st(be)->stream, &e))
			backend_fault(be, "cuda backend: convert: %s", e.msg);
		return;
	}
	check(be, launch_cast(dst, dt, src, stt, n, st(be)->stream), "convert");
}

static void cuda_matmul(backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
			const void *a, int64_t lda, const void *b, int64_t ldb, be_dtype ab,
			float beta, void *c, int64_t ldc, be_dtype ct)
{
	if (!types_ok(be, "matmul", 2, ab, ct))
		return;
	gpu_gemm_args x = {
		.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
		.a = a, .lda = lda, .b = b, .ldb = ldb, .ab_type = ab,
		.c = beta != 0.0f ? c : NULL, .d = c, .ldd = ldc, .d_type = ct,
	};
	titan_err e;
	if (k == 0) { /* C = beta C: no product */
		if (ldc != n)
			backend_fault(be, "cuda backend: matmul: k = 0 with a strided C");
		else if (beta == 0.0f)
			cuda_zero(be, c, (size_t)(m * n) * be_dtype_size(ct));
		else
			check(be, launch_scale(c, ct, beta, m * n, st(be)->stream), "matmul (k = 0)");
		return;
	}
	if (gpu_gemm_run(st(be)->gemm, st(be)->stream, &x, &e) != 0)
		backend_fault(be, "cuda backend: matmul: %s", e.msg);
}

static void cuda_rmsnorm_fwd(backend *be, void *y, be_dtype yt, float *rstd, const void *x,
			     be_dtype xt, const void *w, be_dtype wt, int64_t n, int64_t d,
			     float eps)
{
	if (types_ok(be, "rmsnorm_fwd", 3, yt, xt, wt))
		check(be, launch_rmsnorm_fwd(y, yt, rstd, NULL, xt, x, xt, NULL, xt, w, wt, n, d, eps,
					     st(be)->stream),
		      "rmsnorm_fwd");
}

static void cuda_rmsnorm_bwd(backend *be, void *dx, be_dtype dxt, void *dw, be_dtype dwt,
			     const void *dy, be_dtype dyt, const void *x, be_dtype xt,
			     const void *w, be_dtype wt, const float *rstd, int64_t n, int64_t d)
{
	if (!types_ok(be, "rmsnorm_bwd", 5, dxt, dwt, dyt, xt, wt))
		return;
	void *tmp = scratch(be, rmsnorm_bwd_scratch_bytes(n, d), "rmsnorm_bwd");
	if (tmp)
		check(be, launch_rmsnorm_bwd(dx, dxt, dw, dwt, dy, dyt, NULL, x, xt, w, wt, rstd, n, d,
					     tmp, st(be)->stream),
		      "rmsnorm_bwd");
}

static void cuda_rope(backend *be, void *x, be_dtype xt, const float *cs, int64_t b, int64_t t,
		      int64_t h, int64_t hd, int style, int inverse)
{
	if (types_ok(be, "rope", 1, xt))
		check(be, launch_rope(x, xt, cs, b, t, h, hd, inverse,
				      style == BE_ROPE_HALF ? GPU_ROPE_HALF : GPU_ROPE_INTERLEAVED,
				      st(be)->stream),
		      "rope");
}

/* --- attention: cuDNN where it applies, titan's kernels elsewhere --- */

/* The head dims the kernels take (launch.h's attention_dims_ok), else a fault. */
static int att_dims_ok(backend *be, const char *op, const be_attn *a)
{
	if (attention_dims_ok(a->hd, a->hdv))
		return 1;
	backend_fault(be, "cuda backend: %s: head dims hd %lld, hdv %lld: the kernels take "
			  "hd == hdv in 8, 16, 32, 64, 96, 128 and (192, 128)",
		      op, (long long)a->hd, (long long)a->hdv);
	return 0;
}

/* What of the call cuDNN's graph (attn.h: plain causal SDPA) does not take:
 * the variants run on titan's kernels.  NULL: none. */
static const char *att_variant(const be_attn *a)
{
	if (a->window > 0)
		return "a sliding window";
	if (a->chunk > 0)
		return "chunked attention";
	if (a->doc)
		return "document masks";
	if (a->sinks)
		return "attention sinks";
	if (a->hdv != a->hd)
		return "hdv != hd (MLA)";
	return NULL;
}

static int att_types_ok(backend *be, const char *op, const be_attn *a)
{
	if (!types_ok(be, op, 4, a->qkv, a->out, a->dout, a->grad))
		return 0;
	if (a->out != a->qkv || a->dout != a->qkv || a->grad != a->qkv) {
		backend_fault(be, "cuda backend: %s: one element type for q, k, v, out and their "
				  "gradients is implemented",
			      op);
		return 0;
	}
	return att_dims_ok(be, op, a);
}

static gpu_att att_of(const be_attn *a)
{
	return (gpu_att){.b = a->b, .tq = a->tq, .tk = a->tk, .h = a->h, .hkv = a->hkv,
			 .hd = a->hd, .hdv = a->hdv, .q_pos0 = a->q_pos0, .k_pos0 = a->k_pos0,
			 .causal = a->causal, .scale = a->scale, .window = a->window,
			 .chunk = a->chunk, .sinks = a->sinks, .dsinks = a->dsinks, .doc = a->doc,
			 .doc_t = a->doc_t};
}

static int refused(cuda_state *s, const att_shape *x)
{
	for (int i = 0; i < s->nrefused; i++)
		if (!memcmp(&s->refused[i], x, sizeof *x))
			return 1;
	return 0;
}

/* Said once per shape: a refused cuDNN graph leaves attention on titan's
 * float32 reference kernels, many times slower at 8B's shapes, and nothing
 * else would show it but the step time. */
static void remember_refusal(cuda_state *s, const att_shape *x, const char *why)
{
	snprintf(s->att_path, sizeof s->att_path, "titan kernels: %s", why);
	titan_warn("cuda backend: attention b=%lld t=%lld h=%lld hkv=%lld hd=%lld runs on titan's "
		   "reference kernels, not cuDNN: %s",
		   (long long)x->b, (long long)x->t, (long long)x->h, (long long)x->hkv,
		   (long long)x->hd, why);
	if (s->nrefused == s->cap_refused) {
		int cap = s->cap_refused ? 2 * s->cap_refused : 8;
		att_shape *n = realloc(s->refused, (size_t)cap * sizeof *n);
		if (!n)
			return; /* only costs a retry */
		s->refused = n;
		s->cap_refused = cap;
	}
	s->refused[s->nrefused++] = *x;
}

/* The cuDNN scratch for this call, or NULL when cuDNN does not take it (the
 * reason goes to att_path). */
static void *cudnn_for(backend *be, const be_attn *a, size_t *bytes)
{
	cuda_state *s = st(be);
	if (s->attention == BACKEND_CUDA_ATTN_REFERENCE) {
		snprintf(s->att_path, sizeof s->att_path, "titan kernels: asked for");
		return NULL;
	}
	if (!s->cudnn) {
		snprintf(s->att_path, sizeof s->att_path, "titan kernels: %s", s->cudnn_why);
		return NULL;
	}
	const char *variant = att_variant(a);
	if (variant) {
		snprintf(s->att_path, sizeof s->att_path, "titan kernels: %s", variant);
		return NULL;
	}
	if (a->qkv != BE_BF16 || !a->causal || a->tq != a->tk || a->q_pos0 != a->k_pos0) {
		snprintf(s->att_path, sizeof s->att_path,
			 "titan kernels: cuDNN takes bf16 causal self-attention only");
		return NULL;
	}
	att_shape x = {a->b, a->tq, a->h, a->hkv, a->hd};
	if (refused(s, &x))
		return NULL;
	titan_err e;
	if (gpu_attn_prepare(s->cudnn, a->b, a->tq, a->h, a->hkv, a->hd, bytes, &e) != 0) {
		remember_refusal(s, &x, e.msg);
		return NULL;
	}
	void *p = scratch(be, *bytes, "attention (cuDNN)");
	if (p)
		snprintf(s->att_path, sizeof s->att_path, "cuDNN %ld", gpu_attn_cudnn_version());
	return p;
}

static void cuda_attention_fwd(backend *be, void *out, float *lse, const void *q, const void *k,
			       const void *v, const be_attn *a)
{
	if (!att_types_ok(be, "attention_fwd", a))
		return;
	cuda_state *s = st(be);
	size_t bytes = 0;
	void *ws = cudnn_for(be, a, &bytes);
	if (ws) {
		titan_err e;
		if (gpu_attn_fwd(s->cudnn, s->stream, out, lse, q, k, v, a->b, a->tq, a->h, a->hkv,
				 a->hd, a->scale, ws, bytes, &e) != 0)
			backend_fault(be, "cuda backend: attention_fwd: %s", e.msg);
		return;
	}
	gpu_att x = att_of(a);
	check(be, launch_attention_fwd(out, lse, q, k, v, a->qkv, &x, s->stream), "attention_fwd");
}

static void cuda_attention_bwd(backend *be, void *dq, void *dk, void *dv, const void *dout,
			       const void *q, const void *k, const void *v, const void *out,
			       const float *lse, const be_attn *a)
{
	if (!att_types_ok(be, "attention_bwd", a))
		return;
	cuda_state *s = st(be);
	size_t bytes = 0;
	void *ws = cudnn_for(be, a, &bytes);
	if (ws) {
		titan_err e;
		if (gpu_attn_bwd(s->cudnn, s->stream, dq, dk, dv, dout, q, k, v, out, lse, a->b, a->tq,
				 a->h, a->hkv, a->hd, a->scale, ws, bytes, &e) != 0)
			backend_fault(be, "cuda backend: attention_bwd: %s", e.msg);
		return;
	}
	gpu_att x = att_of(a);
	void *tmp = scratch(be, attention_bwd_scratch_bytes(&x), "attention_bwd");
	if (tmp)
		check(be, launch_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, a->qkv, &x, tmp,
					       s->stream),
		      "attention_bwd");
}

/* --- MLA's split heads --- */

static void cuda_heads_cat(backend *be, void *y, const void *x1, const void *x2, be_dtype t,
			   int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	if (types_ok(be, "heads_cat", 1, t))
		check(be, launch_heads_cat(y, x1, x2, t, n, h, d1, d2, h2, st(be)->stream),
		      "heads_cat");
}

static void cuda_heads_split(backend *be, void *x1, void *x2, const void *y, be_dtype t,
			     int64_t n, int64_t h, int64_t d1, int64_t d2, int64_t h2)
{
	if (types_ok(be, "heads_split", 1, t))
		check(be, launch_heads_split(x1, x2, y, t, n, h, d1, d2, h2, st(be)->stream),
		      "heads_split");
}

/* --- the rest --- */

static void cuda_swiglu_fwd(backend *be, void *y, const void *a, const void *g, be_dtype t,
			    int64_t n)
{
	if (types_ok(be, "swiglu_fwd", 1, t))
		check(be, launch_swiglu_fwd(y, t, a, g, t, n, st(be)->stream), "swiglu_fwd");
}

static void cuda_swiglu_bwd(backend *be, void *da, void *dg, const void *dy, const void *a,
			    const void *g, be_dtype t, int64_t n)
{
	if (types_ok(be, "swiglu_bwd", 1, t))
		check(be, launch_swiglu_bwd(da, dg, t, dy, t, a, g, t, n, st(be)->stream),
		      "swiglu_bwd");
}

static void cuda_embedding_fwd(backend *be, void *out, be_dtype ot, const void *table,
			       be_dtype tt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			       int64_t nv)
{
	if (types_ok(be, "embedding_fwd", 2, ot, tt))
		check(be, launch_embedding_fwd(out, ot, table, tt, ids, n, d, v0, nv, st(be)->stream),
		      "embedding_fwd");
}

static void cuda_embedding_bwd(backend *be, void *dtable, be_dtype tt, const void *dout,
			       be_dtype dt, const int32_t *ids, int64_t n, int64_t d, int64_t v0,
			       int64_t nv)
{
	if (!types_ok(be, "embedding_bwd", 2, tt, dt))
		return;
	size_t bytes = 0;
	if (check(be, embedding_bwd_scratch_bytes(n, nv, &bytes), "embedding_bwd scratch"))
		return;
	void *tmp = scratch(be, bytes, "embedding_bwd");
	if (tmp)
		check(be, launch_embedding_bwd(dtable, tt, dout, dt, ids, n, d, v0, nv, tmp, bytes,
					       st(be)->stream),
		      "embedding_bwd");
}

/* A zeroed device slot for a loss sum that the next sync adds to the caller's
 * host variables (registered by loss_slot_done once the kernels are queued);
 * -1 with a fault when none can be had. */
static int loss_slot(backend *be, const char *op)
{
	cuda_state *s = st(be);
	titan_err e;
	if (s->npending == LOSS_SLOTS) { /* many losses without a sync: settle them now */
		if (s->capturing) {
			backend_fault(be, "cuda backend: %s: more than %d losses in one captured graph",
				      op, LOSS_SLOTS);
			return -1;
		}
		if (gpu_stream_sync(s->stream, &e) != 0 || settle_losses(be, &e) != 0) {
			backend_fault(be, "cuda backend: %s: %s", op, e.msg);
			return -1;
		}
	}
	int slot = s->npending;
	if (gpu_memset_async(&s->slots[slot], 0, sizeof s->slots[0], s->stream, &e) != 0) {
		backend_fault(be, "cuda backend: %s: %s", op, e.msg);
		return -1;
	}
	return slot;
}

static void loss_slot_done(backend *be, int slot, double *loss_sum, int64_t *n_valid)
{
	cuda_state *s = st(be);
	s->pending[s->npending++] = (pending_loss){loss_sum, n_valid, slot};
}

/* The row losses go to scratch, their sum to a device slot that the next sync
 * adds to *loss_sum, *n_valid. */
static void cuda_cross_entropy(backend *be, void *logits, be_dtype lt, const int32_t *labels,
			       int64_t n, int64_t v, int32_t ignore_index, float grad_scale,
			       double *loss_sum, int64_t *n_valid)
{
	cuda_state *s = st(be);
	if (!types_ok(be, "cross_entropy", 1, lt))
		return;
	int slot = loss_slot(be, "cross_entropy");
	float *rows = slot < 0 ? NULL : scratch(be, (size_t)(n > 0 ? n : 1) * sizeof(float),
						 "cross_entropy");
	if (!rows)
		return;
	if (check(be, launch_cross_entropy(logits, lt, labels, n, v, ignore_index, grad_scale, NULL,
					   rows, s->stream),
		  "cross_entropy") ||
	    check(be, launch_loss_sum(&s->slots[slot].sum, &s->slots[slot].n, rows, labels, n,
				      ignore_index, s->stream),
		  "cross_entropy sum"))
		return;
	loss_slot_done(be, slot, loss_sum, n_valid);
}

static void cuda_add(backend *be, void *y, be_dtype yt, const void *a, be_dtype at, const void *b,
		     be_dtype bt, int64_t n)
{
	if (types_ok(be, "add", 3, yt, at, bt))
		check(be, launch_add(y, yt, a, at, b, bt, n, st(be)->stream), "add");
}

static void cuda_axpy(backend *be, void *y, be_dtype yt, float alpha, const void *x, be_dtype xt,
		      int64_t n)
{
	if (types_ok(be, "axpy", 2, yt, xt))
		check(be, launch_axpy(y, yt, alpha, x, xt, n, st(be)->stream), "axpy");
}

static void cuda_scale(backend *be, void *x, be_dtype xt, float alpha, int64_t n)
{
	if (types_ok(be, "scale", 1, xt))
		check(be, launch_scale(x, xt, alpha, n, st(be)->stream), "scale");
}

static void cuda_adamw_bf16_states(backend *be, float *p, const float *g, void *m, void *v,
				   int64_t n, double lr, double b1, double b2, double eps, double wd,
				   double bc1, double bc2)
{
	check(be, launch_adamw_bf16_states(p, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2,
					   st(be)->stream), "adamw_bf16_states");
}

static void cuda_lerp(backend *be, float *x, const float *end, float w, int64_t n)
{
	check(be, launch_lerp(x, end, w, n, st(be)->stream), "lerp");
}

/* The partial comes back to the host: this op waits for the device. */
static double cuda_sumsq(backend *be, const void *x, be_dtype xt, int64_t n)
{
	cuda_state *s = st(be);
	if (!types_ok(be, "sumsq", 1, xt))
		return 0;
	double *tmp = scratch(be, (size_t)(sumsq_partials(n) + 1) * sizeof(double), "sumsq");
	if (!tmp || check(be, launch_sumsq(tmp, tmp + 1, x, xt, n, s->stream), "sumsq"))
		return 0;
	double out = 0;
	titan_err e;
	if (gpu_copy_async(&out, tmp, sizeof out, s->stream, &e) != 0 ||
	    gpu_stream_sync(s->stream, &e) != 0)
		backend_fault(be, "cuda backend: sumsq: %s", e.msg);
	return out;
}

static void cuda_adamw(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
		       int64_t n, double lr, double b1, double b2, double eps, double wd, double bc1,
		       double bc2)
{
	if (types_ok(be, "adamw", 1, t))
		check(be, launch_adamw(p, g, m, v, t, n, lr, b1, b2, eps, wd, bc1, bc2, st(be)->stream),
		      "adamw");
}

/* --- float8 (kernels/float8.cu, the scaled GEMM through cuBLASLt) --- */

static int f8_ok(backend *be, const char *op, be_dtype t)
{
	if (t == BE_E4M3 || t == BE_E5M2)
		return 1;
	backend_fault(be, "cuda backend: %s: %s is not a float8 type", op, be_dtype_name(t));
	return 0;
}

static void cuda_f8_amax(backend *be, float *amax, const void *x, be_dtype xt, int64_t rows,
			 int64_t cols, int scaling)
{
	if (types_ok(be, "f8_amax", 1, xt))
		check(be, launch_f8_amax(amax, x, xt, rows, cols, scaling, st(be)->stream), "f8_amax");
}

static void cuda_f8_cast(backend *be, void *q, be_dtype qt, float *scale, const void *x,
			 be_dtype xt, int64_t rows, int64_t cols, int scaling, int pow2,
			 int transpose, const float *amax)
{
	if (types_ok(be, "f8_cast", 1, xt) && f8_ok(be, "f8_cast", qt))
		check(be, launch_f8_cast(q, qt, scale, x, xt, rows, cols, scaling, pow2, transpose, amax,
					 st(be)->stream),
		      "f8_cast");
}

/* cuBLASLt multiplies by dequantising scales (1 / torchao's): their
 * reciprocals go to scratch (gpu_f8_scales_plan: row-wise scales are
 * cuBLASLt's outer vectors on both operands).  Where its heuristic refuses a
 * row-wise shape, that call's unscaled product goes to scratch and the
 * epilogue divides; any other failure is a fault, not a fallback. */
static void cuda_f8_matmul(backend *be, int64_t m, int64_t n, int64_t k, const void *a,
			   be_dtype at, const float *sa, int64_t nsa, const void *b, be_dtype bt,
			   const float *sb, int64_t nsb, float beta, void *c, be_dtype ct)
{
	cuda_state *s = st(be);
	if (!f8_ok(be, "f8_matmul", at) || !f8_ok(be, "f8_matmul", bt) ||
	    !types_ok(be, "f8_matmul", 1, ct))
		return;
	if ((nsa != 1 && nsa != m) || (nsb != 1 && nsb != n) || (at == BE_E5M2 && bt == BE_E5M2)) {
		backend_fault(be, "cuda backend: f8_matmul: %lld and %lld scales for (%lld, %lld), or "
				  "both operands e5m2",
			      (long long)nsa, (long long)nsb, (long long)m, (long long)n);
		return;
	}
	if (m == 0 || n == 0)
		return;
	titan_err e;
	gpu_f8_scales sp;
	if (gpu_f8_scales_plan(m, n, nsa, nsb, &sp, &e) != 0) {
		backend_fault(be, "cuda backend: f8_matmul: %s", e.msg);
		return;
	}
	char *tmp = scratch(be, sp.bytes, "f8_matmul");
	if (!tmp)
		return;
	/* (na) and (nb): the dequantising multipliers, a scalar broadcast beside a vector */
	float *ra = (float *)tmp, *rb_ = (float *)(tmp + sp.b_offset);
	if (check(be, nsa == sp.na ? launch_f8_recip(ra, sa, nsa, s->stream)
				   : launch_f8_recip_bcast(ra, sp.na, sa, s->stream),
		  "f8_matmul scales") ||
	    check(be, nsb == sp.nb ? launch_f8_recip(rb_, sb, nsb, s->stream)
				   : launch_f8_recip_bcast(rb_, sp.nb, sb, s->stream),
		  "f8_matmul scales"))
		return;
	gpu_gemm_f8_args x = {.m = m, .n = n, .k = k, .a = a, .a_type = at, .b = b, .b_type = bt,
			      .sa = ra, .sb = rb_, .a_rows = sp.outer_vec, .b_rows = sp.outer_vec,
			      .beta = beta, .d = c, .d_type = ct};
	int rc = gpu_gemm_f8_run(s->gemm, s->stream, &x, &e);
	if (rc == 0)
		return;
	/* Only a refused row-wise product has another way (gemm.h); the refusal
	 * is this shape's, remembered by gpu_gemm, so other shapes still try. */
	if (rc != GPU_GEMM_NO_ALGO || !sp.outer_vec) {
		backend_fault(be, "cuda backend: f8_matmul: %s", e.msg);
		return;
	}
	float *acc = scratch(be, sp.fallback_bytes, "f8_matmul (row-wise epilogue)"); /* (m, n) */
	if (!acc)
		return;
	x.sa = x.sb = NULL;
	x.a_rows = x.b_rows = 0;
	x.beta = 0;
	x.d = acc;
	x.d_type = BE_F32;
	if (gpu_gemm_f8_run(s->gemm, s->stream, &x, &e) != 0)
		backend_fault(be, "cuda backend: f8_matmul: %s", e.msg);
	else
		check(be, launch_f8_epilogue(c, ct, acc, sa, nsa, sb, nsb, beta, m, n, s->stream),
		      "f8_matmul epilogue");
}

/* --- fused ops (compile.enable) --- */

static void cuda_rmsnorm_add_fwd(backend *be, void *y, be_dtype yt, float *rstd, void *res,
				 be_dtype rt, const void *x, const void *delta, be_dtype dt,
				 const void *w, be_dtype wt, int64_t n, int64_t d, float eps)
{
	if (types_ok(be, "rmsnorm_add_fwd", 4, yt, rt, dt, wt))
		check(be, launch_rmsnorm_fwd(y, yt, rstd, res, rt, x, rt, delta, dt, w, wt, n, d, eps,
					     st(be)->stream),
		      "rmsnorm_add_fwd");
}

static void cuda_rmsnorm_add_bwd(backend *be, void *dx, be_dtype dxt, const void *dres, void *dw,
				 be_dtype dwt, const void *dy, be_dtype dyt, const void *x,
				 be_dtype xt, const void *w, be_dtype wt, const float *rstd,
				 int64_t n, int64_t d)
{
	if (!types_ok(be, "rmsnorm_add_bwd", 5, dxt, dwt, dyt, xt, wt))
		return;
	void *tmp = scratch(be, rmsnorm_bwd_scratch_bytes(n, d), "rmsnorm_add_bwd");
	if (tmp)
		check(be, launch_rmsnorm_bwd(dx, dxt, dw, dwt, dy, dyt, dres, x, xt, w, wt, rstd, n, d,
					     tmp, st(be)->stream),
		      "rmsnorm_add_bwd");
}

static int gpu_style(int style)
{
	return style == BE_ROPE_HALF ? GPU_ROPE_HALF : GPU_ROPE_INTERLEAVED;
}

static void cuda_rope_qkv(backend *be, void *q, void *k, void *v, const void *qkv, be_dtype xt,
			  const float *cs, int64_t b, int64_t t, int64_t h, int64_t hkv, int64_t hd,
			  int style)
{
	if (types_ok(be, "rope_qkv", 1, xt))
		check(be, launch_rope_qkv_split(q, k, v, xt, qkv, xt, cs, b, t, h, hkv, hd,
						gpu_style(style), st(be)->stream),
		      "rope_qkv");
}

static void cuda_rope_qkv_bwd(backend *be, void *dqkv, const void *dq, const void *dk,
			      const void *dv, be_dtype xt, const float *cs, int64_t b, int64_t t,
			      int64_t h, int64_t hkv, int64_t hd, int style)
{
	if (types_ok(be, "rope_qkv_bwd", 1, xt))
		check(be, launch_rope_qkv_merge(dqkv, xt, dq, dk, dv, xt, cs, b, t, h, hkv, hd,
						gpu_style(style), st(be)->stream),
		      "rope_qkv_bwd");
}

/* lib/gpu/lmhead.c's three products and one kernel per chunk; the row losses
 * in scratch, their sum in a loss slot. */
static void cuda_lm_head_loss(backend *be, const void *h, const void *w, be_dtype t,
			      const int32_t *labels, int64_t n, int64_t d, int64_t v,
			      int32_t ignore_index, const float *grad_scale, void *dh, be_dtype dht,
			      void *dw, be_dtype dwt, void *logits, int64_t chunk,
			      double *loss_sum, int64_t *n_valid)
{
	cuda_state *s = st(be);
	if (!types_ok(be, "lm_head_loss", 3, t, dht, dwt))
		return;
	int slot = loss_slot(be, "lm_head_loss");
	float *rows = slot < 0 ? NULL : scratch(be, (size_t)(n > 0 ? n : 1) * sizeof(float),
						 "lm_head_loss");
	if (!rows)
		return;
	gpu_lmhead_args a = {.h = h, .w = w, .type = t, .labels = labels, .n = n, .d = d, .v = v,
			     .ignore_index = ignore_index, .grad_scale_dev = grad_scale,
			     .dh = grad_scale ? dh : NULL, .dh_type = dht,
			     .dw = grad_scale ? dw : NULL, .dw_type = dwt, .logits = logits,
			     .chunk = chunk, .row_loss = rows, .loss_sum = &s->slots[slot].sum,
			     .n_valid = &s->slots[slot].n};
	titan_err e;
	if (gpu_lmhead_loss(s->gemm, s->stream, &a, &e) != 0) {
		backend_fault(be, "cuda backend: lm_head_loss: %s", e.msg);
		return;
	}
	loss_slot_done(be, slot, loss_sum, n_valid);
}

static void cuda_sumsq_dev(backend *be, double *out, const void *x, be_dtype xt, int64_t n)
{
	double *part = types_ok(be, "sumsq_dev", 1, xt)
			       ? scratch(be, (size_t)(sumsq_partials(n) + 1) * sizeof(double),
					 "sumsq_dev")
			       : NULL;
	if (part)
		check(be, launch_sumsq(out, part, x, xt, n, st(be)->stream), "sumsq_dev");
}

static void cuda_clip_factor(backend *be, be_adamw_step *stp, const double *sumsq, float max_norm)
{
	check(be, launch_clip_factor((gpu_adamw_step *)stp, &stp->norm, sumsq, max_norm,
				     st(be)->stream),
	      "clip_factor");
}

/* Upload x's tensor and chunk tables (built on the host from the spans). */
static int mt_upload(backend *be, mt_table *x, titan_err *e)
{
	cuda_state *s = st(be);
	size_t es = be_dtype_size((be_dtype)x->t);
	int ns = x->nspans;
	gpu_mt_tensor *tab = calloc((size_t)ns + 1, sizeof *tab);
	gpu_mt_chunk *ch = NULL;
	int rc = -1;
	if (!tab) {
		err_set(e, "out of host memory");
		goto out;
	}
	for (int i = 0; i < ns; i++) {
		size_t off = (size_t)x->spans[i].offset * es;
		tab[i] = (gpu_mt_tensor){.p = (char *)x->p + off, .g = (const char *)x->g + off,
					 .m = (char *)x->m + off, .v = (char *)x->v + off,
					 .n = x->spans[i].n, .wd = x->spans[i].wd};
	}
	if ((x->nchunks = gpu_mt_chunks(tab, ns, NULL)) < 0) {
		err_set(e, "a span of negative length");
		goto out;
	}
	if (!(ch = malloc((size_t)(x->nchunks + 1) * sizeof *ch))) {
		err_set(e, "out of host memory");
		goto out;
	}
	gpu_mt_chunks(tab, ns, ch);
	if ((x->tensors = gpu_arena_alloc(s->arena, (size_t)(ns + 1) * sizeof *tab, e)) &&
	    (x->chunks = gpu_arena_alloc(s->arena, (size_t)(x->nchunks + 1) * sizeof *ch, e)) &&
	    gpu_copy_async(x->tensors, tab, (size_t)ns * sizeof *tab, s->stream, e) == 0 &&
	    gpu_copy_async(x->chunks, ch, (size_t)x->nchunks * sizeof *ch, s->stream, e) == 0 &&
	    gpu_stream_sync(s->stream, e) == 0) /* tab and ch are freed below */
		rc = 0;
out:
	count_memory(be);
	free(tab);
	free(ch);
	return rc;
}

/* The device tables of these buffers and spans: found, or built and uploaded
 * (not inside a capture, which cannot wait for an upload). */
static mt_table *mt_find(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
			 const be_span *spans, int nspans)
{
	cuda_state *s = st(be);
	for (mt_table *x = s->mt; x; x = x->next)
		if (x->p == p && x->g == g && x->m == m && x->v == v && x->t == (int)t &&
		    x->nspans == nspans && !memcmp(x->spans, spans, (size_t)nspans * sizeof *spans))
			return x;
	if (s->capturing) {
		backend_fault(be, "cuda backend: adamw_multi: new tensors inside a CUDA graph capture "
				  "(run the step once before capturing it)");
		return NULL;
	}
	titan_err e = {0};
	mt_table *x = calloc(1, sizeof *x);
	be_span *sp = malloc((size_t)(nspans > 0 ? nspans : 1) * sizeof *sp);
	if (!x || !sp) {
		free(x);
		free(sp);
		backend_fault(be, "cuda backend: adamw_multi: out of host memory");
		return NULL;
	}
	memcpy(sp, spans, (size_t)nspans * sizeof *sp);
	x->p = p, x->g = g, x->m = m, x->v = v, x->t = (int)t, x->spans = sp, x->nspans = nspans;
	if (mt_upload(be, x, &e) != 0) {
		gpu_arena_release(s->arena, x->tensors, NULL);
		gpu_arena_release(s->arena, x->chunks, NULL);
		count_memory(be);
		free(sp);
		free(x);
		backend_fault(be, "cuda backend: adamw_multi: %s", e.msg);
		return NULL;
	}
	x->next = s->mt;
	s->mt = x;
	return x;
}

static void cuda_adamw_multi(backend *be, void *p, const void *g, void *m, void *v, be_dtype t,
			     const be_span *spans, int nspans, const be_adamw_step *stp)
{
	if (!types_ok(be, "adamw_multi", 1, t))
		return;
	mt_table *x = mt_find(be, p, g, m, v, t, spans, nspans);
	if (x)
		check(be, launch_adamw_multi(x->tensors, x->chunks, x->nchunks,
					     (const gpu_adamw_step *)stp, t, st(be)->stream),
		      "adamw_multi");
}

/* --- biases; Flux's encoders and autoencoder --- */

static void cuda_bias_add(backend *be, void *y, be_dtype yt, const void *bias, be_dtype bt,
			  int64_t rows, int64_t d, int64_t groups, const int32_t *offs)
{
	if (types_ok(be, "bias_add", 2, yt, bt))
		check(be, launch_bias_add(y, yt, bias, bt, rows, d, groups, offs, st(be)->stream),
		      "bias_add");
}

static void cuda_bias_grad(backend *be, void *dbias, be_dtype bt, const void *dy, be_dtype dyt,
			   int64_t rows, int64_t d, int64_t groups, const int32_t *offs)
{
	if (types_ok(be, "bias_grad", 2, bt, dyt))
		check(be, launch_bias_grad(dbias, bt, dy, dyt, rows, d, groups, offs, st(be)->stream),
		      "bias_grad");
}

static void cuda_t5_attention(backend *be, void *out, const void *q, const void *k, const void *v,
			      const void *bias, be_dtype t, int64_t b, int64_t l, int64_t h,
			      int64_t dk)
{
	if (types_ok(be, "t5_attention", 1, t))
		check(be, launch_t5_attention(out, q, k, v, bias, t, b, l, h, dk, st(be)->stream),
		      "t5_attention");
}

static void cuda_geglu_fwd(backend *be, void *y, const void *a, const void *g, be_dtype t,
			   int64_t n)
{
	if (types_ok(be, "geglu_fwd", 1, t))
		check(be, launch_geglu_fwd(y, a, g, t, n, st(be)->stream), "geglu_fwd");
}

static void cuda_swish(backend *be, void *x, be_dtype t, float beta, int64_t n)
{
	if (types_ok(be, "swish", 1, t))
		check(be, launch_swish(x, t, beta, n, st(be)->stream), "swish");
}

static void cuda_layernorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			       const void *w, const void *b, be_dtype wt, int64_t n, int64_t d,
			       float eps)
{
	if (types_ok(be, "layernorm_fwd", 3, yt, xt, wt))
		check(be, launch_layernorm_fwd(y, yt, x, xt, w, b, wt, n, d, eps, st(be)->stream),
		      "layernorm_fwd");
}

static void cuda_groupnorm_fwd(backend *be, void *y, be_dtype yt, const void *x, be_dtype xt,
			       const void *w, const void *b, be_dtype wt, int64_t n, int64_t c,
			       int64_t hw, int64_t groups, float eps)
{
	if (types_ok(be, "groupnorm_fwd", 3, yt, xt, wt))
		check(be, launch_groupnorm_fwd(y, yt, x, xt, w, b, wt, n, c, hw, groups, eps,
					       st(be)->stream),
		      "groupnorm_fwd");
}

static void cuda_upsample2x(backend *be, void *y, const void *x, be_dtype t, int64_t n, int64_t c,
			    int64_t h, int64_t w)
{
	if (types_ok(be, "upsample2x", 1, t))
		check(be, launch_upsample2x(y, x, t, n, c, h, w, st(be)->stream), "upsample2x");
}

static void cuda_im2col(backend *be, void *cols, const void *x, be_dtype t, int64_t n, int64_t c,
			int64_t h, int64_t w, int64_t k, int64_t stride, const int64_t pad[4],
			int64_t p0, int64_t np)
{
	if (types_ok(be, "im2col", 1, t))
		check(be, launch_im2col(cols, x, t, n, c, h, w, k, stride, pad[0], pad[1], pad[2],
					pad[3], p0, np, st(be)->stream),
		      "im2col");
}

/* ---- the Flux transformer's training ops (kernels/flux_train.cu), float32
 * or bfloat16 ---- */

static int flux_type_ok(backend *be, const char *op, be_dtype t)
{
	if (t == BE_F32 || t == BE_BF16)
		return 1;
	backend_fault(be, "cuda backend: %s: %s tensors are not implemented (float32, bfloat16)",
		      op, be_dtype_name(t));
	return 0;
}

static void cuda_ln_mod_fwd(backend *be, void *y, float *stats, const void *x, const void *shift,
			    const void *scale, be_dtype t, int64_t ld, int64_t b, int64_t n,
			    int64_t d, float eps)
{
	if (flux_type_ok(be, "ln_mod_fwd", t))
		check(be, launch_ln_mod_fwd(y, stats, x, shift, scale, t, ld, b, n, d, eps,
					    st(be)->stream),
		      "ln_mod_fwd");
}

static void cuda_ln_mod_bwd(backend *be, void *dx, void *dshift, void *dscale, const void *dy,
			    const void *x, const float *stats, const void *scale, be_dtype t,
			    int64_t ld, int64_t b, int64_t n, int64_t d)
{
	if (flux_type_ok(be, "ln_mod_bwd", t))
		check(be, launch_ln_mod_bwd(dx, dshift, dscale, dy, x, stats, scale, t, ld, b, n, d,
					    st(be)->stream),
		      "ln_mod_bwd");
}

static void cuda_gate_add(backend *be, void *x, const void *gate, const void *y, be_dtype t,
			  int64_t ld, int64_t b, int64_t n, int64_t d)
{
	if (flux_type_ok(be, "gate_add", t))
		check(be, launch_gate_add(x, gate, y, t, ld, b, n, d, st(be)->stream), "gate_add");
}

static void cuda_gate_add_bwd(backend *be, void *dgate, void *dy, const void *dx,
			      const void *gate, const void *y, be_dtype t, int64_t ld, int64_t b,
			      int64_t n, int64_t d)
{
	if (flux_type_ok(be, "gate_add_bwd", t))
		check(be, launch_gate_add_bwd(dgate, dy, dx, gate, y, t, ld, b, n, d,
					      st(be)->stream),
		      "gate_add_bwd");
}

static void cuda_gelu_tanh_fwd(backend *be, void *y, const void *x, be_dtype t, int64_t n)
{
	if (flux_type_ok(be, "gelu_tanh_fwd", t))
		check(be, launch_gelu_tanh(y, x, NULL, t, n, st(be)->stream), "gelu_tanh_fwd");
}

static void cuda_gelu_tanh_bwd(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			       int64_t n)
{
	if (flux_type_ok(be, "gelu_tanh_bwd", t))
		check(be, launch_gelu_tanh(dx, x, dy, t, n, st(be)->stream), "gelu_tanh_bwd");
}

static void cuda_silu_fwd(backend *be, void *y, const void *x, be_dtype t, int64_t n)
{
	if (flux_type_ok(be, "silu_fwd", t))
		check(be, launch_silu(y, x, NULL, t, n, st(be)->stream), "silu_fwd");
}

static void cuda_silu_bwd(backend *be, void *dx, const void *dy, const void *x, be_dtype t,
			  int64_t n)
{
	if (flux_type_ok(be, "silu_bwd", t))
		check(be, launch_silu(dx, x, dy, t, n, st(be)->stream), "silu_bwd");
}

/* Each block's partial sum to scratch, then in block order to a loss slot
 * that the next sync adds to *loss_sum, *count. */
#define MSE_PARTS 256

static void cuda_flow_mse(backend *be, void *grad, const void *pred, const void *x,
			  const void *noise, be_dtype t, int64_t n, float grad_scale,
			  double *loss_sum, int64_t *count)
{
	cuda_state *s = st(be);
	if (!flux_type_ok(be, "flow_mse", t))
		return;
	int slot = loss_slot(be, "flow_mse");
	double *part = slot < 0 ? NULL : scratch(be, MSE_PARTS * sizeof(double), "flow_mse");
	if (!part)
		return;
	if (check(be, launch_flow_mse(grad, pred, x, noise, t, n, grad_scale, part, MSE_PARTS,
				      &s->slots[slot].sum, &s->slots[slot].n, s->stream),
		  "flow_mse"))
		return;
	loss_slot_done(be, slot, loss_sum, count);
}

static void cuda_conv_bias(backend *be, void *y, const void *b, be_dtype t, int64_t n, int64_t c,
			   int64_t hw)
{
	if (types_ok(be, "conv_bias", 1, t))
		check(be, launch_conv_bias(y, b, t, n, c, hw, st(be)->stream), "conv_bias");
}

static void cuda_softmax_exp(backend *be, void *e, be_dtype et, float *sum, const float *s,
			     int64_t rows, int64_t n)
{
	if (types_ok(be, "softmax_exp", 1, et))
		check(be, launch_softmax_exp(e, et, sum, s, rows, n, st(be)->stream), "softmax_exp");
}

static void cuda_div_rows(backend *be, void *y, be_dtype yt, const float *x, const float *sum,
			  int64_t rows, int64_t d)
{
	if (types_ok(be, "div_rows", 1, yt))
		check(be, launch_div_rows(y, yt, x, sum, rows, d, st(be)->stream), "div_rows");
}

static const backend_ops cuda_ops = {
	.name = "cuda",
	.alloc = cuda_alloc,
	.free = cuda_free,
	.destroy = cuda_destroy,
	.copy = cuda_copy,
	.zero = cuda_zero,
	.sync = cuda_sync,
	.convert = cuda_convert,
	.matmul = cuda_matmul,
	.rmsnorm_fwd = cuda_rmsnorm_fwd,
	.rmsnorm_bwd = cuda_rmsnorm_bwd,
	.rope = cuda_rope,
	.attention_fwd = cuda_attention_fwd,
	.attention_bwd = cuda_attention_bwd,
	.swiglu_fwd = cuda_swiglu_fwd,
	.swiglu_bwd = cuda_swiglu_bwd,
	.heads_cat = cuda_heads_cat,
	.heads_split = cuda_heads_split,
	.embedding_fwd = cuda_embedding_fwd,
	.embedding_bwd = cuda_embedding_bwd,
	.cross_entropy = cuda_cross_entropy,
	.f8_amax = cuda_f8_amax,
	.f8_cast = cuda_f8_cast,
	.f8_matmul = cuda_f8_matmul,
	.add = cuda_add,
	.axpy = cuda_axpy,
	.scale = cuda_scale,
	.lerp = cuda_lerp,
	.adamw_bf16_states = cuda_adamw_bf16_states,
	.sumsq = cuda_sumsq,
	.adamw = cuda_adamw,
	.rmsnorm_add_fwd = cuda_rmsnorm_add_fwd,
	.rmsnorm_add_bwd = cuda_rmsnorm_add_bwd,
	.rope_qkv = cuda_rope_qkv,
	.rope_qkv_bwd = cuda_rope_qkv_bwd,
	.lm_head_loss = cuda_lm_head_loss,
	.sumsq_dev = cuda_sumsq_dev,
	.clip_factor = cuda_clip_factor,
	.adamw_multi = cuda_adamw_multi,
	.bias_add = cuda_bias_add,
	.bias_grad = cuda_bias_grad,
	.t5_attention = cuda_t5_attention,
	.geglu_fwd = cuda_geglu_fwd,
	.swish = cuda_swish,
	.layernorm_fwd = cuda_layernorm_fwd,
	.groupnorm_fwd = cuda_groupnorm_fwd,
	.upsample2x = cuda_upsample2x,
	.im2col = cuda_im2col,
	.ln_mod_fwd = cuda_ln_mod_fwd,
	.ln_mod_bwd = cuda_ln_mod_bwd,
	.gate_add = cuda_gate_add,
	.gate_add_bwd = cuda_gate_add_bwd,
	.gelu_tanh_fwd = cuda_gelu_tanh_fwd,
	.gelu_tanh_bwd = cuda_gelu_tanh_bwd,
	.silu_fwd = cuda_silu_fwd,
	.silu_bwd = cuda_silu_bwd,
	.flow_mse = cuda_flow_mse,
	.conv_bias = cuda_conv_bias,
	.softmax_exp = cuda_softmax_exp,
	.div_rows = cuda_div_rows,
};

/* --- creation --- */

static int state_init(cuda_state *s, const backend_cuda_opts *o, titan_err *e)
{
	s->device = o->device;
	s->attention = o->attention;
	if (gpu_set_device(o->device, e) != 0)
		return -1;
	size_t bytes = o->arena_bytes;
	if (bytes == 0) {
		size_t free_b, total_b;
		if (gpu_mem_info(&free_b, &total_b, e) != 0)
			return -1;
		if (free_b <= 2 * BACKEND_CUDA_RESERVE_BYTES)
			return err_set(e, "cuda backend: %zu bytes free on device %d: too little for an "
					  "arena",
				       free_b, o->device);
		bytes = free_b - BACKEND_CUDA_RESERVE_BYTES;
	}
	if (!(s->stream = gpu_stream_create(e)) || !(s->arena = gpu_arena_create(bytes, e)))
		return -1;
	if (!(s->gemm_ws = gpu_arena_alloc(s->arena, GPU_GEMM_WORKSPACE, e)) ||
	    !(s->gemm = gpu_gemm_create(s->gemm_ws, GPU_GEMM_WORKSPACE, e)) ||
	    !(s->slots = gpu_arena_alloc(s->arena, LOSS_SLOTS * sizeof s->slots[0], e)))
		return -1;
	if (!(s->pending = calloc(LOSS_SLOTS, sizeof *s->pending)))
		return err_set(e, "cuda backend: out of host memory");
	titan_err why;
	if (!(s->cudnn = gpu_attn_create(&why))) {
		snprintf(s->cudnn_why, sizeof s->cudnn_why, "%s", why.msg);
		if (gpu_attn_cudnn_version() > 0) /* built in, yet it would not start */
			titan_warn("cuda backend: attention runs on titan's reference kernels, not "
				   "cuDNN: %s", why.msg);
	}
	snprintf(s->att_path, sizeof s->att_path, "none yet");
	return 0;
}

backend *backend_cuda_create(const backend_cuda_opts *o, titan_err *e)
{
	backend *be = calloc(1, sizeof *be);
	cuda_state *s = calloc(1, sizeof *s);
	if (!be || !s) {
		free(be);
		free(s);
		err_set(e, "cuda backend: out of host memory");
		return NULL;
	}
	be->ops = &cuda_ops;
	be->impl = s;
	be->threads = 1;
	if (state_init(s, o, e) != 0) {
		err_prefix(e, "cuda backend on device %d", o->device);
		cuda_destroy(be);
		return NULL;
	}
	count_memory(be);
	return be;
}

int backend_is_cuda(const backend *be)
{
	return be && be->ops == &cuda_ops;
}

const char *backend_cuda_attention_path(const backend *be)
{
	return st(be)->att_path;
}

size_t backend_cuda_arena_bytes(const backend *be)
{
	return gpu_arena_size(st(be)->arena);
}

size_t backend_cuda_high_water(const backend *be)
{
	return gpu_arena_high_water(st(be)->arena);
}

void *backend_cuda_stream(const backend *be)
{
	return st(be)->stream;
}

unsigned backend_cuda_scratch_epoch(const backend *be)
{
	return st(be)->scratch_epoch;
}

/* --- CUDA graphs --- */

int backend_cuda_capture_begin(backend *be, titan_err *e)
{
	cuda_state *s = st(be);
	if (s->capturing)
		return err_set(e, "cuda backend: a capture is already under way");
	if (cuda_sync(be, e) != 0) /* settle what came before: the graph's losses are its own */
		return -1;
	if (gpu_graph_begin(s->stream, e) != 0)
		return -1;
	s->capturing = 1;
	return 0;
}

backend_cuda_graph *backend_cuda_capture_end(backend *be, titan_err *e)
{
	cuda_state *s = st(be);
	if (!s->capturing) {
		err_set(e, "cuda backend: no capture under way");
		return NULL;
	}
	s->capturing = 0;
	gpu_graph *g = gpu_graph_end(s->stream, e);
	backend_cuda_graph *bg = g ? calloc(1, sizeof *bg) : NULL;
	if (g && bg && s->npending > 0 &&
	    !(bg->pending = malloc((size_t)s->npending * sizeof *bg->pending))) {
		free(bg);
		bg = NULL;
	}
	if (!bg) {
		if (g)
			err_set(e, "cuda backend: out of host memory");
		gpu_graph_free(g);
		s->npending = 0;
		backend_take_fault(be, NULL);
		return NULL;
	}
	bg->g = g;
	bg->npending = s->npending;
	if (s->npending)
		memcpy(bg->pending, s->pending, (size_t)s->npending * sizeof *bg->pending);
	s->npending = 0; /* nothing ran yet: the losses come with each replay */
	if (backend_take_fault(be, e) != 0) {
		backend_cuda_graph_free(bg);
		return NULL;
	}
	return bg;
}

int backend_cuda_replay(backend *be, backend_cuda_graph *g, titan_err *e)
{
	cuda_state *s = st(be);
	if (s->npending != 0 && g->npending != 0 && cuda_sync(be, e) != 0)
		return -1; /* the recording writes slots 0.. */
	if (gpu_graph_launch(g->g, s->stream, e) != 0)
		return -1;
	if (g->npending) {
		memcpy(s->pending, g->pending, (size_t)g->npending * sizeof *g->pending);
		s->npending = g->npending;
	}
	return 0;
}

void backend_cuda_graph_free(backend_cuda_graph *g)
{
	if (!g)
		return;
	gpu_graph_free(g->g);
	free(g->pending);
	free(g);
}
