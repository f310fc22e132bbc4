/* Rendering: the syntax tree walked with Python's semantics for the values
 * (str(), ==, truthiness, slicing by code points), jinja2's default
 * Undefined (prints as '', false, iterates as empty, fails on attributes and
 * arithmetic) and its scoping (a for loop's body is a scope of its own, new
 * at every iteration; if is not). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

#define MAX_OUTPUT ((size_t)256 << 20)
/* A render's values (strings, lists, dicts, each loop's `loop`) live until it
 * ends: a hostile template's loops are bounded in steps and in memory. */
#define MAX_VALUES ((size_t)256 << 20)
#define MAX_STEPS 1000000ull

typedef struct scope scope;
struct scope {
	jdict vars;
	scope *up;
};

typedef struct render {
	jarena a;            /* every value of this render */
	char *out;
	size_t n, cap;
	scope *sc;
	uint64_t steps;
	int depth;
	titan_err *err;
} render;

/* ---- errors */

#define rerr(r, line, col, ...) jinja_error((r)->err, line, col, __VA_ARGS__)

#define EERR(r, e, ...) rerr(r, (e)->line, (e)->col, __VA_ARGS__)

static int oom(render *r)
{
	if (r->a.held + 65536 > MAX_VALUES)
		return err_set(r->err, "chat template: its values take more than %zu MiB",
			       MAX_VALUES >> 20);
	return err_set(r->err, "chat template: out of memory");
}

/* ---- values */

jv jv_int(int64_t i)
{
	return (jv){.k = JV_INT, .u.i = i};
}

static jv jv_bool(int b)
{
	return (jv){.k = JV_BOOL, .u.b = b != 0};
}

static jv jv_undef(const char *name)
{
	return (jv){.k = JV_UNDEF, .name = name};
}

static const char *type_name(const jv *v)
{
	static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float",
					    "str", "list", "dict", "Namespace"};
	return v->k == JV_LIST && v->u.list->tuple ? "tuple" : names[v->k];
}

static int str_new(render *r, const char *s, size_t n, jv *out)
{
	char *p = jarena_alloc(&r->a, n + 1);
	if (p == NULL)
		return oom(r);
	if (n)
		memcpy(p, s, n);
	*out = (jv){.k = JV_STR, .u.str = {p, n}};
	return 0;
}

static jlist *list_new(render *r)
{
	jlist *l = jarena_alloc(&r->a, sizeof *l);
	if (l == NULL)
		oom(r);
	return l;
}

static int list_push(render *r, jlist *l, jv v)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		jv *w = jarena_alloc(&r->a, cap * sizeof *w);
		if (w == NULL)
			return oom(r);
		if (l->n)
			memcpy(w, l->v, l->n * sizeof *w);
		l->v = w;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

static int str_eq(const jv *a, const char *s, size_t n)
{
	return a->k == JV_STR && a->u.str.n == n && memcmp(a->u.str.s, s, n) == 0;
}

static jv *dict_find(const jdict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (str_eq(&d->keys[i], key, n))
			return &d->vals[i];
	return NULL;
}

static int jv_eq(const jv *a, const jv *b);

static jv *dict_find_v(const jdict *d, const jv *key)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_eq(&d->keys[i], key))
			return &d->vals[i];
	return NULL;
}

static int dict_set(render *r, jdict *d, jv key, jv val)
{
	jv *old = dict_find_v(d, &key);
	if (old) {
		*old = val;
		return 0;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 8;
		jv *k = jarena_alloc(&r->a, cap * sizeof *k), *v = jarena_alloc(&r->a, cap * sizeof *v);
		if (k == NULL || v == NULL)
			return oom(r);
		if (d->n) {
			memcpy(k, d->keys, d->n * sizeof *k);
			memcpy(v, d->vals, d->n * sizeof *v);
		}
		d->keys = k;
		d->vals = v;
		d->cap = cap;
	}
	d->keys[d->n] = key;
	d->vals[d->n++] = val;
	return 0;
}

static int dict_set_s(render *r, jdict *d, const char *key, jv val)
{
	jv k;
	return str_new(r, key, strlen(key), &k) != 0 ? -1 : dict_set(r, d, k, val);
}

static int from_json(render *r, const json_t *j, jv *out, int depth)
{
	if (depth > JINJA_MAX_DEPTH)
		return err_set(r->err, "chat template: variables nested more than %d deep",
			       JINJA_MAX_DEPTH);
	switch (json_typeof(j)) {
	case JSON_NULL: *out = (jv){.k = JV_NONE}; return 0;
	case JSON_TRUE: *out = jv_bool(1); return 0;
	case JSON_FALSE: *out = jv_bool(0); return 0;
	case JSON_INTEGER: *out = jv_int(json_integer_value(j)); return 0;
	case JSON_REAL: *out = (jv){.k = JV_FLOAT, .u.f = json_real_value(j)}; return 0;
	case JSON_STRING: return str_new(r, json_string_value(j), json_string_length(j), out);
	case JSON_ARRAY: {
		jlist *l = list_new(r);
		if (l == NULL)
			return -1;
		size_t i;
		const json_t *x;
		json_array_foreach(j, i, x) {
			jv v;
			if (from_json(r, x, &v, depth + 1) != 0 || list_push(r, l, v) != 0)
				return -1;
		}
		*out = (jv){.k = JV_LIST, .u.list = l};
		return 0;
	}
	case JSON_OBJECT: {
		jdict *d = jarena_alloc(&r->a, sizeof *d);
		if (d == NULL)
			return oom(r);
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)j, k, x) {
			jv v;
			if (from_json(r, x, &v, depth + 1) != 0 || dict_set_s(r, d, k, v) != 0)
				return -1;
		}
		*out = (jv){.k = JV_DICT, .u.dict = d};
		return 0;
	}
	}
	return err_set(r->err, "chat template: a variable of an unknown JSON type");
}

static int truthy(const jv *v)
{
	switch (v->k) {
	case JV_UNDEF: case JV_NONE: return 0;
	case JV_BOOL: return v->u.b;
	case JV_INT: return v->u.i != 0;
	case JV_FLOAT: return v->u.f != 0;
	case JV_STR: return v->u.str.n != 0;
	case JV_LIST: return v->u.list->n != 0;
	case JV_DICT: return v->u.dict->n != 0;
	case JV_NS: return 1;
	}
	return 0;
}

static int is_num(const jv *v)
{
	return v->k == JV_BOOL || v->k == JV_INT || v->k == JV_FLOAT;
}

static double num(const jv *v)
{
	return v->k == JV_FLOAT ? v->u.f : v->k == JV_INT ? (double)v->u.i : v->u.b;
}

static int64_t inum(const jv *v)
{
	return v->k == JV_INT ? v->u.i : v->u.b;
}

static int jv_eq(const jv *a, const jv *b)
{
	if (is_num(a) && is_num(b))
		return a->k != JV_FLOAT && b->k != JV_FLOAT ? inum(a) == inum(b) : num(a) == num(b);
	if (a->k != b->k)
		return 0;
	switch (a->k) {
	case JV_UNDEF: case JV_NONE: return 1;
	case JV_STR: return str_eq(a, b->u.str.s, b->u.str.n);
	case JV_LIST:
		if (a->u.list->n != b->u.list->n)
			return 0;
		for (size_t i = 0; i < a->u.list->n; i++)
			if (!jv_eq(&a->u.list->v[i], &b->u.list->v[i]))
				return 0;
		return 1;
	case JV_DICT:
		if (a->u.dict->n != b->u.dict->n)
			return 0;
		for (size_t i = 0; i < a->u.dict->n; i++) {
			jv *o = dict_find_v(b->u.dict, &a->u.dict->keys[i]);
			if (o == NULL || !jv_eq(&a->u.dict->vals[i], o))
				return 0;
		}
		return 1;
	case JV_NS: return a->u.dict == b->u.dict;
	default: return 0;
	}
}

