/* fuzz_fluxrec: lib/fluxrec's record stream reader on arbitrary bytes (a
 * Flux record stream, titan-formats(5)), and the header decoder alone.
 *
 * Properties: never crashes, never allocates what the header's checked
 * shapes do not allow; the reader ends (0 or -1), never loops; every record
 * it returns views cleanly (checked ids and key); a stream that reads to its
 * end has as many records as its trailers said. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fluxrec/fluxrec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	titan_err err;
	fluxrec_header h;
	if (size >= 12 && fluxrec_header_decode(data, size, &h, "fuzz", &err) == 0)
		fluxrec_header_free(&h);
	if (size == 0)
		return 0;
	FILE *fp = fmemopen((void *)data, size, "rb");
	if (fp == NULL)
		return 0;
	fluxrec_reader *r = fluxrec_reader_open(fp, "fuzz", &err);
	if (r != NULL) {
		const fluxrec_header *hd = fluxrec_reader_header(r);
		const uint8_t *rec;
		uint64_t n = 0;
		int rc;
		while ((rc = fluxrec_read(r, &rec, &err)) == 1) {
			fluxrec_view v;
			if (fluxrec_record_view(hd, rec, &v, "fuzz", &err) != 0 ||
			    strlen(v.key) >= hd->key_bytes || ++n > size)
				abort();
		}
		if (rc == 0 && n != fluxrec_reader_records(r))
			abort();
		fluxrec_reader_close(r);
	}
	fclose(fp);
	return 0;
}
