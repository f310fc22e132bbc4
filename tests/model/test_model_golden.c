/* The model against PyTorch: scripts/model_golden.py ran a float64 Llama 3 written
 * after torchtitan's code on the same weights and batch; titan's float32 logits,
 * loss, every parameter gradient, and 10 AdamW steps must agree.
 * Error metric: max|titan - torch| / max|torch| per tensor (rel_err), < 1e-5;
 * the 10 losses within 1e-5 absolute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "optim/optim.h"
#include "golden_io.h"

#define TOL 1e-5

typedef struct golden {
	json_t *c;
	llama_args a;
	backend *be;
	model *m;
	int b, t;
	int32_t *ids, *labels;
} golden;

static void golden_open(golden *g, const char *name, int n_batches)
{
	titan_err e = {0};
	g->c = golden_case(name);
	assert_non_null(g->c);
	g->a = golden_args(g->c);
	g->b = (int)json_integer_value(json_object_get(g->c, "b"));
	g->t = (int)json_integer_value(json_object_get(g->c, "t"));
	g->be = backend_cpu_create(0, &e);
	assert_non_null(g->be);
	g->m = model_create(g->be, &g->a, 0, &e);
	if (!g->m)
		fail_msg("%s", e.msg);
	size_t np = model_num_params(g->m);
	float *w = golden_read(g->c, "weights", 4, np);
	assert_non_null(w);
	memcpy(model_params(g->m), w, np * sizeof(float));
	free(w);
	size_t n = (size_t)g->b * g->t * n_batches;
	g->ids = golden_read(g->c, "inputs", 4, n);
	g->labels = golden_read(g->c, "labels", 4, n);
	assert_non_null(g->ids);
	assert_non_null(g->labels);
}

static void golden_close(golden *g)
{
	model_free(g->m);
	backend_free(g->be);
	free(g->ids);
	free(g->labels);
	json_decref(g->c);
}

static void check_case(const char *name)
{
	golden g;
	titan_err e = {0};
	golden_open(&g, name, 1);
	size_t v = (size_t)g.a.vocab_size, n = (size_t)g.b * g.t;
	float *logits = malloc(n * v * sizeof(float));
	float *want = golden_read(g.c, "logits", 4, n * v);
	assert_non_null(want);
	double ls = 0;
	int64_t nv = 0;
	if (model_forward(g.m, g.ids, g.labels, g.b, g.t, logits, &ls, &nv, &e))
		fail_msg("%s", e.msg);
	double le = rel_err(logits, want, n * v);
	print_message("%s: logits rel err %.2e\n", name, le);
	assert_true(le < TOL);

	int64_t want_nv = json_integer_value(json_object_get(g.c, "n_valid"));
	double want_loss = json_number_value(json_object_get(g.c, "loss"));
	model_zero_grad(g.m);
	double ls2 = 0;
	int64_t nv2 = 0;
	if (model_forward_backward(g.m, g.ids, g.labels, g.b, g.t, 1.0f / (float)want_nv, &ls2,
				   &nv2, &e))
		fail_msg("%s", e.msg);
	assert_int_equal(nv, want_nv);
	assert_int_equal(nv2, want_nv);
	double lerr = fabs(ls2 / (double)nv2 - want_loss) / fabs(want_loss);
	print_message("%s: loss %.9f vs torch %.9f, rel err %.2e\n", name, ls2 / (double)nv2,
		      want_loss, lerr);
	assert_true(lerr < TOL);
	assert_true(fabs(ls - ls2) <= 1e-9 * fabs(ls));

	float *wg = golden_read(g.c, "grads", 4, model_num_params(g.m));
	assert_non_null(wg);
	double worst = 0;
	const char *worst_name = "";
	for (int i = 0; i < model_num_tensors(g.m); i++) {
		const model_tensor *t = model_tensor_at(g.m, i);
		double r = rel_err(model_grads(g.m) + t->offset, wg + t->offset, t->numel);
		if (r > worst) {
			worst = r;
			worst_name = t->fqn;
		}
		if (r >= TOL)
			print_message("%s: grad %s rel err %.2e\n", name, t->fqn, r);
		assert_true(r < TOL);
	}
	print_message("%s: worst gradient rel err %.2e (%s)\n", name, worst, worst_name);
	free(wg);
	free(logits);
	free(want);
	golden_close(&g);
}

/* torchtitan 0.3.0's documents: the micro-batch's per-document positions give
 * RoPE and the block-causal mask (model_mb_set_positions); logits, loss and
 * every gradient against torch's SDPA under the same mask in float64. */
