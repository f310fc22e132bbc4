/* Unit tests of lib/config: the TOML subset, torchtitan's defaults, overrides,
 * errors with file:line and suggestions, and refusal of later features. */
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

#include "config/config.h"

static void defaults_are_torchtitans(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_string_equal(c.job.dump_folder, "./outputs");
	assert_int_equal(c.metrics.log_freq, 10);
	assert_string_equal(c.metrics.save_tb_folder, "tb");
	assert_string_equal(c.model.flavor, "debugmodel");
	assert_true(c.optimizer.lr == 8e-4);
	assert_true(c.optimizer.beta2 == 0.95);
	assert_true(c.optimizer.weight_decay == 0.1);
	assert_int_equal(c.lr_scheduler.warmup_steps, 200);
	assert_true(isnan(c.lr_scheduler.decay_ratio));
	assert_string_equal(c.lr_scheduler.decay_type, "linear");
	assert_int_equal(c.training.local_batch_size, 8);
	assert_int_equal(c.training.global_batch_size, -1);
	assert_int_equal(c.training.seq_len, 2048);
	assert_int_equal(c.training.steps, 10000);
	assert_null(c.training.dataset_path);
	assert_int_equal(c.parallelism.data_parallel_shard_degree, -1);
	assert_int_equal(c.checkpoint.enable, 0);
	assert_int_equal(c.checkpoint.interval, 500);
	assert_int_equal(c.checkpoint.keep_latest_k, 10);
	assert_int_equal(c.checkpoint.load_step, -1);
	assert_int_equal(c.checkpoint.initial_load_model_only, 1);
	assert_int_equal(c.checkpoint.last_save_model_only, 1);
	assert_string_equal(c.checkpoint.async_mode, "disabled");
	assert_string_equal(c.activation_checkpoint.mode, "selective");
	assert_int_equal(c.compile.components.n, 2);
	assert_string_equal(c.compile.components.v[1], "loss");
	assert_int_equal(c.validation.freq, 10);
	assert_int_equal(c.validation.steps, -1);
	assert_int_equal(c.debug.seed_set, 0);
	assert_int_equal(config_validate(&c, &err), 0);
	assert_int_equal(config_check_supported(&c, 1, &err), 0);
	config_free(&c);
}

static void toml_subset_is_read(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	const char *text =
		"# comment\n"
		"[job]\n"
		"dump_folder = \"out\\tdir \\u00e9\"  # trailing comment\n"
		"description = 'literal \\n kept'\n"
		"[optimizer]\n"
		"lr = 3e-4\n"
		"weight_decay = 0\n"
		"[training]\n"
		"steps = 1_000\n"
		"max_norm = 2\n"
		"[\"checkpoint\"]\n"
		"enable = true\n"
		"exclude_from_loading = [\n  \"optimizer\", # the optimizer\n  'dataloader',\n]\n"
		"[quantize.linear.float8]\n"
		"filter_fqns = \"output, layers.0\"\n"
		"[lr_scheduler]\n"
		"decay_ratio = 0.8\n";
	assert_int_equal(config_load_string(&c, "t.toml", text, &err), 0);
	assert_string_equal(c.job.dump_folder, "out\tdir \xc3\xa9");
	assert_string_equal(c.job.description, "literal \\n kept");
	assert_true(c.optimizer.lr == 3e-4);
	assert_true(c.optimizer.weight_decay == 0);
	assert_int_equal(c.training.steps, 1000);
	assert_true(c.training.max_norm == 2.0);
	assert_int_equal(c.checkpoint.enable, 1);
	assert_int_equal(c.checkpoint.exclude_from_loading.n, 2);
	assert_string_equal(c.checkpoint.exclude_from_loading.v[1], "dataloader");
	assert_int_equal(c.float8.filter_fqns.n, 2);
	assert_string_equal(c.float8.filter_fqns.v[1], "layers.0");
	assert_true(c.lr_scheduler.decay_ratio == 0.8);
	config_free(&c);
}

