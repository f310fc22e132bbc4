/* shard.c: Flux record shards (titan-formats(5), FLUX RECORD SHARDS): a
 * folder of one-segment record streams and a manifest.json; built from a
 * stream (resumable), verified, read back in input order, mapped. */
#include "fluxrec/fluxrec.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/crc32c.h"
#include "core/json.h"
#include "core/mfile.h"
#include "core/sha256.h"
#include "core/le.h"
#include "shard/shard.h"

#define FORMAT "titan-flux-records"

typedef struct entry {
	char file[64];          /* "train-000000.rec", in the folder */
	uint64_t records, bytes, first_record;
	uint32_t data_crc;
} entry;

typedef struct split {
	entry *shards;
	size_t n;
	uint64_t records, next_record;
} split;

typedef struct manifest {
	int complete;
	uint8_t header_sha[32];   /* of the stream header every shard starts with */
	uint64_t header_len, record_bytes;
	uint64_t shard_records, val_records;
	double val_fraction;
	uint64_t input_records;   /* the input prefix the listed shards account for */
	uint32_t input_crc;       /* CRC-32C of its records */
	split split[2];           /* SHARD_TRAIN, SHARD_VAL */
} manifest;

static const char *const split_names[2] = {"train", "val"};

/* The split of record i: the rule token shards use for documents. */
static int split_of(const manifest *m, uint64_t i)
{
	shard_manifest sm = {.val_fraction = m->val_fraction, .val_docs = m->val_records};
	return shard_split_of(&sm, i);
}

static void manifest_free(manifest *m)
{
	for (int s = 0; s < 2; s++) {
		free(m->split[s].shards);
		m->split[s].shards = NULL;
		m->split[s].n = 0;
	}
}

static json_t *split_json(const split *sp)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < sp->n; i++) {
		const entry *e = &sp->shards[i];
		json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:I}", "file", e->file,
			"records", (json_int_t)e->records, "bytes", (json_int_t)e->bytes,
			"first_record", (json_int_t)e->first_record, "data_crc",
			(json_int_t)e->data_crc));
	}
	return json_pack("{s:I, s:I, s:o}", "records", (json_int_t)sp->records, "next_record",
			 (json_int_t)sp->next_record, "shards", arr);
}

static int manifest_write(const char *dir, const manifest *m, titan_err *err)
{
	char sha[65];
	sha256_hex(m->header_sha, sha);
	json_t *root = json_pack("{s:s, s:i, s:b, s:{s:s, s:I, s:I}, s:{s:I, s:f, s:I},"
				 " s:{s:I, s:I}, s:o, s:o}",
		"format", FORMAT, "version", 1, "complete", m->complete,
		"header", "sha256", sha, "header_len", (json_int_t)m->header_len, "record_bytes",
		(json_int_t)m->record_bytes,
		"options", "shard_records", (json_int_t)m->shard_records, "val_fraction",
		m->val_fraction, "val_records", (json_int_t)m->val_records,
		"input", "records", (json_int_t)m->input_records, "crc32c", (json_int_t)m->input_crc,
		"train", split_json(&m->split[SHARD_TRAIN]), "val", split_json(&m->split[SHARD_VAL]));
	char *path = path_join(dir, "manifest.json");
	int rc = root && path ? tjson_dump_file(root, path, err)
			      : err_set(err, "%s/manifest.json: out of memory", dir);
	json_decref(root);
	free(path);
	return rc;
}

static int get_u32(const json_t *o, const char *key, uint32_t *out, const char *where,
		   titan_err *err)
{
	uint64_t v;
	if (tjson_get_uint(o, key, &v, where, err) != 0)
		return -1;
	if (v > UINT32_MAX)
		return err_set(err, "%s: field '%s': %llu is over 32 bits", where, key,
			       (unsigned long long)v);
	*out = (uint32_t)v;
	return 0;
}

