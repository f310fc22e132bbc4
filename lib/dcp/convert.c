/* convert.c: between DCP folders, torch.save files and safetensors. */
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "dcp/dcp_priv.h"
#include "safetensors/safetensors.h"

static int is_float(dcp_dtype t)
{
	return t == PTZ_F32 || t == PTZ_BF16 || t == PTZ_F16 || t == PTZ_F64;
}

/* The dtype an item is written in. */
static dcp_dtype out_dtype(const dcp_src_item *it, const dcp_convert_opts *o)
{
	return o && o->export_dtype != PTZ_NONE && is_float(it->dtype) ? o->export_dtype : it->dtype;
}

/* The source, its items named as the output is to name them (o->names:
 * the source's own names by default). */
static int open_named(dcp_source **s, const char *src, const dcp_convert_opts *o,
		      titan_err *err)
{
	if (dcp_source_open(s, src, err))
		return -1;
	int names = o ? o->names : DCP_NAMES_SOURCE;
	int as_stored = names == DCP_NAMES_SOURCE && dcp_source_is_030(*s);
	int rc = o && o->head_dim && dcp_source_set_head_dim(*s, o->head_dim, err) != 0
			 ? err_prefix(err, "%s", src) : 0;
	if (rc == 0 && as_stored) /* the layout kept too: fused or not */
		rc = dcp_source_as_stored(*s, err);
	else if (rc == 0 && names == DCP_NAMES_030)
		rc = dcp_source_names(*s, 1, err);
	else if (rc == 0 && dcp_source_has_fused_qkv(*s))
		rc = err_set(err, "%s: torchtitan 0.3.0's fused q/k/v optimizer state "
			     "(qkv_linear.wqkv) under 0.2.2's names needs the head dim to split it "
			     "(--head-dim N)", src);
	if (rc != 0)
		dcp_source_close(*s);
	return rc;
}

static int wanted(const dcp_src_item *it, const dcp_convert_opts *o)
{
	return !(o && o->model_only) || dcp_is_model_key(it->name);
}

static size_t nbytes(const dcp_src_item *it, dcp_dtype t)
{
	return (size_t)dcp_numel(it->ndim, it->shape) * ptz_dtype_size(t);
}

/* torch.chunk's split of n into k pieces: ceil(n/k) each, the last smaller,
 * fewer pieces when they run out. */
static void chunk_range(int64_t n, int k, int i, int64_t *off, int64_t *len)
{
	int64_t cs = (n + k - 1) / k;
	*off = (int64_t)i * cs < n ? (int64_t)i * cs : n;
	int64_t end = *off + cs < n ? *off + cs : n;
	*len = end - *off;
}

/* Copy piece [off, off+len) along dim of a row-major tensor into out. */
static void slice_dim(const uint8_t *src, uint8_t *out, int ndim, const int64_t *shape, int dim,
		      int64_t off, int64_t len, size_t es)
{
	int64_t outer = 1, inner = 1;
	for (int d = 0; d < dim; d++)
		outer *= shape[d];
	for (int d = dim + 1; d < ndim; d++)
		inner *= shape[d];
	size_t row = (size_t)(len * inner) * es, full = (size_t)(shape[dim] * inner) * es;
	for (int64_t o = 0; o < outer; o++)
		memcpy(out + (size_t)o * row, src + (size_t)o * full + (size_t)(off * inner) * es, row);
}

