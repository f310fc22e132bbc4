/* tok.c: loading dispatch, the encoder (added tokens, NFC, splits, BPE with a
 * piece cache) and the decoder. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/sha256.h"
#include "tok/tok_int.h"
#include "tok/tok_split_int.h"
#include "unicode/unicode.h"

int tok_ids_push(tok_ids *a, int32_t id, titan_err *err)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 1024;
		int32_t *v = realloc(a->v, cap * sizeof *v);
		if (!v)
			return err_set(err, "out of memory for %zu token ids", cap);
		a->v = v, a->cap = cap;
	}
	a->v[a->n++] = id;
	return 0;
}

void tok_ids_free(tok_ids *a)
{
	free(a->v);
	memset(a, 0, sizeof *a);
}

int tok_buf_append(tok_buf *b, const void *p, size_t n, titan_err *err)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q)
			return err_set(err, "out of memory for %zu bytes", cap);
		b->p = q, b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	return 0;
}

void tok_buf_free(tok_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static bool is_dir(const char *p)
{
	struct stat st;
	return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static bool exists(const char *p)
{
	struct stat st;
	return !stat(p, &st);
}

/* What a tokenizer file is, from its first bytes: JSON when an object starts
 * after white space (and a byte order mark, which the JSON loader then names),
 * empty when white space is all there is, or else tiktoken. */
enum { FILE_TIKTOKEN, FILE_JSON, FILE_EMPTY };

static int file_kind(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return FILE_TIKTOKEN; /* the loader reports why it cannot open it */
	uint8_t bom[3];
	size_t got = fread(bom, 1, 3, f);
	if (got < 3 || memcmp(bom, "\xef\xbb\xbf", 3))
		rewind(f);
	int c;
	while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t')
		;
	fclose(f);
	if (c == '{')
		return FILE_JSON;
	return c == EOF ? FILE_EMPTY : FILE_TIKTOKEN;
}

/* The one *.tiktoken file of a folder, if there is exactly one. */
static int find_tiktoken(const char *dir, char *out, size_t cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n > 9 && !strcmp(de->d_name + n - 9, ".tiktoken")) {
			snprintf(out, cap, "%s/%s", dir, de->d_name);
			found++;
		}
	}
	closedir(d);
	return found == 1 ? 0 : -1;
}

const char *tok_cache_dir(char *buf, size_t cap)
{
	const char *v = getenv("TITAN_TOK_CACHE");
	if (v)
		return *v && strcmp(v, "off") ? (snprintf(buf, cap, "%s", v), buf) : NULL;
	if ((v = getenv("XDG_CACHE_HOME")) && *v)
		snprintf(buf, cap, "%s/titan/tokenizers", v);
	else if ((v = getenv("HOME")) && *v)
		snprintf(buf, cap, "%s/.cache/titan/tokenizers", v);
	else
		return NULL;
	return buf;
}

/* SHA-256 of a whole file; -1 when it cannot be read. */
static int file_sha(const char *path, uint8_t out[32], titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err))
		return -1;
	int rc = sha256(m.data ? m.data : (const uint8_t *)"", m.size, out, err);
	mfile_close(&m);
	return rc;
}

static const char *stage_name(const tok *t, int i)
{
	switch (t->stage_kind[i]) {
	case TOK_STAGE_MATCHES: return "matches ";
	case TOK_STAGE_WHITESPACE: return "WhitespaceSplit";
	case TOK_STAGE_METASPACE: return "Metaspace";
	default: return "";
	}
}

static const char *norm_name(int kind)
{
	static const char *const names[] = {"NFC", "Precompiled", "Replace", "Lowercase", "Strip"};
	return names[kind];
}