static int read_split(const json_t *o, split *sp, const char *where, titan_err *err)
{
	json_t *arr;
	if (tjson_get_array(o, "shards", &arr, where, err) ||
	    tjson_get_uint(o, "records", &sp->records, where, err) ||
	    tjson_get_uint(o, "next_record", &sp->next_record, where, err))
		return -1;
	size_t n = json_array_size(arr);
	if ((sp->shards = calloc(n ? n : 1, sizeof *sp->shards)) == NULL)
		return err_set(err, "%s: out of memory", where);
	sp->n = n;
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		entry *s = &sp->shards[i];
		const char *file;
		if (tjson_get_string(e, "file", &file, where, err) ||
		    tjson_get_uint(e, "records", &s->records, where, err) ||
		    tjson_get_uint(e, "bytes", &s->bytes, where, err) ||
		    tjson_get_uint(e, "first_record", &s->first_record, where, err) ||
		    get_u32(e, "data_crc", &s->data_crc, where, err))
			return -1;
		if (strlen(file) >= sizeof s->file || strchr(file, '/') || file[0] == '.')
			return err_set(err, "%s: shard file name '%.80s' refused", where, file);
		snprintf(s->file, sizeof s->file, "%s", file);
		sum += s->records;
	}
	if (sum != sp->records)
		return err_set(err, "%s: the shards hold %llu records, the split says %llu", where,
			       (unsigned long long)sum, (unsigned long long)sp->records);
	return 0;
}

static int manifest_parse(const json_t *root, manifest *m, const char *where, titan_err *err)
{
	const char *sha;
	if (tjson_get_bool(root, "complete", &m->complete, where, err) ||
	    tjson_get_string(root, "header.sha256", &sha, where, err) ||
	    tjson_get_uint(root, "header.header_len", &m->header_len, where, err) ||
	    tjson_get_uint(root, "header.record_bytes", &m->record_bytes, where, err) ||
	    tjson_get_uint(root, "options.shard_records", &m->shard_records, where, err) ||
	    tjson_get_uint(root, "options.val_records", &m->val_records, where, err) ||
	    tjson_get_double(root, "options.val_fraction", &m->val_fraction, where, err) ||
	    tjson_get_uint(root, "input.records", &m->input_records, where, err) ||
	    get_u32(json_object_get(root, "input"), "crc32c", &m->input_crc, where, err))
		return -1;
	if (sha256_unhex(sha, m->header_sha) != 0 || !(m->val_fraction >= 0) ||
	    m->val_fraction > 1 || m->shard_records == 0 || m->record_bytes == 0)
		return err_set(err, "%s: a value out of range (header.sha256, val_fraction, "
			       "shard_records or record_bytes)", where);
	for (int s = 0; s < 2; s++) {
		json_t *o;
		if (tjson_get_object(root, split_names[s], &o, where, err) ||
		    read_split(o, &m->split[s], where, err))
			return -1;
	}
	return 0;
}

static int manifest_read(const char *dir, manifest *m, titan_err *err)
{
	memset(m, 0, sizeof *m);
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_t *root = tjson_load_file(path, 0, err);
	if (root == NULL)
		return -1;
	const char *fmt = json_string_value(json_object_get(root, "format"));
	int rc = fmt && strcmp(fmt, FORMAT) == 0
		 ? manifest_parse(root, m, path, err)
		 : err_set(err, "%s: not a Flux record shard folder (format \"%s\")", path,
			   fmt ? fmt : "?");
	json_decref(root);
	if (rc != 0)
		manifest_free(m);
	return rc;
}

int fluxrec_dir_is(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	const char *fmt = root ? json_string_value(json_object_get(root, "format")) : NULL;
	int is = fmt != NULL && strcmp(fmt, FORMAT) == 0;
	json_decref(root);
	return is;
}

/* ---- mapped shard files */

struct fluxrec_file {
	mfile mf;
	char *path;
	fluxrec_header h;
	uint64_t n;
	uint32_t data_crc;
};

void fluxrec_file_close(fluxrec_file *f)
{
	if (f == NULL)
		return;
	mfile_close(&f->mf);
	fluxrec_header_free(&f->h);
	free(f->path);
	free(f);
}

