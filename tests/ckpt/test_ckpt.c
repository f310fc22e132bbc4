/* Unit tests of lib/pickle, lib/ptzip, lib/safetensors and lib/dcp.  Vectors
 * marked "from Python/torch" were printed by CPython 3.11 pickle.dumps and
 * torch 2.15's .to(bfloat16) / .to(float16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcp/dcp.h"
#include "pickle/pickle.h"
#include "ptzip/ptzip.h"
#include "safetensors/safetensors.h"

#define GOLDEN "tests/ckpt/golden"

static char tmpdir[256];

static int make_tmpdir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-ckpt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static size_t unhex(const char *h, uint8_t *out)
{
	size_t n = 0;
	for (; h[0] && h[1]; h += 2) {
		unsigned v;
		sscanf(h, "%2x", &v);
		out[n++] = (uint8_t)v;
	}
	return n;
}

/* pickle.dumps({'a': [1, 2.5, None, True], 'b': (b'\x00\xff', 'ü'),
 *               'c': 2**40, 'd': -5, 'e': -70000}, protocol=P), from Python. */
static const char *const py_pickles[] = {
	"286470300a56610a70310a286c70320a49310a6146322e350a614e614930310a617356620a70330a28635f636f646563730a656e636f64650a70340a28565c7530303030ff0a70350a566c6174696e310a70360a7470370a5270380a56fc0a70390a747031300a7356630a7031310a4c313039393531313632373737364c0a7356640a7031320a492d350a7356650a7031330a492d37303030300a732e",
	"7d71002858010000006171015d7102284b014740040000000000004e4930310a65580100000062710328635f636f646563730a656e636f64650a710428580300000000c3bf710558060000006c6174696e3171067471075271085802000000c3bc710974710a580100000063710b4c313039393531313632373737364c0a580100000064710c4afbffffff580100000065710d4a90eefeff752e",
	"80027d71002858010000006171015d7102284b014740040000000000004e88655801000000627103635f636f646563730a656e636f64650a7104580300000000c3bf710558060000006c6174696e3171068671075271085802000000c3bc710986710a580100000063710b8a06000000000001580100000064710c4afbffffff580100000065710d4a90eefeff752e",
	"80037d71002858010000006171015d7102284b014740040000000000004e88655801000000627103430200ff71045802000000c3bc710586710658010000006371078a0600000000000158010000006471084afbffffff58010000006571094a90eefeff752e",
	"80049548000000000000007d94288c0161945d94284b014740040000000000004e88658c016294430200ff948c02c3bc9486948c0163948a060000000000018c0164944afbffffff8c0165944a90eefeff752e",
	"80059548000000000000007d94288c0161945d94284b014740040000000000004e88658c016294430200ff948c02c3bc9486948c0163948a060000000000018c0164944afbffffff8c0165944a90eefeff752e",
};

static void pickle_reads_every_protocol_python_writes(void **state)
{
	(void)state;
	static const char *const allow_g[] = {"_codecs encode", NULL};
	pk_allow allow = {allow_g};
	for (int p = 0; p < 6; p++) {
		uint8_t buf[1024];
		size_t n = unhex(py_pickles[p], buf);
		pk_val *v;
		pk_arena *a;
		titan_err err;
		int rc = pk_load(buf, n, &allow, &v, &a, &err);
		if (rc)
			fail_msg("protocol %d: %s", p, err.msg);
		pk_val *l = pk_dict_get(v, "a"), *t = pk_dict_get(v, "b");
		assert_non_null(l);
		assert_int_equal(l->kind, PK_LIST);
		assert_int_equal(l->n, 4);
		assert_int_equal(l->items[0]->i, 1);
		assert_true(l->items[1]->kind == PK_FLOAT && l->items[1]->f == 2.5);
		assert_int_equal(l->items[2]->kind, PK_NONE);
		assert_true(l->items[3]->kind == PK_BOOL && l->items[3]->i == 1);
		assert_true(t && t->kind == PK_TUPLE && t->n == 2);
		assert_int_equal(t->items[0]->kind, PK_BYTES);
		assert_int_equal(t->items[0]->len, 2);
		assert_memory_equal(t->items[0]->s, "\x00\xff", 2);
		assert_string_equal(t->items[1]->s, "\xc3\xbc");
		assert_int_equal(pk_dict_get(v, "c")->i, (int64_t)1 << 40);
		assert_int_equal(pk_dict_get(v, "d")->i, -5);
		assert_int_equal(pk_dict_get(v, "e")->i, -70000);
		pk_free(a);
	}
}

static void pickle_refuses_globals_outside_the_allowlist(void **state)
{
	(void)state;
	/* cos\nsystem\n(S'echo'\ntR. and the protocol 4 builtins.eval form */
	const char *evil[] = {"\x80\x02" "cos\nsystem\nX\x04\x00\x00\x00echo\x85R.",
			      "\x80\x04\x8c\x08" "builtins\x8c\x04" "eval\x93\x8c\x01" "1\x85R."};
	size_t lens[] = {27, 24};
	pk_allow none = {NULL};
	for (int i = 0; i < 2; i++) {
		pk_val *v;
		pk_arena *a;
		titan_err err;
		assert_int_equal(pk_load((const uint8_t *)evil[i], lens[i], &none, &v, &a, &err), -1);
		assert_non_null(strstr(err.msg, "is not allowed"));
		pk_free(a);
	}
}

