/* The Flux planner (lib/planner/flux.c) against torchtitan 0.3.0: the
 * parameter counts of the models it sizes (torch's on the meta device), its
 * one-rank peak against the peak resident memory 0.3.0's FluxModel takes
 * for a step on the CPU (scripts/planner_flux_measure.py), FSDP's padded
 * shards and mixed precision's terms, and flux-dev on 8 x 80 GiB. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void counts_are_torchs(void **state)
{
	(void)state;
	plan_flux_job j;
	plan_flux_report r;
	titan_err e;
	/* torch's numel over parameters(), meta device: FluxModel's flavors,
	 * T5EncoderModel (t5-v1_1-xxl), CLIPTextModel (clip-vit-large-patch14),
	 * AutoEncoder.Config() */
	planner_flux_defaults(&j, flux_flavor("flux-dev"));
	assert_int_equal(planner_flux_run(&j, &r, &e), 0);
	assert_int_equal(r.n_params, 11891178560);
	assert_int_equal(r.n_t5, 4762310656);
	assert_int_equal(r.n_clip, 123060480);
	assert_int_equal(r.n_ae, 83819683);
	assert_int_equal(r.img_tokens, 256);
	planner_flux_defaults(&j, flux_flavor("flux-debug"));
	assert_int_equal(planner_flux_run(&j, &r, &e), 0);
	assert_int_equal(r.n_params, 258286144);
}

/* scripts/planner_flux_measure.py: hidden 512, 4 heads, 2 + 2 blocks,
 * batch 4, 256 latent and 256 T5 tokens, float32, full AC, fused AdamW:
 * the process's peak resident memory less what it held before the model.
 * The plan counts live tensors; the resident peak holds what glibc's
 * allocator keeps of freed ones besides, and the CPU libraries' buffers
 * made at the first step: the plan is 0.83 of it. */
#define MEASURED_PARAMS 30521920
#define MEASURED_PEAK 831574016

static void one_rank_peak_is_the_measured_one(void **state)
{
	(void)state;
	flux_config c = *flux_flavor("flux-debug");
	c.hidden_size = 512;
	c.num_heads = 4;
	plan_flux_job j;
	planner_flux_defaults(&j, &c);
	j.local_batch = 4;
	j.t5_len = 256;
	j.ac_full = 1;
	plan_flux_report r;
	titan_err e;
	assert_int_equal(planner_flux_run(&j, &r, &e), 0);
	assert_int_equal(r.n_params, MEASURED_PARAMS);
	uint64_t model = 0;
	for (int t = 0; t < PLAN_TERM_COUNT; t++)
		model += r.bytes[t];
	double ratio = (double)model / MEASURED_PEAK;
	printf("# planned %.1f MiB (activations %.1f), measured %.1f MiB: ratio %.3f\n",
	       model / 1048576.0, r.bytes[PLAN_ACTIVATIONS] / 1048576.0, MEASURED_PEAK / 1048576.0,
	       ratio);
	assert_true(ratio > 0.75 && ratio < 1.05);
}

static void fsdp_shards_pad_rows_and_gather_bf16(void **state)
{
	(void)state;
	plan_flux_job j;
	plan_flux_report one, eight;
	titan_err e;
	planner_flux_defaults(&j, flux_flavor("flux-debug"));
	assert_int_equal(planner_flux_run(&j, &one, &e), 0);
	j.dp_shard = 7; /* rows of 1536, 64, ... do not divide by 7: padded */
	assert_int_equal(planner_flux_run(&j, &eight, &e), 0);
	assert_true(eight.bytes[PLAN_PARAMS] * 7 > one.bytes[PLAN_PARAMS]);
	assert_true(eight.bytes[PLAN_PARAMS] * 7 < one.bytes[PLAN_PARAMS] * 101 / 100);
	assert_int_equal(eight.bytes[PLAN_OPTIMIZER], 2 * eight.bytes[PLAN_PARAMS]);
	assert_int_equal(one.bytes[PLAN_GATHERED], 0);
	assert_true(eight.bytes[PLAN_GATHERED] > 0);
	/* bf16 activations: half of the float32 ones */
	assert_int_equal(eight.bytes[PLAN_ACTIVATIONS] * 2 - one.bytes[PLAN_ACTIVATIONS] <
			 one.bytes[PLAN_ACTIVATIONS] / 50, 1);
	j.img_size = 100;
	assert_int_equal(planner_flux_run(&j, &eight, &e), -1);
	assert_non_null(strstr(e.msg, "img_size"));
}

static void flux_dev_on_8_h100s(void **state)
{
	(void)state;
	plan_flux_job j;
	plan_flux_report r;
	titan_err e;
	planner_flux_defaults(&j, flux_flavor("flux-dev"));
	j.dp_shard = 8;
	j.ac_full = 1;
	j.device_bytes = (uint64_t)80 << 30;
	assert_int_equal(planner_flux_run(&j, &r, &e), 0);
	assert_int_equal(planner_flux_print(&r, stdout), 0);
	assert_true(r.fits);
	/* 11.9B x 16 bytes over 8 ranks */
	assert_true(r.bytes[PLAN_PARAMS] + r.bytes[PLAN_GRADS] + r.bytes[PLAN_OPTIMIZER] >=
		    (uint64_t)(11891178560.0 * 16 / 8));
	j.ac_full = 0;
	assert_int_equal(planner_flux_run(&j, &r, &e), 0);
	printf("# without AC: peak %.1f GiB\n", r.peak / GIB);
}

/* Context parallelism: the parameters as without it (0.3.0 replicates them
 * over cp), a rank's activations its share of the tokens plus one
 * attention's gathered keys and values; tokens that do not divide refused. */
static void context_parallel_cuts_the_tokens(void **state)
{
	(void)state;
	plan_flux_job j;
	plan_flux_report one, two;
	titan_err e;
	planner_flux_defaults(&j, flux_flavor("flux-dev"));
	j.dp_shard = 4;
	assert_int_equal(planner_flux_run(&j, &one, &e), 0);
	j.cp = 2;
	assert_int_equal(planner_flux_run(&j, &two, &e), 0);
	assert_int_equal(two.bytes[PLAN_PARAMS], one.bytes[PLAN_PARAMS]);
	double ratio = (double)two.bytes[PLAN_ACTIVATIONS] / (double)one.bytes[PLAN_ACTIVATIONS];
	printf("# cp 2: activations %.2f of cp 1's\n", ratio);
	assert_true(ratio > 0.5 && ratio < 0.6);
	assert_int_equal(planner_flux_print(&two, stdout), 0);
	j.cp = 3; /* 256 image tokens */
	assert_int_equal(planner_flux_run(&j, &two, &e), -1);
	assert_non_null(strstr(e.msg, "context parallel 3"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(counts_are_torchs),
		cmocka_unit_test(one_rank_peak_is_the_measured_one),
		cmocka_unit_test(fsdp_shards_pad_rows_and_gather_bf16),
		cmocka_unit_test(flux_dev_on_8_h100s),
		cmocka_unit_test(context_parallel_cuts_the_tokens),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
