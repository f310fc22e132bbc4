/* fake_cuda.h: a host-only stand-in for the parts of the CUDA runtime that
 * lib/gpu/gpu.c and lib/comm/nccl.c call, for tests that check how they order
 * work between streams on a machine without a GPU (tests/gpu/host_order.sh,
 * tests/comm/nccl_host.sh).  Not linked into the library or the cmocka tests.
 *
 * Device memory is host memory filled with FAKE_POISON.  Streams are modelled
 * as CUDA documents them: the legacy default stream (0) does not wait for,
 * and is not waited for by, streams made with cudaStreamNonBlocking; work on
 * either is "pending" until a synchronisation that covers it.  cudaMemset and
 * a pageable host-to-device cudaMemcpy leave work pending on the legacy
 * stream (the copy may return before its DMA lands); a device-to-host
 * cudaMemcpy reads at once, so it must not start while a non-blocking stream
 * has pending work.  Each breach is counted with a message. */
#ifndef TITAN_FAKE_CUDA_H
#define TITAN_FAKE_CUDA_H

#include <stddef.h>

#define FAKE_POISON 0xff

/* Work queued on the legacy stream (0) or on non-blocking streams and not yet
 * known to be complete. */
int fake_legacy_pending(void);
int fake_stream_pending(void);
/* Breaches of the ordering rules above, and the last one's message. */
int fake_breaches(void);
const char *fake_last_breach(void);
/* Called by a fake library (NCCL) when it reads device memory on a stream:
 * counts a breach when any of bytes at p is still FAKE_POISON's pattern in
 * every byte of a 4-byte word (memory nobody wrote). */
void fake_check_written(const void *p, size_t bytes, const char *who);
void fake_breach(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
