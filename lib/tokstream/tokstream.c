#include "tokstream/tokstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

uint32_t tokstream_id_width(uint32_t vocab_size)
{
	return vocab_size <= 65536u ? 2u : 4u;
}

void tokstream_header_encode(const tokstream_header *h, uint8_t out[TOKSTREAM_HEADER_LEN])
{
	memset(out, 0, TOKSTREAM_HEADER_LEN);
	memcpy(out, TOKSTREAM_MAGIC, 4);
	put32(out + 4, h->flags & TOKSTREAM_FLAG_MASK ? TOKSTREAM_VERSION_MASK : TOKSTREAM_VERSION);
	put32(out + 8, TOKSTREAM_HEADER_LEN);
	put32(out + 12, h->id_width);
	put32(out + 16, h->vocab_size);
	put32(out + 20, (uint32_t)h->bos_id);
	put32(out + 24, (uint32_t)h->eos_id);
	put32(out + 28, h->flags);
	memcpy(out + 32, h->fingerprint, 32);
	put32(out + TOKSTREAM_HEADER_LEN - 4, crc32c(0, out, TOKSTREAM_HEADER_LEN - 4));
}

int tokstream_header_decode(const uint8_t *in, size_t len, tokstream_header *h,
			    const char *name, titan_err *err)
{
	if (len < 4 || memcmp(in, TOKSTREAM_MAGIC, 4) != 0) {
		uint32_t m = 0;
		for (size_t i = 0; i < 4 && i < len; i++)
			m |= (uint32_t)in[i] << (8 * i);
		return err_set(err, "%s: bad magic 0x%08x, expected \"TTOK\" (not a token stream?)",
			       name, m);
	}
	if (len < TOKSTREAM_HEADER_LEN)
		return err_set(err, "%s: token stream header is %zu bytes, expected %u", name, len,
			       TOKSTREAM_HEADER_LEN);
	uint32_t version = get32(in + 4);
	if (version != TOKSTREAM_VERSION && version != TOKSTREAM_VERSION_MASK)
		return err_set(err, "%s: token stream version %u, this program reads versions %u "
			       "and %u", name, version, TOKSTREAM_VERSION, TOKSTREAM_VERSION_MASK);
	uint32_t crc = crc32c(0, in, len - 4);
	if (crc != get32(in + len - 4))
		return err_set(err, "%s: token stream header checksum 0x%08x, computed 0x%08x",
			       name, get32(in + len - 4), crc);
	h->id_width = get32(in + 12);
	h->vocab_size = get32(in + 16);
	h->bos_id = (int32_t)get32(in + 20);
	h->eos_id = (int32_t)get32(in + 24);
	h->flags = get32(in + 28);
	memcpy(h->fingerprint, in + 32, 32);
	if (((h->flags & TOKSTREAM_FLAG_MASK) != 0) != (version == TOKSTREAM_VERSION_MASK))
		return err_set(err, "%s: token stream version %u with%s the label-mask flag", name,
			       version, h->flags & TOKSTREAM_FLAG_MASK ? "" : "out");
	if (h->vocab_size == 0)
		return err_set(err, "%s: token stream vocab_size is 0", name);
	if (h->id_width != tokstream_id_width(h->vocab_size))
		return err_set(err, "%s: token stream id_width %u does not fit vocab_size %u "
			       "(expected %u)", name, h->id_width, h->vocab_size,
			       tokstream_id_width(h->vocab_size));
	if (h->bos_id < -1 || (h->bos_id >= 0 && (uint32_t)h->bos_id >= h->vocab_size))
		return err_set(err, "%s: token stream bos_id %d out of range", name, h->bos_id);
	if (h->eos_id < -1 || (h->eos_id >= 0 && (uint32_t)h->eos_id >= h->vocab_size))
		return err_set(err, "%s: token stream eos_id %d out of range", name, h->eos_id);
	return 0;
}

