/* The model: parameter layout (one flat buffer with named views, the pieces
 * adding their tensors), torchtitan's initialisation, the public accessors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/init_fill.h"
#include "model/model_priv.h"

/* Append a tensor to the table; slot is its W_* for a layer's tensor, else -1. */
static int add_tensor(model *m, int *cap, int unit, const char *fqn, int slot, int init,
		      int tp, int ndim, const int64_t *shape, titan_err *e)
{
	if (m->n_tensors == *cap) {
		int nc = *cap ? 2 * *cap : 64;
		model_tensor *nt = realloc(m->tensors, sizeof *nt * (size_t)nc);
		if (nt)
			m->tensors = nt;
		int *ns = realloc(m->slot, sizeof *ns * (size_t)nc);
		if (ns)
			m->slot = ns;
		int *ni = realloc(m->init, sizeof *ni * (size_t)nc);
		if (ni)
			m->init = ni;
		int *nl = realloc(m->tlayer, sizeof *nl * (size_t)nc);
		if (nl)
			m->tlayer = nl;
		if (!nt || !ns || !ni || !nl)
			return err_set(e, "model: out of memory");
		*cap = nc;
	}
	int i = m->n_tensors++;
	model_tensor *t = &m->tensors[i];
	memset(t, 0, sizeof *t);
	snprintf(t->fqn, sizeof t->fqn, "%s", fqn);
	t->ndim = ndim;
	t->numel = 1;
	for (int d = 0; d < ndim; d++) {
		t->shape[d] = shape[d];
		t->numel *= (size_t)shape[d];
	}
	t->offset = m->n_params;
	t->unit = unit;
	t->is_norm = init == INIT_ONES;
	t->is_embedding = strcmp(fqn, "tok_embeddings.weight") == 0;
	t->tp = tp;
	t->is_expert = strstr(fqn, ".moe.experts.") != NULL;
	/* a colwise linear splits its weight's rows and its bias's (last) dim */
	int vec = ndim == 1 || strcmp(fqn + strlen(fqn) - 4, "bias") == 0;
	t->tp_dim = tp == MODEL_TP_COLWISE ? (vec ? ndim - 1 : ndim - 2)
		  : tp == MODEL_TP_ROWWISE ? (t->is_embedding ? 0 : ndim - 1) : -1;
	m->slot[i] = slot;
	m->init[i] = init;
	m->tlayer[i] = -1;
	m->n_params += t->numel;
	return 0;
}

int model_add_layer_tensor(model *m, int *cap, int l, const char *name, int slot, int init,
			   int tp, int ndim, int64_t d0, int64_t d1, int64_t d2, titan_err *e)
{
	char fqn[64];
	int64_t shape[3] = {d0, d1, d2};
	int nl = m->args.n_layers, mtp = l >= nl; /* an MTP depth's: the head's */
	snprintf(fqn, sizeof fqn, "%slayers.%d.%s", mtp ? "mtp_" : "", mtp ? l - nl : l, name);
	if (add_tensor(m, cap, mtp ? nl + 1 : l + 1, fqn, slot, init, tp, ndim, shape, e))
		return -1;
	m->tlayer[m->n_tensors - 1] = l;
	return 0;
}

/* Units from the tensors' unit numbers: each unit's tensors are contiguous. */
static int build_units(model *m, titan_err *e)
{
	m->n_units = m->args.n_layers + 2;
	m->units = calloc((size_t)m->n_units, sizeof *m->units);
	if (!m->units)
		return err_set(e, "model: out of memory");
	for (int i = m->n_tensors - 1; i >= 0; i--) {
		model_unit *u = &m->units[m->tensors[i].unit];
		u->first_tensor = i;
		u->n_tensors++;
		u->offset = m->tensors[i].offset;
		u->numel += m->tensors[i].numel;
	}
	return 0;
}

/* The table of views: the embedding, each layer's norms around its pieces'
 * tensors, the head. */
