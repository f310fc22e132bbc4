/* hf.c: titan/torchtitan state <-> Hugging Face checkpoints, through each
 * family's key table (dcp_hf_key: torchtitan's StateDictAdapter's names) and
 * the shape changes its entries name: wq / wk rows permuted, experts stacked
 * or split one per expert, fused experts transposed or cut in halves.
 *
 * torchtitan's Llama applies RoPE to interleaved pairs (x0, x1), (x2, x3), ...
 * of each head, HF to the two halves (x0, x_{h/2}), ...; the HF export therefore
 * permutes the rows of wq (per query head) and wk (per kv head): titan row
 * h*hd + 2i + j becomes HF row h*hd + j*hd/2 + i (torchtitan #1291 is what
 * happens when this is forgotten). */
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "core/json.h"
#include "dcp/dcp_priv.h"
#include "model/flavor.h"
#include "model/model.h"
#include "safetensors/safetensors.h"

const dcp_hf_key dcp_hf_llama_keys[] = {
	DCP_HF_KEYS_EDGES,
	DCP_HF_KEY_ATTN("wq", "q", DCP_HF_ROPE_Q),
	DCP_HF_KEY_ATTN("wk", "k", DCP_HF_ROPE_K),
	DCP_HF_KEY_ATTN("wv", "v", DCP_HF_PLAIN),
	DCP_HF_KEY_ATTN("wo", "o", DCP_HF_PLAIN),
	DCP_HF_KEYS_FFN("mlp"),
	DCP_HF_KEYS_LAYER_NORMS,
	{NULL, NULL, 0},
};

/* Whether name matches pattern, "{}" matching a decimal number (kept in
 * nums, at most 4). */
int dcp_hf_match(const char *pat, const char *name, long *nums, int *nn)
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
		if (pat && dcp_hf_match(pat, name, nums, nn))
			return k;
	}
	return NULL;
}

/* pat with its "{}" replaced by nums in order (malloc'd). */
char *dcp_hf_format(const char *pat, const long *nums, int nn)
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

/* DeepSeek V3's multi-token prediction depths: titan's (and torchtitan
 * 0.3.0's) mtp_layers.<k>.* are HF's model.layers.<n_layers + k>.*, the
 * decoder layer keys and the depth's own (enorm, hnorm, eh_proj,
 * shared_head.norm) alike (0.3.0's DeepSeekV3StateDictAdapter
 * _map_to_hf_layer_key / _map_from_hf_layer_key).  The table is looked up
 * with the depth as that layer: mtp_layers.<k>.rest as layers.<n + k>.rest
 * in buf; other names as they are. */
static const char *as_layer(const char *name, int n_layers, char *buf, size_t cap)
{
	char *end;
	if (strncmp(name, "mtp_layers.", 11) != 0 || name[11] < '0' || name[11] > '9')
		return name;
	long k = strtol(name + 11, &end, 10);
	if (*end != '.' || snprintf(buf, cap, "layers.%ld%s", n_layers + k, end) >= (int)cap)
		return name;
	return buf;
}

/* The reverse on a titan name made from the table (malloc'd, consumed):
 * layers.<L>.rest with L >= n_layers is the depth mtp_layers.<L - n>.rest. */
static char *as_depth(char *tn, int n_layers)
{
	char *end;
	if (!tn || strncmp(tn, "layers.", 7) != 0 || tn[7] < '0' || tn[7] > '9')
		return tn;
	long l = strtol(tn + 7, &end, 10);
	if (*end != '.' || l < n_layers)
		return tn;
	size_t cap = strlen(tn) + 16;
	char *out = malloc(cap);
	if (out)
		snprintf(out, cap, "mtp_layers.%ld%s", l - n_layers, end);
	free(tn);
	return out;
}

/* A titan name from the table's pattern and the HF key's numbers. */
static char *titan_name(const char *pat, const long *nums, int nn, const dcp_hf_model *m)
{
	return as_depth(dcp_hf_format(pat, nums, nn), m->n_layers);
}

