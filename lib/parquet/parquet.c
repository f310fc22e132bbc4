/* parquet.c: Parquet footers, pages and the first value of each row (see
 * parquet.h; the format is Apache Parquet's parquet.thrift, read here with
 * the Thrift compact protocol). */
#include "parquet/parquet.h"

#include <libdeflate.h>
#include <snappy-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/mfile.h"

enum { T_BYTE_ARRAY = 6, T_INT32 = 1, T_INT64 = 2 };
enum { REQUIRED = 0, OPTIONAL = 1, REPEATED = 2 };
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICT = 2, ENC_RLE = 3, ENC_RLE_DICT = 8 };
enum { CODEC_NONE = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };
#define MAX_SLOTS (1 << 24) /* levels in one page */
#define MAX_DEPTH 32

/* ---- Thrift compact protocol */

typedef struct tr {
	const uint8_t *p, *end;
	int depth, bad;
} tr;

static uint64_t tr_varint(tr *t)
{
	uint64_t v = 0;
	for (int s = 0; s < 64; s += 7) {
		if (t->p >= t->end) {
			t->bad = 1;
			return 0;
		}
		uint8_t b = *t->p++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return v;
	}
	t->bad = 1;
	return 0;
}

static int64_t tr_int(tr *t)
{
	uint64_t v = tr_varint(t);
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static void tr_bytes(tr *t, const uint8_t **p, size_t *n)
{
	uint64_t len = tr_varint(t);
	if (t->bad || len > (uint64_t)(t->end - t->p)) {
		t->bad = 1;
		*p = NULL;
		*n = 0;
		return;
	}
	*p = t->p;
	*n = (size_t)len;
	t->p += len;
}

/* A field header: its type (0: the struct's end), its id in *id. */
static int tr_field(tr *t, int *id)
{
	if (t->p >= t->end) {
		t->bad = 1;
		return 0;
	}
	uint8_t b = *t->p++;
	if (b == 0)
		return 0;
	int delta = b >> 4;
	*id = delta ? *id + delta : (int)tr_int(t);
	return b & 0x0f;
}

static uint64_t tr_list(tr *t, int *elem)
{
	if (t->p >= t->end) {
		t->bad = 1;
		return 0;
	}
	uint8_t b = *t->p++;
	*elem = b & 0x0f;
	uint64_t n = b >> 4;
	if (n == 15)
		n = tr_varint(t);
	if (n > (uint64_t)(t->end - t->p)) /* every element takes a byte at least */
		t->bad = 1;
	return t->bad ? 0 : n;
}

static void tr_skip(tr *t, int type);

static void tr_skip_struct(tr *t)
{
	if (++t->depth > MAX_DEPTH) {
		t->bad = 1;
		return;
	}
	int id = 0, type;
	while (!t->bad && (type = tr_field(t, &id)) != 0)
		tr_skip(t, type);
	t->depth--;
}

static void tr_skip(tr *t, int type)
{
	const uint8_t *p;
	size_t n;
	int e, kv;
	uint64_t k;
	switch (type) {
	case 1: case 2: break;                         /* bool in a field header */
	case 3: t->p < t->end ? (void)t->p++ : (void)(t->bad = 1); break;
	case 4: case 5: case 6: tr_varint(t); break;
	case 7:
		if (t->end - t->p < 8)
			t->bad = 1;
		else
			t->p += 8;
		break;
	case 8: tr_bytes(t, &p, &n); break;
	case 9: case 10:
		k = tr_list(t, &e);
		if (++t->depth > MAX_DEPTH)
			t->bad = 1;
		for (uint64_t i = 0; i < k && !t->bad; i++)
			tr_skip(t, e == 1 || e == 2 ? 3 : e);   /* bools in lists are bytes */
		t->depth--;
		break;
	case 11:
		k = tr_varint(t);
		kv = k && t->p < t->end ? *t->p++ : 0;
		if (k > (uint64_t)(t->end - t->p) || ++t->depth > MAX_DEPTH)
			t->bad = 1;
		for (uint64_t i = 0; i < k && !t->bad; i++) {
			tr_skip(t, (kv >> 4) == 1 || (kv >> 4) == 2 ? 3 : kv >> 4);
			tr_skip(t, (kv & 15) == 1 || (kv & 15) == 2 ? 3 : kv & 15);
		}
		t->depth--;
		break;
	case 12: tr_skip_struct(t); break;
	default: t->bad = 1;
	}
}

/* ---- the footer */

typedef struct leaf {
	char path[256];
	int type, max_def, max_rep;
} leaf;

typedef struct chunk {
	int type, codec;
	int64_t num_values, start, size;
} chunk;

struct pq_file {
	mfile m;
	const uint8_t *buf;
	size_t size;
	char *name;
	leaf *leaves;
	int n_leaves, n_rg;
	int64_t num_rows, *rg_rows;
	chunk *chunks;               /* (n_rg, n_leaves) */
	struct libdeflate_decompressor *gz;
};

typedef struct schema_el {
	int type, repetition, num_children;
	const uint8_t *name;
	size_t name_n;
} schema_el;

static void read_schema_el(tr *t, schema_el *s)
{
	int id = 0, type;
	*s = (schema_el){.type = -1, .repetition = REQUIRED};
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 5)
			s->type = (int)tr_int(t);
		else if (id == 3 && type == 5)
			s->repetition = (int)tr_int(t);
		else if (id == 4 && type == 8)
			tr_bytes(t, &s->name, &s->name_n);
		else if (id == 5 && type == 5)
			s->num_children = (int)tr_int(t);
		else
			tr_skip(t, type);
	}
}

