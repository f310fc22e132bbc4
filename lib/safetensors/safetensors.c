/* safetensors.c: see safetensors.h. */
#include "safetensors/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "core/json.h"

static int cmp_begin(const void *a, const void *b)
{
	const st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_entry(st_tensor *t, const char *key, json_t *v, titan_err *err)
{
	if (!json_is_object(v))
		return err_set(err, "tensor '%s': entry is not an object", key);
	const char *dt = json_string_value(json_object_get(v, "dtype"));
	json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
	if (!dt || !json_is_array(shape) || !json_is_array(offs) || json_array_size(offs) != 2)
		return err_set(err, "tensor '%s': needs dtype, shape and data_offsets", key);
	t->dtype = PTZ_NONE;
	for (int k = PTZ_F32; k < PTZ_DTYPE_COUNT; k++)
		if (!strcmp(dt, ptz_dtype_st((ptz_dtype)k)))
			t->dtype = (ptz_dtype)k;
	if (t->dtype == PTZ_NONE)
		return err_set(err, "tensor '%s': dtype %s not supported", key, dt);
	if (json_array_size(shape) > ST_MAX_DIM)
		return err_set(err, "tensor '%s': more than %d dims", key, ST_MAX_DIM);
	t->ndim = (int)json_array_size(shape);
	uint64_t bytes = ptz_dtype_size(t->dtype);
	for (int d = 0; d < t->ndim; d++) {
		json_t *s = json_array_get(shape, (size_t)d);
		if (!json_is_integer(s) || json_integer_value(s) < 0)
			return err_set(err, "tensor '%s': bad shape", key);
		t->shape[d] = json_integer_value(s);
		if (t->shape[d] && bytes > UINT64_MAX / (uint64_t)t->shape[d])
			return err_set(err, "tensor '%s': size overflows", key);
		bytes *= (uint64_t)t->shape[d];
	}
	json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
	if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
	    json_integer_value(e) < json_integer_value(b))
		return err_set(err, "tensor '%s': bad data_offsets", key);
	t->begin = (uint64_t)json_integer_value(b);
	t->end = (uint64_t)json_integer_value(e);
	if (t->end - t->begin != bytes)
		return err_set(err, "tensor '%s': data_offsets span %" PRIu64 " bytes, shape and dtype need %" PRIu64,
			       key, t->end - t->begin, bytes);
	t->name = strdup(key);
	return t->name ? 0 : err_set(err, "out of memory");
}

static int parse_meta(st_file *f, json_t *m, titan_err *err)
{
	if (!json_is_object(m))
		return err_set(err, "__metadata__ is not an object");
	f->meta = calloc(2 * json_object_size(m) + 1, sizeof *f->meta);
	if (!f->meta)
		return err_set(err, "out of memory");
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v) {
		if (!json_is_string(v))
			return err_set(err, "__metadata__ value of '%s' is not a string", k);
		f->meta[2 * f->n_meta] = strdup(k);
		f->meta[2 * f->n_meta + 1] = strdup(json_string_value(v));
		f->n_meta++;
		if (!f->meta[2 * f->n_meta - 2] || !f->meta[2 * f->n_meta - 1])
			return err_set(err, "out of memory");
	}
	return 0;
}

static int parse_header(st_file *f, json_t *root, uint64_t data_len, const uint8_t *data,
			titan_err *err)
{
	size_t cap = json_object_size(root);
	f->t = calloc(cap ? cap : 1, sizeof *f->t);
	if (!f->t)
		return err_set(err, "out of memory");
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			if (parse_meta(f, v, err))
				return -1;
			continue;
		}
		if (parse_entry(&f->t[f->n], key, v, err))
			return -1;
		f->n++;
	}
	qsort(f->t, f->n, sizeof *f->t, cmp_begin);
	uint64_t at = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (f->t[i].begin != at)
			return err_set(err, "tensor '%s' starts at %" PRIu64 ", expected %" PRIu64
				       " (data must be contiguous, without holes or overlap)",
				       f->t[i].name, f->t[i].begin, at);
		at = f->t[i].end;
		f->t[i].data = data + f->t[i].begin;
	}
	if (at != data_len)
		return err_set(err, "data is %" PRIu64 " bytes but the tensors cover %" PRIu64, data_len, at);
	return 0;
}

