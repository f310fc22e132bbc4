#include "config/toml.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode/unicode.h"

typedef struct parser {
	const char *name;
	const char *p;
	int line;
	titan_err *err;
	char table[512];  /* current [table] prefix, "" at the top */
	char **seen;      /* full keys seen, to refuse duplicates */
	int nseen, capseen;
	int depth;        /* arrays open around the value being read */
	/* [[name]] arrays of tables: each name's count so far (the next
	 * element's index), in the order first seen */
	struct aot {
		char name[512];
		int n;
	} *aot;
	int naot;
} parser;

/* Configs nest arrays two deep (a list of lists); the bound keeps a hostile
 * file from exhausting the stack of the recursive reader (and of
 * toml_value_free). */
#define TOML_MAX_DEPTH 32

static int perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser *ps, const char *fmt, ...)
{
	char msg[800];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return err_set(ps->err, "%s:%d: %s", ps->name, ps->line, msg);
}

const char *toml_kind_name(toml_kind k)
{
	switch (k) {
	case TOML_STR: return "string";
	case TOML_INT: return "integer";
	case TOML_FLOAT: return "float";
	case TOML_BOOL: return "boolean";
	case TOML_ARRAY: return "array";
	}
	return "?";
}

void toml_value_free(toml_value *v)
{
	free(v->s);
	for (int i = 0; i < v->n; i++)
		toml_value_free(&v->items[i]);
	free(v->items);
	memset(v, 0, sizeof *v);
}

/* Spaces and tabs only; newlines are significant. */
static void skip_ws(parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t')
		ps->p++;
}

static void skip_comment(parser *ps)
{
	if (*ps->p == '#')
		while (*ps->p != '\0' && *ps->p != '\n')
			ps->p++;
}

/* Whitespace, comments and newlines (inside arrays). */
static void skip_ws_nl(parser *ps)
{
	for (;;) {
		skip_ws(ps);
		skip_comment(ps);
		if (*ps->p == '\n') {
			ps->line++;
			ps->p++;
		} else if (*ps->p == '\r' && ps->p[1] == '\n') {
			ps->p++;
		} else {
			return;
		}
	}
}

/* After a value or a header: optional comment, then end of line or file. */
static int expect_eol(parser *ps)
{
	skip_ws(ps);
	skip_comment(ps);
	if (*ps->p == '\r')
		ps->p++;
	if (*ps->p == '\n') {
		ps->p++;
		ps->line++;
		return 0;
	}
	if (*ps->p == '\0')
		return 0;
	return perr(ps, "unexpected '%c' after the value (one key = value per line)", *ps->p);
}

typedef struct sbuf {
	char *b;
	size_t n, cap;
} sbuf;

static int sb_put(sbuf *s, char c)
{
	if (s->n + 2 > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 32;
		char *b = realloc(s->b, cap);
		if (b == NULL)
			return -1;
		s->b = b;
		s->cap = cap;
	}
	s->b[s->n++] = c;
	s->b[s->n] = '\0';
	return 0;
}

static int sb_utf8(sbuf *s, uint32_t cp)
{
	if (cp < 0x80)
		return sb_put(s, (char)cp);
	if (cp < 0x800)
		return sb_put(s, (char)(0xC0 | cp >> 6)) | sb_put(s, (char)(0x80 | (cp & 0x3F)));
	if (cp < 0x10000)
		return sb_put(s, (char)(0xE0 | cp >> 12)) |
		       sb_put(s, (char)(0x80 | ((cp >> 6) & 0x3F))) |
		       sb_put(s, (char)(0x80 | (cp & 0x3F)));
	return sb_put(s, (char)(0xF0 | cp >> 18)) | sb_put(s, (char)(0x80 | ((cp >> 12) & 0x3F))) |
	       sb_put(s, (char)(0x80 | ((cp >> 6) & 0x3F))) | sb_put(s, (char)(0x80 | (cp & 0x3F)));
}

