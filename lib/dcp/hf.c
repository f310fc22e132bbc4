/* hf.c: titan/torchtitan Llama state <-> Hugging Face LlamaForCausalLM.
 *
 * torchtitan applies RoPE to interleaved pairs (x0, x1), (x2, x3), ... of each
 * head, HF to the two halves (x0, x_{h/2}), ...; the HF export therefore
 * permutes the rows of wq (per query head) and wk (per kv head): titan row
 * h*hd + 2i + j becomes HF row h*hd + j*hd/2 + i (torchtitan #1291 is what
 * happens when this is forgotten). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "dcp/dcp_priv.h"
#include "safetensors/safetensors.h"

const dcp_hf_key dcp_hf_llama_keys[] = {
	{"tok_embeddings.weight", "model.embed_tokens.weight", DCP_HF_PLAIN},
	{"norm.weight", "model.norm.weight", DCP_HF_PLAIN},
	{"output.weight", "lm_head.weight", DCP_HF_PLAIN},
	{"layers.{}.attention.wq.weight", "model.layers.{}.self_attn.q_proj.weight", DCP_HF_ROPE_Q},
	{"layers.{}.attention.wk.weight", "model.layers.{}.self_attn.k_proj.weight", DCP_HF_ROPE_K},
	{"layers.{}.attention.wv.weight", "model.layers.{}.self_attn.v_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.attention.wo.weight", "model.layers.{}.self_attn.o_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.feed_forward.w1.weight", "model.layers.{}.mlp.gate_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.feed_forward.w2.weight", "model.layers.{}.mlp.down_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.feed_forward.w3.weight", "model.layers.{}.mlp.up_proj.weight", DCP_HF_PLAIN},
	{"layers.{}.attention_norm.weight", "model.layers.{}.input_layernorm.weight", DCP_HF_PLAIN},
	{"layers.{}.ffn_norm.weight", "model.layers.{}.post_attention_layernorm.weight",
	 DCP_HF_PLAIN},
	{NULL, NULL, 0},
};

/* Whether name matches pattern, "{}" matching a decimal number (kept in
 * nums, at most 4). */
static int match_key(const char *pat, const char *name, long *nums, int *nn)
{
	*nn = 0;
	while (*pat) {
		if (pat[0] == '{' && pat[1] == '}') {
			if (*name < '0' || *name > '9' || *nn == 4)
				return 0;
			char *end;
			nums[(*nn)++] = strtol(name, &end, 10);
			name = end;
			pat += 2;
		} else if (*pat++ != *name++) {
			return 0;
		}
	}
	return *name == '\0';
}

/* The entry of keys (NULL: Llama's) whose pattern on one side matches name,
 * with the numbers it holds; NULL when none does. */
static const dcp_hf_key *find_key(const dcp_hf_key *keys, const char *name, int to_hf,
				  long *nums, int *nn)
{
	for (const dcp_hf_key *k = keys ? keys : dcp_hf_llama_keys; k->titan; k++) {
		const char *pat = to_hf ? k->titan : k->hf;
		if (pat && match_key(pat, name, nums, nn))
			return k;
	}
	return NULL;
}

/* pat with its "{}" replaced by nums in order (malloc'd). */
static char *format_key(const char *pat, const long *nums, int nn)
{
	char buf[256];
	size_t at = 0;
	int used = 0;
	for (const char *p = pat; *p && at + 24 < sizeof buf; p++) {
		if (p[0] == '{' && p[1] == '}' && used < nn) {
			at += (size_t)snprintf(buf + at, sizeof buf - at, "%ld", nums[used++]);
			p++;
		} else {
			buf[at++] = *p;
		}
	}
	buf[at] = '\0';
	return strdup(buf);
}

char *dcp_hf_key_name(const dcp_hf_key *keys, const char *name, int to_hf, int *kind)
{
	long nums[4];
	int nn;
	const dcp_hf_key *k = find_key(keys, name, to_hf, nums, &nn);
	*kind = k ? k->kind : 0;
	if (!k || (to_hf && !k->hf))
		return NULL;
	return format_key(to_hf ? k->hf : k->titan, nums, nn);
}

/* Map a name one way or the other through Llama's table. */
char *dcp_hf_name(const char *name, int to_hf, int *rope)
{
	return dcp_hf_key_name(dcp_hf_llama_keys, name, to_hf, rope);
}