static void describe(tok *t)
{
	char splits[256] = "", norms[128] = "", model[64];
	size_t k = 0;
	for (int i = 0; i < t->n_splits; i++)
		k += (size_t)snprintf(splits + k, sizeof splits - k, "%s%s%s", i ? ", " : "",
				      stage_name(t, i), t->split[i] ? tok_split_kind(t->split[i]) : "");
	k = 0;
	for (int i = 0; i < t->n_norms; i++)
		k += (size_t)snprintf(norms + k, sizeof norms - k, "%s%s", i ? "+" : "",
				      norm_name(t->norm[i].kind));
	if (t->model == TOK_MODEL_UNIGRAM)
		snprintf(model, sizeof model, "Unigram");
	else
		snprintf(model, sizeof model, "BPE %zu merges%s%s", t->pairs.n,
			 t->ignore_merges ? " (ignore_merges)" : "", t->has_eow ? " (end-of-word suffix)" : "");
	snprintf(t->describe, sizeof t->describe,
		 "%s%s: %lld ids, normalizer %s, pre-tokenizer [%s], %s, "
		 "added tokens %s, Unicode %s%s%s",
		 t->format == TOK_FORMAT_HF_JSON ? "" : "tiktoken ", t->encoding,
		 (long long)t->n_vocab, t->n_norms ? norms : t->nfc ? "NFC" : "none", splits, model,
		 t->added_mode == TOK_ADDED_EXTRACT ? "extracted" : "as text", uni_version,
		 t->cache_note[0] ? "; " : "", t->cache_note);
}

int tok_load(tok **out, const char *path, const tok_opts *opts, titan_err *err)
{
	tok *t = calloc(1, sizeof *t);
	if (!t)
		return err_set(err, "out of memory");
	t->bos = t->eos = t->pad_id = -1;
	t->pretok_mode = opts ? opts->pretok : TOK_PRETOK_AUTO;
	int added = opts ? opts->added : TOK_ADDED_DEFAULT;
	char file[4096], cfg[4096];
	const char *dir_end;
	int rc;
	if (is_dir(path)) {
		snprintf(file, sizeof file, "%s/tokenizer.json", path);
		snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", path);
		if (!exists(file)) {
			snprintf(file, sizeof file, "%s/tokenizer.model", path);
			if (!exists(file) && find_tiktoken(path, file, sizeof file)) {
				free(t);
				return err_set(err, "%s: no tokenizer.json, tokenizer.model or single "
					       "*.tiktoken file in this folder", path);
			}
		}
	} else {
		snprintf(file, sizeof file, "%s", path);
		dir_end = strrchr(path, '/');
		if (dir_end)
			snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", (int)(dir_end - path), path);
		else
			snprintf(cfg, sizeof cfg, "tokenizer_config.json");
	}
	int kind = file_kind(file);
	if (kind == FILE_EMPTY) {
		free(t);
		return err_set(err, "%s: empty (or only white space): neither a tokenizer.json nor a tiktoken file", file);
	}
	/* The compiled cache: keyed by what the load reads and how. */
	const char *cache = opts ? opts->cache_dir : NULL;
	uint8_t key[32], cfg_sha[32];
	struct stat st;
	bool has_cfg = kind == FILE_JSON && !stat(cfg, &st) && S_ISREG(st.st_mode);
	if (file_sha(file, t->source_sha, err) || (has_cfg && file_sha(cfg, cfg_sha, err))) {
		free(t);
		return -1;
	}
	if (cache) {
		tok_cache_key(t->source_sha, has_cfg ? cfg_sha : NULL, added, t->pretok_mode, key);
		int c = tok_cache_read(t, cache, key, err);
		if (c < 0) {
			tok_free(t);
			return -1;
		}
		if (c == 0) {
			describe(t);
			*out = t;
			return 0;
		}
	}
	if (kind == FILE_JSON) {
		t->format = TOK_FORMAT_HF_JSON;
		t->added_mode = added == TOK_ADDED_PLAIN ? TOK_ADDED_PLAIN : TOK_ADDED_EXTRACT;
		snprintf(t->encoding, sizeof t->encoding, "tokenizer.json");
		rc = tok_load_hf_json(t, file, cfg, err);
	} else {
		t->format = TOK_FORMAT_TIKTOKEN;
		t->added_mode = added == TOK_ADDED_EXTRACT ? TOK_ADDED_EXTRACT : TOK_ADDED_PLAIN;
		rc = tok_load_tiktoken(t, file, err);
	}
	if (rc) {
		tok_free(t);
		return -1;
	}
	if (cache)
		tok_cache_write(t, cache, key);
	describe(t);
	*out = t;
	return 0;
}

