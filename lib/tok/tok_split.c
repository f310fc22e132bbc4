/* tok_split.c: pre-tokenizer regexes: hand-written scanners for the known
 * patterns, PCRE2 (JIT, UTF, UCP) for any other.
 *
 * Both follow the references' regex semantics: leftmost-first alternation,
 * greedy quantifiers with backtracking, \s = Unicode White_Space.  Both read
 * titan's Unicode 16 tables: the scanners directly, PCRE2 through the explicit
 * ranges tok_regex.c writes into the pattern in place of its own tables. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "tok/tok_split_int.h"
#include "unicode/unicode.h"

const char tok_re_llama3[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char tok_re_qwen2[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char tok_re_gpt2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char tok_re_o200k[] =
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* tiktoken's own spelling of cl100k_base: possessive quantifiers, the same
 * pieces as tok_re_llama3. */
static const char re_cl100k_tiktoken[] =
	"'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| "
	"?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";

/* Character classes the scanners need, one bit each. */
enum {
	C_LU = 1,     /* Lu, Lt */
	C_LL = 2,     /* Ll */
	C_LO = 4,     /* Lm, Lo */
	C_M = 8,      /* Mn, Mc, Me */
	C_N = 16,     /* Nd, Nl, No */
	C_WS = 32,    /* White_Space other than \r and \n */
	C_NL = 64,    /* \r, \n */
	C_OTHER = 128 /* everything else, and each byte of invalid UTF-8 */
};
#define C_L (C_LU | C_LL | C_LO)
#define C_P (C_M | C_OTHER) /* [^\s\p{L}\p{N}] */
#define C_S (C_WS | C_NL)   /* \s */

static unsigned class_of_cp(uint32_t cp)
{
	uint8_t p = uni_props(cp);
	if (p & UNI_PROP_WS)
		return cp == '\r' || cp == '\n' ? C_NL : C_WS;
	uint32_t bit = 1u << uni_gc_of(p);
	if (bit & ((1u << UNI_LU) | (1u << UNI_LT)))
		return C_LU;
	if (bit & (1u << UNI_LL))
		return C_LL;
	if (bit & ((1u << UNI_LM) | (1u << UNI_LO)))
		return C_LO;
	if (bit & UNI_MASK_M)
		return C_M;
	if (bit & UNI_MASK_N)
		return C_N;
	return C_OTHER;
}

static uint8_t ascii_class[128];

static void init_ascii(void)
{
	if (ascii_class['a'])
		return;
	/* Racing threads write the same values: harmless, but keep 'a' last. */
	for (int c = 127; c >= 0; c--)
		ascii_class[c] = (uint8_t)class_of_cp((uint32_t)c);
}

/* Class of the character at s[i]; returns its length in bytes. */
static inline size_t cls_at(const uint8_t *s, size_t n, size_t i, unsigned *c)
{
	if (s[i] < 0x80) {
		*c = ascii_class[s[i]];
		return 1;
	}
	uint32_t cp;
	size_t l = uni_utf8_decode(s + i, n - i, &cp);
	*c = class_of_cp(cp);
	return l;
}

/* End of the run of characters in mask starting at i. */
static inline size_t run(const uint8_t *s, size_t n, size_t i, unsigned mask)
{
	while (i < n) {
		unsigned c;
		size_t l = cls_at(s, n, i, &c);
		if (!(c & mask))
			break;
		i += l;
	}
	return i;
}

static inline int lower(uint8_t b) { return b >= 'A' && b <= 'Z' ? b + 32 : b; }

/* Length of a contraction 's 't 're 've 'm 'll 'd at s[i] == '\'' (0 if none).
 * Case-insensitively, 's also matches U+017F LATIN SMALL LETTER LONG S, which
 * case-folds to s in the references' regex engines. */
