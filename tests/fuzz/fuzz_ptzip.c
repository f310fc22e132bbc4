/* fuzz_ptzip: lib/ptzip's torch.save zip reader and tensor parser, and the
 * DCP value reader, on arbitrary bytes.
 *
 * Properties: never crashes; every entry it indexes lies inside the buffer;
 * a tensor it accepts can be copied out (the view stays inside its storage). */
#include <stdint.h>
#include <stdlib.h>

#include "dcp/dcp.h"
#include "ptzip/ptzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ptz_reader r;
	titan_err err;
	if (ptz_open(&r, data, size, &err) == 0) {
		for (size_t i = 0; i < r.n_entries; i++)
			if (r.entries[i].data_off > size || r.entries[i].size > size - r.entries[i].data_off)
				abort();
		ptz_tensor t;
		if (ptz_read_tensor(&r, &t, &err) == 0) {
			int64_t n = ptz_tensor_numel(&t);
			if (n >= 0 && n <= (1 << 20)) {
				double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
				if (out && ptz_tensor_copy(&t, out, PTZ_F64, &err) != 0)
					abort();
				free(out);
			}
		}
		ptz_close(&r);
	}
	pk_val *v;
	pk_arena *a;
	dcp_value_load(data, size, &v, &a, &err);
	pk_free(a);
	return 0;
}
