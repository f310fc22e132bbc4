/* titan-shard's jobs: build a shard folder from a token stream (resumable),
 * verify it, and write it back as a stream. */
#include "shard/shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/crc32c.h"

typedef struct build {
	const shard_build_opts *o;
	const char *dir;
	shard_manifest m;
	int resuming;           /* the manifest was found and the prefix is not yet checked */
	uint64_t doc;           /* input document index */
	uint64_t tokens;        /* input tokens so far */
	uint32_t crc;           /* over the input's document records so far */
	shard_writer *w[2];
	uint64_t w_first[2];    /* input index of the open shard's first document */
	shard_build_stats *st;
	time_t last_report;
	int lock_fd;            /* the folder, flock'd while we write it */
} build;

static void shard_name(char *out, size_t n, const char *dir, int s, size_t k)
{
	snprintf(out, n, "%s/%s-%06zu.bin", dir, s == SHARD_TRAIN ? "train" : "val", k);
}

static int same_options(const shard_manifest *m, const shard_build_opts *o)
{
	uint32_t ft = o->zstd_level > 0 ? (o->frame_tokens ? o->frame_tokens
					   : SHARD_DEFAULT_FRAME_TOKENS) : 0;
	return m->shard_tokens == o->shard_tokens && m->zstd_level == o->zstd_level &&
	       m->frame_tokens == ft && m->val_docs == o->val_docs &&
	       m->val_fraction == o->val_fraction;
}

static int listed(const shard_manifest *m, const char *name)
{
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < m->split[s].n_shards; i++)
			if (strcmp(m->split[s].shards[i].file, name) == 0)
				return 1;
	return 0;
}

static int is_shard_name(const char *name)
{
	return strncmp(name, "train-", 6) == 0 || strncmp(name, "val-", 4) == 0 ||
	       strncmp(name, "manifest.json.tmp.", 18) == 0;
}

/* Remove what an interrupted run left: temporary files and shards written
 * after the last manifest update.  Only names titan-shard makes. */
