/* ae_weights.h: the golden autoencoder's weights for the tests that run it
 * (static functions, included by tests/fluxae/test_fluxae.c and
 * tests/gpu/test_gpu_fluxae.c).  They are not committed: weights.json names
 * each tensor, its shape and the offset and scale of its values, which are
 * drawn from the counter-based generator scripts/fluxae_golden.py describes
 * and written as an ae.safetensors (spoilt on request, for the hostile
 * cases). */
#ifndef TITAN_TEST_AE_WEIGHTS_H
#define TITAN_TEST_AE_WEIGHTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/json.h"
#include "safetensors/safetensors.h"

/* weights.json: the tensors in state_dict order. */
typedef struct wtensor {
	char name[128];
	int ndim;
	int64_t shape[4];
	float offset, scale;
} wtensor;

static wtensor *wts;
static size_t n_wts;
static uint64_t wseed;

/* The manifest at path (weights.json). */
static void ae_weights_read(const char *path)
{
	titan_err e;
	json_t *root = tjson_load_file(path, 0, &e);
	if (root == NULL)
		fail_msg("%s", e.msg);
	json_t *ts = json_object_get(root, "tensors");
	wseed = (uint64_t)json_integer_value(json_object_get(root, "seed"));
	n_wts = json_array_size(ts);
	assert_true(n_wts > 0);
	wts = calloc(n_wts, sizeof *wts);
	for (size_t i = 0; i < n_wts; i++) {
		json_t *t = json_array_get(ts, i), *shape = json_object_get(t, "shape");
		snprintf(wts[i].name, sizeof wts[i].name, "%s",
			 json_string_value(json_object_get(t, "name")));
		wts[i].ndim = (int)json_array_size(shape);
		assert_true(wts[i].ndim >= 1 && wts[i].ndim <= 4);
		for (int d = 0; d < wts[i].ndim; d++)
			wts[i].shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
		wts[i].offset = (float)json_number_value(json_object_get(t, "offset"));
		wts[i].scale = (float)json_number_value(json_object_get(t, "scale"));
	}
	json_decref(root);
}

static void ae_weights_free(void)
{
	free(wts);
	wts = NULL;
}

/* Value j of tensor t (scripts/fluxae_golden.py's generator). */
static float draw(size_t t, uint64_t j)
{
	uint64_t z = wseed + ((uint64_t)t << 32) + j + 0x9e3779b97f4a7c15u;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	float v = (float)((int64_t)(z >> 40) - (1 << 23)) / (float)(1 << 23);
	return wts[t].offset + wts[t].scale * v; /* scale * v exact: one rounding */
}

/* How write_weights spoils the file for a hostile case. */
typedef struct spoil {
	const char *name;   /* the tensor spoiled, or NULL */
	int drop;           /* left out */
	int64_t last_dim;   /* > 0: its last dimension this instead */
	ptz_dtype dtype;    /* not PTZ_NONE: stored in this type */
} spoil;

/* The golden weights written to path, every tensor stored in dtype (F32 or
 * BF16) but as sp spoils them; returns path. */
static const char *ae_weights_write(const char *path, ptz_dtype dtype, spoil sp)
{
	st_item *items = calloc(n_wts, sizeof *items);
	void **data = calloc(n_wts, sizeof *data);
	size_t n = 0;
	for (size_t t = 0; t < n_wts; t++) {
		int hit = sp.name != NULL && strcmp(sp.name, wts[t].name) == 0;
		if (hit && sp.drop)
			continue;
		st_item *it = &items[n];
		*it = (st_item){.name = wts[t].name, .dtype = dtype, .ndim = wts[t].ndim};
		memcpy(it->shape, wts[t].shape, sizeof wts[t].shape);
		if (hit && sp.last_dim > 0)
			it->shape[it->ndim - 1] = sp.last_dim;
		if (hit && sp.dtype != PTZ_NONE)
			it->dtype = sp.dtype;
		size_t numel = 1;
		for (int d = 0; d < it->ndim; d++)
			numel *= (size_t)it->shape[d];
		data[n] = calloc(numel, 8);
		for (size_t j = 0; j < numel; j++) {
			float v = draw(t, j);
			if (it->dtype == PTZ_F32)
				((float *)data[n])[j] = v;
			else if (it->dtype == PTZ_BF16)
				((uint16_t *)data[n])[j] = bf16_from_f32(v);
			else if (it->dtype == PTZ_F64)
				((double *)data[n])[j] = v;
		}
		it->data = data[n++];
	}
	titan_err e;
	if (st_write(path, items, n, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	for (size_t i = 0; i < n; i++)
		free(data[i]);
	free(data);
	free(items);
	return path;
}

#endif
