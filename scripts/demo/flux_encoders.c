/* flux_encoders: random weights for make demo-flux's text encoders, drawn at
 * demo time rather than committed (a T5 of d_model 4096 and a CLIP of hidden
 * 768 are megabytes even at one layer).
 *
 *   flux_encoders t5|clip DIR [--seed S]
 *
 * Reads DIR/config.json as lib/textenc does (t5_config_read,
 * clip_config_read) and writes DIR/model.safetensors (float32) with every
 * tensor lib/textenc and transformers load, named as save_pretrained names
 * them.  Values are uniform with the standard deviations transformers'
 * _init_weights gives (factor 1): T5's embeddings 1, q (d_model d_kv)^-1/2,
 * k, v, wi d_model^-1/2, o (heads d_kv)^-1/2, wo d_ff^-1/2, norms 1; CLIP's
 * token embedding 0.02, positions 0.01, q, k, v (hidden^-1/2)(2 layers)^-1/2,
 * out_proj hidden^-1/2 (2 layers)^-1/2, fc1 (2 hidden)^-1/2, fc2
 * hidden^-1/2 (2 layers)^-1/2, layer norms 1 and 0, biases 0.  Element j of
 * a tensor is a function of (seed, its name, j) alone: the same files on
 * every machine.  Untrained: the encodings differ by caption (which is all
 * the demo's flow model needs to learn from) without meaning anything. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "safetensors/safetensors.h"
#include "textenc/textenc.h"

#define MAX_TENSORS 64

typedef struct spec {
	char name[128];
	int64_t rows, cols; /* cols 0: a vector */
	float std;          /* < 0: constant -std - 1 (ones: -2, zeros: -1) */
} spec;

typedef struct specs {
	spec t[MAX_TENSORS];
	int n;
} specs;

static const float ONES = -2.0f, ZEROS = -1.0f;

