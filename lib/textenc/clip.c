/* clip.c: transformers' CLIPTextModel, forward to pooler_output, over backend ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "textenc/textenc.h"
#include "textenc/textenc_impl.h"

/* Weights in backend memory, of the model's type. */
typedef struct clip_layer {
	void *ln1_w, *ln1_b;              /* (hidden) */
	void *q_w, *k_w, *v_w, *o_w;      /* (hidden, hidden) */
	void *q_b, *k_b, *v_b, *o_b;      /* (hidden) */
	void *ln2_w, *ln2_b;              /* (hidden) */
	void *fc1_w, *fc1_b;              /* (intermediate, hidden), (intermediate) */
	void *fc2_w, *fc2_b;              /* (hidden, intermediate), (hidden) */
} clip_layer;

struct clip_text {
	backend *be;
	clip_config c;
	te_params ps;
	void *tok_emb;                    /* (vocab, hidden) */
	void *pos_emb;                    /* (max_pos, hidden) */
	clip_layer *layers;               /* (n_layers) */
	void *final_w, *final_b;          /* (hidden) */
	be_dtype dt;                      /* float32, or the bf16 model */
};

/* transformers 4 wrote CLIPTextModel's tensors under text_model., 5 does not */
static const char *const prefixes[] = {"text_model.", "", NULL};

int clip_config_read(clip_config *c, const char *path, titan_err *err)
{
	json_t *root = tjson_load_file(path, 0, err);
	if (root == NULL)
		return -1;
	const char *type = NULL, *act = NULL;
	json_t *j = root;
	double eps = 0;
	char where[4200];
	snprintf(where, sizeof where, "%s", path);
	int rc = tjson_opt_string(root, "model_type", &type, "clip_text_model", path, err) < 0
		 ? -1 : 0;
	if (rc == 0 && strcmp(type, "clip") == 0) {
		/* a CLIPModel's config: CLIPTextConfig.from_pretrained reads text_config */
		rc = tjson_get_object(root, "text_config", &j, path, err);
		snprintf(where, sizeof where, "%s: text_config", path);
	}
	if (rc == 0)
		rc = tjson_get_int(j, "vocab_size", &c->vocab, where, err) < 0 ||
		     tjson_get_int(j, "hidden_size", &c->hidden, where, err) < 0 ||
		     tjson_get_int(j, "intermediate_size", &c->intermediate, where, err) < 0 ||
		     tjson_get_int(j, "num_attention_heads", &c->n_heads, where, err) < 0 ||
		     tjson_get_int(j, "num_hidden_layers", &c->n_layers, where, err) < 0 ||
		     tjson_opt_int(j, "max_position_embeddings", &c->max_pos, 77, where, err) < 0 ||
		     tjson_opt_double(j, "layer_norm_eps", &eps, 1e-5, where, err) < 0 ||
		     tjson_opt_int(j, "eos_token_id", &c->eos_id, 49407, where, err) < 0 ||
		     tjson_opt_string(j, "hidden_act", &act, "quick_gelu", where, err) < 0
		     ? -1 : 0;
	if (rc == 0 && strcmp(act, "quick_gelu") != 0)
		rc = err_set(err, "%s: field 'hidden_act': \"%s\", expected \"quick_gelu\" (the "
			     "only activation implemented)", where, act);
	if (rc == 0 && (c->vocab < 1 || c->hidden < 1 || c->intermediate < 1 || c->n_heads < 1 ||
			c->n_layers < 1 || c->max_pos < 1 || c->hidden % c->n_heads != 0))
		rc = err_set(err, "%s: sizes must be positive and hidden_size a multiple of "
			     "num_attention_heads", where);
	c->eps = (float)eps;
	json_decref(root);
	return rc;
}

static int load_layer(clip_text *m, const st_set *s, int64_t i, titan_err *err)
{
	const clip_config *c = &m->c;
	int64_t hd = c->hidden, ff = c->intermediate;
	clip_layer *y = &m->layers[i];
	char n[160];
#define CLW(dst, suffix, d0, d1, nd)                                                           \
	(snprintf(n, sizeof n, "encoder.layers.%lld.%s", (long long)i, suffix),                \
	 ((dst) = te_load(&m->ps, s, prefixes, n, nd, d0, d1, err)) != NULL)
	if (!CLW(y->ln1_w, "layer_norm1.weight", hd, 0, 1) ||
	    !CLW(y->ln1_b, "layer_norm1.bias", hd, 0, 1) ||
	    !CLW(y->q_w, "self_attn.q_proj.weight", hd, hd, 2) ||
	    !CLW(y->q_b, "self_attn.q_proj.bias", hd, 0, 1) ||
	    !CLW(y->k_w, "self_attn.k_proj.weight", hd, hd, 2) ||
	    !CLW(y->k_b, "self_attn.k_proj.bias", hd, 0, 1) ||
	    !CLW(y->v_w, "self_attn.v_proj.weight", hd, hd, 2) ||
	    !CLW(y->v_b, "self_attn.v_proj.bias", hd, 0, 1) ||
	    !CLW(y->o_w, "self_attn.out_proj.weight", hd, hd, 2) ||
	    !CLW(y->o_b, "self_attn.out_proj.bias", hd, 0, 1) ||
	    !CLW(y->ln2_w, "layer_norm2.weight", hd, 0, 1) ||
	    !CLW(y->ln2_b, "layer_norm2.bias", hd, 0, 1) ||
	    !CLW(y->fc1_w, "mlp.fc1.weight", ff, hd, 2) ||
	    !CLW(y->fc1_b, "mlp.fc1.bias", ff, 0, 1) ||
	    !CLW(y->fc2_w, "mlp.fc2.weight", hd, ff, 2) ||
	    !CLW(y->fc2_b, "mlp.fc2.bias", hd, 0, 1))
		return -1;
#undef CLW
	return 0;
}

