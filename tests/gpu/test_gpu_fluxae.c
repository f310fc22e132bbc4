/* FLUX's autoencoder (lib/fluxae) on the CUDA backend against the same model
 * on the CPU backend and against torchtitan's, on the tiny config of
 * tests/fluxae/golden (scripts/fluxae_golden.py; the weights drawn from its
 * weights.json by tests/support/golden_weights): the encoder's moments and the
 * decoded pixels, the float32 model within 1e-5 of the CPU's outputs and of
 * torch's (relative to the largest value), the bf16 model (bf16 weights and
 * activations on both backends) within tests/fluxae's bounds of the CPU's
 * bf16 outputs and of torch's bf16 model: the two backends round the same
 * tensors, their float32 sums in other orders flip some roundings.  Prints
 * "result fluxae NAME VALUE" lines for scripts/gpu/check.sh's table.
 * Without a GPU every test reports skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fluxae/fluxae.h"
#include "safetensors/safetensors.h"
#define GPU_TEST_TWO_BACKENDS
#include "gpu_test.h"
#include "../support/golden_weights.h"

#define GOLDEN "tests/fluxae/golden"
#define TOL_AE_F32 1e-5
/* tests/fluxae's bounds of the bf16 model against torch's bf16 model */
#define TOL_MOMENTS_BF16 5e-2
#define TOL_DECODED_BF16 2e-2

/* The golden's drawn weights written to path as float32. */
static void write_weights(const char *path)
{
	titan_err e;
	gw_set w;
	if (gw_load(&w, GOLDEN "/weights.json", &e) < 0)
		fail_msg("%s", e.msg);
	st_item *items = calloc(w.n, sizeof *items);
	float **data = calloc(w.n, sizeof *data);
	assert_true(items && data);
	for (size_t t = 0; t < w.n; t++) {
		data[t] = malloc((size_t)w.t[t].numel * sizeof **data);
		assert_non_null(data[t]);
		gw_fill(&w, t, data[t]);
		items[t] = (st_item){.name = w.t[t].name, .dtype = PTZ_F32, .ndim = w.t[t].ndim,
				     .data = data[t]};
		memcpy(items[t].shape, w.t[t].shape, sizeof w.t[t].shape);
	}
	if (st_write(path, items, w.n, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	for (size_t t = 0; t < w.n; t++)
		free(data[t]);
	free(data), free(items);
	gw_free(&w);
}

/* Tensor name of the golden io.safetensors as float32, and its numel. */
static const float *io_get(const st_file *io, const char *name, int64_t *n)
{
	const st_tensor *t = st_find(io, name);
	if (t == NULL)
		fail_msg("%s: no tensor '%s'", GOLDEN "/io.safetensors", name);
	*n = (int64_t)((t->end - t->begin) / sizeof(float));
	return (const float *)t->data;
}

/* Encoding the golden pixels and decoding the golden latents of the same
 * precision with the weights at path on be in dt: the moments and pixels,
 * poisoned first, which the caller frees. */
static void run(backend *be, const char *path, const flux_ae_config *c, be_dtype dt,
		const st_file *io, float **moments, float **decoded)
{
	titan_err e;
	const st_tensor *p = st_find(io, "pixels"), *z = st_find(io, "z");
	assert_non_null(p);
	assert_non_null(z);
	int64_t n, nm, nd;
	const float *pixels = io_get(io, "pixels", &n);
	const float *zin = io_get(io, dt == BE_BF16 ? "z_bf16" : "z", &n);
	io_get(io, "moments", &nm);
	io_get(io, "decoded", &nd);
	*moments = malloc((size_t)nm * sizeof **moments);
	*decoded = malloc((size_t)nd * sizeof **decoded);
	assert_true(*moments && *decoded);
	for (int64_t i = 0; i < nm; i++)
		(*moments)[i] = NAN;
	for (int64_t i = 0; i < nd; i++)
		(*decoded)[i] = NAN;
	flux_ae *m = flux_ae_open(be, path, c, dt, &e);
	if (m == NULL)
		fail_msg("fluxae on %s: %s", be->ops->name, e.msg);
	if (flux_ae_encode(m, pixels, p->shape[0], p->shape[2], p->shape[3], *moments, &e) < 0 ||
	    flux_ae_decode(m, zin, z->shape[0], z->shape[2], z->shape[3], *decoded, &e) < 0)
		fail_msg("fluxae on %s: %s", be->ops->name, e.msg);
	flux_ae_free(m);
}

/* One output of both backends: the CUDA one against the CPU's and torch's. */
static void compare(const char *name, const char *tn, const float *g, const float *c,
		    const float *ref, int64_t n, double tol)
{
	double vs_cpu = rel_err_f(g, c, n), vs_torch = rel_err_f(g, ref, n);
	print_message("  %-8s %-4s cuda vs cpu %.2e, vs torch %.2e (cpu %.2e), bound %.1e\n", name,
		      tn, vs_cpu, vs_torch, rel_err_f(c, ref, n), tol);
	print_message("result fluxae %s_%s_cuda_vs_cpu %.3g\n", name, tn, vs_cpu);
	if (!(vs_cpu <= tol && vs_torch <= tol))
		fail_msg("%s (%s) on the CUDA backend: %.3e from the CPU's, %.3e from torch's, "
			 "bound %.1e", name, tn, vs_cpu, vs_torch, tol);
}

static void autoencoder_on_cuda_matches_the_cpu_and_torch(void **state)
{
	(void)state;
	need_gpu();
	titan_err e;
	flux_ae_config c;
	st_file io;
	if (flux_ae_config_read(&c, GOLDEN "/config.json", &e) < 0 ||
	    st_open(&io, GOLDEN "/io.safetensors", &e) < 0)
		fail_msg("%s", e.msg);
	const char *tmp = getenv("TMPDIR");
	char path[512];
	snprintf(path, sizeof path, "%s/titan-gpu-fluxae-%d.safetensors", tmp ? tmp : "/tmp",
		 (int)getpid());
	write_weights(path);
	for (int bf = 0; bf < 2; bf++) {
		be_dtype dt = bf ? BE_BF16 : BE_F32;
		const char *tn = bf ? "bf16" : "f32";
		float *cm, *cd, *gm, *gd;
		int64_t nm, nd;
		const float *rm = io_get(&io, bf ? "moments_bf16" : "moments", &nm);
		const float *rd = io_get(&io, bf ? "decoded_bf16" : "decoded", &nd);
		run(cpu, path, &c, dt, &io, &cm, &cd);
		run(gpu, path, &c, dt, &io, &gm, &gd);
		compare("moments", tn, gm, cm, rm, nm, bf ? TOL_MOMENTS_BF16 : TOL_AE_F32);
		compare("decoded", tn, gd, cd, rd, nd, bf ? TOL_DECODED_BF16 : TOL_AE_F32);
		free(cm), free(cd), free(gm), free(gd);
	}
	unlink(path);
	st_close(&io);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(autoencoder_on_cuda_matches_the_cpu_and_torch),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
