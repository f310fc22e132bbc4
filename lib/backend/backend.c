/* What every backend shares: element types, faults, allocation helpers. */
#include <stdarg.h>
#include <string.h>

#include "backend/backend.h"

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

