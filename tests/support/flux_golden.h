/* flux_golden.h: the flux-debug golden of tests/flux/golden
 * (scripts/flux_model_golden.py) as test_flux_model and test_flux_bf16 open
 * it: a CPU backend, the counter-drawn tensors of its weights.json, and the
 * seeds and count of its sampled gradient positions. */
#ifndef TITAN_TESTS_FLUX_GOLDEN_H
#define TITAN_TESTS_FLUX_GOLDEN_H

#include <stdint.h>

#include "backend/backend.h"
#include "golden_weights.h"

/* 0, or -1 after saying why on stderr (cmocka's group setup). */
int flux_golden_load(const char *dir, backend **be, gw_set *gw, uint64_t *sample_seed,
		     int64_t *samples);
void flux_golden_free(backend *be, gw_set *gw);

#endif
