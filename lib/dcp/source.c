/* source.c: DCP folders, torch.save files and safetensors behind one list of
 * named items (see dcp.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dcp/dcp_priv.h"
#include "safetensors/safetensors.h"

enum { SRC_DCP, SRC_PT, SRC_ST };

struct dcp_source {
	int kind;
	dcp_ckpt ck;
	mfile m;
	ptz_reader z;
	pk_arena *arena;
	st_set st;
	dcp_src_item *items;
	size_t n, cap;
	strmap index;   /* name -> item, made once the items are all there */
	int names_030;  /* the source named its tensors torchtitan 0.3.0's way */
	int mla;        /* its attention is MLA's (attention.wkv_a) */
};

/* Private per-item handles. */
typedef struct pt_leaf {
	const pk_val *val;
} pt_leaf;

int dcp_is_model_key(const char *name)
{
	static const char *const tops[] = {"optimizer.", "lr_scheduler.", "dataloader.",
					   "train_state.", NULL};
	for (const char *const *t = tops; *t; t++)
		if (!strncmp(name, *t, strlen(*t)))
			return 0;
	return strcmp(name, "optimizer") && strcmp(name, "lr_scheduler") &&
	       strcmp(name, "dataloader") && strcmp(name, "train_state");
}

static dcp_src_item *new_item(dcp_source *s)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		dcp_src_item *ni = realloc(s->items, cap * sizeof *ni);
		if (!ni)
			return NULL;
		s->items = ni;
		s->cap = cap;
	}
	dcp_src_item *it = &s->items[s->n++];
	memset(it, 0, sizeof *it);
	return it;
}

static int open_dcp(dcp_source *s, const char *path, titan_err *err)
{
	s->kind = SRC_DCP;
	if (dcp_open(&s->ck, path, err))
		return -1;
	for (size_t i = 0; i < s->ck.n; i++) {
		const dcp_entry *e = &s->ck.entries[i];
		dcp_src_item *it = new_item(s);
		if (!it || !(it->name = strdup(e->fqn)))
			return err_set(err, "out of memory");
		it->kind = e->kind;
		it->dtype = e->dtype;
		it->ndim = e->ndim;
		memcpy(it->shape, e->shape, sizeof it->shape);
		it->priv = e;
		if (e->path) {
			it->path = calloc((size_t)e->npath, sizeof *it->path);
			for (int k = 0; it->path && k < e->npath; k++)
				it->path[k] = strdup(e->path[k]);
			it->npath = it->path ? e->npath : 0;
		}
	}
	return 0;
}

static int is_tensor(const pk_val *v)
{
	return pk_obj_is(v, "torch._utils", "_rebuild_tensor_v2") ||
	       pk_obj_is(v, "torch._utils", "_rebuild_parameter");
}

/* Whether a tensor is inside v.  A pickle's memo shares nodes (a list nested
 * 40 deep as [L, L] is 2 KB and 2^40 paths), so the answer is kept in each
 * node's scratch and every node is looked at once: 1 no, 2 yes, 3 being
 * looked at (a cycle holds no tensor that its other paths do not show). */
static int has_tensor(const pk_val *v, int depth)
{
	if (v->scratch)
		return v->scratch == 2;
	if (depth > PK_MAX_DEPTH)
		return 0;
	int found = is_tensor(v);
	pk_val *m = (pk_val *)v;
	m->scratch = 3;
	if (!found && v->kind == PK_DICT) {
		for (size_t i = 0; i < v->n && !found; i++)
			found = has_tensor(v->items[2 * i + 1], depth + 1);
	} else if (!found && (v->kind == PK_LIST || v->kind == PK_TUPLE)) {
		for (size_t i = 0; i < v->n && !found; i++)
			found = has_tensor(v->items[i], depth + 1);
	}
	m->scratch = found ? 2 : 1;
	return found;
}

/* Each path through shared containers of a torch.save file is an entry of
 * its own (as torch's nesting reads it), so the walk is bounded: 256K values
 * is far beyond the state dict of a model saved as one .pt (checkpoints of
 * the largest models are DCP folders, read without this walk). */
#define PT_MAX_VISITS (1u << 18)

typedef struct walk {
	dcp_source *s;
	const char *parts[PK_MAX_DEPTH + 1];
	int depth;
	size_t visits;
	titan_err *err;
} walk;

