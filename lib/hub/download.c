/* Parallel downloads on the curl multi interface.
 *
 * Each file is a small state machine: HEAD /resolve (metadata, maybe a CDN
 * Location), then GET into NAME.incomplete with "Range: bytes=N-" when part of
 * it is already there, then verify (size; sha256 for LFS, the git blob sha1 for
 * the rest), fsync and rename into place.  A failed attempt waits (exponential
 * backoff with jitter, or the server's Retry-After) and resumes where it was. */
#include "hub/hub_private.h"

#include "core/afile.h"
#include "core/progress.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { J_WAIT, J_RUN, J_DONE };
enum { STEP_HEAD, STEP_GET };

typedef struct job {
	hub_item *it;
	int state, step;
	double wake;             /* J_WAIT: not before this (progress_now) */
	int attempts;            /* failed attempts since the last progress */
	int redirects;
	char *url;               /* the HEAD URL, then the download URL */
	char *resolve;           /* the HEAD URL, kept to ask for a fresh download URL */
	int refreshes;
	int auth;                /* send the token with the next request */
	CURL *h;
	struct curl_slist *sl;
	hub_hdrs hd;
	int fd;                  /* -1 when closed */
	char *tmp;               /* NAME.incomplete (files), NULL for a stream */
	uint64_t have;           /* bytes of the file written (or streamed) */
	uint64_t skip;           /* stream: bytes of a 200 reply already sent */
	uint64_t have0;          /* have when this attempt started */
	int body_started, body_ignored, bad_range, resumed, restarted;
	EVP_MD_CTX *md;          /* sha256 (LFS) or sha1 over "blob N\0" + bytes */
	int fatal;
	titan_err err;
	progress pg;             /* this file's bar (label: its path) */
} job;

typedef struct engine {
	hub_client *c;
	const hub_dl_opts *o;
	CURLM *m;
	job **slots;
	int nslots;
	uint64_t total, done_bytes;
	progress pg;             /* the total; also the terminal's width */
	double last_draw;
	int drawn_lines;
} engine;

static const char *jpath(const job *j)
{
	return j->it->file->path;
}

static int kind_sha256(const job *j)
{
	return hub_etag_is_sha256(j->it->etag);
}

static int kind_git(const job *j)
{
	const char *e = j->it->etag;
	return strlen(e) == 40 && strspn(e, "0123456789abcdef") == 40 &&
	       strcmp(e, j->it->file->oid) == 0;
}

/* An etag names a blob file: it must not be able to walk out of blobs/. */
static int etag_safe(const char *e)
{
	return e[0] != '\0' && e[0] != '.' && strspn(e, "0123456789abcdefABCDEF"
					      "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ-_.") == strlen(e);
}

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

static int md_start(job *j)
{
	if (j->md == NULL && (j->md = EVP_MD_CTX_new()) == NULL)
		return -1;
	if (kind_sha256(j))
		return EVP_DigestInit_ex(j->md, EVP_sha256(), NULL) == 1 ? 0 : -1;
	if (kind_git(j)) {
		char head[64];
		int n = snprintf(head, sizeof head, "blob %" PRId64, j->it->size);
		if (EVP_DigestInit_ex(j->md, EVP_sha1(), NULL) != 1 ||
		    EVP_DigestUpdate(j->md, head, (size_t)n + 1) != 1)
			return -1;
		return 0;
	}
	EVP_MD_CTX_free(j->md);
	j->md = NULL;
	return 0;
}

static void md_update(job *j, const void *p, size_t n)
{
	if (j->md != NULL)
		EVP_DigestUpdate(j->md, p, n);
}

static void job_close(job *j)
{
	if (j->fd >= 0 && j->tmp != NULL)
		close(j->fd);
	j->fd = -1;
}

static void job_free(job *j)
{
	if (j == NULL)
		return;
	job_close(j);
	if (j->h)
		curl_easy_cleanup(j->h);
	curl_slist_free_all(j->sl);
	EVP_MD_CTX_free(j->md);
	free(j->url);
	free(j->resolve);
	free(j->tmp);
	free(j);
}

