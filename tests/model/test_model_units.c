/* The model as units: what the parallel plans rely on.  A run cut into stages,
 * several micro-batches in flight, deferred weight gradients, storage bound unit
 * by unit and the hooks' order all give the gradients of the plain
 * forward_backward, bit for bit (the same ops on the same numbers in the same
 * order).  Seeds fixed and printed. */
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
#include "model/model.h"

static const llama_args small = {
	.name = "small", .dim = 64, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2,
	.vocab_size = 300, .multiple_of = 32, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 4096,
};

enum { B = 2, T = 24, NMB = 3 };

static void tokens(int32_t *ids, int32_t *labels, size_t n, uint64_t seed)
{
	print_message("seed %llu\n", (unsigned long long)seed);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((seed >> 33) % 300);
		labels[i] = (seed >> 20) % 7 == 0 ? MODEL_IGNORE_INDEX : (int32_t)((seed >> 40) % 300);
	}
}

typedef struct fixture {
	backend *be;
	model *m;
	int32_t ids[NMB * B * T], labels[NMB * B * T];
	float *want;   /* gradients of NMB micro-batches through forward_backward */
	double loss;   /* their summed loss */
} fixture;

static void setup(fixture *f, model_ac_mode ac)
{
	titan_err e = {0};
	f->be = backend_cpu_create(2, &e);
	f->m = model_create(f->be, &small, 0, &e);
	assert_non_null(f->m);
	assert_int_equal(model_init(f->m, 31, 1, &e), 0);
	assert_int_equal(model_set_ac(f->m, ac, 2, &e), 0);
	tokens(f->ids, f->labels, NMB * B * T, 31);
	size_t np = model_num_params(f->m);
	model_zero_grad(f->m);
	f->loss = 0;
	for (int k = 0; k < NMB; k++) {
		double l;
		int64_t nv;
		assert_int_equal(model_forward_backward(f->m, f->ids + k * B * T, f->labels + k * B * T,
							B, T, 0.01f, &l, &nv, &e), 0);
		f->loss += l;
	}
	f->want = malloc(np * sizeof(float));
	memcpy(f->want, model_grads(f->m), np * sizeof(float));
	model_zero_grad(f->m);
}

static void teardown(fixture *f)
{
	free(f->want);
	model_free(f->m);
	backend_free(f->be);
}

static void same_grads(fixture *f)
{
	assert_memory_equal(f->want, model_grads(f->m), model_num_params(f->m) * sizeof(float));
}

/* Where micro-batches' contributions to a weight gradient add up in another order
 * or through another buffer, equal within float32 rounding: max |a - b| / max |b|. */
static void close_grads(fixture *f, const char *what)
{
	size_t np = model_num_params(f->m);
	double num = 0, den = 0;
	for (size_t i = 0; i < np; i++) {
		double d = fabs((double)f->want[i] - model_grads(f->m)[i]);
		num = d > num ? d : num;
		den = fabs(f->want[i]) > den ? fabs(f->want[i]) : den;
	}
	print_message("%s: rel err %.2e\n", what, num / den);
	assert_true(num / den < 1e-6);
}

/* Two stages (embedding + 2 blocks | 2 blocks + head), NMB micro-batches in
 * flight: all forwards (GPipe's order), the hidden state handed over as a
 * pipeline send would, then the backwards, gradient handed back. */