char *dcp_hf_key_name(const dcp_hf_key *keys, const char *name, int to_hf, int *kind)
{
	long nums[4];
	int nn;
	const dcp_hf_key *k = find_key(keys, name, to_hf, nums, &nn);
	*kind = k ? k->kind : 0;
	if (!k || (to_hf && !k->hf))
		return NULL;
	return dcp_hf_format(to_hf ? k->hf : k->titan, nums, nn);
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

/* The first layer's tensor named by fmt (one %d, the layer) among the first
 * 64 layers: DeepSeek V3's experts start after its dense layers, Llama 4's
 * alternate with them. */
static const dcp_src_item *first_layer_item(dcp_source *s, const char *fmt)
{
	char name[160];
	for (int l = 0; l < 64; l++) {
		snprintf(name, sizeof name, fmt, l);
		const dcp_src_item *it = dcp_source_find(s, name);
		if (it)
			return it;
	}
	return NULL;
}

/* Multi-head latent attention's dims from layer 0's shapes (kv_norm, wkv_a,
 * wkv_b, wo, q_norm); 0 when the checkpoint has no MLA. */
static int infer_mla(dcp_source *s, dcp_hf_model *m, int from_hf)
{
	const char *p = from_hf ? "model.layers.0.self_attn." : "layers.0.attention.";
	const char *nm[5] = {"kv_a_layernorm.weight", "kv_a_proj_with_mqa.weight",
			     "kv_b_proj.weight", "o_proj.weight", "q_a_layernorm.weight"};
	const char *tt[5] = {"kv_norm.weight", "wkv_a.weight", "wkv_b.weight", "wo.weight",
			     "q_norm.weight"};
	const dcp_src_item *it[5];
	for (int i = 0; i < 5; i++) {
		char name[128];
		snprintf(name, sizeof name, "%s%s", p, from_hf ? nm[i] : tt[i]);
		it[i] = dcp_source_find(s, name);
	}
	if (!it[0] || !it[1] || !it[2] || !it[3] || it[2]->shape[0] % m->n_heads ||
	    it[3]->ndim != 2 || it[3]->shape[1] % m->n_heads)
		return 0;
	m->kv_lora = (int)it[0]->shape[0];
	m->qk_rope = (int)it[1]->shape[0] - m->kv_lora;
	m->v_head = (int)(it[3]->shape[1] / m->n_heads);
	m->qk_nope = (int)(it[2]->shape[0] / m->n_heads) - m->v_head;
	/* Qwen3's q_norm is per head: a bottleneck's is wq_a's width */
	m->q_lora = it[4] && it[4]->shape[0] != m->qk_nope + m->qk_rope ? (int)it[4]->shape[0] : 0;
	m->head_dim = m->qk_nope + m->qk_rope;
	return 1;
}

/* Fill the shapes a checkpoint implies: dim, vocab, layers, FFN size. */
/* Where each side keeps the first layer's feed-forward: the dense SwiGLU's
 * w1, and the experts' first matrix, (experts, inter * mult, dim) in
 * torchtitan's stacks, one HF tensor per expert (per_expert) or HF's fused
 * (experts, dim, inter * mult) (GPT-OSS, Llama 4). */
static const char *const dense_at[2][2] = {
	{"layers.%d.feed_forward.w1.weight", NULL},
	{"model.layers.%d.mlp.gate_proj.weight", "model.layers.%d.feed_forward.gate_proj.weight"},
};
static const struct {
	const char *fmt;
	int inter_dim, mult, per_expert;
} experts_at[2][3] = {
	{{"layers.%d.moe.experts.w1", 1, 1, 0},
	 {"layers.%d.moe.experts.mlp1_weight", 1, 2, 0},
	 {NULL, 0, 0, 0}},
	{{"model.layers.%d.mlp.experts.0.gate_proj.weight", 0, 1, 1},
	 {"model.layers.%d.mlp.experts.gate_up_proj", 2, 2, 0},
	 {"model.layers.%d.feed_forward.experts.gate_up_proj", 2, 2, 0}},
};

/* The experts' number and hidden size from the first layer that has them;
 * their layer in *at (-1: none). */
static void infer_experts(dcp_source *s, dcp_hf_model *m, int from_hf, int *at)
{
	*at = -1;
	for (int i = 0; i < 3; i++) {
		const char *fmt = experts_at[from_hf][i].fmt;
		const dcp_src_item *x = fmt ? first_layer_item(s, fmt) : NULL;
		if (!x)
			continue;
		*at = atoi(x->name + strlen(from_hf ? "model.layers." : "layers."));
		m->moe_inter = (int)(x->shape[experts_at[from_hf][i].inter_dim] /
				     experts_at[from_hf][i].mult);
		int n = (int)x->shape[0];
		if (experts_at[from_hf][i].per_expert) {
			char name[128];
			for (n = 0;; n++) {
				snprintf(name, sizeof name,
					 "model.layers.%d.mlp.experts.%d.gate_proj.weight", *at, n);
				if (!dcp_source_find(s, name))
					break;
			}
		}
		m->n_experts = n;
		return;
	}
}

/* The decoder layers and, after them, the multi-token prediction depths
 * (*mtp): HF's model.layers.<L> is a depth from the first L with an enorm
 * (DeepSeek V3's), titan's are mtp_layers.<k>. */
static int count_layers(dcp_source *s, int from_hf, int *mtp)
{
	int layers = 0, all;
	char name[128];
	for (all = 0;; all++) {
		snprintf(name, sizeof name, from_hf ? "model.layers.%d.input_layernorm.weight"
						    : "layers.%d.attention_norm.weight", all);
		if (!dcp_source_find(s, name))
			break;
		snprintf(name, sizeof name, "model.layers.%d.enorm.weight", all);
		if (layers == all && !(from_hf && dcp_source_find(s, name)))
			layers++;
	}
	*mtp = all - layers;
	for (; !from_hf; ++*mtp) {
		snprintf(name, sizeof name, "mtp_layers.%d.enorm.weight", *mtp);
		if (!dcp_source_find(s, name))
			break;
	}
	return layers;
}

static int infer(dcp_source *s, dcp_hf_model *m, int from_hf, titan_err *err)
{
	const char *emb = from_hf ? "model.embed_tokens.weight" : "tok_embeddings.weight";
	const dcp_src_item *e = dcp_source_find(s, emb), *f = NULL;
	for (int i = 0; i < 2 && !f; i++)
		if (dense_at[from_hf][i])
			f = first_layer_item(s, dense_at[from_hf][i]);
	int moe_at;
	infer_experts(s, m, from_hf, &moe_at);
	if (!e || e->ndim != 2 || !((f && f->ndim == 2) || moe_at >= 0))
		return err_set(err, "no %s or feed-forward: not a checkpoint of this model", emb);
	if (m->dim && m->dim != e->shape[1])
		return err_set(err, "%s has dim %" PRId64 ", the flavor says %d", emb, e->shape[1], m->dim);
	m->dim = (int)e->shape[1];
	m->vocab_size = (int)e->shape[0];
	if (f)
		m->ffn_hidden = (int)f->shape[0];
	m->dense_layers = moe_at > 0 ? moe_at : 0;
	int layers = count_layers(s, from_hf, &m->mtp_layers);
	if (m->n_layers && m->n_layers != layers)
		return err_set(err, "checkpoint has %d layers, the flavor %d", layers, m->n_layers);
	m->n_layers = layers;
	if (m->n_heads <= 0 || m->n_kv_heads <= 0)
		return err_set(err, "need the number of heads (a flavor or --n-heads)");
	if (infer_mla(s, m, from_hf))
		return 0;
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
	char *p = path_join(dir, "config.json");
	int rc = p ? tjson_dump_file(c, p, err) : err_set(err, "out of memory");
	json_decref(c);
	free(p);
	return rc;
}

/* The RoPE permutation a key's kind asks for: 1 wq, 2 wk, 0 none. */
static int rope_of(int kind)
{
	return kind == DCP_HF_ROPE_Q ? 1 : kind == DCP_HF_ROPE_K ? 2 : 0;
}

/* A tensor's shape against what its key's kind does to it; out_shape (the
 * other side's) gets the last two dims swapped for DCP_HF_TRANSPOSE. */
static int check_kind(const dcp_src_item *it, int kind, const dcp_hf_model *m,
		      int64_t *out_shape, titan_err *err)
{
	if (kind != DCP_HF_TRANSPOSE)
		return check_shape(it->name, it, m, rope_of(kind), err);
	if (it->ndim != 3)
		return err_set(err, "%s: %d dims, expected (experts, a, b)", it->name, it->ndim);
	out_shape[1] = it->shape[2];
	out_shape[2] = it->shape[1];
	return 0;
}

/* (e, a, b) -> (e, b, a), elements of es bytes. */
static void transpose_last(const void *src, void *dst, const int64_t *shape, size_t es)
{
	int64_t a = shape[1], b = shape[2];
	for (int64_t x = 0; x < shape[0]; x++)
		for (int64_t i = 0; i < a; i++)
			for (int64_t j = 0; j < b; j++)
				memcpy((char *)dst + (size_t)((x * b + j) * a + i) * es,
				       (const char *)src + (size_t)((x * a + i) * b + j) * es, es);
}

/* buf (consumed) as the other side keeps it: rows of wq / wk permuted, the
 * last two dims of fused experts swapped (DCP_HF_TRANSPOSE), or buf itself. */
static void *mapped(void *buf, int ndim, const int64_t *shape, size_t es, int kind,
		    const dcp_hf_model *m, int to_hf, titan_err *err)
{
	int rope = rope_of(kind);
	if (!buf || (!rope && kind != DCP_HF_TRANSPOSE))
		return buf;
	size_t b = (size_t)dcp_numel(ndim, shape) * es;
	void *out = malloc(b ? b : 1);
	if (!out)
		err_set(err, "out of memory");
	else if (kind == DCP_HF_TRANSPOSE)
		transpose_last(buf, out, shape, es);
	else
		dcp_rope_permute(buf, out, shape[0], shape[1], rope == 1 ? m->n_heads : m->n_kv_heads,
				 to_hf, es);
	free(buf);
	return out;
}

/* Read, cast and map (mapped) one tensor into a new buffer. */
static void *load_mapped(dcp_source *s, const dcp_src_item *it, dcp_dtype dt, int kind,
			 const dcp_hf_model *m, int to_hf, titan_err *err)
{
	size_t es = ptz_dtype_size(dt), b = (size_t)dcp_numel(it->ndim, it->shape) * es;
	void *buf = malloc(b ? b : 1);
	if (!buf) {
		err_set(err, "out of memory");
		return NULL;
	}
	if (dcp_source_read(s, it, buf, dt, err)) {
		free(buf);
		return NULL;
	}
	return mapped(buf, it->ndim, it->shape, es, kind, m, to_hf, err);
}

/* One half of a fused (experts, dim, 2f) gate_up_proj <-> torchtitan's (experts,
 * f, dim): half 0 the gate (w1), 1 the up (w3); elements of es bytes. */
static void half_copy(void *fused, void *part, int64_t e, int64_t f, int64_t d, int half,
		      int to_fused, size_t es)
{
	for (int64_t x = 0; x < e; x++)
		for (int64_t i = 0; i < f; i++)
			for (int64_t j = 0; j < d; j++) {
				char *a = (char *)fused + (size_t)((x * d + j) * 2 * f + half * f + i) * es;
				char *b = (char *)part + (size_t)((x * f + i) * d + j) * es;
				memcpy(to_fused ? a : b, to_fused ? b : a, es);
			}
}

st_item *dcp_hf_out_push(dcp_hf_out *o, char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			 void *data, titan_err *err)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 64;
		st_item *ni = realloc(o->items, cap * sizeof *ni);
		if (!ni) {
			err_set(err, "out of memory");
			return NULL;
		}
		o->items = ni;
		o->cap = cap;
	}
	st_item *d = &o->items[o->n++];
	memset(d, 0, sizeof *d);
	d->name = name;
	d->dtype = dt;
	d->ndim = ndim;
	memcpy(d->shape, shape, sizeof(int64_t) * (size_t)ndim);
	d->data = data;
	return d;
}