static int build_layout(model *m, titan_err *e)
{
	const llama_args *a = &m->args;
	int cap = 0;
	int64_t emb[2] = {a->vocab_size, a->dim}, d = a->dim;
	int emb_init = a->tied_embeddings && m->family->tied_init_as_output ? INIT_OUTPUT
									    : INIT_EMBED;
	if (add_tensor(m, &cap, 0, "tok_embeddings.weight", -1, emb_init, MODEL_TP_ROWWISE, 2,
		       emb, e))
		return -1;
	for (int l = 0; l < a->n_layers; l++)
		if (model_add_layer_tensor(m, &cap, l, "attention_norm.weight", W_ATTN_NORM,
					   INIT_ONES, MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_attn_layout(m, l, &cap, e) ||
		    model_add_layer_tensor(m, &cap, l, "ffn_norm.weight", W_FFN_NORM, INIT_ONES,
					   MODEL_TP_REPLICATE, 1, d, 0, 0, e) ||
		    model_ffn_layout(m, l, &cap, e))
			return -1;
	int head = a->n_layers + 1;
	if (add_tensor(m, &cap, head, "norm.weight", -1, INIT_ONES, MODEL_TP_REPLICATE, 1, &d, e))
		return -1;
	if (!a->tied_embeddings && add_tensor(m, &cap, head, "output.weight", -1, INIT_OUTPUT,
					      MODEL_TP_COLWISE, 2, emb, e))
		return -1;
	if (model_mtp_layout(m, &cap, e))
		return -1;
	/* LoRAConverter freezes every parameter but its adapters' */
	for (int i = 0; a->lora_rank > 0 && i < m->n_tensors; i++)
		m->tensors[i].frozen = model_slot_frozen(m, m->slot[i]);
	return build_units(m, e);
}

/* Point the views of unit u at base (its slice of the flat layout, of type t);
 * w are the parameter views or the gradient views. */
static void bind_views(model *m, int u, void *base, be_dtype t, int grads)
{
	const model_unit *un = &m->units[u];
	for (int k = 0; k < un->n_tensors; k++) {
		int i = un->first_tensor + k, l = m->tlayer[i];
		void *p = base ? elt(base, t, m->tensors[i].offset - un->offset) : NULL;
		if (u == 0)
			*(grads ? &m->tok_g : &m->tok) = p;
		else if (l >= 0) /* a block's, or an MTP depth's in the head */
			(grads ? &m->lg[l] : &m->lw[l])->p[m->slot[i]] = p;
		else if (k == 0)
			*(grads ? &m->norm_g : &m->norm) = p;
		else
			*(grads ? &m->out_g : &m->out) = p;
	}
	if (m->args.tied_embeddings) {
		m->out = m->tok;
		m->out_g = m->tok_g;
	}
}

void model_bind_unit(model *m, int u, const void *params, void *grads)
{
	bind_views(m, u, (void *)params, m->prec.param, 0);
	bind_views(m, u, grads, m->prec.grad, 1);
	m->ubound[u] = params;
	m->wcast_ok[u] = 0;
}

/* Bind every unit to the model's own buffers. */
static void bind_own(model *m)
{
	for (int u = 0; u < m->n_units; u++)
		model_bind_unit(m, u, elt(m->params, m->prec.param, m->units[u].offset),
				elt(m->grads, m->prec.grad, m->units[u].offset));
}

/* Free the autocast copies (a model without them has NULL arrays). */
static void drop_casts(model *m)
{
	for (int u = 0; m->wcast && u < m->n_units; u++) {
		m->be->ops->free(m->be, m->wcast[u]);
		m->wcast[u] = NULL;
		m->wcast_ok[u] = 0;
	}
}

/* The attention options a model cannot be built from. */
static int check_attention_args(const llama_args *a, titan_err *e)
{
	const mla_args *ml = &a->mla;
	const char *nm = a->name ? a->name : "?";
	if (ml->kv_lora_rank < 0 || ml->q_lora_rank < 0 ||
	    (ml->kv_lora_rank > 0 &&
	     (ml->qk_nope_head_dim <= 0 || ml->qk_rope_head_dim <= 0 ||
	      ml->qk_rope_head_dim % 2 || ml->v_head_dim <= 0 || a->n_kv_heads != a->n_heads)))
		return err_set(e, "model %s: MLA kv_lora_rank %d, q_lora_rank %d, qk_nope %d, "
			       "qk_rope %d, v %d, n_kv_heads %d: expected positive dims, an even "
			       "qk_rope and n_kv_heads == n_heads", nm, ml->kv_lora_rank,
			       ml->q_lora_rank, ml->qk_nope_head_dim, ml->qk_rope_head_dim,
			       ml->v_head_dim, a->n_kv_heads);
	if (a->sliding_window < 0 || a->nope_every < 0 || a->attn_chunk < 0 ||
	    (a->nope_every == 1) || a->attn_temp_floor < 0)
		return err_set(e, "model %s: sliding_window %d, nope_every %d, attn_chunk %d, "
			       "attention temperature floor %d: expected sizes >= 0 and nope_every "
			       "> 1 (or 0)", nm, a->sliding_window, a->nope_every, a->attn_chunk,
			       a->attn_temp_floor);
	if (ml->kv_lora_rank > 0 && (a->qk_norm || a->attn_bias || a->attn_sinks))
		return err_set(e, "model %s: MLA with QK-norm, biases or sinks is not built", nm);
	return 0;
}

/* The rank's shapes under tensor parallelism: heads and the FFN's hidden
 * size split evenly, the vocabulary in torch.chunk's sizes. */
static int tp_shapes(model *m, const model_tp_group *tp, titan_err *e)
{
	llama_args *a = &m->args;
	int t = tp->size;
	m->tp = *tp;
	m->vocab_global = a->vocab_size;
	m->moe_sh = a->moe.inter_dim * a->moe.shared_experts;
	if (t == 1)
		return 0;
	if (a->n_heads % t || a->n_kv_heads % t || m->ffn % t || a->moe.inter_dim % t)
		return err_set(e, "tensor parallel degree %d does not divide n_heads %d, n_kv_heads "
			       "%d, the FFN's %d rows and the experts' %d", t, a->n_heads,
			       a->n_kv_heads, m->ffn, a->moe.inter_dim);
	int64_t chunk = (a->vocab_size + t - 1) / t;
	m->v0 = chunk * tp->rank;
	int64_t nv = a->vocab_size - m->v0;
	a->vocab_size = (int)(nv < 0 ? 0 : nv > chunk ? chunk : nv);
	a->n_heads /= t;
	a->n_kv_heads /= t;
	a->head_dim = m->head_dim;
	a->hidden_dim = m->ffn /= t;
	m->moe_sh /= t; /* the shared experts' hidden units split as a dense FFN's */
	if (model_experts_tp(m)) /* the routed experts' too, but whole under ep */
		a->moe.inter_dim /= t;
	return 0;
}

/* The arguments a model cannot be built from, with the numbers named. */
static int check_args(const llama_args *a, titan_err *e)
{
	int hd = a->n_heads > 0 ? flavor_head_dim(a) : 0;
	if (a->dim <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_layers <= 0 ||
	    a->n_heads % a->n_kv_heads || hd <= 0 || hd % 2 ||
	    (a->head_dim <= 0 && a->dim % a->n_heads))
		return err_set(e, "model %s: dim %d, n_heads %d, n_kv_heads %d do not divide into "
			       "even heads", a->name ? a->name : "?", a->dim, a->n_heads,
			       a->n_kv_heads);
	if (check_attention_args(a, e))
		return -1;
	if (a->mtp_layers < 0 || (a->mtp_layers > 0 && (a->tied_embeddings || a->mtp_scale < 0)))
		return err_set(e, "model %s: %d MTP layers with mtp_scale %g%s: expected a count >= 0, "
			       "a scale >= 0 and untied embeddings", a->name ? a->name : "?",
			       a->mtp_layers, a->mtp_scale, a->tied_embeddings ? " and tied embeddings" : "");
	const moe_args *mo = &a->moe;
	if (mo->experts <= 0)
		return 0;
	if (mo->top_k < 1 || mo->top_k > mo->experts || mo->inter_dim <= 0 ||
	    mo->shared_experts < 0 || mo->route_scale <= 0 || mo->capacity_factor < 0 ||
	    mo->load_balance_coeff < 0)
		return err_set(e, "model %s: experts %d, top_k %d, inter_dim %d, shared %d, "
			       "route_scale %g, capacity_factor %g, load_balance_coeff %g: expected "
			       "1 <= top_k <= experts and positive sizes", a->name, mo->experts,
			       mo->top_k, mo->inter_dim, mo->shared_experts, mo->route_scale,
			       mo->capacity_factor, mo->load_balance_coeff);
	if (mo->groups && (mo->groups > 256 || mo->experts % mo->groups ||
			   mo->experts / mo->groups < 2 || mo->limited < 1 ||
			   mo->limited > mo->groups))
		return err_set(e, "model %s: %d experts in %d groups, %d of them kept: expected "
			       "groups of at least 2 experts, at most 256 groups, 1 <= limited <= "
			       "groups", a->name, mo->experts, mo->groups, mo->limited);
	return 0;
}

/* Each layer's pieces, the MoE layers' numbering, the expert_bias buffers and
 * the counts (zeroed). */
static int setup_layers(model *m, titan_err *e)
{
	const llama_args *a = &m->args;
	int nl = a->n_layers, nblk = model_n_blocks(m), ex = a->moe.experts;
	m->kind = calloc((size_t)nblk, sizeof *m->kind);
	m->moe_index = calloc((size_t)nblk, sizeof *m->moe_index);
	if (!m->kind || !m->moe_index)
		return err_set(e, "model: out of memory");
	m->ffn_max = 0;
	for (int l = 0; l < nblk; l++) {
		/* an MTP depth's block is a copy of the last layer's (0.3.0's
		 * _build_mtp_layers deep-copies layers[-1]'s config) */
		int src = l < nl ? l : nl - 1, moe = model_family_moe_layer(a, src);
		m->kind[l] = model_attn_kind(a, src);
		m->kind[l].ffn = moe ? FFN_MOE : FFN_DENSE;
		m->moe_index[l] = moe ? m->n_moe++ : -1;
		if (l == nl - 1)
			m->n_moe_main = m->n_moe;
		int ff = moe ? m->moe_sh : m->ffn;
		m->ffn_max = ff > m->ffn_max ? ff : m->ffn_max;
	}
	if (!m->n_moe)
		return 0;
	size_t nb = (size_t)m->n_moe * (size_t)ex;
	m->moe_bias = backend_calloc_floats(m->be, nb, e);
	m->moe_counts = m->moe_bias ? backend_calloc_floats(m->be, nb, e) : NULL;
	if (!m->moe_counts)
		return -1;
	if (a->moe.load_balance_coeff <= 0)
		return 0;
	m->buffers = calloc((size_t)m->n_moe, sizeof *m->buffers);
	if (!m->buffers)
		return err_set(e, "model: out of memory");
	for (int l = 0; l < nblk; l++) {
		if (m->moe_index[l] < 0)
			continue;
		model_tensor *t = &m->buffers[m->n_buffers++];
		snprintf(t->fqn, sizeof t->fqn, "%slayers.%d.moe.expert_bias", l < nl ? "" : "mtp_",
			 l < nl ? l : l - nl);
		t->ndim = 1;
		t->shape[0] = ex;
		t->numel = (size_t)ex;
		t->offset = (size_t)m->moe_index[l] * (size_t)ex;
		t->unit = l < nl ? l + 1 : nl + 1;
		t->tp_dim = -1;
	}
	return 0;
}

static model *create(backend *be, const llama_args *a, int vocab_size, const model_tp_group *tp,
		     const model_ep_group *ep, int own, titan_err *e)
{
	if (check_args(a, e))
		return NULL;
	const backend_ops *o = be->ops;
	if (a->moe.experts > 0 && (!o->moe_route || !o->moe_route_bwd || !o->moe_permute ||
				   !o->moe_gather || !o->moe_combine || !o->moe_dot ||
				   !o->grouped_matmul)) {
		err_set(e, "model %s: the %s backend has no mixture-of-experts ops yet", a->name,
			o->name);
		return NULL;
	}
	model *m = calloc(1, sizeof *m);
	if (!m) {
		err_set(e, "model: out of memory");
		return NULL;
	}
	m->be = be;
	m->args = *a;
	m->family = model_family_of(a);
	if (vocab_size > 0)
		m->args.vocab_size = vocab_size;
	m->ffn = flavor_ffn_hidden(&m->args);
	const mla_args *ml = &a->mla;
	m->head_dim = ml->kv_lora_rank > 0 ? ml->qk_nope_head_dim + ml->qk_rope_head_dim
					   : flavor_head_dim(a);
	m->v_head_dim = ml->kv_lora_rank > 0 ? ml->v_head_dim : m->head_dim;
	m->rope_dim = ml->kv_lora_rank > 0 ? ml->qk_rope_head_dim : m->head_dim;
	model_tp_group one = {.size = 1};
	/* expert parallelism first: whether tp splits the experts depends on it */
	if (model_ep_setup(m, ep, e) || tp_shapes(m, tp ? tp : &one, e))
		goto fail;
	m->prec = (model_prec){BE_F32, BE_F32, BE_F32, BE_F32};
	m->ac = MODEL_AC_NONE;
	m->lw = calloc((size_t)model_n_blocks(m), sizeof *m->lw);
	m->lg = calloc((size_t)model_n_blocks(m), sizeof *m->lg);
	if (!m->lw || !m->lg) {
		err_set(e, "model: out of memory");
		goto fail;
	}
	if (setup_layers(m, e) || build_layout(m, e))
		goto fail;
	m->autocast = BE_F32;
	m->ubound = calloc((size_t)m->n_units, sizeof *m->ubound);
	m->wcast = calloc((size_t)m->n_units, sizeof *m->wcast);
	m->wcast_ok = calloc((size_t)m->n_units, 1);
	if (!m->ubound || !m->wcast || !m->wcast_ok) {
		err_set(e, "model: out of memory");
		goto fail;
	}
	if (!own)
		return m;
	m->params = backend_alloc_floats(be, m->n_params, e);
	m->grads = m->params ? backend_calloc_floats(be, m->n_params, e) : NULL;
	if (!m->grads) {
		err_prefix(e, "model %s (%zu parameters)", a->name, m->n_params);
		goto fail;
	}
	bind_own(m);
	return m;
fail:
	model_free(m);
	return NULL;
}

model *model_create(backend *be, const llama_args *a, int vocab_size, titan_err *e)
{
	return create(be, a, vocab_size, NULL, NULL, 1, e);
}

model *model_create_unbound(backend *be, const llama_args *a, int vocab_size, titan_err *e)
{
	return create(be, a, vocab_size, NULL, NULL, 0, e);
}

model *model_create_tp(backend *be, const llama_args *a, int vocab_size, const model_tp_group *tp,
		       titan_err *e)
{
	return model_create_ep(be, a, vocab_size, tp, NULL, e);
}

model *model_create_ep(backend *be, const llama_args *a, int vocab_size,
		       const model_tp_group *tp, const model_ep_group *ep, titan_err *e)
{
	if (tp->size < 1 || tp->rank < 0 || tp->rank >= tp->size) {
		err_set(e, "model: tensor parallel rank %d of %d", tp->rank, tp->size);
		return NULL;
	}
	return create(be, a, vocab_size, tp, ep, 0, e);
}

void model_free(model *m)
{
	if (!m)
		return;
	model_mb_free(m->own_mb);
	model_scratch_release(m);
	model_ep_free(m);
	model_f8_free(m);
	free(m->f8_moe);
	drop_casts(m);
	free(m->ubound);
	free(m->wcast);
	free(m->wcast_ok);
	free(m->pos);
	m->be->ops->free(m->be, m->params);
	m->be->ops->free(m->be, m->grads);
	free(m->tensors);
	free(m->slot);
	free(m->init);
	free(m->tlayer);
	free(m->kind);
	free(m->moe_index);
	free(m->buffers);
	m->be->ops->free(m->be, m->moe_bias);
	m->be->ops->free(m->be, m->moe_counts);
	free(m->units);
	free(m->lw);
	free(m->lg);
	free(m);
}

const llama_args *model_args(const model *m) { return &m->args; }
const model_family *model_get_family(const model *m) { return m->family; }
int model_ffn_hidden(const model *m) { return m->ffn; }
int model_num_tensors(const model *m) { return m->n_tensors; }
int model_num_units(const model *m) { return m->n_units; }
size_t model_num_params(const model *m) { return m->n_params; }
void *model_param_storage(model *m) { return m->params; }
void *model_grad_storage(model *m) { return m->grads; }
float *model_params(model *m) { return m->prec.param == BE_F32 ? m->params : NULL; }
float *model_grads(model *m) { return m->prec.grad == BE_F32 ? m->grads : NULL; }
backend *model_backend(model *m) { return m->be; }
const model_prec *model_get_prec(const model *m) { return &m->prec; }

const model_tensor *model_tensor_at(const model *m, int i)
{
	return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

const model_unit *model_unit_at(const model *m, int u)
{
	return u >= 0 && u < m->n_units ? &m->units[u] : NULL;
}

const model_tensor *model_tensor_find(const model *m, const char *fqn)
{
	for (int i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i].fqn, fqn) == 0)
			return &m->tensors[i];
	return NULL;
}

