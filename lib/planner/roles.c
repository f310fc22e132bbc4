/* Each pipeline rank's bytes: state by tensor shards, activations by walking
 * its action list, traffic by counting what its actions and collectives send.
 * See planner.h for the terms. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/family.h"
#include "plan/plan.h"
#include "planner/planner_priv.h"

/* Every figure is a product of sizes from the config: each product and sum
 * goes through these, which saturate at INT64_MAX (what JSON's integers hold)
 * and flag the plan, so that a wrapped sum can never read as "fits". */
uint64_t planner_mul(plan_ctx *x, uint64_t a, uint64_t b)
{
	uint64_t r;
	if (__builtin_mul_overflow(a, b, &r) || r > (uint64_t)INT64_MAX) {
		x->overflow = 1;
		return (uint64_t)INT64_MAX;
	}
	return r;
}

uint64_t planner_add(plan_ctx *x, uint64_t a, uint64_t b)
{
	uint64_t r;
	if (__builtin_add_overflow(a, b, &r) || r > (uint64_t)INT64_MAX) {
		x->overflow = 1;
		return (uint64_t)INT64_MAX;
	}
	return r;
}

/* A tensor's elements on one rank: split by TP along its tp_dim, then FSDP's
 * dim-0 shard, the rows padded up to a multiple of the FSDP degree (FSDP2's
 * padding, held by every rank). */
static int ep_split(const plan_ctx *x, const model_tensor *t)
{
	return x->d.ep > 1 && t->is_expert;
}

/* Under expert parallelism a routed expert tensor holds the rank's experts
 * (dim 0 / ep), whole under TP (expert_tensor_parallel_degree 1), and shards
 * over efsdp = fsdp x tp / ep. */
static int efsdp(const plan_ctx *x)
{
	return x->fsdp * x->d.tp / x->d.ep;
}

static uint64_t tp_numel(const plan_ctx *x, const model_tensor *t)
{
	if (ep_split(x, t))
		return t->numel / (uint64_t)x->d.ep;
	uint64_t n = t->numel;
	if (x->d.tp > 1 && t->tp_dim >= 0)
		n = n / (uint64_t)t->shape[t->tp_dim] *
		    (uint64_t)((t->shape[t->tp_dim] + x->d.tp - 1) / x->d.tp);
	return n;
}

static uint64_t shard_numel(const plan_ctx *x, const model_tensor *t)
{
	uint64_t n = tp_numel(x, t);
	int64_t rows = t->shape[0];
	int fsdp = x->fsdp;
	if (x->d.tp > 1 && t->tp_dim == 0)
		rows = (rows + x->d.tp - 1) / x->d.tp;
	if (ep_split(x, t))
		rows /= x->d.ep, fsdp = efsdp(x);
	if (fsdp <= 1 || rows <= 0)
		return n;
	return n / (uint64_t)rows * (uint64_t)((rows + fsdp - 1) / fsdp);
}

/* Elements of unit u on one rank: TP-local (whole = 1) or its FSDP shard. */
static uint64_t unit_numel(const plan_ctx *x, int u, int whole)
{
	const model_unit *mu = model_unit_at(x->whole, u);
	uint64_t n = 0;
	for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++) {
		const model_tensor *t = model_tensor_at(x->whole, i);
		n += whole ? tp_numel(x, t) : shard_numel(x, t);
	}
	return n;
}

/* Elements of unit u's tensors FSDP gathers as float8, in a rank's shard. */
static uint64_t f8_numel(const plan_ctx *x, int u)
{
	const model_unit *mu = model_unit_at(x->whole, u);
	uint64_t n = 0;
	for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++)
		if (planner_f8_gathered(x, i))
			n += shard_numel(x, model_tensor_at(x->whole, i));
	return n;
}

/* Elements of unit u's expert-parallel tensors in a rank's shard. */
static uint64_t expert_numel(const plan_ctx *x, int u)
{
	const model_unit *mu = model_unit_at(x->whole, u);
	uint64_t n = 0;
	for (int i = mu->first_tensor; i < mu->first_tensor + mu->n_tensors; i++)
		if (ep_split(x, model_tensor_at(x->whole, i)))
			n += shard_numel(x, model_tensor_at(x->whole, i));
	return n;
}

/* Whether AC recomputes block unit u's forward in its backward (as the
 * model's model_layer_keep decides: full, or every Nth layer). */
