/* One shard file: writing (atomically, optionally zstd seekable) and reading. */
#include "shard/shard.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "core/afile.h"
#include "core/crc32c.h"
#include "core/mfile.h"
#include "core/le.h"

/* zstd contrib/seekable_format: the seek table is a skippable frame at the end
 * of the stream, entries {compressed u32, decompressed u32[, checksum u32]},
 * then a 9-byte footer {frames u32, descriptor u8, magic u32}. */
#define SEEK_SKIPPABLE_MAGIC 0x184D2A5Eu
#define SEEK_MAGIC 0x8F92EAB1u
#define SEEK_FOOTER 9u
#define SEEK_CHECKSUM_FLAG 0x80u

/* Version 1's 128 bytes end with the header CRC; version 2 leaves those 4
 * bytes 0 and goes on with the mask's offset, size and CRC, its header CRC in
 * its own last 4 bytes. */
static void header_encode(const shard_header *h, uint8_t out[SHARD_HEADER_LEN_MASK])
{
	int v2 = (h->flags & SHARD_MASK) != 0;
	uint32_t len = v2 ? SHARD_HEADER_LEN_MASK : SHARD_HEADER_LEN;
	memset(out, 0, SHARD_HEADER_LEN_MASK);
	memcpy(out, SHARD_MAGIC, 4);
	le_put32(out + 4, v2 ? SHARD_VERSION_MASK : SHARD_VERSION);
	le_put32(out + 8, len);
	le_put32(out + 12, h->id_width);
	le_put32(out + 16, h->vocab_size);
	le_put32(out + 20, h->flags);
	le_put64(out + 24, h->n_tokens);
	le_put64(out + 32, h->n_docs);
	le_put64(out + 40, h->data_offset);
	le_put64(out + 48, h->data_bytes);
	le_put64(out + 56, h->index_offset);
	le_put64(out + 64, h->index_bytes);
	le_put32(out + 72, h->frame_tokens);
	le_put32(out + 76, h->data_crc);
	le_put32(out + 80, h->index_crc);
	le_put32(out + 84, (uint32_t)h->bos_id);
	le_put32(out + 88, (uint32_t)h->eos_id);
	memcpy(out + 92, h->fingerprint, 32);
	if (v2) {
		le_put64(out + 128, h->mask_offset);
		le_put64(out + 136, h->mask_bytes);
		le_put32(out + 144, h->mask_crc);
	}
	le_put32(out + len - 4, crc32c(0, out, len - 4));
}

static int header_decode(const uint8_t *in, size_t size, shard_header *h, const char *path,
			 titan_err *err)
{
	if (size < 4 || memcmp(in, SHARD_MAGIC, 4) != 0)
		return err_set(err, "%s: bad magic 0x%08x, expected \"TTSH\" (not a titan shard?)",
			       path, size >= 4 ? le_get32(in) : 0);
	if (size < SHARD_HEADER_LEN)
		return err_set(err, "%s: %zu bytes, shorter than a shard header", path, size);
	uint32_t v = le_get32(in + 4), len = le_get32(in + 8);
	if (v != SHARD_VERSION && v != SHARD_VERSION_MASK)
		return err_set(err, "%s: shard version %u, this program reads versions %u and %u",
			       path, v, SHARD_VERSION, SHARD_VERSION_MASK);
	uint32_t want = v == SHARD_VERSION ? SHARD_HEADER_LEN : SHARD_HEADER_LEN_MASK;
	if (len != want)
		return err_set(err, "%s: shard header_len %u, expected %u", path, len, want);
	if (size < len)
		return err_set(err, "%s: %zu bytes, shorter than a shard header", path, size);
	uint32_t crc = crc32c(0, in, len - 4);
	if (crc != le_get32(in + len - 4))
		return err_set(err, "%s: shard header checksum 0x%08x, computed 0x%08x", path,
			       le_get32(in + len - 4), crc);
	h->version = v;
	h->header_len = len;
	h->mask_offset = v == SHARD_VERSION_MASK ? le_get64(in + 128) : 0;
	h->mask_bytes = v == SHARD_VERSION_MASK ? le_get64(in + 136) : 0;
	h->mask_crc = v == SHARD_VERSION_MASK ? le_get32(in + 144) : 0;
	h->id_width = le_get32(in + 12);
	h->vocab_size = le_get32(in + 16);
	h->flags = le_get32(in + 20);
	h->n_tokens = le_get64(in + 24);
	h->n_docs = le_get64(in + 32);
	h->data_offset = le_get64(in + 40);
	h->data_bytes = le_get64(in + 48);
	h->index_offset = le_get64(in + 56);
	h->index_bytes = le_get64(in + 64);
	h->frame_tokens = le_get32(in + 72);
	h->data_crc = le_get32(in + 76);
	h->index_crc = le_get32(in + 80);
	h->bos_id = (int32_t)le_get32(in + 84);
	h->eos_id = (int32_t)le_get32(in + 88);
	memcpy(h->fingerprint, in + 92, 32);
	h->header_crc = crc;
	return 0;
}

