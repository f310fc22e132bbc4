/* Encoding: this thread reads documents into batches and hands them to an
 * ordered parallel map (lib/core/pool.h) that encodes them on -j threads and
 * gives them back in input order, at most 2 x j + 2 batches of about
 * BATCH_BYTES in flight, so memory is bounded whatever the input size and the
 * output does not depend on -j.  Finished batches are written here too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/pool.h"
#include "core/progress.h"
#include "tokstream/tokstream.h"
#include "tokenize.h"

#define BATCH_BYTES (1u << 20)
#define BATCH_DOCS 4096u

typedef struct batch {
	textin_buf text; /* the documents back to back */
	size_t *off;     /* document i is text[off[i] .. off[i+1]) */
	size_t n_docs, cap_docs;
	uint32_t *ids;   /* every document's ids, BOS/EOS included */
	size_t n_ids, cap_ids;
	size_t *lens;    /* tokens per document (cap_docs) */
	uint8_t *mask;   /* --chat: every document's label mask, a byte a token (cap_ids) */
	size_t cap_mask;
	uint64_t *lines; /* --chat: each document's input line, */
	const char **files; /* ... and file, for messages */
	int failed;      /* encoding failed; the message is in err */
	titan_err err;
} batch;

/* What the encoding threads share (read-only) and what the writer keeps. */
typedef struct enc_ctx {
	const tok *tok;
	const chat *chat; /* --chat */
	size_t pad_to;  /* --pad-to N: fixed-length encoder inputs; 0: off */
	int add_bos, add_eos;
	int32_t bos, eos;
	tok_enc **encs; /* one per pool thread, taken from a free list */
	int n_encs;
	pthread_mutex_t mu;

	int ids_text;
	tokstream_writer *w;
	textin_buf line; /* --ids output line */
	uint64_t docs, tokens, bytes;
	progress pg;
} enc_ctx;

static int push_id(batch *b, uint32_t id, titan_err *err)
{
	if (b->n_ids == b->cap_ids) {
		size_t cap = b->cap_ids ? 2 * b->cap_ids : 65536;
		uint32_t *v = realloc(b->ids, cap * sizeof *v);
		if (v == NULL)
			return err_set(err, "out of memory");
		b->ids = v;
		b->cap_ids = cap;
	}
	b->ids[b->n_ids++] = id;
	return 0;
}

/* --chat: each document is a conversation (a JSON line) */
static int encode_chat_batch(enc_ctx *c, tok_enc *enc, tok_ids *tmp, batch *b, titan_err *err)
{
	b->n_ids = 0;
	uint8_t *m = NULL;
	size_t mcap = 0;
	for (size_t i = 0; i < b->n_docs; i++) {
		tmp->n = 0;
		if (chat_encode(c->chat, enc, b->text.p + b->off[i], b->off[i + 1] - b->off[i], tmp, &m,
				&mcap, err) != 0) {
			err_prefix(err, "%s:%llu", b->files[i], (unsigned long long)b->lines[i]);
			free(m);
			return -1;
		}
		if (b->n_ids + tmp->n > b->cap_mask) {
			size_t cap = b->cap_mask ? 2 * b->cap_mask : 65536;
			while (cap < b->n_ids + tmp->n)
				cap *= 2;
			uint8_t *p = realloc(b->mask, cap);
			if (p == NULL) {
				free(m);
				return err_set(err, "out of memory");
			}
			b->mask = p;
			b->cap_mask = cap;
		}
		memcpy(b->mask + b->n_ids, m, tmp->n);
		for (size_t j = 0; j < tmp->n; j++)
			if (push_id(b, (uint32_t)tmp->v[j], err) != 0) {
				free(m);
				return -1;
			}
		b->lens[i] = tmp->n;
	}
	free(m);
	return 0;
}

/* --pad-to: each document as tok_encode_fixed makes it (the post-processor's
 * special tokens, truncation, the pad token to N). */
static int encode_batch_fixed(enc_ctx *c, tok_enc *enc, batch *b, titan_err *err)
{
	int32_t *ids = malloc(c->pad_to * sizeof *ids);
	if (ids == NULL)
		return err_set(err, "out of memory");
	int rc = 0;
	b->n_ids = 0;
	for (size_t i = 0; i < b->n_docs && rc == 0; i++) {
		if (tok_encode_fixed(enc, (const uint8_t *)b->text.p + b->off[i],
				     b->off[i + 1] - b->off[i], c->pad_to, ids, NULL, err) < 0) {
			rc = -1;
			break;
		}
		for (size_t j = 0; j < c->pad_to && rc == 0; j++)
			rc = push_id(b, (uint32_t)ids[j], err);
		b->lens[i] = c->pad_to;
	}
	free(ids);
	return rc;
}

