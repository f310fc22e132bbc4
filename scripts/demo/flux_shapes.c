/* flux_shapes: the image-caption data of make demo-flux, a webdataset tar in
 * cc12m-wds's layout (what titan's Flux input path and torchtitan's
 * _cc12m_wds_data_processor read).
 *
 *   flux_shapes [-n N] [--size PX] [--seed S] [--ext jpg|png] [--centred]
 *               [--in-order] -o OUT.tar
 *
 * Each sample is one coloured shape (circle, square or triangle; five colours;
 * small or large; at one of nine places, jittered) on a plain background,
 * with the caption that says so ("a large red circle at the top left").
 * --centred draws every shape large (the middle of the large radii) in the
 * centre, unjittered, and captions only its colour and shape ("a red
 * circle"): 15 kinds of one picture each instead of 270, few enough for the
 * demo's minutes of training.
 * --in-order takes the shape and colour from the index instead, the 15 kinds
 * in turn (a shape every five, a colour each), the demo's prompts' grid.
 *   KEY.jpg   the image, PNG bytes: lossless, so the demo's autoencoder
 *             learns clean edges.  The field is "jpg" because torchtitan's
 *             loader reads sample["jpg"]; PIL and lib/image sniff the format
 *             from the bytes.  --ext png names it "png" instead.
 *   KEY.txt   the caption (UTF-8, no newline)
 *   KEY.json  what was drawn: shape, colour, size, place, centre, radius
 * Sample i depends on (seed, i) alone: the first N of a larger run are the
 * same images.  Edges are anti-aliased by 4 x 4 supersampling.  The tar is
 * reproducible byte for byte (mtime 0, no owner names) and written to a
 * temporary name, then renamed. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "core/err.h"
#include "image/image.h"

typedef struct rng {
	uint64_t s;
} rng;

static uint64_t next_u64(rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform(rng *r)
{
	return (double)(next_u64(r) >> 11) * 0x1.0p-53;
}

static int pick(rng *r, int n)
{
	return (int)(next_u64(r) % (uint64_t)n);
}

static const char *const shapes[] = {"circle", "square", "triangle"};
static const struct {
	const char *name;
	uint8_t rgb[3];
} colours[] = {
	{"red", {220, 40, 40}},    {"green", {40, 170, 70}},   {"blue", {40, 80, 220}},
	{"yellow", {240, 200, 30}}, {"purple", {140, 60, 190}},
};
/* Nine places: the centre's fraction of the side, and the caption's words. */
static const double place_frac[3] = {0.22, 0.5, 0.78};
static const char *const places[9] = {
	"at the top left",    "at the top",    "at the top right",
	"on the left",        "in the centre", "on the right",
	"at the bottom left", "at the bottom", "at the bottom right",
};
static const uint8_t background[3] = {245, 243, 235};

#define N_COLOURS ((int)(sizeof colours / sizeof *colours))

#define CENTRE 4 /* places[4] */

typedef struct shape {
	int kind, colour, large, place;
	double cx, cy, r; /* pixels */
} shape;

/* What the options override, after the draws: without them the samples are
 * as they were before the options. */
typedef struct variety {
	int centred, in_order;
} variety;

static shape draw_shape(uint64_t seed, uint64_t index, int size, variety v)
{
	rng r = {seed ^ (index + 1) * 0xD1B54A32D192ED03ull};
	next_u64(&r);
	shape s;
	s.kind = pick(&r, 3);
	s.colour = pick(&r, N_COLOURS);
	s.large = pick(&r, 2);
	s.place = pick(&r, 9);
	double jitter = 0.04 * size;
	s.cx = place_frac[s.place % 3] * size + (uniform(&r) * 2 - 1) * jitter;
	s.cy = place_frac[s.place / 3] * size + (uniform(&r) * 2 - 1) * jitter;
	s.r = size * (s.large ? 0.16 + 0.03 * uniform(&r) : 0.09 + 0.02 * uniform(&r));
	if (v.in_order) {
		s.kind = (int)(index / N_COLOURS % 3);
		s.colour = (int)(index % N_COLOURS);
	}
	if (v.centred) { /* one picture a kind: the fewer the demo has to learn */
		s.large = 1;
		s.place = CENTRE;
		s.cx = s.cy = 0.5 * size;
		s.r = 0.175 * size;
	}
	return s;
}

