/* wds.h: webdataset tar shards (pixparse/cc12m-wds as the Hub serves them:
 * NNN.jpg, NNN.txt, NNN.json per sample) read as the Hugging Face datasets
 * "webdataset" builder reads them, which is what torchtitan's Flux loader sees.
 *
 * Members are taken in archive order.  Skipped, as datasets' tar iterator
 * skips them: anything not a regular file (directories, links, devices), and
 * files whose base name starts with "." or "__".  A member's name splits as
 * webdataset's base_plus_ext does: the key is the name up to the first "."
 * of its base name (directories included), the field the rest ("jpg",
 * "txt", "seg.png"); a base name with no "." is skipped.  Consecutive members
 * of one key make a sample; a field twice in one sample is an error (datasets
 * raises).  Field bytes are as stored: "jpg" is not decoded here
 * (lib/image does it), "txt" is the caption's UTF-8.
 *
 * Refused with a message naming the member: a name with a ".." component, a
 * leading "/", or a control character; a member larger than
 * limits.max_member (checked from the header, before any allocation); more
 * than limits.max_fields fields in a sample; a truncated or corrupt archive.
 * The tar may be compressed (gzip, zstd, ...: libarchive's filters).  Tar
 * files back to back (`cat a.tar b.tar`, titan-hf-fetch --stdout) read as one
 * shard: the end-of-archive blocks between them are passed over.
 *
 * Lenient mode (wds_on_refused): the member-level refusals (a refused name,
 * a member over the size limit, a field twice, too many fields) are reported
 * through a callback, the member is dropped and reading goes on; only a
 * truncated or corrupt archive stays an error.  A sample that loses its
 * image this way is then one without an image, for the caller to skip. */
#ifndef TITAN_WDS_H
#define TITAN_WDS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct wds_limits {
	uint64_t max_member; /* bytes of one member */
	int max_fields;      /* fields of one sample */
} wds_limits;

#define WDS_MAX_MEMBER (64ull << 20)
#define WDS_MAX_FIELDS 64
extern const wds_limits wds_default_limits;

typedef struct wds_field {
	char *name;    /* "jpg", "txt", ... (owned) */
	uint8_t *data; /* owned; NUL-terminated past size, for text */
	size_t size;
} wds_field;

typedef struct wds_sample {
	char *key;         /* "000000001", or "dir/000000001" (owned) */
	wds_field *fields; /* in archive order (owned) */
	int n_fields;
	uint64_t index;    /* 0, 1, ... in the shard */
} wds_sample;

typedef struct wds wds;

/* Open a shard file ("-": standard input), or a buffer the caller keeps alive
 * until wds_close.  lim NULL means wds_default_limits. */
int wds_open(wds **w, const char *path, const wds_limits *lim, titan_err *err);
int wds_open_memory(wds **w, const void *buf, size_t size, const wds_limits *lim,
		    titan_err *err);
/* The next sample into *s (freed and refilled): 1, 0 at the end, -1 on error. */
int wds_next(wds *w, wds_sample *s, titan_err *err);
void wds_close(wds *w);
/* Lenient mode: fn(ctx, message) for each refused member (the message names
 * the shard and the member, its name's unprintable bytes as \xNN), which is
 * then dropped. */
void wds_on_refused(wds *w, void (*fn)(void *ctx, const char *msg), void *ctx);
void wds_sample_free(wds_sample *s);

/* The field named name, or NULL. */
const wds_field *wds_field_get(const wds_sample *s, const char *name);
/* Whether data[0..n) is UTF-8 as Python's strict decoder takes it (what
 * datasets' "txt" decoder needs). */
int wds_utf8_valid(const uint8_t *data, size_t n);

#endif