int64_t model_num_params_no_embedding(const model *m)
{
	return (int64_t)m->n_params - (int64_t)m->args.vocab_size * m->args.dim;
}

int64_t model_num_params_active(const model *m)
{
	int64_t experts = 0, total = (int64_t)m->n_params;
	for (int i = 0; i < m->n_tensors; i++)
		if (m->tensors[i].is_expert)
			experts += (int64_t)m->tensors[i].numel;
	if (experts == 0)
		return total;
	return total - experts + experts * m->args.moe.top_k / m->args.moe.experts;
}

int model_num_buffers(const model *m) { return m->n_buffers; }

const model_tensor *model_buffer_at(const model *m, int i)
{
	return i >= 0 && i < m->n_buffers ? &m->buffers[i] : NULL;
}

const model_tensor *model_buffer_find(const model *m, const char *fqn)
{
	for (int i = 0; i < m->n_buffers; i++)
		if (strcmp(m->buffers[i].fqn, fqn) == 0)
			return &m->buffers[i];
	return NULL;
}

void model_buffer_read(model *m, const model_tensor *t, float *host)
{
	m->be->ops->copy(m->be, host, m->moe_bias + t->offset, t->numel * sizeof(float),
			 BACKEND_D2H);
}

void model_buffer_write(model *m, const model_tensor *t, const float *host)
{
	m->be->ops->copy(m->be, m->moe_bias + t->offset, host, t->numel * sizeof(float),
			 BACKEND_H2D);
}

