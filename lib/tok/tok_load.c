/* tok_load.c: reading tokenizer.json, tokenizer_config.json and tiktoken files. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mfile.h"
#include "core/sha256.h"
#include "tok/tok_int.h"
#include "tok/tok_split_int.h"
#include "unicode/unicode.h"

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other
 * 68 (0-32, 127-160, 173) for U+0100 onwards in byte order. */
static int16_t bl_char_to_byte[324];

static void init_bytelevel(void)
{
	if (bl_char_to_byte[0x100] == 0 && bl_char_to_byte['!'] == '!')
		return;
	for (int i = 0; i < 324; i++)
		bl_char_to_byte[i] = -1;
	int extra = 0;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		bl_char_to_byte[printable ? b : 256 + extra++] = (int16_t)b;
	}
}

/* A token string in ByteLevel form to bytes, the way HF's ByteLevel decoder
 * does it: every character mapped back, or, when one has no byte, the string's
 * own UTF-8.  Returns whether the mapping applied (the token is reachable). */
/* jansson refuses NUL in object keys, and torchtitan's test vocabulary has
 * "\u0000": the loader reads every unescaped \u0000 as U+10FFFF (a
 * noncharacter no real vocabulary holds) and this turns it back. */
#define NUL_MASK "\\uDBFF\\uDFFF"
static const uint8_t nul_utf8[4] = {0xf4, 0x8f, 0xbf, 0xbf};

static size_t unmask_nul(const char *s, size_t n, uint8_t *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (i + 4 <= n && !memcmp(s + i, nul_utf8, 4)) {
			out[k++] = 0;
			i += 3;
		} else {
			out[k++] = (uint8_t)s[i];
		}
	}
	return k;
}

static bool bytelevel_decode(const char *s, size_t n, uint8_t *out, size_t *out_n)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += uni_utf8_decode((const uint8_t *)s + i, n - i, &cp);
		if (cp >= 324 || bl_char_to_byte[cp] < 0) {
			*out_n = unmask_nul(s, n, out);
			return false;
		}
		out[k++] = (uint8_t)bl_char_to_byte[cp];
	}
	*out_n = k;
	return true;
}

/* Parse JSON text with each unescaped \u0000 replaced by NUL_MASK. */
static json_t *load_json_masked(const char *s, size_t n, json_error_t *je, titan_err *err)
{
	size_t extra = 0;
	for (size_t i = 0; i + 6 <= n; i++)
		if (s[i] == '\\' && !memcmp(s + i + 1, "u0000", 5))
			extra++;
	char *buf = extra ? malloc(n + extra * 6 + 1) : NULL;
	if (extra && !buf) {
		err_set(err, "out of memory");
		return NULL;
	}
	json_t *root;
	if (extra) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			if (s[i] == '\\' && i + 6 <= n && !memcmp(s + i + 1, "u0000", 5)) {
				memcpy(buf + k, NUL_MASK, 12);
				k += 12, i += 5;
			} else if (s[i] == '\\' && i + 1 < n) {
				buf[k++] = s[i++]; /* an escaped character, e.g. \\ */
				buf[k++] = s[i];
			} else {
				buf[k++] = s[i];
			}
		}
		root = json_loadb(buf, k, 0, je);
		free(buf);
	} else {
		root = json_loadb(s, n, 0, je);
	}
	if (!root)
		err_set(err, "line %d: %s", je->line, je->text);
	return root;
}

int tok_alloc_ids(tok *t, int64_t n, titan_err *err)
{
	t->n_vocab = n;
	t->off = calloc((size_t)n, sizeof *t->off);
	t->len = malloc((size_t)n * sizeof *t->len);
	t->flags = calloc((size_t)n, 1);
	t->dec = calloc((size_t)n, sizeof *t->dec);
	t->dec_len = calloc((size_t)n, sizeof *t->dec_len);
	if (!t->off || !t->len || !t->flags || !t->dec || !t->dec_len)
		return err_set(err, "out of memory for %lld token ids", (long long)n);
	for (int64_t i = 0; i < n; i++)
		t->len[i] = UINT32_MAX;
	return 0;
}

/* Token bytes go to one pool; grow it as needed. */
typedef struct pool_w {
	uint8_t *p;
	size_t n, cap;
} pool_w;

static int pool_add(pool_w *w, const uint8_t *b, size_t n, uint64_t *off)
{
	if (w->n + n > w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 1 << 20;
		while (cap < w->n + n)
			cap *= 2;
		uint8_t *p = realloc(w->p, cap);
		if (!p)
			return -1;
		w->p = p, w->cap = cap;
	}
	memcpy(w->p + w->n, b, n);
	*off = w->n;
	w->n += n;
	return 0;
}

static int set_token(tok *t, pool_w *w, int64_t id, const uint8_t *b, size_t n, uint8_t flags,
		     titan_err *err)
{
	if (id < 0 || id >= t->n_vocab)
		return err_set(err, "token id %lld out of range 0..%lld", (long long)id,
			       (long long)t->n_vocab - 1);
	if (pool_add(w, b, n, &t->off[id]))
		return err_set(err, "out of memory for token bytes");
	t->len[id] = (uint32_t)n;
	t->flags[id] = flags;
	return 0;
}

int tok_finish(tok *t, titan_err *err)
{
	if (tok_strmap_build(&t->vocab, t, TOK_F_ADDED | TOK_F_UNREACH, 0, err) ||
	    tok_strmap_build(&t->added, t, TOK_F_ADDED, TOK_F_ADDED, err))
		return -1;
	for (int b = 0; b < 256; b++) {
		uint8_t c = (uint8_t)b;
		t->byte_id[b] = tok_strmap_get(&t->vocab, &c, 1);
	}
	t->n_added_lens = 0;
	memset(t->added_first, 0, sizeof t->added_first);
	for (int64_t id = 0; id < t->n_vocab; id++) {
		if (!(t->flags[id] & TOK_F_ADDED) || t->len[id] == 0 || t->len[id] == UINT32_MAX)
			continue;
		uint32_t n = t->len[id];
		uint8_t first = t->pool[t->off[id]];
		t->added_first[first >> 3] |= (uint8_t)(1u << (first & 7));
		int k = 0;
		while (k < t->n_added_lens && t->added_lens[k] > n)
			k++;
		if (k < t->n_added_lens && t->added_lens[k] == n)
			continue;
		if (t->n_added_lens == (int)(sizeof t->added_lens / sizeof t->added_lens[0]))
			return err_set(err, "added tokens have more than 64 different lengths");
		memmove(t->added_lens + k + 1, t->added_lens + k,
			(size_t)(t->n_added_lens - k) * sizeof t->added_lens[0]);
		t->added_lens[k] = n;
		t->n_added_lens++;
	}
	return 0;
}

