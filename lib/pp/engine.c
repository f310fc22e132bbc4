/* The engine: one pipeline rank running its action list on the model's
 * units.  What crosses between stages is a MESSAGE: the output of stage s's F
 * on micro-batch m (for stage s + 1's F) or the input gradient of its B or I
 * (for stage s - 1's backward), b * t * dim elements of the residual type.
 * A message to another rank is copied and sent at once and never waited for
 * until the step ends; one to a stage of the same rank is kept in a buffer.
 * Receives from a peer are posted in the order that peer sends (the engine
 * walks the peer's list), when a message is first needed, each into a buffer
 * of its own; so the step cannot deadlock when pp_schedule_check passed, and a
 * message can never land in the wrong place.  A received or kept message's
 * buffer is freed when used, a sent one's when the transport says the send
 * finished (lib/comm: when waited for, at the step's end). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "pp/pp.h"

/* One message slot, per (kind, receiving stage, micro-batch). */
enum { MSG_NONE, MSG_POSTED, MSG_READY };
typedef struct msg {
	void *buf;
	void *req;
	int state;
} msg;

typedef struct sent {
	void *buf, *req;
} sent;

typedef struct peer {
	int *keys;  /* the messages it sends this rank, in its order */
	int n, next; /* next: the first not yet posted */
} peer;

struct pp_engine {
	model *m;
	backend *be;
	const pp_split *sp;
	const pp_schedule *s;
	pp_transport tr;
	int rank, b, t, head;
	const int32_t *doc_pos; /* per-document positions (n_mb, b, t) or NULL */
	const int32_t *doc_rows; /* context parallelism: the whole rows' (n_mb, b, doc_row_t),
				    or NULL (model_mb_set_documents) */
	int64_t doc_row_t;
	size_t bytes;        /* of a message */
	msg *msgs;           /* (2 * n_stages * n_mb) */
	model_mb **ctx;      /* (n_stages * n_mb) */
	peer *peers;         /* (n_ranks) */
	int *first_at, *last_at; /* (n_stages) the rank's list index of each stage's
	                            first action and last backward (-1: not here) */
	pp_stage_hooks stage_hooks;
	sent *sends;         /* sends not known to be finished */
	int n_sends, cap_sends;
	/* the step */
	int pos;
	const int32_t *ids, *labels;
	float grad_scale;
	const model_hooks *hooks;
	double loss_sum;
	int64_t n_valid;
};

enum { KIND_ACT, KIND_GRAD };

static int key_of(const pp_engine *en, int kind, int stage, int mb)
{
	return (kind * en->s->n_stages + stage) * en->s->n_mb + mb;
}

/* The message an action sends: its key and receiving rank, or -1. */
static int produces(const pp_engine *en, const pp_action *a, int *to)
{
	const pp_schedule *s = en->s;
	if (a->op == PP_F && a->stage + 1 < s->n_stages) {
		*to = s->stage_rank[a->stage + 1];
		return key_of(en, KIND_ACT, a->stage + 1, a->mb);
	}
	if ((a->op == PP_B || a->op == PP_I) && a->stage > 0) {
		*to = s->stage_rank[a->stage - 1];
		return key_of(en, KIND_GRAD, a->stage - 1, a->mb);
	}
	return -1;
}

/* The message an action consumes, or -1. */
static int consumes(const pp_engine *en, const pp_action *a)
{
	if (a->op == PP_F && a->stage > 0)
		return key_of(en, KIND_ACT, a->stage, a->mb);
	if ((a->op == PP_B || a->op == PP_I) && a->stage + 1 < en->s->n_stages)
		return key_of(en, KIND_GRAD, a->stage, a->mb);
	return -1;
}

/* The rank that sends message key. */
static int sender_of(const pp_engine *en, int key)
{
	int kind = key / (en->s->n_stages * en->s->n_mb);
	int stage = key / en->s->n_mb % en->s->n_stages;
	return en->s->stage_rank[kind == KIND_ACT ? stage - 1 : stage + 1];
}

