/* load.c: reading DCP folders, with read planning for any target chunking:
 * a wanted box is filled from every saved chunk that overlaps it. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/bigmem.h"
#include "dcp/dcp_priv.h"

int dcp_open(dcp_ckpt *c, const char *dir, titan_err *err)
{
	memset(c, 0, sizeof *c);
	c->dir = strdup(dir);
	c->files = calloc(1, sizeof *c->files);
	char *mp = path_join(dir, ".metadata");
	if (!c->dir || !c->files || !mp) {
		free(mp);
		dcp_close(c);
		return err_set(err, "out of memory");
	}
	mfile m;
	int rc = mfile_open(&m, mp, err);
	if (rc == 0) {
		rc = dcp_meta_parse(c, m.data, m.size, err);
		if (rc)
			err_prefix(err, "%s", mp);
		mfile_close(&m);
	}
	free(mp);
	if (rc)
		dcp_close(c);
	return rc;
}

void dcp_close(dcp_ckpt *c)
{
	for (size_t i = 0; i < c->n; i++)
		dcp_entry_free(&c->entries[i]);
	free(c->entries);
	if (c->files) {
		for (size_t i = 0; i < c->files->n; i++) {
			free(c->files->f[i].name);
			mfile_close(&c->files->f[i].m);
		}
		free(c->files->f);
		free(c->files);
	}
	if (c->index)
		strmap_free(c->index);
	free(c->index);
	free(c->dir);
	free(c->version);
	memset(c, 0, sizeof *c);
}

const dcp_entry *dcp_find(const dcp_ckpt *c, const char *fqn)
{
	size_t i;
	return c->index && strmap_get(c->index, fqn, &i) ? &c->entries[i] : NULL;
}

int dcp_file_slice(dcp_ckpt *c, const char *file, uint64_t off, uint64_t len,
		   const uint8_t **p, titan_err *err)
{
	struct dcp_files *fs = c->files;
	struct dcp_file *f = NULL;
	for (size_t i = 0; i < fs->n && !f; i++)
		if (!strcmp(fs->f[i].name, file))
			f = &fs->f[i];
	if (!f) {
		if (fs->n == fs->cap) {
			size_t cap = fs->cap ? fs->cap * 2 : 8;
			struct dcp_file *nf = realloc(fs->f, cap * sizeof *nf);
			if (!nf)
				return err_set(err, "out of memory");
			fs->f = nf;
			fs->cap = cap;
		}
		char *path = path_join(c->dir, file);
		if (!path)
			return err_set(err, "out of memory");
		f = &fs->f[fs->n];
		int rc = mfile_open(&f->m, path, err);
		free(path);
		if (rc)
			return -1;
		f->name = strdup(file);
		if (!f->name) {
			mfile_close(&f->m);
			return err_set(err, "out of memory");
		}
		/* Storage is read with pread (read_blocks, read_part); through the
		 * mapping go the zip headers of each chunk.  Readahead on a
		 * header's page fault would read megabytes of storage
		 * synchronously, one chunk after another, before the parallel
		 * pass. */
		mfile_advise_random(&f->m);
		fs->n++;
	}
	if (off > f->m.size || len > f->m.size - off)
		return err_set(err, "%s/%s: item at %" PRIu64 "+%" PRIu64 " runs past the end (%zu bytes)",
			       c->dir, file, off, len, f->m.size);
	*p = f->m.data + off;
	return 0;
}

/* The tensor stored for one chunk; checks dtype and shape against .metadata
 * and the CRC-32 of every record but the storage's, which the caller checks
 * as it reads the storage (check_storage, or read_blocks while it reads).
 * Loading and titan-ckpt-convert verify both come through here, so the
 * trainer refuses what verify refuses. */
static int open_chunk(dcp_ckpt *c, const dcp_entry *e, const dcp_chunk *ch, ptz_reader *z,
		      ptz_tensor *t, titan_err *err)
{
	const uint8_t *p;
	if (dcp_file_slice(c, ch->file, ch->offset, ch->length, &p, err))
		return -1;
	int rc = ptz_open(z, p, ch->length, err);
	/* data.pkl and the small records first: a damaged pickle is then named
	 * as damage, not as a strange tensor */
	for (size_t j = 0; rc == 0 && j < z->n_entries; j++)
		if (!strstr(z->entries[j].name, "/data/"))
			rc = ptz_check_crc(z, &z->entries[j], err);
	if (rc == 0)
		rc = ptz_read_tensor(z, t, err);
	for (size_t j = 0; rc == 0 && j < z->n_entries; j++)
		if (strstr(z->entries[j].name, "/data/") && &z->entries[j] != t->entry)
			rc = ptz_check_crc(z, &z->entries[j], err);
	if (rc) {
		ptz_close(z);
		return err_prefix(err, "%s/%s at %" PRIu64 " (%s)", c->dir, ch->file, ch->offset, e->fqn);
	}
	int ok = t->dtype == e->dtype && t->ndim == e->ndim;
	for (int d = 0; ok && d < e->ndim; d++)
		ok = t->shape[d] == ch->sizes[d];
	if (!ok) {
		ptz_close(z);
		return err_set(err, "%s/%s at %" PRIu64 ": %s: stored tensor's dtype or shape differs from .metadata",
			       c->dir, ch->file, ch->offset, e->fqn);
	}
	return 0;
}

