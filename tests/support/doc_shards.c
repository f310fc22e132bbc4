#include "doc_shards.h"

#include <stdio.h>
#include <stdlib.h>

static int write_stream(const tokstream_header *h, uint32_t *const *docs, const size_t *lens,
			size_t n, FILE *fp, titan_err *err)
{
	tokstream_writer *w = tokstream_writer_open(fp, h, err);
	if (w == NULL)
		return -1;
	for (size_t d = 0; d < n; d++)
		if (tokstream_write_doc(w, docs[d], lens[d], err) != 0) {
			tokstream_writer_abort(w);
			return -1;
		}
	return tokstream_writer_close(w, err);
}

int test_doc_shards(const tokstream_header *h, uint32_t *const *docs, const size_t *lens,
		    size_t n, const shard_build_opts *o, titan_err *err)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *fp = open_memstream(&buf, &size);
	if (fp == NULL)
		return err_set(err, "open_memstream failed");
	int rc = write_stream(h, docs, lens, n, fp, err);
	fclose(fp);
	fp = rc == 0 ? fmemopen(buf, size, "rb") : NULL;
	tokstream_reader *r = fp ? tokstream_reader_open(fp, "mem", err) : NULL;
	shard_build_stats st;
	rc = r == NULL ? -1 : shard_build(r, o, &st, err);
	tokstream_reader_close(r);
	if (fp != NULL)
		fclose(fp);
	free(buf);
	return rc;
}
