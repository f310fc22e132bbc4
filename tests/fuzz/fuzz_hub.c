/* fuzz_hub: lib/hub's parsers of what a Hub server sends (tree listings, Link
 * and retry headers, etags) and of the user's globs.
 *
 * Input: a first byte choosing the parser, then its text:
 *   't' tree listing JSON   every listed path is safe; errors say "tree listing"
 *   'l' a Link header       a found URL is a '<...>' part of the input, no '<' in it
 *   'g' PATTERN\nSTRING     hub_glob_match agrees with a plain DP matcher
 *                           (patterns without '[')
 *   'r' Retry-After\nRateLimit   never negative unless -1; etag normalizing is bounded
 *   'p' a path              hub_path_safe agrees with a component walk */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static char *cstr(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1);
	if (s == NULL)
		abort();
	memcpy(s, d, n);
	s[n] = '\0';
	return s;
}

static void tree(const uint8_t *d, size_t n)
{
	hub_filelist l = {0};
	titan_err e = {{0}};
	if (hub_tree_parse((const char *)d, n, &l, &e) != 0)
		check(strncmp(e.msg, "tree listing", 12) == 0);
	for (size_t i = 0; i < l.n; i++) {
		check(hub_path_safe(l.v[i].path, strlen(l.v[i].path)));
		check(l.v[i].size >= 0);
		check(l.v[i].lfs_sha[0] == '\0' || strlen(l.v[i].lfs_sha) == 64);
	}
	hub_filelist_free(&l);
}

static void link(const uint8_t *d, size_t n)
{
	char *s = cstr(d, n), out[256];
	if (hub_link_next(s, out, sizeof out)) {
		char br[260];
		snprintf(br, sizeof br, "<%s>", out);
		check(strpbrk(out, "<>") == NULL && strstr(s, br) != NULL);
	}
	free(s);
}

/* The reference: dynamic programming over '*', '?' and literals. */
static int dp_match(const char *p, const char *s)
{
	size_t np = strlen(p), ns = strlen(s);
	unsigned char *row = calloc(ns + 1, 1), *next = calloc(ns + 1, 1);
	if (row == NULL || next == NULL)
		abort();
	row[0] = 1; /* empty pattern matches the empty prefix */
	for (size_t i = 0; i < np; i++) {
		memset(next, 0, ns + 1);
		for (size_t j = 0; j <= ns; j++) {
			if (p[i] == '*')
				next[j] = row[j] || (j > 0 && next[j - 1]);
			else if (j > 0)
				next[j] = row[j - 1] && (p[i] == '?' || p[i] == s[j - 1]);
		}
		unsigned char *t = row;
		row = next;
		next = t;
	}
	int m = row[ns];
	free(row);
	free(next);
	return m;
}

static void glob(const uint8_t *d, size_t n)
{
	const uint8_t *nl = memchr(d, '\n', n);
	if (nl == NULL)
		return;
	char *p = cstr(d, (size_t)(nl - d));
	char *s = cstr(nl + 1, n - (size_t)(nl - d) - 1);
	int got = hub_glob_match(p, s);
	if (strchr(p, '[') == NULL && strlen(p) < 256 && strlen(s) < 4096)
		check(got == dp_match(p, s));
	free(p);
	free(s);
}

static void retry(const uint8_t *d, size_t n)
{
	const uint8_t *nl = memchr(d, '\n', n);
	size_t k = nl ? (size_t)(nl - d) : n;
	char *a = cstr(d, k), *b = nl ? cstr(nl + 1, n - k - 1) : NULL;
	double v = hub_retry_after(a, b);
	check(v == -1 || v >= 0);
	char et[17];
	hub_etag_normalize(a, et, sizeof et);
	check(strlen(et) < sizeof et);
	free(a);
	free(b);
}

static void path(const uint8_t *d, size_t n)
{
	int safe = hub_path_safe((const char *)d, n);
	int want = n > 0 && d[0] != '/' && memchr(d, '\0', n) == NULL && memchr(d, '\\', n) == NULL;
	size_t i = 0;
	while (want && i <= n) {
		size_t j = i;
		while (j < n && d[j] != '/')
			j++;
		size_t c = j - i;
		if (c == 0 || (c == 1 && d[i] == '.') || (c == 2 && d[i] == '.' && d[i + 1] == '.'))
			want = 0;
		i = j + 1;
	}
	check(safe == want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const uint8_t *d = data + 1;
	size_t n = size - 1;
	switch (data[0]) {
	case 't': tree(d, n); break;
	case 'l': link(d, n); break;
	case 'g': glob(d, n); break;
	case 'r': retry(d, n); break;
	case 'p': path(d, n); break;
	default: break;
	}
	return 0;
}
