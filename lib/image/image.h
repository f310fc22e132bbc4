/* image.h: images for Flux's data loader, decoded and processed as torchtitan's
 * flux_datasets.py does them with PIL (torchtitan 0.3.0, Pillow 13).
 *
 * The path of one sample, and what each step reproduces:
 *   image_decode   the bytes of a webdataset ".jpg" field (or a COCO row's
 *                  image) as the Hugging Face datasets Image feature opens them:
 *                  PIL.Image.open (the format sniffed from the bytes, whatever
 *                  the field's name), load(), then ImageOps.exif_transpose when
 *                  the EXIF (or XMP) Orientation tag is present.
 *                  JPEG through libjpeg-turbo with PIL's settings (ISLOW DCT,
 *                  fancy upsampling, the colour space libjpeg guesses from the
 *                  JFIF/Adobe markers); PNG through libpng, unpacked to PIL's
 *                  modes (1-bit grey is mode "1", 2- and 4-bit grey scaled to
 *                  8 bits, palettes kept as indices); WebP through libwebp as
 *                  PIL's WebPAnimDecoder does it (RGBA, the alpha dropped when
 *                  the file says it has none).
 *   image_cc12m    _process_cc12m_image: images narrower or shorter than the
 *                  output size are skipped; the short side is resized to the
 *                  output size and the long one to ceil(size / short * long)
 *                  with PIL's Image.resize default (bicubic, a = -0.5, support
 *                  scaled by the downscale factor, 22-bit fixed-point
 *                  coefficients, horizontal then vertical pass; nearest for
 *                  modes "1" and "P"; LA and RGBA premultiplied around it);
 *                  cropped at an offset along the long side; converted to RGB
 *                  as convert("RGB") does (grey replicated, alpha dropped,
 *                  palette looked up); x / 255 * 2 - 1 in float32.
 *
 * Refused, with a message naming the sample's key (never a crash, never an
 * allocation the limits did not allow): anything not JPEG, PNG or WebP;
 * truncated or corrupt data (a PNG with a bad CRC, a JPEG that ends before
 * its last scan); an empty buffer; width or height over limits->max_side or
 * width * height over limits->max_pixels, checked from the header before any
 * pixel buffer exists; CMYK and YCCK JPEGs; 16-bit PNGs; animated PNGs (acTL)
 * and WebPs.  PIL would open the last four (torchtitan trains on CMYK
 * converted by PIL's formula, on 16-bit PNGs cut to 8 bits, on an
 * animation's first frame); titan refuses them rather than guess.
 *
 * Pixels are 8-bit, row-major, channels interleaved: (h, w, channels).
 * Functions return 0 or -1 with a message in *err, unless they say otherwise. */
#ifndef TITAN_IMAGE_H
#define TITAN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/torch_rng.h"

/* PIL's modes that the three formats decode to. */
typedef enum image_mode {
	IMAGE_1,    /* 1-bit grey: one channel, 0 or 255 (PIL stores it so) */
	IMAGE_L,    /* grey */
	IMAGE_P,    /* palette indices; image.palette maps them */
	IMAGE_LA,   /* grey, alpha */
	IMAGE_RGB,
	IMAGE_RGBA,
} image_mode;

typedef enum image_format { IMAGE_JPEG, IMAGE_PNG, IMAGE_WEBP } image_format;

/* Sizes an image may have; checked from the header before decoding. */
typedef struct image_limits {
	uint32_t max_side;   /* width and height, each */
	uint64_t max_pixels; /* width * height */
} image_limits;

/* The defaults: PIL's MAX_IMAGE_PIXELS (beyond which it warns of a
 * decompression bomb, 89,478,485 = 1024 * 1024 * 1024 / 4 / 3) and a side no
 * camera or web image reaches; 342 MiB of RGBA at most. */
#define IMAGE_MAX_SIDE 32768u
#define IMAGE_MAX_PIXELS 89478485u
extern const image_limits image_default_limits;

typedef struct image {
	int w, h;
	image_mode mode;
	int channels;          /* 1 (1, L, P), 2 (LA), 3 (RGB), 4 (RGBA) */
	uint8_t *px;           /* (h, w, channels); owned, image_free frees */
	uint8_t palette[256 * 3]; /* P: RGB per index; entries the file lacks are black */
	image_format format;
	int orientation;       /* the EXIF/XMP Orientation applied (1..8), 0 when none */
} image;

int image_mode_channels(image_mode m);
const char *image_mode_name(image_mode m);      /* PIL's: "1", "L", "P", "LA", ... */
const char *image_format_name(image_format f);  /* "JPEG", "PNG", "WebP" */

/* Decode data[0..size) into *im (im->px allocated here), the EXIF orientation
 * applied.  lim NULL means image_default_limits.  On error *im holds nothing
 * to free. */
int image_decode(image *im, const uint8_t *data, size_t size, const image_limits *lim,
		 titan_err *err);
void image_free(image *im);

/* The Orientation tag of an EXIF block (a TIFF header and IFD0, with or
 * without the "Exif\0\0" prefix): 1..65535 as stored, 0 when absent.  -1 (and
 * *err) when the block has no valid TIFF header, as PIL raises then. */
int image_exif_orientation(const uint8_t *exif, size_t size, titan_err *err);
/* The orientation of an XMP packet, as PIL's getexif reads it when EXIF has
 * none: the first digit after `tiff:Orientation="` or `tiff:Orientation>`;
 * 0 when absent. */