static int load_weights(clip_text *m, const st_set *s, titan_err *err)
{
	const clip_config *c = &m->c;
	if ((m->tok_emb = te_load(&m->ps, s, prefixes, "embeddings.token_embedding.weight", 2,
				  c->vocab, c->hidden, err)) == NULL ||
	    (m->pos_emb = te_load(&m->ps, s, prefixes, "embeddings.position_embedding.weight", 2,
				  c->max_pos, c->hidden, err)) == NULL ||
	    (m->final_w = te_load(&m->ps, s, prefixes, "final_layer_norm.weight", 1, c->hidden,
				  0, err)) == NULL ||
	    (m->final_b = te_load(&m->ps, s, prefixes, "final_layer_norm.bias", 1, c->hidden, 0,
				  err)) == NULL)
		return -1;
	for (int64_t i = 0; i < c->n_layers; i++)
		if (load_layer(m, s, i, err) < 0)
			return -1;
	return 0;
}

static int read_config(void *cfg, const char *path, titan_err *err)
{
	return clip_config_read(cfg, path, err);
}

static int load(void *model, const st_set *s, titan_err *err)
{
	clip_text *m = model;
	m->layers = calloc((size_t)m->c.n_layers, sizeof *m->layers);
	if (m->layers == NULL)
		return err_set(err, "clip: out of memory");
	return load_weights(m, s, err);
}

clip_text *clip_text_open(backend *be, const char *dir, be_dtype dtype, titan_err *err)
{
	if (dtype != BE_F32 && dtype != BE_BF16) {
		err_set(err, "clip: dtype %s, expected float32 or bfloat16", be_dtype_name(dtype));
		return NULL;
	}
	clip_text *m = calloc(1, sizeof *m);
	if (m == NULL) {
		err_set(err, "clip: out of memory");
		return NULL;
	}
	m->be = be;
	m->ps.be = be;
	m->dt = m->ps.dt = dtype;
	if (te_open_dir(dir, read_config, &m->c, load, m, err) < 0) {
		clip_text_free(m);
		return NULL;
	}
	return m;
}

const clip_config *clip_text_config(const clip_text *m) { return &m->c; }

void clip_text_free(clip_text *m)
{
	if (m == NULL)
		return;
	te_params_free(&m->ps);
	free(m->layers);
	free(m);
}

/* The position CLIPTextTransformer pools sequence ids (l) at. */
static int64_t pool_position(const int32_t *ids, int64_t l, int64_t eos_id)
{
	int64_t at = 0;
	for (int64_t j = 0; j < l; j++) {
		if (eos_id == 2 && ids[j] > ids[at])
			at = j; /* argmax: the first of the largest ids */
		if (eos_id != 2 && ids[j] == eos_id)
			return j;
	}
	return at;
}

/* Scratch of one forward, in backend memory, of the model's type (lse float32). */
typedef struct clip_scratch {
	void *x, *n, *q, *k, *v, *att, *f, *lse;
	int32_t *ids;
} clip_scratch;

static int scratch_alloc(backend *be, be_dtype dt, clip_scratch *w, const clip_config *c,
			 int64_t b, int64_t l, titan_err *err)
{
	size_t rows = (size_t)(b * l), hd = (size_t)c->hidden, es = be_dtype_size(dt);
	void **bufs[] = {&w->x, &w->n, &w->q, &w->k, &w->v, &w->att, &w->f, &w->lse};
	size_t bytes[] = {rows * hd * es, rows * hd * es, rows * hd * es, rows * hd * es,
			  rows * hd * es, rows * hd * es, rows * (size_t)c->intermediate * es,
			  rows * (size_t)c->n_heads * sizeof(float)};
	return te_scratch_alloc(be, bufs, bytes, sizeof bytes / sizeof *bytes, &w->ids, rows, err);
}

static void scratch_free(backend *be, clip_scratch *w)
{
	void *bufs[] = {w->x, w->n, w->q, w->k, w->v, w->att, w->f, w->lse};
	te_scratch_free(be, bufs, sizeof bufs / sizeof *bufs, w->ids);
}