static void pickle_rejects_truncated_and_unbalanced_streams(void **state)
{
	(void)state;
	uint8_t buf[1024];
	size_t n = unhex(py_pickles[4], buf);
	static const char *const allow_g[] = {"_codecs encode", NULL};
	pk_allow allow = {allow_g};
	for (size_t cut = 0; cut < n; cut++) {
		pk_val *v;
		pk_arena *a;
		titan_err err;
		assert_int_equal(pk_load(buf, cut, &allow, &v, &a, &err), -1);
		pk_free(a);
	}
	const uint8_t two[] = {0x80, 0x02, 'K', 1, 'K', 2, '.'};
	pk_val *v;
	pk_arena *a;
	titan_err err;
	assert_int_equal(pk_load(two, sizeof two, &allow, &v, &a, &err), -1);
	pk_free(a);
}

static void pickle_writer_output_reads_back_equal(void **state)
{
	(void)state;
	pk_arena *a = pk_arena_new();
	pk_val *d = pk_new(a, PK_DICT), *l = pk_new(a, PK_LIST);
	pk_append(a, l, pk_float(a, -0.125));
	pk_append(a, l, pk_int(a, INT64_MIN));
	pk_append(a, l, pk_int(a, 300));
	pk_append(a, l, pk_int(a, -1));
	pk_append(a, l, pk_bytes(a, "\x80\x00\xfe", 3));
	pk_dict_set(a, d, pk_str(a, "xs"), l);
	pk_dict_set(a, d, pk_str(a, "n"), pk_new(a, PK_NONE));
	for (int proto = 2; proto <= 4; proto++) {
		pk_buf b = {0};
		titan_err err;
		assert_int_equal(pk_dump(&b, d, proto, &err), 0);
		static const char *const allow_g[] = {"_codecs encode", NULL};
		pk_allow allow = {allow_g};
		pk_val *v;
		pk_arena *ra;
		assert_int_equal(pk_load(b.p, b.n, &allow, &v, &ra, &err), 0);
		char r1[512], r2[512];
		pk_repr(d, r1, sizeof r1);
		pk_repr(v, r2, sizeof r2);
		assert_string_equal(r1, r2);
		pk_val *xs = pk_dict_get(v, "xs");
		assert_int_equal(xs->items[1]->i, INT64_MIN);
		assert_memory_equal(xs->items[4]->s, "\x80\x00\xfe", 3);
		pk_free(ra);
		free(b.p);
	}
	pk_free(a);
}

static void float_casts_round_like_torch(void **state)
{
	(void)state;
	/* float32 bits and torch's .to(bfloat16) / .to(float16) bits. */
	static const uint32_t f[] = {0x3f800000, 0x3f808000, 0x3f80c000, 0x3f814000, 0xc0490fd0,
		0x477fe000, 0x477ff000, 0x322bcc77, 0x337ffae5, 0x7f61b1e6, 0x7f800000, 0x80000000,
		0x3aa1d139, 0x33800000, 0x33000000, 0x33400000, 0x3dcccccd};
	static const uint16_t bf[] = {0x3f80, 0x3f80, 0x3f81, 0x3f81, 0xc049, 0x4780, 0x4780, 0x322c,
		0x3380, 0x7f62, 0x7f80, 0x8000, 0x3aa2, 0x3380, 0x3300, 0x3340, 0x3dcd};
	static const uint16_t hf[] = {0x3c00, 0x3c04, 0x3c06, 0x3c0a, 0xc248, 0x7bff, 0x7c00, 0x0000,
		0x0001, 0x7c00, 0x7c00, 0x8000, 0x150f, 0x0001, 0x0000, 0x0001, 0x2e66};
	size_t n = sizeof f / sizeof f[0];
	uint16_t out[32];
	ptz_convert(out, PTZ_BF16, f, PTZ_F32, n);
	for (size_t i = 0; i < n; i++)
		if (out[i] != bf[i])
			fail_msg("bf16 of %08x: %04x, torch %04x", f[i], out[i], bf[i]);
	ptz_convert(out, PTZ_F16, f, PTZ_F32, n);
	for (size_t i = 0; i < n; i++)
		if (out[i] != hf[i])
			fail_msg("f16 of %08x: %04x, torch %04x", f[i], out[i], hf[i]);
	/* Back to float32 is exact. */
	float back[32];
	ptz_convert(back, PTZ_F32, hf, PTZ_F16, n);
	assert_true(back[0] == 1.0f && back[5] == 65504.0f && back[16] == 0.0999755859375f);
}

static void torch_save_zip_has_64_byte_aligned_records(void **state)
{
	(void)state;
	ptz_writer w;
	titan_err err;
	int64_t shape[2] = {3, 5};
	float data[15];
	for (int i = 0; i < 15; i++)
		data[i] = (float)i * 0.5f;
	assert_int_equal(ptz_writer_init(&w, NULL, "archive", &err), 0);
	assert_int_equal(ptz_save_tensor(&w, PTZ_F32, 2, shape, data, &err), 0);
	ptz_reader r;
	assert_int_equal(ptz_open(&r, w.mem, w.pos, &err), 0);
	assert_string_equal(r.root, "archive");
	for (size_t i = 0; i < r.n_entries; i++) {
		assert_int_equal(r.entries[i].data_off % 64, 0);
		assert_int_equal(ptz_check_crc(&r, &r.entries[i], &err), 0);
	}
	assert_non_null(ptz_find(&r, "byteorder"));
	ptz_tensor t;
	assert_int_equal(ptz_read_tensor(&r, &t, &err), 0);
	assert_int_equal(t.ndim, 2);
	assert_int_equal(t.shape[1], 5);
	float got[15];
	assert_int_equal(ptz_tensor_copy(&t, got, PTZ_F32, &err), 0);
	assert_memory_equal(got, data, sizeof data);
	ptz_close(&r);
	ptz_writer_free(&w);
}

