/* Reading documents through libarchive: an outer reader detects the
 * compression filter and the container (tar, zip, or raw bytes); each member
 * of a container gets an inner reader (filters + raw) so that a tar of .json.gz
 * files is read as well as a plain .json.gz. */
#include "textin/textin_impl.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEXTIN_CHUNK (256 * 1024)

/* What an archive reads from: a file descriptor or another archive's current
 * member.  delivered counts bytes handed over, to tell empty input (which
 * libarchive refuses as "unrecognized format") from garbage. */
typedef struct src {
	int fd;
	struct archive *from;
	uint64_t delivered;
	int failed; /* a read failed (as opposed to: no bytes at all) */
	char *buf;
	uint8_t head[6]; /* the first bytes, to name a compressor libarchive missed */
	size_t nhead;
	const char *filter;      /* filter_of() the archive reading this source */
	const char *from_filter; /* and of from, when the data comes from it */
} src;

struct textin {
	textin_opts o;
	char *path;   /* as given, for messages ("<stdin>" for "-") */
	int fd;
	struct archive *outer, *inner;
	src outer_src, inner_src;
	int outer_raw;    /* no container: the data is the outer reader's */
	int in_member;    /* a member is open for reading */
	int member_eof;
	int finished;
	char *where;      /* "file" or "file:member" */
	char *chunk;
	size_t clen, cpos;
	textin_buf line, doc;
	uint64_t lineno, doc_line, skipped, bytes;
};

/* Keep the first bytes a source delivers. */
static void keep_head(src *s, const char *p, size_t n)
{
	while (s->nhead < sizeof s->head && n--)
		s->head[s->nhead++] = (uint8_t)*p++;
}

/* A compressor's magic at the start of data that libarchive read as plain:
 * the stream is too short to decompress.  Returns its name, or NULL. */
static const char *missed_compressor(const src *s)
{
	static const struct {
		const char *name;
		uint8_t magic[6];
		size_t n;
	} known[] = {
		{"gzip", {0x1f, 0x8b}, 2},
		{"zstd", {0x28, 0xb5, 0x2f, 0xfd}, 4},
		{"xz", {0xfd, '7', 'z', 'X', 'Z', 0}, 6},
		{"bzip2", {'B', 'Z', 'h'}, 3},
		{"lz4", {0x04, 0x22, 0x4d, 0x18}, 4},
	};
	for (size_t i = 0; i < sizeof known / sizeof *known; i++)
		if (s->nhead >= known[i].n && !memcmp(s->head, known[i].magic, known[i].n))
			return known[i].name;
	return NULL;
}

/* The compression filter an archive reads through ("gzip"), or "compressed"
 * when none is known (yet). */
static const char *filter_of(struct archive *a)
{
	const char *f = "compressed";
	for (int i = 0; a && i < archive_filter_count(a); i++) {
		const char *name = archive_filter_name(a, i);
		if (name && strcmp(name, "none"))
			f = name;
	}
	return f;
}

/* The compressor of a source's data: as libarchive said while the archive was
 * healthy, else from the data's first bytes (a short stream can fail while
 * libarchive is still opening it). */
static const char *src_filter(const src *s, const char *known)
{
	const char *m = missed_compressor(s);
	return known ? known : m ? m : "compressed";
}

/* libarchive's message, or ours when it gives none: a gzip stream cut inside
 * its 8-byte trailer fails without one; filter names the compressor. */
static const char *archive_msg(struct archive *a, const char *filter)
{
	static _Thread_local char buf[128];
	const char *m = archive_error_string(a);
	if (m)
		return m;
	snprintf(buf, sizeof buf, "truncated or corrupt %s input", filter);
	return buf;
}

static la_ssize_t fd_read(struct archive *a, void *data, const void **out)
{
	src *s = data;
	for (;;) {
		ssize_t n = read(s->fd, s->buf, TEXTIN_CHUNK);
		if (n >= 0) {
			keep_head(s, s->buf, (size_t)n);
			s->delivered += (uint64_t)n;
			*out = s->buf;
			return n;
		}
		if (errno != EINTR) {
			s->failed = 1;
			archive_set_error(a, errno, "read error: %s", strerror(errno));
			return -1;
		}
	}
}

