/* save.c: writing a DCP folder through the staging folder DIR.partial (see
 * dcp.h for the crash-safety argument). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/bigmem.h"
#include "dcp/dcp_priv.h"

/* The staging area of asynchronous saves (torchtitan's pinned-memory buffer):
 * kept between saves, so that after the first one a save costs the caller one
 * memcpy and no page faults.  One save at a time may hold it. */
static struct {
	pthread_mutex_t mu;
	uint8_t *p;
	size_t cap;
	int busy;
} stage = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

struct dcp_saver {
	char *dir, *stage;
	int rank, world;
	dcp_item *items;
	size_t n;
	dcp_save_opts opts;
	void **copies;       /* opts.copy: where each item's copy is */
	uint8_t *own_stage;  /* the copies' block when the shared stage was busy */
	int holds_stage;
	uint64_t *offs, *lens;
	pthread_t thread;
	int threaded;
	int no_writeback;    /* sync_file_range is not available here */
	int rc;
	titan_err err;
};

void dcp_item_full(dcp_item *it, const char *fqn, dcp_dtype dtype, int ndim,
		   const int64_t *shape, void *data)
{
	memset(it, 0, sizeof *it);
	it->fqn = fqn;
	it->kind = DCP_TENSOR;
	it->dtype = dtype;
	it->ndim = ndim;
	for (int d = 0; d < ndim; d++) {
		it->shape[d] = shape[d];
		it->sizes[d] = shape[d];
	}
	it->data = data;
}

static char *cat(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 1;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s%s", a, b);
	return s;
}

static size_t item_bytes(const dcp_item *it)
{
	return (size_t)dcp_numel(it->ndim, it->sizes) * ptz_dtype_size(it->dtype);
}

static int check_items(const dcp_item *items, size_t n, titan_err *err)
{
	for (size_t i = 0; i < n; i++) {
		const dcp_item *it = &items[i];
		if (!it->fqn || !it->fqn[0])
			return err_set(err, "item %zu has no key", i);
		if (it->kind == DCP_BYTES) {
			if (!it->bytes || !it->nbytes)
				return err_set(err, "%s: bytes item without bytes", it->fqn);
			continue;
		}
		if (it->ndim < 0 || it->ndim > DCP_MAX_DIM || !ptz_dtype_size(it->dtype))
			return err_set(err, "%s: bad dtype or ndim %d", it->fqn, it->ndim);
		for (int d = 0; d < it->ndim; d++)
			if (it->shape[d] < 0 || it->offsets[d] < 0 || it->sizes[d] < 0 ||
			    it->offsets[d] + it->sizes[d] > it->shape[d])
				return err_set(err, "%s: chunk [%" PRId64 ", +%" PRId64 ") outside dim %d of size %" PRId64,
					       it->fqn, it->offsets[d], it->sizes[d], d, it->shape[d]);
		if (!it->data && item_bytes(it))
			return err_set(err, "%s: tensor item without data", it->fqn);
	}
	return 0;
}

/* Start writing [*from, pos) of the file to the disk now, without waiting:
 * a checkpoint smaller than the kernel's dirty-page threshold would
 * otherwise sit in the page cache until the final fsync, the disk idle while
 * the next tensors are serialised (their CRC-32, the copy into the cache).
 * The fsync at the end stays what makes the file durable; where the kernel
 * or file system cannot do this (ENOSYS, EINVAL, ESPIPE) the hint is dropped. */
static int start_writeback(dcp_saver *s, FILE *fp, const char *path, uint64_t *from, uint64_t pos)
{
	if (s->opts.no_fsync || pos - *from < ((uint64_t)8 << 20) || s->no_writeback)
		return 0;
	if (fflush(fp) != 0)
		return err_errno(&s->err, "%s: write", path);
	if (sync_file_range(fileno(fp), (off_t)*from, (off_t)(pos - *from), SYNC_FILE_RANGE_WRITE) != 0) {
		if (errno != ENOSYS && errno != EINVAL && errno != ESPIPE)
			return err_errno(&s->err, "%s: sync_file_range", path);
		s->no_writeback = 1;
	}
	*from = pos;
	return 0;
}

