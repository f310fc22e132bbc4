/* Template text to syntax tree: jinja2's lexer (trim_blocks, lstrip_blocks,
 * the -/+ modifiers, newlines normalised to \n, one trailing newline dropped)
 * and its parser's precedence (jinja2/parser.py: condexpr < or < and < not <
 * compare < + - < ~ < * / // % < ** < unary with its filters and tests <
 * postfix < primary). */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

/* ---- the arena */

struct jarena_block {
	jarena_block *next;
	size_t used, cap;
	max_align_t data[];
};

void *jarena_alloc(jarena *a, size_t n)
{
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	jarena_block *b = a->head;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		if (a->limit && (cap > a->limit || a->held > a->limit - cap))
			return NULL;
		b = malloc(sizeof *b + cap);
		if (b == NULL)
			return NULL;
		b->cap = cap;
		b->used = 0;
		b->next = a->head;
		a->head = b;
		a->held += cap;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

void jarena_free(jarena *a)
{
	while (a->head) {
		jarena_block *n = a->head->next;
		free(a->head);
		a->head = n;
	}
}

/* ---- Python's whitespace (str.isspace, the \s of re on str), on UTF-8 */

/* Length of the whitespace character at p (0 if none). */
static size_t py_space_at(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	if (n == 0)
		return 0;
	if ((u[0] >= 9 && u[0] <= 13) || u[0] == ' ' || (u[0] >= 0x1c && u[0] <= 0x1f))
		return 1;
	if (n >= 2 && u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0))
		return 2;
	if (n >= 3 && u[0] == 0xe1 && u[1] == 0x9a && u[2] == 0x80) /* U+1680 */
		return 3;
	if (n >= 3 && u[0] == 0xe2 && u[1] == 0x80 &&
	    (u[2] <= 0x8a || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf)) /* U+2000-200A, 2028, 2029, 202F */
		return 3;
	if (n >= 3 && u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f) /* U+205F */
		return 3;
	if (n >= 3 && u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80) /* U+3000 */
		return 3;
	return 0;
}

/* Length of the whitespace character ending at p + n (0 if none). */
static size_t py_space_before(const char *p, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++)
		if (py_space_at(p + n - k, k) == k)
			return k;
	return 0;
}

size_t jinja_py_lstrip_len(const char *p, size_t n)
{
	size_t i = 0, k;
	while (i < n && (k = py_space_at(p + i, n - i)) > 0)
		i += k;
	return i;
}

size_t jinja_py_rstrip_len(const char *p, size_t n)
{
	size_t k;
	while (n > 0 && (k = py_space_before(p, n)) > 0)
		n -= k;
	return n;
}

/* ---- tokens */

typedef enum {
	TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STR,
	TK_INT, TK_FLOAT, TK_OP, TK_EOF,
} tk_kind;

typedef struct token {
	tk_kind k;
	const char *s; /* TK_TEXT, TK_NAME, TK_OP: the text; TK_STR: the decoded string */
	size_t n;
	int line, col;
	int64_t i;
	double f;
} token;

typedef struct lexer {
	jarena *a;
	const char *src;
	size_t n, pos;
	int line, col;           /* of pos */
	token *t;
	size_t nt, cap;
	titan_err *err;
} lexer;

int jinja_error(titan_err *e, int line, int col, const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return err_set(e, "chat template line %d col %d: %s", line, col, msg);
}

#define lex_error(x, line, col, ...) jinja_error((x)->err, line, col, __VA_ARGS__)

/* Move pos to p, counting lines and columns (columns in bytes). */
static void advance_to(lexer *x, size_t p)
{
	for (; x->pos < p; x->pos++) {
		if (x->src[x->pos] == '\n') {
			x->line++;
			x->col = 1;
		} else {
			x->col++;
		}
	}
}

static int push(lexer *x, tk_kind k, const char *s, size_t n, int line, int col, token **out)
{
	if (x->nt == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 256;
		token *t = realloc(x->t, cap * sizeof *t);
		if (t == NULL)
			return err_set(x->err, "chat template: out of memory");
		x->t = t;
		x->cap = cap;
	}
	token *t = &x->t[x->nt++];
	*t = (token){.k = k, .s = s, .n = n, .line = line, .col = col};
	if (out)
		*out = t;
	return 0;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static size_t put_utf8(char *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | (c >> 6));
		o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | (c >> 12));
		o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (c >> 18));
	o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* A \x, \u or \U escape of `digits` hex digits at p (after the letter). */
static int hex_escape(const char *p, size_t avail, int digits, uint32_t *c)
{
	if ((size_t)digits > avail)
		return -1;
	uint32_t v = 0;
	for (int i = 0; i < digits; i++) {
		int h = hexval((unsigned char)p[i]);
		if (h < 0)
			return -1;
		v = v * 16 + (uint32_t)h;
	}
	if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return -1;
	*c = v;
	return 0;
}

/* A string literal's body [p, p + n) decoded as Python's unicode-escape reads
 * it (jinja2's lexer does so): \n \t \\ \' \" \xHH \uHHHH \UHHHHHHHH \ooo and
 * the rest; an unknown escape keeps its backslash. */
