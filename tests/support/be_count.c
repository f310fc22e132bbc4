/* A backend's copies and syncs counted (be_count.h). */
#include "be_count.h"

#include <stddef.h>

static const backend_ops *own;
static backend_ops counting;
static be_count *into;

static void count_copy(backend *be, void *dst, const void *src, size_t bytes, int kind)
{
	if (kind >= 0 && kind < 3)
		into->copies[kind]++;
	own->copy(be, dst, src, bytes, kind);
}

static int count_sync(backend *be, titan_err *e)
{
	into->syncs++;
	return own->sync(be, e);
}

void be_count_wrap(backend *be, be_count *c)
{
	own = be->ops;
	counting = *own;
	counting.copy = count_copy;
	counting.sync = count_sync;
	into = c;
	be->ops = &counting;
}

void be_count_unwrap(backend *be)
{
	be->ops = own;
}