/* ---- UTF-8 code points */

static size_t cp_len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

/* Byte offsets of the code points of s (n_cp + 1 of them, the last = n);
 * malloc'd.  Bytes of a bad sequence count one each, as the tokenizer does. */
static size_t *cp_offsets(const char *s, size_t n, size_t *n_cp)
{
	size_t *o = malloc((n + 1) * sizeof *o), k = 0;
	if (o == NULL)
		return NULL;
	for (size_t i = 0; i < n;) {
		o[k++] = i;
		size_t l = cp_len((unsigned char)s[i]);
		int ok = i + l <= n;
		for (size_t j = 1; ok && j < l; j++)
			ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
		i += ok ? l : 1;
	}
	o[k] = n;
	*n_cp = k;
	return o;
}

static size_t cp_count(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

/* ---- str() and repr() as Python writes them */

typedef struct sbuf {
	char *p;
	size_t n, cap;
} sbuf;

static int sb_add(render *r, sbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		if (b->n + n + 1 > MAX_OUTPUT)
			return err_set(r->err, "chat template: output larger than %zu bytes", MAX_OUTPUT);
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (p == NULL)
			return oom(r);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

static int sb_str(render *r, sbuf *b, const char *s)
{
	return sb_add(r, b, s, strlen(s));
}

/* Python's repr(float): the shortest digits that read back, fixed notation
 * for exponents -4..15, else d.ddde+XX. */
static void float_repr(double f, char *out, size_t cap)
{
	if (isnan(f)) {
		snprintf(out, cap, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(out, cap, f < 0 ? "-inf" : "inf");
		return;
	}
	char e[64];
	for (int p = 0; p < 17; p++) {
		snprintf(e, sizeof e, "%.*e", p, f);
		if (strtod(e, NULL) == f)
			break;
	}
	/* e is [-]d[.ddd]e[+-]XX */
	char digits[32];
	int nd = 0, neg = e[0] == '-';
	const char *q = e + neg;
	for (; *q && *q != 'e'; q++)
		if (*q != '.')
			digits[nd++] = *q;
	int exp = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	size_t k = 0;
	if (neg)
		out[k++] = '-';
	if (exp < -4 || exp >= 16) {
		out[k++] = digits[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int i = 1; i < nd; i++)
				out[k++] = digits[i];
		}
		snprintf(out + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
		return;
	}
	if (exp < 0) {
		out[k++] = '0';
		out[k++] = '.';
		for (int i = 0; i < -exp - 1; i++)
			out[k++] = '0';
		for (int i = 0; i < nd; i++)
			out[k++] = digits[i];
	} else {
		for (int i = 0; i <= exp; i++)
			out[k++] = i < nd ? digits[i] : '0';
		out[k++] = '.';
		if (nd > exp + 1)
			for (int i = exp + 1; i < nd; i++)
				out[k++] = digits[i];
		else
			out[k++] = '0';
	}
	out[k] = '\0';
}

static int repr_str(render *r, sbuf *b, const char *s, size_t n)
{
	char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
	if (sb_add(r, b, &q, 1) != 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		const char *x = NULL;
		if (c == '\\')
			x = "\\\\";
		else if (c == (unsigned char)q)
			x = q == '\'' ? "\\'" : "\\\"";
		else if (c == '\n')
			x = "\\n";
		else if (c == '\r')
			x = "\\r";
		else if (c == '\t')
			x = "\\t";
		else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof esc, "\\x%02x", c);
			x = esc;
		}
		if (x ? sb_str(r, b, x) : sb_add(r, b, s + i, 1))
			return -1;
	}
	return sb_add(r, b, &q, 1);
}

static int to_str(render *r, sbuf *b, const jv *v, int repr);

static int seq_str(render *r, sbuf *b, const jv *v)
{
	if (v->k == JV_LIST) {
		jlist *l = v->u.list;
		if (sb_str(r, b, l->tuple ? "(" : "[") != 0)
			return -1;
		for (size_t i = 0; i < l->n; i++)
			if ((i && sb_str(r, b, ", ")) || to_str(r, b, &l->v[i], 1))
				return -1;
		if (l->tuple && l->n == 1 && sb_str(r, b, ",") != 0)
			return -1;
		return sb_str(r, b, l->tuple ? ")" : "]");
	}
	jdict *d = v->u.dict;
	if (sb_str(r, b, v->k == JV_NS ? "<Namespace {" : "{") != 0)
		return -1;
	for (size_t i = 0; i < d->n; i++)
		if ((i && sb_str(r, b, ", ")) || to_str(r, b, &d->keys[i], 1) ||
		    sb_str(r, b, ": ") || to_str(r, b, &d->vals[i], 1))
			return -1;
	return sb_str(r, b, v->k == JV_NS ? "}>" : "}");
}

/* str(v), or repr(v) for the items of a list or dict. */
static int to_str(render *r, sbuf *b, const jv *v, int repr)
{
	char t[64];
	switch (v->k) {
	case JV_UNDEF: return 0;
	case JV_NONE: return sb_str(r, b, "None");
	case JV_BOOL: return sb_str(r, b, v->u.b ? "True" : "False");
	case JV_INT:
		snprintf(t, sizeof t, "%lld", (long long)v->u.i);
		return sb_str(r, b, t);
	case JV_FLOAT:
		float_repr(v->u.f, t, sizeof t);
		return sb_str(r, b, t);
	case JV_STR:
		return repr ? repr_str(r, b, v->u.str.s, v->u.str.n) : sb_add(r, b, v->u.str.s, v->u.str.n);
	default: return seq_str(r, b, v);
	}
}

/* v as a string value (str(v); '' for undefined). */
static int as_str(render *r, const jv *v, jv *out)
{
	if (v->k == JV_STR) {
		*out = *v;
		return 0;
	}
	sbuf b = {0};
	int rc = to_str(r, &b, v, 0);
	if (rc == 0)
		rc = str_new(r, b.p ? b.p : "", b.n, out);
	free(b.p);
	return rc;
}

/* json.dumps(v, ensure_ascii=False[, indent]) */
static int to_json(render *r, sbuf *b, const jv *v, int indent, int level, const jexpr *at)
{
	char t[64];
	switch (v->k) {
	case JV_NONE: return sb_str(r, b, "null");
	case JV_BOOL: return sb_str(r, b, v->u.b ? "true" : "false");
	case JV_INT: case JV_FLOAT:
		if (v->k == JV_FLOAT && (isnan(v->u.f) || isinf(v->u.f)))
			return sb_str(r, b, isnan(v->u.f) ? "NaN" : v->u.f < 0 ? "-Infinity" : "Infinity");
		return to_str(r, b, v, 0);
	case JV_STR: {
		if (sb_str(r, b, "\"") != 0)
			return -1;
		for (size_t i = 0; i < v->u.str.n; i++) {
			unsigned char c = (unsigned char)v->u.str.s[i];
			const char *x = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" :
					c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" :
					c == '\f' ? "\\f" : NULL;
			if (x == NULL && c < 0x20) {
				snprintf(t, sizeof t, "\\u%04x", c);
				x = t;
			}
			if (x ? sb_str(r, b, x) : sb_add(r, b, v->u.str.s + i, 1))
				return -1;
		}
		return sb_str(r, b, "\"");
	}
	case JV_LIST: case JV_DICT: {
		int dict = v->k == JV_DICT;
		size_t n = dict ? v->u.dict->n : v->u.list->n;
		if (sb_str(r, b, dict ? "{" : "[") != 0)
			return -1;
		for (size_t i = 0; i < n; i++) {
			if (i && sb_str(r, b, indent >= 0 ? "," : ", ") != 0)
				return -1;
			if (indent >= 0) {
				if (sb_str(r, b, "\n") != 0)
					return -1;
				for (int k = 0; k < indent * (level + 1); k++)
					if (sb_str(r, b, " ") != 0)
						return -1;
			}
			if (dict) {
				const jv *k = &v->u.dict->keys[i];
				jv ks;
				if (k->k == JV_STR ? to_json(r, b, k, indent, level + 1, at)
						   : (k->k == JV_NONE ? sb_str(r, b, "\"null\"")
						      : k->k == JV_BOOL ? sb_str(r, b, k->u.b ? "\"true\"" : "\"false\"")
						      : (as_str(r, k, &ks) || to_json(r, b, &ks, indent, level + 1, at))))
					return -1;
				if (sb_str(r, b, ": ") != 0)
					return -1;
			}
			if (to_json(r, b, dict ? &v->u.dict->vals[i] : &v->u.list->v[i], indent, level + 1, at))
				return -1;
		}
		if (indent >= 0 && n > 0) {
			if (sb_str(r, b, "\n") != 0)
				return -1;
			for (int k = 0; k < indent * level; k++)
				if (sb_str(r, b, " ") != 0)
					return -1;
		}
		return sb_str(r, b, dict ? "}" : "]");
	}
	default:
		return EERR(r, at, "tojson: Object of type %s is not JSON serializable", type_name(v));
	}
}

/* ---- scopes */

static jv lookup(render *r, const char *name)
{
	for (scope *s = r->sc; s; s = s->up) {
		jv *v = dict_find(&s->vars, name, strlen(name));
		if (v)
			return *v;
	}
	return jv_undef(name);
}

static int assign(render *r, const char *name, jv v)
{
	return dict_set_s(r, &r->sc->vars, name, v);
}

/* ---- expressions */

static int eval(render *r, const jexpr *e, jv *out);

static int need_defined(render *r, const jexpr *e, const jv *v)
{
	if (v->k != JV_UNDEF)
		return 0;
	return v->name ? EERR(r, e, "'%s' is undefined", v->name) : EERR(r, e, "value is undefined");
}

static int get_attr(render *r, const jexpr *e, const jv *obj, const char *name, jv *out)
{
	if (need_defined(r, e, obj) != 0)
		return -1;
	if (obj->k == JV_DICT || obj->k == JV_NS) {
		jv *v = dict_find(obj->u.dict, name, strlen(name));
		*out = v ? *v : jv_undef(name);
		return 0;
	}
	*out = jv_undef(name);
	return 0;
}

/* Python's index of a sequence of n: negative from the end; -1 when outside. */
static int64_t seq_index(int64_t i, size_t n)
{
	if (i < 0)
		i += (int64_t)n;
	return i < 0 || i >= (int64_t)n ? -1 : i;
}

static int get_item(render *r, const jexpr *e, const jv *obj, const jv *key, jv *out)
{
	if (need_defined(r, e, obj) != 0)
		return -1;
	*out = jv_undef(NULL);
	if (obj->k == JV_DICT || obj->k == JV_NS) {
		jv *v = dict_find_v(obj->u.dict, key);
		if (v)
			*out = *v;
		return 0;
	}
	if ((obj->k == JV_LIST || obj->k == JV_STR) && (key->k == JV_INT || key->k == JV_BOOL)) {
		if (obj->k == JV_LIST) {
			int64_t i = seq_index(inum(key), obj->u.list->n);
			if (i >= 0)
				*out = obj->u.list->v[i];
			return 0;
		}
		size_t ncp, *o = cp_offsets(obj->u.str.s, obj->u.str.n, &ncp);
		if (o == NULL)
			return oom(r);
		int64_t i = seq_index(inum(key), ncp);
		int rc = i < 0 ? 0 : str_new(r, obj->u.str.s + o[i], o[i + 1] - o[i], out);
		free(o);
		return rc;
	}
	return 0;
}

static int slice_part(render *r, const jexpr *e, const jexpr *part, int64_t *v, int *given)
{
	*given = 0;
	if (part == NULL)
		return 0;
	jv x;
	if (eval(r, part, &x) != 0)
		return -1;
	if (x.k == JV_NONE)
		return 0;
	if (x.k != JV_INT && x.k != JV_BOOL)
		return EERR(r, e, "slice indices must be integers or None, not %s", type_name(&x));
	*v = inum(&x);
	*given = 1;
	return 0;
}

/* Python's slice of a sequence of n items: the indices it takes, in order. */
static int slice_indices(render *r, const jexpr *e, size_t n, int64_t **idx, size_t *m)
{
	int64_t a = 0, b = 0, s = 1;
	int ga, gb, gs;
	if (slice_part(r, e, e->b, &a, &ga) || slice_part(r, e, e->c, &b, &gb) ||
	    slice_part(r, e, e->d, &s, &gs))
		return -1;
	if (s == 0)
		return EERR(r, e, "slice step cannot be zero");
	int64_t N = (int64_t)n;
	if (!ga)
		a = s > 0 ? 0 : N - 1;
	else if (a < 0)
		a = a + N < 0 ? (s > 0 ? 0 : -1) : a + N;
	else if (a >= N)
		a = s > 0 ? N : N - 1;
	if (!gb)
		b = s > 0 ? N : -1;
	else if (b < 0)
		b = b + N < 0 ? (s > 0 ? 0 : -1) : b + N;
	else if (b >= N)
		b = s > 0 ? N : N - 1;
	*idx = malloc((n + 1) * sizeof **idx);
	if (*idx == NULL)
		return oom(r);
	*m = 0;
	for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
		(*idx)[(*m)++] = i;
	return 0;
}

static int eval_slice(render *r, const jexpr *e, jv *out)
{
	jv obj;
	if (eval(r, e->a, &obj) != 0 || need_defined(r, e, &obj) != 0)
		return -1;
	if (obj.k != JV_LIST && obj.k != JV_STR)
		return EERR(r, e, "cannot slice a %s", type_name(&obj));
	size_t ncp = 0, *o = NULL, m = 0;
	if (obj.k == JV_STR && (o = cp_offsets(obj.u.str.s, obj.u.str.n, &ncp)) == NULL)
		return oom(r);
	int64_t *idx;
	if (slice_indices(r, e, obj.k == JV_LIST ? obj.u.list->n : ncp, &idx, &m) != 0) {
		free(o);
		return -1;
	}
	int rc = 0;
	if (obj.k == JV_LIST) {
		jlist *l = list_new(r);
		rc = l == NULL ? -1 : 0;
		for (size_t i = 0; rc == 0 && i < m; i++)
			rc = list_push(r, l, obj.u.list->v[idx[i]]);
		if (rc == 0)
			*out = (jv){.k = JV_LIST, .u.list = l};
	} else {
		sbuf b = {0};
		for (size_t i = 0; rc == 0 && i < m; i++)
			rc = sb_add(r, &b, obj.u.str.s + o[idx[i]], o[idx[i] + 1] - o[idx[i]]);
		if (rc == 0)
			rc = str_new(r, b.p ? b.p : "", b.n, out);
		free(b.p);
	}
	free(idx);
	free(o);
	return rc;
}

/* Evaluated call arguments: positional ones, then keyword ones. */
typedef struct args {
	jv pos[8];
	int n_pos;
	jv kwv[8];
	const char *kw[8];
	int n_kw;
} args;

static int eval_args(render *r, const jexpr *e, args *a)
{
	a->n_pos = a->n_kw = 0;
	for (int i = 0; i < e->n_args; i++) {
		jv v;
		if (eval(r, e->args[i], &v) != 0)
			return -1;
		if (e->kw[i] == NULL) {
			if (a->n_kw > 0)
				return EERR(r, e, "positional argument after a keyword argument");
			if (a->n_pos == 8)
				return EERR(r, e, "more than 8 arguments");
			a->pos[a->n_pos++] = v;
		} else {
			if (a->n_kw == 8)
				return EERR(r, e, "more than 8 keyword arguments");
			a->kw[a->n_kw] = e->kw[i];
			a->kwv[a->n_kw++] = v;
		}
	}
	return 0;
}

/* Argument i (positional) or name (keyword); NULL when not given. */
static const jv *arg(const args *a, int i, const char *name)
{
	if (i < a->n_pos)
		return &a->pos[i];
	for (int k = 0; k < a->n_kw; k++)
		if (!strcmp(a->kw[k], name))
			return &a->kwv[k];
	return NULL;
}

static int want_str(render *r, const jexpr *e, const jv *v, const char *what)
{
	if (v == NULL || v->k != JV_STR)
		return EERR(r, e, "%s: expected a string, got %s", what, v ? type_name(v) : "nothing");
	return 0;
}

/* Does s start with the code points in chars (or, chars NULL, whitespace)?
 * Returns the bytes of that character, 0 if not. */
static size_t char_in(const char *s, size_t n, const jv *chars)
{
	size_t l = cp_len((unsigned char)s[0]);
	if (l > n)
		l = 1;
	if (chars == NULL || chars->k == JV_NONE)
		return jinja_py_lstrip_len(s, l);
	const char *c = chars->u.str.s;
	for (size_t i = 0; i < chars->u.str.n;) {
		size_t k = cp_len((unsigned char)c[i]);
		if (k == l && memcmp(c + i, s, l) == 0)
			return l;
		i += k;
	}
	return 0;
}

/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both) */
static int py_strip(render *r, const jexpr *e, const jv *s, const jv *chars, int which, jv *out)
{
	if (chars && chars->k != JV_NONE && want_str(r, e, chars, "strip") != 0)
		return -1;
	const char *p = s->u.str.s;
	size_t n = s->u.str.n, k;
	if (which & 1)
		while (n > 0 && (k = char_in(p, n, chars)) > 0) {
			p += k;
			n -= k;
		}
	if (which & 2) {
		size_t ncp, *o = cp_offsets(p, n, &ncp);
		if (o == NULL)
			return oom(r);
		while (ncp > 0 && char_in(p + o[ncp - 1], n - o[ncp - 1], chars) == n - o[ncp - 1])
			n = o[--ncp];
		free(o);
	}
	return str_new(r, p, n, out);
}

