/* bench_loss: the memory of titan's loss, chunked and unchunked, measured on
 * the CPU backend for scripts/bench/loss.sh (make bench builds it).
 *
 *   bench_loss T ROWS
 *
 * A Llama 3 8B head (vocabulary 128256, untied output) on a model reduced to
 * one layer of dim 64, one row of T tokens, float32; ROWS is the loss's chunk
 * (model_set_loss_rows): 0 titan's default (256 rows here), T the unchunked
 * loss.  One training forward and backward; printed as key=value: the peak
 * resident memory the step added (VmHWM after it less VmRSS before, with
 * the high-water mark reset by /proc/self/clear_refs), the backend's peak
 * allocation the step added, and the planner's figure for the loss
 * (model_loss_bytes, what the plan's loss line reports). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "../support/testutil.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: bench_loss T ROWS (0: titan's chunks, T: unchunked)\n");
		return 2;
	}
	int t = atoi(argv[1]);
	long rows = atol(argv[2]);
	const llama_args *f8b = flavor_find("8B");
	if (t < 1 || rows < 0 || f8b == NULL) {
		fprintf(stderr, "bench_loss: bad T or ROWS\n");
		return 2;
	}
	llama_args a = *f8b;
	a.dim = 64, a.n_layers = 1, a.n_heads = 1, a.n_kv_heads = 1, a.hidden_dim = 256;
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = be ? model_create(be, &a, 0, &e) : NULL;
	if (!m || model_init(m, 1, 1, &e)) {
		titan_err_print(&e);
		return 1;
	}
	model_set_loss_rows(m, rows);
	int32_t *ids = malloc((size_t)t * 4), *labels = malloc((size_t)t * 4);
	if (!ids || !labels) {
		fprintf(stderr, "bench_loss: out of memory\n");
		return 1;
	}
	uint64_t s = 1;
	for (int i = 0; i < t; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((s >> 33) % (uint64_t)a.vocab_size);
		labels[i] = (int32_t)((s >> 13) % (uint64_t)a.vocab_size);
	}
	size_t in_use = be->bytes_in_use;
	backend_reset_peak(be);
	if (test_reset_hwm() != 0) {
		fprintf(stderr, "bench_loss: /proc/self/clear_refs: cannot reset the peak RSS\n");
		return 1;
	}
	long rss0 = test_status_kib("VmRSS:");
	double loss;
	int64_t nv;
	if (model_forward_backward(m, ids, labels, 1, t, 1.0f / (float)t, &loss, &nv, &e)) {
		titan_err_print(&e);
		return 1;
	}
	long hwm = test_status_kib("VmHWM:");
	printf("impl=titan t=%d vocab=%d chunk_rows=%lld step_rss_mib=%.1f backend_step_mib=%.1f "
	       "planned_loss_mib=%.1f planned_act_mib=%.1f loss=%.4f\n", t, a.vocab_size,
	       (long long)model_loss_rows(m, t), (double)(hwm - rss0) / 1024.0,
	       (double)(backend_peak_bytes(be) - in_use) / 1048576.0,
	       (double)model_loss_bytes(m, 1, t) / 1048576.0,
	       (double)model_activation_bytes(m, 1, t) / 1048576.0, loss / (double)nv);
	model_free(m);
	backend_free(be);
	free(ids);
	free(labels);
	return 0;
}