static void documents_with_per_document_positions_match_torch(void **s)
{
	(void)s;
	golden g;
	titan_err e = {0};
	golden_open(&g, "gqa_docs", 1);
	size_t v = (size_t)g.a.vocab_size, n = (size_t)g.b * g.t;
	int32_t *pos = golden_read(g.c, "positions", 4, n);
	float *want = golden_read(g.c, "logits", 4, n * v), *logits = malloc(n * v * sizeof *logits);
	float *wg = golden_read(g.c, "grads", 4, model_num_params(g.m));
	assert_non_null(pos);
	assert_non_null(want);
	assert_non_null(wg);
	int64_t want_nv = json_integer_value(json_object_get(g.c, "n_valid"));
	double want_loss = json_number_value(json_object_get(g.c, "loss"));
	model_mb *mb = model_mb_create(g.m, 0, model_head_unit(g.m), g.b, g.t, &e);
	if (!mb || model_mb_set_tokens(mb, g.ids, g.labels, 0, 0, logits, &e) ||
	    model_mb_set_positions(mb, pos, &e) || model_run_mb(g.m, mb, NULL, &e))
		fail_msg("%s", e.msg);
	double le = rel_err(logits, want, n * v);
	print_message("gqa_docs: logits rel err %.2e\n", le);
	assert_true(le < TOL);
	model_zero_grad(g.m);
	if (model_mb_set_tokens(mb, g.ids, g.labels, 1, 1.0f / (float)want_nv, NULL, &e) ||
	    model_run_mb(g.m, mb, NULL, &e)) /* the positions hold */
		fail_msg("%s", e.msg);
	double lerr = fabs(model_mb_loss_sum(mb) / (double)want_nv - want_loss) / want_loss;
	print_message("gqa_docs: loss rel err %.2e\n", lerr);
	assert_int_equal(model_mb_valid(mb), want_nv);
	assert_true(lerr < TOL);
	for (int i = 0; i < model_num_tensors(g.m); i++) {
		const model_tensor *t = model_tensor_at(g.m, i);
		double r = rel_err(model_grads(g.m) + t->offset, wg + t->offset, t->numel);
		if (r >= TOL)
			print_message("gqa_docs: grad %s rel err %.2e\n", t->fqn, r);
		assert_true(r < TOL);
	}
	/* a row that does not start a document, or skips a position, is refused */
	pos[0] = 1;
	assert_int_equal(model_mb_set_positions(mb, pos, &e), -1);
	assert_non_null(strstr(e.msg, "positions[0][0] = 1"));
	pos[0] = 0, pos[3] = 4;
	assert_int_equal(model_mb_set_positions(mb, pos, &e), -1);
	assert_non_null(strstr(e.msg, "positions[0][3] = 4 after 2"));
	model_mb_free(mb);
	free(pos);
	free(want);
	free(logits);
	free(wg);
	golden_close(&g);
}

static void gqa_headdim16_seq13_batch2_matches_torch(void **s)
{
	(void)s;
	check_case("gqa");
}

static void headdim64_batch1_matches_torch(void **s)
{
	(void)s;
	check_case("hd64");
}

static void headdim128_tied_ffn_multiplier_matches_torch(void **s)
{
	(void)s;
	check_case("hd128");
}

static double num(json_t *c, const char *k)
{
	return json_number_value(json_object_get(c, k));
}

/* np.unique(np.linspace(0, n - 1, min(n, k)).astype(int64)), as the script. */
static size_t sample_index(size_t n, size_t k, size_t *idx)
{
	k = n < k ? n : k;
	double step = k > 1 ? (double)(n - 1) / (double)(k - 1) : 0;
	size_t m = 0;
	for (size_t i = 0; i < k; i++) {
		size_t j = i == k - 1 ? n - 1 : (size_t)((double)i * step);
		if (m == 0 || idx[m - 1] != j)
			idx[m++] = j;
	}
	return m;
}

