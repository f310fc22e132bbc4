/* flux_models.c: deterministic random T5 v1.1 encoders and CLIP text models for
 * titan-encode's tests and benchmark (see models.h). */
#include "flux_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "core/json.h"
#include "golden_weights.h"
#include "testutil.h"
#include "safetensors/safetensors.h"

static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* Element i of tensor name: offset + scale * test_counter_draw(FNV-1a(name),
 * 0, i), exact in float32 before the scale. */
static void fill(float *p, size_t n, const char *name, float scale, float offset)
{
	uint64_t h = name_hash(name);
	#pragma omp parallel for
	for (size_t i = 0; i < n; i++)
		p[i] = offset + scale * test_counter_draw(h, 0, i);
}

typedef struct tensors {
	st_item *it;
	char **names;
	float **data;
	size_t n, cap;
} tensors;

/* A new tensor of t, its values left to the caller; NULL when out of memory. */
static float *add_shaped(tensors *t, const char *name, const int64_t *shape, int ndim)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->it = realloc(t->it, t->cap * sizeof *t->it);
		t->names = realloc(t->names, t->cap * sizeof *t->names);
		t->data = realloc(t->data, t->cap * sizeof *t->data);
		if (!t->it || !t->names || !t->data)
			return NULL;
	}
	size_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	float *p = malloc(n * sizeof *p);
	char *nm = strdup(name);
	if (p == NULL || nm == NULL) {
		free(p);
		free(nm);
		return NULL;
	}
	st_item *it = &t->it[t->n];
	memset(it, 0, sizeof *it);
	it->name = nm;
	it->dtype = PTZ_F32;
	it->ndim = ndim;
	for (int d = 0; d < ndim; d++)
		it->shape[d] = shape[d];
	it->data = p;
	t->names[t->n] = nm;
	t->data[t->n++] = p;
	return p;
}

static int add(tensors *t, const char *name, int64_t d0, int64_t d1, float scale, float offset)
{
	const int64_t shape[2] = {d0, d1};
	float *p = add_shaped(t, name, shape, d1 ? 2 : 1);
	if (p == NULL)
		return -1;
	fill(p, (size_t)d0 * (size_t)(d1 ? d1 : 1), name, scale, offset);
	return 0;
}

static void tensors_free(tensors *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->names[i]);
		free(t->data[i]);
	}
	free(t->it);
	free(t->names);
	free(t->data);
}

static int write_dir(const char *dir, tensors *t, const char *config, titan_err *err)
{
	if (mkdir_p(dir, err) != 0)
		return -1;
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (atomic_write_file(path, config, strlen(config), err) != 0)
		return -1;
	return st_write_sharded(dir, t->it, t->n, 4ull << 30, NULL, err);
}

#define LIN(name, out, in) add(&t, name, out, in, 1.0f / sqrtf((float)(in)), 0)