/* One rank's data file: byte items first, then tensors, each a torch.save
 * stream, as FileSystemWriter writes them. */
static int write_data(dcp_saver *s)
{
	char name[64];
	snprintf(name, sizeof name, "__%d_0.distcp", s->rank);
	char *path = path_join(s->stage, name);
	if (!path)
		return err_set(&s->err, "out of memory");
	int rc = 0;
	/* A fresh file: whatever an interrupted save (or anyone) left at the
	 * name, a FIFO or a link included, is removed rather than opened. */
	int fd = unlink(path) == 0 || errno == ENOENT
			 ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
	FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
	if (!fp) {
		rc = err_errno(&s->err, "%s", path);
		if (fd >= 0)
			close(fd);
		free(path);
		return rc;
	}
	setvbuf(fp, NULL, _IOFBF, 1 << 20);
	uint64_t pos = 0, synced = 0;
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		for (size_t i = 0; i < s->n && rc == 0; i++) {
			dcp_item *it = &s->items[i];
			if ((pass == 0) != (it->kind == DCP_BYTES))
				continue;
			s->offs[i] = pos;
			if (it->kind == DCP_BYTES) {
				if (fwrite(it->bytes, 1, it->nbytes, fp) != it->nbytes)
					rc = err_errno(&s->err, "%s: write", path);
				pos += it->nbytes;
			} else {
				ptz_writer w;
				rc = ptz_writer_init(&w, fp, "archive", &s->err);
				const void *data = s->copies && s->copies[i] ? s->copies[i] : it->data;
				if (rc == 0)
					rc = ptz_save_tensor(&w, it->dtype, it->ndim, it->sizes, data, &s->err);
				pos += w.pos;
				ptz_writer_free(&w);
				if (rc)
					err_prefix(&s->err, "%s: %s", path, it->fqn);
				else
					rc = start_writeback(s, fp, path, &synced, pos);
			}
			s->lens[i] = pos - s->offs[i];
		}
	}
	if (fflush(fp) != 0 && rc == 0)
		rc = err_errno(&s->err, "%s: write", path);
	if (rc == 0 && !s->opts.no_fsync && fsync(fileno(fp)) != 0)
		rc = err_errno(&s->err, "%s: fsync", path);
	if (fclose(fp) != 0 && rc == 0)
		rc = err_errno(&s->err, "%s: close", path);
	free(path);
	return rc;
}

/* The sidecar: this rank's items and where they went, for rank 0's commit. */
static int write_sidecar(dcp_saver *s)
{
	json_t *arr = json_array();
	char file[64];
	snprintf(file, sizeof file, "__%d_0.distcp", s->rank);
	for (size_t i = 0; i < s->n && arr; i++) {
		const dcp_item *it = &s->items[i];
		json_t *o = json_object(), *shape = json_array(), *offs = json_array(), *sizes = json_array();
		json_t *path = json_array();
		for (int d = 0; d < it->ndim && it->kind == DCP_TENSOR; d++) {
			json_array_append_new(shape, json_integer(it->shape[d]));
			json_array_append_new(offs, json_integer(it->offsets[d]));
			json_array_append_new(sizes, json_integer(it->sizes[d]));
		}
		for (int k = 0; it->path && k < it->npath; k++)
			json_array_append_new(path, json_string(it->path[k]));
		json_object_set_new(o, "fqn", json_string(it->fqn));
		json_object_set_new(o, "kind", json_string(it->kind == DCP_BYTES ? "bytes" : "tensor"));
		json_object_set_new(o, "dtype", json_string(it->kind == DCP_TENSOR ? ptz_dtype_torch(it->dtype) : ""));
		json_object_set_new(o, "shape", shape);
		json_object_set_new(o, "offsets", offs);
		json_object_set_new(o, "sizes", sizes);
		json_object_set_new(o, "path", path);
		json_object_set_new(o, "file", json_string(file));
		json_object_set_new(o, "offset", json_integer((json_int_t)s->offs[i]));
		json_object_set_new(o, "length", json_integer((json_int_t)s->lens[i]));
		json_array_append_new(arr, o);
	}
	char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
	json_decref(arr);
	if (!text)
		return err_set(&s->err, "out of memory");
	char name[64];
	snprintf(name, sizeof name, "__%d.titan-chunks", s->rank);
	char *p = path_join(s->stage, name);
	int rc = p ? atomic_write_file(p, text, strlen(text), &s->err) : err_set(&s->err, "out of memory");
	free(p);
	free(text);
	return rc;
}

