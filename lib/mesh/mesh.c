/* mesh.c: degrees, layout and communicators of the device mesh. */
#include "mesh/mesh.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const dim_names[MESH_DIM_COUNT] = {
	"pp", "dp_replicate", "dp_shard", "cp", "tp", "batch", "fsdp", "loss", "ep", "efsdp", "etp",
};

const char *mesh_dim_name(mesh_dim dim)
{
	return (unsigned)dim < MESH_DIM_COUNT ? dim_names[dim] : "?";
}

/* Two unflattenings of the world, each five axes, the last the fastest:
 * dense (pp, dp_replicate, dp_shard, cp, tp) and sparse (pp, dp_replicate,
 * efsdp, ep, etp).  A dimension is a set of axes of one of them. */
enum { AXES = 5 };
typedef struct axes_of {
	int sparse;
	unsigned mask; /* bit i: axis i belongs to the dimension */
} axes_of;

static const axes_of dim_axes[MESH_DIM_COUNT] = {
	[MESH_PP] = {0, 1u << 0},
	[MESH_DP_REPLICATE] = {0, 1u << 1},
	[MESH_DP_SHARD] = {0, 1u << 2},
	[MESH_CP] = {0, 1u << 3},
	[MESH_TP] = {0, 1u << 4},
	[MESH_BATCH] = {0, (1u << 1) | (1u << 2)},
	[MESH_FSDP] = {0, (1u << 2) | (1u << 3)},
	[MESH_LOSS] = {0, (1u << 1) | (1u << 2) | (1u << 3)},
	[MESH_EP] = {1, 1u << 3},
	[MESH_EFSDP] = {1, 1u << 2},
	[MESH_ETP] = {1, 1u << 4},
};

static void axis_sizes(const mesh_degrees *d, int sparse, int64_t sz[AXES])
{
	sz[0] = d->pp;
	sz[1] = d->dp_replicate;
	if (!sparse) {
		sz[2] = d->dp_shard;
		sz[3] = d->cp;
		sz[4] = d->tp;
	} else {
		sz[2] = d->dp_shard * d->cp * d->tp / (d->ep * d->etp);
		sz[3] = d->ep;
		sz[4] = d->etp;
	}
}

static void decode(const int64_t sz[AXES], int64_t rank, int64_t c[AXES])
{
	for (int i = AXES - 1; i >= 0; i--) {
		c[i] = rank % sz[i];
		rank /= sz[i];
	}
}

static int64_t encode(const int64_t sz[AXES], const int64_t c[AXES])
{
	int64_t r = 0;
	for (int i = 0; i < AXES; i++)
		r = r * sz[i] + c[i];
	return r;
}

/* The mixed-radix index of c over the axes in mask (in), or over the others. */
static int64_t index_over(const int64_t sz[AXES], const int64_t c[AXES], unsigned mask, int in)
{
	int64_t r = 0;
	for (int i = 0; i < AXES; i++)
		if (((mask >> i) & 1u) == (unsigned)in)
			r = r * sz[i] + c[i];
	return r;
}

void mesh_sizes(const mesh_degrees *d, int size[MESH_DIM_COUNT])
{
	for (int k = 0; k < MESH_DIM_COUNT; k++) {
		int64_t sz[AXES], n = 1;
		axis_sizes(d, dim_axes[k].sparse, sz);
		for (int i = 0; i < AXES; i++)
			if ((dim_axes[k].mask >> i) & 1u)
				n *= sz[i];
		size[k] = (int)n;
	}
}

void mesh_coords(const mesh_degrees *d, int rank, int coord[MESH_DIM_COUNT])
{
	for (int k = 0; k < MESH_DIM_COUNT; k++) {
		int64_t sz[AXES], c[AXES];
		axis_sizes(d, dim_axes[k].sparse, sz);
		decode(sz, rank, c);
		coord[k] = (int)index_over(sz, c, dim_axes[k].mask, 1);
	}
}

void mesh_group(const mesh_degrees *d, int rank, mesh_dim dim, int *ranks)
{
	int64_t sz[AXES], c[AXES];
	unsigned mask = dim_axes[dim].mask;
	axis_sizes(d, dim_axes[dim].sparse, sz);
	decode(sz, rank, c);
	int size[MESH_DIM_COUNT];
	mesh_sizes(d, size);
	for (int64_t j = 0; j < size[dim]; j++) {
		int64_t rest = j;
		for (int i = AXES - 1; i >= 0; i--)
			if ((mask >> i) & 1u) {
				c[i] = rest % sz[i];
				rest /= sz[i];
			}
		ranks[j] = (int)encode(sz, c);
	}
}