int dcp_convert_to_dcp(const char *src, const char *out, const dcp_convert_opts *o,
		       titan_err *err)
{
	dcp_source *s;
	if (open_named(&s, src, o, err))
		return -1;
	int k = o && o->chunks > 1 ? o->chunks : 1, dim = o ? o->dim : 0;
	size_t n = dcp_source_count(s);
	dcp_item *items = calloc(n ? n : 1, sizeof *items);
	void **bufs = calloc(n ? n : 1, sizeof *bufs);
	void **full = calloc(n ? n : 1, sizeof *full);
	int rc = items && bufs && full ? 0 : err_set(err, "out of memory");
	/* Rank by rank, so that peak memory is one rank's share (plus the full
	 * tensors while they are sliced). */
	for (int r = 0; r < k && rc == 0; r++) {
		size_t m = 0;
		for (size_t i = 0; i < n && rc == 0; i++) {
			const dcp_src_item *it = dcp_source_item(s, i);
			if (!wanted(it, o))
				continue;
			dcp_item *d = &items[m];
			memset(d, 0, sizeof *d);
			d->fqn = it->name;
			d->kind = it->kind;
			d->path = (const char *const *)it->path;
			d->npath = it->npath;
			if (it->kind == DCP_BYTES) {
				if (r != 0)
					continue;
				rc = dcp_source_bytes(s, it, &d->bytes, &d->nbytes, err);
				bufs[m++] = d->bytes;
				continue;
			}
			dcp_dtype t = out_dtype(it, o);
			int split = k > 1 && it->ndim > dim;
			if (!split && r != 0)
				continue;
			d->dtype = t;
			d->ndim = it->ndim;
			memcpy(d->shape, it->shape, sizeof d->shape);
			memcpy(d->sizes, it->shape, sizeof d->sizes);
			void *whole = malloc(nbytes(it, t) ? nbytes(it, t) : 1);
			if (!whole || dcp_source_read(s, it, whole, t, err)) {
				free(whole);
				rc = whole ? -1 : err_set(err, "out of memory");
				break;
			}
			if (!split) {
				d->data = bufs[m++] = whole;
				continue;
			}
			int64_t off, len;
			chunk_range(it->shape[dim], k, r, &off, &len);
			if (len == 0) { /* torch.chunk made fewer pieces: this rank has none */
				free(whole);
				continue;
			}
			d->offsets[dim] = off;
			d->sizes[dim] = len;
			size_t pb = (size_t)dcp_numel(d->ndim, d->sizes) * ptz_dtype_size(t);
			void *piece = malloc(pb ? pb : 1);
			if (!piece) {
				free(whole);
				rc = err_set(err, "out of memory");
				break;
			}
			slice_dim(whole, piece, it->ndim, it->shape, dim, off, len, ptz_dtype_size(t));
			free(whole);
			d->data = bufs[m++] = piece;
		}
		if (rc == 0) {
			dcp_saver *sv = dcp_save_begin(out, r, k, items, m, NULL, err);
			rc = sv ? dcp_save_wait(sv, err) : -1;
		}
		for (size_t i = 0; i < m; i++) {
			free(bufs[i]);
			bufs[i] = NULL;
		}
		if (o && o->verbose && rc == 0)
			fprintf(stderr, "%s: rank %d of %d written (%zu items)\n", out, r, k, m);
	}
	if (rc == 0)
		rc = dcp_save_commit(out, k, err);
	free(items);
	free(bufs);
	free(full);
	dcp_source_close(s);
	return rc;
}

/* ---- one torch.save file ---- */

static pk_val *child_dict(pk_arena *a, pk_val *d, const char *key)
{
	pk_val *v = pk_dict_get(d, key);
	if (v)
		return v->kind == PK_DICT ? v : NULL;
	v = pk_new(a, PK_DICT);
	pk_val *k = pk_str(a, key);
	if (!v || !k || pk_dict_set(a, d, k, v))
		return NULL;
	return v;
}

static char *base_root(const char *out)
{
	char *c = strdup(out);
	if (!c)
		return NULL;
	char *b = basename(c), *dot = strrchr(b, '.');
	if (dot && dot != b)
		*dot = 0;
	char *r = strdup(b[0] ? b : "archive");
	free(c);
	return r;
}

/* Place every wanted item in the nested dict its path names. */
static int build_tree(dcp_source *s, const dcp_convert_opts *o, pk_arena *a, pk_val *root,
		      pk_arena ***vals, size_t *nvals, titan_err *err)
{
	size_t n = dcp_source_count(s), key = 0;
	*vals = calloc(n ? n : 1, sizeof **vals);
	if (!*vals)
		return err_set(err, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!wanted(it, o))
			continue;
		const char *one[1] = {it->name};
		const char *const *path = it->path ? (const char *const *)it->path : one;
		int np = it->path ? it->npath : 1;
		char **own = NULL;
		if (!it->path && s && dcp_default_path(it->name, &own, &np) == 0)
			path = (const char *const *)own;
		pk_val *d = root;
		for (int k = 0; d && k < np - 1; k++)
			d = child_dict(a, d, path[k]);
		pk_val *leaf = NULL;
		if (it->kind == DCP_TENSOR) {
			char kbuf[32];
			snprintf(kbuf, sizeof kbuf, "%zu", key++);
			leaf = ptz_tensor_val(a, out_dtype(it, o), it->ndim, it->shape, kbuf);
		} else {
			uint8_t *b;
			size_t bn;
			pk_arena *va = NULL;
			if (dcp_source_bytes(s, it, &b, &bn, err))
				return -1;
			int rc = dcp_value_load(b, bn, &leaf, &va, err);
			free(b);
			(*vals)[(*nvals)++] = va;
			if (rc)
				return err_prefix(err, "%s", it->name);
		}
		pk_val *k = pk_str(a, path[np - 1]);
		int bad = !d || !leaf || !k || pk_dict_set(a, d, k, leaf);
		for (int j = 0; own && j < np; j++)
			free(own[j]);
		free(own);
		if (bad)
			return err_set(err, "%s: cannot place the key (clashes with another)", it->name);
	}
	return 0;
}

