/* tb.h: TensorBoard event files, written and read without TensorFlow.
 *
 * A file is a sequence of records: u64 LE length, u32 LE masked CRC-32C of the
 * 8 length bytes, the data, u32 LE masked CRC-32C of the data.  Each record's
 * data is an Event protobuf (tensorflow/core/util/event.proto): wall_time = 1
 * (double), step = 2 (int64), file_version = 3 (string, "brain.Event:2" in the
 * first record), summary = 5 (Summary: repeated Value value = 1; Value: tag = 1,
 * simple_value = 2 (float)).  Field order and proto3's omission of zero values
 * match what TensorFlow writes, so the bytes are the same as its writer's. */
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
/* Push buffered records to the file so TensorBoard sees them. */
int tb_flush(tb_writer *w, titan_err *err);
int tb_close(tb_writer *w, titan_err *err);

/* Encoders, exposed for tests.  Each returns the bytes written to out (which
 * must hold n + 16 bytes for a record, 64 + strlen(tag) for an event). */
size_t tb_encode_record(const uint8_t *data, size_t n, uint8_t *out);
size_t tb_encode_version_event(double wall_time, uint8_t *out);
size_t tb_encode_scalar_event(double wall_time, int64_t step, const char *tag, float value,
			      uint8_t *out);

/* One event as read back: at most one scalar value is reported per callback
 * (events with several values produce several callbacks). */
typedef struct tb_event {
	double wall_time;
	int64_t step;
	const char *file_version; /* NULL unless this is the version record */
	const char *tag;          /* NULL when the event holds no simple_value */
	float value;
	uint64_t offset;          /* of the record in the file */
} tb_event;

typedef int (*tb_event_fn)(void *ctx, const tb_event *ev, titan_err *err);

/* Read every record of an event file, checking both CRCs of each record and
 * the protobuf structure; a short last record (a writer still running) is an
 * error unless allow_truncated_tail.  Calls fn per event (value). */
int tb_read_file(const char *path, int allow_truncated_tail, tb_event_fn fn, void *ctx,
		 titan_err *err);

#endif