/* Permute the rows of W (d1, d2) of n heads, elements of es bytes. */
void dcp_rope_permute(const void *src, void *dst, int64_t d1, int64_t d2, int n, int to_hf,
		      size_t es)
{
	int64_t hd = d1 / n, half = hd / 2;
	size_t row = (size_t)d2 * es;
	for (int h = 0; h < n; h++)
		for (int64_t i = 0; i < half; i++)
			for (int j = 0; j < 2; j++) {
				int64_t t = h * hd + 2 * i + j, f = h * hd + j * half + i;
				int64_t from = to_hf ? t : f, to = to_hf ? f : t;
				memcpy((uint8_t *)dst + (size_t)to * row, (const uint8_t *)src + (size_t)from * row,
				       row);
			}
}

static int check_shape(const char *name, const dcp_src_item *it, const dcp_hf_model *m,
		       int rope, titan_err *err)
{
	if (rope && (it->ndim != 2 || it->shape[0] % (rope == 1 ? m->n_heads : m->n_kv_heads) ||
		     (it->shape[0] / (rope == 1 ? m->n_heads : m->n_kv_heads)) % 2))
		return err_set(err, "%s: shape does not split into %d heads of even size", name,
			       rope == 1 ? m->n_heads : m->n_kv_heads);
	if (rope == 1 && it->shape[0] != (int64_t)m->n_heads * m->head_dim)
		return err_set(err, "%s: %" PRId64 " rows, the model has %d heads of %d", name,
			       it->shape[0], m->n_heads, m->head_dim);
	if (rope == 2 && it->shape[0] != (int64_t)m->n_kv_heads * m->head_dim)
		return err_set(err, "%s: %" PRId64 " rows, the model has %d kv heads of %d", name,
			       it->shape[0], m->n_kv_heads, m->head_dim);
	return 0;
}

/* Fill the shapes a checkpoint implies: dim, vocab, layers, FFN size. */
static int infer(dcp_source *s, dcp_hf_model *m, int from_hf, titan_err *err)
{
	const char *emb = from_hf ? "model.embed_tokens.weight" : "tok_embeddings.weight";
	const char *w1 = from_hf ? "model.layers.0.mlp.gate_proj.weight" : "layers.0.feed_forward.w1.weight";
	const char *ew1 = from_hf ? "model.layers.0.mlp.experts.0.gate_proj.weight"
				  : "layers.0.moe.experts.w1";
	const dcp_src_item *e = dcp_source_find(s, emb), *f = dcp_source_find(s, w1);
	const dcp_src_item *x = dcp_source_find(s, ew1);
	if (!e || e->ndim != 2 || !((f && f->ndim == 2) || x))
		return err_set(err, "no %s / %s: not a checkpoint of this model", emb, f ? ew1 : w1);
	if (m->dim && m->dim != e->shape[1])
		return err_set(err, "%s has dim %" PRId64 ", the flavor says %d", emb, e->shape[1], m->dim);
	m->dim = (int)e->shape[1];
	m->vocab_size = (int)e->shape[0];
	if (f)
		m->ffn_hidden = (int)f->shape[0];
	if (x) { /* the experts: their number and hidden size */
		char name[128];
		int n = from_hf ? 0 : (int)x->shape[0];
		while (from_hf) {
			snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.gate_proj.weight", n);
			if (!dcp_source_find(s, name))
				break;
			n++;
		}
		m->n_experts = n;
		m->moe_inter = (int)x->shape[x->ndim - 2];
	}
	int layers = 0;
	char name[128];
	for (;; layers++) {
		snprintf(name, sizeof name, from_hf ? "model.layers.%d.input_layernorm.weight"
						    : "layers.%d.attention_norm.weight", layers);
		if (!dcp_source_find(s, name))
			break;
	}
	if (m->n_layers && m->n_layers != layers)
		return err_set(err, "checkpoint has %d layers, the flavor %d", layers, m->n_layers);
	m->n_layers = layers;
	if (m->n_heads <= 0 || m->n_kv_heads <= 0)
		return err_set(err, "need the number of heads (a flavor or --n-heads)");
	/* Heads need not split dim (Qwen3's are 128 wide at any dim): wq's rows
	 * say their size. */
	const char *wq = from_hf ? "model.layers.0.self_attn.q_proj.weight"
				 : "layers.0.attention.wq.weight";
	const dcp_src_item *q = dcp_source_find(s, wq);
	if (!q || q->ndim != 2 || q->shape[0] % m->n_heads)
		return err_set(err, "%s: %s does not split into %d heads", wq, q ? "its rows" : "absent",
			       m->n_heads);
	m->head_dim = (int)(q->shape[0] / m->n_heads);
	return 0;
}

