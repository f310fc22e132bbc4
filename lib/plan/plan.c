/* Building a rank's plan, in torchtitan's order: tensor parallelism (the
 * model with the rank's shapes), then data parallelism (FSDP2's shards of
 * every held unit, or replication), then the optimizer over the shards;
 * initialisation by boxes, the checkpoint boxes, memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "metrics/metrics.h"
#include "plan/plan_priv.h"

int plan_reshard_parse(const char *name, plan_reshard *r, titan_err *e)
{
	static const char *names[] = {"default", "always", "never"};
	for (int i = 0; i < 3; i++)
		if (name != NULL && strcmp(name, names[i]) == 0) {
			*r = (plan_reshard)i;
			return 0;
		}
	return err_set(e, "parallelism.fsdp_reshard_after_forward \"%s\": expected default, "
		       "always or never", name ? name : "");
}

int plan_size(const plan *p, mesh_dim d) { return p->mesh ? p->mesh->size[d] : 1; }
int plan_coord(const plan *p, mesh_dim d) { return p->mesh ? p->mesh->coord[d] : 0; }
model *plan_model(plan *p) { return p->m; }
const model *plan_global_model(const plan *p) { return p->g; }
const mesh *plan_mesh(const plan *p) { return p->mesh; }
size_t plan_shard_numel(const plan *p) { return p->shard_numel; }
be_dtype plan_shard_dtype(const plan *p) { return p->mt; }
void *plan_shard_params(plan *p) { return p->params; }
void *plan_shard_grads(plan *p) { return p->grads; }
adamw *plan_optimizer(plan *p) { return p->opt; }
void plan_weights_changed(plan *p) { model_weights_changed(p->m); }
const model_hooks *plan_unit_hooks(plan *p) { return &p->hooks; }

const plan_box *plan_box_at(const plan *p, int i)
{
	return i >= 0 && i < model_num_tensors(p->g) ? &p->box[i] : NULL;
}

comm_dtype plan_comm_dtype(be_dtype t)
{
	return t == BE_BF16 ? COMM_BF16 : COMM_F32;
}

void plan_move(backend *be, void *dst, be_dtype dt, const void *src, be_dtype st, size_t n)
{
	if (dt == st)
		be->ops->copy(be, dst, src, n * be_dtype_size(dt), BACKEND_D2D);
	else
		be->ops->convert(be, dst, dt, src, st, (int64_t)n);
}

static comm *dim_comm(const plan *p, mesh_dim d)
{
	return p->mesh ? mesh_comm(p->mesh, d) : NULL;
}

static comm *host_comm(const plan *p, mesh_dim d)
{
	return p->mesh ? mesh_host_comm(p->mesh, d) : NULL;
}

/* The sizes and indices the plan uses, and torchtitan's refusals of meshes
 * it has no plan for. */
