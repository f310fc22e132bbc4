/* fluxrec.c: the Flux record stream: header, records, trailer (see
 * fluxrec.h and titan-formats(5), FLUX RECORDS). */
#include "fluxrec/fluxrec.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/sha256.h"
#include "core/le.h"

#define REC_TAG "FREC"
#define END_TAG "FEND"
#define MAX_LEN (1u << 16) /* a sequence length, a width, a latent side */

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

size_t fluxrec_dtype_size(uint32_t dtype)
{
	return dtype == FLUXREC_BF16 ? 2 : 4;
}

/* Where the empty encodings lie in the header. */
typedef struct head_layout {
	uint64_t t5_ids, clip_ids, t5, clip, end;
} head_layout;

static void head_layout_of(const fluxrec_header *h, head_layout *l)
{
	uint64_t e = fluxrec_dtype_size(h->dtype);
	l->t5_ids = FLUXREC_FIXED_HEADER;
	l->clip_ids = l->t5_ids + 4ull * h->t5_len;
	l->t5 = align8(l->clip_ids + 4ull * h->clip_len);
	l->clip = l->t5 + e * h->t5_len * h->t5_dim;
	l->end = align8(l->clip + e * h->clip_dim) + 8; /* a reserved u32, the CRC */
}

void fluxrec_layout_of(const fluxrec_header *h, fluxrec_layout *l)
{
	memset(l, 0, sizeof *l);
	l->elem = fluxrec_dtype_size(h->dtype);
	l->key = FLUXREC_RECORD_FIXED;
	l->t5_ids = l->key + h->key_bytes;
	l->clip_ids = align8(l->t5_ids + 4ull * h->t5_len);
	l->t5 = align8(l->clip_ids + 4ull * h->clip_len);
	l->t5_bytes = l->elem * h->t5_len * h->t5_dim;
	l->clip = align8(l->t5 + l->t5_bytes);
	l->clip_bytes = l->elem * h->clip_dim;
	uint64_t at = align8(l->clip + l->clip_bytes);
	if (h->flags & FLUXREC_MOMENTS) {
		l->moments = at;
		l->moments_bytes = l->elem * h->latent_channels * h->latent_height * h->latent_width;
		at = align8(at + l->moments_bytes);
	}
	if (h->flags & FLUXREC_PIXELS) {
		l->pixels = at;
		l->pixels_bytes = 3ull * h->image_size * h->image_size;
		at = align8(at + l->pixels_bytes);
	}
	l->crc = at + 4; /* after a reserved u32, so records stay 8-aligned */
}

static int in_range(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v >= lo && v <= hi;
}

