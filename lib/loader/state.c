/* The loader's state as bytes (the checkpoint's dataloader item) and JSON. */
#include "loader/loader.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"

static void put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* "TLDS" version seed windows seq_len flags split data_tokens data_crc crc;
 * flags: bit 0 shuffle, bit 1 documents (0 in states from before it), bits
 * 8-31 the dp degree of SFT packing (0: none). */
void loader_state_encode(const loader_state *s, uint8_t out[LOADER_STATE_BYTES])
{
	memcpy(out, "TLDS", 4);
	put(out + 4, 1, 4);
	put(out + 8, s->seed, 8);
	put(out + 16, s->windows, 8);
	put(out + 24, (uint64_t)s->seq_len, 8);
	put(out + 32, (s->shuffle & 1) | (s->documents & 1) << 1 | (s->sft_dp & 0xffffff) << 8, 4);
	put(out + 36, s->split, 4);
	put(out + 40, s->data_tokens, 8);
	put(out + 48, s->data_crc, 4);
	put(out + 52, crc32c(0, out, 52), 4);
}

int loader_state_is_titan(const uint8_t *buf, size_t n)
{
	return n >= 4 && memcmp(buf, "TLDS", 4) == 0;
}

int loader_state_decode(const uint8_t *buf, size_t n, loader_state *s, titan_err *err)
{
	if (n != LOADER_STATE_BYTES || memcmp(buf, "TLDS", 4) != 0)
		return err_set(err, "dataloader state: %zu bytes without the \"TLDS\" magic, "
			       "expected %d (not a titan loader state?)", n, LOADER_STATE_BYTES);
	if (get(buf + 4, 4) != 1)
		return err_set(err, "dataloader state: version %u, expected 1",
			       (unsigned)get(buf + 4, 4));
	uint32_t crc = crc32c(0, buf, 52);
	if (crc != get(buf + 52, 4))
		return err_set(err, "dataloader state: checksum 0x%08x, computed 0x%08x",
			       (unsigned)get(buf + 52, 4), crc);
	s->seed = get(buf + 8, 8);
	s->windows = get(buf + 16, 8);
	s->seq_len = (int64_t)get(buf + 24, 8);
	uint32_t flags = (uint32_t)get(buf + 32, 4);
	if (flags & 0xfc)
		return err_set(err, "dataloader state: flags 0x%x, expected bits 0, 1 and 8-31 only",
			       (unsigned)flags);
	s->shuffle = flags & 1;
	s->documents = (flags >> 1) & 1;
	s->sft_dp = flags >> 8;
	s->split = (uint32_t)get(buf + 36, 4);
	s->data_tokens = get(buf + 40, 8);
	s->data_crc = (uint32_t)get(buf + 48, 4);
	return 0;
}

char *loader_state_to_json(const loader_state *s, uint64_t windows_per_epoch)
{
	json_t *o = json_pack("{s:i, s:I, s:I, s:I, s:I, s:b, s:b, s:s, s:I, s:I}", "version", 1,
			      "seed", (json_int_t)s->seed, "windows", (json_int_t)s->windows,
			      "epoch", (json_int_t)(windows_per_epoch && s->split == 0
						    ? s->windows / windows_per_epoch : 0),
			      "seq_len", (json_int_t)s->seq_len, "shuffle", (int)s->shuffle,
			      "documents", (int)s->documents, "split", s->split ? "val" : "train",
			      "data_tokens", (json_int_t)s->data_tokens,
			      "data_crc", (json_int_t)s->data_crc);
	if (o == NULL || (s->sft_dp && json_object_set_new(o, "sft_dp", json_integer(s->sft_dp)))) {
		json_decref(o);
		return NULL;
	}
	char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return text;
}

int loader_state_from_json(const char *text, loader_state *s, titan_err *err)
{
	json_error_t je;
	json_t *o = json_loads(text, 0, &je);
	if (o == NULL)
		return err_set(err, "dataloader state: %d:%d: %s", je.line, je.column, je.text);
	json_int_t version, seed, windows, seq_len, tokens, crc, sft_dp = 0;
	int shuffle, documents = 0; /* absent in states from before 0.3.0's packing */
	const char *split;
	int rc = json_unpack_ex(o, &je, 0, "{s:I, s:I, s:I, s:I, s:b, s?b, s:s, s:I, s:I, s?I}",
				"version", &version, "seed", &seed, "windows", &windows,
				"seq_len", &seq_len, "shuffle", &shuffle, "documents", &documents,
				"split", &split,
				"data_tokens", &tokens, "data_crc", &crc, "sft_dp", &sft_dp);
	if (rc != 0) {
		err_set(err, "dataloader state: %s", je.text);
	} else if (version != 1 || seed < 0 || windows < 0 || seq_len < 1 || tokens < 0 ||
		   crc < 0 || crc > 0xffffffffll || sft_dp < 0 || sft_dp > 0xffffff ||
		   (strcmp(split, "train") != 0 && strcmp(split, "val") != 0)) {
		rc = err_set(err, "dataloader state: a field is out of range (version %lld)",
			     (long long)version);
	} else {
		s->seed = (uint64_t)seed;
		s->windows = (uint64_t)windows;
		s->seq_len = seq_len;
		s->shuffle = shuffle != 0;
		s->documents = documents != 0;
		s->sft_dp = (uint32_t)sft_dp;
		s->split = strcmp(split, "val") == 0;
		s->data_tokens = (uint64_t)tokens;
		s->data_crc = (uint32_t)crc;
	}
	json_decref(o);
	return rc;
}