static int read_mesh(plan *p, titan_err *e)
{
	p->fsdp = plan_size(p, MESH_FSDP), p->fsdp_rank = plan_coord(p, MESH_FSDP);
	p->rep = plan_size(p, MESH_DP_REPLICATE), p->rep_rank = plan_coord(p, MESH_DP_REPLICATE);
	p->tp = plan_size(p, MESH_TP), p->tp_rank = plan_coord(p, MESH_TP);
	p->cp = plan_size(p, MESH_CP), p->cp_rank = plan_coord(p, MESH_CP);
	p->c_fsdp = dim_comm(p, MESH_FSDP);
	p->c_rep = dim_comm(p, MESH_DP_REPLICATE);
	p->c_tp = dim_comm(p, MESH_TP);
	p->c_loss = dim_comm(p, MESH_LOSS);
	p->c_pp = dim_comm(p, MESH_PP);
	p->c_cp = dim_comm(p, MESH_CP);
	p->h_fsdp = host_comm(p, MESH_FSDP);
	p->h_tp = host_comm(p, MESH_TP);
	p->h_loss = host_comm(p, MESH_LOSS);
	p->h_pp = host_comm(p, MESH_PP);
	p->ep = plan_size(p, MESH_EP), p->ep_rank = plan_coord(p, MESH_EP);
	p->c_ep = dim_comm(p, MESH_EP);
	/* FSDP's groups: the experts' over efsdp under expert parallelism */
	int ex = p->ep > 1;
	p->gn[PLAN_DENSE] = p->fsdp, p->gr[PLAN_DENSE] = p->fsdp_rank, p->gc[PLAN_DENSE] = p->c_fsdp;
	p->gn[PLAN_EXPERT] = ex ? plan_size(p, MESH_EFSDP) : p->fsdp;
	p->gr[PLAN_EXPERT] = ex ? plan_coord(p, MESH_EFSDP) : p->fsdp_rank;
	p->gc[PLAN_EXPERT] = ex ? dim_comm(p, MESH_EFSDP) : p->c_fsdp;
	int world = p->mesh ? p->mesh->world_size : 1;
	if (p->ep > 1 && p->o.pp)
		return err_set(e, "parallelism: expert_parallel_degree %d with "
			       "pipeline_parallel_degree %d: expert parallelism runs with data, "
			       "context and tensor parallelism only yet", p->ep, plan_size(p, MESH_PP));
	/* torchtitan 0.2.2 has ETP 1 (ep borrowed from dp_shard x cp x tp, whole
	 * experts) and ETP = TP (ep from dp_shard x cp, experts split over tp) */
	if (p->ep > 1 && plan_size(p, MESH_ETP) > 1)
		return err_set(e, "parallelism: expert_tensor_parallel_degree %d: experts split "
			       "over tp under expert parallelism (torchtitan's ETP = TP) are not "
			       "built; expert_tensor_parallel_degree 1 (whole experts, ep borrowed "
			       "from dp_shard x cp x tp) is", plan_size(p, MESH_ETP));
	/* f8.c packs a unit's whole shard as one block: not the expert group's */
	if (p->ep > 1 && p->o.f8_all_gather)
		return err_set(e, "parallelism: expert_parallel_degree %d with "
			       "quantize.linear.float8.enable_fsdp_float8_all_gather: FSDP's float8 "
			       "all-gather runs without expert parallelism only yet", p->ep);
	/* torchtitan's apply_ddp: replication without sharding is DDP, alone. */
	p->ddp = p->rep > 1 && p->fsdp == 1;
	if (p->ddp && world != p->rep)
		return err_set(e, "parallelism: data_parallel_replicate_degree %d without sharding "
			       "is DDP, which torchtitan runs alone (world size %d); shard with "
			       "data_parallel_shard_degree or drop the other degrees", p->rep, world);
	return 0;
}

/* torchtitan's apply_tp: the rank's model, built with its TP shapes (one tp
 * rank: the model as it is). */
static int apply_tp(plan *p, titan_err *e)
{
	const plan_opts *o = &p->o;
	model_tp_group tp = plan_tp_group(p);
	model_ep_group ep = plan_ep_group(p);
	if (!(p->g = model_create_unbound(p->be, o->args, o->vocab_size, e)) ||
	    !(p->m = model_create_ep(p->be, o->args, o->vocab_size, &tp, &ep, e)))
		return -1;
	p->n_units = model_num_units(p->m);
	p->head = p->n_units - 1;
	return 0;
}

/* Where tensor i of unit u goes in the shard: FSDP2's chunk of dim 0 over its
 * group, from `at`. */
static void place_tensor(plan *p, const model_unit *mu, int i, size_t *at)
{
	const model_tensor *mt = model_tensor_at(p->m, i);
	plan_tensor *t = &p->t[i];
	plan_unit *pu = &p->u[mt->unit];
	int n = p->gn[t->grp];
	t->rows = mt->shape[0];
	t->cols = (int64_t)(mt->numel / (size_t)mt->shape[0]);
	t->cs = (t->rows + n - 1) / n;
	t->r0 = t->cs * p->gr[t->grp];
	t->nr = t->rows - t->r0 < 0 ? 0 : t->rows - t->r0 > t->cs ? t->cs : t->rows - t->r0;
	t->unit_off = mt->offset - mu->offset;
	/* under ep a tp group's ranks hold other experts: none is replicated
	 * (GPT-OSS's mlp2 bias would be all-reduced over tp otherwise) */
	t->tp_replicated = mt->tp == MODEL_TP_REPLICATE && t->grp != PLAN_EXPERT;
	if (pu->held) {
		t->shard_off = *at;
		t->chunk_off = *at - pu->g[t->grp].shard_off;
		*at += (size_t)(t->cs * t->cols);
	}
}