void dcp_hf_out_free(dcp_hf_out *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free((char *)o->items[i].name);
		free((void *)o->items[i].data);
	}
	free(o->items);
	memset(o, 0, sizeof *o);
}

/* torchtitan's expert stack (experts, a, b) as HF's one tensor (a, b) per
 * expert, named by key->hf with the layer and the expert; data consumed. */
static int export_experts(const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			  void *data, const dcp_hf_key *key, long layer, dcp_hf_out *o, titan_err *err)
{
	int rc = ndim == 3 ? 0 : err_set(err, "%s: %d dims, expected (experts, out, in)", name, ndim);
	size_t slice = ndim == 3 ? (size_t)(shape[1] * shape[2]) * ptz_dtype_size(dt) : 0;
	for (int64_t x = 0; rc == 0 && x < shape[0]; x++) {
		long nums[2] = {layer, (long)x};
		char *hn = dcp_hf_format(key->hf, nums, 2);
		void *one = malloc(slice ? slice : 1);
		if (!hn || !one || !dcp_hf_out_push(o, hn, dt, 2, shape + 1, one, err)) {
			free(hn);
			free(one);
			rc = err_set(err, "out of memory");
		} else {
			memcpy(one, (char *)data + (size_t)x * slice, slice);
		}
	}
	free(data);
	return rc;
}