static int write_storages(dcp_source *s, const dcp_convert_opts *o, ptz_writer *w, titan_err *err)
{
	size_t key = 0;
	for (size_t i = 0; i < dcp_source_count(s); i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!wanted(it, o) || it->kind != DCP_TENSOR)
			continue;
		dcp_dtype t = out_dtype(it, o);
		size_t b = nbytes(it, t);
		void *buf = malloc(b ? b : 1);
		if (!buf)
			return err_set(err, "out of memory");
		char rel[48];
		snprintf(rel, sizeof rel, "data/%zu", key++);
		int rc = dcp_source_read(s, it, buf, t, err);
		if (rc == 0)
			rc = ptz_writer_add(w, rel, buf, b, err);
		free(buf);
		if (rc)
			return -1;
	}
	return 0;
}

int dcp_convert_to_torch(const char *src, const char *out, const dcp_convert_opts *o,
			 titan_err *err)
{
	dcp_source *s;
	afile_clean_stale(out); /* what a killed conversion to out left */
	if (open_named(&s, src, o, err))
		return -1;
	pk_arena *a = pk_arena_new(), **vals = NULL;
	size_t nvals = 0;
	pk_val *root = a ? pk_new(a, PK_DICT) : NULL;
	char *rootname = base_root(out);
	int rc = root && rootname ? build_tree(s, o, a, root, &vals, &nvals, err)
				  : err_set(err, "out of memory");
	pk_buf b = {0};
	if (rc == 0)
		rc = pk_dump(&b, root, 2, err);
	afile af;
	int opened = 0;
	if (rc == 0)
		opened = (rc = afile_open(&af, out, err)) == 0;
	ptz_writer w;
	memset(&w, 0, sizeof w);
	if (rc == 0)
		rc = ptz_writer_init(&w, af.fp, rootname, err);
	if (rc == 0)
		rc = ptz_write_preamble(&w, b.p, b.n, err);
	if (rc == 0)
		rc = write_storages(s, o, &w, err);
	if (rc == 0)
		rc = ptz_writer_finish(&w, err);
	ptz_writer_free(&w);
	if (opened) {
		if (rc)
			afile_abort(&af);
		else
			rc = afile_commit(&af, err);
	}
	free(b.p);
	for (size_t i = 0; i < nvals; i++)
		pk_free(vals[i]);
	free(vals);
	pk_free(a);
	free(rootname);
	dcp_source_close(s);
	return rc;
}

int dcp_convert_to_safetensors(const char *src, const char *out, const dcp_convert_opts *o,
			       size_t *skipped, titan_err *err)
{
	dcp_source *s;
	afile_clean_stale(out); /* what a killed conversion to out left */
	if (open_named(&s, src, o, err))
		return -1;
	size_t n = dcp_source_count(s), m = 0;
	st_item *items = calloc(n ? n : 1, sizeof *items);
	int rc = items ? 0 : err_set(err, "out of memory");
	*skipped = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!wanted(it, o))
			continue;
		if (it->kind != DCP_TENSOR) {
			(*skipped)++;
			continue;
		}
		st_item *d = &items[m];
		d->name = it->name;
		d->dtype = out_dtype(it, o);
		d->ndim = it->ndim;
		memcpy(d->shape, it->shape, sizeof(int64_t) * (size_t)it->ndim);
		void *buf = malloc(nbytes(it, d->dtype) ? nbytes(it, d->dtype) : 1);
		d->data = buf;
		m++;
		rc = buf ? dcp_source_read(s, it, buf, d->dtype, err) : err_set(err, "out of memory");
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write(out, items, m, meta, err);
	for (size_t i = 0; i < m; i++)
		free((void *)items[i].data);
	free(items);
	dcp_source_close(s);
	return rc;
}
