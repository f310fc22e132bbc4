/* The planner for Flux (torchtitan 0.3.0's FluxTrainer, models/flux):
 * parallelize_flux and parallelize_encoders as they place memory.
 *
 *   model     fully_shard per double and single block, final_layer
 *             (reshard_after_forward False) and the root (the embedders);
 *             FSDP2's dim-0 shards over dp_shard ranks, rows padded up; the
 *             sharded parameters, gradients and AdamW's two states float32;
 *             with dp_shard > 1 MixedPrecisionPolicy(param bfloat16, reduce
 *             float32): the unit computing and the one prefetched gathered in
 *             bfloat16, the root and final_layer gathered throughout, one
 *             unit's unsharded float32 gradients before its reduce-scatter.
 *             With one rank there is no FSDP: everything float32.
 *   encoders  frozen, cast to bfloat16 under FSDP (load_ae's .to(dtype), the
 *             embedders' likewise): T5 fully_shard per block and whole (its
 *             shard, two blocks gathered while it encodes), CLIP and the
 *             autoencoder whole on every rank.
 *   activations  full activation checkpointing per block: each block's
 *             input kept through the forward (the double blocks' img and txt,
 *             the single blocks' joined stream: L x h a block), and one
 *             block's own tensors while it is recomputed and differentiated;
 *             the embedders' saved inputs (the T5 states into txt_in, the
 *             packed latents), final_layer's and the loss's float32 tensors.
 *             A block's tensors, counted from 0.3.0's layers.py in units of
 *             (tokens x hidden) at the compute dtype: a double block 31 (the
 *             norms and modulations 4, qkv 3, q/k norms 2, the joined q k v
 *             3, RoPE's float32 copies 4 and outputs 2, attention 1,
 *             projection and residual 2, the MLP's 4h twice and its output
 *             1, residual 1, the rest), a single block 29 (norm 2, linear1
 *             7, q/k norms 2, RoPE 6, attention 1, GELU 4, the concatenation
 *             5, linear2 and residual 2), plus BLOCK_BACKWARD_TH of
 *             gradients in flight while it runs backward.  Flash attention's
 *             memory is linear in L (no L x L scores).
 *   context parallelism  0.3.0's default (spmd_types) keeps the parameters
 *             replicated over cp and cuts each sample's image and text tokens
 *             into cp shares: the activations a rank's share, plus one
 *             attention's keys and values gathered from every rank and their
 *             gradients.  HSDP's replicas change nothing a rank holds.
 * Peak: the model's terms and the training activations at the first
 * backward (everything alive at once), the frozen encoders beside them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

#define DOUBLE_BLOCK_TH 31
#define SINGLE_BLOCK_TH 29
#define BLOCK_BACKWARD_TH 8

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

/* The unit a parameter belongs to: 0 root, 1 + k double block k, 1 + depth
 * + k single block k, 1 + depth + single final_layer. */
static int unit_of(const flux_config *c, const char *name)
{
	if (strncmp(name, "double_blocks.", 14) == 0)
		return 1 + atoi(name + 14);
	if (strncmp(name, "single_blocks.", 14) == 0)
		return 1 + (int)c->depth + atoi(name + 14);
	if (strncmp(name, "final_layer.", 12) == 0)
		return 1 + (int)(c->depth + c->depth_single_blocks);
	return 0;
}

static int64_t t5_params(const t5_config *c)
{
	int64_t inner = c->n_heads * c->d_kv, d = c->d_model;
	return c->vocab * d + c->n_buckets * c->n_heads + d +
	       c->n_layers * (4 * d * inner + 3 * d * c->d_ff + 2 * d);
}

static int64_t t5_block_params(const t5_config *c)
{
	return 4 * c->d_model * c->n_heads * c->d_kv + 3 * c->d_model * c->d_ff + 2 * c->d_model;
}

