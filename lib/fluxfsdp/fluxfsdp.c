/* fluxfsdp.c: the Flux transformer's shards and its unit hooks (fluxfsdp.h). */
#include "fluxfsdp/fluxfsdp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

typedef struct fsdp_param {
	int64_t rows, cols, chunk; /* chunk: rows per rank, ceil(rows / N) */
	int64_t soff;              /* its padded chunk's offset in the flat shard */
	int64_t foff;              /* its whole tensor's offset in the unit's */
} fsdp_param;

typedef struct scratch_buf {
	void *p;
	size_t bytes;
} scratch_buf;

typedef struct fsdp_unit {
	int p0, p1;       /* its parameters [p0, p1) */
	int64_t pad;      /* a rank's chunk of it: its parameters' padded chunks */
	int64_t numel;    /* its whole tensors */
	void *full;       /* gathered: the whole weights in the compute type */
	float *gfull;     /* in a backward: the whole gradients */
} fsdp_unit;

struct fluxfsdp {
	flux_model *m;
	backend *be;
	comm *shard, *rep, *host;
	int n, me;        /* the fsdp group's size, this rank's index */
	fsdp_param *p;
	int np;
	fsdp_unit *u;
	int nu;
	int64_t numel;    /* the flat shard's floats */
	float *w, *g;
	/* kept between units: the whole weights and gradients of the unit that
	 * holds them (wowner, gowner; -1 none), a converted chunk to send, and
	 * the padded chunks of a tensor whose rows do not divide */
	scratch_buf wbuf, gbuf, send, tmp;
	int wowner, gowner;
	size_t bytes, peak;
};

/* Backend memory, counted. */
static void *take(fluxfsdp *f, size_t bytes, titan_err *err)
{
	void *q = f->be->ops->alloc(f->be, bytes ? bytes : 1, err);
	if (q == NULL)
		return NULL;
	f->bytes += bytes;
	if (f->bytes > f->peak)
		f->peak = f->bytes;
	return q;
}

static void give(fluxfsdp *f, void *q, size_t bytes)
{
	if (q == NULL)
		return;
	f->be->ops->free(f->be, q);
	f->bytes -= bytes;
}

static size_t es(const fluxfsdp *f) { return be_dtype_size(flux_model_compute(f->m)); }

/* Each parameter's chunk and offsets, each unit's run of parameters (the
 * units are runs of the state-dict order: flux.h). */
static int lay_out(fluxfsdp *f, titan_err *err)
{
	f->np = flux_param_count(f->m);
	f->nu = flux_unit_count(f->m);
	f->p = calloc((size_t)f->np, sizeof *f->p);
	f->u = calloc((size_t)f->nu, sizeof *f->u);
	if (f->p == NULL || f->u == NULL)
		return err_set(err, "fsdp: out of memory for the shard table");
	int prev = -1;
	for (int i = 0; i < f->np; i++) {
		const flux_param *fp = flux_param_at(f->m, i);
		fsdp_param *q = &f->p[i];
		int k = flux_param_unit(f->m, i);
		fsdp_unit *u = &f->u[k];
		if (k != prev) {
			if (k != prev + 1)
				return err_set(err, "fsdp: unit %d's parameters are not one run", k);
			u->p0 = i;
			prev = k;
		}
		u->p1 = i + 1;
		q->rows = fp->shape[0];
		q->cols = fp->ndim == 2 ? fp->shape[1] : 1;
		q->chunk = (q->rows + f->n - 1) / f->n;
		q->soff = f->numel;
		q->foff = u->numel;
		u->pad += q->chunk * q->cols;
		u->numel += fp->numel;
		f->numel += q->chunk * q->cols;
	}
	return 0;
}

/* Rank j's rows of parameter q: [j * chunk, min(rows, (j + 1) * chunk)). */
static int64_t rows_of(const fsdp_param *q, int j)
{
	int64_t lo = (int64_t)j * q->chunk, hi = lo + q->chunk;
	hi = hi < q->rows ? hi : q->rows;
	return hi > lo ? hi - lo : 0;
}

