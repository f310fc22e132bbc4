/* Unit tests of lib/core/json: loading with located errors, typed getters, dumping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/testutil.h"
#include "core/afile.h"
#include "core/json.h"
#include "core/mfile.h"

static json_t *parse(const char *text)
{
	titan_err err;
	json_t *v = tjson_load_buf("config.json", text, strlen(text), 0, &err);
	if (v == NULL)
		fail_msg("%s", err.msg);
	return v;
}

static void syntax_errors_name_file_line_and_column(void **state)
{
	(void)state;
	titan_err err;
	const char *bad = "{\n  \"a\": 1,\n  \"b\": }";
	assert_null(tjson_load_buf("cfg.json", bad, strlen(bad), 0, &err));
	/* the '}' is the 8th character of line 3 */
	assert_string_equal(err.msg, "cfg.json:3:8: unexpected token near '}'");

	assert_null(tjson_load_buf("empty.json", NULL, 0, 0, &err));
	assert_true(strncmp(err.msg, "empty.json:1:", 13) == 0);

	/* A scalar document needs JSON_DECODE_ANY. */
	assert_null(tjson_load_buf("n.json", "42", 2, 0, &err));
	json_t *v = tjson_load_buf("n.json", "42", 2, JSON_DECODE_ANY, &err);
	assert_non_null(v);
	assert_int_equal(json_integer_value(v), 42);
	json_decref(v);

	/* Trailing garbage is an error too. */
	assert_null(tjson_load_buf("t.json", "{} x", 4, 0, &err));
	assert_true(strncmp(err.msg, "t.json:1:", 9) == 0);
}

static void a_missing_file_is_named_with_the_reason(void **state)
{
	(void)state;
	titan_err err;
	char path[300];
	snprintf(path, sizeof path, "%s/nope.json", test_tmpdir);
	assert_null(tjson_load_file(path, 0, &err));
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "No such file"));

	snprintf(path, sizeof path, "%s/bad.json", test_tmpdir);
	assert_int_equal(atomic_write_file(path, "[1,\n2,,]", 8, &err), 0);
	assert_null(tjson_load_file(path, 0, &err));
	char want[400];
	snprintf(want, sizeof want, "%s:2:3: ", path);
	assert_true(strncmp(err.msg, want, strlen(want)) == 0);
}

static void getters_return_typed_values(void **state)
{
	(void)state;
	json_t *o = parse("{\"hidden_size\": 4096, \"rms_norm_eps\": 1e-05, \"tie\": false,"
			  " \"model_type\": \"llama\", \"rope_scaling\": {\"factor\": 8,"
			  " \"type\": \"llama3\"}, \"eos\": [128001, 128009], \"big\": 9007199254740993}");
	titan_err err;
	int64_t i;
	uint64_t u;
	double d;
	int b;
	const char *s;
	json_t *sub;
	assert_int_equal(tjson_get_int(o, "hidden_size", &i, "config.json", &err), 0);
	assert_int_equal(i, 4096);
	assert_int_equal(tjson_get_uint(o, "big", &u, "config.json", &err), 0);
	assert_int_equal(u, 9007199254740993ull); /* beyond a double's 53 bits */
	assert_int_equal(tjson_get_double(o, "rms_norm_eps", &d, "config.json", &err), 0);
	assert_true(d == 1e-05);
	assert_int_equal(tjson_get_bool(o, "tie", &b, "config.json", &err), 0);
	assert_int_equal(b, 0);
	assert_int_equal(tjson_get_string(o, "model_type", &s, "config.json", &err), 0);
	assert_string_equal(s, "llama");
	/* An integer is a fine number; nested paths walk objects. */
	assert_int_equal(tjson_get_double(o, "rope_scaling.factor", &d, "config.json", &err), 0);
	assert_true(d == 8.0);
	assert_int_equal(tjson_get_string(o, "rope_scaling.type", &s, "config.json", &err), 0);
	assert_string_equal(s, "llama3");
	assert_int_equal(tjson_get_object(o, "rope_scaling", &sub, "config.json", &err), 0);
	assert_int_equal(json_object_size(sub), 2);
	assert_int_equal(tjson_get_array(o, "eos", &sub, "config.json", &err), 0);
	assert_int_equal(json_array_size(sub), 2);
	assert_ptr_equal(tjson_at(o, "rope_scaling.factor"),
			 json_object_get(json_object_get(o, "rope_scaling"), "factor"));
	assert_null(tjson_at(o, "rope_scaling.nope"));
	assert_null(tjson_at(o, "hidden_size.x"));
	json_decref(o);
}

