/* Micro-batch contexts, the model's scratch, the embedding and head units, and
 * the runner that drives units with a plan's hooks.  The output projection and
 * the cross-entropy run over chunks of tokens, so the logits of a whole
 * micro-batch never exist at once. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "model/model_priv.h"

size_t model_act_bytes(const model *m, int l, int i, size_t n)
{
	size_t d = (size_t)m->args.dim, ns = (size_t)model_seq(m, (int64_t)n);
	switch (i) {
	case ACT_XN1: case ACT_XN2: return n * d * be_dtype_size(m->prec.act); /* gathered */
	case ACT_XM: return ns * d * be_dtype_size(m->prec.resid);
	case ACT_RSTD1: case ACT_RSTD2: return ns * sizeof(float);
	}
	return model_attn_act_bytes(m, l, i, n) + model_ffn_act_bytes(m, l, i, n);
}

act_set model_layer_keep(const model *m, int l)
{
	if (l >= m->args.n_layers) /* an MTP depth's: 0.3.0's checkpointing wraps layers only */
		return ACT_ALL;
	switch (m->ac) {
	case MODEL_AC_NONE: return ACT_ALL;
	case MODEL_AC_FULL: return 0;
	case MODEL_AC_SELECTIVE: return (l + 1) % m->ac_every == 0 ? 0 : ACT_ALL;
	case MODEL_AC_OP: return ACT_OP_KEEP;
	}
	return ACT_ALL;
}

/* Rows of logits at a time: the same on every tp rank (their collectives
 * pair up chunk by chunk), from the largest rank's share of the vocabulary. */
static int logits_chunk(const model *m, size_t n)
{
	if (m->seq_chunks > 1 && n % (size_t)m->seq_chunks == 0)
		return (int)(n / (size_t)m->seq_chunks);
	if (model_f8_head_whole(m))
		return (int)n;
	if (m->loss_rows > 0)
		return (int)((size_t)m->loss_rows < n ? (size_t)m->loss_rows : n);
	size_t v = (size_t)((m->vocab_global + m->tp.size - 1) / m->tp.size);
	size_t c = ((size_t)1 << 24) / (v ? v : 1); /* 64 MiB of float32 logits */
	c = c < 256 ? 256 : c;
	return (int)(c < n ? c : n);
}

int64_t model_loss_rows(const model *m, int64_t n)
{
	return logits_chunk(m, (size_t)n);
}

void model_set_loss_rows(model *m, int64_t rows)
{
	m->loss_rows = rows > 0 ? rows : 0;
	model_scratch_release(m); /* the next micro-batch lays the scratch out again */
}

int model_set_seq_chunks(model *m, int k, titan_err *e)
{
	if (k > 1 && m->tp.size > 1)
		return err_set(e, "model: the loss's sequence chunks under tensor parallelism are "
			       "not built");
	m->seq_chunks = k > 1 ? k : 0;
	model_scratch_release(m);
	return 0;
}

size_t model_loss_bytes(const model *m, int b, int t)
{
	return (size_t)logits_chunk(m, (size_t)b * t) * (size_t)m->args.vocab_size *
	       be_dtype_size(m->prec.act);
}

/* Round each piece of one allocation up to 64 bytes (vector loads). */
static size_t al(size_t bytes)
{
	return (bytes + 63) & ~(size_t)63;
}

/* The scratch's pieces for n tokens of (b, t), in the order model_scratch_prepare
 * lays them out; writes their sizes to sz (when not NULL) and returns the total. */
enum { SC_ROPE, SC_LOGITS, SC_DX, SC_DTMP, SC_DXN, SC_DYA, SC_DQ, SC_DATT, SC_DK, SC_DV,
       SC_DKR, SC_DH, SC_DA, SC_DG, SC_RLOGITS, SC_DRW, SC_DROWS, SC_DEH, SC_DEA, SC_DEG,
       SC_TEMP, SC_ONES, SC_JUNK, SC_KVB, SC_LAT0, SC_LAT1, SC_LAT2, SC_PE, SC_KPE, SC_QA0,
       SC_QA1, SC_TP_FULL, SC_TP_XS, SC_TP_RING, SC_TP_CE, SC_TP_LG, SC_QKV, SC_SINKS,
       SC_LORA0, SC_LORA1, SC_SEQX, SC_SEQDX, SC_SEQLAB,
       SC_COUNT };

/* What some layer's attention needs: OR of a layer_kind field over the layers. */
static int any_layer(const model *m, size_t field)
{
	for (int l = 0; l < m->args.n_layers; l++)
		if (*(const int *)((const char *)&m->kind[l] + field))
			return 1;
	return 0;
}

