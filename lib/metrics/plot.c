/* Loss curves from metrics.jsonl: a terminal plot and a PNG image (written
 * here: stored deflate blocks need no compression library). */
#include "metrics/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"

static int push(metrics_curve *c, int64_t step, double v)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 256;
		int64_t *s = realloc(c->step, cap * sizeof *s);
		if (s == NULL)
			return -1;
		c->step = s;
		double *w = realloc(c->value, cap * sizeof *w);
		if (w == NULL)
			return -1;
		c->value = w;
		c->cap = cap;
	}
	/* A resumed run appends: a step seen again replaces the later records. */
	while (c->n > 0 && c->step[c->n - 1] >= step)
		c->n--;
	c->step[c->n] = step;
	c->value[c->n] = v;
	c->n++;
	return 0;
}

static int field(const char *line, const char *key, double *v)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(line, pat);
	if (p == NULL)
		return -1;
	char *end;
	*v = strtod(p + strlen(pat), &end);
	return end == p + strlen(pat) ? -1 : 0;
}

void metrics_curve_free(metrics_curve *c)
{
	free(c->step);
	free(c->value);
	memset(c, 0, sizeof *c);
}

int metrics_read_curves(const char *path, metrics_curve *train, metrics_curve *val,
			titan_err *err)
{
	memset(train, 0, sizeof *train);
	memset(val, 0, sizeof *val);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return err_errno(err, "%s", path);
	char line[4096];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
		lineno++;
		double step, v;
		if (field(line, "step", &step) != 0) {
			rc = err_set(err, "%s:%d: no \"step\" (not a titan-train metrics file?)", path,
				     lineno);
			break;
		}
		if (field(line, "loss", &v) == 0 && push(train, (int64_t)step, v) != 0)
			rc = err_set(err, "out of memory");
		else if (field(line, "validation_loss", &v) == 0 && push(val, (int64_t)step, v) != 0)
			rc = err_set(err, "out of memory");
	}
	fclose(f);
	if (rc == 0 && train->n == 0)
		rc = err_set(err, "%s: no training steps recorded", path);
	if (rc != 0) {
		metrics_curve_free(train);
		metrics_curve_free(val);
	}
	return rc;
}

static void range(const metrics_curve *a, const metrics_curve *b, double *lo, double *hi,
		  int64_t *smax)
{
	*lo = INFINITY;
	*hi = -INFINITY;
	*smax = 1;
	const metrics_curve *cs[2] = {a, b};
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < cs[k]->n; i++) {
			double v = cs[k]->value[i];
			if (isfinite(v)) {
				*lo = fmin(*lo, v);
				*hi = fmax(*hi, v);
			}
			if (cs[k]->step[i] > *smax)
				*smax = cs[k]->step[i];
		}
	if (!(*hi > *lo)) {
		*lo -= 0.5;
		*hi += 0.5;
	}
}

void metrics_plot_ascii(FILE *out, const metrics_curve *train, const metrics_curve *val, int width,
			int height)
{
	double lo, hi;
	int64_t smax;
	range(train, val, &lo, &hi, &smax);
	char *grid = malloc((size_t)width * (size_t)height);
	if (grid == NULL)
		return;
	memset(grid, ' ', (size_t)width * (size_t)height);
	const metrics_curve *cs[2] = {train, val};
	const char mark[2] = {'*', 'o'};
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < cs[k]->n; i++) {
			if (!isfinite(cs[k]->value[i]))
				continue;
			int x = (int)((double)(cs[k]->step[i] - 1) / (double)(smax > 1 ? smax - 1 : 1) * (width - 1));
			int y = (int)lround((hi - cs[k]->value[i]) / (hi - lo) * (height - 1));
			grid[(size_t)y * (size_t)width + (size_t)x] = mark[k];
		}
	fprintf(out, "loss (* train, o validation)\n");
	for (int y = 0; y < height; y++) {
		double v = hi - (hi - lo) * y / (height - 1);
		if (y == 0 || y == height - 1 || y == height / 2)
			fprintf(out, "%8.3f |", v);
		else
			fprintf(out, "         |");
		fprintf(out, "%.*s\n", width, grid + (size_t)y * (size_t)width);
	}
	fprintf(out, "         +");
	for (int x = 0; x < width; x++)
		fputc('-', out);
	fprintf(out, "\n          1%*lld  step\n", width - 1, (long long)smax);
	free(grid);
}

