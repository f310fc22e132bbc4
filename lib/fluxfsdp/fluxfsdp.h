/* fluxfsdp.h: FSDP2's memory for the Flux transformer, as torchtitan 0.3.0's
 * apply_fsdp shards it (models/flux/parallelize.py): each rank holds the
 * SHARD of every parameter, dim 0 cut into ceil(rows / N) rows per rank over
 * the fsdp group (dp_shard x cp), the last ranks' rows padded with zeros,
 * as float32 master weights and gradients (AdamW's states are the
 * caller's, over the same flat shard); a unit's whole weights exist only
 * while the step runs it.
 *
 * The model is an unbound flux_model (flux_model_create_unbound) whose
 * unit hooks this module sets (flux.h: the embedders, each double and single
 * block, the final layer):
 *   gather   each of the unit's tensors: its shard cast to the step's compute
 *            type (FSDP's param_dtype) and all-gathered over the fsdp group
 *            straight into the whole tensor (the ranks' chunks in rank order
 *            are its rows; a tensor whose rows do not divide goes through its
 *            padded chunks); for a backward also zeroed float32 gradients;
 *   reduce   each tensor's float32 gradient reduce-scattered (summed: 0.3.0
 *            turns FSDP's division off) into its shard, then the unit's shard
 *            all-reduced over dp_replicate (HSDP);
 *   release  the unit's whole weights and gradients given back.
 * The whole weights and gradients live in buffers kept from unit to unit
 * (the largest unit's size: FSDP's caching of its all-gather buffers), not
 * allocated per unit, whose fresh pages a rank would fault in on every
 * step.
 *
 * Every rank of the fsdp group must run the same steps and predictions (the
 * hooks are collectives).  With an fsdp group of one rank the shard is the
 * whole model (gathers are copies). */
#ifndef TITAN_FLUXFSDP_H
#define TITAN_FLUXFSDP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/err.h"
#include "flux/flux.h"

typedef struct fluxfsdp fluxfsdp;

/* The shards of unbound model m over the fsdp group shard (its size is N,
 * its rank this rank's chunk), the reduced gradients all-reduced over
 * replicate when not NULL; host is the same ranks for host scalars (the
 * norm's sum: MPI's where shard is NCCL's on a GPU; shard itself on the
 * CPU).  The weights are zero until fluxfsdp_init or a checkpoint fills
 * them.  Sets m's unit hooks; m and the communicators must outlive the
 * handle.  NULL and err on no memory. */
fluxfsdp *fluxfsdp_create(flux_model *m, comm *shard, comm *replicate, comm *host,
			  titan_err *err);
/* Frees the shards and whatever unit is still gathered (after a failed
 * step), and takes m's hooks away. */
void fluxfsdp_free(fluxfsdp *f);

/* The flat shard's floats (every parameter's padded chunk), and its master
 * weights and gradients there (backend memory): what AdamW and gradient
 * clipping run over. */
int64_t fluxfsdp_numel(const fluxfsdp *f);
float *fluxfsdp_weights(fluxfsdp *f);
float *fluxfsdp_grads(fluxfsdp *f);

/* Parameter i's rows on this rank: the first, how many (0 when its rows end
 * before this rank's chunk) and where they start in the flat shard (row
 * after row, the parameter's columns each). */
typedef struct fluxfsdp_rows {
	int64_t row0, rows, cols, off;
} fluxfsdp_rows;
fluxfsdp_rows fluxfsdp_param_rows(const fluxfsdp *f, int i);

/* flux_model_init's values, each rank keeping its rows.  0, or -1 and err. */
int fluxfsdp_init(fluxfsdp *f, uint64_t seed, titan_err *err);

/* torch's clip_grad_norm_ over the sharded gradients: the ranks' sums of
 * squares added over the fsdp group, the shards scaled when the norm is over
 * max_norm (<= 0: never).  *norm the global norm before clipping.  0, or
 * -1 and err (a failed all-reduce). */
int fluxfsdp_clip(fluxfsdp *f, double max_norm, double *norm, titan_err *err);

/* Bytes held by the shards and the kept buffers (and a unit's own while
 * another holds them), and the most held at once since the handle was made:
 * what the trainer's memory comes to beside AdamW and the activations.  The
 * kept buffers alone: the largest unit's whole weights and gradients and a
 * tensor's chunks. */
size_t fluxfsdp_bytes(const fluxfsdp *f);
size_t fluxfsdp_peak_bytes(const fluxfsdp *f);
size_t fluxfsdp_scratch_bytes(const fluxfsdp *f);

#endif
