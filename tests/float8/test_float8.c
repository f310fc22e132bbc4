/* lib/float8 against torch and torchao themselves: scripts/float8_golden.py
 * wrote tests/float8/golden/ with torch's float8 casts, torchao's scale
 * functions, its recipes and filters, and Float8Linear(emulate=True)'s
 * forward and backward on three shapes.
 *
 * What must be exact: every conversion (all 256 codes, 11310 float32 inputs:
 * ties, ulp neighbours, overflow, subnormals, NaN payloads, random bits),
 * every scale, every float8 byte of every operand of every GEMM.  What may
 * differ: the GEMM outputs, by float32 summation order alone (torch's sgemm
 * against OpenBLAS's on the same dequantized operands); their max|a - b| /
 * max|b| is printed and held below TOL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float8/float8.h"
#include "golden_io.h"

#define TOL 1e-5

static const char *const FMTS[2] = {"e4m3fn", "e5m2"};

static json_t *index_json;

static int load_index(void **state)
{
	(void)state;
	index_json = f8_golden_index();
	return index_json == NULL;
}

static int free_index(void **state)
{
	(void)state;
	json_decref(index_json);
	return 0;
}


static void every_code_decodes_as_torch_reads_it(void **state)
{
	(void)state;
	for (int f = 0; f < 2; f++) {
		char key[32];
		snprintf(key, sizeof key, "codes_%s", FMTS[f]);
		float *want = read_golden(index_json, key, 4, 256);
		for (int c = 0; c < 256; c++)
			if (!same_float(f8_to_float((uint8_t)c, (f8_format)f), want[c]))
				fail_msg("%s code 0x%02x: %g, torch %g", FMTS[f], c,
					 f8_to_float((uint8_t)c, (f8_format)f), want[c]);
		snprintf(key, sizeof key, "max_%s", FMTS[f]);
		assert_true(f8_max((f8_format)f) == json_real_value(at(index_json, key)));
		free(want);
	}
}

static void every_finite_code_survives_a_round_trip(void **state)
{
	(void)state;
	for (int f = 0; f < 2; f++)
		for (int c = 0; c < 256; c++) {
			float v = f8_to_float((uint8_t)c, (f8_format)f);
			if (isfinite(v))
				assert_int_equal(f8_from_float(v, (f8_format)f), c);
		}
}

static void casts_match_torch_and_to_fp8_saturated_bit_for_bit(void **state)
{
	(void)state;
	const json_t *c = at(index_json, "cast");
	size_t n = num(c, "n");
	uint32_t *in = read_golden(c, "in", 4, n);
	for (int f = 0; f < 2; f++) {
		char key[32];
		uint8_t *plain = read_golden(c, FMTS[f], 1, n);
		snprintf(key, sizeof key, "%s_sat", FMTS[f]);
		uint8_t *sat = read_golden(c, key, 1, n);
		size_t bad = 0;
		for (size_t i = 0; i < n; i++) {
			float x;
			memcpy(&x, &in[i], sizeof x);
			uint8_t p = f8_from_float(x, (f8_format)f), s = f8_from_float_sat(x, (f8_format)f);
			if (p != plain[i] || s != sat[i]) {
				if (bad++ < 5)
					print_message("%s: 0x%08x (%.9g): titan 0x%02x/0x%02x, torch "
						      "0x%02x/0x%02x\n", FMTS[f], in[i], x, p, s,
						      plain[i], sat[i]);
			}
		}
		print_message("%s: %zu float32 inputs, %zu casts differ from torch\n", FMTS[f], n, bad);
		assert_int_equal(bad, 0);
		free(plain);
		free(sat);
	}
	free(in);
}

static void scales_match_amax_to_scale_bit_for_bit(void **state)
{
	(void)state;
	const json_t *c = at(index_json, "scale");
	size_t n = num(c, "n");
	assert_true(json_real_value(at(c, "eps")) == F8_SCALE_EPS);
	float *amax = read_golden(c, "amax", 4, n);
	for (int f = 0; f < 2; f++)
		for (int p = 0; p < 2; p++) {
			char key[32];
			snprintf(key, sizeof key, "%s%s", FMTS[f], p ? ".pow2" : "");
			float *want = read_golden(c, key, 4, n);
			for (size_t i = 0; i < n; i++) {
				float s = f8_amax_to_scale(amax[i], (f8_format)f, p);
				if (!same_float(s, want[i]))
					fail_msg("%s amax %.9g: scale %.9g, torchao %.9g", key, amax[i],
						 s, want[i]);
			}
			free(want);
		}
	free(amax);
}

static void pow2_rounding_matches_torch_near_every_power_of_two(void **state)
{
	(void)state;
	const json_t *c = at(index_json, "pow2");
	size_t n = num(c, "n"), up = 0;
	float *in = read_golden(c, "in", 4, n), *want = read_golden(c, "out", 4, n);
	for (size_t i = 0; i < n; i++) {
		float s = f8_round_scale_pow2(in[i]);
		if (!same_float(s, want[i]))
			fail_msg("scale %.9g: %.9g, torch %.9g", in[i], s, want[i]);
		up += s > in[i];
	}
	/* The trap the header names: torch's float32 log2 rounds some scales up. */
	print_message("%zu scales near powers of two, %zu rounded up as torch does\n", n, up);
	assert_true(up > 0);
	free(in);
	free(want);
}

