/* mpi_rounds.c: collectives as rounds of MPI point-to-point messages (see
 * mpi_rounds.h for why and which algorithms). */
#include "comm/mpi_rounds.h"

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/move.h"

/* Up to this many bytes, all-reduce on 4 or more ranks (a power of two)
 * doubles the whole buffer (log2 n rounds of B) rather than halving then
 * doubling (2 log2 n rounds, B (n-1)/n sent and reduced per rank): fewer
 * rounds win while latency rules, the more so when ranks outnumber cores
 * (4 ranks on 2 cores, Open MPI 4.1: 4 KiB 18 us against 23, 32 KiB 29
 * against 49).  On 2 ranks halving then doubling sends two messages of B/2
 * (under Open MPI's 4 KiB eager limit at 4 KiB: 1.1 us against 2.9 for
 * doubling) and is no slower at 32 KiB (6.9 us against 6.1, within the
 * noise). */
#define ROUNDS_DOUBLING_MAX (32 << 10)

/* Apart from comm_send/comm_recv's tag (mpi.c), so that the two never match;
 * rounds of successive collectives are told apart by MPI's message order. */
#define ROUNDS_TAG 0x7175

/* A finished collective's scratch up to this size stays with its rounds for
 * the next one (the latency-bound calls then allocate nothing); a larger one
 * is freed at once rather than held between calls. */
#define ROUNDS_SCRATCH_KEEP (1 << 20)

typedef enum phase {
	AG_DOUBLING, /* all-gather: the block groups of 1, 2, 4, ... ranks swapped */
	AG_RING,     /* all-gather: block rank - k passed to the right in round k */
	RS_HALVING,  /* reduce-scatter: half of the blocks left given to the partner */
	RS_RING,     /* reduce-scatter: the partial sum of a block passed right */
	AR_DOUBLING, /* all-reduce: the whole buffer swapped with rank ^ 2^k, reduced */
	ALL_TO_ALLV, /* one round of every send and receive */
} phase;

struct rounds {
	MPI_Comm h;
	MPI_Datatype t;
	MPI_Op op;
	size_t es;           /* bytes per element */
	int rank, n;
	size_t total;        /* elements of the whole buffer; block i starts at off(i) */
	const char *src;     /* the caller's send buffer */
	const char *own;     /* all-gather: this rank's block, not yet in dst */
	char *dst;           /* the whole result (all-gather, all-reduce) */
	char *out;           /* where reduce-scatter's block goes */
	phase phases[2];
	int nphases, ph;     /* the phase running */
	int k, steps;        /* its round, of how many */
	int lo, hi;          /* recursive halving: the blocks still reduced here */
	char *t0, *t1;       /* scratch: partial sums (t0: total elements), receipts */
	size_t t0_bytes;     /* what t0 holds, kept from an earlier collective */
	const void *red_in;  /* after the round's messages: red_inout = red_in op red_inout */
	void *red_inout;
	size_t red_count;
	int *v;              /* all-to-all-v: scounts, sdispls, rcounts, rdispls */
	int nreq;            /* requests of the round in flight */
	MPI_Request req[];   /* 2 n */
};

static int is_pow2(int n)
{
	return (n & (n - 1)) == 0;
}

static int log2i(int n)
{
	int k = 0;
	while ((1 << k) < n)
		k++;
	return k;
}

/* Block i of the buffer: [off(i), off(i + 1)) elements. */
static size_t off(const rounds *s, int i)
{
	return (size_t)i * s->total / (size_t)s->n;
}

static char *at(const rounds *s, const void *base, int block)
{
	return (char *)base + off(s, block) * s->es;
}

static size_t len(const rounds *s, int from, int to)
{
	return off(s, to) - off(s, from);
}

/* The rounds *io held, a finished collective's of the same communicator,
 * cleared for the next one with its scratch kept; else new ones. */