int st_parse(st_file *f, const uint8_t *buf, uint64_t size, titan_err *err)
{
	memset(f, 0, sizeof *f);
	f->buf = buf;
	f->size = size;
	if (size < 8)
		return err_set(err, "%" PRIu64 " bytes: too short for a safetensors header", size);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | buf[i];
	if (n > ST_MAX_HEADER)
		return err_set(err, "header length %" PRIu64 " exceeds the limit %u", n, ST_MAX_HEADER);
	if (n > size - 8)
		return err_set(err, "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)",
			       n, size);
	if (n < 2 || buf[8] != '{')
		return err_set(err, "header does not start with '{'");
	json_error_t je;
	json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return err_set(err, "header JSON: %s at byte %d", je.text, je.position);
	int rc = json_is_object(root) ? parse_header(f, root, size - 8 - n, buf + 8 + n, err)
				      : err_set(err, "header is not a JSON object");
	json_decref(root);
	if (rc) {
		mfile m = f->m;
		f->m.data = NULL;
		st_close(f);
		f->m = m;
	}
	return rc;
}

int st_open(st_file *f, const char *path, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err))
		return -1;
	if (st_parse(f, m.data, m.size, err)) {
		mfile_close(&m);
		memset(f, 0, sizeof *f);
		return err_prefix(err, "%s", path);
	}
	f->m = m;
	for (size_t i = 0; i < f->n; i++)
		f->t[i].mapped = 1;
	return 0;
}

void st_close(st_file *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	for (size_t i = 0; i < 2 * f->n_meta; i++)
		free(f->meta[i]);
	free(f->meta);
	if (f->m.data || f->m.fd > 0)
		mfile_close(&f->m);
	memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->t[i].name, name))
			return &f->t[i];
	return NULL;
}

/* "[2, 3]" into buf. */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t at = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && at < n; i++)
		at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64, i ? ", " : "", shape[i]);
	if (at < n)
		snprintf(buf + at, n - at, "]");
	return buf;
}

int st_tensor_to_f32(const st_tensor *t, int ndim, const int64_t *shape, float *out,
		     titan_err *err)
{
	int ok = t->ndim == ndim;
	for (int i = 0; ok && i < ndim; i++)
		ok = t->shape[i] == shape[i];
	if (!ok) {
		char got[160], want[160];
		return err_set(err, "tensor '%s': shape %s, expected %s", t->name,
			       shape_str(got, sizeof got, t->ndim, t->shape),
			       shape_str(want, sizeof want, ndim, shape));
	}
	if (t->dtype != PTZ_F32 && t->dtype != PTZ_BF16 && t->dtype != PTZ_F16)
		return err_set(err, "tensor '%s': dtype %s, expected F32, BF16 or F16", t->name,
			       ptz_dtype_st(t->dtype));
	size_t n = 1;
	for (int i = 0; i < ndim; i++)
		n *= (size_t)shape[i];
	ptz_convert(out, PTZ_F32, t->data, t->dtype, n);
	/* The copy is what the caller keeps: the mapped pages go back to the page
	 * cache now, or a model's load peaks at its file plus its weights. */
	if (t->mapped)
		mfile_release(t->data, n * ptz_dtype_size(t->dtype));
	return 0;
}

const char *st_meta_get(const st_file *f, const char *key)
{
	for (size_t i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta[2 * i], key))
			return f->meta[2 * i + 1];
	return NULL;
}

/* ---- writing ---- */

static uint64_t item_bytes(const st_item *it)
{
	uint64_t b = ptz_dtype_size(it->dtype);
	for (int d = 0; d < it->ndim; d++)
		b *= (uint64_t)it->shape[d];
	return b;
}

/* safetensors orders the data by alignment (element size) descending, then by
 * name, and the header by name. */
static int cmp_data_order(const void *a, const void *b)
{
	const st_item *x = *(const st_item *const *)a, *y = *(const st_item *const *)b;
	size_t sx = ptz_dtype_size(x->dtype), sy = ptz_dtype_size(y->dtype);
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b)
{
	const st_item *x = *(const st_item *const *)a, *y = *(const st_item *const *)b;
	return strcmp(x->name, y->name);
}

