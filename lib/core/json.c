#include "core/json.h"
#include "core/afile.h"
#include "core/mfile.h"

#include <stdlib.h>
#include <string.h>

static json_t *load_error(const char *name, const json_error_t *je, titan_err *err)
{
	if (je->line > 0)
		err_set(err, "%s:%d:%d: %s", name, je->line, je->column, je->text);
	else
		err_set(err, "%s: %s", name, je->text);
	return NULL;
}

json_t *tjson_load_buf(const char *name, const void *buf, size_t n, size_t flags,
		       titan_err *err)
{
	json_error_t je;
	/* jansson reads a NULL buffer of length 0 as an empty document. */
	json_t *v = json_loadb(n ? buf : "", n, flags, &je);
	return v ? v : load_error(name, &je, err);
}

json_t *tjson_load_file(const char *path, size_t flags, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err) != 0)
		return NULL;
	json_t *v = tjson_load_buf(path, m.data, m.size, flags, err);
	mfile_close(&m);
	return v;
}

const char *tjson_type_name(const json_t *v)
{
	if (v == NULL)
		return "missing";
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "real";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "unknown";
}

enum { FOUND = 0, MISSING = 1, NOT_OBJECT = -1 };

/* Walk path to *out: FOUND, MISSING (the message says so) or NOT_OBJECT (a
 * prefix of the path is not an object; the message names it). */
static int walk(const json_t *root, const char *path, json_t **out, const char *where,
		titan_err *err)
{
	const json_t *cur = root;
	const char *seg = path;
	char key[256];
	*out = NULL;
	for (;;) {
		const char *dot = strchr(seg, '.');
		size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
		if (!json_is_object(cur)) {
			int plen = (int)(seg > path ? seg - path - 1 : 0);
			if (plen == 0)
				err_set(err, "%s: expected an object, got %s", where,
					tjson_type_name(cur));
			else
				err_set(err, "%s: field '%.*s': expected object, got %s", where, plen,
					path, tjson_type_name(cur));
			return NOT_OBJECT;
		}
		if (len >= sizeof key) {
			err_set(err, "%s: field '%s': missing (key too long)", where, path);
			return MISSING;
		}
		memcpy(key, seg, len);
		key[len] = '\0';
		cur = json_object_get(cur, key);
		if (cur == NULL) {
			err_set(err, "%s: field '%s': missing", where, path);
			return MISSING;
		}
		if (dot == NULL) {
			*out = (json_t *)cur;
			return FOUND;
		}
		seg = dot + 1;
	}
}

json_t *tjson_at(const json_t *root, const char *path)
{
	json_t *v;
	walk(root, path, &v, "", NULL);
	return v;
}

typedef enum want { W_INT, W_NUMBER, W_BOOL, W_STRING, W_OBJECT, W_ARRAY } want;

static const char *const want_name[] = {"integer", "number", "boolean", "string", "object",
					"array"};

static int has_type(const json_t *v, want w)
{
	switch (w) {
	case W_INT: return json_is_integer(v);
	case W_NUMBER: return json_is_number(v);
	case W_BOOL: return json_is_boolean(v);
	case W_STRING: return json_is_string(v);
	case W_OBJECT: return json_is_object(v);
	case W_ARRAY: return json_is_array(v);
	}
	return 0;
}

/* A required field of type w, or NULL with the error set. */
static json_t *need(const json_t *o, const char *path, want w, const char *where,
		    titan_err *err)
{
	json_t *v;
	if (walk(o, path, &v, where, err) != FOUND)
		return NULL;
	if (!has_type(v, w)) {
		err_set(err, "%s: field '%s': expected %s, got %s", where, path, want_name[w],
			tjson_type_name(v));
		return NULL;
	}
	return v;
}

/* An optional field: 0 when absent or null, 1 with *v when present and of type
 * w, -1 when of another type or a parent on the path is not an object. */
