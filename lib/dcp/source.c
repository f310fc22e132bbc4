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
	/* items a view of 0.3.0's fused q/k/v stands for, read through it */
	dcp_src_item *hidden;
	size_t nhidden, caphidden;
	int64_t head_dim; /* of the fused q/k/v: 0 while unknown */
	int names_now_030; /* the items are under 0.3.0's names now */
};

/* A view (dcp_src_item.view): the rows of wq (slot 0), wk (1) or wv (2) in
 * the fused item hidden[src[0]], or the fused whole (slot -1) of the items
 * hidden[src[0..2]]. */
typedef struct qkv_view {
	int slot;
	size_t src[3];
	int64_t hpk, hd;
	int alias; /* the fused tensor's step or param_groups value under slot's name */
} qkv_view;

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

/* An item's own memory; the storage handle (priv) of a .pt leaf only when
 * the item owns it (not an alias or a view's part). */
static void item_free(dcp_src_item *it, int owns_priv)
{
	free(it->name);
	for (int k = 0; k < it->npath; k++)
		free(it->path[k]);
	free(it->path);
	free((void *)it->view);
	if (owns_priv)
		free((void *)it->priv);
}

static int index_items(dcp_source *s, titan_err *err);

/* 0.3.0's fused q/k/v (see dcp.h) ------------------------------------------ */

static int push_item(dcp_src_item **a, size_t *n, size_t *cap, const dcp_src_item *it)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		dcp_src_item *q = realloc(*a, c * sizeof *q);
		if (q == NULL)
			return -1;
		*a = q;
		*cap = c;
	}
	(*a)[(*n)++] = *it;
	return 0;
}

