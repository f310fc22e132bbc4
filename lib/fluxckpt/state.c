/* state.c: the Flux training state as a DCP folder with torchtitan 0.3.0's
 * keys (fluxckpt.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bigmem.h"
#include "fluxckpt/fluxckpt.h"

/* The items of a state dict and everything they borrow until written. */
typedef struct bag {
	dcp_item *items;
	size_t n, cap;
	void **owned;
	size_t nowned, capowned;
} bag;

static void bag_free(bag *b)
{
	for (size_t i = 0; i < b->nowned; i++)
		free(b->owned[i]);
	free(b->owned);
	free(b->items);
}

/* p kept until bag_free (freed at once when it cannot be); NULL on failure. */
static void *own(bag *b, void *p)
{
	if (p == NULL)
		return NULL;
	if (b->nowned == b->capowned) {
		size_t c = b->capowned ? 2 * b->capowned : 256;
		void **q = realloc(b->owned, c * sizeof *q);
		if (q == NULL) {
			free(p);
			return NULL;
		}
		b->owned = q;
		b->capowned = c;
	}
	b->owned[b->nowned++] = p;
	return p;
}

static dcp_item *add(bag *b)
{
	if (b->n == b->cap) {
		size_t c = b->cap ? 2 * b->cap : 256;
		dcp_item *q = realloc(b->items, c * sizeof *q);
		if (q == NULL)
			return NULL;
		b->items = q;
		b->cap = c;
	}
	dcp_item *it = &b->items[b->n++];
	memset(it, 0, sizeof *it);
	return it;
}

/* a b c as one key, kept in the bag. */
static const char *key(bag *b, const char *a, const char *m, const char *c)
{
	size_t n = strlen(a) + strlen(m) + strlen(c) + 1;
	char *s = own(b, malloc(n));
	if (s != NULL)
		snprintf(s, n, "%s%s%s", a, m, c);
	return s;
}

static int add_tensor(bag *b, const char *fqn, dcp_dtype dt, int ndim, const int64_t *shape,
		      void *data, titan_err *err)
{
	static const int64_t scalar[1] = {1};
	dcp_item *it = fqn != NULL ? add(b) : NULL;
	if (it == NULL)
		return err_set(err, "out of memory");
	dcp_item_full(it, fqn, dt, ndim, ndim == 0 ? scalar : shape, data);
	return 0;
}

/* A bytes item holding a torch.save stream (taken by the bag); a load's
 * (bytes NULL) is filled by dcp_load. */
static dcp_item *add_bytes(bag *b, const char *fqn, uint8_t *bytes, size_t n)
{
	if (bytes != NULL && own(b, bytes) == NULL)
		return NULL;
	dcp_item *it = fqn != NULL ? add(b) : NULL;
	if (it == NULL)
		return NULL;
	it->fqn = fqn;
	it->kind = DCP_BYTES;
	it->bytes = bytes;
	it->nbytes = n;
	return it;
}

/* Use as `make(&p, &n) || put(...)`: || orders the two. */
static int put(bag *b, const char *fqn, uint8_t *p, size_t n, titan_err *err)
{
	return add_bytes(b, fqn, p, n) != NULL ? 0 : err_set(err, "out of memory");
}

int64_t fluxckpt_offset(const flux_model *m, int i)
{
	int64_t off = 0;
	for (int k = 0; k < i && k < flux_param_count(m); k++)
		off += flux_param_at(m, k)->numel;
	return off;
}

/* Parameter i's part on this rank: the whole tensor at its offset in the
 * model's flat run, or its rows of the flat shard. */
typedef struct chunk {
	int64_t off, row0, rows;
} chunk;

static chunk chunk_of(const fluxckpt_state *s, int i)
{
	if (s->fsdp == NULL)
		return (chunk){.off = fluxckpt_offset(s->model, i),
			       .rows = flux_param_at(s->model, i)->shape[0]};
	fluxfsdp_rows r = fluxfsdp_param_rows(s->fsdp, i);
	return (chunk){.off = r.off, .row0 = r.row0, .rows = r.rows};
}