int fluxrec_header_layout(fluxrec_header *h, titan_err *err)
{
	if (h->dtype != FLUXREC_F32 && h->dtype != FLUXREC_BF16)
		return err_set(err, "dtype %u: not 0 (float32) or 1 (bfloat16)", h->dtype);
	if (h->model_dtype != FLUXREC_F32 && h->model_dtype != FLUXREC_BF16)
		return err_set(err, "model_dtype %u: not 0 (float32) or 1 (bfloat16)",
			       h->model_dtype);
	if (h->flags & ~(uint32_t)(FLUXREC_PIXELS | FLUXREC_MOMENTS | FLUXREC_CROP_RANDOM))
		return err_set(err, "flags 0x%x: unknown bits", h->flags);
	if (!(h->flags & (FLUXREC_PIXELS | FLUXREC_MOMENTS)))
		return err_set(err, "flags 0x%x: records carry neither pixels nor moments", h->flags);
	if (h->key_bytes != FLUXREC_KEY_BYTES)
		return err_set(err, "key_bytes %u, expected %u", h->key_bytes, FLUXREC_KEY_BYTES);
	if (!in_range(h->image_size, 1, MAX_LEN) || !in_range(h->t5_len, 1, MAX_LEN) ||
	    !in_range(h->t5_dim, 1, MAX_LEN) || !in_range(h->clip_len, 1, MAX_LEN) ||
	    !in_range(h->clip_dim, 1, MAX_LEN) || h->t5_vocab < 1 || h->clip_vocab < 1)
		return err_set(err, "shapes out of range (image %u, T5 %u x %u, CLIP %u, %u; each "
			       "1 to %u)", h->image_size, h->t5_len, h->t5_dim, h->clip_len,
			       h->clip_dim, MAX_LEN);
	int moments = (h->flags & FLUXREC_MOMENTS) != 0;
	if (moments && (!in_range(h->latent_channels, 1, MAX_LEN) ||
			!in_range(h->latent_height, 1, MAX_LEN) || !in_range(h->latent_width, 1, MAX_LEN)))
		return err_set(err, "latent shape %u x %u x %u out of range", h->latent_channels,
			       h->latent_height, h->latent_width);
	if (!moments && (h->latent_channels || h->latent_height || h->latent_width))
		return err_set(err, "a latent shape without moments");
	if (h->empty_t5_tokens > h->t5_len || h->empty_clip_tokens > h->clip_len)
		return err_set(err, "empty string's token counts %u, %u beyond the lengths",
			       h->empty_t5_tokens, h->empty_clip_tokens);
	head_layout hl;
	head_layout_of(h, &hl);
	fluxrec_layout l;
	fluxrec_layout_of(h, &l);
	if (hl.end > FLUXREC_MAX_HEADER || l.crc + 4 > FLUXREC_MAX_RECORD)
		return err_set(err, "header of %llu bytes or records of %llu bytes: too large",
			       (unsigned long long)hl.end, (unsigned long long)(l.crc + 4));
	h->header_len = hl.end;
	h->record_bytes = l.crc + 4;
	size_t e = fluxrec_dtype_size(h->dtype);
	if (h->empty_t5_ids == NULL)
		h->empty_t5_ids = calloc(h->t5_len, 4);
	if (h->empty_clip_ids == NULL)
		h->empty_clip_ids = calloc(h->clip_len, 4);
	if (h->empty_t5 == NULL)
		h->empty_t5 = calloc((size_t)h->t5_len * h->t5_dim, e);
	if (h->empty_clip == NULL)
		h->empty_clip = calloc(h->clip_dim, e);
	if (!h->empty_t5_ids || !h->empty_clip_ids || !h->empty_t5 || !h->empty_clip)
		return err_set(err, "out of memory for the empty string's encodings");
	return 0;
}

void fluxrec_header_free(fluxrec_header *h)
{
	free(h->empty_t5_ids);
	free(h->empty_clip_ids);
	free(h->empty_t5);
	free(h->empty_clip);
	h->empty_t5_ids = h->empty_clip_ids = NULL;
	h->empty_t5 = h->empty_clip = NULL;
}

static void put_f32(uint8_t *p, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	le_put32(p, u);
}

static float get_f32(const uint8_t *p)
{
	uint32_t u = le_get32(p);
	float v;
	memcpy(&v, &u, 4);
	return v;
}

void fluxrec_header_encode(const fluxrec_header *h, uint8_t *out)
{
	memset(out, 0, h->header_len);
	memcpy(out, FLUXREC_MAGIC, 4);
	const uint32_t u[] = {FLUXREC_VERSION, (uint32_t)h->header_len, h->flags, h->dtype,
			      h->model_dtype, h->image_size, h->key_bytes, h->t5_len, h->t5_dim,
			      h->t5_vocab, h->clip_len, h->clip_dim, h->clip_vocab,
			      h->latent_channels, h->latent_height, h->latent_width, 0};
	for (size_t i = 0; i < sizeof u / sizeof *u; i++)
		le_put32(out + 4 + 4 * i, u[i]);
	le_put64(out + 72, h->record_bytes);
	le_put64(out + 80, h->seed);
	put_f32(out + 88, h->ae_scale);
	put_f32(out + 92, h->ae_shift);
	memcpy(out + 96, h->t5_weights, 32);
	memcpy(out + 128, h->clip_weights, 32);
	memcpy(out + 160, h->ae_weights, 32);
	memcpy(out + 192, h->t5_tokenizer, 32);
	memcpy(out + 224, h->clip_tokenizer, 32);
	le_put32(out + 256, h->empty_t5_tokens);
	le_put32(out + 260, h->empty_clip_tokens);
	head_layout l;
	head_layout_of(h, &l);
	size_t e = fluxrec_dtype_size(h->dtype);
	memcpy(out + l.t5_ids, h->empty_t5_ids, 4ull * h->t5_len);
	memcpy(out + l.clip_ids, h->empty_clip_ids, 4ull * h->clip_len);
	memcpy(out + l.t5, h->empty_t5, e * h->t5_len * h->t5_dim);
	memcpy(out + l.clip, h->empty_clip, e * h->clip_dim);
	le_put32(out + h->header_len - 4, crc32c(0, out, h->header_len - 4));
}