static void recipes_are_torchaos_cast_configs(void **state)
{
	(void)state;
	static const char *const ops[F8_N_OPERANDS] = {
		[F8_INPUT] = "input", [F8_WEIGHT] = "weight", [F8_GRAD_OUTPUT] = "grad_output",
		[F8_WEIGHT_GI] = "weight_gi", [F8_GRAD_OUTPUT_GW] = "grad_output_gw",
		[F8_INPUT_GW] = "input_gw"};
	const char *name;
	json_t *want;
	json_object_foreach(at(index_json, "recipes"), name, want) {
		f8_recipe r;
		titan_err e = {0};
		if (f8_recipe_get(&r, name, &e))
			fail_msg("%s", e.msg);
		assert_string_equal(r.name, name);
		assert_int_equal(r.pow2_scales,
				 json_boolean_value(at(want, "round_scales_to_power_of_2")));
		for (int op = 0; op < F8_N_OPERANDS; op++) {
			const json_t *cc = at(want, ops[op]);
			bool f8 = json_boolean_value(at(cc, "float8"));
			assert_int_equal(r.cast[op].float8, f8);
			if (!f8)
				continue;
			assert_string_equal(f8_format_name(r.cast[op].fmt),
					    json_string_value(at(cc, "dtype")));
			assert_string_equal(r.cast[op].axiswise ? "axiswise" : "tensorwise",
					    json_string_value(at(cc, "granularity")));
		}
	}
	f8_recipe r;
	titan_err e = {0};
	assert_int_equal(f8_recipe_get(&r, NULL, &e), 0);
	assert_string_equal(r.name, "tensorwise");
	assert_int_equal(f8_recipe_get(&r, "blockwise", &e), -1);
	assert_non_null(strstr(e.msg, "rowwise_with_gw_hp"));
}

static void filter_decides_as_torchtitan_and_torchao(void **state)
{
	(void)state;
	const json_t *flt = at(index_json, "filter"), *lin = at(flt, "linears");
	size_t i;
	json_t *cfg;
	json_array_foreach(at(flt, "configs"), i, cfg) {
		const json_t *fq = at(cfg, "filter_fqns");
		size_t nf = json_array_size(fq);
		const char *fqns[16];
		assert_true(nf <= 16);
		for (size_t j = 0; j < nf; j++)
			fqns[j] = json_string_value(json_array_get(fq, j));
		f8_filter f;
		titan_err e = {0};
		if (f8_filter_init(&f, json_string_value(at(cfg, "recipe")), fqns, nf, &e))
			fail_msg("%s", e.msg);
		const json_t *want = at(cfg, "convert");
		for (size_t j = 0; j < json_array_size(lin); j++) {
			const json_t *l = json_array_get(lin, j);
			const char *fqn = json_string_value(json_array_get(l, 0));
			int64_t n = json_integer_value(json_array_get(l, 1));
			int64_t k = json_integer_value(json_array_get(l, 2));
			bool got = f8_filter_convert(&f, fqn, n, k);
			if (got != json_boolean_value(json_array_get(want, j)))
				fail_msg("config %zu, %s (%lld, %lld): %d, torchtitan %d", i, fqn,
					 (long long)n, (long long)k, got, !got);
		}
	}
	const char *autof[] = {"auto_filter_small_kn"};
	f8_filter f;
	titan_err e = {0};
	assert_int_equal(f8_filter_init(&f, "rowwise_with_gw_hp", autof, 1, &e), -1);
	assert_non_null(strstr(e.msg, "rowwise_with_gw_hp"));
}


typedef struct operand {
	const char *name;
	int op;
	char which; /* 'x', 'w' or 'd' (dy) */
} operand;

static const operand OPERANDS[] = {
	{"input", F8_INPUT, 'x'},       {"weight", F8_WEIGHT, 'w'},
	{"grad_output", F8_GRAD_OUTPUT, 'd'}, {"weight_gi", F8_WEIGHT_GI, 'w'},
	{"grad_output_gw", F8_GRAD_OUTPUT_GW, 'd'}, {"input_gw", F8_INPUT_GW, 'x'},
};

