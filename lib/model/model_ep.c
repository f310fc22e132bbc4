/* Expert parallelism in a mixture-of-experts layer (torchtitan 0.2.2's
 * ExpertParallel: _token_dispatch and _token_combine around the grouped
 * experts).  Each rank routes its own tokens over all E experts and sorts the
 * assignments by expert (model_moe.c); the rows of expert g then belong to the
 * rank holding g (rank g / el, el = E / ep experts each), and since they are
 * sorted they are one run of rows per destination.  The dispatch:
 *   1. the rows per expert, exchanged: all_to_all of el int32 per rank, so
 *      that each rank knows how many rows of each of its experts every rank
 *      sends;
 *   2. the rows, all_to_allv: received source by source, each source's rows
 *      by local expert;
 *   3. received rows regrouped expert by expert (source order within an
 *      expert), the layout the grouped matmuls read (torchtitan's
 *      generate_permute_indices);
 * the experts run on them, and the combine undoes 3 and 2: their outputs go
 * back to the ranks the rows came from, into the layer's ACT_EY as if the
 * experts had run there.  The backward sends the rows' gradients the same way
 * and brings the inputs' gradients back.  Under tensor parallelism (torchtitan
 * 0.2.2's expert_tensor_parallel_degree 1, ep borrowed from tp first) every
 * tp rank routes the gathered sequence alike and dispatches its own 1/tp
 * share of it (model_moe.c), through whole experts.  What a layer receives
 * varies with the routing: its rows and their activations live in one allocation per
 * layer, made by the forward and freed by the backward (or the next
 * forward); a forward whose layer the backward recomputes (activation
 * checkpointing) or that has no backward frees them at once. */
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

typedef struct moe_ep_layer {
	void *mem;        /* backend memory: the rows' indices and the activations
	                     the backward reads (xr, ea, eg, eh) */
	void *tmp;        /* backend memory: the rows in received order (buf) and,
	                     forward, the experts' outputs (ey); the backward's
	                     scratch */
	int64_t rows;     /* received: the rows this rank's experts compute */
	size_t *sc, *sd;  /* (ep) rows sent to each rank, from row sd[j] of the sorted rows */
	size_t *rc, *rd;  /* (ep) rows received from each rank, at row rd[j] */
	int32_t *offs;    /* (el + 1) each local expert's first row */
	int32_t *to_local;/* (rows) local row i is received row to_local[i] */
	int32_t *to_recv; /* (rows) received row i is local row to_recv[i] */
	int32_t *span;    /* (2) {0, rows}: the gathers' one group */
	void *buf;        /* (rows, dim) act: rows in received order */
	moe_rows v;       /* the experts' rows, local order */
} moe_ep_layer;

int model_ep_setup(model *m, const model_ep_group *ep, titan_err *e)
{
	m->ep = ep && ep->size > 1 ? *ep : (model_ep_group){.size = 1};
	m->el = m->args.moe.experts;
	if (m->ep.size == 1)
		return 0;
	int n = m->ep.size, ex = m->args.moe.experts;
	if (ex <= 0)
		return err_set(e, "model %s: expert parallel degree %d: the model has no experts",
			       m->args.name, n);
	if (ex % n || m->ep.rank < 0 || m->ep.rank >= n)
		return err_set(e, "model %s: expert parallel degree %d does not divide its %d "
			       "experts (rank %d)", m->args.name, n, ex, m->ep.rank);
	m->el = ex / n;
	m->epl = calloc((size_t)model_n_blocks(m), sizeof *m->epl);
	size_t *v = calloc(4 * (size_t)n * (size_t)model_n_blocks(m), sizeof *v);
	if (!m->epl || !v) {
		free(v);
		return err_set(e, "model: out of memory");
	}
	for (int l = 0; l < model_n_blocks(m); l++) {
		moe_ep_layer *x = &m->epl[l];
		x->sc = v + (size_t)l * 4 * (size_t)n;
		x->sd = x->sc + n, x->rc = x->sd + n, x->rd = x->rc + n;
	}
	return 0;
}

static void drop_layer(model *m, moe_ep_layer *x)
{
	if (x->mem)
		m->be->ops->free(m->be, x->mem);
	if (x->tmp)
		m->be->ops->free(m->be, x->tmp);
	x->mem = x->tmp = NULL;
}

void model_ep_free(model *m)
{
	if (!m->epl)
		return;
	for (int l = 0; l < model_n_blocks(m); l++)
		drop_layer(m, &m->epl[l]);
	free(m->epl[0].sc);
	free(m->epl);
	m->epl = NULL;
}

void model_ep_take_rows(model *m, int64_t *sent, int64_t *received)
{
	*sent = m->ep_sent;
	*received = m->ep_recv;
	m->ep_sent = m->ep_recv = 0;
}

