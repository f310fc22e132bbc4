/* fuzz_jinja: lib/jinja's parser and renderer on arbitrary template text.
 *
 * Input: the template text.  It is rendered over a fixed conversation (a
 * system, user, assistant with <think> and tool_calls, and tool message, a
 * tools list, bos_token and add_generation_prompt), the variables real chat
 * templates read.
 * Properties: parsing and rendering never crash, stay within the engine's
 * limits, and fail with a one-line message naming the template's line and
 * column (or "chat template:" for memory and size limits); a rendering is
 * NUL-terminated at its length. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static const char vars_json[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \" be brief \"},"
	"{\"role\": \"user\", \"content\": \"2 + 3?\"},"
	"{\"role\": \"assistant\", \"content\": \"<think>\\nadd\\n</think>\\n\\n5\","
	" \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]},"
	"{\"role\": \"tool\", \"content\": \"ok\"}],"
	"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
	"\"bos_token\": \"<s>\", \"add_generation_prompt\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static json_t *vars;
	if (vars == NULL)
		vars = json_loads(vars_json, 0, NULL);
	check(vars != NULL);
	titan_err e;
	e.msg[0] = '\0';
	jinja_tpl *t = jinja_parse((const char *)data, size, &e);
	if (t == NULL) {
		check(strncmp(e.msg, "chat template", 13) == 0 && strchr(e.msg, '\n') == NULL);
		return 0;
	}
	char *out = NULL;
	size_t n = 0;
	if (jinja_render(t, vars, &out, &n, &e) != 0) {
		check(strncmp(e.msg, "chat template", 13) == 0);
	} else {
		check(out != NULL && out[n] == '\0');
		free(out);
	}
	jinja_free(t);
	return 0;
}
