/* toml.h (private to lib/config): a TOML reader for the subset training
 * configs use: [tables] and [dotted.tables], bare, quoted and dotted keys,
 * basic and literal strings (with escapes, \uXXXX), integers (with _ and
 * 0x/0o/0b), floats (inf, nan), booleans, arrays (nested, multi-line, trailing
 * comma), comments, inline tables (key = {a = 1, b = [2, 3]}: the callback
 * sees key.a and key.b) and arrays of tables ([[name]]: the callback sees
 * the N-th element's keys as name.N.key, N from 0).  Not supported (refused
 * with a message): multi-line strings, inline tables inside arrays, dates. */
#ifndef TITAN_CONFIG_TOML_H
#define TITAN_CONFIG_TOML_H

#include <stdint.h>

#include "core/err.h"

typedef enum toml_kind { TOML_STR, TOML_INT, TOML_FLOAT, TOML_BOOL, TOML_ARRAY } toml_kind;

typedef struct toml_value {
	toml_kind kind;
	char *s;        /* TOML_STR (owned) */
	int64_t i;      /* TOML_INT */
	double f;       /* TOML_FLOAT */
	int b;          /* TOML_BOOL */
	struct toml_value *items; /* TOML_ARRAY (owned) */
	int n;
} toml_value;

/* Called once per key = value with the full dotted key ("training.steps") and
 * the line it is on; returns 0 or -1 (with err set) to stop. */
typedef int (*toml_key_fn)(void *ctx, const char *key, const toml_value *v, int line,
			   titan_err *err);

/* Parse text; name prefixes messages ("FILE:LINE: ...").  Duplicate keys are
 * refused. */
int toml_parse(const char *name, const char *text, toml_key_fn fn, void *ctx, titan_err *err);

void toml_value_free(toml_value *v);
/* "string", "integer", "float", "boolean", "array". */
const char *toml_kind_name(toml_kind k);

#endif
