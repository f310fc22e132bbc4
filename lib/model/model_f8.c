/* The Float8 converter (torchtitan's quantize.linear.float8, which swaps the
 * nn.Linear modules its filter picks for torchao's Float8Linear): the linears
 * it converts run their three GEMMs on float8 operands, each cast with the
 * recipe's format and scaling by the backend's f8_cast and multiplied by its
 * f8_matmul (lib/float8/float8.h has the numerics and the table of which GEMM
 * casts what).  Every cast is made from the operand as the model holds it, as
 * torchao recasts from the saved high-precision tensors in its backward:
 *   output       y  (n, out) = x (n, in) . w (out, in)     x, w: rows or one scale
 *   grad_input   dx (n, in)  = dy (n, out) . w^T (in, out) dy: rows; w: columns
 *   grad_weight  dw (out, in) += dy^T (out, n) . x^T (in, n)  columns of dy, of x
 * (a float8 GEMM reads both operands with the reduction dimension contiguous,
 * so w, dy and x are cast transposed where it runs over their rows).  The
 * weight is cast from the bound parameters (float32 masters under autocast,
 * as torchao casts the float32 weight), never from autocast's bf16 copy;
 * rowwise_with_gw_hp's weight gradient stays the plain high-precision GEMM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float8/float8.h"
#include "model/model_priv.h"

struct model_f8 {
	f8_recipe r;
	unsigned char *conv; /* (n_tensors) 1: the linear of this weight is converted */
	int n_conv;
	int head;            /* the output projection is converted */
	const float **wscale; /* (n_tensors) FSDP's float8 all-gather: the bound weight
	                         holds e4m3 codes of this scale (model_float8_weight_cast) */
	float *qmax;         /* 448 on the backend: the amax that casts codes to themselves */
	void *qa, *qb;       /* the two float8 operands of a GEMM */
	size_t qbytes;
	float *sa, *sb;      /* their scales */
	size_t sfloats;
	float *amax;         /* a cast's amax under TP, all-reduced over the group */
	size_t afloats;
	int shard_amax;      /* model_float8_tp_shard_amax (tests' negative control) */
};

static void f8_release(model *m)
{
	struct model_f8 *f = m->f8;
	if (!f)
		return;
	backend *be = m->be;
	be->ops->free(be, f->qa);
	be->ops->free(be, f->qb);
	be->ops->free(be, f->sa);
	be->ops->free(be, f->sb);
	be->ops->free(be, f->qmax);
	be->ops->free(be, f->amax);
	free(f->conv);
	free(f->wscale);
	free(f);
	m->f8 = NULL;
}

void model_f8_free(model *m)
{
	f8_release(m);
}

/* The table's linears: weights of two dimensions that are not the embedding. */
static int is_linear(const model_tensor *t)
{
	return t->ndim == 2 && !t->is_embedding && !t->is_norm;
}

/* The linear's (out, in) as torchtitan's converter sees it: before tensor
 * parallelism splits it (every tp rank decides alike, by the whole model's
 * sizes, as torchao's size rule and the multiples of 16 mean). */
static void global_dims(const model *m, const model_tensor *t, int64_t *out, int64_t *in)
{
	*out = t->shape[0];
	*in = t->shape[1];
	if (m->tp.size == 1)
		return;
	if (t->tp == MODEL_TP_COLWISE) /* the output projection's rows: the whole vocabulary */
		*out = t->unit == m->n_units - 1 ? m->vocab_global : *out * m->tp.size;
	else if (t->tp == MODEL_TP_ROWWISE)
		*in *= m->tp.size;
}