static int parse_escape(parser *ps, sbuf *s)
{
	char c = *ps->p++;
	switch (c) {
	case 'b': return sb_put(s, '\b');
	case 't': return sb_put(s, '\t');
	case 'n': return sb_put(s, '\n');
	case 'f': return sb_put(s, '\f');
	case 'r': return sb_put(s, '\r');
	case '"': return sb_put(s, '"');
	case '\\': return sb_put(s, '\\');
	case 'u':
	case 'U': {
		int nd = c == 'u' ? 4 : 8;
		uint32_t cp = 0;
		for (int i = 0; i < nd; i++) {
			char h = *ps->p++;
			if (!isxdigit((unsigned char)h))
				return perr(ps, "bad \\%c escape: expected %d hex digits", c, nd);
			cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0'
								    : (tolower((unsigned char)h) - 'a' + 10));
		}
		if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return perr(ps, "bad \\%c escape: U+%04X is not a scalar value", c, cp);
		return sb_utf8(s, cp);
	}
	default:
		return perr(ps, "unknown escape '\\%c' in a string", c ? c : '0');
	}
}

/* A "basic" or 'literal' string; *out is owned by the caller. */
static int parse_string(parser *ps, char **out)
{
	char q = *ps->p++;
	if (ps->p[0] == q && ps->p[1] == q)
		return perr(ps, "multi-line strings are not supported in titan configs");
	sbuf s = {0};
	if (sb_put(&s, 'x') != 0)
		return perr(ps, "out of memory");
	s.n = 0;
	s.b[0] = '\0';
	for (;;) {
		char c = *ps->p;
		if (c == '\0' || c == '\n') {
			free(s.b);
			return perr(ps, "unterminated string");
		}
		ps->p++;
		if (c == q)
			break;
		if (c == '\\' && q == '"') {
			if (parse_escape(ps, &s) != 0) {
				free(s.b);
				return -1;
			}
		} else if (sb_put(&s, c) != 0) {
			free(s.b);
			return perr(ps, "out of memory");
		}
	}
	*out = s.b;
	return 0;
}

static int is_bare(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/* A dotted key (bare or quoted parts) into buf. */
static int parse_key(parser *ps, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (;;) {
		skip_ws(ps);
		char part[256];
		if (*ps->p == '"' || *ps->p == '\'') {
			char *s;
			if (parse_string(ps, &s) != 0)
				return -1;
			snprintf(part, sizeof part, "%s", s);
			free(s);
		} else {
			size_t k = 0;
			while (is_bare(*ps->p) && k + 1 < sizeof part)
				part[k++] = *ps->p++;
			part[k] = '\0';
			if (k == 0)
				return perr(ps, "expected a key, found '%c'", *ps->p ? *ps->p : ' ');
		}
		int w = snprintf(buf + n, cap - n, "%s%s", n ? "." : "", part);
		if (w < 0 || (size_t)w >= cap - n)
			return perr(ps, "key too long");
		n += (size_t)w;
		skip_ws(ps);
		if (*ps->p != '.')
			return 0;
		ps->p++;
	}
}

static int parse_value(parser *ps, toml_value *v);

static int parse_items(parser *ps, toml_value *v);

static int parse_array(parser *ps, toml_value *v)
{
	v->kind = TOML_ARRAY;
	if (ps->depth >= TOML_MAX_DEPTH)
		return perr(ps, "arrays nested deeper than %d", TOML_MAX_DEPTH);
	ps->p++; /* '[' */
	ps->depth++;
	int rc = parse_items(ps, v);
	ps->depth--;
	return rc;
}

static int parse_items(parser *ps, toml_value *v)
{
	for (;;) {
		skip_ws_nl(ps);
		if (*ps->p == ']') {
			ps->p++;
			return 0;
		}
		toml_value *items = realloc(v->items, (size_t)(v->n + 1) * sizeof *items);
		if (items == NULL)
			return perr(ps, "out of memory");
		v->items = items;
		memset(&v->items[v->n], 0, sizeof *items);
		/* Counted before it is read, so that freeing v frees a half-read item. */
		if (parse_value(ps, &v->items[v->n++]) != 0)
			return -1;
		skip_ws_nl(ps);
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p == ']') {
			ps->p++;
			return 0;
		}
		return perr(ps, "expected ',' or ']' in an array");
	}
}