static size_t scratch_layout(const model *m, int b, int t, size_t sz[SC_COUNT + ACT_COUNT])
{
	size_t n = (size_t)b * t, d = (size_t)m->args.dim, ns = (size_t)model_seq(m, (int64_t)n);
	size_t hq = (size_t)m->args.n_heads * m->head_dim;
	size_t hk = (size_t)m->args.n_kv_heads * m->head_dim, f = (size_t)m->ffn_max;
	size_t a = be_dtype_size(m->prec.act), r = be_dtype_size(m->prec.resid);
	size_t p[SC_COUNT + ACT_COUNT] = {0};
	p[SC_ROPE] = (size_t)t * m->rope_dim * sizeof(float);
	if (any_layer(m, offsetof(layer_kind, temperature)))
		p[SC_TEMP] = (size_t)t * m->head_dim * sizeof(float);
	if (any_layer(m, offsetof(layer_kind, qk_l2))) {
		p[SC_ONES] = (size_t)m->head_dim * be_dtype_size(m->prec.param);
		p[SC_JUNK] = (size_t)m->head_dim * be_dtype_size(m->prec.grad);
	}
	const mla_args *ml = &m->args.mla;
	if (ml->kv_lora_rank > 0) {
		size_t h = (size_t)m->args.n_heads, rope = (size_t)ml->qk_rope_head_dim;
		p[SC_KVB] = n * h * (size_t)(ml->qk_nope_head_dim + ml->v_head_dim) * a;
		p[SC_LAT0] = p[SC_LAT1] = p[SC_LAT2] = n * (ml->kv_lora_rank + rope) * a;
		p[SC_PE] = n * h * rope * a;
		p[SC_KPE] = n * rope * a;
		p[SC_QA0] = p[SC_QA1] = n * (size_t)ml->q_lora_rank * a;
	}
	if (m->args.attn_sinks && (m->prec.param != BE_F32 || m->prec.grad != BE_F32))
		p[SC_SINKS] = 2 * (size_t)m->args.n_heads * sizeof(float); /* float32 sinks, grads */
	p[SC_LOGITS] = model_loss_bytes(m, b, t);
	p[SC_DX] = p[SC_DTMP] = ns * d * r; /* the stream's gradient: the rank's rows */
	p[SC_DXN] = n * d * a;
	p[SC_DYA] = m->prec.act == m->prec.resid ? 0 : ns * d * a;
	model_tp_scratch(m, n, (size_t)logits_chunk(m, n), p + SC_TP_FULL);
	p[SC_DQ] = p[SC_DATT] = n * hq * a;
	p[SC_DK] = p[SC_DV] = n * hk * a;
	p[SC_DKR] = m->args.qk_norm || any_layer(m, offsetof(layer_kind, qk_l2)) ? n * hk * a : 0;
	p[SC_DH] = p[SC_DA] = p[SC_DG] = n * f * a;
	p[SC_QKV] = m->fuse & MODEL_FUSE_BLOCKS ? n * (hq + 2 * hk) * a : 0;
	p[SC_LORA0] = p[SC_LORA1] = n * (size_t)m->args.lora_rank * a;
	if (m->seq_chunks > 1 && t % m->seq_chunks == 0) {
		size_t rows = n / (size_t)m->seq_chunks;
		p[SC_SEQX] = p[SC_SEQDX] = rows * d * a;
		p[SC_SEQLAB] = rows * sizeof(int32_t);
	}
	if (m->n_moe) {
		size_t rows = n * (size_t)m->args.moe.top_k, in = (size_t)m->args.moe.inter_dim;
		p[SC_RLOGITS] = n * (size_t)m->args.moe.experts * a;
		p[SC_DRW] = rows * sizeof(float);
		p[SC_DROWS] = rows * d * a;
		p[SC_DEH] = p[SC_DEA] = p[SC_DEG] = rows * in * a;
		if (m->args.moe.swiglu_limit > 0) /* GPT-OSS: mlp1's gate and up side by side */
			p[SC_DEA] = 2 * rows * in * a, p[SC_DEG] = 0;
	}
	/* one set of recomputed activations, as large as the largest layer's */
	for (int l = 0; l < m->args.n_layers; l++) {
		act_set recomputed = ~model_layer_keep(m, l) & ACT_ALL;
		for (int i = 0; i < ACT_COUNT; i++) {
			size_t b = model_act_bytes(m, l, i, n);
			if ((recomputed & ACT_BIT(i)) && b > p[SC_COUNT + i])
				p[SC_COUNT + i] = b;
		}
	}
	size_t total = 0;
	for (int i = 0; i < SC_COUNT + ACT_COUNT; i++)
		total += al(p[i]);
	if (sz)
		memcpy(sz, p, sizeof p);
	return total;
}

size_t model_scratch_bytes(const model *m, int b, int t)
{
	return scratch_layout(m, b, t, NULL);
}

void model_scratch_release(model *m)
{
	m->be->ops->free(m->be, m->scratch);
	m->scratch = NULL;
	m->sb = m->st = 0;
}

/* The RoPE table of the tokens' positions (0..t-1, or those
 * model_set_positions set); Llama 4's temperatures of the same positions as
 * (scale, 0) pairs, which the rope op applies as a scaling (HF's attn_scales =
 * ln(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1); the weightless
 * norm's ones. */
static int upload_tables(model *m, int t, titan_err *e)
{
	if (m->pos != NULL && m->n_pos != t)
		return err_set(e, "model: %d positions set for micro-batches of %d tokens",
			       m->n_pos, t);
	size_t n = (size_t)t * (size_t)m->rope_dim, nt = (size_t)t * (size_t)m->head_dim;
	size_t most = n > nt ? n : nt;
	double *cs = malloc(most * sizeof(double)); /* (t, hd/2, 2) */
	float *csf = malloc(most * sizeof(float));
	if (!cs || !csf) {
		free(cs);
		free(csf);
		return err_set(e, "model: out of memory");
	}
	flavor_rope_table(&m->args, cs, t, m->rope_dim, 0, m->pos);
	for (size_t i = 0; i < n; i++)
		csf[i] = (float)cs[i];
	m->be->ops->copy(m->be, m->rope_cs, csf, n * sizeof(float), BACKEND_H2D);
	if (m->temp_cs) {
		const llama_args *a = &m->args;
		for (size_t i = 0; i < nt; i += 2) {
			size_t ti = i / (size_t)m->head_dim;
			int64_t pos = m->pos ? m->pos[ti] : (int64_t)ti;
			double fl = floor((double)(pos + 1) / a->attn_temp_floor);
			csf[i] = (float)(log(fl + 1) * a->attn_temp_scale + 1);
			csf[i + 1] = 0;
		}
		m->be->ops->copy(m->be, m->temp_cs, csf, nt * sizeof(float), BACKEND_H2D);
	}
	if (m->ones) {
		size_t es = be_dtype_size(m->prec.param);
		unsigned char one[4];
		float f1 = 1.0f;
		uint16_t b1 = bf16_from_f32(1.0f);
		memcpy(one, m->prec.param == BE_BF16 ? (const void *)&b1 : (const void *)&f1, es);
		for (int i = 0; i < m->head_dim; i++)
			memcpy((char *)csf + (size_t)i * es, one, es);
		m->be->ops->copy(m->be, m->ones, csf, (size_t)m->head_dim * es, BACKEND_H2D);
	}
	free(cs);
	free(csf);
	return 0;
}