/* Leaves under element i (the root when i is 0): their paths and levels.
 * Returns the index after i's subtree, or -1. */
static int walk(pq_file *f, const schema_el *el, int n, int i, const char *prefix, int def,
		int rep, int depth)
{
	if (i >= n || depth > MAX_DEPTH)
		return -1;
	const schema_el *s = &el[i];
	char path[256];
	if (i == 0) {
		path[0] = 0;
	} else {
		if (s->repetition < REQUIRED || s->repetition > REPEATED)
			return -1;
		def += s->repetition != REQUIRED;
		rep += s->repetition == REPEATED;
		if (snprintf(path, sizeof path, "%s%s%.*s", prefix, prefix[0] ? "." : "",
			     (int)s->name_n, (const char *)s->name) >= (int)sizeof path)
			return -1;
	}
	if (s->num_children <= 0 && i > 0) {
		leaf *nl = realloc(f->leaves, (size_t)(f->n_leaves + 1) * sizeof *nl);
		if (nl == NULL)
			return -1;
		f->leaves = nl;
		leaf *l = &f->leaves[f->n_leaves++];
		snprintf(l->path, sizeof l->path, "%s", path);
		l->type = s->type;
		l->max_def = def;
		l->max_rep = rep;
		return i + 1;
	}
	int next = i + 1;
	for (int c = 0; c < s->num_children && next >= 0; c++)
		next = walk(f, el, n, next, path, def, rep, depth + 1);
	return next;
}

static int read_schema(pq_file *f, tr *t)
{
	int e;
	uint64_t n = tr_list(t, &e);
	if (t->bad || e != 12 || n == 0 || n > (1u << 20))
		return -1;
	schema_el *el = calloc(n, sizeof *el);
	if (el == NULL)
		return -1;
	for (uint64_t i = 0; i < n && !t->bad; i++)
		read_schema_el(t, &el[i]);
	int rc = !t->bad && walk(f, el, (int)n, 0, "", 0, 0, 0) == (int)n ? 0 : -1;
	free(el);
	return rc;
}

static void read_column_meta(tr *t, chunk *c)
{
	int id = 0, type;
	int64_t data = -1, dict = -1;
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 5)
			c->type = (int)tr_int(t);
		else if (id == 4 && type == 5)
			c->codec = (int)tr_int(t);
		else if (id == 5 && type == 6)
			c->num_values = tr_int(t);
		else if (id == 7 && type == 6)
			c->size = tr_int(t);
		else if (id == 9 && type == 6)
			data = tr_int(t);
		else if (id == 11 && type == 6)
			dict = tr_int(t);
		else
			tr_skip(t, type);
	}
	c->start = dict > 0 && dict < data ? dict : data;
}