fluxrec_file *fluxrec_file_open(const char *path, titan_err *err)
{
	fluxrec_file *f = calloc(1, sizeof *f);
	if (f == NULL || (f->path = strdup(path)) == NULL) {
		free(f);
		err_set(err, "%s: out of memory", path);
		return NULL;
	}
	f->mf.fd = -1;
	if (mfile_open(&f->mf, path, err) != 0) {
		free(f->path);
		free(f);
		return NULL;
	}
	const uint8_t *d = f->mf.data;
	size_t size = f->mf.size;
	int ok = size >= 12 + FLUXREC_TRAILER_LEN;
	uint32_t hl = ok ? le_get32(d + 8) : 0;
	if (!ok || hl > size - FLUXREC_TRAILER_LEN) {
		if (size >= 4 && memcmp(d, FLUXREC_MAGIC, 4) == 0)
			err_set(err, "%s: truncated Flux record shard (%zu bytes)", path, size);
		else
			err_set(err, "%s: bad magic, expected \"TTFR\" (not a Flux record shard?)", path);
		fluxrec_file_close(f);
		return NULL;
	}
	if (fluxrec_header_decode(d, hl, &f->h, path, err) != 0) {
		mfile_close(&f->mf);
		free(f->path);
		free(f);
		return NULL;
	}
	const uint8_t *t = d + size - FLUXREC_TRAILER_LEN;
	f->n = le_get64(t + 8);
	f->data_crc = le_get32(t + 16);
	uint64_t body = size - FLUXREC_TRAILER_LEN - hl;
	if (memcmp(t, "FEND", 4) != 0 || crc32c(0, t, 20) != le_get32(t + 20) ||
	    f->n > body / f->h.record_bytes || body != f->n * f->h.record_bytes) {
		err_set(err, "%s: truncated or damaged Flux record shard (no valid trailer, or "
			"%zu bytes do not hold its records)", path, size);
		fluxrec_file_close(f);
		return NULL;
	}
	return f;
}

const fluxrec_header *fluxrec_file_header(const fluxrec_file *f)
{
	return &f->h;
}

uint64_t fluxrec_file_records(const fluxrec_file *f)
{
	return f->n;
}

static const uint8_t *file_rec(const fluxrec_file *f, uint64_t i)
{
	return f->mf.data + f->h.header_len + i * f->h.record_bytes;
}

int fluxrec_file_record(const fluxrec_file *f, uint64_t i, fluxrec_view *v, titan_err *err)
{
	if (i >= f->n)
		return err_set(err, "%s: record %llu of %llu", f->path, (unsigned long long)i,
			       (unsigned long long)f->n);
	char what[4200];
	snprintf(what, sizeof what, "%s: record %llu", f->path, (unsigned long long)i);
	return fluxrec_record_view(&f->h, file_rec(f, i), v, what, err);
}

/* Every record's CRC and the trailer's CRC over them. */
static int file_check_records(const fluxrec_file *f, titan_err *err)
{
	uint32_t crc = 0;
	for (uint64_t i = 0; i < f->n; i++) {
		fluxrec_view v;
		if (fluxrec_file_record(f, i, &v, err) != 0)
			return -1;
		crc = crc32c(crc, file_rec(f, i), f->h.record_bytes);
	}
	if (crc != f->data_crc)
		return err_set(err, "%s: records' CRC-32C 0x%08x, the trailer says 0x%08x", f->path,
			       crc, f->data_crc);
	return 0;
}

int fluxrec_verify_file(const char *path, titan_err *err)
{
	fluxrec_file *f = fluxrec_file_open(path, err);
	if (f == NULL)
		return -1;
	mfile_advise_sequential(&f->mf);
	int rc = file_check_records(f, err);
	fluxrec_file_close(f);
	return rc;
}

/* A listed shard against its manifest entry (and, full, against itself). */
static int entry_check(const char *dir, const manifest *m, const entry *e, int full,
		       titan_err *err)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, e->file);
	fluxrec_file *f = fluxrec_file_open(path, err);
	if (f == NULL)
		return -1;
	uint8_t sha[32];
	int rc = sha256(f->mf.data, f->h.header_len, sha, err);
	if (rc == 0 && memcmp(sha, m->header_sha, 32) != 0)
		rc = err_set(err, "%s: its header differs from the one manifest.json names", path);
	else if (rc == 0 && (f->n != e->records || f->mf.size != e->bytes ||
			     f->data_crc != e->data_crc))
		rc = err_set(err, "%s: %llu records, %zu bytes, CRC-32C 0x%08x; manifest.json says "
			     "%llu, %llu, 0x%08x", path, (unsigned long long)f->n, f->mf.size,
			     f->data_crc, (unsigned long long)e->records,
			     (unsigned long long)e->bytes, e->data_crc);
	if (rc == 0 && full) {
		mfile_advise_sequential(&f->mf);
		rc = file_check_records(f, err);
	}
	fluxrec_file_close(f);
	return rc;
}

static int is_rec_name(const char *name)
{
	size_t n = strlen(name);
	return (strncmp(name, "train-", 6) == 0 || strncmp(name, "val-", 4) == 0) &&
	       n > 4 && strstr(name, ".rec") != NULL;
}

static int listed(const manifest *m, const char *name)
{
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < m->split[s].n; i++)
			if (strcmp(m->split[s].shards[i].file, name) == 0)
				return 1;
	return 0;
}

