/* bench_model: time titan's training step on the CPU backend (forward +
 * backward + clip + AdamW) for a named shape, print one line of key=value
 * figures for scripts/bench/model.sh (make bench builds it).
 *
 *   bench_model SHAPE B T STEPS [AC [PREC]]
 *     SHAPE: debugmodel | 100M | FAMILY:FLAVOR (qwen3:debugmodel_moe);
 *     AC: none|full|op|selective;
 *     PREC: float32 (default) | bfloat16 (torch.autocast's: float32 masters,
 *     bf16 linears and activations, float32 residual stream) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/backend.h"
#include "model/model.h"
#include "optim/optim.h"

/* ~100M parameters: GPT-2-small widths with Llama 3 blocks (GQA 12/4, head 64). */
static const llama_args shape_100m = {
	.name = "100M", .dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 4,
	.vocab_size = 16384, .multiple_of = 256, .norm_eps = 1e-5, .rope_theta = 500000,
	.rope_scale_factor = 8, .max_seq_len = 8192,
};

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--describe") == 0) { /* what the CPU backend runs */
		char how[384];
		backend_cpu_describe(how, sizeof how);
		printf("%s\n", how);
		return 0;
	}
	if (argc < 5) {
		fprintf(stderr, "usage: bench_model SHAPE B T STEPS [none|full|op|selective "
				"[float32|bfloat16]]\n");
		return 2;
	}
	const llama_args *a = strcmp(argv[1], "100M") == 0 ? &shape_100m : flavor_find(argv[1]);
	char fam[64];
	const char *colon = strchr(argv[1], ':');
	if (colon && (size_t)(colon - argv[1]) < sizeof fam) {
		snprintf(fam, sizeof fam, "%.*s", (int)(colon - argv[1]), argv[1]);
		const model_family *f = model_family_find(fam);
		a = f ? model_family_flavor(f, colon + 1) : NULL;
	}
	int b = atoi(argv[2]), t = atoi(argv[3]), steps = atoi(argv[4]);
	const char *ac = argc > 5 ? argv[5] : "none";
	const char *prec = argc > 6 ? argv[6] : "float32";
	int bf16 = strcmp(prec, "bfloat16") == 0;
	if (!a || b < 1 || t < 1 || steps < 1 || (!bf16 && strcmp(prec, "float32") != 0)) {
		fprintf(stderr, "bench_model: bad shape or sizes\n");
		return 2;
	}
	titan_err e = {0};
	backend *be = backend_cpu_create(0, &e);
	model *m = be ? model_create(be, a, 0, &e) : NULL;
	if (!m || model_init(m, 1, 1, &e)) {
		titan_err_print(&e);
		return 1;
	}
	model_ac_mode mode = strcmp(ac, "full") == 0 ? MODEL_AC_FULL
			     : strcmp(ac, "op") == 0 ? MODEL_AC_OP
			     : strcmp(ac, "selective") == 0 ? MODEL_AC_SELECTIVE : MODEL_AC_NONE;
	model_prec mp = {BE_F32, BE_F32, BE_BF16, BE_F32};
	if (model_set_ac(m, mode, 2, &e) ||
	    (bf16 && (model_set_prec(m, &mp, &e) || model_set_autocast(m, BE_BF16, &e)))) {
		titan_err_print(&e);
		return 1;
	}
	adamw_config c;
	adamw_config_default(&c);
	adamw *opt = adamw_create(be, model_num_params(m), &c, &e);
	size_t n = (size_t)b * t;
	int32_t *ids = malloc(n * 4), *labels = malloc(n * 4);
	if (!opt || !ids || !labels) {
		fprintf(stderr, "bench_model: out of memory\n");
		return 1;
	}
	uint64_t s = 1;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int32_t)((s >> 33) % (uint64_t)a->vocab_size);
		labels[i] = (int32_t)((s >> 13) % (uint64_t)a->vocab_size);
	}
	/* wall time, and CPU seconds of all threads (less sensitive to a shared
	 * machine's load than wall time) */
	double *dt = malloc(sizeof(double) * (size_t)(steps + 1)), loss = 0;
	double *dc = malloc(sizeof(double) * (size_t)(steps + 1));
	for (int st = 0; st <= steps; st++) { /* step 0 warms up, not timed */
		double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), ls;
		int64_t nv;
		model_zero_grad(m);
		if (model_forward_backward(m, ids, labels, b, t, 1.0f / (float)n, &ls, &nv, &e)) {
			titan_err_print(&e);
			return 1;
		}
		grad_clip_norm(be, model_grads(m), model_num_params(m), 1.0);
		adamw_step(opt, model_params(m), model_grads(m), c.lr);
		model_weights_changed(m);
		dt[st] = clock_s(CLOCK_MONOTONIC) - t0;
		dc[st] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
		loss = ls / (double)nv;
	}
	qsort(dt + 1, (size_t)steps, sizeof(double), cmp);
	qsort(dc + 1, (size_t)steps, sizeof(double), cmp);
	double med = dt[1 + steps / 2], cpu = dc[1 + steps / 2];
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("impl=titan shape=%s prec=%s params=%zu b=%d t=%d threads=%d step_s=%.4f cpu_s=%.4f "
	       "tok_s=%.1f peak_rss_mib=%.1f backend_peak_mib=%.1f act_mib=%.1f loss=%.4f\n",
	       argv[1], prec, model_num_params(m), b, t, be->threads, med, cpu, (double)n / med,
	       (double)ru.ru_maxrss / 1024.0, (double)backend_peak_bytes(be) / 1048576.0,
	       (double)model_activation_bytes(m, b, t) / 1048576.0, loss);
	adamw_free(opt);
	model_free(m);
	backend_free(be);
	free(ids), free(labels), free(dt), free(dc);
	return 0;
}
