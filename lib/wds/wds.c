/* wds.c: webdataset shards through libarchive (see wds.h for what is read as
 * datasets reads it, and what is refused). */
#include <stdlib.h>
#include <string.h>

#include <archive.h>
#include <archive_entry.h>

#include "unicode/unicode.h"
#include "wds/wds.h"

const wds_limits wds_default_limits = {WDS_MAX_MEMBER, WDS_MAX_FIELDS};

struct wds {
	struct archive *a;
	wds_limits lim;
	char *name; /* the shard, for messages */
	int at_end;          /* libarchive said EOF: it may not be asked again */
	int pending;         /* a member read ahead: the first of the next sample */
	char *pending_key;
	wds_field pending_field;
	uint64_t index;
	void (*refused)(void *ctx, const char *msg); /* lenient mode: see wds_on_refused */
	void *refused_ctx;
};

static void field_free(wds_field *f)
{
	free(f->name);
	free(f->data);
	memset(f, 0, sizeof *f);
}

void wds_sample_free(wds_sample *s)
{
	for (int i = 0; i < s->n_fields; i++)
		field_free(&s->fields[i]);
	free(s->fields);
	free(s->key);
	memset(s, 0, sizeof *s);
}

const wds_field *wds_field_get(const wds_sample *s, const char *name)
{
	for (int i = 0; i < s->n_fields; i++)
		if (strcmp(s->fields[i].name, name) == 0)
			return &s->fields[i];
	return NULL;
}

int wds_utf8_valid(const uint8_t *d, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = uni_utf8_decode(d + i, n - i, &cp);
		if (cp & UNI_BAD)
			return 0;
		i += k;
	}
	return 1;
}

static int open_common(wds **out, const char *name, const wds_limits *lim, titan_err *err)
{
	wds *w = calloc(1, sizeof *w);
	if (w == NULL || (w->name = strdup(name)) == NULL || (w->a = archive_read_new()) == NULL) {
		if (w)
			free(w->name);
		free(w);
		return err_set(err, "%s: out of memory", name);
	}
	w->lim = lim ? *lim : wds_default_limits;
	archive_read_support_filter_all(w->a);
	archive_read_support_format_tar(w->a);
	/* tar files back to back (cat a.tar b.tar, titan-hf-fetch --stdout) read as
	 * one: the end-of-archive blocks between them are passed over */
	if (archive_read_set_format_option(w->a, "tar", "read_concatenated_archives", "1") <
	    ARCHIVE_WARN) {
		err_set(err, "%s: %s", name, archive_error_string(w->a));
		wds_close(w);
		return -1;
	}
	*out = w;
	return 0;
}

int wds_open(wds **out, const char *path, const wds_limits *lim, titan_err *err)
{
	if (open_common(out, path, lim, err) != 0)
		return -1;
	wds *w = *out;
	int r = strcmp(path, "-") == 0 ? archive_read_open_fd(w->a, 0, 1 << 16)
				       : archive_read_open_filename(w->a, path, 1 << 16);
	if (r != ARCHIVE_OK) {
		err_set(err, "%s: %s", path, archive_error_string(w->a));
		wds_close(w);
		*out = NULL;
		return -1;
	}
	return 0;
}

int wds_open_memory(wds **out, const void *buf, size_t size, const wds_limits *lim,
		    titan_err *err)
{
	if (open_common(out, "(memory)", lim, err) != 0)
		return -1;
	wds *w = *out;
	if (archive_read_open_memory(w->a, buf, size) != ARCHIVE_OK) {
		err_set(err, "%s: %s", w->name, archive_error_string(w->a));
		wds_close(w);
		*out = NULL;
		return -1;
	}
	return 0;
}

void wds_on_refused(wds *w, void (*fn)(void *ctx, const char *msg), void *ctx)
{
	w->refused = fn;
	w->refused_ctx = ctx;
}

void wds_close(wds *w)
{
	if (w == NULL)
		return;
	if (w->a)
		archive_read_free(w->a);
	free(w->pending_key);
	field_free(&w->pending_field);
	free(w->name);
	free(w);
}

/* datasets skips these: hidden files and dunder files. */
static int hidden(const char *name)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	return base[0] == '.' || (base[0] == '_' && base[1] == '_');
}

static int unsafe_name(const char *name)
{
	if (name[0] == '/')
		return 1;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return 1;
	for (const char *seg = name; seg != NULL;) {
		const char *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);
		if (n == 2 && seg[0] == '.' && seg[1] == '.')
			return 1;
		seg = end ? end + 1 : NULL;
	}
	return 0;
}

/* A member's name for a message: printable ASCII as it is, other bytes as
 * \xNN, cut at a length a message can carry. */
static const char *printable(const char *name, char *buf, size_t cap)
{
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)name; *p && o + 8 < cap; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '\\')
			buf[o++] = (char)*p;
		else
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
	}
	if (name[0] && o + 8 >= cap)
		o += (size_t)snprintf(buf + o, cap - o, "...");
	buf[o] = 0;
	return buf;
}