/* Sizes and offsets must describe exactly this file. */
static int header_check(const shard_header *h, uint64_t size, const char *path, titan_err *err)
{
	if (h->vocab_size == 0 || h->id_width != tokstream_id_width(h->vocab_size))
		return err_set(err, "%s: id_width %u does not fit vocab_size %u", path, h->id_width,
			       h->vocab_size);
	if (h->bos_id < -1 || h->eos_id < -1 || (h->bos_id >= 0 && (uint32_t)h->bos_id >= h->vocab_size) ||
	    (h->eos_id >= 0 && (uint32_t)h->eos_id >= h->vocab_size))
		return err_set(err, "%s: bos_id %d / eos_id %d outside the vocabulary of %u", path,
			       h->bos_id, h->eos_id, h->vocab_size);
	int z = (h->flags & SHARD_ZSTD) != 0, m = (h->flags & SHARD_MASK) != 0;
	if (m != (h->version == SHARD_VERSION_MASK))
		return err_set(err, "%s: shard version %u with%s the label-mask flag", path,
			       h->version, m ? "" : "out");
	uint64_t end = m ? h->mask_offset : size;
	if (m && (h->mask_bytes != (h->n_tokens + 7) / 8 || h->mask_offset > size ||
		  h->mask_offset + h->mask_bytes != size))
		return err_set(err, "%s: label mask of %llu bytes at %llu does not fit %llu tokens "
			       "in a file of %llu bytes", path, (unsigned long long)h->mask_bytes,
			       (unsigned long long)h->mask_offset, (unsigned long long)h->n_tokens,
			       (unsigned long long)size);
	if (h->n_tokens > (1ull << 48))
		return err_set(err, "%s: %llu tokens, more than a shard can hold", path,
			       (unsigned long long)h->n_tokens);
	if (h->data_offset != h->header_len || h->data_bytes > size ||
	    h->index_offset < h->data_offset + h->data_bytes ||
	    h->index_offset > h->data_offset + h->data_bytes + 7 || h->index_offset % 8 != 0 ||
	    h->n_docs > size / 8 || h->index_bytes != 8 * h->n_docs ||
	    h->index_offset + h->index_bytes != end)
		return err_set(err, "%s: header offsets and sizes do not match a file of %llu bytes "
			       "(truncated or not a complete shard)", path, (unsigned long long)size);
	if (!z && h->data_bytes != h->n_tokens * h->id_width)
		return err_set(err, "%s: %llu data bytes for %llu tokens of %u bytes", path,
			       (unsigned long long)h->data_bytes, (unsigned long long)h->n_tokens,
			       h->id_width);
	if (z && (h->frame_tokens == 0 || h->frame_tokens > (1u << 28)))
		return err_set(err, "%s: frame_tokens %u out of range", path, h->frame_tokens);
	if (!z && h->frame_tokens != 0)
		return err_set(err, "%s: frame_tokens %u in an uncompressed shard", path,
			       h->frame_tokens);
	return 0;
}

