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
#include "config/tt030.h"

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
		{"compile.backend", "eager", "compile.backend"},
		{"model.converters", "quantize.linear.mx", "quantize.linear.mx is not supported"},
		{"model.converters", "quantize.grouped_mm.mx", "grouped_mm.mx is not supported"},
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

/* The Float8 converter is taken; torchtitan's refusals are kept: a recipe
 * with FSDP's float8 all-gather, a name outside its registry.  The
 * all-gather alone acts only under FSDP and is accepted in one process. */
static void float8_converter_is_taken_with_torchtitans_rules(void **state)
{
	(void)state;
	const char *cases[][5] = {
		/* key, value, key, value, "" (accepted) or the message */
		{"model.converters", "quantize.linear.float8", "quantize.linear.float8.recipe_name",
		 "rowwise", ""},
		{"model.converters", "quantize.linear.float8",
		 "quantize.linear.float8.enable_fsdp_float8_all_gather", "true", ""},
		{"quantize.linear.float8.recipe_name", "tensorwise",
		 "quantize.linear.float8.enable_fsdp_float8_all_gather", "true",
		 "torchtitan asserts the same"},
		{"model.converters", "float8", "quantize.linear.float8.emulate", "true",
		 "\"float8\" is not a converter"},
		/* the Float8 grouped experts (0.2.2's Float8GroupedMMConverter) */
		{"model.converters", "quantize.grouped_mm.float8", "quantize.grouped_mm.float8.fqns",
		 "experts", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		job_config c;
		titan_err err = {{0}};
		assert_int_equal(config_defaults(&c, &err), 0);
		assert_int_equal(config_set(&c, cases[i][0], cases[i][1], &err), 0);
		assert_int_equal(config_set(&c, cases[i][2], cases[i][3], &err), 0);
		int rc = config_check_supported(&c, 1, &err);
		if (cases[i][4][0] == '\0' && rc != 0)
			fail_msg("case %zu refused: %s", i, err.msg);
		if (cases[i][4][0] != '\0' && (rc == 0 || strstr(err.msg, cases[i][4]) == NULL))
			fail_msg("case %zu: rc %d, message '%s' lacks '%s'", i, rc, err.msg, cases[i][4]);
		config_free(&c);
	}
}

/* The whole configuration as config_print writes it (malloc'd). */
static char *printed(const job_config *c)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	assert_non_null(f);
	config_print(c, f);
	assert_int_equal(fclose(f), 0);
	return buf;
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
	assert_int_equal(config_set(&a, "parallelism.module_fqns_per_model_part", "a,b c", &err), 0);
	assert_int_equal(config_set(&a, "compile.components", "mo\"del", &err), 0);
	char *buf1 = printed(&a);
	assert_int_equal(config_defaults(&b, &err), 0);
	if (config_load_string(&b, "printed", buf1, &err) != 0)
		fail_msg("%s", err.msg);
	char *buf2 = printed(&b);
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
		assert_non_null(k[i].help);
		assert_string_equal(config_suggest(k[i].name), k[i].name);
	}
}

static const cfg_key_info *key_info(const char *name)
{
	int n;
	const cfg_key_info *k = config_keys(&n);
	for (int i = 0; i < n; i++)
		if (strcmp(k[i].name, name) == 0)
			return &k[i];
	return NULL;
}

/* "b|a" and "a|b" name the same set. */
static int same_values(const char *a, const char *b)
{
	size_t na = 1, nb = 1;
	for (const char *p = a; *p; p++)
		na += *p == '|';
	for (const char *p = b; *p; p++)
		nb += *p == '|';
	if (na != nb)
		return 0;
	for (const char *p = a; *p;) {
		size_t m = strcspn(p, "|");
		int found = 0;
		for (const char *q = b; *q && !found;) {
			size_t l = strcspn(q, "|");
			found = l == m && strncmp(p, q, m) == 0;
			q += l + (q[l] == '|');
		}
		if (!found)
			return 0;
		p += m + (p[m] == '|');
	}
	return 1;
}

#define KEY_LIST "tests/config/torchtitan-0.2.2-keys.tsv"

