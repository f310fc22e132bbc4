/* titan's own Llama forward on a torchtitan-keyed DCP checkpoint written by
 * torch gives transformers' LlamaForCausalLM logits for the HF export of the
 * same weights (tests/ckpt/golden/hf_logits.safetensors, computed in float64
 * by scripts/ckpt_golden.py).  With convert.sh's check that to-hf reproduces
 * transformers' own safetensors exactly, this closes the loop: titan model ->
 * titan DCP -> HF export -> HF model computes the same function. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dcp/dcp.h"
#include "model/model.h"
#include "safetensors/safetensors.h"

#define GOLDEN "tests/ckpt/golden"

static void titan_forward_on_torch_checkpoint_matches_transformers(void **state)
{
	(void)state;
	titan_err e = {0};
	st_file ref;
	if (st_open(&ref, GOLDEN "/hf_logits.safetensors", &e))
		fail_msg("%s", e.msg);
	const st_tensor *ids = st_find(&ref, "ids"), *lg = st_find(&ref, "logits");
	assert_true(ids && lg && ids->ndim == 2 && lg->ndim == 3);
	int b = (int)ids->shape[0], t = (int)ids->shape[1], v = (int)lg->shape[2];

	/* The golden model: scripts/ckpt_golden.py's ARGS, transformers' default
	 * RoPE (no llama3 scaling). */
	llama_args a = *flavor_find("debugmodel");
	a.dim = 32;
	a.n_layers = 2;
	a.n_heads = 4;
	a.n_kv_heads = 2;
	a.vocab_size = v;
	a.multiple_of = 32; /* FFN hidden 96 */
	a.ffn_dim_multiplier = 0;
	a.rope_scale_factor = 0;
	a.tied_embeddings = 0;
	backend *be = backend_cpu_create(1, &e);
	assert_non_null(be);
	model *m = model_create(be, &a, v, &e);
	if (!m)
		fail_msg("%s", e.msg);
	assert_int_equal(model_ffn_hidden(m), 96);

	/* Load every model tensor from the torch-written DCP folder. */
	int n = model_num_tensors(m);
	dcp_item *items = calloc((size_t)n, sizeof *items);
	float **bufs = calloc((size_t)n, sizeof *bufs);
	for (int i = 0; i < n; i++) {
		const model_tensor *mt = model_tensor_at(m, i);
		bufs[i] = malloc(mt->numel * sizeof(float));
		dcp_item_full(&items[i], mt->fqn, PTZ_F32, mt->ndim, mt->shape, bufs[i]);
	}
	if (dcp_load(GOLDEN "/torch_new", items, (size_t)n, &e))
		fail_msg("%s", e.msg);
	for (int i = 0; i < n; i++)
		model_tensor_write(m, model_tensor_at(m, i), 0, bufs[i]);

	int32_t *in = malloc(sizeof(int32_t) * (size_t)(b * t));
	int64_t id64;
	for (int i = 0; i < b * t; i++) {
		memcpy(&id64, ids->data + 8 * (size_t)i, 8);
		in[i] = (int32_t)id64;
	}
	float *out = malloc(sizeof(float) * (size_t)(b * t * v));
	if (model_forward(m, in, NULL, b, t, out, NULL, NULL, &e))
		fail_msg("%s", e.msg);
	double maxd = 0, scale = 0;
	for (size_t i = 0; i < (size_t)(b * t * v); i++) {
		double want;
		memcpy(&want, lg->data + 8 * i, 8);
		maxd = fmax(maxd, fabs(want - (double)out[i]));
		scale = fmax(scale, fabs(want));
	}
	printf("# titan forward vs transformers on the same checkpoint: max |logit diff| %.3e "
	       "(logits up to %.3f)\n", maxd, scale);
	assert_true(maxd < 1e-4 * fmax(1.0, scale));

	for (int i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(items);
	free(in);
	free(out);
	model_free(m);
	backend_free(be);
	st_close(&ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(titan_forward_on_torch_checkpoint_matches_transformers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