static int ids_in_vocab(const int32_t *ids, uint32_t n, uint32_t vocab, const char *what,
			const char *name, titan_err *err)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
			return err_set(err, "%s: %s id %d at position %u outside the vocabulary of %u",
				       name, what, ids[i], i, vocab);
	return 0;
}

int fluxrec_header_decode(const uint8_t *in, size_t len, fluxrec_header *h, const char *name,
			  titan_err *err)
{
	memset(h, 0, sizeof *h);
	if (len < 12 || memcmp(in, FLUXREC_MAGIC, 4) != 0)
		return err_set(err, "%s: bad magic, expected \"TTFR\" (not a Flux record stream?)",
			       name);
	if (le_get32(in + 4) != FLUXREC_VERSION)
		return err_set(err, "%s: Flux record version %u, this program reads version %u",
			       name, le_get32(in + 4), FLUXREC_VERSION);
	if (len < FLUXREC_FIXED_HEADER + 8 || le_get32(in + 8) != len)
		return err_set(err, "%s: Flux record header of %zu bytes (its header_len says %u)",
			       name, len, le_get32(in + 8));
	uint32_t crc = crc32c(0, in, len - 4);
	if (crc != le_get32(in + len - 4))
		return err_set(err, "%s: Flux record header checksum 0x%08x, computed 0x%08x", name,
			       le_get32(in + len - 4), crc);
	uint32_t *u[] = {&h->flags, &h->dtype, &h->model_dtype, &h->image_size, &h->key_bytes,
			 &h->t5_len, &h->t5_dim, &h->t5_vocab, &h->clip_len, &h->clip_dim,
			 &h->clip_vocab, &h->latent_channels, &h->latent_height, &h->latent_width};
	for (size_t i = 0; i < sizeof u / sizeof *u; i++)
		*u[i] = le_get32(in + 12 + 4 * i);
	h->seed = le_get64(in + 80);
	h->ae_scale = get_f32(in + 88);
	h->ae_shift = get_f32(in + 92);
	memcpy(h->t5_weights, in + 96, 32);
	memcpy(h->clip_weights, in + 128, 32);
	memcpy(h->ae_weights, in + 160, 32);
	memcpy(h->t5_tokenizer, in + 192, 32);
	memcpy(h->clip_tokenizer, in + 224, 32);
	h->empty_t5_tokens = le_get32(in + 256);
	h->empty_clip_tokens = le_get32(in + 260);
	if (fluxrec_header_layout(h, err) != 0) {
		fluxrec_header_free(h);
		return err_prefix(err, "%s: Flux record header", name);
	}
	if (h->header_len != len || h->record_bytes != le_get64(in + 72)) {
		err_set(err, "%s: Flux record header says %u header and %llu record bytes; its "
			"shapes make %llu and %llu", name, le_get32(in + 8),
			(unsigned long long)le_get64(in + 72), (unsigned long long)h->header_len,
			(unsigned long long)h->record_bytes);
		fluxrec_header_free(h);
		return -1;
	}
	head_layout l;
	head_layout_of(h, &l);
	size_t e = fluxrec_dtype_size(h->dtype);
	memcpy(h->empty_t5_ids, in + l.t5_ids, 4ull * h->t5_len);
	memcpy(h->empty_clip_ids, in + l.clip_ids, 4ull * h->clip_len);
	memcpy(h->empty_t5, in + l.t5, e * h->t5_len * h->t5_dim);
	memcpy(h->empty_clip, in + l.clip, e * h->clip_dim);
	if (ids_in_vocab(h->empty_t5_ids, h->t5_len, h->t5_vocab, "empty T5", name, err) != 0 ||
	    ids_in_vocab(h->empty_clip_ids, h->clip_len, h->clip_vocab, "empty CLIP", name,
			 err) != 0) {
		fluxrec_header_free(h);
		return -1;
	}
	/* One byte string per header: the reserved fields and the padding are 0,
	 * so shards written from a decoded header repeat the stream's bytes. */
	uint8_t *again = malloc(len);
	int same = again != NULL;
	if (same) {
		fluxrec_header_encode(h, again);
		same = memcmp(again, in, len) == 0;
	}
	free(again);
	if (!same) {
		fluxrec_header_free(h);
		return err_set(err, "%s: Flux record header has reserved bytes set (or no memory to "
			       "check them)", name);
	}
	return 0;
}