/* The CRC-32 of a chunk's storage record, read from the mapping. */
static int check_storage(const dcp_ckpt *c, const dcp_entry *e, const dcp_chunk *ch,
			 const ptz_reader *z, const ptz_tensor *t, titan_err *err)
{
	if (ptz_check_crc(z, t->entry, err))
		return err_prefix(err, "%s/%s at %" PRIu64 " (%s)", c->dir, ch->file, ch->offset, e->fqn);
	return 0;
}

/* Copy the overlap of a stored chunk (t, at chunk offsets co) into the wanted
 * box (wo, ws) held row-major in out. */
static void copy_overlap(const ptz_tensor *t, const int64_t *co, const int64_t *wo,
			 const int64_t *ws, int nd, const int64_t *lo, const int64_t *hi,
			 void *out, dcp_dtype odt)
{
	size_t es = ptz_dtype_size(t->dtype), os = ptz_dtype_size(odt);
	if (nd == 0) {
		ptz_convert(out, odt, t->storage + (size_t)t->storage_offset * es, t->dtype, 1);
		return;
	}
	int64_t idx[DCP_MAX_DIM];
	for (int d = 0; d < nd; d++)
		idx[d] = lo[d];
	int last = nd - 1;
	int64_t run = hi[last] - lo[last];
	for (;;) {
		int64_t src = t->storage_offset, dst = 0;
		for (int d = 0; d < nd; d++) {
			src += (idx[d] - co[d]) * t->stride[d];
			dst = dst * ws[d] + (idx[d] - wo[d]);
		}
		if (t->stride[last] == 1 || run == 1) {
			ptz_convert((uint8_t *)out + (size_t)dst * os, odt, t->storage + (size_t)src * es,
				    t->dtype, (size_t)run);
		} else {
			for (int64_t k = 0; k < run; k++)
				ptz_convert((uint8_t *)out + (size_t)(dst + k) * os, odt,
					    t->storage + (size_t)(src + k * t->stride[last]) * es, t->dtype, 1);
		}
		int d = last - 1;
		for (; d >= 0; d--) {
			if (++idx[d] < hi[d])
				break;
			idx[d] = lo[d];
		}
		if (d < 0)
			break;
	}
}

/* Reading a block of a data file into memory with several reads in flight.
 * One pread at a time leaves the disk idle while the CRC-32 of what it brought
 * is computed, and the CRC idle while the disk works; pieces read by a few
 * threads at once keep both busy.  The pieces' CRCs are joined in file order.
 *
 * A piece is 32 MiB, read 1 MiB at a time with the CRC-32 of each MiB taken
 * straight after its read, while it is still in the cache (a whole piece is
 * not: it would be read from memory a second time).  On this project's VM,
 * whose disk has an 8 MiB readahead window, a 1 GiB load alternated 7 times
 * with each: 8 MiB pieces read whole 1.24-1.96 GB/s, 32 MiB read whole
 * 1.36-2.16, 32 MiB read by the MiB 1.39-2.93 (median 2.40 against 1.56):
 * a thread's later reads of a longer piece follow on, and the kernel reads
 * ahead of them while the thread checksums. */
#define READ_PIECE ((size_t)32 << 20)
#define READ_STEP ((size_t)1 << 20)
#define READ_THREADS 4

int dcp_pread_crc(int fd, uint8_t *dst, size_t len, off_t src, uint32_t *crc)
{
	*crc = 0;
	while (len > 0) {
		ssize_t k = pread(fd, dst, len < READ_STEP ? len : READ_STEP, src);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? READ_IO : READ_SHORT;
		*crc = ptz_crc32(*crc, dst, (size_t)k);
		dst += k;
		src += k;
		len -= (size_t)k;
	}
	return READ_OK;
}

/* The opened data file of that name, if it can be read with pread. */
static const struct dcp_file *file_of(const dcp_ckpt *c, const char *name)
{
	for (size_t i = 0; i < c->files->n; i++)
		if (!strcmp(c->files->f[i].name, name))
			return c->files->f[i].m.fd >= 0 ? &c->files->f[i] : NULL;
	return NULL;
}

