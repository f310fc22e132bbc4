/* afile.h: atomic file writing.
 *
 * Bytes go to a temporary file beside the target ("NAME.tmp.PID.XXXXXX");
 * afile_commit() flushes, fsyncs, renames it over NAME and fsyncs the folder, so
 * a reader sees either the old file or the whole new one, never a torn one.
 * afile_abort() (or a crash) leaves NAME untouched. */
#ifndef TITAN_AFILE_H
#define TITAN_AFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

typedef struct afile {
	FILE *fp;    /* buffered stream on the temporary file; write through afile_write */
	char *path;  /* final name (owned) */
	char *tmp;   /* temporary name (owned) */
	uint64_t written;
} afile;

int afile_open(afile *af, const char *path, titan_err *err);
int afile_write(afile *af, const void *buf, size_t n, titan_err *err);
int afile_printf(afile *af, titan_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Flush, fsync, rename into place, fsync the folder; frees af. */
int afile_commit(afile *af, titan_err *err);
/* Close and remove the temporary file; frees af.  Safe after a failed call. */
void afile_abort(afile *af);

/* Whether process pid (not this one) has ended, so that what it left named
 * after its pid is stale (kill(pid, 0) tells without signalling). */
int pid_gone(long pid);

/* Remove the temporary files "PATH.tmp.PID.XXXXXX" that writers of path
 * killed before their commit left behind (those whose process is gone). */
void afile_clean_stale(const char *path);

/* One process per folder: make dir (mkdir -p) and take an exclusive lock on
 * the folder itself, held while the returned descriptor stays open (no lock
 * file to leave behind: the kernel drops the lock when the process dies).
 * Returns the descriptor, or -1 with "DIR: another HOLDER this folder" when
 * another process holds it (holder: "titan-train is running in"). */
int dir_lock(const char *dir, const char *holder, titan_err *err);

/* Write a whole buffer to path atomically. */
int atomic_write_file(const char *path, const void *buf, size_t n, titan_err *err);

/* fsync the folder that holds path (or the folder itself when it is one). */
int fsync_parent_dir(const char *path, titan_err *err);

/* "dir/name" in a new malloc'd string (the caller frees it), or NULL when out
 * of memory. */
char *path_join(const char *dir, const char *name);

/* mkdir -p; existing folders are fine. */
int mkdir_p(const char *dir, titan_err *err);

#endif
