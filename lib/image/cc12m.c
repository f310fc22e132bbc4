/* cc12m.c: torchtitan's _process_cc12m_image (flux_datasets.py): skip an image
 * with a side under the output size, resize the short side to it, crop the
 * long one at an offset, convert("RGB"), then
 * torch.tensor(np_img).float() / 255.0 * 2.0 - 1.0 laid out (3, n, n). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_impl.h"

float image_unit(uint8_t v)
{
	/* three float32 operations, each rounded, as torch does them one by one */
	float x = (float)v / 255.0f;
	x = x * 2.0f;
	return x - 1.0f;
}

int image_cc12m_geom_of(int w, int h, int n, image_cc12m_geom *g)
{
	if (w < n || h < n)
		return 0;
	/* math.ceil(output_size / height * width): a double division, then a product */
	if (w >= h) {
		g->resized_w = (int)ceil((double)n / h * w);
		g->resized_h = n;
		g->crop_axis = 0;
		g->crop_choices = g->resized_w - n + 1;
	} else {
		g->resized_w = n;
		g->resized_h = (int)ceil((double)n / w * h);
		g->crop_axis = 1;
		g->crop_choices = g->resized_h - n + 1;
	}
	return 1;
}

void image_to_rgb(const image *im, uint8_t *rgb)
{
	size_t n = (size_t)im->w * im->h;
	const uint8_t *p = im->px;
	for (size_t i = 0; i < n; i++, rgb += 3) {
		switch (im->mode) {
		case IMAGE_1:
			rgb[0] = rgb[1] = rgb[2] = p[i] ? 255 : 0;
			break;
		case IMAGE_L:
			rgb[0] = rgb[1] = rgb[2] = p[i];
			break;
		case IMAGE_LA:
			rgb[0] = rgb[1] = rgb[2] = p[2 * i];
			break;
		case IMAGE_P:
			memcpy(rgb, im->palette + 3 * p[i], 3);
			break;
		case IMAGE_RGB:
			memcpy(rgb, p + 3 * i, 3);
			break;
		case IMAGE_RGBA:
			memcpy(rgb, p + 4 * i, 3);
			break;
		}
	}
}

int image_cc12m_rgb(const image *im, int n, int offset, uint8_t *out, titan_err *err)
{
	image_cc12m_geom g;
	if (n < 1)
		return err_set(err, "output size %d: must be positive", n);
	if (!image_cc12m_geom_of(im->w, im->h, n, &g))
		return 0;
	if (offset < 0 || offset >= g.crop_choices)
		return err_set(err, "crop offset %d outside 0..%d", offset, g.crop_choices - 1);
	image resized = {0}, crop = {0};
	if (image_resize(im, &resized, g.resized_w, g.resized_h, err) != 0)
		return -1;
	int rc = image_crop(&resized, &crop, g.crop_axis == 0 ? offset : 0,
			    g.crop_axis == 1 ? offset : 0, n, n, err);
	image_free(&resized);
	if (rc != 0)
		return -1;
	size_t plane = (size_t)n * n;
	uint8_t *rgb = malloc(plane * 3);
	if (rgb == NULL) {
		image_free(&crop);
		return err_set(err, "out of memory");
	}
	image_to_rgb(&crop, rgb);
	image_free(&crop);
	/* np.array(img).transpose((2, 0, 1)): interleaved to planar */
	for (size_t i = 0; i < plane; i++)
		for (int c = 0; c < 3; c++)
			out[(size_t)c * plane + i] = rgb[3 * i + (size_t)c];
	free(rgb);
	return 1;
}

int image_cc12m(const image *im, int n, int offset, float *out, titan_err *err)
{
	size_t len = n > 0 ? 3 * (size_t)n * (size_t)n : 1;
	uint8_t *px = malloc(len);
	if (px == NULL)
		return err_set(err, "out of memory");
	int rc = image_cc12m_rgb(im, n, offset, px, err);
	for (size_t i = 0; rc == 1 && i < len; i++)
		out[i] = image_unit(px[i]);
	free(px);
	return rc;
}

int image_cc12m_draw(torch_rng *g, int w, int h, int n, double dropout_prob,
		     image_cc12m_draws *d)
{
	image_cc12m_geom geom;
	memset(d, 0, sizeof *d);
	if (!image_cc12m_geom_of(w, h, n, &geom))
		return 0;
	int64_t off;
	if (torch_rng_randint(g, 0, geom.crop_choices, &off, 1, NULL) != 0)
		return 0; /* not reached: crop_choices >= 1 */
	d->offset = (int)off;
	if (dropout_prob > 0.0) {
		/* torch.rand(1).item() < dropout_prob: the float32 widened */
		float u;
		torch_rng_rand_f32(g, &u, 1);
		d->t5_dropped = (double)u < dropout_prob;
		torch_rng_rand_f32(g, &u, 1);
		d->clip_dropped = (double)u < dropout_prob;
	}
	return 1;
}