fluxfsdp_rows fluxfsdp_param_rows(const fluxfsdp *f, int i)
{
	const fsdp_param *q = &f->p[i];
	return (fluxfsdp_rows){.row0 = (int64_t)f->me * q->chunk, .rows = rows_of(q, f->me),
			       .cols = q->cols, .off = q->soff};
}

/* A scratch buffer of at least bytes, kept for the next unit (a unit's
 * gathers and reductions reuse it rather than fault in fresh pages). */
static void *scratch(fluxfsdp *f, scratch_buf *b, size_t bytes, titan_err *err)
{
	if (b->bytes >= bytes)
		return b->p;
	give(f, b->p, b->bytes);
	b->bytes = 0;
	if ((b->p = take(f, bytes, err)) == NULL)
		return NULL;
	b->bytes = bytes;
	return b->p;
}

static void bind(fluxfsdp *f, const fsdp_unit *u)
{
	for (int i = u->p0; i < u->p1; i++) {
		const fsdp_param *q = &f->p[i];
		void *wc = u->full ? (char *)u->full + (size_t)q->foff * es(f) : NULL;
		float *g = u->gfull ? u->gfull + q->foff : NULL;
		flux_param_bind(f->m, i, wc, g);
	}
}

static comm_dtype comm_type(be_dtype t) { return t == BE_BF16 ? COMM_BF16 : COMM_F32; }

/* Whether q's rows divide among the ranks: then the ranks' chunks in rank
 * order are the whole tensor, and its collectives run on it in place. */
static int even(const fluxfsdp *f, const fsdp_param *q) { return q->chunk * f->n == q->rows; }

/* Parameter q's shard, in the compute type, all-gathered into the whole
 * tensor at full (through tmp, the padded chunks, when its rows do not
 * divide: the first rows x cols values of the gathered chunks are the tensor). */
static int gather_tensor(fluxfsdp *f, const fsdp_param *q, void *full, titan_err *err)
{
	be_dtype t = flux_model_compute(f->m);
	size_t e = es(f), n = (size_t)(q->chunk * q->cols);
	const void *send = f->w + q->soff;
	if (t != BE_F32) {
		void *cv = scratch(f, &f->send, n * e, err);
		if (cv == NULL)
			return -1;
		f->be->ops->convert(f->be, cv, t, send, BE_F32, (int64_t)n);
		send = cv;
	}
	void *recv = even(f, q) ? full : scratch(f, &f->tmp, f->n * n * e, err);
	if (recv == NULL || f->be->ops->sync(f->be, err) != 0)
		return -1;
	if (f->n == 1)
		f->be->ops->copy(f->be, recv, send, n * e, BACKEND_D2D);
	else if (comm_all_gather(f->shard, send, recv, n, comm_type(t), err) != 0)
		return -1;
	if (recv != full)
		f->be->ops->copy(f->be, full, recv, (size_t)(q->rows * q->cols) * e, BACKEND_D2D);
	return 0;
}

/* Unit k's buffer of bytes: the kept one b when no other unit holds it
 * (*owner), else a fresh one.  NULL on no memory. */
static void *unit_buffer(fluxfsdp *f, scratch_buf *b, int *owner, int k, size_t bytes,
			 titan_err *err)
{
	if (*owner >= 0)
		return take(f, bytes, err);
	void *p = scratch(f, b, bytes, err);
	if (p != NULL)
		*owner = k;
	return p;
}

/* The unit's whole weights, gathered. */
static int gather_weights(fluxfsdp *f, fsdp_unit *u, titan_err *err)
{
	int k = (int)(u - f->u);
	if ((u->full = unit_buffer(f, &f->wbuf, &f->wowner, k, (size_t)u->numel * es(f), err)) ==
	    NULL)
		return -1;
	for (int i = u->p0; i < u->p1; i++)
		if (gather_tensor(f, &f->p[i], (char *)u->full + (size_t)f->p[i].foff * es(f), err))
			return -1;
	return 0;
}

