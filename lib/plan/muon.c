/* Muon over the plan's shards (optimizer.param_groups' DistMuon groups):
 * the momentum on each rank's shard, the update gathered into the whole
 * matrix (the FSDP and TP boxes summed over those dimensions: each element
 * comes from one rank, the others add zeros, so the sum is exact), the
 * Newton-Schulz direction computed alike by every rank, and each rank's box
 * of it applied to its shard.  0.3.0's DistMuon gathers to an owner rank and
 * scatters back; the numbers are the same. */
#include <stdlib.h>
#include <string.h>

#include "optim/muon.h"
#include "plan/plan_priv.h"

struct plan_muon {
	struct muon_mat {
		int t[3], nt;         /* the tensors, stacked by rows (0.3.0's fused wqkv) */
		int64_t batch, rows, cols; /* the whole matrix: batch of (rows, cols) */
		optim_group g;
	} *mat;
	int n;
	float *full;              /* (numel of the largest matrix) f32 */
	void *dir;                /* (the same) bf16 */
	float *u;                 /* (the largest box) f32 */
	void *dbox;               /* (the same) bf16 */
	muon_scratch s;
};

static void box_dims(const plan_box *b, int64_t *o, int64_t *z)
{
	int lead = 3 - b->ndim;
	for (int d = 0; d < 3; d++) {
		o[d] = d < lead ? 0 : b->offsets[d - lead];
		z[d] = d < lead ? 1 : b->sizes[d - lead];
	}
}

/* Move box b (contiguous, row-major, element size es) to or from (in) its
 * place in the whole matrix w of (batch, rows, cols), its rows from
 * row_base. */
static void copy_box(backend *be, void *w, void *box, size_t es, const plan_box *b,
		     int64_t rows, int64_t cols, int64_t row_base, int in)
{
	int64_t o[3], z[3];
	box_dims(b, o, z);
	size_t run = (size_t)z[2] * es;
	if (z[2] == cols) { /* whole rows: one run per matrix of the batch */
		for (int64_t e = 0; e < z[0]; e++) {
			char *at = (char *)w + ((size_t)((o[0] + e) * rows + row_base + o[1]) * (size_t)cols) * es;
			char *bx = (char *)box + (size_t)(e * z[1]) * run;
			be->ops->copy(be, in ? (void *)at : bx, in ? bx : at, (size_t)z[1] * run,
				      BACKEND_D2D);
		}
		return;
	}
	for (int64_t e = 0; e < z[0]; e++)
		for (int64_t r = 0; r < z[1]; r++) {
			char *at = (char *)w + ((size_t)((o[0] + e) * rows + row_base + o[1] + r) *
						(size_t)cols + (size_t)o[2]) * es;
			char *bx = (char *)box + (size_t)(e * z[1] + r) * run;
			be->ops->copy(be, in ? (void *)at : bx, in ? bx : at, run, BACKEND_D2D);
		}
}

static int reduce(plan *p, comm *c, float *buf, size_t n, titan_err *e)
{
	if (c == NULL || comm_size(c) == 1)
		return 0;
	uint64_t w0 = plan_now();
	int rc = comm_all_reduce(c, buf, buf, n, COMM_F32, COMM_SUM, e);
	p->wait_ns += plan_now() - w0;
	if (rc)
		p->broken = 1;
	return rc;
}

/* This rank's part of tensor i enters the whole matrix: its box, unless a
 * tp rank but the first holds the same (a tensor TP replicates). */
static int contributes(const plan *p, int i)
{
	return p->box[i].numel > 0 && (!p->t[i].tp_replicated || p->tp_rank == 0);
}

static int step_matrix(plan *p, struct plan_muon *mu, const struct muon_mat *m, double lr,
		       titan_err *e)
{
	backend *be = p->be;
	size_t n = (size_t)(m->batch * m->rows * m->cols);
	be->ops->zero(be, mu->full, n * sizeof(float));
	int64_t base = 0;
	for (int j = 0; j < m->nt; j++) {
		int i = m->t[j];
		const plan_box *b = &p->box[i];
		float *mom = (float *)adamw_exp_avg(p->opt) + b->shard_off;
		if (b->numel > 0)
			muon_momentum(be, mom, (const float *)p->grads + b->shard_off, mu->u, b->numel,
				      &m->g);
		if (contributes(p, i))
			copy_box(be, mu->full, mu->u, sizeof(float), b, m->rows, m->cols, base, 1);
		base += model_tensor_at(p->g, i)->shape[model_tensor_at(p->g, i)->ndim - 2];
	}
	comm *fc = p->gc[p->t[m->t[0]].grp];
	if (reduce(p, fc, mu->full, n, e) || (p->tp > 1 && reduce(p, p->c_tp, mu->full, n, e)))
		return err_prefix(e, "muon: %s", model_tensor_at(p->g, m->t[0])->fqn);
	size_t one = (size_t)(m->rows * m->cols);
	for (int64_t k = 0; k < m->batch; k++) {
		const void *d = muon_direction(be, &mu->s, mu->full + k * (int64_t)one, m->rows, m->cols,
					       &m->g);
		be->ops->copy(be, (char *)mu->dir + (size_t)k * one * 2, d, one * 2, BACKEND_D2D);
	}
	double glr = adamw_group_lr(p->opt, &m->g, lr);
	double alr = muon_adjusted_lr(glr, m->g.adjust, m->rows, m->cols);
	base = 0;
	for (int j = 0; j < m->nt; j++) {
		int i = m->t[j];
		const plan_box *b = &p->box[i];
		if (b->numel > 0) {
			copy_box(be, mu->dir, mu->dbox, 2, b, m->rows, m->cols, base, 0);
			muon_apply(be, (float *)p->params + b->shard_off, mu->dbox, b->numel, glr, alr,
				   m->g.weight_decay);
		}
		base += model_tensor_at(p->g, i)->shape[model_tensor_at(p->g, i)->ndim - 2];
	}
	return 0;
}