/* ---- writer */

struct shard_writer {
	afile af;
	shard_header h;
	int level;
	ZSTD_CCtx *cctx;
	uint8_t *frame;         /* encoded ids waiting for the next frame (zstd) or write */
	size_t frame_len, frame_cap;
	uint8_t *zbuf;
	size_t zcap;
	uint32_t *seek;         /* (compressed, decompressed) pairs */
	size_t n_frames, seek_cap;
	uint64_t *starts;
	size_t starts_cap;
	uint8_t *mask;          /* masked shards: the label mask, a bit a token */
	size_t mask_cap;        /* bytes */
};

shard_writer *shard_writer_open(const char *path, const shard_write_opts *o, titan_err *err)
{
	shard_writer *w = calloc(1, sizeof *w);
	if (w == NULL) {
		err_set(err, "%s: out of memory", path);
		return NULL;
	}
	const tokstream_header *s = o->stream;
	w->h.id_width = s->id_width;
	w->h.vocab_size = s->vocab_size;
	w->h.bos_id = s->bos_id;
	w->h.eos_id = s->eos_id;
	w->h.flags = (s->flags & TOKSTREAM_FLAG_BOS ? SHARD_DOC_BOS : 0) |
		     (s->flags & TOKSTREAM_FLAG_EOS ? SHARD_DOC_EOS : 0) |
		     (s->flags & TOKSTREAM_FLAG_MASK ? SHARD_MASK : 0);
	memcpy(w->h.fingerprint, s->fingerprint, 32);
	w->h.version = s->flags & TOKSTREAM_FLAG_MASK ? SHARD_VERSION_MASK : SHARD_VERSION;
	w->h.header_len = s->flags & TOKSTREAM_FLAG_MASK ? SHARD_HEADER_LEN_MASK : SHARD_HEADER_LEN;
	w->h.data_offset = w->h.header_len;
	w->level = o->zstd_level;
	if (w->level > 0) {
		w->h.flags |= SHARD_ZSTD;
		w->h.frame_tokens = o->frame_tokens ? o->frame_tokens : SHARD_DEFAULT_FRAME_TOKENS;
		w->cctx = ZSTD_createCCtx();
	}
	w->frame_cap = w->level > 0 ? (size_t)w->h.frame_tokens * w->h.id_width : 1u << 20;
	w->frame = malloc(w->frame_cap);
	if (w->frame == NULL || (w->level > 0 && w->cctx == NULL)) {
		err_set(err, "%s: out of memory", path);
		shard_writer_abort(w);
		return NULL;
	}
	if (afile_open(&w->af, path, err) != 0) {
		w->af.fp = NULL;
		w->af.tmp = NULL;
		shard_writer_abort(w);
		return NULL;
	}
	uint8_t zero[SHARD_HEADER_LEN_MASK] = {0}; /* the real header is written at commit */
	if (afile_write(&w->af, zero, w->h.header_len, err) != 0) {
		shard_writer_abort(w);
		return NULL;
	}
	return w;
}

static int put_data(shard_writer *w, const void *p, size_t n, titan_err *err)
{
	w->h.data_crc = crc32c(w->h.data_crc, p, n);
	w->h.data_bytes += n;
	return afile_write(&w->af, p, n, err);
}