/* Every key of torchtitan 0.2.2's JobConfig (the list scripts/torchtitan_keys.py
 * made from it) is known, with torchtitan's type, values and default: the
 * default read from the list sets the same configuration as titan's own. */
static void every_torchtitan_key_is_known_with_its_type_and_default(void **state)
{
	(void)state;
	FILE *f = fopen(KEY_LIST, "r");
	if (f == NULL)
		fail_msg("%s: cannot open (run from the repository root)", KEY_LIST);
	job_config d;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&d, &err), 0);
	char *want = printed(&d);
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof line, f) != NULL) {
		if (line[0] == '#')
			continue;
		line[strcspn(line, "\n")] = '\0';
		char *field[4];
		char *p = line;
		for (int i = 0; i < 4; i++) {
			field[i] = p;
			p += strcspn(p, "\t");
			if (i < 3) {
				assert_int_equal(*p, '\t');
				*p++ = '\0';
			}
		}
		const char *key = field[0], *type = field[1], *def = field[2], *values = field[3];
		const cfg_key_info *k = key_info(key);
		if (k == NULL)
			fail_msg("%s: torchtitan 0.2.2 has it, titan-train does not know it", key);
		if (strcmp(config_type_name(k->type), type) != 0)
			fail_msg("%s: titan's type is %s, torchtitan's %s", key,
				 config_type_name(k->type), type);
		if (k->torchtitan == NULL || strcmp(k->torchtitan, key) != 0)
			fail_msg("%s: the schema names torchtitan's key %s", key,
				 k->torchtitan ? k->torchtitan : "(none)");
		/* the values 0.3.0 added to a 0.2.2 key, which titan takes too */
		char more[256];
		if (strcmp(key, "optimizer.implementation") == 0) {
			snprintf(more, sizeof more, "%s|fused_opt_states_bf16", values);
			values = more;
		}
		if (strcmp(values, "-") != 0 && (k->choices == NULL || !same_values(values, k->choices)))
			fail_msg("%s: torchtitan takes %s, titan %s", key, values,
				 k->choices ? k->choices : "any value");
		job_config c;
		assert_int_equal(config_defaults(&c, &err), 0);
		if (config_set(&c, key, def, &err) != 0)
			fail_msg("%s: torchtitan's default \"%s\" is refused: %s", key, def, err.msg);
		char *got = printed(&c);
		if (strcmp(got, want) != 0)
			fail_msg("%s: torchtitan's default \"%s\" is not titan's default", key, def);
		free(got);
		config_free(&c);
		n++;
	}
	fclose(f);
	free(want);
	config_free(&d);
	assert_int_equal(n, 149);
	int nk;
	const cfg_key_info *k = config_keys(&nk);
	int ext = 0;
	for (int i = 0; i < nk; i++)
		ext += k[i].torchtitan == NULL;
	assert_int_equal(nk, n + ext);
	print_message("%d torchtitan keys, %d titan extensions\n", n, ext);
}

#define KEY_LIST_030 "tests/config/torchtitan-0.3.0-keys.tsv"

/* A preset's configuration with argv's 0.3.0 overrides; 0 or -1. */
static int preset_030(job_config *c, const char *name, int argc, char **argv, titan_err *err)
{
	char *rest[8];
	int nrest;
	const char *module = NULL;
	for (int i = 0; tt030_preset_name(i, &module); i++)
		if (strcmp(tt030_preset_name(i, &module), name) == 0)
			break;
	if (config_defaults(c, err) != 0)
		return -1;
	return tt030_config(c, module ? module : "?", name, argc, argv, &nrest, rest, err);
}

/* One line of the list: preset, path, value (its type and JSON left out); 0
 * at its end. */
static int next_030(FILE *f, char *line, size_t n, char **preset, char **path, char **val)
{
	do {
		if (fgets(line, (int)n, f) == NULL)
			return 0;
	} while (line[0] == '#');
	line[strcspn(line, "\n")] = '\0';
	char *field[5], *p = line;
	for (int i = 0; i < 5; i++) {
		field[i] = p;
		p += strcspn(p, "\t");
		if (i < 4) {
			assert_int_equal(*p, '\t');
			*p++ = '\0';
		}
	}
	*preset = field[0], *path = field[1], *val = field[3];
	return 1;
}

