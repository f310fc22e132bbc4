/* The schedule generators, after torch.distributed.pipelining's schedule
 * classes (schedules.py): the order each rank EXECUTES its actions in, which
 * for the single-stage schedules is the order of _step_microbatches (torch's
 * printable pipeline_order of 1F1B numbers the last rank's micro-batches
 * wrongly) and for the others the runtime's pipeline_order without its empty
 * slots. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pp/pp.h"
#include "pp/pp_priv.h"

static const char *const kind_names[PP_KIND_COUNT] = {
	"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
	"ZBVZeroBubble", "DualPipeV",
};

int pp_kind_parse(const char *name, pp_kind *k, titan_err *e)
{
	for (int i = 0; i < PP_KIND_COUNT; i++)
		if (strcasecmp(name, kind_names[i]) == 0) {
			*k = (pp_kind)i;
			return 0;
		}
	/* torch also names its base classes; titan builds the concrete ones. */
	return err_set(e, "Unknown schedule name '%s'. The valid options are ['GPipe', '1F1B', "
		       "'Interleaved1F1B', 'LoopedBFS', 'InterleavedZeroBubble', "
		       "'ZBVZeroBubble', 'DualPipeV']", name);
}

const char *pp_kind_name(pp_kind k)
{
	return k < PP_KIND_COUNT ? kind_names[k] : "?";
}

int pp_kind_single(pp_kind k)
{
	return k == PP_GPIPE || k == PP_1F1B;
}

int pp_kind_v(pp_kind k)
{
	return k == PP_ZBV || k == PP_DUALPIPEV;
}

/* torch's generate_stage_to_rank_mapping: "loop" deals stages round the ranks;
 * "v" goes down the ranks and back up, staying on the border rank. */
int pp_stage_rank(int v_style, int n_ranks, int n_stages, int s)
{
	(void)n_stages;
	if (!v_style)
		return s % n_ranks;
	int lap = s / n_ranks, pos = s % n_ranks;
	return lap % 2 == 0 ? pos : n_ranks - 1 - pos;
}

/* ---- building the lists ---- */

int pp_list_push(pp_list *l, int stage, pp_op op, int mb, int overlap, titan_err *e)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		pp_action *a = realloc(l->a, cap * sizeof *a);
		if (a == NULL)
			return err_set(e, "pipeline schedule: out of memory");
		l->a = a;
		l->cap = cap;
	}
	l->a[l->n++] = (pp_action){.stage = stage, .mb = mb, .op = (uint8_t)op,
				   .overlap = (uint8_t)overlap};
	return 0;
}

int pp_schedule_from_lists(const char *name, int n_ranks, int n_stages, int n_mb,
			   const int *stage_rank, pp_list *lists, pp_schedule **out,
			   titan_err *e)
{
	pp_schedule *s = calloc(1, sizeof *s);
	size_t total = 0;
	for (int r = 0; r < n_ranks; r++)
		total += lists[r].n;
	if (s == NULL || !(s->stage_rank = malloc((size_t)n_stages * sizeof(int))) ||
	    !(s->first = malloc(((size_t)n_ranks + 1) * sizeof(int))) ||
	    !(s->act = malloc((total ? total : 1) * sizeof(pp_action)))) {
		pp_schedule_free(s);
		return err_set(e, "pipeline schedule: out of memory");
	}
	snprintf(s->name, sizeof s->name, "%s", name);
	s->n_ranks = n_ranks;
	s->n_stages = n_stages;
	s->n_mb = n_mb;
	memcpy(s->stage_rank, stage_rank, (size_t)n_stages * sizeof(int));
	size_t at = 0;
	for (int r = 0; r < n_ranks; r++) {
		s->first[r] = (int)at;
		if (lists[r].n)
			memcpy(s->act + at, lists[r].a, lists[r].n * sizeof(pp_action));
		at += lists[r].n;
	}
	s->first[n_ranks] = (int)at;
	*out = s;
	return 0;
}

void pp_schedule_free(pp_schedule *s)
{
	if (s == NULL)
		return;
	free(s->stage_rank);
	free(s->first);
	free(s->act);
	free(s);
}

/* What one rank's generator knows: its rank, the pipeline's shape, and per
 * stage the next micro-batch of each op (torch's fwd/bwd/weight counters). */
