/* Tests of lib/fluxckpt on a small Flux (scripts/flux_ckpt_golden.py's
 * config: hidden 64, 4 heads, MLP ratio 2.6, 2 + 2 blocks, 16 in and 8 out
 * channels) with counter-drawn weights and AdamW states:
 *   - the diffusers export equals torchtitan 0.3.0's FluxStateDictAdapter.
 *     to_hf tensor for tensor (names, order, shapes, SHA-256 of the values:
 *     tests/flux/golden/ckpt_hf.tsv);
 *   - to-hf then from-hf gives every weight back bit for bit, in diffusers'
 *     layout and in BFL's, and the sizes read back from the files are the
 *     model's; FLUX.1-dev's guidance embedder is left out, saying so;
 *   - a full checkpoint holds 0.3.0's keys (model, optimizer state and
 *     param_groups, lr_scheduler, dataloader, train_state, titan's blobs) and
 *     loads back bit for bit (float32 and bfloat16 optimizer states); a
 *     model-only one holds the model alone and loads as such;
 *   - damage is refused with a line naming the key: a missing or mis-shaped
 *     tensor, an HF folder short of a tensor or with a stranger, optimizer
 *     steps that differ, a bad blob name.
 * With arguments it serves tests/flux/ckpt_crossing.sh:
 *   test_flux_ckpt save DIR    the drawn state as a full checkpoint
 *   test_flux_ckpt check DIR   load DIR (0.3.0's, written by
 *                              flux_ckpt_golden.py write) and compare */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/sha256.h"
#include "fluxckpt/fluxckpt.h"
#include "safetensors/safetensors.h"
#include "../support/testutil.h"

#define SEED 20261206
#define STEP 3
#define EPOCH 1 /* lr_scheduler.last_epoch apart from the step (a schedule restarted) */
#define NTOKENS 4096
#define LR 1e-4
#define LR_NOW 5e-5
#define LOADER "titan flux loader state"

static const flux_config small = {
	.name = "ckpt-small", .in_channels = 16, .out_channels = 8, .vec_in_dim = 24,
	.context_in_dim = 32, .hidden_size = 64, .num_heads = 4, .depth = 2,
	.depth_single_blocks = 2, .mlp_ratio = 2.6, .axes_dim = {4, 6, 6}, .theta = 10000,
	.qkv_bias = 1,
};

static backend *be;

/* test_path's result in one of 8 buffers used in turn: several may be
 * arguments of one call. */
static const char *tp(const char *name)
{
	static char ring[8][300];
	static int next;
	char *p = ring[next++ % 8];
	snprintf(p, sizeof ring[0], "%s", test_path(name));
	return p;
}

/* A model and optimizer: weights drawn (tensor t), states drawn (1000 + t,
 * |2000 + t|) when draw_states, else zero. */
typedef struct rig {
	flux_model *m;
	adamw *opt;
	int64_t n;
} rig;

static void draw_into(float *x, int64_t n, uint64_t t, int absval)
{
	for (int64_t j = 0; j < n; j++) {
		float v = test_counter_draw(SEED, t, (uint64_t)j);
		x[j] = absval && v < 0 ? -v : v;
	}
}

static rig rig_make(int draw_states, int bf16_states)
{
	titan_err e;
	rig r;
	r.m = flux_model_create(be, &small, &e);
	assert_non_null(r.m);
	r.n = flux_model_numel(r.m);
	adamw_config ac;
	adamw_config_default(&ac);
	ac.lr = LR;
	ac.bf16_states = bf16_states;
	r.opt = adamw_create(be, (size_t)r.n, &ac, &e);
	assert_non_null(r.opt);
	float *w = malloc((size_t)r.n * sizeof(float)), *a = malloc((size_t)r.n * sizeof(float));
	float *b = malloc((size_t)r.n * sizeof(float));
	assert_true(w && a && b);
	memset(a, 0, (size_t)r.n * sizeof(float));
	memset(b, 0, (size_t)r.n * sizeof(float));
	for (int i = 0; i < flux_param_count(r.m); i++) {
		int64_t off = fluxckpt_offset(r.m, i), k = flux_param_at(r.m, i)->numel;
		draw_into(w + off, k, (uint64_t)i, 0);
		if (draw_states) {
			draw_into(a + off, k, 1000 + (uint64_t)i, 0);
			draw_into(b + off, k, 2000 + (uint64_t)i, 1);
		}
	}
	be_dtype st = adamw_state_dtype(r.opt);
	assert_int_equal(backend_upload(be, BE_F32, flux_param_at(r.m, 0)->w, w, r.n, &e), 0);
	assert_int_equal(backend_upload(be, st, adamw_exp_avg(r.opt), a, r.n, &e), 0);
	assert_int_equal(backend_upload(be, st, adamw_exp_avg_sq(r.opt), b, r.n, &e), 0);
	adamw_set_step(r.opt, draw_states ? STEP : 0);
	free(w);
	free(a);
	free(b);
	return r;
}

