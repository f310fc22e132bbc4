/* The Llama 3 model: parameter layout (one flat buffer with named views),
 * torchtitan's initialisation, the public accessors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_priv.h"

static int add_tensor(model *m, int *cap, int unit, const char *fqn, int64_t d0, int64_t d1,
		      int is_norm, int is_embedding, titan_err *e)
{
	if (m->n_tensors == *cap) {
		int nc = *cap ? 2 * *cap : 64;
		model_tensor *nt = realloc(m->tensors, sizeof *nt * (size_t)nc);
		if (!nt)
			return err_set(e, "model: out of memory");
		m->tensors = nt;
		*cap = nc;
	}
	model_tensor *t = &m->tensors[m->n_tensors++];
	memset(t, 0, sizeof *t);
	snprintf(t->fqn, sizeof t->fqn, "%s", fqn);
	t->ndim = d1 ? 2 : 1;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
	t->offset = m->n_params;
	t->unit = unit;
	t->is_norm = is_norm;
	t->is_embedding = is_embedding;
	m->n_params += t->numel;
	return 0;
}

/* Units from the tensors' unit numbers: each unit's tensors are contiguous. */
static int build_units(model *m, titan_err *e)
{
	m->n_units = m->args.n_layers + 2;
	m->units = calloc((size_t)m->n_units, sizeof *m->units);
	if (!m->units)
		return err_set(e, "model: out of memory");
	for (int i = m->n_tensors - 1; i >= 0; i--) {
		model_unit *u = &m->units[m->tensors[i].unit];
		u->first_tensor = i;
		u->n_tensors++;
		u->offset = m->tensors[i].offset;
		u->numel += m->tensors[i].numel;
	}
	return 0;
}

/* The table of views, in torchtitan's state_dict order. */
static int build_layout(model *m, titan_err *e)
{
	const llama_args *a = &m->args;
	int cap = 0;
	int64_t d = a->dim, hq = (int64_t)a->n_heads * m->head_dim,
		hk = (int64_t)a->n_kv_heads * m->head_dim, f = m->ffn;
	char name[64];
	if (add_tensor(m, &cap, 0, "tok_embeddings.weight", a->vocab_size, d, 0, 1, e))
		return -1;
	for (int l = 0; l < a->n_layers; l++) {
		struct {
			const char *n;
			int64_t d0, d1;
			int norm;
		} spec[] = {
			{"attention_norm.weight", d, 0, 1}, {"attention.wq.weight", hq, d, 0},
			{"attention.wk.weight", hk, d, 0},  {"attention.wv.weight", hk, d, 0},
			{"attention.wo.weight", d, hq, 0},  {"ffn_norm.weight", d, 0, 1},
			{"feed_forward.w1.weight", f, d, 0}, {"feed_forward.w2.weight", d, f, 0},
			{"feed_forward.w3.weight", f, d, 0},
		};
		for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
			snprintf(name, sizeof name, "layers.%d.%s", l, spec[i].n);
			if (add_tensor(m, &cap, l + 1, name, spec[i].d0, spec[i].d1, spec[i].norm, 0, e))
				return -1;
		}
	}
	int head = a->n_layers + 1;
	if (add_tensor(m, &cap, head, "norm.weight", d, 0, 1, 0, e))
		return -1;
	if (!a->tied_embeddings &&
	    add_tensor(m, &cap, head, "output.weight", a->vocab_size, d, 0, 0, e))
		return -1;
	return build_units(m, e);
}

/* Point the views of unit u at base (its slice of the flat layout, of type t);
 * w are the parameter views or the gradient views. */
static void bind_views(model *m, int u, void *base, be_dtype t, int grads)
{
	const model_unit *un = &m->units[u];
	const model_tensor *ts = m->tensors + un->first_tensor;
	void *p[9] = {0};
	for (int i = 0; i < un->n_tensors && i < 9; i++)
		p[i] = base ? elt(base, t, ts[i].offset - un->offset) : NULL;
	int nl = m->args.n_layers;
	if (u == 0) {
		*(grads ? &m->tok_g : &m->tok) = p[0];
	} else if (u <= nl) {
		*(grads ? &m->lg[u - 1] : &m->lw[u - 1]) = (layer_w){
			.attn_norm = p[0], .wq = p[1], .wk = p[2], .wv = p[3], .wo = p[4],
			.ffn_norm = p[5], .w1 = p[6], .w2 = p[7], .w3 = p[8],
		};
	} else {
		*(grads ? &m->norm_g : &m->norm) = p[0];
		if (!m->args.tied_embeddings)
			*(grads ? &m->out_g : &m->out) = p[1];
	}
	if (m->args.tied_embeddings) {
		m->out = m->tok;
		m->out_g = m->tok_g;
	}
}

void model_bind_unit(model *m, int u, const void *params, void *grads)
{
	bind_views(m, u, (void *)params, m->prec.param, 0);
	bind_views(m, u, grads, m->prec.grad, 1);
}