void mesh_describe(const mesh_degrees *d, char *buf, size_t n)
{
	int k = snprintf(buf, n, "pp %lld, dp_replicate %lld, dp_shard %lld, cp %lld, tp %lld",
			 (long long)d->pp, (long long)d->dp_replicate, (long long)d->dp_shard,
			 (long long)d->cp, (long long)d->tp);
	if ((d->ep > 1 || d->etp > 1) && k > 0 && (size_t)k < n)
		snprintf(buf + k, n - (size_t)k, ", ep %lld, etp %lld", (long long)d->ep,
			 (long long)d->etp);
}

/* Each degree on its own, before products that could overflow. */
static int in_range(int64_t v, const char *key, int world_size, titan_err *e)
{
	if (v < 1)
		return err_set(e, "parallelism.%s = %lld: must be at least 1", key, (long long)v);
	if (v > world_size)
		return err_set(e, "parallelism.%s = %lld: more than the world size %d", key,
			       (long long)v, world_size);
	return 0;
}

int mesh_resolve(const mesh_degrees *want, int world_size, mesh_degrees *out, titan_err *e)
{
	mesh_degrees d = *want;
	int w = world_size;
	if (w < 1)
		return err_set(e, "world size %d: no ranks", w);
	if (d.dp_shard < 1 && d.dp_shard != -1)
		return err_set(e, "parallelism.data_parallel_shard_degree = %lld: must be -1 or at "
			       "least 1", (long long)d.dp_shard);
	if (in_range(d.dp_replicate, "data_parallel_replicate_degree", w, e) ||
	    in_range(d.cp, "context_parallel_degree", w, e) ||
	    in_range(d.tp, "tensor_parallel_degree", w, e) ||
	    in_range(d.pp, "pipeline_parallel_degree", w, e) ||
	    in_range(d.ep, "expert_parallel_degree", w, e) ||
	    in_range(d.etp, "expert_tensor_parallel_degree", w, e) ||
	    (d.dp_shard != -1 && in_range(d.dp_shard, "data_parallel_shard_degree", w, e)))
		return -1;
	int64_t others = d.dp_replicate * d.cp * d.tp * d.pp;
	if (d.dp_shard == -1) {
		if (world_size % others != 0)
			return err_set(e, "parallelism: dp_replicate %lld x cp %lld x tp %lld x pp %lld = "
				       "%lld does not divide the world size %d "
				       "(data_parallel_shard_degree = -1 takes the ranks left)",
				       (long long)d.dp_replicate, (long long)d.cp, (long long)d.tp,
				       (long long)d.pp, (long long)others, world_size);
		d.dp_shard = world_size / others;
	}
	int64_t product = others * d.dp_shard;
	if (product != world_size)
		return err_set(e, "parallelism: dp_replicate %lld x dp_shard %lld x cp %lld x tp %lld x "
			       "pp %lld = %lld, not the world size %d", (long long)d.dp_replicate,
			       (long long)d.dp_shard, (long long)d.cp, (long long)d.tp, (long long)d.pp,
			       (long long)product, world_size);
	if (d.ep > 1 || d.etp > 1) {
		int64_t borrow = d.dp_shard * d.cp * d.tp;
		if (d.etp != 1 && d.etp != d.tp)
			return err_set(e, "parallelism.expert_tensor_parallel_degree = %lld: must be 1 "
				       "or tensor_parallel_degree (%lld)", (long long)d.etp,
				       (long long)d.tp);
		if (borrow % (d.ep * d.etp) != 0)
			return err_set(e, "parallelism: expert_parallel_degree %lld x "
				       "expert_tensor_parallel_degree %lld = %lld does not divide "
				       "dp_shard %lld x cp %lld x tp %lld = %lld, the ranks experts are "
				       "spread over", (long long)d.ep, (long long)d.etp,
				       (long long)(d.ep * d.etp), (long long)d.dp_shard, (long long)d.cp,
				       (long long)d.tp, (long long)borrow);
	}
	*out = d;
	return 0;
}

static int divides(int64_t deg, const char *key, int64_t v, const char *what, const mesh_model *m,
		   titan_err *e)
{
	if (v > 0 && v % deg != 0)
		return err_set(e, "parallelism.%s = %lld does not divide %s = %lld of %s", key,
			       (long long)deg, what, (long long)v, m->name);
	return 0;
}