static size_t contraction(const uint8_t *s, size_t n, size_t i, bool icase)
{
	if (i + 1 >= n)
		return 0;
	int a = icase ? lower(s[i + 1]) : s[i + 1];
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return 2;
	if (icase && s[i + 1] == 0xc5 && i + 2 < n && s[i + 2] == 0xbf)
		return 3;
	if (i + 2 >= n)
		return 0;
	int b = icase ? lower(s[i + 2]) : s[i + 2];
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
		return 3;
	return 0;
}

/* \p{N}{1,maxdig} after the first digit, which ends at j. */
static size_t digits(const uint8_t *s, size_t n, size_t j, int maxdig)
{
	for (int d = 1; d < maxdig && j < n; d++) {
		unsigned c;
		size_t l = cls_at(s, n, j, &c);
		if (!(c & C_N))
			break;
		j += l;
	}
	return j;
}

/* The whitespace alternatives shared by all patterns, at a \s character:
 * `\s*[\r\n]+` (with_nl) ends after the run's last \r or \n; `\s+(?!\S)` ends
 * before the run's last character unless the run reaches the end of the text
 * (the trap: "   Hello" -> "  ", " Hello"); `\s+` takes a lone one. */
static size_t scan_space(const uint8_t *s, size_t n, size_t i, bool with_nl)
{
	size_t j = i, last = i, nl_end = 0;
	while (j < n) {
		unsigned c;
		size_t l = cls_at(s, n, j, &c);
		if (!(c & C_S))
			break;
		if (c & C_NL)
			nl_end = j + l;
		last = j;
		j += l;
	}
	if (with_nl && nl_end)
		return nl_end;
	if (j == n || last == i)
		return j;
	return last;
}

/* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxdig}| ?[^\s\p{L}\p{N}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+ : Llama 3 and cl100k (maxdig 3), Qwen2/3 (1). */
static size_t scan_cl100k(const uint8_t *s, size_t n, size_t i, int maxdig)
{
	unsigned c, c2;
	size_t l = cls_at(s, n, i, &c);
	if (s[i] == '\'') {
		size_t k = contraction(s, n, i, true);
		if (k)
			return i + k;
	}
	if (c & C_L)
		return run(s, n, i + l, C_L);
	if (c & C_N)
		return digits(s, n, i + l, maxdig);
	if (!(c & C_NL) && i + l < n) {
		size_t l2 = cls_at(s, n, i + l, &c2);
		if (c2 & C_L)
			return run(s, n, i + l + l2, C_L);
	}
	if (s[i] == ' ' && i + 1 < n) {
		cls_at(s, n, i + 1, &c2);
		if (c2 & C_P)
			return run(s, n, run(s, n, i + 1, C_P), C_NL);
	}
	if (c & C_P)
		return run(s, n, run(s, n, i, C_P), C_NL);
	return scan_space(s, n, i, true);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t scan_gpt2(const uint8_t *s, size_t n, size_t i)
{
	unsigned c;
	if (s[i] == '\'') {
		size_t k = contraction(s, n, i, false);
		if (k)
			return i + k;
	}
	size_t st = i;
	if (s[i] == ' ' && i + 1 < n) {
		cls_at(s, n, i + 1, &c);
		if (c & (C_L | C_N | C_P))
			st = i + 1;
	}
	cls_at(s, n, st, &c);
	if (c & C_L)
		return run(s, n, st, C_L);
	if (c & C_N)
		return run(s, n, st, C_N);
	if (c & C_P)
		return run(s, n, st, C_P);
	return scan_space(s, n, i, false);
}

/* o200k's letter alternatives, at i (after the optional prefix was decided):
 * [U]*[W]+ then an optional contraction, U = [Lu Lt Lm Lo M],
 * W = [Ll Lm Lo M].  Returns the end, or 0 when [U]*[W]+ cannot match. */
#define C_U (C_LU | C_LO | C_M)
#define C_W (C_LL | C_LO | C_M)
static size_t o200k_upper_lower(const uint8_t *s, size_t n, size_t i)
{
	/* U* is greedy; on failure it gives back one character at a time until
	 * W+ can start: at the run's end if a W (an Ll) follows, else at the
	 * run's last character that is also in W, and W+ then stops right after
	 * it (the next one is Lu/Lt, or the run's end, which is not W). */
	size_t j = i, last_w = SIZE_MAX, last_w_end = 0;
	while (j < n) {
		unsigned c;
		size_t l = cls_at(s, n, j, &c);
		if (!(c & C_U))
			break;
		if (c & C_W)
			last_w = j, last_w_end = j + l;
		j += l;
	}
	if (j < n) {
		unsigned c;
		cls_at(s, n, j, &c);
		if (c & C_W)
			return run(s, n, j, C_W);
	}
	(void)last_w;
	return last_w == SIZE_MAX ? 0 : last_w_end;
}

/* [U]+[W]* : U+ greedy, then W* greedy (never needs to backtrack). */
static size_t o200k_upper(const uint8_t *s, size_t n, size_t i)
{
	size_t j = run(s, n, i, C_U);
	return j == i ? 0 : run(s, n, j, C_W);
}

static size_t o200k_suffix(const uint8_t *s, size_t n, size_t j)
{
	if (j < n && s[j] == '\'')
		return j + contraction(s, n, j, true);
	return j;
}

static size_t scan_o200k(const uint8_t *s, size_t n, size_t i)
{
	unsigned c, c2;
	size_t l = cls_at(s, n, i, &c);
	/* The optional prefix [^\r\n\p{L}\p{N}] (this includes marks: \p{M} is
	 * not \p{L}) is tried first, then without it. */
	bool pre = !(c & (C_L | C_N | C_NL));
	for (int alt = 0; alt < 2; alt++) {
		if (pre && i + l < n) {
			size_t e = alt ? o200k_upper(s, n, i + l) : o200k_upper_lower(s, n, i + l);
			if (e)
				return o200k_suffix(s, n, e);
		}
		size_t e = alt ? o200k_upper(s, n, i) : o200k_upper_lower(s, n, i);
		if (e)
			return o200k_suffix(s, n, e);
	}
	if (c & C_N)
		return digits(s, n, i + l, 3);
	size_t st = i;
	if (s[i] == ' ' && i + 1 < n) {
		cls_at(s, n, i + 1, &c2);
		if (c2 & C_P)
			st = i + 1;
	}
	if (st > i || (c & C_P)) {
		size_t j = run(s, n, st, C_P);
		while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/'))
			j++;
		return j;
	}
	return scan_space(s, n, i, true);
}

tok_split *tok_split_new(const char *regex, int mode, titan_err *err)
{
	init_ascii();
	tok_split *s = calloc(1, sizeof *s);
	if (!s) {
		err_set(err, "out of memory");
		return NULL;
	}
	s->kind = TOK_SPLIT_PCRE2;
	s->src = strdup(regex);
	if (!s->src) {
		free(s);
		err_set(err, "out of memory");
		return NULL;
	}
	if (mode != TOK_PRETOK_PCRE2) {
		if (!strcmp(regex, tok_re_llama3) || !strcmp(regex, re_cl100k_tiktoken))
			s->kind = TOK_SPLIT_LLAMA3;
		else if (!strcmp(regex, tok_re_qwen2))
			s->kind = TOK_SPLIT_QWEN2;
		else if (!strcmp(regex, tok_re_gpt2))
			s->kind = TOK_SPLIT_GPT2;
		else if (!strcmp(regex, tok_re_o200k))
			s->kind = TOK_SPLIT_O200K;
	}
	char *pat = tok_regex_to_pcre2(regex, err);
	if (!pat) {
		tok_split_free(s);
		return NULL;
	}
	int ec;
	PCRE2_SIZE eo;
	/* Compiled even for a scanner: it validates the regex and serves tests. */
	s->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
			      &eo, NULL);
	free(pat);
	if (!s->re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(ec, msg, sizeof msg);
		err_set(err, "pre-tokenizer regex at offset %zu: %s", (size_t)eo, (char *)msg);
		tok_split_free(s);
		return NULL;
	}
	/* JIT is an optimisation: a platform without it still matches. */
	pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE);
	return s;
}

