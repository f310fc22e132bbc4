/* torch's compute-only CSV form of a schedule (PipelineScheduleMulti._load_csv
 * and _dump_csv): a row per pipeline rank, a cell per action, "2F0" (stage 2,
 * forward, micro-batch 0), B, I, W likewise, "(0F3;3B1)OVERLAP_F_B" for
 * DualPipeV's overlapped pair, and empty cells for bubbles.  titan reads the
 * compute actions only: the sends, receives and FSDP actions of torch's
 * compute_comms form are derived by the engine, so a cell naming one is
 * refused. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/mfile.h"
#include "pp/pp.h"
#include "pp/pp_priv.h"

typedef struct cell {
	const char *name; /* the file, for messages */
	int row, col;
	titan_err *e;
} cell;

static int cell_err(const cell *c, const char *s, size_t n, const char *why)
{
	return err_set(c->e, "%s: row %d (rank %d), cell %d '%.*s': %s", c->name, c->row + 1,
		       c->row, c->col + 1, (int)(n > 60 ? 60 : n), s, why);
}

/* A decimal number of at most 6 digits at s[*i]; -1 when there is none. */
static int number(const char *s, size_t n, size_t *i)
{
	int v = 0, digits = 0;
	while (*i < n && isdigit((unsigned char)s[*i]) && digits < 7) {
		v = v * 10 + (s[*i] - '0');
		(*i)++;
		digits++;
	}
	return digits == 0 || digits > 6 ? -1 : v;
}

/* One action "2F0" spanning all of s[0..n). */
static int action(const cell *c, const char *s, size_t n, pp_action *a)
{
	static const char *const other[] = {
		"WAIT_REDUCE_GRAD", "WAIT_SEND_F", "WAIT_SEND_B", "REDUCE_GRAD", "UNSHARD",
		"RESHARD", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
	size_t i = 0;
	int stage = number(s, n, &i);
	if (stage < 0)
		return cell_err(c, s, n, "expected [stage][action type][microbatch], e.g. 2F0");
	for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
		size_t l = strlen(other[k]);
		if (n - i >= l && memcmp(s + i, other[k], l) == 0)
			return cell_err(c, s, n, "a communication or FSDP action: titan reads the "
					"compute-only form (F, B, I, W, OVERLAP_F_B) and derives "
					"these itself");
	}
	const char *ops = "FBIW", *o = i < n ? memchr(ops, s[i], 4) : NULL;
	if (o == NULL)
		return cell_err(c, s, n, "expected an action type F, B, I or W after the stage");
	i++;
	int mb = number(s, n, &i);
	if (mb < 0)
		return cell_err(c, s, n, "expected a microbatch number after the action type");
	if (i != n)
		return cell_err(c, s, n, "unexpected text after the microbatch");
	*a = (pp_action){.stage = stage, .mb = mb, .op = (uint8_t)(o - ops)};
	return 0;
}

static void trim(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s))
		(*s)++, (*n)--;
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		(*n)--;
	if (*n >= 2 && (*s)[0] == '"' && (*s)[*n - 1] == '"')
		(*s)++, *n -= 2;
}

/* One cell: nothing (a bubble), an action, or an overlapped pair. */
static int parse_cell(const cell *c, const char *s, size_t n, pp_list *l)
{
	trim(&s, &n);
	if (n == 0)
		return 0;
	if (s[0] != '(') {
		pp_action a;
		return action(c, s, n, &a) ||
		       pp_list_push(l, a.stage, (pp_op)a.op, a.mb, 0, c->e) ? -1 : 0;
	}
	const char *close = memchr(s, ')', n), *semi = memchr(s, ';', n);
	static const char tail[] = "OVERLAP_F_B";
	if (close == NULL || semi == NULL || semi > close ||
	    (size_t)(s + n - close - 1) != sizeof tail - 1 ||
	    memcmp(close + 1, tail, sizeof tail - 1) != 0)
		return cell_err(c, s, n, "expected (FORWARD;BACKWARD)OVERLAP_F_B");
	pp_action f, b;
	if (action(c, s + 1, (size_t)(semi - s - 1), &f) ||
	    action(c, semi + 1, (size_t)(close - semi - 1), &b))
		return -1;
	if (f.op != PP_F || (b.op != PP_B && b.op != PP_I))
		return cell_err(c, s, n, "an overlapped pair is a forward then a backward");
	return pp_list_push(l, f.stage, PP_F, f.mb, 1, c->e) ||
	       pp_list_push(l, b.stage, (pp_op)b.op, b.mb, 0, c->e) ? -1 : 0;
}

