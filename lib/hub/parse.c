/* Pure parsers of the Hub protocol: globs, paths, Link headers, tree listings,
 * retry hints, etags.  No I/O, so the fuzzers can reach them. */
#include "hub/hub.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"

size_t hub_filelist_entries(const hub_filelist *l)
{
	return l->seen != NULL ? l->seen->n : 0;
}

void hub_filelist_free(hub_filelist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].path);
	free(l->v);
	if (l->seen != NULL)
		strmap_free(l->seen);
	free(l->seen);
	memset(l, 0, sizeof *l);
}

/* Match one bracket class at p against c; *end gets the char after ']'.
 * Returns 1 match, 0 no match, -1 not a class (treat '[' literally). */
static int glob_class(const char *p, unsigned char c, const char **end)
{
	const char *q = p + 1;
	int neg = 0, hit = 0;
	if (*q == '!' || *q == '^') {
		neg = 1;
		q++;
	}
	const char *first = q;
	while (*q != '\0' && (*q != ']' || q == first)) {
		unsigned char lo = (unsigned char)*q, hi = lo;
		if (q[1] == '-' && q[2] != '\0' && q[2] != ']') {
			hi = (unsigned char)q[2];
			q += 3;
		} else {
			q++;
		}
		if (lo <= c && c <= hi)
			hit = 1;
	}
	if (*q != ']')
		return -1;
	*end = q + 1;
	return hit != neg;
}

/* Iterative matcher with one backtrack point for the last '*': linear in
 * practice and never recursive, so a hostile pattern cannot blow the stack. */
int hub_glob_match(const char *pat, const char *s)
{
	const char *star_p = NULL, *star_s = NULL;
	while (*s != '\0') {
		const char *next = NULL;
		int m = 0;
		if (*pat == '*') {
			star_p = ++pat;
			star_s = s;
			continue;
		}
		if (*pat == '?') {
			m = 1;
			next = pat + 1;
		} else if (*pat == '[') {
			int r = glob_class(pat, (unsigned char)*s, &next);
			if (r < 0) {
				m = *s == '[';
				next = pat + 1;
			} else {
				m = r;
			}
		} else if (*pat != '\0') {
			m = *pat == *s;
			next = pat + 1;
		}
		if (m) {
			pat = next;
			s++;
		} else if (star_p != NULL) {
			pat = star_p;
			s = ++star_s;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

static const struct {
	const char *name;
	const char *globs[8];
} asset_groups[] = {
	{"tokenizer", {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
		       "vocab.txt", "merges.txt", "special_tokens_map.json", NULL}},
	{"config", {"config.json", "generation_config.json", NULL}},
	{"safetensors", {"*.safetensors", "model.safetensors.index.json", NULL}},
	{"index", {"model.safetensors.index.json", NULL}},
};

const char *const *hub_asset_globs(const char *group)
{
	for (size_t i = 0; i < sizeof asset_groups / sizeof asset_groups[0]; i++)
		if (strcmp(group, asset_groups[i].name) == 0)
			return asset_groups[i].globs;
	return NULL;
}

static int match_any(const char *path, const char *const *pats, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(pats[i]);
		if (len > 0 && pats[i][len - 1] == '/') {
			/* "folder/" means everything under it: the pattern plus a star */
			char *star = malloc(len + 2);
			if (star == NULL)
				continue;
			memcpy(star, pats[i], len);
			memcpy(star + len, "*", 2);
			int m = hub_glob_match(star, path);
			free(star);
			if (m)
				return 1;
		} else if (hub_glob_match(pats[i], path)) {
			return 1;
		}
	}
	return 0;
}

int hub_selected(const char *path, const char *const *inc, size_t ninc,
		 const char *const *exc, size_t nexc)
{
	return (ninc == 0 || match_any(path, inc, ninc)) && !match_any(path, exc, nexc);
}

int hub_path_safe(const char *path, size_t len)
{
	if (len == 0 || path[0] == '/' || memchr(path, '\0', len) != NULL ||
	    memchr(path, '\\', len) != NULL)
		return 0;
	size_t i = 0;
	while (i <= len) {
		size_t j = i;
		while (j < len && path[j] != '/')
			j++;
		size_t seg = j - i;
		if (seg == 0 || (seg == 1 && path[i] == '.') ||
		    (seg == 2 && path[i] == '.' && path[i + 1] == '.'))
			return 0;
		i = j + 1;
	}
	return 1;
}

/* Link: <https://h/api/...?cursor=x>; rel="next", <...>; rel="prev" */
int hub_link_next(const char *v, char *out, size_t n)
{
	const char *p = v;
	while ((p = strchr(p, '<')) != NULL) {
		const char *close = strchr(p, '>');
		if (close == NULL)
			return 0;
		/* a URI reference holds no '<': the URL starts at the last one */
		for (const char *q = p + 1; q < close; q++)
			if (*q == '<')
				p = q;
		const char *end = strchr(close, ',');
		/* a comma may sit inside the next URL only after its '<' */
		const char *lt = strchr(close, '<');
		if (end != NULL && lt != NULL && lt < end)
			end = lt;
		size_t plen = end ? (size_t)(end - close) : strlen(close);
		int is_next = 0;
		for (size_t i = 0; i + 3 < plen; i++) {
			if (strncmp(close + i, "rel", 3) != 0)
				continue;
			const char *q = close + i + 3;
			while (*q == ' ')
				q++;
			if (*q != '=')
				continue;
			q++;
			while (*q == ' ')
				q++;
			if (*q == '"')
				q++;
			if (strncmp(q, "next", 4) == 0 && (q[4] == '"' || q[4] == ';' ||
							   q[4] == ',' || q[4] == ' ' || q[4] == '\0'))
				is_next = 1;
		}
		size_t ulen = (size_t)(close - p - 1);
		if (is_next && ulen > 0 && ulen < n) {
			memcpy(out, p + 1, ulen);
			out[ulen] = '\0';
			return 1;
		}
		p = close + 1;
	}
	return 0;
}

static int copy_hex(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n + 1 > cap)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)src[i]))
			return -1;
	memcpy(dst, src, n + 1);
	return 0;
}