static int read_column_chunk(tr *t, chunk *c)
{
	int id = 0, type, have = 0;
	*c = (chunk){.type = -1, .start = -1, .size = -1};
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 8) {
			const uint8_t *p;
			size_t n;
			tr_bytes(t, &p, &n);
			if (n)
				return -2; /* in another file */
		} else if (id == 3 && type == 12) {
			read_column_meta(t, c);
			have = 1;
		} else {
			tr_skip(t, type);
		}
	}
	return have && !t->bad ? 0 : -1;
}

static int read_row_group(pq_file *f, tr *t, int rg, titan_err *err)
{
	int id = 0, type, e;
	f->rg_rows[rg] = -1;
	int got = 0;
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 9) {
			uint64_t n = tr_list(t, &e);
			if (t->bad || e != 12 || n != (uint64_t)f->n_leaves)
				return err_set(err, "%s: row group %d has %llu column chunks for %d "
					       "columns", f->name, rg, (unsigned long long)n, f->n_leaves);
			for (uint64_t i = 0; i < n; i++) {
				int rc = read_column_chunk(t, &f->chunks[(size_t)rg * f->n_leaves + i]);
				if (rc == -2)
					return err_set(err, "%s: column %s is in another file (not read)",
						       f->name, f->leaves[i].path);
				if (rc != 0)
					return err_set(err, "%s: row group %d: bad column chunk", f->name,
						       rg);
			}
			got = 1;
		} else if (id == 3 && type == 6) {
			f->rg_rows[rg] = tr_int(t);
		} else {
			tr_skip(t, type);
		}
	}
	if (t->bad || !got || f->rg_rows[rg] < 0)
		return err_set(err, "%s: row group %d: damaged metadata", f->name, rg);
	return 0;
}

static int read_footer(pq_file *f, titan_err *err)
{
	if (f->size < 12 || memcmp(f->buf, "PAR1", 4) || memcmp(f->buf + f->size - 4, "PAR1", 4))
		return err_set(err, "%s: not a Parquet file (no PAR1 magic at both ends; an "
			       "encrypted footer is not read)", f->name);
	const uint8_t *q = f->buf + f->size - 8;
	uint32_t len = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
		       (uint32_t)q[3] << 24;
	if (len > f->size - 12 || len > PQ_MAX_FOOTER)
		return err_set(err, "%s: footer of %u bytes in a file of %zu", f->name, len, f->size);
	tr t = {.p = q - len, .end = q};
	int id = 0, type, e, schema = 0, groups = 0;
	while (!t.bad && (type = tr_field(&t, &id)) != 0) {
		if (id == 2 && type == 9) {
			if (read_schema(f, &t) != 0)
				return err_set(err, "%s: unreadable schema", f->name);
			schema = 1;
		} else if (id == 3 && type == 6) {
			f->num_rows = tr_int(&t);
		} else if (id == 4 && type == 9 && schema) {
			uint64_t n = tr_list(&t, &e);
			if (t.bad || e != 12 || n > (1u << 20))
				return err_set(err, "%s: bad row group list", f->name);
			f->n_rg = (int)n;
			f->rg_rows = calloc(n ? n : 1, sizeof *f->rg_rows);
			f->chunks = calloc(n ? n * (size_t)f->n_leaves : 1, sizeof *f->chunks);
			if (f->rg_rows == NULL || f->chunks == NULL)
				return err_set(err, "%s: out of memory", f->name);
			for (int rg = 0; rg < f->n_rg; rg++)
				if (read_row_group(f, &t, rg, err) != 0)
					return -1;
			groups = 1;
		} else {
			tr_skip(&t, type);
		}
	}
	if (t.bad || !schema || !groups)
		return err_set(err, "%s: damaged footer (FileMetaData)", f->name);
	return 0;
}

