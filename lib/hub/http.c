/* Requests to the Hub: headers we read, errors that say what to do, retries
 * with backoff, and the two API calls (revision, tree). */
#include "hub/hub_private.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void hub_client_init(hub_client *c)
{
	memset(c, 0, sizeof *c);
	const char *ep = getenv("HF_ENDPOINT");
	c->endpoint = ep && *ep ? ep : "https://huggingface.co";
	c->retries = 5;
	c->retry_wait = 1.0;
	c->retry_max = 60.0;
	c->timeout_s = 60;
	c->seed = 20240520u;
}

static void hcopy(char *dst, size_t cap, const char *v, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

size_t hub_header_cb(char *buf, size_t size, size_t nitems, void *userdata)
{
	hub_hdrs *h = userdata;
	size_t n = size * nitems;
	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		/* a new response (after a 100 or a followed redirect): forget the last one */
		memset(h, 0, sizeof *h);
		h->linked_size = h->content_length = -1;
		const char *sp = memchr(buf, ' ', n);
		if (sp != NULL)
			h->status = strtol(sp + 1, NULL, 10);
		return n;
	}
	const char *colon = memchr(buf, ':', n);
	if (colon == NULL)
		return n;
	size_t klen = (size_t)(colon - buf);
	const char *v = colon + 1;
	size_t vlen = n - klen - 1;
	while (vlen > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
		vlen--;
	struct {
		const char *name;
		char *dst;
		size_t cap;
	} map[] = {
		{"x-repo-commit", h->commit, sizeof h->commit},
		{"x-linked-etag", h->linked_etag, sizeof h->linked_etag},
		{"etag", h->etag, sizeof h->etag},
		{"location", h->location, sizeof h->location},
		{"x-error-code", h->error_code, sizeof h->error_code},
		{"x-error-message", h->error_msg, sizeof h->error_msg},
		{"retry-after", h->retry_after, sizeof h->retry_after},
		{"ratelimit", h->ratelimit, sizeof h->ratelimit},
		{"content-range", h->content_range, sizeof h->content_range},
		{"link", h->link, sizeof h->link},
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (strlen(map[i].name) == klen && strncasecmp(buf, map[i].name, klen) == 0)
			hcopy(map[i].dst, map[i].cap, v, vlen);
	char num[32];
	if (klen == 13 && strncasecmp(buf, "x-linked-size", 13) == 0) {
		hcopy(num, sizeof num, v, vlen);
		h->linked_size = isdigit((unsigned char)num[0]) ? strtoll(num, NULL, 10) : -1;
	} else if (klen == 14 && strncasecmp(buf, "content-length", 14) == 0) {
		hcopy(num, sizeof num, v, vlen);
		h->content_length = isdigit((unsigned char)num[0]) ? strtoll(num, NULL, 10) : -1;
	}
	return n;
}

int hub_status_retryable(long status)
{
	return status == 408 || status == 429 || status >= 500;
}

int hub_curl_retryable(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_SSL_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

double hub_backoff(hub_client *c, int attempt, const hub_hdrs *h)
{
	double hint = h ? hub_retry_after(h->retry_after, h->ratelimit) : -1;
	if (hint >= 0)
		return hint < c->retry_max ? hint : c->retry_max;
	double w = c->retry_wait * ldexp(1.0, attempt);
	if (w > c->retry_max)
		w = c->retry_max;
	/* "equal jitter": half fixed, half random, so many clients spread out */
	double r = (double)rand_r(&c->seed) / ((double)RAND_MAX + 1.0);
	return w * (0.5 + 0.5 * r);
}

int hub_http_error(titan_err *err, const hub_client *c, const hub_hdrs *h, const char *repo,
		   hub_repo_type type, const char *what)
{
	const char *kind = type == HUB_DATASET ? "dataset" : "model";
	const char *page = type == HUB_DATASET ? "datasets/" : "";
	const char *code = h->error_code;
	if (strcmp(code, "GatedRepo") == 0)
		return err_set(err, "%s: %s %s is gated (HTTP %ld): accept its licence at %s/%s%s "
			       "while logged in, then %s", what, kind, repo, h->status, c->endpoint,
			       page, repo, c->token ? "retry with that account's token"
						    : "pass a token (HF_TOKEN or $HF_HOME/token)");
	if (strcmp(code, "RepoNotFound") == 0 || (h->status == 401 && code[0] == '\0'))
		return err_set(err, "%s: %s %s not found (HTTP %ld): check the name%s%s", what,
			       kind, repo, h->status,
			       type == HUB_MODEL ? ", add --dataset for a dataset" : "",
			       c->token ? ", and that the token can read it"
					: "; a private repo needs a token (HF_TOKEN)");
	if (strcmp(code, "RevisionNotFound") == 0)
		return err_set(err, "%s: revision not found in %s %s (HTTP %ld): check --revision "
			       "(a branch, tag or commit)", what, kind, repo, h->status);
	if (strcmp(code, "EntryNotFound") == 0 || h->status == 404)
		return err_set(err, "%s: not found in %s %s (HTTP %ld)%s%s", what, kind, repo,
			       h->status, h->error_msg[0] ? ": " : "", h->error_msg);
	if (h->status == 401 || h->status == 403)
		return err_set(err, "%s: access denied (HTTP %ld)%s%s: %s", what, h->status,
			       h->error_msg[0] ? ": " : "", h->error_msg,
			       c->token ? "check the token's permissions" : "pass a token (HF_TOKEN)");
	return err_set(err, "%s: HTTP %ld%s%s", what, h->status, h->error_msg[0] ? ": " : "",
		       h->error_msg);
}

char *hub_url_escape_path(const char *path)
{
	/* quote everything but unreserved characters and '/', as urllib.parse.quote */
	size_t n = strlen(path);
	char *s = malloc(3 * n + 1), *w = s;
	if (s == NULL)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if (isalnum(*p) || strchr("-._~/", *p) != NULL)
			*w++ = (char)*p;
		else
			w += sprintf(w, "%%%02X", *p);
	}
	*w = '\0';
	return s;
}

char *hub_url_join(const char *base, const char *loc)
{
	CURLU *u = curl_url();
	char *out = NULL, *res = NULL;
	if (u != NULL && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, loc, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &out, 0) == CURLUE_OK) {
		res = strdup(out);
		curl_free(out);
	}
	curl_url_cleanup(u);
	return res;
}

CURL *hub_easy(hub_client *c, const char *url, int auth, int head, hub_hdrs *h,
	       struct curl_slist **sl)
{
	CURL *e = curl_easy_init();
	if (e == NULL)
		return NULL;
	*sl = NULL;
	*sl = curl_slist_append(*sl, "Accept-Encoding: identity");
	if (auth && c->token != NULL) {
		size_t n = strlen(c->token) + 32;
		char *line = malloc(n);
		if (line != NULL) {
			snprintf(line, n, "authorization: Bearer %s", c->token);
			*sl = curl_slist_append(*sl, line);
			memset(line, 0, n);
			free(line);
		}
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, *sl);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "titan-hf-fetch/" TITAN_HUB_VERSION);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
	/* a stalled transfer fails (and is retried) instead of hanging */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, c->timeout_s);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, hub_header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	/* big reads: 16 KiB ones cost a system call and a callback per 16 KiB */
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);
	/* redirects are followed by hand: the token must stay on the endpoint's origin */
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	if (head)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	memset(h, 0, sizeof *h);
	h->linked_size = h->content_length = -1;
	return e;
}