static int fatal(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fatal(job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_setv(&j->err, fmt, ap);
	va_end(ap);
	j->fatal = 1;
	j->state = J_DONE;
	return -1;
}

static int fatal_http(engine *g, job *j)
{
	hub_http_error(&j->err, g->c, &j->hd, g->o->repo, g->o->type, jpath(j));
	j->fatal = 1;
	j->state = J_DONE;
	return -1;
}

static void retry(engine *g, job *j, const char *why, const hub_hdrs *h)
{
	if (j->have > j->have0)
		j->attempts = 0; /* progress was made: a long file may be cut many times */
	if (j->attempts >= g->c->retries) {
		fatal(j, "%s: %s; gave up after %d attempts (run again to resume)", jpath(j), why,
		      j->attempts + 1);
		return;
	}
	double w = hub_backoff(g->c, j->attempts, h);
	j->attempts++;
	titan_warn("%s: %s, retrying in %.1f s (attempt %d of %d)", jpath(j), why, w,
			   j->attempts + 1, g->c->retries + 1);
	j->state = J_WAIT;
	j->wake = progress_now() + w;
}

/* ---- starting requests ---- */

static int launch(engine *g, job *j, int head)
{
	if (j->h) {
		curl_easy_cleanup(j->h);
		curl_slist_free_all(j->sl);
		j->h = NULL;
		j->sl = NULL;
	}
	j->h = hub_easy(g->c, j->url, j->auth, head, &j->hd, &j->sl);
	if (j->h == NULL)
		return fatal(j, "%s: cannot start a transfer", jpath(j));
	curl_easy_setopt(j->h, CURLOPT_PRIVATE, j);
	j->have0 = j->have;
	j->body_started = j->body_ignored = j->bad_range = 0;
	j->step = head ? STEP_HEAD : STEP_GET;
	j->state = J_RUN;
	if (curl_multi_add_handle(g->m, j->h) != CURLM_OK)
		return fatal(j, "%s: cannot start a transfer", jpath(j));
	return 0;
}

static size_t body_cb(char *p, size_t size, size_t nmemb, void *ud);

/* Open NAME.incomplete and hash what it already holds, so a resumed file is
 * verified whole. */
static int open_partial(job *j)
{
	int fd = open(j->tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return fatal(j, "%s: cannot create: %s", j->tmp, strerror(errno));
	j->fd = fd;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return fatal(j, "%s: %s", j->tmp, strerror(errno));
	j->have = (uint64_t)st.st_size;
	if (j->have > (uint64_t)j->it->size) {
		if (ftruncate(fd, 0) != 0)
			return fatal(j, "%s: truncate: %s", j->tmp, strerror(errno));
		j->have = 0;
	}
	if (md_start(j) != 0)
		return fatal(j, "%s: cannot start the hash", jpath(j));
	char buf[1 << 16];
	uint64_t off = 0;
	while (off < j->have) {
		ssize_t r = pread(fd, buf, sizeof buf, (off_t)off);
		if (r <= 0)
			return fatal(j, "%s: read: %s", j->tmp, r < 0 ? strerror(errno) : "short");
		md_update(j, buf, (size_t)r);
		off += (uint64_t)r;
	}
	if (lseek(fd, (off_t)j->have, SEEK_SET) < 0)
		return fatal(j, "%s: seek: %s", j->tmp, strerror(errno));
	j->resumed = j->have > 0;
	return 0;
}

static int finish_file(engine *g, job *j);

static int start_get(engine *g, job *j)
{
	const hub_dl_opts *o = g->o;
	if (o->dest != HUB_DEST_STREAM) {
		if (j->fd < 0) {
			free(j->tmp);
			j->tmp = o->dest == HUB_DEST_CACHE
					 ? pathf("%s/blobs/%s.incomplete", o->root, j->it->etag)
					 : pathf("%s/.cache/huggingface/download/%s.incomplete", o->root,
						 jpath(j));
			if (j->tmp == NULL)
				return fatal(j, "out of memory");
			char *dir = strdup(j->tmp);
			titan_err e;
			if (dir == NULL)
				return fatal(j, "out of memory");
			*strrchr(dir, '/') = '\0';
			int rc = mkdir_p(dir, &e);
			free(dir);
			if (rc != 0)
				return fatal(j, "%s", e.msg);
			if (open_partial(j) != 0)
				return -1;
		}
		if (j->have == (uint64_t)j->it->size)
			return finish_file(g, j); /* a previous run fetched every byte */
	} else if (j->md == NULL && j->have == 0 && md_start(j) != 0) {
		return fatal(j, "%s: cannot start the hash", jpath(j));
	}
	if (launch(g, j, 0) != 0)
		return -1;
	if (j->pg.label == NULL)
		progress_init(&j->pg, jpath(j), PROGRESS_BYTES, (uint64_t)j->it->size);
	curl_easy_setopt(j->h, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(j->h, CURLOPT_WRITEDATA, j);
	if (j->have > 0) {
		char range[64];
		snprintf(range, sizeof range, "%" PRIu64 "-", j->have);
		curl_easy_setopt(j->h, CURLOPT_RANGE, range);
		j->resumed = 1;
	}
	return 0;
}

static job *busy_on_etag(engine *g, const job *self)
{
	for (int i = 0; i < g->nslots; i++) {
		job *k = g->slots[i];
		if (k && k != self && k->state != J_DONE && k->step == STEP_GET &&
		    strcmp(k->it->etag, self->it->etag) == 0)
			return k;
	}
	return NULL;
}

static int link_cached(engine *g, job *j)
{
	titan_err e;
	if (hub_cache_link(g->o->root, g->o->commit, jpath(j), j->it->etag, &e) != 0)
		return fatal(j, "%s", e.msg);
	j->it->local = pathf("%s/snapshots/%s/%s", g->o->root, g->o->commit, jpath(j));
	j->state = J_DONE;
	return 0;
}

/* local-dir bookkeeping in huggingface_hub's format: commit, etag, time */
static int dir_meta_path(engine *g, job *j, char **out)
{
	*out = pathf("%s/.cache/huggingface/download/%s.metadata", g->o->root, jpath(j));
	return *out ? 0 : -1;
}

static int dir_is_current(engine *g, job *j, const char *final)
{
	struct stat st;
	char *mp;
	if (stat(final, &st) != 0 || (int64_t)st.st_size != j->it->size || dir_meta_path(g, j, &mp))
		return 0;
	FILE *f = fopen(mp, "r");
	free(mp);
	if (f == NULL)
		return 0;
	char commit[128] = "", etag[192] = "", ts[64] = "";
	int ok = fgets(commit, sizeof commit, f) && fgets(etag, sizeof etag, f) &&
		 fgets(ts, sizeof ts, f);
	fclose(f);
	etag[strcspn(etag, "\n")] = '\0';
	return ok && strcmp(etag, j->it->etag) == 0 && (double)st.st_mtime - 1 <= strtod(ts, NULL);
}

/* After the metadata: is the file already here?  If not, fetch it. */
static int after_head(engine *g, job *j)
{
	const hub_dl_opts *o = g->o;
	if (o->dest == HUB_DEST_CACHE) {
		char *blob = pathf("%s/blobs/%s", o->root, j->it->etag);
		struct stat st;
		int have = blob && stat(blob, &st) == 0 && (int64_t)st.st_size == j->it->size;
		free(blob);
		if (have) {
			j->it->cached = 1;
			g->done_bytes += (uint64_t)j->it->size;
			return link_cached(g, j);
		}
		if (busy_on_etag(g, j)) {
			/* the same bytes under two names: let the other transfer finish */
			j->state = J_WAIT;
			j->step = STEP_HEAD; /* come back through here */
			j->wake = progress_now() + 0.05;
			return 1;
		}
	} else if (o->dest == HUB_DEST_DIR) {
		char *final = pathf("%s/%s", o->root, jpath(j));
		int cur = final && dir_is_current(g, j, final);
		if (cur) {
			j->it->cached = 1;
			j->it->local = final;
			g->done_bytes += (uint64_t)j->it->size;
			j->state = J_DONE;
			return 0;
		}
		free(final);
	}
	return start_get(g, j);
}

static int job_begin(engine *g, job *j)
{
	/* a job woken in STEP_HEAD with metadata known was waiting for a twin */
	if (j->step == STEP_HEAD && j->it->etag[0] != '\0')
		return after_head(g, j);
	if (j->step == STEP_GET)
		return start_get(g, j);
	return launch(g, j, 1);
}

/* ---- body bytes ---- */

static int write_all(job *j, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(j->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			if (errno == ENOSPC || errno == EDQUOT)
				return fatal(j, "%s: disk full after %" PRIu64 " of %" PRId64
					     " bytes: free space (the partial file is kept and "
					     "resumes) or choose another folder",
					     j->tmp ? j->tmp : jpath(j), j->have, j->it->size);
			if (errno == EPIPE)
				return fatal(j, "%s: the reader of standard output went away", jpath(j));
			return fatal(j, "%s: write: %s", j->tmp ? j->tmp : "standard output",
				     strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The first body byte of an attempt: is this the part we asked for? */
static int body_start(job *j)
{
	long st = 0;
	curl_easy_getinfo(j->h, CURLINFO_RESPONSE_CODE, &st);
	j->body_started = 1;
	if (st != 200 && st != 206) {
		j->body_ignored = 1; /* an error page: judged when the request ends */
		return 0;
	}
	if (st == 206) {
		unsigned long long from = 0;
		if (j->have == 0 || sscanf(j->hd.content_range, "bytes %llu-", &from) != 1 ||
		    from != j->have) {
			j->bad_range = 1;
			return -1;
		}
		return 0;
	}
	if (j->have == 0)
		return 0;
	/* 200 to a range request: the server sends the whole file again */
	if (j->tmp == NULL) {
		j->skip = j->have; /* a stream cannot take bytes back: drop the repeat */
		return 0;
	}
	if (ftruncate(j->fd, 0) != 0 || lseek(j->fd, 0, SEEK_SET) != 0)
		return fatal(j, "%s: truncate: %s", j->tmp, strerror(errno));
	j->have = 0;
	j->resumed = 0;
	if (md_start(j) != 0)
		return fatal(j, "%s: cannot start the hash", jpath(j));
	return 0;
}

static size_t body_cb(char *p, size_t size, size_t nmemb, void *ud)
{
	job *j = ud;
	size_t n = size * nmemb;
	if (!j->body_started && body_start(j) != 0)
		return 0;
	if (j->body_ignored)
		return n;
	size_t k = n;
	const char *q = p;
	if (j->skip > 0) {
		size_t s = j->skip < k ? (size_t)j->skip : k;
		j->skip -= s;
		q += s;
		k -= s;
	}
	if (j->have + k > (uint64_t)j->it->size)
		return fatal(j, "%s: the server sent more than the %" PRId64 " bytes announced",
			     jpath(j), j->it->size), 0;
	if (k > 0 && write_all(j, q, k) != 0)
		return 0;
	md_update(j, q, k);
	j->have += k;
	return n;
}

/* ---- requests that ended ---- */

static int head_done(engine *g, job *j, CURLcode cr)
{
	hub_hdrs *h = &j->hd;
	if (cr != CURLE_OK) {
		if (!hub_curl_retryable(cr))
			return fatal(j, "%s: %s", jpath(j), curl_easy_strerror(cr));
		retry(g, j, curl_easy_strerror(cr), NULL);
		return 0;
	}
	if (hub_status_retryable(h->status)) {
		char why[64];
		snprintf(why, sizeof why, "HTTP %ld", h->status);
		retry(g, j, why, h);
		return 0;
	}
	int redirect = h->status >= 300 && h->status < 400;
	if (!redirect && (h->status < 200 || h->status >= 300))
		return fatal_http(g, j);
	char *loc = NULL;
	if (redirect) {
		if (h->location[0] == '\0' || (loc = hub_url_join(j->url, h->location)) == NULL)
			return fatal(j, "%s: HTTP %ld without a usable Location", jpath(j), h->status);
		if (hub_same_origin(loc, j->url)) {
			/* a renamed repo and the like: ask again there, token and all */
			free(j->url);
			j->url = loc;
			if (++j->redirects > 10)
				return fatal(j, "%s: too many redirects", jpath(j));
			return launch(g, j, 1);
		}
	}
	if (h->commit[0] == '\0') {
		free(loc);
		return fatal(j, "%s: no X-Repo-Commit in the answer: is HF_ENDPOINT (%s) a Hub?",
			     jpath(j), g->c->endpoint);
	}
	if (strcmp(h->commit, g->o->commit) != 0) {
		free(loc);
		return fatal(j, "%s: the server answered for commit %s, not %s", jpath(j), h->commit,
			     g->o->commit);
	}
	hub_etag_normalize(h->linked_etag[0] ? h->linked_etag : h->etag, j->it->etag,
			   sizeof j->it->etag);
	int64_t size = h->linked_size >= 0 ? h->linked_size : redirect ? -1 : h->content_length;
	if (!etag_safe(j->it->etag) || size < 0) {
		free(loc);
		return fatal(j, "%s: the server gave no usable ETag or size", jpath(j));
	}
	const hub_file *f = j->it->file;
	if (f->size >= 0 && f->size != size) {
		free(loc);
		return fatal(j, "%s: the listing says %" PRId64 " bytes, the server %" PRId64,
			     jpath(j), f->size, size);
	}
	if (f->lfs_sha[0] && strcmp(f->lfs_sha, j->it->etag) != 0) {
		free(loc);
		return fatal(j, "%s: the listing's sha256 %s differs from the ETag %s", jpath(j),
			     f->lfs_sha, j->it->etag);
	}
	j->it->size = size;
	if (loc != NULL) {
		free(j->url);
		j->url = loc;
		j->auth = 0; /* another origin (a CDN): the token stays home */
	}
	j->attempts = 0;
	return after_head(g, j) < 0 ? -1 : 0;
}

static int verify(job *j, char *why, size_t n)
{
	if (j->md == NULL)
		return 0;
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned dn = 0;
	char hex[2 * EVP_MAX_MD_SIZE + 1];
	EVP_DigestFinal_ex(j->md, d, &dn);
	for (unsigned i = 0; i < dn; i++)
		sprintf(hex + 2 * i, "%02x", d[i]);
	if (strcmp(hex, j->it->etag) == 0)
		return 0;
	snprintf(why, n, "%s mismatch: got %s, expected %s", dn == 32 ? "sha256" : "git sha1",
		 hex, j->it->etag);
	return -1;
}

static int finish_file(engine *g, job *j)
{
	const hub_dl_opts *o = g->o;
	char why[256];
	if (verify(j, why, sizeof why) != 0) {
		if (j->tmp != NULL) {
			/* never keep bad bytes: a resume would only extend them */
			job_close(j);
			unlink(j->tmp);
			if (j->resumed && !j->restarted) {
				/* the old part may have been the bad one: once more, from zero */
				j->restarted = 1;
				j->resumed = 0;
				j->have = 0;
				titan_warn("%s: %s after a resume; fetching it again from the start",
					   jpath(j), why);
				j->state = J_WAIT;
				j->step = STEP_GET;
				j->wake = progress_now();
				return 0;
			}
			return fatal(j, "%s: %s; the download was removed (a proxy or the server "
				     "sent wrong bytes): run again", jpath(j), why);
		}
		return fatal(j, "%s: %s; the bytes already streamed are wrong: discard the output",
			     jpath(j), why);
	}
	if (j->tmp == NULL) {
		j->state = J_DONE;
		return 0;
	}
	titan_err e;
	if (fsync(j->fd) != 0)
		return fatal(j, "%s: fsync: %s", j->tmp, strerror(errno));
	job_close(j);
	char *final = o->dest == HUB_DEST_CACHE ? pathf("%s/blobs/%s", o->root, j->it->etag)
						: pathf("%s/%s", o->root, jpath(j));
	if (final == NULL)
		return fatal(j, "out of memory");
	char *dir = strdup(final);
	int rc = dir ? 0 : -1;
	if (dir) {
		*strrchr(dir, '/') = '\0';
		rc = mkdir_p(dir, &e);
	}
	free(dir);
	if (rc != 0 || rename(j->tmp, final) != 0 || fsync_parent_dir(final, &e) != 0) {
		fatal(j, "%s: cannot move into place: %s", final, rc ? e.msg : strerror(errno));
		free(final);
		return -1;
	}
	if (o->dest == HUB_DEST_CACHE) {
		free(final);
		return link_cached(g, j);
	}
	j->it->local = final;
	char *mp;
	if (dir_meta_path(g, j, &mp) != 0)
		return fatal(j, "out of memory");
	char meta[512];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int mn = snprintf(meta, sizeof meta, "%s\n%s\n%.6f\n", o->commit, j->it->etag,
			  (double)ts.tv_sec + ts.tv_nsec * 1e-9);
	rc = atomic_write_file(mp, meta, (size_t)mn, &e);
	free(mp);
	if (rc != 0)
		return fatal(j, "%s", e.msg);
	j->state = J_DONE;
	return 0;
}

static int get_done(engine *g, job *j, CURLcode cr)
{
	hub_hdrs *h = &j->hd;
	if (j->fatal)
		return -1;
	if (j->bad_range) {
		/* the server answered another range than asked: start the file over */
		if (j->tmp == NULL)
			return fatal(j, "%s: the server resumed at the wrong byte", jpath(j));
		if (ftruncate(j->fd, 0) != 0 || lseek(j->fd, 0, SEEK_SET) != 0 || md_start(j) != 0)
			return fatal(j, "%s: truncate: %s", j->tmp, strerror(errno));
		j->have = 0;
		retry(g, j, "the server resumed at the wrong byte", NULL);
		return 0;
	}
	if (cr == CURLE_OK && h->status >= 300 && h->status < 400 && h->location[0]) {
		char *loc = hub_url_join(j->url, h->location);
		if (loc == NULL || ++j->redirects > 10) {
			free(loc);
			return fatal(j, "%s: too many or bad redirects", jpath(j));
		}
		j->auth = j->auth && hub_same_origin(loc, j->url);
		free(j->url);
		j->url = loc;
		return start_get(g, j);
	}
	if (cr == CURLE_OK && h->status == 416 && j->tmp != NULL) {
		if (ftruncate(j->fd, 0) != 0 || lseek(j->fd, 0, SEEK_SET) != 0 || md_start(j) != 0)
			return fatal(j, "%s: truncate: %s", j->tmp, strerror(errno));
		j->have = 0;
		retry(g, j, "HTTP 416 to a resume", NULL);
		return 0;
	}
	if (cr == CURLE_OK && (h->status == 403 || h->status == 410) && !j->auth &&
	    j->refreshes < 3) {
		/* a signed CDN address expires: ask the Hub for a new one, keep the bytes */
		char *u = strdup(j->resolve);
		if (u == NULL)
			return fatal(j, "out of memory");
		free(j->url);
		j->url = u;
		j->auth = 1;
		j->refreshes++;
		j->it->etag[0] = '\0';
		j->step = STEP_HEAD;
		retry(g, j, "the download address was refused", NULL);
		return 0;
	}
	if (cr == CURLE_OK && hub_status_retryable(h->status)) {
		char why[64];
		snprintf(why, sizeof why, "HTTP %ld", h->status);
		retry(g, j, why, h);
		return 0;
	}
	if (cr == CURLE_OK && (h->status < 200 || h->status >= 300))
		return fatal_http(g, j);
	if (cr != CURLE_OK) {
		if (!hub_curl_retryable(cr))
			return fatal(j, "%s: %s", jpath(j), curl_easy_strerror(cr));
		retry(g, j, curl_easy_strerror(cr), NULL);
		return 0;
	}
	if (j->have < (uint64_t)j->it->size) {
		retry(g, j, "the body ended early", NULL);
		return 0;
	}
	return finish_file(g, j);
}

/* ---- progress on a terminal: a bar per active file and one for the total ---- */

static void draw(engine *g, int final)
{
	double now = progress_now();
	if (!g->o->progress || (!final && now - g->last_draw < 0.2))
		return;
	g->last_draw = now;
	if (g->drawn_lines > 0)
		fprintf(stderr, "\033[%dA", g->drawn_lines);
	int lines = 0;
	char line[512];
	uint64_t active = 0;
	for (int i = 0; i < g->nslots; i++) {
		job *j = g->slots[i];
		if (j == NULL || j->state == J_DONE || j->step != STEP_GET)
			continue;
		active += j->have;
		progress_fmt_line(line, sizeof line, &j->pg, j->have, (uint64_t)j->it->size,
				  now - j->pg.start, g->pg.width);
		fprintf(stderr, "\r\033[K%s\n", line);
		lines++;
	}
	uint64_t sofar = g->done_bytes + active;
	progress_fmt_line(line, sizeof line, &g->pg, sofar, g->total, now - g->pg.start,
			  g->pg.width);
	fprintf(stderr, "\r\033[K%s\n\033[J", line);
	lines++;
	g->drawn_lines = final ? 0 : lines;
}

/* ---- the loop ---- */

static void job_retire(engine *g, int slot)
{
	job *j = g->slots[slot];
	if (j->h) {
		curl_multi_remove_handle(g->m, j->h);
		curl_easy_cleanup(j->h);
		j->h = NULL;
	}
	if (!j->fatal && !j->it->cached)
		g->done_bytes += (uint64_t)j->it->size;
	job_free(j);
	g->slots[slot] = NULL;
}

static int run(engine *g, hub_item *items, size_t n, titan_err *err)
{
	size_t next = 0, left = n;
	int failed = 0;
	while (left > 0 && !failed) {
		for (int s = 0; s < g->nslots && next < n; s++) {
			if (g->slots[s] != NULL)
				continue;
			job *j = calloc(1, sizeof *j);
			if (j == NULL)
				return err_set(err, "out of memory");
			j->it = &items[next++];
			j->it->etag[0] = '\0';
			j->it->size = j->it->file->size;
			j->fd = g->o->dest == HUB_DEST_STREAM ? g->o->stream_fd : -1;
			j->auth = 1;
			char *qp = hub_url_escape_path(j->it->file->path);
			char *qr = hub_url_escape_path(g->o->repo);
			if (qp && qr)
				j->url = pathf("%s/%s%s/resolve/%s/%s", g->c->endpoint,
					       g->o->type == HUB_DATASET ? "datasets/" : "", qr,
					       g->o->commit, qp);
			free(qp);
			free(qr);
			j->resolve = j->url ? strdup(j->url) : NULL;
			if (j->url == NULL || j->resolve == NULL) {
				free(j->url);
				free(j);
				return err_set(err, "out of memory");
			}
			j->state = J_WAIT;
			j->step = STEP_HEAD;
			j->wake = 0;
			g->slots[s] = j;
		}
		double now = progress_now(), soonest = now + 0.25;
		for (int s = 0; s < g->nslots; s++) {
			job *j = g->slots[s];
			if (j && j->state == J_WAIT) {
				if (j->wake <= now)
					job_begin(g, j);
				else if (j->wake < soonest)
					soonest = j->wake;
			}
		}
		int running = 0;
		curl_multi_perform(g->m, &running);
		CURLMsg *msg;
		int q;
		while ((msg = curl_multi_info_read(g->m, &q)) != NULL) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			job *j = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
			CURLcode cr = msg->data.result;
			curl_multi_remove_handle(g->m, j->h);
			if (j->step == STEP_HEAD)
				head_done(g, j, cr);
			else
				get_done(g, j, cr);
		}
		for (int s = 0; s < g->nslots; s++) {
			job *j = g->slots[s];
			if (j == NULL || j->state != J_DONE)
				continue;
			if (j->fatal) {
				*err = j->err;
				failed = 1;
			}
			job_retire(g, s);
			left--;
		}
		draw(g, 0);
		if (failed || left == 0)
			break;
		int wait_ms = (int)((soonest - progress_now()) * 1000);
		if (wait_ms < 1)
			wait_ms = 1;
		curl_multi_poll(g->m, NULL, 0, wait_ms, NULL);
	}
	return failed ? -1 : 0;
}

int hub_download(hub_client *c, const hub_dl_opts *o, hub_item *items, size_t n, titan_err *err)
{
	engine g;
	memset(&g, 0, sizeof g);
	g.c = c;
	g.o = o;
	g.nslots = o->dest == HUB_DEST_STREAM ? 1 : (o->jobs > 0 ? o->jobs : 1);
	g.slots = calloc((size_t)g.nslots, sizeof *g.slots);
	g.m = curl_multi_init();
	if (g.slots == NULL || g.m == NULL) {
		free(g.slots);
		if (g.m)
			curl_multi_cleanup(g.m);
		return err_set(err, "out of memory");
	}
	/* one connection per transfer: big files go faster over parallel TCP
	 * streams than multiplexed on one HTTP/2 connection */
	curl_multi_setopt(g.m, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
	curl_multi_setopt(g.m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)g.nslots);
	for (size_t i = 0; i < n; i++)
		g.total += items[i].file->size > 0 ? (uint64_t)items[i].file->size : 0;
	progress_init(&g.pg, "total", PROGRESS_BYTES, g.total);
	int rc = run(&g, items, n, err);
	if (rc == 0)
		draw(&g, 1);
	else if (g.o->progress && g.drawn_lines > 0)
		fprintf(stderr, "\033[J");
	if (rc == 0 && g.o->progress) {
		char sum[256];
		titan_warn("%s", progress_fmt_summary(sum, sizeof sum, &g.pg, g.done_bytes,
						      progress_now() - g.pg.start));
	}
	for (int s = 0; s < g.nslots; s++)
		if (g.slots[s])
			job_retire(&g, s); /* a failure stops the rest; .incomplete files stay */
	free(g.slots);
	curl_multi_cleanup(g.m);
	return rc;
}

void hub_items_free(hub_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(items[i].local);
		items[i].local = NULL;
	}
}
