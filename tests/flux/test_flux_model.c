/* Tests of lib/flux against torchtitan 0.3.0's FluxModel on the flux-debug
 * flavor (258M parameters), one training step that
 * scripts/flux_model_golden.py wrote into tests/flux/golden/ (2 samples of
 * 12 image tokens and 7 text tokens): the loss within 1e-5 of torch's, the
 * prediction, and every parameter's gradient (256 values of each, and its
 * sum of squares) within float32 rounding, reported per group of tensors;
 * the flavors' numbers and the state dict's names and shapes; the latents'
 * packing; bad configs and batches refused with a line saying why.
 *
 * The weights and the large inputs are not committed: weights.json gives
 * each tensor's shape, offset and scale, which this program draws from the
 * counter-based generator the golden script shares (testutil.h). */
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
#include "flux/flux.h"
#include "safetensors/safetensors.h"
#include "../support/flux_golden.h"
#include "../support/golden_weights.h"
#include "../support/testutil.h"

#define GOLDEN "tests/flux/golden"
#define LOSS_TOL 1e-5
#define PRED_TOL 1e-5
#define GRAD_TOL 2e-5  /* a gradient's largest error over its largest value */
#define NORM_TOL 1e-5  /* its sum of squares, relative */

static backend *be;

static gw_set gw;        /* the parameters in state-dict order, then the inputs */
static uint64_t sseed;   /* the gradient samples' positions */
static int64_t n_samples;

static int setup(void **state)
{
	(void)state;
	return flux_golden_load(GOLDEN, &be, &gw, &sseed, &n_samples);
}

static int teardown(void **state)
{
	(void)state;
	flux_golden_free(be, &gw);
	return 0;
}

/* The input tensor named name (weights.json's input.*), drawn. */
static float *input(const char *name)
{
	for (size_t t = 0; t < gw.n; t++)
		if (strcmp(gw.t[t].name, name) == 0) {
			float *v = malloc(sizeof(float) * (size_t)gw.t[t].numel);
			gw_fill(&gw, t, v);
			return v;
		}
	fail_msg("weights.json: no input '%s'", name);
	return NULL;
}

static const st_tensor *io_get(const st_file *f, const char *name, ptz_dtype dt)
{
	const st_tensor *t = st_find(f, name);
	if (t == NULL)
		fail_msg("%s: no tensor '%s'", GOLDEN "/io.safetensors", name);
	assert_int_equal(t->dtype, dt);
	return t;
}

static void flavors_have_0_3_0s_numbers(void **state)
{
	(void)state;
	const flux_config *d = flux_flavor("flux-debug"), *dev = flux_flavor("flux-dev"),
			  *sch = flux_flavor("flux-schnell");
	assert_non_null(d);
	assert_non_null(dev);
	assert_non_null(sch);
	assert_null(flux_flavor("flux-pro"));
	assert_int_equal(d->hidden_size, 1536);
	assert_int_equal(d->num_heads, 12);
	assert_int_equal(d->depth, 2);
	assert_int_equal(d->depth_single_blocks, 2);
	assert_int_equal(d->context_in_dim, 4096);
	assert_int_equal(d->vec_in_dim, 768);
	assert_int_equal(d->axes_dim[0] + d->axes_dim[1] + d->axes_dim[2], 128);
	assert_int_equal(dev->hidden_size, 3072);
	assert_int_equal(dev->num_heads, 24);
	assert_int_equal(dev->depth, 19);
	assert_int_equal(dev->depth_single_blocks, 38);
	assert_int_equal(sch->depth_single_blocks, 38);
	titan_err e;
	for (const flux_config *c = d; c != NULL; c = c == d ? dev : c == dev ? sch : NULL)
		assert_int_equal(flux_config_check(c, &e), 0);
}