int model_set_float8(model *m, const model_float8 *c, titan_err *e)
{
	f8_release(m);
	/* the head lays its logits out whole or in chunks by this */
	model_mb_free(m->own_mb);
	m->own_mb = NULL;
	model_scratch_release(m);
	if (!c)
		return 0;
	f8_filter flt;
	struct model_f8 *f = calloc(1, sizeof *f);
	if (!f)
		return err_set(e, "model: out of memory");
	if (f8_recipe_get(&f->r, c->recipe, e) ||
	    f8_filter_init(&flt, c->recipe, c->filter_fqns, c->n_filter, e)) {
		free(f);
		return -1;
	}
	if (!(f->conv = calloc((size_t)m->n_tensors, 1)) ||
	    !(f->wscale = calloc((size_t)m->n_tensors, sizeof *f->wscale))) {
		free(f->conv);
		free(f);
		return err_set(e, "model: out of memory");
	}
	for (int i = 0; i < m->n_tensors; i++) {
		const model_tensor *t = &m->tensors[i];
		/* LoRA's adapters are plain Linears that LoRAConverter adds after
		 * Float8LinearConverter ran */
		if (!is_linear(t) || m->slot[i] == W_LORA_A || m->slot[i] == W_LORA_B)
			continue;
		/* torchtitan filters by the module's FQN: "layers.0.attention.wq" */
		char fqn[64];
		snprintf(fqn, sizeof fqn, "%s", t->fqn);
		char *dot = strrchr(fqn, '.');
		if (dot && strcmp(dot, ".weight") == 0)
			*dot = '\0';
		int64_t out, in;
		global_dims(m, t, &out, &in);
		f->conv[i] = f8_filter_convert(&flt, fqn, out, in);
		f->n_conv += f->conv[i];
		f->head |= f->conv[i] && t->unit == m->n_units - 1;
	}
	m->f8 = f;
	return f->n_conv;
}

int model_float8_converted(const model *m, int i)
{
	return m->f8 && i >= 0 && i < m->n_tensors && m->f8->conv[i];
}

void model_float8_tp_shard_amax(model *m, int on)
{
	if (m->f8)
		m->f8->shard_amax = on;
}

const char *model_float8_recipe(const model *m)
{
	return m->f8 ? m->f8->r.name : NULL;
}

int model_f8_head_whole(const model *m)
{
	/* A converted output projection scales over all the tokens (tensorwise
	 * amax, the weight gradient's per-column amax): it runs on the whole
	 * logits at once, as torchtitan's does.  rowwise_with_gw_hp's scales all
	 * run along single tokens or weight rows and columns. */
	return m->f8 && m->f8->head && m->f8->r.id != F8_RECIPE_ROWWISE_WITH_GW_HP;
}

/* The table index of the tensor whose bound storage (parameters, or with
 * grads the gradients) is p, or -1. */
static int tensor_at(const model *m, const void *p, int grads)
{
	for (int l = 0; l < m->args.n_layers; l++) {
		const layer_w *v = grads ? &m->lg[l] : &m->lw[l];
		for (int s = 0; s < W_COUNT; s++) {
			if (!v->p[s] || v->p[s] != p)
				continue;
			const model_unit *u = &m->units[l + 1];
			for (int i = u->first_tensor; i < u->first_tensor + u->n_tensors; i++)
				if (m->slot[i] == s)
					return i;
		}
	}
	if (p == (grads ? m->out_g : m->out) && !m->args.tied_embeddings)
		return m->n_tensors - 1; /* output.weight is the table's last */
	return -1;
}

/* The recipe, when the linear whose weight (or weight gradient) is p is
 * converted (its table index in *i); NULL for the plain GEMM. */
static const f8_recipe *recipe_for(const model *m, const void *p, int grads, int *i)
{
	if (!m->f8)
		return NULL;
	*i = tensor_at(m, p, grads);
	return *i >= 0 && m->f8->conv[*i] ? &m->f8->r : NULL;
}

int model_f8_converts(const model *m, const void *w)
{
	int i;
	return recipe_for(m, w, 0, &i) != NULL;
}

int model_float8_weight_cast(model *m, int i, const float *scale, titan_err *e)
{
	if (!model_float8_converted(m, i))
		return err_set(e, "model: float8 weight cast: tensor %d is not a converted linear", i);
	struct model_f8 *f = m->f8;
	const f8_recipe *r = &f->r;
	if (scale && (f8_operand_scaling(r, F8_WEIGHT) != F8_TENSOR ||
		      f8_operand_scaling(r, F8_WEIGHT_GI) != F8_TENSOR ||
		      r->cast[F8_WEIGHT].fmt != F8_E4M3FN || r->cast[F8_WEIGHT_GI].fmt != F8_E4M3FN))
		return err_set(e, "model: float8 weight cast: recipe %s does not cast weights "
			       "tensorwise to e4m3 (FSDP's float8 all-gather is tensorwise's)", r->name);
	if (scale && !f->qmax) {
		const float qmax = F8_E4M3FN_MAX;
		if (!(f->qmax = backend_alloc_floats(m->be, 1, e)))
			return -1;
		m->be->ops->copy(m->be, f->qmax, &qmax, sizeof qmax, BACKEND_H2D);
	}
	f->wscale[i] = scale;
	return 0;
}

/* Room for operands of qa and qb bytes and of na and nb scales; 0, or -1
 * with a fault for the next sync. */
