/* Unit tests of lib/textin: JSON string decoding, UTF-8 checks, quoting, and
 * documents out of plain, blank-line and JSONL files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "textin/textin.h"

/* Decode field "text" of line; assert success and the exact bytes. */
static void want_text(const char *line, const char *bytes, size_t n)
{
	textin_buf b = {0};
	titan_err err = {{0}};
	int rc = textin_json_field(line, strlen(line), "text", &b, &err);
	if (rc != 0)
		fail_msg("%s: %s", line, err.msg);
	assert_int_equal(b.n, n);
	assert_memory_equal(b.p, bytes, n);
	assert_int_equal(b.p[n], '\0');
	free(b.p);
}

static void want_bad(const char *line, size_t n, const char *reason)
{
	textin_buf b = {0};
	titan_err err = {{0}};
	if (textin_json_field(line, n, "text", &b, &err) == 0)
		fail_msg("accepted malformed line: %.*s", (int)n, line);
	if (strstr(err.msg, reason) == NULL)
		fail_msg("reason '%s' does not mention '%s'", err.msg, reason);
	free(b.p);
}

static void json_simple_escapes_decode_exactly(void **state)
{
	(void)state;
	want_text("{\"text\":\"hello\"}", "hello", 5);
	want_text("  {\"text\" : \"a\\nb\\t\\\"\\\\\\/\\b\\f\\r\"}\r", "a\nb\t\"\\/\b\f\r", 10);
	want_text("{\"text\":\"\"}", "", 0);
	want_text("{\"text\":\"caf\\u00e9 \\u00E9\"}", "caf\xC3\xA9 \xC3\xA9", 8);
	want_text("{\"text\":\"\xE2\x82\xAC\"}", "\xE2\x82\xAC", 3);
}

static void json_surrogate_pair_joins_and_lone_surrogate_is_fffd(void **state)
{
	(void)state;
	want_text("{\"text\":\"\\ud83d\\ude00\"}", "\xF0\x9F\x98\x80", 4);
	want_text("{\"text\":\"\\ud800\"}", "\xEF\xBF\xBD", 3);
	want_text("{\"text\":\"\\udc00x\"}", "\xEF\xBF\xBDx", 4);
	want_text("{\"text\":\"\\ud800\\u0041\"}", "\xEF\xBF\xBD" "A", 4);
	/* A high surrogate then a valid pair: the first is lone. */
	want_text("{\"text\":\"\\ud800\\ud800\\udc00\"}", "\xEF\xBF\xBD\xF0\x90\x80\x80", 7);
	want_text("{\"text\":\"\\udbff\\udfff\"}", "\xF4\x8F\xBF\xBF", 4);
}

static void json_nul_escape_is_a_nul_byte(void **state)
{
	(void)state;
	want_text("{\"text\":\"a\\u0000b\"}", "a\0b", 3);
}

static void json_last_duplicate_key_wins_and_other_fields_are_skipped(void **state)
{
	(void)state;
	want_text("{\"text\":\"one\",\"text\":\"two\"}", "two", 3);
	want_text("{\"url\":\"http://x\",\"n\":[1,-2.5e+3,{\"a\":null,\"b\":[true,false]}],"
		  "\"text\":\"x\",\"t\":\"2019-04-25T12:57:54Z\"}", "x", 1);
	want_text("{\"te\\u0078t\":\"escaped key\"}", "escaped key", 11);
	want_text("{\"x\":NaN,\"y\":-Infinity,\"text\":\"p\"}", "p", 1);
}

