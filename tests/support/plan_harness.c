/* plan_harness.c: see plan_harness.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "plan_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int harness_tokens_make(harness_tokens *tk, int steps, int rows, int t, int vocab,
			uint64_t seed, titan_err *e)
{
	tk->rows = rows;
	tk->t = t;
	size_t n = (size_t)steps * (size_t)rows * (size_t)t;
	tk->ids = malloc((n + 1) * sizeof(int32_t));
	tk->labels = malloc((n + 1) * sizeof(int32_t));
	if (!tk->ids || !tk->labels) {
		harness_tokens_free(tk);
		return err_set(e, "harness: out of memory");
	}
	print_message("seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		tk->ids[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
		tk->labels[i] =
			(seed >> 20) % 9 == 0 ? -100 : (int32_t)((seed >> 41) % (uint64_t)vocab);
	}
	return 0;
}

void harness_tokens_free(harness_tokens *tk)
{
	free(tk->ids);
	free(tk->labels);
	tk->ids = tk->labels = NULL;
}

int harness_rank_open(harness_rank *k, comm *world, const mesh_degrees *want,
		      const case_args *a, int rows, int accum, titan_err *e)
{
	mesh_degrees d;
	titan_err why = {{0}};
	if (mesh_resolve(want, comm_size(world), &d, &why) != 0)
		return err_set(e, "%s \"%s\": %s", a->var, a->text, why.msg);
	if (mesh_create(world, &d, &k->m, e) != 0)
		return -1;
	k->dp = k->m->size[MESH_BATCH];
	k->r = k->m->coord[MESH_BATCH];
	k->accum = accum;
	if (accum < 1 || rows % (k->dp * accum) != 0)
		return err_set(e, "%s \"%s\": %d rows do not split into %d batch ranks x %d "
			       "micro-batches", a->var, a->text, rows, k->dp, accum);
	k->lb = rows / (k->dp * accum);
	return 0;
}

void harness_rank_rows(const harness_rank *k, const int32_t *step, int32_t *mine, int t)
{
	for (int j = 0; j < k->accum; j++)
		for (int i = 0; i < k->lb; i++) {
			size_t row = (size_t)(j * k->lb * k->dp + k->r * k->lb + i);
			memcpy(mine + ((size_t)j * k->lb + i) * (size_t)t, step + row * (size_t)t,
			       (size_t)t * sizeof(int32_t));
		}
}

void harness_step_batches(const harness_rank *k, const harness_tokens *tk, int s, int32_t *ids,
			  int32_t *labels, plan_batch *mine, plan_batch *whole)
{
	size_t at = (size_t)s * (size_t)tk->rows * (size_t)tk->t;
	*whole = (plan_batch){.inputs = tk->ids + at, .labels = tk->labels + at, .n_mb = 1};
	harness_rank_rows(k, whole->inputs, ids, tk->t);
	harness_rank_rows(k, whole->labels, labels, tk->t);
	*mine = (plan_batch){.inputs = ids, .labels = labels, .n_mb = k->accum};
}

/* Row r of step s's documents: each token's position in its document (t). */
static void doc_row(int r, int s, int t, int32_t *pos)
{
	int len = 1 + (r * 5 + s * 3) % 11, p = 0;
	for (int i = 0; i < t; i++) {
		if (p == len)
			p = 0, len = 1 + (len * 7 + 3) % 23;
		pos[i] = p++;
	}
}

void harness_doc_positions(const harness_rank *k, int rows, int t, int s, plan_batch *mine,
			   plan_batch *whole)
{
	static int32_t *all, *own;
	static size_t cap;
	size_t n = (size_t)rows * (size_t)t;
	if (n > cap) {
		free(all), free(own);
		all = malloc(n * sizeof *all), own = malloc(n * sizeof *own);
		cap = all && own ? n : 0;
		if (!cap)
			abort();
	}
	for (int r = 0; r < rows; r++)
		doc_row(r, s, t, all + (size_t)r * t);
	harness_rank_rows(k, all, own, t);
	whole->positions = all;
	mine->positions = own;
}

/* One label of a row that the mask left valid: a token below vocab. */
static int32_t some_label(int r, int s, int i, int vocab)
{
	return (int32_t)((r * 31 + s * 17 + i * 7) % vocab);
}

/* Step s's labels (rows, t; s 0-based) masked as harness_tokens_mask says:
 * each document's first half its prompt, every fifth row all but its last
 * label, on the first step one row wholly, on the second the second half of
 * the rows all but one label. */