/* The keys of every decoder-only model's config.json, from m. */
static void common_config(json_t *c, const dcp_hf_model *m)
{
	json_object_set_new(c, "attention_bias", json_false());
	json_object_set_new(c, "attention_dropout", json_real(0.0));
	json_object_set_new(c, "head_dim", json_integer(m->head_dim));
	json_object_set_new(c, "hidden_act", json_string("silu"));
	json_object_set_new(c, "hidden_size", json_integer(m->dim));
	json_object_set_new(c, "initializer_range", json_real(0.02));
	json_object_set_new(c, "intermediate_size", json_integer(m->ffn_hidden));
	json_object_set_new(c, "max_position_embeddings", json_integer(m->max_seq_len));
	json_object_set_new(c, "num_attention_heads", json_integer(m->n_heads));
	json_object_set_new(c, "num_hidden_layers", json_integer(m->n_layers));
	json_object_set_new(c, "num_key_value_heads", json_integer(m->n_kv_heads));
	json_object_set_new(c, "rms_norm_eps", json_real(m->norm_eps));
	json_object_set_new(c, "rope_theta", json_real(m->rope_theta));
	json_object_set_new(c, "tie_word_embeddings", json_boolean(m->tied));
	json_object_set_new(c, "use_cache", json_true());
	json_object_set_new(c, "vocab_size", json_integer(m->vocab_size));
}