/* Whether point (x, y) is inside s.  Triangles point up, their centroid at
 * the centre, circumradius 1.2 r (so their area is near the circle's). */
static int inside(const shape *s, double x, double y)
{
	double dx = x - s->cx, dy = y - s->cy;
	switch (s->kind) {
	case 0:
		return dx * dx + dy * dy <= s->r * s->r;
	case 1:
		return fabs(dx) <= 0.9 * s->r && fabs(dy) <= 0.9 * s->r;
	default: {
		double R = 1.2 * s->r, half = R * sqrt(3.0) / 2, top = -R, base = R / 2;
		if (dy < top || dy > base)
			return 0;
		return fabs(dx) <= half * (dy - top) / (base - top);
	}
	}
}

/* rgb (size, size, 3) */
static void render(const shape *s, int size, uint8_t *rgb)
{
	const uint8_t *fg = colours[s->colour].rgb;
	for (int y = 0; y < size; y++)
		for (int x = 0; x < size; x++) {
			int hits = 0;
			for (int sy = 0; sy < 4; sy++)
				for (int sx = 0; sx < 4; sx++)
					hits += inside(s, x + (sx + 0.5) / 4, y + (sy + 0.5) / 4);
			uint8_t *p = rgb + ((size_t)y * size + x) * 3;
			for (int c = 0; c < 3; c++)
				p[c] = (uint8_t)((fg[c] * hits + background[c] * (16 - hits) + 8) / 16);
		}
}

static int caption(const shape *s, int centred, char *buf, size_t n)
{
	if (centred)
		return snprintf(buf, n, "a %s %s", colours[s->colour].name, shapes[s->kind]);
	return snprintf(buf, n, "a %s %s %s %s", s->large ? "large" : "small",
			colours[s->colour].name, shapes[s->kind], places[s->place]);
}

static int describe(const shape *s, const char *cap, char *buf, size_t n)
{
	return snprintf(buf, n,
			"{\"caption\": \"%s\", \"shape\": \"%s\", \"colour\": \"%s\", "
			"\"size\": \"%s\", \"place\": \"%s\", \"cx\": %.2f, \"cy\": %.2f, "
			"\"r\": %.2f}",
			cap, shapes[s->kind], colours[s->colour].name, s->large ? "large" : "small",
			places[s->place], s->cx, s->cy, s->r);
}

typedef struct sink {
	afile af;
	titan_err err;
	int failed;
} sink;

static la_ssize_t sink_write(struct archive *a, void *ctx, const void *buf, size_t n)
{
	(void)a;
	sink *k = ctx;
	if (afile_write(&k->af, buf, n, &k->err) != 0) {
		k->failed = 1;
		return -1;
	}
	return (la_ssize_t)n;
}

static int add_member(struct archive *a, const char *name, const void *data, size_t n,
		      titan_err *err)
{
	struct archive_entry *e = archive_entry_new();
	if (e == NULL)
		return err_set(err, "out of memory");
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, (la_int64_t)n);
	archive_entry_set_mtime(e, 0, 0);
	int rc = archive_write_header(a, e) != ARCHIVE_OK ||
			 archive_write_data(a, data, n) != (la_ssize_t)n;
	archive_entry_free(e);
	return rc ? err_set(err, "%s: %s", name, archive_error_string(a)) : 0;
}

static int sample(struct archive *a, uint64_t seed, uint64_t i, int size, variety v,
		  const char *ext, uint8_t *rgb, titan_err *err)
{
	shape s = draw_shape(seed, i, size, v);
	render(&s, size, rgb);
	char cap[128], json[512], name[64];
	caption(&s, v.centred, cap, sizeof cap);
	describe(&s, cap, json, sizeof json);
	uint8_t *png;
	size_t png_n;
	if (image_png_encode(rgb, size, size, 3, NULL, 0, &png, &png_n, err) != 0)
		return -1;
	snprintf(name, sizeof name, "%09llu.%s", (unsigned long long)i, ext);
	int rc = add_member(a, name, png, png_n, err);
	free(png);
	snprintf(name, sizeof name, "%09llu.txt", (unsigned long long)i);
	if (rc == 0)
		rc = add_member(a, name, cap, strlen(cap), err);
	snprintf(name, sizeof name, "%09llu.json", (unsigned long long)i);
	if (rc == 0)
		rc = add_member(a, name, json, strlen(json), err);
	return rc;
}

