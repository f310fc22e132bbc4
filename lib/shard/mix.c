/* A mixture of shard folders: its manifest.json (titan-formats(5), MIXTURES). */
#include "shard/shard.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/afile.h"
#include "core/sha256.h"

#define MIX_FORMAT "titan-mixture"

static json_t *load_manifest(const char *dir, char *path, size_t cap, titan_err *err)
{
	snprintf(path, cap, "%s/manifest.json", dir);
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	if (root == NULL)
		err_set(err, "%s:%d: %s", path, je.line, je.text);
	return root;
}

int shard_dir_is_mix(const char *dir)
{
	char path[4096];
	titan_err err;
	json_t *root = load_manifest(dir, path, sizeof path, &err);
	const char *fmt = json_string_value(json_object_get(root, "format"));
	int is = fmt != NULL && strcmp(fmt, MIX_FORMAT) == 0;
	json_decref(root);
	return is;
}

void shard_mix_free(shard_mix *m)
{
	for (size_t i = 0; m->src && i < m->n; i++) {
		free(m->src[i].path);
		free(m->src[i].dir);
	}
	free(m->src);
	memset(m, 0, sizeof *m);
}

static char *resolve(const char *dir, const char *path)
{
	size_t n = strlen(dir) + strlen(path) + 2;
	char *p = malloc(n);
	if (p != NULL)
		snprintf(p, n, "%s%s%s", path[0] == '/' ? "" : dir, path[0] == '/' ? "" : "/", path);
	return p;
}

/* Source i of the "sources" array; a message names its field. */
static int read_source(json_t *e, const char *dir, const char *name, size_t i,
		       shard_mix_source *s, titan_err *err)
{
	json_t *w = json_object_get(e, "weight"), *t = json_object_get(e, "tokens");
	json_t *d = json_object_get(e, "docs");
	const char *path = json_string_value(json_object_get(e, "path"));
	const char *sha = json_string_value(json_object_get(e, "manifest_sha256"));
	uint8_t dig[32];
	if (path == NULL || path[0] == '\0')
		return err_set(err, "%s: sources[%zu].path: missing or not a string", name, i);
	if (!json_is_number(w) || !(json_number_value(w) >= 0) || !isfinite(json_number_value(w)))
		return err_set(err, "%s: sources[%zu].weight: not a finite number >= 0", name, i);
	if (sha256_unhex(sha, dig) != 0)
		return err_set(err, "%s: sources[%zu].manifest_sha256: not 64 hex digits", name, i);
	if (!json_is_integer(t) || json_integer_value(t) < 0 || !json_is_integer(d) ||
	    json_integer_value(d) < 0)
		return err_set(err, "%s: sources[%zu]: tokens / docs missing or negative", name, i);
	s->weight = json_number_value(w);
	sha256_hex(dig, s->manifest_sha256); /* lowercase, as sha256_file_hex writes it */
	s->tokens = (uint64_t)json_integer_value(t);
	s->docs = (uint64_t)json_integer_value(d);
	s->path = strdup(path);
	s->dir = resolve(dir, path);
	return s->path && s->dir ? 0 : err_set(err, "%s: out of memory", name);
}

static int read_mix(json_t *root, const char *dir, const char *name, shard_mix *m,
		    titan_err *err)
{
	json_t *ver = json_object_get(root, "version"), *seed = json_object_get(root, "seed");
	json_t *tok = json_object_get(root, "tokenizer"), *arr = json_object_get(root, "sources");
	json_t *vocab = json_object_get(tok, "vocab_size");
	if (!json_is_integer(ver) || json_integer_value(ver) != 1)
		return err_set(err, "%s: version is not 1 (a newer titan-shard's mixture?)", name);
	if (!json_is_integer(seed) || json_integer_value(seed) < 0)
		return err_set(err, "%s: seed: missing or negative", name);
	if (sha256_unhex(json_string_value(json_object_get(tok, "fingerprint")), m->fingerprint) ||
	    !json_is_integer(vocab) || json_integer_value(vocab) < 1 ||
	    json_integer_value(vocab) > UINT32_MAX)
		return err_set(err, "%s: tokenizer: fingerprint or vocab_size missing or bad", name);
	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return err_set(err, "%s: sources: missing or empty", name);
	m->seed = (uint64_t)json_integer_value(seed);
	m->vocab_size = (uint32_t)json_integer_value(vocab);
	m->src = calloc(json_array_size(arr), sizeof *m->src);
	if (m->src == NULL)
		return err_set(err, "%s: out of memory", name);
	double total = 0;
	for (m->n = 0; m->n < json_array_size(arr); m->n++) {
		if (read_source(json_array_get(arr, m->n), dir, name, m->n, &m->src[m->n], err))
			return -1;
		total += m->src[m->n].weight;
	}
	if (!(total > 0))
		return err_set(err, "%s: the weights sum to 0", name);
	return 0;
}

