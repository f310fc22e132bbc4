/* titan-hf-fetch: download a model's or a dataset's files from the Hugging Face
 * Hub into a folder, into the huggingface_hub cache, or onto standard output. */
#include <ctype.h>
#include <curl/curl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/afile.h"
#include "core/cli.h"
#include "core/err.h"
#include "hub/hub.h"

enum {
	O_ASSETS = 256, O_INCLUDE, O_EXCLUDE, O_REVISION, O_DATASET, O_LOCAL_DIR, O_CACHE_DIR,
	O_CACHE, O_STDOUT, O_LIST, O_JSON, O_TOKEN, O_RETRIES, O_RETRY_WAIT, O_TIMEOUT,
	O_QUIET, O_JOBS = 'j',
};

static const cli_option opts[] = {
	{"assets", 0, CLI_ARG, O_ASSETS, "LIST", "tokenizer,config,safetensors,index"},
	{"include", 0, CLI_ARG, O_INCLUDE, "GLOB", "only files matching GLOB (repeatable)"},
	{"exclude", 0, CLI_ARG, O_EXCLUDE, "GLOB", "skip files matching GLOB (repeatable)"},
	{"revision", 0, CLI_ARG, O_REVISION, "REV", "branch, tag or commit (default main)"},
	{"dataset", 0, CLI_NO_ARG, O_DATASET, NULL, "REPO_ID is a dataset"},
	{"local-dir", 0, CLI_ARG, O_LOCAL_DIR, "DIR", "plain files in DIR (default assets/hf/NAME)"},
	{"cache-dir", 0, CLI_ARG, O_CACHE_DIR, "DIR", "the huggingface_hub cache layout in DIR"},
	{"cache", 0, CLI_NO_ARG, O_CACHE, NULL, "the default cache ($HF_HUB_CACHE)"},
	{"stdout", 0, CLI_NO_ARG, O_STDOUT, NULL, "stream the files' bytes, in order"},
	{"list", 0, CLI_NO_ARG, O_LIST, NULL, "list the selected files, fetch nothing"},
	{"json", 0, CLI_NO_ARG, O_JSON, NULL, "report as JSON on stdout"},
	{"jobs", 'j', CLI_ARG, O_JOBS, "N", "parallel transfers (default 4)"},
	{"token", 0, CLI_ARG, O_TOKEN, "TOKEN", "access token (prefer HF_TOKEN)"},
	{"retries", 0, CLI_ARG, O_RETRIES, "N", "retries per request (default 5)"},
	{"retry-wait", 0, CLI_ARG, O_RETRY_WAIT, "SEC", "first backoff (default 1, doubles)"},
	{"timeout", 0, CLI_ARG, O_TIMEOUT, "SEC", "a stalled transfer fails after SEC (default 60)"},
	{"quiet", 'q', CLI_NO_ARG, O_QUIET, NULL, "no progress bars"},
	{NULL, 0, 0, 0, NULL, NULL},
};

static const cli_spec spec = {
	.prog = "titan-hf-fetch",
	.synopsis = "[options] REPO_ID",
	.summary = "Fetch files of a Hugging Face Hub model or dataset.",
	.opts = opts,
	.epilog = "environment: HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE=1\n"
		  "example: titan-hf-fetch meta-llama/Llama-3.1-8B --assets tokenizer,config\n",
};

/* torchtitan's scripts/download_hf_assets.py groups */
static const struct {
	const char *name;
	const char *globs[8];
} groups[] = {
	{"tokenizer", {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
		       "vocab.txt", "merges.txt", "special_tokens_map.json", NULL}},
	{"config", {"config.json", "generation_config.json", NULL}},
	{"safetensors", {"*.safetensors", "model.safetensors.index.json", NULL}},
	{"index", {"model.safetensors.index.json", NULL}},
};

typedef struct globs {
	const char **v;
	size_t n;
} globs;

static void globs_add(globs *g, const char *s)
{
	const char **v = realloc(g->v, (g->n + 1) * sizeof *v);
	if (v == NULL)
		titan_die(TITAN_EXIT_FAIL, "out of memory");
	g->v = v;
	g->v[g->n++] = s;
}

