/* fuzz_tok_cache: the reader of compiled tokenizers (lib/tok/tok_cache.c).
 *
 * Input: the bytes of a cache file after its header.  The harness writes them
 * behind a header it makes valid (magic, version, the key of the small
 * tokenizer below, the length, both CRCs), so that the reader's checks of the
 * section directory, the scalars and the tables are what the input exercises;
 * a CRC that fails would stop every input at the door.  Properties: the load
 * never crashes, and either maps a tokenizer that encodes and decodes a text
 * without error or falls back to the source and says why; the tokenizer it
 * gives encodes like the source. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/crc32c.h"
#include "core/sha256.h"
#include "tok/tok.h"
#include "tok/tok_int.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static const char json[] =
	"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"<s>\": 3}, "
	"\"merges\": [\"a b\"]}, \"added_tokens\": [{\"id\": 4, \"content\": \"<|x|>\", "
	"\"special\": true}], \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}";
static char dir[64], src[128], file[256];
static uint8_t key[32];
static tok *ref;

static void init(void)
{
	snprintf(dir, sizeof dir, "/tmp/fuzz-tokcache.%d", (int)getpid());
	snprintf(src, sizeof src, "%s/tokenizer.json", dir);
	check(mkdir_p(dir, &(titan_err){0}) == 0);
	FILE *f = fopen(src, "w");
	check(f && fputs(json, f) >= 0 && fclose(f) == 0);
	uint8_t sha[32];
	check(sha256(json, strlen(json), sha, &(titan_err){0}) == 0);
	tok_cache_key(sha, NULL, 0, 0, key);
	char hex[65];
	sha256_hex(key, hex);
	snprintf(file, sizeof file, "%s/%s.ttok", dir, hex);
	check(tok_load(&ref, src, NULL, &(titan_err){0}) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ref)
		init();
	size_t n = 128 + size;
	uint8_t *b = calloc(1, n);
	check(b != NULL);
	memcpy(b, "TTKC", 4);
	uint32_t v32 = TOK_CACHE_FORMAT, hl = 128, ns = 11;
	memcpy(b + 4, &v32, 4);
	memcpy(b + 8, &hl, 4);
	memcpy(b + 12, &ns, 4);
	memcpy(b + 16, key, 32);
	uint64_t fs = n;
	memcpy(b + 48, &fs, 8);
	memcpy(b + 128, data, size);
	uint32_t body = crc32c(0, b + 128, n - 128);
	memcpy(b + 56, &body, 4);
	uint32_t head = crc32c(0, b, 60);
	memcpy(b + 60, &head, 4);
	FILE *f = fopen(file, "wb");
	check(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
	free(b);

	tok_opts o = {.cache_dir = dir};
	titan_err err = {0};
	tok *t = NULL;
	check(tok_load(&t, src, &o, &err) == 0);
	tok_enc *e = tok_enc_new(t, &err);
	check(e != NULL);
	tok_ids ids = {0}, want = {0};
	tok_buf out = {0};
	static const char text[] = "ab a<|x|>ba b\xff<s>";
	tok_enc *re = tok_enc_new(ref, &err);
	check(re != NULL);
	check(tok_encode(e, (const uint8_t *)text, sizeof text - 1, &ids, &err) == 0);
	check(tok_encode(re, (const uint8_t *)text, sizeof text - 1, &want, &err) == 0);
	/* A mapped file that passes every check holds this tokenizer or another
	 * sound one; either way ids stay in range and decode. */
	for (size_t i = 0; i < ids.n; i++)
		check(ids.v[i] >= 0 && ids.v[i] < tok_n_vocab(t));
	tok_decode(t, ids.v, ids.n, &out, &err);
	if (!strstr(tok_describe(t), "compiled, from"))
		check(ids.n == want.n && !memcmp(ids.v, want.v, ids.n * sizeof *ids.v));
	tok_ids_free(&ids);
	tok_ids_free(&want);
	tok_buf_free(&out);
	tok_enc_free(e);
	tok_enc_free(re);
	tok_free(t);
	return 0;
}
