/* flux_priv.h: the model's parameter table, as flux_model.c lays it out and
 * flux_step.c runs it (private to lib/flux). */
#ifndef TITAN_FLUX_PRIV_H
#define TITAN_FLUX_PRIV_H

#include "flux/flux.h"

/* The embedders, first in the state dict. */
enum {
	P_IMG_IN_W, P_IMG_IN_B,
	P_TIME_IN_W, P_TIME_IN_B, P_TIME_OUT_W, P_TIME_OUT_B,
	P_VEC_IN_W, P_VEC_IN_B, P_VEC_OUT_W, P_VEC_OUT_B,
	P_TXT_IN_W, P_TXT_IN_B,
	P_GLOBAL
};
/* A double block's stream (img, then txt): its tensors in state-dict order. */
enum {
	D_MOD_W, D_MOD_B, D_QKV_W, D_QKV_B, D_QN, D_KN, D_PROJ_W, D_PROJ_B,
	D_MLP0_W, D_MLP0_B, D_MLP2_W, D_MLP2_B,
	D_STREAM
};
/* A single block's tensors. */
enum {
	S_L1_W, S_L1_B, S_L2_W, S_L2_B, S_QN, S_KN, S_MOD_W, S_MOD_B,
	S_BLOCK
};
/* The final layer's. */
enum { F_LIN_W, F_LIN_B, F_ADA_W, F_ADA_B, F_LAYER };

enum { FLUX_IMG = 0, FLUX_TXT = 1 };

struct flux_model {
	backend *be;
	flux_config c;
	int64_t h, heads, hd, f;  /* hidden, heads, head dim, MLP hidden */
	flux_param *p;
	int np;
	float *wbuf, *gbuf;       /* every weight, every gradient */
	int64_t total;            /* floats in each */
	be_dtype dt;              /* the step's compute type (flux_model_set_compute) */
	void *wlow;               /* bf16: the weights cast, wbuf's layout */
	int64_t maxw, maxb;       /* the largest weight's and bias's elements */
	be_attn_hook attn;        /* flux_model_set_attention's, fwd NULL: none */
	int full_ac;              /* flux_model_set_full_ac's */
	flux_unit_hooks units;    /* an unbound model's (gather NULL: bound) */
};

/* Index of a double block's stream tensor, a single block's, the final layer's. */
static inline int flux_pd(const flux_model *m, int64_t blk, int s, int t)
{
	(void)m;
	return P_GLOBAL + (int)(blk * 2 * D_STREAM) + s * D_STREAM + t;
}
static inline int flux_ps(const flux_model *m, int64_t blk, int t)
{
	return P_GLOBAL + (int)(m->c.depth * 2 * D_STREAM + blk * S_BLOCK) + t;
}
static inline int flux_pf(const flux_model *m, int t)
{
	return P_GLOBAL + (int)(m->c.depth * 2 * D_STREAM + m->c.depth_single_blocks * S_BLOCK) +
	       t;
}

#endif
