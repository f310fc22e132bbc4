/* The action lists and their timeline, for people (titan-train
 * --print-schedule): the lists as torch's CSV cells, then a grid like torch's
 * _format_pipeline_order, a row per time unit of the unit-cost simulation,
 * where an action that lasts longer than a unit is continued by "..". */
#include <stdlib.h>
#include <string.h>

#include "pp/pp.h"
#include "pp/pp_priv.h"

/* The length of row without its trailing spaces. */
static int trimmed(const char *row, int len)
{
	while (len > 0 && row[len - 1] == ' ')
		len--;
	return len;
}

int pp_schedule_print(const pp_schedule *s, FILE *f, titan_err *e)
{
	int n = s->first[s->n_ranks];
	double *start = malloc((size_t)(n ? n : 1) * sizeof(double));
	pp_sim sim;
	if (start == NULL)
		return err_set(e, "pipeline schedule: out of memory");
	if (pp_simulate(s, &PP_COSTS_UNIT, &sim, start, e)) {
		free(start);
		return -1;
	}
	char buf[48];
	fprintf(f, "schedule %s: %d ranks, %d stages, %d micro-batches\n", s->name, s->n_ranks,
		s->n_stages, s->n_mb);
	for (int r = 0; r < s->n_ranks; r++) {
		fprintf(f, "rank %d (stages", r);
		for (int st = 0; st < s->n_stages; st++)
			if (s->stage_rank[st] == r)
				fprintf(f, " %d", st);
		fprintf(f, "):");
		for (int i = s->first[r]; i < s->first[r + 1]; i++) {
			pp_action_str(&s->act[i], buf, sizeof buf);
			fprintf(f, " %s%s", s->act[i].overlap ? "(" : "", buf);
			if (i > s->first[r] && s->act[i - 1].overlap)
				fputc(')', f);
		}
		fputc('\n', f);
	}
	/* The grid: units of time down, ranks across. */
	int steps = (int)(sim.makespan + 0.5), width = 9;
	size_t cap = (size_t)(s->n_ranks + 1) * (size_t)(width + 1) + 16;
	char *row = malloc(cap);
	int *at = calloc((size_t)s->n_ranks, sizeof(int));
	if (at == NULL || row == NULL) {
		free(row);
		free(at);
		free(start);
		return err_set(e, "pipeline schedule: out of memory");
	}
	fprintf(f, "timeline (F 1, B 2, I 1, W 1 units; bubble %.1f%%):\n", 100 * sim.bubble);
	int len = snprintf(row, cap, "%-8s", "");
	for (int r = 0; r < s->n_ranks; r++)
		len += snprintf(row + len, cap - (size_t)len, " %-*s", width - 1,
				(snprintf(buf, sizeof buf, "rank %d", r), buf));
	fprintf(f, "%.*s\n", trimmed(row, len), row);
	for (int t = 0; t < steps; t++) {
		len = snprintf(row, cap, "step %-3d", t);
		for (int r = 0; r < s->n_ranks; r++) {
			const char *cell = "";
			int i = s->first[r] + at[r];
			while (i < s->first[r + 1] &&
			       start[i] + PP_COSTS_UNIT.op[s->act[i].op] <= t + 0.5)
				i = s->first[r] + ++at[r];
			if (i < s->first[r + 1] && start[i] <= t + 0.5) {
				pp_action_str(&s->act[i], buf, sizeof buf);
				cell = start[i] > t - 0.5 ? buf : "..";
			}
			len += snprintf(row + len, cap - (size_t)len, " %-*s", width - 1, cell);
		}
		fprintf(f, "%.*s\n", trimmed(row, len), row);
	}
	free(row);
	free(at);
	free(start);
	return ferror(f) ? err_set(e, "writing the schedule failed") : 0;
}