typedef struct gen {
	int r, p, v, n;  /* rank, ranks, stages per rank, micro-batches */
	int n_stages;
	int *next;       /* (n_stages * PP_OP_COUNT) */
	pp_list *l;
	titan_err *e;
} gen;

static int emit(gen *g, int stage, pp_op op)
{
	int *c = &g->next[stage * PP_OP_COUNT + op];
	return pp_list_push(g->l, stage, op, (*c)++, 0, g->e);
}

/* ScheduleGPipe: every forward, then every backward, in micro-batch order. */
static int gen_gpipe(gen *g)
{
	for (int m = 0; m < g->n; m++)
		if (emit(g, g->r, PP_F))
			return -1;
	for (int m = 0; m < g->n; m++)
		if (emit(g, g->r, PP_B))
			return -1;
	return 0;
}

/* Schedule1F1B._step_microbatches: min(n, p - stage) warm-up forwards, then
 * backward-forward pairs ("1B1F") until the forwards run out, then the
 * remaining backwards. */
static int gen_1f1b(gen *g)
{
	int warm = g->n < g->p - g->r ? g->n : g->p - g->r, f = 0, b = 0;
	for (; f < warm; f++)
		if (emit(g, g->r, PP_F))
			return -1;
	for (;;) {
		if (emit(g, g->r, PP_B))
			return -1;
		b++;
		if (f == g->n)
			break;
		if (emit(g, g->r, PP_F))
			return -1;
		f++;
	}
	for (; b < g->n; b++)
		if (emit(g, g->r, PP_B))
			return -1;
	return 0;
}

/* ScheduleLoopedBFS: each local stage in turn runs every micro-batch forward;
 * the backwards go the other way, last stage first, micro-batches reversed. */
static int gen_looped_bfs(gen *g)
{
	for (int k = 0; k < g->v; k++)
		for (int m = 0; m < g->n; m++)
			if (pp_list_push(g->l, g->r + k * g->p, PP_F, m, 0, g->e))
				return -1;
	for (int k = g->v - 1; k >= 0; k--)
		for (int m = g->n - 1; m >= 0; m--)
			if (pp_list_push(g->l, g->r + k * g->p, PP_B, m, 0, g->e))
				return -1;
	return 0;
}

/* The interleaved schedules (_get_1f1b_rank_ops): warm-up forwards, then a
 * forward and a backward per step, then the remaining backwards; micro-batches
 * go round the local stages in rounds of mpr.  With zero_bubble the backward
 * is I, and from step `rank` of the steady phase on each I is followed by the
 * W of the oldest pending I (the rest at the end). */
static int gen_interleaved(gen *g, int zero_bubble)
{
	int rounds = g->n / g->p > 1 ? g->n / g->p : 1, mpr = g->n / rounds;
	int warm = (g->v - 1) * mpr + (zero_bubble ? 1 : 2) * (g->p - 1 - g->r);
	int ops = g->v * g->n;
	warm = warm < ops ? warm : ops;
	int steady = ops - warm, total = warm + steady + warm;
	int *bops = malloc((size_t)(ops > 0 ? ops : 1) * sizeof(int)), nb = 0, nw = 0;
	if (bops == NULL)
		return err_set(g->e, "pipeline schedule: out of memory");
	pp_op bwd = zero_bubble ? PP_I : PP_B;
	int rc = 0;
	for (int op = 0; op < total && rc == 0; op++) {
		if (op < warm + steady)
			rc = emit(g, ((op / mpr) % g->v) * g->p + g->r, PP_F);
		if (op < warm || rc)
			continue;
		int k = g->v - 1 - ((op - warm) / mpr) % g->v;
		rc = emit(g, k * g->p + g->r, bwd);
		bops[nb++] = op;
		if (rc == 0 && zero_bubble && op - warm >= g->r) {
			int w = bops[nw++];
			rc = emit(g, (g->v - 1 - ((w - warm) / mpr) % g->v) * g->p + g->r, PP_W);
		}
	}
	while (rc == 0 && zero_bubble && nw < nb) {
		int w = bops[nw++];
		rc = emit(g, (g->v - 1 - ((w - warm) / mpr) % g->v) * g->p + g->r, PP_W);
	}
	free(bops);
	return rc;
}

