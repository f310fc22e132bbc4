/* ptzip.c: torch.save zip reading and writing (see ptzip.h). */
#include "ptzip/ptzip.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pickle/pickle.h"
#include "ptzip/zipcrc.h"

#define SIG_LOCAL   0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD    0x06054b50u
#define SIG_EOCD64  0x06064b50u
#define SIG_LOC64   0x07064b50u
#define SIG_DESC    0x08074b50u
#define ALIGN       64
#define MAX_ENTRIES 1000000

static uint64_t le(const uint8_t *p, int k)
{
	uint64_t v = 0;
	for (int i = k - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- reading ---- */

static int find_eocd(const uint8_t *b, uint64_t n, uint64_t *at)
{
	if (n < 22)
		return -1;
	uint64_t lo = n > 22 + 65535 ? n - 22 - 65535 : 0;
	for (uint64_t i = n - 22 + 1; i-- > lo;) {
		if (le(b + i, 4) == SIG_EOCD && i + 22 + le(b + i + 20, 2) == n) {
			*at = i;
			return 0;
		}
	}
	return -1;
}

/* The zip64 extra field (id 1) holds, in order, the fields whose 32-bit slot is
 * 0xFFFFFFFF: uncompressed size, compressed size, local header offset. */
static int zip64_extra(const uint8_t *x, uint64_t xl, uint64_t *usize, uint64_t *csize,
		       uint64_t *off)
{
	uint64_t i = 0;
	while (i + 4 <= xl) {
		uint64_t id = le(x + i, 2), len = le(x + i + 2, 2);
		if (i + 4 + len > xl)
			return -1;
		if (id == 1) {
			const uint8_t *p = x + i + 4;
			uint64_t k = 0;
			if (*usize == 0xFFFFFFFFu) {
				if (k + 8 > len)
					return -1;
				*usize = le(p + k, 8);
				k += 8;
			}
			if (*csize == 0xFFFFFFFFu) {
				if (k + 8 > len)
					return -1;
				*csize = le(p + k, 8);
				k += 8;
			}
			if (*off == 0xFFFFFFFFu) {
				if (k + 8 > len)
					return -1;
				*off = le(p + k, 8);
			}
			return 0;
		}
		i += 4 + len;
	}
	return 0;
}

static int read_cd(ptz_reader *r, uint64_t cd_off, uint64_t cd_size, uint64_t count,
		   titan_err *err)
{
	const uint8_t *b = r->buf;
	if (cd_off > r->size || cd_size > r->size - cd_off)
		return err_set(err, "zip: central directory out of bounds");
	if (count > MAX_ENTRIES || count > cd_size / 46)
		return err_set(err, "zip: implausible entry count %" PRIu64, count);
	r->entries = calloc(count ? count : 1, sizeof *r->entries);
	if (!r->entries)
		return err_set(err, "zip: out of memory");
	uint64_t p = cd_off, end = cd_off + cd_size;
	for (uint64_t i = 0; i < count; i++) {
		if (end - p < 46 || le(b + p, 4) != SIG_CENTRAL)
			return err_set(err, "zip: bad central directory record %" PRIu64, i);
		uint64_t method = le(b + p + 10, 2), crc = le(b + p + 16, 4);
		uint64_t csize = le(b + p + 20, 4), usize = le(b + p + 24, 4);
		uint64_t nl = le(b + p + 28, 2), xl = le(b + p + 30, 2), cl = le(b + p + 32, 2);
		uint64_t loff = le(b + p + 42, 4);
		if (46 + nl + xl + cl > end - p)
			return err_set(err, "zip: central record %" PRIu64 " runs past the directory", i);
		if (zip64_extra(b + p + 46 + nl, xl, &usize, &csize, &loff))
			return err_set(err, "zip: bad zip64 extra field in record %" PRIu64, i);
		if (method != 0 || csize != usize)
			return err_set(err, "zip: entry %" PRIu64 " is compressed (method %" PRIu64
				       "); torch.save writes stored entries", i, method);
		if (loff > r->size || r->size - loff < 30 || le(b + loff, 4) != SIG_LOCAL)
			return err_set(err, "zip: entry %" PRIu64 ": bad local header at %" PRIu64, i, loff);
		uint64_t lnl = le(b + loff + 26, 2), lxl = le(b + loff + 28, 2);
		uint64_t data = loff + 30 + lnl + lxl;
		if (data > r->size || usize > r->size - data)
			return err_set(err, "zip: entry %" PRIu64 " data out of bounds", i);
		if (lnl != nl || memcmp(b + loff + 30, b + p + 46, nl) != 0)
			return err_set(err, "zip: entry %" PRIu64 ": local and central names differ", i);
		ptz_entry *e = &r->entries[i];
		e->name = malloc(nl + 1);
		if (!e->name)
			return err_set(err, "zip: out of memory");
		memcpy(e->name, b + p + 46, nl);
		e->name[nl] = 0;
		if (memchr(e->name, 0, nl))
			return err_set(err, "zip: entry %" PRIu64 " has a NUL in its name", i);
		e->data_off = data;
		e->size = usize;
		e->crc32 = (uint32_t)crc;
		r->n_entries = i + 1;
		p += 46 + nl + xl + cl;
	}
	return 0;
}

int ptz_open(ptz_reader *r, const uint8_t *buf, uint64_t size, titan_err *err)
{
	memset(r, 0, sizeof *r);
	r->buf = buf;
	r->size = size;
	uint64_t eo;
	if (find_eocd(buf, size, &eo))
		return err_set(err, "zip: no end of central directory record (not a torch.save file?)");
	uint64_t count = le(buf + eo + 10, 2), cd_size = le(buf + eo + 12, 4), cd_off = le(buf + eo + 16, 4);
	if (count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
		if (eo < 20 || le(buf + eo - 20, 4) != SIG_LOC64)
			return err_set(err, "zip: zip64 fields without a zip64 locator");
		uint64_t z = le(buf + eo - 20 + 8, 8);
		if (z > size || size - z < 56 || le(buf + z, 4) != SIG_EOCD64)
			return err_set(err, "zip: bad zip64 end of central directory");
		count = le(buf + z + 32, 8);
		cd_size = le(buf + z + 40, 8);
		cd_off = le(buf + z + 48, 8);
	}
	if (read_cd(r, cd_off, cd_size, count, err)) {
		ptz_close(r);
		return -1;
	}
	if (r->n_entries == 0) {
		ptz_close(r);
		return err_set(err, "zip: no entries");
	}
	const char *slash = strchr(r->entries[0].name, '/');
	if (!slash) {
		ptz_close(r);
		return err_set(err, "zip: entry '%s' is not under a root folder", r->entries[0].name);
	}
	r->root = strndup(r->entries[0].name, (size_t)(slash - r->entries[0].name));
	if (!r->root) {
		ptz_close(r);
		return err_set(err, "zip: out of memory");
	}
	return 0;
}

void ptz_close(ptz_reader *r)
{
	for (size_t i = 0; i < r->n_entries; i++)
		free(r->entries[i].name);
	free(r->entries);
	free(r->root);
	memset(r, 0, sizeof *r);
}

const ptz_entry *ptz_find(const ptz_reader *r, const char *rel)
{
	size_t rl = strlen(r->root);
	for (size_t i = 0; i < r->n_entries; i++) {
		const char *n = r->entries[i].name;
		if (strncmp(n, r->root, rl) == 0 && n[rl] == '/' && strcmp(n + rl + 1, rel) == 0)
			return &r->entries[i];
	}
	return NULL;
}

int ptz_crc_matches(const ptz_entry *e, uint32_t crc, titan_err *err)
{
	if (crc != e->crc32)
		return err_set(err, "zip: %s: CRC-32 %08x, expected %08x (the file is damaged)",
			       e->name, crc, e->crc32);
	return 0;
}

int ptz_check_crc(const ptz_reader *r, const ptz_entry *e, titan_err *err)
{
	return ptz_crc_matches(e, zipcrc(0, r->buf + e->data_off, (size_t)e->size), err);
}

uint32_t ptz_crc32(uint32_t crc, const void *buf, size_t n)
{
	return zipcrc(crc, buf, n);
}

uint32_t ptz_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	return zipcrc_combine(crc_a, crc_b, len_b);
}

/* ---- tensors ---- */

static const char *const tensor_globals[] = {
	"torch._utils _rebuild_tensor_v2",
	"torch._utils _rebuild_parameter",
	"collections OrderedDict",
	"_codecs encode",
	"torch FloatStorage", "torch BFloat16Storage", "torch HalfStorage", "torch DoubleStorage",
	"torch LongStorage", "torch IntStorage", "torch ShortStorage", "torch CharStorage",
	"torch ByteStorage", "torch BoolStorage",
	NULL,
};

const pk_allow ptz_allow = {tensor_globals};

static int int_tuple(const pk_val *v, int64_t *out, int *n, int max)
{
	if (!v || v->kind != PK_TUPLE || v->n > (size_t)max)
		return -1;
	for (size_t i = 0; i < v->n; i++) {
		if (v->items[i]->kind != PK_INT)
			return -1;
		out[i] = v->items[i]->i;
	}
	*n = (int)v->n;
	return 0;
}

int ptz_tensor_from_val(const ptz_reader *r, const pk_val *v, ptz_tensor *t, titan_err *err)
{
	memset(t, 0, sizeof *t);
	if (pk_obj_is(v, "torch._utils", "_rebuild_parameter")) {
		if (v->args->n < 1)
			return err_set(err, "torch.save: _rebuild_parameter without a tensor");
		v = v->args->items[0];
	}
	if (!pk_obj_is(v, "torch._utils", "_rebuild_tensor_v2"))
		return err_set(err, "torch.save: not a tensor (expected torch._utils._rebuild_tensor_v2)");
	const pk_val *a = v->args;
	if (a->n < 6)
		return err_set(err, "torch.save: _rebuild_tensor_v2 with %zu arguments", a->n);
	const pk_val *pid = a->items[0];
	if (pid->kind != PK_PERSID || pid->args->kind != PK_TUPLE || pid->args->n != 5)
		return err_set(err, "torch.save: tensor storage is not a persistent id");
	const pk_val *const *s = (const pk_val *const *)pid->args->items;
	if (s[0]->kind != PK_STR || strcmp(s[0]->s, "storage") || s[1]->kind != PK_GLOBAL ||
	    s[2]->kind != PK_STR || s[4]->kind != PK_INT)
		return err_set(err, "torch.save: malformed storage id");
	t->dtype = ptz_dtype_from_storage(s[1]->name);
	if (t->dtype == PTZ_NONE)
		return err_set(err, "torch.save: unsupported storage type %s", s[1]->name);
	if (a->items[1]->kind != PK_INT || int_tuple(a->items[2], t->shape, &t->ndim, 8))
		return err_set(err, "torch.save: bad tensor offset or size");
	int nst;
	if (int_tuple(a->items[3], t->stride, &nst, 8) || nst != t->ndim)
		return err_set(err, "torch.save: bad tensor stride");
	t->storage_offset = a->items[1]->i;
	char rel[300];
	snprintf(rel, sizeof rel, "data/%s", s[2]->s);
	const ptz_entry *e = ptz_find(r, rel);
	if (!e)
		return err_set(err, "torch.save: storage record %s missing", rel);
	size_t es = ptz_dtype_size(t->dtype);
	int64_t numel = s[4]->i;
	if (numel < 0 || (uint64_t)numel > e->size / es)
		return err_set(err, "torch.save: storage %s holds %" PRIu64 " bytes, fewer than %" PRId64
			       " elements", rel, e->size, numel);
	/* Every element the view can reach must lie inside the storage. */
	if (t->storage_offset < 0)
		return err_set(err, "torch.save: negative storage offset");
	int64_t hi = t->storage_offset;
	int empty = 0;
	for (int d = 0; d < t->ndim; d++) {
		if (t->shape[d] < 0 || t->stride[d] < 0)
			return err_set(err, "torch.save: negative size or stride");
		if (t->shape[d] == 0)
			empty = 1;
		else if (t->stride[d] > INT64_MAX / 2 / t->shape[d] ||
			 hi > INT64_MAX / 2 - (t->shape[d] - 1) * t->stride[d])
			return err_set(err, "torch.save: size or stride overflows");
		else
			hi += (t->shape[d] - 1) * t->stride[d];
	}
	if (!empty && hi >= numel)
		return err_set(err, "torch.save: view reaches element %" PRId64 " of a %" PRId64
			       "-element storage", hi, numel);
	t->storage = r->buf + e->data_off;
	t->storage_bytes = (uint64_t)numel * es;
	t->entry = e;
	return 0;
}

int ptz_read_tensor(const ptz_reader *r, ptz_tensor *t, titan_err *err)
{
	const ptz_entry *e = ptz_find(r, "data.pkl");
	if (!e)
		return err_set(err, "torch.save: no data.pkl");
	pk_val *v;
	pk_arena *a;
	int rc = pk_load(r->buf + e->data_off, (size_t)e->size, &ptz_allow, &v, &a, err);
	if (rc == 0)
		rc = ptz_tensor_from_val(r, v, t, err);
	pk_free(a);
	return rc;
}

int64_t ptz_tensor_numel(const ptz_tensor *t)
{
	int64_t n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

int ptz_tensor_contiguous(const ptz_tensor *t)
{
	int64_t want = 1;
	for (int d = t->ndim - 1; d >= 0; d--) {
		if (t->shape[d] != 1 && t->stride[d] != want)
			return 0;
		want *= t->shape[d];
	}
	return 1;
}

int ptz_tensor_copy(const ptz_tensor *t, void *out, ptz_dtype dtype, titan_err *err)
{
	size_t es = ptz_dtype_size(t->dtype), os = ptz_dtype_size(dtype);
	if (!os)
		return err_set(err, "torch.save: unknown target type");
	int64_t n = ptz_tensor_numel(t);
	if (n == 0)
		return 0;
	if (ptz_tensor_contiguous(t)) {
		ptz_convert(out, dtype, t->storage + (size_t)t->storage_offset * es, t->dtype, (size_t)n);
		return 0;
	}
	/* A strided view: walk it row by row along the last dim. */
	int64_t idx[8] = {0};
	int last = t->ndim - 1;
	int64_t row = t->shape[last];
	uint8_t *o = out;
	for (int64_t done = 0; done < n; done += row) {
		int64_t base = t->storage_offset;
		for (int d = 0; d < last; d++)
			base += idx[d] * t->stride[d];
		for (int64_t k = 0; k < row; k++)
			ptz_convert(o + (size_t)(done + k) * os, dtype,
				    t->storage + (size_t)(base + k * t->stride[last]) * es, t->dtype, 1);
		for (int d = last - 1; d >= 0; d--) {
			if (++idx[d] < t->shape[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

/* ---- writing ---- */

struct ptz_cd {
	char *name;
	uint64_t off, size;
	uint32_t crc;
};

static int wr(ptz_writer *w, const void *p, uint64_t n)
{
	if (w->failed)
		return -1;
	if (w->fp) {
		if (n && fwrite(p, 1, (size_t)n, w->fp) != n) {
			w->failed = 1;
			return -1;
		}
	} else {
		if (w->pos + n > w->mem_cap) {
			size_t cap = w->mem_cap ? w->mem_cap : 4096;
			while (cap < w->pos + n)
				cap *= 2;
			uint8_t *m = realloc(w->mem, cap);
			if (!m) {
				w->failed = 1;
				return -1;
			}
			w->mem = m;
			w->mem_cap = cap;
		}
		if (n)
			memcpy(w->mem + w->pos, p, (size_t)n);
	}
	w->pos += n;
	return 0;
}

static void put(uint8_t *p, uint64_t v, int k)
{
	for (int i = 0; i < k; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int ptz_writer_init(ptz_writer *w, FILE *fp, const char *root, titan_err *err)
{
	memset(w, 0, sizeof *w);
	w->fp = fp;
	w->root = strdup(root);
	if (!w->root)
		return err_set(err, "zip: out of memory");
	return 0;
}

void ptz_writer_free(ptz_writer *w)
{
	for (size_t i = 0; i < w->n_cd; i++)
		free(w->cd[i].name);
	free(w->cd);
	free(w->root);
	free(w->mem);
	memset(w, 0, sizeof *w);
}

static int io_err(ptz_writer *w, titan_err *err)
{
	(void)w;
	return err_errno(err, "zip: write failed");
}

int ptz_writer_add(ptz_writer *w, const char *rel, const void *data, uint64_t n, titan_err *err)
{
	char name[512];
	int nl = snprintf(name, sizeof name, "%s/%s", w->root, rel);
	if (nl < 0 || (size_t)nl >= sizeof name)
		return err_set(err, "zip: entry name too long");
	if (w->n_cd == w->cap_cd) {
		size_t cap = w->cap_cd ? w->cap_cd * 2 : 8;
		struct ptz_cd *cd = realloc(w->cd, cap * sizeof *cd);
		if (!cd)
			return err_set(err, "zip: out of memory");
		w->cd = cd;
		w->cap_cd = cap;
	}
	uint32_t crc = zipcrc(0, data, (size_t)n);
	uint64_t off = w->pos;
	/* Pad with an "FB" extra field so the data starts on a 64-byte boundary of
	 * the zip, as PyTorch's writer does (it mmaps storages in place). */
	uint64_t start = off + 30 + (uint64_t)nl + 4;
	uint64_t pad = (ALIGN - start % ALIGN) % ALIGN;
	uint8_t h[30 + 512 + 4 + ALIGN];
	put(h, SIG_LOCAL, 4);
	put(h + 4, 0, 2);       /* version needed: PyTorch's writer leaves 0 */
	put(h + 6, 0x0808, 2);  /* data descriptor follows; UTF-8 name */
	memset(h + 8, 0, 18);   /* method, time, date, crc, sizes: in the descriptor */
	put(h + 26, (uint64_t)nl, 2);
	put(h + 28, 4 + pad, 2);
	memcpy(h + 30, name, (size_t)nl);
	uint8_t *x = h + 30 + nl;
	x[0] = 'F';
	x[1] = 'B';
	put(x + 2, pad, 2);
	memset(x + 4, 'Z', (size_t)pad);
	if (wr(w, h, 30 + (uint64_t)nl + 4 + pad) || wr(w, data, n))
		return io_err(w, err);
	uint8_t d[24];
	put(d, SIG_DESC, 4);
	put(d + 4, crc, 4);
	int dl;
	if (n >= 0xFFFFFFFFu) {
		put(d + 8, n, 8);
		put(d + 16, n, 8);
		dl = 24;
	} else {
		put(d + 8, n, 4);
		put(d + 12, n, 4);
		dl = 16;
	}
	if (wr(w, d, (uint64_t)dl))
		return io_err(w, err);
	struct ptz_cd *c = &w->cd[w->n_cd];
	c->name = strdup(name);
	if (!c->name)
		return err_set(err, "zip: out of memory");
	c->off = off;
	c->size = n;
	c->crc = crc;
	w->n_cd++;
	w->crc_all = zipcrc_combine(w->crc_all, crc, n);
	return 0;
}

static int write_cd(ptz_writer *w, titan_err *err)
{
	for (size_t i = 0; i < w->n_cd; i++) {
		const struct ptz_cd *c = &w->cd[i];
		size_t nl = strlen(c->name);
		uint8_t h[46], x[4 + 24];
		int big = c->size >= 0xFFFFFFFFu, far = c->off >= 0xFFFFFFFFu;
		size_t xl = 0;
		if (big || far) {
			put(x, 1, 2);
			xl = 4;
			if (big) {
				put(x + xl, c->size, 8);
				put(x + xl + 8, c->size, 8);
				xl += 16;
			}
			if (far) {
				put(x + xl, c->off, 8);
				xl += 8;
			}
			put(x + 2, xl - 4, 2);
		}
		put(h, SIG_CENTRAL, 4);
		put(h + 4, 0, 2);
		put(h + 6, (big || far) ? 45 : 0, 2);
		put(h + 8, 0x0808, 2);
		memset(h + 10, 0, 6);
		put(h + 16, c->crc, 4);
		put(h + 20, big ? 0xFFFFFFFFu : c->size, 4);
		put(h + 24, big ? 0xFFFFFFFFu : c->size, 4);
		put(h + 28, nl, 2);
		put(h + 30, xl, 2);
		memset(h + 32, 0, 10);
		put(h + 42, far ? 0xFFFFFFFFu : c->off, 4);
		if (wr(w, h, 46) || wr(w, c->name, nl) || wr(w, x, xl))
			return io_err(w, err);
	}
	return 0;
}

int ptz_writer_finish(ptz_writer *w, titan_err *err)
{
	if (ptz_writer_add(w, "version", "3\n", 2, err))
		return -1;
	/* torch writes 40 digits that identify the archive; derive them from the
	 * contents so that equal saves give equal bytes. */
	char id[64];
	uint64_t a = (uint64_t)w->crc_all * 2654435761u ^ w->pos;
	snprintf(id, sizeof id, "%020" PRIu64 "%020" PRIu64, a,
		 (uint64_t)w->n_cd * 1000003u + w->crc_all);
	if (ptz_writer_add(w, ".data/serialization_id", id, 40, err))
		return -1;
	uint64_t cd_off = w->pos;
	if (write_cd(w, err))
		return -1;
	uint64_t cd_size = w->pos - cd_off, eocd64 = w->pos;
	uint8_t z[56 + 20 + 22];
	put(z, SIG_EOCD64, 4);
	put(z + 4, 44, 8);
	put(z + 12, 0x031e, 2);
	put(z + 14, 45, 2);
	put(z + 16, 0, 8);
	put(z + 24, w->n_cd, 8);
	put(z + 32, w->n_cd, 8);
	put(z + 40, cd_size, 8);
	put(z + 48, cd_off, 8);
	uint8_t *l = z + 56;
	put(l, SIG_LOC64, 4);
	put(l + 4, 0, 4);
	put(l + 8, eocd64, 8);
	put(l + 16, 1, 4);
	uint8_t *e = l + 20;
	put(e, SIG_EOCD, 4);
	put(e + 4, 0, 4);
	uint64_t cnt = w->n_cd >= 0xFFFF ? 0xFFFF : w->n_cd;
	put(e + 8, cnt, 2);
	put(e + 10, cnt, 2);
	put(e + 12, cd_size >= 0xFFFFFFFFu ? 0xFFFFFFFFu : cd_size, 4);
	put(e + 16, cd_off >= 0xFFFFFFFFu ? 0xFFFFFFFFu : cd_off, 4);
	put(e + 20, 0, 2);
	if (wr(w, z, sizeof z))
		return io_err(w, err);
	return 0;
}

pk_val *ptz_tensor_val(pk_arena *a, ptz_dtype dtype, int ndim, const int64_t *shape,
		       const char *key)
{
	int64_t numel = 1, stride[8];
	for (int d = ndim - 1; d >= 0; d--) {
		stride[d] = numel;
		numel *= shape[d];
	}
	pk_val *id = pk_new(a, PK_TUPLE), *pid = pk_new(a, PK_PERSID);
	pk_val *args = pk_new(a, PK_TUPLE), *size = pk_new(a, PK_TUPLE), *st = pk_new(a, PK_TUPLE);
	pk_val *od = pk_new(a, PK_OBJ), *root = pk_new(a, PK_OBJ);
	int bad = !id || !pid || !args || !size || !st || !od || !root;
	bad = bad || pk_append(a, id, pk_str(a, "storage")) ||
	      pk_append(a, id, pk_global(a, "torch", ptz_dtype_storage(dtype))) ||
	      pk_append(a, id, pk_str(a, key)) || pk_append(a, id, pk_str(a, "cpu")) ||
	      pk_append(a, id, pk_int(a, numel));
	for (int d = 0; d < ndim && !bad; d++)
		bad = pk_append(a, size, pk_int(a, shape[d])) || pk_append(a, st, pk_int(a, stride[d]));
	if (bad)
		return NULL;
	pid->args = id;
	od->cls = pk_global(a, "collections", "OrderedDict");
	od->args = pk_new(a, PK_TUPLE);
	root->cls = pk_global(a, "torch._utils", "_rebuild_tensor_v2");
	root->args = args;
	bad = !od->cls || !od->args || !root->cls || pk_append(a, args, pid) ||
	      pk_append(a, args, pk_int(a, 0)) || pk_append(a, args, size) ||
	      pk_append(a, args, st) || pk_append(a, args, pk_bool(a, 0)) || pk_append(a, args, od);
	return bad ? NULL : root;
}

/* data.pkl of a contiguous tensor, the opcodes torch.save emits. */
static int tensor_pickle(pk_buf *b, ptz_dtype dtype, int ndim, const int64_t *shape,
			 titan_err *err)
{
	pk_arena *a = pk_arena_new();
	if (!a)
		return err_set(err, "out of memory");
	pk_val *root = ptz_tensor_val(a, dtype, ndim, shape, "0");
	int rc = !root ? err_set(err, "out of memory") : pk_dump(b, root, 2, err);
	pk_free(a);
	return rc;
}

/* The records torch.save writes between data.pkl and the storages. */
int ptz_write_preamble(ptz_writer *w, const void *pkl, size_t n, titan_err *err)
{
	if (ptz_writer_add(w, "data.pkl", pkl, n, err) ||
	    ptz_writer_add(w, ".format_version", "1", 1, err) ||
	    ptz_writer_add(w, ".storage_alignment", "64", 2, err) ||
	    ptz_writer_add(w, "byteorder", "little", 6, err))
		return -1;
	return 0;
}

int ptz_save_tensor(ptz_writer *w, ptz_dtype dtype, int ndim, const int64_t *shape,
		    const void *data, titan_err *err)
{
	if (ndim < 0 || ndim > 8 || !ptz_dtype_storage(dtype))
		return err_set(err, "torch.save: unsupported tensor (ndim %d)", ndim);
	pk_buf b = {0};
	if (tensor_pickle(&b, dtype, ndim, shape, err)) {
		free(b.p);
		return -1;
	}
	uint64_t bytes = ptz_dtype_size(dtype);
	for (int d = 0; d < ndim; d++)
		bytes *= (uint64_t)shape[d];
	int rc = ptz_write_preamble(w, b.p, b.n, err);
	free(b.p);
	if (rc == 0)
		rc = ptz_writer_add(w, "data/0", data, bytes, err);
	if (rc == 0)
		rc = ptz_writer_finish(w, err);
	return rc;
}

int ptz_save_value(ptz_writer *w, const pk_val *v, titan_err *err)
{
	pk_buf b = {0};
	int rc = pk_dump(&b, v, 2, err);
	if (rc == 0)
		rc = ptz_write_preamble(w, b.p, b.n, err);
	free(b.p);
	if (rc == 0)
		rc = ptz_writer_finish(w, err);
	return rc;
}