typedef struct membuf {
	char *p;
	size_t n, cap;
} membuf;

static size_t mem_cb(char *ptr, size_t size, size_t nmemb, void *ud)
{
	membuf *m = ud;
	size_t n = size * nmemb;
	if (m->n + n + 1 > m->cap) {
		size_t cap = (m->n + n + 1) * 2;
		if (cap > ((size_t)256 << 20))
			return 0; /* no API answer is this big */
		char *p = realloc(m->p, cap);
		if (p == NULL)
			return 0;
		m->p = p;
		m->cap = cap;
	}
	memcpy(m->p + m->n, ptr, n);
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

/* GET an API URL into m, retrying what can be retried and following
 * same-origin redirects.  On a non-2xx answer the error is described. */
static int api_get(hub_client *c, const char *url0, const char *repo, hub_repo_type type,
		   const char *what, membuf *m, hub_hdrs *h, titan_err *err)
{
	char *url = strdup(url0);
	int attempt = 0, redirects = 0, rc = -1;
	if (url == NULL)
		return err_set(err, "%s: out of memory", what);
	while (url != NULL) {
		struct curl_slist *sl;
		m->n = 0;
		CURL *e = hub_easy(c, url, hub_same_origin(url, c->endpoint), 0, h, &sl);
		if (e == NULL) {
			err_set(err, "%s: cannot start a transfer", what);
			break;
		}
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, mem_cb);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, m);
		CURLcode cr = curl_easy_perform(e);
		curl_easy_cleanup(e);
		curl_slist_free_all(sl);
		if (cr == CURLE_OK && h->status >= 300 && h->status < 400 && h->location[0]) {
			char *next = hub_url_join(url, h->location);
			free(url);
			url = next;
			if (url == NULL || ++redirects > 10) {
				err_set(err, "%s: too many or bad redirects", what);
				break;
			}
			continue;
		}
		int retry = cr != CURLE_OK ? hub_curl_retryable(cr) : hub_status_retryable(h->status);
		if (retry && attempt < c->retries) {
			double w = hub_backoff(c, attempt, cr == CURLE_OK ? h : NULL);
			titan_warn("%s: %s, retrying in %.1f s (attempt %d of %d)", what,
				   cr != CURLE_OK ? curl_easy_strerror(cr) : "server busy", w,
				   attempt + 2, c->retries + 1);
			attempt++;
			usleep((useconds_t)(w * 1e6));
			continue;
		}
		if (cr != CURLE_OK)
			err_set(err, "%s: %s (is HF_ENDPOINT %s reachable?)", what,
				curl_easy_strerror(cr), c->endpoint);
		else if (h->status < 200 || h->status >= 300)
			hub_http_error(err, c, h, repo, type, what);
		else
			rc = 0;
		break;
	}
	free(url);
	return rc;
}

