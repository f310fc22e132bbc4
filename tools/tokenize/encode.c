/* Encoding: one reader (this thread), N encoders, one writer, over a ring of
 * document batches.  The ring bounds memory (K batches of about BATCH_BYTES
 * each, whatever the input size) and the writer takes batches in the order
 * they were read, so the output does not depend on -j. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokstream/tokstream.h"
#include "tokenize.h"

#define BATCH_BYTES (1u << 20)
#define BATCH_DOCS 4096u

enum { SLOT_FREE, SLOT_FILLED, SLOT_DONE };

typedef struct batch {
	int state;
	textin_buf text; /* the documents back to back */
	size_t *off;     /* document i is text[off[i] .. off[i+1]) */
	size_t n_docs, cap_docs;
	uint32_t *ids;   /* every document's ids, BOS/EOS included */
	size_t n_ids, cap_ids;
	size_t *lens;    /* tokens per document (cap_docs) */
} batch;

typedef struct tkz_pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_write, cv_free;
	batch *slots;
	size_t k;
	uint64_t n_filled, next_work, n_written;
	int eof, failed;
	titan_err err;

	const tok *tok;
	int add_bos, add_eos;
	int32_t bos, eos;

	int ids_text;
	tokstream_writer *w;
	textin_buf line; /* --ids output line */
	uint64_t docs, tokens, bytes;
	int progress;
	double t0, last;
} tkz_pipe;

static void pipe_fail(tkz_pipe *p, const titan_err *e)
{
	pthread_mutex_lock(&p->mu);
	if (!p->failed) {
		p->failed = 1;
		p->err = *e;
	}
	pthread_cond_broadcast(&p->cv_work);
	pthread_cond_broadcast(&p->cv_write);
	pthread_cond_broadcast(&p->cv_free);
	pthread_mutex_unlock(&p->mu);
}

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

static int encode_batch(tkz_pipe *p, tok_enc *enc, tok_ids *tmp, batch *b, titan_err *err)
{
	b->n_ids = 0;
	for (size_t i = 0; i < b->n_docs; i++) {
		size_t start = b->n_ids;
		tmp->n = 0;
		if (tok_encode(enc, (const uint8_t *)b->text.p + b->off[i], b->off[i + 1] - b->off[i],
			       tmp, err) != 0)
			return -1;
		if (p->add_bos && push_id(b, (uint32_t)p->bos, err) != 0)
			return -1;
		for (size_t j = 0; j < tmp->n; j++)
			if (push_id(b, (uint32_t)tmp->v[j], err) != 0)
				return -1;
		if (p->add_eos && push_id(b, (uint32_t)p->eos, err) != 0)
			return -1;
		b->lens[i] = b->n_ids - start;
	}
	return 0;
}

static void *worker(void *arg)
{
	tkz_pipe *p = arg;
	titan_err err;
	tok_ids tmp = {0};
	tok_enc *enc = tok_enc_new(p->tok, &err);
	if (enc == NULL) {
		pipe_fail(p, &err);
		return NULL;
	}
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->failed && p->next_work >= p->n_filled && !p->eof)
			pthread_cond_wait(&p->cv_work, &p->mu);
		if (p->failed || p->next_work >= p->n_filled)
			break;
		batch *b = &p->slots[p->next_work++ % p->k];
		pthread_mutex_unlock(&p->mu);
		int rc = encode_batch(p, enc, &tmp, b, &err);
		if (rc != 0)
			pipe_fail(p, &err);
		pthread_mutex_lock(&p->mu);
		b->state = SLOT_DONE;
		pthread_cond_broadcast(&p->cv_write);
	}
	pthread_mutex_unlock(&p->mu);
	tok_ids_free(&tmp);
	tok_enc_free(enc);
	return NULL;
}

/* Decimal ids separated by single spaces, one document per line. */
static int write_ids_line(tkz_pipe *p, const uint32_t *ids, size_t n, titan_err *err)
{
	textin_buf *l = &p->line;
	l->n = 0;
	for (size_t i = 0; i < n; i++) {
		char num[16];
		int len = snprintf(num, sizeof num, i ? " %u" : "%u", ids[i]);
		if (l->cap - l->n < (size_t)len + 2) {
			size_t cap = l->cap ? 2 * l->cap : 4096;
			char *q = realloc(l->p, cap);
			if (q == NULL)
				return err_set(err, "out of memory");
			l->p = q;
			l->cap = cap;
		}
		memcpy(l->p + l->n, num, (size_t)len);
		l->n += (size_t)len;
	}
	if (fwrite(l->p, 1, l->n, stdout) != l->n || putchar('\n') == EOF)
		return err_errno(err, "stdout");
	return 0;
}