static int recomputed(const plan_ctx *x, int u)
{
	return x->ac == MODEL_AC_FULL || (x->ac == MODEL_AC_SELECTIVE && u % x->ac_every == 0);
}

static int reshard_after_forward(const plan_ctx *x)
{
	const char *p = x->c->parallelism.fsdp_reshard_after_forward;
	return strcmp(p, "always") == 0 || (strcmp(p, "default") == 0 && x->d.pp == 1);
}

/* FSDP's all-gathers of a unit a step: before forward (and again before
 * backward when resharded) each pass, or once a step under pipeline
 * parallelism without reshard. */
static uint64_t fsdp_gathers(plan_ctx *x, uint64_t passes)
{
	int again = reshard_after_forward(x);
	return x->d.pp > 1 ? (again ? planner_mul(x, 2, passes) : 1)
			   : planner_mul(x, passes, again ? 2 : 1);
}

/* A rank's stages: (first unit, last unit) of each. */
typedef struct stages {
	int n, id[64], u0[64], u1[64];
} stages;

static void role_stages(const plan_ctx *x, int r, stages *s)
{
	if (x->d.pp == 1) {
		*s = (stages){.n = 1, .id = {0}, .u0 = {0}, .u1 = {model_head_unit(x->whole)}};
		return;
	}
	int ids[64];
	s->n = pp_split_rank_stages(&x->split, r, ids);
	for (int k = 0; k < s->n && k < 64; k++) {
		s->id[k] = ids[k];
		s->u0[k] = x->split.u0[ids[k]];
		s->u1[k] = x->split.u1[ids[k]];
	}
}

/* The shard elements each rank of pipeline rank r holds, from the plan's
 * own layout: plan_create with layout_only (TP's shapes, the rank's experts
 * under EP, FSDP2's padded chunks) of the units plan_pipeline_hold gives the rank, for its first rank
 * (the others of the role hold as many). */
static int held_shard(const plan_ctx *x, int r, uint64_t *numel, titan_err *e)
{
	mesh m = {.d = {x->d.dp_replicate, x->d.dp_shard, x->d.cp, x->d.tp, x->d.pp, x->d.ep, 1}};
	m.world_size = x->r->world_size;
	mesh_sizes(&m.d, m.size);
	for (m.rank = 0; m.rank < m.world_size; m.rank++) {
		mesh_coords(&m.d, m.rank, m.coord);
		if (m.coord[MESH_PP] == r)
			break;
	}
	int n_units = model_num_units(x->whole);
	int8_t *hold = NULL;
	if (x->d.pp > 1) {
		if (!(hold = malloc((size_t)n_units)))
			return err_set(e, "planner: out of memory");
		plan_pipeline_hold(&x->split, r, n_units, hold);
	}
	plan_opts o = {.be = x->be, .mesh = &m, .args = model_args(x->whole),
		       .b = (int)x->r->microbatch, .t = cp_local_len(&x->cpl), .reduce = BE_F32,
		       .pp = x->d.pp > 1, .hold = hold, .layout_only = 1};
	adamw_config_default(&o.adamw);
	plan *p = plan_create(&o, e);
	free(hold);
	if (p == NULL)
		return err_prefix(e, "planner: pipeline rank %d's plan", r);
	*numel = plan_shard_numel(p);
	plan_free(p);
	return 0;
}

/* Parameters, gradients, optimizer states (the plan's shards) and FSDP's
 * unsharded copies. */
static int state_bytes(plan_ctx *x, int r, const stages *s, plan_role *ro, titan_err *e)
{
	uint64_t shard = 0, biggest = 0, all = 0, head = 0;
	int H = model_head_unit(x->whole);
	if (held_shard(x, r, &shard, e))
		return -1;
	for (int k = 0; k < s->n; k++)
		for (int u = s->u0[k]; u <= s->u1[k]; u++) {
			uint64_t w = unit_numel(x, u, 1);
			all = planner_add(x, all, w);
			if (u == H)
				head = w;
			else if (w > biggest)
				biggest = w;
		}
	size_t p = be_dtype_size(x->param_t);
	ro->bytes[PLAN_PARAMS] = planner_mul(x, shard, p);
	ro->bytes[PLAN_GRADS] = planner_mul(x, shard, p);
	ro->bytes[PLAN_OPTIMIZER] = planner_mul(x, 2 * be_dtype_size(x->state_t), shard);
	if (x->fsdp > 1) {
		/* torchtitan keeps norm + output gathered after forward in any case.
		 * A unit's unsharded gradient lives until its reduce-scatter: right
		 * after its backward, or under pipeline parallelism (torch's stage
		 * turns gradient sync off until the last micro-batch) through the
		 * whole step, for every unit of the rank. */
		uint64_t gathered = reshard_after_forward(x) ? planner_add(x, head, planner_mul(x, 2, biggest)) : all;
		uint64_t grads = x->d.pp > 1 ? all : head > biggest ? head : biggest;
		ro->bytes[PLAN_GATHERED] = planner_add(x, planner_mul(x, gathered, be_dtype_size(x->mp_t)),
					       planner_mul(x, grads, be_dtype_size(x->reduce_t)));
	}
	return 0;
}