int fluxrec_verify_dir(const char *dir, void (*warn)(const char *msg), titan_err *err)
{
	manifest m;
	if (manifest_read(dir, &m, err) != 0)
		return -1;
	int rc = 0;
	for (int s = 0; rc == 0 && s < 2; s++) {
		uint64_t first = 0;
		for (size_t i = 0; rc == 0 && i < m.split[s].n; i++) {
			const entry *e = &m.split[s].shards[i];
			if (e->first_record < first)
				rc = err_set(err, "%s/%s: first_record %llu out of order", dir, e->file,
					     (unsigned long long)e->first_record);
			else
				rc = entry_check(dir, &m, e, 1, err);
			first = e->first_record + e->records;
		}
	}
	if (rc == 0 && !m.complete && warn)
		warn("the manifest is marked incomplete (an interrupted titan-shard; rerun it with "
		     "the same input to finish)");
	DIR *d = rc == 0 && warn ? opendir(dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (is_rec_name(de->d_name) && !listed(&m, de->d_name)) {
			char msg[512];
			snprintf(msg, sizeof msg, "%s/%s: not listed in manifest.json (not part of the "
				 "data set)", dir, de->d_name);
			warn(msg);
		}
	}
	if (d)
		closedir(d);
	manifest_free(&m);
	return rc;
}

/* ---- building */

typedef struct build {
	const fluxrec_shard_opts *o;
	const char *dir;
	manifest m;
	const fluxrec_header *h;
	int resuming;            /* the prefix the manifest covers is not yet checked */
	uint64_t rec;            /* input record index */
	uint32_t crc;            /* CRC-32C of the input's records so far */
	afile af[2];             /* the open shards' files, while w[s] is set */
	fluxrec_writer *w[2];
	uint64_t w_first[2];
	fluxrec_shard_stats *st;
	time_t last_report;
	int lock_fd;
} build;

static int same_options(const manifest *m, const fluxrec_shard_opts *o, uint64_t per_shard)
{
	return m->shard_records == per_shard && m->val_records == o->val_records &&
	       m->val_fraction == o->val_fraction;
}

/* What an interrupted run left: shards not listed and temporary files. */
static int clean_leftovers(build *b, titan_err *err)
{
	DIR *d = opendir(b->dir);
	if (d == NULL)
		return err_errno(err, "%s", b->dir);
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		int tmp = strncmp(e->d_name, "manifest.json.tmp.", 18) == 0;
		if ((!is_rec_name(e->d_name) || listed(&b->m, e->d_name)) && !tmp)
			continue;
		char *p = path_join(b->dir, e->d_name);
		if (p == NULL || (unlink(p) != 0 && errno != ENOENT))
			rc = err_errno(err, "%s/%s: remove leftover", b->dir, e->d_name);
		free(p);
	}
	closedir(d);
	return rc;
}

static int prepare(build *b, const uint8_t *head, titan_err *err)
{
	uint8_t sha[32];
	if (sha256(head, b->h->header_len, sha, err) != 0)
		return -1;
	uint64_t per = b->o->shard_records;
	if (per == 0)
		per = FLUXREC_SHARD_BYTES / b->h->record_bytes ? FLUXREC_SHARD_BYTES / b->h->record_bytes
							       : 1;
	if ((b->lock_fd = dir_lock(b->dir, "titan-shard is writing", err)) < 0)
		return -1;
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", b->dir);
	if (access(path, F_OK) == 0) {
		if (manifest_read(b->dir, &b->m, err) != 0)
			return -1;
		if (b->m.complete)
			return err_set(err, "%s: already holds a complete shard set; remove it or "
				       "choose another --out", b->dir);
		if (!same_options(&b->m, b->o, per))
			return err_set(err, "%s: an interrupted run with other options (records per "
				       "shard or validation split) is there; rerun with the same "
				       "options or remove the folder", b->dir);
		if (memcmp(b->m.header_sha, sha, 32) != 0)
			return err_set(err, "%s: the folder was made from another Flux record stream "
				       "(other encoders, shapes or options)", b->dir);
		for (int s = 0; s < 2; s++)
			for (size_t i = 0; i < b->m.split[s].n; i++)
				if (entry_check(b->dir, &b->m, &b->m.split[s].shards[i], 0, err) != 0)
					return err_prefix(err, "%s: cannot resume (remove the folder to "
							  "start over)", b->dir);
		b->resuming = b->m.input_records > 0;
		b->st->resumed = 1;
		return clean_leftovers(b, err);
	}
	DIR *d = opendir(b->dir);
	if (d == NULL)
		return err_errno(err, "%s", b->dir);
	struct dirent *e;
	int empty = 1;
	while ((e = readdir(d)) != NULL)
		empty &= strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
	closedir(d);
	if (!empty)
		return err_set(err, "%s: folder is not empty and has no manifest.json; refusing "
			       "to mix shards with other files", b->dir);
	memcpy(b->m.header_sha, sha, 32);
	b->m.header_len = b->h->header_len;
	b->m.record_bytes = b->h->record_bytes;
	b->m.shard_records = per;
	b->m.val_fraction = b->o->val_fraction;
	b->m.val_records = b->o->val_records;
	return manifest_write(b->dir, &b->m, err);
}