/* One contiguous block of a data file that fills one contiguous block of the
 * output: a stored chunk read whole with pread, its storage record's CRC-32
 * computed on the way (plan_block decides, read_blocks reads); or, in a load
 * that shares the checks (dcp_load_parts), whole rows of it, a part of the
 * record whose CRC-32 is checked with the other ranks' parts. */
typedef struct block_read {
	const dcp_entry *e;
	const dcp_chunk *ch;
	int fd;
	uint8_t *dst;
	size_t len;
	off_t src;
	int part;            /* a part of the record: its bytes [part_off, + len) */
	uint64_t part_off;
	ptz_entry entry;     /* the storage record's size and crc32 (name: NULL) */
	char name[128];      /* its name, for messages (the reader's copy is freed) */
	int rc;              /* READ_* */
	int eno;             /* errno of a READ_IO */
	uint32_t crc;
} block_read;

/* The common case of a load with the saved sharding, or of a whole tensor
 * from any sharding (4 -> 1): the stored chunk, in the wanted dtype and
 * contiguous, fills one contiguous block of the output.  Then it is read with
 * pread straight into the output: one copy, kernel to caller, instead of page
 * faults on the mapping and a memcpy.  With parts (a shared load), whole rows
 * of the chunk (dim 0, as FSDP shards) may be wanted: they are such a block
 * too, a part of the record.  Returns 1 with *b filled when the chunk is such
 * a block, 0 otherwise. */
static int plan_block(dcp_ckpt *c, const dcp_entry *e, const dcp_chunk *ch, const ptz_tensor *t,
		      const int64_t *wo, const int64_t *ws, int nd, const int64_t *lo,
		      const int64_t *hi, void *out, dcp_dtype odt, int parts, block_read *b)
{
	if (t->dtype != odt || !ptz_tensor_contiguous(t) || nd == 0)
		return 0;
	int whole = lo[0] == ch->offsets[0] && hi[0] == ch->offsets[0] + ch->sizes[0];
	if (!whole && (!parts || strlen(ch->file) >= sizeof ((dcp_part *)0)->file))
		return 0; /* only part of the chunk is wanted: read_part */
	for (int d = 1; d < nd; d++) {
		if (lo[d] != ch->offsets[d] || hi[d] != ch->offsets[d] + ch->sizes[d])
			return 0; /* only part of each row is wanted */
		if (lo[d] != wo[d] || hi[d] != wo[d] + ws[d])
			return 0; /* the chunk's rows are not contiguous in the output */
	}
	const struct dcp_file *f = file_of(c, ch->file);
	if (!f)
		return 0;
	size_t es = ptz_dtype_size(odt);
	if (t->storage_offset != 0 || (size_t)dcp_numel(nd, ch->sizes) * es != t->entry->size)
		return 0; /* a view of a larger storage: read_part checks it whole */
	int64_t row = 1;
	for (int d = 1; d < nd; d++)
		row *= ws[d];
	size_t row_bytes = (size_t)row * es;
	memset(b, 0, sizeof *b);
	b->e = e;
	b->ch = ch;
	b->fd = f->m.fd;
	b->dst = (uint8_t *)out + (size_t)(lo[0] - wo[0]) * row_bytes;
	b->len = (size_t)(hi[0] - lo[0]) * row_bytes;
	b->part = !whole;
	b->part_off = (uint64_t)(lo[0] - ch->offsets[0]) * row_bytes;
	b->src = (off_t)(t->storage - f->m.data) + (off_t)b->part_off;
	b->entry = *t->entry;
	b->entry.name = NULL;
	snprintf(b->name, sizeof b->name, "%s", t->entry->name);
	return 1;
}

/* A piece of a block, read by whichever reader thread takes it next. */
typedef struct piece {
	block_read *b;
	size_t off, len;
	int rc, eno;
	uint32_t crc;
} piece;

typedef struct piece_queue {
	piece *p;
	size_t n;
	atomic_size_t next;
} piece_queue;

static void *reader(void *arg)
{
	piece_queue *q = arg;
	for (size_t j; (j = atomic_fetch_add(&q->next, 1)) < q->n;) {
		piece *p = &q->p[j];
		p->rc = dcp_pread_crc(p->b->fd, p->b->dst + p->off, p->len, p->b->src + (off_t)p->off, &p->crc);
		p->eno = errno;
	}
	return NULL;
}

/* Run reader on READ_THREADS threads, the caller's one of them.  Plain
 * threads rather than OpenMP's: they sleep in pread instead of spinning, which
 * matters when several ranks share the cores.  A thread that cannot start
 * leaves its share to the others. */