int image_xmp_orientation(const uint8_t *xmp, size_t size);
/* ImageOps.exif_transpose: flip or rotate *im in place for orientations 2..8;
 * other values leave it as it is. */
int image_transpose(image *im, int orientation, titan_err *err);

/* Image.resize(w, h) with no filter given: a copy when the size is the same;
 * nearest for modes 1 and P; bicubic otherwise, LA and RGBA premultiplied
 * (RGBa) before and divided after, as PIL does it.  out is allocated. */
int image_resize(const image *in, image *out, int w, int h, titan_err *err);
/* Image.crop((x, y, x + w, y + h)), the box inside the image. */
int image_crop(const image *in, image *out, int x, int y, int w, int h, titan_err *err);
/* Image.convert("RGB") into rgb (h, w, 3), which the caller sizes. */
void image_to_rgb(const image *im, uint8_t *rgb);

/* torchtitan's normalisation of one 8-bit value: float32 v / 255 * 2 - 1. */
float image_unit(uint8_t v);

/* The geometry of _process_cc12m_image for a w x h image and output size n. */
typedef struct image_cc12m_geom {
	int resized_w, resized_h;
	int crop_axis;    /* 0: the offset is the left column; 1: the top row */
	int crop_choices; /* offsets 0 .. crop_choices - 1: torch.randint's high */
} image_cc12m_geom;

/* 1 with *g filled, or 0 when the image is to be skipped (a side under n). */
int image_cc12m_geom_of(int w, int h, int n, image_cc12m_geom *g);

/* _process_cc12m_image(im, n) with the crop at offset (torchtitan draws it
 * with torch.randint(0, crop_choices)).  out: (3, n, n) float32 in [-1, 1].
 * Returns 1 when out is written, 0 when the image is skipped (too small), -1
 * on error (an offset out of range, memory). */
int image_cc12m(const image *im, int n, int offset, float *out, titan_err *err);
/* The same before the normalisation: out (3, n, n) uint8, the RGB planes
 * torchtitan's tensor is made from (out[i] maps to image_unit(out[i])). */
int image_cc12m_rgb(const image *im, int n, int offset, uint8_t *out, titan_err *err);

/* The random draws of one sample in torchtitan 0.3.0's FluxDataset.__iter__,
 * made on torch's CPU generator g: for an image _process_cc12m_image keeps,
 * torch.randint(0, crop_choices) for the crop (drawn even when there is one
 * choice: a square image draws a 0), then when dropout_prob > 0 one
 * torch.rand(1) for T5's prompt and one for CLIP's, each dropped when the
 * draw is below dropout_prob.  An image it skips (a side under n) draws
 * nothing.
 *
 * The sequence a run makes (tests/image/test_wds holds it to 0.3.0's
 * FluxDataLoader over the cc12m test shard, scripts/flux_draws_golden.py):
 * torch_rng_seed(g, debug.seed) as set_determinism does on one rank (on
 * several, the seed plus the rank's place on the fsdp/dp_replicate mesh);
 * the DataLoader iterator's base seed, one torch_rng_int64(g), when training
 * starts (num_workers 0; the dataset re-loops inside that iterator, with no
 * new base seed); then this per sample in the shard's order.  On a CPU
 * device each step's draws come between batches: randn_like of the
 * posterior's mean, then of the latents, then rand(batch); on a GPU those
 * use the CUDA generator and g sees the loader's draws alone. */
typedef struct image_cc12m_draws {
	int offset;       /* the crop offset along the long side */
	int t5_dropped;   /* the T5 encoding is the empty caption's */
	int clip_dropped; /* the CLIP encoding is the empty caption's */
} image_cc12m_draws;

/* 1 with *d drawn for a w x h image at output size n; 0 for an image that
 * is skipped (nothing drawn, *d zeroed). */
int image_cc12m_draw(torch_rng *g, int w, int h, int n, double dropout_prob,
		     image_cc12m_draws *d);

/* Writing (the Flux sampler's images, TensorBoard's image summaries). */

/* An 8-bit PNG of px (h, w, channels): channels 1 (L), 2 (LA), 3 (RGB) or 4
 * (RGBA), through libpng at zlib level 6 (PIL's default compress_level); exif
 * NULL, or a TIFF block without the "Exif\0\0" prefix stored as an eXIf
 * chunk, as PIL's save(exif=...) does.  The pixels decode to px; the bytes
 * need not be PIL's.  *out is allocated (the caller frees it), *out_n its
 * size. */
int image_png_encode(const uint8_t *px, int w, int h, int channels, const uint8_t *exif,
		     size_t exif_n, uint8_t **out, size_t *out_n, titan_err *err);
/* The same into path: written under a temporary name, fsynced, renamed. */
int image_png_write(const char *path, const uint8_t *px, int w, int h, int channels,
		    const uint8_t *exif, size_t exif_n, titan_err *err);
/* The EXIF block PIL's Image.Exif().tobytes() makes of ASCII tags (n of
 * them, 1 .. 64, each tag once): "MM" big-endian TIFF, IFD0 at offset 8 with
 * the entries sorted by tag, type ASCII with the count counting the NUL, the
 * values longer than 4 bytes after the IFD in entry order, each padded to an
 * even length.  A value is stored as PIL's write_string does: ASCII, each
 * other UTF-8 character one '?'.  *out allocated. */
int image_exif_ascii(const uint16_t *tags, const char *const *values, int n, uint8_t **out,
		     size_t *out_n, titan_err *err);

#endif