static rounds *reuse_or_new(rounds **io, MPI_Comm h, int n)
{
	rounds *s = *io;
	*io = NULL;
	if (s != NULL && s->h == h && s->n == n) {
		char *t0 = s->t0;
		size_t t0_bytes = s->t0_bytes;
		int *v = s->v;
		memset(s, 0, offsetof(rounds, req));
		s->t0 = t0;
		s->t0_bytes = t0_bytes;
		s->v = v;
		return s;
	}
	rounds_free(s);
	return calloc(1, sizeof *s + 2 * (size_t)n * sizeof(MPI_Request));
}

/* A collective over h's ranks of a buffer of count elements, or of count
 * elements a rank (per_rank: all-gather's result, reduce-scatter's input);
 * in the rounds *io held, if any (taken). */
static rounds *new_rounds(MPI_Comm h, MPI_Datatype t, size_t count, int per_rank, rounds **io,
			  titan_err *e)
{
	int n, rank, es;
	if (MPI_Comm_size(h, &n) != MPI_SUCCESS || MPI_Comm_rank(h, &rank) != MPI_SUCCESS ||
	    MPI_Type_size(t, &es) != MPI_SUCCESS) {
		rounds_free(*io);
		*io = NULL;
		err_set(e, "collective: cannot query the communicator");
		return NULL;
	}
	size_t total = per_rank ? count * (size_t)n : count;
	rounds *s = reuse_or_new(io, h, n);
	if (s == NULL) {
		err_set(e, "collective: out of memory");
		return NULL;
	}
	if (total > INT_MAX) {
		rounds_free(s);
		err_set(e, "collective: %zu elements exceed MPI's limit of %d", total, INT_MAX);
		return NULL;
	}
	s->h = h;
	s->t = t;
	s->op = MPI_OP_NULL;
	s->es = (size_t)es;
	s->rank = rank;
	s->n = n;
	s->total = total;
	return s;
}

/* Scratch for the reductions: t0 holds total elements, t1 half as many
 * (one block more, for blocks of unequal length). */
static int scratch(rounds *s, titan_err *e)
{
	size_t n0 = s->total + 1, n1 = s->total / 2 + (size_t)s->n + 1, need = (n0 + n1) * s->es;
	if (need > s->t0_bytes) {
		free(s->t0);
		s->t0_bytes = 0;
		if ((s->t0 = malloc(need)) == NULL)
			return err_set(e, "collective: out of memory for %zu bytes", need);
		s->t0_bytes = need;
	}
	s->t1 = s->t0 + n0 * s->es;
	return 0;
}

/* Receive rcount elements from `from` into rbuf, send scount from sbuf to `to`. */
static int post(rounds *s, int to, const void *sbuf, size_t scount, int from, void *rbuf,
		size_t rcount, titan_err *e)
{
	int rc = MPI_Irecv(rbuf, (int)rcount, s->t, from, ROUNDS_TAG, s->h, &s->req[0]);
	if (rc != MPI_SUCCESS)
		return comm_mpi_fail(rc, e, "MPI_Irecv");
	s->nreq = 1;
	if ((rc = MPI_Isend(sbuf, (int)scount, s->t, to, ROUNDS_TAG, s->h, &s->req[1])) !=
	    MPI_SUCCESS)
		return comm_mpi_fail(rc, e, "MPI_Isend");
	s->nreq = 2;
	return 0;
}

static void reduce_after(rounds *s, const void *in, void *inout, size_t count)
{
	s->red_in = in;
	s->red_inout = inout;
	s->red_count = count;
}

/* Where an all-gather round sends block b from: the first round sends the
 * rank's own block, from the caller's buffer while it is not yet in dst. */
static const char *ag_from(rounds *s, int b)
{
	return b == s->rank && s->own != NULL ? s->own : at(s, s->dst, b);
}

