/* A loopback pp_transport (see pp_loop.h). */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "pp_loop.h"

typedef struct loop_req {
	int is_send, from, k;
	void *buf;
	size_t n;
} loop_req;

static int lsend(void *ctx, int peer, const void *buf, size_t n, void **req, titan_err *e)
{
	pp_loop *l = ctx;
	pp_loop_chan *c = &l->ch[l->me][peer];
	loop_req *r = calloc(1, sizeof *r);
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 8;
		c->data = realloc(c->data, (size_t)c->cap * sizeof *c->data);
		c->len = realloc(c->len, (size_t)c->cap * sizeof *c->len);
	}
	if (r == NULL || c->data == NULL || c->len == NULL || !(c->data[c->n] = malloc(n)))
		return err_set(e, "loopback: out of memory");
	memcpy(c->data[c->n], buf, n);
	c->len[c->n++] = n;
	r->is_send = 1;
	*req = r;
	return 0;
}

static int lrecv(void *ctx, int peer, void *buf, size_t n, void **req, titan_err *e)
{
	pp_loop *l = ctx;
	loop_req *r = calloc(1, sizeof *r);
	if (r == NULL)
		return err_set(e, "loopback: out of memory");
	*r = (loop_req){.from = peer, .k = l->ch[peer][l->me].posted++, .buf = buf, .n = n};
	*req = r;
	return 0;
}

static int lwait(void *ctx, void *req, int block, int *done, titan_err *e)
{
	pp_loop *l = ctx;
	loop_req *r = req;
	if (r->is_send) {
		*done = block;
		if (block)
			free(r);
		return 0;
	}
	pp_loop_chan *c = &l->ch[r->from][l->me];
	if (r->k >= c->n) {
		*done = 0;
		return block ? err_set(e, "loopback: a blocking wait for a message not sent") : 0;
	}
	if (c->len[r->k] != r->n)
		return err_set(e, "loopback: a message of %zu bytes into %zu", c->len[r->k], r->n);
	memcpy(r->buf, c->data[r->k], r->n);
	*done = 1;
	free(r);
	return 0;
}

void pp_loop_transport(pp_loop *l, pp_transport *out)
{
	*out = (pp_transport){.ctx = l, .send = lsend, .recv = lrecv, .wait = lwait};
}

void pp_loop_free(pp_loop *l)
{
	for (int i = 0; i < PP_LOOP_MAX; i++)
		for (int j = 0; j < PP_LOOP_MAX; j++) {
			for (int k = 0; k < l->ch[i][j].n; k++)
				free(l->ch[i][j].data[k]);
			free(l->ch[i][j].data);
			free(l->ch[i][j].len);
		}
	memset(l, 0, sizeof *l);
}

/* The ranks take turns; a rank that has run its whole list finishes its sends
 * with a blocking advance (a send is finished once it is in its FIFO). */
int pp_loop_run(pp_loop *l, pp_engine **en, int n_ranks, int n_actions, titan_err *e)
{
	int finished[PP_LOOP_MAX] = {0}, left = n_ranks;
	for (int round = 0; left > 0; round++) {
		if (round > 4 * (n_actions + 4))
			return err_set(e, "the ranks made no progress in %d rounds", round);
		for (int r = 0; r < n_ranks; r++) {
			if (finished[r])
				continue;
			l->me = r;
			int done;
			if (pp_engine_advance(en[r], 0, &done, e))
				return -1;
			if (!done && pp_engine_actions_left(en[r]) == 0 &&
			    pp_engine_advance(en[r], 1, &done, e))
				return -1;
			if (done) {
				finished[r] = 1;
				left--;
			}
		}
	}
	return 0;
}

int pp_test_batch_make(pp_test_batch *tb, model *ref, int nmb, int b, int t, uint64_t seed,
		       titan_err *e)
{
	size_t n = (size_t)nmb * (size_t)b * (size_t)t;
	uint64_t vocab = (uint64_t)model_args(ref)->vocab_size;
	*tb = (pp_test_batch){.ids = malloc(n * 4), .labels = malloc(n * 4)};
	if (tb->ids == NULL || tb->labels == NULL)
		return err_set(e, "test batch: out of memory");
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		tb->ids[i] = (int32_t)((seed >> 33) % vocab);
		tb->labels[i] = (seed >> 20) % 9 == 0 ? MODEL_IGNORE_INDEX : (int32_t)((seed >> 41) % vocab);
		tb->valid += tb->labels[i] != MODEL_IGNORE_INDEX;
	}
	tb->scale = 1.0f / (float)tb->valid;
	model_zero_grad(ref);
	for (int k = 0; k < nmb; k++) {
		double l;
		int64_t nv;
		size_t at = (size_t)k * (size_t)b * (size_t)t;
		if (model_forward_backward(ref, tb->ids + at, tb->labels + at, b, t, tb->scale, &l, &nv,
					   e))
			return -1;
		tb->loss += l;
	}
	return 0;
}

void pp_test_batch_free(pp_test_batch *tb)
{
	free(tb->ids);
	free(tb->labels);
}
