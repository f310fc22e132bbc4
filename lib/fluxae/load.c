/* load.c: the autoencoder's config and weights (fluxae.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "fluxae/ae_model.h"
#include "safetensors/safetensors.h"

#define DEFAULT_CHUNK_BYTES ((size_t)32 << 20)

void flux_ae_config_default(flux_ae_config *c)
{
	*c = (flux_ae_config){
		.resolution = 256, .in_channels = 3, .ch = 128, .out_ch = 3,
		.num_res_blocks = 2, .z_channels = 16,
		.ch_mult = {1, 2, 4, 4}, .n_levels = 4,
		.scale_factor = 0.3611f, .shift_factor = 0.1159f,
	};
}

/* 0 when c describes a model this module can build, else -1 naming the field
 * (where: the file, or "fluxae" for a caller's config). */
static int config_check(const flux_ae_config *c, const char *where, titan_err *err)
{
	const struct { const char *name; int64_t v, min; } f[] = {
		{"resolution", c->resolution, 1}, {"in_channels", c->in_channels, 1},
		{"ch", c->ch, 32}, {"out_ch", c->out_ch, 1},
		{"num_res_blocks", c->num_res_blocks, 1}, {"z_channels", c->z_channels, 1},
	};
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		if (f[i].v < f[i].min)
			return err_set(err, "%s: field '%s': %lld, expected at least %lld", where,
				       f[i].name, (long long)f[i].v, (long long)f[i].min);
	if (c->ch % 32 != 0)
		return err_set(err, "%s: field 'ch': %lld, expected a multiple of 32 (GroupNorm's "
			       "32 groups)", where, (long long)c->ch);
	if (c->n_levels < 1 || c->n_levels > FLUX_AE_MAX_LEVELS)
		return err_set(err, "%s: field 'ch_mult': %lld levels, expected 1 to %d", where,
			       (long long)c->n_levels, FLUX_AE_MAX_LEVELS);
	for (int64_t i = 0; i < c->n_levels; i++)
		if (c->ch_mult[i] < 1)
			return err_set(err, "%s: field 'ch_mult': element %lld is %lld, expected a "
				       "positive integer", where, (long long)i,
				       (long long)c->ch_mult[i]);
	if (!isfinite(c->scale_factor) || c->scale_factor == 0 || !isfinite(c->shift_factor))
		return err_set(err, "%s: fields 'scale_factor' and 'shift_factor' must be finite "
			       "and the scale non-zero", where);
	return 0;
}

static int read_ch_mult(flux_ae_config *c, const json_t *root, const char *path, titan_err *err)
{
	json_t *a = json_object_get(root, "ch_mult");
	if (a == NULL)
		return 0;
	if (!json_is_array(a) || json_array_size(a) < 1 ||
	    json_array_size(a) > FLUX_AE_MAX_LEVELS)
		return err_set(err, "%s: field 'ch_mult': expected an array of 1 to %d integers",
			       path, FLUX_AE_MAX_LEVELS);
	c->n_levels = (int64_t)json_array_size(a);
	for (size_t i = 0; i < json_array_size(a); i++) {
		json_t *v = json_array_get(a, i);
		if (!json_is_integer(v))
			return err_set(err, "%s: field 'ch_mult': element %zu is %s, expected an "
				       "integer", path, i, tjson_type_name(v));
		c->ch_mult[i] = json_integer_value(v);
	}
	return 0;
}