static void json_malformed_lines_are_rejected_with_a_reason(void **state)
{
	(void)state;
	want_bad("{\"url\":\"x\"}", 11, "no \"text\" field");
	want_bad("{\"text\":3}", 10, "not a string");
	want_bad("{\"text\":\"a\",\"text\":null}", 24, "not a string");
	want_bad("{\"text\":\"a\"} x", 14, "extra data");
	want_bad("{\"text\":\"abc", 12, "unterminated string");
	want_bad("{\"text\":\"a\tb\"}", 14, "control character");
	want_bad("{\"text\":\"a\xFF\"}", 13, "invalid UTF-8");
	want_bad("{\"text\":\"\xC0\x80\"}", 14, "invalid UTF-8");
	want_bad("{\"text\":\"\xED\xA0\x80\"}", 15, "invalid UTF-8");
	want_bad("{\"text\":\"\\x41\"}", 15, "bad escape");
	want_bad("{\"text\":\"\\u12G4\"}", 17, "bad \\u escape");
	want_bad("[\"text\"]", 8, "expected a JSON object");
	want_bad("", 0, "found nothing");
	want_bad("{", 1, "expected a string key");
	want_bad("{\"a\":01,\"text\":\"x\"}", 19, "expected ',' or '}'");
	want_bad("{\"a\":[1,],\"text\":\"x\"}", 21, "");
	want_bad("{\"a\" 1}", 7, "expected ':'");
	want_bad("{\"text\":\"x\"\0}", 13, "");
	want_bad("{\"a\":tru}", 9, "unexpected character");
}

static void json_deep_nesting_is_an_error_not_a_crash(void **state)
{
	(void)state;
	size_t depth = 100000;
	char *s = malloc(2 * depth + 16);
	assert_non_null(s);
	size_t n = 0;
	n += (size_t)sprintf(s, "{\"a\":");
	for (size_t i = 0; i < depth; i++)
		s[n++] = '[';
	want_bad(s, n, "nesting too deep");
	free(s);
}

static void utf8_validation_follows_the_standard(void **state)
{
	(void)state;
	size_t bad = 99;
	assert_true(textin_utf8_valid("plain ascii text, long enough", 29, &bad));
	assert_true(textin_utf8_valid("\xF4\x8F\xBF\xBF\xEF\xBF\xBD\xC2\x80", 9, &bad));
	assert_false(textin_utf8_valid("abcdefghij\xF4\x90\x80\x80", 14, &bad));
	assert_int_equal(bad, 10);
	assert_false(textin_utf8_valid("\xE0\x80\x80", 3, &bad)); /* overlong */
	assert_false(textin_utf8_valid("ab\xE2\x82", 4, &bad));    /* truncated */
	assert_int_equal(bad, 2);
	assert_false(textin_utf8_valid("\x80", 1, &bad));
	assert_false(textin_utf8_valid("\xF5\x80\x80\x80", 4, &bad));
}

/* Random strings (fixed seed) quote and parse back to themselves. */
static void json_quote_then_decode_round_trips(void **state)
{
	(void)state;
	uint32_t x = 20240521; /* seed */
	printf("# seed 20240521\n");
	for (int iter = 0; iter < 2000; iter++) {
		textin_buf s = {0}, line = {0}, back = {0};
		x = x * 1103515245u + 12345u;
		int len = (int)((x >> 8) % 40);
		for (int i = 0; i < len; i++) {
			x = x * 1103515245u + 12345u;
			uint32_t r = (x >> 8) % 8;
			const char *pick[] = {"a", "\"", "\\", "\n", "\x01", "\xC3\xA9", "\xF0\x9F\x98\x80", "\0"};
			size_t pl[] = {1, 1, 1, 1, 1, 2, 4, 1};
			char *np = realloc(s.p, s.n + pl[r] + 1);
			assert_non_null(np);
			s.p = np;
			memcpy(s.p + s.n, pick[r], pl[r]);
			s.n += pl[r];
		}
		char head[] = "{\"text\":";
		line.p = malloc(sizeof head);
		memcpy(line.p, head, sizeof head);
		line.n = line.cap = sizeof head - 1;
		assert_int_equal(textin_json_quote(&line, s.p ? s.p : "", s.n), 0);
		char *np = realloc(line.p, line.n + 2);
		assert_non_null(np);
		line.p = np;
		line.p[line.n++] = '}';
		titan_err err;
		if (textin_json_field(line.p, line.n, "text", &back, &err) != 0)
			fail_msg("%s", err.msg);
		assert_int_equal(back.n, s.n);
		if (s.n)
			assert_memory_equal(back.p, s.p, s.n);
		free(s.p);
		free(line.p);
		free(back.p);
	}
}