int tokstream_header_same_vocab(const tokstream_header *a, const tokstream_header *b)
{
	return a->id_width == b->id_width && a->vocab_size == b->vocab_size &&
	       memcmp(a->fingerprint, b->fingerprint, 32) == 0;
}

/* ---- writer */

struct tokstream_writer {
	FILE *fp;
	tokstream_header h;
	uint64_t docs, tokens;
	uint32_t crc;     /* over the document records written so far */
	uint8_t *buf;     /* one document's record, encoded */
	size_t cap;
};

static int write_all(FILE *fp, const void *p, size_t n, titan_err *err)
{
	if (n > 0 && fwrite(p, 1, n, fp) != n)
		return err_errno(err, "token stream: write");
	return 0;
}

tokstream_writer *tokstream_writer_open(FILE *fp, const tokstream_header *h, titan_err *err)
{
	/* Never write a header the reader would refuse. */
	uint8_t enc[TOKSTREAM_HEADER_LEN];
	tokstream_header back;
	tokstream_header_encode(h, enc);
	if (tokstream_header_decode(enc, sizeof enc, &back, "token stream", err) != 0)
		return NULL;
	tokstream_writer *w = calloc(1, sizeof *w);
	if (w == NULL) {
		err_set(err, "token stream: out of memory");
		return NULL;
	}
	w->fp = fp;
	w->h = *h;
	uint8_t hdr[TOKSTREAM_HEADER_LEN];
	tokstream_header_encode(h, hdr);
	if (write_all(fp, hdr, sizeof hdr, err) != 0) {
		free(w);
		return NULL;
	}
	return w;
}

int tokstream_write_doc(tokstream_writer *w, const uint32_t *ids, size_t n, titan_err *err)
{
	return tokstream_write_doc_masked(w, ids, NULL, n, err);
}

int tokstream_write_doc_masked(tokstream_writer *w, const uint32_t *ids, const uint8_t *mask,
			       size_t n, titan_err *err)
{
	if (n > TOKSTREAM_MAX_DOC)
		return err_set(err, "token stream: document of %zu tokens, at most %u", n,
			       TOKSTREAM_MAX_DOC);
	int masked = (w->h.flags & TOKSTREAM_FLAG_MASK) != 0;
	if (masked != (mask != NULL))
		return err_set(err, "token stream: document %llu %s a label mask, the stream %s",
			       (unsigned long long)w->docs, mask ? "has" : "lacks",
			       masked ? "is masked" : "is not");
	size_t need = 4 + n * w->h.id_width + (masked ? (n + 7) / 8 : 0);
	if (need > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap < need)
			cap *= 2;
		uint8_t *b = realloc(w->buf, cap);
		if (b == NULL)
			return err_set(err, "token stream: out of memory (%zu bytes)", cap);
		w->buf = b;
		w->cap = cap;
	}
	put32(w->buf, (uint32_t)n);
	uint8_t *p = w->buf + 4;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] >= w->h.vocab_size)
			return err_set(err, "token stream: document %llu: id %u at position %zu is "
				       "not below vocab_size %u", (unsigned long long)w->docs,
				       ids[i], i, w->h.vocab_size);
		if (w->h.id_width == 2) {
			p[2 * i] = (uint8_t)ids[i];
			p[2 * i + 1] = (uint8_t)(ids[i] >> 8);
		} else {
			put32(p + 4 * i, ids[i]);
		}
	}
	if (masked) {
		uint8_t *m = p + n * w->h.id_width;
		memset(m, 0, (n + 7) / 8);
		for (size_t i = 0; i < n; i++)
			m[i / 8] |= (uint8_t)((mask[i] != 0) << (i % 8));
	}
	if (write_all(w->fp, w->buf, need, err) != 0)
		return -1;
	w->crc = crc32c(w->crc, w->buf, need);
	w->docs++;
	w->tokens += n;
	return 0;
}

