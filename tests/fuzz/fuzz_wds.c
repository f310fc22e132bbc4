/* fuzz_wds: lib/wds's webdataset reader on arbitrary bytes (a tar, maybe
 * compressed), and lib/image on the members it yields.
 *
 * Properties: never crashes; a sample has a key and at least one field, each
 * field within the member limit; the reader ends (0 or -1), never loops. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "wds/wds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const wds_limits lim = {1u << 20, 16};
	static const image_limits ilim = {1024, 1u << 18};
	wds *w;
	titan_err err;
	if (wds_open_memory(&w, data, size, &lim, &err) != 0)
		return 0;
	wds_sample s = {0};
	int r, n = 0;
	while ((r = wds_next(w, &s, &err)) == 1) {
		if (s.key == NULL || s.n_fields < 1 || s.n_fields > lim.max_fields)
			abort();
		for (int i = 0; i < s.n_fields; i++) {
			const wds_field *f = &s.fields[i];
			if (f->size > lim.max_member || f->data[f->size] != 0)
				abort();
			image im;
			if (strcmp(f->name, "jpg") == 0 && image_decode(&im, f->data, f->size, &ilim, &err) == 0)
				image_free(&im);
			wds_utf8_valid(f->data, f->size);
		}
		if (++n > 1 << 16)
			abort();
	}
	wds_sample_free(&s);
	wds_close(w);
	return 0;
}