/* Each peer's messages to this rank, in the order it sends them. */
static int index_peers(pp_engine *en, titan_err *e)
{
	const pp_schedule *s = en->s;
	for (int p = 0; p < s->n_ranks; p++) {
		peer *pe = &en->peers[p];
		int n = s->first[p + 1] - s->first[p];
		if (p == en->rank || !(pe->keys = malloc((size_t)(n ? n : 1) * sizeof(int))))
			continue;
		for (int i = s->first[p]; i < s->first[p + 1]; i++) {
			int to, k = produces(en, &s->act[i], &to);
			if (k >= 0 && to == en->rank)
				pe->keys[pe->n++] = k;
		}
	}
	for (int p = 0; p < s->n_ranks; p++)
		if (p != en->rank && en->peers[p].keys == NULL)
			return err_set(e, "pipeline engine: out of memory");
	return 0;
}

/* Where each stage of this rank first acts and last runs a backward. */
static int index_stages(pp_engine *en, titan_err *e)
{
	const pp_schedule *s = en->s;
	en->first_at = malloc((size_t)s->n_stages * sizeof(int));
	en->last_at = malloc((size_t)s->n_stages * sizeof(int));
	if (en->first_at == NULL || en->last_at == NULL)
		return err_set(e, "pipeline engine: out of memory");
	for (int st = 0; st < s->n_stages; st++)
		en->first_at[st] = en->last_at[st] = -1;
	for (int i = s->first[en->rank]; i < s->first[en->rank + 1]; i++) {
		const pp_action *a = &s->act[i];
		int k = i - s->first[en->rank];
		if (en->first_at[a->stage] < 0)
			en->first_at[a->stage] = k;
		if (a->op != PP_F)
			en->last_at[a->stage] = k;
	}
	return 0;
}

void pp_engine_set_stage_hooks(pp_engine *en, const pp_stage_hooks *h)
{
	en->stage_hooks = h ? *h : (pp_stage_hooks){0};
}

int pp_engine_message_events(const pp_schedule *s, int rank, int *posted, int *used,
			     int *made)
{
	/* the engine's bookkeeping without a model: which messages exist, who
	 * sends them in what order, and when this rank posts and uses them */
	pp_engine en = {.s = s, .rank = rank};
	size_t nk = 2 * (size_t)s->n_stages * (size_t)s->n_mb;
	en.msgs = calloc(nk, sizeof *en.msgs);
	en.peers = calloc((size_t)s->n_ranks, sizeof *en.peers);
	titan_err e;
	int rc = -1;
	if (en.msgs == NULL || en.peers == NULL || index_peers(&en, &e))
		goto out;
	for (int i = s->first[rank]; i < s->first[rank + 1]; i++) {
		const pp_action *a = &s->act[i];
		int k = i - s->first[rank], in = consumes(&en, a), to;
		posted[k] = 0;
		if (in >= 0 && en.msgs[in].state == MSG_NONE) {
			peer *pe = &en.peers[sender_of(&en, in)];
			while (en.msgs[in].state == MSG_NONE && pe->next < pe->n) {
				en.msgs[pe->keys[pe->next++]].state = MSG_POSTED;
				posted[k]++;
			}
		}
		used[k] = in >= 0;
		int out = produces(&en, a, &to);
		made[k] = out >= 0;
		if (out >= 0 && to == rank)
			en.msgs[out].state = MSG_READY;
	}
	rc = 0;
out:
	for (int p = 0; en.peers && p < s->n_ranks; p++)
		free(en.peers[p].keys);
	free(en.peers);
	free(en.msgs);
	return rc;
}

