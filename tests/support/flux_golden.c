#include "flux_golden.h"

#include <jansson.h>
#include <stdio.h>

int flux_golden_load(const char *dir, backend **be, gw_set *gw, uint64_t *sample_seed,
		     int64_t *samples)
{
	char path[1024];
	titan_err e;
	snprintf(path, sizeof path, "%s/weights.json", dir);
	*be = backend_cpu_create(0, &e);
	if (*be == NULL || gw_load(gw, path, &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	*sample_seed = (uint64_t)json_integer_value(json_object_get(gw->root, "sample_seed"));
	*samples = json_integer_value(json_object_get(gw->root, "samples"));
	return *samples > 0 && gw->n > 4 ? 0 : -1;
}

void flux_golden_free(backend *be, gw_set *gw)
{
	gw_free(gw);
	backend_free(be);
}
