/* titan's pipeline schedules against torch's: tests/pp/golden/ holds what
 * torch.distributed.pipelining executes on each rank for every schedule over
 * a grid of pipeline degrees, stages per rank and micro-batch counts (or
 * torch's refusal), torchtitan's stage split over a grid, and torch's reading
 * of schedule CSVs, good and bad (scripts/pp_schedules_golden.py wrote them).
 * Each generated schedule must equal torch's order action for action, refuse
 * what torch refuses with torch's words, and pass titan's own check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp/pp.h"

static const char *golden(const char *name)
{
	static char path[600];
	const char *root = getenv("ROOT");
	snprintf(path, sizeof path, "%s/tests/pp/golden/%s", root ? root : ".", name);
	return path;
}

/* The golden file's lines, NUL-terminated in one buffer. */
typedef struct lines {
	char *buf;
	char **v;
	int n;
} lines;

static void lines_read(lines *l, const char *name)
{
	FILE *f = fopen(golden(name), "rb");
	if (f == NULL)
		fail_msg("%s: cannot open (scripts/pp_schedules_golden.py writes it)", golden(name));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	l->buf = malloc((size_t)n + 1);
	assert_int_equal(fread(l->buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	l->buf[n] = '\0';
	l->v = malloc(((size_t)n + 1) * sizeof(char *));
	l->n = 0;
	for (char *p = l->buf; *p;) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		l->v[l->n++] = p;
		p = nl ? nl + 1 : p + strlen(p);
	}
}

static void lines_free(lines *l)
{
	free(l->buf);
	free(l->v);
}

/* Rank r's actions as the golden file writes them: "0F0 0F1 2F0 ...". */
static void rank_str(const pp_schedule *s, int r, char *out, size_t n)
{
	size_t at = 0;
	out[0] = '\0';
	static const char ops[] = "FBIW";
	for (int i = s->first[r]; i < s->first[r + 1] && at < n; i++)
		at += (size_t)snprintf(out + at, n - at, "%s%d%c%d", i > s->first[r] ? " " : "",
				       s->act[i].stage, ops[s->act[i].op], s->act[i].mb);
}

/* Compare a built (or refused) schedule with the golden lines after a header;
 * *i ends on the next header.  Returns the number of cases that differ. */
static int compare(lines *l, int *i, int rc, const pp_schedule *s, const titan_err *e,
		   int exact_errors)
{
	const char *head = l->v[*i];
	int bad = 0;
	(*i)++;
	if (*i < l->n && strncmp(l->v[*i], "error: ", 7) == 0) {
		const char *want = l->v[*i] + 7;
		(*i)++;
		if (rc == 0) {
			print_error("%s: built, torch refuses: %s\n", head, want);
			return 1;
		}
		if (exact_errors && strcmp(e->msg, want) != 0) {
			print_error("%s:\n  titan: %s\n  torch: %s\n", head, e->msg, want);
			return 1;
		}
		return 0;
	}
	if (rc != 0) {
		print_error("%s: titan refuses (%s), torch builds it\n", head, e->msg);
		bad = 1;
	}
	char got[8192];
	for (int r = 0; *i < l->n && strncmp(l->v[*i], "rank ", 5) == 0; r++, (*i)++) {
		const char *want = strchr(l->v[*i], ':') + 2;
		if (bad)
			continue;
		if (r >= s->n_ranks) {
			print_error("%s: torch has more ranks\n", head);
			return 1;
		}
		rank_str(s, r, got, sizeof got);
		if (strcmp(got, want) != 0) {
			print_error("%s rank %d:\n  titan: %s\n  torch: %s\n", head, r, got, want);
			bad = 1;
		}
	}
	return bad;
}

static void schedules_equal_torchs_order(void **state)
{
	(void)state;
	lines l;
	lines_read(&l, "schedules.txt");
	int cases = 0, bad = 0;
	for (int i = 0; i < l.n;) {
		char name[64];
		int p, v, m;
		if (sscanf(l.v[i], "case %63s pp=%d spr=%d nmb=%d", name, &p, &v, &m) != 4) {
			i++;
			continue;
		}
		pp_kind k;
		titan_err e = {0};
		assert_int_equal(pp_kind_parse(name, &k, &e), 0);
		pp_schedule *s = NULL;
		int rc = pp_schedule_build(k, p, v, m, &s, &e);
		if (rc == 0 && pp_schedule_check(s, &e) != 0) {
			print_error("%s: titan's check refuses its own schedule: %s\n", l.v[i], e.msg);
			bad++;
		}
		bad += compare(&l, &i, rc, s, &e, 1);
		pp_schedule_free(s);
		cases++;
	}
	print_message("%d schedule cases against torch, %d differ\n", cases, bad);
	assert_true(cases > 200);
	assert_int_equal(bad, 0);
	lines_free(&l);
}

/* The split: stage k's modules as torchtitan names them. */
static void modules_str(const pp_split *s, int k, int L, char *out, size_t n)
{
	size_t at = 0;
	out[0] = '\0';
	for (int u = s->u0[k]; u <= s->u1[k] && at < n; u++) {
		const char *sep = at ? " " : "";
		if (u == 0)
			at += (size_t)snprintf(out + at, n - at, "%stok_embeddings", sep);
		else if (u <= L)
			at += (size_t)snprintf(out + at, n - at, "%slayers.%d", sep, u - 1);
		else
			at += (size_t)snprintf(out + at, n - at, "%snorm output", sep);
	}
}

static void split_equals_torchtitans(void **state)
{
	(void)state;
	lines l;
	lines_read(&l, "split.txt");
	int cases = 0, bad = 0;
	for (int i = 0; i < l.n;) {
		int n, L, iw, ow;
		if (sscanf(l.v[i], "split stages=%d layers=%d in=%d out=%d", &n, &L, &iw, &ow) != 4) {
			i++;
			continue;
		}
		/* One stage per rank under 1F1B: the split's count is the ranks'. */
		pp_split_args a = {.n_layers = L, .pp = n, .kind = PP_1F1B, .first_less = iw,
				   .last_less = ow};
		pp_split s;
		titan_err e = {0};
		int rc = pp_split_make(&a, &s, &e);
		const char *head = l.v[i++];
		cases++;
		if (i < l.n && strncmp(l.v[i], "error: ", 7) == 0) {
			if (rc == 0 || strcmp(e.msg, l.v[i] + 7) != 0) {
				print_error("%s:\n  titan: %s\n  torchtitan: %s\n", head,
					    rc ? e.msg : "(split)", l.v[i] + 7);
				bad++;
			}
			if (rc == 0)
				pp_split_free(&s);
			i++;
			continue;
		}
		if (rc != 0) {
			print_error("%s: titan refuses: %s\n", head, e.msg);
			bad++;
		}
		char got[4096];
		for (int k = 0; i < l.n && strncmp(l.v[i], "stage ", 6) == 0; k++, i++) {
			if (rc != 0)
				continue;
			modules_str(&s, k, L, got, sizeof got);
			if (strcmp(got, strchr(l.v[i], ':') + 2) != 0) {
				print_error("%s stage %d:\n  titan: %s\n  torchtitan: %s\n", head, k, got,
					    strchr(l.v[i], ':') + 2);
				bad++;
			}
		}
		if (rc == 0)
			pp_split_free(&s);
	}
	print_message("%d split cases against torchtitan, %d differ\n", cases, bad);
	assert_true(cases > 100);
	assert_int_equal(bad, 0);
	lines_free(&l);
}

/* torch's refusal of a bad CSV and the words titan's refusal must contain:
 * the same sentence where torch's validation names the action, else the
 * same fault in titan's words. */
static const char *titan_words(const char *torch, char *buf, size_t n)
{
	static const char *const same[][2] = {
		{"Got 3 ", "micro-batch 2 out of range"},
		{"Malformed compute schedule", "the schedule deadlocks"},
		{"I and W must have equal counts", "I and W must have equal counts"},
		{"Invalid action string", "expected an action type"},
		{"Schedule has incorrect number of ranks", "Schedule has incorrect number of ranks"},
	};
	for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
		if (strstr(torch, same[i][0]))
			return same[i][1];
	/* "Rank 0, step 6: Running ... without first running Forward Full pipeline..." */
	const char *from = strstr(torch, "Running "), *to = strstr(torch, " Full pipeline");
	if (from == NULL || to == NULL || to < from)
		return torch;
	snprintf(buf, n, "%.*s", (int)(to - from), from);
	return buf;
}

static void csv_schedules_read_as_torch_reads_them(void **state)
{
	(void)state;
	lines l;
	lines_read(&l, "csv.txt");
	int cases = 0, bad = 0, refused = 0;
	for (int i = 0; i < l.n;) {
		char file[128];
		int p, n, m;
		if (sscanf(l.v[i], "csv %127s pp=%d stages=%d nmb=%d", file, &p, &n, &m) != 4) {
			i++;
			continue;
		}
		char path[700];
		snprintf(path, sizeof path, "csv/%s", file);
		snprintf(path, sizeof path, "%s", golden(path));
		pp_schedule *s = NULL;
		titan_err e = {0};
		int rc = pp_schedule_read_csv(path, p, n, m, &s, &e);
		cases++;
		if (i + 1 < l.n && strncmp(l.v[i + 1], "error: ", 7) == 0) {
			char buf[512];
			const char *want = titan_words(l.v[i + 1] + 7, buf, sizeof buf);
			if (rc == 0 || strstr(e.msg, want) == NULL) {
				print_error("%s: titan: %s\n  expected words: %s\n", l.v[i],
					    rc ? e.msg : "(read it)", want);
				bad++;
			}
			refused++;
			i += 2;
			pp_schedule_free(s);
			continue;
		}
		bad += compare(&l, &i, rc, s, &e, 0);
		if (rc == 0) {
			/* Written back and read again: the same schedule. */
			char *text = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&text, &len);
			assert_int_equal(pp_schedule_write_csv(s, f), 0);
			fclose(f);
			pp_schedule *t = NULL;
			assert_int_equal(pp_schedule_parse_csv("again", text, len, p, n, m, &t, &e), 0);
			assert_int_equal(pp_schedule_crc(t), pp_schedule_crc(s));
			pp_schedule_free(t);
			free(text);
		}
		pp_schedule_free(s);
	}
	print_message("%d CSV cases against torch (%d refused), %d differ\n", cases, refused, bad);
	assert_true(cases >= 15 && refused >= 8);
	assert_int_equal(bad, 0);
	lines_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(schedules_equal_torchs_order),
		cmocka_unit_test(split_equals_torchtitans),
		cmocka_unit_test(csv_schedules_read_as_torch_reads_them),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