/* Close split s's open shard; the input up to record `upto` is then covered. */
static int commit(build *b, int s, uint64_t upto, titan_err *err)
{
	split *sp = &b->m.split[s];
	entry e = {.records = fluxrec_writer_records(b->w[s]), .first_record = b->w_first[s],
		   .data_crc = fluxrec_writer_crc(b->w[s])};
	e.bytes = b->h->header_len + e.records * b->h->record_bytes + FLUXREC_TRAILER_LEN;
	snprintf(e.file, sizeof e.file, "%s-%06zu.rec", split_names[s], sp->n);
	int rc = fluxrec_writer_close(b->w[s], err);
	b->w[s] = NULL;
	if (rc != 0) {
		afile_abort(&b->af[s]);
		return -1;
	}
	if (afile_commit(&b->af[s], err) != 0)
		return -1;
	entry *n = realloc(sp->shards, (sp->n + 1) * sizeof *n);
	if (n == NULL)
		return err_set(err, "out of memory");
	sp->shards = n;
	sp->shards[sp->n++] = e;
	sp->records += e.records;
	sp->next_record = upto;
	b->st->bytes_out += e.bytes;
	b->m.input_records = upto;
	b->m.input_crc = b->crc;
	return manifest_write(b->dir, &b->m, err);
}

static int input_differs(build *b, titan_err *err)
{
	return err_set(err, "%s: the input differs from the one the interrupted run read (its "
		       "first %llu records, CRC-32C 0x%08x); nothing was changed; use the same "
		       "input or remove the folder", b->dir,
		       (unsigned long long)b->m.input_records, b->m.input_crc);
}

static int add_record(build *b, const uint8_t *rec, uint32_t crc, titan_err *err)
{
	if (b->resuming && b->rec == b->m.input_records) {
		if (b->crc != b->m.input_crc)
			return input_differs(b, err);
		b->resuming = 0;
	}
	int s = split_of(&b->m, b->rec);
	b->crc = crc;
	if (b->rec < b->m.split[s].next_record) { /* in a listed shard already */
		b->st->skipped++;
		b->rec++;
		return 0;
	}
	if (b->w[s] == NULL) {
		char path[4200];
		snprintf(path, sizeof path, "%s/%s-%06zu.rec", b->dir, split_names[s],
			 b->m.split[s].n);
		if (afile_open(&b->af[s], path, err) != 0)
			return -1;
		if ((b->w[s] = fluxrec_writer_open(b->af[s].fp, b->h, err)) == NULL) {
			afile_abort(&b->af[s]);
			return -1;
		}
		b->w_first[s] = b->rec;
	}
	if (fluxrec_write(b->w[s], rec, err) != 0)
		return -1;
	b->st->records++;
	if (fluxrec_writer_records(b->w[s]) >= b->m.shard_records) {
		if (b->resuming) /* the interrupted run did not fill this shard */
			return input_differs(b, err);
		if (commit(b, s, b->rec + 1, err) != 0)
			return -1;
	}
	b->rec++;
	return 0;
}

static int finish(build *b, titan_err *err)
{
	if (b->rec < b->m.input_records)
		return err_set(err, "%s: the input ended after %llu records, before the %llu the "
			       "interrupted run had read; nothing was changed", b->dir,
			       (unsigned long long)b->rec, (unsigned long long)b->m.input_records);
	if (b->resuming && b->crc != b->m.input_crc)
		return input_differs(b, err);
	for (int s = 0; s < 2; s++) {
		if (b->w[s] != NULL && commit(b, s, b->rec, err) != 0)
			return -1;
		b->m.split[s].next_record = b->rec;
	}
	b->m.complete = 1;
	b->m.input_records = b->rec;
	b->m.input_crc = b->crc;
	return manifest_write(b->dir, &b->m, err);
}

