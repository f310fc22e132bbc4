/* Proving a schedule sound, and running it on ideal ranks: both walk the
 * dependencies between actions (an F needs the F of the stage before on its
 * micro-batch, a B or I the B or I of the stage after, a W its I). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "pp/pp.h"
#include "pp/pp_priv.h"

const pp_costs PP_COSTS_UNIT = {.op = {[PP_F] = 1, [PP_B] = 2, [PP_I] = 1, [PP_W] = 1},
				.send = 0};

static const char op_char[PP_OP_COUNT] = {'F', 'B', 'I', 'W'};

void pp_action_str(const pp_action *a, char *buf, size_t n)
{
	snprintf(buf, n, "%dF%d", a->stage, a->mb);
	buf[strcspn(buf, "F")] = op_char[a->op < PP_OP_COUNT ? a->op : 0];
}

/* torch's names of the ops in its messages. */
static const char *op_long(int op)
{
	static const char *const names[PP_OP_COUNT] = {
		"Forward", "Full Backward", "Backward Input", "Backward Weight"};
	return names[op];
}

/* Index of (stage, mb, op) in per-action tables. */
static size_t key(const pp_schedule *s, int stage, int mb, int op)
{
	return ((size_t)stage * (size_t)s->n_mb + (size_t)mb) * PP_OP_COUNT + (size_t)op;
}

/* Ranges, placement, each action once, and order within a rank. */
static int check_actions(const pp_schedule *s, titan_err *e)
{
	size_t nk = (size_t)s->n_stages * (size_t)s->n_mb * PP_OP_COUNT;
	char *seen = calloc(nk ? nk : 1, 1);
	int *on = malloc((size_t)s->n_stages * sizeof(int));
	if (seen == NULL || on == NULL) {
		free(seen);
		free(on);
		return err_set(e, "pipeline schedule: out of memory");
	}
	for (int i = 0; i < s->n_stages; i++)
		on[i] = -1;
	int rc = 0;
	char str[48];
	for (int r = 0; r < s->n_ranks && rc == 0; r++) {
		for (int i = s->first[r]; i < s->first[r + 1] && rc == 0; i++) {
			const pp_action *a = &s->act[i];
			int step = i - s->first[r];
			pp_action_str(a, str, sizeof str);
			if (a->stage < 0 || a->stage >= s->n_stages || a->op >= PP_OP_COUNT) {
				rc = err_set(e, "rank %d, action %d (%s): stage %d out of range "
					     "(%d stages)", r, step, str, a->stage, s->n_stages);
				break;
			}
			if (a->mb < 0 || a->mb >= s->n_mb) {
				rc = err_set(e, "rank %d, action %d (%s): micro-batch %d out of range "
					     "(%d micro-batches)", r, step, str, a->mb, s->n_mb);
				break;
			}
			if (on[a->stage] >= 0 && on[a->stage] != r) {
				rc = err_set(e, "rank %d, action %d (%s): stage %d is also run by "
					     "rank %d", r, step, str, a->stage, on[a->stage]);
				break;
			}
			on[a->stage] = r;
			char *k = seen + key(s, a->stage, a->mb, 0);
			const char *why = NULL;
			if (k[a->op])
				why = "a second time";
			else if (a->op == PP_W && !k[PP_I])
				why = "without first running Backward Input";
			else if ((a->op == PP_B || a->op == PP_I) && !k[PP_F])
				why = "without first running Forward";
			else if ((a->op == PP_B && k[PP_I]) || (a->op == PP_I && k[PP_B]))
				why = "after a backward of the other kind (B, or I and W)";
			if (why) {
				rc = err_set(e, "rank %d, action %d (%s): Running %s for stage %d, "
					     "microbatch %d %s", r, step, str, op_long(a->op),
					     a->stage, a->mb, why);
				break;
			}
			k[a->op] = 1;
		}
	}
	for (int st = 0; st < s->n_stages && rc == 0; st++) {
		if (on[st] < 0) {
			rc = err_set(e, "stage %d is run by no rank", st);
			break;
		}
		for (int m = 0; m < s->n_mb && rc == 0; m++) {
			const char *k = seen + key(s, st, m, 0);
			if (!k[PP_F])
				rc = err_set(e, "stage %d, microbatch %d: no Forward", st, m);
			else if (!k[PP_B] && !k[PP_I])
				rc = err_set(e, "stage %d, microbatch %d: no backward (B, or I and W)",
					     st, m);
			else if (k[PP_I] && !k[PP_W])
				rc = err_set(e, "stage %d, microbatch %d: Backward Input without its "
					     "Backward Weight (I and W must have equal counts)", st, m);
		}
	}
	for (int st = 0; st < s->n_stages && rc == 0; st++)
		if (on[st] != s->stage_rank[st])
			rc = err_set(e, "stage %d: run by rank %d, placed on rank %d", st, on[st],
				     s->stage_rank[st]);
	free(seen);
	free(on);
	return rc;
}

/* The action whose output a (checked) action needs from another stage or its
 * own earlier pass, as a key, or -1 when it needs none.  For a backward the
 * stage after may have run B or I: *alt gets the other. */
static long long dep_key(const pp_schedule *s, const pp_action *a, long long *alt)
{
	*alt = -1;
	switch (a->op) {
	case PP_F:
		return a->stage == 0 ? -1 : (long long)key(s, a->stage - 1, a->mb, PP_F);
	case PP_B:
	case PP_I:
		if (a->stage == s->n_stages - 1)
			return (long long)key(s, a->stage, a->mb, PP_F);
		*alt = (long long)key(s, a->stage + 1, a->mb, PP_I);
		return (long long)key(s, a->stage + 1, a->mb, PP_B);
	default:
		return (long long)key(s, a->stage, a->mb, PP_I);
	}
}