/* The bytes of one pipeline message: a micro-batch's hidden state, its
 * tokens split by sequence parallelism. */
static uint64_t message_bytes(plan_ctx *x)
{
	uint64_t tokens = planner_mul(x, (uint64_t)x->r->microbatch, (uint64_t)cp_local_len(&x->cpl));
	return planner_mul(x, planner_mul(x, tokens / (uint64_t)x->d.tp, (uint64_t)model_args(x->local)->dim),
		   be_dtype_size(x->compute_t));
}

/* Expert parallelism's rows beyond what the model counts for its experts
 * (n top_k rows of their activations: what a rank's experts receive when
 * the routing is balanced, the average): the received rows' input (and,
 * under op-level AC, their gate output: both recomputed without ep) for
 * every MoE layer whose backward keeps them; and one layer's staging rows
 * and outputs (2 rows x dim) while it runs. */
static uint64_t ep_bytes(plan_ctx *x, int b, int t)
{
	const llama_args *a = model_args(x->local);
	if (x->d.ep <= 1)
		return 0;
	/* under TP a rank dispatches its 1/tp of the gathered tokens */
	uint64_t rows = planner_mul(x, planner_mul(x, (uint64_t)b, (uint64_t)t) / (uint64_t)x->d.tp,
			    (uint64_t)a->moe.top_k);
	uint64_t layers = 0;
	uint64_t d = (uint64_t)a->dim, in = (uint64_t)a->moe.inter_dim;
	for (int l = 0; l < a->n_layers; l++)
		layers += model_family_moe_layer(a, l) && !recomputed(x, l + 1);
	uint64_t kept = d + (x->ac == MODEL_AC_OP ? in : 0);
	return planner_mul(x, planner_mul(x, planner_add(x, planner_mul(x, layers, kept), 2 * d), rows),
		   be_dtype_size(x->compute_t));
}

/* Activations: the bytes of the micro-batch contexts alive at the worst
 * moment of the rank's action list (a context lives from its F to its B, or
 * to its W when the backward is split, when the weight-gradient jobs its I
 * left live too), and the model's scratch.  The pipeline's messages (as the
 * engine holds them: pp_engine_message_events) are followed in the same walk,
 * and what they add to that peak is the role's pipeline buffer term. */
