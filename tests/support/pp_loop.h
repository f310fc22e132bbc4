/* pp_loop.h: a pp_transport with every pipeline rank in one process, for the
 * engine's and the planner's tests: a FIFO per (sender, receiver) carries
 * copies of the messages, each peer's in the order sent.  A send is finished
 * only by a blocking wait, as lib/comm's (the engine then keeps its send
 * buffers until the step ends); a receive is finished once its message is
 * in.  Set `me` to the rank whose engine runs before calling it. */
#ifndef TITAN_PP_LOOP_H
#define TITAN_PP_LOOP_H

#include <stdint.h>

#include "pp/pp.h"

enum { PP_LOOP_MAX = 8 };

typedef struct pp_loop_chan {
	void **data;
	size_t *len;
	int n, cap, posted;
} pp_loop_chan;

typedef struct pp_loop {
	pp_loop_chan ch[PP_LOOP_MAX][PP_LOOP_MAX];
	int me;
} pp_loop;

void pp_loop_transport(pp_loop *l, pp_transport *out);
void pp_loop_free(pp_loop *l);

/* Run every rank's engine (begun) in turns until all finish; -1 with a
 * message when one fails or none can move. */
int pp_loop_run(pp_loop *l, pp_engine **en, int n_ranks, int n_actions, titan_err *e);

/* A step's micro-batches for the pipeline tests, and the plain model's step
 * on them: nmb micro-batches of b x t random tokens (below ref's vocabulary,
 * one label in 9 ignored) from seed; every loss scaled by 1 / the valid
 * labels; ref's own gradients zeroed, then the step's. */
struct model;
typedef struct pp_test_batch {
	int32_t *ids, *labels; /* (nmb, b, t), owned */
	int64_t valid;
	float scale;
	double loss;           /* the plain model's summed loss */
} pp_test_batch;
int pp_test_batch_make(pp_test_batch *tb, struct model *ref, int nmb, int b, int t,
		       uint64_t seed, titan_err *e);
void pp_test_batch_free(pp_test_batch *tb);

#endif