/* ---- records */

int fluxrec_record_init(const fluxrec_header *h, uint8_t *rec, uint64_t index, const char *key,
			titan_err *err)
{
	size_t kn = strlen(key);
	if (kn >= h->key_bytes)
		return err_set(err, "key of %zu bytes: records hold keys of up to %u", kn,
			       h->key_bytes - 1);
	memset(rec, 0, h->record_bytes);
	memcpy(rec, REC_TAG, 4);
	le_put64(rec + 8, index);
	memcpy(rec + FLUXREC_RECORD_FIXED, key, kn);
	return 0;
}

void fluxrec_record_set_image(uint8_t *rec, uint32_t width, uint32_t height,
			      uint32_t crop_offset)
{
	le_put32(rec + 16, width);
	le_put32(rec + 20, height);
	le_put32(rec + 24, crop_offset);
}

void fluxrec_record_set_tokens(uint8_t *rec, uint32_t t5_tokens, uint32_t clip_tokens)
{
	le_put32(rec + 28, t5_tokens);
	le_put32(rec + 32, clip_tokens);
}

void fluxrec_record_seal(const fluxrec_header *h, uint8_t *rec)
{
	le_put32(rec + h->record_bytes - 4, crc32c(0, rec, h->record_bytes - 4));
}

int fluxrec_record_view(const fluxrec_header *h, const uint8_t *rec, fluxrec_view *v,
			const char *name, titan_err *err)
{
	if (memcmp(rec, REC_TAG, 4) != 0)
		return err_set(err, "%s: not a record (tag 0x%08x, expected \"FREC\")", name,
			       le_get32(rec));
	uint32_t crc = crc32c(0, rec, h->record_bytes - 4);
	if (crc != le_get32(rec + h->record_bytes - 4))
		return err_set(err, "%s: record checksum 0x%08x, computed 0x%08x", name,
			       le_get32(rec + h->record_bytes - 4), crc);
	fluxrec_layout l;
	fluxrec_layout_of(h, &l);
	const char *key = (const char *)rec + l.key;
	if (memchr(key, 0, h->key_bytes) == NULL)
		return err_set(err, "%s: key not terminated", name);
	memset(v, 0, sizeof *v);
	v->index = le_get64(rec + 8);
	v->width = le_get32(rec + 16);
	v->height = le_get32(rec + 20);
	v->crop_offset = le_get32(rec + 24);
	v->t5_tokens = le_get32(rec + 28);
	v->clip_tokens = le_get32(rec + 32);
	v->key = key;
	if (v->t5_tokens > h->t5_len || v->clip_tokens > h->clip_len)
		return err_set(err, "%s (key %s): token counts %u, %u beyond the lengths %u, %u",
			       name, key, v->t5_tokens, v->clip_tokens, h->t5_len, h->clip_len);
	/* records are 8-aligned in a stream and in a mapped shard */
	v->t5_ids = (const int32_t *)(const void *)(rec + l.t5_ids);
	v->clip_ids = (const int32_t *)(const void *)(rec + l.clip_ids);
	v->t5 = rec + l.t5;
	v->clip = rec + l.clip;
	v->moments = l.moments ? rec + l.moments : NULL;
	v->pixels = l.pixels ? rec + l.pixels : NULL;
	if (ids_in_vocab(v->t5_ids, h->t5_len, h->t5_vocab, "T5", name, err) != 0 ||
	    ids_in_vocab(v->clip_ids, h->clip_len, h->clip_vocab, "CLIP", name, err) != 0)
		return err_prefix(err, "key %s", key);
	return 0;
}

