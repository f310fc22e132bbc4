/* Unit tests of lib/core/progress: unit formatting, and drawing only on a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/progress.h"

#define MiB (1024.0 * 1024.0)

static void amounts_use_binary_prefixes_for_bytes(void **state)
{
	(void)state;
	char b[64];
	assert_string_equal(progress_fmt_amount(b, sizeof b, 0, PROGRESS_BYTES, NULL), "0 B");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 512, PROGRESS_BYTES, NULL), "512 B");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 1023, PROGRESS_BYTES, NULL), "1023 B");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 1024, PROGRESS_BYTES, NULL), "1.00 KiB");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 1536, PROGRESS_BYTES, NULL), "1.50 KiB");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 10.3 * MiB, PROGRESS_BYTES, NULL),
			    "10.3 MiB");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 5e9, PROGRESS_BYTES, NULL), "4.66 GiB");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 300.0 * 1024 * MiB * 1024,
						PROGRESS_BYTES, NULL), "300 TiB");
	/* 9.996 rounds up to 10.0, not "10.00" */
	assert_string_equal(progress_fmt_amount(b, sizeof b, 9.996 * 1024, PROGRESS_BYTES, NULL),
			    "10.0 KiB");
}

static void amounts_use_decimal_prefixes_for_tokens_and_items(void **state)
{
	(void)state;
	char b[64];
	assert_string_equal(progress_fmt_amount(b, sizeof b, 950, PROGRESS_TOKENS, NULL), "950 tok");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 999.6, PROGRESS_TOKENS, NULL),
			    "1.00k tok");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 1234567, PROGRESS_TOKENS, NULL),
			    "1.23M tok");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 2.5e12, PROGRESS_TOKENS, NULL),
			    "2.50T tok");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 12345, PROGRESS_ITEMS, "docs"),
			    "12.3k docs");
	assert_string_equal(progress_fmt_amount(b, sizeof b, 7, PROGRESS_ITEMS, NULL), "7 items");
	assert_string_equal(progress_fmt_amount(b, sizeof b, -5, PROGRESS_ITEMS, NULL), "0 items");
}

static void rates_append_per_second(void **state)
{
	(void)state;
	char b[64];
	assert_string_equal(progress_fmt_rate(b, sizeof b, 45.6 * MiB, PROGRESS_BYTES, NULL),
			    "45.6 MiB/s");
	assert_string_equal(progress_fmt_rate(b, sizeof b, 1.2e6, PROGRESS_TOKENS, NULL),
			    "1.20M tok/s");
	assert_string_equal(progress_fmt_rate(b, sizeof b, 0.5, PROGRESS_BYTES, NULL), "0.50 B/s");
	assert_string_equal(progress_fmt_rate(b, sizeof b, NAN, PROGRESS_BYTES, NULL), "0 B/s");
}

static void durations_pick_two_units(void **state)
{
	(void)state;
	char b[32];
	assert_string_equal(progress_fmt_duration(b, sizeof b, 0), "0s");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 7.4), "7s");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 59.6), "1m00s");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 185), "3m05s");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 7380), "2h03m");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 3 * 86400 + 4 * 3600 + 59),
			    "3d04h");
	assert_string_equal(progress_fmt_duration(b, sizeof b, -1), "--");
	assert_string_equal(progress_fmt_duration(b, sizeof b, INFINITY), "--");
	assert_string_equal(progress_fmt_duration(b, sizeof b, NAN), "--");
	assert_string_equal(progress_fmt_duration(b, sizeof b, 1e300), "--");
}

static void line_shows_percent_bar_rate_and_eta(void **state)
{
	(void)state;
	progress pg;
	FILE *fp = tmpfile();
	assert_non_null(fp);
	progress_init_fp(&pg, fp, "shard", PROGRESS_BYTES, 100 * 1048576);
	char b[256];
	/* 50 MiB of 100 in 10 s: 5 MiB/s, 10 s to go. */
	progress_fmt_line(b, sizeof b, &pg, 50 * 1048576, 100 * 1048576, 10.0, 80);
	assert_true(strlen(b) <= 79);
	assert_true(strncmp(b, "shard  50% [", 12) == 0);
	const char *tail = "] 50.0 MiB/100 MiB  5.00 MiB/s  ETA 10s";
	assert_non_null(strstr(b, tail));
	assert_string_equal(b + strlen(b) - strlen(tail), tail);
	/* The bar is half full. */
	const char *bar = b + 12;
	int len = (int)(strchr(bar, ']') - bar), eq = 0;
	for (int i = 0; i < len; i++)
		eq += bar[i] == '=';
	assert_true(len >= 10);
	assert_int_equal(eq, len / 2);

	/* Unknown total: amount, rate and elapsed time. */
	progress_fmt_line(b, sizeof b, &pg, 50 * 1048576, 0, 10.0, 80);
	assert_string_equal(b, "shard 50.0 MiB  5.00 MiB/s  10s");
	/* Nothing done yet: no rate, no ETA. */
	progress_fmt_line(b, sizeof b, &pg, 0, 100, 0.0, 80);
	assert_non_null(strstr(b, "  0% ["));
	assert_non_null(strstr(b, "0 B/s  ETA --"));
	/* Narrow terminal: no bar, and still no wrap. */
	progress_fmt_line(b, sizeof b, &pg, 25 * 1048576, 100 * 1048576, 5.0, 40);
	assert_null(strchr(b, '['));
	assert_true(strlen(b) <= 39);
	assert_true(strncmp(b, "shard  25% 25.0 MiB", 19) == 0);
	progress_finish(&pg, 0);
	fclose(fp);
}

