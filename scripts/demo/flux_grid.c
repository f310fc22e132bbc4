/* flux_grid: PNGs of one size side by side in one PNG (image_grid), what
 * make demo-flux shows its samples in.
 *
 *   flux_grid [--cols C] [--pad P] -o OUT.png IN.png...
 *
 * Inputs are decoded by lib/image (PNG, JPEG or WebP, converted to RGB) and
 * must share one size; the grid is written to a temporary name, fsynced and
 * renamed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/mfile.h"
#include "image/image.h"

static const uint8_t pad_colour[3] = {255, 255, 255};

/* The RGB pixels (w, h, 3) of the image file path, malloc'd. */
static uint8_t *load_rgb(const char *path, int *w, int *h, titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err) != 0)
		return NULL;
	image im;
	int rc = image_decode(&im, m.data, m.size, NULL, err);
	mfile_close(&m);
	if (rc != 0) {
		err_set(err, "%s: %s", path, err->msg);
		return NULL;
	}
	uint8_t *rgb = malloc((size_t)im.w * im.h * 3);
	if (rgb != NULL)
		image_to_rgb(&im, rgb);
	else
		err_set(err, "%s: out of memory", path);
	*w = im.w;
	*h = im.h;
	image_free(&im);
	return rgb;
}

static int grid(char **in, int n, int cols, int pad, const char *out, titan_err *err)
{
	uint8_t **imgs = calloc((size_t)n, sizeof *imgs);
	if (imgs == NULL)
		return err_set(err, "out of memory");
	int w0 = 0, h0 = 0, rc = 0;
	for (int i = 0; rc == 0 && i < n; i++) {
		int w, h;
		imgs[i] = load_rgb(in[i], &w, &h, err);
		if (imgs[i] == NULL)
			rc = -1;
		else if (i == 0)
			w0 = w, h0 = h;
		else if (w != w0 || h != h0)
			rc = err_set(err, "%s: %dx%d, expected %dx%d as %s", in[i], w, h, w0, h0,
				     in[0]);
	}
	uint8_t *g = NULL;
	int gw, gh;
	if (rc == 0)
		rc = image_grid((const uint8_t *const *)imgs, n, w0, h0, cols, pad, pad_colour, &g,
				&gw, &gh, err);
	if (rc == 0)
		rc = image_png_write(out, g, gw, gh, 3, NULL, 0, err);
	free(g);
	for (int i = 0; i < n; i++)
		free(imgs[i]);
	free(imgs);
	return rc;
}

static int parse_int(const char *s, int lo, int hi, int *v)
{
	char *end;
	errno = 0;
	long x = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi)
		return -1;
	*v = (int)x;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: flux_grid [--cols C] [--pad P] -o OUT.png IN.png...\n"
		   "  images of one size in a grid: C per row (8), P pixels apart (2)\n");
}

int main(int argc, char **argv)
{
	int cols = 8, pad = 2, i = 1;
	const char *out = NULL;
	for (; i < argc && argv[i][0] == '-'; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return TITAN_EXIT_OK;
		}
		int bad = v == NULL;
		if (!bad && strcmp(a, "--cols") == 0)
			bad = parse_int(v, 1, 1024, &cols);
		else if (!bad && strcmp(a, "--pad") == 0)
			bad = parse_int(v, 0, 1024, &pad);
		else if (!bad && strcmp(a, "-o") == 0)
			out = v;
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "flux_grid: bad argument %s\n", a);
			usage(stderr);
			return TITAN_EXIT_USAGE;
		}
	}
	if (out == NULL || i >= argc) {
		usage(stderr);
		return TITAN_EXIT_USAGE;
	}
	titan_err err = {{0}};
	if (grid(argv + i, argc - i, cols, pad, out, &err) != 0) {
		fprintf(stderr, "flux_grid: %s\n", err.msg);
		return TITAN_EXIT_FAIL;
	}
	return TITAN_EXIT_OK;
}