static void report(build *b, int last)
{
	time_t now = time(NULL);
	if (!b->o->progress || (!last && now - b->last_report < 2))
		return;
	b->last_report = now;
	fprintf(stderr, "%s: %llu records, %zu train + %zu val shards%s\n", titan_progname(),
		(unsigned long long)b->rec, b->m.split[0].n, b->m.split[1].n, last ? ", done" : "");
}

int fluxrec_shard_build(fluxrec_reader *in, const fluxrec_shard_opts *o,
			fluxrec_shard_stats *st, titan_err *err)
{
	memset(st, 0, sizeof *st);
	build b = {.o = o, .dir = o->out, .h = fluxrec_reader_header(in), .st = st,
		   .last_report = time(NULL), .lock_fd = -1};
	int rc = prepare(&b, fluxrec_reader_header_bytes(in), err);
	const uint8_t *rec;
	while (rc == 0) {
		int r = fluxrec_read(in, &rec, err);
		if (r <= 0) {
			rc = r;
			break;
		}
		rc = add_record(&b, rec, fluxrec_reader_crc(in), err);
		report(&b, 0);
	}
	if (rc == 0)
		rc = finish(&b, err);
	if (rc == 0)
		report(&b, 1);
	for (int s = 0; s < 2; s++) {
		if (b.w[s]) {
			fluxrec_writer_abort(b.w[s]);
			afile_abort(&b.af[s]);
		}
	}
	manifest_free(&b.m);
	if (b.lock_fd >= 0)
		close(b.lock_fd);
	return rc;
}

/* ---- reading back */

int fluxrec_cat_file(const char *path, FILE *out, titan_err *err)
{
	fluxrec_file *f = fluxrec_file_open(path, err);
	if (f == NULL)
		return -1;
	int rc = file_check_records(f, err);
	if (rc == 0 && fwrite(f->mf.data, 1, f->mf.size, out) != f->mf.size)
		rc = err_errno(err, "standard output");
	fluxrec_file_close(f);
	return rc;
}

typedef struct cursor {
	const split *sp;
	size_t shard;
	uint64_t at;            /* the record within the open shard */
	fluxrec_file *f;
} cursor;

/* The next record of a split, opening its shards in turn. */
static const uint8_t *cursor_next(cursor *c, const char *dir, const manifest *m, titan_err *err)
{
	while (c->f == NULL || c->at == c->f->n) {
		fluxrec_file_close(c->f);
		c->f = NULL;
		if (c->shard == c->sp->n) {
			err_set(err, "%s: manifest.json lists fewer records than its input count", dir);
			return NULL;
		}
		const entry *e = &c->sp->shards[c->shard++];
		char path[4200];
		snprintf(path, sizeof path, "%s/%s", dir, e->file);
		if (entry_check(dir, m, e, 0, err) != 0 || (c->f = fluxrec_file_open(path, err)) == NULL)
			return NULL;
		mfile_advise_sequential(&c->f->mf);
		c->at = 0;
	}
	fluxrec_view v;
	if (fluxrec_file_record(c->f, c->at, &v, err) != 0)
		return NULL;
	return file_rec(c->f, c->at++);
}

int fluxrec_cat_dir(const char *dir, int which, FILE *out, titan_err *err)
{
	manifest m;
	if (manifest_read(dir, &m, err) != 0)
		return -1;
	if (!m.complete) {
		manifest_free(&m);
		return err_set(err, "%s: the shard set is incomplete (an interrupted titan-shard); "
			       "rerun it with the same input to finish", dir);
	}
	cursor c[2] = {{.sp = &m.split[0]}, {.sp = &m.split[1]}};
	fluxrec_writer *w = NULL;
	fluxrec_header h = {0};
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < m.input_records; i++) {
		int s = split_of(&m, i);
		const uint8_t *rec = cursor_next(&c[s], dir, &m, err);
		if (rec == NULL) {
			rc = -1;
			break;
		}
		/* the writer keeps its header: a copy, as the cursor closes shards */
		if (w == NULL && (fluxrec_header_decode(c[s].f->mf.data, c[s].f->h.header_len, &h,
							 dir, err) != 0 ||
				  (w = fluxrec_writer_open(out, &h, err)) == NULL))
			rc = -1;
		if (rc == 0 && (which < 0 || which == s))
			rc = fluxrec_write(w, rec, err);
	}
	if (rc == 0 && w == NULL)
		rc = err_set(err, "%s: no records to write (an empty folder has no header to "
			     "start a stream with)", dir);
	if (rc == 0)
		rc = fluxrec_writer_close(w, err);
	else if (w)
		fluxrec_writer_abort(w);
	for (int s = 0; s < 2; s++)
		fluxrec_file_close(c[s].f);
	fluxrec_header_free(&h);
	manifest_free(&m);
	return rc;
}