/* torchtitan's w1 or w3 (experts, f, dim) into its half of HF's fused
 * gate_up_proj (experts, dim, 2f), made (zeroed) by whichever comes first;
 * data consumed. */
static int export_half(const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		       void *data, const dcp_hf_key *key, const long *nums, int nn, dcp_hf_out *o,
		       titan_err *err)
{
	char *hn = ndim == 3 ? dcp_hf_format(key->hf, nums, nn) : NULL;
	int rc = ndim != 3 ? err_set(err, "%s: %d dims, expected (experts, f, dim)", name, ndim)
		 : !hn     ? err_set(err, "out of memory") : 0;
	int64_t e = shape[0], f = ndim == 3 ? shape[1] : 0, d = ndim == 3 ? shape[2] : 0;
	size_t es = ptz_dtype_size(dt);
	st_item *fused = NULL;
	for (size_t i = 0; rc == 0 && i < o->n && !fused; i++)
		if (!strcmp(o->items[i].name, hn))
			fused = &o->items[i];
	if (rc == 0 && fused) {
		free(hn);
		if (fused->shape[0] != e || fused->shape[1] != d || fused->shape[2] != 2 * f ||
		    fused->dtype != dt)
			rc = err_set(err, "%s: shape or type differs from its other half", name);
	} else if (rc == 0) {
		int64_t fs[3] = {e, d, 2 * f};
		void *buf = calloc((size_t)(e * d * 2 * f) * es + 1, 1);
		if (!buf || !(fused = dcp_hf_out_push(o, hn, dt, 3, fs, buf, err))) {
			free(hn);
			free(buf);
			rc = err_set(err, "out of memory");
		}
	} else {
		free(hn);
	}
	if (rc == 0)
		half_copy((void *)fused->data, data, e, f, d, key->kind == DCP_HF_UP_HALF, 1, es);
	free(data);
	return rc;
}

/* One titan tensor (data consumed) into HF's, as its key's kind says: one
 * tensor (permuted or transposed), one per expert, half of a fused one, or
 * none (a dropped buffer; lm_head of a tied model). */
static int export_tensor(const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			 void *data, const dcp_hf_model *m, dcp_hf_out *o, titan_err *err)
{
	long nums[4];
	int nn;
	char lbuf[256];
	const char *as = as_layer(name, m->n_layers, lbuf, sizeof lbuf);
	const dcp_hf_key *key = find_key(m->keys, as, 1, nums, &nn);
	size_t len = strlen(name);
	if (!key && len > 14 && (!strcmp(name + len - 14, ".lora_a.weight") ||
				 !strcmp(name + len - 14, ".lora_b.weight"))) {
		/* LoRA's adapters: 0.3.0's to_hf skips the layer keys HF has no name
		 * for, so its export is the frozen base, not merged */
		free(data);
		return 0;
	}
	if (!key || (as != name && !m->mtp_layers)) {
		free(data);
		return err_set(err, "%s: not a weight of the model torchtitan names", name);
	}
	if (key->kind == DCP_HF_DROP) {
		free(data);
		return 0;
	}
	if (key->kind == DCP_HF_EXPERTS)
		return export_experts(name, dt, ndim, shape, data, key, nums[0], o, err);
	if (key->kind == DCP_HF_GATE_HALF || key->kind == DCP_HF_UP_HALF)
		return export_half(name, dt, ndim, shape, data, key, nums, nn, o, err);
	char *hn = dcp_hf_format(key->hf, nums, nn);
	if (!hn) {
		free(data);
		return err_set(err, "out of memory");
	}
	if (m->tied && !strcmp(hn, "lm_head.weight")) {
		free(hn);
		free(data);
		return 0;
	}
	dcp_src_item it = {.name = (char *)name, .ndim = ndim};
	int64_t hs[DCP_MAX_DIM];
	memcpy(it.shape, shape, sizeof(int64_t) * (size_t)ndim);
	memcpy(hs, shape, sizeof(int64_t) * (size_t)ndim);
	if (check_kind(&it, key->kind, m, hs, err) ||
	    !(data = mapped(data, ndim, shape, ptz_dtype_size(dt), key->kind, m, 1, err)) ||
	    !dcp_hf_out_push(o, hn, dt, ndim, hs, data, err)) {
		free(hn);
		free(data);
		return -1;
	}
	return 0;
}

