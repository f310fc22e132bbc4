/* The report every subcommand builds, printed as a table or as JSON. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/cli.h"
#include "core/cpu_isa.h"
#include "core/json.h"

void rset(json_t *o, const char *key, json_t *v)
{
	/* A value jansson could not make is dropped: the cell prints as "-". */
	if (v != NULL)
		json_object_set_new(o, key, v);
}

int report_init(report *r, const char *bench, const bench_args *a, titan_err *e)
{
	char load[64], cpu[512];
	r->doc = json_object();
	r->rows = json_array();
	r->unavailable = json_array();
	r->notes = json_array();
	if (!r->doc || !r->rows || !r->unavailable || !r->notes) {
		report_free(r);
		return err_set(e, "out of memory");
	}
	bench_loadavg(load, sizeof load);
	backend_cpu_describe(cpu, sizeof cpu);
	rset(r->doc, "bench", json_string(bench));
	rset(r->doc, "titan_version", json_string(TITAN_VERSION));
	rset(r->doc, "device", json_string(a->device));
	rset(r->doc, "threads", json_integer(a->threads));
	rset(r->doc, "load", json_string(load));
	/* how the CPU computes: the level in force, the kernels' build, the bf16
	 * GEMMs' path and OpenBLAS's kernel (TITAN_CPU_ISA moves the first three) */
	rset(r->doc, "cpu", json_string(cpu));
	rset(r->doc, "cpu_level", json_string(cpu_level_name(cpu_isa_level())));
	json_object_set(r->doc, "rows", r->rows);
	json_object_set(r->doc, "unavailable", r->unavailable);
	json_object_set(r->doc, "notes", r->notes);
	return 0;
}

void report_free(report *r)
{
	json_decref(r->doc);
	json_decref(r->rows);
	json_decref(r->unavailable);
	json_decref(r->notes);
	memset(r, 0, sizeof *r);
}

json_t *report_row(report *r)
{
	json_t *row = json_object();
	if (row != NULL)
		json_array_append_new(r->rows, row);
	return row;
}

void report_unavailable(report *r, const char *what, const char *why)
{
	json_t *u = json_object();
	if (u == NULL)
		return;
	rset(u, "what", json_string(what));
	rset(u, "why", json_string(why));
	json_array_append_new(r->unavailable, u);
}

void report_note(report *r, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	json_array_append_new(r->notes, json_string(buf));
}

static void cell(char *out, size_t n, const json_t *v, const char *fmt)
{
	if (json_is_string(v))
		snprintf(out, n, "%s", json_string_value(v));
	else if (json_is_integer(v))
		snprintf(out, n, "%" PRId64, (int64_t)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(out, n, fmt ? fmt : "%.3g", json_real_value(v));
	else if (json_is_boolean(v))
		snprintf(out, n, "%s", json_is_true(v) ? "yes" : "no");
	else
		snprintf(out, n, "-");
}

/* Columns left-aligned when they hold text, right-aligned when numbers. */
static void print_table(const report *r, const report_col *cols, int ncols)
{
	size_t nrows = json_array_size(r->rows);
	int width[32] = {0}, text[32] = {0};
	char buf[128];
	for (int c = 0; c < ncols && c < 32; c++) {
		width[c] = (int)strlen(cols[c].head);
		for (size_t i = 0; i < nrows; i++) {
			const json_t *v = json_object_get(json_array_get(r->rows, i), cols[c].key);
			cell(buf, sizeof buf, v, cols[c].fmt);
			if ((int)strlen(buf) > width[c])
				width[c] = (int)strlen(buf);
			text[c] |= json_is_string(v);
		}
	}
	for (int c = 0; c < ncols && c < 32; c++)
		printf("%s%*s", c ? "  " : "", text[c] ? -width[c] : width[c], cols[c].head);
	printf("\n");
	for (size_t i = 0; i < nrows; i++) {
		for (int c = 0; c < ncols && c < 32; c++) {
			cell(buf, sizeof buf, json_object_get(json_array_get(r->rows, i), cols[c].key),
			     cols[c].fmt);
			printf("%s%*s", c ? "  " : "", text[c] ? -width[c] : width[c], buf);
		}
		printf("\n");
	}
}

int report_emit(const report *r, const report_col *cols, int ncols, int json, titan_err *e)
{
	if (json) {
		char *s = tjson_dump_str(r->doc);
		if (s == NULL)
			return err_set(e, "out of memory");
		fputs(s, stdout);
		free(s);
	} else {
		static const char *const ceilings[][2] = {{"ceiling", "float32"},
							  {"ceiling_bf16", "bf16"}};
		printf("titan-bench %s: %s, %lld threads, load %s\n",
		       json_string_value(json_object_get(r->doc, "bench")),
		       json_string_value(json_object_get(r->doc, "device")),
		       (long long)json_integer_value(json_object_get(r->doc, "threads")),
		       json_string_value(json_object_get(r->doc, "load")));
		printf("cpu: %s\n", json_string_value(json_object_get(r->doc, "cpu")));
		for (int c = 0; c < 2; c++) {
			const json_t *ceil = json_object_get(r->doc, ceilings[c][0]);
			if (ceil != NULL)
				printf("ceiling %s: %.3f TFLOP/s (%s)\n", ceilings[c][1],
				       json_real_value(json_object_get(ceil, "tflops")),
				       json_string_value(json_object_get(ceil, "what")));
		}
		if (json_array_size(r->rows) > 0)
			print_table(r, cols, ncols);
		size_t i;
		json_t *v;
		json_array_foreach(r->unavailable, i, v)
			printf("not available: %s: %s\n",
			       json_string_value(json_object_get(v, "what")),
			       json_string_value(json_object_get(v, "why")));
		json_array_foreach(r->notes, i, v)
			printf("%s\n", json_string_value(v));
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		return err_errno(e, "stdout");
	return 0;
}