static void json_quote_replaces_invalid_utf8(void **state)
{
	(void)state;
	textin_buf b = {0};
	assert_int_equal(textin_json_quote(&b, "a\xFF\x1f\xE2\x82", 5), 0);
	const char want[] = "\"a\xEF\xBF\xBD\\u001f\xEF\xBF\xBD\xEF\xBF\xBD\"";
	assert_int_equal(b.n, sizeof want - 1);
	assert_memory_equal(b.p, want, b.n);
	free(b.p);
}

static char *write_tmp(const char *bytes, size_t n)
{
	static char path[256];
	snprintf(path, sizeof path, "%s/textin.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, bytes, n), (ssize_t)n);
	close(fd);
	return path;
}

/* Read every document of a file into "doc1|doc2|..." */
static int read_all(const char *bytes, size_t n, textin_opts o, char *out, size_t cap,
		    titan_err *err, uint64_t *skipped)
{
	char *path = write_tmp(bytes, n);
	textin *t = textin_open(path, &o, err);
	if (t == NULL) {
		unlink(path);
		return -1;
	}
	out[0] = '\0';
	const char *d;
	size_t len;
	int r;
	while ((r = textin_next(t, &d, &len, err)) == 1) {
		strncat(out, d, cap - strlen(out) - 2);
		strcat(out, "|");
	}
	if (skipped)
		*skipped = textin_skipped(t);
	textin_close(t);
	unlink(path);
	return r;
}

static void text_split_modes_cut_documents_as_documented(void **state)
{
	(void)state;
	const char in[] = "\n\none\ntwo\n\n \n\t\nthree\r\n\nfour";
	char out[256];
	titan_err err;
	textin_opts o = {.format = TEXTIN_TEXT, .split = TEXTIN_SPLIT_BLANK};
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, NULL), 0);
	assert_string_equal(out, "one\ntwo|three\r|four|");
	o.split = TEXTIN_SPLIT_LINE;
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, NULL), 0);
	assert_string_equal(out, "one|two|three\r|four|");
	o.split = TEXTIN_SPLIT_FILE;
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, NULL), 0);
	assert_string_equal(out, "\n\none\ntwo\n\n \n\t\nthree\r\n\nfour|");
	assert_int_equal(read_all("", 0, o, out, sizeof out, &err, NULL), 0);
	assert_string_equal(out, "");
}

static void jsonl_errors_name_file_and_line_and_skip_bad_counts(void **state)
{
	(void)state;
	const char in[] = "{\"text\":\"a\"}\n\n{\"text\":\"b\"}\n{bad\n{\"text\":\"c\"}";
	char out[256];
	titan_err err;
	uint64_t skipped = 0;
	textin_opts o = {.format = TEXTIN_JSONL};
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, NULL), -1);
	assert_non_null(strstr(err.msg, ":4: expected a string key"));
	assert_string_equal(out, "a|b|");
	o.skip_bad = 1;
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, &skipped), 0);
	assert_string_equal(out, "a|b|c|");
	assert_int_equal(skipped, 1);
}

static void text_invalid_utf8_names_the_line(void **state)
{
	(void)state;
	const char in[] = "ok\n\nline1\nline2 \xFF\n";
	char out[256];
	titan_err err;
	textin_opts o = {.format = TEXTIN_TEXT, .split = TEXTIN_SPLIT_BLANK};
	assert_int_equal(read_all(in, sizeof in - 1, o, out, sizeof out, &err, NULL), -1);
	assert_non_null(strstr(err.msg, ":4: invalid UTF-8"));
}

