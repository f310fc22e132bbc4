/* Tensor parallelism inside the model (model.h, model_tp): the sequence
 * all-gathers and reduce-scatters at the edges of the pieces, their fused
 * forms under async TP (collective matmuls round the ring of tp ranks), and
 * the loss over logits sharded by vocabulary. */
#include <string.h>

#include "model/model_priv.h"

/* Collectives do not return into the ops' void world: a failure becomes the
 * backend's fault, reported by the next sync. */
static void fail(model *m, const titan_err *e)
{
	backend_fault(m->be, "tensor parallel: %s", e->msg);
}

void model_tp_scratch(const model *m, size_t n, size_t chunk, size_t sz[5])
{
	memset(sz, 0, 5 * sizeof *sz);
	if (m->tp.size == 1)
		return;
	size_t p = (size_t)m->tp.size, d = (size_t)m->args.dim, ns = n / p;
	size_t a = be_dtype_size(m->prec.act), r = be_dtype_size(m->prec.resid);
	size_t v = (size_t)m->vocab_global, vc = (v + p - 1) / p;
	sz[0] = n * d * (a > r ? a : r);
	sz[1] = ns * d * a;
	sz[2] = m->tp.async ? 3 * ns * d * a : 0;
	if (m->tp.loss_parallel)
		sz[3] = (chunk * 3 + p * chunk * 3) * sizeof(float);
	else
		sz[4] = (chunk * v + p * chunk * vc + chunk * vc) * a;
}

void model_tp_gather(model *m, void *full, int64_t n, int64_t d, be_dtype t)
{
	if (m->tp.size == 1)
		return;
	model_tp_finish(m); /* one pending gather at a time */
	if (m->tp.async) {
		m->pend = full, m->pend_n = n, m->pend_d = d, m->pend_t = t;
		return;
	}
	size_t count = (size_t)(model_seq(m, n) * d);
	titan_err e;
	if (m->tp.all_gather(m->tp.ctx, full, elt(full, t, (size_t)m->tp.rank * count), count, t,
			     &e))
		fail(m, &e);
}

/* The pending gather round the ring: at step s this rank holds chunk
 * (rank - s) mod size, passes it on to rank + 1 and receives the next from
 * rank - 1, and meanwhile runs fn on the chunk it holds (when not NULL). */
typedef void chunk_fn(model *m, int chunk, void *arg);

static void ring_gather(model *m, chunk_fn *fn, void *arg)
{
	void *full = m->pend;
	m->pend = NULL;
	int p = m->tp.size, r = m->tp.rank;
	be_dtype t = m->pend_t;
	size_t count = (size_t)(model_seq(m, m->pend_n) * m->pend_d);
	titan_err e;
	for (int s = 0; s < p; s++) {
		int have = (r - s + p) % p, next = (r - s - 1 + p) % p;
		void *req = NULL;
		if (s < p - 1 && m->tp.ring_start(m->tp.ctx, elt(full, t, (size_t)have * count),
						  elt(full, t, (size_t)next * count), count, t, &req,
						  &e)) {
			fail(m, &e);
			return;
		}
		if (fn)
			fn(m, have, arg);
		if (req && m->tp.ring_wait(m->tp.ctx, req, &e)) {
			fail(m, &e);
			return;
		}
	}
}

void model_tp_finish(model *m)
{
	if (m->pend)
		ring_gather(m, NULL, NULL);
}

typedef struct linear_arg {
	void *y;
	const void *x, *w;
	int64_t ns, in, out;
	float beta;
	int dx;
} linear_arg;

/* One chunk's rows of a linear whose input is being gathered. */
static void linear_chunk(model *m, int c, void *arg)
{
	const linear_arg *l = arg;
	be_dtype t = m->prec.act;
	size_t xr = (size_t)(l->dx ? l->out : l->in), yr = (size_t)(l->dx ? l->in : l->out);
	void *y = elt(l->y, t, (size_t)c * (size_t)l->ns * yr);
	const void *x = elt(l->x, t, (size_t)c * (size_t)l->ns * xr);
	if (l->dx)
		model_linear_dx(m, y, x, l->w, l->ns, l->in, l->out, l->beta);
	else
		model_linear(m, y, x, l->w, l->ns, l->in, l->out, l->beta);
}

int model_tp_linear_pending(model *m, void *y, const void *x, const void *w, int64_t n,
			    int64_t in, int64_t out, float beta, int dx)
{
	/* a Float8 linear's scales span every row: it waits for them all */
	if (x != m->pend || n != m->pend_n || model_f8_converts(m, w)) {
		model_tp_finish(m);
		return 0;
	}
	linear_arg l = {y, x, w, model_seq(m, n), in, out, beta, dx};
	ring_gather(m, linear_chunk, &l);
	return 1;
}

void model_tp_scatter(model *m, void *part, const void *full, int64_t n, int64_t d, be_dtype t)
{
	titan_err e;
	if (m->tp.reduce_scatter(m->tp.ctx, part, full, (size_t)(model_seq(m, n) * d), t, &e))
		fail(m, &e);
}

/* The row-parallel linear's output, reduce-scattered round the ring as it is
 * computed: at step k a rank computes its partial sum of chunk
 * (rank - k - 1) mod size, adds the running sum received from rank - 1 and
 * passes it on to rank + 1; after size steps it holds the whole sum of its
 * own chunk. */