static void read_pieces(piece_queue *q)
{
	pthread_t t[READ_THREADS];
	int started = 0;
	for (int i = 1; i < READ_THREADS && (size_t)i < q->n; i++)
		if (pthread_create(&t[started], NULL, reader, q) == 0)
			started++;
	reader(q);
	for (int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
}

static int cmp_piece(const void *a, const void *b)
{
	const piece *x = a, *y = b;
	if (x->b->fd != y->b->fd)
		return x->b->fd < y->b->fd ? -1 : 1;
	off_t u = x->b->src + (off_t)x->off, v = y->b->src + (off_t)y->off;
	return u < v ? -1 : u > v;
}

/* Read the blocks, all their pieces in parallel (see READ_PIECE), and set
 * each block's rc and crc; READ_OK when all were read and match their CRC. */
static int read_blocks(block_read *b, size_t nb)
{
	size_t np = 0;
	for (size_t i = 0; i < nb; i++)
		np += (b[i].len + READ_PIECE - 1) / READ_PIECE;
	if (np == 0)
		return READ_OK;
	piece_queue q = {.p = calloc(np, sizeof *q.p), .n = np};
	if (!q.p) {
		b[0].rc = READ_IO;
		b[0].eno = ENOMEM;
		return READ_IO;
	}
	atomic_init(&q.next, 0);
	size_t k = 0;
	for (size_t i = 0; i < nb; i++)
		for (size_t o = 0; o < b[i].len; o += READ_PIECE)
			q.p[k++] = (piece){.b = &b[i], .off = o,
					   .len = b[i].len - o < READ_PIECE ? b[i].len - o : READ_PIECE};
	/* file by file, front to back: one sequential stream per file for the
	 * disk and its readahead, not every file at once (4 -> 1 resharding) */
	qsort(q.p, np, sizeof *q.p, cmp_piece);
	read_pieces(&q);
	/* the CRCs join in each block's order: pieces of a block are in file
	 * order, as the sort left them */
	for (size_t j = 0; j < np; j++) {
		block_read *r = q.p[j].b;
		if (r->rc == READ_OK && q.p[j].rc != READ_OK) {
			r->rc = q.p[j].rc;
			r->eno = q.p[j].eno;
		}
		r->crc = ptz_crc32_combine(r->crc, q.p[j].crc, q.p[j].len);
	}
	int res = READ_OK;
	for (size_t i = 0; i < nb; i++) {
		if (b[i].rc == READ_OK && !b[i].part && b[i].crc != b[i].entry.crc32)
			b[i].rc = READ_CRC;
		if (res == READ_OK)
			res = b[i].rc;
	}
	free(q.p);
	return res;
}

/* The message of the first block that failed. */
static int block_error(const dcp_ckpt *c, const block_read *b, size_t nb, titan_err *err)
{
	size_t i = 0;
	while (i < nb && b[i].rc == READ_OK)
		i++;
	if (i == nb)
		return err_set(err, "%s: read failed", c->dir);
	const dcp_entry *e = b[i].e;
	const dcp_chunk *ch = b[i].ch;
	if (b[i].rc == READ_IO) {
		errno = b[i].eno;
		return err_errno(err, "%s/%s: read", c->dir, ch->file);
	}
	if (b[i].rc == READ_SHORT)
		return err_set(err, "%s/%s: ends inside %s's storage (at %" PRIu64 "+%" PRIu64 ")", c->dir,
			       ch->file, e->fqn, ch->offset, ch->length);
	ptz_entry en = b[i].entry;
	en.name = (char *)b[i].name;
	ptz_crc_matches(&en, b[i].crc, err); /* the mismatch, in verify's words */
	return err_prefix(err, "%s/%s at %" PRIu64 " (%s)", c->dir, ch->file, ch->offset, e->fqn);
}

/* The blocks a load reads with pread, gathered over every item so that one
 * parallel pass reads them all: no item waits for the last piece of the one
 * before it. */
typedef struct block_list {
	block_read *b;
	size_t n, cap;
	dcp_parts *parts;  /* a shared load: the parts read go here */
	uint8_t *scratch;  /* read_part's buffer, kept for the next chunk */
	size_t scratch_cap;
} block_list;

/* A buffer of n bytes kept in l (NULL when n is 0 or memory runs out):
 * fresh pages for every chunk would cost a page fault per 4 KiB. */
static uint8_t *scratch(block_list *l, size_t n)
{
	if (n == 0)
		return NULL;
	if (n > l->scratch_cap) {
		free(l->scratch);
		l->scratch = bigmem_alloc(n);
		l->scratch_cap = l->scratch ? n : 0;
	}
	return l->scratch;
}

/* A stored chunk that plan_block cannot take (a part of it is wanted, or
 * converted, or strided): its whole storage record read into a scratch
 * buffer as read_blocks reads (pieces in parallel, the CRC-32 on the way:
 * it covers the record, even when only a part is wanted), then the overlap
 * with the wanted box copied out.  Without a file descriptor or the memory,
 * the mapping serves. */
static int read_part(dcp_ckpt *c, const dcp_entry *e, const dcp_chunk *ch, const ptz_reader *z,
		     const ptz_tensor *t, const int64_t *offsets, const int64_t *sizes,
		     const int64_t *lo, const int64_t *hi, void *out, dcp_dtype dtype, block_list *l,
		     titan_err *err)
{
	const struct dcp_file *f = file_of(c, ch->file);
	const uint8_t *rec = z->buf + t->entry->data_off;
	uint8_t *buf = scratch(l, f ? (size_t)t->entry->size : 0);
	if (!buf) {
		if (check_storage(c, e, ch, z, t, err))
			return -1;
		copy_overlap(t, ch->offsets, offsets, sizes, e->ndim, lo, hi, out, dtype);
		return 0;
	}
	block_read b = {.e = e, .ch = ch, .fd = f->m.fd, .dst = buf, .len = (size_t)t->entry->size,
			.src = (off_t)(rec - f->m.data), .entry = *t->entry};
	b.entry.name = NULL;
	snprintf(b.name, sizeof b.name, "%s", t->entry->name);
	int rc = read_blocks(&b, 1) == READ_OK ? 0 : block_error(c, &b, 1, err);
	if (rc == 0) {
		ptz_tensor copy = *t;
		copy.storage = buf + (t->storage - rec);
		copy_overlap(&copy, ch->offsets, offsets, sizes, e->ndim, lo, hi, out, dtype);
	}
	return rc;
}

/* The overlap of a chunk with the wanted box: its element count, lo and hi. */
static int64_t overlap(const dcp_entry *e, const dcp_chunk *ch, const int64_t *offsets,
		       const int64_t *sizes, int64_t *lo, int64_t *hi)
{
	int64_t n = 1;
	for (int d = 0; d < e->ndim; d++) {
		lo[d] = offsets[d] > ch->offsets[d] ? offsets[d] : ch->offsets[d];
		int64_t a = offsets[d] + sizes[d], b = ch->offsets[d] + ch->sizes[d];
		hi[d] = a < b ? a : b;
		n *= hi[d] > lo[d] ? hi[d] - lo[d] : 0;
	}
	return n;
}

static void block_list_free(block_list *l)
{
	free(l->b);
	free(l->scratch);
	memset(l, 0, sizeof *l);
}

static block_read *block_next(block_list *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		block_read *nb = realloc(l->b, cap * sizeof *nb);
		if (!nb)
			return NULL;
		l->b = nb;
		l->cap = cap;
	}
	return &l->b[l->n];
}