static size_t al(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

/* Step 3's indices, on the host: the local experts' offsets (el + 1), then
 * to_local and to_recv (rows each), then the span {0, rows}; rcv (ep, el)
 * the rows each rank sends each local expert.  NULL when out of memory. */
static int32_t *regroup(const moe_ep_layer *x, const int32_t *rcv, int n, int el)
{
	int64_t rows = x->rows;
	int32_t *ix = malloc(((size_t)el + 3 + 2 * (size_t)rows) * sizeof(int32_t));
	if (!ix)
		return NULL;
	/* local order: expert by expert, source by source within an expert */
	int32_t *lo = ix, *to_local = ix + el + 1, *to_recv = to_local + rows;
	int32_t at = 0;
	for (int g = 0; g < el; g++) {
		lo[g] = at;
		for (int j = 0; j < n; j++) {
			int32_t first = (int32_t)x->rd[j];
			for (int k = 0; k < g; k++)
				first += rcv[j * el + k];
			for (int32_t r = 0; r < rcv[j * el + g]; r++, at++) {
				to_local[at] = first + r;
				to_recv[first + r] = at;
			}
		}
	}
	lo[el] = at;
	to_recv[rows] = 0, to_recv[rows + 1] = (int32_t)rows;
	return ix;
}

/* Step 1: the rows per expert of the sorted rows (offs_dev, E + 1) sent to
 * the experts' ranks; x's counts and displacements (in rows), and the
 * regrouping's indices into *idx (host, malloc'd). */
static int exchange_counts(model *m, moe_ep_layer *x, const int32_t *offs_dev, int32_t **idx,
			   titan_err *e)
{
	backend *be = m->be;
	int n = m->ep.size, el = m->el, ex = m->args.moe.experts;
	size_t cb = (size_t)ex * sizeof(int32_t);
	/* offs (E + 1), then the counts sent (E), overwritten by those received */
	int32_t *h = malloc(2 * cb + sizeof(int32_t)), *cnt = h + ex + 1;
	void *dev = be->ops->alloc(be, 2 * cb, e);
	if (!h || !dev) {
		free(h);
		if (dev)
			be->ops->free(be, dev);
		return err_set(e, "expert parallel: out of memory");
	}
	be->ops->copy(be, h, offs_dev, cb + sizeof(int32_t), BACKEND_D2H);
	for (int g = 0; g < ex; g++)
		cnt[g] = h[g + 1] - h[g];
	for (int j = 0; j < n; j++) {
		x->sd[j] = (size_t)h[j * el];
		x->sc[j] = (size_t)(h[(j + 1) * el] - h[j * el]);
	}
	be->ops->copy(be, dev, cnt, cb, BACKEND_H2D);
	int rc = m->ep.all_to_all_i32(m->ep.ctx, dev, (int32_t *)((char *)dev + cb), (size_t)el, e);
	if (rc == 0)
		be->ops->copy(be, cnt, (char *)dev + cb, cb, BACKEND_D2H); /* (ep, el) */
	be->ops->free(be, dev);
	int64_t rows = 0;
	for (int j = 0; rc == 0 && j < n; j++) {
		x->rd[j] = (size_t)rows;
		x->rc[j] = 0;
		for (int g = 0; g < el; g++)
			x->rc[j] += (size_t)cnt[j * el + g];
		rows += (int64_t)x->rc[j];
	}
	x->rows = rows;
	if (rc == 0 && !(*idx = regroup(x, cnt, n, el)))
		rc = err_set(e, "expert parallel: out of memory");
	free(h);
	return rc;
}

/* Carve n buffers of sz[i] bytes (0: NULL) out of one allocation *mem. */
static int carve(model *m, void **mem, const size_t *sz, void **out, int n, titan_err *e)
{
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += al(sz[i]);
	if (!(*mem = m->be->ops->alloc(m->be, total, e)))
		return -1;
	char *c = *mem;
	for (int i = 0; i < n; i++) {
		out[i] = sz[i] ? c : NULL;
		c += al(sz[i]);
	}
	return 0;
}

/* The layer's allocations for its received rows: the indices and what the
 * backward reads, kept; the staging rows and the outputs, for the forward. */
static int lay_out(model *m, moe_ep_layer *x, const int32_t *idx, titan_err *e)
{
	size_t a = be_dtype_size(m->prec.act), d = (size_t)m->args.dim, r = (size_t)x->rows;
	size_t in = (size_t)m->args.moe.inter_dim, el = (size_t)m->el;
	int gpt = m->args.moe.swiglu_limit > 0;
	size_t ib = (el + 3 + 2 * r) * sizeof(int32_t);
	size_t sz[5] = {ib, r * d * a, r * in * a * (gpt ? 2 : 1), gpt ? 0 : r * in * a, r * in * a};
	size_t tz[2] = {r * d * a, r * d * a};
	void *p[5], *t[2];
	if (carve(m, &x->mem, sz, p, 5, e) || carve(m, &x->tmp, tz, t, 2, e))
		return err_prefix(e, "expert parallel: %lld rows", (long long)x->rows);
	m->be->ops->copy(m->be, x->mem, idx, ib, BACKEND_H2D);
	x->offs = p[0];
	x->to_local = x->offs + el + 1;
	x->to_recv = x->to_local + r;
	x->span = x->to_recv + r;
	x->buf = t[0];
	x->v = (moe_rows){.rows = x->rows, .groups = m->el, .offs = x->offs, .xr = p[1],
			  .ea = p[2], .eg = p[3], .eh = p[4], .ey = t[1], .direct = 1};
	return 0;
}

/* dst's rows = src's rows idx[i] (a row permutation, rows x dim). */
static void permute_rows(model *m, moe_ep_layer *x, void *dst, const void *src,
			 const int32_t *idx)
{
	be_moe one = {.n = x->rows, .e = 1, .k = 1};
	if (x->rows > 0)
		m->be->ops->moe_gather(m->be, dst, src, m->prec.act, idx, x->span, NULL, &one,
				       m->args.dim);
}

/* The all_to_allv of rows: forward (sorted rows out to the experts' ranks)
 * or back (received rows home). */
static int send_rows(model *m, moe_ep_layer *x, const void *src, void *dst, int out,
		     titan_err *e)
{
	int n = m->ep.size;
	size_t d = (size_t)m->args.dim, v[4][64], *s[4];
	size_t *mine[4] = {x->sc, x->sd, x->rc, x->rd};
	size_t *heap = NULL;
	if (n > 64 && !(heap = malloc(4 * (size_t)n * sizeof *heap)))
		return err_set(e, "expert parallel: out of memory");
	for (int k = 0; k < 4; k++) {
		s[k] = heap ? heap + (size_t)k * n : v[k];
		for (int j = 0; j < n; j++)
			s[k][j] = mine[k][j] * d;
	}
	int rc = out ? m->ep.all_to_allv(m->ep.ctx, src, s[0], s[1], dst, s[2], s[3], m->prec.act, e)
		     : m->ep.all_to_allv(m->ep.ctx, src, s[2], s[3], dst, s[0], s[1], m->prec.act, e);
	free(heap);
	return rc;
}

static int ep_fwd(const piece_ctx *c, titan_err *e)
{
	model *m = c->m;
	moe_ep_layer *x = &m->epl[c->l];
	drop_layer(m, x);
	int32_t *idx = NULL;
	if (exchange_counts(m, x, piece_act(c, ACT_OFFS), &idx, e))
		return -1;
	int rc = lay_out(m, x, idx, e);
	free(idx);
	if (rc)
		return -1;
	size_t self = x->sc[m->ep.rank];
	for (int j = 0; j < m->ep.size; j++)
		m->ep_sent += (int64_t)x->sc[j], m->ep_recv += (int64_t)x->rc[j];
	m->ep_sent -= (int64_t)self, m->ep_recv -= (int64_t)self;
	if (send_rows(m, x, piece_act(c, ACT_XR), x->buf, 1, e))
		return -1;
	permute_rows(m, x, x->v.xr, x->buf, x->to_local);
	model_moe_experts_fwd(c, &x->v);
	permute_rows(m, x, x->buf, x->v.ey, x->to_recv);
	rc = send_rows(m, x, x->buf, piece_act(c, ACT_EY), 0, e);
	m->be->ops->free(m->be, x->tmp); /* the backward needs neither */
	x->tmp = x->buf = x->v.ey = NULL;
	return rc;
}

void model_ep_fwd(const piece_ctx *c, int keep)
{
	titan_err e = {{0}};
	if (ep_fwd(c, &e))
		backend_fault(c->m->be, "expert parallel (layer %d): %s", c->l, e.msg);
	if (!keep || e.msg[0])
		drop_layer(c->m, &c->m->epl[c->l]);
}

int model_ep_bwd(const piece_ctx *c, titan_err *e)
{
	model *m = c->m;
	moe_ep_layer *x = &m->epl[c->l];
	if (!x->mem)
		return err_set(e, "expert parallel: layer %d's backward without its forward's rows",
			       c->l);
	size_t a = be_dtype_size(m->prec.act), r = (size_t)x->rows;
	size_t in = (size_t)m->args.moe.inter_dim, d = (size_t)m->args.dim;
	int gpt = m->args.moe.swiglu_limit > 0;
	size_t sz[5] = {r * d * a, r * d * a, r * in * a, r * in * a * (gpt ? 2 : 1),
			gpt ? 0 : r * in * a};
	void *p[5];
	if (carve(m, &x->tmp, sz, p, 5, e))
		return err_prefix(e, "expert parallel: the backward of %lld rows", (long long)x->rows);
	x->buf = p[0];
	x->v.d_rows = p[1], x->v.d_eh = p[2], x->v.d_ea = p[3], x->v.d_eg = p[4];
	int rc = send_rows(m, x, m->d_rows, x->buf, 1, e);
	if (rc == 0) {
		permute_rows(m, x, x->v.d_rows, x->buf, x->to_local);
		rc = model_moe_experts_bwd(c, &x->v, e);
	}
	if (rc == 0) {
		permute_rows(m, x, x->buf, x->v.d_rows, x->to_recv);
		rc = send_rows(m, x, x->buf, m->d_rows, 0, e);
	}
	drop_layer(m, x);
	return rc;
}
