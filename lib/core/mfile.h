/* mfile.h: read-only memory-mapped files. */
#ifndef TITAN_MFILE_H
#define TITAN_MFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct mfile {
	const uint8_t *data; /* NULL for an empty file */
	size_t size;
	int fd;
} mfile;

/* Map the whole file read-only.  An empty file maps to data NULL, size 0. */
int mfile_open(mfile *m, const char *path, titan_err *err);
void mfile_close(mfile *m);
/* Tell the kernel the mapping will be read front to back (or at random). */
void mfile_advise_sequential(mfile *m);
void mfile_advise_random(mfile *m);
/* Drop the resident pages wholly inside [p, p + n) of a read-only file
 * mapping (MADV_DONTNEED): touched again, they are read from the file. */
void mfile_release(const void *p, size_t n);

#endif