/* One path of a preset: in tt030.c's table, setting a key titan has; the
 * preset's value, given on the command line, leaves titan's preset as it is
 * (want: its printed configuration).  Returns 0, or 1 after saying why not. */
static int check_030_path(const char *preset, const char *path, const char *val,
			  const char *want, int *seen, int *shared)
{
	int np;
	const tt030_path *paths = tt030_paths(&np), *t = NULL;
	for (int i = 0; i < np && !t; i++)
		if (strcmp(paths[i].path, path) == 0)
			t = &paths[i], seen[i] = 1;
	if (t == NULL)
		fail_msg("%s: a path of 0.3.0's Trainer.Config, not in tt030.c's table", path);
	if (t->key && t->key[0] != '@' && !config_key_exists(t->key))
		fail_msg("%s: sets %s, which titan does not have", path, t->key);
	if (t->refused || strcmp(val, "<python>") == 0 || tt030_preset_refusal(preset))
		return 0;
	char prog[] = "titan-train", opt[1200];
	snprintf(opt, sizeof opt, "--%s=%s", path, val);
	char *argv[] = {prog, opt};
	job_config c;
	titan_err err = {{0}};
	if (preset_030(&c, preset, 2, argv, &err) != 0) {
		print_message("%s: %s %s: the preset's value is refused: %s\n", preset, path, val,
			      err.msg);
		return 1;
	}
	char *got = printed(&c);
	int bad = t->key && t->key[0] != '@' && strcmp(got, want) != 0;
	if (bad)
		print_message("%s: 0.3.0 has %s = %s, titan's preset another value\n", preset, path,
			      val);
	*shared += t->key && t->key[0] != '@';
	free(got);
	config_free(&c);
	return bad;
}

#define KEY_LIST_030 "tests/config/torchtitan-0.3.0-keys.tsv"

/* Every path of torchtitan 0.3.0's Trainer.Config under each of its presets
 * (the list scripts/torchtitan030_keys.py made) is in tt030.c's table, which
 * has no other; a path that sets a titan key names one titan has, and the
 * preset's value from the list, given on the command line, leaves titan's
 * preset as it is, so each preset has 0.3.0's values for the keys titan
 * shares; a value the list has is accepted unless the path refuses all.  A
 * preset titan refuses is refused with its reason. */
static void every_torchtitan_030_path_is_in_the_table_with_its_preset_value(void **state)
{
	(void)state;
	FILE *f = fopen(KEY_LIST_030, "r");
	if (f == NULL)
		fail_msg("%s: cannot open (run from the repository root)", KEY_LIST_030);
	int np, n = 0, shared = 0, bad = 0, presets = 0, refused = 0;
	tt030_paths(&np);
	int *seen = calloc((size_t)np, sizeof *seen);
	char line[1024], cur[128] = "", *want = NULL, *preset, *path, *val;
	job_config d;
	titan_err err = {{0}};
	while (next_030(f, line, sizeof line, &preset, &path, &val)) {
		if (strcmp(preset, cur) != 0) {
			char prog[] = "titan-train";
			char *argv0[] = {prog};
			snprintf(cur, sizeof cur, "%s", preset);
			const char *why = tt030_preset_refusal(cur);
			int rc = preset_030(&d, cur, 1, argv0, &err);
			if (why) { /* refused, saying why */
				assert_int_equal(rc, -1);
				assert_non_null(strstr(err.msg, why));
				refused++;
			} else if (rc != 0) {
				fail_msg("%s: %s", cur, err.msg);
			}
			assert_int_equal(d.follows_030, !why);
			free(want);
			want = printed(&d);
			config_free(&d);
			presets++;
		}
		if (strncmp(path, "model_spec.", 11) == 0)
			continue; /* the model's, not a path: tests/config/print030.sh */
		bad += check_030_path(cur, path, val, want, seen, &shared);
		n++;
	}
	fclose(f);
	free(want);
	for (int i = 0; i < np; i++)
		if (!seen[i])
			fail_msg("%s: in tt030.c's table, under none of the presets",
				 tt030_paths(&np)[i].path);
	free(seen);
	const char *module;
	int have = 0;
	while (tt030_preset_name(have, &module))
		have++;
	assert_int_equal(presets, have);
	assert_int_equal(bad, 0);
	print_message("%d presets (%d refused), %d paths, %d of them set titan keys to the "
		      "preset's values\n", presets, refused, n, shared);
}

