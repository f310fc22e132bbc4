/* tok_regex.c: a tokenizer.json regex, in the Oniguruma syntax HF tokenizers
 * runs it with, rewritten as a PCRE2 pattern that means the same on Unicode
 * 16.0.0.
 *
 * PCRE2 has Unicode tables of its own (14.0 in Debian bookworm), so every
 * construct whose meaning depends on Unicode data is replaced by explicit
 * code point ranges computed from titan's tables: \p{..} / \P{..} for general
 * categories, \d \s \w and their negations, \b \B, the POSIX classes that
 * general categories define, and bracket classes (their unions, nested
 * classes, && intersections and negation are computed here).  Where the two
 * syntaxes differ, Oniguruma's meaning is written out: ^ and $ are line
 * anchors, . stops only at \n, (?m) is PCRE2's (?s), \h is a hex digit, \v a
 * vertical tab, \uHHHH a code point, {,n} is {0,n}.  Case: under (?i) a
 * bracket class matches case variants of its members (PCRE2 does that with
 * the explicit ranges, and the case pairs Unicode 14 lacks are added, see
 * uni_fold_new_pairs) while an escape outside brackets does not (wrapped in
 * (?-i:...)), as in Oniguruma.
 *
 * What cannot be made exact with titan's tables is refused with the reason:
 * scripts and binary properties other than White_Space (\p{Greek},
 * \p{Alphabetic}, [[:alpha:]], [[:upper:]]...), \X, (?x), conditionals, the
 * absent operator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_split_int.h"
#include "unicode/unicode.h"

#define CP_MAX 0x10FFFFu

/* A set of code points: ranges [lo, hi], sorted and disjoint once normed. */
typedef struct cpset {
	uint32_t (*r)[2];
	size_t n, cap;
} cpset;

static void set_free(cpset *s)
{
	free(s->r);
	memset(s, 0, sizeof *s);
}

static int set_add(cpset *s, uint32_t lo, uint32_t hi)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		void *r = realloc(s->r, cap * sizeof *s->r);
		if (!r)
			return -1;
		s->r = r, s->cap = cap;
	}
	s->r[s->n][0] = lo;
	s->r[s->n++][1] = hi;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
	return x < y ? -1 : x > y;
}

static void set_norm(cpset *s)
{
	if (!s->n)
		return;
	qsort(s->r, s->n, sizeof *s->r, cmp_range);
	size_t k = 0;
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[k][1] + 1) {
			if (s->r[i][1] > s->r[k][1])
				s->r[k][1] = s->r[i][1];
		} else {
			s->r[++k][0] = s->r[i][0];
			s->r[k][1] = s->r[i][1];
		}
	}
	s->n = k + 1;
}

/* The complement in 0..CP_MAX of a normed set. */
static int set_invert(cpset *s)
{
	cpset o = {0};
	uint32_t next = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->r[i][0] > next && set_add(&o, next, s->r[i][0] - 1))
			goto oom;
		next = s->r[i][1] + 1;
	}
	if (next <= CP_MAX && set_add(&o, next, CP_MAX))
		goto oom;
	set_free(s);
	*s = o;
	return 0;
oom:
	set_free(&o);
	return -1;
}

/* a = a & b, both normed. */
static int set_and(cpset *a, const cpset *b)
{
	cpset o = {0};
	for (size_t i = 0, j = 0; i < a->n && j < b->n;) {
		uint32_t lo = a->r[i][0] > b->r[j][0] ? a->r[i][0] : b->r[j][0];
		uint32_t hi = a->r[i][1] < b->r[j][1] ? a->r[i][1] : b->r[j][1];
		if (lo <= hi && set_add(&o, lo, hi)) {
			set_free(&o);
			return -1;
		}
		if (a->r[i][1] < b->r[j][1])
			i++;
		else
			j++;
	}
	set_free(a);
	*a = o;
	return 0;
}

static int set_union(cpset *a, const cpset *b)
{
	for (size_t i = 0; i < b->n; i++)
		if (set_add(a, b->r[i][0], b->r[i][1]))
			return -1;
	set_norm(a);
	return 0;
}

