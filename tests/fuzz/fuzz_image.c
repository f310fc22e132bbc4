/* fuzz_image: lib/image's decoders (JPEG, PNG, WebP, EXIF, XMP) and
 * _process_cc12m_image's resize, crop and conversion on arbitrary bytes.
 *
 * Properties: never crashes; never allocates past the limits (small here,
 * so that a header claiming a huge image is refused before any buffer); an
 * image it accepts has the size and channels its mode says, and processes
 * into values in [-1, 1]. */
#include <stdint.h>
#include <stdlib.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const image_limits lim = {2048, 1u << 20};
	image im;
	titan_err err;
	if (image_decode(&im, data, size, &lim, &err) != 0)
		return 0;
	if (im.w < 1 || im.h < 1 || (uint64_t)im.w * (uint64_t)im.h > lim.max_pixels ||
	    im.channels != image_mode_channels(im.mode))
		abort();
	enum { N = 8 };
	float out[3 * N * N];
	image_cc12m_geom g;
	if (image_cc12m_geom_of(im.w, im.h, N, &g)) {
		int offset = (int)(size % (size_t)g.crop_choices);
		if (image_cc12m(&im, N, offset, out, &err) != 1)
			abort();
		for (int i = 0; i < 3 * N * N; i++)
			if (!(out[i] >= -1.0f && out[i] <= 1.0f))
				abort();
	}
	image_free(&im);
	return 0;
}