int model_set_positions(model *m, const int64_t *pos, int t, titan_err *e)
{
	int64_t *copy = NULL;
	if (pos != NULL) {
		if (t < 1 || !(copy = malloc((size_t)t * sizeof *copy)))
			return err_set(e, "model: positions for %d tokens", t);
		memcpy(copy, pos, (size_t)t * sizeof *copy);
	}
	free(m->pos);
	m->pos = copy;
	m->n_pos = pos ? t : 0;
	/* the table in the scratch follows at once, or at the next layout */
	if (m->scratch && (pos == NULL || m->st == t))
		return upload_tables(m, m->st, e);
	model_scratch_release(m);
	return 0;
}

void model_set_attention(model *m, const model_attention *a)
{
	m->attn = a ? *a : (model_attention){0};
}

int model_scratch_prepare(model *m, int b, int t, titan_err *e)
{
	if (m->scratch && m->sb == b && m->st == t)
		return 0;
	model_scratch_release(m);
	size_t sz[SC_COUNT + ACT_COUNT];
	size_t total = scratch_layout(m, b, t, sz);
	if (!(m->scratch = m->be->ops->alloc(m->be, total, e)))
		return err_prefix(e, "model scratch for batch %d x seq %d", b, t);
	void *p[SC_COUNT + ACT_COUNT];
	char *c = m->scratch;
	for (int i = 0; i < SC_COUNT + ACT_COUNT; i++) {
		p[i] = sz[i] ? c : NULL;
		c += al(sz[i]);
	}
	m->rope_cs = p[SC_ROPE];
	m->logits = p[SC_LOGITS];
	m->chunk = logits_chunk(m, (size_t)b * t);
	m->d_x = p[SC_DX], m->d_tmp = p[SC_DTMP], m->d_xn = p[SC_DXN];
	m->d_ya = p[SC_DYA] ? p[SC_DYA] : m->d_x;
	m->d_q = p[SC_DQ], m->d_att = p[SC_DATT], m->d_k = p[SC_DK], m->d_v = p[SC_DV];
	m->d_kr = p[SC_DKR];
	m->d_h = p[SC_DH], m->d_a = p[SC_DA], m->d_g = p[SC_DG];
	m->rlogits = p[SC_RLOGITS], m->d_rw = p[SC_DRW], m->d_rows = p[SC_DROWS];
	m->d_eh = p[SC_DEH], m->d_ea = p[SC_DEA], m->d_eg = p[SC_DEG];
	m->temp_cs = p[SC_TEMP], m->ones = p[SC_ONES], m->junk_dw = p[SC_JUNK];
	m->d_kvb = p[SC_KVB], m->d_pe = p[SC_PE], m->d_kpe = p[SC_KPE];
	m->d_lat[0] = p[SC_LAT0], m->d_lat[1] = p[SC_LAT1], m->d_lat[2] = p[SC_LAT2];
	m->d_qa[0] = p[SC_QA0], m->d_qa[1] = p[SC_QA1];
	m->d_full = p[SC_TP_FULL], m->d_xs = p[SC_TP_XS], m->ring = p[SC_TP_RING];
	m->ce_stats = p[SC_TP_CE], m->lg_full = p[SC_TP_LG];
	m->qkv = p[SC_QKV];
	m->lora[0] = p[SC_LORA0], m->lora[1] = p[SC_LORA1];
	m->seq_x = p[SC_SEQX], m->seq_dx = p[SC_SEQDX], m->seq_lab = p[SC_SEQLAB];
	m->sinks32 = p[SC_SINKS];
	for (int i = 0; i < ACT_COUNT; i++)
		m->recomp[i] = p[SC_COUNT + i];
	m->sb = b;
	m->st = t;
	return upload_tables(m, t, e);
}

/* ---- micro-batch contexts ---- */

static int is_block(const model *m, int u)
{
	return u >= 1 && u <= m->args.n_layers;
}

/* The bytes of an mb's one allocation: ids, labels, hidden states, kept
 * activations of its blocks, the head's norm output. */
static size_t mb_layout(const model *m, int u0, int u1, int b, int t)
{
	size_t n = (size_t)b * t, d = (size_t)m->args.dim, ns = (size_t)model_seq(m, (int64_t)n);
	int head = m->n_units - 1;
	size_t total = al(n * sizeof(int32_t)) * ((u0 == 0) + (u1 == head)) +
		       (u1 == head ? al(sizeof(float)) : 0);
	for (int u = u0; u <= u1 + 1; u++)
		if (u > 0 && u <= head)
			total += al(ns * d * be_dtype_size(m->prec.resid));
	for (int u = u0; u <= u1; u++) {
		if (!is_block(m, u))
			continue;
		act_set k = model_layer_keep(m, u - 1);
		for (int i = 0; i < ACT_COUNT; i++)
			if (k & ACT_BIT(i))
				total += al(model_act_bytes(m, u - 1, i, n));
	}
	if (u1 == head) /* the final norm's output gathered, its rstd the rank's rows */
		total += al(n * d * be_dtype_size(m->prec.act)) + al(ns * sizeof(float));
	if (u0 == 0 && u1 == head) /* the MTP depths' (their own allocations) */
		total += model_mtp_mb_bytes(m, b, t);
	return total;
}