int shard_mix_read(const char *dir, shard_mix *m, titan_err *err)
{
	memset(m, 0, sizeof *m);
	char path[4096];
	json_t *root = load_manifest(dir, path, sizeof path, err);
	if (root == NULL)
		return -1;
	const char *fmt = json_string_value(json_object_get(root, "format"));
	int rc = fmt == NULL || strcmp(fmt, MIX_FORMAT) != 0
			 ? err_set(err, "%s: format is not \"" MIX_FORMAT "\"", path)
			 : read_mix(root, dir, path, m, err);
	json_decref(root);
	if (rc != 0)
		shard_mix_free(m);
	return rc;
}

/* The source's manifest: its digest, then its contents. */
static int source_manifest(const char *dir, char sha[65], shard_manifest *sm, titan_err *err)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return err_set(err, "%s: no such folder", dir);
	if (shard_dir_is_mix(dir))
		return err_set(err, "%s: a mixture, not a shard folder (name its sources instead)",
			       dir);
	if (sha256_file_hex(path, sha, err) != 0 || shard_manifest_read(dir, sm, err) != 0)
		return -1;
	if (!sm->complete) {
		shard_manifest_free(sm);
		return err_set(err, "%s: incomplete shard set (titan-shard was interrupted; rerun it "
			       "to finish)", dir);
	}
	return 0;
}

int shard_mix_source_manifest(const shard_mix *m, size_t i, shard_manifest *sm, titan_err *err)
{
	const shard_mix_source *s = &m->src[i];
	char sha[65];
	if (source_manifest(s->dir, sha, sm, err) != 0)
		return err_prefix(err, "mixture source %zu", i + 1);
	if (strcmp(sha, s->manifest_sha256) == 0)
		return 0;
	shard_manifest_free(sm);
	return err_set(err, "mixture source %zu (%s): its manifest.json changed since the mixture "
		       "was made (SHA-256 %.12s..., the mixture names %.12s...); run titan-shard "
		       "mix again", i + 1, s->dir, sha, s->manifest_sha256);
}

/* ---- writing */

/* The path from folder `from` to `to` (both absolute, canonical), as
 * "../x/y"; "." when they are the same. */
static void relative(const char *from, const char *to, char *out, size_t cap)
{
	size_t common = 0;
	for (size_t i = 0;; i++) { /* the last '/' (or end) both share */
		char a = from[i], b = to[i];
		if ((a == '/' || a == '\0') && (b == '/' || b == '\0'))
			common = i;
		if (a != b || a == '\0')
			break;
	}
	out[0] = '\0';
	size_t len = 0;
	for (const char *p = from + common; *p; p++)
		if (*p == '/')
			len += (size_t)snprintf(out + len, cap - len, "%s..", len ? "/" : "");
	const char *rest = to + common + (to[common] == '/');
	if (*rest)
		snprintf(out + len, cap - len, "%s%s", len ? "/" : "", rest);
	else if (len == 0)
		snprintf(out, cap, ".");
}

static int check_weights(const double *w, size_t n, titan_err *err)
{
	double total = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(w[i] >= 0) || !isfinite(w[i]))
			return err_set(err, "--weight %g (source %zu): weights must be finite and >= 0",
				       w[i], i + 1);
		total += w[i];
	}
	if (!(total > 0) || !isfinite(total))
		return err_set(err, "the weights sum to %g: at least one must be positive", total);
	return 0;
}

/* Source i into e (its manifest checked, its tokenizer against m's, its
 * folder against the earlier ones'). */
static int add_source(shard_mix *m, char real[][PATH_MAX], size_t i, const char *src,
		      json_t *arr, titan_err *err)
{
	shard_manifest sm;
	char sha[65];
	if (source_manifest(src, sha, &sm, err) != 0)
		return -1;
	int rc = 0;
	if (realpath(src, real[i]) == NULL)
		rc = err_errno(err, "%s", src);
	for (size_t j = 0; rc == 0 && j < i; j++)
		if (strcmp(real[i], real[j]) == 0 || strcmp(sha, m->src[j].manifest_sha256) == 0)
			rc = err_set(err, "sources %zu and %zu (%s) are the same data; name it once "
				     "with the sum of the weights", j + 1, i + 1, src);
	if (rc == 0 && i == 0) {
		memcpy(m->fingerprint, sm.stream.fingerprint, 32);
		m->vocab_size = sm.stream.vocab_size;
	} else if (rc == 0 && (memcmp(m->fingerprint, sm.stream.fingerprint, 32) != 0 ||
			       m->vocab_size != sm.stream.vocab_size)) {
		rc = err_set(err, "%s: tokenized with another tokenizer than %s (fingerprint or "
			     "vocabulary differs)", src, m->src[0].path);
	}
	if (rc == 0 && sm.split[SHARD_TRAIN].tokens == 0)
		rc = err_set(err, "%s: its train split is empty", src);
	if (rc == 0) { /* "path" is set once the output folder is known */
		snprintf(m->src[i].manifest_sha256, 65, "%s", sha);
		m->src[i].path = strdup(src);
		json_t *e = json_pack("{s:s, s:f, s:s, s:I, s:I}", "path", "", "weight",
				      m->src[i].weight, "manifest_sha256", sha, "tokens",
				      (json_int_t)sm.split[SHARD_TRAIN].tokens, "docs",
				      (json_int_t)sm.split[SHARD_TRAIN].docs);
		if (m->src[i].path == NULL || e == NULL || json_array_append_new(arr, e) != 0)
			rc = err_set(err, "out of memory");
	}
	shard_manifest_free(&sm);
	return rc;
}