/* A value other than the key's default, of the key's type; 0 when the key
 * takes one value only. */
static int other_value(const cfg_key_info *k, char *buf, size_t n)
{
	switch (k->type) {
	case CFG_BOOL:
		snprintf(buf, n, "%s", strcmp(k->def, "true") == 0 ? "false" : "true");
		break;
	case CFG_INT:
	case CFG_OPT_INT:
		snprintf(buf, n, "%lld", strcmp(k->def, "none") == 0 ? 2LL : atoll(k->def) + 1);
		break;
	case CFG_FLOAT:
	case CFG_OPT_FLOAT:
		snprintf(buf, n, "%g", strcmp(k->def, "none") == 0 ? 0.25 : atof(k->def) / 2 + 0.125);
		break;
	case CFG_STR:
	case CFG_OPT_STR:
		if (k->choices != NULL) {
			/* The first choice that is not the default. */
			const char *c = k->choices;
			for (;;) {
				size_t m = strcspn(c, "|");
				snprintf(buf, n, "%.*s", (int)m, c);
				if (strstr(k->def, buf) == NULL || strlen(k->def) != m + 2)
					break;
				if (c[m] == '\0')
					return 0;
				c += m + 1;
			}
		} else {
			snprintf(buf, n, "other");
		}
		break;
	case CFG_LIST:
		snprintf(buf, n, "other");
		break;
	case CFG_OPT_LISTS:
		snprintf(buf, n, "a,b c");
		break;
	}
	return 1;
}

/* Each key the schema marks as needing a missing feature is refused away from
 * its default, with the reason; each one without effect is accepted. */
static void unbuilt_keys_are_refused_with_the_reason(void **state)
{
	(void)state;
	int n, refused = 0, inert = 0;
	const cfg_key_info *k = config_keys(&n);
	for (int i = 0; i < n; i++) {
		if (k[i].support == CFG_HONOURED)
			continue;
		assert_non_null(k[i].why);
		job_config c;
		titan_err err = {{0}};
		assert_int_equal(config_defaults(&c, &err), 0);
		assert_int_equal(config_check_supported(&c, 1, &err), 0);
		char v[64];
		if (!other_value(&k[i], v, sizeof v)) {
			config_free(&c);
			continue;
		}
		if (config_set(&c, k[i].name, v, &err) != 0)
			fail_msg("%s = %s: %s", k[i].name, v, err.msg);
		int rc = config_check_supported(&c, 1, &err);
		if (k[i].support == CFG_NOT_BUILT) {
			if (rc != -1)
				fail_msg("%s = %s is accepted, but its feature is not built", k[i].name, v);
			if (strncmp(err.msg, k[i].name, strlen(k[i].name)) != 0 ||
			    strstr(err.msg, k[i].why) == NULL)
				fail_msg("%s: the refusal '%s' does not name the key and why", k[i].name,
					 err.msg);
			refused++;
		} else {
			if (rc != 0)
				fail_msg("%s = %s is refused: %s", k[i].name, v, err.msg);
			inert++;
		}
		config_free(&c);
	}
	print_message("%d keys refused away from their default, %d accepted without effect\n",
		      refused, inert);
	assert_true(refused > 0 && inert > 0);
}

