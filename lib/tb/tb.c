#include "tb/tb.h"

#include "core/afile.h"
#include "core/crc32c.h"
#include "core/mfile.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

size_t tb_encode_record(const uint8_t *data, size_t n, uint8_t *out)
{
	put_u64(out, n);
	put_u32(out + 8, crc32c_mask(crc32c(0, out, 8)));
	memcpy(out + 12, data, n);
	put_u32(out + 12 + n, crc32c_mask(crc32c(0, data, n)));
	return n + 16;
}

/* Fields 1 (wall_time) and 2 (step); proto3 leaves out zero values. */
static size_t encode_header(double wall_time, int64_t step, uint8_t *out)
{
	size_t n = 0;
	if (wall_time != 0) {
		out[n++] = 0x09; /* field 1, fixed64 */
		uint64_t bits;
		memcpy(&bits, &wall_time, 8);
		put_u64(out + n, bits);
		n += 8;
	}
	if (step != 0) {
		out[n++] = 0x10; /* field 2, varint */
		n += put_varint(out + n, (uint64_t)step);
	}
	return n;
}

size_t tb_encode_version_event(double wall_time, uint8_t *out)
{
	static const char version[] = "brain.Event:2";
	size_t n = encode_header(wall_time, 0, out);
	out[n++] = 0x1a; /* field 3, bytes */
	n += put_varint(out + n, sizeof version - 1);
	memcpy(out + n, version, sizeof version - 1);
	return n + sizeof version - 1;
}

size_t tb_encode_scalar_event(double wall_time, int64_t step, const char *tag, float value,
			      uint8_t *out)
{
	size_t tl = strlen(tag);
	size_t vlen = 1 + (tl < 128 ? 1 : 2) + tl + 5; /* Value: tag, simple_value */
	size_t slen = 1 + (vlen < 128 ? 1 : 2) + vlen; /* Summary: value */
	size_t n = encode_header(wall_time, step, out);
	out[n++] = 0x2a; /* Event.summary = 5 */
	n += put_varint(out + n, slen);
	out[n++] = 0x0a; /* Summary.value = 1 */
	n += put_varint(out + n, vlen);
	out[n++] = 0x0a; /* Value.tag = 1 */
	n += put_varint(out + n, tl);
	memcpy(out + n, tag, tl);
	n += tl;
	out[n++] = 0x15; /* Value.simple_value = 2, fixed32 */
	uint32_t bits;
	memcpy(&bits, &value, 4);
	put_u32(out + n, bits);
	return n + 4;
}

/* A varint field's bytes: key, value. */
static size_t put_field_varint(uint8_t *p, uint8_t key, uint64_t v)
{
	p[0] = key;
	return 1 + put_varint(p + 1, v);
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	for (; v >= 0x80; v >>= 7)
		n++;
	return n;
}

size_t tb_encode_image_event(double wall_time, int64_t step, const char *tag, int height,
			     int width, int channels, const uint8_t *png, size_t n, uint8_t *out)
{
	size_t tl = strlen(tag);
	/* Summary.Image: height, width, colorspace (zeros left out), the bytes */
	uint8_t head[32];
	size_t hn = 0;
	if (height != 0)
		hn += put_field_varint(head + hn, 0x08, (uint64_t)height);
	if (width != 0)
		hn += put_field_varint(head + hn, 0x10, (uint64_t)width);
	if (channels != 0)
		hn += put_field_varint(head + hn, 0x18, (uint64_t)channels);
	size_t ilen = hn + (n ? 1 + varint_len(n) + n : 0);
	size_t vlen = 1 + varint_len(tl) + tl + 1 + varint_len(ilen) + ilen; /* Value */
	size_t slen = 1 + varint_len(vlen) + vlen;                           /* Summary */
	size_t k = encode_header(wall_time, step, out);
	out[k++] = 0x2a; /* Event.summary = 5 */
	k += put_varint(out + k, slen);
	out[k++] = 0x0a; /* Summary.value = 1 */
	k += put_varint(out + k, vlen);
	out[k++] = 0x0a; /* Value.tag = 1 */
	k += put_varint(out + k, tl);
	memcpy(out + k, tag, tl);
	k += tl;
	out[k++] = 0x22; /* Value.image = 4 */
	k += put_varint(out + k, ilen);
	memcpy(out + k, head, hn);
	k += hn;
	if (n) {
		out[k++] = 0x22; /* Image.encoded_image_string = 4 */
		k += put_varint(out + k, n);
		memcpy(out + k, png, n);
		k += n;
	}
	return k;
}

static int write_record(tb_writer *w, const uint8_t *data, size_t n, titan_err *err)
{
	uint8_t small[1024], *buf = n + 16 <= sizeof small ? small : malloc(n + 16);
	if (buf == NULL)
		return err_set(err, "%s: out of memory for an event of %zu bytes", w->path, n);
	size_t m = tb_encode_record(data, n, buf);
	int rc = fwrite(buf, 1, m, w->fp) != m ? err_errno(err, "%s: write", w->path) : 0;
	if (buf != small)
		free(buf);
	return rc;
}