/* ScheduleZBVZeroBubble: chunk 0 (stage r) and chunk 1 (stage 2p-1-r) with
 * warm-up, steady F-I-W triples on alternating chunks, and a cool-down; built
 * for max(2p - 1, n) micro-batches, the actions of micro-batches past n
 * dropped, as torch does. */
static int zbv_push(gen *g, int stage, pp_op op, int mb)
{
	return mb < g->n ? pp_list_push(g->l, stage, op, mb, 0, g->e) : 0;
}

static int gen_zbv(gen *g)
{
	int p = g->p, r = g->r, n = 2 * p - 1 > g->n ? 2 * p - 1 : g->n;
	int c0 = r, c1 = 2 * p - 1 - r;
	int f0 = 0, f1 = 0, b0 = 0, b1 = 0, rc = 0;
	for (int i = 0; i < 2 * (p - r) - 1 && rc == 0; i++)
		rc = zbv_push(g, c0, PP_F, f0++);
	for (int i = 0; i < r && rc == 0; i++) {
		rc = zbv_push(g, c1, PP_F, f1++);
		rc = rc ? rc : zbv_push(g, c0, PP_F, f0++);
	}
	for (int i = 0; i < p - r && rc == 0; i++) {
		rc = zbv_push(g, c1, PP_F, f1++);
		rc = rc ? rc : zbv_push(g, c1, PP_I, b1);
		rc = rc ? rc : zbv_push(g, c1, PP_W, b1++);
	}
	while (rc == 0 && (f1 < f0 || f0 < n)) {
		if (f0 < n)
			rc = zbv_push(g, c0, PP_F, f0++);
		rc = rc ? rc : zbv_push(g, c0, PP_I, b0);
		rc = rc ? rc : zbv_push(g, c0, PP_W, b0++);
		rc = rc ? rc : zbv_push(g, c1, PP_F, f1++);
		rc = rc ? rc : zbv_push(g, c1, PP_I, b1);
		rc = rc ? rc : zbv_push(g, c1, PP_W, b1++);
	}
	int w0 = b0, w1 = b1;
	for (int i = 0; i < r && rc == 0; i++) {
		rc = zbv_push(g, c0, PP_I, b0++);
		rc = rc ? rc : zbv_push(g, c1, PP_I, b1++);
	}
	for (int i = 0; i < p - r && rc == 0; i++) {
		rc = zbv_push(g, c0, PP_I, b0++);
		rc = rc ? rc : zbv_push(g, c0, PP_W, w0++);
	}
	while (rc == 0 && w1 < b1)
		rc = zbv_push(g, c1, PP_W, w1++);
	while (rc == 0 && w0 < b0)
		rc = zbv_push(g, c0, PP_W, w0++);
	return rc;
}

/* ScheduleDualPipeV (DeepSeek's DualPipe folded into a V): forwards, then
 * zero-bubble I-W-F, then overlapped forward-backward pairs of the two
 * chunks, then backwards, the later ones split into I and W whose W fill the
 * tail.  A full B counts as that stage's I and W. */
typedef struct dpv {
	gen *g;
	int *wq_stage, *wq_mb, wq_head, wq_n; /* pending W, oldest first */
} dpv;

static int dpv_counter(dpv *d, int stage, pp_op op)
{
	return d->g->next[stage * PP_OP_COUNT + op];
}

static int dpv_action(dpv *d, int stage, pp_op op, int overlap)
{
	gen *g = d->g;
	int key = op == PP_B ? PP_I : op, mb = dpv_counter(d, stage, (pp_op)key);
	if (pp_list_push(g->l, stage, op, mb, overlap, g->e))
		return -1;
	g->next[stage * PP_OP_COUNT + key]++;
	if (op == PP_B)
		g->next[stage * PP_OP_COUNT + PP_W]++;
	if (op == PP_I) {
		d->wq_stage[d->wq_n] = stage;
		d->wq_mb[d->wq_n++] = mb;
	}
	return 0;
}

static int dpv_weight(dpv *d)
{
	if (d->wq_head == d->wq_n)
		return 0;
	int s = d->wq_stage[d->wq_head], mb = d->wq_mb[d->wq_head++];
	return pp_list_push(d->g->l, s, PP_W, mb, 0, d->g->e);
}