size_t model_mb_bytes(const model *m, int u0, int u1, int b, int t)
{
	return mb_layout(m, u0, u1, b, t);
}

size_t model_activation_bytes(const model *m, int b, int t)
{
	return mb_layout(m, 0, m->n_units - 1, b, t) + scratch_layout(m, b, t, NULL);
}

void model_mb_free(model_mb *mb)
{
	if (!mb)
		return;
	for (int u = mb->u0; u <= mb->u1; u++)
		model_block_drop_jobs(mb->m, &mb->acts[u - mb->u0]);
	model_mtp_mb_free(mb);
	mb->m->be->ops->free(mb->m->be, mb->mem);
	mb->m->be->ops->free(mb->m->be, mb->doc);
	mb->m->be->ops->free(mb->m->be, mb->doc_cs);
	free(mb->doc_host);
	free(mb->hidden);
	free(mb->acts);
	free(mb);
}

model_mb *model_mb_create(model *m, int u0, int u1, int b, int t, titan_err *e)
{
	int head = m->n_units - 1;
	if (u0 < 0 || u1 > head || u0 > u1 || b <= 0 || t <= 0) {
		err_set(e, "model: micro-batch of units %d..%d, batch %d x seq %d: expected units "
			"within 0..%d and positive sizes", u0, u1, b, t, head);
		return NULL;
	}
	if (model_scratch_prepare(m, b, t, e))
		return NULL;
	model_mb *mb = calloc(1, sizeof *mb);
	/* the MTP depths' blocks have their acts after the head's (unused) one */
	int n_acts = u1 - u0 + 1 + (u1 == head ? m->args.mtp_layers : 0);
	if (!mb || !(mb->hidden = calloc((size_t)(u1 - u0 + 2), sizeof *mb->hidden)) ||
	    !(mb->acts = calloc((size_t)n_acts, sizeof *mb->acts))) {
		if (mb)
			free(mb->hidden);
		free(mb);
		err_set(e, "model: out of memory");
		return NULL;
	}
	mb->m = m, mb->u0 = u0, mb->u1 = u1, mb->b = b, mb->t = t;
	if (!(mb->mem = m->be->ops->alloc(m->be, mb_layout(m, u0, u1, b, t), e))) {
		err_prefix(e, "activations for batch %d x seq %d", b, t);
		model_mb_free(mb);
		return NULL;
	}
	size_t n = (size_t)b * t, d = (size_t)m->args.dim, ns = (size_t)model_seq(m, (int64_t)n);
	char *c = mb->mem;
	if (u0 == 0)
		mb->ids = (int32_t *)c, c += al(n * sizeof(int32_t));
	if (u1 == head) {
		mb->labels = (int32_t *)c, c += al(n * sizeof(int32_t));
		mb->gscale = (float *)c, c += al(sizeof(float));
	}
	for (int u = u0; u <= u1 + 1; u++)
		if (u > 0 && u <= head)
			mb->hidden[u - u0] = c, c += al(ns * d * be_dtype_size(m->prec.resid));
	for (int u = u0; u <= u1; u++) {
		if (!is_block(m, u))
			continue;
		layer_act *a = &mb->acts[u - u0];
		a->keep = model_layer_keep(m, u - 1);
		for (int i = 0; i < ACT_COUNT; i++) {
			size_t bytes = model_act_bytes(m, u - 1, i, n);
			if ((a->keep & ACT_BIT(i)) && bytes)
				a->kept[i] = c, c += al(bytes);
		}
	}
	if (u1 == head) {
		mb->xf = c, c += al(n * d * be_dtype_size(m->prec.act));
		mb->rstdf = (float *)c;
	}
	if (m->args.mtp_layers > 0 && model_mtp_mb_create(mb, e)) {
		model_mb_free(mb);
		return NULL;
	}
	return mb;
}

static int check_ids(const int32_t *ids, int64_t n, int64_t v, int labels, titan_err *e)
{
	for (int64_t i = 0; i < n; i++) {
		if (labels && ids[i] == MODEL_IGNORE_INDEX)
			continue;
		if (ids[i] < 0 || ids[i] >= v)
			return labels ? err_set(e, "model: label %d at %lld outside the vocabulary "
						"(%lld) and not %d", ids[i], (long long)i,
						(long long)v, MODEL_IGNORE_INDEX)
				      : err_set(e, "model: input token %d at %lld outside the "
						"vocabulary (%lld)", ids[i], (long long)i, (long long)v);
	}
	return 0;
}

int model_mb_set_tokens(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			int train, float grad_scale, float *logits_host, titan_err *e)
{
	model *m = mb->m;
	backend *be = m->be;
	int64_t n = (int64_t)mb->b * mb->t, v = m->vocab_global;
	if (n % m->tp.size)
		return err_set(e, "model: %lld tokens (batch %d x seq %d) do not divide among %d "
			       "tensor parallel ranks", (long long)n, mb->b, mb->t, m->tp.size);
	if (logits_host && m->tp.size > 1)
		return err_set(e, "model: logits to the host from one tensor parallel rank");
	if (mb->ids) {
		if (!inputs)
			return err_set(e, "model: the micro-batch starts at the embedding and has no "
				       "inputs");
		if (check_ids(inputs, n, v, 0, e))
			return -1;
		be->ops->copy(be, mb->ids, inputs, (size_t)n * sizeof(int32_t), BACKEND_H2D);
	}
	mb->has_labels = labels != NULL;
	if (mb->labels && labels) {
		if (check_ids(labels, n, v, 1, e))
			return -1;
		be->ops->copy(be, mb->labels, labels, (size_t)n * sizeof(int32_t), BACKEND_H2D);
	}
	if (train && mb->labels && !labels)
		return err_set(e, "model: training needs labels");
	if (logits_host && m->prec.act != BE_F32)
		return err_set(e, "model: logits to the host need float32 activations, not %s",
			       be_dtype_name(m->prec.act));
	mb->train = train;
	mb->grad_scale = grad_scale;
	if (mb->gscale && train) /* the fused head reads it there */
		be->ops->copy(be, mb->gscale, &mb->grad_scale, sizeof(float), BACKEND_H2D);
	mb->logits_host = logits_host;
	model_mb_clear_loss(mb);
	return mb->mtp && train ? model_mtp_set_tokens(mb, inputs, labels, e) : 0;
}

