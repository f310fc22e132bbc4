/* fuzz_shard_stream: lib/tokstream's reader on arbitrary bytes.
 *
 * Properties: reading never crashes and stops with 0 (clean end) or -1 and a
 * message naming the input; a stream that reads cleanly and is one segment
 * written the way the writer writes comes back byte for byte when its
 * documents are written again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokstream/tokstream.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *in = fmemopen((void *)data, size, "rb");
	if (in == NULL)
		return 0;
	titan_err err = {{0}};
	tokstream_reader *r = tokstream_reader_open(in, "fuzz.tts", &err);
	if (r == NULL) {
		check(strstr(err.msg, "fuzz.tts") != NULL);
		fclose(in);
		return 0;
	}
	tokstream_reader_accept_mismatch(r, data[size - 1] & 1);
	char *out = NULL;
	size_t outlen = 0;
	FILE *o = open_memstream(&out, &outlen);
	tokstream_header first = *tokstream_reader_header(r);
	tokstream_writer *w = tokstream_writer_open(o, &first, &err);
	check(w != NULL);
	const uint32_t *ids;
	size_t n;
	int rc;
	while ((rc = tokstream_read_doc(r, &ids, &n, &err)) == 1) {
		for (size_t i = 0; i < n; i++)
			check(ids[i] < tokstream_reader_header(r)->vocab_size);
		if (tokstream_write_doc(w, ids, n, &err) != 0)
			break; /* an id of a later segment beyond the first's vocab */
	}
	check(rc == 0 || rc == -1 || rc == 1);
	if (rc == -1)
		check(strstr(err.msg, "fuzz.tts") != NULL);
	if (rc == 0) {
		check(tokstream_writer_close(w, &err) == 0);
		fflush(o);
		if (outlen == size)
			check(memcmp(out, data, size) == 0);
	} else {
		tokstream_writer_abort(w);
	}
	fclose(o);
	free(out);
	tokstream_reader_close(r);
	fclose(in);
	return 0;
}
