/* encode.h: titan-encode's pieces (tools/encode): where samples come from. */
#ifndef TITAN_TOOLS_ENCODE_H
#define TITAN_TOOLS_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* One sample as the sources give it; each buffer owned by the slot. */
typedef struct slot {
	char *key;
	uint8_t *image;    /* NULL: the sample has none */
	size_t image_bytes;
	uint8_t *caption;  /* NULL: none */
	size_t caption_bytes;
	uint64_t index;    /* position in the input, over every file */
} slot;

void slot_clear(slot *s);

enum { SRC_WDS, SRC_COCO };

typedef struct source source;

/* Open path ("-": standard input) as a webdataset tar or a COCO parquet file.
 * Member-level refusals (wds) are reported through refused(ctx, message). */
source *source_open(const char *path, int kind, void (*refused)(void *ctx, const char *msg),
		    void *ctx, titan_err *err);
/* The next sample into *s (cleared first): 1, 0 at the end, -1 on an error
 * that ends the input. */
int source_next(source *src, slot *s, titan_err *err);
void source_close(source *src);

#endif
