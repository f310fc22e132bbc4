/* Tests of lib/fluxae against torchtitan 0.3.0's Flux AutoEncoder, on the tiny
 * config and inputs scripts/fluxae_golden.py wrote into tests/fluxae/golden/
 * (ch 32, ch_mult (1, 2, 2), num_res_blocks 2, z_channels 4; 2 images of
 * 16 x 12): the encoder's moments, the sampled latents for a given eps and the
 * decoded pixels in float32 within 1e-5 of the largest reference value; the
 * model cast to bfloat16 (torchtitan's autoencoder under FSDP) against
 * torch's bf16 model within bf16 bounds; chunked convs and attention the same
 * as whole ones; the weights from BF16 storage; bad checkpoints, configs and
 * sizes refused with a line naming what is wrong.
 *
 * The weights are not committed: weights.json names each tensor, its shape
 * and the offset and scale of its values, which this program draws from the
 * counter-based generator the golden script describes and writes as an
 * ae.safetensors of its own (as a hostile case needs, with one tensor left
 * out, misshapen or of another type). */
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
#include "core/bf16.h"
#include "fluxae/fluxae.h"
#include "safetensors/safetensors.h"
#include "../support/golden_weights.h"
#include "../support/testutil.h"

#define GOLDEN "tests/fluxae/golden"
#define TOL 1e-5

static backend *be;

/* weights.json: the tensors in state_dict order. */
static gw_set gw;
static flux_ae_config cfg;