static void torch_written_file_reads_and_is_aligned(void **state)
{
	(void)state;
	dcp_source *s;
	titan_err err;
	if (dcp_source_open(&s, GOLDEN "/single.pt", &err))
		fail_msg("%s", err.msg);
	const dcp_src_item *it = dcp_source_find(s, "layers.1.attention.wk.weight");
	assert_non_null(it);
	assert_int_equal(it->dtype, PTZ_F32);
	assert_int_equal(it->shape[0], 16);
	assert_int_equal(it->npath, 1);
	const dcp_src_item *st = dcp_source_find(s, "train_state.step");
	assert_non_null(st);
	assert_int_equal(st->npath, 2);
	dcp_source_close(s);
}

/* Fill v[i] = f(i) for a recognisable pattern. */
static float pat(int64_t i, int seed)
{
	return (float)((i * 2654435761u + (uint64_t)seed * 40503u) % 100003) / 1000.0f - 50.0f;
}

static void save_by_ranks_then_load_any_box(void **state)
{
	(void)state;
	/* A (6, 10, 4) float tensor and a (10,) int64 tensor, saved by 3 ranks each
	 * holding a slab of dim 1 (sizes 4, 3, 3), plus bytes items on rank 0. */
	int64_t shape[3] = {6, 10, 4};
	static float full[240];
	int64_t ints[10];
	for (int i = 0; i < 240; i++)
		full[i] = pat(i, 7);
	for (int i = 0; i < 10; i++)
		ints[i] = (int64_t)1 << (i * 6);
	char dir[300];
	snprintf(dir, sizeof dir, "%s/step-5", tmpdir);
	int64_t starts[4] = {0, 4, 7, 10};
	titan_err err;
	for (int r = 0; r < 3; r++) {
		int64_t w = starts[r + 1] - starts[r];
		float *slab = malloc(sizeof(float) * (size_t)(6 * w * 4));
		for (int a = 0; a < 6; a++)
			for (int b = 0; b < w; b++)
				for (int c = 0; c < 4; c++)
					slab[(a * w + b) * 4 + c] = full[(a * 10 + starts[r] + b) * 4 + c];
		dcp_item it[3];
		size_t n = 0;
		memset(it, 0, sizeof it);
		it[n].fqn = "layers.0.w";
		it[n].kind = DCP_TENSOR;
		it[n].dtype = PTZ_F32;
		it[n].ndim = 3;
		memcpy(it[n].shape, shape, sizeof shape);
		memcpy(it[n].sizes, shape, sizeof shape);
		it[n].offsets[1] = starts[r];
		it[n].sizes[1] = w;
		it[n].data = slab;
		n++;
		uint8_t *b1 = NULL;
		size_t b1n = 0;
		if (r == 0) {
			int64_t s10[1] = {10};
			dcp_item_full(&it[n++], "optimizer.state.layers.0.w.step_count", PTZ_I64, 1, s10, ints);
			assert_int_equal(dcp_value_int(123456789012LL, &b1, &b1n, &err), 0);
			it[n].fqn = "train_state.step";
			it[n].kind = DCP_BYTES;
			it[n].bytes = b1;
			it[n].nbytes = b1n;
			n++;
		}
		dcp_save_opts o = {.async = 1, .copy = 1};
		dcp_saver *sv = dcp_save_begin(dir, r, 3, it, n, &o, &err);
		if (!sv)
			fail_msg("%s", err.msg);
		/* With copy, the caller may reuse its buffers at once. */
		memset(slab, 0xff, sizeof(float) * (size_t)(6 * w * 4));
		if (dcp_save_wait(sv, &err))
			fail_msg("%s", err.msg);
		free(slab);
		free(b1);
	}
	assert_int_equal(dcp_latest_step(tmpdir, &err), -1); /* not committed yet */
	if (dcp_save_commit(dir, 3, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(dcp_latest_step(tmpdir, &err), 5);

	dcp_ckpt ck;
	assert_int_equal(dcp_open(&ck, dir, &err), 0);
	assert_int_equal(dcp_verify(&ck, &err), 0);
	const dcp_entry *e = dcp_find(&ck, "layers.0.w");
	assert_int_equal(e->n_chunks, 3);
	/* Random boxes, in float32 and converted to float64. */
	uint32_t seed = 99;
	printf("# seed %u\n", seed);
	for (int trial = 0; trial < 200; trial++) {
		int64_t off[3], sz[3];
		for (int d = 0; d < 3; d++) {
			seed = seed * 1103515245u + 12345u;
			off[d] = (int64_t)((seed >> 8) % (uint32_t)shape[d]);
			seed = seed * 1103515245u + 12345u;
			sz[d] = 1 + (int64_t)((seed >> 8) % (uint32_t)(shape[d] - off[d]));
		}
		double got[240];
		for (int i = 0; i < 240; i++)
			got[i] = NAN; /* poison */
		if (dcp_read_region(&ck, e, off, sz, PTZ_F64, got, &err))
			fail_msg("%s", err.msg);
		int64_t k = 0;
		for (int64_t a = 0; a < sz[0]; a++)
			for (int64_t b = 0; b < sz[1]; b++)
				for (int64_t c = 0; c < sz[2]; c++, k++)
					assert_true(got[k] == (double)full[((off[0] + a) * 10 + off[1] + b) * 4 + off[2] + c]);
	}
	dcp_close(&ck);

	/* dcp_load: another sharding (dim 0 halves), bf16, an absent optional key. */
	uint16_t half[120], want[120];
	dcp_item li[4];
	memset(li, 0, sizeof li);
	li[0].fqn = "layers.0.w";
	li[0].kind = DCP_TENSOR;
	li[0].dtype = PTZ_BF16;
	li[0].ndim = 3;
	memcpy(li[0].shape, shape, sizeof shape);
	memcpy(li[0].sizes, shape, sizeof shape);
	li[0].offsets[0] = 3;
	li[0].sizes[0] = 3;
	li[0].data = half;
	li[1].fqn = "train_state.step";
	li[1].kind = DCP_BYTES;
	li[2].fqn = "train_state.ntokens_seen";
	li[2].kind = DCP_BYTES;
	li[2].optional = 1;
	int64_t got_ints[10];
	int64_t s10[1] = {10};
	dcp_item_full(&li[3], "optimizer.state.layers.0.w.step_count", PTZ_I64, 1, s10, got_ints);
	if (dcp_load(dir, li, 4, &err))
		fail_msg("%s", err.msg);
	ptz_convert(want, PTZ_BF16, full + 120, PTZ_F32, 120);
	assert_memory_equal(half, want, sizeof half);
	assert_memory_equal(got_ints, ints, sizeof ints);
	int64_t step;
	assert_int_equal(dcp_value_get_int(li[1].bytes, li[1].nbytes, &step, &err), 0);
	assert_int_equal(step, 123456789012LL);
	assert_int_equal(li[2].found, 0);
	free(li[1].bytes);

	/* A wrong global shape is refused with both shapes in the message. */
	li[0].shape[2] = 5;
	assert_int_equal(dcp_load(dir, li, 1, &err), -1);
	assert_non_null(strstr(err.msg, "(6, 10, 4)"));
}

static void interrupted_save_keeps_the_previous_checkpoint(void **state)
{
	(void)state;
	char folder[300], d1[320], d2[320];
	snprintf(folder, sizeof folder, "%s/ckpts", tmpdir);
	snprintf(d1, sizeof d1, "%s/step-1", folder);
	snprintf(d2, sizeof d2, "%s/step-2", folder);
	titan_err err;
	float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
	int64_t s4[1] = {4};
	dcp_item it;
	dcp_item_full(&it, "w", PTZ_F32, 1, s4, a);
	assert_int_equal(dcp_save(d1, &it, 1, NULL, &err), 0);
	/* Step 2 on 2 ranks: rank 1 dies before writing, so the commit must fail
	 * and leave only step-2.partial behind. */
	dcp_item_full(&it, "w", PTZ_F32, 1, s4, b);
	it.sizes[0] = 2;
	dcp_saver *sv = dcp_save_begin(d2, 0, 2, &it, 1, NULL, &err);
	assert_non_null(sv);
	assert_int_equal(dcp_save_wait(sv, &err), 0);
	assert_int_equal(dcp_save_commit(d2, 2, &err), -1);
	assert_non_null(strstr(err.msg, "rank 1"));
	assert_int_equal(dcp_latest_step(folder, &err), 1);
	float got[4] = {0};
	dcp_item_full(&it, "w", PTZ_F32, 1, s4, got);
	assert_int_equal(dcp_load(d1, &it, 1, &err), 0);
	assert_memory_equal(got, a, sizeof a);
	/* Saving step 1 again replaces it whole. */
	dcp_item_full(&it, "w", PTZ_F32, 1, s4, b);
	assert_int_equal(dcp_save(d1, &it, 1, NULL, &err), 0);
	dcp_item_full(&it, "w", PTZ_F32, 1, s4, got);
	assert_int_equal(dcp_load(d1, &it, 1, &err), 0);
	assert_memory_equal(got, b, sizeof b);
	/* keep_latest_k: steps 3..6 committed; keep 2 -> 5 and 6 remain, and the
	 * dead step-2.partial is removed. */
	for (int s = 3; s <= 6; s++) {
		char d[340];
		snprintf(d, sizeof d, "%s/step-%d", folder, s);
		dcp_item_full(&it, "w", PTZ_F32, 1, s4, a);
		assert_int_equal(dcp_save(d, &it, 1, NULL, &err), 0);
	}
	assert_int_equal(dcp_purge(folder, 2, &err), 0);
	struct stat st;
	char p[360];
	snprintf(p, sizeof p, "%s/step-4", folder);
	assert_int_not_equal(stat(p, &st), 0);
	snprintf(p, sizeof p, "%s/step-5/.metadata", folder);
	assert_int_equal(stat(p, &st), 0);
	snprintf(p, sizeof p, "%s/step-2.partial", folder);
	assert_int_not_equal(stat(p, &st), 0);
	assert_int_equal(dcp_latest_step(folder, &err), 6);
}

static void torchtitan_values_in_torch_checkpoint_read_back(void **state)
{
	(void)state;
	dcp_item it[5];
	memset(it, 0, sizeof it);
	const char *keys[] = {"train_state.step", "train_state.ntokens_seen", "lr_scheduler.last_epoch",
			      "dataloader.dp_rank_0", "lr_scheduler._last_lr"};
	for (int i = 0; i < 5; i++) {
		it[i].fqn = keys[i];
		it[i].kind = DCP_BYTES;
	}
	titan_err err;
	if (dcp_load(GOLDEN "/torch_new", it, 5, &err))
		fail_msg("%s", err.msg);
	int64_t v;
	assert_int_equal(dcp_value_get_int(it[0].bytes, it[0].nbytes, &v, &err), 0);
	assert_int_equal(v, 2);
	assert_int_equal(dcp_value_get_int(it[1].bytes, it[1].nbytes, &v, &err), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(dcp_value_get_int(it[2].bytes, it[2].nbytes, &v, &err), 0);
	assert_int_equal(v, 2);
	pk_val *x;
	pk_arena *a;
	assert_int_equal(dcp_value_load(it[3].bytes, it[3].nbytes, &x, &a, &err), 0);
	uint8_t want[64];
	size_t wn = unhex("80049513000000000000007d948c0a73616d706c655f696478944b07732e", want);
	assert_int_equal(x->kind, PK_BYTES);
	assert_int_equal(x->len, wn);
	assert_memory_equal(x->s, want, wn);
	pk_free(a);
	assert_int_equal(dcp_value_load(it[4].bytes, it[4].nbytes, &x, &a, &err), 0);
	assert_true(x->kind == PK_LIST && x->n == 1 && x->items[0]->f == 0.0006000000000000001);
	pk_free(a);
	for (int i = 0; i < 5; i++)
		free(it[i].bytes);
	/* AdamW's step is a 0-dim float32 tensor. */
	float step = 0;
	dcp_item s;
	dcp_item_full(&s, "optimizer.state.layers.0.attention.wq.weight.step", PTZ_F32, 0, NULL, &step);
	assert_int_equal(dcp_load(GOLDEN "/torch_new", &s, 1, &err), 0);
	assert_true(step == 2.0f);
}

static void value_helpers_round_trip(void **state)
{
	(void)state;
	titan_err err;
	uint8_t *p;
	size_t n;
	double d;
	int64_t i;
	assert_int_equal(dcp_value_float(8e-4, &p, &n, &err), 0);
	assert_int_equal(dcp_value_get_float(p, n, &d, &err), 0);
	assert_true(d == 8e-4);
	free(p);
	assert_int_equal(dcp_value_bool(1, &p, &n, &err), 0);
	assert_int_equal(dcp_value_get_int(p, n, &i, &err), 0);
	assert_int_equal(i, 1);
	free(p);
	double lrs[2] = {0.1, 0.2};
	assert_int_equal(dcp_value_floats(lrs, 2, 1, &p, &n, &err), 0);
	pk_val *v;
	pk_arena *a;
	assert_int_equal(dcp_value_load(p, n, &v, &a, &err), 0);
	assert_true(v->kind == PK_TUPLE && v->n == 2 && v->items[1]->f == 0.2);
	pk_free(a);
	free(p);
	assert_int_equal(dcp_value_none(&p, &n, &err), 0);
	assert_int_equal(dcp_value_get_int(p, n, &i, &err), -1);
	free(p);
}

/* Build a safetensors image from a header string and a data length. */
static size_t st_image(uint8_t *buf, const char *hdr, size_t data)
{
	uint64_t n = strlen(hdr);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)(n >> (8 * i));
	memcpy(buf + 8, hdr, n);
	memset(buf + 8 + n, 0, data);
	return 8 + n + data;
}

static void safetensors_validation_rejects_malformed_files(void **state)
{
	(void)state;
	static const struct {
		const char *hdr;
		size_t data;
		const char *why;
	} bad[] = {
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "cover"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "need"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "starts at"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "starts at"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "JSON"},
		{"[1]", 0, "start"},
		{"{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype"},
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		uint8_t buf[512];
		size_t n = st_image(buf, bad[k].hdr, bad[k].data);
		st_file f;
		titan_err err;
		assert_int_equal(st_parse(&f, buf, n, &err), -1);
		if (!strstr(err.msg, bad[k].why))
			fail_msg("case %zu: '%s' lacks '%s'", k, err.msg, bad[k].why);
	}
	uint8_t buf[64] = {0x00, 0x10, 0, 0, 0, 0, 0, 0};
	st_file f;
	titan_err err;
	assert_int_equal(st_parse(&f, buf, sizeof buf, &err), -1);
	assert_non_null(strstr(err.msg, "runs past"));
	uint8_t ok[512];
	size_t n = st_image(ok, "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2],"
				"\"data_offsets\":[4,8]},\"a\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}    ", 8);
	assert_int_equal(st_parse(&f, ok, n, &err), 0);
	assert_string_equal(st_meta_get(&f, "format"), "pt");
	assert_string_equal(f.t[0].name, "a");
	st_close(&f);
}

/* The zip CRC-32 one bit at a time, from its definition (reflected 0xEDB88320,
 * initial and final inversion): the reference for ptz_crc32 (libdeflate's
 * kernels) and ptz_crc32_combine. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
	}
	return ~c;
}

/* Every length to 300 and some long ones, at every alignment to 16, in one
 * call and split in two (crc extended, and joined with ptz_crc32_combine);
 * and 40 MiB, which ptz_crc32 splits across threads. */
static void zip_crc32_matches_the_bitwise_definition(void **state)
{
	(void)state;
	const size_t cap = ((size_t)40 << 20) + 64;
	uint8_t *buf = malloc(cap);
	assert_non_null(buf);
	unsigned seed = 7;
	printf("# seed %u\n", seed);
	srand(seed);
	for (size_t i = 0; i < cap; i++)
		buf[i] = (uint8_t)rand();
	assert_int_equal(ptz_crc32(0, "123456789", 9), 0xCBF43926u);
	size_t longs[] = {1000, 4095, 65536 + 7, (size_t)1 << 20};
	for (size_t n = 0; n < 300 + 4; n++) {
		size_t len = n < 300 ? n : longs[n - 300];
		for (size_t a = 0; a < 16; a++) {
			uint32_t want = crc_bitwise(buf + a, len);
			if (ptz_crc32(0, buf + a, len) != want)
				fail_msg("length %zu at alignment %zu", len, a);
			size_t h = len / 3;
			uint32_t head = ptz_crc32(0, buf + a, h);
			if (ptz_crc32(head, buf + a + h, len - h) != want ||
			    ptz_crc32_combine(head, ptz_crc32(0, buf + a + h, len - h), len - h) != want)
				fail_msg("length %zu at alignment %zu, split at %zu", len, a, h);
		}
	}
	assert_int_equal(ptz_crc32(0, buf + 3, cap - 64), crc_bitwise(buf + 3, cap - 64));
	free(buf);
}

/* xor one byte of a file with 1. */
static void flip_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	assert_true(c != EOF);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	assert_int_equal(fputc(c ^ 1, f), c ^ 1);
	assert_int_equal(fclose(f), 0);
}

