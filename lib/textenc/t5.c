/* t5.c: transformers' T5EncoderModel (v1.1, gated-gelu), forward in float32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/json.h"
#include "textenc/textenc.h"
#include "textenc/textenc_impl.h"

typedef struct t5_block {
	float *ln_attn;           /* (d_model) */
	float *q, *k, *v;         /* (inner, d_model), inner = n_heads * d_kv */
	float *o;                 /* (d_model, inner) */
	float *ln_ff;             /* (d_model) */
	float *wi_0, *wi_1;       /* (d_ff, d_model) */
	float *wo;                /* (d_model, d_ff) */
} t5_block;

struct t5_encoder {
	backend *be;
	t5_config c;
	te_params ps;
	float *embed;             /* (vocab, d_model) */
	float *rel_bias;          /* (n_buckets, n_heads): block 0's, host memory */
	t5_block *blocks;         /* (n_layers) */
	float *final_ln;          /* (d_model) */
	int bf16;                 /* the bf16 model's roundings (t5_encoder_open) */
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
	float *rb = te_load(&m->ps, s, none,
			    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
			    2, c->n_buckets, c->n_heads, err);
	m->final_ln = te_load(&m->ps, s, none, "encoder.final_layer_norm.weight", 1, c->d_model,
			      0, err);
	if (rb == NULL || m->final_ln == NULL)
		return -1;
	size_t nb = (size_t)(c->n_buckets * c->n_heads);
	m->rel_bias = malloc(nb * sizeof *m->rel_bias);
	if (m->rel_bias == NULL)
		return err_set(err, "t5: out of memory");
	m->be->ops->copy(m->be, m->rel_bias, rb, nb * sizeof *rb, BACKEND_D2H);
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
	m->bf16 = m->ps.bf16 = dtype == BE_BF16;
	if (te_open_dir(be, dir, "t5", read_config, &m->c, load, m, err) < 0) {
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

/* bias (h, l, l) = rel_bias[bucket(key - query), h]: compute_bias of block 0. */
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

/* out (b, l, h, dk) = softmax(q k^T + bias) v per head, without scaling:
 * q, k, v (b, l, h, dk); bias (h, l, l).  With bf16 the scores, the biased
 * scores, the probabilities and out are rounded to bfloat16 as the bf16
 * model's matmul, add, softmax and matmul store them. */
static void biased_attention(float *out, const float *q, const float *k, const float *v,
			     const float *bias, int64_t b, int64_t l, int64_t h, int64_t dk,
			     int bf16)
{
	int64_t row = h * dk;
#pragma omp parallel for collapse(2) schedule(static)
	for (int64_t bi = 0; bi < b; bi++)
		for (int64_t hi = 0; hi < h; hi++) {
			float s[l];
			for (int64_t i = 0; i < l; i++) {
				const float *qi = q + (bi * l + i) * row + hi * dk;
				float mx = -INFINITY, sum = 0;
				for (int64_t j = 0; j < l; j++) {
					const float *kj = k + (bi * l + j) * row + hi * dk;
					float dot = 0;
					for (int64_t d = 0; d < dk; d++)
						dot += qi[d] * kj[d];
					s[j] = bf16 ? bf16_round(bf16_round(dot) +
								 bias[(hi * l + i) * l + j])
						    : dot + bias[(hi * l + i) * l + j];
					mx = fmaxf(mx, s[j]);
				}
				for (int64_t j = 0; j < l; j++) {
					s[j] = expf(s[j] - mx);
					sum += s[j];
				}
				float *oi = out + (bi * l + i) * row + hi * dk;
				for (int64_t d = 0; d < dk; d++)
					oi[d] = 0;
				for (int64_t j = 0; j < l; j++) {
					const float *vj = v + (bi * l + j) * row + hi * dk;
					float p = bf16 ? bf16_round(s[j] / sum) : s[j] / sum;
					for (int64_t d = 0; d < dk; d++)
						oi[d] += p * vj[d];
				}
				if (bf16)
					for (int64_t d = 0; d < dk; d++)
						oi[d] = bf16_round(oi[d]);
			}
		}
}

/* Scratch of one forward, in backend memory. */
typedef struct t5_scratch {
	float *x, *n, *q, *k, *v, *att, *g, *u, *bias, *rstd;
	int32_t *ids;
} t5_scratch;

static int scratch_alloc(backend *be, t5_scratch *w, const t5_config *c, int64_t b, int64_t l,
			 titan_err *err)
{
	size_t rows = (size_t)(b * l), inner = (size_t)(c->n_heads * c->d_kv);
	size_t dm = (size_t)c->d_model, ff = (size_t)c->d_ff;
	float **bufs[] = {&w->x, &w->n, &w->q, &w->k, &w->v, &w->att, &w->g, &w->u, &w->bias,
			  &w->rstd};
	size_t sizes[] = {rows * dm, rows * dm, rows * inner, rows * inner, rows * inner,
			  rows * inner, rows * ff, rows * ff, (size_t)(c->n_heads * l * l), rows};
	return te_scratch_alloc(be, bufs, sizes, sizeof sizes / sizeof *sizes, &w->ids, rows, err);
}

static void scratch_free(backend *be, t5_scratch *w)
{
	float *bufs[] = {w->x, w->n, w->q, w->k, w->v, w->att, w->g, w->u, w->bias, w->rstd};
	te_scratch_free(be, bufs, sizeof bufs / sizeof *bufs, w->ids);
}

/* The bf16 model rounds the norm and each linear's output to bfloat16 (its
 * T5LayerNorm rounds twice, before and after the weight: once here). */
static void block_forward(t5_encoder *m, const t5_block *blk, t5_scratch *w, int64_t b,
			  int64_t l)
{
	backend *be = m->be;
	const t5_config *c = &m->c;
	int64_t rows = b * l, inner = c->n_heads * c->d_kv, dm = c->d_model, ff = c->d_ff;
	int r = m->bf16;
	be->ops->rmsnorm_fwd(be, w->n, BE_F32, w->rstd, w->x, BE_F32, blk->ln_attn, BE_F32, rows,
			     dm, c->eps);
	te_round(r, w->n, rows * dm);
	te_linear(be, w->q, w->n, blk->q, rows, dm, inner);
	te_linear(be, w->k, w->n, blk->k, rows, dm, inner);
	te_linear(be, w->v, w->n, blk->v, rows, dm, inner);
	te_round(r, w->q, rows * inner);
	te_round(r, w->k, rows * inner);
	te_round(r, w->v, rows * inner);
	biased_attention(w->att, w->q, w->k, w->v, w->bias, b, l, c->n_heads, c->d_kv, r);
	te_linear(be, w->n, w->att, blk->o, rows, inner, dm);
	te_residual(be, r, w->x, w->n, rows * dm); /* x += o(att) */
	be->ops->rmsnorm_fwd(be, w->n, BE_F32, w->rstd, w->x, BE_F32, blk->ln_ff, BE_F32, rows,
			     dm, c->eps);
	te_round(r, w->n, rows * dm);
	te_linear(be, w->g, w->n, blk->wi_0, rows, dm, ff);
	te_linear(be, w->u, w->n, blk->wi_1, rows, dm, ff);
	te_round(r, w->g, rows * ff);
	te_round(r, w->u, rows * ff);
	te_gated_gelu_new(w->g, w->u, rows * ff, r);
	te_linear(be, w->n, w->g, blk->wo, rows, ff, dm);
	te_residual(be, r, w->x, w->n, rows * dm); /* x += wo(gelu(g) u) */
}

int t5_encoder_forward(t5_encoder *m, const int32_t *ids, int64_t b, int64_t l, float *out,
		       titan_err *err)
{
	backend *be = m->be;
	const t5_config *c = &m->c;
	if (b < 1 || l < 1)
		return err_set(err, "t5: empty batch (%lld x %lld)", (long long)b, (long long)l);
	if (te_check_ids(ids, b * l, c->vocab, "t5", err) < 0)
		return -1;
	t5_scratch w = {0};
	int rc = scratch_alloc(be, &w, c, b, l, err);
	if (rc == 0) {
		int64_t rows = b * l;
		be->ops->copy(be, w.ids, ids, (size_t)rows * sizeof *ids, BACKEND_H2D);
		be->ops->embedding_fwd(be, w.x, BE_F32, m->embed, BE_F32, w.ids, rows, c->d_model,
				       0, c->vocab);
		position_bias(m, w.bias, l);
		for (int64_t i = 0; i < c->n_layers; i++)
			block_forward(m, &m->blocks[i], &w, b, l);
		be->ops->rmsnorm_fwd(be, w.n, BE_F32, w.rstd, w.x, BE_F32, m->final_ln, BE_F32,
				     rows, c->d_model, c->eps);
		te_round(m->bf16, w.n, rows * c->d_model);
		be->ops->copy(be, out, w.n, (size_t)(rows * c->d_model) * sizeof *out,
			      BACKEND_D2H);
		rc = be->ops->sync(be, err);
	}
	scratch_free(be, &w);
	return rc;
}