static void dotted_key_inside_table_extends_the_table(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "t.toml", "[quantize]\nlinear.float8.emulate = true\n",
					    &err), 0);
	assert_int_equal(c.float8.emulate, 1);
	assert_int_equal(config_load_string(&c, "u.toml", "[lr_scheduler]\ndebug.seed = 1\n", &err), -1);
	assert_string_equal(err.msg, "u.toml:2: lr_scheduler.debug.seed: unknown key (did you mean debug.seed?)");
	config_free(&c);
}

static void misspelt_key_is_refused_with_line_and_suggestion(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "cfg.toml", "[training]\nsteps = 5\n\nlocal_batchsize = 4\n", &err), -1);
	assert_string_equal(err.msg, "cfg.toml:4: training.local_batchsize: unknown key (did you mean training.local_batch_size?)");
	assert_int_equal(config_load_string(&c, "cfg.toml", "[checkpont]\nenable = true\n", &err), -1);
	assert_string_equal(err.msg, "cfg.toml:2: checkpont.enable: unknown key (did you mean checkpoint.enable?)");
	assert_int_equal(config_set(&c, "checkpoint.keep_latest", "3", &err), -1);
	assert_string_equal(err.msg, "--checkpoint.keep_latest: unknown option (did you mean --checkpoint.keep_latest_k?)");
	assert_int_equal(config_set(&c, "zzz.qqq", "3", &err), -1);
	assert_string_equal(err.msg, "--zzz.qqq: unknown option");
	config_free(&c);
}

static void bad_values_are_refused_with_reason(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "a.toml", "[training]\nsteps = \"ten\"\n", &err), -1);
	assert_string_equal(err.msg, "a.toml:2: training.steps: expected int, found a string");
	assert_int_equal(config_load_string(&c, "b.toml", "[lr_scheduler]\ndecay_type = \"cubic\"\n", &err), -1);
	assert_string_equal(err.msg, "b.toml:2: lr_scheduler.decay_type: \"cubic\" is not one of linear|sqrt|cosine");
	assert_int_equal(config_load_string(&c, "c.toml", "[job]\ndump_folder = \"x\n", &err), -1);
	assert_string_equal(err.msg, "c.toml:2: unterminated string");
	assert_int_equal(config_load_string(&c, "d.toml", "[job]\ndump_folder = x\n", &err), -1);
	assert_string_equal(err.msg, "d.toml:2: bad value 'x' (strings need quotes)");
	assert_int_equal(config_load_string(&c, "e.toml", "[training]\nsteps = 1\nsteps = 2\n", &err), -1);
	assert_string_equal(err.msg, "e.toml:3: training.steps: defined twice");
	assert_int_equal(config_load_string(&c, "f.toml", "[training]\nsteps = 1 2\n", &err), -1);
	assert_string_equal(err.msg, "f.toml:2: unexpected '2' after the value (one key = value per line)");
	assert_int_equal(config_set(&c, "training.steps", "12x", &err), -1);
	assert_string_equal(err.msg, "--training.steps: \"12x\" is not an integer");
	assert_int_equal(config_set(&c, "checkpoint.enable", "maybe", &err), -1);
	assert_string_equal(err.msg, "--checkpoint.enable: \"maybe\" is not a boolean (true or false)");
	assert_int_equal(config_set(&c, "checkpoint.keep_latest_k", "1", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_non_null(strstr(err.msg, "checkpoint.keep_latest_k: must be 0"));
	config_free(&c);
}

static void overrides_follow_the_file_and_bare_booleans_work(void **state)
{
	(void)state;
	char path[] = "/tmp/titan-config-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text = "[training]\nsteps = 50\n[checkpoint]\nenable = true\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	char *argv[] = {"titan-train", "--training.steps", "7", "--checkpoint.enable", "false",
			"--metrics.enable_tensorboard", "--config", path, "--list-flavors",
			"--optimizer.lr=0.5", "--lr_scheduler.decay_ratio", "none", NULL};
	int argc = 12, nrest;
	char *rest[16];
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_from_args(&c, argc, argv, &nrest, rest, &err), 0);
	assert_int_equal(c.training.steps, 7);
	assert_int_equal(c.checkpoint.enable, 0);
	assert_int_equal(c.metrics.enable_tensorboard, 1);
	assert_true(c.optimizer.lr == 0.5);
	assert_true(isnan(c.lr_scheduler.decay_ratio));
	assert_string_equal(c.job.config_file, path);
	assert_int_equal(nrest, 2);
	assert_string_equal(rest[1], "--list-flavors");
	config_free(&c);
	unlink(path);
}

