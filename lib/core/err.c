#include "core/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *progname = "titan";

void titan_set_progname(const char *name)
{
	progname = name;
}

const char *titan_progname(void)
{
	return progname;
}

int err_setv(titan_err *e, const char *fmt, va_list ap)
{
	if (e != NULL)
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	return -1;
}

int err_set(titan_err *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_setv(e, fmt, ap);
	va_end(ap);
	return -1;
}

int err_errno(titan_err *e, const char *fmt, ...)
{
	int saved = errno;
	if (e == NULL)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	size_t n = strlen(e->msg);
	snprintf(e->msg + n, sizeof e->msg - n, ": %s", strerror(saved));
	errno = saved;
	return -1;
}

int err_prefix(titan_err *e, const char *fmt, ...)
{
	if (e == NULL)
		return -1;
	char head[512], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	snprintf(e->msg, sizeof e->msg, "%s: %s", head, old);
	return -1;
}

static int warnings = 1;

void titan_set_warnings(int on)
{
	warnings = on;
}

void titan_warn(const char *fmt, ...)
{
	if (!warnings)
		return;
	va_list ap;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void titan_err_print(const titan_err *e)
{
	fprintf(stderr, "%s: %s\n", progname, e->msg[0] ? e->msg : "unknown error");
}

noreturn void titan_die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

noreturn void titan_die_err(const titan_err *e)
{
	titan_err_print(e);
	exit(TITAN_EXIT_FAIL);
}