static pq_file *open_common(pq_file *f, titan_err *err)
{
	if (read_footer(f, err) != 0) {
		pq_close(f);
		return NULL;
	}
	return f;
}

pq_file *pq_open_memory(const uint8_t *buf, size_t size, const char *name, titan_err *err)
{
	pq_file *f = calloc(1, sizeof *f);
	if (f == NULL || (f->name = strdup(name)) == NULL) {
		free(f);
		err_set(err, "out of memory");
		return NULL;
	}
	f->m.fd = -1;
	f->buf = buf;
	f->size = size;
	return open_common(f, err);
}

pq_file *pq_open(const char *path, titan_err *err)
{
	pq_file *f = calloc(1, sizeof *f);
	if (f == NULL || (f->name = strdup(path)) == NULL) {
		free(f);
		err_set(err, "out of memory");
		return NULL;
	}
	f->m.fd = -1;
	if (mfile_open(&f->m, path, err) != 0) {
		free(f->name);
		free(f);
		return NULL;
	}
	f->buf = f->m.data;
	f->size = f->m.size;
	return open_common(f, err);
}

void pq_close(pq_file *f)
{
	if (f == NULL)
		return;
	if (f->m.fd >= 0)
		mfile_close(&f->m);
	if (f->gz)
		libdeflate_free_decompressor(f->gz);
	free(f->leaves);
	free(f->rg_rows);
	free(f->chunks);
	free(f->name);
	free(f);
}

int64_t pq_num_rows(const pq_file *f)
{
	return f->num_rows;
}

int pq_num_row_groups(const pq_file *f)
{
	return f->n_rg;
}

int64_t pq_row_group_rows(const pq_file *f, int rg)
{
	return rg >= 0 && rg < f->n_rg ? f->rg_rows[rg] : -1;
}

int pq_column(const pq_file *f, const char *path)
{
	for (int i = 0; i < f->n_leaves; i++)
		if (strcmp(f->leaves[i].path, path) == 0)
			return i;
	return -1;
}

/* ---- pages */

typedef struct page {
	int type, n_values, encoding, def_len, rep_len, compressed;
	int64_t usize, csize;
} page;

static void read_data_header(tr *t, page *pg, int v2)
{
	int id = 0, type;
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 5)
			pg->n_values = (int)tr_int(t);
		else if (!v2 && id == 2 && type == 5)
			pg->encoding = (int)tr_int(t);
		else if (v2 && id == 4 && type == 5)
			pg->encoding = (int)tr_int(t);
		else if (v2 && id == 5 && type == 5)
			pg->def_len = (int)tr_int(t);
		else if (v2 && id == 6 && type == 5)
			pg->rep_len = (int)tr_int(t);
		else if (v2 && id == 7 && (type == 1 || type == 2))
			pg->compressed = type == 1;
		else
			tr_skip(t, type);
	}
}

static int read_page_header(tr *t, page *pg)
{
	int id = 0, type;
	*pg = (page){.type = -1, .usize = -1, .csize = -1, .compressed = 1};
	while (!t->bad && (type = tr_field(t, &id)) != 0) {
		if (id == 1 && type == 5)
			pg->type = (int)tr_int(t);
		else if (id == 2 && type == 5)
			pg->usize = tr_int(t);
		else if (id == 3 && type == 5)
			pg->csize = tr_int(t);
		else if ((id == 5 || id == 7 || id == 8) && type == 12)
			read_data_header(t, pg, id == 8);
		else
			tr_skip(t, type);
	}
	return t->bad || pg->usize < 0 || pg->csize < 0 || pg->n_values < 0 ? -1 : 0;
}

static const char *codec_name(int c)
{
	static const char *const n[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4",
					"ZSTD", "LZ4_RAW"};
	return c >= 0 && c < 8 ? n[c] : "unknown";
}

