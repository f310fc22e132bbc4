/* Context parallelism on the plan (torchtitan's context_parallel over the cp
 * mesh dimension): the rank's chunks of each sequence (lib/cp's layout), the
 * tokens' global positions given to the model for RoPE (with torchtitan
 * 0.3.0's documents their positions in their documents, and the whole rows'
 * documents for the mask), and the model's attention replaced by ring
 * attention over the cp ranks. */
#include <stdlib.h>
#include <string.h>

#include "model/flavor.h"
#include "plan/plan_priv.h"

/* The model computes on the chunks of layout l: their positions, ring's
 * attention. */
static int use_layout(plan *p, const cp_layout *l, cp_attn *ring, titan_err *e)
{
	int64_t n = cp_local_len(l);
	int64_t *pos = malloc((size_t)n * sizeof *pos);
	if (pos == NULL)
		return err_set(e, "context parallel: out of memory");
	cp_positions(l, p->cp_rank, pos);
	int rc = model_set_positions(p->m, pos, (int)n, e);
	free(pos);
	model_attention a;
	cp_attn_hook(ring, &a);
	model_set_attention(p->m, &a);
	return rc;
}

/* The layout of sequences of seq_len tokens. */
static int layout_of(const plan *p, int64_t seq_len, cp_layout *l, titan_err *e)
{
	return cp_layout_init_block(l, seq_len, p->cp, p->o.cp_balance,
				    p->o.cp_block ? p->o.cp_block : CP_PTRR_BLOCK, e);
}

/* The layout of sequences of t x cp tokens and a ring for it. */
static int make_ring(plan *p, int t, cp_layout *l, cp_attn **ring, titan_err *e)
{
	if (layout_of(p, (int64_t)t * p->cp, l, e))
		return -1;
	*ring = cp_attn_create(p->be, p->c_cp, l, p->o.cp_rotate, e);
	return *ring ? 0 : -1;
}

int plan_apply_cp(plan *p, titan_err *e)
{
	/* a layout-only plan (the planner's) has no communicators to ring over */
	if (p->cp == 1 || p->o.layout_only)
		return 0;
	if (make_ring(p, p->o.t, &p->cpl, &p->ring, e) || use_layout(p, &p->cpl, p->ring, e))
		return err_prefix(e, "context parallel");
	return 0;
}

int plan_cp_use(plan *p, int t, cp_attn **ring, titan_err *e)
{
	*ring = NULL;
	if (p->cp == 1 || t == p->o.t)
		return 0;
	cp_layout l;
	if (make_ring(p, t, &l, ring, e) || use_layout(p, &l, *ring, e)) {
		titan_err ignored;
		cp_attn_free(*ring);
		*ring = NULL;
		use_layout(p, &p->cpl, p->ring, &ignored);
		return err_prefix(e, "context parallel");
	}
	return 0;
}

int plan_cp_restore(plan *p, cp_attn *ring, titan_err *e)
{
	if (ring == NULL)
		return 0;
	int rc = use_layout(p, &p->cpl, p->ring, e);
	cp_attn_free(ring);
	return rc;
}

size_t plan_cp_bytes(const plan *p)
{
	if (p->cp == 1)
		return 0;
	/* the model's attention call (its heads: the tp rank's) on the rank's
	 * chunks of a micro-batch, in the activations' type */
	const llama_args *a = model_args(p->m);
	int hd = flavor_head_dim(model_args(p->g));
	be_dtype t = model_get_prec(p->m)->act;
	be_attn s = {.b = p->o.b, .tq = p->o.t, .tk = p->o.t, .h = a->n_heads,
		     .hkv = a->n_kv_heads, .hd = hd, .hdv = hd, .causal = 1, .qkv = t, .out = t,
		     .dout = t, .grad = t};
	return cp_attn_bytes(&p->cpl, p->o.cp_rotate, &s);
}

/* Each row's chunks (cp_row_maps) into *maps, malloc'd. */
static int row_maps(const cp_layout *l, const int32_t *positions, int64_t rows, int **maps,
		    titan_err *e)
{
	*maps = malloc((size_t)rows * (size_t)cp_map_len(l) * sizeof **maps);
	if (*maps == NULL)
		return err_set(e, "context parallel: out of memory");
	if (cp_row_maps(l, positions, rows, *maps, e)) {
		free(*maps);
		*maps = NULL;
		return -1;
	}
	return 0;
}

int plan_cp_share(const plan *p, const int32_t *full, int32_t *local, int64_t rows,
		  int64_t seq_len, const int32_t *positions, titan_err *e)
{
	if (p->cp == 1) {
		memcpy(local, full, (size_t)(rows * seq_len) * sizeof *full);
		return 0;
	}
	cp_layout l;
	int *maps;
	if (layout_of(p, seq_len, &l, e) || row_maps(&l, positions, rows, &maps, e))
		return -1;
	cp_shard_rows(&l, maps, p->cp_rank, full, local, rows, sizeof *full);
	free(maps);
	return 0;
}

int plan_mb_positions(plan *p, model_mb *mb, const int32_t *rows, int b, int t, titan_err *e)
{
	if (p->cp == 1 || rows == NULL)
		return model_mb_set_positions(mb, rows, e);
	int64_t row_t = (int64_t)t * p->cp;
	int32_t *own = malloc((size_t)b * (size_t)t * sizeof *own);
	if (own == NULL)
		return err_set(e, "context parallel: out of memory");
	int rc = plan_cp_share(p, rows, own, b, row_t, rows, e) ||
		 model_mb_set_documents(mb, own, rows, row_t, e);
	free(own);
	return rc ? -1 : 0;
}
