/* fuzz_parquet: lib/parquet on arbitrary bytes: the footer, then every
 * column of every row group read as titan-encode --format coco reads them.
 *
 * Properties: never crashes, never allocates beyond the reader's bounds;
 * a column read gives one value slot per row of its group, each present one
 * NUL-terminated inside the value buffer. */
#include <stdint.h>
#include <stdlib.h>

#include "parquet/parquet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	titan_err err;
	pq_file *f = pq_open_memory(data, size, "fuzz", &err);
	if (f == NULL)
		return 0;
	static const char *const cols[] = {"image.bytes", "caption.list.element", "image_id", "a"};
	for (int rg = 0; rg < pq_num_row_groups(f) && rg < 64; rg++) {
		for (size_t c = 0; c < sizeof cols / sizeof *cols; c++) {
			int col = pq_column(f, cols[c]);
			pq_values v;
			if (col < 0 || pq_read(f, rg, col, &v, &err) != 0)
				continue;
			if (v.n != pq_row_group_rows(f, rg))
				abort();
			for (int64_t i = 0; i < v.n; i++)
				if (v.present[i] && v.buf[v.off[i] + v.len[i]] != 0)
					abort();
			pq_values_free(&v);
		}
	}
	pq_close(f);
	return 0;
}
