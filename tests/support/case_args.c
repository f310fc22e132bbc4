/* case_args.c: see case_args.h. */
#include "case_args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int split_word(case_args *a, char *w, titan_err *e)
{
	char *eq = strchr(w, '=');
	if (eq == NULL || eq == w)
		return err_set(e, "%s \"%s\": \"%s\" is not key=value", a->var, a->text, w);
	if (a->n == CASE_WORDS_MAX)
		return err_set(e, "%s \"%s\": more than %d words", a->var, a->text, CASE_WORDS_MAX);
	*eq = '\0';
	a->key[a->n] = w;
	a->val[a->n] = eq + 1;
	a->n++;
	return 0;
}

int case_parse(case_args *a, const char *var, const char *text, titan_err *e)
{
	memset(a, 0, sizeof *a);
	text = text ? text : "";
	snprintf(a->var, sizeof a->var, "%s", var);
	if (strlen(text) >= sizeof a->text)
		return err_set(e, "%s: the case is longer than %zu characters", var,
			       sizeof a->text - 1);
	snprintf(a->text, sizeof a->text, "%s", text);
	snprintf(a->words, sizeof a->words, "%s", text);
	char *save = NULL;
	for (char *w = strtok_r(a->words, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
		if (split_word(a, w, e) != 0)
			return -1;
	return 0;
}

/* Note key as known; the index of its first word, -1 when absent. */
static int find(case_args *a, const char *key)
{
	int seen = 0;
	for (int i = 0; i < a->n_known && !seen; i++)
		seen = strcmp(a->known[i], key) == 0;
	if (!seen && a->n_known < CASE_KNOWN_MAX)
		a->known[a->n_known++] = key;
	int first = -1;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->key[i], key) == 0) {
			a->asked[i] = 1;
			first = first < 0 ? i : first;
		}
	return first;
}

/* The sticky error: only the first is kept (the later ones may follow from it). */
static void bad_value(case_args *a, const char *key, const char *val, const char *want)
{
	if (a->err.msg[0] == '\0')
		err_set(&a->err, "%s \"%s\": %s=%s: expected %s", a->var, a->text, key, val, want);
}

int case_int(case_args *a, const char *key, int dflt)
{
	int i = find(a, key);
	if (i < 0)
		return dflt;
	char *end;
	errno = 0;
	long v = strtol(a->val[i], &end, 10);
	if (end == a->val[i] || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX) {
		bad_value(a, key, a->val[i], "an integer");
		return dflt;
	}
	return (int)v;
}

int case_pick(case_args *a, const char *key, const case_choice *choices, int dflt)
{
	int i = find(a, key);
	if (i < 0)
		return dflt;
	char names[CASE_TEXT_MAX] = "one of";
	for (const case_choice *c = choices; c->name; c++) {
		if (strcmp(c->name, a->val[i]) == 0)
			return c->value;
		size_t n = strlen(names);
		snprintf(names + n, sizeof names - n, "%s %s", c == choices ? "" : ",", c->name);
	}
	bad_value(a, key, a->val[i], names);
	return dflt;
}

const char *case_str(case_args *a, const char *key, const char *dflt)
{
	int i = find(a, key);
	return i < 0 ? dflt : a->val[i];
}

/* "a, b, c": the keys asked for. */
static void known_keys(const case_args *a, char *out, size_t n)
{
	out[0] = '\0';
	for (int i = 0; i < a->n_known; i++) {
		size_t at = strlen(out);
		snprintf(out + at, n - at, "%s%s", i ? ", " : "", a->known[i]);
	}
}

int case_end(case_args *a, titan_err *e)
{
	if (a->err.msg[0] != '\0')
		return err_set(e, "%s", a->err.msg);
	char known[512];
	known_keys(a, known, sizeof known);
	for (int i = 0; i < a->n; i++)
		if (!a->asked[i])
			return err_set(e, "%s \"%s\": unknown key \"%s\" (known: %s)", a->var,
				       a->text, a->key[i], known);
	return 0;
}
