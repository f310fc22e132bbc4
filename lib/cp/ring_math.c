/* One rank's ring attention, block by block: the backend's attention op on
 * each (query chunk, key chunk) pair the causal mask (and the documents)
 * leave, one sequence of the batch at a time (a chunk of one sequence is
 * contiguous in every layout, a chunk of several is not; under ptrr each row
 * has its own layout), the partial outputs merged by log-sum-exp on the host
 * in float32, the backward's shares summed in float32 by the backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp/cp.h"

struct cp_ring {
	backend *be;
	cp_layout l;
	int rank;
	be_attn s;          /* the local shape */
	int64_t T, c;       /* local length, chunk */
	int *maps;          /* (b, cp_map_len): each row's chunks (cp_row_map) */
	const int32_t *doc; /* backend (b, seq_len) document starts, or NULL */
	const int32_t *doc_host; /* the caller's host copy of doc: the layout and the
				    blocks to skip come from it, with no copy back */
	/* forward */
	const void *q;
	float *acc_out;     /* host (b, T, h, hdv) */
	float *acc_lse;     /* host (chunks, b, h, c) */
	float *h_out;       /* host (c, h, hdv): one block's out */
	float *h_lse;       /* host (h, c) */
	void *t_out;        /* backend (c, h, hdv) of the out type */
	float *t_out32;     /* backend (c, h, hdv) float32; also the merged out on its way back */
	float *t_lse;       /* backend (h, c) */
	float *d_out32;     /* backend (b, T, h, hdv) float32 */
	/* backward */
	const void *dout, *out;
	const float *lse;
	float *dq_acc;      /* backend (b, T, h, hd) float32 */
	void *t_dq, *t_dk, *t_dv; /* backend (c, h|hkv, hd|hdv) of the grad type */
};

static void *dev(cp_ring *r, size_t bytes, titan_err *e)
{
	return r->be->ops->alloc(r->be, bytes ? bytes : 1, e);
}

int64_t cp_ring_k_numel(const cp_ring *r)
{
	return r->s.b * r->T * r->s.hkv * r->s.hd;
}

int64_t cp_ring_v_numel(const cp_ring *r)
{
	return r->s.b * r->T * r->s.hkv * r->s.hdv;
}

/* The backend buffers of a ring, in the order of its members t_out ..
 * t_dv: a block's out (out type) and as float32, its lse; the merged out as
 * float32, the dq sums; a block's dq, dk, dv (grad type). */
enum { RING_BUFS = 8 };

static void ring_sizes(const be_attn *s, size_t c, size_t sz[RING_BUFS])
{
	size_t rows = (size_t)s->b * (size_t)s->tq, hv = (size_t)(s->h * s->hdv);
	size_t g = be_dtype_size(s->grad);
	size_t v[RING_BUFS] = {c * hv * be_dtype_size(s->out), c * hv * 4, c * (size_t)s->h * 4,
			       rows * hv * 4, rows * (size_t)(s->h * s->hd) * 4,
			       c * (size_t)(s->h * s->hd) * g, c * (size_t)(s->hkv * s->hd) * g,
			       c * (size_t)(s->hkv * s->hdv) * g};
	memcpy(sz, v, sizeof v);
}

size_t cp_ring_bytes(const cp_layout *l, const be_attn *shape)
{
	size_t sz[RING_BUFS], total = 0;
	ring_sizes(shape, (size_t)l->chunk, sz);
	for (int i = 0; i < RING_BUFS; i++)
		total += sz[i];
	return total;
}