/* in[0..n) into out[0..usize), per the column's codec. */
static int decompress(pq_file *f, int codec, const uint8_t *in, size_t n, uint8_t *out,
		      size_t usize, const char *col, titan_err *err)
{
	size_t got = 0;
	switch (codec) {
	case CODEC_NONE:
		if (n != usize)
			break;
		memcpy(out, in, n);
		return 0;
	case CODEC_SNAPPY: /* a raw block, no framing; libsnappy checks it whole */
		got = usize;
		if (snappy_validate_compressed_buffer((const char *)in, n) == SNAPPY_OK &&
		    snappy_uncompressed_length((const char *)in, n, &got) == SNAPPY_OK &&
		    got == usize && snappy_uncompress((const char *)in, n, (char *)out, &got) == SNAPPY_OK &&
		    got == usize)
			return 0;
		break;
	case CODEC_GZIP:
		if (f->gz == NULL && (f->gz = libdeflate_alloc_decompressor()) == NULL)
			return err_set(err, "%s: out of memory", f->name);
		if (libdeflate_gzip_decompress(f->gz, in, n, out, usize, &got) == LIBDEFLATE_SUCCESS &&
		    got == usize)
			return 0;
		break;
	case CODEC_ZSTD:
		got = ZSTD_decompress(out, usize, in, n);
		if (!ZSTD_isError(got) && got == usize)
			return 0;
		break;
	default:
		return err_set(err, "%s: column %s: codec %s is not read (SNAPPY, GZIP, ZSTD or "
			       "none)", f->name, col, codec_name(codec));
	}
	return err_set(err, "%s: column %s: a %s page does not decompress to its %zu bytes",
		       f->name, col, codec_name(codec), usize);
}

/* count values of the RLE/bit-packed hybrid at bit width bw from [*p, end). */
static int hybrid(const uint8_t **pp, const uint8_t *end, int bw, uint32_t *out, size_t count)
{
	const uint8_t *p = *pp;
	tr t = {.p = p, .end = end};
	size_t i = 0;
	if (bw < 0 || bw > 32)
		return -1;
	while (i < count) {
		uint64_t h = tr_varint(&t);
		if (t.bad)
			return -1;
		if (h & 1) {
			uint64_t groups = h >> 1, bytes = groups * (uint64_t)bw;
			if (groups > (uint64_t)(end - t.p) || bytes > (uint64_t)(end - t.p))
				return -1;
			uint64_t nv = groups * 8;
			for (uint64_t k = 0; k < nv && i < count; k++, i++) {
				uint64_t v = 0, bit = k * (uint64_t)bw;
				for (int b = 0; b < bw; b++, bit++)
					v |= (uint64_t)((t.p[bit >> 3] >> (bit & 7)) & 1) << b;
				out[i] = (uint32_t)v;
			}
			t.p += bytes;
		} else {
			uint64_t run = h >> 1;
			int vb = (bw + 7) / 8;
			if (end - t.p < vb)
				return -1;
			uint32_t v = 0;
			for (int b = 0; b < vb; b++)
				v |= (uint32_t)t.p[b] << (8 * b);
			t.p += vb;
			for (uint64_t k = 0; k < run && i < count; k++, i++)
				out[i] = v;
		}
	}
	*pp = t.p;
	return 0;
}

static int bit_width(int max)
{
	int w = 0;
	while (max >> w)
		w++;
	return w;
}

/* A value: its bytes (BYTE_ARRAY) or its 4 / 8 bytes (INT32 / INT64). */
typedef struct val {
	const uint8_t *p;
	size_t n;
} val;

/* n PLAIN values from [*pp, end). */
static int plain(const uint8_t **pp, const uint8_t *end, int type, val *out, size_t n)
{
	const uint8_t *p = *pp;
	for (size_t i = 0; i < n; i++) {
		size_t len = type == T_INT32 ? 4 : 8;
		if (type == T_BYTE_ARRAY) {
			if (end - p < 4)
				return -1;
			len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
			p += 4;
		}
		if ((size_t)(end - p) < len)
			return -1;
		out[i] = (val){p, len};
		p += len;
	}
	*pp = p;
	return 0;
}