static int ag_doubling(rounds *s, titan_err *e)
{
	int mask = 1 << s->k, partner = s->rank ^ mask;
	int mine = s->rank / mask * mask, theirs = partner / mask * mask;
	return post(s, partner, mask == 1 ? ag_from(s, mine) : at(s, s->dst, mine),
		    len(s, mine, mine + mask), partner, at(s, s->dst, theirs),
		    len(s, theirs, theirs + mask), e);
}

static int ag_ring(rounds *s, titan_err *e)
{
	int n = s->n, sb = (s->rank - s->k + n) % n, rb = (s->rank - s->k - 1 + 2 * n) % n;
	return post(s, (s->rank + 1) % n, ag_from(s, sb), len(s, sb, sb + 1), (s->rank - 1 + n) % n,
		    at(s, s->dst, rb), len(s, rb, rb + 1), e);
}

/* This rank's block (the caller's, or all-reduce's sum in the scratch) to its
 * place in dst, once the all-gather's first round is posted:
 * the copy overlaps the transfer instead of holding up the peer, which
 * waits for this rank's message (2 ranks, 2 MiB: 225 us a call against
 * 86 with the copy first). */
static void place_own(rounds *s)
{
	if (s->own == NULL)
		return;
	memcpy(at(s, s->dst, s->rank), s->own, len(s, s->rank, s->rank + 1) * s->es);
	s->own = NULL;
}

/* The blocks [lo, hi) split in two: this rank keeps the half its rank is
 * in and gives the other to rank ^ half, whose copy of the kept half it
 * receives.  The first round sends from the caller's buffer. */
static int rs_halving(rounds *s, titan_err *e)
{
	int half = (s->hi - s->lo) / 2, upper = s->rank - s->lo >= half;
	int keep = upper ? s->lo + half : s->lo, give = upper ? s->lo : s->lo + half;
	size_t nk = len(s, keep, keep + half), ng = len(s, give, give + half);
	char *partial = at(s, s->t0, keep);
	int rc;
	if (s->k == 0) {
		rc = post(s, s->rank ^ half, at(s, s->src, give), ng, s->rank ^ half, partial, nk, e);
		reduce_after(s, at(s, s->src, keep), partial, nk);
	} else {
		rc = post(s, s->rank ^ half, at(s, s->t0, give), ng, s->rank ^ half, s->t1, nk, e);
		reduce_after(s, s->t1, partial, nk);
	}
	s->lo = keep;
	s->hi = keep + half;
	return rc;
}

/* Round k receives block rank - k - 2 from the left (its partial sum, or
 * its own value in round 0), adds this rank's and passes it on in round
 * k + 1; the last round's is block rank.  t0 and t1 take turns. */
static int rs_ring(rounds *s, titan_err *e)
{
	int n = s->n, k = s->k;
	int sb = (s->rank - k - 1 + 2 * n) % n, rb = (s->rank - k - 2 + 2 * n) % n;
	char *in = k % 2 ? s->t1 : s->t0, *prev = k % 2 ? s->t0 : s->t1;
	const char *sbuf = k == 0 ? at(s, s->src, sb) : prev;
	int rc = post(s, (s->rank + 1) % n, sbuf, len(s, sb, sb + 1), (s->rank - 1 + n) % n, in,
		      len(s, rb, rb + 1), e);
	reduce_after(s, at(s, s->src, rb), in, len(s, rb, rb + 1));
	return rc;
}

static int ar_doubling(rounds *s, titan_err *e)
{
	int partner = s->rank ^ (1 << s->k);
	int rc = post(s, partner, s->dst, s->total, partner, s->t0, s->total, e);
	reduce_after(s, s->t0, s->dst, s->total);
	return rc;
}

/* Every receive, then every send, the peers in turn from rank + 1 (so that
 * the ranks do not all send to rank 0 first); this rank's own part copied. */