static void mask_step(int32_t *lab, int32_t *pos, int rows, int t, int s, int vocab)
{
	for (int r = 0; r < rows; r++) {
		int32_t *row = lab + (size_t)r * (size_t)t;
		doc_row(r, s, t, pos);
		for (int i = 0; i < t; i++) {
			int len = 1; /* the document's length: to its next start */
			while (i - pos[i] + len < t && pos[i - pos[i] + len] != 0)
				len++;
			if (2 * pos[i] < len)
				row[i] = MODEL_IGNORE_INDEX;
		}
		int almost = (r + 2 * s) % 5 == 4, wholly = s == 0 && r == rows / 4;
		int half = s == 1 && r >= rows / 2;
		for (int i = 0; (almost || wholly || half) && i < t; i++)
			row[i] = MODEL_IGNORE_INDEX;
		if (almost && !wholly && !half)
			row[t - 1] = some_label(r, s, t - 1, vocab);
	}
	if (s == 1) /* the second half's one label */
		lab[(size_t)(rows - 3) * (size_t)t + (size_t)t / 2] =
			some_label(rows - 3, s, t / 2, vocab);
}

int harness_tokens_mask(harness_tokens *tk, int steps, int vocab, titan_err *e)
{
	size_t per = (size_t)tk->rows * (size_t)tk->t;
	int32_t *pos = malloc(((size_t)tk->t + 1) * sizeof *pos); /* (t) a row's positions */
	if (!pos)
		return err_set(e, "harness: out of memory");
	for (int s = 0; s < steps; s++)
		mask_step(tk->labels + (size_t)s * per, pos, tk->rows, tk->t, s, vocab);
	free(pos);
	return 0;
}

/* ---- the single process's run, on rank 0 ---- */

/* Rank 0's layout of the shard images: tensor count, buffer count, the
 * images' elements, then each tensor's offset and each buffer's size. */
static int share_layout(harness_ref *r, titan_err *e)
{
	int64_t h[3] = {0, 0, 0};
	if (r->p) {
		h[0] = model_num_tensors(plan_global_model(r->p));
		h[1] = model_num_buffers(plan_model(r->p));
		h[2] = (int64_t)plan_shard_numel(r->p);
	}
	if (comm_broadcast(r->world, h, 3, COMM_I64, 0, e) != 0)
		return -1;
	r->n_tensors = (int)h[0];
	r->n_buffers = (int)h[1];
	r->numel = (size_t)h[2];
	r->off = calloc((size_t)r->n_tensors + 1, sizeof *r->off);
	r->buf_numel = calloc((size_t)r->n_buffers + 1, sizeof *r->buf_numel);
	if (!r->off || !r->buf_numel)
		return err_set(e, "harness: out of memory");
	for (int i = 0; r->p && i < r->n_tensors; i++)
		r->off[i] = (int64_t)plan_box_at(r->p, i)->shard_off;
	for (int i = 0; r->p && i < r->n_buffers; i++)
		r->buf_numel[i] = (int64_t)model_buffer_at(plan_model(r->p), i)->numel;
	if (comm_broadcast(r->world, r->off, (size_t)r->n_tensors, COMM_I64, 0, e) != 0)
		return -1;
	return comm_broadcast(r->world, r->buf_numel, (size_t)r->n_buffers, COMM_I64, 0, e);
}

static size_t buffers_numel(const harness_ref *r)
{
	size_t n = 0;
	for (int i = 0; i < r->n_buffers; i++)
		n += (size_t)r->buf_numel[i];
	return n;
}

int harness_ref_open(harness_ref *r, comm *world, harness_make_plan *make, const void *ctx,
		     titan_err *e)
{
	memset(r, 0, sizeof *r);
	r->world = world;
	if (comm_rank(world) == 0) {
		if (!(r->be = backend_cpu_create(1, e)))
			return -1;
		r->p = make(r->be, ctx);
	}
	if (share_layout(r, e) != 0)
		return -1;
	/* +1: an empty image is still an allocation */
	r->grads1 = malloc((r->numel + 1) * sizeof(float));
	r->params = malloc((r->numel + 1) * sizeof(float));
	r->buffers = malloc((buffers_numel(r) + 1) * sizeof(float));
	if (!r->grads1 || !r->params || !r->buffers)
		return err_set(e, "harness: out of memory");
	return 0;
}