/* Large chunks are read in 32 MiB pieces (1 MiB a read) by several threads
 * at once, each piece's CRC-32 joined into the record's: what comes back
 * must be the saved bytes, whether a box is whole chunks (pieces of two
 * files in flight) or a part of one (the mapped path), and a flipped byte in
 * any piece must fail the load with the file, the tensor and the CRC named. */
static void parallel_read_returns_saved_bytes_and_refuses_a_flipped_byte(void **state)
{
	(void)state;
	const int64_t rows = 5000, cols = 4096; /* 78 MiB: 3 pieces whole, 2 per rank's half */
	int64_t shape[2] = {rows, cols};
	size_t n = (size_t)(rows * cols);
	unsigned seed = 20261205;
	printf("# seed %u\n", seed);
	srand(seed);
	float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *got = malloc(n * sizeof *got);
	assert_true(a && b && got);
	for (size_t i = 0; i < n; i++) {
		a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		b[i] = (float)rand();
	}
	char dir[300];
	snprintf(dir, sizeof dir, "%s/step-9", tmpdir);
	titan_err err;
	/* and 80 small tensors, so that a load plans more blocks than its first
	 * allocation holds */
	enum { NS = 80 };
	int64_t sshape[1] = {256};
	char snames[NS][16];
	dcp_item it[2 + NS], want[2 + NS];
	for (int k = 0; k < NS; k++)
		snprintf(snames[k], sizeof snames[k], "s.%d", k);
	for (int r = 0; r < 2; r++) {
		dcp_item_full(&it[0], "a", PTZ_F32, 2, shape, a + (size_t)r * n / 2);
		it[0].offsets[0] = r * rows / 2;
		it[0].sizes[0] = rows / 2;
		dcp_item_full(&it[1], "b", PTZ_F32, 2, shape, b);
		for (int k = 0; k < NS; k++)
			dcp_item_full(&it[2 + k], snames[k], PTZ_F32, 1, sshape, b + 256 * k);
		dcp_saver *sv = dcp_save_begin(dir, r, 2, it, r == 0 ? 2 + NS : 1, NULL, &err);
		if (!sv || dcp_save_wait(sv, &err))
			fail_msg("%s", err.msg);
	}
	if (dcp_save_commit(dir, 2, &err))
		fail_msg("%s", err.msg);

	dcp_item_full(&want[0], "a", PTZ_F32, 2, shape, got);
	memset(got, 0xff, n * sizeof *got);
	if (dcp_load(dir, want, 1, &err))
		fail_msg("%s", err.msg);
	assert_memory_equal(got, a, n * sizeof *a); /* both ranks' chunks, 4 pieces */
	dcp_item_full(&want[1], "b", PTZ_F32, 2, shape, got);
	memset(got, 0xff, n * sizeof *got);
	if (dcp_load(dir, &want[1], 1, &err))
		fail_msg("%s", err.msg);
	assert_memory_equal(got, b, n * sizeof *b); /* one chunk, 3 pieces */
	want[0].offsets[0] = 1000; /* parts of both chunks: the mapped path */
	want[0].sizes[0] = 3000;
	memset(got, 0xff, n * sizeof *got);
	if (dcp_load(dir, want, 1, &err))
		fail_msg("%s", err.msg);
	assert_memory_equal(got, a + 1000 * cols, (size_t)(3000 * cols) * sizeof *a);

	/* rank 1's file holds only its half of "a": 39 MiB of storage, the second
	 * 32 MiB piece from 32 MiB on; flip a byte in each piece in turn */
	dcp_ckpt c;
	if (dcp_open(&c, dir, &err))
		fail_msg("%s", err.msg);
	const dcp_entry *e = dcp_find(&c, "a");
	assert_non_null(e);
	const dcp_chunk *ch = e->chunks[0].offsets[0] ? &e->chunks[0] : &e->chunks[1];
	long at[2] = {(long)(ch->offset + ch->length / 4), (long)(ch->offset + ch->length - 1000000)};
	char path[400];
	snprintf(path, sizeof path, "%s/%s", dir, ch->file);
	dcp_close(&c);
	float *small = malloc(NS * 256 * sizeof *small);
	assert_non_null(small);
	for (int k = 0; k < 2; k++) {
		flip_byte(path, at[k]);
		for (int j = 0; j < NS; j++) /* the small ones first, "a" last */
			dcp_item_full(&want[j], snames[j], PTZ_F32, 1, sshape, small + 256 * j);
		dcp_item_full(&want[NS], "a", PTZ_F32, 2, shape, got);
		assert_int_equal(dcp_load(dir, want, NS + 1, &err), -1);
		printf("# flip %d: %s\n", k, err.msg);
		if (!strstr(err.msg, "__1_0.distcp at ") || !strstr(err.msg, "(a)") ||
		    !strstr(err.msg, "/data/0: CRC-32") || !strstr(err.msg, "expected"))
			fail_msg("flip %d: '%s' does not name the file, the tensor and the CRC", k, err.msg);
		flip_byte(path, at[k]);
		memset(got, 0xff, n * sizeof *got);
		memset(small, 0xff, NS * 256 * sizeof *small);
		if (dcp_load(dir, want, NS + 1, &err))
			fail_msg("flip %d undone: %s", k, err.msg);
		assert_memory_equal(got, a, n * sizeof *a);
		assert_memory_equal(small, b, NS * 256 * sizeof *small);
	}
	free(small);
	free(a);
	free(b);
	free(got);
}