int st_write(const char *path, const st_item *items, size_t n, const char *const *meta,
	     titan_err *err)
{
	const st_item **ord = malloc((n ? n : 1) * sizeof *ord);
	uint64_t *begin = malloc((n ? n : 1) * sizeof *begin);
	json_t *root = json_object();
	if (!ord || !begin || !root) {
		free(ord);
		free(begin);
		json_decref(root);
		return err_set(err, "out of memory");
	}
	for (size_t i = 0; i < n; i++)
		ord[i] = &items[i];
	qsort(ord, n, sizeof *ord, cmp_data_order);
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		begin[i] = at;
		at += item_bytes(ord[i]);
	}
	if (meta && meta[0]) {
		json_t *m = json_object();
		for (size_t k = 0; meta[k] && meta[k + 1]; k += 2)
			json_object_set_new(m, meta[k], json_string(meta[k + 1]));
		json_object_set_new(root, "__metadata__", m);
	}
	/* Header entries by name; look each one's begin up in the data order. */
	const st_item **byname = malloc((n ? n : 1) * sizeof *byname);
	if (byname) {
		memcpy(byname, ord, n * sizeof *ord);
		qsort(byname, n, sizeof *byname, cmp_name);
	}
	for (size_t i = 0; byname && i < n; i++) {
		size_t j = 0;
		while (ord[j] != byname[i])
			j++;
		const st_item *it = byname[i];
		json_t *o = json_object(), *shape = json_array(), *offs = json_array();
		json_object_set_new(o, "dtype", json_string(ptz_dtype_st(it->dtype)));
		for (int d = 0; d < it->ndim; d++)
			json_array_append_new(shape, json_integer(it->shape[d]));
		json_object_set_new(o, "shape", shape);
		json_array_append_new(offs, json_integer((json_int_t)begin[j]));
		json_array_append_new(offs, json_integer((json_int_t)(begin[j] + item_bytes(it))));
		json_object_set_new(o, "data_offsets", offs);
		json_object_set_new(root, it->name, o);
	}
	char *hdr = byname ? json_dumps(root, JSON_COMPACT) : NULL;
	free(byname);
	json_decref(root);
	int rc = 0;
	if (!hdr) {
		rc = err_set(err, "out of memory");
		goto out;
	}
	size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
	afile af;
	if (afile_open(&af, path, err)) {
		rc = -1;
		goto out;
	}
	rc = afile_write(&af, len8, 8, err) || afile_write(&af, hdr, hl, err) ||
	     afile_write(&af, "        ", padded - hl, err);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = afile_write(&af, ord[i]->data, (size_t)item_bytes(ord[i]), err);
	if (rc) {
		afile_abort(&af);
		rc = -1;
	} else {
		rc = afile_commit(&af, err);
	}
out:
	free(hdr);
	free(ord);
	free(begin);
	return rc;
}

/* DIR/STEM.safetensors.index.json naming the file of every item. */
static int write_index(const char *dir, const char *stem, const st_item *items, size_t n,
		       char names[][64], const int *file_of, titan_err *err)
{
	json_t *root = json_object(), *md = json_object(), *wm = json_object();
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		total += item_bytes(&items[i]);
		json_object_set_new(wm, items[i].name, json_string(names[file_of[i]]));
	}
	json_object_set_new(md, "total_size", json_integer((json_int_t)total));
	json_object_set_new(root, "metadata", md);
	json_object_set_new(root, "weight_map", wm);
	char index[80];
	snprintf(index, sizeof index, "%s.safetensors.index.json", stem);
	char *p = path_join(dir, index);
	int rc = p ? tjson_dump_file(root, p, err) : err_set(err, "out of memory");
	json_decref(root);
	free(p);
	return rc;
}

/* Files 1..m (file_of[i] is item i's), named STEM-0000K-of-0000M.safetensors,
 * or STEM.safetensors without an index when single. */
static int write_files(const char *dir, const char *stem, const st_item *items, size_t n,
		       const int *file_of, int m, int single, const char *const *meta,
		       titan_err *err)
{
	if (mkdir_p(dir, err))
		return -1;
	char (*names)[64] = calloc((size_t)m + 1, sizeof *names);
	st_item *part = malloc((n ? n : 1) * sizeof *part);
	int rc = names && part ? 0 : err_set(err, "out of memory");
	for (int f = 1; f <= m && rc == 0; f++) {
		if (single)
			snprintf(names[f], sizeof names[f], "%s.safetensors", stem);
		else
			snprintf(names[f], sizeof names[f], "%s-%05d-of-%05d.safetensors", stem, f, m);
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (file_of[i] == f)
				part[k++] = items[i];
		char *p = path_join(dir, names[f]);
		rc = p ? st_write(p, part, k, meta, err) : err_set(err, "out of memory");
		free(p);
	}
	if (rc == 0 && !single)
		rc = write_index(dir, stem, items, n, names, file_of, err);
	free(names);
	free(part);
	return rc;
}

int st_write_sharded(const char *dir, const st_item *items, size_t n, uint64_t max_shard,
		     const char *const *meta, titan_err *err)
{
	return st_write_sharded_as(dir, "model", items, n, max_shard, meta, err);
}