int dcp_to_hf(const char *src, const char *outdir, const dcp_hf_model *model, dcp_dtype export_dtype,
	      uint64_t max_shard, titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, src, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 0, err);
	dcp_hf_out o = {0};
	dcp_dtype first = PTZ_NONE;
	for (size_t i = 0; i < dcp_source_count(s) && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!dcp_is_model_key(it->name) || it->kind != DCP_TENSOR)
			continue;
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : it->dtype;
		void *data = load_mapped(s, it, dt, DCP_HF_PLAIN, &m, 1, err);
		rc = data ? export_tensor(it->name, dt, it->ndim, it->shape, data, &m, &o, err) : -1;
		if (rc == 0 && first == PTZ_NONE && o.n)
			first = dt;
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write_sharded(outdir, o.items, o.n, max_shard, meta, err);
	if (rc == 0)
		rc = write_config(outdir, &m, first == PTZ_NONE ? PTZ_F32 : first, err);
	dcp_hf_out_free(&o);
	dcp_source_close(s);
	return rc;
}

/* The file index of each HF name in index_json's weight_map (the first number
 * of the file name, as torchtitan's StateDictAdapter reads it). */
static int file_indices(const char *index_json, const st_item *items, size_t n, int *file_of,
			int *m, titan_err *err)
{
	json_t *root = tjson_load_file(index_json, JSON_REJECT_DUPLICATES, err), *wm = NULL;
	int rc = root ? tjson_get_object(root, "weight_map", &wm, index_json, err) : -1;
	*m = 1;
	for (size_t i = 0; i < n && rc == 0; i++) {
		json_t *f = json_object_get(wm, items[i].name);
		const char *fn = json_string_value(f);
		const char *d = fn ? fn + strcspn(fn, "0123456789") : NULL;
		long v = d && *d ? strtol(d, NULL, 10) : 0;
		if (!fn)
			rc = err_set(err, "%s: weight_map has %s for %s", index_json,
				     f ? "no file name" : "no entry", items[i].name);
		else if (v < 1 || v > 99999)
			rc = err_set(err, "%s: %s: no file number in \"%s\"", index_json, items[i].name, fn);
		else if ((file_of[i] = (int)v) > *m)
			*m = file_of[i];
	}
	json_decref(root);
	return rc;
}

int dcp_hf_save(const char *dir, const st_item *in, size_t n, const dcp_hf_model *model,
		dcp_dtype export_dtype, const char *index_json, titan_err *err)
{
	dcp_hf_out o = {0};
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : in[i].dtype;
		size_t ne = (size_t)dcp_numel(in[i].ndim, in[i].shape);
		void *data = malloc(ne * ptz_dtype_size(dt) + 1);
		if (!data) {
			rc = err_set(err, "out of memory");
			break;
		}
		ptz_convert(data, dt, in[i].data, in[i].dtype, ne);
		rc = export_tensor(in[i].name, dt, in[i].ndim, in[i].shape, data, model, &o, err);
	}
	if (rc == 0)
		rc = dcp_hf_write(dir, o.items, o.n, index_json, err);
	dcp_hf_out_free(&o);
	return rc;
}

int dcp_hf_write(const char *dir, const st_item *items, size_t n, const char *index_json,
		 titan_err *err)
{
	char *stage = malloc(strlen(dir) + 16);
	int *file_of = calloc(n ? n : 1, sizeof *file_of);
	int m = 1;
	int rc = stage && file_of ? 0 : err_set(err, "out of memory");
	if (rc == 0 && index_json)
		rc = file_indices(index_json, items, n, file_of, &m, err);
	for (size_t i = 0; rc == 0 && !index_json && i < n; i++)
		file_of[i] = 1;
	if (rc == 0) {
		snprintf(stage, strlen(dir) + 16, "%s.partial", dir);
		rc = dcp_stage_dir(stage, err);
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write_indexed(stage, items, n, file_of, m, meta, err);
	if (rc == 0)
		rc = dcp_swap_in(stage, dir, err);
	free(file_of);
	free(stage);
	return rc;
}

/* The config.json beside an HF folder's weights (PATH a folder, or a
 * .safetensors file in one), malloc'd; *missing set when there is none. */
static char *config_path(const char *path, int *missing, titan_err *err)
{
	struct stat st;
	char *dir = NULL, *cfg;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		cfg = path_join(path, "config.json");
	} else {
		dir = strdup(path);
		cfg = dir ? path_join(dirname(dir), "config.json") : NULL;
	}
	free(dir);
	if (!cfg) {
		err_set(err, "out of memory");
		return NULL;
	}
	*missing = stat(cfg, &st) != 0;
	return cfg;
}