static void lists_of_lists_read_from_toml_and_the_command_line(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(c.parallelism.module_fqns_per_model_part.set, 0);
	assert_int_equal(config_load_string(&c, "p.toml",
					    "[parallelism]\nmodule_fqns_per_model_part = "
					    "[[\"tok_embeddings\", \"layers.0\"], [\"layers.1\"], []]\n", &err), 0);
	const cfg_strlists *l = &c.parallelism.module_fqns_per_model_part;
	assert_int_equal(l->set, 1);
	assert_int_equal(l->n, 3);
	assert_int_equal(l->v[0].n, 2);
	assert_string_equal(l->v[0].v[1], "layers.0");
	assert_string_equal(l->v[1].v[0], "layers.1");
	assert_int_equal(l->v[2].n, 0);
	char *p = printed(&c);
	assert_non_null(strstr(p, "module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\"], "
				  "[\"layers.1\"], []]\n"));
	free(p);
	assert_int_equal(config_set(&c, "parallelism.module_fqns_per_model_part",
				    "tok_embeddings,layers.0  layers.1,norm,output", &err), 0);
	assert_int_equal(l->n, 2);
	assert_int_equal(l->v[1].n, 3);
	assert_string_equal(l->v[1].v[2], "output");
	assert_int_equal(config_set(&c, "parallelism.module_fqns_per_model_part", "none", &err), 0);
	assert_int_equal(l->set, 0);
	assert_int_equal(config_load_string(&c, "q.toml",
					    "[parallelism]\nmodule_fqns_per_model_part = [\"a\"]\n",
					    &err), -1);
	assert_string_equal(err.msg, "q.toml:2: parallelism.module_fqns_per_model_part: expected a "
				     "list of lists of strings, item 0 is a string");
	assert_int_equal(config_load_string(&c, "r.toml",
					    "[parallelism]\nmodule_fqns_per_model_part = [[1]]\n",
					    &err), -1);
	assert_string_equal(err.msg, "r.toml:2: parallelism.module_fqns_per_model_part: expected a "
				     "list of strings, list 0 item 0 is an integer");
	config_free(&c);
}

