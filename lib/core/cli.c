#include "core/cli.h"
#include "core/cpu_isa.h"
#include "core/err.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ID_HELP = -1000, ID_VERSION = -1001 };

#define CLI_MAX_OPTS 128

void cli_begin(cli_state *st, const cli_spec *spec)
{
	memset(st, 0, sizeof *st);
	st->spec = spec;
	st->optind = 1;
	titan_set_progname(spec->prog);
	optind = 1;
	opterr = 0;
	/* Every program computes at the level TITAN_CPU_ISA chooses (CRC32C,
	 * the kernels): a level it cannot have is bad usage, said at once. */
	titan_err e;
	if (cpu_isa_check(&e) != 0) {
		fprintf(stderr, "%s: %s\n", spec->prog, e.msg);
		exit(TITAN_EXIT_USAGE);
	}
}

static int count_opts(const cli_spec *spec)
{
	int n = 0;
	while (spec->opts != NULL && spec->opts[n].name != NULL)
		n++;
	return n;
}

void cli_print_help(const cli_spec *spec)
{
	printf("usage: %s %s\n", spec->prog, spec->synopsis);
	if (spec->summary)
		printf("%s\n", spec->summary);
	printf("\noptions:\n");
	int n = count_opts(spec);
	for (int i = 0; i < n; i++) {
		const cli_option *o = &spec->opts[i];
		char left[64];
		int len = 0;
		if (o->short_name)
			len = snprintf(left, sizeof left, "-%c, ", o->short_name);
		else
			len = snprintf(left, sizeof left, "    ");
		if (o->has_arg == CLI_ARG)
			snprintf(left + len, sizeof left - len, "--%s %s", o->name,
				 o->arg ? o->arg : "ARG");
		else if (o->has_arg == CLI_OPT_ARG)
			snprintf(left + len, sizeof left - len, "--%s[=%s]", o->name,
				 o->arg ? o->arg : "ARG");
		else
			snprintf(left + len, sizeof left - len, "--%s", o->name);
		printf("  %-28s %s\n", left, o->help ? o->help : "");
	}
	printf("  %-28s %s\n", "-h, --help", "show this help and exit");
	printf("  %-28s %s\n", "    --version", "show the version and exit");
	if (spec->epilog)
		printf("\n%s", spec->epilog);
	printf("\nSee %s(1).\n", spec->prog);
}

_Noreturn void cli_usage_error(const cli_spec *spec, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", spec->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", spec->prog);
	exit(TITAN_EXIT_USAGE);
}

/* Build getopt_long's tables from the spec, adding --help and --version. */
static void build_tables(const cli_spec *spec, struct option *lo, char *shorts)
{
	int n = count_opts(spec), k = 0;
	char *s = shorts;
	*s++ = ':'; /* report missing arguments as ':' */
	for (int i = 0; i < n; i++) {
		const cli_option *o = &spec->opts[i];
		lo[k++] = (struct option){o->name, o->has_arg, NULL, o->id};
		if (o->short_name) {
			*s++ = (char)o->short_name;
			if (o->has_arg == CLI_ARG)
				*s++ = ':';
			else if (o->has_arg == CLI_OPT_ARG) {
				*s++ = ':';
				*s++ = ':';
			}
		}
	}
	lo[k++] = (struct option){"help", no_argument, NULL, ID_HELP};
	lo[k++] = (struct option){"version", no_argument, NULL, ID_VERSION};
	lo[k] = (struct option){0, 0, 0, 0};
	*s++ = 'h';
	*s = '\0';
}

static int short_to_id(const cli_spec *spec, int c)
{
	for (int i = 0; spec->opts != NULL && spec->opts[i].name != NULL; i++)
		if (spec->opts[i].short_name == c)
			return spec->opts[i].id;
	return c;
}

int cli_next(cli_state *st, int argc, char **argv)
{
	const cli_spec *spec = st->spec;
	int n = count_opts(spec);
	if (n + 3 > CLI_MAX_OPTS)
		titan_die(TITAN_EXIT_FAIL, "internal error: too many options");
	struct option lo[CLI_MAX_OPTS];
	char shorts[3 * CLI_MAX_OPTS + 4];
	build_tables(spec, lo, shorts);

	int prev = optind;
	int c = getopt_long(argc, argv, shorts, lo, NULL);
	st->optind = optind;
	st->arg = optarg;
	if (c == -1)
		return -1;
	if (c == 'h' || c == ID_HELP) {
		cli_print_help(spec);
		exit(TITAN_EXIT_OK);
	}
	if (c == ID_VERSION) {
		printf("%s %s\n", spec->prog, TITAN_VERSION);
		exit(TITAN_EXIT_OK);
	}
	const char *word = prev < argc ? argv[prev] : "?";
	if (c == '?') {
		if (optopt && optopt < 256)
			cli_usage_error(spec, "unknown option '-%c'", optopt);
		cli_usage_error(spec, "unknown option '%s'", word);
	}
	if (c == ':')
		cli_usage_error(spec, "option '%s' needs an argument", word);
	return c < 256 ? short_to_id(spec, c) : c;
}

int64_t cli_int(const cli_spec *spec, const char *opt, const char *s, int64_t min, int64_t max)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end != '\0')
		cli_usage_error(spec, "%s: '%s' is not a whole number", opt, s);
	if (v < min || v > max)
		cli_usage_error(spec, "%s: %lld is out of range [%lld, %lld]", opt, v,
				(long long)min, (long long)max);
	return v;
}

uint64_t cli_size(const cli_spec *spec, const char *opt, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		cli_usage_error(spec, "%s: '%s' is not a size", opt, s);
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: cli_usage_error(spec, "%s: '%s': unknown suffix '%s'", opt, s, end);
	}
	if (*end != '\0' && end[1] != '\0')
		cli_usage_error(spec, "%s: '%s': unknown suffix '%s'", opt, s, end);
	if (shift && v > (UINT64_MAX >> shift))
		cli_usage_error(spec, "%s: '%s' is too large", opt, s);
	return (uint64_t)v << shift;
}

double cli_double(const cli_spec *spec, const char *opt, const char *s, double min, double max)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || isnan(v))
		cli_usage_error(spec, "%s: '%s' is not a number", opt, s);
	if (v < min || v > max)
		cli_usage_error(spec, "%s: %g is out of range [%g, %g]", opt, v, min, max);
	return v;
}

int cli_stdout_status(int status)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return status;
	titan_warn("standard output: %s", errno ? strerror(errno) : "write error");
	return TITAN_EXIT_FAIL;
}