static int add_leaf(walk *w, const pk_val *v)
{
	dcp_source *s = w->s;
	dcp_src_item *it = new_item(s);
	if (!it)
		return err_set(w->err, "out of memory");
	size_t len = 1;
	for (int i = 0; i < w->depth; i++)
		len += strlen(w->parts[i]) + 1;
	it->name = malloc(len);
	it->path = calloc((size_t)(w->depth ? w->depth : 1), sizeof *it->path);
	if (!it->name || !it->path)
		return err_set(w->err, "out of memory");
	it->name[0] = 0;
	for (int i = 0; i < w->depth; i++) {
		if (i)
			strcat(it->name, ".");
		strcat(it->name, w->parts[i]);
		if (!(it->path[i] = strdup(w->parts[i])))
			return err_set(w->err, "out of memory");
		it->npath = i + 1;
	}
	pt_leaf *leaf = malloc(sizeof *leaf);
	if (!leaf)
		return err_set(w->err, "out of memory");
	leaf->val = v;
	it->priv = leaf;
	if (is_tensor(v)) {
		ptz_tensor t;
		if (ptz_tensor_from_val(&s->z, v, &t, w->err))
			return err_prefix(w->err, "%s", it->name);
		it->kind = DCP_TENSOR;
		it->dtype = t.dtype;
		it->ndim = t.ndim;
		memcpy(it->shape, t.shape, sizeof(int64_t) * (size_t)t.ndim);
	} else {
		it->kind = DCP_BYTES;
	}
	return 0;
}

static int walk_val(walk *w, const pk_val *v)
{
	if (w->depth >= PK_MAX_DEPTH)
		return err_set(w->err, "torch.save file nested too deeply");
	if (++w->visits > PT_MAX_VISITS)
		return err_set(w->err, "torch.save file has more than %u values once its shared "
			       "references are followed", (unsigned)PT_MAX_VISITS);
	int container = v->kind == PK_DICT ||
			((v->kind == PK_LIST || v->kind == PK_TUPLE) && has_tensor(v, 0));
	if (!container || (w->depth > 0 && v->kind == PK_DICT && v->n == 0))
		return w->depth == 0 ? err_set(w->err, "torch.save file does not hold a dict")
				     : add_leaf(w, v);
	for (size_t i = 0; i < v->n; i++) {
		const pk_val *key = v->kind == PK_DICT ? v->items[2 * i] : NULL;
		const pk_val *val = v->kind == PK_DICT ? v->items[2 * i + 1] : v->items[i];
		char num[32];
		if (key && key->kind == PK_STR) {
			w->parts[w->depth] = key->s;
		} else if (!key || key->kind == PK_INT) {
			snprintf(num, sizeof num, "%" PRId64, key ? key->i : (int64_t)i);
			/* Keys must outlive the walk: keep them in the arena. */
			pk_val *k = pk_str(w->s->arena, num);
			if (!k)
				return err_set(w->err, "out of memory");
			w->parts[w->depth] = k->s;
		} else {
			return err_set(w->err, "dict key of unsupported kind in torch.save file");
		}
		w->depth++;
		int rc = walk_val(w, val);
		w->depth--;
		if (rc)
			return -1;
	}
	return 0;
}

static int open_pt(dcp_source *s, const char *path, titan_err *err)
{
	s->kind = SRC_PT;
	if (mfile_open(&s->m, path, err))
		return -1;
	if (ptz_open(&s->z, s->m.data, s->m.size, err))
		return err_prefix(err, "%s", path);
	const ptz_entry *e = ptz_find(&s->z, "data.pkl");
	if (!e)
		return err_set(err, "%s: no data.pkl", path);
	pk_val *root;
	if (pk_load(s->z.buf + e->data_off, (size_t)e->size, &ptz_allow, &root, &s->arena, err))
		return err_prefix(err, "%s", path);
	walk w = {.s = s, .err = err};
	if (walk_val(&w, root))
		return err_prefix(err, "%s", path);
	return 0;
}