static int py_split(render *r, const jexpr *e, const jv *s, const args *a, jv *out)
{
	const jv *sep = arg(a, 0, "sep"), *maxv = arg(a, 1, "maxsplit");
	int64_t max = maxv && (maxv->k == JV_INT) ? maxv->u.i : -1;
	jlist *l = list_new(r);
	if (l == NULL)
		return -1;
	const char *p = s->u.str.s;
	size_t n = s->u.str.n;
	jv piece;
	if (sep == NULL || sep->k == JV_NONE) { /* runs of whitespace, none empty */
		size_t i = jinja_py_lstrip_len(p, n);
		while (i < n) {
			size_t j = i;
			if (max >= 0 && (int64_t)l->n == max) {
				j = i + jinja_py_rstrip_len(p + i, n - i);
			} else {
				while (j < n && jinja_py_lstrip_len(p + j, n - j) == 0)
					j += cp_len((unsigned char)p[j]) <= n - j ? cp_len((unsigned char)p[j]) : 1;
			}
			if (str_new(r, p + i, j - i, &piece) || list_push(r, l, piece))
				return -1;
			i = j + jinja_py_lstrip_len(p + j, n - j);
		}
	} else {
		if (want_str(r, e, sep, "split") != 0)
			return -1;
		if (sep->u.str.n == 0)
			return EERR(r, e, "split: empty separator");
		size_t i = 0;
		for (;;) {
			const char *hit = NULL;
			if (max < 0 || (int64_t)l->n < max)
				hit = memmem(p + i, n - i, sep->u.str.s, sep->u.str.n);
			size_t j = hit ? (size_t)(hit - p) : n;
			if (str_new(r, p + i, j - i, &piece) || list_push(r, l, piece))
				return -1;
			if (!hit)
				break;
			i = j + sep->u.str.n;
		}
	}
	*out = (jv){.k = JV_LIST, .u.list = l};
	return 0;
}

