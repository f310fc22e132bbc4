/* torchtitan's Float8LinearConverter (components/quantization/float8.py) on
 * titan's model: the same choice of recipe, the same filter, the same log
 * lines, and a line of titan's own saying what runs where. */
#include "trainer/convert.h"

#include <stdio.h>
#include <string.h>

#include "metrics/metrics.h"

static int float8(model *m, const job_config *c, FILE *log, titan_err *e)
{
	const __typeof__(c->float8) *f = &c->float8;
	model_float8 opts = {f->recipe_name, (const char *const *)f->filter_fqns.v,
			     (size_t)f->filter_fqns.n};
	int n = model_set_float8(m, &opts, e);
	if (n < 0)
		return err_prefix(e, "quantize.linear.float8");
	if (cfg_strlist_has(&f->filter_fqns, "auto_filter_small_kn"))
		metrics_log(log, "Using _auto_filter_for_recipe to avoid converting linear layers with "
			    "dims too small to benefit from float8 training. See docs/float8.md for "
			    "more info.");
	if (f->recipe_name)
		metrics_log(log, "Float8 training active with recipe %s", f->recipe_name);
	else
		metrics_log(log, "Float8 tensorwise scaled training active");
	metrics_log(log, "Swapped to Float8Linear layers with enable_fsdp_float8_all_gather=%s",
		    f->enable_fsdp_float8_all_gather ? "True" : "False");
	int linears = 0;
	for (int i = 0; i < model_num_tensors(m); i++) {
		const model_tensor *t = model_tensor_at(m, i);
		linears += t->ndim == 2 && !t->is_embedding && !t->is_norm;
	}
	const char *be = model_backend(m)->ops->name;
	metrics_log(log, "Float8: %d of %d linears converted, recipe %s; %s", n, linears,
		    model_float8_recipe(m),
		    strcmp(be, "cpu") == 0
			    ? "emulated on the CPU (float8 values multiplied in float32: torchao's "
			      "emulate=True)"
			    : "float8 GEMMs on the device");
	return 0;
}

/* torchtitan's Float8GroupedMMConverter (0.2.2; 0.3.0's
 * Float8GroupedExpertsConverter is the fqns ["experts"]): the MoE layers whose
 * experts' FQN holds one of fqns run torchao's Float8 grouped GEMMs. */
static int float8_experts(model *m, const job_config *c, FILE *log, titan_err *e)
{
	const cfg_strlist *q = &c->grouped_mm.float8.fqns;
	int n = model_set_float8_experts(m, (const char *const *)q->v, (size_t)q->n, e);
	if (n < 0)
		return err_prefix(e, "quantize.grouped_mm.float8");
	if (!(c->compile.enable && cfg_strlist_has(&c->compile.components, "model")))
		metrics_log(log, "Compile is required for high performance float8 MoE training; "
			    "enable it with --compile.enable");
	char list[256] = "";
	for (int i = 0, at = 0; i < q->n && at < (int)sizeof list; i++)
		at += snprintf(list + at, sizeof list - (size_t)at, "%s'%s'", i ? ", " : "",
			       q->v[i]);
	metrics_log(log, "Converted MoE layers matching FQNS [%s] to use dynamic float8 rowwise "
		    "quantization with scaled grouped GEMMs", list);
	metrics_log(log, "Float8 grouped experts: %d MoE layers converted; %s", n,
		    strcmp(model_backend(m)->ops->name, "cpu") == 0
			    ? "emulated on the CPU (float8 values multiplied in float32)"
			    : "float8 grouped GEMMs on the device");
	return 0;
}

int train_convert(model *m, const job_config *c, FILE *log, titan_err *e)
{
	if (cfg_strlist_has(&c->model.converters, "quantize.linear.float8") &&
	    float8(m, c, log, e))
		return -1;
	if (cfg_strlist_has(&c->model.converters, "quantize.grouped_mm.float8"))
		return float8_experts(m, c, log, e);
	return 0;
}
