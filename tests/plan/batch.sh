#!/bin/sh
# The batches of tests/lib.sh (t_mpi_queue, t_mpi_cases: the cases of one
# world size in one mpirun, tests/support/case_batch.h) report each case on
# its own: a case refused in the middle of a batch is not ok with its
# message, the cases before and after it are ok with their own figures, and
# the batch counts one test per case.
. tests/lib.sh
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
T=$BUILD/tests/plan/test_plan

cat >"$TMP/batch.sh" <<EOF
. tests/lib.sh
t_mpi_queue 2 "$T" TITAN_PLAN_TEST "steps=1 shard=2" "fsdp"
t_mpi_queue 2 "$T" TITAN_PLAN_TEST "steps=1 shard=2 bogus=1" "unknown key"
t_mpi_queue 2 "$T" TITAN_PLAN_TEST "steps=1 tp=2" "tp after the refused case"
t_done
EOF
sh "$TMP/batch.sh" >"$TMP/out" 2>&1
t_grep "a good case before a refused one is ok with its figures" \
	'^ok 1 fsdp on 2 ranks (batch of 3: .*worst differences: loss' "$TMP/out"
t_grep "the refused case is not ok" '^not ok 2 unknown key on 2 ranks' "$TMP/out"
t_grep "... with the program's message" 'unknown key "bogus"' "$TMP/out"
t_grep "the case after it runs and is ok" '^ok 3 tp after the refused case on 2 ranks' "$TMP/out"
t_grep "one test per case" '^# 3 tests, 1 failed' "$TMP/out"
t_done