static void getters_name_the_missing_or_mistyped_field(void **state)
{
	(void)state;
	json_t *o = parse("{\"hidden_size\": \"4096\", \"eps\": 1.0, \"n\": -3,"
			  " \"rope_scaling\": 8, \"opt\": {\"lr\": \"high\"}}");
	titan_err err;
	int64_t i;
	uint64_t u;
	double d;
	int b;
	const char *s;
	json_t *sub;
	assert_int_equal(tjson_get_int(o, "hidden_size", &i, "config.json", &err), -1);
	assert_string_equal(err.msg, "config.json: field 'hidden_size': expected integer, got string");
	assert_int_equal(tjson_get_int(o, "eps", &i, "config.json", &err), -1);
	assert_string_equal(err.msg, "config.json: field 'eps': expected integer, got real");
	assert_int_equal(tjson_get_uint(o, "n", &u, "config.json", &err), -1);
	assert_string_equal(err.msg,
			    "config.json: field 'n': expected a non-negative integer, got -3");
	assert_int_equal(tjson_get_int(o, "vocab_size", &i, "config.json", &err), -1);
	assert_string_equal(err.msg, "config.json: field 'vocab_size': missing");
	assert_int_equal(tjson_get_double(o, "rope_scaling.factor", &d, "config.json", &err), -1);
	assert_string_equal(err.msg,
			    "config.json: field 'rope_scaling': expected object, got integer");
	assert_int_equal(tjson_get_double(o, "opt.lr", &d, "job.json", &err), -1);
	assert_string_equal(err.msg, "job.json: field 'opt.lr': expected number, got string");
	assert_int_equal(tjson_get_bool(o, "eps", &b, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'eps': expected boolean, got real");
	assert_int_equal(tjson_get_string(o, "n", &s, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'n': expected string, got integer");
	assert_int_equal(tjson_get_object(o, "n", &sub, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'n': expected object, got integer");
	assert_int_equal(tjson_get_array(o, "opt", &sub, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'opt': expected array, got object");
	json_decref(o);

	/* The document itself is not an object. */
	json_t *a = tjson_load_buf("list.json", "[1]", 3, 0, &err);
	assert_non_null(a);
	assert_int_equal(tjson_get_int(a, "x", &i, "list.json", &err), -1);
	assert_string_equal(err.msg, "list.json: expected an object, got array");
	json_decref(a);
}

static void optional_fields_take_defaults_but_not_wrong_types(void **state)
{
	(void)state;
	json_t *o = parse("{\"steps\": 10, \"name\": null, \"lr\": 3, \"flag\": true,"
			  " \"bad\": \"x\", \"sub\": 5}");
	titan_err err;
	int64_t i;
	double d;
	int b;
	const char *s;
	assert_int_equal(tjson_opt_int(o, "steps", &i, 7, "c", &err), 1);
	assert_int_equal(i, 10);
	assert_int_equal(tjson_opt_int(o, "warmup", &i, 7, "c", &err), 0);
	assert_int_equal(i, 7);
	assert_int_equal(tjson_opt_string(o, "name", &s, "dflt", "c", &err), 0);
	assert_string_equal(s, "dflt");
	assert_int_equal(tjson_opt_double(o, "lr", &d, 0.5, "c", &err), 1);
	assert_true(d == 3.0);
	assert_int_equal(tjson_opt_double(o, "deep.er", &d, 0.5, "c", &err), 0);
	assert_true(d == 0.5);
	assert_int_equal(tjson_opt_bool(o, "flag", &b, 0, "c", &err), 1);
	assert_int_equal(b, 1);
	assert_int_equal(tjson_opt_bool(o, "bad", &b, 0, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'bad': expected boolean, got string");
	assert_int_equal(tjson_opt_int(o, "sub.x", &i, 1, "c", &err), -1);
	assert_string_equal(err.msg, "c: field 'sub': expected object, got integer");
	json_decref(o);
}

static void dump_sorts_keys_and_indents_into_an_atomic_file(void **state)
{
	(void)state;
	json_t *o = parse("{\"b\": 1, \"a\": [1, \"two\"], \"c\": {\"z\": true, \"y\": null},"
			  " \"e\": {}, \"d\": \"caf\\u00e9\"}");
	const char *want = "{\n"
			   "  \"a\": [\n"
			   "    1,\n"
			   "    \"two\"\n"
			   "  ],\n"
			   "  \"b\": 1,\n"
			   "  \"c\": {\n"
			   "    \"y\": null,\n"
			   "    \"z\": true\n"
			   "  },\n"
			   "  \"d\": \"caf\xc3\xa9\",\n"
			   "  \"e\": {}\n"
			   "}\n";
	char *s = tjson_dump_str(o);
	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);

	titan_err err;
	char path[300];
	snprintf(path, sizeof path, "%s/out.json", test_tmpdir);
	assert_int_equal(tjson_dump_file(o, path, &err), 0);
	mfile m;
	assert_int_equal(mfile_open(&m, path, &err), 0);
	assert_int_equal(m.size, strlen(want));
	assert_memory_equal(m.data, want, m.size);
	mfile_close(&m);

	/* What was written loads back equal. */
	json_t *back = tjson_load_file(path, 0, &err);
	assert_non_null(back);
	assert_true(json_equal(o, back));
	json_decref(back);
	json_decref(o);

	/* A folder that does not exist: the error names the file. */
	snprintf(path, sizeof path, "%s/no/such/out.json", test_tmpdir);
	json_t *n = json_integer(1);
	assert_int_equal(tjson_dump_file(n, path, &err), -1);
	assert_non_null(strstr(err.msg, "no/such/out.json"));
	json_decref(n);
}

static void dumped_reals_read_back_bit_exact(void **state)
{
	(void)state;
	const double vals[] = {0.1, 1e-05, 500000.0, 1.0 / 3.0, 3e-4, 6.02214076e23, -0.0};
	for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
		json_t *v = json_real(vals[k]);
		char *s = tjson_dump_str(v);
		titan_err err;
		json_t *back = tjson_load_buf("x", s, strlen(s), JSON_DECODE_ANY, &err);
		assert_non_null(back);
		double got = json_real_value(back);
		assert_memory_equal(&got, &vals[k], sizeof got);
		json_decref(back);
		json_decref(v);
		free(s);
	}
}

/* The references are Python 3's repr(float) and
 * json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False), run by hand. */
static void reals_are_written_as_python_repr(void **state)
{
	(void)state;
	static const struct {
		double v;
		const char *repr;
	} cases[] = {
		{0.1, "0.1"}, {1e-05, "1e-05"}, {500000.0, "500000.0"},
		{1.0 / 3.0, "0.3333333333333333"}, {3e-4, "0.0003"},
		{6.02214076e23, "6.02214076e+23"}, {-0.0, "-0.0"}, {1e16, "1e+16"},
		{1e15, "1000000000000000.0"}, {123.456, "123.456"}, {5e-324, "5e-324"},
		{1.7976931348623157e308, "1.7976931348623157e+308"}, {0.0001, "0.0001"},
		{0.00001234, "1.234e-05"}, {2.5, "2.5"}, {100.0, "100.0"},
		{-2.5e-300, "-2.5e-300"}, {9007199254740993.0, "9007199254740992.0"},
		{1e-4 * 3, "0.00030000000000000003"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char b[64];
		tjson_format_real(b, sizeof b, cases[i].v);
		assert_string_equal(b, cases[i].repr);
	}
}

static void dump_matches_python_json_dumps(void **state)
{
	(void)state;
	json_t *o = parse("{\"b\":[1,2.5,{\"x\":null}],\"a\":\"tab\\there \\\"q\\\" back\\\\ nl\\n"
			  " ctl\\u0001\\u001f del\\u007f caf\\u00e9 \\ud83d\\ude00\",\"e\":{},"
			  "\"f\":[],\"c\":{\"z\":true,\"y\":false},\"eps\":1e-05,"
			  "\"theta\":500000.0,\"n\":-7}");
	const char *want =
		"{\n  \"a\": \"tab\\there \\\"q\\\" back\\\\ nl\\n ctl\\u0001\\u001f del\x7f"
		" caf\xc3\xa9 \xf0\x9f\x98\x80\",\n  \"b\": [\n    1,\n    2.5,\n    {\n"
		"      \"x\": null\n    }\n  ],\n  \"c\": {\n    \"y\": false,\n"
		"    \"z\": true\n  },\n  \"e\": {},\n  \"eps\": 1e-05,\n  \"f\": [],\n"
		"  \"n\": -7,\n  \"theta\": 500000.0\n}\n";
	char *s = tjson_dump_str(o);
	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
	json_decref(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(syntax_errors_name_file_line_and_column),
		cmocka_unit_test(a_missing_file_is_named_with_the_reason),
		cmocka_unit_test(getters_return_typed_values),
		cmocka_unit_test(getters_name_the_missing_or_mistyped_field),
		cmocka_unit_test(optional_fields_take_defaults_but_not_wrong_types),
		cmocka_unit_test(dump_sorts_keys_and_indents_into_an_atomic_file),
		cmocka_unit_test(dumped_reals_read_back_bit_exact),
		cmocka_unit_test(reals_are_written_as_python_repr),
		cmocka_unit_test(dump_matches_python_json_dumps),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
