/* doc_shards.h: a titan-shard folder from documents held in memory, for the
 * loader's tests. */
#ifndef TITAN_TEST_DOC_SHARDS_H
#define TITAN_TEST_DOC_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "shard/shard.h"
#include "tokstream/tokstream.h"

/* docs[0..n) (lens[d] ids each) as a token stream with header h, through
 * shard_build with options o (o->out the folder).  0, or -1 with err. */
int test_doc_shards(const tokstream_header *h, uint32_t *const *docs, const size_t *lens,
		    size_t n, const shard_build_opts *o, titan_err *err);

#endif
