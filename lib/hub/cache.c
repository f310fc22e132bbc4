/* The huggingface_hub cache layout, the token's places, URL origins. */
#include "hub/hub.h"

#include "core/afile.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *hub_repo_folder(hub_repo_type type, const char *repo_id)
{
	/* huggingface_hub: f"{repo_type}s--" + repo_id.replace("/", "--") */
	const char *prefix = type == HUB_DATASET ? "datasets" : "models";
	size_t n = strlen(prefix) + 2 + 2 * strlen(repo_id) + 1;
	char *s = malloc(n), *w = s;
	if (s == NULL)
		return NULL;
	w += sprintf(w, "%s--", prefix);
	for (const char *p = repo_id; *p; p++) {
		if (*p == '/') {
			*w++ = '-';
			*w++ = '-';
		} else {
			*w++ = *p;
		}
	}
	*w = '\0';
	return s;
}

static char *hf_home(void)
{
	const char *h = getenv("HF_HOME");
	if (h != NULL && *h)
		return strdup(h);
	const char *xdg = getenv("XDG_CACHE_HOME");
	if (xdg != NULL && *xdg)
		return path_join(xdg, "huggingface");
	const char *home = getenv("HOME");
	return path_join(home ? home : ".", ".cache/huggingface");
}

char *hub_default_cache(void)
{
	const char *c = getenv("HF_HUB_CACHE");
	if (c == NULL || !*c)
		c = getenv("HUGGINGFACE_HUB_CACHE");
	if (c != NULL && *c)
		return strdup(c);
	char *home = hf_home();
	if (home == NULL)
		return NULL;
	char *s = path_join(home, "hub");
	free(home);
	return s;
}

/* Strip surrounding whitespace in place; returns s. */
static char *trim(char *s)
{
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	size_t i = 0;
	while (isspace((unsigned char)s[i]))
		i++;
	memmove(s, s + i, n - i + 1);
	return s;
}

static int read_small(const char *path, char **out, titan_err *err)
{
	FILE *f = fopen(path, "rb");
	*out = NULL;
	if (f == NULL) {
		if (errno == ENOENT)
			return 0;
		return err_errno(err, "%s", path);
	}
	char buf[4096];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	int bad = ferror(f);
	fclose(f);
	if (bad)
		return err_errno(err, "%s: read", path);
	buf[n] = '\0';
	*out = strdup(trim(buf));
	if (*out == NULL)
		return err_set(err, "%s: out of memory", path);
	return 0;
}