float *model_moe_counts(model *m, size_t *n)
{
	*n = (size_t)m->n_moe * (size_t)m->args.moe.experts;
	return m->moe_counts;
}

/* torchtitan's _update_expert_bias, in float32 as torch computes it. */
int model_moe_balance(model *m, titan_err *e)
{
	float coeff = (float)m->args.moe.load_balance_coeff;
	if (!m->n_moe || coeff <= 0)
		return 0;
	int ex = m->args.moe.experts;
	size_t nb = (size_t)m->n_moe * (size_t)ex;
	float *h = malloc(2 * nb * sizeof(float));
	if (!h)
		return err_set(e, "expert load balancing: out of memory");
	float *counts = h, *bias = h + nb;
	backend *be = m->be;
	be->ops->copy(be, counts, m->moe_counts, nb * sizeof(float), BACKEND_D2H);
	be->ops->copy(be, bias, m->moe_bias, nb * sizeof(float), BACKEND_D2H);
	for (int l = 0; l < m->n_moe_main; l++) {
		const float *c = counts + (size_t)l * ex;
		float *b = bias + (size_t)l * ex, mean = 0, dmean = 0;
		for (int i = 0; i < ex; i++)
			mean += c[i];
		mean /= (float)ex;
		for (int i = 0; i < ex; i++)
			dmean += coeff * (float)((mean > c[i]) - (mean < c[i]));
		dmean /= (float)ex;
		for (int i = 0; i < ex; i++)
			b[i] += coeff * (float)((mean > c[i]) - (mean < c[i])) - dmean;
	}
	be->ops->copy(be, m->moe_bias, bias, nb * sizeof(float), BACKEND_H2D);
	be->ops->zero(be, m->moe_counts, nb * sizeof(float));
	free(h);
	return 0;
}