/* out's folder (made when missing) as a canonical path; a shard folder there
 * is refused, a mixture replaced. */
static int prepare_out(const char *out, char *real, titan_err *err)
{
	if (mkdir(out, 0777) != 0 && errno != EEXIST)
		return err_errno(err, "%s: cannot make the folder", out);
	if (realpath(out, real) == NULL)
		return err_errno(err, "%s", out);
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/manifest.json", out);
	struct stat st;
	if (stat(path, &st) == 0 && !shard_dir_is_mix(out))
		return err_set(err, "%s: holds a shard folder's manifest.json; a mixture goes into a "
			       "folder of its own", out);
	return 0;
}

static int write_json(const char *out, json_t *root, titan_err *err)
{
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
	if (text == NULL)
		return err_set(err, "%s/manifest.json: out of memory", out);
	char path[4096];
	snprintf(path, sizeof path, "%s/manifest.json", out);
	size_t n = strlen(text);
	text[n] = '\n'; /* replaces the NUL: written by length */
	int rc = atomic_write_file(path, text, n + 1, err);
	free(text);
	return rc;
}

int shard_mix_write(const char *out, char *const *sources, const double *weights, size_t n,
		    uint64_t seed, titan_err *err)
{
	if (n == 0)
		return err_set(err, "a mixture needs at least one source");
	if (seed >= (1ull << 63))
		return err_set(err, "--seed %llu is not below 2^63", (unsigned long long)seed);
	if (check_weights(weights, n, err) != 0)
		return -1;
	shard_mix m = {.seed = seed, .n = n, .src = calloc(n, sizeof *m.src)};
	char (*real)[PATH_MAX] = calloc(n, PATH_MAX);
	char outreal[PATH_MAX], fp[65];
	json_t *arr = json_array();
	int rc = m.src && real && arr ? 0 : err_set(err, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		m.src[i].weight = weights[i];
		rc = add_source(&m, real, i, sources[i], arr, err);
	}
	if (rc == 0) /* the sources are sound: only now make the folder */
		rc = prepare_out(out, outreal, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char rel[PATH_MAX];
		relative(outreal, real[i], rel, sizeof rel);
		if (strcmp(real[i], outreal) == 0)
			rc = err_set(err, "%s: the output folder is a source", out);
		else if (json_object_set_new(json_array_get(arr, i), "path", json_string(rel)) != 0)
			rc = err_set(err, "out of memory");
	}
	if (rc == 0) {
		sha256_hex(m.fingerprint, fp);
		json_t *root = json_pack("{s:s, s:i, s:I, s:{s:s, s:I}, s:O}", "format", MIX_FORMAT,
					 "version", 1, "seed", (json_int_t)seed, "tokenizer",
					 "fingerprint", fp, "vocab_size", (json_int_t)m.vocab_size,
					 "sources", arr);
		rc = root ? write_json(out, root, err) : err_set(err, "out of memory");
		json_decref(root);
	}
	json_decref(arr);
	free(real);
	shard_mix_free(&m);
	return rc;
}

int shard_mix_verify(const char *dir, void (*warn)(const char *msg), titan_err *err)
{
	shard_mix m;
	if (shard_mix_read(dir, &m, err) != 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m.n; i++) {
		shard_manifest sm;
		if ((rc = shard_mix_source_manifest(&m, i, &sm, err)) != 0)
			break;
		if (memcmp(sm.stream.fingerprint, m.fingerprint, 32) != 0 ||
		    sm.stream.vocab_size != m.vocab_size)
			rc = err_set(err, "mixture source %zu (%s): another tokenizer than the "
				     "mixture's", i + 1, m.src[i].dir);
		shard_manifest_free(&sm);
		if (rc == 0)
			rc = shard_verify_dir(m.src[i].dir, warn, err);
	}
	shard_mix_free(&m);
	return rc;
}