static int activation_bytes(plan_ctx *x, int r, const stages *s, plan_role *ro,
			    uint64_t *msg_extra, titan_err *e)
{
	int b = (int)x->r->microbatch, t = (int)cp_local_len(&x->cpl), tk = t;
	uint64_t scratch = model_scratch_bytes(x->local, b, t);
	/* Under TP's sequence parallelism the residual stream between blocks
	 * holds t / tp tokens.  With full AC that is all a block keeps, so the
	 * model's figure at t / tp is exact; with op or selective AC the figure
	 * at t over-counts the sequence-sharded pieces (the residual, the norm
	 * statistics) until the TP plan gives the model its sequence-parallel
	 * layout. */
	if (x->d.tp > 1 && x->ac == MODEL_AC_FULL)
		tk = t / x->d.tp;
	*msg_extra = 0;
	if (x->d.pp == 1) {
		ro->live_mb = 1;
		ro->bytes[PLAN_ACTIVATIONS] =
			planner_add(x, planner_add(x, model_mb_bytes(x->local, s->u0[0], s->u1[0], b, tk), scratch),
			    ep_bytes(x, b, t));
		return 0;
	}
	const pp_schedule *sc = x->sched;
	int n_act = sc->first[r + 1] - sc->first[r];
	int *ev = malloc(3 * (size_t)(n_act ? n_act : 1) * sizeof(int));
	if (ev == NULL || pp_engine_message_events(sc, r, ev, ev + n_act, ev + 2 * n_act)) {
		free(ev);
		return err_set(e, "planner: out of memory");
	}
	uint64_t msg = message_bytes(x), live = 0, peak = 0, both = 0, held = 0;
	int n = 0, most = 0;
	for (int k = 0; k < n_act; k++) {
		const pp_action *a = &sc->act[sc->first[r] + k];
		int u0 = x->split.u0[a->stage], u1 = x->split.u1[a->stage];
		uint64_t mb = model_mb_bytes(x->local, u0, u1, b, tk);
		uint64_t jobs = model_wgrad_bytes(x->local, u0, u1, b, t);
		held = planner_add(x, held, planner_mul(x, (uint64_t)ev[k], msg));
		if (a->op == PP_F) {
			live = planner_add(x, live, mb);
			n++;
		}
		both = planner_add(x, live, held) > both ? planner_add(x, live, held) : both;
		held = planner_add(x, held - planner_mul(x, (uint64_t)ev[n_act + k], msg),
			   planner_mul(x, (uint64_t)ev[2 * n_act + k], msg));
		if (a->op == PP_I)
			live = planner_add(x, live, jobs);
		both = planner_add(x, live, held) > both ? planner_add(x, live, held) : both;
		peak = live > peak ? live : peak;
		most = n > most ? n : most;
		if (a->op == PP_B || a->op == PP_W) {
			live -= mb + (a->op == PP_W ? jobs : 0);
			n--;
		}
	}
	free(ev);
	ro->live_mb = most;
	ro->bytes[PLAN_ACTIVATIONS] = planner_add(x, peak, scratch);
	*msg_extra = both - peak;
	return 0;
}

/* The model's attention call on this rank, as model_attn makes it (local
 * heads, the rank's chunks). */
static be_attn attn_call(const plan_ctx *x)
{
	const llama_args *a = model_args(x->local);
	int hd = flavor_head_dim(a);
	be_dtype t = x->compute_t;
	return (be_attn){.b = (int)x->r->microbatch, .tq = cp_local_len(&x->cpl),
			 .tk = cp_local_len(&x->cpl), .h = a->n_heads, .hkv = a->n_kv_heads,
			 .hd = hd, .hdv = hd, .causal = 1, .qkv = t, .out = t, .dout = t, .grad = t};
}

/* Communication buffers beyond the activations: what the pipeline's messages
 * add to the activations' peak (activation_bytes), and ring attention's
 * (cp_attn_bytes: the keys and values from the other ranks, their float32
 * gradients, the float32 accumulators of out and dq). */
static void buffer_bytes(plan_ctx *x, uint64_t msg_extra, plan_role *ro)
{
	uint64_t buf = msg_extra;
	if (x->d.cp > 1) {
		be_attn s = attn_call(x);
		buf = planner_add(x, buf, cp_attn_bytes(&x->cpl, x->rotate, &s));
	}
	ro->bytes[PLAN_COMM_BUFFERS] = buf;
}

/* Bytes sent per step.  Passes of a unit's forward and backward: n_mb micro-
 * batches (pipeline) or the gradient-accumulation steps. */