static int open_st(dcp_source *s, const char *path, titan_err *err)
{
	s->kind = SRC_ST;
	if (st_set_open(&s->st, path, err))
		return -1;
	for (size_t f = 0; f < s->st.n; f++) {
		for (size_t i = 0; i < s->st.files[f].n; i++) {
			const st_tensor *t = &s->st.files[f].t[i];
			dcp_src_item *it = new_item(s);
			if (!it || !(it->name = strdup(t->name)))
				return err_set(err, "out of memory");
			it->kind = DCP_TENSOR;
			it->dtype = t->dtype;
			it->ndim = t->ndim;
			memcpy(it->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
			it->priv = t;
		}
	}
	return 0;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* s's names (and their planner paths' parts) respelled: 0.3.0's (to030) or
 * 0.2.2's; *changed when any was. */
static int respell_items(dcp_source *s, int to030, int *changed, titan_err *err)
{
	char buf[512];
	for (size_t i = 0; i < s->n; i++) {
		dcp_src_item *it = &s->items[i];
		for (int k = -1; k < it->npath; k++) {
			char **p = k < 0 ? &it->name : &it->path[k];
			const char *r = to030 ? dcp_name_030(*p, s->mla, buf, sizeof buf)
					      : dcp_name_022(*p, buf, sizeof buf);
			if (r == *p)
				continue;
			char *d = strdup(r);
			if (d == NULL)
				return err_set(err, "out of memory");
			free(*p);
			*p = d;
			*changed = 1;
		}
	}
	return 0;
}

static int index_items(dcp_source *s, titan_err *err)
{
	strmap_free(&s->index);
	memset(&s->index, 0, sizeof s->index);
	/* A name seen twice (a .pt whose nesting flattens to one key twice, or
	 * safetensors files sharing a tensor) keeps its first item. */
	for (size_t i = 0; i < s->n; i++)
		if (strmap_put(&s->index, s->items[i].name, i) < 0)
			return err_set(err, "out of memory");
	return 0;
}

int dcp_source_names(dcp_source *s, int names_030, titan_err *err)
{
	int changed = 0;
	return respell_items(s, names_030, &changed, err) || index_items(s, err) ? -1 : 0;
}

int dcp_source_is_030(const dcp_source *s)
{
	return s->names_030;
}

int dcp_source_open(dcp_source **out, const char *path, titan_err *err)
{
	dcp_source *s = calloc(1, sizeof *s);
	if (!s)
		return err_set(err, "out of memory");
	s->m.fd = -1;
	struct stat st;
	int rc;
	if (stat(path, &st) != 0) {
		rc = err_errno(err, "%s", path);
	} else if (S_ISDIR(st.st_mode)) {
		size_t n = strlen(path) + 16;
		char *mp = malloc(n);
		struct stat ms;
		if (mp)
			snprintf(mp, n, "%s/.metadata", path);
		rc = mp && stat(mp, &ms) == 0 ? open_dcp(s, path, err) : open_st(s, path, err);
		free(mp);
	} else if (ends_with(path, ".safetensors")) {
		rc = open_st(s, path, err);
	} else {
		rc = open_pt(s, path, err);
	}
	/* titan reads every torchtitan source under 0.2.2's names (Hugging Face's
	 * model.* and lm_head.weight are left alone) */
	int torchtitan = 0;
	for (size_t i = 0; rc == 0 && i < s->n; i++) {
		const char *nm = s->items[i].name;
		s->mla |= strstr(nm, ".attention.wkv_a.") != NULL;
		torchtitan |= !strncmp(nm, "tok_embeddings.", 15) || !strncmp(nm, "layers.", 7);
	}
	if (rc == 0 && torchtitan)
		rc = respell_items(s, 0, &s->names_030, err);
	if (rc == 0)
		rc = index_items(s, err);
	if (rc) {
		dcp_source_close(s);
		return -1;
	}
	*out = s;
	return 0;
}

void dcp_source_close(dcp_source *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->items[i].name);
		for (int k = 0; k < s->items[i].npath; k++)
			free(s->items[i].path[k]);
		free(s->items[i].path);
		if (s->kind == SRC_PT)
			free((void *)s->items[i].priv);
	}
	free(s->items);
	strmap_free(&s->index);
	if (s->kind == SRC_DCP)
		dcp_close(&s->ck);
	ptz_close(&s->z);
	pk_free(s->arena);
	if (s->m.fd >= 0)
		mfile_close(&s->m);
	st_set_close(&s->st);
	free(s);
}

size_t dcp_source_count(const dcp_source *s)
{
	return s->n;
}

const dcp_src_item *dcp_source_item(const dcp_source *s, size_t i)
{
	return i < s->n ? &s->items[i] : NULL;
}

const dcp_src_item *dcp_source_find(const dcp_source *s, const char *name)
{
	size_t i;
	return strmap_get(&s->index, name, &i) ? &s->items[i] : NULL;
}

int dcp_source_read(dcp_source *s, const dcp_src_item *it, void *out, dcp_dtype dtype,
		    titan_err *err)
{
	if (it->kind != DCP_TENSOR)
		return err_set(err, "%s: not a tensor", it->name);
	if (s->kind == SRC_DCP) {
		int64_t zero[DCP_MAX_DIM] = {0};
		return dcp_read_region(&s->ck, it->priv, zero, it->shape, dtype, out, err);
	}
	if (s->kind == SRC_ST) {
		const st_tensor *t = it->priv;
		ptz_convert(out, dtype, t->data, t->dtype, (size_t)dcp_numel(t->ndim, t->shape));
		return 0;
	}
	ptz_tensor t;
	if (ptz_tensor_from_val(&s->z, ((const pt_leaf *)it->priv)->val, &t, err) ||
	    ptz_tensor_copy(&t, out, dtype, err))
		return err_prefix(err, "%s", it->name);
	return 0;
}

int dcp_source_bytes(dcp_source *s, const dcp_src_item *it, uint8_t **out, size_t *n,
		     titan_err *err)
{
	if (it->kind != DCP_BYTES)
		return err_set(err, "%s: not a bytes item", it->name);
	if (s->kind == SRC_DCP) {
		const uint8_t *p;
		if (dcp_read_bytes(&s->ck, it->priv, &p, n, err))
			return -1;
		*out = malloc(*n ? *n : 1);
		if (!*out)
			return err_set(err, "out of memory");
		memcpy(*out, p, *n);
		return 0;
	}
	if (s->kind == SRC_PT)
		return dcp_value_save(((const pt_leaf *)it->priv)->val, out, n, err);
	return err_set(err, "%s: safetensors hold no bytes items", it->name);
}
