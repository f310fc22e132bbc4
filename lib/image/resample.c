/* resample.c: PIL's Image.resize with its default filter, and Image.crop.
 *
 * Bicubic is Pillow's libImaging/Resample.c arithmetic, reproduced from its
 * description: the filter (a = -0.5) over a support of 2 scaled by the
 * downscale factor (never below 1); for output index i the centre
 * (i + 0.5) * scale, the taps from (int)(centre - support + 0.5) to
 * (int)(centre + support + 0.5) clipped to the image, weights
 * filter((j - centre + 0.5) / filterscale) divided by their sum, then rounded
 * half away from zero to 22-bit fixed point; each output channel starts at
 * 2^21, adds pixel * weight in 32-bit ints, and is clipped to 0..255 after
 * the shift.  The horizontal pass runs first over the rows the vertical pass
 * reads; a pass whose size does not change is skipped.  Channels are
 * independent (Pillow's bands).  Pillow 13 runs the vertical pass first
 * when the height shrinks by more than twice as many pixels as the width.
 *
 * Nearest (modes 1 and P) is Pillow's ImagingScaleAffine: a double position
 * starting at scale / 2 and advanced by scale each step, truncated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_impl.h"

#define PRECISION_BITS 22

typedef struct coeffs {
	int ksize;
	int *bounds;  /* (n, 2): first tap, number of taps */
	int32_t *k;   /* (n, ksize) fixed-point weights */
} coeffs;

static double bicubic(double x)
{
	const double a = -0.5;
	if (x < 0.0)
		x = -x;
	if (x < 1.0)
		return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
	if (x < 2.0)
		return (((x - 5) * x + 8) * x - 4) * a;
	return 0.0;
}

static void coeffs_free(coeffs *c)
{
	free(c->bounds);
	free(c->k);
}

static int coeffs_make(int in_size, int out_size, coeffs *c, titan_err *err)
{
	double scale = (double)in_size / out_size;
	double filterscale = scale < 1.0 ? 1.0 : scale;
	double support = 2.0 * filterscale;
	c->ksize = (int)ceil(support) * 2 + 1;
	c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
	c->k = malloc((size_t)out_size * (size_t)c->ksize * sizeof *c->k);
	double *w = malloc((size_t)c->ksize * sizeof *w);
	if (c->bounds == NULL || c->k == NULL || w == NULL) {
		coeffs_free(c);
		free(w);
		return err_set(err, "out of memory for resampling weights");
	}
	double inv = 1.0 / filterscale;
	for (int i = 0; i < out_size; i++) {
		double center = (i + 0.5) * scale;
		int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in_size)
			hi = in_size;
		int n = hi - lo;
		double sum = 0.0;
		for (int j = 0; j < n; j++) {
			w[j] = bicubic((j + lo - center + 0.5) * inv);
			sum += w[j];
		}
		int32_t *k = c->k + (size_t)i * c->ksize;
		for (int j = 0; j < c->ksize; j++) {
			double v = j < n ? (sum != 0.0 ? w[j] / sum : w[j]) : 0.0;
			k[j] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS)
					       : 0.5 + v * (1 << PRECISION_BITS));
		}
		c->bounds[2 * i] = lo;
		c->bounds[2 * i + 1] = n;
	}
	free(w);
	return 0;
}