/* What one column chunk's reading keeps between pages. */
typedef struct col_state {
	pq_file *f;
	const leaf *lf;
	const chunk *ch;
	pq_values *out;
	size_t cap, used;       /* out->buf's size and the bytes in it */
	int64_t row;            /* rows started */
	uint8_t **bufs;         /* decompressed pages the dictionary points into */
	size_t n_bufs;
	val *dict;
	size_t n_dict;
	int have_dict;
} col_state;

static int put_value(col_state *s, int64_t row, val v, titan_err *err)
{
	pq_values *o = s->out;
	char num[24];
	if (s->lf->type != T_BYTE_ARRAY) { /* integers as decimal text */
		uint64_t u = 0;
		for (size_t b = 0; b < v.n; b++)
			u |= (uint64_t)v.p[b] << (8 * b);
		int64_t x = v.n == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
		v.n = (size_t)snprintf(num, sizeof num, "%lld", (long long)x);
		v.p = (const uint8_t *)num;
	}
	size_t at = s->used;
	if (at + v.n + 1 > s->cap) {
		size_t cap = (at + v.n + 1) * 2;
		uint8_t *nb = realloc(o->buf, cap);
		if (nb == NULL)
			return err_set(err, "%s: out of memory", s->f->name);
		o->buf = nb;
		s->cap = cap;
	}
	memcpy(o->buf + at, v.p, v.n);
	o->buf[at + v.n] = 0;
	o->off[row] = at;
	o->len[row] = v.n;
	o->present[row] = 1;
	s->used = at + v.n + 1;
	return 0;
}

/* A data page's levels and values, assembled into rows. */
static int data_page(col_state *s, const page *pg, const uint8_t *lv, const uint8_t *lv_end,
		     const uint8_t *vals, const uint8_t *end, titan_err *err)
{
	const leaf *lf = s->lf;
	size_t n = (size_t)pg->n_values;
	uint32_t *rep = calloc(n ? n : 1, sizeof *rep), *def = calloc(n ? n : 1, sizeof *def);
	uint32_t *idx = NULL;
	val *v = NULL;
	int rc = -1;
	const char *why = "damaged levels";
	if (rep == NULL || def == NULL)
		goto out;
	for (int k = 0; k < 2; k++) { /* repetition levels, then definition levels */
		int max = k ? lf->max_def : lf->max_rep;
		uint32_t *dst = k ? def : rep;
		if (max == 0)
			continue;
		const uint8_t *p = lv, *e = lv_end;
		if (pg->type == PAGE_DATA) { /* v1: a u32 length before each */
			if (lv_end - lv < 4)
				goto out;
			uint32_t len = (uint32_t)lv[0] | (uint32_t)lv[1] << 8 | (uint32_t)lv[2] << 16 |
				       (uint32_t)lv[3] << 24;
			p = lv + 4;
			if (len > (size_t)(lv_end - p))
				goto out;
			e = p + len;
		} else {
			size_t len = (size_t)(k ? pg->def_len : pg->rep_len);
			if (len > (size_t)(lv_end - lv))
				goto out;
			e = lv + len;
		}
		if (hybrid(&p, e, bit_width(max), dst, n) != 0)
			goto out;
		for (size_t i = 0; i < n; i++)
			if (dst[i] > (uint32_t)max)
				goto out;
		lv = e;
	}
	if (pg->type == PAGE_DATA)
		vals = lv;
	size_t nv = 0;
	for (size_t i = 0; i < n; i++)
		nv += lf->max_def == 0 || def[i] == (uint32_t)lf->max_def;
	why = "damaged values";
	if ((v = calloc(nv ? nv : 1, sizeof *v)) == NULL)
		goto out;
	if (pg->encoding == ENC_PLAIN) {
		if (plain(&vals, end, lf->type, v, nv) != 0)
			goto out;
	} else if (pg->encoding == ENC_PLAIN_DICT || pg->encoding == ENC_RLE_DICT) {
		if (!s->have_dict) {
			why = "dictionary-encoded values without a dictionary page";
			goto out;
		}
		if ((idx = calloc(nv ? nv : 1, sizeof *idx)) == NULL || (nv && vals >= end))
			goto out;
		int bw = nv ? *vals++ : 0;
		if (hybrid(&vals, end, bw, idx, nv) != 0)
			goto out;
		for (size_t i = 0; i < nv; i++) {
			if (idx[i] >= s->n_dict)
				goto out;
			v[i] = s->dict[idx[i]];
		}
	} else {
		rc = err_set(err, "%s: column %s: value encoding %d is not read (PLAIN or a "
			     "dictionary)", s->f->name, lf->path, pg->encoding);
		why = NULL;
		goto out;
	}
	size_t vi = 0;
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		if (lf->max_rep == 0 || rep[i] == 0) { /* a new row */
			if (s->row >= s->out->n) {
				why = "more rows than the row group has";
				goto out;
			}
			s->row++;
			first = 1;
		} else if (s->row == 0) {
			goto out;
		}
		int has = lf->max_def == 0 || def[i] == (uint32_t)lf->max_def;
		if (has && first && put_value(s, s->row - 1, v[vi], err) != 0) {
			why = NULL;
			goto out;
		}
		vi += has;
		first = 0;
	}
	rc = 0;
