/* libFuzzer target: the JSONL reader of lib/textin.
 *
 * Each input is read as a JSON Lines file through textin (libarchive's
 * detection included, from a memfd), and every line is also decoded directly
 * with textin_json_field.  Properties: no crash, no leak; a decoded field
 * quoted back with textin_json_quote decodes to the same bytes; a field that
 * decodes is valid UTF-8 (NUL bytes included).
 *
 *   make fuzz && build/fuzz/fuzz_jsonl -max_len=4096 tests/fuzz/corpus/jsonl
 * (make check replays the kept corpus through tests/fuzz/replay.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "textin/textin.h"

static void check_line(const char *line, size_t n)
{
	textin_buf out = {0}, q = {0}, back = {0};
	titan_err err;
	if (textin_json_field(line, n, "text", &out, &err) == 0) {
		size_t bad;
		if (!textin_utf8_valid(out.p, out.n, &bad))
			abort();
		if (textin_buf_append(&q, "{\"text\":", 8) != 0 ||
		    textin_json_quote(&q, out.p, out.n) != 0 || textin_buf_append(&q, "}", 1) != 0)
			abort();
		if (textin_json_field(q.p, q.n, "text", &back, &err) != 0)
			abort();
		if (back.n != out.n || memcmp(back.p, out.p, out.n) != 0)
			abort();
	}
	free(out.p);
	free(q.p);
	free(back.p);
}

static void read_file(const uint8_t *data, size_t size, int skip_bad)
{
	int fd = memfd_create("fuzz", 0);
	if (fd < 0)
		return;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	textin_opts o = {.format = TEXTIN_JSONL, .skip_bad = skip_bad};
	titan_err err;
	textin *t = textin_open(path, &o, &err);
	if (t != NULL) {
		const char *doc;
		size_t len;
		while (textin_next(t, &doc, &len, &err) == 1)
			if (doc[len] != '\0')
				abort();
		textin_close(t);
	}
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data, *end = s + size;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
		check_line(s, n);
		s += n + (nl != NULL);
	}
	read_file(data, size, size > 0 && (data[0] & 1));
	return 0;
}