pp_engine *pp_engine_create(model *m, const pp_split *sp, const pp_schedule *s, int rank,
			    int b, int t, const pp_transport *tr, titan_err *e)
{
	if (rank < 0 || rank >= s->n_ranks || sp->n_stages != s->n_stages) {
		err_set(e, "pipeline engine: rank %d of %d, %d stages split, %d scheduled", rank,
			s->n_ranks, sp->n_stages, s->n_stages);
		return NULL;
	}
	if (model_args(m)->tied_embeddings && s->n_stages > 1) {
		err_set(e, "pipeline parallelism: %s ties its output to its embedding, which the "
			"first and the last stage would both need", model_args(m)->name);
		return NULL;
	}
	pp_engine *en = calloc(1, sizeof *en);
	size_t nk = 2 * (size_t)s->n_stages * (size_t)s->n_mb;
	if (en == NULL || !(en->msgs = calloc(nk, sizeof *en->msgs)) ||
	    !(en->ctx = calloc(nk / 2, sizeof *en->ctx)) ||
	    !(en->peers = calloc((size_t)s->n_ranks, sizeof *en->peers))) {
		err_set(e, "pipeline engine: out of memory");
		pp_engine_free(en);
		return NULL;
	}
	en->m = m;
	en->be = model_backend(m);
	en->sp = sp;
	en->s = s;
	en->tr = *tr;
	en->rank = rank;
	en->b = b;
	en->t = t;
	en->head = model_head_unit(m);
	en->bytes = model_hidden_bytes(m, b, t); /* the stream's rows (b*t / tp) */
	if (index_peers(en, e) || index_stages(en, e)) {
		pp_engine_free(en);
		return NULL;
	}
	return en;
}

/* Wait for (or test) the sends still open; free the finished ones' buffers. */
static int reap_sends(pp_engine *en, int block, titan_err *e)
{
	int kept = 0;
	for (int i = 0; i < en->n_sends; i++) {
		int done = 0;
		if (en->tr.wait(en->tr.ctx, en->sends[i].req, block, &done, e))
			return -1;
		if (done)
			en->be->ops->free(en->be, en->sends[i].buf);
		else
			en->sends[kept++] = en->sends[i];
	}
	en->n_sends = kept;
	return 0;
}

static void drop_messages(pp_engine *en)
{
	size_t nk = 2 * (size_t)en->s->n_stages * (size_t)en->s->n_mb;
	for (size_t i = 0; i < nk; i++) {
		if (en->msgs[i].buf)
			en->be->ops->free(en->be, en->msgs[i].buf);
		en->msgs[i] = (msg){0};
	}
	for (size_t i = 0; i < nk / 2; i++) {
		model_mb_free(en->ctx[i]);
		en->ctx[i] = NULL;
	}
}

void pp_engine_free(pp_engine *en)
{
	if (en == NULL)
		return;
	if (en->msgs && en->ctx)
		drop_messages(en);
	for (int i = 0; i < en->n_sends; i++)
		en->be->ops->free(en->be, en->sends[i].buf);
	for (int p = 0; en->peers && p < en->s->n_ranks; p++)
		free(en->peers[p].keys);
	free(en->peers);
	free(en->first_at);
	free(en->last_at);
	free(en->sends);
	free(en->msgs);
	free(en->ctx);
	free(en);
}

/* Hand a message on: kept for a stage of this rank, else copied and sent. */
static int deliver(pp_engine *en, int key, int to, const void *src, titan_err *e)
{
	backend *be = en->be;
	void *buf = be->ops->alloc(be, en->bytes, e);
	if (buf == NULL)
		return err_prefix(e, "pipeline message");
	be->ops->copy(be, buf, src, en->bytes, BACKEND_D2D);
	if (to == en->rank) {
		en->msgs[key] = (msg){.buf = buf, .state = MSG_READY};
		return 0;
	}
	if (be->ops->sync(be, e)) {
		be->ops->free(be, buf);
		return -1;
	}
	if (en->n_sends == en->cap_sends) {
		int cap = en->cap_sends ? 2 * en->cap_sends : 16;
		sent *s = realloc(en->sends, (size_t)cap * sizeof *s);
		if (s == NULL) {
			be->ops->free(be, buf);
			return err_set(e, "pipeline engine: out of memory");
		}
		en->sends = s;
		en->cap_sends = cap;
	}
	void *req;
	if (en->tr.send(en->tr.ctx, to, buf, en->bytes, &req, e)) {
		be->ops->free(be, buf);
		return -1;
	}
	en->sends[en->n_sends++] = (sent){.buf = buf, .req = req};
	return reap_sends(en, 0, e);
}

/* Make message key available: post the receives from its sender up to it,
 * then wait for it (or, not blocking, test).  *ready says whether it is. */