/* The refusals' list of flavors is the table's, cut short to the buffer. */
static void flavor_names_list_the_table(void **state)
{
	(void)state;
	char names[128], small[12];
	flux_flavor_names(names, sizeof names);
	assert_string_equal(names, "flux-dev, flux-schnell, flux-debug, flux-tiny");
	flux_flavor_names(small, sizeof small);
	assert_string_equal(small, "flux-dev, f");
}

/* The model's tensors are the state dict's, in its order, with its shapes. */
static void parameters_are_the_state_dicts(void **state)
{
	(void)state;
	titan_err e;
	flux_model *m = flux_model_create(be, flux_flavor("flux-debug"), &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	int np = flux_param_count(m);
	assert_int_equal(np, 80);
	assert_true((size_t)np < gw.n);
	int64_t total = 0;
	for (int i = 0; i < np; i++) {
		const flux_param *p = flux_param_at(m, i);
		assert_string_equal(p->name, gw.t[i].name);
		assert_int_equal(p->ndim, gw.t[i].ndim);
		for (int d = 0; d < p->ndim; d++)
			assert_int_equal(p->shape[d], gw.t[i].shape[d]);
		total += p->numel;
	}
	assert_true(strncmp(gw.t[np].name, "input.", 6) == 0);
	assert_int_equal(total, 258286144);
	assert_ptr_equal(flux_param_find(m, "final_layer.linear.bias"), flux_param_at(m, np - 3));
	assert_null(flux_param_find(m, "guidance_in.in_layer.weight"));
	flux_model_free(m);
}

/* Tensor groups for the report: the embedders, each kind of block, the final layer. */
static int group_of(const char *name)
{
	if (strncmp(name, "double_blocks.", 14) == 0)
		return 1;
	if (strncmp(name, "single_blocks.", 14) == 0)
		return 2;
	if (strncmp(name, "final_layer.", 12) == 0)
		return 3;
	return 0;
}

/* The largest error of tensor t's sampled gradient values over their largest
 * value; its sum of squares' relative error into *norm_err. */
static double grad_error(const flux_param *p, size_t t, const float *ref, double ref_sumsq,
			 double *norm_err)
{
	int64_t k = p->numel <= n_samples ? p->numel : n_samples;
	double err = 0, big = 0, ss = 0;
	for (int64_t j = 0; j < p->numel; j++)
		ss += (double)p->g[j] * p->g[j];
	for (int64_t j = 0; j < k; j++) {
		int64_t idx = p->numel <= n_samples
				      ? j
				      : (int64_t)(test_counter_bits(sseed, t, (uint64_t)j) %
						  (uint64_t)p->numel);
		err = fmax(err, fabs((double)p->g[idx] - ref[j]));
		big = fmax(big, fabs((double)ref[j]));
	}
	*norm_err = fabs(ss - ref_sumsq) / ref_sumsq;
	return big > 0 ? err / big : err;
}

static void step_matches_torch(void **state)
{
	(void)state;
	titan_err e;
	st_file io;
	if (st_open(&io, GOLDEN "/io.safetensors", &e) < 0)
		fail_msg("%s", e.msg);
	const st_tensor *tt = io_get(&io, "t", PTZ_F32), *ii = io_get(&io, "img_ids", PTZ_F32),
			*ti = io_get(&io, "txt_ids", PTZ_F32), *pr = io_get(&io, "pred", PTZ_F32),
			*lo = io_get(&io, "loss", PTZ_F32),
			*gs = io_get(&io, "grad_samples", PTZ_F32),
			*gq = io_get(&io, "grad_sumsq", PTZ_F64);
	flux_model *m = flux_model_create(be, flux_flavor("flux-debug"), &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	int np = flux_param_count(m);
	for (int i = 0; i < np; i++)
		gw_fill(&gw, (size_t)i, flux_param_at(m, i)->w);
	flux_batch in = {.b = ii->shape[0], .li = ii->shape[1], .lt = ti->shape[1],
			 .c_img = 64, .c_txt = 4096, .c_vec = 768,
			 .t = (const float *)tt->data, .img_ids = (const float *)ii->data,
			 .txt_ids = (const float *)ti->data};
	float *x = input("input.x"), *noise = input("input.noise"), *txt = input("input.txt"),
	      *y = input("input.y");
	in.x = x;
	in.noise = noise;
	in.txt = txt;
	in.y = y;
	/* the image ids are create_position_encoding_for_latents' of an 8 x 6 latent */
	float ids[2 * 12 * 3];
	assert_int_equal(in.b * in.li * 3, 2 * 12 * 3);
	flux_latent_ids(ids, in.b, 8, 6);
	assert_memory_equal(ids, ii->data, sizeof ids);

	int64_t npred = in.b * in.li * 64;
	float *pred = malloc(sizeof(float) * (size_t)npred), loss = 0;
	for (int64_t j = 0; j < npred; j++)
		pred[j] = NAN; /* every value must be written */
	if (flux_step(m, &in, 1, &loss, pred, &e) < 0)
		fail_msg("%s", e.msg);
	float want = *(const float *)lo->data;
	double lerr = fabs((double)loss - want) / fabs((double)want);
	printf("# loss %.9g, torch %.9g, relative error %.3g\n", loss, want, lerr);
	assert_true(lerr <= LOSS_TOL);
	double perr = test_max_rel_print("prediction", pred, (const float *)pr->data, npred);
	assert_true(perr <= PRED_TOL);

	static const char *groups[4] = {"embedders", "double blocks", "single blocks",
					"final layer"};
	double gmax[4] = {0}, nmax[4] = {0};
	const char *worst[4] = {0};
	const float *ref = (const float *)gs->data;
	const double *ref_ss = (const double *)gq->data;
	assert_int_equal(gs->shape[0], np);
	assert_int_equal(gs->shape[1], n_samples);
	for (int i = 0; i < np; i++) {
		const flux_param *p = flux_param_at(m, i);
		double nerr, gerr = grad_error(p, (size_t)i, ref + i * n_samples, ref_ss[i], &nerr);
		int g = group_of(p->name);
		if (gerr > gmax[g]) {
			gmax[g] = gerr;
			worst[g] = p->name;
		}
		nmax[g] = fmax(nmax[g], nerr);
		if (gerr > GRAD_TOL || nerr > NORM_TOL)
			printf("# %s: gradient error %.3g, sum of squares %.3g\n", p->name, gerr,
			       nerr);
	}
	for (int g = 0; g < 4; g++) {
		printf("# gradients, %s: max relative error %.3g (%s), sum of squares %.3g\n",
		       groups[g], gmax[g], worst[g] ? worst[g] : "-", nmax[g]);
		assert_true(gmax[g] <= GRAD_TOL);
		assert_true(nmax[g] <= NORM_TOL);
	}
	/* a second step accumulates: every gradient doubles (up to rounding) */
	const flux_param *fl = flux_param_find(m, "final_layer.linear.bias");
	float before = fl->g[0];
	if (flux_step(m, &in, 1, &loss, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(fabs(fl->g[0] - 2 * before) <= 1e-6 * fabs(before));
	flux_zero_grad(m);
	assert_true(fl->g[0] == 0.0f);
	free(pred);
	free(x);
	free(noise);
	free(txt);
	free(y);
	flux_model_free(m);
	st_close(&io);
}

static void latents_pack_as_utils_does(void **state)
{
	(void)state;
	/* z (1, 2, 2, 4): patch (0, x) holds channel 0's 2x2 then channel 1's */
	float z[16], out[16], ids[6];
	for (int i = 0; i < 16; i++)
		z[i] = (float)i;
	flux_pack_latents(out, z, 1, 2, 2, 4);
	const float want[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
	assert_memory_equal(out, want, sizeof want);
	flux_latent_ids(ids, 1, 2, 4);
	const float wid[6] = {0, 0, 0, 0, 0, 1};
	assert_memory_equal(ids, wid, sizeof wid);
}

static void refused(int rc, const titan_err *e, const char *want)
{
	assert_int_equal(rc, -1);
	printf("# %s\n", e->msg);
	assert_null(strchr(e->msg, '\n'));
	if (strstr(e->msg, want) == NULL)
		fail_msg("'%s' does not say '%s'", e->msg, want);
}

static void bad_configs_and_batches_are_refused(void **state)
{
	(void)state;
	titan_err e;
	flux_config c = *flux_flavor("flux-debug");
	c.num_heads = 7;
	refused(flux_config_check(&c, &e), &e, "not divisible by num_heads 7");
	c = *flux_flavor("flux-debug");
	c.axes_dim[2] = 54;
	refused(flux_config_check(&c, &e), &e, "axes_dim sums to 126, the head dimension is 128");
	c.axes_dim[2] = 55;
	refused(flux_config_check(&c, &e), &e, "axes_dim[2] = 55");
	c = *flux_flavor("flux-debug");
	c.depth = 0;
	refused(flux_model_create(be, &c, &e) ? 0 : -1, &e, "depth = 0");

	/* a tiny model of the same kind: batches are checked before any memory */
	c = *flux_flavor("flux-debug");
	c.hidden_size = 128;
	c.num_heads = 1;
	c.context_in_dim = 32;
	c.vec_in_dim = 16;
	c.depth = c.depth_single_blocks = 1;
	flux_model *m = flux_model_create(be, &c, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	float v[4096] = {0}, loss;
	flux_batch ok = {.b = 1, .li = 4, .lt = 2, .c_img = 64, .c_txt = 32, .c_vec = 16,
			 .x = v, .noise = v, .img_ids = v, .txt = v, .txt_ids = v, .t = v, .y = v};
	const struct {
		flux_batch bad;
		const char *says;
	} cases[] = {
		{{.b = 1, .li = 4, .lt = 2, .c_img = 16, .c_txt = 32, .c_vec = 16},
		 "image latents (x, noise): 16 values per row, the model's in_channels is 64"},
		{{.b = 1, .li = 4, .lt = 2, .c_img = 64, .c_txt = 4096, .c_vec = 16},
		 "context_in_dim is 32"},
		{{.b = 1, .li = 4, .lt = 2, .c_img = 64, .c_txt = 32, .c_vec = 768},
		 "vec_in_dim is 16"},
		{{.b = 0, .li = 4, .lt = 2, .c_img = 64, .c_txt = 32, .c_vec = 16}, "batch size 0"},
		{{.b = 1, .li = 4, .lt = 0, .c_img = 64, .c_txt = 32, .c_vec = 16}, "text tokens 0"},
		{{.b = 1 << 12, .li = 4096, .lt = 1, .c_img = 64, .c_txt = 32, .c_vec = 16},
		 "more than 2^24"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		flux_batch bad = cases[i].bad;
		bad.x = bad.noise = bad.img_ids = bad.txt = bad.txt_ids = bad.t = bad.y = v;
		refused(flux_step(m, &bad, 1, &loss, NULL, &e), &e, cases[i].says);
	}
	flux_batch bad = ok;
	bad.y = NULL;
	refused(flux_step(m, &bad, 1, &loss, NULL, &e), &e, "missing");
	/* the good batch runs: zero inputs, zero weights never set: only its
	 * return code matters here */
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		memset(p->w, 0, sizeof(float) * (size_t)p->numel);
	}
	assert_int_equal(flux_step(m, &ok, 1, &loss, NULL, &e), 0);
	assert_true(loss == 0.0f);
	flux_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flavors_have_0_3_0s_numbers),
		cmocka_unit_test(flavor_names_list_the_table),
		cmocka_unit_test(parameters_are_the_state_dicts),
		cmocka_unit_test(latents_pack_as_utils_does),
		cmocka_unit_test(bad_configs_and_batches_are_refused),
		cmocka_unit_test(step_matches_torch),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
