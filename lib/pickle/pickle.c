/* pickle.c: the restricted unpickler (see pickle.h).  Opcodes follow Python's
 * Lib/pickletools.py descriptions; only value-building opcodes are accepted. */
#include "pickle/pickle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PK_MAX_STACK   (1u << 20)
#define PK_MAX_MEMO    (1u << 22)
#define PK_MAX_NODES   (1u << 24)

/* Arena: a list of blocks; every node and string is carved from it. */
struct pk_block {
	struct pk_block *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

struct pk_arena {
	struct pk_block *head;
	size_t nodes;
};

pk_arena *pk_arena_new(void)
{
	return calloc(1, sizeof(pk_arena));
}

void pk_free(pk_arena *a)
{
	if (!a)
		return;
	struct pk_block *b = a->head;
	while (b) {
		struct pk_block *n = b->next;
		free(b);
		b = n;
	}
	free(a);
}

static void *arena_alloc(pk_arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct pk_block *b = a->head;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		b = malloc(sizeof *b + cap);
		if (!b)
			return NULL;
		b->cap = cap;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

pk_val *pk_new(pk_arena *a, pk_kind k)
{
	if (a->nodes >= PK_MAX_NODES)
		return NULL;
	pk_val *v = arena_alloc(a, sizeof *v);
	if (!v)
		return NULL;
	memset(v, 0, sizeof *v);
	v->kind = k;
	a->nodes++;
	return v;
}

static char *arena_strndup(pk_arena *a, const void *p, size_t n)
{
	char *s = arena_alloc(a, n + 1);
	if (!s)
		return NULL;
	if (n)
		memcpy(s, p, n);
	s[n] = 0;
	return s;
}

pk_val *pk_int(pk_arena *a, int64_t x)
{
	pk_val *v = pk_new(a, PK_INT);
	if (v)
		v->i = x;
	return v;
}

pk_val *pk_float(pk_arena *a, double x)
{
	pk_val *v = pk_new(a, PK_FLOAT);
	if (v)
		v->f = x;
	return v;
}

pk_val *pk_bool(pk_arena *a, int x)
{
	pk_val *v = pk_new(a, PK_BOOL);
	if (v)
		v->i = x != 0;
	return v;
}

static pk_val *mk_str(pk_arena *a, pk_kind k, const void *p, size_t n)
{
	pk_val *v = pk_new(a, k);
	if (!v)
		return NULL;
	v->s = arena_strndup(a, p, n);
	v->len = n;
	return v->s ? v : NULL;
}

pk_val *pk_str(pk_arena *a, const char *s)
{
	return mk_str(a, PK_STR, s, strlen(s));
}

pk_val *pk_bytes(pk_arena *a, const void *p, size_t n)
{
	return mk_str(a, PK_BYTES, p, n);
}

pk_val *pk_global(pk_arena *a, const char *module, const char *name)
{
	pk_val *v = mk_str(a, PK_GLOBAL, module, strlen(module));
	if (!v)
		return NULL;
	v->name = arena_strndup(a, name, strlen(name));
	return v->name ? v : NULL;
}

int pk_append(pk_arena *a, pk_val *seq, pk_val *v)
{
	size_t need = seq->kind == PK_DICT ? 2 * (seq->n + 1) : seq->n + 1;
	if (need > seq->cap) {
		size_t cap = seq->cap ? seq->cap * 2 : 4;
		while (cap < need)
			cap *= 2;
		pk_val **items = arena_alloc(a, cap * sizeof *items);
		if (!items)
			return -1;
		size_t have = seq->kind == PK_DICT ? 2 * seq->n : seq->n;
		if (have)
			memcpy(items, seq->items, have * sizeof *items);
		seq->items = items;
		seq->cap = cap;
	}
	seq->items[seq->n++] = v;
	return 0;
}

static int val_equal_key(const pk_val *a, const pk_val *b)
{
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case PK_STR:
	case PK_BYTES:
		return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
	case PK_INT:
	case PK_BOOL:
		return a->i == b->i;
	case PK_NONE:
		return 1;
	default:
		return a == b;
	}
}

int pk_dict_set(pk_arena *a, pk_val *d, pk_val *key, pk_val *v)
{
	/* Python dicts keep one value per key; linear search is fine for the small
	 * dicts checkpoints hold, and big ones (state_dict_metadata) have unique keys
	 * so only the last-set check matters for speed: search from the end. */
	for (size_t i = d->n; i-- > 0 && d->n - i <= 64;) {
		if (val_equal_key(d->items[2 * i], key)) {
			d->items[2 * i + 1] = v;
			return 0;
		}
	}
	size_t need = 2 * (d->n + 1);
	if (need > d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		while (cap < need)
			cap *= 2;
		pk_val **items = arena_alloc(a, cap * sizeof *items);
		if (!items)
			return -1;
		if (d->n)
			memcpy(items, d->items, 2 * d->n * sizeof *items);
		d->items = items;
		d->cap = cap;
	}
	d->items[2 * d->n] = key;
	d->items[2 * d->n + 1] = v;
	d->n++;
	return 0;
}

pk_val *pk_dict_get(const pk_val *d, const char *key)
{
	if (!d || d->kind != PK_DICT)
		return NULL;
	size_t kl = strlen(key);
	for (size_t i = 0; i < d->n; i++) {
		const pk_val *k = d->items[2 * i];
		if (k->kind == PK_STR && k->len == kl && memcmp(k->s, key, kl) == 0)
			return d->items[2 * i + 1];
	}
	return NULL;
}

int pk_is_global(const pk_val *v, const char *module, const char *name)
{
	return v && v->kind == PK_GLOBAL && strcmp(v->s, module) == 0 && strcmp(v->name, name) == 0;
}

int pk_obj_is(const pk_val *v, const char *module, const char *name)
{
	return v && v->kind == PK_OBJ && pk_is_global(v->cls, module, name);
}

/* ---- the virtual machine ---- */

typedef struct vm {
	const uint8_t *p;
	size_t n, pos;
	pk_arena *a;
	const pk_allow *allow;
	titan_err *err;
	pk_val **stack;
	size_t sp, scap;
	size_t *marks;
	size_t nmarks, mcap;
	pk_val **memo;
	size_t memo_cap, memo_len;
	int op;
	size_t op_pos;
} vm;

static int vm_fail(vm *m, const char *fmt, const char *what)
{
	char msg[512];
	snprintf(msg, sizeof msg, fmt, what);
	return err_set(m->err, "pickle: offset %zu, opcode 0x%02x: %s", m->op_pos, m->op, msg);
}

static int need(vm *m, size_t k)
{
	if (m->n - m->pos < k)
		return vm_fail(m, "%s", "truncated stream");
	return 0;
}

static uint64_t rd_le(const uint8_t *p, int k)
{
	uint64_t v = 0;
	for (int i = k - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int push(vm *m, pk_val *v)
{
	if (!v)
		return vm_fail(m, "%s", "out of memory or too many nodes");
	if (m->sp == m->scap) {
		if (m->scap >= PK_MAX_STACK)
			return vm_fail(m, "%s", "stack too deep");
		size_t cap = m->scap ? m->scap * 2 : 64;
		pk_val **s = realloc(m->stack, cap * sizeof *s);
		if (!s)
			return vm_fail(m, "%s", "out of memory");
		m->stack = s;
		m->scap = cap;
	}
	m->stack[m->sp++] = v;
	return 0;
}

static pk_val *pop(vm *m)
{
	size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
	if (m->sp <= floor) {
		vm_fail(m, "%s", "stack underflow");
		return NULL;
	}
	return m->stack[--m->sp];
}

static pk_val *top(vm *m)
{
	size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
	if (m->sp <= floor) {
		vm_fail(m, "%s", "stack underflow");
		return NULL;
	}
	return m->stack[m->sp - 1];
}

static int pop_mark(vm *m, size_t *at)
{
	if (!m->nmarks)
		return vm_fail(m, "%s", "no MARK on the stack");
	*at = m->marks[--m->nmarks];
	return 0;
}

static int memo_put(vm *m, uint64_t idx, pk_val *v)
{
	if (!v)
		return -1;
	if (idx >= PK_MAX_MEMO)
		return vm_fail(m, "%s", "memo index too large");
	if (idx >= m->memo_cap) {
		size_t cap = m->memo_cap ? m->memo_cap : 64;
		while (cap <= idx)
			cap *= 2;
		pk_val **mm = realloc(m->memo, cap * sizeof *mm);
		if (!mm)
			return vm_fail(m, "%s", "out of memory");
		memset(mm + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *mm);
		m->memo = mm;
		m->memo_cap = cap;
	}
	if (!m->memo[idx])
		m->memo_len++;
	m->memo[idx] = v;
	return 0;
}

static int memo_get(vm *m, uint64_t idx)
{
	if (idx >= m->memo_cap || !m->memo[idx])
		return vm_fail(m, "%s", "memo key not defined");
	return push(m, m->memo[idx]);
}

/* MEMOIZE stores at len(memo), the number of keys defined so far. */
static size_t memo_count(vm *m)
{
	return m->memo_len;
}

static int allowed(vm *m, const char *mod, const char *name)
{
	if (!m->allow || !m->allow->globals)
		return 0;
	size_t ml = strlen(mod), nl = strlen(name);
	for (const char *const *g = m->allow->globals; *g; g++) {
		if (strncmp(*g, mod, ml) == 0 && (*g)[ml] == ' ' && strncmp(*g + ml + 1, name, nl) == 0 &&
		    (*g)[ml + 1 + nl] == 0)
			return 1;
	}
	return 0;
}

static int do_global(vm *m, const char *mod, size_t ml, const char *name, size_t nl)
{
	char ms[256], ns[256];
	if (ml >= sizeof ms || nl >= sizeof ns || memchr(mod, 0, ml) || memchr(name, 0, nl))
		return vm_fail(m, "%s", "global name too long or malformed");
	memcpy(ms, mod, ml);
	ms[ml] = 0;
	memcpy(ns, name, nl);
	ns[nl] = 0;
	if (!allowed(m, ms, ns)) {
		char what[600];
		snprintf(what, sizeof what, "%s.%s", ms, ns);
		return vm_fail(m, "global %s is not allowed (refusing to run code from a pickle)", what);
	}
	return push(m, pk_global(m->a, ms, ns));
}

static pk_val *mk_tuple_from(vm *m, size_t from)
{
	pk_val *t = pk_new(m->a, PK_TUPLE);
	if (!t)
		return NULL;
	for (size_t i = from; i < m->sp; i++)
		if (pk_append(m->a, t, m->stack[i]) < 0)
			return NULL;
	m->sp = from;
	return t;
}

/* REDUCE / NEWOBJ: record the call; fold the two reductions every torch pickle
 * holds (OrderedDict(), _codecs.encode(text, "latin1")). */
static int do_call(vm *m, int newobj)
{
	pk_val *args = pop(m), *cls = args ? pop(m) : NULL;
	if (!cls)
		return -1;
	if (cls->kind != PK_GLOBAL)
		return vm_fail(m, "%s", "callable is not an allowed global");
	if (args->kind != PK_TUPLE)
		return vm_fail(m, "%s", "arguments are not a tuple");
	if (pk_is_global(cls, "collections", "OrderedDict") && args->n == 0)
		return push(m, pk_new(m->a, PK_DICT));
	if (pk_is_global(cls, "_codecs", "encode")) {
		if (args->n != 2 || args->items[0]->kind != PK_STR || args->items[1]->kind != PK_STR ||
		    strcmp(args->items[1]->s, "latin1") != 0)
			return vm_fail(m, "%s", "_codecs.encode needs (str, \"latin1\")");
		/* The text holds code points 0..255 as UTF-8; undo that. */
		const pk_val *t = args->items[0];
		uint8_t *out = arena_alloc(m->a, t->len + 1);
		if (!out)
			return vm_fail(m, "%s", "out of memory");
		size_t k = 0;
		for (size_t i = 0; i < t->len;) {
			uint8_t c = (uint8_t)t->s[i];
			if (c < 0x80) {
				out[k++] = c;
				i++;
			} else if ((c & 0xE0) == 0xC0 && c <= 0xC3 && i + 1 < t->len &&
				   ((uint8_t)t->s[i + 1] & 0xC0) == 0x80) {
				out[k++] = (uint8_t)((c & 0x03) << 6 | ((uint8_t)t->s[i + 1] & 0x3F));
				i += 2;
			} else {
				return vm_fail(m, "%s", "latin1 text has a code point above 255");
			}
		}
		pk_val *b = pk_new(m->a, PK_BYTES);
		if (b) {
			b->s = (char *)out;
			b->len = k;
			out[k] = 0;
		}
		return push(m, b);
	}
	pk_val *o = pk_new(m->a, PK_OBJ);
	if (o) {
		o->cls = cls;
		o->args = args;
		o->newobj = newobj;
	}
	return push(m, o);
}

static int do_build(vm *m)
{
	pk_val *state = pop(m), *obj = state ? top(m) : NULL;
	if (!obj)
		return -1;
	if (obj->kind == PK_OBJ) {
		obj->state = state;
		return 0;
	}
	return vm_fail(m, "%s", "BUILD on something that is not an object");
}

static int do_setitems(vm *m, size_t from)
{
	if (from == 0 || (m->sp - from) % 2)
		return vm_fail(m, "%s", "SETITEMS needs a dict and key/value pairs");
	pk_val *d = m->stack[from - 1];
	if (d->kind != PK_DICT)
		return vm_fail(m, "%s", "SETITEM(S) on something that is not a dict");
	for (size_t i = from; i < m->sp; i += 2)
		if (pk_dict_set(m->a, d, m->stack[i], m->stack[i + 1]) < 0)
			return vm_fail(m, "%s", "out of memory");
	m->sp = from;
	return 0;
}

static int do_appends(vm *m, size_t from)
{
	if (from == 0)
		return vm_fail(m, "%s", "APPENDS without a list");
	pk_val *l = m->stack[from - 1];
	if (l->kind != PK_LIST)
		return vm_fail(m, "%s", "APPEND(S) on something that is not a list");
	for (size_t i = from; i < m->sp; i++)
		if (pk_append(m->a, l, m->stack[i]) < 0)
			return vm_fail(m, "%s", "out of memory");
	m->sp = from;
	return 0;
}

static int push_mark(vm *m)
{
	if (m->nmarks == m->mcap) {
		if (m->mcap >= PK_MAX_STACK)
			return vm_fail(m, "%s", "too many marks");
		size_t cap = m->mcap ? m->mcap * 2 : 16;
		size_t *mk = realloc(m->marks, cap * sizeof *mk);
		if (!mk)
			return vm_fail(m, "%s", "out of memory");
		m->marks = mk;
		m->mcap = cap;
	}
	m->marks[m->nmarks++] = m->sp;
	return 0;
}

/* A text line (protocol 0 opcodes) without its newline. */
static int read_line(vm *m, const char **s, size_t *len)
{
	const uint8_t *nl = memchr(m->p + m->pos, '\n', m->n - m->pos);
	if (!nl)
		return vm_fail(m, "%s", "unterminated line");
	*s = (const char *)m->p + m->pos;
	*len = (size_t)(nl - (m->p + m->pos));
	m->pos += *len + 1;
	return 0;
}

/* The next text line as a C string in buf (protocol 0 arguments); an empty or
 * over-long line fails with `what`. */
static int read_line_buf(vm *m, const char *what, char *buf, size_t size)
{
	const char *s;
	size_t len;
	if (read_line(m, &s, &len))
		return -1;
	if (len == 0 || len >= size)
		return vm_fail(m, "%s", what);
	memcpy(buf, s, len);
	buf[len] = 0;
	return 0;
}

/* The decimal memo index on the line after a text PUT or GET (protocol 0). */
static int read_memo_index(vm *m, const char *what, uint64_t *k)
{
	char buf[24];
	if (read_line_buf(m, what, buf, sizeof buf))
		return -1;
	char *end;
	*k = strtoull(buf, &end, 10);
	if (*end)
		return vm_fail(m, "%s", what);
	return 0;
}

static int push_counted(vm *m, pk_kind k, int lenbytes)
{
	if (need(m, (size_t)lenbytes))
		return -1;
	uint64_t len = rd_le(m->p + m->pos, lenbytes);
	m->pos += (size_t)lenbytes;
	if (len > m->n - m->pos)
		return vm_fail(m, "%s", "string runs past the end");
	pk_val *v = mk_str(m->a, k, m->p + m->pos, (size_t)len);
	m->pos += (size_t)len;
	return push(m, v);
}

static int push_long(vm *m, int lenbytes)
{
	if (need(m, (size_t)lenbytes))
		return -1;
	uint64_t len = rd_le(m->p + m->pos, lenbytes);
	m->pos += (size_t)lenbytes;
	if (len > m->n - m->pos)
		return vm_fail(m, "%s", "integer runs past the end");
	if (len > 8)
		return vm_fail(m, "%s", "integer wider than 64 bits");
	uint64_t u = rd_le(m->p + m->pos, (int)len);
	if (len > 0 && len < 8 && (m->p[m->pos + len - 1] & 0x80))
		u |= ~(uint64_t)0 << (8 * len); /* sign-extend */
	m->pos += (size_t)len;
	return push(m, pk_int(m->a, (int64_t)u));
}

static int text_int(vm *m)
{
	char buf[32];
	if (read_line_buf(m, "bad INT", buf, sizeof buf))
		return -1;
	if (!strcmp(buf, "00") || !strcmp(buf, "01"))
		return push(m, pk_bool(m->a, buf[1] == '1'));
	char *end;
	long long v = strtoll(buf, &end, 10);
	if (*end && !(*end == 'L' && end[1] == 0))
		return vm_fail(m, "%s", "bad INT");
	return push(m, pk_int(m->a, v));
}

static size_t put_utf8(uint8_t *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (uint8_t)(0xC0 | c >> 6);
		o[1] = (uint8_t)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (uint8_t)(0xE0 | c >> 12);
		o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
		o[2] = (uint8_t)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (uint8_t)(0xF0 | c >> 18);
	o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
	o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
	o[3] = (uint8_t)(0x80 | (c & 0x3F));
	return 4;
}

/* UNICODE: a line in raw-unicode-escape: latin-1 bytes, \uXXXX, \UXXXXXXXX. */
static int text_unicode(vm *m)
{
	const char *s;
	size_t len;
	if (read_line(m, &s, &len))
		return -1;
	uint8_t *o = arena_alloc(m->a, 4 * len + 1);
	if (!o)
		return vm_fail(m, "%s", "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < len;) {
		int w = 0;
		if (s[i] == '\\' && i + 1 < len && (s[i + 1] == 'u' || s[i + 1] == 'U'))
			w = s[i + 1] == 'u' ? 4 : 8;
		if (w && i + 2 + (size_t)w <= len) {
			uint32_t c = 0;
			for (int j = 0; j < w; j++) {
				char h = s[i + 2 + (size_t)j];
				int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
					: h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
				if (d < 0)
					return vm_fail(m, "%s", "bad escape in UNICODE");
				c = c << 4 | (uint32_t)d;
			}
			if (c > 0x10FFFF)
				return vm_fail(m, "%s", "code point out of range");
			k += put_utf8(o + k, c);
			i += 2 + (size_t)w;
		} else {
			k += put_utf8(o + k, (uint8_t)s[i]);
			i++;
		}
	}
	pk_val *v = pk_new(m->a, PK_STR);
	if (v) {
		v->s = (char *)o;
		o[k] = 0;
		v->len = k;
	}
	return push(m, v);
}

static int step(vm *m, int *done)
{
	if (need(m, 1))
		return -1;
	m->op_pos = m->pos;
	m->op = m->p[m->pos++];
	size_t at = 0;
	pk_val *v, *w;
	switch (m->op) {
	case 0x80: /* PROTO */
		if (need(m, 1))
			return -1;
		if (m->p[m->pos] > 5)
			return vm_fail(m, "%s", "unsupported protocol");
		m->pos++;
		return 0;
	case 0x95: /* FRAME: a length hint only */
		if (need(m, 8))
			return -1;
		m->pos += 8;
		return 0;
	case '.': /* STOP */
		*done = 1;
		return 0;
	case '(': return push_mark(m);
	case '0': return pop(m) ? 0 : -1; /* POP */
	case '1': /* POP_MARK */
		if (pop_mark(m, &at))
			return -1;
		m->sp = at;
		return 0;
	case '2': /* DUP */
		return (v = top(m)) ? push(m, v) : -1;
	case 'N': return push(m, pk_new(m->a, PK_NONE));
	case 0x88: return push(m, pk_bool(m->a, 1));
	case 0x89: return push(m, pk_bool(m->a, 0));
	case 'I': return text_int(m);
	case 'L': { /* LONG, text */
		char buf[32];
		if (read_line_buf(m, "bad LONG", buf, sizeof buf))
			return -1;
		char *end;
		long long x = strtoll(buf, &end, 10);
		if (*end && !(*end == 'L' && end[1] == 0))
			return vm_fail(m, "%s", "bad LONG");
		return push(m, pk_int(m->a, x));
	}
	case 'J': /* BININT */
		if (need(m, 4))
			return -1;
		v = pk_int(m->a, (int32_t)rd_le(m->p + m->pos, 4));
		m->pos += 4;
		return push(m, v);
	case 'K':
		if (need(m, 1))
			return -1;
		return push(m, pk_int(m->a, m->p[m->pos++]));
	case 'M':
		if (need(m, 2))
			return -1;
		v = pk_int(m->a, (int64_t)rd_le(m->p + m->pos, 2));
		m->pos += 2;
		return push(m, v);
	case 0x8a: return push_long(m, 1); /* LONG1 */
	case 0x8b: return push_long(m, 4); /* LONG4 */
	case 'G': { /* BINFLOAT, big-endian */
		if (need(m, 8))
			return -1;
		uint64_t u = 0;
		for (int i = 0; i < 8; i++)
			u = u << 8 | m->p[m->pos + (size_t)i];
		m->pos += 8;
		double d;
		memcpy(&d, &u, sizeof d);
		return push(m, pk_float(m->a, d));
	}
	case 'F': { /* FLOAT, text */
		char buf[64];
		if (read_line_buf(m, "bad FLOAT", buf, sizeof buf))
			return -1;
		char *end;
		double d = strtod(buf, &end);
		if (*end)
			return vm_fail(m, "%s", "bad FLOAT");
		return push(m, pk_float(m->a, d));
	}
	case 'V': return text_unicode(m);                 /* UNICODE, protocol 0 */
	case 'X': return push_counted(m, PK_STR, 4);      /* BINUNICODE */
	case 0x8c: return push_counted(m, PK_STR, 1);     /* SHORT_BINUNICODE */
	case 0x8d: return push_counted(m, PK_STR, 8);     /* BINUNICODE8 */
	case 'T': return push_counted(m, PK_STR, 4);      /* BINSTRING (py2 str) */
	case 'U': return push_counted(m, PK_STR, 1);      /* SHORT_BINSTRING */
	case 'B': return push_counted(m, PK_BYTES, 4);    /* BINBYTES */
	case 'C': return push_counted(m, PK_BYTES, 1);    /* SHORT_BINBYTES */
	case 0x8e: return push_counted(m, PK_BYTES, 8);   /* BINBYTES8 */
	case 0x96: return push_counted(m, PK_BYTES, 8);   /* BYTEARRAY8 */
	case ')': return push(m, pk_new(m->a, PK_TUPLE));
	case ']': return push(m, pk_new(m->a, PK_LIST));
	case '}': return push(m, pk_new(m->a, PK_DICT));
	case 't': /* TUPLE */
		if (pop_mark(m, &at))
			return -1;
		return push(m, mk_tuple_from(m, at));
	case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
		size_t k = (size_t)(m->op - 0x84);
		size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
		if (m->sp < floor + k)
			return vm_fail(m, "%s", "stack underflow");
		return push(m, mk_tuple_from(m, m->sp - k));
	}
	case 'l': /* LIST */
		if (pop_mark(m, &at))
			return -1;
		v = mk_tuple_from(m, at);
		if (v)
			v->kind = PK_LIST;
		return push(m, v);
	case 'd': /* DICT */
		if (pop_mark(m, &at))
			return -1;
		if ((m->sp - at) % 2)
			return vm_fail(m, "%s", "DICT with an odd number of items");
		v = pk_new(m->a, PK_DICT);
		if (!v)
			return push(m, v);
		for (size_t i = at; i < m->sp; i += 2)
			if (pk_dict_set(m->a, v, m->stack[i], m->stack[i + 1]) < 0)
				return vm_fail(m, "%s", "out of memory");
		m->sp = at;
		return push(m, v);
	case 'a': /* APPEND */
		if (!(v = pop(m)) || !(w = top(m)))
			return -1;
		if (w->kind != PK_LIST)
			return vm_fail(m, "%s", "APPEND on something that is not a list");
		return pk_append(m->a, w, v) ? vm_fail(m, "%s", "out of memory") : 0;
	case 'e': /* APPENDS */
		if (pop_mark(m, &at))
			return -1;
		return do_appends(m, at);
	case 's': /* SETITEM */
		if (m->sp < 3 + (m->nmarks ? m->marks[m->nmarks - 1] : 0))
			return vm_fail(m, "%s", "stack underflow");
		return do_setitems(m, m->sp - 2);
	case 'u': /* SETITEMS */
		if (pop_mark(m, &at))
			return -1;
		return do_setitems(m, at);
	case 'c': { /* GLOBAL "module\nname\n" */
		const char *mod, *name;
		size_t ml, nl;
		if (read_line(m, &mod, &ml) || read_line(m, &name, &nl))
			return -1;
		return do_global(m, mod, ml, name, nl);
	}
	case 0x93: /* STACK_GLOBAL */
		if (!(w = pop(m)) || !(v = pop(m)))
			return -1;
		if (v->kind != PK_STR || w->kind != PK_STR)
			return vm_fail(m, "%s", "STACK_GLOBAL needs two strings");
		return do_global(m, v->s, v->len, w->s, w->len);
	case 'R': return do_call(m, 0);    /* REDUCE */
	case 0x81: return do_call(m, 1);   /* NEWOBJ */
	case 'b': return do_build(m);
	case 'Q': /* BINPERSID */
		if (!(v = pop(m)))
			return -1;
		w = pk_new(m->a, PK_PERSID);
		if (w)
			w->args = v;
		return push(m, w);
	case 'p': { /* PUT, text */
		uint64_t k;
		if (read_memo_index(m, "bad PUT", &k))
			return -1;
		return (v = top(m)) ? memo_put(m, k, v) : -1;
	}
	case 'q':
		if (need(m, 1) || !(v = top(m)))
			return -1;
		return memo_put(m, m->p[m->pos++], v);
	case 'r':
		if (need(m, 4) || !(v = top(m)))
			return -1;
		m->pos += 4;
		return memo_put(m, rd_le(m->p + m->pos - 4, 4), v);
	case 0x94: /* MEMOIZE */
		return (v = top(m)) ? memo_put(m, memo_count(m), v) : -1;
	case 'g': { /* GET, text */
		uint64_t k;
		if (read_memo_index(m, "bad GET", &k))
			return -1;
		return memo_get(m, k);
	}
	case 'h':
		if (need(m, 1))
			return -1;
		return memo_get(m, m->p[m->pos++]);
	case 'j':
		if (need(m, 4))
			return -1;
		m->pos += 4;
		return memo_get(m, rd_le(m->p + m->pos - 4, 4));
	default:
		return vm_fail(m, "%s", "opcode not supported by the restricted unpickler");
	}
}

int pk_load(const uint8_t *buf, size_t n, const pk_allow *allow, pk_val **out,
	    pk_arena **arena, titan_err *err)
{
	*out = NULL;
	*arena = pk_arena_new();
	if (!*arena)
		return err_set(err, "pickle: out of memory");
	vm m = {.p = buf, .n = n, .a = *arena, .allow = allow, .err = err};
	int done = 0, rc = 0;
	while (!done && rc == 0)
		rc = step(&m, &done);
	if (rc == 0) {
		if (m.sp != 1 || m.nmarks)
			rc = err_set(err, "pickle: STOP with %zu values on the stack (expected 1)", m.sp);
		else
			*out = m.stack[0];
	}
	free(m.stack);
	free(m.marks);
	free(m.memo);
	return rc;
}

/* ---- repr ---- */

typedef struct rbuf {
	char *p;
	size_t cap, n;
} rbuf;

static void rput(rbuf *r, const char *s)
{
	size_t l = strlen(s);
	if (r->n + 1 >= r->cap)
		return;
	size_t k = r->cap - 1 - r->n;
	if (l > k)
		l = k;
	memcpy(r->p + r->n, s, l);
	r->n += l;
	r->p[r->n] = 0;
}

static void repr_rec(rbuf *r, const pk_val *v, int depth)
{
	char tmp[64];
	if (r->n + 1 >= r->cap)
		return; /* full: shared nodes must not make the walk exponential */
	if (depth > PK_MAX_DEPTH) {
		rput(r, "...");
		return;
	}
	switch (v->kind) {
	case PK_NONE: rput(r, "None"); break;
	case PK_BOOL: rput(r, v->i ? "True" : "False"); break;
	case PK_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); rput(r, tmp); break;
	case PK_FLOAT: snprintf(tmp, sizeof tmp, "%.17g", v->f); rput(r, tmp); break;
	case PK_STR: rput(r, "'"); rput(r, v->s); rput(r, "'"); break;
	case PK_BYTES: snprintf(tmp, sizeof tmp, "b<%zu bytes>", v->len); rput(r, tmp); break;
	case PK_TUPLE:
	case PK_LIST:
		rput(r, v->kind == PK_TUPLE ? "(" : "[");
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				rput(r, ", ");
			repr_rec(r, v->items[i], depth + 1);
		}
		if (v->kind == PK_TUPLE && v->n == 1)
			rput(r, ",");
		rput(r, v->kind == PK_TUPLE ? ")" : "]");
		break;
	case PK_DICT:
		rput(r, "{");
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				rput(r, ", ");
			repr_rec(r, v->items[2 * i], depth + 1);
			rput(r, ": ");
			repr_rec(r, v->items[2 * i + 1], depth + 1);
		}
		rput(r, "}");
		break;
	case PK_GLOBAL: rput(r, v->s); rput(r, "."); rput(r, v->name); break;
	case PK_OBJ:
		repr_rec(r, v->cls, depth + 1);
		repr_rec(r, v->args, depth + 1);
		if (v->state) {
			rput(r, "<state ");
			repr_rec(r, v->state, depth + 1);
			rput(r, ">");
		}
		break;
	case PK_PERSID: rput(r, "persid"); repr_rec(r, v->args, depth + 1); break;
	}
}

