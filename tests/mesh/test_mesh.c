/* Tests of lib/mesh: the layout against torchtitan 0.2.2's ParallelDims
 * (tests/mesh/golden.txt, written by scripts/mesh_golden.py), the refusals
 * and their messages, and the communicators of every dimension at the world
 * size it runs with (alone: 1; tests/comm/mpi.sh: 2, 3 and 4 ranks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "gpu/gpu.h"
#include "mesh/mesh.h"

static comm *world;

static int dim_of(const char *name)
{
	for (int k = 0; k < MESH_DIM_COUNT; k++)
		if (strcmp(mesh_dim_name((mesh_dim)k), name) == 0)
			return k;
	return -1;
}

static void layouts_match_torchtitan_parallel_dims(void **state)
{
	(void)state;
	FILE *f = fopen("tests/mesh/golden.txt", "r");
	assert_non_null(f);
	char line[8192];
	int checked = 0;
	static int got[1024];
	while (fgets(line, sizeof line, f) != NULL) {
		if (line[0] == '#')
			continue;
		long long w, dpr, dps, cp, tp, pp, ep, etp;
		int rank, off = 0;
		char dim[32];
		if (sscanf(line, "%lld %lld %lld %lld %lld %lld %lld %lld %d %31s %n", &w, &dpr, &dps, &cp,
			   &tp, &pp, &ep, &etp, &rank, dim, &off) != 10)
			fail_msg("bad golden line: %s", line);
		mesh_degrees want = {dpr, dps, cp, tp, pp, ep, etp}, d;
		titan_err e;
		if (mesh_resolve(&want, (int)w, &d, &e) != 0)
			fail_msg("%s", e.msg);
		int k = dim_of(dim), size[MESH_DIM_COUNT], coord[MESH_DIM_COUNT];
		assert_true(k >= 0);
		mesh_sizes(&d, size);
		mesh_coords(&d, rank, coord);
		mesh_group(&d, rank, (mesh_dim)k, got);
		int n = 0;
		for (char *p = line + off; *p != '\0' && *p != '\n'; n++) {
			long v = strtol(p, &p, 10);
			if (n >= size[k] || got[n] != v)
				fail_msg("world %lld rank %d %s: member %d is %d, torchtitan's %ld (%s)", w, rank,
					 dim, n, n < size[k] ? got[n] : -1, v, line);
			if (*p == ',')
				p++;
		}
		assert_int_equal(n, size[k]);
		assert_int_equal(got[coord[k]], rank);
		checked++;
	}
	fclose(f);
	print_message("%d groups checked against torchtitan\n", checked);
	assert_true(checked > 700);
}

/* dp_shard, torchtitan's inner part of fsdp and batch, has no mesh of its
 * own there: check it is the intersection of the two. */
static void dp_shard_is_the_intersection_of_fsdp_and_batch(void **state)
{
	(void)state;
	mesh_degrees want = {2, 3, 2, 2, 2, 1, 1}, d;
	titan_err e;
	assert_int_equal(mesh_resolve(&want, 48, &d, &e), 0);
	int fsdp[64], batch[64], shard[64], size[MESH_DIM_COUNT];
	mesh_sizes(&d, size);
	assert_int_equal(size[MESH_DP_SHARD], 3);
	for (int r = 0; r < 48; r++) {
		mesh_group(&d, r, MESH_FSDP, fsdp);
		mesh_group(&d, r, MESH_BATCH, batch);
		mesh_group(&d, r, MESH_DP_SHARD, shard);
		for (int i = 0; i < 3; i++) {
			int in_fsdp = 0, in_batch = 0;
			for (int j = 0; j < size[MESH_FSDP]; j++)
				in_fsdp |= fsdp[j] == shard[i];
			for (int j = 0; j < size[MESH_BATCH]; j++)
				in_batch |= batch[j] == shard[i];
			assert_true(in_fsdp && in_batch);
		}
	}
}

static void expect_resolve_error(mesh_degrees want, int world_size, const char *msg)
{
	mesh_degrees d;
	titan_err e;
	assert_int_equal(mesh_resolve(&want, world_size, &d, &e), -1);
	assert_string_equal(e.msg, msg);
}

