/* flux_model.c: the flavors, the parameter table and the latents' packing
 * (flux.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flux/flux_priv.h"
#include "metrics/metrics.h"

/* torchtitan 0.3.0's models/flux/__init__.py: _flux_dev, _flux_schnell (the
 * same numbers) and _flux_debug. */
static const flux_config flavors[] = {
	{.name = "flux-dev", .in_channels = 64, .out_channels = 64, .vec_in_dim = 768,
	 .context_in_dim = 4096, .hidden_size = 3072, .num_heads = 24, .depth = 19,
	 .depth_single_blocks = 38, .mlp_ratio = 4.0, .axes_dim = {16, 56, 56},
	 .theta = 10000, .qkv_bias = 1},
	{.name = "flux-schnell", .in_channels = 64, .out_channels = 64, .vec_in_dim = 768,
	 .context_in_dim = 4096, .hidden_size = 3072, .num_heads = 24, .depth = 19,
	 .depth_single_blocks = 38, .mlp_ratio = 4.0, .axes_dim = {16, 56, 56},
	 .theta = 10000, .qkv_bias = 1},
	{.name = "flux-debug", .in_channels = 64, .out_channels = 64, .vec_in_dim = 768,
	 .context_in_dim = 4096, .hidden_size = 1536, .num_heads = 12, .depth = 2,
	 .depth_single_blocks = 2, .mlp_ratio = 4.0, .axes_dim = {16, 56, 56},
	 .theta = 10000, .qkv_bias = 1},
	/* titan's own, not 0.3.0's: flux-debug's inputs (T5 4096 wide, CLIP
	 * 768, the axes) on a 256-wide trunk of two 128-wide heads, 8.3 M
	 * parameters to flux-debug's 258 M, so that a CPU runs a step in a
	 * fraction of a second: the test suite's and a smoke run's flavor */
	{.name = "flux-tiny", .in_channels = 64, .out_channels = 64, .vec_in_dim = 768,
	 .context_in_dim = 4096, .hidden_size = 256, .num_heads = 2, .depth = 2,
	 .depth_single_blocks = 2, .mlp_ratio = 4.0, .axes_dim = {16, 56, 56},
	 .theta = 10000, .qkv_bias = 1},
};

const flux_config *flux_flavor(const char *name)
{
	for (size_t i = 0; i < sizeof flavors / sizeof flavors[0]; i++)
		if (name != NULL && strcmp(flavors[i].name, name) == 0)
			return &flavors[i];
	return NULL;
}

void flux_flavor_names(char *buf, size_t n)
{
	size_t used = 0;
	if (n > 0)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof flavors / sizeof flavors[0] && used < n; i++)
		used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", flavors[i].name);
}

const flux_config *flux_flavor_at(int i)
{
	return i >= 0 && (size_t)i < sizeof flavors / sizeof flavors[0] ? &flavors[i] : NULL;
}

void flux_print_flavors(FILE *out)
{
	fprintf(out, "model.name = \"flux\": FLUX.1's rectified-flow transformer "
		"(torchtitan 0.3.0's models/flux)\n");
	fprintf(out, "%-20s %6s %6s %6s %5s %9s %12s %16s\n", "flavor", "hidden", "double",
		"single", "heads", "mlp_ratio", "axes_dim", "parameters");
	for (const flux_config *c = flavors; c < flavors + sizeof flavors / sizeof flavors[0];
	     c++) {
		char p[48], axes[32];
		metrics_commas(p, sizeof p, flux_config_param_count(c));
		snprintf(axes, sizeof axes, "%lld,%lld,%lld", (long long)c->axes_dim[0],
			 (long long)c->axes_dim[1], (long long)c->axes_dim[2]);
		fprintf(out, "%-20s %6lld %6lld %6lld %5lld %9.1f %12s %16s\n", c->name,
			(long long)c->hidden_size, (long long)c->depth,
			(long long)c->depth_single_blocks, (long long)c->num_heads, c->mlp_ratio, axes,
			p);
	}
}

#define SIZE_MAX_DIM (INT64_C(1) << 20)

static int check_size(const char *field, int64_t v, titan_err *err)
{
	if (v < 1 || v > SIZE_MAX_DIM)
		return err_set(err, "flux config: %s = %lld, expected 1 .. %lld", field,
			       (long long)v, (long long)SIZE_MAX_DIM);
	return 0;
}