static int dpv_overlap(dpv *d, int fstage, int bstage)
{
	return dpv_action(d, fstage, PP_F, 1) || dpv_action(d, bstage, PP_B, 0) ? -1 : 0;
}

static int gen_dualpipev(gen *g)
{
	int p = g->p, r = g->r, s0 = r, s1 = 2 * p - 1 - r, rc = 0;
	dpv d = {.g = g};
	d.wq_stage = malloc((size_t)(2 * g->n + 1) * sizeof(int));
	d.wq_mb = malloc((size_t)(2 * g->n + 1) * sizeof(int));
	if (d.wq_stage == NULL || d.wq_mb == NULL) {
		free(d.wq_stage);
		free(d.wq_mb);
		return err_set(g->e, "pipeline schedule: out of memory");
	}
	for (int i = 0; i < (p - r - 1) * 2 && rc == 0; i++)
		rc = dpv_action(&d, s0, PP_F, 0);
	for (int i = 0; i < r + 1 && rc == 0; i++)
		rc = dpv_action(&d, s0, PP_F, 0) || dpv_action(&d, s1, PP_F, 0);
	for (int i = 0; i < p - r - 1 && rc == 0; i++)
		rc = dpv_action(&d, s1, PP_I, 0) || dpv_weight(&d) || dpv_action(&d, s1, PP_F, 0);
	for (int i = 0; i < g->n - 2 * p + r + 1 && rc == 0; i++) {
		if (i == 0 && r == p - 1) /* not overlapped, to shorten the bubble */
			rc = dpv_action(&d, s0, PP_F, 0) || dpv_action(&d, s1, PP_B, 0);
		else
			rc = dpv_overlap(&d, s0, s1);
		rc = rc ? rc : dpv_overlap(&d, s1, s0);
	}
	for (int i = 0; i < p - r - 1 && rc == 0; i++)
		rc = dpv_action(&d, s1, PP_B, 0) || dpv_overlap(&d, s1, s0);
	int zb = 0;
	for (int i = 0; i < r + 1 && rc == 0; i++) {
		if (i == (r + 1) / 2 && r % 2 == 1)
			zb = 1;
		rc = dpv_action(&d, s1, zb ? PP_I : PP_B, 0);
		if (i == (r + 1) / 2 && r % 2 == 0)
			zb = 1;
		rc = rc ? rc : dpv_action(&d, s0, zb ? PP_I : PP_B, 0);
	}
	for (int i = 0; i < p - r - 1 && rc == 0; i++)
		rc = dpv_weight(&d) || dpv_action(&d, s0, zb ? PP_I : PP_B, 0);
	for (int i = 0; i < r + 1 && rc == 0; i++)
		rc = dpv_weight(&d);
	free(d.wq_stage);
	free(d.wq_mb);
	return rc ? -1 : 0;
}

/* torch's refusals of micro-batch counts, with its messages. */
static int check_args(pp_kind k, int p, int v, int n, titan_err *e)
{
	int stages = p * v;
	if (p < 1 || v < 1 || n < 1)
		return err_set(e, "pipeline schedule %s: %d ranks x %d stages per rank with %d "
			       "micro-batches", pp_kind_name(k), p, v, n);
	if (pp_kind_single(k) && v != 1)
		return err_set(e, "%s runs one stage per rank, not %d", pp_kind_name(k), v);
	if (pp_kind_v(k) && v != 2)
		return err_set(e, "ZBV requires exactly 2 stages per rank, but got %d.", v);
	if (k == PP_1F1B && n < stages)
		return err_set(e, "Number of microbatches (%d) must be greater than or equal to "
			       "the number of stages (%d).", n, stages);
	if (k == PP_DUALPIPEV && n < stages)
		return err_set(e, "DualPipeV requires at least as many microbatches as stages, but "
			       "got %d microbatches and %d stages.", n, stages);
	if (k == PP_INTERLEAVED_1F1B || k == PP_INTERLEAVED_ZB) {
		int rounds = n / p > 1 ? n / p : 1;
		if (n % rounds)
			return err_set(e, "%s requires the number of microbatches to be a multiple "
				       "of the number of rounds (%d), but got %d.",
				       k == PP_INTERLEAVED_1F1B ? "Interleaved 1F1B" : "Zero bubble",
				       rounds, n);
	}
	return 0;
}