static void bad_meshes_are_refused_naming_the_numbers(void **state)
{
	(void)state;
	expect_resolve_error((mesh_degrees){2, 3, 1, 2, 1, 1, 1}, 8,
			     "parallelism: dp_replicate 2 x dp_shard 3 x cp 1 x tp 2 x pp 1 = 12, not "
			     "the world size 8");
	expect_resolve_error((mesh_degrees){1, -1, 1, 3, 1, 1, 1}, 8,
			     "parallelism: dp_replicate 1 x cp 1 x tp 3 x pp 1 = 3 does not divide the "
			     "world size 8 (data_parallel_shard_degree = -1 takes the ranks left)");
	expect_resolve_error((mesh_degrees){1, 0, 1, 1, 1, 1, 1}, 8,
			     "parallelism.data_parallel_shard_degree = 0: must be -1 or at least 1");
	expect_resolve_error((mesh_degrees){1, -1, 1, 0, 1, 1, 1}, 8,
			     "parallelism.tensor_parallel_degree = 0: must be at least 1");
	expect_resolve_error((mesh_degrees){1, -1, 1, 1, 1000000000000LL, 1, 1}, 8,
			     "parallelism.pipeline_parallel_degree = 1000000000000: more than the world "
			     "size 8");
	expect_resolve_error((mesh_degrees){1, -1, 1, 2, 1, 2, 3}, 8,
			     "parallelism.expert_tensor_parallel_degree = 3: must be 1 or "
			     "tensor_parallel_degree (2)");
	expect_resolve_error((mesh_degrees){1, 3, 1, 1, 1, 2, 1}, 3,
			     "parallelism: expert_parallel_degree 2 x expert_tensor_parallel_degree 1 = "
			     "2 does not divide dp_shard 3 x cp 1 x tp 1 = 3, the ranks experts are "
			     "spread over");

	mesh_model m = {"Llama 3 8B", 32, 32, 8, 4096, 14336, 0, 8192, 2};
	mesh_degrees d = {1, 1, 1, 3, 1, 1, 1};
	titan_err e;
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "parallelism.tensor_parallel_degree = 3 does not divide n_heads "
				   "= 32 of Llama 3 8B");
	d.tp = 16;
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "parallelism.tensor_parallel_degree = 16 does not divide "
				   "n_kv_heads = 8 of Llama 3 8B");
	d.tp = 8;
	assert_int_equal(mesh_check_model(&d, &m, &e), 0);
	d = (mesh_degrees){1, 1, 1, 1, 64, 1, 1};
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "parallelism.pipeline_parallel_degree = 64: more stages than the "
				   "32 layers of Llama 3 8B");
	mesh_model tiny = {"debugmodel", 6, 16, 16, 256, 768, 0, 2048, 2};
	d = (mesh_degrees){1, 512, 1, 1, 1, 1, 1};
	assert_int_equal(mesh_check_model(&d, &tiny, &e), -1);
	assert_string_equal(e.msg, "parallelism: FSDP over dp_shard 512 x cp 1 = 512 ranks, more than "
				   "the 256 rows of the smallest parameter of debugmodel (a norm weight)");
	d = (mesh_degrees){1, 1, 3, 2, 1, 1, 1};
	m.seq_len = 8190;
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "training.seq_len = 8190 is not divisible by tp 2 x 2 x cp 3 = 12");
	m.cp_multiple = 1; /* no load balancer: cp chunks */
	m.seq_len = 8196;
	assert_int_equal(mesh_check_model(&d, &m, &e), 0);
	m.seq_len = 8194;
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "training.seq_len = 8194 is not divisible by tp 2 x cp 3 = 6");
	m.cp_multiple = 128; /* ptrr: blocks of 128 tokens */
	m.seq_len = 768 * 2;
	assert_int_equal(mesh_check_model(&d, &m, &e), 0);
	m.seq_len = 384;
	assert_int_equal(mesh_check_model(&d, &m, &e), -1);
	assert_string_equal(e.msg, "training.seq_len = 384 is not divisible by tp 2 x 128 x cp 3 "
				   "= 768");
	m.cp_multiple = 2;
	mesh_model moe = {"deepseek 16B", 27, 16, 16, 2048, 1408, 64, 4096, 2};
	d = (mesh_degrees){1, 3, 1, 1, 1, 3, 1};
	assert_int_equal(mesh_check_model(&d, &moe, &e), -1);
	assert_string_equal(e.msg, "parallelism.expert_parallel_degree = 3 does not divide the 64 "
				   "experts of deepseek 16B");
}

/* Every mesh that fits the world size: each dimension's communicator holds
 * the layout's ranks, in its order. */