/* The floats this rank holds: the model's, or its shard's. */
static size_t held(const fluxckpt_state *s)
{
	return (size_t)(s->fsdp ? fluxfsdp_numel(s->fsdp) : flux_model_numel(s->model));
}

static float *held_weights(const fluxckpt_state *s)
{
	return s->fsdp ? fluxfsdp_weights(s->fsdp) : flux_param_at(s->model, 0)->w;
}

/* Whether this rank writes the unsharded items (scalars, groups, state). */
static int writes_rest(const fluxckpt_state *s) { return s->fsdp == NULL || s->rank == 0; }

/* Parameter p's item for chunk c of data (elements of es bytes from
 * base); a rank that holds none of its rows adds nothing. */
static int add_chunk(bag *b, const char *fqn, dcp_dtype dt, const flux_param *p, const chunk *c,
		     void *base, size_t es, titan_err *err)
{
	if (c->rows == 0)
		return 0;
	if (add_tensor(b, fqn, dt, p->ndim, p->shape, (char *)base + (size_t)c->off * es, err))
		return -1;
	dcp_item *it = &b->items[b->n - 1];
	it->offsets[0] = c->row0;
	it->sizes[0] = c->rows;
	return 0;
}

/* n values of type t in backend memory as a new host float32 image (owned
 * by the bag). */