/* Integers and floats, with TOML's underscores between digits. */
static int parse_number(parser *ps, toml_value *v)
{
	char buf[128];
	size_t k = 0;
	const char *start = ps->p;
	while (*ps->p && (isalnum((unsigned char)*ps->p) || strchr("+-._", *ps->p)) &&
	       k + 1 < sizeof buf) {
		if (*ps->p != '_')
			buf[k++] = *ps->p;
		ps->p++;
	}
	buf[k] = '\0';
	if (k == 0)
		return perr(ps, "expected a value, found '%c'", *ps->p ? *ps->p : ' ');
	const char *d = buf + (buf[0] == '+' || buf[0] == '-');
	if (strcmp(d, "inf") == 0 || strcmp(d, "nan") == 0) {
		v->kind = TOML_FLOAT;
		v->f = d[0] == 'i' ? INFINITY : NAN;
		if (buf[0] == '-')
			v->f = -v->f;
		return 0;
	}
	if (!isdigit((unsigned char)d[0]))
		return perr(ps, "bad value '%.*s' (strings need quotes)", (int)(ps->p - start), start);
	char *end;
	errno = 0;
	if (d[0] == '0' && (d[1] == 'x' || d[1] == 'o' || d[1] == 'b')) {
		int base = d[1] == 'x' ? 16 : d[1] == 'o' ? 8 : 2;
		unsigned long long u = strtoull(d + 2, &end, base);
		if (*end != '\0' || errno != 0 || end == d + 2 || u > INT64_MAX)
			return perr(ps, "bad integer '%s'", buf);
		v->kind = TOML_INT;
		v->i = buf[0] == '-' ? -(int64_t)u : (int64_t)u;
		return 0;
	}
	if (strpbrk(buf, ".eE") == NULL) {
		long long i = strtoll(buf, &end, 10);
		if (*end != '\0' || errno != 0)
			return perr(ps, "bad integer '%s'%s", buf, errno ? " (out of range)" : "");
		v->kind = TOML_INT;
		v->i = i;
		return 0;
	}
	double f = strtod(buf, &end);
	if (*end != '\0' || errno == ERANGE)
		return perr(ps, "bad number '%s'", buf);
	v->kind = TOML_FLOAT;
	v->f = f;
	return 0;
}

static int parse_value(parser *ps, toml_value *v)
{
	memset(v, 0, sizeof *v);
	skip_ws(ps);
	char c = *ps->p;
	if (c == '"' || c == '\'') {
		v->kind = TOML_STR;
		return parse_string(ps, &v->s);
	}
	if (c == '[')
		return parse_array(ps, v);
	if (c == '{')
		return perr(ps, "an inline table inside an array is not supported in titan configs");
	if (strncmp(ps->p, "true", 4) == 0 && !is_bare(ps->p[4])) {
		v->kind = TOML_BOOL;
		v->b = 1;
		ps->p += 4;
		return 0;
	}
	if (strncmp(ps->p, "false", 5) == 0 && !is_bare(ps->p[5])) {
		v->kind = TOML_BOOL;
		ps->p += 5;
		return 0;
	}
	return parse_number(ps, v);
}

static int remember_key(parser *ps, const char *key)
{
	for (int i = 0; i < ps->nseen; i++)
		if (strcmp(ps->seen[i], key) == 0)
			return perr(ps, "%s: defined twice", key);
	if (ps->nseen == ps->capseen) {
		int cap = ps->capseen ? 2 * ps->capseen : 64;
		char **s = realloc(ps->seen, (size_t)cap * sizeof *s);
		if (s == NULL)
			return perr(ps, "out of memory");
		ps->seen = s;
		ps->capseen = cap;
	}
	if ((ps->seen[ps->nseen] = strdup(key)) == NULL)
		return perr(ps, "out of memory");
	ps->nseen++;
	return 0;
}

/* [[name]]: the next element of the array of tables name, whose keys are
 * name.N.key with N its index from 0 (the callback sees the element's keys
 * so; a later [name] or name = ... would collide with them and is refused as
 * a duplicate). */
static int parse_aot_header(parser *ps)
{
	char name[sizeof ps->table - 16];
	ps->p++; /* the second '[' */
	if (parse_key(ps, name, sizeof name) != 0)
		return -1;
	if (ps->p[0] != ']' || ps->p[1] != ']')
		return perr(ps, "expected ']]' after the array of tables' name");
	ps->p += 2;
	int i = 0;
	while (i < ps->naot && strcmp(ps->aot[i].name, name) != 0)
		i++;
	if (i == ps->naot) {
		struct aot *a = realloc(ps->aot, (size_t)(ps->naot + 1) * sizeof *a);
		if (a == NULL)
			return perr(ps, "out of memory");
		ps->aot = a;
		snprintf(a[i].name, sizeof a[i].name, "%s", name);
		a[i].n = 0;
		ps->naot++;
		char header[sizeof ps->table + 2];
		snprintf(header, sizeof header, "[%s]", name);
		if (remember_key(ps, header) != 0)
			return perr(ps, "%s: an array of tables and a table of one name", name);
	}
	snprintf(ps->table, sizeof ps->table, "%s.%d", name, ps->aot[i].n++);
	return expect_eol(ps);
}

