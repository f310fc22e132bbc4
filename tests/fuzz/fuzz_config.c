/* fuzz_config: lib/config's TOML reader and schema on arbitrary bytes, as
 * titan-train reads a --config file.
 *
 * Properties: reading never crashes (arrays nested without end included);
 * a file it accepts validates or is refused with a message, and what
 * config_print writes of it reads back to the same configuration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static char *printed(const job_config *c)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	if (f == NULL)
		return NULL;
	config_print(c, f);
	fclose(f);
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	job_config c;
	titan_err err;
	if (config_defaults(&c, &err) != 0) {
		free(text);
		return 0;
	}
	if (config_load_string(&c, "fuzz.toml", text, &err) == 0) {
		if (config_validate(&c, &err) != 0 && err.msg[0] == '\0')
			abort();
		char *a = printed(&c);
		job_config b;
		if (a != NULL && config_defaults(&b, &err) == 0) {
			if (config_load_string(&b, "printed", a, &err) != 0)
				abort();
			char *bb = printed(&b);
			if (bb != NULL && strcmp(a, bb) != 0)
				abort();
			free(bb);
			config_free(&b);
		}
		free(a);
	} else if (strncmp(err.msg, "fuzz.toml", 9) != 0) {
		abort();
	}
	config_free(&c);
	free(text);
	return 0;
}