/* The unit's whole gradients, zeroed. */
static int unit_grads(fluxfsdp *f, fsdp_unit *u, titan_err *err)
{
	size_t bytes = sizeof(float) * (size_t)u->numel;
	if ((u->gfull = unit_buffer(f, &f->gbuf, &f->gowner, (int)(u - f->u), bytes, err)) == NULL)
		return -1;
	f->be->ops->zero(f->be, u->gfull, bytes);
	return 0;
}

static int hook_gather(void *ctx, int k, int grads, titan_err *err)
{
	fluxfsdp *f = ctx;
	fsdp_unit *u = &f->u[k];
	if (u->full == NULL && gather_weights(f, u, err) != 0)
		return err_prefix(err, "fsdp: gathering unit %d", k);
	if (grads && u->gfull == NULL && unit_grads(f, u, err) != 0)
		return err_prefix(err, "fsdp: unit %d's gradients", k);
	bind(f, u);
	return 0;
}

/* A unit's buffer back: the kept one to its pool, a fresh one freed. */
static void put_back(fluxfsdp *f, void **p, int *owner, int k, size_t bytes)
{
	if (*p == NULL)
		return;
	if (*owner == k)
		*owner = -1;
	else
		give(f, *p, bytes);
	*p = NULL;
}

static void hook_release(void *ctx, int k)
{
	fluxfsdp *f = ctx;
	fsdp_unit *u = &f->u[k];
	put_back(f, &u->full, &f->wowner, k, (size_t)u->numel * es(f));
	put_back(f, (void **)&u->gfull, &f->gowner, k, sizeof(float) * (size_t)u->numel);
	bind(f, u);
}

/* Parameter q's whole gradient g reduce-scattered into its shard (through
 * tmp, zero-padded chunks, when its rows do not divide). */
static int reduce_tensor(fluxfsdp *f, const fsdp_param *q, const float *g, titan_err *err)
{
	size_t n = (size_t)(q->chunk * q->cols);
	float *mine = f->g + q->soff;
	const float *send = g;
	if (!even(f, q)) {
		float *pad = scratch(f, &f->tmp, sizeof(float) * f->n * n, err);
		if (pad == NULL)
			return -1;
		f->be->ops->zero(f->be, pad, sizeof(float) * f->n * n);
		f->be->ops->copy(f->be, pad, g, sizeof(float) * (size_t)(q->rows * q->cols),
				 BACKEND_D2D);
		send = pad;
	}
	if (f->be->ops->sync(f->be, err) != 0)
		return -1;
	if (f->n == 1) {
		f->be->ops->copy(f->be, mine, send, sizeof(float) * n, BACKEND_D2D);
		return 0;
	}
	return comm_reduce_scatter(f->shard, send, mine, n, COMM_F32, COMM_SUM, err);
}

static int hook_reduce(void *ctx, int k, titan_err *err)
{
	fluxfsdp *f = ctx;
	fsdp_unit *u = &f->u[k];
	/* the unit's weights are not read again */
	put_back(f, &u->full, &f->wowner, k, (size_t)u->numel * es(f));
	int rc = 0;
	for (int i = u->p0; rc == 0 && i < u->p1; i++)
		rc = reduce_tensor(f, &f->p[i], u->gfull + f->p[i].foff, err);
	hook_release(f, k);
	float *mine = f->g + f->p[u->p0].soff;
	if (rc == 0 && f->rep != NULL)
		rc = comm_all_reduce(f->rep, mine, mine, (size_t)u->pad, COMM_F32, COMM_SUM, err);
	return rc != 0 ? err_prefix(err, "fsdp: reducing unit %d", k) : 0;
}