static void communicators_hold_the_layouts_ranks(void **state)
{
	(void)state;
	static const mesh_degrees candidates[] = {
		{1, -1, 1, 1, 1, 1, 1}, {1, 1, 1, 2, 1, 1, 1}, {1, 1, 1, 1, 2, 1, 1},
		{2, 1, 1, 1, 1, 1, 1},  {1, 1, 2, 1, 1, 1, 1}, {1, 1, 1, 3, 1, 1, 1},
		{2, 2, 1, 1, 1, 1, 1},  {1, 2, 1, 2, 1, 2, 1}, {1, 1, 1, 2, 2, 1, 1},
		{1, 1, 2, 2, 1, 2, 2},  {1, -1, 1, 1, 1, 2, 1},
	};
	int n = comm_size(world), me = comm_rank(world), tried = 0;
	int32_t *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
	assert_non_null(got);
	assert_non_null(want);
	for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
		mesh_degrees d;
		titan_err e;
		if (mesh_resolve(&candidates[i], n, &d, &e) != 0)
			continue; /* another world size's mesh */
		mesh *m;
		if (mesh_create(world, &d, &m, &e) != 0)
			fail_msg("%s", e.msg);
		char desc[200];
		mesh_describe(&d, desc, sizeof desc);
		for (int k = 0; k < MESH_DIM_COUNT; k++) {
			comm *c = mesh_comm(m, (mesh_dim)k);
			int32_t r = me;
			assert_int_equal(comm_size(c), m->size[k]);
			assert_int_equal(comm_rank(c), m->coord[k]);
			if (comm_all_gather(c, &r, got, 1, COMM_I32, &e) != 0)
				fail_msg("%s", e.msg);
			int members[1024];
			mesh_group(&d, me, (mesh_dim)k, members);
			for (int j = 0; j < m->size[k]; j++)
				if (got[j] != members[j])
					fail_msg("%s: %s member %d is rank %d, the layout says %d", desc,
						 mesh_dim_name((mesh_dim)k), j, got[j], members[j]);
		}
		mesh_free(m);
		tried++;
	}
	print_message("%d meshes of %d ranks\n", tried, n);
	assert_true(tried >= 1);
	free(got);
	free(want);
}

/* A maker of device communicators for the test: a new MPI communicator over
 * the twin's ranks (so distinct from it), failing at dimension fail_at. */
typedef struct maker {
	int made, fail_at;
} maker;

static int make_split(void *ctx, comm *host, const char *name, comm **out, titan_err *e)
{
	maker *mk = ctx;
	if (mk->made == mk->fail_at)
		return err_set(e, "no device for %s", name);
	mk->made++;
	return comm_split(host, 0, comm_rank(host), name, out, e);
}

/* Each dimension's device communicator beside its host twin: the same ranks
 * in the same order; a failure part way leaves the host communicators alone
 * (naming the dimension), and so does dropping them. */
static void device_comms_have_host_twins(void **state)
{
	(void)state;
	int n = comm_size(world);
	mesh_degrees want = {1, -1, 1, 1, 1, 1, 1}, d;
	titan_err e;
	mesh *m;
	if (mesh_resolve(&want, n, &d, &e) != 0 || mesh_create(world, &d, &m, &e) != 0)
		fail_msg("%s", e.msg);
	for (int k = 0; k < MESH_DIM_COUNT; k++)
		assert_ptr_equal(mesh_comm(m, (mesh_dim)k), mesh_host_comm(m, (mesh_dim)k));
	maker mk = {0, 2};
	assert_int_equal(mesh_use_device_comms(m, make_split, &mk, &e), -1);
	assert_non_null(strstr(e.msg, "mesh dimension dp_shard: no device for dp_shard"));
	for (int k = 0; k < MESH_DIM_COUNT; k++)
		assert_ptr_equal(mesh_comm(m, (mesh_dim)k), mesh_host_comm(m, (mesh_dim)k));
	mk = (maker){0, -1};
	if (mesh_use_device_comms(m, make_split, &mk, &e) != 0)
		fail_msg("%s", e.msg);
	assert_int_equal(mk.made, MESH_DIM_COUNT);
	for (int k = 0; k < MESH_DIM_COUNT; k++) {
		comm *c = mesh_comm(m, (mesh_dim)k), *h = mesh_host_comm(m, (mesh_dim)k);
		assert_ptr_not_equal(c, h);
		assert_int_equal(comm_size(c), comm_size(h));
		assert_int_equal(comm_rank(c), comm_rank(h));
		assert_string_equal(c->name, h->name);
	}
	mesh_drop_device_comms(m);
	for (int k = 0; k < MESH_DIM_COUNT; k++)
		assert_ptr_equal(mesh_comm(m, (mesh_dim)k), mesh_host_comm(m, (mesh_dim)k));
	/* without a GPU NCCL says so, and the mesh stays on MPI */
	if (gpu_count() == 0) {
		assert_int_equal(mesh_use_nccl(m, 0, NULL, &e), -1);
		print_message("mesh_use_nccl without a GPU: %s\n", e.msg);
		for (int k = 0; k < MESH_DIM_COUNT; k++)
			assert_ptr_equal(mesh_comm(m, (mesh_dim)k), mesh_host_comm(m, (mesh_dim)k));
	}
	if (mesh_use_device_comms(m, make_split, &mk, &e) != 0) /* freed by mesh_free */
		fail_msg("%s", e.msg);
	mesh_free(m);
}

int main(int argc, char **argv)
{
	titan_err e;
	if (comm_init(&argc, &argv, 60, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layouts_match_torchtitan_parallel_dims),
		cmocka_unit_test(dp_shard_is_the_intersection_of_fsdp_and_batch),
		cmocka_unit_test(bad_meshes_are_refused_naming_the_numbers),
		cmocka_unit_test(communicators_hold_the_layouts_ranks),
		cmocka_unit_test(device_comms_have_host_twins),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