static void *run(void *arg)
{
	dcp_saver *s = arg;
	s->rc = write_data(s);
	if (s->rc == 0)
		s->rc = write_sidecar(s);
	return NULL;
}

static void saver_free(dcp_saver *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->items && i < s->n; i++) {
		free((char *)s->items[i].fqn);
		if (s->items[i].path)
			for (int k = 0; k < s->items[i].npath; k++)
				free((char *)s->items[i].path[k]);
		free((void *)s->items[i].path);
	}
	free(s->own_stage);
	if (s->holds_stage) {
		pthread_mutex_lock(&stage.mu);
		stage.busy = 0;
		pthread_mutex_unlock(&stage.mu);
	}
	free(s->copies);
	free(s->items);
	free(s->offs);
	free(s->lens);
	free(s->dir);
	free(s->stage);
	free(s);
}

static size_t copy_bytes(const dcp_item *it)
{
	size_t b = it->kind == DCP_BYTES ? it->nbytes : item_bytes(it);
	return (b + 63) & ~(size_t)63;
}

/* One block for all the copies: the shared stage when free (grown if needed),
 * else a private one. */
static uint8_t *stage_block(dcp_saver *s, size_t total)
{
	pthread_mutex_lock(&stage.mu);
	uint8_t *p = NULL;
	if (!stage.busy) {
		if (stage.cap < total) {
			free(stage.p);
			stage.p = bigmem_alloc(total);
			stage.cap = stage.p ? total : 0;
		}
		if (stage.p) {
			stage.busy = 1;
			s->holds_stage = 1;
			p = stage.p;
		}
	}
	pthread_mutex_unlock(&stage.mu);
	if (!p)
		p = s->own_stage = bigmem_alloc(total);
	return p;
}

static int copy_items(dcp_saver *s, const dcp_item *items, size_t n)
{
	s->items = calloc(n ? n : 1, sizeof *s->items);
	s->offs = calloc(n ? n : 1, sizeof *s->offs);
	s->lens = calloc(n ? n : 1, sizeof *s->lens);
	if (s->opts.async && s->opts.copy)
		s->copies = calloc(n ? n : 1, sizeof *s->copies);
	if (!s->items || !s->offs || !s->lens || (s->opts.async && s->opts.copy && !s->copies))
		return -1;
	for (size_t i = 0; i < n; i++) {
		s->items[i] = items[i];
		s->items[i].path = NULL;
		s->items[i].fqn = strdup(items[i].fqn);
		if (!s->items[i].fqn)
			return -1;
		if (items[i].path && items[i].npath > 0) {
			const char **p = calloc((size_t)items[i].npath, sizeof *p);
			if (!p)
				return -1;
			s->items[i].path = p;
			for (int k = 0; k < items[i].npath; k++) {
				p[k] = strdup(items[i].path[k]);
				if (!p[k])
					return -1;
			}
		}
	}
	s->n = n;
	if (!s->copies)
		return 0;
	size_t total = 64;
	for (size_t i = 0; i < n; i++)
		total += copy_bytes(&items[i]);
	uint8_t *block = stage_block(s, total);
	if (!block)
		return -1;
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		size_t b = items[i].kind == DCP_BYTES ? items[i].nbytes : item_bytes(&items[i]);
		const void *src = items[i].kind == DCP_BYTES ? (const void *)items[i].bytes : items[i].data;
		s->copies[i] = block + at;
		/* Big tensors are copied by all cores: the caller waits for this. */
		const size_t piece = (size_t)16 << 20;
		size_t np = (b + piece - 1) / piece;
		#pragma omp parallel for if (np > 1) schedule(static)
		for (size_t k = 0; k < np; k++) {
			size_t o = k * piece, len = b - o < piece ? b - o : piece;
			memcpy((uint8_t *)s->copies[i] + o, (const uint8_t *)src + o, len);
		}
		if (items[i].kind == DCP_BYTES)
			s->items[i].bytes = s->copies[i];
		at += copy_bytes(&items[i]);
	}
	return 0;
}

