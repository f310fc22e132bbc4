/* png_write.c: 8-bit PNGs through libpng (image.h's writer side), and the
 * small EXIF block torchtitan's save_image puts in them. */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "core/afile.h"
#include "image/image.h"

typedef struct membuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
} membuf;

static void put(png_structp png, png_bytep data, size_t n)
{
	membuf *b = png_get_io_ptr(png);
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (p == NULL) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void flush(png_structp png) { (void)png; }

/* libpng's messages go to err through its error pointer; it longjmps back. */
static void on_error(png_structp png, png_const_charp msg)
{
	titan_err *err = png_get_error_ptr(png);
	err_set(err, "png: %s", msg);
	png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

/* The rows and chunks, libpng's state set up by the caller; 0 or -1. */
static int encode(png_structp png, png_infop info, const uint8_t *px, int w, int h,
		  int channels, const uint8_t *exif, size_t exif_n, membuf *buf)
{
	static const int color[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
				     PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
	if (setjmp(png_jmpbuf(png)))
		return -1;
	png_set_write_fn(png, buf, put, flush);
	/* zlib's level 6, PIL's default compress_level */
	png_set_compression_level(png, 6);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, color[channels],
		     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (exif != NULL)
		png_set_eXIf_1(png, info, (png_uint_32)exif_n, (png_bytep)exif);
	png_write_info(png, info);
	size_t stride = (size_t)w * (size_t)channels;
	for (int y = 0; y < h; y++)
		png_write_row(png, px + (size_t)y * stride);
	png_write_end(png, info);
	return 0;
}

int image_png_encode(const uint8_t *px, int w, int h, int channels, const uint8_t *exif,
		     size_t exif_n, uint8_t **out, size_t *out_n, titan_err *err)
{
	*out = NULL;
	*out_n = 0;
	if (w < 1 || h < 1 || (uint32_t)w > IMAGE_MAX_SIDE || (uint32_t)h > IMAGE_MAX_SIDE)
		return err_set(err, "png: image of %d x %d, expected sides 1 .. %u", w, h,
			       IMAGE_MAX_SIDE);
	if (channels < 1 || channels > 4)
		return err_set(err, "png: %d channels, expected 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA)",
			       channels);
	if (exif != NULL && (exif_n == 0 || exif_n > (1u << 20)))
		return err_set(err, "png: EXIF block of %zu bytes, expected 1 .. 1 MiB", exif_n);
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, err, on_error, on_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	if (info == NULL) {
		png_destroy_write_struct(&png, NULL);
		return err_set(err, "png: out of memory for libpng's state");
	}
	membuf buf = {0};
	int rc = encode(png, info, px, w, h, channels, exif, exif_n, &buf);
	png_destroy_write_struct(&png, &info);
	if (rc == 0 && buf.oom)
		rc = err_set(err, "png: out of memory for a %d x %d image", w, h);
	if (rc < 0) {
		free(buf.p);
		return -1;
	}
	*out = buf.p;
	*out_n = buf.n;
	return 0;
}

int image_png_write(const char *path, const uint8_t *px, int w, int h, int channels,
		    const uint8_t *exif, size_t exif_n, titan_err *err)
{
	uint8_t *png;
	size_t n;
	if (image_png_encode(px, w, h, channels, exif, exif_n, &png, &n, err) < 0)
		return err_prefix(err, "%s", path);
	int rc = atomic_write_file(path, png, n, err);
	free(png);
	return rc;
}

/* A tag's value as PIL's write_string stores it: ASCII, each other UTF-8
 * character one '?' (str.encode("ascii", "replace")), then a NUL; its length. */
static size_t ascii_of(const char *s, uint8_t *dst)
{
	size_t n = 0;
	for (const uint8_t *p = (const uint8_t *)s; *p; p++) {
		if (*p >= 0x80 && *p < 0xC0)
			continue; /* a continuation byte: its lead was the '?' */
		if (dst)
			dst[n] = *p < 0x80 ? *p : '?';
		n++;
	}
	if (dst)
		dst[n] = 0;
	return n + 1;
}

static void be16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void be32(uint8_t *p, uint32_t v)
{
	be16(p, v >> 16);
	be16(p + 2, v & 0xffff);
}

int image_exif_ascii(const uint16_t *tags, const char *const *values, int n, uint8_t **out,
		     size_t *out_n, titan_err *err)
{
	*out = NULL;
	if (n < 1 || n > 64)
		return err_set(err, "exif: %d tags, expected 1 .. 64", n);
	int order[64];
	size_t total = 8 + 2 + 12 * (size_t)n + 4;
	for (int i = 0; i < n; i++) {
		int j = i;
		for (; j > 0 && tags[order[j - 1]] > tags[i]; j--)
			order[j] = order[j - 1];
		order[j] = i;
		size_t len = ascii_of(values[i], NULL);
		if (len > (1u << 16))
			return err_set(err, "exif: tag 0x%04x's value of %zu bytes, expected at most "
				       "64 KiB", tags[i], len);
		total += len > 4 ? len + (len & 1) : 0;
	}
	for (int i = 1; i < n; i++)
		if (tags[order[i]] == tags[order[i - 1]])
			return err_set(err, "exif: tag 0x%04x given twice", tags[order[i]]);
	uint8_t *b = calloc(total, 1);
	if (b == NULL)
		return err_set(err, "exif: out of memory");
	/* Exif.tobytes(): big-endian TIFF, IFD0 at 8, entries by tag, then the
	 * values that do not fit in an entry, each padded to an even length */
	memcpy(b, "MM\0*", 4);
	be32(b + 4, 8);
	be16(b + 8, (unsigned)n);
	size_t data = 8 + 2 + 12 * (size_t)n + 4;
	for (int k = 0; k < n; k++) {
		int i = order[k];
		uint8_t *e = b + 10 + 12 * k, val[4] = {0};
		size_t len = ascii_of(values[i], NULL);
		be16(e, tags[i]);
		be16(e + 2, 2); /* ASCII */
		be32(e + 4, (uint32_t)len);
		if (len <= 4) {
			ascii_of(values[i], val);
			memcpy(e + 8, val, 4);
			continue;
		}
		be32(e + 8, (uint32_t)data);
		ascii_of(values[i], b + data);
		data += len + (len & 1);
	}
	*out = b;
	*out_n = total;
	return 0;
}