int tok_load_json_text(tok **out, const char *json, size_t n, const tok_opts *opts,
		       titan_err *err)
{
	tok *t = calloc(1, sizeof *t);
	if (!t)
		return err_set(err, "out of memory");
	t->bos = t->eos = t->pad_id = -1;
	t->pretok_mode = opts ? opts->pretok : TOK_PRETOK_AUTO;
	t->format = TOK_FORMAT_HF_JSON;
	t->added_mode = opts && opts->added == TOK_ADDED_PLAIN ? TOK_ADDED_PLAIN : TOK_ADDED_EXTRACT;
	snprintf(t->encoding, sizeof t->encoding, "tokenizer.json");
	if (sha256(json ? json : "", json ? n : 0, t->source_sha, err) ||
	    tok_load_hf_text(t, json, n, NULL, err)) {
		tok_free(t);
		return -1;
	}
	describe(t);
	*out = t;
	return 0;
}

void tok_free(tok *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n_splits; i++)
		tok_split_free(t->split[i]);
	for (int i = 0; i < t->n_norms; i++) {
		tok_split_free(t->norm[i].re);
		free(t->norm[i].content);
		tok_charsmap_free(t->norm[i].charsmap);
	}
	tok_unigram_free(t->uni);
	if (t->dec)
		for (int64_t i = 0; i < t->n_vocab; i++)
			free(t->dec[i]);
	free(t->dec);
	free(t->dec_len);
	if (t->mapped) { /* the tables are the cache file's pages */
		mfile_close(&t->map);
	} else {
		free(t->pool);
		free(t->off);
		free(t->len);
		free(t->flags);
		tok_strmap_free(&t->vocab);
		tok_strmap_free(&t->added);
		tok_pairmap_free(&t->pairs);
	}
	free(t);
}

int tok_format(const tok *t) { return t->format; }
void tok_fingerprint(const tok *t, uint8_t out[32]) { memcpy(out, t->source_sha, 32); }
const char *tok_encoding_name(const tok *t) { return t->encoding; }
const char *tok_describe(const tok *t) { return t->describe; }
int64_t tok_n_vocab(const tok *t) { return t->n_vocab; }
int32_t tok_bos_id(const tok *t) { return t->bos; }
int32_t tok_eos_id(const tok *t) { return t->eos; }
int32_t tok_pad_id(const tok *t) { return t->pad_id; }
bool tok_default_add_bos(const tok *t) { return t->add_bos; }
bool tok_default_add_eos(const tok *t) { return t->add_eos; }
bool tok_post_adds_eos(const tok *t) { return t->n_post_suf > 0; }

int32_t tok_token_id(const tok *t, const char *s, size_t n)
{
	int32_t id = tok_strmap_get(&t->added, (const uint8_t *)s, n);
	return id >= 0 ? id : tok_strmap_get(&t->vocab, (const uint8_t *)s, n);
}

const uint8_t *tok_token_bytes(const tok *t, int32_t id, size_t *len, bool *special)
{
	if (id < 0 || id >= t->n_vocab || t->len[id] == UINT32_MAX)
		return NULL;
	if (special)
		*special = t->flags[id] & TOK_F_SPECIAL;
	if (t->dec[id]) {
		*len = t->dec_len[id];
		return t->dec[id];
	}
	*len = t->len[id];
	return t->pool + t->off[id];
}