static float *to_host(bag *b, backend *be, const void *dev, be_dtype t, size_t n, titan_err *err)
{
	float *h = own(b, bigmem_alloc(n * sizeof(float) + 1));
	if (h == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	if (backend_download(be, t, h, dev, (int64_t)n, err) != 0 || be->ops->sync(be, err) != 0)
		return NULL;
	return h;
}

/* x (n floats) as dt: x itself for float32, else a converted copy. */
static void *as_dtype(bag *b, float *x, size_t n, dcp_dtype dt)
{
	if (dt == PTZ_F32)
		return x;
	void *y = own(b, bigmem_alloc(n * ptz_dtype_size(dt) + 1));
	if (y != NULL)
		ptz_convert(y, dt, x, PTZ_F32, n);
	return y;
}

static int add_model(bag *b, const fluxckpt_state *s, float *w, dcp_dtype dt, titan_err *err)
{
	const flux_model *m = s->model;
	uint8_t *data = as_dtype(b, w, held(s), dt);
	if (data == NULL)
		return err_set(err, "out of memory");
	for (int i = 0; i < flux_param_count(m); i++) {
		chunk c = chunk_of(s, i);
		if (add_chunk(b, flux_param_at(m, i)->name, dt, flux_param_at(m, i), &c, data,
			      ptz_dtype_size(dt), err) != 0)
			return -1;
	}
	return 0;
}

/* torchtitan saves the optimizer's states in their own type (bf16 under
 * fused_opt_states_bf16). */
static dcp_dtype state_dtype(const adamw *o)
{
	return adamw_state_dtype(o) == BE_BF16 ? PTZ_BF16 : PTZ_F32;
}

/* One parameter's AdamW group values, each its own key. */
static int add_group(bag *b, const fluxckpt_state *s, const flux_param *p, const optim_group *g,
		     titan_err *err)
{
	dcp_adamw_group ag = {.lr = adamw_group_lr(s->opt, g, s->cur_lr),
			      .initial_lr = adamw_group_lr(s->opt, g, s->base_lr),
			      .eps = g->eps, .weight_decay = g->weight_decay, .beta1 = g->beta1,
			      .beta2 = g->beta2, .adam = g->adam};
	uint8_t *vals[DCP_ADAMW_GROUP_KEYS];
	size_t lens[DCP_ADAMW_GROUP_KEYS];
	if (dcp_adamw_group_values(&ag, vals, lens, err) != 0)
		return -1;
	int rc = 0;
	for (int k = 0; k < DCP_ADAMW_GROUP_KEYS; k++) {
		char suffix[40];
		snprintf(suffix, sizeof suffix, ".%s", dcp_adamw_group_keys[k]);
		if (rc == 0)
			rc = put(b, key(b, "optimizer.param_groups.", p->name, suffix), vals[k], lens[k],
				 err);
		else
			free(vals[k]);
	}
	return rc;
}

static int add_optimizer(bag *b, const fluxckpt_state *s, titan_err *err)
{
	const flux_model *m = s->model;
	backend *be = flux_model_backend(m);
	size_t n = held(s);
	be_dtype bt = adamw_state_dtype(s->opt);
	dcp_dtype dt = state_dtype(s->opt);
	size_t es = ptz_dtype_size(dt);
	if (adamw_exp_avg_sq_numel(s->opt) != n)
		return err_set(err, "flux checkpoint: the optimizer holds %zu states, the model %zu "
			       "parameters (Muon's states are not saved for Flux)",
			       adamw_exp_avg_sq_numel(s->opt), n);
	float *ea = to_host(b, be, adamw_exp_avg(s->opt), bt, n, err);
	float *eas = ea ? to_host(b, be, adamw_exp_avg_sq(s->opt), bt, n, err) : NULL;
	if (eas == NULL)
		return -1;
	uint8_t *ea_s = as_dtype(b, ea, n, dt), *eas_s = as_dtype(b, eas, n, dt);
	float *stepv = own(b, malloc(sizeof(float)));
	if (ea_s == NULL || eas_s == NULL || stepv == NULL)
		return err_set(err, "out of memory");
	*stepv = (float)adamw_get_step(s->opt);
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		chunk c = chunk_of(s, i);
		const optim_group *g = adamw_group_of(s->opt, (size_t)c.off);
		if (g == NULL) /* frozen: torch's optimizer does not hold it */
			continue;
		if (g->kind != OPTIM_ADAMW)
			return err_set(err, "flux checkpoint: %s is in a Muon group; only AdamW's "
				       "state is saved for Flux", p->name);
		if (add_chunk(b, key(b, "optimizer.state.", p->name, ".exp_avg"), dt, p, &c, ea_s, es,
			      err) ||
		    add_chunk(b, key(b, "optimizer.state.", p->name, ".exp_avg_sq"), dt, p, &c, eas_s,
			      es, err))
			return -1;
		if (writes_rest(s) &&
		    (add_tensor(b, key(b, "optimizer.state.", p->name, ".step"), PTZ_F32, 0, NULL,
				stepv, err) ||
		     add_group(b, s, p, g, err)))
			return -1;
	}
	return 0;
}

/* A blob's name: a plain identifier, and not a key 0.3.0 reads. */
static int blob_name_ok(const char *name, titan_err *err)
{
	size_t n = name ? strlen(name) : 0;
	int ok = n > 0 && n < 128 && strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					     "0123456789_") == n;
	if (!ok || !strcmp(name, "step") || !strcmp(name, "ntokens_seen"))
		return err_set(err, "flux checkpoint: blob name '%s' is not an identifier other than "
			       "step and ntokens_seen", name ? name : "(null)");
	return 0;
}

