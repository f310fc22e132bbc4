/* t5.c: transformers' T5EncoderModel (v1.1, gated-gelu), forward, over backend ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "textenc/textenc.h"
#include "textenc/textenc_impl.h"

/* Weights in backend memory, of the model's type. */
typedef struct t5_block {
	void *ln_attn;            /* (d_model) */
	void *q, *k, *v;          /* (inner, d_model), inner = n_heads * d_kv */
	void *o;                  /* (d_model, inner) */
	void *ln_ff;              /* (d_model) */
	void *wi_0, *wi_1;        /* (d_ff, d_model) */
	void *wo;                 /* (d_model, d_ff) */
} t5_block;

struct t5_encoder {
	backend *be;
	t5_config c;
	te_params ps;
	void *embed;              /* (vocab, d_model) */
	float *rel_bias;          /* (n_buckets, n_heads): block 0's, host memory */
	t5_block *blocks;         /* (n_layers) */
	void *final_ln;           /* (d_model) */
	be_dtype dt;              /* float32, or the bf16 model (t5_encoder_open) */
};

int t5_config_read(t5_config *c, const char *path, titan_err *err)
{
	json_t *j = tjson_load_file(path, 0, err);
	if (j == NULL)
		return -1;
	const char *ffp = NULL;
	double eps = 0;
	int rc = tjson_get_int(j, "vocab_size", &c->vocab, path, err) < 0 ||
		 tjson_get_int(j, "d_model", &c->d_model, path, err) < 0 ||
		 tjson_get_int(j, "d_kv", &c->d_kv, path, err) < 0 ||
		 tjson_get_int(j, "num_heads", &c->n_heads, path, err) < 0 ||
		 tjson_get_int(j, "d_ff", &c->d_ff, path, err) < 0 ||
		 tjson_get_int(j, "num_layers", &c->n_layers, path, err) < 0 ||
		 tjson_opt_int(j, "relative_attention_num_buckets", &c->n_buckets, 32, path,
			       err) < 0 ||
		 tjson_opt_int(j, "relative_attention_max_distance", &c->max_distance, 128, path,
			       err) < 0 ||
		 tjson_opt_double(j, "layer_norm_epsilon", &eps, 1e-6, path, err) < 0 ||
		 tjson_opt_string(j, "feed_forward_proj", &ffp, "relu", path, err) < 0
		 ? -1 : 0;
	if (rc == 0 && strcmp(ffp, "gated-gelu") != 0)
		rc = err_set(err, "%s: field 'feed_forward_proj': \"%s\", expected \"gated-gelu\" "
			     "(T5 v1.1; the other forms are not implemented)", path, ffp);
	if (rc == 0 && (c->vocab < 1 || c->d_model < 1 || c->d_kv < 1 || c->n_heads < 1 ||
			c->d_ff < 1 || c->n_layers < 1 || c->n_buckets < 4 ||
			c->max_distance < c->n_buckets / 4 + 1))
		rc = err_set(err, "%s: sizes must be positive, relative_attention_num_buckets >= 4 "
			     "and relative_attention_max_distance above a quarter of it", path);
	c->eps = (float)eps;
	json_decref(j);
	return rc;
}

int64_t t5_relative_bucket(int64_t rel, int64_t n_buckets, int64_t max_distance)
{
	int64_t nb = n_buckets / 2;
	int64_t bucket = rel > 0 ? nb : 0;
	int64_t dist = rel < 0 ? -rel : rel;
	int64_t max_exact = nb / 2;
	if (dist < max_exact)
		return bucket + dist;
	/* float32 as torch computes it: log(dist / max_exact) in float, divided by
	 * the Python float log(max_distance / max_exact) and truncated */
	float lg = logf((float)dist / (float)max_exact);
	float den = (float)log((double)max_distance / (double)max_exact);
	int64_t large = max_exact + (int64_t)(lg / den * (float)(nb - max_exact));
	return bucket + (large < nb - 1 ? large : nb - 1);
}

static int load_block(t5_encoder *m, const st_set *s, int64_t i, titan_err *err)
{
	static const char *const none[] = {"", NULL};
	const t5_config *c = &m->c;
	int64_t inner = c->n_heads * c->d_kv;
	t5_block *b = &m->blocks[i];
	char n[160];
#define T5W(dst, suffix, d0, d1, nd)                                                           \
	(snprintf(n, sizeof n, "encoder.block.%lld.%s", (long long)i, suffix),                 \
	 ((dst) = te_load(&m->ps, s, none, n, nd, d0, d1, err)) != NULL)
	if (!T5W(b->ln_attn, "layer.0.layer_norm.weight", c->d_model, 0, 1) ||
	    !T5W(b->q, "layer.0.SelfAttention.q.weight", inner, c->d_model, 2) ||
	    !T5W(b->k, "layer.0.SelfAttention.k.weight", inner, c->d_model, 2) ||
	    !T5W(b->v, "layer.0.SelfAttention.v.weight", inner, c->d_model, 2) ||
	    !T5W(b->o, "layer.0.SelfAttention.o.weight", c->d_model, inner, 2) ||
	    !T5W(b->ln_ff, "layer.1.layer_norm.weight", c->d_model, 0, 1) ||
	    !T5W(b->wi_0, "layer.1.DenseReluDense.wi_0.weight", c->d_ff, c->d_model, 2) ||
	    !T5W(b->wi_1, "layer.1.DenseReluDense.wi_1.weight", c->d_ff, c->d_model, 2) ||
	    !T5W(b->wo, "layer.1.DenseReluDense.wo.weight", c->d_model, c->d_ff, 2))
		return -1;
#undef T5W
	return 0;
}