static void ring_reduce_linear(model *m, void *sum, const void *x, const void *w, int64_t n,
			       int64_t in, int64_t out)
{
	int p = m->tp.size, r = m->tp.rank;
	be_dtype t = m->prec.act;
	int64_t ns = model_seq(m, n);
	size_t cnt = (size_t)(ns * out);
	void *buf[2] = {m->ring, elt(m->ring, t, cnt)}, *recv = elt(m->ring, t, 2 * cnt);
	void *req = NULL;
	titan_err e;
	for (int k = 0; k < p; k++) {
		int c = ((r - k - 1) % p + p) % p;
		void *cur = buf[k & 1];
		model_linear(m, cur, elt(x, t, (size_t)c * (size_t)(ns * in)), w, ns, in, out, 0);
		if (req) {
			if (m->tp.ring_wait(m->tp.ctx, req, &e)) {
				fail(m, &e);
				return;
			}
			req = NULL;
			m->be->ops->axpy(m->be, cur, t, 1, recv, t, (int64_t)cnt);
		}
		if (k < p - 1 && m->tp.ring_start(m->tp.ctx, cur, recv, cnt, t, &req, &e)) {
			fail(m, &e);
			return;
		}
	}
	m->be->ops->copy(m->be, sum, buf[(p - 1) & 1], cnt * be_dtype_size(t), BACKEND_D2D);
}

void model_tp_resid_add_linear(model *m, void *y, const void *x, const void *w, int64_t n,
			       int64_t in, int64_t out)
{
	be_dtype at = m->prec.act;
	int64_t ns = model_seq(m, n);
	if (m->tp.async && !model_f8_converts(m, w)) { /* a Float8 input's scales span every row */
		ring_reduce_linear(m, m->d_xs, x, w, n, in, out);
	} else {
		model_linear(m, m->d_xn, x, w, n, in, out, 0);
		model_tp_scatter(m, m->d_xs, m->d_xn, n, out, at);
	}
	m->be->ops->axpy(m->be, y, m->prec.resid, 1, m->d_xs, at, ns * out);
}

/* Logits gathered over the vocabulary (disable_loss_parallel, torchtitan's
 * output with Replicate outputs): every rank computes the whole loss; the
 * gradient of its own columns goes back into logits. */
static void gathered_loss(model *m, void *logits, const int32_t *labels, int64_t c, float scale,
			  double *sum, int64_t *valid)
{
	backend *be = m->be;
	be_dtype at = m->prec.act;
	size_t es = be_dtype_size(at);
	int p = m->tp.size;
	int64_t v = m->vocab_global, vl = m->args.vocab_size, vc = (v + p - 1) / p;
	void *full = m->lg_full;                                       /* (c, v) */
	void *gath = elt(full, at, (size_t)(m->chunk * v));            /* (p, c, vc) */
	void *send = elt(gath, at, (size_t)(p * m->chunk * vc));       /* (c, vc) */
	const void *src = logits;
	if (vl != vc) { /* the last ranks' shares are short: padded to vc columns */
		be->ops->zero(be, send, (size_t)(c * vc) * es);
		for (int64_t i = 0; i < c; i++)
			be->ops->copy(be, elt(send, at, (size_t)(i * vc)), elt(logits, at, (size_t)(i * vl)),
				      (size_t)vl * es, BACKEND_D2D);
		src = send;
	}
	titan_err e;
	if (m->tp.all_gather(m->tp.ctx, gath, src, (size_t)(c * vc), at, &e)) {
		fail(m, &e);
		return;
	}
	for (int j = 0; j < p; j++) {
		int64_t vj = v - j * vc < vc ? v - j * vc : vc;
		for (int64_t i = 0; vj > 0 && i < c; i++)
			be->ops->copy(be, elt(full, at, (size_t)(i * v + j * vc)),
				      elt(gath, at, (size_t)((j * c + i) * vc)), (size_t)vj * es,
				      BACKEND_D2D);
	}
	be->ops->cross_entropy(be, full, at, labels, c, v, MODEL_IGNORE_INDEX, scale, sum, valid);
	for (int64_t i = 0; scale != 0 && i < c; i++)
		be->ops->copy(be, elt(logits, at, (size_t)(i * vl)), elt(full, at, (size_t)(i * v + m->v0)),
			      (size_t)vl * es, BACKEND_D2D);
}

void model_tp_loss(model *m, void *logits, const int32_t *labels, int64_t c, float scale,
		   double *sum, int64_t *valid)
{
	backend *be = m->be;
	if (!m->tp.loss_parallel) {
		gathered_loss(m, logits, labels, c, scale, sum, valid);
		return;
	}
	float *mine = m->ce_stats, *all = m->ce_stats + m->chunk * 3; /* (c, 3), (p, c, 3) */
	be->ops->ce_vocab_stats(be, logits, m->prec.act, labels, c, m->args.vocab_size, m->v0, mine);
	titan_err e;
	if (m->tp.all_gather(m->tp.ctx, all, mine, (size_t)(c * 3), BE_F32, &e)) {
		fail(m, &e);
		return;
	}
	be->ops->ce_vocab_loss(be, logits, m->prec.act, labels, c, m->args.vocab_size, m->v0,
			       MODEL_IGNORE_INDEX, all, m->tp.size, scale, sum, valid);
}
