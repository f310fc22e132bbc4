/* The Flux transformer (lib/flux) on the CUDA backend against the same model
 * on the CPU backend: one training step (forward, rectified-flow loss,
 * backward) of a reduced flux-debug (hidden 128, 4 heads of 32, 2 double and
 * 2 single blocks) on 2 samples of 12 image and 7 text tokens, the same drawn
 * weights and batch on both.  The loss and the prediction within TOL_STEP of
 * the CPU's, every parameter's gradient within TOL_GRAD (each relative to
 * its tensor's largest value): the backends' float32 sums run in other
 * orders.  Prints "result flux NAME VALUE" lines for scripts/gpu/check.sh's
 * table.  Without a GPU the test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flux/flux.h"
/* titan's attention kernels: cuDNN may refuse the tiny heads */
#define GPU_TEST_ATTENTION BACKEND_CUDA_ATTN_REFERENCE
#define GPU_TEST_TWO_BACKENDS
#include "gpu_test.h"

#define TOL_STEP 1e-5
#define TOL_GRAD 1e-4

static const flux_config tiny = {
	.name = "flux-tiny", .in_channels = 16, .out_channels = 16, .vec_in_dim = 32,
	.context_in_dim = 48, .hidden_size = 128, .num_heads = 4, .depth = 2,
	.depth_single_blocks = 2, .mlp_ratio = 4.0, .axes_dim = {8, 12, 12}, .theta = 10000,
	.qkv_bias = 1};

enum { B = 2, LI = 12, LT = 7 };

/* n floats uniform in [-s, s). */
static float *draw(size_t n, double s)
{
	float *p = malloc(n * sizeof *p);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(s * urand());
	return p;
}

/* The model on be with the weights drawn from seed (the same on each
 * backend): linears uniform in +-1/sqrt(fan in), norms' weights 1 +- 0.1. */
static flux_model *model_on(backend *be, uint64_t s)
{
	titan_err e;
	flux_model *m = flux_model_create(be, &tiny, &e);
	if (m == NULL)
		fail_msg("flux on %s: %s", be->ops->name, e.msg);
	seed(s);
	for (int i = 0; i < flux_param_count(m); i++) {
		const flux_param *p = flux_param_at(m, i);
		int norm = p->ndim == 1 && strstr(p->name, "norm") != NULL;
		double scale = p->ndim == 2 ? 1.0 / sqrt((double)p->shape[1]) : norm ? 0.1 : 0.05;
		float *w = draw((size_t)p->numel, scale);
		for (int64_t j = 0; norm && j < p->numel; j++)
			w[j] += 1.0f;
		be->ops->copy(be, p->w, w, (size_t)p->numel * sizeof(float), BACKEND_H2D);
		free(w);
	}
	sync_ok(be);
	return m;
}

typedef struct batch_data {
	float *x, *noise, *img_ids, *txt, *txt_ids, *t, *y;
} batch_data;

static flux_batch batch_draw(batch_data *d)
{
	d->x = draw(B * LI * 16, 1.0), d->noise = draw(B * LI * 16, 1.0);
	d->txt = draw(B * LT * 48, 1.0), d->y = draw(B * 32, 1.0), d->t = draw(B, 0.5);
	for (int i = 0; i < B; i++)
		d->t[i] += 0.5f; /* in [0, 1) */
	d->img_ids = calloc(B * LI * 3, sizeof(float));
	d->txt_ids = calloc(B * LT * 3, sizeof(float));
	assert_true(d->img_ids && d->txt_ids);
	flux_latent_ids(d->img_ids, B, 6, 8); /* 3 x 4 patches */
	return (flux_batch){.b = B, .li = LI, .lt = LT, .c_img = 16, .c_txt = 48, .c_vec = 32,
			    .x = d->x, .noise = d->noise, .img_ids = d->img_ids, .txt = d->txt,
			    .txt_ids = d->txt_ids, .t = d->t, .y = d->y};
}

static float *download(backend *be, const float *p, int64_t n)
{
	float *h = malloc((size_t)n * sizeof *h);
	assert_non_null(h);
	be->ops->copy(be, h, p, (size_t)n * sizeof *h, BACKEND_D2H);
	sync_ok(be);
	return h;
}

static void step_on(flux_model *m, const char *where, const flux_batch *in, float *loss,
		    float *pred)
{
	titan_err e;
	if (flux_step(m, in, 1, loss, pred, &e) < 0)
		fail_msg("flux step on %s: %s", where, e.msg);
}

static void step_on_cuda_matches_the_cpu(void **state)
{
	(void)state;
	need_gpu();
	flux_model *mc = model_on(cpu, 29), *mg = model_on(gpu, 29);
	seed(30);
	batch_data d;
	flux_batch in = batch_draw(&d);
	int64_t np = B * LI * 16;
	float lc, lg, *pc = malloc((size_t)np * sizeof *pc), *pg = malloc((size_t)np * sizeof *pg);
	assert_true(pc && pg);
	step_on(mc, "cpu", &in, &lc, pc);
	step_on(mg, "cuda", &in, &lg, pg);
	double loss_err = fabs((double)lg - lc) / fabs((double)lc), pred_err = rel_err_f(pg, pc, np);
	print_message("  loss cpu %.8g cuda %.8g: rel err %.2e; prediction %.2e (bound %.1e)\n",
		      lc, lg, loss_err, pred_err, TOL_STEP);
	double worst = -1;
	const char *worst_name = "";
	for (int i = 0; i < flux_param_count(mc); i++) {
		const flux_param *a = flux_param_at(mc, i), *b = flux_param_at(mg, i);
		float *gc = download(cpu, a->g, a->numel), *gg = download(gpu, b->g, b->numel);
		double err = rel_err_f(gg, gc, a->numel);
		if (!(err <= worst))
			worst = err, worst_name = a->name;
		free(gc), free(gg);
	}
	print_message("  gradients: max rel err %.2e (%s), bound %.1e\n", worst, worst_name,
		      TOL_GRAD);
	print_message("result flux step_loss_cuda_vs_cpu %.3g\n", loss_err);
	print_message("result flux step_grad_cuda_vs_cpu %.3g\n", worst);
	if (!(loss_err <= TOL_STEP && pred_err <= TOL_STEP))
		fail_msg("flux step on CUDA: loss %.3e, prediction %.3e from the CPU's, bound %.1e",
			 loss_err, pred_err, TOL_STEP);
	if (!(worst <= TOL_GRAD))
		fail_msg("flux step on CUDA: gradient of %s %.3e from the CPU's, bound %.1e",
			 worst_name, worst, TOL_GRAD);
	free(pc), free(pg);
	free(d.x), free(d.noise), free(d.img_ids), free(d.txt), free(d.txt_ids), free(d.t);
	free(d.y);
	flux_model_free(mc);
	flux_model_free(mg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(step_on_cuda_matches_the_cpu),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