static inline uint8_t clip8(int32_t ss)
{
	int32_t v = ss >> PRECISION_BITS; /* arithmetic shift, as Pillow's lookup index */
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* out (rows, ow, ch) from in's rows first.. first + rows - 1, along x. */
static void pass_x(const uint8_t *restrict in, int iw, int first, int rows, uint8_t *restrict out,
		   int ow, int ch, const coeffs *c)
{
	for (int y = 0; y < rows; y++) {
		const uint8_t *line = in + (size_t)(first + y) * iw * ch;
		uint8_t *o = out + (size_t)y * ow * ch;
		for (int x = 0; x < ow; x++) {
			const int32_t *k = c->k + (size_t)x * c->ksize;
			const uint8_t *p = line + (size_t)c->bounds[2 * x] * ch;
			int n = c->bounds[2 * x + 1];
			for (int b = 0; b < ch; b++) {
				int32_t ss = 1 << (PRECISION_BITS - 1);
				for (int j = 0; j < n; j++)
					ss += p[(size_t)j * ch + b] * k[j];
				o[(size_t)x * ch + b] = clip8(ss);
			}
		}
	}
}

/* out (oh, w, ch) along y; bounds shifted by first (the rows in holds). */
static void pass_y(const uint8_t *restrict in, int w, int first, uint8_t *restrict out, int oh,
		   int ch, const coeffs *c)
{
	size_t stride = (size_t)w * ch;
	for (int y = 0; y < oh; y++) {
		const int32_t *k = c->k + (size_t)y * c->ksize;
		const uint8_t *col = in + (size_t)(c->bounds[2 * y] - first) * stride;
		int n = c->bounds[2 * y + 1];
		uint8_t *o = out + (size_t)y * stride;
		for (size_t i = 0; i < stride; i++) {
			int32_t ss = 1 << (PRECISION_BITS - 1);
			for (int j = 0; j < n; j++)
				ss += col[(size_t)j * stride + i] * k[j];
			o[i] = clip8(ss);
		}
	}
}

/* Horizontal first, over only the rows the vertical pass reads. */
static int resize_hv(const image *in, image *out, int ow, int oh, titan_err *err)
{
	int ch = in->channels;
	coeffs cy = {0}, cx = {0};
	if (coeffs_make(in->h, oh, &cy, err) != 0)
		return -1;
	int first = cy.bounds[0];
	int last = cy.bounds[2 * oh - 2] + cy.bounds[2 * oh - 1];
	const uint8_t *src = in->px;
	int sw = in->w, sfirst = 0;
	uint8_t *tmp = NULL;
	if (ow != in->w) {
		if (coeffs_make(in->w, ow, &cx, err) != 0) {
			coeffs_free(&cy);
			return -1;
		}
		tmp = malloc((size_t)(last - first) * ow * ch);
		if (tmp == NULL) {
			coeffs_free(&cx);
			coeffs_free(&cy);
			return err_set(err, "out of memory resizing to %dx%d", ow, oh);
		}
		pass_x(in->px, in->w, first, last - first, tmp, ow, ch, &cx);
		coeffs_free(&cx);
		src = tmp;
		sw = ow;
		sfirst = first;
	}
	int rc = image_alloc(out, ow, oh, in->mode, err);
	if (rc == 0) {
		if (oh != in->h)
			pass_y(src, sw, sfirst, out->px, oh, ch, &cy);
		else /* the whole height was resampled: first is 0 */
			memcpy(out->px, src, (size_t)oh * sw * ch);
	}
	free(tmp);
	coeffs_free(&cy);
	return rc;
}

/* Vertical first (over every column), then horizontal. */
static int resize_vh(const image *in, image *out, int ow, int oh, titan_err *err)
{
	int ch = in->channels;
	coeffs cy = {0}, cx = {0};
	if (coeffs_make(in->h, oh, &cy, err) != 0)
		return -1;
	uint8_t *tmp = malloc((size_t)oh * in->w * ch);
	if (tmp == NULL) {
		coeffs_free(&cy);
		return err_set(err, "out of memory resizing to %dx%d", ow, oh);
	}
	pass_y(in->px, in->w, 0, tmp, oh, ch, &cy);
	coeffs_free(&cy);
	int rc = image_alloc(out, ow, oh, in->mode, err);
	if (rc == 0 && ow != in->w) {
		rc = coeffs_make(in->w, ow, &cx, err);
		if (rc == 0)
			pass_x(tmp, in->w, 0, oh, out->px, ow, ch, &cx);
		else
			image_free(out);
		coeffs_free(&cx);
	} else if (rc == 0) {
		memcpy(out->px, tmp, (size_t)oh * ow * ch);
	}
	free(tmp);
	return rc;
}

/* Pillow 13's order: the vertical pass first when the height shrinks by more
 * than twice as many pixels as the width does (the passes round to 8 bits in
 * between, so the order shows in the result). */
static int resize_bicubic(const image *in, image *out, int ow, int oh, titan_err *err)
{
	int dh = in->h - oh, dw = in->w - ow;
	if (dh > 0 && dh > dw * 2)
		return resize_vh(in, out, ow, oh, err);
	return resize_hv(in, out, ow, oh, err);
}

static int resize_nearest(const image *in, image *out, int ow, int oh, titan_err *err)
{
	if (image_alloc(out, ow, oh, in->mode, err) != 0)
		return -1;
	int ch = in->channels;
	int *xin = malloc((size_t)ow * sizeof *xin);
	if (xin == NULL) {
		image_free(out);
		return err_set(err, "out of memory resizing to %dx%d", ow, oh);
	}
	double ax = (double)in->w / ow, ay = (double)in->h / oh;
	double xo = ax * 0.5, yo = ay * 0.5;
	for (int x = 0; x < ow; x++, xo += ax)
		xin[x] = xo < 0.0 ? -1 : (int)xo;
	memset(out->px, 0, (size_t)ow * oh * ch);
	for (int y = 0; y < oh; y++, yo += ay) {
		int yi = yo < 0.0 ? -1 : (int)yo;
		if (yi < 0 || yi >= in->h)
			continue;
		const uint8_t *row = in->px + (size_t)yi * in->w * ch;
		uint8_t *o = out->px + (size_t)y * ow * ch;
		for (int x = 0; x < ow; x++)
			if (xin[x] >= 0 && xin[x] < in->w)
				memcpy(o + (size_t)x * ch, row + (size_t)xin[x] * ch, (size_t)ch);
	}
	free(xin);
	return 0;
}

/* Pillow's MULDIV255: a * b / 255 rounded, in integers. */
static inline uint8_t muldiv255(unsigned a, unsigned b)
{
	unsigned t = a * b + 128;
	return (uint8_t)(((t >> 8) + t) >> 8);
}

/* RGBA -> RGBa, LA -> La: the colour times alpha (the alpha is the last channel). */
static void premultiply(image *im)
{
	size_t n = (size_t)im->w * im->h;
	int ch = im->channels;
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = im->px + i * ch, a = p[ch - 1];
		for (int b = 0; b < ch - 1; b++)
			p[b] = muldiv255(p[b], a);
	}
}