static int decode_string(lexer *x, const char *p, size_t n, token *t, int line, int col)
{
	char *o = jarena_alloc(x->a, n + 1);
	if (o == NULL)
		return err_set(x->err, "chat template: out of memory");
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\\' || i + 1 == n) {
			o[m++] = p[i];
			continue;
		}
		char c = p[++i];
		uint32_t cp;
		int d = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
		if (d) {
			if (hex_escape(p + i + 1, n - i - 1, d, &cp) != 0)
				return lex_error(x, line, col, "bad \\%c escape in a string", c);
			m += put_utf8(o + m, cp);
			i += (size_t)d;
			continue;
		}
		if (c >= '0' && c <= '7') {
			cp = 0;
			for (int k = 0; k < 3 && i < n && p[i] >= '0' && p[i] <= '7'; k++, i++)
				cp = cp * 8 + (uint32_t)(p[i] - '0');
			i--;
			m += put_utf8(o + m, cp);
			continue;
		}
		static const char from[] = "ntr\\'\"abfv\n", to[] = "\n\t\r\\'\"\a\b\f\v";
		const char *f = c ? strchr(from, c) : NULL;
		if (f == NULL) {
			o[m++] = '\\';
			o[m++] = c;
		} else if (*f != '\n') { /* a backslash-newline is a continuation: nothing */
			o[m++] = to[f - from];
		}
	}
	o[m] = '\0';
	t->s = o;
	t->n = m;
	return 0;
}

static int lex_string(lexer *x)
{
	int line = x->line, col = x->col;
	char q = x->src[x->pos];
	size_t i = x->pos + 1;
	while (i < x->n && x->src[i] != q) {
		if (x->src[i] == '\\' && i + 1 < x->n)
			i++;
		i++;
	}
	if (i >= x->n)
		return lex_error(x, line, col, "unterminated string");
	token *t;
	if (push(x, TK_STR, NULL, 0, line, col, &t) != 0 ||
	    decode_string(x, x->src + x->pos + 1, i - x->pos - 1, t, line, col) != 0)
		return -1;
	advance_to(x, i + 1);
	return 0;
}

/* Digits with single underscores between them, from i; returns the end. */
static size_t digits(const char *s, size_t n, size_t i)
{
	size_t j = i;
	while (j < n && (isdigit((unsigned char)s[j]) ||
			 (s[j] == '_' && j > i && j + 1 < n && isdigit((unsigned char)s[j + 1]))))
		j++;
	return j;
}

