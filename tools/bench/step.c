/* titan-bench step: a training step of titan-train's plan (lib/plan) for a
 * job's model, batch, precision, activation checkpointing, Float8 converter
 * and parallel degrees (a titan-train TOML, --config), on random tokens, run
 * alone or under mpirun (one plan per rank, as titan-train runs them).  It
 * reports tokens/s, the FLOP rate against the CPU ceiling it measures for the
 * element type of the job's linears (MFU against the real ceiling of this
 * machine, not a data sheet's), the peak
 * memory, and the phases: the step, its forward (the plan's evaluation of the
 * same micro-batches), the optimizer (AdamW over the rank's shard), the
 * backward (the rest), and the time blocked in communication within the
 * step.  Figures are medians over --steps steps after a warm-up, the slowest
 * rank's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "comm/comm.h"
#include "config/config.h"
#include "mesh/mesh.h"
#include "plan/plan.h"
#include "planner/planner.h"
#include "trainer/precision.h"

typedef struct step_job {
	job_config c;
	const llama_args *args;
	int b, t, n_mb;
	comm *world;
	mesh *mesh;
	backend *be;
	plan *p;
	be_dtype act;          /* the linears' element type: the ceiling the rate is against */
	int32_t *ids, *labels; /* (n_mb, b, t) */
} step_job;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The slowest rank's value. */
static double worst(step_job *j, double v, titan_err *e)
{
	double w = v;
	if (comm_size(j->world) > 1 &&
	    comm_all_reduce(j->world, &v, &w, 1, COMM_F64, COMM_MAX, e))
		return -1;
	return w;
}

static int read_job(step_job *j, const bench_args *a, titan_err *e)
{
	if (config_defaults(&j->c, e) || (a->config && config_load_file(&j->c, a->config, e)))
		return -1;
	if (a->model && config_set(&j->c, "model.flavor", a->model, e))
		return -1;
	if (!(j->args = bench_flavor(j->c.model.flavor)))
		return err_set(e, "model.flavor \"%s\": not a Llama 3 flavor of titan", j->c.model.flavor);
	j->b = a->batch ? (int)a->batch : (int)j->c.training.local_batch_size;
	j->t = a->seq ? (int)a->seq : (int)j->c.training.seq_len;
	j->n_mb = 1;
	return config_check_supported(&j->c, comm_size(j->world), e);
}

static int build(step_job *j, const bench_args *a, titan_err *e)
{
	const job_config *c = &j->c;
	const __typeof__(c->parallelism) *pp = &c->parallelism;
	mesh_degrees want = {pp->data_parallel_replicate_degree, pp->data_parallel_shard_degree,
			     pp->context_parallel_degree, pp->tensor_parallel_degree,
			     pp->pipeline_parallel_degree, pp->expert_parallel_degree,
			     pp->expert_tensor_parallel_degree}, d;
	if (mesh_resolve(&want, comm_size(j->world), &d, e) ||
	    (comm_size(j->world) > 1 && mesh_create(j->world, &d, &j->mesh, e)))
		return -1;
	if (!(j->be = backend_cpu_create(a->threads, e)))
		return -1;
	plan_opts o = {.be = j->be, .mesh = j->mesh, .args = j->args, .b = j->b, .t = j->t,
		       .loss_parallel = !pp->disable_loss_parallel,
		       .async_tp = pp->enable_async_tensor_parallel,
		       .f8_all_gather = c->float8.enable_fsdp_float8_all_gather,
		       .f8_precompute = c->float8.precompute_float8_dynamic_scale_for_fsdp};
	adamw_config_default(&o.adamw);
	o.adamw.lr = c->optimizer.lr;
	prec_degrees pd = {(int)d.dp_replicate, (int)d.dp_shard, (int)d.tp, (int)d.pp, (int)d.cp};
	train_prec prec;
	if (planner_ac_mode(c, &o.ac, &o.ac_every, e) ||
	    plan_reshard_parse(pp->fsdp_reshard_after_forward, &o.reshard, e) ||
	    train_prec_choose(c, &pd, &prec, e))
		return -1;
	o.prec = prec.model;
	o.reduce = prec.reduce;
	j->act = prec.model.act;
	if (!(j->p = plan_create(&o, e)) || train_prec_apply(plan_model(j->p), &prec, e) ||
	    plan_init_weights(j->p, 7, 1, e))
		return -1;
	for (int i = 0; i < c->model.converters.n; i++)
		if (strcmp(c->model.converters.v[i], "quantize.linear.float8") == 0) {
			model_float8 f = {c->float8.recipe_name, (const char *const *)c->float8.filter_fqns.v,
					  (size_t)c->float8.filter_fqns.n};
			if (model_set_float8(plan_model(j->p), &f, e) < 0)
				return -1;
		}
	size_t n = (size_t)j->n_mb * (size_t)j->b * (size_t)j->t;
	if (!(j->ids = malloc(n * sizeof *j->ids)) || !(j->labels = malloc(n * sizeof *j->labels)))
		return err_set(e, "out of memory for %zu tokens", n);
	uint64_t s = 20261203u + (uint64_t)comm_rank(j->world);
	int vocab = j->args->vocab_size;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		j->ids[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
		j->labels[i] = (int32_t)((s >> 13) % (uint64_t)vocab);
	}
	return 0;
}

