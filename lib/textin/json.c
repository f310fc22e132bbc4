/* JSON Lines decoding: find one string field of a one-line JSON object and
 * decode it exactly.  The whole line is validated (a line Python's json.loads
 * rejects is malformed here too, except that raw invalid UTF-8 is rejected
 * rather than read with a lossy codec). */
#include "textin/textin_impl.h"

#include <stdlib.h>
#include <string.h>

/* Python's json nests about a thousand levels before RecursionError. */
#define JSON_MAX_DEPTH 1000

typedef struct jp {
	const unsigned char *s, *end;
	const unsigned char *start;
	titan_err *err;
} jp;

int textin_buf_reserve(textin_buf *b, size_t extra)
{
	if (b->cap - b->n > extra)
		return 0;
	size_t want = b->n + extra + 1;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < want) {
		if (cap > SIZE_MAX / 2)
			return -1;
		cap *= 2;
	}
	char *p = realloc(b->p, cap);
	if (p == NULL)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

int textin_buf_append(textin_buf *b, const void *s, size_t n)
{
	if (textin_buf_reserve(b, n) != 0)
		return -1;
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, const unsigned char *end)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t n;
	unsigned lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0; /* overlong */
		else if (c == 0xED)
			hi = 0x9F; /* UTF-16 surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90; /* overlong */
		else if (c == 0xF4)
			hi = 0x8F; /* above U+10FFFF */
	} else
		return 0;
	if ((size_t)(end - s) < n)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return n;
}

int textin_utf8_valid(const char *str, size_t n, size_t *bad)
{
	const unsigned char *s = (const unsigned char *)str, *end = s + n, *p = s;
	while (p < end) {
		/* ASCII runs dominate real text; take them eight at a time. */
		while (end - p >= 8) {
			uint64_t w;
			memcpy(&w, p, 8);
			if (w & 0x8080808080808080ull)
				break;
			p += 8;
		}
		if (p >= end)
			break;
		size_t k = utf8_seq(p, end);
		if (k == 0) {
			if (bad)
				*bad = (size_t)(p - s);
			return 0;
		}
		p += k;
	}
	return 1;
}

static int put_utf8(textin_buf *b, uint32_t cp)
{
	unsigned char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (unsigned char)(0xC0 | (cp >> 6));
		u[1] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (unsigned char)(0xE0 | (cp >> 12));
		u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (unsigned char)(0xF0 | (cp >> 18));
		u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (unsigned char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	return textin_buf_append(b, u, n);
}

int textin_json_quote(textin_buf *b, const char *str, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str, *end = s + n;
	if (textin_buf_append(b, "\"", 1) != 0)
		return -1;
	while (s < end) {
		const unsigned char *run = s;
		while (s < end && *s >= 0x20 && *s < 0x80 && *s != '"' && *s != '\\')
			s++;
		if (s > run && textin_buf_append(b, run, (size_t)(s - run)) != 0)
			return -1;
		if (s >= end)
			break;
		unsigned c = *s;
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			if (textin_buf_append(b, esc, 2) != 0)
				return -1;
			s++;
		} else if (c < 0x20) {
			const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
					  : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
			if (named == NULL) {
				memcpy(esc, "\\u00", 4);
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				named = esc;
				esc[6] = '\0';
			}
			if (textin_buf_append(b, named, strlen(named)) != 0)
				return -1;
			s++;
		} else {
			size_t k = utf8_seq(s, end);
			if (k == 0) {
				if (put_utf8(b, 0xFFFD) != 0)
					return -1;
				s++;
			} else {
				if (textin_buf_append(b, s, k) != 0)
					return -1;
				s += k;
			}
		}
	}
	return textin_buf_append(b, "\"", 1);
}

static int jp_fail(jp *p, const char *what)
{
	return err_set(p->err, "%s at column %zu", what, (size_t)(p->s - p->start) + 1);
}

static void jp_ws(jp *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n'))
		p->s++;
}

static int hex4(const unsigned char *s, uint32_t *v)
{
	uint32_t x = 0;
	for (int i = 0; i < 4; i++) {
		unsigned c = s[i];
		x <<= 4;
		if (c >= '0' && c <= '9')
			x |= c - '0';
		else if (c >= 'a' && c <= 'f')
			x |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			x |= c - 'A' + 10;
		else
			return -1;
	}
	*v = x;
	return 0;
}