static int load_weights(t5_encoder *m, const st_set *s, titan_err *err)
{
	/* T5EncoderModel ties encoder.embed_tokens to shared: either name holds it */
	static const char *const embed[] = {"encoder.embed_tokens.", "shared.", NULL};
	static const char *const none[] = {"", NULL};
	const t5_config *c = &m->c;
	if ((m->embed = te_load(&m->ps, s, embed, "weight", 2, c->vocab, c->d_model, err)) == NULL)
		return -1;
	void *rb = te_load(&m->ps, s, none,
			   "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
			   2, c->n_buckets, c->n_heads, err);
	m->final_ln = te_load(&m->ps, s, none, "encoder.final_layer_norm.weight", 1, c->d_model,
			      0, err);
	if (rb == NULL || m->final_ln == NULL)
		return -1;
	int64_t nb = c->n_buckets * c->n_heads;
	m->rel_bias = malloc((size_t)nb * sizeof *m->rel_bias);
	if (m->rel_bias == NULL)
		return err_set(err, "t5: out of memory");
	if (te_download(m->be, m->dt, m->rel_bias, rb, nb, err) < 0)
		return -1;
	for (int64_t i = 0; i < c->n_layers; i++)
		if (load_block(m, s, i, err) < 0)
			return -1;
	return 0;
}

static int read_config(void *cfg, const char *path, titan_err *err)
{
	return t5_config_read(cfg, path, err);
}

static int load(void *model, const st_set *s, titan_err *err)
{
	t5_encoder *m = model;
	m->blocks = calloc((size_t)m->c.n_layers, sizeof *m->blocks);
	if (m->blocks == NULL)
		return err_set(err, "t5: out of memory");
	return load_weights(m, s, err);
}

t5_encoder *t5_encoder_open(backend *be, const char *dir, be_dtype dtype, titan_err *err)
{
	if (dtype != BE_F32 && dtype != BE_BF16) {
		err_set(err, "t5: dtype %s, expected float32 or bfloat16", be_dtype_name(dtype));
		return NULL;
	}
	t5_encoder *m = calloc(1, sizeof *m);
	if (m == NULL) {
		err_set(err, "t5: out of memory");
		return NULL;
	}
	m->be = be;
	m->ps.be = be;
	m->dt = m->ps.dt = dtype;
	if (te_open_dir(dir, read_config, &m->c, load, m, err) < 0) {
		t5_encoder_free(m);
		return NULL;
	}
	return m;
}

const t5_config *t5_encoder_config(const t5_encoder *m) { return &m->c; }

void t5_encoder_free(t5_encoder *m)
{
	if (m == NULL)
		return;
	te_params_free(&m->ps);
	free(m->rel_bias);
	free(m->blocks);
	free(m);
}

/* bias (h, l, l) = rel_bias[bucket(key - query), h]: compute_bias of block 0,
 * on the host. */
static void position_bias(const t5_encoder *m, float *bias, int64_t l)
{
	const t5_config *c = &m->c;
	for (int64_t i = 0; i < l; i++)
		for (int64_t j = 0; j < l; j++) {
			int64_t bk = t5_relative_bucket(j - i, c->n_buckets, c->max_distance);
			for (int64_t h = 0; h < c->n_heads; h++)
				bias[(h * l + i) * l + j] = m->rel_bias[bk * c->n_heads + h];
		}
}

/* Scratch of one forward, in backend memory, of the model's type (rstd float32). */
typedef struct t5_scratch {
	void *x, *n, *q, *k, *v, *att, *g, *u, *bias, *rstd;
	int32_t *ids;
} t5_scratch;