/* HF's Metaspace decoder: the replacement becomes a space, or nothing in the
 * first token when a prefix was prepended. */
static int metaspace_decode(const tok *t, const uint8_t *p, size_t len, bool first, tok_buf *out,
			    titan_err *err)
{
	const char *rep = t->meta_rep;
	size_t rl = t->meta_rep_len, from = 0;
	for (size_t k = 0; k + rl <= len; k++) {
		if (memcmp(p + k, rep, rl))
			continue;
		if (tok_buf_append(out, p + from, k - from, err) ||
		    (!(first && t->meta_decode_strip) && tok_buf_append(out, " ", 1, err)))
			return -1;
		k += rl - 1;
		from = k + 1;
	}
	return tok_buf_append(out, p + from, len - from, err);
}

int tok_decode(const tok *t, const int32_t *ids, size_t n, tok_buf *out, titan_err *err)
{
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const uint8_t *p = tok_token_bytes(t, ids[i], &len, NULL);
		if (!p)
			return err_set(err, "token id %d (at %zu) is not in the vocabulary (0..%lld)",
				       ids[i], i, (long long)t->n_vocab - 1);
		if (t->meta_decode ? metaspace_decode(t, p, len, i == 0, out, err)
				   : tok_buf_append(out, p, len, err))
			return -1;
	}
	return 0;
}

/* ---- the encoder ---- */

/* Pieces of at most CACHE_BYTES bytes that merge to at most CACHE_IDS ids are
 * remembered in a direct-mapped cache (frequent words repeat). */
enum { CACHE_SLOTS = 1 << 16, CACHE_BYTES = 30, CACHE_IDS = 14 };

typedef struct cache_ent {
	uint64_t h;
	uint8_t len, nids;
	uint8_t bytes[CACHE_BYTES];
	int32_t ids[CACHE_IDS];
} cache_ent;

/* Longer pieces (tables drawn with box characters, rules of dashes, runs of
 * spaces) repeat too and cost the most to merge: a second, smaller cache whose
 * entries own a heap block (the ids, then the piece's bytes). */
enum { LONG_SLOTS = 1 << 12, LONG_BYTES = 4096, BATCH = 16 };

typedef struct long_ent {
	uint64_t h;
	uint32_t len, nids;
	int32_t *blob; /* (nids) ids, then len bytes */
} long_ent;

struct tok_enc {
	const tok *t;
	tok_bpe_scratch *bpe;
	tok_uni_scratch *uni;
	tok_pcre pcre;
	cache_ent *cache;
	long_ent *longc;
	/* Pieces wait here in a small batch so that their hash slots can be
	 * prefetched together: the lookups then overlap their cache misses. */
	struct {
		const uint8_t *p;
		size_t n;
		uint64_t h;
	} batch[BATCH];
	int nbatch;
	tok_ids *out;     /* the current call's output */
	titan_err *err;
	tok_piece_fn user_fn; /* tok_pieces: the caller's callback instead of BPE */
	void *user_ctx;
};

tok_enc *tok_enc_new(const tok *t, titan_err *err)
{
	tok_enc *e = calloc(1, sizeof *e);
	if (!e) {
		err_set(err, "out of memory");
		return NULL;
	}
	e->t = t;
	e->bpe = tok_bpe_scratch_new();
	e->uni = tok_uni_scratch_new();
	e->cache = calloc(CACHE_SLOTS, sizeof *e->cache);
	e->longc = calloc(LONG_SLOTS, sizeof *e->longc);
	if (!e->bpe || !e->uni || !e->cache || !e->longc || tok_pcre_init(&e->pcre, err)) {
		err_set(err, "out of memory");
		tok_enc_free(e);
		return NULL;
	}
	return e;
}

