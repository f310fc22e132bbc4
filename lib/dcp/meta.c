/* meta.c: the .metadata pickle, read and written.
 *
 * Python pickles these dataclasses as NEWOBJ(cls, ()) + BUILD(state dict),
 * TensorProperties as BUILD(5- or 6-tuple) through its __getstate__, torch.Size
 * as REDUCE(torch.Size, (tuple,)) and dtypes as the globals torch.float32 etc.
 * torch <= 2.3 wrote no storage_meta and no version. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/dcp_priv.h"

#define MD "torch.distributed.checkpoint.metadata"
#define FS "torch.distributed.checkpoint.filesystem"
#define OLD "torch.distributed._shard.sharded_tensor.metadata"

static const char *const md_globals[] = {
	MD " Metadata", MD " TensorStorageMetadata", MD " ChunkStorageMetadata",
	MD " BytesStorageMetadata", MD " MetadataIndex", MD " StorageMeta",
	MD " TensorProperties", MD " _MEM_FORMAT_ENCODING",
	OLD " TensorProperties", OLD " MEM_FORMAT_ENCODING",
	FS " _StorageInfo",
	"torch Size", "torch strided", "torch.serialization _get_layout",
	"torch float32", "torch bfloat16", "torch float16", "torch float64", "torch int64",
	"torch int32", "torch int16", "torch int8", "torch uint8", "torch bool",
	"pathlib PosixPath", "pathlib._local PosixPath", "pathlib WindowsPath",
	"pathlib._local WindowsPath", "collections OrderedDict", "_codecs encode",
	NULL,
};
static const pk_allow md_allow = {md_globals};

int64_t dcp_numel(int ndim, const int64_t *sizes)
{
	int64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= sizes[d];
	return n;
}

void dcp_entry_free(dcp_entry *e)
{
	free(e->fqn);
	for (size_t k = 0; k < e->n_chunks; k++)
		free(e->chunks[k].file);
	free(e->chunks);
	for (int k = 0; k < e->npath; k++)
		free(e->path[k]);
	free(e->path);
	memset(e, 0, sizeof *e);
}

/* The BUILD state of a dataclass instance, which Python pickles as a dict. */
static const pk_val *state_of(const pk_val *v, const char *cls)
{
	if (!v || v->kind != PK_OBJ || v->cls->kind != PK_GLOBAL || strcmp(v->cls->name, cls))
		return NULL;
	return v->state;
}

static int size_of(const pk_val *v, int64_t *out, int *n)
{
	if (!pk_obj_is(v, "torch", "Size") || v->args->n != 1)
		return -1;
	const pk_val *t = v->args->items[0];
	if ((t->kind != PK_TUPLE && t->kind != PK_LIST) || t->n > DCP_MAX_DIM)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		if (t->items[i]->kind != PK_INT || t->items[i]->i < 0)
			return -1;
		out[i] = t->items[i]->i;
	}
	*n = (int)t->n;
	return 0;
}

static dcp_dtype dtype_of(const pk_val *props)
{
	const pk_val *st = props ? props->state : NULL;
	const pk_val *dt = NULL;
	if (st && st->kind == PK_TUPLE && st->n >= 1)
		dt = st->items[0];
	else if (st && st->kind == PK_DICT)
		dt = pk_dict_get(st, "dtype");
	if (!dt || dt->kind != PK_GLOBAL || strcmp(dt->s, "torch"))
		return PTZ_NONE;
	return ptz_dtype_parse(dt->name);
}