/* The lr scheduler, data loader, train_state and titan's blobs. */
static int add_rest(bag *b, const fluxckpt_state *s, titan_err *err)
{
	uint8_t *p;
	size_t n;
	if (dcp_value_int(s->last_epoch, &p, &n, err) ||
	    put(b, "lr_scheduler.last_epoch", p, n, err))
		return -1;
	if (s->loader != NULL &&
	    (dcp_value_pybytes(s->loader, s->loader_len, &p, &n, err) ||
	     put(b, "dataloader.dp_rank_0", p, n, err) ||
	     dcp_value_int(s->dp_world > 0 ? s->dp_world : 1, &p, &n, err) ||
	     put(b, "dataloader.world_size", p, n, err)))
		return -1;
	if (dcp_value_int(s->step, &p, &n, err) || put(b, "train_state.step", p, n, err) ||
	    dcp_value_int(s->ntokens_seen, &p, &n, err) ||
	    put(b, "train_state.ntokens_seen", p, n, err))
		return -1;
	for (int i = 0; i < s->nblobs; i++) {
		const fluxckpt_blob *x = &s->blobs[i];
		if (blob_name_ok(x->name, err) ||
		    dcp_value_pybytes(x->p, x->n, &p, &n, err) ||
		    put(b, key(b, "train_state.", x->name, ""), p, n, err))
			return -1;
	}
	return 0;
}

/* A save in flight: its items and the host images they point into. */
struct fluxckpt_saver {
	bag b;
	dcp_saver *d;
	char *dir;
	int sharded; /* committed by fluxckpt_save_commit once every rank wrote */
};

static void saver_free(fluxckpt_saver *sv)
{
	bag_free(&sv->b);
	free(sv->dir);
	free(sv);
}

fluxckpt_saver *fluxckpt_save_begin(const char *dir, const fluxckpt_state *s,
				    const fluxckpt_save_opts *o, titan_err *err)
{
	static const fluxckpt_save_opts none = {0};
	if (o == NULL)
		o = &none;
	dcp_dtype dt = o->export_dtype == PTZ_NONE ? PTZ_F32 : o->export_dtype;
	if (dt != PTZ_F32 && dt != PTZ_BF16 && dt != PTZ_F16) {
		err_set(err, "%s: export dtype %s is not float32, bfloat16 or float16", dir,
			ptz_dtype_torch(dt));
		return NULL;
	}
	if (!o->model_only)
		dt = PTZ_F32; /* a full checkpoint keeps the masters as they are */
	fluxckpt_saver *sv = calloc(1, sizeof *sv);
	if (sv == NULL || (sv->dir = strdup(dir)) == NULL) {
		free(sv);
		err_set(err, "out of memory");
		return NULL;
	}
	/* the items point into host images of the state (to_host), so the
	 * caller may train on as soon as this returns */
	float *w = to_host(&sv->b, flux_model_backend(s->model), held_weights(s), BE_F32, held(s),
			   err);
	int rc = w ? add_model(&sv->b, s, w, dt, err) : -1;
	if (rc == 0 && !o->model_only)
		rc = (s->opt != NULL ? add_optimizer(&sv->b, s, err) : 0) ||
		     (writes_rest(s) ? add_rest(&sv->b, s, err) : 0);
	dcp_save_opts d = {.async = o->async, .no_fsync = o->no_fsync};
	sv->sharded = s->fsdp != NULL;
	if (rc == 0 && (sv->d = dcp_save_begin(dir, s->fsdp ? s->rank : 0, s->fsdp ? s->world : 1,
					       sv->b.items, sv->b.n, &d, err)) == NULL)
		rc = -1;
	if (rc != 0) {
		saver_free(sv);
		return NULL;
	}
	return sv;
}

int fluxckpt_save_wait(fluxckpt_saver *sv, titan_err *err)
{
	int rc = dcp_save_wait(sv->d, err);
	if (rc == 0 && !sv->sharded)
		rc = dcp_save_commit(sv->dir, 1, err);
	saver_free(sv);
	return rc;
}

int fluxckpt_save_commit(const char *dir, int world, titan_err *err)
{
	return dcp_save_commit(dir, world, err);
}

int fluxckpt_save(const char *dir, const fluxckpt_state *s, const fluxckpt_save_opts *o,
		  titan_err *err)
{
	fluxckpt_saver *sv = fluxckpt_save_begin(dir, s, o, err);
	return sv ? fluxckpt_save_wait(sv, err) : -1;
}

