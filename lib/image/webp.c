/* webp.c: WebP through libwebp as PIL's WebPAnimDecoder does it: the frame
 * decoded to RGBA (fancy upsampling, libwebp's defaults), the mode RGBA when
 * WebPGetFeatures says the file has alpha and RGB (the fourth byte dropped)
 * when not.  EXIF and XMP are the first such chunks of an extended (VP8X)
 * file, as WebPDemuxGetChunk finds them. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>

#include "image/image_impl.h"

/* The first EXIF and XMP chunks of a VP8X file's RIFF list. */
static void find_meta(const uint8_t *d, size_t size, const uint8_t **exif, size_t *exif_n,
		      const uint8_t **xmp, size_t *xmp_n)
{
	*exif = *xmp = NULL;
	*exif_n = *xmp_n = 0;
	if (memcmp(d + 12, "VP8X", 4) != 0)
		return;
	size_t end = (size_t)image_le32(d + 4) + 8;
	if (end > size)
		end = size;
	for (size_t at = 12; end - at >= 8;) {
		size_t n = image_le32(d + at + 4);
		if (n > end - at - 8)
			return;
		if (memcmp(d + at, "EXIF", 4) == 0 && *exif == NULL) {
			*exif = d + at + 8;
			*exif_n = n;
		} else if (memcmp(d + at, "XMP ", 4) == 0 && *xmp == NULL) {
			*xmp = d + at + 8;
			*xmp_n = n;
		}
		at += 8 + n + (n & 1);
		if (at > end)
			return;
	}
}

int image_decode_webp(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		      titan_err *err)
{
	/* An extended file's canvas first, as PIL's _get_size checks it before
	 * its decoder allocates the canvas. */
	if (size >= 30 && memcmp(data + 12, "VP8X", 4) == 0) {
		uint32_t cw = (image_le32(data + 24) & 0xffffff) + 1;
		uint32_t chh = (image_le32(data + 26) >> 8) + 1;
		if (image_check_size(cw, chh, lim, err) != 0)
			return -1;
	}
	WebPDecoderConfig cfg;
	if (!WebPInitDecoderConfig(&cfg))
		return err_set(err, "libwebp: version mismatch");
	VP8StatusCode st = WebPGetFeatures(data, size, &cfg.input);
	if (st != VP8_STATUS_OK)
		return err_set(err, "cannot read the header (libwebp status %d)", (int)st);
	if (cfg.input.has_animation)
		return err_set(err, "animated: refused");
	if (image_check_size((uint64_t)cfg.input.width, (uint64_t)cfg.input.height, lim, err) != 0)
		return -1;
	const uint8_t *exif, *xmp;
	size_t exif_n, xmp_n;
	find_meta(data, size, &exif, &exif_n, &xmp, &xmp_n);
	int o = 0;
	if (exif != NULL && (o = image_exif_orientation(exif, exif_n, err)) < 0)
		return err_prefix(err, "EXIF");
	if (o == 0 && xmp != NULL)
		o = image_xmp_orientation(xmp, xmp_n);

	int w = cfg.input.width, h = cfg.input.height;
	if (image_alloc(im, w, h, IMAGE_RGBA, err) != 0)
		return -1;
	cfg.output.colorspace = MODE_RGBA;
	cfg.output.is_external_memory = 1;
	cfg.output.u.RGBA.rgba = im->px;
	cfg.output.u.RGBA.stride = 4 * w;
	cfg.output.u.RGBA.size = (size_t)4 * (size_t)w * (size_t)h;
	st = WebPDecode(data, size, &cfg);
	WebPFreeDecBuffer(&cfg.output);
	if (st != VP8_STATUS_OK) {
		image_free(im);
		return err_set(err, "%s (libwebp status %d)",
			       st == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated" : "corrupt data", (int)st);
	}
	if (!cfg.input.has_alpha) {
		size_t n = (size_t)w * (size_t)h;
		for (size_t i = 0; i < n; i++)
			memmove(im->px + 3 * i, im->px + 4 * i, 3);
		im->mode = IMAGE_RGB;
		im->channels = 3;
	}
	im->orientation = o >= 1 && o <= 8 ? o : 0;
	return 0;
}
