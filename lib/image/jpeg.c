/* jpeg.c: JPEG through libjpeg-turbo, set up as PIL's JpegDecode.c leaves it:
 * libjpeg's defaults (ISLOW integer DCT, fancy upsampling, block smoothing),
 * the colour space libjpeg guesses from the JFIF/Adobe markers, and output
 * L for one component, RGB for three.  PIL ignores libjpeg's warnings but
 * refuses a file that ends early ("image file is truncated"): so does this. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "image/image_impl.h"

/* A progressive file of thousands of tiny scans costs a full pass each:
 * legitimate files have about ten. */
#define JPEG_MAX_SCANS 1000
/* libjpeg's own buffers (a progressive file keeps every coefficient). */
#define JPEG_MAX_MEMORY (1536L << 20)

typedef struct jpeg_ctx {
	struct jpeg_error_mgr mgr;
	struct jpeg_progress_mgr progress;
	jmp_buf jmp;
	char msg[JMSG_LENGTH_MAX + 64];
} jpeg_ctx;

static void on_error(j_common_ptr c)
{
	jpeg_ctx *x = (jpeg_ctx *)c->err;
	char m[JMSG_LENGTH_MAX];
	c->err->format_message(c, m);
	snprintf(x->msg, sizeof x->msg, "%s", m);
	longjmp(x->jmp, 1);
}

static void on_message(j_common_ptr c, int level)
{
	jpeg_ctx *x = (jpeg_ctx *)c->err;
	if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF) {
		snprintf(x->msg, sizeof x->msg, "truncated: the data ends before the image does");
		longjmp(x->jmp, 1);
	}
}

static void on_progress(j_common_ptr c)
{
	jpeg_ctx *x = (jpeg_ctx *)c->err;
	j_decompress_ptr d = (j_decompress_ptr)c;
	if (d->input_scan_number > JPEG_MAX_SCANS) {
		snprintf(x->msg, sizeof x->msg, "more than %d scans", JPEG_MAX_SCANS);
		longjmp(x->jmp, 1);
	}
}

/* PIL's APP1 handling: the first "Exif\0\0" segment, later ones appended
 * without their prefix; the last XMP packet.  EXIF that does not parse is an
 * error only when a JFIF segment gives a density in dpi or dots per cm:
 * otherwise PIL's _open has already read the EXIF looking for one, swallowed
 * the error and left the EXIF empty, which hides the XMP too. */
static int orientation_of(j_decompress_ptr c, titan_err *err)
{
	static const char xmp_tag[] = "http://ns.adobe.com/xap/1.0/";
	uint8_t *exif = NULL;
	size_t exif_n = 0;
	const uint8_t *xmp = NULL;
	size_t xmp_n = 0;
	int dpi = 0;
	for (jpeg_saved_marker_ptr m = c->marker_list; m != NULL; m = m->next) {
		if (m->marker == JPEG_APP0 && m->data_length >= 12 && memcmp(m->data, "JFIF", 4) == 0)
			dpi |= m->data[7] == 1 || m->data[7] == 2;
		if (m->marker != JPEG_APP0 + 1)
			continue;
		if (m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0) {
			size_t skip = exif ? 6 : 0;
			uint8_t *t = realloc(exif, exif_n + m->data_length - skip);
			if (t == NULL) {
				free(exif);
				return err_set(err, "out of memory for EXIF");
			}
			exif = t;
			memcpy(exif + exif_n, m->data + skip, m->data_length - skip);
			exif_n += m->data_length - skip;
		} else if (m->data_length >= sizeof xmp_tag &&
			   memcmp(m->data, xmp_tag, sizeof xmp_tag) == 0) {
			xmp = m->data + sizeof xmp_tag;
			xmp_n = m->data_length - sizeof xmp_tag;
		}
	}
	int o = 0;
	if (exif != NULL) {
		o = image_exif_orientation(exif, exif_n, err);
		free(exif);
		if (o < 0 && dpi)
			return err_prefix(err, "EXIF");
		if (o < 0)
			return 0;
	}
	if (o == 0 && xmp != NULL)
		o = image_xmp_orientation(xmp, xmp_n);
	return o;
}

int image_decode_jpeg(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		      titan_err *err)
{
	struct jpeg_decompress_struct c;
	jpeg_ctx x = {0};
	c.err = jpeg_std_error(&x.mgr);
	x.mgr.error_exit = on_error;
	x.mgr.emit_message = on_message;
	x.progress.progress_monitor = on_progress;
	/* volatile: changed between setjmp and a longjmp back to it */
	uint8_t *volatile px = NULL;
	if (setjmp(x.jmp)) {
		jpeg_destroy_decompress(&c);
		free(px);
		return err_set(err, "%s", x.msg);
	}
	jpeg_create_decompress(&c);
	c.progress = &x.progress;
	c.mem->max_memory_to_use = JPEG_MAX_MEMORY;
	jpeg_save_markers(&c, JPEG_APP0, 0xffff);
	jpeg_save_markers(&c, JPEG_APP0 + 1, 0xffff);
	jpeg_mem_src(&c, data, (unsigned long)size);
	jpeg_read_header(&c, TRUE);

	image_mode mode;
	if (c.num_components == 1) {
		mode = IMAGE_L;
		c.out_color_space = JCS_GRAYSCALE;
	} else if (c.num_components == 3) {
		mode = IMAGE_RGB;
		c.out_color_space = JCS_RGB;
	} else {
		jpeg_destroy_decompress(&c);
		if (c.num_components == 4)
			return err_set(err, "%s: refused (titan reads grey, YCbCr and RGB JPEGs)",
				       c.jpeg_color_space == JCS_YCCK ? "YCCK" : "CMYK");
		return err_set(err, "%d components: refused (titan reads 1 or 3)", c.num_components);
	}
	if (image_check_size(c.image_width, c.image_height, lim, err) != 0) {
		jpeg_destroy_decompress(&c);
		return -1;
	}
	int o = orientation_of(&c, err);
	if (o < 0) {
		jpeg_destroy_decompress(&c);
		return -1;
	}
	if (image_alloc(im, (int)c.image_width, (int)c.image_height, mode, err) != 0) {
		jpeg_destroy_decompress(&c);
		return -1;
	}
	px = im->px;
	jpeg_start_decompress(&c);
	size_t stride = (size_t)im->w * (size_t)im->channels;
	while (c.output_scanline < c.output_height) {
		JSAMPROW row = px + (size_t)c.output_scanline * stride;
		jpeg_read_scanlines(&c, &row, 1);
	}
	jpeg_finish_decompress(&c);
	jpeg_destroy_decompress(&c);
	im->orientation = o >= 1 && o <= 8 ? o : 0;
	return 0;
}