static void stages_with_micro_batches_in_flight_equal_the_whole(void **s)
{
	(void)s;
	model_ac_mode modes[] = {MODEL_AC_NONE, MODEL_AC_SELECTIVE, MODEL_AC_OP, MODEL_AC_FULL};
	for (size_t mi = 0; mi < 4; mi++) {
		fixture f;
		setup(&f, modes[mi]);
		titan_err e = {0};
		model *m = f.m;
		int head = model_head_unit(m), cut = 2;
		size_t hbytes = (size_t)B * T * 64 * sizeof(float);
		model_mb *s0[NMB], *s1[NMB];
		double loss = 0;
		for (int k = 0; k < NMB; k++) {
			s0[k] = model_mb_create(m, 0, cut, B, T, &e);
			s1[k] = model_mb_create(m, cut + 1, head, B, T, &e);
			assert_non_null(s0[k]);
			assert_non_null(s1[k]);
			assert_int_equal(model_mb_set_tokens(s0[k], f.ids + k * B * T, NULL, 1, 0.01f,
							     NULL, &e), 0);
			assert_int_equal(model_mb_set_tokens(s1[k], NULL, f.labels + k * B * T, 1,
							     0.01f, NULL, &e), 0);
		}
		for (int k = 0; k < NMB; k++) {
			for (int u = 0; u <= cut; u++)
				assert_int_equal(model_unit_fwd(m, u, s0[k], &e), 0);
			memcpy(model_mb_hidden(s1[k], cut + 1), model_mb_hidden(s0[k], cut + 1), hbytes);
			for (int u = cut + 1; u <= head; u++)
				assert_int_equal(model_unit_fwd(m, u, s1[k], &e), 0);
		}
		for (int k = 0; k < NMB; k++) {
			for (int u = head; u > cut; u--)
				assert_int_equal(model_unit_bwd(m, u, s1[k], 0, &e), 0);
			loss += model_mb_loss_sum(s1[k]);
			/* the send and receive of the gradient: a copy through the host */
			float *g = malloc(hbytes);
			memcpy(g, model_dhidden(m), hbytes);
			memcpy(model_dhidden(m), g, hbytes);
			free(g);
			for (int u = cut; u >= 0; u--)
				assert_int_equal(model_unit_bwd(m, u, s0[k], 0, &e), 0);
		}
		assert_true(loss == f.loss);
		same_grads(&f);
		for (int k = 0; k < NMB; k++) {
			model_mb_free(s0[k]);
			model_mb_free(s1[k]);
		}
		teardown(&f);
	}
}

/* Zero-bubble's split: every backward defers its blocks' weight gradients,
 * which run afterwards in another order (micro-batches reversed). */
static void deferred_weight_gradients_equal_the_immediate_ones(void **s)
{
	(void)s;
	model_ac_mode modes[] = {MODEL_AC_NONE, MODEL_AC_FULL, MODEL_AC_OP};
	for (size_t mi = 0; mi < 3; mi++) {
		fixture f;
		setup(&f, modes[mi]);
		titan_err e = {0};
		model *m = f.m;
		int head = model_head_unit(m);
		model_mb *mb[NMB];
		for (int k = 0; k < NMB; k++) {
			mb[k] = model_mb_create(m, 0, head, B, T, &e);
			assert_non_null(mb[k]);
			assert_int_equal(model_mb_set_tokens(mb[k], f.ids + k * B * T,
							     f.labels + k * B * T, 1, 0.01f, NULL, &e),
					 0);
			for (int u = 0; u <= head; u++)
				assert_int_equal(model_unit_fwd(m, u, mb[k], &e), 0);
			for (int u = head; u >= 0; u--)
				assert_int_equal(model_unit_bwd(m, u, mb[k], 1, &e), 0);
		}
		for (int k = NMB - 1; k >= 0; k--)
			for (int u = head; u >= 0; u--)
				assert_int_equal(model_unit_wgrad(m, u, mb[k], &e), 0);
		/* dW of one tensor adds micro-batch 2, then 1, then 0 */
		char what[64];
		snprintf(what, sizeof what, "deferred (AC mode %d) vs immediate", (int)modes[mi]);
		close_grads(&f, what);
		for (int k = 0; k < NMB; k++)
			model_mb_free(mb[k]);
		teardown(&f);
	}
}

/* What an FSDP plan does: a model without storage whose units are bound, before
 * each forward and backward, to buffers of their own (gathered parameters,
 * fresh gradients that the hook then adds up), with the hooks' calls logged. */
typedef struct binder {
	model *m;       /* the plan's model (unbound) */
	model *src;     /* where the parameters come from */
	float **p, **g; /* per unit */
	char log[512];
	size_t len;
} binder;

static int before(void *ctx, int u, int phase, titan_err *e)
{
	(void)e;
	binder *b = ctx;
	b->len += (size_t)snprintf(b->log + b->len, sizeof b->log - b->len, "%c%d ",
				   "FBW"[phase], u);
	const model_unit *un = model_unit_at(b->m, u);
	memcpy(b->p[u], model_params(b->src) + un->offset, un->numel * sizeof(float));
	if (phase == MODEL_BWD)
		memset(b->g[u], 0, un->numel * sizeof(float));
	model_bind_unit(b->m, u, b->p[u], b->g[u]);
	return 0;
}