static int flush_frame(shard_writer *w, titan_err *err)
{
	if (w->frame_len == 0)
		return 0;
	if (w->level == 0) {
		int rc = put_data(w, w->frame, w->frame_len, err);
		w->frame_len = 0;
		return rc;
	}
	size_t bound = ZSTD_compressBound(w->frame_len);
	if (bound > w->zcap) {
		uint8_t *z = realloc(w->zbuf, bound);
		if (z == NULL)
			return err_set(err, "%s: out of memory", w->af.path);
		w->zbuf = z;
		w->zcap = bound;
	}
	size_t c = ZSTD_compressCCtx(w->cctx, w->zbuf, w->zcap, w->frame, w->frame_len, w->level);
	if (ZSTD_isError(c))
		return err_set(err, "%s: zstd: %s", w->af.path, ZSTD_getErrorName(c));
	if (w->n_frames + 1 > w->seek_cap / 2) {
		size_t cap = w->seek_cap ? 2 * w->seek_cap : 64;
		uint32_t *s = realloc(w->seek, cap * sizeof *s);
		if (s == NULL)
			return err_set(err, "%s: out of memory", w->af.path);
		w->seek = s;
		w->seek_cap = cap;
	}
	w->seek[2 * w->n_frames] = (uint32_t)c;
	w->seek[2 * w->n_frames + 1] = (uint32_t)w->frame_len;
	w->n_frames++;
	w->frame_len = 0;
	return put_data(w, w->zbuf, c, err);
}

static int add_start(shard_writer *w, titan_err *err)
{
	if (w->h.n_docs == w->starts_cap) {
		size_t cap = w->starts_cap ? 2 * w->starts_cap : 1024;
		uint64_t *s = realloc(w->starts, cap * sizeof *s);
		if (s == NULL)
			return err_set(err, "%s: out of memory", w->af.path);
		w->starts = s;
		w->starts_cap = cap;
	}
	w->starts[w->h.n_docs++] = w->h.n_tokens;
	return 0;
}

/* Append n mask bits (tokens n_tokens ...) to the writer's mask. */
static int add_mask(shard_writer *w, const uint8_t *mask, size_t n, titan_err *err)
{
	uint64_t t0 = w->h.n_tokens, need = (t0 + n + 7) / 8;
	if (need > w->mask_cap) {
		size_t cap = w->mask_cap ? w->mask_cap : 4096;
		while (cap < need)
			cap *= 2;
		uint8_t *m = realloc(w->mask, cap);
		if (m == NULL)
			return err_set(err, "%s: out of memory", w->af.path);
		memset(m + w->mask_cap, 0, cap - w->mask_cap);
		w->mask = m;
		w->mask_cap = cap;
	}
	for (size_t i = 0; i < n; i++)
		w->mask[(t0 + i) / 8] |= (uint8_t)((mask[i] != 0) << ((t0 + i) % 8));
	return 0;
}

int shard_writer_add_doc(shard_writer *w, const uint32_t *ids, size_t n, titan_err *err)
{
	return shard_writer_add_doc_masked(w, ids, NULL, n, err);
}

int shard_writer_add_doc_masked(shard_writer *w, const uint32_t *ids, const uint8_t *mask,
				size_t n, titan_err *err)
{
	int masked = (w->h.flags & SHARD_MASK) != 0;
	if (masked != (mask != NULL))
		return err_set(err, "%s: document %llu %s a label mask, the shard %s", w->af.path,
			       (unsigned long long)w->h.n_docs, mask ? "has" : "lacks",
			       masked ? "is masked" : "is not");
	if (add_start(w, err) != 0 || (masked && add_mask(w, mask, n, err) != 0))
		return -1;
	const uint32_t width = w->h.id_width;
	for (size_t i = 0; i < n;) {
		size_t room = (w->frame_cap - w->frame_len) / width;
		size_t k = n - i < room ? n - i : room;
		uint8_t *p = w->frame + w->frame_len;
		for (size_t j = 0; j < k; j++) {
			uint32_t id = ids[i + j];
			if (id >= w->h.vocab_size)
				return err_set(err, "%s: id %u is not below vocab_size %u", w->af.path,
					       id, w->h.vocab_size);
			if (width == 2) {
				p[2 * j] = (uint8_t)id;
				p[2 * j + 1] = (uint8_t)(id >> 8);
			} else {
				le_put32(p + 4 * j, id);
			}
		}
		w->frame_len += k * width;
		i += k;
		if (w->frame_len == w->frame_cap && flush_frame(w, err) != 0)
			return -1;
	}
	w->h.n_tokens += n;
	return 0;
}