/* A bfloat16 tensor comes to the host into the first half of its float32
 * buffer and is widened in place from the last element down (element i's
 * float lands at or after every bf16 not yet read). */
void model_tensor_read(model *m, const model_tensor *t, int grads, float *host)
{
	be_dtype ty = grads ? m->prec.grad : m->prec.param;
	const void *src = elt(grads ? m->grads : m->params, ty, t->offset);
	m->be->ops->copy(m->be, host, src, t->numel * be_dtype_size(ty), BACKEND_D2H);
	if (ty == BE_BF16)
		for (size_t i = t->numel; i-- > 0;)
			host[i] = bf16_to_f32(((const uint16_t *)host)[i]);
}

void model_tensor_write(model *m, const model_tensor *t, int grads, const float *host)
{
	be_dtype ty = grads ? m->prec.grad : m->prec.param;
	void *dst = elt(grads ? m->grads : m->params, ty, t->offset);
	if (ty == BE_F32) {
		m->be->ops->copy(m->be, dst, host, t->numel * sizeof(float), BACKEND_H2D);
	} else {
		uint16_t *b = malloc(t->numel * sizeof *b + 1);
		if (!b) {
			backend_fault(m->be, "model: %s: out of host memory", t->fqn);
			return;
		}
		for (size_t i = 0; i < t->numel; i++)
			b[i] = bf16_from_f32(host[i]);
		m->be->ops->copy(m->be, dst, b, t->numel * sizeof *b, BACKEND_H2D);
		free(b);
	}
	if (!grads)
		model_weights_changed(m);
}