/* Bind every unit to the model's own float32 buffers. */
static void bind_own(model *m)
{
	for (int u = 0; u < m->n_units; u++)
		model_bind_unit(m, u, m->params + m->units[u].offset, m->grads + m->units[u].offset);
}

static model *create(backend *be, const llama_args *a, int vocab_size, int own,
		     titan_err *e)
{
	if (a->dim <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_layers <= 0 ||
	    a->dim % a->n_heads || a->n_heads % a->n_kv_heads || (a->dim / a->n_heads) % 2) {
		err_set(e, "model %s: dim %d, n_heads %d, n_kv_heads %d do not divide into "
			"even heads", a->name ? a->name : "?", a->dim, a->n_heads, a->n_kv_heads);
		return NULL;
	}
	model *m = calloc(1, sizeof *m);
	if (!m) {
		err_set(e, "model: out of memory");
		return NULL;
	}
	m->be = be;
	m->args = *a;
	if (vocab_size > 0)
		m->args.vocab_size = vocab_size;
	m->ffn = flavor_ffn_hidden(&m->args);
	m->head_dim = flavor_head_dim(&m->args);
	m->prec = (model_prec){BE_F32, BE_F32, BE_F32, BE_F32};
	m->ac = MODEL_AC_NONE;
	m->lw = calloc((size_t)a->n_layers, sizeof *m->lw);
	m->lg = calloc((size_t)a->n_layers, sizeof *m->lg);
	if (!m->lw || !m->lg) {
		err_set(e, "model: out of memory");
		goto fail;
	}
	if (build_layout(m, e))
		goto fail;
	if (!own)
		return m;
	m->params = backend_alloc_floats(be, m->n_params, e);
	m->grads = m->params ? backend_calloc_floats(be, m->n_params, e) : NULL;
	if (!m->grads) {
		err_prefix(e, "model %s (%zu parameters)", a->name, m->n_params);
		goto fail;
	}
	bind_own(m);
	return m;
fail:
	model_free(m);
	return NULL;
}

model *model_create(backend *be, const llama_args *a, int vocab_size, titan_err *e)
{
	return create(be, a, vocab_size, 1, e);
}

model *model_create_unbound(backend *be, const llama_args *a, int vocab_size, titan_err *e)
{
	return create(be, a, vocab_size, 0, e);
}

void model_free(model *m)
{
	if (!m)
		return;
	model_mb_free(m->own_mb);
	model_scratch_release(m);
	m->be->ops->free(m->be, m->params);
	m->be->ops->free(m->be, m->grads);
	free(m->tensors);
	free(m->units);
	free(m->lw);
	free(m->lg);
	free(m);
}

const llama_args *model_args(const model *m) { return &m->args; }
int model_ffn_hidden(const model *m) { return m->ffn; }
int model_num_tensors(const model *m) { return m->n_tensors; }
int model_num_units(const model *m) { return m->n_units; }
size_t model_num_params(const model *m) { return m->n_params; }
float *model_params(model *m) { return m->params; }
float *model_grads(model *m) { return m->grads; }
backend *model_backend(model *m) { return m->be; }
const model_prec *model_get_prec(const model *m) { return &m->prec; }

const model_tensor *model_tensor_at(const model *m, int i)
{
	return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

const model_unit *model_unit_at(const model *m, int u)
{
	return u >= 0 && u < m->n_units ? &m->units[u] : NULL;
}

const model_tensor *model_tensor_find(const model *m, const char *fqn)
{
	for (int i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i].fqn, fqn) == 0)
			return &m->tensors[i];
	return NULL;
}

int64_t model_num_params_no_embedding(const model *m)
{
	return (int64_t)m->n_params - (int64_t)m->args.vocab_size * m->args.dim;
}

double model_flops_per_token(const model *m, int seq_len)
{
	const llama_args *a = &m->args;
	return 6.0 * (double)model_num_params_no_embedding(m) +
	       6.0 * a->n_layers * a->n_heads * (2.0 * m->head_dim) * seq_len;
}

void model_tensor_read(model *m, const model_tensor *t, int grads, float *host)
{
	float *src = (grads ? m->grads : m->params) + t->offset;
	m->be->ops->copy(m->be, host, src, t->numel * sizeof(float), BACKEND_D2H);
}

void model_tensor_write(model *m, const model_tensor *t, int grads, const float *host)
{
	float *dst = (grads ? m->grads : m->params) + t->offset;
	m->be->ops->copy(m->be, dst, host, t->numel * sizeof(float), BACKEND_H2D);
}

void model_zero_grad(model *m)
{
	if (m->grads)
		m->be->ops->zero(m->be, m->grads, m->n_params * sizeof(float));
}

/* Contexts and scratch are laid out for one AC mode and precision: drop the
 * model's own so the next micro-batch lays them out again. */
static void relayout(model *m)
{
	model_mb_free(m->own_mb);
	m->own_mb = NULL;
	model_scratch_release(m);
}

