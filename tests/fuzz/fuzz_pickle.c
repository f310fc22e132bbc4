/* fuzz_pickle: lib/pickle's restricted unpickler on arbitrary bytes.
 *
 * Properties: loading never crashes, never hangs and never accepts a global
 * outside the allowlist; a value that loads can be printed (depth-bounded) and,
 * when it is a plain tree, written and read back to the same repr. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pickle/pickle.h"

static const char *const globals[] = {
	"torch._utils _rebuild_tensor_v2", "collections OrderedDict", "_codecs encode",
	"torch FloatStorage", "torch Size", "torch float32",
	"torch.distributed.checkpoint.metadata Metadata", NULL,
};

static int plain(const pk_val *v, int depth)
{
	if (depth > 16)
		return 0;
	switch (v->kind) {
	case PK_NONE: case PK_BOOL: case PK_INT: case PK_FLOAT: case PK_STR: case PK_BYTES:
		return 1;
	case PK_TUPLE: case PK_LIST:
		for (size_t i = 0; i < v->n; i++)
			if (!plain(v->items[i], depth + 1))
				return 0;
		return 1;
	case PK_DICT:
		for (size_t i = 0; i < 2 * v->n; i++)
			if (!plain(v->items[i], depth + 1))
				return 0;
		return 1;
	default:
		return 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	pk_allow allow = {globals};
	pk_val *v;
	pk_arena *a;
	titan_err err;
	if (pk_load(data, size, &allow, &v, &a, &err) == 0) {
		char r1[2048];
		pk_repr(v, r1, sizeof r1);
		if (plain(v, 0) && strlen(r1) < sizeof r1 - 1) {
			pk_buf b = {0};
			if (pk_dump(&b, v, 4, &err) == 0) {
				pk_val *w;
				pk_arena *wa;
				if (pk_load(b.p, b.n, &allow, &w, &wa, &err) != 0)
					abort();
				char r2[2048];
				pk_repr(w, r2, sizeof r2);
				/* NaN floats print equal as "nan"; dict keys merge the same way. */
				if (strcmp(r1, r2) != 0)
					abort();
				pk_free(wa);
			}
			free(b.p);
		}
	} else if (strstr(err.msg, "pickle:") == NULL) {
		abort(); /* every failure is located */
	}
	pk_free(a);
	return 0;
}
