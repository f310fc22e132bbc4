/* case_batch.h: many cases of a program in one run of it (one mpirun).
 *
 * Starting an MPI job costs about a second, several under the sanitizers
 * (Open MPI's start and its allocations checked at exit), more than a case of
 * tests/plan/equiv.sh computes.  So the scripts name the cases of one world
 * size together in the program's variable, separated by ';'
 * ("steps=2 shard=2; steps=2 tp=2"), and the program runs its tests once per
 * case, each named "TEST [CASE]", with the variable set to that case alone
 * while they run: the programs read their case with getenv as when they are
 * run for one.  Include after cmocka.h. */
#ifndef TITAN_TEST_CASE_BATCH_H
#define TITAN_TEST_CASE_BATCH_H

#include <stddef.h>

/* Run tests (n of them) once per case of variable var (unset or empty: once,
 * under their own names); cmocka's status, or -1 when out of memory. */
int case_batch_run(const char *var, const struct CMUnitTest *tests, size_t n);

#endif
