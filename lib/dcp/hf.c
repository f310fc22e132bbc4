/* hf.c: titan/torchtitan Llama state <-> Hugging Face LlamaForCausalLM.
 *
 * torchtitan applies RoPE to interleaved pairs (x0, x1), (x2, x3), ... of each
 * head, HF to the two halves (x0, x_{h/2}), ...; the HF export therefore
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
	char *p = path_join(dir, "config.json");
	int rc = p ? tjson_dump_file(c, p, err) : err_set(err, "out of memory");
	json_decref(c);
	free(p);
	return rc;
}

/* buf (consumed) with the rows of wq / wk permuted into a new buffer; buf
 * itself for the other tensors. */
static void *permuted(void *buf, const int64_t *shape, size_t es, int rope, const dcp_hf_model *m,
		      int to_hf, titan_err *err)
{
	if (!rope || !buf)
		return buf;
	size_t b = (size_t)dcp_numel(2, shape) * es;
	void *out = malloc(b ? b : 1);
	if (out)
		dcp_rope_permute(buf, out, shape[0], shape[1], rope == 1 ? m->n_heads : m->n_kv_heads,
				 to_hf, es);
	else
		err_set(err, "out of memory");
	free(buf);
	return out;
}

/* Read, cast and (for wq/wk) permute one tensor into a new buffer. */
static void *load_mapped(dcp_source *s, const dcp_src_item *it, dcp_dtype dt, int rope,
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
	return permuted(buf, it->shape, es, rope, m, to_hf, err);
}

/* One titan tensor as HF keeps it: *out gets the HF name (malloc'd), dtype,
 * shape and data (malloc'd, permuted); data is consumed.  Returns 1 when HF
 * does not keep it (lm_head of a tied model), 0, or -1. */
static int export_one(const char *name, dcp_dtype dt, int ndim, const int64_t *shape, void *data,
		      const dcp_hf_model *m, st_item *out, titan_err *err)
{
	int rope;
	char *hn = dcp_hf_name(name, 1, &rope);
	if (!hn) {
		free(data);
		return err_set(err, "%s: not a Llama weight torchtitan names", name);
	}
	if (m->tied && !strcmp(hn, "lm_head.weight")) {
		free(hn);
		free(data);
		return 1;
	}
	dcp_src_item it = {.ndim = ndim};
	memcpy(it.shape, shape, sizeof(int64_t) * (size_t)ndim);
	if (check_shape(name, &it, m, rope, err) ||
	    !(data = permuted(data, shape, ptz_dtype_size(dt), rope, m, 1, err))) {
		free(hn);
		free(data);
		return -1;
	}
	memset(out, 0, sizeof *out);
	out->name = hn;
	out->dtype = dt;
	out->ndim = ndim;
	memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
	out->data = data;
	return 0;
}

static void free_st_items(st_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free((char *)items[i].name);
		free((void *)items[i].data);
	}
	free(items);
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
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : it->dtype;
		void *data = load_mapped(s, it, dt, 0, &m, 1, err);
		int got = data ? export_one(it->name, dt, it->ndim, it->shape, data, &m, &items[k], err)
			       : -1;
		if (got < 0)
			rc = -1;
		else if (got == 0 && first == PTZ_NONE)
			first = dt;
		k += got == 0;
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write_sharded(outdir, items, k, max_shard, meta, err);
	if (rc == 0)
		rc = write_config(outdir, &m, first == PTZ_NONE ? PTZ_F32 : first, err);
	free_st_items(items, k);
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
	st_item *items = calloc(n ? n : 1, sizeof *items);
	int *file_of = calloc(n ? n : 1, sizeof *file_of);
	char *stage = malloc(strlen(dir) + 16);
	int rc = items && file_of && stage ? 0 : err_set(err, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		dcp_dtype dt = export_dtype != PTZ_NONE ? export_dtype : in[i].dtype;
		size_t ne = (size_t)dcp_numel(in[i].ndim, in[i].shape);
		void *data = malloc(ne * ptz_dtype_size(dt) + 1);
		if (!data) {
			rc = err_set(err, "out of memory");
			break;
		}
		ptz_convert(data, dt, in[i].data, in[i].dtype, ne);
		int got = export_one(in[i].name, dt, in[i].ndim, in[i].shape, data, model, &items[k], err);
		rc = got < 0 ? -1 : 0;
		k += got == 0;
	}
	int m = 1;
	if (rc == 0 && index_json)
		rc = file_indices(index_json, items, k, file_of, &m, err);
	for (size_t i = 0; rc == 0 && !index_json && i < k; i++)
		file_of[i] = 1;
	if (rc == 0) {
		snprintf(stage, strlen(dir) + 16, "%s.partial", dir);
		rc = dcp_stage_dir(stage, err);
	}
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write_indexed(stage, items, k, file_of, m, meta, err);
	if (rc == 0)
		rc = dcp_swap_in(stage, dir, err);
	free_st_items(items, k);
	free(file_of);
	free(stage);
	return rc;
}