uint64_t shard_writer_tokens(const shard_writer *w)
{
	return w->h.n_tokens;
}

uint64_t shard_writer_docs(const shard_writer *w)
{
	return w->h.n_docs;
}

static int write_seek_table(shard_writer *w, titan_err *err)
{
	size_t n = w->n_frames, len = 8 + 8 * n + SEEK_FOOTER;
	uint8_t *t = malloc(len);
	if (t == NULL)
		return err_set(err, "%s: out of memory", w->af.path);
	le_put32(t, SEEK_SKIPPABLE_MAGIC);
	le_put32(t + 4, (uint32_t)(len - 8));
	for (size_t i = 0; i < n; i++) {
		le_put32(t + 8 + 8 * i, w->seek[2 * i]);
		le_put32(t + 12 + 8 * i, w->seek[2 * i + 1]);
	}
	uint8_t *f = t + 8 + 8 * n;
	le_put32(f, (uint32_t)n);
	f[4] = 0; /* no per-frame checksums: the shard's data_crc covers the bytes */
	le_put32(f + 5, SEEK_MAGIC);
	int rc = put_data(w, t, len, err);
	free(t);
	return rc;
}

static int write_index(shard_writer *w, titan_err *err)
{
	static const uint8_t pad[8];
	uint64_t end = w->h.data_offset + w->h.data_bytes;
	w->h.index_offset = (end + 7) / 8 * 8;
	if (afile_write(&w->af, pad, (size_t)(w->h.index_offset - end), err) != 0)
		return -1;
	w->h.index_bytes = 8 * w->h.n_docs;
	uint8_t buf[8 * 512];
	for (uint64_t d = 0; d < w->h.n_docs;) {
		size_t k = 0;
		for (; k < 512 && d < w->h.n_docs; k++, d++)
			le_put64(buf + 8 * k, w->starts[d]);
		w->h.index_crc = crc32c(w->h.index_crc, buf, 8 * k);
		if (afile_write(&w->af, buf, 8 * k, err) != 0)
			return -1;
	}
	if (!(w->h.flags & SHARD_MASK))
		return 0;
	w->h.mask_offset = w->h.index_offset + w->h.index_bytes;
	w->h.mask_bytes = (w->h.n_tokens + 7) / 8;
	w->h.mask_crc = crc32c(0, w->mask, (size_t)w->h.mask_bytes);
	return afile_write(&w->af, w->mask, (size_t)w->h.mask_bytes, err);
}

int shard_writer_commit(shard_writer *w, shard_header *out, titan_err *err)
{
	if (flush_frame(w, err) != 0 || (w->level > 0 && write_seek_table(w, err) != 0) ||
	    write_index(w, err) != 0) {
		shard_writer_abort(w);
		return -1;
	}
	uint8_t hdr[SHARD_HEADER_LEN_MASK];
	header_encode(&w->h, hdr);
	w->h.header_crc = le_get32(hdr + w->h.header_len - 4);
	if (fseek(w->af.fp, 0, SEEK_SET) != 0 ||
	    fwrite(hdr, 1, w->h.header_len, w->af.fp) != w->h.header_len) {
		err_errno(err, "%s: write header", w->af.path);
		shard_writer_abort(w);
		return -1;
	}
	if (out != NULL)
		*out = w->h;
	int rc = afile_commit(&w->af, err);
	w->af.fp = NULL;
	w->af.tmp = NULL;
	shard_writer_abort(w);
	return rc;
}

