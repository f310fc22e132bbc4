/* png.c: PNG through libpng, to PIL's modes.
 *
 * PIL reads a PNG's chunks itself, and that reading decides what it accepts;
 * walk_chunks does the same walk first: before the image data every chunk is
 * whole and its CRC right (else "broken PNG file"); the IDAT CRCs go
 * unchecked; after the image data chunks are read until IEND or a header that
 * is not one (no CRCs), a chunk cut short being an error.  EXIF comes from an
 * eXIf chunk or a tEXt "exif" (the last one), or else from "Raw profile type
 * exif" text (hex); XMP from the last "XML:com.adobe.xmp" text.  libpng then
 * decodes the pixels, with its CRC checks off (the walk did PIL's) and
 * anything wrong after the last row ignored, as PIL has its image by then. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>
#include <png.h>

#include "image/image_impl.h"

/* PIL's MAX_TEXT_CHUNK: compressed text past it is an error. */
#define PNG_MAX_TEXT (1u << 20)

typedef struct png_meta {
	uint32_t w, h;
	uint8_t depth, color;
	int animated;
	uint8_t *exif, *raw_exif, *xmp; /* owned copies; NULL when absent */
	size_t exif_n, raw_exif_n, xmp_n;
} png_meta;

static void meta_free(png_meta *m)
{
	free(m->exif);
	free(m->raw_exif);
	free(m->xmp);
}

static int keep(uint8_t **dst, size_t *dst_n, const uint8_t *src, size_t n, titan_err *err)
{
	uint8_t *t = malloc(n ? n : 1);
	if (t == NULL)
		return err_set(err, "out of memory");
	memcpy(t, src, n);
	free(*dst);
	*dst = t;
	*dst_n = n;
	return 0;
}

/* zlib data of a zTXt/iTXt: 1 with *out (owned), 0 when zlib cannot read it
 * (PIL takes the text as empty then), -1 when it inflates past PNG_MAX_TEXT. */
static int inflate_text(const uint8_t *z, size_t n, uint8_t **out, size_t *out_n, titan_err *err)
{
	struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
	uint8_t *buf = malloc(PNG_MAX_TEXT + 1);
	if (d == NULL || buf == NULL) {
		libdeflate_free_decompressor(d);
		free(buf);
		return err_set(err, "out of memory");
	}
	size_t got = 0;
	enum libdeflate_result r = libdeflate_zlib_decompress(d, z, n, buf, PNG_MAX_TEXT + 1, &got);
	libdeflate_free_decompressor(d);
	if (r == LIBDEFLATE_SUCCESS && got <= PNG_MAX_TEXT) {
		*out = buf;
		*out_n = got;
		return 1;
	}
	free(buf);
	if (r == LIBDEFLATE_INSUFFICIENT_SPACE || got > PNG_MAX_TEXT)
		return err_set(err, "text chunk inflates past %u bytes", PNG_MAX_TEXT);
	return 0;
}

/* "Raw profile type exif": lines 4 on are hex digits (Python's fromhex). */
static int unhex_profile(const uint8_t *v, size_t n, png_meta *m, titan_err *err)
{
	size_t i = 0;
	for (int line = 0; line < 3 && i < n; i++)
		if (v[i] == '\n')
			line++;
	uint8_t *out = malloc(n / 2 + 1);
	if (out == NULL)
		return err_set(err, "out of memory");
	size_t k = 0;
	int hi = -1;
	for (; i < n; i++) {
		int c = v[i], d;
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
			if (hi >= 0)
				break;
			continue;
		}
		d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			break;
		if (hi < 0) {
			hi = d;
		} else {
			out[k++] = (uint8_t)(hi << 4 | d);
			hi = -1;
		}
	}
	if (i < n || hi >= 0) {
		free(out);
		return err_set(err, "\"Raw profile type exif\" is not hex");
	}
	free(m->raw_exif);
	m->raw_exif = out;
	m->raw_exif_n = k;
	return 0;
}

/* A text value under keyword key, already inflated. */
static int text_value(png_meta *m, const char *key, const uint8_t *v, size_t n, int from_itxt,
		      titan_err *err)
{
	if (strcmp(key, "XML:com.adobe.xmp") == 0)
		return keep(&m->xmp, &m->xmp_n, v, n, err);
	if (strcmp(key, "exif") == 0 && !from_itxt)
		return keep(&m->exif, &m->exif_n, v, n, err);
	if (strcmp(key, "Raw profile type exif") == 0)
		return unhex_profile(v, n, m, err);
	return 0;
}