dcp_saver *dcp_save_begin(const char *dir, int rank, int world, const dcp_item *items,
			  size_t n, const dcp_save_opts *opts, titan_err *err)
{
	if (rank < 0 || world < 1 || rank >= world) {
		err_set(err, "%s: rank %d of %d", dir, rank, world);
		return NULL;
	}
	if (check_items(items, n, err)) {
		err_prefix(err, "%s", dir);
		return NULL;
	}
	dcp_saver *s = calloc(1, sizeof *s);
	if (!s) {
		err_set(err, "out of memory");
		return NULL;
	}
	if (opts)
		s->opts = *opts;
	s->rank = rank;
	s->world = world;
	s->dir = strdup(dir);
	s->stage = cat(dir, ".partial");
	if (!s->dir || !s->stage || copy_items(s, items, n)) {
		saver_free(s);
		err_set(err, "out of memory");
		return NULL;
	}
	if (dcp_stage_dir(s->stage, err)) {
		saver_free(s);
		return NULL;
	}
	/* A stale file from an interrupted save must not be taken for this rank's. */
	char name[64];
	snprintf(name, sizeof name, "__%d.titan-chunks", rank);
	char *side = path_join(s->stage, name);
	if (side && unlink(side) != 0 && errno != ENOENT) {
		err_errno(err, "%s", side);
		free(side);
		saver_free(s);
		return NULL;
	}
	free(side);
	if (s->opts.async) {
		if (pthread_create(&s->thread, NULL, run, s) != 0) {
			err_set(err, "%s: cannot start the save thread", dir);
			saver_free(s);
			return NULL;
		}
		s->threaded = 1;
	} else {
		run(s);
	}
	return s;
}

int dcp_save_wait(dcp_saver *s, titan_err *err)
{
	if (!s)
		return err_set(err, "no save in progress");
	if (s->threaded)
		pthread_join(s->thread, NULL);
	int rc = s->rc;
	if (rc)
		*err = s->err;
	saver_free(s);
	return rc;
}

/* ---- commit ---- */

static int read_text(const char *path, char **out, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err))
		return -1;
	*out = malloc(m.size + 1);
	if (!*out) {
		mfile_close(&m);
		return err_set(err, "out of memory");
	}
	if (m.size)
		memcpy(*out, m.data, m.size);
	(*out)[m.size] = 0;
	mfile_close(&m);
	return 0;
}

static int dims(json_t *a, int64_t *out, int *n)
{
	if (!json_is_array(a) || json_array_size(a) > DCP_MAX_DIM)
		return -1;
	for (size_t i = 0; i < json_array_size(a); i++) {
		json_t *v = json_array_get(a, i);
		if (!json_is_integer(v))
			return -1;
		out[i] = json_integer_value(v);
	}
	*n = (int)json_array_size(a);
	return 0;
}

typedef struct merged {
	dcp_entry *e;
	size_t n, cap;
	strmap index; /* fqn -> position in e */
} merged;

static dcp_entry *merged_find(merged *m, const char *fqn)
{
	size_t i;
	return strmap_get(&m->index, fqn, &i) ? &m->e[i] : NULL;
}