int flux_ae_config_read(flux_ae_config *c, const char *path, titan_err *err)
{
	static const char *const known[] = {"resolution", "in_channels", "ch", "out_ch",
		"ch_mult", "num_res_blocks", "z_channels", "scale_factor", "shift_factor"};
	flux_ae_config_default(c);
	json_t *root = tjson_load_file(path, JSON_REJECT_DUPLICATES, err);
	if (root == NULL)
		return -1;
	int rc = json_is_object(root) ? 0
		 : err_set(err, "%s: expected a JSON object (AutoEncoder.Config's fields)", path);
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		size_t i = 0;
		while (i < sizeof known / sizeof *known && strcmp(key, known[i]) != 0)
			i++;
		if (rc == 0 && i == sizeof known / sizeof *known)
			rc = err_set(err, "%s: unknown field '%s' (AutoEncoder.Config has resolution, "
				     "in_channels, ch, out_ch, ch_mult, num_res_blocks, z_channels, "
				     "scale_factor, shift_factor)", path, key);
	}
	double scale = c->scale_factor, shift = c->shift_factor;
	if (rc == 0)
		rc = tjson_opt_int(root, "resolution", &c->resolution, c->resolution, path, err) < 0 ||
		     tjson_opt_int(root, "in_channels", &c->in_channels, c->in_channels, path, err) < 0 ||
		     tjson_opt_int(root, "ch", &c->ch, c->ch, path, err) < 0 ||
		     tjson_opt_int(root, "out_ch", &c->out_ch, c->out_ch, path, err) < 0 ||
		     tjson_opt_int(root, "num_res_blocks", &c->num_res_blocks, c->num_res_blocks,
				   path, err) < 0 ||
		     tjson_opt_int(root, "z_channels", &c->z_channels, c->z_channels, path, err) < 0 ||
		     tjson_opt_double(root, "scale_factor", &scale, scale, path, err) < 0 ||
		     tjson_opt_double(root, "shift_factor", &shift, shift, path, err) < 0 ||
		     read_ch_mult(c, root, path, err) < 0
		     ? -1 : 0;
	c->scale_factor = (float)scale;
	c->shift_factor = (float)shift;
	json_decref(root);
	return rc == 0 ? config_check(c, path, err) : -1;
}

/* The weights being loaded from one file. */
typedef struct loader {
	flux_ae *m;
	const st_set *s;
} loader;

static int keep(flux_ae *m, void *p, titan_err *err)
{
	if (m->n_params == m->cap_params) {
		size_t cap = m->cap_params ? 2 * m->cap_params : 64;
		void **np = realloc(m->params, cap * sizeof *np);
		if (np == NULL)
			return err_set(err, "fluxae: out of memory");
		m->params = np;
		m->cap_params = cap;
	}
	m->params[m->n_params++] = p;
	return 0;
}

/* Tensor NAME checked to be (shape), converted to the model's type (rounded
 * to nearest even for bfloat16) into backend memory the model owns; NULL
 * and err naming it. */
static void *load(loader *ld, const char *name, int ndim, const int64_t *shape, titan_err *err)
{
	flux_ae *m = ld->m;
	const st_tensor *t = st_set_find(ld->s, name);
	if (t == NULL) {
		err_set(err, "tensor '%s': missing", name);
		return NULL;
	}
	size_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= (size_t)shape[i];
	float *host = malloc(n * sizeof *host);
	void *dev = NULL;
	if (host == NULL)
		err_set(err, "tensor '%s': out of memory", name);
	else if (st_tensor_to_f32(t, ndim, shape, host, err) == 0 &&
		 (dev = m->be->ops->alloc(m->be, n * be_dtype_size(m->dt), err)) != NULL &&
		 (backend_upload(m->be, m->dt, dev, host, (int64_t)n, err) < 0 ||
		  keep(m, dev, err) < 0)) {
		m->be->ops->free(m->be, dev);
		dev = NULL;
	}
	free(host);
	return dev;
}

/* PREFIX.weight (cout, cin, k, k) and PREFIX.bias (cout). */
static int load_conv(loader *ld, ae_conv *cv, const char *prefix, int64_t cin, int64_t cout,
		     int64_t k, titan_err *err)
{
	char name[256];
	const int64_t ws[4] = {cout, cin, k, k};
	*cv = (ae_conv){.cin = cin, .cout = cout, .k = k};
	ld->m->conv_numel += cout * cin * k * k + cout;
	snprintf(name, sizeof name, "%s.weight", prefix);
	if ((cv->w = load(ld, name, 4, ws, err)) == NULL)
		return -1;
	snprintf(name, sizeof name, "%s.bias", prefix);
	return (cv->b = load(ld, name, 1, &cout, err)) ? 0 : -1;
}

