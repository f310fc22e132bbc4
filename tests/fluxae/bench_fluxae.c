/* bench_fluxae: titan's side of scripts/bench/fluxae_real.sh, the Flux
 * autoencoder at a real shape on the CPU backend (make bench builds it).
 *
 *   bench_fluxae DIR [float32|bfloat16]
 *
 * DIR as scripts/fluxae_real_torch.py writes it: config.json, ae.safetensors,
 * io.safetensors ("pixels" (b, c, h, w), "eps" (b, z, h/f, w/f)) and, when
 * the torch side has run, torch_DTYPE.safetensors ("moments", "z",
 * "decoded").  Encodes the pixels, samples with eps, decodes torch's latents
 * of the same dtype (titan's own without them); prints key=value: seconds of
 * loading and of each stage, the resident MiB after loading and the peak the
 * forward passes added (VmHWM, reset after loading, less that RSS), and the
 * max |err| / max |ref| of the three outputs against torch's of the same
 * dtype (rel) and, for bfloat16, against torch's float32 ones (f32_rel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "fluxae/fluxae.h"
#include "safetensors/safetensors.h"
#include "../support/testutil.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const float *tensor(const st_file *f, const char *name, int64_t *shape)
{
	const st_tensor *t = st_find(f, name);
	if (t == NULL || t->dtype != PTZ_F32 || t->ndim != 4) {
		fprintf(stderr, "bench_fluxae: no float32 (b, c, h, w) tensor '%s'\n", name);
		exit(1);
	}
	memcpy(shape, t->shape, 4 * sizeof *shape);
	return (const float *)t->data;
}

/* " KEY=m,z,d": the three outputs' errors against the reference file's. */
static void print_errs(const char *key, const st_file *f, const float *moments, const float *z,
		       const float *decoded, int64_t nm, int64_t nz, int64_t nd)
{
	int64_t s[4];
	printf(" %s=%.3g,%.3g,%.3g", key, test_max_rel(moments, tensor(f, "moments", s), nm),
	       test_max_rel(z, tensor(f, "z", s), nz), test_max_rel(decoded, tensor(f, "decoded", s), nd));
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: bench_fluxae DIR [float32|bfloat16]\n");
		return 2;
	}
	const char *dir = argv[1];
	int dt = argc == 3 ? be_dtype_parse(argv[2]) : BE_F32;
	char path[4096];
	titan_err e;
	flux_ae_config c;
	st_file io, ref, f32;
	int64_t ps[4], es[4], rs[4];
	double t0 = now();
	backend *be = backend_cpu_create(0, &e);
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (dt < 0 || be == NULL || flux_ae_config_read(&c, path, &e) < 0)
		goto fail;
	snprintf(path, sizeof path, "%s/ae.safetensors", dir);
	flux_ae *m = flux_ae_open(be, path, &c, (be_dtype)dt, &e);
	snprintf(path, sizeof path, "%s/io.safetensors", dir);
	if (m == NULL || st_open(&io, path, &e) < 0)
		goto fail;
	const char *dname = dt == BE_BF16 ? "bfloat16" : "float32";
	snprintf(path, sizeof path, "%s/torch_%s.safetensors", dir, dname);
	int have_ref = st_open(&ref, path, &e) == 0;
	snprintf(path, sizeof path, "%s/torch_float32.safetensors", dir);
	int have_f32 = dt == BE_BF16 && st_open(&f32, path, &e) == 0;
	const float *pixels = tensor(&io, "pixels", ps), *eps = tensor(&io, "eps", es);
	int64_t b = ps[0], h = ps[2], w = ps[3], hl = es[2], wl = es[3];
	int64_t nm = b * 2 * c.z_channels * hl * wl, nz = nm / 2, nd = b * c.out_ch * h * w;
	float *moments = malloc((size_t)nm * sizeof *moments);
	float *z = malloc((size_t)nz * sizeof *z), *decoded = malloc((size_t)nd * sizeof *decoded);
	double load_s = now() - t0, rss = test_status_kib("VmRSS:") / 1024.0;
	test_reset_hwm();
	t0 = now();
	if (flux_ae_encode(m, pixels, b, h, w, moments, &e) < 0)
		goto fail;
	double enc_s = now() - t0;
	flux_ae_sample(&c, dt == BE_BF16, moments, eps, b, hl, wl, z);
	t0 = now();
	if (flux_ae_decode(m, have_ref ? tensor(&ref, "z", rs) : z, b, hl, wl, decoded, &e) < 0)
		goto fail;
	double dec_s = now() - t0, peak = test_status_kib("VmHWM:") / 1024.0;
	printf("load_s=%.2f encode_s=%.2f decode_s=%.2f rss_mib=%.0f peak_added_mib=%.0f "
	       "threads=%d", load_s, enc_s, dec_s, rss, peak - rss, be->threads);
	if (have_ref)
		print_errs("rel", &ref, moments, z, decoded, nm, nz, nd);
	if (have_f32)
		print_errs("f32_rel", &f32, moments, z, decoded, nm, nz, nd);
	printf("\n");
	return 0;
fail:
	fprintf(stderr, "bench_fluxae: %s\n", dt < 0 ? "dtype: expected float32 or bfloat16" : e.msg);
	return 1;
}