/* ---- tokenizer.json ---- */

static int add_stage(tok *t, const char *regex, int mode, int kind, titan_err *err)
{
	if (t->n_splits == TOK_MAX_SPLITS)
		return err_set(err, "more than %d pre-tokenizer stages", TOK_MAX_SPLITS);
	tok_split *s = NULL;
	if (regex && !(s = tok_split_new(regex, mode, err)))
		return -1;
	t->stage_kind[t->n_splits] = (uint8_t)kind;
	t->split[t->n_splits++] = s;
	if (kind != TOK_STAGE_ISOLATED)
		t->extended = true;
	return 0;
}

static int add_split(tok *t, const char *regex, int mode, titan_err *err)
{
	return add_stage(t, regex, mode, TOK_STAGE_ISOLATED, err);
}

/* A Split pattern ({"Regex": ...} or a literal {"String": ...}) as a regex
 * (malloc'd), or NULL with *err set. */
static char *quote_regex(const char *s);
static char *pattern_regex(json_t *pat, const char *what, titan_err *err)
{
	const char *re = json_string_value(json_object_get(pat, "Regex"));
	const char *lit = json_string_value(json_object_get(pat, "String"));
	char *q = re ? strdup(re) : lit ? quote_regex(lit) : NULL;
	if (!re && !lit)
		err_set(err, "%s pattern is neither Regex nor String", what);
	else if (!q)
		err_set(err, "out of memory");
	return q;
}

/* Metaspace: the replacement character and the prepend scheme (always or
 * never; HF's "first" depends on offsets in the original text, which titan
 * does not track). */
static int metaspace(tok *t, json_t *p, bool decoder, titan_err *err)
{
	const char *rep = json_string_value(json_object_get(p, "replacement"));
	const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
	json_t *aps = json_object_get(p, "add_prefix_space"), *split = json_object_get(p, "split");
	uint32_t cp;
	if (!rep || !*rep || uni_utf8_decode((const uint8_t *)rep, strlen(rep), &cp) != strlen(rep) ||
	    (cp & UNI_BAD))
		return err_set(err, "Metaspace replacement is not one character");
	bool prepend = !scheme || !strcmp(scheme, "always");
	if (scheme && strcmp(scheme, "always") && strcmp(scheme, "never"))
		return err_set(err, "Metaspace prepend_scheme %s is not supported (always or never)",
			       scheme);
	if (json_is_false(aps))
		prepend = false;
	if (decoder) {
		t->meta_decode = true;
		t->meta_decode_strip = prepend;
		t->extended = true;
		snprintf(t->meta_rep, sizeof t->meta_rep, "%s", rep);
		t->meta_rep_len = strlen(rep);
		return 0;
	}
	if (split && !json_is_true(split))
		return err_set(err, "Metaspace split false is not supported");
	snprintf(t->meta_rep, sizeof t->meta_rep, "%s", rep);
	t->meta_rep_len = strlen(rep);
	t->meta_prepend = prepend;
	return add_stage(t, NULL, 0, TOK_STAGE_METASPACE, err);
}

/* A literal Split pattern ({"String": ...}) as a regex. */
static char *quote_regex(const char *s)
{
	size_t n = strlen(s);
	char *o = malloc(2 * n + 1), *q = o;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
			*q++ = '\\';
		*q++ = (char)c;
	}
	*q = 0;
	return o;
}

static int pretok_one(tok *t, json_t *p, int mode, bool *bytelevel, titan_err *err)
{
	const char *type = json_string_value(json_object_get(p, "type"));
	if (!type)
		return err_set(err, "pre_tokenizer without a type");
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(p, "pretokenizers"), *q;
		size_t i;
		if (!json_is_array(list))
			return err_set(err, "pre_tokenizer Sequence without a pretokenizers list");
		json_array_foreach(list, i, q)
			if (pretok_one(t, q, mode, bytelevel, err))
				return -1;
		return 0;
	}
	if (*bytelevel)
		return err_set(err, "pre_tokenizer %s after ByteLevel is not supported", type);
	if (!strcmp(type, "WhitespaceSplit"))
		return add_stage(t, NULL, 0, TOK_STAGE_WHITESPACE, err);
	if (!strcmp(type, "Metaspace"))
		return metaspace(t, p, false, err);
	if (!strcmp(type, "ByteLevel")) {
		if (json_is_true(json_object_get(p, "add_prefix_space")))
			return err_set(err, "ByteLevel add_prefix_space true is not supported");
		*bytelevel = true;
		json_t *ur = json_object_get(p, "use_regex");
		/* HF's default for use_regex is true. */
		if (!ur || json_is_true(ur))
			return add_split(t, tok_re_gpt2, mode, err);
		return 0;
	}
	if (!strcmp(type, "Split")) {
		const char *beh = json_string_value(json_object_get(p, "behavior"));
		bool invert = json_is_true(json_object_get(p, "invert"));
		bool isolated = beh && !strcmp(beh, "Isolated") && !invert;
		/* Removed with invert: the gaps go, the matches stay (CLIP). */
		bool matches = beh && !strcmp(beh, "Removed") && invert;
		if (!isolated && !matches)
			return err_set(err, "Split behavior %s with invert %s is not supported (Isolated, "
				       "or Removed with invert true)", beh ? beh : "(none)",
				       invert ? "true" : "false");
		char *q = pattern_regex(json_object_get(p, "pattern"), "Split", err);
		if (!q)
			return -1;
		int rc = isolated ? add_split(t, q, mode, err)
				  : add_stage(t, q, TOK_PRETOK_PCRE2, TOK_STAGE_MATCHES, err);
		free(q);
		return rc;
	}
	return err_set(err, "pre_tokenizer type %s is not supported (Split, ByteLevel, "
		       "WhitespaceSplit, Metaspace)", type);
}