void model_zero_grad(model *m)
{
	if (m->grads)
		m->be->ops->zero(m->be, m->grads, m->n_params * be_dtype_size(m->prec.grad));
}

/* Contexts and scratch are laid out for one AC mode and precision: drop the
 * model's own so the next micro-batch lays them out again. */
static void relayout(model *m)
{
	model_mb_free(m->own_mb);
	m->own_mb = NULL;
	model_scratch_release(m);
}

int model_set_fusion(model *m, unsigned flags, titan_err *e)
{
	if (flags & ~(unsigned)(MODEL_FUSE_BLOCKS | MODEL_FUSE_LOSS))
		return err_set(e, "model: unknown fusion flags %#x", flags);
	if (flags != m->fuse)
		relayout(m); /* the fused projection's scratch comes and goes */
	m->fuse = flags;
	return 0;
}

unsigned model_get_fusion(const model *m) { return m->fuse; }

int model_set_ac(model *m, model_ac_mode mode, int every, titan_err *e)
{
	if (mode == MODEL_AC_SELECTIVE && every < 1)
		return err_set(e, "activation checkpointing: selective every %d layers, "
			       "expected a positive count", every);
	if (mode < MODEL_AC_NONE || mode > MODEL_AC_OP)
		return err_set(e, "activation checkpointing: unknown mode %d", (int)mode);
	m->ac = mode;
	m->ac_every = every;
	relayout(m);
	return 0;
}