static int ascii_case(render *r, const jv *s, int mode, jv *out)
{
	if (str_new(r, s->u.str.s, s->u.str.n, out) != 0)
		return -1;
	char *p = (char *)out->u.str.s;
	int start = 1;
	for (size_t i = 0; i < out->u.str.n; i++) {
		char c = p[i];
		int lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
		int up = mode == 0 ? 1 : mode == 1 ? 0 : start; /* upper, lower, title/capitalize */
		if (up && lower)
			p[i] = (char)(c - 32);
		else if (!up && upper)
			p[i] = (char)(c + 32);
		if (mode == 2)
			start = !(lower || upper);
		else if (mode == 3)
			start = 0;
	}
	return 0;
}

static int py_replace(render *r, const jexpr *e, const jv *s, const jv *old, const jv *new,
		      jv *out)
{
	if (want_str(r, e, old, "replace") || want_str(r, e, new, "replace"))
		return -1;
	if (old->u.str.n == 0)
		return EERR(r, e, "replace: empty search string is not supported");
	sbuf b = {0};
	const char *p = s->u.str.s;
	size_t n = s->u.str.n, i = 0;
	int rc = 0;
	while (rc == 0) {
		const char *hit = memmem(p + i, n - i, old->u.str.s, old->u.str.n);
		size_t j = hit ? (size_t)(hit - p) : n;
		rc = sb_add(r, &b, p + i, j - i);
		if (!hit || rc)
			break;
		rc = sb_add(r, &b, new->u.str.s, new->u.str.n);
		i = j + old->u.str.n;
	}
	if (rc == 0)
		rc = str_new(r, b.p ? b.p : "", b.n, out);
	free(b.p);
	return rc;
}

static int affix(render *r, const jexpr *e, const jv *s, const jv *x, int end, jv *out)
{
	if (want_str(r, e, x, end ? "endswith" : "startswith") != 0)
		return -1;
	size_t n = s->u.str.n, m = x->u.str.n;
	*out = jv_bool(m <= n && memcmp(s->u.str.s + (end ? n - m : 0), x->u.str.s, m) == 0);
	return 0;
}

static int str_method(render *r, const jexpr *e, const jv *s, const char *m, const args *a,
		      jv *out)
{
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
		return affix(r, e, s, arg(a, 0, "prefix"), m[0] == 'e', out);
	if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip"))
		return py_strip(r, e, s, arg(a, 0, "chars"), m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3, out);
	if (!strcmp(m, "split"))
		return py_split(r, e, s, a, out);
	if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") ||
	    !strcmp(m, "capitalize"))
		return ascii_case(r, s, m[0] == 'u' ? 0 : m[0] == 'l' ? 1 : m[0] == 't' ? 2 : 3, out);
	if (!strcmp(m, "replace"))
		return py_replace(r, e, s, arg(a, 0, "old"), arg(a, 1, "new"), out);
	return EERR(r, e, "str has no method '%s' here", m);
}

static int dict_view(render *r, const jdict *d, int what, jv *out)
{
	jlist *l = list_new(r);
	if (l == NULL)
		return -1;
	for (size_t i = 0; i < d->n; i++) {
		jv v = what == 0 ? d->keys[i] : d->vals[i];
		if (what == 2) {
			jlist *t = list_new(r);
			if (t == NULL || list_push(r, t, d->keys[i]) || list_push(r, t, d->vals[i]))
				return -1;
			t->tuple = 1;
			v = (jv){.k = JV_LIST, .u.list = t};
		}
		if (list_push(r, l, v) != 0)
			return -1;
	}
	*out = (jv){.k = JV_LIST, .u.list = l};
	return 0;
}