static int make_t5(const char *dir, const test_t5_dims *d, titan_err *err)
{
	tensors t = {0};
	int64_t inner = d->heads * d->d_kv;
	char n[160];
	int rc = add(&t, "shared.weight", d->vocab, d->d_model, 1, 0) ||
		 add(&t, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
		     32, d->heads, 1, 0) ||
		 add(&t, "encoder.final_layer_norm.weight", d->d_model, 0, 0.2f, 1);
	for (int64_t i = 0; rc == 0 && i < d->layers; i++) {
#define NAME(s) (snprintf(n, sizeof n, "encoder.block.%lld.%s", (long long)i, s), n)
		rc = add(&t, NAME("layer.0.layer_norm.weight"), d->d_model, 0, 0.2f, 1) ||
		     LIN(NAME("layer.0.SelfAttention.q.weight"), inner, d->d_model) ||
		     LIN(NAME("layer.0.SelfAttention.k.weight"), inner, d->d_model) ||
		     LIN(NAME("layer.0.SelfAttention.v.weight"), inner, d->d_model) ||
		     LIN(NAME("layer.0.SelfAttention.o.weight"), d->d_model, inner) ||
		     add(&t, NAME("layer.1.layer_norm.weight"), d->d_model, 0, 0.2f, 1) ||
		     LIN(NAME("layer.1.DenseReluDense.wi_0.weight"), d->d_ff, d->d_model) ||
		     LIN(NAME("layer.1.DenseReluDense.wi_1.weight"), d->d_ff, d->d_model) ||
		     LIN(NAME("layer.1.DenseReluDense.wo.weight"), d->d_model, d->d_ff);
#undef NAME
	}
	char cfg[1024];
	snprintf(cfg, sizeof cfg,
		 "{\n  \"architectures\": [\"T5EncoderModel\"],\n  \"model_type\": \"t5\",\n"
		 "  \"vocab_size\": %lld,\n  \"d_model\": %lld,\n  \"d_kv\": %lld,\n"
		 "  \"num_heads\": %lld,\n  \"d_ff\": %lld,\n  \"num_layers\": %lld,\n"
		 "  \"relative_attention_num_buckets\": 32,\n"
		 "  \"relative_attention_max_distance\": 128,\n"
		 "  \"feed_forward_proj\": \"gated-gelu\",\n  \"dense_act_fn\": \"gelu_new\",\n"
		 "  \"is_gated_act\": true,\n  \"layer_norm_epsilon\": 1e-06,\n"
		 "  \"dropout_rate\": 0.0,\n  \"is_encoder_decoder\": false,\n"
		 "  \"tie_word_embeddings\": true,\n  \"pad_token_id\": 0,\n  \"eos_token_id\": 1,\n"
		 "  \"use_cache\": false\n}\n",
		 (long long)d->vocab, (long long)d->d_model, (long long)d->d_kv,
		 (long long)d->heads, (long long)d->d_ff, (long long)d->layers);
	if (rc != 0)
		rc = err_set(err, "out of memory making the T5 weights");
	else
		rc = write_dir(dir, &t, cfg, err);
	tensors_free(&t);
	return rc;
}

static int make_clip(const char *dir, const test_clip_dims *d, titan_err *err)
{
	tensors t = {0};
	char n[160];
	int rc = add(&t, "embeddings.token_embedding.weight", d->vocab, d->hidden, 0.5f, 0) ||
		 add(&t, "embeddings.position_embedding.weight", 77, d->hidden, 0.1f, 0) ||
		 add(&t, "final_layer_norm.weight", d->hidden, 0, 0.2f, 1) ||
		 add(&t, "final_layer_norm.bias", d->hidden, 0, 0.1f, 0);
	for (int64_t i = 0; rc == 0 && i < d->layers; i++) {
#define NAME(s) (snprintf(n, sizeof n, "encoder.layers.%lld.%s", (long long)i, s), n)
		int64_t h = d->hidden, ff = d->intermediate;
		rc = add(&t, NAME("layer_norm1.weight"), h, 0, 0.2f, 1) ||
		     add(&t, NAME("layer_norm1.bias"), h, 0, 0.1f, 0) ||
		     LIN(NAME("self_attn.q_proj.weight"), h, h) ||
		     add(&t, NAME("self_attn.q_proj.bias"), h, 0, 0.1f, 0) ||
		     LIN(NAME("self_attn.k_proj.weight"), h, h) ||
		     add(&t, NAME("self_attn.k_proj.bias"), h, 0, 0.1f, 0) ||
		     LIN(NAME("self_attn.v_proj.weight"), h, h) ||
		     add(&t, NAME("self_attn.v_proj.bias"), h, 0, 0.1f, 0) ||
		     LIN(NAME("self_attn.out_proj.weight"), h, h) ||
		     add(&t, NAME("self_attn.out_proj.bias"), h, 0, 0.1f, 0) ||
		     add(&t, NAME("layer_norm2.weight"), h, 0, 0.2f, 1) ||
		     add(&t, NAME("layer_norm2.bias"), h, 0, 0.1f, 0) ||
		     LIN(NAME("mlp.fc1.weight"), ff, h) ||
		     add(&t, NAME("mlp.fc1.bias"), ff, 0, 0.1f, 0) ||
		     LIN(NAME("mlp.fc2.weight"), h, ff) ||
		     add(&t, NAME("mlp.fc2.bias"), h, 0, 0.1f, 0);
#undef NAME
	}
	/* eos_token_id 2: Flux's clip-vit-large-patch14 config, which pools at
	 * the largest id (its <|endoftext|>, 49407) */
	char cfg[1024];
	snprintf(cfg, sizeof cfg,
		 "{\n  \"architectures\": [\"CLIPTextModel\"],\n  \"model_type\": \"clip_text_model\",\n"
		 "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
		 "  \"num_attention_heads\": %lld,\n  \"num_hidden_layers\": %lld,\n"
		 "  \"max_position_embeddings\": 77,\n  \"hidden_act\": \"quick_gelu\",\n"
		 "  \"layer_norm_eps\": 1e-05,\n  \"attention_dropout\": 0.0,\n"
		 "  \"bos_token_id\": 0,\n  \"eos_token_id\": 2,\n  \"pad_token_id\": 1,\n"
		 "  \"projection_dim\": 768\n}\n",
		 (long long)d->vocab, (long long)d->hidden, (long long)d->intermediate,
		 (long long)d->heads, (long long)d->layers);
	if (rc != 0)
		rc = err_set(err, "out of memory making the CLIP weights");
	else
		rc = write_dir(dir, &t, cfg, err);
	tensors_free(&t);
	return rc;
}