typedef struct phases {
	double step, comm, forward, optimizer, peak_gib;
} phases;

static int measure(step_job *j, int steps, phases *ph, titan_err *e)
{
	double *st = calloc((size_t)steps, sizeof *st), *cm = calloc((size_t)steps, sizeof *cm);
	double *fw = calloc((size_t)steps, sizeof *fw), *op = calloc((size_t)steps, sizeof *op);
	size_t shard = plan_shard_numel(j->p);
	adamw_config ac;
	adamw_config_default(&ac);
	adamw *opt = adamw_create(j->be, shard, &ac, e);
	float *w = opt ? backend_alloc_floats(j->be, shard, e) : NULL;
	float *g = w ? backend_alloc_floats(j->be, shard, e) : NULL;
	int rc = 0;
	if (!st || !cm || !fw || !op)
		rc = err_set(e, "out of memory");
	else if (!g)
		rc = -1;
	if (rc == 0) {
		j->be->ops->zero(j->be, w, shard * sizeof(float));
		j->be->ops->zero(j->be, g, shard * sizeof(float));
	}
	plan_batch batch = {.inputs = j->ids, .labels = j->labels, .n_mb = j->n_mb};
	for (int k = -1; k < steps && rc == 0; k++) { /* k = -1: the warm-up */
		plan_result r;
		double sum;
		int64_t valid;
		if (plan_step(j->p, &batch, 1e-4, 1.0, &r, e))
			rc = -1;
		double t0 = bench_now();
		if (rc == 0 && plan_eval(j->p, j->ids, j->labels, NULL, j->b, j->t, &sum, &valid, e))
			rc = -1;
		double t1 = bench_now();
		adamw_step(opt, w, g, 1e-4);
		if (rc == 0 && j->be->ops->sync(j->be, e))
			rc = -1;
		double t2 = bench_now();
		if (k >= 0 && rc == 0) {
			st[k] = r.step_s, cm[k] = r.comm_s, fw[k] = t1 - t0, op[k] = t2 - t1;
		}
	}
	if (rc == 0) {
		ph->step = median(st, steps), ph->comm = median(cm, steps);
		ph->forward = median(fw, steps), ph->optimizer = median(op, steps);
		ph->peak_gib = (double)j->be->peak_bytes / (1 << 30);
		double *v[] = {&ph->step, &ph->comm, &ph->forward, &ph->optimizer, &ph->peak_gib};
		for (size_t i = 0; i < sizeof v / sizeof v[0] && rc == 0; i++)
			if ((*v[i] = worst(j, *v[i], e)) < 0)
				rc = -1;
	}
	if (g)
		j->be->ops->free(j->be, g);
	if (w)
		j->be->ops->free(j->be, w);
	adamw_free(opt);
	free(st), free(cm), free(fw), free(op);
	return rc;
}

