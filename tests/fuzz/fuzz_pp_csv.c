/* fuzz_pp_csv: lib/pp's reader of torch's schedule CSVs on arbitrary bytes.
 *
 * Input: one byte choosing the pipeline's shape (ranks 1-4, stages per rank
 * 1-2, micro-batches 1-4), then the CSV text.
 * Properties: reading never crashes and fails with a message naming the file;
 * what it accepts passes pp_schedule_check, and written back reads back as the
 * same schedule (the writer and the reader agree). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp/pp.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int p = 1 + (data[0] & 3), n = p * (1 + ((data[0] >> 2) & 1)), m = 1 + ((data[0] >> 3) & 3);
	titan_err e;
	e.msg[0] = '\0';
	pp_schedule *s = NULL;
	if (pp_schedule_parse_csv("f.csv", (const char *)data + 1, size - 1, p, n, m, &s, &e)) {
		check(strncmp(e.msg, "f.csv", 5) == 0);
		return 0;
	}
	check(pp_schedule_check(s, &e) == 0);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	check(f != NULL && pp_schedule_write_csv(s, f) == 0);
	fclose(f);
	pp_schedule *t = NULL;
	check(pp_schedule_parse_csv("again", text, len, p, n, m, &t, &e) == 0);
	check(pp_schedule_crc(t) == pp_schedule_crc(s));
	pp_schedule_free(t);
	pp_schedule_free(s);
	free(text);
	return 0;
}
