/* fuzz_encode: titan-encode's input side on arbitrary bytes: a webdataset tar
 * (maybe compressed) read as titan-encode reads it, lenient (hostile members
 * reported and dropped), and each sample's image through lib/fluxin's image
 * step (decode, the too-small check, the crop) at a small size.
 *
 * Properties: never crashes; every refusal and skip is a message, a skip
 * naming its sample's key; a cropped image's source is at least the crop's
 * size and its offset in range; the reader ends, never loops. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fluxin/fluxin.h"
#include "wds/wds.h"

static void refused(void *ctx, const char *msg)
{
	if (msg[0] == 0)
		abort();
	(*(int *)ctx)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const wds_limits lim = {1u << 20, 16};
	static const image_limits ilim = {1024, 1u << 18};
	enum { N = 16 };
	wds *w;
	titan_err err;
	if (wds_open_memory(&w, data, size, &lim, &err) != 0)
		return 0;
	int n_refused = 0;
	wds_on_refused(w, refused, &n_refused);
	wds_sample s = {0};
	uint8_t rgb[3 * N * N];
	int n = 0;
	while (wds_next(w, &s, &err) == 1) {
		const wds_field *img = wds_field_get(&s, "jpg");
		uint32_t iw, ih, off;
		int st = fluxin_image(img ? img->data : NULL, img ? img->size : 0, s.key, s.index, N,
				      1, 7, NULL, &ilim, rgb, &iw, &ih, &off, &err);
		if (st < FLUXIN_OK || st >= FLUXIN_N_STATUS)
			abort();
		if (st != FLUXIN_OK && strncmp(err.msg, s.key, strlen(s.key)) != 0)
			abort();
		if (st == FLUXIN_OK && (iw < N || ih < N || off > (iw > ih ? iw : ih)))
			abort();
		const wds_field *txt = wds_field_get(&s, "txt");
		if (txt)
			wds_utf8_valid(txt->data, txt->size);
		if (++n > 1 << 16)
			abort();
	}
	wds_sample_free(&s);
	wds_close(w);
	return 0;
}
