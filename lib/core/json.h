/* json.h: helpers over jansson (the values themselves are jansson's json_t).
 *
 * Loading names the place of a syntax error ("config.json:3:17: ..."); typed
 * getters name the field and what was wrong with it
 * ("config.json: field 'hidden_size': expected integer, got string");
 * dumping writes indented, key-sorted JSON through an atomic file.
 *
 * A getter's path is a key or several joined by '.', walked through nested
 * objects ("rope_scaling.factor"); a key that itself holds a '.' is reached
 * with jansson's json_object_get on its parent.  `where` names the document in
 * messages (a file name, or "config.json: model" for a part of one).
 * Strings and objects a getter returns are borrowed from the document. */
#ifndef TITAN_JSON_H
#define TITAN_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Parse a whole file / a buffer named name.  flags are jansson's decoding flags
 * (0 usually; JSON_DECODE_ANY for a scalar at the top, JSON_REJECT_DUPLICATES).
 * Returns a new reference, or NULL with "NAME:LINE:COLUMN: what" in *err. */
json_t *tjson_load_file(const char *path, size_t flags, titan_err *err);
json_t *tjson_load_buf(const char *name, const void *buf, size_t n, size_t flags,
		       titan_err *err);

/* "object", "array", "string", "integer", "real", "boolean", "null"; "missing"
 * for NULL. */
const char *tjson_type_name(const json_t *v);

/* The value at path, or NULL (borrowed). */
json_t *tjson_at(const json_t *root, const char *path);

/* Required fields: 0, or -1 naming the field when it is missing or of another
 * type.  get_int rejects reals ("1.0" is not an integer field); get_double takes
 * integers too; get_uint also rejects negative numbers. */
int tjson_get_int(const json_t *o, const char *path, int64_t *out, const char *where,
		  titan_err *err);
int tjson_get_uint(const json_t *o, const char *path, uint64_t *out, const char *where,
		   titan_err *err);
int tjson_get_double(const json_t *o, const char *path, double *out, const char *where,
		     titan_err *err);
int tjson_get_bool(const json_t *o, const char *path, int *out, const char *where,
		   titan_err *err);
int tjson_get_string(const json_t *o, const char *path, const char **out, const char *where,
		     titan_err *err);
int tjson_get_object(const json_t *o, const char *path, json_t **out, const char *where,
		     titan_err *err);
int tjson_get_array(const json_t *o, const char *path, json_t **out, const char *where,
		    titan_err *err);

/* Optional fields: absent or null leaves def in *out and returns 0; present and
 * of the right type returns 1; of another type returns -1 naming the field. */
int tjson_opt_int(const json_t *o, const char *path, int64_t *out, int64_t def,
		  const char *where, titan_err *err);
int tjson_opt_double(const json_t *o, const char *path, double *out, double def,
		     const char *where, titan_err *err);
int tjson_opt_bool(const json_t *o, const char *path, int *out, int def, const char *where,
		   titan_err *err);
int tjson_opt_string(const json_t *o, const char *path, const char **out, const char *def,
		     const char *where, titan_err *err);

/* Serialise with 2-space indentation and sorted keys, ending in a newline,
 * exactly as Python's json.dumps(v, indent=2, sort_keys=True,
 * ensure_ascii=False) + "\n" would (reals in Python's shortest form: 1e-05,
 * 500000.0); the caller frees the string (NULL when memory runs out). */
char *tjson_dump_str(const json_t *v);
/* The same, written atomically to path (lib/core/afile.h). */
int tjson_dump_file(const json_t *v, const char *path, titan_err *err);
/* A double as Python's repr() writes it: the shortest digits that read back
 * to the same value ("0.1", "1e-05", "500000.0", "1e+16"). */
void tjson_format_real(char *out, size_t n, double x);

#endif
