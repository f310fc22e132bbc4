/* source.c: titan-encode's inputs as image-caption samples: webdataset tars
 * (lib/wds, lenient) and the COCO layout torchtitan's Flux validation reads
 * (parquet rows of an "image" and a "caption", through lib/parquet). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "parquet/parquet.h"
#include "wds/wds.h"

enum { COL_IMAGE, COL_CAPTION, COL_KEY, N_COLS };

struct source {
	int kind;
	wds *w;
	wds_sample ws;
	/* COCO */
	pq_file *pq;
	char *name;
	int col[N_COLS];        /* -1: the file has none */
	int rg;                 /* the row group being read */
	int64_t row, base;      /* the row in it; rows of the groups before */
	pq_values v[N_COLS];
};

/* The columns datasets writes for an Image feature, a string or a list of
 * strings (pyarrow's and older list layouts), and a key, in preference order. */
static const char *const col_names[N_COLS][7] = {
	{"image.bytes", "image", NULL},
	{"caption.list.element", "caption.list.item", "caption.element", "caption.array",
	 "caption.bag.array_element", "caption", NULL},
	{"image_id", "coco_file_name", "id", "image.path", "file_name", NULL},
};

static source *coco_open(source *src, const char *path, titan_err *err)
{
	if (strcmp(path, "-") == 0) {
		err_set(err, "--format coco reads parquet files, which cannot come from standard "
			"input (their index is at their end): name them");
		return NULL;
	}
	if ((src->pq = pq_open(path, err)) == NULL || (src->name = strdup(path)) == NULL)
		return NULL;
	for (int c = 0; c < N_COLS; c++) {
		src->col[c] = -1;
		for (int k = 0; col_names[c][k] && src->col[c] < 0; k++)
			src->col[c] = pq_column(src->pq, col_names[c][k]);
	}
	if (src->col[COL_IMAGE] < 0 || src->col[COL_CAPTION] < 0) {
		err_set(err, "%s: no %s column (a COCO file has an \"image\" and a \"caption\")",
			path, src->col[COL_IMAGE] < 0 ? "image" : "caption");
		return NULL;
	}
	src->rg = -1;
	return src;
}

static void coco_free_group(source *src)
{
	for (int c = 0; c < N_COLS; c++)
		pq_values_free(&src->v[c]);
}

static uint8_t *dup_value(const pq_values *v, int64_t r, size_t *n)
{
	uint8_t *p = malloc(v->len[r] + 1);
	if (p != NULL) {
		memcpy(p, v->buf + v->off[r], v->len[r]);
		p[v->len[r]] = 0;
		*n = v->len[r];
	}
	return p;
}

static int coco_next(source *src, slot *s, titan_err *err)
{
	while (src->rg < 0 || src->row >= src->v[COL_IMAGE].n) {
		if (src->rg >= 0)
			src->base += src->v[COL_IMAGE].n;
		coco_free_group(src);
		if (++src->rg >= pq_num_row_groups(src->pq))
			return 0;
		for (int c = 0; c < N_COLS; c++)
			if (src->col[c] >= 0 && pq_read(src->pq, src->rg, src->col[c], &src->v[c], err))
				return -1;
		src->row = 0;
	}
	int64_t r = src->row++;
	const pq_values *im = &src->v[COL_IMAGE], *cap = &src->v[COL_CAPTION], *k = &src->v[COL_KEY];
	size_t n;
	if (src->col[COL_KEY] >= 0 && k->present[r] && k->len[r] > 0) {
		s->key = (char *)dup_value(k, r, &n);
	} else { /* the file's base name and the row */
		const char *b = strrchr(src->name, '/');
		if (asprintf(&s->key, "%s:%lld", b ? b + 1 : src->name, (long long)(src->base + r)) < 0)
			s->key = NULL;
	}
	if (im->present[r])
		s->image = dup_value(im, r, &s->image_bytes);
	if (cap->present[r])
		s->caption = dup_value(cap, r, &s->caption_bytes);
	if (s->key == NULL || (im->present[r] && !s->image) || (cap->present[r] && !s->caption))
		return err_set(err, "out of memory");
	return 1;
}

void slot_clear(slot *s)
{
	free(s->key);
	free(s->image);
	free(s->caption);
	memset(s, 0, sizeof *s);
}

source *source_open(const char *path, int kind, void (*refused)(void *ctx, const char *msg),
		    void *ctx, titan_err *err)
{
	source *src = calloc(1, sizeof *src);
	if (src == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	src->kind = kind;
	if (kind == SRC_COCO) {
		if (coco_open(src, path, err) == NULL) {
			source_close(src);
			return NULL;
		}
		return src;
	}
	if (wds_open(&src->w, path, NULL, err) != 0) {
		free(src);
		return NULL;
	}
	wds_on_refused(src->w, refused, ctx);
	return src;
}

/* The field's bytes, moved out of the sample. */
static uint8_t *take(wds_field *f, size_t *n)
{
	uint8_t *p = f->data;
	*n = f->size;
	f->data = NULL;
	return p;
}

/* The image field: webdataset's image extensions, jpg first (cc12m's). */
static wds_field *image_field(wds_sample *s)
{
	static const char *const exts[] = {"jpg", "jpeg", "png", "webp"};
	for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
		const wds_field *f = wds_field_get(s, exts[i]);
		if (f != NULL)
			return (wds_field *)f;
	}
	return NULL;
}

int source_next(source *src, slot *s, titan_err *err)
{
	slot_clear(s);
	if (src->kind == SRC_COCO)
		return coco_next(src, s, err);
	int r = wds_next(src->w, &src->ws, err);
	if (r <= 0)
		return r;
	wds_sample *ws = &src->ws;
	s->key = ws->key;
	ws->key = NULL;
	wds_field *img = image_field(ws), *txt = (wds_field *)wds_field_get(ws, "txt");
	if (img)
		s->image = take(img, &s->image_bytes);
	if (txt)
		s->caption = take(txt, &s->caption_bytes);
	return 1;
}

void source_close(source *src)
{
	if (src == NULL)
		return;
	wds_sample_free(&src->ws);
	wds_close(src->w);
	coco_free_group(src);
	pq_close(src->pq);
	free(src->name);
	free(src);
}