static void show_progress(tkz_pipe *p, int final)
{
	double now = tkz_now();
	if (!final && (!p->progress || now - p->last < 0.5))
		return;
	p->last = now;
	double mb = (double)p->bytes / 1e6, s = now - p->t0;
	if (final)
		fprintf(stderr, "%s%s: tokenized %llu documents, %llu tokens, %.1f MB in %.2f s (%.1f MB/s)\n",
			p->progress ? "\r\033[K" : "", titan_progname(), (unsigned long long)p->docs,
			(unsigned long long)p->tokens, mb, s, s > 0 ? mb / s : 0.0);
	else
		fprintf(stderr, "\r\033[K%s: %llu documents, %llu tokens, %.1f MB, %.1f MB/s",
			titan_progname(), (unsigned long long)p->docs,
			(unsigned long long)p->tokens, mb, s > 0 ? mb / s : 0.0);
}

static int write_batch(tkz_pipe *p, const batch *b, titan_err *err)
{
	size_t pos = 0;
	for (size_t i = 0; i < b->n_docs; i++) {
		const uint32_t *ids = b->ids + pos;
		int rc = p->ids_text ? write_ids_line(p, ids, b->lens[i], err)
				     : tokstream_write_doc(p->w, ids, b->lens[i], err);
		if (rc != 0)
			return -1;
		pos += b->lens[i];
	}
	p->docs += b->n_docs;
	p->tokens += b->n_ids;
	p->bytes += b->text.n;
	show_progress(p, 0);
	return 0;
}

static void *writer(void *arg)
{
	tkz_pipe *p = arg;
	titan_err err;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		batch *b = &p->slots[p->n_written % p->k];
		while (!p->failed && !(p->n_written < p->n_filled && b->state == SLOT_DONE) &&
		       !(p->eof && p->n_written == p->n_filled))
			pthread_cond_wait(&p->cv_write, &p->mu);
		if (p->failed || p->n_written == p->n_filled)
			break;
		pthread_mutex_unlock(&p->mu);
		int rc = write_batch(p, b, &err);
		if (rc != 0)
			pipe_fail(p, &err);
		pthread_mutex_lock(&p->mu);
		b->state = SLOT_FREE;
		p->n_written++;
		pthread_cond_broadcast(&p->cv_free);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Wait for the slot of the next batch to be free; NULL when the pipe failed. */
static batch *take_slot(tkz_pipe *p)
{
	pthread_mutex_lock(&p->mu);
	batch *b = &p->slots[p->n_filled % p->k];
	while (!p->failed && b->state != SLOT_FREE)
		pthread_cond_wait(&p->cv_free, &p->mu);
	int failed = p->failed;
	pthread_mutex_unlock(&p->mu);
	if (failed)
		return NULL;
	b->text.n = 0;
	b->n_docs = 0;
	b->off[0] = 0;
	return b;
}

static void submit(tkz_pipe *p, batch *b)
{
	pthread_mutex_lock(&p->mu);
	b->state = SLOT_FILLED;
	p->n_filled++;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
}

static int add_doc(batch *b, const char *doc, size_t len, titan_err *err)
{
	if (b->n_docs + 1 >= b->cap_docs) {
		size_t cap = b->cap_docs ? 2 * b->cap_docs : BATCH_DOCS + 2;
		size_t *off = realloc(b->off, cap * sizeof *off);
		if (off == NULL)
			return err_set(err, "out of memory");
		b->off = off;
		size_t *lens = realloc(b->lens, cap * sizeof *lens);
		if (lens == NULL)
			return err_set(err, "out of memory");
		b->lens = lens;
		b->cap_docs = cap;
	}
	if (len > 0 && textin_buf_append(&b->text, doc, len) != 0)
		return err_set(err, "out of memory");
	b->off[++b->n_docs] = b->text.n;
	return 0;
}

/* Read every input into batches.  0 ok, -1 error in *err. */
static int produce(tkz_pipe *p, const tkz_opts *o, uint64_t *skipped, titan_err *err)
{
	batch *b = NULL;
	for (int f = 0; f < o->n_files; f++) {
		textin *in = textin_open(o->files[f], &o->in, err);
		if (in == NULL)
			return -1;
		const char *doc;
		size_t len;
		int r;
		while ((r = textin_next(in, &doc, &len, err)) == 1) {
			if (b == NULL && (b = take_slot(p)) == NULL)
				break;
			if (add_doc(b, doc, len, err) != 0) {
				r = -1;
				break;
			}
			if (b->text.n >= BATCH_BYTES || b->n_docs >= BATCH_DOCS) {
				submit(p, b);
				b = NULL;
			}
		}
		*skipped += textin_skipped(in);
		textin_close(in);
		if (r < 0)
			return -1;
		if (r == 1) /* the pipe failed: its error is reported */
			return 0;
	}
	if (b != NULL)
		submit(p, b);
	return 0;
}

static int pipe_init(tkz_pipe *p, const tkz_opts *o)
{
	p->k = 2 * (size_t)o->threads + 2;
	p->slots = calloc(p->k, sizeof *p->slots);
	if (p->slots == NULL)
		return -1;
	for (size_t i = 0; i < p->k; i++) {
		p->slots[i].cap_docs = BATCH_DOCS + 2;
		p->slots[i].off = malloc(p->slots[i].cap_docs * sizeof(size_t));
		p->slots[i].lens = malloc(p->slots[i].cap_docs * sizeof(size_t));
		if (!p->slots[i].off || !p->slots[i].lens)
			return -1;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_write, NULL);
	pthread_cond_init(&p->cv_free, NULL);
	return 0;
}

static void pipe_free(tkz_pipe *p)
{
	for (size_t i = 0; p->slots && i < p->k; i++) {
		free(p->slots[i].text.p);
		free(p->slots[i].off);
		free(p->slots[i].ids);
		free(p->slots[i].lens);
	}
	free(p->slots);
	free(p->line.p);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv_work);
	pthread_cond_destroy(&p->cv_write);
	pthread_cond_destroy(&p->cv_free);
}