void shard_writer_abort(shard_writer *w)
{
	if (w == NULL)
		return;
	if (w->af.fp != NULL || w->af.tmp != NULL)
		afile_abort(&w->af);
	ZSTD_freeCCtx(w->cctx);
	free(w->frame);
	free(w->zbuf);
	free(w->seek);
	free(w->starts);
	free(w->mask);
	free(w);
}

/* ---- reader */

struct shard_file {
	mfile m;
	char *path;
	shard_header h;
	uint64_t *frame_off;   /* n_frames + 1 offsets of the frames in the data (zstd) */
	size_t n_frames;
	uint64_t serial;       /* names this open file in a decoder's cache */
	shard_dec *own;        /* shard_file_tokens' decoder, made on first use */
};

/* Parse the seek table at the end of the data and check it against the header. */
static int read_seek_table(shard_file *f, titan_err *err)
{
	const shard_header *h = &f->h;
	const uint8_t *d = f->m.data + h->data_offset;
	uint64_t len = h->data_bytes;
	if (len < 8 + SEEK_FOOTER || le_get32(d + len - 4) != SEEK_MAGIC)
		return err_set(err, "%s: no zstd seek table at the end of the data", f->path);
	uint32_t n = le_get32(d + len - SEEK_FOOTER);
	uint8_t desc = d[len - 5];
	uint64_t esize = desc & SEEK_CHECKSUM_FLAG ? 12 : 8;
	uint64_t tlen = 8 + esize * n + SEEK_FOOTER;
	uint64_t want = ((uint64_t)h->n_tokens * h->id_width + (uint64_t)h->frame_tokens * h->id_width - 1) /
			((uint64_t)h->frame_tokens * h->id_width);
	if (n != want || tlen > len)
		return err_set(err, "%s: seek table lists %u frames, the header implies %llu",
			       f->path, n, (unsigned long long)want);
	const uint8_t *t = d + len - tlen;
	if (le_get32(t) != SEEK_SKIPPABLE_MAGIC || le_get32(t + 4) != tlen - 8)
		return err_set(err, "%s: bad zstd seek table frame", f->path);
	f->frame_off = malloc((n + 1) * sizeof *f->frame_off);
	if (f->frame_off == NULL)
		return err_set(err, "%s: out of memory", f->path);
	f->n_frames = n;
	uint64_t off = 0, dec = 0;
	for (uint32_t i = 0; i < n; i++) {
		f->frame_off[i] = off;
		off += le_get32(t + 8 + esize * i);
		uint32_t ds = le_get32(t + 12 + esize * i);
		uint64_t full = (uint64_t)h->frame_tokens * h->id_width;
		if ((i + 1 < n && ds != full) || ds > full)
			return err_set(err, "%s: frame %u holds %u bytes, expected %llu", f->path, i,
				       ds, (unsigned long long)full);
		dec += ds;
	}
	f->frame_off[n] = off;
	if (off != len - tlen || dec != h->n_tokens * h->id_width)
		return err_set(err, "%s: seek table sizes do not add up to the data", f->path);
	return 0;
}

shard_file *shard_file_open(const char *path, titan_err *err)
{
	static atomic_uint_fast64_t next_serial = 1;
	shard_file *f = calloc(1, sizeof *f);
	if (f == NULL || (f->path = strdup(path)) == NULL) {
		free(f);
		err_set(err, "%s: out of memory", path);
		return NULL;
	}
	f->m.fd = -1;
	if (mfile_open(&f->m, path, err) != 0 ||
	    header_decode(f->m.data, f->m.size, &f->h, path, err) != 0 ||
	    header_check(&f->h, f->m.size, path, err) != 0 ||
	    ((f->h.flags & SHARD_ZSTD) && read_seek_table(f, err) != 0)) {
		shard_file_close(f);
		return NULL;
	}
	/* The mapping outlives the descriptor; closing it lets a loader keep
	 * thousands of shards open under the usual limit of 1024 descriptors. */
	if (f->m.fd >= 0) {
		close(f->m.fd);
		f->m.fd = -1;
	}
	f->serial = atomic_fetch_add(&next_serial, 1);
	return f;
}