/* Every row starts a document at 0 and counts up by one until the next 0. */
static int check_positions(const int32_t *pos, int b, int64_t t, titan_err *e)
{
	for (int r = 0; r < b; r++)
		for (int64_t i = 0; i < t; i++) {
			int32_t p = pos[(size_t)r * t + i], prev = i ? pos[(size_t)r * t + i - 1] : -1;
			if (p != 0 && p != prev + 1)
				return err_set(e, "model: positions[%d][%lld] = %d after %d: a document's "
					       "positions count 0, 1, 2, ... from its start, and row %d "
					       "must start one", r, (long long)i, p, prev, r);
		}
	return 0;
}

/* A rank's share of rows of row_t tokens: positions in the rows. */
static int check_share(const int32_t *pos, size_t n, int64_t row_t, titan_err *e)
{
	for (size_t i = 0; i < n; i++)
		if (pos[i] < 0 || pos[i] >= row_t)
			return err_set(e, "model: position %d of a share of rows of %lld tokens",
				       pos[i], (long long)row_t);
	return 0;
}

/* The table is gathered from one of positions 0..row_t-1: a document's
 * positions in a row never reach its length.  The document starts stay on
 * the host too (doc_host), for attention that plans on the host. */
static int upload_docs(model_mb *mb, const int32_t *pos, const int32_t *rows, titan_err *e)
{
	model *m = mb->m;
	size_t n = (size_t)mb->b * (size_t)mb->t, rd = (size_t)m->rope_dim;
	size_t nd = (size_t)mb->b * (size_t)mb->doc_t;
	double *tab = malloc((size_t)mb->doc_t * rd * sizeof *tab);
	float *cs = malloc(n * rd * sizeof *cs);
	if (!tab || !cs) {
		free(tab), free(cs);
		return err_set(e, "model: out of memory for the documents' positions");
	}
	flavor_rope_table(&m->args, tab, mb->doc_t, (int64_t)rd, 0, NULL);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < rd; j++)
			cs[i * rd + j] = (float)tab[(size_t)pos[i] * rd + j];
	int32_t *doc = mb->doc_host;
	for (size_t i = 0; i < nd; i++)
		doc[i] = (int32_t)(i % (size_t)mb->doc_t) - rows[i];
	m->be->ops->copy(m->be, mb->doc, doc, nd * sizeof *doc, BACKEND_H2D);
	m->be->ops->copy(m->be, mb->doc_cs, cs, n * rd * sizeof *cs, BACKEND_H2D);
	free(tab), free(cs);
	return 0;
}

int model_mb_set_documents(model_mb *mb, const int32_t *pos, const int32_t *rows, int64_t row_t,
			   titan_err *e)
{
	model *m = mb->m;
	mb->docs = 0;
	if (pos == NULL)
		return mb->mtp ? model_mtp_set_positions(mb, NULL, e) : 0;
	if (rows == NULL && m->pos != NULL)
		return err_set(e, "model: per-document positions under context parallelism "
			       "come with the whole rows' (model_mb_set_documents)");
	if (m->args.attn_temp_floor > 0)
		return err_set(e, "model: per-document positions with Llama 4's attention "
			       "temperature are not built");
	if (rows == NULL) {
		rows = pos;
		row_t = mb->t;
	}
	size_t n = (size_t)mb->b * (size_t)mb->t, nd = (size_t)mb->b * (size_t)row_t;
	if (row_t < mb->t || check_positions(rows, mb->b, row_t, e) ||
	    check_share(pos, n, row_t, e))
		return row_t < mb->t ? err_set(e, "model: rows of %lld positions for micro-batches "
					       "of %d tokens", (long long)row_t, mb->t) : -1;
	/* multi-token prediction has no context parallelism: pos are the rows */
	if (mb->mtp && model_mtp_set_positions(mb, pos, e))
		return -1;
	if (mb->doc && mb->doc_n != nd) {
		m->be->ops->free(m->be, mb->doc);
		free(mb->doc_host);
		mb->doc = NULL;
		mb->doc_host = NULL;
	}
	if (!mb->doc && !(mb->doc = m->be->ops->alloc(m->be, nd * sizeof(int32_t), e)))
		return err_prefix(e, "model: documents of %zu positions", nd);
	if (!mb->doc_host && !(mb->doc_host = malloc(nd * sizeof(int32_t))))
		return err_set(e, "model: out of memory for documents of %zu positions", nd);
	mb->doc_n = nd;
	mb->doc_t = row_t;
	if (!mb->doc_cs &&
	    !(mb->doc_cs = m->be->ops->alloc(m->be, n * (size_t)m->rope_dim * sizeof(float), e)))
		return err_prefix(e, "model: RoPE table of %zu tokens", n);
	if (upload_docs(mb, pos, rows, e))
		return -1;
	mb->docs = 1;
	return 0;
}