static int tree_entry(json_t *e, size_t idx, hub_filelist *l, titan_err *err)
{
	const char *type = json_string_value(json_object_get(e, "type"));
	json_t *jp = json_object_get(e, "path");
	const char *path = json_string_value(jp);
	if (type == NULL || path == NULL)
		return err_set(err, "tree listing: entry %zu has no \"type\" or \"path\"", idx);
	/* A listing names each path once: a server that loops is stopped at its
	 * first repeat, and HUB_MAX_FILES bounds one that pages on forever. */
	if (hub_filelist_entries(l) >= 2 * (size_t)HUB_MAX_FILES)
		return err_set(err, "tree listing: more than %u entries", 2 * HUB_MAX_FILES);
	if (l->seen == NULL && (l->seen = calloc(1, sizeof *l->seen)) == NULL)
		return err_set(err, "tree listing: out of memory");
	l->seen->owns = 1;
	int known = strmap_put(l->seen, path, 0);
	if (known != 0)
		return known < 0 ? err_set(err, "tree listing: out of memory")
				 : err_set(err, "tree listing: \"%.200s\" listed twice (a server that "
					   "repeats its pages?)", path);
	if (strcmp(type, "file") != 0)
		return 0; /* "directory": the recursive listing also names its files */
	size_t plen = json_string_length(jp);
	if (!hub_path_safe(path, plen))
		return err_set(err, "tree listing: refusing unsafe remote path \"%.200s\" "
			       "(absolute, \"..\", or NUL)", path);
	hub_file f;
	memset(&f, 0, sizeof f);
	json_t *size = json_object_get(e, "size");
	f.size = json_is_integer(size) ? json_integer_value(size) : -1;
	const char *oid = json_string_value(json_object_get(e, "oid"));
	if (oid != NULL && copy_hex(f.oid, sizeof f.oid, oid) != 0)
		return err_set(err, "tree listing: %.200s: bad oid", path);
	json_t *lfs = json_object_get(e, "lfs");
	if (json_is_object(lfs)) {
		const char *sha = json_string_value(json_object_get(lfs, "oid"));
		json_t *ls = json_object_get(lfs, "size");
		if (sha == NULL || strlen(sha) != 64 || copy_hex(f.lfs_sha, sizeof f.lfs_sha, sha) != 0)
			return err_set(err, "tree listing: %.200s: bad lfs.oid", path);
		if (json_is_integer(ls))
			f.size = json_integer_value(ls);
	}
	if (f.size < 0)
		return err_set(err, "tree listing: %.200s: no size", path);
	if (l->n >= HUB_MAX_FILES)
		return err_set(err, "tree listing: more than %u files", HUB_MAX_FILES);
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		hub_file *v = realloc(l->v, cap * sizeof *v);
		if (v == NULL)
			return err_set(err, "tree listing: out of memory");
		l->v = v;
		l->cap = cap;
	}
	f.path = strdup(path);
	if (f.path == NULL)
		return err_set(err, "tree listing: out of memory");
	l->v[l->n++] = f;
	return 0;
}