/* Load ------------------------------------------------------------------- */

/* The largest step a checkpoint may hold (a damaged or hostile step would
 * drive the schedule and the data position into nonsense). */
#define FLUXCKPT_MAX_STEP 1000000000000000LL

static int get_int(const dcp_item *it, int64_t *v, titan_err *err)
{
	return dcp_value_get_int(it->bytes, it->nbytes, v, err) ? err_prefix(err, "%s", it->fqn) : 0;
}

static int get_bytes(const dcp_item *it, uint8_t **p, size_t *n, titan_err *err)
{
	return dcp_value_get_pybytes(it->bytes, it->nbytes, p, n, err)
		       ? err_prefix(err, "%s", it->fqn) : 0;
}

/* The optimizer's items into host images ea, eas (float32) and one step per
 * parameter. */
static int want_optimizer(bag *b, const fluxckpt_state *s, float *ea, float *eas, float *steps,
			  titan_err *err)
{
	const flux_model *m = s->model;
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		chunk c = chunk_of(s, i);
		steps[i] = 0;
		if (adamw_group_of(s->opt, (size_t)c.off) == NULL)
			continue;
		if (add_chunk(b, key(b, "optimizer.state.", p->name, ".exp_avg"), PTZ_F32, p, &c, ea,
			      sizeof(float), err) ||
		    add_chunk(b, key(b, "optimizer.state.", p->name, ".exp_avg_sq"), PTZ_F32, p, &c,
			      eas, sizeof(float), err) ||
		    add_tensor(b, key(b, "optimizer.state.", p->name, ".step"), PTZ_F32, 0, NULL,
			       steps + i, err))
			return -1;
	}
	return 0;
}

/* The first step of the parameters the optimizer holds; every other must be
 * the same (torch counts one step for all). */
static int one_step(const fluxckpt_state *s, const float *steps, int64_t *step, const char *dir,
		    titan_err *err)
{
	const flux_model *m = s->model;
	int first = -1;
	for (int i = 0; i < flux_param_count(m); i++) {
		if (adamw_group_of(s->opt, (size_t)chunk_of(s, i).off) == NULL)
			continue;
		if (first < 0)
			first = i;
		if (steps[i] != steps[first])
			return err_set(err, "%s: optimizer.state.%s.step is %g, %s's %g: expected one "
				       "step for every parameter", dir, flux_param_at(m, i)->name,
				       (double)steps[i], flux_param_at(m, first)->name,
				       (double)steps[first]);
	}
	float v = first < 0 ? 0 : steps[first];
	if (!(v >= 0 && v <= 1e15f) || v != (float)(int64_t)v)
		return err_set(err, "%s: optimizer.state.%s.step is %g: expected a count of steps", dir,
			       flux_param_at(m, first)->name, (double)v);
	*step = (int64_t)v;
	return 0;
}

/* The scalar and bytes items: train_state, lr_scheduler, dataloader, blobs. */
typedef struct rest_items {
	size_t step, ntok, last_epoch, loader, world, blobs; /* indices in the bag; 0: none */
} rest_items;

static int want_rest(bag *b, const fluxckpt_state *s, int exclude, rest_items *r,
		     titan_err *err)
{
	memset(r, 0, sizeof *r);
	if (!(exclude & FLUXCKPT_TRAIN_STATE)) {
		r->step = b->n;
		if (!add_bytes(b, "train_state.step", NULL, 0) ||
		    !add_bytes(b, "train_state.ntokens_seen", NULL, 0))
			return err_set(err, "out of memory");
		r->ntok = r->step + 1;
		r->blobs = b->n;
		for (int i = 0; i < s->nblobs; i++) {
			dcp_item *it;
			if (blob_name_ok(s->blobs[i].name, err))
				return -1;
			if ((it = add_bytes(b, key(b, "train_state.", s->blobs[i].name, ""), NULL, 0)) ==
			    NULL)
				return err_set(err, "out of memory");
			it->optional = s->blobs[i].optional;
		}
	}
	if (!(exclude & FLUXCKPT_LR_SCHEDULER)) {
		r->last_epoch = b->n;
		if (!add_bytes(b, "lr_scheduler.last_epoch", NULL, 0))
			return err_set(err, "out of memory");
	}
	if (!(exclude & FLUXCKPT_DATALOADER)) {
		r->loader = b->n;
		dcp_item *l = add_bytes(b, "dataloader.dp_rank_0", NULL, 0);
		dcp_item *w = l ? add_bytes(b, "dataloader.world_size", NULL, 0) : NULL;
		if (w == NULL)
			return err_set(err, "out of memory");
		/* a run saved without a loader state has neither */
		l->optional = w->optional = 1;
		r->world = r->loader + 1;
	}
	return 0;
}