static int load_norm(loader *ld, ae_norm *n, const char *prefix, int64_t c, titan_err *err)
{
	char name[256];
	n->c = c;
	snprintf(name, sizeof name, "%s.weight", prefix);
	if ((n->w = load(ld, name, 1, &c, err)) == NULL)
		return -1;
	snprintf(name, sizeof name, "%s.bias", prefix);
	return (n->b = load(ld, name, 1, &c, err)) ? 0 : -1;
}

/* PREFIX.SUB for the loaders below. */
static const char *sub(char *buf, size_t n, const char *prefix, const char *s)
{
	snprintf(buf, n, "%s.%s", prefix, s);
	return buf;
}

static int load_resnet(loader *ld, ae_resnet *r, const char *prefix, int64_t cin, int64_t cout,
		       titan_err *err)
{
	char n[256];
	if (load_norm(ld, &r->norm1, sub(n, sizeof n, prefix, "norm1"), cin, err) < 0 ||
	    load_conv(ld, &r->conv1, sub(n, sizeof n, prefix, "conv1"), cin, cout, 3, err) < 0 ||
	    load_norm(ld, &r->norm2, sub(n, sizeof n, prefix, "norm2"), cout, err) < 0 ||
	    load_conv(ld, &r->conv2, sub(n, sizeof n, prefix, "conv2"), cout, cout, 3, err) < 0)
		return -1;
	if (cin == cout)
		return 0;
	return load_conv(ld, &r->nin, sub(n, sizeof n, prefix, "nin_shortcut"), cin, cout, 1,
			 err);
}

static int load_mid(loader *ld, ae_mid *mid, const char *half, int64_t c, titan_err *err)
{
	char n[256];
	ae_attn *a = &mid->attn_1;
	snprintf(n, sizeof n, "%s.mid.block_1", half);
	if (load_resnet(ld, &mid->block_1, n, c, c, err) < 0)
		return -1;
	snprintf(n, sizeof n, "%s.mid.block_2", half);
	if (load_resnet(ld, &mid->block_2, n, c, c, err) < 0)
		return -1;
	const char *parts[] = {"q", "k", "v", "proj_out"};
	ae_conv *convs[] = {&a->q, &a->k, &a->v, &a->proj_out};
	for (int i = 0; i < 4; i++) {
		snprintf(n, sizeof n, "%s.mid.attn_1.%s", half, parts[i]);
		if (load_conv(ld, convs[i], n, c, c, 1, err) < 0)
			return -1;
	}
	snprintf(n, sizeof n, "%s.mid.attn_1.norm", half);
	return load_norm(ld, &a->norm, n, c, err);
}

static int alloc_blocks(ae_half *h, const flux_ae_config *c, int64_t per_level, titan_err *err)
{
	h->per_level = per_level;
	h->block = calloc((size_t)(c->n_levels * per_level + 1), sizeof *h->block);
	return h->block ? 0 : err_set(err, "fluxae: out of memory");
}

/* Level i's blocks PREFIX.i.block.J from *cin channels to cout (*cin
 * becomes cout). */
static int load_level(loader *ld, ae_half *h, const char *prefix, int64_t i, int64_t *cin,
		      int64_t cout, titan_err *err)
{
	char n[256];
	for (int64_t j = 0; j < h->per_level; j++, *cin = cout) {
		snprintf(n, sizeof n, "%s.%lld.block.%lld", prefix, (long long)i, (long long)j);
		if (load_resnet(ld, &h->block[i * h->per_level + j], n, *cin, cout, err) < 0)
			return -1;
	}
	return 0;
}