void tok_split_free(tok_split *s)
{
	if (!s)
		return;
	free(s->src);
	pcre2_code_free(s->re);
	free(s);
}

const char *tok_split_source(const tok_split *s)
{
	return s->src;
}

const char *tok_split_kind(const tok_split *s)
{
	switch (s->kind) {
	case TOK_SPLIT_LLAMA3: return "scanner:llama3";
	case TOK_SPLIT_QWEN2: return "scanner:qwen2";
	case TOK_SPLIT_GPT2: return "scanner:gpt2";
	case TOK_SPLIT_O200K: return "scanner:o200k";
	default: return "pcre2";
	}
}

size_t tok_split_scan(const tok_split *sp, const uint8_t *s, size_t n, size_t i)
{
	switch (sp->kind) {
	case TOK_SPLIT_LLAMA3: return scan_cl100k(s, n, i, 3);
	case TOK_SPLIT_QWEN2: return scan_cl100k(s, n, i, 1);
	case TOK_SPLIT_GPT2: return scan_gpt2(s, n, i);
	default: return scan_o200k(s, n, i);
	}
}

int tok_pcre_init(tok_pcre *p, titan_err *err)
{
	p->md = pcre2_match_data_create(1, NULL);
	p->mc = pcre2_match_context_create(NULL);
	p->js = NULL;
	if (!p->md || !p->mc) {
		tok_pcre_free(p);
		return err_set(err, "out of memory for PCRE2 match data");
	}
	return 0;
}

/* A JIT stack of up to 64 MiB for the rare piece that outgrows PCRE2's own
 * 32 KiB: made on the first match that needs it, not per state, since each
 * is a 64 MiB mapping (bpetrain makes a state per document).  0, or -1 when
 * there is no memory for it. */
static int grow_jit_stack(tok_pcre *pc)
{
	if (pc->js)
		return -1; /* the big stack was not enough either */
	pc->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
	if (!pc->js)
		return -1;
	pcre2_jit_stack_assign(pc->mc, NULL, pc->js);
	return 0;
}

void tok_pcre_free(tok_pcre *p)
{
	pcre2_match_data_free(p->md);
	pcre2_match_context_free(p->mc);
	pcre2_jit_stack_free(p->js);
	memset(p, 0, sizeof *p);
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		uint32_t cp;
		i += uni_utf8_decode(s + i, n - i, &cp);
		if (cp & UNI_BAD)
			return false;
	}
	return true;
}

/* PCRE2 needs valid UTF-8: each invalid byte b becomes U+10FF00 + b (private
 * use: like a bad byte, neither letter, number, mark, punctuation, symbol nor
 * space); map[k] is the original offset of the copy's byte k. */
static int make_valid(const uint8_t *s, size_t n, uint8_t **out, size_t **map, size_t *out_n)
{
	uint8_t *o = malloc(n * 4 + 1);
	size_t *m = malloc((n * 4 + 1) * sizeof *m);
	if (!o || !m) {
		free(o);
		free(m);
		return -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t l = uni_utf8_decode(s + i, n - i, &cp);
		size_t w;
		if (cp & UNI_BAD)
			w = uni_utf8_encode(0x10FF00 + (cp & 0xff), o + k);
		else
			memcpy(o + k, s + i, l), w = l;
		for (size_t a = 0; a < w; a++)
			m[k + a] = i;
		k += w;
		i += l;
	}
	m[k] = n;
	*out = o, *map = m, *out_n = k;
	return 0;
}

