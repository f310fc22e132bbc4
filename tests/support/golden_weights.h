/* golden_weights.h: the weights.json of goldens whose weights are drawn, not
 * committed (scripts/fluxae_golden.py, scripts/flux_model_golden.py):
 *   {"seed": S, "tensors": [{"name", "shape", "offset", "scale"}, ...], ...}
 * value j of tensor t (0-based, in the file's order) is
 * offset + scale * test_counter_draw(S, t, j), scale a power of two so that
 * the one rounding is the sum's.  The file's other keys stay readable in
 * root. */
#ifndef TITAN_TEST_GOLDEN_WEIGHTS_H
#define TITAN_TEST_GOLDEN_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/json.h"

typedef struct gw_tensor {
	char name[128];
	int ndim;                /* 1 .. 4 */
	int64_t shape[4];
	int64_t numel;
	float offset, scale;
} gw_tensor;

typedef struct gw_set {
	uint64_t seed;
	gw_tensor *t;
	size_t n;
	json_t *root;            /* the whole file */
} gw_set;

/* 0, or -1 and e (unreadable, or a tensor without 1 to 4 dimensions). */
int gw_load(gw_set *w, const char *path, titan_err *e);
float gw_value(const gw_set *w, size_t t, uint64_t j);
/* Tensor t drawn into dst (numel floats). */
void gw_fill(const gw_set *w, size_t t, float *dst);
/* The tensor named name drawn into a new array (the caller frees it); NULL
 * when there is none or no memory. */
float *gw_draw(const gw_set *w, const char *name);
void gw_free(gw_set *w);
/* The tensors whose names start with prefix, drawn, as a float32 safetensors
 * file at path named without the prefix (a model's checkpoint among a
 * golden's other tensors).  0, or -1 and e. */
int gw_write_st(const gw_set *w, const char *prefix, const char *path, titan_err *e);

#endif