static int dict_method(render *r, const jexpr *e, const jv *d, const char *m, const args *a,
		       jv *out)
{
	if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values"))
		return dict_view(r, d->u.dict, m[0] == 'k' ? 0 : m[0] == 'v' ? 1 : 2, out);
	if (!strcmp(m, "get")) {
		const jv *k = arg(a, 0, "key"), *def = arg(a, 1, "default");
		if (k == NULL)
			return EERR(r, e, "get: expected a key");
		jv *v = dict_find_v(d->u.dict, k);
		*out = v ? *v : def ? *def : (jv){.k = JV_NONE};
		return 0;
	}
	return EERR(r, e, "dict has no method '%s' here", m);
}

static int kw_only(render *r, const jexpr *e, const args *a, const char *fn)
{
	if (a->n_pos > 0)
		return EERR(r, e, "%s() takes keyword arguments only", fn);
	return 0;
}

static int call_range(render *r, const jexpr *e, const args *a, jv *out)
{
	int64_t v[3] = {0, 0, 1};
	if (a->n_pos < 1 || a->n_pos > 3)
		return EERR(r, e, "range() takes 1 to 3 arguments");
	for (int i = 0; i < a->n_pos; i++) {
		if (a->pos[i].k != JV_INT && a->pos[i].k != JV_BOOL)
			return EERR(r, e, "range(): %s is not an integer", type_name(&a->pos[i]));
		v[a->n_pos == 1 ? 1 : i] = inum(&a->pos[i]);
	}
	if (v[2] == 0)
		return EERR(r, e, "range() step must not be zero");
	jlist *l = list_new(r);
	if (l == NULL)
		return -1;
	for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
		if (++r->steps > MAX_STEPS)
			return EERR(r, e, "more than %llu loop steps", MAX_STEPS);
		if (list_push(r, l, jv_int(i)) != 0)
			return -1;
	}
	*out = (jv){.k = JV_LIST, .u.list = l};
	return 0;
}

static int call_global(render *r, const jexpr *e, const char *fn, const args *a, jv *out)
{
	if (!strcmp(fn, "raise_exception")) {
		jv m = a->n_pos > 0 ? a->pos[0] : jv_undef(NULL), s;
		if (as_str(r, &m, &s) != 0)
			return -1;
		return EERR(r, e, "raise_exception: %.*s", (int)(s.u.str.n > 700 ? 700 : s.u.str.n),
			    s.u.str.s);
	}
	if (!strcmp(fn, "namespace") || !strcmp(fn, "dict")) {
		if (kw_only(r, e, a, fn) != 0)
			return -1;
		jdict *d = jarena_alloc(&r->a, sizeof *d);
		if (d == NULL)
			return oom(r);
		for (int i = 0; i < a->n_kw; i++)
			if (dict_set_s(r, d, a->kw[i], a->kwv[i]) != 0)
				return -1;
		*out = (jv){.k = fn[0] == 'n' ? JV_NS : JV_DICT, .u.dict = d};
		return 0;
	}
	if (!strcmp(fn, "range"))
		return call_range(r, e, a, out);
	if (!strcmp(fn, "strftime_now"))
		return EERR(r, e, "strftime_now() is refused: the text would depend on the clock");
	return EERR(r, e, "'%s' is undefined", fn);
}

static int eval_call(render *r, const jexpr *e, jv *out)
{
	args a;
	const jexpr *f = e->a;
	if (f->k == E_ATTR) {
		jv obj;
		if (eval(r, f->a, &obj) != 0 || need_defined(r, f, &obj) != 0 || eval_args(r, e, &a))
			return -1;
		if (obj.k == JV_STR)
			return str_method(r, e, &obj, f->name, &a, out);
		if (obj.k == JV_DICT)
			return dict_method(r, e, &obj, f->name, &a, out);
		return EERR(r, e, "%s has no method '%s' here", type_name(&obj), f->name);
	}
	if (f->k == E_NAME) {
		jv v = lookup(r, f->name);
		if (v.k != JV_UNDEF)
			return EERR(r, e, "'%s' (a %s) is not callable", f->name, type_name(&v));
		if (eval_args(r, e, &a) != 0)
			return -1;
		return call_global(r, e, f->name, &a, out);
	}
	return EERR(r, e, "this expression is not callable");
}

static int length_of(render *r, const jexpr *e, const jv *v, int64_t *n)
{
	switch (v->k) {
	case JV_UNDEF: *n = 0; return 0;
	case JV_STR: *n = (int64_t)cp_count(v->u.str.s, v->u.str.n); return 0;
	case JV_LIST: *n = (int64_t)v->u.list->n; return 0;
	case JV_DICT: case JV_NS: *n = (int64_t)v->u.dict->n; return 0;
	default: return EERR(r, e, "object of type '%s' has no len()", type_name(v));
	}
}

/* The items a for loop or a filter walks: a list's, a dict's keys, a
 * string's characters; none for undefined. */
static int iter_items(render *r, const jexpr *e, const jv *v, jlist **out)
{
	static jlist empty;
	if (v->k == JV_UNDEF) {
		*out = &empty;
		return 0;
	}
	if (v->k == JV_LIST) {
		*out = v->u.list;
		return 0;
	}
	if (v->k == JV_DICT) {
		jv keys;
		if (dict_view(r, v->u.dict, 0, &keys) != 0)
			return -1;
		*out = keys.u.list;
		return 0;
	}
	if (v->k == JV_STR) {
		jlist *l = list_new(r);
		size_t ncp, *o = cp_offsets(v->u.str.s, v->u.str.n, &ncp);
		if (l == NULL || o == NULL) {
			free(o);
			return oom(r);
		}
		int rc = 0;
		for (size_t i = 0; rc == 0 && i < ncp; i++) {
			jv c;
			rc = str_new(r, v->u.str.s + o[i], o[i + 1] - o[i], &c) || list_push(r, l, c);
		}
		free(o);
		*out = l;
		return rc ? -1 : 0;
	}
	return EERR(r, e, "'%s' object is not iterable", type_name(v));
}

static int filter_join(render *r, const jexpr *e, const jv *v, const args *a, jv *out)
{
	const jv *sep = arg(a, 0, "d");
	jlist *l;
	if (iter_items(r, e, v, &l) != 0)
		return -1;
	sbuf b = {0};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < l->n; i++) {
		jv s;
		if (i && sep)
			rc = sep->k == JV_STR ? sb_add(r, &b, sep->u.str.s, sep->u.str.n)
					      : EERR(r, e, "join: the separator is not a string");
		if (rc == 0)
			rc = as_str(r, &l->v[i], &s) || sb_add(r, &b, s.u.str.s, s.u.str.n);
	}
	if (rc == 0)
		rc = str_new(r, b.p ? b.p : "", b.n, out);
	free(b.p);
	return rc;
}

static int filter_tojson(render *r, const jexpr *e, const jv *v, const args *a, jv *out)
{
	const jv *ind = arg(a, 0, "indent");
	int indent = ind && ind->k == JV_INT ? (int)(ind->u.i > 64 ? 64 : ind->u.i < 0 ? 0 : ind->u.i) : -1;
	sbuf b = {0};
	int rc = to_json(r, &b, v, indent, 0, e);
	if (rc == 0)
		rc = str_new(r, b.p ? b.p : "", b.n, out);
	free(b.p);
	return rc;
}

static int filter_seq(render *r, const jexpr *e, const char *f, const jv *v, jv *out)
{
	jlist *l;
	if (iter_items(r, e, v, &l) != 0)
		return -1;
	if (!strcmp(f, "first") || !strcmp(f, "last")) {
		*out = l->n == 0 ? jv_undef(NULL) : l->v[f[0] == 'f' ? 0 : l->n - 1];
		return 0;
	}
	if (v->k == JV_STR && !strcmp(f, "reverse")) {
		sbuf b = {0};
		int rc = 0;
		for (size_t i = l->n; rc == 0 && i > 0; i--)
			rc = sb_add(r, &b, l->v[i - 1].u.str.s, l->v[i - 1].u.str.n);
		if (rc == 0)
			rc = str_new(r, b.p ? b.p : "", b.n, out);
		free(b.p);
		return rc;
	}
	jlist *c = list_new(r);
	if (c == NULL)
		return -1;
	int rev = !strcmp(f, "reverse");
	for (size_t i = 0; i < l->n; i++)
		if (list_push(r, c, l->v[rev ? l->n - 1 - i : i]) != 0)
			return -1;
	*out = (jv){.k = JV_LIST, .u.list = c};
	return 0;
}