static la_ssize_t member_read(struct archive *a, void *data, const void **out)
{
	src *s = data;
	la_ssize_t n = archive_read_data(s->from, s->buf, TEXTIN_CHUNK);
	if (n < 0) {
		s->failed = 1;
		archive_set_error(a, EIO, "%s", archive_msg(s->from, s->from_filter ? s->from_filter : "compressed"));
		return -1;
	}
	keep_head(s, s->buf, (size_t)n);
	s->delivered += (uint64_t)n;
	*out = s->buf;
	return n;
}

static int set_where(textin *t, const char *member)
{
	free(t->where);
	size_t n = strlen(t->path) + (member ? strlen(member) + 1 : 0) + 1;
	t->where = malloc(n);
	if (t->where == NULL)
		return -1;
	if (member)
		snprintf(t->where, n, "%s:%s", t->path, member);
	else
		snprintf(t->where, n, "%s", t->path);
	return 0;
}

textin *textin_open(const char *path, const textin_opts *opts, titan_err *err)
{
	textin *t = calloc(1, sizeof *t);
	if (t == NULL) {
		err_set(err, "out of memory");
		return NULL;
	}
	t->o = *opts;
	if (t->o.field == NULL)
		t->o.field = "text";
	int is_stdin = strcmp(path, "-") == 0;
	t->path = strdup(is_stdin ? "<stdin>" : path);
	t->chunk = malloc(TEXTIN_CHUNK);
	t->outer_src.buf = malloc(TEXTIN_CHUNK);
	t->inner_src.buf = malloc(TEXTIN_CHUNK);
	t->fd = -1;
	if (!t->path || !t->chunk || !t->outer_src.buf || !t->inner_src.buf || set_where(t, NULL)) {
		err_set(err, "out of memory");
		goto fail;
	}
	t->fd = is_stdin ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	if (t->fd < 0) {
		err_errno(err, "%s", path);
		goto fail;
	}
	t->outer_src.fd = t->fd;
	t->outer = archive_read_new();
	if (t->outer == NULL) {
		err_set(err, "out of memory");
		goto fail;
	}
	archive_read_support_filter_all(t->outer);
	archive_read_support_format_tar(t->outer);
	archive_read_support_format_zip(t->outer);
	archive_read_support_format_raw(t->outer);
	if (archive_read_open(t->outer, &t->outer_src, NULL, fd_read, NULL) != ARCHIVE_OK) {
		if (t->outer_src.delivered == 0 && !t->outer_src.failed) {
			t->finished = 1; /* empty input: no documents */
			return t;
		}
		err_set(err, "%s: %s", t->path, archive_msg(t->outer, src_filter(&t->outer_src, t->outer_src.filter)));
		goto fail;
	}
	return t;
fail:
	textin_close(t);
	return NULL;
}

static void close_inner(textin *t)
{
	if (t->inner) {
		archive_read_free(t->inner);
		t->inner = NULL;
	}
}

/* Open the inner reader on the outer reader's current member.  1 opened, 0
 * the member is empty, -1 error. */
static int open_inner(textin *t, titan_err *err)
{
	t->inner = archive_read_new();
	if (t->inner == NULL)
		return err_set(err, "out of memory");
	archive_read_support_filter_all(t->inner);
	archive_read_support_format_raw(t->inner);
	t->inner_src.from = t->outer;
	t->inner_src.delivered = 0;
	t->inner_src.failed = 0;
	t->inner_src.nhead = 0;
	t->inner_src.filter = NULL;
	t->inner_src.from_filter = t->outer_src.filter;
	struct archive_entry *e;
	if (archive_read_open(t->inner, &t->inner_src, NULL, member_read, NULL) != ARCHIVE_OK) {
		if (t->inner_src.delivered == 0 && !t->inner_src.failed) {
			close_inner(t);
			return 0;
		}
		err_set(err, "%s: %s", t->where, archive_msg(t->inner, src_filter(&t->inner_src, t->inner_src.filter)));
		close_inner(t);
		return -1;
	}
	int r = archive_read_next_header(t->inner, &e);
	if (r == ARCHIVE_EOF) {
		close_inner(t);
		return 0;
	}
	if (r < ARCHIVE_WARN) {
		err_set(err, "%s: %s", t->where, archive_msg(t->inner, src_filter(&t->inner_src, t->inner_src.filter)));
		close_inner(t);
		return -1;
	}
	t->inner_src.filter = filter_of(t->inner);
	const char *c = archive_filter_count(t->inner) <= 1 ? missed_compressor(&t->inner_src) : NULL;
	if (c) {
		err_set(err, "%s: truncated %s input (too short to decompress)", t->where, c);
		close_inner(t);
		return -1;
	}
	return 1;
}