static int norm_push(tok *t, tok_norm step, titan_err *err)
{
	if (t->n_norms == TOK_MAX_NORMS)
		return err_set(err, "more than %d normalizer steps", TOK_MAX_NORMS);
	t->norm[t->n_norms++] = step;
	return 0;
}

static int norm_replace(tok *t, json_t *n, titan_err *err)
{
	const char *content = json_string_value(json_object_get(n, "content"));
	if (!content)
		return err_set(err, "normalizer Replace without a content string");
	char *q = pattern_regex(json_object_get(n, "pattern"), "Replace", err);
	if (!q)
		return -1;
	tok_norm st = {.kind = TOK_NORM_REPLACE, .content = strdup(content),
		       .content_len = strlen(content)};
	st.re = st.content ? tok_split_new(q, TOK_PRETOK_PCRE2, err) : NULL;
	free(q);
	if (!st.content)
		err_set(err, "out of memory");
	if (!st.re || norm_push(t, st, err)) {
		free(st.content);
		tok_split_free(st.re);
		return -1;
	}
	return 0;
}

/* The normalizer's steps into t->norm, in order (a Sequence flattened). */
static int norm_steps(tok *t, json_t *n, titan_err *err)
{
	const char *type = json_string_value(json_object_get(n, "type"));
	if (!type)
		return err_set(err, "normalizer without a type");
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "normalizers"), *q;
		size_t i;
		json_array_foreach(list, i, q)
			if (norm_steps(t, q, err))
				return -1;
		return 0;
	}
	if (!strcmp(type, "NFC"))
		return norm_push(t, (tok_norm){.kind = TOK_NORM_NFC}, err);
	if (!strcmp(type, "Lowercase"))
		return norm_push(t, (tok_norm){.kind = TOK_NORM_LOWERCASE}, err);
	if (!strcmp(type, "Strip"))
		return norm_push(t, (tok_norm){.kind = TOK_NORM_STRIP,
				 .left = json_is_true(json_object_get(n, "strip_left")),
				 .right = json_is_true(json_object_get(n, "strip_right"))}, err);
	if (!strcmp(type, "Replace"))
		return norm_replace(t, n, err);
	if (!strcmp(type, "Precompiled")) {
		json_t *cm = json_object_get(n, "precompiled_charsmap");
		tok_charsmap *c;
		if (!json_is_string(cm))
			return err_set(err, "normalizer Precompiled without a precompiled_charsmap string");
		if (tok_charsmap_load(&c, json_string_value(cm), json_string_length(cm), err))
			return -1;
		if (norm_push(t, (tok_norm){.kind = TOK_NORM_PRECOMPILED, .charsmap = c}, err)) {
			tok_charsmap_free(c);
			return -1;
		}
		return 0;
	}
	return err_set(err, "normalizer %s is not supported (NFC, Precompiled, Replace, Lowercase, "
		       "Strip, or a Sequence of them)", type);
}

/* NFC alone keeps the fast path (t->nfc, what the compiled cache holds). */
static int normalizer(tok *t, json_t *n, titan_err *err)
{
	if (!n || json_is_null(n))
		return 0;
	if (norm_steps(t, n, err))
		return -1;
	bool only_nfc = true;
	for (int k = 0; k < t->n_norms; k++)
		only_nfc &= t->norm[k].kind == TOK_NORM_NFC;
	if (only_nfc) {
		t->nfc = t->n_norms > 0;
		t->n_norms = 0;
	} else {
		t->extended = true;
	}
	return 0;
}

static int64_t json_max_id(json_t *vocab, json_t *added)
{
	int64_t max = -1;
	const char *k;
	json_t *v;
	json_object_foreach(vocab, k, v)
		if (json_integer_value(v) > max)
			max = json_integer_value(v);
	size_t i;
	json_array_foreach(added, i, v) {
		int64_t id = json_integer_value(json_object_get(v, "id"));
		if (id > max)
			max = id;
	}
	return max;
}

static int load_vocab(tok *t, pool_w *w, json_t *vocab, titan_err *err)
{
	const char *k;
	json_t *v;
	uint8_t buf[4096];
	json_object_foreach(vocab, k, v) {
		size_t n = strlen(k);
		if (!json_is_integer(v))
			return err_set(err, "vocab entry \"%.40s\" is not an integer id", k);
		if (n > sizeof buf)
			return err_set(err, "vocab entry of %zu bytes is too long", n);
		int64_t id = json_integer_value(v);
		/* HF keeps every string of a shared id; titan's tables hold one token
		 * per id, and dropping the others would lose their text silently. */
		if (id >= 0 && id < t->n_vocab && t->len[id] != UINT32_MAX)
			return err_set(err, "model.vocab: id %lld is given to \"%.40s\" and to another "
				       "entry (titan needs one string per id)", (long long)id, k);
		size_t m;
		bool ok = t->vocab_raw ? (m = unmask_nul(k, n, buf), true) : bytelevel_decode(k, n, buf, &m);
		if (set_token(t, w, id, buf, m, ok ? 0 : TOK_F_UNREACH, err))
			return -1;
	}
	return 0;
}

