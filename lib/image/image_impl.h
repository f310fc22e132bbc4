/* image_impl.h: what lib/image's files share (not part of the interface). */
#ifndef TITAN_IMAGE_IMPL_H
#define TITAN_IMAGE_IMPL_H

#include "image/image.h"

/* The three decoders: *im filled (px allocated through image_alloc) and the
 * orientation found in the file's EXIF/XMP left in im->orientation, not yet
 * applied.  On error *im holds nothing to free. */
int image_decode_jpeg(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		      titan_err *err);
int image_decode_png(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		     titan_err *err);
int image_decode_webp(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		      titan_err *err);

/* Refuse a w x h image the limits do not allow (or with a side of 0). */
int image_check_size(uint64_t w, uint64_t h, const image_limits *lim, titan_err *err);
/* Set im's geometry and mode and allocate px (uninitialised). */
int image_alloc(image *im, int w, int h, image_mode mode, titan_err *err);

/* Big- and little-endian reads from bytes. */
static inline uint32_t image_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t image_le32(const uint8_t *p)
{
	return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

#endif