/* FSDP2's chunks of dim 0 (torch.chunk's sizes, the last ranks short or
 * empty) of every tensor of the held units, each padded to cs rows; a unit's
 * dense tensors first, then its experts' (their own group). */
static int apply_fsdp(plan *p, titan_err *e)
{
	model *m = p->m;
	int nt = model_num_tensors(m);
	p->t = calloc((size_t)nt, sizeof *p->t);
	p->u = calloc((size_t)p->n_units, sizeof *p->u);
	p->queue = calloc((size_t)p->n_units, sizeof *p->queue);
	if (!p->t || !p->u || !p->queue)
		return err_set(e, "out of memory");
	int resident = p->fsdp == 1 && p->prec.param == p->mt && p->prec.grad == p->mt &&
		       !p->o.comm_always;
	size_t at = 0;
	for (int u = 0; u < p->n_units; u++) {
		const model_unit *mu = model_unit_at(m, u);
		plan_unit *pu = &p->u[u];
		pu->held = p->o.hold == NULL || p->o.hold[u];
		pu->numel = mu->numel;
		pu->shard_off = at;
		pu->resident = resident;
		for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++)
			p->t[i].grp = p->ep > 1 && model_tensor_at(m, i)->is_expert ? PLAN_EXPERT
										    : PLAN_DENSE;
		for (int k = 0; k < PLAN_GROUPS; k++) {
			pu->g[k].shard_off = at;
			for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++)
				if (p->t[i].grp == k)
					place_tensor(p, mu, i, &at);
			pu->g[k].shard_numel = at - pu->g[k].shard_off;
		}
		pu->shard_numel = at - pu->shard_off;
	}
	p->shard_numel = at;
	return 0;
}

/* The boxes of the global tensors this rank holds: TP's slice (offset along
 * tp_dim: rank x torch.chunk's size) cut by FSDP's rows. */
static int make_boxes(plan *p, titan_err *e)
{
	int nt = model_num_tensors(p->g);
	if (!(p->box = calloc((size_t)nt, sizeof *p->box)))
		return err_set(e, "out of memory");
	for (int i = 0; i < nt; i++) {
		const model_tensor *gt = model_tensor_at(p->g, i), *lt = model_tensor_at(p->m, i);
		const plan_tensor *t = &p->t[i];
		plan_box *b = &p->box[i];
		b->ndim = gt->ndim;
		for (int d = 0; d < gt->ndim; d++)
			b->sizes[d] = lt->shape[d];
		b->sizes[0] = t->nr;
		b->offsets[0] = t->r0;
		if (t->grp == PLAN_EXPERT) /* the rank's experts */
			b->offsets[0] += (int64_t)p->ep_rank * lt->shape[0];
		/* under ep the experts are whole on every tp rank (ETP 1) */
		if (gt->tp_dim >= 0 && p->tp > 1 && t->grp != PLAN_EXPERT) {
			int64_t g = gt->shape[gt->tp_dim], chunk = (g + p->tp - 1) / p->tp;
			b->offsets[gt->tp_dim] += chunk * p->tp_rank;
		}
		int held = p->u[gt->unit].held;
		b->numel = held ? (size_t)t->nr * (size_t)t->cols : 0;
		b->shard_off = t->shard_off;
		b->owner = b->numel > 0 && p->rep_rank == 0 && (!t->tp_replicated || p->tp_rank == 0);
	}
	return 0;
}

static int build_optimizer(plan *p, titan_err *e)
{
	adamw_config ac = p->o.adamw;
	ac.dtype = p->mt; /* torch's AdamW keeps its states in the parameters' dtype, */
	/* unless a pre-hook made them bf16 (bf16 parameters' are already) */
	ac.bf16_states = p->o.adamw.bf16_states && p->mt == BE_F32;
	if (!(p->opt = adamw_create(p->be, p->shard_numel, &ac, e)))
		return -1;
	for (int i = 0; i < model_num_tensors(p->m); i++) {
		const model_tensor *mt = model_tensor_at(p->m, i);
		const plan_tensor *t = &p->t[i];
		size_t numel = (size_t)(t->cs * t->cols);
		if (!p->u[mt->unit].held || numel == 0)
			continue;
		/* LoRA: torch's optimizer holds the trainable parameters alone */
		if (mt->frozen ? adamw_freeze(p->opt, t->shard_off, numel, e)
			       : p->o.no_decay_norms_embeddings && (mt->is_norm || mt->is_embedding) &&
					 adamw_no_decay(p->opt, t->shard_off, numel, e))
			return err_prefix(e, "%s", mt->fqn);
	}
	return 0;
}

