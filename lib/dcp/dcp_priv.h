/* dcp_priv.h: shared between the files of lib/dcp. */
#ifndef TITAN_DCP_PRIV_H
#define TITAN_DCP_PRIV_H

#include <stdint.h>
#include <sys/types.h>

#include "core/mfile.h"
#include "core/strmap.h"
#include "dcp/dcp.h"

struct dcp_files {
	size_t n, cap;
	struct dcp_file {
		char *name;
		mfile m;
	} *f;
};

/* Parse a .metadata pickle into c (entries, version). */
int dcp_meta_parse(dcp_ckpt *c, const uint8_t *buf, size_t n, titan_err *err);
/* Serialise entries as a Metadata pickle (*out malloc'd). */
int dcp_meta_write(const dcp_entry *e, size_t n, uint8_t **out, size_t *len, titan_err *err);
void dcp_entry_free(dcp_entry *e);
/* The default planner_data nesting of a flattened key (see dcp_item.path). */
int dcp_default_path(const char *fqn, char ***path, int *npath);
/* The mapped bytes [off, off+len) of a data file of c. */
int dcp_file_slice(dcp_ckpt *c, const char *file, uint64_t off, uint64_t len,
		   const uint8_t **p, titan_err *err);
int64_t dcp_numel(int ndim, const int64_t *sizes);
enum { READ_OK = 0, READ_IO = 1, READ_CRC = 2, READ_SHORT = 3 };
/* len bytes at src of fd into dst, and their CRC-32; READ_IO (errno set) or
 * READ_SHORT (the file ends first) on failure. */
int dcp_pread_crc(int fd, uint8_t *dst, size_t len, off_t src, uint32_t *crc);
/* Append part p to parts, read from the storage record `record` of the chunk
 * at chunk_off of p->file, of tensor fqn (all copied). */
int dcp_parts_add(dcp_parts *parts, const dcp_part *p, uint64_t chunk_off, const char *fqn,
		  const char *record, titan_err *err);
/* rm -r; 0 when path is gone (or never was). */
int dcp_rm_rf(const char *path);
/* Make the staging folder stage (DIR.partial) a real folder of ours: a file
 * or symbolic link planted at its name is removed, not followed. */
int dcp_stage_dir(const char *stage, titan_err *err);
/* Move the staging folder stage to dir (an existing dir is moved aside first
 * and removed after) and fsync the parent. */
int dcp_swap_in(const char *stage, const char *dir, titan_err *err);

#endif