int st_write_sharded_as(const char *dir, const char *stem, const st_item *items, size_t n,
			uint64_t max_shard, const char *const *meta, titan_err *err)
{
	if (strlen(stem) > 24)
		return err_set(err, "%s: file stem '%s' longer than 24 bytes", dir, stem);
	/* Shards in the caller's order, a new one when the next tensor would not fit. */
	int *file_of = malloc((n ? n : 1) * sizeof *file_of);
	if (!file_of)
		return err_set(err, "out of memory");
	int m = 0;
	uint64_t cur = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = item_bytes(&items[i]);
		if (i == 0 || (cur > 0 && cur + b > max_shard)) {
			m++;
			cur = 0;
		}
		cur += b;
		file_of[i] = m;
	}
	int rc = write_files(dir, stem, items, n, file_of, m ? m : 1, m <= 1, meta, err);
	free(file_of);
	return rc;
}

int st_write_indexed(const char *dir, const st_item *items, size_t n, const int *file_of, int m,
		     const char *const *meta, titan_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (file_of[i] < 1 || file_of[i] > m)
			return err_set(err, "%s: %s: file %d is not in 1..%d", dir, items[i].name,
				       file_of[i], m);
	return write_files(dir, "model", items, n, file_of, m, 0, meta, err);
}

/* ---- sets ---- */

static int add_file(st_set *s, const char *path, titan_err *err)
{
	st_file *nf = realloc(s->files, (s->n + 1) * sizeof *nf);
	if (!nf)
		return err_set(err, "out of memory");
	s->files = nf;
	if (st_open(&s->files[s->n], path, err))
		return -1;
	s->n++;
	return 0;
}

static int open_index(st_set *s, const char *dir, const char *ip, titan_err *err)
{
	json_t *root = tjson_load_file(ip, 0, err), *wm = NULL;
	if (!root)
		return -1;
	int rc = tjson_get_object(root, "weight_map", &wm, ip, err);
	const char *k;
	json_t *v;
	/* Open each distinct file once, in first-mention order. */
	json_object_foreach(wm, k, v) {
		const char *f = json_string_value(v);
		if (rc == 0 && !f)
			rc = err_set(err, "%s: weight_map maps '%s' to %s, not to a file name", ip, k,
				     tjson_type_name(v));
		if (rc)
			continue;
		if (strchr(f, '/') || strstr(f, "..")) {
			rc = err_set(err, "%s: unsafe file name '%s'", ip, f);
			continue;
		}
		char *p = path_join(dir, f);
		if (!p) {
			rc = err_set(err, "out of memory");
			continue;
		}
		json_t *done = json_object_get(root, "__titan_opened");
		if (!done) {
			done = json_object();
			json_object_set_new(root, "__titan_opened", done);
		}
		if (!json_object_get(done, f)) {
			rc = add_file(s, p, err);
			json_object_set_new(done, f, json_true());
		}
		free(p);
	}
	json_object_foreach(wm, k, v) {
		if (rc == 0 && !st_set_find(s, k))
			rc = err_set(err, "%s: '%s' is mapped to %s but not in it", ip, k, json_string_value(v));
	}
	json_decref(root);
	return rc;
}

int st_set_open(st_set *s, const char *path, titan_err *err)
{
	memset(s, 0, sizeof *s);
	struct stat st;
	if (stat(path, &st) != 0)
		return err_errno(err, "%s", path);
	int rc;
	if (!S_ISDIR(st.st_mode)) {
		rc = add_file(s, path, err);
	} else {
		/* transformers' names, then diffusers' (a FluxTransformer2DModel's
		 * folder) */
		rc = 1;
		for (int k = 0; k < 2 && rc == 1; k++) {
			const char *stem = k ? "diffusion_pytorch_model" : "model";
			char ixn[64], onen[64];
			snprintf(ixn, sizeof ixn, "%s.safetensors.index.json", stem);
			snprintf(onen, sizeof onen, "%s.safetensors", stem);
			char *ip = path_join(path, ixn), *one = path_join(path, onen);
			if (!ip || !one)
				rc = err_set(err, "out of memory");
			else if (stat(ip, &st) == 0)
				rc = open_index(s, path, ip, err);
			else if (stat(one, &st) == 0)
				rc = add_file(s, one, err);
			free(ip);
			free(one);
		}
		if (rc == 1)
			rc = err_set(err, "%s: neither model.safetensors.index.json nor model.safetensors "
				     "(nor diffusers' diffusion_pytorch_model.*)", path);
	}
	if (rc)
		st_set_close(s);
	return rc;
}

void st_set_close(st_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		st_close(&s->files[i]);
	free(s->files);
	memset(s, 0, sizeof *s);
}

const st_tensor *st_set_find(const st_set *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++) {
		const st_tensor *t = st_find(&s->files[i], name);
		if (t)
			return t;
	}
	return NULL;
}