/* Fill the box (offsets, sizes) of entry e into out: the chunks that
 * plan_block takes are added to l to be read later, the others are read
 * from the mapping now. */
static int plan_region(dcp_ckpt *c, const dcp_entry *e, const int64_t *offsets,
		       const int64_t *sizes, dcp_dtype dtype, void *out, block_list *l,
		       titan_err *err)
{
	if (e->kind != DCP_TENSOR)
		return err_set(err, "%s: not a tensor", e->fqn);
	if (!ptz_dtype_size(dtype))
		return err_set(err, "%s: unknown target dtype", e->fqn);
	for (int d = 0; d < e->ndim; d++)
		if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] + sizes[d] > e->shape[d])
			return err_set(err, "%s: wanted box lies outside dim %d (size %" PRId64 ")", e->fqn, d,
				       e->shape[d]);
	int64_t want = dcp_numel(e->ndim, sizes), got = 0;
	if (want == 0)
		return 0;
	for (size_t k = 0; k < e->n_chunks; k++) {
		const dcp_chunk *ch = &e->chunks[k];
		int64_t lo[DCP_MAX_DIM], hi[DCP_MAX_DIM];
		int64_t n = overlap(e, ch, offsets, sizes, lo, hi);
		if (n == 0)
			continue;
		ptz_reader z;
		ptz_tensor t;
		if (open_chunk(c, e, ch, &z, &t, err))
			return -1;
		block_read *b = block_next(l);
		int rc = 0;
		if (!b)
			rc = err_set(err, "out of memory");
		else if (plan_block(c, e, ch, &t, offsets, sizes, e->ndim, lo, hi, out, dtype,
				    l->parts != NULL, b))
			l->n++;
		else
			rc = read_part(c, e, ch, &z, &t, offsets, sizes, lo, hi, out, dtype, l, err);
		ptz_close(&z);
		if (rc)
			return -1;
		got += n;
	}
	/* Chunks never overlap in a valid checkpoint (dcp_verify checks), so the
	 * count tells whether the box was covered. */
	if (got != want)
		return err_set(err, "%s: the checkpoint's chunks cover %" PRId64 " of the %" PRId64
			       " wanted elements", e->fqn, got, want);
	return 0;
}

