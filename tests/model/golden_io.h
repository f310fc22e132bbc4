/* Helpers shared by the model tests: reading the golden cases that
 * scripts/model_golden.py wrote into tests/model/golden/ (index.json plus raw
 * little-endian float32 / int32 files). */
#ifndef TITAN_TEST_GOLDEN_IO_H
#define TITAN_TEST_GOLDEN_IO_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/flavor.h"
#include "model/model.h"

static inline const char *golden_dir(void)
{
	static char dir[512];
	const char *root = getenv("ROOT");
	snprintf(dir, sizeof dir, "%s/tests/model/golden", root ? root : ".");
	return dir;
}

static inline json_t *golden_case(const char *name)
{
	char path[600];
	snprintf(path, sizeof path, "%s/index.json", golden_dir());
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	if (!root) {
		fprintf(stderr, "%s: %s\n", path, je.text);
		return NULL;
	}
	json_t *c = json_object_get(json_object_get(root, "cases"), name);
	json_incref(c);
	json_decref(root);
	return c;
}

/* The whole file, which must hold exactly n elements of size sz; NULL otherwise. */
static inline void *golden_read(json_t *c, const char *key, size_t sz, size_t n)
{
	char path[700];
	snprintf(path, sizeof path, "%s/%s", golden_dir(),
		 json_string_value(json_object_get(c, key)));
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "%s: cannot open\n", path);
		return NULL;
	}
	void *buf = malloc(sz * n + 1);
	size_t got = buf ? fread(buf, sz, n + 1, f) : 0;
	fclose(f);
	if (got != n) {
		fprintf(stderr, "%s: %zu elements, expected %zu\n", path, got, n);
		free(buf);
		return NULL;
	}
	return buf;
}

/* Accumulate max|a - b| into *num and max|b| into *den over n elements. */
static inline void golden_diff(const float *a, const float *b, size_t n, double *num,
			       double *den)
{
	for (size_t i = 0; i < n; i++) {
		*num = fmax(*num, fabs((double)a[i] - b[i]));
		*den = fmax(*den, fabs((double)b[i]));
	}
}

/* max|a - b| / max|b| over the whole of n elements. */
static inline double golden_rel(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	golden_diff(a, b, n, &num, &den);
	return den > 0 ? num / den : num;
}

/* The largest golden_rel of one tensor of the model's flat layout (got against
 * want) and its name; tensors at or above tol are printed with label. */
static inline double golden_worst_tensor(const model *m, const float *got, const float *want,
					 double tol, const char *label, const char **name)
{
	double worst = 0;
	*name = "";
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		double r = golden_rel(got + t->offset, want + t->offset, t->numel);
		if (r >= tol)
			fprintf(stderr, "%s: grad %s rel diff %.2e\n", label, t->fqn, r);
		if (r > worst)
			worst = r, *name = t->fqn;
	}
	return worst;
}

static inline llama_args golden_args(json_t *c)
{
	json_t *a = json_object_get(c, "args");
	llama_args r = {
		.name = "golden",
		.dim = (int)json_integer_value(json_object_get(a, "dim")),
		.n_layers = (int)json_integer_value(json_object_get(a, "n_layers")),
		.n_heads = (int)json_integer_value(json_object_get(a, "n_heads")),
		.n_kv_heads = (int)json_integer_value(json_object_get(a, "n_kv_heads")),
		.vocab_size = (int)json_integer_value(json_object_get(a, "vocab")),
		.multiple_of = (int)json_integer_value(json_object_get(a, "multiple_of")),
		.ffn_dim_multiplier = json_number_value(json_object_get(a, "ffn_dim_multiplier")),
		.norm_eps = 1e-5,
		.rope_theta = json_number_value(json_object_get(a, "rope_theta")),
		.rope_scale_factor = json_number_value(json_object_get(a, "rope_factor")),
		.tied_embeddings = json_is_true(json_object_get(a, "tied")),
		.max_seq_len = 131072,
	};
	return r;
}

/* The error metric of every golden comparison: max|a - b| / max|b| over the
 * tensor (relative to the tensor's scale, so tiny elements do not dominate). */
static inline double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

#endif
