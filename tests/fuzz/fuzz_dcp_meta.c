/* fuzz_dcp_meta: lib/dcp's reader of a DCP folder's .metadata pickle (and the
 * look-up by key built on it), on arbitrary bytes.
 *
 * Properties: parsing never crashes; a .metadata it accepts has no key twice,
 * every key is found by dcp_find, every tensor's element count times its
 * element size fits 2^62 bytes, and every chunk lies inside its tensor and
 * names a file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/dcp.h"
#include "dcp/dcp_priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dcp_ckpt c;
	memset(&c, 0, sizeof c);
	titan_err err;
	if (dcp_meta_parse(&c, data, size, &err) == 0) {
		for (size_t i = 0; i < c.n; i++) {
			const dcp_entry *e = &c.entries[i];
			if (dcp_find(&c, e->fqn) != e)
				abort();
			if (e->kind != DCP_TENSOR)
				continue;
			__int128 bytes = ptz_dtype_size(e->dtype);
			for (int d = 0; d < e->ndim; d++)
				bytes *= e->shape[d];
			if (bytes > ((__int128)1 << 62))
				abort();
			for (size_t k = 0; k < e->n_chunks; k++) {
				if (e->chunks[k].file == NULL)
					abort();
				for (int d = 0; d < e->ndim; d++)
					if (e->chunks[k].offsets[d] < 0 || e->chunks[k].sizes[d] < 0 ||
					    e->chunks[k].offsets[d] + e->chunks[k].sizes[d] > e->shape[d])
						abort();
			}
		}
	}
	dcp_close(&c);
	return 0;
}
