/* Unit tests of lib/hub's parsers and cache helpers (no network). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hub/hub.h"

static char tmpdir[256];

static int make_tmpdir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "%s/titan-hub.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
	(void)state;
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Expected values are Python's fnmatch.fnmatch (what huggingface_hub uses). */
static void glob_matches_like_python_fnmatch(void **state)
{
	(void)state;
	struct {
		const char *pat, *s;
		int want;
	} cases[] = {
		{"*.safetensors", "model-00001-of-00004.safetensors", 1},
		{"*.safetensors", "sub/dir/model.safetensors", 1}, /* '*' crosses '/' */
		{"*.safetensors", "model.safetensors.index.json", 0},
		{"tokenizer.json", "tokenizer.json", 1},
		{"tokenizer.json", "original/tokenizer.json", 0},
		{"en/c4-train.0000*", "en/c4-train.00003-of-01024.json.gz", 1},
		{"en/c4-train.0000[0-3]*", "en/c4-train.00003-of-01024.json.gz", 1},
		{"en/c4-train.0000[0-3]*", "en/c4-train.00004-of-01024.json.gz", 0},
		{"en/c4-train.0000[!0-3]*", "en/c4-train.00004-of-01024.json.gz", 1},
		{"a?c", "abc", 1},
		{"a?c", "a/c", 1},
		{"a?c", "ac", 0},
		{"[", "[", 1},
		{"[]]", "]", 1},
		{"a\\*", "a\\b", 1},
		{"a\\*", "a*", 0},
		{"*", "", 1},
		{"", "", 1},
		{"", "a", 0},
		{"**a**b", "xxaxxbxx", 0},
		{"**a**b", "xxaxxb", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int got = hub_glob_match(cases[i].pat, cases[i].s);
		if (got != cases[i].want)
			fail_msg("glob '%s' on '%s': got %d", cases[i].pat, cases[i].s, got);
	}
}

static void glob_star_heavy_pattern_finishes(void **state)
{
	(void)state;
	char s[4001], p[61];
	memset(s, 'a', 4000);
	s[4000] = '\0';
	for (int i = 0; i < 60; i += 2) {
		p[i] = '*';
		p[i + 1] = 'a';
	}
	p[59] = 'b';
	p[60] = '\0';
	assert_int_equal(hub_glob_match(p, s), 0);
}

static void unsafe_remote_paths_are_refused(void **state)
{
	(void)state;
	assert_true(hub_path_safe("config.json", 11));
	assert_true(hub_path_safe("original/tokenizer.model", 24));
	assert_true(hub_path_safe("a/..b/c", 7));
	assert_false(hub_path_safe("", 0));
	assert_false(hub_path_safe("/etc/passwd", 11));
	assert_false(hub_path_safe("../x", 4));
	assert_false(hub_path_safe("a/../../x", 9));
	assert_false(hub_path_safe("a/..", 4));
	assert_false(hub_path_safe("a//b", 4));
	assert_false(hub_path_safe("a/./b", 5));
	assert_false(hub_path_safe("a/", 2));
	assert_false(hub_path_safe("a\\..\\b", 6));
	assert_false(hub_path_safe("a\0b", 3));
}

static void link_header_next_is_found(void **state)
{
	(void)state;
	char out[256];
	assert_int_equal(hub_link_next("<https://h/api/models/a/b/tree/main?cursor=x>; rel=\"next\"",
				       out, sizeof out), 1);
	assert_string_equal(out, "https://h/api/models/a/b/tree/main?cursor=x");
	assert_int_equal(hub_link_next("<https://h/p?a=1,2>; rel=\"prev\", <https://h/n>; rel=next",
				       out, sizeof out), 1);
	assert_string_equal(out, "https://h/n");
	assert_int_equal(hub_link_next("<https://h/p>; rel=\"prev\"", out, sizeof out), 0);
	assert_int_equal(hub_link_next("<https://h/p>; rel=\"nextish\"", out, sizeof out), 0);
	assert_int_equal(hub_link_next("", out, sizeof out), 0);
	assert_int_equal(hub_link_next("<unterminated; rel=\"next\"", out, sizeof out), 0);
	/* a URL longer than the buffer is not cut short */
	assert_int_equal(hub_link_next("<https://h/very/long>; rel=\"next\"", out, 8), 0);
}

static void tree_listing_parses_files_and_lfs(void **state)
{
	(void)state;
	const char *js =
		"[{\"type\":\"directory\",\"oid\":\"0000000000000000000000000000000000000000\",\"size\":0,\"path\":\"original\"},"
		"{\"type\":\"file\",\"oid\":\"f015379cdd0a7593d319545616666d49caef2e1f\",\"size\":12,\"path\":\"config.json\"},"
		"{\"type\":\"file\",\"oid\":\"3899a05d7a3d7feb38da8d718f9f2b62f12f6a63\",\"size\":134,"
		"\"path\":\"original/model.safetensors\",\"lfs\":{\"oid\":"
		"\"39c01d9a8407117da45d93311125a832420fe4fe33530fbb36e6d721e759a345\",\"size\":300000,\"pointerSize\":134}}]";
	hub_filelist l = {0};
	titan_err e = {{0}};
	assert_int_equal(hub_tree_parse(js, strlen(js), &l, &e), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.v[0].path, "config.json");
	assert_int_equal(l.v[0].size, 12);
	assert_string_equal(l.v[0].lfs_sha, "");
	assert_string_equal(l.v[1].path, "original/model.safetensors");
	assert_int_equal(l.v[1].size, 300000); /* the object's size, not the pointer's */
	assert_string_equal(l.v[1].lfs_sha,
			    "39c01d9a8407117da45d93311125a832420fe4fe33530fbb36e6d721e759a345");
	hub_filelist_free(&l);
}

static void tree_listing_rejects_bad_input(void **state)
{
	(void)state;
	const char *bad[] = {
		"{}", "[1]", "not json", "[{\"type\":\"file\"}]",
		"[{\"type\":\"file\",\"path\":\"../x\",\"size\":1}]",
		"[{\"type\":\"file\",\"path\":\"/abs\",\"size\":1}]",
		"[{\"type\":\"file\",\"path\":\"a\\u0000b\",\"size\":1}]",
		"[{\"type\":\"file\",\"path\":\"a\",\"size\":1,\"lfs\":{\"oid\":\"zz\",\"size\":1}}]",
		"[{\"type\":\"file\",\"path\":\"a\",\"oid\":\"../../x\",\"size\":1}]",
		"[{\"type\":\"file\",\"path\":\"a\"}]",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		hub_filelist l = {0};
		titan_err e = {{0}};
		if (hub_tree_parse(bad[i], strlen(bad[i]), &l, &e) == 0)
			fail_msg("accepted: %s", bad[i]);
		assert_true(strncmp(e.msg, "tree listing", 12) == 0);
		hub_filelist_free(&l);
	}
}

static void retry_hints_parse(void **state)
{
	(void)state;
	assert_true(hub_retry_after("7", NULL) == 7.0);
	assert_true(hub_retry_after(" 2 ", NULL) == 2.0);
	assert_true(hub_retry_after(NULL, "\"api\";r=0;t=55") == 55.0);
	assert_true(hub_retry_after("", "\"api\";r=0; t=3") == 3.0);
	/* an HTTP date is not delta seconds: fall back to our own backoff */
	assert_true(hub_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NULL) < 0);
	assert_true(hub_retry_after(NULL, NULL) < 0);
	assert_true(hub_retry_after("-5", NULL) < 0);
}