/* Resident units compute on the shard itself, bound once. */
static void bind_resident(plan *p)
{
	for (int u = 0; u < p->n_units; u++)
		if (p->u[u].held && p->u[u].resident)
			model_bind_unit(p->m, u, plan_shard_at(p, p->params, p->u[u].shard_off),
					plan_shard_at(p, p->grads, p->u[u].shard_off));
}

plan *plan_create(const plan_opts *o, titan_err *e)
{
	plan *p = calloc(1, sizeof *p);
	if (!p) {
		err_set(e, "out of memory");
		return NULL;
	}
	p->o = *o;
	p->be = o->be;
	p->mesh = o->mesh;
	p->prec = o->prec;
	p->mt = o->master == BE_BF16 ? BE_BF16 : BE_F32;
	if (p->prec.param == 0 && p->prec.grad == 0 && p->prec.act == 0 && p->prec.resid == 0)
		p->prec = (model_prec){BE_F32, BE_F32, BE_F32, BE_F32};
	p->hooks = (model_hooks){p, plan_hook_before, plan_hook_after};
	if (read_mesh(p, e) || apply_tp(p, e) || plan_apply_cp(p, e) ||
	    model_set_prec(p->m, &p->prec, e) || model_set_ac(p->m, o->ac, o->ac_every, e) ||
	    apply_fsdp(p, e) || make_boxes(p, e))
		goto fail;
	if (o->layout_only)
		return p;
	/* zeroed: FSDP's padding rows stay zero */
	size_t sb = (p->shard_numel ? p->shard_numel : 1) * be_dtype_size(p->mt);
	if (!(p->params = p->be->ops->alloc(p->be, sb, e)) ||
	    !(p->grads = p->be->ops->alloc(p->be, sb, e))) {
		err_prefix(e, "plan: shards of %zu parameters", p->shard_numel);
		goto fail;
	}
	p->be->ops->zero(p->be, p->params, sb);
	p->be->ops->zero(p->be, p->grads, sb);
	if (build_optimizer(p, e))
		goto fail;
	bind_resident(p);
	return p;
fail:
	plan_free(p);
	return NULL;
}

void plan_free(plan *p)
{
	if (!p)
		return;
	plan_release_all(p);
	plan_graph_free(p);
	plan_pipeline_free(p);
	plan_f8_free(p);
	plan_muon_free(p);
	model_mb_free(p->mb);
	cp_attn_free(p->ring);
	adamw_free(p->opt);
	if (p->params)
		p->be->ops->free(p->be, p->params);
	if (p->grads)
		p->be->ops->free(p->be, p->grads);
	model_free(p->m);
	model_free(p->g);
	free(p->t);
	free(p->u);
	free(p->box);
	free(p->queue);
	free(p);
}

/* dst (b's elements, row-major) = the box b of src, a row-major tensor of
 * shape (up to 3 dims). */
static void box_copy(float *dst, const float *src, const int64_t *shape, const plan_box *b)
{
	int64_t s1 = b->ndim > 1 ? shape[1] : 1, s2 = b->ndim > 2 ? shape[2] : 1;
	int64_t z1 = b->ndim > 1 ? b->sizes[1] : 1, z2 = b->ndim > 2 ? b->sizes[2] : 1;
	int64_t o1 = b->ndim > 1 ? b->offsets[1] : 0, o2 = b->ndim > 2 ? b->offsets[2] : 0;
	for (int64_t i = 0; i < b->sizes[0]; i++)
		for (int64_t j = 0; j < z1; j++)
			memcpy(dst + (i * z1 + j) * z2,
			       src + ((b->offsets[0] + i) * s1 + o1 + j) * s2 + o2,
			       (size_t)z2 * sizeof(float));
}

/* The elements [first, end) of a row-major tensor that box b lies within:
 * a rank's shard alone is drawn at initialisation (FSDP's rows of a weight
 * are a quarter of it on 4 ranks), not the whole tensor on every rank. */