/* Whether the model of the HF folder (or the folder of a .safetensors file)
 * ties lm_head to the embedding: its config.json's tie_word_embeddings (false
 * when absent, as transformers reads it), or fallback without a config.json. */
static int config_tied(const char *path, int fallback, int *tied, titan_err *err)
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
	if (!cfg)
		return err_set(err, "out of memory");
	int rc = 0;
	if (stat(cfg, &st) != 0) {
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

int dcp_hf_read(const char *hfdir, const dcp_hf_model *model, dcp_dtype dtype, dcp_hf_tensor_fn fn,
		void *ctx, titan_err *err)
{
	dcp_source *s;
	if (dcp_source_open(&s, hfdir, err))
		return -1;
	dcp_hf_model m = *model;
	int rc = infer(s, &m, 1, err);
	int have_output = 0;
	for (size_t i = 0; i < dcp_source_count(s) && rc == 0; i++) {
		const dcp_src_item *it = dcp_source_item(s, i);
		int rope;
		/* torchtitan's adapter drops the RoPE buffers old exports carry. */
		if (strstr(it->name, ".self_attn.rotary_emb.inv_freq"))
			continue;
		char *tn = dcp_hf_name(it->name, 0, &rope);
		if (!tn) {
			rc = err_set(err, "%s: not a LlamaForCausalLM weight", it->name);
			break;
		}
		have_output |= !strcmp(tn, "output.weight");
		dcp_dtype dt = dtype != PTZ_NONE ? dtype : it->dtype;
		void *data = NULL;
		rc = check_shape(it->name, it, &m, rope, err);
		if (rc == 0 && !(data = load_mapped(s, it, dt, rope, &m, 0, err)))
			rc = -1;
		if (rc == 0)
			rc = fn(ctx, tn, dt, it->ndim, it->shape, data, err);
		free(tn);
	}
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
		void *data = load_mapped(s, e, dt, 0, &m, 0, err);
		rc = data ? fn(ctx, "output.weight", dt, e->ndim, e->shape, data, err) : -1;
	}
	dcp_source_close(s);
	return rc;
}

typedef struct from_hf_ctx {
	dcp_item *items;
	size_t n, cap;
} from_hf_ctx;

static int keep_item(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		     void *data, titan_err *err)
{
	from_hf_ctx *c = vctx;
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

int dcp_from_hf(const char *hfdir, const char *out, const dcp_hf_model *model, dcp_dtype dtype,
		titan_err *err)
{
	from_hf_ctx c = {0};
	int rc = dcp_hf_read(hfdir, model, dtype, keep_item, &c, err);
	if (rc == 0)
		rc = dcp_save(out, c.items, c.n, NULL, err);
	for (size_t i = 0; i < c.n; i++) {
		free((char *)c.items[i].fqn);
		free(c.items[i].data);
	}
	free(c.items);
	return rc;
}