static int lex_number(lexer *x)
{
	const char *s = x->src;
	size_t i = x->pos, j = digits(s, x->n, i), k = j;
	int is_float = 0;
	if (k + 1 < x->n && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
		k = digits(s, x->n, k + 1);
		is_float = 1;
	}
	if (k < x->n && (s[k] == 'e' || s[k] == 'E')) {
		size_t e = k + 1;
		if (e < x->n && (s[e] == '+' || s[e] == '-'))
			e++;
		if (e < x->n && isdigit((unsigned char)s[e])) {
			k = digits(s, x->n, e);
			is_float = 1;
		}
	}
	char buf[128];
	size_t m = 0;
	for (size_t p = i; p < k && m + 1 < sizeof buf; p++)
		if (s[p] != '_')
			buf[m++] = s[p];
	buf[m] = '\0';
	token *t;
	if (push(x, is_float ? TK_FLOAT : TK_INT, s + i, k - i, x->line, x->col, &t) != 0)
		return -1;
	if (is_float) {
		t->f = strtod(buf, NULL);
	} else {
		unsigned long long v = strtoull(buf, NULL, 10);
		if (m > 18 || v > INT64_MAX)
			return lex_error(x, x->line, x->col, "integer %s is too large", buf);
		t->i = (int64_t)v;
	}
	advance_to(x, k);
	return 0;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/* The tokens of one {{ }} or {% %} tag from pos (after its opening and
 * modifier) to its end; the end token pushed.  Brackets must balance before
 * an end marker counts, as in jinja2. */
static int lex_tag(lexer *x, int block, int *end_mod)
{
	int depth = 0;
	for (;;) {
		size_t ws = jinja_py_lstrip_len(x->src + x->pos, x->n - x->pos);
		advance_to(x, x->pos + ws);
		if (x->pos >= x->n)
			return lex_error(x, x->line, x->col, "unexpected end of template inside %s",
					 block ? "{% %}" : "{{ }}");
		const char *p = x->src + x->pos;
		size_t left = x->n - x->pos;
		const char *close = block ? "%}" : "}}";
		if (depth == 0) {
			int mod = (p[0] == '-' || (block && p[0] == '+')) && left >= 3 &&
					  memcmp(p + 1, close, 2) == 0 ? p[0] : 0;
			if (mod || (left >= 2 && memcmp(p, close, 2) == 0)) {
				if (push(x, block ? TK_BLOCK_END : TK_VAR_END, p, 2, x->line, x->col, NULL))
					return -1;
				advance_to(x, x->pos + (mod ? 3 : 2));
				*end_mod = mod;
				return 0;
			}
		}
		if (p[0] == '\'' || p[0] == '"') {
			if (lex_string(x) != 0)
				return -1;
			continue;
		}
		if (isdigit((unsigned char)p[0])) {
			if (lex_number(x) != 0)
				return -1;
			continue;
		}
		if (isalpha((unsigned char)p[0]) || p[0] == '_') {
			size_t k = 1;
			while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_'))
				k++;
			if (push(x, TK_NAME, p, k, x->line, x->col, NULL) != 0)
				return -1;
			advance_to(x, x->pos + k);
			continue;
		}
		size_t k = 0;
		for (size_t o = 0; o < sizeof ops2 / sizeof *ops2; o++)
			if (left >= 2 && memcmp(p, ops2[o], 2) == 0)
				k = 2;
		if (k == 0 && strchr(ops1, p[0]) != NULL && p[0] != '\0')
			k = 1;
		if (k == 0)
			return lex_error(x, x->line, x->col, "unexpected character '%c'", p[0]);
		if (k == 1 && strchr("([{", p[0]))
			depth++;
		if (k == 1 && strchr(")]}", p[0]) && depth > 0)
			depth--;
		if (push(x, TK_OP, p, k, x->line, x->col, NULL) != 0)
			return -1;
		advance_to(x, x->pos + k);
	}
}

/* After a tag: its end modifier's whitespace, or trim_blocks' one newline
 * (blocks and comments). */
static void after_tag(lexer *x, int mod, int trims, int *line_starting)
{
	size_t start = x->pos;
	if (mod == '-')
		advance_to(x, x->pos + jinja_py_lstrip_len(x->src + x->pos, x->n - x->pos));
	else if (mod != '+' && trims && x->pos < x->n && x->src[x->pos] == '\n')
		advance_to(x, x->pos + 1);
	/* jinja2: line_starting when the tag's match ends with a newline */
	*line_starting = x->pos > start && x->src[x->pos - 1] == '\n';
}

/* The text before a tag, as the tag's start modifier and lstrip_blocks cut it. */
static int emit_text(lexer *x, size_t end, int kind, int mod, int line_starting)
{
	const char *p = x->src + x->pos;
	size_t n = end - x->pos;
	if (mod == '-') {
		n = jinja_py_rstrip_len(p, n);
	} else if (mod != '+' && kind != '{') {
		size_t l = n;
		while (l > 0 && p[l - 1] != '\n')
			l--;
		if ((l > 0 || line_starting) && l < n && jinja_py_lstrip_len(p + l, n - l) == n - l)
			n = l;
	}
	if (n > 0 && push(x, TK_TEXT, p, n, x->line, x->col, NULL) != 0)
		return -1;
	return 0;
}

static int lex_comment(lexer *x, int *line_starting)
{
	int line = x->line, col = x->col;
	const char *e = NULL;
	for (size_t i = x->pos; i + 1 < x->n; i++)
		if (x->src[i] == '#' && x->src[i + 1] == '}') {
			e = x->src + i;
			break;
		}
	if (e == NULL)
		return lex_error(x, line, col, "unterminated comment");
	int mod = e > x->src + x->pos && (e[-1] == '-' || e[-1] == '+') ? e[-1] : 0;
	advance_to(x, (size_t)(e - x->src) + 2);
	after_tag(x, mod, 1, line_starting);
	return 0;
}

static int lex_all(lexer *x)
{
	int line_starting = 1;
	while (x->pos < x->n) {
		const char *p = x->src + x->pos, *tag = NULL;
		for (size_t i = 0; i + 1 < x->n - x->pos; i++)
			if (p[i] == '{' && (p[i + 1] == '{' || p[i + 1] == '%' || p[i + 1] == '#')) {
				tag = p + i;
				break;
			}
		if (tag == NULL)
			return push(x, TK_TEXT, p, x->n - x->pos, x->line, x->col, NULL);
		size_t at = (size_t)(tag - x->src);
		int kind = tag[1];
		int mod = at + 2 < x->n && (tag[2] == '-' || tag[2] == '+') ? tag[2] : 0;
		if (emit_text(x, at, kind, mod, line_starting) != 0)
			return -1;
		advance_to(x, at);
		int line = x->line, col = x->col;
		advance_to(x, at + 2 + (mod != 0));
		if (kind == '#') {
			if (lex_comment(x, &line_starting) != 0)
				return -1;
			continue;
		}
		if (push(x, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tag, 2, line, col, NULL))
			return -1;
		int end_mod = 0;
		if (lex_tag(x, kind == '%', &end_mod) != 0)
			return -1;
		after_tag(x, end_mod, kind == '%', &line_starting);
	}
	return 0;
}

/* ---- the parser */

typedef struct parser {
	jarena *a;
	token *t;
	size_t i, n;
	int loops;   /* enclosing for loops, for break / continue */
	int depth;   /* nesting, bounded */
	titan_err *err;
} parser;

static token *cur(parser *p)
{
	return &p->t[p->i];
}

#define perr(p, t, ...) jinja_error((p)->err, (t)->line, (t)->col, __VA_ARGS__)

static int is_op(const token *t, const char *op)
{
	return t->k == TK_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

static int is_name(const token *t, const char *name)
{
	return t->k == TK_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static const char *describe(const token *t, char *buf, size_t cap)
{
	switch (t->k) {
	case TK_EOF: return "end of template";
	case TK_VAR_END: return "'}}'";
	case TK_BLOCK_END: return "'%}'";
	case TK_STR: return "a string";
	case TK_TEXT: return "text";
	default:
		snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
		return buf;
	}
}

static int expect_op(parser *p, const char *op)
{
	char b[64];
	if (!is_op(cur(p), op))
		return perr(p, cur(p), "expected '%s', found %s", op, describe(cur(p), b, sizeof b));
	p->i++;
	return 0;
}

static char *dup_tok(parser *p, const token *t)
{
	char *s = jarena_alloc(p->a, t->n + 1);
	if (s)
		memcpy(s, t->s, t->n);
	return s;
}

static jexpr *node(parser *p, jexpr_kind k, const token *at)
{
	jexpr *e = jarena_alloc(p->a, sizeof *e);
	if (e == NULL) {
		err_set(p->err, "chat template: out of memory");
		return NULL;
	}
	e->k = k;
	e->line = at->line;
	e->col = at->col;
	return e;
}

/* A growable array of pointers in the arena (copied on growth; the arena
 * keeps the old copies, which is fine for templates of kilobytes). */
static int grow(parser *p, void ***v, int n, int *cap)
{
	if (n < *cap)
		return 0;
	int c = *cap ? 2 * *cap : 4;
	void **w = jarena_alloc(p->a, (size_t)c * sizeof *w);
	if (w == NULL)
		return err_set(p->err, "chat template: out of memory");
	if (n)
		memcpy(w, *v, (size_t)n * sizeof *w);
	*v = w;
	*cap = c;
	return 0;
}

static jexpr *parse_expr(parser *p);
static jexpr *parse_or(parser *p);
static jexpr *parse_unary(parser *p, int with_filter);
static jexpr *parse_primary(parser *p);
static jexpr *parse_postfix(parser *p, jexpr *e);

static int enter(parser *p)
{
	if (++p->depth > JINJA_MAX_DEPTH)
		return perr(p, cur(p), "nested more than %d deep", JINJA_MAX_DEPTH);
	return 0;
}

/* (args, kw=args) after '(' */
static int parse_args(parser *p, jexpr *e)
{
	int cap = 0;
	if (expect_op(p, "(") != 0)
		return -1;
	while (!is_op(cur(p), ")")) {
		if (e->n_args > 0 && expect_op(p, ",") != 0)
			return -1;
		if (is_op(cur(p), ")"))
			break;
		const char *kw = NULL;
		if (cur(p)->k == TK_NAME && is_op(&p->t[p->i + 1], "=")) {
			kw = dup_tok(p, cur(p));
			p->i += 2;
		}
		jexpr *a = parse_expr(p);
		if (a == NULL)
			return -1;
		int c2 = cap;
		if (grow(p, (void ***)&e->args, e->n_args, &cap) != 0 ||
		    grow(p, (void ***)&e->kw, e->n_args, &c2) != 0)
			return -1;
		e->args[e->n_args] = a;
		e->kw[e->n_args++] = kw;
	}
	p->i++;
	return 0;
}

/* [a], [a:b], [a:b:c] after the object */
static jexpr *parse_subscript(parser *p, jexpr *obj)
{
	token *at = cur(p);
	p->i++;
	jexpr *parts[3] = {NULL, NULL, NULL};
	int k = 0, slice = 0;
	for (;;) {
		if (!is_op(cur(p), ":") && !is_op(cur(p), "]") &&
		    (parts[k] = parse_expr(p)) == NULL)
			return NULL;
		if (is_op(cur(p), ":") && k < 2) {
			slice = 1;
			k++;
			p->i++;
			continue;
		}
		break;
	}
	if (expect_op(p, "]") != 0)
		return NULL;
	if (!slice && parts[0] == NULL) {
		perr(p, at, "empty subscript");
		return NULL;
	}
	jexpr *e = node(p, slice ? E_SLICE : E_ITEM, at);
	if (e) {
		e->a = obj;
		e->b = parts[0];
		e->c = parts[1];
		e->d = parts[2];
	}
	return e;
}

static jexpr *parse_postfix(parser *p, jexpr *e)
{
	while (e) {
		token *t = cur(p);
		if (is_op(t, ".")) {
			p->i++;
			char b[64];
			if (cur(p)->k != TK_NAME) {
				perr(p, cur(p), "expected an attribute name after '.', found %s",
				     describe(cur(p), b, sizeof b));
				return NULL;
			}
			jexpr *n = node(p, E_ATTR, t);
			if (n == NULL || (n->name = dup_tok(p, cur(p))) == NULL)
				return NULL;
			p->i++;
			n->a = e;
			e = n;
		} else if (is_op(t, "[")) {
			e = parse_subscript(p, e);
		} else if (is_op(t, "(")) {
			jexpr *n = node(p, E_CALL, t);
			if (n == NULL)
				return NULL;
			n->a = e;
			if (parse_args(p, n) != 0)
				return NULL;
			e = n;
		} else {
			break;
		}
	}
	return e;
}

static int starts_primary(const token *t)
{
	if (t->k == TK_STR || t->k == TK_INT || t->k == TK_FLOAT)
		return 1;
	if (t->k == TK_NAME)
		return !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and") &&
		       !is_name(t, "is") && !is_name(t, "if") && !is_name(t, "in") &&
		       !is_name(t, "not");
	return is_op(t, "[") || is_op(t, "{");
}

/* | filter(args) and is [not] test(args), then calls, after a unary */
static jexpr *parse_filters(parser *p, jexpr *e)
{
	while (e) {
		token *t = cur(p);
		int filter = is_op(t, "|"), test = is_name(t, "is");
		if (!filter && !test) {
			if (is_op(t, "(")) {
				e = parse_postfix(p, e);
				continue;
			}
			break;
		}
		p->i++;
		jexpr *n = node(p, filter ? E_FILTER : E_TEST, t);
		if (n == NULL)
			return NULL;
		if (test && is_name(cur(p), "not")) {
			n->negate = 1;
			p->i++;
		}
		char b[64];
		if (cur(p)->k != TK_NAME) {
			perr(p, cur(p), "expected a %s name, found %s", filter ? "filter" : "test",
			     describe(cur(p), b, sizeof b));
			return NULL;
		}
		if ((n->name = dup_tok(p, cur(p))) == NULL)
			return NULL;
		p->i++;
		n->a = e;
		if (is_op(cur(p), "(")) {
			if (parse_args(p, n) != 0)
				return NULL;
		} else if (test && starts_primary(cur(p))) {
			/* jinja2: a test takes one argument without parentheses */
			jexpr *arg = parse_postfix(p, parse_primary(p));
			if (arg == NULL)
				return NULL;
			n->args = jarena_alloc(p->a, sizeof *n->args);
			n->kw = jarena_alloc(p->a, sizeof *n->kw);
			if (n->args == NULL || n->kw == NULL)
				return NULL;
			n->args[0] = arg;
			n->n_args = 1;
		}
		e = n;
	}
	return e;
}

/* [a, b], {k: v}, (a) or (a, b), after the opening bracket's token */
static jexpr *parse_seq(parser *p, token *at, const char *close, int dict)
{
	jexpr *e = node(p, dict ? E_DICT : E_LIST, at);
	if (e == NULL)
		return NULL;
	int cap = 0, vcap = 0, tuple = !strcmp(close, ")") ? 0 : 1;
	while (!is_op(cur(p), close)) {
		if (e->n_items > 0) {
			if (expect_op(p, ",") != 0)
				return NULL;
			tuple = 1;
			if (is_op(cur(p), close))
				break;
		}
		jexpr *k = parse_expr(p);
		if (k == NULL || grow(p, (void ***)&e->items, e->n_items, &cap) != 0)
			return NULL;
		if (dict) {
			jexpr *v;
			if (expect_op(p, ":") != 0 || (v = parse_expr(p)) == NULL ||
			    grow(p, (void ***)&e->vals, e->n_items, &vcap) != 0)
				return NULL;
			e->vals[e->n_items] = v;
		}
		e->items[e->n_items++] = k;
	}
	p->i++;
	if (!tuple && e->n_items == 1) /* (a): just a */
		return e->items[0];
	e->tuple = !strcmp(close, ")");
	return e;
}

static jexpr *parse_primary(parser *p)
{
	token *t = cur(p);
	char b[64];
	if (enter(p) != 0)
		return NULL;
	jexpr *e = NULL;
	if (t->k == TK_NAME) {
		static const char *const lits[] = {"true", "True", "false", "False", "none", "None"};
		int lit = -1;
		for (int k = 0; k < 6; k++)
			if (is_name(t, lits[k]))
				lit = k;
		p->i++;
		if ((e = node(p, lit >= 0 ? E_LIT : E_NAME, t)) == NULL)
			return NULL;
		if (lit >= 0)
			e->lit = lit < 4 ? (jv){.k = JV_BOOL, .u.b = lit < 2} : (jv){.k = JV_NONE};
		else if ((e->name = dup_tok(p, t)) == NULL)
			return NULL;
	} else if (t->k == TK_STR) {
		/* adjacent strings concatenate */
		size_t n = 0, j = p->i;
		for (; j < p->n && p->t[j].k == TK_STR; j++)
			n += p->t[j].n;
		char *s = jarena_alloc(p->a, n + 1);
		if (s == NULL || (e = node(p, E_LIT, t)) == NULL)
			return NULL;
		n = 0;
		for (; p->i < j; p->i++) {
			memcpy(s + n, p->t[p->i].s, p->t[p->i].n);
			n += p->t[p->i].n;
		}
		e->lit = (jv){.k = JV_STR, .u.str = {s, n}};
	} else if (t->k == TK_INT || t->k == TK_FLOAT) {
		p->i++;
		if ((e = node(p, E_LIT, t)) == NULL)
			return NULL;
		e->lit = t->k == TK_INT ? jv_int(t->i) : (jv){.k = JV_FLOAT, .u.f = t->f};
	} else if (is_op(t, "(") || is_op(t, "[") || is_op(t, "{")) {
		p->i++;
		e = parse_seq(p, t, is_op(t, "(") ? ")" : is_op(t, "[") ? "]" : "}", is_op(t, "{"));
	} else {
		perr(p, t, "expected an expression, found %s", describe(t, b, sizeof b));
	}
	p->depth--;
	return parse_postfix(p, e);
}

static jexpr *parse_unary(parser *p, int with_filter)
{
	token *t = cur(p);
	jexpr *e;
	if (enter(p) != 0)
		return NULL;
	if (is_op(t, "-") || is_op(t, "+")) {
		p->i++;
		jexpr *x = parse_unary(p, 0);
		if (x == NULL || (e = node(p, is_op(t, "-") ? E_NEG : E_POS, t)) == NULL)
			return NULL;
		e->a = x;
	} else {
		e = parse_primary(p);
	}
	p->depth--;
	return with_filter ? parse_filters(p, e) : e;
}

static jexpr *binary(parser *p, const token *at, const char *op, jexpr *l, jexpr *r)
{
	if (l == NULL || r == NULL)
		return NULL;
	jexpr *e = node(p, E_BIN, at);
	if (e) {
		e->op = op;
		e->a = l;
		e->b = r;
	}
	return e;
}

static jexpr *parse_pow(parser *p)
{
	jexpr *e = parse_unary(p, 1);
	while (e && is_op(cur(p), "**")) {
		token *t = cur(p);
		p->i++;
		e = binary(p, t, "**", e, parse_unary(p, 1));
	}
	return e;
}

static jexpr *parse_math2(parser *p)
{
	jexpr *e = parse_pow(p);
	static const char *const ops[] = {"*", "/", "//", "%"};
	for (;;) {
		int k = -1;
		for (int j = 0; j < 4; j++)
			if (is_op(cur(p), ops[j]))
				k = j;
		if (e == NULL || k < 0)
			return e;
		token *t = cur(p);
		p->i++;
		e = binary(p, t, ops[k], e, parse_pow(p));
	}
}

static jexpr *parse_concat(parser *p)
{
	jexpr *e = parse_math2(p);
	while (e && is_op(cur(p), "~")) {
		token *t = cur(p);
		p->i++;
		e = binary(p, t, "~", e, parse_math2(p));
	}
	return e;
}

static jexpr *parse_math1(parser *p)
{
	jexpr *e = parse_concat(p);
	while (e && (is_op(cur(p), "+") || is_op(cur(p), "-"))) {
		token *t = cur(p);
		p->i++;
		e = binary(p, t, is_op(t, "+") ? "+" : "-", e, parse_concat(p));
	}
	return e;
}

static const char *cmp_op(parser *p)
{
	static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">"};
	for (int j = 0; j < 6; j++)
		if (is_op(cur(p), ops[j])) {
			p->i++;
			return ops[j];
		}
	if (is_name(cur(p), "in")) {
		p->i++;
		return "in";
	}
	if (is_name(cur(p), "not") && is_name(&p->t[p->i + 1], "in")) {
		p->i += 2;
		return "notin";
	}
	return NULL;
}

static jexpr *parse_compare(parser *p)
{
	token *t = cur(p);
	jexpr *first = parse_math1(p);
	const char *op;
	if (first == NULL || (op = cmp_op(p)) == NULL)
		return first;
	jexpr *e = node(p, E_CMP, t);
	int cap = 0, ocap = 0;
	if (e == NULL || grow(p, (void ***)&e->items, 0, &cap) != 0)
		return NULL;
	e->items[e->n_items++] = first;
	do {
		jexpr *r = parse_math1(p);
		if (r == NULL || grow(p, (void ***)&e->items, e->n_items, &cap) != 0 ||
		    grow(p, (void ***)&e->cmp_ops, e->n_items - 1, &ocap) != 0)
			return NULL;
		e->cmp_ops[e->n_items - 1] = op;
		e->items[e->n_items++] = r;
	} while ((op = cmp_op(p)) != NULL);
	return e;
}

static jexpr *parse_not(parser *p)
{
	token *t = cur(p);
	if (!is_name(t, "not"))
		return parse_compare(p);
	p->i++;
	if (enter(p) != 0)
		return NULL;
	jexpr *x = parse_not(p), *e = x ? node(p, E_NOT, t) : NULL;
	p->depth--;
	if (e)
		e->a = x;
	return e;
}

/* next (word next)*: left-associative and / or */
static jexpr *parse_logic(parser *p, const char *word, jexpr_kind k, jexpr *(*next)(parser *))
{
	jexpr *e = next(p);
	while (e && is_name(cur(p), word)) {
		token *t = cur(p);
		p->i++;
		jexpr *r = next(p), *n = r ? node(p, k, t) : NULL;
		if (n == NULL)
			return NULL;
		n->a = e;
		n->b = r;
		e = n;
	}
	return e;
}

static jexpr *parse_and(parser *p)
{
	return parse_logic(p, "and", E_AND, parse_not);
}

static jexpr *parse_or(parser *p)
{
	return parse_logic(p, "or", E_OR, parse_and);
}

/* a if cond [else b] */
static jexpr *parse_expr(parser *p)
{
	if (enter(p) != 0)
		return NULL;
	jexpr *e = parse_or(p);
	while (e && is_name(cur(p), "if")) {
		token *t = cur(p);
		p->i++;
		jexpr *c = parse_or(p), *n = c ? node(p, E_COND, t) : NULL;
		if (n == NULL)
			return NULL;
		n->a = e;
		n->b = c;
		if (is_name(cur(p), "else")) {
			p->i++;
			if ((n->c = parse_expr(p)) == NULL)
				return NULL;
		}
		e = n;
	}
	p->depth--;
	return e;
}

/* ---- statements */

static jstmt *stmt(parser *p, jstmt_kind k, const token *at)
{
	jstmt *s = jarena_alloc(p->a, sizeof *s);
	if (s == NULL) {
		err_set(p->err, "chat template: out of memory");
		return NULL;
	}
	s->k = k;
	s->line = at->line;
	s->col = at->col;
	return s;
}

static int add_stmt(parser *p, jbody *b, int *cap, jstmt *s)
{
	if (s == NULL || grow(p, (void ***)&b->v, b->n, cap) != 0)
		return -1;
	b->v[b->n++] = s;
	return 0;
}

static int expect_block_end(parser *p)
{
	char b[64];
	if (cur(p)->k != TK_BLOCK_END)
		return perr(p, cur(p), "expected '%%}', found %s", describe(cur(p), b, sizeof b));
	p->i++;
	return 0;
}

static int expect_name(parser *p, const char **out)
{
	char b[64];
	if (cur(p)->k != TK_NAME)
		return perr(p, cur(p), "expected a name, found %s", describe(cur(p), b, sizeof b));
	if ((*out = dup_tok(p, cur(p))) == NULL)
		return -1;
	p->i++;
	return 0;
}

static int parse_body(parser *p, jbody *b, const char *const *ends, const char **end,
		      const token *open);

static jstmt *parse_if(parser *p, const token *at)
{
	jstmt *s = stmt(p, S_IF, at);
	const char *end;
	static const char *const ends[] = {"elif", "else", "endif", NULL};
	if (s == NULL || (s->e = parse_expr(p)) == NULL || expect_block_end(p) != 0 ||
	    parse_body(p, &s->body, ends, &end, at) != 0)
		return NULL;
	int cap = 0;
	if (!strcmp(end, "elif")) {
		token *t = &p->t[p->i - 1];
		if (add_stmt(p, &s->orelse, &cap, parse_if(p, t)) != 0)
			return NULL;
	} else if (!strcmp(end, "else")) {
		static const char *const endif[] = {"endif", NULL};
		if (expect_block_end(p) != 0 || parse_body(p, &s->orelse, endif, &end, at) != 0 ||
		    expect_block_end(p) != 0)
			return NULL;
	} else if (expect_block_end(p) != 0) {
		return NULL;
	}
	return s;
}

static jstmt *parse_for(parser *p, const token *at)
{
	jstmt *s = stmt(p, S_FOR, at);
	if (s == NULL || expect_name(p, &s->target[0]) != 0)
		return NULL;
	s->n_target = 1;
	if (is_op(cur(p), ",")) {
		p->i++;
		if (expect_name(p, &s->target[1]) != 0)
			return NULL;
		s->n_target = 2;
	}
	char b[64];
	if (!is_name(cur(p), "in")) {
		perr(p, cur(p), "expected 'in', found %s", describe(cur(p), b, sizeof b));
		return NULL;
	}
	p->i++;
	if ((s->e = parse_or(p)) == NULL)
		return NULL;
	if (is_name(cur(p), "if")) {
		p->i++;
		if ((s->cond = parse_expr(p)) == NULL)
			return NULL;
	}
	if (is_name(cur(p), "recursive")) {
		perr(p, cur(p), "recursive loops are not supported");
		return NULL;
	}
	const char *end;
	static const char *const ends[] = {"else", "endfor", NULL};
	p->loops++;
	int rc = expect_block_end(p) != 0 || parse_body(p, &s->body, ends, &end, at) != 0;
	p->loops--;
	if (rc)
		return NULL;
	if (!strcmp(end, "else")) {
		static const char *const endfor[] = {"endfor", NULL};
		if (expect_block_end(p) != 0 || parse_body(p, &s->orelse, endfor, &end, at) != 0)
			return NULL;
	}
	return expect_block_end(p) == 0 ? s : NULL;
}

static jstmt *parse_set(parser *p, const token *at)
{
	jstmt *s = stmt(p, S_SET, at);
	if (s == NULL || expect_name(p, &s->target[0]) != 0)
		return NULL;
	if (is_op(cur(p), ".")) {
		p->i++;
		if (expect_name(p, &s->attr) != 0)
			return NULL;
	}
	if (!is_op(cur(p), "=")) {
		perr(p, cur(p), is_op(cur(p), ",") ? "{%% set a, b = ... %%} is not supported"
						    : "block {%% set %%} ... {%% endset %%} is not supported");
		return NULL;
	}
	p->i++;
	if ((s->e = parse_expr(p)) == NULL || expect_block_end(p) != 0)
		return NULL;
	return s;
}

/* One {% ... %} statement after its BLOCK_BEGIN; *end set (and the name
 * consumed, its BLOCK_END not) when it is one of ends. */
static jstmt *parse_block(parser *p, const char *const *ends, const char **end, int *is_end)
{
	token *t = cur(p);
	char b[64];
	*is_end = 0;
	if (t->k != TK_NAME) {
		perr(p, t, "expected a tag name, found %s", describe(t, b, sizeof b));
		return NULL;
	}
	for (int k = 0; ends && ends[k]; k++)
		if (is_name(t, ends[k])) {
			*end = ends[k];
			*is_end = 1;
			p->i++;
			return NULL;
		}
	p->i++;
	if (is_name(t, "if"))
		return parse_if(p, t);
	if (is_name(t, "for"))
		return parse_for(p, t);
	if (is_name(t, "set"))
		return parse_set(p, t);
	if (is_name(t, "break") || is_name(t, "continue")) {
		if (p->loops == 0) {
			perr(p, t, "'%.*s' outside a for loop", (int)t->n, t->s);
			return NULL;
		}
		jstmt *s = stmt(p, is_name(t, "break") ? S_BREAK : S_CONTINUE, t);
		return s && expect_block_end(p) == 0 ? s : NULL;
	}
	static const char *const known[] = {"elif", "else", "endif", "endfor", NULL};
	for (int k = 0; known[k]; k++)
		if (is_name(t, known[k])) {
			perr(p, t, "unexpected '%s'", known[k]);
			return NULL;
		}
	perr(p, t, "tag '%.*s' is not supported", (int)(t->n > 40 ? 40 : t->n), t->s);
	return NULL;
}

/* Statements up to one of ends (NULL: the end of the template); open is the
 * tag that began the block, for the message when its end is missing. */
static int parse_body(parser *p, jbody *b, const char *const *ends, const char **end,
		      const token *open)
{
	int cap = 0;
	if (enter(p) != 0)
		return -1;
	for (;;) {
		token *t = cur(p);
		jstmt *s = NULL;
		if (t->k == TK_EOF) {
			if (ends == NULL)
				break;
			int last = 0;
			while (ends[last + 1])
				last++;
			return perr(p, open, "missing {%% %s %%} for this block", ends[last]);
		}
		if (t->k == TK_TEXT) {
			if ((s = stmt(p, S_TEXT, t)) == NULL)
				return -1;
			s->text = t->s;
			s->len = t->n;
			p->i++;
		} else if (t->k == TK_VAR_BEGIN) {
			p->i++;
			if ((s = stmt(p, S_OUT, t)) == NULL || (s->e = parse_expr(p)) == NULL)
				return -1;
			char d[64];
			if (cur(p)->k != TK_VAR_END)
				return perr(p, cur(p), "expected '}}', found %s", describe(cur(p), d, sizeof d));
			p->i++;
		} else if (t->k == TK_BLOCK_BEGIN) {
			p->i++;
			int is_end;
			s = parse_block(p, ends, end, &is_end);
			if (is_end)
				break;
			if (s == NULL)
				return -1;
		} else {
			char d[64];
			return perr(p, t, "unexpected %s", describe(t, d, sizeof d));
		}
		if (add_stmt(p, b, &cap, s) != 0)
			return -1;
	}
	p->depth--;
	return 0;
}

/* jinja2 reads the source with its newlines as \n and, keep_trailing_newline
 * being off, without one final newline. */
static char *normalise(jarena *a, const char *src, size_t n, size_t *out_n)
{
	char *s = jarena_alloc(a, n + 1);
	if (s == NULL)
		return NULL;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '\r') {
			s[m++] = '\n';
			if (i + 1 < n && src[i + 1] == '\n')
				i++;
		} else {
			s[m++] = src[i];
		}
	}
	if (m > 0 && s[m - 1] == '\n')
		m--;
	s[m] = '\0';
	*out_n = m;
	return s;
}

jinja_tpl *jinja_parse(const char *src, size_t n, titan_err *err)
{
	jinja_tpl *t = calloc(1, sizeof *t);
	if (t == NULL) {
		err_set(err, "chat template: out of memory");
		return NULL;
	}
	lexer x = {.a = &t->arena, .line = 1, .col = 1, .err = err};
	x.src = normalise(&t->arena, src, n, &x.n);
	int rc = x.src == NULL ? err_set(err, "chat template: out of memory") : lex_all(&x);
	if (rc == 0)
		rc = push(&x, TK_EOF, "", 0, x.line, x.col, NULL);
	if (rc == 0) {
		parser p = {.a = &t->arena, .t = x.t, .n = x.nt, .err = err};
		rc = parse_body(&p, &t->body, NULL, NULL, NULL);
	}
	free(x.t);
	if (rc != 0) {
		jinja_free(t);
		return NULL;
	}
	return t;
}

void jinja_free(jinja_tpl *t)
{
	if (t == NULL)
		return;
	jarena_free(&t->arena);
	free(t);
}
