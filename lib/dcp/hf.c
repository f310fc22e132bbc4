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

static const struct {
	const char *titan, *hf;
	int rope; /* 1: wq (n_heads), 2: wk (n_kv_heads) */
} layer_map[] = {
	{"attention.wq.weight", "self_attn.q_proj.weight", 1},
	{"attention.wk.weight", "self_attn.k_proj.weight", 2},
	{"attention.wv.weight", "self_attn.v_proj.weight", 0},
	{"attention.wo.weight", "self_attn.o_proj.weight", 0},
	{"feed_forward.w1.weight", "mlp.gate_proj.weight", 0},
	{"feed_forward.w2.weight", "mlp.down_proj.weight", 0},
	{"feed_forward.w3.weight", "mlp.up_proj.weight", 0},
	{"attention_norm.weight", "input_layernorm.weight", 0},
	{"ffn_norm.weight", "post_attention_layernorm.weight", 0},
};
#define NMAP (sizeof layer_map / sizeof layer_map[0])

/* Map a name one way or the other; *rope says which permutation applies.
 * Returns a malloc'd name, or NULL when the key is not a model weight. */
char *dcp_hf_name(const char *name, int to_hf, int *rope)
{
	char buf[256];
	*rope = 0;
	const char *tops[][2] = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
				 {"norm.weight", "model.norm.weight"},
				 {"output.weight", "lm_head.weight"}};
	for (int i = 0; i < 3; i++)
		if (!strcmp(name, tops[i][to_hf ? 0 : 1]))
			return strdup(tops[i][to_hf ? 1 : 0]);
	int layer, used = 0;
	const char *pre = to_hf ? "layers.%d.%n" : "model.layers.%d.%n";
	if (sscanf(name, pre, &layer, &used) != 1 || used == 0 || layer < 0)
		return NULL;
	const char *rest = name + used;
	for (size_t k = 0; k < NMAP; k++) {
		if (!strcmp(rest, to_hf ? layer_map[k].titan : layer_map[k].hf)) {
			*rope = layer_map[k].rope;
			snprintf(buf, sizeof buf, to_hf ? "model.layers.%d.%s" : "layers.%d.%s", layer,
				 to_hf ? layer_map[k].hf : layer_map[k].titan);
			return strdup(buf);
		}
	}
	return NULL;
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
	const dcp_src_item *e = dcp_source_find(s, emb), *f = dcp_source_find(s, w1);
	if (!e || e->ndim != 2 || !f || f->ndim != 2)
		return err_set(err, "no %s / %s: not a Llama checkpoint", emb, w1);
	if (m->dim && m->dim != e->shape[1])
		return err_set(err, "%s has dim %" PRId64 ", the flavor says %d", emb, e->shape[1], m->dim);
	m->dim = (int)e->shape[1];
	m->vocab_size = (int)e->shape[0];
	m->ffn_hidden = (int)f->shape[0];
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
	if (m->n_heads <= 0 || m->n_kv_heads <= 0 || m->dim % m->n_heads)
		return err_set(err, "need the number of heads (a flavor or --n-heads)");
	m->head_dim = m->dim / m->n_heads;
	return 0;
}

static int write_config(const char *dir, const dcp_hf_model *m, dcp_dtype dt, titan_err *err)
{
	json_t *c = json_object();
	json_t *arch = json_array();
	json_array_append_new(arch, json_string("LlamaForCausalLM"));
	json_object_set_new(c, "architectures", arch);
	json_object_set_new(c, "attention_bias", json_false());
	json_object_set_new(c, "attention_dropout", json_real(0.0));
	if (m->vocab_size == 128256) {
		json_object_set_new(c, "bos_token_id", json_integer(128000));
		json_object_set_new(c, "eos_token_id", json_integer(128001));
	}
	json_object_set_new(c, "head_dim", json_integer(m->head_dim));
	json_object_set_new(c, "hidden_act", json_string("silu"));
	json_object_set_new(c, "hidden_size", json_integer(m->dim));
	json_object_set_new(c, "initializer_range", json_real(0.02));
	json_object_set_new(c, "intermediate_size", json_integer(m->ffn_hidden));
	json_object_set_new(c, "max_position_embeddings", json_integer(m->max_seq_len));
	json_object_set_new(c, "mlp_bias", json_false());
	json_object_set_new(c, "model_type", json_string("llama"));
	json_object_set_new(c, "num_attention_heads", json_integer(m->n_heads));
	json_object_set_new(c, "num_hidden_layers", json_integer(m->n_layers));
	json_object_set_new(c, "num_key_value_heads", json_integer(m->n_kv_heads));
	json_object_set_new(c, "pretraining_tp", json_integer(1));
	json_object_set_new(c, "rms_norm_eps", json_real(m->norm_eps));
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
	json_object_set_new(c, "rope_theta", json_real(m->rope_theta));
	json_object_set_new(c, "tie_word_embeddings", json_boolean(m->tied));
	json_object_set_new(c, "torch_dtype", json_string(ptz_dtype_torch(dt)));
	json_object_set_new(c, "use_cache", json_true());
	json_object_set_new(c, "vocab_size", json_integer(m->vocab_size));
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

int dcp_to_hf(const char *src, const char *outdir, const dcp_hf_model *model, dcp_dtype export_dtype,
	      uint64_t max_shard, titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, src, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 0, err);
	size_t n = dcp_source_count(s), k = 0;
	st_item *items = calloc(n ? n : 1, sizeof *items);
	if (!items && rc == 0)
		rc = err_set(err, "out of memory");
	dcp_dtype first = PTZ_NONE;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		if (!dcp_is_model_key(it->name) || it->kind != DCP_TENSOR)
			continue;
		int rope;
		char *hn = dcp_hf_name(it->name, 1, &rope);
		if (!hn) {
			rc = err_set(err, "%s: not a Llama weight torchtitan names", it->name);
			break;
		}
		if (m.tied && !strcmp(hn, "lm_head.weight")) {
			free(hn);
			continue;
		}
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : it->dtype;
		if (first == PTZ_NONE)
			first = dt;
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

int dcp_from_hf(const char *hfdir, const char *out, const dcp_hf_model *model, dcp_dtype dtype,
		titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, hfdir, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 1, err);
	size_t n = dcp_source_count(s), k = 0;
	dcp_item *items = calloc(n + 1, sizeof *items);
	if (!items && rc == 0)
		rc = err_set(err, "out of memory");
	int have_output = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		int rope;
		char *tn = dcp_hf_name(it->name, 0, &rope);
		if (!tn) {
			rc = err_set(err, "%s: not a LlamaForCausalLM weight", it->name);
			break;
		}
		have_output |= !strcmp(tn, "output.weight");
		dcp_dtype dt = dtype != PTZ_NONE ? dtype : it->dtype;
		dcp_item *d = &items[k++];
		dcp_item_full(d, tn, dt, it->ndim, it->shape, NULL);
		rc = check_shape(it->name, it, &m, rope, err);
		if (rc == 0 && !(d->data = load_mapped(s, it, dt, rope, &m, 0, err)))
			rc = -1;
	}
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
	free(items);
	dcp_source_close(s);
	return rc;
}