int tb_open(tb_writer *w, const char *dir, double wall_time, titan_err *err)
{
	static int uid;
	memset(w, 0, sizeof *w);
	if (mkdir_p(dir, err) != 0)
		return -1;
	char host[HOST_NAME_MAX + 1] = "localhost";
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "localhost");
	host[sizeof host - 1] = '\0';
	size_t n = strlen(dir) + strlen(host) + 96;
	if ((w->path = malloc(n)) == NULL)
		return err_set(err, "out of memory");
	snprintf(w->path, n, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir, (long long)wall_time,
		 host, (long)getpid(), uid++);
	w->fp = fopen(w->path, "wb");
	if (w->fp == NULL) {
		err_errno(err, "%s", w->path);
		free(w->path);
		w->path = NULL;
		return -1;
	}
	uint8_t ev[64];
	size_t m = tb_encode_version_event(wall_time, ev);
	if (write_record(w, ev, m, err) != 0 || tb_flush(w, err) != 0) {
		tb_close(w, NULL);
		return -1;
	}
	return 0;
}

int tb_add_scalar(tb_writer *w, const char *tag, float value, int64_t step, double wall_time,
		  titan_err *err)
{
	size_t tl = strlen(tag);
	if (tl > 200)
		return err_set(err, "tensorboard tag too long: %s", tag);
	uint8_t ev[300];
	size_t n = tb_encode_scalar_event(wall_time, step, tag, value, ev);
	return write_record(w, ev, n, err);
}

int tb_add_image(tb_writer *w, const char *tag, const uint8_t *png, size_t n, int height,
		 int width, int channels, int64_t step, double wall_time, titan_err *err)
{
	if (strlen(tag) > 200)
		return err_set(err, "tensorboard tag too long: %s", tag);
	if (height < 1 || width < 1 || channels < 1 || channels > 4)
		return err_set(err, "tensorboard image %s: height %d, width %d, channels %d, "
			       "expected positive sizes and 1 .. 4 channels", tag, height, width,
			       channels);
	if (n == 0 || n > TB_MAX_IMAGE)
		return err_set(err, "tensorboard image %s: %zu bytes, expected 1 .. %u", tag, n,
			       TB_MAX_IMAGE);
	uint8_t *ev = malloc(96 + strlen(tag) + n);
	if (ev == NULL)
		return err_set(err, "tensorboard image %s: out of memory", tag);
	size_t m = tb_encode_image_event(wall_time, step, tag, height, width, channels, png, n, ev);
	int rc = write_record(w, ev, m, err);
	free(ev);
	return rc;
}

int tb_flush(tb_writer *w, titan_err *err)
{
	if (fflush(w->fp) != 0)
		return err_errno(err, "%s: write", w->path);
	return 0;
}

int tb_close(tb_writer *w, titan_err *err)
{
	int rc = 0;
	if (w->fp != NULL && fclose(w->fp) != 0)
		rc = err_errno(err, "%s: close", w->path);
	free(w->path);
	w->fp = NULL;
	w->path = NULL;
	return rc;
}

/* Protobuf reading: a cursor over one message. */
typedef struct pb {
	const uint8_t *p, *end;
} pb;