/* Whether the model of the HF folder (or the folder of a .safetensors file)
 * ties lm_head to the embedding: its config.json's tie_word_embeddings (false
 * when absent, as transformers reads it), or fallback without a config.json. */
static int config_tied(const char *path, int fallback, int *tied, titan_err *err)
{
	int missing, rc = 0;
	char *cfg = config_path(path, &missing, err);
	if (!cfg)
		return -1;
	if (missing) {
		*tied = fallback;
	} else {
		json_t *c = tjson_load_file(cfg, 0, err);
		rc = c ? tjson_opt_bool(c, "tie_word_embeddings", tied, 0, cfg, err) : -1;
		rc = rc < 0 ? -1 : 0;
		json_decref(c);
	}
	free(cfg);
	return rc;
}

/* A warning when config.json's Llama 3 RoPE scaling factor is not the
 * flavor's: the weights then train with other frequencies than they were
 * made with (Meta's Llama 3.2 release says 32, torchtitan 0.3.0's 1B and 3B
 * flavors 8).  Unreadable or absent scaling says nothing. */
static void check_rope_factor(const char *path, const dcp_hf_model *m)
{
	int missing;
	titan_err e;
	char *cfg = config_path(path, &missing, &e);
	if (!cfg || missing || m->rope_scale_factor <= 0) {
		free(cfg);
		return;
	}
	json_t *c = tjson_load_file(cfg, 0, &e);
	json_t *r = c ? json_object_get(c, "rope_scaling") : NULL;
	json_t *f = json_is_object(r) ? json_object_get(r, "factor") : NULL;
	if (json_is_number(f) && json_number_value(f) != m->rope_scale_factor)
		titan_warn("%s: rope_scaling.factor %g, the flavor's %g: the weights train with "
			   "other RoPE frequencies than they were made with", cfg,
			   json_number_value(f), m->rope_scale_factor);
	json_decref(c);
	free(cfg);
}

/* Experts arriving one HF tensor at a time, stacked into torchtitan's
 * (experts, a, b) tensor and handed on when the last one has come. */
typedef struct expert_stack {
	char *fqn;
	dcp_dtype dt;
	int64_t shape[3];
	void *data;
	unsigned char *seen; /* (experts) */
	int64_t have;
} expert_stack;

static int stack_expert(dcp_source *s, const dcp_src_item *it, const dcp_hf_key *key,
			const long *nums, dcp_dtype dt, const dcp_hf_model *m, expert_stack *stacks,
			size_t *ns, dcp_hf_tensor_fn fn, void *ctx, titan_err *err)
{
	char *tn = titan_name(key->titan, nums, 1, m);
	if (!tn)
		return err_set(err, "out of memory");
	expert_stack *st = NULL;
	for (size_t i = 0; i < *ns && !st; i++)
		if (stacks[i].fqn && !strcmp(stacks[i].fqn, tn))
			st = &stacks[i];
	if (it->ndim != 2 || nums[1] < 0 || nums[1] >= m->n_experts ||
	    (st && memcmp(st->shape + 1, it->shape, 2 * sizeof(int64_t)))) {
		free(tn);
		return err_set(err, "%s: expert %ld of %d, or its shape differs from the other "
			       "experts'", it->name, nums[1], m->n_experts);
	}
	size_t es = ptz_dtype_size(dt), slice = (size_t)(it->shape[0] * it->shape[1]) * es;
	if (!st) {
		st = &stacks[(*ns)++];
		st->fqn = tn;
		st->dt = dt;
		st->shape[0] = m->n_experts, st->shape[1] = it->shape[0], st->shape[2] = it->shape[1];
		st->data = malloc(slice * (size_t)m->n_experts + 1);
		st->seen = calloc((size_t)m->n_experts, 1);
		if (!st->data || !st->seen)
			return err_set(err, "out of memory");
	} else {
		free(tn);
	}
	if (st->seen[nums[1]]++)
		return err_set(err, "%s: expert %ld twice", it->name, nums[1]);
	void *one = load_mapped(s, it, dt, DCP_HF_PLAIN, m, 0, err);
	if (!one)
		return -1;
	memcpy((char *)st->data + (size_t)nums[1] * slice, one, slice);
	free(one);
	if (++st->have < m->n_experts)
		return 0;
	void *data = st->data;
	st->data = NULL;
	return fn(ctx, st->fqn, st->dt, 3, st->shape, data, err);
}

/* HF's fused gate_up_proj (experts, dim, 2f) as torchtitan's w1 and w3 (the
 * key and its next entry), each handed on. */
static int import_halves(dcp_source *s, const dcp_src_item *it, const dcp_hf_key *key,
			 const long *nums, int nn, dcp_dtype dt, const dcp_hf_model *m,
			 dcp_hf_tensor_fn fn, void *ctx, titan_err *err)
{
	if (it->ndim != 3 || it->shape[2] % 2 || key[1].kind != DCP_HF_UP_HALF)
		return err_set(err, "%s: expected (experts, dim, 2 * f)", it->name);
	int64_t e = it->shape[0], d = it->shape[1], f = it->shape[2] / 2, shape[3] = {e, f, d};
	size_t es = ptz_dtype_size(dt);
	void *fused = load_mapped(s, it, dt, DCP_HF_PLAIN, m, 0, err);
	int rc = fused ? 0 : -1;
	for (int half = 0; half < 2 && rc == 0; half++) {
		char *tn = titan_name(key[half].titan, nums, nn, m);
		void *part = malloc((size_t)(e * f * d) * es + 1);
		if (!tn || !part) {
			free(part);
			rc = err_set(err, "out of memory");
		} else {
			half_copy(fused, part, e, f, d, half, 0, es);
			rc = fn(ctx, tn, dt, 3, shape, part, err);
		}
		free(tn);
	}
	free(fused);
	return rc;
}