static int need(pp_engine *en, int key, int block, int *ready, titan_err *e)
{
	msg *g = &en->msgs[key];
	*ready = g->state == MSG_READY;
	if (*ready)
		return 0;
	int from = sender_of(en, key);
	if (from == en->rank)
		return err_set(e, "pipeline engine: rank %d needs a message of its own stages "
			       "before it is made (the schedule was not checked?)", en->rank);
	peer *pe = &en->peers[from];
	while (g->state == MSG_NONE && pe->next < pe->n) {
		int k = pe->keys[pe->next++];
		msg *q = &en->msgs[k];
		if (!(q->buf = en->be->ops->alloc(en->be, en->bytes, e)))
			return err_prefix(e, "pipeline message");
		if (en->tr.recv(en->tr.ctx, from, q->buf, en->bytes, &q->req, e))
			return -1;
		q->state = MSG_POSTED;
	}
	if (g->state == MSG_NONE)
		return err_set(e, "pipeline engine: rank %d waits for a message rank %d never sends",
			       en->rank, from);
	int done = 0;
	if (en->tr.wait(en->tr.ctx, g->req, block, &done, e))
		return -1;
	if (done)
		g->state = MSG_READY;
	*ready = done;
	return 0;
}

static void consume(pp_engine *en, int key, void *dst)
{
	msg *g = &en->msgs[key];
	en->be->ops->copy(en->be, dst, g->buf, en->bytes, BACKEND_D2D);
	en->be->ops->free(en->be, g->buf);
	*g = (msg){0};
}

static int hook(const model_hooks *h, int after, int u, int phase, titan_err *e)
{
	if (h == NULL)
		return 0;
	int (*f)(void *, int, int, titan_err *) = after ? h->after : h->before;
	return f ? f(h->ctx, u, phase, e) : 0;
}

static int forward(pp_engine *en, const pp_action *a, int in, titan_err *e)
{
	int u0 = en->sp->u0[a->stage], u1 = en->sp->u1[a->stage];
	size_t n = (size_t)en->b * (size_t)en->t * (size_t)a->mb;
	model_mb **mb = &en->ctx[a->stage * en->s->n_mb + a->mb];
	if (!(*mb = model_mb_create(en->m, u0, u1, en->b, en->t, e)))
		return -1;
	if (model_mb_set_tokens(*mb, u0 == 0 ? en->ids + n : NULL,
				u1 == en->head ? en->labels + n : NULL, 1, en->grad_scale, NULL, e) ||
	    model_mb_set_documents(*mb, en->doc_pos ? en->doc_pos + n : NULL,
				   en->doc_rows ? en->doc_rows + (size_t)a->mb * (size_t)en->b *
								    (size_t)en->doc_row_t
						: NULL,
				   en->doc_row_t, e))
		return -1;
	if (in >= 0)
		consume(en, in, model_mb_hidden(*mb, u0));
	for (int u = u0; u <= u1; u++)
		if (hook(en->hooks, 0, u, MODEL_FWD, e) || model_unit_fwd(en->m, u, *mb, e) ||
		    hook(en->hooks, 1, u, MODEL_FWD, e))
			return -1;
	int to, k = produces(en, a, &to);
	return k >= 0 ? deliver(en, k, to, model_mb_hidden(*mb, u1 + 1), e) : 0;
}

static void finish_mb(pp_engine *en, int stage, int mb)
{
	model_mb **c = &en->ctx[stage * en->s->n_mb + mb];
	if (en->sp->u1[stage] == en->head) {
		en->loss_sum += model_mb_loss_sum(*c);
		en->n_valid += model_mb_valid(*c);
	}
	model_mb_free(*c);
	*c = NULL;
}

static int backward(pp_engine *en, const pp_action *a, int in, titan_err *e)
{
	int u0 = en->sp->u0[a->stage], u1 = en->sp->u1[a->stage];
	model_mb *mb = en->ctx[a->stage * en->s->n_mb + a->mb];
	if (in >= 0)
		consume(en, in, model_dhidden(en->m));
	for (int u = u1; u >= u0; u--)
		if (hook(en->hooks, 0, u, MODEL_BWD, e) ||
		    model_unit_bwd(en->m, u, mb, a->op == PP_I, e) ||
		    hook(en->hooks, 1, u, MODEL_BWD, e))
			return -1;
	int to, k = produces(en, a, &to);
	if (k >= 0 && deliver(en, k, to, model_dhidden(en->m), e))
		return -1;
	if (a->op == PP_B)
		finish_mb(en, a->stage, a->mb);
	return 0;
}