static int64_t clip_params(const clip_config *c)
{
	int64_t h = c->hidden;
	return c->vocab * h + c->max_pos * h + 2 * h +
	       c->n_layers * (4 * (h * h + h) + 4 * h + 2 * h * c->intermediate + c->intermediate + h);
}

/* conv k x k, cin -> cout, biased */
static int64_t conv(int64_t cin, int64_t cout, int64_t k)
{
	return cin * cout * k * k + cout;
}

static int64_t resnet(int64_t cin, int64_t cout)
{
	return 2 * cin + conv(cin, cout, 3) + 2 * cout + conv(cout, cout, 3) +
	       (cin != cout ? conv(cin, cout, 1) : 0);
}

static int64_t ae_params(const flux_ae_config *c)
{
	int64_t ch = c->ch, L = c->n_levels, n = conv(c->in_channels, ch, 3), in = ch;
	for (int64_t i = 0; i < L; i++) { /* encoder */
		int64_t out = ch * c->ch_mult[i];
		for (int64_t b = 0; b < c->num_res_blocks; b++, in = out)
			n += resnet(in, out);
		if (i != L - 1)
			n += conv(out, out, 3);
	}
	int64_t top = ch * c->ch_mult[L - 1];
	int64_t mid = 2 * resnet(top, top) + 2 * top + 4 * conv(top, top, 1);
	n += mid + 2 * top + conv(top, 2 * c->z_channels, 3);
	n += conv(c->z_channels, top, 3) + mid; /* decoder */
	in = top;
	for (int64_t i = L - 1; i >= 0; i--) {
		int64_t out = ch * c->ch_mult[i];
		for (int64_t b = 0; b <= c->num_res_blocks; b++, in = out)
			n += resnet(in, out);
		if (i != 0)
			n += conv(out, out, 3);
	}
	return n + 2 * ch + conv(ch, c->out_ch, 3);
}

void planner_flux_defaults(plan_flux_job *j, const flux_config *model)
{
	*j = (plan_flux_job){.model = model, .dp_shard = 1, .dp_replicate = 1, .cp = 1,
			     .local_batch = 32, .img_size = 256,
			     .t5_len = 512, .clip_len = 77, .ac_full = 1};
	/* google/t5-v1_1-xxl's encoder and openai/clip-vit-large-patch14's text model */
	j->t5 = (t5_config){.vocab = 32128, .d_model = 4096, .d_kv = 64, .n_heads = 64,
			    .d_ff = 10240, .n_layers = 24, .n_buckets = 32, .max_distance = 128,
			    .eps = 1e-6f};
	j->clip = (clip_config){.vocab = 49408, .hidden = 768, .intermediate = 3072,
				.n_heads = 12, .n_layers = 12, .max_pos = 77, .eps = 1e-5f,
				.eos_id = 2};
	flux_ae_config_default(&j->ae);
}

/* The model's sharded terms and the gathered units. */
static int model_terms(const plan_flux_job *j, plan_flux_report *r, int mixed, titan_err *e)
{
	int np;
	flux_param *table = flux_param_table(j->model, &np, e);
	if (table == NULL)
		return -1;
	const flux_config *c = j->model;
	int n_units = 2 + (int)(c->depth + c->depth_single_blocks);
	uint64_t *unit = calloc((size_t)n_units, sizeof *unit); /* elements per unit */
	if (unit == NULL) {
		free(table);
		return err_set(e, "planner: out of memory");
	}
	uint64_t shard = 0, N = (uint64_t)j->dp_shard;
	for (int i = 0; i < np; i++) {
		const flux_param *p = &table[i];
		uint64_t rows = (uint64_t)p->shape[0], cols = p->ndim == 2 ? (uint64_t)p->shape[1] : 1;
		shard += ceil_div(rows, N) * cols;
		unit[unit_of(c, p->name)] += (uint64_t)p->numel;
		r->n_params += p->numel;
	}
	r->bytes[PLAN_PARAMS] = 4 * shard;
	r->bytes[PLAN_GRADS] = 4 * shard;
	r->bytes[PLAN_OPTIMIZER] = 8 * shard;
	if (mixed) {
		uint64_t big = 0, next = 0;
		for (int u = 1; u < n_units - 1; u++)
			if (unit[u] >= big) {
				next = big;
				big = unit[u];
			} else if (unit[u] > next) {
				next = unit[u];
			}
		/* bf16 copies: root, final_layer, the unit computing and the prefetched one;
		 * float32: one unit's unsharded gradients */
		r->bytes[PLAN_GATHERED] = 2 * (unit[0] + unit[n_units - 1] + big + next) + 4 * big;
	}
	free(unit);
	free(table);
	return 0;
}

