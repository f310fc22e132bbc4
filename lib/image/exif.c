/* exif.c: the Orientation tag as PIL's getexif reads it, and the transpose
 * ImageOps.exif_transpose makes of it.
 *
 * PIL parses EXIF as a TIFF directory (TiffImagePlugin.ImageFileDirectory_v2):
 * the header must be one of its four classic prefixes (BigTIFF's needs more
 * than the 8 bytes it reads: an error), IFD0's entries are read in order, the
 * first of a tag kept; an entry of an unknown type is skipped, and one whose
 * out-of-line data would push the running total past the block's size;
 * entries stop at the first that cannot be read whole (OSError, caught).  The
 * tag's value is the first of its values; an integer type gives that integer,
 * RATIONAL, FLOAT and DOUBLE compare equal to one when integral; BYTE, ASCII
 * and UNDEFINED give bytes or text, which match no orientation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_impl.h"

#define TAG_ORIENTATION 0x0112
#define ORIENT_OTHER 9 /* present, but no orientation 1..8 */

typedef struct tiff {
	const uint8_t *d;
	size_t n;
	int big_endian;
} tiff;

static uint64_t rd(const tiff *t, size_t at, int bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes; i++) {
		int k = t->big_endian ? i : bytes - 1 - i;
		v = v << 8 | t->d[at + (size_t)k];
	}
	return v;
}

/* Bytes per value of each type PIL loads; 0 for the types it skips. */
static int unit_size(unsigned type)
{
	static const int units[17] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8};
	return type < 17 ? units[type] : 0;
}

/* The first value, as an orientation 1..8 or ORIENT_OTHER. */
static int value_of(const tiff *t, unsigned type, size_t at)
{
	double v;
	switch (type) {
	case 3: v = (double)rd(t, at, 2); break;
	case 4: case 13: v = (double)rd(t, at, 4); break;
	case 16: v = (double)rd(t, at, 8); break;
	case 6: v = (int8_t)rd(t, at, 1); break;
	case 8: v = (int16_t)rd(t, at, 2); break;
	case 9: v = (int32_t)rd(t, at, 4); break;
	case 5: case 10: {
		uint32_t num = (uint32_t)rd(t, at, 4), den = (uint32_t)rd(t, at + 4, 4);
		if (den == 0)
			return ORIENT_OTHER;
		v = type == 5 ? (double)num / den : (double)(int32_t)num / (int32_t)den;
		break;
	}
	case 11: {
		uint32_t b = (uint32_t)rd(t, at, 4);
		float f;
		memcpy(&f, &b, 4);
		v = f;
		break;
	}
	case 12: {
		uint64_t b = rd(t, at, 8);
		memcpy(&v, &b, 8);
		break;
	}
	default: return ORIENT_OTHER;
	}
	return v >= 1 && v <= 8 && v == floor(v) ? (int)v : ORIENT_OTHER;
}

int image_exif_orientation(const uint8_t *exif, size_t size, titan_err *err)
{
	for (int i = 0; i < 2 && size >= 6 && memcmp(exif, "Exif\0\0", 6) == 0; i++) {
		exif += 6;
		size -= 6;
	}
	if (size == 0)
		return 0;
	tiff t = {exif, size, 0};
	if (size < 4)
		return err_set(err, "not a TIFF header (%zu bytes)", size);
	if (memcmp(exif, "MM", 2) == 0 && (exif[2] == 0 || exif[2] == 42) &&
	    exif[2] + exif[3] == 42)
		t.big_endian = 1;
	else if (memcmp(exif, "II", 2) == 0 && (exif[2] == 0 || exif[2] == 42) &&
		 exif[2] + exif[3] == 42)
		t.big_endian = 0;
	else
		return err_set(err, "not a TIFF header (%02x %02x %02x %02x)", exif[0], exif[1],
			       exif[2], exif[3]);
	if (size < 8)
		return err_set(err, "TIFF header cut short (%zu bytes)", size);
	uint64_t at = rd(&t, 4, 4);
	if (at > size || size - at < 2)
		return 0;
	unsigned count = (unsigned)rd(&t, at, 2);
	at += 2;
	uint64_t total = 0;
	uint8_t seen[65536 / 8] = {0}; /* tags kept so far: a later entry of one is skipped */
	for (unsigned i = 0; i < count && size - at >= 12; i++, at += 12) {
		unsigned tag = (unsigned)rd(&t, at, 2), type = (unsigned)rd(&t, at + 2, 2);
		uint64_t n = rd(&t, at + 4, 4), bytes = n * (uint64_t)unit_size(type);
		if (seen[tag / 8] & (1u << tag % 8) || unit_size(type) == 0 || n == 0)
			continue;
		size_t where = at + 8;
		if (bytes > 4) {
			uint64_t off = rd(&t, at + 8, 4);
			total += bytes;
			if (total > size)
				continue;
			if (off > size || size - off < bytes)
				return 0; /* a short read: PIL stops there */
			where = off;
		}
		if (tag == TAG_ORIENTATION)
			return value_of(&t, type, where);
		seen[tag / 8] |= (uint8_t)(1u << tag % 8);
	}
	return 0;
}

int image_xmp_orientation(const uint8_t *xmp, size_t size)
{
	static const char key[] = "tiff:Orientation";
	const size_t kn = sizeof key - 1;
	for (size_t i = 0; i + kn <= size; i++) {
		if (memcmp(xmp + i, key, kn) != 0)
			continue;
		const uint8_t *r = xmp + i + kn;
		size_t left = size - i - kn;
		if (left >= 3 && r[0] == '=' && r[1] == '"' && r[2] >= '0' && r[2] <= '9')
			return r[2] - '0';
		if (left >= 2 && r[0] == '>' && r[1] >= '0' && r[1] <= '9')
			return r[1] - '0';
	}
	return 0;
}

/* The source pixel of output (x, y) for each of PIL's transposes of a w x h image. */
static void source_of(int o, int w, int h, int x, int y, int *sx, int *sy)
{
	switch (o) {
	case 2: *sx = w - 1 - x; *sy = y; break;             /* FLIP_LEFT_RIGHT */
	case 3: *sx = w - 1 - x; *sy = h - 1 - y; break;     /* ROTATE_180 */
	case 4: *sx = x; *sy = h - 1 - y; break;             /* FLIP_TOP_BOTTOM */
	case 5: *sx = y; *sy = x; break;                     /* TRANSPOSE */
	case 6: *sx = y; *sy = h - 1 - x; break;             /* ROTATE_270 */
	case 7: *sx = w - 1 - y; *sy = h - 1 - x; break;     /* TRANSVERSE */
	default: *sx = w - 1 - y; *sy = x; break;            /* 8: ROTATE_90 */
	}
}

int image_transpose(image *im, int orientation, titan_err *err)
{
	if (orientation < 2 || orientation > 8)
		return 0;
	int swap = orientation >= 5;
	int ow = swap ? im->h : im->w, oh = swap ? im->w : im->h, c = im->channels;
	uint8_t *out = malloc((size_t)ow * (size_t)oh * (size_t)c);
	if (out == NULL)
		return err_set(err, "out of memory transposing a %dx%d image", im->w, im->h);
	for (int y = 0; y < oh; y++)
		for (int x = 0; x < ow; x++) {
			int sx, sy;
			source_of(orientation, im->w, im->h, x, y, &sx, &sy);
			memcpy(out + ((size_t)y * ow + x) * c, im->px + ((size_t)sy * im->w + sx) * c,
			       (size_t)c);
		}
	free(im->px);
	im->px = out;
	im->w = ow;
	im->h = oh;
	return 0;
}