/* Read the blocks planned; the message of the first that failed.  The parts
 * read are added to l->parts, to be checked with the other ranks'. */
static int read_planned(dcp_ckpt *c, block_list *l, titan_err *err)
{
	int rc = read_blocks(l->b, l->n) == READ_OK ? 0 : block_error(c, l->b, l->n, err);
	for (size_t i = 0; rc == 0 && i < l->n; i++) {
		const block_read *b = &l->b[i];
		if (!b->part)
			continue;
		dcp_part p = {.record = (uint64_t)(b->src - (off_t)b->part_off),
			      .record_len = b->entry.size, .off = b->part_off, .len = b->len,
			      .record_crc = b->entry.crc32, .crc = b->crc};
		snprintf(p.file, sizeof p.file, "%s", b->ch->file);
		rc = dcp_parts_add(l->parts, &p, b->ch->offset, b->e->fqn, b->name, err);
	}
	block_list_free(l);
	return rc;
}

int dcp_read_region(dcp_ckpt *c, const dcp_entry *e, const int64_t *offsets,
		    const int64_t *sizes, dcp_dtype dtype, void *out, titan_err *err)
{
	block_list l = {0};
	if (plan_region(c, e, offsets, sizes, dtype, out, &l, err)) {
		block_list_free(&l);
		return -1;
	}
	return read_planned(c, &l, err);
}

int dcp_read_bytes(dcp_ckpt *c, const dcp_entry *e, const uint8_t **p, size_t *n, titan_err *err)
{
	if (e->kind != DCP_BYTES || e->n_chunks != 1)
		return err_set(err, "%s: not a bytes item", e->fqn);
	const dcp_chunk *ch = &e->chunks[0];
	if (dcp_file_slice(c, ch->file, ch->offset, ch->length, p, err))
		return -1;
	*n = (size_t)ch->length;
	/* A value torch.save'd (every one titan and torchtitan write) has CRCs,
	 * checked here for the trainer and titan-ckpt-convert verify alike; raw
	 * bytes (torch writes an io.BytesIO as is) have none. */
	ptz_reader z;
	titan_err ignore;
	if (ptz_open(&z, *p, ch->length, &ignore))
		return 0;
	int rc = 0;
	for (size_t j = 0; j < z.n_entries && rc == 0; j++)
		rc = ptz_check_crc(&z, &z.entries[j], err);
	ptz_close(&z);
	if (rc)
		return err_prefix(err, "%s/%s at %" PRIu64 " (%s)", c->dir, ch->file, ch->offset, e->fqn);
	return 0;
}

int dcp_load_open(dcp_ckpt *ck, dcp_item *items, size_t n, titan_err *err)
{
	return dcp_load_parts(ck, items, n, NULL, err);
}

int dcp_load_parts(dcp_ckpt *ck, dcp_item *items, size_t n, dcp_parts *parts, titan_err *err)
{
	const char *dir = ck->dir;
	int rc = 0;
	block_list l = {.parts = parts};
	for (size_t i = 0; i < n && rc == 0; i++) {
		dcp_item *it = &items[i];
		it->found = 0;
		const dcp_entry *e = dcp_find(ck, it->fqn);
		if (!e) {
			if (!it->optional)
				rc = err_set(err, "%s: no key '%s' in the checkpoint", dir, it->fqn);
			continue;
		}
		if (e->kind != it->kind) {
			rc = err_set(err, "%s: '%s' is a %s in the checkpoint, wanted a %s", dir, it->fqn,
				     e->kind == DCP_BYTES ? "bytes item" : "tensor",
				     it->kind == DCP_BYTES ? "bytes item" : "tensor");
			continue;
		}
		if (e->kind == DCP_BYTES) {
			const uint8_t *p;
			size_t len;
			rc = dcp_read_bytes(ck, e, &p, &len, err);
			if (rc == 0) {
				it->bytes = malloc(len ? len : 1);
				if (!it->bytes)
					rc = err_set(err, "out of memory");
				else if (len)
					memcpy(it->bytes, p, len);
				it->nbytes = len;
			}
		} else {
			int same = e->ndim == it->ndim;
			for (int d = 0; same && d < e->ndim; d++)
				same = e->shape[d] == it->shape[d];
			if (!same) {
				char a[128] = "", b[128] = "";
				for (int d = 0; d < e->ndim; d++)
					snprintf(a + strlen(a), sizeof a - strlen(a), "%s%" PRId64, d ? ", " : "", e->shape[d]);
				for (int d = 0; d < it->ndim; d++)
					snprintf(b + strlen(b), sizeof b - strlen(b), "%s%" PRId64, d ? ", " : "", it->shape[d]);
				rc = err_set(err, "%s: '%s' has shape (%s) in the checkpoint, wanted (%s)", dir,
					     it->fqn, a, b);
				continue;
			}
			rc = plan_region(ck, e, it->offsets, it->sizes, it->dtype, it->data, &l, err);
		}
		if (rc == 0)
			it->found = 1;
	}
	if (rc == 0)
		rc = read_planned(ck, &l, err);
	block_list_free(&l);
	if (rc)
		for (size_t i = 0; i < n; i++)
			items[i].found = 0;
	return rc;
}