static void etags_are_normalized_like_huggingface_hub(void **state)
{
	(void)state;
	char out[129];
	hub_etag_normalize("W/\"abc\"", out, sizeof out);
	assert_string_equal(out, "abc");
	hub_etag_normalize("\"39c01d9a8407117da45d93311125a832420fe4fe33530fbb36e6d721e759a345\"",
			   out, sizeof out);
	assert_true(hub_etag_is_sha256(out));
	hub_etag_normalize("f015379cdd0a7593d319545616666d49caef2e1f", out, sizeof out);
	assert_false(hub_etag_is_sha256(out));
	assert_false(hub_etag_is_sha256("39C01D9A8407117DA45D93311125A832420FE4FE33530FBB36E6D721E759A345"));
}

static void repo_folder_names_match_huggingface_hub(void **state)
{
	(void)state;
	char *a = hub_repo_folder(HUB_MODEL, "meta-llama/Llama-3.1-8B");
	char *b = hub_repo_folder(HUB_DATASET, "allenai/c4");
	char *c = hub_repo_folder(HUB_MODEL, "gpt2");
	assert_string_equal(a, "models--meta-llama--Llama-3.1-8B");
	assert_string_equal(b, "datasets--allenai--c4");
	assert_string_equal(c, "models--gpt2");
	free(a);
	free(b);
	free(c);
}