/* \uXXXX at p->s (after the backslash and 'u' were checked by the caller:
 * p->s points at the 'u').  Joins a surrogate pair; a lone surrogate becomes
 * U+FFFD, like tiktoken's surrogatepass/replace round trip of such a str. */
static int jp_unicode(jp *p, textin_buf *out)
{
	uint32_t cp;
	if (p->end - p->s < 5 || hex4(p->s + 1, &cp) != 0)
		return jp_fail(p, "bad \\u escape");
	p->s += 5;
	if (cp >= 0xD800 && cp <= 0xDBFF) {
		uint32_t lo;
		if (p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u' &&
		    hex4(p->s + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
			p->s += 6;
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		} else
			cp = 0xFFFD;
	} else if (cp >= 0xDC00 && cp <= 0xDFFF)
		cp = 0xFFFD;
	if (out && put_utf8(out, cp) != 0)
		return jp_fail(p, "out of memory");
	return 0;
}

/* A string at p->s (on the opening quote); decoded into out when not NULL. */
static int jp_string(jp *p, textin_buf *out)
{
	p->s++;
	for (;;) {
		const unsigned char *run = p->s;
		while (p->s < p->end && *p->s >= 0x20 && *p->s < 0x80 && *p->s != '"' && *p->s != '\\')
			p->s++;
		if (out && p->s > run && textin_buf_append(out, run, (size_t)(p->s - run)) != 0)
			return jp_fail(p, "out of memory");
		if (p->s >= p->end)
			return jp_fail(p, "unterminated string");
		unsigned c = *p->s;
		if (c == '"') {
			p->s++;
			return 0;
		}
		if (c < 0x20)
			return jp_fail(p, "control character in string");
		if (c >= 0x80) {
			size_t k = utf8_seq(p->s, p->end);
			if (k == 0)
				return jp_fail(p, "invalid UTF-8");
			if (out && textin_buf_append(out, p->s, k) != 0)
				return jp_fail(p, "out of memory");
			p->s += k;
			continue;
		}
		/* backslash */
		if (p->end - p->s < 2)
			return jp_fail(p, "unterminated string");
		unsigned e = p->s[1];
		char ch;
		switch (e) {
		case '"': ch = '"'; break;
		case '\\': ch = '\\'; break;
		case '/': ch = '/'; break;
		case 'b': ch = '\b'; break;
		case 'f': ch = '\f'; break;
		case 'n': ch = '\n'; break;
		case 'r': ch = '\r'; break;
		case 't': ch = '\t'; break;
		case 'u':
			p->s++;
			if (jp_unicode(p, out) != 0)
				return -1;
			continue;
		default:
			p->s++;
			return jp_fail(p, "bad escape");
		}
		if (out && textin_buf_append(out, &ch, 1) != 0)
			return jp_fail(p, "out of memory");
		p->s += 2;
	}
}

static int jp_literal(jp *p, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
		return jp_fail(p, "unexpected character");
	p->s += n;
	return 0;
}

static int is_digit(const jp *p)
{
	return p->s < p->end && *p->s >= '0' && *p->s <= '9';
}

/* JSON number grammar; also NaN, Infinity, -Infinity, which Python accepts. */
static int jp_number(jp *p)
{
	if (p->s < p->end && *p->s == '-')
		p->s++;
	if (p->s < p->end && *p->s == 'I')
		return jp_literal(p, "Infinity");
	if (!is_digit(p))
		return jp_fail(p, "bad number");
	if (*p->s == '0')
		p->s++;
	else
		while (is_digit(p))
			p->s++;
	if (p->s < p->end && *p->s == '.') {
		p->s++;
		if (!is_digit(p))
			return jp_fail(p, "bad number");
		while (is_digit(p))
			p->s++;
	}
	if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
		p->s++;
		if (p->s < p->end && (*p->s == '+' || *p->s == '-'))
			p->s++;
		if (!is_digit(p))
			return jp_fail(p, "bad number");
		while (is_digit(p))
			p->s++;
	}
	return 0;
}