/* ---- writer */

struct fluxrec_writer {
	FILE *fp;
	const fluxrec_header *h;
	uint64_t n;
	uint32_t crc;
};

fluxrec_writer *fluxrec_writer_open(FILE *fp, const fluxrec_header *h, titan_err *err)
{
	fluxrec_writer *w = calloc(1, sizeof *w);
	uint8_t *head = malloc(h->header_len);
	if (w == NULL || head == NULL) {
		free(w);
		free(head);
		err_set(err, "out of memory");
		return NULL;
	}
	fluxrec_header_encode(h, head);
	size_t put = fwrite(head, 1, h->header_len, fp);
	free(head);
	if (put != h->header_len) {
		free(w);
		err_errno(err, "writing the Flux record header");
		return NULL;
	}
	w->fp = fp;
	w->h = h;
	return w;
}

int fluxrec_write(fluxrec_writer *w, const uint8_t *rec, titan_err *err)
{
	if (fwrite(rec, 1, w->h->record_bytes, w->fp) != w->h->record_bytes)
		return err_errno(err, "writing record %llu", (unsigned long long)w->n);
	w->crc = crc32c(w->crc, rec, w->h->record_bytes);
	w->n++;
	return 0;
}

uint64_t fluxrec_writer_records(const fluxrec_writer *w)
{
	return w->n;
}

uint32_t fluxrec_writer_crc(const fluxrec_writer *w)
{
	return w->crc;
}

static void trailer_encode(uint8_t t[FLUXREC_TRAILER_LEN], uint64_t n, uint32_t crc)
{
	memset(t, 0, FLUXREC_TRAILER_LEN);
	memcpy(t, END_TAG, 4);
	le_put64(t + 8, n);
	le_put32(t + 16, crc);
	le_put32(t + 20, crc32c(0, t, 20));
}

int fluxrec_writer_close(fluxrec_writer *w, titan_err *err)
{
	uint8_t t[FLUXREC_TRAILER_LEN];
	trailer_encode(t, w->n, w->crc);
	int rc = 0;
	if (fwrite(t, 1, sizeof t, w->fp) != sizeof t || fflush(w->fp) != 0)
		rc = err_errno(err, "writing the Flux record trailer");
	free(w);
	return rc;
}

void fluxrec_writer_abort(fluxrec_writer *w)
{
	free(w);
}

/* ---- reader */

struct fluxrec_reader {
	FILE *fp;
	char *name;
	fluxrec_header h;
	uint8_t *head;      /* the first header as stored */
	uint8_t *rec;       /* record_bytes */
	uint64_t off, n, seg_n;
	uint32_t crc, seg_crc;
	int done;
};

/* Exactly n bytes: 1, 0 at end of input before any byte, -1 when cut short. */
static int read_n(fluxrec_reader *r, void *buf, size_t n)
{
	size_t got = fread(buf, 1, n, r->fp);
	r->off += got;
	return got == n ? 1 : got == 0 ? 0 : -1;
}

static int truncated(fluxrec_reader *r, titan_err *err)
{
	if (ferror(r->fp))
		return err_errno(err, "%s: read error at offset %llu", r->name,
				 (unsigned long long)r->off);
	return err_set(err, "%s: truncated Flux record stream (no trailer after %llu records)",
		       r->name, (unsigned long long)r->n);
}