int dcp_load(const char *dir, dcp_item *items, size_t n, titan_err *err)
{
	dcp_ckpt c;
	if (dcp_open(&c, dir, err))
		return -1;
	int rc = dcp_load_open(&c, items, n, err);
	dcp_close(&c);
	return rc;
}

static int cmp_chunk_start(const void *a, const void *b, void *nd)
{
	const dcp_chunk *x = *(const dcp_chunk *const *)a, *y = *(const dcp_chunk *const *)b;
	for (int d = 0; d < *(int *)nd; d++)
		if (x->offsets[d] != y->offsets[d])
			return x->offsets[d] < y->offsets[d] ? -1 : 1;
	return 0;
}

/* Chunks cover a tensor exactly when their volumes add up to the tensor's and
 * no two overlap (pairwise, after sorting; chunk lists are short). */
static int check_cover(const dcp_entry *e, titan_err *err)
{
	int64_t total = 0;
	for (size_t k = 0; k < e->n_chunks; k++)
		total += dcp_numel(e->ndim, e->chunks[k].sizes);
	int64_t want = dcp_numel(e->ndim, e->shape);
	if (total != want)
		return err_set(err, "%s: chunks hold %" PRId64 " elements, the tensor %" PRId64, e->fqn,
			       total, want);
	const dcp_chunk **s = malloc((e->n_chunks ? e->n_chunks : 1) * sizeof *s);
	if (!s)
		return err_set(err, "out of memory");
	for (size_t k = 0; k < e->n_chunks; k++)
		s[k] = &e->chunks[k];
	int nd = e->ndim;
	qsort_r(s, e->n_chunks, sizeof *s, cmp_chunk_start, &nd);
	int rc = 0;
	for (size_t a = 0; a < e->n_chunks && rc == 0; a++) {
		for (size_t b = a + 1; b < e->n_chunks && rc == 0; b++) {
			int overlap = dcp_numel(nd, s[a]->sizes) > 0 && dcp_numel(nd, s[b]->sizes) > 0;
			for (int d = 0; d < nd && overlap; d++)
				overlap = s[a]->offsets[d] < s[b]->offsets[d] + s[b]->sizes[d] &&
					  s[b]->offsets[d] < s[a]->offsets[d] + s[a]->sizes[d];
			if (overlap)
				rc = err_set(err, "%s: chunks at different offsets overlap", e->fqn);
		}
	}
	free(s);
	return rc;
}

int dcp_verify(dcp_ckpt *c, titan_err *err)
{
	for (size_t i = 0; i < c->n; i++) {
		const dcp_entry *e = &c->entries[i];
		if (e->kind == DCP_BYTES) {
			const uint8_t *p;
			size_t n;
			pk_val *v;
			pk_arena *a;
			if (dcp_read_bytes(c, e, &p, &n, err))
				return -1;
			/* Byte items are torch.save streams of Python values. */
			int rc = dcp_value_load(p, n, &v, &a, err);
			pk_free(a);
			if (rc)
				return err_prefix(err, "%s/%s at %" PRIu64 " (%s)", c->dir, e->chunks[0].file,
						  e->chunks[0].offset, e->fqn);
			continue;
		}
		if (check_cover(e, err))
			return err_prefix(err, "%s", c->dir);
		for (size_t k = 0; k < e->n_chunks; k++) {
			ptz_reader z;
			ptz_tensor t;
			if (open_chunk(c, e, &e->chunks[k], &z, &t, err))
				return -1;
			int rc = check_storage(c, e, &e->chunks[k], &z, &t, err);
			ptz_close(&z);
			if (rc)
				return -1;
		}
	}
	return 0;
}

/* ---- step folders ---- */

static int step_of(const char *name, int64_t *step, int *partial)
{
	if (strncmp(name, "step-", 5) != 0)
		return -1;
	char *end;
	errno = 0;
	long long v = strtoll(name + 5, &end, 10);
	if (end == name + 5 || errno || v < 0)
		return -1;
	if (*end == 0)
		*partial = 0;
	else if (!strcmp(end, ".partial"))
		*partial = 1;
	else
		return -1;
	*step = v;
	return 0;
}

static int has_file(const char *dir, const char *name)
{
	char *p = path_join(dir, name);
	struct stat st;
	int ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
	free(p);
	return ok;
}

int dcp_is_hf_step(const char *dir)
{
	return !has_file(dir, ".metadata") && has_file(dir, "model.safetensors.index.json");
}