int model_set_ac(model *m, model_ac_mode mode, int every, titan_err *e)
{
	if (mode == MODEL_AC_SELECTIVE && every < 1)
		return err_set(e, "activation checkpointing: selective every %d layers, "
			       "expected a positive count", every);
	if (mode < MODEL_AC_NONE || mode > MODEL_AC_OP)
		return err_set(e, "activation checkpointing: unknown mode %d", (int)mode);
	m->ac = mode;
	m->ac_every = every;
	relayout(m);
	return 0;
}

int model_set_prec(model *m, const model_prec *p, titan_err *e)
{
	if (m->params && (p->param != BE_F32 || p->grad != BE_F32))
		return err_set(e, "model: its own storage is float32; bind storage of %s "
			       "parameters and %s gradients to a model made without storage",
			       be_dtype_name(p->param), be_dtype_name(p->grad));
	m->prec = *p;
	relayout(m);
	return 0;
}

/* y (n, out) = x (n, in) @ w^T: activations and the bound weight. */
void model_linear(model *m, void *y, const void *x, const void *w, int64_t n, int64_t in,
		  int64_t out, float beta)
{
	be_dtype t = m->prec.act;
	m->be->ops->matmul(m->be, 0, 1, n, out, in, 1, x, in, w, in, t, beta, y, out, t);
}

void model_linear_dx(model *m, void *dx, const void *dy, const void *w, int64_t n,
		     int64_t in, int64_t out, float beta_dx)
{
	be_dtype t = m->prec.act;
	m->be->ops->matmul(m->be, 0, 0, n, in, out, 1, dy, out, w, in, t, beta_dx, dx, in, t);
}

void model_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		     int64_t in, int64_t out)
{
	m->be->ops->matmul(m->be, 1, 0, out, in, n, 1, dy, out, x, in, m->prec.act, 1, dw, in,
			   m->prec.grad);
}

/* Initialisation.  Every tensor is cut into fixed chunks, each drawn from its own
 * stream seeded by (seed, tensor, chunk): the weights do not depend on the
 * number of threads, and a rank can draw its shard alone. */
#define INIT_CHUNK 65536

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double uniform01(uint64_t *s)
{
	return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double std_normal(uint64_t *s)
{
	double u1 = uniform01(s), u2 = uniform01(s);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* normal(0, std) cut to [lo, hi] by rejection (torch.nn.init.trunc_normal_'s
 * distribution; its default cut is +-2 absolute).  lo >= hi: no cut. */
static void fill_normal(float *dst, size_t n, double std, double lo, double hi,
			uint64_t seed, uint64_t tensor)
{
	size_t nchunk = (n + INIT_CHUNK - 1) / INIT_CHUNK;
#pragma omp parallel for schedule(static)
	for (size_t c = 0; c < nchunk; c++) {
		uint64_t s = seed ^ (tensor * 0xD1B54A32D192ED03ull) ^ (c * 0x8CB92BA72F3D8DD7ull);
		splitmix64(&s);
		size_t i1 = (c + 1) * INIT_CHUNK < n ? (c + 1) * INIT_CHUNK : n;
		for (size_t i = c * INIT_CHUNK; i < i1; i++) {
			double x;
			do
				x = std * std_normal(&s);
			while (lo < hi && (x < lo || x > hi));
			dst[i] = (float)x;
		}
	}
}

void model_init_tensor(const model *m, int i, uint64_t seed, int depth_init, float *host)
{
	const llama_args *a = &m->args;
	const model_tensor *t = &m->tensors[i];
	const char *name = t->fqn;
	int layer = -1;
	if (strncmp(name, "layers.", 7) == 0)
		layer = atoi(name + 7);
	double small = 0.02 / sqrt(2.0 * (depth_init ? layer + 1 : a->n_layers));
	if (t->is_norm) {
		for (size_t j = 0; j < t->numel; j++)
			host[j] = 1.0f;
	} else if (t->is_embedding) {
		fill_normal(host, t->numel, 1.0, 0, 0, seed, (uint64_t)i);
	} else if (strcmp(name, "output.weight") == 0) {
		double std = 1.0 / sqrt((double)a->dim);
		fill_normal(host, t->numel, std, -3 * std, 3 * std, seed, (uint64_t)i);
	} else if (strstr(name, ".wq.") || strstr(name, ".wk.") || strstr(name, ".wv.") ||
		   strstr(name, ".w1.")) {
		fill_normal(host, t->numel, 0.02, -2, 2, seed, (uint64_t)i);
	} else {
		fill_normal(host, t->numel, small, -2, 2, seed, (uint64_t)i);
	}
}

int model_init(model *m, uint64_t seed, int depth_init, titan_err *e)
{
	if (!m->params)
		return err_set(e, "model init: the model has no storage of its own");
	size_t maxn = 0;
	for (int i = 0; i < m->n_tensors; i++)
		maxn = m->tensors[i].numel > maxn ? m->tensors[i].numel : maxn;
	float *host = malloc(maxn * sizeof(float)); /* one tensor at a time */
	if (!host)
		return err_set(e, "model init: out of memory");
	for (int i = 0; i < m->n_tensors; i++) {
		model_init_tensor(m, i, seed, depth_init, host);
		model_tensor_write(m, &m->tensors[i], 0, host);
	}
	free(host);
	return 0;
}
