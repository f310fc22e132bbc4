/* AdamW, gradient clipping and torchtitan's LR schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

struct adamw {
	backend *be;
	adamw_config c;
	be_dtype st; /* the states' element type */
	size_t n, nv;
	void *m, *v; /* (n) exp_avg, (nv) exp_avg_sq of c.dtype: none for Muon's ranges */
	int64_t step;
	optim_group base; /* the config's group: every parameter outside nd */
	/* Ranges of a group of their own (-1: frozen, not updated at all),
	 * sorted by offset, not overlapping. */
	struct exempt {
		size_t a, b;
		int g;
	} *nd;
	int n_nd;
	optim_group *groups; /* distinct */
	int n_groups;
};

void adamw_config_default(adamw_config *c)
{
	*c = (adamw_config){.lr = 8e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
			    .weight_decay = 0.1, .dtype = BE_F32, .bf16_states = 0};
}

adamw *adamw_create(backend *be, size_t n, const adamw_config *c, titan_err *e)
{
	adamw *o = calloc(1, sizeof *o);
	if (!o) {
		err_set(e, "adamw: out of memory");
		return NULL;
	}
	o->be = be;
	o->c = *c;
	o->n = o->nv = n;
	o->base = (optim_group){.kind = OPTIM_ADAMW, .lr = c->lr, .beta1 = c->beta1,
				.beta2 = c->beta2, .eps = c->eps, .weight_decay = c->weight_decay};
	if (c->dtype != BE_F32 && c->dtype != BE_BF16) {
		err_set(e, "adamw: states of %s: expected float32 or bfloat16",
			be_dtype_name(c->dtype));
		free(o);
		return NULL;
	}
	if (c->bf16_states && c->dtype != BE_F32) {
		err_set(e, "adamw: bfloat16 states beside %s parameters: expected float32",
			be_dtype_name(c->dtype));
		free(o);
		return NULL;
	}
	o->st = c->bf16_states ? BE_BF16 : c->dtype;
	size_t bytes = n * be_dtype_size(o->st);
	o->m = be->ops->alloc(be, bytes, e);
	o->v = o->m ? be->ops->alloc(be, bytes, e) : NULL;
	if (!o->v) {
		err_prefix(e, "adamw states for %zu parameters", n);
		adamw_free(o);
		return NULL;
	}
	be->ops->zero(be, o->m, bytes);
	be->ops->zero(be, o->v, bytes);
	return o;
}

void adamw_free(adamw *o)
{
	if (!o)
		return;
	o->be->ops->free(o->be, o->m);
	o->be->ops->free(o->be, o->v);
	free(o->nd);
	free(o->groups);
	free(o);
}

/* Index of g in o->groups, added when new; -1 when out of memory. */
static int group_index(adamw *o, const optim_group *g)
{
	for (int i = 0; i < o->n_groups; i++)
		if (memcmp(&o->groups[i], g, sizeof *g) == 0)
			return i;
	optim_group *v = realloc(o->groups, sizeof *v * (size_t)(o->n_groups + 1));
	if (!v)
		return -1;
	o->groups = v;
	v[o->n_groups] = *g;
	return o->n_groups++;
}

static int add_range(adamw *o, size_t offset, size_t numel, const optim_group *g, titan_err *e)
{
	const char *what = !g ? "frozen" : "group";
	if (offset + numel > o->n || offset + numel < offset)
		return err_set(e, "adamw: %s range [%zu, %zu) outside the %zu parameters", what,
			       offset, offset + numel, o->n);
	for (int i = 0; i < o->n_nd; i++)
		if (offset < o->nd[i].b && o->nd[i].a < offset + numel)
			return err_set(e, "adamw: %s range [%zu, %zu) overlaps [%zu, %zu)", what,
				       offset, offset + numel, o->nd[i].a, o->nd[i].b);
	int gi = g ? group_index(o, g) : -1;
	struct exempt *nd = g && gi < 0 ? NULL : realloc(o->nd, sizeof *nd * (size_t)(o->n_nd + 1));
	if (!nd)
		return err_set(e, "adamw: out of memory");
	o->nd = nd;
	int i = o->n_nd++;
	while (i > 0 && nd[i - 1].a > offset) {
		nd[i] = nd[i - 1];
		i--;
	}
	nd[i] = (struct exempt){offset, offset + numel, gi};
	return 0;
}

