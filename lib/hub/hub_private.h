/* hub_private.h: what the files of lib/hub share and nobody else needs. */
#ifndef TITAN_HUB_PRIVATE_H
#define TITAN_HUB_PRIVATE_H

#include <curl/curl.h>
#include <stdint.h>

#include "core/cli.h"
#include "hub/hub.h"

#define TITAN_HUB_VERSION TITAN_VERSION

/* The response headers the protocol reads (the last response of a request). */
typedef struct hub_hdrs {
	long status;
	char commit[64];
	char linked_etag[160];
	char etag[160];
	char location[4096];
	char error_code[64];
	char error_msg[256];
	char retry_after[64];
	char ratelimit[128];
	char content_range[128];
	char link[4096];
	int64_t linked_size;    /* -1 when absent */
	int64_t content_length; /* -1 when absent */
} hub_hdrs;

size_t hub_header_cb(char *buf, size_t size, size_t nitems, void *userdata);

/* Entries (files and folders) a listing has named so far. */
size_t hub_filelist_entries(const hub_filelist *l);
int hub_status_retryable(long status);
int hub_curl_retryable(CURLcode rc);
/* Seconds before retry number attempt+1: the server's hint, else exponential with jitter. */
double hub_backoff(hub_client *c, int attempt, const hub_hdrs *h);
/* Describe a failed answer with what to do about it; returns -1. */
int hub_http_error(titan_err *err, const hub_client *c, const hub_hdrs *h, const char *repo,
		   hub_repo_type type, const char *what);
char *hub_url_escape_path(const char *path);
/* loc (absolute or relative) resolved against base; malloc'd, NULL if bad. */
char *hub_url_join(const char *base, const char *loc);
/* An easy handle with the common options; the token only when auth is set. */
CURL *hub_easy(hub_client *c, const char *url, int auth, int head, hub_hdrs *h,
	       struct curl_slist **sl);

#endif
