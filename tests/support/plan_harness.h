/* plan_harness.h: what the tests that hold a parallel plan to the single
 * process share (tests/plan/test_plan, tests/plan/test_ep,
 * tests/family/test_family_plan; their cases are parsed by case_args.h).
 *
 * Each trains a model for a few steps under the plan on every rank and the
 * same model as one process (the plan of a world of one: mesh NULL) on the
 * whole batch, and holds the plan to it: per step the loss and grad norm,
 * after step 1 the gradients, after the last step the parameters (every
 * rank's boxes of them against the same boxes of the single process's whole
 * tensors) and the model's buffers.
 *
 * The single process's run is the same on every rank, so it runs once, on
 * rank 0 of the world, step by step beside the plan's steps (a harness_ref):
 * after each step rank 0 broadcasts its loss, grad norm and valid labels,
 * after step 1 its gradients, after the last its parameters and buffers,
 * and every rank compares with those exactly as with its own copy (the
 * values are the same bits).  A step that fails on rank 0 fails on every
 * rank, with rank 0 saying why. */
#ifndef TITAN_TEST_PLAN_HARNESS_H
#define TITAN_TEST_PLAN_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "case_args.h"
#include "comm/comm.h"
#include "mesh/mesh.h"
#include "plan/plan.h"

/* The tokens of every step: ids below vocab and their labels, 1 label in 9
 * ignored (-100), from a fixed seed (printed, so that a failure can be
 * replayed); the same generator in all three programs. */
typedef struct harness_tokens {
	int32_t *ids, *labels; /* (steps, rows, t) */
	int rows, t;
} harness_tokens;
int harness_tokens_make(harness_tokens *tk, int steps, int rows, int t, int vocab,
			uint64_t seed, titan_err *e);
void harness_tokens_free(harness_tokens *tk);
/* SFT's chat data (the loader's LOADER_IGNORE_INDEX on prompts), the labels
 * of tk's first `steps` steps masked in place, so that the valid labels lie
 * unevenly over ranks and micro-batches and the loss's normalisation by
 * their global count shows: each document of harness_doc_positions' cut
 * (used as the conversations whether or not the model sees the documents)
 * loses the first half of its labels (a one-token document all), every
 * fifth row all but its last label (a valid one, below vocab), step 1 row
 * rows / 4 every label, step 2 the second half of the rows every label but
 * one, in row rows - 3: a rank or micro-batch there has one valid label or
 * none. */
int harness_tokens_mask(harness_tokens *tk, int steps, int vocab, titan_err *e);

/* This rank's place in a case: its mesh and its rows of the batch. */
typedef struct harness_rank {
	mesh *m;
	int dp, r; /* the batch ranks (dp_replicate x dp_shard), this rank's coordinate */
	int lb;    /* its rows a micro-batch: rows / (dp x accum) */
	int accum;
} harness_rank;

/* The mesh of degrees want over world (mesh_resolve's defaults filled in)
 * for a batch of rows in accum micro-batches; -1 naming the case (a's
 * variable and text) when it does not fit. */
int harness_rank_open(harness_rank *k, comm *world, const mesh_degrees *want,
		      const case_args *a, int rows, int accum, titan_err *e);

/* Step s's batches (0-based): *whole, the single process's (the step's
 * tokens, one micro-batch), and *mine, the rank's rows of them copied into
 * ids and labels ((accum * lb, t) each) in the loader's order: micro-batch j
 * takes rows j*lb*dp + r*lb .. + lb. */
void harness_step_batches(const harness_rank *k, const harness_tokens *tk, int s, int32_t *ids,
			  int32_t *labels, plan_batch *mine, plan_batch *whole);
/* The rank's rows of a step's (rows, t) array (as harness_step_batches takes
 * ids) into mine. */
void harness_rank_rows(const harness_rank *k, const int32_t *step, int32_t *mine, int t);
/* torchtitan 0.3.0's per-document positions (rows, t) for step s: in row r,
 * documents of lengths that cycle from a start moving with r and s (documents
 * of one token, ones across micro-batch and rank boundaries, a different cut
 * in every row); then mine, the rank's rows.  The batches point at both:
 * they live in the harness until the next call. */