void tok_enc_free(tok_enc *e)
{
	if (!e)
		return;
	tok_bpe_scratch_free(e->bpe);
	tok_uni_scratch_free(e->uni);
	if (e->pcre.md)
		tok_pcre_free(&e->pcre);
	free(e->cache);
	if (e->longc)
		for (size_t i = 0; i < LONG_SLOTS; i++)
			free(e->longc[i].blob);
	free(e->longc);
	free(e);
}

static int push_ids(tok_enc *e, const int32_t *ids, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (tok_ids_push(e->out, ids[k], e->err))
			return -1;
	return 0;
}

/* Remember a long piece's ids; a failed allocation only means no caching. */
static void long_put(long_ent *c, uint64_t h, const uint8_t *p, size_t n, const int32_t *ids,
		     size_t nids)
{
	int32_t *blob = malloc(nids * sizeof *ids + n);
	if (!blob)
		return;
	if (nids) /* a piece of bytes without tokens has none (and ids may be NULL) */
		memcpy(blob, ids, nids * sizeof *ids);
	memcpy((uint8_t *)(blob + nids), p, n);
	free(c->blob);
	*c = (long_ent){h, (uint32_t)n, (uint32_t)nids, blob};
}

/* The ids of one piece, h its tok_hash_bytes. */
static int bpe_cached(tok_enc *e, const uint8_t *p, size_t n, uint64_t h)
{
	const tok *t = e->t;
	if (t->ignore_merges) {
		int32_t whole = tok_strmap_get_h(&t->vocab, p, n, h);
		if (whole >= 0)
			return tok_ids_push(e->out, whole, e->err);
	}
	cache_ent *c = NULL;
	long_ent *lc = NULL;
	if (n <= CACHE_BYTES) {
		c = &e->cache[h & (CACHE_SLOTS - 1)];
		if (c->h == h && c->len == n && c->nids && !memcmp(c->bytes, p, n))
			return push_ids(e, c->ids, c->nids);
	} else if (n <= LONG_BYTES) {
		lc = &e->longc[h & (LONG_SLOTS - 1)];
		if (lc->blob && lc->h == h && lc->len == n &&
		    !memcmp((uint8_t *)(lc->blob + lc->nids), p, n))
			return push_ids(e, lc->blob, lc->nids);
	}
	size_t before = e->out->n;
	if (tok_bpe_piece(t, e->bpe, p, n, e->out, e->err))
		return -1;
	size_t got = e->out->n - before;
	if (c && got >= 1 && got <= CACHE_IDS) {
		c->h = h, c->len = (uint8_t)n, c->nids = (uint8_t)got;
		memcpy(c->bytes, p, n);
		memcpy(c->ids, e->out->v + before, got * sizeof *c->ids);
	} else if (lc) {
		long_put(lc, h, p, n, got ? e->out->v + before : NULL, got);
	}
	return 0;
}

static int flush_batch(tok_enc *e)
{
	int n = e->nbatch, rc = 0;
	e->nbatch = 0;
	for (int i = 0; i < n && !rc; i++)
		rc = bpe_cached(e, e->batch[i].p, e->batch[i].n, e->batch[i].h);
	return rc;
}

static int add_piece(tok_enc *e, const uint8_t *p, size_t n)
{
	const tok *t = e->t;
	uint64_t h = tok_hash_bytes(p, n);
	if (t->ignore_merges)
		__builtin_prefetch(&t->vocab.slot[h & t->vocab.mask]);
	else if (n <= CACHE_BYTES)
		__builtin_prefetch(&e->cache[h & (CACHE_SLOTS - 1)]);
	e->batch[e->nbatch].p = p;
	e->batch[e->nbatch].n = n;
	e->batch[e->nbatch].h = h;
	return ++e->nbatch == BATCH ? flush_batch(e) : 0;
}

/* Stage k of the pre-tokenizer's splits; the last stage's pieces go to BPE. */
typedef struct stage_ctx {
	tok_enc *e;
	int k;
} stage_ctx;

