/* lib/jinja renders chat templates as jinja2 renders them in torchtitan
 * 0.3.0's environment: tests/jinja/golden/renders.jsonl (from
 * scripts/chat_corpus.py) holds jinja2's text, or its error, for small
 * templates over the syntax titan covers and for the Llama 3, Qwen3 and
 * torchtitan test tokenizers' real templates over a generated chat corpus;
 * titan must give the same bytes, or fail where jinja2 fails.  What titan
 * does not parse is refused with the template's line and column. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"

#include "../tok/fixture.h"

#define GOLDEN "tests/jinja/golden/renders.jsonl"

static const struct {
	const char *name, *rel;
} templates[] = {
	{"llama3", "tokenizers/llama3_1/tokenizer_config.json"},
	{"qwen3", "tokenizers/qwen3/tokenizer_config.json"},
	{"tt_test", "tokenizers/torchtitan_test/tokenizer_config.json"},
};

/* The template of a golden line: its inline source, or a fixture's
 * chat_template (NULL when the fixture is missing). */
static jinja_tpl *template_of(json_t *row, titan_err *err, int *missing)
{
	const char *src = json_string_value(json_object_get(row, "source"));
	*missing = 0;
	if (src)
		return jinja_parse(src, strlen(src), err);
	const char *name = json_string_value(json_object_get(row, "template"));
	for (size_t i = 0; name && i < sizeof templates / sizeof *templates; i++) {
		if (strcmp(name, templates[i].name))
			continue;
		const char *path = fixture_path(templates[i].rel);
		if (path == NULL) {
			*missing = 1;
			return NULL;
		}
		json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
		const char *t = json_string_value(json_object_get(cfg, "chat_template"));
		jinja_tpl *tpl = t ? jinja_parse(t, strlen(t), err) : NULL;
		json_decref(cfg);
		return tpl;
	}
	fail_msg("golden line names unknown template %s", name ? name : "(none)");
	return NULL;
}

static void renders_equal_jinja2(void **state)
{
	(void)state;
	FILE *f = fopen(GOLDEN, "r");
	assert_non_null(f);
	char *line = NULL;
	size_t cap = 0;
	int n = 0, skipped = 0, errors = 0;
	const char *skipped_rel = NULL;
	while (getline(&line, &cap, f) > 0) {
		n++;
		json_t *row = json_loads(line, 0, NULL);
		assert_non_null(row);
		titan_err err = {{0}};
		int missing;
		jinja_tpl *t = template_of(row, &err, &missing);
		if (missing) {
			skipped++;
			skipped_rel = json_string_value(json_object_get(row, "template"));
			json_decref(row);
			continue;
		}
		if (t == NULL)
			fail_msg("line %d: %s", n, err.msg);
		const char *want = json_string_value(json_object_get(row, "text"));
		char *out;
		size_t len;
		int rc = jinja_render(t, json_object_get(row, "vars"), &out, &len, &err);
		if (want == NULL) {
			if (rc == 0)
				fail_msg("line %d: jinja2 fails (%s), titan rendered %.200s", n,
					 json_string_value(json_object_get(row, "error")), out);
			assert_non_null(strstr(err.msg, "chat template line "));
			errors++;
		} else {
			if (rc != 0)
				fail_msg("line %d: %s", n, err.msg);
			if (len != strlen(want) || memcmp(out, want, len) != 0)
				fail_msg("line %d: titan %.300s\njinja2 %.300s", n, out, want);
			free(out);
		}
		jinja_free(t);
		json_decref(row);
	}
	free(line);
	fclose(f);
	assert_true(n > 300);
	assert_true(errors >= 6);
	if (skipped) {
		if (fixture_ci())
			fail_msg("%d renderings of %s skipped under CI=true", skipped, skipped_rel);
		fprintf(stderr, "# SKIP %d renderings of %s: no fixture\n", skipped, skipped_rel);
	}
}

/* parse fails with "chat template line L col C: ..." containing want */
static void refused(const char *src, const char *want)
{
	titan_err err = {{0}};
	jinja_tpl *t = jinja_parse(src, strlen(src), &err);
	if (t != NULL)
		fail_msg("parsed %s", src);
	if (strstr(err.msg, want) == NULL)
		fail_msg("%s: message \"%s\" lacks \"%s\"", src, err.msg, want);
}

static void unsupported_and_bad_templates_name_line_and_column(void **state)
{
	(void)state;
	refused("a\n{% macro f() %}{% endmacro %}", "chat template line 2 col 4: tag 'macro' is not supported");
	refused("{% if x %}\n  {% endfor %}", "line 2 col 6: unexpected 'endfor'");
	refused("{% for x in y %}", "line 1 col 4: missing {% endfor %}");
	refused("{{ 'abc }}", "line 1 col 4: unterminated string");
	refused("{{ a ++ }}", "line 1 col 9: expected an expression, found '}}'");
	refused("{% break %}", "'break' outside a for loop");
	refused("{% set a, b = 1, 2 %}", "not supported");
	refused("{% generation %}x{% endgeneration %}", "tag 'generation' is not supported");
	refused("{{ x", "unexpected end of template");
	refused("{{ a | }}", "expected a filter name");
	refused("{{ '\\u12' }}", "bad \\u escape");
}

static void render_errors_name_line_and_column(void **state)
{
	(void)state;
	const char *src = "ok\n  {{ messages[0].content.nope() }}";
	titan_err err = {{0}};
	jinja_tpl *t = jinja_parse(src, strlen(src), &err);
	assert_non_null(t);
	json_t *vars = json_pack("{s:[{s:s}]}", "messages", "content", "x");
	char *out;
	size_t n;
	assert_int_equal(jinja_render(t, vars, &out, &n, &err), -1);
	assert_non_null(strstr(err.msg, "chat template line 2 col"));
	assert_non_null(strstr(err.msg, "no method 'nope'"));
	json_decref(vars);
	jinja_free(t);
	src = "{% for i in range(2000000) %}{% endfor %}";
	t = jinja_parse(src, strlen(src), &err);
	assert_non_null(t);
	assert_int_equal(jinja_render(t, NULL, &out, &n, &err), -1);
	assert_non_null(strstr(err.msg, "loop steps"));
	jinja_free(t);
	/* under the step limit, each step's `loop` and list held to the end */
	src = "{% for i in range(450000) %}{% set x = [i, i, i, i, i, i, i, i] %}{% endfor %}";
	t = jinja_parse(src, strlen(src), &err);
	assert_non_null(t);
	assert_int_equal(jinja_render(t, NULL, &out, &n, &err), -1);
	assert_non_null(strstr(err.msg, "values take more than 256 MiB"));
	jinja_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(renders_equal_jinja2),
		cmocka_unit_test(unsupported_and_bad_templates_name_line_and_column),
		cmocka_unit_test(render_errors_name_line_and_column),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
