/* source.c: titan-encode's inputs as image-caption samples: webdataset tars
 * (lib/wds, lenient) and COCO's parquet files. */
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "wds/wds.h"

struct source {
	int kind;
	wds *w;
	wds_sample ws;
};

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
	free(src);
}