static int wgrad(pp_engine *en, const pp_action *a, titan_err *e)
{
	int u0 = en->sp->u0[a->stage], u1 = en->sp->u1[a->stage];
	model_mb *mb = en->ctx[a->stage * en->s->n_mb + a->mb];
	for (int u = u0; u <= u1; u++)
		if (hook(en->hooks, 0, u, MODEL_WGRAD, e) || model_unit_wgrad(en->m, u, mb, e) ||
		    hook(en->hooks, 1, u, MODEL_WGRAD, e))
			return -1;
	finish_mb(en, a->stage, a->mb);
	return 0;
}

void pp_engine_set_positions(pp_engine *en, const int32_t *positions, const int32_t *rows,
			     int64_t row_t)
{
	en->doc_pos = positions;
	en->doc_rows = rows;
	en->doc_row_t = rows ? row_t : 0;
}

int pp_engine_begin(pp_engine *en, const int32_t *ids, const int32_t *labels, float grad_scale,
		    const model_hooks *hooks, titan_err *e)
{
	(void)e;
	en->pos = 0;
	en->bytes = model_hidden_bytes(en->m, en->b, en->t); /* the precision may have changed */
	en->ids = ids;
	en->labels = labels;
	en->grad_scale = grad_scale;
	en->hooks = hooks;
	en->loss_sum = 0;
	en->n_valid = 0;
	for (int p = 0; p < en->s->n_ranks; p++)
		en->peers[p].next = 0;
	return 0;
}

int pp_engine_advance(pp_engine *en, int block, int *done, titan_err *e)
{
	const pp_schedule *s = en->s;
	int n = s->first[en->rank + 1] - s->first[en->rank];
	while (en->pos < n) {
		const pp_action *a = &s->act[s->first[en->rank] + en->pos];
		int in = consumes(en, a), ready = 1;
		if (in >= 0 && need(en, in, block, &ready, e))
			goto fail;
		if (!ready) {
			*done = 0;
			return 0;
		}
		const pp_stage_hooks *sh = &en->stage_hooks;
		int rc = en->first_at[a->stage] == en->pos && sh->first
			 ? sh->first(sh->ctx, a->stage, e) : 0;
		if (rc == 0)
			rc = a->op == PP_F ? forward(en, a, in, e)
			     : a->op == PP_W ? wgrad(en, a, e) : backward(en, a, in, e);
		if (rc == 0 && en->last_at[a->stage] == en->pos && sh->last)
			rc = sh->last(sh->ctx, a->stage, e);
		if (rc) {
			char str[48];
			snprintf(str, sizeof str, "%d%c%d", a->stage, "FBIW"[a->op], a->mb);
			err_prefix(e, "pipeline rank %d, action %d (%s)", en->rank, en->pos, str);
			goto fail;
		}
		en->pos++;
	}
	if (reap_sends(en, block, e))
		goto fail;
	*done = en->n_sends == 0;
	return en->be->ops->sync(en->be, e);
fail:
	drop_messages(en);
	return -1;
}

int pp_engine_actions_left(const pp_engine *en)
{
	return en->s->first[en->rank + 1] - en->s->first[en->rank] - en->pos;
}

int pp_engine_step(pp_engine *en, const int32_t *ids, const int32_t *labels, float grad_scale,
		   const model_hooks *hooks, double *loss_sum, int64_t *n_valid, titan_err *e)
{
	int done = 0;
	if (pp_engine_begin(en, ids, labels, grad_scale, hooks, e) ||
	    pp_engine_advance(en, 1, &done, e))
		return -1;
	pp_engine_loss(en, loss_sum, n_valid);
	return 0;
}

void pp_engine_loss(const pp_engine *en, double *loss_sum, int64_t *n_valid)
{
	*loss_sum = en->loss_sum;
	*n_valid = en->n_valid;
}