static int room(model *m, size_t qa, size_t qb, size_t na, size_t nb)
{
	struct model_f8 *f = m->f8;
	backend *be = m->be;
	size_t q = qa > qb ? qa : qb, s = na > nb ? na : nb;
	titan_err e = {0};
	if (q > f->qbytes) {
		be->ops->free(be, f->qa);
		be->ops->free(be, f->qb);
		f->qb = NULL;
		f->qbytes = 0;
		if (!(f->qa = be->ops->alloc(be, q, &e)) || !(f->qb = be->ops->alloc(be, q, &e)))
			goto fail;
		f->qbytes = q;
	}
	if (s > f->sfloats) {
		be->ops->free(be, f->sa);
		be->ops->free(be, f->sb);
		f->sb = NULL;
		f->sfloats = 0;
		if (!(f->sa = backend_alloc_floats(be, s, &e)) ||
		    !(f->sb = backend_alloc_floats(be, s, &e)))
			goto fail;
		f->sfloats = s;
	}
	return 0;
fail:
	backend_fault(be, "model: float8 operands: %s", e.msg);
	return -1;
}

static be_dtype qtype(const f8_recipe *r, int op)
{
	return r->cast[op].fmt == F8_E5M2 ? BE_E5M2 : BE_E4M3;
}

/* Whether an amax of operand op of converted linear i, with scaling s, runs
 * along a dimension the tp ranks split.  The operands as stored: x (n, in),
 * w (out, in), dy (n, out); a column-parallel linear splits out (w's rows,
 * dy's columns), a row-parallel one in (w's and x's columns); the rows n are
 * the gathered sequence, whole on every rank. */
static int tp_split_amax(const model *m, int i, int op, f8_scaling s)
{
	if (m->tp.size == 1 || s == F8_NONE)
		return 0;
	int col = m->tensors[i].tp == MODEL_TP_COLWISE, row = m->tensors[i].tp == MODEL_TP_ROWWISE;
	int rows_split = 0, cols_split = 0;
	switch (op) {
	case F8_INPUT:
	case F8_INPUT_GW:
		cols_split = row;
		break;
	case F8_WEIGHT:
	case F8_WEIGHT_GI:
		rows_split = col;
		cols_split = row;
		break;
	default: /* the output's gradient */
		cols_split = col;
		break;
	}
	/* F8_ROWS reduces along a row (over the columns), F8_COLS along a column */
	return s == F8_TENSOR ? rows_split || cols_split : s == F8_ROWS ? cols_split : rows_split;
}

/* The amax of x (rows, cols) with scaling s over the whole tensor the tp
 * ranks split: each rank's of its part, all-reduced with max; NULL with a
 * fault for the next sync. */
static const float *tp_amax(model *m, const void *x, be_dtype xt, int64_t rows, int64_t cols,
			    f8_scaling s)
{
	struct model_f8 *f = m->f8;
	backend *be = m->be;
	size_t n = (size_t)f8_n_scales(s, rows, cols);
	titan_err e = {0};
	if (n > f->afloats) {
		be->ops->free(be, f->amax);
		f->afloats = 0;
		if (!(f->amax = backend_alloc_floats(be, n, &e))) {
			backend_fault(be, "model: float8 amax: %s", e.msg);
			return NULL;
		}
		f->afloats = n;
	}
	be->ops->f8_amax(be, f->amax, x, xt, rows, cols, s);
	if (f->shard_amax)
		return f->amax;
	if (m->tp.all_reduce_max(m->tp.ctx, f->amax, n, &e)) {
		backend_fault(be, "tensor parallel: float8 amax: %s", e.msg);
		return NULL;
	}
	return f->amax;
}

/* Cast operand op of converted linear i's GEMM: x (rows, cols) of type xt
 * into q (transposed when the GEMM reduces over x's rows) and its scales;
 * the number of scales (0 after a fault). */
static int64_t cast(model *m, const f8_recipe *r, int op, int i, void *q, float *scale,
		    const void *x, be_dtype xt, int64_t rows, int64_t cols, int transpose)
{
	f8_scaling s = f8_operand_scaling(r, op);
	const float *amax = NULL;
	if (tp_split_amax(m, i, op, s) && !(amax = tp_amax(m, x, xt, rows, cols, s)))
		return 0;
	m->be->ops->f8_cast(m->be, q, qtype(r, op), scale, x, xt, rows, cols, s, r->pow2_scales,
			    transpose, amax);
	return f8_n_scales(s, rows, cols);
}