int hub_token_lookup(const char *cli, char **out, titan_err *err)
{
	*out = NULL;
	const char *env[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"};
	const char *v = cli;
	for (size_t i = 0; v == NULL && i < 2; i++) {
		v = getenv(env[i]);
		if (v != NULL && !*v)
			v = NULL;
	}
	if (v != NULL) {
		char *t = strdup(v);
		if (t == NULL)
			return err_set(err, "token: out of memory");
		*out = trim(t);
	} else {
		const char *tp = getenv("HF_TOKEN_PATH");
		char *path = tp && *tp ? strdup(tp) : NULL;
		if (path == NULL) {
			char *home = hf_home();
			path = home ? path_join(home, "token") : NULL;
			free(home);
		}
		if (path == NULL)
			return err_set(err, "token: out of memory");
		int rc = read_small(path, out, err);
		free(path);
		if (rc != 0)
			return -1;
	}
	if (*out != NULL && **out == '\0') {
		free(*out);
		*out = NULL;
	}
	/* a token travels in a header: a CR or LF would inject another one */
	if (*out != NULL && strpbrk(*out, "\r\n") != NULL) {
		free(*out);
		*out = NULL;
		return err_set(err, "the token holds a line break; check HF_TOKEN or the token file");
	}
	return 0;
}

static int is_commit(const char *s)
{
	if (strlen(s) != 40)
		return 0;
	for (int i = 0; i < 40; i++)
		if (!isxdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

int hub_cache_ref_read(const char *storage, const char *rev, char commit[41], titan_err *err)
{
	if (is_commit(rev)) {
		memcpy(commit, rev, 41);
		return 0;
	}
	if (!hub_path_safe(rev, strlen(rev)))
		return err_set(err, "revision \"%s\" is not a safe ref name", rev);
	size_t n = strlen(storage) + strlen(rev) + 8;
	char *path = malloc(n);
	if (path == NULL)
		return err_set(err, "out of memory");
	snprintf(path, n, "%s/refs/%s", storage, rev);
	char *v = NULL;
	int rc = read_small(path, &v, err);
	if (rc == 0 && v == NULL)
		rc = err_set(err, "%s: not in the cache (HF_HUB_OFFLINE=1: fetch it once online)", path);
	else if (rc == 0 && !is_commit(v))
		rc = err_set(err, "%s: not a commit hash", path);
	if (rc == 0)
		memcpy(commit, v, 41);
	free(v);
	free(path);
	return rc;
}

int hub_cache_ref_write(const char *storage, const char *rev, const char *commit, titan_err *err)
{
	if (strcmp(rev, commit) == 0)
		return 0; /* huggingface_hub keeps refs only for branch and tag names */
	if (!hub_path_safe(rev, strlen(rev)))
		return err_set(err, "revision \"%s\" is not a safe ref name", rev);
	size_t n = strlen(storage) + strlen(rev) + 8;
	char *path = malloc(n);
	if (path == NULL)
		return err_set(err, "out of memory");
	snprintf(path, n, "%s/refs/%s", storage, rev);
	char *dir = strdup(path);
	int rc = dir ? 0 : err_set(err, "out of memory");
	if (rc == 0) {
		*strrchr(dir, '/') = '\0';
		rc = mkdir_p(dir, err);
	}
	/* the file holds the commit without a newline: huggingface_hub reads it whole */
	if (rc == 0)
		rc = atomic_write_file(path, commit, strlen(commit), err);
	free(dir);
	free(path);
	return rc;
}

int hub_cache_link(const char *storage, const char *commit, const char *path,
		   const char *etag, titan_err *err)
{
	size_t n = strlen(storage) + strlen(commit) + strlen(path) + 16;
	char *link = malloc(n);
	/* one "../" per component of snapshots/<commit>/<path> below the storage */
	size_t depth = 2;
	for (const char *p = path; *p; p++)
		depth += *p == '/';
	size_t tn = 3 * depth + strlen(etag) + 8;
	char *target = malloc(tn);
	if (link == NULL || target == NULL) {
		free(link);
		free(target);
		return err_set(err, "out of memory");
	}
	snprintf(link, n, "%s/snapshots/%s/%s", storage, commit, path);
	target[0] = '\0';
	for (size_t i = 0; i < depth; i++)
		strcat(target, "../");
	strcat(target, "blobs/");
	strcat(target, etag);
	int rc = 0;
	char *dir = strdup(link);
	if (dir == NULL) {
		rc = err_set(err, "out of memory");
	} else {
		*strrchr(dir, '/') = '\0';
		rc = mkdir_p(dir, err);
	}
	if (rc == 0) {
		char old[4096];
		ssize_t k = readlink(link, old, sizeof old - 1);
		if (k >= 0 && (size_t)k == strlen(target) && memcmp(old, target, (size_t)k) == 0) {
			rc = 0; /* already right */
		} else {
			/* symlink beside, then rename over: never a moment without the name */
			size_t tl = strlen(link) + 32;
			char *tmp = malloc(tl);
			if (tmp == NULL) {
				rc = err_set(err, "out of memory");
			} else {
				snprintf(tmp, tl, "%s.tmp.%ld", link, (long)getpid());
				unlink(tmp);
				if (symlink(target, tmp) != 0)
					rc = err_errno(err, "%s: symlink", tmp);
				else if (rename(tmp, link) != 0) {
					rc = err_errno(err, "%s: rename", link);
					unlink(tmp);
				}
				free(tmp);
			}
		}
	}
	free(dir);
	free(target);
	free(link);
	return rc;
}

static int list_add(hub_filelist *l, const char *rel, int64_t size, titan_err *err)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		hub_file *v = realloc(l->v, cap * sizeof *v);
		if (v == NULL)
			return err_set(err, "out of memory");
		l->v = v;
		l->cap = cap;
	}
	hub_file *f = &l->v[l->n];
	memset(f, 0, sizeof *f);
	f->path = strdup(rel);
	if (f->path == NULL)
		return err_set(err, "out of memory");
	f->size = size;
	l->n++;
	return 0;
}

static int walk(const char *base, const char *rel, hub_filelist *l, titan_err *err)
{
	char *dir = *rel ? path_join(base, rel) : strdup(base);
	if (dir == NULL)
		return err_set(err, "out of memory");
	DIR *d = opendir(dir);
	if (d == NULL) {
		err_errno(err, "%s", dir);
		free(dir);
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *r = *rel ? path_join(rel, e->d_name) : strdup(e->d_name);
		char *full = path_join(base, r ? r : "");
		struct stat st;
		if (r == NULL || full == NULL)
			rc = err_set(err, "out of memory");
		else if (stat(full, &st) != 0)
			rc = 0; /* a dangling link: its blob is gone, the file is not cached */
		else if (S_ISDIR(st.st_mode))
			rc = walk(base, r, l, err);
		else if (S_ISREG(st.st_mode))
			rc = list_add(l, r, (int64_t)st.st_size, err);
		free(r);
		free(full);
	}
	closedir(d);
	free(dir);
	return rc;
}

static int by_path(const void *a, const void *b)
{
	return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path);
}

int hub_cache_snapshot_list(const char *storage, const char *commit, hub_filelist *l,
			    titan_err *err)
{
	size_t n = strlen(storage) + strlen(commit) + 16;
	char *base = malloc(n);
	if (base == NULL)
		return err_set(err, "out of memory");
	snprintf(base, n, "%s/snapshots/%s", storage, commit);
	int rc = walk(base, "", l, err);
	free(base);
	if (rc == 0 && l->n > 0)
		qsort(l->v, l->n, sizeof *l->v, by_path);
	return rc;
}

static int origin(const char *url, char **scheme, char **host, char **port)
{
	CURLU *u = curl_url();
	if (u == NULL)
		return -1;
	int rc = -1;
	*scheme = *host = *port = NULL;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, port, CURLU_DEFAULT_PORT) == CURLUE_OK)
		rc = 0;
	curl_url_cleanup(u);
	if (rc != 0) {
		curl_free(*scheme);
		curl_free(*host);
		curl_free(*port);
		*scheme = *host = *port = NULL;
	}
	return rc;
}

int hub_same_origin(const char *a, const char *b)
{
	char *s1, *h1, *p1, *s2, *h2, *p2;
	int ok1 = origin(a, &s1, &h1, &p1) == 0, ok2 = origin(b, &s2, &h2, &p2) == 0;
	int same = ok1 && ok2 && strcasecmp(s1, s2) == 0 && strcasecmp(h1, h2) == 0 &&
		   strcmp(p1, p2) == 0;
	curl_free(s2);
	curl_free(h2);
	curl_free(p2);
	curl_free(s1);
	curl_free(h1);
	curl_free(p1);
	return same;
}