void shard_file_close(shard_file *f)
{
	if (f == NULL)
		return;
	mfile_close(&f->m);
	shard_dec_free(f->own);
	free(f->frame_off);
	free(f->path);
	free(f);
}

const shard_header *shard_file_header(const shard_file *f)
{
	return &f->h;
}

const char *shard_file_path(const shard_file *f)
{
	return f->path;
}

struct shard_dec {
	ZSTD_DCtx *dctx;
	uint8_t *cache;        /* one decompressed frame */
	size_t cap;
	uint64_t serial;       /* of the file it came from; 0 = none */
	size_t frame;
};

shard_dec *shard_dec_new(void)
{
	shard_dec *d = calloc(1, sizeof *d);
	if (d != NULL && (d->dctx = ZSTD_createDCtx()) == NULL) {
		free(d);
		d = NULL;
	}
	return d;
}

void shard_dec_free(shard_dec *d)
{
	if (d == NULL)
		return;
	ZSTD_freeDCtx(d->dctx);
	free(d->cache);
	free(d);
}

static int load_frame(shard_file *f, shard_dec *d, size_t k, titan_err *err)
{
	if (d->serial == f->serial && d->frame == k)
		return 0;
	size_t cap = (size_t)f->h.frame_tokens * f->h.id_width;
	if (cap > d->cap) {
		uint8_t *c = realloc(d->cache, cap);
		if (c == NULL)
			return err_set(err, "%s: out of memory", f->path);
		d->cache = c;
		d->cap = cap;
	}
	const uint8_t *src = f->m.data + f->h.data_offset + f->frame_off[k];
	size_t clen = (size_t)(f->frame_off[k + 1] - f->frame_off[k]);
	uint64_t left = f->h.n_tokens - (uint64_t)k * f->h.frame_tokens;
	size_t want = left < f->h.frame_tokens ? (size_t)left * f->h.id_width : cap;
	d->serial = 0;
	size_t got = ZSTD_decompressDCtx(d->dctx, d->cache, cap, src, clen);
	if (ZSTD_isError(got))
		return err_set(err, "%s: frame %zu: zstd: %s", f->path, k, ZSTD_getErrorName(got));
	if (got != want)
		return err_set(err, "%s: frame %zu: %zu bytes, expected %zu", f->path, k, got, want);
	d->serial = f->serial;
	d->frame = k;
	return 0;
}

int shard_file_read(shard_file *f, shard_dec *d, uint64_t start, size_t n, uint32_t *out,
		    titan_err *err)
{
	if (start > f->h.n_tokens || n > f->h.n_tokens - start)
		return err_set(err, "%s: tokens [%llu, +%zu) out of range (%llu tokens)", f->path,
			       (unsigned long long)start, n, (unsigned long long)f->h.n_tokens);
	const uint32_t w = f->h.id_width;
	if (!(f->h.flags & SHARD_ZSTD)) {
		le_widen(f->m.data + f->h.data_offset + start * w, w, n, out);
		return 0;
	}
	while (n > 0) {
		size_t k = (size_t)(start / f->h.frame_tokens);
		size_t in = (size_t)(start % f->h.frame_tokens);
		size_t take = f->h.frame_tokens - in < n ? f->h.frame_tokens - in : n;
		if (load_frame(f, d, k, err) != 0)
			return -1;
		le_widen(d->cache + in * w, w, take, out);
		out += take;
		start += take;
		n -= take;
	}
	return 0;
}

int shard_file_tokens(shard_file *f, uint64_t start, size_t n, uint32_t *out, titan_err *err)
{
	if ((f->h.flags & SHARD_ZSTD) && f->own == NULL && (f->own = shard_dec_new()) == NULL)
		return err_set(err, "%s: out of memory", f->path);
	return shard_file_read(f, f->own, start, n, out, err);
}