int adamw_no_decay(adamw *o, size_t offset, size_t numel, titan_err *e)
{
	optim_group g = o->base;
	g.weight_decay = 0;
	return add_range(o, offset, numel, &g, e);
}

int adamw_freeze(adamw *o, size_t offset, size_t numel, titan_err *e)
{
	return add_range(o, offset, numel, NULL, e);
}

int adamw_set_group(adamw *o, size_t offset, size_t numel, const optim_group *g, titan_err *e)
{
	optim_group c = *g;
	if (c.kind == OPTIM_ADAMW) /* Muon's fields mean nothing to AdamW */
		c = (optim_group){.kind = OPTIM_ADAMW, .lr = g->lr, .beta1 = g->beta1,
				  .beta2 = g->beta2, .eps = g->eps, .weight_decay = g->weight_decay,
				  .adam = g->adam};
	return add_range(o, offset, numel, &c, e);
}

const optim_group *adamw_group_of(const adamw *o, size_t offset)
{
	for (int i = 0; i < o->n_nd; i++)
		if (offset >= o->nd[i].a && offset < o->nd[i].b)
			return o->nd[i].g < 0 ? NULL : &o->groups[o->nd[i].g];
	return &o->base;
}

int adamw_has_groups(const adamw *o)
{
	for (int i = 0; i < o->n_groups; i++) {
		const optim_group *g = &o->groups[i];
		if (g->kind != OPTIM_ADAMW || g->lr != o->base.lr || g->beta1 != o->base.beta1 ||
		    g->beta2 != o->base.beta2 || g->eps != o->base.eps)
			return 1;
	}
	return 0;
}

double adamw_group_lr(const adamw *o, const optim_group *g, double lr)
{
	/* torch's LambdaLR: every group's initial lr times the schedule's
	 * factor; the config's group is the factor's own reference (exact) */
	if (g->lr == o->c.lr)
		return lr;
	return o->c.lr != 0 ? g->lr * (lr / o->c.lr) : 0;
}

/* Where exp_avg_sq holds the parameter at offset: offset less the Muon
 * ranges before it (none once adamw_drop_muon_states ran without Muon). */
size_t adamw_exp_avg_sq_index(const adamw *o, size_t offset)
{
	size_t skip = 0;
	for (int i = 0; o->nv < o->n && i < o->n_nd && o->nd[i].b <= offset; i++)
		if (o->nd[i].g >= 0 && o->groups[o->nd[i].g].kind == OPTIM_MUON)
			skip += o->nd[i].b - o->nd[i].a;
	return offset - skip;
}

size_t adamw_exp_avg_sq_numel(const adamw *o)
{
	return o->nv;
}

int adamw_drop_muon_states(adamw *o, titan_err *e)
{
	size_t muon = 0;
	for (int i = 0; i < o->n_nd; i++)
		if (o->nd[i].g >= 0 && o->groups[o->nd[i].g].kind == OPTIM_MUON)
			muon += o->nd[i].b - o->nd[i].a;
	if (muon == 0 || o->nv != o->n)
		return 0;
	size_t bytes = (o->n - muon) * be_dtype_size(o->st);
	void *v = o->be->ops->alloc(o->be, bytes ? bytes : 1, e);
	if (!v)
		return err_prefix(e, "adamw: exp_avg_sq of %zu parameters", o->n - muon);
	o->be->ops->zero(o->be, v, bytes);
	o->be->ops->free(o->be, o->v);
	o->v = v;
	o->nv = o->n - muon;
	return 0;
}