/* A gzip stream cut in its trailer (libarchive says nothing then) or inside
 * its header (too short for libarchive to see gzip) is named as truncated
 * gzip input, never "(null)" nor a JSON error about the compressed bytes. */
static void truncated_gzip_is_named_in_every_place_it_can_be_cut(void **state)
{
	(void)state;
	static const uint8_t gz[] = { /* {"text":"hello"}\n{"text":"world"}\n, gzip -n -9 */
		0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xab, 0x56, 0x2a, 0x49,
		0xad, 0x28, 0x51, 0xb2, 0x52, 0xca, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0xaa, 0xe5, 0xaa,
		0x86, 0x09, 0x94, 0xe7, 0x17, 0xe5, 0xa4, 0x00, 0x05, 0x00, 0x07, 0x6f, 0x1a, 0x8c,
		0x22, 0x00, 0x00, 0x00};
	char out[256];
	titan_err err;
	textin_opts o = {.format = TEXTIN_JSONL};
	assert_int_equal(read_all((const char *)gz, sizeof gz, o, out, sizeof out, &err, NULL), 0);
	assert_string_equal(out, "hello|world|");
	for (size_t cut = 2; cut < sizeof gz; cut++) {
		err.msg[0] = '\0';
		int rc = read_all((const char *)gz, cut, o, out, sizeof out, &err, NULL);
		if (rc != -1 || !strstr(err.msg, "gzip") || strstr(err.msg, "(null)"))
			fail_msg("cut at %zu of %zu bytes: rc %d, \"%s\"", cut, sizeof gz, rc, err.msg);
	}
}

/* A 12 MB JSON line (no line length limit) decodes whole. */
static void jsonl_twelve_megabyte_line_is_read_whole(void **state)
{
	(void)state;
	size_t n = 12u << 20;
	char *in = malloc(n + 32);
	assert_non_null(in);
	size_t k = (size_t)sprintf(in, "{\"text\":\"");
	for (size_t i = 0; i < n; i++)
		in[k + i] = (char)('a' + i % 26);
	k += n;
	k += (size_t)sprintf(in + k, "\"}\n");
	char *path = write_tmp(in, k);
	textin_opts o = {.format = TEXTIN_JSONL};
	titan_err err;
	textin *t = textin_open(path, &o, &err);
	assert_non_null(t);
	const char *d;
	size_t len;
	assert_int_equal(textin_next(t, &d, &len, &err), 1);
	assert_int_equal(len, n);
	assert_memory_equal(d, in + 9, n);
	assert_int_equal(textin_next(t, &d, &len, &err), 0);
	textin_close(t);
	unlink(path);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_simple_escapes_decode_exactly),
		cmocka_unit_test(json_surrogate_pair_joins_and_lone_surrogate_is_fffd),
		cmocka_unit_test(json_nul_escape_is_a_nul_byte),
		cmocka_unit_test(json_last_duplicate_key_wins_and_other_fields_are_skipped),
		cmocka_unit_test(json_malformed_lines_are_rejected_with_a_reason),
		cmocka_unit_test(json_deep_nesting_is_an_error_not_a_crash),
		cmocka_unit_test(utf8_validation_follows_the_standard),
		cmocka_unit_test(json_quote_then_decode_round_trips),
		cmocka_unit_test(json_quote_replaces_invalid_utf8),
		cmocka_unit_test(text_split_modes_cut_documents_as_documented),
		cmocka_unit_test(jsonl_errors_name_file_and_line_and_skip_bad_counts),
		cmocka_unit_test(text_invalid_utf8_names_the_line),
		cmocka_unit_test(jsonl_twelve_megabyte_line_is_read_whole),
		cmocka_unit_test(truncated_gzip_is_named_in_every_place_it_can_be_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
