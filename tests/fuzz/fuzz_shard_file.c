/* fuzz_shard_file: lib/shard's reader on arbitrary bytes as a shard file.
 *
 * Properties: opening never crashes and a refusal names the file; an opened
 * shard reads every token without crashing; a shard that verifies has ids
 * below vocab_size and documents in order, and cats to a token stream that
 * reads back with the same counts.  The header CRC (version 1's or, for a
 * masked shard, version 2's) is fixed up before the file is opened, so that
 * mutations reach the checks behind it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void read_all(shard_file *f)
{
	const shard_header *h = shard_file_header(f);
	uint32_t buf[1024];
	titan_err err;
	for (uint64_t t = 0; t < h->n_tokens && t < (1u << 20);) {
		size_t k = h->n_tokens - t < 1024 ? (size_t)(h->n_tokens - t) : 1024;
		if (shard_file_tokens(f, t, k, buf, &err) != 0)
			return; /* a bad zstd frame: reported, not a crash */
		t += k;
	}
}

static void cat_back(const char *path, const shard_header *h)
{
	char *out = NULL;
	size_t len = 0;
	FILE *o = open_memstream(&out, &len);
	titan_err err;
	check(shard_cat_file(path, o, &err) == 0);
	fclose(o);
	FILE *in = fmemopen(out, len, "rb");
	tokstream_reader *r = tokstream_reader_open(in, "cat", &err);
	check(r != NULL);
	const uint32_t *ids;
	size_t n;
	int rc;
	while ((rc = tokstream_read_doc(r, &ids, &n, &err)) == 1)
		;
	check(rc == 0);
	check(tokstream_reader_docs(r) == h->n_docs && tokstream_reader_tokens(r) == h->n_tokens);
	tokstream_reader_close(r);
	fclose(in);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_shard", 0);
	if (fd < 0)
		return 0;
	uint8_t *copy = malloc(size ? size : 1);
	if (copy == NULL) {
		close(fd);
		return 0;
	}
	memcpy(copy, data, size);
	/* version 2 (label masks) keeps its CRC in its 160-byte header's last 4 */
	size_t hl = size >= 160 && copy[4] == 2 && !copy[5] && !copy[6] && !copy[7] ? 160 : 128;
	if (size >= hl) {
		uint32_t crc = crc32c(0, copy, hl - 4);
		for (int i = 0; i < 4; i++)
			copy[hl - 4 + i] = (uint8_t)(crc >> (8 * i));
	}
	ssize_t wrote = write(fd, copy, size);
	free(copy);
	if (wrote != (ssize_t)size) {
		close(fd);
		return 0;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	titan_err err = {{0}};
	shard_file *f = shard_file_open(path, &err);
	if (f == NULL) {
		check(strstr(err.msg, path) != NULL);
		close(fd);
		return 0;
	}
	read_all(f);
	const shard_header h = *shard_file_header(f);
	int ok = shard_file_verify(f, &err) == 0;
	if (ok && h.n_docs > 0)
		check(shard_file_doc_of(f, h.n_tokens ? h.n_tokens - 1 : 0) < h.n_docs);
	shard_file_close(f);
	if (ok && h.n_tokens < (1u << 20))
		cat_back(path, &h);
	close(fd);
	return 0;
}