int fluxrec_dir_files(const char *dir, int which, char ***paths, int *n, titan_err *err)
{
	manifest m;
	*paths = NULL;
	*n = 0;
	if (manifest_read(dir, &m, err) != 0)
		return -1;
	int rc = 0;
	const split *sp = &m.split[which ? 1 : 0];
	if (!m.complete)
		rc = err_set(err, "%s: the shard set is incomplete (an interrupted titan-shard); "
			     "rerun it with the same input to finish", dir);
	char **v = rc == 0 ? calloc(sp->n + 1, sizeof *v) : NULL;
	if (rc == 0 && v == NULL)
		rc = err_set(err, "out of memory");
	for (size_t i = 0; rc == 0 && i < sp->n; i++) {
		size_t len = strlen(dir) + strlen(sp->shards[i].file) + 2;
		if ((v[i] = malloc(len)) == NULL)
			rc = err_set(err, "out of memory");
		else
			snprintf(v[i], len, "%s/%s", dir, sp->shards[i].file);
	}
	if (rc == 0) {
		*paths = v;
		*n = (int)sp->n;
	} else {
		fluxrec_paths_free(v, (int)sp->n);
	}
	manifest_free(&m);
	return rc;
}

void fluxrec_paths_free(char **paths, int n)
{
	for (int i = 0; paths != NULL && i < n; i++)
		free(paths[i]);
	free(paths);
}

/* ---- info */

static const char *dtype_name(uint32_t d)
{
	return d == FLUXREC_BF16 ? "bfloat16" : "float32";
}

static json_t *header_json(const fluxrec_header *h)
{
	char t5w[65], clw[65], aew[65], t5t[65], clt[65];
	sha256_hex(h->t5_weights, t5w);
	sha256_hex(h->clip_weights, clw);
	sha256_hex(h->ae_weights, aew);
	sha256_hex(h->t5_tokenizer, t5t);
	sha256_hex(h->clip_tokenizer, clt);
	json_t *o = json_pack("{s:I, s:I, s:s, s:s, s:I, s:b, s:b, s:s, s:I}",
		"header_len", (json_int_t)h->header_len, "record_bytes", (json_int_t)h->record_bytes,
		"dtype", dtype_name(h->dtype), "model_dtype", dtype_name(h->model_dtype),
		"image_size", (json_int_t)h->image_size, "pixels", (h->flags & FLUXREC_PIXELS) != 0,
		"moments", (h->flags & FLUXREC_MOMENTS) != 0,
		"crop", h->flags & FLUXREC_CROP_RANDOM ? "random" : "center", "seed",
		(json_int_t)h->seed);
	json_object_set_new(o, "t5", json_pack("{s:I, s:I, s:I, s:s, s:s}", "len",
		(json_int_t)h->t5_len, "dim", (json_int_t)h->t5_dim, "vocab",
		(json_int_t)h->t5_vocab, "weights_sha256", t5w, "tokenizer", t5t));
	json_object_set_new(o, "clip", json_pack("{s:I, s:I, s:I, s:s, s:s}", "len",
		(json_int_t)h->clip_len, "dim", (json_int_t)h->clip_dim, "vocab",
		(json_int_t)h->clip_vocab, "weights_sha256", clw, "tokenizer", clt));
	if (h->flags & FLUXREC_MOMENTS)
		json_object_set_new(o, "autoencoder", json_pack("{s:[I, I, I], s:f, s:f, s:s}",
			"moments", (json_int_t)h->latent_channels, (json_int_t)h->latent_height,
			(json_int_t)h->latent_width, "scale_factor", (double)h->ae_scale,
			"shift_factor", (double)h->ae_shift, "weights_sha256", aew));
	return o;
}