static int encode_batch(enc_ctx *c, tok_enc *enc, tok_ids *tmp, batch *b, titan_err *err)
{
	if (c->chat)
		return encode_chat_batch(c, enc, tmp, b, err);
	if (c->pad_to)
		return encode_batch_fixed(c, enc, b, err);
	b->n_ids = 0;
	for (size_t i = 0; i < b->n_docs; i++) {
		size_t start = b->n_ids;
		tmp->n = 0;
		if (tok_encode(enc, (const uint8_t *)b->text.p + b->off[i], b->off[i + 1] - b->off[i],
			       tmp, err) != 0)
			return -1;
		if (c->add_bos && push_id(b, (uint32_t)c->bos, err) != 0)
			return -1;
		for (size_t j = 0; j < tmp->n; j++)
			if (push_id(b, (uint32_t)tmp->v[j], err) != 0)
				return -1;
		if (c->add_eos && push_id(b, (uint32_t)c->eos, err) != 0)
			return -1;
		b->lens[i] = b->n_ids - start;
	}
	return 0;
}

static tok_enc *take_enc(enc_ctx *c)
{
	pthread_mutex_lock(&c->mu);
	tok_enc *e = c->encs[--c->n_encs];
	pthread_mutex_unlock(&c->mu);
	return e;
}

static void give_enc(enc_ctx *c, tok_enc *e)
{
	pthread_mutex_lock(&c->mu);
	c->encs[c->n_encs++] = e;
	pthread_mutex_unlock(&c->mu);
}

/* The pool job: encode one batch with a per-thread encoder.  At most as many
 * jobs run at once as the pool has threads, so the free list never runs dry. */
static void encode_job(void *item, void *ctx)
{
	batch *b = item;
	enc_ctx *c = ctx;
	tok_ids tmp = {0};
	tok_enc *e = take_enc(c);
	b->failed = encode_batch(c, e, &tmp, b, &b->err) != 0;
	give_enc(c, e);
	tok_ids_free(&tmp);
}

/* Decimal ids separated by single spaces, one document per line. */
static int write_ids_line(enc_ctx *c, const uint32_t *ids, size_t n, titan_err *err)
{
	textin_buf *l = &c->line;
	l->n = 0;
	for (size_t i = 0; i < n; i++) {
		char num[16];
		int len = snprintf(num, sizeof num, i ? " %u" : "%u", ids[i]);
		if (textin_buf_append(l, num, (size_t)len) != 0)
			return err_set(err, "out of memory");
	}
	if (fwrite(l->p ? l->p : "", 1, l->n, stdout) != l->n || putchar('\n') == EOF)
		return err_errno(err, "stdout");
	return 0;
}

static int write_batch(enc_ctx *c, const batch *b, titan_err *err)
{
	if (b->failed) {
		*err = b->err;
		return -1;
	}
	size_t pos = 0;
	for (size_t i = 0; i < b->n_docs; i++) {
		const uint32_t *ids = b->ids + pos;
		int rc = c->ids_text ? write_ids_line(c, ids, b->lens[i], err)
			 : tokstream_write_doc_masked(c->w, ids, c->chat ? b->mask + pos : NULL,
						      b->lens[i], err);
		if (rc != 0)
			return -1;
		pos += b->lens[i];
	}
	c->docs += b->n_docs;
	c->tokens += b->n_ids;
	c->bytes += b->text.n;
	progress_add(&c->pg, b->text.n);
	return 0;
}

static batch *batch_new(void)
{
	batch *b = calloc(1, sizeof *b);
	if (b == NULL)
		return NULL;
	b->cap_docs = BATCH_DOCS + 2;
	b->off = malloc(b->cap_docs * sizeof *b->off);
	b->lens = malloc(b->cap_docs * sizeof *b->lens);
	b->lines = malloc(b->cap_docs * sizeof *b->lines);
	b->files = malloc(b->cap_docs * sizeof *b->files);
	if (b->off == NULL || b->lens == NULL || b->lines == NULL || b->files == NULL) {
		free(b->off);
		free(b->lens);
		free(b->lines);
		free(b->files);
		free(b);
		return NULL;
	}
	return b;
}

static void batch_free(batch *b)
{
	if (b == NULL)
		return;
	free(b->text.p);
	free(b->off);
	free(b->ids);
	free(b->lens);
	free(b->mask);
	free(b->lines);
	free(b->files);
	free(b);
}

static void batch_reset(batch *b)
{
	b->text.n = 0;
	b->n_docs = 0;
	b->off[0] = 0;
	b->failed = 0;
}

