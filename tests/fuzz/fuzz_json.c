/* fuzz_json: lib/core/json on arbitrary bytes.
 *
 * Input: an optional field path, a newline, then the document ("a.b\n{...}");
 * without a newline in the first 64 bytes the whole input is the document.
 * Properties: loading never crashes and fails with a located message; every
 * getter agrees with tjson_at about the value's type; what loads dumps to text
 * that loads back equal (the writer and the reader agree). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void getters(const json_t *doc, const char *path)
{
	titan_err err;
	const json_t *at = tjson_at(doc, path);
	int64_t i;
	uint64_t u;
	double d;
	int b;
	const char *s;
	json_t *o;
	check((tjson_get_int(doc, path, &i, "f.json", &err) == 0) == json_is_integer(at));
	if (json_is_integer(at))
		check(i == json_integer_value(at));
	check((tjson_get_uint(doc, path, &u, "f.json", &err) == 0) ==
	      (json_is_integer(at) && json_integer_value(at) >= 0));
	check((tjson_get_double(doc, path, &d, "f.json", &err) == 0) == json_is_number(at));
	check((tjson_get_bool(doc, path, &b, "f.json", &err) == 0) == json_is_boolean(at));
	check((tjson_get_string(doc, path, &s, "f.json", &err) == 0) == json_is_string(at));
	check((tjson_get_object(doc, path, &o, "f.json", &err) == 0) == json_is_object(at));
	check((tjson_get_array(doc, path, &o, "f.json", &err) == 0) == json_is_array(at));
	if (!json_is_integer(at))
		check(strncmp(err.msg, "f.json: ", 8) == 0);
	int rc = tjson_opt_int(doc, path, &i, 42, "f.json", &err);
	if (at == NULL || json_is_null(at))
		check(rc == 0 || rc == -1); /* -1 only when a parent is not an object */
	else
		check(rc == (json_is_integer(at) ? 1 : -1));
	if (rc == 0)
		check(i == 42);
	tjson_opt_string(doc, path, &s, "x", "f.json", &err);
	tjson_opt_double(doc, path, &d, 0.5, "f.json", &err);
	tjson_opt_bool(doc, path, &b, 1, "f.json", &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[65] = "a";
	const uint8_t *nl = memchr(data, '\n', size < 64 ? size : 64);
	if (nl != NULL) {
		size_t plen = (size_t)(nl - data);
		memcpy(path, data, plen);
		path[plen] = '\0';
		size -= plen + 1;
		data = nl + 1;
	}
	titan_err err;
	err.msg[0] = '\0';
	json_t *doc = tjson_load_buf("f.json", data, size, JSON_DECODE_ANY, &err);
	if (doc == NULL) {
		check(strncmp(err.msg, "f.json:", 7) == 0);
		return 0;
	}
	getters(doc, path);

	char *text = tjson_dump_str(doc);
	check(text != NULL);
	json_t *back = tjson_load_buf("dumped", text, strlen(text), JSON_DECODE_ANY, &err);
	check(back != NULL);
	check(json_equal(doc, back));
	json_decref(back);
	free(text);
	json_decref(doc);
	return 0;
}
