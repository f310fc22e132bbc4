/* case_args.h: the cases of the tests that hold many configurations to one
 * reference (tests/plan/test_plan, test_ep, tests/family/test_family_plan)
 * are words "key=value" ("rep=2 shard=2 ac=full"), named in an environment
 * variable by the script that runs them.  case_args splits one case and
 * answers by whole key: "rep=2" never sets "ep", "reshard=always" never
 * "shard".
 *
 * A key given twice: the first counts (the sanitizer runs of
 * tests/plan/equiv.sh put their "steps=2" first to override a case's own).
 *
 * Errors are sticky, as stdio's: a value that is not what its key takes (a
 * number, one of a list) makes the reading return the default and keeps the
 * first such message; case_end then returns it, or refuses a key the program
 * never asked for, naming the keys it knows.  So a program asks for every key
 * it reads, then calls case_end once and checks it. */
#ifndef TITAN_TEST_CASE_ARGS_H
#define TITAN_TEST_CASE_ARGS_H

#include "core/err.h"

enum { CASE_WORDS_MAX = 32, CASE_KNOWN_MAX = 64, CASE_TEXT_MAX = 256 };

typedef struct case_args {
	char var[160];                   /* the variable's name, for messages */
	char text[CASE_TEXT_MAX];        /* the case as given */
	char words[CASE_TEXT_MAX];       /* text with NULs after each key and value */
	const char *key[CASE_WORDS_MAX]; /* into words */
	const char *val[CASE_WORDS_MAX];
	int n;
	int asked[CASE_WORDS_MAX];       /* key[i] is one the program reads */
	const char *known[CASE_KNOWN_MAX]; /* the keys asked for (the caller's strings) */
	int n_known;
	titan_err err;                   /* the first error; err.msg[0] == 0: none */
} case_args;

/* One value of a key that takes a word: "ac=full" is {"full", MODEL_AC_FULL}. */
typedef struct case_choice {
	const char *name;
	int value;
} case_choice;

/* Split text (NULL: empty), the value of variable var, into a; -1 with the
 * message in e when a word is not key=value or the text is too long. */
int case_parse(case_args *a, const char *var, const char *text, titan_err *e);

/* The readers.  a keeps key (for case_end's list of the keys it knows): a
 * string that outlives a, a literal.
 * key's value as a decimal int, dflt when absent. */
int case_int(case_args *a, const char *key, int dflt);
/* key's value as one of choices' names (a list ended by a NULL name): its
 * value, dflt when absent. */
int case_pick(case_args *a, const char *key, const case_choice *choices, int dflt);
/* key's value (a's storage), dflt when absent. */
const char *case_str(case_args *a, const char *key, const char *dflt);

/* 0 when every reading was good and every key one the program asked for;
 * else -1 with the first error in e. */
int case_end(case_args *a, titan_err *e);

#endif