/* The own buffers in the types of p: parameters converted, gradients zeroed
 * (both buffers are live at once while the parameters convert). */
static int retype_own(model *m, const model_prec *p, titan_err *e)
{
	backend *be = m->be;
	size_t n = m->n_params;
	void *np = m->params, *ng = m->grads;
	if (p->param != m->prec.param) {
		if (!(np = be->ops->alloc(be, n * be_dtype_size(p->param), e)))
			return err_prefix(e, "model: %s parameters", be_dtype_name(p->param));
		be->ops->convert(be, np, p->param, m->params, m->prec.param, (int64_t)n);
	}
	if (p->grad != m->prec.grad) {
		if (!(ng = be->ops->alloc(be, n * be_dtype_size(p->grad), e))) {
			if (np != m->params)
				be->ops->free(be, np);
			return err_prefix(e, "model: %s gradients", be_dtype_name(p->grad));
		}
		be->ops->zero(be, ng, n * be_dtype_size(p->grad));
	}
	if (np != m->params)
		be->ops->free(be, m->params);
	if (ng != m->grads)
		be->ops->free(be, m->grads);
	m->params = np;
	m->grads = ng;
	return 0;
}

int model_set_prec(model *m, const model_prec *p, titan_err *e)
{
	if (m->params && retype_own(m, p, e))
		return -1;
	m->prec = *p;
	if (m->params)
		bind_own(m);
	m->autocast = BE_F32;
	drop_casts(m);
	relayout(m);
	return 0;
}

int model_set_autocast(model *m, be_dtype t, titan_err *e)
{
	if (t != BE_F32 && (m->prec.param != BE_F32 || m->prec.act != t))
		return err_set(e, "model: autocast to %s needs float32 parameters and %s "
			       "activations, not %s and %s", be_dtype_name(t), be_dtype_name(t),
			       be_dtype_name(m->prec.param), be_dtype_name(m->prec.act));
	drop_casts(m);
	m->autocast = t;
	return 0;
}

be_dtype model_get_autocast(const model *m) { return m->autocast; }

void model_weights_changed(model *m)
{
	if (m->wcast_ok)
		memset(m->wcast_ok, 0, (size_t)m->n_units);
}

/* The weight a linear reads: w itself, or under autocast its element in the
 * cast copy of the unit it is bound in (the copy made, or remade after the
 * weights changed, on first use).  NULL (a fault for the next sync) when the
 * copy cannot be allocated. */
const void *model_linear_weight(model *m, const void *w)
{
	if (m->autocast == BE_F32)
		return w;
	backend *be = m->be;
	for (int u = 0; u < m->n_units; u++) {
		const float *base = m->ubound[u];
		size_t numel = m->units[u].numel;
		if (!base || (const float *)w < base || (const float *)w >= base + numel)
			continue;
		if (!m->wcast[u]) {
			titan_err e = {0};
			m->wcast[u] = be->ops->alloc(be, numel * be_dtype_size(m->autocast), &e);
			if (!m->wcast[u]) {
				backend_fault(be, "model: autocast copy of unit %d: %s", u, e.msg);
				return NULL;
			}
		}
		if (!m->wcast_ok[u]) {
			be->ops->convert(be, m->wcast[u], m->autocast, base, BE_F32, (int64_t)numel);
			m->wcast_ok[u] = 1;
		}
		return elt(m->wcast[u], m->autocast, (size_t)((const float *)w - base));
	}
	backend_fault(be, "model: autocast: a linear's weight is in no bound unit");
	return NULL;
}

/* y (n, out) = x (n, in) @ w^T: activations and the bound weight. */
void model_linear(model *m, void *y, const void *x, const void *w, int64_t n, int64_t in,
		  int64_t out, float beta)
{
	be_dtype t = m->prec.act;
	if (m->pend && model_tp_linear_pending(m, y, x, w, n, in, out, beta, 0))
		return;
	if (m->f8 && model_f8_linear(m, y, x, w, n, in, out, beta))
		return;
	if ((w = model_linear_weight(m, w)) != NULL)
		m->be->ops->matmul(m->be, 0, 1, n, out, in, 1, x, in, w, in, t, beta, y, out, t);
}