int flux_config_check(const flux_config *c, titan_err *err)
{
	if (check_size("in_channels", c->in_channels, err) ||
	    check_size("out_channels", c->out_channels, err) ||
	    check_size("vec_in_dim", c->vec_in_dim, err) ||
	    check_size("context_in_dim", c->context_in_dim, err) ||
	    check_size("hidden_size", c->hidden_size, err) ||
	    check_size("num_heads", c->num_heads, err) ||
	    check_size("depth", c->depth, err) ||
	    check_size("depth_single_blocks", c->depth_single_blocks, err))
		return -1;
	if (!(c->mlp_ratio > 0 && c->mlp_ratio <= 64))
		return err_set(err, "flux config: mlp_ratio = %g, expected (0, 64]", c->mlp_ratio);
	if (!(c->theta > 0))
		return err_set(err, "flux config: theta = %g, expected > 0", c->theta);
	if (c->hidden_size % c->num_heads != 0)
		return err_set(err, "flux config: hidden_size %lld is not divisible by num_heads %lld",
			       (long long)c->hidden_size, (long long)c->num_heads);
	int64_t hd = c->hidden_size / c->num_heads, sum = 0;
	for (int a = 0; a < 3; a++) {
		if (c->axes_dim[a] < 0 || c->axes_dim[a] % 2 != 0)
			return err_set(err, "flux config: axes_dim[%d] = %lld, expected even and >= 0",
				       a, (long long)c->axes_dim[a]);
		sum += c->axes_dim[a];
	}
	if (sum != hd)
		return err_set(err, "flux config: axes_dim sums to %lld, the head dimension is %lld",
			       (long long)sum, (long long)hd);
	if (!c->qkv_bias)
		return err_set(err, "flux config: qkv_bias = false is not implemented "
			       "(every 0.3.0 flavor sets it)");
	return 0;
}

/* Appends a parameter; the offsets are resolved once all are known. */
static void add(flux_model *m, const char *name, int64_t rows, int64_t cols)
{
	flux_param *p = &m->p[m->np++];
	snprintf(p->name, sizeof p->name, "%s", name);
	p->ndim = cols > 0 ? 2 : 1;
	p->shape[0] = rows;
	p->shape[1] = cols > 0 ? cols : 0;
	p->numel = rows * (cols > 0 ? cols : 1);
}

static void add_linear(flux_model *m, const char *prefix, int64_t out, int64_t in)
{
	char name[64];
	snprintf(name, sizeof name, "%s.weight", prefix);
	add(m, name, out, in);
	snprintf(name, sizeof name, "%s.bias", prefix);
	add(m, name, out, 0);
}

static void layout(flux_model *m)
{
	const flux_config *c = &m->c;
	int64_t h = m->h;
	char pre[64];
	add_linear(m, "img_in", h, c->in_channels);
	add_linear(m, "time_in.in_layer", h, 256);
	add_linear(m, "time_in.out_layer", h, h);
	add_linear(m, "vector_in.in_layer", h, c->vec_in_dim);
	add_linear(m, "vector_in.out_layer", h, h);
	add_linear(m, "txt_in", h, c->context_in_dim);
	static const char *stream[2] = {"img", "txt"};
	for (int64_t k = 0; k < c->depth; k++)
		for (int s = 0; s < 2; s++) {
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_mod.lin", (long long)k, stream[s]);
			add_linear(m, pre, 6 * h, h);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_attn.qkv", (long long)k, stream[s]);
			add_linear(m, pre, 3 * h, h);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_attn.norm.query_norm.weight",
				 (long long)k, stream[s]);
			add(m, pre, m->hd, 0);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_attn.norm.key_norm.weight",
				 (long long)k, stream[s]);
			add(m, pre, m->hd, 0);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_attn.proj", (long long)k, stream[s]);
			add_linear(m, pre, h, h);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_mlp.0", (long long)k, stream[s]);
			add_linear(m, pre, m->f, h);
			snprintf(pre, sizeof pre, "double_blocks.%lld.%s_mlp.2", (long long)k, stream[s]);
			add_linear(m, pre, h, m->f);
		}
	for (int64_t k = 0; k < c->depth_single_blocks; k++) {
		snprintf(pre, sizeof pre, "single_blocks.%lld.linear1", (long long)k);
		add_linear(m, pre, 3 * h + m->f, h);
		snprintf(pre, sizeof pre, "single_blocks.%lld.linear2", (long long)k);
		add_linear(m, pre, h, h + m->f);
		snprintf(pre, sizeof pre, "single_blocks.%lld.norm.query_norm.weight", (long long)k);
		add(m, pre, m->hd, 0);
		snprintf(pre, sizeof pre, "single_blocks.%lld.norm.key_norm.weight", (long long)k);
		add(m, pre, m->hd, 0);
		snprintf(pre, sizeof pre, "single_blocks.%lld.modulation.lin", (long long)k);
		add_linear(m, pre, 3 * h, h);
	}
	add_linear(m, "final_layer.linear", c->out_channels, h);
	add_linear(m, "final_layer.adaLN_modulation.1", 2 * h, h);
}

