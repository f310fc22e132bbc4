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
 * the first 4 bytes kept with the count.  Under ASan only every 20th document
 * is checked (TITAN_TOK_STRIDE overrides the stride). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "core/mfile.h"
#include "core/sha256.h"
#include "../support/testutil.h"
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

/* ---- the exactness check ---- */

typedef struct ref {
	uint32_t n_docs;
	uint8_t corpus_sha[32];
	uint32_t *count, *hash; /* (n_docs) */
} ref;

/* tests/tok/ref/NAME.bin.zst: "TTKREF1\0", u32 n_docs, 32-byte SHA-256 of the
 * corpus file, then per document u32 id count and u32 (first 4 bytes of the
 * SHA-256 of the ids as little-endian int32), all little-endian. */
static int ref_load(ref *r, const char *path)
{
	mfile m;
	titan_err err = {0};
	if (mfile_open(&m, path, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	unsigned long long cap = ZSTD_getFrameContentSize(m.data, m.size);
	if (cap == ZSTD_CONTENTSIZE_ERROR || cap == ZSTD_CONTENTSIZE_UNKNOWN || cap < 44) {
		fprintf(stderr, "%s: not a zstd frame with a size\n", path);
		mfile_close(&m);
		return -1;
	}
	uint8_t *raw = malloc(cap);
	size_t n = raw ? ZSTD_decompress(raw, cap, m.data, m.size) : 0;
	mfile_close(&m);
	if (!raw || ZSTD_isError(n) || n != cap || memcmp(raw, "TTKREF1", 8)) {
		fprintf(stderr, "%s: bad reference file\n", path);
		free(raw);
		return -1;
	}
	memcpy(&r->n_docs, raw + 8, 4);
	memcpy(r->corpus_sha, raw + 12, 32);
	if (44 + (size_t)r->n_docs * 8 != n) {
		fprintf(stderr, "%s: truncated\n", path);
		free(raw);
		return -1;
	}
	r->count = malloc(r->n_docs * sizeof *r->count);
	r->hash = malloc(r->n_docs * sizeof *r->hash);
	for (uint32_t i = 0; i < r->n_docs; i++) {
		memcpy(&r->count[i], raw + 44 + 8 * (size_t)i, 4);
		memcpy(&r->hash[i], raw + 48 + 8 * (size_t)i, 4);
	}
	free(raw);
	return 0;
}

/* A corpus read once: every document's text, and the file's SHA-256. */
typedef struct corpus {
	const char *name;
	char path[4096];
	char sha[65];
	size_t n, cap;
	char **text;
	size_t *len;
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

static int corpus_read(corpus *c, const char *fix, const char *name)
{
	titan_err err = {0};
	c->name = name;
	snprintf(c->path, sizeof c->path, "%s/corpus/%s.jsonl", fix, name);
	if (sha256_file_hex(c->path, c->sha, &err)) {
		printf("# %s\n", err.msg);
		return -1;
	}
	return each_doc(c->path, corpus_add, c);
}

static void corpus_free(corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->text[i]);
	free(c->text);
	free(c->len);
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

/* Encode every stride-th document and compare with the reference digests. */
static int check_corpus(tok_enc *e, const corpus *c, const ref *r, size_t stride,
			const char *name)
{
	char want[65];
	sha256_hex(r->corpus_sha, want);
	if (strcmp(c->sha, want) || r->n_docs != c->n) {
		printf("# %s: sha256 %s (%zu documents), the reference was made from %s (%u)\n",
		       c->path, c->sha, c->n, want, r->n_docs);
		return -1;
	}
	tok_ids ids = {0};
	titan_err err = {0};
	size_t checked = 0, bad = 0;
	double t0 = now();
	for (size_t doc = 0; doc < c->n; doc += stride) {
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
		if (h == r->hash[doc] && ids.n == r->count[doc])
			continue;
		if (bad++ < 3) {
			printf("# %s: document %zu (line %zu): %zu ids, reference %u ids "
			       "(hash %08x vs %08x)\n# text: %.200s\n# ids:",
			       name, doc, doc + 1, ids.n, r->count[doc], h, r->hash[doc], c->text[doc]);
			for (size_t i = 0; i < ids.n && i < 60; i++)
				printf(" %d", ids.v[i]);
			printf("\n# reference ids: $PYTHON scripts/tok_reference.py --show TOKENIZER "
			       "%s %zu\n", c->name, doc);
		}
	}
	tok_ids_free(&ids);
	printf("# %s: %zu documents checked, %zu differ, %.1f s\n", name, checked, bad, now() - t0);
	return bad || !checked ? -1 : 0;
}

static const char *const tokenizers[] = {
	"llama3_1", "qwen3", "torchtitan_test", "llama3_tiktoken", "cl100k_base", "o200k_base",
};

/* Check one tokenizer on every corpus; returns the number of failures. */
static int check_tokenizer(const char *fix, const char *tname, int mode, corpus *cs, int ncs,
			   size_t stride, int *tn)
{
	char tpath[4096];
	snprintf(tpath, sizeof tpath, "%s/tokenizers/%s", fix, tname);
	tok *t = NULL;
	tok_enc *e = NULL;
	tok_opts o = {.pretok = mode};
	titan_err err = {0};
	double t0 = now();
	if (tok_load(&t, tpath, &o, &err) || !(e = tok_enc_new(t, &err)))
		printf("# %s\n", err.msg);
	else
		printf("# %s loaded in %.1f s: %s\n", tname, now() - t0, tok_describe(t));
	int bad = 0;
	for (int k = 0; k < ncs; k++) {
		char rpath[4096], name[256];
		snprintf(rpath, sizeof rpath, "tests/tok/ref/%s.%s.bin.zst", tname, cs[k].name);
		snprintf(name, sizeof name, "%s_%s_ids_match_reference%s", tname, cs[k].name,
			 mode == TOK_PRETOK_PCRE2 ? "_through_pcre2" : "");
		ref r = {0};
		int ok = e && !ref_load(&r, rpath) && !check_corpus(e, &cs[k], &r, stride, name);
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
static int check_huge_document(const char *fix, const corpus *c, int *tn)
{
	char tpath[4096];
	snprintf(tpath, sizeof tpath, "%s/tokenizers/llama3_tiktoken", fix);
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
	const char *fix = getenv("TITAN_FIXTURES");
	if (!fix)
		fix = "../shared/fixtures";
	const char *st = getenv("TITAN_TOK_STRIDE");
	size_t stride = st ? strtoul(st, NULL, 10) : SANITIZED ? 20 : 1;
	if (!stride)
		stride = 1;
	printf("# every %zu%s document checked\n", stride, stride == 1 ? "st" : "th");
	corpus cs[2] = {0};
	int tn = 0, bad = 0;
	if (corpus_read(&cs[0], fix, "en") || corpus_read(&cs[1], fix, "multi")) {
		printf("not ok 1 corpus_fixtures_readable\n1..1\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof tokenizers / sizeof *tokenizers; i++)
		bad += check_tokenizer(fix, tokenizers[i], TOK_PRETOK_AUTO, cs, 2, stride, &tn);
	/* The PCRE2 path too, so both paths are held to the references. */
	bad += check_tokenizer(fix, "llama3_1", TOK_PRETOK_PCRE2, cs, 1, stride * 2, &tn);
	bad += check_tokenizer(fix, "o200k_base", TOK_PRETOK_PCRE2, cs + 1, 1, stride * 2, &tn);
	bad += check_scanners(cs, 2, stride, &tn);
	bad += check_huge_document(fix, &cs[SANITIZED ? 0 : 1], &tn);
	printf("1..%d\n", tn);
	corpus_free(&cs[0]);
	corpus_free(&cs[1]);
	return bad ? 1 : 0;
}
