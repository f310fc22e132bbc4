/* titan-bench io: the data loader and checkpoint save/load against the raw
 * disk on the same files, measured in the same run.  "Cold" drops the files'
 * pages from the page cache first (posix_fadvise DONTNEED, which needs no
 * privileges and touches nothing else); "warm" reads them from the cache. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bench.h"
#include "core/afile.h"
#include "dcp/dcp.h"
#include "loader/loader.h"
#include "prof/prof.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

#define CHUNK (4u << 20)

/* Every regular file of dir (not recursing), as paths; NULL-terminated. */
static char **list_files(const char *dir, titan_err *e)
{
	DIR *d = opendir(dir);
	if (d == NULL) {
		err_errno(e, "%s", dir);
		return NULL;
	}
	size_t n = 0, cap = 16;
	char **v = malloc(cap * sizeof *v);
	struct dirent *de;
	while (v != NULL && (de = readdir(d)) != NULL) {
		if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
			continue;
		if (n + 2 > cap) {
			char **w = realloc(v, (cap *= 2) * sizeof *v);
			if (w == NULL)
				break;
			v = w;
		}
		if ((v[n] = path_join(dir, de->d_name)) == NULL)
			break;
		v[++n] = NULL;
	}
	closedir(d);
	if (v == NULL || de != NULL) {
		for (size_t i = 0; v != NULL && i < n; i++)
			free(v[i]);
		free(v);
		err_set(e, "%s: out of memory listing files", dir);
		return NULL;
	}
	v[n] = NULL;
	return v;
}

