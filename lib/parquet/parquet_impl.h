/* parquet_impl.h: lib/parquet's private parts. */
#ifndef TITAN_PARQUET_IMPL_H
#define TITAN_PARQUET_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* A raw Snappy block (Parquet's SNAPPY pages: no framing) into out[0..n),
 * which it must fill exactly: 0, or -1 for anything malformed. */
int pq_snappy_decompress(const uint8_t *in, size_t in_n, uint8_t *out, size_t n);

#endif