/* torchtitan's debugmodel at full size: titan's seeded init (which the script
 * reimplements) must give the script's weights, and the forward and backward
 * its float64 logits and gradients; samples of each tensor are stored. */
static void debugmodel_with_titan_init_matches_torch(void **s)
{
	(void)s;
	titan_err e = {0};
	json_t *c = golden_case("debugmodel");
	assert_non_null(c);
	backend *be = backend_cpu_create(0, &e);
	model *m = model_create(be, flavor_find("debugmodel"), 0, &e);
	assert_non_null(m);
	uint64_t seed = (uint64_t)json_integer_value(json_object_get(c, "init_seed"));
	print_message("init seed %llu\n", (unsigned long long)seed);
	assert_int_equal(model_init(m, seed, 1, &e), 0);
	int b = (int)json_integer_value(json_object_get(c, "b"));
	int t = (int)json_integer_value(json_object_get(c, "t"));
	size_t n = (size_t)b * t, v = (size_t)model_args(m)->vocab_size;
	int32_t *ids = golden_read(c, "inputs", 4, n), *labels = golden_read(c, "labels", 4, n);
	assert_non_null(ids);
	assert_non_null(labels);
	size_t k = (size_t)json_integer_value(json_object_get(c, "sample_k")), total = 0;
	size_t *idx = malloc(sizeof(size_t) * (v * n > k ? v * n : k));
	for (int i = 0; i < model_num_tensors(m); i++)
		total += sample_index(model_tensor_at(m, i)->numel, k, idx);
	float *ws = golden_read(c, "weights_sample", 4, total);
	float *gs = golden_read(c, "grads_sample", 4, total);
	size_t lk = sample_index(n * v, (size_t)json_integer_value(json_object_get(c, "logits_sample_k")),
				 idx);
	float *lsamp = golden_read(c, "logits_sample", 4, lk);
	assert_non_null(ws);
	assert_non_null(gs);
	assert_non_null(lsamp);

	float *logits = malloc(n * v * sizeof(float)), *got = malloc(lk * sizeof(float));
	assert_int_equal(model_forward(m, ids, NULL, b, t, logits, NULL, NULL, &e), 0);
	for (size_t i = 0; i < lk; i++)
		got[i] = logits[idx[i]];
	double le = rel_err(got, lsamp, lk);
	print_message("debugmodel: logits rel err %.2e\n", le);
	assert_true(le < TOL);

	int64_t want_nv = json_integer_value(json_object_get(c, "n_valid"));
	double ls;
	int64_t nv;
	model_zero_grad(m);
	assert_int_equal(model_forward_backward(m, ids, labels, b, t, 1.0f / (float)want_nv, &ls,
						&nv, &e), 0);
	assert_int_equal(nv, want_nv);
	double want_loss = num(c, "loss"), lerr = fabs(ls / (double)nv - want_loss) / want_loss;
	print_message("debugmodel: loss %.9f vs torch %.9f, rel err %.2e\n", ls / (double)nv,
		      want_loss, lerr);
	assert_true(lerr < TOL);
	size_t at = 0;
	double worst_w = 0, worst_g = 0;
	float *wv = malloc(k * sizeof(float)), *gv = malloc(k * sizeof(float));
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *tt = model_tensor_at(m, i);
		size_t ns = sample_index(tt->numel, k, idx);
		for (size_t j = 0; j < ns; j++) {
			wv[j] = model_params(m)[tt->offset + idx[j]];
			gv[j] = model_grads(m)[tt->offset + idx[j]];
		}
		double we = rel_err(wv, ws + at, ns), ge = rel_err(gv, gs + at, ns);
		if (ge >= TOL || we > 1e-7)
			print_message("%s: weights rel err %.2e, grads %.2e\n", tt->fqn, we, ge);
		worst_w = we > worst_w ? we : worst_w;
		worst_g = ge > worst_g ? ge : worst_g;
		at += ns;
	}
	print_message("debugmodel: init vs script %.2e, worst gradient rel err %.2e\n", worst_w,
		      worst_g);
	assert_true(worst_w <= 1e-7); /* the same float32 values (libm may differ by an ulp) */
	assert_true(worst_g < TOL);
	free(wv), free(gv), free(idx), free(ws), free(gs), free(lsamp), free(logits), free(got);
	free(ids), free(labels);
	model_free(m);
	backend_free(be);
	json_decref(c);
}