void pk_repr(const pk_val *v, char *buf, size_t cap)
{
	if (!cap)
		return;
	buf[0] = 0;
	rbuf r = {buf, cap, 0};
	repr_rec(&r, v, 0);
}

/* ---- writer ---- */

static void bput(pk_buf *b, const void *p, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 256;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void bop(pk_buf *b, int op)
{
	uint8_t c = (uint8_t)op;
	bput(b, &c, 1);
}

static void ble(pk_buf *b, uint64_t v, int k)
{
	uint8_t t[8];
	for (int i = 0; i < k; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	bput(b, t, (size_t)k);
}

static void w_int(pk_buf *b, int64_t v)
{
	if (v >= 0 && v < 256) {
		bop(b, 'K');
		ble(b, (uint64_t)v, 1);
	} else if (v >= 0 && v < 65536) {
		bop(b, 'M');
		ble(b, (uint64_t)v, 2);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		bop(b, 'J');
		ble(b, (uint64_t)(uint32_t)(int32_t)v, 4);
	} else {
		/* LONG1: minimal two's complement, as Python's encode_long. */
		int n = 8;
		while (n > 1) {
			int64_t t = v >> (8 * (n - 1) - 1);
			if (t != 0 && t != -1)
				break;
			n--;
		}
		bop(b, 0x8a);
		ble(b, (uint64_t)n, 1);
		ble(b, (uint64_t)v, n);
	}
}

static void w_str(pk_buf *b, const char *s, size_t n, int protocol)
{
	if (protocol >= 4 && n < 256) {
		bop(b, 0x8c);
		ble(b, n, 1);
	} else {
		bop(b, 'X');
		ble(b, n, 4);
	}
	bput(b, s, n);
}


static int w_bytes(pk_buf *b, const pk_val *v, int protocol)
{
	if (protocol >= 3) {
		if (v->len < 256) {
			bop(b, 'C');
			ble(b, v->len, 1);
		} else {
			bop(b, 'B');
			ble(b, v->len, 4);
		}
		bput(b, v->s, v->len);
		return 0;
	}
	/* Protocol 2 has no bytes: Python writes _codecs.encode(text, "latin1"),
	 * the text being the bytes as code points 0..255 (UTF-8 encoded). */
	bop(b, 'c');
	bput(b, "_codecs\nencode\n", 15);
	size_t n = 0;
	for (size_t i = 0; i < v->len; i++)
		n += (uint8_t)v->s[i] < 0x80 ? 1 : 2;
	bop(b, 'X');
	ble(b, n, 4);
	for (size_t i = 0; i < v->len; i++) {
		uint8_t c = (uint8_t)v->s[i];
		if (c < 0x80) {
			bput(b, &c, 1);
		} else {
			uint8_t u[2] = {(uint8_t)(0xC0 | c >> 6), (uint8_t)(0x80 | (c & 0x3F))};
			bput(b, u, 2);
		}
	}
	w_str(b, "latin1", 6, protocol);
	bop(b, 0x86);
	bop(b, 'R');
	return 0;
}

static int w_global(pk_buf *b, const pk_val *g, int protocol)
{
	if (protocol >= 4) {
		w_str(b, g->s, strlen(g->s), protocol);
		w_str(b, g->name, strlen(g->name), protocol);
		bop(b, 0x93);
	} else {
		bop(b, 'c');
		bput(b, g->s, strlen(g->s));
		bop(b, '\n');
		bput(b, g->name, strlen(g->name));
		bop(b, '\n');
	}
	return 0;
}

/* Values are written as trees, so a node shared n times is written n times:
 * the node budget keeps a small DAG from exploding into a huge stream. */
#define PK_MAX_WRITE_NODES (1u << 24)

static int w_val(pk_buf *b, const pk_val *v, int protocol, int depth, titan_err *err)
{
	static _Thread_local size_t budget;
	if (depth == 0)
		budget = PK_MAX_WRITE_NODES;
	if (budget == 0 || --budget == 0)
		return err_set(err, "pickle: value has more than %u nodes (shared subtrees?)", PK_MAX_WRITE_NODES);
	if (depth > PK_MAX_DEPTH)
		return err_set(err, "pickle: value nested deeper than %d", PK_MAX_DEPTH);
	switch (v->kind) {
	case PK_NONE: bop(b, 'N'); return 0;
	case PK_BOOL: bop(b, v->i ? 0x88 : 0x89); return 0;
	case PK_INT: w_int(b, v->i); return 0;
	case PK_FLOAT: {
		uint64_t u;
		memcpy(&u, &v->f, sizeof u);
		bop(b, 'G');
		for (int i = 7; i >= 0; i--)
			bop(b, (int)(uint8_t)(u >> (8 * i)));
		return 0;
	}
	case PK_STR: w_str(b, v->s, v->len, protocol); return 0;
	case PK_BYTES: return w_bytes(b, v, protocol);
	case PK_TUPLE:
		if (v->n == 0) {
			bop(b, ')');
			return 0;
		}
		if (v->n > 3)
			bop(b, '(');
		for (size_t i = 0; i < v->n; i++)
			if (w_val(b, v->items[i], protocol, depth + 1, err))
				return -1;
		bop(b, v->n <= 3 ? 0x84 + (int)v->n : 't');
		return 0;
	case PK_LIST:
		bop(b, ']');
		if (v->n) {
			bop(b, '(');
			for (size_t i = 0; i < v->n; i++)
				if (w_val(b, v->items[i], protocol, depth + 1, err))
					return -1;
			bop(b, 'e');
		}
		return 0;
	case PK_DICT:
		bop(b, '}');
		/* SETITEMS in batches of 1000, as Python does. */
		for (size_t i = 0; i < v->n; i += 1000) {
			size_t end = i + 1000 < v->n ? i + 1000 : v->n;
			bop(b, '(');
			for (size_t k = i; k < end; k++) {
				if (w_val(b, v->items[2 * k], protocol, depth + 1, err) ||
				    w_val(b, v->items[2 * k + 1], protocol, depth + 1, err))
					return -1;
			}
			bop(b, 'u');
		}
		return 0;
	case PK_GLOBAL: return w_global(b, v, protocol);
	case PK_OBJ:
		if (!v->cls || v->cls->kind != PK_GLOBAL || !v->args || v->args->kind != PK_TUPLE)
			return err_set(err, "pickle: object without a class or argument tuple");
		w_global(b, v->cls, protocol);
		if (w_val(b, v->args, protocol, depth + 1, err))
			return -1;
		bop(b, v->newobj ? 0x81 : 'R');
		if (v->state) {
			if (w_val(b, v->state, protocol, depth + 1, err))
				return -1;
			bop(b, 'b');
		}
		return 0;
	case PK_PERSID:
		if (w_val(b, v->args, protocol, depth + 1, err))
			return -1;
		bop(b, 'Q');
		return 0;
	}
	return err_set(err, "pickle: unknown value kind %d", (int)v->kind);
}

int pk_dump(pk_buf *b, const pk_val *v, int protocol, titan_err *err)
{
	if (protocol < 2 || protocol > 4)
		return err_set(err, "pickle: protocol %d not supported for writing", protocol);
	bop(b, 0x80);
	bop(b, protocol);
	if (w_val(b, v, protocol, 0, err))
		return -1;
	bop(b, '.');
	if (b->oom)
		return err_set(err, "pickle: out of memory");
	return 0;
}
