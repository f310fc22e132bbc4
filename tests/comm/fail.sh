#!/bin/sh
# A rank that dies, hangs or fails ends the whole job within seconds, with the
# failing rank and the reason printed, never a hang (test_comm_fail's modes,
# under mpirun; each run is bounded by timeout(1) so that a hang fails here).
. tests/lib.sh

T=$BUILD/tests/comm/test_comm_fail

# run NAME LIMIT_S ARGS...: the job's status in $rc, its seconds in $secs,
# its output in $TMP/NAME.log
run() {
	name=$1 limit=$2
	shift 2
	t0=$(date +%s)
	timeout -k 5 60 "$@" >"$TMP/$name.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	[ "$secs" -le "$limit" ] || rc=999
}

# expect NAME PATTERN: a non-zero exit within the limit, PATTERN in the output
expect() {
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 999 ] && [ "$rc" -ne 124 ] && grep -q -e "$2" "$TMP/$1.log"; then
		t_ok "$1 (${secs}s)"
	else
		t_not_ok "$1 (${secs}s)" "exit $rc (999: too slow, 124: hung): $(grep -v '^-*$' "$TMP/$1.log" | head -12)"
	fi
}

run kill_9_of_one_rank_ends_the_job_naming_it 30 $MPIRUN -np 2 "$T" kill 1 100
expect kill_9_of_one_rank_ends_the_job_naming_it 'rank 1'

# With recovery on, mpirun leaves the other ranks running (and exits 0): the
# comm watchdog is what notices the dead rank and ends the job: in the middle
# of an all-reduce, or (on a loaded machine, when the death is seen first)
# before the next one starts.
run the_watchdog_names_a_dead_rank_the_launcher_ignores 30 $MPIRUN --enable-recovery -np 3 "$T" kill 2 100
if [ "$rc" -ne 999 ] && [ "$rc" -ne 124 ] &&
	grep -Eq "rank [01]: comm 'world' \(rank [01] of 3\): all_reduce (#[0-9]+ \(1048576 bytes\) abandoned|not started): rank 2 \(pid [0-9]+ on .*\) has died" \
		"$TMP/the_watchdog_names_a_dead_rank_the_launcher_ignores.log"; then
	t_ok "the watchdog names a dead rank the launcher ignores (${secs}s)"
else
	t_not_ok "the watchdog names a dead rank the launcher ignores (${secs}s)" \
		"exit $rc: $(head -12 "$TMP/the_watchdog_names_a_dead_rank_the_launcher_ignores.log")"
fi

run a_hung_rank_times_the_others_out 30 $MPIRUN -np 2 "$T" hang 1 2
expect a_hung_rank_times_the_others_out "rank 0: comm 'world': all_reduce #[0-9]* (1048576 bytes) timed out after 2 s: rank 1, the other rank of 'world', did not take part"

run a_failing_rank_ends_the_job_with_its_reason 30 $MPIRUN -np 3 "$T" error 1 100
expect a_failing_rank_ends_the_job_with_its_reason 'rank 1: simulated failure: cannot read data/shard-000007.bin'

run the_same_job_without_a_failure_completes 30 $MPIRUN -np 2 "$T" ok 1 100
if [ "$rc" -eq 0 ] && [ "$(grep -c 'steps done' "$TMP/the_same_job_without_a_failure_completes.log")" -eq 2 ]; then
	t_ok "the same job without a failure completes (${secs}s)"
else
	t_not_ok "the same job without a failure completes" "exit $rc: $(head -5 "$TMP/the_same_job_without_a_failure_completes.log")"
fi

# Processes a launcher started as several ranks, each seeing itself alone
# (srun without --mpi, torchrun), would each train alone: refused.
run separate_worlds_are_refused 30 env SLURM_STEP_NUM_TASKS=2 "$T" ok 0 100
expect separate_worlds_are_refused 'the launcher started 2 processes but MPI sees each alone'
t_done