/* rank r of 3 loads rows [4r, 4r + 4) of w (a chunk saved whole) with
 * dcp_load_parts into got; its parts appended to *parts; 0 or -1. */
static int load_rows(const char *dir, int r, int64_t cols, float *got, dcp_parts *parts,
		     titan_err *err)
{
	int64_t shape[2] = {12, cols};
	dcp_item want;
	dcp_item_full(&want, "w", PTZ_F32, 2, shape, got);
	want.offsets[0] = 4 * r;
	want.sizes[0] = 4;
	dcp_ckpt c;
	if (dcp_open(&c, dir, err))
		return -1;
	int rc = dcp_load_parts(&c, &want, 1, parts, err);
	dcp_close(&c);
	return rc;
}

/* Every rank's parts, gathered (ranks absent: those whose parts are NULL). */
static dcp_part *gather(dcp_parts *const *ranks, int n, size_t *n_all)
{
	size_t total = 0, at = 0;
	for (int r = 0; r < n; r++)
		total += ranks[r] ? ranks[r]->n : 0;
	dcp_part *all = malloc((total ? total : 1) * sizeof *all);
	assert_non_null(all);
	for (int r = 0; r < n; r++)
		for (size_t i = 0; ranks[r] && i < ranks[r]->n; i++)
			all[at++] = ranks[r]->p[i];
	*n_all = total;
	return all;
}