/* The values of the rest into s. */
static int take_rest(bag *b, fluxckpt_state *s, const rest_items *r, const char *dir,
		     fluxckpt_loaded *got, titan_err *err)
{
	if (r->step) {
		if (get_int(&b->items[r->step], &s->step, err) ||
		    get_int(&b->items[r->ntok], &s->ntokens_seen, err))
			return err_prefix(err, "%s", dir);
		if (s->step < 0 || s->step > FLUXCKPT_MAX_STEP || s->ntokens_seen < 0)
			return err_set(err, "%s: train_state.step %lld, ntokens_seen %lld: expected 0 <= "
				       "step <= %lld and ntokens_seen >= 0", dir, (long long)s->step,
				       (long long)s->ntokens_seen, (long long)FLUXCKPT_MAX_STEP);
		for (int i = 0; i < s->nblobs; i++) {
			dcp_item *it = &b->items[r->blobs + (size_t)i];
			fluxckpt_blob *x = &s->blobs[i];
			x->found = it->found;
			x->p = NULL;
			x->n = 0;
			if (it->found && get_bytes(it, &x->p, &x->n, err))
				return err_prefix(err, "%s", dir);
		}
		got->parts |= FLUXCKPT_TRAIN_STATE;
	}
	if (r->last_epoch) {
		if (get_int(&b->items[r->last_epoch], &s->last_epoch, err))
			return err_prefix(err, "%s", dir);
		if (s->last_epoch < 0 || s->last_epoch > FLUXCKPT_MAX_STEP)
			return err_set(err, "%s: lr_scheduler.last_epoch %lld: expected 0 <= it <= %lld",
				       dir, (long long)s->last_epoch, (long long)FLUXCKPT_MAX_STEP);
		got->parts |= FLUXCKPT_LR_SCHEDULER;
	}
	if (r->loader && b->items[r->loader].found) {
		if (get_bytes(&b->items[r->loader], &s->loader, &s->loader_len, err))
			return err_prefix(err, "%s", dir);
		got->parts |= FLUXCKPT_DATALOADER;
		s->dp_world = 1;
		if (b->items[r->world].found && get_int(&b->items[r->world], &s->dp_world, err))
			return err_prefix(err, "%s", dir);
	}
	return 0;
}

/* What a failed load had set: the loader and the blobs found. */
static void drop_bytes(fluxckpt_state *s, const fluxckpt_loaded *got)
{
	if (got->parts & FLUXCKPT_DATALOADER) {
		free(s->loader);
		s->loader = NULL;
		s->loader_len = 0;
	}
	for (int i = 0; i < s->nblobs; i++)
		if (s->blobs[i].found) {
			free(s->blobs[i].p);
			s->blobs[i].p = NULL;
			s->blobs[i].n = 0;
			s->blobs[i].found = 0;
		}
}

/* The images into backend memory: the weights, and the optimizer's states
 * in its type. */