static void new_keys_are_honoured_or_checked(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_set(&c, "lr_scheduler.total_steps", "0", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "lr_scheduler.total_steps: must be none or in [1, 1000000000000000]");
	assert_int_equal(config_set(&c, "lr_scheduler.total_steps", "none", &err), 0);
	assert_int_equal(config_set(&c, "training.dataloader.persistent_workers", "true", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "training.dataloader.persistent_workers: needs num_workers > 0");
	assert_int_equal(config_set(&c, "training.dataloader.num_workers", "2", &err), 0);
	assert_int_equal(config_validate(&c, &err), 0);
	assert_int_equal(config_set(&c, "validation.dataloader.prefetch_factor", "2", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "validation.dataloader.prefetch_factor: only with num_workers > 0 "
				     "(otherwise none)");
	assert_int_equal(config_set(&c, "validation.dataloader.prefetch_factor", "none", &err), 0);
	assert_int_equal(config_set(&c, "parallelism.pipeline_parallel_split_points", "layers.3", &err), 0);
	assert_int_equal(config_set(&c, "parallelism.module_fqns_per_model_part", "a b", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_non_null(strstr(err.msg, "set one of them, not both"));
	assert_int_equal(config_set(&c, "parallelism.module_fqns_per_model_part", "none", &err), 0);
	assert_int_equal(config_set(&c, "parallelism.context_parallel_load_balancer", "none", &err), 0);
	assert_null(c.parallelism.context_parallel_load_balancer);
	assert_int_equal(config_set(&c, "parallelism.context_parallel_load_balancer", "", &err), -1);
	assert_int_equal(config_set(&c, "training.steps", "9223372036854775807", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "training.steps: must be <= 1000000000000000");
	assert_int_equal(config_set(&c, "training.steps", "10", &err), 0);
	assert_int_equal(config_set(&c, "optimizer.lr", "inf", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "optimizer.lr, eps and weight_decay: must be finite");
	config_free(&c);

	/* torchtitan's deprecated tokenizer_path replaces hf_assets_path. */
	char *argv[] = {"titan-train", "--model.tokenizer_path", "assets/tok", NULL};
	char *rest[4];
	int nrest;
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_from_args(&c, 3, argv, &nrest, rest, &err), 0);
	assert_string_equal(c.model.hf_assets_path, "assets/tok");
	config_free(&c);
}

/* A 50,000-deep array crashed the recursive reader (stack overflow). */
static void deeply_nested_array_is_refused_not_a_crash(void **state)
{
	(void)state;
	size_t depth = 50000;
	char *text = malloc(2 * depth + 64);
	assert_non_null(text);
	size_t n = (size_t)sprintf(text, "[training]\nsteps = ");
	memset(text + n, '[', depth);
	memset(text + n + depth, ']', depth);
	text[n + 2 * depth] = '\0';
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "deep.toml", text, &err), -1);
	assert_string_equal(err.msg, "deep.toml:2: arrays nested deeper than 32");
	/* An unterminated one too, and 32 levels still read. */
	text[n + depth] = '\0';
	assert_int_equal(config_load_string(&c, "deep.toml", text, &err), -1);
	n = (size_t)sprintf(text, "[parallelism]\nmodule_fqns_per_model_part = ");
	memset(text + n, '[', 32);
	memset(text + n + 32, ']', 32);
	text[n + 64] = '\0';
	assert_int_equal(config_load_string(&c, "ok.toml", text, &err), -1);
	assert_non_null(strstr(err.msg, "expected a list of strings"));
	free(text);
	config_free(&c);
}

/* optimizer.param_groups: arrays of tables with inline kwargs, torch's and
 * DistMuon's defaults behind what is given, refusals naming the group, and
 * the print reading back to the same groups. */
static void param_groups_are_read_checked_and_printed(void **state)
{
	(void)state;
	job_config c, d;
	titan_err err = {{0}};
	const char *toml =
		"[[optimizer.param_groups]]\npattern = \"(?:tok_embeddings|output)\\\\.\"\n"
		"optimizer_name = \"AdamW\"\noptimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], "
		"weight_decay = 0.0}\n"
		"[[optimizer.param_groups]]\npattern = \"wo\\\\.weight$\"\noptimizer_name = \"DistMuon\"\n"
		"optimizer_kwargs.adjust_lr_fn = \"match_rms_adamw\"\n"
		"[[optimizer.param_groups]]\npattern = \".*\"\noptimizer_name = \"Adam\"\n";
	assert_int_equal(config_defaults(&c, &err), 0);
	if (config_load_string(&c, "g.toml", toml, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(c.optimizer.n_param_groups, 3);
	assert_string_equal(c.optimizer.param_groups[0].pattern, "(?:tok_embeddings|output)\\.");
	cfg_param_group_values v;
	config_param_group_values(&c.optimizer.param_groups[0], &v);
	assert_true(v.lr == 8e-4 && v.beta2 == 0.95 && v.eps == 1e-8 && v.weight_decay == 0);
	config_param_group_values(&c.optimizer.param_groups[1], &v);
	assert_true(v.lr == 1e-3 && v.weight_decay == 0.1 && v.momentum == 0.95 && v.nesterov &&
		    v.ns_steps == 5 && v.eps == 1e-7 && v.ns_coefficients[1] == -4.7750);
	assert_string_equal(v.adjust_lr_fn, "match_rms_adamw");
	config_param_group_values(&c.optimizer.param_groups[2], &v);
	assert_true(v.beta2 == 0.999 && v.weight_decay == 0); /* torch's Adam */
	assert_int_equal(config_validate(&c, &err), 0);
	char *buf1 = printed(&c);
	assert_int_equal(config_defaults(&d, &err), 0);
	if (config_load_string(&d, "printed", buf1, &err) != 0)
		fail_msg("%s", err.msg);
	char *buf2 = printed(&d);
	assert_string_equal(buf1, buf2);
	free(buf1);
	free(buf2);
	config_free(&d);
	config_free(&c);

	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "k.toml", "[[optimizer.param_groups]]\n"
					    "pattern = \".*\"\noptimizer_kwargs = {lr = 1, beta = 2}\n",
					    &err), -1);
	assert_non_null(strstr(err.msg, "k.toml:3: optimizer.param_groups.0.optimizer_kwargs.beta: "
				      "unknown key"));
	config_free(&c);
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "m.toml", "[[optimizer.param_groups]]\n"
					    "pattern = \".*\"\noptimizer_name = \"AdamW\"\n"
					    "optimizer_kwargs = {momentum = 0.9}\n", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_string_equal(err.msg, "optimizer.param_groups[0]: optimizer_kwargs.momentum: AdamW "
			    "takes no momentum");
	config_free(&c);
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "n.toml", "[[optimizer.param_groups]]\n"
					    "pattern = \".*\"\noptimizer_name = \"SGD\"\n", &err), 0);
	assert_int_equal(config_validate(&c, &err), -1);
	assert_non_null(strstr(err.msg, "optimizer_name \"SGD\": expected AdamW, Adam or DistMuon"));
	/* a table of the array's name is the array's first element's keys */
	assert_int_equal(config_load_string(&c, "t.toml", "[[optimizer.param_groups]]\n"
					    "pattern = \"a\"\n[optimizer.param_groups]\n", &err), -1);
	config_free(&c);
}

static void repeated_table_header_is_refused_with_its_line(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	assert_int_equal(config_load_string(&c, "r.toml", "[training]\nsteps = 2\n[model]\n"
					    "name = \"llama3\"\n[training]\nseq_len = 16\n", &err), -1);
	assert_string_equal(err.msg, "r.toml:5: [training]: defined twice");
	/* a sub-table, and its parent after it, are two tables (TOML allows it) */
	assert_int_equal(config_load_string(&c, "s.toml", "[training.dataloader]\nnum_workers = 0\n"
					    "[training]\nsteps = 3\n", &err), 0);
	assert_int_equal(c.training.steps, 3);
	config_free(&c);
}

static void invalid_utf8_is_refused_with_its_line(void **state)
{
	(void)state;
	job_config c;
	titan_err err = {{0}};
	assert_int_equal(config_defaults(&c, &err), 0);
	/* a stray byte, an overlong '/', a surrogate, a sequence cut short */
	static const char *const bad[] = {"deb\xffug", "a\xc0\xaf" "b", "\xed\xa0\x80", "x\xe2\x82"};
	static const char *const byte[] = {"0xff at column 14", "0xc0 at column 12",
					   "0xed at column 11", "0xe2 at column 12"};
	for (int i = 0; i < 4; i++) {
		char text[128], want[128];
		snprintf(text, sizeof text, "[job]\ndescription = \"ok \xe2\x82\xac\"\n[model]\n"
			 "flavor = \"%s\"\n", bad[i]);
		assert_int_equal(config_load_string(&c, "u.toml", text, &err), -1);
		snprintf(want, sizeof want, "u.toml:4: invalid UTF-8 (byte %s): a TOML file is UTF-8",
			 byte[i]);
		assert_string_equal(err.msg, want);
	}
	/* valid UTF-8 (the euro sign) reads and prints as it was */
	assert_int_equal(config_load_string(&c, "v.toml", "[job]\ndescription = \"ok \xe2\x82\xac\"\n",
					    &err), 0);
	assert_string_equal(c.job.description, "ok \xe2\x82\xac");
	config_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_are_torchtitans),
		cmocka_unit_test(param_groups_are_read_checked_and_printed),
		cmocka_unit_test(toml_subset_is_read),
		cmocka_unit_test(dotted_key_inside_table_extends_the_table),
		cmocka_unit_test(misspelt_key_is_refused_with_line_and_suggestion),
		cmocka_unit_test(bad_values_are_refused_with_reason),
		cmocka_unit_test(overrides_follow_the_file_and_bare_booleans_work),
		cmocka_unit_test(later_features_are_refused_not_ignored),
		cmocka_unit_test(float8_converter_is_taken_with_torchtitans_rules),
		cmocka_unit_test(printed_config_reads_back_identically),
		cmocka_unit_test(every_key_has_a_default_that_parses),
		cmocka_unit_test(every_torchtitan_key_is_known_with_its_type_and_default),
		cmocka_unit_test(every_torchtitan_030_path_is_in_the_table_with_its_preset_value),
		cmocka_unit_test(unbuilt_keys_are_refused_with_the_reason),
		cmocka_unit_test(lists_of_lists_read_from_toml_and_the_command_line),
		cmocka_unit_test(new_keys_are_honoured_or_checked),
		cmocka_unit_test(deeply_nested_array_is_refused_not_a_crash),
		cmocka_unit_test(repeated_table_header_is_refused_with_its_line),
		cmocka_unit_test(invalid_utf8_is_refused_with_its_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