size_t adamw_state_bytes(const adamw *o)
{
	return (o->n + o->nv) * be_dtype_size(o->st);
}

/* Element i of a flat buffer of type t. */
static void *at(const void *base, be_dtype t, size_t i)
{
	return (char *)base + i * be_dtype_size(t);
}

/* AdamW over [a, b) with group g's values. */
static void update(adamw *o, void *p, const void *g, size_t a, size_t b, double lr,
		   const optim_group *gr)
{
	be_dtype t = o->c.dtype;
	if (b <= a || !gr || gr->kind != OPTIM_ADAMW)
		return;
	double bc1 = 1 - pow(gr->beta1, (double)o->step);
	double bc2 = 1 - pow(gr->beta2, (double)o->step);
	void *m = at(o->m, o->st, a), *v = at(o->v, o->st, adamw_exp_avg_sq_index(o, a));
	if (o->st != t) { /* fused_opt_states_bf16 */
		o->be->ops->adamw_bf16_states(o->be, at(p, t, a), at(g, t, a), m, v, (int64_t)(b - a),
					      adamw_group_lr(o, gr, lr), gr->beta1, gr->beta2,
					      gr->eps, gr->weight_decay, bc1, bc2);
		return;
	}
	o->be->ops->adamw(o->be, at(p, t, a), at(g, t, a), m, v, t,
			  (int64_t)(b - a), adamw_group_lr(o, gr, lr), gr->beta1, gr->beta2,
			  gr->eps, gr->weight_decay, bc1, bc2);
}

void adamw_step(adamw *o, void *params, const void *grads, double lr)
{
	o->step++;
	size_t at = 0;
	for (int i = 0; i < o->n_nd; i++) {
		update(o, params, grads, at, o->nd[i].a, lr, &o->base);
		if (o->nd[i].g >= 0)
			update(o, params, grads, o->nd[i].a, o->nd[i].b, lr, &o->groups[o->nd[i].g]);
		at = o->nd[i].b;
	}
	update(o, params, grads, at, o->n, lr, &o->base);
}

static int add_span(be_span *s, int n, size_t a, size_t b, double wd)
{
	if (b > a)
		s[n++] = (be_span){.offset = (int64_t)a, .n = (int64_t)(b - a), .wd = (float)wd};
	return n;
}

be_span *adamw_spans(const adamw *o, int *n, titan_err *e)
{
	be_span *s = malloc((size_t)(2 * o->n_nd + 1) * sizeof *s);
	if (!s) {
		err_set(e, "adamw: out of memory");
		return NULL;
	}
	int k = 0;
	size_t at = 0;
	for (int i = 0; i < o->n_nd; i++) {
		k = add_span(s, k, at, o->nd[i].a, o->c.weight_decay);
		if (o->nd[i].g >= 0)
			k = add_span(s, k, o->nd[i].a, o->nd[i].b, o->groups[o->nd[i].g].weight_decay);
		at = o->nd[i].b;
	}
	*n = add_span(s, k, at, o->n, o->c.weight_decay);
	return s;
}

void adamw_next_step(adamw *o, double lr, be_adamw_step *st)
{
	o->step++;
	*st = (be_adamw_step){.lr = lr, .b1 = o->c.beta1, .b2 = o->c.beta2, .eps = o->c.eps,
			      .bc1 = 1 - pow(o->c.beta1, (double)o->step),
			      .bc2 = 1 - pow(o->c.beta2, (double)o->step), .clip = 1};
}

void *adamw_exp_avg(adamw *o) { return o->m; }
void *adamw_exp_avg_sq(adamw *o) { return o->v; }
be_dtype adamw_dtype(const adamw *o) { return o->c.dtype; }
be_dtype adamw_state_dtype(const adamw *o) { return o->st; }
int64_t adamw_get_step(const adamw *o) { return o->step; }
void adamw_set_step(adamw *o, int64_t step) { o->step = step; }
const adamw_config *adamw_get_config(const adamw *o) { return &o->c; }