static int gen_rank(pp_kind k, gen *g)
{
	switch (k) {
	case PP_GPIPE: return gen_gpipe(g);
	case PP_1F1B: return gen_1f1b(g);
	case PP_LOOPED_BFS: return gen_looped_bfs(g);
	case PP_INTERLEAVED_1F1B: return gen_interleaved(g, 0);
	case PP_INTERLEAVED_ZB: return gen_interleaved(g, 1);
	case PP_ZBV: return gen_zbv(g);
	case PP_DUALPIPEV: return gen_dualpipev(g);
	default: return err_set(g->e, "pipeline schedule: unknown kind %d", (int)k);
	}
}

int pp_schedule_build(pp_kind k, int p, int v, int n, pp_schedule **out, titan_err *e)
{
	if (check_args(k, p, v, n, e))
		return -1;
	int ns = p * v, rc = 0;
	pp_list *lists = calloc((size_t)p, sizeof *lists);
	int *next = malloc((size_t)ns * PP_OP_COUNT * sizeof(int));
	int *where = malloc((size_t)ns * sizeof(int));
	if (lists == NULL || next == NULL || where == NULL)
		rc = err_set(e, "pipeline schedule: out of memory");
	for (int s = 0; s < ns && rc == 0; s++)
		where[s] = pp_stage_rank(pp_kind_v(k), p, ns, s);
	for (int r = 0; r < p && rc == 0; r++) {
		memset(next, 0, (size_t)ns * PP_OP_COUNT * sizeof(int));
		gen g = {.r = r, .p = p, .v = v, .n = n, .n_stages = ns, .next = next,
			 .l = &lists[r], .e = e};
		rc = gen_rank(k, &g);
	}
	if (rc == 0)
		rc = pp_schedule_from_lists(pp_kind_name(k), p, ns, n, where, lists, out, e);
	for (int r = 0; lists != NULL && r < p; r++)
		free(lists[r].a);
	free(lists);
	free(next);
	free(where);
	return rc;
}

/* Bubble fractions under unit costs (F 1, B 2 = I 1 + W 1): the idle share of
 * the makespan, where the schedule's analysis gives one (NaN elsewhere).
 * - GPipe, 1F1B (GPipe paper; PipeDream-Flush): p - 1 idle F + B slots
 *   against m: (p - 1) / (m + p - 1), any m.
 * - Interleaved1F1B (Narayanan et al. 2021, Megatron-LM) and LoopedBFS
 *   (Lamy-Poirier 2022): the ramp shrinks by v: (p - 1) / (v m + p - 1), for
 *   m >= p (whole rounds of p micro-batches).
 * - InterleavedZeroBubble (ZB-H1 of Qi et al. 2024, here interleaved): W
 *   fills the cool-down, leaving (p - 1)(F + I - W) = p - 1 units against
 *   3 v m of work: (p - 1) / (3 v m + p - 1), for m >= p.
 * - ZBVZeroBubble and DualPipeV: no idle slot but the pipe's fill, p - 1
 *   forward units that no W can cover as none is ready yet, the same
 *   (p - 1) / (3 v m + p - 1), for m >= 2p - 1 (ZBV) and m >= 2p (DualPipeV).
 *   (The ZB-V paper calls this "zero bubble" as it counts the fill apart;
 *   DualPipe's (PP/2 - 1)(F&B + B - 3W) counts an overlapped F&B as shorter
 *   than F + B, which unit costs do not model.) */
double pp_bubble_formula(pp_kind k, int p, int v, int m)
{
	double P = p, V = v, M = m;
	switch (k) {
	case PP_GPIPE:
	case PP_1F1B: return (P - 1) / (M + P - 1);
	case PP_INTERLEAVED_1F1B:
	case PP_LOOPED_BFS: return m >= p ? (P - 1) / (V * M + P - 1) : NAN;
	case PP_INTERLEAVED_ZB: return m >= p ? (P - 1) / (3 * V * M + P - 1) : NAN;
	case PP_ZBV: return m >= 2 * p - 1 ? (P - 1) / (3 * V * M + P - 1) : NAN;
	case PP_DUALPIPEV: return m >= 2 * p ? (P - 1) / (3 * V * M + P - 1) : NAN;
	default: return NAN;
	}
}
