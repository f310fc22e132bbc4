/* Unit tests of lib/core/cli and the exit conventions of lib/core/err: each case
 * parses a command line in a child process and checks its exit status, stdout
 * and stderr, since --help, --version and usage errors end the program. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/err.h"

enum { OPT_LEVEL = 256, OPT_SIZE, OPT_RATE };

static const cli_option opts[] = {
	{"out", 'o', CLI_ARG, 'o', "DIR", "write into DIR"},
	{"jobs", 'j', CLI_ARG, 'j', "N", "threads (1-64)"},
	{"verbose", 'v', CLI_NO_ARG, 'v', NULL, "say more"},
	{"level", 0, CLI_OPT_ARG, OPT_LEVEL, "N", "compression level"},
	{"size", 0, CLI_ARG, OPT_SIZE, "BYTES", "shard size (K, M, G, T suffixes)"},
	{"rate", 0, CLI_ARG, OPT_RATE, "R", "a fraction in [0, 1]"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-test",
	.synopsis = "[options] FILE...",
	.summary = "Exercise the shared command-line conventions.",
	.opts = opts,
};

/* The child: parse, print what was parsed, exit 0 (unless cli exits first). */
static _Noreturn void child_main(int argc, char **argv)
{
	cli_state st;
	cli_begin(&st, &spec);
	int c;
	while ((c = cli_next(&st, argc, argv)) != -1) {
		switch (c) {
		case 'o': printf("out=%s\n", st.arg); break;
		case 'j': printf("jobs=%" PRId64 "\n", cli_int(&spec, "--jobs", st.arg, 1, 64)); break;
		case 'v': printf("verbose\n"); break;
		case OPT_LEVEL: printf("level=%s\n", st.arg ? st.arg : "default"); break;
		case OPT_SIZE: printf("size=%" PRIu64 "\n", cli_size(&spec, "--size", st.arg)); break;
		case OPT_RATE: printf("rate=%g\n", cli_double(&spec, "--rate", st.arg, 0, 1)); break;
		default: printf("unexpected %d\n", c); break;
		}
	}
	for (int i = st.optind; i < argc; i++)
		printf("operand=%s\n", argv[i]);
	if (argc > 1 && strcmp(argv[argc - 1], "die") == 0)
		titan_die(TITAN_EXIT_FAIL, "%s: cannot open: %s", "x.bin", "No such file");
	exit(0);
}

typedef struct result {
	int status;
	char out[4096], err[4096];
} result;

static void slurp(FILE *fp, char *buf, size_t cap)
{
	rewind(fp);
	size_t n = fread(buf, 1, cap - 1, fp);
	buf[n] = '\0';
	fclose(fp);
}

/* Run child_main on the words (NULL-terminated) with stdout and stderr captured. */
static void run(result *r, ...)
{
	char *argv[32];
	int argc = 0;
	argv[argc++] = "titan-test";
	va_list ap;
	va_start(ap, r);
	char *w;
	while ((w = va_arg(ap, char *)) != NULL && argc < 31)
		argv[argc++] = w;
	va_end(ap);
	argv[argc] = NULL;

	FILE *out = tmpfile(), *err = tmpfile();
	assert_non_null(out);
	assert_non_null(err);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fileno(out), 1);
		dup2(fileno(err), 2);
		child_main(argc, argv);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	r->status = WEXITSTATUS(st);
	slurp(out, r->out, sizeof r->out);
	slurp(err, r->err, sizeof r->err);
}

static void help_lists_every_option_on_stdout_and_exits_0(void **state)
{
	(void)state;
	result r;
	run(&r, "--help", NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.err, "");
	assert_true(strncmp(r.out, "usage: titan-test [options] FILE...\n", 36) == 0);
	assert_non_null(strstr(r.out, "Exercise the shared command-line conventions."));
	assert_non_null(strstr(r.out, "-o, --out DIR"));
	assert_non_null(strstr(r.out, "-j, --jobs N"));
	assert_non_null(strstr(r.out, "-v, --verbose"));
	assert_non_null(strstr(r.out, "    --level[=N]"));
	assert_non_null(strstr(r.out, "-h, --help"));
	assert_non_null(strstr(r.out, "--version"));
	assert_non_null(strstr(r.out, "See titan-test(1)."));
	result s;
	run(&s, "-h", NULL);
	assert_int_equal(s.status, 0);
	assert_string_equal(s.out, r.out);
	/* --help wins over what comes after it. */
	run(&s, "--help", "--bogus", NULL);
	assert_int_equal(s.status, 0);
}