static void free_list(char **v)
{
	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

/* Drop the files' cached pages (after flushing dirty ones). */
static void drop_cache(char **files)
{
	for (size_t i = 0; files[i] != NULL; i++) {
		int fd = open(files[i], O_RDONLY);
		if (fd < 0)
			continue;
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* Read the files whole with read(2); bytes read, or -1. */
static int64_t raw_read(char **files, titan_err *e)
{
	char *buf = malloc(CHUNK);
	int64_t total = 0;
	if (buf == NULL)
		return err_set(e, "out of memory");
	for (size_t i = 0; files[i] != NULL && total >= 0; i++) {
		int fd = open(files[i], O_RDONLY);
		if (fd < 0) {
			total = err_errno(e, "%s", files[i]);
			break;
		}
		ssize_t r;
		while ((r = read(fd, buf, CHUNK)) > 0)
			total += r;
		if (r < 0)
			total = err_errno(e, "%s", files[i]);
		close(fd);
	}
	free(buf);
	return total;
}

/* Write bytes of buf to path with write(2) and fsync, as a checkpoint must. */
static int raw_write(const char *path, const void *buf, size_t bytes, titan_err *e)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return err_errno(e, "%s", path);
	for (size_t off = 0; off < bytes;) {
		size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
		ssize_t w = write(fd, (const char *)buf + off, n);
		if (w < 0) {
			close(fd);
			return err_errno(e, "%s", path);
		}
		off += (size_t)w;
	}
	if (fsync(fd) != 0) {
		close(fd);
		return err_errno(e, "%s: fsync", path);
	}
	return close(fd) != 0 ? err_errno(e, "%s", path) : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* A shard folder of about `bytes` of uncompressed 2-byte ids (vocabulary
 * 50000, documents of 200 to 4000 tokens) in out, through a token stream
 * file beside it, as titan-tokenize | titan-shard would make it. */
static int make_shards(const char *work, const char *out, uint64_t bytes, titan_err *e)
{
	char *stream = path_join(work, "stream.tts");
	FILE *fp = stream ? fopen(stream, "w+b") : NULL;
	if (fp == NULL) {
		free(stream);
		return err_errno(e, "%s/stream.tts", work);
	}
	tokstream_header h = {.id_width = 2, .vocab_size = 50000, .bos_id = 1, .eos_id = 2,
			      .flags = TOKSTREAM_FLAG_BOS | TOKSTREAM_FLAG_EOS};
	tokstream_writer *w = tokstream_writer_open(fp, &h, e);
	uint32_t ids[4000];
	uint64_t seed = 42, tokens = 0, want = bytes / 2;
	int rc = w == NULL ? -1 : 0;
	while (rc == 0 && tokens < want) {
		size_t n = 200 + (size_t)(lcg(&seed) % 3801);
		ids[0] = 1;
		for (size_t i = 1; i + 1 < n; i++)
			ids[i] = 3 + (uint32_t)(lcg(&seed) % 49997);
		ids[n - 1] = 2;
		rc = tokstream_write_doc(w, ids, n, e);
		tokens += n;
	}
	if (w != NULL && rc == 0)
		rc = tokstream_writer_close(w, e);
	else if (w != NULL)
		tokstream_writer_abort(w);
	if (rc == 0) {
		rewind(fp);
		tokstream_reader *r = tokstream_reader_open(fp, stream, e);
		shard_build_opts o = {.out = out, .shard_tokens = want / 4 + 1};
		shard_build_stats st;
		rc = r == NULL || shard_build(r, &o, &st, e) ? -1 : 0;
		if (r != NULL)
			tokstream_reader_close(r);
	}
	fclose(fp);
	remove(stream);
	free(stream);
	return rc;
}

/* The shard files of the train split, as paths. */
static char **train_files(const char *dir, uint64_t *tokens, titan_err *e)
{
	shard_manifest m;
	if (shard_manifest_read(dir, &m, e))
		return NULL;
	const shard_split *s = &m.split[SHARD_TRAIN];
	char **v = calloc(s->n_shards + 1, sizeof *v);
	for (size_t i = 0; v != NULL && i < s->n_shards; i++)
		if ((v[i] = path_join(dir, s->shards[i].file)) == NULL) {
			free_list(v);
			v = NULL;
		}
	*tokens = s->tokens;
	shard_manifest_free(&m);
	if (v == NULL)
		err_set(e, "out of memory");
	return v;
}

/* Every batch of one epoch; tokens delivered in *tok. */
static int read_epoch(const char *dir, const bench_args *a, uint64_t *tok, titan_err *e)
{
	loader_opts o = {.dir = dir, .split = LOADER_TRAIN, .seq_len = a->seq,
			 .local_batch = a->batch, .dp_degree = 1};
	loader *l = loader_open(&o, e);
	if (l == NULL)
		return -1;
	uint64_t calls = loader_windows(l) / (uint64_t)a->batch;
	int rc = calls == 0 ? err_set(e, "%s: fewer windows than one batch of %" PRId64 " x %" PRId64,
				      dir, a->batch, a->seq + 1) : 0;
	*tok = 0;
	for (uint64_t i = 0; i < calls && rc == 0; i++) {
		const loader_batch *b;
		PROF_T0(t);
		rc = loader_next(l, &b, e) == 1 ? 0 : -1;
		PROF_OP(t, "loader_next", PA_I("b", a->batch), PA_I("t", a->seq));
		*tok += (uint64_t)(a->batch * (a->seq + 1));
	}
	loader_close(l);
	return rc;
}

static void io_row(report *r, const char *what, const char *cache, double bytes, double t,
		   double raw_t, double tokens)
{
	json_t *row = report_row(r);
	rset(row, "what", json_string(what));
	rset(row, "cache", json_string(cache));
	rset(row, "mb", json_real(bytes / 1e6));
	rset(row, "seconds", json_real(t));
	rset(row, "mb_s", json_real(bytes / 1e6 / t));
	rset(row, "raw_mb_s", json_real(bytes / 1e6 / raw_t));
	rset(row, "ratio", json_real(raw_t / t));
	if (tokens > 0)
		rset(row, "mtok_s", json_real(tokens / 1e6 / t));
}

static int bench_loader(const char *data, const bench_args *a, report *r, titan_err *e)
{
	uint64_t tokens;
	char **files = train_files(data, &tokens, e);
	if (files == NULL)
		return -1;
	int rc = 0;
	/* Cold then warm, each in two rounds with the sides alternating; the
	 * better time of each side counts (see bench_ckpt). */
	for (int cold = 1; cold >= 0 && rc == 0; cold--) {
		uint64_t tok = 0;
		int64_t got = 0;
		double raw_t = 1e30, t = 1e30;
		for (int round = 0; round < 2 && rc == 0; round++) {
			if (cold)
				drop_cache(files);
			double t0 = bench_now();
			if ((got = raw_read(files, e)) < 0) {
				rc = -1;
				break;
			}
			raw_t = fmin(raw_t, bench_now() - t0);
			if (cold)
				drop_cache(files);
			t0 = bench_now();
			rc = read_epoch(data, a, &tok, e);
			t = fmin(t, bench_now() - t0);
		}
		if (rc != 0)
			break;
		/* The loader's bytes: the share of the files its windows cover. */
		double share = (double)tok / (double)tokens;
		io_row(r, "loader epoch", cold ? "cold" : "warm", (double)got * share, t,
		       raw_t * share, (double)tok);
	}
	free_list(files);
	return rc;
}

static int bench_ckpt(const char *work, const bench_args *a, report *r, titan_err *e)
{
	const uint64_t tensor = (uint64_t)16 << 20;
	uint64_t total = a->size;
	size_t nt = (size_t)((total + tensor - 1) / tensor);
	float *data = malloc(total), *back = malloc(total);
	dcp_item *items = calloc(nt, sizeof *items), *load = calloc(nt, sizeof *load);
	char (*names)[32] = calloc(nt, sizeof *names);
	char *dir = path_join(work, "step-1"), *raw = path_join(work, "raw.bin");
	int rc = 0;
	if (!data || !back || !items || !load || !names || !dir || !raw)
		rc = err_set(e, "out of memory for a %" PRIu64 "-byte checkpoint", total);
	uint64_t seed = 7;
	for (uint64_t i = 0; rc == 0 && i < total / 4; i++)
		data[i] = (float)(lcg(&seed) & 0xffffff) * 1e-6f;
	for (size_t i = 0; rc == 0 && i < nt; i++) {
		uint64_t b = i + 1 < nt ? tensor : total - tensor * (nt - 1);
		int64_t shape[1] = {(int64_t)(b / 4)};
		snprintf(names[i], sizeof names[i], "layers.%zu.weight", i);
		dcp_item_full(&items[i], names[i], PTZ_F32, 1, shape, data + i * (tensor / 4));
		dcp_item_full(&load[i], names[i], PTZ_F32, 1, shape, back + i * (tensor / 4));
	}
	/* Two rounds, the two sides alternating, the better time of each side
	 * counting: on a shared disk one side must not pay for the other's
	 * write-back, nor for a neighbour's burst. */
	double t_save = 1e30, t_raw_w = 1e30, t_load = 1e30, t_raw_r = 1e30;
	char *one[2] = {raw, NULL};
	for (int round = 0; round < 2 && rc == 0; round++) {
		double t0 = bench_now();
		PROF_T0(t);
		rc = dcp_save(dir, items, nt, &(dcp_save_opts){0}, e);
		PROF_OP(t, "dcp_save", PA_I("bytes", total));
		t_save = fmin(t_save, bench_now() - t0);
		t0 = bench_now();
		if (rc == 0)
			rc = raw_write(raw, data, total, e);
		t_raw_w = fmin(t_raw_w, bench_now() - t0);
		char **files = rc == 0 ? list_files(dir, e) : NULL;
		if (files == NULL) {
			rc = -1;
			break;
		}
		drop_cache(files);
		free_list(files);
		memset(back, 0, total);
		t0 = bench_now();
		PROF_T0(tl);
		rc = dcp_load(dir, load, nt, e);
		PROF_OP(tl, "dcp_load", PA_I("bytes", total));
		t_load = fmin(t_load, bench_now() - t0);
		if (rc == 0 && memcmp(data, back, total) != 0)
			rc = err_set(e, "%s: the checkpoint read back differs from what was saved", dir);
		drop_cache(one);
		t0 = bench_now();
		if (rc == 0)
			rc = raw_read(one, e) < 0 ? -1 : 0;
		t_raw_r = fmin(t_raw_r, bench_now() - t0);
	}
	if (rc == 0) {
		io_row(r, "checkpoint save (DCP, fsync)", "-", (double)total, t_save, t_raw_w, 0);
		io_row(r, "checkpoint load (DCP)", "cold", (double)total, t_load, t_raw_r, 0);
	}
	free(data);
	free(back);
	free(items);
	free(load);
	free(names);
	free(dir);
	free(raw);
	return rc;
}

/* The scratch folder outlives no interrupted run: on SIGINT, SIGTERM or
 * SIGHUP the handler wakes a watcher thread (sem_post is async-signal-safe,
 * removing a tree is not), which removes the folder and then dies of the
 * signal.  The main thread may still be writing into it, so the removal
 * repeats until the folder is gone. */
static const int watched[] = {SIGINT, SIGTERM, SIGHUP};

typedef struct watch {
	sem_t wake;
	pthread_t thread;
	const char *dir;
	struct sigaction old[3];
} watch;

static watch *the_watch;
static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
	sem_post(&the_watch->wake);
}

static void *watcher(void *arg)
{
	watch *w = arg;
	while (sem_wait(&w->wake) != 0)
		;
	int sig = caught;
	if (sig == 0)
		return NULL; /* watch_stop */
	for (int i = 0; i < 100 && access(w->dir, F_OK) == 0; i++)
		rm_rf(w->dir);
	signal(sig, SIG_DFL);
	raise(sig);
	return NULL;
}

static int watch_start(watch *w, const char *dir, titan_err *e)
{
	w->dir = dir;
	caught = 0;
	the_watch = w;
	if (sem_init(&w->wake, 0, 0) != 0)
		return err_errno(e, "io: watching for signals");
	int rc = pthread_create(&w->thread, NULL, watcher, w);
	if (rc != 0) {
		sem_destroy(&w->wake);
		return err_set(e, "io: watching for signals: %s", strerror(rc));
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(watched[i], &sa, &w->old[i]);
	return 0;
}

/* After the folder is removed: the old actions back first (a signal from
 * now on acts at once, with nothing left to remove), then the watcher ends,
 * or finishes dying of a signal it already caught. */
static void watch_stop(watch *w)
{
	for (int i = 0; i < 3; i++)
		sigaction(watched[i], &w->old[i], NULL);
	sem_post(&w->wake);
	pthread_join(w->thread, NULL);
	sem_destroy(&w->wake);
	the_watch = NULL;
}

static void human(char *buf, size_t n, double bytes)
{
	static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	int u = 0;
	while (bytes >= 1024 && u < 6)
		bytes /= 1024, u++;
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

/* What the run will hold, against what base's filesystem has free and the
 * machine's memory: synthetic shards with the token stream they are built
 * from (2 x size), then the shards, the checkpoint and its raw copy (3 x
 * size) on disk; the checkpoint and the copy it is read back into in memory
 * (2 x size).  Refused before anything is written. */
static int check_room(const bench_args *a, const char *base, titan_err *e)
{
	struct statvfs fs;
	if (statvfs(base, &fs) != 0)
		return err_errno(e, "%s", base);
	double size = (double)a->size, disk = size * (a->data ? 1 : 3) * 1.05 + (64 << 20);
	double free_b = (double)fs.f_bavail * (double)fs.f_frsize;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	double mem = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0;
	char s[32], need[32], have[32];
	human(s, sizeof s, size);
	if (disk > free_b) {
		human(need, sizeof need, disk);
		human(have, sizeof have, free_b);
		err_set(e, "io --size %s: needs %s free in %s (%s, a checkpoint and its raw copy), "
			"which has %s", s, need, base, a->data ? "--data given" : "synthetic shards",
			have);
		return BENCH_USAGE;
	}
	if (mem > 0 && 2 * size > mem) {
		human(need, sizeof need, 2 * size);
		human(have, sizeof have, mem);
		err_set(e, "io --size %s: the checkpoint and its read-back copy need %s of memory, "
			"more than this machine's %s", s, need, have);
		return BENCH_USAGE;
	}
	return 0;
}

int bench_io(const bench_args *a, titan_err *e)
{
	const char *base = a->dir ? a->dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	int room = check_room(a, base, e);
	if (room != 0)
		return room;
	char *work = path_join(base, "titan-bench-io.XXXXXX");
	if (work == NULL)
		return err_set(e, "out of memory");
	watch w;
	if (watch_start(&w, work, e) != 0) {
		free(work);
		return -1;
	}
	if (mkdtemp(work) == NULL) {
		err_errno(e, "%s", work);
		watch_stop(&w);
		free(work);
		return -1;
	}
	report r;
	int rc = report_init(&r, "io", a, e);
	char *made = NULL;
	const char *data = a->data;
	if (rc == 0 && data == NULL) {
		made = path_join(work, "shards");
		rc = made == NULL ? err_set(e, "out of memory") : make_shards(work, made, a->size, e);
		data = made;
	}
	if (rc == 0)
		rc = bench_loader(data, a, &r, e);
	if (rc == 0)
		rc = bench_ckpt(work, a, &r, e);
	report_note(&r, "%s in %s; raw = read(2) / write(2) + fsync in 4 MiB chunks of the same "
		    "bytes; ratio = titan's speed / the raw disk's",
		    a->data ? a->data : "synthetic shards (vocabulary 50000, 2-byte ids)", base);
	static const report_col cols[] = {
		{"what", "what", NULL}, {"cache", "cache", NULL}, {"mb", "MB", "%.1f"},
		{"seconds", "s", "%.3f"}, {"mb_s", "MB/s", "%.1f"}, {"raw_mb_s", "raw MB/s", "%.1f"},
		{"ratio", "ratio", "%.2f"}, {"mtok_s", "Mtok/s", "%.1f"},
	};
	if (rc == 0)
		rc = report_emit(&r, cols, sizeof cols / sizeof cols[0], a->json, e);
	rm_rf(work);
	watch_stop(&w);
	free(made);
	free(work);
	report_free(&r);
	return rc;
}
