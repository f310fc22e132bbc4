/* fuzz_pt_source: a torch.save file as lib/dcp's sources read it (the .pt path
 * of titan-ckpt-convert: the zip, the pickle, the walk that flattens nested
 * dicts into named items), on arbitrary bytes.
 *
 * Properties: opening never crashes or runs away (a pickle that shares
 * references exponentially is read in bounded time and memory); every item it
 * lists has a name, can be found by it, and reads: a tensor converts to float64,
 * a value writes back as a torch.save stream (or is refused at the writer's
 * bound). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dcp/dcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_pt", 0);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	dcp_source *s;
	titan_err err;
	if (dcp_source_open(&s, path, &err) == 0) {
		for (size_t i = 0; i < dcp_source_count(s) && i < 256; i++) {
			const dcp_src_item *it = dcp_source_item(s, i);
			if (it->name == NULL || dcp_source_find(s, it->name) == NULL)
				abort();
			if (it->kind == DCP_TENSOR) {
				int64_t n = 1;
				for (int d = 0; d < it->ndim; d++)
					n *= it->shape[d];
				if (n >= 0 && n <= (1 << 16)) {
					double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
					if (out != NULL)
						dcp_source_read(s, it, out, PTZ_F64, &err);
					free(out);
				}
			} else {
				uint8_t *b = NULL;
				size_t nb;
				if (dcp_source_bytes(s, it, &b, &nb, &err) == 0)
					free(b);
			}
		}
		dcp_source_close(s);
	}
	close(fd);
	return 0;
}
