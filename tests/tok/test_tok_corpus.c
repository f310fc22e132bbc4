/* Exactness against the references on the shared corpus, and a driver.
 *
 *   test_tok_corpus                      TAP: every (tokenizer, corpus) pair in
 *                                        tests/tok/ref/ checked document by document
 *   test_tok_corpus encode TOK [pcre2] [plain|extract] < text   ids, one line
 *   test_tok_corpus bench TOK FILE.jsonl [pcre2]   single-thread MB/s of encode
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
#include "tok/tok.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
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

typedef struct bench_ctx {
	tok_enc *e;
	tok_ids ids;
	size_t bytes, tokens;
	double secs;
} bench_ctx;

static int bench_doc(void *ctx, size_t doc, const char *text, size_t n)
{
	(void)doc;
	bench_ctx *b = ctx;
	titan_err err = {0};
	b->ids.n = 0;
	double t0 = now();
	if (tok_encode(b->e, (const uint8_t *)text, n, &b->ids, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	b->secs += now() - t0;
	b->bytes += n;
	b->tokens += b->ids.n;
	return 0;
}

static int cmd_bench(int argc, char **argv)
{
	tok *t;
	if (argc < 4 || load(&t, argv[2], argc, argv, 4))
		return 2;
	titan_err err = {0};
	bench_ctx b = {0};
	b.e = tok_enc_new(t, &err);
	if (!b.e || each_doc(argv[3], bench_doc, &b))
		return 1;
	printf("bytes %zu tokens %zu seconds %.3f MB/s %.2f\n", b.bytes, b.tokens, b.secs,
	       b.bytes / b.secs / 1e6);
	tok_ids_free(&b.ids);
	tok_enc_free(b.e);
	tok_free(t);
	return 0;
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

typedef struct check_ctx {
	tok_enc *e;
	const ref *r;
	tok_ids ids;
	size_t stride, checked, bad;
	const char *name;
} check_ctx;

static int check_doc(void *ctx, size_t doc, const char *text, size_t n)
{
	check_ctx *c = ctx;
	if (doc % c->stride)
		return 0;
	titan_err err = {0};
	c->ids.n = 0;
	if (doc >= c->r->n_docs || tok_encode(c->e, (const uint8_t *)text, n, &c->ids, &err)) {
		printf("# %s: document %zu: %s\n", c->name, doc, err.msg);
		c->bad++;
		return 0;
	}
	uint8_t d[32];
	if (sha256(c->ids.v, c->ids.n * 4, d, &err))
		return -1;
	uint32_t h;
	memcpy(&h, d, 4);
	c->checked++;
	if (h == c->r->hash[doc] && c->ids.n == c->r->count[doc])
		return 0;
	if (c->bad++ < 3) {
		printf("# %s: document %zu (line %zu): %zu ids, reference %u ids (hash %08x vs %08x)\n",
		       c->name, doc, doc + 1, c->ids.n, c->r->count[doc], h, c->r->hash[doc]);
		printf("# text: %.200s\n# ids:", text);
		for (size_t i = 0; i < c->ids.n && i < 60; i++)
			printf(" %d", c->ids.v[i]);
		printf("\n# reference ids: $PYTHON scripts/tok_reference.py --show TOKENIZER CORPUS %zu\n",
		       doc);
	}
	return 0;
}

static const char *const tokenizers[] = {
	"llama3_1", "qwen3", "torchtitan_test", "llama3_tiktoken", "cl100k_base", "o200k_base",
};
static const char *const corpora[] = {"en", "multi"};

static int check_one(const char *fix, const char *tname, const char *cname, int mode, int *tn)
{
	char tpath[4096], cpath[4096], rpath[4096], name[256];
	snprintf(tpath, sizeof tpath, "%s/tokenizers/%s", fix, tname);
	snprintf(cpath, sizeof cpath, "%s/corpus/%s.jsonl", fix, cname);
	snprintf(rpath, sizeof rpath, "tests/tok/ref/%s.%s.bin.zst", tname, cname);
	snprintf(name, sizeof name, "%s_%s_ids_match_reference%s", tname, cname,
		 mode == TOK_PRETOK_PCRE2 ? "_with_pcre2" : "");
	ref r = {0};
	tok *t = NULL;
	tok_opts o = {.pretok = mode};
	titan_err err = {0};
	int ok = 0;
	if (ref_load(&r, rpath) || tok_load(&t, tpath, &o, &err)) {
		printf("# %s\n", err.msg);
		goto done;
	}
	char hex[65], want[65];
	if (sha256_file_hex(cpath, hex, &err)) {
		printf("# %s\n", err.msg);
		goto done;
	}
	sha256_hex(r.corpus_sha, want);
	if (strcmp(hex, want)) {
		printf("# %s: sha256 %s, the reference was made from %s\n", cpath, hex, want);
		goto done;
	}
	const char *st = getenv("TITAN_TOK_STRIDE");
	check_ctx c = {.r = &r, .name = name, .stride = st ? strtoul(st, NULL, 10) : SANITIZED ? 20 : 1};
	if (!c.stride)
		c.stride = 1;
	c.e = tok_enc_new(t, &err);
	double t0 = now();
	if (c.e && !each_doc(cpath, check_doc, &c) && !c.bad && c.checked)
		ok = 1;
	printf("# %s: %zu documents checked, %zu differ, %.1f s\n", name, c.checked, c.bad,
	       now() - t0);
	tok_ids_free(&c.ids);
	tok_enc_free(c.e);
done:
	tok_free(t);
	free(r.count);
	free(r.hash);
	printf("%sok %d %s\n", ok ? "" : "not ", ++*tn, name);
	return ok ? 0 : 1;
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
	int tn = 0, bad = 0;
	for (size_t i = 0; i < sizeof tokenizers / sizeof *tokenizers; i++)
		for (size_t j = 0; j < sizeof corpora / sizeof *corpora; j++)
			bad += check_one(fix, tokenizers[i], corpora[j], TOK_PRETOK_AUTO, &tn);
	/* The PCRE2 path on one pair, so both paths are held to the reference. */
	bad += check_one(fix, "llama3_1", "en", TOK_PRETOK_PCRE2, &tn);
	bad += check_one(fix, "o200k_base", "multi", TOK_PRETOK_PCRE2, &tn);
	printf("1..%d\n", tn);
	return bad ? 1 : 0;
}