/* A header from its first 4 bytes (already read into head). */
static int read_header(fluxrec_reader *r, uint8_t **out, titan_err *err)
{
	uint8_t fixed[12];
	memcpy(fixed, *out, 4);
	if (read_n(r, fixed + 4, 8) != 1)
		return truncated(r, err);
	uint32_t len = le_get32(fixed + 8);
	if (memcmp(fixed, FLUXREC_MAGIC, 4) != 0)
		return err_set(err, "%s: bad magic at offset %llu, expected \"TTFR\" (not a Flux "
			       "record stream?)", r->name, (unsigned long long)(r->off - 12));
	if (len < FLUXREC_FIXED_HEADER + 8 || len > FLUXREC_MAX_HEADER)
		return err_set(err, "%s: Flux record header_len %u out of range", r->name, len);
	uint8_t *head = malloc(len);
	if (head == NULL)
		return err_set(err, "%s: out of memory for a header of %u bytes", r->name, len);
	memcpy(head, fixed, 12);
	if (read_n(r, head + 12, len - 12) != 1) {
		free(head);
		return truncated(r, err);
	}
	*out = head;
	return (int)len;
}

fluxrec_reader *fluxrec_reader_open(FILE *fp, const char *name, titan_err *err)
{
	fluxrec_reader *r = calloc(1, sizeof *r);
	if (r == NULL || (r->name = strdup(name)) == NULL) {
		free(r);
		err_set(err, "out of memory");
		return NULL;
	}
	r->fp = fp;
	uint8_t magic[4];
	uint8_t *mp = magic;
	int got = read_n(r, magic, 4);
	int len = got == 1 ? read_header(r, &mp, err)
		  : got == 0 ? err_set(err, "%s: empty input, expected a Flux record stream", name)
			     : truncated(r, err);
	if (len < 0 || fluxrec_header_decode(mp, (size_t)len, &r->h, name, err) != 0) {
		if (mp != magic)
			free(mp);
		fluxrec_reader_close(r);
		return NULL;
	}
	r->head = mp;
	if ((r->rec = malloc(r->h.record_bytes)) == NULL) {
		err_set(err, "%s: out of memory for records of %llu bytes", name,
			(unsigned long long)r->h.record_bytes);
		fluxrec_reader_close(r);
		return NULL;
	}
	return r;
}

const fluxrec_header *fluxrec_reader_header(const fluxrec_reader *r)
{
	return &r->h;
}

const uint8_t *fluxrec_reader_header_bytes(const fluxrec_reader *r)
{
	return r->head;
}

/* The trailer after its tag: counts and CRCs against what was read. */
static int end_segment(fluxrec_reader *r, titan_err *err)
{
	uint8_t t[FLUXREC_TRAILER_LEN];
	memcpy(t, END_TAG, 4);
	if (read_n(r, t + 4, FLUXREC_TRAILER_LEN - 4) != 1)
		return truncated(r, err);
	if (crc32c(0, t, 20) != le_get32(t + 20))
		return err_set(err, "%s: Flux record trailer checksum differs", r->name);
	if (le_get64(t + 8) != r->seg_n || le_get32(t + 16) != r->seg_crc)
		return err_set(err, "%s: the trailer says %llu records, CRC-32C 0x%08x; read %llu, "
			       "0x%08x", r->name, (unsigned long long)le_get64(t + 8),
			       le_get32(t + 16), (unsigned long long)r->seg_n, r->seg_crc);
	r->seg_n = 0;
	r->seg_crc = 0;
	uint8_t magic[4];
	uint8_t *mp = magic;
	int got = read_n(r, magic, 4);
	if (got == 0) {
		r->done = 1;
		return 0;
	}
	if (got < 0)
		return truncated(r, err);
	int len = read_header(r, &mp, err);
	if (len < 0)
		return -1;
	int same = (uint64_t)len == r->h.header_len && memcmp(mp, r->head, (size_t)len) == 0;
	free(mp);
	if (!same)
		return err_set(err, "%s: a later segment's header differs from the first (other "
			       "encoders, shapes or options)", r->name);
	return 0;
}