/* Rank 0's status after its part (1: done), sent with what it computed so
 * that the other ranks fail with it rather than wait out the timeout. */
static int share_status(harness_ref *r, double *msg, size_t n, const char *what, titan_err *e)
{
	titan_err bc;
	if (comm_broadcast(r->world, msg, n, COMM_F64, 0, &bc) != 0)
		return err_set(e, "%s", bc.msg);
	if (msg[0] != 1)
		return r->p ? -1 : err_set(e, "%s failed on rank 0 (its log says why)", what);
	return 0;
}

int harness_ref_step(harness_ref *r, int step, const plan_batch *b, double lr, double max_norm,
		     plan_result *out, titan_err *e)
{
	char what[64];
	snprintf(what, sizeof what, "reference step %d", step);
	double msg[4] = {0, 0, 0, 0}; /* done, loss, grad norm, valid labels */
	if (r->p) {
		plan_result res;
		titan_err why = {{0}};
		int rc = plan_step(r->p, b, lr, max_norm, &res, &why);
		if (rc == 0 && step == 1)
			rc = plan_shard_download(r->p, r->grads1, plan_shard_grads(r->p), &why);
		if (rc != 0) {
			err_set(e, "%s: %s", what, why.msg);
		} else {
			msg[0] = 1;
			msg[1] = res.loss;
			msg[2] = res.grad_norm;
			msg[3] = (double)res.n_valid; /* exact: far below 2^53 */
		}
	}
	if (share_status(r, msg, 4, what, e) != 0)
		return -1;
	*out = (plan_result){.loss = msg[1], .grad_norm = msg[2], .n_valid = (int64_t)msg[3]};
	if (step == 1)
		return comm_broadcast(r->world, r->grads1, r->numel, COMM_F32, 0, e);
	return 0;
}

/* Rank 0: the parameters and the buffers into r's images. */
static int take_final(harness_ref *r, titan_err *e)
{
	if (plan_shard_download(r->p, r->params, plan_shard_params(r->p), e) != 0)
		return -1;
	model *m = plan_model(r->p);
	size_t at = 0;
	for (int i = 0; i < r->n_buffers; i++) {
		model_buffer_read(m, model_buffer_at(m, i), r->buffers + at);
		at += (size_t)r->buf_numel[i];
	}
	return 0;
}

int harness_ref_finish(harness_ref *r, plan *dist, harness_diff *d, titan_err *e)
{
	double done = r->p ? take_final(r, e) == 0 : 0;
	if (share_status(r, &done, 1, "the single process's final parameters", e) != 0 ||
	    comm_broadcast(r->world, r->params, r->numel, COMM_F32, 0, e) != 0 ||
	    comm_broadcast(r->world, r->buffers, buffers_numel(r), COMM_F32, 0, e) != 0)
		return -1;
	return harness_compare(dist, r, 0, d, e);
}

void harness_ref_free(harness_ref *r)
{
	if (r->p)
		plan_free(r->p);
	if (r->be)
		backend_free(r->be);
	free(r->off);
	free(r->buf_numel);
	free(r->grads1);
	free(r->params);
	free(r->buffers);
	memset(r, 0, sizeof *r);
}

/* ---- the comparisons ---- */

static double rel(double a, double b)
{
	return fabs(a - b) / fabs(b);
}

int harness_check_step(harness_gap *g, int rank, int step, const plan_result *got,
		       const plan_result *want, double loss_tol, double norm_tol, titan_err *e)
{
	g->loss = rel(got->loss, want->loss);
	g->norm = rel(got->grad_norm, want->grad_norm);
	g->worst_loss = g->loss > g->worst_loss ? g->loss : g->worst_loss;
	g->worst_norm = g->norm > g->worst_norm ? g->norm : g->worst_norm;
	if (got->n_valid != want->n_valid)
		return err_set(e, "rank %d step %d: %lld valid labels, the single process %lld",
			       rank, step, (long long)got->n_valid, (long long)want->n_valid);
	if (g->loss > loss_tol || g->norm > norm_tol)
		return err_set(e, "rank %d step %d: loss %.10f vs %.10f (rel %.2e), grad norm "
			       "%.10f vs %.10f (rel %.2e)", rank, step, got->loss, want->loss,
			       g->loss, got->grad_norm, want->grad_norm, g->norm);
	return 0;
}

/* One tensor: this rank's box x of it (mine, row-major) against the same box
 * of the whole tensor, into d. */
