/* cli.h: getopt_long with the conventions every titan program shares.
 *
 * A program describes its options once in a table; cli_next() handles
 * --help (usage on stdout, exit 0), --version (exit 0) and bad usage (one line
 * on stderr, exit 2) and returns the program's own options one at a time. */
#ifndef TITAN_CLI_H
#define TITAN_CLI_H

#include <stdint.h>

#define TITAN_VERSION "0.1.0"

enum { CLI_NO_ARG = 0, CLI_ARG = 1, CLI_OPT_ARG = 2 };

typedef struct cli_option {
	const char *name;  /* long name without "--" */
	int short_name;    /* 0 if none */
	int has_arg;       /* CLI_NO_ARG, CLI_ARG, CLI_OPT_ARG */
	int id;            /* returned by cli_next(); use values >= 256 for long-only */
	const char *arg;   /* argument's name in --help, e.g. "N" */
	const char *help;  /* one line */
} cli_option;

typedef struct cli_spec {
	const char *prog;        /* "titan-shard" */
	const char *synopsis;    /* "[options] --out DIR [FILE...]" (may hold '\n') */
	const char *summary;     /* one sentence */
	const cli_option *opts;  /* terminated by an entry with name == NULL */
	const char *epilog;      /* extra --help text, or NULL */
} cli_spec;

typedef struct cli_state {
	const cli_spec *spec;
	const char *arg; /* the option's argument, or NULL */
	int optind;      /* after the last call: index of the first operand */
	void *priv;
} cli_state;

/* Set the program name for diagnostics and prepare to parse. */
void cli_begin(cli_state *st, const cli_spec *spec);

/* Next option's id, or -1 when only operands remain (st->optind). */
int cli_next(cli_state *st, int argc, char **argv);

/* Print the usage to stdout (the body of --help). */
void cli_print_help(const cli_spec *spec);

/* "titan-NAME: message" and "Try 'titan-NAME --help'." on stderr, exit 2. */
_Noreturn void cli_usage_error(const cli_spec *spec, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* For a command whose standard output is its result: flush it, and when a
 * write failed (a full disk, a closed pipe, > /dev/full) say so as
 * "titan-NAME: standard output: REASON" and return TITAN_EXIT_FAIL; otherwise
 * return status.  main() ends with `return cli_stdout_status(status);`. */
int cli_stdout_status(int status);

/* Parse a whole number / a number with an optional K, M, G, T suffix (powers of
 * 1024) / a floating-point number; on failure, cli_usage_error naming the option. */
int64_t cli_int(const cli_spec *spec, const char *opt, const char *s, int64_t min, int64_t max);
uint64_t cli_size(const cli_spec *spec, const char *opt, const char *s);
double cli_double(const cli_spec *spec, const char *opt, const char *s, double min, double max);

#endif