static void add(specs *s, const char *name, int64_t rows, int64_t cols, float std)
{
	spec *t = &s->t[s->n++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->rows = rows;
	t->cols = cols;
	t->std = std;
}

static void t5_specs(const t5_config *c, specs *s)
{
	int64_t inner = c->n_heads * c->d_kv, d = c->d_model;
	float rd = 1 / sqrtf((float)d);
	add(s, "encoder.embed_tokens.weight", c->vocab, d, 1.0f);
	add(s, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
	    c->n_buckets, c->n_heads, rd);
	for (int64_t i = 0; i < c->n_layers; i++) {
		char n[128];
#define T5(suffix, r, k, std)                                                        \
	(snprintf(n, sizeof n, "encoder.block.%lld.%s", (long long)i, suffix), \
	 add(s, n, r, k, std))
		T5("layer.0.layer_norm.weight", d, 0, ONES);
		T5("layer.0.SelfAttention.q.weight", inner, d, 1 / sqrtf((float)(d * c->d_kv)));
		T5("layer.0.SelfAttention.k.weight", inner, d, rd);
		T5("layer.0.SelfAttention.v.weight", inner, d, rd);
		T5("layer.0.SelfAttention.o.weight", d, inner, 1 / sqrtf((float)inner));
		T5("layer.1.layer_norm.weight", d, 0, ONES);
		T5("layer.1.DenseReluDense.wi_0.weight", c->d_ff, d, rd);
		T5("layer.1.DenseReluDense.wi_1.weight", c->d_ff, d, rd);
		T5("layer.1.DenseReluDense.wo.weight", d, c->d_ff, 1 / sqrtf((float)c->d_ff));
#undef T5
	}
	add(s, "encoder.final_layer_norm.weight", d, 0, ONES);
}

static void clip_specs(const clip_config *c, specs *s)
{
	int64_t h = c->hidden, ff = c->intermediate;
	float depth = 1 / sqrtf(2.0f * (float)c->n_layers), rh = 1 / sqrtf((float)h);
	add(s, "text_model.embeddings.token_embedding.weight", c->vocab, h, 0.02f);
	add(s, "text_model.embeddings.position_embedding.weight", c->max_pos, h, 0.01f);
	for (int64_t i = 0; i < c->n_layers; i++) {
		char n[128];
#define CL(suffix, r, k, std)                                                                \
	(snprintf(n, sizeof n, "text_model.encoder.layers.%lld.%s", (long long)i, suffix), \
	 add(s, n, r, k, std))
		CL("layer_norm1.weight", h, 0, ONES);
		CL("layer_norm1.bias", h, 0, ZEROS);
		static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
		for (int p = 0; p < 4; p++) {
			char w[64], b[64];
			snprintf(w, sizeof w, "self_attn.%s.weight", proj[p]);
			snprintf(b, sizeof b, "self_attn.%s.bias", proj[p]);
			CL(w, h, h, rh * depth);
			CL(b, h, 0, ZEROS);
		}
		CL("layer_norm2.weight", h, 0, ONES);
		CL("layer_norm2.bias", h, 0, ZEROS);
		CL("mlp.fc1.weight", ff, h, 1 / sqrtf(2.0f * (float)h));
		CL("mlp.fc1.bias", ff, 0, ZEROS);
		CL("mlp.fc2.weight", h, ff, rh * depth);
		CL("mlp.fc2.bias", h, 0, ZEROS);
#undef CL
	}
	add(s, "text_model.final_layer_norm.weight", h, 0, ONES);
	add(s, "text_model.final_layer_norm.bias", h, 0, ZEROS);
}

static uint64_t mix(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xCBF29CE484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
	return h;
}

/* data (rows, cols) or (rows): a uniform draw of standard deviation std. */
static void fill(const spec *t, uint64_t seed, float *data)
{
	int64_t n = t->rows * (t->cols ? t->cols : 1);
	uint64_t base = mix(seed ^ fnv1a(t->name));
	float a = t->std * sqrtf(3.0f);
	for (int64_t j = 0; j < n; j++) {
		if (t->std < 0) {
			data[j] = t->std == ONES ? 1.0f : 0.0f;
			continue;
		}
		double u = (double)(mix(base + (uint64_t)j) >> 11) * 0x1.0p-53 * 2 - 1;
		data[j] = a * (float)u;
	}
}

static int write_model(const char *dir, const specs *s, uint64_t seed, titan_err *err)
{
	st_item items[MAX_TENSORS];
	float *bufs[MAX_TENSORS] = {0};
	int rc = 0;
	for (int i = 0; i < s->n && rc == 0; i++) {
		const spec *t = &s->t[i];
		bufs[i] = malloc((size_t)(t->rows * (t->cols ? t->cols : 1)) * sizeof(float));
		if (bufs[i] == NULL) {
			rc = err_set(err, "%s: out of memory", t->name);
			break;
		}
		fill(t, seed, bufs[i]);
		items[i] = (st_item){.name = t->name, .dtype = PTZ_F32, .ndim = t->cols ? 2 : 1,
				     .shape = {t->rows, t->cols}, .data = bufs[i]};
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	static const char *const meta[] = {"format", "pt", NULL};
	if (rc == 0)
		rc = st_write(path, items, (size_t)s->n, meta, err);
	for (int i = 0; i < s->n; i++)
		free(bufs[i]);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: flux_encoders t5|clip DIR [--seed S]\n"
		   "  DIR/model.safetensors: random weights for DIR/config.json\n");
}

int main(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return TITAN_EXIT_OK;
	}
	uint64_t seed = 0;
	int t5 = argc >= 3 && strcmp(argv[1], "t5") == 0;
	int ok = argc >= 3 && (t5 || strcmp(argv[1], "clip") == 0);
	if (ok && argc == 5 && strcmp(argv[3], "--seed") == 0) {
		char *end;
		errno = 0;
		seed = strtoull(argv[4], &end, 10);
		ok = errno == 0 && end != argv[4] && *end == '\0';
	} else if (argc != 3) {
		ok = 0;
	}
	if (!ok) {
		usage(stderr);
		return TITAN_EXIT_USAGE;
	}
	const char *dir = argv[2];
	char cfg[4096];
	snprintf(cfg, sizeof cfg, "%s/config.json", dir);
	titan_err err = {{0}};
	static specs s;
	int rc;
	if (t5) {
		t5_config c;
		rc = t5_config_read(&c, cfg, &err);
		if (rc == 0 && 9 * c.n_layers + 3 > MAX_TENSORS)
			rc = err_set(&err, "%s: %lld layers, at most 6 here", cfg, (long long)c.n_layers);
		if (rc == 0)
			t5_specs(&c, &s);
	} else {
		clip_config c;
		rc = clip_config_read(&c, cfg, &err);
		if (rc == 0 && 16 * c.n_layers + 4 > MAX_TENSORS)
			rc = err_set(&err, "%s: %lld layers, at most 3 here", cfg, (long long)c.n_layers);
		if (rc == 0)
			clip_specs(&c, &s);
	}
	if (rc == 0)
		rc = write_model(dir, &s, seed, &err);
	if (rc != 0) {
		fprintf(stderr, "flux_encoders: %s\n", err.msg);
		return TITAN_EXIT_FAIL;
	}
	return TITAN_EXIT_OK;
}