static void phase_row(report *r, const char *phase, double s, double step, double flops,
		      be_dtype act)
{
	json_t *row = report_row(r);
	rset(row, "phase", json_string(phase));
	rset(row, "ms", json_real(s * 1e3));
	rset(row, "pct_step", json_real(100 * (s / step)));
	if (flops > 0) {
		rset(row, "tflops", json_real(flops / s / 1e12));
		rset(row, "dtype", json_string(act == BE_BF16 ? "bf16" : "fp32"));
	}
}

static int run(step_job *j, const bench_args *a, report *rep, titan_err *e)
{
	if (read_job(j, a, e) || build(j, a, e))
		return -1;
	int steps = a->steps > 0 ? a->steps : 5;
	bench_ceiling_begin(rep, j->be->threads);
	phases ph;
	if (measure(j, steps, &ph, e))
		return -1;
	/* FLOPs of the rank's tokens: 6N per token and attention's causal pairs
	 * (titan-train's count), the forward a third (TP ranks share their
	 * tokens' FLOPs) */
	const model *gm = plan_global_model(j->p);
	double tokens = (double)j->n_mb * j->b * j->t;
	int tp = j->mesh ? plan_size(j->p, MESH_TP) : 1;
	double fl = model_train_flops(gm, (int64_t)j->n_mb * j->b, j->t, NULL) / tp;
	phase_row(rep, "step", ph.step, ph.step, fl, j->act);
	phase_row(rep, "forward", ph.forward, ph.step, fl / 3, j->act);
	phase_row(rep, "backward", ph.step - ph.forward - ph.optimizer, ph.step, 0, j->act);
	phase_row(rep, "optimizer", ph.optimizer, ph.step, 0, j->act);
	phase_row(rep, "communication", ph.comm, ph.step, 0, j->act);
	bench_ceiling_end(rep, j->be->threads); /* the rows' percentages of it */
	int dp = j->mesh ? j->mesh->size[MESH_BATCH] : 1;
	json_object_set_new(rep->doc, "tokens_per_s", json_real(tokens * dp / ph.step));
	json_object_set_new(rep->doc, "peak_gib", json_real(ph.peak_gib));
	json_object_set_new(rep->doc, "model", json_string(j->args->name));
	json_object_set_new(rep->doc, "ranks", json_integer(comm_size(j->world)));
	report_unavailable(rep, "data", "random tokens: titan-bench io measures the loader");
	report_note(rep, "%s, %d ranks, local batch %d x %d, %s; %.0f tokens/s over all ranks, peak "
		    "memory %.3f GiB a rank; communication = blocked in collectives, within the "
		    "step; backward = step - forward - optimizer; TFLOP/s over 6N per token + "
		    "attention's causal pairs (forward: a third); median of %d steps, slowest rank",
		    j->args->name, comm_size(j->world), j->b, j->t,
		    model_float8_recipe(plan_model(j->p)) ? "Float8" : "no converters",
		    tokens * dp / ph.step, ph.peak_gib, steps);
	return 0;
}

int bench_step(const bench_args *a, titan_err *e)
{
	step_job j;
	memset(&j, 0, sizeof j);
	if (comm_init(NULL, NULL, 300, &j.world, e))
		return -1;
	report rep;
	int rc = report_init(&rep, "step", a, e);
	if (rc == 0) {
		rc = run(&j, a, &rep, e);
		static const report_col cols[] = {
			{"phase", "phase", NULL}, {"ms", "ms", "%.2f"}, {"pct_step", "% step", "%.1f"},
			{"tflops", "TFLOP/s", "%.4f"}, {"pct_ceiling", "% ceiling", "%.1f"},
		};
		if (rc == 0 && comm_rank(j.world) == 0)
			rc = report_emit(&rep, cols, sizeof cols / sizeof cols[0], a->json, e);
		report_free(&rep);
	}
	plan_free(j.p);
	backend_free(j.be);
	mesh_free(j.mesh);
	free(j.ids);
	free(j.labels);
	config_free(&j.c);
	if (rc == 0 || comm_size(j.world) == 1)
		comm_finalize(j.world);
	else
		comm_abort(j.world, 1);
	return rc;
}