static int all_to_allv(rounds *s, titan_err *e)
{
	int n = s->n, *sc = s->v, *sd = sc + n, *rc_ = sd + n, *rd = rc_ + n, rc;
	for (int i = 1; i < n; i++) {
		int j = (s->rank + i) % n;
		if ((rc = MPI_Irecv(s->dst + (size_t)rd[j] * s->es, rc_[j], s->t, j, ROUNDS_TAG, s->h,
				    &s->req[s->nreq])) != MPI_SUCCESS)
			return comm_mpi_fail(rc, e, "MPI_Irecv");
		s->nreq++;
	}
	for (int i = 1; i < n; i++) {
		int j = (s->rank + i) % n;
		if ((rc = MPI_Isend(s->src + (size_t)sd[j] * s->es, sc[j], s->t, j, ROUNDS_TAG, s->h,
				    &s->req[s->nreq])) != MPI_SUCCESS)
			return comm_mpi_fail(rc, e, "MPI_Isend");
		s->nreq++;
	}
	move_bytes(s->dst + (size_t)rd[s->rank] * s->es, s->src + (size_t)sd[s->rank] * s->es,
		   (size_t)sc[s->rank] * s->es);
	return 0;
}

static int post_round(rounds *s, titan_err *e)
{
	switch (s->phases[s->ph]) {
	case AG_DOUBLING: return ag_doubling(s, e);
	case AG_RING: return ag_ring(s, e);
	case RS_HALVING: return rs_halving(s, e);
	case RS_RING: return rs_ring(s, e);
	case AR_DOUBLING: return ar_doubling(s, e);
	case ALL_TO_ALLV: return all_to_allv(s, e);
	}
	return err_set(e, "collective: unknown phase");
}

static void begin_phase(rounds *s)
{
	phase p = s->phases[s->ph];
	s->k = 0;
	s->lo = 0;
	s->hi = s->n;
	s->steps = p == ALL_TO_ALLV ? 1 : p == AG_RING || p == RS_RING ? s->n - 1 : log2i(s->n);
}

/* Reduce-scatter's result, the last partial sum, to its place; before an
 * all-gather (all-reduce), that round's first message carries it from the
 * scratch and the copy follows the post (place_own). */
static void end_phase(rounds *s)
{
	phase p = s->phases[s->ph];
	if (p != RS_HALVING && p != RS_RING)
		return;
	const char *sum = p == RS_HALVING ? at(s, s->t0, s->rank)
			: s->n % 2        ? s->t1
					  : s->t0; /* RS_RING: round n - 2's receipt */
	if (s->ph + 1 < s->nphases)
		s->own = sum;
	else
		memcpy(s->out, sum, len(s, s->rank, s->rank + 1) * s->es);
}

int rounds_test(rounds *s, int *done, titan_err *e)
{
	*done = 0;
	while (s->ph < s->nphases) {
		if (s->nreq > 0) {
			int flag = 0, rc = MPI_Testall(s->nreq, s->req, &flag, MPI_STATUSES_IGNORE);
			if (rc != MPI_SUCCESS)
				return comm_mpi_fail(rc, e, "MPI_Testall");
			if (!flag)
				return 0;
			s->nreq = 0;
			if (s->red_count > 0 &&
			    (rc = MPI_Reduce_local(s->red_in, s->red_inout, (int)s->red_count, s->t,
						   s->op)) != MPI_SUCCESS)
				return comm_mpi_fail(rc, e, "MPI_Reduce_local");
			s->red_count = 0;
			s->k++;
		} else if (s->k < s->steps) {
			if (post_round(s, e) != 0)
				return -1;
			place_own(s);
		} else {
			end_phase(s);
			if (++s->ph < s->nphases)
				begin_phase(s);
		}
	}
	if (s->t0_bytes > ROUNDS_SCRATCH_KEEP) {
		free(s->t0);
		s->t0 = NULL;
		s->t0_bytes = 0;
	}
	*done = 1;
	return 0;
}

/* The first round posted (the data starts moving before the first test). */
static int start(rounds *s, rounds **io, titan_err *e)
{
	int done;
	if (s->nphases > 0)
		begin_phase(s);
	if (rounds_test(s, &done, e) != 0) {
		if (s->nreq == 0) {
			rounds_free(s);
			return -1;
		}
		*io = s; /* messages in flight: the caller keeps s until MPI is done */
		return -1;
	}
	*io = s;
	return 0;
}