static int load_encoder(loader *ld, titan_err *err)
{
	const flux_ae_config *c = &ld->m->c;
	ae_half *e = &ld->m->enc;
	char n[256];
	int64_t L = c->n_levels, cin = c->ch;
	if (alloc_blocks(e, c, c->num_res_blocks, err) < 0 ||
	    load_conv(ld, &e->conv_in, "encoder.conv_in", c->in_channels, c->ch, 3, err) < 0)
		return -1;
	for (int64_t i = 0; i < L; i++) {
		if (load_level(ld, e, "encoder.down", i, &cin, c->ch * c->ch_mult[i], err) < 0)
			return -1;
		snprintf(n, sizeof n, "encoder.down.%lld.downsample.conv", (long long)i);
		if (i < L - 1 && load_conv(ld, &e->resample[i], n, cin, cin, 3, err) < 0)
			return -1;
	}
	int64_t mid = c->ch * c->ch_mult[L - 1];
	return load_mid(ld, &e->mid, "encoder", mid, err) < 0 ||
	       load_norm(ld, &e->norm_out, "encoder.norm_out", mid, err) < 0 ||
	       load_conv(ld, &e->conv_out, "encoder.conv_out", mid, 2 * c->z_channels, 3, err) < 0
	       ? -1 : 0;
}

static int load_decoder(loader *ld, titan_err *err)
{
	const flux_ae_config *c = &ld->m->c;
	ae_half *d = &ld->m->dec;
	char n[256];
	int64_t L = c->n_levels, cin = c->ch * c->ch_mult[L - 1];
	if (alloc_blocks(d, c, c->num_res_blocks + 1, err) < 0 ||
	    load_conv(ld, &d->conv_in, "decoder.conv_in", c->z_channels, cin, 3, err) < 0 ||
	    load_mid(ld, &d->mid, "decoder", cin, err) < 0)
		return -1;
	for (int64_t i = L - 1; i >= 0; i--) {
		if (load_level(ld, d, "decoder.up", i, &cin, c->ch * c->ch_mult[i], err) < 0)
			return -1;
		snprintf(n, sizeof n, "decoder.up.%lld.upsample.conv", (long long)i);
		if (i > 0 && load_conv(ld, &d->resample[i], n, cin, cin, 3, err) < 0)
			return -1;
	}
	return load_norm(ld, &d->norm_out, "decoder.norm_out", cin, err) < 0 ||
	       load_conv(ld, &d->conv_out, "decoder.conv_out", cin, c->out_ch, 3, err) < 0
	       ? -1 : 0;
}

flux_ae *flux_ae_open(backend *be, const char *safetensors_path, const flux_ae_config *c,
		      be_dtype dtype, titan_err *err)
{
	if (dtype != BE_F32 && dtype != BE_BF16) {
		err_set(err, "fluxae: dtype %s, expected float32 or bfloat16", be_dtype_name(dtype));
		return NULL;
	}
	if (config_check(c, "fluxae: config", err) < 0)
		return NULL;
	flux_ae *m = calloc(1, sizeof *m);
	if (m == NULL) {
		err_set(err, "fluxae: out of memory");
		return NULL;
	}
	*m = (flux_ae){.be = be, .c = *c, .dt = dtype, .chunk_bytes = DEFAULT_CHUNK_BYTES};
	st_set s;
	if (st_set_open(&s, safetensors_path, err) < 0) {
		free(m);
		return NULL;
	}
	loader ld = {.m = m, .s = &s};
	int rc = load_encoder(&ld, err) < 0 || load_decoder(&ld, err) < 0 ? -1 : 0;
	st_set_close(&s);
	if (rc < 0) {
		err_prefix(err, "%s", safetensors_path);
		flux_ae_free(m);
		return NULL;
	}
	return m;
}

const flux_ae_config *flux_ae_config_of(const flux_ae *m) { return &m->c; }
int64_t flux_ae_conv_numel(const flux_ae *m) { return m->conv_numel; }

void flux_ae_set_chunk_bytes(flux_ae *m, size_t bytes)
{
	m->chunk_bytes = bytes > 0 ? bytes : 1;
}

void flux_ae_free(flux_ae *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->n_params; i++)
		m->be->ops->free(m->be, m->params[i]);
	free(m->params);
	free(m->enc.block);
	free(m->dec.block);
	free(m);
}