/* tEXt, zTXt, iTXt as PIL's chunk handlers split them. */
static int text_chunk(png_meta *m, const char *type, const uint8_t *s, size_t n, titan_err *err)
{
	const uint8_t *nul = memchr(s, 0, n);
	char key[80];
	size_t kn = nul ? (size_t)(nul - s) : n;
	if (kn >= sizeof key)
		return 0; /* no keyword titan looks at is that long */
	memcpy(key, s, kn);
	key[kn] = 0;
	const uint8_t *v = nul ? nul + 1 : s + n;
	size_t vn = (size_t)(s + n - v);
	if (strcmp(type, "tEXt") == 0)
		return text_value(m, key, v, vn, 0, err);
	uint8_t *z = NULL;
	size_t zn = 0;
	int rc;
	if (strcmp(type, "zTXt") == 0) {
		if (vn > 0 && v[0] != 0)
			return err_set(err, "zTXt: unknown compression method %u", v[0]);
		rc = vn > 0 ? inflate_text(v + 1, vn - 1, &z, &zn, err) : 0;
		if (rc < 0)
			return -1;
		rc = text_value(m, key, z ? z : (const uint8_t *)"", zn, 0, err);
		free(z);
		return rc;
	}
	/* iTXt: flag, method, language\0, translated keyword\0, text */
	if (nul == NULL || vn < 2)
		return 0;
	int compressed = v[0], method = v[1];
	const uint8_t *r = v + 2, *end = s + n;
	for (int i = 0; i < 2; i++) {
		const uint8_t *z0 = memchr(r, 0, (size_t)(end - r));
		if (z0 == NULL)
			return 0;
		r = z0 + 1;
	}
	if (!compressed)
		return text_value(m, key, r, (size_t)(end - r), 1, err);
	if (method != 0)
		return 0;
	rc = inflate_text(r, (size_t)(end - r), &z, &zn, err);
	if (rc <= 0)
		return rc;
	rc = text_value(m, key, z, zn, 1, err);
	free(z);
	return rc;
}