static int filter_number(render *r, const jexpr *e, const char *f, const jv *v, jv *out)
{
	if (!strcmp(f, "abs")) {
		if (!is_num(v))
			return EERR(r, e, "bad operand type for abs(): '%s'", type_name(v));
		*out = v->k == JV_FLOAT ? (jv){.k = JV_FLOAT, .u.f = fabs(v->u.f)}
					: jv_int(inum(v) < 0 ? -inum(v) : inum(v));
		return 0;
	}
	int to_int = !strcmp(f, "int");
	double d = 0;
	if (is_num(v)) {
		d = num(v);
	} else if (v->k == JV_STR) {
		char buf[64];
		size_t n = v->u.str.n < 63 ? v->u.str.n : 63;
		memcpy(buf, v->u.str.s, n);
		buf[n] = '\0';
		char *end;
		d = strtod(buf, &end);
		if (end == buf)
			d = 0;
	}
	*out = to_int ? jv_int(v->k == JV_INT ? v->u.i : (int64_t)d) : (jv){.k = JV_FLOAT, .u.f = d};
	return 0;
}

static int eval_filter(render *r, const jexpr *e, jv *out)
{
	jv v;
	args a;
	if (eval(r, e->a, &v) != 0 || eval_args(r, e, &a) != 0)
		return -1;
	const char *f = e->name;
	if (!strcmp(f, "default") || !strcmp(f, "d")) {
		const jv *dv = arg(&a, 0, "default_value"), *bo = arg(&a, 1, "boolean");
		int use = v.k == JV_UNDEF || (bo && truthy(bo) && !truthy(&v));
		*out = use ? (dv ? *dv : (jv){.k = JV_STR, .u.str = {"", 0}}) : v;
		return 0;
	}
	if (!strcmp(f, "length") || !strcmp(f, "count")) {
		int64_t n = 0;
		if (length_of(r, e, &v, &n) != 0)
			return -1;
		*out = jv_int(n);
		return 0;
	}
	if (!strcmp(f, "tojson"))
		return filter_tojson(r, e, &v, &a, out);
	if (!strcmp(f, "join"))
		return filter_join(r, e, &v, &a, out);
	if (!strcmp(f, "first") || !strcmp(f, "last") || !strcmp(f, "list") || !strcmp(f, "reverse"))
		return filter_seq(r, e, f, &v, out);
	if (!strcmp(f, "items")) {
		if (v.k == JV_UNDEF)
			return filter_seq(r, e, "list", &v, out);
		if (v.k != JV_DICT)
			return EERR(r, e, "items: expected a mapping, got %s", type_name(&v));
		return dict_view(r, v.u.dict, 2, out);
	}
	if (!strcmp(f, "int") || !strcmp(f, "float") || !strcmp(f, "abs"))
		return filter_number(r, e, f, &v, out);
	/* the string filters: str() first, as jinja2's do */
	jv s;
	if (strcmp(f, "trim") && strcmp(f, "string") && strcmp(f, "lower") && strcmp(f, "upper") &&
	    strcmp(f, "replace") && strcmp(f, "capitalize") && strcmp(f, "title"))
		return EERR(r, e, "filter '%s' is not supported", f);
	if (as_str(r, &v, &s) != 0)
		return -1;
	if (!strcmp(f, "trim"))
		return py_strip(r, e, &s, arg(&a, 0, "chars"), 3, out);
	if (!strcmp(f, "string")) {
		*out = s;
		return 0;
	}
	if (!strcmp(f, "replace"))
		return py_replace(r, e, &s, arg(&a, 0, "old"), arg(&a, 1, "new"), out);
	return ascii_case(r, &s, f[0] == 'u' ? 0 : f[0] == 'l' ? 1 : f[0] == 't' ? 2 : 3, out);
}

static int eval_test(render *r, const jexpr *e, jv *out)
{
	jv v;
	args a;
	if (eval(r, e->a, &v) != 0 || eval_args(r, e, &a) != 0)
		return -1;
	const char *t = e->name;
	int res;
	if (!strcmp(t, "defined"))
		res = v.k != JV_UNDEF;
	else if (!strcmp(t, "undefined"))
		res = v.k == JV_UNDEF;
	else if (!strcmp(t, "none"))
		res = v.k == JV_NONE;
	else if (!strcmp(t, "string"))
		res = v.k == JV_STR;
	else if (!strcmp(t, "number"))
		res = is_num(&v);
	else if (!strcmp(t, "integer"))
		res = v.k == JV_INT;
	else if (!strcmp(t, "float"))
		res = v.k == JV_FLOAT;
	else if (!strcmp(t, "boolean"))
		res = v.k == JV_BOOL;
	else if (!strcmp(t, "true") || !strcmp(t, "false"))
		res = v.k == JV_BOOL && v.u.b == (t[0] == 't');
	else if (!strcmp(t, "mapping"))
		res = v.k == JV_DICT;
	else if (!strcmp(t, "sequence"))
		res = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT;
	else if (!strcmp(t, "iterable"))
		res = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
	else if (!strcmp(t, "even") || !strcmp(t, "odd")) {
		if (v.k != JV_INT && v.k != JV_BOOL)
			return EERR(r, e, "test '%s' needs an integer, got %s", t, type_name(&v));
		res = (inum(&v) % 2 != 0) == (t[0] == 'o');
	} else if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==") ||
		   !strcmp(t, "ne") || !strcmp(t, "!=")) {
		const jv *o = arg(&a, 0, "other");
		if (o == NULL)
			return EERR(r, e, "test '%s' needs an argument", t);
		res = jv_eq(&v, o) == (t[0] != 'n' && t[0] != '!');
	} else {
		return EERR(r, e, "test '%s' is not supported", t);
	}
	*out = jv_bool(res != e->negate);
	return 0;
}

static int concat_str(render *r, const jv *a, const jv *b, jv *out)
{
	jv x, y;
	if (as_str(r, a, &x) != 0 || as_str(r, b, &y) != 0)
		return -1;
	char *p = jarena_alloc(&r->a, x.u.str.n + y.u.str.n + 1);
	if (p == NULL)
		return oom(r);
	memcpy(p, x.u.str.s, x.u.str.n);
	memcpy(p + x.u.str.n, y.u.str.s, y.u.str.n);
	*out = (jv){.k = JV_STR, .u.str = {p, x.u.str.n + y.u.str.n}};
	return 0;
}