/* BOS/EOS policy: the option, else the tokenizer's default. */
static int resolve_specials(tkz_pipe *p, const tkz_opts *o, titan_err *err)
{
	p->bos = tok_bos_id(p->tok);
	p->eos = tok_eos_id(p->tok);
	p->add_bos = o->bos >= 0 ? o->bos : tok_default_add_bos(p->tok);
	p->add_eos = o->eos >= 0 ? o->eos : tok_default_add_eos(p->tok);
	if (p->add_bos && p->bos < 0)
		return err_set(err, "%s: --bos: the tokenizer has no BOS token", o->tokenizer);
	if (p->add_eos && p->eos < 0)
		return err_set(err, "%s: --eos: the tokenizer has no EOS token", o->tokenizer);
	return 0;
}

static int run(tkz_pipe *p, const tkz_opts *o, const uint8_t fp[32], uint64_t *skipped,
	       titan_err *err)
{
	if (resolve_specials(p, o, err) != 0)
		return -1;
	if (!p->ids_text) {
		int64_t nv = tok_n_vocab(p->tok);
		tokstream_header h = {
			.id_width = tokstream_id_width((uint32_t)nv),
			.vocab_size = (uint32_t)nv,
			.bos_id = p->bos,
			.eos_id = p->eos,
			.flags = (p->add_bos ? TOKSTREAM_FLAG_BOS : 0) | (p->add_eos ? TOKSTREAM_FLAG_EOS : 0),
		};
		memcpy(h.fingerprint, fp, 32);
		p->w = tokstream_writer_open(stdout, &h, err);
		if (p->w == NULL)
			return -1;
	}
	if (pipe_init(p, o) != 0)
		return err_set(err, "out of memory");
	pthread_t *th = calloc((size_t)o->threads + 1, sizeof *th);
	if (th == NULL)
		return err_set(err, "out of memory");
	int started = 0, rc = 0;
	for (int i = 0; i <= o->threads && rc == 0; i++) {
		rc = pthread_create(&th[i], NULL, i == 0 ? writer : worker, p);
		started += rc == 0;
	}
	if (rc != 0) {
		titan_err e;
		err_set(&e, "cannot start threads");
		pipe_fail(p, &e);
	}
	titan_err perr;
	int prc = rc == 0 ? produce(p, o, skipped, &perr) : 0;
	if (prc != 0)
		pipe_fail(p, &perr);
	pthread_mutex_lock(&p->mu);
	p->eof = 1;
	pthread_cond_broadcast(&p->cv_work);
	pthread_cond_broadcast(&p->cv_write);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	if (p->failed) {
		*err = p->err;
		if (p->w)
			tokstream_writer_abort(p->w);
		fflush(stdout);
		return -1;
	}
	if (p->w)
		return tokstream_writer_close(p->w, err);
	if (fflush(stdout) != 0)
		return err_errno(err, "stdout");
	return 0;
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
	tkz_pipe p = {.tok = t, .ids_text = o->ids, .progress = !o->quiet && isatty(STDERR_FILENO)};
	p.t0 = p.last = tkz_now();
	uint64_t skipped = 0;
	int rc = run(&p, o, fp, &skipped, &err);
	pipe_free(&p);
	tok_free(t);
	if (rc != 0) {
		if (p.progress)
			fputs("\r\033[K", stderr);
		titan_die_err(&err);
	}
	if (!o->quiet) {
		show_progress(&p, 1);
		if (o->in.skip_bad)
			fprintf(stderr, "%s: skipped %llu malformed %s\n", titan_progname(),
				(unsigned long long)skipped,
				o->in.format == TEXTIN_JSONL ? "lines" : "documents");
	}
	return TITAN_EXIT_OK;
}