static int is_word(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int chunk_meta(png_meta *m, const char *type, const uint8_t *s, size_t n, titan_err *err)
{
	if (strcmp(type, "acTL") == 0)
		m->animated = 1;
	else if (strcmp(type, "eXIf") == 0) {
		uint8_t *t = malloc(n + 6);
		if (t == NULL)
			return err_set(err, "out of memory");
		memcpy(t, "Exif\0\0", 6);
		memcpy(t + 6, s, n);
		free(m->exif);
		m->exif = t;
		m->exif_n = n + 6;
	} else if (strcmp(type, "tEXt") == 0 || strcmp(type, "zTXt") == 0 ||
		   strcmp(type, "iTXt") == 0)
		return text_chunk(m, type, s, n, err);
	return 0;
}

static int walk_chunks(const uint8_t *d, size_t size, png_meta *m, titan_err *err)
{
	size_t at = 8;
	int phase = 0; /* 0 before IDAT, 1 in the IDATs, 2 after them */
	for (int first = 1;; first = 0) {
		if (size - at < 8) {
			if (phase == 2)
				return 0;
			return err_set(err, "truncated at byte %zu (a chunk header)", at);
		}
		uint32_t len = image_be32(d + at);
		char type[5];
		memcpy(type, d + at + 4, 4);
		type[4] = 0;
		if (!is_word(d[at + 4]) || !is_word(d[at + 5]) || !is_word(d[at + 6]) ||
		    !is_word(d[at + 7])) {
			if (phase == 2)
				return 0;
			return err_set(err, "byte %zu: not a chunk type", at + 4);
		}
		if (len > size - at - 8)
			return err_set(err, "%s chunk at byte %zu: truncated (%u bytes, %zu left)", type,
				       at, len, size - at - 8);
		const uint8_t *s = d + at + 8;
		if (first) {
			if (strcmp(type, "IHDR") != 0 || len < 13)
				return err_set(err, "the first chunk is %s, not IHDR", type);
			m->w = image_be32(s);
			m->h = image_be32(s + 4);
			m->depth = s[8];
			m->color = s[9];
		}
		if (strcmp(type, "IDAT") == 0) {
			if (phase == 2)
				return err_set(err, "IDAT at byte %zu after other chunks", at);
			phase = 1;
			at += 8 + (size_t)len + 4;
			if (at > size)
				return 0; /* the last IDAT's CRC: PIL never reads it */
			continue;
		}
		if (phase == 1)
			phase = 2;
		if (phase == 0) {
			if (size - at - 8 - len < 4)
				return err_set(err, "%s chunk at byte %zu: no CRC", type, at);
			uint32_t crc = (uint32_t)libdeflate_crc32(0, d + at + 4, 4 + (size_t)len);
			if (crc != image_be32(s + len))
				return err_set(err, "%s chunk at byte %zu: bad CRC", type, at);
		}
		if (strcmp(type, "IEND") == 0) {
			if (phase == 0)
				return err_set(err, "IEND before any image data");
			return 0;
		}
		if (chunk_meta(m, type, s, len, err) != 0)
			return err_prefix(err, "%s chunk at byte %zu", type, at);
		at += 8 + (size_t)len + 4;
		if (at > size)
			at = size; /* a CRC cut short after the image data: PIL reads on */
	}
}

typedef struct png_src {
	const uint8_t *d;
	size_t n, at;
	jmp_buf jmp;
	char msg[200];
} png_src;

static void on_read(png_structp p, png_bytep out, size_t n)
{
	png_src *s = png_get_io_ptr(p);
	if (n > s->n - s->at)
		png_error(p, "truncated: the data ends before the image does");
	memcpy(out, s->d + s->at, n);
	s->at += n;
}

static void on_error(png_structp p, png_const_charp msg)
{
	png_src *s = png_get_error_ptr(p);
	snprintf(s->msg, sizeof s->msg, "%s", msg);
	longjmp(s->jmp, 1);
}

static void on_warning(png_structp p, png_const_charp msg)
{
	(void)p;
	(void)msg;
}

static int orientation_of(const png_meta *m, titan_err *err)
{
	int o = 0;
	const uint8_t *exif = m->exif ? m->exif : m->raw_exif;
	size_t exif_n = m->exif ? m->exif_n : m->raw_exif_n;
	if (exif != NULL) {
		o = image_exif_orientation(exif, exif_n, err);
		if (o < 0)
			return err_prefix(err, "EXIF");
	}
	if (o == 0 && m->xmp != NULL)
		o = image_xmp_orientation(m->xmp, m->xmp_n);
	return o;
}

static image_mode mode_of(const png_meta *m)
{
	switch (m->color) {
	case PNG_COLOR_TYPE_GRAY: return m->depth == 1 ? IMAGE_1 : IMAGE_L;
	case PNG_COLOR_TYPE_PALETTE: return IMAGE_P;
	case PNG_COLOR_TYPE_GRAY_ALPHA: return IMAGE_LA;
	case PNG_COLOR_TYPE_RGB: return IMAGE_RGB;
	default: return IMAGE_RGBA;
	}
}

/* libpng's pass over the pixels; rows_done set once the image is whole. */
static int decode_pixels(image *im, png_src *src, const png_meta *m,
			 const image_limits *lim, titan_err *err)
{
	png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, on_error, on_warning);
	png_infop info = p ? png_create_info_struct(p) : NULL;
	png_bytep *volatile rows = NULL;
	volatile int rows_done = 0;
	if (info == NULL) {
		png_destroy_read_struct(&p, NULL, NULL);
		return err_set(err, "out of memory");
	}
	if (setjmp(src->jmp)) {
		png_destroy_read_struct(&p, &info, NULL);
		free(rows);
		if (rows_done)
			return 0;
		image_free(im);
		return err_set(err, "%s", src->msg);
	}
	png_set_read_fn(p, src, on_read);
	png_set_user_limits(p, lim->max_side, lim->max_side);
	png_set_crc_action(p, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
	png_set_benign_errors(p, 1);
#ifdef PNG_IGNORE_ADLER32
	png_set_option(p, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
	png_read_info(p, info);
	if (m->depth < 8) {
		if (m->color == PNG_COLOR_TYPE_GRAY)
			png_set_expand_gray_1_2_4_to_8(p); /* PIL's L;2, L;4: v * 255 / 3, / 15 */
		else
			png_set_packing(p);
	}
	png_set_interlace_handling(p); /* Adam7: png_read_image runs the passes */
	png_read_update_info(p, info);
	image_mode mode = mode_of(m);
	if (png_get_rowbytes(p, info) != (size_t)m->w * (size_t)image_mode_channels(mode))
		png_error(p, "unexpected row size");
	if (image_alloc(im, (int)m->w, (int)m->h, mode, err) != 0) {
		png_destroy_read_struct(&p, &info, NULL);
		return -1;
	}
	if (mode == IMAGE_P) {
		png_colorp pal;
		int n = 0;
		memset(im->palette, 0, sizeof im->palette);
		if (png_get_PLTE(p, info, &pal, &n) & PNG_INFO_PLTE)
			for (int i = 0; i < n && i < 256; i++) {
				im->palette[3 * i] = pal[i].red;
				im->palette[3 * i + 1] = pal[i].green;
				im->palette[3 * i + 2] = pal[i].blue;
			}
	}
	rows = malloc(m->h * sizeof *rows);
	if (rows == NULL)
		png_error(p, "out of memory");
	size_t stride = (size_t)m->w * (size_t)im->channels;
	for (uint32_t y = 0; y < m->h; y++)
		rows[y] = im->px + y * stride;
	png_read_image(p, rows);
	rows_done = 1;
	png_read_end(p, NULL);
	png_destroy_read_struct(&p, &info, NULL);
	free(rows);
	return 0;
}

int image_decode_png(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		     titan_err *err)
{
	png_meta m = {0};
	if (walk_chunks(data, size, &m, err) != 0) {
		meta_free(&m);
		return -1;
	}
	int rc = -1;
	if (m.depth == 16)
		err_set(err, "16-bit: refused (titan reads 8-bit PNGs and less)");
	else if (m.animated)
		err_set(err, "animated (an acTL chunk): refused");
	else if (m.color > 6 || m.color == 1 || m.color == 5)
		err_set(err, "colour type %u unknown", m.color);
	else if (image_check_size(m.w, m.h, lim, err) == 0) {
		int o = orientation_of(&m, err);
		png_src src = {.d = data, .n = size};
		if (o >= 0 && decode_pixels(im, &src, &m, lim, err) == 0) {
			im->orientation = o >= 1 && o <= 8 ? o : 0;
			rc = 0;
		}
	}
	meta_free(&m);
	return rc;
}