void model_linear_dx(model *m, void *dx, const void *dy, const void *w, int64_t n,
		     int64_t in, int64_t out, float beta_dx)
{
	be_dtype t = m->prec.act;
	if (m->pend && model_tp_linear_pending(m, dx, dy, w, n, in, out, beta_dx, 1))
		return;
	if (m->f8 && model_f8_linear_dx(m, dx, dy, w, n, in, out, beta_dx))
		return;
	if ((w = model_linear_weight(m, w)) != NULL)
		m->be->ops->matmul(m->be, 0, 0, n, in, out, 1, dy, out, w, in, t, beta_dx, dx,
				   in, t);
}

void model_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		     int64_t in, int64_t out)
{
	model_tp_finish(m);
	if (m->f8 && model_f8_linear_dw(m, dw, dy, x, n, in, out))
		return;
	m->be->ops->matmul(m->be, 1, 0, out, in, n, 1, dy, out, x, in, m->prec.act, 1, dw, in,
			   m->prec.grad);
}

/* Initialisation: core/init_fill's chunked streams (the weights do not
 * depend on the number of threads, and a rank can draw its shard alone). */
typedef struct init_span {
	size_t n, first, end; /* the tensor's numel; the elements wanted [first, end) */
} init_span;

static void fill_random(float *dst, init_span sp, double std, double lo, double hi, int uniform,
			uint64_t seed, uint64_t tensor)
{
	init_fill(dst, sp.n, sp.first, sp.end, std, lo, hi, uniform, seed, tensor);
}

static void fill_normal(float *dst, init_span sp, double std, double lo, double hi,
			uint64_t seed, uint64_t tensor)
{
	fill_random(dst, sp, std, lo, hi, 0, seed, tensor);
}

void model_init_tensor(const model *m, int i, uint64_t seed, int depth_init, float *host)
{
	model_init_tensor_span(m, i, seed, depth_init, host, 0, m->tensors[i].numel);
}

void model_init_tensor_span(const model *m, int i, uint64_t seed, int depth_init, float *host,
			    size_t first, size_t end)
{
	const model_tensor *t = &m->tensors[i];
	init_span sp = {t->numel, first, end < t->numel ? end : t->numel};
	/* a layer's tensors by their layer; an MTP depth's as the last layer's,
	 * whose config 0.3.0 copies */
	int layer = m->tlayer[i] < m->args.n_layers ? m->tlayer[i] : m->args.n_layers - 1;
	double small = 0.02 / sqrt(2.0 * (depth_init ? layer + 1 : m->args.n_layers));
	double out = 1.0 / sqrt((double)m->args.dim);
	switch (m->init[i]) {
	case INIT_ONES:
		for (size_t j = sp.first; j < sp.end; j++)
			host[j] = 1.0f;
		break;
	case INIT_EMBED:
		fill_normal(host, sp, 1.0, 0, 0, seed, (uint64_t)i);
		break;
	case INIT_OUTPUT:
		fill_normal(host, sp, out, -3 * out, 3 * out, seed, (uint64_t)i);
		break;
	case INIT_INPUT:
		fill_normal(host, sp, 0.02, -2, 2, seed, (uint64_t)i);
		break;
	case INIT_FANIN:
		fill_random(host, sp, 1.0 / sqrt((double)m->args.dim), 0, 0, 1, seed, (uint64_t)i);
		break;
	case INIT_LINEAR:
		fill_random(host, sp, 1.0 / sqrt((double)t->shape[1]), 0, 0, 1, seed, (uint64_t)i);
		break;
	case INIT_ZEROS:
		for (size_t j = sp.first; j < sp.end; j++)
			host[j] = 0.0f;
		break;
	default:
		fill_normal(host, sp, small, -2, 2, seed, (uint64_t)i);
		break;
	}
}

int model_init(model *m, uint64_t seed, int depth_init, titan_err *e)
{
	if (!m->params)
		return err_set(e, "model init: the model has no storage of its own");
	size_t maxn = 0;
	for (int i = 0; i < m->n_tensors; i++)
		maxn = m->tensors[i].numel > maxn ? m->tensors[i].numel : maxn;
	float *host = malloc(maxn * sizeof(float)); /* one tensor at a time */
	if (!host)
		return err_set(e, "model init: out of memory");
	for (int i = 0; i < m->n_tensors; i++) {
		model_init_tensor(m, i, seed, depth_init, host);
		model_tensor_write(m, &m->tensors[i], 0, host);
	}
	free(host);
	/* torchtitan's MoE.init_weights: expert_bias and the counts start at 0 */
	size_t nb = (size_t)m->n_moe * (size_t)m->args.moe.experts;
	if (nb) {
		m->be->ops->zero(m->be, m->moe_bias, nb * sizeof(float));
		m->be->ops->zero(m->be, m->moe_counts, nb * sizeof(float));
	}
	return 0;
}