/* A shared load (dcp_load_parts): 3 ranks each read only their 4 rows of a
 * tensor saved whole, and the record is checked by joining their parts'
 * CRC-32s.  A byte flipped in rank 2's rows fails every rank's check, rank
 * 0's and 1's included, though they never read it; parts that do not tile
 * the record (a rank missing, rows read twice, the same rows read twice
 * differently) are checked by reading the record whole; rows of a chunk that
 * are not whole rows are no part. */
static void shared_load_checks_each_record_with_every_ranks_parts(void **state)
{
	(void)state;
	const int64_t cols = 3000;
	int64_t shape[2] = {12, cols};
	size_t n = (size_t)(12 * cols), row = (size_t)cols * sizeof(float);
	float *w = malloc(n * sizeof *w), *got = malloc(n * sizeof *got);
	assert_true(w && got);
	for (size_t i = 0; i < n; i++)
		w[i] = (float)i * 0.25f - 7.0f;
	char dir[300];
	snprintf(dir, sizeof dir, "%s/step-shared", tmpdir);
	titan_err err;
	dcp_item it;
	dcp_item_full(&it, "w", PTZ_F32, 2, shape, w);
	if (dcp_save(dir, &it, 1, NULL, &err))
		fail_msg("%s", err.msg);

	dcp_parts parts[3] = {{0}};
	dcp_parts *ranks[3] = {&parts[0], &parts[1], &parts[2]};
	memset(got, 0xff, n * sizeof *got);
	for (int r = 0; r < 3; r++) {
		if (load_rows(dir, r, cols, got + (size_t)r * 4 * (size_t)cols, &parts[r], &err))
			fail_msg("rank %d: %s", r, err.msg);
		assert_int_equal(parts[r].n, 1);
		assert_int_equal(parts[r].p[0].off, (uint64_t)r * 4 * row); /* its rows alone */
		assert_int_equal(parts[r].p[0].len, 4 * row);
		assert_int_equal(parts[r].p[0].record_len, 12 * row);
	}
	assert_memory_equal(got, w, n * sizeof *w);
	size_t n_all;
	dcp_part *all = gather(ranks, 3, &n_all);
	for (int r = 0; r < 3; r++)
		if (dcp_parts_check(dir, &parts[r], all, n_all, &err))
			fail_msg("rank %d: %s", r, err.msg);
	/* the check joins what the ranks read, no second read: a byte flipped
	 * after the reads goes unseen by it */
	char path[400];
	snprintf(path, sizeof path, "%s/%.*s", dir, (int)sizeof parts[0].p[0].file, parts[0].p[0].file);
	long flip_at = (long)(parts[0].p[0].record + 9 * row + 17);
	flip_byte(path, flip_at);
	if (dcp_parts_check(dir, &parts[0], all, n_all, &err))
		fail_msg("the parts read before the flip: %s", err.msg);

	/* a byte of row 9 (rank 2's) flipped before the reads: every rank refuses */
	for (int r = 0; r < 3; r++) {
		dcp_parts_free(&parts[r]);
		if (load_rows(dir, r, cols, got, &parts[r], &err))
			fail_msg("rank %d: %s", r, err.msg);
	}
	free(all);
	all = gather(ranks, 3, &n_all);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(dcp_parts_check(dir, &parts[r], all, n_all, &err), -1);
		if (!strstr(err.msg, "__0_0.distcp at ") || !strstr(err.msg, "(w): zip: ") ||
		    !strstr(err.msg, "/data/0: CRC-32") || !strstr(err.msg, "(the file is damaged)"))
			fail_msg("rank %d: '%s' does not name the file, the tensor and the CRC", r, err.msg);
	}
	printf("# %s\n", err.msg);
	/* rank 2 absent (it failed): ranks 0 and 1 read the record whole */
	free(all);
	dcp_parts *two[3] = {&parts[0], &parts[1], NULL};
	all = gather(two, 3, &n_all);
	assert_int_equal(dcp_parts_check(dir, &parts[0], all, n_all, &err), -1);
	assert_non_null(strstr(err.msg, "CRC-32"));
	flip_byte(path, flip_at);
	if (dcp_parts_check(dir, &parts[0], all, n_all, &err))
		fail_msg("rank 2 absent, the file undamaged: %s", err.msg);
	free(all);

	/* the file undamaged, the parts not a tiling: rows 2..8 read again (an
	 * overlap), or the same rows with another CRC-32; both read the record */
	for (int r = 0; r < 3; r++) {
		dcp_parts_free(&parts[r]);
		if (load_rows(dir, r, cols, got, &parts[r], &err))
			fail_msg("rank %d: %s", r, err.msg);
	}
	dcp_part o = parts[1].p[0];
	o.off = 2 * row;
	o.len = 6 * row;
	o.crc = 0x1234; /* not these rows' CRC: were it used, the check would fail */
	dcp_parts odd = {.p = &o, .n = 1}; /* another rank's, as gathered */
	dcp_parts *over[4] = {&parts[0], &parts[1], &parts[2], &odd};
	all = gather(over, 4, &n_all);
	if (dcp_parts_check(dir, &parts[0], all, n_all, &err))
		fail_msg("overlapping parts, the file undamaged: %s", err.msg);
	free(all);
	o = parts[1].p[0];
	o.crc ^= 1;
	all = gather(over, 4, &n_all);
	if (dcp_parts_check(dir, &parts[1], all, n_all, &err))
		fail_msg("rows read twice, differently, the file undamaged: %s", err.msg);
	free(all);

	/* columns, not whole rows: no part, the record read whole and checked */
	dcp_parts cols_parts = {0};
	dcp_item half;
	dcp_item_full(&half, "w", PTZ_F32, 2, shape, got);
	half.sizes[1] = cols / 2;
	dcp_ckpt c;
	if (dcp_open(&c, dir, &err) || dcp_load_parts(&c, &half, 1, &cols_parts, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(cols_parts.n, 0);
	flip_byte(path, flip_at);
	assert_int_equal(dcp_load_parts(&c, &half, 1, &cols_parts, &err), -1);
	assert_non_null(strstr(err.msg, "CRC-32"));
	dcp_close(&c);
	for (int r = 0; r < 3; r++)
		dcp_parts_free(&parts[r]);
	free(w);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pickle_reads_every_protocol_python_writes),
		cmocka_unit_test(pickle_refuses_globals_outside_the_allowlist),
		cmocka_unit_test(pickle_rejects_truncated_and_unbalanced_streams),
		cmocka_unit_test(pickle_writer_output_reads_back_equal),
		cmocka_unit_test(float_casts_round_like_torch),
		cmocka_unit_test(torch_save_zip_has_64_byte_aligned_records),
		cmocka_unit_test(torch_written_file_reads_and_is_aligned),
		cmocka_unit_test(save_by_ranks_then_load_any_box),
		cmocka_unit_test(interrupted_save_keeps_the_previous_checkpoint),
		cmocka_unit_test(zip_crc32_matches_the_bitwise_definition),
		cmocka_unit_test(parallel_read_returns_saved_bytes_and_refuses_a_flipped_byte),
		cmocka_unit_test(shared_load_checks_each_record_with_every_ranks_parts),
		cmocka_unit_test(torchtitan_values_in_torch_checkpoint_read_back),
		cmocka_unit_test(value_helpers_round_trip),
		cmocka_unit_test(safetensors_validation_rejects_malformed_files),
	};
	return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