int shard_file_mask(const shard_file *f, uint64_t start, size_t n, uint8_t *out, titan_err *err)
{
	if (start > f->h.n_tokens || n > f->h.n_tokens - start)
		return err_set(err, "%s: mask of tokens [%llu, +%zu) out of range (%llu tokens)",
			       f->path, (unsigned long long)start, n, (unsigned long long)f->h.n_tokens);
	if (!(f->h.flags & SHARD_MASK)) {
		memset(out, 1, n);
		return 0;
	}
	const uint8_t *m = f->m.data + f->h.mask_offset;
	for (size_t i = 0; i < n; i++)
		out[i] = (m[(start + i) / 8] >> ((start + i) % 8)) & 1;
	return 0;
}

uint64_t shard_file_doc_start(const shard_file *f, uint64_t d)
{
	return le_get64(f->m.data + f->h.index_offset + 8 * d);
}

uint64_t shard_file_doc_of(const shard_file *f, uint64_t t)
{
	uint64_t lo = 0, hi = f->h.n_docs; /* answer in [lo, hi) */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (shard_file_doc_start(f, mid) <= t)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

int shard_file_verify(shard_file *f, titan_err *err)
{
	const shard_header *h = &f->h;
	uint32_t crc = crc32c(0, f->m.data + h->data_offset, (size_t)h->data_bytes);
	if (crc != h->data_crc)
		return err_set(err, "%s: data checksum 0x%08x, header says 0x%08x", f->path, crc,
			       h->data_crc);
	crc = crc32c(0, f->m.data + h->index_offset, (size_t)h->index_bytes);
	if (crc != h->index_crc)
		return err_set(err, "%s: index checksum 0x%08x, header says 0x%08x", f->path, crc,
			       h->index_crc);
	if (h->flags & SHARD_MASK) {
		crc = crc32c(0, f->m.data + h->mask_offset, (size_t)h->mask_bytes);
		if (crc != h->mask_crc)
			return err_set(err, "%s: label mask checksum 0x%08x, header says 0x%08x",
				       f->path, crc, h->mask_crc);
		if (h->n_tokens % 8 && f->m.data[h->mask_offset + h->mask_bytes - 1] >> (h->n_tokens % 8))
			return err_set(err, "%s: label mask bits set past the last token", f->path);
	}
	uint64_t prev = 0;
	for (uint64_t d = 0; d < h->n_docs; d++) {
		uint64_t s = shard_file_doc_start(f, d);
		if ((d == 0 && s != 0) || s < prev || s > h->n_tokens)
			return err_set(err, "%s: document %llu starts at %llu, out of order", f->path,
				       (unsigned long long)d, (unsigned long long)s);
		prev = s;
	}
	if (h->n_docs == 0 && h->n_tokens != 0)
		return err_set(err, "%s: %llu tokens but no documents", f->path,
			       (unsigned long long)h->n_tokens);
	/* a decoder of its own, not the file's: a loader verifying thousands of
	 * shards must not keep a decoder for each */
	shard_dec *d = NULL;
	if ((h->flags & SHARD_ZSTD) && (d = shard_dec_new()) == NULL)
		return err_set(err, "%s: out of memory", f->path);
	uint32_t buf[4096];
	int rc = 0;
	for (uint64_t t = 0; rc == 0 && t < h->n_tokens;) {
		size_t k = h->n_tokens - t < 4096 ? (size_t)(h->n_tokens - t) : 4096;
		if (shard_file_read(f, d, t, k, buf, err) != 0) {
			rc = -1;
			break;
		}
		uint32_t bad = 0;
		for (size_t i = 0; i < k; i++)
			bad |= buf[i] >= h->vocab_size;
		if (bad)
			rc = err_set(err, "%s: an id near token %llu is not below vocab_size %u",
				     f->path, (unsigned long long)t, h->vocab_size);
		t += k;
	}
	shard_dec_free(d);
	return rc;
}