double grad_sumsq_typed(backend *be, const void *g, be_dtype t, size_t n)
{
	return be->ops->sumsq(be, g, t, (int64_t)n);
}

void grad_clip_scale_typed(backend *be, void *g, be_dtype t, size_t n, double total_norm,
			   double max_norm)
{
	if (max_norm <= 0)
		return;
	double coef = max_norm / (total_norm + 1e-6);
	if (coef < 1)
		be->ops->scale(be, g, t, (float)coef, (int64_t)n);
}

double grad_clip_norm_typed(backend *be, void *g, be_dtype t, size_t n, double max_norm)
{
	double norm = sqrt(grad_sumsq_typed(be, g, t, n));
	grad_clip_scale_typed(be, g, t, n, norm, max_norm);
	return norm;
}

double grad_sumsq(backend *be, const float *g, size_t n)
{
	return grad_sumsq_typed(be, g, BE_F32, n);
}

void grad_clip_scale(backend *be, float *g, size_t n, double total_norm, double max_norm)
{
	grad_clip_scale_typed(be, g, BE_F32, n, total_norm, max_norm);
}

double grad_clip_norm(backend *be, float *g, size_t n, double max_norm)
{
	return grad_clip_norm_typed(be, g, BE_F32, n, max_norm);
}

int lr_schedule_init(lr_schedule *s, int64_t training_steps, int64_t warmup_steps,
		     double decay_ratio, const char *decay_type, double min_lr_factor,
		     titan_err *e)
{
	memset(s, 0, sizeof *s);
	if (training_steps < 1 || warmup_steps < 0)
		return err_set(e, "lr_scheduler: steps %lld, warmup_steps %lld: expected "
			       "steps >= 1 and warmup >= 0", (long long)training_steps,
			       (long long)warmup_steps);
	if (strcmp(decay_type, "linear") == 0)
		s->decay_type = LR_DECAY_LINEAR;
	else if (strcmp(decay_type, "sqrt") == 0)
		s->decay_type = LR_DECAY_SQRT;
	else if (strcmp(decay_type, "cosine") == 0)
		s->decay_type = LR_DECAY_COSINE;
	else
		return err_set(e, "lr_scheduler.decay_type \"%s\": expected linear, sqrt or "
			       "cosine", decay_type);
	if (decay_ratio > 1)
		return err_set(e, "lr_scheduler.decay_ratio %g: expected at most 1", decay_ratio);
	if (min_lr_factor < 0 || min_lr_factor > 1)
		return err_set(e, "lr_scheduler.min_lr_factor %g: expected 0..1", min_lr_factor);
	if (warmup_steps > training_steps)
		warmup_steps = training_steps;
	int64_t decay;
	if (decay_ratio >= 0) {
		decay = (int64_t)nearbyint((double)training_steps * decay_ratio); /* round half even, like Python */
		if (warmup_steps + decay > training_steps)
			decay = training_steps - warmup_steps;
	} else {
		decay = training_steps - warmup_steps;
	}
	s->warmup_steps = warmup_steps;
	s->decay_steps = decay;
	s->stable_steps = training_steps + 1 - warmup_steps - decay; /* the virtual last step */
	s->min_lr_factor = min_lr_factor;
	return 0;
}

double lr_schedule_factor(const lr_schedule *s, int64_t i)
{
	int64_t ws = s->warmup_steps + s->stable_steps;
	if (i < s->warmup_steps)
		return (double)(i + 1) / (double)s->warmup_steps;
	if (i < ws)
		return 1.0;
	double p = (double)(i + 1 - ws) / (double)s->decay_steps;
	double adj;
	switch (s->decay_type) {
	case LR_DECAY_SQRT: adj = 1 - sqrt(p); break;
	case LR_DECAY_COSINE: adj = 0.5 * (1 + cos(M_PI * p)); break;
	default: adj = 1 - p; break;
	}
	return s->min_lr_factor + (1 - s->min_lr_factor) * adj;
}