static int after(void *ctx, int u, int phase, titan_err *e)
{
	(void)e;
	binder *b = ctx;
	const model_unit *un = model_unit_at(b->m, u);
	if (phase == MODEL_FWD)
		memset(b->p[u], 0xff, un->numel * sizeof(float)); /* freed: poison */
	if (phase == MODEL_BWD) /* the reduce-scatter's place: add into the source */
		for (size_t i = 0; i < un->numel; i++)
			model_grads(b->src)[un->offset + i] += b->g[u][i];
	return 0;
}

static void units_bound_by_hooks_equal_the_own_storage(void **s)
{
	(void)s;
	fixture f;
	setup(&f, MODEL_AC_SELECTIVE);
	titan_err e = {0};
	model *m = model_create_unbound(f.be, &small, 0, &e);
	assert_non_null(m);
	assert_null(model_params(m));
	assert_int_equal(model_set_ac(m, MODEL_AC_SELECTIVE, 2, &e), 0);
	int nu = model_num_units(m);
	assert_int_equal(nu, small.n_layers + 2);
	binder b = {.m = m, .src = f.m};
	b.p = calloc((size_t)nu, sizeof *b.p);
	b.g = calloc((size_t)nu, sizeof *b.g);
	size_t covered = 0;
	for (int u = 0; u < nu; u++) {
		const model_unit *un = model_unit_at(m, u);
		assert_int_equal(un->offset, covered);
		covered += un->numel;
		b.p[u] = malloc(un->numel * sizeof(float));
		b.g[u] = malloc(un->numel * sizeof(float));
	}
	assert_int_equal(covered, model_num_params(m));
	model_hooks h = {.ctx = &b, .before = before, .after = after};
	model_mb *mb = model_mb_create(m, 0, nu - 1, B, T, &e);
	assert_non_null(mb);
	double loss = 0;
	for (int k = 0; k < NMB; k++) {
		b.len = 0;
		assert_int_equal(model_mb_set_tokens(mb, f.ids + k * B * T, f.labels + k * B * T, 1,
						     0.01f, NULL, &e), 0);
		assert_int_equal(model_run_mb(m, mb, &h, &e), 0);
		loss += model_mb_loss_sum(mb);
	}
	print_message("hooks: %s\n", b.log);
	assert_string_equal(b.log, "F0 F1 F2 F3 F4 F5 B5 B4 B3 B2 B1 B0 ");
	assert_true(loss == f.loss);
	/* each micro-batch's gradient is rounded in its own buffer, then added */
	close_grads(&f, "bound by hooks vs own storage");
	model_mb_free(mb);
	for (int u = 0; u < nu; u++)
		free(b.p[u]), free(b.g[u]);
	free(b.p), free(b.g);
	model_free(m);
	teardown(&f);
}

static void bad_unit_ranges_are_refused(void **s)
{
	(void)s;
	titan_err e = {0};
	backend *be = backend_cpu_create(1, &e);
	model *m = model_create(be, &small, 0, &e);
	assert_null(model_mb_create(m, 3, 2, 1, 8, &e));
	assert_non_null(strstr(e.msg, "units 3..2"));
	assert_null(model_mb_create(m, 0, 6, 1, 8, &e));
	model_mb *mb = model_mb_create(m, 2, 3, 1, 8, &e);
	assert_non_null(mb);
	assert_int_equal(model_unit_fwd(m, 4, mb, &e), -1);
	assert_non_null(strstr(e.msg, "outside"));
	assert_null(model_mb_hidden(mb, 1));
	assert_non_null(model_mb_hidden(mb, 4));
	model_mb_free(mb);
	model *u = model_create_unbound(be, &small, 0, &e);
	assert_int_equal(model_init(u, 1, 1, &e), -1);
	model_free(u);
	model_free(m);
	backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stages_with_micro_batches_in_flight_equal_the_whole),
		cmocka_unit_test(deferred_weight_gradients_equal_the_immediate_ones),
		cmocka_unit_test(units_bound_by_hooks_equal_the_own_storage),
		cmocka_unit_test(bad_unit_ranges_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
