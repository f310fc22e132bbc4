/* cuda.h: the CUDA backend, backend.h's ops on one GPU (lib/backend/cuda.c over
 * lib/gpu and kernels/).
 *
 * What differs from the CPU backend, and why:
 * - Memory comes from one arena taken at creation (arena_bytes, planned by the
 *   caller from the model, batch, AC mode and plan): no cudaMalloc after that,
 *   so a step can be captured in a CUDA graph.  be->bytes_in_use and
 *   be->peak_bytes count the arena's pieces (256-byte granules) including the
 *   ops' own scratch: the real peak of the device memory titan holds.
 * - Everything runs in order on one stream; copies to the host and sumsq wait
 *   for it.  cross_entropy adds its loss to *loss_sum and *n_valid at the next
 *   sync (the sums stay on the device until then, so a captured step may hold
 *   the loss): read them after backend sync.
 * - Element types: float32 and bfloat16 in every op; float8 faults (the Float8
 *   converter's products come with the fp8 issue).  Attention wants one type
 *   for q, k, v, out, dout and the gradients, and head dims hd == hdv (8 to
 *   128) or MLA's hd 192 with hdv 128.
 * - Attention runs on cuDNN's fused flash attention where it applies (bf16,
 *   causal self-attention at equal positions, head dim 64 or 128, t a multiple
 *   of 128, no window, chunk or sinks, hdv == hd) unless opts.attention is
 *   BACKEND_CUDA_ATTN_REFERENCE, else on titan's own kernels (which take the
 *   sliding window, chunks, sinks and their gradient, and MLA's head dims).  cuDNN's backward adds dq with atomics, so it is not
 *   bit-for-bit repeatable; with the reference kernels every op is (the CPU
 *   backend's promise).
 * - CUDA graphs: backend_cuda_capture_begin/end around a step's ops records
 *   them; backend_cuda_replay runs the recording again.  Capture after one
 *   eager step (which sizes the ops' scratch and builds cuBLASLt's and cuDNN's
 *   plans), and put nothing in it that waits for the device (copies to the
 *   host, sumsq, sync). */
#ifndef TITAN_BACKEND_CUDA_H
#define TITAN_BACKEND_CUDA_H

#include <stddef.h>

#include "backend/backend.h"

enum backend_cuda_attention {
	BACKEND_CUDA_ATTN_AUTO,      /* cuDNN where it applies, titan's kernels elsewhere */
	BACKEND_CUDA_ATTN_REFERENCE, /* titan's kernels always: deterministic */
};

typedef struct backend_cuda_opts {
	int device;         /* CUDA device index */
	size_t arena_bytes; /* 0: the free memory less BACKEND_CUDA_RESERVE_BYTES */
	int attention;      /* enum backend_cuda_attention */
} backend_cuda_opts;

/* Left to the CUDA libraries' own allocations (handles, kernels, cuDNN's
 * plans) when the arena takes "all" the memory. */
#define BACKEND_CUDA_RESERVE_BYTES ((size_t)2 << 30)

/* NULL with the reason when there is no such device or the arena cannot be had. */
backend *backend_cuda_create(const backend_cuda_opts *o, titan_err *e);

/* Whether be is a CUDA backend; what its attention ran on last ("cuDNN 9.x",
 * "titan kernels: <why cuDNN was not used>"). */
int backend_is_cuda(const backend *be);
const char *backend_cuda_attention_path(const backend *be);

/* The arena: its size, and the furthest end of a piece since creation or the
 * last backend_reset_peak (fragmentation included). */
size_t backend_cuda_arena_bytes(const backend *be);
size_t backend_cuda_high_water(const backend *be);

/* CUDA graphs of a step (see above). */
typedef struct backend_cuda_graph backend_cuda_graph;
int backend_cuda_capture_begin(backend *be, titan_err *e);
backend_cuda_graph *backend_cuda_capture_end(backend *be, titan_err *e);
int backend_cuda_replay(backend *be, backend_cuda_graph *g, titan_err *e);
void backend_cuda_graph_free(backend_cuda_graph *g);

/* The stream the ops run on (a cudaStream_t), for NCCL and timing. */
void *backend_cuda_stream(const backend *be);

/* Changes whenever the ops' scratch moves in the arena (it grows for a larger
 * call, as a validation batch of another shape may make it): a graph captured
 * before then points at freed memory and must be captured again. */
unsigned backend_cuda_scratch_epoch(const backend *be);

#endif