static int write_tar(const char *path, uint64_t n, int size, uint64_t seed, variety v,
		     const char *ext, titan_err *err)
{
	uint8_t *rgb = malloc((size_t)size * size * 3); /* (size, size, 3) */
	struct archive *a = archive_write_new();
	sink k = {.failed = 0};
	if (rgb == NULL || a == NULL) {
		free(rgb);
		archive_write_free(a);
		return err_set(err, "out of memory");
	}
	if (afile_open(&k.af, path, err) != 0) {
		free(rgb);
		archive_write_free(a);
		return -1;
	}
	int rc = archive_write_set_format_ustar(a) != ARCHIVE_OK ||
			 archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
			 archive_write_open2(a, &k, NULL, sink_write, NULL, NULL) != ARCHIVE_OK
		 ? err_set(err, "%s: %s", path, archive_error_string(a))
		 : 0;
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		rc = sample(a, seed, i, size, v, ext, rgb, err);
	if (rc == 0 && archive_write_close(a) != ARCHIVE_OK)
		rc = err_set(err, "%s: %s", path, archive_error_string(a));
	if (k.failed && rc != 0)
		*err = k.err;
	archive_write_free(a);
	free(rgb);
	if (rc != 0) {
		afile_abort(&k.af);
		return -1;
	}
	return afile_commit(&k.af, err);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: flux_shapes [-n N] [--size PX] [--seed S] [--ext jpg|png] [--centred]\n"
		   "                   [--in-order] -o OUT.tar\n"
		   "  coloured shapes with their captions, as a cc12m-style webdataset tar\n"
		   "  -n N        samples (256)\n"
		   "  --size PX   image side (64; 16 to 1024)\n"
		   "  --seed S    (0)\n"
		   "  --ext E     the image field's name (jpg, as cc12m; the bytes are PNG)\n"
		   "  --centred   large shapes in the centre, captioned \"a red circle\"\n"
		   "  --in-order  sample i: shape i / 5 mod 3, colour i mod 5\n");
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || *s == '-')
		return -1;
	*v = x;
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 256, size = 64, seed = 0;
	const char *out = NULL, *ext = "jpg";
	variety var = {0, 0};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return TITAN_EXIT_OK;
		}
		if (strcmp(a, "--centred") == 0) { /* the flags take no value */
			var.centred = 1;
			continue;
		}
		if (strcmp(a, "--in-order") == 0) {
			var.in_order = 1;
			continue;
		}
		int bad = v == NULL;
		if (!bad && strcmp(a, "-n") == 0)
			bad = parse_u64(v, &n) != 0 || n == 0;
		else if (!bad && strcmp(a, "--size") == 0)
			bad = parse_u64(v, &size) != 0 || size < 16 || size > 1024;
		else if (!bad && strcmp(a, "--seed") == 0)
			bad = parse_u64(v, &seed) != 0;
		else if (!bad && strcmp(a, "--ext") == 0) {
			ext = v;
			bad = strcmp(v, "jpg") != 0 && strcmp(v, "png") != 0;
		}
		else if (!bad && strcmp(a, "-o") == 0)
			out = v;
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "flux_shapes: bad argument %s%s%s\n", a, v ? " " : "",
				v ? v : "");
			usage(stderr);
			return TITAN_EXIT_USAGE;
		}
		i++;
	}
	if (out == NULL) {
		usage(stderr);
		return TITAN_EXIT_USAGE;
	}
	titan_err err = {{0}};
	if (write_tar(out, n, (int)size, seed, var, ext, &err) != 0) {
		fprintf(stderr, "flux_shapes: %s\n", err.msg);
		return TITAN_EXIT_FAIL;
	}
	return TITAN_EXIT_OK;
}