static void add_assets(globs *g, char *list)
{
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t i;
		for (i = 0; i < sizeof groups / sizeof groups[0]; i++)
			if (strcmp(t, groups[i].name) == 0)
				break;
		if (i == sizeof groups / sizeof groups[0])
			cli_usage_error(&spec, "--assets: unknown group '%s' (tokenizer, config, "
					"safetensors, index)", t);
		for (const char *const *p = groups[i].globs; *p; p++)
			globs_add(g, *p);
	}
}

/* huggingface_hub's filter_repo_objects: a pattern ending in '/' means the folder */
static int match_any(const globs *g, const char *path)
{
	for (size_t i = 0; i < g->n; i++) {
		const char *p = g->v[i];
		size_t n = strlen(p);
		if (n > 0 && p[n - 1] == '/') {
			char buf[1024];
			snprintf(buf, sizeof buf, "%s*", p);
			if (hub_glob_match(buf, path))
				return 1;
		} else if (hub_glob_match(p, path)) {
			return 1;
		}
	}
	return 0;
}

static int valid_repo_id(const char *r)
{
	int slashes = 0;
	if (!*r || *r == '/' || *r == '.' || *r == '-')
		return 0;
	for (const char *p = r; *p; p++) {
		if (*p == '/')
			slashes++;
		else if (!isalnum((unsigned char)*p) && !strchr("-_.", *p))
			return 0;
	}
	return slashes <= 1 && !strstr(r, "..") && !strstr(r, "--") && r[strlen(r) - 1] != '/';
}

static int truthy(const char *v)
{
	return v && (!strcmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "true"));
}

typedef struct args {
	const char *repo, *revision, *local_dir, *cache_dir, *token;
	globs inc, exc;
	int dataset, to_stdout, list, json, jobs, retries, quiet, use_cache, assets_given;
	double retry_wait;
	long timeout;
	char *assets;
} args;

static void parse(args *a, int argc, char **argv)
{
	memset(a, 0, sizeof *a);
	a->revision = "main";
	a->jobs = 4;
	a->retries = -1;
	a->retry_wait = -1;
	a->timeout = -1;
	cli_state st;
	cli_begin(&st, &spec);
	int id;
	while ((id = cli_next(&st, argc, argv)) != -1) {
		switch (id) {
		case O_ASSETS: a->assets = strdup(st.arg); add_assets(&a->inc, a->assets);
			a->assets_given = 1; break;
		case O_INCLUDE: globs_add(&a->inc, st.arg); break;
		case O_EXCLUDE: globs_add(&a->exc, st.arg); break;
		case O_REVISION: a->revision = st.arg; break;
		case O_DATASET: a->dataset = 1; break;
		case O_LOCAL_DIR: a->local_dir = st.arg; break;
		case O_CACHE_DIR: a->cache_dir = st.arg; a->use_cache = 1; break;
		case O_CACHE: a->use_cache = 1; break;
		case O_STDOUT: a->to_stdout = 1; break;
		case O_LIST: a->list = 1; break;
		case O_JSON: a->json = 1; break;
		case O_JOBS: a->jobs = (int)cli_int(&spec, "-j", st.arg, 1, 64); break;
		case O_TOKEN: a->token = st.arg; break;
		case O_RETRIES: a->retries = (int)cli_int(&spec, "--retries", st.arg, 0, 100); break;
		case O_RETRY_WAIT: a->retry_wait = cli_double(&spec, "--retry-wait", st.arg, 0, 3600); break;
		case O_TIMEOUT: a->timeout = (long)cli_int(&spec, "--timeout", st.arg, 1, 86400); break;
		case O_QUIET: a->quiet = 1; break;
		}
	}
	if (st.optind != argc - 1)
		cli_usage_error(&spec, "expected one REPO_ID (org/name)");
	a->repo = argv[st.optind];
	if (!valid_repo_id(a->repo))
		cli_usage_error(&spec, "'%s' is not a repo id (org/name)", a->repo);
	if (a->local_dir && a->use_cache)
		cli_usage_error(&spec, "--local-dir and --cache-dir/--cache exclude each other");
	if (a->to_stdout && a->list)
		cli_usage_error(&spec, "--stdout and --list exclude each other");
	if (a->to_stdout && a->json)
		cli_usage_error(&spec, "--stdout carries the files' bytes: no --json with it");
}

