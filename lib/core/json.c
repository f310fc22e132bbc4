#include "core/json.h"
#include "core/afile.h"
#include "core/mfile.h"

#include <stdio.h>
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

/* The writer.  Output is byte for byte what Python's
 * json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False) gives, plus a
 * newline, so files titan writes diff cleanly against ones Python wrote.
 * jansson's own writer prints reals with 17 digits (1e-05 becomes
 * 1.0000000000000001e-05), hence this one. */

typedef struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *t = realloc(b->p, cap);
		if (t == NULL) {
			b->oom = 1;
			return;
		}
		b->p = t;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void indent(sbuf *b, int level)
{
	put(b, "\n", 1);
	for (int i = 0; i < level; i++)
		put(b, "  ", 2);
}

/* Python's repr(float): the shortest digits that read back to the same double,
 * in positional notation for exponents -4..15 and scientific otherwise. */
void tjson_format_real(char *out, size_t n, double x)
{
	char e[40];
	for (int p = 1; p <= 17; p++) {
		snprintf(e, sizeof e, "%.*e", p - 1, x);
		if (strtod(e, NULL) == x)
			break;
	}
	/* e is "[-]D[.DDD]e[+-]XX" */
	const char *q = e;
	int neg = *q == '-';
	q += neg;
	char digits[24];
	size_t nd = 0;
	for (; *q != 'e'; q++)
		if (*q != '.')
			digits[nd++] = *q;
	digits[nd] = '\0';
	int exp = atoi(q + 1);
	char *o = out;
	size_t left = n;
#define EMIT(...)                                                        \
	do {                                                             \
		int w_ = snprintf(o, left, __VA_ARGS__);                 \
		if (w_ > 0 && (size_t)w_ < left) {                       \
			o += w_;                                         \
			left -= (size_t)w_;                              \
		}                                                        \
	} while (0)
	if (neg)
		EMIT("-");
	if (exp < -4 || exp >= 16) {
		EMIT("%c", digits[0]);
		if (nd > 1)
			EMIT(".%s", digits + 1);
		EMIT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	} else if (exp < 0) {
		EMIT("0.%.*s%s", -exp - 1, "000", digits);
	} else if ((size_t)exp + 1 >= nd) {
		EMIT("%s%.*s.0", digits, (int)((size_t)exp + 1 - nd), "0000000000000000");
	} else {
		EMIT("%.*s.%s", exp + 1, digits, digits + exp + 1);
	}
#undef EMIT
}

static void put_string(sbuf *b, const char *s, size_t n)
{
	put(b, "\"", 1);
	size_t run = 0; /* bytes copied as they are, flushed before each escape */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[8];
		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		default:
			if (c < 0x20) {
				snprintf(u, sizeof u, "\\u%04x", c);
				esc = u;
			}
		}
		if (esc == NULL) {
			run++;
			continue;
		}
		put(b, s + i - run, run);
		run = 0;
		puts_(b, esc);
	}
	put(b, s + n - run, run);
	put(b, "\"", 1);
}

static int key_cmp(const void *a, const void *b)
{
	/* Byte order of UTF-8 is code point order, which is Python's sort order. */
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void put_value(sbuf *b, const json_t *v, int level)
{
	char num[64];
	switch (json_typeof(v)) {
	case JSON_NULL: puts_(b, "null"); break;
	case JSON_TRUE: puts_(b, "true"); break;
	case JSON_FALSE: puts_(b, "false"); break;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		puts_(b, num);
		break;
	case JSON_REAL:
		tjson_format_real(num, sizeof num, json_real_value(v));
		puts_(b, num);
		break;
	case JSON_STRING:
		put_string(b, json_string_value(v), json_string_length(v));
		break;
	case JSON_ARRAY: {
		size_t n = json_array_size(v);
		if (n == 0) {
			puts_(b, "[]");
			break;
		}
		put(b, "[", 1);
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				put(b, ",", 1);
			indent(b, level + 1);
			put_value(b, json_array_get(v, i), level + 1);
		}
		indent(b, level);
		put(b, "]", 1);
		break;
	}
	case JSON_OBJECT: {
		size_t n = json_object_size(v);
		if (n == 0) {
			puts_(b, "{}");
			break;
		}
		const char **keys = malloc(n * sizeof *keys);
		if (keys == NULL) {
			b->oom = 1;
			break;
		}
		size_t k = 0;
		const char *key;
		json_t *val;
		json_object_foreach((json_t *)v, key, val)
			keys[k++] = key;
		qsort(keys, k, sizeof *keys, key_cmp);
		put(b, "{", 1);
		for (size_t i = 0; i < k; i++) {
			if (i > 0)
				put(b, ",", 1);
			indent(b, level + 1);
			put_string(b, keys[i], strlen(keys[i]));
			put(b, ": ", 2);
			put_value(b, json_object_get(v, keys[i]), level + 1);
		}
		free(keys);
		indent(b, level);
		put(b, "}", 1);
		break;
	}
	}
}

char *tjson_dump_str(const json_t *v)
{
	sbuf b = {0};
	put_value(&b, v, 0);
	put(&b, "\n", 1);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
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
