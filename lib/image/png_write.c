/* png_write.c: 8-bit RGB PNGs through libpng, into memory or a file, and the
 * grid the demos show their samples in.
 *
 * libpng reports errors by longjmp; every png_* call that may fail stays
 * inside encode(), whose setjmp frame holds no variable it changes. */
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

static void mem_write(png_structp png, png_bytep data, size_t n)
{
	membuf *m = png_get_io_ptr(png);
	if (m->oom)
		return;
	if (m->n + n > m->cap) {
		size_t cap = m->cap ? m->cap : 4096;
		while (cap < m->n + n)
			cap *= 2;
		uint8_t *t = realloc(m->p, cap);
		if (t == NULL) {
			m->oom = 1;
			return;
		}
		m->p = t;
		m->cap = cap;
	}
	memcpy(m->p + m->n, data, n);
	m->n += n;
}

static void mem_flush(png_structp png)
{
	(void)png;
}

/* rows: h pointers to (w, 3) rows.  0, or -1 when libpng failed. */
static int encode(png_structp png, png_infop info, membuf *m, png_bytep *rows, int w, int h)
{
	if (setjmp(png_jmpbuf(png)))
		return -1;
	png_set_write_fn(png, m, mem_write, mem_flush);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
		     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_set_rows(png, info, rows);
	png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
	return 0;
}

int image_png_encode(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *size,
		     titan_err *err)
{
	*out = NULL;
	*size = 0;
	if (w <= 0 || h <= 0)
		return err_set(err, "png: empty image %dx%d", w, h);
	png_bytep *rows = malloc((size_t)h * sizeof *rows);
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png != NULL ? png_create_info_struct(png) : NULL;
	if (rows == NULL || info == NULL) {
		free(rows);
		png_destroy_write_struct(&png, &info);
		return err_set(err, "png: out of memory");
	}
	for (int y = 0; y < h; y++)
		rows[y] = (png_bytep)(rgb + (size_t)y * w * 3);
	membuf m = {0};
	int rc = encode(png, info, &m, rows, w, h);
	png_destroy_write_struct(&png, &info);
	free(rows);
	if (rc != 0 || m.oom) {
		free(m.p);
		return err_set(err, "png: %s", m.oom ? "out of memory" : "libpng failed to encode");
	}
	*out = m.p;
	*size = m.n;
	return 0;
}

int image_png_write(const char *path, const uint8_t *rgb, int w, int h, titan_err *err)
{
	uint8_t *buf;
	size_t n;
	if (image_png_encode(rgb, w, h, &buf, &n, err) != 0)
		return err_set(err, "%s: %s", path, err->msg);
	int rc = atomic_write_file(path, buf, n, err);
	free(buf);
	return rc;
}

int image_grid(const uint8_t *const *imgs, int n, int w, int h, int cols, int pad,
	       const uint8_t bg[3], uint8_t **out, int *gw, int *gh, titan_err *err)
{
	*out = NULL;
	if (n <= 0 || w <= 0 || h <= 0 || cols <= 0 || pad < 0)
		return err_set(err, "grid: %d images of %dx%d in %d columns, pad %d", n, w, h,
			       cols, pad);
	if (cols > n)
		cols = n;
	int rows = (n + cols - 1) / cols;
	*gw = cols * w + (cols + 1) * pad;
	*gh = rows * h + (rows + 1) * pad;
	size_t px = (size_t)*gw * *gh;
	uint8_t *g = malloc(px * 3); /* (gh, gw, 3) */
	if (g == NULL)
		return err_set(err, "grid: out of memory");
	for (size_t i = 0; i < px; i++)
		memcpy(g + i * 3, bg, 3);
	for (int k = 0; k < n; k++) {
		int x0 = pad + (k % cols) * (w + pad), y0 = pad + (k / cols) * (h + pad);
		for (int y = 0; y < h; y++)
			memcpy(g + ((size_t)(y0 + y) * *gw + x0) * 3, imgs[k] + (size_t)y * w * 3,
			       (size_t)w * 3);
	}
	*out = g;
	return 0;
}