static void box_span(const plan_box *b, const int64_t *shape, size_t *first, size_t *end)
{
	int64_t stride[3] = {1, 1, 1}, lo = 0, hi = 0;
	for (int d = b->ndim - 2; d >= 0; d--)
		stride[d] = stride[d + 1] * shape[d + 1];
	for (int d = 0; d < b->ndim; d++) {
		lo += b->offsets[d] * stride[d];
		hi += (b->offsets[d] + b->sizes[d] - 1) * stride[d];
	}
	*first = (size_t)lo;
	*end = (size_t)hi + 1;
}

void plan_box_extract(const plan *p, int i, const float *whole, float *shard)
{
	const plan_box *b = &p->box[i];
	if (b->numel)
		box_copy(shard + b->shard_off, whole, model_tensor_at(p->g, i)->shape, b);
}

/* Host float32 image of a shard buffer <-> the buffer (of the master type). */
int plan_shard_upload(plan *p, void *dev, const float *host, titan_err *e)
{
	return plan_shard_upload_n(p, dev, p->mt, host, p->shard_numel, e);
}

int plan_shard_download(plan *p, float *host, const void *dev, titan_err *e)
{
	return plan_shard_download_n(p, host, dev, p->mt, p->shard_numel, e);
}

int plan_shard_upload_n(plan *p, void *dev, be_dtype t, const float *host, size_t n,
			titan_err *e)
{
	if (t == BE_F32) {
		p->be->ops->copy(p->be, dev, host, n * sizeof(float), BACKEND_H2D);
		return 0;
	}
	uint16_t *h = malloc((n ? n : 1) * sizeof *h);
	if (!h)
		return err_set(e, "plan: out of memory");
	for (size_t i = 0; i < n; i++)
		h[i] = bf16_from_f32(host[i]);
	p->be->ops->copy(p->be, dev, h, n * sizeof *h, BACKEND_H2D);
	int rc = p->be->ops->sync(p->be, e); /* h is freed now */
	free(h);
	return rc;
}

int plan_shard_download_n(plan *p, float *host, const void *dev, be_dtype t, size_t n,
			  titan_err *e)
{
	if (t == BE_F32) {
		p->be->ops->copy(p->be, host, dev, n * sizeof(float), BACKEND_D2H);
		return p->be->ops->sync(p->be, e);
	}
	uint16_t *h = malloc((n ? n : 1) * sizeof *h);
	if (!h)
		return err_set(e, "plan: out of memory");
	p->be->ops->copy(p->be, h, dev, n * sizeof *h, BACKEND_D2H);
	int rc = p->be->ops->sync(p->be, e);
	for (size_t i = 0; rc == 0 && i < n; i++)
		host[i] = bf16_to_f32(h[i]);
	free(h);
	return rc;
}

int plan_init_weights(plan *p, uint64_t seed, int depth_init, titan_err *e)
{
	size_t maxn = 1;
	for (int i = 0; i < model_num_tensors(p->g); i++)
		if (p->box[i].numel && model_tensor_at(p->g, i)->numel > maxn)
			maxn = model_tensor_at(p->g, i)->numel;
	float *full = malloc(maxn * sizeof(float)); /* one global tensor at a time */
	float *shard = calloc(p->shard_numel ? p->shard_numel : 1, sizeof(float));
	if (!full || !shard) {
		free(full);
		free(shard);
		return err_set(e, "plan init: out of memory");
	}
	for (int i = 0; i < model_num_tensors(p->g); i++) {
		if (!p->box[i].numel)
			continue;
		size_t first, end;
		box_span(&p->box[i], model_tensor_at(p->g, i)->shape, &first, &end);
		model_init_tensor_span(p->g, i, seed, depth_init, full, first, end);
		plan_box_extract(p, i, full, shard);
	}
	int rc = plan_shard_upload(p, p->params, shard, e);
	free(full);
	free(shard);
	return rc;
}

/* The unsharded bytes of unit u while gathered: its parameters and the
 * all-gathers' buffers (and the converted shards they send). */
static size_t gather_bytes(const plan *p, int u)
{
	const plan_unit *pu = &p->u[u];
	if (pu->resident || !pu->held)
		return 0;
	size_t pe = be_dtype_size(p->prec.param), b = pu->numel * pe;
	for (int k = 0; k < PLAN_GROUPS; k++)
		b += (size_t)p->gn[k] * pu->g[k].shard_numel * pe +
		     (p->prec.param != p->mt ? pu->g[k].shard_numel * pe : 0);
	return b;
}