static void rig_free(rig *r)
{
	adamw_free(r->opt);
	flux_model_free(r->m);
}

/* The drawn training state of r with its blobs. */
static fluxckpt_state state_of(rig *r, fluxckpt_blob *blobs, int nblobs)
{
	fluxckpt_state s = {.model = r->m, .opt = r->opt, .base_lr = LR, .cur_lr = LR_NOW,
			    .step = STEP, .last_epoch = EPOCH, .ntokens_seen = NTOKENS,
			    .loader = (uint8_t *)LOADER,
			    .loader_len = strlen(LOADER), .dp_world = 1, .blobs = blobs,
			    .nblobs = nblobs};
	return s;
}

/* Whether the host images of a and b (n values of type t in backend memory)
 * are the same bits. */
static int same_dev(const void *a, const void *b, be_dtype t, int64_t n)
{
	titan_err e;
	float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
	assert_true(x && y);
	assert_int_equal(backend_download(be, t, x, a, n, &e), 0);
	assert_int_equal(backend_download(be, t, y, b, n, &e), 0);
	int same = memcmp(x, y, (size_t)n * sizeof(float)) == 0;
	free(x);
	free(y);
	return same;
}

/* Golden ------------------------------------------------------------------- */

typedef struct golden_ctx {
	FILE *f;
	int n, bad;
} golden_ctx;

static int check_line(void *vctx, const char *name, dcp_dtype dt, int ndim, const int64_t *shape,
		      const void *data, titan_err *err)
{
	golden_ctx *g = vctx;
	char line[512], want[512], sh[64] = "";
	size_t at = 0, n = 1;
	(void)err;
	assert_int_equal(dt, PTZ_F32);
	for (int d = 0; d < ndim; d++) {
		at += (size_t)snprintf(sh + at, sizeof sh - at, "%s%lld", d ? "," : "", (long long)shape[d]);
		n *= (size_t)shape[d];
	}
	uint8_t dig[32];
	char hex[65];
	titan_err e;
	assert_int_equal(sha256(data, n * sizeof(float), dig, &e), 0);
	sha256_hex(dig, hex);
	snprintf(want, sizeof want, "%s\t%s\t%s\n", name, sh, hex);
	if (fgets(line, sizeof line, g->f) == NULL || strcmp(line, want) != 0) {
		if (g->bad++ < 3)
			print_message("# got %s# want %s", want, line);
	}
	g->n++;
	return 0;
}

static void diffusers_export_is_0_3_0s_to_hf(void **state)
{
	(void)state;
	rig r = rig_make(0, 0);
	titan_err e;
	float *w = malloc((size_t)r.n * sizeof(float));
	assert_non_null(w);
	assert_int_equal(backend_download(be, BE_F32, w, flux_param_at(r.m, 0)->w, r.n, &e), 0);
	golden_ctx g = {.f = fopen("tests/flux/golden/ckpt_hf.tsv", "r")};
	assert_non_null(g.f);
	for (int i = 0; i < flux_param_count(r.m); i++) {
		const flux_param *p = flux_param_at(r.m, i);
		assert_int_equal(fluxckpt_hf_export(&small, FLUXCKPT_DIFFUSERS, p->name, PTZ_F32, p->ndim,
						    p->shape, w + fluxckpt_offset(r.m, i), check_line,
						    &g, &e), 0);
	}
	char rest[8];
	assert_null(fgets(rest, sizeof rest, g.f));
	fclose(g.f);
	print_message("# %d diffusers tensors, %d differ from 0.3.0's to_hf\n", g.n, g.bad);
	assert_int_equal(g.n, 108);
	assert_int_equal(g.bad, 0);
	free(w);
	rig_free(&r);
}

/* Round trips ---------------------------------------------------------------- */

