#include "core/afile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int afile_open(afile *af, const char *path, titan_err *err)
{
	memset(af, 0, sizeof *af);
	af->path = strdup(path);
	size_t n = strlen(path) + 32;
	af->tmp = malloc(n);
	if (af->path == NULL || af->tmp == NULL) {
		afile_abort(af);
		return err_set(err, "%s: out of memory", path);
	}
	snprintf(af->tmp, n, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
	int fd = mkstemp(af->tmp);
	if (fd < 0) {
		err_errno(err, "%s: cannot create temporary file", af->tmp);
		free(af->tmp);
		af->tmp = NULL;
		afile_abort(af);
		return -1;
	}
	if (fchmod(fd, 0644) != 0) {
		close(fd);
		afile_abort(af);
		return err_errno(err, "%s: chmod", path);
	}
	af->fp = fdopen(fd, "wb");
	if (af->fp == NULL) {
		close(fd);
		afile_abort(af);
		return err_errno(err, "%s: fdopen", path);
	}
	return 0;
}

int afile_write(afile *af, const void *buf, size_t n, titan_err *err)
{
	if (n > 0 && fwrite(buf, 1, n, af->fp) != n)
		return err_errno(err, "%s: write", af->path);
	af->written += n;
	return 0;
}

int afile_printf(afile *af, titan_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vfprintf(af->fp, fmt, ap);
	va_end(ap);
	if (n < 0)
		return err_errno(err, "%s: write", af->path);
	af->written += (uint64_t)n;
	return 0;
}

static void afile_free(afile *af)
{
	free(af->path);
	free(af->tmp);
	af->path = af->tmp = NULL;
	af->fp = NULL;
}

int afile_commit(afile *af, titan_err *err)
{
	if (fflush(af->fp) != 0 || ferror(af->fp)) {
		err_errno(err, "%s: write", af->path);
		afile_abort(af);
		return -1;
	}
	if (fsync(fileno(af->fp)) != 0) {
		err_errno(err, "%s: fsync", af->path);
		afile_abort(af);
		return -1;
	}
	FILE *fp = af->fp;
	af->fp = NULL;
	if (fclose(fp) != 0) {
		err_errno(err, "%s: close", af->path);
		afile_abort(af);
		return -1;
	}
	if (rename(af->tmp, af->path) != 0) {
		err_errno(err, "%s: rename", af->path);
		afile_abort(af);
		return -1;
	}
	int rc = fsync_parent_dir(af->path, err);
	afile_free(af);
	return rc;
}

void afile_abort(afile *af)
{
	if (af->fp != NULL)
		fclose(af->fp);
	if (af->tmp != NULL)
		unlink(af->tmp);
	afile_free(af);
}

int atomic_write_file(const char *path, const void *buf, size_t n, titan_err *err)
{
	afile af;
	if (afile_open(&af, path, err) != 0)
		return -1;
	if (afile_write(&af, buf, n, err) != 0) {
		afile_abort(&af);
		return -1;
	}
	return afile_commit(&af, err);
}

int fsync_parent_dir(const char *path, titan_err *err)
{
	struct stat st;
	char *copy = strdup(path);
	if (copy == NULL)
		return err_set(err, "%s: out of memory", path);
	const char *dir = (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) ? copy : dirname(copy);
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		err_errno(err, "%s: open folder", dir);
		free(copy);
		return -1;
	}
	/* Some filesystems refuse fsync on a folder; the rename is still durable there. */
	if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
		err_errno(err, "%s: fsync folder", dir);
		close(fd);
		free(copy);
		return -1;
	}
	close(fd);
	free(copy);
	return 0;
}

int mkdir_p(const char *dir, titan_err *err)
{
	if (dir[0] == '\0')
		return err_set(err, "mkdir: empty folder name");
	char *p = strdup(dir);
	if (p == NULL)
		return err_set(err, "%s: out of memory", dir);
	for (char *s = p + 1;; s++) {
		char c = *s;
		if (c != '/' && c != '\0')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST) {
			err_errno(err, "%s: mkdir", p);
			free(p);
			return -1;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	int ok = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
	free(p);
	if (!ok)
		return err_set(err, "%s: not a folder", dir);
	return 0;
}

char *path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *s = malloc(n);
	if (s != NULL)
		snprintf(s, n, "%s/%s", dir, name);
	return s;
}

int pid_gone(long pid)
{
	return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

void afile_clean_stale(const char *path)
{
	char *a = strdup(path), *b = strdup(path);
	const char *dir = a ? dirname(a) : NULL, *base = b ? basename(b) : NULL;
	DIR *d = dir ? opendir(dir) : NULL;
	size_t bl = base ? strlen(base) : 0;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		const char *n = de->d_name;
		if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0)
			continue;
		char *end;
		long pid = strtol(n + bl + 5, &end, 10);
		if (end == n + bl + 5 || *end != '.' || strlen(end) != 7 || !pid_gone(pid))
			continue;
		char *p = path_join(dir, n);
		if (p)
			unlink(p);
		free(p);
	}
	if (d)
		closedir(d);
	free(a);
	free(b);
}

int dir_lock(const char *dir, const char *holder, titan_err *err)
{
	if (mkdir_p(dir, err) != 0)
		return -1;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return err_errno(err, "%s", dir);
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		close(fd);
		if (e == EWOULDBLOCK)
			return err_set(err, "%s: another %s this folder", dir, holder);
		errno = e;
		return err_errno(err, "%s: lock", dir);
	}
	return fd;
}