static int parse_header(parser *ps)
{
	ps->p++; /* '[' */
	if (*ps->p == '[')
		return parse_aot_header(ps);
	if (parse_key(ps, ps->table, sizeof ps->table) != 0)
		return -1;
	if (*ps->p != ']')
		return perr(ps, "expected ']' after the table name");
	ps->p++;
	/* TOML: a table is defined once (its keys would otherwise be split
	 * over two places, the second perhaps a pasted copy) */
	char header[sizeof ps->table + 2];
	snprintf(header, sizeof header, "[%s]", ps->table);
	if (remember_key(ps, header) != 0)
		return -1;
	return expect_eol(ps);
}

static int parse_keyval_at(parser *ps, const char *prefix, toml_key_fn fn, void *ctx);

/* An inline table { k = v, ... } as the value of key full: each of its keys
 * goes to the callback as full.k (nested tables alike), on one line as TOML
 * wants it. */
static int parse_inline_table(parser *ps, const char *full, toml_key_fn fn, void *ctx)
{
	if (ps->depth >= TOML_MAX_DEPTH)
		return perr(ps, "tables nested deeper than %d", TOML_MAX_DEPTH);
	ps->p++; /* '{' */
	ps->depth++;
	skip_ws(ps);
	int rc = 0;
	if (*ps->p == '}')
		ps->p++;
	else
		for (;;) {
			if ((rc = parse_keyval_at(ps, full, fn, ctx)) != 0)
				break;
			skip_ws(ps);
			if (*ps->p == ',') {
				ps->p++;
				skip_ws(ps);
				continue;
			}
			if (*ps->p == '}') {
				ps->p++;
				break;
			}
			rc = perr(ps, "expected ',' or '}' in an inline table (one line)");
			break;
		}
	ps->depth--;
	return rc;
}

/* key = value under prefix ("" at the top), the value not yet followed by
 * its end of line. */
static int parse_keyval_at(parser *ps, const char *prefix, toml_key_fn fn, void *ctx)
{
	char key[512], full[1100];
	if (parse_key(ps, key, sizeof key) != 0)
		return -1;
	if (*ps->p != '=')
		return perr(ps, "expected '=' after the key '%s'", key);
	ps->p++;
	snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "", key);
	skip_ws(ps);
	if (*ps->p == '{') {
		char header[sizeof full + 2];
		snprintf(header, sizeof header, "[%s]", full);
		return remember_key(ps, header) != 0 ? -1 : parse_inline_table(ps, full, fn, ctx);
	}
	int line = ps->line;
	toml_value v;
	if (parse_value(ps, &v) != 0) {
		toml_value_free(&v);
		return -1;
	}
	int rc = remember_key(ps, full);
	if (rc == 0)
		rc = fn(ctx, full, &v, line, ps->err);
	toml_value_free(&v);
	return rc != 0 ? -1 : 0;
}

static int parse_keyval(parser *ps, toml_key_fn fn, void *ctx)
{
	return parse_keyval_at(ps, ps->table, fn, ctx) != 0 ? -1 : expect_eol(ps);
}

/* TOML: a document is valid UTF-8.  Checked once, up front, so that no
 * string echoes invalid bytes into print_config, a log or a checkpoint. */
static int check_utf8(parser *ps)
{
	const uint8_t *s = (const uint8_t *)ps->p, *line = s;
	size_t n = strlen(ps->p);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = uni_utf8_decode(s + i, n - i, &cp);
		if (cp & UNI_BAD)
			return perr(ps, "invalid UTF-8 (byte 0x%02x at column %zu): a TOML file is "
				    "UTF-8", s[i], (size_t)(s + i - line) + 1);
		i += k;
		if (cp == '\n') {
			ps->line++;
			line = s + i;
		}
	}
	ps->line = 1;
	return 0;
}

int toml_parse(const char *name, const char *text, toml_key_fn fn, void *ctx, titan_err *err)
{
	parser ps = {.name = name, .p = text, .line = 1, .err = err};
	int rc = check_utf8(&ps);
	while (rc == 0) {
		skip_ws_nl(&ps);
		if (*ps.p == '\0')
			break;
		rc = *ps.p == '[' ? parse_header(&ps) : parse_keyval(&ps, fn, ctx);
	}
	for (int i = 0; i < ps.nseen; i++)
		free(ps.seen[i]);
	free(ps.seen);
	free(ps.aot);
	return rc;
}