/* Every float8 byte and scale of every cast against torchao's. */
static void check_casts(const char *cname, const f8_recipe *r, const json_t *casts,
			const float *x, const float *w, const float *dy, int64_t m, int64_t n,
			int64_t k)
{
	for (size_t i = 0; i < sizeof OPERANDS / sizeof OPERANDS[0]; i++) {
		const operand *o = &OPERANDS[i];
		f8_scaling s = f8_operand_scaling(r, o->op);
		const json_t *want = json_object_get(casts, o->name);
		assert_int_equal(s == F8_NONE, want == NULL);
		if (want == NULL)
			continue;
		const float *src = o->which == 'x' ? x : o->which == 'w' ? w : dy;
		int64_t rows = o->which == 'w' ? n : m, cols = o->which == 'x' ? k : o->which == 'w' ? k : n;
		int64_t ns = f8_n_scales(s, rows, cols);
		assert_int_equal(ns, num(want, "n_scales"));
		float *scale = malloc(sizeof(float) * (size_t)ns);
		uint8_t *q = malloc((size_t)(rows * cols));
		float *deq = malloc(sizeof(float) * (size_t)(rows * cols));
		float *fake = malloc(sizeof(float) * (size_t)(rows * cols));
		f8_format fmt = r->cast[o->op].fmt;
		f8_scales(scale, src, rows, cols, s, fmt, r->pow2_scales);
		f8_quantize(q, src, scale, rows, cols, s, fmt);
		float *wscale = read_golden(want, "scale", 4, (size_t)ns);
		uint8_t *wq = read_golden(want, "bits", 1, (size_t)(rows * cols));
		for (int64_t j = 0; j < ns; j++)
			if (!same_float(scale[j], wscale[j]))
				fail_msg("%s %s %s: scale %lld %.9g, torchao %.9g", cname, r->name,
					 o->name, (long long)j, scale[j], wscale[j]);
		for (int64_t j = 0; j < rows * cols; j++)
			if (q[j] != wq[j])
				fail_msg("%s %s %s: byte %lld 0x%02x, torchao 0x%02x", cname, r->name,
					 o->name, (long long)j, q[j], wq[j]);
		f8_dequantize(deq, q, scale, rows, cols, s, fmt);
		f8_fake_quantize(fake, src, scale, rows, cols, s, fmt);
		assert_memory_equal(deq, fake, sizeof(float) * (size_t)(rows * cols));
		free(scale);
		free(q);
		free(deq);
		free(fake);
		free(wscale);
		free(wq);
	}
}

static void linear_case(const char *cname)
{
	const json_t *c = at(at(index_json, "linear"), cname);
	int64_t m = (int64_t)num(c, "m"), n = (int64_t)num(c, "n"), k = (int64_t)num(c, "k");
	float *x = read_golden(c, "x", 4, (size_t)(m * k));
	float *w = read_golden(c, "w", 4, (size_t)(n * k));
	float *dy = read_golden(c, "dy", 4, (size_t)(m * n));
	float *y = malloc(sizeof(float) * (size_t)(m * n));
	float *dx = malloc(sizeof(float) * (size_t)(m * k));
	float *dw = malloc(sizeof(float) * (size_t)(n * k));
	float *ws = malloc(sizeof(float) * f8_linear_ws_floats(m, n, k));
	const char *rname;
	json_t *rc;
	json_object_foreach(at(c, "recipes"), rname, rc) {
		f8_recipe r;
		titan_err e = {0};
		if (f8_recipe_get(&r, rname, &e))
			fail_msg("%s", e.msg);
		check_casts(cname, &r, at(rc, "casts"), x, w, dy, m, n, k);
		for (int64_t i = 0; i < m * n; i++)
			y[i] = NAN;
		for (int64_t i = 0; i < m * k; i++)
			dx[i] = NAN;
		memset(dw, 0, sizeof(float) * (size_t)(n * k));
		f8_linear_forward(&r, y, x, w, m, n, k, ws);
		f8_linear_backward(&r, dx, dw, dy, x, w, m, n, k, ws);
		float *wy = read_golden(rc, "y", 4, (size_t)(m * n));
		float *wdx = read_golden(rc, "dx", 4, (size_t)(m * k));
		float *wdw = read_golden(rc, "dw", 4, (size_t)(n * k));
		double ey = rel_err(y, wy, (size_t)(m * n)), edx = rel_err(dx, wdx, (size_t)(m * k));
		double edw = rel_err(dw, wdw, (size_t)(n * k));
		print_message("%s (M %lld, K %lld, N %lld) %-18s vs torchao emulate: y %.2e  dx %.2e  "
			      "dw %.2e\n", cname, (long long)m, (long long)k, (long long)n, rname, ey,
			      edx, edw);
		assert_true(ey < TOL && edx < TOL && edw < TOL);
		free(wy);
		free(wdx);
		free(wdw);
	}
	free(x);
	free(w);
	free(dy);
	free(y);
	free(dx);
	free(dw);
	free(ws);
}