static int setup(void **state)
{
	titan_err e;
	be = backend_cpu_create(0, &e);
	if (be == NULL) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	if (gw_load(&gw, GOLDEN "/weights.json", &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	if (flux_ae_config_read(&cfg, GOLDEN "/config.json", &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return test_tmpdir_create(state);
}

static int teardown(void **state)
{
	gw_free(&gw);
	backend_free(be);
	return test_tmpdir_remove(state);
}

/* How write_weights spoils the file for a hostile case. */
typedef struct spoil {
	const char *name;   /* the tensor spoiled, or NULL */
	int drop;           /* left out */
	int64_t last_dim;   /* > 0: its last dimension this instead */
	ptz_dtype dtype;    /* not PTZ_NONE: stored in this type */
} spoil;

/* The golden weights as PATH, every tensor stored in dtype (F32 or BF16). */
static const char *write_weights(const char *file, ptz_dtype dtype, spoil sp)
{
	static char path[512];
	snprintf(path, sizeof path, "%s", test_path(file));
	st_item *items = calloc(gw.n, sizeof *items);
	void **data = calloc(gw.n, sizeof *data);
	size_t n = 0;
	for (size_t t = 0; t < gw.n; t++) {
		int hit = sp.name != NULL && strcmp(sp.name, gw.t[t].name) == 0;
		if (hit && sp.drop)
			continue;
		st_item *it = &items[n];
		*it = (st_item){.name = gw.t[t].name, .dtype = dtype, .ndim = gw.t[t].ndim};
		memcpy(it->shape, gw.t[t].shape, sizeof gw.t[t].shape);
		if (hit && sp.last_dim > 0)
			it->shape[it->ndim - 1] = sp.last_dim;
		if (hit && sp.dtype != PTZ_NONE)
			it->dtype = sp.dtype;
		size_t numel = 1;
		for (int d = 0; d < it->ndim; d++)
			numel *= (size_t)it->shape[d];
		data[n] = calloc(numel, 8);
		for (size_t j = 0; j < numel; j++) {
			float v = gw_value(&gw, t, j);
			if (it->dtype == PTZ_F32)
				((float *)data[n])[j] = v;
			else if (it->dtype == PTZ_BF16)
				((uint16_t *)data[n])[j] = bf16_from_f32(v);
			else if (it->dtype == PTZ_F64)
				((double *)data[n])[j] = v;
		}
		it->data = data[n++];
	}
	titan_err e;
	if (st_write(path, items, n, NULL, &e) < 0)
		fail_msg("%s", e.msg);
	for (size_t i = 0; i < n; i++)
		free(data[i]);
	free(data);
	free(items);
	return path;
}

static flux_ae *open_model(const char *path, be_dtype dt)
{
	titan_err e;
	flux_ae *m = flux_ae_open(be, path, &cfg, dt, &e);
	if (m == NULL)
		fail_msg("%s", e.msg);
	return m;
}

/* The golden io.safetensors. */
typedef struct io_file {
	st_file f;
	int64_t b, h, w, hl, wl;
} io_file;

static void io_open(io_file *io)
{
	titan_err e;
	if (st_open(&io->f, GOLDEN "/io.safetensors", &e) < 0)
		fail_msg("%s", e.msg);
	const st_tensor *p = st_find(&io->f, "pixels"), *z = st_find(&io->f, "z");
	assert_non_null(p);
	assert_non_null(z);
	io->b = p->shape[0];
	io->h = p->shape[2];
	io->w = p->shape[3];
	io->hl = z->shape[2];
	io->wl = z->shape[3];
}

/* Tensor name of the golden as float32, and its numel. */
static const float *io_get(const io_file *io, const char *name, int64_t *n)
{
	const st_tensor *t = st_find(&io->f, name);
	if (t == NULL)
		fail_msg("%s: no tensor '%s'", GOLDEN "/io.safetensors", name);
	assert_int_equal(t->dtype, PTZ_F32);
	*n = (int64_t)((t->end - t->begin) / sizeof(float));
	return (const float *)t->data;
}

static float *poisoned(int64_t n)
{
	float *p = malloc((size_t)n * sizeof *p);
	for (int64_t i = 0; i < n; i++)
		p[i] = NAN; /* every value must be written */
	return p;
}

/* The three outputs of model m on the golden inputs: moments, z (sampled
 * from the golden moments, so that each stage is checked alone) and the
 * decode of the golden z of the same precision. */
typedef struct outs {
	float *moments, *z, *decoded;
	int64_t nm, nz, nd;
} outs;

static void run_model(flux_ae *m, const io_file *io, int bf16, outs *o)
{
	titan_err e;
	int64_t n;
	const float *pixels = io_get(io, "pixels", &n), *eps = io_get(io, "eps", &n);
	const float *moments = io_get(io, bf16 ? "moments_bf16" : "moments", &o->nm);
	const float *z = io_get(io, bf16 ? "z_bf16" : "z", &o->nz);
	io_get(io, "decoded", &o->nd);
	o->moments = poisoned(o->nm);
	o->z = poisoned(o->nz);
	o->decoded = poisoned(o->nd);
	if (flux_ae_encode(m, pixels, io->b, io->h, io->w, o->moments, &e) < 0)
		fail_msg("%s", e.msg);
	flux_ae_sample(flux_ae_config_of(m), bf16, moments, eps, io->b, io->hl, io->wl, o->z);
	if (flux_ae_decode(m, z, io->b, io->hl, io->wl, o->decoded, &e) < 0)
		fail_msg("%s", e.msg);
}

static void outs_free(outs *o)
{
	free(o->moments);
	free(o->z);
	free(o->decoded);
}

static void float32_model_matches_torch(void **state)
{
	(void)state;
	io_file io;
	io_open(&io);
	flux_ae *m = open_model(write_weights("ae.safetensors", PTZ_F32, (spoil){0}), BE_F32);
	outs o;
	run_model(m, &io, 0, &o);
	int64_t n;
	assert_true(test_max_rel_print("moments", o.moments, io_get(&io, "moments", &n), o.nm) <= TOL);
	assert_true(test_max_rel_print("sampled z", o.z, io_get(&io, "z", &n), o.nz) <= TOL);
	assert_true(test_max_rel_print("decoded", o.decoded, io_get(&io, "decoded", &n), o.nd) <= TOL);
	outs_free(&o);
	flux_ae_free(m);
	st_close(&io.f);
}

/* One output of the bf16 model against torch's bf16 model: within tol of
 * it, and as far from the float32 reference as torch's bf16 is, within a
 * factor 4 either way. */
static void bf16_check(const io_file *io, const char *name, const float *got, int64_t n,
		       double tol)
{
	char key[64], what[128];
	int64_t k;
	snprintf(key, sizeof key, "%s_bf16", name);
	const float *ref = io_get(io, key, &k), *f32 = io_get(io, name, &k);
	snprintf(what, sizeof what, "%s bf16 vs torch bf16", name);
	double err = test_max_rel_print(what, got, ref, n);
	snprintf(what, sizeof what, "%s bf16 vs float32", name);
	double ours = test_max_rel_print(what, got, f32, n);
	snprintf(what, sizeof what, "%s torch bf16 vs float32", name);
	double torchs = test_max_rel_print(what, ref, f32, n);
	assert_true(err <= tol);
	assert_true(ours <= 4 * torchs && torchs <= 4 * ours);
}

/* Two bf16 computations differ by about as much as each differs from the
 * float32 one: measured (torch 2.15) moments 1.3e-2 from torch's bf16, which
 * is 1.4e-2 from float32 (titan 1.8e-2); decoded pixels 4.8e-3, 2.1e-2
 * (2.1e-2).  The tolerances are about 4x those. */
static void bf16_model_matches_torch_bf16(void **state)
{
	(void)state;
	io_file io;
	io_open(&io);
	flux_ae *m = open_model(write_weights("ae.safetensors", PTZ_F32, (spoil){0}), BE_BF16);
	outs o;
	run_model(m, &io, 1, &o);
	bf16_check(&io, "moments", o.moments, o.nm, 5e-2);
	bf16_check(&io, "decoded", o.decoded, o.nd, 2e-2);
	/* sampling alone is elementwise: the bf16 ops torch stores, the same bits
	 * but where an exp differs by an ulp across a rounding boundary */
	int64_t n;
	const float *zref = io_get(&io, "z_bf16", &n);
	int64_t diff = 0;
	for (int64_t i = 0; i < n; i++)
		diff += o.z[i] != zref[i];
	printf("# sampled z bf16: %lld of %lld differ from torch's\n", (long long)diff,
	       (long long)n);
	assert_true(test_max_rel_print("sampled z bf16 vs torch bf16", o.z, zref, n) <= 1e-2);
	outs_free(&o);
	flux_ae_free(m);
	st_close(&io.f);
}

/* BF16-stored weights load to the values the bf16 model rounds F32 ones to. */
static void bf16_weights_load_as_the_bf16_model_rounds(void **state)
{
	(void)state;
	io_file io;
	io_open(&io);
	outs a, b;
	flux_ae *m = open_model(write_weights("ae.safetensors", PTZ_F32, (spoil){0}), BE_BF16);
	run_model(m, &io, 1, &a);
	flux_ae_free(m);
	m = open_model(write_weights("ae_bf16.safetensors", PTZ_BF16, (spoil){0}), BE_BF16);
	run_model(m, &io, 1, &b);
	flux_ae_free(m);
	assert_memory_equal(a.moments, b.moments, (size_t)a.nm * sizeof(float));
	assert_memory_equal(a.decoded, b.decoded, (size_t)a.nd * sizeof(float));
	outs_free(&a);
	outs_free(&b);
	st_close(&io.f);
}

/* A chunk of one pixel's im2col column or one row of attention scores gives
 * what whole-image matmuls give, to the matmuls' summation order. */
static void chunked_convs_and_attention_match_whole(void **state)
{
	(void)state;
	io_file io;
	io_open(&io);
	outs a, b;
	flux_ae *m = open_model(write_weights("ae.safetensors", PTZ_F32, (spoil){0}), BE_F32);
	run_model(m, &io, 0, &a);
	flux_ae_set_chunk_bytes(m, 1);
	run_model(m, &io, 0, &b);
	assert_true(test_max_rel_print("moments chunked", b.moments, a.moments, a.nm) <= TOL);
	assert_true(test_max_rel_print("decoded chunked", b.decoded, a.decoded, a.nd) <= TOL);
	outs_free(&a);
	outs_free(&b);
	flux_ae_free(m);
	st_close(&io.f);
}

static void configs_are_read_with_defaults(void **state)
{
	(void)state;
	flux_ae_config c;
	flux_ae_config_default(&c);
	assert_int_equal(c.ch, 128);
	assert_int_equal(c.n_levels, 4);
	assert_int_equal(c.ch_mult[2], 4);
	assert_int_equal(c.z_channels, 16);
	assert_true(c.scale_factor == 0.3611f && c.shift_factor == 0.1159f);
	assert_int_equal(cfg.ch, 32);
	assert_int_equal(cfg.n_levels, 3);
	assert_int_equal(cfg.ch_mult[1], 2);
	assert_int_equal(cfg.num_res_blocks, 2);
	assert_int_equal(cfg.z_channels, 4);
	/* absent fields keep FLUX.1's */
	const char *path = test_path("partial.json");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"z_channels\": 8, \"ch_mult\": [1, 2]}\n", f);
	assert_int_equal(fclose(f), 0);
	titan_err e;
	if (flux_ae_config_read(&c, path, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(c.z_channels, 8);
	assert_int_equal(c.n_levels, 2);
	assert_int_equal(c.ch, 128);
	assert_true(c.shift_factor == 0.1159f);
}

/* err holds one line holding want. */
static void refused(int rc, const titan_err *e, const char *want)
{
	assert_int_equal(rc, -1);
	printf("# %s\n", e->msg);
	assert_null(strchr(e->msg, '\n'));
	if (strstr(e->msg, want) == NULL)
		fail_msg("'%s' does not say '%s'", e->msg, want);
}

static void config_refused(const char *json, const char *want)
{
	const char *path = test_path("bad.json");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(json, f);
	assert_int_equal(fclose(f), 0);
	flux_ae_config c;
	titan_err e;
	refused(flux_ae_config_read(&c, path, &e), &e, want);
}

static void bad_configs_are_refused_naming_the_field(void **state)
{
	(void)state;
	config_refused("{\"ch\": 48}", "field 'ch': 48, expected a multiple of 32");
	config_refused("{\"ch_mul\": [1]}", "unknown field 'ch_mul'");
	config_refused("{\"ch_mult\": []}", "field 'ch_mult'");
	config_refused("{\"ch_mult\": [1, 2.5]}", "field 'ch_mult': element 1");
	config_refused("{\"z_channels\": 0}", "field 'z_channels'");
}

static void open_refused(spoil sp, const char *want)
{
	titan_err e;
	flux_ae *m = flux_ae_open(be, write_weights("bad.safetensors", PTZ_F32, sp), &cfg, BE_F32,
				  &e);
	assert_null(m);
	refused(-1, &e, want);
}

static void bad_checkpoints_and_sizes_are_refused_saying_why(void **state)
{
	(void)state;
	open_refused((spoil){.name = "decoder.up.1.upsample.conv.weight", .drop = 1},
		     "tensor 'decoder.up.1.upsample.conv.weight': missing");
	open_refused((spoil){.name = "encoder.down.1.block.0.nin_shortcut.weight", .last_dim = 3},
		     "tensor 'encoder.down.1.block.0.nin_shortcut.weight': shape [64, 32, 1, 3], "
		     "expected [64, 32, 1, 1]");
	open_refused((spoil){.name = "encoder.mid.attn_1.q.bias", .dtype = PTZ_F64},
		     "tensor 'encoder.mid.attn_1.q.bias': dtype F64, expected F32, BF16 or F16");
	titan_err e;
	refused(flux_ae_open(be, test_path("absent.safetensors"), &cfg, BE_F32, &e) ? 0 : -1, &e,
		"absent.safetensors");
	/* a config the weights do not have: the first tensor that disagrees */
	flux_ae_config wide = cfg;
	wide.z_channels = 8;
	const char *path = write_weights("ae.safetensors", PTZ_F32, (spoil){0});
	refused(flux_ae_open(be, path, &wide, BE_F32, &e) ? 0 : -1, &e,
		"tensor 'encoder.conv_out.weight': shape [8, 64, 3, 3], expected [16, 64, 3, 3]");
	/* images whose sides are not multiples of 2^(levels-1) = 4 */
	flux_ae *m = open_model(path, BE_F32);
	float px[3 * 16 * 14] = {0}, mo[8 * 4 * 4];
	refused(flux_ae_encode(m, px, 1, 16, 14, mo, &e), &e, "multiples of 4");
	refused(flux_ae_encode(m, px, 0, 16, 12, mo, &e), &e, "batch size 0");
	refused(flux_ae_decode(m, mo, 1, 0, 3, px, &e), &e, "latents of 0 x 3");
	flux_ae_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(float32_model_matches_torch),
		cmocka_unit_test(bf16_model_matches_torch_bf16),
		cmocka_unit_test(bf16_weights_load_as_the_bf16_model_rounds),
		cmocka_unit_test(chunked_convs_and_attention_match_whole),
		cmocka_unit_test(configs_are_read_with_defaults),
		cmocka_unit_test(bad_configs_are_refused_naming_the_field),
		cmocka_unit_test(bad_checkpoints_and_sizes_are_refused_saying_why),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