static void activations(const plan_flux_job *j, plan_flux_report *r, uint64_t act)
{
	const flux_config *c = j->model;
	uint64_t B = (uint64_t)j->local_batch, h = (uint64_t)c->hidden_size;
	uint64_t L = (uint64_t)(r->img_tokens + r->txt_tokens), cp = (uint64_t)j->cp;
	uint64_t blocks = (uint64_t)(c->depth + c->depth_single_blocks);
	uint64_t worst = c->depth_single_blocks > 0 && SINGLE_BLOCK_TH > DOUBLE_BLOCK_TH
				 ? SINGLE_BLOCK_TH : DOUBLE_BLOCK_TH;
	/* (tokens x hidden) units: with full AC the blocks' inputs and one
	 * block's tensors; without, every block's tensors */
	uint64_t th = j->ac_full ? blocks + worst + BLOCK_BACKWARD_TH
				 : (uint64_t)c->depth * DOUBLE_BLOCK_TH +
					   (uint64_t)c->depth_single_blocks * SINGLE_BLOCK_TH +
					   BLOCK_BACKWARD_TH;
	/* context parallelism: a rank's share of the tokens, and one attention's
	 * keys and values gathered from the others with their gradients (4 x
	 * the whole sequence) */
	uint64_t tokens = B * L / cp, gathered = cp > 1 ? 4 * B * L : 0;
	/* the embedders' saved inputs: T5's states into txt_in, the packed latents */
	uint64_t inputs = B * ((uint64_t)r->txt_tokens * (uint64_t)c->context_in_dim +
			       (uint64_t)r->img_tokens * (uint64_t)c->in_channels) / cp;
	/* final_layer (norm, modulation: 2 x Li x h) and the loss's pred, target,
	 * latents, noise in float32 */
	uint64_t tail = B * (uint64_t)r->img_tokens / cp *
			(2 * h * act + 4 * 4 * (uint64_t)c->out_channels);
	r->bytes[PLAN_ACTIVATIONS] = (tokens * th + gathered) * h * act + inputs * act + tail;
}

static void encoders(const plan_flux_job *j, plan_flux_report *r, int mixed)
{
	uint64_t w = mixed ? 2 : 4, N = (uint64_t)j->dp_shard;
	r->n_t5 = t5_params(&j->t5);
	r->n_clip = clip_params(&j->clip);
	r->n_ae = ae_params(&j->ae);
	uint64_t t5_block = (uint64_t)t5_block_params(&j->t5);
	/* T5 sharded (two blocks gathered while encoding) only under FSDP */
	uint64_t t5 = N > 1 ? ceil_div((uint64_t)r->n_t5, N) + 2 * t5_block : (uint64_t)r->n_t5;
	r->encoders = w * (t5 + (uint64_t)r->n_clip + (uint64_t)r->n_ae);
}