static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int arith(render *r, const jexpr *e, const char *op, const jv *a, const jv *b, jv *out)
{
	if (!is_num(a) || !is_num(b))
		return EERR(r, e, "unsupported operand type(s) for %s: '%s' and '%s'", op,
			    type_name(a), type_name(b));
	int fl = a->k == JV_FLOAT || b->k == JV_FLOAT;
	if (!strcmp(op, "/")) {
		if (num(b) == 0)
			return EERR(r, e, "division by zero");
		*out = (jv){.k = JV_FLOAT, .u.f = num(a) / num(b)};
		return 0;
	}
	if ((!strcmp(op, "//") || !strcmp(op, "%")) && num(b) == 0)
		return EERR(r, e, "integer division or modulo by zero");
	if (fl) {
		double x = num(a), y = num(b), z;
		switch (op[0]) {
		case '+': z = x + y; break;
		case '-': z = x - y; break;
		case '*': z = op[1] ? pow(x, y) : x * y; break;
		case '/': z = floor(x / y); break;
		default: z = fmod(x, y); if (z != 0 && ((z < 0) != (y < 0))) z += y; break;
		}
		*out = (jv){.k = JV_FLOAT, .u.f = z};
		return 0;
	}
	int64_t x = inum(a), y = inum(b), z;
	switch (op[0]) {
	case '+': z = (int64_t)((uint64_t)x + (uint64_t)y); break;
	case '-': z = (int64_t)((uint64_t)x - (uint64_t)y); break;
	case '*':
		if (op[1]) {
			if (y < 0) {
				*out = (jv){.k = JV_FLOAT, .u.f = pow((double)x, (double)y)};
				return 0;
			}
			z = 1;
			for (int64_t i = 0; i < y && i < 64; i++)
				z = (int64_t)((uint64_t)z * (uint64_t)x);
		} else {
			z = (int64_t)((uint64_t)x * (uint64_t)y);
		}
		break;
	case '/': z = (x == INT64_MIN && y == -1) ? x : floor_div(x, y); break;
	default: z = (x == INT64_MIN && y == -1) ? 0 : x - floor_div(x, y) * y; break;
	}
	*out = jv_int(z);
	return 0;
}

static int eval_bin(render *r, const jexpr *e, jv *out)
{
	jv a, b;
	if (eval(r, e->a, &a) != 0 || eval(r, e->b, &b) != 0)
		return -1;
	if (!strcmp(e->op, "~"))
		return concat_str(r, &a, &b, out);
	if (need_defined(r, e, &a) != 0 || need_defined(r, e, &b) != 0)
		return -1;
	if (!strcmp(e->op, "+") && a.k == JV_STR && b.k == JV_STR)
		return concat_str(r, &a, &b, out);
	if (!strcmp(e->op, "+") && a.k == JV_LIST && b.k == JV_LIST) {
		jlist *l = list_new(r);
		if (l == NULL)
			return -1;
		for (size_t i = 0; i < a.u.list->n + b.u.list->n; i++)
			if (list_push(r, l, i < a.u.list->n ? a.u.list->v[i] : b.u.list->v[i - a.u.list->n]))
				return -1;
		*out = (jv){.k = JV_LIST, .u.list = l};
		return 0;
	}
	return arith(r, e, e->op, &a, &b, out);
}

static int contains(render *r, const jexpr *e, const jv *x, const jv *c, int *res)
{
	*res = 0;
	if (c->k == JV_UNDEF)
		return 0;
	if (c->k == JV_STR) {
		if (x->k != JV_STR)
			return EERR(r, e, "'in <string>' requires string as left operand, not %s",
				    type_name(x));
		*res = x->u.str.n == 0 || memmem(c->u.str.s, c->u.str.n, x->u.str.s, x->u.str.n) != NULL;
		return 0;
	}
	if (c->k == JV_LIST) {
		for (size_t i = 0; i < c->u.list->n && !*res; i++)
			*res = jv_eq(x, &c->u.list->v[i]);
		return 0;
	}
	if (c->k == JV_DICT || c->k == JV_NS) {
		*res = dict_find_v(c->u.dict, x) != NULL;
		return 0;
	}
	return EERR(r, e, "argument of type '%s' is not iterable", type_name(c));
}

static int order(render *r, const jexpr *e, const char *op, const jv *a, const jv *b, int *res)
{
	int c;
	if (is_num(a) && is_num(b)) {
		double x = num(a), y = num(b);
		if (a->k != JV_FLOAT && b->k != JV_FLOAT)
			c = inum(a) < inum(b) ? -1 : inum(a) > inum(b);
		else
			c = x < y ? -1 : x > y ? 1 : 0;
	} else if (a->k == JV_STR && b->k == JV_STR) {
		size_t n = a->u.str.n < b->u.str.n ? a->u.str.n : b->u.str.n;
		c = memcmp(a->u.str.s, b->u.str.s, n);
		if (c == 0)
			c = a->u.str.n < b->u.str.n ? -1 : a->u.str.n > b->u.str.n;
	} else {
		return EERR(r, e, "'%s' not supported between instances of '%s' and '%s'", op,
			    type_name(a), type_name(b));
	}
	*res = op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
	return 0;
}

static int eval_cmp(render *r, const jexpr *e, jv *out)
{
	jv a, b;
	if (eval(r, e->items[0], &a) != 0)
		return -1;
	for (int i = 1; i < e->n_items; i++) {
		if (eval(r, e->items[i], &b) != 0)
			return -1;
		const char *op = e->cmp_ops[i - 1];
		int res = 0;
		if (!strcmp(op, "==") || !strcmp(op, "!="))
			res = jv_eq(&a, &b) == (op[0] == '=');
		else if (!strcmp(op, "in") || !strcmp(op, "notin")) {
			if (contains(r, e, &a, &b, &res) != 0)
				return -1;
			res = res == (op[0] == 'i');
		} else if (order(r, e, op, &a, &b, &res) != 0) {
			return -1;
		}
		if (!res) {
			*out = jv_bool(0);
			return 0;
		}
		a = b;
	}
	*out = jv_bool(1);
	return 0;
}

static int eval_seq(render *r, const jexpr *e, jv *out)
{
	if (e->k == E_LIST) {
		jlist *l = list_new(r);
		if (l == NULL)
			return -1;
		l->tuple = e->tuple;
		for (int i = 0; i < e->n_items; i++) {
			jv v;
			if (eval(r, e->items[i], &v) != 0 || list_push(r, l, v) != 0)
				return -1;
		}
		*out = (jv){.k = JV_LIST, .u.list = l};
		return 0;
	}
	jdict *d = jarena_alloc(&r->a, sizeof *d);
	if (d == NULL)
		return oom(r);
	for (int i = 0; i < e->n_items; i++) {
		jv k, v;
		if (eval(r, e->items[i], &k) != 0 || eval(r, e->vals[i], &v) != 0 ||
		    dict_set(r, d, k, v) != 0)
			return -1;
	}
	*out = (jv){.k = JV_DICT, .u.dict = d};
	return 0;
}

static int eval_inner(render *r, const jexpr *e, jv *out)
{
	jv a, b;
	switch (e->k) {
	case E_LIT: *out = e->lit; return 0;
	case E_NAME: *out = lookup(r, e->name); return 0;
	case E_ATTR: return eval(r, e->a, &a) || get_attr(r, e, &a, e->name, out);
	case E_ITEM: return eval(r, e->a, &a) || eval(r, e->b, &b) || get_item(r, e, &a, &b, out);
	case E_SLICE: return eval_slice(r, e, out);
	case E_CALL: return eval_call(r, e, out);
	case E_FILTER: return eval_filter(r, e, out);
	case E_TEST: return eval_test(r, e, out);
	case E_NEG: case E_POS:
		if (eval(r, e->a, &a) != 0 || need_defined(r, e, &a) != 0)
			return -1;
		if (!is_num(&a))
			return EERR(r, e, "bad operand type for unary %c: '%s'", e->k == E_NEG ? '-' : '+',
				    type_name(&a));
		*out = a.k == JV_FLOAT ? (jv){.k = JV_FLOAT, .u.f = e->k == E_NEG ? -a.u.f : a.u.f}
				       : jv_int(e->k == E_NEG ? -inum(&a) : inum(&a));
		return 0;
	case E_NOT:
		if (eval(r, e->a, &a) != 0)
			return -1;
		*out = jv_bool(!truthy(&a));
		return 0;
	case E_AND: case E_OR: /* Python returns the operand that decided */
		if (eval(r, e->a, &a) != 0)
			return -1;
		if (truthy(&a) == (e->k == E_OR)) {
			*out = a;
			return 0;
		}
		return eval(r, e->b, out);
	case E_BIN: return eval_bin(r, e, out);
	case E_CMP: return eval_cmp(r, e, out);
	case E_COND:
		if (eval(r, e->b, &a) != 0)
			return -1;
		if (truthy(&a))
			return eval(r, e->a, out);
		if (e->c)
			return eval(r, e->c, out);
		*out = jv_undef(NULL);
		return 0;
	case E_LIST: case E_DICT: return eval_seq(r, e, out);
	}
	return EERR(r, e, "internal error: unknown expression");
}