fluxfsdp *fluxfsdp_create(flux_model *m, comm *shard, comm *replicate, comm *host,
			  titan_err *err)
{
	fluxfsdp *f = calloc(1, sizeof *f);
	if (f == NULL) {
		err_set(err, "fsdp: out of memory");
		return NULL;
	}
	*f = (fluxfsdp){.m = m, .be = flux_model_backend(m), .shard = shard, .rep = replicate,
			.host = host ? host : shard, .n = shard ? comm_size(shard) : 1,
			.me = shard ? comm_rank(shard) : 0, .wowner = -1, .gowner = -1};
	if (lay_out(f, err) != 0)
		goto fail;
	size_t bytes = sizeof(float) * (size_t)f->numel;
	if ((f->w = take(f, bytes, err)) == NULL || (f->g = take(f, bytes, err)) == NULL) {
		err_prefix(err, "fsdp: a shard of %lld floats", (long long)f->numel);
		goto fail;
	}
	f->be->ops->zero(f->be, f->w, bytes);
	f->be->ops->zero(f->be, f->g, bytes);
	flux_model_set_units(m, &(flux_unit_hooks){.ctx = f, .gather = hook_gather,
						  .reduce = hook_reduce, .release = hook_release});
	return f;
fail:
	fluxfsdp_free(f);
	return NULL;
}

void fluxfsdp_free(fluxfsdp *f)
{
	if (f == NULL)
		return;
	for (int k = 0; k < f->nu && f->u != NULL; k++)
		hook_release(f, k);
	flux_model_set_units(f->m, NULL);
	scratch_buf *b[] = {&f->wbuf, &f->gbuf, &f->send, &f->tmp};
	for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
		give(f, b[i]->p, b[i]->bytes);
	give(f, f->w, sizeof(float) * (size_t)f->numel);
	give(f, f->g, sizeof(float) * (size_t)f->numel);
	free(f->p);
	free(f->u);
	free(f);
}

int64_t fluxfsdp_numel(const fluxfsdp *f) { return f->numel; }
float *fluxfsdp_weights(fluxfsdp *f) { return f->w; }
float *fluxfsdp_grads(fluxfsdp *f) { return f->g; }
size_t fluxfsdp_bytes(const fluxfsdp *f) { return f->bytes; }
size_t fluxfsdp_peak_bytes(const fluxfsdp *f) { return f->peak; }

size_t fluxfsdp_scratch_bytes(const fluxfsdp *f)
{
	return f->wbuf.bytes + f->gbuf.bytes + f->send.bytes + f->tmp.bytes;
}

int fluxfsdp_init(fluxfsdp *f, uint64_t seed, titan_err *err)
{
	int64_t most = 1;
	for (int i = 0; i < f->np; i++)
		most = flux_param_at(f->m, i)->numel > most ? flux_param_at(f->m, i)->numel : most;
	float *host = malloc(sizeof(float) * (size_t)most);
	if (host == NULL)
		return err_set(err, "fsdp init: out of memory for %lld floats", (long long)most);
	int rc = 0;
	for (int i = 0; i < f->np && rc == 0; i++) {
		fluxfsdp_rows r = fluxfsdp_param_rows(f, i);
		if (r.rows == 0)
			continue;
		flux_param_init(flux_param_at(f->m, i), i, seed, host);
		f->be->ops->copy(f->be, f->w + r.off, host + r.row0 * r.cols,
				 sizeof(float) * (size_t)(r.rows * r.cols), BACKEND_H2D);
		/* the upload may still read host: wait before the next tensor */
		rc = f->be->ops->sync(f->be, err);
	}
	free(host);
	return rc;
}

int fluxfsdp_clip(fluxfsdp *f, double max_norm, double *norm, titan_err *err)
{
	double ss = grad_sumsq(f->be, f->g, (size_t)f->numel);
	if (f->n > 1 && comm_all_reduce(f->host, &ss, &ss, 1, COMM_F64, COMM_SUM, err) != 0)
		return err_prefix(err, "fsdp: the gradients' norm");
	*norm = sqrt(ss);
	if (max_norm > 0)
		grad_clip_scale(f->be, f->g, (size_t)f->numel, *norm, max_norm);
	return 0;
}