#undef LIN

int test_make_ae(const char *dir, titan_err *err)
{
	return test_make_ae_from(dir, TEST_AE_GOLDEN, err);
}

int test_make_ae_from(const char *dir, const char *golden, titan_err *err)
{
	char wpath[4096], cpath[4096];
	snprintf(wpath, sizeof wpath, "%s/weights.json", golden);
	snprintf(cpath, sizeof cpath, "%s/config.json", golden);
	gw_set w;
	if (gw_load(&w, wpath, err) != 0)
		return -1;
	json_t *cfg = tjson_load_file(cpath, 0, err);
	tensors t = {0};
	int rc = cfg ? 0 : -1;
	for (size_t i = 0; rc == 0 && i < w.n; i++) {
		float *p = add_shaped(&t, w.t[i].name, w.t[i].shape, w.t[i].ndim);
		if (p == NULL)
			rc = err_set(err, "out of memory making the autoencoder's weights");
		else
			gw_fill(&w, i, p);
	}
	char p[4096];
	if (rc == 0 && mkdir_p(dir, err) != 0)
		rc = -1;
	snprintf(p, sizeof p, "%s/ae.json", dir);
	if (rc == 0)
		rc = tjson_dump_file(cfg, p, err);
	snprintf(p, sizeof p, "%s/ae.safetensors", dir);
	if (rc == 0)
		rc = st_write(p, t.it, t.n, NULL, err);
	tensors_free(&t);
	json_decref(cfg);
	gw_free(&w);
	return rc;
}

const test_t5_dims test_t5_tiny = {32128, 8, 4, 2, 16, 2};
const test_clip_dims test_clip_tiny = {49408, 8, 16, 2, 2};
const test_t5_dims test_t5_xxl = {32128, 4096, 64, 64, 10240, 24};
const test_clip_dims test_clip_large = {49408, 768, 3072, 12, 12};

int test_make_encoders(const char *dir, const test_t5_dims *t5, const test_clip_dims *clip,
		       titan_err *err)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/t5", dir);
	if (make_t5(p, t5, err) != 0)
		return -1;
	snprintf(p, sizeof p, "%s/clip", dir);
	return make_clip(p, clip, err);
}