int model_mb_set_positions(model_mb *mb, const int32_t *pos, titan_err *e)
{
	return model_mb_set_documents(mb, pos, NULL, 0, e);
}

int model_check_tokens(const model *m, const int32_t *inputs, const int32_t *labels, int64_t n,
		       titan_err *e)
{
	return (inputs && check_ids(inputs, n, m->vocab_global, 0, e)) ||
	       (labels && check_ids(labels, n, m->vocab_global, 1, e));
}

int model_mb_set_tokens_dev(model_mb *mb, const int32_t *inputs, const int32_t *labels,
			    titan_err *e)
{
	model *m = mb->m;
	backend *be = m->be;
	size_t bytes = (size_t)mb->b * (size_t)mb->t * sizeof(int32_t);
	if (mb->ids && !inputs)
		return err_set(e, "model: the micro-batch starts at the embedding and has no inputs");
	if (mb->mtp)
		return err_set(e, "model: multi-token prediction shifts the tokens on the host: a "
			       "step whose tokens stay on the device (compile's CUDA graph) is not "
			       "built with it");
	if (mb->labels && !labels)
		return err_set(e, "model: training needs labels");
	if (mb->ids)
		be->ops->copy(be, mb->ids, inputs, bytes, BACKEND_D2D);
	if (mb->labels)
		be->ops->copy(be, mb->labels, labels, bytes, BACKEND_D2D);
	mb->has_labels = mb->labels != NULL;
	mb->train = 1;
	mb->logits_host = NULL;
	return 0;
}

float *model_mb_grad_scale(model_mb *mb)
{
	model *m = mb->m;
	return (m->fuse & MODEL_FUSE_LOSS) && m->tp.size == 1 ? mb->gscale : NULL;
}

void model_mb_clear_loss(model_mb *mb)
{
	mb->loss_sum = 0;
	mb->n_valid = 0;
	mb->mtp_sum = 0;
	mb->mtp_valid = 0;
}

/* With MTP, 0.3.0's MTPLoss: main + mtp_scale * (mean of the depths' sums),
 * normalised by the main labels alone. */
double model_mb_loss_sum(const model_mb *mb)
{
	const llama_args *a = &mb->m->args;
	return mb->mtp ? mb->loss_sum + a->mtp_scale / a->mtp_layers * mb->mtp_sum : mb->loss_sum;
}
int64_t model_mb_valid(const model_mb *mb) { return mb->n_valid; }
void *model_dhidden(model *m) { return m->d_x; }

size_t model_hidden_bytes(const model *m, int b, int t)
{
	return (size_t)model_seq(m, (int64_t)b * t) * (size_t)m->args.dim *
	       be_dtype_size(m->prec.resid);
}

void *model_mb_hidden(model_mb *mb, int u)
{
	return u >= mb->u0 && u <= mb->u1 + 1 ? mb->hidden[u - mb->u0] : NULL;
}

/* ---- the head ---- */

/* Output projection of xf_all (n, dim) and loss over chunks of tokens: logits
 * (copied to logits_host when not NULL), the loss against labels (NULL: none)
 * added to *sum and *valid, and with backward the logits' gradient (scaled by
 * gs) in place, then the rows of d xf (into m->d_xn) and the output weight's
 * gradient.  Under TP the loss is the micro-batch's own (model_tp_loss). */
static void logits_chunks(model *m, model_mb *mb, const void *xf_all, const int32_t *labels,
			  float gs, double *sum, int64_t *valid, int backward, float *logits_host)
{
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, v = m->args.vocab_size;
	for (int64_t r0 = 0; r0 < n; r0 += m->chunk) {
		int64_t c = n - r0 < m->chunk ? n - r0 : m->chunk;
		const void *xf = elt(xf_all, at, (size_t)(r0 * d));
		model_linear(m, m->logits, xf, m->out, c, d, v, 0);
		if (logits_host)
			be->ops->copy(be, logits_host + r0 * v, m->logits,
				      (size_t)(c * v) * sizeof(float), BACKEND_D2H);
		if (labels && m->tp.size > 1)
			model_tp_loss(m, m->logits, labels + r0, c, backward ? gs : 0, sum, valid);
		else if (labels)
			be->ops->cross_entropy(be, m->logits, at, labels + r0, c, v,
					       MODEL_IGNORE_INDEX, backward ? gs : 0, sum, valid);
		if (backward) {
			model_linear_dx(m, elt(m->d_xn, at, (size_t)(r0 * d)), m->logits, m->out, c,
					d, v, 0);
			if (!model_slot_frozen(m, -1))
				model_linear_dw(m, m->out_g, m->logits, xf, c, d, v);
		}
	}
}

/* Rows [j0, j0 + tc) of each of the b rows of (b, t) x (width w, element
 * size es) to or from (b, tc) packed: gather 1 copies x's into packed. */
static void seq_rows(backend *be, void *x, void *packed, int64_t b, int64_t t, int64_t j0,
		     int64_t tc, size_t w, int gather)
{
	for (int64_t r = 0; r < b; r++) {
		char *xr = (char *)x + ((size_t)(r * t + j0)) * w;
		char *pr = (char *)packed + (size_t)(r * tc) * w;
		be->ops->copy(be, gather ? pr : xr, gather ? xr : pr, (size_t)tc * w, BACKEND_D2D);
	}
}

/* logits_chunks by 0.3.0's ChunkedLossWrapper: chunk i holds positions
 * [i tc, (i+1) tc) of every row, packed, and runs alone (its logits, loss,
 * gradients); d xf goes back to the rows it came from. */