static bool set_has(const cpset *s, uint32_t cp)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < s->r[mid][0])
			hi = mid;
		else if (cp > s->r[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

static int add_run(void *ctx, uint32_t lo, uint32_t hi)
{
	return set_add(ctx, lo, hi);
}

/* Characters by property: those whose general category is in gc_mask, plus
 * White_Space ones when ws. */
static int set_props(cpset *s, uint32_t gc_mask, bool ws)
{
	return uni_ranges(gc_mask, ws, add_run, s);
}

/* The case variants Unicode 14 lacks, added to a normed set. */
static int set_fold_new(cpset *s)
{
	const uint32_t (*pairs)[2];
	size_t n = uni_fold_new_pairs(&pairs), before = s->n;
	for (size_t i = 0; i < n; i++) {
		bool a = set_has(s, pairs[i][0]), b = set_has(s, pairs[i][1]);
		if ((a && !b && set_add(s, pairs[i][1], pairs[i][1])) ||
		    (b && !a && set_add(s, pairs[i][0], pairs[i][0])))
			return -1;
	}
	if (s->n != before)
		set_norm(s);
	return 0;
}

/* ---- the translator ---- */

enum { MAX_DEPTH = 256 };

typedef struct rx {
	const char *re, *p, *end;
	char *o;
	size_t n, cap;
	bool icase[MAX_DEPTH], dotall[MAX_DEPTH];
	int lvl;
	titan_err *err;
} rx;

static int fail(rx *x, const char *what)
{
	return err_set(x->err, "pre-tokenizer regex at offset %zu: %s", (size_t)(x->p - x->re), what);
}

static int put(rx *x, const char *s, size_t n)
{
	if (x->n + n + 1 > x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 1024;
		while (cap < x->n + n + 1)
			cap *= 2;
		char *o = realloc(x->o, cap);
		if (!o)
			return err_set(x->err, "out of memory");
		x->o = o, x->cap = cap;
	}
	memcpy(x->o + x->n, s, n);
	x->n += n;
	x->o[x->n] = 0;
	return 0;
}

static int puts_(rx *x, const char *s) { return put(x, s, strlen(s)); }

static int put_cp(rx *x, uint32_t cp)
{
	char b[16];
	return put(x, b, (size_t)snprintf(b, sizeof b, "\\x{%X}", cp));
}

/* A set as a PCRE2 class ("[^" when negate); surrogates, which UTF-8 text
 * cannot hold and PCRE2 refuses to name, are left out. */
static int put_set(rx *x, const cpset *s, bool negate)
{
	cpset t = {0};
	for (size_t i = 0; i < s->n; i++) {
		uint32_t lo = s->r[i][0], hi = s->r[i][1];
		int rc = 0;
		if (lo < 0xD800)
			rc = set_add(&t, lo, hi < 0xD800 ? hi : 0xD7FF);
		if (!rc && hi > 0xDFFF)
			rc = set_add(&t, lo > 0xE000 ? lo : 0xE000, hi);
		if (rc) {
			set_free(&t);
			return err_set(x->err, "out of memory");
		}
	}
	int rc;
	if (!t.n)
		rc = puts_(x, negate ? "(?s:.)" : "(?!)");
	else {
		rc = puts_(x, negate ? "[^" : "[");
		for (size_t i = 0; !rc && i < t.n; i++) {
			rc = put_cp(x, t.r[i][0]);
			if (!rc && t.r[i][1] != t.r[i][0])
				rc = puts_(x, "-") || put_cp(x, t.r[i][1]);
		}
		rc = rc || puts_(x, "]");
	}
	set_free(&t);
	return rc;
}

static uint32_t gc_mask(const char *names)
{
	static const char *const gc[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
					 "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
					 "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf",
					 "Cs", "Co", "Cn"};
	uint32_t m = 0;
	for (int i = 0; i < 30; i++)
		if (strstr(names, gc[i]))
			m |= 1u << i;
	return m;
}

/* \w as Oniguruma has it with Unicode 16 (held to HF tokenizers by the
 * tests): Alphabetic, marks, Nd and Pc.  Alphabetic is L, Nl and
 * Other_Alphabetic, whose members outside marks are the circled and squared
 * Latin letters; Oniguruma's table of Latin-1 also counts ² ³ ¹ ¼ ½ ¾. */
static int set_word(cpset *s)
{
	static const uint32_t extra[][2] = {
		{0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x24B6, 0x24E9},
		{0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
	};
	if (set_props(s, UNI_MASK_L | UNI_MASK_M | 1u << UNI_ND | 1u << UNI_NL | 1u << UNI_PC, false))
		return -1;
	for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
		if (set_add(s, extra[i][0], extra[i][1]))
			return -1;
	return 0;
}

/* A property name the way Oniguruma compares them: case, spaces, '-' and '_'
 * ignored.  Returns 0 with the set filled, or -1 with a message. */
static int property(rx *x, const char *name, size_t len, cpset *s)
{
	static const struct {
		const char *name, *gc;
	} gcs[] = {
		{"l", "Lu Ll Lt Lm Lo"}, {"letter", "Lu Ll Lt Lm Lo"}, {"lu", "Lu"},
		{"uppercaseletter", "Lu"}, {"ll", "Ll"}, {"lowercaseletter", "Ll"}, {"lt", "Lt"},
		{"titlecaseletter", "Lt"}, {"lm", "Lm"}, {"modifierletter", "Lm"}, {"lo", "Lo"},
		{"otherletter", "Lo"}, {"lc", "Lu Ll Lt"}, {"casedletter", "Lu Ll Lt"},
		{"m", "Mn Mc Me"}, {"mark", "Mn Mc Me"}, {"combiningmark", "Mn Mc Me"},
		{"mn", "Mn"}, {"nonspacingmark", "Mn"}, {"mc", "Mc"}, {"spacingmark", "Mc"},
		{"me", "Me"}, {"enclosingmark", "Me"}, {"n", "Nd Nl No"}, {"number", "Nd Nl No"},
		{"nd", "Nd"}, {"decimalnumber", "Nd"}, {"digit", "Nd"}, {"nl", "Nl"},
		{"letternumber", "Nl"}, {"no", "No"}, {"othernumber", "No"},
		{"p", "Pc Pd Ps Pe Pi Pf Po"}, {"punctuation", "Pc Pd Ps Pe Pi Pf Po"},
		{"pc", "Pc"}, {"connectorpunctuation", "Pc"}, {"pd", "Pd"}, {"dashpunctuation", "Pd"},
		{"ps", "Ps"}, {"openpunctuation", "Ps"}, {"pe", "Pe"}, {"closepunctuation", "Pe"},
		{"pi", "Pi"}, {"initialpunctuation", "Pi"}, {"pf", "Pf"}, {"finalpunctuation", "Pf"},
		{"po", "Po"}, {"otherpunctuation", "Po"}, {"s", "Sm Sc Sk So"},
		{"symbol", "Sm Sc Sk So"}, {"sm", "Sm"}, {"mathsymbol", "Sm"}, {"sc", "Sc"},
		{"currencysymbol", "Sc"}, {"sk", "Sk"}, {"modifiersymbol", "Sk"}, {"so", "So"},
		{"othersymbol", "So"}, {"z", "Zs Zl Zp"}, {"separator", "Zs Zl Zp"}, {"zs", "Zs"},
		{"spaceseparator", "Zs"}, {"zl", "Zl"}, {"lineseparator", "Zl"}, {"zp", "Zp"},
		{"paragraphseparator", "Zp"}, {"c", "Cc Cf Cs Co Cn"}, {"other", "Cc Cf Cs Co Cn"},
		{"cc", "Cc"}, {"control", "Cc"}, {"cntrl", "Cc"}, {"cf", "Cf"}, {"format", "Cf"},
		{"cs", "Cs"}, {"surrogate", "Cs"}, {"co", "Co"}, {"privateuse", "Co"}, {"cn", "Cn"},
		{"unassigned", "Cn"},
		{"assigned", "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl "
			     "Zp Cc Cf Cs Co"},
	};
	char key[64];
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (c == ' ' || c == '-' || c == '_')
			continue;
		if (k + 1 == sizeof key)
			return fail(x, "property name too long");
		key[k++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	key[k] = 0;
	for (size_t i = 0; i < sizeof gcs / sizeof *gcs; i++)
		if (!strcmp(key, gcs[i].name))
			return set_props(s, gc_mask(gcs[i].gc), false) ? err_set(x->err, "out of memory") : 0;
	int rc = 0;
	if (!strcmp(key, "any"))
		rc = set_add(s, 0, CP_MAX);
	else if (!strcmp(key, "ascii"))
		rc = set_add(s, 0, 0x7F);
	else if (!strcmp(key, "space") || !strcmp(key, "whitespace"))
		rc = set_props(s, 0, true);
	else if (!strcmp(key, "word"))
		rc = set_word(s);
	else if (!strcmp(key, "xdigit") || !strcmp(key, "hexdigit"))
		rc = set_add(s, '0', '9') || set_add(s, 'A', 'F') || set_add(s, 'a', 'f');
	else if (!strcmp(key, "blank"))
		rc = set_props(s, 1u << UNI_ZS, false) || set_add(s, '\t', '\t');
	else if (!strcmp(key, "punct"))
		rc = set_props(s, UNI_MASK_P | UNI_MASK_S, false); /* Oniguruma's: P and S */
	else if (!strcmp(key, "graph") || !strcmp(key, "print")) {
		/* Not white space, control, unassigned or surrogate; print adds Zs. */
		cpset bad = {0};
		rc = set_props(&bad, 1u << UNI_CC | 1u << UNI_CN | 1u << UNI_CS, true);
		if (!rc) {
			set_norm(&bad);
			rc = set_invert(&bad) || set_union(s, &bad);
		}
		set_free(&bad);
		if (!rc && key[0] == 'p')
			rc = set_props(s, 1u << UNI_ZS, false);
	} else {
		char msg[160];
		snprintf(msg, sizeof msg, "property \"%.*s\": titan's Unicode 16 tables hold general "
			 "categories and White_Space, not scripts or other properties", (int)len, name);
		return fail(x, msg);
	}
	return rc ? err_set(x->err, "out of memory") : 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Digits of base at x->p (up to max of them, or to '}' when braced). */
static int number(rx *x, int base, int max, bool braced, uint32_t *cp)
{
	uint32_t v = 0;
	int k = 0;
	while (x->p < x->end && (braced || k < max)) {
		int d = base == 16 ? hexval(*x->p) : (*x->p >= '0' && *x->p < '0' + base ? *x->p - '0' : -1);
		if (d < 0)
			break;
		if (v > CP_MAX)
			return fail(x, "code point above U+10FFFF");
		v = v * (uint32_t)base + (uint32_t)d;
		x->p++, k++;
	}
	if (!k || (braced && (x->p == x->end || *x->p++ != '}')))
		return fail(x, "malformed character escape");
	if (v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF))
		return fail(x, "escape names no character");
	*cp = v;
	return 0;
}

/* The escape at x->p (after the backslash) when it names one character:
 * 1 and *cp, 0 when it is something else (p unmoved), -1 on error. */
static int char_escape(rx *x, bool in_class, uint32_t *cp)
{
	char c = *x->p;
	static const char simple[] = "tnrfae";
	static const uint32_t value[] = {9, 10, 13, 12, 7, 27};
	const char *s = strchr(simple, c);
	if (c && s) {
		x->p++;
		*cp = value[s - simple];
		return 1;
	}
	if (c == 'v') { /* Oniguruma: a vertical tab, not PCRE2's class */
		x->p++;
		*cp = 0x0B;
		return 1;
	}
	if (c == 'p' || c == 'P') { /* not followed by '{' (class_escape took those) */
		x->p++;
		*cp = (uint8_t)c;
		return 1;
	}
	if (c == 'b' && in_class) {
		x->p++;
		*cp = 8;
		return 1;
	}
	if (c == 'x' || c == 'u' || c == 'o') {
		x->p++;
		bool braced = x->p < x->end && *x->p == '{';
		x->p += braced;
		int base = c == 'o' ? 8 : 16, max = c == 'u' ? 4 : 2;
		if (c == 'o' && !braced)
			return fail(x, "\\o without braces");
		return number(x, base, max, braced, cp) ? -1 : 1;
	}
	if (c == '0') {
		x->p++;
		*cp = 0;
		if (x->p < x->end && *x->p >= '0' && *x->p <= '7' && number(x, 8, 2, false, cp))
			return -1;
		return 1;
	}
	if (c && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		   (unsigned char)c >= 0x80)) {
		x->p++;
		*cp = (uint8_t)c;
		return 1;
	}
	return 0;
}

/* The class escape at x->p (after the backslash): 1 with s filled, 0 when it
 * is not one, -1 on error. */
static int class_escape(rx *x, cpset *s)
{
	char c = *x->p;
	bool neg = c >= 'A' && c <= 'Z';
	int rc;
	switch (c) {
	case 'd': case 'D': rc = set_props(s, 1u << UNI_ND, false); break;
	case 's': case 'S': rc = set_props(s, 0, true); break;
	case 'w': case 'W': rc = set_word(s); break;
	case 'h': case 'H': rc = set_add(s, '0', '9') || set_add(s, 'A', 'F') || set_add(s, 'a', 'f'); break;
	case 'p': case 'P': {
		/* Oniguruma reads \p without braces as the letter p. */
		if (x->p + 1 == x->end || x->p[1] != '{')
			return 0;
		x->p += 2;
		const char *close = memchr(x->p, '}', (size_t)(x->end - x->p));
		if (!close)
			return fail(x, "\\p{ without }");
		const char *name = x->p;
		size_t len = (size_t)(close - name);
		x->p = close + 1;
		if (len && name[0] == '^')
			neg = !neg, name++, len--;
		if (property(x, name, len, s))
			return -1;
		set_norm(s);
		return neg && set_invert(s) ? err_set(x->err, "out of memory") : 1;
	}
	default: return 0;
	}
	x->p++;
	if (rc)
		return err_set(x->err, "out of memory");
	set_norm(s);
	return neg && set_invert(s) ? err_set(x->err, "out of memory") : 1;
}

/* One UTF-8 character of the pattern at x->p. */
static int pattern_char(rx *x, uint32_t *cp)
{
	size_t l = uni_utf8_decode((const uint8_t *)x->p, (size_t)(x->end - x->p), cp);
	if (*cp & UNI_BAD)
		return fail(x, "invalid UTF-8");
	x->p += l;
	return 0;
}

static int parse_class(rx *x, cpset *out, bool *negated, int depth);

/* A [:name:] or [:^name:] POSIX bracket at x->p ('[' seen). */
static int posix_class(rx *x, cpset *s)
{
	const char *close = strstr(x->p, ":]");
	if (!close || close > x->end)
		return fail(x, "[: without :]");
	const char *name = x->p + 1;
	bool neg = *name == '^';
	name += neg;
	static const char *const ok[] = {"digit", "space", "blank", "xdigit", "punct", "cntrl",
					 "graph", "print", "word", "ascii"};
	bool known = false;
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
		known = known || ((size_t)(close - name) == strlen(ok[i]) && !memcmp(name, ok[i], strlen(ok[i])));
	if (!known) {
		char msg[128];
		snprintf(msg, sizeof msg, "[:%.*s:]: its Unicode definition needs properties titan's "
			 "tables do not hold", (int)(close - name), name);
		return fail(x, msg);
	}
	if (property(x, name, (size_t)(close - name), s))
		return -1;
	set_norm(s);
	x->p = close + 2;
	return neg && set_invert(s) ? err_set(x->err, "out of memory") : 0;
}

/* One item of a class: a character (1, *cp), or a set merged into s (0). */
static int class_item(rx *x, cpset *s, uint32_t *cp, int depth)
{
	if (*x->p == '[') {
		x->p++;
		cpset sub = {0};
		bool neg;
		int rc = x->p < x->end && *x->p == ':' ? posix_class(x, &sub)
						       : parse_class(x, &sub, &neg, depth + 1);
		rc = rc || set_union(s, &sub);
		set_free(&sub);
		return rc ? -1 : 0;
	}
	if (*x->p == '\\') {
		x->p++;
		if (x->p == x->end)
			return fail(x, "\\ at the end");
		cpset sub = {0};
		int r = class_escape(x, &sub);
		if (r == 1) {
			r = set_union(s, &sub) ? err_set(x->err, "out of memory") : 0;
			set_free(&sub);
			return r;
		}
		set_free(&sub);
		if (r < 0)
			return -1;
		r = char_escape(x, true, cp);
		if (r == 0)
			return fail(x, "this escape is not supported inside a class");
		return r < 0 ? -1 : 1;
	}
	return pattern_char(x, cp) ? -1 : 1;
}

/* A bracket class after its '[': out gets its set (negation applied), and
 * *negated says whether it was [^...]. */
static int parse_class(rx *x, cpset *out, bool *negated, int depth)
{
	if (depth > 32)
		return fail(x, "classes nested too deeply");
	*negated = x->p < x->end && *x->p == '^';
	x->p += *negated;
	cpset cur = {0}, acc = {0};
	bool have_acc = false, first = true;
	int rc = 0;
	while (!rc) {
		if (x->p >= x->end) {
			rc = fail(x, "[ without ]");
			break;
		}
		if (*x->p == ']' && !first) {
			x->p++;
			break;
		}
		first = false;
		if (x->p + 1 < x->end && x->p[0] == '&' && x->p[1] == '&') {
			x->p += 2;
			set_norm(&cur);
			if (have_acc)
				rc = set_and(&acc, &cur) ? err_set(x->err, "out of memory") : 0;
			else
				acc = cur, memset(&cur, 0, sizeof cur), have_acc = true;
			set_free(&cur);
			continue;
		}
		uint32_t lo;
		int r = class_item(x, &cur, &lo, depth);
		if (r < 0) {
			rc = -1;
			break;
		}
		if (r == 0)
			continue;
		uint32_t hi = lo;
		if (x->p + 1 < x->end && *x->p == '-' && x->p[1] != ']') {
			x->p++;
			cpset dummy = {0};
			r = class_item(x, &dummy, &hi, depth);
			set_free(&dummy);
			if (r < 0) {
				rc = -1;
				break;
			}
			if (r == 0 || hi < lo) {
				rc = fail(x, "bad range in a class");
				break;
			}
		}
		if (set_add(&cur, lo, hi))
			rc = err_set(x->err, "out of memory");
	}
	set_norm(&cur);
	if (!rc && have_acc) {
		rc = set_and(&acc, &cur) ? err_set(x->err, "out of memory") : 0;
		set_free(&cur);
		cur = acc;
		memset(&acc, 0, sizeof acc);
	}
	set_free(&acc);
	if (!rc && *negated && depth > 0 && set_invert(&cur))
		rc = err_set(x->err, "out of memory");
	if (rc) {
		set_free(&cur);
		return -1;
	}
	*out = cur;
	return 0;
}

/* A top-level bracket class, '[' seen. */
static int emit_class(rx *x)
{
	cpset s = {0};
	bool neg;
	if (parse_class(x, &s, &neg, 0))
		return -1;
	int rc;
	if (x->icase[x->lvl]) {
		/* PCRE2 matches a class caselessly as Oniguruma does: [S] takes the
		 * case variants of S, [^S] excludes them. */
		rc = set_fold_new(&s) ? err_set(x->err, "out of memory") : put_set(x, &s, neg);
	} else {
		rc = neg && set_invert(&s) ? err_set(x->err, "out of memory") : put_set(x, &s, false);
	}
	set_free(&s);
	return rc;
}

/* A set from an escape outside brackets: never case-folded (Oniguruma). */
static int emit_escape_set(rx *x, cpset *s)
{
	bool ic = x->icase[x->lvl];
	return (ic && puts_(x, "(?-i:")) || put_set(x, s, false) || (ic && puts_(x, ")"));
}

/* A literal character: ASCII letters and digits as themselves, any other
 * as \x{..} (so that nothing is taken for syntax). */
static int put_literal(rx *x, uint32_t cp)
{
	if ((cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z')) {
		char c = (char)cp;
		return put(x, &c, 1);
	}
	return put_cp(x, cp);
}

static int emit_char(rx *x, uint32_t cp)
{
	if (x->icase[x->lvl]) {
		cpset s = {0};
		int rc = set_add(&s, cp, cp) || set_fold_new(&s) ? err_set(x->err, "out of memory") : 0;
		if (!rc && (s.n > 1 || s.r[0][0] != s.r[0][1])) {
			rc = put_set(x, &s, false);
			set_free(&s);
			return rc;
		}
		set_free(&s);
		if (rc)
			return -1;
	}
	return put_literal(x, cp);
}

/* A '{' (seen): a quantifier {n}, {n,}, {n,m} or Oniguruma's {,m} (PCRE2's
 * {0,m}) is copied; any other '{' is a literal. */
static int brace(rx *x)
{
	const char *q = x->p;
	size_t digits = 0;
	while (q < x->end && *q >= '0' && *q <= '9')
		q++, digits++;
	bool comma = q < x->end && *q == ',';
	q += comma;
	size_t digits2 = 0;
	while (q < x->end && *q >= '0' && *q <= '9')
		q++, digits2++;
	if (q == x->end || *q != '}' || (!digits && !digits2) || (!comma && !digits))
		return emit_char(x, '{');
	int rc = puts_(x, "{") || (!digits && puts_(x, "0")) || put(x, x->p, (size_t)(q + 1 - x->p));
	x->p = q + 1;
	return rc;
}

static int emit_boundary(rx *x, bool at)
{
	cpset w = {0};
	if (set_word(&w)) {
		set_free(&w);
		return err_set(x->err, "out of memory");
	}
	set_norm(&w);
	/* \b: a word character on exactly one side; \B: on both or neither. */
	int rc = puts_(x, "(?-i:(?:(?<=") || put_set(x, &w, false) || puts_(x, at ? ")(?!" : ")(?=") ||
		 put_set(x, &w, false) || puts_(x, ")|(?<!") || put_set(x, &w, false) ||
		 puts_(x, at ? ")(?=" : ")(?!") || put_set(x, &w, false) || puts_(x, ")))");
	set_free(&w);
	return rc;
}

/* An escape outside brackets, after the backslash. */
static int escape(rx *x)
{
	char c = *x->p;
	cpset s = {0};
	int r = class_escape(x, &s);
	if (r) {
		r = r < 0 ? -1 : emit_escape_set(x, &s);
		set_free(&s);
		return r;
	}
	uint32_t cp;
	r = char_escape(x, false, &cp);
	if (r)
		return r < 0 ? -1 : emit_char(x, cp);
	x->p++;
	switch (c) {
	case 'b': case 'B': return emit_boundary(x, c == 'b');
	case 'A': case 'z': case 'Z': case 'G': case 'K': case 'R': case 'N':
		return put(x, x->p - 2, 2);
	case 'O': return puts_(x, "(?s:.)");
	case 'Q': { /* literal up to \E, copied as it is */
		const char *e = strstr(x->p, "\\E");
		size_t n = e && e < x->end ? (size_t)(e - x->p) + 2 : (size_t)(x->end - x->p);
		int rc = puts_(x, "\\Q") || put(x, x->p, n);
		x->p += n;
		return rc;
	}
	case 'k': case 'g': { /* named back reference or subroutine call */
		char open = x->p < x->end ? *x->p : 0, close = open == '<' ? '>' : '\'';
		const char *e = open == '<' || open == '\'' ? memchr(x->p + 1, close, (size_t)(x->end - x->p - 1)) : NULL;
		if (!e)
			return fail(x, "\\k or \\g without <name>");
		int rc = put(x, x->p - 2, (size_t)(e + 1 - (x->p - 2)));
		x->p = e + 1;
		return rc;
	}
	default:
		if (c >= '1' && c <= '9') {
			const char *st = x->p - 1;
			while (x->p < x->end && *x->p >= '0' && *x->p <= '9')
				x->p++;
			return puts_(x, "\\") || put(x, st, (size_t)(x->p - st));
		}
		x->p--;
		char msg[64];
		snprintf(msg, sizeof msg, "escape \\%c is not supported", c);
		return fail(x, msg);
	}
}

/* "(?" seen: options, or a group kind PCRE2 spells the same way. */
static int group_head(rx *x)
{
	const char *st = x->p;
	static const char *const same[] = {":", "=", "!", "<=", "<!", ">", "<", "'", "P<"};
	if (x->p < x->end && *x->p == '#') {
		const char *e = memchr(x->p, ')', (size_t)(x->end - x->p));
		if (!e)
			return fail(x, "(?# without )");
		x->p = e + 1;
		x->lvl--; /* a comment opens no group */
		return 0;
	}
	for (size_t i = 0; i < sizeof same / sizeof *same; i++)
		if ((size_t)(x->end - x->p) >= strlen(same[i]) && !memcmp(x->p, same[i], strlen(same[i]))) {
			if (i >= 6) { /* a name: copy through its end */
				const char *e = strpbrk(x->p + strlen(same[i]), ">'");
				if (!e || e >= x->end)
					return fail(x, "group name without its end");
				x->p = e + 1;
			} else {
				x->p += strlen(same[i]);
			}
			return puts_(x, "(?") || put(x, st, (size_t)(x->p - st));
		}
	/* Options: i and m (Oniguruma's m is PCRE2's s); ':' or ')' ends them. */
	bool on = true, ic = x->icase[x->lvl], da = x->dotall[x->lvl];
	char flags[32];
	size_t nf = 0;
	for (; x->p < x->end && *x->p != ':' && *x->p != ')'; x->p++) {
		char c = *x->p;
		if (c == '-')
			on = false;
		else if (c == 'i')
			ic = on;
		else if (c == 'm')
			da = on;
		else {
			char msg[64];
			snprintf(msg, sizeof msg, "option (?%c) is not supported", c);
			return fail(x, msg);
		}
		if (c != 'm' && nf + 1 < sizeof flags)
			flags[nf++] = c;
	}
	if (x->p == x->end)
		return fail(x, "(? without )");
	while (nf && flags[nf - 1] == '-')
		nf--; /* "(?m-)" or "(?-m)" leaves a bare '-' */
	if (*x->p == ')') { /* to the end of the enclosing group */
		x->p++;
		x->lvl--;
		x->icase[x->lvl] = ic, x->dotall[x->lvl] = da;
		return nf ? puts_(x, "(?") || put(x, flags, nf) || puts_(x, ")") : 0;
	}
	x->p++;
	x->icase[x->lvl] = ic, x->dotall[x->lvl] = da;
	return puts_(x, "(?") || put(x, flags, nf) || puts_(x, ":");
}

static int translate(rx *x)
{
	while (x->p < x->end) {
		char c = *x->p++;
		int rc = 0;
		switch (c) {
		case '\\':
			if (x->p == x->end)
				return fail(x, "\\ at the end");
			rc = escape(x);
			break;
		case '[':
			rc = emit_class(x);
			break;
		case '(':
			if (x->lvl + 1 == MAX_DEPTH)
				return fail(x, "groups nested too deeply");
			x->lvl++;
			x->icase[x->lvl] = x->icase[x->lvl - 1];
			x->dotall[x->lvl] = x->dotall[x->lvl - 1];
			if (x->p < x->end && *x->p == '?') {
				x->p++;
				if (x->p < x->end && (*x->p == '(' || *x->p == '~'))
					return fail(x, "conditionals and the absent operator are not supported");
				rc = group_head(x);
			} else {
				rc = puts_(x, "(");
			}
			break;
		case ')':
			if (x->lvl == 0)
				return fail(x, "unmatched )");
			x->lvl--;
			rc = puts_(x, ")");
			break;
		case '.':
			rc = puts_(x, x->dotall[x->lvl] ? "(?s:.)" : "[^\\n]");
			break;
		case '^': /* Oniguruma: start of a line */
			rc = puts_(x, "(?:^|(?<=\\n))");
			break;
		case '$': /* Oniguruma: end of a line (before \n only) */
			rc = puts_(x, "(?=\\n|\\z)");
			break;
		case '{':
			rc = brace(x);
			break;
		case '|': case '*': case '+': case '?':
			rc = put(x, &c, 1);
			break;
		default: {
			uint32_t cp;
			x->p--;
			rc = pattern_char(x, &cp) || emit_char(x, cp);
		}
		}
		if (rc)
			return -1;
	}
	return x->lvl ? fail(x, "unmatched (") : 0;
}

char *tok_regex_to_pcre2(const char *re, titan_err *err)
{
	rx x = {.re = re, .p = re, .end = re + strlen(re), .err = err};
	if (translate(&x) || put(&x, "", 0)) {
		free(x.o);
		return NULL;
	}
	return x.o;
}