static int merge_one(merged *m, json_t *o, const char *side, titan_err *err)
{
	const char *fqn = json_string_value(json_object_get(o, "fqn"));
	const char *kind = json_string_value(json_object_get(o, "kind"));
	const char *file = json_string_value(json_object_get(o, "file"));
	json_t *off = json_object_get(o, "offset"), *len = json_object_get(o, "length");
	if (!fqn || !kind || !file || !json_is_integer(off) || !json_is_integer(len))
		return err_set(err, "%s: malformed record", side);
	int is_bytes = !strcmp(kind, "bytes");
	dcp_dtype dt = is_bytes ? PTZ_NONE : ptz_dtype_parse(json_string_value(json_object_get(o, "dtype")));
	int64_t shape[DCP_MAX_DIM], offs[DCP_MAX_DIM], sizes[DCP_MAX_DIM];
	int nd = 0, no = 0, ns = 0;
	if (!is_bytes && (dt == PTZ_NONE || dims(json_object_get(o, "shape"), shape, &nd) ||
			  dims(json_object_get(o, "offsets"), offs, &no) ||
			  dims(json_object_get(o, "sizes"), sizes, &ns) || no != nd || ns != nd))
		return err_set(err, "%s: %s: malformed tensor record", side, fqn);
	dcp_entry *e = merged_find(m, fqn);
	if (e && (is_bytes || e->kind == DCP_BYTES))
		return err_set(err, "%s: '%s' saved by more than one rank (give bytes items on one rank)",
			       side, fqn);
	if (e && (e->dtype != dt || e->ndim != nd || memcmp(e->shape, shape, sizeof(int64_t) * (size_t)nd)))
		return err_set(err, "%s: '%s' has a different dtype or shape than on another rank", side, fqn);
	if (!e) {
		if (m->n == m->cap) {
			size_t cap = m->cap ? m->cap * 2 : 64;
			dcp_entry *ne = realloc(m->e, cap * sizeof *ne);
			if (!ne)
				return err_set(err, "out of memory");
			m->e = ne;
			m->cap = cap;
		}
		e = &m->e[m->n++];
		memset(e, 0, sizeof *e);
		e->fqn = strdup(fqn);
		if (!e->fqn || strmap_put(&m->index, e->fqn, m->n - 1) < 0)
			return err_set(err, "out of memory");
		e->kind = is_bytes ? DCP_BYTES : DCP_TENSOR;
		e->dtype = dt;
		e->ndim = nd;
		memcpy(e->shape, shape, sizeof(int64_t) * (size_t)nd);
		json_t *p = json_object_get(o, "path");
		if (json_is_array(p) && json_array_size(p) > 0) {
			e->path = calloc(json_array_size(p), sizeof *e->path);
			for (size_t k = 0; e->path && k < json_array_size(p); k++) {
				const char *ps = json_string_value(json_array_get(p, k));
				e->path[k] = strdup(ps ? ps : "");
				e->npath = (int)k + 1;
			}
		}
		if (!e->fqn)
			return err_set(err, "out of memory");
	}
	dcp_chunk *c = realloc(e->chunks, (e->n_chunks + 1) * sizeof *c);
	if (!c)
		return err_set(err, "out of memory");
	e->chunks = c;
	c = &e->chunks[e->n_chunks++];
	memset(c, 0, sizeof *c);
	memcpy(c->offsets, offs, sizeof(int64_t) * (size_t)nd);
	memcpy(c->sizes, sizes, sizeof(int64_t) * (size_t)nd);
	c->file = strdup(file);
	c->offset = (uint64_t)json_integer_value(off);
	c->length = (uint64_t)json_integer_value(len);
	return c->file ? 0 : err_set(err, "out of memory");
}

static int merge_rank(merged *m, const char *stage, int r, titan_err *err)
{
	char name[64];
	snprintf(name, sizeof name, "__%d.titan-chunks", r);
	char *side = path_join(stage, name), *text = NULL;
	if (!side)
		return err_set(err, "out of memory");
	int rc = read_text(side, &text, err);
	if (rc) {
		err_prefix(err, "rank %d did not finish its part", r);
		free(side);
		return -1;
	}
	json_error_t je;
	json_t *arr = json_loads(text, 0, &je);
	free(text);
	if (!json_is_array(arr))
		rc = err_set(err, "%s: %s", side, arr ? "not a JSON array" : je.text);
	for (size_t i = 0; rc == 0 && i < json_array_size(arr); i++)
		rc = merge_one(m, json_array_get(arr, i), side, err);
	json_decref(arr);
	free(side);
	return rc;
}