/* Cast the weight w (out, in) as operand op (F8_WEIGHT, or F8_WEIGHT_GI
 * transposed) of tensor i.  Under FSDP's float8 all-gather w holds e4m3 codes
 * already: cast with amax 448 they are their own cast (scale 1, exactly), and
 * the gathered scale is copied in. */
static int64_t cast_weight(model *m, const f8_recipe *r, int op, int i, const void *w,
			   int64_t out, int64_t in, int transpose)
{
	struct model_f8 *f = m->f8;
	if (!f->wscale[i])
		return cast(m, r, op, i, f->qb, f->sb, w, m->prec.param, out, in, transpose);
	m->be->ops->f8_cast(m->be, f->qb, BE_E4M3, f->sb, w, m->prec.param, out, in, BE_F8_TENSOR,
			    0, transpose, f->qmax);
	m->be->ops->copy(m->be, f->sb, f->wscale[i], sizeof(float), BACKEND_D2D);
	return 1;
}

int model_f8_linear(model *m, void *y, const void *x, const void *w, int64_t n, int64_t in,
		    int64_t out, float beta)
{
	int i;
	const f8_recipe *r = recipe_for(m, w, 0, &i);
	if (!r)
		return 0;
	struct model_f8 *f = m->f8;
	if (room(m, (size_t)(n * in), (size_t)(out * in), (size_t)n, (size_t)out))
		return 1;
	/* y (n, out) = x (n, in) . w (out, in) */
	int64_t na = cast(m, r, F8_INPUT, i, f->qa, f->sa, x, m->prec.act, n, in, 0);
	int64_t nb = cast_weight(m, r, F8_WEIGHT, i, w, out, in, 0);
	if (na == 0 || nb == 0) /* a fault the next sync reports */
		return 1;
	m->be->ops->f8_matmul(m->be, n, out, in, f->qa, qtype(r, F8_INPUT), f->sa, na, f->qb,
			      qtype(r, F8_WEIGHT), f->sb, nb, beta, y, m->prec.act);
	return 1;
}

int model_f8_linear_dx(model *m, void *dx, const void *dy, const void *w, int64_t n,
		       int64_t in, int64_t out, float beta_dx)
{
	int i;
	const f8_recipe *r = recipe_for(m, w, 0, &i);
	if (!r)
		return 0;
	struct model_f8 *f = m->f8;
	if (room(m, (size_t)(n * out), (size_t)(out * in), (size_t)n, (size_t)in))
		return 1;
	/* dx (n, in) = dy (n, out) . w^T (in, out) */
	int64_t na = cast(m, r, F8_GRAD_OUTPUT, i, f->qa, f->sa, dy, m->prec.act, n, out, 0);
	int64_t nb = cast_weight(m, r, F8_WEIGHT_GI, i, w, out, in, 1);
	if (na == 0 || nb == 0) /* a fault the next sync reports */
		return 1;
	m->be->ops->f8_matmul(m->be, n, in, out, f->qa, qtype(r, F8_GRAD_OUTPUT), f->sa, na,
			      f->qb, qtype(r, F8_WEIGHT_GI), f->sb, nb, beta_dx, dx, m->prec.act);
	return 1;
}

int model_f8_linear_dw(model *m, void *dw, const void *dy, const void *x, int64_t n,
		       int64_t in, int64_t out)
{
	int i;
	const f8_recipe *r = recipe_for(m, dw, 1, &i);
	if (!r || f8_operand_scaling(r, F8_GRAD_OUTPUT_GW) == F8_NONE)
		return 0; /* rowwise_with_gw_hp: the high-precision GEMM */
	struct model_f8 *f = m->f8;
	if (room(m, (size_t)(n * out), (size_t)(n * in), (size_t)out, (size_t)in))
		return 1;
	/* dw (out, in) += dy^T (out, n) . x^T (in, n) */
	int64_t na = cast(m, r, F8_GRAD_OUTPUT_GW, i, f->qa, f->sa, dy, m->prec.act, n, out, 1);
	int64_t nb = cast(m, r, F8_INPUT_GW, i, f->qb, f->sb, x, m->prec.act, n, in, 1);
	if (na == 0 || nb == 0) /* a fault the next sync reports */
		return 1;
	m->be->ops->f8_matmul(m->be, out, in, n, f->qa, qtype(r, F8_GRAD_OUTPUT_GW), f->sa, na,
			      f->qb, qtype(r, F8_INPUT_GW), f->sb, nb, 1, dw, m->prec.grad);
	return 1;
}
