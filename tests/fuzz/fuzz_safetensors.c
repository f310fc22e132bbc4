/* fuzz_safetensors: lib/safetensors' validating parser on arbitrary bytes.
 *
 * Properties: parsing never crashes; a file it accepts satisfies the format's
 * invariants (tensors tile the data exactly, sizes match shapes and dtypes),
 * and every tensor's bytes can be read. */
#include <stdint.h>
#include <stdlib.h>

#include "safetensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	st_file f;
	titan_err err;
	if (st_parse(&f, data, size, &err) != 0)
		return 0;
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | data[i];
	uint64_t at = 0;
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < f.n; i++) {
		const st_tensor *t = &f.t[i];
		uint64_t bytes = ptz_dtype_size(t->dtype);
		for (int d = 0; d < t->ndim; d++)
			bytes *= (uint64_t)t->shape[d];
		if (t->begin != at || t->end - t->begin != bytes)
			abort();
		for (uint64_t k = 0; k < bytes; k++)
			sink ^= t->data[k];
		at = t->end;
	}
	if (8 + hl + at != size)
		abort();
	(void)sink;
	st_close(&f);
	return 0;
}
