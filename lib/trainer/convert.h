/* convert.h: torchtitan's model converters (model.converters) on titan's model.
 * "quantize.linear.float8" is the Float8 converter: [quantize.linear.float8]'s
 * recipe_name and filter_fqns (with auto_filter_small_kn) choose the linears and
 * their numerics (model_set_float8, lib/float8/float8.h).
 * "quantize.grouped_mm.float8" is the Float8 grouped-GEMM converter: the MoE
 * layers [quantize.grouped_mm.float8]'s fqns pick run their routed experts'
 * grouped GEMMs in Float8 (model_set_float8_experts); 0.3.0's
 * Float8GroupedExpertsConverter.Config() is fqns = ["experts"].  The MX
 * converters are refused by the config check before this runs.
 *
 * The newer registry form of torchtitan's configs,
 *     Float8LinearConverter.Config(recipe_name=..., filter_fqns=...,
 *                                  model_compile_enabled=...)
 * is the same converter: its fields are these keys, model_compile_enabled is
 * compile.enable with "model" in compile.components (titan-train refuses
 * compile.enable on the CPU; see titan-config(5)). */
#ifndef TITAN_TRAINER_CONVERT_H
#define TITAN_TRAINER_CONVERT_H

#include <stdio.h>

#include "config/config.h"
#include "core/err.h"
#include "model/model.h"

/* Apply c's converters to m (after its precision is set) and log what was
 * converted as torchtitan does.  0, or -1 with e set. */
int train_convert(model *m, const job_config *c, FILE *log, titan_err *e);

#endif