int tokstream_writer_close(tokstream_writer *w, titan_err *err)
{
	uint8_t t[TOKSTREAM_TRAILER_LEN];
	put32(t, TOKSTREAM_END);
	put64(t + 4, w->docs);
	put64(t + 12, w->tokens);
	put32(t + 20, w->crc);
	put32(t + 24, crc32c(0, t, 24));
	int rc = write_all(w->fp, t, sizeof t, err);
	if (rc == 0 && fflush(w->fp) != 0)
		rc = err_errno(err, "token stream: write");
	tokstream_writer_abort(w);
	return rc;
}

void tokstream_writer_abort(tokstream_writer *w)
{
	if (w == NULL)
		return;
	free(w->buf);
	free(w);
}

/* ---- reader */

struct tokstream_reader {
	FILE *fp;
	char *name;
	tokstream_header first, cur;
	int accept_mismatch;
	int done;
	uint64_t seg_docs, seg_tokens; /* in the current segment */
	uint32_t seg_crc;
	uint32_t all_crc;               /* records of every segment, chained */
	uint64_t docs, tokens, offset;  /* over the whole stream */
	uint8_t *raw;                   /* the current document's ids as stored */
	size_t raw_cap;
	uint32_t *ids;                  /* ... and widened */
	size_t ids_cap;
	uint8_t *mask;                  /* masked streams: the document's mask, a byte a token */
	size_t mask_cap;
};

/* fread that counts; returns the bytes read (short only at EOF or error). */
static size_t rd(tokstream_reader *r, void *p, size_t n)
{
	size_t got = n ? fread(p, 1, n, r->fp) : 0;
	r->offset += got;
	return got;
}

static int read_error(tokstream_reader *r, titan_err *err)
{
	if (ferror(r->fp))
		return err_errno(err, "%s: read", r->name);
	return err_set(err, "%s: truncated token stream (no trailer after %llu documents)",
		       r->name, (unsigned long long)r->docs);
}

/* Read a segment header.  first: at the start of input, where an empty input
 * is an error; later an immediate end of input is the clean end (returns 1). */
static int read_header(tokstream_reader *r, tokstream_header *h, int first, titan_err *err)
{
	uint8_t head[12];
	size_t got = rd(r, head, sizeof head);
	if (got == 0 && !ferror(r->fp)) {
		if (!first)
			return 1;
		return err_set(err, "%s: empty input, expected a token stream", r->name);
	}
	if (got >= 4 && memcmp(head, TOKSTREAM_MAGIC, 4) != 0)
		return tokstream_header_decode(head, got, h, r->name, err);
	if (got < sizeof head)
		return err_set(err, "%s: offset %llu: token stream header cut short after %zu bytes",
			       r->name, (unsigned long long)(r->offset - got), got);
	uint32_t len = get32(head + 8);
	if (len < TOKSTREAM_HEADER_LEN || len > TOKSTREAM_HEADER_MAX)
		return err_set(err, "%s: offset %llu: token stream header_len %u, expected %u",
			       r->name, (unsigned long long)(r->offset - got), len,
			       TOKSTREAM_HEADER_LEN);
	uint8_t buf[TOKSTREAM_HEADER_MAX];
	memcpy(buf, head, sizeof head);
	if (rd(r, buf + sizeof head, len - sizeof head) != len - sizeof head) {
		if (ferror(r->fp))
			return err_errno(err, "%s: read", r->name);
		return err_set(err, "%s: token stream header cut short", r->name);
	}
	return tokstream_header_decode(buf, len, h, r->name, err);
}

tokstream_reader *tokstream_reader_open(FILE *fp, const char *name, titan_err *err)
{
	tokstream_reader *r = calloc(1, sizeof *r);
	if (r == NULL || (r->name = strdup(name ? name : "-")) == NULL) {
		free(r);
		err_set(err, "%s: out of memory", name);
		return NULL;
	}
	r->fp = fp;
	if (read_header(r, &r->first, 1, err) != 0) {
		tokstream_reader_close(r);
		return NULL;
	}
	r->cur = r->first;
	return r;
}