/* Run the (checked) schedule on ideal ranks.  Each rank runs its list in
 * order; an action waits for its rank and for its input.  Start times are
 * those of the longest path through the dependencies, whatever order the
 * ranks are visited in; a pass in which no rank moves while some have work
 * left is a deadlock, reported with what each stuck rank waits for. */
static int run(const pp_schedule *s, const pp_costs *c, pp_sim *out, double *start,
	       titan_err *e)
{
	size_t nk = (size_t)s->n_stages * (size_t)s->n_mb * PP_OP_COUNT;
	double *done = malloc((nk ? nk : 1) * sizeof(double)); /* end time, or -1 */
	int *pos = calloc((size_t)s->n_ranks, sizeof(int));
	double *free_at = calloc((size_t)s->n_ranks, sizeof(double));
	double *busy = calloc((size_t)s->n_ranks, sizeof(double));
	int rc = 0;
	if (done == NULL || pos == NULL || free_at == NULL || busy == NULL) {
		rc = err_set(e, "pipeline schedule: out of memory");
		goto out;
	}
	for (size_t i = 0; i < nk; i++)
		done[i] = -1;
	int left = s->first[s->n_ranks];
	while (left > 0) {
		int moved = 0;
		for (int r = 0; r < s->n_ranks; r++) {
			for (int i; (i = s->first[r] + pos[r]) < s->first[r + 1]; pos[r]++) {
				const pp_action *a = &s->act[i];
				long long alt, d = dep_key(s, a, &alt);
				double ready = 0;
				if (d >= 0) {
					double t = done[d] >= 0 ? done[d] : alt >= 0 ? done[alt] : -1;
					if (t < 0)
						break;
					int from = a->op == PP_F ? a->stage - 1 : a->op == PP_W ||
						   a->stage == s->n_stages - 1 ? a->stage : a->stage + 1;
					ready = t + (s->stage_rank[from] != r ? c->send : 0);
				}
				double t0 = ready > free_at[r] ? ready : free_at[r];
				double cost = c->op[a->op];
				if (start)
					start[i] = t0;
				free_at[r] = t0 + cost;
				busy[r] += cost;
				done[key(s, a->stage, a->mb, a->op)] = t0 + cost;
				moved = 1;
				left--;
			}
		}
		if (!moved)
			break;
	}
	if (left > 0) {
		char msg[900] = "", str[48], want[48];
		size_t n = 0;
		for (int r = 0; r < s->n_ranks && n < sizeof msg - 100; r++) {
			int i = s->first[r] + pos[r];
			if (i >= s->first[r + 1])
				continue;
			const pp_action *a = &s->act[i];
			pp_action_str(a, str, sizeof str);
			pp_action w = *a;
			w.op = a->op == PP_F ? PP_F : a->op == PP_W ? PP_I : PP_B;
			w.stage = a->op == PP_F ? a->stage - 1 : a->op == PP_W ? a->stage : a->stage + 1;
			pp_action_str(&w, want, sizeof want);
			if (a->op == PP_B || a->op == PP_I)
				strcat(want, " or I");
			n += (size_t)snprintf(msg + n, sizeof msg - n, "%srank %d waits at action %d "
					      "(%s) for %s of rank %d", n ? "; " : "", r, pos[r],
					      str, want, s->stage_rank[w.stage]);
		}
		rc = err_set(e, "the schedule deadlocks: %s", msg);
		goto out;
	}
	if (out) {
		double span = 0, most = 0, total = 0;
		for (int r = 0; r < s->n_ranks; r++) {
			span = free_at[r] > span ? free_at[r] : span;
			most = busy[r] > most ? busy[r] : most;
			total += busy[r];
		}
		out->makespan = span;
		out->busy = most;
		out->bubble = span > 0 ? 1 - total / s->n_ranks / span : 0;
	}
out:
	free(done);
	free(pos);
	free(free_at);
	free(busy);
	return rc;
}

int pp_schedule_check(const pp_schedule *s, titan_err *e)
{
	if (check_actions(s, e))
		return -1;
	return run(s, &PP_COSTS_UNIT, NULL, NULL, e);
}

int pp_simulate(const pp_schedule *s, const pp_costs *c, pp_sim *out, double *start,
		titan_err *e)
{
	if (check_actions(s, e))
		return -1;
	return run(s, c, out, start, e);
}

static uint32_t crc_int(uint32_t crc, int32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	return crc32c(crc, b, 4);
}

uint32_t pp_schedule_crc(const pp_schedule *s)
{
	uint32_t crc = crc_int(crc_int(crc_int(0, s->n_ranks), s->n_stages), s->n_mb);
	for (int i = 0; i < s->n_stages; i++)
		crc = crc_int(crc, s->stage_rank[i]);
	for (int r = 0; r < s->n_ranks; r++) {
		crc = crc_int(crc, s->first[r + 1] - s->first[r]);
		for (int i = s->first[r]; i < s->first[r + 1]; i++) {
			const pp_action *a = &s->act[i];
			crc = crc_int(crc_int(crc, a->stage), a->mb);
			crc = crc_int(crc, a->op | a->overlap << 8);
		}
	}
	return crc;
}