/* Move to the next member with data.  1 opened, 0 no more, -1 error. */
static int next_member(textin *t, titan_err *err)
{
	close_inner(t);
	t->in_member = 0;
	if (t->finished)
		return 0;
	for (;;) {
		struct archive_entry *e;
		int r = archive_read_next_header(t->outer, &e);
		if (r == ARCHIVE_EOF) {
			t->finished = 1;
			return 0;
		}
		if (r < ARCHIVE_WARN)
			return err_set(err, "%s: %s", t->path, archive_msg(t->outer, src_filter(&t->outer_src, t->outer_src.filter)));
		t->outer_src.filter = filter_of(t->outer);
		if (archive_format(t->outer) == ARCHIVE_FORMAT_RAW) {
			t->outer_raw = 1;
			if (set_where(t, NULL) != 0)
				return err_set(err, "out of memory");
			const char *c = archive_filter_count(t->outer) <= 1
						? missed_compressor(&t->outer_src) : NULL;
			if (c)
				return err_set(err, "%s: truncated %s input (too short to decompress)",
					       t->path, c);
		} else {
			if (archive_entry_filetype(e) != AE_IFREG)
				continue;
			if (set_where(t, archive_entry_pathname(e)) != 0)
				return err_set(err, "out of memory");
			int o = open_inner(t, err);
			if (o < 0)
				return -1;
			if (o == 0)
				continue;
		}
		t->in_member = 1;
		t->member_eof = 0;
		t->clen = t->cpos = 0;
		t->lineno = 0;
		return 1;
	}
}

static int fill(textin *t, titan_err *err)
{
	struct archive *a = t->outer_raw ? t->outer : t->inner;
	la_ssize_t n = archive_read_data(a, t->chunk, TEXTIN_CHUNK);
	if (n < 0)
		return err_set(err, "%s: %s", t->where,
			       archive_msg(a, t->outer_raw ? src_filter(&t->outer_src, t->outer_src.filter)
							    : src_filter(&t->inner_src, t->inner_src.filter)));
	if (n == 0)
		t->member_eof = 1;
	t->clen = (size_t)n;
	t->cpos = 0;
	t->bytes += (uint64_t)n;
	return 0;
}

/* The next line of the current member into t->line, without its "\n".
 * 1 a line, 0 end of member, -1 error. */
static int read_line(textin *t, titan_err *err)
{
	t->line.n = 0;
	if (textin_buf_reserve(&t->line, 0) != 0)
		return err_set(err, "out of memory");
	t->line.p[0] = '\0';
	for (;;) {
		if (t->cpos == t->clen) {
			if (t->member_eof) {
				if (t->line.n == 0)
					return 0;
				t->lineno++;
				return 1;
			}
			if (fill(t, err) != 0)
				return -1;
			continue;
		}
		const char *p = t->chunk + t->cpos;
		const char *nl = memchr(p, '\n', t->clen - t->cpos);
		size_t take = nl ? (size_t)(nl - p) : t->clen - t->cpos;
		if (textin_buf_append(&t->line, p, take) != 0)
			return err_set(err, "out of memory");
		t->cpos += take + (nl != NULL);
		if (nl) {
			t->lineno++;
			return 1;
		}
	}
}

static int is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

/* A malformed line or document: skipped and counted, or the error. */
static int bad(textin *t, uint64_t line, titan_err *err)
{
	if (t->o.skip_bad) {
		t->skipped++;
		return 0;
	}
	err_prefix(err, "%s:%llu", t->where, (unsigned long long)line);
	return -1;
}