/* One HF tensor as torchtitan's: named, mapped and handed on (experts wait
 * for their stack). */
static int import_tensor(dcp_source *s, const dcp_src_item *it, const dcp_hf_model *m,
			 dcp_dtype dtype, expert_stack *stacks, size_t *ns, dcp_hf_tensor_fn fn,
			 void *ctx, int *have_output, titan_err *err)
{
	long nums[4];
	int nn;
	const dcp_hf_key *key = find_key(m->keys, it->name, 0, nums, &nn);
	if (!key)
		return err_set(err, "%s: not a weight of the model Hugging Face names", it->name);
	dcp_dtype dt = dtype != PTZ_NONE ? dtype : it->dtype;
	if (key->kind == DCP_HF_EXPERTS)
		return stack_expert(s, it, key, nums, dt, m, stacks, ns, fn, ctx, err);
	if (key->kind == DCP_HF_GATE_HALF)
		return import_halves(s, it, key, nums, nn, dt, m, fn, ctx, err);
	char *tn = titan_name(key->titan, nums, nn, m);
	if (!tn)
		return err_set(err, "out of memory");
	*have_output |= !strcmp(tn, "output.weight");
	int64_t shape[DCP_MAX_DIM];
	memcpy(shape, it->shape, sizeof(int64_t) * (size_t)it->ndim);
	void *data = NULL;
	int rc = check_kind(it, key->kind, m, shape, err);
	if (rc == 0 && !(data = load_mapped(s, it, dt, key->kind, m, 0, err)))
		rc = -1;
	if (rc == 0)
		rc = fn(ctx, tn, dt, it->ndim, shape, data, err);
	free(tn);
	return rc;
}