static void later_features_are_refused_not_ignored(void **state)
{
	(void)state;
	const char *cases[][3] = {
		{"parallelism.tensor_parallel_degree", "8", "tensor parallelism is not supported"},
		{"parallelism.pipeline_parallel_degree", "2", "pipeline parallelism"},
		{"parallelism.context_parallel_degree", "2", "context parallelism"},
		{"parallelism.data_parallel_shard_degree", "4", "sharded data parallelism"},
		{"compile.enable", "true", "compile.enable"},
		{"model.converters", "quantize.linear.float8", "Float8"},
		{"quantize.linear.float8.enable_fsdp_float8_all_gather", "true", "Float8"},
		{"training.enable_cpu_offload", "true", "enable_cpu_offload"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		job_config c;
		titan_err err = {{0}};
		assert_int_equal(config_defaults(&c, &err), 0);
		assert_int_equal(config_set(&c, cases[i][0], cases[i][1], &err), 0);
		assert_int_equal(config_check_supported(&c, 1, &err), -1);
		if (strstr(err.msg, cases[i][2]) == NULL)
			fail_msg("%s: message '%s' lacks '%s'", cases[i][0], err.msg, cases[i][2]);
		config_free(&c);
	}
}

static void printed_config_reads_back_identically(void **state)
{
	(void)state;
	job_config a, b;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&a, &err), 0);
	assert_int_equal(config_set(&a, "job.description", "quote \" and \\ back", &err), 0);
	assert_int_equal(config_set(&a, "lr_scheduler.decay_ratio", "0.25", &err), 0);
	assert_int_equal(config_set(&a, "optimizer.lr", "0.0003", &err), 0);
	char *buf1 = NULL, *buf2 = NULL;
	size_t n1, n2;
	FILE *f = open_memstream(&buf1, &n1);
	config_print(&a, f);
	fclose(f);
	assert_int_equal(config_defaults(&b, &err), 0);
	if (config_load_string(&b, "printed", buf1, &err) != 0)
		fail_msg("%s", err.msg);
	f = open_memstream(&buf2, &n2);
	config_print(&b, f);
	fclose(f);
	assert_string_equal(buf1, buf2);
	assert_string_equal(b.job.description, "quote \" and \\ back");
	free(buf1);
	free(buf2);
	config_free(&a);
	config_free(&b);
}

static void every_key_has_a_default_that_parses(void **state)
{
	(void)state;
	int n;
	const cfg_key_info *k = config_keys(&n);
	assert_true(n > 80);
	for (int i = 0; i < n; i++) {
		assert_true(config_key_exists(k[i].name));
		assert_non_null(k[i].torchtitan);
		assert_non_null(k[i].help);
		assert_string_equal(config_suggest(k[i].name), k[i].name);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_torchtitans),
		cmocka_unit_test(toml_subset_is_read),
		cmocka_unit_test(dotted_key_inside_table_extends_the_table),
		cmocka_unit_test(misspelt_key_is_refused_with_line_and_suggestion),
		cmocka_unit_test(bad_values_are_refused_with_reason),
		cmocka_unit_test(overrides_follow_the_file_and_bare_booleans_work),
		cmocka_unit_test(later_features_are_refused_not_ignored),
		cmocka_unit_test(printed_config_reads_back_identically),
		cmocka_unit_test(every_key_has_a_default_that_parses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
