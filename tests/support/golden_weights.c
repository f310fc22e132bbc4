/* golden_weights.c: golden_weights.h's reader and generator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden_weights.h"
#include "safetensors/safetensors.h"
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

float *gw_draw(const gw_set *w, const char *name)
{
	for (size_t t = 0; t < w->n; t++)
		if (strcmp(w->t[t].name, name) == 0) {
			float *v = malloc(sizeof(float) * (size_t)w->t[t].numel);
			if (v != NULL)
				gw_fill(w, t, v);
			return v;
		}
	return NULL;
}

void gw_free(gw_set *w)
{
	json_decref(w->root);
	free(w->t);
	*w = (gw_set){0};
}

int gw_write_st(const gw_set *w, const char *prefix, const char *path, titan_err *e)
{
	size_t len = strlen(prefix), n = 0;
	st_item *items = calloc(w->n, sizeof *items);
	float **data = calloc(w->n, sizeof *data);
	int rc = items && data ? 0 : err_set(e, "%s: out of memory", path);
	for (size_t t = 0; t < w->n && rc == 0; t++) {
		if (strncmp(w->t[t].name, prefix, len) != 0)
			continue;
		st_item *it = &items[n];
		*it = (st_item){.name = w->t[t].name + len, .dtype = PTZ_F32, .ndim = w->t[t].ndim};
		memcpy(it->shape, w->t[t].shape, sizeof w->t[t].shape);
		data[n] = malloc(sizeof(float) * (size_t)w->t[t].numel);
		if (data[n] == NULL) {
			rc = err_set(e, "%s: out of memory", path);
			break;
		}
		gw_fill(w, t, data[n]);
		it->data = data[n++];
	}
	if (rc == 0)
		rc = st_write(path, items, n, NULL, e);
	for (size_t i = 0; data && i < n; i++)
		free(data[i]);
	free(data);
	free(items);
	return rc;
}
