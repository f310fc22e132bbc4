/* Unit tests of tests/support/case_args: the parser of the cases that
 * test_plan, test_ep and test_family_plan read from their environment.
 * Before it, each program found a key with strstr, so that "rep=2" also set
 * "ep" and "reshard=always" set "shard" to atoi("always"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "../support/case_args.h"

static void parse(case_args *a, const char *text)
{
	titan_err e = {{0}};
	if (case_parse(a, "TITAN_TEST_CASE", text, &e) != 0)
		fail_msg("%s", e.msg);
}

/* case_end's message, "" when it accepts. */
static const char *end_message(case_args *a, titan_err *e)
{
	e->msg[0] = '\0';
	if (case_end(a, e) == 0)
		return "";
	print_message("%s\n", e->msg);
	return e->msg;
}

static void a_key_matches_only_whole(void **state)
{
	(void)state;
	case_args a;
	titan_err e;
	parse(&a, "rep=2 reshard=always");
	assert_int_equal(case_int(&a, "ep", 1), 1);
	assert_int_equal(case_int(&a, "rep", 1), 2);
	assert_int_equal(case_int(&a, "shard", 5), 5);
	assert_string_equal(case_str(&a, "reshard", "default"), "always");
	assert_string_equal(end_message(&a, &e), "");
}

static void values_are_read_as_their_kind(void **state)
{
	(void)state;
	static const case_choice ac[] = {{"none", 0}, {"full", 1}, {"sel2", 2}, {NULL, 0}};
	case_args a;
	titan_err e;
	parse(&a, "  shard=-3\tac=sel2 csv=tests/pp/x.csv ");
	assert_int_equal(case_int(&a, "shard", 1), -3);
	assert_int_equal(case_pick(&a, "ac", ac, 0), 2);
	assert_string_equal(case_str(&a, "csv", ""), "tests/pp/x.csv");
	assert_int_equal(case_int(&a, "tp", 7), 7);
	assert_null(case_str(&a, "sched", NULL));
	assert_string_equal(end_message(&a, &e), "");
}

static void no_case_takes_every_default(void **state)
{
	(void)state;
	case_args a;
	titan_err e;
	parse(&a, NULL);
	assert_int_equal(case_int(&a, "steps", 5), 5);
	assert_string_equal(end_message(&a, &e), "");
	parse(&a, "");
	assert_int_equal(a.n, 0);
}

/* The sanitizer runs of tests/plan/equiv.sh put "steps=2" first. */
static void the_first_of_a_repeated_key_counts(void **state)
{
	(void)state;
	case_args a;
	titan_err e;
	parse(&a, "steps=2 shard=2 steps=200");
	assert_int_equal(case_int(&a, "shard", 1), 2);
	assert_int_equal(case_int(&a, "steps", 5), 2);
	assert_string_equal(end_message(&a, &e), "");
}

static void an_unknown_key_is_refused_naming_it(void **state)
{
	(void)state;
	case_args a;
	titan_err e;
	parse(&a, "rep=2 ep=2 shard=1");
	assert_int_equal(case_int(&a, "rep", 1), 2);
	assert_int_equal(case_int(&a, "shard", 1), 1);
	const char *m = end_message(&a, &e);
	assert_non_null(strstr(m, "TITAN_TEST_CASE \"rep=2 ep=2 shard=1\""));
	assert_non_null(strstr(m, "unknown key \"ep\" (known: rep, shard)"));
}

static void a_bad_number_is_refused(void **state)
{
	(void)state;
	static const char *bad[] = {"shard=2x", "shard=", "shard=x", "shard=99999999999",
				    "shard=1.5"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		case_args a;
		titan_err e;
		parse(&a, bad[i]);
		assert_int_equal(case_int(&a, "shard", 4), 4); /* the default, not a guess */
		const char *m = end_message(&a, &e);
		assert_non_null(strstr(m, bad[i]));
		assert_non_null(strstr(m, "expected an integer"));
	}
}

static void a_bad_word_is_refused_listing_the_good(void **state)
{
	(void)state;
	static const case_choice ac[] = {{"none", 0}, {"full", 1}, {"op", 3}, {NULL, 0}};
	case_args a;
	titan_err e;
	parse(&a, "ac=ful tp=x");
	assert_int_equal(case_pick(&a, "ac", ac, 0), 0);
	assert_int_equal(case_int(&a, "tp", 1), 1);
	/* the first error is the one kept */
	assert_non_null(strstr(end_message(&a, &e), "ac=ful: expected one of none, full, op"));
}

static void a_word_that_is_not_key_value_is_refused(void **state)
{
	(void)state;
	static const char *bad[] = {"shard", "shard=2 tp", "=2"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		case_args a;
		titan_err e = {{0}};
		assert_int_equal(case_parse(&a, "TITAN_TEST_CASE", bad[i], &e), -1);
		print_message("%s\n", e.msg);
		assert_non_null(strstr(e.msg, "is not key=value"));
	}
}

static void a_case_too_long_or_too_many_words_is_refused(void **state)
{
	(void)state;
	char text[CASE_TEXT_MAX + 8];
	memset(text, 'a', sizeof text - 1);
	text[sizeof text - 1] = '\0';
	text[1] = '=';
	case_args a;
	titan_err e = {{0}};
	assert_int_equal(case_parse(&a, "TITAN_TEST_CASE", text, &e), -1);
	assert_non_null(strstr(e.msg, "longer than"));
	char many[CASE_TEXT_MAX] = "";
	for (int i = 0; i <= CASE_WORDS_MAX; i++)
		strcat(many, "k=1 ");
	assert_int_equal(case_parse(&a, "TITAN_TEST_CASE", many, &e), -1);
	assert_non_null(strstr(e.msg, "more than"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_key_matches_only_whole),
		cmocka_unit_test(values_are_read_as_their_kind),
		cmocka_unit_test(no_case_takes_every_default),
		cmocka_unit_test(the_first_of_a_repeated_key_counts),
		cmocka_unit_test(an_unknown_key_is_refused_naming_it),
		cmocka_unit_test(a_bad_number_is_refused),
		cmocka_unit_test(a_bad_word_is_refused_listing_the_good),
		cmocka_unit_test(a_word_that_is_not_key_value_is_refused),
		cmocka_unit_test(a_case_too_long_or_too_many_words_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
