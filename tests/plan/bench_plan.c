/* bench_plan: the step of a ~100M Llama under a plan, on the CPU backend
 * (scripts/bench/plan.sh runs it under mpirun and puts the figures side by
 * side).  usage: bench_plan THREADS STEPS GLOBAL_ROWS SEQ [tp [cp [alltoall]]]
 * Every rank trains STEPS steps (after one warm-up step) of GLOBAL_ROWS
 * sequences of SEQ tokens split over the data-parallel ranks (FSDP over the
 * ranks that tp and cp leave, and over cp), each cp rank on its SEQ / cp
 * tokens (headtail; ring attention by allgather, or alltoall); rank 0 prints
 * one line:
 *   ranks threads tp step_s comm_s tokens_per_s params_per_rank
 * step_s is the median step, comm_s the median time a rank was blocked in
 * communication (the largest over ranks), the rest being compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "mesh/mesh.h"
#include "plan/plan.h"

/* dim 768, 12 layers, 12 heads (4 kv heads), FFN 2048, vocabulary 16384:
 * 100.7M parameters with the untied output. */
static const llama_args m100 = {
	.name = "100M", .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 4,
	.vocab_size = 16384, .multiple_of = 256, .norm_eps = 1e-5, .rope_theta = 500000,
	.max_seq_len = 4096,
};

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	titan_err e = {{0}};
	comm *world;
	if (argc < 5 || comm_init(&argc, &argv, 600, &world, &e) != 0) {
		fprintf(stderr, "usage: bench_plan THREADS STEPS GLOBAL_ROWS SEQ [tp [cp [alltoall]]] "
			"%s\n", e.msg);
		return 2;
	}
	int threads = atoi(argv[1]), steps = atoi(argv[2]), rows = atoi(argv[3]);
	int seq = atoi(argv[4]), tp = argc > 5 ? atoi(argv[5]) : 1, n = comm_size(world);
	int cp = argc > 6 ? atoi(argv[6]) : 1;
	cp_rotate how = argc > 7 && strcmp(argv[7], "alltoall") == 0 ? CP_ROTATE_ALLTOALL
								    : CP_ROTATE_ALLGATHER;
	mesh_degrees want = {1, n / (tp * cp), cp, tp, 1, 1, 1}, d;
	mesh *m = NULL;
	backend *be = NULL;
	plan *p = NULL;
	int rc = 1;
	if (mesh_resolve(&want, n, &d, &e) || mesh_create(world, &d, &m, &e) ||
	    !(be = backend_cpu_create(threads, &e)))
		goto out;
	int dp = m->size[MESH_BATCH], b = rows / dp;
	plan_opts o = {.be = be, .mesh = m, .args = &m100, .b = b, .t = seq / cp, .reduce = BE_F32,
		       .loss_parallel = 1, .cp_balance = CP_BALANCE_HEADTAIL, .cp_rotate = how};
	adamw_config_default(&o.adamw);
	if (!(p = plan_create(&o, &e)) || plan_init_weights(p, 1, 1, &e))
		goto out;
	size_t tok = (size_t)b * (size_t)(seq / cp);
	int32_t *ids = malloc(tok * sizeof *ids), *labels = malloc(tok * sizeof *labels);
	double *st = calloc((size_t)steps, sizeof *st), *ct = calloc((size_t)steps, sizeof *ct);
	uint64_t s = 12345 + (uint64_t)m->coord[MESH_BATCH];
	for (size_t i = 0; i < tok; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((s >> 33) % 16384);
		labels[i] = (int32_t)((s >> 13) % 16384);
	}
	for (int k = -1; k < steps; k++) {
		plan_batch pb = {.inputs = ids, .labels = labels, .n_mb = 1};
		plan_result r;
		if (plan_step(p, &pb, 1e-4, 1.0, &r, &e))
			goto out;
		double c = r.comm_s;
		if (comm_all_reduce(world, &c, &c, 1, COMM_F64, COMM_MAX, &e))
			goto out;
		if (k >= 0)
			st[k] = r.step_s, ct[k] = c;
	}
	qsort(st, (size_t)steps, sizeof *st, cmp);
	qsort(ct, (size_t)steps, sizeof *ct, cmp);
	if (m->rank == 0)
		printf("%d %d %d %.3f %.3f %.1f %zu\n", n, threads, tp, st[steps / 2], ct[steps / 2],
		       (double)rows * seq / st[steps / 2], plan_shard_numel(p));
	free(ids);
	free(labels);
	free(st);
	free(ct);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "bench_plan: rank %d: %s\n", comm_rank(world), e.msg);
	plan_free(p);
	backend_free(be);
	mesh_free(m);
	if (rc && n > 1)
		comm_abort(world, rc);
	comm_finalize(world);
	return rc;
}
