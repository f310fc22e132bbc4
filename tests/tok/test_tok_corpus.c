/* Exactness against the references on the shared corpus, and a driver.
 *
 *   test_tok_corpus                      TAP: every (tokenizer, corpus) pair in
 *                                        tests/tok/ref/ checked document by document
 *   test_tok_corpus encode TOK [pcre2] [plain|extract] < text   ids, one line
 *   test_tok_corpus bench TOK FILE.jsonl [pcre2]   single-thread MB/s of encode
 *                                        (best of TITAN_BENCH_PASSES passes, default 3)
 *
 * The digests come from scripts/tok_reference.py (HF tokenizers, tiktoken).
 * Each document's ids are hashed as SHA-256 of their little-endian int32s, and
 * the first 4 bytes kept with the count, keyed by the document's text (see
 * below).  In short runs (ASan, qemu: test_short) only every 20th document is
 * checked and the huge document is the English corpus alone (TITAN_TOK_STRIDE
 * overrides the stride). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "core/mfile.h"
#include "core/sha256.h"
#include "../support/testutil.h"
#include "fixture.h"
#include "tok/tok.h"


static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int load(tok **t, const char *path, int argc, char **argv, int first)
{
	tok_opts o = {0};
	for (int i = first; i < argc; i++) {
		if (!strcmp(argv[i], "pcre2"))
			o.pretok = TOK_PRETOK_PCRE2;
		else if (!strcmp(argv[i], "plain"))
			o.added = TOK_ADDED_PLAIN;
		else if (!strcmp(argv[i], "extract"))
			o.added = TOK_ADDED_EXTRACT;
	}
	titan_err err = {0};
	double t0 = now();
	if (tok_load(t, path, &o, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	fprintf(stderr, "# loaded in %.2f s: %s\n", now() - t0, tok_describe(*t));
	return 0;
}

static int cmd_encode(int argc, char **argv)
{
	tok *t;
	if (argc < 3 || load(&t, argv[2], argc, argv, 3))
		return 2;
	tok_buf in = {0};
	char buf[65536];
	size_t n;
	titan_err err = {0};
	while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
		if (tok_buf_append(&in, buf, n, &err))
			return 1;
	tok_enc *e = tok_enc_new(t, &err);
	tok_ids ids = {0};
	if (!e || tok_encode(e, in.p ? in.p : (const uint8_t *)"", in.n, &ids, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	for (size_t i = 0; i < ids.n; i++)
		printf("%s%d", i ? " " : "", ids.v[i]);
	printf("\n");
	tok_ids_free(&ids);
	tok_buf_free(&in);
	tok_enc_free(e);
	tok_free(t);
	return 0;
}

/* Calls fn on each document's "text" of a JSON Lines file. */
typedef int (*doc_fn)(void *ctx, size_t doc, const char *text, size_t n);