static void version_prints_name_and_version_and_exits_0(void **state)
{
	(void)state;
	result r;
	run(&r, "--version", NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "titan-test " TITAN_VERSION "\n");
	assert_string_equal(r.err, "");
}

static void bad_usage_is_one_line_and_a_hint_with_status_2(void **state)
{
	(void)state;
	result r;
	run(&r, "--bogus", NULL);
	assert_int_equal(r.status, TITAN_EXIT_USAGE);
	assert_string_equal(r.out, "");
	assert_string_equal(r.err, "titan-test: unknown option '--bogus'\nTry 'titan-test --help'.\n");
	run(&r, "-x", NULL);
	assert_int_equal(r.status, 2);
	assert_true(strncmp(r.err, "titan-test: unknown option '-x'\n", 32) == 0);
	run(&r, "--out", NULL);
	assert_int_equal(r.status, 2);
	assert_true(strncmp(r.err, "titan-test: option '--out' needs an argument\n", 45) == 0);
	run(&r, "-o", NULL);
	assert_int_equal(r.status, 2);
	assert_true(strncmp(r.err, "titan-test: option '-o' needs an argument\n", 41) == 0);
	run(&r, "--verbose=yes", NULL);
	assert_int_equal(r.status, 2);
}

static void options_and_operands_parse_in_any_order(void **state)
{
	(void)state;
	result r;
	run(&r, "a", "-v", "-o", "d", "--jobs=4", "--level", "b", "-j8", "--level=3", NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "verbose\nout=d\njobs=4\nlevel=default\njobs=8\nlevel=3\n"
				   "operand=a\noperand=b\n");
	/* "--" ends the options; "-" is an operand (standard input). */
	run(&r, "-v", "--", "-v", "-", NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "verbose\noperand=-v\noperand=-\n");
}

static void numbers_are_checked_and_named_by_option(void **state)
{
	(void)state;
	result r;
	run(&r, "-j", "0", NULL);
	assert_int_equal(r.status, 2);
	assert_true(strncmp(r.err, "titan-test: --jobs: 0 is out of range [1, 64]\n", 46) == 0);
	run(&r, "-j", "4x", NULL);
	assert_int_equal(r.status, 2);
	assert_true(strncmp(r.err, "titan-test: --jobs: '4x' is not a whole number\n", 47) == 0);
	run(&r, "-j", "", NULL);
	assert_int_equal(r.status, 2);
	run(&r, "--rate", "0.25", NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "rate=0.25\n");
	run(&r, "--rate", "nan", NULL);
	assert_int_equal(r.status, 2);
	run(&r, "--rate", "1.5", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--rate: 1.5 is out of range [0, 1]"));
}

static void sizes_take_binary_suffixes(void **state)
{
	(void)state;
	result r;
	run(&r, "--size", "100", "--size", "4K", "--size", "3m", "--size", "1G", "--size", "2T",
	    NULL);
	assert_int_equal(r.status, 0);
	assert_string_equal(r.out, "size=100\nsize=4096\nsize=3145728\nsize=1073741824\n"
				   "size=2199023255552\n");
	run(&r, "--size", "3X", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "unknown suffix 'X'"));
	run(&r, "--size", "4KB", NULL);
	assert_int_equal(r.status, 2);
	run(&r, "--size", "-1", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "'-1' is not a size"));
	run(&r, "--size", "17179869184T", NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "is too large"));
}

static void die_prints_program_name_and_exits_1(void **state)
{
	(void)state;
	result r;
	run(&r, "die", NULL);
	assert_int_equal(r.status, TITAN_EXIT_FAIL);
	assert_string_equal(r.err, "titan-test: x.bin: cannot open: No such file\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_lists_every_option_on_stdout_and_exits_0),
		cmocka_unit_test(version_prints_name_and_version_and_exits_0),
		cmocka_unit_test(bad_usage_is_one_line_and_a_hint_with_status_2),
		cmocka_unit_test(options_and_operands_parse_in_any_order),
		cmocka_unit_test(numbers_are_checked_and_named_by_option),
		cmocka_unit_test(sizes_take_binary_suffixes),
		cmocka_unit_test(die_prints_program_name_and_exits_1),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