static int next_jsonl(textin *t, titan_err *err)
{
	for (;;) {
		int r = read_line(t, err);
		if (r <= 0)
			return r;
		const char *s = t->line.p;
		size_t n = t->line.n;
		if (t->lineno == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
			s += 3; /* a UTF-8 byte order mark before the first line */
			n -= 3;
		}
		if (is_blank(s, n))
			continue;
		t->doc_line = t->lineno;
		if (textin_json_field(s, n, t->o.field, &t->doc, err) == 0)
			return 1;
		if (bad(t, t->lineno, err) != 0)
			return -1;
	}
}

/* Check t->doc is UTF-8; 1 good, 0 bad and skipped, -1 error naming the line
 * that holds the first bad byte. */
static int check_text(textin *t, titan_err *err)
{
	size_t off;
	if (textin_utf8_valid(t->doc.p, t->doc.n, &off))
		return 1;
	uint64_t line = t->doc_line;
	for (size_t i = 0; i < off; i++)
		line += t->doc.p[i] == '\n';
	err_set(err, "invalid UTF-8 (byte 0x%02x)", (unsigned char)t->doc.p[off]);
	return bad(t, line, err) != 0 ? -1 : 0;
}

/* The whole member as one document (none when it is empty). */
static int read_member(textin *t, titan_err *err)
{
	t->doc_line = 1;
	for (;;) {
		if (t->cpos < t->clen &&
		    textin_buf_append(&t->doc, t->chunk + t->cpos, t->clen - t->cpos) != 0)
			return err_set(err, "out of memory");
		t->cpos = t->clen;
		if (t->member_eof)
			return t->doc.n > 0;
		if (fill(t, err) != 0)
			return -1;
	}
}

/* Lines into blocks (TEXTIN_SPLIT_BLANK) or single lines (TEXTIN_SPLIT_LINE).
 * 1 a document, 0 end of member, -1 error. */
static int read_block(textin *t, titan_err *err)
{
	int r, any = 0;
	while ((r = read_line(t, err)) > 0) {
		if (is_blank(t->line.p, t->line.n)) {
			if (any)
				return 1;
			continue;
		}
		if (any && textin_buf_append(&t->doc, "\n", 1) != 0)
			return err_set(err, "out of memory");
		if (!any)
			t->doc_line = t->lineno;
		any = 1;
		if (textin_buf_append(&t->doc, t->line.p, t->line.n) != 0)
			return err_set(err, "out of memory");
		if (t->o.split == TEXTIN_SPLIT_LINE)
			return 1;
	}
	return r < 0 ? -1 : any;
}

static int next_text(textin *t, titan_err *err)
{
	for (;;) {
		t->doc.n = 0;
		if (textin_buf_reserve(&t->doc, 0) != 0)
			return err_set(err, "out of memory");
		t->doc.p[0] = '\0';
		int r = t->o.split == TEXTIN_SPLIT_FILE ? read_member(t, err) : read_block(t, err);
		if (r <= 0)
			return r;
		int c = check_text(t, err);
		if (c != 0)
			return c;
	}
}

int textin_next(textin *t, const char **doc, size_t *len, titan_err *err)
{
	for (;;) {
		if (!t->in_member) {
			int m = next_member(t, err);
			if (m <= 0)
				return m;
		}
		int r = t->o.format == TEXTIN_JSONL ? next_jsonl(t, err) : next_text(t, err);
		if (r < 0)
			return -1;
		if (r > 0) {
			*doc = t->doc.p;
			*len = t->doc.n;
			return 1;
		}
		t->in_member = 0;
		if (t->outer_raw)
			t->finished = 1;
	}
}

const char *textin_where(const textin *t)
{
	return t->where;
}

uint64_t textin_line(const textin *t)
{
	return t->doc_line;
}

uint64_t textin_skipped(const textin *t)
{
	return t->skipped;
}

uint64_t textin_bytes(const textin *t)
{
	return t->bytes;
}

void textin_close(textin *t)
{
	if (t == NULL)
		return;
	close_inner(t);
	if (t->outer)
		archive_read_free(t->outer);
	if (t->fd > 0)
		close(t->fd);
	free(t->path);
	free(t->where);
	free(t->chunk);
	free(t->outer_src.buf);
	free(t->inner_src.buf);
	free(t->line.p);
	free(t->doc.p);
	free(t);
}
