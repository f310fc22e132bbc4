#include "core/mfile.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mfile_open(mfile *m, const char *path, titan_err *err)
{
	memset(m, 0, sizeof *m);
	m->fd = -1;
	/* O_NONBLOCK: opening a FIFO planted where a file should be would wait
	 * for a writer forever; this way the check below refuses it.  Regular
	 * files ignore the flag. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return err_errno(err, "%s", path);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return err_errno(err, "%s: stat", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(err, "%s: not a regular file", path);
	}
	m->fd = fd;
	m->size = (size_t)st.st_size;
	if (m->size == 0)
		return 0;
	void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		m->fd = -1;
		return err_errno(err, "%s: mmap", path);
	}
	m->data = p;
	return 0;
}

void mfile_close(mfile *m)
{
	if (m->data != NULL)
		munmap((void *)m->data, m->size);
	if (m->fd >= 0)
		close(m->fd);
	memset(m, 0, sizeof *m);
	m->fd = -1;
}

void mfile_advise_sequential(mfile *m)
{
	if (m->data != NULL)
		madvise((void *)m->data, m->size, MADV_SEQUENTIAL);
}

void mfile_advise_random(mfile *m)
{
	if (m->data != NULL)
		madvise((void *)m->data, m->size, MADV_RANDOM);
}

void mfile_release(const void *p, size_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t b = ((uintptr_t)p + n) & ~(page - 1);
	if (b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}
