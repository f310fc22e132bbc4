#include "trainer/state.h"

#include <stdlib.h>
#include <string.h>

#include "core/bigmem.h"
#include "model/family.h"
#include "pickle/pickle.h"
#include "ptzip/ptzip.h"

/* Everything a state dict borrows lives here until the save is finished. */
struct tstate_saver {
	dcp_item *items;
	size_t n, cap;
	char **strs;      /* fqn strings */
	size_t nstrs, capstrs;
	void **blobs;     /* host buffers and torch.save streams */
	size_t nblobs, capblobs;
	dcp_saver *dcp;
	char *dir;
	int holds_images;  /* the kept staging images below are this saver's */
	size_t next_image;
	int names_030;     /* the model's tensors by torchtitan 0.3.0's names */
	int mla;           /* ... whose attention.wq is MLA's (kept) */
	/* 0.3.0 fuses q, k and v into one parameter, qkv_linear.wqkv (a GQA
	 * model: not MLA): its model state dict splits it back into wq, wk, wv,
	 * but the optimizer's state is the fused tensor's, whose rows are per kv
	 * group g the group's hpk query heads, then its k head, then its v head
	 * (models/common/attention.py, _merge_qkv_on_load). */
	int qkv_fused;
	int64_t hpk, head_dim, fused_rows;
};

/* The host images an asynchronous save stages (the shard's parameters and
 * optimizer states, their conversions), kept for the next save as torchtitan
 * keeps its pinned staging buffer: the k-th image of a save reuses the k-th of
 * the save before, so from the second save on staging costs its copies and
 * no allocation or page faults.  One saver holds them at a time (another
 * meanwhile allocates its own); synchronous saves do not keep them. */
typedef struct image {
	void *p;
	size_t cap;
} image;
static struct {
	image *img;
	size_t n, alloc;
	int busy;
} images;