/* PNG --------------------------------------------------------------------- */

static uint32_t crc_table[256];

static uint32_t crc32_png(uint32_t crc, const uint8_t *p, size_t n)
{
	if (crc_table[1] == 0)
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
			crc_table[i] = c;
		}
	crc = ~crc;
	for (size_t i = 0; i < n; i++)
		crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

static void be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static int chunk(afile *af, const char *type, const uint8_t *data, size_t n, titan_err *err)
{
	uint8_t head[8];
	be32(head, (uint32_t)n);
	memcpy(head + 4, type, 4);
	uint32_t crc = crc32_png(crc32_png(0, head + 4, 4), data, n);
	uint8_t tail[4];
	be32(tail, crc);
	return afile_write(af, head, 8, err) || afile_write(af, data, n, err) ||
	       afile_write(af, tail, 4, err) ? -1 : 0;
}

/* zlib stream of stored (uncompressed) deflate blocks. */
static uint8_t *zlib_stored(const uint8_t *raw, size_t n, size_t *out_n)
{
	size_t blocks = n / 65535 + 1;
	uint8_t *z = malloc(2 + n + 5 * blocks + 4);
	if (z == NULL)
		return NULL;
	size_t k = 0;
	z[k++] = 0x78;
	z[k++] = 0x01;
	size_t off = 0;
	do {
		size_t len = n - off > 65535 ? 65535 : n - off;
		z[k++] = off + len == n; /* BFINAL, BTYPE 00 */
		z[k++] = (uint8_t)len;
		z[k++] = (uint8_t)(len >> 8);
		z[k++] = (uint8_t)~len;
		z[k++] = (uint8_t)(~len >> 8);
		memcpy(z + k, raw + off, len);
		k += len;
		off += len;
	} while (off < n);
	uint32_t a = 1, b = 0;
	for (size_t i = 0; i < n; i++) {
		a = (a + raw[i]) % 65521;
		b = (b + a) % 65521;
	}
	be32(z + k, b << 16 | a);
	*out_n = k + 4;
	return z;
}

typedef struct canvas {
	int w, h;
	uint8_t *px; /* (h, w, 3) */
} canvas;

static void dot(canvas *c, int x, int y, const uint8_t rgb[3])
{
	if (x < 0 || y < 0 || x >= c->w || y >= c->h)
		return;
	memcpy(c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3, rgb, 3);
}

static void line(canvas *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3], int thick)
{
	int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
	int e = dx + dy;
	for (;;) {
		for (int t = 0; t < thick; t++)
			dot(c, x0, y0 + t, rgb);
		if (x0 == x1 && y0 == y1)
			break;
		int e2 = 2 * e;
		if (e2 >= dy) {
			e += dy;
			x0 += sx;
		}
		if (e2 <= dx) {
			e += dx;
			y0 += sy;
		}
	}
}

/* A 3x5 font for the axis numbers and labels. */
static const char *glyph(char ch)
{
	static const struct {
		char c;
		const char *rows;
	} font[] = {
		{'0', "111101101101111"}, {'1', "010110010010111"}, {'2', "111001111100111"},
		{'3', "111001111001111"}, {'4', "101101111001001"}, {'5', "111100111001111"},
		{'6', "111100111101111"}, {'7', "111001001001001"}, {'8', "111101111101111"},
		{'9', "111101111001111"}, {'.', "000000000000010"}, {'-', "000000111000000"},
		{'l', "110010010010111"}, {'o', "000111101101111"}, {'s', "000111110011111"},
		{'t', "010111010010011"}, {'e', "000111111100111"}, {'p', "000111101111100"},
		{'r', "000111100100100"}, {'a', "000011101101011"}, {'i', "010000010010010"},
		{'n', "000110101101101"}, {'v', "000101101101010"}, {'d', "001001111101111"},
		{' ', "000000000000000"}, {'(', "010100100100010"}, {')', "010001001001010"},
	};
	for (size_t i = 0; i < sizeof font / sizeof font[0]; i++)
		if (font[i].c == ch)
			return font[i].rows;
	return "111111111111111";
}

static void text(canvas *c, int x, int y, const char *s, int scale, const uint8_t rgb[3])
{
	for (; *s; s++, x += 4 * scale) {
		const char *g = glyph(*s);
		for (int r = 0; r < 5; r++)
			for (int k = 0; k < 3; k++)
				if (g[r * 3 + k] == '1')
					for (int u = 0; u < scale; u++)
						for (int v = 0; v < scale; v++)
							dot(c, x + k * scale + u, y + r * scale + v, rgb);
	}
}