/* m's config, sizes and parameter table (no storage); c checked. */
static int plan_table(flux_model *m, const flux_config *c, titan_err *err)
{
	int cap = P_GLOBAL + (int)(c->depth * 2 * D_STREAM + c->depth_single_blocks * S_BLOCK) +
		  F_LAYER;
	if ((m->p = calloc((size_t)cap, sizeof *m->p)) == NULL)
		return err_set(err, "flux: out of memory for the parameter table");
	m->c = *c;
	m->h = c->hidden_size;
	m->heads = c->num_heads;
	m->hd = m->h / m->heads;
	m->f = (int64_t)((double)m->h * c->mlp_ratio); /* int(hidden_size * mlp_ratio) */
	layout(m);
	return 0;
}

flux_param *flux_param_table(const flux_config *c, int *n, titan_err *err)
{
	flux_model m = {0};
	if (flux_config_check(c, err) < 0 || plan_table(&m, c, err) < 0)
		return NULL;
	*n = m.np;
	return m.p;
}

static flux_model *create(backend *be, const flux_config *c, titan_err *err)
{
	if (flux_config_check(c, err) < 0)
		return NULL;
	flux_model *m = calloc(1, sizeof *m);
	if (m == NULL || plan_table(m, c, err) < 0) {
		if (m == NULL)
			err_set(err, "flux: out of memory for the parameter table");
		free(m);
		return NULL;
	}
	m->be = be;
	for (int i = 0; i < m->np; i++) {
		m->total += m->p[i].numel;
		int64_t *max = m->p[i].ndim == 2 ? &m->maxw : &m->maxb;
		*max = m->p[i].numel > *max ? m->p[i].numel : *max;
	}
	return m;
}

flux_model *flux_model_create(backend *be, const flux_config *c, titan_err *err)
{
	flux_model *m = create(be, c, err);
	if (m == NULL)
		return NULL;
	m->wbuf = backend_alloc_floats(be, (size_t)m->total, err);
	m->gbuf = m->wbuf != NULL ? backend_calloc_floats(be, (size_t)m->total, err) : NULL;
	if (m->gbuf == NULL) {
		err_prefix(err, "flux: %lld parameters", (long long)m->total);
		flux_model_free(m);
		return NULL;
	}
	int64_t off = 0;
	for (int i = 0; i < m->np; i++) {
		m->p[i].w = m->wbuf + off;
		m->p[i].g = m->gbuf + off;
		m->p[i].wc = m->p[i].w;
		off += m->p[i].numel;
	}
	return m;
}

flux_model *flux_model_create_unbound(backend *be, const flux_config *c, titan_err *err)
{
	return create(be, c, err);
}

int flux_unit_count(const flux_model *m)
{
	return 2 + (int)(m->c.depth + m->c.depth_single_blocks);
}

int flux_param_unit(const flux_model *m, int i)
{
	if (i < P_GLOBAL)
		return 0;
	int64_t k = i - P_GLOBAL, dbl = m->c.depth * 2 * D_STREAM;
	if (k < dbl)
		return 1 + (int)(k / (2 * D_STREAM));
	k -= dbl;
	if (k < m->c.depth_single_blocks * S_BLOCK)
		return 1 + (int)(m->c.depth + k / S_BLOCK);
	return flux_unit_count(m) - 1;
}

void flux_model_set_units(flux_model *m, const flux_unit_hooks *h)
{
	m->units = h ? *h : (flux_unit_hooks){0};
}

void flux_param_bind(flux_model *m, int i, void *wc, float *g)
{
	m->p[i].wc = wc;
	m->p[i].g = g;
}

void flux_model_free(flux_model *m)
{
	if (m == NULL)
		return;
	if (m->wbuf != NULL)
		m->be->ops->free(m->be, m->wbuf);
	if (m->gbuf != NULL)
		m->be->ops->free(m->be, m->gbuf);
	if (m->wlow != NULL)
		m->be->ops->free(m->be, m->wlow);
	free(m->p);
	free(m);
}

