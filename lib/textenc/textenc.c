/* textenc.c: loading and the plain-C ops shared by the T5 and CLIP encoders. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "textenc/textenc_impl.h"

static int params_keep(te_params *ps, float *p, titan_err *err)
{
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 32;
		float **np = realloc(ps->p, cap * sizeof *np);
		if (np == NULL)
			return err_set(err, "textenc: out of memory");
		ps->p = np;
		ps->cap = cap;
	}
	ps->p[ps->n++] = p;
	return 0;
}

static const st_tensor *find_prefixed(const st_set *s, const char *const *prefixes,
				      const char *name, char *full, size_t nfull)
{
	for (size_t i = 0; prefixes[i] != NULL; i++) {
		snprintf(full, nfull, "%s%s", prefixes[i], name);
		const st_tensor *t = st_set_find(s, full);
		if (t != NULL)
			return t;
	}
	snprintf(full, nfull, "%s%s", prefixes[0], name);
	return NULL;
}

float *te_load(te_params *ps, const st_set *s, const char *const *prefixes, const char *name,
	       int ndim, int64_t d0, int64_t d1, titan_err *err)
{
	char full[512];
	const st_tensor *t = find_prefixed(s, prefixes, name, full, sizeof full);
	if (t == NULL) {
		err_set(err, "tensor '%s': missing from the checkpoint", full);
		return NULL;
	}
	int64_t want[2] = {d0, d1};
	size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
	float *host = malloc(n * sizeof *host);
	if (host == NULL) {
		err_set(err, "tensor '%s': out of memory", full);
		return NULL;
	}
	float *dev = NULL;
	if (st_tensor_to_f32(t, ndim, want, host, err) < 0 ||
	    (dev = backend_alloc_floats(ps->be, n, err)) == NULL) {
		free(host);
		return NULL;
	}
	te_round(ps->bf16, host, (int64_t)n);
	ps->be->ops->copy(ps->be, dev, host, n * sizeof *host, BACKEND_H2D);
	free(host);
	if (params_keep(ps, dev, err) < 0) {
		ps->be->ops->free(ps->be, dev);
		return NULL;
	}
	return dev;
}

void te_params_free(te_params *ps)
{
	for (size_t i = 0; i < ps->n; i++)
		ps->be->ops->free(ps->be, ps->p[i]);
	free(ps->p);
	memset(ps, 0, sizeof *ps);
}

int te_check_backend(const backend *be, const char *what, titan_err *err)
{
	if (strcmp(be->ops->name, "cpu") != 0)
		return err_set(err, "%s: the %s backend is not supported (the encoders' own ops "
			       "are plain C over host memory: the CPU backend only)",
			       what, be->ops->name);
	return 0;
}

int te_open_dir(backend *be, const char *dir, const char *what,
		int (*read_config)(void *cfg, const char *path, titan_err *err), void *cfg,
		int (*load)(void *model, const st_set *s, titan_err *err), void *model,
		titan_err *err)
{
	char path[4096];
	if (te_check_backend(be, what, err) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (read_config(cfg, path, err) < 0)
		return -1;
	st_set s;
	if (st_set_open(&s, dir, err) < 0)
		return -1;
	int rc = load(model, &s, err);
	st_set_close(&s);
	if (rc < 0)
		err_prefix(err, "%s", dir);
	return rc;
}

int te_scratch_alloc(backend *be, float **const *bufs, const size_t *sizes, size_t n,
		     int32_t **ids, size_t rows, titan_err *err)
{
	for (size_t i = 0; i < n; i++)
		if ((*bufs[i] = backend_alloc_floats(be, sizes[i], err)) == NULL)
			return -1;
	*ids = be->ops->alloc(be, rows * sizeof **ids, err);
	return *ids ? 0 : -1;
}

void te_scratch_free(backend *be, float *const *bufs, size_t n, int32_t *ids)
{
	for (size_t i = 0; i < n; i++)
		if (bufs[i] != NULL)
			be->ops->free(be, bufs[i]);
	if (ids != NULL)
		be->ops->free(be, ids);
}

int te_check_ids(const int32_t *ids, int64_t n, int64_t vocab, const char *what, titan_err *err)
{
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= vocab)
			return err_set(err, "%s: token id %d at index %lld is outside the vocabulary "
				       "[0, %lld)", what, ids[i], (long long)i, (long long)vocab);
	return 0;
}

void te_linear(backend *be, float *y, const float *x, const float *w, int64_t rows, int64_t in,
	       int64_t out)
{
	be->ops->matmul(be, 0, 1, rows, out, in, 1.0f, x, in, w, in, BE_F32, 0.0f, y, out,
			BE_F32);
}

void te_round(int bf16, float *x, int64_t n)
{
	if (!bf16)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
		x[i] = bf16_round(x[i]);
}

void te_residual(backend *be, int bf16, float *x, float *t, int64_t n)
{
	te_round(bf16, t, n);
	be->ops->add(be, x, BE_F32, x, BE_F32, t, BE_F32, n);
	te_round(bf16, x, n);
}

void te_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t d,
		  float eps)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const float *xr = x + i * d;
		float *yr = y + i * d;
		double mean = 0, var = 0;
		for (int64_t j = 0; j < d; j++)
			mean += xr[j];
		mean /= (double)d;
		for (int64_t j = 0; j < d; j++)
			var += (xr[j] - mean) * (xr[j] - mean);
		var /= (double)d; /* biased, as nn.LayerNorm */
		float rstd = (float)(1.0 / sqrt(var + eps));
		for (int64_t j = 0; j < d; j++)
			yr[j] = (float)(xr[j] - mean) * rstd * w[j] + b[j];
	}
}

void te_gated_gelu_new(float *restrict g, const float *restrict u, int64_t n, int bf16)
{
	/* transformers' NewGELUActivation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
	const float c = 0.7978845608028654f;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++) {
		float x = g[i];
		float y = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
		g[i] = bf16 ? bf16_round(bf16_round(y) * u[i]) : y * u[i];
	}
}

void te_quick_gelu(float *x, int64_t n)
{
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i++)
		x[i] = x[i] / (1.0f + expf(-1.702f * x[i]));
}