static int parse_entry(dcp_entry *e, const pk_val *key, const pk_val *v, titan_err *err)
{
	if (key->kind != PK_STR)
		return err_set(err, "state_dict_metadata key is not a string");
	e->fqn = strdup(key->s);
	if (!e->fqn)
		return err_set(err, "out of memory");
	if (pk_obj_is(v, MD, "BytesStorageMetadata")) {
		e->kind = DCP_BYTES;
		e->chunks = calloc(1, sizeof *e->chunks);
		return e->chunks ? 0 : err_set(err, "out of memory");
	}
	const pk_val *st = state_of(v, "TensorStorageMetadata");
	if (!st || st->kind != PK_DICT)
		return err_set(err, "%s: not a TensorStorageMetadata or BytesStorageMetadata", e->fqn);
	e->kind = DCP_TENSOR;
	e->dtype = dtype_of(pk_dict_get(st, "properties"));
	if (e->dtype == PTZ_NONE)
		return err_set(err, "%s: missing or unsupported dtype", e->fqn);
	if (size_of(pk_dict_get(st, "size"), e->shape, &e->ndim))
		return err_set(err, "%s: bad size", e->fqn);
	/* Element counts and byte sizes are int64_t / size_t products everywhere:
	 * a shape whose bytes do not fit 2^62 is refused here, once. */
	int64_t numel = 1;
	for (int d = 0; d < e->ndim; d++)
		if (__builtin_mul_overflow(numel, e->shape[d], &numel) ||
		    numel > ((int64_t)1 << 62) / (int64_t)ptz_dtype_size(e->dtype))
			return err_set(err, "%s: a shape of %d dims holding more than 2^62 bytes",
				       e->fqn, e->ndim);
	const pk_val *ch = pk_dict_get(st, "chunks");
	if (!ch || ch->kind != PK_LIST)
		return err_set(err, "%s: no chunk list", e->fqn);
	e->chunks = calloc(ch->n ? ch->n : 1, sizeof *e->chunks);
	if (!e->chunks)
		return err_set(err, "out of memory");
	e->n_chunks = ch->n;
	for (size_t k = 0; k < ch->n; k++) {
		const pk_val *cs = state_of(ch->items[k], "ChunkStorageMetadata");
		int no, ns;
		if (!cs || size_of(pk_dict_get(cs, "offsets"), e->chunks[k].offsets, &no) ||
		    size_of(pk_dict_get(cs, "sizes"), e->chunks[k].sizes, &ns) || no != e->ndim ||
		    ns != e->ndim)
			return err_set(err, "%s: bad chunk %zu", e->fqn, k);
		for (int d = 0; d < e->ndim; d++)
			if (e->chunks[k].offsets[d] > e->shape[d] ||
			    e->chunks[k].sizes[d] > e->shape[d] - e->chunks[k].offsets[d])
				return err_set(err, "%s: chunk %zu lies outside the tensor", e->fqn, k);
	}
	return 0;
}

static dcp_entry *by_fqn(dcp_ckpt *c, const char *fqn)
{
	size_t i;
	return c->index && strmap_get(c->index, fqn, &i) ? &c->entries[i] : NULL;
}

/* The fqn -> entry map; a key given twice is refused. */
static int index_entries(dcp_ckpt *c, titan_err *err)
{
	if (!(c->index = calloc(1, sizeof *c->index)))
		return err_set(err, "out of memory");
	for (size_t i = 0; i < c->n; i++) {
		int rc = strmap_put(c->index, c->entries[i].fqn, i);
		if (rc < 0)
			return err_set(err, "out of memory");
		if (rc > 0)
			return err_set(err, "state_dict_metadata names '%s' twice", c->entries[i].fqn);
	}
	return 0;
}

static int parse_storage(dcp_ckpt *c, const pk_val *sd, titan_err *err)
{
	if (!sd || sd->kind != PK_DICT)
		return err_set(err, "storage_data is not a dict (not a FileSystemWriter checkpoint?)");
	for (size_t i = 0; i < sd->n; i++) {
		const pk_val *ix = state_of(sd->items[2 * i], "MetadataIndex");
		const pk_val *si = state_of(sd->items[2 * i + 1], "_StorageInfo");
		if (!ix || !si || ix->kind != PK_DICT || si->kind != PK_DICT)
			return err_set(err, "storage_data entry %zu is not MetadataIndex -> _StorageInfo", i);
		const pk_val *fqn = pk_dict_get(ix, "fqn"), *off = pk_dict_get(ix, "offset");
		const pk_val *idx = pk_dict_get(ix, "index");
		const pk_val *rp = pk_dict_get(si, "relative_path"), *so = pk_dict_get(si, "offset");
		const pk_val *sl = pk_dict_get(si, "length"), *td = pk_dict_get(si, "transform_descriptors");
		if (!fqn || fqn->kind != PK_STR || !rp || rp->kind != PK_STR || !so || so->kind != PK_INT ||
		    !sl || sl->kind != PK_INT || so->i < 0 || sl->i < 0)
			return err_set(err, "storage_data entry %zu is malformed", i);
		if (td && td->kind == PK_LIST && td->n > 0)
			return err_set(err, "%s: stored with transforms (%s...), which titan does not read",
				       fqn->s, td->items[0]->kind == PK_STR ? td->items[0]->s : "?");
		if (strstr(rp->s, "..") || strchr(rp->s, '/') || !rp->s[0])
			return err_set(err, "%s: unsafe relative path '%s'", fqn->s, rp->s);
		dcp_entry *e = by_fqn(c, fqn->s);
		if (!e)
			return err_set(err, "storage_data names '%s', absent from state_dict_metadata", fqn->s);
		dcp_chunk *ch = NULL;
		if (e->kind == DCP_BYTES) {
			ch = e->chunks;
			e->n_chunks = 1;
		} else {
			int64_t o[DCP_MAX_DIM];
			int no;
			if (size_of(off, o, &no) || no != e->ndim)
				return err_set(err, "%s: storage index without a valid offset", fqn->s);
			size_t hint = idx && idx->kind == PK_INT && idx->i >= 0 ? (size_t)idx->i : 0;
			for (size_t k = 0; k < e->n_chunks && !ch; k++) {
				size_t j = (hint + k) % e->n_chunks;
				if (!memcmp(e->chunks[j].offsets, o, sizeof(int64_t) * (size_t)no))
					ch = &e->chunks[j];
			}
			if (!ch)
				return err_set(err, "%s: storage for an offset no chunk has", fqn->s);
		}
		free(ch->file);
		ch->file = strdup(rp->s);
		if (!ch->file)
			return err_set(err, "out of memory");
		ch->offset = (uint64_t)so->i;
		ch->length = (uint64_t)sl->i;
	}
	for (size_t i = 0; i < c->n; i++)
		for (size_t k = 0; k < c->entries[i].n_chunks; k++)
			if (!c->entries[i].chunks[k].file)
				return err_set(err, "%s: chunk %zu has no storage", c->entries[i].fqn, k);
	return 0;
}