int fluxrec_read(fluxrec_reader *r, const uint8_t **rec, titan_err *err)
{
	while (!r->done) {
		uint64_t at = r->off;
		int got = read_n(r, r->rec, 4);
		if (got != 1)
			return truncated(r, err);
		if (memcmp(r->rec, END_TAG, 4) == 0) {
			if (end_segment(r, err) != 0)
				return -1;
			continue;
		}
		if (memcmp(r->rec, REC_TAG, 4) != 0)
			return err_set(err, "%s: offset %llu: neither a record nor a trailer", r->name,
				       (unsigned long long)at);
		if (read_n(r, r->rec + 4, r->h.record_bytes - 4) != 1)
			return truncated(r, err);
		char what[128];
		snprintf(what, sizeof what, "%s: record %llu", r->name, (unsigned long long)r->n);
		fluxrec_view v;
		if (fluxrec_record_view(&r->h, r->rec, &v, what, err) != 0)
			return -1;
		r->crc = crc32c(r->crc, r->rec, r->h.record_bytes);
		r->seg_crc = crc32c(r->seg_crc, r->rec, r->h.record_bytes);
		r->n++;
		r->seg_n++;
		*rec = r->rec;
		return 1;
	}
	return 0;
}

uint64_t fluxrec_reader_records(const fluxrec_reader *r)
{
	return r->n;
}

uint32_t fluxrec_reader_crc(const fluxrec_reader *r)
{
	return r->crc;
}

uint64_t fluxrec_reader_offset(const fluxrec_reader *r)
{
	return r->off;
}

void fluxrec_reader_close(fluxrec_reader *r)
{
	if (r == NULL)
		return;
	fluxrec_header_free(&r->h);
	free(r->head);
	free(r->rec);
	free(r->name);
	free(r);
}

/* ---- identities */

static int hash_file(const char *path, uint8_t out[32], titan_err *err)
{
	char hex[65];
	if (sha256_file_hex(path, hex, err) != 0)
		return -1;
	return sha256_unhex(hex, out) == 0 ? 0 : err_set(err, "%s: bad digest", path);
}

static int weight_file(const char *name)
{
	size_t n = strlen(name);
	return strcmp(name, "config.json") == 0 ||
	       (n > 12 && strcmp(name + n - 12, ".safetensors") == 0);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int fluxrec_weights_sha256(const char *path, uint8_t out[32], titan_err *err)
{
	DIR *d = opendir(path);
	char **names = NULL;
	size_t n = 0;
	int rc = 0;
	if (d == NULL) { /* one file: its name without the folder */
		if (errno != ENOTDIR)
			return err_errno(err, "%s", path);
		const char *base = strrchr(path, '/');
		names = malloc(sizeof *names);
		if (names == NULL || (names[0] = strdup(base ? base + 1 : path)) == NULL) {
			free(names);
			return err_set(err, "out of memory");
		}
		n = 1;
	} else {
		struct dirent *e;
		while (rc == 0 && (e = readdir(d)) != NULL) {
			if (!weight_file(e->d_name))
				continue;
			char **t = realloc(names, (n + 1) * sizeof *names);
			if (t == NULL || (t[n] = strdup(e->d_name)) == NULL)
				rc = err_set(err, "out of memory");
			names = t ? t : names;
			n += rc == 0;
		}
		closedir(d);
		qsort(names, n, sizeof *names, name_cmp);
		if (rc == 0 && n == 0)
			rc = err_set(err, "%s: no config.json or *.safetensors in the folder", path);
	}
	sha256_ctx c = {0};
	int inited = rc == 0 && sha256_init(&c, err) == 0;
	if (!inited)
		rc = -1;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *p = d ? NULL : strdup(path);
		if (d && asprintf(&p, "%s/%s", path, names[i]) < 0)
			p = NULL;
		uint8_t fd[32];
		if (p == NULL)
			rc = err_set(err, "out of memory");
		else if (hash_file(p, fd, err) != 0)
			rc = -1;
		free(p);
		if (rc == 0) {
			sha256_update(&c, names[i], strlen(names[i]) + 1);
			sha256_update(&c, fd, 32);
		}
	}
	if (rc == 0)
		sha256_final(&c, out);
	else if (inited)
		sha256_free(&c);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}