static int load_merges(tok *t, json_t *vocab, json_t *merges, titan_err *err)
{
	if (json_array_size(merges) >= UINT32_MAX)
		return err_set(err, "%zu merges: too many", json_array_size(merges));
	if (tok_pairmap_init(&t->pairs, json_array_size(merges), t->n_vocab,
			     (uint32_t)json_array_size(merges), err))
		return -1;
	size_t i;
	json_t *m;
	char ab[8192];
	json_array_foreach(merges, i, m) {
		const char *a, *b;
		size_t na, nb;
		char line[4096];
		if (json_is_string(m)) {
			/* "a b": ByteLevel tokens hold no space (U+0020 is "Ġ"). */
			const char *s = json_string_value(m), *sp = strchr(s, ' ');
			if (!sp || strchr(sp + 1, ' ') || strlen(s) >= sizeof line)
				return err_set(err, "merges[%zu] \"%.60s\" is not \"a b\"", i, s);
			memcpy(line, s, strlen(s) + 1);
			line[sp - s] = 0;
			a = line, b = line + (sp - s) + 1;
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
			a = json_string_value(json_array_get(m, 0));
			b = json_string_value(json_array_get(m, 1));
		} else {
			return err_set(err, "merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
		}
		na = strlen(a), nb = strlen(b);
		if (na + nb >= sizeof ab)
			return err_set(err, "merges[%zu] is too long", i);
		memcpy(ab, a, na);
		memcpy(ab + na, b, nb + 1);
		json_t *ia = json_object_get(vocab, a), *ib = json_object_get(vocab, b),
		       *iab = json_object_get(vocab, ab);
		if (!ia || !ib || !iab)
			return err_set(err, "merges[%zu] \"%s\" + \"%s\": token not in the vocabulary",
				       i, a, b);
		tok_pairmap_put(&t->pairs, (int32_t)json_integer_value(ia),
				(int32_t)json_integer_value(ib), (uint32_t)i,
				(int32_t)json_integer_value(iab));
	}
	return 0;
}

/* Whether id already holds a token whose text is not content (raw, or in
 * ByteLevel form), which an added token would silently replace. */
static bool clashes(const tok *t, const pool_w *w, int64_t id, const uint8_t *content, size_t n)
{
	if (id < 0 || id >= t->n_vocab || t->len[id] == UINT32_MAX)
		return false;
	if (t->vocab_raw)
		return t->len[id] != n || memcmp(w->p + t->off[id], content, n);
	const uint8_t *have = w->p + t->off[id];
	size_t hn = t->len[id];
	if (hn == n && !memcmp(have, content, n))
		return false;
	uint8_t *d = malloc(n + 1);
	size_t dn = 0;
	if (!d)
		return false;
	bytelevel_decode((const char *)content, n, d, &dn);
	bool same = dn == hn && !memcmp(d, have, hn);
	free(d);
	return !same;
}

/* Make id the added token whose text is content (n raw bytes), as HF's
 * add_tokens does; what names it (for messages) is where it came from. */
static int add_token(tok *t, pool_w *w, int64_t id, const uint8_t *content, size_t n,
		     bool special, const char *what, titan_err *err)
{
	if (clashes(t, w, id, content, n))
		return err_set(err, "%s \"%.40s\": id %lld is already the vocabulary's token for "
			       "other text (titan needs one string per id)", what, (const char *)content,
			       (long long)id);
	if (set_token(t, w, id, content, n, TOK_F_ADDED | (special ? TOK_F_SPECIAL : 0), err))
		return -1;
	if (t->vocab_raw)
		return 0;
	/* HF decodes an added token through the ByteLevel decoder too. */
	uint8_t *d = malloc(n + 1);
	size_t dn = 0;
	if (!d)
		return err_set(err, "out of memory");
	bytelevel_decode((const char *)content, n, d, &dn);
	free(t->dec[id]);
	t->dec[id] = NULL;
	if (dn == n && !memcmp(d, content, n)) {
		free(d);
	} else {
		t->dec[id] = d;
		t->dec_len[id] = (uint32_t)dn;
	}
	return 0;
}

static int load_added(tok *t, pool_w *w, json_t *added, titan_err *err)
{
	size_t i;
	json_t *a;
	json_array_foreach(added, i, a) {
		json_t *c = json_object_get(a, "content");
		int64_t id = json_integer_value(json_object_get(a, "id"));
		if (!json_is_string(c) || !json_is_integer(json_object_get(a, "id")))
			return err_set(err, "added_tokens[%zu] lacks id or content", i);
		size_t n = json_string_length(c);
		uint8_t *content = malloc(n + 1);
		if (!content)
			return err_set(err, "out of memory");
		n = unmask_nul(json_string_value(c), n, content);
		content[n] = 0; /* for messages */
		char what[64];
		snprintf(what, sizeof what, "added_tokens[%zu]", i);
		int rc = add_token(t, w, id, content, n, json_is_true(json_object_get(a, "special")),
				   what, err);
		free(content);
		if (rc)
			return -1;
	}
	return 0;
}

/* ---- tokenizer_config.json and the post-processor: torchtitan's view ----
 *
 * torchtitan 0.2.2's HuggingFaceTokenizer adds every token tokenizer_config.json
 * names (bos_token, eos_token, pad_token, unk_token, sep_token, cls_token,
 * mask_token, then each added_tokens_decoder entry) to the tokenizer as a
 * special token, so such text in a document is cut out as that token, and a
 * token the tokenizer lacks gets the next free id.  Its dataset encodes every
 * document with add_bos=True, add_eos=True: HF's post-processor template first,
 * then BOS in front and EOS at the end unless the template already adds them. */

enum { CFG_MAX = 1024 }; /* config tokens kept; more is refused */

typedef struct cfg_tok {
	const char *content; /* UTF-8, NUL-masked like the vocabulary (see unmask_nul) */
	bool special;
	int64_t id;          /* assigned by cfg_assign_ids */
} cfg_tok;

typedef struct cfg {
	json_t *root;        /* NULL: no tokenizer_config.json */
	cfg_tok tok[CFG_MAX];
	size_t n;
	const char *bos, *eos; /* the bos_token / eos_token strings, or NULL */
	const char *pad;       /* pad_token, or NULL */
} cfg;

/* A token entry: a string, or an object whose "content" is one (torchtitan's
 * _get_token_from_config); NULL for null; -1 for anything else. */
static int cfg_string(json_t *v, const char **out)
{
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!json_is_string(v))
		return -1;
	*out = json_string_value(v);
	return 0;
}