cp_ring *cp_ring_create(backend *be, const cp_layout *l, int rank, const be_attn *shape,
			titan_err *e)
{
	int64_t T = cp_local_len(l), c = l->chunk;
	if (shape->tq != T || shape->tk != T || !shape->causal || rank < 0 || rank >= l->cp) {
		err_set(e, "ring attention: rank %d of %d, %lld queries and %lld keys a rank "
			"(%lld expected), causal %d", rank, l->cp, (long long)shape->tq,
			(long long)shape->tk, (long long)T, shape->causal);
		return NULL;
	}
	/* the blocks are cut by chunk only: a mask by distance or by position
	 * chunk, or sinks in the softmax, would need the ring to know them */
	if (shape->window || shape->chunk || shape->sinks) {
		err_set(e, "ring attention: sliding windows, chunked attention and attention "
			"sinks (GPT-OSS, Llama 4) are not supported under context parallelism");
		return NULL;
	}
	cp_ring *r = calloc(1, sizeof *r);
	if (r == NULL) {
		err_set(e, "ring attention: out of memory");
		return NULL;
	}
	*r = (cp_ring){.be = be, .l = *l, .rank = rank, .s = *shape, .T = T, .c = c};
	r->s.doc = r->s.doc_host = NULL;
	r->s.doc_t = 0;
	const be_attn *s = shape;
	size_t rows = (size_t)(s->b * T), crow = (size_t)c, nmap = (size_t)cp_map_len(l);
	r->acc_out = malloc(rows * (size_t)(s->h * s->hdv) * sizeof(float));
	r->acc_lse = malloc(rows * (size_t)s->h * sizeof(float));
	r->h_out = malloc(crow * (size_t)(s->h * s->hdv) * sizeof(float));
	r->h_lse = malloc(crow * (size_t)s->h * sizeof(float));
	r->maps = malloc((size_t)s->b * nmap * sizeof *r->maps);
	if (!r->acc_out || !r->acc_lse || !r->h_out || !r->h_lse || !r->maps) {
		err_set(e, "ring attention: out of memory");
		cp_ring_free(r);
		return NULL;
	}
	size_t sz[RING_BUFS];
	ring_sizes(shape, (size_t)c, sz);
	for (int64_t bi = 0; bi < s->b; bi++)
		cp_row_map(l, NULL, r->maps + bi * (int64_t)nmap, e); /* fixed: cannot fail */
	void **d[RING_BUFS] = {&r->t_out, (void **)&r->t_out32, (void **)&r->t_lse,
			       (void **)&r->d_out32, (void **)&r->dq_acc, &r->t_dq, &r->t_dk, &r->t_dv};
	int ok = 1;
	for (int i = 0; i < RING_BUFS && ok; i++)
		ok = (*d[i] = dev(r, sz[i], e)) != NULL;
	if (!ok) {
		err_prefix(e, "ring attention buffers");
		cp_ring_free(r);
		return NULL;
	}
	return r;
}

void cp_ring_free(cp_ring *r)
{
	if (r == NULL)
		return;
	backend *be = r->be;
	void *d[] = {r->t_out, r->t_out32, r->t_lse, r->d_out32, r->dq_acc, r->t_dq, r->t_dk,
		     r->t_dv};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		if (d[i])
			be->ops->free(be, d[i]);
	free(r->acc_out);
	free(r->acc_lse);
	free(r->h_out);
	free(r->h_lse);
	free(r->maps);
	free(r);
}

int cp_ring_set_docs(cp_ring *r, const int32_t *doc, const int32_t *doc_host, int64_t doc_t,
		     titan_err *e)
{
	const cp_layout *l = &r->l;
	int n = cp_map_len(l);
	r->doc = r->doc_host = NULL;
	if (doc == NULL) {
		if (!cp_layout_fixed(l))
			return err_set(e, "ring attention: the ptrr load balancer deals the blocks by "
				       "the documents' masks, and this attention has none");
		for (int64_t bi = 0; bi < r->s.b; bi++)
			cp_row_map(l, NULL, r->maps + bi * n, e);
		return 0;
	}
	if (doc_t != l->seq_len)
		return err_set(e, "ring attention: documents of rows of %lld positions for "
			       "sequences of %lld", (long long)doc_t, (long long)l->seq_len);
	/* copying doc back would wait for the backend at every call */
	if (doc_host == NULL)
		return err_set(e, "ring attention: documents without their host copy "
			       "(be_attn.doc_host)");
	for (int64_t bi = 0; bi < r->s.b; bi++)
		if (cp_row_map(l, doc_host + bi * doc_t, r->maps + bi * n, e))
			return -1;
	r->doc = doc;
	r->doc_host = doc_host;
	return 0;
}

/* The global chunk index of rank `owner`'s k-th chunk in row bi. */
static int chunk_at(const cp_ring *r, int64_t bi, int owner, int k)
{
	return r->maps[bi * cp_map_len(&r->l) + owner * r->l.chunks + k];
}

/* Whether the block of query chunk qa and key chunk kb of row bi is all
 * masked: keys after the queries, or (documents) ending before the first
 * query's document starts, the earliest start of the chunk's queries (read
 * from the host copy: deciding waits for nothing). */
