/* Helpers shared by the tests that read scripts/float8_golden.py's fixtures
 * (tests/float8/golden/: index.json plus raw little-endian files).  Include
 * after cmocka.h: a missing field or file fails the test. */
#ifndef TITAN_TEST_FLOAT8_GOLDEN_IO_H
#define TITAN_TEST_FLOAT8_GOLDEN_IO_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline const char *f8_golden_dir(void)
{
	static char dir[512];
	const char *root = getenv("ROOT");
	snprintf(dir, sizeof dir, "%s/tests/float8/golden", root ? root : ".");
	return dir;
}

/* index.json, or NULL (the reason on stderr). */
static inline json_t *f8_golden_index(void)
{
	char path[600];
	json_error_t je;
	snprintf(path, sizeof path, "%s/index.json", f8_golden_dir());
	json_t *j = json_load_file(path, 0, &je);
	if (j == NULL)
		fprintf(stderr, "%s: %s\n", path, je.text);
	return j;
}

static inline json_t *at(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (v == NULL)
		fail_msg("index.json: no field '%s'", key);
	return v;
}

static inline size_t num(const json_t *o, const char *key)
{
	return (size_t)json_integer_value(at(o, key));
}

/* The whole file named by o[key], which must hold exactly n elements of sz. */
static inline void *read_golden(const json_t *o, const char *key, size_t sz, size_t n)
{
	char path[700];
	snprintf(path, sizeof path, "%s/%s", f8_golden_dir(), json_string_value(at(o, key)));
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("%s: cannot open", path);
	void *buf = malloc(sz * n + 1);
	assert_non_null(buf);
	size_t got = fread(buf, sz, n + 1, f);
	fclose(f);
	if (got != n)
		fail_msg("%s: %zu elements, expected %zu", path, got, n);
	return buf;
}

/* Equal bits, or both NaN. */
static inline int same_float(float a, float b)
{
	return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* max|a - b| / max|b|. */
static inline double rel_err(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? d / m : d;
}

#endif
