/* param_groups.h (private to lib/config): optimizer.param_groups, read from
 * TOML's [[optimizer.param_groups]] tables, checked, printed. */
#ifndef TITAN_CONFIG_PARAM_GROUPS_H
#define TITAN_CONFIG_PARAM_GROUPS_H

#include <stdio.h>

#include "config/config.h"
#include "config/toml.h"

#define PG_PREFIX "optimizer.param_groups."

/* One key of a group: rest is what follows PG_PREFIX ("0.pattern",
 * "1.optimizer_kwargs.lr"); groups come in order (N is 0, then 1, ...).
 * Messages are prefixed with where (FILE:LINE). */
int pg_set(job_config *c, const char *rest, const toml_value *v, const char *where, int line,
	   titan_err *err);
void pg_free(job_config *c);
/* What a run may not have: a group without a pattern or an optimizer, an
 * optimizer other than AdamW, Adam and DistMuon, a keyword the optimizer
 * has not, a value out of its range, a pattern that is not a regular
 * expression. */
int pg_validate(const job_config *c, titan_err *err);
/* The groups as TOML [[optimizer.param_groups]] tables, the kwargs given
 * (config_print's tail, and the agreement text's; nothing without groups). */
void pg_print(const job_config *c, FILE *out);

#endif
