/* What every backend shares: element types, faults, allocation helpers. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bf16.h"

static const struct {
	be_dtype t;
	size_t size;
	const char *name;
} dtypes[] = {
	{BE_F32, 4, "float32"},
	{BE_BF16, 2, "bfloat16"},
	{BE_E4M3, 1, "float8_e4m3fn"},
	{BE_E5M2, 1, "float8_e5m2"},
};

size_t be_dtype_size(be_dtype t)
{
	return (unsigned)t < sizeof dtypes / sizeof dtypes[0] ? dtypes[t].size : 0;
}

const char *be_dtype_name(be_dtype t)
{
	return (unsigned)t < sizeof dtypes / sizeof dtypes[0] ? dtypes[t].name : "?";
}

int be_dtype_parse(const char *name)
{
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (strcmp(name, dtypes[i].name) == 0)
			return (int)dtypes[i].t;
	return -1;
}

void backend_fault(backend *be, const char *fmt, ...)
{
	if (be->faulted)
		return;
	va_list ap;
	va_start(ap, fmt);
	err_setv(&be->fault, fmt, ap);
	va_end(ap);
	be->faulted = 1;
}

int backend_take_fault(backend *be, titan_err *e)
{
	if (!be->faulted)
		return 0;
	be->faulted = 0;
	if (e)
		*e = be->fault;
	return -1;
}

void backend_free(backend *be)
{
	if (be)
		be->ops->destroy(be);
}

float *backend_alloc_floats(backend *be, size_t n, titan_err *e)
{
	return be->ops->alloc(be, n * sizeof(float), e);
}

float *backend_calloc_floats(backend *be, size_t n, titan_err *e)
{
	float *p = backend_alloc_floats(be, n, e);
	if (p)
		be->ops->zero(be, p, n * sizeof(float));
	return p;
}


int backend_upload(backend *be, be_dtype dt, void *dev, const float *host, int64_t n,
		   titan_err *err)
{
	if (dt == BE_F32) {
		be->ops->copy(be, dev, host, (size_t)n * sizeof *host, BACKEND_H2D);
		return 0;
	}
	uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
	if (h == NULL)
		return err_set(err, "backend: out of memory for %lld values to upload", (long long)n);
	for (int64_t i = 0; i < n; i++)
		h[i] = bf16_from_f32(host[i]);
	be->ops->copy(be, dev, h, (size_t)n * sizeof *h, BACKEND_H2D);
	free(h);
	return 0;
}

int backend_download(backend *be, be_dtype dt, float *host, const void *dev, int64_t n,
		     titan_err *err)
{
	if (dt == BE_F32) {
		be->ops->copy(be, host, dev, (size_t)n * sizeof *host, BACKEND_D2H);
		return 0;
	}
	uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
	if (h == NULL)
		return err_set(err, "backend: out of memory for %lld values to download",
			       (long long)n);
	be->ops->copy(be, h, dev, (size_t)n * sizeof *h, BACKEND_D2H);
	for (int64_t i = 0; i < n; i++)
		host[i] = bf16_to_f32(h[i]);
	free(h);
	return 0;
}
