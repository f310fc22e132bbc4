/* The model's context-parallel entry points, in one process: positions given
 * explicitly rotate as the default table does; the ring's arithmetic hooked in
 * place of the backend's attention op (one cp rank, every block its own)
 * trains to the same gradients, bit for bit without the balancer (one block,
 * merged into nothing) and within float32 rounding with headtail (two chunks
 * merged).  Several ranks run under MPI in tests/cp/ once lib/comm lands. */
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
#include "cp/cp.h"
#include "model/model.h"

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 300, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

enum { B = 2, T = 32 };

typedef struct run {
	backend *be;
	model *m;
	int32_t ids[B * T], labels[B * T];
	double loss;
} run;

static void setup(run *r)
{
	titan_err e = {0};
	r->be = backend_cpu_create(2, &e);
	r->m = model_create(r->be, &small, 0, &e);
	assert_int_equal(model_init(r->m, 5, 1, &e), 0);
	uint64_t seed = 99;
	print_message("seed %llu\n", (unsigned long long)seed);
	for (int i = 0; i < B * T; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		r->ids[i] = (int32_t)((seed >> 33) % 300);
		r->labels[i] = (int32_t)((seed >> 41) % 300);
	}
}

static void step(run *r)
{
	titan_err e = {0};
	int64_t nv;
	model_zero_grad(r->m);
	if (model_forward_backward(r->m, r->ids, r->labels, B, T, 1.0f / (B * T), &r->loss, &nv, &e))
		fail_msg("%s", e.msg);
}

static void teardown(run *r)
{
	model_free(r->m);
	backend_free(r->be);
}

/* One cp rank's ring attention as the model's attention: every block is the
 * rank's own (cp = 1), so no communication. */
typedef struct ring_hook {
	backend *be;
	cp_layout l;
	cp_ring *ring;
} ring_hook;

static cp_ring *ring_for(ring_hook *h, const be_attn *a)
{
	if (h->ring == NULL) {
		titan_err e = {0};
		h->ring = cp_ring_create(h->be, &h->l, 0, a, &e);
		if (h->ring == NULL)
			backend_fault(h->be, "%s", e.msg);
	}
	return h->ring;
}

static void hook_fwd(void *ctx, void *out, float *lse, const void *q, const void *k,
		     const void *v, const be_attn *a)
{
	ring_hook *h = ctx;
	titan_err e = {0};
	cp_ring *r = ring_for(h, a);
	if (r == NULL)
		return;
	cp_ring_fwd_begin(r, q);
	if (cp_ring_fwd_block(r, 0, k, v, &e) || cp_ring_fwd_end(r, out, lse, &e))
		backend_fault(h->be, "%s", e.msg);
}

static void hook_bwd(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *q,
		     const void *k, const void *v, const void *out, const float *lse,
		     const be_attn *a)
{
	ring_hook *h = ctx;
	titan_err e = {0};
	cp_ring *r = ring_for(h, a);
	if (r == NULL)
		return;
	size_t nk = (size_t)cp_ring_k_numel(r), nv = (size_t)cp_ring_v_numel(r);
	float *dk32 = backend_calloc_floats(h->be, nk, &e), *dv32 = backend_calloc_floats(h->be, nv, &e);
	cp_ring_bwd_begin(r, dout, q, out, lse);
	if (cp_ring_bwd_block(r, 0, k, v, dk32, dv32, &e) || cp_ring_bwd_end(r, dq, &e))
		backend_fault(h->be, "%s", e.msg);
	memcpy(dk, dk32, nk * 4); /* float32 throughout here */
	memcpy(dv, dv32, nv * 4);
	h->be->ops->free(h->be, dk32);
	h->be->ops->free(h->be, dv32);
}

static double max_rel(const float *a, const float *b, size_t n)
{
	double m = 0, scale = 0;
	for (size_t i = 0; i < n; i++) {
		m = fmax(m, fabs((double)a[i] - b[i]));
		scale = fmax(scale, fabs((double)b[i]));
	}
	return m / scale;
}

static void explicit_positions_rotate_as_the_default(void **state)
{
	(void)state;
	run a, b;
	setup(&a);
	setup(&b);
	int64_t pos[T];
	for (int i = 0; i < T; i++)
		pos[i] = i;
	titan_err e = {0};
	assert_int_equal(model_set_positions(b.m, pos, T, &e), 0);
	step(&a);
	step(&b);
	assert_memory_equal(model_grads(a.m), model_grads(b.m), model_num_params(a.m) * 4);
	/* other positions, other gradients; and a wrong count is refused */
	for (int i = 0; i < T; i++)
		pos[i] = 1000 + 3 * i;
	assert_int_equal(model_set_positions(b.m, pos, T, &e), 0);
	step(&b);
	assert_true(max_rel(model_grads(a.m), model_grads(b.m), model_num_params(a.m)) > 1e-3);
	assert_int_equal(model_set_positions(b.m, pos, T - 1, &e), 0);
	int64_t nv;
	double l;
	assert_int_equal(model_forward_backward(b.m, b.ids, b.labels, B, T, 1, &l, &nv, &e), -1);
	assert_non_null(strstr(e.msg, "31 positions set for micro-batches of 32 tokens"));
	teardown(&a);
	teardown(&b);
}

static void ring_attention_hook_trains_as_the_backend(void **state)
{
	(void)state;
	for (int bal = 0; bal < 2; bal++) {
		run a, b;
		setup(&a);
		setup(&b);
		titan_err e = {0};
		ring_hook h = {.be = b.be};
		assert_int_equal(cp_layout_init(&h.l, T, 1, (cp_balance)bal, &e), 0);
		int64_t pos[T];
		cp_positions(&h.l, 0, pos);
		assert_int_equal(model_set_positions(b.m, pos, T, &e), 0);
		model_attention hook = {.ctx = &h, .fwd = hook_fwd, .bwd = hook_bwd};
		model_set_attention(b.m, &hook);
		step(&a);
		step(&b);
		double d = max_rel(model_grads(b.m), model_grads(a.m), model_num_params(a.m));
		print_message("%s: loss %.9f vs %.9f, max relative gradient difference %.2e\n",
			      bal ? "headtail" : "none", b.loss, a.loss, d);
		if (bal == CP_BALANCE_NONE)
			assert_memory_equal(model_grads(a.m), model_grads(b.m),
					    model_num_params(a.m) * 4);
		else
			assert_true(d < 1e-5 && fabs(a.loss - b.loss) < 1e-5 * fabs(a.loss));
		cp_ring_free(h.ring);
		teardown(&a);
		teardown(&b);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(explicit_positions_rotate_as_the_default),
		cmocka_unit_test(ring_attention_hook_trains_as_the_backend),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
