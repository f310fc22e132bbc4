/* precision.h: which of torchtitan's precision modes a job trains in, by
 * torchtitan 0.2.2's rules, and the element types that puts on the model.
 *
 *   training.dtype = "bfloat16"   parameters, gradients and optimizer states in
 *                                 bf16, no float32 copy (the model's own storage
 *                                 and AdamW's states become bf16; AdamW computes
 *                                 in float32 and rounds, as torch's fused one)
 *   FSDP (data_parallel_shard_degree > 1, or context parallelism, or titan's
 *   training.mixed_precision_mode = "fully_shard")
 *                                 fully_shard's MixedPrecisionPolicy: parameters
 *                                 gathered in mixed_precision_param, every
 *                                 activation and the residual stream in it,
 *                                 gradients reduced in mixed_precision_reduce
 *   else tensor or pipeline parallelism
 *                                 none (torchtitan: "only supported when
 *                                 FSDP/HSDP/CP is enabled")
 *   else (one device, or data replication alone)
 *                                 torch.autocast(mixed_precision_param): float32
 *                                 master weights, gradients and optimizer; the
 *                                 linears read bf16 copies of their weights,
 *                                 activations bf16, the residual stream float32
 *                                 (maybe_enable_amp)
 * A mode whose type is float32 computes in float32 throughout. */
#ifndef TITAN_PRECISION_H
#define TITAN_PRECISION_H

#include "backend/backend.h"
#include "config/config.h"
#include "core/err.h"
#include "model/model.h"

typedef enum prec_mode {
	PREC_NONE,     /* float32 throughout */
	PREC_AUTOCAST, /* torch.autocast */
	PREC_FSDP,     /* fully_shard's MixedPrecisionPolicy */
	PREC_BF16,     /* training.dtype = "bfloat16" */
} prec_mode;

/* The parallel degrees as the job resolved them (1: not used). */
typedef struct prec_degrees {
	int dp_replicate, dp_shard, tp, pp, cp;
} prec_degrees;

typedef struct train_prec {
	prec_mode mode;
	model_prec model;  /* the units' element types */
	be_dtype autocast; /* the linears' weight copies (BE_F32: none) */
	be_dtype reduce;   /* gradients as reduced across ranks */
	be_dtype master;   /* the kept parameters, their gradients and AdamW's states
	                      (the plan's shards): bf16 under training.dtype */
	const char *line;  /* torchtitan's log line for the mode */
	char detail[200];  /* titan's: the element types in force */
} train_prec;

/* Decide the mode from the config and the degrees.  -1 with e set for a
 * dtype name outside float32/bfloat16. */
int train_prec_choose(const job_config *c, const prec_degrees *d, train_prec *p, titan_err *e);

/* Put the mode on a model (a model with storage of its own converts it to the
 * mode's parameter and gradient types: bf16 under training.dtype; FSDP's
 * policy needs a model whose storage the plan binds, model_create_unbound,
 * since its masters stay float32 in the shards). */
int train_prec_apply(model *m, const train_prec *p, titan_err *e);

#endif