static int maybe(const json_t *o, const char *path, want w, json_t **v, const char *where,
		 titan_err *err)
{
	switch (walk(o, path, v, where, NULL)) {
	case FOUND:
		if (json_is_null(*v))
			return 0;
		return need(o, path, w, where, err) ? 1 : -1;
	case MISSING:
		return 0;
	default:
		return walk(o, path, v, where, err);
	}
}

int tjson_get_int(const json_t *o, const char *path, int64_t *out, const char *where,
		  titan_err *err)
{
	json_t *v = need(o, path, W_INT, where, err);
	if (v == NULL)
		return -1;
	*out = json_integer_value(v);
	return 0;
}

int tjson_get_uint(const json_t *o, const char *path, uint64_t *out, const char *where,
		   titan_err *err)
{
	int64_t x;
	if (tjson_get_int(o, path, &x, where, err) != 0)
		return -1;
	if (x < 0)
		return err_set(err, "%s: field '%s': expected a non-negative integer, got %lld",
			       where, path, (long long)x);
	*out = (uint64_t)x;
	return 0;
}

int tjson_get_double(const json_t *o, const char *path, double *out, const char *where,
		     titan_err *err)
{
	json_t *v = need(o, path, W_NUMBER, where, err);
	if (v == NULL)
		return -1;
	*out = json_number_value(v);
	return 0;
}

int tjson_get_bool(const json_t *o, const char *path, int *out, const char *where,
		   titan_err *err)
{
	json_t *v = need(o, path, W_BOOL, where, err);
	if (v == NULL)
		return -1;
	*out = json_is_true(v);
	return 0;
}

int tjson_get_string(const json_t *o, const char *path, const char **out, const char *where,
		     titan_err *err)
{
	json_t *v = need(o, path, W_STRING, where, err);
	if (v == NULL)
		return -1;
	*out = json_string_value(v);
	return 0;
}

int tjson_get_object(const json_t *o, const char *path, json_t **out, const char *where,
		     titan_err *err)
{
	*out = need(o, path, W_OBJECT, where, err);
	return *out ? 0 : -1;
}

int tjson_get_array(const json_t *o, const char *path, json_t **out, const char *where,
		    titan_err *err)
{
	*out = need(o, path, W_ARRAY, where, err);
	return *out ? 0 : -1;
}

int tjson_opt_int(const json_t *o, const char *path, int64_t *out, int64_t def,
		  const char *where, titan_err *err)
{
	json_t *v;
	int rc = maybe(o, path, W_INT, &v, where, err);
	*out = rc == 1 ? json_integer_value(v) : def;
	return rc;
}

int tjson_opt_double(const json_t *o, const char *path, double *out, double def,
		     const char *where, titan_err *err)
{
	json_t *v;
	int rc = maybe(o, path, W_NUMBER, &v, where, err);
	*out = rc == 1 ? json_number_value(v) : def;
	return rc;
}

int tjson_opt_bool(const json_t *o, const char *path, int *out, int def, const char *where,
		   titan_err *err)
{
	json_t *v;
	int rc = maybe(o, path, W_BOOL, &v, where, err);
	*out = rc == 1 ? json_is_true(v) : def;
	return rc;
}

int tjson_opt_string(const json_t *o, const char *path, const char **out, const char *def,
		     const char *where, titan_err *err)
{
	json_t *v;
	int rc = maybe(o, path, W_STRING, &v, where, err);
	*out = rc == 1 ? json_string_value(v) : def;
	return rc;
}

char *tjson_dump_str(const json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	if (s == NULL)
		return NULL;
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);
	if (t == NULL) {
		free(s);
		return NULL;
	}
	t[n] = '\n';
	t[n + 1] = '\0';
	return t;
}

int tjson_dump_file(const json_t *v, const char *path, titan_err *err)
{
	char *s = tjson_dump_str(v);
	if (s == NULL)
		return err_set(err, "%s: cannot serialise JSON (out of memory?)", path);
	int rc = atomic_write_file(path, s, strlen(s), err);
	free(s);
	return rc;
}
