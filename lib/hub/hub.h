/* hub.h: a Hugging Face Hub client (the protocol huggingface_hub speaks).
 *
 *   revision -> commit   GET  {EP}/api/{models|datasets}/REPO/revision/REV   ("sha")
 *   file list            GET  {EP}/api/.../REPO/tree/COMMIT?recursive=true   (Link: rel="next")
 *   file metadata        HEAD {EP}/[datasets/]REPO/resolve/COMMIT/PATH, redirects not
 *                        followed: X-Repo-Commit, X-Linked-Etag or ETag, X-Linked-Size
 *                        or Content-Length, Location (often another host: a CDN)
 *   file bytes           GET  the Location, "Range: bytes=N-" to resume
 *
 * The cache layout is huggingface_hub's, so either tool reads the other's files:
 *   CACHE/models--org--name/blobs/<etag>            the bytes
 *   CACHE/models--org--name/snapshots/<commit>/PATH -> ../../blobs/<etag> (relative)
 *   CACHE/models--org--name/refs/<rev>              the commit, no newline
 *
 * The token goes only to the endpoint's origin (scheme, host, port); a redirect to
 * any other origin is followed without it.  It is never printed. */
#ifndef TITAN_HUB_H
#define TITAN_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum { HUB_MODEL = 0, HUB_DATASET = 1 } hub_repo_type;

/* One file of a repository, from the tree listing. */
typedef struct hub_file {
	char *path;       /* owned; relative, checked by hub_path_safe() */
	int64_t size;     /* bytes (the LFS object's size for LFS files) */
	char oid[41];     /* git blob sha1 */
	char lfs_sha[65]; /* sha256 of the content for LFS files, "" otherwise */
} hub_file;

typedef struct hub_filelist {
	hub_file *v;
	size_t n, cap;
	struct strmap *seen; /* private: the paths listed, to refuse a repeat */
} hub_filelist;

/* Files one listing may hold: a server that pages forever (or loops) is
 * stopped here or at its first repeated path.  The Hub's largest repositories
 * hold a few hundred thousand files. */
#define HUB_MAX_FILES (1u << 21)

void hub_filelist_free(hub_filelist *l);

/* ---- pure helpers (no network) ---- */

/* fnmatch(3) without flags, as huggingface_hub's allow/ignore patterns: '*' and
 * '?' also match '/', "[a-z]" and "[!a-z]" classes, '\' is an ordinary
 * character (as in Python's fnmatch).  1 on a match. */
int hub_glob_match(const char *pattern, const char *s);

/* The globs of one of torchtitan's download_hf_assets.py groups ("tokenizer",
 * "config", "safetensors", "index"), NULL-terminated; NULL for another name. */
const char *const *hub_asset_globs(const char *group);

/* huggingface_hub's filter_repo_objects: path matches one of inc (all paths do
 * when ninc is 0) and none of exc; a pattern ending in '/' means its folder. */
int hub_selected(const char *path, const char *const *inc, size_t ninc,
		 const char *const *exc, size_t nexc);

/* 1 when a remote path may become a local one: not empty, not absolute, no ".."
 * or "." or empty component, no NUL within len bytes, no backslash. */
int hub_path_safe(const char *path, size_t len);

/* The URL of rel="next" in a Link header value into out; 1 found, 0 not. */
int hub_link_next(const char *value, char *out, size_t n);

/* Append the files of one page of a tree listing (a JSON array) to l; folders
 * are skipped.  A path that fails hub_path_safe() is an error. */
int hub_tree_parse(const char *json, size_t len, hub_filelist *l, titan_err *err);

/* Seconds to wait from a Retry-After value (delta seconds) or an IETF
 * RateLimit value ("...;t=SECONDS"); -1 when neither parses. */
double hub_retry_after(const char *retry_after, const char *ratelimit);

/* The etag as a file name: W/ and quotes removed.  1 when it is a 64-digit
 * lowercase sha256 (an LFS object, verified after download). */
void hub_etag_normalize(const char *raw, char *out, size_t n);
int hub_etag_is_sha256(const char *etag);

/* "models--org--name" or "datasets--org--name"; malloc'd. */
char *hub_repo_folder(hub_repo_type type, const char *repo_id);

/* The default cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. */
char *hub_default_cache(void);

/* The token: cli (if not NULL), $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, the file
 * $HF_TOKEN_PATH or $HF_HOME/token (~/.cache/huggingface/token).  *out is
 * malloc'd, NULL when there is none.  Whitespace around it is dropped. */
int hub_token_lookup(const char *cli, char **out, titan_err *err);

/* Cache: refs/<rev> holds the commit.  read: 0 found, -1 not (err says why). */
int hub_cache_ref_read(const char *storage, const char *rev, char commit[41], titan_err *err);
int hub_cache_ref_write(const char *storage, const char *rev, const char *commit, titan_err *err);
/* snapshots/<commit>/<path> -> relative symlink to blobs/<etag>, replacing a stale one. */
int hub_cache_link(const char *storage, const char *commit, const char *path,
		   const char *etag, titan_err *err);
/* Files under snapshots/<commit>/ (offline use), sorted; sizes from the blobs. */
int hub_cache_snapshot_list(const char *storage, const char *commit, hub_filelist *l,
			    titan_err *err);

/* Whether a and b share scheme, host and port (the token's boundary). */
int hub_same_origin(const char *a, const char *b);

/* ---- network ---- */

typedef struct hub_client {
	const char *endpoint;  /* HF_ENDPOINT or https://huggingface.co, no trailing '/' */
	const char *token;     /* NULL for anonymous; borrowed */
	int retries;           /* attempts after the first, per request */
	double retry_wait;     /* first backoff in seconds; doubles, with jitter */
	double retry_max;      /* cap on one wait */
	long timeout_s;        /* no byte for this long: the transfer failed */
	unsigned seed;         /* jitter */
} hub_client;

void hub_client_init(hub_client *c);

int hub_resolve(hub_client *c, hub_repo_type type, const char *repo, const char *rev,
		char commit[41], titan_err *err);
/* Every file of the repository at commit (recursive, all pages). */
int hub_list_tree(hub_client *c, hub_repo_type type, const char *repo, const char *commit,
		  hub_filelist *l, titan_err *err);

typedef enum { HUB_DEST_CACHE, HUB_DEST_DIR, HUB_DEST_STREAM } hub_dest;

typedef struct hub_item {
	const hub_file *file;  /* borrowed */
	/* filled by hub_download */
	char etag[129];
	int64_t size;
	char *local;           /* final path (owned), NULL for a stream */
	int cached;            /* 1: already there, no byte transferred */
} hub_item;

typedef struct hub_dl_opts {
	hub_repo_type type;
	const char *repo;
	const char *commit;
	hub_dest dest;
	const char *root;      /* the storage folder (CACHE) or the local folder (DIR) */
	int stream_fd;         /* HUB_DEST_STREAM: where the bytes go, in item order */
	int jobs;              /* parallel transfers (1 for a stream) */
	int progress;          /* draw progress bars on stderr */
} hub_dl_opts;

/* Fetch every item; stops at the first failure that retries cannot mend (the
 * other transfers are stopped, their .incomplete files kept for a resume). */
int hub_download(hub_client *c, const hub_dl_opts *o, hub_item *items, size_t n,
		 titan_err *err);

/* Free the items' local paths. */
void hub_items_free(hub_item *items, size_t n);

#endif