/* LlamaForCausalLM's own keys. */
static int llama_config(json_t *c, const dcp_hf_model *m)
{
	json_t *arch = json_array();
	json_array_append_new(arch, json_string("LlamaForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	if (m->vocab_size == 128256) {
		json_object_set_new(c, "bos_token_id", json_integer(128000));
		json_object_set_new(c, "eos_token_id", json_integer(128001));
	}
	json_object_set_new(c, "mlp_bias", json_false());
	json_object_set_new(c, "model_type", json_string("llama"));
	json_object_set_new(c, "pretraining_tp", json_integer(1));
	if (m->rope_scale_factor > 0) {
		json_t *r = json_object();
		json_object_set_new(r, "factor", json_real(m->rope_scale_factor));
		json_object_set_new(r, "high_freq_factor", json_real(4.0));
		json_object_set_new(r, "low_freq_factor", json_real(1.0));
		json_object_set_new(r, "original_max_position_embeddings", json_integer(8192));
		json_object_set_new(r, "rope_type", json_string("llama3"));
		json_object_set_new(c, "rope_scaling", r);
	} else {
		json_object_set_new(c, "rope_scaling", json_null());
	}
	return 0;
}

static int write_config(const char *dir, const dcp_hf_model *m, dcp_dtype dt, titan_err *err)
{
	json_t *c = json_object();
	json_object_set_new(c, "torch_dtype", json_string(ptz_dtype_torch(dt)));
	common_config(c, m);
	if ((m->config ? m->config : llama_config)(c, m) != 0) {
		json_decref(c);
		return err_set(err, "%s/config.json: out of memory", dir);
	}
	char *text = json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
	json_decref(c);
	size_t n = strlen(dir) + 16;
	char *p = malloc(n);
	int rc;
	if (!text || !p) {
		rc = err_set(err, "out of memory");
	} else {
		snprintf(p, n, "%s/config.json", dir);
		size_t tl = strlen(text);
		text[tl] = '\n';
		rc = atomic_write_file(p, text, tl + 1, err);
	}
	free(text);
	free(p);
	return rc;
}

/* Read, cast and (for wq/wk) permute one tensor into a new buffer. */
static void *load_mapped(dcp_source *s, const dcp_src_item *it, dcp_dtype dt, int rope,
			 const dcp_hf_model *m, int to_hf, titan_err *err)
{
	size_t es = ptz_dtype_size(dt), b = (size_t)dcp_numel(it->ndim, it->shape) * es;
	void *buf = malloc(b ? b : 1), *out = NULL;
	if (!buf) {
		err_set(err, "out of memory");
		return NULL;
	}
	if (dcp_source_read(s, it, buf, dt, err)) {
		free(buf);
		return NULL;
	}
	if (!rope)
		return buf;
	out = malloc(b ? b : 1);
	if (out)
		dcp_rope_permute(buf, out, it->shape[0], it->shape[1],
				 rope == 1 ? m->n_heads : m->n_kv_heads, to_hf, es);
	else
		err_set(err, "out of memory");
	free(buf);
	return out;
}

/* One stack of experts (experts, a, b) as HF's one tensor per expert, named by
 * key->hf with the layer and the expert, appended to items. */
static int export_experts(dcp_source *s, const dcp_src_item *it, const dcp_hf_key *key,
			  long layer, dcp_dtype dt, st_item *items, size_t *k, titan_err *err)
{
	if (it->ndim != 3)
		return err_set(err, "%s: %d dims, expected (experts, out, in)", it->name, it->ndim);
	void *all = load_mapped(s, it, dt, 0, NULL, 1, err);
	if (!all)
		return -1;
	size_t slice = (size_t)(it->shape[1] * it->shape[2]) * ptz_dtype_size(dt);
	int rc = 0;
	for (int64_t x = 0; x < it->shape[0] && rc == 0; x++) {
		long nums[2] = {layer, (long)x};
		st_item *d = &items[(*k)++];
		d->name = format_key(key->hf, nums, 2);
		d->dtype = dt;
		d->ndim = 2;
		d->shape[0] = it->shape[1];
		d->shape[1] = it->shape[2];
		d->data = malloc(slice ? slice : 1);
		if (!d->name || !d->data)
			rc = err_set(err, "out of memory");
		else
			memcpy((void *)d->data, (char *)all + (size_t)x * slice, slice);
	}
	free(all);
	return rc;
}

int dcp_to_hf(const char *src, const char *outdir, const dcp_hf_model *model, dcp_dtype export_dtype,
	      uint64_t max_shard, titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, src, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 0, err);
	size_t n = dcp_source_count(s), k = 0, cap = n;
	long nums[4];
	int nn;
	for (size_t i = 0; i < n; i++) { /* one HF tensor per expert */
		const dcp_src_item *it = dcp_source_item(s, i);
		const dcp_hf_key *key = find_key(m.keys, it->name, 1, nums, &nn);
		if (key && key->kind == DCP_HF_EXPERTS && it->ndim == 3)
			cap += (size_t)it->shape[0];
	}
	st_item *items = calloc(cap ? cap : 1, sizeof *items);
	if (!items && rc == 0)
		rc = err_set(err, "out of memory");
	dcp_dtype first = PTZ_NONE;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!dcp_is_model_key(it->name) || it->kind != DCP_TENSOR)
			continue;
		const dcp_hf_key *key = find_key(m.keys, it->name, 1, nums, &nn);
		if (!key) {
			rc = err_set(err, "%s: not a weight of the model torchtitan names", it->name);
			break;
		}
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : it->dtype;
		if (key->kind == DCP_HF_DROP)
			continue;
		if (first == PTZ_NONE)
			first = dt;
		if (key->kind == DCP_HF_EXPERTS) {
			rc = export_experts(s, it, key, nums[0], dt, items, &k, err);
			continue;
		}
		int rope = key->kind;
		char *hn = format_key(key->hf, nums, nn);
		if (!hn) {
			rc = err_set(err, "out of memory");
			break;
		}
		if (m.tied && !strcmp(hn, "lm_head.weight")) {
			free(hn);
			continue;
		}
		st_item *d = &items[k];
		d->name = hn;
		d->dtype = dt;
		d->ndim = it->ndim;
		memcpy(d->shape, it->shape, sizeof(int64_t) * (size_t)it->ndim);
		k++;
		rc = check_shape(it->name, it, &m, rope, err);
		if (rc == 0 && !(d->data = load_mapped(s, it, dt, rope, &m, 1, err)))
			rc = -1;
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write_sharded(outdir, items, k, max_shard, meta, err);
	if (rc == 0)
		rc = write_config(outdir, &m, first == PTZ_NONE ? PTZ_F32 : first, err);
	for (size_t i = 0; i < k; i++) {
		free((char *)items[i].name);
		free((void *)items[i].data);
	}
	free(items);
	dcp_source_close(s);
	return rc;
}

/* Experts arriving one HF tensor at a time, stacked into torchtitan's
 * (experts, a, b) tensor. */
typedef struct expert_stack {
	dcp_item *item; /* its DCP item; data (experts, a, b) */
	unsigned char *seen; /* (experts) */
	int64_t have;
} expert_stack;