static int write_png(const char *path, const canvas *c, titan_err *err)
{
	size_t rowb = 1 + (size_t)c->w * 3;
	uint8_t *raw = malloc(rowb * (size_t)c->h);
	if (raw == NULL)
		return err_set(err, "out of memory");
	for (int y = 0; y < c->h; y++) {
		raw[(size_t)y * rowb] = 0; /* filter: none */
		memcpy(raw + (size_t)y * rowb + 1, c->px + (size_t)y * (size_t)c->w * 3, (size_t)c->w * 3);
	}
	size_t zn;
	uint8_t *z = zlib_stored(raw, rowb * (size_t)c->h, &zn);
	free(raw);
	if (z == NULL)
		return err_set(err, "out of memory");
	uint8_t ihdr[13];
	be32(ihdr, (uint32_t)c->w);
	be32(ihdr + 4, (uint32_t)c->h);
	ihdr[8] = 8; /* bit depth */
	ihdr[9] = 2; /* RGB */
	ihdr[10] = ihdr[11] = ihdr[12] = 0;
	static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	afile af;
	int rc = afile_open(&af, path, err);
	if (rc == 0) {
		rc = afile_write(&af, sig, 8, err) || chunk(&af, "IHDR", ihdr, 13, err) ||
		     chunk(&af, "IDAT", z, zn, err) || chunk(&af, "IEND", NULL, 0, err) ? -1 : 0;
		if (rc == 0)
			rc = afile_commit(&af, err);
		else
			afile_abort(&af);
	}
	free(z);
	return rc;
}

int metrics_plot_png(const char *path, const metrics_curve *train, const metrics_curve *val,
		     titan_err *err)
{
	canvas c = {.w = 800, .h = 500};
	c.px = malloc((size_t)c.w * (size_t)c.h * 3);
	if (c.px == NULL)
		return err_set(err, "out of memory");
	memset(c.px, 255, (size_t)c.w * (size_t)c.h * 3);
	static const uint8_t black[3] = {0, 0, 0}, grey[3] = {220, 220, 220},
			     blue[3] = {31, 119, 180}, red[3] = {214, 39, 40};
	int x0 = 70, x1 = c.w - 20, y0 = 20, y1 = c.h - 50;
	double lo, hi;
	int64_t smax;
	range(train, val, &lo, &hi, &smax);
	char buf[32];
	for (int k = 0; k <= 4; k++) {
		int y = y0 + (y1 - y0) * k / 4;
		line(&c, x0, y, x1, y, grey, 1);
		snprintf(buf, sizeof buf, "%.2f", hi - (hi - lo) * k / 4);
		text(&c, 8, y - 5, buf, 2, black);
		int x = x0 + (x1 - x0) * k / 4;
		line(&c, x, y0, x, y1, grey, 1);
		snprintf(buf, sizeof buf, "%lld", (long long)(1 + (smax - 1) * k / 4));
		text(&c, x - 8, y1 + 10, buf, 2, black);
	}
	line(&c, x0, y1, x1, y1, black, 2);
	line(&c, x0, y0, x0, y1, black, 1);
	text(&c, (x0 + x1) / 2 - 16, c.h - 18, "step", 2, black);
	text(&c, x1 - 150, y0 + 8, "train loss", 2, blue);
	text(&c, x1 - 150, y0 + 26, "val loss", 2, red);
	const metrics_curve *cs[2] = {train, val};
	const uint8_t *col[2] = {blue, red};
	for (int k = 0; k < 2; k++) {
		int px = -1, py = -1;
		for (size_t i = 0; i < cs[k]->n; i++) {
			if (!isfinite(cs[k]->value[i]))
				continue;
			int x = x0 + (int)((double)(cs[k]->step[i] - 1) / (double)(smax > 1 ? smax - 1 : 1) * (x1 - x0));
			int y = y0 + (int)lround((hi - cs[k]->value[i]) / (hi - lo) * (y1 - y0));
			if (px >= 0)
				line(&c, px, py, x, y, col[k], 2);
			if (k == 1)
				for (int u = -3; u <= 3; u++)
					line(&c, x - 3, y + u, x + 3, y + u, col[k], 1);
			px = x;
			py = y;
		}
	}
	int rc = write_png(path, &c, err);
	free(c.px);
	return rc;
}
