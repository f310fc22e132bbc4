/* flux_init.c: torchtitan 0.3.0's Flux initialisation (models/flux/__init__.py's
 * param_init), drawn with titan's own streams (core/init_fill): the same
 * distributions, not torch's draws. */
#include "flux/flux.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/init_fill.h"

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

typedef enum { INIT_ZERO, INIT_ONE, INIT_NORMAL_02, INIT_XAVIER } flux_init_kind;

/* _ZERO_LINEAR for the modulations and the final layer, _NORM_INIT for the
 * QK norms, _NORMAL_02 for the timestep and vector embedders, biases zero,
 * xavier_uniform_ for every other weight. */
static flux_init_kind kind_of(const char *name)
{
	if (ends_with(name, ".bias"))
		return INIT_ZERO;
	if (ends_with(name, "_norm.weight"))
		return INIT_ONE;
	if (strstr(name, "_mod.lin.") || strstr(name, ".modulation.lin.") ||
	    strncmp(name, "final_layer.", 12) == 0)
		return INIT_ZERO;
	if (strncmp(name, "time_in.", 8) == 0 || strncmp(name, "vector_in.", 10) == 0)
		return INIT_NORMAL_02;
	return INIT_XAVIER;
}

void flux_param_init(const flux_param *p, int i, uint64_t seed, float *host)
{
	size_t n = (size_t)p->numel;
	switch (kind_of(p->name)) {
	case INIT_ZERO:
		memset(host, 0, n * sizeof *host);
		break;
	case INIT_ONE:
		for (size_t j = 0; j < n; j++)
			host[j] = 1.0f;
		break;
	case INIT_NORMAL_02:
		init_fill(host, n, 0, n, 0.02, 0, 0, 0, seed, (uint64_t)i);
		break;
	case INIT_XAVIER: {
		/* nn.Linear's weight is (out, in): fan_in the columns, fan_out the rows */
		double bound = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));
		init_fill(host, n, 0, n, bound, 0, 0, 1, seed, (uint64_t)i);
		break;
	}
	}
}

int flux_model_init(flux_model *m, uint64_t seed, titan_err *err)
{
	int np = flux_param_count(m);
	if (flux_model_weights(m) == NULL)
		return err_set(err, "flux init: the model is unbound (a sharded model draws its "
			       "rows with flux_param_init)");
	int64_t most = 0;
	for (int i = 0; i < np; i++)
		if (flux_param_at(m, i)->numel > most)
			most = flux_param_at(m, i)->numel;
	float *host = malloc(sizeof(float) * (size_t)most);
	if (host == NULL)
		return err_set(err, "flux init: out of memory for %lld floats", (long long)most);
	backend *be = flux_model_backend(m);
	for (int i = 0; i < np; i++) {
		const flux_param *p = flux_param_at(m, i);
		flux_param_init(p, i, seed, host);
		be->ops->copy(be, p->w, host, sizeof(float) * (size_t)p->numel, BACKEND_H2D);
		/* the upload may still read host: wait before the next tensor */
		if (be->ops->sync(be, err) != 0) {
			free(host);
			return -1;
		}
	}
	free(host);
	return 0;
}

/* The parameters of config c, counted as flux_model_create lays them out. */
static double nparams(const flux_config *c)
{
	double h = (double)c->hidden_size, f = floor(h * c->mlp_ratio), q = c->qkv_bias ? 1 : 0;
	double emb = (c->in_channels + 1) * h + (256 + 1) * h + (h + 1) * h +
		     (c->vec_in_dim + 1) * h + (h + 1) * h + (c->context_in_dim + 1) * h;
	double hd = h / (double)c->num_heads;
	double stream = (h + 1) * 6 * h + h * 3 * h + q * 3 * h + 2 * hd + (h + 1) * h +
			(h + 1) * f + (f + 1) * h;
	double single = (h + 1) * (3 * h + f) + (h + f + 1) * h + 2 * hd + (h + 1) * 3 * h;
	double last = (h + 1) * (double)c->out_channels + (h + 1) * 2 * h;
	return emb + (double)c->depth * 2 * stream + (double)c->depth_single_blocks * single + last;
}

int64_t flux_config_param_count(const flux_config *c)
{
	return (int64_t)nparams(c);
}

double flux_flops_per_token(const flux_config *c, int64_t seq_len)
{
	double h = (double)c->hidden_size, r = c->mlp_ratio, L = (double)seq_len;
	double fl = 6 * nparams(c);
	fl -= 6 * floor(h * h * (4 + 2 * r)) * (double)c->depth;
	double mod = 12 * h * h * (double)c->depth + 3 * h * h * (double)c->depth_single_blocks +
		     2 * h * h;
	/* Python's integer // after the product: floor of a non-negative value */
	fl -= floor(6 * mod * (L - 1) / L);
	fl += 6 * h * L * (double)c->depth_single_blocks + 6 * h * L * (double)c->depth;
	return fl;
}