static int cfg_push(cfg *c, const char *content, bool special, titan_err *err)
{
	if (c->n == CFG_MAX)
		return err_set(err, "more than %d special tokens", CFG_MAX);
	c->tok[c->n++] = (cfg_tok){content, special, -1};
	return 0;
}

static int cfg_read(cfg *c, const char *path, titan_err *err)
{
	static const char *const keys[] = {"bos_token", "eos_token", "pad_token", "unk_token",
					   "sep_token", "cls_token", "mask_token"};
	struct stat st;
	memset(c, 0, sizeof *c);
	if (!path || stat(path, &st))
		return 0;
	json_error_t je;
	c->root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (!c->root)
		return err_set(err, "%s:%d: %s", path, je.line, je.text);
	if (!json_is_object(c->root))
		return err_set(err, "%s: not a JSON object", path);
	for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
		json_t *v = json_object_get(c->root, keys[k]);
		const char *s;
		if (cfg_string(v, &s))
			return err_set(err, "%s: %s is neither a string nor an object with a content "
				       "string", path, keys[k]);
		bool special = !json_is_object(v) || !json_is_false(json_object_get(v, "special"));
		if (s && cfg_push(c, s, special, err))
			return -1;
		if (k == 0)
			c->bos = s;
		if (k == 1)
			c->eos = s;
		if (k == 2)
			c->pad = s;
	}
	const char *key;
	json_t *v;
	json_object_foreach(json_object_get(c->root, "added_tokens_decoder"), key, v) {
		json_t *content = json_object_get(v, "content");
		if (json_is_object(v) && json_is_string(content) &&
		    cfg_push(c, json_string_value(content),
			     !json_is_false(json_object_get(v, "special")), err))
			return -1;
	}
	return 0;
}

/* Ids for the config's tokens the way HF's add_tokens gives them: an added
 * token's or a vocabulary entry's with the same text, else the next free one
 * (the largest added id + 1, or the vocabulary's size when that is larger).
 * *max_id grows to cover new ones. */
static void cfg_assign_ids(cfg *c, json_t *vocab, json_t *added, int64_t *max_id)
{
	int64_t added_max = -1, vocab_size = (int64_t)json_object_size(vocab);
	size_t i;
	json_t *a;
	json_array_foreach(added, i, a)
		if (json_integer_value(json_object_get(a, "id")) > added_max)
			added_max = json_integer_value(json_object_get(a, "id"));
	for (size_t k = 0; k < c->n; k++) {
		int64_t id = -1;
		json_array_foreach(added, i, a) {
			const char *have = json_string_value(json_object_get(a, "content"));
			if (have && !strcmp(have, c->tok[k].content))
				id = json_integer_value(json_object_get(a, "id"));
		}
		for (size_t j = 0; id < 0 && j < k; j++)
			if (!strcmp(c->tok[j].content, c->tok[k].content))
				id = c->tok[j].id;
		if (id < 0 && json_is_integer(json_object_get(vocab, c->tok[k].content)))
			id = json_integer_value(json_object_get(vocab, c->tok[k].content));
		if (id < 0) {
			id = added_max >= 0 && (added_max >= vocab_size || vocab_size == 0) ? added_max + 1
											    : vocab_size;
			added_max = id;
		}
		c->tok[k].id = id;
		if (id > *max_id)
			*max_id = id;
	}
}

static int cfg_add(tok *t, pool_w *w, const cfg *c, titan_err *err)
{
	for (size_t k = 0; k < c->n; k++) {
		size_t n = strlen(c->tok[k].content);
		uint8_t *content = malloc(n + 1);
		if (!content)
			return err_set(err, "out of memory");
		n = unmask_nul(c->tok[k].content, n, content);
		content[n] = 0;
		int rc = add_token(t, w, c->tok[k].id, content, n, c->tok[k].special,
				   "tokenizer_config.json", err);
		free(content);
		if (rc)
			return -1;
	}
	return 0;
}

/* The ids HF's post-processor puts around a single sequence: before (pre) and
 * after (suf) it, at most 8 each. */
typedef struct affix {
	int32_t pre[8], suf[8];
	int npre, nsuf;
} affix;

static int affix_push(affix *f, bool after, int32_t id, titan_err *err)
{
	int *n = after ? &f->nsuf : &f->npre;
	if (*n == 8)
		return err_set(err, "post_processor adds more than 8 tokens");
	(after ? f->suf : f->pre)[(*n)++] = id;
	return 0;
}

/* TemplateProcessing's "single" template: SpecialToken items before and after
 * the $A sequence, each its special_tokens entry's ids. */
static int template_affix(json_t *pp, affix *f, titan_err *err)
{
	json_t *single = json_object_get(pp, "single"), *item, *specials = json_object_get(pp, "special_tokens");
	size_t i, j;
	bool after = false;
	if (!json_is_array(single))
		return err_set(err, "post_processor TemplateProcessing without a single template");
	json_array_foreach(single, i, item) {
		if (json_object_get(item, "Sequence")) {
			after = true;
			continue;
		}
		const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
		json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *id;
		if (!name || !json_is_array(ids))
			return err_set(err, "post_processor template item %zu names no special token", i);
		json_array_foreach(ids, j, id)
			if (affix_push(f, after, (int32_t)json_integer_value(id), err))
				return -1;
	}
	return 0;
}

/* A post-processor's additions; ByteLevel adds none, a Sequence adds its
 * processors' in turn. */
