/* golden_weights.c: golden_weights.h's reader and generator. */
#include <stdio.h>
#include <stdlib.h>

#include "golden_weights.h"
#include "testutil.h"

int gw_load(gw_set *w, const char *path, titan_err *e)
{
	*w = (gw_set){0};
	w->root = tjson_load_file(path, 0, e);
	if (w->root == NULL)
		return -1;
	json_t *ts = json_object_get(w->root, "tensors");
	w->seed = (uint64_t)json_integer_value(json_object_get(w->root, "seed"));
	w->n = json_array_size(ts);
	w->t = calloc(w->n > 0 ? w->n : 1, sizeof *w->t);
	if (w->n == 0 || w->t == NULL) {
		gw_free(w);
		return err_set(e, "%s: no tensors", path);
	}
	for (size_t i = 0; i < w->n; i++) {
		gw_tensor *g = &w->t[i];
		json_t *t = json_array_get(ts, i), *shape = json_object_get(t, "shape");
		snprintf(g->name, sizeof g->name, "%s", json_string_value(json_object_get(t, "name")));
		g->ndim = (int)json_array_size(shape);
		if (g->ndim < 1 || g->ndim > 4) {
			gw_free(w);
			return err_set(e, "%s: tensor %zu has %d dimensions, expected 1 .. 4", path,
				       i, g->ndim);
		}
		g->numel = 1;
		for (int d = 0; d < g->ndim; d++) {
			g->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
			g->numel *= g->shape[d];
		}
		g->offset = (float)json_number_value(json_object_get(t, "offset"));
		g->scale = (float)json_number_value(json_object_get(t, "scale"));
	}
	return 0;
}

float gw_value(const gw_set *w, size_t t, uint64_t j)
{
	/* scale * v exact: one rounding */
	return w->t[t].offset + w->t[t].scale * test_counter_draw(w->seed, t, j);
}

void gw_fill(const gw_set *w, size_t t, float *dst)
{
	for (int64_t j = 0; j < w->t[t].numel; j++)
		dst[j] = gw_value(w, t, (uint64_t)j);
}

void gw_free(gw_set *w)
{
	json_decref(w->root);
	free(w->t);
	*w = (gw_set){0};
}
