/* titan-bench tokenize: lib/tok's encoder (what titan-tokenize runs) on one
 * thread and on all of them, against the reference encoder of the same
 * tokenizer file (HF tokenizers for a tokenizer.json, tiktoken for a tiktoken
 * file) when --python names an interpreter that has it.  Both sides encode the
 * same documents (the "text" of each JSON line) and fold their ids into one
 * hash, so the table also says whether they agree token for token.  Times are
 * wall time of the encoding alone (loading and JSON parsing excluded). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "core/afile.h"
#include "prof/prof.h"
#include "textin/textin.h"
#include "tok/tok.h"

typedef struct doc {
	char *text;
	size_t n;
	uint64_t hash; /* of its ids */
	size_t tokens;
} doc;

typedef struct corpus {
	doc *d;
	size_t n, cap;
	uint64_t bytes;
} corpus;

static void corpus_free(corpus *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->d[i].text);
	free(c->d);
}

static int read_corpus(const char *path, corpus *c, titan_err *e)
{
	textin_opts o = {.format = TEXTIN_JSONL};
	textin *t = textin_open(path, &o, e);
	if (t == NULL)
		return -1;
	const char *s;
	size_t n;
	int r;
	while ((r = textin_next(t, &s, &n, e)) == 1) {
		if (c->n == c->cap) {
			size_t cap = c->cap ? 2 * c->cap : 1024;
			doc *d = realloc(c->d, cap * sizeof *d);
			if (d == NULL)
				break;
			c->d = d;
			c->cap = cap;
		}
		char *copy = malloc(n + 1);
		if (copy == NULL)
			break;
		memcpy(copy, s, n + 1);
		c->d[c->n++] = (doc){copy, n, 0, 0};
		c->bytes += n;
	}
	textin_close(t);
	if (r == 1)
		return err_set(e, "%s: out of memory reading the documents", path);
	if (r == 0 && c->n == 0)
		return err_set(e, "%s: no documents", path);
	return r;
}

/* The reference's hash of one document's ids and of the whole corpus. */
#define HASH_MUL 1000003u
static uint64_t fold(const corpus *c)
{
	uint64_t h = 0;
	for (size_t i = 0; i < c->n; i++)
		h = h * 31 + c->d[i].hash;
	return h;
}

typedef struct encode_job {
	const tok *t;
	corpus *c;
	int threads;
	int failed;
} encode_job;

/* Encode every document with fresh encoders (so every run starts with empty
 * piece caches, as the first run of the reference does). */
static void encode_all(void *p)
{
	encode_job *j = p;
	int failed = 0;
	PROF_T0(pt);
#pragma omp parallel num_threads(j->threads) reduction(| : failed)
	{
		titan_err e;
		tok_enc *enc = tok_enc_new(j->t, &e);
		tok_ids ids = {0};
		failed |= enc == NULL;
#pragma omp for schedule(dynamic, 16)
		for (size_t i = 0; i < j->c->n; i++) {
			doc *d = &j->c->d[i];
			ids.n = 0;
			if (enc == NULL || tok_encode(enc, (const uint8_t *)d->text, d->n, &ids, &e)) {
				failed = 1;
				continue;
			}
			uint64_t h = 0;
			for (size_t k = 0; k < ids.n; k++)
				h = h * HASH_MUL + (uint64_t)ids.v[k] + 1;
			d->hash = h;
			d->tokens = ids.n;
		}
		tok_ids_free(&ids);
		tok_enc_free(enc);
	}
	j->failed |= failed;
	PROF_OP(pt, "tok_encode", PA_I("docs", j->c->n), PA_I("bytes", j->c->bytes),
		PA_I("threads", j->threads));
}

/* The reference side, run as PY -c SCRIPT KIND FILE INPUT THREADS PATTERN
 * SECONDS; one JSON line per measurement (the median of runs after a first,
 * as bench_time does), or {"error": ...}. */