/* s with its first `from` replaced by `to` (malloc'd); a copy when absent. */
static char *replaced(const char *s, const char *from, const char *to)
{
	const char *at = strstr(s, from);
	if (at == NULL)
		return strdup(s);
	size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
	char *r = malloc(n);
	if (r)
		snprintf(r, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
	return r;
}

/* *dst: src renamed (its name and path parts), with its own copy of a .pt
 * leaf; no view. */
static int renamed(dcp_source *s, dcp_src_item *dst, const dcp_src_item *src, const char *from,
		   const char *to)
{
	*dst = *src;
	dst->view = NULL;
	dst->name = replaced(src->name, from, to);
	dst->path = src->npath ? calloc((size_t)src->npath, sizeof *dst->path) : NULL;
	int bad = dst->name == NULL || (src->npath && dst->path == NULL);
	for (int k = 0; !bad && k < src->npath; k++)
		bad = (dst->path[k] = replaced(src->path[k], from, to)) == NULL;
	if (!bad && s->kind == SRC_PT && src->priv) {
		pt_leaf *l = malloc(sizeof *l);
		if (l)
			*l = *(const pt_leaf *)src->priv;
		dst->priv = l;
		bad = l == NULL;
	}
	return bad ? -1 : 0;
}

/* The query heads per kv head: the rows of the model's wq over wk's. */
static int64_t heads_per_kv(const dcp_source *s, const char *q_suffix, const char *k_suffix)
{
	int64_t q = 0, k = 0;
	for (size_t i = 0; i < s->n && (!q || !k); i++) {
		const dcp_src_item *it = &s->items[i];
		if (!dcp_is_model_key(it->name) || it->ndim < 1)
			continue;
		if (ends_with(it->name, q_suffix))
			q = it->shape[0];
		else if (ends_with(it->name, k_suffix))
			k = it->shape[0];
	}
	return q > 0 && k > 0 && q % k == 0 ? q / k : 0;
}

static const char *const slot_name[3] = {".attention.wq.", ".attention.wk.", ".attention.wv."};
static const char *const slot_name030[3] = {".qkv_linear.wq.", ".qkv_linear.wk.",
					    ".qkv_linear.wv."};
#define FUSED ".attention.qkv_linear.wqkv."

/* Split the fused item `it` (moved to hidden) into out: wq, wk, wv's rows
 * (a tensor of >= 1 dims) or copies (the step, param_groups). */
static int split_one(dcp_source *s, const dcp_src_item *it, int64_t hpk, dcp_src_item **out,
		     size_t *n, size_t *cap)
{
	size_t h = s->nhidden;
	if (push_item(&s->hidden, &s->nhidden, &s->caphidden, it) != 0)
		return -1;
	int rows = it->kind == DCP_TENSOR && it->ndim >= 1;
	int64_t group = (hpk + 2) * s->head_dim;
	for (int slot = 0; slot < 3; slot++) {
		dcp_src_item part;
		qkv_view *v = calloc(1, sizeof *v);
		if (v == NULL || renamed(s, &part, it, FUSED, slot_name[slot]) != 0) {
			free(v);
			return -1;
		}
		*v = (qkv_view){.slot = slot, .src = {h}, .hpk = hpk, .hd = s->head_dim, .alias = !rows};
		part.view = v;
		if (rows) {
			part.shape[0] = it->shape[0] / group * (slot == 0 ? hpk : 1) * s->head_dim;
			if (s->kind == SRC_PT)
				free((void *)part.priv);
			part.priv = NULL;
		}
		if (push_item(out, n, cap, &part) != 0)
			return -1;
	}
	return 0;
}

static int is_fused(const char *name)
{
	return !strncmp(name, "optimizer.", 10) && strstr(name, FUSED) != NULL;
}

/* The fused items' rows are whole kv groups of hpk query heads, a k and a v. */
static int check_fused(const dcp_source *s, int64_t hpk, titan_err *err)
{
	for (size_t i = 0; i < s->n; i++) {
		const dcp_src_item *it = &s->items[i];
		if (!is_fused(it->name))
			continue;
		if (hpk == 0)
			return err_set(err, "%s: 0.3.0's fused q/k/v, and no model attention.wq and "
				       "wk to tell the query heads per kv head", it->name);
		int64_t group = (hpk + 2) * s->head_dim;
		if (it->kind == DCP_TENSOR && it->ndim >= 1 && it->shape[0] % group != 0)
			return err_set(err, "%s: %" PRId64 " rows are not kv groups of %" PRId64
				       " (%" PRId64 " query heads per kv head, head dim %" PRId64 ")",
				       it->name, it->shape[0], group, hpk, s->head_dim);
	}
	return 0;
}

/* Every fused item split (the head dim known). */
static int split_fused(dcp_source *s, titan_err *err)
{
	int64_t hpk = heads_per_kv(s, ".attention.wq.weight", ".attention.wk.weight");
	if (check_fused(s, hpk, err) != 0)
		return -1;
	dcp_src_item *out = NULL;
	size_t n = 0, cap = 0, h0 = s->nhidden;
	int rc = 0;
	for (size_t i = 0; i < s->n && rc == 0; i++)
		rc = is_fused(s->items[i].name) ? split_one(s, &s->items[i], hpk, &out, &n, &cap)
						: push_item(&out, &n, &cap, &s->items[i]);
	if (rc != 0) { /* out of memory: the items stay as they were (parts made leak) */
		s->nhidden = h0;
		free(out);
		return err_set(err, "out of memory");
	}
	free(s->items);
	s->items = out;
	s->n = n;
	s->cap = cap;
	return 0;
}

/* Whether item i (under 0.3.0's names) is optimizer state of wq, wk or wv:
 * its slot, else -1. */
static int part_slot(const char *name)
{
	for (int slot = 0; slot < 3; slot++)
		if (!strncmp(name, "optimizer.", 10) && strstr(name, slot_name030[slot]))
			return slot;
	return -1;
}

/* The item of s named name with slot's spelling in place of wq's. */
static const dcp_src_item *sibling(const dcp_source *s, const char *qname, int slot)
{
	char *want = replaced(qname, slot_name030[0], slot_name030[slot]);
	const dcp_src_item *r = NULL;
	for (size_t i = 0; want && i < s->n && !r; i++)
		if (!strcmp(s->items[i].name, want))
			r = &s->items[i];
	free(want);
	return r;
}

enum { KEEP, HIDE, DROP }; /* what fusing does with an item */

/* wq's item q (under 0.3.0's names) and its wk, wv siblings as one fused
 * item into out: the fused item they were split from, back, or a view
 * fusing them (their step and param_groups: wq's, renamed).  fate[i]: what
 * becomes of item i. */
static int fuse_one(dcp_source *s, const dcp_src_item *q, int64_t hpk, char *fate,
		    dcp_src_item **out, size_t *n, size_t *cap, titan_err *err)
{
	const dcp_src_item *p[3] = {q, sibling(s, q->name, 1), sibling(s, q->name, 2)};
	if (p[1] == NULL || p[2] == NULL)
		return err_set(err, "%s: no matching wk and wv state to fuse with", q->name);
	const qkv_view *v = q->view;
	int tensor = q->kind == DCP_TENSOR && q->ndim >= 1;
	for (int k = 0; k < 3; k++)
		fate[p[k] - s->items] = tensor && v == NULL ? HIDE : DROP;
	if (v != NULL && v->slot == 0) { /* split on open: the stored item again */
		dcp_src_item *h = &s->hidden[v->src[0]];
		if (push_item(out, n, cap, h) != 0)
			return err_set(err, "out of memory");
		*h = (dcp_src_item){0}; /* out owns it now */
		return 0;
	}
	dcp_src_item whole;
	if (renamed(s, &whole, q, slot_name030[0], ".qkv_linear.wqkv.") != 0)
		return err_set(err, "out of memory");
	if (tensor) {
		qkv_view *w = calloc(1, sizeof *w);
		if (w == NULL)
			return err_set(err, "out of memory");
		*w = (qkv_view){.slot = -1, .hpk = hpk, .hd = s->head_dim};
		for (int k = 0; k < 3; k++) {
			w->src[k] = s->nhidden;
			if (push_item(&s->hidden, &s->nhidden, &s->caphidden, p[k]) != 0)
				return err_set(err, "out of memory");
		}
		whole.shape[0] = p[0]->shape[0] + p[1]->shape[0] + p[2]->shape[0];
		if (s->kind == SRC_PT)
			free((void *)whole.priv);
		whole.priv = NULL;
		whole.view = w;
	}
	return push_item(out, n, cap, &whole) ? err_set(err, "out of memory") : 0;
}

/* Every wq, wk, wv optimizer state (under 0.3.0's names) fused: what was
 * split on open, and with `genuine` a 0.2.2 source's too (the head dim
 * known). */
static int fuse_parts(dcp_source *s, int genuine, titan_err *err)
{
	int64_t hpk = heads_per_kv(s, ".qkv_linear.wq.weight", ".qkv_linear.wk.weight");
	char *fate = calloc(s->n + 1, 1);
	dcp_src_item *out = NULL;
	size_t n = 0, cap = 0;
	int rc = fate ? 0 : err_set(err, "out of memory");
	for (size_t i = 0; i < s->n && rc == 0; i++) {
		const dcp_src_item *it = &s->items[i];
		int slot = s->mla ? -1 : part_slot(it->name);
		if (slot < 0 || (!genuine && !it->view)) {
			rc = push_item(&out, &n, &cap, it) ? err_set(err, "out of memory") : 0;
		} else if (slot == 0 && !it->view && s->head_dim == 0) {
			rc = err_set(err, "%s: fusing wq, wk and wv's optimizer state into 0.3.0's "
				     "qkv_linear.wqkv needs the head dim (titan-ckpt-convert "
				     "--head-dim N)", it->name);
		} else if (slot == 0) {
			rc = hpk == 0 ? err_set(err, "%s: no model attention wq and wk to tell the "
						"query heads per kv head", it->name)
				      : fuse_one(s, it, hpk, fate, &out, &n, &cap, err);
		}
	}
	if (rc != 0) { /* the items stay as they were (what was made leaks) */
		free(fate);
		free(out);
		return -1;
	}
	for (size_t i = 0; i < s->n; i++)
		if (fate[i] == DROP)
			item_free(&s->items[i], s->kind == SRC_PT);
	free(fate);
	free(s->items);
	s->items = out;
	s->n = n;
	s->cap = cap;
	return 0;
}

static int read_view(dcp_source *s, const dcp_src_item *it, void *out, dcp_dtype dtype,
		     titan_err *err)
{
	const qkv_view *v = it->view;
	size_t row = ptz_dtype_size(dtype);
	for (int d = 1; d < it->ndim; d++)
		row *= (size_t)it->shape[d];
	for (int k = 0; k < (v->slot < 0 ? 3 : 1); k++) {
		const dcp_src_item *src = &s->hidden[v->src[k]];
		uint8_t *tmp = malloc((size_t)src->shape[0] * row + 1);
		if (tmp == NULL)
			return err_set(err, "out of memory");
		if (dcp_source_read(s, src, tmp, dtype, err) != 0) {
			free(tmp);
			return err_prefix(err, "%s", it->name);
		}
		int slot = v->slot < 0 ? k : v->slot;
		int64_t rows = v->slot < 0 ? src->shape[0] : it->shape[0];
		for (int64_t r = 0; r < rows; r++) {
			size_t f = (size_t)dcp_qkv_fused_row(slot, r, v->hpk, v->hd);
			if (v->slot < 0)
				memcpy((uint8_t *)out + f * row, tmp + (size_t)r * row, row);
			else
				memcpy((uint8_t *)out + (size_t)r * row, tmp + f * row, row);
		}
		free(tmp);
	}
	return 0;
}

/* The head dim a Qwen3 source tells: its q_norm's size. */
static int64_t head_dim_of(const dcp_source *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (ends_with(s->items[i].name, ".attention.q_norm.weight") && s->items[i].ndim == 1)
			return s->items[i].shape[0];
	return 0;
}

int dcp_source_has_fused_qkv(const dcp_source *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (is_fused(s->items[i].name))
			return 1;
	return 0;
}

int dcp_source_set_head_dim(dcp_source *s, int64_t head_dim, titan_err *err)
{
	s->head_dim = head_dim;
	if (s->names_now_030 || !dcp_source_has_fused_qkv(s))
		return 0;
	return split_fused(s, err) || index_items(s, err) ? -1 : 0;
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

static int names_as(dcp_source *s, int names_030, int genuine, titan_err *err)
{
	int changed = 0;
	if (respell_items(s, names_030, &changed, err) != 0)
		return -1;
	s->names_now_030 = names_030;
	int rc = 0;
	if (names_030)
		rc = fuse_parts(s, genuine, err);
	else if (s->head_dim > 0 && dcp_source_has_fused_qkv(s))
		rc = split_fused(s, err);
	return rc || index_items(s, err) ? -1 : 0;
}

int dcp_source_names(dcp_source *s, int names_030, titan_err *err)
{
	return names_as(s, names_030, 1, err);
}

int dcp_source_as_stored(dcp_source *s, titan_err *err)
{
	return s->names_030 ? names_as(s, 1, 0, err) : 0;
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
	s->head_dim = rc == 0 ? head_dim_of(s) : 0;
	if (rc == 0 && s->head_dim > 0 && dcp_source_has_fused_qkv(s))
		rc = split_fused(s, err);
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
	/* a .pt leaf is owned by its item, hidden or not (an alias has its own
	 * copy; a view has none) */
	for (size_t i = 0; i < s->n; i++)
		item_free(&s->items[i], s->kind == SRC_PT);
	for (size_t i = 0; i < s->nhidden; i++)
		item_free(&s->hidden[i], s->kind == SRC_PT);
	free(s->hidden);
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

static int read_view(dcp_source *s, const dcp_src_item *it, void *out, dcp_dtype dtype,
		     titan_err *err);

int dcp_source_read(dcp_source *s, const dcp_src_item *it, void *out, dcp_dtype dtype,
		    titan_err *err)
{
	if (it->kind != DCP_TENSOR)
		return err_set(err, "%s: not a tensor", it->name);
	const qkv_view *v = it->view;
	if (v && v->alias)
		return dcp_source_read(s, &s->hidden[v->src[0]], out, dtype, err);
	if (v)
		return read_view(s, it, out, dtype, err);
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
