/* mesh.h: the device mesh, torchtitan's ParallelDims (v0.2.2,
 * torchtitan/distributed/parallel_dims.py).
 *
 * The world's ranks are laid out row-major over (pp, dp_replicate, dp_shard,
 * cp, tp), tp fastest, so that tp groups are neighbours (one node's GPUs).
 * Besides these five, torchtitan's flattened and MoE dimensions:
 *   batch   dp_replicate x dp_shard       which data a rank reads ("dp")
 *   fsdp    dp_shard x cp                 FSDP's shards (CP ranks shard too)
 *   loss    dp_replicate x dp_shard x cp  the loss and the token count
 *   ep, efsdp, etp                        the world unflattened as
 *           (pp, dp_replicate, efsdp, ep, etp), efsdp = dp_shard cp tp / (ep etp):
 *           experts over ep (borrowed from dp_shard x cp x tp), their FSDP over
 *           efsdp, their tensor parallelism over etp (1 or tp).
 * Every dimension, of any size, is a communicator of lib/comm; a world of one
 * process is a mesh whose dimensions all have size 1.
 *
 * Each dimension has two communicators over the same ranks: the one for the
 * backend's memory (mesh_comm: the plans' gathers and reductions of tensors)
 * and its host twin (mesh_host_comm: scalars the host holds, such as token
 * counts, loss sums and the grad norm's sum of squares).  On the CPU both
 * are the same MPI communicator; with the CUDA backend (mesh_use_nccl) the
 * first is NCCL on the device and the twin stays MPI, so a plan is one code
 * path over either.
 *
 * The layout functions (mesh_resolve, mesh_coords, mesh_group) need no
 * communication, so a planner can lay out 512 ranks from one process. */
#ifndef TITAN_MESH_H
#define TITAN_MESH_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/err.h"

typedef enum mesh_dim {
	MESH_PP,
	MESH_DP_REPLICATE,
	MESH_DP_SHARD,
	MESH_CP,
	MESH_TP,
	MESH_BATCH,
	MESH_FSDP,
	MESH_LOSS,
	MESH_EP,
	MESH_EFSDP,
	MESH_ETP,
	MESH_DIM_COUNT
} mesh_dim;

/* The configured degrees (parallelism.*); dp_shard may be -1: the ranks left. */
typedef struct mesh_degrees {
	int64_t dp_replicate, dp_shard, cp, tp, pp, ep, etp;
} mesh_degrees;

/* What of the model a mesh must divide (0: not checked). */
typedef struct mesh_model {
	const char *name;      /* for messages: "Llama 3 8B" */
	int64_t n_layers, n_heads, n_kv_heads;
	int64_t dim;           /* rows of the smallest parameter FSDP shards (a norm) */
	int64_t ffn_hidden;    /* w1/w3 rows, split by tp */
	int64_t n_experts;     /* 0: a dense model */
	int64_t seq_len;
	int64_t cp_multiple;   /* under cp > 1, seq_len per cp rank is a multiple of
	                          this: the balancer's cut (cp_balance_multiple) */
} mesh_model;

typedef struct mesh {
	mesh_degrees d;             /* resolved: dp_shard >= 1 */
	int world_size, rank;
	int size[MESH_DIM_COUNT];
	int coord[MESH_DIM_COUNT];  /* this rank's index in each dimension */
	comm *dims[MESH_DIM_COUNT]; /* owned: the backend's memory (host[k] without a device) */
	comm *host[MESH_DIM_COUNT]; /* owned: MPI on host buffers */
	comm *world;                /* not owned */
} mesh;

/* Check the degrees against the world size as torchtitan does and resolve
 * dp_shard = -1.  Messages name the keys and the numbers: "parallelism: ...
 * dp_replicate 2 x dp_shard 3 x cp 1 x tp 2 x pp 1 = 12, not the world size 8". */
int mesh_resolve(const mesh_degrees *want, int world_size, mesh_degrees *out, titan_err *e);
/* Refuse degrees that do not divide the model: tp not dividing n_heads,
 * n_kv_heads or the FFN rows, more pipeline stages than layers, more FSDP
 * ranks than rows, seq_len not divisible by tp x 2cp (tp x cp without the
 * headtail balancer), experts not divisible
 * by ep.  d is resolved. */
int mesh_check_model(const mesh_degrees *d, const mesh_model *m, titan_err *e);
/* seq_len (the config key key) divisible by tp x cp_multiple x cp: sequence
 * parallelism cuts a sequence over tp, the cp balancer into cp_multiple
 * parts (chunks or tokens) a cp rank; refused naming the numbers. */
int mesh_check_seq_len(const char *key, int64_t seq_len, const mesh_degrees *d,
		       int64_t cp_multiple, titan_err *e);

/* The size of each dimension of a resolved mesh, and rank's index in each. */
void mesh_sizes(const mesh_degrees *d, int size[MESH_DIM_COUNT]);
void mesh_coords(const mesh_degrees *d, int rank, int coord[MESH_DIM_COUNT]);
/* The world ranks of rank's group in dimension dim, in the group's order
 * (ranks[i] has index i); ranks holds size[dim] entries. */
void mesh_group(const mesh_degrees *d, int rank, mesh_dim dim, int *ranks);

const char *mesh_dim_name(mesh_dim dim);
/* "pp 1, dp_replicate 1, dp_shard 4, cp 1, tp 2" (ep and etp when > 1). */
void mesh_describe(const mesh_degrees *d, char *buf, size_t n);

/* Split world into every dimension's communicator (collective over world:
 * every rank calls it with the same degrees, which mesh_resolve accepted). */
int mesh_create(comm *world, const mesh_degrees *d, mesh **out, titan_err *e);
void mesh_free(mesh *m);

/* Make each dimension's device communicator with make(ctx, host twin, name,
 * &out, e), in dimension order (collective over world: every rank calls it).
 * On failure the mesh keeps its host communicators alone. */
typedef int (*mesh_comm_maker)(void *ctx, comm *host, const char *name, comm **out,
			       titan_err *e);
int mesh_use_device_comms(mesh *m, mesh_comm_maker make, void *ctx, titan_err *e);
/* The CUDA backend's: one NCCL communicator per dimension on device `device`,
 * ordered after `stream` (the backend's cudaStream_t), NCCL's unique id
 * broadcast over the dimension's MPI twin. */
int mesh_use_nccl(mesh *m, int device, void *stream, titan_err *e);
/* Free the device communicators (before the backend whose stream they wait
 * on goes): the mesh is back to host communicators alone. */
void mesh_drop_device_comms(mesh *m);

static inline comm *mesh_comm(const mesh *m, mesh_dim dim) { return m->dims[dim]; }
static inline comm *mesh_host_comm(const mesh *m, mesh_dim dim) { return m->host[dim]; }

#endif