static void token_lookup_order(void **state)
{
	(void)state;
	char path[512], *t = NULL;
	titan_err e = {{0}};
	unsetenv("HF_TOKEN");
	unsetenv("HUGGING_FACE_HUB_TOKEN");
	unsetenv("HF_TOKEN_PATH");
	setenv("HF_HOME", tmpdir, 1);
	assert_int_equal(hub_token_lookup(NULL, &t, &e), 0);
	assert_null(t);
	snprintf(path, sizeof path, "%s/token", tmpdir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("  hf_file\n", f);
	fclose(f);
	assert_int_equal(hub_token_lookup(NULL, &t, &e), 0);
	assert_string_equal(t, "hf_file");
	free(t);
	setenv("HUGGING_FACE_HUB_TOKEN", "hf_old", 1);
	assert_int_equal(hub_token_lookup(NULL, &t, &e), 0);
	assert_string_equal(t, "hf_old");
	free(t);
	setenv("HF_TOKEN", "hf_env", 1);
	assert_int_equal(hub_token_lookup(NULL, &t, &e), 0);
	assert_string_equal(t, "hf_env");
	free(t);
	assert_int_equal(hub_token_lookup("hf_cli", &t, &e), 0);
	assert_string_equal(t, "hf_cli");
	free(t);
	/* a line break would let a token smuggle a second header */
	setenv("HF_TOKEN", "hf_a\r\nX-Evil: 1", 1);
	assert_int_equal(hub_token_lookup(NULL, &t, &e), -1);
	assert_null(t);
	assert_null(strstr(e.msg, "hf_a"));
	unsetenv("HF_TOKEN");
	unsetenv("HUGGING_FACE_HUB_TOKEN");
	unsetenv("HF_HOME");
}

static void cache_refs_and_relative_links(void **state)
{
	(void)state;
	char storage[512], link[700], target[256];
	const char *commit = "4c75d1a76b6c3ab84bfce599a064a5947d047f63";
	titan_err e = {{0}};
	snprintf(storage, sizeof storage, "%s/models--org--m", tmpdir);
	assert_int_equal(hub_cache_ref_write(storage, "main", commit, &e), 0);
	char got[41];
	assert_int_equal(hub_cache_ref_read(storage, "main", got, &e), 0);
	assert_string_equal(got, commit);
	assert_int_equal(hub_cache_ref_read(storage, "v2", got, &e), -1);
	assert_int_equal(hub_cache_ref_read(storage, "../../x", got, &e), -1);
	assert_int_equal(hub_cache_link(storage, commit, "a/b/w.bin", "abc123", &e), 0);
	snprintf(link, sizeof link, "%s/snapshots/%s/a/b/w.bin", storage, commit);
	ssize_t n = readlink(link, target, sizeof target - 1);
	assert_true(n > 0);
	target[n] = '\0';
	assert_string_equal(target, "../../../../blobs/abc123");
	/* relinking to another blob replaces the link */
	assert_int_equal(hub_cache_link(storage, commit, "a/b/w.bin", "def456", &e), 0);
	n = readlink(link, target, sizeof target - 1);
	target[n] = '\0';
	assert_string_equal(target, "../../../../blobs/def456");
}

static void origins_compare_scheme_host_and_port(void **state)
{
	(void)state;
	assert_true(hub_same_origin("https://huggingface.co/a", "https://huggingface.co:443/b"));
	assert_true(hub_same_origin("http://127.0.0.1:80/a", "http://127.0.0.1/b?x"));
	assert_false(hub_same_origin("http://127.0.0.1:8000/a", "http://127.0.0.1:8001/a"));
	assert_false(hub_same_origin("https://huggingface.co/a", "https://cdn-lfs.hf.co/a"));
	assert_false(hub_same_origin("https://huggingface.co/a", "http://huggingface.co/a"));
	assert_false(hub_same_origin("http://127.0.0.1/a", "http://localhost/a"));
	assert_false(hub_same_origin("not a url", "http://x/"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(glob_matches_like_python_fnmatch),
		cmocka_unit_test(glob_star_heavy_pattern_finishes),
		cmocka_unit_test(unsafe_remote_paths_are_refused),
		cmocka_unit_test(link_header_next_is_found),
		cmocka_unit_test(tree_listing_parses_files_and_lfs),
		cmocka_unit_test(tree_listing_rejects_bad_input),
		cmocka_unit_test(retry_hints_parse),
		cmocka_unit_test(etags_are_normalized_like_huggingface_hub),
		cmocka_unit_test(repo_folder_names_match_huggingface_hub),
		cmocka_unit_test(token_lookup_order),
		cmocka_unit_test(cache_refs_and_relative_links),
		cmocka_unit_test(origins_compare_scheme_host_and_port),
	};
	return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
