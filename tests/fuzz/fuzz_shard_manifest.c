/* fuzz_shard_manifest: lib/shard's manifest.json parser on arbitrary bytes.
 *
 * Properties: parsing never crashes and a refusal names the file; a manifest
 * that parses is written and parsed back to the same values (the writer and
 * the parser agree). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard/shard.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void same(const shard_manifest *a, const shard_manifest *b)
{
	check(memcmp(&a->stream, &b->stream, sizeof a->stream) == 0);
	check(a->shard_tokens == b->shard_tokens && a->zstd_level == b->zstd_level);
	check(a->frame_tokens == b->frame_tokens && a->val_docs == b->val_docs);
	check(a->val_fraction == b->val_fraction && a->complete == b->complete);
	check(a->input_docs == b->input_docs && a->input_crc == b->input_crc);
	for (int s = 0; s < 2; s++) {
		check(a->split[s].n_shards == b->split[s].n_shards);
		check(a->split[s].next_doc == b->split[s].next_doc);
		for (size_t i = 0; i < a->split[s].n_shards; i++)
			check(memcmp(&a->split[s].shards[i], &b->split[s].shards[i],
				     sizeof(shard_entry)) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	shard_manifest m, back;
	titan_err err = {{0}};
	if (shard_manifest_parse((const char *)data, size, "fuzz.json", &m, &err) != 0) {
		check(strstr(err.msg, "fuzz.json") != NULL);
		return 0;
	}
	char dir[] = "/tmp/fuzz_manifest.XXXXXX";
	if (mkdtemp(dir) == NULL) {
		shard_manifest_free(&m);
		return 0;
	}
	check(shard_manifest_write(dir, &m, &err) == 0);
	check(shard_manifest_read(dir, &back, &err) == 0);
	same(&m, &back);
	shard_manifest_free(&back);
	shard_manifest_free(&m);
	char path[64];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	unlink(path);
	rmdir(dir);
	return 0;
}