int planner_flux_run(const plan_flux_job *j, plan_flux_report *r, titan_err *e)
{
	memset(r, 0, sizeof *r);
	if (j->model == NULL || j->dp_shard < 1 || j->dp_replicate < 1 || j->cp < 1 ||
	    j->local_batch < 1 || j->t5_len < 1)
		return err_set(e, "planner: flux: a model, dp_shard, dp_replicate, cp, "
				  "local_batch_size and max_t5_encoding_len are needed");
	int64_t f = (int64_t)1 << (j->ae.n_levels - 1);
	if (j->img_size % (2 * f) != 0)
		return err_set(e, "planner: flux: img_size %lld is not a multiple of %lld (the "
				  "autoencoder's %lldx and the 2x2 patches)",
			       (long long)j->img_size, (long long)(2 * f), (long long)f);
	int mixed = j->dp_shard > 1;
	snprintf(r->model, sizeof r->model, "%s", j->model->name ? j->model->name : "flux");
	r->job = *j;
	r->img_tokens = (j->img_size / f / 2) * (j->img_size / f / 2);
	r->txt_tokens = j->t5_len;
	if (r->img_tokens % j->cp != 0 || r->txt_tokens % j->cp != 0)
		return err_set(e, "planner: flux: context parallel %d: the %lld image and %lld text "
				  "tokens do not divide into %d equal shares", j->cp,
			       (long long)r->img_tokens, (long long)r->txt_tokens, j->cp);
	if (model_terms(j, r, mixed, e) != 0)
		return -1;
	activations(j, r, mixed ? 2 : 4);
	encoders(j, r, mixed);
	snprintf(r->dtypes, sizeof r->dtypes, "%s", mixed
		 ? "params float32, compute bfloat16, reduce float32; encoders bfloat16"
		 : "float32 throughout (one rank: no FSDP, no mixed precision)");
	for (int t = 0; t < PLAN_TERM_COUNT; t++)
		r->peak += r->bytes[t];
	r->peak += r->encoders;
	r->fits = j->device_bytes == 0 || r->peak <= j->device_bytes;
	return 0;
}

static double gib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0 * 1024.0);
}

int planner_flux_print(const plan_flux_report *r, FILE *f)
{
	const plan_flux_job *j = &r->job;
	fprintf(f, "plan: %s (%lld parameters) on %d ranks: FSDP over %d", r->model,
		(long long)r->n_params, j->dp_shard * j->dp_replicate * j->cp, j->dp_shard);
	if (j->dp_replicate > 1)
		fprintf(f, ", %d replicas (HSDP)", j->dp_replicate);
	if (j->cp > 1) /* 0.3.0's spmd_types: the parameters replicated over cp */
		fprintf(f, ", context parallel %d (the tokens cut in %d)", j->cp, j->cp);
	fputc('\n', f);
	fprintf(f, "batch: local %lld images of %lld px (%lld latent tokens) + %lld T5 tokens; "
		"AC %s; %s\n", (long long)j->local_batch, (long long)j->img_size,
		(long long)r->img_tokens, (long long)r->txt_tokens, j->ac_full ? "full" : "none",
		r->dtypes);
	fprintf(f, "frozen: T5 %lld, CLIP %lld, autoencoder %lld parameters\n", (long long)r->n_t5,
		(long long)r->n_clip, (long long)r->n_ae);
	fprintf(f, "memory per rank in GiB, against %.2f GiB:\n", gib(j->device_bytes));
	fprintf(f, "%8s %8s %9s %8s %11s %8s %8s %s\n", "params", "grads", "optimizer", "gathered",
		"activations", "encoders", "peak", "fits");
	fprintf(f, "%8.2f %8.2f %9.2f %8.2f %11.2f %8.2f %8.2f %s\n", gib(r->bytes[PLAN_PARAMS]),
		gib(r->bytes[PLAN_GRADS]), gib(r->bytes[PLAN_OPTIMIZER]),
		gib(r->bytes[PLAN_GATHERED]), gib(r->bytes[PLAN_ACTIVATIONS]), gib(r->encoders),
		gib(r->peak), r->fits ? "yes" : "NO");
	fprintf(f, "%s\n", r->fits ? "fits" : "does NOT fit");
	return ferror(f) ? -1 : 0;
}
