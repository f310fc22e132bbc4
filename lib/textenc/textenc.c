/* textenc.c: what the T5 and CLIP encoders share: loading weights into backend
 * memory, scratch, the linears, and moving tensors between host and backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptzip/ptzip.h"
#include "textenc/textenc_impl.h"

static int params_keep(te_params *ps, void *p, titan_err *err)
{
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 32;
		void **np = realloc(ps->p, cap * sizeof *np);
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

void *te_load(te_params *ps, const st_set *s, const char *const *prefixes, const char *name,
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
	void *dev = NULL;
	int rc = st_tensor_to_f32(t, ndim, want, host, err);
	if (rc == 0 && (dev = ps->be->ops->alloc(ps->be, n * be_dtype_size(ps->dt), err)) == NULL)
		rc = -1;
	if (rc == 0)
		rc = te_upload(ps->be, ps->dt, dev, host, (int64_t)n, err);
	free(host);
	if (rc < 0 || params_keep(ps, dev, err) < 0) {
		if (dev != NULL)
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

int te_open_dir(const char *dir,
		int (*read_config)(void *cfg, const char *path, titan_err *err), void *cfg,
		int (*load)(void *model, const st_set *s, titan_err *err), void *model,
		titan_err *err)
{
	char path[4096];
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

int te_scratch_alloc(backend *be, void **const *bufs, const size_t *bytes, size_t n,
		     int32_t **ids, size_t rows, titan_err *err)
{
	for (size_t i = 0; i < n; i++)
		if ((*bufs[i] = be->ops->alloc(be, bytes[i], err)) == NULL)
			return -1;
	*ids = be->ops->alloc(be, rows * sizeof **ids, err);
	return *ids ? 0 : -1;
}

void te_scratch_free(backend *be, void *const *bufs, size_t n, int32_t *ids)
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

void te_linear(backend *be, be_dtype dt, void *y, const void *x, const void *w, int64_t rows,
	       int64_t in, int64_t out)
{
	be->ops->matmul(be, 0, 1, rows, out, in, 1.0f, x, in, w, in, dt, 0.0f, y, out, dt);
}

int te_upload(backend *be, be_dtype dt, void *dev, const float *host, int64_t n, titan_err *err)
{
	size_t bytes = (size_t)n * be_dtype_size(dt);
	void *conv = NULL;
	if (dt == BE_BF16) {
		if ((conv = malloc(bytes ? bytes : 1)) == NULL)
			return err_set(err, "textenc: out of memory");
		ptz_convert(conv, PTZ_BF16, host, PTZ_F32, (size_t)n);
	}
	be->ops->copy(be, dev, conv ? conv : host, bytes, BACKEND_H2D);
	free(conv);
	return 0;
}

int te_download(backend *be, be_dtype dt, float *host, const void *dev, int64_t n, titan_err *err)
{
	if (dt == BE_F32) {
		be->ops->copy(be, host, dev, (size_t)n * sizeof *host, BACKEND_D2H);
		return 0;
	}
	uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
	if (h == NULL)
		return err_set(err, "textenc: out of memory");
	be->ops->copy(be, h, dev, (size_t)n * sizeof *h, BACKEND_D2H);
	ptz_convert(host, PTZ_F32, h, PTZ_BF16, (size_t)n);
	free(h);
	return 0;
}