static int pb_varint(pb *b, uint64_t *v)
{
	uint64_t x = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (b->p >= b->end)
			return -1;
		uint8_t c = *b->p++;
		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/* Skip a field of wire type wt; -1 when it runs past the end. */
static int pb_skip(pb *b, unsigned wt)
{
	uint64_t n;
	switch (wt) {
	case 0: return pb_varint(b, &n);
	case 1: n = 8; break;
	case 5: n = 4; break;
	case 2:
		if (pb_varint(b, &n) != 0)
			return -1;
		break;
	default: return -1;
	}
	if (n > (uint64_t)(b->end - b->p))
		return -1;
	b->p += n;
	return 0;
}

/* A length-delimited field: its bytes as a sub-cursor. */
static int pb_sub(pb *b, pb *sub)
{
	uint64_t n;
	if (pb_varint(b, &n) != 0 || n > (uint64_t)(b->end - b->p))
		return -1;
	sub->p = b->p;
	sub->end = b->p + n;
	b->p += n;
	return 0;
}

typedef struct read_ctx {
	tb_event_fn fn;
	void *ctx;
	titan_err *err;
} read_ctx;

/* Summary.Image { height = 1; width = 2; colorspace = 3; encoded_image_string = 4 } */
static int decode_image(pb im, tb_event *ev)
{
	int *dims[4] = {NULL, &ev->image_height, &ev->image_width, &ev->image_channels};
	while (im.p < im.end) {
		uint64_t key, v;
		if (pb_varint(&im, &key) != 0)
			return -1;
		if (key == 0x08 || key == 0x10 || key == 0x18) {
			if (pb_varint(&im, &v) != 0)
				return -1;
			*dims[key >> 3] = (int)v;
		} else if (key == 0x22) {
			pb s;
			if (pb_sub(&im, &s) != 0)
				return -1;
			ev->image = s.p;
			ev->image_n = (size_t)(s.end - s.p);
		} else if (pb_skip(&im, (unsigned)(key & 7)) != 0) {
			return -1;
		}
	}
	return 0;
}

/* Value { tag = 1; simple_value = 2; image = 4; ... } */
static int decode_value(pb v, tb_event *ev, char *tag, size_t tagcap)
{
	int have_value = 0, have_image = 0;
	tag[0] = '\0';
	ev->image = NULL;
	ev->image_n = 0;
	ev->image_height = ev->image_width = ev->image_channels = 0;
	while (v.p < v.end) {
		uint64_t key;
		if (pb_varint(&v, &key) != 0)
			return -1;
		if (key == 0x0a) {
			pb s;
			if (pb_sub(&v, &s) != 0)
				return -1;
			size_t n = (size_t)(s.end - s.p);
			if (n >= tagcap)
				n = tagcap - 1;
			memcpy(tag, s.p, n);
			tag[n] = '\0';
		} else if (key == 0x15) {
			if (v.end - v.p < 4)
				return -1;
			uint32_t bits = get_u32(v.p);
			memcpy(&ev->value, &bits, 4);
			v.p += 4;
			have_value = 1;
		} else if (key == 0x22) {
			pb im;
			if (pb_sub(&v, &im) != 0 || decode_image(im, ev) != 0)
				return -1;
			have_image = 1;
		} else if (pb_skip(&v, (unsigned)(key & 7)) != 0) {
			return -1;
		}
	}
	ev->tag = have_value ? tag : NULL;
	ev->image_tag = have_image ? tag : NULL;
	return 0;
}

static int decode_event(const uint8_t *data, size_t n, uint64_t off, read_ctx *rc, const char *path)
{
	tb_event ev = {.offset = off};
	pb b = {data, data + n};
	pb summary = {NULL, NULL};
	char version[64];
	while (b.p < b.end) {
		uint64_t key;
		if (pb_varint(&b, &key) != 0)
			goto bad;
		if (key == 0x09) {
			if (b.end - b.p < 8)
				goto bad;
			uint64_t bits = get_u64(b.p);
			memcpy(&ev.wall_time, &bits, 8);
			b.p += 8;
		} else if (key == 0x10) {
			uint64_t s;
			if (pb_varint(&b, &s) != 0)
				goto bad;
			ev.step = (int64_t)s;
		} else if (key == 0x1a) {
			pb s;
			if (pb_sub(&b, &s) != 0)
				goto bad;
			snprintf(version, sizeof version, "%.*s", (int)(s.end - s.p), (const char *)s.p);
			ev.file_version = version;
		} else if (key == 0x2a) {
			if (pb_sub(&b, &summary) != 0)
				goto bad;
		} else if (pb_skip(&b, (unsigned)(key & 7)) != 0) {
			goto bad;
		}
	}
	if (summary.p == NULL)
		return rc->fn(rc->ctx, &ev, rc->err);
	while (summary.p < summary.end) {
		uint64_t key;
		if (pb_varint(&summary, &key) != 0)
			goto bad;
		if (key != 0x0a) {
			if (pb_skip(&summary, (unsigned)(key & 7)) != 0)
				goto bad;
			continue;
		}
		pb v;
		char tag[256];
		if (pb_sub(&summary, &v) != 0 || decode_value(v, &ev, tag, sizeof tag) != 0)
			goto bad;
		if (rc->fn(rc->ctx, &ev, rc->err) != 0)
			return -1;
	}
	return 0;
bad:
	return err_set(rc->err, "%s: offset %llu: malformed Event protobuf", path,
		       (unsigned long long)off);
}

int tb_read_file(const char *path, int allow_truncated_tail, tb_event_fn fn, void *ctx,
		 titan_err *err)
{
	mfile m;
	if (mfile_open(&m, path, err) != 0)
		return -1;
	read_ctx rc = {fn, ctx, err};
	uint64_t off = 0;
	int status = 0;
	while (off < m.size) {
		const uint8_t *p = m.data + off;
		uint64_t left = m.size - off;
		if (left < 12) {
			if (!allow_truncated_tail)
				status = err_set(err, "%s: offset %llu: truncated record header", path,
						 (unsigned long long)off);
			break;
		}
		uint64_t len = get_u64(p);
		uint32_t lcrc = get_u32(p + 8);
		if (crc32c_mask(crc32c(0, p, 8)) != lcrc) {
			status = err_set(err, "%s: offset %llu: length CRC mismatch (not an event file?)",
					 path, (unsigned long long)off);
			break;
		}
		if (len > left - 12 || left - 12 - len < 4) {
			if (!allow_truncated_tail)
				status = err_set(err, "%s: offset %llu: truncated record of %llu bytes", path,
						 (unsigned long long)off, (unsigned long long)len);
			break;
		}
		if (crc32c_mask(crc32c(0, p + 12, len)) != get_u32(p + 12 + len)) {
			status = err_set(err, "%s: offset %llu: data CRC mismatch", path,
					 (unsigned long long)off);
			break;
		}
		if (decode_event(p + 12, len, off, &rc, path) != 0) {
			status = -1;
			break;
		}
		off += 16 + len;
	}
	mfile_close(&m);
	return status;
}