static void compare_box(const model_tensor *t, const plan_box *x, const float *mine,
			const float *whole, harness_diff *d)
{
	int64_t z[3] = {1, 1, 1}, o[3] = {0, 0, 0}, s[3] = {1, 1, 1};
	for (int k = 0; k < x->ndim && k < 3; k++) {
		z[k] = x->sizes[k];
		o[k] = x->offsets[k];
		s[k] = t->shape[k];
	}
	double num = 0, big = 0, scale = 0; /* max |a - b|, max |b| of the box, of the tensor */
	size_t n = 0;
	for (int64_t r = 0; x->numel && r < z[0]; r++)
		for (int64_t j = 0; j < z[1]; j++)
			for (int64_t l = 0; l < z[2]; l++) {
				double w = whole[((o[0] + r) * s[1] + o[1] + j) * s[2] + o[2] + l];
				double diff = fabs((double)mine[n++] - w);
				d->sumsq += diff * diff;
				num = diff > num ? diff : num;
				big = fabs(w) > big ? fabs(w) : big;
			}
	for (size_t k = 0; k < t->numel; k++)
		scale = fabs(whole[k]) > scale ? fabs(whole[k]) : scale;
	scale = scale > 0 ? scale : 1;
	d->n += n;
	if (num > d->worst)
		d->worst = num, d->worst_at = t->fqn;
	if (big > 0 && num / big > d->of_box)
		d->of_box = num / big;
	if (num / scale > d->of_tensor)
		d->of_tensor = num / scale, d->of_tensor_at = t->fqn;
}

int harness_compare(plan *dist, const harness_ref *r, int grads, harness_diff *d,
		    titan_err *e)
{
	const model *g = plan_global_model(dist);
	if (model_num_tensors(g) != r->n_tensors)
		return err_set(e, "harness: %d tensors, the single process's %d",
			       model_num_tensors(g), r->n_tensors);
	float *mine = malloc((plan_shard_numel(dist) + 1) * sizeof(float));
	if (!mine)
		return err_set(e, "harness: out of memory");
	void *dev = grads ? plan_shard_grads(dist) : plan_shard_params(dist);
	if (plan_shard_download(dist, mine, dev, e) != 0) {
		free(mine);
		return -1;
	}
	*d = (harness_diff){0, "-", 0, 0, "-", 0, 0};
	const float *whole = grads ? r->grads1 : r->params;
	for (int i = 0; i < r->n_tensors; i++) {
		const plan_box *x = plan_box_at(dist, i);
		compare_box(model_tensor_at(g, i), x, mine + x->shard_off, whole + r->off[i], d);
	}
	free(mine);
	return 0;
}

/* Buffer i of model a (read into x, its numel) against y, into *worst and *size. */
static void compare_buffer(model *a, int i, float *x, const float *y, double *worst,
			   double *size)
{
	const model_tensor *t = model_buffer_at(a, i);
	model_buffer_read(a, t, x);
	for (size_t j = 0; j < t->numel; j++) {
		double d = fabs((double)x[j] - (double)y[j]);
		*worst = d > *worst ? d : *worst;
		*size = fabs(y[j]) > *size ? fabs(y[j]) : *size;
	}
}

/* The buffers of model a are the single process's in number and sizes. */
static int same_buffers(model *a, const harness_ref *r, titan_err *e)
{
	if (model_num_buffers(a) != r->n_buffers)
		return err_set(e, "harness: %d buffers, the single process's %d",
			       model_num_buffers(a), r->n_buffers);
	for (int i = 0; i < r->n_buffers; i++) {
		const model_tensor *t = model_buffer_at(a, i);
		if ((int64_t)t->numel != r->buf_numel[i])
			return err_set(e, "harness: buffer %s: %zu elements, the single "
				       "process's %lld", t->fqn, t->numel,
				       (long long)r->buf_numel[i]);
	}
	return 0;
}

int harness_compare_buffers(plan *dist, const harness_ref *r, double *worst, double *size,
			    titan_err *e)
{
	model *a = plan_model(dist);
	*worst = *size = 0;
	if (same_buffers(a, r, e) != 0)
		return -1;
	float *x = malloc((buffers_numel(r) + 1) * sizeof(float));
	if (!x)
		return err_set(e, "harness: out of memory");
	size_t at = 0;
	for (int i = 0; i < r->n_buffers; i++) {
		compare_buffer(a, i, x, r->buffers + at, worst, size);
		at += (size_t)r->buf_numel[i];
	}
	free(x);
	return 0;
}
