/* flux_models.h: deterministic random text encoders for titan-encode's tests and
 * benchmark: DIR/t5 (a T5 v1.1 encoder, gated-gelu) and DIR/clip (a CLIP
 * text model with Flux's eos_token_id 2), each config.json and
 * model.safetensors (float32) as transformers 5 saves them, so that
 * lib/textenc and torchtitan's FluxEmbedder load the same weights.
 *
 * Element i of tensor NAME is offset + scale * u with u in [-1, 1) on a
 * 2^-23 grid, test_counter_draw(FNV-1a(NAME), 0, i) (testutil.h): layer-norm
 * weights 1 + 0.2 u, biases 0.1 u, linears
 * u / sqrt(fan_in), T5's embedding and relative bias u, CLIP's token embedding
 * 0.5 u and positions 0.1 u.  Nothing here is compiled into the library;
 * the tests and scripts/flux_encode_golden.py call it through test_fluxin
 * mkmodels. */
#ifndef TITAN_TESTS_ENCODE_MODELS_H
#define TITAN_TESTS_ENCODE_MODELS_H

#include <stdint.h>

#include "core/err.h"

typedef struct test_t5_dims {
	int64_t vocab, d_model, d_kv, heads, d_ff, layers;
} test_t5_dims;

typedef struct test_clip_dims {
	int64_t vocab, hidden, intermediate, heads, layers;
} test_clip_dims;

/* The tests' tiny encoders (the real vocabularies, 8 wide, 2 layers) and
 * the real shapes: T5-XXL (google/t5-v1_1-xxl, 24 layers) and CLIP ViT-L/14's
 * text model. */
extern const test_t5_dims test_t5_tiny, test_t5_xxl;
extern const test_clip_dims test_clip_tiny, test_clip_large;

int test_make_encoders(const char *dir, const test_t5_dims *t5, const test_clip_dims *clip,
		       titan_err *err);

/* DIR/ae.safetensors and DIR/ae.json: the tiny FLUX autoencoder of lib/fluxae's
 * tests, TEST_AE_GOLDEN's config.json and the weights its weights.json draws
 * (golden_weights.h): the very weights test_fluxae runs. */
#define TEST_AE_GOLDEN "tests/fluxae/golden"
int test_make_ae(const char *dir, titan_err *err);
/* The same from another golden folder (its config.json and weights.json). */
int test_make_ae_from(const char *dir, const char *golden, titan_err *err);

#endif