static void traffic(plan_ctx *x, int r, const stages *s, plan_role *ro)
{
	const llama_args *a = model_args(x->local);
	int H = model_head_unit(x->whole);
	uint64_t passes = (uint64_t)x->r->n_mb, b = (uint64_t)x->r->microbatch;
	uint64_t tokens = planner_mul(x, b, (uint64_t)cp_local_len(&x->cpl));
	uint64_t *sent = ro->sent;
	size_t act = be_dtype_size(x->compute_t);
	/* FSDP: an all-gather of each unit's shard before forward (and again
	 * before backward when resharded), a reduce-scatter of its gradient; once
	 * a step under pipeline parallelism (no reshard; torch reduces at the
	 * stage's last backward), each micro-batch otherwise (FSDP2 reduces every
	 * backward).  HSDP then all-reduces the reduced shard over the replicas. */
	uint64_t ne = x->d.ep > 1 ? (uint64_t)efsdp(x) : (uint64_t)x->fsdp;
	if (x->fsdp > 1 || ne > 1 || x->d.dp_replicate > 1) {
		uint64_t n = (uint64_t)x->fsdp, R = (uint64_t)x->d.dp_replicate;
		uint64_t gathers = fsdp_gathers(x, passes);
		uint64_t reduces = x->d.pp > 1 ? 1 : passes;
		for (int k = 0; k < s->n; k++)
			for (int u = s->u0[k]; u <= s->u1[k]; u++) {
				uint64_t sh = unit_numel(x, u, 0), se = expert_numel(x, u);
				/* the experts' shards go round efsdp (counted here); Float8's
				 * gathered weights one byte an element */
				uint64_t ring = planner_add(x, planner_mul(x, n - 1, sh - se), planner_mul(x, ne - 1, se));
				uint64_t q = planner_mul(x, planner_mul(x, gathers, n - 1), f8_numel(x, u));
				if (ring) {
					sent[PLAN_DIM_FSDP] = planner_add(x, sent[PLAN_DIM_FSDP],
						planner_mul(x, planner_mul(x, gathers, ring), be_dtype_size(x->mp_t)) -
						planner_mul(x, q, be_dtype_size(x->mp_t) - 1));
					ro->f8_sent[PLAN_DIM_FSDP] = planner_add(x, ro->f8_sent[PLAN_DIM_FSDP], q);
					sent[PLAN_DIM_FSDP] = planner_add(x, sent[PLAN_DIM_FSDP],
						planner_mul(x, planner_mul(x, reduces, ring), be_dtype_size(x->reduce_t)));
				}
				if (R > 1)
					sent[PLAN_DIM_DP_REPLICATE] = planner_add(x, sent[PLAN_DIM_DP_REPLICATE],
						planner_mul(x, planner_mul(x, reduces, 2 * (R - 1)),
						    planner_mul(x, sh, be_dtype_size(x->reduce_t))) / R);
			}
	}
	/* TP with sequence parallelism: per block and pass, the forward gathers
	 * the sequence before attention and the FFN and reduce-scatters after wo
	 * and w2, the backward the reverse (4 + 4 shards of b t/tp dim); a layer
	 * recomputed under AC repeats its forward's; the embedding reduce-scatters
	 * (backward: gathers), the head gathers (backward: reduce-scatters). */
	if (x->d.tp > 1) {
		uint64_t tp = (uint64_t)x->d.tp;
		uint64_t shard = planner_mul(x, planner_mul(x, tokens / tp, (uint64_t)a->dim), act);
		uint64_t per = 0;
		for (int k = 0; k < s->n; k++)
			for (int u = s->u0[k]; u <= s->u1[k]; u++) {
				uint64_t times = u == 0 || u == H ? 2 : 8 + (recomputed(x, u) ? 4 : 0);
				per = planner_add(x, per, planner_mul(x, times * (tp - 1), shard));
			}
		sent[PLAN_DIM_TP] = planner_mul(x, per, passes);
	}
	/* Float8's amax all-reduces (FSDP's and TP's) */
	for (int k = 0; k < s->n; k++)
		planner_f8_traffic(x, s->u0[k], s->u1[k], passes,
				   x->fsdp > 1 ? fsdp_gathers(x, passes) : 0, tokens, recomputed, ro);
	/* CP: per block and pass, ring attention's forward (again where AC
	 * recomputes it) and backward, as lib/cp sends them (cp_attn_sent). */
	if (x->d.cp > 1) {
		be_attn call = attn_call(x);
		uint64_t fwd, bwd, per = 0;
		cp_attn_sent(&x->cpl, x->rotate, &call, &fwd, &bwd);
		for (int k = 0; k < s->n; k++)
			for (int u = s->u0[k]; u <= s->u1[k]; u++)
				if (u != 0 && u != H)
					per = planner_add(x, per, planner_add(x, planner_mul(x, (uint64_t)(1 + recomputed(x, u)),
								     fwd), bwd));
		sent[PLAN_DIM_CP] = planner_mul(x, per, passes);
	}
	/* EP: per MoE layer and pass, the forward (again where AC recomputes it)
	 * exchanges the rows per expert (all-to-all of E/ep int32) and sends the
	 * rows out and the outputs back, the backward the rows' gradients out
	 * and back (all-to-allv), as balanced routing sends them: (ep - 1)/ep of
	 * the rank's n/tp x top_k rows each way. */
	if (x->d.ep > 1) {
		uint64_t ep = (uint64_t)x->d.ep, el = (uint64_t)a->moe.experts / ep;
		uint64_t rows = planner_mul(x, tokens / (uint64_t)x->d.tp, (uint64_t)a->moe.top_k);
		uint64_t v = planner_mul(x, planner_mul(x, planner_mul(x, 2 * (ep - 1), rows) / ep, (uint64_t)a->dim), act);
		uint64_t per = 0;
		for (int k = 0; k < s->n; k++)
			for (int u = s->u0[k]; u <= s->u1[k]; u++)
				if (u != 0 && u != H && model_family_moe_layer(a, u - 1))
					per = planner_add(x, per,
						  planner_add(x, planner_mul(x, (uint64_t)(1 + recomputed(x, u)),
							     planner_add(x, (ep - 1) * el * 4, v)), v));
		sent[PLAN_DIM_EP] = planner_mul(x, per, passes);
	}
	/* PP: each F sends its output to the next stage's rank, each B or I its
	 * input gradient to the previous stage's, when that is another rank. */
	if (x->d.pp > 1) {
		const pp_schedule *sc = x->sched;
		uint64_t msg = message_bytes(x);
		for (int i = sc->first[r]; i < sc->first[r + 1]; i++) {
			const pp_action *ac = &sc->act[i];
			int to = ac->op == PP_F ? ac->stage + 1 : ac->op == PP_W ? -1 : ac->stage - 1;
			if (to >= 0 && to < sc->n_stages && sc->stage_rank[to] != r)
				sent[PLAN_DIM_PP] = planner_add(x, sent[PLAN_DIM_PP], msg);
		}
	}
}

