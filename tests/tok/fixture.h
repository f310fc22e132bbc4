/* fixture.h: where the tokenizer tests find their fixtures (private to tests/tok).
 *
 * A fixture REL is $TITAN_FIXTURES/REL (default ../shared/fixtures/REL), else
 * build/fixtures/REL, which `make fixtures` fills (`make check` unpacks the
 * tokenizers kept in the repository and builds the corpora from Debian
 * packages).  A test that needs a missing one is skipped, saying how to get it,
 * except under CI=true, where it fails. */
#ifndef TITAN_TESTS_TOK_FIXTURE_H
#define TITAN_TESTS_TOK_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The path of fixture rel, or NULL.  The string lives until the 8th call after. */
static inline const char *fixture_path(const char *rel)
{
	static char ring[8][4096];
	static int next;
	const char *env = getenv("TITAN_FIXTURES");
	const char *dirs[] = {env ? env : "../shared/fixtures", "build/fixtures"};
	for (int i = 0; i < 2; i++) {
		char *p = ring[next];
		struct stat st;
		snprintf(p, sizeof ring[0], "%s/%s", dirs[i], rel);
		if (stat(p, &st) == 0) {
			next = (next + 1) % 8;
			return p;
		}
	}
	return NULL;
}

/* How a user gets rel. */
static inline const char *fixture_how(const char *rel)
{
	return strstr(rel, "llama3") ? "HF_TOKEN=<token> make fixtures (gated Llama 3 files)"
				      : "make deps && make fixtures";
}

static inline bool fixture_ci(void)
{
	const char *ci = getenv("CI");
	return ci && !strcmp(ci, "true");
}

#ifdef cmocka_unit_test
/* In a cmocka test (include cmocka.h first): the path of rel, or the test is
 * skipped (fails under CI=true) and this does not return. */
static inline const char *need_fixture(const char *rel)
{
	const char *p = fixture_path(rel);
	if (p)
		return p;
	if (fixture_ci())
		fail_msg("fixture %s missing under CI=true: %s", rel, fixture_how(rel));
	fprintf(stderr, "# SKIP no fixture %s: %s\n", rel, fixture_how(rel));
	skip();
	return NULL;
}
#endif

#endif