static int parse_row(const cell *base, const char *s, size_t n, pp_list *l)
{
	cell c = *base;
	for (size_t i = 0;; c.col++) {
		const char *comma = memchr(s + i, ',', n - i);
		size_t end = comma ? (size_t)(comma - s) : n;
		if (parse_cell(&c, s + i, end - i, l))
			return -1;
		if (comma == NULL)
			return 0;
		i = end + 1;
	}
}

int pp_schedule_parse_csv(const char *name, const char *text, size_t len, int n_ranks,
			  int n_stages, int n_mb, pp_schedule **out, titan_err *e)
{
	if (n_ranks < 1 || n_stages < 1 || n_mb < 1)
		return err_set(e, "%s: %d ranks, %d stages, %d micro-batches", name, n_ranks,
			       n_stages, n_mb);
	/* Rows as Python's csv module sees them: a final newline ends the last
	 * row; a blank line inside is a row with no actions (a rank). */
	int rows = 0;
	for (size_t i = 0; i < len; i++)
		rows += text[i] == '\n';
	rows += len > 0 && text[len - 1] != '\n';
	if (len > 0 && memchr(text, '\0', len))
		return err_set(e, "%s: not a text file (a NUL byte)", name);
	if (rows != n_ranks)
		return err_set(e, "%s: Schedule has incorrect number of ranks - expected %d, "
			       "actual %d", name, n_ranks, rows);
	pp_list *lists = calloc((size_t)n_ranks, sizeof *lists);
	int *where = malloc((size_t)n_stages * sizeof(int)), rc = 0;
	if (lists == NULL || where == NULL)
		rc = err_set(e, "%s: out of memory", name);
	size_t at = 0;
	for (int r = 0; r < n_ranks && rc == 0; r++) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - text) : len;
		size_t n = end - at;
		if (n && text[at + n - 1] == '\r')
			n--;
		cell c = {.name = name, .row = r, .e = e};
		rc = parse_row(&c, text + at, n, &lists[r]);
		at = end + 1;
	}
	/* Place each stage on the rank that runs it (torch infers the mapping
	 * the same way); pp_schedule_check refuses a stage run by two. */
	for (int s = 0; s < n_stages && rc == 0; s++)
		where[s] = -1;
	for (int r = 0; r < n_ranks && rc == 0; r++)
		for (size_t i = 0; i < lists[r].n; i++) {
			int s = lists[r].a[i].stage;
			if (s >= 0 && s < n_stages && where[s] < 0)
				where[s] = r;
		}
	for (int s = 0; s < n_stages && rc == 0; s++)
		if (where[s] < 0)
			rc = err_set(e, "%s: stage %d has no actions (%d stages expected)", name, s,
				     n_stages);
	pp_schedule *sch = NULL;
	if (rc == 0)
		rc = pp_schedule_from_lists("csv", n_ranks, n_stages, n_mb, where, lists, &sch, e);
	if (rc == 0 && pp_schedule_check(sch, e)) {
		err_prefix(e, "%s", name);
		pp_schedule_free(sch);
		rc = -1;
	}
	for (int r = 0; lists != NULL && r < n_ranks; r++)
		free(lists[r].a);
	free(lists);
	free(where);
	if (rc == 0)
		*out = sch;
	return rc;
}

int pp_schedule_read_csv(const char *path, int n_ranks, int n_stages, int n_mb,
			 pp_schedule **out, titan_err *e)
{
	mfile f;
	if (mfile_open(&f, path, e))
		return err_prefix(e, "parallelism.pipeline_parallel_schedule_csv");
	int rc = pp_schedule_parse_csv(path, (const char *)f.data, f.size, n_ranks, n_stages,
				       n_mb, out, e);
	mfile_close(&f);
	return rc;
}

int pp_schedule_write_csv(const pp_schedule *s, FILE *f)
{
	char buf[48], b2[48];
	for (int r = 0; r < s->n_ranks; r++) {
		for (int i = s->first[r]; i < s->first[r + 1]; i++) {
			const pp_action *a = &s->act[i];
			pp_action_str(a, buf, sizeof buf);
			if (a->overlap && i + 1 < s->first[r + 1]) {
				pp_action_str(&s->act[++i], b2, sizeof b2);
				fprintf(f, "%s(%s;%s)OVERLAP_F_B", i - 1 > s->first[r] ? "," : "", buf, b2);
			} else {
				fprintf(f, "%s%s", i > s->first[r] ? "," : "", buf);
			}
		}
		fputc('\n', f);
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