static int clean_leftovers(build *b, titan_err *err)
{
	DIR *d = opendir(b->dir);
	if (d == NULL)
		return err_errno(err, "%s", b->dir);
	struct dirent *e;
	char path[4096];
	while ((e = readdir(d)) != NULL) {
		if (!is_shard_name(e->d_name) || listed(&b->m, e->d_name))
			continue;
		snprintf(path, sizeof path, "%s/%s", b->dir, e->d_name);
		if (unlink(path) != 0 && errno != ENOENT) {
			err_errno(err, "%s: remove leftover", path);
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	return 0;
}

static int dir_is_empty(const char *dir, titan_err *err)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return err_errno(err, "%s", dir);
	struct dirent *e;
	int empty = 1;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = 0;
	closedir(d);
	return empty;
}

int shard_entry_check(const shard_file *f, const shard_manifest *m, const shard_entry *e,
		      titan_err *err)
{
	const shard_header *h = shard_file_header(f);
	const char *path = shard_file_path(f);
	if (h->n_tokens != e->tokens || h->n_docs != e->docs)
		return err_set(err, "%s: %llu tokens, %llu documents; manifest.json says %llu, %llu",
			       path, (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs,
			       (unsigned long long)e->tokens, (unsigned long long)e->docs);
	if (h->index_offset + h->index_bytes != e->bytes)
		return err_set(err, "%s: %llu bytes, manifest.json says %llu", path,
			       (unsigned long long)(h->index_offset + h->index_bytes),
			       (unsigned long long)e->bytes);
	if (h->header_crc != e->header_crc || h->data_crc != e->data_crc ||
	    h->index_crc != e->index_crc)
		return err_set(err, "%s: checksums differ from manifest.json (replaced file?)", path);
	if (h->vocab_size != m->stream.vocab_size ||
	    memcmp(h->fingerprint, m->stream.fingerprint, 32) != 0)
		return err_set(err, "%s: vocab mismatch with manifest.json (vocab_size %u, the "
			       "manifest's %u)", path, h->vocab_size, m->stream.vocab_size);
	return 0;
}

/* A listed shard against its manifest entry; full also reads the data
 * against its CRCs and the vocabulary. */
static int verify_entry(const char *dir, const shard_manifest *m, const shard_entry *e, int full,
			titan_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, e->file);
	shard_file *f = shard_file_open(path, err);
	if (f == NULL)
		return -1;
	int rc = shard_entry_check(f, m, e, err);
	if (rc == 0 && full)
		rc = shard_file_verify(f, err);
	shard_file_close(f);
	return rc;
}

/* Fresh folder, or resume from its manifest, or refuse. */
/* One writer per folder: an exclusive lock on the folder itself (no lock file
 * that could be left behind; the kernel drops it when the process dies). */
static int lock_dir(build *b, titan_err *err)
{
	b->lock_fd = dir_lock(b->dir, "titan-shard is writing", err);
	return b->lock_fd < 0 ? -1 : 0;
}

static int prepare(build *b, const tokstream_header *h, titan_err *err)
{
	const shard_build_opts *o = b->o;
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", b->dir);
	struct stat st;
	if (lock_dir(b, err) != 0)
		return -1;
	if (stat(path, &st) == 0) {
		if (shard_manifest_read(b->dir, &b->m, err) != 0)
			return -1;
		if (b->m.complete)
			return err_set(err, "%s: already holds a complete shard set; remove it or "
				       "choose another --out", b->dir);
		if (!same_options(&b->m, o))
			return err_set(err, "%s: an interrupted run with other options (shard tokens, "
				       "compression or validation split) is there; rerun with the "
				       "same options or remove the folder", b->dir);
		if (!tokstream_header_same_vocab(&b->m.stream, h))
			return err_set(err, "%s: vocab mismatch between inputs (the folder was made "
				       "from another tokenizer)", b->dir);
		/* The shards already listed must still be there, whole: a resume
		 * only appends to them. */
		for (int s = 0; s < 2; s++)
			for (size_t i = 0; i < b->m.split[s].n_shards; i++)
				if (verify_entry(b->dir, &b->m, &b->m.split[s].shards[i], 0, err) != 0)
					return err_prefix(err, "%s: cannot resume (remove the folder to "
							  "start over)", b->dir);
		b->resuming = b->m.input_docs > 0;
		b->st->resumed = 1;
		return clean_leftovers(b, err);
	}
	int empty = dir_is_empty(b->dir, err);
	if (empty < 0)
		return -1;
	if (!empty)
		return err_set(err, "%s: folder is not empty and has no manifest.json; refusing "
			       "to mix shards with other files", b->dir);
	b->m.stream = *h;
	b->m.shard_tokens = o->shard_tokens;
	b->m.zstd_level = o->zstd_level;
	b->m.frame_tokens = o->zstd_level > 0 ? (o->frame_tokens ? o->frame_tokens
						 : SHARD_DEFAULT_FRAME_TOKENS) : 0;
	b->m.val_fraction = o->val_fraction;
	b->m.val_docs = o->val_docs;
	/* Written before any shard, so a folder with shards always has a manifest. */
	return shard_manifest_write(b->dir, &b->m, err);
}

/* Close split s's open shard; the input up to document `upto` (exclusive) is
 * then accounted for. */
static int commit(build *b, int s, uint64_t upto, titan_err *err)
{
	shard_writer *w = b->w[s];
	b->w[s] = NULL;
	shard_entry e = {0};
	size_t k = b->m.split[s].n_shards;
	snprintf(e.file, sizeof e.file, "%s-%06zu.bin", s == SHARD_TRAIN ? "train" : "val", k);
	shard_header h;
	if (shard_writer_commit(w, &h, err) != 0)
		return -1;
	e.tokens = h.n_tokens;
	e.docs = h.n_docs;
	e.bytes = h.index_offset + h.index_bytes;
	e.first_doc = b->w_first[s];
	e.header_crc = h.header_crc;
	e.data_crc = h.data_crc;
	e.index_crc = h.index_crc;
	b->st->bytes_out += e.bytes;
	if (shard_manifest_add(&b->m, s, &e, err) != 0)
		return -1;
	b->m.split[s].next_doc = upto;
	b->m.input_docs = upto;
	b->m.input_tokens = b->tokens;
	b->m.input_crc = b->crc;
	return shard_manifest_write(b->dir, &b->m, err);
}

static int input_differs(build *b, titan_err *err)
{
	return err_set(err, "%s: the input differs from the one the interrupted run read "
		       "(its first %llu documents, CRC-32C 0x%08x); nothing was changed; use the "
		       "same input or remove the folder", b->dir,
		       (unsigned long long)b->m.input_docs, b->m.input_crc);
}

/* crc: the input's record CRC including this document (from the reader). */
static int add_doc(build *b, const uint32_t *ids, const uint8_t *mask, size_t n, uint32_t crc,
		   titan_err *err)
{
	if (b->resuming && b->doc == b->m.input_docs) {
		if (b->crc != b->m.input_crc || b->tokens != b->m.input_tokens)
			return input_differs(b, err);
		b->resuming = 0;
	}
	int s = shard_split_of(&b->m, b->doc);
	b->crc = crc;
	b->tokens += n;
	if (b->doc < b->m.split[s].next_doc) { /* already in a listed shard */
		b->st->skipped_docs++;
		b->doc++;
		return 0;
	}
	if (b->w[s] == NULL) {
		char path[4096];
		shard_name(path, sizeof path, b->dir, s, b->m.split[s].n_shards);
		shard_write_opts wo = {.stream = &b->m.stream, .zstd_level = b->m.zstd_level,
				       .frame_tokens = b->m.frame_tokens};
		if ((b->w[s] = shard_writer_open(path, &wo, err)) == NULL)
			return -1;
		b->w_first[s] = b->doc;
	}
	if (shard_writer_add_doc_masked(b->w[s], ids, mask, n, err) != 0)
		return -1;
	b->st->docs++;
	b->st->tokens += n;
	if (shard_writer_tokens(b->w[s]) >= b->m.shard_tokens) {
		/* The interrupted run did not fill this shard before its last manifest. */
		if (b->resuming)
			return input_differs(b, err);
		if (commit(b, s, b->doc + 1, err) != 0)
			return -1;
	}
	b->doc++;
	return 0;
}

static void report(build *b, tokstream_reader *in, int last)
{
	time_t now = time(NULL);
	if (!b->o->progress || (!last && now - b->last_report < 2))
		return;
	b->last_report = now;
	fprintf(stderr, "%s: %llu documents, %llu tokens, %zu train + %zu val shards, %.1f MB "
		"read%s\n", titan_progname(), (unsigned long long)b->doc,
		(unsigned long long)b->tokens, b->m.split[0].n_shards, b->m.split[1].n_shards,
		(double)tokstream_reader_offset(in) / 1e6, last ? ", done" : "");
}

static int finish(build *b, titan_err *err)
{
	if (b->doc < b->m.input_docs)
		return err_set(err, "%s: the input ended after %llu documents, before the %llu the "
			       "interrupted run had read; nothing was changed", b->dir,
			       (unsigned long long)b->doc, (unsigned long long)b->m.input_docs);
	if (b->resuming && (b->crc != b->m.input_crc || b->tokens != b->m.input_tokens))
		return input_differs(b, err);
	for (int s = 0; s < 2; s++) {
		if (b->w[s] != NULL) {
			if (commit(b, s, b->doc, err) != 0)
				return -1;
		}
		b->m.split[s].next_doc = b->doc;
	}
	b->m.complete = 1;
	b->m.input_docs = b->doc;
	b->m.input_tokens = b->tokens;
	b->m.input_crc = b->crc;
	return shard_manifest_write(b->dir, &b->m, err);
}

int shard_build(tokstream_reader *in, const shard_build_opts *o, shard_build_stats *st,
		titan_err *err)
{
	shard_build_opts opts = *o;
	if (opts.shard_tokens == 0)
		opts.shard_tokens = SHARD_DEFAULT_TOKENS;
	memset(st, 0, sizeof *st);
	build b = {.o = &opts, .dir = o->out, .st = st, .last_report = time(NULL), .lock_fd = -1};
	int rc = prepare(&b, tokstream_reader_header(in), err);
	const uint32_t *ids;
	size_t n;
	while (rc == 0) {
		int r = tokstream_read_doc(in, &ids, &n, err);
		if (r <= 0) {
			rc = r;
			break;
		}
		rc = add_doc(&b, ids, tokstream_read_mask(in), n, tokstream_reader_crc(in), err);
		report(&b, in, 0);
	}
	if (rc == 0)
		rc = finish(&b, err);
	if (rc == 0)
		report(&b, in, 1);
	st->bytes_in = tokstream_reader_offset(in);
	for (int s = 0; s < 2; s++)
		shard_writer_abort(b.w[s]);
	shard_manifest_free(&b.m);
	if (b.lock_fd >= 0)
		close(b.lock_fd);
	return rc;
}

/* ---- verify */

int shard_verify_dir(const char *dir, void (*warn)(const char *msg), titan_err *err)
{
	shard_manifest m;
	if (shard_manifest_read(dir, &m, err) != 0)
		return -1;
	int rc = 0;
	for (int s = 0; s < 2 && rc == 0; s++) {
		uint64_t tokens = 0, docs = 0;
		for (size_t i = 0; i < m.split[s].n_shards && rc == 0; i++) {
			rc = verify_entry(dir, &m, &m.split[s].shards[i], 1, err);
			tokens += m.split[s].shards[i].tokens;
			docs += m.split[s].shards[i].docs;
		}
		if (rc == 0 && (tokens != m.split[s].tokens || docs != m.split[s].docs))
			rc = err_set(err, "%s/manifest.json: %s totals disagree with its shards", dir,
				     s == SHARD_TRAIN ? "train" : "val");
	}
	if (rc == 0 && m.complete && m.split[0].docs + m.split[1].docs != m.input_docs)
		rc = err_set(err, "%s/manifest.json: %llu input documents, the shards hold %llu",
			     dir, (unsigned long long)m.input_docs,
			     (unsigned long long)(m.split[0].docs + m.split[1].docs));
	DIR *d = rc == 0 && warn ? opendir(dir) : NULL;
	struct dirent *e;
	while (d != NULL && (e = readdir(d)) != NULL) {
		if (!is_shard_name(e->d_name) || listed(&m, e->d_name))
			continue;
		char msg[512];
		snprintf(msg, sizeof msg, "%s/%s: not listed in manifest.json (left by an "
			 "interrupted run; not part of the data set)", dir, e->d_name);
		warn(msg);
	}
	if (d != NULL)
		closedir(d);
	shard_manifest_free(&m);
	return rc;
}

/* ---- cat */

typedef struct cursor {
	const char *dir;
	const shard_split *sp;
	size_t shard;      /* index of the open shard */
	uint64_t doc;      /* next document in it */
	shard_file *f;
	uint32_t *buf;
	size_t cap;
	uint8_t *mask;     /* the document's label mask (masked shards) */
} cursor;

/* The next document: its ids, and (mask not NULL) its label mask, NULL when
 * the shard has none. */
static int cursor_next(cursor *c, const uint32_t **ids, const uint8_t **mask, size_t *n,
		       titan_err *err)
{
	while (c->f == NULL || c->doc == shard_file_header(c->f)->n_docs) {
		if (c->f != NULL) {
			shard_file_close(c->f);
			c->f = NULL;
			c->shard++;
		}
		if (c->shard >= c->sp->n_shards)
			return err_set(err, "%s: the shards hold fewer documents than manifest.json "
				       "lists", c->dir);
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", c->dir, c->sp->shards[c->shard].file);
		if ((c->f = shard_file_open(path, err)) == NULL)
			return -1;
		c->doc = 0;
	}
	const shard_header *h = shard_file_header(c->f);
	uint64_t a = shard_file_doc_start(c->f, c->doc);
	uint64_t z = c->doc + 1 < h->n_docs ? shard_file_doc_start(c->f, c->doc + 1) : h->n_tokens;
	if (z < a || z > h->n_tokens)
		return err_set(err, "%s: document index out of order", shard_file_path(c->f));
	size_t len = (size_t)(z - a);
	if (len + 1 > c->cap) {
		uint32_t *b = realloc(c->buf, (len + 1) * sizeof *b);
		if (b == NULL)
			return err_set(err, "out of memory");
		c->buf = b;
		uint8_t *m = realloc(c->mask, len + 1);
		if (m == NULL)
			return err_set(err, "out of memory");
		c->mask = m;
		c->cap = len + 1;
	}
	if (shard_file_tokens(c->f, a, len, c->buf, err) != 0 ||
	    shard_file_mask(c->f, a, len, c->mask, err) != 0)
		return -1;
	*mask = h->flags & SHARD_MASK ? c->mask : NULL;
	c->doc++;
	*ids = c->buf;
	*n = len;
	return 0;
}

static void cursor_free(cursor *c)
{
	shard_file_close(c->f);
	free(c->buf);
	free(c->mask);
}

int shard_cat_dir(const char *dir, int which, FILE *out, titan_err *err)
{
	shard_manifest m;
	if (shard_manifest_read(dir, &m, err) != 0)
		return -1;
	cursor c[2] = {{.dir = dir, .sp = &m.split[0]}, {.dir = dir, .sp = &m.split[1]}};
	tokstream_writer *w = tokstream_writer_open(out, &m.stream, err);
	int rc = w ? 0 : -1;
	const uint32_t *ids;
	const uint8_t *mask;
	size_t n;
	if (which >= 0) {
		for (uint64_t d = 0; rc == 0 && d < m.split[which].docs; d++)
			if ((rc = cursor_next(&c[which], &ids, &mask, &n, err)) == 0)
				rc = tokstream_write_doc_masked(w, ids, mask, n, err);
	} else {
		/* Input order: the split rule says which split each document went to;
		 * documents past a split's next_doc were not written (incomplete set). */
		uint64_t end = m.split[0].next_doc > m.split[1].next_doc ? m.split[0].next_doc
									  : m.split[1].next_doc;
		for (uint64_t i = 0; rc == 0 && i < end; i++) {
			int s = shard_split_of(&m, i);
			if (i >= m.split[s].next_doc)
				continue;
			if ((rc = cursor_next(&c[s], &ids, &mask, &n, err)) == 0)
				rc = tokstream_write_doc_masked(w, ids, mask, n, err);
		}
	}
	if (rc == 0)
		rc = tokstream_writer_close(w, err);
	else
		tokstream_writer_abort(w);
	cursor_free(&c[0]);
	cursor_free(&c[1]);
	shard_manifest_free(&m);
	return rc;
}

int shard_cat_file(const char *path, FILE *out, titan_err *err)
{
	shard_file *f = shard_file_open(path, err);
	if (f == NULL)
		return -1;
	const shard_header *h = shard_file_header(f);
	tokstream_header th = {.id_width = h->id_width, .vocab_size = h->vocab_size,
			       .bos_id = h->bos_id, .eos_id = h->eos_id,
			       .flags = (h->flags & SHARD_DOC_BOS ? TOKSTREAM_FLAG_BOS : 0) |
					(h->flags & SHARD_DOC_EOS ? TOKSTREAM_FLAG_EOS : 0) |
					(h->flags & SHARD_MASK ? TOKSTREAM_FLAG_MASK : 0)};
	memcpy(th.fingerprint, h->fingerprint, 32);
	shard_split sp = {.n_shards = 0};
	cursor c = {.dir = NULL, .sp = &sp, .f = f};
	tokstream_writer *w = tokstream_writer_open(out, &th, err);
	int rc = w ? 0 : -1;
	const uint32_t *ids;
	const uint8_t *mask;
	size_t n;
	for (uint64_t d = 0; rc == 0 && d < h->n_docs; d++)
		if ((rc = cursor_next(&c, &ids, &mask, &n, err)) == 0)
			rc = tokstream_write_doc_masked(w, ids, mask, n, err);
	if (rc == 0)
		rc = tokstream_writer_close(w, err);
	else
		tokstream_writer_abort(w);
	cursor_free(&c);
	return rc;
}
