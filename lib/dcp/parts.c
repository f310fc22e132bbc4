/* parts.c: checking storage records that the ranks of a job read in parts
 * (dcp_load_parts): the CRC-32s of the parts, joined in order, are the
 * record's when the parts tile it. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/afile.h"
#include "dcp/dcp_priv.h"
#include "ptzip/ptzip.h"

int dcp_parts_add(dcp_parts *parts, const dcp_part *p, uint64_t chunk_off, const char *fqn,
		  const char *record, titan_err *err)
{
	if (parts->n == parts->cap) {
		size_t cap = parts->cap ? 2 * parts->cap : 64;
		dcp_part *np = realloc(parts->p, cap * sizeof *np);
		if (np)
			parts->p = np;
		struct dcp_part_at *na = np ? realloc(parts->at, cap * sizeof *na) : NULL;
		if (na)
			parts->at = na;
		if (!np || !na)
			return err_set(err, "out of memory");
		parts->cap = cap;
	}
	struct dcp_part_at at = {.record = strdup(record)};
	if (asprintf(&at.where, "%.*s at %" PRIu64 " (%s)", (int)sizeof p->file, p->file, chunk_off,
		     fqn) < 0)
		at.where = NULL;
	if (!at.where || !at.record) {
		free(at.where);
		free(at.record);
		return err_set(err, "out of memory");
	}
	parts->p[parts->n] = *p;
	parts->at[parts->n++] = at;
	return 0;
}

void dcp_parts_free(dcp_parts *parts)
{
	for (size_t i = 0; i < parts->n; i++) {
		free(parts->at[i].where);
		free(parts->at[i].record);
	}
	free(parts->at);
	free(parts->p);
	memset(parts, 0, sizeof *parts);
}

static int same_record(const dcp_part *a, const dcp_part *b)
{
	return a->record == b->record && strncmp(a->file, b->file, sizeof a->file) == 0;
}

static int cmp_part(const void *x, const void *y)
{
	const dcp_part *a = x, *b = y;
	int c = strncmp(a->file, b->file, sizeof a->file);
	if (c)
		return c;
	if (a->record != b->record)
		return a->record < b->record ? -1 : 1;
	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return a->len < b->len ? -1 : a->len > b->len;
}

/* The CRC-32 of record r joined from the sorted parts p[0..n) of it; 0 when
 * they tile [0, record_len) exactly, agree on the record, and two ranks'
 * copies of the same rows agree; -1 otherwise (then read it whole). */
static int joined_crc(const dcp_part *r, const dcp_part *p, size_t n, uint32_t *crc)
{
	uint64_t pos = 0;
	*crc = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i].record_len != r->record_len || p[i].record_crc != r->record_crc)
			return -1;
		if (i > 0 && p[i].off == p[i - 1].off && p[i].len == p[i - 1].len) {
			if (p[i].crc != p[i - 1].crc)
				return -1; /* the same rows read twice, differently */
			continue;
		}
		if (p[i].off != pos)
			return -1; /* a gap or an overlap */
		*crc = ptz_crc32_combine(*crc, p[i].crc, p[i].len);
		pos += p[i].len;
	}
	return pos == r->record_len ? 0 : -1;
}

/* The CRC-32 of record r of DIR read whole (r is this rank's: its file name
 * passed parse_storage's check, a plain name). */
static int read_crc(const char *dir, const dcp_part *r, uint32_t *crc, titan_err *err)
{
	char file[sizeof r->file + 1];
	snprintf(file, sizeof file, "%.*s", (int)sizeof r->file, r->file);
	char *path = path_join(dir, file);
	if (!path)
		return err_set(err, "out of memory");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return err_errno(err, "%s/%s", dir, file);
	enum { BUF = 8 << 20 };
	uint8_t *buf = malloc(BUF);
	int rc = buf ? 0 : err_set(err, "out of memory");
	*crc = 0;
	for (uint64_t done = 0; rc == 0 && done < r->record_len;) {
		size_t want = r->record_len - done < BUF ? (size_t)(r->record_len - done) : BUF;
		uint32_t piece;
		int got = dcp_pread_crc(fd, buf, want, (off_t)(r->record + done), &piece);
		if (got == READ_IO)
			rc = err_errno(err, "%s/%s: read", dir, file);
		else if (got != READ_OK)
			rc = err_set(err, "%s/%s: ends inside the record at %" PRIu64, dir, file, r->record);
		*crc = ptz_crc32_combine(*crc, piece, want);
		done += want;
	}
	free(buf);
	close(fd);
	return rc;
}

/* The first of the sorted parts s[0..n) at or after r's record (lower bound). */
static size_t first_of(const dcp_part *r, const dcp_part *s, size_t n)
{
	dcp_part key = *r;
	key.off = 0;
	key.len = 0;
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cmp_part(&s[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Check the record of mine's part i against p[0..n), every rank's parts of
 * that record, in order. */
static int check_record(const char *dir, const dcp_parts *mine, size_t i, const dcp_part *p,
			size_t n, titan_err *err)
{
	const dcp_part *r = &mine->p[i];
	uint32_t crc;
	if (joined_crc(r, p, n, &crc) != 0 && read_crc(dir, r, &crc, err) != 0)
		return -1;
	if (crc != r->record_crc) /* in verify's words (ptz_crc_matches) */
		return err_set(err, "%s/%s: zip: %s: CRC-32 %08x, expected %08x (the file is damaged)",
			       dir, mine->at[i].where, mine->at[i].record, crc, r->record_crc);
	return 0;
}

int dcp_parts_check(const char *dir, const dcp_parts *mine, const dcp_part *all, size_t n_all,
		    titan_err *err)
{
	if (mine->n == 0)
		return 0;
	dcp_part *s = malloc((n_all ? n_all : 1) * sizeof *s);
	uint8_t *done = calloc(n_all ? n_all : 1, 1); /* by a record's first part in s */
	if (!s || !done) {
		free(s);
		free(done);
		return err_set(err, "out of memory");
	}
	memcpy(s, all, n_all * sizeof *s);
	qsort(s, n_all, sizeof *s, cmp_part);
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < mine->n; i++) {
		const dcp_part *r = &mine->p[i];
		size_t lo = first_of(r, s, n_all), end = lo;
		while (end < n_all && same_record(&s[end], r))
			end++;
		if (end > lo && done[lo])
			continue; /* a record this rank read twice is checked once */
		if (end > lo)
			done[lo] = 1;
		rc = check_record(dir, mine, i, s + lo, end - lo, err);
	}
	free(done);
	free(s);
	return rc;
}