static const char *api_kind(hub_repo_type t)
{
	return t == HUB_DATASET ? "datasets" : "models";
}

int hub_resolve(hub_client *c, hub_repo_type type, const char *repo, const char *rev,
		char commit[41], titan_err *err)
{
	char *qrev = curl_easy_escape(NULL, rev, 0); /* refs/pr/1 -> refs%2Fpr%2F1 */
	char *qrepo = hub_url_escape_path(repo);
	size_t n = strlen(c->endpoint) + (qrepo ? strlen(qrepo) : 0) + (qrev ? strlen(qrev) : 0) + 64;
	char *url = malloc(n);
	membuf m = {0};
	hub_hdrs h;
	int rc = -1;
	if (qrev == NULL || qrepo == NULL || url == NULL) {
		err_set(err, "out of memory");
		goto out;
	}
	snprintf(url, n, "%s/api/%s/%s/revision/%s", c->endpoint, api_kind(type), qrepo, qrev);
	char what[512];
	snprintf(what, sizeof what, "%s@%s", repo, rev);
	if (api_get(c, url, repo, type, what, &m, &h, err) != 0)
		goto out;
	json_error_t je;
	json_t *root = json_loadb(m.p ? m.p : "", m.n, 0, &je);
	const char *sha = json_string_value(json_object_get(root, "sha"));
	if (sha == NULL || strlen(sha) != 40 || strspn(sha, "0123456789abcdef") != 40)
		err_set(err, "%s: the revision answer has no 40-digit \"sha\"", what);
	else {
		memcpy(commit, sha, 41);
		rc = 0;
	}
	json_decref(root);
out:
	curl_free(qrev);
	free(qrepo);
	free(url);
	free(m.p);
	return rc;
}

int hub_list_tree(hub_client *c, hub_repo_type type, const char *repo, const char *commit,
		  hub_filelist *l, titan_err *err)
{
	char *qrepo = hub_url_escape_path(repo);
	size_t n = strlen(c->endpoint) + (qrepo ? strlen(qrepo) : 0) + 128;
	char *url = malloc(n);
	membuf m = {0};
	hub_hdrs h;
	int rc = 0;
	if (qrepo == NULL || url == NULL) {
		free(qrepo);
		free(url);
		return err_set(err, "out of memory");
	}
	snprintf(url, n, "%s/api/%s/%s/tree/%s?recursive=true&expand=false", c->endpoint,
		 api_kind(type), qrepo, commit);
	free(qrepo);
	char what[512];
	snprintf(what, sizeof what, "%s@%.12s: file listing", repo, commit);
	/* Pages until no rel="next".  Each page must list new files: a server
	 * that loops repeats a path (refused by hub_tree_parse), one that sends
	 * empty pages is stopped here, and HUB_MAX_FILES bounds the rest. */
	while (url != NULL && rc == 0) {
		size_t before = hub_filelist_entries(l);
		rc = api_get(c, url, repo, type, what, &m, &h, err);
		if (rc == 0 && hub_tree_parse(m.p ? m.p : "", m.n, l, err) != 0)
			rc = err_prefix(err, "%s", what);
		int empty = rc == 0 && hub_filelist_entries(l) == before;
		char next[sizeof h.link];
		free(url);
		url = NULL;
		if (rc == 0 && hub_link_next(h.link, next, sizeof next) && empty) {
			rc = err_set(err, "%s: an empty page links to another one", what);
		} else if (rc == 0 && hub_link_next(h.link, next, sizeof next)) {
			url = hub_url_join(c->endpoint, next);
			if (url == NULL)
				rc = err_set(err, "%s: bad next-page link", what);
			else if (!hub_same_origin(url, c->endpoint)) {
				/* the token rides on API calls: never to another origin */
				rc = err_set(err, "%s: next-page link leaves %s", what, c->endpoint);
			}
		}
	}
	free(url);
	free(m.p);
	return rc;
}