/* A member-level refusal: reported and passed over in lenient mode (1), else
 * the error it is (-1). */
static int refuse(wds *w, titan_err *err)
{
	if (w->refused == NULL)
		return -1;
	w->refused(w->refused_ctx, err->msg);
	return 1;
}

/* One member's name: the key and field of webdataset's base_plus_ext, or -1
 * when the base name has no "." (skipped). */
static int split_name(const char *name, char **key, char **field)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	if (dot == NULL || dot == base)
		return -1;
	*key = strndup(name, (size_t)(dot - name));
	*field = strdup(dot + 1);
	return 0;
}

/* The next member that makes part of a sample: 1, 0 at the end, -1. */
static int read_member(wds *w, char **key, wds_field *f, titan_err *err)
{
	while (!w->at_end) {
		struct archive_entry *e;
		int r = archive_read_next_header(w->a, &e);
		if (r == ARCHIVE_EOF) {
			w->at_end = 1;
			return 0;
		}
		if (r < ARCHIVE_WARN)
			return err_set(err, "%s: %s", w->name, archive_error_string(w->a));
		const char *name = archive_entry_pathname(e);
		if (name == NULL || archive_entry_filetype(e) != AE_IFREG ||
		    archive_entry_hardlink(e) != NULL || hidden(name))
			continue;
		if (unsafe_name(name)) {
			char pn[256];
			err_set(err, "%s: member %s refused: an absolute name, a \"..\" component or "
				"a control character", w->name, printable(name, pn, sizeof pn));
			if (refuse(w, err) < 0)
				return -1;
			continue;
		}
		if (split_name(name, key, &f->name) != 0)
			continue;
		if (*key == NULL || f->name == NULL) {
			free(*key);
			field_free(f);
			return err_set(err, "%s: out of memory", w->name);
		}
		int64_t size = archive_entry_size(e);
		if (size < 0 || (uint64_t)size > w->lim.max_member) {
			char pn[256];
			err_set(err, "%s: member %s refused: %lld bytes, over the limit of %llu",
				w->name, printable(name, pn, sizeof pn), (long long)size,
				(unsigned long long)w->lim.max_member);
			free(*key);
			field_free(f);
			if (refuse(w, err) < 0)
				return -1;
			continue;
		}
		f->size = (size_t)size;
		f->data = malloc(f->size + 1);
		if (f->data == NULL) {
			free(*key);
			field_free(f);
			return err_set(err, "%s: out of memory for member %s", w->name, name);
		}
		la_ssize_t got = f->size ? archive_read_data(w->a, f->data, f->size) : 0;
		if (got != (la_ssize_t)f->size) {
			err_set(err, "%s: member %s: %s", w->name, name,
				got < 0 ? archive_error_string(w->a) : "truncated");
			free(*key);
			field_free(f);
			return -1;
		}
		f->data[f->size] = 0;
		return 1;
	}
	return 0;
}

static int add_field(wds *w, wds_sample *s, wds_field *f, titan_err *err)
{
	if (wds_field_get(s, f->name) != NULL)
		return err_set(err, "%s: sample %s: field %s twice", w->name, s->key, f->name);
	if (s->n_fields >= w->lim.max_fields)
		return err_set(err, "%s: sample %s: more than %d fields", w->name, s->key,
			       w->lim.max_fields);
	wds_field *t = realloc(s->fields, (size_t)(s->n_fields + 1) * sizeof *t);
	if (t == NULL)
		return err_set(err, "%s: out of memory", w->name);
	s->fields = t;
	s->fields[s->n_fields++] = *f;
	memset(f, 0, sizeof *f);
	return 0;
}

int wds_next(wds *w, wds_sample *s, titan_err *err)
{
	wds_sample_free(s);
	char *key = NULL;
	wds_field f = {0};
	if (w->pending) {
		key = w->pending_key;
		f = w->pending_field;
		w->pending = 0;
		w->pending_key = NULL;
		memset(&w->pending_field, 0, sizeof w->pending_field);
	} else {
		int r = read_member(w, &key, &f, err);
		if (r <= 0)
			return r;
	}
	s->key = key;
	s->index = w->index;
	for (;;) {
		if (add_field(w, s, &f, err) != 0) {
			field_free(&f);
			if (refuse(w, err) < 0) {
				wds_sample_free(s);
				return -1;
			}
		}
		int r = read_member(w, &key, &f, err);
		if (r < 0) {
			wds_sample_free(s);
			return -1;
		}
		if (r == 0)
			break;
		if (strcmp(key, s->key) != 0) {
			w->pending = 1;
			w->pending_key = key;
			w->pending_field = f;
			break;
		}
		free(key);
	}
	w->index++;
	return 1;
}