static void print_list(const args *a, const hub_filelist *l, const size_t *sel, size_t n,
		       const char *commit)
{
	if (!a->json) {
		for (size_t i = 0; i < n; i++)
			printf("%12lld  %s\n", (long long)l->v[sel[i]].size, l->v[sel[i]].path);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		const hub_file *f = &l->v[sel[i]];
		json_array_append_new(arr, json_pack("{s:s, s:I, s:s?, s:s?}", "path", f->path,
						     "size", (json_int_t)f->size, "lfs_sha256",
						     f->lfs_sha[0] ? f->lfs_sha : NULL, "oid",
						     f->oid[0] ? f->oid : NULL));
	}
	json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "repo", a->repo, "revision", a->revision,
			      "commit", commit, "files", arr);
	json_dumpf(o, stdout, JSON_INDENT(1));
	putchar('\n');
	json_decref(o);
}

static void print_result(const args *a, hub_item *items, size_t n, const char *commit)
{
	if (a->to_stdout)
		return;
	if (!a->json) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", items[i].local);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:I, s:s, s:s, s:b}", "path",
						     items[i].file->path, "size",
						     (json_int_t)items[i].size, "etag", items[i].etag,
						     "local", items[i].local, "cached",
						     items[i].cached));
	json_t *o = json_pack("{s:s, s:s, s:s, s:o}", "repo", a->repo, "revision", a->revision,
			      "commit", commit, "files", arr);
	json_dumpf(o, stdout, JSON_INDENT(1));
	putchar('\n');
	json_decref(o);
}

/* HF_HUB_OFFLINE=1: serve what the cache holds, touch no network. */
static int offline(const args *a, const char *storage, const hub_filelist *l, size_t *sel,
		   size_t n, const char *commit, titan_err *err)
{
	if (a->to_stdout) {
		char buf[1 << 16];
		for (size_t i = 0; i < n; i++) {
			char *p = NULL;
			if (asprintf(&p, "%s/snapshots/%s/%s", storage, commit, l->v[sel[i]].path) < 0)
				return err_set(err, "out of memory");
			FILE *f = fopen(p, "rb");
			if (f == NULL) {
				err_errno(err, "%s", p);
				free(p);
				return -1;
			}
			size_t k;
			while ((k = fread(buf, 1, sizeof buf, f)) > 0)
				if (fwrite(buf, 1, k, stdout) != k)
					break;
			int bad = ferror(f) || ferror(stdout);
			fclose(f);
			free(p);
			if (bad)
				return err_errno(err, "%s: copy to standard output", l->v[sel[i]].path);
		}
		return fflush(stdout) == 0 ? 0 : err_errno(err, "standard output");
	}
	hub_item *items = calloc(n, sizeof *items);
	if (items == NULL)
		return err_set(err, "out of memory");
	for (size_t i = 0; i < n; i++) {
		items[i].file = &l->v[sel[i]];
		items[i].size = l->v[sel[i]].size;
		items[i].cached = 1;
		if (asprintf(&items[i].local, "%s/snapshots/%s/%s", storage, commit,
			     l->v[sel[i]].path) < 0)
			items[i].local = NULL;
	}
	print_result(a, items, n, commit);
	hub_items_free(items, n);
	free(items);
	return 0;
}