void harness_doc_positions(const harness_rank *k, int rows, int t, int s, plan_batch *mine,
			   plan_batch *whole);

/* A comparison of this rank's boxes of a shard buffer with the same boxes
 * of the single process's whole tensors. */
typedef struct harness_diff {
	double worst;             /* the largest |a - b| */
	const char *worst_at;     /* its tensor's name */
	double of_box;            /* the largest max |a - b| / max |b| over a box
	                             (boxes whose b is all zero aside) */
	double of_tensor;         /* the largest max |a - b| over a box / max |b|
	                             over its whole tensor (1 when that is zero) */
	const char *of_tensor_at; /* its tensor's name */
	double sumsq;             /* the sum of (a - b)^2 over the n elements compared */
	size_t n;
} harness_diff;

/* The single process's run, its results on every rank.  The shard images
 * are host float32, laid out as the one-process plan's shard buffer: global
 * tensor i whole, row-major, from off[i]. */
typedef struct harness_ref {
	comm *world;
	backend *be; /* rank 0: the single process's backend and plan; NULL elsewhere */
	plan *p;
	int n_tensors, n_buffers;
	size_t numel;        /* of the shard images */
	int64_t *off;        /* (n_tensors) */
	int64_t *buf_numel;  /* (n_buffers) */
	float *grads1;       /* (numel) step 1's gradients, reduced and clipped */
	float *params;       /* (numel) after the last step */
	float *buffers;      /* the buffers one after another, after the last step */
} harness_ref;

/* The one-process plan of a case (ctx) on backend be; it fails the test
 * itself when it cannot. */
typedef plan *harness_make_plan(backend *be, const void *ctx);

/* Begin: rank 0 makes the single process's backend and plan (make), which r
 * owns; a collective over world. */
int harness_ref_open(harness_ref *r, comm *world, harness_make_plan *make, const void *ctx,
		     titan_err *e);
/* Step `step` (1-based) of the single process on the whole batch b
 * (plan_step's lr and max_norm; rank 0), its loss, grad norm and valid
 * labels in *out on every rank; after step 1 its gradients too. */
int harness_ref_step(harness_ref *r, int step, const plan_batch *b, double lr, double max_norm,
		     plan_result *out, titan_err *e);
/* After the last step: its parameters and buffers on every rank, and this
 * rank's parameters compared with them (harness_compare) into *d. */
int harness_ref_finish(harness_ref *r, plan *dist, harness_diff *d, titan_err *e);
void harness_ref_free(harness_ref *r);

/* Per step, the relative differences of loss and grad norm, and the largest
 * so far. */
typedef struct harness_gap {
	double loss, norm;
	double worst_loss, worst_norm;
} harness_gap;

/* Step `step` (1-based) of the plan on rank `rank` (got) against the single
 * process's (want): the same valid labels, the loss and the grad norm within
 * loss_tol and norm_tol relative; g updated either way.  -1 with the message
 * the scripts show ("rank R step S: loss .. vs .. (rel ..), grad norm ..")
 * when not. */
int harness_check_step(harness_gap *g, int rank, int step, const plan_result *got,
		       const plan_result *want, double loss_tol, double norm_tol, titan_err *e);

/* This rank's boxes of its shard buffer (the parameters, or with grads the
 * gradients) against the same boxes of the single process's (with grads
 * step 1's gradients, else the final parameters). */
int harness_compare(plan *dist, const harness_ref *r, int grads, harness_diff *d,
		    titan_err *e);

/* The model's buffers (every rank holds them whole, the MoE layers'
 * expert_bias) against the single process's: *worst the largest |a - b|,
 * *size the largest |b| (so that a log shows they moved). */
int harness_compare_buffers(plan *dist, const harness_ref *r, double *worst, double *size,
			    titan_err *e);

#endif
