/* tt030.h: torchtitan 0.3.0's launch on titan-train's configuration.
 *
 * 0.3.0 has no TOML files: a run is a preset, a Python function of its
 * models/<family>/config_registry.py, chosen with --module FAMILY --config
 * PRESET, and its command line overrides the preset's leaves by path
 * (--training.steps 15, --dump_folder out, --dataloader.dataset_path data).
 * Here each preset is its values in titan's keys (0.2.2's names) and each of
 * 0.3.0's paths is the titan key it sets, or a refusal that says why.  A run
 * started so follows 0.3.0 (job_config.follows_030): documents packed and
 * masked, its checkpoint layout.  0.2.2's keys are refused in such a run and
 * 0.3.0's paths in a TOML run, each naming the key: one run, one version. */
#ifndef TITAN_CONFIG_TT030_H
#define TITAN_CONFIG_TT030_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/err.h"

/* The i-th of 0.3.0's presets titan has (and its module), or NULL past them. */
const char *tt030_preset_name(int i, const char **module);
/* Whether --module module --config name is one of 0.3.0's presets titan has. */
int tt030_is_preset(const char *module, const char *name);
/* The preset's values, then argv's 0.3.0 overrides, into c (from
 * config_defaults); sets c->follows_030.  Arguments that are not options go
 * to rest (rest[0] = argv[0]) as config_from_args does; --module and
 * --config with their values are skipped. */
int tt030_config(job_config *c, const char *module, const char *name, int argc, char **argv,
		 int *nrest, char **rest, titan_err *err);
/* 0.3.0's path that a 0.2.2 run was given (for its refusal), or NULL. */
const char *tt030_path_of(const char *arg);

/* Whether the named preset is refused: why (one line), or NULL. */
const char *tt030_preset_refusal(const char *name);
/* The presets as TSV (module, preset, honoured|refused, why it is refused
 * or how titan honours it, or -).  0, or -1
 * when writing failed. */
int tt030_list_presets(FILE *out);
/* A 0.3.0 run's configuration as 0.3.0's --debug.print_config logs it
 * ("Running with configs: " and Trainer.Config.to_dict() as json.dumps
 * (indent=2) writes it): model_spec's name and flavor, then every path of the
 * table that has titan's value (those that set a key, and the one value of
 * the others), in Trainer.Config's order.  vocab: the model's vocabulary
 * (the loss's global_vocab_size).  0, or -1 (not a 0.3.0 run, write error). */
int tt030_print_config(const job_config *c, int64_t vocab, FILE *out);

/* The table as TSV (path, what: sets|only|accepted|refused, titan key or -,
 * the value accepted or -, why or -), for titan-config(5).  0, or -1 when
 * writing failed. */
int tt030_list_paths(FILE *out);

/* The table, for the tests. */
typedef struct tt030_path {
	const char *path; /* 0.3.0's */
	const char *key;  /* titan's key it sets ("@name": job_config.loss030's),
			     or NULL: none */
	const char *only; /* NULL, or the one value accepted */
	const char *why;  /* what titan does with it, or why it is refused */
	int refused;      /* every value refused */
} tt030_path;
const tt030_path *tt030_paths(int *n);

#endif
