/* tok_norm.c: HF tokenizers' normalizers beyond NFC: Precompiled (the
 * SentencePiece charsmap T5 and ALBERT carry), Replace, Lowercase, Strip.
 *
 * Precompiled, as HF runs it (the spm_precompiled crate), not as SentencePiece
 * does: the text is cut into extended grapheme clusters; a cluster shorter
 * than 6 bytes is looked up whole, and when the charsmap's trie has an entry
 * for any prefix of it the cluster becomes the shortest such prefix's
 * replacement (what follows that prefix in the cluster is dropped: "Ａ" +
 * U+0301 gives "A", "\r\n" gives " ").  Otherwise each character is looked up
 * alone the same way and kept when the trie has nothing for it.
 *
 * The charsmap is SentencePiece's: a u32 (little-endian) byte length of a
 * darts-clone double array of u32 units, the units, then the replacement
 * strings, each ended by NUL.  A unit: bits 0-7 (with bit 31) the label, bit 8
 * "has a leaf", bits 10-31 an offset shifted left by 8 when bit 9 is set; a
 * leaf unit's low 31 bits are an offset into the strings.  Checked whole at
 * load (charsmap_check), so that lookups stay inside the arrays. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_int.h"
#include "unicode/unicode.h"

struct tok_charsmap {
	uint32_t *unit; /* (n_units) the double array */
	size_t n_units;
	char *str;      /* (str_len) replacement strings, NUL-separated */
	size_t str_len;
};

static bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7fffffffu; }
static uint32_t unit_label(uint32_t u) { return u & 0x800000ffu; }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

/* The string offset of the first (shortest) trie entry that is a prefix of
 * key, or -1.  A NUL byte ends the key, as in SentencePiece. */
static int64_t charsmap_first(const tok_charsmap *c, const uint8_t *key, size_t n)
{
	size_t pos = unit_offset(c->unit[0]);
	for (size_t i = 0; i < n && key[i]; i++) {
		pos ^= key[i];
		if (pos >= c->n_units) /* checked at load; kept for safety */
			return -1;
		uint32_t u = c->unit[pos];
		if (unit_label(u) != key[i])
			return -1;
		pos ^= unit_offset(u);
		if (pos >= c->n_units)
			return -1;
		if (unit_has_leaf(u))
			return unit_value(c->unit[pos]);
	}
	return -1;
}

static bool utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += uni_utf8_decode(s + i, n - i, &cp);
		if (cp & UNI_BAD)
			return false;
	}
	return true;
}

/* Every node the trie can reach: each of its 255 children's slots inside the
 * array (HF indexes them unchecked) and each leaf's string offset at a
 * character boundary of the strings.  darts-clone shares equal subtrees, so
 * nodes are reached more than once: each base is checked once. */
static int charsmap_check(const tok_charsmap *c, titan_err *err)
{
	size_t *stack = malloc(c->n_units * sizeof *stack), top = 0;
	uint8_t *seen = calloc(c->n_units, 1);
	int rc = 0;
	if (!stack || !seen) {
		free(stack);
		free(seen);
		return err_set(err, "out of memory");
	}
	size_t root = unit_offset(c->unit[0]);
	if (root >= c->n_units)
		rc = err_set(err, "precompiled_charsmap: the root points past the array");
	else
		stack[top++] = root, seen[root] = 1;
	while (top && !rc) {
		size_t base = stack[--top];
		for (unsigned b = 1; b < 256 && !rc; b++) {
			size_t pos = base ^ b;
			if (pos >= c->n_units) {
				rc = err_set(err, "precompiled_charsmap: a trie node's slots run past its "
					     "%zu units", c->n_units);
				break;
			}
			uint32_t u = c->unit[pos];
			if (unit_label(u) != b)
				continue;
			size_t child = pos ^ unit_offset(u);
			if (child >= c->n_units) {
				rc = err_set(err, "precompiled_charsmap: unit %zu points past the array", pos);
				break;
			}
			uint32_t v = unit_value(c->unit[child]);
			if (unit_has_leaf(u) &&
			    (v > c->str_len || (v < c->str_len && (c->str[v] & 0xc0) == 0x80)))
				rc = err_set(err, "precompiled_charsmap: unit %zu's string offset %u is not "
					     "the start of a character of the %zu-byte strings", pos, v,
					     c->str_len);
			else if (!seen[child])
				stack[top++] = child, seen[child] = 1;
		}
	}
	free(stack);
	free(seen);
	return rc;
}

void tok_charsmap_free(tok_charsmap *c)
{
	if (!c)
		return;
	free(c->unit);
	free(c->str);
	free(c);
}