static void seq_chunks_loss(model *m, model_mb *mb, const void *xf_all, const int32_t *labels,
			    float gs, double *sum, int64_t *valid, int backward)
{
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t b = mb->b, t = mb->t, tc = t / m->seq_chunks, c = b * tc;
	int64_t d = m->args.dim, v = m->args.vocab_size;
	size_t row = (size_t)d * be_dtype_size(at);
	for (int64_t j0 = 0; j0 < t; j0 += tc) {
		seq_rows(be, (void *)xf_all, m->seq_x, b, t, j0, tc, row, 1);
		model_linear(m, m->logits, m->seq_x, m->out, c, d, v, 0);
		if (labels) {
			seq_rows(be, (void *)labels, m->seq_lab, b, t, j0, tc, sizeof(int32_t), 1);
			be->ops->cross_entropy(be, m->logits, at, m->seq_lab, c, v, MODEL_IGNORE_INDEX,
					       backward ? gs : 0, sum, valid);
		}
		if (backward) {
			model_linear_dx(m, m->seq_dx, m->logits, m->out, c, d, v, 0);
			seq_rows(be, m->d_xn, m->seq_dx, b, t, j0, tc, row, 0);
			if (!model_slot_frozen(m, -1))
				model_linear_dw(m, m->out_g, m->logits, m->seq_x, c, d, v);
		}
	}
}

void model_logits_loss(model *m, const model_mb *mb, const void *xf, const int32_t *labels,
		       float grad_scale, double *sum, int64_t *valid, int backward)
{
	logits_chunks(m, (model_mb *)mb, xf, labels, grad_scale, sum, valid, backward, NULL);
}

/* The head's output and loss: fused (lm_head_loss) or chunk by chunk. */
static void output_chunks(model *m, model_mb *mb, int backward)
{
	backend *be = m->be;
	be_dtype at = m->prec.act;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, v = m->args.vocab_size;
	if (m->seq_x && !mb->logits_host) {
		seq_chunks_loss(m, mb, mb->xf, mb->has_labels ? mb->labels : NULL, mb->grad_scale,
				&mb->loss_sum, &mb->n_valid, backward);
		return;
	}
	if ((m->fuse & MODEL_FUSE_LOSS) && m->tp.size == 1 && mb->has_labels && !mb->logits_host) {
		const void *w = model_linear_weight(m, m->out);
		if (w)
			be->ops->lm_head_loss(be, mb->xf, w, at, mb->labels, n, d, v,
					      MODEL_IGNORE_INDEX, backward ? mb->gscale : NULL,
					      m->d_xn, at, m->out_g, m->prec.grad, m->logits, m->chunk,
					      &mb->loss_sum, &mb->n_valid);
		return;
	}
	logits_chunks(m, mb, mb->xf, mb->has_labels ? mb->labels : NULL, mb->grad_scale,
		      &mb->loss_sum, &mb->n_valid, backward, mb->logits_host);
}

/* The final norm over the rank's rows of the stream, written into its rows of
 * xf, which the output projection reads whole (gathered under TP). */
static void head_fwd(model *m, model_mb *mb)
{
	int head = m->n_units - 1;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ns = model_seq(m, n);
	void *mine = elt(mb->xf, m->prec.act, (size_t)(m->tp.rank * ns * d));
	m->be->ops->rmsnorm_fwd(m->be, mine, m->prec.act, mb->rstdf, model_mb_hidden(mb, head),
				m->prec.resid, m->norm, m->prec.param, ns, d,
				(float)(m->args.final_norm_eps > 0 ? m->args.final_norm_eps
								   : m->args.norm_eps));
	model_tp_gather(m, mb->xf, n, d, m->prec.act);
	if (!mb->train)
		output_chunks(m, mb, 0);
	else if (mb->mtp)
		model_mtp_fwd(m, mb);
}

static int head_bwd(model *m, model_mb *mb, titan_err *e)
{
	int head = m->n_units - 1;
	int64_t n = (int64_t)mb->b * mb->t, d = m->args.dim, ns = model_seq(m, n);
	/* the MTP depths first: their backward uses the scratch the main head's
	 * gradient is left in */
	if (mb->mtp && model_mtp_bwd(m, mb, e))
		return -1;
	output_chunks(m, mb, 1);
	void *dy = m->d_xn; /* (n, d): under TP each rank's part of the sum */
	if (m->tp.size > 1)
		model_tp_scatter(m, dy = m->d_xs, m->d_xn, n, d, m->prec.act);
	m->be->ops->rmsnorm_bwd(m->be, m->d_x, m->prec.resid, m->norm_g, m->prec.grad, dy,
				m->prec.act, model_mb_hidden(mb, head), m->prec.resid, m->norm,
				m->prec.param, mb->rstdf, ns, d);
	if (mb->mtp)
		model_mtp_add_dh(m, mb);
	return 0;
}

/* Under TP each rank looks up its rows of the vocabulary (zero for the
 * others) and the sum over ranks is scattered to the stream's rows. */
void model_embed_rows_fwd(model *m, void *rows, const int32_t *ids, int64_t n)
{
	int64_t d = m->args.dim;
	be_dtype rt = m->prec.resid;
	void *out = m->tp.size > 1 ? m->d_full : rows;
	m->be->ops->embedding_fwd(m->be, out, rt, m->tok, m->prec.param, ids, n, d, m->v0,
				  m->args.vocab_size);
	if (m->tp.size > 1)
		model_tp_scatter(m, rows, m->d_full, n, d, rt);
}