out:
	if (rc != 0 && why != NULL)
		rc = err_set(err, "%s: column %s: %s in a data page", s->f->name, lf->path, why);
	free(rep);
	free(def);
	free(idx);
	free(v);
	return rc;
}

static int dict_page(col_state *s, const page *pg, uint8_t *buf, titan_err *err)
{
	if (s->have_dict)
		return err_set(err, "%s: column %s: a second dictionary page", s->f->name, s->lf->path);
	size_t n = (size_t)pg->n_values;
	if ((s->dict = calloc(n ? n : 1, sizeof *s->dict)) == NULL)
		return err_set(err, "%s: out of memory", s->f->name);
	const uint8_t *p = buf;
	if (plain(&p, buf + pg->usize, s->lf->type, s->dict, n) != 0)
		return err_set(err, "%s: column %s: damaged dictionary page", s->f->name,
			       s->lf->path);
	s->n_dict = n;
	s->have_dict = 1;
	return 0;
}

/* One page at *pos of the chunk ending at end. */
static int one_page(col_state *s, int64_t *pos, int64_t end, titan_err *err)
{
	pq_file *f = s->f;
	const char *col = s->lf->path;
	tr t = {.p = f->buf + *pos, .end = f->buf + end};
	page pg;
	if (read_page_header(&t, &pg) != 0)
		return err_set(err, "%s: column %s: damaged page header at offset %lld", f->name, col,
			       (long long)*pos);
	const uint8_t *body = t.p;
	if (pg.csize > (f->buf + end) - body || pg.usize > PQ_MAX_PAGE || pg.n_values > MAX_SLOTS)
		return err_set(err, "%s: column %s: a page of %lld bytes (%lld stored, %d values) "
			       "does not fit", f->name, col, (long long)pg.usize, (long long)pg.csize,
			       pg.n_values);
	*pos = (body - f->buf) + pg.csize;
	if (pg.type == PAGE_INDEX)
		return 0;
	if (pg.type != PAGE_DICT && pg.type != PAGE_DATA && pg.type != PAGE_DATA_V2)
		return err_set(err, "%s: column %s: page type %d", f->name, col, pg.type);
	size_t lv = 0; /* v2: the levels, stored uncompressed before the values */
	if (pg.type == PAGE_DATA_V2) {
		if (pg.def_len < 0 || pg.rep_len < 0 ||
		    (int64_t)pg.def_len + pg.rep_len > pg.csize || (int64_t)pg.def_len + pg.rep_len > pg.usize)
			return err_set(err, "%s: column %s: bad level lengths", f->name, col);
		lv = (size_t)pg.def_len + (size_t)pg.rep_len;
	}
	uint8_t *buf = malloc((size_t)pg.usize + 1);
	if (buf == NULL)
		return err_set(err, "%s: out of memory", f->name);
	memcpy(buf, body, lv);
	int rc = pg.type == PAGE_DATA_V2 && !pg.compressed
		 ? decompress(f, CODEC_NONE, body + lv, (size_t)pg.csize - lv, buf + lv,
			      (size_t)pg.usize - lv, col, err)
		 : decompress(f, s->ch->codec, body + lv, (size_t)pg.csize - lv, buf + lv,
			      (size_t)pg.usize - lv, col, err);
	if (rc == 0 && pg.type == PAGE_DICT)
		rc = dict_page(s, &pg, buf, err);
	else if (rc == 0 && pg.type == PAGE_DATA)
		rc = data_page(s, &pg, buf, buf + pg.usize, NULL, buf + pg.usize, err);
	else if (rc == 0)
		rc = data_page(s, &pg, buf, buf + lv, buf + lv, buf + pg.usize, err);
	if (pg.type != PAGE_DICT) { /* data pages' values were copied out */
		free(buf);
		return rc;
	}
	uint8_t **nb = realloc(s->bufs, (s->n_bufs + 1) * sizeof *nb);
	if (nb == NULL) {
		free(buf);
		return rc ? rc : err_set(err, "%s: out of memory", f->name);
	}
	s->bufs = nb;
	s->bufs[s->n_bufs++] = buf; /* the dictionary's values point into it */
	return rc;
}