/* ... and while its gradient is reduced. */
static size_t grad_bytes(const plan *p, int u)
{
	const plan_unit *pu = &p->u[u];
	if (pu->resident || !pu->held)
		return 0;
	size_t re = be_dtype_size(p->o.reduce), b = pu->numel * be_dtype_size(p->prec.grad);
	for (int k = 0; k < PLAN_GROUPS; k++)
		b += (size_t)(p->gn[k] + 1) * pu->g[k].shard_numel * re;
	return b;
}

void plan_memory_get(const plan *p, plan_memory *mm)
{
	memset(mm, 0, sizeof *mm);
	mm->params = mm->grads = p->shard_numel * be_dtype_size(p->mt);
	mm->optimizer = p->opt ? adamw_state_bytes(p->opt) : 2 * p->shard_numel * be_dtype_size(p->mt);
	mm->activations = model_activation_bytes(p->m, p->o.b, p->o.t);
	mm->ring = plan_cp_bytes(p);
	if (p->peak_bytes) {
		mm->gathered = p->peak_bytes;
		return;
	}
	/* Before a step: the two largest units gathered (one computing, one
	 * prefetched) with the two largest gradients (one computed, one
	 * reducing), and the head when it stays gathered. */
	size_t g1 = 0, g2 = 0, r1 = 0, r2 = 0;
	for (int u = 0; u < p->n_units; u++) {
		size_t g = gather_bytes(p, u), r = grad_bytes(p, u);
		if (g > g1)
			g2 = g1, g1 = g;
		else if (g > g2)
			g2 = g;
		if (r > r1)
			r2 = r1, r1 = r;
		else if (r > r2)
			r2 = r;
	}
	mm->gathered = g1 + g2 + r1 + r2;
	if (p->o.reshard != PLAN_RESHARD_ALWAYS)
		mm->gathered += gather_bytes(p, p->head);
}

static double gib(size_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

void plan_describe(const plan *p, FILE *log)
{
	if (p->tp > 1)
		metrics_log(log, "Applied Tensor Parallelism to the model (tp %d)", p->tp);
	if (p->cp > 1)
		metrics_log(log, "Applied Context Parallelism to the model (cp %d, load balancer %s, "
			    "rotate method %s: %lld tokens per sequence in %d chunks of %lld per rank)",
			    p->cp, p->o.cp_balance == CP_BALANCE_HEADTAIL ? "headtail" : "none",
			    p->o.cp_rotate == CP_ROTATE_ALLTOALL ? "alltoall" : "allgather",
			    (long long)p->cpl.seq_len, p->cpl.chunks, (long long)p->cpl.chunk);
	if (p->fsdp > 1)
		metrics_log(log, "Applied %s to the model (%d shards%s, reshard_after_forward %s)",
			    p->rep > 1 ? "HSDP" : "FSDP", p->fsdp,
			    p->rep > 1 ? ", replicated" : "",
			    p->o.reshard == PLAN_RESHARD_ALWAYS ? "always"
			    : p->o.reshard == PLAN_RESHARD_NEVER ? "never" : "default");
	else if (p->ddp)
		metrics_log(log, "Applied DDP to the model (%d replicas)", p->rep);
	if (p->ep > 1)
		metrics_log(log, "Applied Expert Parallelism to the model (ep %d: %d experts per "
			    "rank, their FSDP over %d ranks)", p->ep,
			    model_args(p->m)->moe.experts / p->ep, p->gn[PLAN_EXPERT]);
	plan_memory mm;
	plan_memory_get(p, &mm);
	char n[48];
	metrics_commas(n, sizeof n, (int64_t)p->shard_numel);
	metrics_log(log, "Memory per rank: parameters %.4f GiB (%s elements, %s), gradients "
		    "%.4f GiB, optimizer %.4f GiB, unsharded %.4f GiB, activations %.4f GiB",
		    gib(mm.params), n, be_dtype_name(p->mt), gib(mm.grads), gib(mm.optimizer),
		    gib(mm.gathered), gib(mm.activations));
	if (mm.ring)
		metrics_log(log, "Memory per rank: ring attention's keys, values and gradients "
			    "%.4f GiB", gib(mm.ring));
}