static int rm_rf(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode))
		return unlink(path);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	struct dirent *de;
	int rc = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *p = path_join(path, de->d_name);
		if (!p || rm_rf(p))
			rc = -1;
		free(p);
	}
	closedir(d);
	return rmdir(path) == 0 ? rc : -1;
}

int dcp_rm_rf(const char *path)
{
	return rm_rf(path);
}

int dcp_stage_dir(const char *stage, titan_err *err)
{
	struct stat st;
	if (lstat(stage, &st) == 0 && !S_ISDIR(st.st_mode) && unlink(stage) != 0)
		return err_errno(err, "%s: not a folder, and cannot be removed", stage);
	return mkdir_p(stage, err);
}

int dcp_swap_in(const char *stage, const char *dir, titan_err *err)
{
	struct stat st;
	char *old = NULL;
	if (stat(dir, &st) == 0) {
		/* Replacing a folder: move it aside first; the new one appears whole. */
		char suffix[64];
		snprintf(suffix, sizeof suffix, ".old.%ld", (long)getpid());
		old = cat(dir, suffix);
		if (!old)
			return err_set(err, "out of memory");
		rm_rf(old);
		if (rename(dir, old) != 0) {
			free(old);
			return err_errno(err, "%s: cannot move the old checkpoint aside", dir);
		}
	}
	if (rename(stage, dir) != 0) {
		int rc = err_errno(err, "%s: rename to %s", stage, dir);
		if (old && rename(old, dir) != 0)
			titan_warn("%s: could not restore the previous checkpoint from %s", dir, old);
		free(old);
		return rc;
	}
	int rc = fsync_parent_dir(dir, err);
	if (old) {
		if (rm_rf(old) != 0)
			titan_warn("%s: could not remove %s", dir, old);
		free(old);
	}
	return rc;
}

int dcp_save_commit(const char *dir, int world, titan_err *err)
{
	char *stage = cat(dir, ".partial");
	if (!stage)
		return err_set(err, "out of memory");
	merged m = {0};
	int rc = 0;
	for (int r = 0; r < world && rc == 0; r++)
		rc = merge_rank(&m, stage, r, err);
	uint8_t *md = NULL;
	size_t mdn = 0;
	if (rc == 0)
		rc = dcp_meta_write(m.e, m.n, &md, &mdn, err);
	char *mp = rc == 0 ? path_join(stage, ".metadata") : NULL;
	if (rc == 0)
		rc = mp ? atomic_write_file(mp, md, mdn, err) : err_set(err, "out of memory");
	for (int r = 0; r < world && rc == 0; r++) {
		char name[64];
		snprintf(name, sizeof name, "__%d.titan-chunks", r);
		char *side = path_join(stage, name);
		if (!side || unlink(side) != 0)
			rc = err_errno(err, "%s: cannot remove %s", stage, name);
		free(side);
	}
	if (rc == 0)
		rc = fsync_parent_dir(mp, err);
	if (rc == 0)
		rc = dcp_swap_in(stage, dir, err);
	if (rc)
		err_prefix(err, "%s", dir);
	for (size_t i = 0; i < m.n; i++)
		dcp_entry_free(&m.e[i]);
	free(m.e);
	strmap_free(&m.index);
	free(md);
	free(mp);
	free(stage);
	return rc;
}

int dcp_save(const char *dir, const dcp_item *items, size_t n, const dcp_save_opts *opts,
	     titan_err *err)
{
	dcp_saver *s = dcp_save_begin(dir, 0, 1, items, n, opts, err);
	if (!s || dcp_save_wait(s, err))
		return -1;
	return dcp_save_commit(dir, 1, err);
}