int pq_read(pq_file *f, int rg, int col, pq_values *out, titan_err *err)
{
	memset(out, 0, sizeof *out);
	if (rg < 0 || rg >= f->n_rg || col < 0 || col >= f->n_leaves)
		return err_set(err, "%s: no row group %d or column %d", f->name, rg, col);
	const leaf *lf = &f->leaves[col];
	const chunk *ch = &f->chunks[(size_t)rg * f->n_leaves + col];
	if (lf->type != T_BYTE_ARRAY && lf->type != T_INT32 && lf->type != T_INT64)
		return err_set(err, "%s: column %s: physical type %d is not read (BYTE_ARRAY, "
			       "INT32, INT64)", f->name, lf->path, lf->type);
	int64_t rows = f->rg_rows[rg];
	if (ch->start < 4 || ch->size < 0 || ch->start > (int64_t)f->size - 8 ||
	    ch->size > (int64_t)f->size - 8 - ch->start || rows > MAX_SLOTS)
		return err_set(err, "%s: column %s: chunk at %lld, %lld bytes, outside the file",
			       f->name, lf->path, (long long)ch->start, (long long)ch->size);
	out->n = rows;
	out->off = calloc(rows ? (size_t)rows : 1, sizeof *out->off);
	out->len = calloc(rows ? (size_t)rows : 1, sizeof *out->len);
	out->present = calloc(rows ? (size_t)rows : 1, 1);
	col_state s = {.f = f, .lf = lf, .ch = ch, .out = out};
	int rc = out->off && out->len && out->present ? 0 : err_set(err, "%s: out of memory", f->name);
	int64_t pos = ch->start, end = ch->start + ch->size;
	while (rc == 0 && pos < end && s.row < rows)
		rc = one_page(&s, &pos, end, err);
	if (rc == 0 && s.row != rows)
		rc = err_set(err, "%s: column %s: %lld rows in its pages, %lld in the row group",
			     f->name, lf->path, (long long)s.row, (long long)rows);
	for (size_t i = 0; i < s.n_bufs; i++)
		free(s.bufs[i]);
	free(s.bufs);
	free(s.dict);
	/* rows without a value point at an empty string */
	for (int64_t i = 0; rc == 0 && i < rows; i++)
		if (!out->present[i])
			out->off[i] = out->len[i] = 0;
	if (rc == 0 && out->buf == NULL && (out->buf = calloc(1, 1)) == NULL)
		rc = err_set(err, "%s: out of memory", f->name);
	if (rc != 0)
		pq_values_free(out);
	return rc;
}

void pq_values_free(pq_values *v)
{
	free(v->buf);
	free(v->off);
	free(v->len);
	free(v->present);
	memset(v, 0, sizeof *v);
}
