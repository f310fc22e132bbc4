/* Many cases in one run (case_batch.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_batch.h"

static const char *batch_var;

/* Each test's setup: its case into the variable (the test's initial state). */
static int set_case(void **state)
{
	return setenv(batch_var, (const char *)*state, 1) == 0 ? 0 : -1;
}

static char *trim(char *s)
{
	while (*s == ' ')
		s++;
	size_t n = strlen(s);
	while (n > 0 && s[n - 1] == ' ')
		s[--n] = 0;
	return s;
}

/* The cases of list, split in place at ';' (blank ones dropped); how many. */
static size_t split_cases(char *list, char ***out)
{
	size_t n = 1;
	for (const char *p = list; *p; p++)
		n += *p == ';';
	char **c = malloc(n * sizeof *c);
	if (c == NULL)
		return 0;
	size_t k = 0;
	for (char *tok = strtok(list, ";"); tok != NULL; tok = strtok(NULL, ";"))
		if (*(tok = trim(tok)))
			c[k++] = tok;
	*out = c;
	return k;
}

int case_batch_run(const char *var, const struct CMUnitTest *tests, size_t n)
{
	const char *v = getenv(var);
	char *list = v ? strdup(v) : NULL, **cases = NULL;
	size_t ncase = list ? split_cases(list, &cases) : 0;
	if (ncase == 0) {
		free(cases);
		free(list);
		return _cmocka_run_group_tests(var, tests, n, NULL, NULL);
	}
	batch_var = var;
	struct CMUnitTest *t = calloc(ncase * n, sizeof *t);
	char **names = calloc(ncase * n, sizeof *names);
	int rc = -1;
	if (t != NULL && names != NULL) {
		size_t k = 0;
		for (size_t c = 0; c < ncase; c++)
			for (size_t i = 0; i < n; i++, k++) {
				size_t len = strlen(tests[i].name) + strlen(cases[c]) + 4;
				if ((names[k] = malloc(len)) == NULL)
					goto out;
				snprintf(names[k], len, "%s [%s]", tests[i].name, cases[c]);
				t[k] = tests[i];
				t[k].name = names[k];
				t[k].setup_func = set_case;
				t[k].initial_state = cases[c];
			}
		rc = _cmocka_run_group_tests(var, t, ncase * n, NULL, NULL);
	}
out:
	for (size_t k = 0; names != NULL && k < ncase * n; k++)
		free(names[k]);
	free(names);
	free(t);
	free(cases);
	free(list);
	return rc;
}
