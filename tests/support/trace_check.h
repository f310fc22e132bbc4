/* trace_check.h: the Chrome trace-event format's rules for the traces
 * lib/prof writes, as cmocka assertions (tests/prof, tests/plan). */
#ifndef TITAN_TRACE_CHECK_H
#define TITAN_TRACE_CHECK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The JSON file at path (a failed assertion when it does not parse). */
json_t *trace_load(const char *path);
/* The format's rules, event by event and track by track, for the trace of
 * rank: the required fields of each phase type, one process named "rank R",
 * a named track for every thread, complete events in time order that nest.
 * Returns the number of complete events; sets steps[s] for each
 * ProfilerStep#s seen (s < max_steps). */
size_t trace_validate(const json_t *root, int rank, int *steps, int max_steps);
/* How many events named name have args[key] == want (want < 0: any value;
 * key NULL: every event of that name). */
int trace_count(const json_t *root, const char *name, const char *key, int64_t want);

#endif