static void linear_small_matches_float8linear_emulate(void **state)
{
	(void)state;
	linear_case("small");
}

static void linear_batched_input_matches_float8linear_emulate(void **state)
{
	(void)state;
	linear_case("batched");
}

static void linear_mid_matches_float8linear_emulate(void **state)
{
	(void)state;
	linear_case("mid");
}

/* FSDP float8 all-gather: shards cast with the all-reduced amax's scale give
 * the bytes of casting the whole weight. */
static void sharded_weight_cast_with_global_amax_equals_whole_cast(void **state)
{
	(void)state;
	const json_t *c = at(at(index_json, "linear"), "mid");
	int64_t n = (int64_t)num(c, "n"), k = (int64_t)num(c, "k"), half = n / 2;
	float *w = read_golden(c, "w", 4, (size_t)(n * k));
	uint8_t *whole = malloc((size_t)(n * k)), *parts = malloc((size_t)(n * k));
	float s, a0, a1;
	f8_scales(&s, w, n, k, F8_TENSOR, F8_E4M3FN, false);
	f8_quantize(whole, w, &s, n, k, F8_TENSOR, F8_E4M3FN);
	f8_amax(&a0, w, half, k, F8_TENSOR);
	f8_amax(&a1, w + half * k, n - half, k, F8_TENSOR);
	float sg = f8_amax_to_scale(a0 > a1 ? a0 : a1, F8_E4M3FN, false);
	assert_true(same_float(sg, s));
	f8_quantize(parts, w, &sg, half, k, F8_TENSOR, F8_E4M3FN);
	f8_quantize(parts + half * k, w + half * k, &sg, n - half, k, F8_TENSOR, F8_E4M3FN);
	assert_memory_equal(whole, parts, (size_t)(n * k));
	free(w);
	free(whole);
	free(parts);
}

/* NaN in an operand poisons its amax, as torch.amax does; zeros give the
 * epsilon's scale and stay zero. */
static void nan_poisons_amax_and_zero_rows_stay_zero(void **state)
{
	(void)state;
	float x[6] = {1, -3, 2, 0, 0, 0}, amax[3], s[2], y[6];
	f8_amax(amax, x, 2, 3, F8_ROWS);
	assert_true(amax[0] == 3 && amax[1] == 0);
	f8_scales(s, x, 2, 3, F8_ROWS, F8_E4M3FN, false);
	assert_true(s[1] == (float)(448.0 / 1e-12));
	f8_fake_quantize(y, x, s, 2, 3, F8_ROWS, F8_E4M3FN);
	assert_true(y[3] == 0 && y[4] == 0 && y[5] == 0 && y[1] == -3);
	x[4] = NAN;
	f8_amax(amax, x, 2, 3, F8_ROWS);
	assert_true(amax[0] == 3 && isnan(amax[1]));
	f8_amax(amax, x, 2, 3, F8_TENSOR);
	assert_true(isnan(amax[0]));
	f8_amax(amax, x, 2, 3, F8_COLS);
	assert_true(amax[0] == 1 && isnan(amax[1]) && amax[2] == 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_code_decodes_as_torch_reads_it),
		cmocka_unit_test(every_finite_code_survives_a_round_trip),
		cmocka_unit_test(casts_match_torch_and_to_fp8_saturated_bit_for_bit),
		cmocka_unit_test(scales_match_amax_to_scale_bit_for_bit),
		cmocka_unit_test(pow2_rounding_matches_torch_near_every_power_of_two),
		cmocka_unit_test(recipes_are_torchaos_cast_configs),
		cmocka_unit_test(filter_decides_as_torchtitan_and_torchao),
		cmocka_unit_test(linear_small_matches_float8linear_emulate),
		cmocka_unit_test(linear_batched_input_matches_float8linear_emulate),
		cmocka_unit_test(linear_mid_matches_float8linear_emulate),
		cmocka_unit_test(sharded_weight_cast_with_global_amax_equals_whole_cast),
		cmocka_unit_test(nan_poisons_amax_and_zero_rows_stay_zero),
	};
	return cmocka_run_group_tests(tests, load_index, free_index);
}