static const char REF_SCRIPT[] =
	"import gzip, json, os, sys, time\n"
	"kind, path, inp, threads, pat, secs = sys.argv[1:7]\n"
	"threads = int(threads)\n"
	"os.environ['RAYON_NUM_THREADS'] = str(threads)\n"
	"os.environ['TOKENIZERS_PARALLELISM'] = 'true'\n"
	"try:\n"
	"    if kind == 'hf':\n"
	"        from tokenizers import Tokenizer\n"
	"        hf = Tokenizer.from_file(path)\n"
	"        name = 'hf-tokenizers'\n"
	"        one = lambda t: hf.encode(t, add_special_tokens=False).ids\n"
	"        many = lambda ts: [e.ids for e in hf.encode_batch(ts, add_special_tokens=False)]\n"
	"    else:\n"
	"        import tiktoken\n"
	"        from tiktoken.load import load_tiktoken_bpe\n"
	"        enc = tiktoken.Encoding('bench', pat_str=pat, mergeable_ranks=load_tiktoken_bpe(path),\n"
	"                                special_tokens={})\n"
	"        name = 'tiktoken'\n"
	"        one = enc.encode_ordinary\n"
	"        many = lambda ts: enc.encode_ordinary_batch(ts, num_threads=threads)\n"
	"except Exception as e:\n"
	"    print(json.dumps({'error': '%s: %s' % (type(e).__name__, e)}))\n"
	"    sys.exit(0)\n"
	"with open(inp, 'rb') as f:\n"
	"    gz = f.read(2) == b'\\x1f\\x8b'\n"
	"with (gzip.open(inp, 'rt', encoding='utf-8') if gz else open(inp, encoding='utf-8')) as f:\n"
	"    texts = [json.loads(l)['text'] for l in f if l.strip()]\n"
	"nbytes = sum(len(t.encode('utf-8', 'surrogatepass')) for t in texts)\n"
	"M = (1 << 64) - 1\n"
	"def fold(seqs):\n"
	"    H = 0\n"
	"    for ids in seqs:\n"
	"        h = 0\n"
	"        for i in ids:\n"
	"            h = (h * 1000003 + i + 1) & M\n"
	"        H = (H * 31 + h) & M\n"
	"    return H\n"
	"for n, f in ((1, lambda: [one(t) for t in texts]), (threads, lambda: many(texts))):\n"
	"    out, ts = f(), []\n"
	"    while len(ts) < 3 or sum(ts) < float(secs):\n"
	"        t0 = time.perf_counter()\n"
	"        f()\n"
	"        ts.append(time.perf_counter() - t0)\n"
	"    dt = sorted(ts)[len(ts) // 2]\n"
	"    print(json.dumps({'name': name, 'threads': n, 'seconds': dt, 'bytes': nbytes,\n"
	"                      'tokens': sum(len(x) for x in out), 'hash': str(fold(out))}),\n"
	"          flush=True)\n";

/* Run argv with stdout captured into a malloc'd string. */
static char *run_capture(char *const argv[], titan_err *e)
{
	int fd[2];
	if (pipe(fd) != 0) {
		err_errno(e, "pipe");
		return NULL;
	}
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		err_errno(e, "fork");
		return NULL;
	}
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execvp(argv[0], argv);
		fprintf(stderr, "titan-bench: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fd[1]);
	size_t n = 0, cap = 4096;
	char *out = malloc(cap);
	ssize_t r = 0;
	while (out != NULL && (r = read(fd[0], out + n, cap - n - 1)) > 0) {
		n += (size_t)r;
		if (n + 1 == cap) {
			char *p = realloc(out, cap *= 2);
			if (p == NULL)
				free(out);
			out = p;
		}
	}
	close(fd[0]);
	int status;
	waitpid(pid, &status, 0);
	if (out == NULL) {
		err_set(e, "out of memory reading %s's output", argv[0]);
		return NULL;
	}
	out[n] = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		err_set(e, "%s exited with status %d", argv[0],
			WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		free(out);
		return NULL;
	}
	return out;
}

/* The file the reference loads: PATH itself, or the tokenizer in the folder. */
static char *tokenizer_file(const char *path, int format)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return strdup(path);
	const char *want = format == TOK_FORMAT_HF_JSON ? "tokenizer.json" : "tokenizer.model";
	char *p = path_join(path, want);
	if (p == NULL || stat(p, &st) == 0 || format == TOK_FORMAT_HF_JSON)
		return p;
	free(p);
	DIR *d = opendir(path);
	struct dirent *de;
	p = NULL;
	while (d != NULL && p == NULL && (de = readdir(d)) != NULL) {
		size_t l = strlen(de->d_name);
		if (l > 9 && strcmp(de->d_name + l - 9, ".tiktoken") == 0)
			p = path_join(path, de->d_name);
	}
	if (d != NULL)
		closedir(d);
	return p;
}

static void add_row(report *r, const char *name, int threads, double bytes, double secs,
		    uint64_t tokens, const char *same)
{
	json_t *row = report_row(r);
	rset(row, "encoder", json_string(name));
	rset(row, "threads", json_integer(threads));
	rset(row, "seconds", json_real(secs));
	rset(row, "mb_s", json_real(bytes / 1e6 / secs));
	rset(row, "mtok_s", json_real((double)tokens / 1e6 / secs));
	rset(row, "tokens", json_integer((json_int_t)tokens));
	if (same != NULL)
		rset(row, "same_ids", json_string(same));
}