int mesh_check_model(const mesh_degrees *d, const mesh_model *m, titan_err *e)
{
	const char *tp = "tensor_parallel_degree";
	if (divides(d->tp, tp, m->n_heads, "n_heads", m, e) ||
	    divides(d->tp, tp, m->n_kv_heads, "n_kv_heads", m, e) ||
	    divides(d->tp, tp, m->ffn_hidden, "the FFN hidden size", m, e))
		return -1;
	if (m->n_layers > 0 && d->pp > m->n_layers)
		return err_set(e, "parallelism.pipeline_parallel_degree = %lld: more stages than the "
			       "%lld layers of %s", (long long)d->pp, (long long)m->n_layers, m->name);
	int64_t fsdp = d->dp_shard * d->cp;
	if (m->dim > 0 && fsdp > m->dim)
		return err_set(e, "parallelism: FSDP over dp_shard %lld x cp %lld = %lld ranks, more "
			       "than the %lld rows of the smallest parameter of %s (a norm weight)",
			       (long long)d->dp_shard, (long long)d->cp, (long long)fsdp,
			       (long long)m->dim, m->name);
	if (m->seq_len > 0 &&
	    mesh_check_seq_len("training.seq_len", m->seq_len, d, m->cp_multiple, e) != 0)
		return -1;
	if (m->n_experts > 0 && m->n_experts % d->ep != 0)
		return err_set(e, "parallelism.expert_parallel_degree = %lld does not divide the %lld "
			       "experts of %s", (long long)d->ep, (long long)m->n_experts, m->name);
	return 0;
}

/* torchtitan's seq_len_divisor: tp, times 2 cp for its head-tail balancer. */
int mesh_check_seq_len(const char *key, int64_t seq_len, const mesh_degrees *d,
		       int64_t cp_multiple, titan_err *e)
{
	int64_t div = d->tp * (d->cp > 1 ? cp_multiple * d->cp : 1);
	if (div <= 1 || seq_len % div == 0)
		return 0;
	char by[48] = "";
	if (d->cp > 1 && cp_multiple > 1)
		snprintf(by, sizeof by, " x %lld x cp %lld", (long long)cp_multiple, (long long)d->cp);
	else if (d->cp > 1)
		snprintf(by, sizeof by, " x cp %lld", (long long)d->cp);
	return err_set(e, "%s = %lld is not divisible by tp %lld%s = %lld", key, (long long)seq_len,
		       (long long)d->tp, by, (long long)div);
}

int mesh_create(comm *world, const mesh_degrees *d, mesh **out, titan_err *e)
{
	mesh *m = calloc(1, sizeof *m);
	if (m == NULL)
		return err_set(e, "out of memory");
	m->d = *d;
	m->world = world;
	m->world_size = comm_size(world);
	m->rank = comm_rank(world);
	mesh_sizes(d, m->size);
	mesh_coords(d, m->rank, m->coord);
	for (int k = 0; k < MESH_DIM_COUNT; k++) {
		int64_t sz[AXES], c[AXES];
		axis_sizes(d, dim_axes[k].sparse, sz);
		decode(sz, m->rank, c);
		int color = (int)index_over(sz, c, dim_axes[k].mask, 0);
		if (comm_split(world, color, m->coord[k], dim_names[k], &m->host[k], e) != 0) {
			mesh_free(m);
			return -1;
		}
		m->dims[k] = m->host[k];
	}
	*out = m;
	return 0;
}

void mesh_drop_device_comms(mesh *m)
{
	if (m == NULL)
		return;
	for (int k = MESH_DIM_COUNT - 1; k >= 0; k--) {
		if (m->dims[k] != m->host[k])
			comm_free(m->dims[k]);
		m->dims[k] = m->host[k];
	}
}

int mesh_use_device_comms(mesh *m, mesh_comm_maker make, void *ctx, titan_err *e)
{
	mesh_drop_device_comms(m);
	for (int k = 0; k < MESH_DIM_COUNT; k++) {
		comm *c;
		if (make(ctx, m->host[k], dim_names[k], &c, e) != 0) {
			mesh_drop_device_comms(m);
			return err_prefix(e, "mesh dimension %s", dim_names[k]);
		}
		m->dims[k] = c;
	}
	return 0;
}

typedef struct nccl_target {
	int device;
	void *stream;
} nccl_target;

static int make_nccl(void *ctx, comm *host, const char *name, comm **out, titan_err *e)
{
	const nccl_target *t = ctx;
	return comm_nccl_create(host, t->device, t->stream, name, out, e);
}

int mesh_use_nccl(mesh *m, int device, void *stream, titan_err *e)
{
	nccl_target t = {device, stream};
	return mesh_use_device_comms(m, make_nccl, &t, e);
}

void mesh_free(mesh *m)
{
	if (m == NULL)
		return;
	mesh_drop_device_comms(m);
	for (int k = MESH_DIM_COUNT - 1; k >= 0; k--)
		comm_free(m->host[k]);
	free(m);
}