int flux_model_set_compute(flux_model *m, be_dtype t, titan_err *err)
{
	if (t != BE_F32 && t != BE_BF16)
		return err_set(err, "flux: compute type %s, expected float32 or bfloat16",
			       be_dtype_name(t));
	if (t == BE_BF16 && m->wlow == NULL && m->wbuf != NULL) {
		m->wlow = m->be->ops->alloc(m->be, be_dtype_size(t) * (size_t)m->total, err);
		if (m->wlow == NULL)
			return err_prefix(err, "flux: the bf16 copy of %lld weights",
					  (long long)m->total);
	}
	if (t == BE_F32 && m->wlow != NULL) {
		m->be->ops->free(m->be, m->wlow);
		m->wlow = NULL;
	}
	m->dt = t;
	for (int i = 0; i < m->np && m->wbuf != NULL; i++)
		m->p[i].wc = t == BE_F32 ? (void *)m->p[i].w
			     : (char *)m->wlow + (size_t)(m->p[i].w - m->wbuf) * be_dtype_size(t);
	return 0;
}

be_dtype flux_model_compute(const flux_model *m) { return m->dt; }

void flux_model_set_attention(flux_model *m, const be_attn_hook *a)
{
	m->attn = a ? *a : (be_attn_hook){0};
}

void flux_model_set_full_ac(flux_model *m, int on) { m->full_ac = on != 0; }

const flux_config *flux_model_config(const flux_model *m) { return &m->c; }
int flux_param_count(const flux_model *m) { return m->np; }

const flux_param *flux_param_at(const flux_model *m, int i)
{
	return i >= 0 && i < m->np ? &m->p[i] : NULL;
}

const flux_param *flux_param_find(const flux_model *m, const char *name)
{
	for (int i = 0; i < m->np; i++)
		if (strcmp(m->p[i].name, name) == 0)
			return &m->p[i];
	return NULL;
}

void flux_zero_grad(flux_model *m)
{
	if (m->gbuf != NULL)
		m->be->ops->zero(m->be, m->gbuf, sizeof(float) * (size_t)m->total);
}

void flux_pack_latents(float *out, const float *z, int64_t b, int64_t c, int64_t hl,
		       int64_t wl)
{
	int64_t h = hl / 2, w = wl / 2;
	for (int64_t i = 0; i < b; i++)
		for (int64_t y = 0; y < h; y++)
			for (int64_t x = 0; x < w; x++) {
				float *o = out + ((i * h + y) * w + x) * c * 4;
				for (int64_t ch = 0; ch < c; ch++)
					for (int64_t py = 0; py < 2; py++)
						for (int64_t px = 0; px < 2; px++)
							*o++ = z[((i * c + ch) * hl + 2 * y + py) * wl +
								 2 * x + px];
			}
}

void flux_unpack_latents(float *z, const float *packed, int64_t b, int64_t c, int64_t hl,
			 int64_t wl)
{
	int64_t h = hl / 2, w = wl / 2;
	for (int64_t i = 0; i < b; i++)
		for (int64_t y = 0; y < h; y++)
			for (int64_t x = 0; x < w; x++) {
				const float *p = packed + ((i * h + y) * w + x) * c * 4;
				for (int64_t ch = 0; ch < c; ch++)
					for (int64_t py = 0; py < 2; py++)
						for (int64_t px = 0; px < 2; px++)
							z[((i * c + ch) * hl + 2 * y + py) * wl + 2 * x +
							  px] = *p++;
			}
}

void flux_latent_ids(float *ids, int64_t b, int64_t hl, int64_t wl)
{
	int64_t h = hl / 2, w = wl / 2;
	for (int64_t i = 0; i < b; i++)
		for (int64_t y = 0; y < h; y++)
			for (int64_t x = 0; x < w; x++) {
				float *o = ids + ((i * h + y) * w + x) * 3;
				o[0] = 0;
				o[1] = (float)y;
				o[2] = (float)x;
			}
}

backend *flux_model_backend(const flux_model *m)
{
	return m->be;
}

float *flux_model_weights(flux_model *m)
{
	return m->wbuf;
}

float *flux_model_grads(flux_model *m)
{
	return m->gbuf;
}

int64_t flux_model_numel(const flux_model *m)
{
	return m->total;
}
