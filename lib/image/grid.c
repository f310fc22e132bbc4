/* grid.c: images side by side in one, what the demos show their samples in. */
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

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