/* The model's and lib/cp's figures are sums of pieces of n = b x t tokens
 * (and of t alone) in size_t, each linear in n and rounded up to 64 bytes,
 * so the figure at (b, t) is at most b times the figure at (1, t); and at
 * (1, t) with t within the trainer's limit every registered flavor's figure
 * is far from 2^64.  A micro-batch whose b x figure(1, t) passes INT64_MAX is
 * refused here, before those unchecked sums could wrap. */
static int check_tokens(plan_ctx *x, titan_err *e)
{
	int H = model_head_unit(x->local), t = (int)cp_local_len(&x->cpl);
	uint64_t one = planner_add(x, planner_add(x, model_mb_bytes(x->local, 0, H, 1, t),
				   model_scratch_bytes(x->local, 1, t)),
			   model_wgrad_bytes(x->local, 0, H, 1, t));
	if (x->d.cp > 1) {
		be_attn s = attn_call(x);
		s.b = 1;
		one = planner_add(x, one, cp_attn_bytes(&x->cpl, x->rotate, &s));
	}
	planner_mul(x, one, (uint64_t)x->r->microbatch);
	if (x->overflow)
		return err_set(e, "planner: a micro-batch of %lld sequences of %lld tokens (%lld "
			       "a rank) needs more than 2^63 bytes of activations on a rank",
			       (long long)x->r->microbatch, (long long)x->r->seq_len, (long long)t);
	return 0;
}

int planner_roles(plan_ctx *x, titan_err *e)
{
	plan_report *rep = x->r;
	if (check_tokens(x, e))
		return -1;
	rep->n_roles = x->d.pp;
	if ((rep->roles = calloc((size_t)rep->n_roles, sizeof *rep->roles)) == NULL)
		return err_set(e, "planner: out of memory");
	rep->fits = 1;
	for (int r = 0; r < rep->n_roles; r++) {
		plan_role *ro = &rep->roles[r];
		stages s;
		role_stages(x, r, &s);
		ro->pp_rank = r;
		ro->n_ranks = rep->world_size / x->d.pp;
		ro->n_stages = s.n;
		for (int k = 0; k < s.n && k < 8; k++) {
			ro->stage[k] = s.id[k];
			ro->unit0[k] = s.u0[k];
			ro->unit1[k] = s.u1[k];
		}
		uint64_t msg_extra;
		if (state_bytes(x, r, &s, ro, e) || activation_bytes(x, r, &s, ro, &msg_extra, e))
			return -1;
		buffer_bytes(x, msg_extra, ro);
		traffic(x, r, &s, ro);
		for (int i = 0; i < PLAN_TERM_COUNT; i++)
			ro->peak = planner_add(x, ro->peak, ro->bytes[i]);
		if (x->overflow)
			return err_set(e, "planner: pipeline rank %d's bytes or traffic per step pass "
				       "2^63 (local_batch_size %lld, seq_len %lld, %lld micro-batches "
				       "of %lld)", r, (long long)rep->local_batch,
				       (long long)rep->seq_len, (long long)rep->n_mb,
				       (long long)rep->microbatch);
		if (ro->peak > rep->device_bytes)
			rep->fits = 0;
	}
	return 0;
}