static int upload(fluxckpt_state *s, const float *w, const float *ea, const float *eas,
		  titan_err *err)
{
	backend *be = flux_model_backend(s->model);
	int64_t n = (int64_t)held(s);
	if (backend_upload(be, BE_F32, held_weights(s), w, n, err) != 0)
		return -1;
	if (ea != NULL) {
		be_dtype bt = adamw_state_dtype(s->opt);
		if (backend_upload(be, bt, adamw_exp_avg(s->opt), ea, n, err) != 0 ||
		    backend_upload(be, bt, adamw_exp_avg_sq(s->opt), eas, n, err) != 0)
			return -1;
	}
	return be->ops->sync(be, err);
}

int fluxckpt_load(const char *dir, fluxckpt_state *s, int model_only, int exclude,
		  fluxckpt_loaded *got, titan_err *err)
{
	memset(got, 0, sizeof *got);
	for (int i = 0; i < s->nblobs; i++)
		s->blobs[i].found = 0;
	const flux_model *m = s->model;
	size_t n = held(s);
	dcp_ckpt ck;
	if (dcp_open(&ck, dir, err) != 0) /* its message names dir/.metadata */
		return -1;
	/* a checkpoint without train_state is a model-only one (0.3.0's rule:
	 * step 0 and last_save_model_only saves) */
	got->model_only = dcp_find(&ck, "train_state.step") == NULL;
	int full = !model_only && !got->model_only;
	int want_opt = full && s->opt != NULL && !(exclude & FLUXCKPT_OPTIMIZER);
	bag b = {0};
	float *w = own(&b, bigmem_calloc(n + 1, sizeof(float))); /* a shard's padding stays zero */
	float *ea = want_opt ? own(&b, bigmem_calloc(n + 1, sizeof(float))) : NULL;
	float *eas = want_opt ? own(&b, bigmem_calloc(n + 1, sizeof(float))) : NULL;
	float *steps = own(&b, calloc((size_t)flux_param_count(m) + 1, sizeof(float)));
	int rc = w && steps && (!want_opt || (ea && eas)) ? 0 : err_set(err, "out of memory");
	for (int i = 0; rc == 0 && i < flux_param_count(m); i++) {
		chunk c = chunk_of(s, i);
		rc = add_chunk(&b, flux_param_at(m, i)->name, PTZ_F32, flux_param_at(m, i), &c, w,
			       sizeof(float), err);
	}
	if (rc == 0 && want_opt && s->opt != NULL)
		rc = want_optimizer(&b, s, ea, eas, steps, err);
	rest_items r = {0};
	size_t first_bytes = b.n;
	if (rc == 0 && full)
		rc = want_rest(&b, s, exclude, &r, err);
	if (rc == 0)
		rc = dcp_load_open(&ck, b.items, b.n, err); /* its messages name dir */
	dcp_close(&ck);
	int64_t step = 0;
	/* the values land in a copy of s, handed over once all is read */
	fluxckpt_state t = *s;
	t.loader = NULL;
	t.loader_len = 0;
	if (rc == 0 && full)
		rc = take_rest(&b, &t, &r, dir, got, err);
	if (rc == 0 && want_opt)
		rc = one_step(s, steps, &step, dir, err);
	if (rc == 0)
		rc = upload(s, w, ea, eas, err);
	if (rc == 0 && want_opt) {
		adamw_set_step(s->opt, step);
		got->parts |= FLUXCKPT_OPTIMIZER;
	}
	if (rc != 0) { /* nothing half-loaded is handed back */
		drop_bytes(&t, got);
	} else {
		if (got->parts & FLUXCKPT_DATALOADER) {
			free(s->loader);
			s->loader = t.loader;
			s->loader_len = t.loader_len;
			s->dp_world = t.dp_world;
		}
		s->step = t.step;
		s->ntokens_seen = t.ntokens_seen;
		s->last_epoch = t.last_epoch;
	}
	for (size_t i = first_bytes; i < b.n; i++)
		free(b.items[i].bytes);
	bag_free(&b);
	return rc;
}