static int run_stage(tok_enc *e, int k, const uint8_t *s, size_t n);

static int stage_cb(void *ctx, const uint8_t *p, size_t n)
{
	stage_ctx *c = ctx;
	return run_stage(c->e, c->k + 1, p, n);
}

/* Split Removed with invert: the regex's matches go on, the gaps are dropped. */
static int matches_cb(void *ctx, const uint8_t *p, size_t n, bool is_match)
{
	stage_ctx *c = ctx;
	return is_match ? run_stage(c->e, c->k + 1, p, n) : 0;
}

/* WhitespaceSplit: each run of characters that are not White_Space. */
static int whitespace_stage(tok_enc *e, int k, const uint8_t *s, size_t n)
{
	size_t start = 0;
	bool in = false;
	for (size_t i = 0; i <= n;) {
		uint32_t cp = ' ';
		size_t l = i < n ? uni_utf8_decode(s + i, n - i, &cp) : 1;
		bool ws = i == n || (!(cp & UNI_BAD) && (uni_props(cp) & UNI_PROP_WS));
		if (ws && in) {
			int rc = run_stage(e, k + 1, s + start, i - start);
			if (rc)
				return rc;
		}
		if (!ws && !in)
			start = i;
		in = !ws;
		i += l;
	}
	return 0;
}

/* Metaspace: every ' ' becomes the replacement, which is put in front
 * (prepend_scheme always) unless the text starts with it, and each
 * replacement starts a new piece (split, MergedWithNext). */
static int metaspace_stage(tok_enc *e, int k, const uint8_t *s, size_t n)
{
	const tok *t = e->t;
	const char *rep = t->meta_rep;
	size_t rl = t->meta_rep_len;
	uint8_t *b = malloc(n * rl + rl + 1);
	if (!b)
		return err_set(e->err, "out of memory");
	size_t m = 0;
	bool starts = n && (s[0] == ' ' || (n >= rl && !memcmp(s, rep, rl)));
	if (t->meta_prepend && !starts) {
		memcpy(b, rep, rl);
		m = rl;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(b + m, rep, rl);
			m += rl;
		} else {
			b[m++] = s[i];
		}
	}
	int rc = 0;
	size_t start = 0;
	for (size_t i = 1; i + rl <= m && !rc; i++) {
		if (memcmp(b + i, rep, rl))
			continue;
		rc = run_stage(e, k + 1, b + start, i - start);
		start = i;
		i += rl - 1;
	}
	if (!rc && m > start)
		rc = run_stage(e, k + 1, b + start, m - start);
	if (!rc)
		rc = flush_batch(e); /* the batch points into b */
	free(b);
	return rc;
}

static int run_stage(tok_enc *e, int k, const uint8_t *s, size_t n)
{
	const tok *t = e->t;
	if (k == t->n_splits) {
		if (e->user_fn)
			return e->user_fn(e->user_ctx, s, n);
		if (t->model == TOK_MODEL_UNIGRAM)
			return tok_unigram_piece(t, e->uni, s, n, e->out, e->err);
		return add_piece(e, s, n);
	}
	stage_ctx c = {e, k};
	switch (t->stage_kind[k]) {
	case TOK_STAGE_MATCHES:
		return tok_split_run_marked(t->split[k], &e->pcre, s, n, matches_cb, &c, e->err);
	case TOK_STAGE_WHITESPACE: return whitespace_stage(e, k, s, n);
	case TOK_STAGE_METASPACE: return metaspace_stage(e, k, s, n);
	default: return tok_split_run_with(t->split[k], &e->pcre, s, n, stage_cb, &c, e->err);
	}
}

