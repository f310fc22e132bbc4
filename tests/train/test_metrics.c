/* Unit tests of lib/metrics: torchtitan's log line, flops per token, the
 * device peak table and the JSONL file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu_bf16.h"
#include "metrics/metrics.h"
#include "model/flavor.h"

static void log_line_matches_torchtitan_format(void **state)
{
	(void)state;
	metrics_step s = {.step = 5, .loss = 7.123456, .grad_norm = 1.23456, .mem_gib = 0.5234,
			  .mem_pct = 1.6349, .tps = 1234567.4, .tflops = 1234.5678, .mfu = 0.0512};
	char buf[512];
	metrics_format_line(buf, sizeof buf, &s, 0);
	/* Python: f"step: {5:2}  loss: {7.123456:8.5f}  grad_norm: {1.23456:7.4f}  "
	 * f"memory: {0.5234:5.2f}GiB({1.6349:.2f}%)  tps: {round(1234567.4):,}  "
	 * f"tflops: {1234.5678:,.2f}  mfu: {0.0512:.2f}%" */
	assert_string_equal(buf, "step:  5  loss:  7.12346  grad_norm:  1.2346  memory:  0.52GiB(1.63%)"
				 "  tps: 1,234,567  tflops: 1,234.57  mfu: 0.05%");
	s.step = 1000;
	s.tps = 999;
	metrics_format_line(buf, sizeof buf, &s, 1);
	assert_non_null(strstr(buf, "\033[31mstep: 1000  \033[32mloss: "));
	assert_non_null(strstr(buf, "\033[34mtps: 999  \033[36mtflops: "));
	assert_true(strstr(buf, "\033[39m") == buf + strlen(buf) - 5);
}

static void commas_like_python(void **state)
{
	(void)state;
	char b[48];
	int64_t v[] = {0, 7, 999, 1000, 123456, 1234567, -1234, INT64_MIN};
	const char *w[] = {"0", "7", "999", "1,000", "123,456", "1,234,567", "-1,234",
			   "-9,223,372,036,854,775,808"};
	for (int i = 0; i < 8; i++) {
		metrics_commas(b, sizeof b, v[i]);
		assert_string_equal(b, w[i]);
	}
}

static void flops_per_token_of_8b_matches_hand_count(void **state)
{
	(void)state;
	const llama_args *a = flavor_find("8B");
	assert_non_null(a);
	int64_t p = flavor_param_count(a) - flavor_embedding_params(a);
	/* Llama 3 8B: 8,030,261,248 parameters, 525,336,576 of them the embedding. */
	assert_int_equal(flavor_param_count(a), 8030261248LL);
	double f = metrics_flops_per_token(p, 32, 32, 128, 8192);
	assert_true(f == 6.0 * 7504924672.0 + 6.0 * 32 * 32 * 256 * 8192);
}

static void device_table_and_cpu_probe(void **state)
{
	(void)state;
	assert_true(metrics_device_peak_flops("NVIDIA H100 80GB HBM3") == 989e12);
	assert_true(metrics_device_peak_flops("NVIDIA H100 PCIe") == 756e12);
	assert_true(metrics_device_peak_flops("NVIDIA H200") == 989e12);
	assert_true(metrics_device_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12);
	assert_true(metrics_device_peak_flops("some cpu") == 0);
	double p = metrics_cpu_peak_flops();
	assert_true(p > 1e8 && p < 1e15);
	/* the backend's own matmul, in each type the linears compute in */
	titan_err e;
	backend *be = backend_cpu_create(0, &e);
	assert_non_null(be);
	size_t held = be->bytes_in_use;
	double f32 = metrics_matmul_peak_flops(be, BE_F32);
	double bf16 = metrics_matmul_peak_flops(be, BE_BF16);
	print_message("matmul peak: float32 %.3g, bfloat16 %.3g FLOP/s\n", f32, bf16);
	assert_true(f32 > 1e8 && f32 < 1e15 && bf16 > 1e8 && bf16 < 1e16);
	/* the probe frees its buffers; the backend keeps its scratch (the portable
	 * bf16 GEMM's widened operands, for the next GEMM) */
	assert_true(be->bytes_in_use == held + cpu_scratch_bytes(be));
	assert_true(metrics_matmul_peak_flops(be, BE_F32) == f32); /* measured once */
	backend_free(be);
	double gib, pct;
	metrics_cpu_memory(&gib, &pct);
	assert_true(gib > 0 && pct > 0 && pct < 100);
}

static void jsonl_keeps_full_precision(void **state)
{
	(void)state;
	char path[] = "/tmp/titan-metrics-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	metrics_jsonl j;
	titan_err err;
	assert_int_equal(metrics_jsonl_open(&j, path, &err), 0);
	metrics_step s = {.step = 3, .loss = 0.1 + 0.2, .grad_norm = NAN};
	/* 3e12 FLOPs of real work (4e12 in torchtitan's count) in 2 s on a 5e12 peak */
	metrics_set_rates(&s, 3e12, 4e12, 2.0, 5e12);
	assert_true(s.tflops == 1.5 && s.mfu == 30 && s.tflops_tt == 2 && s.mfu_tt == 40);
	assert_int_equal(metrics_jsonl_step(&j, &s, 1e-4, 4096, 1.5, &err), 0);
	assert_int_equal(metrics_jsonl_validation(&j, 3, 2.5, 100, &err), 0);
	assert_int_equal(metrics_jsonl_close(&j, &err), 0);
	FILE *f = fopen(path, "r");
	char line[512];
	assert_non_null(fgets(line, sizeof line, f));
	assert_non_null(strstr(line, "{\"step\":3,\"loss\":0.30000000000000004,\"grad_norm\":null,"));
	assert_non_null(strstr(line, "\"n_tokens_seen\":4096"));
	assert_non_null(strstr(line, "\"tflops\":1.5,\"mfu\":30,\"tflops_torchtitan\":2,"
				     "\"mfu_torchtitan\":40,"));
	assert_non_null(fgets(line, sizeof line, f));
	assert_string_equal(line, "{\"step\":3,\"validation_loss\":2.5,\"validation_tokens\":100}\n");
	fclose(f);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(log_line_matches_torchtitan_format),
		cmocka_unit_test(commas_like_python),
		cmocka_unit_test(flops_per_token_of_8b_matches_hand_count),
		cmocka_unit_test(device_table_and_cpu_probe),
		cmocka_unit_test(jsonl_keeps_full_precision),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