static int hidden(const cp_ring *r, int64_t bi, int qa, int kb)
{
	if (kb > qa)
		return 1;
	return r->doc_host &&
	       (int64_t)(kb + 1) * r->c <= r->doc_host[bi * r->l.seq_len + qa * r->c];
}

/* Address of chunk k of sequence bi in a (b, T, n) tensor of elem bytes. */
static const char *at(const cp_ring *r, const void *base, int k, int64_t bi, int64_t n,
		      size_t elem)
{
	return (const char *)base + (size_t)((bi * r->T + k * r->c) * n) * elem;
}

/* The backend's call for query chunk at global index qa against key chunk kb
 * of row bi: one sequence, chunk x chunk, at their positions, with the row's
 * documents. */
static be_attn block_call(const cp_ring *r, int64_t bi, int qa, int kb)
{
	be_attn a = r->s;
	a.b = 1;
	a.tq = a.tk = r->c;
	a.q_pos0 = (int64_t)qa * r->c;
	a.k_pos0 = (int64_t)kb * r->c;
	a.causal = 1;
	if (r->doc) {
		a.doc = r->doc + bi * r->l.seq_len;
		a.doc_host = r->doc_host + bi * r->l.seq_len;
		a.doc_t = r->l.seq_len;
	}
	return a;
}

void cp_ring_fwd_begin(cp_ring *r, const void *q)
{
	size_t rows = (size_t)(r->s.b * r->T);
	r->q = q;
	memset(r->acc_out, 0, rows * (size_t)(r->s.h * r->s.hdv) * sizeof(float));
	for (size_t i = 0; i < rows * (size_t)r->s.h; i++)
		r->acc_lse[i] = -INFINITY;
}

/* Merge one block's (h_out, h_lse) into the accumulators of query chunk k of
 * sequence bi: lse = log(e^a + e^b), out = e^(a-lse) out_a + e^(b-lse) out_b,
 * in float32 with the exponent weights in double. */
static void merge(cp_ring *r, int k, int64_t bi)
{
	int64_t h = r->s.h, dv = r->s.hdv, c = r->c;
	float *lse = r->acc_lse + (size_t)((k * r->s.b + bi) * h * c);
	float *out = r->acc_out + (size_t)((bi * r->T + k * c) * h * dv);
	for (int64_t hh = 0; hh < h; hh++)
		for (int64_t i = 0; i < c; i++) {
			double lb = r->h_lse[hh * c + i], la = lse[hh * c + i];
			if (isinf(lb) && lb < 0)
				continue; /* this block hides every key from the row */
			float *o = out + (i * h + hh) * dv;
			const float *ob = r->h_out + (i * h + hh) * dv;
			double m = la > lb ? la : lb, L = m + log(exp(la - m) + exp(lb - m));
			float wa = (float)exp(la - L), wb = (float)exp(lb - L);
			for (int64_t d = 0; d < dv; d++)
				o[d] = wa * o[d] + wb * ob[d];
			lse[hh * c + i] = (float)L;
		}
}

int cp_ring_fwd_block(cp_ring *r, int owner, const void *k, const void *v, titan_err *e)
{
	backend *be = r->be;
	const be_attn *s = &r->s;
	size_t n_out = (size_t)(r->c * s->h * s->hdv), es = be_dtype_size(s->qkv);
	for (int64_t bi = 0; bi < s->b; bi++)
		for (int qk = 0; qk < r->l.chunks; qk++)
			for (int kk = 0; kk < r->l.chunks; kk++) {
				int qa = chunk_at(r, bi, r->rank, qk), kb = chunk_at(r, bi, owner, kk);
				if (hidden(r, bi, qa, kb))
					continue; /* the mask hides the whole block */
				be_attn a = block_call(r, bi, qa, kb);
				be->ops->attention_fwd(be, r->t_out, r->t_lse,
						       at(r, r->q, qk, bi, s->h * s->hd, es),
						       at(r, k, kk, bi, s->hkv * s->hd, es),
						       at(r, v, kk, bi, s->hkv * s->hdv, es), &a);
				const void *o32 = r->t_out;
				if (s->out != BE_F32) {
					be->ops->convert(be, r->t_out32, BE_F32, r->t_out, s->out,
							 (int64_t)n_out);
					o32 = r->t_out32;
				}
				be->ops->copy(be, r->h_out, o32, n_out * sizeof(float), BACKEND_D2H);
				be->ops->copy(be, r->h_lse, r->t_lse,
					      (size_t)(r->c * s->h) * sizeof(float), BACKEND_D2H);
				if (be->ops->sync(be, e))
					return err_prefix(e, "ring attention block (%d, %d)", qa, kb);
				merge(r, qk, bi);
			}
	return 0;
}