static int parse_paths(dcp_ckpt *c, const pk_val *pd)
{
	if (!pd || pd->kind != PK_DICT)
		return 0;
	for (size_t i = 0; i < pd->n; i++) {
		const pk_val *k = pd->items[2 * i], *v = pd->items[2 * i + 1];
		if (k->kind != PK_STR || v->kind != PK_TUPLE || v->n == 0 || v->n > 64)
			continue;
		dcp_entry *e = by_fqn(c, k->s);
		if (!e || e->path)
			continue;
		e->path = calloc(v->n, sizeof *e->path);
		if (!e->path)
			return -1;
		for (size_t j = 0; j < v->n; j++) {
			char num[32];
			const pk_val *p = v->items[j];
			if (p->kind == PK_INT)
				snprintf(num, sizeof num, "%" PRId64, p->i);
			e->path[j] = strdup(p->kind == PK_STR ? p->s : p->kind == PK_INT ? num : "?");
			if (!e->path[j])
				return -1;
			e->npath = (int)j + 1;
		}
	}
	return 0;
}

int dcp_meta_parse(dcp_ckpt *c, const uint8_t *buf, size_t n, titan_err *err)
{
	pk_val *root;
	pk_arena *a;
	int rc = pk_load(buf, n, &md_allow, &root, &a, err);
	if (rc)
		goto out;
	const pk_val *st = state_of(root, "Metadata");
	if (!st || st->kind != PK_DICT || !pk_obj_is(root, MD, "Metadata")) {
		rc = err_set(err, "not a torch.distributed.checkpoint Metadata pickle");
		goto out;
	}
	const pk_val *sdm = pk_dict_get(st, "state_dict_metadata");
	if (!sdm || sdm->kind != PK_DICT) {
		rc = err_set(err, "Metadata without state_dict_metadata");
		goto out;
	}
	c->entries = calloc(sdm->n ? sdm->n : 1, sizeof *c->entries);
	if (!c->entries) {
		rc = err_set(err, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < sdm->n && rc == 0; i++) {
		rc = parse_entry(&c->entries[i], sdm->items[2 * i], sdm->items[2 * i + 1], err);
		c->n = i + 1;
	}
	if (rc == 0)
		rc = index_entries(c, err);
	if (rc == 0)
		rc = parse_storage(c, pk_dict_get(st, "storage_data"), err);
	if (rc == 0 && parse_paths(c, pk_dict_get(st, "planner_data")))
		rc = err_set(err, "out of memory");
	const pk_val *ver = pk_dict_get(st, "version");
	if (rc == 0 && ver && ver->kind == PK_STR && !(c->version = strdup(ver->s)))
		rc = err_set(err, "out of memory");
out:
	pk_free(a);
	return rc;
}

/* ---- writing ---- */

typedef struct mw {
	pk_arena *a;
	int oom;
} mw;

static pk_val *chk(mw *w, pk_val *v)
{
	if (!v)
		w->oom = 1;
	return v;
}

static pk_val *tup(mw *w)
{
	return chk(w, pk_new(w->a, PK_TUPLE));
}

static void add(mw *w, pk_val *seq, pk_val *v)
{
	if (!v || !seq || pk_append(w->a, seq, v))
		w->oom = 1;
}

static void set(mw *w, pk_val *d, const char *k, pk_val *v)
{
	pk_val *key = pk_str(w->a, k);
	if (!key || !v || !d || pk_dict_set(w->a, d, key, v))
		w->oom = 1;
}

/* A dataclass instance: NEWOBJ(cls, ()) with a dict state. */
static pk_val *dataclass(mw *w, pk_val *cls, pk_val **state)
{
	pk_val *o = chk(w, pk_new(w->a, PK_OBJ));
	*state = chk(w, pk_new(w->a, PK_DICT));
	if (o) {
		o->cls = cls;
		o->args = tup(w);
		o->newobj = 1;
		o->state = *state;
	}
	return o;
}

static pk_val *reduce(mw *w, pk_val *cls, pk_val *args)
{
	pk_val *o = chk(w, pk_new(w->a, PK_OBJ));
	if (o) {
		o->cls = cls;
		o->args = args;
	}
	return o;
}

static pk_val *torch_size(mw *w, pk_val *cls, int n, const int64_t *v)
{
	pk_val *t = tup(w), *args = tup(w);
	for (int i = 0; i < n; i++)
		add(w, t, chk(w, pk_int(w->a, v[i])));
	add(w, args, t);
	return reduce(w, cls, args);
}

typedef struct classes {
	pk_val *md, *tsm, *csm, *bsm, *idx, *props, *memfmt, *sinfo, *size, *layout;
} classes;

static pk_val *props(mw *w, const classes *k, dcp_dtype dt)
{
	pk_val *o = chk(w, pk_new(w->a, PK_OBJ));
	if (!o)
		return NULL;
	o->cls = k->props;
	o->args = tup(w);
	o->newobj = 1;
	/* The 5-tuple every torch since 2.0 reads (2.15 also writes a 6th, strides). */
	pk_val *st = tup(w), *la = tup(w), *ma = tup(w);
	add(w, st, chk(w, pk_global(w->a, "torch", ptz_dtype_torch(dt))));
	add(w, la, chk(w, pk_str(w->a, "torch.strided")));
	add(w, st, reduce(w, k->layout, la));
	add(w, st, chk(w, pk_bool(w->a, 0)));
	add(w, ma, chk(w, pk_int(w->a, 0)));
	add(w, st, reduce(w, k->memfmt, ma));
	add(w, st, chk(w, pk_bool(w->a, 0)));
	o->state = st;
	return o;
}

static pk_val *storage_info(mw *w, const classes *k, const dcp_chunk *c)
{
	pk_val *st, *o = dataclass(w, k->sinfo, &st);
	set(w, st, "relative_path", chk(w, pk_str(w->a, c->file)));
	set(w, st, "offset", chk(w, pk_int(w->a, (int64_t)c->offset)));
	set(w, st, "length", chk(w, pk_int(w->a, (int64_t)c->length)));
	return o;
}

static pk_val *path_tuple(mw *w, const dcp_entry *e)
{
	pk_val *t = tup(w);
	char **p = e->path;
	int np = e->npath;
	char **own = NULL;
	if (!p && dcp_default_path(e->fqn, &own, &np) == 0)
		p = own;
	for (int i = 0; p && i < np; i++)
		add(w, t, chk(w, pk_str(w->a, p[i])));
	if (!p)
		w->oom = 1;
	for (int i = 0; own && i < np; i++)
		free(own[i]);
	free(own);
	return t;
}

static void one_entry(mw *w, const classes *k, const dcp_entry *e, pk_val *sdm, pk_val *sd,
		      pk_val *pd)
{
	pk_val *key = chk(w, pk_str(w->a, e->fqn)), *st;
	if (e->kind == DCP_BYTES) {
		if (pk_dict_set(w->a, sdm, key, dataclass(w, k->bsm, &st)))
			w->oom = 1;
		pk_val *ix, *io = dataclass(w, k->idx, &ix);
		set(w, ix, "fqn", key);
		set(w, ix, "index", chk(w, pk_new(w->a, PK_NONE)));
		if (pk_dict_set(w->a, sd, io, storage_info(w, k, &e->chunks[0])))
			w->oom = 1;
	} else {
		pk_val *tsm = dataclass(w, k->tsm, &st), *chunks = chk(w, pk_new(w->a, PK_LIST));
		set(w, st, "properties", props(w, k, e->dtype));
		set(w, st, "size", torch_size(w, k->size, e->ndim, e->shape));
		set(w, st, "chunks", chunks);
		for (size_t c = 0; c < e->n_chunks; c++) {
			pk_val *cs, *co = dataclass(w, k->csm, &cs);
			set(w, cs, "offsets", torch_size(w, k->size, e->ndim, e->chunks[c].offsets));
			set(w, cs, "sizes", torch_size(w, k->size, e->ndim, e->chunks[c].sizes));
			add(w, chunks, co);
			pk_val *ix, *io = dataclass(w, k->idx, &ix);
			set(w, ix, "fqn", key);
			set(w, ix, "index", chk(w, pk_int(w->a, (int64_t)c)));
			set(w, ix, "offset", torch_size(w, k->size, e->ndim, e->chunks[c].offsets));
			if (pk_dict_set(w->a, sd, io, storage_info(w, k, &e->chunks[c])))
				w->oom = 1;
		}
		if (!key || pk_dict_set(w->a, sdm, key, tsm))
			w->oom = 1;
	}
	if (!key || pk_dict_set(w->a, pd, key, path_tuple(w, e)))
		w->oom = 1;
}

int dcp_meta_write(const dcp_entry *e, size_t n, uint8_t **out, size_t *len, titan_err *err)
{
	mw w = {pk_arena_new(), 0};
	if (!w.a)
		return err_set(err, "out of memory");
	classes k = {
		chk(&w, pk_global(w.a, MD, "Metadata")),
		chk(&w, pk_global(w.a, MD, "TensorStorageMetadata")),
		chk(&w, pk_global(w.a, MD, "ChunkStorageMetadata")),
		chk(&w, pk_global(w.a, MD, "BytesStorageMetadata")),
		chk(&w, pk_global(w.a, MD, "MetadataIndex")),
		chk(&w, pk_global(w.a, MD, "TensorProperties")),
		chk(&w, pk_global(w.a, MD, "_MEM_FORMAT_ENCODING")),
		chk(&w, pk_global(w.a, FS, "_StorageInfo")),
		chk(&w, pk_global(w.a, "torch", "Size")),
		chk(&w, pk_global(w.a, "torch.serialization", "_get_layout")),
	};
	pk_val *st, *root = dataclass(&w, k.md, &st);
	pk_val *sdm = chk(&w, pk_new(w.a, PK_DICT)), *pd = chk(&w, pk_new(w.a, PK_DICT));
	pk_val *sd = chk(&w, pk_new(w.a, PK_DICT));
	for (size_t i = 0; i < n && !w.oom; i++)
		one_entry(&w, &k, &e[i], sdm, sd, pd);
	set(&w, st, "state_dict_metadata", sdm);
	set(&w, st, "planner_data", pd);
	set(&w, st, "storage_data", sd);
	/* StorageMeta is left None: torch <= 2.3 has no such class to unpickle. */
	set(&w, st, "storage_meta", chk(&w, pk_new(w.a, PK_NONE)));
	set(&w, st, "version", chk(&w, pk_str(w.a, "1.0.0")));
	int rc;
	if (w.oom) {
		rc = err_set(err, "out of memory");
	} else {
		pk_buf b = {0};
		rc = pk_dump(&b, root, 4, err);
		*out = b.p;
		*len = b.n;
		if (rc)
			free(b.p);
	}
	pk_free(w.a);
	return rc;
}

int dcp_default_path(const char *fqn, char ***path, int *npath)
{
	static const char *const tops[] = {"optimizer.", "lr_scheduler.", "dataloader.",
					   "train_state.", NULL};
	*path = calloc(2, sizeof **path);
	if (!*path)
		return -1;
	for (const char *const *t = tops; *t; t++) {
		size_t l = strlen(*t);
		if (!strncmp(fqn, *t, l) && fqn[l]) {
			(*path)[0] = strndup(fqn, l - 1);
			(*path)[1] = strdup(fqn + l);
			*npath = 2;
			return (*path)[0] && (*path)[1] ? 0 : -1;
		}
	}
	(*path)[0] = strdup(fqn);
	*npath = 1;
	return (*path)[0] ? 0 : -1;
}