static int encode_segment(tok_enc *e, const uint8_t *s, size_t n)
{
	if (!n)
		return 0;
	const tok *t = e->t;
	if (t->n_norms || (t->nfc && !uni_is_nfc_quick(s, n))) {
		uint8_t *norm;
		size_t nn;
		if (t->n_norms ? tok_normalize(t, &e->pcre, s, n, &norm, &nn, e->err)
			       : uni_nfc(s, n, &norm, &nn, e->err))
			return -1;
		/* The batch points into norm: empty it before norm goes. */
		int rc = run_stage(e, 0, norm, nn);
		if (!rc)
			rc = flush_batch(e);
		free(norm);
		return rc;
	}
	return run_stage(e, 0, s, n);
}

/* HF cuts added tokens out of the text first, leftmost-longest. */
static int32_t added_at(const tok *t, const uint8_t *s, size_t n, size_t i, uint32_t *len)
{
	for (int k = 0; k < t->n_added_lens; k++) {
		uint32_t l = t->added_lens[k];
		if (l > n - i)
			continue;
		int32_t id = tok_strmap_get(&t->added, s + i, l);
		if (id >= 0) {
			*len = l;
			return id;
		}
	}
	return -1;
}

static int encode_all(tok_enc *e, const uint8_t *s, size_t n)
{
	const tok *t = e->t;
	if (t->added_mode != TOK_ADDED_EXTRACT || !t->n_added_lens || e->user_fn)
		return encode_segment(e, s, n);
	size_t seg = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(t->added_first[s[i] >> 3] & (1u << (s[i] & 7))))
			continue;
		uint32_t len;
		int32_t id = added_at(t, s, n, i, &len);
		if (id < 0)
			continue;
		if (encode_segment(e, s + seg, i - seg) || flush_batch(e) ||
		    tok_ids_push(e->out, id, e->err))
			return -1;
		i += len - 1;
		seg = i + 1;
	}
	return encode_segment(e, s + seg, n - seg);
}

int tok_encode(tok_enc *e, const uint8_t *text, size_t n, tok_ids *out, titan_err *err)
{
	e->out = out;
	e->err = err;
	e->user_fn = NULL;
	e->nbatch = 0;
	int rc = encode_all(e, text, n);
	if (!rc)
		rc = flush_batch(e);
	e->nbatch = 0;
	e->out = NULL;
	return rc ? -1 : 0;
}

int tok_pieces(tok_enc *e, const uint8_t *text, size_t n, tok_piece_fn fn, void *ctx,
	       titan_err *err)
{
	e->err = err;
	e->user_fn = fn;
	e->user_ctx = ctx;
	int rc = encode_segment(e, text, n);
	e->user_fn = NULL;
	return rc;
}

int64_t tok_encode_fixed(tok_enc *e, const uint8_t *text, size_t n, size_t len, int32_t *ids,
			 uint8_t *mask, titan_err *err)
{
	const tok *t = e->t;
	size_t specials = (size_t)(t->n_post_pre + t->n_post_suf);
	if (t->pad_id < 0)
		return err_set(err, "the tokenizer names no pad token (tokenizer_config.json's pad_token)");
	if (len < specials)
		return err_set(err, "length %zu cannot hold the post-processor's %zu special tokens", len,
			       specials);
	tok_ids a = {0};
	if (tok_encode(e, text, n, &a, err)) {
		tok_ids_free(&a);
		return -1;
	}
	/* HF truncates the text's ids (from the right) to leave room for the
	 * special tokens, then adds them, then pads on the right. */
	size_t keep = a.n < len - specials ? a.n : len - specials, k = 0;
	for (int i = 0; i < t->n_post_pre; i++)
		ids[k++] = t->post_pre[i];
	if (keep)
		memcpy(ids + k, a.v, keep * sizeof *ids);
	k += keep;
	for (int i = 0; i < t->n_post_suf; i++)
		ids[k++] = t->post_suf[i];
	tok_ids_free(&a);
	for (size_t i = 0; i < len; i++) {
		if (i >= k)
			ids[i] = t->pad_id;
		if (mask)
			mask[i] = i < k;
	}
	return (int64_t)k;
}
