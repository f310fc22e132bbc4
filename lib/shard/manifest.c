/* manifest.json of a shard folder: what titan-shard wrote and how. */
#include "shard/shard.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/afile.h"
#include "core/mfile.h"
#include "core/sha256.h"

static const char *split_name[2] = {"train", "val"};

int shard_split_of(const shard_manifest *m, uint64_t i)
{
	if (m->val_docs > 0)
		return i < m->val_docs ? SHARD_VAL : SHARD_TRAIN;
	if (m->val_fraction <= 0)
		return SHARD_TRAIN;
	/* Document i is val when floor((i+1) f) > floor(i f): exactly floor(n f) of
	 * the first n documents, spread evenly, the same on every rerun. */
	double f = m->val_fraction;
	return floor((double)(i + 1) * f) > floor((double)i * f) ? SHARD_VAL : SHARD_TRAIN;
}

static json_t *split_json(const shard_split *sp)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < sp->n_shards; i++) {
		const shard_entry *e = &sp->shards[i];
		json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			"file", e->file, "tokens", (json_int_t)e->tokens, "docs", (json_int_t)e->docs,
			"bytes", (json_int_t)e->bytes, "first_doc", (json_int_t)e->first_doc,
			"header_crc", (json_int_t)e->header_crc, "data_crc", (json_int_t)e->data_crc,
			"index_crc", (json_int_t)e->index_crc));
	}
	return json_pack("{s:I, s:I, s:I, s:o}", "docs", (json_int_t)sp->docs, "tokens",
			 (json_int_t)sp->tokens, "next_doc", (json_int_t)sp->next_doc, "shards", arr);
}

int shard_manifest_write(const char *dir, const shard_manifest *m, titan_err *err)
{
	char fp[65];
	sha256_hex(m->stream.fingerprint, fp);
	json_t *root = json_pack(
		"{s:s, s:i, s:b,"
		" s:{s:s, s:I, s:I, s:I, s:I, s:I},"
		" s:{s:I, s:s, s:i, s:I, s:f, s:I},"
		" s:{s:I, s:I, s:I}, s:o, s:o}",
		"format", "titan-shards", "version", 1, "complete", m->complete,
		"tokenizer", "fingerprint", fp, "vocab_size", (json_int_t)m->stream.vocab_size,
		"id_width", (json_int_t)m->stream.id_width, "bos_id", (json_int_t)m->stream.bos_id,
		"eos_id", (json_int_t)m->stream.eos_id, "flags", (json_int_t)m->stream.flags,
		"options", "shard_tokens", (json_int_t)m->shard_tokens, "compress",
		m->zstd_level > 0 ? "zstd" : "none", "zstd_level", m->zstd_level, "frame_tokens",
		(json_int_t)m->frame_tokens, "val_fraction", m->val_fraction, "val_docs",
		(json_int_t)m->val_docs,
		"input", "docs", (json_int_t)m->input_docs, "tokens", (json_int_t)m->input_tokens,
		"crc32c", (json_int_t)m->input_crc,
		"train", split_json(&m->split[SHARD_TRAIN]), "val", split_json(&m->split[SHARD_VAL]));
	if (root == NULL)
		return err_set(err, "%s/manifest.json: cannot build JSON", dir);
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
	json_decref(root);
	if (text == NULL)
		return err_set(err, "%s/manifest.json: out of memory", dir);
	size_t plen = strlen(dir) + 16;
	char *path = malloc(plen);
	int rc = -1;
	if (path == NULL) {
		err_set(err, "%s/manifest.json: out of memory", dir);
	} else {
		snprintf(path, plen, "%s/manifest.json", dir);
		size_t n = strlen(text);
		text[n] = '\n'; /* replaces the NUL: the buffer is written by length */
		rc = atomic_write_file(path, text, n + 1, err);
	}
	free(path);
	free(text);
	return rc;
}