static int add_doc(batch *b, const char *doc, size_t len, const char *file, uint64_t line,
		   titan_err *err)
{
	if (b->n_docs + 2 > b->cap_docs) {
		size_t cap = 2 * b->cap_docs;
		size_t *off = realloc(b->off, cap * sizeof *off);
		if (off == NULL)
			return err_set(err, "out of memory");
		b->off = off;
		size_t *lens = realloc(b->lens, cap * sizeof *lens);
		if (lens == NULL)
			return err_set(err, "out of memory");
		b->lens = lens;
		uint64_t *lines = realloc(b->lines, cap * sizeof *lines);
		if (lines == NULL)
			return err_set(err, "out of memory");
		b->lines = lines;
		const char **files = realloc(b->files, cap * sizeof *files);
		if (files == NULL)
			return err_set(err, "out of memory");
		b->files = files;
		b->cap_docs = cap;
	}
	b->lines[b->n_docs] = line;
	b->files[b->n_docs] = file;
	if (len > 0 && textin_buf_append(&b->text, doc, len) != 0)
		return err_set(err, "out of memory");
	b->off[++b->n_docs] = b->text.n;
	return 0;
}

/* The reading loop.  Returns 0, or -1 with *err (the first failure: reading,
 * encoding or writing). */
typedef struct reader {
	enc_ctx *c;
	pool_omap *m;
	batch *spare; /* a written batch to fill next */
	uint64_t skipped;
} reader;

/* Hand b to the map; write the batch that comes back, if any, and keep it as
 * the spare. */
static int hand_in(reader *r, batch *b, titan_err *err)
{
	batch *done = pool_omap_push(r->m, b);
	if (done == NULL)
		return 0;
	r->spare = done;
	return write_batch(r->c, done, err);
}

static int read_inputs(reader *r, const tkz_opts *o, titan_err *err)
{
	batch *b = NULL;
	for (int f = 0; f < o->n_files; f++) {
		textin *in = textin_open(o->files[f], &o->in, err);
		if (in == NULL)
			goto fail;
		const char *doc;
		size_t len;
		int got;
		while ((got = textin_next(in, &doc, &len, err)) == 1) {
			if (b == NULL) {
				b = r->spare ? r->spare : batch_new();
				r->spare = NULL;
				if (b == NULL) {
					err_set(err, "out of memory");
					got = -1;
					break;
				}
				batch_reset(b);
			}
			if (add_doc(b, doc, len, o->files[f], textin_line(in), err) != 0) {
				got = -1;
				break;
			}
			if (b->text.n >= BATCH_BYTES || b->n_docs >= BATCH_DOCS) {
				batch *full = b;
				b = NULL;
				if (hand_in(r, full, err) != 0) {
					got = -1;
					break;
				}
			}
		}
		r->skipped += textin_skipped(in);
		textin_close(in);
		if (got < 0)
			goto fail;
	}
	if (b != NULL && hand_in(r, b, err) != 0)
		return -1;
	return 0;
fail:
	batch_free(b);
	return -1;
}

/* Drain the map: write what is left (or only free it after a failure). */
static int drain(reader *r, int failed, titan_err *err)
{
	batch *done;
	int rc = failed ? -1 : 0;
	while ((done = pool_omap_pop(r->m)) != NULL) {
		if (rc == 0 && write_batch(r->c, done, err) != 0)
			rc = -1;
		batch_free(done);
	}
	batch_free(r->spare);
	r->spare = NULL;
	return rc;
}

/* BOS/EOS policy: the option, else the tokenizer's default. */
static int resolve_specials(enc_ctx *c, const tkz_opts *o, titan_err *err)
{
	if (o->chat) { /* lib/chat puts in what torchtitan's ChatDataset does */
		c->bos = tok_bos_id(c->tok);
		c->eos = tok_eos_id(c->tok);
		c->add_bos = tok_default_add_bos(c->tok);
		return 0;
	}
	c->bos = tok_bos_id(c->tok);
	c->eos = tok_eos_id(c->tok);
	c->add_bos = o->bos >= 0 ? o->bos : tok_default_add_bos(c->tok);
	c->add_eos = o->eos >= 0 ? o->eos : tok_default_add_eos(c->tok);
	if (c->pad_to) { /* the post-processor places the special tokens */
		c->add_bos = c->add_eos = 0;
		if (tok_pad_id(c->tok) < 0)
			return err_set(err, "%s: --pad-to: the tokenizer names no pad token", o->tokenizer);
	}
	if (c->add_bos && c->bos < 0)
		return err_set(err, "%s: --bos: the tokenizer has no BOS token", o->tokenizer);
	if (c->add_eos && c->eos < 0)
		return err_set(err, "%s: --eos: the tokenizer has no EOS token", o->tokenizer);
	return 0;
}