static int post_affix(json_t *pp, affix *f, titan_err *err)
{
	if (!pp || json_is_null(pp))
		return 0;
	const char *type = json_string_value(json_object_get(pp, "type"));
	if (type && !strcmp(type, "ByteLevel"))
		return 0;
	if (type && !strcmp(type, "TemplateProcessing"))
		return template_affix(pp, f, err);
	if (type && (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing"))) {
		json_t *cls = json_array_get(json_object_get(pp, "cls"), 1);
		json_t *sep = json_array_get(json_object_get(pp, "sep"), 1);
		if (!json_is_integer(cls) || !json_is_integer(sep))
			return err_set(err, "post_processor %s without cls and sep ids", type);
		return affix_push(f, false, (int32_t)json_integer_value(cls), err) ||
		       affix_push(f, true, (int32_t)json_integer_value(sep), err);
	}
	if (type && !strcmp(type, "Sequence")) {
		json_t *list = json_object_get(pp, "processors"), *q;
		size_t i;
		json_array_foreach(list, i, q)
			if (post_affix(q, f, err))
				return -1;
		return 0;
	}
	return err_set(err, "post_processor %s is not supported", type ? type : "(no type)");
}

static bool affix_has(const affix *f, int32_t id)
{
	for (int i = 0; i < f->npre; i++)
		if (f->pre[i] == id)
			return true;
	for (int i = 0; i < f->nsuf; i++)
		if (f->suf[i] == id)
			return true;
	return false;
}

/* BOS / EOS and the training stream's defaults, as torchtitan's encode(text,
 * add_bos=True, add_eos=True) makes them: the template's tokens, BOS in front
 * unless the template adds it, EOS at the end likewise.  torchtitan names no
 * EOS when eos_token is bos_token's text (its elif), so none is added then.
 * titan's stream holds at most one token before and one after a document. */
static int resolve_stream(tok *t, const cfg *c, json_t *root, titan_err *err)
{
	affix f = {0};
	if (post_affix(json_object_get(root, "post_processor"), &f, err))
		return -1;
	memcpy(t->post_pre, f.pre, sizeof f.pre);
	memcpy(t->post_suf, f.suf, sizeof f.suf);
	t->n_post_pre = f.npre, t->n_post_suf = f.nsuf;
	/* The pad token: tokenizer_config.json's, as transformers pads with it,
	 * else the tokenizer.json's own padding settings. */
	json_t *pad_id = json_object_get(json_object_get(root, "padding"), "pad_id");
	t->pad_id = c->pad ? tok_token_id(t, c->pad, strlen(c->pad))
		   : json_is_integer(pad_id) ? (int32_t)json_integer_value(pad_id) : -1;
	t->bos = c->bos ? tok_token_id(t, c->bos, strlen(c->bos)) : -1;
	t->eos = c->eos ? tok_token_id(t, c->eos, strlen(c->eos)) : -1;
	bool named_eos = t->eos >= 0 && !(c->bos && !strcmp(c->bos, c->eos));
	int32_t pre[9], suf[9];
	int npre = 0, nsuf = 0;
	if (t->bos >= 0 && !affix_has(&f, t->bos))
		pre[npre++] = t->bos;
	memcpy(pre + npre, f.pre, (size_t)f.npre * sizeof *pre);
	npre += f.npre;
	memcpy(suf, f.suf, (size_t)f.nsuf * sizeof *suf);
	nsuf = f.nsuf;
	if (named_eos && !affix_has(&f, t->eos))
		suf[nsuf++] = t->eos;
	if (npre > 1 || nsuf > 1 || (npre && t->bos >= 0 && pre[0] != t->bos) ||
	    (nsuf && t->eos >= 0 && suf[0] != t->eos))
		return err_set(err, "torchtitan would put %d token(s) before and %d after each document "
			       "(post_processor and tokenizer_config.json); titan's token stream holds "
			       "one BOS and one EOS", npre, nsuf);
	if (npre)
		t->bos = pre[0];
	if (nsuf)
		t->eos = suf[0];
	t->add_bos = npre == 1;
	t->add_eos = nsuf == 1;
	return 0;
}

static int hf_model(tok *t, json_t *model, titan_err *err)
{
	const char *type = json_string_value(json_object_get(model, "type"));
	if (type && !strcmp(type, "Unigram")) {
		t->model = TOK_MODEL_UNIGRAM;
		t->vocab_raw = true;
		t->extended = true;
		return 0;
	}
	if (!type || strcmp(type, "BPE"))
		return err_set(err, "model type %s is not supported (BPE or Unigram)", type ? type : "?");
	if (json_is_true(json_object_get(model, "byte_fallback")))
		return err_set(err, "BPE byte_fallback true is not supported");
	json_t *d = json_object_get(model, "dropout");
	if (json_is_number(d) && json_number_value(d) > 0)
		return err_set(err, "BPE dropout is not supported");
	const char *prefix = json_string_value(json_object_get(model, "continuing_subword_prefix"));
	if (prefix && *prefix)
		return err_set(err, "BPE continuing_subword_prefix \"%s\" is not supported", prefix);
	t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
	const char *eow = json_string_value(json_object_get(model, "end_of_word_suffix"));
	if (eow && *eow) {
		if (t->ignore_merges)
			return err_set(err, "BPE end_of_word_suffix with ignore_merges is not supported");
		t->has_eow = true;
		t->extended = true;
	}
	return 0;
}

/* BPE's end_of_word_suffix (CLIP's "</w>"): HF appends it to a word's last
 * character before merging, so each byte's suffixed token must exist. */
static int eow_ids(tok *t, json_t *model, titan_err *err)
{
	if (!t->has_eow)
		return 0;
	const char *eow = json_string_value(json_object_get(model, "end_of_word_suffix"));
	size_t n = strlen(eow), m;
	uint8_t key[256];
	if (n + 1 > sizeof key)
		return err_set(err, "BPE end_of_word_suffix is too long");
	bytelevel_decode(eow, n, key + 1, &m);
	for (int b = 0; b < 256; b++) {
		key[0] = (uint8_t)b;
		t->eow_id[b] = tok_strmap_get(&t->vocab, key, m + 1);
		if (t->eow_id[b] < 0)
			return err_set(err, "BPE end_of_word_suffix: no token for byte 0x%02x + \"%s\"",
				       b, eow);
	}
	return 0;
}

/* A Unigram vocabulary (a list of [piece, score]) as the {piece: id} object
 * the rest of the loader reads (ids are list positions); NULL when out of
 * memory. */
static json_t *unigram_vocab_object(json_t *list)
{
	json_t *o = json_object(), *e;
	size_t i;
	if (!o)
		return NULL;
	json_array_foreach(list, i, e) {
		const char *piece = json_string_value(json_array_get(e, 0));
		if (piece && json_object_set_new(o, piece, json_integer((json_int_t)i))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

int tok_load_hf_json(tok *t, const char *json_path, const char *config_path, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, json_path, err))
		return -1;
	int rc = tok_load_hf_text(t, (const char *)m.data, m.size, config_path, err);
	mfile_close(&m);
	if (rc)
		err_prefix(err, "%s", json_path);
	return rc;
}

int tok_load_hf_text(tok *t, const char *text, size_t n, const char *config_path,
		     titan_err *err)
{
	init_bytelevel();
	if (text && n >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
		return err_set(err, "starts with a UTF-8 byte order mark, which JSON text must not "
			       "(HF tokenizers refuses it too): remove the first 3 bytes");
	json_error_t je;
	json_t *root = load_json_masked(text ? text : "", text ? n : 0, &je, err);
	if (!root)
		return -1;
	int rc = -1;
	pool_w w = {0};
	cfg *c = calloc(1, sizeof *c);
	if (!c) {
		json_decref(root);
		return err_set(err, "out of memory");
	}
	json_t *model = json_object_get(root, "model"), *uvocab = NULL;
	json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
	json_t *added = json_object_get(root, "added_tokens");
	if (hf_model(t, model, err))
		goto out;
	if (t->model == TOK_MODEL_UNIGRAM) {
		if (tok_unigram_load(t, model, err))
			goto out;
		if (!(vocab = uvocab = unigram_vocab_object(json_object_get(model, "vocab")))) {
			err_set(err, "out of memory");
			goto out;
		}
	} else if (!json_is_object(vocab) || !json_is_array(merges)) {
		err_set(err, "no model.vocab object or model.merges list");
		goto out;
	}
	if (added && !json_is_array(added)) {
		err_set(err, "added_tokens is not a list");
		goto out;
	}
	if (cfg_read(c, config_path, err))
		goto out;
	int64_t max = json_max_id(vocab, added);
	cfg_assign_ids(c, vocab, added, &max);
	if (max < 0 || max >= TOK_MAX_IDS) {
		err_set(err, "bad vocabulary: largest id %lld (expected 0..%d)", (long long)max,
			TOK_MAX_IDS - 1);
		goto out;
	}
	bool bytelevel = false;
	json_t *pre = json_object_get(root, "pre_tokenizer");
	if (normalizer(t, json_object_get(root, "normalizer"), err) ||
	    (pre && !json_is_null(pre) && pretok_one(t, pre, t->pretok_mode, &bytelevel, err)))
		goto out;
	if (!bytelevel && t->model == TOK_MODEL_BPE) {
		err_set(err, "no ByteLevel pre-tokenizer: not a ByteLevel BPE tokenizer");
		goto out;
	}
	if (bytelevel && t->model == TOK_MODEL_UNIGRAM) {
		err_set(err, "a ByteLevel pre-tokenizer with a Unigram model is not supported");
		goto out;
	}
	json_t *dec = json_object_get(root, "decoder");
	const char *dec_type = json_string_value(json_object_get(dec, "type"));
	if (dec_type && !strcmp(dec_type, "Metaspace") && metaspace(t, dec, true, err))
		goto out;
	if (tok_alloc_ids(t, max + 1, err) || load_vocab(t, &w, vocab, err) ||
	    (t->model == TOK_MODEL_BPE && load_merges(t, vocab, merges, err)) ||
	    load_added(t, &w, added, err) || cfg_add(t, &w, c, err))
		goto out;
	t->pool = w.p;
	w.p = NULL;
	if (tok_finish(t, err) || eow_ids(t, model, err) || resolve_stream(t, c, root, err))
		goto out;
	rc = 0;
out:
	free(w.p);
	json_decref(c->root);
	free(c);
	json_decref(uvocab);
	json_decref(root);
	return rc;
}

/* ---- tiktoken files ---- */

static int b64val(uint8_t c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

long tok_b64decode(const uint8_t *s, size_t n, uint8_t *out, size_t cap)
{
	size_t k = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '=')
			break;
		int v = b64val(s[i]);
		if (v < 0)
			return -1;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (k == cap)
				return -1;
			out[k++] = (uint8_t)(acc >> bits);
		}
	}
	return (long)k;
}

typedef struct special {
	const char *name;
	int32_t id;
} special;

static const special cl100k_specials[] = {
	{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
	{"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}, {NULL, 0}};
static const special o200k_specials[] = {
	{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}, {NULL, 0}};

/* The encodings a tiktoken file can be: by the file's SHA-256 (the hashes
 * tiktoken and Meta publish), else by its number of ranks. */
typedef struct tt_encoding {
	const char *name, *sha256;
	int64_t n_ranks;
	const char *regex;
} tt_encoding;

static const tt_encoding tt_encodings[] = {
	{"llama3", "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55", 128000,
	 tok_re_llama3},
	{"cl100k_base", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7", 100256,
	 tok_re_llama3},
	{"o200k_base", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", 199998,
	 tok_re_o200k},
};

/* Meta's tokenizer.py: 256 specials after the 128,000 ranks. */
static int llama3_specials(tok *t, pool_w *w, titan_err *err)
{
	static const char *const first[] = {
		"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
		"<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
		"<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
		"<|reserved_special_token_4|>", "<|eot_id|>"};
	for (int i = 0; i < 256; i++) {
		char name[64];
		if (i < 10)
			snprintf(name, sizeof name, "%s", first[i]);
		else
			snprintf(name, sizeof name, "<|reserved_special_token_%d|>", i - 5);
		if (set_token(t, w, 128000 + i, (const uint8_t *)name, strlen(name),
			      TOK_F_ADDED | TOK_F_SPECIAL, err))
			return -1;
	}
	t->bos = 128000, t->eos = 128001;
	return 0;
}

static int table_specials(tok *t, pool_w *w, const special *sp, titan_err *err)
{
	for (; sp->name; sp++)
		if (set_token(t, w, sp->id, (const uint8_t *)sp->name, strlen(sp->name),
			      TOK_F_ADDED | TOK_F_SPECIAL, err))
			return -1;
	t->bos = -1; /* EOS is looked up once the maps exist */
	return 0;
}

/* Count lines and check "base64 rank" with rank == line number. */
static int tt_parse(tok *t, pool_w *w, const mfile *m, int64_t n_ranks, titan_err *err)
{
	const uint8_t *s = m->data, *end = m->data + m->size;
	int64_t line = 0;
	uint8_t buf[1024];
	while (s < end) {
		const uint8_t *nl = memchr(s, '\n', (size_t)(end - s));
		const uint8_t *le = nl ? nl : end;
		if (le == s) {
			s = le + 1;
			continue;
		}
		const uint8_t *sp = memchr(s, ' ', (size_t)(le - s));
		if (!sp)
			return err_set(err, "line %lld: expected \"base64 rank\"", (long long)line + 1);
		long n = tok_b64decode(s, (size_t)(sp - s), buf, sizeof buf);
		char *e;
		long long rank = strtoll((const char *)sp + 1, &e, 10);
		if (n <= 0 || (const uint8_t *)e != le || rank < 0 || rank >= n_ranks)
			return err_set(err, "line %lld: bad token or rank", (long long)line + 1);
		if (t->len[rank] != UINT32_MAX)
			return err_set(err, "line %lld: rank %lld twice", (long long)line + 1, rank);
		if (set_token(t, w, rank, buf, (size_t)n, 0, err))
			return -1;
		line++;
		s = le + 1;
	}
	if (line != n_ranks)
		return err_set(err, "%lld ranks, expected %lld", (long long)line, (long long)n_ranks);
	return 0;
}

/* tiktoken merges any adjacent pair whose concatenation is a token, lowest
 * rank first: list every split of every token into two tokens. */
static int tt_pairs(tok *t, int64_t n_ranks, titan_err *err)
{
	size_t expect = 0;
	for (int64_t id = 0; id < n_ranks; id++)
		expect += t->len[id] - 1;
	if (tok_pairmap_init(&t->pairs, expect, t->n_vocab, (uint32_t)n_ranks, err))
		return -1;
	for (int64_t id = 0; id < n_ranks; id++) {
		const uint8_t *p = t->pool + t->off[id];
		uint32_t n = t->len[id];
		for (uint32_t k = 1; k < n; k++) {
			int32_t a = tok_strmap_get(&t->vocab, p, k);
			int32_t b = a >= 0 ? tok_strmap_get(&t->vocab, p + k, n - k) : -1;
			if (b >= 0)
				tok_pairmap_put(&t->pairs, a, b, (uint32_t)id, (int32_t)id);
		}
	}
	tok_pairmap_fit(&t->pairs);
	for (int b = 0; b < 256; b++)
		if (t->byte_id[b] < 0)
			return err_set(err, "no token for the single byte 0x%02x", b);
	return 0;
}

static int count_lines(const mfile *m)
{
	int64_t n = 0;
	for (size_t i = 0; i < m->size; i++)
		n += m->data[i] == '\n';
	if (m->size && m->data[m->size - 1] != '\n')
		n++;
	return (int)n;
}

int tok_load_tiktoken(tok *t, const char *path, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err))
		return -1;
	int rc = -1;
	pool_w w = {0};
	char hex[65];
	uint8_t dig[32];
	if (sha256(m.data, m.size, dig, err))
		goto out;
	sha256_hex(dig, hex);
	const tt_encoding *enc = NULL;
	for (size_t i = 0; i < sizeof tt_encodings / sizeof *tt_encodings; i++)
		if (!strcmp(hex, tt_encodings[i].sha256))
			enc = &tt_encodings[i];
	int64_t lines = count_lines(&m);
	for (size_t i = 0; !enc && i < sizeof tt_encodings / sizeof *tt_encodings; i++)
		if (lines == tt_encodings[i].n_ranks)
			enc = &tt_encodings[i];
	if (!enc) {
		err_set(err, "unknown tiktoken encoding (sha256 %s, %lld ranks): expected llama3, "
			"cl100k_base or o200k_base", hex, (long long)lines);
		goto out;
	}
	snprintf(t->encoding, sizeof t->encoding, "%s", enc->name);
	bool llama = !strcmp(enc->name, "llama3");
	const special *sp = !strcmp(enc->name, "o200k_base") ? o200k_specials : cl100k_specials;
	int64_t n_vocab = llama ? enc->n_ranks + 256 : sp[0].id;
	for (const special *q = sp; !llama && q->name; q++)
		if (q->id + 1 > n_vocab)
			n_vocab = q->id + 1;
	if (tok_alloc_ids(t, n_vocab, err) || tt_parse(t, &w, &m, enc->n_ranks, err) ||
	    (llama ? llama3_specials(t, &w, err) : table_specials(t, &w, sp, err)))
		goto out;
	t->pool = w.p;
	w.p = NULL;
	t->ignore_merges = true; /* tiktoken emits a piece that is a token whole */
	if (tok_finish(t, err) || tt_pairs(t, enc->n_ranks, err))
		goto out;
	if (!llama)
		t->eos = tok_token_id(t, "<|endoftext|>", 13);
	/* torchtitan's TikTokenizer (before 0.2) encoded with bos=True, eos=True. */
	t->add_bos = t->bos >= 0;
	t->add_eos = t->eos >= 0;
	if (add_split(t, enc->regex, t->pretok_mode, err))
		goto out;
	rc = 0;
out:
	free(w.p);
	mfile_close(&m);
	if (rc)
		err_prefix(err, "%s", path);
	return rc;
}