void tokstream_reader_accept_mismatch(tokstream_reader *r, int accept)
{
	r->accept_mismatch = accept;
}

/* The trailer after the 0xFFFFFFFF marker: check it against what was read. */
static int read_trailer(tokstream_reader *r, titan_err *err)
{
	uint8_t t[TOKSTREAM_TRAILER_LEN];
	put32(t, TOKSTREAM_END);
	if (rd(r, t + 4, sizeof t - 4) != sizeof t - 4)
		return read_error(r, err);
	uint32_t crc = crc32c(0, t, 24);
	if (crc != get32(t + 24))
		return err_set(err, "%s: offset %llu: token stream trailer checksum 0x%08x, "
			       "computed 0x%08x", r->name,
			       (unsigned long long)(r->offset - sizeof t), get32(t + 24), crc);
	uint64_t nd = get64(t + 4), nt = get64(t + 12);
	if (nd != r->seg_docs || nt != r->seg_tokens)
		return err_set(err, "%s: token stream trailer says %llu documents, %llu tokens; "
			       "the segment holds %llu, %llu", r->name, (unsigned long long)nd,
			       (unsigned long long)nt, (unsigned long long)r->seg_docs,
			       (unsigned long long)r->seg_tokens);
	if (get32(t + 20) != r->seg_crc)
		return err_set(err, "%s: token stream data checksum 0x%08x, computed 0x%08x "
			       "(corrupted documents)", r->name, get32(t + 20), r->seg_crc);
	return 0;
}