static int open_output(enc_ctx *c, const uint8_t fp[32], titan_err *err)
{
	if (c->ids_text)
		return 0;
	int64_t nv = tok_n_vocab(c->tok);
	tokstream_header h = {
		.id_width = tokstream_id_width((uint32_t)nv),
		.vocab_size = (uint32_t)nv,
		.bos_id = c->bos,
		.eos_id = c->eos,
		.flags = (c->add_bos ? TOKSTREAM_FLAG_BOS : 0) | (c->add_eos ? TOKSTREAM_FLAG_EOS : 0) |
			 (c->chat ? TOKSTREAM_FLAG_MASK | TOKSTREAM_FLAG_EOS : 0),
	};
	memcpy(h.fingerprint, fp, 32);
	c->w = tokstream_writer_open(stdout, &h, err);
	return c->w ? 0 : -1;
}

static int run(enc_ctx *c, const tkz_opts *o, const uint8_t fp[32], uint64_t *skipped,
	       titan_err *err)
{
	if (resolve_specials(c, o, err) != 0 || open_output(c, fp, err) != 0)
		return -1;
	c->encs = calloc((size_t)o->threads, sizeof *c->encs);
	if (c->encs == NULL)
		return err_set(err, "out of memory");
	for (; c->n_encs < o->threads; c->n_encs++)
		if ((c->encs[c->n_encs] = tok_enc_new(c->tok, err)) == NULL)
			return -1;
	pool *p = pool_create(o->threads, err);
	if (p == NULL)
		return -1;
	reader r = {.c = c};
	r.m = pool_omap_create(p, 2 * o->threads + 2, encode_job, c, err);
	int rc = -1;
	if (r.m != NULL) {
		rc = read_inputs(&r, o, err);
		titan_err derr;
		if (drain(&r, rc != 0, &derr) != 0 && rc == 0) {
			*err = derr;
			rc = -1;
		}
		pool_omap_destroy(r.m);
	}
	pool_destroy(p);
	*skipped = r.skipped;
	if (rc != 0) {
		if (c->w)
			tokstream_writer_abort(c->w);
		fflush(stdout);
		return -1;
	}
	if (c->w)
		return tokstream_writer_close(c->w, err);
	return fflush(stdout) == 0 ? 0 : err_errno(err, "stdout");
}

static void summary(const enc_ctx *c, const tkz_opts *o, uint64_t skipped, double t0)
{
	double s = tkz_now() - t0, mb = (double)c->bytes / 1e6;
	fprintf(stderr, "%s: tokenizer: %s\n", titan_progname(), tok_describe(c->tok));
	fprintf(stderr, "%s: tokenized %llu documents, %llu tokens, %.1f MB in %.2f s (%.1f MB/s)\n",
		titan_progname(), (unsigned long long)c->docs, (unsigned long long)c->tokens, mb, s,
		s > 0 ? mb / s : 0.0);
	if (o->in.skip_bad)
		fprintf(stderr, "%s: skipped %llu malformed %s\n", titan_progname(),
			(unsigned long long)skipped, o->in.format == TEXTIN_JSONL ? "lines" : "documents");
}

int tkz_encode(const tkz_opts *o)
{
	titan_err err;
	if (!o->ids && isatty(STDOUT_FILENO))
		titan_die(TITAN_EXIT_USAGE, "refusing to write a binary token stream to a terminal "
					    "(redirect stdout, or use --ids)");
	tok *t;
	uint8_t fp[32];
	if (tkz_load(o, &t, fp, &err) != 0)
		titan_die_err(&err);
	static char outbuf[1 << 20];
	setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
	enc_ctx c = {.tok = t, .ids_text = o->ids, .pad_to = o->pad_to};
	chat *ch = NULL;
	if (o->chat && (c.chat = ch = chat_load(o->tokenizer, t, &o->chat_o, &err)) == NULL) {
		tok_free(t);
		titan_die_err(&err);
	}
	pthread_mutex_init(&c.mu, NULL);
	progress_init(&c.pg, "tokenize", PROGRESS_BYTES, 0);
	if (o->quiet)
		c.pg.tty = 0;
	double t0 = tkz_now();
	uint64_t skipped = 0;
	int rc = run(&c, o, fp, &skipped, &err);
	progress_finish(&c.pg, 0);
	for (int i = 0; i < c.n_encs; i++)
		tok_enc_free(c.encs[i]);
	free(c.encs);
	free(c.line.p);
	pthread_mutex_destroy(&c.mu);
	if (rc == 0 && !o->quiet)
		summary(&c, o, skipped, t0); /* before tok_free: it names the tokenizer */
	chat_free(ch);
	tok_free(t);
	if (rc != 0)
		titan_die_err(&err);
	return TITAN_EXIT_OK;
}