/* Under TP every row's gradient is gathered first. */
void model_embed_rows_bwd(model *m, const void *drows, const int32_t *ids, int64_t n)
{
	int64_t d = m->args.dim, ns = model_seq(m, n);
	be_dtype rt = m->prec.resid;
	const void *dy = drows;
	if (m->tp.size > 1) {
		dy = m->d_full;
		m->be->ops->copy(m->be, elt(m->d_full, rt, (size_t)(m->tp.rank * ns * d)), drows,
				 (size_t)(ns * d) * be_dtype_size(rt), BACKEND_D2D);
		model_tp_gather(m, m->d_full, n, d, rt);
		model_tp_finish(m);
	}
	m->be->ops->embedding_bwd(m->be, m->tok_g, m->prec.grad, dy, rt, ids, n, d, m->v0,
				  m->args.vocab_size);
}

static void embedding_fwd(model *m, model_mb *mb)
{
	model_embed_rows_fwd(m, model_mb_hidden(mb, 1), mb->ids, (int64_t)mb->b * mb->t);
	if (mb->mtp && mb->train)
		model_mtp_embed_fwd(m, mb);
}

static void embedding_bwd(model *m, model_mb *mb)
{
	if (!model_slot_frozen(m, -1))
		model_embed_rows_bwd(m, m->d_x, mb->ids, (int64_t)mb->b * mb->t);
	if (mb->mtp)
		model_mtp_embed_bwd(m, mb);
}

/* ---- units ---- */

static int check_unit(const model *m, const model_mb *mb, int u, titan_err *e)
{
	if (u < mb->u0 || u > mb->u1)
		return err_set(e, "model: unit %d is outside the micro-batch's units %d..%d", u,
			       mb->u0, mb->u1);
	if (m->sb != mb->b || m->st != mb->t)
		return model_scratch_prepare((model *)m, mb->b, mb->t, e);
	return 0;
}

/* Unit calls queue work on the backend without waiting for it: a fault inside an
 * op surfaces at the next sync (model_run_mb's, or the caller's). */
int model_unit_fwd(model *m, int u, model_mb *mb, titan_err *e)
{
	if (check_unit(m, mb, u, e))
		return -1;
	if (u == 0)
		embedding_fwd(m, mb);
	else if (is_block(m, u))
		model_block_fwd(m, mb, u - 1, model_mb_hidden(mb, u), model_mb_hidden(mb, u + 1));
	else
		head_fwd(m, mb);
	return 0;
}

int model_unit_bwd(model *m, int u, model_mb *mb, int defer_wgrad, titan_err *e)
{
	if (check_unit(m, mb, u, e))
		return -1;
	if (!mb->train)
		return err_set(e, "model: backward of a micro-batch set up for a forward only");
	if (is_block(m, u))
		return model_block_bwd(m, mb, u - 1, model_mb_hidden(mb, u), defer_wgrad, e);
	if (u == 0)
		embedding_bwd(m, mb);
	else if (head_bwd(m, mb, e))
		return -1;
	return 0;
}

int model_unit_wgrad(model *m, int u, model_mb *mb, titan_err *e)
{
	if (check_unit(m, mb, u, e))
		return -1;
	return is_block(m, u) ? model_block_wgrad(m, mb, u - 1, e) : 0;
}

static int hook(const model_hooks *h, int after, int u, int phase, titan_err *e)
{
	if (!h)
		return 0;
	int (*f)(void *, int, int, titan_err *) = after ? h->after : h->before;
	return f ? f(h->ctx, u, phase, e) : 0;
}

int model_run_mb_queued(model *m, model_mb *mb, const model_hooks *h, titan_err *e)
{
	for (int u = mb->u0; u <= mb->u1; u++)
		if (hook(h, 0, u, MODEL_FWD, e) || model_unit_fwd(m, u, mb, e) ||
		    hook(h, 1, u, MODEL_FWD, e))
			return -1;
	for (int u = mb->u1; mb->train && u >= mb->u0; u--)
		if (hook(h, 0, u, MODEL_BWD, e) || model_unit_bwd(m, u, mb, 0, e) ||
		    hook(h, 1, u, MODEL_BWD, e))
			return -1;
	return 0;
}

int model_run_mb(model *m, model_mb *mb, const model_hooks *h, titan_err *e)
{
	return model_run_mb_queued(m, mb, h, e) || m->be->ops->sync(m->be, e) ? -1 : 0;
}

/* The model's own context over every unit, made again when (b, t) changes. */
static model_mb *own_mb(model *m, int b, int t, titan_err *e)
{
	if (m->own_mb && m->own_mb->b == b && m->own_mb->t == t)
		return m->own_mb;
	model_mb_free(m->own_mb);
	m->own_mb = model_mb_create(m, 0, m->n_units - 1, b, t, e);
	return m->own_mb;
}

int model_forward_backward(model *m, const int32_t *inputs, const int32_t *labels, int b,
			   int t, float grad_scale, double *loss_sum, int64_t *n_valid,
			   titan_err *e)
{
	if (!labels)
		return err_set(e, "model: forward_backward needs labels");
	model_mb *mb = own_mb(m, b, t, e);
	if (!mb || model_mb_set_tokens(mb, inputs, labels, 1, grad_scale, NULL, e) ||
	    model_run_mb(m, mb, NULL, e))
		return -1;
	*loss_sum = model_mb_loss_sum(mb);
	*n_valid = mb->n_valid;
	return 0;
}

int model_forward(model *m, const int32_t *inputs, const int32_t *labels, int b, int t,
		  float *logits, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	model_mb *mb = own_mb(m, b, t, e);
	if (!mb || model_mb_set_tokens(mb, inputs, labels, 0, 0, logits, e) ||
	    model_run_mb(m, mb, NULL, e))
		return -1;
	if (loss_sum)
		*loss_sum = mb->loss_sum;
	if (n_valid)
		*n_valid = mb->n_valid;
	return 0;
}
