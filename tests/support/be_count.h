/* be_count.h: a backend's copies and syncs counted, for tests that hold a
 * path to the waits it may cause (on a GPU a copy to the host and a sync each
 * stall the stream).  be_count_wrap swaps the backend's ops for a table whose
 * copy and sync count into c, then call the backend's own; one backend at a
 * time (the table and c are the support file's). */
#ifndef TITAN_TEST_BE_COUNT_H
#define TITAN_TEST_BE_COUNT_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct be_count {
	uint64_t copies[3]; /* ops->copy calls by enum backend_copy_kind */
	uint64_t syncs;     /* ops->sync calls */
} be_count;

void be_count_wrap(backend *be, be_count *c);
/* The backend's own ops again. */
void be_count_unwrap(backend *be);

#endif
