/* tb.h: TensorBoard event files, written and read without TensorFlow.
 *
 * A file is a sequence of records: u64 LE length, u32 LE masked CRC-32C of the
 * 8 length bytes, the data, u32 LE masked CRC-32C of the data.  Each record's
 * data is an Event protobuf (tensorflow/core/util/event.proto): wall_time = 1
 * (double), step = 2 (int64), file_version = 3 (string, "brain.Event:2" in the
 * first record), summary = 5 (Summary: repeated Value value = 1; Value: tag = 1,
 * simple_value = 2 (float), image = 4 (Summary.Image: height = 1, width = 2,
 * colorspace = 3 (int32s: channels, 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA),
 * encoded_image_string = 4 (bytes, a PNG)), as torch's SummaryWriter.add_image
 * makes it).  Field order and proto3's omission of zero values match what
 * TensorFlow writes, so the bytes are the same as its writer's. */
#ifndef TITAN_TB_H
#define TITAN_TB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

typedef struct tb_writer {
	FILE *fp;
	char *path; /* owned: the event file's path */
} tb_writer;

/* Create dir (and parents) and a new event file in it named
 * events.out.tfevents.{10-digit time}.{hostname}.{pid}.{uid} (uid counts files
 * opened by this process from 0), holding the file_version record. */
int tb_open(tb_writer *w, const char *dir, double wall_time, titan_err *err);
/* Append one Event holding one scalar. */
int tb_add_scalar(tb_writer *w, const char *tag, float value, int64_t step, double wall_time,
		  titan_err *err);
/* Append one Event holding one image: png (n bytes, an encoded PNG of
 * height x width pixels of channels 1 .. 4, e.g. image.h's image_png_encode),
 * as add_image(tag, img, step) writes it.  The image's size is the caller's
 * word (not read from the PNG); n at most TB_MAX_IMAGE. */
#define TB_MAX_IMAGE (64u << 20)
int tb_add_image(tb_writer *w, const char *tag, const uint8_t *png, size_t n, int height,
		 int width, int channels, int64_t step, double wall_time, titan_err *err);
/* Push buffered records to the file so TensorBoard sees them. */
int tb_flush(tb_writer *w, titan_err *err);
int tb_close(tb_writer *w, titan_err *err);

/* Encoders, exposed for tests.  Each returns the bytes written to out (which
 * must hold n + 16 bytes for a record, 64 + strlen(tag) for an event). */
size_t tb_encode_record(const uint8_t *data, size_t n, uint8_t *out);
size_t tb_encode_version_event(double wall_time, uint8_t *out);
size_t tb_encode_scalar_event(double wall_time, int64_t step, const char *tag, float value,
			      uint8_t *out);
/* out holds 96 + strlen(tag) + n bytes. */
size_t tb_encode_image_event(double wall_time, int64_t step, const char *tag, int height,
			     int width, int channels, const uint8_t *png, size_t n, uint8_t *out);

/* One event as read back: at most one value (a scalar or an image) is
 * reported per callback (events with several values produce several
 * callbacks). */
typedef struct tb_event {
	double wall_time;
	int64_t step;
	const char *file_version; /* NULL unless this is the version record */
	const char *tag;          /* NULL when the event holds no simple_value */
	float value;
	/* an image value: its tag (NULL for any other value), size, channels
	 * (colorspace) and encoded bytes (valid during the callback) */
	const char *image_tag;
	int image_height, image_width, image_channels;
	const uint8_t *image;
	size_t image_n;
	uint64_t offset;          /* of the record in the file */
} tb_event;

typedef int (*tb_event_fn)(void *ctx, const tb_event *ev, titan_err *err);

/* Read every record of an event file, checking both CRCs of each record and
 * the protobuf structure; a short last record (a writer still running) is an
 * error unless allow_truncated_tail.  Calls fn per event (value). */
int tb_read_file(const char *path, int allow_truncated_tail, tb_event_fn fn, void *ctx,
		 titan_err *err);

#endif
