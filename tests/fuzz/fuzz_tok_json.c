/* fuzz_tok_json: lib/tok's tokenizer.json loader on arbitrary bytes.
 *
 * Properties: loading never crashes and either succeeds or leaves a message;
 * what loads encodes a fixed mixed text and a slice of the input itself, and
 * decoding gives back bytes for every id it produced.  Inputs with a number of
 * six digits or more are skipped: ids that large only make the dense per-id
 * arrays big and the run slow (the limit itself, TOK_MAX_IDS, is unit-tested). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void exercise(const tok *t, const uint8_t *data, size_t size)
{
	titan_err err = {0};
	tok_enc *e = tok_enc_new(t, &err);
	check(e != NULL);
	static const char mixed[] = "Hello  world's 123\n\n\t<s> \xc3\xa9\xcc\x81\xff\x00z";
	tok_ids ids = {0};
	check(tok_encode(e, (const uint8_t *)mixed, sizeof mixed - 1, &ids, &err) == 0);
	check(tok_encode(e, data, size < 256 ? size : 256, &ids, &err) == 0);
	for (size_t i = 0; i < ids.n; i++)
		check(ids.v[i] >= 0 && ids.v[i] < tok_n_vocab(t));
	tok_buf out = {0};
	check(tok_decode(t, ids.v, ids.n, &out, &err) == 0);
	tok_buf_free(&out);
	tok_ids_free(&ids);
	tok_enc_free(e);
}

static int has_big_number(const uint8_t *d, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		run = d[i] >= '0' && d[i] <= '9' ? run + 1 : 0;
		if (run >= 6)
			return 1;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (has_big_number(data, size))
		return 0;
	tok *t = NULL;
	titan_err err = {0};
	for (int mode = 0; mode < 2; mode++) {
		tok_opts o = {.pretok = mode};
		if (tok_load_json_text(&t, (const char *)data, size, &o, &err)) {
			check(err.msg[0] != 0);
			return 0;
		}
		exercise(t, data, size);
		tok_free(t);
	}
	return 0;
}