/* Whether every model tensor of checkpoints a and b is the same bits. */
static void same_models(const char *a, const char *b)
{
	titan_err e;
	dcp_source *x, *y;
	assert_int_equal(dcp_source_open(&x, a, &e), 0);
	assert_int_equal(dcp_source_open(&y, b, &e), 0);
	int np;
	flux_param *t = flux_param_table(&small, &np, &e);
	assert_non_null(t);
	assert_int_equal((int)dcp_source_count(y), np);
	for (int i = 0; i < np; i++) {
		const dcp_src_item *p = dcp_source_find(x, t[i].name), *q = dcp_source_find(y, t[i].name);
		if (p == NULL || q == NULL)
			fail_msg("%s missing", t[i].name);
		float *u = malloc((size_t)t[i].numel * 4), *v = malloc((size_t)t[i].numel * 4);
		assert_int_equal(dcp_source_read(x, p, u, PTZ_F32, &e), 0);
		assert_int_equal(dcp_source_read(y, q, v, PTZ_F32, &e), 0);
		if (memcmp(u, v, (size_t)t[i].numel * 4) != 0)
			fail_msg("%s differs", t[i].name);
		free(u);
		free(v);
	}
	free(t);
	dcp_source_close(x);
	dcp_source_close(y);
}

static void round_trip(int format, const char *hf)
{
	rig r = rig_make(0, 0);
	titan_err e;
	fluxckpt_state s = state_of(&r, NULL, 0);
	fluxckpt_save_opts o = {.model_only = 1, .no_fsync = 1};
	char src[300], back[300], hfp[300];
	snprintf(src, sizeof src, "%s", tp("model"));
	snprintf(hfp, sizeof hfp, "%s", tp(hf));
	snprintf(back, sizeof back, "%s", tp(format == FLUXCKPT_BFL ? "back-bfl" : "back"));
	assert_int_equal(fluxckpt_save(src, &s, &o, &e), 0);
	if (fluxckpt_to_hf(src, hfp, &small, format, PTZ_NONE, 100000, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(fluxckpt_hf_format(hfp, &e), format);
	flux_config c;
	assert_int_equal(fluxckpt_infer_config(hfp, FLUXCKPT_AUTO, &c, &e), 0);
	assert_true(c.hidden_size == 64 && c.num_heads == 4 && c.depth == 2 &&
		    c.depth_single_blocks == 2 && c.in_channels == 16 && c.out_channels == 8 &&
		    c.vec_in_dim == 24 && c.context_in_dim == 32 &&
		    (int64_t)(64 * c.mlp_ratio) == 166);
	if (fluxckpt_from_hf(hfp, back, &c, FLUXCKPT_AUTO, PTZ_NONE, &e) != 0)
		fail_msg("%s", e.msg);
	same_models(src, back);
	rig_free(&r);
}

static void diffusers_round_trip_is_bit_exact(void **state)
{
	(void)state;
	/* 100 kB shards: several files and an index */
	round_trip(FLUXCKPT_DIFFUSERS, "diffusers");
	st_set set;
	titan_err e;
	assert_int_equal(st_set_open(&set, tp("diffusers"), &e), 0);
	assert_true(set.n > 1);
	st_set_close(&set);
	assert_non_null(fopen(tp("diffusers/config.json"), "r"));
}

static void bfl_round_trip_is_bit_exact(void **state)
{
	(void)state;
	round_trip(FLUXCKPT_BFL, "flux1.safetensors");
	st_file f;
	titan_err e;
	assert_int_equal(st_open(&f, tp("flux1.safetensors"), &e), 0);
	assert_non_null(st_find(&f, "double_blocks.1.txt_attn.norm.key_norm.scale"));
	assert_non_null(st_find(&f, "single_blocks.0.norm.query_norm.scale"));
	assert_null(st_find(&f, "single_blocks.0.norm.query_norm.weight"));
	assert_non_null(st_find(&f, "final_layer.adaLN_modulation.1.weight"));
	st_close(&f);
}

static void trainer_hf_paths_round_trip(void **state)
{
	(void)state;
	titan_err e;
	rig r = rig_make(0, 0), q = rig_make(0, 0);
	fluxckpt_state s = state_of(&r, NULL, 0);
	fluxckpt_save_opts o = {.model_only = 1, .no_fsync = 1};
	assert_int_equal(fluxckpt_save(tp("t-model"), &s, &o, &e), 0);
	assert_int_equal(fluxckpt_save_hf(tp("t-hf"), r.m, PTZ_NONE, NULL, &e), 0);
	assert_int_equal(fluxckpt_to_hf(tp("t-model"), tp("t-hf2"), &small, FLUXCKPT_DIFFUSERS,
					PTZ_NONE, (uint64_t)1 << 40, &e), 0);
	/* torch's HuggingFaceStorageWriter's files: an index even for one file */
	FILE *ix = fopen(tp("t-hf/model.safetensors.index.json"), "r");
	assert_non_null(ix);
	fclose(ix);
	/* the trainer's last save holds titan-ckpt-convert's export */
	st_set a, b;
	assert_int_equal(st_set_open(&a, tp("t-hf"), &e), 0);
	assert_int_equal(st_set_open(&b, tp("t-hf2"), &e), 0);
	size_t na = 0;
	for (size_t f = 0; f < a.n; f++)
		for (size_t i = 0; i < a.files[f].n; i++, na++) {
			const st_tensor *x = &a.files[f].t[i], *y = st_set_find(&b, x->name);
			assert_non_null(y);
			assert_int_equal(x->end - x->begin, y->end - y->begin);
			assert_memory_equal(x->data, y->data, x->end - x->begin);
		}
	assert_int_equal(na, 108);
	st_set_close(&a);
	st_set_close(&b);
	if (fluxckpt_load_hf(tp("t-hf"), q.m, FLUXCKPT_AUTO, &e) != 0)
		fail_msg("%s", e.msg);
	assert_true(same_dev(flux_param_at(r.m, 0)->w, flux_param_at(q.m, 0)->w, BE_F32, r.n));
	rig_free(&q);
	rig_free(&r);
}

/* Rewrite safetensors file in as out with tensor drop left out and, when
 * add is set, a tensor of that name (shape (2)) put in. */
static void rewrite(const char *in, const char *out, const char *drop, const char *add)
{
	titan_err e;
	st_file f;
	if (st_open(&f, in, &e) != 0)
		fail_msg("%s", e.msg);
	st_item *it = calloc(f.n + 1, sizeof *it);
	size_t k = 0;
	static const float two[2] = {1, 2};
	for (size_t i = 0; i < f.n; i++) {
		const st_tensor *t = &f.t[i];
		if (drop && !strcmp(t->name, drop))
			continue;
		it[k] = (st_item){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
		memcpy(it[k].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
		k++;
	}
	if (add)
		it[k++] = (st_item){.name = add, .dtype = PTZ_F32, .ndim = 1, .shape = {2}, .data = two};
	assert_int_equal(st_write(out, it, k, NULL, &e), 0);
	free(it);
	st_close(&f);
}

static void guidance_is_dropped_and_strangers_refused(void **state)
{
	(void)state;
	titan_err e;
	const char *bfl = tp("flux1.safetensors");
	char in[300];
	snprintf(in, sizeof in, "%s", bfl);
	char dev[300], bad[300], shortf[300];
	snprintf(dev, sizeof dev, "%s", tp("dev.safetensors"));
	snprintf(bad, sizeof bad, "%s", tp("bad.safetensors"));
	snprintf(shortf, sizeof shortf, "%s", tp("short.safetensors"));
	rig r = rig_make(0, 0);
	fluxckpt_state s = state_of(&r, NULL, 0);
	fluxckpt_save_opts o = {.model_only = 1, .no_fsync = 1};
	assert_int_equal(fluxckpt_save(tp("g-model"), &s, &o, &e), 0);
	assert_int_equal(fluxckpt_to_hf(tp("g-model"), in, &small, FLUXCKPT_BFL, PTZ_NONE, 0, &e),
			 0);
	rewrite(in, dev, NULL, "guidance_in.in_layer.bias");
	assert_int_equal(fluxckpt_from_hf(dev, tp("g-dev"), &small, FLUXCKPT_AUTO, PTZ_NONE, &e),
			 0);
	same_models(tp("g-model"), tp("g-dev"));
	rewrite(in, bad, NULL, "double_blocks.0.img_attn.extra.weight");
	test_refused(fluxckpt_from_hf(bad, tp("g-bad"), &small, FLUXCKPT_AUTO, PTZ_NONE, &e), &e,
		  "double_blocks.0.img_attn.extra.weight is not a weight");
	rewrite(in, shortf, "single_blocks.1.linear1.bias", NULL);
	test_refused(fluxckpt_from_hf(shortf, tp("g-short"), &small, FLUXCKPT_AUTO, PTZ_NONE, &e),
		  &e, "no tensor single_blocks.1.linear1.bias");
	/* a diffusers folder short of one part of a fused tensor */
	assert_int_equal(fluxckpt_to_hf(tp("g-model"), tp("g-hf"), &small,
					FLUXCKPT_DIFFUSERS, PTZ_NONE, (uint64_t)1 << 40, &e), 0);
	char one[300];
	snprintf(one, sizeof one, "%s", tp("g-hf/diffusion_pytorch_model.safetensors"));
	rewrite(one, tp("g-hf2.safetensors"), "transformer_blocks.1.attn.add_k_proj.weight", NULL);
	test_refused(fluxckpt_from_hf(tp("g-hf2.safetensors"), tp("g-x"), &small,
				   FLUXCKPT_AUTO, PTZ_NONE, &e),
		  &e, "no tensor transformer_blocks.1.attn.add_k_proj.weight (for "
		      "double_blocks.1.txt_attn.qkv.weight)");
	/* a flavor that is not the checkpoint's */
	flux_config wide = small;
	wide.hidden_size = 128;
	wide.axes_dim[0] = 20;
	test_refused(fluxckpt_to_hf(tp("g-model"), tp("g-w"), &wide, FLUXCKPT_DIFFUSERS,
				 PTZ_NONE, 0, &e),
		  &e, "img_in.weight has shape (64, 16), the model (128, 16)");
	rig_free(&r);
}

/* The training state -------------------------------------------------------- */

static void full_state_round_trips(int bf16)
{
	titan_err e;
	rig r = rig_make(1, bf16);
	uint8_t rng[5] = {1, 2, 3, 0, 255};
	fluxckpt_blob blobs[1] = {{.name = "noise_rng", .p = rng, .n = sizeof rng}};
	fluxckpt_state s = state_of(&r, blobs, 1);
	/* the bf16 case saves on a background thread while the weights change */
	fluxckpt_save_opts o = {.no_fsync = 1, .async = bf16};
	const char *dir = tp(bf16 ? "full-bf16" : "full");
	char d[300];
	snprintf(d, sizeof d, "%s", dir);
	float *w0 = malloc((size_t)r.n * sizeof(float));
	assert_non_null(w0);
	assert_int_equal(backend_download(be, BE_F32, w0, flux_param_at(r.m, 0)->w, r.n, &e), 0);
	fluxckpt_saver *sv = fluxckpt_save_begin(d, &s, &o, &e);
	assert_non_null(sv);
	be->ops->zero(be, flux_param_at(r.m, 0)->w, (size_t)r.n * sizeof(float));
	assert_int_equal(fluxckpt_save_wait(sv, &e), 0);
	assert_int_equal(backend_upload(be, BE_F32, flux_param_at(r.m, 0)->w, w0, r.n, &e), 0);
	free(w0);
	/* 0.3.0's keys */
	dcp_ckpt ck;
	assert_int_equal(dcp_open(&ck, d, &e), 0);
	int np = flux_param_count(r.m);
	assert_int_equal((int)ck.n, np * (1 + 3 + DCP_ADAMW_GROUP_KEYS) + 1 + 2 + 2 + 1);
	const dcp_entry *x = dcp_find(&ck, "optimizer.state.single_blocks.1.linear1.weight.exp_avg");
	assert_non_null(x);
	assert_int_equal(x->dtype, bf16 ? PTZ_BF16 : PTZ_F32);
	assert_int_equal(x->shape[0], 3 * 64 + 166);
	assert_non_null(dcp_find(&ck, "optimizer.param_groups.img_in.bias.decoupled_weight_decay"));
	assert_non_null(dcp_find(&ck, "optimizer.state.final_layer.linear.bias.step"));
	assert_non_null(dcp_find(&ck, "train_state.noise_rng"));
	assert_non_null(dcp_find(&ck, "lr_scheduler.last_epoch"));
	assert_non_null(dcp_find(&ck, "dataloader.dp_rank_0"));
	assert_int_equal(dcp_verify(&ck, &e), 0);
	dcp_close(&ck);
	/* into a fresh model and optimizer */
	rig q = rig_make(0, bf16);
	fluxckpt_blob want[1] = {{.name = "noise_rng"}};
	fluxckpt_state t = {.model = q.m, .opt = q.opt, .blobs = want, .nblobs = 1};
	fluxckpt_loaded got;
	if (fluxckpt_load(d, &t, 0, 0, &got, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(got.model_only, 0);
	assert_int_equal(got.parts, FLUXCKPT_OPTIMIZER | FLUXCKPT_LR_SCHEDULER | FLUXCKPT_DATALOADER |
					    FLUXCKPT_TRAIN_STATE);
	assert_true(same_dev(flux_param_at(r.m, 0)->w, flux_param_at(q.m, 0)->w, BE_F32, r.n));
	be_dtype st = adamw_state_dtype(r.opt);
	assert_true(same_dev(adamw_exp_avg(r.opt), adamw_exp_avg(q.opt), st, r.n));
	assert_true(same_dev(adamw_exp_avg_sq(r.opt), adamw_exp_avg_sq(q.opt), st, r.n));
	assert_int_equal(adamw_get_step(q.opt), STEP);
	assert_int_equal(t.step, STEP);
	assert_int_equal(t.last_epoch, EPOCH);
	assert_int_equal(t.ntokens_seen, NTOKENS);
	assert_int_equal(t.dp_world, 1);
	assert_true(t.loader_len == strlen(LOADER) && !memcmp(t.loader, LOADER, t.loader_len));
	assert_true(want[0].found && want[0].n == sizeof rng && !memcmp(want[0].p, rng, sizeof rng));
	free(want[0].p);
	free(t.loader);
	/* excluded parts stay as they were */
	rig z = rig_make(0, bf16);
	fluxckpt_state u = {.model = z.m, .opt = z.opt};
	assert_int_equal(fluxckpt_load(d, &u, 0, FLUXCKPT_OPTIMIZER | FLUXCKPT_DATALOADER, &got, &e), 0);
	assert_int_equal(got.parts, FLUXCKPT_LR_SCHEDULER | FLUXCKPT_TRAIN_STATE);
	assert_int_equal(adamw_get_step(z.opt), 0);
	assert_null(u.loader);
	rig_free(&z);
	rig_free(&q);
	rig_free(&r);
}

static void full_state_round_trips_f32(void **state)
{
	(void)state;
	full_state_round_trips(0);
}

static void full_state_round_trips_bf16_states(void **state)
{
	(void)state;
	full_state_round_trips(1);
}

static void model_only_checkpoint_holds_the_model(void **state)
{
	(void)state;
	titan_err e;
	rig r = rig_make(1, 0);
	fluxckpt_state s = state_of(&r, NULL, 0);
	fluxckpt_save_opts o = {.model_only = 1, .export_dtype = PTZ_BF16, .no_fsync = 1};
	char d[300];
	snprintf(d, sizeof d, "%s", tp("seed"));
	assert_int_equal(fluxckpt_save(d, &s, &o, &e), 0);
	dcp_ckpt ck;
	assert_int_equal(dcp_open(&ck, d, &e), 0);
	assert_int_equal((int)ck.n, flux_param_count(r.m));
	assert_int_equal(dcp_find(&ck, "img_in.weight")->dtype, PTZ_BF16);
	dcp_close(&ck);
	rig q = rig_make(0, 0);
	fluxckpt_state t = {.model = q.m, .opt = q.opt};
	fluxckpt_loaded got;
	assert_int_equal(fluxckpt_load(d, &t, 0, 0, &got, &e), 0);
	assert_int_equal(got.model_only, 1);
	assert_int_equal(got.parts, 0);
	assert_int_equal(adamw_get_step(q.opt), 0);
	/* bf16's rounding of the drawn weights: within 2^-8 relative */
	float *a = malloc((size_t)r.n * 4), *b = malloc((size_t)r.n * 4);
	assert_int_equal(backend_download(be, BE_F32, a, flux_param_at(r.m, 0)->w, r.n, &e), 0);
	assert_int_equal(backend_download(be, BE_F32, b, flux_param_at(q.m, 0)->w, r.n, &e), 0);
	assert_true(test_max_rel(b, a, r.n) < 1.0 / 256);
	free(a);
	free(b);
	test_refused(fluxckpt_save(d, &s, &(fluxckpt_save_opts){.model_only = 1, .export_dtype = PTZ_I64},
				&e),
		  &e, "is not float32, bfloat16 or float16");
	rig_free(&q);
	rig_free(&r);
}

/* A copy of checkpoint src at dst with item `drop` left out, item
 * `reshape` (a tensor) given one row fewer, and float32 item `alter`'s
 * first value 2. */
static void damaged_copy(const char *src, const char *dst, const char *drop, const char *reshape,
			 const char *alter)
{
	titan_err e;
	dcp_ckpt ck;
	assert_int_equal(dcp_open(&ck, src, &e), 0);
	dcp_item *it = calloc(ck.n, sizeof *it);
	size_t k = 0;
	for (size_t i = 0; i < ck.n; i++) {
		const dcp_entry *x = &ck.entries[i];
		if (drop && !strcmp(x->fqn, drop))
			continue;
		dcp_item *d = &it[k++];
		if (x->kind == DCP_BYTES) {
			const uint8_t *p;
			size_t n;
			assert_int_equal(dcp_read_bytes(&ck, x, &p, &n, &e), 0);
			*d = (dcp_item){.fqn = x->fqn, .kind = DCP_BYTES, .bytes = (uint8_t *)p, .nbytes = n};
			continue;
		}
		int64_t zero[DCP_MAX_DIM] = {0}, shape[DCP_MAX_DIM];
		memcpy(shape, x->shape, sizeof shape);
		size_t n = ptz_dtype_size(x->dtype);
		for (int j = 0; j < x->ndim; j++)
			n *= (size_t)x->shape[j];
		void *buf = malloc(n + 1);
		assert_int_equal(dcp_read_region(&ck, x, zero, x->shape, x->dtype, buf, &e), 0);
		if (reshape && !strcmp(x->fqn, reshape))
			shape[0]--;
		if (alter && !strcmp(x->fqn, alter) && x->dtype == PTZ_F32)
			*(float *)buf = 2;
		dcp_item_full(d, x->fqn, x->dtype, x->ndim, shape, buf);
	}
	assert_int_equal(dcp_save(dst, it, k, &(dcp_save_opts){.no_fsync = 1}, &e), 0);
	for (size_t i = 0; i < k; i++)
		if (it[i].kind == DCP_TENSOR)
			free(it[i].data);
	free(it);
	dcp_close(&ck);
}

static void damaged_checkpoints_are_refused_naming_the_key(void **state)
{
	(void)state;
	titan_err e;
	rig r = rig_make(1, 0);
	fluxckpt_state s = state_of(&r, NULL, 0);
	char d[300];
	snprintf(d, sizeof d, "%s", tp("d-full"));
	assert_int_equal(fluxckpt_save(d, &s, &(fluxckpt_save_opts){.no_fsync = 1}, &e), 0);
	rig q = rig_make(0, 0);
	fluxckpt_state t = {.model = q.m, .opt = q.opt};
	fluxckpt_loaded got;
	static const struct {
		const char *drop, *reshape, *want;
	} cases[] = {
		{"double_blocks.1.txt_mlp.2.bias", NULL, "no key 'double_blocks.1.txt_mlp.2.bias'"},
		{"optimizer.state.txt_in.weight.exp_avg_sq", NULL,
		 "no key 'optimizer.state.txt_in.weight.exp_avg_sq'"},
		{"lr_scheduler.last_epoch", NULL, "no key 'lr_scheduler.last_epoch'"},
		{NULL, "single_blocks.0.linear1.weight", "'single_blocks.0.linear1.weight' has shape"},
		{NULL, "optimizer.state.img_in.bias.exp_avg", "'optimizer.state.img_in.bias.exp_avg' has shape"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char dd[300];
		snprintf(dd, sizeof dd, "%s%zu", tp("damaged"), i);
		damaged_copy(d, dd, cases[i].drop, cases[i].reshape, NULL);
		test_refused(fluxckpt_load(dd, &t, 0, 0, &got, &e), &e, cases[i].want);
	}
	/* a blob asked for that is not there; one that may be absent */
	fluxckpt_blob b[1] = {{.name = "noise_rng"}};
	t.blobs = b;
	t.nblobs = 1;
	test_refused(fluxckpt_load(d, &t, 0, 0, &got, &e), &e, "no key 'train_state.noise_rng'");
	b[0].optional = 1;
	assert_int_equal(fluxckpt_load(d, &t, 0, 0, &got, &e), 0);
	assert_false(b[0].found);
	free(t.loader);
	t.loader = NULL;
	b[0].name = "step";
	test_refused(fluxckpt_load(d, &t, 0, 0, &got, &e), &e, "blob name 'step'");
	t.nblobs = 0;
	/* steps that differ between parameters */
	char dd[300];
	snprintf(dd, sizeof dd, "%s", tp("d-step"));
	damaged_copy(d, dd, NULL, NULL, "optimizer.state.vector_in.out_layer.bias.step");
	t.step = 0;
	adamw_set_step(q.opt, 0);
	test_refused(fluxckpt_load(dd, &t, 0, 0, &got, &e), &e,
		  "optimizer.state.vector_in.out_layer.bias.step is 2, img_in.weight's 3");
	/* a failed load hands nothing back */
	assert_int_equal(t.step, 0);
	assert_null(t.loader);
	assert_int_equal(adamw_get_step(q.opt), 0);
	rig_free(&q);
	rig_free(&r);
}

/* Crossing helpers ------------------------------------------------------------ */

static int cli(const char *cmd, const char *dir)
{
	titan_err e;
	if (!strcmp(cmd, "save")) {
		rig r = rig_make(1, 0);
		fluxckpt_state s = state_of(&r, NULL, 0);
		int rc = fluxckpt_save(dir, &s, NULL, &e);
		if (rc != 0)
			fprintf(stderr, "%s\n", e.msg);
		rig_free(&r);
		return rc ? 1 : 0;
	}
	rig want = rig_make(1, 0), q = rig_make(0, 0);
	fluxckpt_state t = {.model = q.m, .opt = q.opt};
	fluxckpt_loaded got;
	int rc = fluxckpt_load(dir, &t, 0, 0, &got, &e);
	if (rc != 0) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	be_dtype st = adamw_state_dtype(q.opt);
	const char *bad = !same_dev(flux_param_at(want.m, 0)->w, flux_param_at(q.m, 0)->w, BE_F32, q.n)
				  ? "the weights"
			  : !same_dev(adamw_exp_avg(want.opt), adamw_exp_avg(q.opt), st, q.n) ? "exp_avg"
			  : !same_dev(adamw_exp_avg_sq(want.opt), adamw_exp_avg_sq(q.opt), st, q.n)
				  ? "exp_avg_sq"
			  : adamw_get_step(q.opt) != STEP ? "the optimizer's step"
			  : t.step != STEP || t.ntokens_seen != NTOKENS ? "train_state"
			  : t.loader_len != strlen(LOADER) || memcmp(t.loader, LOADER, t.loader_len)
				  ? "the loader state"
				  : NULL;
	if (bad)
		fprintf(stderr, "%s: %s differ from the drawn state\n", dir, bad);
	else
		printf("ok: titan loads 0.3.0's checkpoint: %d tensors, their AdamW state (step %lld), "
		       "train_state, the loader\n", flux_param_count(q.m), (long long)t.step);
	free(t.loader);
	rig_free(&q);
	rig_free(&want);
	return bad ? 1 : 0;
}

static int setup(void **state)
{
	titan_err e;
	be = backend_cpu_create(1, &e);
	if (be == NULL) {
		fprintf(stderr, "%s\n", e.msg);
		return -1;
	}
	return test_tmpdir_create(state);
}

static int teardown(void **state)
{
	backend_free(be);
	return test_tmpdir_remove(state);
}

int main(int argc, char **argv)
{
	if (argc == 3) {
		titan_err e;
		be = backend_cpu_create(1, &e);
		int rc = be ? cli(argv[1], argv[2]) : 1;
		if (be)
			backend_free(be);
		return rc;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(diffusers_export_is_0_3_0s_to_hf),
		cmocka_unit_test(diffusers_round_trip_is_bit_exact),
		cmocka_unit_test(bfl_round_trip_is_bit_exact),
		cmocka_unit_test(guidance_is_dropped_and_strangers_refused),
		cmocka_unit_test(trainer_hf_paths_round_trip),
		cmocka_unit_test(full_state_round_trips_f32),
		cmocka_unit_test(full_state_round_trips_bf16_states),
		cmocka_unit_test(model_only_checkpoint_holds_the_model),
		cmocka_unit_test(damaged_checkpoints_are_refused_naming_the_key),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