int rounds_all_gather(MPI_Comm h, const void *send, void *recv, size_t count, MPI_Datatype t,
		      rounds **io, titan_err *e)
{
	rounds *s = new_rounds(h, t, count, 1, io, e);
	if (s == NULL)
		return -1;
	int n = s->n;
	s->dst = recv;
	char *mine = at(s, recv, s->rank);
	if ((const char *)send == mine)
		;
	else if (n == 1)
		memcpy(mine, send, count * s->es);
	else
		s->own = send; /* placed by the first round (place_own) */
	s->phases[s->nphases++] = is_pow2(n) ? AG_DOUBLING : AG_RING;
	return start(s, io, e);
}

int rounds_reduce_scatter(MPI_Comm h, const void *send, void *recv, size_t count,
			  MPI_Datatype t, MPI_Op op, rounds **io, titan_err *e)
{
	rounds *s = new_rounds(h, t, count, 1, io, e);
	if (s == NULL)
		return -1;
	int n = s->n;
	s->op = op;
	s->src = send;
	s->out = recv;
	if (n == 1) {
		memcpy(recv, send, count * s->es);
	} else {
		if (scratch(s, e) != 0) {
			rounds_free(s);
			return -1;
		}
		s->phases[s->nphases++] = is_pow2(n) ? RS_HALVING : RS_RING;
	}
	return start(s, io, e);
}

int rounds_all_reduce(MPI_Comm h, const void *send, void *recv, size_t count, MPI_Datatype t,
		      MPI_Op op, rounds **io, titan_err *e)
{
	rounds *s = new_rounds(h, t, count, 0, io, e);
	if (s == NULL)
		return -1;
	s->op = op;
	s->src = send;
	s->dst = recv;
	s->out = at(s, recv, s->rank);
	int n = s->n;
	if (n > 1 && scratch(s, e) != 0) {
		rounds_free(s);
		return -1;
	}
	if (n == 1 || (n > 2 && is_pow2(n) && count * s->es <= ROUNDS_DOUBLING_MAX)) {
		if (send != recv)
			memcpy(recv, send, count * s->es);
		if (n > 1)
			s->phases[s->nphases++] = AR_DOUBLING;
	} else {
		/* Reduce-scatter into recv's own block, then all-gather in place:
		 * every read of send comes before the block is written (send may
		 * be recv). */
		s->phases[s->nphases++] = is_pow2(n) ? RS_HALVING : RS_RING;
		s->phases[s->nphases++] = is_pow2(n) ? AG_DOUBLING : AG_RING;
	}
	return start(s, io, e);
}

int rounds_all_to_allv(MPI_Comm h, const void *send, const int *scounts, const int *sdispls,
		       void *recv, const int *rcounts, const int *rdispls, MPI_Datatype t,
		       rounds **io, titan_err *e)
{
	rounds *s = new_rounds(h, t, 0, 0, io, e);
	if (s == NULL)
		return -1;
	size_t n = (size_t)s->n;
	if (s->v == NULL && (s->v = malloc(4 * n * sizeof *s->v)) == NULL) {
		rounds_free(s);
		return err_set(e, "all_to_allv: out of memory");
	}
	memcpy(s->v, scounts, n * sizeof *s->v);
	memcpy(s->v + n, sdispls, n * sizeof *s->v);
	memcpy(s->v + 2 * n, rcounts, n * sizeof *s->v);
	memcpy(s->v + 3 * n, rdispls, n * sizeof *s->v);
	s->src = send;
	s->dst = recv;
	s->phases[s->nphases++] = ALL_TO_ALLV;
	return start(s, io, e);
}

void rounds_free(rounds *s)
{
	if (s == NULL)
		return;
	free(s->t0);
	free(s->v);
	free(s);
}