void dcp_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape)
{
	size_t n = (size_t)snprintf(buf, cap, "(");
	for (int d = 0; d < ndim && n < cap; d++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", shape[d]);
	if (n < cap)
		snprintf(buf + n, cap - n, ")");
}

/* The weights handed on, checked against the model's tensors first. */
typedef struct hf_checked {
	dcp_hf_tensor_fn fn;
	void *ctx;
	const model *model;
	unsigned char *seen; /* (model_num_tensors) */
	const char *dir;
} hf_checked;

static int check_weight(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
			void *data, titan_err *err)
{
	hf_checked *c = vctx;
	const model_tensor *t = model_tensor_find(c->model, name), *buf = NULL;
	int rc = 0;
	if (t == NULL && (buf = model_buffer_find(c->model, name)) != NULL)
		t = buf; /* a buffer (expert_bias: HF's e_score_correction_bias) */
	if (t == NULL && !strncmp(name, "mtp_layers.", 11) && !model_args(c->model)->mtp_layers) {
		rc = err_set(err, "%s: %s: the folder has multi-token prediction depths after layer "
			     "%d, the model none (model.num_mtp_layers; titan-ckpt-convert "
			     "--num-mtp-layers)", c->dir, name, model_args(c->model)->n_layers - 1);
	} else if (t == NULL && !(strcmp(name, "output.weight") == 0 &&
				  model_args(c->model)->tied_embeddings)) {
		rc = err_set(err, "%s: %s is not a weight of the model", c->dir, name);
	} else if (t != NULL) {
		int same = ndim == t->ndim;
		for (int d = 0; same && d < ndim; d++)
			same = shape[d] == t->shape[d];
		if (!same) {
			char a[160], b[160];
			dcp_shape_text(a, sizeof a, ndim, shape);
			dcp_shape_text(b, sizeof b, t->ndim, t->shape);
			rc = err_set(err, "%s: %s has shape %s, the model %s", c->dir, name, a, b);
		}
	}
	if (rc) {
		free(data);
		return rc;
	}
	if (t != NULL && t != buf)
		c->seen[t - model_tensor_at(c->model, 0)] = 1;
	return c->fn(c->ctx, name, dt, ndim, shape, data, err);
}

static int is_float(dcp_dtype t)
{
	return t == PTZ_F32 || t == PTZ_BF16 || t == PTZ_F16 || t == PTZ_F64;
}

/* DeepSeek V3's release stores each depth's embedding and output head
 * (model.layers.<n + k>.embed_tokens, .shared_head.head): torchtitan 0.3.0's
 * depths share tok_embeddings and lm_head, and its adapter reads neither. */
static int depth_copy(const char *name, const dcp_hf_model *m)
{
	char *end;
	if (strncmp(name, "model.layers.", 13) != 0 || strtol(name + 13, &end, 10) < m->n_layers)
		return 0;
	return !strcmp(end, ".embed_tokens.weight") || !strcmp(end, ".shared_head.head.weight");
}

int dcp_hf_read(const char *hfdir, const dcp_hf_model *model, dcp_dtype dtype, dcp_hf_tensor_fn fn,
		void *ctx, titan_err *err)
{
	hf_checked chk = {.fn = fn, .ctx = ctx, .model = model->model, .dir = hfdir};
	if (chk.model != NULL) {
		int nt = model_num_tensors(chk.model);
		if ((chk.seen = calloc((size_t)nt + 1, 1)) == NULL)
			return err_set(err, "out of memory");
		fn = check_weight;
		ctx = &chk;
	}
	dcp_source *s;
	if (dcp_source_open(&s, hfdir, err)) {
		free(chk.seen);
		return -1;
	}
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 1, err);
	if (rc == 0)
		check_rope_factor(hfdir, &m);
	size_t n = dcp_source_count(s), ns = 0;
	expert_stack *stacks = calloc(n + 1, sizeof *stacks);
	if (!stacks && rc == 0)
		rc = err_set(err, "out of memory");
	int have_output = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		/* torchtitan's adapter drops the RoPE buffers old exports carry. */
		if (strstr(it->name, ".self_attn.rotary_emb.inv_freq") || depth_copy(it->name, &m))
			continue;
		/* the weights are floats: an integer tensor cast would train on
		 * nonsense without a word */
		if (it->kind == DCP_TENSOR && !is_float(it->dtype)) {
			rc = err_set(err, "%s: %s is stored as %s, not as a floating-point type", hfdir,
				     it->name, ptz_dtype_st(it->dtype));
			break;
		}
		rc = import_tensor(s, it, &m, dtype, stacks, &ns, fn, ctx, &have_output, err);
	}
	for (size_t i = 0; i < ns && rc == 0; i++)
		if (stacks[i].have != m.n_experts)
			rc = err_set(err, "%s: %" PRId64 " of the %d experts", stacks[i].fqn,
				     stacks[i].have, m.n_experts);
	for (size_t i = 0; i < ns; i++) {
		free(stacks[i].fqn);
		free(stacks[i].data);
		free(stacks[i].seen);
	}
	free(stacks);
	/* A tied model (Llama 3.2 1B/3B) has no lm_head: torchtitan's model still
	 * has output.weight, equal to the embedding.  An untied one without it is
	 * incomplete and is not quietly given the embedding. */
	int tied = 0;
	if (rc == 0 && !have_output && config_tied(hfdir, m.tied, &tied, err) != 0) {
		rc = -1;
	} else if (rc == 0 && !have_output && !tied) {
		rc = err_set(err, "%s: no lm_head.weight, and the model does not tie it to the "
			     "embedding (tie_word_embeddings is not true in its config.json, or "
			     "without one in the flavor): an incomplete download?", hfdir);
	} else if (rc == 0 && !have_output) {
		const dcp_src_item *e = dcp_source_find(s, "model.embed_tokens.weight");
		dcp_dtype dt = dtype != PTZ_NONE ? dtype : e->dtype;
		void *data = load_mapped(s, e, dt, DCP_HF_PLAIN, &m, 0, err);
		rc = data ? fn(ctx, "output.weight", dt, e->ndim, e->shape, data, err) : -1;
	}
	for (int i = 0; rc == 0 && chk.model && i < model_num_tensors(chk.model); i++)
		if (!chk.seen[i])
			rc = err_set(err, "%s: no weight for %s", hfdir, model_tensor_at(chk.model, i)->fqn);
	free(chk.seen);
	dcp_source_close(s);
	return rc;
}

int dcp_collect_tensor(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		       void *data, titan_err *err)
{
	dcp_collect *c = vctx;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		dcp_item *ni = realloc(c->items, cap * sizeof *ni);
		if (!ni) {
			free(data);
			return err_set(err, "out of memory");
		}
		c->items = ni;
		c->cap = cap;
	}
	char *fqn = strdup(name);
	if (!fqn) {
		free(data);
		return err_set(err, "out of memory");
	}
	dcp_item_full(&c->items[c->n++], fqn, dt, ndim, shape, data);
	return 0;
}

void dcp_collect_free(dcp_collect *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free((char *)c->items[i].fqn);
		free(c->items[i].data);
	}
	free(c->items);
	memset(c, 0, sizeof *c);
}

/* The items under torchtitan 0.3.0's names (MLA's attention.wq keeps its
 * name: dcp_name_030). */
static int respell_030(dcp_collect *c, titan_err *err)
{
	int mla = 0;
	for (size_t i = 0; i < c->n; i++)
		mla |= strstr(c->items[i].fqn, ".attention.wkv_a.") != NULL;
	for (size_t i = 0; i < c->n; i++) {
		char buf[512];
		const char *r = dcp_name_030(c->items[i].fqn, mla, buf, sizeof buf);
		if (r == c->items[i].fqn)
			continue;
		char *fqn = strdup(r);
		if (!fqn)
			return err_set(err, "out of memory");
		free((char *)c->items[i].fqn);
		c->items[i].fqn = fqn;
	}
	return 0;
}

int dcp_from_hf(const char *hfdir, const char *out, const dcp_hf_model *model, dcp_dtype dtype,
		int names, titan_err *err)
{
	dcp_collect c = {0};
	int rc = dcp_hf_read(hfdir, model, dtype, dcp_collect_tensor, &c, err);
	if (rc == 0 && names == DCP_NAMES_030)
		rc = respell_030(&c, err);
	if (rc == 0)
		rc = dcp_save(out, c.items, c.n, NULL, err);
	dcp_collect_free(&c);
	return rc;
}