/* y (rows, out) = x @ w^T + bias as torch's addmm computes it: the bias in C,
 * then the product added with beta 1, so that bf16 rounds the sum once. */
static void linear_bias(backend *be, be_dtype dt, void *y, const void *x, const void *w,
			const void *bias, int64_t rows, int64_t in, int64_t out)
{
	be->ops->zero(be, y, (size_t)(rows * out) * be_dtype_size(dt));
	be->ops->bias_add(be, y, dt, bias, dt, rows, out, 0, NULL);
	be->ops->matmul(be, 0, 1, rows, out, in, 1.0f, x, in, w, in, dt, 1.0f, y, out, dt);
}

/* One layer; in bf16 every op's output is stored rounded, as the bf16 model
 * stores it (its attention, torch's sdpa, computes in float32 and rounds
 * once; quick_gelu rounds as its three ops do: backend.h's swish). */
static void layer_forward(clip_text *m, const clip_layer *y, clip_scratch *w, int64_t b,
			  int64_t l)
{
	backend *be = m->be;
	const clip_config *c = &m->c;
	be_dtype dt = m->dt;
	int64_t rows = b * l, hd = c->hidden, ff = c->intermediate;
	be->ops->layernorm_fwd(be, w->n, dt, w->x, dt, y->ln1_w, y->ln1_b, dt, rows, hd, c->eps);
	linear_bias(be, dt, w->q, w->n, y->q_w, y->q_b, rows, hd, hd);
	linear_bias(be, dt, w->k, w->n, y->k_w, y->k_b, rows, hd, hd);
	linear_bias(be, dt, w->v, w->n, y->v_w, y->v_b, rows, hd, hd);
	be_attn a = {
		.b = b, .tq = l, .tk = l, .h = c->n_heads, .hkv = c->n_heads,
		.hd = hd / c->n_heads, .hdv = hd / c->n_heads, .scale = 0, .causal = 1,
		.qkv = dt, .out = dt, .dout = dt, .grad = dt,
	};
	be->ops->attention_fwd(be, w->att, w->lse, w->q, w->k, w->v, &a);
	linear_bias(be, dt, w->n, w->att, y->o_w, y->o_b, rows, hd, hd);
	be->ops->add(be, w->x, dt, w->x, dt, w->n, dt, rows * hd); /* x += out_proj */
	be->ops->layernorm_fwd(be, w->n, dt, w->x, dt, y->ln2_w, y->ln2_b, dt, rows, hd, c->eps);
	linear_bias(be, dt, w->f, w->n, y->fc1_w, y->fc1_b, rows, hd, ff);
	be->ops->swish(be, w->f, dt, 1.702f, rows * ff); /* quick_gelu */
	linear_bias(be, dt, w->n, w->f, y->fc2_w, y->fc2_b, rows, ff, hd);
	be->ops->add(be, w->x, dt, w->x, dt, w->n, dt, rows * hd); /* x += fc2 */
}

int clip_text_forward(clip_text *m, const int32_t *ids, int64_t b, int64_t l, float *out,
		      titan_err *err)
{
	backend *be = m->be;
	const clip_config *c = &m->c;
	be_dtype dt = m->dt;
	if (b < 1 || l < 1 || l > c->max_pos)
		return err_set(err, "clip: batch %lld x %lld, expected a length in [1, %lld] "
			       "(max_position_embeddings)", (long long)b, (long long)l,
			       (long long)c->max_pos);
	if (te_check_ids(ids, b * l, c->vocab, "clip", err) < 0)
		return -1;
	clip_scratch w = {0};
	int rc = scratch_alloc(be, dt, &w, c, b, l, err);
	if (rc == 0) {
		int64_t rows = b * l, hd = c->hidden;
		be->ops->copy(be, w.ids, ids, (size_t)rows * sizeof *ids, BACKEND_H2D);
		be->ops->embedding_fwd(be, w.x, dt, m->tok_emb, dt, w.ids, rows, hd, 0, c->vocab);
		for (int64_t bi = 0; bi < b; bi++) { /* + position_embedding[0..l) */
			void *xb = te_at(w.x, dt, bi * l * hd);
			be->ops->add(be, xb, dt, xb, dt, m->pos_emb, dt, l * hd);
		}
		for (int64_t i = 0; i < c->n_layers; i++)
			layer_forward(m, &m->layers[i], &w, b, l);
		/* final_layer_norm is per row: normalise the pooled rows alone */
		for (int64_t bi = 0; bi < b; bi++) {
			int64_t at = pool_position(ids + bi * l, l, c->eos_id);
			be->ops->layernorm_fwd(be, te_at(w.n, dt, bi * hd), dt,
					       te_at(w.x, dt, (bi * l + at) * hd), dt, m->final_w,
					       m->final_b, dt, 1, hd, c->eps);
		}
		rc = te_download(be, dt, out, w.n, b * hd, err);
	}
	if (rc == 0)
		rc = be->ops->sync(be, err);
	scratch_free(be, &w);
	return rc;
}