static void header_text(const fluxrec_header *h, FILE *out)
{
	char sha[65];
	fprintf(out, "images      %u x %u, %s%s%s\n", h->image_size, h->image_size,
		h->flags & FLUXREC_PIXELS ? "RGB pixels" : "",
		(h->flags & FLUXREC_PIXELS) && (h->flags & FLUXREC_MOMENTS) ? " and " : "",
		h->flags & FLUXREC_MOMENTS ? "autoencoder moments" : "");
	if (h->flags & FLUXREC_MOMENTS)
		fprintf(out, "moments     %u x %u x %u (mean, logvar), scale %g, shift %g\n",
			h->latent_channels, h->latent_height, h->latent_width, (double)h->ae_scale,
			(double)h->ae_shift);
	fprintf(out, "crop        %s", h->flags & FLUXREC_CROP_RANDOM ? "random" : "center");
	if (h->flags & FLUXREC_CROP_RANDOM)
		fprintf(out, ", seed %llu", (unsigned long long)h->seed);
	fprintf(out, "\nT5          %u x %u states, vocab %u\n", h->t5_len, h->t5_dim, h->t5_vocab);
	fprintf(out, "CLIP        %u ids, %u pooled, vocab %u\n", h->clip_len, h->clip_dim,
		h->clip_vocab);
	fprintf(out, "storage     %s (encoders in %s), %llu bytes per record\n",
		dtype_name(h->dtype), dtype_name(h->model_dtype), (unsigned long long)h->record_bytes);
	sha256_hex(h->t5_weights, sha);
	fprintf(out, "t5 sha256   %s\n", sha);
	sha256_hex(h->clip_weights, sha);
	fprintf(out, "clip sha256 %s\n", sha);
	if (h->flags & FLUXREC_MOMENTS) {
		sha256_hex(h->ae_weights, sha);
		fprintf(out, "ae sha256   %s\n", sha);
	}
}

static int info_file(const char *path, int json, FILE *out, titan_err *err)
{
	fluxrec_file *f = fluxrec_file_open(path, err);
	if (f == NULL)
		return -1;
	if (json) {
		json_t *o = header_json(&f->h);
		json_object_set_new(o, "file", json_string(path));
		json_object_set_new(o, "records", json_integer((json_int_t)f->n));
		json_object_set_new(o, "data_crc", json_integer((json_int_t)f->data_crc));
		json_dumpf(o, out, JSON_INDENT(2));
		fputc('\n', out);
		json_decref(o);
	} else {
		fprintf(out, "%s: Flux records version %u, %llu records\n", path, FLUXREC_VERSION,
			(unsigned long long)f->n);
		header_text(&f->h, out);
	}
	fluxrec_file_close(f);
	return 0;
}

int fluxrec_info(const char *path, int is_dir, int json, FILE *out, titan_err *err)
{
	if (!is_dir)
		return info_file(path, json, out, err);
	manifest m;
	if (manifest_read(path, &m, err) != 0)
		return -1;
	if (json) {
		char mp[4200];
		snprintf(mp, sizeof mp, "%s/manifest.json", path);
		json_error_t je;
		json_t *o = json_load_file(mp, 0, &je);
		if (o != NULL) {
			json_dumpf(o, out, JSON_INDENT(2));
			fputc('\n', out);
			json_decref(o);
		}
		manifest_free(&m);
		return o ? 0 : err_set(err, "%s:%d: %s", mp, je.line, je.text);
	}
	fprintf(out, "%s: Flux record shards, %s\n", path, m.complete ? "complete" :
		"INCOMPLETE (interrupted; rerun titan-shard with the same input to finish)");
	fprintf(out, "options     %llu records per shard, ", (unsigned long long)m.shard_records);
	if (m.val_records)
		fprintf(out, "first %llu records to val\n", (unsigned long long)m.val_records);
	else
		fprintf(out, "val fraction %g\n", m.val_fraction);
	for (int s = 0; s < 2; s++) {
		uint64_t bytes = 0;
		for (size_t i = 0; i < m.split[s].n; i++)
			bytes += m.split[s].shards[i].bytes;
		fprintf(out, "%-11s %zu shards, %llu records, %llu bytes\n", split_names[s],
			m.split[s].n, (unsigned long long)m.split[s].records, (unsigned long long)bytes);
	}
	fprintf(out, "input       %llu records, CRC-32C 0x%08x\n",
		(unsigned long long)m.input_records, m.input_crc);
	const split *sp = m.split[0].n ? &m.split[0] : &m.split[1];
	int rc = 0;
	if (sp->n) {
		char fp[4200];
		snprintf(fp, sizeof fp, "%s/%s", path, sp->shards[0].file);
		fluxrec_file *f = fluxrec_file_open(fp, err);
		if (f == NULL)
			rc = -1;
		else
			header_text(&f->h, out);
		fluxrec_file_close(f);
	}
	manifest_free(&m);
	return rc;
}