static void saver_free(tstate_saver *sv)
{
	if (sv == NULL)
		return;
	for (size_t i = 0; i < sv->nstrs; i++)
		free(sv->strs[i]);
	for (size_t i = 0; i < sv->nblobs; i++)
		free(sv->blobs[i]);
	free(sv->strs);
	free(sv->blobs);
	free(sv->items);
	free(sv->dir);
	if (sv->holds_images)
		images.busy = 0;
	free(sv);
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 64;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static void *keep(tstate_saver *sv, void *blob)
{
	if (blob == NULL || grow((void **)&sv->blobs, &sv->capblobs, sv->nblobs, sizeof(void *)) != 0) {
		free(blob);
		return NULL;
	}
	sv->blobs[sv->nblobs++] = blob;
	return blob;
}

/* `bytes` of host memory for a staged image, alive until the save ends. */
static void *stage_image(tstate_saver *sv, size_t bytes)
{
	if (!sv->holds_images)
		return keep(sv, bigmem_alloc(bytes));
	size_t k = sv->next_image++;
	if (k == images.n) {
		if (grow((void **)&images.img, &images.alloc, images.n, sizeof(image)) != 0)
			return NULL;
		images.img[images.n++] = (image){NULL, 0};
	}
	image *im = &images.img[k];
	if (im->cap < bytes) { /* a bigger one: no copy of the old */
		free(im->p);
		im->cap = 0;
		if ((im->p = bigmem_alloc(bytes)) == NULL)
			return NULL;
		im->cap = bytes;
	}
	return im->p;
}

/* a b c as one fqn, under 0.3.0's names when the saver writes or reads them. */
static const char *name(tstate_saver *sv, const char *a, const char *b, const char *c)
{
	/* room for the longest respelling (moe.experts.* grows by 33 bytes) */
	size_t n = strlen(a) + strlen(b) + strlen(c) + 64;
	char *s = malloc(2 * n), *r = s + n;
	if (s == NULL || grow((void **)&sv->strs, &sv->capstrs, sv->nstrs, sizeof(char *)) != 0) {
		free(s);
		return NULL;
	}
	snprintf(s, n, "%s%s%s", a, b, c);
	if (sv->names_030 && dcp_name_030(s, sv->mla, r, n) == r)
		memmove(s, r, strlen(r) + 1);
	sv->strs[sv->nstrs++] = s;
	return s;
}

static dcp_item *add(tstate_saver *sv)
{
	if (grow((void **)&sv->items, &sv->cap, sv->n, sizeof(dcp_item)) != 0)
		return NULL;
	dcp_item *it = &sv->items[sv->n++];
	memset(it, 0, sizeof *it);
	return it;
}

static int add_tensor(tstate_saver *sv, const char *fqn, dcp_dtype dt, int ndim,
		      const int64_t *shape, void *data)
{
	dcp_item *it = add(sv);
	if (it == NULL || fqn == NULL)
		return -1;
	static const int64_t scalar_shape[1] = {1};
	dcp_item_full(it, fqn, dt, ndim, ndim == 0 ? scalar_shape : shape, data);
	return 0;
}

/* A chunk of a global tensor t: this rank's box b of it, at data. */
static dcp_item *add_box(tstate_saver *sv, const char *fqn, dcp_dtype dt, const model_tensor *t,
			 const plan_box *b, void *data)
{
	dcp_item *it = add(sv);
	if (it == NULL || fqn == NULL)
		return NULL;
	dcp_item_full(it, fqn, dt, t->ndim, t->shape, data);
	for (int d = 0; d < t->ndim; d++) {
		it->offsets[d] = b->offsets[d];
		it->sizes[d] = b->sizes[d];
	}
	return it;
}

/* Which of q (0), k (1), v (2) the tensor is (attention.wq/wk/wv, weight or
 * bias): -1 for any other. */
static int qkv_slot(const char *fqn)
{
	const char *at = strstr(fqn, ".attention.w");
	if (at == NULL || at[12] == '\0' || strchr("qkv", at[12]) == NULL || at[13] != '.')
		return -1;
	if (strcmp(at + 14, "weight") != 0 && strcmp(at + 14, "bias") != 0)
		return -1;
	return at[12] == 'q' ? 0 : at[12] == 'k' ? 1 : 2;
}

/* name(sv, a, fqn, c) with qkv_linear.wq/wk/wv spelled qkv_linear.wqkv. */
static const char *fused_name(tstate_saver *sv, const char *a, const char *fqn, const char *c)
{
	char *s = (char *)name(sv, a, fqn, c);
	char *at = s ? strstr(s, ".qkv_linear.w") : NULL;
	if (at == NULL || at[14] != '.')
		return NULL;
	/* room: name() allocated 64 bytes more than the unrenamed text */
	memmove(at + 16, at + 14, strlen(at + 14) + 1);
	memcpy(at + 13, "qkv", 3);
	return s;
}

/* A box of wq, wk or wv (slot) as chunks of 0.3.0's fused tensor: one per kv
 * group it meets, each a run of rows there (the box's rows are dim 0; the
 * other dims are the box's). */
static int add_qkv_pieces(tstate_saver *sv, const char *fqn, dcp_dtype dt, const model_tensor *t,
			  const plan_box *b, int slot, uint8_t *data)
{
	int64_t per = slot == 0 ? sv->hpk * sv->head_dim : sv->head_dim; /* rows per group */
	size_t row = ptz_dtype_size(dt);
	for (int d = 1; d < t->ndim; d++)
		row *= (size_t)b->sizes[d];
	int64_t r0 = b->offsets[0], r1 = b->offsets[0] + b->sizes[0];
	for (int64_t r = r0; r < r1;) {
		int64_t g = r / per, end = (g + 1) * per < r1 ? (g + 1) * per : r1;
		int64_t shape[3] = {sv->fused_rows, t->ndim > 1 ? t->shape[1] : 0,
				    t->ndim > 2 ? t->shape[2] : 0};
		dcp_item *it = add(sv);
		if (it == NULL || fqn == NULL)
			return -1;
		dcp_item_full(it, fqn, dt, t->ndim, shape, data + (size_t)(r - r0) * row);
		for (int d = 0; d < t->ndim; d++) {
			it->offsets[d] = b->offsets[d];
			it->sizes[d] = b->sizes[d];
		}
		it->offsets[0] = dcp_qkv_fused_row(slot, r, sv->hpk, sv->head_dim);
		it->sizes[0] = end - r;
		r = end;
	}
	return 0;
}

/* The optimizer's state `what` (exp_avg, exp_avg_sq) of tensor t's box b at
 * data: as t's own, or as chunks of the fused wqkv. */
static int add_state_box(tstate_saver *sv, const char *what, dcp_dtype dt, const model_tensor *t,
			 const plan_box *b, uint8_t *data)
{
	int slot = sv->qkv_fused ? qkv_slot(t->fqn) : -1;
	if (slot < 0)
		return add_box(sv, name(sv, "optimizer.state.", t->fqn, what), dt, t, b, data) ? 0 : -1;
	return add_qkv_pieces(sv, fused_name(sv, "optimizer.state.", t->fqn, what), dt, t, b, slot,
			      data);
}

/* The optimizer's fqn of t's per-parameter values (step, param_groups): the
 * fused wqkv's for q, none for k and v (the fused tensor has one set). */
static const char *param_fqn(tstate_saver *sv, const char *a, const model_tensor *t, const char *c,
			     int *skip)
{
	int slot = sv->qkv_fused ? qkv_slot(t->fqn) : -1;
	*skip = slot > 0;
	return slot == 0 ? fused_name(sv, a, t->fqn, c) : name(sv, a, t->fqn, c);
}

/* Fill the fused-qkv fields of sv for model g: used by a 0.3.0 run's save
 * (fused) and by a load whose checkpoint has the fused optimizer state. */
static void set_qkv_fused(tstate_saver *sv, const model *g, int fused)
{
	const llama_args *a = model_args(g);
	sv->qkv_fused = fused && !sv->mla && a->n_kv_heads > 0;
	if (!sv->qkv_fused)
		return;
	sv->head_dim = flavor_head_dim(a);
	sv->hpk = a->n_heads / a->n_kv_heads;
	sv->fused_rows = (int64_t)(a->n_heads + 2 * a->n_kv_heads) * sv->head_dim;
}

/* The first box of a tensor (offsets all 0): its rank writes the tensor's
 * replicated values (the optimizer's step and param_groups). */
static int first_box(const plan_box *b)
{
	if (!b->owner)
		return 0;
	for (int d = 0; d < b->ndim; d++)
		if (b->offsets[d] != 0)
			return 0;
	return 1;
}

static int add_bytes(tstate_saver *sv, const char *fqn, uint8_t *bytes, size_t n)
{
	dcp_item *it = add(sv);
	if (it == NULL || fqn == NULL || bytes == NULL)
		return -1;
	it->fqn = fqn;
	it->kind = DCP_BYTES;
	it->bytes = bytes;
	it->nbytes = n;
	return 0;
}

/* A whole shard buffer (of the plan's master type) copied to a new host
 * float32 image; NULL when out of memory or the copy failed. */
/* n elements of type t of a shard buffer (dev) as a float32 host image. */
static float *to_host(tstate_saver *sv, plan *p, const void *dev, be_dtype t, size_t n)
{
	titan_err e;
	float *h = stage_image(sv, n * sizeof(float) + 1);
	return h != NULL && plan_shard_download_n(p, h, dev, t, n, &e) == 0 ? h : NULL;
}

/* The checkpoint's type for what the run keeps in t: torchtitan saves its
 * tensors in their dtype (bf16 under training.dtype = "bfloat16"). */
static ptz_dtype saved_dtype(be_dtype t)
{
	return t == BE_BF16 ? PTZ_BF16 : PTZ_F32;
}

/* n floats of a host image as dt: the image itself for float32, else a kept
 * converted copy. */
static void *as_dtype(tstate_saver *sv, float *x, size_t n, ptz_dtype dt)
{
	if (dt == PTZ_F32)
		return x;
	void *y = stage_image(sv, n * ptz_dtype_size(dt) + 1);
	if (y != NULL)
		ptz_convert(y, dt, x, PTZ_F32, n);
	return y;
}

typedef struct val {
	uint8_t *p;
	size_t n;
} val;

/* The optimizer's per-parameter group values of group gr, as torch's AdamW
 * or Adam holds them (flatten_optimizer_state_dict gives every parameter FQN
 * its own group), or 0.3.0's DistMuon; lr the step's of the config's group
 * (the schedule's factor times its lr). */
static int group_values(tstate_saver *sv, const tstate *s, const optim_group *gr, val *v,
			const char **keys, int *nk, titan_err *err)
{
	adamw *opt = plan_optimizer(s->p);
	double lr = adamw_group_lr(opt, gr, s->cur_lr), lr0 = adamw_group_lr(opt, gr, s->base_lr);
	int k = 0;
#define FLOATV(key, x) (keys[k] = key, dcp_value_float(x, &v[k].p, &v[k].n, err) == 0 ? (keep(sv, v[k].p), k++, 0) : -1)
#define BOOLV(key, x) (keys[k] = key, dcp_value_bool(x, &v[k].p, &v[k].n, err) == 0 ? (keep(sv, v[k].p), k++, 0) : -1)
#define NONEV(key) (keys[k] = key, dcp_value_none(&v[k].p, &v[k].n, err) == 0 ? (keep(sv, v[k].p), k++, 0) : -1)
#define INTV(key, x) (keys[k] = key, dcp_value_int(x, &v[k].p, &v[k].n, err) == 0 ? (keep(sv, v[k].p), k++, 0) : -1)
#define STRV(key, x) (keys[k] = key, dcp_value_str(x, &v[k].p, &v[k].n, err) == 0 ? (keep(sv, v[k].p), k++, 0) : -1)
	if (gr->kind == OPTIM_MUON) {
		static const char *const adjust[] = {"original", "match_rms_adamw", "spectral_unclamped"};
		if (FLOATV("lr", lr) || FLOATV("weight_decay", gr->weight_decay) ||
		    FLOATV("momentum", gr->momentum) || BOOLV("nesterov", gr->nesterov) ||
		    FLOATV("eps", gr->eps) || INTV("ns_steps", gr->ns_steps) ||
		    (gr->adjust == MUON_ADJUST_ORIGINAL ? NONEV("adjust_lr_fn")
							: STRV("adjust_lr_fn", adjust[gr->adjust])) ||
		    FLOATV("initial_lr", lr0) || BOOLV("fused", 0) || BOOLV("foreach", 0))
			return -1;
		keys[k] = "ns_coefficients";
		if (dcp_value_floats(gr->ns, 3, 1, &v[k].p, &v[k].n, err) != 0)
			return -1;
		keep(sv, v[k].p);
		*nk = k + 1;
		return 0;
	}
#undef FLOATV
#undef BOOLV
#undef NONEV
#undef INTV
#undef STRV
	dcp_adamw_group ag = {.lr = lr, .initial_lr = lr0, .eps = gr->eps,
			      .weight_decay = gr->weight_decay, .beta1 = gr->beta1,
			      .beta2 = gr->beta2, .adam = gr->adam};
	uint8_t *vals[DCP_ADAMW_GROUP_KEYS];
	size_t lens[DCP_ADAMW_GROUP_KEYS];
	if (dcp_adamw_group_values(&ag, vals, lens, err) != 0)
		return -1;
	for (k = 0; k < DCP_ADAMW_GROUP_KEYS; k++) {
		keys[k] = dcp_adamw_group_keys[k];
		v[k] = (val){vals[k], lens[k]};
		keep(sv, vals[k]);
	}
	*nk = k;
	return 0;
}

/* Whether tensor t's box b is Muon's (its exp_avg is momentum_buffer, and it
 * has no exp_avg_sq or step). */
static int is_muon(plan *p, const plan_box *b)
{
	const optim_group *g = adamw_group_of(plan_optimizer(p), b->shard_off);
	return g && g->kind == OPTIM_MUON;
}

static int add_model(tstate_saver *sv, const tstate *s, const char *export_dtype, titan_err *err)
{
	const model *g = plan_global_model(s->p);
	float *params = to_host(sv, s->p, plan_shard_params(s->p), plan_shard_dtype(s->p), plan_shard_numel(s->p));
	if (params == NULL)
		return err_set(err, "out of memory");
	ptz_dtype dt = export_dtype ? ptz_dtype_parse(export_dtype) : PTZ_F32;
	if (dt != PTZ_F32 && dt != PTZ_BF16 && dt != PTZ_F16)
		return err_set(err, "checkpoint.export_dtype: %s is not float32, bfloat16 or float16",
			       export_dtype);
	/* torchtitan converts only to an export_dtype other than float32: bf16
	 * parameters stay bf16 under the default */
	if (dt == PTZ_F32)
		dt = saved_dtype(plan_shard_dtype(s->p));
	for (int i = 0; i < model_num_tensors(g); i++) {
		const model_tensor *t = model_tensor_at(g, i);
		const plan_box *b = plan_box_at(s->p, i);
		if (!b->owner)
			continue;
		void *data = params + b->shard_off;
		if (dt != PTZ_F32) {
			data = stage_image(sv, b->numel * ptz_dtype_size(dt));
			if (data == NULL)
				return err_set(err, "out of memory");
			ptz_convert(data, dt, params + b->shard_off, PTZ_F32, b->numel);
		}
		if (add_box(sv, name(sv, t->fqn, "", ""), dt, t, b, data) == NULL)
			return err_set(err, "out of memory");
		/* 0.3.0's tied model lists its lm_head beside its embedding (the same
		 * parameter, two keys of its state dict): so does its checkpoint */
		if (sv->names_030 && model_args(g)->tied_embeddings &&
		    strcmp(t->fqn, "tok_embeddings.weight") == 0 &&
		    add_box(sv, "lm_head.weight", dt, t, b, data) == NULL)
			return err_set(err, "out of memory");
	}
	/* Persistent buffers (MoE expert_bias), float32 as torchtitan keeps them:
	 * every rank holds the same (the counts that move them are summed over
	 * the batch ranks; tp ranks route the same tokens), rank 0 writes them. */
	model *m = plan_model(s->p);
	for (int i = 0; s->rank == 0 && i < model_num_buffers(m); i++) {
		const model_tensor *t = model_buffer_at(m, i);
		float *data = keep(sv, malloc(t->numel * sizeof(float)));
		if (data == NULL)
			return err_set(err, "out of memory");
		model_buffer_read(m, t, data);
		if (add_tensor(sv, name(sv, t->fqn, "", ""), PTZ_F32, t->ndim, t->shape, data) != 0)
			return err_set(err, "out of memory");
	}
	return 0;
}

static int add_optimizer(tstate_saver *sv, const tstate *s, titan_err *err)
{
	const model *g = plan_global_model(s->p);
	adamw *opt = plan_optimizer(s->p);
	size_t n = plan_shard_numel(s->p);
	be_dtype bt = adamw_state_dtype(opt); /* bf16 under fused_opt_states_bf16, as 0.3.0 saves */
	ptz_dtype st = saved_dtype(bt);
	size_t nv = adamw_exp_avg_sq_numel(opt); /* none for Muon's parameters */
	float *ea = to_host(sv, s->p, adamw_exp_avg(opt), bt, n);
	float *eas = to_host(sv, s->p, adamw_exp_avg_sq(opt), bt, nv);
	uint8_t *ea_s = ea ? as_dtype(sv, ea, n, st) : NULL;
	uint8_t *eas_s = eas ? as_dtype(sv, eas, nv, st) : NULL;
	size_t es = ptz_dtype_size(st);
	float *stepv = keep(sv, malloc(sizeof(float)));
	if (ea_s == NULL || eas_s == NULL || stepv == NULL)
		return err_set(err, "out of memory");
	*stepv = (float)adamw_get_step(opt);
	val v[16];
	const char *keys[16];
	int nk;
	for (int i = 0; i < model_num_tensors(g); i++) {
		const model_tensor *t = model_tensor_at(g, i);
		const plan_box *b = plan_box_at(s->p, i);
		if (!b->owner || t->frozen) /* LoRA: 0.3.0's optimizer holds the adapters alone */
			continue;
		int muon = is_muon(s->p, b);
		if (add_state_box(sv, muon ? ".momentum_buffer" : ".exp_avg", st, t, b,
				  ea_s + b->shard_off * es) != 0 ||
		    (!muon && add_state_box(sv, ".exp_avg_sq", st, t, b,
					    eas_s + adamw_exp_avg_sq_index(opt, b->shard_off) * es) != 0))
			return err_set(err, "out of memory");
		int skip;
		const char *stepk = param_fqn(sv, "optimizer.state.", t, ".step", &skip);
		if (!first_box(b) || skip)
			continue;
		if (group_values(sv, s, adamw_group_of(opt, b->shard_off), v, keys, &nk, err) != 0)
			return -1;
		if (!muon && add_tensor(sv, stepk, PTZ_F32, 0, NULL, stepv))
			return err_set(err, "out of memory");
		for (int k = 0; k < nk; k++) {
			char suffix[64];
			snprintf(suffix, sizeof suffix, ".%s", keys[k]);
			if (add_bytes(sv, param_fqn(sv, "optimizer.param_groups.", t, suffix, &skip),
				      v[k].p, v[k].n) != 0)
				return err_set(err, "out of memory");
		}
	}
	return 0;
}

/* Use as `make_value(&p, &n) || add_value(sv, fqn, p, n, err)`: || orders
 * the two calls. */
static int add_value(tstate_saver *sv, const char *fqn, uint8_t *p, size_t n, titan_err *err)
{
	keep(sv, p);
	if (add_bytes(sv, name(sv, fqn, "", ""), p, n) != 0)
		return err_set(err, "out of memory");
	return 0;
}

/* LambdaLR.state_dict() after `step` scheduler steps, flattened; 0.3.0's
 * container saves last_epoch alone (its schedules are functions of it). */
static int add_lr_scheduler(tstate_saver *sv, const tstate *s, titan_err *err)
{
	uint8_t *p = NULL;
	size_t n = 0;
	if (sv->names_030)
		return dcp_value_int(s->step, &p, &n, err) ||
		       add_value(sv, "lr_scheduler.last_epoch", p, n, err);
	pk_arena *a = pk_arena_new();
	if (a == NULL)
		return err_set(err, "out of memory");
	pk_val *lambdas = pk_new(a, PK_LIST);
	int rc = lambdas == NULL || pk_append(a, lambdas, pk_new(a, PK_NONE)) != 0
			 ? err_set(err, "out of memory")
			 : dcp_value_save(lambdas, &p, &n, err);
	pk_free(a);
	if (rc != 0 || add_value(sv, "lr_scheduler.lr_lambdas", p, n, err) != 0)
		return -1;
	if (dcp_value_floats(&s->base_lr, 1, 0, &p, &n, err) ||
	    add_value(sv, "lr_scheduler.base_lrs", p, n, err) ||
	    dcp_value_int(s->step, &p, &n, err) ||
	    add_value(sv, "lr_scheduler.last_epoch", p, n, err) ||
	    dcp_value_int(s->step + 1, &p, &n, err) ||
	    add_value(sv, "lr_scheduler._step_count", p, n, err) ||
	    dcp_value_bool(0, &p, &n, err) || add_value(sv, "lr_scheduler._is_initial", p, n, err) ||
	    dcp_value_bool(0, &p, &n, err) ||
	    add_value(sv, "lr_scheduler._get_lr_called_within_step", p, n, err) ||
	    dcp_value_floats(&s->cur_lr, 1, 0, &p, &n, err) ||
	    add_value(sv, "lr_scheduler._last_lr", p, n, err))
		return -1;
	return 0;
}

/* The loader's state is every rank's own (the same on each), saved under its
 * dp rank as torchtitan does; the replicated values by rank 0. */
static int add_rest(tstate_saver *sv, const tstate *s, titan_err *err)
{
	uint8_t *p;
	size_t n;
	char key[64];
	snprintf(key, sizeof key, "dataloader.dp_rank_%d", s->dp_rank);
	if (s->write_loader && (dcp_value_pybytes(s->loader, s->loader_len, &p, &n, err) ||
				add_value(sv, key, p, n, err)))
		return -1;
	if (s->rank != 0)
		return 0;
	if (dcp_value_int(s->dp_world, &p, &n, err) ||
	    add_value(sv, "dataloader.world_size", p, n, err) ||
	    dcp_value_int(s->step, &p, &n, err) || add_value(sv, "train_state.step", p, n, err) ||
	    dcp_value_int(s->ntokens_seen, &p, &n, err) ||
	    add_value(sv, "train_state.ntokens_seen", p, n, err))
		return -1;
	return 0;
}

tstate_saver *tstate_save_begin(const char *dir, const tstate *s, const tstate_save_opts *o,
				titan_err *err)
{
	tstate_saver *sv = calloc(1, sizeof *sv);
	if (sv == NULL || (sv->dir = strdup(dir)) == NULL) {
		saver_free(sv);
		err_set(err, "out of memory");
		return NULL;
	}
	if (o->async && !images.busy)
		images.busy = sv->holds_images = 1;
	sv->names_030 = s->names_030;
	sv->mla = model_args(plan_global_model(s->p))->mla.kv_lora_rank > 0;
	set_qkv_fused(sv, plan_global_model(s->p), sv->names_030 && !s->qkv_apart);
	int rc = add_model(sv, s, o->model_only ? o->export_dtype : NULL, err);
	if (rc == 0 && !o->model_only)
		rc = add_optimizer(sv, s, err) || (s->rank == 0 && add_lr_scheduler(sv, s, err)) ||
		     add_rest(sv, s, err);
	if (rc != 0) {
		saver_free(sv);
		return NULL;
	}
	dcp_save_opts dopts = {.async = o->async, .copy = 0};
	sv->dcp = dcp_save_begin(dir, s->rank, s->world, sv->items, sv->n, &dopts, err);
	if (sv->dcp == NULL) {
		saver_free(sv);
		return NULL;
	}
	return sv;
}

int tstate_save_wait(tstate_saver *sv, titan_err *err)
{
	int rc = dcp_save_wait(sv->dcp, err);
	saver_free(sv);
	return rc;
}

static int excluded(const cfg_strlist *ex, const char *part)
{
	for (int i = 0; ex != NULL && i < ex->n; i++)
		if (strcmp(ex->v[i], part) == 0)
			return 1;
	return 0;
}

/* Load ------------------------------------------------------------------- */

/* The largest step a checkpoint may hold (as config's training.steps bound). */
#define TSTATE_MAX_STEP 1000000000000000LL

static int load_int(dcp_item *it, int64_t *v, titan_err *err)
{
	int rc = dcp_value_get_int(it->bytes, it->nbytes, v, err);
	return rc != 0 ? err_prefix(err, "%s", it->fqn) : 0;
}

static int load_pybytes(dcp_item *it, uint8_t **out, size_t *n, titan_err *err)
{
	int rc = dcp_value_get_pybytes(it->bytes, it->nbytes, out, n, err);
	return rc != 0 ? err_prefix(err, "%s", it->fqn) : 0;
}

/* Whether a checkpoint holds the optimizer's state of 0.3.0's fused wqkv. */
static int has_fused_qkv(const dcp_ckpt *c)
{
	for (size_t i = 0; i < c->n; i++) {
		const char *f = c->entries[i].fqn;
		if (strncmp(f, "optimizer.state.", 16) == 0 && strstr(f, ".qkv_linear.wqkv."))
			return 1;
	}
	return 0;
}

int tstate_load(const char *dir, tstate *s, int model_only, const cfg_strlist *exclude,
		dcp_parts *parts, tstate_loaded *got, titan_err *err)
{
	memset(got, 0, sizeof *got);
	got->loader_world = 1;
	tstate_saver *b = calloc(1, sizeof *b);
	if (b == NULL)
		return err_set(err, "out of memory");
	const model *g = plan_global_model(s->p);
	dcp_ckpt ck;
	if (dcp_open(&ck, dir, err) != 0) {
		saver_free(b);
		return err_prefix(err, "%s", dir);
	}
	b->names_030 = dcp_names_are_030(&ck); /* either layout loads */
	b->mla = model_args(g)->mla.kv_lora_rank > 0;
	set_qkv_fused(b, g, has_fused_qkv(&ck));
	adamw *opt = plan_optimizer(s->p);
	size_t n = plan_shard_numel(s->p);
	int want_opt = !model_only && !excluded(exclude, "optimizer");
	/* zeroed: FSDP's padding stays zero */
	float *params = keep(b, bigmem_calloc(n + 1, sizeof(float)));
	float *ea = want_opt ? keep(b, bigmem_calloc(n + 1, sizeof(float))) : NULL;
	size_t nv = adamw_exp_avg_sq_numel(opt); /* none for Muon's parameters */
	float *eas = want_opt ? keep(b, bigmem_calloc(nv + 1, sizeof(float))) : NULL;
	float *stepv = keep(b, malloc(sizeof(float)));
	int rc = params == NULL || stepv == NULL || (want_opt && (ea == NULL || eas == NULL))
			 ? err_set(err, "out of memory") : 0;
	int step_item = 0; /* the optimizer's step of the first tensor this rank holds */
	for (int i = 0; rc == 0 && i < model_num_tensors(g); i++) {
		const model_tensor *t = model_tensor_at(g, i);
		const plan_box *x = plan_box_at(s->p, i);
		if (x->numel == 0)
			continue;
		if (add_box(b, name(b, t->fqn, "", ""), PTZ_F32, t, x, params + x->shard_off) == NULL) {
			rc = err_set(err, "out of memory");
			break;
		}
		if (!want_opt || t->frozen)
			continue;
		size_t first = b->n;
		int skip, muon = is_muon(s->p, x);
		if ((!step_item && !muon &&
		     add_tensor(b, param_fqn(b, "optimizer.state.", t, ".step", &skip), PTZ_F32, 0, NULL,
				stepv)) ||
		    add_state_box(b, muon ? ".momentum_buffer" : ".exp_avg", PTZ_F32, t, x,
				  (uint8_t *)(ea + x->shard_off)) != 0 ||
		    (!muon && add_state_box(b, ".exp_avg_sq", PTZ_F32, t, x,
					    (uint8_t *)(eas + adamw_exp_avg_sq_index(opt, x->shard_off))) != 0)) {
			rc = err_set(err, "out of memory");
			break;
		}
		step_item |= !muon;
		for (size_t k = first; k < b->n; k++) /* absent from a model-only checkpoint; checked below */
			b->items[k].optional = 1;
	}
	/* Buffers: absent from an HF import or a dense checkpoint, they keep their
	 * initial values (expert_bias 0). */
	size_t first_buffer = b->n;
	model *m = plan_model(s->p);
	for (int i = 0; rc == 0 && i < model_num_buffers(m); i++) {
		const model_tensor *t = model_buffer_at(m, i);
		float *data = keep(b, malloc(t->numel * sizeof(float)));
		if (data == NULL ||
		    add_tensor(b, name(b, t->fqn, "", ""), PTZ_F32, t->ndim, t->shape, data) != 0)
			rc = err_set(err, "out of memory");
		else
			b->items[b->n - 1].optional = 1;
	}
	size_t first_bytes = b->n;
	const char *scalars[] = {"train_state.step", "train_state.ntokens_seen", "dataloader.dp_rank_0",
				 "lr_scheduler.last_epoch", "dataloader.world_size"};
	if (rc == 0 && !model_only)
		for (int i = 0; i < 5; i++) {
			const char *part = i < 2 ? "train_state" : i == 3 ? "lr_scheduler" : "dataloader";
			if (excluded(exclude, part))
				continue;
			dcp_item *it = add(b);
			if (it == NULL) {
				rc = err_set(err, "out of memory");
				break;
			}
			it->fqn = scalars[i];
			it->kind = DCP_BYTES;
			it->optional = 1; /* absent in a model-only checkpoint */
		}
	if (rc == 0 && dcp_load_parts(&ck, b->items, b->n, parts, err) != 0)
		rc = err_prefix(err, "%s", dir);
	dcp_close(&ck);
	int have_train_state = 0;
	for (size_t i = first_bytes; rc == 0 && i < b->n; i++) {
		dcp_item *it = &b->items[i];
		if (!it->found)
			continue;
		if (strcmp(it->fqn, "train_state.step") == 0) {
			rc = load_int(it, &s->step, err);
			have_train_state = 1;
			got->train_state = 1;
		} else if (strcmp(it->fqn, "train_state.ntokens_seen") == 0) {
			rc = load_int(it, &s->ntokens_seen, err);
		} else if (strcmp(it->fqn, "dataloader.dp_rank_0") == 0) {
			free(s->loader);
			s->loader = NULL;
			rc = load_pybytes(it, &s->loader, &s->loader_len, err);
			got->dataloader = rc == 0;
		} else if (strcmp(it->fqn, "lr_scheduler.last_epoch") == 0) {
			got->lr_scheduler = 1;
		} else if (strcmp(it->fqn, "dataloader.world_size") == 0) {
			rc = load_int(it, &got->loader_world, err);
		}
	}
	for (size_t i = first_bytes; i < b->n; i++)
		free(b->items[i].bytes);
	/* A step drives the lr schedule and the data position: a negative or
	 * absurd one (a damaged or hostile checkpoint) would train nonsense. */
	if (rc == 0 && have_train_state &&
	    (s->step < 0 || s->step > TSTATE_MAX_STEP || s->ntokens_seen < 0))
		rc = err_set(err, "%s: train_state.step %lld, ntokens_seen %lld: expected 0 <= step "
			     "<= %lld and ntokens_seen >= 0", dir, (long long)s->step,
			     (long long)s->ntokens_seen, (long long)TSTATE_MAX_STEP);
	if (rc == 0 && want_opt && have_train_state && !(*stepv >= 0 && *stepv <= 1e15f))
		rc = err_set(err, "%s: optimizer.state.*.step is %g: expected a count of steps", dir,
			     (double)*stepv);
	got->had_train_state = have_train_state;
	for (size_t i = 0; rc == 0 && want_opt && have_train_state && i < first_buffer; i++)
		if (!b->items[i].found)
			rc = err_set(err, "%s: %s missing (a model-only checkpoint? set "
				     "checkpoint.exclude_from_loading = [\"optimizer\"])", dir, b->items[i].fqn);
	for (size_t i = first_buffer; rc == 0 && i < first_bytes; i++)
		if (b->items[i].found)
			model_buffer_write(m, model_buffer_at(m, (int)(i - first_buffer)),
					   b->items[i].data);
	if (rc == 0) {
		/* into the types the run keeps (DCP converted from what was saved) */
		rc = plan_shard_upload(s->p, plan_shard_params(s->p), params, err);
		if (rc == 0 && want_opt && have_train_state) {
			be_dtype bt = adamw_state_dtype(opt);
			rc = plan_shard_upload_n(s->p, adamw_exp_avg(opt), bt, ea, n, err) ||
			     plan_shard_upload_n(s->p, adamw_exp_avg_sq(opt), bt, eas, nv, err);
			adamw_set_step(opt, step_item ? (int64_t)*stepv : 0);
			got->optimizer = 1;
		}
	}
	saver_free(b);
	return rc;
}

/* Hugging Face safetensors ------------------------------------------------ */

/* The HF mapping of the model's family (its key table and config writer)
 * with the dims titan-ckpt-convert would infer from the checkpoint. */
static dcp_hf_model hf_model_of(const model *m)
{
	const llama_args *a = model_args(m);
	const model_family *f = model_get_family(m);
	const mla_args *ml = &a->mla;
	dcp_hf_model h = {.dim = a->dim, .n_layers = a->n_layers, .n_heads = a->n_heads,
			  .n_kv_heads = a->n_kv_heads, .vocab_size = a->vocab_size,
			  .ffn_hidden = model_ffn_hidden(m), .head_dim = flavor_head_dim(a),
			  .norm_eps = a->norm_eps, .rope_theta = a->rope_theta,
			  .rope_scale_factor = a->rope_scale_factor, .tied = a->tied_embeddings,
			  .max_seq_len = a->max_seq_len, .n_experts = a->moe.experts,
			  .top_k = a->moe.top_k, .moe_inter = a->moe.inter_dim,
			  .route_norm = a->moe.route_norm, .dense_layers = a->moe.dense_layers,
			  .mtp_layers = a->mtp_layers,
			  .q_lora = ml->q_lora_rank, .kv_lora = ml->kv_lora_rank,
			  .qk_nope = ml->qk_nope_head_dim, .qk_rope = ml->qk_rope_head_dim,
			  .v_head = ml->v_head_dim, .keys = f->hf_keys, .args = a,
			  .config = f->hf_config};
	if (ml->kv_lora_rank > 0)
		h.head_dim = ml->qk_nope_head_dim + ml->qk_rope_head_dim;
	return h;
}

typedef struct hf_load {
	const plan *p;
	model *local;    /* the rank's model: its buffers (expert_bias) */
	const model *g;  /* the global tensors */
	float *shard;    /* host image of the rank's shard */
} hf_load;

/* Each HF tensor, whole (named and shaped as the model's: dcp_hf_read checks
 * against hm.model), gives the rank its box. */
static int put_hf_tensor(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			 void *data, titan_err *err)
{
	hf_load *h = vctx;
	const model_tensor *t = model_tensor_find(h->g, name);
	float *whole = NULL;
	int rc = 0;
	(void)ndim;
	(void)shape;
	const model_tensor *buf = t ? NULL : model_buffer_find(h->local, name);
	if (buf != NULL && dt == PTZ_F32) { /* expert_bias, whole on every rank */
		model_buffer_write(h->local, buf, data);
	} else if (buf != NULL && (whole = malloc(buf->numel * sizeof(float) + 1)) != NULL) {
		ptz_convert(whole, PTZ_F32, data, dt, buf->numel);
		model_buffer_write(h->local, buf, whole);
	} else if (buf != NULL) {
		rc = err_set(err, "out of memory");
	} else if (t == NULL) {
		rc = 0; /* output.weight of a tied model: the embedding, held once */
	} else if ((whole = malloc(t->numel * sizeof(float) + 1)) == NULL) {
		rc = err_set(err, "out of memory");
	} else {
		ptz_convert(whole, PTZ_F32, data, dt, t->numel);
		plan_box_extract(h->p, (int)(t - model_tensor_at(h->g, 0)), whole, h->shard);
	}
	free(whole);
	free(data);
	return rc;
}

int tstate_load_hf(const char *dir, tstate *s, titan_err *err)
{
	const model *g = plan_global_model(s->p);
	size_t n = plan_shard_numel(s->p);
	hf_load h = {.p = s->p, .local = plan_model(s->p), .g = g,
		     .shard = bigmem_calloc(n + 1, sizeof(float))};
	dcp_hf_model hm = hf_model_of(g);
	hm.model = g;
	int rc = h.shard ? dcp_hf_read(dir, &hm, PTZ_NONE, put_hf_tensor, &h, err)
			 : err_set(err, "out of memory");
	if (rc == 0)
		rc = plan_shard_upload(s->p, plan_shard_params(s->p), h.shard, err);
	free(h.shard);
	return rc;
}

/* The whole tensors are needed: one process holds them (a sharded run's
 * checkpoint converts with titan-ckpt-convert to-hf). */
int tstate_save_hf(const char *dir, const tstate *s, const char *export_dtype,
		   const char *index_json, titan_err *err)
{
	if (s->world > 1)
		return err_set(err, "checkpoint.last_save_in_hf: the weights are sharded over %d "
			       "ranks; save DCP and convert with titan-ckpt-convert to-hf", s->world);
	const model *g = plan_global_model(s->p);
	ptz_dtype dt = export_dtype ? ptz_dtype_parse(export_dtype) : PTZ_F32;
	if (dt != PTZ_F32 && dt != PTZ_BF16 && dt != PTZ_F16)
		return err_set(err, "checkpoint.export_dtype: %s is not float32, bfloat16 or float16",
			       export_dtype);
	size_t n = plan_shard_numel(s->p);
	model *local = plan_model(s->p);
	int nt = model_num_tensors(g), nb = model_num_buffers(local);
	float *params = bigmem_alloc(n * sizeof(float) + 1);
	st_item *items = calloc((size_t)(nt + nb), sizeof *items);
	float *bufs = calloc((size_t)nb * (size_t)model_args(g)->moe.experts + 1, sizeof(float));
	int rc = params && items && bufs ? 0 : err_set(err, "out of memory");
	if (rc == 0)
		rc = plan_shard_download(s->p, params, plan_shard_params(s->p), err);
	if (rc == 0) {
		for (int i = 0; i < nt; i++) {
			const model_tensor *t = model_tensor_at(g, i);
			items[i] = (st_item){.name = t->fqn, .dtype = PTZ_F32, .ndim = t->ndim,
					     .data = params + plan_box_at(s->p, i)->shard_off};
			memcpy(items[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
		}
		/* the buffers as 0.3.0's state dict has them (expert_bias: HF's
		 * e_score_correction_bias) */
		for (int i = 0, at = 0; i < nb; at += (int)model_buffer_at(local, i)->numel, i++) {
			const model_tensor *t = model_buffer_at(local, i);
			model_buffer_read(local, t, bufs + at);
			items[nt + i] = (st_item){.name = t->fqn, .dtype = PTZ_F32, .ndim = t->ndim,
						  .data = bufs + at};
			memcpy(items[nt + i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
		}
		dcp_hf_model hm = hf_model_of(g);
		rc = dcp_hf_save(dir, items, (size_t)(nt + nb), &hm, dt, index_json, err);
	}
	free(params);
	free(bufs);
	free(items);
	return rc;
}