/* The trainer's step: zero, micro-batches scaled by the step's valid tokens,
 * clip, AdamW with the scheduled lr. */
static void ten_adamw_steps_with_schedule_clip_and_accumulation_match_torch(void **s)
{
	(void)s;
	golden g;
	titan_err e = {0};
	json_t *c = golden_case("train");
	assert_non_null(c);
	int steps = (int)json_integer_value(json_object_get(c, "steps"));
	int micro = (int)json_integer_value(json_object_get(c, "micro_batches"));
	json_decref(c);
	golden_open(&g, "train", steps * micro);
	adamw_config ac;
	adamw_config_default(&ac);
	ac.lr = num(g.c, "lr");
	ac.beta1 = num(g.c, "beta1");
	ac.beta2 = num(g.c, "beta2");
	ac.eps = num(g.c, "eps");
	ac.weight_decay = num(g.c, "weight_decay");
	adamw *opt = adamw_create(g.be, model_num_params(g.m), &ac, &e);
	assert_non_null(opt);
	lr_schedule sched;
	assert_int_equal(lr_schedule_init(&sched, steps,
					  json_integer_value(json_object_get(g.c, "warmup_steps")),
					  -1, json_string_value(json_object_get(g.c, "decay_type")),
					  num(g.c, "min_lr_factor"), &e), 0);
	json_t *losses = json_object_get(g.c, "losses"), *norms = json_object_get(g.c, "grad_norms");
	size_t n = (size_t)g.b * g.t;
	for (int st = 0; st < steps; st++) {
		int64_t valid = 0;
		for (int mb = 0; mb < micro; mb++)
			for (size_t i = 0; i < n; i++)
				valid += g.labels[(size_t)(st * micro + mb) * n + i] != MODEL_IGNORE_INDEX;
		model_zero_grad(g.m);
		double total = 0;
		for (int mb = 0; mb < micro; mb++) {
			size_t off = (size_t)(st * micro + mb) * n;
			double ls;
			int64_t nv;
			if (model_forward_backward(g.m, g.ids + off, g.labels + off, g.b, g.t,
						   1.0f / (float)valid, &ls, &nv, &e))
				fail_msg("%s", e.msg);
			total += ls;
		}
		double loss = total / (double)valid;
		double norm = grad_clip_norm(g.be, model_grads(g.m), model_num_params(g.m),
					     num(g.c, "max_norm"));
		double lr = ac.lr * lr_schedule_factor(&sched, st);
		adamw_step(opt, model_params(g.m), model_grads(g.m), lr);
		double wl = json_number_value(json_array_get(losses, (size_t)st));
		double wn = json_number_value(json_array_get(norms, (size_t)st));
		double wlr = json_number_value(json_array_get(json_object_get(g.c, "lrs"), (size_t)st));
		print_message("step %d: loss %.8f torch %.8f (diff %.1e)  grad_norm %.6f torch %.6f  "
			      "lr %.6g torch %.6g\n", st + 1, loss, wl, fabs(loss - wl), norm, wn,
			      lr, wlr);
		assert_true(fabs(loss - wl) < TOL);
		assert_true(fabs(norm - wn) / wn < TOL);
		assert_true(fabs(lr - wlr) <= 1e-12 * wlr);
	}
	float *fin = golden_read(g.c, "final_weights", 4, model_num_params(g.m));
	assert_non_null(fin);
	double fe = rel_err(model_params(g.m), fin, model_num_params(g.m));
	print_message("final weights rel err %.2e\n", fe);
	assert_true(fe < 1e-4);
	free(fin);
	adamw_free(opt);
	golden_close(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(gqa_headdim16_seq13_batch2_matches_torch),
		cmocka_unit_test(documents_with_per_document_positions_match_torch),
		cmocka_unit_test(headdim64_batch1_matches_torch),
		cmocka_unit_test(headdim128_tied_ffn_multiplier_matches_torch),
		cmocka_unit_test(debugmodel_with_titan_init_matches_torch),
		cmocka_unit_test(ten_adamw_steps_with_schedule_clip_and_accumulation_match_torch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
