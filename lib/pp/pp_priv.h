/* pp_priv.h: what lib/pp's files share. */
#ifndef TITAN_PP_PRIV_H
#define TITAN_PP_PRIV_H

#include <stddef.h>

#include "pp/pp.h"

/* A growing list of one rank's actions. */
typedef struct pp_list {
	pp_action *a;
	size_t n, cap;
} pp_list;

int pp_list_push(pp_list *l, int stage, pp_op op, int mb, int overlap, titan_err *e);

/* A schedule from n_ranks lists (copied; the caller frees them). */
int pp_schedule_from_lists(const char *name, int n_ranks, int n_stages, int n_mb,
			   const int *stage_rank, pp_list *lists, pp_schedule **out,
			   titan_err *e);

/* "2F0", "3I1", "(0F3;3B1)" forms of an action, into buf (>= 48 bytes). */
void pp_action_str(const pp_action *a, char *buf, size_t n);

#endif
