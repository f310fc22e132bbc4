/* groups.h (private to lib/trainer): optimizer.param_groups on the plan. */
#ifndef TITAN_TRAINER_GROUPS_H
#define TITAN_TRAINER_GROUPS_H

#include "config/config.h"
#include "optim/optim.h"
#include "plan/plan.h"

/* The lr the schedule scales and the metrics report: optimizer.lr, or with
 * param_groups the first group's (0.3.0 logs its first optimizer's first
 * group's lr). */
double train_base_lr(const job_config *c);
/* The optimizer's default group (adamw_config's values): optimizer.*'s, or
 * the first group's.  Refuses Adam with weight decay (torch's Adam adds it
 * to the gradient; only AdamW's decoupled decay is built). */
int train_adamw_config(const job_config *c, adamw_config *ac, titan_err *err);
/* Each parameter to its group (0.3.0's _build_param_groups over its names:
 * in a 0.3.0 run lm_head.weight, qkv_linear.wqkv.weight, ...; in a TOML run
 * titan's, 0.2.2's), set on the plan.  Nothing without param_groups. */
int train_param_groups(plan *p, const job_config *c, titan_err *err);

#endif