static int stack_expert(dcp_source *s, const dcp_src_item *it, const dcp_hf_key *key,
			const long *nums, dcp_dtype dt, const dcp_hf_model *m, dcp_item *items,
			size_t *k, expert_stack *stacks, size_t *ns, titan_err *err)
{
	char *tn = format_key(key->titan, nums, 1);
	if (!tn)
		return err_set(err, "out of memory");
	expert_stack *st = NULL;
	for (size_t i = 0; i < *ns && !st; i++)
		if (!strcmp(stacks[i].item->fqn, tn))
			st = &stacks[i];
	if (it->ndim != 2 || nums[1] < 0 || nums[1] >= m->n_experts ||
	    (st && memcmp(st->item->shape + 1, it->shape, 2 * sizeof(int64_t)))) {
		free(tn);
		return err_set(err, "%s: expert %ld of %d, or its shape differs from the other "
			       "experts'", it->name, nums[1], m->n_experts);
	}
	size_t es = ptz_dtype_size(dt), slice = (size_t)(it->shape[0] * it->shape[1]) * es;
	if (!st) {
		st = &stacks[(*ns)++];
		st->item = &items[(*k)++];
		int64_t shape[3] = {m->n_experts, it->shape[0], it->shape[1]};
		dcp_item_full(st->item, tn, dt, 3, shape, malloc(slice * (size_t)m->n_experts + 1));
		st->seen = calloc((size_t)m->n_experts, 1);
		if (!st->item->data || !st->seen)
			return err_set(err, "out of memory");
	} else {
		free(tn);
	}
	if (st->seen[nums[1]]++)
		return err_set(err, "%s: expert %ld twice", it->name, nums[1]);
	void *one = load_mapped(s, it, dt, 0, m, 0, err);
	if (!one)
		return -1;
	memcpy((char *)st->item->data + (size_t)nums[1] * slice, one, slice);
	free(one);
	st->have++;
	return 0;
}

int dcp_from_hf(const char *hfdir, const char *out, const dcp_hf_model *model, dcp_dtype dtype,
		titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, hfdir, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 1, err);
	size_t n = dcp_source_count(s), k = 0, ns = 0;
	dcp_item *items = calloc(n + 1, sizeof *items);
	expert_stack *stacks = calloc(n + 1, sizeof *stacks);
	if ((!items || !stacks) && rc == 0)
		rc = err_set(err, "out of memory");
	int have_output = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		long nums[4];
		int nn;
		const dcp_hf_key *key = find_key(m.keys, it->name, 0, nums, &nn);
		if (!key) {
			rc = err_set(err, "%s: not a weight of the model Hugging Face names", it->name);
			break;
		}
		dcp_dtype dt = dtype != PTZ_NONE ? dtype : it->dtype;
		if (key->kind == DCP_HF_EXPERTS) {
			rc = stack_expert(s, it, key, nums, dt, &m, items, &k, stacks, &ns, err);
			continue;
		}
		int rope = key->kind;
		char *tn = format_key(key->titan, nums, nn);
		if (!tn) {
			rc = err_set(err, "out of memory");
			break;
		}
		have_output |= !strcmp(tn, "output.weight");
		dcp_item *d = &items[k++];
		dcp_item_full(d, tn, dt, it->ndim, it->shape, NULL);
		rc = check_shape(it->name, it, &m, rope, err);
		if (rc == 0 && !(d->data = load_mapped(s, it, dt, rope, &m, 0, err)))
			rc = -1;
	}
	for (size_t i = 0; i < ns && rc == 0; i++)
		if (stacks[i].have != m.n_experts)
			rc = err_set(err, "%s: %" PRId64 " of the %d experts", stacks[i].item->fqn,
				     stacks[i].have, m.n_experts);
	/* A tied model (Llama 3.2 1B/3B) has no lm_head: torchtitan's model still
	 * has output.weight, equal to the embedding. */
	if (rc == 0 && !have_output) {
		const dcp_src_item *e = dcp_source_find(s, "model.embed_tokens.weight");
		dcp_dtype dt = dtype != PTZ_NONE ? dtype : e->dtype;
		dcp_item *d = &items[k++];
		dcp_item_full(d, strdup("output.weight"), dt, e->ndim, e->shape, NULL);
		if (!d->fqn || !(d->data = load_mapped(s, e, dt, 0, &m, 0, err)))
			rc = -1;
	}
	if (rc == 0)
		rc = dcp_save(out, items, k, NULL, err);
	for (size_t i = 0; i < k; i++) {
		free((char *)items[i].fqn);
		free(items[i].data);
	}
	for (size_t i = 0; i < ns; i++)
		free(stacks[i].seen);
	free(stacks);
	free(items);
	dcp_source_close(s);
	return rc;
}