static int pcre_run_marked(const tok_split *sp, tok_pcre *pc, const uint8_t *s0, size_t n0,
			   tok_mark_fn fn, void *ctx, titan_err *err)
{
	const uint8_t *s = s0;
	size_t n = n0, *map = NULL;
	uint8_t *copy = NULL;
	if (!utf8_valid(s0, n0)) {
		if (make_valid(s0, n0, &copy, &map, &n))
			return err_set(err, "out of memory");
		s = copy;
	}
#define ORIG(k) (map ? map[k] : (k))
	int rc = 0;
	size_t pos = 0, last = 0;
	while (pos < n) {
		int m = pcre2_match(sp->re, s, n, pos, PCRE2_NO_UTF_CHECK, pc->md, pc->mc);
		if (m == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack(pc) == 0)
			continue; /* the same position again, on the big stack */
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(m, msg, sizeof msg);
			rc = err_set(err, "pre-tokenizer regex failed at byte %zu: %s", ORIG(pos),
				     (char *)msg);
			goto out;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(pc->md);
		size_t ms = ov[0], me = ov[1];
		if (me == ms) {
			/* HF: an empty match makes no piece but ends the gap before
			 * it; the search goes on a character later. */
			if (ms > last && (rc = fn(ctx, s0 + ORIG(last), ORIG(ms) - ORIG(last), false)))
				goto out;
			last = ms;
			if (ms >= n)
				break;
			uint32_t cp;
			pos = ms + uni_utf8_decode(s + ms, n - ms, &cp);
			continue;
		}
		if (ms > last && (rc = fn(ctx, s0 + ORIG(last), ORIG(ms) - ORIG(last), false)))
			goto out;
		if ((rc = fn(ctx, s0 + ORIG(ms), ORIG(me) - ORIG(ms), true)))
			goto out;
		last = pos = me;
	}
	if (last < n)
		rc = fn(ctx, s0 + ORIG(last), n0 - ORIG(last), false);
#undef ORIG
out:
	free(copy);
	free(map);
	return rc;
}

/* Isolated: every piece, match or gap, goes to the caller's fn. */
typedef struct unmark_ctx {
	tok_piece_fn fn;
	void *ctx;
} unmark_ctx;

static int unmark(void *ctx, const uint8_t *p, size_t n, bool is_match)
{
	(void)is_match;
	unmark_ctx *u = ctx;
	return u->fn(u->ctx, p, n);
}

static int pcre_run(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
		    tok_piece_fn fn, void *ctx, titan_err *err)
{
	unmark_ctx u = {fn, ctx};
	return pcre_run_marked(sp, pc, s, n, unmark, &u, err);
}

int tok_split_run_marked(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
			 tok_mark_fn fn, void *ctx, titan_err *err)
{
	return pcre_run_marked(sp, pc, s, n, fn, ctx, err);
}

int tok_split_run_with(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
		       tok_piece_fn fn, void *ctx, titan_err *err)
{
	if (sp->kind == TOK_SPLIT_PCRE2)
		return pcre_run(sp, pc, s, n, fn, ctx, err);
	for (size_t i = 0; i < n;) {
		size_t j = tok_split_scan(sp, s, n, i);
		int rc = fn(ctx, s + i, j - i);
		if (rc)
			return rc;
		i = j;
	}
	return 0;
}

int tok_split_run(const tok_split *sp, const uint8_t *s, size_t n, tok_piece_fn fn, void *ctx,
		  titan_err *err)
{
	if (sp->kind != TOK_SPLIT_PCRE2)
		return tok_split_run_with(sp, NULL, s, n, fn, ctx, err);
	tok_pcre pc;
	if (tok_pcre_init(&pc, err))
		return -1;
	int rc = tok_split_run_with(sp, &pc, s, n, fn, ctx, err);
	tok_pcre_free(&pc);
	return rc;
}

int tok_split_run_pcre2(const tok_split *sp, tok_pcre *pc, const uint8_t *s, size_t n,
			tok_piece_fn fn, void *ctx, titan_err *err)
{
	return pcre_run(sp, pc, s, n, fn, ctx, err);
}
