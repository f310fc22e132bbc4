/* fuzz_shard_mix: lib/shard's reading of a mixture's manifest.json
 * (shard_mix_read) on arbitrary bytes.
 *
 * Properties: reading never crashes and a refusal names the file; a
 * mixture that reads has 1 to MIX sources, each with a path, a folder, a
 * finite weight >= 0 and a 64-digit hex SHA-256, the weights summing to a
 * positive number, and a seed below 2^63. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/shard.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static char dir[256];

static void remove_dir(void)
{
	char path[300];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	remove(path);
	remove(dir);
}

static void valid(const shard_mix *m)
{
	double total = 0;
	check(m->n >= 1 && m->seed < (1ull << 63));
	for (size_t i = 0; i < m->n; i++) {
		const shard_mix_source *s = &m->src[i];
		check(s->path != NULL && s->dir != NULL && isfinite(s->weight) && s->weight >= 0);
		check(strlen(s->manifest_sha256) == 64 &&
		      strspn(s->manifest_sha256, "0123456789abcdef") == 64);
		total += s->weight;
	}
	check(total > 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (dir[0] == '\0') {
		snprintf(dir, sizeof dir, "%s/titan-fuzz-mix.XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		check(mkdtemp(dir) != NULL);
		atexit(remove_dir);
	}
	char path[300];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	FILE *f = fopen(path, "wb");
	check(f != NULL);
	check(fwrite(data, 1, size, f) == size && fclose(f) == 0);
	shard_mix m;
	titan_err err = {0};
	if (shard_mix_read(dir, &m, &err) == 0) {
		valid(&m);
		shard_mix_free(&m);
	} else {
		check(err.msg[0] != '\0');
	}
	return 0;
}