static int scratch_alloc(backend *be, be_dtype dt, t5_scratch *w, const t5_config *c, int64_t b,
			 int64_t l, titan_err *err)
{
	size_t rows = (size_t)(b * l), inner = (size_t)(c->n_heads * c->d_kv);
	size_t dm = (size_t)c->d_model, ff = (size_t)c->d_ff, es = be_dtype_size(dt);
	void **bufs[] = {&w->x, &w->n, &w->q, &w->k, &w->v, &w->att, &w->g, &w->u, &w->bias,
			 &w->rstd};
	size_t bytes[] = {rows * dm * es, rows * dm * es, rows * inner * es, rows * inner * es,
			  rows * inner * es, rows * inner * es, rows * ff * es, rows * ff * es,
			  (size_t)(c->n_heads * l * l) * es, rows * sizeof(float)};
	return te_scratch_alloc(be, bufs, bytes, sizeof bytes / sizeof *bytes, &w->ids, rows, err);
}

static void scratch_free(backend *be, t5_scratch *w)
{
	void *bufs[] = {w->x, w->n, w->q, w->k, w->v, w->att, w->g, w->u, w->bias, w->rstd};
	te_scratch_free(be, bufs, sizeof bufs / sizeof *bufs, w->ids);
}

/* One block; in bf16 every op's output is stored rounded, as the bf16 model
 * stores it (its T5LayerNorm rounds before and after the weight: once here). */
static void block_forward(t5_encoder *m, const t5_block *blk, t5_scratch *w, int64_t b,
			  int64_t l)
{
	backend *be = m->be;
	const t5_config *c = &m->c;
	be_dtype dt = m->dt;
	int64_t rows = b * l, inner = c->n_heads * c->d_kv, dm = c->d_model, ff = c->d_ff;
	be->ops->rmsnorm_fwd(be, w->n, dt, w->rstd, w->x, dt, blk->ln_attn, dt, rows, dm, c->eps);
	te_linear(be, dt, w->q, w->n, blk->q, rows, dm, inner);
	te_linear(be, dt, w->k, w->n, blk->k, rows, dm, inner);
	te_linear(be, dt, w->v, w->n, blk->v, rows, dm, inner);
	be->ops->t5_attention(be, w->att, w->q, w->k, w->v, w->bias, dt, b, l, c->n_heads,
			      c->d_kv);
	te_linear(be, dt, w->n, w->att, blk->o, rows, inner, dm);
	be->ops->add(be, w->x, dt, w->x, dt, w->n, dt, rows * dm); /* x += o(att) */
	be->ops->rmsnorm_fwd(be, w->n, dt, w->rstd, w->x, dt, blk->ln_ff, dt, rows, dm, c->eps);
	te_linear(be, dt, w->g, w->n, blk->wi_0, rows, dm, ff);
	te_linear(be, dt, w->u, w->n, blk->wi_1, rows, dm, ff);
	be->ops->geglu_fwd(be, w->g, w->g, w->u, dt, rows * ff);
	te_linear(be, dt, w->n, w->g, blk->wo, rows, ff, dm);
	be->ops->add(be, w->x, dt, w->x, dt, w->n, dt, rows * dm); /* x += wo(gelu(g) u) */
}

/* The position bias of length l, computed on the host, into w->bias. */
static int upload_bias(t5_encoder *m, t5_scratch *w, int64_t l, titan_err *err)
{
	int64_t n = m->c.n_heads * l * l;
	float *bias = malloc((size_t)n * sizeof *bias);
	if (bias == NULL)
		return err_set(err, "t5: out of memory");
	position_bias(m, bias, l);
	int rc = te_upload(m->be, m->dt, w->bias, bias, n, err);
	free(bias);
	return rc;
}

int t5_encoder_forward(t5_encoder *m, const int32_t *ids, int64_t b, int64_t l, float *out,
		       titan_err *err)
{
	backend *be = m->be;
	const t5_config *c = &m->c;
	be_dtype dt = m->dt;
	if (b < 1 || l < 1)
		return err_set(err, "t5: empty batch (%lld x %lld)", (long long)b, (long long)l);
	if (te_check_ids(ids, b * l, c->vocab, "t5", err) < 0)
		return -1;
	t5_scratch w = {0};
	int64_t rows = b * l;
	int rc = scratch_alloc(be, dt, &w, c, b, l, err);
	if (rc == 0)
		rc = upload_bias(m, &w, l, err);
	if (rc == 0) {
		be->ops->copy(be, w.ids, ids, (size_t)rows * sizeof *ids, BACKEND_H2D);
		be->ops->embedding_fwd(be, w.x, dt, m->embed, dt, w.ids, rows, c->d_model, 0,
				       c->vocab);
		for (int64_t i = 0; i < c->n_layers; i++)
			block_forward(m, &m->blocks[i], &w, b, l);
		be->ops->rmsnorm_fwd(be, w.n, dt, w.rstd, w.x, dt, m->final_ln, dt, rows,
				     c->d_model, c->eps);
		rc = te_download(be, dt, out, w.n, rows * c->d_model, err);
	}
	if (rc == 0)
		rc = be->ops->sync(be, err);
	scratch_free(be, &w);
	return rc;
}