static int fetch(args *a, titan_err *err)
{
	hub_repo_type type = a->dataset ? HUB_DATASET : HUB_MODEL;
	char *token = NULL;
	if (a->token)
		titan_warn("--token shows the token to other users (ps) and in shell history; "
			   "prefer HF_TOKEN in the environment or $HF_HOME/token");
	if (hub_token_lookup(a->token, &token, err) != 0)
		return -1;
	hub_client c;
	hub_client_init(&c);
	c.token = token;
	if (a->retries >= 0)
		c.retries = a->retries;
	if (a->retry_wait >= 0)
		c.retry_wait = a->retry_wait;
	if (a->timeout > 0)
		c.timeout_s = a->timeout;
	int off = truthy(getenv("HF_HUB_OFFLINE"));

	char *cache = NULL, *storage = NULL, *root = NULL;
	/* offline reads the cache; a stream keeps nothing on disk */
	hub_dest dest = off ? HUB_DEST_CACHE : a->to_stdout ? HUB_DEST_STREAM
			: a->use_cache ? HUB_DEST_CACHE : HUB_DEST_DIR;
	if (a->to_stdout && !off && (a->use_cache || a->local_dir))
		titan_warn("--stdout streams without keeping files; --cache-dir/--local-dir ignored");
	if (a->use_cache || off) {
		cache = a->cache_dir ? strdup(a->cache_dir) : hub_default_cache();
		char *folder = hub_repo_folder(type, a->repo);
		if (cache == NULL || folder == NULL || asprintf(&storage, "%s/%s", cache, folder) < 0)
			storage = NULL;
		free(folder);
		if (storage == NULL) {
			free(cache);
			free(token);
			return err_set(err, "out of memory");
		}
	}
	if (dest == HUB_DEST_DIR) {
		const char *name = strrchr(a->repo, '/') ? strrchr(a->repo, '/') + 1 : a->repo;
		if (a->local_dir)
			root = strdup(a->local_dir);
		else if (asprintf(&root, "assets/hf/%s", name) < 0)
			root = NULL;
	}

	char commit[41];
	hub_filelist l = {0};
	size_t *sel = NULL, n = 0;
	hub_item *items = NULL;
	int rc = -1;
	if (off) {
		if (a->local_dir)
			titan_warn("HF_HUB_OFFLINE=1: reading the cache, not --local-dir");
		if (hub_cache_ref_read(storage, a->revision, commit, err) != 0 ||
		    hub_cache_snapshot_list(storage, commit, &l, err) != 0)
			goto out;
	} else if (hub_resolve(&c, type, a->repo, a->revision, commit, err) != 0 ||
		   hub_list_tree(&c, type, a->repo, commit, &l, err) != 0) {
		goto out;
	}
	sel = calloc(l.n ? l.n : 1, sizeof *sel);
	if (sel == NULL) {
		err_set(err, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < l.n; i++)
		if ((a->inc.n == 0 || match_any(&a->inc, l.v[i].path)) &&
		    !match_any(&a->exc, l.v[i].path))
			sel[n++] = i;
	if (n == 0) {
		err_set(err, "%s@%s: no file matches %s (%zu files in the repo%s; try --list "
			"without filters)", a->repo, a->revision,
			a->assets_given ? "the asset groups" : "the --include/--exclude patterns",
			l.n, off ? " cache" : "");
		goto out;
	}
	if (a->list) {
		print_list(a, &l, sel, n, commit);
		rc = 0;
		goto out;
	}
	if (off) {
		rc = offline(a, storage, &l, sel, n, commit, err);
		goto out;
	}
	if (dest == HUB_DEST_CACHE && hub_cache_ref_write(storage, a->revision, commit, err) != 0)
		goto out;
	items = calloc(n, sizeof *items);
	if (items == NULL) {
		err_set(err, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		items[i].file = &l.v[sel[i]];
	hub_dl_opts o = {
		.type = type, .repo = a->repo, .commit = commit, .dest = dest,
		.root = dest == HUB_DEST_CACHE ? storage : root, .stream_fd = STDOUT_FILENO,
		.jobs = a->jobs, .progress = !a->quiet && isatty(STDERR_FILENO),
	};
	rc = hub_download(&c, &o, items, n, err);
	if (rc == 0)
		print_result(a, items, n, commit);
out:
	if (items)
		hub_items_free(items, n);
	free(items);
	free(sel);
	hub_filelist_free(&l);
	free(root);
	free(storage);
	free(cache);
	if (token) {
		memset(token, 0, strlen(token));
		free(token);
	}
	return rc;
}

int main(int argc, char **argv)
{
	args a;
	parse(&a, argc, argv);
	signal(SIGPIPE, SIG_IGN); /* a closed pipe is an error value, not a silent death */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		titan_die(TITAN_EXIT_FAIL, "cannot initialise libcurl");
	titan_err err = {{0}};
	int rc = fetch(&a, &err);
	curl_global_cleanup();
	free(a.inc.v);
	free(a.exc.v);
	free(a.assets);
	if (rc != 0)
		titan_die_err(&err);
	if (fflush(stdout) != 0)
		titan_die(TITAN_EXIT_FAIL, "standard output: write failed");
	return TITAN_EXIT_OK;
}