int cp_ring_fwd_end(cp_ring *r, void *out, float *lse, titan_err *e)
{
	backend *be = r->be;
	const be_attn *s = &r->s;
	size_t n = (size_t)(s->b * r->T * s->h * s->hdv);
	if (s->out == BE_F32) {
		be->ops->copy(be, out, r->acc_out, n * sizeof(float), BACKEND_H2D);
	} else {
		be->ops->copy(be, r->d_out32, r->acc_out, n * sizeof(float), BACKEND_H2D);
		be->ops->convert(be, out, s->out, r->d_out32, BE_F32, (int64_t)n);
	}
	be->ops->copy(be, lse, r->acc_lse, (size_t)(s->b * r->T * s->h) * sizeof(float),
		      BACKEND_H2D);
	return be->ops->sync(be, e);
}

void cp_ring_bwd_begin(cp_ring *r, const void *dout, const void *q, const void *out,
		       const float *lse)
{
	r->dout = dout;
	r->q = q;
	r->out = out;
	r->lse = lse;
	r->be->ops->zero(r->be, r->dq_acc,
			 (size_t)(r->s.b * r->T * r->s.h * r->s.hd) * sizeof(float));
}

int cp_ring_bwd_block(cp_ring *r, int owner, const void *k, const void *v, float *dk_acc,
		      float *dv_acc, titan_err *e)
{
	backend *be = r->be;
	const be_attn *s = &r->s;
	size_t eq = be_dtype_size(s->qkv), eo = be_dtype_size(s->out), ed = be_dtype_size(s->dout);
	int64_t c = r->c;
	for (int64_t bi = 0; bi < s->b; bi++)
		for (int qk = 0; qk < r->l.chunks; qk++)
			for (int kk = 0; kk < r->l.chunks; kk++) {
				int qa = chunk_at(r, bi, r->rank, qk), kb = chunk_at(r, bi, owner, kk);
				if (hidden(r, bi, qa, kb))
					continue;
				be_attn a = block_call(r, bi, qa, kb);
				const float *lse = r->lse + (size_t)((qk * s->b + bi) * s->h * c);
				be->ops->attention_bwd(be, r->t_dq, r->t_dk, r->t_dv,
						       at(r, r->dout, qk, bi, s->h * s->hdv, ed),
						       at(r, r->q, qk, bi, s->h * s->hd, eq),
						       at(r, k, kk, bi, s->hkv * s->hd, eq),
						       at(r, v, kk, bi, s->hkv * s->hdv, eq),
						       at(r, r->out, qk, bi, s->h * s->hdv, eo), lse, &a);
				be->ops->axpy(be, (void *)at(r, r->dq_acc, qk, bi, s->h * s->hd, 4),
					      BE_F32, 1, r->t_dq, s->grad, c * s->h * s->hd);
				be->ops->axpy(be, (void *)at(r, dk_acc, kk, bi, s->hkv * s->hd, 4),
					      BE_F32, 1, r->t_dk, s->grad, c * s->hkv * s->hd);
				be->ops->axpy(be, (void *)at(r, dv_acc, kk, bi, s->hkv * s->hdv, 4),
					      BE_F32, 1, r->t_dv, s->grad, c * s->hkv * s->hdv);
			}
	if (be->ops->sync(be, e))
		return err_prefix(e, "ring attention backward, keys of rank %d", owner);
	return 0;
}

int cp_ring_bwd_end(cp_ring *r, void *dq, titan_err *e)
{
	backend *be = r->be;
	const be_attn *s = &r->s;
	int64_t n = s->b * r->T * s->h * s->hd;
	if (s->grad == BE_F32)
		be->ops->copy(be, dq, r->dq_acc, (size_t)n * sizeof(float), BACKEND_D2D);
	else
		be->ops->convert(be, dq, s->grad, r->dq_acc, BE_F32, n);
	return be->ops->sync(be, e);
}