/* RGBa -> RGBA, La -> LA: divided back, except where alpha is 0 or 255. */
static void unpremultiply(image *im)
{
	size_t n = (size_t)im->w * im->h;
	int ch = im->channels;
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = im->px + i * ch;
		unsigned a = p[ch - 1];
		if (a == 0 || a == 255)
			continue;
		for (int b = 0; b < ch - 1; b++) {
			unsigned v = 255u * p[b] / a;
			p[b] = (uint8_t)(v > 255 ? 255 : v);
		}
	}
}

int image_crop(const image *in, image *out, int x, int y, int w, int h, titan_err *err)
{
	if (x < 0 || y < 0 || w < 1 || h < 1 || x > in->w - w || y > in->h - h)
		return err_set(err, "crop (%d, %d, %d, %d) outside a %dx%d image", x, y, x + w, y + h,
			       in->w, in->h);
	if (image_alloc(out, w, h, in->mode, err) != 0)
		return -1;
	memcpy(out->palette, in->palette, sizeof out->palette);
	out->format = in->format;
	out->orientation = in->orientation;
	int ch = in->channels;
	for (int r = 0; r < h; r++)
		memcpy(out->px + (size_t)r * w * ch, in->px + ((size_t)(y + r) * in->w + x) * ch,
		       (size_t)w * ch);
	return 0;
}

int image_resize(const image *in, image *out, int w, int h, titan_err *err)
{
	if (w < 1 || h < 1)
		return err_set(err, "resize to %dx%d: height and width must be > 0", w, h);
	if (w == in->w && h == in->h)
		return image_crop(in, out, 0, 0, w, h, err);
	int rc;
	if (in->mode == IMAGE_1 || in->mode == IMAGE_P) {
		rc = resize_nearest(in, out, w, h, err);
	} else if (in->mode == IMAGE_LA || in->mode == IMAGE_RGBA) {
		image pre;
		if (image_crop(in, &pre, 0, 0, in->w, in->h, err) != 0)
			return -1;
		premultiply(&pre);
		rc = resize_bicubic(&pre, out, w, h, err);
		image_free(&pre);
		if (rc == 0)
			unpremultiply(out);
	} else {
		rc = resize_bicubic(in, out, w, h, err);
	}
	if (rc == 0) {
		memcpy(out->palette, in->palette, sizeof out->palette);
		out->format = in->format;
		out->orientation = in->orientation;
	}
	return rc;
}