static int get_u64(json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int get_u32(json_t *o, const char *key, uint32_t *out)
{
	uint64_t v;
	if (get_u64(o, key, &v) != 0 || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int read_split(json_t *o, shard_split *sp)
{
	json_t *arr = json_object_get(o, "shards");
	if (!json_is_object(o) || !json_is_array(arr) || get_u64(o, "docs", &sp->docs) ||
	    get_u64(o, "tokens", &sp->tokens) || get_u64(o, "next_doc", &sp->next_doc))
		return -1;
	size_t n = json_array_size(arr);
	sp->shards = calloc(n ? n : 1, sizeof *sp->shards);
	if (sp->shards == NULL)
		return -1;
	sp->n_shards = n;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(arr, i);
		shard_entry *s = &sp->shards[i];
		const char *file = json_string_value(json_object_get(e, "file"));
		if (file == NULL || strlen(file) >= sizeof s->file || strchr(file, '/') ||
		    get_u64(e, "tokens", &s->tokens) || get_u64(e, "docs", &s->docs) ||
		    get_u64(e, "bytes", &s->bytes) || get_u64(e, "first_doc", &s->first_doc) ||
		    get_u32(e, "header_crc", &s->header_crc) || get_u32(e, "data_crc", &s->data_crc) ||
		    get_u32(e, "index_crc", &s->index_crc))
			return -1;
		snprintf(s->file, sizeof s->file, "%s", file);
	}
	return 0;
}

static int read_root(json_t *root, shard_manifest *m)
{
	json_t *tok = json_object_get(root, "tokenizer"), *opt = json_object_get(root, "options");
	json_t *in = json_object_get(root, "input");
	const char *fmt = json_string_value(json_object_get(root, "format"));
	json_t *b = json_object_get(tok, "bos_id"), *e = json_object_get(tok, "eos_id");
	json_t *vf = json_object_get(opt, "val_fraction"), *lv = json_object_get(opt, "zstd_level");
	if (fmt == NULL || strcmp(fmt, "titan-shards") != 0 ||
	    !json_is_boolean(json_object_get(root, "complete")) || !json_is_integer(b) ||
	    !json_is_integer(e) || !json_is_number(vf) || !json_is_integer(lv) ||
	    sha256_unhex(json_string_value(json_object_get(tok, "fingerprint")), m->stream.fingerprint) ||
	    get_u32(tok, "vocab_size", &m->stream.vocab_size) ||
	    get_u32(tok, "id_width", &m->stream.id_width) || get_u32(tok, "flags", &m->stream.flags) ||
	    get_u64(opt, "shard_tokens", &m->shard_tokens) ||
	    get_u32(opt, "frame_tokens", &m->frame_tokens) || get_u64(opt, "val_docs", &m->val_docs) ||
	    get_u64(in, "docs", &m->input_docs) || get_u64(in, "tokens", &m->input_tokens) ||
	    get_u32(in, "crc32c", &m->input_crc))
		return -1;
	json_int_t bv = json_integer_value(b), ev = json_integer_value(e);
	if (bv < -1 || bv > INT32_MAX || ev < -1 || ev > INT32_MAX ||
	    json_integer_value(lv) < 0 || json_integer_value(lv) > 22)
		return -1;
	m->stream.bos_id = (int32_t)json_integer_value(b);
	m->stream.eos_id = (int32_t)json_integer_value(e);
	m->val_fraction = json_number_value(vf);
	m->zstd_level = (int)json_integer_value(lv);
	m->complete = json_is_true(json_object_get(root, "complete"));
	for (int s = 0; s < 2; s++)
		if (read_split(json_object_get(root, split_name[s]), &m->split[s]) != 0)
			return -1;
	return 0;
}

/* Values a writer could not have produced. */
static int check_values(const shard_manifest *m)
{
	const tokstream_header *h = &m->stream;
	if (h->vocab_size == 0 || h->id_width != tokstream_id_width(h->vocab_size) ||
	    h->bos_id < -1 || h->eos_id < -1 ||
	    (h->bos_id >= 0 && (uint32_t)h->bos_id >= h->vocab_size) ||
	    (h->eos_id >= 0 && (uint32_t)h->eos_id >= h->vocab_size))
		return -1;
	if (m->zstd_level < 0 || m->zstd_level > 22 || !(m->val_fraction >= 0) ||
	    m->val_fraction > 1 || (m->zstd_level > 0) != (m->frame_tokens > 0))
		return -1;
	return 0;
}

int shard_manifest_parse(const char *text, size_t len, const char *name, shard_manifest *m,
			 titan_err *err)
{
	memset(m, 0, sizeof *m);
	json_error_t je;
	json_t *root = json_loadb(text, len, 0, &je);
	if (root == NULL)
		return err_set(err, "%s:%d: %s", name, je.line, je.text);
	const char *fmt = json_string_value(json_object_get(root, "format"));
	if (fmt != NULL && strcmp(fmt, "titan-mixture") == 0) {
		json_decref(root);
		return err_set(err, "%s: a mixture of shard folders (titan-shard mix), not a shard "
			       "folder", name);
	}
	int rc = read_root(root, m);
	json_decref(root);
	if (rc == 0 && check_values(m) != 0) {
		shard_manifest_free(m);
		return err_set(err, "%s: a value is out of range (vocabulary, ids or options)", name);
	}
	if (rc != 0) {
		shard_manifest_free(m);
		return err_set(err, "%s: not a titan-shards manifest (a field is missing or has the "
			       "wrong type)", name);
	}
	return 0;
}

int shard_manifest_read(const char *dir, shard_manifest *m, titan_err *err)
{
	memset(m, 0, sizeof *m);
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	mfile f;
	if (mfile_open(&f, path, err) != 0)
		return -1;
	int rc = shard_manifest_parse((const char *)f.data, f.size, path, m, err);
	mfile_close(&f);
	return rc;
}

void shard_manifest_free(shard_manifest *m)
{
	for (int s = 0; s < 2; s++) {
		free(m->split[s].shards);
		m->split[s].shards = NULL;
		m->split[s].n_shards = 0;
	}
}

int shard_manifest_add(shard_manifest *m, int s, const shard_entry *e, titan_err *err)
{
	shard_split *sp = &m->split[s];
	shard_entry *n = realloc(sp->shards, (sp->n_shards + 1) * sizeof *n);
	if (n == NULL)
		return err_set(err, "out of memory");
	sp->shards = n;
	sp->shards[sp->n_shards++] = *e;
	sp->tokens += e->tokens;
	sp->docs += e->docs;
	return 0;
}