int plan_muon_step(plan *p, double lr, titan_err *e)
{
	struct plan_muon *mu = p->muon;
	for (int k = 0; mu && k < mu->n; k++)
		if (step_matrix(p, mu, &mu->mat[k], lr, e))
			return -1;
	return 0;
}

void plan_muon_free(plan *p)
{
	struct plan_muon *mu = p->muon;
	if (!mu)
		return;
	backend *be = p->be;
	be->ops->free(be, mu->full);
	be->ops->free(be, mu->dir);
	be->ops->free(be, mu->u);
	be->ops->free(be, mu->dbox);
	muon_scratch_free(be, &mu->s);
	free(mu->mat);
	free(mu);
	p->muon = NULL;
}

/* Whether tensor i can be Muon's: float32 masters, a matrix (or a batch of
 * them), no expert parallelism (its experts' boxes sum over ep too). */
static int check_tensor(const plan *p, int i, titan_err *e)
{
	const model_tensor *t = model_tensor_at(p->g, i);
	if (t->ndim < 2)
		return err_set(e, "%s: DistMuon takes matrices (2-D, or a batch-first 3-D stack); "
			       "this parameter is %d-D", t->fqn, t->ndim);
	if (p->mt != BE_F32)
		return err_set(e, "%s: DistMuon with training.dtype = \"bfloat16\" (masters in "
			       "bf16) is not built", t->fqn);
	if (adamw_state_dtype(p->opt) != BE_F32) /* its momentum_buffer is exp_avg's */
		return err_set(e, "%s: DistMuon with optimizer.implementation = "
			       "\"fused_opt_states_bf16\" is not built", t->fqn);
	if (p->ep > 1 && t->is_expert)
		return err_set(e, "%s: DistMuon under expert parallelism is not built", t->fqn);
	return 0;
}

static int add_matrix(plan *p, struct plan_muon *mu, const int *ts, int nt, const optim_group *g,
		      titan_err *e)
{
	struct muon_mat m = {.nt = nt, .g = *g, .batch = 1};
	const model_tensor *t0 = model_tensor_at(p->g, ts[0]);
	m.cols = t0->shape[t0->ndim - 1];
	if (t0->ndim == 3)
		m.batch = t0->shape[0];
	for (int j = 0; j < nt; j++) {
		const model_tensor *t = model_tensor_at(p->g, ts[j]);
		if (check_tensor(p, ts[j], e))
			return -1;
		if (t->shape[t->ndim - 1] != m.cols || (j && t->ndim != 2))
			return err_set(e, "%s: stacked with %s into one matrix: shapes differ",
				       t->fqn, t0->fqn);
		m.t[j] = ts[j];
		m.rows += t->shape[t->ndim - 2];
	}
	struct muon_mat *v = realloc(mu->mat, sizeof *v * (size_t)(mu->n + 1));
	if (!v)
		return err_set(e, "out of memory");
	mu->mat = v;
	v[mu->n++] = m;
	return 0;
}

static int reserve(plan *p, struct plan_muon *mu, titan_err *e)
{
	size_t big = 0, box = 0;
	backend *be = p->be;
	for (int k = 0; k < mu->n; k++) {
		const struct muon_mat *m = &mu->mat[k];
		size_t n = (size_t)(m->batch * m->rows * m->cols);
		big = n > big ? n : big;
		for (int j = 0; j < m->nt; j++)
			box = p->box[m->t[j]].numel > box ? p->box[m->t[j]].numel : box;
		if (muon_scratch_reserve(be, &mu->s, m->rows, m->cols, e))
			return -1;
	}
	box = box ? box : 1;
	if (!(mu->full = be->ops->alloc(be, big * sizeof(float), e)) ||
	    !(mu->dir = be->ops->alloc(be, big * 2, e)) ||
	    !(mu->u = be->ops->alloc(be, box * sizeof(float), e)) ||
	    !(mu->dbox = be->ops->alloc(be, box * 2, e)))
		return err_prefix(e, "muon: buffers");
	return 0;
}

int plan_set_param_groups(plan *p, const optim_group *groups, const int *group_of,
			  const int *matrix_of, titan_err *e)
{
	int nt = model_num_tensors(p->g);
	struct plan_muon *mu = calloc(1, sizeof *mu);
	if (!mu)
		return err_set(e, "out of memory");
	p->muon = mu;
	for (int i = 0; i < nt; i++) {
		const plan_tensor *t = &p->t[i];
		const model_tensor *mt = model_tensor_at(p->m, i);
		if (group_of[i] < 0)
			continue;
		const optim_group *g = &groups[group_of[i]];
		size_t numel = (size_t)(t->cs * t->cols);
		if (p->u[mt->unit].held && numel > 0 &&
		    adamw_set_group(p->opt, t->shard_off, numel, g, e))
			return err_prefix(e, "%s", mt->fqn);
		if (g->kind != OPTIM_MUON || matrix_of[i] != i || !p->u[mt->unit].held)
			continue;
		int ts[3] = {i}, n = 1;
		for (int j = i + 1; j < nt && n < 3; j++)
			if (matrix_of[j] == i)
				ts[n++] = j;
		if (add_matrix(p, mu, ts, n, g, e))
			return -1;
	}
	if (mu->n == 0) {
		plan_muon_free(p);
		return 0;
	}
	return adamw_drop_muon_states(p->opt, e) || reserve(p, mu, e) ? -1 : 0;
}