/* The reference's rows, ratios filled in against titan's at the same threads. */
static void reference(const bench_args *a, const tok *t, const char *tfile, double titan_s[2],
		      uint64_t hash, int threads, report *r)
{
	const char *name = tok_encoding_name(t);
	const char *pat = strcmp(name, "o200k_base") == 0 ? tok_re_o200k : tok_re_llama3;
	char thr[16], secs[32];
	snprintf(thr, sizeof thr, "%d", threads);
	snprintf(secs, sizeof secs, "%g", a->seconds);
	char *argv[] = {(char *)a->python, "-c", (char *)REF_SCRIPT,
			tok_format(t) == TOK_FORMAT_HF_JSON ? "hf" : "tiktoken", (char *)tfile,
			(char *)a->input, thr, (char *)pat, secs, NULL};
	titan_err e = {0};
	char *out = run_capture(argv, &e);
	if (out == NULL) {
		report_unavailable(r, "reference", e.msg);
		return;
	}
	char want[32];
	snprintf(want, sizeof want, "%" PRIu64, hash);
	for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		json_t *j = json_loads(line, 0, NULL);
		const char *err = json_string_value(json_object_get(j, "error"));
		if (j == NULL || err != NULL) {
			report_unavailable(r, "reference", err ? err : "unreadable output from --python");
			json_decref(j);
			break;
		}
		int n = (int)json_integer_value(json_object_get(j, "threads"));
		double s = json_real_value(json_object_get(j, "seconds"));
		const char *h = json_string_value(json_object_get(j, "hash"));
		add_row(r, json_string_value(json_object_get(j, "name")), n,
			json_number_value(json_object_get(j, "bytes")), s,
			(uint64_t)json_integer_value(json_object_get(j, "tokens")),
			h != NULL && strcmp(h, want) == 0 ? "yes" : "NO");
		/* titan's speed over the reference's, on titan's row. */
		json_t *tr = json_array_get(r->rows, n == 1 ? 0 : 1);
		rset(tr, "x_ref", json_real(s / titan_s[n == 1 ? 0 : 1]));
		json_decref(j);
	}
	free(out);
}

int bench_tokenize(const bench_args *a, titan_err *e)
{
	if (a->tokenizer == NULL || a->input == NULL) {
		err_set(e, "tokenize needs --tokenizer PATH and --input FILE.jsonl");
		return BENCH_USAGE;
	}
	tok *t;
	if (tok_load(&t, a->tokenizer, NULL, e))
		return -1;
	corpus c = {0};
	report r = {0};
	int rc = read_corpus(a->input, &c, e);
	if (rc == 0)
		rc = report_init(&r, "tokenize", a, e);
	int threads = a->threads;
	double secs[2] = {0, 0};
	uint64_t hash = 0;
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		encode_job j = {t, &c, pass ? threads : 1, 0};
		secs[pass] = bench_time(encode_all, &j, a->seconds, NULL, e);
		if (j.failed) {
			rc = err_set(e, "%s: encoding failed (out of memory)", a->input);
			break;
		}
		uint64_t tokens = 0;
		for (size_t i = 0; i < c.n; i++)
			tokens += c.d[i].tokens;
		hash = fold(&c);
		add_row(&r, "titan", j.threads, (double)c.bytes, secs[pass], tokens, NULL);
	}
	if (rc == 0 && a->python != NULL) {
		char *tfile = tokenizer_file(a->tokenizer, tok_format(t));
		if (tfile == NULL)
			report_unavailable(&r, "reference", "no tokenizer file for the reference found");
		else
			reference(a, t, tfile, secs, hash, threads, &r);
		free(tfile);
	} else if (rc == 0) {
		report_unavailable(&r, "reference", "no --python PY given (an interpreter with "
				   "tokenizers or tiktoken)");
	}
	if (rc == 0) {
		report_note(&r, "%s: %zu documents, %" PRIu64 " bytes of text; tokenizer %s",
			    a->input, c.n, c.bytes, tok_describe(t));
		report_note(&r, "x_ref = reference seconds / titan seconds at the same threads; "
			    "same_ids: the reference's ids equal titan's, token for token");
		static const report_col cols[] = {
			{"encoder", "encoder", NULL}, {"threads", "threads", NULL},
			{"seconds", "s", "%.3f"}, {"mb_s", "MB/s", "%.2f"},
			{"mtok_s", "Mtok/s", "%.3f"}, {"tokens", "tokens", NULL},
			{"x_ref", "x ref", "%.2f"}, {"same_ids", "same ids", NULL},
		};
		rc = report_emit(&r, cols, sizeof cols / sizeof cols[0], a->json, e);
	}
	report_free(&r);
	corpus_free(&c);
	tok_free(t);
	return rc;
}