static void summary_states_amount_time_and_rate(void **state)
{
	(void)state;
	progress pg;
	FILE *fp = tmpfile();
	assert_non_null(fp);
	progress_init_fp(&pg, fp, "tokenize", PROGRESS_TOKENS, 0);
	char b[256];
	progress_fmt_summary(b, sizeof b, &pg, 3000000, 64.0);
	assert_string_equal(b, "tokenize: 3.00M tok in 1m04s, 46.9k tok/s");
	progress_finish(&pg, 0);
	fclose(fp);
}

static long file_size(FILE *fp)
{
	fflush(fp);
	return lseek(fileno(fp), 0, SEEK_END);
}

static void nothing_is_drawn_on_a_file_but_the_summary_is_written(void **state)
{
	(void)state;
	titan_set_progname("titan-test");
	FILE *fp = tmpfile();
	assert_non_null(fp);
	progress pg;
	progress_init_fp(&pg, fp, "fetch", PROGRESS_BYTES, 1000);
	pg.interval = 0; /* would redraw on every call on a terminal */
	pg.next_draw = 0;
	for (int i = 0; i < 1000; i++)
		progress_add(&pg, 1);
	progress_set(&pg, 1000);
	assert_int_equal(file_size(fp), 0);
	progress_finish(&pg, 0);
	assert_int_equal(file_size(fp), 0);

	progress_init_fp(&pg, fp, "fetch", PROGRESS_BYTES, 1000);
	progress_add(&pg, 1000);
	progress_finish(&pg, 1);
	char line[256] = {0};
	rewind(fp);
	assert_non_null(fgets(line, sizeof line, fp));
	assert_true(strncmp(line, "titan-test: fetch: 1000 B in ", 29) == 0);
	assert_non_null(strstr(line, "B/s\n"));
	assert_null(fgets(line, sizeof line, fp)); /* one line only */
	fclose(fp);
}

/* A pseudo-terminal: what the program writes to the slave, the test reads
 * from the master. */
typedef struct pty {
	int master;
	FILE *slave;
} pty;

static int open_pty(pty *t)
{
	t->master = posix_openpt(O_RDWR | O_NOCTTY);
	if (t->master < 0 || grantpt(t->master) != 0 || unlockpt(t->master) != 0)
		return -1;
	int s = open(ptsname(t->master), O_RDWR | O_NOCTTY);
	if (s < 0)
		return -1;
	t->slave = fdopen(s, "w");
	return t->slave ? 0 : -1;
}

static size_t read_pty(pty *t, char *buf, size_t cap)
{
	size_t n = 0;
	struct pollfd pfd = {t->master, POLLIN, 0};
	while (n + 1 < cap && poll(&pfd, 1, 200) == 1) {
		ssize_t r = read(t->master, buf + n, cap - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	return n;
}

static int count(const char *s, const char *what)
{
	int c = 0;
	for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
		c++;
	return c;
}

static void a_terminal_gets_the_bar_redrawn_in_place(void **state)
{
	(void)state;
	pty t;
	if (open_pty(&t) != 0)
		skip(); /* no pseudo-terminals in this sandbox */
	progress pg;
	progress_init_fp(&pg, t.slave, "train", PROGRESS_ITEMS, 10);
	progress_set_noun(&pg, "steps");
	assert_true(pg.tty);
	pg.next_draw = 0; /* draw at the next call */
	progress_add(&pg, 5);
	progress_finish(&pg, 0);
	char out[4096];
	read_pty(&t, out, sizeof out);
	/* One bar, drawn after a carriage return and erased at the end. */
	assert_int_equal(count(out, "train  50% ["), 1);
	assert_non_null(strstr(out, "5 steps/10 steps"));
	assert_int_equal(out[0], '\r');
	assert_int_equal(count(out, "\033[K"), 2);
	assert_null(strchr(out, '\n'));
	fclose(t.slave);
	close(t.master);
}

static void redraws_are_throttled(void **state)
{
	(void)state;
	pty t;
	if (open_pty(&t) != 0)
		skip();
	progress pg;
	progress_init_fp(&pg, t.slave, "encode", PROGRESS_TOKENS, 0);
	pg.interval = 3600; /* after the first draw, none for an hour */
	pg.next_draw = 0;
	for (int i = 0; i < 10000; i++)
		progress_add(&pg, 3);
	char out[4096];
	read_pty(&t, out, sizeof out);
	assert_int_equal(count(out, "encode "), 1);
	assert_non_null(strstr(out, "encode 3 tok"));
	progress_finish(&pg, 0);
	fclose(t.slave);
	close(t.master);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(amounts_use_binary_prefixes_for_bytes),
		cmocka_unit_test(amounts_use_decimal_prefixes_for_tokens_and_items),
		cmocka_unit_test(rates_append_per_second),
		cmocka_unit_test(durations_pick_two_units),
		cmocka_unit_test(line_shows_percent_bar_rate_and_eta),
		cmocka_unit_test(summary_states_amount_time_and_rate),
		cmocka_unit_test(nothing_is_drawn_on_a_file_but_the_summary_is_written),
		cmocka_unit_test(a_terminal_gets_the_bar_redrawn_in_place),
		cmocka_unit_test(redraws_are_throttled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