static int each_doc(const char *path, doc_fn fn, void *ctx)
{
	mfile m;
	titan_err err = {0};
	if (mfile_open(&m, path, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	const char *s = (const char *)m.data, *end = s + m.size;
	size_t doc = 0;
	int rc = 0;
	while (s < end && !rc) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end;
		json_error_t je;
		json_t *j = json_loadb(s, (size_t)(le - s), JSON_ALLOW_NUL, &je);
		json_t *tx = json_object_get(j, "text");
		if (!json_is_string(tx)) {
			fprintf(stderr, "%s: line %zu: no \"text\" string\n", path, doc + 1);
			rc = -1;
		} else {
			rc = fn(ctx, doc, json_string_value(tx), json_string_length(tx));
		}
		json_decref(j);
		doc++;
		s = le + 1;
	}
	mfile_close(&m);
	return rc;
}

/* ---- the exactness check ----
 *
 * The references are keyed by document text, not by line, so that they hold
 * for any build of the corpus (../shared's, or the one scripts/fixtures_corpus.py
 * makes from whatever versions of the Debian packages are installed):
 *
 *   tests/tok/ref/CORPUS.keys.zst   "TTKKEY1\0", u32 n, then n keys of 8 bytes
 *                                   (the first bytes of the SHA-256 of a
 *                                   document's UTF-8 text), in ascending order
 *   tests/tok/ref/TOK.CORPUS.bin.zst  "TTKREF2\0", u32 n, the SHA-256 of the
 *                                   uncompressed key file, then per key u32 id
 *                                   count and u32 (first 4 bytes of the SHA-256
 *                                   of the ids as little-endian int32)
 *
 * All integers little-endian.  A document whose key is absent (a fortune a
 * newer package added) is not checked; a corpus the keys cover less than
 * MIN_COVER of is reported (skipped, or failed under CI=true). */
#define MIN_COVER 0.9

typedef struct keys {
	uint32_t n;
	uint8_t sha[32]; /* of the uncompressed file */
	uint8_t *key;    /* (n, 8) */
} keys;

typedef struct ref {
	uint32_t n;
	uint32_t *count, *hash; /* (n) in key order */
} ref;

/* A whole zstd file in memory (malloc'd), or NULL with a message. */
static uint8_t *zst_read(const char *path, size_t *len)
{
	mfile m;
	titan_err err = {0};
	if (mfile_open(&m, path, &err)) {
		printf("# %s\n", err.msg);
		return NULL;
	}
	unsigned long long cap = ZSTD_getFrameContentSize(m.data, m.size);
	uint8_t *raw = NULL;
	if (cap != ZSTD_CONTENTSIZE_ERROR && cap != ZSTD_CONTENTSIZE_UNKNOWN && cap >= 12)
		raw = malloc(cap);
	size_t n = raw ? ZSTD_decompress(raw, cap, m.data, m.size) : 0;
	mfile_close(&m);
	if (!raw || ZSTD_isError(n) || n != cap) {
		printf("# %s: not a zstd frame with a size\n", path);
		free(raw);
		return NULL;
	}
	*len = n;
	return raw;
}

static int keys_load(keys *k, const char *path)
{
	size_t n;
	uint8_t *raw = zst_read(path, &n);
	titan_err err = {0};
	if (!raw)
		return -1;
	memcpy(&k->n, raw + 8, 4);
	if (memcmp(raw, "TTKKEY1", 8) || 12 + (size_t)k->n * 8 != n || sha256(raw, n, k->sha, &err)) {
		printf("# %s: bad key file\n", path);
		free(raw);
		return -1;
	}
	k->key = malloc((size_t)k->n * 8 + 1);
	if (k->key)
		memcpy(k->key, raw + 12, (size_t)k->n * 8);
	free(raw);
	return k->key ? 0 : -1;
}

static int ref_load(ref *r, const char *path, const keys *k)
{
	size_t n;
	uint8_t *raw = zst_read(path, &n);
	if (!raw)
		return -1;
	memcpy(&r->n, raw + 8, 4);
	if (memcmp(raw, "TTKREF2", 8) || 44 + (size_t)r->n * 8 != n || r->n != k->n ||
	    memcmp(raw + 12, k->sha, 32)) {
		printf("# %s: bad reference file, or not made with this key file\n", path);
		free(raw);
		return -1;
	}
	r->count = malloc(r->n * sizeof *r->count + 1);
	r->hash = malloc(r->n * sizeof *r->hash + 1);
	for (uint32_t i = 0; r->count && r->hash && i < r->n; i++) {
		memcpy(&r->count[i], raw + 44 + 8 * (size_t)i, 4);
		memcpy(&r->hash[i], raw + 48 + 8 * (size_t)i, 4);
	}
	free(raw);
	return r->count && r->hash ? 0 : -1;
}

/* The index of a text's key, or -1 when the keys do not hold it. */
static int64_t key_index(const keys *k, const char *text, size_t len)
{
	uint8_t d[32];
	titan_err err = {0};
	if (sha256(text, len, d, &err))
		return -1;
	size_t lo = 0, hi = k->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = memcmp(k->key + 8 * mid, d, 8);
		if (!c)
			return (int64_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* A corpus read once: every document's text and its reference index. */
typedef struct corpus {
	const char *name;
	char path[4096];
	size_t n, cap;
	char **text;
	size_t *len;
	keys k;
	int64_t *idx; /* (n) index into k, -1 when not covered */
	size_t covered;
} corpus;

static int corpus_add(void *ctx, size_t doc, const char *text, size_t n)
{
	(void)doc;
	corpus *c = ctx;
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 1024;
		c->text = realloc(c->text, c->cap * sizeof *c->text);
		c->len = realloc(c->len, c->cap * sizeof *c->len);
		if (!c->text || !c->len)
			return -1;
	}
	c->text[c->n] = malloc(n + 1);
	if (!c->text[c->n])
		return -1;
	memcpy(c->text[c->n], text, n + 1);
	c->len[c->n++] = n;
	return 0;
}

/* Read corpus name from path and index it in tests/tok/ref/NAME.keys.zst. */
static int corpus_read(corpus *c, const char *path, const char *name)
{
	char kpath[4096];
	c->name = name;
	snprintf(c->path, sizeof c->path, "%s", path);
	snprintf(kpath, sizeof kpath, "tests/tok/ref/%s.keys.zst", name);
	if (each_doc(c->path, corpus_add, c) || keys_load(&c->k, kpath))
		return -1;
	c->idx = malloc(c->n * sizeof *c->idx + 1);
	if (!c->idx)
		return -1;
	for (size_t d = 0; d < c->n; d++) {
		c->idx[d] = key_index(&c->k, c->text[d], c->len[d]);
		c->covered += c->idx[d] >= 0;
	}
	printf("# %s: %zu documents, %zu of them in the reference\n", path, c->n, c->covered);
	return 0;
}

static void corpus_free(corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->text[i]);
	free(c->text);
	free(c->len);
	free(c->k.key);
	free(c->idx);
}

/* Single-thread encode speed: the best of TITAN_BENCH_PASSES (default 3)
 * passes over the corpus held in memory, CPU time of the encode calls only
 * (the machine is shared; the best pass is the least disturbed one). */
static int cmd_bench(int argc, char **argv)
{
	tok *t;
	if (argc < 4 || load(&t, argv[2], argc, argv, 4))
		return 2;
	titan_err err = {0};
	corpus c = {0};
	snprintf(c.path, sizeof c.path, "%s", argv[3]);
	if (each_doc(argv[3], corpus_add, &c))
		return 1;
	tok_enc *e = tok_enc_new(t, &err);
	tok_ids ids = {0};
	const char *p = getenv("TITAN_BENCH_PASSES");
	long passes = p ? atol(p) : 3;
	double best = 1e30;
	size_t bytes = 0, tokens = 0;
	for (long r = 0; r < passes && e; r++) {
		double secs = 0;
		bytes = tokens = 0;
		for (size_t d = 0; d < c.n; d++) {
			ids.n = 0;
			double t0 = now();
			if (tok_encode(e, (const uint8_t *)c.text[d], c.len[d], &ids, &err)) {
				fprintf(stderr, "%s\n", err.msg);
				return 1;
			}
			secs += now() - t0;
			bytes += c.len[d];
			tokens += ids.n;
		}
		if (secs < best)
			best = secs;
	}
	printf("bytes %zu tokens %zu seconds %.3f MB/s %.2f\n", bytes, tokens, best,
	       bytes / best / 1e6);
	tok_ids_free(&ids);
	tok_enc_free(e);
	corpus_free(&c);
	tok_free(t);
	return 0;
}

/* Encode every stride-th covered document and compare with the reference. */
static int check_corpus(tok_enc *e, const corpus *c, const ref *r, size_t stride,
			const char *name)
{
	tok_ids ids = {0};
	titan_err err = {0};
	size_t checked = 0, bad = 0;
	double t0 = now();
	for (size_t doc = 0; doc < c->n; doc += stride) {
		int64_t k = c->idx[doc];
		if (k < 0)
			continue;
		ids.n = 0;
		uint8_t d[32];
		if (tok_encode(e, (const uint8_t *)c->text[doc], c->len[doc], &ids, &err) ||
		    sha256(ids.v, ids.n * 4, d, &err)) {
			printf("# %s: document %zu: %s\n", name, doc, err.msg);
			bad++;
			continue;
		}
		uint32_t h;
		memcpy(&h, d, 4);
		checked++;
		if (h == r->hash[k] && ids.n == r->count[k])
			continue;
		if (bad++ < 3) {
			printf("# %s: document %zu (line %zu): %zu ids, reference %u ids "
			       "(hash %08x vs %08x)\n# text: %.200s\n# ids:",
			       name, doc, doc + 1, ids.n, r->count[k], h, r->hash[k], c->text[doc]);
			for (size_t i = 0; i < ids.n && i < 60; i++)
				printf(" %d", ids.v[i]);
			printf("\n# reference ids: $PYTHON scripts/tok_reference.py --show TOKENIZER "
			       "%s %zu\n", c->path, doc);
		}
	}
	tok_ids_free(&ids);
	printf("# %s: %zu documents checked, %zu differ, %.1f s\n", name, checked, bad, now() - t0);
	return bad || !checked ? -1 : 0;
}

static const char *const tokenizers[] = {
	"llama3_1", "qwen3", "torchtitan_test", "llama3_tiktoken", "cl100k_base", "o200k_base",
};

/* A TAP line for a test that cannot run here: skipped, or failed under CI=true. */
static int tap_skip(int *tn, const char *name, const char *why)
{
	if (fixture_ci()) {
		printf("not ok %d %s\n# %s (CI=true)\n", ++*tn, name, why);
		return 1;
	}
	printf("ok %d %s # SKIP %s\n", ++*tn, name, why);
	return 0;
}

/* Check one tokenizer on every corpus; returns the number of failures. */
static int check_tokenizer(const char *tname, int mode, corpus *cs, int ncs, size_t stride,
			   int *tn)
{
	char rel[256];
	snprintf(rel, sizeof rel, "tokenizers/%s", tname);
	const char *tpath = fixture_path(rel);
	tok *t = NULL;
	tok_enc *e = NULL;
	tok_opts o = {.pretok = mode};
	titan_err err = {0};
	double t0 = now();
	if (!tpath)
		;
	else if (tok_load(&t, tpath, &o, &err) || !(e = tok_enc_new(t, &err)))
		printf("# %s\n", err.msg);
	else
		printf("# %s loaded in %.1f s: %s\n", tname, now() - t0, tok_describe(t));
	int bad = 0;
	for (int k = 0; k < ncs; k++) {
		char rpath[4096], name[256], why[512];
		snprintf(rpath, sizeof rpath, "tests/tok/ref/%s.%s.bin.zst", tname, cs[k].name);
		snprintf(name, sizeof name, "%s_%s_ids_match_reference%s", tname, cs[k].name,
			 mode == TOK_PRETOK_PCRE2 ? "_through_pcre2" : "");
		if (!tpath) {
			snprintf(why, sizeof why, "no fixture %s: %s", rel, fixture_how(rel));
			bad += tap_skip(tn, name, why);
			continue;
		}
		if (cs[k].covered < MIN_COVER * (double)cs[k].n) {
			snprintf(why, sizeof why, "the reference holds %zu of the %zu documents of %s: "
				 "remake it with scripts/tok_reference.py", cs[k].covered, cs[k].n,
				 cs[k].path);
			bad += tap_skip(tn, name, why);
			continue;
		}
		ref r = {0};
		int ok = e && !ref_load(&r, rpath, &cs[k].k) && !check_corpus(e, &cs[k], &r, stride, name);
		free(r.count);
		free(r.hash);
		printf("%sok %d %s\n", ok ? "" : "not ", ++*tn, name);
		bad += !ok;
	}
	tok_enc_free(e);
	tok_free(t);
	return bad;
}

/* Pieces of one text as (offset, length) pairs. */
typedef struct pieces {
	const char *base;
	size_t n, cap, *v;
} pieces;

static int collect(void *ctx, const uint8_t *p, size_t n)
{
	pieces *ps = ctx;
	if (ps->n + 2 > ps->cap) {
		ps->cap = ps->cap ? ps->cap * 2 : 1024;
		ps->v = realloc(ps->v, ps->cap * sizeof *ps->v);
		if (!ps->v)
			return -1;
	}
	ps->v[ps->n++] = (size_t)((const char *)p - ps->base);
	ps->v[ps->n++] = n;
	return 0;
}

/* Each hand-written scanner cuts every document into the pieces PCRE2 cuts. */
static int check_scanners(const corpus *cs, int ncs, size_t stride, int *tn)
{
	const struct {
		const char *name, *re;
	} res[] = {{"llama3", tok_re_llama3}, {"qwen2", tok_re_qwen2}, {"gpt2", tok_re_gpt2},
		   {"o200k", tok_re_o200k}};
	int bad = 0;
	for (size_t r = 0; r < sizeof res / sizeof *res; r++) {
		titan_err err = {0};
		tok_split *sc = tok_split_new(res[r].re, TOK_PRETOK_AUTO, &err);
		tok_split *pc = tok_split_new(res[r].re, TOK_PRETOK_PCRE2, &err);
		size_t docs = 0, differ = 0;
		pieces a = {0}, b = {0};
		for (int k = 0; k < ncs && sc && pc; k++)
			for (size_t d = 0; d < cs[k].n; d += stride) {
				a.n = b.n = 0;
				a.base = b.base = cs[k].text[d];
				const uint8_t *t = (const uint8_t *)cs[k].text[d];
				if (tok_split_run(sc, t, cs[k].len[d], collect, &a, &err) ||
				    tok_split_run(pc, t, cs[k].len[d], collect, &b, &err) || a.n != b.n ||
				    memcmp(a.v, b.v, a.n * sizeof *a.v)) {
					if (!differ++)
						printf("# %s: %s document %zu splits differently\n",
						       res[r].name, cs[k].name, d);
				}
				docs++;
			}
		free(a.v);
		free(b.v);
		tok_split_free(sc);
		tok_split_free(pc);
		int ok = sc && pc && docs && !differ;
		printf("# scanner %s: %zu documents, %zu differ from PCRE2\n", res[r].name, docs, differ);
		printf("%sok %d scanner_%s_splits_corpus_like_pcre2\n", ok ? "" : "not ", ++*tn,
		       res[r].name);
		bad += !ok;
	}
	return bad;
}

/* All of a corpus as one document (about 10 MB): it encodes in time linear
 * with the corpus and decodes back to itself. */
static int check_huge_document(const corpus *c, int *tn)
{
	const char *tpath = fixture_path("tokenizers/cl100k_base");
	if (!tpath)
		return tap_skip(tn, "ten_megabyte_document_encodes_and_decodes_back",
				"no fixture tokenizers/cl100k_base: make deps && make fixtures");
	tok *t = NULL;
	tok_enc *e = NULL;
	titan_err err = {0};
	tok_buf doc = {0}, back = {0};
	tok_ids ids = {0};
	int ok = 0;
	for (size_t d = 0; d < c->n; d++)
		if (tok_buf_append(&doc, c->text[d], c->len[d], &err) ||
		    tok_buf_append(&doc, "\n\n", 2, &err))
			goto out;
	if (tok_load(&t, tpath, NULL, &err) || !(e = tok_enc_new(t, &err)))
		goto out;
	double t0 = now();
	if (tok_encode(e, doc.p, doc.n, &ids, &err) || tok_decode(t, ids.v, ids.n, &back, &err))
		goto out;
	double dt = now() - t0;
	printf("# one %zu-byte document: %zu ids, %.2f s\n", doc.n, ids.n, dt);
	ok = back.n == doc.n && !memcmp(back.p, doc.p, doc.n) && dt < 60;
out:
	if (err.msg[0])
		printf("# %s\n", err.msg);
	printf("%sok %d ten_megabyte_document_encodes_and_decodes_back\n", ok ? "" : "not ", ++*tn);
	tok_buf_free(&doc);
	tok_buf_free(&back);
	tok_ids_free(&ids);
	tok_enc_free(e);
	tok_free(t);
	return !ok;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "encode"))
		return cmd_encode(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "bench"))
		return cmd_bench(argc, argv);
	const char *st = getenv("TITAN_TOK_STRIDE");
	size_t stride = st ? strtoul(st, NULL, 10) : test_short() ? 20 : 1;
	if (!stride)
		stride = 1;
	printf("# every %zu%s document checked\n", stride, stride == 1 ? "st" : "th");
	corpus cs[2] = {0};
	int tn = 0, bad = 0;
	const char *en = fixture_path("corpus/en.jsonl"), *multi = fixture_path("corpus/multi.jsonl");
	if (!en || !multi) {
		bad = tap_skip(&tn, "corpus_fixtures_present",
			       "no corpus/en.jsonl or corpus/multi.jsonl: make deps && make fixtures");
		printf("1..%d\n", tn);
		return bad;
	}
	if (corpus_read(&cs[0], en, "en") || corpus_read(&cs[1], multi, "multi")) {
		printf("not ok 1 corpus_fixtures_readable\n1..1\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof tokenizers / sizeof *tokenizers; i++)
		bad += check_tokenizer(tokenizers[i], TOK_PRETOK_AUTO, cs, 2, stride, &tn);
	/* The PCRE2 path too, so both paths are held to the references. */
	bad += check_tokenizer("qwen3", TOK_PRETOK_PCRE2, cs, 1, stride * 2, &tn);
	bad += check_tokenizer("o200k_base", TOK_PRETOK_PCRE2, cs + 1, 1, stride * 2, &tn);
	bad += check_scanners(cs, 2, stride, &tn);
	bad += check_huge_document(&cs[test_short() ? 0 : 1], &tn);
	printf("1..%d\n", tn);
	corpus_free(&cs[0]);
	corpus_free(&cs[1]);
	return bad ? 1 : 0;
}
