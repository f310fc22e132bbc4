/* err.h: error values and the program's exit conventions.
 *
 * Library functions return 0 / -1 (or NULL) and leave a one-line message in a
 * titan_err owned by the caller; only main() prints it and exits.  Messages
 * name the file, the line or offset, and what was expected:
 *   "shards/train-000003.bin: bad magic 0x00000000, expected \"TTSH\"". */
#ifndef TITAN_ERR_H
#define TITAN_ERR_H

#include <stdarg.h>
#include <stdnoreturn.h>

enum {
	TITAN_EXIT_OK = 0,
	TITAN_EXIT_FAIL = 1,  /* the job failed: bad input, I/O error */
	TITAN_EXIT_USAGE = 2, /* bad command line */
};

typedef struct titan_err {
	char msg[1024];
} titan_err;

/* Set *e (when e is not NULL) to a printf-formatted message.  Returns -1 so that
 * `return err_set(e, ...);` reads naturally. */
int err_set(titan_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int err_setv(titan_err *e, const char *fmt, va_list ap);

/* Like err_set, but appends ": strerror(errno)". */
int err_errno(titan_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Put "prefix: " in front of the message already in *e (e.g. a file name). */
int err_prefix(titan_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The program name used in diagnostics ("titan-shard"); set once by main(). */
void titan_set_progname(const char *name);
const char *titan_progname(void);

/* "titan-NAME: message" on stderr (nothing once warnings are off: the
 * ranks of a job but the first say what the first says). */
void titan_set_warnings(int on);
void titan_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void titan_err_print(const titan_err *e);

/* Print "titan-NAME: message" and exit with status code. */
noreturn void titan_die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
noreturn void titan_die_err(const titan_err *e);

#endif
