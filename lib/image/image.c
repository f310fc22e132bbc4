/* image.c: modes, limits, and image_decode: the format sniffed from the bytes
 * as PIL.Image.open does it (the field's name says nothing), the file's
 * orientation applied as the datasets Image feature's exif_transpose does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_impl.h"

const image_limits image_default_limits = {IMAGE_MAX_SIDE, IMAGE_MAX_PIXELS};

int image_mode_channels(image_mode m)
{
	switch (m) {
	case IMAGE_LA: return 2;
	case IMAGE_RGB: return 3;
	case IMAGE_RGBA: return 4;
	default: return 1;
	}
}

const char *image_mode_name(image_mode m)
{
	static const char *const names[] = {"1", "L", "P", "LA", "RGB", "RGBA"};
	return (unsigned)m < sizeof names / sizeof *names ? names[m] : "?";
}

const char *image_format_name(image_format f)
{
	return f == IMAGE_JPEG ? "JPEG" : f == IMAGE_PNG ? "PNG" : "WebP";
}

int image_check_size(uint64_t w, uint64_t h, const image_limits *lim, titan_err *err)
{
	if (w == 0 || h == 0)
		return err_set(err, "image is %llux%llu: empty", (unsigned long long)w,
			       (unsigned long long)h);
	if (w > lim->max_side || h > lim->max_side || w * h > lim->max_pixels)
		return err_set(err, "image is %llux%llu: over the limit of %u pixels a side and "
			       "%llu pixels in all", (unsigned long long)w, (unsigned long long)h,
			       lim->max_side, (unsigned long long)lim->max_pixels);
	return 0;
}

int image_alloc(image *im, int w, int h, image_mode mode, titan_err *err)
{
	im->w = w;
	im->h = h;
	im->mode = mode;
	im->channels = image_mode_channels(mode);
	im->px = malloc((size_t)w * (size_t)h * (size_t)im->channels);
	if (im->px == NULL)
		return err_set(err, "out of memory for a %dx%d image", w, h);
	return 0;
}

void image_free(image *im)
{
	free(im->px);
	im->px = NULL;
}

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* PIL's _accept of each plugin, on the first bytes. */
static int sniff(const uint8_t *d, size_t n, image_format *f)
{
	if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
		*f = IMAGE_JPEG;
	else if (n >= 8 && memcmp(d, png_signature, 8) == 0)
		*f = IMAGE_PNG;
	else if (n >= 16 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0 &&
		 (memcmp(d + 12, "VP8 ", 4) == 0 || memcmp(d + 12, "VP8L", 4) == 0 ||
		  memcmp(d + 12, "VP8X", 4) == 0))
		*f = IMAGE_WEBP;
	else
		return -1;
	return 0;
}

int image_decode(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		 titan_err *err)
{
	memset(im, 0, sizeof *im);
	if (lim == NULL)
		lim = &image_default_limits;
	if (size == 0)
		return err_set(err, "image is empty (0 bytes)");
	image_format f;
	if (sniff(data, size, &f) != 0) {
		char hex[3 * 8 + 1] = "";
		for (size_t i = 0; i < size && i < 8; i++)
			snprintf(hex + 3 * i, 4, " %02x", data[i]);
		return err_set(err, "not a JPEG, PNG or WebP image (starts%s)", hex);
	}
	int rc = f == IMAGE_JPEG  ? image_decode_jpeg(im, data, size, lim, err)
		 : f == IMAGE_PNG ? image_decode_png(im, data, size, lim, err)
				  : image_decode_webp(im, data, size, lim, err);
	if (rc != 0) {
		err_prefix(err, "%s", image_format_name(f));
		memset(im, 0, sizeof *im);
		return -1;
	}
	im->format = f;
	if (image_transpose(im, im->orientation, err) != 0) {
		image_free(im);
		return -1;
	}
	return 0;
}