/* After a trailer: the next segment, or the end.  1 at the end. */
static int next_segment(tokstream_reader *r, titan_err *err)
{
	tokstream_header h;
	int rc = read_header(r, &h, 0, err);
	if (rc != 0)
		return rc;
	if ((h.flags & TOKSTREAM_FLAG_MASK) != (r->first.flags & TOKSTREAM_FLAG_MASK))
		return err_set(err, "%s: offset %llu: a segment %s label masks after one %s them",
			       r->name, (unsigned long long)r->offset,
			       h.flags & TOKSTREAM_FLAG_MASK ? "with" : "without",
			       h.flags & TOKSTREAM_FLAG_MASK ? "without" : "with");
	if (!r->accept_mismatch && !tokstream_header_same_vocab(&h, &r->first))
		return err_set(err, "%s: offset %llu: vocab mismatch between inputs (vocab_size %u "
			       "id_width %u, then vocab_size %u id_width %u or another tokenizer "
			       "fingerprint)", r->name, (unsigned long long)r->offset,
			       r->first.vocab_size, r->first.id_width, h.vocab_size, h.id_width);
	r->cur = h;
	r->seg_docs = r->seg_tokens = 0;
	r->seg_crc = 0;
	return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 1024;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* The mask bytes after n ids in r->raw, as a byte a token; pad bits must be 0. */
static int read_mask(tokstream_reader *r, size_t n, titan_err *err)
{
	const uint8_t *m = r->raw + n * r->cur.id_width;
	if (n % 8 && (m[n / 8] >> (n % 8)) != 0)
		return err_set(err, "%s: document %llu: label mask bits set past its %zu tokens",
			       r->name, (unsigned long long)r->docs, n);
	if (grow((void **)&r->mask, &r->mask_cap, n ? n : 1, 1) != 0)
		return err_set(err, "%s: out of memory", r->name);
	for (size_t i = 0; i < n; i++)
		r->mask[i] = (m[i / 8] >> (i % 8)) & 1;
	return 0;
}

/* Read n ids (and a masked stream's mask); the buffer grows with the data that arrives, so a bogus length
 * in a short input fails as truncated instead of allocating gigabytes. */
static int read_ids(tokstream_reader *r, size_t n, titan_err *err)
{
	size_t w = r->cur.id_width, got = 0;
	size_t mbytes = r->cur.flags & TOKSTREAM_FLAG_MASK ? (n + 7) / 8 : 0;
	size_t total = n * w + mbytes;
	while (got < total) {
		size_t want = total - got;
		if (want > (1u << 24))
			want = 1u << 24;
		if (grow((void **)&r->raw, &r->raw_cap, got + want, 1) != 0)
			return err_set(err, "%s: out of memory", r->name);
		size_t k = rd(r, r->raw + got, want);
		got += k;
		if (k < want)
			return read_error(r, err);
	}
	if (grow((void **)&r->ids, &r->ids_cap, n ? n : 1, sizeof *r->ids) != 0)
		return err_set(err, "%s: out of memory", r->name);
	const uint8_t *p = r->raw;
	uint32_t *ids = r->ids, bad = 0;
	if (w == 2)
		for (size_t i = 0; i < n; i++)
			ids[i] = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
	else
		for (size_t i = 0; i < n; i++)
			ids[i] = get32(p + 4 * i);
	for (size_t i = 0; i < n; i++)
		bad |= ids[i] >= r->cur.vocab_size;
	if (bad) {
		size_t i = 0;
		while (ids[i] < r->cur.vocab_size)
			i++;
		return err_set(err, "%s: document %llu: id %u at position %zu is not below "
			       "vocab_size %u", r->name, (unsigned long long)r->docs, ids[i], i,
			       r->cur.vocab_size);
	}
	return r->cur.flags & TOKSTREAM_FLAG_MASK ? read_mask(r, n, err) : 0;
}

int tokstream_read_doc(tokstream_reader *r, const uint32_t **ids, size_t *n, titan_err *err)
{
	for (;;) {
		if (r->done)
			return 0;
		uint8_t lb[4];
		if (rd(r, lb, 4) != 4)
			return read_error(r, err);
		uint32_t len = get32(lb);
		if (len == TOKSTREAM_END) {
			if (read_trailer(r, err) != 0)
				return -1;
			int rc = next_segment(r, err);
			if (rc < 0)
				return -1;
			if (rc == 1)
				r->done = 1;
			continue;
		}
		if (read_ids(r, len, err) != 0)
			return -1;
		size_t rec = (size_t)len * r->cur.id_width +
			     (r->cur.flags & TOKSTREAM_FLAG_MASK ? ((size_t)len + 7) / 8 : 0);
		r->seg_crc = crc32c(r->seg_crc, lb, 4);
		r->seg_crc = crc32c(r->seg_crc, r->raw, rec);
		r->all_crc = crc32c(r->all_crc, lb, 4);
		r->all_crc = crc32c(r->all_crc, r->raw, rec);
		r->seg_docs++;
		r->seg_tokens += len;
		r->docs++;
		r->tokens += len;
		*ids = r->ids;
		*n = len;
		return 1;
	}
}

const uint8_t *tokstream_read_mask(const tokstream_reader *r)
{
	return r->cur.flags & TOKSTREAM_FLAG_MASK ? r->mask : NULL;
}

const tokstream_header *tokstream_reader_header(const tokstream_reader *r)
{
	return &r->cur;
}

uint64_t tokstream_reader_docs(const tokstream_reader *r)
{
	return r->docs;
}

uint64_t tokstream_reader_tokens(const tokstream_reader *r)
{
	return r->tokens;
}

uint32_t tokstream_reader_crc(const tokstream_reader *r)
{
	return r->all_crc;
}

uint64_t tokstream_reader_offset(const tokstream_reader *r)
{
	return r->offset;
}

void tokstream_reader_close(tokstream_reader *r)
{
	if (r == NULL)
		return;
	free(r->raw);
	free(r->ids);
	free(r->mask);
	free(r->name);
	free(r);
}