/* A complete step folder: a DCP checkpoint's .metadata, or (torchtitan's
 * last_save_in_hf) an HF safetensors index, both written last. */
static int has_metadata(const char *folder, const char *name)
{
	char *d = path_join(folder, name);
	int ok = d && (has_file(d, ".metadata") || has_file(d, "model.safetensors.index.json"));
	free(d);
	return ok;
}

int64_t dcp_latest_step(const char *folder, titan_err *err)
{
	DIR *d = opendir(folder);
	if (!d) {
		if (errno == ENOENT)
			return -1;
		err_errno(err, "%s", folder);
		return -2;
	}
	int64_t best = -1, s;
	int partial;
	struct dirent *de;
	while ((de = readdir(d)))
		if (step_of(de->d_name, &s, &partial) == 0 && !partial && s > best &&
		    has_metadata(folder, de->d_name))
			best = s;
	closedir(d);
	return best;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Remove a step folder so that it is never seen half removed: renamed out of
 * discovery's sight first (step-N.old.PID, what dcp_clean_stale removes if a
 * kill interrupts), then deleted. */
static int remove_step(const char *folder, const char *name, titan_err *err)
{
	char aside[96];
	snprintf(aside, sizeof aside, "%s.old.%ld", name, (long)getpid());
	char *p = path_join(folder, name), *q = path_join(folder, aside);
	int rc = 0;
	if (!p || !q)
		rc = err_set(err, "out of memory");
	else if (rename(p, q) != 0)
		rc = err_errno(err, "%s/%s: cannot move aside to remove", folder, name);
	else if (fsync_parent_dir(q, err) != 0)
		rc = -1;
	else if (dcp_rm_rf(q) != 0)
		rc = err_errno(err, "%s/%s: cannot remove", folder, aside);
	free(p);
	free(q);
	return rc;
}

/* step-N.old.PID of process PID: a step being replaced (dcp_save_commit) or
 * removed (dcp_purge). */
static int old_of(const char *name, long *pid)
{
	int64_t s;
	int partial;
	const char *o = strstr(name, ".old.");
	if (!o || o - name > 40)
		return -1;
	char step[48];
	snprintf(step, sizeof step, "%.*s", (int)(o - name), name);
	char *end;
	*pid = strtol(o + 5, &end, 10);
	return step_of(step, &s, &partial) == 0 && !partial && end != o + 5 && !*end ? 0 : -1;
}

int dcp_clean_stale(const char *folder, titan_err *err)
{
	DIR *d = opendir(folder);
	if (!d)
		return errno == ENOENT ? 0 : err_errno(err, "%s", folder);
	struct dirent *de;
	long pid;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		if (old_of(de->d_name, &pid) != 0 || (pid != (long)getpid() && !pid_gone(pid)))
			continue;
		char *p = path_join(folder, de->d_name);
		if (!p || dcp_rm_rf(p) != 0)
			rc = err_errno(err, "%s/%s: cannot remove", folder, de->d_name);
		free(p);
	}
	closedir(d);
	return rc;
}

int dcp_purge(const char *folder, int keep, titan_err *err)
{
	if (dcp_clean_stale(folder, err) != 0)
		return -1;
	if (keep <= 0)
		return 0;
	DIR *d = opendir(folder);
	if (!d)
		return errno == ENOENT ? 0 : err_errno(err, "%s", folder);
	int64_t *steps = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int64_t s;
	int partial, rc = 0;
	while ((de = readdir(d))) {
		if (step_of(de->d_name, &s, &partial) || partial || !has_metadata(folder, de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			int64_t *ns = realloc(steps, cap * sizeof *ns);
			if (!ns) {
				rc = err_set(err, "out of memory");
				break;
			}
			steps = ns;
		}
		steps[n++] = s;
	}
	closedir(d);
	if (rc == 0 && n > 0) {
		qsort(steps, n, sizeof *steps, cmp_i64);
		int64_t newest = steps[n - 1];
		char name[64];
		for (size_t i = 0; i + (size_t)keep < n && rc == 0; i++) {
			snprintf(name, sizeof name, "step-%" PRId64, steps[i]);
			rc = remove_step(folder, name, err);
		}
		/* Staging folders of saves older than the newest complete one are dead. */
		d = opendir(folder);
		while (rc == 0 && d && (de = readdir(d))) {
			if (step_of(de->d_name, &s, &partial) == 0 && partial && s < newest) {
				char *p = path_join(folder, de->d_name);
				if (!p || dcp_rm_rf(p) != 0)
					rc = err_errno(err, "%s/%s: cannot remove", folder, de->d_name);
				free(p);
			}
		}
		if (d)
			closedir(d);
	}
	free(steps);
	return rc;
}