int tok_charsmap_load(tok_charsmap **out, const char *b64, size_t n, titan_err *err)
{
	*out = NULL;
	if (n % 4)
		return err_set(err, "precompiled_charsmap: %zu base64 characters, not a multiple of 4", n);
	uint8_t *raw = malloc(n / 4 * 3 + 1);
	tok_charsmap *c = calloc(1, sizeof *c);
	if (!raw || !c) {
		free(raw);
		free(c);
		return err_set(err, "out of memory");
	}
	long len = tok_b64decode((const uint8_t *)b64, n, raw, n / 4 * 3 + 1);
	uint32_t trie_len = 0;
	if (len >= 4)
		memcpy(&trie_len, raw, 4); /* little-endian hosts only (see titan-formats(5)) */
	int rc = -1;
	if (len < 4)
		err_set(err, "precompiled_charsmap: not base64 of at least 4 bytes");
	else if (trie_len % 4 || trie_len == 0 || (size_t)len - 4 < trie_len)
		err_set(err, "precompiled_charsmap: trie of %u bytes in %ld bytes (a non-zero "
			"multiple of 4 that fits)", trie_len, len - 4);
	else if (!utf8_ok(raw + 4 + trie_len, (size_t)len - 4 - trie_len))
		err_set(err, "precompiled_charsmap: its strings are not UTF-8");
	else {
		c->n_units = trie_len / 4;
		c->str_len = (size_t)len - 4 - trie_len;
		c->unit = malloc(trie_len);
		c->str = malloc(c->str_len + 1);
		if (!c->unit || !c->str) {
			err_set(err, "out of memory");
		} else {
			memcpy(c->unit, raw + 4, trie_len);
			memcpy(c->str, raw + 4 + trie_len, c->str_len);
			c->str[c->str_len] = 0;
			rc = charsmap_check(c, err);
		}
	}
	free(raw);
	if (rc) {
		tok_charsmap_free(c);
		return -1;
	}
	*out = c;
	return 0;
}

/* The replacement at string offset v: up to its NUL or the end. */
static int append_repl(const tok_charsmap *c, int64_t v, tok_buf *o, titan_err *err)
{
	const char *s = c->str + v;
	return tok_buf_append(o, s, strnlen(s, c->str_len - (size_t)v), err);
}

static int precompiled(const tok_charsmap *c, const uint8_t *s, size_t n, tok_buf *o,
		       titan_err *err)
{
	for (size_t i = 0; i < n;) {
		size_t end = uni_grapheme_end(s, n, i);
		int64_t v = end - i < 6 ? charsmap_first(c, s + i, end - i) : -1;
		if (v >= 0) {
			if (append_repl(c, v, o, err))
				return -1;
			i = end;
			continue;
		}
		while (i < end) {
			uint32_t cp;
			size_t l = uni_utf8_decode(s + i, n - i, &cp);
			v = charsmap_first(c, s + i, l);
			if (v >= 0 ? append_repl(c, v, o, err) : tok_buf_append(o, s + i, l, err))
				return -1;
			i += l;
		}
	}
	return 0;
}

typedef struct replace_ctx {
	const tok_norm *step;
	tok_buf *o;
	titan_err *err;
} replace_ctx;

static int replace_piece(void *ctx, const uint8_t *p, size_t n, bool is_match)
{
	replace_ctx *r = ctx;
	if (is_match)
		return tok_buf_append(r->o, r->step->content, r->step->content_len, r->err);
	return tok_buf_append(r->o, p, n, r->err);
}

static int lowercase(const uint8_t *s, size_t n, tok_buf *o, titan_err *err)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp, lo[2];
		size_t l = uni_utf8_decode(s + i, n - i, &cp);
		if (cp & UNI_BAD) {
			if (tok_buf_append(o, s + i, l, err))
				return -1;
		} else {
			int k = uni_lower(cp, lo);
			for (int j = 0; j < k; j++) {
				uint8_t u[4];
				if (tok_buf_append(o, u, uni_utf8_encode(lo[j], u), err))
					return -1;
			}
		}
		i += l;
	}
	return 0;
}

static bool is_ws_at(const uint8_t *s, size_t n, size_t i, size_t *len)
{
	uint32_t cp;
	*len = uni_utf8_decode(s + i, n - i, &cp);
	return !(cp & UNI_BAD) && (uni_props(cp) & UNI_PROP_WS);
}

/* Strip: White_Space (Rust's char::is_whitespace) off either end. */
static int strip(const tok_norm *st, const uint8_t *s, size_t n, tok_buf *o, titan_err *err)
{
	size_t a = 0, b = n, l;
	while (st->left && a < n && is_ws_at(s, n, a, &l))
		a += l;
	while (st->right && b > a) {
		size_t k = b - 1;
		while (k > a && (s[k] & 0xc0) == 0x80 && b - k < 4)
			k--;
		if (!is_ws_at(s, b, k, &l) || k + l != b)
			break;
		b = k;
	}
	return tok_buf_append(o, s + a, b - a, err);
}

static int norm_step(const tok_norm *st, tok_pcre *pc, const uint8_t *s, size_t n, tok_buf *o,
		     titan_err *err)
{
	switch (st->kind) {
	case TOK_NORM_NFC: {
		uint8_t *p;
		size_t m;
		if (uni_nfc(s, n, &p, &m, err))
			return -1;
		int rc = tok_buf_append(o, p, m, err);
		free(p);
		return rc;
	}
	case TOK_NORM_PRECOMPILED: return precompiled(st->charsmap, s, n, o, err);
	case TOK_NORM_REPLACE: {
		replace_ctx r = {st, o, err};
		return tok_split_run_marked(st->re, pc, s, n, replace_piece, &r, err);
	}
	case TOK_NORM_LOWERCASE: return lowercase(s, n, o, err);
	default: return strip(st, s, n, o, err);
	}
}

int tok_normalize(const tok *t, tok_pcre *pc, const uint8_t *s, size_t n, uint8_t **out,
		  size_t *out_n, titan_err *err)
{
	tok_buf a = {0}, b = {0};
	if (tok_buf_append(&a, s, n, err))
		return -1;
	for (int k = 0; k < t->n_norms; k++) {
		b.n = 0;
		if (norm_step(&t->norm[k], pc, a.p, a.n, &b, err)) {
			tok_buf_free(&a);
			tok_buf_free(&b);
			return -1;
		}
		tok_buf tmp = a;
		a = b, b = tmp;
	}
	tok_buf_free(&b);
	*out = a.p;
	*out_n = a.n;
	return 0;
}