static int eval(render *r, const jexpr *e, jv *out)
{
	if (++r->depth > 4 * JINJA_MAX_DEPTH) {
		r->depth--;
		return EERR(r, e, "expressions nested too deep");
	}
	int rc = eval_inner(r, e, out);
	r->depth--;
	return rc;
}

/* ---- statements */

enum { FLOW_NEXT = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2, FLOW_ERROR = -1 };

static int exec_body(render *r, const jbody *b);

static int emit(render *r, const jstmt *s, const jv *v)
{
	sbuf b = {.p = r->out, .n = r->n, .cap = r->cap};
	int rc = to_str(r, &b, v, 0);
	r->out = b.p;
	r->n = b.n;
	r->cap = b.cap;
	if (rc != 0 && strncmp(r->err->msg, "chat template line", 18) != 0)
		err_prefix(r->err, "chat template line %d col %d", s->line, s->col);
	return rc;
}

static int loop_var(render *r, const jlist *l, size_t i, jv *out)
{
	size_t n = l->n;
	jdict *d = jarena_alloc(&r->a, sizeof *d);
	if (d == NULL)
		return oom(r);
	if (dict_set_s(r, d, "index", jv_int((int64_t)i + 1)) ||
	    dict_set_s(r, d, "index0", jv_int((int64_t)i)) ||
	    dict_set_s(r, d, "revindex", jv_int((int64_t)(n - i))) ||
	    dict_set_s(r, d, "revindex0", jv_int((int64_t)(n - i - 1))) ||
	    dict_set_s(r, d, "first", jv_bool(i == 0)) ||
	    dict_set_s(r, d, "last", jv_bool(i + 1 == n)) ||
	    dict_set_s(r, d, "length", jv_int((int64_t)n)) ||
	    dict_set_s(r, d, "previtem", i > 0 ? l->v[i - 1] : jv_undef("previtem")) ||
	    dict_set_s(r, d, "nextitem", i + 1 < n ? l->v[i + 1] : jv_undef("nextitem")))
		return -1;
	*out = (jv){.k = JV_DICT, .u.dict = d};
	return 0;
}

/* Bind the loop's target(s) to item in the current scope. */
static int bind_target(render *r, const jstmt *s, const jv *item)
{
	if (s->n_target == 1)
		return assign(r, s->target[0], *item);
	jlist *l;
	if (item->k != JV_LIST || (l = item->u.list)->n != 2)
		return rerr(r, s->line, s->col, "cannot unpack a %s into 2 names", type_name(item));
	return assign(r, s->target[0], l->v[0]) || assign(r, s->target[1], l->v[1]);
}

/* The items the loop visits: its filter (for x in y if c) applied first, as
 * jinja2 does, so that loop.index and loop.last count only those. */
static int loop_items(render *r, const jstmt *s, jlist *all, jlist **out)
{
	if (s->cond == NULL) {
		*out = all;
		return 0;
	}
	jlist *l = list_new(r);
	if (l == NULL)
		return -1;
	for (size_t i = 0; i < all->n; i++) {
		scope sc = {.up = r->sc};
		r->sc = &sc;
		jv c;
		int rc = bind_target(r, s, &all->v[i]) || eval(r, s->cond, &c);
		r->sc = sc.up;
		if (rc != 0)
			return -1;
		if (truthy(&c) && list_push(r, l, all->v[i]) != 0)
			return -1;
	}
	*out = l;
	return 0;
}

static int exec_for(render *r, const jstmt *s)
{
	jv seq;
	jlist *all, *l;
	if (eval(r, s->e, &seq) != 0 || iter_items(r, s->e, &seq, &all) != 0 ||
	    loop_items(r, s, all, &l) != 0)
		return FLOW_ERROR;
	for (size_t i = 0; i < l->n; i++) {
		if (++r->steps > MAX_STEPS)
			return rerr(r, s->line, s->col, "more than %llu loop steps", MAX_STEPS);
		scope sc = {.up = r->sc};
		r->sc = &sc;
		jv loop;
		int flow = loop_var(r, l, i, &loop) || assign(r, "loop", loop) ||
				   bind_target(r, s, &l->v[i])
			   ? FLOW_ERROR : exec_body(r, &s->body);
		r->sc = sc.up;
		if (flow == FLOW_ERROR)
			return FLOW_ERROR;
		if (flow == FLOW_BREAK)
			break;
	}
	return l->n == 0 ? exec_body(r, &s->orelse) : FLOW_NEXT;
}

static int exec_set(render *r, const jstmt *s)
{
	jv v;
	if (eval(r, s->e, &v) != 0)
		return FLOW_ERROR;
	if (s->attr == NULL)
		return assign(r, s->target[0], v) ? FLOW_ERROR : FLOW_NEXT;
	jv ns = lookup(r, s->target[0]);
	if (ns.k != JV_NS)
		return rerr(r, s->line, s->col, "set %s.%s: %s is not a namespace()", s->target[0],
			    s->attr, s->target[0]);
	return dict_set_s(r, ns.u.dict, s->attr, v) ? FLOW_ERROR : FLOW_NEXT;
}

static int exec_stmt(render *r, const jstmt *s)
{
	jv v;
	switch (s->k) {
	case S_TEXT: {
		sbuf b = {.p = r->out, .n = r->n, .cap = r->cap};
		int rc = sb_add(r, &b, s->text, s->len);
		r->out = b.p;
		r->n = b.n;
		r->cap = b.cap;
		return rc ? FLOW_ERROR : FLOW_NEXT;
	}
	case S_OUT:
		return eval(r, s->e, &v) || emit(r, s, &v) ? FLOW_ERROR : FLOW_NEXT;
	case S_IF:
		if (eval(r, s->e, &v) != 0)
			return FLOW_ERROR;
		return exec_body(r, truthy(&v) ? &s->body : &s->orelse);
	case S_FOR: return exec_for(r, s);
	case S_SET: return exec_set(r, s);
	case S_BREAK: return FLOW_BREAK;
	case S_CONTINUE: return FLOW_CONTINUE;
	}
	return rerr(r, s->line, s->col, "internal error: unknown statement");
}

static int exec_body(render *r, const jbody *b)
{
	for (int i = 0; i < b->n; i++) {
		int flow = exec_stmt(r, b->v[i]);
		if (flow != FLOW_NEXT)
			return flow;
	}
	return FLOW_NEXT;
}

int jinja_render(const jinja_tpl *t, const json_t *vars, char **out, size_t *n, titan_err *err)
{
	render r = {.err = err, .a = {.limit = MAX_VALUES}};
	scope root = {0};
	r.sc = &root;
	*out = NULL;
	*n = 0;
	int rc = 0;
	if (vars != NULL) {
		if (!json_is_object(vars))
			rc = err_set(err, "chat template: the variables are not a JSON object");
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)vars, k, x) {
			jv v;
			if (rc == 0 && (from_json(&r, x, &v, 0) != 0 || assign(&r, k, v) != 0))
				rc = -1;
		}
	}
	if (rc == 0)
		rc = exec_body(&r, &t->body) == FLOW_ERROR ? -1 : 0;
	if (rc == 0 && r.out == NULL && (r.out = calloc(1, 1)) == NULL)
		rc = oom(&r);
	jarena_free(&r.a);
	if (rc != 0) {
		free(r.out);
		return -1;
	}
	*out = r.out;
	*n = r.n;
	return 0;
}