int hub_tree_parse(const char *json, size_t len, hub_filelist *l, titan_err *err)
{
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return err_set(err, "tree listing: bad JSON at line %d: %s", je.line, je.text);
	int rc = 0;
	if (!json_is_array(root)) {
		rc = err_set(err, "tree listing: expected a JSON array");
	} else {
		size_t i;
		json_t *e;
		json_array_foreach(root, i, e) {
			if (!json_is_object(e)) {
				rc = err_set(err, "tree listing: entry %zu is not an object", i);
				break;
			}
			if ((rc = tree_entry(e, i, l, err)) != 0)
				break;
		}
	}
	json_decref(root);
	return rc;
}

static double parse_seconds(const char *s)
{
	while (*s == ' ')
		s++;
	if (!isdigit((unsigned char)*s))
		return -1;
	char *end;
	double v = strtod(s, &end);
	while (*end == ' ' || *end == '\r' || *end == '\n')
		end++;
	return (*end == '\0' || *end == ',' || *end == ';') && v >= 0 ? v : -1;
}

double hub_retry_after(const char *retry_after, const char *ratelimit)
{
	if (retry_after != NULL && *retry_after != '\0') {
		double v = parse_seconds(retry_after);
		if (v >= 0)
			return v;
	}
	/* draft-ietf-httpapi-ratelimit-headers, as the Hub sends it:
	 * RateLimit: "api";r=0;t=55 -- t is the seconds until the window resets */
	if (ratelimit != NULL) {
		for (const char *p = ratelimit; (p = strchr(p, ';')) != NULL; p++) {
			const char *q = p + 1;
			while (*q == ' ')
				q++;
			if (q[0] == 't' && q[1] == '=')
				return parse_seconds(q + 2);
		}
	}
	return -1;
}

void hub_etag_normalize(const char *raw, char *out, size_t n)
{
	if (n == 0)
		return;
	out[0] = '\0';
	if (raw == NULL)
		return;
	while (*raw == ' ')
		raw++;
	if (strncmp(raw, "W/", 2) == 0)
		raw += 2;
	size_t len = strlen(raw);
	while (len > 0 && (raw[len - 1] == ' ' || raw[len - 1] == '\r' || raw[len - 1] == '\n'))
		len--;
	while (len > 0 && *raw == '"') {
		raw++;
		len--;
	}
	while (len > 0 && raw[len - 1] == '"')
		len--;
	if (len >= n)
		len = n - 1;
	memcpy(out, raw, len);
	out[len] = '\0';
}

int hub_etag_is_sha256(const char *etag)
{
	if (strlen(etag) != 64)
		return 0;
	for (int i = 0; i < 64; i++)
		if (!isdigit((unsigned char)etag[i]) && !(etag[i] >= 'a' && etag[i] <= 'f'))
			return 0;
	return 1;
}