static int jp_value(jp *p, int depth);

static int jp_array(jp *p, int depth)
{
	p->s++;
	jp_ws(p);
	if (p->s < p->end && *p->s == ']') {
		p->s++;
		return 0;
	}
	for (;;) {
		if (jp_value(p, depth + 1) != 0)
			return -1;
		jp_ws(p);
		if (p->s >= p->end)
			return jp_fail(p, "unterminated array");
		if (*p->s == ']') {
			p->s++;
			return 0;
		}
		if (*p->s != ',')
			return jp_fail(p, "expected ',' or ']'");
		p->s++;
	}
}

/* An object; when field is not NULL (the top level), the value of the last
 * member named field is decoded into out (Python's json keeps the last of
 * duplicate keys).  *found tells whether it was there as a string. */
static int jp_object(jp *p, int depth, const char *field, textin_buf *out, int *found,
		     textin_buf *key)
{
	p->s++;
	jp_ws(p);
	if (p->s < p->end && *p->s == '}') {
		p->s++;
		return 0;
	}
	for (;;) {
		jp_ws(p);
		if (p->s >= p->end || *p->s != '"')
			return jp_fail(p, "expected a string key");
		int want = 0;
		if (field) {
			key->n = 0;
			if (jp_string(p, key) != 0)
				return -1;
			want = strlen(field) == key->n && memcmp(field, key->p, key->n) == 0;
		} else if (jp_string(p, NULL) != 0)
			return -1;
		jp_ws(p);
		if (p->s >= p->end || *p->s != ':')
			return jp_fail(p, "expected ':'");
		p->s++;
		jp_ws(p);
		if (want && p->s < p->end && *p->s == '"') {
			out->n = 0;
			if (out->p)
				out->p[0] = '\0';
			if (jp_string(p, out) != 0)
				return -1;
			*found = 1;
		} else {
			if (want)
				*found = -1; /* present, not a string */
			if (jp_value(p, depth + 1) != 0)
				return -1;
		}
		jp_ws(p);
		if (p->s >= p->end)
			return jp_fail(p, "unterminated object");
		if (*p->s == '}') {
			p->s++;
			return 0;
		}
		if (*p->s != ',')
			return jp_fail(p, "expected ',' or '}'");
		p->s++;
	}
}

static int jp_value(jp *p, int depth)
{
	if (depth > JSON_MAX_DEPTH)
		return jp_fail(p, "nesting too deep");
	jp_ws(p);
	if (p->s >= p->end)
		return jp_fail(p, "expected a value");
	switch (*p->s) {
	case '"':
		return jp_string(p, NULL);
	case '{':
		return jp_object(p, depth, NULL, NULL, NULL, NULL);
	case '[':
		return jp_array(p, depth);
	case 't':
		return jp_literal(p, "true");
	case 'f':
		return jp_literal(p, "false");
	case 'n':
		return jp_literal(p, "null");
	case 'N':
		return jp_literal(p, "NaN");
	default:
		return jp_number(p);
	}
}

int textin_json_field(const char *line, size_t n, const char *field, textin_buf *out,
		      titan_err *err)
{
	jp p = {(const unsigned char *)line, (const unsigned char *)line + n,
		(const unsigned char *)line, err};
	textin_buf key = {0};
	int found = 0;
	out->n = 0;
	if (textin_buf_reserve(out, 0) != 0)
		return err_set(err, "out of memory");
	out->p[0] = '\0';
	jp_ws(&p);
	if (p.s >= p.end || *p.s != '{') {
		if (p.s < p.end)
			return jp_fail(&p, "expected a JSON object");
		return jp_fail(&p, "expected a JSON object, found nothing");
	}
	int rc = jp_object(&p, 1, field, out, &found, &key);
	free(key.p);
	if (rc != 0)
		return -1;
	jp_ws(&p);
	if (p.s != p.end)
		return jp_fail(&p, "extra data after the object");
	if (found == 0)
		return err_set(err, "no \"%s\" field", field);
	if (found < 0)
		return err_set(err, "field \"%s\" is not a string", field);
	return 0;
}
